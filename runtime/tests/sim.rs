//! Deterministic simulation of the token engine's real node code (feature `sim`,
//! `docs/verification.md`, "Deterministic simulation").
//!
//! Each seed builds a turmoil simulation of a static cluster: every node is a turmoil host
//! running [`Node::start_sim`] — the node's core, its peer links with handshake, numbering,
//! acknowledgements and resend (`runtime/src/token/net.rs`), on turmoil's simulated TCP and
//! clock — and an in-process client that takes locks through `Node::lock_with`,
//! `Node::try_lock_with` and guards (upgrades included). The seed chooses the cluster's
//! size, the network's latencies, the workload and the faults: link stalls (`hold` and
//! `release`: TCP keeps the bytes), resets of the connections between two nodes
//! ([`Node::sim_reset`]: both ends see an error, the links reconnect and resend what was
//! not acknowledged), cuts (`partition` and `repair`: turmoil loses the segments sent
//! meanwhile and never retransmits, so those connections stay silent until the dialers
//! give them up and redial, [`REDIAL_AFTER`]), paused nodes (all
//! of a node's links stalled) and crashed nodes (static membership cannot bring one back:
//! it stays down).
//!
//! A run passes when the history checker ([`Oracle`]) saw no two holds Table 2.1 forbids
//! (nor a fence regression), the kernel steps every node recorded replay through the real
//! kernel ([`trace::check`]) — and, where no node crashed, every message sent was
//! delivered by the end (cut links included) —, no request failed but by timing out, by
//! being busy or by a try at a node not let in yet, and at least one lock was granted (unless a node crashed). A failing seed is printed with the command that replays it
//! (with its event log); the same seed gives the same event log and records, byte for byte.
//!
//! Leased seeds (`sim/lease.rs`) run the same plans with etcd membership on the
//! simulation's stand-in for etcd ([`Node::start_sim_leased`]), with cuts from it added:
//! the node's lease path (`token/lease.rs`) runs — leases lost, holders told their lock is
//! lost, peers gone — and a lease check holds every hold to its lease. 1,000 leased seeds
//! run beside the 1,000 plain ones (about 44 s more in the test profile on 2 cores).
//!
//! Not simulated: the etcd client itself, recovery (`etcd_recovery`) and epochs, a paused
//! process (a paused node's timers go on), the client socket, the metrics endpoint, signals
//! and process groups; real processes test those (`cli/tests/`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::Mode;
use hilock_runtime::leases::sim::Ended;
use hilock_runtime::oracle::Oracle;
use hilock_runtime::token::{trace, HEARTBEAT, REDIAL_AFTER};
use hilock_runtime::{Config, Error, Node, NodeAddr, Options};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "sim/lease.rs"]
mod lease;

/// The peer port of every simulated node.
const PORT: u16 = 7100;

/// The lock paths the clients use: two trees, so that intention modes meet real ones.
const PATHS: [&str; 6] = ["/a", "/a/x", "/a/y", "/b", "/b/z", "/c"];

/// The modes the clients ask for.
const MODES: [Mode; 5] = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W];

/// How long a simulated request waits before it gives up.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long the nodes run on after the last fault has ended (and every client is done):
/// time to reconnect (backoff at most 0.5 s) and resend. A cut ends, for this, once its
/// silent connections are given up ([`Plan::last_heal`]).
const SETTLE: Duration = Duration::from_secs(2);

/// The simulated time a run may take at most (a run that has not ended by then fails).
const SIM_LIMIT: Duration = Duration::from_secs(120);

/// A fault the driver applies between two simulation steps.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The link between two nodes stalls (its bytes wait), then goes on.
    Stall(usize, usize),
    /// The link between two nodes drops what is sent on it, then works again.
    Cut(usize, usize),
    /// Every link of a node stalls (a paused process, as its peers see it).
    Pause(usize),
    /// The node's host crashes and stays down.
    Crash(usize),
    /// The connections between two nodes are reset (both ends see an error; the links
    /// reconnect and resend what was not acknowledged).
    Reset(usize, usize),
    /// A node is cut from the simulated etcd (leased seeds, [`lease`]).
    EtcdCut(usize),
}

