//! The token engine's forwarding, child-queue and PCEP paths, one interleaving each:
//! where an idle relay sends a request it forwards under `Forwarding::Compress`,
//! `ClassPointers` and `OrderedPointers` (hilock's routing pointers, `spec/SPEC.md` 1.6
//! "Forwarding"); a grant from the node's own parent, which keeps the parent's record
//! (P3; Decision 8, "leave the old parent", in 1.4); `check_queue_at_child`'s frozen test
//! (Rule 6_PRIO, Table 3.1) and its forwarding of stranded requests (Rule 4.1, Table 2.3;
//! Decision 4(c)); PCEP's ceiling rule (thesis Fig. 3.7) and its separation from PIP's
//! reissue (Fig. 3.8; `spec/SPEC.md` 1.5); the output bound `Protocol::MAX_OUTPUTS` the
//! harness sizes its buffer by (1.3, "Validate, then apply"); and the premise of
//! `tables::derived::frozen_by` (Table 2.4). Each test was written for a mutant of the
//! thesis core that the other tests missed (`docs/verification.md`, "Mutation testing").
//! Every run goes through the one harness (`hilock_harness::Cluster`).

use hilock_harness::{Cluster, Step};
use hilock_kernel::token::tables::{derived, tokenable};
use hilock_kernel::{
    compatible, Forwarding, Inheritance, Input, LockId, Mode, Msg, NodeId, Output, Priority, Rule,
    Site, Variant,
};

type S = Site<8, 2, 8>;
const L0: LockId = LockId(0);
const L1: LockId = LockId(1);

/// n0 holds every token; n1's parent is n0; n2..n7 are children of n1 (for both locks).
fn relay_tree(forwarding: Forwarding, inheritance: Inheritance) -> Cluster<S> {
    let mut c = Cluster::<S>::hilock(8, |_, me| match me.0 {
        0 => None,
        1 => Some(NodeId(0)),
        _ => Some(NodeId(1)),
    })
    .unwrap();
    let v = Variant {
        forwarding,
        inheritance,
        ..Variant::HILOCK
    };
    c.configure(|s| s.with_variant(v));
    c
}

fn input(c: &mut Cluster<S>, at: u16, input: Input<'_, Msg<8>>) -> Step<Msg<8>> {
    let s = c.input(NodeId(at), input).unwrap();
    c.check_safety().unwrap();
    s
}

fn acquire(c: &mut Cluster<S>, at: u16, lock: LockId, mode: Mode) -> Step<Msg<8>> {
    input(c, at, Input::Acquire { lock, mode })
}

fn deliver(c: &mut Cluster<S>, from: u16, to: u16) -> Step<Msg<8>> {
    let (_, r) = c
        .deliver(NodeId(from), NodeId(to))
        .expect("a message in flight");
    let s = r.unwrap();
    c.check_safety().unwrap();
    s
}

/// The requests a step sent: (to, requester, mode).
fn requests(s: &Step<Msg<8>>) -> Vec<(u16, u16, Mode)> {
    s.outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Msg::Request { entry, .. },
            } => Some((to.0, entry.requester.0, entry.mode)),
            _ => None,
        })
        .collect()
}

/// The grants a step sent: (to, mode).
fn grants(s: &Step<Msg<8>>) -> Vec<(u16, Mode)> {
    s.outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send {
                to,
                msg: Msg::Grant { entry, .. },
            } => Some((to.0, entry.mode)),
            _ => None,
        })
        .collect()
}

/// Child `at` requests `mode` of lock 0 and the idle relay n1 receives it: where n1 sends it.
fn relay(c: &mut Cluster<S>, at: u16, mode: Mode) -> u16 {
    acquire(c, at, L0, mode);
    let s = deliver(c, at, 1);
    let r = requests(&s);
    assert_eq!(r.len(), 1, "n1 forwards n{at}'s request once: {r:?}");
    assert_eq!((r[0].1, r[0].2), (at, mode));
    let to = r[0].0;
    assert_eq!(
        s.rules.contains(Rule::CompressShortcut),
        to != 0,
        "CompressShortcut fires iff n1 does not use its parent"
    );
    to
}

/// Compress: the idle relay n1 sends a request to the last requester it forwarded straight
/// from its requester iff that requester keeps it (Table 3.2), else to its parent; the
/// shortcut is the last such request.
#[test]
fn compress_shortcut_is_the_last_direct_request_and_used_only_where_it_keeps() {
    let mut c = relay_tree(Forwarding::Compress, Inheritance::None);
    // The first request goes to the parent; n2 (R) becomes the shortcut.
    assert_eq!(relay(&mut c, 2, Mode::R), 0);
    // R keeps R: n3's request goes to n2.
    assert_eq!(relay(&mut c, 3, Mode::R), 2);
    // R does not keep IR: to the parent (n3's R request, came from n3, is the shortcut now).
    assert_eq!(relay(&mut c, 4, Mode::IR), 0);
    // n4 (IR) is the shortcut now: IR keeps IR.
    assert_eq!(relay(&mut c, 5, Mode::IR), 4);
}

