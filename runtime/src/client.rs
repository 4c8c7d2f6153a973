//! The local client socket of `hilock node` (a Unix domain socket, so file permissions say
//! who may take locks) and the client side used by `hilock lock` and `hilock status`.
//!
//! Protocol: one JSON object per line.
//! - `{"op":"lock","path":"/db","mode":"W","priority":0,"timeout_ms":5000}` → the node
//!   answers `{"ok":true,"locks":["/db:W"]}` once granted (or `{"ok":false,"error":"…"}`).
//!   The lock is held until the client closes the connection (or sends any line), like
//!   `flock`: a client that dies releases its lock.
//! - `{"op":"status"}` → `{"ok":true,"status":{…}}` ([`crate::node::Status`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hilock_kernel::Mode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use crate::node::{Handle, Options, Status};

/// Longest request line accepted.
const MAX_LINE: usize = 16 * 1024;

/// Longest reply line a client reads (a status of many locks is long).
const MAX_REPLY: u64 = 16 * 1024 * 1024;

/// A client request.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Take a lock and hold it while the connection is open.
    Lock {
        /// The lock path.
        path: String,
        /// The mode: IR, R, U, IW or W.
        mode: String,
        /// Priority (default 0).
        #[serde(default)]
        priority: u8,
        /// Timeout in milliseconds (default: the node's `request_timeout_ms`).
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// The node's status.
    Status,
}

/// A reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    /// Success.
    pub ok: bool,
    /// The error, if not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The locks now held (`path:mode`, outermost first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<String>>,
    /// The status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

impl Reply {
    fn error(e: impl ToString) -> Reply {
        Reply {
            ok: false,
            error: Some(e.to_string()),
            locks: None,
            status: None,
        }
    }
}

/// Bind the client socket. A leftover socket file nobody listens on is replaced; one that
/// a live node serves is an error.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "client socket {} is in use by a running node",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(path).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot replace stale socket {}: {e}", path.display()),
            )
        })?;
    }
    UnixListener::bind(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot bind client socket {}: {e}", path.display()),
        )
    })
}

