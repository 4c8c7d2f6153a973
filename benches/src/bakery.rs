//! The bakery in the simulator (`docs/benchmarks.md`, "In the simulator, against the token
//! engine and a central lock server"): `C` kernel bakery clients ([`Variant::HILOCK`] unless
//! told otherwise) contending on one lock over a simulated quorum store of [`REPLICAS`]
//! kernel replicas, R = W = 2, next to the token engine on the same workload in the same
//! timing loop.
//!
//! - **Sites.** [`BakerySite`] (`hilock_harness::engines::bakery`, what it translates and
//!   what it counts) is a client (nodes `0..C`) or a replica (nodes `C..C + 3`) behind the
//!   kernel's [`Protocol`](hilock_kernel::Protocol) interface; the one harness
//!   ([`hilock_harness::Cluster`]) routes and delivers every request and answer and checks
//!   mutual exclusion ([`hilock_harness::Cluster::check_exclusive`]) after every grant.
//! - **Workload and timing.** The simulator's own loop ([`token::run_sites`]) with
//!   [`Mix::OneLockW`]: every client loops acquire, hold (the critical section, `hold`
//!   message delays), release, and acquires again at once (no think time); every message
//!   takes one message delay (mean 1,000 µs of simulated time, uniform within ±`jitter`),
//!   FIFO per pair of nodes. Replicas are passive nodes ([`Driven::active`]).
//! - **"Sleep a little"** is the simulator's poll ([`Driven::wants_poll`]): a client that
//!   the kernel put to sleep (lines 9–16) is woken (the kernel client's `Input::Wake`) after `poll` message
//!   delays and re-reads.
//! - **Leases.** No time passes for the clients (no `Tick`), so no entry expires and no
//!   renewal is sent. Renewal traffic is not in these figures.
//! - **The token engine** on the same workload: `C` hilock sites ([`Site`], the thesis's
//!   forwarding, [`hilock_kernel::Variant::HILOCK`]), all locking lock 0 in W, in the same
//!   loop with the same [`Config`] (node 0 starts with the token).
//! - **A central lock server** on three members (leader + two followers, commit on a
//!   majority), the etcd stand-in ([`CentralSite`], what it models and what not), on the
//!   same workload in the same loop.

use crate::token::{self, Config, Driven, Mix, PrioMode, Proto, RelayClass, Requester, Stats};
use hilock_harness::engines::bakery::{BakeryMsg, BakerySite, Counts, MAX_CLIENTS, REPLICAS};
use hilock_harness::engines::central::CentralSite;
use hilock_kernel::bakery::Variant;
use hilock_kernel::{LockId, NodeId, Site};

impl Requester for BakeryMsg {
    fn requester(&self) -> Option<NodeId> {
        None
    }
}

impl RelayClass for BakerySite {
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

impl Driven for BakerySite {
    fn stat_kind(msg: &BakeryMsg) -> usize {
        match msg {
            BakeryMsg::Req(_) => 0,
            BakeryMsg::Rep(_) => 1,
        }
    }
    fn wants_poll(&self) -> Option<LockId> {
        BakerySite::wants_poll(self)
    }
    fn active(&self) -> bool {
        self.client().is_some()
    }
    fn poll_interval(&self) -> f64 {
        self.poll()
    }
    const CHECK_EXCLUSIVE: bool = true;
}

/// The workload of one comparison row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Clients contending on the lock (1..=[`MAX_CLIENTS`]).
    pub clients: usize,
    /// Critical section, in message delays (mean; jittered like the messages).
    pub hold: f64,
    /// "Sleep a little" of the bakery, in message delays.
    pub poll: f64,
    /// Relative half-width of the uniform jitter of messages and holds.
    pub jitter: f64,
    /// Warm-up acquires per client (not measured).
    pub warmup_per_client: u64,
    /// Measured acquires per client.
    pub per_client: u64,
    /// Seed.
    pub seed: u64,
}

impl Workload {
    /// The defaults of the `simulate --experiments bakery` table for `clients` clients:
    /// hold 2 message delays, "sleep a little" 2 message delays, ±1/3 jitter, 5 warm-up and
    /// 40 measured acquires per client.
    pub fn new(clients: usize) -> Workload {
        Workload {
            clients,
            hold: 2.0,
            poll: 2.0,
            jitter: 1.0 / 3.0,
            warmup_per_client: 5,
            per_client: 40,
            seed: 1,
        }
    }

    /// The simulator's configuration for `n` nodes (one message delay = 1 ms of simulated
    /// time).
    fn config(&self, n: usize) -> Config {
        Config {
            proto: Proto::Hilock,
            prio: PrioMode::Off,
            n,
            ratio: 0.0,
            cs_ms: self.hold,
            latency_ms: 1.0,
            jitter: self.jitter,
            warmup_accesses: self.warmup_per_client * self.clients as u64,
            measured_accesses: self.per_client * self.clients as u64,
            seed: self.seed,
            mix: Mix::OneLockW,
        }
    }
}

