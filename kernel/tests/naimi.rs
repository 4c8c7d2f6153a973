//! The Naimi-Trehel baseline: Fig. 2.1's path reversal and next pointer, exclusivity and
//! FIFO service on random runs.

use hilock_kernel::{Input, LockId, Mode, NaimiMsg, NaimiSite, NodeId, Output, Outputs};
use proptest::prelude::*;
use std::collections::VecDeque;

type S = NaimiSite<5, 1>;
const L: LockId = LockId(0);

struct Net {
    s: Vec<S>,
    q: VecDeque<(u16, u16, NaimiMsg)>,
    grants: Vec<u16>,
    messages: usize,
}

impl Net {
    fn new(n: u16, root: u16) -> Self {
        Net {
            s: (0..n)
                .map(|i| S::new(NodeId(i), NodeId(root)).unwrap())
                .collect(),
            q: VecDeque::new(),
            grants: vec![],
            messages: 0,
        }
    }
    fn step(&mut self, at: u16, input: Input<'_, NaimiMsg>) {
        let mut out: Outputs<NaimiMsg, 2> = Outputs::new();
        self.s[at as usize].step(input, &mut out).unwrap();
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    self.messages += 1;
                    self.q.push_back((at, to.0, msg))
                }
                Output::Granted { .. } => self.grants.push(at),
                Output::Upgraded { .. } => {}
            }
        }
    }
    fn deliver_one(&mut self) -> bool {
        let Some((f, t, m)) = self.q.pop_front() else {
            return false;
        };
        self.step(
            t,
            Input::Deliver {
                from: NodeId(f),
                msg: &m,
            },
        );
        true
    }
    fn holders(&self) -> usize {
        self.s
            .iter()
            .filter(|s| s.lock(L).unwrap().held != Mode::Phi)
            .count()
    }
}

/// Fig. 2.1: T (0) holds the token; A (1) asks via B (2), then C (3) asks via B. B's
/// probable owner moves to A and then to C (path reversal); T's next is A, A's next is C.
#[test]
fn fig_2_1_path_reversal_and_next_pointers() {
    let mut n = Net::new(5, 0);
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
    assert_eq!(n.s[0].lock(L).unwrap().next, Some(NodeId(1)));
    assert_eq!(n.s[1].lock(L).unwrap().next, Some(NodeId(3)));
    assert_eq!(
        n.s[0].lock(L).unwrap().owner,
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
        let mut n = Net::new(5, 0);
        let mut requested = 0;
        for (node, what) in ops {
            let st = *n.s[node as usize].lock(L).unwrap();
            match what {
                0 if st.held == Mode::Phi && st.pending == Mode::Phi => {
                    requested += 1;
                    n.step(node, Input::Acquire { lock: L, mode: Mode::R });
                }
                1 if st.held != Mode::Phi => n.step(node, Input::Release { lock: L }),
                _ => { n.deliver_one(); }
            }
            prop_assert!(n.holders() <= 1);
        }
        // Drain: deliver everything, release holders, until quiet.
        for _ in 0..1000 {
            while n.deliver_one() { prop_assert!(n.holders() <= 1); }
            let holders: Vec<u16> = (0..5).filter(|&i| n.s[i as usize].lock(L).unwrap().held != Mode::Phi).collect();
            if holders.is_empty() { break; }
            for h in holders { n.step(h, Input::Release { lock: L }); }
        }
        prop_assert_eq!(n.grants.len(), requested);
        prop_assert!(n.s.iter().all(|s| s.lock(L).unwrap().pending == Mode::Phi));
    }
}
