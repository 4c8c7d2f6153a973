//! `hilock bakery …`: the bakery lock and work queue over redis-server replicas.

use clap::Subcommand;
use std::process::ExitCode;

use crate::run_under_lock::{Event, Watch, EXIT_ID_IN_USE, EXIT_LEASE_LOST};
use crate::runtime;
use std::time::Duration;

#[allow(clippy::too_many_arguments)]
#[derive(Subcommand, Debug)]
pub enum BakeryCommand {
    /// Hold the bakery lock NAME while a command runs, renewing its lease; the fencing
    /// token (the ticket) is in the command's environment as HILOCK_FENCE. The command runs
    /// as under `hilock lock` (its own process group, a lease watchdog). Exits with the
    /// command's status; 2 (and one line on stderr) if the lock is not granted in time; 77
    /// if its lease runs out while the command runs (the command is killed then); 78 if
    /// another running client holds the client id, or (without --client-id) every id is in
    /// use (the command does not run).
    Lock {
        /// The lock's name.
        name: String,
        /// The redis-server replicas, host:port,... (1 to 7; quorums are majorities).
        #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:6379")]
        replicas: Vec<String>,
        /// This client's id, 1..=31; refused (exit 78) while another running client holds it.
        /// Without it, the first id in a random order that no running client holds is
        /// registered and used.
        #[arg(long, env = "HILOCK_CLIENT_ID")]
        client_id: Option<u16>,
        /// The lease: others pass an entry that stops changing 1.3 leases after they saw it.
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 10000)]
        timeout_ms: u64,
        /// When the command exits leaving processes in its group: how long after SIGTERM
        /// before SIGKILL, in milliseconds.
        #[arg(long, default_value_t = crate::lock::DEFAULT_KILL_GRACE_MS)]
        kill_grace_ms: u64,
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
pub enum QueueCommand {
    /// Enqueue ITEM (any text; one argument, so at most 128 KiB on Linux) in the queue NAME;
    /// prints the item's key.
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
        /// This worker's id, 1..=31; refused (exit 78) while another running worker of
        /// the queue holds it.
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
        /// Give up (exit 2) when no item could be taken for this many milliseconds, or no
        /// majority of the replicas answered for as long (at the start, or when the worker
        /// registers again).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// What `hilock bakery queue work` does besides the command.
#[derive(Clone, Copy, Debug)]
struct WorkLimits {
    /// Stop after this many items.
    max_items: Option<u64>,
    /// Stop when a refresh of the window finds no pending item.
    exit_when_empty: bool,
    /// Give up waiting for the next item after this long.
    wait: Option<Duration>,
}

/// `hilock bakery queue work`: takes items one after the other and runs the command for
/// each as `hilock lock` runs its command (its own process group, the parent-death
/// signal, the lease watchdog, the signals passed on: a killed or stopped worker's command
/// dies before another worker can take its item), with `HILOCK_ITEM` (the payload),
/// `HILOCK_ITEM_KEY` and `HILOCK_FENCE`, renewing the lease while it runs; removes the
/// item when the command exits 0. A command that fails stops the worker with its status
/// (the item is left: another worker takes it over after the lease). A lost lease kills
/// the command, is said on stderr, and the worker goes on with the next item.
async fn work<const N: usize>(
    name: &str,
    addrs: &[String],
    opts: hilock_runtime::bakery::Options,
    limits: WorkLimits,
    command: &[String],
) -> Result<ExitCode, String> {
    use hilock_runtime::bakery::ident::{agree_lease, Incarnation, Registration};
    if command.is_empty() {
        return Err("no command given".into());
    }
    let prefix = format!("hilock:bakery:q:{name}");
    // SIGINT, SIGTERM and SIGHUP end the worker while it waits (for the replicas, for an
    // item, or to register again): once a command ran, its signal handling (passed on to
    // the group) stays installed in this process, and the signals would otherwise do
    // nothing. A signal while a command runs goes to the command; one left pending ends
    // the worker at its next wait.
    let mut signals = hilock_runtime::proc::StopSignals::new()?;
    let what = format!("queue {name}");
    let stopped = |sig: u8| -> Result<ExitCode, String> {
        eprintln!("hilock: {what}: stopped by signal {sig}");
        Ok(ExitCode::from(128 + sig))
    };
    // Every worker of the queue counts leases alike (`ident::agree_lease`). Replicas that
    // do not answer are waited for as an item is (`--timeout-ms`).
    let agree = || agree_lease(addrs, &prefix, opts.lease, opts.call_timeout);
    match until_majority(&what, limits.wait, Some(&mut signals), agree).await? {
        Reached::Got(()) => {}
        Reached::Signal(sig) => return stopped(sig),
        Reached::InUse(e) => return Err(format!("{what}: {e}")),
    }
    // Two workers with one id would write one column: both could take the same item with
    // the same fence. The id is registered as `hilock bakery lock` registers it, and kept
    // while the worker runs.
    let id = opts.client_id;
    let mut worked = 0u64;
    // One token for every attempt, also after a lapse (`ident`: a replica that executes
    // an earlier attempt late holds this worker's own token, not another's).
    let incarnation = Incarnation::new();
    loop {
        let register = || {
            let (prefix, lease, ct) = (&prefix, opts.lease, opts.call_timeout);
            Registration::register_as(addrs, prefix, id, lease, ct, incarnation.clone())
        };
        let mut kept =
            match until_majority(&what, limits.wait, Some(&mut signals), register).await? {
                Reached::Got(r) => r.keep(),
                Reached::InUse(e) => {
                    eprintln!("hilock: queue {name}: {e}; no further item is taken");
                    return Ok(ExitCode::from(EXIT_ID_IN_USE));
                }
                Reached::Signal(sig) => return stopped(sig),
            };
        let r = work_items::<N>(
            name,
            addrs,
            opts,
            limits,
            command,
            &mut kept,
            &mut worked,
            &mut signals,
        )
        .await;
        match r {
            // Nothing of this worker is on its way to a replica.
            Ok(Worked::Done(code)) => {
                kept.end().await;
                return Ok(code);
            }
            // A wait for an item was cut short: its writes may still be on their way, so
            // the registration runs out (a lease) instead of being given back.
            Ok(Worked::Stopped(sig)) => {
                kept.lapse();
                eprintln!(
                    "hilock: queue {name}: stopped by signal {sig} while waiting for an item"
                );
                return Ok(ExitCode::from(128 + sig));
            }
            // The registration ran out (the worker was paused or cut off for longer than
            // a lease): another worker may have used the id since. As a new worker would,
            // it starts again with a new client, once what the old one sent has landed
            // (the registration is not given back; one lease more, as after a lock's
            // give-up), and a new registration.
            Ok(Worked::Lapsed) => {
                kept.lapse();
                eprintln!(
                    "hilock: queue {name}: the registration of client id {id} ran out (the \
                     worker was paused or cut off for longer than its lease); it registers \
                     again after one lease"
                );
                tokio::select! {
                    () = tokio::time::sleep(opts.lease) => {}
                    sig = signals.recv() => return stopped(sig?),
                }
            }
            // Writes of an interrupted step may still be on their way: the registration
            // runs out (a lease) instead of being given back.
            Err(e) => {
                kept.lapse();
                return Err(e);
            }
        }
    }
}

/// What [`until_majority`] ended with.
enum Reached<T> {
    /// A majority answered: what the attempt gave.
    Got(T),
    /// The id is in use ([`hilock_runtime::bakery::ident::RegisterError::InUse`]).
    InUse(hilock_runtime::bakery::ident::RegisterError),
    /// A signal (its number) came while waiting.
    Signal(u8),
}

/// Runs `attempt` (agreeing on the lease, or registering the id) until a majority of the
/// replicas answered it: again every [`REGISTER_RETRY`] while it got none (an attempt that
/// got no majority gave back what it took), saying so once on stderr after
/// [`WAIT_NOTICE`], until `wait` (none: for ever; then one line naming the missing replicas
/// and exit 2) or a stop signal. `what`: "queue NAME" or "lock NAME", for the lines.
async fn until_majority<T, F, Fut>(
    what: &str,
    wait: Option<Duration>,
    mut signals: Option<&mut hilock_runtime::proc::StopSignals>,
    mut attempt: F,
) -> Result<Reached<T>, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, hilock_runtime::bakery::ident::RegisterError>>,
{
    use hilock_runtime::bakery::ident::RegisterError;
    let start = tokio::time::Instant::now();
    let mut said = false;
    loop {
        let e = match attempt().await {
            Ok(t) => return Ok(Reached::Got(t)),
            Err(e @ RegisterError::InUse { .. }) => return Ok(Reached::InUse(e)),
            Err(RegisterError::Invalid(e)) => return Err(format!("{what}: {e}")),
            Err(RegisterError::NoQuorum(e)) => e,
        };
        if let Some(w) = wait.filter(|w| start.elapsed() + REGISTER_RETRY >= *w) {
            return Err(format!("{what}: {e} (gave up after {} ms)", w.as_millis()));
        }
        if start.elapsed() >= WAIT_NOTICE && !std::mem::replace(&mut said, true) {
            eprintln!("hilock: {what}: waiting for a majority of the replicas: {e}");
        }
        let signal = async {
            match signals.as_deref_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(REGISTER_RETRY) => {}
            sig = signal => return Ok(Reached::Signal(sig?)),
        }
    }
}

/// How [`work_items`] ended.
enum Worked {
    /// The worker is done, with this exit code.
    Done(ExitCode),
    /// The registration ran out.
    Lapsed,
    /// A signal (its number) came while the worker waited for an item.
    Stopped(u8),
}

/// The items of [`work`] while `kept` holds the worker's id, with a new client of the
/// queue.
#[allow(clippy::too_many_arguments)]
async fn work_items<const N: usize>(
    name: &str,
    addrs: &[String],
    opts: hilock_runtime::bakery::Options,
    limits: WorkLimits,
    command: &[String],
    kept: &mut hilock_runtime::bakery::ident::Kept,
    worked: &mut u64,
    signals: &mut hilock_runtime::proc::StopSignals,
) -> Result<Worked, String> {
    let mut q = hilock_runtime::bakery::BakeryQueue::<N>::redis(name, addrs, opts)
        .map_err(|e| e.to_string())?;
    // Each entry that is not hilock's, once, when it is met: a foreign index entry is
    // skipped; a malformed cell makes its replica's answer count as missing, which can
    // leave the worker waiting (or exit 2 at --timeout-ms) if too few replicas remain.
    let queue = name.to_string();
    q.on_malformed(move |text| eprintln!("hilock: queue {queue}: {text}"));
    while limits.max_items.is_none_or(|m| *worked < m) {
        // Waiting for an item writes the id's column: only while the registration holds.
        let next = tokio::select! {
            next = kept.while_held(q.next(limits.wait, limits.exit_when_empty)) => next,
            sig = signals.recv() => return Ok(Worked::Stopped(sig?)),
        };
        let Ok(next) = next else {
            return Ok(Worked::Lapsed);
        };
        let Some(t) = next.map_err(|e| e.to_string())? else {
            break;
        };
        let fence = t.token.as_u64();
        let mut watch = BakeryWatch {
            told: None,
            lock: &mut q,
            kept: Some(KeptRef::Borrowed(kept)),
            name: format!("item {}", t.item),
            timeout: Duration::from_secs(30),
            lease: opts.lease,
            fence,
            env: vec![
                ("HILOCK_ITEM", t.payload.clone()),
                ("HILOCK_ITEM_KEY", t.item.clone()),
            ],
        };
        watch.told = Some(watch.lease_end());
        let ended = crate::run_under_lock::run_to_end(
            command,
            &format!("{name}/{}", t.item),
            Some(fence),
            Duration::from_secs(2),
            &mut watch,
        )
        .await?;
        if kept.until() <= tokio::time::Instant::now() {
            // The hold was lost with the registration (said on stderr by the wrapper).
            return Ok(Worked::Lapsed);
        }
        match ended {
            crate::run_under_lock::Outcome::Lost(_) => {
                // Said on stderr by the wrapper (the lease ran out, the group was killed).
                // The kernel counts the lease down too and goes back to scanning; then on
                // with the next item.
                let _ = q.hold(Box::pin(tokio::time::sleep(opts.lease))).await;
                continue;
            }
            crate::run_under_lock::Outcome::Exited(0) => {
                q.done(Duration::from_secs(30))
                    .await
                    .map_err(|e| format!("removing item {}: {e}", t.item))?;
                *worked += 1;
            }
            other => {
                eprintln!(
                    "hilock: the command failed on item {} ({}); the item is left to another \
                     worker after the lease",
                    t.item,
                    other.describe()
                );
                return Ok(Worked::Done(other.code()));
            }
        }
    }
    Ok(Worked::Done(ExitCode::SUCCESS))
}

/// The shortest and the longest lease: below 100 ms the lease's ticks (a tenth of it) are
/// shorter than a replica's round trip on a loaded machine and a lock is lost as it is
/// taken; above an hour redis's millisecond arithmetic is out of range.
const LEASE_MS: std::ops::RangeInclusive<u64> = 100..=3_600_000;

/// A client id is a column of the bakery: 1 to 31 (refused before any replica is asked).
fn check_client_id(id: u16) -> Result<(), String> {
    if CLIENT_IDS.contains(&id) {
        Ok(())
    } else {
        Err(format!(
            "client id {id}: a client id is {} to {}",
            CLIENT_IDS.start(),
            CLIENT_IDS.end()
        ))
    }
}

fn check_lease(lease_ms: u64) -> Result<(), String> {
    if LEASE_MS.contains(&lease_ms) {
        Ok(())
    } else {
        Err(format!(
            "--lease-ms {lease_ms}: the lease must be between {} and {} ms",
            LEASE_MS.start(),
            LEASE_MS.end()
        ))
    }
}

/// Every replica once: a host:port, none named twice by the addresses it resolves to
/// (`localhost:6379` and `127.0.0.1:6379` are one replica), since a replica named twice
/// would count twice toward a majority.
fn check_replicas(addrs: &[String]) -> Result<(), String> {
    use std::net::ToSocketAddrs;
    if addrs.is_empty() || addrs.len() > 7 {
        return Err(format!(
            "--replicas: {} replicas given; between 1 and 7 are supported",
            addrs.len()
        ));
    }
    let mut seen: Vec<(std::net::SocketAddr, &str)> = Vec::new();
    for a in addrs {
        if a.trim().is_empty() {
            return Err("--replicas: an empty entry (a stray comma?)".into());
        }
        let mut resolved: Vec<std::net::SocketAddr> = a
            .to_socket_addrs()
            .map_err(|e| format!("--replicas: '{a}' is not a reachable host:port ({e})"))?
            .collect();
        // A name may resolve to one address more than once: that is not a second replica.
        resolved.sort_unstable();
        resolved.dedup();
        for r in resolved {
            if let Some((_, other)) = seen.iter().find(|(s, _)| *s == r) {
                return Err(if *other == a {
                    format!(
                        "--replicas: '{a}' is named twice; each replica counts once toward a \
                         majority"
                    )
                } else {
                    format!(
                        "--replicas: '{other}' and '{a}' are the same replica ({r}); each \
                         replica counts once toward a majority"
                    )
                });
            }
            seen.push((r, a));
        }
    }
    Ok(())
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
            let key = runtime()?.block_on(hilock_runtime::bakery::queue::push_command(
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
            check_lease(lease_ms)?;
            check_replicas(&replicas)?;
            check_client_id(client_id)?;
            hilock_runtime::bakery::queue::check_name(&name).map_err(|e| e.to_string())?;
            let opts = hilock_runtime::bakery::Options {
                lease: ms(lease_ms),
                ..hilock_runtime::bakery::Options::new(client_id)
            };
            let limits = WorkLimits {
                max_items,
                exit_when_empty,
                wait: timeout_ms.map(ms),
            };
            macro_rules! with_n {
                ($($n:literal)*) => {
                    match replicas.len() {
                        $($n => crate::lock::current_thread()?.block_on(work::<$n>(&name, &replicas, opts, limits, &command)),)*
                        n => Err(format!("{n} replicas: between 1 and 7 are supported")),
                    }
                };
            }
            with_n!(1 2 3 4 5 6 7)
        }
    }
}

pub fn bakery(command: BakeryCommand) -> Result<ExitCode, String> {
    match command {
        BakeryCommand::Lock {
            name,
            replicas,
            client_id,
            lease_ms,
            timeout_ms,
            kill_grace_ms,
            command,
        } => {
            check_lease(lease_ms)?;
            check_replicas(&replicas)?;
            if let Some(id) = client_id {
                check_client_id(id)?;
            }
            hilock_runtime::bakery::lock::check_name(&name).map_err(|e| e.to_string())?;
            // The id is settled by its registration (`lock`); 1 until then.
            let opts = hilock_runtime::bakery::Options {
                lease: Duration::from_millis(lease_ms),
                ..hilock_runtime::bakery::Options::new(client_id.unwrap_or(1))
            };
            let timeout = Duration::from_millis(timeout_ms);
            let grace = Duration::from_millis(kill_grace_ms);
            // One thread: the command's parent-death signal is tied to the thread that
            // starts it, which must live as long as the wrapper.
            crate::lock::current_thread()?.block_on(async {
                macro_rules! with_n {
                    ($($n:literal)*) => {
                        match replicas.len() {
                            $($n => lock::<$n>(&name, &replicas, client_id, opts, timeout, grace, &command).await,)*
                            n => Err(format!("{n} replicas: between 1 and 7 are supported")),
                        }
                    };
                }
                with_n!(1 2 3 4 5 6 7)
            })
        }
        BakeryCommand::Queue { command } => bakery_queue(command),
    }
}

/// Where the wrapper itself counts the lease as lost: this part of the lease before its
/// end ([`BakeryWatch`]).
const OWN_MARGIN_DIVISOR: u32 = 10;
/// Where the lease watchdog kills the command: this part of the lease before its end
/// (`docs/faults.md`, "Bakery": the lease watchdog).
const WATCHDOG_MARGIN_DIVISOR: u32 = 20;

/// The client ids a bakery client may use (its column of the kernel's `Client<N, 1, 32>`).
const CLIENT_IDS: std::ops::RangeInclusive<u16> = 1..=31;

/// The pause between two registrations that got no majority (`hilock bakery lock` waits
/// for the replicas until its timeout).
const REGISTER_RETRY: Duration = Duration::from_millis(100);

/// How long a queue worker waits for a majority of the replicas before it says so (a
/// shorter wait ends with one line: the answer or the error).
const WAIT_NOTICE: Duration = Duration::from_secs(1);

/// `hilock bakery lock`: registers the client id on the replicas (refused with
/// [`EXIT_ID_IN_USE`] while another client holds it; without `client_id`, the first id in a
/// random order whose registration succeeds), acquires `name`, runs `command` under it
/// ([`crate::run_under_lock::run`]) while renewing the lease and the registration, then
/// releases both.
async fn lock<const N: usize>(
    name: &str,
    addrs: &[String],
    client_id: Option<u16>,
    mut opts: hilock_runtime::bakery::Options,
    timeout: Duration,
    grace: Duration,
    command: &[String],
) -> Result<ExitCode, String> {
    use hilock_runtime::bakery::ident::{agree_lease, Incarnation, RegisterError, Registration};
    use rand::seq::SliceRandom;
    let prefix = format!("hilock:bakery:{name}");
    // A derived id is as safe as a given one: it is used only once its registration on a
    // majority succeeded, which no other running client can hold at the same time.
    let mut ids: Vec<u16> = match client_id {
        Some(id) => vec![id],
        None => CLIENT_IDS.collect(),
    };
    ids.shuffle(&mut rand::rng());
    // Replicas that do not answer (a majority down or paused) are waited for until the
    // timeout, as the lock itself is (`until_majority`: one line after WAIT_NOTICE): a
    // registration that got no majority gave back what it took, so it can be tried again.
    let deadline = tokio::time::Instant::now() + timeout;
    // The lease is agreed once; the ids are tried only after that, each attempt with one
    // token (`ident`: a paused replica that executes an earlier attempt late holds this
    // client's own token, which must not count as the id in use). An attempt that got no
    // majority starts the search again at the first id.
    let agreed = std::cell::Cell::new(false);
    let incarnation = Incarnation::new();
    let (agreed, incarnation, ids, prefix) = (&agreed, &incarnation, &ids, &prefix);
    let search = until_majority(
        &format!("lock {name}"),
        Some(timeout),
        None,
        || async move {
            if !agreed.get() {
                agree_lease(addrs, prefix, opts.lease, opts.call_timeout).await?;
                agreed.set(true);
            }
            for &id in ids {
                let again = incarnation.clone();
                match Registration::register_as(
                    addrs,
                    prefix,
                    id,
                    opts.lease,
                    opts.call_timeout,
                    again,
                )
                .await
                {
                    Ok(r) => return Ok(Some((id, r))),
                    Err(RegisterError::InUse { .. }) if client_id.is_none() => continue,
                    Err(e) => return Err(e),
                }
            }
            Ok(None)
        },
    )
    .await?;
    let (id, mut reg) = match search {
        Reached::Got(Some(registered)) => registered,
        Reached::Got(None) => {
            eprintln!(
                "hilock: lock {name}: every client id {}..={} is in use by a running client (or \
                 by one whose registration has not run out yet); the command did not run",
                CLIENT_IDS.start(),
                CLIENT_IDS.end()
            );
            return Ok(ExitCode::from(EXIT_ID_IN_USE));
        }
        Reached::InUse(e) => {
            eprintln!("hilock: lock {name}: {e}; the command did not run");
            return Ok(ExitCode::from(EXIT_ID_IN_USE));
        }
        // No signal is watched while registering (`None` above): SIGINT and SIGTERM end
        // the command as they do by default.
        Reached::Signal(sig) => return Ok(ExitCode::from(128 + sig)),
    };
    opts.client_id = id;
    let lapsed = |until: tokio::time::Instant| {
        format!(
            "lock {name}: the registration of client id {id} was not renewed in time \
             (it ended {} ms ago)",
            tokio::time::Instant::now()
                .saturating_duration_since(until)
                .as_millis()
        )
    };
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let (lock, kept, token) = loop {
        let mut lock = match hilock_runtime::bakery::BakeryLock::<N>::redis(name, addrs, opts) {
            Ok(l) => l,
            Err(e) => {
                reg.give_back().await;
                return Err(e.to_string());
            }
        };
        // Each entry that is not hilock's, once, when it is met: that replica's answer
        // counts as missing.
        let lock_name = name.to_string();
        lock.on_malformed(move |text| eprintln!("hilock: lock {lock_name}: {text}"));
        let mut kept = reg.keep();
        // Waiting in line writes the id's column: only while the registration holds.
        // The timeout covers the registration and the wait in line together.
        let acquired = match kept.while_held(lock.acquire(left())).await {
            Ok(r) => r.map_err(|e| (e.to_string(), false)),
            Err(until) => Err((lapsed(until), true)),
        };
        match acquired {
            Ok(t) => break (lock, kept, t),
            // Requests of the given-up acquire may still be on their way to a replica; a
            // new client with this id must not start before they land, or one of them may
            // overwrite its column (`spec/counterexamples/bakery-restart-in-flight.json`).
            // So the registration runs out (one lease) instead of being given back.
            Err((e, true)) if left() > opts.lease + REGISTER_RETRY => {
                // The registration ran out while waiting in line (paused, or no majority
                // for longer than a lease): as a new client, one lease later.
                kept.lapse();
                eprintln!("hilock: {e}; it waits in line again after one lease");
                tokio::time::sleep(opts.lease).await;
                let register = || {
                    let (prefix, lease, ct) = (&prefix, opts.lease, opts.call_timeout);
                    Registration::register_as(addrs, prefix, id, lease, ct, incarnation.clone())
                };
                let what = format!("lock {name}");
                reg = match until_majority(&what, Some(left()), None, register).await? {
                    Reached::Got(r) => r,
                    Reached::InUse(e) => {
                        eprintln!("hilock: lock {name}: {e}; the command did not run");
                        return Ok(ExitCode::from(EXIT_ID_IN_USE));
                    }
                    Reached::Signal(sig) => return Ok(ExitCode::from(128 + sig)),
                };
            }
            Err((e, _)) => {
                kept.lapse();
                return Err(e);
            }
        }
    };
    let mut watch = BakeryWatch {
        told: None,
        lock,
        kept: Some(KeptRef::Owned(kept)),
        env: Vec::new(),
        name: format!("lock {name}"),
        timeout,
        lease: opts.lease,
        fence: token.as_u64(),
    };
    watch.told = Some(watch.lease_end());
    let r =
        crate::run_under_lock::run(command, name, Some(token.as_u64()), grace, &mut watch).await;
    if r.is_err() {
        watch.release().await;
    }
    r
}

/// What a bakery client holds while a command runs: the lock, or a queue's item.
trait Leased {
    /// The end of the hold's lease (`None`: nothing leased).
    fn lease_end(&self) -> Option<tokio::time::Instant>;
    /// Keeps the hold for `tick` (renewing the lease); `Err` once the lease ran out.
    async fn hold_for(&mut self, tick: Duration) -> Result<(), String>;
    /// The command ended: give the hold back (an item is not: whether it is done depends
    /// on the command's status, which the caller knows).
    async fn let_go(&mut self, timeout: Duration) -> Result<(), String>;
}

impl<const N: usize> Leased for hilock_runtime::bakery::BakeryLock<N> {
    fn lease_end(&self) -> Option<tokio::time::Instant> {
        hilock_runtime::bakery::BakeryLock::lease_end(self)
    }
    async fn hold_for(&mut self, tick: Duration) -> Result<(), String> {
        self.hold(Box::pin(tokio::time::sleep(tick)))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    async fn let_go(&mut self, timeout: Duration) -> Result<(), String> {
        self.release(timeout).await.map_err(|e| e.to_string())
    }
}

impl<const N: usize> Leased for &mut hilock_runtime::bakery::BakeryQueue<N> {
    fn lease_end(&self) -> Option<tokio::time::Instant> {
        hilock_runtime::bakery::BakeryQueue::lease_end(self)
    }
    async fn hold_for(&mut self, tick: Duration) -> Result<(), String> {
        self.hold(Box::pin(tokio::time::sleep(tick)))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    async fn let_go(&mut self, _: Duration) -> Result<(), String> {
        Ok(())
    }
}

/// The registration of a client's id, as a [`BakeryWatch`] holds it.
enum KeptRef<'k> {
    /// A lock's: given back (or left to lapse) when the lock is released.
    Owned(hilock_runtime::bakery::ident::Kept),
    /// A queue worker's: kept across its items, given back when the worker ends.
    Borrowed(&'k mut hilock_runtime::bakery::ident::Kept),
}

impl KeptRef<'_> {
    fn get(&self) -> &hilock_runtime::bakery::ident::Kept {
        match self {
            KeptRef::Owned(k) => k,
            KeptRef::Borrowed(k) => k,
        }
    }

