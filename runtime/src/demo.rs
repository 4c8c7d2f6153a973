//! `hilock demo`: a cluster on loopback running the thesis's airline workload (section
//! 4.1) through the real lock API, with every grant checked against Table 2.1.
//!
//! Workload: one lock on the table (`/airline`) and one per entry (`/airline/e<k>`). Each
//! node runs one client that loops: non-critical section (uniform in ½–1½ × NCS), an
//! access whose mode is IR 80 % / R 10 % / U 4 % / IW 5 % / W 1 %, critical section CS.
//! As in the simulator (`benches/src/token.rs`), IR and IW are accesses to one entry: R or W
//! on `/airline/e<k>`, for which the API takes IR or IW on `/airline` first; R, U and W
//! lock the whole table. A U access upgrades to W halfway through its critical section.
//!
//! The oracle: every lock a guard holds is registered between its grant and its release,
//! and checked against every lock registered on the same path on any node; two
//! registrations that Table 2.1 does not allow together are a violation. (Registration
//! happens strictly inside the real hold, so an overlap the oracle sees is real.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hilock_kernel::{compatible, Mode};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::net::TcpListener;

use crate::config::{Config, NodeAddr};
use crate::token::{Guard, Handle, Node};

/// The access mix of the thesis (section 4.1), in percent.
pub use hilock_spec::workload::AIRLINE_MIX as MIX;

/// Start `n` nodes on 127.0.0.1 (ephemeral ports) in one cluster.
pub async fn local_cluster(
    n: usize,
    cluster: &str,
    secret: &[u8],
    request_timeout: Duration,
) -> std::io::Result<Vec<Node>> {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for id in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(NodeAddr {
            id: id as u16,
            addr: l.local_addr()?,
        });
        listeners.push(l);
    }
    let mut nodes = Vec::new();
    for (id, l) in listeners.into_iter().enumerate() {
        let mut c = Config::new(cluster, secret.to_vec(), id as u16, addrs.clone())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        c.request_timeout = request_timeout;
        nodes.push(Node::start_on(c, l).await?);
    }
    Ok(nodes)
}

/// A registration of the oracle: operation, node, mode, fencing token (if known).
type Holding = (u64, u16, Mode, Option<u64>);

/// Checks every grant against Table 2.1 across all nodes.
#[derive(Debug, Default)]
pub struct Oracle {
    held: Mutex<HashMap<String, Vec<Holding>>>,
    /// Per path, the largest fence of the holds that ended, per mode (`Mode as usize`).
    ended: Mutex<HashMap<String, [Option<u64>; 6]>>,
    violations: Mutex<Vec<String>>,
    checks: AtomicU64,
    same_node: AtomicU64,
    fence_checks: AtomicU64,
}

impl Oracle {
    /// Register the locks of `guard`, held by `node` in operation `op`.
    pub fn enter(&self, op: u64, node: u16, guard: &Guard) {
        for (p, m, f) in guard.fenced_locks() {
            self.register(op, node, p, m, Some(f));
        }
    }

    /// Register one lock: `op` holds `path` in `mode` on `node` (fence not known).
    pub fn register_path(&self, op: u64, node: u16, path: &str, mode: Mode) {
        self.register(op, node, path, mode, None);
    }

    /// Register one lock with its fencing token (e.g. from a client reply).
    pub fn register_fenced(&self, op: u64, node: u16, path: &str, mode: Mode, fence: u64) {
        self.register(op, node, path, mode, Some(fence));
    }

