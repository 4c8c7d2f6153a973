//! `hilock node` and `hilock status`, and where a command finds a node's client socket.

use std::path::PathBuf;

use crate::{init_logs, runtime};

/// Where the node's client socket is.
#[derive(clap::Args, Debug)]
pub struct ClientAt {
    /// The node's client socket.
    #[arg(long, env = "HILOCK_SOCKET")]
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

    pub fn socket(&self) -> Result<PathBuf, String> {
        if let Some(s) = &self.socket {
            return Ok(s.clone());
        }
        let Some(c) = &self.config else {
            return Err("give --socket (or HILOCK_SOCKET) or --config".into());
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

pub fn node(config: &std::path::Path, id: Option<u16>) -> Result<(String, bool), String> {
    init_logs("hilock=info");
    let mut cfg = hilock_runtime::Config::from_file(config, id)?;
    // Room for max_clients: the soft open-file limit raised, or max_clients lowered.
    hilock_runtime::client::fit_open_files(&mut cfg);
    if cfg.engine == hilock_runtime::config::Engine::Ring {
        return hilock_runtime::ring::serve_config(&cfg).map(|s| (s, true));
    }
    runtime()?.block_on(async {
        let node = hilock_runtime::Node::start(cfg)
            .await
            .map_err(|e| e.to_string())?;
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

pub fn status(at: &ClientAt, json: bool, timeout_ms: u64) -> Result<(String, bool), String> {
    // A ring configuration: the ring's status (`hilock ring status`).
    if let Some(c) = &at.config {
        let cfg = hilock_runtime::Config::from_file(c, Some(at.id.unwrap_or(0)))?;
        if cfg.engine == hilock_runtime::config::Engine::Ring {
            let wait = std::time::Duration::from_millis(timeout_ms);
            return hilock_runtime::ring::status(&cfg, json, wait).map(|s| (s, true));
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
        let s: hilock_runtime::Status =
            serde_json::from_value(v).map_err(|e| format!("bad status: {e}"))?;
        Ok((hilock_runtime::client::render_status(&s), true))
    })
}
