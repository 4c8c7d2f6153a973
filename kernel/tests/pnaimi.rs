//! Mueller's prioritized Naimi protocol (thesis section 3.1.1): Fig. 3.1, and exclusivity,
//! priority order and service of every request on random runs.

use hilock_kernel::{Input, LockId, Mode, NodeId, Output, PrioNaimiSite};
use proptest::prelude::*;

type S = PrioNaimiSite<6, 1, 8, 6>;
const L: LockId = LockId(0);

use crate::common;

type Net = common::Net<S>;

fn net(owners: &[Option<u16>]) -> Net {
    Net::new(
        owners
            .iter()
            .enumerate()
            .map(|(i, o)| S::with_owners(NodeId(i as u16), |_| o.map(NodeId)).unwrap())
            .collect(),
    )
}

/// `at` asks for W at priority `prio`.
fn request(n: &mut Net, at: u16, prio: u8) {
    n.step(at, Input::SetPriority { base: prio });
    n.step(
        at,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
}

/// Fig. 3.1: T holds the token; A, B, C, D request at priorities 1, 2, 1, 3. A's request
/// leaves edges A → A (≤ 1), B → A (≤ 1), B → T (> 1); C's request stops at B, which has a
/// pending request of higher priority; T's queue orders D, B, A. Service order: D, B, A, C.
#[test]
fn fig_3_1_prioritized_naimi() {
    // Nodes: T=0, A=1, B=2, C=3, D=4. Initial tree: A → B → T, C → B, D → T.
    let (t, a, b, c, d) = (0u16, 1u16, 2u16, 3u16, 4u16);
    let mut n = net(&[None, Some(b), Some(t), Some(b), Some(t), Some(t)]);
    n.step(
        t,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    ); // T in its critical section
    request(&mut n, a, 1);
    n.settle();
    let la = n.site(a).lock(L).unwrap();
    let lb = n.site(b).lock(L).unwrap();
    assert_eq!(
        (la.owner[1], la.owner[2]),
        (None, Some(NodeId(b))),
        "A → A (≤ 1), A → B (> 1)"
    );
    assert_eq!(
        (lb.owner[1], lb.owner[2]),
        (Some(NodeId(a)), Some(NodeId(t))),
        "B → A (≤ 1), B → T (> 1)"
    );
    request(&mut n, b, 2);
    n.settle();
    request(&mut n, c, 1);
    n.settle();
    request(&mut n, d, 3);
    n.settle();
    let order = |x: &S| {
        x.lock(L)
            .unwrap()
            .queue
            .iter()
            .map(|r| r.requester.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(order(n.site(t)), vec![d, b, a], "T's queue by priority");
    assert_eq!(
        order(n.site(b)),
        vec![c],
        "B keeps C's request behind its own"
    );
    for _ in 0..4 {
        let holder = (0..6)
            .find(|&i| n.site(i).lock(L).unwrap().held != Mode::Phi)
            .unwrap();
        n.step(holder, Input::Release { lock: L });
        n.settle();
    }
    assert_eq!(n.grants, vec![t, d, b, a, c]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]
    /// Random runs: at most one holder, and after draining every request was granted.
    #[test]
    fn exclusive_and_every_request_served(ops in prop::collection::vec((0u16..6, 0u8..3, 0u8..8), 1..150)) {
        let mut n = net(&[None, Some(0), Some(0), Some(1), Some(2), Some(2)]);
        let mut requested = 0;
        for (node, what, prio) in ops {
            let st = n.site(node).lock(L).unwrap().clone();
            match what {
                0 if st.held == Mode::Phi && st.pending.0 == Mode::Phi => {
                    requested += 1;
                    request(&mut n, node, prio);
                }
                1 if st.held != Mode::Phi => n.step(node, Input::Release { lock: L }),
                _ => {
                    n.deliver_one();
                }
            }
            // Every mode is exclusive, one token (the harness's properties).
            if let Err(e) = n.c.check_safety() { prop_assert!(false, "{}", e); }
        }
        // Drain: deliver everything, release holders, until quiet; nothing may stay pending.
        let mut granted = n.grants.len();
        let drained = n.c.drain(1000, 100_000, |c, step| {
            granted += step.outputs.iter().filter(|o| matches!(o, Output::Granted { .. })).count();
            Ok(c.check_safety()?)
        });
        if let Err(e) = drained { prop_assert!(false, "{}", e); }
        prop_assert_eq!(granted, requested);
    }
}
