//! The rule-deletion table of `docs/verification.md`, executable: for each row, a copy of
//! the workspace with one rule's effect deleted or weakened in the kernel (or, for the
//! runtime's lossless channel and the node's lease, in the runtime), and the named
//! check that must turn red on it. A check that stays green on its row's mutation does not
//! check that rule.
//!
//! `cargo test --release -p verify --test rule_deletions -- --ignored --nocapture`
//! (about 1–2 minutes per row on 2 cores after the first build; the copies share one target
//! directory, `target/rule-deletions`, so each row rebuilds only the kernel and what depends
//! on it). The unmutated tree must pass every named check first. `HILOCK_RULE=TEXT` runs
//! only the rows whose rule names contain TEXT (`A|B`: either).

use hilock_kernel::Rule;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One row: which rule, where its effect is, how it is deleted, and the check that catches it.
struct Row {
    rule: &'static str,
    /// The kernel's `Rule`s (the token engine's report labels) whose effect the row
    /// deletes; empty for a rule the kernel applies without reporting it (a table cell, a
    /// guard).
    rules: &'static [Rule],
    file: &'static str,
    from: &'static str,
    to: &'static str,
    /// Further `(from, to)` replacements in the same file, applied with the first: for a
    /// row that deletes two paths that back each other up (empty for most rows).
    also: &'static [(&'static str, &'static str)],
    /// `cargo test --release -p PACKAGE --test TARGET -- FILTER`
    package: &'static str,
    target: &'static str,
    filter: &'static str,
}

