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
    Node {
        /// The configuration file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// This node's id (overrides `id` in the file).
        #[arg(long)]
        id: Option<u16>,
    },
    /// Hold a lock while a command runs (like flock): `hilock lock /db/flights W -- cmd args`.
    /// Exits with the command's status; 2 (and one line on stderr) if the lock is not granted.
    Lock {
        /// The lock path, e.g. /db/flights/UA93.
        path: String,
        /// The mode: IR, R, U, IW or W.
        mode: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
        #[command(flatten)]
        at: ClientAt,
        /// Give up after this many milliseconds (default: the node's request_timeout_ms).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Request priority (0..=255, higher first).
        #[arg(long, default_value_t = 0)]
        priority: u8,
    },
    /// The bakery lock of seed 004 over redis-server replicas (quorum reads and writes,
    /// leases); no hilock node needed.
    Bakery {
        #[command(subcommand)]
        command: BakeryCommand,
    },
    /// Print a running node's locks, token, queues and peers.
    Status {
        #[command(flatten)]
        at: ClientAt,
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
    /// Print a trace file (hilock-trace/1) step by step.
    Replay {
        /// The trace (JSON).
        file: PathBuf,
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
    /// Serve the Stateright Explorer for a model configuration on 127.0.0.1.
    Explore {
        /// The model configuration (JSON).
        file: PathBuf,
        /// The port.
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
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

fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
}

fn bakery(command: BakeryCommand) -> Result<ExitCode, String> {
    let BakeryCommand::Lock {
        name,
        replicas,
        client_id,
        lease_ms,
        timeout_ms,
        command,
    } = command;
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

fn lock(
    path: String,
    mode: String,
    command: &[String],
    at: &ClientAt,
    timeout_ms: Option<u64>,
    priority: u8,
) -> Result<ExitCode, String> {
    let socket = at.socket()?;
    runtime()?.block_on(async {
        let req = hilock::client::Request::Lock {
            path: path.clone(),
            mode,
            priority,
            timeout_ms,
        };
        let (reply, stream) = hilock::client::request(&socket, &req).await?;
        if !reply.ok {
            return Err(reply.error.unwrap_or_else(|| "lock refused".into()));
        }
        let status = tokio::process::Command::new(&command[0])
            .args(&command[1..])
            .status()
            .await
            .map_err(|e| format!("cannot run {}: {e}", command[0]))?;
        // Closing the stream releases the lock.
        drop(stream);
        Ok(match status.code() {
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
            None => ExitCode::from(1),
        })
    })
}

fn status(at: &ClientAt, json: bool) -> Result<(String, bool), String> {
    let socket = at.socket()?;
    runtime()?.block_on(async {
        let (reply, _) = hilock::client::request(&socket, &hilock::client::Request::Status).await?;
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
        Command::Lock {
            path,
            mode,
            command,
            at,
            timeout_ms,
            priority,
        } => match lock(path, mode, &command, &at, timeout_ms, priority) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Bakery { command } => match bakery(command) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Status { at, json } => status(&at, json),
        Command::Spec { json } => hilock::cli::spec(json).map(|s| (s, true)),
        Command::Scenario { files, json } => scenarios(&files, json),
        Command::Replay { file } => hilock::cli::replay(&file).map(|s| (s, true)),
        Command::Check { file, out } => hilock::cli::check(&file, &out),
        Command::Explore { file, port } => hilock::cli::explore(&file, port).map(|s| (s, true)),
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
