//! The thesis tables, each twice: the literal transcription (a `const`, with the page of
//! Desai 2003 it was read from) and, where the table follows from the axioms, its
//! derivation from Table 2.1 + the strength order (inequation 2.1) + invariant 2.2.
//!
//! The kernel decides with the literal tables (table-driven, as section 2.3 proposes);
//! unit tests compare every cell with the derivation, so a changed cell fails a test.
//! Table 2.3 is a design choice (section 3.4's FIFO rationale) and has no derivation.

use crate::mode::{compatible, conflicts, Mode, ModeSet};

/// Table 2.1 (p. 10), "Incompatibility of Lock Modes": `TABLE_2_1[held.index()][requested.column()]`
/// is `true` where the thesis shows an X. Rows Φ, IR, R, U, IW, W; columns IR, R, U, IW, W.
pub const TABLE_2_1: [[bool; 5]; 6] = {
    const X: bool = true;
    const O: bool = false;
    [
        [O, O, O, O, O], // Φ
        [O, O, O, O, X], // IR
        [O, O, O, X, X], // R
        [O, O, X, X, X], // U
        [O, X, X, O, X], // IW
        [X, X, X, X, X], // W
    ]
};

/// Table 2.2 (p. 12), "Granting New Lock Requests by Children": `true` where the thesis
/// shows an X, i.e. a *non-token* node owning the row mode may NOT grant the column mode.
pub const TABLE_2_2: [[bool; 5]; 6] = {
    const X: bool = true;
    const O: bool = false;
    [
        [X, X, X, X, X], // Φ
        [O, X, X, X, X], // IR
        [O, O, X, X, X], // R
        [O, O, X, X, X], // U
        [O, X, X, O, X], // IW
        [X, X, X, X, X], // W
    ]
};

/// A cell of Table 2.3: queue the request locally, or forward it to the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QueueOrForward {
    /// `Q`: keep the request in the local queue until the pending request is served.
    Queue,
    /// `F`: forward the request to the parent.
    Forward,
}

/// Table 2.3 (p. 14), "Queue / Forward Decision" at a non-token node: row = the node's
/// pending mode M_P, column = the received request's mode M_R.
pub const TABLE_2_3: [[QueueOrForward; 5]; 6] = {
    const Q: QueueOrForward = QueueOrForward::Queue;
    const F: QueueOrForward = QueueOrForward::Forward;
    [
        [F, F, F, F, F], // Φ (no pending request)
        [Q, F, F, F, F], // IR
        [F, Q, F, F, F], // R
        [F, F, Q, Q, Q], // U
        [F, F, F, Q, F], // IW
        [Q, Q, Q, Q, Q], // W
    ]
};

/// A cell of Table 3.2 (p. 30), the prioritized Table 2.3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PrioQueueOrForward {
    /// `F`: forward.
    Forward,
    /// `CQ`: conditional queueing — queue iff ξ(pending) ≥ ξ(received), else forward.
    ConditionalQueue,
}

/// Table 3.2 (p. 30), "Queue / Forward Decision (Prioritized)": Table 2.3 with every Q
/// replaced by CQ (queue only if the pending request's priority is at least the received
/// request's).
pub const TABLE_3_2: [[PrioQueueOrForward; 5]; 6] = {
    const C: PrioQueueOrForward = PrioQueueOrForward::ConditionalQueue;
    const F: PrioQueueOrForward = PrioQueueOrForward::Forward;
    [
        [F, F, F, F, F], // Φ
        [C, F, F, F, F], // IR
        [F, C, F, F, F], // R
        [F, F, C, C, C], // U
        [F, F, F, C, F], // IW
        [C, C, C, C, C], // W
    ]
};

/// Rule 4.1 through Table 3.2 (literal): queue or forward at a non-token node with pending
/// mode `pending` at priority `pending_prio` that cannot grant `requested` at `prio`.
pub const fn queue_or_forward_prio(
    pending: Mode,
    pending_prio: u8,
    requested: Mode,
    prio: u8,
) -> QueueOrForward {
    match requested.column() {
        None => QueueOrForward::Forward,
        Some(c) => match TABLE_3_2[pending.index()][c] {
            PrioQueueOrForward::Forward => QueueOrForward::Forward,
            PrioQueueOrForward::ConditionalQueue => {
                if pending_prio >= prio {
                    QueueOrForward::Queue
                } else {
                    QueueOrForward::Forward
                }
            }
        },
    }
}