    fn register(&self, op: u64, node: u16, path: &str, mode: Mode, fence: Option<u64>) {
        let mut held = self.held.lock().expect("oracle lock");
        if let Some(f) = fence {
            // Fencing: every hold of this path in a conflicting mode that ended before this
            // one was granted (its end was registered before this grant) had a lower fence.
            if let Some(ended) = self.ended.lock().expect("oracle lock").get(path) {
                self.fence_checks.fetch_add(1, Relaxed);
                for m in Mode::REQUESTABLE {
                    match ended[m as usize] {
                        Some(e) if e >= f && !compatible(m, mode) => {
                            self.violations.lock().expect("oracle lock").push(format!(
                                "{path}: node {node} granted {mode} with fence {f}, not above \
                                 fence {e} of an earlier {m} hold"
                            ));
                        }
                        _ => {}
                    }
                }
            }
        }
        let v = held.entry(path.to_string()).or_default();
        for &(_, n, m, _) in v.iter().filter(|x| x.0 != op) {
            self.checks.fetch_add(1, Relaxed);
            if n == node {
                self.same_node.fetch_add(1, Relaxed);
            }
            if !compatible(m, mode) {
                self.violations.lock().expect("oracle lock").push(format!(
                    "{path}: node {node} granted {mode} while node {n} holds {m} (Table 2.1)"
                ));
            }
        }
        v.retain(|&(o, _, _, _)| o != op);
        v.push((op, node, mode, fence));
    }

    /// `op` now holds the requested path of `guard` in its mode (after an upgrade).
    pub fn change(&self, op: u64, node: u16, guard: &Guard) {
        self.register(op, node, guard.path(), guard.mode(), Some(guard.fence()));
    }

    /// Unregister operation `op` (before its guard is dropped).
    pub fn exit(&self, op: u64) {
        let mut held = self.held.lock().expect("oracle lock");
        let mut ended = self.ended.lock().expect("oracle lock");
        for (path, v) in held.iter_mut() {
            for &(_, _, m, f) in v.iter().filter(|x| x.0 == op) {
                if let Some(f) = f {
                    let e = ended.entry(path.clone()).or_insert([None; 6]);
                    let slot = &mut e[m as usize];
                    *slot = Some(slot.map_or(f, |x| x.max(f)));
                }
            }
            v.retain(|&(o, _, _, _)| o != op);
        }
    }

    /// Grants whose fence was compared with the holds of their path that had ended.
    pub fn fence_checks(&self) -> u64 {
        self.fence_checks.load(Relaxed)
    }

    /// Pairs checked so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Relaxed)
    }

    /// Pairs checked so far whose two holds are on the same node (local sharing).
    pub fn same_node_checks(&self) -> u64 {
        self.same_node.load(Relaxed)
    }

    /// Violations found so far.
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().expect("oracle lock").clone()
    }
}

/// What `hilock demo` runs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Stop after this many accesses (all nodes together)…
    pub requests: Option<u64>,
    /// …or after this long.
    pub seconds: Option<f64>,
    /// Critical section.
    pub cs: Duration,
    /// Mean non-critical section.
    pub ncs: Duration,
    /// Entries of the table.
    pub entries: usize,
    /// Seed of the clients' random choices.
    pub seed: u64,
    /// Timeout of each access.
    pub timeout: Duration,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            nodes: 8,
            requests: None,
            seconds: None,
            cs: Duration::from_millis(1),
            ncs: Duration::from_millis(10),
            entries: 16,
            seed: 1,
            timeout: Duration::from_secs(10),
            progress: false,
        }
    }
}

/// The default number of accesses when neither `requests` nor `seconds` is given.
pub const DEFAULT_REQUESTS: u64 = 2000;

/// Latencies of one access mode.
#[derive(Clone, Debug, Default)]
pub struct ModeLatency {
    /// Accesses.
    pub count: usize,
    /// Median acquire latency (whole hierarchy).
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Maximum.
    pub max: Duration,
}

/// The result of a demo run.
#[derive(Clone, Debug, Default)]
pub struct DemoReport {
    /// Nodes.
    pub nodes: usize,
    /// Accesses served.
    pub served: u64,
    /// Accesses that failed (timeouts).
    pub failed: u64,
    /// The errors (first few).
    pub errors: Vec<String>,
    /// Kernel requests (one per lock of a hierarchy, plus upgrades).
    pub kernel_requests: u64,
    /// Protocol messages sent by all nodes.
    pub messages: u64,
    /// Wall time of the workload.
    pub elapsed: Duration,
    /// Per access mode, in [`MIX`] order.
    pub latency: Vec<(Mode, ModeLatency)>,
    /// Pairs the oracle checked.
    pub oracle_checks: u64,
    /// Oracle violations.
    pub violations: Vec<String>,
    /// Locks not idle on some node after the run (held, pending or queued).
    pub leaked: Vec<String>,
    /// Connections rejected and messages refused, summed over nodes.
    pub rejected: u64,
}

