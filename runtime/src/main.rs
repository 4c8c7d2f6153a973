//! The `hilock` command.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "hilock",
    version,
    about = "Peer-to-peer multi-mode hierarchical locking (Desai & Mueller), machine-checked"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a loopback cluster and run the thesis airline workload through the real lock
    /// API, checking every grant against Table 2.1; print messages/request and latencies.
    Demo {
        /// Nodes in the cluster (1..=64).
        #[arg(long, default_value_t = 8)]
        nodes: usize,
        /// Accesses to serve, all nodes together (default 2000).
        #[arg(long, conflicts_with = "seconds")]
        requests: Option<u64>,
        /// Run for this many seconds instead.
        #[arg(long)]
        seconds: Option<f64>,
        /// Critical section in milliseconds (the thesis's 15 ms, scaled down).
        #[arg(long, default_value_t = 1.0)]
        cs_ms: f64,
        /// Mean non-critical section in milliseconds (ratio 10, as in the thesis).
        #[arg(long, default_value_t = 10.0)]
        ncs_ms: f64,
        /// Entries of the airline table.
        #[arg(long, default_value_t = 16)]
        entries: usize,
        /// Seed of the clients' choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Run a node until Ctrl-C or SIGTERM (logs on stderr; RUST_LOG=hilock=debug for more).
    /// The file names the engine: `engine = "token"` (the default) or `engine = "ring"` (a
    /// node of the ring of the Chord lock paper, which runs until its graceful leave is done or the
    /// membership service goes away).
    Node {
        /// The configuration file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// This node's id (overrides `id` in the file).
        #[arg(long)]
        id: Option<u16>,
    },
    /// Run a node of the ring engine (the Chord lock paper) until its graceful leave completes or the
    /// membership service goes away; its address is the `--id`th of `--peers`.
    RingNode {
        /// This node's slot (0..16).
        #[arg(long)]
        id: u16,
        /// Every slot's address, in slot order, comma-separated (127.0.0.1:7200,…).
        #[arg(long)]
        peers: String,
        /// The membership service's address.
        #[arg(long)]
        membership: std::net::SocketAddr,
    },
    /// The ring engine (the Chord lock paper): its membership service, joins and graceful leaves.
    Ring {
        #[command(subcommand)]
        command: RingCommand,
    },
    /// Hold a lock while a command runs (like flock): `hilock lock /db/flights W -- cmd args`.
    /// The command runs in its own process group and dies with the lock. Exits with the
    /// command's status (128+N if signal N killed it); 2 (and one line on stderr) if the
    /// lock is not granted; 75 if the connection to the node closed while the command ran,
    /// 76 if the node reported the lock lost and 77 if the node's etcd lease was lost or
    /// not renewed in time (membership through etcd; the command's group was killed first).
    ///
    /// With the --config of a ring (`engine = "ring"`, the Chord lock paper) and --client-id: the
    /// ring client itself holds the lock of the path's top-level element (its placement
    /// key; the ring's locks are exclusive: MODE must be W), reads the lock's entry every
    /// second while the command runs (never taking it again) and unlocks it at the end;
    /// 76 if it is no longer this hold (another client got it, or it was unlocked), 75 if
    /// the ring did not answer within the timeout. HILOCK_FENCE is the hold's fencing
    /// token (the entry's version); no lease.
    ///
    /// With --txn: `hilock lock --txn /a:W /b:R -- cmd args` takes every `PATH:R|W` in one
    /// transaction of the agents engine (Wiger's locks, deadlocks detected and resolved) and
    /// runs the command once all are held; the exit codes are the same.
    Lock {
        /// The lock path and mode: `/db/flights/UA93 W` (mode IR, R, U, IW or W); with
        /// --txn, one or more `PATH:R` or `PATH:W`.
        #[arg(required = true)]
        locks: Vec<String>,
        /// Take the locks as one transaction of the agents engine.
        #[arg(long)]
        txn: bool,
        /// With --txn: abort instead of surrendering a lock already reported held.
        #[arg(long, requires = "txn")]
        abort_on_deadlock: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
        #[command(flatten)]
        at: ClientAt,
        /// Give up after this many milliseconds (default: `request_timeout_ms` of the file
        /// given with --config, else 30000). The command itself gives up one second later
        /// if the node has not answered by then.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Request priority (0..=255, higher first).
        #[arg(long, default_value_t = 0)]
        priority: u8,
        /// When the lock is lost or the command exits leaving processes in its group: how
        /// long after SIGTERM before SIGKILL, in milliseconds.
        #[arg(long, default_value_t = DEFAULT_KILL_GRACE_MS)]
        kill_grace_ms: u64,
        /// With the --config of a ring (`engine = "ring"`): this client's id on the ring,
        /// 0..=255. No two running clients may share one: the ring's lock belongs to the
        /// id (a lock left by a killed `hilock lock` is taken over by the next one with
        /// its id).
        #[arg(long)]
        client_id: Option<u8>,
    },
    /// Internal: the first program `hilock lock` starts in the command's process group; it
    /// waits until the node knows the group, then executes the command.
    #[command(name = "exec-gated", hide = true)]
    ExecGated {
        /// The file descriptor to wait on.
        fd: i32,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The bakery lock of the bakery design over redis-server replicas (quorum reads and writes,
    /// leases); no hilock node needed.
    Bakery {
        #[command(subcommand)]
        command: BakeryCommand,
    },
    /// Print a running node's locks, token, queues and peers; with the --config of a ring
    /// (`engine = "ring"`), the ring as `hilock ring status` prints it.
    Status {
        #[command(flatten)]
        at: ClientAt,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Give up (exit 2, one line) if the node has not answered within this many
        /// milliseconds.
        #[arg(long, default_value_t = DEFAULT_STATUS_TIMEOUT_MS)]
        timeout_ms: u64,
    },
    /// Print the specification: modes, Tables 2.1–2.4 (literal and derived) and the rules.
    Spec {
        /// Print it as JSON (format hilock-spec/1).
        #[arg(long)]
        json: bool,
    },
    /// Run scenario files through the kernel and print their traces; exit 1 if an expected
    /// state does not match, 2 if a file is malformed or inconsistent.
    Scenario {
        /// The scenarios (JSON), e.g. spec/scenarios/*.json.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the trace as JSON (format hilock-trace/1).
        #[arg(long)]
        json: bool,
    },
    /// Print a trace file step by step; with --svg/--html also write its message sequence
    /// diagram to a file that opens in a browser without a server.
    Replay {
        /// The trace (JSON): hilock-trace/1, or a tree, agents or bakery model trace.
        file: PathBuf,
        /// Write the sequence diagram as SVG to this file.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Write the sequence diagram and the steps as an HTML page to this file.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Check a model configuration exhaustively (progress on stderr); exit 1 and write the
    /// counterexample traces if a property fails.
    Check {
        /// The model configuration (JSON), e.g. models/configs/star3-r-w.json.
        file: PathBuf,
        /// Where to write counterexample traces.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Serve the Stateright Explorer for a model configuration on 127.0.0.1; with --trace,
    /// print the URL of the trace's last state (exit 2 if the trace does not fit).
    Explore {
        /// The model configuration (JSON).
        file: PathBuf,
        /// The port.
        #[arg(long, default_value_t = 3000)]
        port: u16,
        /// A trace of this configuration (hilock-trace/1, e.g. a counterexample of
        /// `hilock check`) to open at its last state.
        #[arg(long)]
        trace: Option<PathBuf>,
    },
}

/// `hilock ring …`.
#[derive(Subcommand, Debug)]
enum RingCommand {
    /// Run the ring's membership service (the `[ring]` table of the file: its address, the
    /// first view, the lease) until Ctrl-C or SIGTERM.
    Membership {
        /// The configuration file (TOML, `engine = "ring"`).
        #[arg(long)]
        config: PathBuf,
    },
    /// Ask the membership service to let slot ID join (its node must be running: `hilock
    /// node --config F --id ID`) and wait until the new view is settled: every node of the
    /// change installed it and holds every entry it must. Exit 2 (one line) on timeout.
    Join {
        /// The slot.
        #[arg(long)]
        id: u16,
        #[command(flatten)]
        at: RingAt,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Ask the membership service for the graceful leave of slot ID (its entries are
    /// handed over while clients hold locks; its process exits once the change is done)
    /// and wait until the new view is settled. Exit 2 (one line) on timeout.
    Leave {
        /// The slot.
        #[arg(long)]
        id: u16,
        #[command(flatten)]
        at: RingAt,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Print the ring: the view (epoch, members), each slot's identifier, the key range it
    /// serves as primary, that range's replica set, and what each node reports (its view,
    /// its entries).
    Status {
        /// The configuration file (TOML, `engine = "ring"`).
        #[arg(long)]
        config: PathBuf,
        /// Print JSON (format hilock-ring-status/1).
        #[arg(long)]
        json: bool,
        /// Wait at most this many milliseconds for each answer.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
    },
}

/// Where the ring's membership service is.
#[derive(clap::Args, Debug)]
struct RingAt {
    /// The configuration file (its `[ring]` table's `membership`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// …or the membership service's address.
    #[arg(long, conflicts_with = "config")]
    membership: Option<std::net::SocketAddr>,
}

/// The `[ring]` table of `file` (any node's id will do: the table is the cluster's).
fn ring_config(file: &std::path::Path) -> Result<hilock::config::RingConfig, String> {
    let cfg = hilock::Config::from_file(file, Some(0))?;
    cfg.ring.ok_or_else(|| {
        format!(
            "{}: not a ring configuration (engine = \"ring\" and a [ring] table)",
            file.display()
        )
    })
}

impl RingAt {
    fn membership(&self) -> Result<std::net::SocketAddr, String> {
        match (&self.config, self.membership) {
            (_, Some(m)) => Ok(m),
            (Some(c), None) => Ok(ring_config(c)?.membership),
            (None, None) => Err("give --config or --membership".into()),
        }
    }
}

fn ring(command: RingCommand) -> Result<(String, bool), String> {
    init_logs("hilock=info");
    let ms = std::time::Duration::from_millis;
    match command {
        RingCommand::Membership { config } => {
            hilock::ring::membership_service(&ring_config(&config)?).map(|s| (s, true))
        }
        RingCommand::Status {
            config,
            json,
            timeout_ms,
        } => hilock::ring::status(
            &hilock::Config::from_file(&config, Some(0))?,
            json,
            ms(timeout_ms),
        )
        .map(|s| (s, true)),
        RingCommand::Join { id, at, timeout_ms } => hilock::ring::change(
            at.membership()?,
            hilock::ring::Request::Join(id),
            ms(timeout_ms),
        )
        .map(|s| (s, true)),
        RingCommand::Leave { id, at, timeout_ms } => hilock::ring::change(
            at.membership()?,
            hilock::ring::Request::Leave(id),
            ms(timeout_ms),
        )
        .map(|s| (s, true)),
    }
}

/// Where the node's client socket is.
#[derive(clap::Args, Debug)]
struct ClientAt {
    /// The node's client socket.
    #[arg(long, env = "HILOCK_SOCKET")]
    socket: Option<PathBuf>,
    /// …or the node's configuration file (its `client` entry).
    #[arg(long, conflicts_with = "socket")]
    config: Option<PathBuf>,
    /// The node id, with --config.
    #[arg(long, requires = "config")]
    id: Option<u16>,
}

impl ClientAt {
    /// The lock timeout a request should carry when none is given: the node's own
    /// default from its file, if the socket comes from one.
    fn default_timeout_ms(&self) -> Result<u64, String> {
        match &self.config {
            Some(c) => Ok(hilock::Config::from_file(c, self.id)?
                .request_timeout
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX)),
            None => Ok(DEFAULT_LOCK_TIMEOUT_MS),
        }
    }

    fn socket(&self) -> Result<PathBuf, String> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        let Some(c) = &self.config else {
            return Err("give --socket (or HILOCK_SOCKET) or --config".into());
        };
        let cfg = hilock::Config::from_file(c, self.id)?;
        cfg.client
            .ok_or_else(|| format!("{} has no `client` socket", c.display()))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))
}

/// Default of `hilock status --timeout-ms`.
const DEFAULT_STATUS_TIMEOUT_MS: u64 = 5000;

/// Default of `hilock lock --timeout-ms` with `--socket` (the configuration file's default
/// `request_timeout_ms` too).
const DEFAULT_LOCK_TIMEOUT_MS: u64 = 30_000;

/// How much longer than the lock timeout the command waits for the node's answer.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

fn init_logs(default: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a terminal: plain text in files and journals.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[allow(clippy::too_many_arguments)]
fn demo(
    nodes: usize,
    requests: Option<u64>,
    seconds: Option<f64>,
    cs_ms: f64,
    ncs_ms: f64,
    entries: usize,
    seed: u64,
    quiet: bool,
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
    let opts = hilock::demo::DemoOptions {
        nodes,
        requests,
        seconds,
        cs: ms(cs_ms, "cs-ms")?,
        ncs: ms(ncs_ms, "ncs-ms")?,
        entries,
        seed,
        progress: !quiet,
        ..Default::default()
    };
    let report = runtime()?.block_on(hilock::demo::run(opts))?;
    let ok = report.ok();
    Ok((format!("{report}\n"), ok))
}

fn node(config: &std::path::Path, id: Option<u16>) -> Result<(String, bool), String> {
    init_logs("hilock=info");
    let cfg = hilock::Config::from_file(config, id)?;
    if cfg.engine == hilock::config::Engine::Ring {
        return hilock::ring::serve_config(&cfg).map(|s| (s, true));
    }
    runtime()?.block_on(async {
        let node = hilock::Node::start(cfg).await.map_err(|e| e.to_string())?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| format!("cannot wait for SIGTERM: {e}"))?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?,
            _ = term.recv() => {}
        }
        tracing::info!("stopping");
        node.shutdown().await;
        Ok((String::new(), true))
    })
}

/// Default of `hilock lock --kill-grace-ms`.
const DEFAULT_KILL_GRACE_MS: u64 = 2000;

/// `hilock lock`: the connection to the node closed while the command ran (the node
/// stopped or crashed); the command's group was killed.
const EXIT_NODE_GONE: u8 = 75;

/// `hilock lock`: the node reported the lock lost (e.g. it is stopping); the command's
/// group was killed.
const EXIT_LOCK_LOST: u8 = 76;

/// `hilock lock`: the node's etcd lease was lost (the node said so), or its end passed
/// without a renewal (the node may be paused or cut off from etcd); the command's group
/// was killed.
const EXIT_LEASE_LOST: u8 = 77;

/// The end of the node's lease a reply carries, as a local instant, and the grace.
fn lease_deadline(
    r: &hilock::client::Reply,
) -> Option<(tokio::time::Instant, std::time::Duration)> {
    let until = r.lease_until_ms?;
    let grace = std::time::Duration::from_millis(r.lease_grace_ms.unwrap_or(0));
    Some((hilock::proc::monotonic_ms_to_instant(until), grace))
}

/// Kill every process of group `pgid`: SIGTERM, then SIGKILL after `grace`; reap `child`
/// (the group's leader) on the way. Returns once no process of the group is left (or
/// after a further 10 s of SIGKILL, which only an unkillable process survives).
async fn kill_group(pgid: i32, child: &mut tokio::process::Child, grace: std::time::Duration) {
    use hilock::proc::{signal_group, wait_group_gone};
    use std::time::Instant;
    let _ = signal_group(pgid, libc::SIGTERM);
    let reap = async {
        let _ = child.wait().await;
    };
    let _ = tokio::time::timeout(grace, async {
        reap.await;
        wait_group_gone(pgid, Instant::now() + grace).await
    })
    .await;
    if hilock::proc::group_alive(pgid) {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await;
    wait_group_gone(pgid, Instant::now() + std::time::Duration::from_secs(10)).await;
}

#[allow(clippy::too_many_arguments)]
#[derive(Subcommand, Debug)]
enum BakeryCommand {
    /// Hold the bakery lock NAME while a command runs, renewing its lease; the fencing
    /// token (the ticket) is in the command's environment as HILOCK_FENCE. Exits with the
    /// command's status; 2 (and one line on stderr) if the lock is not granted in time or
    /// its lease runs out while the command runs (the command is killed then).
    Lock {
        /// The lock's name.
        name: String,
        /// The redis-server replicas, host:port,... (1 to 7; quorums are majorities).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// This client's id, 1..=31; no two running clients may share one.
        #[arg(long, env = "HILOCK_CLIENT_ID")]
        client_id: u16,
        /// The lease: others pass an entry that stops changing 1.3 leases after they saw it.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The bakery design's work queue over the same redis-server replicas.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
}

#[derive(Subcommand, Debug)]
enum QueueCommand {
    /// Enqueue ITEM (any text, up to 1 MiB) in the queue NAME; prints the item's key.
    Push {
        /// The queue's name.
        name: String,
        /// What the item asks for (a worker's command gets it as HILOCK_ITEM).
        item: String,
        /// The redis-server replicas, host:port,... (1 to 7; waits for a majority).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
    },
    /// Take items of the queue NAME one after the other and run the command for each
    /// (HILOCK_ITEM = the item, HILOCK_ITEM_KEY, HILOCK_FENCE = the fencing token), renewing
    /// the lease; an item is removed when the command exits 0. A failing command stops the
    /// worker with its status (the item is taken over by another worker after the lease).
    Work {
        /// The queue's name.
        name: String,
        /// The redis-server replicas, host:port,... (1 to 7; quorums are majorities).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// This worker's id, 1..=31; no two running workers (or lock clients of the
        /// same replicas' queue) may share one.
        #[arg(long, env = "HILOCK_CLIENT_ID")]
        client_id: u16,
        /// The lease of the item being worked on.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// Stop after this many items.
        #[arg(long)]
        max_items: Option<u64>,
        /// Stop (exit 0) when no item is pending: none waiting and none being worked on.
        #[arg(long)]
        exit_when_empty: bool,
        /// Give up (exit 2) when no item could be taken for this many milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn bakery_queue(command: QueueCommand) -> Result<ExitCode, String> {
    let ms = std::time::Duration::from_millis;
    match command {
        QueueCommand::Push {
            name,
            item,
            replicas,
            timeout_ms,
        } => {
            let key = runtime()?.block_on(hilock::bakery::queue::push_command(
                &name,
                &replicas,
                &item,
                ms(timeout_ms),
            ))?;
            println!("{key}");
            Ok(ExitCode::SUCCESS)
        }
        QueueCommand::Work {
            name,
            replicas,
            client_id,
            lease_ms,
            max_items,
            exit_when_empty,
            timeout_ms,
            command,
        } => {
            let opts = hilock::bakery::Options {
                lease: ms(lease_ms),
                ..hilock::bakery::Options::new(client_id)
            };
            let limits = hilock::bakery::queue::WorkLimits {
                max_items,
                exit_when_empty,
                wait: timeout_ms.map(ms),
            };
            let code = runtime()?.block_on(hilock::bakery::queue::work_command(
                &name, &replicas, opts, limits, &command,
            ))?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
    }
}

fn bakery(command: BakeryCommand) -> Result<ExitCode, String> {
    let (name, replicas, client_id, lease_ms, timeout_ms, command) = match command {
        BakeryCommand::Lock {
            name,
            replicas,
            client_id,
            lease_ms,
            timeout_ms,
            command,
        } => (name, replicas, client_id, lease_ms, timeout_ms, command),
        BakeryCommand::Queue { command } => return bakery_queue(command),
    };
    let opts = hilock::bakery::Options {
        lease: std::time::Duration::from_millis(lease_ms),
        ..hilock::bakery::Options::new(client_id)
    };
    let timeout = std::time::Duration::from_millis(timeout_ms);
    let code = runtime()?.block_on(hilock::bakery::lock::run_command(
        &name, &replicas, opts, timeout, &command,
    ))?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// What `hilock lock` asks of the node: one lock of the token engine, or a transaction of
/// the agents engine (`--txn`).
enum LockRequest {
    Lock {
        path: String,
        mode: String,
    },
    Txn {
        locks: Vec<String>,
        abort_on_deadlock: bool,
    },
}

#[allow(clippy::too_many_arguments)]
fn lock(
    what: LockRequest,
    command: &[String],
    at: &ClientAt,
    timeout_ms: Option<u64>,
    priority: u8,
    kill_grace_ms: u64,
    client_id: Option<u8>,
) -> Result<ExitCode, String> {
    // A ring configuration: the ring client is the lock's holder (no node socket).
    if let Some(c) = &at.config {
        let cfg = hilock::Config::from_file(c, Some(at.id.unwrap_or(0)))?;
        if cfg.engine == hilock::config::Engine::Ring {
            let LockRequest::Lock { path, mode } = what else {
                return Err("--txn is the agents engine's: a ring takes one PATH MODE".into());
            };
            let timeout_ms = timeout_ms.unwrap_or(cfg.request_timeout.as_millis() as u64);
            return ring_lock(
                &cfg,
                &path,
                &mode,
                command,
                client_id,
                timeout_ms,
                kill_grace_ms,
            );
        }
    }
    let socket = at.socket()?;
    let timeout_ms = match timeout_ms {
        Some(t) => t,
        None => at.default_timeout_ms()?,
    };
    let grace = std::time::Duration::from_millis(kill_grace_ms);
    current_thread()?.block_on(async {
        let (req, path) = match what {
            LockRequest::Lock { path, mode } => (
                hilock::client::Request::Lock {
                    path: path.clone(),
                    mode,
                    priority,
                    timeout_ms: Some(timeout_ms),
                    // Run by a command under another `hilock lock` (which sets HILOCK_LOCK).
                    nested: std::env::var_os("HILOCK_LOCK").is_some(),
                },
                path,
            ),
            LockRequest::Txn {
                locks,
                abort_on_deadlock,
            } => {
                let label = locks.join(" ");
                (
                    hilock::client::Request::Txn {
                        locks,
                        timeout_ms: Some(timeout_ms),
                        abort_on_deadlock,
                    },
                    label,
                )
            }
        };
        let wait = std::time::Duration::from_millis(timeout_ms).saturating_add(ANSWER_GRACE);
        let (reply, stream) = tokio::time::timeout(wait, hilock::client::request(&socket, &req))
            .await
            .map_err(|_| format!("no answer from the node within {wait:?}"))??;
        if !reply.ok {
            return Err(reply.error.unwrap_or_else(|| "lock refused".into()));
        }
        let (r, w) = stream.into_split();
        let mut watch = NodeWatch {
            r: tokio::io::BufReader::new(r),
            w,
            line: Vec::new(),
            // Membership through etcd: the hold ends with the node's lease unless the node
            // renews it (`docs/faults.md`, "With etcd membership") — checked here, where a
            // paused node cannot keep the command running past it.
            lease: lease_deadline(&reply),
            path: path.clone(),
        };
        run_locked(command, &path, reply.fence, grace, &mut watch).await
    })
}

/// A current-thread runtime: `hilock lock` spawns the command from this (the main) thread,
/// whose end is what the parent-death signal of the command waits for.
fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))
}

/// What holds the lock while `hilock lock` runs the command: the node (token and agents
/// engines) or the ring client itself.
trait Watch {
    /// The command's process group `pgid` exists and has not started yet: make the lock's
    /// holder know it (the node kills the group when it loses the lock).
    async fn started(&mut self, pgid: i32) -> Result<(), String>;
    /// Waits until the lock is lost: the exit code, the line to print and a bound on the
    /// kill grace. Cancel-safe: the caller's `select!` drops it and calls it again.
    async fn lost(&mut self) -> (u8, String, Option<std::time::Duration>);
    /// The command ended: release the lock.
    async fn release(&mut self);
}

/// Runs `command` under a held lock (`path`, `fence`): in its own process group, started
/// only once `watch` knows the group; forwards the signals that would stop `hilock lock`
/// to the group; when the command exits, kills what is left of its group and releases the
/// lock (exit: the command's status, 128+N for signal N); when the lock is lost first,
/// kills the group (SIGTERM, SIGKILL after the grace) and exits with the loss's code.
async fn run_locked(
    command: &[String],
    path: &str,
    fence: Option<u64>,
    grace: std::time::Duration,
    watch: &mut impl Watch,
) -> Result<ExitCode, String> {
    use tokio::signal::unix::{signal, SignalKind};
    // From now on the signals that would stop the wrapper go to the command's group; the
    // wrapper stays to release the lock when the command is gone.
    let (sig_tx, mut sig_rx) = tokio::sync::mpsc::unbounded_channel();
    for s in hilock::proc::FORWARDED {
        let mut sig =
            signal(SignalKind::from_raw(s)).map_err(|e| format!("cannot catch signal {s}: {e}"))?;
        let tx = sig_tx.clone();
        tokio::spawn(async move { while sig.recv().await.is_some() && tx.send(s).is_ok() {} });
    }
    // The command starts as `hilock exec-gated FD -- CMD…` in its own process group; it
    // executes CMD only after the lock's holder knows the group, so no part of CMD can run
    // under a lock that holder would release without killing it.
    let (gate_r, mut gate_w) =
        hilock::proc::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let gate_fd = std::os::fd::AsRawFd::as_raw_fd(&gate_r);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find hilock itself: {e}"))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("exec-gated")
        .arg(gate_fd.to_string())
        .arg("--")
        .args(command)
        .env("HILOCK_LOCK", path);
    // The fencing token of this hold, for the command to pass to a storage service.
    if let Some(fence) = fence {
        cmd.env("HILOCK_FENCE", fence.to_string());
    }
    hilock::proc::own_group_with_parent_death(&mut cmd, gate_fd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", command[0]))?;
    drop(gate_r);
    let pgid = child.id().ok_or("the command exited before it started")? as i32;
    if let Err(e) = watch.started(pgid).await {
        kill_group(pgid, &mut child, grace).await;
        return Err(e);
    }
    std::io::Write::write_all(&mut gate_w, b"x")
        .map_err(|e| format!("cannot start the command: {e}"))?;
    drop(gate_w);
    let lost = loop {
        tokio::select! {
            // The holder's word first: a node writes "lock lost" before it kills the group
            // (a stopping node); when both are ready, the exit code says the lock was lost,
            // not that the command was killed.
            biased;
            lost = watch.lost() => break lost,
            st = child.wait() => {
                let st = st.map_err(|e| format!("cannot wait for the command: {e}"))?;
                // Nothing of the command may outlive the lock.
                if hilock::proc::group_alive(pgid) {
                    kill_group(pgid, &mut child, grace).await;
                }
                watch.release().await;
                use std::os::unix::process::ExitStatusExt;
                return Ok(match (st.code(), st.signal()) {
                    (Some(c), _) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
                    (None, Some(s)) => ExitCode::from(128u8.saturating_add(s as u8)),
                    (None, None) => ExitCode::from(1),
                });
            }
            Some(s) = sig_rx.recv() => {
                let _ = hilock::proc::signal_group(pgid, s);
            }
        }
    };
    let (code, why, cap) = lost;
    kill_group(pgid, &mut child, cap.map_or(grace, |c| grace.min(c))).await;
    eprintln!("hilock: {why}; the command's process group was killed");
    Ok(ExitCode::from(code))
}

/// The node holds the lock (token and agents engines): it is told the command's group,
/// writes its lease renewals and the loss of the lock on the client connection, and is
/// asked to release.
struct NodeWatch {
    r: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    w: tokio::net::unix::OwnedWriteHalf,
    /// Bytes: `read_until` keeps a partly read line when another branch wins.
    line: Vec<u8>,
    lease: Option<(tokio::time::Instant, std::time::Duration)>,
    path: String,
}

impl Watch for NodeWatch {
    async fn started(&mut self, pgid: i32) -> Result<(), String> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        // Register the group with the node and wait for its answer.
        let mut line = serde_json::to_vec(&hilock::client::Request::Child { pgid })
            .map_err(|e| e.to_string())?;
        line.push(b'\n');
        let registered = async {
            self.w.write_all(&line).await.map_err(|e| e.to_string())?;
            loop {
                let mut answer = String::new();
                self.r
                    .read_line(&mut answer)
                    .await
                    .map_err(|e| e.to_string())?;
                let a: hilock::client::Reply = serde_json::from_str(answer.trim_end())
                    .map_err(|_| "the node closed the connection".to_string())?;
                if a.ok && a.lease_until_ms.is_some() {
                    // A lease renewal, not the answer.
                    self.lease = lease_deadline(&a);
                    continue;
                }
                break if a.ok {
                    Ok(())
                } else {
                    Err(a.error.unwrap_or_else(|| "refused".into()))
                };
            }
        };
        registered
            .await
            .map_err(|e: String| format!("the node did not register the command: {e}"))
    }

    async fn lost(&mut self) -> (u8, String, Option<std::time::Duration>) {
        use tokio::io::AsyncBufReadExt;
        let path = &self.path;
        loop {
            let lease_end = self.lease.map(|l| l.0);
            // A lease's end kills the command within half its grace.
            let cap = self.lease.map(|l| l.1 / 2);
            tokio::select! {
                biased;
                n = self.r.read_until(b'\n', &mut self.line) => {
                    match n {
                        Ok(n) if n > 0 && self.line.ends_with(b"\n") => {
                            let text = String::from_utf8_lossy(self.line.trim_ascii_end()).into_owned();
                            self.line.clear();
                            let parsed = serde_json::from_str::<hilock::client::Reply>(&text).ok();
                            if let Some(p) = parsed.as_ref().filter(|p| p.ok && !p.lost) {
                                // A renewal of the node's lease.
                                if p.lease_until_ms.is_some() {
                                    self.lease = lease_deadline(p);
                                }
                                continue;
                            }
                            let why = parsed.as_ref().and_then(|r| r.error.clone()).unwrap_or(text);
                            return if parsed.is_some_and(|p| p.lease_lost) {
                                (EXIT_LEASE_LOST, why, cap)
                            } else {
                                (EXIT_LOCK_LOST, why, None)
                            };
                        }
                        // The rest of a line comes with the next read (or its end).
                        Ok(n) if n > 0 => continue,
                        _ => return (
                            EXIT_NODE_GONE,
                            format!("lock on {path} lost: the connection to the node closed (node stopped or crashed)"),
                            None,
                        ),
                    }
                }
                _ = tokio::time::sleep_until(lease_end.unwrap_or_else(tokio::time::Instant::now)), if lease_end.is_some() => {
                    // The node did not renew its lease in time (paused, hung, or cut off
                    // from etcd): the command must be gone within the lease's grace.
                    return (
                        EXIT_LEASE_LOST,
                        format!(
                            "lock on {path} lost: the node's etcd lease was not renewed in time \
                             (the node is paused, hung or cut off from etcd)"
                        ),
                        cap,
                    );
                }
            }
        }
    }

    async fn release(&mut self) {
        use tokio::io::AsyncWriteExt;
        if let Ok(mut rel) = serde_json::to_vec(&hilock::client::Request::Release) {
            rel.push(b'\n');
            let _ = self.w.write_all(&rel).await;
        }
        let _ = self.w.shutdown().await;
    }
}

/// The ring client holds the lock (`engine = "ring"`): it checks it while the command runs
/// ([`hilock::ring::Held`]) and unlocks it at the end.
struct RingWatch(hilock::ring::Held);

impl Watch for RingWatch {
    async fn started(&mut self, _: i32) -> Result<(), String> {
        Ok(())
    }

    async fn lost(&mut self) -> (u8, String, Option<std::time::Duration>) {
        match self.0.lost().await {
            hilock::ring::Loss::Taken(why) | hilock::ring::Loss::Released(why) => {
                (EXIT_LOCK_LOST, why, None)
            }
            hilock::ring::Loss::Unreachable(why) => (EXIT_NODE_GONE, why, None),
        }
    }

    async fn release(&mut self) {
        if let Err(e) = self.0.release().await {
            eprintln!("hilock: the ring lock was not released: {e}");
        }
    }
}

/// How often `hilock lock` on a ring asks its held lock again.
const RING_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// `hilock lock PATH W -- CMD` with a ring configuration: client `client_id` of the ring
/// asks for the lock of PATH's placement key (routed by the kernel's lookup with the
/// membership service's view, or the one etcd holds with `membership = "etcd"`, redirected on an
/// old view) until it is granted or
/// `timeout_ms` passed, reads the hold from the key's primary (its fencing token goes to
/// the command as HILOCK_FENCE), then runs the command as [`run_locked`] does, reading
/// the lock's entry every [`RING_CHECK`] without taking it again (exit 76 when it is no
/// longer this hold — another client holds it, or it was unlocked —, 75 when the ring
/// does not answer within the timeout), and unlocks at the end. The ring's locks are
/// exclusive: a mode other than W is refused.
fn ring_lock(
    cfg: &hilock::Config,
    path: &str,
    mode: &str,
    command: &[String],
    client_id: Option<u8>,
    timeout_ms: u64,
    kill_grace_ms: u64,
) -> Result<ExitCode, String> {
    let id = client_id
        .ok_or("a ring lock needs --client-id N (0..=255, no two running clients may share one)")?;
    // The ring's locks are exclusive (one holder per key, the Chord lock paper): only W is served.
    let m = hilock_kernel::Mode::parse(mode)
        .ok_or_else(|| format!("mode {mode:?}: expected IR, R, U, IW or W"))?;
    if m != hilock_kernel::Mode::W {
        return Err(format!(
            "mode {mode:?}: a ring's locks are exclusive (one holder per key); use W"
        ));
    }
    if !path.starts_with('/') || hilock_kernel::ring::placement_key(path).is_empty() {
        return Err(format!(
            "path {path:?}: a lock path starts with / and names a top-level element"
        ));
    }
    let (addrs, _) = hilock::ring::slot_addrs(cfg)?;
    let limit = std::time::Duration::from_millis(timeout_ms);
    let grace = std::time::Duration::from_millis(kill_grace_ms);
    current_thread()?.block_on(async {
        let connect = async {
            let (views, source) = hilock::ring::client_views(cfg).await?;
            hilock::ring::RingClient::connect_to(id, std::sync::Arc::new(addrs), views)
                .await
                .map_err(|e| format!("{source}: {e}"))
        };
        let mut client = tokio::time::timeout(limit, connect)
            .await
            .map_err(|_| format!("no view of the ring within {limit:?}"))??;
        // A client id is one numbering: an earlier run with this id (killed while holding
        // `path`) may have locked it with a higher request number than this run's first.
        match tokio::time::timeout(limit, client.resume(path)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("lock on {path}: the ring did not answer ({e})")),
            Err(_) => {
                return Err(format!(
                    "lock on {path}: the ring did not answer within {timeout_ms} ms"
                ))
            }
        }
        match client.acquire(path, limit).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "lock on {path} not granted within {timeout_ms} ms: another client holds it"
                ))
            }
            Err(e) => return Err(format!("lock on {path}: the ring did not answer ({e})")),
        }
        let grant = match client.grant(path).await {
            Ok(g) => g,
            Err(e) => {
                let _ = client.unlock(path).await;
                return Err(format!("lock on {path}: granted, but {e}"));
            }
        };
        let mut watch = RingWatch(hilock::ring::Held::start(
            client,
            path.to_string(),
            grant,
            RING_CHECK,
            limit,
        ));
        let r = run_locked(command, path, Some(grant.fence), grace, &mut watch).await;
        if r.is_err() {
            watch.release().await;
        }
        r
    })
}