/// Table 2.4 (p. 20), "Rules for Freezing Lock Modes at the Token Node": row = mode M_OT
/// owned by the token node, column = mode M_R of the request it queues; the cell is the
/// set of modes to freeze.
pub const TABLE_2_4: [[ModeSet; 5]; 6] = {
    use Mode::*;
    const E: ModeSet = ModeSet::EMPTY;
    [
        [E, E, E, E, E],                                           // Φ
        [E, E, E, E, ModeSet::of(&[IR, R, U, IW])],                // IR
        [E, E, E, ModeSet::of(&[R, U]), ModeSet::of(&[IR, R, U])], // R
        [E, E, E, ModeSet::of(&[R]), ModeSet::of(&[IR, R])],       // U
        [
            E,
            ModeSet::of(&[IW]),
            ModeSet::of(&[IW]),
            E,
            ModeSet::of(&[IR, IW]),
        ], // IW
        [E, E, E, E, E],                                           // W
    ]
};

/// Rule 1 through Table 2.1 (literal): do `held` and `requested` conflict?
pub const fn table_2_1(held: Mode, requested: Mode) -> bool {
    match requested.column() {
        None => false,
        Some(c) => TABLE_2_1[held.index()][c],
    }
}

/// Rule 3.1 through Table 2.2 (literal): may a non-token node owning `owned` grant `requested`?
/// Φ is never granted (it is not a request).
pub const fn grantable(owned: Mode, requested: Mode) -> bool {
    match requested.column() {
        None => false,
        Some(c) => !TABLE_2_2[owned.index()][c],
    }
}

/// Rule 3.2 (operational spec, case 2): the token node owning `owned` answers a request for
/// `requested` by transferring the token iff the modes are compatible and `owned < requested`.
pub const fn tokenable(owned: Mode, requested: Mode) -> bool {
    compatible(owned, requested) && owned.weaker_than(requested)
}

/// Rule 4.1 through Table 2.3 (literal): queue or forward at a non-token node with pending
/// mode `pending` (Φ if none) that cannot grant `requested`.
pub const fn queue_or_forward(pending: Mode, requested: Mode) -> QueueOrForward {
    match requested.column() {
        None => QueueOrForward::Forward,
        Some(c) => TABLE_2_3[pending.index()][c],
    }
}

/// Rule 6 through Table 2.4 (literal): the modes the token node owning `owned` freezes when
/// it queues a request for `requested`.
pub const fn frozen_by(owned: Mode, requested: Mode) -> ModeSet {
    match requested.column() {
        None => ModeSet::EMPTY,
        Some(c) => TABLE_2_4[owned.index()][c],
    }
}

/// Table 3.1 (p. 28), "Rules for Freezing Lock Modes at the Token Node (Prioritized)": the
/// same cells as Table 2.4, plus the rule that every frozen mode's threshold becomes
/// `max(threshold, ξ(M_R))` ([`crate::token::prio::Frozen::freeze`]).
pub const TABLE_3_1: [[ModeSet; 5]; 6] = {
    use Mode::*;
    const E: ModeSet = ModeSet::EMPTY;
    [
        [E, E, E, E, E],
        [E, E, E, E, ModeSet::of(&[IR, R, U, IW])],
        [E, E, E, ModeSet::of(&[R, U]), ModeSet::of(&[IR, R, U])],
        [E, E, E, ModeSet::of(&[R]), ModeSet::of(&[IR, R])],
        [
            E,
            ModeSet::of(&[IW]),
            ModeSet::of(&[IW]),
            E,
            ModeSet::of(&[IR, IW]),
        ],
        [E, E, E, E, E],
    ]
};

/// The modes a non-token node owning `owned` could grant (a row of Table 2.2).
pub fn grantable_set(owned: Mode) -> ModeSet {
    let mut out = ModeSet::EMPTY;
    for m in Mode::REQUESTABLE {
        if grantable(owned, m) {
            out.insert(m);
        }
    }
    out
}

/// Derivations of the tables from the axioms (Table 2.1 and inequation 2.1) and invariant 2.2.
pub mod derived {
    use super::*;

    /// Table 2.1 from [`crate::mode::conflicts`].
    pub fn table_2_1(held: Mode, requested: Mode) -> bool {
        conflicts(held, requested)
    }

    /// Table 2.2 derived: a non-token node owning `owned` may grant `requested` iff
    /// the two are compatible and `owned ≥ requested` (Rule 3.1). Φ owns nothing and so
    /// grants nothing; this falls out of the formula (Φ ≥ M_R is false for M_R ≠ Φ).
    pub fn grantable(owned: Mode, requested: Mode) -> bool {
        requested != Mode::Phi && compatible(owned, requested) && owned.at_least(requested)
    }

