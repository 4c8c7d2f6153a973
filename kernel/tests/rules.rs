//! Rule-by-rule tests of the hierarchical protocol on a few sites, named after the rule and
//! table they check.

use hilock_harness::Cluster;
use hilock_kernel::{
    Frozen, Input, KernelError, LockId, Mode, ModeSet, Msg, NodeId, Output, Outputs, Site, Variant,
};
use std::ops::{Index, IndexMut};

type S = Site<4, 2, 4>;
type Out = Outputs<Msg<4>, 16>;
const L: LockId = LockId(0);

/// A few sites in the one harness; `net[i]` is site `i`. Every safety property of the
/// harness is checked after every step unless the flag is off (the literal thesis variants
/// break them on purpose).
struct Net(Cluster<S>, bool);

impl Index<usize> for Net {
    type Output = S;
    fn index(&self, i: usize) -> &S {
        self.0.site(NodeId(i as u16))
    }
}

impl IndexMut<usize> for Net {
    fn index_mut(&mut self, i: usize) -> &mut S {
        self.0.site_mut(NodeId(i as u16))
    }
}

fn of(sites: impl Iterator<Item = S>) -> Net {
    Net(Cluster::new(sites.collect()), true)
}

fn sites() -> Net {
    of((0..4).map(|i| S::new(NodeId(i), NodeId(0)).unwrap()))
}

/// One step at `at`; its messages are in flight. Every safety property of the harness
/// holds after it.
fn step(s: &mut Net, at: u16, input: Input<'_, Msg<4>>) -> Vec<Output<Msg<4>>> {
    let step = s.0.input(NodeId(at), input).unwrap();
    if s.1 {
        s.0.check_safety().unwrap();
    }
    step.outputs
}

/// Delivers every message in flight (and the messages they cause), oldest first, with every
/// safety property checked after every delivery; returns the messages delivered.
fn settle(s: &mut Net) -> Vec<(u16, u16, Msg<4>)> {
    let mut log = vec![];
    let checked = s.1;
    s.0.settle(1000, |c, from, msg, step| {
        log.push((from.0, step.node.0, msg.clone()));
        if checked {
            c.check_safety()?;
        }
        Ok(())
    })
    .unwrap();
    log
}

/// Delivers the oldest message on channel `from → to`.
fn deliver(s: &mut Net, from: u16, to: u16) {
    let (_, r) = s.0.deliver(NodeId(from), NodeId(to)).expect("a message");
    r.unwrap();
    if s.1 {
        s.0.check_safety().unwrap();
    }
}

/// Delivers `msg` from `from` to `to` once more: it is refused as a duplicate and changes
/// nothing at `to`.
fn assert_redelivery_refused(s: &mut Net, from: u16, to: u16, msg: &Msg<4>) {
    let before = s[to as usize].clone();
    let again = s.0.inject(NodeId(from), NodeId(to), msg);
    assert_eq!(
        again.err().and_then(|e| e.kernel()),
        Some(KernelError::Duplicate(L))
    );
    assert_eq!(s[to as usize], before);
}

fn acquire(s: &mut Net, at: u16, mode: Mode) -> Vec<(u16, u16, Msg<4>)> {
    step(s, at, Input::Acquire { lock: L, mode });
    settle(s)
}

fn release(s: &mut Net, at: u16) -> Vec<(u16, u16, Msg<4>)> {
    step(s, at, Input::Release { lock: L });
    settle(s)
}

#[test]
fn rule_2_local_acquire_sends_nothing() {
    let mut s = sites();
    // Node 1 gets the token (Φ < R); node 2's request goes through 0 to 1, which grants a copy.
    acquire(&mut s, 1, Mode::R);
    acquire(&mut s, 2, Mode::R);
    assert_eq!(s[2].lock(L).unwrap().parent(), Some(NodeId(1)));
    // 3 asks 0 (its parent) for IR; 0 owns Φ, forwards to 1 (token), which grants a copy.
    acquire(&mut s, 3, Mode::IR);
    assert_eq!(s[3].lock(L).unwrap().parent(), Some(NodeId(1)));
    release(&mut s, 1);
    assert_eq!(
        s[1].lock(L).unwrap().owned(),
        Mode::R,
        "still owns R through child 2"
    );
    let outs = step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::IR,
        },
    );
    assert_eq!(
        outs,
        vec![Output::Granted {
            lock: L,
            mode: Mode::IR
        }],
        "Rule 2: no message"
    );
}

