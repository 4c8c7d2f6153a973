//! Running a command under a held lock: the one wrapper of every engine's `lock` command
//! (`hilock lock` on the token, agents and ring engines, `hilock bakery lock`).
//!
//! The command runs in its own process group with SIGKILL as its parent-death signal,
//! started as `hilock exec-gated FD -- CMD…`, which executes CMD only once the lock's holder
//! knows the group. The signals that would stop the wrapper are forwarded to the group. When
//! the command exits, what is left of its group is killed and the lock released (exit: the
//! command's status, 128+N for signal N). When the lock is lost first, the group is killed
//! (SIGTERM, SIGKILL after the grace) and the exit code says why ([`EXIT_NODE_GONE`],
//! [`EXIT_LOCK_LOST`], [`EXIT_LEASE_LOST`]). `HILOCK_FENCE` is the hold's fencing token,
//! `HILOCK_LOCK` the lock's path, and the holder may add more ([`Watch::env`]: the token
//! engine's lock value block, `HILOCK_VALUE` and `HILOCK_VALUE_OUT`).
//!
//! **The lease watchdog.** A paused, hung or killed wrapper cannot kill anything, so the
//! wrapper also starts `hilock lock-watchdog PGID` in a process group of its own, before
//! CMD runs. It holds the command's group and a deadline ([`Watch::kill_by`]: the end of
//! the hold's lease less a margin, moved by every renewal the wrapper writes to it); when the
//! deadline passes without a renewal, or the wrapper's end of the pipe closes without a
//! `stop` (the wrapper died), it SIGKILLs the command's group. A hold without a lease (the
//! ring's) has no deadline: the watchdog then only outlives a killed wrapper.

use std::process::ExitCode;
use std::time::Duration;

/// The connection to the node closed while the command ran (the node stopped or crashed;
/// ring: the ring did not answer within the timeout, or its membership service went
/// away); the command's group was killed.
pub const EXIT_NODE_GONE: u8 = 75;

/// The lock was lost (the node reported it; ring: the entry no longer shows this hold);
/// the command's group was killed.
pub const EXIT_LOCK_LOST: u8 = 76;

/// The hold's lease was lost, or its end passed without a renewal (the node's etcd lease;
/// the bakery's lease or its client id's registration); the command's group was killed.
pub const EXIT_LEASE_LOST: u8 = 77;

/// `hilock bakery lock`: the client id is in use by another running client (or by an
/// earlier run whose registration has not yet run out); `hilock lock` on a ring: another
/// process with the client id (a running one, or a killed run: `--take-over`) holds the
/// lock. The command did not run.
pub const EXIT_ID_IN_USE: u8 = 78;

/// `hilock lock --try`: the lock could not be taken without waiting (it is busy); the
/// command did not run and nothing of the request was left at any node.
pub const EXIT_BUSY: u8 = 79;

/// What the holder of the lock says while the command runs.
pub(crate) enum Event {
    /// The lock is lost: the exit code, the line to print and a bound on the kill grace.
    Lost(u8, String, Option<Duration>),
    /// A renewal moved [`Watch::kill_by`].
    Renewed,
    /// A request of another node for this mode (with this priority) waits for the hold,
    /// and the command asked to be told (`hilock lock --signal-waiters`, `spec/SPEC.md`
    /// 1.16): the command's process group gets SIGUSR1.
    Blocking(String, u8),
}

