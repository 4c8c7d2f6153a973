//! Chapter 3: priorities, Rule 6_PRIO thresholds, Rule 8 queue order, Table 3.2, PCEP and
//! PIP — and the harmlessness of PIP reissues that meet a request already granted or
//! carried away with the token.

use hilock_harness::Cluster;
use hilock_kernel::{
    Forwarding, Inheritance, Input, LockId, Mode, Msg, NodeId, Output, Outputs, Site, Variant,
};

type S = Site<4, 2, 4>;
const L: LockId = LockId(0);

/// The sites in the one harness, and the grants signalled, in order.
struct Net {
    c: Cluster<S>,
    granted: Vec<(u16, LockId, Mode)>,
}

impl Net {
    fn star(inheritance: Inheritance) -> Self {
        // hilock's default forwarding (class pointers, `spec/SPEC.md` 1.6 "Forwarding");
        // `HILOCK_FORWARDING=thesis` / `=compress` runs these tests under the thesis's rule /
        // the compressed forwarding.
        let forwarding = match std::env::var("HILOCK_FORWARDING").as_deref() {
            Ok("thesis") => Forwarding::Thesis,
            Ok("compress") => Forwarding::Compress,
            _ => Variant::HILOCK.forwarding,
        };
        let v = Variant {
            inheritance,
            forwarding,
            ..Variant::HILOCK
        };
        Self::of((0..4).map(|i| S::new(NodeId(i), NodeId(0)).unwrap().with_variant(v)))
    }
    /// The sites of a tree: node `i`'s parent is `parents[i]` (`None` for node 0, the token
    /// node), under `variant`.
    fn tree(parents: [Option<u16>; 4], variant: Variant) -> Self {
        Self::of((0..4u16).map(|i| {
            let parent = parents[usize::from(i)].map(NodeId);
            S::with_parents(NodeId(i), |_| parent)
                .unwrap()
                .with_variant(variant)
        }))
    }
    fn of(sites: impl Iterator<Item = S>) -> Self {
        Net {
            c: Cluster::new(sites.collect()),
            granted: vec![],
        }
    }
    fn record(&mut self, at: NodeId, outputs: &[Output<Msg<4>>]) {
        for o in outputs {
            if let Output::Granted { lock, mode } = o {
                self.granted.push((at.0, *lock, *mode));
            }
        }
        // Every safety property of the harness after every step.
        self.c.check_safety().unwrap();
    }
    fn step(&mut self, at: u16, input: Input<'_, Msg<4>>) {
        let step = self.c.input(NodeId(at), input).unwrap();
        self.record(step.node, &step.outputs);
    }
    /// Delivers the oldest message on channel from → to.
    fn deliver(&mut self, from: u16, to: u16) -> Msg<4> {
        let (m, r) = self
            .c
            .deliver(NodeId(from), NodeId(to))
            .expect("a message in flight");
        let step = r.unwrap();
        self.record(step.node, &step.outputs);
        m
    }
    /// Delivers every message in flight, oldest first.
    fn settle(&mut self) {
        while let Some((f, t)) = self.c.oldest_channel() {
            self.deliver(f.0, t.0);
        }
    }
    fn acquire(&mut self, at: u16, mode: Mode) {
        self.step(at, Input::Acquire { lock: L, mode });
    }
    fn release(&mut self, at: u16) {
        self.step(at, Input::Release { lock: L });
    }
    /// A PIP star whose token node 0 owns R only through node 1's copy (Rule 3.2: the
    /// token stays at 0), nothing in flight.
    fn token_node_owning_r_through_1() -> Self {
        let mut n = Net::star(Inheritance::Pip);
        n.acquire(0, Mode::R);
        n.acquire(1, Mode::R);
        n.settle();
        n.release(0);
        n.settle();
        n
    }
    fn site(&self, at: u16) -> &S {
        self.c.site(NodeId(at))
    }
    fn node(&self, at: u16) -> &hilock_kernel::LockNode<4, 4> {
        self.site(at).lock(L).unwrap()
    }
    fn grants_to(&self, at: u16) -> usize {
        self.granted.iter().filter(|g| g.0 == at).count()
    }
}

