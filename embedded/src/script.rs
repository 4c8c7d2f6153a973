//! The thesis scenarios the firmware runs, as `no_std` data: initial trees, priorities, the
//! schedule with each operation written out, and the expected rules of every step and the
//! expected end state of every node.
//!
//! This file is plain Rust over `hilock_kernel` only. The firmware (`src/main.rs`) compiles it
//! for the Cortex-M4; the host test `spec/tests/embedded_script.rs` compiles the same file
//! and checks it against the shared harness: that the schedule is the one of the scenario's
//! JSON file (`spec/scenarios/*.json`), and that running it through `hilock_harness::Cluster`
//! gives exactly these per-step rules and end states (which the JSON runner's expectations
//! also accept). So the firmware's small delivery loop is checked twice: against the tables
//! on the target, and the tables against the harness on the host.

use hilock_kernel::{Inheritance, Mode, Rule};

/// Locks per site in the firmware (Fig. 3.4 uses two).
pub const LOCKS: usize = 2;

/// A user operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `RequestLock(mode)` on `lock`.
    Acquire(u16, Mode),
    /// `RequestUnlock()` on `lock`.
    Release(u16),
    /// `RequestUpgrade()` on `lock`.
    Upgrade(u16),
}

/// One schedule entry (the scenario format's `"X"`, `"X->Y"` and `"*"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sched {
    /// Node `.0` performs `.1` (its next script operation).
    Op(u16, Op),
    /// Deliver the oldest message on the channel `.0 -> .1`.
    Deliver(u16, u16),
    /// Deliver the oldest message in flight until none is left.
    All,
}

/// What one step must report: the stepping node and the rules that fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepRules {
    /// The node that stepped.
    pub node: u16,
    /// The rules its [`hilock_kernel::Report`] names, in declaration order.
    pub rules: &'static [Rule],
}

/// The end state of one node for one lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// The node.
    pub node: u16,
    /// The lock.
    pub lock: u16,
    /// Token held?
    pub token: bool,
    /// Parent (`None` at the token node).
    pub parent: Option<u16>,
    /// Owned mode M_O.
    pub owned: Mode,
    /// Held mode M_H.
    pub held: Mode,
    /// Pending mode M_P.
    pub pending: Mode,
    /// Local queue length.
    pub queue: u8,
    /// The site's effective priority ξ.
    pub effective: u8,
}

/// A scenario as the firmware runs it.
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// The JSON file under `spec/scenarios/` it is transcribed from.
    pub file: &'static str,
    /// Node names (ids are positions).
    pub nodes: &'static [&'static str],
    /// Initial parent of every node for each lock (`None`: the token holder).
    pub parents: [&'static [Option<u16>]; LOCKS],
    /// Priority inheritance.
    pub inheritance: Inheritance,
    /// Base priorities applied first, in this order (the runner applies the JSON's
    /// `priorities` in name order).
    pub priorities: &'static [(u16, u8)],
    /// The schedule.
    pub schedule: &'static [Sched],
    /// Expected rules of every step, in order (the priority steps first).
    pub steps: &'static [StepRules],
    /// Expected end state of every node and lock.
    pub end: &'static [End],
}

/// One expected step: `node` stepped and reported `rules`.
const fn at(node: u16, rules: &'static [Rule]) -> StepRules {
    StepRules { node, rules }
}

/// One expected end state: `modes` are the owned, held and pending modes.
const fn end(
    node: u16,
    lock: u16,
    token: bool,
    parent: Option<u16>,
    modes: [Mode; 3],
    queue: u8,
    effective: u8,
) -> End {
    let [owned, held, pending] = modes;
    End {
        node,
        lock,
        token,
        parent,
        owned,
        held,
        pending,
        queue,
        effective,
    }
}

const A: u16 = 0;
const B: u16 = 1;
const C: u16 = 2;
const D: u16 = 3;
const E: u16 = 4;
const ABCDE: &[&str] = &["A", "B", "C", "D", "E"];
/// A lock the scenario does not use: a star around node 0 (as the JSON runner builds it).
const STAR_A: &[Option<u16>] = &[None, Some(A), Some(A), Some(A), Some(A)];

use Mode::{Phi, IR, IW, R, W};
use Op::{Acquire, Release};
use Sched::All;

