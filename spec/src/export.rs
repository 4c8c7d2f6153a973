//! The specification as data: modes, the thesis tables (literal and derived), and the
//! rules with the kernel function that implements each. `hilock spec --json` prints it; a
//! tool in any language can load it and check an implementation against the tables.

use hilock_kernel::token::tables::{self, derived, QueueOrForward};
use hilock_kernel::{Mode, ModeSet};
use serde::Serialize;

/// Format tag of the exported document.
pub const SPEC_FORMAT: &str = "hilock-spec/1";

/// The whole exported specification.
#[derive(Clone, Debug, Serialize)]
pub struct SpecDocument {
    /// Always [`SPEC_FORMAT`].
    pub format: &'static str,
    /// The source of the rules.
    pub source: &'static str,
    /// The modes with their strength (inequation 2.1).
    pub modes: Vec<ModeInfo>,
    /// The tables.
    pub tables: Vec<Table>,
    /// The rules.
    pub rules: Vec<Rule>,
}

/// A mode and its strength.
#[derive(Clone, Debug, Serialize)]
pub struct ModeInfo {
    /// ASCII name.
    pub name: &'static str,
    /// Thesis symbol.
    pub symbol: &'static str,
    /// Strength, inequation 2.1.
    pub strength: u8,
}

/// A table: rows × columns, each cell literal (thesis) and derived (from the axioms).
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    /// E.g. `"2.2"`.
    pub id: &'static str,
    /// Thesis caption.
    pub title: &'static str,
    /// Page in Desai 2003.
    pub page: u32,
    /// What a row is.
    pub rows_are: &'static str,
    /// What a column is.
    pub columns_are: &'static str,
    /// What a cell means.
    pub cell: &'static str,
    /// Row labels.
    pub rows: Vec<&'static str>,
    /// Column labels.
    pub columns: Vec<&'static str>,
    /// Cells as transcribed from the thesis.
    pub literal: Vec<Vec<serde_json::Value>>,
    /// Cells derived from the axioms; `null` for tables that are design choices.
    pub derived: Option<Vec<Vec<serde_json::Value>>>,
    /// The kernel function that looks the table up.
    pub kernel: &'static str,
}

/// A rule of the protocol.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    /// E.g. `"Rule 3.1"`.
    pub id: &'static str,
    /// The rule in short.
    pub text: &'static str,
    /// Tables it uses.
    pub tables: Vec<&'static str>,
    /// Kernel functions implementing it.
    pub kernel: Vec<&'static str>,
    /// Tests that check it.
    pub tests: Vec<&'static str>,
}

fn set(s: ModeSet) -> serde_json::Value {
    serde_json::Value::Array(
        s.iter()
            .map(|m| serde_json::Value::from(m.name()))
            .collect(),
    )
}

fn grid<F: Fn(Mode, Mode) -> serde_json::Value>(f: F) -> Vec<Vec<serde_json::Value>> {
    Mode::ALL
        .iter()
        .map(|&r| Mode::REQUESTABLE.iter().map(|&c| f(r, c)).collect())
        .collect()
}

