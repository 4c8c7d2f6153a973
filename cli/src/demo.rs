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
//! Every grant is registered with the history checker of the library
//! ([`hilock_runtime::oracle::Oracle`]), which flags two holds Table 2.1 does not allow
//! together.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hilock_kernel::Mode;
use hilock_runtime::oracle::{local_cluster_recording, Oracle};
use hilock_runtime::token::Handle;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{init_logs, runtime};

// The access mix of the thesis (section 4.1), in percent.
use hilock_spec::workload::AIRLINE_MIX as MIX;

/// `hilock demo`: the command line's options checked, the run, its report.
#[allow(clippy::too_many_arguments)]
pub fn command(
    nodes: usize,
    requests: Option<u64>,
    seconds: Option<f64>,
    cs_ms: f64,
    ncs_ms: f64,
    entries: usize,
    seed: u64,
    quiet: bool,
    record: Option<std::path::PathBuf>,
) -> Result<(String, bool), String> {
    // Stopping the cluster at the end makes every node see its peers go: not news here.
    init_logs("error");
    let ms = |x: f64, what: &str| {
        if x.is_finite() && (0.0..=60_000.0).contains(&x) {
            Ok(std::time::Duration::from_secs_f64(x / 1e3))
        } else {
            Err(format!("--{what} must be in 0..=60000"))
        }
    };
    if entries == 0 {
        return Err("--entries must be at least 1".into());
    }
    let opts = DemoOptions {
        nodes,
        requests,
        seconds,
        cs: ms(cs_ms, "cs-ms")?,
        ncs: ms(ncs_ms, "ncs-ms")?,
        entries,
        seed,
        progress: !quiet,
        record,
        ..Default::default()
    };
    let report = runtime()?.block_on(run(opts))?;
    let ok = report.ok();
    Ok((format!("{report}\n"), ok))
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
    /// Every node records its kernel steps in `node-<id>.jsonl` here (`hilock
    /// trace-check`).
    pub record: Option<std::path::PathBuf>,
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
            record: None,
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
                hilock_runtime::token::Options {
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
    if opts.nodes < 1 || opts.nodes > hilock_runtime::config::MAX_NODES {
        return Err(format!(
            "--nodes must be 1..={}",
            hilock_runtime::config::MAX_NODES
        ));
    }
    if opts.requests.is_some() && opts.seconds.is_some() {
        return Err("give --requests or --seconds, not both".into());
    }
    if opts.seconds.is_some_and(|s| !(s > 0.0 && s <= 86_400.0)) {
        return Err("--seconds must be in (0, 86400]".into());
    }
    if let Some(dir) = &opts.record {
        // The directory is created (parents too); an existing file in its place, or one
        // that cannot be created, is named here rather than failing the start.
        if dir.exists() && !dir.is_dir() {
            return Err(format!(
                "--record {}: it is a file, not a directory",
                dir.display()
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("--record {}: cannot create it: {e}", dir.display()))?;
        // Each node appends: a directory of earlier records would mix runs, and so would
        // a record of a node this run does not have (`trace-check DIR/*.jsonl`).
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("--record {}: cannot read it: {e}", dir.display()))?;
        let mut earlier: Vec<std::path::PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| {
                f.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("node-") && n.ends_with(".jsonl"))
            })
            .collect();
        earlier.sort();
        if let Some(f) = earlier.first() {
            return Err(format!(
                "{} exists: record into an empty directory",
                f.display()
            ));
        }
    }
    let nodes = local_cluster_recording(
        opts.nodes,
        "hilock-demo",
        b"demo secret, loopback only",
        opts.timeout,
        opts.record.as_deref(),
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

    /// `hilock demo` exits 1 when its report is not ok (`docs/cli.md`, "Exit codes"): a
    /// violation found by the history checker, a lock left held or queued on some node, a
    /// failed access or a refused message each fail the run, and the report names it.
    #[test]
    fn a_violation_a_leftover_lock_a_failure_or_a_refusal_fails_the_demo() {
        assert!(DemoReport::default().ok());
        let bad = [
            DemoReport {
                violations: vec!["n0 W and n1 R on /db at once".into()],
                ..Default::default()
            },
            DemoReport {
                leaked: vec!["node 0: /db held W".into()],
                ..Default::default()
            },
            DemoReport {
                failed: 1,
                ..Default::default()
            },
            DemoReport {
                rejected: 1,
                ..Default::default()
            },
        ];
        for r in bad {
            assert!(!r.ok(), "{r:?}");
            let text = r.to_string();
            for line in r.violations.iter().chain(&r.leaked) {
                assert!(text.contains(line.as_str()), "{text}");
            }
        }
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
