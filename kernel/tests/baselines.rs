//! The two baselines' guards and loops (`spec/SPEC.md` 1.10, "The baselines"):
//! Naimi-Trehel (thesis section 2.1, `NaimiSite`) and Mueller's prioritized Naimi (thesis
//! section 3.1.1, `PrioNaimiSite`). Each test asserts what a guard or a loop of
//! `kernel/src/baseline/naimi.rs` or `kernel/src/baseline/pnaimi.rs` exists for: the validation that rejects
//! bad input with a typed error and the state untouched, the upgrade `U → W`,
//! duplicate-token detection by generation, FIFO within a priority level, the priority
//! merge of the token's queue, and `Protocol::is_pending`. (Written for the mutants of
//! those files that `naimi.rs` and `pnaimi.rs` here missed: `docs/verification.md`,
//! "Mutation testing".) Runs of several sites go through the one harness (`Cluster`, via
//! `common::Net`); single-site checks call `step` directly.

use hilock_kernel::{
    Input, KernelError, LockId, Mode, NaimiMsg, NaimiSite, NodeId, Output, Outputs, PrioNaimiMsg,
    PrioNaimiSite, PrioRequest, Protocol,
};

use crate::common;

type N5 = NaimiSite<5, 1>;
type P6 = PrioNaimiSite<6, 1, 8, 6>;
const L: LockId = LockId(0);

fn naimi(me: u16) -> N5 {
    N5::new(NodeId(me), NodeId(0)).unwrap()
}

fn pnaimi(me: u16) -> P6 {
    P6::new(NodeId(me), NodeId(0)).unwrap()
}

fn acquire<'a, M>(mode: Mode) -> Input<'a, M> {
    Input::Acquire { lock: L, mode }
}

fn w<'a, M>() -> Input<'a, M> {
    acquire(Mode::W)
}

/// The requesters in `s`'s local queue, head first.
fn queue_of(s: &P6) -> Vec<u16> {
    s.lock(L)
        .unwrap()
        .queue
        .iter()
        .map(|r| r.requester.0)
        .collect()
}

/// A step of either baseline may emit 2 outputs: with room for 1 it is refused (nothing
/// changes), with room for exactly 2 it runs (at the token holder `s`: W granted).
fn step_needs_room_for_two_outputs<P: Protocol>(mut s: P) {
    let mut one: Outputs<P::Msg, 1> = Outputs::new();
    assert_eq!(s.step(w(), &mut one), Err(KernelError::OutputsFull));
    assert!(one.is_empty());
    assert_eq!(s.held(L), Ok(Mode::Phi), "state untouched");
    let mut two: Outputs<P::Msg, 2> = Outputs::new();
    s.step(w(), &mut two).unwrap();
    assert!(matches!(
        two.as_slice(),
        [Output::Granted {
            lock: L,
            mode: Mode::W
        }]
    ));
    assert_eq!(s.held(L), Ok(Mode::W));
}

/// `U → W` completes at once at the holder `s` of U ("Naimi doing the same work"); it is
/// refused without U held.
fn upgrade_u_to_w<P: Protocol>(mut s: P) {
    let mut out: Outputs<P::Msg, 2> = Outputs::new();
    assert_eq!(
        s.step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::NotHoldingU(L))
    );
    s.step(acquire(Mode::U), &mut out).unwrap();
    out.clear();
    s.step(Input::Upgrade { lock: L }, &mut out).unwrap();
    assert!(matches!(out.as_slice(), [Output::Upgraded { lock: L }]));
    assert_eq!(s.held(L), Ok(Mode::W));
}

/// One step at `s` with a 2-slot output buffer.
fn one<P: Protocol>(s: &mut P, input: Input<'_, P::Msg>) -> Result<(), KernelError> {
    let mut out: Outputs<P::Msg, 2> = Outputs::new();
    s.step(input, &mut out).map(|_| ())
}

/// Each `(from, msg, unknown)` delivered at the token holder `s` is refused with
/// `UnknownNode(unknown)` (the sender, or the requester the message names), with no output
/// and `s` untouched.
fn refuses_each<P>(mut s: P, bad: &[(NodeId, P::Msg, NodeId)])
where
    P: Protocol + Clone + PartialEq + core::fmt::Debug,
{
    let before = s.clone();
    for (from, msg, unknown) in bad {
        let mut out: Outputs<P::Msg, 2> = Outputs::new();
        let r = s.step(Input::Deliver { from: *from, msg }, &mut out);
        assert_eq!(r, Err(KernelError::UnknownNode(*unknown)), "{msg:?}");
        assert!(out.is_empty());
    }
    assert_eq!(s, before, "state untouched");
    assert_eq!(s.has_token(L), Ok(true), "token not passed");
}