/// Rule 2 at a non-token node: a chain 0 (token) ← 1 ← 2; node 1 holds an R copy and grants
/// one to 2 (Rule 3.1), releases its own, and still owns R through 2 — so its IR request
/// enters at once, without a message (found by the rule-deletion table: the test above
/// exercises the token node's own grant, and deleting this branch left every test green).
#[test]
fn rule_2_non_token_node_enters_under_its_owned_mode() {
    let mut s = of((0..4).map(|i| {
        let parent = match i {
            0 => None,
            2 => Some(NodeId(1)),
            _ => Some(NodeId(0)),
        };
        S::with_parents(NodeId(i), |_| parent).unwrap()
    }));
    acquire(&mut s, 0, Mode::R);
    acquire(&mut s, 1, Mode::R);
    acquire(&mut s, 2, Mode::R);
    assert_eq!(s[2].lock(L).unwrap().parent(), Some(NodeId(1)));
    assert!(!s[1].lock(L).unwrap().has_token());
    release(&mut s, 1);
    assert_eq!(s[1].lock(L).unwrap().owned(), Mode::R, "owns R through 2");
    let mut out = Out::new();
    let report = s[1]
        .step(
            Input::Acquire {
                lock: L,
                mode: Mode::IR,
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(
        out.into_iter().collect::<Vec<_>>(),
        vec![Output::Granted {
            lock: L,
            mode: Mode::IR
        }],
        "Rule 2: no message"
    );
    assert!(report.rules.contains(hilock_kernel::Rule::Rule2Local));
}

#[test]
fn rule_3_1_child_grants_copy() {
    // A chain 3 → 1 → 0 (token), 2 → 0.
    let mut chain = of((0..4).map(|i| {
        S::with_parents(NodeId(i), |_| match i {
            0 => None,
            3 => Some(NodeId(1)),
            _ => Some(NodeId(0)),
        })
        .unwrap()
    }));
    acquire(&mut chain, 0, Mode::R);
    acquire(&mut chain, 1, Mode::R);
    let log = acquire(&mut chain, 3, Mode::IR);
    // Table 2.2 (R, IR): grantable, so node 1 answers; node 0 never sees the request.
    assert!(log.iter().all(|(f, t, _)| *f != 0 && *t != 0), "{log:?}");
    assert_eq!(chain[3].lock(L).unwrap().parent(), Some(NodeId(1)));
    assert_eq!(
        chain[1].lock(L).unwrap().children().collect::<Vec<_>>(),
        vec![(NodeId(3), Mode::IR)]
    );
    // Table 2.2 (R, U): not grantable by a child; forwarded to the token node, which
    // transfers the token (R < U, compatible).
    acquire(&mut chain, 2, Mode::U);
    assert!(chain[2].lock(L).unwrap().has_token());
}

/// Rule 3.2 (Table 2.2): the token node answers a request its owned mode can share with a
/// copy grant in the step that delivers it; the requester does not wait for a later
/// release (found by the rule-deletion table: deleting this branch left the model checks
/// green, since the queued request is served at the next release).
#[test]
fn rule_3_2_token_node_grants_a_copy_in_the_step_the_request_arrives() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::R);
    step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::IR,
        },
    );
    deliver(&mut s, 1, 0);
    let n0 = s[0].lock(L).unwrap();
    assert!(
        n0.has_token() && n0.queue().is_empty(),
        "granted, not queued"
    );
    deliver(&mut s, 0, 1);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::IR);
}

/// Rule 3.2: the token node's own request that its owned mode can share enters at once,
/// without a message, even while a child holds a copy (deleting this branch left the
/// model checks green: the request waits in the queue until the child's release).
#[test]
fn rule_3_2_token_node_enters_at_once_beside_a_child() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::R);
    acquire(&mut s, 1, Mode::IR);
    release(&mut s, 0);
    let n0 = s[0].lock(L).unwrap();
    assert!(n0.has_token() && n0.held() == Mode::Phi && n0.owned() == Mode::IR);
    let outs = step(
        &mut s,
        0,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    assert_eq!(
        outs,
        vec![Output::Granted {
            lock: L,
            mode: Mode::R
        }]
    );
}

#[test]
fn rule_3_2_token_transfer_makes_the_old_token_node_a_child() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::IR);
    acquire(&mut s, 1, Mode::R);
    let n1 = s[1].lock(L).unwrap();
    assert!(n1.has_token());
    assert_eq!(
        n1.children().collect::<Vec<_>>(),
        vec![(NodeId(0), Mode::IR)]
    );
    assert_eq!(s[0].lock(L).unwrap().parent(), Some(NodeId(1)));
}

