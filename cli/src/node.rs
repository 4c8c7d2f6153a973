//! `hilock node` and `hilock status`, and where a command finds a node's client socket.

use std::path::PathBuf;

use crate::{init_logs, runtime};

/// Where the node's client socket is.
#[derive(clap::Args, Debug)]
pub struct ClientAt {
    /// The node's client socket [env: HILOCK_SOCKET, used only without --config].
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// …or the node's configuration file (its `client` entry).
    #[arg(long, conflicts_with = "socket")]
    pub config: Option<PathBuf>,
    /// The node id, with --config.
    #[arg(long, requires = "config")]
    pub id: Option<u16>,
}

impl ClientAt {
    /// The lock timeout a request should carry when none is given: the node's own
    /// default from its file, if the socket comes from one.
    pub fn default_timeout_ms(&self) -> Result<u64, String> {
        match &self.config {
            Some(c) => Ok(hilock_runtime::Config::from_file(c, self.id)?
                .request_timeout
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX)),
            None => Ok(DEFAULT_LOCK_TIMEOUT_MS),
        }
    }

    /// The socket: `--socket`, else the `client` entry of `--config`'s file, else
    /// `HILOCK_SOCKET`. The variable is read only without `--config`: a file given on the
    /// command line names its own node (a ring's has no socket at all), and a variable
    /// left set in the shell must not turn its use into a conflict with `--socket`.
    pub fn socket(&self) -> Result<PathBuf, String> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        let Some(c) = &self.config else {
            return match std::env::var_os("HILOCK_SOCKET") {
                Some(s) if !s.is_empty() => Ok(PathBuf::from(s)),
                _ => Err("give --socket (or HILOCK_SOCKET) or --config".into()),
            };
        };
        let cfg = hilock_runtime::Config::from_file(c, self.id)?;
        cfg.client
            .ok_or_else(|| format!("{} has no `client` socket", c.display()))
    }
}

/// Default of `hilock status --timeout-ms`.
pub const DEFAULT_STATUS_TIMEOUT_MS: u64 = 5000;

/// Default of `hilock lock --timeout-ms` with `--socket` (the configuration file's default
/// `request_timeout_ms` too).
const DEFAULT_LOCK_TIMEOUT_MS: u64 = 30_000;

/// The exit status of `hilock node` and `hilock ring-node` when the node stopped on its
/// own: its etcd lease was lost and it could not rejoin (`etcd_recovery = false`, or etcd
/// did not answer within `etcd_rejoin_timeout_ms`, or the new run could not start), or a
/// ring node's lease ran out or its membership service went away. EX_TEMPFAIL, "try
/// again": a supervisor's `Restart=on-failure` starts it again (`docs/operations.md`, "An
/// etcd stall").
pub const EXIT_STOPPED: u8 = 75;

/// How `hilock node` ended.
pub enum Ended {
    /// Stopped by SIGTERM or Ctrl-C (or a ring node's own end): exit 0.
    Stopped(String),
    /// Lease lost and not rejoined: [`EXIT_STOPPED`], with the one line to print.
    LeaseLost(String),
}

pub fn node(config: &std::path::Path, id: Option<u16>) -> Result<Ended, String> {
    init_logs("hilock=info");
    let mut cfg = hilock_runtime::Config::from_file(config, id)?;
    // Room for max_clients: the soft open-file limit raised, or max_clients lowered.
    hilock_runtime::client::fit_open_files(&mut cfg);
    if cfg.engine == hilock_runtime::config::Engine::Ring {
        return hilock_runtime::ring::serve_config(&cfg).map(|end| match end {
            hilock_runtime::ring::NodeEnd::Stopped(s) => Ended::Stopped(s),
            hilock_runtime::ring::NodeEnd::Lost(why) => Ended::LeaseLost(why),
        });
    }
    if cfg.client.is_none() {
        tracing::warn!(
            "no client socket: the file has no `client` key, so `hilock lock` and `hilock \
             status` cannot reach this node"
        );
    }
    let within = cfg.etcd_rejoin_timeout;
    let suspend = cfg.state_dir.is_some();
    runtime()?.block_on(async {
        let mut node = hilock_runtime::Node::start(cfg)
            .await
            .map_err(|e| e.to_string())?;
        let mut signals = hilock_runtime::proc::StopSignals::new()?;
        let stop = signals.recv();
        tokio::pin!(stop);
        // Each run serves until it is stopped or its etcd lease is lost; a lost lease is
        // followed by a new run in this process as soon as etcd answers (with recovery).
        loop {
            let lost = tokio::select! {
                r = &mut stop => { r?; None }
                reason = node.lease_lost() => Some(reason),
            };
            let Some(reason) = lost else { break };
            tracing::warn!(%reason, recovery = node.recovery(), ?within, "this run's etcd lease is lost; waiting for etcd to answer");
            let answered = tokio::select! {
                r = &mut stop => { r?; None }
                r = node.etcd_answers(within) => Some(r),
            };
            let Some(answered) = answered else { break };
            let why = match answered {
                Err(e) => Some(e),
                Ok(()) if !node.recovery() => Some(
                    "etcd_recovery = false: a new run cannot take this node's locks back \
                     (restart the whole cluster, or turn etcd_recovery on)"
                        .to_string(),
                ),
                Ok(()) => None,
            };
            if let Some(why) = why {
                node.shutdown().await;
                return Ok(Ended::LeaseLost(format!(
                    "the node's etcd lease was lost ({reason}) and it does not rejoin: {why}"
                )));
            }
            let t = std::time::Instant::now();
            node = match node.rejoin().await {
                Ok(n) => n,
                Err(e) => {
                    return Ok(Ended::LeaseLost(format!(
                        "the node's etcd lease was lost and its new run could not start: {e}"
                    )))
                }
            };
            tracing::info!(took = ?t.elapsed(), "rejoined as a new run");
        }
        tracing::info!("stopping");
        if suspend {
            // Static membership with a state directory: the next start resumes this run
            // (`Node::suspend`).
            match node.suspend().await {
                Ok(line) => tracing::info!("{line}"),
                Err(line) => tracing::warn!("{line}"),
            }
        } else {
            node.shutdown().await;
        }
        Ok(Ended::Stopped(String::new()))
    })
}

pub fn status(at: &ClientAt, json: bool, timeout_ms: u64) -> Result<(String, bool), String> {
    // A ring configuration: the ring's status (`hilock ring status`).
    if let Some(c) = &at.config {
        let cfg = hilock_runtime::Config::from_file(c, Some(at.id.unwrap_or(0)))?;
        if cfg.engine == hilock_runtime::config::Engine::Ring {
            if let Some(id) = at.id {
                return Err(format!(
                    "--id {id}: a ring's status covers every slot (`hilock ring status`); run \
                     it without --id"
                ));
            }
            let wait = std::time::Duration::from_millis(timeout_ms);
            return hilock_runtime::ring::status(&cfg, json, wait);
        }
    }
    let socket = at.socket()?;
    let wait = std::time::Duration::from_millis(timeout_ms);
    runtime()?.block_on(async {
        let (reply, _) = tokio::time::timeout(
            wait,
            hilock_runtime::client::request(&socket, &hilock_runtime::client::Request::Status),
        )
        .await
        .map_err(|_| {
            format!(
                "no answer from the node at {} within {wait:?}",
                socket.display()
            )
        })??;
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
        let s: hilock_runtime::Status =
            serde_json::from_value(v).map_err(|e| format!("bad status: {e}"))?;
        Ok((hilock_runtime::client::render_status(&s), true))
    })
}
