//! The bakery (the bakery design) over 3 real `redis-server` replicas that each test starts itself
//! on free 127.0.0.1 ports (no persistence, a temporary directory each) and kills at the
//! end. Without `redis-server` every test prints one SKIP line and passes.
//!
//! The history checker: every client records `invoke`, `grant` (with its fencing token),
//! `release` and `fail`/`crash` under one mutex with a monotonic timestamp; the checker
//! fails on two grants without a release between them (overlapping holds), on a token that
//! does not increase, and on an invoke that never got a grant or a failure (a lost request).

use hilock_kernel::bakery::{Cell, Family, Reply, Request, Row, Ts, Value};
use hilock_runtime::bakery::redis::{key, RedisReplica};
use hilock_runtime::bakery::{BakeryLock, Error, Options, ReplicaBackend, Scope};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "../../runtime/tests/support/etcd.rs"]
mod etcd;
#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
use etcd::start_etcd;

fn have_redis() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(|| {
        let ok = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "SKIP bakery_redis: redis-server is not installed (apt-get install redis-server)"
            );
        }
        ok
    })
}

/// `n` redis-servers on free loopback ports; killed on drop.
struct Replicas {
    children: Vec<Option<Child>>,
    addrs: Vec<String>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Replicas {
    fn start(n: usize) -> Replicas {
        let mut r = Replicas {
            children: Vec::new(),
            addrs: Vec::new(),
            _dirs: Vec::new(),
        };
        for _ in 0..n {
            let port = ports::free_port();
            let dir = tempfile::tempdir().unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            r.children.push(Some(child));
            r.addrs.push(format!("127.0.0.1:{port}"));
            r._dirs.push(dir);
        }
        for a in &r.addrs {
            let t = Instant::now();
            while std::net::TcpStream::connect(a).is_err() {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "redis-server at {a} did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        r
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Invoke,
    Grant(u64),
    Release,
    Fail,
    Crash,
}

#[derive(Clone, Default)]
struct History(Arc<Mutex<Vec<(Instant, u16, Ev)>>>);

impl History {
    fn record(&self, client: u16, ev: Ev) {
        let mut h = self.0.lock().unwrap();
        h.push((Instant::now(), client, ev));
    }

    fn grants(&self) -> usize {
        let h = self.0.lock().unwrap();
        h.iter().filter(|e| matches!(e.2, Ev::Grant(_))).count()
    }

    /// The violations of the history (empty: correct).
    fn check(&self) -> Vec<String> {
        let h = self.0.lock().unwrap();
        let mut v = Vec::new();
        let mut holder: Option<(u16, u64)> = None;
        let mut last_fence = 0u64;
        let mut open: std::collections::HashMap<u16, i64> = Default::default();
        for (i, &(_, c, ev)) in h.iter().enumerate() {
            match ev {
                Ev::Invoke => *open.entry(c).or_default() += 1,
                Ev::Grant(f) => {
                    *open.entry(c).or_default() -= 1;
                    if let Some((other, of)) = holder {
                        v.push(format!(
                            "event {i}: client {c} granted (fence {f}) while client {other} holds (fence {of})"
                        ));
                    }
                    if f <= last_fence {
                        v.push(format!("event {i}: fence {f} after fence {last_fence}"));
                    }
                    last_fence = last_fence.max(f);
                    holder = Some((c, f));
                }
                Ev::Release | Ev::Crash => {
                    if holder.is_some_and(|(h, _)| h == c) {
                        holder = None;
                    } else if ev == Ev::Release {
                        v.push(format!(
                            "event {i}: client {c} releases what it does not hold"
                        ));
                    }
                }
                Ev::Fail => *open.entry(c).or_default() -= 1,
            }
        }
        for (c, n) in open {
            if n != 0 {
                v.push(format!(
                    "client {c}: {n} request(s) without a grant or a failure"
                ));
            }
        }
        v
    }
}

fn opts(id: u16, lease_ms: u64) -> Options {
    Options {
        lease: Duration::from_millis(lease_ms),
        call_timeout: Duration::from_millis(300),
        ..Options::new(id)
    }
}

/// One client: `rounds` times acquire, hold `hold`, release.
async fn worker(
    name: &'static str,
    addrs: Vec<String>,
    o: Options,
    rounds: usize,
    hold: Duration,
    jitter: Duration,
    h: History,
) -> Result<(), Error> {
    let mut lock = if jitter.is_zero() {
        BakeryLock::<3>::redis(name, &addrs, o)?
    } else {
        BakeryLock::<3>::new(name, jittery(&addrs, jitter), o)?
    };
    for _ in 0..rounds {
        h.record(o.client_id, Ev::Invoke);
        let t = match lock.acquire(Duration::from_secs(20)).await {
            Ok(t) => t,
            Err(e) => {
                h.record(o.client_id, Ev::Fail);
                return Err(e);
            }
        };
        h.record(o.client_id, Ev::Grant(t.as_u64()));
        lock.hold(Box::pin(tokio::time::sleep(hold))).await?;
        h.record(o.client_id, Ev::Release);
        lock.release(Duration::from_secs(10)).await?;
    }
    Ok(())
}

/// A replica whose every request waits a pseudo-random 0..`max` before it is sent, so
/// that requests overtake each other (the model's arbitrary message delay).
#[derive(Debug)]
struct Jittery {
    inner: Arc<RedisReplica>,
    max_us: u64,
    seq: std::sync::atomic::AtomicU64,
}

impl ReplicaBackend for Jittery {
    fn addr(&self) -> &str {
        self.inner.addr()
    }
    fn call(
        self: Arc<Self>,
        lock: Arc<Scope>,
        req: Request,
    ) -> futures_util::future::BoxFuture<
        'static,
        Result<hilock_runtime::bakery::store::LockReply, hilock_runtime::bakery::ReplicaError>,
    > {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let x = (n ^ (self.max_us << 7)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33;
        let delay = Duration::from_micros(x % self.max_us.max(1));
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            self.inner.clone().call(lock, req).await
        })
    }
}

fn jittery(addrs: &[String], max: Duration) -> Vec<Arc<dyn ReplicaBackend>> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            Arc::new(Jittery {
                inner: RedisReplica::new(a).unwrap(),
                max_us: max.as_micros() as u64,
                seq: std::sync::atomic::AtomicU64::new(i as u64 * 1000),
            }) as Arc<dyn ReplicaBackend>
        })
        .collect()
}

fn bounded<F: std::future::Future>(secs: u64, f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(secs), f)
            .await
            .expect("test ran out of time")
    })
}

/// The most a request to a replica is delayed in the exclusion test.
const JITTER: Duration = Duration::from_millis(4);

#[test]
fn four_clients_exclude_each_other_on_three_replicas() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let h = History::default();
    bounded(60, async {
        let tasks: Vec<_> = (1..=5u16)
            .map(|id| {
                tokio::spawn(worker(
                    "excl",
                    reps.addrs.clone(),
                    opts(id, 2000),
                    8,
                    Duration::from_millis(3),
                    JITTER,
                    h.clone(),
                ))
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    });
    assert_eq!(h.grants(), 40);
    assert_eq!(h.check(), Vec::<String>::new());
}

#[test]
fn a_killed_replica_is_tolerated() {
    if !have_redis() {
        return;
    }
    let mut reps = Replicas::start(3);
    let h = History::default();
    let grants_before_kill = bounded(60, async {
        let tasks: Vec<_> = (1..=4u16)
            .map(|id| {
                tokio::spawn(worker(
                    "kill",
                    reps.addrs.clone(),
                    opts(id, 2000),
                    8,
                    Duration::from_millis(3),
                    Duration::ZERO,
                    h.clone(),
                ))
            })
            .collect();
        while h.grants() < 10 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let before = h.grants();
        reps.kill(2);
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        before
    });
    assert!(
        grants_before_kill < 32,
        "the replica died before the run ended"
    );
    assert_eq!(h.grants(), 32);
    assert_eq!(h.check(), Vec::<String>::new());
}

/// A client stopped (its task aborted) while holding: the next client gets the lock once
/// the lease has run out, not before.
#[test]
fn a_stopped_holder_is_freed_after_its_lease() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let h = History::default();
    let lease = 600;
    let (stopped_at, waited) = bounded(60, async {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (addrs, hh) = (reps.addrs.clone(), h.clone());
        let a = tokio::spawn(async move {
            let mut lock = BakeryLock::<3>::redis("stop", &addrs, opts(1, lease)).unwrap();
            hh.record(1, Ev::Invoke);
            let t = lock.acquire(Duration::from_secs(5)).await.unwrap();
            hh.record(1, Ev::Grant(t.as_u64()));
            let _ = tx.send(());
            lock.hold(Box::pin(std::future::pending::<()>())).await
        });
        rx.await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        a.abort();
        let _ = a.await;
        h.record(1, Ev::Crash);
        let stopped_at = Instant::now();
        let mut b = BakeryLock::<3>::redis("stop", &reps.addrs, opts(2, lease)).unwrap();
        h.record(2, Ev::Invoke);
        let t = b.acquire(Duration::from_secs(10)).await.unwrap();
        h.record(2, Ev::Grant(t.as_u64()));
        let waited = stopped_at.elapsed();
        h.record(2, Ev::Release);
        b.release(Duration::from_secs(5)).await.unwrap();
        (stopped_at, waited)
    });
    let _ = stopped_at;
    // B must watch A's entry for EXPIRY_TICKS (1.3 leases) before passing it.
    assert!(
        waited >= Duration::from_millis(lease),
        "granted after {waited:?}, before the stopped holder's lease could run out"
    );
    assert!(
        waited < Duration::from_millis(3 * lease + 2000),
        "waited {waited:?}"
    );
    assert_eq!(h.check(), Vec::<String>::new());
}

