//! `hilock lock`: hold a lock (token, agents or ring engine) while a command runs under it
//! ([`crate::run_under_lock`]).

use std::process::ExitCode;

use crate::node::ClientAt;
use crate::run_under_lock::{
    Event, Watch, EXIT_BUSY, EXIT_ID_IN_USE, EXIT_LEASE_LOST, EXIT_LOCK_LOST, EXIT_NODE_GONE,
};

/// How much longer than the lock timeout the command waits for the node's answer.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the command still reads the node's answer once its bound has passed: an
/// answer that came while the command was stopped is in the socket already.
const LATE_READ: std::time::Duration = std::time::Duration::from_millis(100);

/// How late the wrapper's own lease timer may fire before the wrapper, not the node, is
/// taken to have stopped: a timer fires within milliseconds when the process runs.
const WRAPPER_LATE: std::time::Duration = std::time::Duration::from_millis(500);

/// Default of `hilock lock --kill-grace-ms`.
pub const DEFAULT_KILL_GRACE_MS: u64 = 2000;

/// The end of the node's lease a reply carries, as a local instant, and the grace.
fn lease_deadline(
    r: &hilock_runtime::client::Reply,
) -> Option<(tokio::time::Instant, std::time::Duration)> {
    let until = r.lease_until_ms?;
    let grace = std::time::Duration::from_millis(r.lease_grace_ms.unwrap_or(0));
    Some((hilock_runtime::proc::monotonic_ms_to_instant(until), grace))
}

/// What `hilock lock` asks of the node: one lock of the token engine, or a transaction of
/// the agents engine (`--txn`).
pub enum LockRequest {
    Lock {
        path: String,
        mode: String,
        /// `--try`: refused at once (exit [`EXIT_BUSY`]) instead of waiting.
        try_lock: bool,
        /// `--signal-waiters`: send the command's process group SIGUSR1 when a conflicting
        /// request of another node waits (`spec/SPEC.md` 1.16; token engine).
        signal_waiters: bool,
    },
    Txn {
        locks: Vec<String>,
        abort_on_deadlock: bool,
    },
}

/// Who a ring's `hilock lock` is: `--client-id` and `--take-over`.
pub struct RingId {
    /// `--client-id`.
    pub client_id: Option<u8>,
    /// `--take-over`: a hold of a killed earlier run with the id is taken over.
    pub take_over: bool,
}

