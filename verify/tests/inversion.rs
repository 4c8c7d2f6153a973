//! P7 bounded inversion (thesis section 3.6, Fig. 3.3–3.6), checked exhaustively on the
//! kernel: the least bound B on the number of lower-priority critical sections granted on
//! L_j while the high-priority node D waits on L_i for A, and A waits on L_j — per protocol
//! variant, number of medium-priority nodes and number of requests each of them makes.
//! The model and its timing assumption are in `models/src/inversion.rs`.

/// The model checker clones a state per successor: mimalloc's allocation is cheaper than
/// glibc's for that pattern (`docs/benchmarks.md`, "Model checking throughput").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use hilock_models::inversion::{least_bound, Flavor};
use std::time::Instant;

/// The exact state count of every default configuration; the `#[ignore]`d
/// three-medium ones are not pinned (run time).
const PINNED: &[(&str, usize)] = &[
    ("P7 Fifo mediums=1 rounds=1", 263),
    ("P7 Fifo mediums=1 rounds=2", 439),
    ("P7 Fifo mediums=1 rounds=3", 623),
    ("P7 Fifo mediums=2 rounds=1", 1677),
    ("P7 Fifo mediums=2 rounds=2", 10807),
    ("P7 Fifo mediums=2 rounds=3", 55363),
    ("P7 Pcep mediums=1 rounds=1", 263),
    ("P7 Pcep mediums=1 rounds=2", 439),
    ("P7 Pcep mediums=1 rounds=3", 623),
    ("P7 Pcep mediums=2 rounds=1", 1767),
    ("P7 Pcep mediums=2 rounds=2", 11973),
    ("P7 Pcep mediums=2 rounds=3", 60169),
    ("P7 Pip mediums=1 rounds=1", 461),
    ("P7 Pip mediums=1 rounds=2", 826),
    ("P7 Pip mediums=1 rounds=3", 1181),
    ("P7 Pip mediums=2 rounds=1", 3601),
    ("P7 Pip mediums=2 rounds=2", 31737),
    ("P7 Pip mediums=2 rounds=3", 175573),
    ("P7 Prioritized mediums=1 rounds=2", 439),
    ("P7 Prioritized mediums=2 rounds=1", 1663),
    ("P7 Prioritized mediums=2 rounds=2", 11165),
    ("P7 Prioritized mediums=2 rounds=3", 58265),
];

fn bound(flavor: Flavor, mediums: usize, rounds: usize) -> u8 {
    let t = Instant::now();
    let r = least_bound(flavor, mediums, rounds, 10)
        .unwrap_or_else(|e| panic!("{flavor:?} mediums={mediums} rounds={rounds}: {e}"));
    let name = format!("P7 {flavor:?} mediums={mediums} rounds={rounds}");
    if mediums < 3 {
        let pinned = PINNED
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name}: no pinned state count (add it to PINNED)"));
        verify::assert_pinned!(
            r.states,
            pinned.1,
            "{name}: the reachable state space changed"
        );
    }
    println!(
        "P7 {flavor:?} mediums={mediums} rounds={rounds}: least B = {} ({} states, {:.1?}){}",
        r.bound,
        r.states,
        t.elapsed(),
        r.counterexample
            .as_ref()
            .map(|c| format!("; B = {} fails after {} steps", r.bound - 1, c.len()))
            .unwrap_or_default()
    );
    r.bound
}

/// Without inheritance, two medium-priority nodes taking turns on L_j keep A — and so D —
/// waiting: the number of lower-priority critical sections that overtake D grows with the
/// number of requests they make (2 per round), and the checker finds a counterexample for
/// every smaller bound.
#[test]
fn p7_without_inheritance_the_inversion_grows() {
    assert_eq!(bound(Flavor::Prioritized, 1, 2), 1);
    let b: Vec<u8> = (1..=3).map(|r| bound(Flavor::Prioritized, 2, r)).collect();
    assert_eq!(b, vec![2, 4, 6], "grows with the medium nodes' requests");
}

/// With PCEP and with PIP the checker proves B = 1: at most one lower-priority critical
/// section (the one already running on L_j) overtakes D, whatever the number of medium
/// nodes and requests.
#[test]
fn p7_pcep_and_pip_bound_the_inversion_by_one_critical_section() {
    for flavor in [Flavor::Pcep, Flavor::Pip] {
        for m in 1..=2 {
            for r in 1..=3 {
                assert_eq!(bound(flavor, m, r), 1, "{flavor:?} mediums={m} rounds={r}");
            }
        }
    }
}

/// The chapter-2 protocol (all priorities equal, FIFO with freezing) has no priorities to
/// invert: A's request, older than the medium nodes' later ones, is served after at most
/// the critical section already running.
#[test]
fn p7_fifo_protocol_bound() {
    for m in 1..=2 {
        for r in 1..=3 {
            assert_eq!(bound(Flavor::Fifo, m, r), 1, "mediums={m} rounds={r}");
        }
    }
}

/// Larger configurations (about 2.5 minutes in release: `cargo test --release -p verify --
/// --ignored`). With three medium nodes the bound with PCEP and with PIP is 2, not 1: while
/// A's (raised) request travels to the token node of L_j, the running medium critical
/// section can end and hand the token to a medium request that reached the token node
/// first. It still does not grow with the number of requests the medium nodes make, unlike
/// the prioritized protocol without inheritance (3 per round here).
#[test]
#[ignore]
fn p7_three_medium_nodes() {
    assert_eq!(bound(Flavor::Prioritized, 3, 1), 3);
    assert_eq!(bound(Flavor::Prioritized, 3, 2), 6);
    assert_eq!(bound(Flavor::Pcep, 3, 2), 2);
    assert_eq!(bound(Flavor::Pip, 3, 2), 2);
}

/// The counterexample of P7 with B = 1 without inheritance (two medium nodes, one round
/// each: least B = 2) is saved as `spec/counterexamples/inversion-no-inheritance.json`, its
/// configuration in `configs/`, and `hilock explore CONFIG --trace FILE` opens it at the
/// state where the second lower-priority critical section overtakes D.
#[test]
fn p7_counterexample_without_inheritance_is_saved_and_opens() {
    use hilock_models::inversion::InversionConfig;
    use stateright::Checker;
    let cfg = InversionConfig {
        flavor: Flavor::Prioritized,
        mediums: 2,
        rounds: 1,
        bound: 1,
    };
    let p = "P7 bounded inversion";
    let path = cfg
        .check()
        .discovery(p)
        .expect("B = 1 fails without inheritance");
    let trace = cfg.trace(p, &hilock_models::check::first_failure(&cfg, p, &path));
    assert!(
        trace.steps.last().is_some_and(|s| s.overtakes == 2),
        "{trace:?}"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../spec/counterexamples");
    let file = dir.join("inversion-no-inheritance.json");
    let json = serde_json::to_string_pretty(&trace).expect("JSON") + "\n";
    std::fs::write(&file, &json).expect("written");
    let config = hilock_models::open::OtherConfig::Inversion(cfg);
    let config_file = dir.join("configs/inversion-no-inheritance.json");
    std::fs::write(
        &config_file,
        serde_json::to_string_pretty(&config).expect("JSON") + "\n",
    )
    .expect("written");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let opened = hilock_models::open::open_other(&config, &v).expect("the trace replays");
    assert_eq!(opened.violated, vec![p.to_string()]);
    print!(
        "{}",
        hilock_models::open::how_to_open(&config_file, &file, &opened.encoded)
    );
}
