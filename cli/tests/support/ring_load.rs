//! The load of the ring tests (`#[path = "support/ring_load.rs"] mod ring_load;`): clients
//! that lock random paths under the demo's history checker.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hilock_kernel::ring::{NodeId, View};
use hilock_kernel::Mode;
use hilock_runtime::oracle::Oracle;
use hilock_runtime::ring::{key_of, ring, RingClient, Views, SLOTS};

pub const LOAD_CLIENTS: u8 = 12;
pub const PATHS: u64 = 16;
pub const HELD: &str = "/pinned/record";
pub const HOLDER: u8 = 100;
pub const CONTENDER: u8 = 101;

pub struct Rng(u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The load of the ring tests: `LOAD_CLIENTS` clients, each locking random paths of
/// `PATHS`, holding 1–3 ms (registered with the oracle) and unlocking, until `stop`; a
/// refused lock is retried after 1 ms; an error ends the client and is recorded. Each
/// client's task gives its client back.
pub struct Load {
    pub stop: Arc<AtomicBool>,
    pub errors: Arc<Mutex<Vec<String>>>,
    pub grants: Arc<AtomicU64>,
    pub refusals: Arc<AtomicU64>,
    pub clients: Vec<tokio::task::JoinHandle<RingClient>>,
    addrs: Arc<Vec<Option<SocketAddr>>>,
    views: Views,
}

impl Load {
    pub async fn start(
        addrs: &Arc<Vec<Option<SocketAddr>>>,
        views: impl Into<Views>,
        oracle: &Arc<Oracle>,
        ops: &Arc<AtomicU64>,
        seed: u64,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let (grants, refusals) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut clients = Vec::new();
        let views = views.into();
        for c in 1..=LOAD_CLIENTS {
            let mut cl = RingClient::connect_to(c, addrs.clone(), views.clone())
                .await
                .unwrap();
            let (stop, errors, oracle, ops, grants, refusals) = (
                stop.clone(),
                errors.clone(),
                oracle.clone(),
                ops.clone(),
                grants.clone(),
                refusals.clone(),
            );
            clients.push(tokio::spawn(async move {
                let mut rng = Rng(seed ^ c as u64);
                while !stop.load(Relaxed) {
                    let path = format!("/doc{}/part", rng.next() % PATHS);
                    match cl.lock(&path).await {
                        Ok(true) => {
                            grants.fetch_add(1, Relaxed);
                            let op = ops.fetch_add(1, Relaxed);
                            oracle.register_path(op, c as u16, &path, Mode::W);
                            tokio::time::sleep(Duration::from_millis(1 + rng.next() % 3)).await;
                            oracle.exit(op);
                            if let Err(e) = cl.unlock(&path).await {
                                let e = format!("c{c} unlock {path}: {e}");
                                errors.lock().unwrap().push(e);
                                return cl;
                            }
                        }
                        Ok(false) => {
                            refusals.fetch_add(1, Relaxed);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(e) => {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("c{c} lock {path}: {e}"));
                            return cl;
                        }
                    }
                }
                cl
            }));
        }
        Load {
            stop,
            errors,
            grants,
            refusals,
            clients,
            addrs: addrs.clone(),
            views,
        }
    }

    /// Ends a run: stops the load (every client ends within `limit`), releases the held
    /// lock (`held`: its oracle operation and its holder), and checks that every request
    /// was answered, that nothing is left locked (a fresh client is granted every path)
    /// and that the history checker saw no violation. Prints `what` with the grants and
    /// returns them.
    pub async fn finish(
        self,
        limit: Duration,
        oracle: &Oracle,
        held: (u64, &mut RingClient),
        what: &str,
    ) -> u64 {
        self.stop.store(true, Relaxed);
        for h in self.clients {
            tokio::time::timeout(limit, h)
                .await
                .expect("client ends")
                .unwrap();
        }
        oracle.exit(held.0);
        held.1.unlock(HELD).await.unwrap();
        let errs = self.errors.lock().unwrap().clone();
        assert!(errs.is_empty(), "requests not answered: {errs:#?}");
        let mut fresh = RingClient::connect_to(200, self.addrs.clone(), self.views.clone())
            .await
            .unwrap();
        for p in (0..PATHS)
            .map(|k| format!("/doc{k}/part"))
            .chain([HELD.to_string()])
        {
            assert!(fresh.lock(&p).await.unwrap(), "{p} is free at the end");
            fresh.unlock(&p).await.unwrap();
        }
        let bad = oracle.violations();
        let grants = self.grants.load(Relaxed);
        println!("{what}: {grants} grants, {} violations", bad.len());
        assert!(
            bad.is_empty(),
            "{} violations: {:?}",
            bad.len(),
            &bad[..bad.len().min(3)]
        );
        grants
    }
}

/// Waits (at most `limit`) until the load's `grants` pass `before`: the load goes on (the
/// clients are granted again), `what` says after what.
pub async fn until_grants_pass(grants: &AtomicU64, before: u64, limit: Duration, what: &str) {
    let t = std::time::Instant::now();
    while grants.load(Relaxed) <= before {
        assert!(
            t.elapsed() < limit,
            "the load goes on after {what}: no grant in {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What every ring test under load sets up: the history checker, client [`HOLDER`]
/// holding [`HELD`] throughout (registered with the checker as operation `held_op`),
/// client [`CONTENDER`] to be refused it, and the [`Load`].
pub struct Run {
    pub oracle: Arc<Oracle>,
    pub ops: Arc<AtomicU64>,
    pub holder: RingClient,
    pub contender: RingClient,
    pub held_op: u64,
    pub load: Load,
}

impl Run {
    /// Connects the holder and the contender to the ring at `addrs` (views from `maddr`),
    /// takes the held lock and starts the load (`seed`).
    pub async fn start(
        addrs: &Arc<Vec<Option<SocketAddr>>>,
        views: impl Into<Views>,
        seed: u64,
    ) -> Run {
        let oracle = Arc::new(Oracle::default());
        let ops = Arc::new(AtomicU64::new(1));
        let views = views.into();
        let mut holder = RingClient::connect_to(HOLDER, addrs.clone(), views.clone())
            .await
            .unwrap();
        let contender = RingClient::connect_to(CONTENDER, addrs.clone(), views.clone())
            .await
            .unwrap();
        assert!(
            holder.lock(HELD).await.unwrap(),
            "the first lock is granted"
        );
        let held_op = ops.fetch_add(1, Relaxed);
        oracle.register_path(held_op, HOLDER as u16, HELD, Mode::W);
        let load = Load::start(addrs, views, &oracle, &ops, seed).await;
        Run {
            oracle,
            ops,
            holder,
            contender,
            held_op,
            load,
        }
    }

    /// [`Load::finish`] with the held lock.
    pub async fn finish(mut self, limit: Duration, what: &str) -> u64 {
        self.load
            .finish(limit, &self.oracle, (self.held_op, &mut self.holder), what)
            .await
    }
}

/// Slot `i` at `addrs[i]`.
pub fn slots(addrs: &[SocketAddr]) -> Arc<Vec<Option<SocketAddr>>> {
    let mut slots: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for (i, a) in addrs.iter().enumerate() {
        slots[i] = Some(*a);
    }
    Arc::new(slots)
}

/// The primary and the two replicas of `path` in `v`.
pub fn holders_of(v: View, path: &str) -> Vec<NodeId> {
    let set = ring().replicas(v, key_of(path), 3);
    (0..SLOTS as u16)
        .filter(|i| set & (1 << i) != 0)
        .map(NodeId)
        .collect()
}

/// The hold log the tests' commands append to (`start ID NANOS` when the command starts
/// under the lock, `end ID NANOS` when it ends), sorted by time: `(nanos, start, id)`, with
/// `prefix` taken off each id.
pub fn hold_events(log: &Path, prefix: &str) -> Vec<(u128, bool, u16)> {
    let mut events: Vec<(u128, bool, u16)> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[2].parse().unwrap(),
                w[0] == "start",
                w[1].trim_start_matches(prefix).parse().unwrap(),
            )
        })
        .collect();
    events.sort();
    events
}
