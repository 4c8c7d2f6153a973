//! The Naimi-Trehel baseline: Fig. 2.1's path reversal and next pointer, exclusivity and
//! FIFO service on random runs.

use hilock_kernel::{Input, LockId, Mode, NaimiSite, NodeId, Output};
use proptest::prelude::*;

type S = NaimiSite<5, 1>;
const L: LockId = LockId(0);

use crate::common;

type Net = common::Net<S>;

fn net(n: u16, root: u16) -> Net {
    Net::new(
        (0..n)
            .map(|i| S::new(NodeId(i), NodeId(root)).unwrap())
            .collect(),
    )
}

/// Fig. 2.1: T (0) holds the token; A (1) asks via B (2), then C (3) asks via B. B's
/// probable owner moves to A and then to C (path reversal); T's next is A, A's next is C.
#[test]
fn fig_2_1_path_reversal_and_next_pointers() {
    let mut n = net(5, 0);
    // Initial tree: everybody points to T (0); B's parent is T; A and C reach T through B
    // in the figure — emulate by routing A's and C's first request through B.
    n.step(
        0,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    ); // T in its critical section
    n.step(
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    while n.deliver_one() {}
    n.step(
        3,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    while n.deliver_one() {}
    assert_eq!(n.site(0).lock(L).unwrap().next, Some(NodeId(1)));
    assert_eq!(n.site(1).lock(L).unwrap().next, Some(NodeId(3)));
    assert_eq!(
        n.site(0).lock(L).unwrap().owner,
        Some(NodeId(3)),
        "T's probable owner follows the last requester"
    );
    n.step(0, Input::Release { lock: L });
    while n.deliver_one() {}
    n.step(1, Input::Release { lock: L });
    while n.deliver_one() {}
    assert_eq!(
        n.grants,
        vec![0, 1, 3],
        "FIFO order of the distributed queue"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]
    #[test]
    fn exclusive_and_every_request_served(ops in prop::collection::vec((0u16..5, 0u8..3), 1..150)) {
        let mut n = net(5, 0);
        let mut requested = 0;
        for (node, what) in ops {
            let st = *n.site(node).lock(L).unwrap();
            match what {
                0 if st.held == Mode::Phi && st.pending == Mode::Phi => {
                    requested += 1;
                    n.step(node, Input::Acquire { lock: L, mode: Mode::R });
                }
                1 if st.held != Mode::Phi => n.step(node, Input::Release { lock: L }),
                _ => { n.deliver_one(); }
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
