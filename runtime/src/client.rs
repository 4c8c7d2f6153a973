//! The local client socket of `hilock node` (a Unix domain socket, so file permissions say
//! who may take locks) and the client side used by `hilock lock` and `hilock status`.
//!
//! Protocol: one JSON object per line.
//! - `{"op":"lock","path":"/db","mode":"W","priority":0,"timeout_ms":5000}` → the node
//!   answers `{"ok":true,"locks":["/db:W"]}` once granted (or `{"ok":false,"error":"…"}`).
//!   The lock is held until the client sends `{"op":"release"}` (or any other line) or
//!   closes the connection, like `flock`: a client that dies releases its lock.
//!   With `"try":true` it is a try-lock ([`crate::Handle::try_lock_with`]): if taking the
//!   lock would mean waiting, the node answers `{"ok":false,"busy":true,"error":"busy: …"}`
//!   at once and nothing of the request is left.
//! - While it holds the lock, a client may send `{"op":"child","pgid":G,"grace_ms":T}`
//!   once (`grace_ms` optional: how long G may take between SIGTERM and SIGKILL when the
//!   node stops, at most [`MAX_STOP_GRACE`]; 40 ms without it): G is a
//!   process group whose leader is a child of the client (checked with the socket's peer
//!   credentials and `/proc`); the node answers `{"ok":true}`. If the connection then
//!   closes without a `release` line (the client died), the node kills group G with
//!   SIGKILL and releases the lock only once no process of G is left
//!   ([`crate::proc::group_alive`]). `hilock lock` registers its command this way.
//! - When the node stops while a client holds a lock, it sends
//!   `{"ok":false,"lost":true,"error":"…"}` and closes the connection.
//! - Membership through etcd (`docs/faults.md`, "With etcd membership"): the grant carries
//!   the end of the node's lease, `"lease_until_ms":T,"lease_grace_ms":G` (T on the
//!   machine's `CLOCK_MONOTONIC`, [`crate::proc::monotonic`]), and the node sends
//!   `{"ok":true,"lease_until_ms":T',…}` after every renewal of its lease. A holder must
//!   stop what it does under the lock by T + G if no renewal moved T — even when the node
//!   itself is paused and cannot say so (`hilock lock` kills its command's group at T:
//!   SIGTERM, SIGKILL at most G/2 later). When the node's lease is lost it sends
//!   `{"ok":false,"lost":true,"lease_lost":true,"error":"…"}`, kills the registered group
//!   and only then releases the lock.
//! - `{"op":"status"}` → `{"ok":true,"status":{…}}` ([`crate::token::Status`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::Mode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use crate::token::{Handle, Options, Status};

/// How long a new client connection may stay silent before its request.
pub const FIRST_LINE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many connections beyond `max_clients` are held open at once to see whether they
/// ask for the status (`hilock status` must work on a full node); more are refused at once.
const STATUS_ONLY: usize = 8;

/// How long such a connection has to send its request before it is refused.
const STATUS_ONLY_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest request line accepted: room for a transaction of the most locks, each of the
/// longest path (32 × 1024 bytes and their JSON).
const MAX_LINE: usize = 64 * 1024;

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
        /// The client runs under another lock of this node ([`crate::Options::nested`]).
        #[serde(default)]
        nested: bool,
        /// A try-lock: refused with `busy` instead of waiting.
        #[serde(default, rename = "try")]
        try_lock: bool,
    },
    /// A transaction of the agents engine (Wiger's locks) over several locks, held while the
    /// connection is open (like `lock`); deadlocks are resolved by the agents.
    Txn {
        /// The locks, `PATH:R` or `PATH:W`.
        locks: Vec<String>,
        /// Timeout in milliseconds (default: the agents engine's).
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Abort instead of surrendering a lock reported held (never happens here: every
        /// lock is asked for at once and reported only when all are held).
        #[serde(default)]
        abort_on_deadlock: bool,
    },
    /// The node's status.
    Status,
    /// After a grant: the process group of the command that runs under the lock.
    Child {
        /// The group id (the pid of its leader, a child of the client).
        pgid: i32,
        /// How long the command may take between SIGTERM and SIGKILL when the node stops
        /// (`hilock lock --kill-grace-ms`); at most [`MAX_STOP_GRACE`]. Absent: 40 ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_ms: Option<u64>,
    },
    /// After a grant: release the lock. A W hold given `value` (64 hex digits or fewer,
    /// zero-padded on the right) first writes it as the lock's value block
    /// ([`crate::Guard::set_value`], `spec/SPEC.md` 1.15).
    Release {
        /// The new value block, in hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<String>,
    },
}

/// The lock value block (`spec/SPEC.md` 1.15) as 64 lowercase hex digits.
pub fn value_hex(value: &[u8; hilock_kernel::VALUE_LEN]) -> String {
    hex(value)
}