/// What holds the lock while the command runs: the node (token and agents engines), the
/// ring client, or the bakery client.
pub(crate) trait Watch {
    /// The command's process group `pgid` exists and has not started yet: make the lock's
    /// holder know it (the node kills the group when it loses the lock).
    async fn started(&mut self, pgid: i32) -> Result<(), String>;
    /// Waits until the lock is lost or renewed. Cancel-safe: the caller's `select!` drops it
    /// and calls it again.
    async fn next(&mut self) -> Event;
    /// When the command must be dead unless a renewal moves this: the watchdog's deadline.
    /// `None`: the hold has no lease.
    fn kill_by(&self) -> Option<tokio::time::Instant>;
    /// The command ended, with exit status 0 or not (before [`Watch::release`]).
    fn ended(&mut self, success: bool) {
        let _ = success;
    }
    /// The command ended: release the lock.
    async fn release(&mut self);
    /// Further environment of the command (none unless the holder says).
    fn env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Environment the holder learnt after [`Watch::started`], given to the command as it
    /// starts (after its spawn, before it runs).
    fn start_env(&mut self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// A directory of the hold's own (the token engine's `HILOCK_VALUE_OUT` directory)
    /// that the holder removes at its end, and the watchdog removes if the wrapper dies.
    fn scratch(&self) -> Option<&std::path::Path> {
        None
    }
}

/// Kill every process of group `pgid`: SIGTERM, then SIGKILL after `grace`; reap `child`
/// (the group's leader) on the way. Returns once no process of the group is left (or
/// after a further 10 s of SIGKILL, which only an unkillable process survives).
async fn kill_group(pgid: i32, child: &mut tokio::process::Child, grace: Duration) {
    use hilock_runtime::proc::{signal_group, wait_group_gone};
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
    if hilock_runtime::proc::group_alive(pgid) {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    wait_group_gone(pgid, Instant::now() + Duration::from_secs(10)).await;
}

/// How a command run under a lock ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It exited with this status (128+N if signal N killed it).
    Exited(u8),
    /// The lock was lost first and its group killed; the exit code says why.
    Lost(u8),
}

impl Outcome {
    /// The wrapper's exit code.
    pub(crate) fn code(self) -> ExitCode {
        match self {
            Outcome::Exited(c) | Outcome::Lost(c) => ExitCode::from(c),
        }
    }