    fn get_mut(&mut self) -> &mut hilock_runtime::bakery::ident::Kept {
        match self {
            KeptRef::Owned(k) => k,
            KeptRef::Borrowed(k) => k,
        }
    }
}

/// The bakery client holds the lock (or an item): it renews its lease and its id's
/// registration while the command runs, and counts the hold lost a tenth of a lease
/// before the earlier of their ends.
struct BakeryWatch<'k, L: Leased> {
    lock: L,
    kept: Option<KeptRef<'k>>,
    name: String,
    timeout: Duration,
    lease: Duration,
    fence: u64,
    /// The lease end the watchdog was last told.
    told: Option<tokio::time::Instant>,
    /// The command's further environment (a queue item's).
    env: Vec<(&'static str, String)>,
}

impl<L: Leased> BakeryWatch<'_, L> {
    /// The earlier of the lease end and the registration's end.
    fn lease_end(&self) -> tokio::time::Instant {
        let lock = self
            .lock
            .lease_end()
            .unwrap_or_else(tokio::time::Instant::now);
        self.kept
            .as_ref()
            .map_or(lock, |k| lock.min(k.get().until()))
    }
}

impl<L: Leased> Watch for BakeryWatch<'_, L> {
    async fn started(&mut self, _: i32) -> Result<(), String> {
        Ok(())
    }

