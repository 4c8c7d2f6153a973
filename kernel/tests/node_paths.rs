//! Checks of the token engine's paths that no scenario or rule test looked at (mutation
//! testing showed them: `docs/verification.md`, "Mutation testing"): the re-delivery window
//! of requests (`spec/SPEC.md` 1.4, "Exactly-once requests"), the copyset's order, the
//! token's generation, and the counters of stale messages.

use hilock_harness::Cluster;
use hilock_kernel::{
    Frozen, Inheritance, Input, KernelError, LockId, Mode, ModeSet, Msg, NodeId, Output, Outputs,
    Pending, QueueEntry, Rule, Site, ValueBlock, Variant,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

type S = Site<4, 1, 4>;
type Out = Outputs<Msg<4>, 32>;
const L: LockId = LockId(0);

fn request(requester: u16, serial: u32, hop: u32) -> Msg<4> {
    Msg::Request {
        lock: L,
        entry: QueueEntry {
            requester: NodeId(requester),
            mode: Mode::IR,
            serial,
            prio: 0,
        },
        hop,
    }
}

/// The reference of the re-delivery window (`Peer::requests_seen`/`requests_window`): a
/// request numbered `hop` from a peer is new iff `hop ≥ 1`, it was not received before,
/// and it is newer than every request received from that peer or at most 32 behind the
/// newest (older ones cannot be told apart from re-deliveries and are refused).
#[derive(Default)]
struct Window {
    seen: BTreeSet<u32>,
}

impl Window {
    fn accept(&mut self, hop: u32) -> bool {
        let newest = self.seen.last().copied().unwrap_or(0);
        let new = hop >= 1 && !self.seen.contains(&hop) && (hop > newest || newest - hop <= 32);
        if new {
            self.seen.insert(hop);
        }
        new
    }
}

/// Delivers requests with the given hop numbers from node 1 to the token node 0 (requester
/// 2, fresh serials so that each one is a new request) and checks each against the
/// reference: a new one is handled, a re-delivered one is refused with `Duplicate` and
/// changes nothing.
fn window_run(hops: &[u32]) -> Result<(), TestCaseError> {
    let mut site = S::new(NodeId(0), NodeId(0)).unwrap();
    let mut reference = Window::default();
    for (i, &hop) in hops.iter().enumerate() {
        let before = site.clone();
        let msg = request(2, i as u32 + 1, hop);
        let mut out = Out::new();
        let r = site.step(
            Input::Deliver {
                from: NodeId(1),
                msg: &msg,
            },
            &mut out,
        );
        if reference.accept(hop) {
            prop_assert!(r.is_ok(), "hop {hop} after {:?}: {r:?}", &hops[..i]);
        } else {
            prop_assert_eq!(r.err(), Some(KernelError::Duplicate(L)), "hop {}", hop);
            prop_assert_eq!(&site, &before);
        }
    }
    Ok(())
}

#[test]
fn request_window_in_order_with_gaps_and_repeats() {
    window_run(&[1, 2, 2, 3, 5, 4, 4, 3, 9, 6, 7, 8, 9, 1, 0]).unwrap();
}

/// The window's edge: a request exactly 32 behind the newest is still told apart, one 33
/// behind is refused; a jump of exactly 32 keeps the old newest as received.
#[test]
fn request_window_edges() {
    window_run(&[1, 33, 1, 2, 34, 2]).unwrap();
    window_run(&[5, 37, 5, 4, 38, 6]).unwrap();
    window_run(&[1, 40, 8, 7, 8, 41, 9]).unwrap();
    window_run(&[3, 70, 3, 38, 37, 38]).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any order of delivery, re-deliveries included, over hop numbers 0..80.
    #[test]
    fn request_window_matches_the_reference(hops in proptest::collection::vec(0u32..80, 1..60)) {
        window_run(&hops)?;
    }
}

fn cluster() -> Cluster<S> {
    Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap())
            .collect(),
    )
}

fn acquire(c: &mut Cluster<S>, at: u16, mode: Mode) {
    c.input(NodeId(at), Input::Acquire { lock: L, mode })
        .unwrap();
    c.settle(1000, |c, _, _, _| Ok(c.check_safety()?)).unwrap();
}

fn release(c: &mut Cluster<S>, at: u16) {
    c.input(NodeId(at), Input::Release { lock: L }).unwrap();
    c.settle(1000, |c, _, _, _| Ok(c.check_safety()?)).unwrap();
}

fn node(c: &Cluster<S>, i: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(i)).lock(L).unwrap()
}