const ROWS: &[Row] = &[
    Row {
        rule: "Rule 2: a covered request enters without a message",
        rules: &[Rule::Rule2Local],
        file: "kernel/src/token/node.rs",
        from: "        if grantable(self.owned(), mode) && !self.frozen.blocks(mode, prio) {",
        to: "        if false && grantable(self.owned(), mode) && !self.frozen.blocks(mode, prio) {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_2_non_token_node_enters_under_its_owned_mode",
    },
    Row {
        rule: "Rule 3.1: a non-token node grants a copy (Table 2.2)",
        rules: &[Rule::Rule3_1CopyGrant],
        file: "kernel/src/token/node.rs",
        from: "        self.may_serve(cx, entry)\n            && grantable(self.owned(), entry.mode)",
        to: "        false\n            && grantable(self.owned(), entry.mode)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_3_1_child_grants_copy",
    },
    Row {
        rule: "Rule 3.2: the token node transfers the token to a tokenable request",
        rules: &[Rule::Rule3_2TokenTransfer],
        file: "kernel/src/token/node.rs",
        from: "        let transfer = tokenable(mo, entry.mode) && (cx.variant.tokenable_transfers || is_child);\n",
        to: "        let transfer = false && is_child && tokenable(mo, entry.mode);\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 4.1 / Table 2.3: a non-token node keeps a request behind its pending one",
        rules: &[Rule::Rule4_1Queue],
        file: "kernel/src/token/node.rs",
        from: "            entry.prio,\n        ) == QueueOrForward::Queue",
        to: "            entry.prio,\n        ) == QueueOrForward::Queue\n            && false",
        also: &[],
        package: "verify",
        target: "token",
        filter: "mixed_workloads_chain_and_star",
    },
    Row {
        rule: "Rule 8.1: a request is queued behind every entry of at least its priority",
        rules: &[Rule::Rule8_1Order],
        file: "kernel/src/token/node.rs",
        from: "            .position(|x| x.prio < entry.prio)",
        to: "            .position(|x| x.prio < entry.prio && false)",
        also: &[],
        package: "hilock-spec",
        target: "scenarios",
        filter: "every_thesis_scenario_passes",
    },
    Row {
        rule: "Rule 6: send newly frozen modes to the children (finish_freeze)",
        rules: &[Rule::Rule6FreezeSent],
        file: "kernel/src/token/node.rs",
        from: "let m = delta.restrict(grantable_set(rec));\n            if !m.is_empty() {",
        to: "let m = delta.restrict(grantable_set(rec));\n            if false && !m.is_empty() {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 6 / invariant 2.3: freeze the children when the token arrives (on_token)",
        rules: &[Rule::Rule6FreezeSent],
        file: "kernel/src/token/node.rs",
        from: "let m = frozen.beyond(known).restrict(grantable_set(rec));\n            if !m.is_empty() {",
        to: "let m = frozen.beyond(known).restrict(grantable_set(rec));\n            if false && !m.is_empty() {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 5.2: propagate a weakening (R -> IR), not only a release to Φ",
        rules: &[Rule::Rule5_2Propagate],
        file: "kernel/src/token/node.rs",
        from: "        if now != before {",
        to: "        if now != before && now == Mode::Phi {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "own request requeued on a stale token: the requester's current request is queued (on_token)",
        rules: &[Rule::OwnRequestRequeued],
        file: "kernel/src/token/node.rs",
        from: "            if !merged.iter().any(|e| e.requester == cx.me) {",
        to: "            if false {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::a_stale_token_requeues_the_current_request_kept_at_another_node",
    },
    Row {
        rule: "own try decided on a stale token: the token node answers the try still travelling (on_token)",
        rules: &[Rule::OwnRequestRequeued],
        file: "kernel/src/token/node.rs",
        from: "        if let Pending::Try(p) = own {",
        to: "        if let (false, Pending::Try(p)) = (true, own) {",
        also: &[],
        package: "hilock-spec",
        target: "robustness",
        filter: "a_stale_token_decides_the_receivers_travelling_try",
    },
    Row {
        rule: "no grant to the parent: a non-token node never serves a request of its parent (may_serve)",
        rules: &[],
        file: "kernel/src/token/node.rs",
        from: "        entry.requester != cx.me && Some(entry.requester) != self.parent",
        to: "        entry.requester != cx.me",
        also: &[],
        package: "verify",
        target: "token",
        filter: "pip_stale_copy_served_by_token_transfer_closes_no_cycle",
    },
    Row {
        rule: "Rule 6 / invariant 2.3: a release that raises a record sends the newly grantable frozen modes",
        rules: &[Rule::Rule6FreezeSent],
        file: "kernel/src/token/node.rs",
        from: "        if !newly.is_empty() {\n            cx.fire(Rule::Rule6FreezeSent);",
        to: "        if false && !newly.is_empty() {\n            cx.fire(Rule::Rule6FreezeSent);",
        also: &[],
        package: "hilock-spec",
        target: "robustness",
        filter: "regression_pip_raised_record_gets_the_frozen_modes",
    },
    Row {
        rule: "Rule 4.2: the token node queues a request that conflicts with its owned mode",
        rules: &[Rule::Rule4_2Queue],
        file: "kernel/src/token/node.rs",
        from: "        self.enqueue(cx, entry)?;\n        if conflict {",
        to: "        if conflict {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 7: a waiting upgrade completes when the children own nothing",
        rules: &[Rule::Rule7UpgradeDone],
        file: "kernel/src/token/node.rs",
        from: "                if compatible(combine(self.kept, self.children_owned()), to) {",
        to: "                if false && compatible(combine(self.kept, self.children_owned()), to) {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "upgrades",
    },
    Row {
        rule: "Rule 8.2: the token's queue is merged with the receiver's own queue",
        rules: &[Rule::Rule8_2Merge],
        file: "kernel/src/token/node.rs",
        from: "        for e in queue.iter().chain(self.queue.iter()) {",
        to: "        for e in queue.iter() {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "mixed_workloads_chain_and_star",
    },
    Row {
        rule: "token generations: a token whose generation was seen is refused (a duplicating network)",
        rules: &[],
        file: "kernel/src/token/node.rs",
        from: "        if !wrap::newer_generation(generation, self.generation_seen) || self.has_token() {",
        to: "        if self.has_token() {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_duplicating_network_breaks_no_property",
    },
    Row {
        rule: "hop numbers: a re-delivered request is rejected (exactly-once requests)",
        rules: &[],
        file: "kernel/src/token/node.rs",
        from: "        if back == 0 || back > 32 || link.requests_window & (1 << (back - 1)) != 0 {",
        to: "        if back > 32 {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::a_redelivered_request_is_rejected_and_changes_nothing",
    },
    Row {
        rule: "resync release: a grant whose record differs from the owned mode is corrected",
        rules: &[Rule::ResyncRelease],
        file: "kernel/src/token/node.rs",
        from: "        if cx.variant.release_epochs && now != recorded {",
        to: "        if false && cx.variant.release_epochs && now != recorded {",
        also: &[],
        package: "hilock-spec",
        target: "robustness",
        filter: "regression_pip_raised_record_gets_the_frozen_modes",
    },
    Row {
        rule: "leave old parent: a grant (or the token) from a new parent releases the old parent's record",
        rules: &[Rule::LeaveOldParent],
        file: "kernel/src/token/node.rs",
        from: "            if old != from && before != Mode::Phi {\n                cx.fire(Rule::LeaveOldParent);",
        to: "            if false && old != from && before != Mode::Phi {\n                cx.fire(Rule::LeaveOldParent);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_grant_from_a_new_parent_releases_the_old_parents_record",
    },
    Row {
        rule: "stale grant: a grant for a request no longer pending is answered with a release",
        rules: &[Rule::StaleGrant],
        file: "kernel/src/token/node.rs",
        from: "            return cx.send(\n                from,",
        to: "            let _ = owned;\n            return Ok(());\n            #[allow(unreachable_code)]\n            cx.send(\n                from,",
        also: &[],
        package: "verify",
        target: "token",
        filter: "pip_stale",
    },
    Row {
        rule: "Rule 1 / Table 2.1: R conflicts with W",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::R, Mode::W) | (Mode::W, Mode::R)) || !conflicts(a, b)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "release epochs (Decision 5): a release is applied only on the current link",
        rules: &[Rule::StaleRelease],
        file: "kernel/src/token/node.rs",
        from: "let current = !cx.variant.release_epochs || link.parent_epoch == epoch;",
        to: "let current = true;",
        also: &[],
        package: "verify",
        target: "token",
        filter: "gap_literal_release_handling_violates_p1_and_p3",
    },
    Row {
        rule: "Rule 6_PRIO: a request passes a freeze only above its threshold",
        rules: &[],
        file: "kernel/src/token/prio.rs",
        from: "self.threshold(m).is_some_and(|t| prio <= t)",
        to: "self.threshold(m).is_some()",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::rule_6_prio_higher_priority_bypasses_the_freeze",
    },
    Row {
        rule: "PIP (Fig. 3.8): pending requests are reissued when ξ rises",
        rules: &[Rule::PipReissue],
        file: "kernel/src/token/node.rs",
        from: "        if e.prio >= prio {\n            return Ok(());\n        }\n        e.prio = prio;",
        to: "        if e.prio >= prio || prio > 0 {\n            return Ok(());\n        }\n        e.prio = prio;",
        also: &[],
        package: "verify",
        target: "inversion",
        filter: "p7_pcep_and_pip_bound_the_inversion_by_one_critical_section",
    },
    Row {
        rule: "Table 2.2 cell (R, IR): a non-token node owning R grants an IR copy (Rule 3.1)",
        rules: &[Rule::Rule3_1CopyGrant],
        file: "kernel/src/token/tables.rs",
        from: "        [O, O, X, X, X], // R\n",
        to: "        [X, O, X, X, X], // R\n",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_3_1_child_grants_copy",
    },
    Row {
        rule: "Table 2.4 cell (IW, U): a U queued at a token node owning IW freezes IW (Rule 6)",
        rules: &[],
        file: "kernel/src/token/tables.rs",
        from: "            ModeSet::of(&[IW]),\n            ModeSet::of(&[IW]),\n            E,\n            ModeSet::of(&[IR, IW]),\n        ], // IW",
        to: "            ModeSet::of(&[IW]),\n            E,\n            E,\n            ModeSet::of(&[IR, IW]),\n        ], // IW",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "keep_intention::u_request_recalls_a_kept_iw",
    },
    Row {
        rule: "Tree demotion (slides 15-16): SetOwner(a, n.owner, n.originalRequest) moves the owner down",
        rules: &[],
        file: "kernel/src/tree/ops.rs",
        from: "        tree.set_owner(a, owner, r)?;\n        tree.set_grey(c, 2)?;",
        to: "        let _ = (a, owner, r);\n        tree.set_grey(c, 2)?;",
        also: &[],
        package: "verify",
        target: "tree",
        filter: "tree_p8_hilock_three_users_height_3",
    },
    Row {
        rule: "Tree promotion (slide 20, PathSibling): the owner left below a count of one is promoted",
        rules: &[],
        file: "kernel/src/tree/ops.rs",
        from: "            self.side = Some(c);\n            self.promote(tree, k, o, r, p)?;",
        to: "            self.side = Some(c);\n            let _ = (k, o, r);",
        also: &[],
        package: "verify",
        target: "tree",
        filter: "tree_p8_hilock_three_users_height_3",
    },
    Row {
        rule: "Tree handshake (slide 13): a latch names its user, so one operation per user runs at a time",
        rules: &[],
        file: "kernel/src/tree/ops.rs",
        from: "            Ok(_) => Err(TreeError::OperationInProgress { user: u }),",
        to: "            Ok(_) => Ok(()),",
        also: &[],
        package: "verify",
        target: "tree",
        filter: "tree_p8_hilock_three_users_height_3",
    },
    Row {
        rule: "Rule 2: a request the owned mode does not cover is sent to the parent",
        rules: &[Rule::Rule2Request],
        file: "kernel/src/token/node.rs",
        from: "            self.pending = Pending::Request(entry);\n            self.forward(cx, entry)?;\n",
        to: "            self.pending = Pending::Request(entry);\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 3.2: the token node grants a copy of a grantable request (Table 2.2)",
        rules: &[Rule::Rule3_2CopyGrant],
        file: "kernel/src/token/node.rs",
        from: "        } else if grantable(mo, entry.mode) {\n            self.copy_grant(cx, entry)?;\n",
        to: "        } else if false && grantable(mo, entry.mode) {\n            self.copy_grant(cx, entry)?;\n",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_3_2_token_node_grants_a_copy_in_the_step_the_request_arrives",
    },
    Row {
        rule: "Rule 3.2: the token node enters at once when its own request is compatible",
        rules: &[Rule::Rule3_2OwnGrant],
        file: "kernel/src/token/node.rs",
        from: "        if compatible(self.owned(), mode) && !self.frozen.blocks(mode, prio) {\n            self.held = mode;\n            self.held_fence = self.next_fence();\n            cx.fire(Rule::Rule3_2OwnGrant);",
        to: "        if false && compatible(self.owned(), mode) && !self.frozen.blocks(mode, prio) {\n            self.held = mode;\n            self.held_fence = self.next_fence();\n            cx.fire(Rule::Rule3_2OwnGrant);",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_3_2_token_node_enters_at_once_beside_a_child",
    },
    Row {
        rule: "Rule 4.1 / Table 2.3 F: a non-token node forwards what it may not keep",
        rules: &[Rule::Rule4_1Forward],
        file: "kernel/src/token/node.rs",
        from: "                // Rule 4.1, Table 3.2: F.\n                self.forward(cx, entry)?;\n",
        to: "                // Rule 4.1, Table 3.2: F.\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "mixed_workloads_chain_and_star",
    },
    Row {
        rule: "Rule 5: a release gives the held mode up",
        rules: &[Rule::Rule5Release],
        file: "kernel/src/token/node.rs",
        from: "        let before = self.owned();\n        self.held = Mode::Phi;\n        cx.fire(Rule::Rule5Release);",
        to: "        let before = self.owned();\n        cx.fire(Rule::Rule5Release);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 5.2: HandleRelease lowers the child's record",
        rules: &[Rule::Rule5_2Apply],
        file: "kernel/src/token/node.rs",
        from: "        self.set_child(from, owned)?;\n        cx.fire(Rule::Rule5_2Apply);",
        to: "        cx.fire(Rule::Rule5_2Apply);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 6: a freeze from the parent is merged into the frozen modes",
        rules: &[Rule::Rule6FreezeApplied],
        file: "kernel/src/token/node.rs",
        from: "        self.frozen = self.frozen.merge(modes);\n        cx.fire(Rule::Rule6FreezeApplied);",
        to: "        cx.fire(Rule::Rule6FreezeApplied);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 7: U -> W at once when no child owns a mode",
        rules: &[Rule::Rule7Upgrade],
        file: "kernel/src/token/node.rs",
        from: "        if self.children_owned() == Mode::Phi {\n            self.held = Mode::W;",
        to: "        if false {\n            self.held = Mode::W;",
        also: &[],
        package: "verify",
        target: "token",
        filter: "upgrades",
    },
    Row {
        rule: "Rule 7: an upgrade waits while a child owns a mode",
        rules: &[Rule::Rule7UpgradeWaits],
        file: "kernel/src/token/node.rs",
        from: "        if self.children_owned() == Mode::Phi {\n            self.held = Mode::W;",
        to: "        if true {\n            self.held = Mode::W;",
        also: &[],
        package: "verify",
        target: "token",
        filter: "upgrades",
    },
    Row {
        rule: "ReceiveGrant (Fig. 2.5): the granted mode is held",
        rules: &[Rule::GrantReceived],
        file: "kernel/src/token/node.rs",
        from: "        self.parent = Some(from);\n        self.held = entry.mode;\n",
        to: "        self.parent = Some(from);\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "ReceiveToken (Fig. 2.5): the token grants the pending request",
        rules: &[Rule::TokenReceived],
        file: "kernel/src/token/node.rs",
        from: "        if entry.requester == cx.me && self.is_pending(entry) {\n            self.held = entry.mode;\n            self.held_fence = self.fence;",
        to: "        if false {\n            self.held = entry.mode;\n            self.held_fence = self.fence;",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "stale token: a token for a request no longer pending grants nothing",
        rules: &[Rule::StaleToken],
        file: "kernel/src/token/node.rs",
        from: "        if entry.requester == cx.me && self.is_pending(entry) {\n            self.held = entry.mode;\n            self.held_fence = self.fence;",
        to: "        if entry.requester == cx.me {\n            self.held = entry.mode;\n            self.held_fence = self.fence;",
        also: &[],
        package: "verify",
        target: "token",
        filter: "pip_stale",
    },
    Row {
        rule: "stale request: a copy of an own request already served is dropped",
        rules: &[Rule::StaleRequest],
        file: "kernel/src/token/node.rs",
        from: "        if entry.requester == cx.me && !self.is_pending(entry) {",
        to: "        if false && entry.requester == cx.me && !self.is_pending(entry) {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "node_paths::stale_freezes_requests_and_tokens_are_counted",
    },
    Row {
        rule: "stale freeze: a freeze from a node that is not the parent is dropped",
        rules: &[Rule::StaleFreeze],
        file: "kernel/src/token/node.rs",
        from: "        if self.has_token() || self.parent != Some(from) || self.owned() == Mode::Phi {",
        to: "        if self.has_token() {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "node_paths::freezes_apply_only_from_the_parent_to_an_owner",
    },
    Row {
        rule: "PIP (Fig. 3.8) HandleRequest: the token node inherits a conflicting request's priority",
        rules: &[Rule::PipInherit],
        file: "kernel/src/token/node.rs",
        from: "            && conflicts(self.held, entry.mode)\n            && entry.prio > cx.boost\n",
        to: "            && conflicts(self.held, entry.mode)\n            && entry.prio > cx.boost\n            && false\n",
        also: &[],
        package: "verify",
        target: "inversion",
        filter: "p7_pcep_and_pip_bound_the_inversion_by_one_critical_section",
    },
    Row {
        rule: "PIP (Fig. 3.8) HandleFreeze: a frozen holder inherits the freeze's threshold",
        rules: &[Rule::PipInherit],
        file: "kernel/src/token/node.rs",
        from: "            if t > cx.boost {\n                cx.fire(Rule::PipInherit);",
        to: "            if false && t > cx.boost {\n                cx.fire(Rule::PipInherit);",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "node_paths::only_pip_inherits_from_freezes_and_queued_requests",
    },
    Row {
        rule: "PIP (Fig. 3.8) HandleReissuedRequest: a queued request's priority is raised",
        rules: &[Rule::PipRequeue],
        file: "kernel/src/token/node.rs",
        from: "        queued.prio = entry.prio;\n        cx.fire(Rule::PipRequeue);",
        to: "        cx.fire(Rule::PipRequeue);",
        also: &[],
        package: "verify",
        target: "inversion",
        filter: "p7_pcep_and_pip_bound_the_inversion_by_one_critical_section",
    },
    Row {
        rule: "PCEP (Fig. 3.7): a holder runs at the lock's ceiling",
        rules: &[Rule::PcepCeiling],
        file: "kernel/src/token/site.rs",
        from: "                Inheritance::Pcep => e = e.max(ceiling),",
        to: "                Inheritance::Pcep => {}",
        also: &[],
        package: "verify",
        target: "inversion",
        filter: "p7_pcep_and_pip_bound_the_inversion_by_one_critical_section",
    },
    Row {
        rule: "Chapter 3: SetPriority sets the base priority",
        rules: &[Rule::SetPriority],
        file: "kernel/src/token/site.rs",
        from: "            self.prio.base = base;\n            cx.fire(Rule::SetPriority);",
        to: "            cx.fire(Rule::SetPriority);",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pcep_and_pip_raise_and_lower_the_effective_priority",
    },
    Row {
        rule: "class pointers (SPEC 1.6): an idle relay sends a request to a requester that keeps it",
        rules: &[Rule::CompressShortcut],
        file: "kernel/src/token/node.rs",
        from: "                    Some(s) => {\n                        cx.fire(Rule::CompressShortcut);\n                        s.requester\n                    }",
        to: "                    Some(_) => parent,",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "forwarding_and_pcep::class_pointers_keep_one_pointer_per_mode",
    },
    Row {
        rule: "try-lock (SPEC 1.12): a try that would wait is refused, not queued",
        rules: &[Rule::TryRefused],
        file: "kernel/src/token/node.rs",
        from: "        cx.fire(Rule::TryRefused);\n        cx.send(\n            entry.requester,\n            Msg::Busy {",
        to: "        self.enqueue(cx, entry)?;\n        cx.fire(Rule::TryRefused);\n        cx.send(\n            entry.requester,\n            Msg::Busy {",
        also: &[],
        package: "verify",
        target: "token",
        filter: "try_lock_refuses_without_a_trace_and_never_grants_later",
    },
    Row {
        rule: "try-lock (SPEC 1.12): a busy answer withdraws the requester's try",
        rules: &[Rule::TryWouldBlock],
        file: "kernel/src/token/node.rs",
        from: "        self.pending = Pending::None;\n        cx.fire(Rule::TryWouldBlock);",
        to: "        cx.fire(Rule::TryWouldBlock);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "try_lock_refuses_without_a_trace_and_never_grants_later",
    },
    Row {
        rule: "try-lock (SPEC 1.12): a busy answer for a try no longer pending is dropped",
        rules: &[Rule::StaleBusy],
        file: "kernel/src/token/node.rs",
        from: "        if entry.requester != cx.me || !matches!(self.pending, Pending::Try(p) if p == entry) {",
        to: "        if entry.requester != cx.me {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "try_lock::a_pending_try_blocks_other_requests_and_a_stale_busy_is_dropped",
    },
    Row {
        rule: "cancel (SPEC 1.13): the grant of a cancelled request is released at once, not signalled",
        rules: &[Rule::Cancel],
        file: "kernel/src/token/node.rs",
        from: "        cx.fire(Rule::Cancel);\n        self.give_up_held(cx)\n",
        to: "        cx.fire(Rule::Cancel);\n        cx.emit(Output::Granted {\n            lock: cx.lock,\n            mode: self.held,\n        })\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_cancelled_request_is_never_granted_and_leaves_nothing",
    },
    Row {
        rule: "downgrade (SPEC 1.14): a non-token node tells its parent its new owned mode (Rule 5.2)",
        rules: &[Rule::Downgrade],
        file: "kernel/src/token/node.rs",
        from: "            mode,\n        })?;\n        self.release_or_keep(cx, before)?;\n",
        to: "            mode,\n        })?;\n        let _ = before;\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_downgrade_keeps_every_property",
    },
    Row {
        rule: "conversion (SPEC 1.17): the token node converts only to a mode compatible with every other hold",
        rules: &[Rule::Convert],
        file: "kernel/src/token/node.rs",
        from: "                compatible(combine(self.kept, self.children_owned()), mode)\n",
        to: "                true\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_conversion_keeps_every_property",
    },
    Row {
        rule: "conversion (SPEC 1.17, FIFO): the token node does not convert past a waiting request",
        rules: &[Rule::ConvertBusy],
        file: "kernel/src/token/node.rs",
        from: " && (!token || !self.queue_conflicts(mode));",
        to: ";",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_conversion_keeps_every_property",
    },
    Row {
        rule: "conversion (SPEC 1.17): a conversion at the token node takes a new fence",
        rules: &[Rule::Convert],
        file: "kernel/src/token/node.rs",
        from: "        self.held_fence = if self.has_token() {\n            self.next_fence()\n        } else {\n            self.fence\n        };\n        cx.fire(Rule::Convert);",
        to: "        cx.fire(Rule::Convert);",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_conversion_keeps_every_property",
    },
    Row {
        rule: "conversion (SPEC 1.17): a non-token node converts only within its owned mode (Table 2.2)",
        rules: &[Rule::Convert],
        file: "kernel/src/token/node.rs",
        from: "                grantable(self.owned(), mode)\n",
        to: "                true\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_conversion_keeps_every_property",
    },
    Row {
        rule: "conversion (SPEC 1.17): only the token node's conversion waits",
        rules: &[Rule::ConvertWaits],
        file: "kernel/src/token/node.rs",
        from: "            if wait && token && unfrozen {",
        to: "            if wait && unfrozen {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "convert::a_conversion_waits_neither_past_a_waiting_request_nor_at_a_copy_holder",
    },
    Row {
        rule: "conversion (SPEC 1.17): the token stays while a conversion waits for it",
        rules: &[Rule::ConvertWaits],
        file: "kernel/src/token/node.rs",
        from: "        matches!(self.pending, Pending::Convert(_))\n",
        to: "        false\n",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "convert::a_waiting_conversion_keeps_the_token_from_a_higher_priority_request",
    },
    Row {
        rule: "conversion (SPEC 1.17, Rule 6): a non-token node does not convert to a frozen mode",
        rules: &[Rule::Convert],
        file: "kernel/src/token/node.rs",
        from: "        let unfrozen = !self.frozen.blocks(mode, prio) && ",
        to: "        let unfrozen = ",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "convert::a_copy_holder_is_refused_a_conversion_to_a_frozen_mode",
    },
    Row {
        rule: "keeping (SPEC 1.7, FIFO): a keeper gives a conflicting kept mode back before it passes a request on",
        rules: &[],
        file: "kernel/src/token/keep.rs",
        from: "        if conflicting.contains(self.kept) {\n            self.give_back(cx)?;\n        }\n",
        to: "",
        also: &[],
        package: "verify",
        target: "keep_intention",
        filter: "kept_intention_modes_keep_every_property",
    },
    Row {
        rule: "keeping (SPEC 1.7, FIFO): a node that passed a conflicting request on does not keep the modes it conflicts with",
        rules: &[],
        file: "kernel/src/token/keep.rs",
        from: "            self.passed = self.passed.union(conflicting);\n",
        to: "            let _ = conflicting;\n",
        also: &[],
        package: "verify",
        target: "keep_intention",
        filter: "kept_intention_modes_keep_every_property",
    },
    Row {
        rule: "value block (SPEC 1.15): every copy grant carries its granter's value block",
        rules: &[Rule::SetValue],
        file: "kernel/src/token/node.rs",
        from: "                // `spec/SPEC.md` 1.15: every copy carries the granter's value block.\n                value: self.value,\n",
        to: "                value: ValueBlock::INITIAL,\n",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_value_block_reads_the_last_value_written",
    },
    Row {
        rule: "blocking notification (SPEC 1.16): a hold is told each waiting mode once",
        rules: &[Rule::Blocking],
        file: "kernel/src/token/node.rs",
        from: "        self.told.insert(mode);\n",
        to: "",
        also: &[],
        package: "verify",
        target: "token",
        filter: "a_blocking_notification_names_a_waiter_once_per_hold",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IR conflicts with W",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::IR, Mode::W) | (Mode::W, Mode::IR)) || !conflicts(a, b)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 1 / Table 2.1: R conflicts with IW",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::R, Mode::IW) | (Mode::IW, Mode::R)) || !conflicts(a, b)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 1 / Table 2.1: U conflicts with U",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::U, Mode::U) | (Mode::U, Mode::U)) || !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pip_the_holder_inherits_from_every_conflicting_mode_of_table_2_1",
    },
    Row {
        rule: "Rule 1 / Table 2.1: U conflicts with IW",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::U, Mode::IW) | (Mode::IW, Mode::U)) || !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pip_the_holder_inherits_from_every_conflicting_mode_of_table_2_1",
    },
    Row {
        rule: "Rule 1 / Table 2.1: U conflicts with W",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::U, Mode::W) | (Mode::W, Mode::U)) || !conflicts(a, b)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IW conflicts with W",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::IW, Mode::W) | (Mode::W, Mode::IW)) || !conflicts(a, b)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 1 / Table 2.1: W conflicts with W",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::W, Mode::W) | (Mode::W, Mode::W)) || !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pip_the_holder_inherits_from_every_conflicting_mode_of_table_2_1",
    },
    Row {
        rule: "Rule 5.1: a release at the token node serves its queue",
        rules: &[Rule::Rule5Release],
        file: "kernel/src/token/node.rs",
        from: "        self.give_up_held(cx)?;\n        self.check_queue(cx)?;\n        self.finish_freeze(cx, f0)\n    }",
        to: "        self.give_up_held(cx)?;\n        self.finish_freeze(cx, f0)\n    }",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 7: a waiting upgrade goes before the queued requests (check_queue_at_token)",
        rules: &[Rule::Rule7UpgradeWaits],
        file: "kernel/src/token/node.rs",
        from: "            if !compatible(mo, head.mode) || upgrade_freeze.blocks(head.mode, head.prio) {",
        to: "            if !compatible(mo, head.mode) {",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_7_a_waiting_upgrade_goes_before_a_new_reader",
    },
    Row {
        rule: "Rule 7 / Table 2.4 column W: a waiting upgrade freezes what W conflicts with",
        rules: &[Rule::Rule7UpgradeWaits],
        file: "kernel/src/token/node.rs",
        from: "        if let Some(to) = self.converting() {\n            f.freeze(frozen_by(mo, to), upgrade_prio);",
        to: "        if let Some(to) = None::<Mode> {\n            f.freeze(frozen_by(mo, to), upgrade_prio);",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_7_a_waiting_upgrade_goes_before_a_new_reader",
    },
    Row {
        rule: "Rule 8.1: FIFO within a priority: a request goes behind every entry of its own priority",
        rules: &[Rule::Rule8_1Order],
        file: "kernel/src/token/node.rs",
        from: "            .position(|x| x.prio < entry.prio)",
        to: "            .position(|x| x.prio <= entry.prio)",
        also: &[],
        package: "verify",
        target: "token",
        filter: "fifo_bypass_bound_with_and_without_freezing",
    },
    Row {
        rule: "Rule 8.1 / 8.2: a re-sorted queue keeps the arrival order within a priority (sort_by_priority)",
        rules: &[Rule::Rule8_2Merge],
        file: "kernel/src/token/node.rs",
        from: "            if a.prio >= b.prio {\n                break;",
        to: "            if a.prio > b.prio {\n                break;",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::rule_8_2_merged_queue_keeps_arrival_order_within_a_priority",
    },
    Row {
        rule: "Table 3.2 CQ: a node keeps a request only if its pending priority is at least the request's",
        rules: &[Rule::Rule4_1Queue],
        file: "kernel/src/token/tables.rs",
        from: "                if pending_prio >= prio {",
        to: "                if true {",
        also: &[],
        package: "verify",
        target: "prio_rules",
        filter: "table_3_2_higher_priority_requests_are_not_kept_behind_lower_ones",
    },
    Row {
        rule: "PCEP (Fig. 3.7): a released lock's ceiling no longer counts",
        rules: &[Rule::PcepCeiling],
        file: "kernel/src/token/site.rs",
        from: "            if node.held() == Mode::Phi {\n                continue;\n            }",
        to: "",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pcep_and_pip_raise_and_lower_the_effective_priority",
    },
    Row {
        rule: "PIP (Fig. 3.8): the priority inherited through a lock is given up with the lock",
        rules: &[Rule::PipInherit],
        file: "kernel/src/token/site.rs",
        from: "        if node.held() == Mode::Phi {\n            *inherited = 0;\n        } else if",
        to: "        if node.held() == Mode::Phi {\n        } else if",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::pip_inherited_priority_is_given_up_with_the_lock",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IR is compatible with IR",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::IR, Mode::IR) | (Mode::IR, Mode::IR)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IR is compatible with R",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::IR, Mode::R) | (Mode::R, Mode::IR)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IR is compatible with U",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::IR, Mode::U) | (Mode::U, Mode::IR)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IR is compatible with IW",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::IR, Mode::IW) | (Mode::IW, Mode::IR)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: R is compatible with R",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::R, Mode::R) | (Mode::R, Mode::R)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: R is compatible with U",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::R, Mode::U) | (Mode::U, Mode::R)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Rule 1 / Table 2.1: IW is compatible with IW",
        rules: &[],
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !matches!((a, b), (Mode::IW, Mode::IW) | (Mode::IW, Mode::IW)) && !conflicts(a, b)",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "rules::rule_1_compatible_modes_are_held_at_once",
    },
    Row {
        rule: "Table 2.2 cell (IR, R): a non-token node owning only IR may not grant R (Rule 3.1)",
        rules: &[Rule::Rule3_1CopyGrant],
        file: "kernel/src/token/tables.rs",
        from: "        [O, X, X, X, X], // IR\n        [O, O, X, X, X], // R",
        to: "        [O, O, X, X, X], // IR\n        [O, O, X, X, X], // R",
        also: &[],
        package: "verify",
        target: "token",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "two requeue paths back each other up: the own request requeued on a stale token (on_token) and the token node's own-request branch of HandleRequest",
        rules: &[Rule::OwnRequestRequeued],
        file: "kernel/src/token/node.rs",
        from: "            if !merged.iter().any(|e| e.requester == cx.me) {",
        to: "            if false {",
        also: &[(
            "                // reissue, or a reordering network): it waits in the queue like any other.\n                self.enqueue(cx, entry)?;\n                self.check_queue(cx)?;",
            "                // reissue, or a reordering network): it waits in the queue like any other.",
        )],
        package: "verify",
        target: "token",
        filter: "pip_stale_reissued_request_is_not_lost",
    },
    Row {
        rule: "Rule 8.2 / 8.1: the merged queue is put in priority order",
        rules: &[Rule::Rule8_2Merge],
        file: "kernel/src/token/node.rs",
        from: "        // Rule 8.2: the merged queue in Rule 8.1's order (stable: FIFO within a priority).\n        sort_by_priority(&mut merged);",
        to: "        // Rule 8.2: the merged queue in Rule 8.1's order (stable: FIFO within a priority).",
        also: &[],
        package: "hilock-kernel",
        target: "kernel",
        filter: "prio::rule_8_2_merged_queue_is_in_priority_order",
    },
    Row {
        rule: "ring incarnations: a lock of a key another incarnation of the id holds is not a re-grant (InUse)",
        rules: &[],
        file: "kernel/src/ring/replicated.rs",
        from: "            (Op::Lock | Op::TakeOver, h) if h == me => (me, Answer::Granted, true),",
        to: "            (Op::Lock | Op::TakeOver, h) if h.map(|h| h.client) == Some(token.client) => (me, Answer::Granted, true),",
        also: &[],
        package: "verify",
        target: "ring",
        filter: "two_processes_with_one_client_id_keep_one_holder",
    },
    Row {
        rule: "ring full replicas: a lock a full replica refuses is given back (the key written free, answered Full)",
        rules: &[],
        file: "kernel/src/ring/replicated.rs",
        from: "                        if self.pending[i].need == 0 {\n                            self.give_back(i, out, &mut rep);\n                        }",
        to: "",
        also: &[],
        package: "verify",
        target: "ring",
        filter: "a_lock_refused_by_a_full_replica_is_given_back_and_answered_full",
    },
    Row {
        rule: "lossless channel: the envelopes not acknowledged are resent after a reconnect, not dropped with the numbering resumed",
        rules: &[],
        file: "runtime/src/token/net.rs",
        from: "            out.unacked.iter().cloned().collect()\n",
        to: "            let lost = out.unacked.drain(..).count() as u64;\n            out.next_seq -= lost;\n            Vec::new()\n",
        also: &[],
        package: "hilock-runtime",
        target: "sim",
        filter: "a_thousand_seeds_pass_the_history_checker_and_trace_validation",
    },
    Row {
        rule: "node lease: the local lease ends the grace before etcd can expire the lease",
        rules: &[],
        file: "runtime/src/leases.rs",
        from: "local_lease(ms(ttl), ms(grace), rho_ppm)",
        to: "local_lease(ms(ttl), 0, rho_ppm)",
        also: &[],
        package: "hilock-runtime",
        target: "sim",
        filter: "a_thousand_leased_seeds_pass_and_exercise_the_lease_path",
    },
    Row {
        rule: "node lease: a node whose lease is lost, or whose local lease has ended, grants nothing",
        rules: &[],
        file: "runtime/src/token/lease.rs",
        from: "NodeLease::Valid { until, lease, .. } if now >= *until => Err(format!(",
        to: "NodeLease::Valid { until, lease, .. } if false && now >= *until => Err(format!(",
        also: &[(
            "                LeaseState::Lost(why) => {\n                    let reason",
            "                LeaseState::Lost(_) if true => return,\n                LeaseState::Lost(why) => {\n                    let reason",
        )],
        package: "hilock-runtime",
        target: "sim",
        filter: "a_thousand_leased_seeds_pass_and_exercise_the_lease_path",
    },
    Row {
        rule: "lossless channel: a connection that acknowledges nothing for REDIAL_AFTER is given up and redialed, not waited on",
        rules: &[],
        file: "runtime/src/token/net.rs",
        from: "                        if waited > REDIAL_AFTER {",
        to: "                        if false && waited > REDIAL_AFTER {",
        also: &[],
        package: "hilock-runtime",
        target: "sim",
        filter: "a_thousand_seeds_pass_the_history_checker_and_trace_validation",
    },
];

