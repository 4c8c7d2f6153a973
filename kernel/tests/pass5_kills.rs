//! Checks for the mutants of the two baselines that cargo-mutants' pass 5 left unexplained
//! (spec/MUTANTS.md, "Pass 5"): Naimi-Trehel (thesis section 2.1, `NaimiSite`) and Mueller's
//! prioritized Naimi (thesis section 3.1.1, `PrioNaimiSite`). Each test asserts what a guard
//! or a loop of those files exists for: the validation that rejects bad input with a typed
//! error and the state untouched, the upgrade `U → W`, duplicate-token detection by
//! generation, FIFO within a priority level, the priority merge of the token's queue, and
//! `Protocol::is_pending`. Runs of several sites go through the one harness (`Cluster`, via
//! `common::Net`); single-site checks call `step` directly.

use hilock_kernel::{
    Input, KernelError, LockId, Mode, NaimiMsg, NaimiSite, NodeId, Output, Outputs, PrioNaimiMsg,
    PrioNaimiSite, PrioRequest, Protocol,
};

mod common;

type N5 = NaimiSite<5, 1>;
type P6 = PrioNaimiSite<6, 1, 8, 6>;
const L: LockId = LockId(0);

fn naimi(me: u16) -> N5 {
    N5::new(NodeId(me), NodeId(0)).unwrap()
}

fn pnaimi(me: u16) -> P6 {
    P6::new(NodeId(me), NodeId(0)).unwrap()
}

fn w() -> Input<'static, NaimiMsg> {
    Input::Acquire {
        lock: L,
        mode: Mode::W,
    }
}

fn pw() -> Input<'static, PrioNaimiMsg<6>> {
    Input::Acquire {
        lock: L,
        mode: Mode::W,
    }
}

// ---------------------------------------------------------------- Naimi-Trehel (naimi.rs)

/// A step may emit 2 outputs: with room for 1 it is refused (nothing changes), with room
/// for exactly 2 it runs.
#[test]
fn naimi_step_needs_room_for_two_outputs() {
    let mut s = naimi(0);
    let mut one: Outputs<NaimiMsg, 1> = Outputs::new();
    assert_eq!(s.step(w(), &mut one), Err(KernelError::OutputsFull));
    assert!(one.is_empty());
    assert_eq!(s.lock(L).unwrap().held, Mode::Phi, "state untouched");
    let mut two: Outputs<NaimiMsg, 2> = Outputs::new();
    s.step(w(), &mut two).unwrap();
    assert_eq!(
        two.as_slice(),
        &[Output::Granted {
            lock: L,
            mode: Mode::W
        }]
    );
}

/// A message from this node itself or from a node outside 0..N is refused.
#[test]
fn naimi_rejects_messages_from_itself_or_unknown_nodes() {
    let mut s = naimi(0);
    let tok = NaimiMsg::Token {
        lock: L,
        generation: 1,
    };
    for from in [NodeId(0), NodeId(5)] {
        let mut out: Outputs<NaimiMsg, 2> = Outputs::new();
        assert_eq!(
            s.step(Input::Deliver { from, msg: &tok }, &mut out),
            Err(KernelError::UnknownNode(from))
        );
    }
    assert_eq!(s.lock(L).unwrap().token, Some(0), "state untouched");
}

/// `U → W` completes at once at the holder of U ("Naimi doing the same work"); it is refused
/// without U held.
#[test]
fn naimi_upgrade_u_to_w() {
    let mut s = naimi(0);
    let mut out: Outputs<NaimiMsg, 2> = Outputs::new();
    assert_eq!(
        s.step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::NotHoldingU(L))
    );
    s.step(
        Input::Acquire {
            lock: L,
            mode: Mode::U,
        },
        &mut out,
    )
    .unwrap();
    out.clear();
    s.step(Input::Upgrade { lock: L }, &mut out).unwrap();
    assert_eq!(out.as_slice(), &[Output::Upgraded { lock: L }]);
    assert_eq!(s.lock(L).unwrap().held, Mode::W);
}

/// A stale copy of a token this node has already passed on (its generation ≤ the highest
/// seen) is a duplicate, even though the node holds no token now.
#[test]
fn naimi_rejects_a_stale_token() {
    let mut s = naimi(1);
    let mut out: Outputs<NaimiMsg, 2> = Outputs::new();
    out.clear();
    s.step(w(), &mut out).unwrap(); // request to n0
    let t1 = NaimiMsg::Token {
        lock: L,
        generation: 1,
    };
    let from = NodeId(0);
    out.clear();
    s.step(Input::Deliver { from, msg: &t1 }, &mut out).unwrap(); // granted
    let req = NaimiMsg::Request {
        lock: L,
        requester: NodeId(2),
    };
    out.clear();
    s.step(
        Input::Deliver {
            from: NodeId(2),
            msg: &req,
        },
        &mut out,
    )
    .unwrap(); // next = n2
    out.clear();
    s.step(Input::Release { lock: L }, &mut out).unwrap(); // token (gen 2) to n2
    assert_eq!(s.lock(L).unwrap().token, None);
    out.clear();
    assert_eq!(
        s.step(Input::Deliver { from, msg: &t1 }, &mut out),
        Err(KernelError::Duplicate(L))
    );
    assert_eq!(s.lock(L).unwrap().token, None, "no second token");
}