    /// In words, for a line on stderr.
    pub(crate) fn describe(self) -> String {
        match self {
            Outcome::Exited(c) if c > 128 => format!("killed by signal {}", c - 128),
            Outcome::Exited(c) => format!("exit status {c}"),
            Outcome::Lost(c) => format!("the hold was lost, exit {c}"),
        }
    }
}

/// Runs `command` under a held lock (`path`, `fence`) as the module's text says; `grace`
/// is the time between SIGTERM and SIGKILL. Call it on a current-thread runtime: the
/// command's parent-death signal is tied to the thread that starts it.
pub(crate) async fn run(
    command: &[String],
    path: &str,
    fence: Option<u64>,
    grace: Duration,
    watch: &mut impl Watch,
) -> Result<ExitCode, String> {
    run_to_end(command, path, fence, grace, watch)
        .await
        .map(Outcome::code)
}

/// [`run`], saying how the command ended.
pub(crate) async fn run_to_end(
    command: &[String],
    path: &str,
    fence: Option<u64>,
    grace: Duration,
    watch: &mut impl Watch,
) -> Result<Outcome, String> {
    use tokio::signal::unix::{signal, SignalKind};
    // From now on the signals that would stop the wrapper go to the command's group; the
    // wrapper stays to release the lock when the command is gone.
    let (sig_tx, mut sig_rx) = tokio::sync::mpsc::unbounded_channel();
    for s in hilock_runtime::proc::FORWARDED {
        let mut sig =
            signal(SignalKind::from_raw(s)).map_err(|e| format!("cannot catch signal {s}: {e}"))?;
        let tx = sig_tx.clone();
        tokio::spawn(async move { while sig.recv().await.is_some() && tx.send(s).is_ok() {} });
    }
    // The command starts as `hilock exec-gated FD -- CMD…` in its own process group; it
    // executes CMD only after the lock's holder and the watchdog know the group, so no part
    // of CMD can run under a lock that holder would release without killing it.
    let (gate_r, mut gate_w) =
        hilock_runtime::proc::pipe().map_err(|e| format!("cannot create a pipe: {e}"))?;
    let gate_fd = std::os::fd::AsRawFd::as_raw_fd(&gate_r);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find hilock itself: {e}"))?;
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.arg("exec-gated")
        .arg(gate_fd.to_string())
        .arg("--")
        .args(command)
        .env("HILOCK_LOCK", path)
        // A lock's value block is the holder's to give (an outer lock's is not this one's).
        .env_remove("HILOCK_VALUE")
        .env_remove("HILOCK_VALUE_OUT")
        // Nor is an outer lock's fencing token: a hold without one (`--txn`) passes none.
        .env_remove("HILOCK_FENCE")
        .env_remove("HILOCK_BLOCKING")
        .envs(watch.env());
    // The fencing token of this hold, for the command to pass to a storage service.
    if let Some(fence) = fence {
        cmd.env("HILOCK_FENCE", fence.to_string());
    }
    hilock_runtime::proc::own_group_with_parent_death(&mut cmd, Some(gate_fd));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", command[0]))?;
    drop(gate_r);
    let pgid = child.id().ok_or("the command exited before it started")? as i32;
    if let Err(e) = watch.started(pgid).await {
        kill_group(pgid, &mut child, grace).await;
        return Err(e);
    }
    let mut dog = match Watchdog::start(&exe, pgid, watch.kill_by(), watch.scratch()).await {
        Ok(d) => d,
        Err(e) => {
            kill_group(pgid, &mut child, grace).await;
            return Err(e);
        }
    };
    let mut gate = b"x".to_vec();
    for (k, v) in watch.start_env() {
        gate.extend_from_slice(format!("{k}={v}\n").as_bytes());
    }
    if let Err(e) = std::io::Write::write_all(&mut gate_w, &gate) {
        kill_group(pgid, &mut child, grace).await;
        return Err(if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The command's process died before it read its go-ahead: its group was
            // killed, which the node does when it gives the lock up (it is stopping).
            "the command was killed before it started (the node gave the lock up: is it \
             stopping?); it did not run"
                .into()
        } else {
            format!("cannot start the command: {e}")
        });
    }
    drop(gate_w);
    let lost = loop {
        tokio::select! {
            // The holder's word first: a node writes "lock lost" before it kills the group
            // (a stopping node); when both are ready, the exit code says the lock was lost,
            // not that the command was killed.
            biased;
            ev = watch.next() => match ev {
                Event::Lost(code, why, cap) => break (code, why, cap),
                Event::Blocking(mode, prio) => {
                    tracing::debug!(%path, %mode, prio, "a conflicting request waits: SIGUSR1 to the command");
                    let _ = hilock_runtime::proc::signal_group(pgid, libc::SIGUSR1);
                }
                Event::Renewed => {
                    if let Err(e) = dog.arm(watch.kill_by()).await {
                        break (
                            EXIT_LEASE_LOST,
                            format!("lock on {path}: the lease watchdog is gone ({e})"),
                            None,
                        );
                    }
                }
            },
            st = child.wait() => {
                let st = st.map_err(|e| format!("cannot wait for the command: {e}"))?;
                // Nothing of the command may outlive the lock.
                if hilock_runtime::proc::group_alive(pgid) {
                    kill_group(pgid, &mut child, grace).await;
                }
                dog.stop().await;
                watch.ended(st.success());
                watch.release().await;
                use std::os::unix::process::ExitStatusExt;
                return Ok(Outcome::Exited(match (st.code(), st.signal()) {
                    (Some(c), _) => u8::try_from(c).unwrap_or(1),
                    (None, Some(s)) => 128u8.saturating_add(s as u8),
                    (None, None) => 1,
                }));
            }
            Some(s) = sig_rx.recv() => {
                let _ = hilock_runtime::proc::signal_group(pgid, s);
            }
        }
    };
    let (code, why, cap) = lost;
    kill_group(pgid, &mut child, cap.map_or(grace, |c| grace.min(c))).await;
    dog.stop().await;
    eprintln!("hilock: {why}; the command's process group was killed");
    Ok(Outcome::Lost(code))
}

/// The wrapper's end of `hilock lock-watchdog`: its stdin, where each line moves the
/// deadline (`arm MS`, [`hilock_runtime::proc::monotonic`] milliseconds; `none`) or ends
/// the watch (`stop`).
struct Watchdog {
    child: tokio::process::Child,
    input: tokio::process::ChildStdin,
}