/// What one seed's simulation does.
#[derive(Clone, Debug)]
struct Plan {
    n: usize,
    min_latency: Duration,
    max_latency: Duration,
    /// Each fault with when it starts and how long it lasts.
    faults: Vec<(Duration, Duration, Fault)>,
    ops: usize,
    /// The nodes run on the simulated etcd ([`lease::plan`]).
    leased: bool,
}

impl Plan {
    /// Whether every message sent must have been delivered by the end: no node crashed.
    /// (A cut link's connections stay silent — turmoil drops the segments and never
    /// retransmits — until the dialers give them up and redial, [`REDIAL_AFTER`].)
    fn heals(&self) -> bool {
        !self.faults.iter().any(|f| matches!(f.2, Fault::Crash(_)))
    }

    /// When the last fault ends. A cut ends for the links no earlier than when their
    /// dialers give its silent connections up: [`REDIAL_AFTER`] after the last
    /// acknowledgement, seen at the next check ([`HEARTBEAT`]).
    fn last_heal(&self) -> Duration {
        self.faults
            .iter()
            .map(|&(at, lasts, f)| match f {
                Fault::Cut(..) => (at + lasts).max(at + REDIAL_AFTER + HEARTBEAT),
                _ => at + lasts,
            })
            .max()
            .unwrap_or_default()
    }

    fn of(seed: u64) -> Plan {
        let mut r = StdRng::seed_from_u64(seed ^ 0x5eed_0ffa_u64);
        let n = r.random_range(2..=4);
        let min_latency = Duration::from_micros(r.random_range(0..=1_000));
        let max_latency = min_latency + Duration::from_micros(r.random_range(0..=10_000));
        let mut faults = Vec::new();
        let mut crashed = false;
        for _ in 0..r.random_range(0..=5) {
            let at = Duration::from_millis(r.random_range(0..=300));
            let lasts = Duration::from_millis(r.random_range(1..=1_500));
            let a = r.random_range(0..n);
            let b = (a + r.random_range(1..n)) % n;
            let f = match r.random_range(0..12) {
                0..=2 => Fault::Stall(a, b),
                3..=5 => Fault::Reset(a, b),
                6 | 7 => Fault::Cut(a, b),
                8..=10 => Fault::Pause(a),
                _ if !crashed && n > 2 => {
                    crashed = true;
                    Fault::Crash(a)
                }
                _ => Fault::Stall(a, b),
            };
            faults.push((at, lasts, f));
        }
        faults.sort_by_key(|f| f.0);
        // Several resets in a row: the links reconnect while they resend.
        if let Some(&(at, _, Fault::Reset(a, b))) = faults.first() {
            for k in 1..r.random_range(1..=4u64) {
                faults.push((
                    at + Duration::from_millis(3 * k),
                    Duration::ZERO,
                    Fault::Reset(a, b),
                ));
            }
            faults.sort_by_key(|f| f.0);
        }
        Plan {
            n,
            min_latency,
            max_latency,
            faults,
            ops: r.random_range(8..=24),
            leased: false,
        }
    }
}

/// The state the hosts and the driver share (one thread runs the whole simulation).
#[derive(Default)]
struct World {
    log: Vec<String>,
    /// Hosts whose client has finished its operations.
    done: std::collections::BTreeSet<usize>,
    crashed: Vec<usize>,
    /// Resets asked of each node's host (the peers' addresses).
    resets: BTreeMap<usize, Vec<IpAddr>>,
    /// Set by the driver once every live client is done: the nodes stop.
    stop: bool,
    grants: u64,
    timeouts: u64,
    busy: u64,
    failures: Vec<String>,
    /// Leased seeds: every hold, requests refused by a lost lease, requests failed by a
    /// peer gone, holds ended because the lease was lost.
    holds: Vec<lease::Hold>,
    refused: u64,
    gone: u64,
    told_lost: u64,
}

fn now() -> String {
    let t = turmoil::sim_elapsed().unwrap_or_default();
    format!("{:>5}.{:03}ms", t.as_millis(), t.subsec_micros() % 1000)
}

fn host_name(i: usize) -> String {
    format!("n{i}")
}