/// `LockNode::children` lists the copyset by node id, whatever order the children joined
/// in (the freezes of Rule 6 go out in that order, so runs are reproducible).
#[test]
fn copyset_is_listed_by_node_id() {
    let mut c = cluster();
    // Node 0 keeps the token by holding R; 3, 1, 2 get R copies in that order.
    acquire(&mut c, 0, Mode::R);
    for i in [3, 1, 2] {
        acquire(&mut c, i, Mode::R);
    }
    let ids: Vec<u16> = node(&c, 0).children().map(|(n, _)| n.0).collect();
    assert_eq!(ids, [1, 2, 3]);
    release(&mut c, 2);
    let ids: Vec<u16> = node(&c, 0).children().map(|(n, _)| n.0).collect();
    assert_eq!(ids, [1, 3]);
    acquire(&mut c, 2, Mode::IR);
    let kids: Vec<(u16, Mode)> = node(&c, 0).children().map(|(n, m)| (n.0, m)).collect();
    assert_eq!(kids, [(1, Mode::R), (2, Mode::IR), (3, Mode::R)]);
}

/// A holder's fence is its grant's (none when it holds nothing); later conflicting grants
/// carry larger fences; the fencing counter is the last fence issued at the token node and
/// the highest received elsewhere.
#[test]
fn fences_of_holders_and_fencing_counters() {
    let mut c = cluster();
    assert_eq!(node(&c, 0).fence(), None);
    assert_eq!(node(&c, 0).fence_counter(), 0);
    acquire(&mut c, 1, Mode::W);
    let f1 = node(&c, 1).fence().expect("a holder has a fence");
    assert!(f1 >= 1);
    assert_eq!(node(&c, 1).fence_counter(), f1);
    release(&mut c, 1);
    assert_eq!(node(&c, 1).fence(), None);
    acquire(&mut c, 2, Mode::W);
    let f2 = node(&c, 2).fence().expect("a holder has a fence");
    assert!(f2 > f1, "{f2} after {f1}");
    assert_eq!(node(&c, 2).fence_counter(), f2);
    // Node 1 held the token and issued f2 when it passed the token on.
    assert_eq!(node(&c, 1).fence_counter(), f2);
}

/// The token's generation counts its transfers, and only the token node has one.
#[test]
fn token_generation_counts_transfers() {
    let mut c = cluster();
    assert_eq!(node(&c, 0).token_generation(), Some(0));
    assert_eq!(node(&c, 1).token_generation(), None);
    acquire(&mut c, 1, Mode::W);
    assert_eq!(node(&c, 0).token_generation(), None);
    assert_eq!(node(&c, 1).token_generation(), Some(1));
    release(&mut c, 1);
    acquire(&mut c, 2, Mode::W);
    assert_eq!(node(&c, 1).token_generation(), None);
    assert_eq!(node(&c, 2).token_generation(), Some(2));
}