/// `hilock exec-gated FD -- CMD…`: wait for one byte on FD, then become CMD. If FD ends
/// without a byte, the wrapper is gone: exit without running CMD.
fn exec_gated(fd: i32, command: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    match hilock::proc::wait_gate(fd) {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("hilock: the lock wrapper went away before the command started");
            return ExitCode::from(EXIT_NODE_GONE);
        }
        Err(e) => {
            eprintln!("hilock: cannot wait to start the command: {e}");
            return ExitCode::from(2);
        }
    }
    let e = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    eprintln!("hilock: cannot run {}: {e}", command[0]);
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

fn status(at: &ClientAt, json: bool, timeout_ms: u64) -> Result<(String, bool), String> {
    // A ring configuration: the ring's status (`hilock ring status`).
    if let Some(c) = &at.config {
        let cfg = hilock::Config::from_file(c, Some(at.id.unwrap_or(0)))?;
        if cfg.engine == hilock::config::Engine::Ring {
            let wait = std::time::Duration::from_millis(timeout_ms);
            return hilock::ring::status(&cfg, json, wait).map(|s| (s, true));
        }
    }
    let socket = at.socket()?;
    let wait = std::time::Duration::from_millis(timeout_ms);
    runtime()?.block_on(async {
        let (reply, _) = tokio::time::timeout(
            wait,
            hilock::client::request(&socket, &hilock::client::Request::Status),
        )
        .await
        .map_err(|_| format!("no answer from the node within {wait:?}"))??;
        if !reply.ok {
            return Err(reply.error.unwrap_or_else(|| "status refused".into()));
        }
        let v = reply.status.ok_or("the node sent no status")?;
        if json {
            return Ok((
                format!(
                    "{}\n",
                    serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
                ),
                true,
            ));
        }
        let s: hilock::Status =
            serde_json::from_value(v).map_err(|e| format!("bad status: {e}"))?;
        Ok((hilock::client::render_status(&s), true))
    })
}