#[test]
fn rule_4_2_and_5_1_queue_then_serve_on_release() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::W);
    acquire(&mut s, 1, Mode::R);
    assert_eq!(s[0].lock(L).unwrap().queue().len(), 1);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::Phi);
    release(&mut s, 0);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::R);
}

#[test]
fn rule_6_freeze_reaches_children_that_could_grant() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::R);
    acquire(&mut s, 1, Mode::R);
    let log = acquire(&mut s, 2, Mode::W);
    // Table 2.4 (R, W) = {IR, R, U}; child 1 owns R and could grant IR and R.
    let freeze: Vec<_> = log
        .iter()
        .filter(|(_, _, m)| matches!(m, Msg::Freeze { .. }))
        .collect();
    assert_eq!(freeze.len(), 1, "{log:?}");
    assert_eq!(
        freeze[0].2,
        Msg::Freeze {
            lock: L,
            modes: Frozen::of(ModeSet::of(&[Mode::IR, Mode::R]), 0),
            // `spec/SPEC.md` 1.16: the freeze names the W request that waits.
            waiting: Frozen::of(ModeSet::of(&[Mode::W]), 0),
        }
    );
    assert_eq!(
        s[1].lock(L).unwrap().frozen(),
        ModeSet::of(&[Mode::IR, Mode::R])
    );
}

#[test]
fn rule_7_upgrade_without_children_is_immediate_and_errors_elsewhere() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::U);
    let outs = step(&mut s, 0, Input::Upgrade { lock: L });
    assert_eq!(outs, vec![Output::Upgraded { lock: L }]);
    assert_eq!(s[0].lock(L).unwrap().held(), Mode::W);
    let mut out = Out::new();
    assert_eq!(
        s[1].step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::NotHoldingU(L))
    );
    release(&mut s, 0);
    acquire(&mut s, 1, Mode::R);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::R);
    let mut out = Out::new();
    assert_eq!(
        s[1].step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::NotHoldingU(L))
    );
}

/// Rule 7 (Fig. 2.11) with Table 2.4's column W: while a U holder's upgrade waits for its
/// children, the modes W conflicts with stay frozen at the token node, so a new R request
/// waits behind the upgrade — it is granted neither when it arrives nor when one of the
/// children releases, only after the W holder releases.
#[test]
fn rule_7_a_waiting_upgrade_goes_before_a_new_reader() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::U);
    acquire(&mut s, 1, Mode::IR);
    acquire(&mut s, 3, Mode::IR);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::IR);
    assert_eq!(s[3].lock(L).unwrap().held(), Mode::IR);
    let outs = step(&mut s, 0, Input::Upgrade { lock: L });
    assert!(!outs.contains(&Output::Upgraded { lock: L }), "{outs:?}");
    settle(&mut s);
    acquire(&mut s, 2, Mode::R);
    assert_eq!(
        s[2].lock(L).unwrap().held(),
        Mode::Phi,
        "R granted while the upgrade waits"
    );
    release(&mut s, 1);
    assert_eq!(
        s[2].lock(L).unwrap().held(),
        Mode::Phi,
        "R granted when one child released, before the upgrade"
    );
    release(&mut s, 3);
    assert_eq!(s[0].lock(L).unwrap().held(), Mode::W);
    release(&mut s, 0);
    assert_eq!(s[2].lock(L).unwrap().held(), Mode::R);
}

/// Rule 1, the blank cells of Table 2.1 (p. 10): two nodes that request compatible modes
/// hold them at the same time — the sharing the hierarchy exists for (IR beside IW, R
/// beside R, U beside R). The cells are written out as the thesis prints them: the
/// kernel's own `compatible` is what a deletion changes, so the test does not ask it.
#[test]
fn rule_1_compatible_modes_are_held_at_once() {
    use Mode::*;
    let compatible = [
        (IR, IR),
        (IR, R),
        (IR, U),
        (IR, IW),
        (R, R),
        (R, U),
        (IW, IW),
    ];
    for (a, b) in compatible.into_iter().flat_map(|(a, b)| [(a, b), (b, a)]) {
        let mut s = sites();
        acquire(&mut s, 1, a);
        acquire(&mut s, 2, b);
        assert_eq!(
            (s[1].lock(L).unwrap().held(), s[2].lock(L).unwrap().held()),
            (a, b),
            "{a} then {b}: not held at once"
        );
    }
}