/// `Protocol::is_pending` reports a request on its way (the harness's liveness check and
/// the demo read it).
#[test]
fn naimi_is_pending_reports_a_waiting_request() {
    let mut s = naimi(1);
    assert_eq!(Protocol::is_pending(&s, L), Ok(false));
    let mut out: Outputs<NaimiMsg, 2> = Outputs::new();
    s.step(w(), &mut out).unwrap();
    assert_eq!(Protocol::is_pending(&s, L), Ok(true));
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
    let mut s = pnaimi(0);
    let mut one: Outputs<PrioNaimiMsg<6>, 1> = Outputs::new();
    assert_eq!(s.step(pw(), &mut one), Err(KernelError::OutputsFull));
    assert!(one.is_empty());
    assert_eq!(s.lock(L).unwrap().held, Mode::Phi, "state untouched");
    let mut two: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    s.step(pw(), &mut two).unwrap();
    assert_eq!(s.lock(L).unwrap().held, Mode::W);
}

#[test]
fn pnaimi_rejects_messages_from_itself_or_unknown_nodes() {
    let mut s = pnaimi(0);
    let req = PrioNaimiMsg::<6>::Request {
        lock: L,
        req: PrioRequest {
            requester: NodeId(1),
            prio: 0,
        },
    };
    for from in [NodeId(0), NodeId(6)] {
        let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
        assert_eq!(
            s.step(Input::Deliver { from, msg: &req }, &mut out),
            Err(KernelError::UnknownNode(from))
        );
    }
    assert_eq!(s.lock(L).unwrap().token, Some(0), "token not passed");
}

/// A request whose requester is this node or outside 0..N is refused.
#[test]
fn pnaimi_rejects_a_request_of_itself_or_an_unknown_requester() {
    let mut s = pnaimi(0);
    for requester in [NodeId(0), NodeId(6)] {
        let req = PrioNaimiMsg::<6>::Request {
            lock: L,
            req: PrioRequest { requester, prio: 0 },
        };
        let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
        assert_eq!(
            s.step(
                Input::Deliver {
                    from: NodeId(1),
                    msg: &req
                },
                &mut out
            ),
            Err(KernelError::UnknownNode(requester))
        );
        assert!(out.is_empty());
    }
    assert_eq!(s.lock(L).unwrap().token, Some(0), "token not passed");
}

#[test]
fn pnaimi_upgrade_u_to_w() {
    let mut s = pnaimi(0);
    let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    assert_eq!(
        s.step(Input::Upgrade { lock: L }, &mut out),
        Err(KernelError::NotHoldingU(L))
    );
    s.step(
        Input::Acquire {
            lock: L,
            mode: Mode::U,
        },
        &mut out,
    )
    .unwrap();
    out.clear();
    s.step(Input::Upgrade { lock: L }, &mut out).unwrap();
    assert_eq!(out.as_slice(), &[Output::Upgraded { lock: L }]);
    assert_eq!(s.lock(L).unwrap().held, Mode::W);
}

fn token(generation: u32, queue: &[(u16, u8)]) -> PrioNaimiMsg<6> {
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
    let mut s = pnaimi(1);
    let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    out.clear();
    s.step(pw(), &mut out).unwrap();
    let from = NodeId(0);
    let t1 = token(1, &[(2, 0)]);
    out.clear();
    s.step(Input::Deliver { from, msg: &t1 }, &mut out).unwrap(); // granted, n2 queued
    out.clear();
    s.step(Input::Release { lock: L }, &mut out).unwrap(); // token (gen 2) to n2
    assert_eq!(s.lock(L).unwrap().token, None);
    out.clear();
    assert_eq!(
        s.step(Input::Deliver { from, msg: &t1 }, &mut out),
        Err(KernelError::Duplicate(L))
    );
    assert_eq!(s.lock(L).unwrap().token, None, "no second token");
}

/// The merge at the token's receiver keeps every requester once and never queues the
/// receiver itself (a token's queue with a repeated entry and the receiver in it).
#[test]
fn pnaimi_token_merge_drops_duplicates_and_the_receiver() {
    let mut s = pnaimi(1);
    let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    out.clear();
    s.step(pw(), &mut out).unwrap();
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
    let q: Vec<u16> = s
        .lock(L)
        .unwrap()
        .queue
        .iter()
        .map(|r| r.requester.0)
        .collect();
    assert_eq!(q, vec![2]);
}

#[test]
fn pnaimi_is_pending_reports_a_waiting_request() {
    let mut s = pnaimi(1);
    assert_eq!(Protocol::is_pending(&s, L), Ok(false));
    let mut out: Outputs<PrioNaimiMsg<6>, 2> = Outputs::new();
    s.step(pw(), &mut out).unwrap();
    assert_eq!(Protocol::is_pending(&s, L), Ok(true));
}

type Net = common::Net<P6>;

fn request(n: &mut Net, at: u16, prio: u8) {
    n.step(at, Input::SetPriority { base: prio });
    n.step(at, pw());
    n.settle();
}

/// Requests of one priority are served first come, first served (section 3.1.1: the local
/// queue is ordered by priority, FIFO within a level).
#[test]
fn pnaimi_fifo_within_a_priority() {
    let mut n = Net::new((0..6).map(pnaimi).collect());
    n.step(0, pw());
    for at in [1, 2, 3] {
        request(&mut n, at, 1);
    }
    let q: Vec<u16> = n
        .site(0)
        .lock(L)
        .unwrap()
        .queue
        .iter()
        .map(|r| r.requester.0)
        .collect();
    assert_eq!(q, vec![1, 2, 3]);
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
    n.step(0, pw());
    request(&mut n, 1, 5);
    request(&mut n, 2, 1);
    request(&mut n, 4, 1);
    request(&mut n, 3, 3); // stops at n1 (pending at 5 ≥ 3)
    let q = |n: &Net, at: u16| -> Vec<u16> {
        n.site(at)
            .lock(L)
            .unwrap()
            .queue
            .iter()
            .map(|r| r.requester.0)
            .collect()
    };
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