/// The features a row's test target needs (`required-features`), by package and target.
const TARGET_FEATURES: &[(&str, &str, &str)] = &[("hilock-runtime", "sim", "sim")];

fn features(row: &Row) -> Vec<&'static str> {
    TARGET_FEATURES
        .iter()
        .filter(|(p, t, _)| *p == row.package && *t == row.target)
        .flat_map(|&(_, _, f)| ["--features", f])
        .collect()
}

/// Rows whose deletion no check turns red with pins off, each with what is known about
/// why. They stay in the table (their rule is real) and are reported apart: the ignored
/// run fails if one of them turns red (then it belongs with the others) or if any other
/// row stays green.
const KNOWN_GREEN: &[(&str, &str)] = &[];

fn known_green(row: &Row) -> Option<&'static str> {
    KNOWN_GREEN
        .iter()
        .find(|(rule, _)| row.rule.starts_with(rule))
        .map(|(_, why)| *why)
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

/// Copies the tracked files of the workspace (as they are in the working tree) to `dst`.
fn copy_workspace(src: &Path, dst: &Path) {
    let _ = std::fs::remove_dir_all(dst);
    let out = Command::new("git")
        .arg("-C")
        .arg(src)
        .args(["ls-files", "-z"])
        .output()
        .expect("git ls-files");
    assert!(out.status.success(), "git ls-files failed");
    for f in out.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let rel = Path::new(std::str::from_utf8(f).expect("utf-8 path"));
        let (from, to) = (src.join(rel), dst.join(rel));
        if !from.exists() {
            continue; // deleted in the working tree
        }
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&from, &to).expect("copy");
    }
}

