//! Process groups for `hilock lock -- CMD`: the command runs in its own process group with
//! the parent-death signal set, and whoever is alive to see the lock go (the wrapper, or
//! the node when the wrapper itself died) kills the whole group and waits until no process
//! of it is left before the lock is released.
//!
//! Linux only: the parent-death signal is `prctl(PR_SET_PDEATHSIG)` and "is any process of
//! the group left" is a scan of `/proc` (zombies do not count: they run nothing, and a
//! zombie whose parent died may wait for a reaper that never comes in a container).
//!
//! Also the node's open-file limit ([`open_files`], [`raise_open_files`]).
//!
//! This is the one place of the runtime with `unsafe` code: `pre_exec` (the hook that runs
//! in the forked child before `exec`) is an unsafe API, and the `libc` calls in it
//! (`prctl`, `getppid`, `fcntl`, all async-signal-safe) have no safe std equivalent; nor
//! have `getrlimit` and `setrlimit`, nor `flock` at the workspace's minimum Rust
//! ([`try_lock_exclusive`]).

use std::time::{Duration, Instant};

/// Signals the wrapper forwards to the command's group (the command is not in the
/// terminal's foreground group, so Ctrl-C reaches the wrapper only).
pub const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// `(state, parent pid, process group)` of `pid` from `/proc/PID/stat`, or `None` if the
/// process does not exist (or `/proc` cannot be read).
pub fn stat(pid: i32) -> Option<(char, i32, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// The processes (not zombies) whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            matches!(stat(pid), Some((state, _, pgrp)) if pgrp == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// Whether any process of group `pgid` is still alive (zombies excepted).
pub fn group_alive(pgid: i32) -> bool {
    !group_members(pgid).is_empty()
}

/// Send `sig` to every process of group `pgid`. `Ok(false)`: the group is gone already.
pub fn signal_group(pgid: i32, sig: i32) -> std::io::Result<bool> {
    if pgid <= 1 {
        return Err(std::io::Error::other(format!(
            "refusing to signal process group {pgid}"
        )));
    }
    // SAFETY: killpg has no memory-safety preconditions; a bad group is an error code.
    #[allow(unsafe_code)]
    let r = unsafe { libc::killpg(pgid, sig) };
    done_unless(r, libc::ESRCH)
}

/// A libc call's result `r`: `Ok(true)` if it succeeded, `Ok(false)` if it failed with
/// `errno` `no` (the expected "not now"), the error otherwise.
fn done_unless(r: libc::c_int, no: libc::c_int) -> std::io::Result<bool> {
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(no) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Takes an exclusive advisory lock (`flock(2)`) on `file` without waiting: `Ok(true)` if
/// taken, `Ok(false)` if another open file description holds it (another process, or
/// another open of the file). The system drops the lock when the description is closed,
/// so when its process ends. (`File::try_lock` does this from Rust 1.89, above the
/// workspace's minimum.)
pub fn try_lock_exclusive(file: &std::fs::File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock has no memory-safety preconditions; the descriptor is open for as long
    // as `file` is borrowed.
    #[allow(unsafe_code)]
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    done_unless(r, libc::EWOULDBLOCK)
}

/// Wait until no process of group `pgid` is alive, polling `/proc` every few milliseconds;
/// `false` if some are still alive at `deadline`.
pub async fn wait_group_gone(pgid: i32, deadline: Instant) -> bool {
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Make `cmd` start its child in a new process group (the child's pid is the group id)
/// with SIGKILL as its parent-death signal, and keep `keep_fd`, if any, open across `exec`
/// (it is the gate the child waits on, see `hilock lock`; `hilock bakery lock` has none).
///
/// The parent-death signal is tied to the thread that forks: call `spawn` from a thread
/// that lives as long as the wrapper (the wrapper uses a current-thread runtime, so every
/// spawn happens on its main thread).
pub fn own_group_with_parent_death(cmd: &mut tokio::process::Command, keep_fd: Option<i32>) {
    // SAFETY: getpid has no preconditions.
    #[allow(unsafe_code)]
    let parent = unsafe { libc::getpid() };
    cmd.process_group(0);
    // SAFETY: the hook runs in the forked child before exec; it only makes
    // async-signal-safe system calls (prctl, getppid, fcntl) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then no signal will come.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "the hilock wrapper died while starting the command",
                ));
            }
            if let Some(fd) = keep_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// A pipe, both ends close-on-exec: `(read end, write end)`. (`std::io::pipe` needs Rust
/// 1.87; the workspace's MSRV is 1.85.)
pub fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    #[allow(unsafe_code)]
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    #[allow(unsafe_code)]
    let (r, w) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    };
    Ok((r, w))
}

/// Waits on the read end `fd` of a start gate: the first byte opens it, and what follows
/// until the writer closes its end (at most 4 KiB) is returned with it; `None` if the
/// writer closed without a byte (it is gone). `fd` is closed when this process executes
/// another program.
pub fn wait_gate(fd: i32) -> std::io::Result<Option<Vec<u8>>> {
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    loop {
        // SAFETY: `b` is a valid, writable buffer of `b.len()` bytes for the whole call.
        #[allow(unsafe_code)]
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        if n == 0 || got.len() + n > 4096 {
            break;
        }
        got.extend_from_slice(&b[..n]);
    }
    // SAFETY: fcntl on a descriptor number has no memory-safety preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Ok((!got.is_empty()).then_some(got))
}

