//! What the token engine's operation tests (try-lock, cancel, downgrade) share: four
//! `Site<4, 1, 4>` of one lock in the one harness, the input helpers that run a step and
//! every delivery it causes with every safety property checked after each step, and the
//! log of outputs those helpers return. Each file uses it as
//! `crate::star` (`kernel.rs` declares it once).

use hilock_harness::Cluster;
use hilock_kernel::{Input, LockId, Mode, Msg, NodeId, Output, Site};

/// The sites: four nodes, one lock, queues of four.
pub type S = Site<4, 1, 4>;
/// The one lock.
pub const L: LockId = LockId(0);
/// Outputs with the node that produced each, in the order they were produced.
pub type Log = Vec<(u16, Output<Msg<4>>)>;

/// A star of four around node 0 (the token holder).
pub fn star() -> Cluster<S> {
    Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap())
            .collect(),
    )
}

/// The chain 0 (token) ← 1 ← 2, with 3 a child of 0.
pub fn chain() -> Cluster<S> {
    Cluster::new(
        (0..4)
            .map(|i| {
                let parent = match i {
                    0 => None,
                    2 => Some(NodeId(1)),
                    _ => Some(NodeId(0)),
                };
                S::with_parents(NodeId(i), |_| parent).unwrap()
            })
            .collect(),
    )
}

/// The outputs of the input at `at` alone (its messages stay in flight); every safety
/// property is checked after it.
pub fn step(c: &mut Cluster<S>, at: u16, input: Input<'_, Msg<4>>) -> Log {
    let step = c.input(NodeId(at), input).unwrap();
    c.check_safety().unwrap();
    step.outputs.into_iter().map(|o| (at, o)).collect()
}

/// Every message in flight delivered (oldest first), with the outputs of each delivery;
/// every safety property is checked after every step.
pub fn settle(c: &mut Cluster<S>) -> Log {
    let mut log = Vec::new();
    c.settle(1000, |c, _, _, step| {
        log.extend(step.outputs.iter().map(|o| (step.node.0, o.clone())));
        Ok(c.check_safety()?)
    })
    .unwrap();
    log
}

/// The input at `at` and every delivery it causes.
pub fn run(c: &mut Cluster<S>, at: u16, input: Input<'_, Msg<4>>) -> Log {
    let mut log = step(c, at, input);
    log.extend(settle(c));
    log
}

/// `RequestLock(mode)` at `at`, run to the end.
pub fn acquire(c: &mut Cluster<S>, at: u16, mode: Mode) -> Log {
    run(c, at, Input::Acquire { lock: L, mode })
}

/// `RequestUnlock()` at `at`, run to the end.
pub fn release(c: &mut Cluster<S>, at: u16) -> Log {
    run(c, at, Input::Release { lock: L })
}

/// The Naimi-Trehel baseline (`NaimiSite`, node 0 holding the token, W held first when
/// `holding_w`) refuses `input` with `err`: no output, the site unchanged. The baseline has
/// no try, cancel, downgrade or value block.
pub fn baseline_refuses(
    holding_w: bool,
    input: Input<'_, hilock_kernel::NaimiMsg>,
    err: hilock_kernel::KernelError,
) -> hilock_kernel::NaimiSite<4, 1> {
    let mut n = hilock_kernel::NaimiSite::<4, 1>::new(NodeId(0), NodeId(0)).unwrap();
    let mut out = heapless::Vec::<_, 8>::new();
    if holding_w {
        n.step(
            Input::Acquire {
                lock: L,
                mode: Mode::W,
            },
            &mut out,
        )
        .unwrap();
        out.clear();
    }
    let before = n.clone();
    assert_eq!(n.step(input, &mut out), Err(err));
    assert!(out.is_empty() && n == before);
    n
}
