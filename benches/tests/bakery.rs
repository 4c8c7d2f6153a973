//! The bakery in the simulator (`hilock_benches::bakery`; `docs/benchmarks.md`, "In the
//! simulator, against the token engine and a central lock server"): the kernel's bakery
//! clients over three simulated replicas, driven through the one harness, next to the token
//! engine on the same one-lock workload.

use hilock_benches::bakery::{self, Workload};
use hilock_harness::engines::bakery::{OPS_ACQUIRE, OPS_RELEASE, QUORUM, REPLICAS};
use hilock_kernel::bakery::Variant;

fn small(clients: usize, seed: u64) -> Workload {
    Workload {
        per_client: 10,
        seed,
        ..Workload::new(clients)
    }
}

/// The corrected bakery: the harness checks mutual exclusion after every grant (the run
/// fails at the first violation), and every grant was checked.
#[test]
fn corrected_bakery_never_has_two_clients_in_the_critical_section() {
    for c in [2, 4, 8] {
        for seed in 1..=3 {
            let w = small(c, seed);
            let b = bakery::run_bakery(&w, Variant::HILOCK)
                .unwrap_or_else(|e| panic!("C = {c}, seed {seed}: {e}"));
            assert!(b.counts.acquires >= (w.warmup_per_client + w.per_client) * c as u64);
            assert_eq!(
                b.sim.checked_grants, b.counts.acquires,
                "every grant checked"
            );
            assert_eq!(b.counts.lost, 0, "no ticks, no lease lost");
            // Accesses issued and completed in the window.
            let measured = b.sim.latencies_us.len() as u64;
            assert!(measured > 0 && measured <= w.per_client * c as u64);
        }
    }
}

/// The same check goes red without the tie-break of line 13: two clients that read the
/// same maximum draw the same number and both pass (the bakery design's first defect); so does the
/// literal text (which has no tie-break either), so it has no figures of its own.
#[test]
fn without_the_tie_break_two_clients_enter() {
    let broken = Variant {
        tie_break: false,
        ..Variant::HILOCK
    };
    for v in [broken, Variant::LITERAL] {
        for c in [2, 4] {
            let e = bakery::run_bakery(&small(c, 1), v)
                .map(|b| b.sim.checked_grants)
                .expect_err("no tie-break: a violation");
            assert!(e.contains("mutual exclusion"), "{e}");
        }
    }
}

/// One client, no jitter: the counts the kernel client's code gives. An acquire is seed
/// lines 1, 2, 4, 5, 6, 7 (`write_done`/`read_done` chain one operation to the next; with
/// `skip_self` and nobody else, line 8's loop enters at once): 6 quorum operations; a
/// release is line 19: 1. Each operation sends one request to each of the 3 replicas and
/// each replica answers every request (`Replica::step` pushes exactly one reply), so
/// 7 × 2 × 3 = 42 messages per acquire+release. Latency: an operation ends at its 2nd
/// answer, 2 message delays; an acquire that follows a release waits for the release's
/// write (the client does one operation at a time): 2 + 6 × 2 = 14 message delays.
#[test]
fn uncontended_acquire_costs_what_the_code_sends() {
    let w = Workload {
        jitter: 0.0,
        ..small(1, 1)
    };
    let b = bakery::run_bakery(&w, Variant::HILOCK).unwrap();
    let per = (OPS_ACQUIRE + OPS_RELEASE) * 2 * REPLICAS as u64;
    assert_eq!(per, 42);
    assert_eq!(b.sim.messages(), per * b.sim.lock_requests);
    assert_eq!(b.sim.msgs[0], b.sim.msgs[1], "one answer per request");
    assert_eq!(b.counts.acquire_ops, OPS_ACQUIRE * b.counts.acquires);
    assert_eq!(b.counts.sleeps, 0);
    // Reads: lines 2, 6, 7, three answers each.
    assert_eq!(b.counts.answers, 3 * REPLICAS as u64 * b.counts.acquires);
    assert!(
        b.sim.latencies_us.iter().all(|&l| l == 14_000),
        "{:?}",
        b.sim.latencies_us
    );
    assert_eq!(QUORUM, 2);
}

/// Every read returns the whole family, one entry per client that used the lock: the data
/// read per acquire grows with the clients (at least linearly here), and the polls too.
#[test]
fn data_read_per_acquire_grows_with_the_clients() {
    let rows: Vec<_> = [1, 2, 4, 8]
        .into_iter()
        .map(|c| {
            (
                c,
                bakery::run_bakery(&small(c, 1), Variant::HILOCK).unwrap(),
            )
        })
        .collect();
    let one = rows[0].1.entries_per_acquire();
    for pair in rows.windows(2) {
        let (a, b) = (&pair[0].1, &pair[1].1);
        assert!(b.entries_per_acquire() > a.entries_per_acquire());
        assert!(b.sleeps_per_acquire() > a.sleeps_per_acquire());
    }
    for (c, b) in &rows {
        eprintln!(
            "C = {c}: {:.1} entries per acquire",
            b.entries_per_acquire()
        );
        assert!(b.entries_per_acquire() >= *c as f64 * one);
    }
}

/// The token engine on the same workload: nothing to send with one client (the token is
/// there), fewer messages than the bakery with contention.
#[test]
fn token_engine_on_the_same_workload() {
    let t = bakery::run_token(&small(1, 1)).unwrap();
    assert_eq!(t.messages(), 0);
    assert!(t.lock_requests > 0);
    for c in [2, 4] {
        let row = bakery::compare(&small(c, 1)).unwrap();
        assert!(row.token.per_request() > 0.0);
        assert!(row.token.per_request() < row.bakery.messages_per_acquire());
        assert!(bakery::markdown(&[row]).contains(&format!("| {c} |")));
    }
}

/// The central server (etcd stand-in): 12 messages per acquire+release whatever the
/// contention (Lock, 2 appends, 2 acks, Grant; Unlock, 2 appends, 2 acks, UnlockAck; a
/// waiter's Grant is its own acquire's), and without jitter an uncontended acquire that
/// follows a release takes 4 (the UnlockAck) + 4 message delays.
#[test]
fn central_server_costs_twelve_messages() {
    let w = Workload {
        jitter: 0.0,
        ..small(1, 1)
    };
    let z = bakery::run_central(&w).unwrap();
    assert_eq!(z.messages(), 12 * z.lock_requests);
    assert!(
        z.latencies_us.iter().all(|&l| l == 8_000),
        "{:?}",
        z.latencies_us
    );
    for c in [2, 4, 8] {
        let z = bakery::run_central(&small(c, 1)).unwrap();
        assert_eq!(
            z.checked_grants as usize,
            (5 + 10) * c,
            "every grant checked"
        );
        // Messages in the window: those of the window's requests, give or take the ones in
        // flight at its ends.
        let per = z.per_request();
        assert!((per - 12.0).abs() < 0.5, "C = {c}: {per}");
    }
}