/// A client stopped after it took a number (waiting behind a holder): once the holder
/// releases, the next client passes the stopped client's number after its lease.
#[test]
fn a_client_stopped_after_taking_a_number_is_passed_after_its_lease() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let h = History::default();
    let lease = 600;
    let waited = bounded(60, async {
        let mut b = BakeryLock::<3>::redis("num", &reps.addrs, opts(2, lease)).unwrap();
        h.record(2, Ev::Invoke);
        let t = b.acquire(Duration::from_secs(5)).await.unwrap();
        h.record(2, Ev::Grant(t.as_u64()));
        let (addrs, hh) = (reps.addrs.clone(), h.clone());
        let c = tokio::spawn(async move {
            let mut lock = BakeryLock::<3>::redis("num", &addrs, opts(3, lease)).unwrap();
            let r = lock.acquire(Duration::from_secs(30)).await;
            if let Ok(t) = r {
                hh.record(3, Ev::Grant(t.as_u64()));
            }
        });
        h.record(3, Ev::Invoke);
        // C draws its number and waits for B: stop it once its number is on two replicas.
        let addrs = reps.addrs.clone();
        let numbered = async move {
            loop {
                let mut on = 0;
                for a in &addrs {
                    let v: Option<String> = redis::cmd("HGET")
                        .arg(key("num", Family::Number))
                        .arg("3")
                        .query_async(&mut raw(a).await)
                        .await
                        .unwrap();
                    on += v.is_some_and(|v| v.contains(" I ")) as usize;
                }
                if on >= 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        b.hold(Box::pin(numbered)).await.unwrap();
        c.abort();
        let _ = c.await;
        h.record(3, Ev::Fail);
        h.record(2, Ev::Release);
        b.release(Duration::from_secs(5)).await.unwrap();
        let start = Instant::now();
        let mut d = BakeryLock::<3>::redis("num", &reps.addrs, opts(4, lease)).unwrap();
        h.record(4, Ev::Invoke);
        let t = d.acquire(Duration::from_secs(10)).await.unwrap();
        h.record(4, Ev::Grant(t.as_u64()));
        let waited = start.elapsed();
        h.record(4, Ev::Release);
        d.release(Duration::from_secs(5)).await.unwrap();
        waited
    });
    assert!(
        waited >= Duration::from_millis(lease / 2),
        "granted after {waited:?}: the stopped client's number was not waited for"
    );
    assert!(
        waited < Duration::from_millis(3 * lease + 2000),
        "waited {waited:?}"
    );
    assert_eq!(h.check(), Vec::<String>::new());
}

#[test]
fn unreachable_replicas_are_named_after_the_timeout() {
    // Ports nobody listens on (bound, then released).
    let dead: Vec<String> = (0..3)
        .map(|_| {
            let p = ports::free_port();
            format!("127.0.0.1:{p}")
        })
        .collect();
    let (err, elapsed, retries) = bounded(30, async {
        let mut lock = BakeryLock::<3>::redis("gone", &dead, opts(1, 1000)).unwrap();
        let t = Instant::now();
        let e = lock.acquire(Duration::from_millis(800)).await.unwrap_err();
        (e, t.elapsed(), lock.stats().retries)
    });
    let Error::NoQuorum {
        need, got, missing, ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err}");
    };
    assert_eq!((*need, *got), (2, 0));
    for a in &dead {
        assert!(
            err.to_string().contains(a.as_str()),
            "{err} does not name {a}"
        );
    }
    assert_eq!(missing.len(), 3);
    assert!(retries > 0, "no retry before giving up");
    assert!(elapsed < Duration::from_millis(2500), "took {elapsed:?}");
}

#[test]
fn one_replica_short_of_quorum_is_named() {
    if !have_redis() {
        return;
    }
    let mut reps = Replicas::start(3);
    // Two dead replicas: a majority of 3 cannot be reached.
    reps.kill(1);
    reps.kill(2);
    let err = bounded(30, async {
        let mut lock = BakeryLock::<3>::redis("short", &reps.addrs, opts(1, 1000)).unwrap();
        lock.acquire(Duration::from_millis(600)).await.unwrap_err()
    });
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::NoQuorum {
                got: 1,
                need: 2,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains(&reps.addrs[1]) && text.contains(&reps.addrs[2]),
        "{text}"
    );
    assert!(!text.contains(&reps.addrs[0]), "{text}");
}

async fn raw(addr: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[test]
fn a_foreign_entry_is_reported_and_never_trusted() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    bounded(60, async {
        // Replica 0 holds a foreign value in client 7's number column.
        let mut c0 = raw(&reps.addrs[0]).await;
        let _: () = redis::cmd("HSET")
            .arg(key("foreign", Family::Number))
            .arg("7")
            .arg("999999 not ours")
            .query_async(&mut c0)
            .await
            .unwrap();
        // A client reads around it (replicas 1 and 2 make the quorum) and reports it.
        let mut lock = BakeryLock::<3>::redis("foreign", &reps.addrs, opts(1, 1000)).unwrap();
        let t = lock.acquire(Duration::from_secs(5)).await.unwrap();
        assert_eq!(t.number, 1, "the foreign number was not counted");
        lock.release(Duration::from_secs(5)).await.unwrap();
        let m = &lock.stats().malformed;
        assert!(
            m.iter()
                .any(|s| s.contains(&reps.addrs[0]) && s.contains("'7'")),
            "{m:?}"
        );
        // A write to that field is refused by the script (reported as foreign), not applied.
        let r0 = RedisReplica::new(&reps.addrs[0]).unwrap();
        let w = Request::Write {
            op: 1,
            row: Row(0),
            family: Family::Number,
            col: 7,
            cell: Cell {
                ts: Ts(1_000_000),
                val: Some(Value::Int(1)),
            },
        };
        let refused = ReplicaBackend::<1>::call(r0.clone(), Scope::lock("foreign"), w).await;
        assert!(
            matches!(&refused, Err(hilock_runtime::bakery::ReplicaError::Malformed(m)) if m.contains("hilock-foreign")),
            "{refused:?}"
        );
        let v: String = redis::cmd("HGET")
            .arg(key("foreign", Family::Number))
            .arg("7")
            .query_async(&mut c0)
            .await
            .unwrap();
        assert_eq!(v, "999999 not ours");
        // With a second replica foreign too, no read quorum: one error naming both.
        let mut c1 = raw(&reps.addrs[1]).await;
        let _: () = redis::cmd("HSET")
            .arg(key("foreign", Family::Number))
            .arg("9")
            .arg("v1 x I 1")
            .query_async(&mut c1)
            .await
            .unwrap();
        let mut two = BakeryLock::<3>::redis("foreign", &reps.addrs, opts(2, 1000)).unwrap();
        let err = two.acquire(Duration::from_millis(600)).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, Error::NoQuorum { .. }), "{text}");
        assert!(
            text.contains(&reps.addrs[0]) && text.contains(&reps.addrs[1]),
            "{text}"
        );
        assert!(text.contains("malformed"), "{text}");
    });
}

/// `hilock bakery lock` names a foreign entry on one replica of three once, on one line
/// naming the replica and the entry, and runs its command (the other two replicas make
/// the quorum).
#[test]
fn the_lock_command_names_a_foreign_entry_once() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    bounded(20, async {
        let mut c0 = raw(&reps.addrs[0]).await;
        let _: () = redis::cmd("HSET")
            .arg(key("fl", Family::Number))
            .arg("7")
            .arg("999999 not ours")
            .query_async(&mut c0)
            .await
            .unwrap();
    });
    let out = bakery_lock(&reps.addrs.join(","), "fl", 1, 1000, "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let want = format!(
        "hilock: lock fl: replica {}: malformed or foreign entry: hilock:bakery:fl:number: \
         number field '7' = '999999 not ours'; its answer counts as missing",
        reps.addrs[0]
    );
    assert_eq!(err.trim_end(), want);
}

/// The Lua script's last-write-wins equals the kernel's `Cell::merge` on every ordered
/// pair of cells with timestamps 1..2 (tombstones, numbers and released numbers).
#[test]
fn the_script_keeps_the_cell_the_kernel_would_keep() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(1);
    let mut cells = Vec::new();
    for ts in 1..=2 {
        for val in [
            None,
            Some(Value::Int(1)),
            Some(Value::Int(2)),
            Some(Value::Released(1)),
            Some(Value::Released(2)),
        ] {
            cells.push(Cell { ts: Ts(ts), val });
        }
    }
    bounded(60, async {
        let r = RedisReplica::new(&reps.addrs[0]).unwrap();
        let mut col = 0u16;
        for a in &cells {
            for b in &cells {
                col = col % 31 + 1;
                let lock: Arc<str> =
                    format!("lww{}", a.ts.0 * 100 + b.ts.0 * 10 + col as u32).into();
                let lock = Scope::lock(&format!("{lock}-{:?}-{:?}", a, b).replace(' ', ""));
                for c in [a, b] {
                    let w = Request::Write {
                        op: 1,
                        row: Row(0),
                        family: Family::Number,
                        col,
                        cell: *c,
                    };
                    assert!(matches!(
                        ReplicaBackend::<1>::call(r.clone(), lock.clone(), w).await,
                        Ok(Reply::Ack { .. })
                    ));
                }
                let read = Request::Read {
                    op: 2,
                    family: Family::Number,
                    row: Some(Row(0)),
                };
                let Ok(Reply::Answer { rows, .. }) =
                    ReplicaBackend::<1>::call(r.clone(), lock.clone(), read).await
                else {
                    panic!("no answer");
                };
                assert_eq!(
                    rows[0][col as usize],
                    Cell::merge(Some(*a), Some(*b)),
                    "write {a} then {b}"
                );
            }
        }
    });
}

#[test]
fn the_command_holds_the_lock_and_exports_the_fence() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let hilock = env!("CARGO_BIN_EXE_hilock");
    let run = |id: &str, script: &str| {
        Command::new(hilock)
            .args([
                "bakery",
                "lock",
                "cli",
                "--replicas",
                &reps.addrs.join(","),
                "--client-id",
                id,
            ])
            .args([
                "--lease-ms",
                "1000",
                "--timeout-ms",
                "5000",
                "--",
                "sh",
                "-c",
                script,
            ])
            .output()
            .unwrap()
    };
    let out = run("3", "echo $HILOCK_FENCE; exit 7");
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    // Ticket (1, 3): number 1, client 3.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        ((1u64 << 16) | 3).to_string()
    );
    // The ticket was given back: the next one is larger.
    let out = run("2", "echo $HILOCK_FENCE");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        ((2u64 << 16) | 2).to_string()
    );
}