/// Serve clients until the node stops.
pub async fn serve(node: Handle, listener: UnixListener, path: PathBuf) {
    let mut conns = tokio::task::JoinSet::new();
    let _cleanup = RemoveOnDrop(path);
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => { conns.spawn(client(node.clone(), s)); }
                Err(e) => {
                    warn!(error = %e, "client accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn write_reply(w: &mut (impl AsyncWriteExt + Unpin), r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await
}

async fn client(node: Handle, s: UnixStream) {
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    let mut line = String::new();
    match (&mut r).take(MAX_LINE as u64).read_line(&mut line).await {
        Ok(0) => return,
        Ok(_) if !line.ends_with('\n') => {
            let _ = write_reply(
                &mut w,
                &Reply::error("request line too long or unterminated"),
            )
            .await;
            return;
        }
        Ok(_) => {}
        Err(e) => {
            debug!(error = %e, "client read failed");
            return;
        }
    }
    let req: Request = match serde_json::from_str(line.trim_end()) {
        Ok(r) => r,
        Err(e) => {
            let _ = write_reply(&mut w, &Reply::error(format!("bad request: {e}"))).await;
            return;
        }
    };
    match req {
        Request::Status => {
            let reply = match node.status().await {
                Ok(s) => Reply {
                    ok: true,
                    error: None,
                    locks: None,
                    status: serde_json::to_value(s).ok(),
                },
                Err(e) => Reply::error(e),
            };
            let _ = write_reply(&mut w, &reply).await;
        }
        Request::Lock {
            path,
            mode,
            priority,
            timeout_ms,
        } => {
            let Some(m) = Mode::parse(&mode).filter(|m| *m != Mode::Phi) else {
                let _ = write_reply(
                    &mut w,
                    &Reply::error(format!("bad mode {mode:?}: one of IR, R, U, IW, W")),
                )
                .await;
                return;
            };
            let opts = Options {
                priority,
                timeout: timeout_ms.map(Duration::from_millis),
            };
            // If the client goes away while waiting, give up (the grant is then released).
            let mut probe = [0u8; 1];
            let guard = tokio::select! {
                g = node.lock_with(&path, m, opts) => g,
                _ = r.read(&mut probe) => return,
            };
            let guard = match guard {
                Ok(g) => g,
                Err(e) => {
                    let _ = write_reply(&mut w, &Reply::error(e)).await;
                    return;
                }
            };
            let locks = guard.locks().map(|(p, m)| format!("{p}:{m}")).collect();
            let reply = Reply {
                ok: true,
                error: None,
                locks: Some(locks),
                status: None,
            };
            if write_reply(&mut w, &reply).await.is_err() {
                return;
            }
            // Hold until the client closes the connection or sends anything.
            let _ = r.read(&mut probe).await;
            drop(guard);
        }
    }
}

/// Client side: send one request and read the first reply; the stream stays open (for a
/// lock, closing it releases).
pub async fn request(socket: &Path, req: &Request) -> Result<(Reply, UnixStream), String> {
    let mut s = UnixStream::connect(socket).await.map_err(|e| {
        format!(
            "cannot reach the node's client socket {}: {e} (is `hilock node` running?)",
            socket.display()
        )
    })?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    s.write_all(&line).await.map_err(|e| e.to_string())?;
    // The node sends nothing after its reply line, so the buffer can be dropped after it.
    let mut r = BufReader::new(s);
    let mut reply = Vec::new();
    (&mut r)
        .take(MAX_REPLY)
        .read_until(b'\n', &mut reply)
        .await
        .map_err(|e| e.to_string())?;
    match reply.pop() {
        Some(b'\n') => {}
        None => return Err("the node closed the connection without a reply".into()),
        Some(_) if reply.len() + 1 >= MAX_REPLY as usize => return Err("reply too long".into()),
        Some(_) => return Err("the node closed the connection without a reply".into()),
    }
    let s = r.into_inner();
    let r: Reply = serde_json::from_slice(&reply).map_err(|e| format!("bad reply: {e}"))?;
    Ok((r, s))
}

/// Render a [`Status`] for people.
pub fn render_status(s: &Status) -> String {
    let mut o = format!(
        "node {} of cluster {:?}, listening on {}\n",
        s.id, s.cluster, s.listen
    );
    o.push_str(&format!(
        "messages sent {} received {}; kernel requests {}; grants {}; rejected connections {}; refused messages {}; abandoned grants {}\n",
        s.stats.frames_sent,
        s.stats.frames_received,
        s.stats.kernel_requests,
        s.stats.grants,
        s.stats.rejected_connections,
        s.stats.kernel_rejections,
        s.stats.abandoned_grants
    ));
    o.push_str("peers:\n");
    for p in &s.peers {
        o.push_str(&format!(
            "  node {:<3} {:<22} {:<12} sent {:<8} received {}\n",
            p.id,
            p.addr,
            if p.connected {
                "connected"
            } else {
                "DISCONNECTED"
            },
            p.frames_sent,
            p.frames_received
        ));
    }
    o.push_str(&format!("locks ({}):\n", s.locks.len()));
    if !s.locks.is_empty() {
        o.push_str(&format!(
            "  {:<32} {:<6} {:<6} {:<4} {:<5} {:<7} {:<8} {:<8} queue\n",
            "path", "token", "parent", "held", "owned", "pending", "frozen", "local"
        ));
    }
    for l in &s.locks {
        o.push_str(&format!(
            "  {:<32} {:<6} {:<6} {:<4} {:<5} {:<7} {:<8} {:<8} {}\n",
            l.path,
            if l.token { "yes" } else { "" },
            l.parent.map(|p| p.to_string()).unwrap_or_default(),
            l.held,
            l.owned,
            l.pending,
            l.frozen,
            format!("{}h/{}w", l.holders, l.waiters),
            l.queue.join(" ")
        ));
    }
    o
}
