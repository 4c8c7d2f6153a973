//! hilock's try-lock (`spec/SPEC.md` 1.12): `Input::TryAcquire` is granted where a request
//! would be granted (Rules 2, 3.1, 3.2) and refused with `Output::WouldBlock` where a request
//! would wait (Rules 4.1 Q, 4.2, Rule 6), leaving nothing behind. Every step runs in the one
//! harness with every safety property checked after it, P11 (no grant after WouldBlock)
//! and P12 (a try leaves nothing pending) included.

use hilock_harness::Cluster;
use hilock_kernel::{
    Forwarding, Frozen, Input, KernelError, Mode, Msg, NodeId, Output, Pending, QueueEntry, Rule,
    Variant,
};

use crate::star;
use star::*;

fn try_acquire(c: &mut Cluster<S>, at: u16, mode: Mode) -> Vec<(u16, Output<Msg<4>>)> {
    run(c, at, Input::TryAcquire { lock: L, mode })
}

/// Whether `log` has a `Granted` (`WouldBlock`) output of node `n`.
fn granted(log: &[(u16, Output<Msg<4>>)], n: u16) -> bool {
    log.iter()
        .any(|(at, o)| *at == n && matches!(o, Output::Granted { .. }))
}
fn would_block(log: &[(u16, Output<Msg<4>>)], n: u16) -> bool {
    log.iter()
        .any(|(at, o)| *at == n && matches!(o, Output::WouldBlock { .. }))
}

/// Every site's queue and frozen modes of the lock.
fn queues_and_freezes(c: &Cluster<S>) -> Vec<(Vec<QueueEntry>, Frozen)> {
    c.sites()
        .map(|s| {
            let n = s.lock(L).unwrap();
            (n.queue().to_vec(), n.frozen_thresholds())
        })
        .collect()
}

/// Rule 3.2 and Rule 2: a try of a free lock is granted — the token node's own at once,
/// another node's by the token transfer a request would get.
#[test]
fn try_on_a_free_lock_is_granted() {
    let mut c = star();
    let log = try_acquire(&mut c, 0, Mode::W);
    assert_eq!(
        log,
        vec![(
            0,
            Output::Granted {
                lock: L,
                mode: Mode::W
            }
        )]
    );
    release(&mut c, 0);
    let log = try_acquire(&mut c, 2, Mode::W);
    assert!(granted(&log, 2) && !would_block(&log, 2), "{log:?}");
    let n2 = c.site(NodeId(2)).lock(L).unwrap();
    assert_eq!((n2.held(), n2.has_token()), (Mode::W, true));
    assert_eq!(n2.pending(), Pending::None);
}

/// Rule 4.2 refused: while node 1 holds W, node 2's try of R is answered with a busy
/// message and `WouldBlock`; no site's queue or frozen modes changed, node 2 has nothing
/// pending.
#[test]
fn try_against_a_conflicting_holder_would_block_and_changes_no_queue_or_freeze() {
    let mut c = star();
    acquire(&mut c, 1, Mode::W);
    let before = queues_and_freezes(&c);
    let log = try_acquire(&mut c, 2, Mode::R);
    assert!(would_block(&log, 2) && !granted(&log, 2), "{log:?}");
    assert!(
        log.iter().any(|(at, o)| *at == 1
            && matches!(
                o,
                Output::Send {
                    to: NodeId(2),
                    msg: Msg::Busy { .. }
                }
            )),
        "the token node answers busy: {log:?}"
    );
    assert_eq!(queues_and_freezes(&c), before);
    assert_eq!(c.site(NodeId(2)).lock(L).unwrap().pending(), Pending::None);
    assert_eq!(c.refused_tries().collect::<Vec<_>>(), vec![(NodeId(2), L)]);
}

