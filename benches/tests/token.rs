//! Checks of the simulator: a published result (Lavault's average case of Naimi-Trehel's
//! path reversal), determinism, and sanity of the thesis workload on small systems.

use hilock_benches::token::{self, harmonic, Config, Proto};

/// Lavault's average-case analysis of path reversal: with one request at a time from a
/// uniformly random node (any of the n nodes, the token holder included), the mean number
/// of messages per critical section — the request's hops to the root plus the token's hop
/// to the requester — is H(n−1). (The request hops alone average H(n) − 1: the token hop
/// is missing exactly when the requester is the holder, with probability 1/n.)
fn check_lavault(n: usize) {
    let r = token::naimi_sequential(n, 20 * n as u64, 40_000, 7);
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
                let st = token::run(&cfg).expect("run");
                rows.push(token::CsvRow::new("det", &cfg, &st));
            }
        }
        token::csv_bytes(&rows).expect("csv")
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
    let st = token::run(&cfg).expect("run");
    let other = token::csv_bytes(&[token::CsvRow::new("det", &cfg, &st)]).expect("csv");
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
                token::PrioMode::On
            } else {
                token::PrioMode::Off
            };
            let st = token::run(&cfg).unwrap_or_else(|e| panic!("{e}"));
            assert!(st.accesses >= cfg.measured_accesses, "{proto:?}");
            assert!(st.per_request() > 0.5 && st.per_request() < 20.0, "{st:?}");
        }
    }
}

#[test]
fn hilock_with_kernel_priorities_completes() {
    for prio in [
        token::PrioMode::On,
        token::PrioMode::Pcep,
        token::PrioMode::Pip,
    ] {
        let mut cfg = Config::thesis(Proto::Hilock, 16, 10.0, 30, 3);
        cfg.prio = prio;
        let st = token::run(&cfg).unwrap_or_else(|e| panic!("{prio:?}: {e}"));
        assert!(st.accesses >= cfg.measured_accesses);
    }
}

/// The access-mode mix the simulator draws is the thesis's (section 4.1: IR 80, R 10, U 4,
/// IW 5, W 1 %), counted over the accesses a run actually started in its window. Bound:
/// each share within 4 standard deviations of its binomial proportion,
/// |k/N − p| ≤ 4·√(p(1 − p)/N), with N ≥ 6,000 (so ±2.1 points for IR, ±0.5 for W). The
/// run is deterministic (fixed seed); the bound says how far a correct draw could be
/// from the mix, so a shifted table (e.g. R 12 / U 2) fails it.
#[test]
fn drawn_access_mix_is_the_thesis_mix() {
    for mix in [token::Mix::Thesis, token::Mix::EntryIntention] {
        let cfg = Config {
            mix,
            ..Config::thesis(Proto::NaimiPure, 16, 10.0, 400, 11)
        };
        let st = token::run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let n: u64 = st.access_modes.iter().sum();
        assert!(n >= 6_000, "{n} accesses");
        for (k, (mode, pct)) in token::MIX.iter().enumerate() {
            let p = f64::from(*pct) / 100.0;
            let share = st.access_modes[k] as f64 / n as f64;
            let bound = 4.0 * (p * (1.0 - p) / n as f64).sqrt();
            eprintln!("{mix:?} {mode:?}: {share:.4} (thesis {p}, bound ±{bound:.4})");
            assert!(
                (share - p).abs() <= bound,
                "{mix:?}: {mode:?} drawn {share:.4}, thesis {p} ± {bound:.4}"
            );
        }
    }
}