#[allow(clippy::too_many_arguments)]
pub fn lock(
    what: LockRequest,
    command: &[String],
    at: &ClientAt,
    timeout_ms: Option<u64>,
    priority: Option<u8>,
    kill_grace_ms: u64,
    ring_id: RingId,
) -> Result<ExitCode, String> {
    // A ring configuration: the ring client is the lock's holder (no node socket).
    if let Some(c) = &at.config {
        let cfg = hilock_runtime::Config::from_file(c, Some(at.id.unwrap_or(0)))?;
        if cfg.engine == hilock_runtime::config::Engine::Ring {
            let LockRequest::Lock {
                path,
                mode,
                try_lock,
                signal_waiters,
            } = what
            else {
                return Err("--txn is the agents engine's: a ring takes one PATH MODE".into());
            };
            if try_lock {
                return Err("--try is the token engine's: a ring has no try-lock".into());
            }
            if signal_waiters {
                return Err(
                    "--signal-waiters is the token engine's: a ring tells no holder".into(),
                );
            }
            if priority.is_some() {
                return Err("--priority is the token engine's: a ring serves no priorities".into());
            }
            if at.id.is_some() {
                return Err(
                    "--id names a token node: a ring's client is named by --client-id".into(),
                );
            }
            let timeout_ms = timeout_ms.unwrap_or(cfg.request_timeout.as_millis() as u64);
            return ring_lock(
                &cfg,
                c,
                &path,
                &mode,
                command,
                ring_id,
                timeout_ms,
                kill_grace_ms,
            );
        }
    }
    // A transaction's locks are checked before anything starts: their number, each path
    // and mode, no lock twice (one line, exit 2).
    if let LockRequest::Txn { locks, .. } = &what {
        hilock_runtime::agents::parse_txn(locks)?;
    }
    // A path the node would refuse (or one too long to reach it in a request line) is
    // refused here, in the node's words.
    if let LockRequest::Lock { path, .. } = &what {
        hilock_runtime::wire::check_path(path).map_err(|e| format!("invalid lock path: {e}"))?;
    }
    if ring_id.client_id.is_some() {
        return Err(
            "--client-id is the ring's (a --config with engine = \"ring\"): a node of the \
             token engine knows its clients by their connection"
                .into(),
        );
    }
    let socket = at.socket()?;
    let timeout_ms = match timeout_ms {
        Some(t) => t,
        None => at.default_timeout_ms()?,
    };
    let grace = std::time::Duration::from_millis(kill_grace_ms);
    current_thread()?.block_on(async {
        // A W lock of the token engine: the command may leave a new value block in a file
        // (`docs/cli.md`, "The value block"; `spec/SPEC.md` 1.15), made once it holds.
        let writes_value = matches!(&what, LockRequest::Lock { mode, .. }
            if hilock_kernel::Mode::parse(mode) == Some(hilock_kernel::Mode::W));
        let signal_waiters = matches!(
            what,
            LockRequest::Lock {
                signal_waiters: true,
                ..
            }
        );
        let (req, path) = match what {
            LockRequest::Lock {
                path,
                mode,
                try_lock,
                ..
            } => (
                hilock_runtime::client::Request::Lock {
                    path: path.clone(),
                    mode,
                    priority: priority.unwrap_or(0),
                    timeout_ms: Some(timeout_ms),
                    // Run by a command under another `hilock lock` (which sets HILOCK_LOCK).
                    nested: std::env::var_os("HILOCK_LOCK").is_some(),
                    try_lock,
                },
                path,
            ),
            LockRequest::Txn {
                locks,
                abort_on_deadlock,
            } => {
                let label = locks.join(" ");
                (
                    hilock_runtime::client::Request::Txn {
                        locks,
                        timeout_ms: Some(timeout_ms),
                        abort_on_deadlock,
                    },
                    label,
                )
            }
        };
        let wait = std::time::Duration::from_millis(timeout_ms).saturating_add(ANSWER_GRACE);
        let asked = hilock_runtime::client::request(&socket, &req);
        tokio::pin!(asked);
        let answered = match tokio::time::timeout(wait, &mut asked).await {
            Ok(r) => Some(r),
            // The bound passed — perhaps while this process was stopped (SIGSTOP) and the
            // node's answer waited in the socket: read what is there before giving up.
            Err(_) => tokio::time::timeout(LATE_READ, &mut asked).await.ok(),
        };
        let (reply, stream) = answered.ok_or_else(|| {
            format!(
                "no answer from the node at {} within {wait:?}",
                socket.display()
            )
        })??;
        if !reply.ok && reply.busy {
            // `--try` refused: one line, the command does not run.
            eprintln!(
                "hilock: {}; the command did not run",
                reply.error.unwrap_or_else(|| format!("busy: {path}"))
            );
            return Ok(std::process::ExitCode::from(EXIT_BUSY));
        }
        if !reply.ok {
            return Err(reply.error.unwrap_or_else(|| "lock refused".into()));
        }
        let value_out = if writes_value {
            // In a directory of its own that only this user may enter, under a name no one
            // can guess: nobody else can plant the value, or a link, in its place.
            let dir = std::env::temp_dir().join(format!(
                "hilock-value-{}-{:016x}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
                .create(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            Some(dir.join("value"))
        } else {
            None
        };
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
            value: reply.value.clone(),
            value_out,
            signal_waiters,
            early_blocking: None,
            succeeded: false,
            grace_ms: kill_grace_ms,
        };
        crate::run_under_lock::run(command, &path, reply.fence, grace, &mut watch).await
    })
}

/// A current-thread runtime: `hilock lock` spawns the command from this (the main) thread,
/// whose end is what the parent-death signal of the command waits for.
pub(crate) fn current_thread() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))
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
    /// The lock value block of the hold in hex, empty if not valid (`spec/SPEC.md` 1.15).
    value: Option<String>,
    /// A W hold: the file the command may write a new value block to, in a directory of
    /// its own (removed with the watch).
    value_out: Option<std::path::PathBuf>,
    /// The command exited 0: only then is the value block it left written.
    succeeded: bool,
    /// `--kill-grace-ms`: the node gives the command as long between SIGTERM and SIGKILL
    /// when it stops (at most `client::MAX_STOP_GRACE`).
    grace_ms: u64,
    /// `--signal-waiters`: a blocking notification from the node (`spec/SPEC.md` 1.16)
    /// becomes SIGUSR1 to the command's group; without it the line is ignored.
    signal_waiters: bool,
    /// A blocking notification that came before the node's answer to the group's
    /// registration (a waiter queued before the grant, Rule 8.2): the command gets it in
    /// `HILOCK_BLOCKING` as it starts ([`Watch::start_env`]).
    early_blocking: Option<(String, u8)>,
}

