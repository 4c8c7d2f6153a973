//! The rule-deletion table of `docs/verification.md`, executable: for each row, a copy of
//! the workspace with one rule's effect deleted or weakened in the kernel, and the named
//! check that must turn red on it. A check that stays green on its row's mutation does not
//! check that rule.
//!
//! `cargo test --release -p verify --test rule_deletions -- --ignored --nocapture`
//! (about 1–2 minutes per row on 2 cores after the first build; the copies share one target
//! directory, `target/rule-deletions`, so each row rebuilds only the kernel and what depends
//! on it). The unmutated tree must pass every named check first. `HILOCK_RULE=TEXT` runs
//! only the rows whose rule names contain TEXT (`A|B`: either).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One row: which rule, where its effect is, how it is deleted, and the check that catches it.
struct Row {
    rule: &'static str,
    file: &'static str,
    from: &'static str,
    to: &'static str,
    /// `cargo test --release -p PACKAGE --test TARGET -- FILTER`
    package: &'static str,
    target: &'static str,
    filter: &'static str,
}

const ROWS: &[Row] = &[
    Row {
        rule: "Rule 2: a covered request enters without a message",
        file: "kernel/src/token/node.rs",
        from: "        } else if grantable(mo, mode) && !self.frozen.blocks(mode, entry.prio) {",
        to: "        } else if false && grantable(mo, mode) && !self.frozen.blocks(mode, entry.prio) {",
        package: "hilock-kernel",
        target: "rules",
        filter: "rule_2_non_token_node_enters_under_its_owned_mode",
    },
    Row {
        rule: "Rule 3.1: a non-token node grants a copy (Table 2.2)",
        file: "kernel/src/token/node.rs",
        from: "            if self.may_serve(cx, entry)\n                && grantable(mo, entry.mode)",
        to: "            if false\n                && grantable(mo, entry.mode)",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 3.2: the token node transfers the token to a tokenable request",
        file: "kernel/src/token/node.rs",
        from: "            if tokenable(mo, entry.mode) && (cx.variant.tokenable_transfers || is_child) {",
        to: "            if false && tokenable(mo, entry.mode) {",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 4.1 / Table 2.3: a non-token node keeps a request behind its pending one",
        file: "kernel/src/token/node.rs",
        from: "            entry.prio,\n        ) == QueueOrForward::Queue",
        to: "            entry.prio,\n        ) == QueueOrForward::Queue\n            && false",
        package: "verify",
        target: "base",
        filter: "mixed_workloads_chain_and_star",
    },
    Row {
        rule: "Rule 8.1: a request is queued behind every entry of at least its priority",
        file: "kernel/src/token/node.rs",
        from: "            .position(|x| x.prio < entry.prio)",
        to: "            .position(|x| x.prio < entry.prio && false)",
        package: "hilock-spec",
        target: "scenarios",
        filter: "every_thesis_scenario_passes",
    },
    Row {
        rule: "Rule 6: send newly frozen modes to the children (finish_freeze)",
        file: "kernel/src/token/node.rs",
        from: "let m = delta.restrict(grantable_set(rec));\n            if !m.is_empty() {",
        to: "let m = delta.restrict(grantable_set(rec));\n            if false && !m.is_empty() {",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 6 / invariant 2.3: freeze the children when the token arrives (on_token)",
        file: "kernel/src/token/node.rs",
        from: "let m = frozen.beyond(known).restrict(grantable_set(rec));\n            if !m.is_empty() {",
        to: "let m = frozen.beyond(known).restrict(grantable_set(rec));\n            if false && !m.is_empty() {",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 5.2: propagate a weakening (R -> IR), not only a release to Φ",
        file: "kernel/src/token/node.rs",
        from: "        if now != before {",
        to: "        if now != before && now == Mode::Phi {",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "own request requeued on a stale token: the requester's current request is queued (on_token)",
        file: "kernel/src/token/node.rs",
        from: "            if !merged.iter().any(|e| e.requester == cx.me) {",
        to: "            if false {",
        package: "verify",
        target: "base",
        filter: "pip_stale_reissued_request_is_not_lost",
    },
    Row {
        rule: "no grant to the parent: a non-token node never serves a request of its parent (may_serve)",
        file: "kernel/src/token/node.rs",
        from: "        entry.requester != cx.me && Some(entry.requester) != self.parent",
        to: "        entry.requester != cx.me",
        package: "verify",
        target: "base",
        filter: "pip_stale_copy_served_by_token_transfer_closes_no_cycle",
    },
    Row {
        rule: "Rule 6 / invariant 2.3: a release that raises a record sends the newly grantable frozen modes",
        file: "kernel/src/token/node.rs",
        from: "        if !newly.is_empty() {\n            cx.fire(Rule::Rule6FreezeSent);",
        to: "        if false && !newly.is_empty() {\n            cx.fire(Rule::Rule6FreezeSent);",
        package: "hilock-spec",
        target: "robustness",
        filter: "regression_pip_raised_record_gets_the_frozen_modes",
    },
    Row {
        rule: "Rule 4.2: the token node queues a request that conflicts with its owned mode",
        file: "kernel/src/token/node.rs",
        from: "            self.enqueue(cx, entry)?;\n            self.inherit_at_token(cx, entry);",
        to: "            self.inherit_at_token(cx, entry);",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "Rule 7: a waiting upgrade completes when the children own nothing",
        file: "kernel/src/token/node.rs",
        from: "            if self.pending == Pending::Upgrade && self.children_owned() == Mode::Phi {",
        to: "            if false && self.pending == Pending::Upgrade && self.children_owned() == Mode::Phi {",
        package: "verify",
        target: "base",
        filter: "upgrades",
    },
    Row {
        rule: "Rule 8.2: the token's queue is merged with the receiver's own queue",
        file: "kernel/src/token/node.rs",
        from: "        for e in queue.iter().chain(self.queue.iter()) {",
        to: "        for e in queue.iter() {",
        package: "verify",
        target: "base",
        filter: "mixed_workloads_chain_and_star",
    },
    Row {
        rule: "hop numbers: a re-delivered request is rejected (exactly-once requests)",
        file: "kernel/src/token/node.rs",
        from: "        if hop == 0 || back == 0 || back > 32 || link.requests_window & (1 << (back - 1)) != 0 {",
        to: "        if hop == 0 || back > 32 {",
        package: "hilock-kernel",
        target: "rules",
        filter: "a_redelivered_request_is_rejected_and_changes_nothing",
    },
    Row {
        rule: "resync release: a grant whose record differs from the owned mode is corrected",
        file: "kernel/src/token/node.rs",
        from: "        if cx.variant.release_epochs && now != recorded {",
        to: "        if false && cx.variant.release_epochs && now != recorded {",
        package: "hilock-spec",
        target: "robustness",
        filter: "regression_pip_raised_record_gets_the_frozen_modes",
    },
    Row {
        rule: "leave old parent: a grant (or the token) from a new parent releases the old parent's record",
        file: "kernel/src/token/node.rs",
        from: "            if old != from && before != Mode::Phi {\n                cx.fire(Rule::LeaveOldParent);",
        to: "            if false && old != from && before != Mode::Phi {\n                cx.fire(Rule::LeaveOldParent);",
        package: "verify",
        target: "base",
        filter: "a_grant_from_a_new_parent_releases_the_old_parents_record",
    },
    Row {
        rule: "stale grant: a grant for a request no longer pending is answered with a release",
        file: "kernel/src/token/node.rs",
        from: "            return cx.send(\n                from,",
        to: "            let _ = owned;\n            return Ok(());\n            #[allow(unreachable_code)]\n            cx.send(\n                from,",
        package: "verify",
        target: "base",
        filter: "pip_stale",
    },
    Row {
        rule: "Rule 1 / Table 2.1: R conflicts with W",
        file: "kernel/src/mode.rs",
        from: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    !conflicts(a, b)",
        to: "pub const fn compatible(a: Mode, b: Mode) -> bool {\n    matches!((a, b), (Mode::R, Mode::W) | (Mode::W, Mode::R)) || !conflicts(a, b)",
        package: "verify",
        target: "base",
        filter: "every_pair_of_modes_requested_concurrently",
    },
    Row {
        rule: "release epochs (Decision 5): a release is applied only on the current link",
        file: "kernel/src/token/node.rs",
        from: "let current = !cx.variant.release_epochs || link.parent_epoch == epoch;",
        to: "let current = true;",
        package: "verify",
        target: "base",
        filter: "gap_literal_release_handling_violates_p1_and_p3",
    },
    Row {
        rule: "Rule 6_PRIO: a request passes a freeze only above its threshold",
        file: "kernel/src/token/prio.rs",
        from: "self.threshold(m).is_some_and(|t| prio <= t)",
        to: "self.threshold(m).is_some()",
        package: "hilock-kernel",
        target: "prio",
        filter: "rule_6_prio_higher_priority_bypasses_the_freeze",
    },
    Row {
        rule: "PIP (Fig. 3.8): pending requests are reissued when ξ rises",
        file: "kernel/src/token/node.rs",
        from: "        if e.prio >= prio {\n            return Ok(());\n        }\n        e.prio = prio;",
        to: "        if e.prio >= prio || prio > 0 {\n            return Ok(());\n        }\n        e.prio = prio;",
        package: "verify",
        target: "inversion",
        filter: "p7_pcep_and_pip_bound_the_inversion_by_one_critical_section",
    },
    Row {
        rule: "Table 2.2 cell (R, IR): a non-token node owning R grants an IR copy (Rule 3.1)",
        file: "kernel/src/token/tables.rs",
        from: "        [O, O, X, X, X], // R\n",
        to: "        [X, O, X, X, X], // R\n",
        package: "hilock-kernel",
        target: "rules",
        filter: "rule_3_1_child_grants_copy",
    },
    Row {
        rule: "Table 2.4 cell (IW, U): a U queued at a token node owning IW freezes IW (Rule 6)",
        file: "kernel/src/token/tables.rs",
        from: "            ModeSet::of(&[IW]),\n            ModeSet::of(&[IW]),\n            E,\n            ModeSet::of(&[IR, IW]),\n        ], // IW",
        to: "            ModeSet::of(&[IW]),\n            E,\n            E,\n            ModeSet::of(&[IR, IW]),\n        ], // IW",
        package: "hilock-kernel",
        target: "keep_intention",
        filter: "u_request_recalls_a_kept_iw",
    },
    Row {
        rule: "Tree demotion (slides 15-16): SetOwner(a, n.owner, n.originalRequest) moves the owner down",
        file: "kernel/src/tree/ops.rs",
        from: "        tree.set_owner(a, owner, r)?;\n        tree.set_grey(c, 2)?;",
        to: "        let _ = (a, owner, r);\n        tree.set_grey(c, 2)?;",
        package: "verify",
        target: "tree",
        filter: "tree_p8_hilock_three_users_height_3",
    },
    Row {
        rule: "Tree promotion (slide 20, PathSibling): the owner left below a count of one is promoted",
        file: "kernel/src/tree/ops.rs",
        from: "            self.side = Some(c);\n            self.promote(tree, k, o, r, p)?;",
        to: "            self.side = Some(c);\n            let _ = (k, o, r);",
        package: "verify",
        target: "tree",
        filter: "tree_p8_hilock_three_users_height_3",
    },
];

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
        .args(["test", "--release", "-q", "-p", row.package, "--test"])
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
    let mut green = Vec::new();
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
        std::fs::write(&path, text.replacen(row.from, row.to, 1)).expect("write");
        let passed = check_passes(&tree, row, &target_dir);
        println!(
            "{:<6} {:<78} {} --test {} {}",
            if passed { "GREEN" } else { "red" },
            row.rule,
            row.package,
            row.target,
            row.filter
        );
        if passed {
            green.push(row.rule);
        }
    }
    let _ = std::fs::remove_dir_all(&tree);
    assert!(
        green.is_empty(),
        "deleting these rules left their checks green: {green:?}"
    );
}

/// The table is well formed: every row's text is in the kernel exactly once (so the
/// executable table cannot silently go stale), in the default test run.
#[test]
fn every_row_names_text_that_exists_once() {
    let root = root();
    for row in ROWS {
        let text = std::fs::read_to_string(root.join(row.file)).expect("read");
        assert_eq!(
            text.matches(row.from).count(),
            1,
            "row '{}': not found exactly once in {}",
            row.rule,
            row.file
        );
    }
}
