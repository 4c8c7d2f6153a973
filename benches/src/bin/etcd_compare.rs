//! The hilock runtime against etcd's lock API on loopback, in one run (`docs/benchmarks.md`,
//! "Against etcd on loopback").
//!
//! Run it through the script, which installs, starts and stops etcd on 127.0.0.1:
//!
//! ```sh
//! benches/etcd-compare.sh
//! ```
//!
//! or by hand against an etcd that is running already (it needs protoc to build):
//!
//! ```sh
//! cargo run --release -p hilock-benches --features etcd --bin etcd_compare -- \
//!     --endpoint 127.0.0.1:2379
//! ```
//!
//! Options: `--endpoint HOST:PORT` (etcd's client URL, required), `--nodes N` (hilock nodes
//! on loopback, default 4), `--iters K` (measured uncontended acquire+release pairs per
//! system, default 2000), `--warmup K` (unmeasured pairs before them, default 200),
//! `--seconds S` (measured window of each contended run, default 5), `--clients 1,4,16`.
//!
//! Measured, all in one process run:
//!
//! - uncontended acquire+release latency, one client, one lock, `--iters` times: hilock
//!   with the client on one node (after the warm-up the token stays there), hilock with
//!   the client moving to the next node for every acquire (the token must travel every
//!   time), and etcd (`Lock` with the client's lease, then `Unlock`);
//! - contended throughput: C clients all taking the same exclusive lock (W for hilock)
//!   in a loop with no critical section, for `--seconds` after a 1 s warm-up; hilock
//!   clients are spread round-robin over the nodes (one `Handle` each), every etcd client
//!   has its own connection and its own lease.
//!
//! - the uncontended hilock rows again on a second cluster whose nodes hold etcd leases
//!   (`membership = "etcd"` against the same etcd), interleaved with the first cluster's
//!   runs in rounds so that both see the same machine load. This needs hilock's own `etcd`
//!   feature: `--features etcd,hilock/etcd`; without it the row says so.
//!
//! The Markdown tables go to stdout, progress to stderr.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use etcd_client::{
    Client, EventType, GetOptions, LockOptions, PutOptions, SortOrder, SortTarget, WatchOptions,
    WatchStream,
};
use hilock_kernel::Mode;
use hilock_runtime::{Handle, Node};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Checks mutual exclusion of one contended lock: set while a client holds it.
#[derive(Debug, Default)]
struct Excl {
    held: AtomicBool,
    violations: AtomicU64,
}

impl Excl {
    fn enter(&self) {
        if self.held.swap(true, SeqCst) {
            self.violations.fetch_add(1, SeqCst);
        }
    }

    fn exit(&self) {
        self.held.store(false, SeqCst);
    }
}

/// The hilock runtime against etcd's lock API on loopback (run by `benches/etcd-compare.sh`).
#[derive(clap::Parser)]
#[command(name = "etcd_compare")]
struct Opts {
    /// etcd's client address, HOST:PORT.
    #[arg(long)]
    endpoint: String,
    /// hilock nodes (2..=64).
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Timed uncontended acquire+release pairs.
    #[arg(long, default_value_t = 2000)]
    iters: usize,
    /// Untimed pairs before them.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Length of each contended measurement window.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Client counts of the contended runs.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    clients: Vec<usize>,
}

fn parse() -> Result<Opts, String> {
    let o = <Opts as clap::Parser>::parse();
    if o.endpoint.is_empty() {
        return Err("--endpoint HOST:PORT (etcd's client address) must not be empty".into());
    }
    if !(2..=64).contains(&o.nodes) {
        return Err("--nodes must be 2..=64".into());
    }
    if o.iters == 0 || o.seconds <= 0.0 || o.clients.is_empty() || o.clients.contains(&0) {
        return Err("--iters, --seconds and every --clients value must be positive".into());
    }
    Ok(o)
}