/// Rule 4.2 at the token node itself: node 0 holds R with the token and grants node 1 a
/// copy of R (Rule 3.2), then releases; node 0's own try of W, which a request would queue
/// there behind the child's R, is refused in the same step — `WouldBlock` and no message —
/// and leaves nothing pending, queued or frozen.
#[test]
fn the_token_nodes_own_try_is_refused_at_once_without_a_message() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::R);
    release(&mut c, 0);
    assert!(c.site(NodeId(0)).lock(L).unwrap().has_token());
    let before = queues_and_freezes(&c);
    let log = try_acquire(&mut c, 0, Mode::W);
    assert!(would_block(&log, 0) && !granted(&log, 0), "{log:?}");
    assert!(
        !log.iter().any(|(_, o)| matches!(o, Output::Send { .. })),
        "{log:?}"
    );
    assert_eq!(queues_and_freezes(&c), before);
    assert_eq!(c.site(NodeId(0)).lock(L).unwrap().pending(), Pending::None);
}

/// A try request from the wire is checked as a request is (`accept_request`): delivered a
/// second time it is refused as a duplicate (its hop number was seen), and one for Φ or
/// from a requester outside the cluster is refused — each changing nothing at the
/// receiver.
#[test]
fn a_try_request_from_the_wire_is_refused_when_redelivered_or_malformed() {
    let mut c = star();
    c.input(
        NodeId(2),
        Input::TryAcquire {
            lock: L,
            mode: Mode::R,
        },
    )
    .unwrap();
    let msg = c.channel(NodeId(2), NodeId(0)).next().cloned().unwrap();
    let Msg::TryRequest { entry, hop, .. } = msg else {
        panic!("node 2's try goes to its parent: {msg:?}");
    };
    c.deliver(NodeId(2), NodeId(0)).unwrap().1.unwrap();
    let before = c.site(NodeId(0)).clone();
    let again = c.inject(NodeId(2), NodeId(0), &msg);
    assert_eq!(
        again.err().and_then(|e| e.kernel()),
        Some(KernelError::Duplicate(L))
    );
    assert_eq!(c.site(NodeId(0)), &before);
    let malformed = [
        (
            QueueEntry {
                mode: Mode::Phi,
                ..entry
            },
            KernelError::InvalidMode,
        ),
        (
            QueueEntry {
                requester: NodeId(9),
                ..entry
            },
            KernelError::UnknownNode(NodeId(9)),
        ),
    ];
    for (entry, error) in malformed {
        let bad = Msg::TryRequest {
            lock: L,
            entry,
            hop: hop + 1,
        };
        let refused = c.inject(NodeId(2), NodeId(0), &bad);
        assert_eq!(refused.err().and_then(|e| e.kernel()), Some(error));
        assert_eq!(c.site(NodeId(0)), &before);
    }
}

/// P11: after `WouldBlock`, the holder's release grants nothing to the refused node — no
/// `Granted`, no message to it, nothing held.
#[test]
fn after_would_block_a_release_never_grants_the_try() {
    let mut c = star();
    acquire(&mut c, 1, Mode::W);
    try_acquire(&mut c, 2, Mode::R);
    let log = release(&mut c, 1);
    assert!(!granted(&log, 2), "{log:?}");
    assert!(
        !log.iter()
            .any(|(_, o)| matches!(o, Output::Send { to: NodeId(2), .. })),
        "{log:?}"
    );
    assert_eq!(c.site(NodeId(2)).lock(L).unwrap().held(), Mode::Phi);
    assert_eq!(c.in_flight(), 0);
    c.check_no_deadlock(true).unwrap();
}

/// Rule 6: a queued W froze R at the token node (Table 2.4); a try of R is refused where a
/// request of R would wait for the freeze.
#[test]
fn try_is_refused_by_a_freeze_for_a_queued_conflicting_request() {
    let mut c = star();
    acquire(&mut c, 1, Mode::R);
    acquire(&mut c, 2, Mode::W);
    let token = c.site(NodeId(1)).lock(L).unwrap();
    assert!(token.has_token() && token.frozen().contains(Mode::R));
    let before = queues_and_freezes(&c);
    let log = try_acquire(&mut c, 3, Mode::R);
    assert!(would_block(&log, 3) && !granted(&log, 3), "{log:?}");
    assert_eq!(queues_and_freezes(&c), before);
}