/// ClassPointers: one pointer per mode, newest first; a request goes to the newest pointer
/// (other than its own requester) that keeps it, else to the parent.
#[test]
fn class_pointers_keep_one_pointer_per_mode() {
    let mut c = relay_tree(Forwarding::ClassPointers, Inheritance::None);
    assert_eq!(relay(&mut c, 2, Mode::R), 0); // pointers: n2 R
    assert_eq!(relay(&mut c, 3, Mode::IR), 0); // R keeps no IR; pointers: n3 IR, n2 R
    assert_eq!(relay(&mut c, 4, Mode::IW), 0); // n4 IW, n3 IR, n2 R
                                               // The IR pointer (the second of three) survived two newer requests of other modes.
    assert_eq!(relay(&mut c, 5, Mode::IR), 3); // n5 IR, n4 IW, n2 R
                                               // ... and so did the R pointer, the oldest.
    assert_eq!(relay(&mut c, 6, Mode::R), 2);
}

/// ClassPointers: a newer pointer of a mode replaces the older one of that mode; a request
/// is never sent to its own requester. n3's request, reissued with a higher priority (PIP),
/// comes to n1 again: n2's old R pointer (dropped) would keep it, n3's own pointer must not
/// be used, so it goes to the parent.
#[test]
fn class_pointers_replace_the_older_pointer_of_the_same_mode() {
    let mut c = relay_tree(Forwarding::ClassPointers, Inheritance::Pip);
    input(&mut c, 2, Input::SetPriority { base: 7 });
    assert_eq!(relay(&mut c, 2, Mode::R), 0); // pointers: n2 R at 7
    assert_eq!(relay(&mut c, 3, Mode::R), 2); // R at 7 keeps R at 0; pointers: n3 R
    let s = input(&mut c, 3, Input::SetPriority { base: 5 });
    assert!(s.rules.contains(Rule::PipReissue));
    let s = deliver(&mut c, 3, 1);
    assert_eq!(requests(&s), vec![(0, 3, Mode::R)]);
}

/// OrderedPointers (experimental, `spec/SPEC.md` 1.6 "Forwarding"): the
/// idle relay sends a request to a pointer whose requester has a smaller id than the
/// request's and keeps it (Table 2.3, Q), else to its parent; the pointer it used is gone,
/// and the request's requester is the newest pointer, replacing the one of its mode.
/// Kills node.rs `route_ordered`: `s.requester != entry.requester` → `==`, `s.requester <
/// entry.requester` → `==`/`>`, `... == QueueOrForward::Queue` → `!=`, and either `&&` →
/// `||`.
#[test]
fn ordered_pointers_use_a_smaller_requester_that_keeps_the_request() {
    let mut c = relay_tree(Forwarding::OrderedPointers, Inheritance::None);
    assert_eq!(relay(&mut c, 2, Mode::R), 0); // pointers: n2 R
    assert_eq!(relay(&mut c, 3, Mode::R), 2); // 2 < 3, R keeps R; pointers: n3 R
    assert_eq!(relay(&mut c, 5, Mode::R), 3); // 3 < 5; pointers: n5 R
    assert_eq!(relay(&mut c, 4, Mode::R), 0); // 5 > 4: parent; pointers: n4 R
    assert_eq!(relay(&mut c, 6, Mode::IR), 0); // 4 < 6, but R does not keep IR: parent
}