/// Rule 7 (Fig. 2.11): an upgrade that waits for the children is the one pending request;
/// a second `Upgrade` before it completes is refused (`AlreadyPending`) and changes nothing.
#[test]
fn rule_7_a_second_upgrade_while_one_waits_is_refused() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::U);
    acquire(&mut s, 1, Mode::IR);
    step(&mut s, 0, Input::Upgrade { lock: L });
    let before = s[0].clone();
    let mut out = Out::new();
    assert_eq!(
        s[0].step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::AlreadyPending(L))
    );
    assert!(out.is_empty());
    assert_eq!(s[0], before, "a refused upgrade changed the site");
}

/// `HandleRequest` (Fig. 2.4) takes a request for a mode (Table 2.1's columns): a request
/// for Φ from the wire is refused (`InvalidMode`) and changes nothing.
#[test]
fn a_request_for_phi_from_the_wire_is_refused() {
    let mut s = sites();
    let before = s[0].clone();
    let msg = Msg::Request {
        lock: L,
        entry: hilock_kernel::QueueEntry {
            requester: NodeId(1),
            mode: Mode::Phi,
            serial: 1,
            prio: 0,
        },
        hop: 1,
    };
    let mut out = Out::new();
    assert_eq!(
        s[0].step(
            Input::Deliver {
                from: NodeId(1),
                msg: &msg
            },
            &mut out
        ),
        Err(KernelError::InvalidMode)
    );
    assert!(out.is_empty());
    assert_eq!(s[0], before, "a refused request changed the site");
}

/// Grant epochs (`spec/SPEC.md` 1.4, Decision 5): a grant delivered twice is refused the
/// second time (`Duplicate`) and changes nothing — it is not taken for a stale grant to be
/// answered with a release.
#[test]
fn a_redelivered_grant_is_rejected_and_changes_nothing() {
    let mut s = sites();
    acquire(&mut s, 0, Mode::R);
    step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    deliver(&mut s, 1, 0); // the request: the token node grants a copy (Rule 3.2)
    let msg =
        s.0.channel(NodeId(0), NodeId(1))
            .next()
            .expect("grant")
            .clone();
    assert!(matches!(msg, Msg::Grant { .. }), "{msg:?}");
    deliver(&mut s, 0, 1);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::R);
    assert_redelivery_refused(&mut s, 0, 1, &msg);
}

/// Token generations (`spec/SPEC.md` 1.4): a token delivered again after it has moved on is
/// refused (`Duplicate`) and changes nothing — a node never takes a second token.
#[test]
fn a_redelivered_token_is_rejected_after_it_moved_on() {
    let mut s = sites();
    step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    deliver(&mut s, 1, 0); // the request: the token goes to 1 (Rule 3.2)
    let msg =
        s.0.channel(NodeId(0), NodeId(1))
            .next()
            .expect("token")
            .clone();
    assert!(matches!(msg, Msg::Token { .. }), "{msg:?}");
    deliver(&mut s, 0, 1);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::W);
    release(&mut s, 1);
    acquire(&mut s, 2, Mode::W); // the token moves on to 2
    assert!(s[2].lock(L).unwrap().has_token());
    assert!(!s[1].lock(L).unwrap().has_token());
    assert_redelivery_refused(&mut s, 0, 1, &msg);
}

#[test]
fn typed_errors_for_inputs_that_do_not_fit() {
    let mut s = sites();
    let mut out = Out::new();
    let a = &mut s[1];
    assert_eq!(
        a.step(Input::Release { lock: L }, &mut out),
        Err(KernelError::NotHeld(L))
    );
    assert_eq!(
        a.step(
            Input::Acquire {
                lock: L,
                mode: Mode::Phi
            },
            &mut out
        ),
        Err(KernelError::InvalidMode)
    );
    assert_eq!(
        a.step(
            Input::Acquire {
                lock: LockId(9),
                mode: Mode::R
            },
            &mut out
        ),
        Err(KernelError::UnknownLock(LockId(9)))
    );
    a.step(
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
        &mut out,
    )
    .unwrap();
    // A sink without room for a whole step is refused before anything changes.
    let before = a.clone();
    assert!(!out.is_empty());
    assert_eq!(
        a.step(Input::Release { lock: L }, &mut out),
        Err(KernelError::OutputsFull)
    );
    assert_eq!(*a, before, "a refused step changes nothing");
    out.clear();
    let n = out.len();
    assert_eq!(
        a.step(
            Input::Acquire {
                lock: L,
                mode: Mode::R
            },
            &mut out
        ),
        Err(KernelError::AlreadyPending(L))
    );
    let msg = Msg::Freeze {
        lock: L,
        modes: Frozen::EMPTY,
        waiting: Frozen::EMPTY,
    };
    assert_eq!(
        a.step(
            Input::Deliver {
                from: NodeId(9),
                msg: &msg
            },
            &mut out
        ),
        Err(KernelError::UnknownNode(NodeId(9)))
    );
    assert_eq!(
        a.step(
            Input::Deliver {
                from: NodeId(1),
                msg: &msg
            },
            &mut out
        ),
        Err(KernelError::UnknownNode(NodeId(1)))
    );
    assert_eq!(*a, before, "rejected inputs change nothing");
    assert_eq!(out.len(), n);
}

