//! The token protocol with crashes, restarts, partitions/pauses, lease expiry and epoch
//! installation (`hilock_models::faults`, driving `hilock_kernel::token::recovery`; the design is
//! `docs/faults.md`, "The recovery mechanism (kernel and model)").
//!
//! hilock's recovery keeps every property with pinned state counts, with the atomic install
//! and with the runtime's staged install (`FaultConfig::staged_install`); each
//! safeguard removed gives its named counterexample, written to `spec/counterexamples/faults/*.json` (a directory of
//! their own: each trace embeds its configuration, with none in
//! `spec/counterexamples/configs/`; `verify/tests/explorer.rs` opens each through it). Larger
//! configurations are `#[ignore]`d with their time noted
//! (`cargo test --release -p verify --test faults -- --ignored --nocapture`).

/// The model checker clones a state per successor: mimalloc's allocation is cheaper than
/// glibc's for that pattern (`docs/benchmarks.md`, "Model checking throughput").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use hilock_kernel::token::recovery::RecoveryVariant;
use hilock_kernel::Forwarding;
use hilock_models::faults::{
    FaultConfig, FaultModel, FaultReport, AFTER_INSTALL, KILLED, NO_ERROR, NO_LOST, ONE_TOKEN, P1,
    REGENERATED, REJOINED, SAFETY,
};
use std::path::PathBuf;

const H: RecoveryVariant = RecoveryVariant::HILOCK;

/// Unique states of the passing configurations.
const PINNED: &[(&str, usize)] = &[
    ("W W R, 1 crash", 3810),
    ("W W R, 1 crash, 1 restart", 34637),
    ("W W R, 1 partition or pause, 1 restart", 36238),
    ("W W R, 1 crash, 1 duplicated install", 3810),
    ("U+upgrade R IW, 1 crash, 1 restart", 105835),
    ("W W R, every fault once", 986643),
    ("4 nodes W R R IW, 1 crash", 160_124),
    ("4 nodes W W R IW, 1 crash, 1 restart", 1_648_914),
    ("4 nodes W R R IW, 1 crash, thesis", 161_758),
    ("4 nodes W R R IW, 1 crash, compress", 160_124),
    ("W W R, 1 crash, staged install", 7837),
    ("W W R, 1 crash, 1 restart, staged install", 98065),
    (
        "W W R, 1 partition or pause, 1 restart, staged install",
        103_459,
    ),
    (
        "U+upgrade R IW, 1 crash, 1 restart, staged install",
        276_634,
    ),
    ("4 nodes W R R IW, 1 crash, staged install", 423_253),
    ("W W R, every fault once, staged install", 3_289_981),
];

fn wwr(name: &str) -> FaultConfig {
    FaultConfig::new(
        name,
        &[
            &["acquire W", "release"],
            &["acquire W", "release"],
            &["acquire R", "release"],
        ],
    )
}

/// Checks `c` exhaustively: every safety property holds, the `sometimes` properties in
/// `reached` are reached (the pass is not vacuous), and the state count is pinned.
fn pass(c: FaultConfig, reached: &[&str]) -> FaultReport {
    let r = c.into_model().check();
    println!("{}", r.summary());
    for p in SAFETY {
        assert!(
            r.holds(p),
            "{}: {p} violated: {}",
            r.config,
            r.property(p)
                .and_then(|p| p.counterexample.as_ref())
                .map_or(String::new(), |t| t.violation.clone())
        );
    }
    for p in reached {
        assert!(r.holds(p), "{}: {p} not reached", r.config);
    }
    let pinned = PINNED
        .iter()
        .find(|(n, _)| *n == r.config)
        .unwrap_or_else(|| panic!("{}: no pinned state count", r.config));
    verify::assert_pinned!(
        r.unique_states,
        pinned.1,
        "{}: the reachable state space changed",
        r.config
    );
    r
}