/// Latency summary of one uncontended run, in microseconds.
#[derive(Clone, Copy, Debug)]
struct Lat {
    p50: f64,
    p99: f64,
    mean: f64,
}

fn summarize(mut d: Vec<Duration>) -> Lat {
    d.sort_unstable();
    let us = |x: Duration| x.as_secs_f64() * 1e6;
    let pct = |p: f64| us(d[((d.len() as f64 * p).ceil() as usize).clamp(1, d.len()) - 1]);
    let mean = d.iter().map(|&x| us(x)).sum::<f64>() / d.len() as f64;
    Lat {
        p50: pct(0.50),
        p99: pct(0.99),
        mean,
    }
}

/// One contended run.
#[derive(Clone, Debug)]
struct Tput {
    ops_per_s: f64,
    /// Operations of each client in the measured window.
    per_client: Vec<u64>,
    /// hilock only: protocol messages (all nodes) per measured operation.
    msgs_per_op: Option<f64>,
    /// Times a client was granted the lock while another held it (must be 0).
    violations: u64,
    /// etcd session recipe: waits that looked again after 1 s without the event.
    rechecks: u64,
}

fn hilock_frames(nodes: &[Node]) -> u64 {
    nodes.iter().map(|n| n.stats().frames_sent).sum()
}

/// Acquire+release `/path` in W through `handles[i % handles.len()]`, `warmup + iters`
/// times; the last `iters` are timed.
/// The loop runs in a spawned task on the runtime's workers, as a client task of an
/// application would (not in `block_on`'s thread, which every wake-up would have to cross).
async fn hilock_uncontended(
    handles: Vec<Handle>,
    path: &str,
    warmup: usize,
    iters: usize,
) -> Result<Vec<Duration>, BoxError> {
    let path = path.to_string();
    tokio::spawn(async move {
        let mut d = Vec::with_capacity(iters);
        for i in 0..warmup + iters {
            let h = &handles[i % handles.len()];
            let t = Instant::now();
            let g = h.lock(&path, Mode::W).await?;
            drop(g);
            if i >= warmup {
                d.push(t.elapsed());
            }
        }
        Ok(d)
    })
    .await?
}

async fn etcd_connect(endpoint: &str) -> Result<(Client, i64), BoxError> {
    let mut c = Client::connect([endpoint], None).await?;
    // One lease per client (two Lock calls with the same lease are one acquisition). The
    // TTL outlives any run of this program; the lease is revoked at the end of its run.
    let lease = c.lease_grant(600, None).await?.id();
    Ok((c, lease))
}

/// How an etcd client takes the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recipe {
    /// etcd's v3lock `Lock`/`Unlock` RPCs: the server runs the lock recipe, and every
    /// waiter opens a new watch on its predecessor's key at a revision the store has
    /// reached already. etcd 3.4 serves such a watch from its "unsynced" group, which
    /// `syncWatchersLoop` catches up every 100 ms: under contention every hand-off waits
    /// for that tick.
    V3Lock,
    /// The same recipe on the client (etcd's `concurrency.Mutex`: a key per session under
    /// the lock's prefix, created with the session's lease; the holder is the key with the
    /// lowest create revision; a waiter waits for the deletion of the key created just
    /// before its own), but each session opens one watch on the prefix when it starts
    /// (a watch from the current revision is in the "synced" group and gets events as
    /// they happen) and reads deletions from it, instead of a new watch per wait.
    Session,
}

/// One etcd client: its own connection, its own lease, and for [`Recipe::Session`] its
/// standing watch on the lock's prefix.
struct EtcdSession {
    c: Client,
    lease: i64,
    recipe: Recipe,
    /// The lock's prefix (`NAME/`) and this session's key under it.
    prefix: String,
    key: String,
    watch: Option<WatchStream>,
    /// The revision of the last deletion of each key under the prefix seen on the watch.
    deleted: HashMap<Vec<u8>, i64>,
    /// Waits that had to look again after 1 s without the expected event (a safety net;
    /// reported, 0 in every run).
    rechecks: u64,
}