impl DemoReport {
    /// No violation, no leak, no failure.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
            && self.leaked.is_empty()
            && self.failed == 0
            && self.rejected == 0
    }
}

impl std::fmt::Display for DemoReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "hilock demo: {} nodes on 127.0.0.1, airline workload (IR 80 / R 10 / U 4 / IW 5 / W 1)",
            self.nodes
        )?;
        writeln!(
            f,
            "accesses served      {} in {:.2} s ({:.0}/s), failed {}",
            self.served,
            secs,
            self.served as f64 / secs.max(1e-9),
            self.failed
        )?;
        let per = |x: u64, d: u64| if d == 0 { 0.0 } else { x as f64 / d as f64 };
        writeln!(
            f,
            "messages             {} = {:.2} per kernel request ({} requests), {:.2} per access",
            self.messages,
            per(self.messages, self.kernel_requests),
            self.kernel_requests,
            per(self.messages, self.served)
        )?;
        writeln!(f, "acquire latency (whole hierarchy), per access mode:")?;
        writeln!(
            f,
            "  {:<4} {:>7} {:>10} {:>10} {:>10}",
            "mode", "count", "p50 ms", "p99 ms", "max ms"
        )?;
        for (m, l) in &self.latency {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            writeln!(
                f,
                "  {:<4} {:>7} {:>10.3} {:>10.3} {:>10.3}",
                m.symbol(),
                l.count,
                ms(l.p50),
                ms(l.p99),
                ms(l.max)
            )?;
        }
        writeln!(
            f,
            "oracle (Table 2.1)   {} pairs checked, {} violations",
            self.oracle_checks,
            self.violations.len()
        )?;
        for v in self.violations.iter().take(10) {
            writeln!(f, "  VIOLATION {v}")?;
        }
        writeln!(f, "left held or queued  {}", self.leaked.len())?;
        for l in self.leaked.iter().take(10) {
            writeln!(f, "  LEAK {l}")?;
        }
        if self.rejected > 0 {
            writeln!(f, "rejected connections/messages {}", self.rejected)?;
        }
        for e in self.errors.iter().take(10) {
            writeln!(f, "  ERROR {e}")?;
        }
        write!(f, "{}", if self.ok() { "OK" } else { "FAILED" })
    }
}

fn pick(rng: &mut StdRng) -> Mode {
    let mut x = rng.random_range(0..100u32);
    for (m, w) in MIX {
        if x < w {
            return m;
        }
        x -= w;
    }
    Mode::IR
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

struct Shared {
    oracle: Oracle,
    next: AtomicU64,
    failed: AtomicU64,
    errors: Mutex<Vec<String>>,
    lat: Mutex<Vec<Vec<Duration>>>,
}

#[allow(clippy::too_many_arguments)]
async fn client(
    node: Handle,
    id: u16,
    opts: DemoOptions,
    limit: u64,
    deadline: Option<Instant>,
    sh: Arc<Shared>,
    bar: ProgressBar,
) {
    let mut rng = StdRng::seed_from_u64(opts.seed.wrapping_mul(1_000_003) ^ u64::from(id));
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return;
        }
        let op = sh.next.fetch_add(1, Relaxed);
        if deadline.is_none() && op >= limit {
            return;
        }
        let ncs = opts.ncs.mul_f64(rng.random_range(0.5..1.5));
        tokio::time::sleep(ncs).await;
        let access = pick(&mut rng);
        let entry = rng.random_range(0..opts.entries.max(1));
        let (path, mode) = match access {
            Mode::IR => (format!("/airline/e{entry}"), Mode::R),
            Mode::IW => (format!("/airline/e{entry}"), Mode::W),
            m => ("/airline".to_string(), m),
        };
        let t0 = Instant::now();
        let r = node
            .lock_with(
                &path,
                mode,
                crate::token::Options {
                    priority: 0,
                    timeout: Some(opts.timeout),
                    nested: false,
                },
            )
            .await;
        let mut guard = match r {
            Ok(g) => g,
            Err(e) => {
                sh.failed.fetch_add(1, Relaxed);
                sh.errors
                    .lock()
                    .expect("lock")
                    .push(format!("node {id}: {e}"));
                bar.inc(1);
                continue;
            }
        };
        let waited = t0.elapsed();
        sh.oracle.enter(op, id, &guard);
        if access == Mode::U {
            tokio::time::sleep(opts.cs / 2).await;
            match guard.upgrade_within(opts.timeout).await {
                Ok(()) => sh.oracle.change(op, id, &guard),
                Err(e) => {
                    sh.failed.fetch_add(1, Relaxed);
                    sh.errors
                        .lock()
                        .expect("lock")
                        .push(format!("node {id}: upgrade: {e}"));
                }
            }
            tokio::time::sleep(opts.cs / 2).await;
        } else {
            tokio::time::sleep(opts.cs).await;
        }
        sh.oracle.exit(op);
        drop(guard);
        let mi = MIX.iter().position(|(m, _)| *m == access).unwrap_or(0);
        sh.lat.lock().expect("lock")[mi].push(waited);
        bar.inc(1);
    }
}