/// `s` (n1) requests W and is granted by token `t1` from n0; `next` (if any) is a request
/// of n2 that makes n2 the next owner (Naimi); on release the token (generation 2) goes to
/// n2. `t1` delivered again is a duplicate and gives no second token.
fn a_passed_on_token_is_a_duplicate<P: Protocol>(mut s: P, t1: P::Msg, next: Option<P::Msg>) {
    let from = NodeId(0);
    one(&mut s, w()).unwrap(); // request to n0
    one(&mut s, Input::Deliver { from, msg: &t1 }).unwrap(); // granted
    if let Some(req) = &next {
        let from = NodeId(2);
        one(&mut s, Input::Deliver { from, msg: req }).unwrap(); // next = n2
    }
    one(&mut s, Input::Release { lock: L }).unwrap(); // token (gen 2) to n2
    assert_eq!(s.has_token(L), Ok(false));
    assert_eq!(
        one(&mut s, Input::Deliver { from, msg: &t1 }),
        Err(KernelError::Duplicate(L))
    );
    assert_eq!(s.has_token(L), Ok(false), "no second token");
}

/// Token generations are `u64`, compared modulo 2^64 (as the token engine's): `s` (n1)
/// gets the token at generation 2^32 − 3 and passes it to n2 (2^32 − 2); the token moves
/// on through other nodes past 2^32 and comes back to `s` at 2^32 + 2. With `u32`
/// generations the moves wrapped past 0, the token came back at 2, and `s`, which had seen
/// 2^32 − 2, refused it as a duplicate: the lock was lost once the generations wrapped.
fn generations_pass_two_to_the_32<P: Protocol>(
    mut s: P,
    token: impl Fn(u64) -> P::Msg,
    next: Option<P::Msg>,
) {
    let (n0, n2) = (NodeId(0), NodeId(2));
    one(&mut s, w()).unwrap(); // request to n0
    let t = token(u64::from(u32::MAX - 2));
    one(&mut s, Input::Deliver { from: n0, msg: &t }).unwrap(); // granted
    if let Some(req) = &next {
        one(&mut s, Input::Deliver { from: n2, msg: req }).unwrap(); // n2 asks
    }
    one(&mut s, Input::Release { lock: L }).unwrap(); // token (gen 2^32 − 2) to n2
    assert_eq!(s.has_token(L), Ok(false));
    one(&mut s, w()).unwrap(); // s asks again
    let back = token((1 << 32) + 2);
    one(
        &mut s,
        Input::Deliver {
            from: n2,
            msg: &back,
        },
    )
    .unwrap();
    assert_eq!(s.has_token(L), Ok(true), "the token came back");
    assert_eq!(s.held(L), Ok(Mode::W));
}

/// `Protocol::is_pending` reports a request of `s` (not the token holder) on its way (the
/// harness's liveness check and the demo read it).
fn is_pending_reports_a_waiting_request<P: Protocol>(mut s: P) {
    assert_eq!(s.is_pending(L), Ok(false));
    let mut out: Outputs<P::Msg, 2> = Outputs::new();
    s.step(w(), &mut out).unwrap();
    assert_eq!(s.is_pending(L), Ok(true));
}

// ---------------------------------------------------------------- Naimi-Trehel (naimi.rs)

#[test]
fn naimi_step_needs_room_for_two_outputs() {
    step_needs_room_for_two_outputs(naimi(0));
}

/// A message from this node itself or from a node outside 0..N is refused.
#[test]
fn naimi_rejects_messages_from_itself_or_unknown_nodes() {
    let tok = NaimiMsg::Token {
        lock: L,
        generation: 1,
    };
    let bad = [NodeId(0), NodeId(5)].map(|n| (n, tok, n));
    refuses_each(naimi(0), &bad);
}

#[test]
fn naimi_upgrade_u_to_w() {
    upgrade_u_to_w(naimi(0));
}

/// A stale copy of a token this node has already passed on (its generation ≤ the highest
/// seen) is a duplicate, even though the node holds no token now.
#[test]
fn naimi_rejects_a_stale_token() {
    let t1 = NaimiMsg::Token {
        lock: L,
        generation: 1,
    };
    let req = NaimiMsg::Request {
        lock: L,
        requester: NodeId(2),
    };
    a_passed_on_token_is_a_duplicate(naimi(1), t1, Some(req));
}

#[test]
fn naimi_generations_pass_two_to_the_32() {
    let token = |generation| NaimiMsg::Token {
        lock: L,
        generation,
    };
    let req = NaimiMsg::Request {
        lock: L,
        requester: NodeId(2),
    };
    generations_pass_two_to_the_32(naimi(1), token, Some(req));
}

#[test]
fn naimi_is_pending_reports_a_waiting_request() {
    is_pending_reports_a_waiting_request(naimi(1));
}

// ------------------------------------------------- prioritized Naimi (pnaimi.rs)

/// A site's initial probable owner must be another known node.
#[test]
fn pnaimi_with_owners_rejects_itself_or_unknown_owner() {
    for o in [NodeId(1), NodeId(6)] {
        assert_eq!(
            P6::with_owners(NodeId(1), |_| Some(o)).err(),
            Some(KernelError::UnknownNode(o))
        );
    }
}

#[test]
fn pnaimi_step_needs_room_for_two_outputs() {
    step_needs_room_for_two_outputs(pnaimi(0));
}