/// A PIP reissue that reaches the granter after the original request was granted is served
/// again as a fresh request; the requester answers that second grant with a release, so no
/// node holds twice and the granter's record is exact again.
#[test]
fn pip_reissue_after_the_original_was_granted_is_harmless() {
    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::R);
    n.acquire(1, Mode::R); // request 1 → 0
    n.deliver(1, 0); // 0 grants a copy; the grant is in flight
    n.step(1, Input::SetPriority { base: 5 }); // ξ(1) rises: the pending request is reissued
    let reissue = n.c.channel(NodeId(1), NodeId(0)).next().cloned();
    assert!(
        matches!(reissue, Some(Msg::Request { entry, .. }) if entry.prio == 5),
        "{reissue:?}"
    );
    n.deliver(0, 1); // the grant: 1 holds R
    assert_eq!(n.node(1).held(), Mode::R);
    n.settle(); // the reissue is granted again, 1 answers with a release
    assert_eq!(n.grants_to(1), 1, "exactly one grant signalled to node 1");
    assert_eq!(
        n.node(1).stale().grants,
        1,
        "the second grant was recognised as stale"
    );
    assert_eq!(
        n.node(0).children().collect::<Vec<_>>(),
        vec![(NodeId(1), Mode::R)]
    );
    // Nothing leaked: once both release, a W request is granted.
    n.acquire(2, Mode::W);
    n.settle();
    assert_eq!(n.node(2).held(), Mode::Phi);
    n.release(0);
    n.release(1);
    n.settle();
    assert_eq!(n.node(2).held(), Mode::W);
}

/// A PIP reissue of a request that travelled on with the token's queue follows the parent
/// pointers to the new token node, which raises the queued entry: one grant, none lost.
#[test]
fn pip_reissue_after_the_request_moved_with_the_token_is_harmless() {
    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::W);
    n.step(2, Input::SetPriority { base: 3 });
    n.acquire(1, Mode::R); // queued at 0 with priority 0
    n.acquire(2, Mode::W); // queued at 0 ahead of it (Rule 8.1, priority 3)
    n.settle();
    assert_eq!(
        n.node(0)
            .queue()
            .iter()
            .map(|e| e.requester.0)
            .collect::<Vec<_>>(),
        vec![2, 1]
    );
    n.release(0); // the token goes to 2, with 1's request in its queue
    n.settle();
    assert!(n.node(2).has_token());
    assert_eq!(n.node(2).queue().len(), 1);
    n.step(1, Input::SetPriority { base: 6 }); // reissue to 1's parent 0, forwarded to 2
    n.settle();
    let q = n.node(2).queue();
    assert_eq!(
        (q.len(), q[0].requester, q[0].prio),
        (1, NodeId(1), 6),
        "raised in place, not duplicated"
    );
    n.release(2);
    n.settle();
    assert_eq!(n.node(1).held(), Mode::R);
    assert_eq!(n.grants_to(1), 1);
    assert!(n.c.sites().all(|s| s.lock(L).unwrap().queue().is_empty()));
}

/// Rule 6_PRIO: a request of higher priority than the freeze threshold overrules it (the
/// example of section 3.5: E's R is granted although R is frozen for B's IW).
#[test]
fn rule_6_prio_higher_priority_bypasses_the_freeze() {
    let mut n = Net::star(Inheritance::None);
    n.acquire(0, Mode::R);
    n.step(1, Input::SetPriority { base: 2 });
    n.acquire(1, Mode::IW); // queued; freezes R and U at threshold 2
    n.settle();
    assert_eq!(n.node(0).frozen_thresholds().threshold(Mode::R), Some(2));
    n.step(2, Input::SetPriority { base: 2 });
    n.acquire(2, Mode::R); // same priority: frozen, queued behind IW
    n.step(3, Input::SetPriority { base: 5 });
    n.acquire(3, Mode::R); // higher priority: granted at once
    n.settle();
    assert_eq!(n.node(3).held(), Mode::R);
    assert_eq!(n.node(2).held(), Mode::Phi);
    assert_eq!(
        n.node(0)
            .queue()
            .iter()
            .map(|e| e.requester.0)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );
}