/// Bytes as lowercase hex digits (value blocks, a suspended node's snapshot).
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of an even number of hex digits.
pub(crate) fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not hex: {:?}", s.get(i..i + 2).unwrap_or("")))
        })
        .collect()
}

/// A value block from at most 64 hex digits (surrounding whitespace ignored), zero-padded
/// on the right.
pub fn parse_value_hex(text: &str) -> Result<[u8; hilock_kernel::VALUE_LEN], String> {
    let t = text.trim();
    let mut v = [0u8; hilock_kernel::VALUE_LEN];
    // Every character a hex digit (one byte each), or the one line says which is not.
    if let Some(c) = t.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("a value block is hex digits; {c:?} is not one"));
    }
    if t.len() > 2 * v.len() || t.len() % 2 != 0 {
        return Err(format!(
            "a value block is an even number of hex digits, at most {}: {} given",
            2 * v.len(),
            t.len()
        ));
    }
    let bytes = unhex(t)?;
    v[..bytes.len()].copy_from_slice(&bytes);
    Ok(v)
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
    /// The fencing token of the granted hold ([`crate::Guard::fence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// The lock this connection held is lost (the node is stopping).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// Membership through etcd: the hold is good until this `CLOCK_MONOTONIC` time in
    /// milliseconds unless a later line moves it ([`crate::proc::monotonic_ms_to_instant`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<u64>,
    /// With `lease_until_ms`: by how much later the holder's command must be gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_grace_ms: Option<u64>,
    /// With `lost`: the lock is lost because the node's etcd lease is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lease_lost: bool,
    /// A try-lock was refused: the lock could not be taken without waiting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// The lock value block of the granted hold (`spec/SPEC.md` 1.15) in hex
    /// ([`value_hex`]); empty when the block is not valid (a recovery regenerated the
    /// lock's token and nobody has written since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// While held, a line of its own: a request of another node for this mode waits for
    /// the hold (`spec/SPEC.md` 1.16, [`crate::Guard::blocking`]); written once per hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<String>,
    /// With `blocking`: the waiting request's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking_priority: Option<u8>,
}

impl Reply {
    fn error(e: impl ToString) -> Reply {
        Reply {
            ok: false,
            error: Some(e.to_string()),
            locks: None,
            status: None,
            fence: None,
            lost: false,
            lease_until_ms: None,
            lease_grace_ms: None,
            lease_lost: false,
            busy: false,
            value: None,
            blocking: None,
            blocking_priority: None,
        }
    }

