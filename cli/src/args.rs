//! The `hilock` command line: the clap definitions of every subcommand and flag. `main.rs`
//! dispatches them; the bodies are in the modules, one per subject.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

use crate::bakery::BakeryCommand;
use crate::dump;
use crate::lock::DEFAULT_KILL_GRACE_MS;
use crate::node::{ClientAt, DEFAULT_STATUS_TIMEOUT_MS};
use crate::ring::RingCommand;

/// `hilock --version`'s text after the name: the package version and the optional build
/// features built in (`cli/Cargo.toml`), e.g. `0.1.0 (features: models, etcd)`, so that an
/// operator sees whether this binary runs `membership = "etcd"`.
fn version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let on: Vec<&str> = [
            ("models", cfg!(feature = "models")),
            ("etcd", cfg!(feature = "etcd")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        let on = if on.is_empty() {
            "none".to_string()
        } else {
            on.join(", ")
        };
        format!("{} (features: {on})", env!("CARGO_PKG_VERSION"))
    })
}

#[derive(Parser, Debug)]
#[command(
    name = "hilock",
    version = version(),
    about = "Peer-to-peer multi-mode hierarchical locking (Desai & Mueller), machine-checked"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
        /// Every node records its kernel steps in `DIR/node-<id>.jsonl`, for `hilock
        /// trace-check` (the files must not exist yet).
        #[arg(long, value_name = "DIR")]
        record: Option<PathBuf>,
    },
    /// Run a node from a configuration file until Ctrl-C, SIGTERM or SIGHUP.
    ///
    /// Logs on stderr (RUST_LOG=hilock=debug for more). The file names the engine: `engine =
    /// "token"` (the default) or `engine = "ring"` (a node of the ring of the Chord lock
    /// paper, which runs until its graceful leave is done or the membership service goes
    /// away). With `membership = "etcd"`, a run whose etcd lease is lost is replaced by a
    /// new run as soon as etcd answers again. The node exits 75 when it stopped on its own:
    /// that new run could not start, or a ring node's lease ran out or its membership
    /// service went away.
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
    /// not renewed in time (membership through etcd; the command's group was killed first);
    /// 78 if a ring's --client-id is in use; 79 if --try found the lock busy. docs/cli.md
    /// has the table.
    ///
    /// The command's environment (token engine): HILOCK_FENCE, the hold's fencing token;
    /// HILOCK_VALUE, the lock's value block in hex; for a W hold HILOCK_VALUE_OUT, a file
    /// in which a command that exits 0 may leave a new value block (docs/cli.md, "The
    /// value block").
    ///
    /// With the --config of a ring (`engine = "ring"`, the Chord lock paper) and --client-id: the
    /// ring client itself holds the lock of the path's top-level element (its placement
    /// key; the ring's locks are exclusive: MODE must be W), reads the lock's entry every
    /// second while the command runs (never taking it again) and unlocks it at the end;
    /// 76 if it is no longer this hold (another client got it, or it was unlocked), 75 if
    /// the ring did not answer within the timeout or its membership service went away;
    /// 78 (one line, the command not run) if another process with the same --client-id
    /// holds the lock. HILOCK_FENCE is the
    /// hold's fencing token (the entry's version); no lease. Exit 1 if the command ran but
    /// the ring did not answer its final unlock (the key may stay locked; the line names the
    /// take-over command).
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
        /// With --txn: abort instead of surrendering a lock already reported held. A --txn
        /// asks for all its locks in one call and none is reported held before all are,
        /// then asks nothing more, so no deadlock makes it abort: here the flag changes
        /// nothing (it matters in the Rust API, where a transaction asks again later).
        #[arg(long, requires = "txn")]
        abort_on_deadlock: bool,
        /// Try-lock: if the lock (or an ancestor's intention mode) cannot be taken without
        /// waiting, exit 79 without running the command, once the deciding node has
        /// answered (one round trip; a node on the way that does not answer makes it fail
        /// at --timeout-ms, exit 2); the request leaves nothing queued at any node and is
        /// never granted later. Token engine only.
        #[arg(long = "try", conflicts_with = "txn")]
        try_lock: bool,
        /// Send the command's process group SIGUSR1 when a request of another node for a
        /// conflicting mode waits for this lock (at most once per hold; the DLM's blocking
        /// AST). A command that does not handle SIGUSR1 dies of it, hence opt-in. A waiter
        /// already queued at the grant is told in HILOCK_BLOCKING (its mode) as the command
        /// starts, not by the signal. Token engine only.
        #[arg(long, conflicts_with = "txn")]
        signal_waiters: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
        #[command(flatten)]
        at: ClientAt,
        /// Give up after this many milliseconds (default: `request_timeout_ms` of the file
        /// given with --config, else 30000). The command itself gives up one second later
        /// if the node has not answered by then.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Request priority (0..=255, higher first; default 0). Token engine only.
        #[arg(long, conflicts_with = "txn")]
        priority: Option<u8>,
        /// When the lock is lost or the command exits leaving processes in its group: how
        /// long after SIGTERM before SIGKILL, in milliseconds. A stopping node kills the
        /// group itself first, 40 ms after its own SIGTERM.
        #[arg(long, default_value_t = DEFAULT_KILL_GRACE_MS)]
        kill_grace_ms: u64,
        /// With the --config of a ring (`engine = "ring"`): this client's id on the ring,
        /// 0..=255. No two running clients may share one: a run whose id another running
        /// client holds the lock with exits 78 without running the command (a lock left by
        /// a killed `hilock lock` stays held until a run with its id and --take-over).
        #[arg(long)]
        client_id: Option<u8>,
        /// With a ring's --client-id: take over the lock if a killed earlier run with this
        /// client id left it held. Only when that run is dead: the ring cannot tell a dead
        /// run from a live one, and a live one would lose its lock (exit 76).
        #[arg(long, requires = "client_id")]
        take_over: bool,
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
    /// Internal: the lease watchdog every `lock` command starts beside its command. SIGKILLs
    /// process group PGID when the deadline passes without a renewal on stdin, or when
    /// stdin ends without `stop` (the wrapper died).
    #[command(name = "lock-watchdog", hide = true)]
    LockWatchdog {
        /// The command's process group.
        pgid: i32,
        /// The first deadline, CLOCK_MONOTONIC milliseconds.
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// The hold's value-file directory, removed if the wrapper dies.
        #[arg(long)]
        scratch: Option<std::path::PathBuf>,
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
    /// Print every lock the cluster knows, merged by path from every node's status (like
    /// `dlm_tool lockdump`). Exit 0 if every node answered, 1 if some did not or answered
    /// but serves no lock (named on stderr), 2 if none did. Token engine only.
    Dump(dump::DumpArgs),
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
        /// The trace (JSON): hilock-trace/1, or a tree, agents, bakery, inversion, ring or
        /// faults model trace.
        file: PathBuf,
        /// Write the sequence diagram as SVG to this file.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Write the sequence diagram and the steps as an HTML page to this file.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Check the step records of a cluster's nodes (`record` in the node configuration,
    /// `hilock demo --record`) against the kernel: replay them through the harness per
    /// lock path, compare every step's outputs, check the safety properties after every
    /// step. Exit 0 if they validate, 1 if not (one line names the node, the record and
    /// what differed), 3 if the check stopped early (recovery installs, a new run), 2 if a
    /// file cannot be read.
    TraceCheck {
        /// The record files (every node's, of one run of the cluster).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check a model configuration exhaustively (progress on stderr); exit 1 and write the
    /// counterexample traces if a property fails.
    Check {
        /// The model configuration (JSON), e.g. models/configs/star3-r-w.json (the base
        /// model) or models/configs/ring-r1-restart.json (`"model": "ring"`).
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
        /// The port (0: a free port, printed).
        #[arg(long, default_value_t = 3000)]
        port: u16,
        /// A trace of this configuration (in its model's trace format, e.g. a
        /// counterexample of `hilock check`) to open at its last state.
        #[arg(long)]
        trace: Option<PathBuf>,
    },
}