#[test]
fn pnaimi_rejects_messages_from_itself_or_unknown_nodes() {
    let req = PrioNaimiMsg::<6>::Request {
        lock: L,
        req: PrioRequest {
            requester: NodeId(1),
            prio: 0,
        },
    };
    let bad = [NodeId(0), NodeId(6)].map(|n| (n, req.clone(), n));
    refuses_each(pnaimi(0), &bad);
}

/// A request whose requester is this node or outside 0..N is refused.
#[test]
fn pnaimi_rejects_a_request_of_itself_or_an_unknown_requester() {
    let bad = [NodeId(0), NodeId(6)].map(|requester| {
        let req = PrioRequest { requester, prio: 0 };
        (
            NodeId(1),
            PrioNaimiMsg::<6>::Request { lock: L, req },
            requester,
        )
    });
    refuses_each(pnaimi(0), &bad);
}

#[test]
fn pnaimi_upgrade_u_to_w() {
    upgrade_u_to_w(pnaimi(0));
}

fn token(generation: u64, queue: &[(u16, u8)]) -> PrioNaimiMsg<6> {
    PrioNaimiMsg::Token {
        lock: L,
        generation,
        queue: queue
            .iter()
            .map(|&(r, prio)| PrioRequest {
                requester: NodeId(r),
                prio,
            })
            .collect(),
    }
}

/// A stale copy of a token already passed on (generation ≤ highest seen) is a duplicate.
#[test]
fn pnaimi_rejects_a_stale_token() {
    a_passed_on_token_is_a_duplicate(pnaimi(1), token(1, &[(2, 0)]), None);
}

/// n2 waits in the first token's queue; the token comes back with an empty one.
#[test]
fn pnaimi_generations_pass_two_to_the_32() {
    let tok = |generation| {
        let waiting: &[(u16, u8)] = if generation < 1 << 32 { &[(2, 0)] } else { &[] };
        token(generation, waiting)
    };
    generations_pass_two_to_the_32(pnaimi(1), tok, None);
}

/// The merge at the token's receiver keeps every requester once and never queues the
/// receiver itself (a token's queue with a repeated entry and the receiver in it).
#[test]
fn pnaimi_token_merge_drops_duplicates_and_the_receiver() {
    let mut s = pnaimi(1);
    let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    out.clear();
    s.step(w(), &mut out).unwrap();
    let t = token(1, &[(2, 1), (2, 1), (1, 0)]);
    out.clear();
    s.step(
        Input::Deliver {
            from: NodeId(0),
            msg: &t,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(queue_of(&s), vec![2]);
}

#[test]
fn pnaimi_is_pending_reports_a_waiting_request() {
    is_pending_reports_a_waiting_request(pnaimi(1));
}

type Net = common::Net<P6>;

fn request(n: &mut Net, at: u16, prio: u8) {
    n.step(at, Input::SetPriority { base: prio });
    n.step(at, w());
    n.settle();
}

/// Requests of one priority are served first come, first served (section 3.1.1: the local
/// queue is ordered by priority, FIFO within a level).
#[test]
fn pnaimi_fifo_within_a_priority() {
    let mut n = Net::new((0..6).map(pnaimi).collect());
    n.step(0, w());
    for at in [1, 2, 3] {
        request(&mut n, at, 1);
    }
    assert_eq!(queue_of(n.site(0)), vec![1, 2, 3]);
    for at in [0, 1, 2] {
        n.step(at, Input::Release { lock: L });
        n.settle();
    }
    assert_eq!(n.grants, vec![0, 1, 2, 3]);
}

/// The receiver of the token merges the token's queue with its own by priority: a request
/// of priority 3 that stopped at n1 (pending at 5) must move ahead of two requests of
/// priority 1 the token brings, and is served before them.
#[test]
fn pnaimi_token_merge_orders_by_priority() {
    // n1, n2, n4 point to n0 (the token holder); n3 points to n1.
    let owners = [None, Some(0), Some(0), Some(1), Some(0), Some(0)];
    let mut n = Net::new(
        owners
            .iter()
            .enumerate()
            .map(|(i, o)| P6::with_owners(NodeId(i as u16), |_| o.map(NodeId)).unwrap())
            .collect(),
    );
    n.step(0, w());
    request(&mut n, 1, 5);
    request(&mut n, 2, 1);
    request(&mut n, 4, 1);
    request(&mut n, 3, 3); // stops at n1 (pending at 5 ≥ 3)
    let q = |n: &Net, at: u16| queue_of(n.site(at));
    assert_eq!(q(&n, 0), vec![1, 2, 4]);
    assert_eq!(q(&n, 1), vec![3]);
    n.step(0, Input::Release { lock: L });
    n.settle();
    assert_eq!(q(&n, 1), vec![3, 2, 4], "merged by priority, FIFO within");
    for at in [1, 3, 2] {
        n.step(at, Input::Release { lock: L });
        n.settle();
    }
    assert_eq!(n.grants, vec![0, 1, 3, 2, 4]);
}
