//! P7 bounded inversion (thesis section 3.6, Fig. 3.3–3.6), checked exhaustively on the
//! kernel: the least bound B on the number of lower-priority critical sections granted on
//! L_j while the high-priority node D waits on L_i for A, and A waits on L_j — per protocol
//! variant, number of medium-priority nodes and number of requests each of them makes.
//! The model and its timing assumption are in `models/src/inversion.rs`.

/// The model checker clones a state per successor: mimalloc's allocation is cheaper than
/// glibc's for that pattern (`docs/benchmarks.md`, "Model checking throughput").
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use hilock_models::inversion::{
    least_blocking, least_bound, pip_blocking_bound, Flavor, InversionConfig, Stamp, P13_BOTH,
};
use stateright::Checker;
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
    ("P7 Pip mediums=2 rounds=1", 3617),
    ("P7 Pip mediums=2 rounds=2", 32137),
    ("P7 Pip mediums=2 rounds=3", 178709),
    ("P7 Prioritized mediums=1 rounds=1", 263),
    ("P7 Prioritized mediums=1 rounds=2", 439),
    ("P7 Prioritized mediums=1 rounds=3", 623),
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
/// every smaller bound. With one medium node the least bound is 1 at 1, 2 and 3 rounds.
#[test]
fn p7_without_inheritance_the_inversion_grows() {
    for r in 1..=3 {
        assert_eq!(bound(Flavor::Prioritized, 1, r), 1, "mediums=1 rounds={r}");
    }
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
    let cfg = InversionConfig {
        flavor: Flavor::Prioritized,
        mediums: 2,
        rounds: 1,
        bound: 1,
        blocking: None,
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

/// The state count of every P13 configuration (the checks that pass at the least bounds).
const PINNED_BLOCKING: &[(&str, usize)] = &[
    ("P13 Pip mediums=1 rounds=1", 2014),
    ("P13 Pip mediums=1 rounds=2", 4330),
    ("P13 Pip mediums=1 rounds=3", 6305),
    ("P13 Pip mediums=2 rounds=1", 35634),
    ("P13 Pip mediums=2 rounds=2", 393830),
    ("P13 Pip mediums=2 rounds=3", 2206920),
    ("P13 Pip mediums=3 rounds=1", 619868),
    ("P13 Prioritized mediums=2 rounds=1", 16333),
    ("P13 Prioritized mediums=2 rounds=2", 167987),
];

/// The least bounds of P13 for a configuration, searched from one below `expected` (so
/// `exact` says that `expected` − 1 fails), with the state counts pinned; and whether one
/// run reaches both bounds at once.
fn blocking(flavor: Flavor, mediums: usize, rounds: usize, expected: Stamp) -> Blocking {
    let t = Instant::now();
    let from = Stamp {
        hops: expected.hops.saturating_sub(1),
        sections: expected.sections.saturating_sub(1),
    };
    let r = least_blocking(flavor, mediums, rounds, from, 30)
        .unwrap_or_else(|e| panic!("{flavor:?} mediums={mediums} rounds={rounds}: {e}"));
    let least = Stamp {
        hops: r.delays.bound,
        sections: r.sections.bound,
    };
    let name = format!("P13 {flavor:?} mediums={mediums} rounds={rounds}");
    // The bounds prune nothing: both searches end on the same state space.
    assert_eq!(r.delays.states, r.sections.states, "{name}");
    match PINNED_BLOCKING.iter().find(|(n, _)| *n == name) {
        Some(pinned) => verify::assert_pinned!(
            r.delays.states,
            pinned.1,
            "{name}: the reachable state space changed"
        ),
        None => assert!(
            !verify::pins_on(),
            "{name}: no pinned state count ({}; add it to PINNED_BLOCKING)",
            r.delays.states
        ),
    }
    let cfg = InversionConfig {
        flavor,
        mediums,
        rounds,
        bound: u8::MAX,
        blocking: Some(least),
    };
    let both = cfg.check().discovery(P13_BOTH).is_some();
    println!(
        "{name}: D granted at most {least} after its request ({} / {} states, {:.1?}){}",
        r.delays.states,
        r.sections.states,
        t.elapsed(),
        if both { "; one run reaches both" } else { "" }
    );
    Blocking {
        least,
        exact: r.delays.counterexample.is_some() && r.sections.counterexample.is_some(),
        both,
    }
}

/// What [`blocking`] found.
struct Blocking {
    least: Stamp,
    /// The bounds one below fail.
    exact: bool,
    /// One run reaches both bounds.
    both: bool,
}

/// The bounds `(hops, sections)` within `bound` that one run of the configuration reaches
/// exactly at D's grant, keeping the maximal ones (no other reached one is as large in
/// both).
fn frontier(flavor: Flavor, mediums: usize, rounds: usize, bound: Stamp) -> Vec<(u8, u8)> {
    let mut reached = Vec::new();
    for hops in 0..=bound.hops {
        for sections in 0..=bound.sections {
            let cfg = InversionConfig {
                flavor,
                mediums,
                rounds,
                bound: u8::MAX,
                blocking: Some(Stamp { hops, sections }),
            };
            if cfg.check().discovery(P13_BOTH).is_some() {
                reached.push((hops, sections));
            }
        }
    }
    reached
        .iter()
        .copied()
        .filter(|&(h, s)| {
            !reached
                .iter()
                .any(|&(h2, s2)| (h2, s2) != (h, s) && h2 >= h && s2 >= s)
        })
        .collect()
}

/// P13 with PIP (thesis sections 3.6 and 3.7.2): the time from D's request to D's grant is at
/// most `pip_blocking_bound(N)` — (N + 2)·δ + (N + 1)·C for N ≥ 4 nodes, 4δ + 4C for N = 3 —
/// and each count is the checker's exact maximum: one delay or one stretch less fails. N = 3
/// and N = 4, each medium node asking once. At N = 3 one run reaches both; at N = 4 none
/// does: the maximal runs reach 3δ + 5C, 5δ + 4C and 6δ + 2C.
#[test]
fn pip_blocking_of_the_high_priority_request_is_the_closed_form_exactly() {
    for mediums in 1..=2 {
        let n = mediums + 2;
        let b = blocking(Flavor::Pip, mediums, 1, pip_blocking_bound(n));
        assert_eq!(b.least, pip_blocking_bound(n), "N = {n}");
        assert!(b.exact, "N = {n}: one delay or stretch less holds too");
        assert_eq!(b.both, n == 3, "N = {n}: one run reaches both bounds");
    }
    assert_eq!(
        frontier(Flavor::Pip, 2, 1, pip_blocking_bound(4)),
        vec![(3, 5), (5, 4), (6, 2)]
    );
}

/// With PIP the critical-section stretches D waits for stay N + 1 when the medium nodes ask
/// again and again (N = 3 with two and three requests each, N = 4 with two); the message
/// delays at N = 4 become N + 3 = 7: the reissued request chases the token back to a medium
/// node that holds it a second time, which `pip_blocking_bound` (one request each) does not
/// cover. One run reaches both bounds at N = 3, none at N = 4.
#[test]
fn pip_blocking_sections_do_not_grow_with_repeated_requests() {
    for rounds in 2..=3 {
        let b = blocking(Flavor::Pip, 1, rounds, pip_blocking_bound(3));
        assert_eq!(b.least, pip_blocking_bound(3), "N = 3, rounds = {rounds}");
        assert!(b.exact && b.both);
    }
    let n4 = Stamp {
        hops: 7,
        sections: pip_blocking_bound(4).sections,
    };
    let b = blocking(Flavor::Pip, 2, 2, n4);
    assert_eq!(b.least, n4, "N = 4, rounds = 2");
    assert!(b.exact && !b.both);
}

/// Without inheritance the stretches D waits for grow with the medium nodes' requests: at
/// N = 4, 5δ + 5C with one request each and 7δ + 7C with two (one run reaches both), 7
/// stretches > N + 1 = 5 (a medium request keeps overtaking A's).
#[test]
fn without_inheritance_blocking_exceeds_the_pip_bound() {
    let mut sections = Vec::new();
    for (rounds, expected) in [(1, 5), (2, 7)] {
        let expected = Stamp {
            hops: expected,
            sections: expected,
        };
        let b = blocking(Flavor::Prioritized, 2, rounds, expected);
        assert_eq!(b.least, expected, "rounds = {rounds}");
        assert!(b.exact && b.both, "rounds = {rounds}");
        sections.push(b.least.sections);
    }
    assert!(sections[1] > sections[0], "grows with the requests");
    assert!(sections[1] > pip_blocking_bound(4).sections);
}

/// Larger configurations of P13 (`cargo test -p verify --test inversion blocking -- --ignored
/// --nocapture`, times in docs/verification.md): N = 5 with PIP meets the closed form exactly
/// (619,868 states); N = 4 with three requests per medium node keeps N + 1 stretches and 7
/// delays (2,206,920 states). In neither does one run reach both bounds.
#[test]
#[ignore]
fn pip_blocking_larger_configurations() {
    let b = blocking(Flavor::Pip, 3, 1, pip_blocking_bound(5));
    assert_eq!(b.least, pip_blocking_bound(5), "N = 5");
    assert!(b.exact && !b.both);
    let n4 = Stamp {
        hops: 7,
        sections: pip_blocking_bound(4).sections,
    };
    let b = blocking(Flavor::Pip, 2, 3, n4);
    assert_eq!(b.least, n4, "N = 4, rounds = 3");
    assert!(b.exact && !b.both);
}

/// P13's bounds hold in real time on random timed runs (`InversionConfig::timed_blocking`:
/// delays at most δ, stretches at most C, with δ < C, δ = C and δ > C): D's blocking time
/// is at most the run's own bound hops·δ + sections·C, and with PIP at most the closed form
/// `pip_blocking_bound(N)`, N = 3 and 4, each medium node asking once.
#[test]
fn pip_blocking_bound_holds_on_random_timed_runs() {
    for mediums in 1..=2 {
        let n = mediums + 2;
        let cfg = InversionConfig {
            flavor: Flavor::Pip,
            mediums,
            rounds: 1,
            bound: u8::MAX,
            blocking: Some(pip_blocking_bound(n)),
        };
        let f = pip_blocking_bound(n);
        let mut longest = 0.0f64;
        for (delay, section) in [(1.0, 10.0), (1.0, 1.0), (10.0, 1.0)] {
            for seed in 0..20_000u64 {
                let (t, b) = cfg
                    .timed_blocking(seed, delay, section)
                    .expect("D is granted");
                let run = f64::from(b.hops) * delay + f64::from(b.sections) * section;
                let formula = f64::from(f.hops) * delay + f64::from(f.sections) * section;
                assert!(t <= run + 1e-9, "N = {n}, seed {seed}: {t} > {run} ({b})");
                assert!(t <= formula + 1e-9, "N = {n}, seed {seed}: {t} > {formula}");
                longest = longest.max(t / formula);
            }
        }
        println!(
            "N = {n}: longest blocking {:.0}% of the closed form",
            longest * 100.0
        );
    }
}