impl Drop for NodeWatch {
    /// The value file's directory goes with the hold, whatever the command left in it.
    fn drop(&mut self) {
        if let Some(dir) = self.value_out.as_ref().and_then(|f| f.parent()) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Watch for NodeWatch {
    fn scratch(&self) -> Option<&std::path::Path> {
        self.value_out.as_ref().and_then(|f| f.parent())
    }

    async fn started(&mut self, pgid: i32) -> Result<(), String> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        // Register the group with the node and wait for its answer.
        let mut line = serde_json::to_vec(&hilock_runtime::client::Request::Child {
            pgid,
            grace_ms: Some(self.grace_ms),
        })
        .map_err(|e| e.to_string())?;
        line.push(b'\n');
        // A connection the node closed (a write refused, a read failed) is a node that
        // stops: said so, as an answer of its that says it gave the lock up.
        let closed =
            |e: std::io::Error| format!("the node closed the connection ({e}): is it stopping?");
        let registered = async {
            self.w.write_all(&line).await.map_err(closed)?;
            loop {
                let mut answer = String::new();
                self.r.read_line(&mut answer).await.map_err(closed)?;
                let a: hilock_runtime::client::Reply = serde_json::from_str(answer.trim_end())
                    .map_err(|_| "the node closed the connection: is it stopping?".to_string())?;
                if a.ok && a.lease_until_ms.is_some() {
                    // A lease renewal, not the answer.
                    self.lease = lease_deadline(&a);
                    continue;
                }
                if let (true, Some(mode)) = (a.ok && !a.lost, a.blocking.clone()) {
                    // A waiter already queued when the lock was granted: the node tells
                    // at once, maybe before it answers the registration (once per hold).
                    self.early_blocking
                        .get_or_insert((mode, a.blocking_priority.unwrap_or(0)));
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

    /// A waiter already queued at the grant is told in `HILOCK_BLOCKING` (its mode): a
    /// SIGUSR1 at the command's start would come before it could trap it.
    fn start_env(&mut self) -> Vec<(&'static str, String)> {
        match self.early_blocking.take() {
            Some((mode, _)) if self.signal_waiters => vec![("HILOCK_BLOCKING", mode)],
            _ => Vec::new(),
        }
    }

    async fn next(&mut self) -> Event {
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
                            let parsed = serde_json::from_str::<hilock_runtime::client::Reply>(&text).ok();
                            if let Some(p) = parsed.as_ref().filter(|p| p.ok && !p.lost) {
                                // A conflicting request waits (`spec/SPEC.md` 1.16).
                                if let Some(mode) = p.blocking.clone() {
                                    if self.signal_waiters {
                                        return Event::Blocking(mode, p.blocking_priority.unwrap_or(0));
                                    }
                                    continue;
                                }
                                // A renewal of the node's lease.
                                if p.lease_until_ms.is_some() {
                                    self.lease = lease_deadline(p);
                                    return Event::Renewed;
                                }
                                continue;
                            }
                            let why = parsed.as_ref().and_then(|r| r.error.clone()).unwrap_or(text);
                            return if parsed.is_some_and(|p| p.lease_lost) {
                                Event::Lost(EXIT_LEASE_LOST, why, cap)
                            } else {
                                Event::Lost(EXIT_LOCK_LOST, why, None)
                            };
                        }
                        // The rest of a line comes with the next read (or its end).
                        Ok(n) if n > 0 => continue,
                        _ => return Event::Lost(
                            EXIT_NODE_GONE,
                            format!("lock on {path} lost: the connection to the node closed (node stopped or crashed)"),
                            None,
                        ),
                    }
                }
                _ = tokio::time::sleep_until(lease_end.unwrap_or_else(tokio::time::Instant::now)), if lease_end.is_some() => {
                    // The node did not renew its lease in time (paused, hung, or cut off
                    // from etcd), or this process did not run to hear of it: the command
                    // must be gone within the lease's grace.
                    let late = lease_end.map_or(std::time::Duration::ZERO, |e| {
                        tokio::time::Instant::now().saturating_duration_since(e)
                    });
                    let why = if late > WRAPPER_LATE {
                        format!(
                            "lock on {path} lost: this hilock lock process did not run for \
                             {late:.1?} past the end of the node's lease (it was paused or \
                             starved), so it could not pass the node's renewals on; the \
                             command's watchdog killed it"
                        )
                    } else {
                        format!(
                            "lock on {path} lost: the node did not renew the hold's lease in \
                             time (the node is paused or hung, or cut off from etcd)"
                        )
                    };
                    return Event::Lost(EXIT_LEASE_LOST, why, cap);
                }
            }
        }
    }