/// Fig. 2.2: request granting (Rules 2, 3.2).
pub const FIG_2_2: Script = Script {
    file: "fig-2.2-request-granting.json",
    nodes: ABCDE,
    parents: [STAR_A, STAR_A],
    inheritance: Inheritance::None,
    priorities: &[],
    schedule: &[
        Sched::Op(A, Acquire(0, IR)),
        Sched::Op(E, Acquire(0, IR)),
        All,
        Sched::Op(B, Acquire(0, R)),
        All,
    ],
    steps: FIG_2_2_STEPS,
    end: FIG_2_2_END,
};

/// Fig. 2.8: frozen modes (Rule 6, Table 2.4).
pub const FIG_2_8: Script = Script {
    file: "fig-2.8-frozen-modes.json",
    nodes: ABCDE,
    parents: [&[None, Some(A), Some(B), Some(B), Some(B)], STAR_A],
    inheritance: Inheritance::None,
    priorities: &[],
    schedule: &[
        Sched::Op(A, Acquire(0, R)),
        Sched::Op(B, Acquire(0, IR)),
        All,
        Sched::Op(C, Acquire(0, IR)),
        All,
        Sched::Op(B, Release(0)),
        Sched::Op(D, Acquire(0, W)),
        All,
        Sched::Op(E, Acquire(0, IR)),
        All,
        Sched::Op(A, Release(0)),
        Sched::Op(C, Release(0)),
        All,
        Sched::Op(D, Release(0)),
        All,
    ],
    steps: FIG_2_8_STEPS,
    end: FIG_2_8_END,
};

/// Fig. 3.4 under PIP: bounded priority inversion across two locks (section 3.7.2).
pub const FIG_3_4_PIP: Script = Script {
    file: "fig-3.4-pip.json",
    nodes: ABCDE,
    parents: [
        &[None, Some(A), Some(A), Some(B), Some(B)],
        &[Some(D), Some(D), Some(D), None, Some(D)],
    ],
    inheritance: Inheritance::Pip,
    priorities: &[(A, 1), (B, 2), (C, 3), (D, 4), (E, 5)],
    schedule: &[
        Sched::Op(D, Acquire(1, IW)),
        Sched::Op(B, Acquire(1, IW)),
        All,
        Sched::Op(A, Acquire(0, R)),
        All,
        Sched::Op(C, Acquire(1, W)),
        All,
        Sched::Op(B, Acquire(0, IW)),
        All,
        Sched::Op(D, Acquire(0, IW)),
        All,
        Sched::Op(A, Acquire(1, IR)),
        All,
        Sched::Op(D, Release(1)),
        Sched::Op(B, Release(1)),
        All,
    ],
    steps: FIG_3_4_PIP_STEPS,
    end: FIG_3_4_PIP_END,
};

/// Every scenario the firmware runs.
pub const ALL: &[Script] = &[FIG_2_2, FIG_2_8, FIG_3_4_PIP];

// ---- Expected values. Generated by `HILOCK_PRINT_EMBEDDED_TABLES=1 cargo test -p hilock-spec
// ---- --test embedded_script -- --nocapture` from a run through `hilock_harness::Cluster`, and
// ---- checked against it by that test.
const FIG_2_2_STEPS: &[StepRules] = &[
    at(A, &[Rule::Rule3_2OwnGrant]),
    at(E, &[Rule::Rule2Request]),
    at(A, &[Rule::Rule3_2CopyGrant]),
    at(E, &[Rule::GrantReceived]),
    at(B, &[Rule::Rule2Request]),
    at(A, &[Rule::Rule3_2TokenTransfer]),
    at(B, &[Rule::Rule8_2Merge, Rule::TokenReceived]),
];