/// Runs the row's check in `tree`; true if it passed.
fn check_passes(tree: &Path, row: &Row, target_dir: &Path) -> bool {
    let status = Command::new("timeout")
        .arg("900")
        .arg(env!("CARGO"))
        .current_dir(tree)
        .env("CARGO_TARGET_DIR", target_dir)
        // A row is red only by a property, a scenario or a behavioural test, never by a
        // changed pinned state count alone.
        .env("HILOCK_PINS", "off")
        .args(["test", "--release", "-q", "-p", row.package])
        .args(features(row))
        .arg("--test")
        .arg(row.target)
        .args(["--", row.filter])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("cargo test");
    status.success()
}

#[test]
#[ignore]
fn every_deleted_rule_turns_its_check_red() {
    let root = root();
    let target_dir = root.join("target/rule-deletions");
    // `HILOCK_RULE=text` runs only the rows whose rule contains `text` (`a|b`: either).
    let only = std::env::var("HILOCK_RULE").unwrap_or_default();
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|r| only.split('|').any(|o| r.rule.contains(o)))
        .collect();
    let tree = std::env::temp_dir().join(format!("hilock-rule-deletions-{}", std::process::id()));
    copy_workspace(&root, &tree);
    for row in &rows {
        assert!(
            check_passes(&tree, row, &target_dir),
            "unmutated: {} -- {} fails already",
            row.target,
            row.filter
        );
    }
    let (mut green, mut now_red) = (Vec::new(), Vec::new());
    for row in &rows {
        copy_workspace(&root, &tree);
        let path = tree.join(row.file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text.matches(row.from).count(),
            1,
            "row '{}': the text to delete is not found exactly once in {} (the row is stale)",
            row.rule,
            row.file
        );
        let mut text = text.replacen(row.from, row.to, 1);
        for (from, to) in row.also {
            assert_eq!(
                text.matches(from).count(),
                1,
                "row '{}': a further text is not found exactly once",
                row.rule
            );
            text = text.replacen(from, to, 1);
        }
        std::fs::write(&path, text).expect("write");
        let passed = check_passes(&tree, row, &target_dir);
        println!(
            "{:<6} {:<78} {} --test {} {}",
            if passed { "GREEN" } else { "red" },
            row.rule,
            row.package,
            row.target,
            row.filter
        );
        match (passed, known_green(row)) {
            (true, Some(why)) => println!("       known green: {why}"),
            (true, None) => green.push(row.rule),
            (false, Some(_)) => now_red.push(row.rule),
            (false, None) => {}
        }
    }
    let _ = std::fs::remove_dir_all(&tree);
    assert!(
        green.is_empty() && now_red.is_empty(),
        "deleting these rules left their checks green: {green:?}; \
         these known-green rows are red now (move them out of KNOWN_GREEN): {now_red:?}"
    );
}