    /// Table 2.4 derived from invariant 2.2: when the token node owning `owned` queues a
    /// request for `requested` because it conflicts with `owned`, freeze every mode M_i
    /// with `[grantable(owned, M_i) ∨ tokenable(owned, M_i)] ∧ conflicts(M_i, requested)`.
    /// At the token node `grantable ∨ tokenable` is plain compatibility (Rule 3.2).
    /// A request that does not conflict with `owned` is granted, not queued: nothing freezes.
    pub fn frozen_by(owned: Mode, requested: Mode) -> ModeSet {
        let mut out = ModeSet::EMPTY;
        if requested == Mode::Phi || !conflicts(owned, requested) {
            return out;
        }
        for m in Mode::REQUESTABLE {
            let token_can_give =
                compatible(owned, m) && (grantable(owned, m) || super::tokenable(owned, m));
            if token_can_give && conflicts(m, requested) {
                out.insert(m);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells() -> impl Iterator<Item = (Mode, Mode)> {
        Mode::ALL
            .into_iter()
            .flat_map(|o| Mode::REQUESTABLE.into_iter().map(move |r| (o, r)))
    }

    #[test]
    fn table_2_1_literal_equals_axiom_cell_by_cell() {
        for (h, r) in cells() {
            assert_eq!(
                table_2_1(h, r),
                derived::table_2_1(h, r),
                "Table 2.1 cell ({h}, {r})"
            );
        }
    }

    #[test]
    fn table_2_2_literal_equals_derivation_cell_by_cell() {
        for (o, r) in cells() {
            assert_eq!(
                grantable(o, r),
                derived::grantable(o, r),
                "Table 2.2 cell ({o}, {r})"
            );
        }
    }

    #[test]
    fn table_3_1_has_the_cells_of_table_2_4() {
        for (o, r) in cells() {
            assert_eq!(
                TABLE_3_1[o.index()][r.column().unwrap()],
                frozen_by(o, r),
                "({o}, {r})"
            );
        }
    }

    #[test]
    fn table_2_4_literal_equals_derivation_cell_by_cell() {
        for (o, r) in cells() {
            assert_eq!(
                frozen_by(o, r),
                derived::frozen_by(o, r),
                "Table 2.4 cell ({o}, {r})"
            );
        }
    }

    /// Table 2.3's Q cells rely on: a node pending U or W is served by a token transfer
    /// (no copy of U or W can ever be granted by a non-token node, Table 2.2), so it will be
    /// the token node and can decide every queued request itself; a node pending M ∈ {IR, R,
    /// IW} that is served will own M and can then grant M itself (Rule 3.1).
    #[test]
    fn table_2_3_q_cells_rest_on_the_table_2_2_facts() {
        for o in Mode::ALL {
            assert!(!grantable(o, Mode::U) && !grantable(o, Mode::W));
        }
        for m in [Mode::IR, Mode::R, Mode::IW] {
            assert!(grantable(m, m));
            assert_eq!(queue_or_forward(m, m), QueueOrForward::Queue);
        }
        for r in Mode::REQUESTABLE {
            assert_eq!(queue_or_forward(Mode::Phi, r), QueueOrForward::Forward);
            assert_eq!(queue_or_forward(Mode::W, r), QueueOrForward::Queue);
        }
    }

    /// Table 3.2 is Table 2.3 with every Q made conditional: with equal priorities the two
    /// agree cell by cell; a higher-priority request is always forwarded from a CQ cell.
    #[test]
    fn table_3_2_is_table_2_3_with_conditional_queueing() {
        for (p, r) in cells() {
            assert_eq!(
                queue_or_forward_prio(p, 3, r, 3),
                queue_or_forward(p, r),
                "({p}, {r})"
            );
            assert_eq!(
                queue_or_forward_prio(p, 3, r, 2),
                queue_or_forward(p, r),
                "({p}, {r})"
            );
            assert_eq!(
                queue_or_forward_prio(p, 3, r, 4),
                QueueOrForward::Forward,
                "({p}, {r})"
            );
        }
    }

    #[test]
    fn frozen_modes_never_include_what_the_token_node_could_not_give_anyway() {
        for (o, r) in cells() {
            for m in frozen_by(o, r).iter() {
                assert!(compatible(o, m), "{o} {r} freezes {m}");
                assert!(conflicts(m, r));
            }
        }
    }
}