/// A re-sent grant for a request that is no longer pending is counted as stale and answered
/// with a release; every further one counts again.
#[test]
fn stale_grants_are_counted() {
    let mut c = cluster();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::R);
    let grant = |epoch| Msg::Grant {
        lock: L,
        entry: QueueEntry {
            requester: NodeId(1),
            mode: Mode::R,
            serial: 9,
            prio: 0,
        },
        epoch,
        recorded: Mode::R,
        frozen: Frozen::EMPTY,
        fence: 0,
        value: ValueBlock::INITIAL,
    };
    let site = c.site_mut(NodeId(1));
    for k in 1..=2u32 {
        let mut out = Out::new();
        let msg = grant(50 + k);
        site.step(
            Input::Deliver {
                from: NodeId(0),
                msg: &msg,
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(site.lock(L).unwrap().stale().grants, k);
        assert!(
            matches!(
                out.as_slice(),
                [Output::Send {
                    to: NodeId(0),
                    msg: Msg::Release { owned: Mode::R, .. }
                }]
            ),
            "{out:?}"
        );
    }
}

/// The token of lock `L` (generation 1, fence 1) answering `e`, from a sender that still
/// owns `sender_owned`, with `queue`.
fn token_msg(e: QueueEntry, sender_owned: Mode, queue: &[QueueEntry]) -> Msg<4> {
    Msg::Token {
        lock: L,
        entry: e,
        generation: 1,
        sender_owned,
        epoch: 1,
        frozen: Frozen::EMPTY,
        queue: heapless::Vec::from_slice(queue).unwrap(),
        fence: 1,
        value: ValueBlock::INITIAL,
    }
}

fn deliver_to(site: &mut S, from: u16, msg: &Msg<4>) -> Result<Out, KernelError> {
    let mut out = Out::new();
    site.step(
        Input::Deliver {
            from: NodeId(from),
            msg,
        },
        &mut out,
    )?;
    Ok(out)
}

/// Delivers `msg` from `from` and returns the rules the step reports.
fn deliver_report(site: &mut S, from: u16, msg: &Msg<4>) -> (Out, hilock_kernel::RuleSet) {
    let mut out = Out::new();
    let report = site
        .step(
            Input::Deliver {
                from: NodeId(from),
                msg,
            },
            &mut out,
        )
        .unwrap();
    (out, report.rules)
}

/// Freezes from a node that is not our parent, copies of our own requests (and try
/// requests) that are no longer pending, and a token answering no pending request are
/// dropped and counted, one by one (`LockNode::stale`), and each step's report names the
/// stale rule (`StaleFreeze`, `StaleRequest`, `StaleToken`).
#[test]
fn stale_freezes_requests_and_tokens_are_counted() {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    let freeze = Msg::Freeze {
        lock: L,
        modes: Frozen::EMPTY,
        waiting: Frozen::EMPTY,
    };
    for k in 1..=3 {
        let (out, rules) = deliver_report(&mut site, 2, &freeze);
        assert!(out.is_empty());
        assert!(rules.contains(Rule::StaleFreeze), "{rules:?}");
        assert_eq!(site.lock(L).unwrap().stale().freezes, k);
    }
    for k in 1..=3u32 {
        // A copy of a request of ours (node 1) that is not pending here.
        let (out, rules) = deliver_report(&mut site, 2, &request(1, 7, k));
        assert!(out.is_empty(), "{out:?}");
        assert!(rules.contains(Rule::StaleRequest), "{rules:?}");
        assert_eq!(site.lock(L).unwrap().stale().requests, k);
    }
    for k in 4..=5u32 {
        // A copy of a try request of ours that is not pending here.
        let Msg::Request { entry, .. } = request(1, 8, k) else {
            unreachable!()
        };
        let try_copy = Msg::TryRequest {
            lock: L,
            entry,
            hop: k,
        };
        let (out, rules) = deliver_report(&mut site, 2, &try_copy);
        assert!(out.is_empty(), "{out:?}");
        assert!(rules.contains(Rule::StaleRequest), "{rules:?}");
        assert_eq!(site.lock(L).unwrap().stale().requests, k);
    }
    let token = token_msg(entry(1, Mode::W, 3, 0), Mode::Phi, &[]);
    let (_, rules) = deliver_report(&mut site, 0, &token);
    assert!(rules.contains(Rule::StaleToken), "{rules:?}");
    let n = site.lock(L).unwrap();
    assert_eq!(n.stale().tokens, 1);
    assert!(n.has_token());
    assert_eq!(n.held(), Mode::Phi);
    assert_eq!(n.stale().freezes, 3);
    assert_eq!(n.stale().requests, 5);
}

fn entry(requester: u16, mode: Mode, serial: u32, prio: u8) -> QueueEntry {
    QueueEntry {
        requester: NodeId(requester),
        mode,
        serial,
        prio,
    }
}

fn grant(e: QueueEntry, epoch: u32, frozen: Frozen) -> Msg<4> {
    Msg::Grant {
        lock: L,
        entry: e,
        epoch,
        recorded: e.mode,
        frozen,
        fence: 1,
        value: ValueBlock::INITIAL,
    }
}

fn input(site: &mut S, i: Input<'_, Msg<4>>) -> Out {
    let mut out = Out::new();
    site.step(i, &mut out).unwrap();
    out
}

/// Site 1 (parent 0) holds IR under frozen `f1`, grants an IR copy to node 2, releases its
/// own hold (it still owns IR through 2) and asks for R: the request is pending at its
/// parent.
fn owning_through_a_child(f1: Frozen) -> S {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    input(
        &mut site,
        Input::Acquire {
            lock: L,
            mode: Mode::IR,
        },
    );
    deliver_to(&mut site, 0, &grant(entry(1, Mode::IR, 1, 0), 1, f1)).unwrap();
    assert_eq!(site.lock(L).unwrap().frozen(), f1.modes());
    deliver_to(&mut site, 2, &request(2, 1, 1)).unwrap();
    input(&mut site, Input::Release { lock: L });
    let n = site.lock(L).unwrap();
    assert_eq!((n.held(), n.owned()), (Mode::Phi, Mode::IR));
    input(
        &mut site,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    assert_eq!(site.lock(L).unwrap().pending_mode(), Mode::R);
    site
}

/// Invariant 2.3 on a grant (Fig. 2.5): a grant from the node that already is our parent,
/// while we own a mode under it, adds its frozen modes to ours; a grant from a new parent
/// replaces them (what the old parent froze is no longer ours to respect).
#[test]
fn a_grant_merges_frozen_modes_from_the_same_parent_and_replaces_them_from_a_new_one() {
    let f1 = Frozen::of(ModeSet::of(&[Mode::W]), 0);
    let f2 = Frozen::of(ModeSet::of(&[Mode::U]), 0);
    let mut same = owning_through_a_child(f1);
    deliver_to(&mut same, 0, &grant(entry(1, Mode::R, 2, 0), 2, f2)).unwrap();
    let n = same.lock(L).unwrap();
    assert_eq!(n.held(), Mode::R);
    assert_eq!(n.frozen(), ModeSet::of(&[Mode::U, Mode::W]));
    let mut moved = owning_through_a_child(f1);
    let out = deliver_to(&mut moved, 3, &grant(entry(1, Mode::R, 2, 0), 1, f2)).unwrap();
    let n = moved.lock(L).unwrap();
    assert_eq!((n.held(), n.parent()), (Mode::R, Some(NodeId(3))));
    assert_eq!(n.frozen(), ModeSet::of(&[Mode::U]));
    // And the old parent is told that we left it.
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            to: NodeId(0),
            msg: Msg::Release {
                owned: Mode::Phi,
                ..
            }
        }
    )));
}