fn scenarios(files: &[PathBuf], json: bool) -> Result<(String, bool), String> {
    if json && files.len() > 1 {
        return Err("--json prints one trace: give exactly one scenario file".into());
    }
    let mut text = String::new();
    let mut all = true;
    let mut summary = Vec::new();
    for f in files {
        let (t, ok) = hilock::cli::scenario(f, json)?;
        text.push_str(&t);
        all &= ok;
        summary.push(format!(
            "{} {}",
            if ok { "PASS" } else { "FAIL" },
            f.display()
        ));
    }
    if files.len() > 1 {
        text.push_str(&format!(
            "\n{} scenarios:\n  {}\n",
            files.len(),
            summary.join("\n  ")
        ));
    }
    Ok((text, all))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo {
            nodes,
            requests,
            seconds,
            cs_ms,
            ncs_ms,
            entries,
            seed,
            quiet,
        } => demo(
            nodes, requests, seconds, cs_ms, ncs_ms, entries, seed, quiet,
        ),
        Command::Node { config, id } => node(&config, id),
        Command::RingNode {
            id,
            peers,
            membership,
        } => hilock::ring::serve(id, &peers, membership).map(|s| (s, true)),
        Command::Ring { command } => ring(command),
        Command::Lock {
            mut locks,
            txn,
            abort_on_deadlock,
            command,
            at,
            timeout_ms,
            priority,
            kill_grace_ms,
            client_id,
        } => match lock(
            if txn {
                LockRequest::Txn {
                    locks,
                    abort_on_deadlock,
                }
            } else if locks.len() == 2 {
                let mode = locks.pop().unwrap_or_default();
                LockRequest::Lock {
                    path: locks.pop().unwrap_or_default(),
                    mode,
                }
            } else {
                eprintln!("hilock: lock takes PATH MODE (or --txn PATH:MODE…)");
                return ExitCode::from(2);
            },
            &command,
            &at,
            timeout_ms,
            priority,
            kill_grace_ms,
            client_id,
        ) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::ExecGated { fd, command } => return exec_gated(fd, &command),
        Command::Status {
            at,
            json,
            timeout_ms,
        } => status(&at, json, timeout_ms),
        Command::Bakery { command } => match bakery(command) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Spec { json } => hilock::cli::spec(json).map(|s| (s, true)),
        Command::Scenario { files, json } => scenarios(&files, json),
        Command::Replay { file, svg, html } => {
            hilock::cli::replay(&file, svg.as_deref(), html.as_deref()).map(|s| (s, true))
        }
        Command::Check { file, out } => hilock::cli::check(&file, &out),
        Command::Explore { file, port, trace } => {
            hilock::cli::explore(&file, port, trace.as_deref()).map(|s| (s, true))
        }
    };
    match result {
        Ok((text, ok)) => {
            print!("{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("hilock: error: {e}");
            ExitCode::from(2)
        }
    }
}