impl EtcdSession {
    async fn open(endpoint: &str, name: &str, recipe: Recipe) -> Result<EtcdSession, BoxError> {
        let (mut c, lease) = etcd_connect(endpoint).await?;
        let prefix = format!("{name}/");
        let watch = match recipe {
            Recipe::V3Lock => None,
            Recipe::Session => {
                let mut w = c
                    .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix()))
                    .await?;
                // The first response says the watch exists: from now on every deletion
                // under the prefix reaches this session.
                match w.message().await? {
                    Some(r) if r.created() => {}
                    other => return Err(format!("watch not created: {other:?}").into()),
                }
                Some(w)
            }
        };
        Ok(EtcdSession {
            c,
            lease,
            recipe,
            key: format!("{prefix}{lease:x}"),
            prefix,
            watch,
            deleted: HashMap::new(),
            rechecks: 0,
        })
    }

    /// Read the watch until `key` has been deleted after revision `after` (1 s at most).
    async fn wait_deleted(&mut self, key: &[u8], after: i64) -> Result<bool, BoxError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            if self.deleted.get(key).is_some_and(|&r| r > after) {
                return Ok(true);
            }
            let w = self.watch.as_mut().ok_or("no watch")?;
            let Ok(m) = tokio::time::timeout_at(deadline, w.message()).await else {
                return Ok(false);
            };
            let r = m?.ok_or("the watch ended")?;
            for e in r.events() {
                if e.event_type() == EventType::Delete {
                    if let Some(kv) = e.kv() {
                        self.deleted.insert(kv.key().to_vec(), kv.mod_revision());
                    }
                }
            }
        }
    }

    /// Take the lock; returns the key to release (`unlock`).
    async fn lock(&mut self, name: &str) -> Result<Vec<u8>, BoxError> {
        if self.recipe == Recipe::V3Lock {
            let r = self
                .c
                .lock(name, Some(LockOptions::new().with_lease(self.lease)))
                .await?;
            return Ok(r.key().to_vec());
        }
        let put = self
            .c
            .put(
                self.key.as_str(),
                "",
                Some(PutOptions::new().with_lease(self.lease)),
            )
            .await?;
        let mine = put.header().ok_or("put without a header")?.revision();
        loop {
            // The key created last before this session's own, if any.
            let g = self
                .c
                .get(
                    self.prefix.as_str(),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_max_create_revision(mine - 1)
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(1),
                    ),
                )
                .await?;
            let at = g.header().ok_or("get without a header")?.revision();
            let Some(pred) = g.kvs().first().map(|kv| kv.key().to_vec()) else {
                return Ok(self.key.clone().into_bytes());
            };
            // It existed at revision `at`: wait for a deletion after that.
            if !self.wait_deleted(&pred, at).await? {
                self.rechecks += 1;
            }
        }
    }

    async fn unlock(&mut self, key: Vec<u8>) -> Result<(), BoxError> {
        match self.recipe {
            Recipe::V3Lock => {
                self.c.unlock(key).await?;
            }
            Recipe::Session => {
                self.c.delete(key, None).await?;
            }
        }
        Ok(())
    }

    async fn close(mut self) -> Result<u64, BoxError> {
        self.c.lease_revoke(self.lease).await?;
        Ok(self.rechecks)
    }
}

async fn etcd_cycle(s: &mut EtcdSession, name: &str, excl: Option<&Excl>) -> Result<(), BoxError> {
    let key = s.lock(name).await?;
    if let Some(x) = excl {
        x.enter();
        x.exit();
    }
    s.unlock(key).await
}