/// Rule 6: a freeze is applied only from our parent while we own a mode and are not the
/// token node; otherwise it is stale.
#[test]
fn freezes_apply_only_from_the_parent_to_an_owner() {
    let f = Frozen::of(ModeSet::of(&[Mode::W]), 0);
    let freeze = Msg::Freeze {
        lock: L,
        modes: f,
        waiting: Frozen::EMPTY,
    };
    // Owning IR under parent 0: a freeze from 2 (our child, not our parent) is stale.
    let mut site = owning_through_a_child(Frozen::EMPTY);
    deliver_to(&mut site, 2, &freeze).unwrap();
    assert_eq!(site.lock(L).unwrap().frozen(), ModeSet::EMPTY);
    assert_eq!(site.lock(L).unwrap().stale().freezes, 1);
    deliver_to(&mut site, 0, &freeze).unwrap();
    assert_eq!(site.lock(L).unwrap().frozen(), f.modes());
    // Owning nothing: stale even from the parent.
    let mut idle = S::new(NodeId(1), NodeId(0)).unwrap();
    deliver_to(&mut idle, 0, &freeze).unwrap();
    assert_eq!(idle.lock(L).unwrap().frozen(), ModeSet::EMPTY);
    assert_eq!(idle.lock(L).unwrap().stale().freezes, 1);
    // The token node: stale from anyone.
    let mut token = S::new(NodeId(0), NodeId(0)).unwrap();
    input(
        &mut token,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    deliver_to(&mut token, 1, &freeze).unwrap();
    assert_eq!(token.lock(L).unwrap().frozen(), ModeSet::EMPTY);
    assert_eq!(token.lock(L).unwrap().stale().freezes, 1);
}

/// A holder of R under `variant`: site 1 with R granted by its parent 0, and the token node
/// 0 holding R itself.
fn r_holders(variant: Variant) -> (S, S) {
    let mut child = S::new(NodeId(1), NodeId(0)).unwrap().with_variant(variant);
    let mut token = S::new(NodeId(0), NodeId(0)).unwrap().with_variant(variant);
    for site in [&mut child, &mut token] {
        let acquire = Input::Acquire {
            lock: L,
            mode: Mode::R,
        };
        input(site, acquire);
    }
    let g = grant(entry(1, Mode::R, 1, 0), 1, Frozen::EMPTY);
    deliver_to(&mut child, 0, &g).unwrap();
    (child, token)
}

/// Inheritance happens only under PIP (Fig. 3.8): under PCEP a holder that receives a
/// freeze with a threshold, or that queues a conflicting request of a higher priority,
/// inherits nothing; under PIP both make it inherit.
#[test]
fn only_pip_inherits_from_freezes_and_queued_requests() {
    let freeze = Msg::Freeze {
        lock: L,
        modes: Frozen::of(ModeSet::of(&[Mode::R]), 6),
        waiting: Frozen::EMPTY,
    };
    let w = Msg::Request {
        lock: L,
        entry: entry(2, Mode::W, 1, 5),
        hop: 1,
    };
    for (inheritance, from_freeze, from_queue) in
        [(Inheritance::Pcep, 0, 0), (Inheritance::Pip, 6, 5)]
    {
        let (mut child, mut token) = r_holders(Variant {
            inheritance,
            ..Variant::HILOCK
        });
        deliver_to(&mut child, 0, &freeze).unwrap();
        assert_eq!(child.priorities().inherited[0], from_freeze);
        assert_eq!(child.priorities().effective, from_freeze);
        deliver_to(&mut token, 2, &w).unwrap();
        assert_eq!(token.lock(L).unwrap().queue().len(), 1);
        assert_eq!(token.priorities().inherited[0], from_queue);
        assert_eq!(token.priorities().effective, from_queue);
    }
}

/// Rule 8.2 merge: one entry per requester, the newest request (higher serial, then higher
/// priority) wins, whichever queue it came from; an entry with mode Φ is refused and
/// changes nothing.
#[test]
fn token_queue_merge_keeps_the_newest_entry_per_requester() {
    // Site 1 (parent 0) keeps 2's W request behind its own pending W (Table 2.3: Q), then
    // receives the token whose queue has an older request of 2 and a request of 3.
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    input(
        &mut site,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    let newer = entry(2, Mode::W, 2, 0);
    deliver_to(
        &mut site,
        2,
        &Msg::Request {
            lock: L,
            entry: newer,
            hop: 1,
        },
    )
    .unwrap();
    assert_eq!(site.lock(L).unwrap().queue(), &[newer]);
    let token = |queue: &[QueueEntry]| token_msg(entry(1, Mode::W, 1, 0), Mode::Phi, queue);
    let bad = token(&[entry(3, Mode::Phi, 1, 0)]);
    let before = site.clone();
    assert!(deliver_to(&mut site, 0, &bad).is_err());
    assert_eq!(site, before);
    let out = deliver_to(
        &mut site,
        0,
        &token(&[entry(2, Mode::W, 1, 0), entry(3, Mode::R, 1, 0)]),
    )
    .unwrap();
    let n = site.lock(L).unwrap();
    assert_eq!(n.held(), Mode::W);
    assert_eq!(n.queue(), &[newer, entry(3, Mode::R, 1, 0)], "{out:?}");
}

/// A token that answers an older copy of our request (a PIP reissue served late) while a
/// newer request of ours is pending: the pending request joins the merged queue by its
/// priority, after the entries of the same priority (FIFO within a priority, Rule 8.1).
#[test]
fn own_pending_request_joins_the_token_queue_by_priority() {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    input(&mut site, Input::SetPriority { base: 1 });
    input(
        &mut site,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    assert_eq!(site.lock(L).unwrap().pending_prio(), 1);
    // An older request of ours (serial 0), not the pending one.
    let queue = [
        entry(2, Mode::W, 1, 5),
        entry(3, Mode::W, 1, 1),
        entry(0, Mode::W, 1, 0),
    ];
    let token = token_msg(entry(1, Mode::W, 0, 0), Mode::W, &queue);
    // The sender still owns W: nothing can be served, the queue stays as merged.
    deliver_to(&mut site, 0, &token).unwrap();
    let n = site.lock(L).unwrap();
    assert!(n.has_token());
    assert_eq!(n.held(), Mode::Phi);
    let order: Vec<u16> = n.queue().iter().map(|e| e.requester.0).collect();
    assert_eq!(order, [2, 3, 1, 0]);
}

fn req(e: QueueEntry, hop: u32) -> Msg<4> {
    Msg::Request {
        lock: L,
        entry: e,
        hop,
    }
}

fn step_report(site: &mut S, from: u16, msg: &Msg<4>) -> (hilock_kernel::Report, Out) {
    let mut out = Out::new();
    let r = site
        .step(
            Input::Deliver {
                from: NodeId(from),
                msg,
            },
            &mut out,
        )
        .unwrap();
    (r, out)
}

fn pip() -> Variant {
    Variant {
        inheritance: Inheritance::Pip,
        ..Variant::HILOCK
    }
}

/// PIP inherits only a priority *above* the one already inherited in the step: a freeze
/// with threshold 0 at a holder, or a conflicting request of priority 0 at the token node,
/// reports no `PipInherit` (Fig. 3.8).
#[test]
fn pip_reports_inheritance_only_for_a_higher_priority() {
    let (mut child, mut token) = r_holders(pip());
    let freeze = Msg::Freeze {
        lock: L,
        modes: Frozen::of(ModeSet::of(&[Mode::R]), 0),
        waiting: Frozen::EMPTY,
    };
    let (r, _) = step_report(&mut child, 0, &freeze);
    assert!(r.rules.contains(Rule::Rule6FreezeApplied));
    assert!(!r.rules.contains(Rule::PipInherit), "{:?}", r.rules);
    let (r, _) = step_report(&mut token, 2, &req(entry(2, Mode::W, 1, 0), 1));
    assert_eq!(token.lock(L).unwrap().queue().len(), 1);
    assert!(!r.rules.contains(Rule::PipInherit), "{:?}", r.rules);
    let (r, _) = step_report(&mut token, 3, &req(entry(3, Mode::W, 1, 2), 1));
    assert!(r.rules.contains(Rule::PipInherit), "{:?}", r.rules);
}

/// The literal token branch of Fig. 2.4 (`tokenable_transfers: false`): the token moves
/// only to a requester that already is a child; an idle token node queues a W request of a
/// non-child.
#[test]
fn literal_token_branch_transfers_only_to_a_child() {
    let literal = Variant {
        tokenable_transfers: false,
        ..Variant::HILOCK
    };
    let mut token = S::new(NodeId(0), NodeId(0)).unwrap().with_variant(literal);
    let (_, out) = step_report(&mut token, 2, &req(entry(2, Mode::W, 1, 0), 1));
    assert!(token.lock(L).unwrap().has_token());
    assert!(
        !out.iter().any(|o| matches!(
            o,
            Output::Send {
                msg: Msg::Token { .. },
                ..
            }
        )),
        "{out:?}"
    );
    assert_eq!(token.lock(L).unwrap().queue().len(), 1);
    let mut hilock = S::new(NodeId(0), NodeId(0)).unwrap();
    step_report(&mut hilock, 2, &req(entry(2, Mode::W, 1, 0), 1));
    assert!(!hilock.lock(L).unwrap().has_token());
    // The same when the queue is served (Rule 5.1): the token node held R while the W
    // request of the non-child 3 arrived, and releases.
    let (_, mut token) = r_holders(literal);
    step_report(&mut token, 3, &req(entry(3, Mode::W, 1, 0), 1));
    let mut out = Out::new();
    token.step(Input::Release { lock: L }, &mut out).unwrap();
    assert!(token.lock(L).unwrap().has_token(), "{out:?}");
    assert_eq!(token.lock(L).unwrap().queue().len(), 1);
}

/// Site `me` of a star around the token node 0, under PIP, after asking for W (granted at
/// once at the token node, pending elsewhere).
fn pip_site_asking_w(me: u16) -> S {
    let mut site = S::new(NodeId(me), NodeId(0)).unwrap().with_variant(pip());
    input(
        &mut site,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    site
}

/// The token node holding W, with node 2's W request (serial 2, priority 3) in its queue.
fn token_queueing_for_2() -> S {
    let mut token = pip_site_asking_w(0);
    step_report(&mut token, 2, &req(entry(2, Mode::W, 2, 3), 1));
    assert_eq!(token.lock(L).unwrap().queue(), &[entry(2, Mode::W, 2, 3)]);
    token
}

/// PIP, HandleReissuedRequest (Fig. 3.8): a copy of a queued request that is older, or not
/// more urgent, changes nothing and is counted as stale; a newer request of the same node
/// replaces the queued one; a more urgent copy raises it.
#[test]
fn reissued_requests_raise_only_what_is_newer_or_more_urgent() {
    // An older request of 2 with a higher priority: stale.
    let mut t = token_queueing_for_2();
    step_report(&mut t, 2, &req(entry(2, Mode::W, 1, 7), 2));
    assert_eq!(t.lock(L).unwrap().queue(), &[entry(2, Mode::W, 2, 3)]);
    assert_eq!(t.lock(L).unwrap().stale().requests, 1);
    // The same request at a lower priority: stale, the priority stays.
    let mut t = token_queueing_for_2();
    step_report(&mut t, 2, &req(entry(2, Mode::W, 2, 1), 2));
    assert_eq!(t.lock(L).unwrap().queue(), &[entry(2, Mode::W, 2, 3)]);
    assert_eq!(t.lock(L).unwrap().stale().requests, 1);
    // The same request at a higher priority: raised.
    let mut t = token_queueing_for_2();
    let (r, _) = step_report(&mut t, 2, &req(entry(2, Mode::W, 2, 6), 2));
    assert!(r.rules.contains(Rule::PipRequeue));
    assert_eq!(t.lock(L).unwrap().queue(), &[entry(2, Mode::W, 2, 6)]);
    assert_eq!(t.lock(L).unwrap().stale().requests, 0);
    // A newer request of 2: replaces the queued one.
    let mut t = token_queueing_for_2();
    step_report(&mut t, 2, &req(entry(2, Mode::W, 3, 3), 2));
    assert_eq!(t.lock(L).unwrap().queue(), &[entry(2, Mode::W, 3, 3)]);
    assert_eq!(t.lock(L).unwrap().stale().requests, 0);
}

/// A non-token node that keeps a request behind its own pending one (Table 3.2: Q) forwards
/// it to its parent once a reissue makes it more urgent than what it waits behind.
#[test]
fn a_reissue_that_outranks_the_pending_request_is_forwarded() {
    let mut site = pip_site_asking_w(1);
    step_report(&mut site, 2, &req(entry(2, Mode::W, 1, 0), 1));
    assert_eq!(site.lock(L).unwrap().queue(), &[entry(2, Mode::W, 1, 0)]);
    let (_, out) = step_report(&mut site, 2, &req(entry(2, Mode::W, 1, 5), 2));
    assert!(site.lock(L).unwrap().queue().is_empty());
    assert!(
        out.iter().any(|o| matches!(
            o,
            Output::Send {
                to: NodeId(0),
                msg: Msg::Request { entry: e, .. }
            } if *e == entry(2, Mode::W, 1, 5)
        )),
        "{out:?}"
    );
}

/// The local queue of `L` at `site` as (requester, priority), head first.
fn queued(site: &S) -> Vec<(u16, u8)> {
    let q = site.lock(L).unwrap().queue();
    q.iter().map(|e| (e.requester.0, e.prio)).collect()
}

/// PIP at the token node (Fig. 3.8): a rise of the site's priority raises its own queued
/// request, not another node's, and Rule 8.1 puts it first.
#[test]
fn a_priority_rise_at_the_token_node_raises_its_own_queued_request() {
    // The token node grants R to 2 under its own R, releases it (it owns R through 2) and
    // queues 3's W and then its own W.
    let (_, mut token) = r_holders(pip());
    step_report(&mut token, 2, &req(entry(2, Mode::R, 1, 0), 1));
    input(&mut token, Input::Release { lock: L });
    step_report(&mut token, 3, &req(entry(3, Mode::W, 1, 0), 1));
    input(
        &mut token,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    assert_eq!(queued(&token), [(3, 0), (0, 0)]);
    input(&mut token, Input::SetPriority { base: 5 });
    assert_eq!(queued(&token), [(0, 5), (3, 0)]);
}

/// Node 1 (parent 0) starts a try of `mode`; returns the site and the try's entry.
fn pending_try(mode: Mode) -> (S, QueueEntry) {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    let mut out = Out::new();
    site.step(Input::TryAcquire { lock: L, mode }, &mut out)
        .unwrap();
    let Some(Output::Send {
        to: NodeId(0),
        msg: Msg::TryRequest { entry, .. },
    }) = out.as_slice().first()
    else {
        panic!("the try goes to the parent: {out:?}");
    };
    assert_eq!(site.lock(L).unwrap().pending(), Pending::Try(*entry));
    (site, *entry)
}

/// A node's own pending try that comes back to it (a routing pointer sent it round) while
/// it has no token goes on to its parent (`on_try_request`, `spec/SPEC.md` 1.12): one
/// `TryRequest` to node 0, still pending, nothing granted or refused.
#[test]
fn an_own_try_that_comes_back_goes_on_to_the_parent() {
    let (mut site, e) = pending_try(Mode::W);
    let back = Msg::TryRequest {
        lock: L,
        entry: e,
        hop: 1,
    };
    let out = deliver_to(&mut site, 2, &back).unwrap();
    assert!(
        matches!(
            out.as_slice(),
            [Output::Send {
                to: NodeId(0),
                msg: Msg::TryRequest { entry, .. }
            }] if *entry == e
        ),
        "{out:?}"
    );
    assert_eq!(site.lock(L).unwrap().pending(), Pending::Try(e));
}

/// A stale token (one answering no pending request) that reaches a node whose try is still
/// travelling makes it the token node, and the token node decides that try at once
/// (`on_token`, `spec/SPEC.md` 1.12, "A stale token decides the try"): granted where Rule
/// 3.2 would grant it, refused with `WouldBlock` where Rule 4.2 would queue it (the sender
/// of the token still owns R) — either way in that step, with nothing sent, and no longer
/// pending. The copy of the try that comes back afterwards is stale: no output at all.
#[test]
fn a_stale_token_decides_the_pending_try_and_its_copy_is_stale_after() {
    for (sender_owned, granted) in [(Mode::Phi, true), (Mode::R, false)] {
        let (mut site, e) = pending_try(Mode::W);
        let token = token_msg(entry(1, Mode::W, e.serial + 7, 0), sender_owned, &[]);
        let out = deliver_to(&mut site, 0, &token).unwrap();
        assert!(site.lock(L).unwrap().has_token());
        let outcome = out.iter().find_map(|o| match o {
            Output::Granted { mode, .. } => Some(Ok(*mode)),
            Output::WouldBlock { mode, .. } => Some(Err(*mode)),
            _ => None,
        });
        let want = if granted { Ok(Mode::W) } else { Err(Mode::W) };
        assert_eq!(outcome, Some(want), "{sender_owned}: {out:?}");
        assert_eq!(out.len(), 1, "decided here, nothing sent: {out:?}");
        assert_eq!(site.lock(L).unwrap().pending(), Pending::None);
        let held = if granted { Mode::W } else { Mode::Phi };
        assert_eq!(site.lock(L).unwrap().held(), held);
        let back = Msg::TryRequest {
            lock: L,
            entry: e,
            hop: 1,
        };
        let out = deliver_to(&mut site, 2, &back).unwrap();
        assert!(out.is_empty(), "the copy is stale: {out:?}");
        assert_eq!(site.lock(L).unwrap().held(), held);
    }
}

/// `Forwarding::ClassPointers` (`spec/SPEC.md` 1.6, "Forwarding"): an idle relay learns a
/// routing pointer only from a request that came straight from its requester. Node 1
/// (parent 0) forwards node 3's W request that node 2 passed on: no pointer, so node 2's
/// own W request, which node 3's pending W would keep (Table 3.2), still goes to the
/// parent. Node 2's request came straight from node 2: node 3's next W follows the
/// pointer to node 2.
#[test]
fn a_routing_pointer_is_learnt_only_from_a_request_straight_from_its_requester() {
    let w = |requester: u16, serial: u32, hop: u32| Msg::Request {
        lock: L,
        entry: entry(requester, Mode::W, serial, 0),
        hop,
    };
    let sent_to = |out: &Out| match out.as_slice() {
        [Output::Send {
            to,
            msg: Msg::Request { .. },
        }] => *to,
        other => panic!("one forwarded request: {other:?}"),
    };
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    let out = deliver_to(&mut site, 2, &w(3, 1, 1)).unwrap();
    assert_eq!(sent_to(&out), NodeId(0));
    let out = deliver_to(&mut site, 2, &w(2, 1, 2)).unwrap();
    assert_eq!(
        sent_to(&out),
        NodeId(0),
        "no pointer from a passed-on request"
    );
    let out = deliver_to(&mut site, 3, &w(3, 2, 1)).unwrap();
    assert_eq!(
        sent_to(&out),
        NodeId(2),
        "the pointer to node 2 is followed"
    );
}

/// Rule 8.2 merge at a new token node: the queue that comes with the token is merged with
/// the local one, and an entry of this node other than its pending request (an older
/// request of it that the sender still had queued) is dropped. Node 1 is granted W by the
/// token; the token's queue carries node 1's older R and node 2's R: only node 2's R is
/// left.
#[test]
fn a_token_drops_this_nodes_older_entries_from_the_merged_queue() {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    let mut out = Out::new();
    site.step(
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send {
        msg: Msg::Request { entry: mine, .. },
        ..
    }) = out.as_slice().first()
    else {
        panic!("the request goes to the parent: {out:?}");
    };
    let older = entry(1, Mode::R, mine.serial.wrapping_sub(1), 0);
    let other = entry(2, Mode::R, 1, 0);
    let token = token_msg(*mine, Mode::Phi, &[older, other]);
    deliver_to(&mut site, 0, &token).unwrap();
    let n = site.lock(L).unwrap();
    assert_eq!(n.held(), Mode::W);
    assert_eq!(n.queue(), [other]);
}

/// Node 0 with the token, holding W (granted by its own step, Rule 3.2).
fn token_node_holding_w() -> S {
    let mut site = S::new(NodeId(0), NodeId(0)).unwrap();
    let mut out = Out::new();
    site.step(
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    site
}

/// Rule 8.1 after a replacement: a newer request of a node whose older one waits in the
/// token node's queue replaces it in place, and the queue is sorted again by priority.
/// Node 0 holds W with the token; nodes 1 and 2 wait for R at priority 0; node 2's newer
/// request at priority 5 goes to the head.
#[test]
fn a_replaced_queue_entry_is_sorted_again_by_priority() {
    let mut site = token_node_holding_w();
    let r = |requester: u16, serial: u32, prio: u8, hop: u32| Msg::Request {
        lock: L,
        entry: entry(requester, Mode::R, serial, prio),
        hop,
    };
    deliver_to(&mut site, 1, &r(1, 1, 0, 1)).unwrap();
    deliver_to(&mut site, 2, &r(2, 1, 0, 1)).unwrap();
    deliver_to(&mut site, 2, &r(2, 2, 5, 2)).unwrap();
    let q = site.lock(L).unwrap().queue();
    assert_eq!(q, [entry(2, Mode::R, 2, 5), entry(1, Mode::R, 1, 0)]);
}

/// Rule 4.1 with a pending try (`spec/SPEC.md` 1.12): a try may be refused, so nothing
/// waits behind it. Node 1 (parent 0) has a try of W pending; node 2's W request, which
/// Table 3.2 would keep behind a pending W request, goes on to the parent and node 1's
/// queue stays empty.
#[test]
fn nothing_waits_behind_a_pending_try() {
    let (mut site, _) = pending_try(Mode::W);
    let w = Msg::Request {
        lock: L,
        entry: entry(2, Mode::W, 1, 0),
        hop: 1,
    };
    let out = deliver_to(&mut site, 2, &w).unwrap();
    assert!(
        matches!(
            out.as_slice(),
            [Output::Send {
                to: NodeId(0),
                msg: Msg::Request { .. }
            }]
        ),
        "{out:?}"
    );
    assert!(site.lock(L).unwrap().queue().is_empty());
}

/// An older request of a node whose newer one already waits in the token node's queue is
/// stale: counted, reported (`StaleRequest`), and the queue keeps the newer one.
#[test]
fn an_older_request_behind_a_queued_newer_one_is_reported_stale() {
    let mut site = token_node_holding_w();
    let r = |serial: u32, hop: u32| Msg::Request {
        lock: L,
        entry: entry(2, Mode::R, serial, 0),
        hop,
    };
    deliver_to(&mut site, 2, &r(2, 1)).unwrap();
    let (out, rules) = deliver_report(&mut site, 2, &r(1, 2));
    assert!(out.is_empty(), "{out:?}");
    assert!(rules.contains(Rule::StaleRequest), "{rules:?}");
    assert_eq!(site.lock(L).unwrap().stale().requests, 1);
    assert_eq!(site.lock(L).unwrap().queue(), [entry(2, Mode::R, 2, 0)]);
}

/// The literal token branch of Fig. 2.5 (`Check_requests_on_queue`, `tokenable_transfers:
/// false`) when the queue is served: the token node, idle after its release, may neither
/// transfer the token to a non-child nor grant it a W copy (Table 2.2), so the head waits —
/// nothing is sent and the token stays.
#[test]
fn literal_queue_service_leaves_a_non_childs_w_waiting() {
    let literal = Variant {
        tokenable_transfers: false,
        ..Variant::HILOCK
    };
    let mut token = S::new(NodeId(0), NodeId(0)).unwrap().with_variant(literal);
    input(
        &mut token,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    step_report(&mut token, 3, &req(entry(3, Mode::W, 1, 0), 1));
    assert_eq!(token.lock(L).unwrap().queue().len(), 1);
    let mut out = Out::new();
    token.step(Input::Release { lock: L }, &mut out).unwrap();
    assert!(
        !out.iter().any(|o| matches!(o, Output::Send { .. })),
        "nothing may be sent for the waiting W: {out:?}"
    );
    let n = token.lock(L).unwrap();
    assert!(n.has_token());
    assert_eq!(n.queue().len(), 1);
    assert_eq!(n.owned(), Mode::Phi);
}