/// The specification document.
pub fn document() -> SpecDocument {
    let rows: Vec<&'static str> = Mode::ALL.iter().map(|m| m.name()).collect();
    let cols: Vec<&'static str> = Mode::REQUESTABLE.iter().map(|m| m.name()).collect();
    let qf = |q: QueueOrForward| {
        serde_json::Value::from(if q == QueueOrForward::Queue { "Q" } else { "F" })
    };
    SpecDocument {
        format: SPEC_FORMAT,
        source: "N. Desai, Scalable Distributed Concurrency Protocol with Priority Support, MS thesis, NCSU 2003, chapter 2",
        modes: Mode::ALL
            .iter()
            .map(|m| ModeInfo { name: m.name(), symbol: m.symbol(), strength: m.strength() })
            .collect(),
        tables: vec![
            Table {
                id: "2.1",
                title: "Incompatibility of Lock Modes",
                page: 10,
                rows_are: "held mode M1",
                columns_are: "requested mode M2",
                cell: "true = X = the modes conflict",
                rows: rows.clone(),
                columns: cols.clone(),
                literal: grid(|r, c| tables::table_2_1(r, c).into()),
                derived: Some(grid(|r, c| derived::table_2_1(r, c).into())),
                kernel: "hilock_kernel::token::tables::table_2_1 / hilock_kernel::mode::conflicts",
            },
            Table {
                id: "2.2",
                title: "Granting New Lock Requests by Children",
                page: 12,
                rows_are: "owned mode M_O of a non-token node",
                columns_are: "requested mode M_R",
                cell: "true = the node may grant (no X in the thesis)",
                rows: rows.clone(),
                columns: cols.clone(),
                literal: grid(|r, c| tables::grantable(r, c).into()),
                derived: Some(grid(|r, c| derived::grantable(r, c).into())),
                kernel: "hilock_kernel::token::tables::grantable",
            },
            Table {
                id: "2.3",
                title: "Queue / Forward Decision",
                page: 14,
                rows_are: "pending mode M_P of a non-token node",
                columns_are: "requested mode M_R",
                cell: "Q = queue locally, F = forward to the parent",
                rows: rows.clone(),
                columns: cols.clone(),
                literal: grid(|r, c| qf(tables::queue_or_forward(r, c))),
                derived: None,
                kernel: "hilock_kernel::token::tables::queue_or_forward",
            },
            Table {
                id: "3.2",
                title: "Queue / Forward Decision (Prioritized)",
                page: 30,
                rows_are: "pending mode M_P of a non-token node",
                columns_are: "requested mode M_R",
                cell: "F = forward, CQ = queue iff xi(pending) >= xi(received), else forward",
                rows: rows.clone(),
                columns: cols.clone(),
                literal: grid(|r, c| {
                    let cell = tables::TABLE_3_2[r.index()][c.column().unwrap_or(0)];
                    serde_json::Value::from(if cell == tables::PrioQueueOrForward::Forward { "F" } else { "CQ" })
                }),
                derived: None,
                kernel: "hilock_kernel::token::tables::queue_or_forward_prio",
            },
            Table {
                id: "2.4",
                title: "Rules for Freezing Lock Modes at the Token Node",
                page: 20,
                rows_are: "owned mode M_OT of the token node",
                columns_are: "requested mode M_R of the queued request",
                cell: "the modes to freeze",
                rows: rows.clone(),
                columns: cols.clone(),
                literal: grid(|r, c| set(tables::frozen_by(r, c))),
                derived: Some(grid(|r, c| set(derived::frozen_by(r, c)))),
                kernel: "hilock_kernel::token::tables::frozen_by",
            },
            Table {
                id: "3.1",
                title: "Rules for Freezing Lock Modes at the Token Node (Prioritized)",
                page: 28,
                rows_are: "owned mode M_OT of the token node",
                columns_are: "requested mode M_R of the queued request",
                cell: "the modes to freeze; every frozen mode's threshold becomes max(threshold, xi(M_R))",
                rows,
                columns: cols,
                literal: grid(|r, c| set(tables::TABLE_3_1[r.index()][c.column().unwrap_or(0)])),
                derived: Some(grid(|r, c| set(derived::frozen_by(r, c)))),
                kernel: "hilock_kernel::token::prio::Frozen::freeze with hilock_kernel::token::tables::frozen_by",
            },
        ],
        rules: rules(),
    }
}