/// A grant from the node's own parent while it owns a mode (`reattach`) sends no release:
/// the parent's record of it must stay what it owns. n0 (the token node) holds R; n1 owns
/// IR through n2 (a Rule 3.1 grant) when it asks n0 for R; after the copy grant n0 records
/// n1 as owning R (P3 exact, checked after every step too). Kills node.rs
/// `leave_old_parent`: `old != from && before != Mode::Phi` with `&&` → `||` (a release of
/// Φ to the parent that has just granted).
#[test]
fn a_grant_from_the_own_parent_keeps_the_parents_record() {
    let mut c = relay_tree(Forwarding::Thesis, Inheritance::None);
    let owned = |c: &Cluster<S>, i: u16| c.site(NodeId(i)).lock(L0).unwrap().owned();
    assert!(acquire(&mut c, 0, L0, Mode::R).granted());
    acquire(&mut c, 1, L0, Mode::IR);
    assert_eq!(grants(&deliver(&mut c, 1, 0)), vec![(1, Mode::IR)]);
    assert!(deliver(&mut c, 0, 1).granted());
    acquire(&mut c, 2, L0, Mode::IR);
    assert_eq!(grants(&deliver(&mut c, 2, 1)), vec![(2, Mode::IR)]);
    assert!(deliver(&mut c, 1, 2).granted());
    let s = input(&mut c, 1, Input::Release { lock: L0 });
    assert!(
        s.outputs.is_empty(),
        "n1 still owns IR through n2: {:?}",
        s.outputs
    );
    assert_eq!(owned(&c, 1), Mode::IR);
    acquire(&mut c, 1, L0, Mode::R);
    assert_eq!(grants(&deliver(&mut c, 1, 0)), vec![(1, Mode::R)]);
    let s = deliver(&mut c, 0, 1);
    assert!(s.granted());
    let releases: Vec<_> = s
        .outputs
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Send {
                    msg: Msg::Release { .. },
                    ..
                }
            )
        })
        .collect();
    assert!(
        releases.is_empty(),
        "a release to the parent that granted: {releases:?}"
    );
    assert_eq!(owned(&c, 1), Mode::R);
    let rec = c.site(NodeId(0)).lock(L0).unwrap().peers()[1].child_owned;
    assert_eq!(rec, Mode::R);
}

/// A grant (and the node's own request) makes n1 forget its pointers: once idle again it
/// sends a request that n2's old pointer would keep to its parent.
#[test]
fn class_pointers_are_forgotten_on_a_grant() {
    let mut c = relay_tree(Forwarding::ClassPointers, Inheritance::None);
    assert!(acquire(&mut c, 0, L0, Mode::R).granted());
    assert_eq!(relay(&mut c, 2, Mode::R), 0); // pointers: n2 R
    acquire(&mut c, 1, L0, Mode::IR);
    assert_eq!(grants(&deliver(&mut c, 1, 0)), vec![(2, Mode::R)]);
    assert_eq!(grants(&deliver(&mut c, 1, 0)), vec![(1, Mode::IR)]);
    assert!(deliver(&mut c, 0, 1).granted());
    input(&mut c, 1, Input::Release { lock: L0 });
    assert_eq!(relay(&mut c, 3, Mode::R), 0);
}

/// `check_queue_at_child` after a grant that carries frozen modes: n1 (granted R at
/// priority 5 past n4's W at 3) must not grant n2's queued R at 0, which R's freeze at 3
/// blocks; not kept behind any pending request now, the request is forwarded to the parent.
#[test]
fn a_child_forwards_a_queued_request_its_new_freeze_blocks() {
    let mut c = relay_tree(Forwarding::Thesis, Inheritance::None);
    // n4 is a child of n1 in this tree; its W request is forwarded to n0 first.
    assert!(acquire(&mut c, 0, L0, Mode::R).granted());
    input(&mut c, 4, Input::SetPriority { base: 3 });
    acquire(&mut c, 4, L0, Mode::W);
    assert_eq!(requests(&deliver(&mut c, 4, 1)), vec![(0, 4, Mode::W)]);
    deliver(&mut c, 1, 0); // n0 queues W and freezes IR, R, U at 3
    input(&mut c, 1, Input::SetPriority { base: 5 });
    acquire(&mut c, 1, L0, Mode::R);
    acquire(&mut c, 2, L0, Mode::R);
    let s = deliver(&mut c, 2, 1);
    assert!(s.outputs.is_empty(), "n1 keeps n2's R behind its own R");
    assert_eq!(grants(&deliver(&mut c, 1, 0)), vec![(1, Mode::R)]);
    let s = deliver(&mut c, 0, 1);
    assert!(s.granted());
    assert_eq!(grants(&s), vec![]);
    assert_eq!(requests(&s), vec![(0, 2, Mode::R)]);
}

/// `check_queue_at_child` with a pending request: n1 owns R through its child n2 and waits
/// for W; n3's IW waits behind the W (Table 2.3 Q). When n2 releases, n1 still cannot grant
/// IW and must keep it, not forward it.
#[test]
fn a_pending_child_keeps_what_its_pending_mode_keeps_after_a_release() {
    let mut c = relay_tree(Forwarding::Thesis, Inheritance::None);
    assert!(acquire(&mut c, 0, L0, Mode::R).granted());
    acquire(&mut c, 1, L0, Mode::R);
    deliver(&mut c, 1, 0);
    assert!(deliver(&mut c, 0, 1).granted());
    acquire(&mut c, 2, L0, Mode::R);
    assert_eq!(grants(&deliver(&mut c, 2, 1)), vec![(2, Mode::R)]);
    assert!(deliver(&mut c, 1, 2).granted());
    input(&mut c, 1, Input::Release { lock: L0 });
    assert_eq!(
        requests(&acquire(&mut c, 1, L0, Mode::W)),
        vec![(0, 1, Mode::W)]
    );
    acquire(&mut c, 3, L0, Mode::IW);
    assert!(deliver(&mut c, 3, 1).outputs.is_empty(), "n1 keeps IW");
    input(&mut c, 2, Input::Release { lock: L0 });
    let s = deliver(&mut c, 2, 1);
    assert!(s.rules.contains(Rule::Rule5_2Propagate));
    assert_eq!(requests(&s), vec![], "IW stays queued behind n1's W");
    assert_eq!(c.site(NodeId(1)).lock(L0).unwrap().queue().len(), 1);
}