/// Lock requests per access, derived by hand from the mapping ([`token::access_locks`]):
/// under the thesis mix an IR or IW access is 1 lock request (the table) and an R, U or W
/// access 2 (the covering intention on the table, then the entry), so the lock requests
/// of `A` accesses are `A + A_R + A_U + A_W`, expected 1 + 0.10 + 0.04 + 0.01 = 1.15 per
/// access; under `entry-intention` `A + A_IR + A_IW`, expected 1.85. The mode of each lock
/// request follows from the access's mode too (thesis mix: IR requests = IR + R accesses,
/// IW requests = IW + U + W accesses, R/U/W requests = R/U/W accesses). A small
/// fixed-seed run (hilock, 4 nodes, ≈ 2,000 accesses started and completed in the
/// window) must match these counts exactly, and its ratio must be within 4 σ of 1.15
/// (1.85).
#[test]
fn lock_requests_per_access_match_the_hand_count() {
    for (mix, expect) in [
        (token::Mix::Thesis, 1.15),
        (token::Mix::EntryIntention, 1.85),
    ] {
        let cfg = Config {
            mix,
            ..Config::thesis(Proto::Hilock, 4, 10.0, 30, 5)
        };
        let st = token::run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let a = st.lat_mode.map(|m| m.1);
        let [ir, r, u, iw, w] = a;
        let accesses: u64 = a.iter().sum();
        let (hand, modes) = match mix {
            token::Mix::Thesis => (accesses + r + u + w, [ir + r, r, u, iw + u + w, w]),
            token::Mix::EntryIntention => (accesses + ir + iw, [ir, r + ir, u, iw, w + iw]),
            token::Mix::OneLockW => unreachable!("not one of the mixes of this loop"),
        };
        let got: u64 = st.acquire_modes.iter().sum();
        eprintln!(
            "{mix:?}: {accesses} accesses, {got} lock requests (hand count {hand}), {:.4} per access, modes {:?} (hand {modes:?})",
            st.requests_per_access(),
            st.acquire_modes
        );
        assert_eq!(got, hand);
        assert_eq!(st.acquire_modes, modes);
        // The variance of the per-access count (1 or 2) is q(1 − q), q = expect − 1.
        let q: f64 = expect - 1.0;
        let bound = 4.0 * (q * (1.0 - q) / accesses as f64).sqrt();
        assert!(
            (st.requests_per_access() - expect).abs() <= bound,
            "{mix:?}: {:.4} lock requests per access, expected {expect} ± {bound:.4}",
            st.requests_per_access()
        );
    }
}

/// `--mix entry-intention` reproduces the tables measured before the thesis mapping
/// (`docs/benchmarks.md`, Fig. 4.1 at 16 nodes: hilock with the thesis's forwarding rule 3.41,
/// Naimi pure 3.59 messages per lock request, ratio 10, 150 ms, seed 1, 40 accesses per
/// node).
#[test]
fn entry_intention_mix_reproduces_the_old_table() {
    let per_request = |proto| {
        let cfg = Config {
            mix: token::Mix::EntryIntention,
            ..Config::thesis(proto, 16, 10.0, 40, 1)
        };
        let st = token::run(&cfg).unwrap_or_else(|e| panic!("{e}"));
        format!("{:.2}", st.per_request())
    };
    assert_eq!(per_request(Proto::HilockThesis), "3.41");
    assert_eq!(per_request(Proto::NaimiPure), "3.59");
}

/// The per-access split by lock (table / entries) and kind adds up to the totals — every
/// message is counted in exactly one class, every forward too; Naimi-Trehel pure sends
/// nothing on other locks, while hilock's R/U/W accesses do take an entry.
#[test]
fn per_access_split_by_lock_adds_up() {
    for proto in [Proto::NaimiPure, Proto::HilockThesis, Proto::Hilock] {
        let st = token::run(&small(proto, 16, 5)).expect("run");
        for k in 0..5 {
            assert_eq!(
                st.msgs_by_class[0][k] + st.msgs_by_class[1][k],
                st.msgs[k],
                "{proto:?}: kind {k}"
            );
        }
        assert_eq!(
            st.forwards_by_class[0] + st.forwards_by_class[1],
            st.forwards,
            "{proto:?}: forwards"
        );
        let split: f64 = (0..2).flat_map(|c| st.class_kinds_per_access(c)).sum();
        assert!(
            (split - st.per_access()).abs() < 1e-9,
            "{proto:?}: {split} vs {}",
            st.per_access()
        );
        let entries: u64 = st.msgs_by_class[1].iter().sum();
        if proto == Proto::NaimiPure {
            assert_eq!(entries, 0, "Naimi-Trehel pure has one lock");
        } else {
            assert!(entries > 0, "{proto:?}: no entry-lock message");
            assert!(st.forwards_by_class[1] > 0, "{proto:?}: no entry forward");
        }
    }
}

/// The relay instruments of the forwarding rules (SPEC.md 1.6, "Forwarding"): the
/// thesis rule never routes along a pointer, ClassPointers does; idle relays' parent ages
/// are recorded for both lock classes, and the entry locks' token moves are counted.
#[test]
fn relay_instruments_see_pointers_only_under_a_pointer_rule() {
    let run16 = |p: Proto| token::run(&Config::thesis(p, 16, 10.0, 40, 1)).expect("run");
    let thesis = run16(Proto::HilockThesis);
    let pointers = run16(Proto::Hilock);
    assert_eq!(thesis.relay_via_pointer, 0);
    assert!(pointers.relay_via_pointer > 0);
    for st in [&thesis, &pointers] {
        assert!(st.forwards_by_state[0] > 0);
        let aged: u64 = st.relay_age.iter().flatten().sum();
        assert!(aged > 0 && aged <= st.forwards_by_state[0]);
        assert!(st.relay_age[1]
            .iter()
            .enumerate()
            .any(|(k, c)| k > 0 && *c > 0));
        assert!(st.token_moves[1] > 0 && st.token_moves[0] + st.token_moves[1] == st.msgs[2]);
    }
}