/// Spawned like [`hilock_uncontended`].
async fn etcd_uncontended(
    endpoint: &str,
    name: &str,
    recipe: Recipe,
    warmup: usize,
    iters: usize,
) -> Result<Vec<Duration>, BoxError> {
    let mut s = EtcdSession::open(endpoint, name, recipe).await?;
    let name = name.to_string();
    tokio::spawn(async move {
        let mut d = Vec::with_capacity(iters);
        for i in 0..warmup + iters {
            let t = Instant::now();
            etcd_cycle(&mut s, &name, None).await?;
            if i >= warmup {
                d.push(t.elapsed());
            }
        }
        s.close().await?;
        Ok(d)
    })
    .await?
}

const WARM: Duration = Duration::from_secs(1);

/// Counts the operations a client completes inside the window `[start + WARM, end)`.
struct Window {
    from: Instant,
    end: Instant,
}

impl Window {
    fn new(seconds: f64) -> Window {
        let from = Instant::now() + WARM;
        Window {
            from,
            end: from + Duration::from_secs_f64(seconds),
        }
    }
}

async fn hilock_contended(
    nodes: &[Node],
    clients: usize,
    path: &str,
    seconds: f64,
) -> Result<Tput, BoxError> {
    let w = Arc::new(Window::new(seconds));
    let excl = Arc::new(Excl::default());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients {
        let h = nodes[i % nodes.len()].handle();
        let (w, excl, path) = (w.clone(), excl.clone(), path.to_string());
        tasks.spawn(async move {
            let mut ops = 0u64;
            loop {
                let g = h.lock(&path, Mode::W).await?;
                excl.enter();
                excl.exit();
                drop(g);
                let now = Instant::now();
                if now >= w.end {
                    break;
                }
                if now >= w.from {
                    ops += 1;
                }
            }
            Ok::<_, BoxError>((i, ops))
        });
    }
    // Protocol messages inside the window: read the counters at both ends.
    tokio::time::sleep_until(w.from.into()).await;
    let f0 = hilock_frames(nodes);
    tokio::time::sleep_until(w.end.into()).await;
    let frames = hilock_frames(nodes) - f0;
    let mut per_client = vec![0; clients];
    while let Some(r) = tasks.join_next().await {
        let (i, ops) = r??;
        per_client[i] = ops;
    }
    let total: u64 = per_client.iter().sum();
    Ok(Tput {
        ops_per_s: total as f64 / seconds,
        per_client,
        msgs_per_op: (total > 0).then(|| frames as f64 / total as f64),
        violations: excl.violations.load(SeqCst),
        rechecks: 0,
    })
}

async fn etcd_contended(
    endpoint: &str,
    recipe: Recipe,
    clients: usize,
    name: &str,
    seconds: f64,
) -> Result<Tput, BoxError> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(EtcdSession::open(endpoint, name, recipe).await?);
    }
    let w = Arc::new(Window::new(seconds));
    let excl = Arc::new(Excl::default());
    let mut tasks = tokio::task::JoinSet::new();
    for (i, mut c) in conns.into_iter().enumerate() {
        let (w, excl, name) = (w.clone(), excl.clone(), name.to_string());
        tasks.spawn(async move {
            let mut ops = 0u64;
            loop {
                etcd_cycle(&mut c, &name, Some(&excl)).await?;
                let now = Instant::now();
                if now >= w.end {
                    break;
                }
                if now >= w.from {
                    ops += 1;
                }
            }
            let rechecks = c.close().await?;
            Ok::<_, BoxError>((i, ops, rechecks))
        });
    }
    let mut per_client = vec![0; clients];
    let mut rechecks = 0;
    while let Some(r) = tasks.join_next().await {
        let (i, ops, re) = r??;
        per_client[i] = ops;
        rechecks += re;
    }
    let total: u64 = per_client.iter().sum();
    Ok(Tput {
        ops_per_s: total as f64 / seconds,
        per_client,
        rechecks,
        msgs_per_op: None,
        violations: excl.violations.load(SeqCst),
    })
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        let r = a / b;
        if r >= 10.0 {
            format!("{r:.0}")
        } else if r >= 0.1 {
            format!("{r:.2}")
        } else {
            format!("{r:.4}")
        }
    } else {
        "–".into()
    }
}