/// Run the demo; `Err` only when the cluster cannot start.
pub async fn run(opts: DemoOptions) -> Result<DemoReport, String> {
    if opts.nodes < 1 || opts.nodes > crate::config::MAX_NODES {
        return Err(format!("--nodes must be 1..={}", crate::config::MAX_NODES));
    }
    if opts.requests.is_some() && opts.seconds.is_some() {
        return Err("give --requests or --seconds, not both".into());
    }
    if opts.seconds.is_some_and(|s| !(s > 0.0 && s <= 86_400.0)) {
        return Err("--seconds must be in (0, 86400]".into());
    }
    let nodes = local_cluster(
        opts.nodes,
        "hilock-demo",
        b"demo secret, loopback only",
        opts.timeout,
    )
    .await
    .map_err(|e| format!("cannot start the cluster: {e}"))?;
    let limit = match (opts.requests, opts.seconds) {
        (Some(r), _) => r,
        (None, Some(_)) => u64::MAX,
        (None, None) => DEFAULT_REQUESTS,
    };
    let deadline = opts
        .seconds
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let bar = if !opts.progress {
        ProgressBar::hidden()
    } else if let Some(s) = opts.seconds {
        let b = ProgressBar::with_draw_target(Some(s.ceil() as u64), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        let b = ProgressBar::with_draw_target(Some(limit), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template(
                "[{elapsed_precise}] {wide_bar} {pos}/{len} accesses ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let sh = Arc::new(Shared {
        oracle: Oracle::default(),
        next: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        errors: Mutex::new(Vec::new()),
        lat: Mutex::new(vec![Vec::new(); MIX.len()]),
    });
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for n in &nodes {
        tasks.spawn(client(
            n.handle(),
            n.id(),
            opts.clone(),
            limit,
            deadline,
            sh.clone(),
            bar.clone(),
        ));
    }
    // A seconds-bounded run advances the bar by the clock and shows the count served.
    let ticker = opts.seconds.map(|_| {
        let (bar, sh) = (bar.clone(), sh.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                bar.set_position(t0.elapsed().as_secs());
                let lat = sh.lat.lock().expect("lock");
                bar.set_message(format!(
                    "{} accesses",
                    lat.iter().map(Vec::len).sum::<usize>()
                ));
            }
        })
    });
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r {
            sh.errors
                .lock()
                .expect("lock")
                .push(format!("client task: {e}"));
            sh.failed.fetch_add(1, Relaxed);
        }
    }
    let elapsed = t0.elapsed();
    if let Some(t) = ticker {
        t.abort();
    }
    bar.finish_and_clear();

    // Let the last releases travel, then look for anything left behind.
    let mut leaked = Vec::new();
    let settle = Instant::now();
    loop {
        leaked.clear();
        for n in &nodes {
            match n.status().await {
                Ok(s) => {
                    for l in s.locks.iter().filter(|l| !l.is_idle()) {
                        leaked.push(format!(
                            "node {}: {} held {} pending {} queue [{}] local {}h/{}w",
                            n.id(),
                            l.path,
                            l.held,
                            l.pending,
                            l.queue.join(" "),
                            l.holders,
                            l.waiters
                        ));
                    }
                }
                Err(e) => leaked.push(format!("node {}: {e}", n.id())),
            }
        }
        if leaked.is_empty() || settle.elapsed() > Duration::from_secs(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    let lat = std::mem::take(&mut *sh.lat.lock().expect("lock"));
    let latency = MIX
        .iter()
        .zip(lat)
        .map(|((m, _), mut v)| {
            v.sort();
            (
                *m,
                ModeLatency {
                    count: v.len(),
                    p50: percentile(&v, 0.50),
                    p99: percentile(&v, 0.99),
                    max: v.last().copied().unwrap_or_default(),
                },
            )
        })
        .collect::<Vec<_>>();
    let served = latency.iter().map(|(_, l)| l.count as u64).sum();
    let report = DemoReport {
        nodes: opts.nodes,
        served,
        failed: sh.failed.load(Relaxed),
        errors: sh.errors.lock().expect("lock").clone(),
        kernel_requests: stats.iter().map(|s| s.kernel_requests).sum(),
        messages: stats.iter().map(|s| s.frames_sent).sum(),
        elapsed,
        latency,
        oracle_checks: sh.oracle.checks(),
        violations: sh.oracle.violations(),
        leaked,
        rejected: stats
            .iter()
            .map(|s| s.rejected_connections + s.kernel_rejections)
            .sum(),
    };
    for n in nodes {
        n.shutdown().await;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_flags_exactly_the_pairs_table_2_1_forbids() {
        let o = Oracle::default();
        o.register_path(1, 0, "/t", Mode::IR);
        o.register_path(2, 1, "/t", Mode::IW);
        o.register_path(3, 2, "/t", Mode::U); // U conflicts with IW (Table 2.1)
        assert_eq!(o.violations().len(), 1, "{:?}", o.violations());
        assert!(o.violations()[0].contains("node 2 granted U while node 1 holds IW"));
        o.exit(2);
        o.exit(3);
        o.register_path(4, 1, "/t", Mode::R); // R with IR: fine
        o.register_path(5, 3, "/u", Mode::W); // another path: fine
        assert_eq!(o.violations().len(), 1);
        o.register_path(4, 1, "/t", Mode::W); // op 4 upgrades over op 1's IR
        assert_eq!(o.violations().len(), 2);
        assert_eq!(o.checks(), 2 + 1 + 2);
    }

    #[test]
    fn oracle_flags_a_fence_not_above_an_ended_conflicting_hold() {
        let o = Oracle::default();
        o.register(1, 0, "/t", Mode::W, Some(5));
        o.exit(1);
        o.register(2, 1, "/t", Mode::R, Some(6)); // above the W: fine
        o.register(3, 2, "/t", Mode::R, Some(6)); // shares R's fence: compatible, fine
        o.register(4, 0, "/u", Mode::W, Some(1)); // another path: fine
        assert_eq!(o.violations(), Vec::<String>::new());
        o.exit(2);
        o.exit(3);
        o.register(5, 1, "/t", Mode::IR, Some(7)); // IR is compatible with R: fine
        assert_eq!(o.violations(), Vec::<String>::new());
        o.exit(5);
        o.register(6, 2, "/t", Mode::W, Some(7)); // W after IR with the same fence
        assert_eq!(o.violations().len(), 1, "{:?}", o.violations());
        assert!(o.violations()[0].contains("fence 7, not above fence 7 of an earlier IR hold"));
        assert_eq!(o.fence_checks(), 4);
    }

    #[test]
    fn the_mix_is_the_thesis_mix() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = [0u32; 5];
        for _ in 0..100_000 {
            let m = pick(&mut rng);
            counts[MIX.iter().position(|x| x.0 == m).unwrap()] += 1;
        }
        for (c, (_, w)) in counts.iter().zip(MIX) {
            let share = f64::from(*c) / 1000.0;
            assert!((share - f64::from(w)).abs() < 0.7, "{counts:?}");
        }
    }
}