    /// The lease's end plus half its grace: when the wrapper's own SIGKILL comes at the
    /// latest after an unrenewed lease (`docs/faults.md`, "With etcd membership").
    fn kill_by(&self) -> Option<tokio::time::Instant> {
        self.lease.map(|(end, grace)| end + grace / 2)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = Vec::new();
        if let Some(v) = &self.value {
            env.push(("HILOCK_VALUE", v.clone()));
        }
        if let Some(f) = &self.value_out {
            env.push(("HILOCK_VALUE_OUT", f.display().to_string()));
        }
        env
    }

    fn ended(&mut self, success: bool) {
        self.succeeded = success;
    }

    async fn release(&mut self) {
        use tokio::io::AsyncWriteExt;
        // A new value block the command left (hex), checked here so that a bad one is
        // reported to the user; the node writes it before it releases. Only a command that
        // exited 0 writes one: a failed or killed command's update may be half done.
        let succeeded = self.succeeded;
        let value = self.value_out.as_ref().and_then(|f| {
            let text = match read_value_out(f) {
                Ok(None) => return None,
                Ok(Some(_)) if !succeeded => {
                    eprintln!(
                        "hilock: the command failed: the value block it left was not written"
                    );
                    return None;
                }
                Ok(Some(text)) if text.trim().is_empty() => {
                    eprintln!(
                        "hilock: {} is empty: the value block was not written",
                        f.display()
                    );
                    return None;
                }
                Ok(Some(text)) => text,
                Err(e) => {
                    eprintln!(
                        "hilock: {}: the value block was not written: {e}",
                        f.display()
                    );
                    return None;
                }
            };
            match hilock_runtime::client::parse_value_hex(&text) {
                Ok(_) => Some(text.trim().to_string()),
                Err(e) => {
                    eprintln!(
                        "hilock: {}: the value block was not written: {e}",
                        f.display()
                    );
                    None
                }
            }
        });
        let release = hilock_runtime::client::Request::Release { value };
        if let Ok(mut rel) = serde_json::to_vec(&release) {
            rel.push(b'\n');
            let _ = self.w.write_all(&rel).await;
        }
        let _ = self.w.shutdown().await;
    }
}

/// The most of a `HILOCK_VALUE_OUT` file read: 64 hex digits and room for whitespace.
const VALUE_OUT_MAX: u64 = 4096;

