//! hilock's cancel (`spec/SPEC.md` 1.13): `Input::Cancel` withdraws the site's pending
//! request, try or upgrade and is answered at once with `Output::Cancelled`. A request or
//! try keeps running in the protocol; when its grant or the token arrives the site releases
//! at once by Rule 5 and no `Granted` follows. A pending upgrade is withdrawn at once and
//! the site keeps U. Every step runs in the one harness with every safety property checked
//! after it, P14 (no grant after Cancel) and P15 (a cancel leaves nothing) included.

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{FaultSite, Stamped};
use hilock_kernel::{Input, KernelError, Mode, Msg, NodeId, Output, Pending, Rule};

use crate::star;
use star::*;

fn cancel(c: &mut Cluster<S>, at: u16) -> Log {
    step(c, at, Input::Cancel { lock: L })
}

/// Whether `log` has an output of node `n` matching `f`.
fn has(log: &Log, n: u16, f: impl Fn(&Output<Msg<4>>) -> bool) -> bool {
    log.iter().any(|(at, o)| *at == n && f(o))
}
fn granted(log: &Log, n: u16) -> bool {
    has(log, n, |o| {
        matches!(o, Output::Granted { .. } | Output::Upgraded { .. })
    })
}

/// Whether the sites of `a` and `b` are equal (a refused input changes no site; the
/// harness records the refusal itself).
fn same_sites(a: &Cluster<S>, b: &Cluster<S>) -> bool {
    a.sites().eq(b.sites()) && a.in_flight() == b.in_flight()
}

/// Node 0 (the token node) holds R, node 1 gets an R copy, node 0 releases: node 0 owns R
/// through its child, so its own W request waits in its queue (Rule 4.2).
fn token_node_owns_r_through_a_child() -> Cluster<S> {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::R);
    release(&mut c, 0);
    assert!(node(&c, 0).has_token());
    c
}

/// Node `n`'s state of the lock.
fn node(c: &Cluster<S>, n: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(n)).lock(L).unwrap()
}