fn pcep_star() -> Cluster<S> {
    let mut c = Cluster::<S>::star(2, NodeId(0)).unwrap();
    let v = Variant {
        inheritance: Inheritance::Pcep,
        ..Variant::HILOCK
    };
    c.configure(|s| s.with_variant(v).with_ceilings([5, 0]));
    c
}

fn effective(c: &Cluster<S>, at: u16) -> Priority {
    c.site(NodeId(at)).priorities().effective
}

/// PCEP's ceiling rule fires exactly when a grant raises ξ(self) (lock 0's ceiling 5 above
/// the base 0), not on a grant that leaves it (lock 1's ceiling 0).
#[test]
fn pcep_ceiling_fires_only_when_a_grant_raises_the_priority() {
    let mut c = pcep_star();
    let s = acquire(&mut c, 0, L1, Mode::R);
    assert!(s.granted());
    assert!(!s.rules.contains(Rule::PcepCeiling), "{}", s.rules);
    assert_eq!(effective(&c, 0), 0);
    let s = acquire(&mut c, 0, L0, Mode::R);
    assert!(s.granted());
    assert!(s.rules.contains(Rule::PcepCeiling), "{}", s.rules);
    assert_eq!(effective(&c, 0), 5);
}

/// A rise of ξ(self) under PCEP reissues nothing (reissuing is PIP's rule): n1 waits for
/// lock 1 when its grant of lock 0 raises it to lock 0's ceiling.
#[test]
fn a_pcep_rise_reissues_no_pending_request() {
    let mut c = pcep_star();
    acquire(&mut c, 1, L0, Mode::R);
    acquire(&mut c, 1, L1, Mode::R);
    deliver(&mut c, 1, 0); // the token of lock 0 goes to n1
    let s = deliver(&mut c, 0, 1);
    assert!(s.granted());
    assert!(s.rules.contains(Rule::PcepCeiling));
    assert_eq!(effective(&c, 1), 5);
    assert!(!s.rules.contains(Rule::PipReissue), "{}", s.rules);
    assert_eq!(requests(&s), vec![]);
    assert_eq!(c.in_flight(), 1, "only n1's first request for lock 1");
}

/// The harness collects a step's outputs on the stack when the protocol's bound
/// (`Protocol::MAX_OUTPUTS`) fits its 32-slot buffer, and the kernel refuses a step whose
/// buffer has less room than its bound (`Site::MAX_OUTPUTS`): the two must be the same
/// number. At a bound of 33 (N + Q + L + 6 with N = 10, Q = 16, L = 1, and with N = 1,
/// Q = L = 13) a smaller `Protocol::MAX_OUTPUTS` would make every step fail.
#[test]
fn sites_whose_output_bound_just_exceeds_the_stack_buffer_step() {
    fn run<const N: usize, const L: usize, const Q: usize>() {
        assert_eq!(Site::<N, L, Q>::MAX_OUTPUTS, 33);
        let mut c = Cluster::<Site<N, L, Q>>::star(N, NodeId(0)).unwrap();
        let s = c
            .input(
                NodeId(0),
                Input::Acquire {
                    lock: LockId(0),
                    mode: Mode::W,
                },
            )
            .unwrap();
        assert!(s.granted());
        assert_eq!(
            <Site<N, L, Q> as hilock_kernel::Protocol>::MAX_OUTPUTS,
            Site::<N, L, Q>::MAX_OUTPUTS
        );
    }
    run::<10, 1, 16>();
    run::<1, 13, 13>();
}

/// `tables::derived::frozen_by`'s premise, stated in its doc comment: at the token node
/// "grantable ∨ tokenable is plain compatibility". (It makes `compatible ∧ (grantable ∨
/// tokenable)` and `compatible ∨ grantable ∨ tokenable` the same set, so that mutant of
/// the derivation is equivalent: `docs/verification.md`, "Mutation testing".)
#[test]
fn grantable_or_tokenable_is_compatibility() {
    for o in Mode::ALL {
        for m in Mode::REQUESTABLE {
            assert_eq!(
                derived::grantable(o, m) || tokenable(o, m),
                compatible(o, m),
                "({o}, {m})"
            );
        }
    }
}