/// Refutes `property` on `c` (BFS until its first discovery, one thread) and writes the
/// counterexample, with `note`, to `spec/counterexamples/faults/<file>.json`. Returns the
/// violation.
fn refuted(c: FaultConfig, property: &'static str, file: &str, note: &str) -> String {
    let m: FaultModel = c.into_model();
    let r = m.refute(property);
    let p = r.property(property).expect("a known property");
    assert!(!p.holds, "{}: {property} was not refuted", r.config);
    let mut trace = p.counterexample.clone().expect("a counterexample");
    trace.note = note.to_string();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/counterexamples/faults")
        .join(format!("{file}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&trace).unwrap() + "\n").unwrap();
    println!(
        "{file}: {property} after {} steps ({} states searched): {}",
        trace.steps.len() - 1,
        r.unique_states,
        trace.violation
    );
    trace.violation
}

// ------------------------------------------------------------ the model's own checks

/// A script step the kernel refuses (a second `acquire W` while holding W) violates `no
/// kernel error`, as it does in the base model, instead of being a transition the model
/// silently leaves out (it was: such a configuration passed every property).
#[test]
fn a_script_step_the_kernel_refuses_violates_no_kernel_error() {
    let c = FaultConfig::new(
        "W twice",
        &[&["acquire W", "acquire W"], &["acquire R", "release"]],
    );
    let r = c.into_model().check();
    let p = r.property(NO_ERROR).expect("a known property");
    assert!(!p.holds, "{}", r.summary());
    let t = p.counterexample.as_ref().expect("a counterexample");
    assert!(t.violation.contains("already held"), "{}", t.violation);
}

// ------------------------------------------------------------------ hilock: passes

/// The token node, a forwarder or a waiting node crashes: the survivors' requests are
/// all granted after the install (the token regenerated where it was lost).
#[test]
fn crash_of_any_node_is_recovered() {
    pass(
        wwr("W W R, 1 crash").with_faults(1, 0, 0, 0),
        &[REGENERATED, AFTER_INSTALL],
    );
}

/// Crash-recover: the new incarnation is let in by the next epoch and runs its script
/// again.
#[test]
fn crashed_node_restarts_and_is_granted() {
    pass(
        wwr("W W R, 1 crash, 1 restart").with_faults(1, 0, 1, 0),
        &[REGENERATED, AFTER_INSTALL, REJOINED],
    );
}

/// A node cut off from the service (partition or pause) keeps running until its own lease
/// expires and kills its hold; only then is it removed and its token regenerated.
#[test]
fn partitioned_or_paused_holder_is_killed_before_regrant() {
    pass(
        wwr("W W R, 1 partition or pause, 1 restart").with_faults(0, 1, 1, 0),
        &[REGENERATED, KILLED, AFTER_INSTALL, REJOINED],
    );
}

/// A plan delivered twice is refused by the kernel (nothing changes): the same states as
/// without the duplicate.
#[test]
fn duplicated_install_is_refused() {
    pass(
        wwr("W W R, 1 crash, 1 duplicated install").with_faults(1, 0, 0, 1),
        &[REGENERATED],
    );
}

// ------------------------------------------------------------------ safeguards removed

/// Without the epoch check, a request the crashed n1 sent before the install reaches the
/// new token node, which sends the token to the dead node: the token of the new epoch is
/// lost and a live member waits for ever.
#[test]
fn no_epoch_check_loses_the_token() {
    refuted(
        wwr("W W R, 1 crash, no epoch check")
            .with_faults(1, 0, 0, 0)
            .with_variant(RecoveryVariant {
                epoch_check: false,
                ..H
            }),
        NO_LOST,
        "no-epoch-check",
        "epoch_check off: a message sent before the install is applied after it. Here a \
         dead node's old request makes the new epoch's token node send its token to the \
         dead node, and a live member's request is never granted.",
    );
}

/// Without kill-before-regrant, the service removes a node it cannot hear while that node
/// still holds W on its own (valid) lease; the regenerated token grants W again.
#[test]
fn no_kill_before_regrant_breaks_mutual_exclusion() {
    let v = refuted(
        wwr("W W R, 1 partition or pause, no kill before regrant")
            .with_faults(0, 1, 0, 0)
            .with_variant(RecoveryVariant {
                kill_before_regrant: false,
                ..H
            }),
        P1,
        "no-kill-before-regrant",
        "kill_before_regrant off: a holder cut off from the service is removed before its \
         own lease has expired and killed its hold; the token is regenerated and W granted \
         to a survivor while the cut-off node still holds W.",
    );
    assert!(v.contains("holds W"), "{v}");
}

/// Without the install-once check, the plan delivered again to the token node after the
/// token has moved on regenerates it a second time: two tokens in one epoch.
#[test]
fn installing_twice_regenerates_the_token_twice() {
    refuted(
        wwr("W W R, 1 crash, 1 duplicated install, install twice")
            .with_faults(1, 0, 0, 1)
            .with_variant(RecoveryVariant {
                install_once: false,
                ..H
            }),
        ONE_TOKEN,
        "token-regenerated-twice",
        "install_once off: the plan of the current epoch reaches its token node again after \
         the token has moved on; the node takes the token again, and the epoch has two.",
    );
}

/// Rule 7 under recovery: a U holder's upgrade waits for the copies (R, IW) of the others
/// while any node may crash and come back.
#[test]
fn upgrade_survives_a_crash_and_restart() {
    pass(
        FaultConfig::new(
            "U+upgrade R IW, 1 crash, 1 restart",
            &[
                &["acquire U", "upgrade", "release"],
                &["acquire R", "release"],
                &["acquire IW", "release"],
            ],
        )
        .with_faults(1, 0, 1, 0),
        &[REGENERATED, AFTER_INSTALL, REJOINED],
    );
}

/// Four nodes with copies (R, R, IW) spread over the tree when one crashes, under
/// hilock's default forwarding ([`Forwarding::ClassPointers`]: an idle relay's routing
/// pointers must not outlive the epoch, `RecoveryVariant::forget_shortcuts`) and under the
/// thesis rule ([`Forwarding::Thesis`], for comparison).
#[test]
fn four_nodes_with_copies_survive_a_crash() {
    pass(
        four_nodes_one_crash("4 nodes W R R IW, 1 crash", Forwarding::default()),
        &[REGENERATED, AFTER_INSTALL],
    );
    pass(
        four_nodes_one_crash("4 nodes W R R IW, 1 crash, thesis", Forwarding::Thesis),
        &[REGENERATED, AFTER_INSTALL],
    );
}

/// Every fault once in one run: a crash, a partition or pause, a restart and a duplicated
/// install (≈ 14 s in the test profile, 2 threads).
#[test]
fn every_fault_once() {
    pass(
        wwr("W W R, every fault once").with_faults(1, 1, 1, 1),
        &[REGENERATED, KILLED, AFTER_INSTALL, REJOINED],
    );
}

/// A crash and a restart on four nodes (its time: `docs/verification.md`, "Larger
/// configurations").
#[test]
#[ignore]
fn four_nodes_crash_and_restart() {
    pass(
        FaultConfig::new(
            "4 nodes W W R IW, 1 crash, 1 restart",
            &[
                &["acquire W", "release"],
                &["acquire W", "release"],
                &["acquire R", "release"],
                &["acquire IW", "release"],
            ],
        )
        .with_faults(1, 0, 1, 0),
        &[REGENERATED, AFTER_INSTALL, REJOINED],
    );
}

// ----------------------------------- routing pointers across an epoch (`spec/SPEC.md` 1.6)

fn four_nodes_one_crash(name: &str, forwarding: Forwarding) -> FaultConfig {
    FaultConfig::new(
        name,
        &[
            &["acquire W", "release"],
            &["acquire R", "release"],
            &["acquire R", "release"],
            &["acquire IW", "release"],
        ],
    )
    .with_faults(1, 0, 0, 0)
    .with_forwarding(forwarding)
}

/// hilock's forwarding shortcuts survive a crash once an install forgets them
/// with the old epoch's other links (`RecoveryVariant::forget_shortcuts`): every
/// survivor's request is granted. [`Forwarding::ClassPointers`]' per-class routing
/// pointers are hilock's default and checked by [`four_nodes_with_copies_survive_a_crash`];
/// here [`Forwarding::Compress`]'s shortcut.
#[test]
fn forwarding_shortcuts_survive_a_crash() {
    assert_eq!(Forwarding::default(), Forwarding::ClassPointers);
    pass(
        four_nodes_one_crash("4 nodes W R R IW, 1 crash, compress", Forwarding::Compress),
        &[REGENERATED, AFTER_INSTALL],
    );
}

/// Without `forget_shortcuts` (the kernel before this fix) a request is lost. n3's IW
/// takes the token from n0; n2's R then reaches n0, now an idle relay, which forwards it
/// to n3 and keeps a pointer (mode R) to n2; n2 crashes and the next epoch is installed
/// (parent, token, queue and links reset, the routing pointers kept); n1's R reaches n0,
/// which sends it along its pointer to the dead n2 (Table 3.2 keeps an R behind an R):
/// quiescent with n1 waiting for ever. Counterexample
/// `spec/counterexamples/faults/class-pointers-pointer-to-crashed-node.json`.
#[test]
fn shortcuts_kept_across_an_install_lose_a_request() {
    let v = refuted(
        four_nodes_one_crash(
            "4 nodes W R R IW, 1 crash, class pointers",
            Forwarding::ClassPointers,
        )
        .with_variant(RecoveryVariant {
            forget_shortcuts: false,
            ..H
        }),
        NO_LOST,
        "class-pointers-pointer-to-crashed-node",
        "forget_shortcuts off: an idle relay's ClassPointers pointer to a node that crashed \
         survives the epoch install; a request sent along it is lost",
    );
    assert!(
        v.contains("a live member") && v.contains("still pending"),
        "{v}"
    );
}

// ------------------------------------------------ staged install (the runtime's stages)

/// The runtime's install in stages (`FaultConfig::staged_install`): each survivor freezes
/// and reports, the leader records the plan once every member of the next epoch has
/// reported, and each member installs at its own time, while the next node may crash
/// between any two stages. Every survivor's request is still granted.
#[test]
fn staged_install_recovers_a_crash() {
    pass(
        wwr("W W R, 1 crash, staged install")
            .with_faults(1, 0, 0, 0)
            .with_staged_install(),
        &[REGENERATED, AFTER_INSTALL],
    );
}

/// A staged install with a crash and a restart: a member that reported may crash before
/// it installs, and its new incarnation is let in by the next epoch.
#[test]
fn staged_install_recovers_a_crash_and_restart() {
    pass(
        wwr("W W R, 1 crash, 1 restart, staged install")
            .with_faults(1, 0, 1, 0)
            .with_staged_install(),
        &[REGENERATED, AFTER_INSTALL, REJOINED],
    );
}

/// A partition or pause between the stages: a member cut off before it reported is waited
/// for until its own lease has expired (the leader records nothing without its report); one
/// cut off after it reported cannot install until its lease expires and the next epoch
/// removes it.
#[test]
fn staged_install_waits_for_a_cut_off_member() {
    pass(
        wwr("W W R, 1 partition or pause, 1 restart, staged install")
            .with_faults(0, 1, 1, 0)
            .with_staged_install(),
        &[REGENERATED, KILLED, AFTER_INSTALL, REJOINED],
    );
}

/// Rule 7 and four nodes with copies under a staged install.
#[test]
fn staged_install_with_an_upgrade_and_with_four_nodes() {
    pass(
        FaultConfig::new(
            "U+upgrade R IW, 1 crash, 1 restart, staged install",
            &[
                &["acquire U", "upgrade", "release"],
                &["acquire R", "release"],
                &["acquire IW", "release"],
            ],
        )
        .with_faults(1, 0, 1, 0)
        .with_staged_install(),
        &[REGENERATED, AFTER_INSTALL, REJOINED],
    );
    pass(
        four_nodes_one_crash(
            "4 nodes W R R IW, 1 crash, staged install",
            Forwarding::default(),
        )
        .with_staged_install(),
        &[REGENERATED, AFTER_INSTALL],
    );
}

/// W W R with every fault once (crash, partition or pause, restart, duplicated install)
/// and the staged install: the configuration pinned in `staged_install_every_fault_once`.
fn every_fault_once_staged(name: &str) -> FaultConfig {
    wwr(name).with_faults(1, 1, 1, 1).with_staged_install()
}

/// Every fault once with the staged install. Among its paths: a new incarnation of a node
/// outside the epoch asks to join, the survivors freeze and report, and it crashes before
/// it reports — the membership they froze for is the current one again, and they install
/// the epoch they froze for with it (`RecoveryVariant::install_after_reports`,
/// `next_members_after_reports`); every property holds.
#[test]
fn staged_install_every_fault_once() {
    pass(
        every_fault_once_staged("W W R, every fault once, staged install"),
        &[REGENERATED, KILLED, AFTER_INSTALL, REJOINED],
    );
}

/// Without `install_after_reports`: the joiner that crashes before its report leaves the
/// survivors frozen for good. `next_members` gives no next epoch, so no leader records a
/// plan and nothing ever unfreezes them: quiescent with every live member frozen. The
/// atomic oracle cannot show it: it decides, reports and installs in one step. (The
/// runtime's recovery task had this defect: `runtime/src/token/recover.rs`; test
/// `a_joiner_that_dies_before_its_report_leaves_no_member_frozen` in
/// `cli/tests/etcd_recover.rs`.)
#[test]
fn staged_install_without_install_after_reports_freezes_the_survivors() {
    let v = refuted(
        every_fault_once_staged(
            "W W R, every fault once, staged install, no install after reports",
        )
        .with_variant(RecoveryVariant {
            install_after_reports: false,
            ..H
        }),
        NO_LOST,
        "staged-joiner-lost-before-report",
        "install_after_reports off, staged install: n2 is cut off and its lease expires; \
         epoch 1 removes it. Its new incarnation asks to join, and n0 and n1, having \
         installed epoch 1, freeze and report for epoch 2. The new incarnation crashes \
         before it reports: the next membership is epoch 1's again, no leader records a \
         plan, and n0 and n1 stay frozen.",
    );
    assert!(v.contains("is frozen"), "{v}");
}

// ------------------------------------------------------- staged install: freeze removed

/// Without the freeze (`FaultConfig::no_freeze`) a node that reported keeps stepping.
/// n0 sends the token to n1 and n2 crashes; n0 and n1 report while the token is in flight,
/// so neither reports it and the plan regenerates it at n0. n1, still stepping after its
/// report, takes the old token and holds W; n0 installs the regenerated token and is
/// granted W too. The atomic oracle reports and installs in one step, so the same
/// configuration keeps every property there (`crash_of_any_node_is_recovered`).
#[test]
fn staged_install_without_freeze_breaks_mutual_exclusion() {
    let v = refuted(
        wwr("W W R, 1 crash, staged install, no freeze")
            .with_faults(1, 0, 0, 0)
            .without_freeze(),
        P1,
        "staged-install-no-freeze",
        "no_freeze: a node that reported keeps stepping until it installs. The token is in \
         flight from n0 to n1 when both report, so the plan regenerates it at n0; n1 then \
         takes the old token and holds W, and n0's install grants W again.",
    );
    assert!(v.contains("holds W"), "{v}");
}