/// The rules and where they live. SPEC.md is checked to name every kernel function here.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule {
            id: "Rule 1",
            text: "Modes M1 and M2 are compatible iff they do not conflict in Table 2.1; strength Φ < IR < R < U = IW < W (2.1).",
            tables: vec!["2.1"],
            kernel: vec!["mode::compatible", "mode::conflicts", "mode::strongest", "Mode::strength"],
            tests: vec!["mode::tests::weaker_compatible_mode_conflicts_with_less", "tables::tests::table_2_1_literal_equals_axiom_cell_by_cell"],
        },
        Rule {
            id: "Rule 2",
            text: "A node sends a request for M_R to its parent iff it owns M_O < M_R or M_O and M_R conflict (or M_R is frozen); otherwise it enters at once.",
            tables: vec!["2.2"],
            kernel: vec!["LockNode::acquire"],
            tests: vec!["scenario fig-2.2", "kernel rule_2_local_acquire_sends_nothing"],
        },
        Rule {
            id: "Rule 3.1",
            text: "A non-token node owning M_O grants M_R iff compatible and M_O ≥ M_R (Table 2.2); the requester becomes its child.",
            tables: vec!["2.2"],
            kernel: vec!["LockNode::on_request", "LockNode::copy_grant", "tables::grantable"],
            tests: vec!["scenario fig-2.8", "kernel rule_3_1_child_grants_copy"],
        },
        Rule {
            id: "Rule 3.2",
            text: "The token node owning M_O grants M_R iff compatible; if M_O < M_R the token moves to the requester, else it grants a copy.",
            tables: vec!["2.1"],
            kernel: vec!["LockNode::serve_at_token", "LockNode::transfer_token", "LockNode::copy_grant", "tables::tokenable"],
            tests: vec!["scenario fig-2.2"],
        },
        Rule {
            id: "Rule 4.1",
            text: "A non-token node that cannot grant queues the request if Table 2.3 says Q for its pending mode, else forwards it.",
            tables: vec!["2.3"],
            kernel: vec!["LockNode::on_request", "LockNode::check_queue_at_child", "LockNode::keeps", "tables::queue_or_forward_prio"],
            tests: vec!["scenario fig-2.3"],
        },
        Rule {
            id: "Rule 4.2",
            text: "The token node queues every request it cannot grant.",
            tables: vec![],
            kernel: vec!["LockNode::serve_at_token", "LockNode::enqueue"],
            tests: vec!["scenario fig-2.3", "scenario fig-2.6"],
        },
        Rule {
            id: "Rule 5.1",
            text: "On a release (own or a child's) the token node serves its queue from the head under Rule 3; the queue travels with the token.",
            tables: vec!["2.1"],
            kernel: vec!["LockNode::release", "LockNode::on_release", "LockNode::check_queue_at_token", "LockNode::on_token"],
            tests: vec!["scenario fig-2.6"],
        },
        Rule {
            id: "Rule 5.2",
            text: "A non-token node sends a release to its parent only if its owned mode changed; the message carries the new owned mode.",
            tables: vec![],
            kernel: vec!["LockNode::after_owned_change", "LockNode::on_release"],
            tests: vec!["scenario fig-2.6"],
        },
        Rule {
            id: "Rule 6",
            text: "A node may grant only modes that are not frozen; the token node freezes per Table 2.4 (invariant 2.2) and tells children that could grant them (invariant 2.3).",
            tables: vec!["2.4"],
            kernel: vec!["LockNode::recompute_frozen", "LockNode::finish_freeze", "LockNode::on_freeze", "tables::frozen_by", "tables::grantable_set"],
            tests: vec!["scenario fig-2.8", "scenario fig-2.10"],
        },
        Rule {
            id: "Rule 6_PRIO",
            text: "A request for M_R is granted only if its priority exceeds Frozen_Modes(M_R).threshold; queueing a request raises the thresholds of the modes it freezes to its priority (Table 3.1).",
            tables: vec!["3.1"],
            kernel: vec!["Frozen::blocks", "Frozen::freeze", "LockNode::recompute_frozen"],
            tests: vec!["kernel rule_6_prio_higher_priority_bypasses_the_freeze", "scenario fig-3.3"],
        },
        Rule {
            id: "Rule 8",
            text: "Local queues are ordered by non-increasing priority, then by receipt (FIFO); on token receipt the merged queue is sorted the same way.",
            tables: vec![],
            kernel: vec!["LockNode::enqueue", "LockNode::on_token"],
            tests: vec!["kernel pip_reissue_after_the_request_moved_with_the_token_is_harmless", "scenario fig-3.2"],
        },
        Rule {
            id: "Rule 4.1 (prioritized)",
            text: "A non-token node queues a request behind its pending one only if Table 3.2 says CQ and xi(pending) >= xi(received); otherwise it forwards it.",
            tables: vec!["3.2"],
            kernel: vec!["LockNode::keeps", "tables::queue_or_forward_prio"],
            tests: vec!["kernel table_3_2_conditional_queueing", "scenario fig-3.2"],
        },
        Rule {
            id: "PCEP",
            text: "On acquiring lock i the site's effective priority rises to the ceiling C_i; on release it falls to the highest ceiling still held, or the base priority (Fig. 3.7).",
            tables: vec![],
            kernel: vec!["Site::step", "Site::with_ceilings"],
            tests: vec!["kernel pcep_and_pip_raise_and_lower_the_effective_priority", "scenario fig-3.4-pcep"],
        },
        Rule {
            id: "PIP",
            text: "A holder that a queued request waits for inherits its priority (at the token node on queueing, at children through the freeze), reissues its pending requests on every lock, and falls back on release (Fig. 3.8).",
            tables: vec![],
            kernel: vec!["LockNode::inherit_at_token", "LockNode::on_freeze", "LockNode::reissue", "LockNode::requeue_reissued"],
            tests: vec!["kernel pip_reissue_after_the_original_was_granted_is_harmless", "scenario fig-3.4-pip"],
        },
        Rule {
            id: "Rule 7",
            text: "A U holder (always the token node) upgrades to W atomically, without releasing U, once no child owns a mode.",
            tables: vec!["2.4"],
            kernel: vec!["LockNode::upgrade", "LockNode::check_queue_at_token"],
            tests: vec!["scenario fig-2.10"],
        },
        Rule {
            id: "Try-lock",
            text: "hilock's extension (SPEC.md 1.12): a try is granted where a request would be, and only if no queued request that conflicts with it waits at the deciding node; where a request would be queued or frozen for, it ends in WouldBlock (Busy from another node) and leaves nothing in the protocol.",
            tables: vec!["2.1", "2.2", "3.2"],
            kernel: vec!["LockNode::try_acquire", "LockNode::on_try_request", "LockNode::on_busy", "LockNode::queue_conflicts"],
            tests: vec!["kernel try_against_a_conflicting_holder_would_block_and_changes_no_queue_or_freeze", "kernel after_would_block_a_release_never_grants_the_try"],
        },
        Rule {
            id: "Cancel",
            text: "hilock's extension (SPEC.md 1.13): a pending request, try or upgrade is withdrawn at once (Cancelled) and keeps running in the protocol only as cancelled; its grant, when it comes, is released, and what waits behind it is passed on.",
            tables: vec![],
            kernel: vec!["LockNode::cancel"],
            tests: vec!["kernel a_cancelled_request_is_released_when_its_grant_arrives", "kernel a_cancelled_request_passes_on_what_waits_behind_it"],
        },
        Rule {
            id: "Downgrade",
            text: "hilock's extension (SPEC.md 1.14): a hold becomes a weaker mode that conflicts with nothing the held mode is compatible with, without being released, and keeps its fence; then the site does what a release does (Rule 5): a non-token node whose owned mode fell tells its parent, the token node serves its queue.",
            tables: vec!["2.1"],
            kernel: vec!["LockNode::downgrade", "Mode::downgrades_to"],
            tests: vec!["kernel a_token_node_downgrading_w_to_r_grants_the_waiting_readers_at_once", "kernel a_refused_downgrade_changes_nothing"],
        },
        Rule {
            id: "Conversion",
            text: "hilock's extension (SPEC.md 1.17): a hold becomes any other mode where the site could grant that mode to its own request at once; only at the token node may a conversion wait (as Rule 7 for any mode): it freezes what the new mode conflicts with, so later conflicting requests wait behind it, and keeps the token.",
            tables: vec!["2.1", "2.2"],
            kernel: vec!["LockNode::convert", "LockNode::keeps_token_for_conversion"],
            tests: vec!["kernel a_waiting_conversion_goes_before_a_later_reader", "kernel a_token_node_converts_only_to_modes_compatible_with_the_other_holds"],
        },
        Rule {
            id: "Value block",
            text: "hilock's extension (SPEC.md 1.15): only the W holder writes the lock's value block; the token and every copy grant carry the sender's block, so a holder reads the last value written before its grant; a regenerated token's block is not valid until the next write.",
            tables: vec!["2.1", "2.2"],
            kernel: vec!["LockNode::set_value", "LockNode::copy_grant", "LockNode::transfer_token"],
            tests: vec!["kernel a_reader_reads_the_last_value_written_before_its_grant", "kernel a_regenerated_tokens_value_is_not_valid_until_the_next_write"],
        },
        Rule {
            id: "Blocking notification",
            text: "hilock's extension (SPEC.md 1.16): a holder is told (Blocking) of a waiting request its hold conflicts with, at most once per waiting mode per hold: by the token node when it queues the request or receives the token with a queue, at a copy holder by the freeze that names the waiting modes.",
            tables: vec!["2.1", "2.4"],
            kernel: vec!["LockNode::tell_blocking", "LockNode::waiting"],
            tests: vec!["kernel rule_4_2_the_token_holder_is_told_once_per_waiting_mode", "kernel rule_6_a_copy_holder_is_told_by_the_freeze_that_names_the_waiter"],
        },
    ]
}