    async fn next(&mut self) -> Event {
        let tick = self.lease / u32::from(hilock_runtime::bakery::lock::LEASE_TICKS);
        loop {
            let end = self.lease_end();
            if self.told != Some(end) {
                self.told = Some(end);
                return Event::Renewed;
            }
            let own = end
                .checked_sub(self.lease / OWN_MARGIN_DIVISOR)
                .unwrap_or(end);
            let renewed = async {
                match self.kept.as_mut() {
                    Some(k) => k.get_mut().renewed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(own) => {
                    return Event::Lost(
                        EXIT_LEASE_LOST,
                        format!(
                            "{}: the lease ran out before it was renewed (fence {} is no \
                             longer valid)",
                            self.name, self.fence
                        ),
                        Some(Duration::ZERO),
                    );
                }
                r = self.lock.hold_for(tick) => {
                    if let Err(e) = r {
                        return Event::Lost(
                            EXIT_LEASE_LOST,
                            format!("{}: {e}", self.name),
                            Some(Duration::ZERO),
                        );
                    }
                }
                _ = renewed => {}
            }
        }
    }

    fn kill_by(&self) -> Option<tokio::time::Instant> {
        let end = self.lease_end();
        Some(
            end.checked_sub(self.lease / WATCHDOG_MARGIN_DIVISOR)
                .unwrap_or(end),
        )
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        self.env.clone()
    }

    async fn release(&mut self) {
        if let Err(e) = self.lock.let_go(self.timeout).await {
            eprintln!(
                "hilock: warning: release of {} failed ({e}); the entry expires after its lease",
                self.name
            );
            // The release's writes may still be on their way: as after a give-up, the id's
            // registration runs out rather than being given back.
            if let Some(KeptRef::Owned(k)) = self.kept.as_mut() {
                k.lapse();
            }
            return;
        }
        if let Some(KeptRef::Owned(k)) = self.kept.as_mut() {
            k.end().await;
        }
    }
}