const FIG_2_2_END: &[End] = &[
    end(A, 0, false, Some(B), [IR, IR, Phi], 0, 0),
    end(A, 1, true, None, [Phi, Phi, Phi], 0, 0),
    end(B, 0, true, None, [R, R, Phi], 0, 0),
    end(B, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(C, 0, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(C, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(D, 0, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(D, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(E, 0, false, Some(A), [IR, IR, Phi], 0, 0),
    end(E, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
];

const FIG_2_8_STEPS: &[StepRules] = &[
    at(A, &[Rule::Rule3_2OwnGrant]),
    at(B, &[Rule::Rule2Request]),
    at(A, &[Rule::Rule3_2CopyGrant]),
    at(B, &[Rule::GrantReceived]),
    at(C, &[Rule::Rule2Request]),
    at(B, &[Rule::Rule3_1CopyGrant]),
    at(C, &[Rule::GrantReceived]),
    at(B, &[Rule::Rule5Release]),
    at(D, &[Rule::Rule2Request]),
    at(B, &[Rule::Rule4_1Forward]),
    at(
        A,
        &[Rule::Rule4_2Queue, Rule::Rule6FreezeSent, Rule::Blocking],
    ),
    at(B, &[Rule::Rule6FreezeSent, Rule::Rule6FreezeApplied]),
    at(C, &[Rule::Rule6FreezeApplied, Rule::Blocking]),
    at(E, &[Rule::Rule2Request]),
    at(B, &[Rule::Rule4_1Forward]),
    at(A, &[Rule::Rule4_2Queue]),
    at(A, &[Rule::Rule5Release]),
    at(C, &[Rule::Rule5Release, Rule::Rule5_2Propagate]),
    at(B, &[Rule::Rule5_2Propagate, Rule::Rule5_2Apply]),
    at(A, &[Rule::Rule3_2TokenTransfer, Rule::Rule5_2Apply]),
    at(
        D,
        &[Rule::Rule8_2Merge, Rule::TokenReceived, Rule::Blocking],
    ),
    at(D, &[Rule::Rule3_2TokenTransfer, Rule::Rule5Release]),
    at(E, &[Rule::Rule8_2Merge, Rule::TokenReceived]),
];

const FIG_2_8_END: &[End] = &[
    end(A, 0, false, Some(D), [Phi, Phi, Phi], 0, 0),
    end(A, 1, true, None, [Phi, Phi, Phi], 0, 0),
    end(B, 0, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(B, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(C, 0, false, Some(B), [Phi, Phi, Phi], 0, 0),
    end(C, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(D, 0, false, Some(E), [Phi, Phi, Phi], 0, 0),
    end(D, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
    end(E, 0, true, None, [IR, IR, Phi], 0, 0),
    end(E, 1, false, Some(A), [Phi, Phi, Phi], 0, 0),
];

const FIG_3_4_PIP_STEPS: &[StepRules] = &[
    at(A, &[Rule::SetPriority]),
    at(B, &[Rule::SetPriority]),
    at(C, &[Rule::SetPriority]),
    at(D, &[Rule::SetPriority]),
    at(E, &[Rule::SetPriority]),
    at(D, &[Rule::Rule3_2OwnGrant]),
    at(B, &[Rule::Rule2Request]),
    at(D, &[Rule::Rule3_2CopyGrant]),
    at(B, &[Rule::GrantReceived]),
    at(A, &[Rule::Rule3_2OwnGrant]),
    at(C, &[Rule::Rule2Request]),
    at(
        D,
        &[
            Rule::Rule4_2Queue,
            Rule::Rule6FreezeSent,
            Rule::PipInherit,
            Rule::Blocking,
        ],
    ),
    at(
        B,
        &[Rule::Rule6FreezeApplied, Rule::PipInherit, Rule::Blocking],
    ),
    at(B, &[Rule::Rule2Request]),
    at(A, &[Rule::Rule4_2Queue, Rule::PipInherit, Rule::Blocking]),
    at(D, &[Rule::Rule2Request]),
    at(B, &[Rule::Rule4_1Forward]),
    at(
        A,
        &[Rule::Rule4_2Queue, Rule::Rule8_1Order, Rule::PipInherit],
    ),
    at(A, &[Rule::Rule2Request]),
    at(D, &[Rule::Rule3_2CopyGrant]),
    at(A, &[Rule::GrantReceived]),
    at(D, &[Rule::Rule5Release]),
    at(B, &[Rule::Rule5Release, Rule::Rule5_2Propagate]),
    at(D, &[Rule::Rule5_2Apply]),
];

const FIG_3_4_PIP_END: &[End] = &[
    end(A, 0, true, None, [R, R, Phi], 2, 4),
    end(A, 1, false, Some(D), [IR, IR, Phi], 0, 4),
    end(B, 0, false, Some(A), [Phi, Phi, IW], 0, 2),
    end(B, 1, false, Some(D), [Phi, Phi, Phi], 0, 2),
    end(C, 0, false, Some(A), [Phi, Phi, Phi], 0, 3),
    end(C, 1, false, Some(D), [Phi, Phi, W], 0, 3),
    end(D, 0, false, Some(B), [Phi, Phi, IW], 0, 4),
    end(D, 1, true, None, [IR, Phi, Phi], 1, 4),
    end(E, 0, false, Some(B), [Phi, Phi, Phi], 0, 5),
    end(E, 1, false, Some(D), [Phi, Phi, Phi], 0, 5),
];
