//! Counters that wrap (`hilock_kernel::token::wrap`): a lock whose request hop numbers,
//! grant epochs, token generations and request serials all pass `u32::MAX` stays live and
//! exclusive. Before, the first request numbered 0 after the wrap was refused as a
//! duplicate and its requester never got the lock (2^32 requests on one link: 50 days at
//! 1,000 a second).

use hilock_harness::Cluster;
use hilock_kernel::{Input, LockId, Mode, NodeId, Protocol, Site};

type S = Site<3, 1, 3>;

/// The site's counters that wrap (its serialized field names).
const KEYS: [&str; 7] = [
    "requests_sent",
    "requests_seen",
    "parent_epoch",
    "child_epoch",
    "generation_seen",
    "token",
    "next_serial",
];

/// Sets every wrapping counter (`KEYS`) in `v` (a serialized site) to `to`: the same value
/// at both ends of every link, so the sites agree as after that many requests, grants and
/// token moves.
fn set_counters(v: &mut serde_json::Value, to: u32) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if KEYS.contains(&k.as_str()) && x.is_u64() {
                    *x = to.into();
                } else {
                    set_counters(x, to);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| set_counters(x, to)),
        _ => {}
    }
}

fn near_the_wrap() -> Cluster<S> {
    let near = u32::MAX - 3;
    let mut all = String::new();
    let sites = (0..3)
        .map(|i| {
            let s = S::new(NodeId(i), NodeId(0)).unwrap();
            let mut v = serde_json::to_value(&s).unwrap();
            set_counters(&mut v, near);
            all.push_str(&v.to_string());
            serde_json::from_value(v).unwrap()
        })
        .collect();
    for k in KEYS {
        assert!(
            all.contains(&format!("\"{k}\":{near}")),
            "{k} not set: {all}"
        );
    }
    Cluster::new(sites)
}

fn step(c: &mut Cluster<S>, node: u16, input: Input<'_, hilock_kernel::Msg<3>>) {
    c.input(NodeId(node), input)
        .unwrap_or_else(|e| panic!("n{node}: {e}"));
    c.settle(1_000, |_, _, _, _| Ok(())).unwrap();
    c.check_mutual_exclusion().unwrap();
}

/// Twelve rounds across the wrap: n1 takes W (the token moves: a request hop, a token
/// generation, a serial), then n0 and n2 share R (a copy grant: a grant epoch); every
/// request is granted and nothing is refused as a duplicate.
#[test]
fn counters_that_pass_u32_max_keep_the_lock_live() {
    let mut c = near_the_wrap();
    let lock = LockId(0);
    for round in 0..12 {
        step(
            &mut c,
            1,
            Input::Acquire {
                lock,
                mode: Mode::W,
            },
        );
        assert_eq!(c.site(NodeId(1)).held(lock), Ok(Mode::W), "round {round}");
        step(&mut c, 1, Input::Release { lock });
        for n in [0, 2] {
            step(
                &mut c,
                n,
                Input::Acquire {
                    lock,
                    mode: Mode::R,
                },
            );
        }
        for n in [0, 2] {
            assert_eq!(c.site(NodeId(n)).held(lock), Ok(Mode::R), "round {round}");
        }
        for n in [0, 2] {
            step(&mut c, n, Input::Release { lock });
        }
        assert!(c.error().is_none(), "round {round}: {:?}", c.error());
    }
}

/// Token generations are `u64`s (`hilock_kernel::token::wrap::newer_generation`): node 1
/// last saw the token at generation 5, and it has moved 2^31 + 5 times, then 2^40 times,
/// since among the others; when node 1 asks for it, it gets the token and W. With `u32`
/// generations compared modulo 2^32 the token was refused as a repeat and node 1 waited
/// for ever (an idle node of a busy lock: 2^31 moves are 25 days at 1,000 a second).
#[test]
fn a_token_that_moved_2_pow_31_times_since_a_node_saw_it_is_taken() {
    for moved in [(1u64 << 31) + 5, 1u64 << 40] {
        let sites: Vec<S> = (0..3)
            .map(|i| {
                let s = S::new(NodeId(i), NodeId(0)).unwrap();
                let mut v = serde_json::to_value(&s).unwrap();
                // Every counter agrees at both ends of every link; node 0 holds the token
                // at generation 5 + `moved`, which node 2 saw last; node 1 saw 5.
                set_counters(&mut v, (1u32 << 31) + 10);
                let now = 5 + moved;
                let seen = v
                    .pointer_mut("/locks/0/generation_seen")
                    .expect("the site's record of the generation");
                *seen = if i == 1 { 5 } else { now }.into();
                if i == 0 {
                    *v.pointer_mut("/locks/0/token").expect("the token") = now.into();
                }
                serde_json::from_value(v).unwrap()
            })
            .collect();
        let mut c = Cluster::new(sites);
        let lock = LockId(0);
        step(
            &mut c,
            1,
            Input::Acquire {
                lock,
                mode: Mode::W,
            },
        );
        assert_eq!(c.site(NodeId(1)).held(lock), Ok(Mode::W), "moved {moved}");
        assert!(c.error().is_none(), "moved {moved}: {:?}", c.error());
    }
}