impl Watchdog {
    /// Starts the watchdog of group `pgid` with the deadline `kill_by` (and the hold's
    /// `scratch` directory, [`Watch::scratch`]) and waits (at most 5 s) until it runs.
    async fn start(
        exe: &std::path::Path,
        pgid: i32,
        kill_by: Option<tokio::time::Instant>,
        scratch: Option<&std::path::Path>,
    ) -> Result<Watchdog, String> {
        use tokio::io::AsyncBufReadExt;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("lock-watchdog")
            .arg(pgid.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            // Its own group: a stop or Ctrl-C of the wrapper's group does not reach it.
            .process_group(0);
        if let Some(dir) = scratch {
            cmd.arg("--scratch").arg(dir);
        }
        if let Some(at) = kill_by {
            cmd.arg("--deadline-ms")
                .arg(hilock_runtime::proc::instant_to_monotonic_ms(at).to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the lease watchdog: {e}"))?;
        let (Some(input), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the lease watchdog has no pipes".into());
        };
        let mut line = String::new();
        let ready = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::BufReader::new(out).read_line(&mut line),
        )
        .await;
        if !matches!(ready, Ok(Ok(_)) if line.trim_end() == "ready") {
            let _ = child.start_kill();
            return Err("the lease watchdog did not start".into());
        }
        Ok(Watchdog { child, input })
    }

    /// Moves the deadline to `kill_by`.
    async fn arm(&mut self, kill_by: Option<tokio::time::Instant>) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let line = match kill_by {
            Some(at) => format!(
                "arm {}\n",
                hilock_runtime::proc::instant_to_monotonic_ms(at)
            ),
            None => "none\n".into(),
        };
        self.input.write_all(line.as_bytes()).await
    }

    /// Ends the watch (the command's group is gone) and reaps the watchdog.
    async fn stop(mut self) {
        use tokio::io::AsyncWriteExt;
        let _ = self.input.write_all(b"stop\n").await;
        drop(self.input);
        if tokio::time::timeout(Duration::from_secs(1), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
        }
    }
}

/// `hilock lock-watchdog PGID [--deadline-ms MS] [--scratch DIR]`: SIGKILL process group
/// PGID when the deadline ([`hilock_runtime::proc::monotonic`] milliseconds) passes, or
/// when stdin ends without `stop` (the wrapper died); in that second case also remove DIR,
/// the hold's directory the dead wrapper can no longer remove (its value file may hold a
/// value block that was never written). Prints `ready` once it watches.
pub fn watchdog(
    pgid: i32,
    deadline_ms: Option<u64>,
    scratch: Option<&std::path::Path>,
) -> ExitCode {
    use std::io::{BufRead, Write};
    use std::sync::mpsc::RecvTimeoutError;
    if pgid <= 1 {
        eprintln!("hilock: lock-watchdog: bad process group {pgid}");
        return ExitCode::from(2);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut deadline = deadline_ms.map(Duration::from_millis);
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ready").and_then(|_| out.flush());
    }
    let kill = || {
        let _ = hilock_runtime::proc::signal_group(pgid, libc::SIGKILL);
        ExitCode::SUCCESS
    };
    loop {
        let msg = match deadline {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(d) => {
                let now = hilock_runtime::proc::monotonic();
                if now >= d {
                    return kill();
                }
                rx.recv_timeout(d - now)
            }
        };
        match msg {
            Ok(line) => {
                let mut w = line.split_ascii_whitespace();
                match (w.next(), w.next().map(str::parse::<u64>)) {
                    (Some("stop"), _) => return ExitCode::SUCCESS,
                    (Some("none"), _) => deadline = None,
                    (Some("arm"), Some(Ok(ms))) => deadline = Some(Duration::from_millis(ms)),
                    // Nothing else is written: the wrapper is not itself.
                    _ => return kill(),
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The wrapper is gone without a `stop`: its command must not outlive it, nor
            // its directory.
            Err(RecvTimeoutError::Disconnected) => {
                let code = kill();
                if let Some(dir) = scratch.filter(|d| is_value_dir(d)) {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return code;
            }
        }
    }
}

/// Whether `dir` is a directory (not a link) that `hilock lock` made for a value file:
/// `hilock-value-…` in the temporary directory. The watchdog removes nothing else.
fn is_value_dir(dir: &std::path::Path) -> bool {
    let named = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("hilock-value-"));
    named
        && dir.parent() == Some(std::env::temp_dir().as_path())
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// `hilock exec-gated FD -- CMD…`: wait for one byte on FD, then become CMD. If FD ends
/// without a byte, the wrapper is gone: exit without running CMD.
pub fn exec_gated(fd: i32, command: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    // The gate's byte, then `NAME=value` lines the wrapper learnt once the group was
    // registered (`Watch::start_env`).
    let late: Vec<(String, String)> = match hilock_runtime::proc::wait_gate(fd) {
        Ok(Some(got)) => String::from_utf8_lossy(&got[1..])
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        Ok(None) => {
            eprintln!("hilock: the lock wrapper went away before the command started");
            return ExitCode::from(EXIT_NODE_GONE);
        }
        Err(e) => {
            eprintln!("hilock: cannot wait to start the command: {e}");
            return ExitCode::from(2);
        }
    };
    let e = std::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(late)
        .exec();
    eprintln!("hilock: cannot run {}: {e}", command[0]);
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