/// The table is well formed: every row's text is in the kernel exactly once, and its
/// check names a test target that exists and a filter that its file contains (so the
/// executable table cannot silently go stale), in the default test run.
#[test]
fn every_row_names_text_that_exists_once() {
    let root = root();
    for row in ROWS {
        let text = std::fs::read_to_string(root.join(row.file)).expect("read");
        for from in std::iter::once(row.from).chain(row.also.iter().map(|a| a.0)) {
            assert_eq!(
                text.matches(from).count(),
                1,
                "row '{}': not found exactly once in {}",
                row.rule,
                row.file
            );
        }
        let dir = match row.package {
            "hilock-kernel" => "kernel",
            "hilock-spec" => "spec",
            "hilock-harness" => "harness",
            "hilock-runtime" => "runtime",
            other => other,
        };
        let tests_dir = root.join(dir).join("tests");
        let target = tests_dir.join(format!("{}.rs", row.target));
        let root_text = std::fs::read_to_string(&target)
            .unwrap_or_else(|e| panic!("row '{}': {}: {e}", row.rule, target.display()));
        // `MODULE::TEST`: a module of the target (the kernel's one test binary, whose
        // modules are the files beside it).
        let (file, name) = match row.filter.split_once("::") {
            Some((module, name)) => {
                assert!(
                    root_text.lines().any(|l| l == format!("mod {module};")),
                    "row '{}': {} has no module {module}",
                    row.rule,
                    target.display()
                );
                (tests_dir.join(format!("{module}.rs")), name)
            }
            None => (target, row.filter),
        };
        let tests = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("row '{}': {}: {e}", row.rule, file.display()));
        assert!(
            tests.contains(&format!("fn {name}")),
            "row '{}': no test named {name}* in {}",
            row.rule,
            file.display()
        );
    }
}