/// The system's monotonic clock (`CLOCK_MONOTONIC`, the clock of [`std::time::Instant`] on
/// Linux): the same for every process of the machine, so a node can hand a deadline to its
/// `hilock lock` wrappers (the end of its etcd lease) that they read on their own.
pub fn monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill; CLOCK_MONOTONIC always
    // exists on Linux.
    #[allow(unsafe_code)]
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_MONOTONIC)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `at` (a local [`tokio::time::Instant`]) as [`monotonic`] time in whole milliseconds,
/// rounded so that it is never later than `at` (0 if `at` has passed long ago).
pub fn instant_to_monotonic_ms(at: tokio::time::Instant) -> u64 {
    // The monotonic clock first: a pause between the two reads makes the result earlier.
    let mono = monotonic();
    let now = tokio::time::Instant::now();
    let t = if at >= now {
        mono + (at - now)
    } else {
        mono.saturating_sub(now - at)
    };
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

/// [`monotonic`] time `ms` as a local [`tokio::time::Instant`], never later than it.
pub fn monotonic_ms_to_instant(ms: u64) -> tokio::time::Instant {
    // The local clock first: a pause between the two reads makes the result earlier.
    let now = tokio::time::Instant::now();
    let mono = monotonic();
    let at = Duration::from_millis(ms);
    if at >= mono {
        now + (at - mono)
    } else {
        now.checked_sub(mono - at).unwrap_or(now)
    }
}

/// Whether `pid` is a live child of `parent` that leads its own process group: what the
/// node checks before it accepts a client's report of its command's group.
pub fn is_group_leader_child_of(pid: i32, parent: i32) -> bool {
    matches!(stat(pid), Some((state, ppid, pgrp)) if ppid == parent && pgrp == pid && state != 'Z')
}

/// The process's open-file limit, `(soft, hard)` (`RLIMIT_NOFILE`; `u64::MAX` for
/// unlimited).
pub fn open_files() -> std::io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for getrlimit to fill.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((r.rlim_cur, r.rlim_max))
}

fn set_open_files(soft: u64, hard: u64) -> std::io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `r` is a valid rlimit; setrlimit only reads it.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Raises the soft open-file limit to the hard one (an unlimited hard limit: to the
/// kernel's `fs.nr_open`, the most a process may have). Returns the soft limit before and
/// after, and the hard limit; the soft limit is left as it was if it cannot be raised.
pub fn raise_open_files() -> std::io::Result<(u64, u64, u64)> {
    let (soft, hard) = open_files()?;
    if soft >= hard {
        return Ok((soft, soft, hard));
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let mut targets = vec![hard];
    if let Some(n) = nr_open.filter(|&n| n < hard && n > soft) {
        targets.push(n);
    }
    for t in targets {
        if set_open_files(t, hard).is_ok() {
            return Ok((soft, t, hard));
        }
    }
    Ok((soft, soft, hard))
}

/// The signals that stop a long-running hilock process (`hilock node`, the ring's
/// membership service and nodes, a waiting `hilock ring join` or `leave`): Ctrl-C
/// (SIGINT), SIGTERM and SIGHUP (a closed terminal, or a supervisor's hang-up), all
/// handled the same way, so that none of them ends the process without its clean stop
/// (`docs/cli.md`, `hilock node`).
pub struct StopSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl std::fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopSignals")
    }
}

impl StopSignals {
    /// Starts listening (from now on the three signals no longer end the process).
    pub fn new() -> Result<StopSignals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            int: signal(SignalKind::interrupt())
                .map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?,
            term: signal(SignalKind::terminate())
                .map_err(|e| format!("cannot wait for SIGTERM: {e}"))?,
            hup: signal(SignalKind::hangup())
                .map_err(|e| format!("cannot wait for SIGHUP: {e}"))?,
        })
    }

    /// Resolves when one of the three arrives, with its number (SIGINT 2, SIGTERM 15,
    /// SIGHUP 1: a process that exits for it says 128 + that number).
    pub async fn recv(&mut self) -> Result<u8, String> {
        tokio::select! {
            _ = self.int.recv() => Ok(2),
            _ = self.term.recv() => Ok(15),
            _ = self.hup.recv() => Ok(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parses_this_process_and_its_group() {
        let me = std::process::id() as i32;
        let (state, ppid, pgrp) = stat(me).expect("own /proc entry");
        assert!(state != 'Z');
        assert!(ppid > 0 && pgrp > 0);
        assert!(group_members(pgrp).contains(&me));
        assert!(stat(-5).is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn monotonic_deadlines_round_trip_never_later() {
        let at = tokio::time::Instant::now() + Duration::from_millis(1500);
        let ms = instant_to_monotonic_ms(at);
        let back = monotonic_ms_to_instant(ms);
        assert!(back <= at, "never later");
        assert!(at - back < Duration::from_millis(5), "{:?}", at - back);
        let past = tokio::time::Instant::now();
        assert!(monotonic_ms_to_instant(instant_to_monotonic_ms(past)) <= past);
        let a = monotonic();
        std::thread::sleep(Duration::from_millis(20));
        assert!(monotonic() - a >= Duration::from_millis(20));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_group_is_killed_and_seen_gone() {
        let (r, _w) = pipe().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&r);
        let mut c = tokio::process::Command::new("sh");
        c.args(["-c", "sleep 30 & sleep 30"]);
        own_group_with_parent_death(&mut c, Some(fd));
        let mut child = c.spawn().unwrap();
        let pid = child.id().unwrap() as i32;
        assert!(is_group_leader_child_of(pid, std::process::id() as i32));
        let t = Instant::now();
        while group_members(pid).len() < 3 {
            assert!(t.elapsed() < Duration::from_secs(5), "both sleeps start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(signal_group(pid, libc::SIGKILL).unwrap());
        let _ = child.wait().await;
        assert!(wait_group_gone(pid, Instant::now() + Duration::from_secs(5)).await);
        assert!(!signal_group(pid, 0).unwrap_or(false) || !group_alive(pid));
        assert!(signal_group(1, libc::SIGKILL).is_err());
    }
}