/// The value block a command left in `f` (`HILOCK_VALUE_OUT`, `docs/cli.md`): `None` if it
/// left no file. Only a regular file is read, and at most [`VALUE_OUT_MAX`] bytes of it: a
/// FIFO would hold the release (and the lock) for ever and a link to a device could be
/// endless, so a link is not followed and anything but a regular file is refused; the
/// open does not wait.
fn read_value_out(f: &std::path::Path) -> Result<Option<String>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(f)
    {
        Ok(file) => file,
        // No file: the command wrote no value.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("a symbolic link, not a regular file".into())
        }
        Err(e) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut text = String::new();
    file.take(VALUE_OUT_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > VALUE_OUT_MAX {
        return Err(format!(
            "more than {VALUE_OUT_MAX} bytes (a value block is at most 64 hex digits)"
        ));
    }
    Ok(Some(text))
}

/// The ring client holds the lock (`engine = "ring"`): it checks it while the command runs
/// ([`hilock_runtime::ring::Held`]) and unlocks it at the end.
struct RingWatch(hilock_runtime::ring::Held, Option<String>);

impl Watch for RingWatch {
    async fn started(&mut self, _: i32) -> Result<(), String> {
        Ok(())
    }

    async fn next(&mut self) -> Event {
        match self.0.lost().await {
            hilock_runtime::ring::Loss::Taken(why) | hilock_runtime::ring::Loss::Released(why) => {
                Event::Lost(EXIT_LOCK_LOST, why, None)
            }
            hilock_runtime::ring::Loss::Unreachable(why) => Event::Lost(EXIT_NODE_GONE, why, None),
        }
    }

    /// A ring client holds no lease: its lock passes on only with its consent (or to a
    /// client with its id).
    fn kill_by(&self) -> Option<tokio::time::Instant> {
        None
    }

    async fn release(&mut self) {
        if let Err(e) = self.0.release().await {
            self.1 = Some(e.to_string());
        }
    }
}

/// The exit code when the command ran but the ring did not answer its unlock: the key
/// stays locked by this client id until it is taken over.
const EXIT_NOT_RELEASED: u8 = 1;

/// How long `hilock lock` on a ring waits for the answer to the unlock it sends after a
/// lock it gave up ([`hilock_runtime::ring::RingClient::give_up`]).
const GIVE_UP: std::time::Duration = std::time::Duration::from_secs(1);

