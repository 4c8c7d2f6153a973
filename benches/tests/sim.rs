//! Checks of the simulator: a published result (Lavault's average case of Naimi-Trehel's
//! path reversal), determinism, and sanity of the thesis workload on small systems.

use hilock_benches::sim::{self, harmonic, Config, Proto};

/// Lavault's average-case analysis of path reversal: with one request at a time from a
/// uniformly random node (any of the n nodes, the token holder included), the mean number
/// of messages per critical section — the request's hops to the root plus the token's hop
/// to the requester — is H(n−1). (The request hops alone average H(n) − 1: the token hop
/// is missing exactly when the requester is the holder, with probability 1/n.)
fn check_lavault(n: usize) {
    let r = sim::naimi_sequential(n, 20 * n as u64, 40_000, 7);
    let h = harmonic(n - 1);
    let rel = (r.messages - h).abs() / h;
    eprintln!(
        "n = {n}: {:.4} messages per CS (H(n-1) = {h:.4}, {:+.2} %), {:.4} request hops (H(n) - 1 = {:.4})",
        r.messages,
        (r.messages - h) / h * 100.0,
        r.request_hops,
        harmonic(n) - 1.0
    );
    assert!(
        rel < 0.03,
        "n = {n}: {:.4} messages per CS, H(n-1) = {h:.4} ({:.2} % off)",
        r.messages,
        rel * 100.0
    );
    let hops = harmonic(n) - 1.0;
    assert!(
        (r.request_hops - hops).abs() / hops < 0.03,
        "n = {n}: {:.4} request hops, H(n) - 1 = {hops:.4}",
        r.request_hops
    );
}

#[test]
fn naimi_sequential_mean_is_harmonic_n16() {
    check_lavault(16);
}

#[test]
fn naimi_sequential_mean_is_harmonic_n120() {
    check_lavault(120);
}

fn small(proto: Proto, n: usize, seed: u64) -> Config {
    Config::thesis(proto, n, 10.0, 30, seed)
}

#[test]
fn same_seed_gives_byte_identical_csv() {
    let run = || {
        let mut rows = Vec::new();
        for proto in [Proto::Hilock, Proto::NaimiSame, Proto::NaimiPure] {
            for n in [4, 16] {
                let cfg = small(proto, n, 42);
                let st = sim::run(&cfg).expect("run");
                rows.push(sim::CsvRow::new("det", &cfg, &st));
            }
        }
        sim::csv_bytes(&rows).expect("csv")
    };
    let a = run();
    let b = run();
    assert_eq!(a, b);
    assert_eq!(
        String::from_utf8_lossy(&a).lines().count(),
        7,
        "header + 6 rows"
    );
    // A different seed gives a different run.
    let cfg = small(Proto::Hilock, 16, 43);
    let st = sim::run(&cfg).expect("run");
    let other = sim::csv_bytes(&[sim::CsvRow::new("det", &cfg, &st)]).expect("csv");
    let line = String::from_utf8_lossy(&other)
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    assert!(!String::from_utf8_lossy(&a).contains(&line));
}

#[test]
fn every_protocol_completes_the_thesis_workload() {
    for proto in [
        Proto::Hilock,
        Proto::NaimiSame,
        Proto::NaimiPure,
        Proto::PrioNaimi,
    ] {
        for ratio in [1.0, 25.0] {
            let mut cfg = Config::thesis(proto, 8, ratio, 40, 1);
            cfg.prio = if proto == Proto::PrioNaimi {
                sim::PrioMode::On
            } else {
                sim::PrioMode::Off
            };
            let st = sim::run(&cfg).unwrap_or_else(|e| panic!("{e}"));
            assert!(st.accesses >= cfg.measured_accesses, "{proto:?}");
            assert!(st.per_request() > 0.5 && st.per_request() < 20.0, "{st:?}");
        }
    }
}

#[test]
fn hilock_with_kernel_priorities_completes() {
    for prio in [sim::PrioMode::On, sim::PrioMode::Pcep, sim::PrioMode::Pip] {
        let mut cfg = Config::thesis(Proto::Hilock, 16, 10.0, 30, 3);
        cfg.prio = prio;
        let st = sim::run(&cfg).unwrap_or_else(|e| panic!("{prio:?}: {e}"));
        assert!(st.accesses >= cfg.measured_accesses);
    }
}