/// No bypass (`spec/SPEC.md` 1.12): without freezing (`Variant::freezing` off, the
/// thesis's parent forwarding) a request of R is granted past the W waiting in the token
/// node's queue, but a try of R is refused: a try is never granted ahead of a conflicting
/// request waiting where it is decided.
#[test]
fn try_does_not_bypass_a_queued_conflicting_request() {
    let no_freezing = Variant {
        freezing: false,
        forwarding: Forwarding::Thesis,
        ..Variant::HILOCK
    };
    let mut c = star();
    c.configure(|s| s.with_variant(no_freezing));
    acquire(&mut c, 1, Mode::R);
    acquire(&mut c, 2, Mode::W);
    assert_eq!(c.site(NodeId(1)).lock(L).unwrap().queue().len(), 1);
    let log = try_acquire(&mut c, 3, Mode::R);
    assert!(would_block(&log, 3) && !granted(&log, 3), "{log:?}");
    // The plain request bypasses (the thesis's chapter-2 protocol without freezes).
    let log = acquire(&mut c, 3, Mode::R);
    assert!(granted(&log, 3), "{log:?}");
}

/// Rule 4.1 Q refused: in the chain 0 ← 1 ← 2, node 1 waits for W (queued at 0 behind 0's
/// R). Node 2's try of W reaches node 1, which would keep it behind its own pending W
/// (Table 2.3 (W, W) = Q): node 1 answers busy itself and keeps nothing.
#[test]
fn try_that_a_pending_node_would_queue_is_refused_there() {
    let mut c = chain();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::W);
    assert_eq!(c.site(NodeId(1)).lock(L).unwrap().pending_mode(), Mode::W);
    let step = c
        .input(
            NodeId(2),
            Input::TryAcquire {
                lock: L,
                mode: Mode::W,
            },
        )
        .unwrap();
    assert!(step.rules.contains(Rule::Rule2Request));
    let (_, r) = c.deliver(NodeId(2), NodeId(1)).unwrap();
    let at1 = r.unwrap();
    assert!(at1.rules.contains(Rule::TryRefused), "{:?}", at1.rules);
    assert!(c.site(NodeId(1)).lock(L).unwrap().queue().is_empty());
    let (_, r) = c.deliver(NodeId(1), NodeId(2)).unwrap();
    let at2 = r.unwrap();
    assert!(at2.rules.contains(Rule::TryWouldBlock));
    assert_eq!(
        at2.outputs,
        vec![Output::WouldBlock {
            lock: L,
            mode: Mode::W
        }]
    );
    c.check_safety().unwrap();
    // Node 0 releases: node 1 gets W, node 2 nothing.
    let log = release(&mut c, 0);
    assert!(granted(&log, 1) && !granted(&log, 2), "{log:?}");
}

/// A try is one request: a second `Acquire` or `TryAcquire` while it is pending is refused
/// by the kernel, and a busy answer for a try that is no longer pending is dropped.
#[test]
fn a_pending_try_blocks_other_requests_and_a_stale_busy_is_dropped() {
    let mut c = star();
    acquire(&mut c, 1, Mode::W);
    c.input(
        NodeId(2),
        Input::TryAcquire {
            lock: L,
            mode: Mode::R,
        },
    )
    .unwrap();
    assert!(matches!(
        c.site(NodeId(2)).lock(L).unwrap().pending(),
        Pending::Try(_)
    ));
    assert!(c
        .input(
            NodeId(2),
            Input::Acquire {
                lock: L,
                mode: Mode::R
            }
        )
        .is_err());
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    let entry = QueueEntry {
        requester: NodeId(2),
        mode: Mode::R,
        serial: 1,
        prio: 0,
    };
    let stale = c
        .inject(NodeId(1), NodeId(2), &Msg::Busy { lock: L, entry })
        .unwrap();
    assert!(stale.rules.contains(Rule::StaleBusy) && stale.outputs.is_empty());
    assert_eq!(c.site(NodeId(2)).lock(L).unwrap().stale().busies, 1);
}