fn us(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn spread(v: &[u64]) -> String {
    let min = v.iter().min().copied().unwrap_or(0);
    let max = v.iter().max().copied().unwrap_or(0);
    format!("{min}–{max}")
}

/// `n` nodes on 127.0.0.1 with `membership = "etcd"` (leases at `endpoint`, TTL 10 s).
/// A cluster of `n` nodes holding etcd leases at `endpoint`; with `recovery`, also
/// `etcd_recovery = true` (every message stamped with its epoch; `docs/faults.md`, "With
/// etcd recovery").
async fn etcd_member_cluster(
    n: usize,
    endpoint: &str,
    recovery: bool,
) -> Result<Vec<Node>, BoxError> {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for id in 0..n {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(hilock_runtime::NodeAddr {
            id: id as u16,
            addr: l.local_addr()?,
        });
        listeners.push(l);
    }
    let cluster = format!(
        "etcd-compare-members{}-{}",
        if recovery { "-recovery" } else { "" },
        std::process::id()
    );
    let mut nodes = Vec::new();
    for (id, l) in listeners.into_iter().enumerate() {
        let mut c = hilock_runtime::Config::new(
            cluster.as_str(),
            b"etcd-compare secret".to_vec(),
            id as u16,
            addrs.clone(),
        )?;
        c.request_timeout = Duration::from_secs(30);
        c.membership = hilock_runtime::config::Membership::Etcd {
            endpoints: vec![endpoint.to_string()],
            ttl_s: 10,
            grace: Duration::from_secs(1),
        };
        c.etcd_recovery = recovery;
        nodes.push(Node::start_on(c, l).await?);
    }
    Ok(nodes)
}

async fn run(o: Opts) -> Result<(), BoxError> {
    let started = Instant::now();
    eprintln!("etcd at {} ...", o.endpoint);
    let etcd_version = {
        let mut c = Client::connect([o.endpoint.as_str()], None).await?;
        c.status().await?.version().to_string()
    };
    eprintln!(
        "etcd {etcd_version}; starting {} hilock nodes on 127.0.0.1",
        o.nodes
    );
    let nodes = hilock_runtime::oracle::local_cluster(
        o.nodes,
        "etcd-compare",
        b"etcd-compare secret",
        Duration::from_secs(30),
    )
    .await?;
    let handles: Vec<Handle> = nodes.iter().map(|n| n.handle()).collect();
    // Every run uses lock names of its own (a prefix per process run).
    let run_id = std::process::id();

    eprintln!(
        "uncontended: {} warm-up + {} measured acquire+release pairs each",
        o.warmup, o.iters
    );
    eprintln!("  hilock, client on node 0 ...");
    let h_same =
        summarize(hilock_uncontended(handles[..1].to_vec(), "/u-same", o.warmup, o.iters).await?);
    eprintln!("  hilock, client on the next node every time ...");
    let f0 = hilock_frames(&nodes);
    let h_rot_d = hilock_uncontended(handles.clone(), "/u-moving", o.warmup, o.iters).await?;
    let rot_msgs = (hilock_frames(&nodes) - f0) as f64 / (o.warmup + o.iters) as f64;
    let h_rot = summarize(h_rot_d);
    // Membership through etcd on vs off: a second cluster whose nodes hold etcd leases;
    // both clusters measured in alternating rounds (same load on the machine).
    eprintln!("  hilock with etcd membership vs without, client on node 0, 5 rounds ...");
    let members = match etcd_member_cluster(o.nodes, &o.endpoint, false).await {
        Ok(n) => match etcd_member_cluster(o.nodes, &o.endpoint, true).await {
            Ok(r) => Ok((n, r)),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    let on_off = match &members {
        Ok((m, r)) => {
            let mh: Vec<Handle> = m.iter().map(|n| n.handle()).collect();
            let rh: Vec<Handle> = r.iter().map(|n| n.handle()).collect();
            let (mut on, mut off, mut rec) = (Vec::new(), Vec::new(), Vec::new());
            let per = (o.iters / 5).max(1);
            for round in 0..5 {
                let p = format!("/u-onoff-{round}");
                off.extend(hilock_uncontended(handles[..1].to_vec(), &p, o.warmup, per).await?);
                on.extend(hilock_uncontended(mh[..1].to_vec(), &p, o.warmup, per).await?);
                rec.extend(hilock_uncontended(rh[..1].to_vec(), &p, o.warmup, per).await?);
            }
            let (off, on, rec) = (summarize(off), summarize(on), summarize(rec));
            // Also on stderr at once: a later etcd error ends the run before the report.
            eprintln!(
                "  p50 / p99 / mean µs: static {} / {} / {}, etcd {} / {} / {}, \
                 etcd + recovery {} / {} / {}",
                us(off.p50),
                us(off.p99),
                us(off.mean),
                us(on.p50),
                us(on.p99),
                us(on.mean),
                us(rec.p50),
                us(rec.p99),
                us(rec.mean)
            );
            Some((off, on, rec))
        }
        Err(e) => {
            eprintln!("  skipped: {e}");
            None
        }
    };
    if let Ok((m, r)) = members {
        for n in m.into_iter().chain(r) {
            n.shutdown().await;
        }
    }
    eprintln!("  etcd, session recipe ...");
    let e_ses = summarize(
        etcd_uncontended(
            &o.endpoint,
            &format!("u-ses-{run_id}"),
            Recipe::Session,
            o.warmup,
            o.iters,
        )
        .await?,
    );
    eprintln!("  etcd, v3lock RPC ...");
    let e_v3 = summarize(
        etcd_uncontended(
            &o.endpoint,
            &format!("u-v3-{run_id}"),
            Recipe::V3Lock,
            o.warmup,
            o.iters,
        )
        .await?,
    );

    let mut contended = Vec::new();
    for &c in &o.clients {
        eprintln!(
            "contended, {c} client(s), {:.0} s warm-up + {} s: hilock ...",
            WARM.as_secs_f64(),
            o.seconds
        );
        let h = hilock_contended(&nodes, c, &format!("/c{c}"), o.seconds).await?;
        eprintln!("  {:.0} ops/s; etcd session recipe ...", h.ops_per_s);
        let es = etcd_contended(
            &o.endpoint,
            Recipe::Session,
            c,
            &format!("c-ses-{run_id}-{c}"),
            o.seconds,
        )
        .await?;
        eprintln!("  {:.0} ops/s; etcd v3lock RPC ...", es.ops_per_s);
        let ev = etcd_contended(
            &o.endpoint,
            Recipe::V3Lock,
            c,
            &format!("c-v3-{run_id}-{c}"),
            o.seconds,
        )
        .await?;
        eprintln!("  {:.0} ops/s", ev.ops_per_s);
        contended.push((c, h, es, ev));
    }
    for n in nodes {
        n.shutdown().await;
    }

    println!(
        "hilock: {} nodes on 127.0.0.1 in this process (TCP between nodes, `Handle::lock` in \
         the client's process); etcd {etcd_version} at {} (etcd-client, gRPC; every client \
         its own connection and lease). {} cores; run took {:.0} s.\n",
        o.nodes,
        o.endpoint,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        started.elapsed().as_secs_f64()
    );
    println!(
        "Uncontended acquire+release, one client, one lock, {} pairs after {} warm-up \
         pairs (µs; lower is better). etcd: the session recipe (put, get, delete: one \
         standing watch per session), and etcd's v3lock Lock/Unlock RPCs:\n",
        o.iters, o.warmup
    );
    println!("| measurement | hilock | etcd session | etcd v3lock | hilock / etcd session |");
    println!("|---|---:|---:|---:|---:|");
    for (label, h) in [
        ("client on one node (token stays there)", h_same),
        ("client on the next node every time (token moves)", h_rot),
    ] {
        for (stat, hv, ev, vv) in [
            ("p50", h.p50, e_ses.p50, e_v3.p50),
            ("p99", h.p99, e_ses.p99, e_v3.p99),
            ("mean", h.mean, e_ses.mean, e_v3.mean),
        ] {
            println!(
                "| {stat}, hilock {label} | {} | {} | {} | {} |",
                us(hv),
                us(ev),
                us(vv),
                ratio(hv, ev)
            );
        }
    }
    println!(
        "\nhilock protocol messages per acquire+release with the client moving: {rot_msgs:.2}\n"
    );
    match on_off {
        Some((off, on, rec)) => {
            println!(
                "Membership through etcd on vs off: the uncontended acquire+release \
                 of a client on node 0 (token local), on the cluster above (static), on a \
                 second cluster of {n} nodes holding etcd leases (TTL 10 s) at the same etcd and \
                 on a third with etcd leases and `etcd_recovery = true`, in 5 alternating \
                 rounds of {} pairs each (µs):\n",
                (o.iters / 5).max(1),
                n = o.nodes,
            );
            println!(
                "| statistic | static | etcd membership | etcd membership / static | \
                 etcd + recovery | etcd + recovery / static |"
            );
            println!("|---|---:|---:|---:|---:|---:|");
            for (stat, a, b, c) in [
                ("p50", off.p50, on.p50, rec.p50),
                ("p99", off.p99, on.p99, rec.p99),
                ("mean", off.mean, on.mean, rec.mean),
            ] {
                println!(
                    "| {stat} | {} | {} | {} | {} | {} |",
                    us(a),
                    us(b),
                    ratio(b, a),
                    us(c),
                    ratio(c, a)
                );
            }
            println!();
        }
        None => println!(
            "Membership through etcd on vs off: not measured (this build of hilock has no \
             `etcd` feature: run with `--features etcd,hilock/etcd`).\n"
        ),
    }
    println!(
        "Contended: C clients, one exclusive lock (hilock W), acquire then release at once, \
         {} s measured after a {:.0} s warm-up (ops/s; higher is better):\n",
        o.seconds,
        WARM.as_secs_f64()
    );
    println!(
        "| clients | hilock ops/s | etcd session ops/s | etcd v3lock ops/s | hilock / etcd session | \
         hilock msgs/op | ops per client (min–max): hilock | etcd session | etcd v3lock |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (c, h, es, ev) in &contended {
        println!(
            "| {c} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            h.ops_per_s,
            es.ops_per_s,
            ev.ops_per_s,
            ratio(h.ops_per_s, es.ops_per_s),
            h.msgs_per_op.map_or("–".into(), |m| format!("{m:.2}")),
            spread(&h.per_client),
            spread(&es.per_client),
            spread(&ev.per_client)
        );
    }
    let violations: u64 = contended
        .iter()
        .map(|(_, h, es, ev)| h.violations + es.violations + ev.violations)
        .sum();
    let rechecks: u64 = contended.iter().map(|(_, _, es, _)| es.rechecks).sum();
    println!(
        "\nMutual exclusion, checked in every contended run (a flag set while a client \
         holds the lock): {violations} violations. etcd session recipe: {rechecks} waits \
         looked again after 1 s without the deletion event."
    );
    if violations > 0 {
        return Err(format!("{violations} mutual exclusion violations").into());
    }
    Ok(())
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("etcd_compare: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("etcd_compare: cannot start tokio: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(o)) {
        eprintln!("etcd_compare: {e}");
        std::process::exit(1);
    }
}