#[test]
fn the_command_names_the_missing_replicas_and_exits_2() {
    let dead: Vec<String> = (0..3)
        .map(|_| {
            let p = ports::free_port();
            format!("127.0.0.1:{p}")
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args([
            "bakery",
            "lock",
            "x",
            "--replicas",
            &dead.join(","),
            "--client-id",
            "1",
        ])
        .args(["--timeout-ms", "500", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(dead.iter().all(|a| err.contains(a.as_str())), "{err}");
}

/// `hilock bakery lock` waits for a majority of replicas that do not answer until its
/// `--timeout-ms`, in the client id's registration too: two of three replicas paused
/// (SIGSTOP) for 1.5 s, well inside a 10 s timeout, and the command runs once they are
/// back. (It gave up after one 500 ms round, about 1 s, with exit 2.) After 1 s of waiting
/// it says so in one line, as a queue worker does (before, it waited silently).
#[test]
fn registration_waits_for_paused_replicas_until_the_timeout() {
    if !have_redis() {
        return;
    }
    let r = Replicas::start(3);
    let pids = stop_first(&r, 2);
    let mut child = bakery_lock(&r.addrs.join(","), "paused", 5, 2000, "echo granted")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "still waiting");
    continue_all(&pids);
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "exits within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "granted");
    let err = String::from_utf8_lossy(&out.stderr);
    let waits: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("waiting for a majority of the replicas"))
        .collect();
    assert_eq!(waits.len(), 1, "{err}");
    assert!(waits[0].starts_with("hilock: lock paused: "), "{err}");
}

/// A client waiting in line whose registration runs out while two replicas of three are
/// paused for longer than its lease waits in line again as a new client, one lease later,
/// once a majority answers, and runs its command within its `--timeout-ms`. Before, it
/// exited 2 ("the registration of client id 2 was not renewed in time") although its
/// timeout had 7 s left (`docs/cli.md`, "`hilock bakery lock`").
#[test]
fn a_waiting_client_outlives_a_majority_outage_longer_than_its_lease() {
    if !have_redis() {
        return;
    }
    let r = Replicas::start(3);
    let addrs = r.addrs.join(",");
    let mut holder = bakery_lock(&addrs, "outage", 1, 1000, "echo held; sleep 1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert_eq!(
        first_line(&mut holder, Duration::from_secs(10)).trim(),
        "held"
    );
    let mut waiter = bakery_lock(&addrs, "outage", 2, 1000, "echo granted")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pids = stop_first(&r, 2);
    std::thread::sleep(Duration::from_millis(2500));
    let during = waiter.try_wait().unwrap();
    continue_all(&pids);
    let _ = holder.wait();
    let t = Instant::now();
    while during.is_none() && waiter.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "exits within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = waiter.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "granted");
    assert!(err.contains("waits in line again"), "{err}");
}

/// Stops (SIGSTOP) the first `n` replicas of `r`; their pids, for [`continue_all`].
fn stop_first(r: &Replicas, n: usize) -> Vec<u32> {
    let pids: Vec<u32> = r.children[..n]
        .iter()
        .map(|c| c.as_ref().unwrap().id())
        .collect();
    for &p in &pids {
        signal(p, "-STOP");
    }
    pids
}

/// Continues (SIGCONT) the processes `pids`.
fn continue_all(pids: &[u32]) {
    for &p in pids {
        signal(p, "-CONT");
    }
}

/// One replica of three paused (SIGSTOP): a quorum still answers, so the lock is taken as
/// if all were up, even with a 500 ms lease. The registration waited for every replica's
/// answer (or its 500 ms call timeout) at each renewal, so with a 500 ms or 1,000 ms lease
/// the registration lapsed and the lock failed, and with the default lease it took 2 s.
/// Each call must succeed; the fastest of up to three calls a lease must take less than
/// 1.8 s (about 1 s on an idle machine): a descheduled call can overrun that once, a
/// client that waits at each renewal overruns it every time.
#[test]
fn one_paused_replica_of_three_costs_nothing() {
    if !have_redis() {
        return;
    }
    let r = Replicas::start(3);
    let paused = r.children[1].as_ref().unwrap().id();
    signal(paused, "-STOP");
    let mut times = Vec::new();
    for (lease, first_id) in [(500, 6), (2000, 7)] {
        for attempt in 0..3u16 {
            let name = format!("onepaused{lease}-{attempt}");
            let id = first_id + 2 * attempt;
            let t = Instant::now();
            let out = bakery_lock(&r.addrs.join(","), &name, id, lease, "echo granted")
                .output()
                .unwrap();
            let took = t.elapsed();
            times.push((lease, took));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "lease {lease}: {err}");
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "granted");
            if took < Duration::from_millis(1800) {
                break;
            }
        }
    }
    signal(paused, "-CONT");
    eprintln!("one replica of three paused: (lease, lock and command) took {times:?}");
    for lease in [500, 2000] {
        let fastest = times.iter().filter(|t| t.0 == lease).map(|t| t.1).min();
        assert!(
            fastest.is_some_and(|t| t < Duration::from_millis(1800)),
            "took {times:?}"
        );
    }
}