/// How often `hilock lock` on a ring asks its held lock again.
const RING_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// `hilock lock PATH W -- CMD` with a ring configuration: client `client_id` of the ring
/// asks for the lock of PATH's placement key (routed by the kernel's lookup with the
/// membership service's view, or the one etcd holds with `membership = "etcd"`, redirected on an
/// old view) until it is granted or
/// `timeout_ms` passed, reads the hold from the key's primary (its fencing token goes to
/// the command as HILOCK_FENCE), then runs the command under it
/// ([`crate::run_under_lock::run`]), reading
/// the lock's entry every [`RING_CHECK`] without taking it again (exit 76 when it is no
/// longer this hold — another client holds it, or it was unlocked —, 75 when the ring
/// does not answer within the timeout), and unlocks at the end. The ring's locks are
/// exclusive: a mode other than W is refused.
///
/// Another running client with the same id holding the lock (the ring answers InUse): exit
/// [`EXIT_ID_IN_USE`] with one line, the command not run. With `--take-over` a hold of the
/// id's is taken over instead: the operator vouches that the run that left it is dead.
#[allow(clippy::too_many_arguments)]
fn ring_lock(
    cfg: &hilock_runtime::Config,
    file: &std::path::Path,
    path: &str,
    mode: &str,
    command: &[String],
    ring_id: RingId,
    timeout_ms: u64,
    kill_grace_ms: u64,
) -> Result<ExitCode, String> {
    let id = ring_id
        .client_id
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
    let (addrs, _) = hilock_runtime::ring::slot_addrs(cfg)?;
    let limit = std::time::Duration::from_millis(timeout_ms);
    let grace = std::time::Duration::from_millis(kill_grace_ms);
    current_thread()?.block_on(async {
        let connect = async {
            let (views, source) = hilock_runtime::ring::client_views(cfg).await?;
            hilock_runtime::ring::RingClient::connect_to(id, std::sync::Arc::new(addrs), views)
                .await
                .map_err(|e| format!("{source}: {e}"))
        };
        // Getting a view and each exchange of the held lock (its checks, its unlock) are
        // given at least a second: `--timeout-ms 0` bounds the wait for the lock only.
        let answer = limit.max(ANSWER_GRACE);
        let mut client = tokio::time::timeout(answer, connect).await.map_err(|_| {
            let from = match hilock_runtime::ring::slot_addrs(cfg) {
                Ok((_, m)) if m != hilock_runtime::config::NO_SERVICE => {
                    format!(" from its membership service at {m} (is it running?)")
                }
                _ => " from etcd".to_string(),
            };
            format!("no view of the ring within {answer:?}{from}")
        })??;
        let mut signals = hilock_runtime::proc::StopSignals::new()?;
        let acquiring = async {
            if ring_id.take_over {
                client.acquire_taking_over(path, limit).await
            } else {
                client.acquire(path, limit).await
            }
        };
        // Interrupted while the request waits: the lock is given up, and so is anything
        // of it the ring may still grant (an unlock sent after it), before the exit.
        let acquired = tokio::select! {
            r = acquiring => Ok(r),
            signo = signals.recv() => Err(signo?),
        };
        let take_over = || {
            format!(
                "hilock lock --config {} --client-id {id} --take-over {} W -- true",
                hilock_spec::shell_word(&file.to_string_lossy()),
                hilock_spec::shell_word(path)
            )
        };
        let acquired = match acquired {
            Ok(r) => r,
            Err(signo) => {
                if let Err(e) = client.give_up(GIVE_UP).await {
                    eprintln!(
                        "hilock: lock on {path} given up (signal {signo}), but the ring did not \
                         answer its unlock ({e}): the key may stay held by client id {id} \
                         until it is taken over ({})",
                        take_over()
                    );
                }
                return Ok(ExitCode::from(128 + signo));
            }
        };
        if acquired.is_err() {
            if let Err(e) = client.give_up(GIVE_UP).await {
                let why = acquired.err().map(|e| e.to_string()).unwrap_or_default();
                return Err(format!(
                    "lock on {path}: the ring did not answer ({why}), nor the unlock sent \
                     after it ({e}): the key may stay held by client id {id} until it is \
                     taken over ({})",
                    take_over()
                ));
            }
        }
        match acquired {
            Ok(true) => {}
            Err(hilock_runtime::ring::ClientError::IdInUse { .. }) => {
                eprintln!(
                    "hilock: lock on {path}: another process with client id {id} holds it; \
                     give each running client its own --client-id (if that process is dead, \
                     run again with --take-over); the command did not run"
                );
                return Ok(ExitCode::from(EXIT_ID_IN_USE));
            }
            Ok(false) => {
                return Err(format!(
                    "lock on {path} not granted within {timeout_ms} ms: another client holds it"
                ))
            }
            Err(
                e @ (hilock_runtime::ring::ClientError::Refused { .. }
                | hilock_runtime::ring::ClientError::TableFull { .. }),
            ) => return Err(format!("lock on {path}: {e}")),
            Err(e) => return Err(format!("lock on {path}: the ring did not answer ({e})")),
        }
        let grant = match client.grant(path).await {
            Ok(g) => g,
            Err(e) => {
                let _ = client.unlock(path).await;
                return Err(format!("lock on {path}: granted, but {e}"));
            }
        };
        let mut watch = RingWatch(
            hilock_runtime::ring::Held::start(client, path.to_string(), grant, RING_CHECK, answer),
            None,
        );
        let r =
            crate::run_under_lock::run(command, path, Some(grant.fence), grace, &mut watch).await;
        if r.is_err() {
            watch.release().await;
        }
        match (r, watch.1) {
            // A key left locked for nobody must not look like success.
            (Ok(_), Some(e)) => {
                eprintln!(
                    "hilock: the command ended but the ring did not answer the \
                     unlock of {path} ({e}): the key stays locked by client id {id} \
                     until it is released or taken over ({})",
                    take_over()
                );
                Ok(ExitCode::from(EXIT_NOT_RELEASED))
            }
            (r, _) => r,
        }
    })
}