    fn ok() -> Reply {
        Reply {
            ok: true,
            error: None,
            locks: None,
            status: None,
            fence: None,
            lost: false,
            lease_until_ms: None,
            lease_grace_ms: None,
            lease_lost: false,
            busy: false,
            value: None,
            blocking: None,
            blocking_priority: None,
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

/// File descriptors a node keeps for itself besides its clients and two per peer (the
/// connection it dials and the one it accepts): listeners, etcd, logs, the spare one of
/// [`serve`], and a margin for connections being replaced.
pub const FD_HEADROOM: u64 = 64;

/// Makes room for `config.max_clients` client connections: raises the soft open-file
/// limit to the hard one where it can ([`crate::proc::raise_open_files`]); if the limit
/// still leaves too little room — `max_clients`, two descriptors per peer and
/// [`FD_HEADROOM`] — lowers `max_clients` to what fits. Says what it did in one log line
/// (a warning when it lowered `max_clients`); returns that line, if any.
pub fn fit_open_files(config: &mut crate::Config) -> Option<String> {
    let (before, soft, hard) = match crate::proc::raise_open_files() {
        Ok(l) => l,
        Err(e) => {
            let line = format!(
                "cannot read the open-file limit ({e}); max_clients stays {}",
                config.max_clients
            );
            warn!("{line}");
            return Some(line);
        }
    };
    let peers = config.n().saturating_sub(1) as u64;
    let keep = 2 * peers + FD_HEADROOM;
    let room = usize::try_from(soft.saturating_sub(keep)).unwrap_or(usize::MAX);
    let show = |l: u64| {
        if l == u64::MAX {
            "unlimited".to_string()
        } else {
            l.to_string()
        }
    };
    if room < config.max_clients {
        let was = config.max_clients;
        config.max_clients = room.max(1);
        let line = format!(
            "open-file limit {} (hard {}) leaves room for {room} clients after {keep} descriptors \
             for peers and the node: max_clients lowered from {was} to {}{} (raise the hard \
             limit, e.g. LimitNOFILE= in the systemd unit, to serve more)",
            show(soft),
            show(hard),
            config.max_clients,
            if room == 0 {
                ", the least the node serves (clients may then be refused for want of \
                 descriptors)"
            } else {
                ""
            }
        );
        warn!("{line}");
        Some(line)
    } else if soft > before {
        let line = format!(
            "raised the open-file limit from {} to {} (the hard limit) for max_clients {}",
            show(before),
            show(soft),
            config.max_clients
        );
        tracing::info!("{line}");
        Some(line)
    } else {
        None
    }
}

/// How long a stopping node gives its clients to hear that their locks are lost, beyond
/// the time their commands are given to die.
const STOP_NOTICE: Duration = Duration::from_millis(150);

/// Serve clients until the node stops. When it stops, every client that holds a lock is
/// told so (`"lost":true`) before its connection closes.
///
/// A client beyond `max_clients` is answered `too many clients` and its connection closed.
/// So is one the node cannot accept for lack of file descriptors (`EMFILE`, `ENFILE`: the
/// open-file limit is reached before `max_clients`): the node keeps one descriptor spare,
/// frees it to take that connection, answers and closes it, and opens it again — the
/// client reads the reason instead of waiting for an answer that never comes. Failed
/// accepts are counted and logged for the 1st, 2nd, 4th, 8th … only.
pub async fn serve(node: Handle, listener: UnixListener, path: PathBuf, max_clients: usize) {
    let mut conns = tokio::task::JoinSet::new();
    let _cleanup = RemoveOnDrop(path);
    let mut stop = node.stopping();
    let counters = node.counters();
    let mut spare = std::fs::File::open("/dev/null").ok();
    let too_many: Arc<str> = format!(
        "too many clients: this node serves {max_clients} connections at once (max_clients); \
         try again later"
    )
    .into();
    // Connections beyond `max_clients` that may still ask for the status.
    let mut over = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) if conns.len() >= max_clients && over.len() < STATUS_ONLY => {
                    over.spawn(status_only(node.clone(), s, too_many.clone(), max_clients));
                }
                Ok((s, _)) if conns.len() >= max_clients => refuse(counters, s, &too_many, max_clients),
                Ok((s, _)) => { conns.spawn(client(node.clone(), s)); }
                Err(e) => {
                    let n = counters.accept_errors.fetch_add(1, Relaxed) + 1;
                    let out_of_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    if n.is_power_of_two() {
                        warn!(error = %e, failed = n, clients = conns.len(), "cannot accept a client connection (logged for the 1st, 2nd, 4th ... failure)");
                    }
                    if out_of_files && spare.take().is_some() {
                        let waiting = tokio::time::timeout(Duration::from_millis(10), listener.accept()).await;
                        if let Ok(Ok((s, _))) = waiting {
                            let why = format!(
                                "too many clients: this node has no file descriptor left for \
                                 another connection ({e}; {} served); try again later",
                                conns.len()
                            );
                            refuse(counters, s, &why, max_clients);
                        }
                        spare = std::fs::File::open("/dev/null").ok();
                    } else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            Some(_) = over.join_next(), if !over.is_empty() => {}
            _ = stopped(&mut stop) => break,
        }
        counters.clients.store(conns.len() as u64, Relaxed);
    }
    drop(listener);
    over.shutdown().await;
    // Each holder's command has the grace its client asked for (at most
    // `MAX_STOP_GRACE`), then SIGKILL: its hold ends, and its lock is released, only once
    // the command is gone. Aborting the task earlier would release under a live command.
    let _ = tokio::time::timeout(MAX_STOP_GRACE + STOP_KILL_WAIT + STOP_NOTICE, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    // Wait for the aborted ones too: their guards are released before the node hands over.
    conns.shutdown().await;
    counters.clients.store(0, Relaxed);
}

/// Answer a client the node does not serve with `why` and close its connection.
fn refuse(counters: &crate::token::Counters, s: UnixStream, why: &str, max_clients: usize) {
    // Best effort, without waiting: the socket buffer takes one line.
    let mut line = serde_json::to_vec(&Reply::error(why)).unwrap_or_default();
    line.push(b'\n');
    let _ = s.try_write(&line);
    count_refused(counters, why, max_clients);
}

/// Counts a refused client (logged for the 1st, 2nd, 4th … only).
fn count_refused(counters: &crate::token::Counters, why: &str, max_clients: usize) {
    let refused = counters.clients_refused.fetch_add(1, Relaxed) + 1;
    if refused.is_power_of_two() {
        warn!(max_clients, refused, reason = %why, "refusing client connections (logged for the 1st, 2nd, 4th ... refusal)");
    }
}

/// Resolves when the node stops.
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
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

/// A connection's first line, its request; else why not: `Some(text)` to answer (none
/// within `within`, a line too long, not a request), `None` where nobody is left to tell
/// (the client closed, a read failed).
async fn read_request(
    r: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    within: Duration,
) -> Result<Request, Option<String>> {
    let mut line = String::new();
    let first = tokio::time::timeout(within, r.take(MAX_LINE as u64).read_line(&mut line)).await;
    let Ok(first) = first else {
        return Err(Some(format!("no request within {within:?}")));
    };
    match first {
        Ok(0) => return Err(None),
        Ok(_) if !line.ends_with('\n') => {
            return Err(Some(format!(
                "request line longer than {} KiB or unterminated",
                MAX_LINE / 1024
            )));
        }
        Ok(_) => {}
        Err(e) => {
            debug!(error = %e, "client read failed");
            return Err(None);
        }
    }
    serde_json::from_str(line.trim_end()).map_err(|e| Some(format!("bad request: {e}")))
}

/// The node's status as a reply.
async fn status_reply(node: &Handle) -> Reply {
    match node.status().await {
        Ok(s) => Reply {
            status: serde_json::to_value(s).ok(),
            ..Reply::ok()
        },
        Err(e) => Reply::error(e),
    }
}

/// A connection beyond `max_clients`: served only if it asks for the status (an operator
/// must see a node that is full), else answered `why` and closed.
async fn status_only(node: Handle, s: UnixStream, why: Arc<str>, max_clients: usize) {
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    match read_request(&mut r, STATUS_ONLY_TIMEOUT).await {
        Ok(Request::Status) => {
            let _ = write_reply(&mut w, &status_reply(&node).await).await;
        }
        _ => {
            count_refused(node.counters(), &why, max_clients);
            let _ = write_reply(&mut w, &Reply::error(&*why)).await;
        }
    }
}

async fn client(node: Handle, s: UnixStream) {
    let peer_pid = s.peer_cred().ok().and_then(|c| c.pid());
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    let req = match read_request(&mut r, FIRST_LINE_TIMEOUT).await {
        Ok(req) => req,
        Err(why) => {
            if let Some(why) = why {
                let _ = write_reply(&mut w, &Reply::error(why)).await;
            }
            return;
        }
    };
    match req {
        Request::Status => {
            let _ = write_reply(&mut w, &status_reply(&node).await).await;
        }
        Request::Child { .. } | Request::Release { .. } => {
            let _ = write_reply(&mut w, &Reply::error("no lock held on this connection")).await;
        }
        Request::Txn {
            locks,
            timeout_ms,
            abort_on_deadlock,
        } => txn(&node, r, w, peer_pid, locks, timeout_ms, abort_on_deadlock).await,
        Request::Lock {
            path,
            mode,
            priority,
            timeout_ms,
            nested,
            try_lock,
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
                nested,
            };
            // If the client goes away while waiting, give up (the grant is then released).
            let mut probe = [0u8; 1];
            let mut stop = node.stopping();
            let guard = tokio::select! {
                g = async {
                    if try_lock {
                        node.try_lock_with(&path, m, opts).await
                    } else {
                        node.lock_with(&path, m, opts).await
                    }
                } => g,
                _ = r.read(&mut probe) => return,
                _ = stopped(&mut stop) => Err(crate::token::Error::Stopped),
            };
            let guard = match guard {
                Ok(g) => g,
                Err(e) => {
                    // A busy ancestor (whose intention mode the path needs) is named as one.
                    let (busy, error) = match &e {
                        crate::token::Error::WouldBlock { path: busy, .. } if *busy != path => {
                            (true, format!("{e} (an ancestor of {path})"))
                        }
                        crate::token::Error::WouldBlock { .. } => (true, e.to_string()),
                        _ => (false, e.to_string()),
                    };
                    let _ = write_reply(
                        &mut w,
                        &Reply {
                            busy,
                            ..Reply::error(error)
                        },
                    )
                    .await;
                    return;
                }
            };
            let locks = guard.locks().map(|(p, m)| format!("{p}:{m}")).collect();
            let lease = node.lease().borrow().deadline_ms();
            let value = guard
                .value()
                .await
                .ok()
                .map(|b| b.get().map(value_hex).unwrap_or_default());
            let reply = Reply {
                locks: Some(locks),
                fence: Some(guard.fence()),
                value,
                lease_until_ms: lease.map(|l| l.0),
                lease_grace_ms: lease.map(|l| l.1),
                ..Reply::ok()
            };
            if write_reply(&mut w, &reply).await.is_err() {
                return;
            }
            let mut value = None;
            let release = hold(
                &node,
                &mut r,
                &mut w,
                peer_pid,
                &path,
                std::future::pending(),
                // `spec/SPEC.md` 1.16: a conflicting request of another node waits.
                async { guard.blocking().await.ok() },
                &mut value,
                &mut false,
                false,
            )
            .await;
            if release {
                if let Some(v) = value {
                    // `spec/SPEC.md` 1.15: the W holder's value goes with its release.
                    let mut guard = guard;
                    if let Err(e) = guard.set_value(v).await {
                        warn!(%path, error = %e, "the value block given with the release was not written");
                    }
                    drop(guard);
                } else {
                    drop(guard);
                }
            } else {
                // A process of the command survived SIGKILL while the node stops: never
                // release under it (the lock goes with this node).
                std::mem::forget(guard);
            }
        }
    }
}

/// `{"op":"txn"}`: ask for every lock at once in one transaction, answer once all are
/// held, then hold them like a lock (the transaction ends when the connection does; an
/// abort while held is reported as lost).
async fn txn(
    node: &Handle,
    mut r: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut w: tokio::net::unix::OwnedWriteHalf,
    peer_pid: Option<i32>,
    locks: Vec<String>,
    timeout_ms: Option<u64>,
    abort_on_deadlock: bool,
) {
    let parsed = match crate::agents::parse_txn(&locks) {
        Ok(x) => x,
        Err(e) => {
            let _ = write_reply(&mut w, &Reply::error(e)).await;
            return;
        }
    };
    let opts = crate::agents::TxnOptions {
        abort_on_deadlock,
        timeout: timeout_ms.map(Duration::from_millis),
    };
    let mut t = match node.transaction(opts) {
        Ok(t) => t,
        Err(e) => {
            let _ = write_reply(&mut w, &Reply::error(e)).await;
            return;
        }
    };
    let mut probe = [0u8; 1];
    let mut stop = node.stopping();
    let got = tokio::select! {
        g = t.lock_all(&parsed) => g,
        // The client went away while waiting: dropping the transaction releases all.
        _ = r.read(&mut probe) => return,
        _ = stopped(&mut stop) => Err(crate::agents::TxnError::Stopped),
    };
    if let Err(e) = got {
        let _ = write_reply(&mut w, &Reply::error(e)).await;
        return;
    }
    let names: Vec<String> = parsed.iter().map(|(p, m)| format!("{p}:{m}")).collect();
    // The hold has a lease of its own, whatever the membership: peers release a silent
    // node's entries after `AGENTS_GONE_AFTER`, a paused node's too.
    let reply = Reply {
        locks: Some(names.clone()),
        ..lease_reply(txn_lease(node))
    };
    if write_reply(&mut w, &reply).await.is_err() {
        return;
    }
    let lost = async { t.lost().await.to_string() };
    // A transaction writes no value block: a value given with its release is ignored.
    let mut ignored = None;
    let mut released = false;
    if !hold(
        node,
        &mut r,
        &mut w,
        peer_pid,
        &names.join(" "),
        lost,
        // The agents engine has no blocking notification (`spec/SPEC.md` 1.16).
        std::future::pending(),
        &mut ignored,
        &mut released,
        true,
    )
    .await
    {
        std::mem::forget(t);
    } else if released {
        // Every lock was held until the client released them after its command ran to
        // its end: a commit (`AgentStats::committed`), which releases them all.
        let _ = t.commit().await;
    }
    // Otherwise the client went away without a release (its command was killed: the
    // hold's lease ran out, or the client was): dropping the transaction aborts it and
    // releases every lock.
}

/// How long a stopping node gives a registered command between SIGTERM and SIGKILL when
/// its client gave none, and always when the node's etcd lease is lost (then the lock may
/// be granted elsewhere soon).
const STOP_TERM_GRACE: Duration = Duration::from_millis(40);

/// The longest grace between SIGTERM and SIGKILL a client may ask a stopping node to give
/// its command ([`Request::Child`]'s `grace_ms`): a node's stop waits at most this long
/// for its holders' commands.
pub const MAX_STOP_GRACE: Duration = Duration::from_secs(10);

/// How long a stopping node waits after SIGKILL for the command's group to be gone.
const STOP_KILL_WAIT: Duration = Duration::from_millis(80);

/// Hold a granted lock until the client releases it, dies or the node stops. Returns when
/// the lock may be released: if the client registered its command's process group and
/// then died, only once that group has been killed and no process of it is left. When the
/// node stops, or its etcd lease is lost, a registered group is killed (SIGTERM, SIGKILL
/// [`STOP_TERM_GRACE`] later) before the release; `false` if a process of it is still
/// alive [`STOP_KILL_WAIT`] after the SIGKILL: then the lock must not be released. While
/// the node's lease is valid, every renewal is passed on to the client. A release that
/// carries a value block leaves it in `value` for the caller to write before it releases;
/// `released` says whether the client asked for the release (not gone without one).
#[allow(clippy::too_many_arguments)]
async fn hold(
    node: &Handle,
    r: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    w: &mut tokio::net::unix::OwnedWriteHalf,
    peer_pid: Option<i32>,
    path: &str,
    lost: impl std::future::Future<Output = String>,
    blocked: impl std::future::Future<Output = Option<crate::Blocked>>,
    value: &mut Option<[u8; hilock_kernel::VALUE_LEN]>,
    released: &mut bool,
    txn: bool,
) -> bool {
    let mut stop = node.stopping();
    let mut lost = std::pin::pin!(lost);
    let mut blocked = std::pin::pin!(blocked);
    let mut told = false;
    let mut group: Option<i32> = None;
    let mut grace = stop_grace(None);
    let mut lease = node.lease();
    let mut follow_lease = !matches!(*lease.borrow(), crate::token::NodeLease::Static);
    // A lease lost between the grant and now: the change is seen below at once.
    lease.mark_changed();
    // A transaction's own lease ([`txn_lease`]), renewed every quarter of it; a timer for
    // transactions only.
    let mut renew = txn.then(|| {
        let mut i = tokio::time::interval(crate::agents::HOLD_LEASE / 4);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    // Bytes, not a String: `read_until` keeps what it read when another branch wins, so
    // no part of a line is lost to a lease renewal.
    let mut line = Vec::new();
    loop {
        let mut limited = (&mut *r).take(MAX_LINE as u64);
        tokio::select! {
            n = limited.read_until(b'\n', &mut line) => {
                if matches!(n, Ok(0) | Err(_)) || line.len() >= MAX_LINE {
                    // The client is gone without releasing.
                    return match group {
                        Some(g) => kill_group(node, g, path).await,
                        None => true,
                    };
                }
                if line.last() != Some(&b'\n') {
                    continue;
                }
                let req = serde_json::from_slice::<Request>(line.trim_ascii_end());
                line.clear();
                match req {
                    Ok(Request::Child { pgid, grace_ms }) if group.is_none() => {
                        let ok = peer_pid
                            .is_some_and(|p| crate::proc::is_group_leader_child_of(pgid, p));
                        if !ok {
                            let _ = write_reply(
                                w,
                                &Reply::error(format!(
                                    "process group {pgid} is not led by a child of this client \
                                     (the node and its clients must share a pid namespace)"
                                )),
                            )
                            .await;
                            return true;
                        }
                        group = Some(pgid);
                        grace = stop_grace(grace_ms);
                        debug!(%path, pgid, ?grace, "client registered its command's process group");
                        if write_reply(w, &Reply::ok()).await.is_err() {
                            return kill_group(node, pgid, path).await;
                        }
                    }
                    // A release, maybe with a value block for the holder to write first
                    // (`spec/SPEC.md` 1.15); a value that does not parse is dropped.
                    Ok(Request::Release { value: v }) => {
                        if let Some(v) = v {
                            match parse_value_hex(&v) {
                                Ok(v) => *value = Some(v),
                                Err(e) => warn!(%path, error = %e, "a release's value block was dropped"),
                            }
                        }
                        *released = true;
                        return true;
                    }
                    // Anything else: release (not asked for: `released` stays false).
                    _ => return true,
                }
            }
            b = &mut blocked, if !told => {
                // `spec/SPEC.md` 1.16: one line per hold; a client that does not know it
                // reads an `ok` line without a lease and goes on.
                told = true;
                if let Some(b) = b {
                    let note = Reply {
                        blocking: Some(b.mode.to_string()),
                        blocking_priority: Some(b.prio),
                        ..Reply::ok()
                    };
                    if write_reply(w, &note).await.is_err() {
                        return match group {
                            Some(g) => kill_group(node, g, path).await,
                            None => true,
                        };
                    }
                }
            }
            _ = stopped(&mut stop) => {
                let _ = write_reply(
                    w,
                    &Reply {
                        lost: true,
                        ..Reply::error(format!("lock on {path} lost: the node is stopping"))
                    },
                )
                .await;
                // The wrapper kills the group too when it reads this; the node does not
                // wait for it: the command must be gone before the lock is handed over. It
                // has the grace its client asked for to clean up.
                return match group {
                    Some(g) => stop_group(g, path, grace).await,
                    None => true,
                };
            }
            why = &mut lost => {
                let _ = write_reply(
                    w,
                    &Reply {
                        lost: true,
                        ..Reply::error(format!("locks {path} lost: {why}"))
                    },
                )
                .await;
                return true;
            }
            _ = tick(&mut renew) => {
                // A client that is gone is seen by the read above.
                let _ = write_reply(w, &lease_reply(txn_lease(node))).await;
            }
            changed = lease.changed(), if follow_lease => {
                if changed.is_err() {
                    follow_lease = false;
                    continue;
                }
                let now = lease.borrow_and_update().clone();
                match now {
                    crate::token::NodeLease::Lost { reason } => {
                        let _ = write_reply(
                            w,
                            &Reply {
                                lost: true,
                                lease_lost: true,
                                ..Reply::error(format!("lock on {path} lost: {reason}"))
                            },
                        )
                        .await;
                        // The node's word first, then the kill, then (on return) the
                        // release: the command is gone before the lock is. No grace: the
                        // lease is gone, the lock may soon be granted elsewhere.
                        return match group {
                            Some(g) => stop_group(g, path, STOP_TERM_GRACE).await,
                            None => true,
                        };
                    }
                    l => {
                        let renewed = if txn { Some(txn_lease(node)) } else { l.deadline_ms() };
                        if let Some(lease) = renewed {
                            // A client that is gone is seen by the read above.
                            let _ = write_reply(w, &lease_reply(lease)).await;
                        }
                    }
                }
            }
        }
    }
}

/// The next tick of `i`; never without a timer.
async fn tick(i: &mut Option<tokio::time::Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// An `ok` line carrying a lease's end and grace (`(until, grace)` in milliseconds, as
/// [`txn_lease`] and `NodeLease::deadline_ms` give them): a grant's or a renewal's.
fn lease_reply((until, grace): (u64, u64)) -> Reply {
    Reply {
        lease_until_ms: Some(until),
        lease_grace_ms: Some(grace),
        ..Reply::ok()
    }
}

/// The lease of a transaction's hold from now ([`crate::agents::HOLD_LEASE`]), cut to the
/// node's etcd lease where that ends first: its end in `CLOCK_MONOTONIC` milliseconds and
/// its grace in milliseconds, as a [`Reply`] carries them.
fn txn_lease(node: &Handle) -> (u64, u64) {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let own = (
        crate::proc::instant_to_monotonic_ms(
            tokio::time::Instant::now() + crate::agents::HOLD_LEASE,
        ),
        ms(crate::agents::HOLD_LEASE_GRACE),
    );
    match node.lease().borrow().deadline_ms() {
        Some((until, grace)) if until < own.0 => (until, grace.min(own.1)),
        _ => own,
    }
}

/// The grace a stopping node gives a registered command between SIGTERM and SIGKILL: what
/// its client asked for, at most [`MAX_STOP_GRACE`]; [`STOP_TERM_GRACE`] if it asked none.
fn stop_grace(asked_ms: Option<u64>) -> Duration {
    asked_ms.map_or(STOP_TERM_GRACE, |ms| {
        Duration::from_millis(ms).min(MAX_STOP_GRACE)
    })
}

/// The node stops while a command holds a lock: kill its group (SIGTERM, then SIGKILL
/// after `grace`); whether no process of it is left.
async fn stop_group(pgid: i32, path: &str, grace: Duration) -> bool {
    let _ = crate::proc::signal_group(pgid, libc::SIGTERM);
    let now = std::time::Instant::now();
    if crate::proc::wait_group_gone(pgid, now + grace).await {
        return true;
    }
    let _ = crate::proc::signal_group(pgid, libc::SIGKILL);
    let gone = crate::proc::wait_group_gone(pgid, std::time::Instant::now() + STOP_KILL_WAIT).await;
    if !gone {
        warn!(%path, pgid, "a process of the command survived SIGKILL; the lock is not released");
    }
    gone
}

/// The client holding a lock died after registering process group `pgid`: kill the group
/// and wait until no process of it is left (however long that takes; a warning every 10 s).
/// If the node stops meanwhile: as [`stop_group`].
async fn kill_group(node: &Handle, pgid: i32, path: &str) -> bool {
    let mut stop = node.stopping();
    let started = std::time::Instant::now();
    loop {
        match crate::proc::signal_group(pgid, libc::SIGKILL) {
            Ok(_) => {}
            Err(e) => warn!(%path, pgid, error = %e, "cannot kill the dead client's process group"),
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        tokio::select! {
            gone = crate::proc::wait_group_gone(pgid, deadline) => if gone {
                debug!(%path, pgid, after = ?started.elapsed(), "dead client's process group is gone; releasing");
                return true;
            },
            _ = stopped(&mut stop) => return stop_group(pgid, path, STOP_TERM_GRACE).await,
        }
        warn!(%path, pgid, after = ?started.elapsed(), "the dead client's process group is still alive; the lock stays held");
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
    // A node that refuses the connection (too many clients) has answered and closed
    // already: the write may fail, the answer is still there to read.
    let written = s.write_all(&line).await.map_err(|e| e.to_string());
    let mut reply = Vec::new();
    let read = if matches!(req, Request::Lock { .. } | Request::Txn { .. }) {
        // A hold's connection goes on after the reply (lease renewals, a blocking note, the
        // loss of the lock), maybe in the same packet: read the reply byte by byte, so that
        // nothing after it is taken from the stream and lost.
        let mut read = Ok(0);
        while reply.len() < MAX_REPLY as usize {
            match s.read_u8().await {
                Ok(b) => {
                    reply.push(b);
                    if b == b'\n' {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => {
                    read = Err(e.to_string());
                    break;
                }
            }
        }
        read.map(|_: usize| reply.len())
    } else {
        // The node sends nothing after this reply: the buffer can be dropped after it.
        let mut r = BufReader::new(&mut s);
        (&mut r)
            .take(MAX_REPLY)
            .read_until(b'\n', &mut reply)
            .await
            .map_err(|e| e.to_string())
    };
    if reply.is_empty() {
        let at = |e: String| format!("the node's client socket {}: {e}", socket.display());
        written.map_err(at)?;
        read.map_err(at)?;
    }
    match reply.pop() {
        Some(b'\n') => {}
        None => {
            return Err(format!(
                "the node closed the connection without a reply (client socket {})",
                socket.display()
            ))
        }
        Some(_) if reply.len() + 1 >= MAX_REPLY as usize => return Err("reply too long".into()),
        Some(_) => {
            return Err(format!(
                "the node closed the connection without a reply (client socket {})",
                socket.display()
            ))
        }
    }
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
        "membership {}{}; run {}{}; epoch {}\n",
        s.membership,
        if s.recovery { " (recovery on)" } else { "" },
        s.run,
        if s.resumed {
            " (resumed after a suspend)"
        } else {
            ""
        },
        s.epoch
    ));
    let l = &s.lease;
    let lease = match (l.state.as_str(), l.left_ms) {
        ("none", _) => "none (static membership)".to_string(),
        ("held", Some(ms)) => format!(
            "{} held, {:.1} s left unless renewed",
            l.id.as_deref().unwrap_or("?"),
            ms as f64 / 1000.0
        ),
        (state, _) => format!(
            "{} {state}: {}",
            l.id.as_deref().unwrap_or(""),
            l.reason.as_deref().unwrap_or("")
        )
        .trim_start()
        .to_string(),
    };
    o.push_str(&format!("lease {lease}\n"));
    if let Some(m) = &s.metrics {
        o.push_str(&format!("metrics {m}\n"));
    }
    match &s.not_serving {
        None => o.push_str(&format!(
            "serving: yes; tokens held {} of {} locks known\n",
            s.tokens_held,
            s.locks.len()
        )),
        Some(why) => o.push_str(&format!(
            "serving: NO ({why}); tokens held {} of {} locks known\n",
            s.tokens_held,
            s.locks.len()
        )),
    }
    o.push_str(&format!(
        "messages sent {} received {}; kernel requests {}; grants {}; waits {}; timeouts {}; busy tries {}; cancels {}; rejected connections {}; cut connections {}; refused messages {}; abandoned grants {}; refused clients {}\n",
        s.stats.frames_sent,
        s.stats.frames_received,
        s.stats.kernel_requests,
        s.stats.grants,
        s.stats.waits,
        s.stats.timeouts,
        s.stats.would_block,
        s.stats.cancels,
        s.stats.rejected_connections,
        s.stats.cut_connections,
        s.stats.kernel_rejections,
        s.stats.abandoned_grants,
        s.stats.clients_refused
    ));
    let a = &s.agents;
    o.push_str(&format!(
        "transactions (--txn): begun {} committed {} aborted {} (deadlock {}, servers down {}, other {}); surrenders {}; locks revoked {}; entries at this node's lock server {}\n",
        a.begun,
        a.committed,
        a.aborted_deadlock + a.aborted_server_down + a.aborted_other,
        a.aborted_deadlock,
        a.aborted_server_down,
        a.aborted_other,
        a.surrenders,
        a.revoked,
        s.txn_entries
    ));
    o.push_str("peers:\n");
    for p in &s.peers {
        o.push_str(&format!(
            "  node {:<3} {:<22} {:<12} sent {:<8} received {:<8} resent {:<6} duplicates {:<6} reconnects {}\n",
            p.id,
            p.addr,
            p.state,
            p.frames_sent,
            p.frames_received,
            p.resent,
            p.duplicates,
            p.reconnects
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stopping node gives a command the grace its client asked for, at most 10 s; 40 ms
    /// to one that asked none (`docs/cli.md`, "hilock node").
    #[test]
    fn a_stopping_node_gives_the_asked_grace_up_to_ten_seconds() {
        assert_eq!(stop_grace(None), Duration::from_millis(40));
        assert_eq!(stop_grace(Some(2000)), Duration::from_secs(2));
        assert_eq!(stop_grace(Some(60_000)), Duration::from_secs(10));
        assert_eq!(MAX_STOP_GRACE, Duration::from_secs(10));
    }

    /// A socket that accepts the connection and closes it without a word: the error names
    /// the socket, a lock's request and a status request alike.
    #[tokio::test]
    async fn a_socket_that_closes_at_once_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!(
            "hilock-client-test-{}-{:x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir(&dir).unwrap();
        let socket = dir.join("s.sock");
        let l = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        });
        let lock = Request::Lock {
            path: "/a".into(),
            mode: "W".into(),
            priority: 0,
            timeout_ms: None,
            nested: false,
            try_lock: false,
        };
        for req in [lock, Request::Status] {
            let e = request(&socket, &req).await.unwrap_err();
            assert!(e.contains(&socket.display().to_string()), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