/// `spec/SPEC.md` 1.13: a cancel with nothing pending — nothing ever asked, a held lock, or
/// a request already cancelled — is `NotPending`, and the site and the network are
/// unchanged.
#[test]
fn a_cancel_with_nothing_pending_is_refused_and_changes_nothing() {
    let mut c = star();
    let before = c.clone();
    let e = c.input(NodeId(1), Input::Cancel { lock: L }).unwrap_err();
    assert!(
        e.to_string().contains("nothing of lock L0 is pending"),
        "{e}"
    );
    assert!(same_sites(&c, &before));
    acquire(&mut c, 1, Mode::R);
    let before = c.clone();
    assert!(c.input(NodeId(1), Input::Cancel { lock: L }).is_err());
    assert!(same_sites(&c, &before));
    // A request already cancelled cannot be cancelled twice.
    let mut c = star();
    step(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    cancel(&mut c, 1);
    let mut site = c.site(NodeId(1)).clone();
    let mut out: heapless::Vec<Output<Msg<4>>, 16> = heapless::Vec::new();
    assert_eq!(
        site.step(Input::Cancel { lock: L }, &mut out),
        Err(KernelError::NotPending(L))
    );
    assert!(out.is_empty() && site == *c.site(NodeId(1)));
}

/// `spec/SPEC.md` 1.13 at the token node (Rule 4.2): node 0's own W request waits in its
/// queue behind node 1's R copy; cancelled, it stays queued (it keeps running) and node 0
/// says `Cancelled` at once; when node 1 releases, Rule 3.2 serves it and node 0 releases
/// at once (Rule 5) without `Granted`; node 2 then gets W.
#[test]
fn a_cancelled_request_queued_at_the_token_node_is_released_when_its_turn_comes() {
    let mut c = token_node_owns_r_through_a_child();
    let log = acquire(&mut c, 0, Mode::W);
    assert!(!granted(&log, 0));
    assert_eq!(node(&c, 0).queue().len(), 1);
    let log = cancel(&mut c, 0);
    assert_eq!(log, vec![(0, Output::Cancelled { lock: L })]);
    assert!(node(&c, 0).cancelled() && node(&c, 0).queue().len() == 1);
    let log = release(&mut c, 1);
    assert!(!granted(&log, 0), "{log:?}");
    let n0 = node(&c, 0);
    assert_eq!(
        (n0.held(), n0.pending(), n0.cancelled()),
        (Mode::Phi, Pending::None, false)
    );
    assert!(n0.queue().is_empty() && n0.frozen().is_empty());
    let log = acquire(&mut c, 2, Mode::W);
    assert!(granted(&log, 2), "{log:?}");
    assert!(c.rules_fired().contains(Rule::Cancel));
}

/// `spec/SPEC.md` 1.13 at a non-token node: node 2's request is still in flight when it is
/// cancelled. The copy grant (Rule 3.2) arrives and node 2 releases at once (Rule 5.2: a
/// release to its parent), so node 0's record of node 2 is Φ again. Likewise node 1's W:
/// the token arrives and node 1 stays the token node, holding nothing; the next requester
/// gets it.
#[test]
fn a_cancelled_request_is_released_when_its_grant_arrives() {
    // A copy grant.
    let mut c = token_node_owns_r_through_a_child();
    step(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    assert_eq!(cancel(&mut c, 2), vec![(2, Output::Cancelled { lock: L })]);
    let log = settle(&mut c);
    assert!(!granted(&log, 2), "{log:?}");
    assert!(has(&log, 2, |o| matches!(
        o,
        Output::Send {
            to: NodeId(0),
            msg: Msg::Release {
                owned: Mode::Phi,
                ..
            }
        }
    )));
    assert_eq!(node(&c, 2).held(), Mode::Phi);
    assert_eq!(node(&c, 0).peers()[2].child_owned, Mode::Phi);
    release(&mut c, 1);
    assert!(granted(&acquire(&mut c, 3, Mode::W), 3));
    // The token.
    let mut c = star();
    step(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    cancel(&mut c, 1);
    let log = settle(&mut c);
    assert!(!granted(&log, 1), "{log:?}");
    let n1 = node(&c, 1);
    assert!(n1.has_token());
    assert_eq!((n1.held(), n1.pending()), (Mode::Phi, Pending::None));
    let log = acquire(&mut c, 2, Mode::W);
    assert!(granted(&log, 2), "{log:?}");
}

/// `spec/SPEC.md` 1.13: a cancelled request keeps the requests that Rule 4.1 (Table 2.3 Q)
/// queued behind it and serves them once its own token arrives and is released. In the
/// chain 0 ← 1 ← 2 (3 a child of 0), node 3 holds W, node 1 waits for W and keeps node 2's
/// W request behind its own; node 1 cancels; when node 3 releases, the token reaches node
/// 1, which releases at once and passes the token on to node 2.
#[test]
fn a_cancelled_request_passes_on_what_waits_behind_it() {
    let mut c = chain();
    acquire(&mut c, 3, Mode::W);
    acquire(&mut c, 1, Mode::W);
    acquire(&mut c, 2, Mode::W);
    assert_eq!(
        node(&c, 1).queue().len(),
        1,
        "Table 2.3 (W, W) = Q at node 1"
    );
    cancel(&mut c, 1);
    let log = release(&mut c, 3);
    assert!(!granted(&log, 1) && granted(&log, 2), "{log:?}");
    assert_eq!(node(&c, 1).held(), Mode::Phi);
}

/// `spec/SPEC.md` 1.13, Rule 7: node 0 holds U and waits for W while node 1 holds R; a
/// reader (node 2) waits behind the upgrade (Table 2.4 freezes R). Cancelled, the upgrade
/// is withdrawn at once: node 0 keeps U, R is no longer frozen and node 2 gets its copy in
/// the same step; no `Upgraded` follows and node 0 may release U.
#[test]
fn a_cancelled_upgrade_keeps_u_and_lets_the_waiting_reader_in() {
    let mut c = star();
    acquire(&mut c, 0, Mode::U);
    acquire(&mut c, 1, Mode::R);
    let log = run(&mut c, 0, Input::Upgrade { lock: L });
    assert!(!granted(&log, 0));
    let log = acquire(&mut c, 2, Mode::R);
    assert!(!granted(&log, 2), "the reader waits behind the upgrade");
    let log = run(&mut c, 0, Input::Cancel { lock: L });
    assert_eq!(log.first(), Some(&(0, Output::Cancelled { lock: L })));
    assert!(granted(&log, 2), "{log:?}");
    let n0 = node(&c, 0);
    assert_eq!((n0.held(), n0.pending()), (Mode::U, Pending::None));
    let log = release(&mut c, 1);
    assert!(!granted(&log, 0), "{log:?}");
    release(&mut c, 2);
    release(&mut c, 0);
    assert!(granted(&acquire(&mut c, 3, Mode::W), 3));
}

/// `spec/SPEC.md` 1.13 with 1.12: a cancelled try ends without `WouldBlock` when the busy
/// answer comes, and without `Granted` (released at once) when the grant comes.
#[test]
fn a_cancelled_try_ends_without_would_block_or_grant() {
    let mut c = star();
    acquire(&mut c, 1, Mode::W);
    step(
        &mut c,
        2,
        Input::TryAcquire {
            lock: L,
            mode: Mode::R,
        },
    );
    cancel(&mut c, 2);
    let log = settle(&mut c);
    assert!(
        !has(&log, 2, |o| matches!(o, Output::WouldBlock { .. })),
        "{log:?}"
    );
    assert_eq!(node(&c, 2).pending(), Pending::None);
    release(&mut c, 1);
    let mut c = star();
    step(
        &mut c,
        2,
        Input::TryAcquire {
            lock: L,
            mode: Mode::R,
        },
    );
    cancel(&mut c, 2);
    let log = settle(&mut c);
    assert!(!granted(&log, 2), "{log:?}");
    assert_eq!(node(&c, 2).held(), Mode::Phi);
    assert!(granted(&acquire(&mut c, 3, Mode::W), 3));
}

/// `spec/SPEC.md` 1.13: asking again for the same mode takes the cancelled request back
/// (no message; its grant is `Granted`); another mode is `CancelRunning` and changes
/// nothing until the cancelled request has completed.
#[test]
fn asking_again_takes_a_cancelled_request_of_the_same_mode_back() {
    let mut c = star();
    acquire(&mut c, 3, Mode::W);
    step(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    cancel(&mut c, 1);
    let before = c.clone();
    assert!(c
        .input(
            NodeId(1),
            Input::Acquire {
                lock: L,
                mode: Mode::R
            }
        )
        .is_err());
    assert!(c
        .input(
            NodeId(1),
            Input::TryAcquire {
                lock: L,
                mode: Mode::W
            }
        )
        .is_err());
    assert!(same_sites(&c, &before));
    let log = step(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    assert!(log.is_empty(), "no message: {log:?}");
    assert!(!node(&c, 1).cancelled());
    let log = release(&mut c, 3);
    assert!(granted(&log, 1), "{log:?}");
}

/// The refusal of another mode names the rule: `CancelRunning`, on a single site.
#[test]
fn another_mode_while_a_cancelled_request_runs_is_cancel_running() {
    let mut s = S::new(NodeId(1), NodeId(0)).unwrap();
    let mut out: heapless::Vec<Output<Msg<4>>, 16> = heapless::Vec::new();
    s.step(
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    s.step(Input::Cancel { lock: L }, &mut out).unwrap();
    out.clear();
    let before = s.clone();
    assert_eq!(
        s.step(
            Input::Acquire {
                lock: L,
                mode: Mode::R
            },
            &mut out
        ),
        Err(KernelError::CancelRunning(L))
    );
    assert!(out.is_empty() && s == before);
}

/// `FaultSite` accepts a cancel like its site (the output stamped with its epoch); the
/// Naimi-Trehel baseline refuses it with `CancelUnsupported`, changing nothing.
#[test]
fn a_fault_site_cancels_and_the_baseline_refuses_to() {
    use hilock_kernel::Protocol;
    let mut f = FaultSite::new(S::new(NodeId(1), NodeId(0)).unwrap());
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    Protocol::step(
        &mut f,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    out.clear();
    Protocol::step(&mut f, Input::Cancel { lock: L }, &mut out).unwrap();
    assert_eq!(&out[..], &[Output::Cancelled { lock: L }]);
    assert!(f.site().lock(L).unwrap().cancelled());
    baseline_refuses(
        false,
        Input::Cancel { lock: L },
        KernelError::CancelUnsupported(L),
    );
}