/// What a bakery run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct BakeryStats {
    /// The simulator's window statistics (messages: index 0 requests to replicas, 1
    /// answers and acknowledgements; latencies; grants checked for mutual exclusion).
    pub sim: Stats,
    /// The clients' counters summed (whole run).
    pub counts: Counts,
}

impl BakeryStats {
    /// Messages (requests and answers) per acquire+release, over the window.
    pub fn messages_per_acquire(&self) -> f64 {
        self.sim.per_request()
    }
    /// Quorum operations from `Acquire` to `Entered`, per acquire.
    pub fn ops_per_acquire(&self) -> f64 {
        self.counts.acquire_ops as f64 / self.counts.acquires.max(1) as f64
    }
    /// "Sleep a little" waits per acquire.
    pub fn sleeps_per_acquire(&self) -> f64 {
        self.counts.sleeps as f64 / self.counts.acquires.max(1) as f64
    }
    /// Entries read (cells in the answers received) per acquire.
    pub fn entries_per_acquire(&self) -> f64 {
        self.counts.entries_read as f64 / self.counts.acquires.max(1) as f64
    }
}

/// Runs the bakery (`variant`) on `w` in the simulator. A violation of mutual exclusion
/// or a kernel error ends the run with an error.
pub fn run_bakery(w: &Workload, variant: Variant) -> Result<BakeryStats, String> {
    let n = w.clients + REPLICAS;
    let sites = (0..n)
        .map(|i| BakerySite::new(i, w.clients, variant, w.poll))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, cluster) =
        token::run_sites(&w.config(n), sites).map_err(|e| format!("bakery: {e}"))?;
    let mut counts = Counts::default();
    for s in cluster.sites() {
        if let Some(c) = s.counts() {
            counts.add(&c);
        }
    }
    Ok(BakeryStats { sim: st, counts })
}

/// The token engine's site in this comparison: up to [`MAX_CLIENTS`] nodes, one lock.
pub type TokenSite = Site<32, 1, 32>;

/// Runs the token engine (`C` hilock sites, one lock, every access W) on `w`.
pub fn run_token(w: &Workload) -> Result<Stats, String> {
    let n = w.clients;
    if n == 0 || n > MAX_CLIENTS {
        return Err(format!("token engine: {n} clients (1..={MAX_CLIENTS})"));
    }
    let sites = (0..n)
        .map(|i| TokenSite::new(NodeId(i as u16), NodeId(0)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, _) = token::run_sites(&w.config(n), sites).map_err(|e| format!("token: {e}"))?;
    Ok(st)
}

/// Runs the central lock server ([`CentralSite`]: `C` clients, a leader and two
/// followers) on `w`.
pub fn run_central(w: &Workload) -> Result<Stats, String> {
    let n = w.clients + 3;
    let sites = (0..n)
        .map(|i| CentralSite::new(i, w.clients))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, _) = token::run_sites(&w.config(n), sites).map_err(|e| format!("central: {e}"))?;
    Ok(st)
}

/// One row of the comparison: the bakery and the token engine on the same workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The workload.
    pub workload: Workload,
    /// The bakery ([`Variant::HILOCK`]).
    pub bakery: BakeryStats,
    /// The token engine.
    pub token: Stats,
    /// The central lock server on 3 members ([`CentralSite`], the etcd stand-in).
    pub central: Stats,
}

/// Runs both systems on `w`.
pub fn compare(w: &Workload) -> Result<Comparison, String> {
    Ok(Comparison {
        workload: *w,
        bakery: run_bakery(w, Variant::HILOCK)?,
        token: run_token(w)?,
        central: run_central(w)?,
    })
}

/// The markdown table of `rows` (`docs/benchmarks.md` quotes it). Latencies in message delays.
pub fn markdown(rows: &[Comparison]) -> String {
    let d = |us: u64| us as f64 / 1000.0;
    let mut s = String::from(
        "| clients | bakery messages / acquire+release | bakery quorum ops / acquire | bakery sleeps / acquire | bakery entries read / acquire | bakery latency p50 / p99 | token engine messages / acquire+release | token engine latency p50 / p99 | central server messages / acquire+release | central server latency p50 / p99 | acquires measured (each) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (b, t, z) = (&r.bakery, &r.token, &r.central);
        s.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {} / {} / {} |\n",
            r.workload.clients,
            b.messages_per_acquire(),
            b.ops_per_acquire(),
            b.sleeps_per_acquire(),
            b.entries_per_acquire(),
            d(b.sim.latency_quantile_us(0.5)),
            d(b.sim.latency_quantile_us(0.99)),
            t.per_request(),
            d(t.latency_quantile_us(0.5)),
            d(t.latency_quantile_us(0.99)),
            z.per_request(),
            d(z.latency_quantile_us(0.5)),
            d(z.latency_quantile_us(0.99)),
            b.sim.latencies_us.len(),
            t.latencies_us.len(),
            z.latencies_us.len(),
        ));
    }
    s
}