/// Decision 5 of `spec/SPEC.md` 1.4 (releases racing grants): a release that crosses a
/// grant to the same child. Chain 0 (token) ← 1 ← 2: node 1 owns IR through its child 2 and
/// asks for R; then 2 releases, so 1 sends Release(Φ) to 0 *after* its request. Node 0
/// receives the request first and grants R, then the release. Returns the sites after the
/// grant has been delivered.
fn release_race(variant: Variant) -> Net {
    let mut s = of((0..4).map(|i| {
        let parent = match i {
            0 => None,
            2 => Some(NodeId(1)),
            _ => Some(NodeId(0)),
        };
        S::with_parents(NodeId(i), |_| parent)
            .unwrap()
            .with_variant(variant)
    }));
    s.1 = variant == Variant::HILOCK;
    acquire(&mut s, 0, Mode::R);
    acquire(&mut s, 1, Mode::IR);
    acquire(&mut s, 2, Mode::IR); // copy from 1; 1 owns IR through 2 after releasing
    release(&mut s, 1);
    assert_eq!(s[1].lock(L).unwrap().owned(), Mode::IR);
    // 1 asks 0 for R; then 2 releases, so 1's Release(Φ) follows its request on 1 → 0.
    step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    step(&mut s, 2, Input::Release { lock: L });
    deliver(&mut s, 2, 1);
    // 0 receives the request first and grants R, then the release.
    deliver(&mut s, 1, 0);
    deliver(&mut s, 1, 0);
    settle(&mut s);
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::R);
    s
}

/// With attachment epochs the stale release is dropped and the record stays R: a W request
/// waits for node 1's R.
#[test]
fn release_crossing_a_grant_is_dropped_and_resynchronised() {
    let mut s = release_race(Variant::HILOCK);
    assert_eq!(
        s[0].lock(L).unwrap().stale().releases,
        1,
        "stale release dropped"
    );
    assert_eq!(
        s[0].lock(L).unwrap().children().collect::<Vec<_>>(),
        vec![(NodeId(1), Mode::R)]
    );
    acquire(&mut s, 3, Mode::W);
    release(&mut s, 0);
    assert_eq!(
        s[3].lock(L).unwrap().held(),
        Mode::Phi,
        "W must not be granted while 1 holds R"
    );
    release(&mut s, 1);
    assert_eq!(s[3].lock(L).unwrap().held(), Mode::W);
}

/// The same interleaving under the literal `HandleRelease` (`release_epochs: false`): the
/// stale release erases the R grant from the token node's record and W is granted while R
/// is held — the mutual-exclusion violation that the epochs prevent.
#[test]
fn literal_release_handling_violates_mutual_exclusion() {
    let mut s = release_race(Variant {
        release_epochs: false,
        ..Variant::HILOCK
    });
    assert_eq!(
        s[0].lock(L).unwrap().children().count(),
        0,
        "the record of node 1 was erased"
    );
    acquire(&mut s, 3, Mode::W);
    release(&mut s, 0);
    assert_eq!(
        s[3].lock(L).unwrap().held(),
        Mode::W,
        "W granted while node 1 holds R"
    );
    assert_eq!(s[1].lock(L).unwrap().held(), Mode::R);
    // The harness's P1 (literal Table 2.1) sees it.
    let e = s.0.check_safety().unwrap_err();
    assert_eq!(e.property, hilock_harness::properties::P1, "{e}");
}

/// Exactly-once requests (`spec/SPEC.md` 1.4, hop numbers): a request delivered a second time
/// on the same link — a duplicate, as a reconnecting transport may produce — is rejected
/// with `KernelError::Duplicate` and leaves the site as it was; served twice, it could let a
/// node grant its own ancestor and close a cycle in the tree.
#[test]
fn a_redelivered_request_is_rejected_and_changes_nothing() {
    let mut s = sites();
    step(
        &mut s,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    let msg =
        s.0.channel(NodeId(1), NodeId(0))
            .next()
            .expect("request")
            .clone();
    assert!(matches!(msg, Msg::Request { .. }), "{msg:?}");
    deliver(&mut s, 1, 0);
    assert_redelivery_refused(&mut s, 1, 0, &msg);
}