/// The outcome of one seed.
struct Outcome {
    /// The event log, with simulated time stamps.
    log: String,
    /// Every node's record file, by node.
    records: BTreeMap<usize, Vec<u8>>,
    /// Why the run failed, if it did.
    failure: Option<String>,
    /// Leased seeds: leases expired at the simulated etcd, requests refused by a lost
    /// lease, requests failed by a peer gone, holders told their lock is lost.
    leases: [u64; 4],
}

/// One node's host: start the node, run the client's operations, wait for the stop.
async fn node_host(
    seed: u64,
    id: usize,
    plan: Plan,
    dir: PathBuf,
    world: Rc<RefCell<World>>,
    oracle: Arc<Oracle>,
    etcd: Option<hilock_runtime::leases::sim::Etcd>,
) -> turmoil::Result {
    let addrs: Vec<NodeAddr> = (0..plan.n)
        .map(|i| NodeAddr {
            id: i as u16,
            addr: SocketAddr::new(turmoil::lookup(host_name(i)), PORT),
        })
        .collect();
    let mut c = Config::new(
        "sim",
        b"a simulated cluster's secret".to_vec(),
        id as u16,
        addrs,
    )?;
    c.request_timeout = REQUEST_TIMEOUT;
    // turmoil binds the unspecified address only (the host's own address is not bindable).
    c.listen = SocketAddr::new(IpAddr::from([0, 0, 0, 0]), PORT);
    c.record = Some(dir.join(format!("node-{id}.jsonl")));
    let node_seed = seed.wrapping_mul(31).wrapping_add(id as u64);
    let node = Rc::new(match etcd {
        Some(etcd) => {
            lease::configure(&mut c);
            lease::start(c, node_seed, etcd).await?
        }
        None => Node::start_sim(c, node_seed).await?,
    });
    let (gap, hold) = if plan.leased {
        lease::SPACING
    } else {
        (8_000, 12_000)
    };
    // Resets the driver asks of this node, applied within a simulated millisecond.
    let resetter = {
        let (node, world) = (node.clone(), world.clone());
        tokio::task::spawn_local(async move {
            loop {
                let asked = world.borrow_mut().resets.remove(&id).unwrap_or_default();
                for peer in asked {
                    let n = node.sim_reset(peer);
                    let line = format!("{} n{id} reset {n} connections with {peer}", now());
                    world.borrow_mut().log.push(line);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let mut r = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id as u64));
    let log =
        |w: &Rc<RefCell<World>>, s: String| w.borrow_mut().log.push(format!("{} n{id} {s}", now()));
    let work = async {
        for k in 0..plan.ops {
            tokio::time::sleep(Duration::from_micros(r.random_range(0..=gap))).await;
            let op = ((id as u64) << 32) | k as u64;
            let path = PATHS[r.random_range(0..PATHS.len())];
            let mode = MODES[r.random_range(0..MODES.len())];
            let opts = Options {
                timeout: Some(REQUEST_TIMEOUT),
                ..Options::default()
            };
            let try_it = r.random_bool(0.2);
            log(
                &world,
                format!(
                    "op {k}: {} {path} {mode}",
                    if try_it { "try" } else { "lock" }
                ),
            );
            let got = if try_it {
                node.try_lock_with(path, mode, opts).await
            } else {
                node.lock_with(path, mode, opts).await
            };
            let mut guard = match got {
                Ok(g) => g,
                Err(e) => {
                    let mut w = world.borrow_mut();
                    match &e {
                        Error::Timeout { .. } => w.timeouts += 1,
                        // A refused try: busy, or at a node no majority has let in yet
                        // (`NotServing`: at the start, before the nodes have met).
                        Error::WouldBlock { .. } | Error::NotServing { .. } => w.busy += 1,
                        Error::Refused { .. } if plan.leased => w.refused += 1,
                        Error::PeerGone { .. } if plan.leased => w.gone += 1,
                        _ => w.failures.push(format!("n{id} op {k}: {path} {mode}: {e}")),
                    }
                    w.log.push(format!("{} n{id} op {k}: {e}", now()));
                    continue;
                }
            };
            oracle.enter(op, id as u16, &guard);
            let granted = turmoil::sim_elapsed().unwrap_or_default();
            let lease_id = lease::lease_id(&node);
            if plan.leased {
                if let Err(why) = lease::live(&node) {
                    let mut w = world.borrow_mut();
                    w.failures
                        .push(format!("n{id} op {k}: {path} {mode} granted, but {why}"));
                }
            }
            {
                let mut w = world.borrow_mut();
                w.grants += 1;
                w.log.push(format!(
                    "{} n{id} op {k}: granted fence {}",
                    now(),
                    guard.fence()
                ));
            }
            // A holder is told its lock is lost when its node's lease is (leased seeds).
            let held = async {
                tokio::time::sleep(Duration::from_micros(r.random_range(0..=hold))).await;
                if mode == Mode::U && r.random_bool(0.5) {
                    match guard.upgrade_within(REQUEST_TIMEOUT).await {
                        Ok(()) => {
                            oracle.change(op, id as u16, &guard);
                            log(&world, format!("op {k}: upgraded to {}", guard.mode()));
                            tokio::time::sleep(Duration::from_micros(r.random_range(0..=5_000)))
                                .await;
                        }
                        Err(e) => {
                            let mut w = world.borrow_mut();
                            match &e {
                                Error::Timeout { .. } => w.timeouts += 1,
                                Error::Refused { .. } if plan.leased => w.refused += 1,
                                Error::PeerGone { .. } if plan.leased => w.gone += 1,
                                _ => w
                                    .failures
                                    .push(format!("n{id} op {k}: upgrade {path}: {e}")),
                            }
                            w.log.push(format!("{} n{id} op {k}: upgrade: {e}", now()));
                        }
                    }
                }
            };
            let told_lost = tokio::select! {
                biased;
                () = lease::lost(&node) => true,
                () = held => false,
            };
            if told_lost {
                world.borrow_mut().told_lost += 1;
                log(&world, format!("op {k}: told the lock is lost (lease)"));
            }
            if plan.leased {
                world.borrow_mut().holds.push(lease::Hold {
                    node: id,
                    lease: lease_id,
                    op,
                    granted,
                    ended: turmoil::sim_elapsed().unwrap_or_default(),
                });
            }
            oracle.exit(op);
            drop(guard);
            log(&world, format!("op {k}: released"));
        }
        world.borrow_mut().done.insert(id);
        log(&world, "done".into());
        while !world.borrow().stop {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    // A crash: the driver marks the node crashed; within a simulated millisecond its
    // client stops where it is (holding what it holds, releasing nothing) and the node is
    // dropped without a shutdown, which stops all its tasks and drops its connections, as
    // the death of its process would. (Not turmoil's `crash`: dropping a whole runtime
    // drops its tasks in an order that depends on tokio's process-wide task ids, so the
    // outcome would depend on what ran before in the process.)
    let crashed = async {
        while !world.borrow().crashed.contains(&id) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let crash = tokio::select! {
        biased;
        () = crashed => true,
        () = work => false,
    };
    resetter.abort();
    let _ = resetter.await;
    let node = match Rc::try_unwrap(node) {
        Ok(node) => node,
        Err(_) => return Err("the node is still shared".into()),
    };
    if crash {
        drop(node);
        log(&world, "crashed".into());
    } else {
        node.shutdown().await;
    }
    Ok(())
}

/// Run one seed with its records in `dir`.
fn run_seed(seed: u64, dir: &Path) -> Outcome {
    run_plan(seed, Plan::of(seed), dir)
}

/// Run `plan`, the plan of `seed`, with its records in `dir`.
fn run_plan(seed: u64, plan: Plan, dir: &Path) -> Outcome {
    let etcd = plan.leased.then(hilock_runtime::leases::sim::Etcd::new);
    let world = Rc::new(RefCell::new(World::default()));
    let oracle = Arc::new(Oracle::default());
    world
        .borrow_mut()
        .log
        .push(format!("seed {seed}: {plan:?}"));
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(SIM_LIMIT)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(plan.min_latency)
        .max_message_latency(plan.max_latency)
        .build();
    for id in 0..plan.n {
        let (plan, dir, world, oracle, etcd) = (
            plan.clone(),
            dir.to_path_buf(),
            world.clone(),
            oracle.clone(),
            etcd.clone(),
        );
        sim.host(host_name(id), move || {
            node_host(
                seed,
                id,
                plan.clone(),
                dir.clone(),
                world.clone(),
                oracle.clone(),
                etcd.clone(),
            )
        });
    }
    {
        let (world, n) = (world.clone(), plan.n);
        // Every fault has ended and the links had time to reconnect and resend.
        let settled = plan.last_heal() + SETTLE;
        // The stand-in's lessor runs beside the driver (a host of its own would cost every
        // simulation step a runtime more).
        let etcd = etcd.clone();
        sim.client("driver", async move {
            if let Some(etcd) = etcd {
                tokio::task::spawn_local(etcd.run());
            }
            loop {
                {
                    let mut w = world.borrow_mut();
                    let t = turmoil::sim_elapsed().unwrap_or_default();
                    let over = w
                        .done
                        .iter()
                        .chain(&w.crashed)
                        .collect::<std::collections::BTreeSet<_>>();
                    if over.len() >= n && t >= settled {
                        w.stop = true;
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The nodes stop (and hand over) within this.
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(())
        });
    }
    let ip = |i: usize| -> IpAddr { sim.lookup(host_name(i)) };
    let ips: Vec<IpAddr> = (0..plan.n).map(ip).collect();
    // Faults to start and to end, by time.
    let mut events: Vec<(Duration, bool, Fault)> = Vec::new();
    for &(at, lasts, f) in &plan.faults {
        events.push((at, true, f));
        if !matches!(f, Fault::Crash(_) | Fault::Reset(..)) {
            events.push((at + lasts, false, f));
        }
    }
    events.sort_by_key(|e| e.0);
    let mut next = 0;
    let mut failure = None;
    loop {
        while next < events.len() && events[next].0 <= sim.elapsed() {
            let (_, start, f) = events[next];
            next += 1;
            let t = sim.elapsed();
            world.borrow_mut().log.push(format!(
                "{:>5}.{:03}ms {} {f:?}",
                t.as_millis(),
                t.subsec_micros() % 1000,
                if start { "fault" } else { "heal" }
            ));
            match (f, start) {
                (Fault::Stall(a, b), true) => sim.hold(ips[a], ips[b]),
                (Fault::Stall(a, b), false) => sim.release(ips[a], ips[b]),
                (Fault::Cut(a, b), true) => sim.partition(ips[a], ips[b]),
                (Fault::Cut(a, b), false) => sim.repair(ips[a], ips[b]),
                (Fault::Pause(a) | Fault::EtcdCut(a), start) => {
                    // A paused node does not reach the simulated etcd either.
                    if let Some(etcd) = &etcd {
                        if start {
                            etcd.cut(a as u16);
                        } else {
                            etcd.heal(a as u16);
                        }
                    }
                    if matches!(f, Fault::EtcdCut(_)) {
                        continue;
                    }
                    for (b, &other) in ips.iter().enumerate() {
                        if b != a {
                            if start {
                                sim.hold(ips[a], other);
                            } else {
                                sim.release(ips[a], other);
                            }
                        }
                    }
                }
                (Fault::Reset(a, b), true) => {
                    world.borrow_mut().resets.entry(a).or_default().push(ips[b]);
                }
                (Fault::Reset(..), false) => {}
                (Fault::Crash(a), _) => {
                    if !world.borrow().crashed.contains(&a) {
                        world.borrow_mut().crashed.push(a);
                    }
                }
            }
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                failure = Some(format!("simulation: {e}"));
                break;
            }
        }
    }
    // Heal what is still cut or stalled (nothing runs any more; for the log's sake only).
    let w = world.borrow();
    let violations = oracle.violations();
    let mut files: Vec<PathBuf> = (0..plan.n)
        .map(|i| dir.join(format!("node-{i}.jsonl")))
        .filter(|p| p.exists())
        .collect();
    files.sort();
    let mut log = w.log.clone();
    log.push(format!(
        "grants {} timeouts {} busy {} oracle checks {}",
        w.grants,
        w.timeouts,
        w.busy,
        oracle.checks()
    ));
    let ended = etcd.as_ref().map(|e| e.ended()).unwrap_or_default();
    if plan.leased {
        log.push(format!(
            "leases ended {:?}; refused {} gone {} told lost {}",
            ended, w.refused, w.gone, w.told_lost
        ));
    }
    if failure.is_none() && !violations.is_empty() {
        failure = Some(format!("history checker: {}", violations.join("; ")));
    }
    if failure.is_none() {
        if let Err(e) = lease::check(&w.holds, &ended) {
            failure = Some(format!("lease check: {e}"));
        }
    }
    if failure.is_none() {
        match trace::check(&files) {
            Ok(Ok(summary)) => {
                log.push(summary.to_string());
                if summary.in_flight > 0 && plan.heals() {
                    failure = Some(format!(
                        "trace validation: {} messages sent were never delivered, though every \
                         fault healed",
                        summary.in_flight
                    ));
                }
            }
            Ok(Err(rejection)) => failure = Some(format!("trace validation: {rejection}")),
            Err(e) => failure = Some(format!("trace validation could not read: {e}")),
        }
    }
    if failure.is_none() && !w.failures.is_empty() {
        failure = Some(format!("requests failed: {}", w.failures.join("; ")));
    }
    if failure.is_none() && w.grants == 0 && w.crashed.is_empty() {
        // (A node that crashes early may take every lock's token with it.)
        failure = Some("no lock was granted".into());
    }
    let records = (0..plan.n)
        .filter_map(|i| {
            std::fs::read(dir.join(format!("node-{i}.jsonl")))
                .ok()
                .map(|b| (i, b))
        })
        .collect();
    let mut text = log.join("\n");
    text.push('\n');
    Outcome {
        log: text,
        records,
        failure,
        leases: [
            ended.iter().filter(|e| e.how == Ended::Expired).count() as u64,
            w.refused,
            w.gone,
            w.told_lost,
        ],
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Run `seed`, leased ([`lease::plan`]) or not, with its records in `dir`.
fn run(seed: u64, leased: bool, dir: &Path) -> Outcome {
    match leased {
        true => run_plan(seed, lease::plan(seed), dir),
        false => run_seed(seed, dir),
    }
}

/// The command that replays `seed` and prints its event log.
fn replay_command(seed: u64, leased: bool) -> String {
    format!(
        "HILOCK_SIM_SEED={seed} cargo test -p hilock-runtime --features sim --test sim \
         the_{}seed_in_hilock_sim_seed_passes -- --nocapture",
        if leased { "leased_" } else { "" }
    )
}

/// Run `count` seeds from `first`; a failing seed panics with the command that replays it.
/// Returns the sums of the seeds' lease counts ([`Outcome::leases`]).
fn run_seeds(first: u64, count: u64, leased: bool) -> [u64; 4] {
    let every = env_u64("HILOCK_SIM_PROGRESS").unwrap_or(1_000).max(1);
    let started = std::time::Instant::now();
    let mut grants = 0u64;
    let mut leases = [0u64; 4];
    let what = if leased { "leased seeds" } else { "seeds" };
    for seed in first..first + count {
        let dir = tempfile::tempdir().expect("temp dir");
        let o = run(seed, leased, dir.path());
        if let Some(why) = o.failure {
            panic!(
                "seed {seed} failed: {why}\nreplay it (with its event log): {}",
                replay_command(seed, leased)
            );
        }
        grants += o
            .log
            .lines()
            .filter(|l| l.contains(": granted fence"))
            .count() as u64;
        for (sum, k) in leases.iter_mut().zip(o.leases) {
            *sum += k;
        }
        let k = seed - first + 1;
        if k % every == 0 {
            eprintln!(
                "sim: {k}/{count} {what} passed ({first}..={seed}), {grants} grants, {:.1?}",
                started.elapsed()
            );
        }
    }
    eprintln!(
        "sim: {count} {what} from {first} passed: {grants} grants in {:.1?}",
        started.elapsed()
    );
    if leased {
        eprintln!(
            "sim: {} leases expired, {} requests refused by a lost lease, {} failed by a \
             peer gone, {} holders told their lock is lost",
            leases[0], leases[1], leases[2], leases[3]
        );
    }
    leases
}

#[test]
fn a_thousand_seeds_pass_the_history_checker_and_trace_validation() {
    let first = env_u64("HILOCK_SIM_FIRST").unwrap_or(0);
    let count = env_u64("HILOCK_SIM_SEEDS").unwrap_or(1_000);
    run_seeds(first, count, false);
}

/// `cargo test -p hilock-runtime --features sim --test sim -- --ignored --nocapture`
#[test]
#[ignore = "100,000 seeds (minutes): run it with --ignored"]
fn a_hundred_thousand_seeds_pass_the_history_checker_and_trace_validation() {
    let first = env_u64("HILOCK_SIM_FIRST").unwrap_or(0);
    run_seeds(first, 100_000, false);
}

#[test]
fn a_thousand_leased_seeds_pass_and_exercise_the_lease_path() {
    let first = env_u64("HILOCK_SIM_FIRST").unwrap_or(0);
    let count = env_u64("HILOCK_SIM_SEEDS").unwrap_or(1_000);
    let [expired, refused, gone, told] = run_seeds(first, count, true);
    if count >= 1_000 {
        assert!(expired > 0, "no lease expired at the simulated etcd");
        assert!(refused > 0, "no request was refused by a lost lease");
        assert!(gone > 0, "no request failed by a peer gone");
        assert!(told > 0, "no holder was told its lock is lost");
    }
}

/// Replays `HILOCK_SIM_SEED` (seed 1 without it) and prints its event log.
#[test]
fn the_seed_in_hilock_sim_seed_passes() {
    replay(false);
}

/// Replays `HILOCK_SIM_SEED` (seed 1 without it) as a leased seed and prints its event log.
#[test]
fn the_leased_seed_in_hilock_sim_seed_passes() {
    replay(true);
}

fn replay(leased: bool) {
    let seed = env_u64("HILOCK_SIM_SEED").unwrap_or(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let o = run(seed, leased, dir.path());
    println!("{}", o.log);
    if let Some(why) = o.failure {
        panic!("seed {seed} failed: {why}");
    }
}

#[test]
fn a_seed_replays_byte_for_byte() {
    // The first seed, the first seed with each kind of fault, and two seeds with a crash
    // whose outcome once depended on what the process had run before (turmoil's crash).
    let mut seeds = vec![0, 489, 983];
    for want in ["Stall", "Cut", "Pause", "Crash", "Reset"] {
        let s = (1..10_000)
            .find(|&s| format!("{:?}", Plan::of(s).faults).contains(want))
            .expect("a seed with the fault");
        seeds.push(s);
    }
    replays_byte_for_byte(&seeds, false);
}

#[test]
fn a_leased_seed_replays_byte_for_byte() {
    // The first leased seed, the first whose run lost a lease while a lock was held, and
    // the first with a pause.
    let mut seeds = vec![0];
    let lost = (1..10_000)
        .find(|&s| {
            let d = tempfile::tempdir().unwrap();
            run(s, true, d.path()).leases[3] > 0
        })
        .expect("a leased seed that told a holder its lock is lost");
    seeds.push(lost);
    let paused = (1..10_000)
        .find(|&s| format!("{:?}", lease::plan(s).faults).contains("Pause"))
        .expect("a leased seed with a pause");
    seeds.push(paused);
    replays_byte_for_byte(&seeds, true);
}

/// Runs each seed twice, after different seeds each time (forwards, then backwards), so
/// that state the process keeps from one simulation to the next would show, and compares
/// the event logs and records.
fn replays_byte_for_byte(seeds: &[u64], leased: bool) {
    let run = |seed: u64| {
        let d = tempfile::tempdir().unwrap();
        let o = run(seed, leased, d.path());
        assert_eq!(o.failure, None, "seed {seed}");
        assert!(!o.records.is_empty(), "seed {seed}: no records");
        o
    };
    let first: Vec<Outcome> = seeds.iter().map(|&s| run(s)).collect();
    for (i, &seed) in seeds.iter().enumerate().rev() {
        let (a, b) = (&first[i], run(seed));
        assert!(
            a.log == b.log,
            "seed {seed}: the event logs differ:\n{}\n----\n{}",
            a.log,
            b.log
        );
        assert!(a.records == b.records, "seed {seed}: the records differ");
    }
}