/// Table 3.2: a node pending R keeps a received R of lower or equal priority (CQ → Q) but
/// forwards one of higher priority (CQ → F).
#[test]
fn table_3_2_conditional_queueing() {
    // Chain 3 → 1 → 0 (token).
    let parents = [None, Some(0), Some(0), Some(1)];
    for (p3, queued_at_1) in [(1u8, true), (9u8, false)] {
        let mut n = Net::tree(parents, Variant::HILOCK);
        n.acquire(0, Mode::W);
        n.step(1, Input::SetPriority { base: 4 });
        n.acquire(1, Mode::R);
        n.settle();
        n.step(3, Input::SetPriority { base: p3 });
        n.acquire(3, Mode::R);
        n.settle();
        assert_eq!(n.node(1).queue().len() == 1, queued_at_1, "priority {p3}");
        assert_eq!(
            n.node(0).queue().iter().any(|e| e.requester == NodeId(3)),
            !queued_at_1
        );
    }
}

/// PCEP (Fig. 3.7): acquiring a lock raises ξ to its ceiling; releasing lowers it to the
/// highest ceiling still held (or β). PIP (Fig. 3.8): a holder that a queued request waits
/// for inherits its priority, and loses it on release.
#[test]
fn pcep_and_pip_raise_and_lower_the_effective_priority() {
    let v = Variant {
        inheritance: Inheritance::Pcep,
        ..Variant::HILOCK
    };
    let mut s = S::new(NodeId(0), NodeId(0))
        .unwrap()
        .with_variant(v)
        .with_ceilings([6, 3]);
    let mut out: Outputs<Msg<4>, 16> = Outputs::new();
    s.step(
        Input::Acquire {
            lock: LockId(1),
            mode: Mode::R,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(s.priorities().effective, 3);
    out.clear();
    s.step(
        Input::Acquire {
            lock: LockId(0),
            mode: Mode::R,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(s.priorities().effective, 6);
    out.clear();
    s.step(Input::Release { lock: LockId(0) }, &mut out)
        .unwrap();
    assert_eq!(s.priorities().effective, 3);
    out.clear();
    s.step(Input::Release { lock: LockId(1) }, &mut out)
        .unwrap();
    assert_eq!(s.priorities().effective, 0);

    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::R);
    n.step(1, Input::SetPriority { base: 7 });
    n.acquire(1, Mode::W); // conflicts with 0's held R: 0 inherits 7
    n.settle();
    assert_eq!(n.site(0).priorities().effective, 7);
    n.release(0);
    n.settle();
    assert_eq!(n.site(0).priorities().effective, 0);
    assert_eq!(n.node(1).held(), Mode::W);
}

/// PIP (Fig. 3.8, `RequestUnlock`): the priority a holder inherited through a lock is given
/// up with the lock, so a later hold of the same lock with nobody waiting runs at β again —
/// not at the priority inherited in an earlier hold.
#[test]
fn pip_inherited_priority_is_given_up_with_the_lock() {
    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::R);
    n.step(1, Input::SetPriority { base: 7 });
    n.acquire(1, Mode::W); // conflicts with 0's held R: 0 inherits 7 through L
    n.settle();
    assert_eq!(n.site(0).priorities().effective, 7);
    n.release(0);
    n.settle();
    assert_eq!(n.node(1).held(), Mode::W);
    n.release(1);
    n.settle();
    n.acquire(0, Mode::R); // nobody waits now
    n.settle();
    assert_eq!(n.node(0).held(), Mode::R);
    assert_eq!(
        n.site(0).priorities().effective,
        0,
        "the priority inherited in the earlier hold came back with the new one"
    );
}

/// Rules 8.1 and 8.2: the queue that travels with the token is merged with the receiver's
/// and sorted by priority stably, so requests of one priority are served in their order of
/// arrival through every token transfer.
#[test]
fn rule_8_2_merged_queue_keeps_arrival_order_within_a_priority() {
    let mut n = Net::star(Inheritance::None);
    n.acquire(0, Mode::W);
    for i in [1, 2, 3] {
        n.acquire(i, Mode::W);
        n.settle();
    }
    for holder in [0, 1, 2, 3] {
        assert_eq!(n.node(holder).held(), Mode::W, "W order broken at {holder}");
        n.release(holder);
        n.settle();
    }
    let order: Vec<u16> = n.granted.iter().map(|g| g.0).collect();
    assert_eq!(order, vec![0, 1, 2, 3]);
}

/// PIP (Fig. 3.8, `HandleRequest`) over every conflicting cell of Table 2.1: a token node
/// holding a mode inherits the priority of a request for any mode that conflicts with it —
/// U against U and IW, and W against W, included.
#[test]
fn pip_the_holder_inherits_from_every_conflicting_mode_of_table_2_1() {
    use Mode::*;
    // The X cells of Table 2.1 (p. 10), held mode first, as the thesis prints them: the
    // kernel's own `compatible` is what a deletion changes, so the test does not ask it.
    let conflicting = [
        (IR, W),
        (R, IW),
        (R, W),
        (U, U),
        (U, IW),
        (U, W),
        (IW, R),
        (IW, U),
        (IW, W),
        (W, IR),
        (W, R),
        (W, U),
        (W, IW),
        (W, W),
    ];
    for (held, requested) in conflicting {
        let mut n = Net::star(Inheritance::Pip);
        n.acquire(0, held);
        n.step(1, Input::SetPriority { base: 7 });
        n.acquire(1, requested);
        n.settle();
        assert_eq!(
            n.site(0).priorities().effective,
            7,
            "{held} held, {requested} requested: no priority inherited"
        );
    }
}

/// Rule 8.2 with Rule 8.1: the token's queue merged with the receiver's own is put in
/// priority order — a request the receiver kept (Table 3.2 CQ) of higher priority than one
/// that travelled with the token is served first.
#[test]
fn rule_8_2_merged_queue_is_in_priority_order() {
    // 1 → 0, 2 → 0, 3 → 2; node 0 has the token.
    let parents = [None, Some(0), Some(0), Some(2)];
    let mut n = Net::tree(parents, Variant::HILOCK);
    n.acquire(0, Mode::W);
    n.step(2, Input::SetPriority { base: 3 });
    n.acquire(2, Mode::W); // queued at 0 (priority 3)
    n.settle();
    n.acquire(1, Mode::W); // queued at 0 behind it (priority 0)
    n.settle();
    n.step(3, Input::SetPriority { base: 2 });
    n.acquire(3, Mode::W); // kept at 2 behind its pending W (Table 3.2: 3 ≥ 2)
    n.settle();
    assert_eq!(n.node(2).queue().len(), 1, "3's request kept at 2");
    for holder in [0, 2] {
        n.release(holder);
        n.settle();
    }
    assert_eq!(
        n.node(3).held(),
        Mode::W,
        "the kept request of priority 2 first"
    );
    n.release(3);
    n.settle();
    let order: Vec<u16> = n.granted.iter().map(|g| g.0).collect();
    assert_eq!(order, vec![0, 2, 3, 1]);
}

/// PIP (Fig. 3.8, `HandleReissuedRequest` at the token node): a queued request reissued at
/// a higher priority raises the holder's inherited priority too — the holder inherits from
/// the reissue, not only from the request's first arrival.
#[test]
fn pip_the_holder_inherits_from_a_reissued_request() {
    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::R);
    n.step(1, Input::SetPriority { base: 3 });
    n.acquire(1, Mode::W); // queued at 0, which inherits 3
    n.settle();
    assert_eq!(n.site(0).priorities().effective, 3);
    n.step(1, Input::SetPriority { base: 7 }); // PIP reissue of the queued W at 7
    n.settle();
    assert_eq!(
        n.site(0).priorities().effective,
        7,
        "the holder did not inherit the reissued request's priority"
    );
    assert_eq!(n.node(0).queue()[0].prio, 7);
}

/// Rule 6_PRIO with a PIP reissue at the token node: a queued request that a freeze held
/// back (its priority not above the freeze's threshold) is granted as soon as its reissue
/// raises it above the threshold — the token node checks its queue again then, not only at
/// the next release.
#[test]
fn pip_a_reissue_above_the_freeze_threshold_is_granted_at_once() {
    let mut n = Net::star(Inheritance::Pip);
    n.acquire(0, Mode::R);
    n.step(2, Input::SetPriority { base: 2 });
    n.acquire(2, Mode::W); // queued at 0: freezes R at threshold 2 (Table 2.4, Rule 6_PRIO)
    n.settle();
    n.step(1, Input::SetPriority { base: 1 });
    n.acquire(1, Mode::R); // compatible with R but frozen for priority 1 <= 2: queued
    n.settle();
    assert_eq!(n.node(1).held(), Mode::Phi);
    n.step(1, Input::SetPriority { base: 5 }); // reissued above the threshold
    n.settle();
    assert_eq!(
        n.node(1).held(),
        Mode::R,
        "the raised request passes the freeze and shares R with the holder"
    );
    assert_eq!(n.node(0).held(), Mode::R);
}

/// PIP (Fig. 3.8: "re-issue all the pending requests" of a lower priority): a rise of ξ
/// reissues only a request whose priority is below the new ξ; one issued at a higher
/// priority before ξ fell keeps it. Here the token node's own W, issued at 5, stays ahead
/// of node 2's W at 4 after ξ fell to 1 and rose to 3.
#[test]
fn pip_a_rise_below_a_pending_requests_priority_leaves_it_as_it_is() {
    let mut n = Net::token_node_owning_r_through_1();
    n.step(0, Input::SetPriority { base: 5 });
    n.acquire(0, Mode::W); // queued at the token node behind node 1's R, priority 5
    n.step(2, Input::SetPriority { base: 4 });
    n.acquire(2, Mode::W); // queued behind it, priority 4
    n.settle();
    n.step(0, Input::SetPriority { base: 1 });
    n.step(0, Input::SetPriority { base: 3 }); // ξ rises from 1 to 3, still below 5
    assert_eq!(n.node(0).queue()[0].requester, NodeId(0));
    assert_eq!(n.node(0).queue()[0].prio, 5);
    n.release(1);
    n.settle();
    assert_eq!(
        n.node(0).held(),
        Mode::W,
        "node 0's W, priority 5, goes first"
    );
    assert_eq!(n.node(2).held(), Mode::Phi);
}

/// Rule 6_PRIO with a PIP reissue of the token node's own request: its own R, held back by
/// a freeze (priority 1, threshold 2), is granted as soon as ξ rises above the threshold —
/// the token node checks its queue again then, not only at the next release.
#[test]
fn pip_the_token_nodes_own_request_raised_above_the_freeze_is_granted_at_once() {
    let mut n = Net::token_node_owning_r_through_1();
    n.step(2, Input::SetPriority { base: 2 });
    n.acquire(2, Mode::W); // queued at node 0: R frozen at threshold 2 (Table 2.4)
    n.settle();
    n.step(0, Input::SetPriority { base: 1 });
    n.acquire(0, Mode::R); // compatible with the owned R, but frozen for priority 1
    assert_eq!(n.node(0).held(), Mode::Phi);
    n.step(0, Input::SetPriority { base: 5 }); // reissued above the threshold
    assert_eq!(
        n.node(0).held(),
        Mode::R,
        "the raised own request passes the freeze and shares R with node 1"
    );
    assert_eq!(n.node(1).held(), Mode::R);
}

/// Table 3.2 after a PIP reissue: the raised priority is the pending request's own, so a
/// non-token node keeps a child's request of a priority between the old and the new one
/// behind its pending request (Q) instead of forwarding it.
#[test]
fn pip_a_reissued_pending_request_keeps_requests_by_its_raised_priority() {
    // 1 → 0, 2 → 0, 3 → 1; node 0 has the token.
    let parents = [None, Some(0), Some(0), Some(1)];
    let variant = Variant {
        inheritance: Inheritance::Pip,
        ..Variant::HILOCK
    };
    let mut n = Net::tree(parents, variant);
    n.acquire(0, Mode::W);
    n.step(1, Input::SetPriority { base: 1 });
    n.acquire(1, Mode::W); // queued at 0, pending at 1 with priority 1
    n.settle();
    n.step(1, Input::SetPriority { base: 5 }); // reissued at 5
    n.settle();
    n.step(3, Input::SetPriority { base: 3 });
    n.acquire(3, Mode::W); // reaches 1 first: 5 ≥ 3, kept behind 1's pending W
    n.settle();
    assert_eq!(
        n.node(1)
            .queue()
            .iter()
            .map(|e| e.requester)
            .collect::<Vec<_>>(),
        vec![NodeId(3)],
        "node 1 forwarded a request it keeps by Table 3.2"
    );
}

/// A stale token (`spec/SPEC.md` 1.5, "Decisions"): the token answers a PIP reissue of an
/// older request of node 1 while its next request (IR) waits at node 0, kept there behind
/// 0's own pending IR (Table 2.3), and 0 later grants it a copy, which node 1, now the token
/// node, must answer as stale. Only the token's merge requeues node 1's current request
/// (Rule 4.2): its one copy is consumed at node 0 and never reaches the token. Without the
/// requeue node 1 waits for ever.
#[test]
fn a_stale_token_requeues_the_current_request_kept_at_another_node() {
    // 1 → 2 → 3 → 0; node 0 has the token.
    let parents = [None, Some(2), Some(3), Some(0)];
    let variant = Variant {
        inheritance: Inheritance::Pip,
        ..Variant::HILOCK
    };
    let mut n = Net::tree(parents, variant);
    n.acquire(0, Mode::R);
    n.acquire(1, Mode::R); // request a: 1 → 2 → 3 → 0
    n.deliver(1, 2);
    n.deliver(2, 3);
    n.deliver(3, 0); // 0 grants a copy of R; the grant is in flight
    n.step(1, Input::SetPriority { base: 5 }); // reissue b of request a, to 1's parent 2
    n.deliver(0, 1); // 1 holds R, its parent is now 0
    n.release(1);
    n.deliver(1, 0);
    n.step(1, Input::SetPriority { base: 0 });
    n.release(0);
    n.acquire(3, Mode::IR); // 0 owns Φ: the token goes to 3 (Rule 3.2)
    n.deliver(3, 0);
    n.deliver(0, 3);
    assert!(n.node(3).has_token());
    n.acquire(0, Mode::IR); // request d: 0 → 3, held in flight
    n.acquire(1, Mode::IR); // request c: 1 → 0
    n.deliver(1, 0);
    assert_eq!(
        n.node(0)
            .queue()
            .iter()
            .map(|e| e.requester)
            .collect::<Vec<_>>(),
        vec![NodeId(1)],
        "c kept at 0 behind its pending IR (Table 2.3)"
    );
    n.deliver(1, 2); // the reissue b: forwarded to 3, which holds IR and owns the token
    n.deliver(2, 3); // tokenable (IR < R): the token goes to 1 for b
    n.deliver(3, 1); // a stale token at 1: its pending request is c
    assert!(n.node(1).has_token());
    assert_eq!(n.node(1).stale().tokens, 1);
    n.settle(); // d: 3 grants 0 a copy of IR; 0 grants c a copy, stale at the token node 1
    assert_eq!(n.node(1).stale().grants, 1, "0's copy grant for c");
    assert_eq!(n.node(1).held(), Mode::IR, "node 1's request c was lost");
    assert_eq!(n.grants_to(1), 2, "a, then c: {:?}", n.granted);
}