/// Every known-green entry names a row of the table.
#[test]
fn every_known_green_entry_names_a_row() {
    for (rule, _) in KNOWN_GREEN {
        assert!(
            ROWS.iter().any(|row| row.rule.starts_with(rule)),
            "KNOWN_GREEN names no row: {rule}"
        );
    }
}

/// Every rule the token engine reports (`hilock_kernel::Rule`, the labels of the
/// thesis's Rules 2–8, Fig. 2.5, chapter 3 and hilock's decisions) has a row that deletes
/// its effect: a rule added to the kernel without a row fails here.
#[test]
fn every_rule_the_token_engine_reports_has_a_row() {
    let missing: Vec<&str> = Rule::ALL
        .iter()
        .filter(|r| !ROWS.iter().any(|row| row.rules.contains(r)))
        .map(|r| r.label())
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a row in the rule-deletion table: {missing:?}"
    );
}

/// `spec/SPEC.md` lists every sub-rule of the thesis with its deletion rows: every row of
/// the table is named there (in double quotes, under "Every sub-rule and its deletion
/// row"), and every name there is a row.
#[test]
fn every_row_is_listed_under_its_sub_rule_in_the_spec() {
    let spec = std::fs::read_to_string(root().join("spec/SPEC.md")).expect("spec/SPEC.md");
    let start = spec
        .find("### Every sub-rule and its deletion row")
        .expect("the sub-rule section in spec/SPEC.md");
    let section = &spec[start..];
    let table: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with("| rule |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(!table.is_empty(), "no sub-rule table");
    let mut listed = std::collections::BTreeSet::new();
    for line in &table {
        let cell = line.trim_end_matches('|').rsplit('|').next().unwrap_or("");
        for name in cell.split("<br>") {
            let name = name.trim();
            let name = name
                .strip_prefix('"')
                .and_then(|n| n.strip_suffix('"'))
                .unwrap_or_else(|| panic!("not a quoted row name: {name:?} in {line}"));
            assert!(listed.insert(name), "listed twice: {name}");
        }
    }
    let rows: std::collections::BTreeSet<&str> = ROWS.iter().map(|r| r.rule).collect();
    let missing: Vec<_> = rows.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&rows).collect();
    assert!(missing.is_empty(), "rows not in spec/SPEC.md: {missing:?}");
    assert!(
        unknown.is_empty(),
        "names in spec/SPEC.md that are no row: {unknown:?}"
    );
}