/// A timeout says in words where the client waited, not the kernel's `Phase` in Rust
/// syntax (a lock behind another client's hold: "waiting for client 3, whose number comes
/// first"); a queue worker with no item says that no item could be taken (`docs/cli.md`, "`hilock bakery queue`").
#[test]
fn timeouts_say_where_the_client_waited_in_words() {
    if !have_redis() {
        return;
    }
    let r = Replicas::start(3);
    let addrs = r.addrs.join(",");
    let mut holder = bakery_lock(&addrs, "words", 3, 2000, "echo held; sleep 3")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        first_line(&mut holder, Duration::from_secs(10)).trim(),
        "held"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "lock", "words", "--replicas", &addrs])
        .args(["--client-id", "4", "--timeout-ms", "500", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // (Most often "waiting for client 3, whose number comes first"; a loaded machine may
    // stop it in another phase, which is said in words too.)
    assert!(err.contains("lock not granted within"), "{err}");
    assert!(!err.contains('{') && !err.contains("Wait"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "queue", "work", "empty", "--replicas", &addrs])
        .args(["--client-id", "5", "--timeout-ms", "500", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no item could be taken within"), "{err}");
    assert!(!err.contains("Scan"), "{err}");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// The bakery's cost as clients grow (`docs/benchmarks.md`, "Over 3 local `redis-server`
/// replicas"): round trips (quorum operations) and latency per acquire as clients grow,
/// over 3 fresh local replicas, R = W = 2, hold 1 ms, no pause between rounds.
/// `cargo test -p hilock --test bakery_redis bakery_scaling -- --ignored --nocapture`
#[test]
#[ignore = "measurement: prints a table for docs/benchmarks.md"]
fn bakery_scaling() {
    if !have_redis() {
        return;
    }
    println!("| clients | acquires | round trips / acquire (mean) | sleeps / acquire | latency p50 | latency p99 | acquires/s |");
    println!("|---|---|---|---|---|---|---|");
    for clients in [1u16, 2, 4, 8] {
        let reps = Replicas::start(3);
        let rounds = 25usize;
        let started = Instant::now();
        let results = bounded(300, async {
            let tasks: Vec<_> = (1..=clients)
                .map(|id| {
                    let addrs = reps.addrs.clone();
                    tokio::spawn(async move {
                        let mut lock =
                            BakeryLock::<3>::redis("bench", &addrs, opts(id, 2000)).unwrap();
                        // Warm-up: connections and the start-up read of the entries.
                        lock.acquire(Duration::from_secs(60)).await.unwrap();
                        lock.release(Duration::from_secs(10)).await.unwrap();
                        let mut v = Vec::new();
                        for _ in 0..rounds {
                            let (ops, sleeps) = (lock.stats().ops, lock.stats().sleeps);
                            let t = Instant::now();
                            lock.acquire(Duration::from_secs(60)).await.unwrap();
                            let lat = t.elapsed();
                            let rt = lock.stats().ops - ops;
                            let sl = lock.stats().sleeps - sleeps;
                            lock.hold(Box::pin(tokio::time::sleep(Duration::from_millis(1))))
                                .await
                                .unwrap();
                            lock.release(Duration::from_secs(10)).await.unwrap();
                            v.push((lat, rt, sl));
                        }
                        v
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        });
        let wall = started.elapsed().as_secs_f64();
        let n = results.len();
        let mut lats: Vec<Duration> = results.iter().map(|r| r.0).collect();
        lats.sort();
        let rt = results.iter().map(|r| r.1).sum::<u64>() as f64 / n as f64;
        let sl = results.iter().map(|r| r.2).sum::<u64>() as f64 / n as f64;
        let p = |q: f64| lats[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1000.0;
        println!(
            "| {clients} | {n} | {rt:.1} | {sl:.1} | {:.2} ms | {:.2} ms | {:.0} |",
            p(0.5),
            p(0.99),
            n as f64 / wall
        );
    }
}

/// Kills a child process on drop (the test never leaves one running).
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

/// A killed wrapper takes its command with it: `hilock bakery lock` runs the command in
/// its own process group with SIGKILL as its parent-death signal, and the lease watchdog
/// SIGKILLs the whole group when the wrapper's end of its pipe closes; so after SIGKILL of
/// the wrapper the command and a process it started in the background are gone (or
/// zombies nobody reaped) within a second — long before the wrapper's lease runs out and
/// another client is granted the lock. Before, the command ran on for its whole duration
/// while the lock passed on; with the parent-death signal alone, its background process.
#[test]
fn a_killed_wrapper_takes_its_command_with_it() {
    if !have_redis() {
        return;
    }
    use std::io::BufRead;
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let mut a = Reap(
        Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["bakery", "lock", "killed", "--replicas", &addrs])
            .args([
                "--client-id",
                "1",
                "--lease-ms",
                "2000",
                "--timeout-ms",
                "10000",
            ])
            .args(["--", "sh", "-c", "sleep 30 & echo $! $$; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = a.0.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    let pids: Vec<i32> = line
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2, "{line:?}");
    signal(a.0.id(), "-KILL");
    let _ = a.0.wait();
    let t = Instant::now();
    while pids.iter().any(|&p| running(p)) {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the command or its background process outlived its killed wrapper: {:?}",
            pids.iter().filter(|&&p| running(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `pid` runs: it exists and is not a zombie (whose parent, a dead wrapper, may
/// never reap it).
fn running(pid: i32) -> bool {
    hilock_runtime::proc::stat(pid).is_some_and(|(s, _, _)| s != 'Z' && s != 'X')
}

/// `hilock bakery lock NAME --replicas R --client-id ID --lease-ms LEASE --timeout-ms 10000
/// -- sh -c SCRIPT ARGS…`.
fn bakery_lock(addrs: &str, name: &str, id: u16, lease_ms: u64, script: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hilock"));
    c.args(["bakery", "lock", name, "--replicas", addrs])
        .args(["--client-id", &id.to_string()])
        .args(["--lease-ms", &lease_ms.to_string(), "--timeout-ms", "10000"])
        .args(["--", "sh", "-c", script]);
    c
}

/// Reads the first line of `child`'s stdout within `limit`.
fn first_line(child: &mut Child, limit: Duration) -> String {
    use std::io::BufRead;
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(limit).expect("a first line in time")
}

/// Every client of a lock (and every worker of a queue) must count the same lease: a
/// client with a 500 ms lease passed the entry of one holding with a 2 s lease after 1.7 s
/// and both ran their commands at once. The first client sets the lease on the replicas;
/// one with another lease exits 2 with one line naming both, its command not run. The
/// same for a queue's workers.
#[test]
fn clients_with_another_lease_than_the_first_are_refused() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = bakery_lock(&addrs, "lease", 15, 2000, "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = bakery_lock(
        &addrs,
        "lease",
        16,
        500,
        &format!("touch {}", ran.display()),
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains("lease of 2000 ms") && err.contains("500 ms"),
        "{err}"
    );
    assert!(!ran.exists(), "the command ran");
    // The same lease as the first: granted.
    let out = bakery_lock(&addrs, "lease", 16, 2000, "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A queue: its first worker's lease.
    push_all(&reps.addrs, "leaseq", 2);
    let one = ["--max-items", "1"];
    let cmd = vec!["true".to_string()];
    let mut a = spawn_worker_with(&reps.addrs, "leaseq", 1, 600, &one, &cmd);
    let (code, err) = finish(&mut a, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    let mut b = spawn_worker_with(&reps.addrs, "leaseq", 2, 2000, &one, &cmd);
    let (code, err) = finish(&mut b, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("lease of 600 ms"), "{err}");
    // A lease entry that is no number of ms (foreign, or malformed): said so, not taken
    // for a lease to pass (before: "pass --lease-ms abc").
    bounded(10, async {
        for addr in &reps.addrs {
            let mut c = raw(addr).await;
            let _: () = redis::cmd("SET")
                .arg("hilock:bakery:foreignlease:lease")
                .arg("abc")
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    let out = bakery_lock(&addrs, "foreignlease", 17, 2000, "true")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("malformed or foreign entry") && !err.contains("--lease-ms abc"),
        "{err}"
    );
}

/// A queue worker killed (SIGKILL) while its command works on an item takes the command
/// with it, grandchildren too: the command runs as under `hilock lock` (its own process
/// group, the lease watchdog), so no second worker can take the item over while the first
/// one's command still runs. Before, the command ran on, orphaned, and another worker took
/// the item 2.6 s later.
#[test]
fn a_killed_worker_takes_its_command_with_it() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    push_all(&reps.addrs, "kq", 1);
    let dir = tempfile::tempdir().unwrap();
    let pidf = dir.path().join("pid");
    let cmd = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("sleep 30 & echo $! > {}; wait", pidf.display()),
    ];
    let mut w = spawn_worker_with(&reps.addrs, "kq", 1, 600, &[], &cmd);
    let t = Instant::now();
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidf)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the command starts");
        std::thread::sleep(Duration::from_millis(10));
    };
    w.0.kill().unwrap();
    let _ = w.0.wait();
    let killed = Instant::now();
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    };
    while !gone() {
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "the command's child still runs {:?} after its worker was killed",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A lock or queue name the replicas' keys cannot carry (empty, longer than 200 bytes, a
/// `:`) is refused before anything is written: one line, exit 2, and no key on the replica (the
/// lease agreement used to write `hilock:bakery::lease` first).
#[test]
fn a_bad_name_is_refused_before_anything_is_written() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(1);
    let addr = reps.addrs[0].clone();
    let long = "x".repeat(201);
    let length = "name must have 1 to 200 bytes";
    // A ':' would let two names share keys: lock 'q:jobs' and queue 'jobs'.
    for (name, args, words) in [
        ("lock ''", vec!["lock", "", "--client-id", "1"], length),
        ("lock LONG", vec!["lock", &long, "--client-id", "1"], length),
        (
            "queue work ''",
            vec!["queue", "work", "", "--client-id", "1"],
            length,
        ),
        (
            "lock q:jobs",
            vec!["lock", "q:jobs", "--client-id", "1"],
            "has a ':'",
        ),
        (
            "queue work a:b",
            vec!["queue", "work", "a:b", "--client-id", "1"],
            "has a ':'",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .arg("bakery")
            .args(&args)
            .args(["--replicas", &addr, "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err:?}");
        assert!(err.contains(words), "{name}: {err}");
    }
    let keys: Vec<String> = bounded(10, async {
        let mut c = raw(&addr).await;
        redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut c)
            .await
            .unwrap()
    });
    assert_eq!(keys, Vec::<String>::new());
}

/// A replica named twice would count twice toward a majority (one live server of three
/// names granted a lock): `--replicas` naming one server twice, by the same text or by
/// two names of one address, exits 2 with one line before anything is written.
#[test]
fn a_replica_named_twice_is_refused() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    for (replicas, says) in [
        (
            format!("127.0.0.1:{port},127.0.0.1:{port},127.0.0.1:1"),
            "named twice",
        ),
        (
            format!("localhost:{port},127.0.0.1:{port},127.0.0.1:1"),
            "the same replica",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args([
                "bakery",
                "lock",
                "twice",
                "--replicas",
                &replicas,
                "--",
                "true",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{replicas}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{replicas}: {err:?}");
        assert!(err.contains(says), "{replicas}: {err}");
    }
}

/// A client id in use is refused: while one `hilock bakery lock --client-id 1` holds the
/// lock, a second with id 1 exits 78 with one line naming the id, and its command never
/// runs; once the first ends (and gives its registration back) id 1 is granted at once.
/// After SIGKILL of a holder, a restarted client with its id is refused until the killed
/// run's registration (one lease) ran out, and granted after.
#[test]
fn a_client_id_in_use_is_refused_until_its_registration_ends() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("second.ran");
    let second = format!("touch {}", ran.display());
    let mut first = Reap(
        bakery_lock(&addrs, "dup", 1, 1000, "echo holding; sleep 2")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(
        first_line(&mut first.0, Duration::from_secs(10)).trim(),
        "holding"
    );
    let t = Instant::now();
    let out = bakery_lock(&addrs, "dup", 1, 1000, &second)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    // A running holder renews: the line does not promise the id back at a time.
    assert!(
        err.contains("client id 1 is in use") && err.contains("renewing its registration"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(!ran.exists(), "the second client's command ran");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "refused at once: {:?}",
        t.elapsed()
    );
    assert!(
        first.0.try_wait().unwrap().is_none(),
        "the first still holds"
    );
    assert_eq!(first.0.wait().unwrap().code(), Some(0));
    let out = bakery_lock(&addrs, "dup", 1, 1000, &second)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ran.exists());

    // A killed holder's registration runs out after its lease; not before.
    let mut killed = Reap(
        bakery_lock(&addrs, "dup", 1, 1000, "echo holding; exec sleep 30")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(
        first_line(&mut killed.0, Duration::from_secs(10)).trim(),
        "holding"
    );
    signal(killed.0.id(), "-KILL");
    let _ = killed.0.wait();
    let t = Instant::now();
    let out = bakery_lock(&addrs, "dup", 1, 1000, "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "right after the kill: {out:?}");
    let took = until_id_granted(&addrs, "dup", 1, "true", t);
    println!("restart with the id of a killed client: granted {took:?} after the kill");
}

/// A client that gives up (its `--timeout-ms` passes while another client holds the lock)
/// may leave requests on their way to a replica; landing after a new client with its id
/// wrote, such a request can win over that client's write and let two clients in (the
/// model's `a_restart_with_requests_in_flight_refuted`,
/// `spec/counterexamples/bakery-restart-in-flight.json`). So a given-up client does not give
/// its id's registration back: a new run with that id right after the give-up is refused
/// (exit 78, its command not run), and one after the registration ran out (a lease) is
/// granted once the holder is done.
#[test]
fn a_client_that_gave_up_keeps_its_id_until_its_registration_runs_out() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("second.ran");
    let mut holder = Reap(
        bakery_lock(&addrs, "gaveup", 1, 1000, "echo holding; sleep 2")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(
        first_line(&mut holder.0, Duration::from_secs(10)).trim(),
        "holding"
    );
    let gave_up = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "lock", "gaveup", "--replicas", &addrs])
        .args([
            "--client-id",
            "2",
            "--lease-ms",
            "1000",
            "--timeout-ms",
            "300",
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(gave_up.status.code(), Some(2), "{gave_up:?}");
    let t = Instant::now();
    let again = bakery_lock(
        &addrs,
        "gaveup",
        2,
        1000,
        &format!("touch {}", ran.display()),
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(
        again.status.code(),
        Some(78),
        "a run with the id of a client that gave up {:?} ago: {err}",
        t.elapsed()
    );
    assert!(err.contains("client id 2 is in use"), "{err}");
    assert!(!ran.exists(), "the refused run's command ran");
    let took = until_id_granted(&addrs, "gaveup", 2, &format!("touch {}", ran.display()), t);
    assert!(ran.exists());
    assert_eq!(holder.0.wait().unwrap().code(), Some(0));
    println!("id of a client that gave up: granted again {took:?} after the give-up");
}

/// Runs `hilock bakery lock NAME --client-id ID -- sh -c SCRIPT` every 100 ms while it is
/// refused for the id (exit 78), at most 5 s after `since`; asserts that it then exits 0
/// and returns when, after `since`.
fn until_id_granted(addrs: &str, name: &str, id: u16, script: &str, since: Instant) -> Duration {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let out = bakery_lock(addrs, name, id, 1000, script).output().unwrap();
        match out.status.code() {
            Some(0) => return since.elapsed(),
            Some(78) => assert!(since.elapsed() < Duration::from_secs(5), "still refused"),
            _ => panic!("{out:?}"),
        }
    }
}

/// The holds of a run, from the lines `start LOOP NS` and `end LOOP NS` its commands
/// append to a log: `(start, end, loop)`, and the pairs of holds that overlap.
fn overlapping_holds(log: &std::path::Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut open: std::collections::HashMap<String, u128> = Default::default();
    let mut holds: Vec<(u128, u128, String)> = Vec::new();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let [what, who, ns] = w[..] else { continue };
        let ns: u128 = ns.parse().unwrap();
        match what {
            "start" => {
                open.insert(who.to_string(), ns);
            }
            _ => {
                let s = open.remove(who).expect("an end after its start");
                holds.push((s, ns, who.to_string()));
            }
        }
    }
    holds.sort();
    let mut pairs = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if b.0 >= a.1 {
                break;
            }
            pairs.push(format!(
                "{} [{}, {}] and {} [{}, {}]",
                a.2, a.0, a.1, b.2, b.0, b.1
            ));
        }
    }
    (holds.len(), pairs)
}

/// Four loops of `hilock bakery lock` processes with client ids 1, 1, 2 and 3 (two loops
/// share an id) for 8 s, each command a hold of 20 ms that logs
/// its start and end: the history has 0 overlapping holds; the loops with id 1 are refused
/// (exit 78) while the other holds the id, and every other request exits 0.
#[test]
fn duplicate_client_ids_never_overlap_under_load() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("holds.log");
    let script = format!(
        "echo \"start $0 $(date +%s%N)\" >> {l}; sleep 0.02; echo \"end $0 $(date +%s%N)\" >> {l}",
        l = log.display()
    );
    let run_for = Duration::from_secs(8);
    let loops: Vec<_> = [1u16, 1, 2, 3]
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let (addrs, script) = (addrs.clone(), script.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                let mut codes: std::collections::BTreeMap<i32, usize> = Default::default();
                while t.elapsed() < run_for {
                    let out = bakery_lock(&addrs, "dups", id, 1000, &script)
                        .arg(format!("loop{i}"))
                        .output()
                        .unwrap();
                    *codes.entry(out.status.code().unwrap_or(-1)).or_default() += 1;
                    match out.status.code() {
                        Some(0) => {}
                        // Refused: the other loop with this id holds it; ask again soon.
                        Some(78) => std::thread::sleep(Duration::from_millis(20)),
                        _ => panic!("loop {i} (id {id}): {out:?}"),
                    }
                }
                (id, codes)
            })
        })
        .collect();
    let codes: Vec<_> = loops.into_iter().map(|l| l.join().unwrap()).collect();
    let (holds, pairs) = overlapping_holds(&log);
    println!(
        "ids 1, 1, 2, 3 for {run_for:?}: {holds} holds, exit codes {codes:?}, {} overlapping pairs",
        pairs.len()
    );
    assert!(
        pairs.is_empty(),
        "{} overlapping holds: {pairs:#?}",
        pairs.len()
    );
    assert!(holds >= 20, "too few holds to say anything: {holds}");
    for (id, c) in &codes {
        if *id != 1 {
            assert_eq!(
                c.keys().copied().collect::<Vec<_>>(),
                vec![0],
                "id {id}: {c:?}"
            );
        }
    }
    assert!(
        codes.iter().any(|(_, c)| c.contains_key(&78)),
        "the duplicated id was never refused: {codes:?}"
    );
}

/// The lease watchdog a paused wrapper cannot stop: `hilock bakery lock --lease-ms 1000`
/// SIGSTOPped for 3 leases while its command writes a heartbeat every 10 ms. The command is
/// dead before the wrapper's lease ends (its last heartbeat is less than 0.95 lease after
/// the stop — the lease, renewed before the stop, ends within one lease of it — while the
/// wrapper is still stopped); another client is granted the lock only after that last
/// heartbeat, and not before a lease after the stop; on SIGCONT the wrapper sees its lease
/// gone and exits 77 with one line saying so.
#[test]
fn a_paused_wrapper_s_command_dies_before_its_lease_ends() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let hb = dir.path().join("heartbeat");
    let granted = dir.path().join("granted");
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    };
    let lease = Duration::from_millis(1000);
    let beat = format!(
        "echo $$; while :; do date +%s%N >> {}; sleep 0.01; done",
        hb.display()
    );
    let mut a = Reap(
        bakery_lock(&addrs, "paused", 1, 1000, &beat)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let cmd_pid: i32 = first_line(&mut a.0, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("the command's pid");
    // Some renewals first.
    std::thread::sleep(Duration::from_millis(1500));
    signal(a.0.id(), "-STOP");
    let stopped = now_ns();
    let t = Instant::now();
    let b = bakery_lock(
        &addrs,
        "paused",
        2,
        1000,
        &format!("date +%s%N > {}", granted.display()),
    )
    .output()
    .unwrap();
    assert_eq!(b.status.code(), Some(0), "{b:?}");
    std::thread::sleep((3 * lease).saturating_sub(t.elapsed()));
    let dead_while_stopped = !running(cmd_pid);
    signal(a.0.id(), "-CONT");
    let last: u128 = std::fs::read_to_string(&hb)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .unwrap();
    let granted: u128 = std::fs::read_to_string(&granted)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let ms = |ns: u128| ns as f64 / 1e6;
    println!(
        "paused wrapper: last heartbeat {:.0} ms after the stop, the other client granted {:.0} ms after it",
        ms(last.saturating_sub(stopped)),
        ms(granted.saturating_sub(stopped))
    );
    assert!(
        dead_while_stopped,
        "the command ran on while its wrapper was stopped"
    );
    assert!(
        last < stopped + lease.as_nanos() * 95 / 100,
        "a heartbeat {:.0} ms after the stop: past the lease's end less the margin",
        ms(last - stopped)
    );
    assert!(
        granted > last,
        "the other client was granted while the command ran"
    );
    assert!(
        granted >= stopped + lease.as_nanos(),
        "the other client was granted before the stopped one's lease ended"
    );
    let err = exits_77_after_sigcont(&mut a.0);
    assert!(err.contains("lease ran out"), "{err}");
}

/// Waits (at most 5 s) for a resumed wrapper whose lease ran out while it was stopped;
/// asserts exit 77 with one line on stderr, and returns that line.
fn exits_77_after_sigcont(wrapper: &mut Child) -> String {
    let t = Instant::now();
    let status = loop {
        if let Some(s) = wrapper.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the wrapper did not end after SIGCONT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut wrapper.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(77), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    err
}

/// The lease watchdog is in a process group of its own, so stopping a whole job does not
/// stop it: `hilock bakery lock --lease-ms 1000`, started as the leader of its own process
/// group (as a shell starts a job), and its command's group are both SIGSTOPped — every
/// process of the run but the watchdog, as `kill -STOP -PGID` of both groups does — for 3
/// leases. The stopped command is dead (SIGKILLed by the watchdog, a zombie its stopped
/// wrapper has not reaped) before its lease ends — within one lease of the stop, as the
/// lease was renewed before it — and another client is granted only after that and not
/// before a lease after the stop; on SIGCONT the wrapper exits 77 with one line.
#[test]
fn a_stopped_job_s_command_dies_before_its_lease_ends() {
    if !have_redis() {
        return;
    }
    use std::os::unix::process::CommandExt;
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let granted = dir.path().join("granted");
    let lease = Duration::from_millis(1000);
    let mut a = Reap(
        bakery_lock(&addrs, "job", 1, 1000, "echo $$; exec sleep 30")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let cmd_pid: i32 = first_line(&mut a.0, Duration::from_secs(10))
        .trim()
        .parse()
        .expect("the command's pid");
    let wrapper = a.0.id() as i32;
    let group = |pid: i32| hilock_runtime::proc::stat(pid).map(|(_, _, g)| g);
    assert_eq!(group(wrapper), Some(wrapper), "the wrapper leads its group");
    assert_eq!(
        group(cmd_pid),
        Some(cmd_pid),
        "the command leads its own group"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let t = Instant::now();
    for g in [wrapper, cmd_pid] {
        let ok = Command::new("kill")
            .args(["-STOP", "--", &format!("-{g}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -STOP -{g}");
    }
    let other = std::thread::spawn({
        let (addrs, granted) = (addrs.clone(), granted.clone());
        move || {
            bakery_lock(
                &addrs,
                "job",
                2,
                1000,
                &format!("touch {}", granted.display()),
            )
            .output()
            .unwrap()
        }
    });
    let mut died = None;
    let mut granted_at = None;
    while t.elapsed() < 3 * lease {
        if died.is_none() && !running(cmd_pid) {
            died = Some(t.elapsed());
        }
        if granted_at.is_none() && granted.exists() {
            granted_at = Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for g in [wrapper, cmd_pid] {
        let _ = Command::new("kill")
            .args(["-CONT", "--", &format!("-{g}")])
            .status();
    }
    let b = other.join().unwrap();
    println!("stopped job: command dead {died:?} after the stop, the other client granted {granted_at:?} after it");
    assert_eq!(b.status.code(), Some(0), "{b:?}");
    let died = died.expect("the stopped command was never killed");
    let granted_at = granted_at.expect("the other client was never granted");
    assert!(
        died < lease,
        "the command died {died:?} after the stop: after its lease ended"
    );
    assert!(
        granted_at > died,
        "the other client was granted while the command lived"
    );
    assert!(
        granted_at >= lease,
        "the other client was granted {granted_at:?} after the stop, before the lease ended"
    );
    exits_77_after_sigcont(&mut a.0);
}

// ----- the work queue (`hilock bakery queue push|work`) --------------------------------

/// `hilock bakery queue push NAME ITEM`: the key it prints.
fn push_item(addrs: &[String], queue: &str, payload: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "queue", "push", queue, payload, "--replicas"])
        .arg(addrs.join(","))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(hilock_runtime::bakery::queue::valid_item_key(&key), "{key}");
    key
}

/// One replica of three paused (SIGSTOP): `hilock bakery queue push` returns once the two
/// others stored the item — waiting for the paused one only as long again as they took (at
/// least `LINGER`, 20 ms), not its 500 ms call timeout (before, every push took
/// 514–523 ms) — and both of them hold every item. The fastest of three pushes (each a new
/// process) must take under 300 ms.
#[test]
fn a_push_does_not_wait_for_a_paused_replica() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let paused = stop_first(&reps, 1);
    let mut times = Vec::new();
    let mut keys = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        keys.push(push_item(&reps.addrs, "fastpush", &format!("item {i}")));
        times.push(t.elapsed());
    }
    continue_all(&paused);
    eprintln!("pushes with one replica of three paused took {times:?}");
    let fastest = times.iter().min().unwrap();
    assert!(*fastest < Duration::from_millis(300), "{times:?}");
    for addr in &reps.addrs[1..] {
        for key in &keys {
            let stored: Option<String> = bounded(10, async {
                let mut c = raw(addr).await;
                redis::cmd("GET")
                    .arg(format!("hilock:bakery:q:fastpush:{key}:payload"))
                    .query_async(&mut c)
                    .await
                    .unwrap()
            });
            assert!(stored.is_some(), "{addr} lacks {key}");
        }
    }
}

/// One replica of three paused (SIGSTOP) from the start: a worker lists the queue, reads
/// the payloads and works the items without waiting for it (the first `R` listings, the
/// first payload), as the lock does (`one_paused_replica_of_three_costs_nothing`). With
/// each refresh of the window waiting for every replica (its 500 ms call timeout) six items
/// took the worker 4.2 s, now 0.8 s; the test allows 3 s from start to exit, and every item
/// is worked exactly once.
#[test]
fn a_worker_does_not_wait_for_a_paused_replica() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let paused = stop_first(&reps, 1);
    let pushed = push_all(&reps.addrs, "pausedq", 6);
    let t = Instant::now();
    let mut w = spawn_worker(&reps.addrs, "pausedq", 1, 2000, &logging(&log, 0));
    let (code, err) = finish(&mut w, Duration::from_secs(30));
    let took = t.elapsed();
    continue_all(&paused);
    eprintln!("six items with one replica of three paused took {took:?}");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// The command of the queue tests: appends `start KEY FENCE ITEM` to the log (`$1`), works
/// for `ms`, appends `end KEY FENCE`.
fn logging(log: &std::path::Path, ms: u32) -> Vec<String> {
    let script = format!(
        "echo \"start $HILOCK_ITEM_KEY $HILOCK_FENCE $HILOCK_ITEM\" >> \"$1\"; sleep {}; echo \"end $HILOCK_ITEM_KEY $HILOCK_FENCE\" >> \"$1\"",
        ms as f64 / 1000.0
    );
    vec![
        "sh".into(),
        "-c".into(),
        script,
        "sh".into(),
        log.display().to_string(),
    ]
}

/// A worker process (`hilock bakery queue work … --exit-when-empty`) in a process group of
/// its own, so that SIGSTOP can stop it together with its command; killed on drop.
struct WorkerProc(Child);

impl Drop for WorkerProc {
    fn drop(&mut self) {
        // The worker leads its process group (its command is in it): killpg, never the
        // `kill` program with a negative argument (procps' kill can read that otherwise).
        let _ = hilock_runtime::proc::signal_group(self.0.id() as i32, libc::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_worker(
    addrs: &[String],
    queue: &str,
    id: u16,
    lease_ms: u64,
    cmd: &[String],
) -> WorkerProc {
    spawn_worker_with(addrs, queue, id, lease_ms, &[], cmd)
}

fn spawn_worker_with(
    addrs: &[String],
    queue: &str,
    id: u16,
    lease_ms: u64,
    extra: &[&str],
    cmd: &[String],
) -> WorkerProc {
    use std::os::unix::process::CommandExt;
    let child = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "queue", "work", queue, "--replicas"])
        .arg(addrs.join(","))
        .args(["--client-id", &id.to_string()])
        .args(["--lease-ms", &lease_ms.to_string()])
        .args(["--exit-when-empty", "--timeout-ms", "30000"])
        .args(extra)
        .arg("--")
        .args(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    WorkerProc(child)
}

/// Waits (bounded) for a worker to exit; its status and stderr.
fn finish(w: &mut WorkerProc, within: Duration) -> (Option<i32>, String) {
    let t = Instant::now();
    let status = loop {
        if let Some(s) = w.0.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < within, "worker {} did not finish", w.0.id());
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = w.0.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).unwrap();
    }
    (status.code(), err)
}

/// The history of a queue run, checked: every pushed item has exactly one complete
/// execution (a `start` followed by its `end`, with the item's payload), no two executions of
/// one item overlap, and the fences of an item's executions increase; an item in
/// `taken_over` may also have one execution that never ended (its worker lost the lease:
/// the command was killed) before the complete one, with a smaller fence. Returns the
/// violations.
fn check_queue_log(
    log: &std::path::Path,
    pushed: &std::collections::HashMap<String, String>,
    taken_over: &[String],
) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut v = Vec::new();
    // Per item: (fence, ended) of each execution in start order.
    let mut runs: std::collections::HashMap<String, Vec<(u64, bool)>> = Default::default();
    for (i, line) in text.lines().enumerate() {
        let parts: Vec<&str> = line.splitn(4, ' ').collect();
        let (kind, key, fence) = match parts[..] {
            [k, key, f, ..] => (k, key.to_string(), f.parse::<u64>().unwrap_or(0)),
            _ => {
                v.push(format!("line {i}: '{line}'"));
                continue;
            }
        };
        let Some(payload) = pushed.get(&key) else {
            v.push(format!("line {i}: unknown item {key}"));
            continue;
        };
        let r = runs.entry(key.clone()).or_default();
        match kind {
            "start" => {
                if parts.get(3) != Some(&payload.as_str()) {
                    v.push(format!(
                        "line {i}: {key} ran with {:?}, pushed {payload:?}",
                        parts.get(3)
                    ));
                }
                if let Some(&(f, ended)) = r.last() {
                    if !ended && !taken_over.contains(&key) {
                        v.push(format!(
                            "line {i}: {key} started again while running (fence {f})"
                        ));
                    }
                    if fence <= f {
                        v.push(format!("line {i}: {key} fence {fence} after {f}"));
                    }
                }
                r.push((fence, false));
            }
            "end" => match r.last_mut() {
                Some((f, ended)) if *f == fence && !*ended => *ended = true,
                _ => v.push(format!(
                    "line {i}: {key} ends an execution that is not running"
                )),
            },
            _ => v.push(format!("line {i}: '{line}'")),
        }
    }
    for key in pushed.keys() {
        let r = runs.get(key).cloned().unwrap_or_default();
        let complete = r.iter().filter(|e| e.1).count();
        let killed = r.len() - complete;
        let allowed = if taken_over.contains(key) { 1 } else { 0 };
        if complete != 1 || killed > allowed || r.last().is_some_and(|e| !e.1) {
            v.push(format!(
                "{key}: {complete} complete and {killed} unfinished execution(s)"
            ));
        }
    }
    v
}

fn push_all(addrs: &[String], queue: &str, n: usize) -> std::collections::HashMap<String, String> {
    (0..n)
        .map(|i| {
            let payload = format!("job-{i}");
            (push_item(addrs, queue, &payload), payload)
        })
        .collect()
}

fn ends(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("end "))
        .count()
}

/// Four worker processes, 16 pushed items, 3 replicas: every item is worked exactly once
/// (checked on the history the commands write), and the workers exit when nothing is left.
#[test]
fn queue_four_workers_work_every_item_exactly_once() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "jobs", 16);
    let mut workers: Vec<_> = (1..=4u16)
        .map(|id| spawn_worker(&reps.addrs, "jobs", id, 2000, &logging(&log, 20)))
        .collect();
    for w in &mut workers {
        let (code, err) = finish(w, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{err}");
        assert!(err.is_empty(), "{err}");
    }
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
    assert_eq!(ends(&log), 16);
    // What stays of the done items on the replicas (`docs/cli.md`, "hilock bakery
    // queue"): four keys per item (three row hashes of tombstones, the payload), every
    // item in the done set, none in the index — on a majority at least (a write returns
    // once a majority applied it; the third replica may miss the last ones).
    let mut complete = 0;
    for addr in &reps.addrs {
        let (item_keys, done, index): (Vec<String>, usize, usize) = bounded(10, async {
            let mut c = raw(addr).await;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("hilock:bakery:q:jobs:0*")
                .query_async(&mut c)
                .await
                .unwrap();
            let done: usize = redis::cmd("SCARD")
                .arg("hilock:bakery:q:jobs:done")
                .query_async(&mut c)
                .await
                .unwrap();
            let index: usize = redis::cmd("ZCARD")
                .arg("hilock:bakery:q:jobs:items")
                .query_async(&mut c)
                .await
                .unwrap();
            (keys, done, index)
        });
        assert!(item_keys.len() <= 16 * 4, "{addr}: {item_keys:?}");
        if (item_keys.len(), done, index) == (16 * 4, 16, 0) {
            complete += 1;
        }
    }
    assert!(complete >= 2, "fewer than a majority hold every done item");
}

/// A worker that has run a command and waits for the next item ends on SIGTERM, SIGINT or
/// SIGHUP (`docs/cli.md`, "hilock bakery queue"): exit 128 + N, one line. (Before, the
/// command's signal handling, passed on to its group, stayed installed after the command,
/// and the waiting worker did nothing on SIGTERM or SIGINT: only SIGKILL ended it.)
#[test]
fn a_waiting_worker_that_ran_a_command_stops_on_a_signal() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    for (queue, sig, code) in [("sigterm", "TERM", 143), ("sigint", "INT", 130)] {
        let log = dir.path().join(queue);
        push_item(&reps.addrs, queue, "one");
        let child = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["bakery", "queue", "work", queue, "--replicas"])
            .arg(reps.addrs.join(","))
            .args(["--client-id", "1", "--lease-ms", "1000", "--"])
            .args(logging(&log, 20))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut w = WorkerProc(child);
        let t = Instant::now();
        while ends(&log) < 1 {
            assert!(t.elapsed() < Duration::from_secs(20), "the item was worked");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        signal(w.0.id(), &format!("-{sig}"));
        let (got, err) = finish(&mut w, Duration::from_secs(5));
        assert_eq!(got, Some(code), "SIG{sig}: {err}");
        assert!(err.contains("stopped by signal"), "SIG{sig}: {err}");
    }
}

/// Two workers started with one `--client-id` would write one column of the bakery
/// (`docs/faults.md`, "Client ids"): both could take the same item with the same fence. The
/// second is refused with exit 78 and one line while the first runs, and takes nothing;
/// the first works every item exactly once. Once the first ended (and gave its id back),
/// the id is free again.
#[test]
fn a_second_worker_with_an_id_in_use_is_refused() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "dupq", 6);
    let mut first = spawn_worker(&reps.addrs, "dupq", 7, 2000, &logging(&log, 200));
    let t = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|s| s.starts_with("start")) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the first worker starts"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut second = spawn_worker(&reps.addrs, "dupq", 7, 2000, &logging(&log, 200));
    let (code, err) = finish(&mut second, Duration::from_secs(10));
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("client id 7 is in use"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    let (code, err) = finish(&mut first, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
    assert_eq!(ends(&log), 6);
    // Given back at the end: a new worker with the id runs (and finds nothing to do).
    let mut again = spawn_worker(&reps.addrs, "dupq", 7, 2000, &logging(&log, 1));
    let (code, err) = finish(&mut again, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{err}");
}

/// A worker started while two replicas of three are paused (SIGSTOP) waits for a majority
/// until its `--timeout-ms`, says so in one line, and works the item once they continue.
/// Before, agreeing on the lease was tried once: the worker exited 2 after the 500 ms call
/// timeout whatever its `--timeout-ms` (`docs/cli.md`, "`hilock bakery queue`").
#[test]
fn a_worker_started_during_a_majority_outage_waits_for_the_replicas() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    push_item(&reps.addrs, "late", "one");
    let pids = stop_first(&reps, 2);
    let mut w = spawn_worker(&reps.addrs, "late", 1, 1000, &logging(&log, 20));
    std::thread::sleep(Duration::from_millis(1500));
    let early = w.0.try_wait().unwrap();
    continue_all(&pids);
    assert_eq!(early, None, "the worker waits for a majority");
    let (code, err) = finish(&mut w, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ends(&log), 1, "{err}");
    let waits = err.lines().filter(|l| l.contains("waiting for a majority"));
    assert_eq!(waits.count(), 1, "one line: {err}");
}

/// An idle worker (no `--exit-when-empty`) whose registration runs out while two replicas
/// of three are paused for longer than its lease registers again once they continue and
/// takes the item pushed then. Before, the new registration was tried once: it exited 2
/// (no majority) or 78 (the replica still up held the worker's own earlier registration,
/// taken for another client's) (`docs/faults.md`, "Bakery").
#[test]
fn an_idle_worker_outlives_a_majority_outage_longer_than_its_lease() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    use std::os::unix::process::CommandExt;
    let child = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "queue", "work", "idle", "--replicas"])
        .arg(reps.addrs.join(","))
        .args(["--client-id", "2", "--lease-ms", "1000", "--max-items", "1"])
        .arg("--")
        .args(logging(&log, 20))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut w = WorkerProc(child);
    std::thread::sleep(Duration::from_millis(1000));
    let pids = stop_first(&reps, 2);
    std::thread::sleep(Duration::from_millis(2500));
    let during = w.0.try_wait().unwrap();
    continue_all(&pids);
    assert_eq!(during, None, "the worker waits out the outage");
    std::thread::sleep(Duration::from_millis(500));
    push_item(&reps.addrs, "idle", "after");
    let (code, err) = finish(&mut w, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ends(&log), 1, "{err}");
    assert!(err.contains("ran out"), "{err}");
}

/// A replica killed while three workers drain 16 items: every item is still worked
/// exactly once.
#[test]
fn queue_tolerates_a_killed_replica() {
    if !have_redis() {
        return;
    }
    let mut reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "kq", 16);
    let mut workers: Vec<_> = (1..=3u16)
        .map(|id| spawn_worker(&reps.addrs, "kq", id, 2000, &logging(&log, 20)))
        .collect();
    let t = Instant::now();
    while ends(&log) < 3 {
        assert!(t.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = ends(&log);
    reps.kill(2);
    for w in &mut workers {
        let (code, err) = finish(w, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{err}");
    }
    assert!(before < 16, "the replica died after the run");
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
}

/// Entries of a queue that are not hilock's (`docs/cli.md`, "hilock bakery queue"): every
/// replica's index holds `bogus:key`, replica 0's also 16 entries that sort before every
/// item key (a whole listing's worth), and replica 1 a foreign field in the row of one
/// item. The worker skips the foreign index entries, reads replica 0's index on past them,
/// counts replica 1's answers about that row as missing (the other two make the quorum),
/// works every item exactly once and exits 0 when only the foreign entries are left; it
/// says each entry once, on one line naming the replica and the entry.
#[test]
fn foreign_queue_entries_are_named_once_and_skipped() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "fe", 4);
    let first = pushed.keys().min().unwrap().clone();
    bounded(20, async {
        for (r, addr) in reps.addrs.iter().enumerate() {
            let mut c = raw(addr).await;
            let add = |entry: String| {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg("hilock:bakery:q:fe:items").arg(0).arg(entry);
                cmd
            };
            let _: () = add("bogus:key".into()).query_async(&mut c).await.unwrap();
            if r == 0 {
                for i in 0..16 {
                    let _: () = add(format!("-:{i:02}")).query_async(&mut c).await.unwrap();
                }
            }
            if r == 1 {
                let _: () = redis::cmd("HSET")
                    .arg(format!("hilock:bakery:q:fe:{first}:number"))
                    .arg("9")
                    .arg("not ours")
                    .query_async(&mut c)
                    .await
                    .unwrap();
            }
        }
    });
    let mut w = spawn_worker(&reps.addrs, "fe", 1, 2000, &logging(&log, 5));
    let (code, err) = finish(&mut w, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
    let lines: Vec<&str> = err.lines().collect();
    let said = |addr: &str, what: &str| {
        lines
            .iter()
            .filter(|l| {
                l.starts_with(&format!("hilock: queue fe: replica {addr}: ")) && l.contains(what)
            })
            .count()
    };
    for addr in &reps.addrs {
        assert_eq!(said(addr, "foreign entry: hilock:bakery:q:fe:items: entry 'bogus:key' is not an item key; skipped"), 1, "{err}");
    }
    for i in 0..16 {
        assert_eq!(
            said(&reps.addrs[0], &format!("entry '-:{i:02}'")),
            1,
            "{err}"
        );
    }
    assert_eq!(
        said(
            &reps.addrs[1],
            &format!("{first}:number: number field '9' = 'not ours'; its answer counts as missing")
        ),
        1,
        "{err}"
    );
    assert_eq!(lines.len(), 3 + 16 + 1, "{err}");
}

/// With a foreign field in an item's row on two replicas of three, no scan gets its
/// quorum: the worker names each entry once while it waits, and at `--timeout-ms` exits 2
/// with one error line naming both replicas and why.
#[test]
fn a_worker_short_of_quorum_by_foreign_entries_names_them_at_its_timeout() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let key = push_item(&reps.addrs, "fq2", "job");
    bounded(20, async {
        for addr in &reps.addrs[..2] {
            let mut c = raw(addr).await;
            let _: () = redis::cmd("HSET")
                .arg(format!("hilock:bakery:q:fq2:{key}:number"))
                .arg("9")
                .arg("not ours")
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    let child = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["bakery", "queue", "work", "fq2", "--replicas"])
        .arg(reps.addrs.join(","))
        .args(["--client-id", "1", "--timeout-ms", "1500", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = WorkerProc(child);
    let (code, err) = finish(&mut w, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    for addr in &reps.addrs[..2] {
        let prefix = format!("hilock: queue fq2: replica {addr}: malformed or foreign entry: ");
        assert_eq!(
            lines[..2].iter().filter(|l| l.starts_with(&prefix)).count(),
            1,
            "{err}"
        );
    }
    let last = lines[2];
    assert!(last.starts_with("hilock: error: "), "{err}");
    for addr in &reps.addrs[..2] {
        assert!(last.contains(addr.as_str()), "{err}");
    }
    assert!(last.contains("malformed or foreign entry"), "{err}");
}

/// One replica of three SIGSTOPped while three `--exit-when-empty` workers run (until
/// half the items are done, at most 3 s), then continued: every item is worked exactly once and every worker exits 0 once the
/// queue is empty, within 20 s (`--timeout-ms` is 30 s). The paused replica misses the
/// removal of some items for good and lists them as pending; a worker that forgot which of
/// them the others had reported done swapped them in and out of its window and never
/// exited. Three runs, as a run need not leave such items behind.
#[test]
fn workers_exit_when_empty_after_a_replica_was_paused() {
    if !have_redis() {
        return;
    }
    for run in 0..3 {
        let reps = Replicas::start(3);
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("history");
        let pushed = push_all(&reps.addrs, "pq", 24);
        let mut workers: Vec<_> = (1..=3u16)
            .map(|id| spawn_worker(&reps.addrs, "pq", id, 2000, &logging(&log, 20)))
            .collect();
        let t = Instant::now();
        while ends(&log) < 3 {
            assert!(t.elapsed() < Duration::from_secs(30), "no progress");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = reps.children[2].as_ref().unwrap().id();
        signal(pid, "-STOP");
        // Until half the items are done (a paused replica no longer slows the workers) or
        // 3 s: items are removed while it is paused, and some are left for after.
        let stopped = Instant::now();
        while ends(&log) < 12 && stopped.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(pid, "-CONT");
        assert!(
            ends(&log) < 24,
            "run {run}: every item was done before the replica was continued"
        );
        for w in &mut workers {
            let (code, err) = finish(w, Duration::from_secs(20));
            assert_eq!(code, Some(0), "run {run}: {err}");
        }
        assert_eq!(
            check_queue_log(&log, &pushed, &[]),
            Vec::<String>::new(),
            "run {run}"
        );
    }
}

/// A worker SIGSTOPped (with its command) while it works on an item: two other workers do
/// the rest and take that item over once its lease has run out (not before); when the
/// stopped worker continues it learns that its lease is gone, kills its command, says so
/// in one line, says in a second that its id's registration ran out too and that it
/// registers again, and exits when the queue is empty. The item has one unfinished execution
/// (fence f) and one complete one (fence > f); every other item exactly one.
#[test]
fn queue_takes_over_a_stopped_worker_s_item_after_its_lease() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "sq", 6);
    let lease = 600u64;
    // A's command starts and never finishes by itself.
    let stuck = vec![
        "sh".into(),
        "-c".into(),
        "echo \"start $HILOCK_ITEM_KEY $HILOCK_FENCE $HILOCK_ITEM\" >> \"$1\"; exec sleep 30"
            .into(),
        "sh".into(),
        log.display().to_string(),
    ];
    let mut a = spawn_worker(&reps.addrs, "sq", 1, lease, &stuck);
    let t = Instant::now();
    let first = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(l) = text.lines().next() {
            break l.split(' ').nth(1).unwrap().to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(20), "A took no item");
        std::thread::sleep(Duration::from_millis(5));
    };
    signal_group(a.0.id(), libc::SIGSTOP);
    let stopped = Instant::now();
    let mut others: Vec<_> = (2..=3u16)
        .map(|id| spawn_worker(&reps.addrs, "sq", id, lease, &logging(&log, 10)))
        .collect();
    for w in &mut others {
        let (code, err) = finish(w, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{err}");
    }
    let waited = stopped.elapsed();
    assert!(
        waited >= Duration::from_millis(lease),
        "the stopped worker's item was taken over after {waited:?}"
    );
    signal_group(a.0.id(), libc::SIGCONT);
    let (code, err) = finish(&mut a, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&first) && err.contains("lease") && err.contains("killed"),
        "{err}"
    );
    // The wrapper's line, and the worker's: its id's registration ran out while it was
    // stopped, so it went on only with a new registration.
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(err.contains("registers again"), "{err}");
    assert_eq!(
        check_queue_log(&log, &pushed, std::slice::from_ref(&first)),
        Vec::<String>::new()
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains(&first)).count(),
        3,
        "{text}"
    );
}

fn signal_group(pgid: u32, sig: i32) {
    let ok = hilock_runtime::proc::signal_group(pgid as i32, sig);
    assert!(matches!(ok, Ok(true)), "killpg {pgid} {sig}: {ok:?}");
}

/// Bad input to `hilock bakery queue`: one line on stderr, exit 2, never a panic.
#[test]
fn queue_commands_refuse_bad_input_with_one_line() {
    let dead: Vec<String> = (0..3)
        .map(|_| {
            let p = ports::free_port();
            format!("127.0.0.1:{p}")
        })
        .collect();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["bakery", "queue"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let replicas = dead.join(",");
    // Unreachable replicas: the push names them all.
    let (code, err) = run(&[
        "push",
        "q",
        "x",
        "--replicas",
        &replicas,
        "--timeout-ms",
        "300",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(dead.iter().all(|a| err.contains(a.as_str())), "{err}");
    // And the worker's wait for an item.
    let (code, err) = run(&[
        "work",
        "q",
        "--replicas",
        &replicas,
        "--client-id",
        "1",
        "--timeout-ms",
        "500",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(dead.iter().all(|a| err.contains(a.as_str())), "{err}");
    for (args, says) in [
        (vec!["push", "", "x", "--replicas", &replicas], "name"),
        (
            vec!["push", "q", "x", "--replicas", "not an address"],
            "replica",
        ),
        (
            vec![
                "work",
                "q",
                "--replicas",
                &replicas,
                "--client-id",
                "0",
                "--",
                "true",
            ],
            "client id",
        ),
        (
            vec![
                "work",
                "q",
                "--replicas",
                &replicas,
                "--client-id",
                "40",
                "--",
                "true",
            ],
            "client id",
        ),
        (
            vec![
                "work",
                "q",
                "--replicas",
                "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1",
                "--client-id",
                "1",
                "--",
                "true",
            ],
            "replicas",
        ),
        (
            vec![
                "work",
                "q",
                "--replicas",
                &replicas,
                "--client-id",
                "1",
                "--lease-ms",
                "5",
                "--",
                "true",
            ],
            "lease",
        ),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panick"), "{args:?}: {err}");
    }
}

// ----- the bakery against the token engine and etcd (docs/benchmarks.md) ----------------

/// A minimal HTTP/1.1 client of etcd's JSON gateway (`/v3/...`) on one kept-alive
/// connection (no etcd client crate in this package: it needs protoc and tonic).
struct EtcdHttp {
    conn: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl EtcdHttp {
    async fn connect(addr: &str) -> std::io::Result<EtcdHttp> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(EtcdHttp {
            conn: tokio::io::BufReader::new(s),
        })
    }

    async fn post(&mut self, path: &str, body: &str) -> Result<serde_json::Value, String> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let e = |e: std::io::Error| e.to_string();
        self.conn
            .get_mut()
            .write_all(req.as_bytes())
            .await
            .map_err(e)?;
        let mut status = String::new();
        self.conn.read_line(&mut status).await.map_err(e)?;
        let (mut len, mut chunked) = (None, false);
        loop {
            let mut h = String::new();
            self.conn.read_line(&mut h).await.map_err(e)?;
            let h = h.trim_end().to_ascii_lowercase();
            if h.is_empty() {
                break;
            }
            if let Some(v) = h.strip_prefix("content-length:") {
                len = v.trim().parse::<usize>().ok();
            }
            chunked |= h.starts_with("transfer-encoding:") && h.contains("chunked");
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut line = String::new();
                self.conn.read_line(&mut line).await.map_err(e)?;
                let n = usize::from_str_radix(line.trim(), 16).map_err(|x| x.to_string())?;
                let mut chunk = vec![0; n + 2];
                self.conn.read_exact(&mut chunk).await.map_err(e)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            let mut b = vec![0; len.ok_or("no length")?];
            self.conn.read_exact(&mut b).await.map_err(e)?;
            body = b;
        }
        if !status.contains(" 200 ") {
            return Err(format!(
                "{path}: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        serde_json::from_slice(&body).map_err(|x| x.to_string())
    }
}

fn base64(s: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in s.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One client's measurements: per acquire (latency, round trips) and the wall time.
type Samples = Vec<(Duration, f64)>;

const CMP_ROUNDS: usize = 25;
const CMP_HOLD: Duration = Duration::from_millis(1);

async fn cmp_bakery(addrs: Vec<String>, lock: String, id: u16) -> Samples {
    let mut l = BakeryLock::<3>::redis(&lock, &addrs, opts(id, 2000)).unwrap();
    l.acquire(Duration::from_secs(60)).await.unwrap();
    l.release(Duration::from_secs(10)).await.unwrap();
    let mut v = Vec::new();
    for _ in 0..CMP_ROUNDS {
        let ops = l.stats().ops;
        let t = Instant::now();
        l.acquire(Duration::from_secs(60)).await.unwrap();
        v.push((t.elapsed(), (l.stats().ops - ops) as f64));
        l.hold(Box::pin(tokio::time::sleep(CMP_HOLD)))
            .await
            .unwrap();
        l.release(Duration::from_secs(10)).await.unwrap();
    }
    v
}

async fn cmp_token(h: hilock_runtime::Handle, path: String) -> Samples {
    drop(h.lock(&path, hilock_kernel::Mode::W).await.unwrap());
    let mut v = Vec::new();
    for _ in 0..CMP_ROUNDS {
        let t = Instant::now();
        let g = h.lock(&path, hilock_kernel::Mode::W).await.unwrap();
        v.push((t.elapsed(), 0.0));
        tokio::time::sleep(CMP_HOLD).await;
        drop(g);
    }
    v
}

async fn cmp_etcd(addr: String, lock: String) -> Samples {
    let mut c = EtcdHttp::connect(&addr).await.unwrap();
    let lease = c.post("/v3/lease/grant", "{\"TTL\": 600}").await.unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let body = format!(
        "{{\"name\": \"{}\", \"lease\": \"{lease}\"}}",
        base64(lock.as_bytes())
    );
    let cycle = async |c: &mut EtcdHttp| {
        let r = c.post("/v3/lock/lock", &body).await.unwrap();
        let key = r["key"].as_str().unwrap().to_string();
        (key,)
    };
    let (k,) = cycle(&mut c).await;
    c.post("/v3/lock/unlock", &format!("{{\"key\": \"{k}\"}}"))
        .await
        .unwrap();
    let mut v = Vec::new();
    for _ in 0..CMP_ROUNDS {
        let t = Instant::now();
        let (k,) = cycle(&mut c).await;
        v.push((t.elapsed(), 1.0));
        tokio::time::sleep(CMP_HOLD).await;
        c.post("/v3/lock/unlock", &format!("{{\"key\": \"{k}\"}}"))
            .await
            .unwrap();
    }
    v
}

/// Latency p50, p99 (ms), mean round trips per acquire, acquires/s.
fn cmp_summary(all: &[Samples], wall: Duration) -> (f64, f64, f64, f64) {
    let mut lats: Vec<Duration> = all.iter().flatten().map(|s| s.0).collect();
    lats.sort();
    let n = lats.len();
    let p = |q: f64| lats[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1000.0;
    let rt = all.iter().flatten().map(|s| s.1).sum::<f64>() / n as f64;
    (p(0.5), p(0.99), rt, n as f64 / wall.as_secs_f64())
}

/// The bakery against the token engine and etcd in one run (`docs/benchmarks.md`, "Against
/// the token engine and etcd, one run"): the bakery (3 redis-server replicas, R = W = 2),
/// the token engine (3 hilock nodes on loopback, clients spread over them) and etcd's lock
/// (one member, through its JSON gateway) on the same workload: C clients × 25 rounds of
/// acquire, hold 1 ms, release of one lock, after one warm-up round each.
/// `cargo test -p hilock --test bakery_redis bakery_vs_token_engine_vs_etcd -- --ignored --nocapture`
#[test]
#[ignore = "measurement: prints a table for docs/benchmarks.md"]
fn bakery_vs_token_engine_vs_etcd() {
    if !have_redis() {
        return;
    }
    let Some(etcd) = start_etcd() else {
        eprintln!("SKIP bakery_vs_token_engine_vs_etcd: etcd is not installed (apt-get install etcd-server)");
        return;
    };
    let started = Instant::now();
    let reps = Replicas::start(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rows = rt.block_on(async {
        // etcd up?
        let t = Instant::now();
        loop {
            if let Ok(mut c) = EtcdHttp::connect(&etcd.addr).await {
                if c.post("/v3/lease/grant", "{\"TTL\": 5}").await.is_ok() {
                    break;
                }
            }
            assert!(t.elapsed() < Duration::from_secs(20), "etcd did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let nodes = hilock_runtime::oracle::local_cluster(
            3,
            "bakery-cmp",
            b"bakery-cmp secret",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let frames =
            |n: &[hilock_runtime::Node]| n.iter().map(|x| x.stats().frames_sent).sum::<u64>();
        let mut rows = Vec::new();
        for clients in [1u16, 2, 4, 8] {
            let t = Instant::now();
            let b: Vec<Samples> = futures_util::future::join_all((1..=clients).map(|id| {
                tokio::spawn(cmp_bakery(reps.addrs.clone(), format!("cmp{clients}"), id))
            }))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
            let bw = t.elapsed();
            let f0 = frames(&nodes);
            let t = Instant::now();
            let k: Vec<Samples> = futures_util::future::join_all((0..clients).map(|i| {
                tokio::spawn(cmp_token(
                    nodes[i as usize % 3].handle(),
                    format!("/cmp{clients}"),
                ))
            }))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
            let kw = t.elapsed();
            // Inter-node frames per acquire+release (warm-up rounds included).
            let kf = (frames(&nodes) - f0) as f64 / (clients as usize * (CMP_ROUNDS + 1)) as f64;
            let t = Instant::now();
            let e: Vec<Samples> = futures_util::future::join_all(
                (0..clients)
                    .map(|_| tokio::spawn(cmp_etcd(etcd.addr.clone(), format!("cmp{clients}")))),
            )
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
            let ew = t.elapsed();
            rows.push((
                clients,
                cmp_summary(&b, bw),
                cmp_summary(&k, kw),
                kf,
                cmp_summary(&e, ew),
            ));
        }
        rows
    });
    println!("| clients | bakery p50 / p99 (ms) | bakery quorum round trips / acquire | bakery acquires/s | token engine p50 / p99 (ms) | token engine frames / acquire+release | token engine acquires/s | etcd p50 / p99 (ms) | etcd acquires/s | p50 bakery : token : etcd |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (c, b, k, kf, e) in rows {
        println!(
            "| {c} | {:.2} / {:.2} | {:.1} | {:.0} | {:.3} / {:.3} | {kf:.1} | {:.0} | {:.2} / {:.2} | {:.0} | {:.0} : 1 : {:.0} |",
            b.0, b.1, b.2, b.3, k.0, k.1, k.3, e.0, e.1, e.3,
            b.0 / k.0.max(1e-6), e.0 / k.0.max(1e-6)
        );
    }
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
}

/// A command that fails stops its worker with the command's status (one line on stderr)
/// and leaves the item, which another worker completes after the lease; `--max-items 1`
/// stops a worker after one item.
#[test]
fn queue_a_failing_command_stops_the_worker_and_leaves_its_item() {
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("history");
    let pushed = push_all(&reps.addrs, "fq", 3);
    let fail: Vec<String> = vec!["sh".into(), "-c".into(), "exit 3".into()];
    let mut a = spawn_worker(&reps.addrs, "fq", 1, 600, &fail);
    let (code, err) = finish(&mut a, Duration::from_secs(20));
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("failed on item") && err.contains("another worker"),
        "{err}"
    );
    let mut b = spawn_worker_with(
        &reps.addrs,
        "fq",
        2,
        600,
        &["--max-items", "1"],
        &logging(&log, 5),
    );
    let (code, err) = finish(&mut b, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ends(&log), 1, "--max-items 1");
    let mut c = spawn_worker(&reps.addrs, "fq", 3, 600, &logging(&log, 5));
    let (code, err) = finish(&mut c, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(check_queue_log(&log, &pushed, &[]), Vec::<String>::new());
}

/// Without `--client-id`, `hilock bakery lock` registers the first id (in a random order)
/// that no running client holds (also with `HILOCK_CLIENT_ID` set but empty): three such
/// clients at once each get their own, and their
/// commands never overlap (each makes a directory only it may make). With every id 1..=31
/// registered by other clients (`Registration::register`, the code the command calls), it
/// exits 78 with one line and its command does not run (and so does a client given a held
/// id through `HILOCK_CLIENT_ID`); once one id is given back it runs.
#[test]
fn a_client_without_an_id_registers_a_free_one() {
    use hilock_runtime::bakery::ident::Registration;
    if !have_redis() {
        return;
    }
    let reps = Replicas::start(3);
    let addrs = reps.addrs.join(",");
    let dir = tempfile::tempdir().unwrap();
    let inside = dir.path().join("inside");
    let no_id = |script: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hilock"));
        c.args(["bakery", "lock", "anon", "--replicas", &addrs])
            .args(["--lease-ms", "1000", "--timeout-ms", "10000"])
            .env_remove("HILOCK_CLIENT_ID")
            .args(["--", "sh", "-c", script]);
        c
    };
    let script = format!(
        "mkdir {0} || exit 9; sleep 0.3; rmdir {0}",
        inside.display()
    );
    // An empty HILOCK_CLIENT_ID is no id too.
    let clients: Vec<Reap> = (0..3)
        .map(|i| {
            let mut c = no_id(&script);
            if i == 0 {
                c.env("HILOCK_CLIENT_ID", "");
            }
            Reap(c.spawn().unwrap())
        })
        .collect();
    for mut c in clients {
        assert_eq!(c.0.wait().unwrap().code(), Some(0), "a client failed");
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut regs: Vec<Registration> = rt.block_on(async {
        let mut regs = Vec::new();
        for id in 1..=31 {
            regs.push(
                Registration::register(
                    &reps.addrs,
                    "hilock:bakery:anon",
                    id,
                    Duration::from_secs(30),
                    Duration::from_secs(2),
                )
                .await
                .expect("a free id"),
            );
        }
        regs
    });
    let ran = dir.path().join("ran");
    let out = no_id(&format!("touch {}", ran.display())).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("every client id 1..=31 is in use"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(!ran.exists(), "the command ran");
    // HILOCK_CLIENT_ID names the id as --client-id does: id 5 is held, so it is refused.
    let out = no_id(&format!("touch {}", ran.display()))
        .env("HILOCK_CLIENT_ID", "5")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("client id 5 is in use"), "{err}");
    assert!(!ran.exists(), "the command ran");
    rt.block_on(regs[16].give_back());
    let out = no_id(&format!("touch {}", ran.display())).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ran.exists());
    rt.block_on(async {
        for r in &mut regs {
            r.give_back().await;
        }
    });
}
