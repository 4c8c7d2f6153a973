//! [`BakeryLock`]: the kernel's bakery client (lock program, `Variant::HILOCK` by default)
//! driven over real replicas.
//!
//! The driver only moves things: each `ClientOutput::Send` goes to its replica through
//! [`QuorumStore`]; each answer goes back in as `Input::Reply` (the client counts the `R` or
//! `W` answers and merges them); `ClientOutput::Sleep` becomes an `Input::Wake` after
//! "a little" (`Options::poll`, with jitter); elapsed time becomes `Input::Tick`s.
//!
//! Failures: a replica that does not answer within `Options::call_timeout`, cannot be
//! reached, or answers something that does not decode (a foreign or malformed entry,
//! reported once in [`Stats::malformed`] and to [`Driver::on_malformed`]'s callback, and
//! never passed to the client) counts as missing; the same request is sent to it again
//! with exponential backoff (10 ms doubling to 1 s) while the operation is outstanding.
//! When the caller's deadline passes with an operation short of its quorum, the error
//! ([`Error::NoQuorum`]) names every replica that did not answer and why.
//!
//! Time: one tick is `lease / LEASE_TICKS`; the kernel counts a holder's lease down from
//! the start of the write that (re)wrote its entry and renews it when `RENEW_BELOW` ticks
//! are left; another client counts an entry as expired only after watching it unchanged
//! for `EXPIRY_TICKS` ticks (and a later read still returns it). Ticks are counted as whole
//! ticks elapsed since the driver started on the monotonic clock, so each side may see up
//! to one tick less than has passed; `EXPIRY_TICKS = LEASE_TICKS + 3` covers both roundings
//! with a tick to spare (the kernel itself only demands `expiry ≥ lease`).
//!
//! A restarted client (the same `client_id` in a new process) first reads the lock's
//! entries from every replica that answers (at least `R`) and moves its Lamport clock past
//! every timestamp it finds (`Client::advance_clock`), so that its writes supersede what an
//! earlier run of the same id left. Not covered: a write of that earlier run that reached
//! only replicas that are down during this read (`docs/faults.md`, "Bakery": not promised).

use super::redis::RedisReplica;
use super::store::{Delivery, QuorumStore, ReplicaBackend, ReplicaError, Scope, COLUMNS, ROWS};
use hilock_kernel::bakery::{
    BakeryError, Client, ClientId, ClientOutput, Config, Family, Input, Phase, Program, ReplicaId,
    Reply, Request, Row, Ticket, Ts, Variant,
};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

/// Ticks per lease.
pub const LEASE_TICKS: u8 = 10;
/// Renew the lease when at most this many ticks are left.
pub const RENEW_BELOW: u8 = 5;
/// Ticks another client watches an unchanged entry before it may count it expired.
pub const EXPIRY_TICKS: u8 = LEASE_TICKS + 3;

/// Parameters of one client.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The client id: the column it writes, `1..32`. Two running clients must never share
    /// one.
    pub client_id: u16,
    /// Read quorum (0: a majority of the replicas).
    pub r: u8,
    /// Write quorum (0: a majority of the replicas).
    pub w: u8,
    /// How long an entry stays valid without renewal.
    pub lease: Duration,
    /// Time limit of one request to one replica.
    pub call_timeout: Duration,
    /// "Sleep a little": the pause before a waiting client reads again (plus up to as much
    /// again of random jitter).
    pub poll: Duration,
    /// The kernel variant (`Variant::HILOCK`; tests switch corrections off on purpose).
    pub variant: Variant,
}

impl Options {
    /// Defaults: majority quorums, a 2 s lease, 500 ms per call, 5 ms polls, `HILOCK`.
    pub fn new(client_id: u16) -> Self {
        Options {
            client_id,
            r: 0,
            w: 0,
            lease: Duration::from_millis(2000),
            call_timeout: Duration::from_millis(500),
            poll: Duration::from_millis(5),
            variant: Variant::HILOCK,
        }
    }
}

/// Why a lock operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A bad parameter (replica count, quorum, lease, client id).
    Config(String),
    /// An operation did not get its quorum before the deadline.
    NoQuorum {
        /// The operation, e.g. `write number`.
        what: String,
        /// `R` or `W`.
        need: u8,
        /// Answers received.
        got: u8,
        /// The replicas without a usable answer, with the reason.
        missing: Vec<String>,
    },
    /// The deadline passed while waiting in line (every operation had its quorum).
    Timeout {
        /// How long it waited.
        waited: Duration,
        /// Where the client was.
        phase: Phase,
    },
    /// The lease ran out while holding: the fencing token is no longer valid.
    Lost {
        /// The token.
        token: Ticket,
    },
    /// The kernel refused an input (a bug of the driver).
    Kernel(BakeryError),
    /// Queue: a refresh of the window found no pending item (asked to stop then).
    QueueEmpty,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => write!(f, "{e}"),
            Error::NoQuorum {
                what,
                need,
                got,
                missing,
            } => write!(
                f,
                "{what}: {got} of the {need} answers it needs; missing: {}",
                missing.join("; ")
            ),
            Error::Timeout { waited, phase } if is_queue(*phase) => write!(
                f,
                "no item could be taken within {} ms ({})",
                waited.as_millis(),
                phase_text(*phase)
            ),
            Error::Timeout { waited, phase } => write!(
                f,
                "lock not granted within {} ms (still {})",
                waited.as_millis(),
                phase_text(*phase)
            ),
            Error::Lost { token } => write!(
                f,
                "the lease ran out while holding (fence {} is no longer valid)",
                token.as_u64()
            ),
            Error::Kernel(e) => write!(f, "kernel refused an input: {e}"),
            Error::QueueEmpty => write!(f, "the queue has no pending item"),
        }
    }
}

impl std::error::Error for Error {}

/// Counters of one client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Quorum operations the kernel started (each is one round trip to every replica).
    pub ops: u64,
    /// Requests sent to replicas, retries included.
    pub requests: u64,
    /// Requests sent again to a replica that had not answered.
    pub retries: u64,
    /// "Sleep a little" waits.
    pub sleeps: u64,
    /// Attempts abandoned because the lease ran out while waiting.
    pub abandoned: u64,
    /// Malformed or foreign entries met, each once, with the replica.
    pub malformed: Vec<String>,
}

pub(crate) enum Until<T> {
    Event(ClientOutput),
    Done(T),
}

/// One bakery client on `N` replicas for one lock (the kernel's `Client<N, 1, 32>`).
pub type BakeryLock<const N: usize> = Driver<N, ROWS>;

/// The driver of one kernel bakery client `Client<N, K, 32>` on `N` replicas: `K = 1` for
/// a lock ([`BakeryLock`]), `K = QUEUE_ROWS` for a queue worker
/// ([`BakeryQueue`](super::queue::BakeryQueue)).
#[derive(Debug)]
pub struct Driver<const N: usize, const K: usize> {
    pub(crate) scope: Arc<Scope>,
    pub(crate) client: Client<N, K, COLUMNS>,
    pub(crate) store: QuorumStore<K>,
    rx: mpsc::UnboundedReceiver<Delivery<K>>,
    pub(crate) opts: Options,
    tick: Duration,
    epoch: Instant,
    ticks_fed: u64,
    requests: HashMap<u32, (Request, Arc<Scope>)>,
    failures: Vec<Option<String>>,
    retries: Vec<(Instant, ReplicaId, u32)>,
    attempts: HashMap<(u32, u8), u32>,
    wake_at: Option<Instant>,
    events: VecDeque<ClientOutput>,
    synced: bool,
    rng: u64,
    pub(crate) stats: Stats,
    /// Queue: the sends of a scan that waits for the window's refresh.
    pub(crate) pending_scan: Vec<(ReplicaId, Request)>,
    /// Queue: stop with [`Error::QueueEmpty`] when a refresh finds nothing pending.
    pub(crate) stop_when_empty: bool,
    /// Queue: items a replica reported done that another replica still lists as pending
    /// ([`Self::refresh_window`]).
    pub(crate) finished: BTreeSet<String>,
    /// Told each malformed or foreign entry once ([`Driver::on_malformed`]).
    reporter: Option<Reporter>,
}

/// The callback of [`Driver::on_malformed`].
#[derive(Clone)]
struct Reporter(Arc<dyn Fn(&str) + Send + Sync>);

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reporter")
    }
}

impl<const N: usize> BakeryLock<N> {
    /// A client of the lock `name` on `replicas` (exactly `N`).
    pub fn new(
        name: &str,
        replicas: Vec<Arc<dyn ReplicaBackend>>,
        opts: Options,
    ) -> Result<Self, Error> {
        Self::with_program(
            Scope::lock(name),
            replicas,
            opts,
            Program::Lock { row: Row(0) },
        )
    }

    /// A client over `redis-server`s at `addrs` (`host:port`).
    pub fn redis(name: &str, addrs: &[String], opts: Options) -> Result<Self, Error> {
        Self::new(name, redis_replicas(addrs)?, opts)
    }
}

/// Refuses a lock name the replicas' keys cannot carry (before anything is written).
pub fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > 200 {
        return Err(Error::Config(
            "the lock name must have 1 to 200 bytes".into(),
        ));
    }
    if name.contains(':') {
        return Err(Error::Config(format!(
            "the lock name '{name}' has a ':': the replicas' keys are hilock:bakery:NAME:…, \
             so it could share keys with another lock or queue (lock 'q:jobs' with queue \
             'jobs')"
        )));
    }
    Ok(())
}

/// The redis replicas at `addrs` as backends with `K` rows.
pub fn redis_replicas<const K: usize>(
    addrs: &[String],
) -> Result<Vec<Arc<dyn ReplicaBackend<K>>>, Error> {
    addrs
        .iter()
        .map(|a| RedisReplica::new(a).map(|r| r as Arc<dyn ReplicaBackend<K>>))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::Config)
}

impl<const N: usize, const K: usize> Driver<N, K> {
    /// A kernel client running `program` in `scope` on `replicas` (exactly `N`).
    pub(crate) fn with_program(
        scope: Arc<Scope>,
        replicas: Vec<Arc<dyn ReplicaBackend<K>>>,
        opts: Options,
        program: Program,
    ) -> Result<Self, Error> {
        if replicas.len() != N {
            return Err(Error::Config(format!(
                "{} replicas given, {N} expected",
                replicas.len()
            )));
        }
        if let Scope::Lock(n) = &*scope {
            check_name(n)?;
        }
        let majority = (N / 2 + 1) as u8;
        let pick = |q: u8| if q == 0 { majority } else { q };
        let cfg = Config {
            r: pick(opts.r),
            w: pick(opts.w),
            variant: opts.variant,
            lease: LEASE_TICKS,
            expiry: EXPIRY_TICKS,
            renew_below: RENEW_BELOW,
            program,
        };
        if opts.client_id == 0 || opts.client_id as usize >= COLUMNS {
            return Err(Error::Config(format!(
                "client id {} outside 1..{}",
                opts.client_id,
                COLUMNS - 1
            )));
        }
        let client = Client::new(ClientId(opts.client_id), cfg)
            .map_err(|e| Error::Config(format!("R={} W={} of {N}: {e}", cfg.r, cfg.w)))?;
        let tick = opts.lease / LEASE_TICKS as u32;
        if tick < Duration::from_millis(1) {
            return Err(Error::Config("the lease must be at least 10 ms".into()));
        }
        let (store, rx) = QuorumStore::new(replicas, opts.call_timeout);
        Ok(Driver {
            scope,
            client,
            store,
            rx,
            opts,
            tick,
            epoch: Instant::now(),
            ticks_fed: 0,
            requests: HashMap::new(),
            failures: vec![None; N],
            retries: Vec::new(),
            attempts: HashMap::new(),
            wake_at: None,
            events: VecDeque::new(),
            synced: false,
            rng: 0x9e37_79b9_7f4a_7c15
                ^ (opts.client_id as u64)
                ^ (std::process::id() as u64) << 20,
            stats: Stats::default(),
            pending_scan: Vec::new(),
            stop_when_empty: false,
            finished: BTreeSet::new(),
            reporter: None,
        })
    }

    /// The end of this client's lease while its entries are leased (waiting or holding):
    /// never later than the lease the kernel counts, which runs from the start of the write
    /// that (re)wrote the entries and which no other client cuts short ([`EXPIRY_TICKS`]).
    /// It moves forward with each renewal; `None` when the client has no leased entries.
    ///
    /// Ticks are fed as whole ticks elapsed since the driver started, and the write that
    /// started the lease began after the last tick fed before it: so the lease began at or
    /// after `epoch + tick · (ticks fed − ticks counted down)`, and this is that instant plus
    /// the lease.
    pub fn lease_end(&self) -> Option<Instant> {
        let left = u64::from(self.client.lease_left()?);
        let ticks = u32::try_from(self.ticks_fed.saturating_add(left)).ok()?;
        Some(self.epoch + self.tick * ticks)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The kernel client (read only).
    pub fn client(&self) -> &Client<N, K, COLUMNS> {
        &self.client
    }

    /// Holds the lock (or the item) while `work` runs: renews the lease, answers nothing
    /// else. Returns `work`'s output, or [`Error::Lost`] as soon as the lease runs out (then
    /// `work` must stop using it: the caller drops or kills it).
    pub async fn hold<F: Future + Unpin>(&mut self, mut work: F) -> Result<F::Output, Error> {
        match self
            .drive(Instant::now(), None, Some(&mut work), |_| false)
            .await?
        {
            Until::Done(v) => Ok(v),
            Until::Event(_) => Err(Error::Config("hold ended without its work".into())),
        }
    }

    pub(crate) fn describe(&self, r: usize, why: Option<String>) -> String {
        format!(
            "r{r} {} ({})",
            self.store.addr(ReplicaId(r as u8)),
            why.unwrap_or_else(|| "no answer yet".into())
        )
    }

    pub(crate) fn note_failure(&mut self, from: ReplicaId, e: &ReplicaError) {
        if let ReplicaError::Malformed(m) = e {
            self.note_malformed(
                from,
                &format!("malformed or foreign entry: {m}; its answer counts as missing"),
            );
        }
        if let Some(f) = self.failures.get_mut(from.0 as usize) {
            *f = Some(e.to_string());
        }
    }

    /// A malformed or foreign entry met on replica `from`: reported once (the first time
    /// this text is met) in [`Stats::malformed`], as a warning and to the reporter
    /// ([`Self::on_malformed`]).
    pub(crate) fn note_malformed(&mut self, from: ReplicaId, what: &str) {
        let text = format!("replica {}: {what}", self.store.addr(from));
        if self.stats.malformed.contains(&text) {
            return;
        }
        tracing::warn!("bakery: {text}");
        if let Some(r) = &self.reporter {
            (r.0)(&text);
        }
        self.stats.malformed.push(text);
    }

    /// Calls `report` with each malformed or foreign entry met, once per entry and replica
    /// (the text names the replica and the entry), when it is met.
    pub fn on_malformed(&mut self, report: impl Fn(&str) + Send + Sync + 'static) {
        self.reporter = Some(Reporter(Arc::new(report)));
    }

    fn jitter(&mut self, d: Duration) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let ns = d.as_nanos() as u64;
        d + Duration::from_nanos(if ns == 0 { 0 } else { self.rng % ns })
    }

    /// One kernel step; its outputs are carried out or queued.
    pub(crate) fn feed(&mut self, input: Input<'_, K, COLUMNS>) -> Result<(), Error> {
        let mut out: heapless::Vec<ClientOutput, 16> = heapless::Vec::new();
        self.client.step(input, &mut out).map_err(Error::Kernel)?;
        for o in out {
            match o {
                ClientOutput::Send { to, req } => {
                    let new = !self.requests.contains_key(&req.op())
                        && self.pending_scan.iter().all(|(_, r)| r.op() != req.op());
                    if new {
                        // A new operation: reasons from earlier ones no longer apply.
                        self.stats.ops += 1;
                        self.failures.iter_mut().for_each(|f| *f = None);
                    }
                    if matches!(req, Request::Read { row: None, .. })
                        && !self.requests.contains_key(&req.op())
                    {
                        // A queue's scan: sent once the window is refreshed (`drive`).
                        self.pending_scan.push((to, req));
                        continue;
                    }
                    self.requests.insert(req.op(), (req, self.scope.clone()));
                    self.stats.requests += 1;
                    self.store.send(to, self.scope.clone(), req);
                }
                ClientOutput::Sleep => {
                    self.stats.sleeps += 1;
                    let pause = self.jitter(self.opts.poll);
                    self.wake_at = Some(Instant::now() + pause);
                }
                ClientOutput::Abandoned { .. } => {
                    self.stats.abandoned += 1;
                    self.events.push_back(o);
                }
                other => self.events.push_back(other),
            }
        }
        let (a, b) = self.client.outstanding();
        let live = |op: u32| Some(op) == a || Some(op) == b;
        self.requests.retain(|op, _| live(*op));
        self.pending_scan.retain(|(_, r)| live(r.op()));
        self.retries.retain(|(_, _, op)| live(*op));
        self.attempts.retain(|(op, _), _| live(*op));
        Ok(())
    }

    /// Sends a held-back scan (see [`Self::refresh_window`]) with the current window.
    pub(crate) fn send_pending_scan(&mut self) {
        for (to, req) in std::mem::take(&mut self.pending_scan) {
            self.requests.insert(req.op(), (req, self.scope.clone()));
            self.stats.requests += 1;
            self.store.send(to, self.scope.clone(), req);
        }
    }

    /// Whether replica `r` still owes an answer to the outstanding operation `op`.
    fn owes(&self, op: u32, r: ReplicaId) -> bool {
        let (a, b) = self.client.outstanding();
        let (ma, mb) = self.client.replied();
        let mask = if Some(op) == a {
            ma
        } else if Some(op) == b {
            mb
        } else {
            return false;
        };
        mask & (1 << r.0) == 0
    }

    fn on_delivery(&mut self, d: Delivery<K>) -> Result<(), Error> {
        match d.result {
            Ok(reply) => {
                match self.feed(Input::Reply {
                    from: d.from,
                    reply: &reply,
                }) {
                    Err(Error::Kernel(e)) => {
                        // The kernel refuses a reply that does not fit its request: that
                        // replica's answer is missing.
                        self.note_failure(d.from, &ReplicaError::Refused(e.to_string()));
                        Ok(())
                    }
                    r => r,
                }
            }
            Err(e) => {
                self.note_failure(d.from, &e);
                if self.owes(d.op, d.from) {
                    let n = self.attempts.entry((d.op, d.from.0)).or_insert(0);
                    *n += 1;
                    let delay =
                        Duration::from_millis(10 << (*n).min(7)).min(Duration::from_secs(1));
                    self.retries.push((Instant::now() + delay, d.from, d.op));
                }
                Ok(())
            }
        }
    }

    fn fire_retries(&mut self) {
        let now = Instant::now();
        let due: Vec<_> = self
            .retries
            .iter()
            .copied()
            .filter(|r| r.0 <= now)
            .collect();
        self.retries.retain(|r| r.0 > now);
        for (_, to, op) in due {
            if let (true, Some((req, scope))) = (self.owes(op, to), self.requests.get(&op).cloned())
            {
                self.stats.retries += 1;
                self.stats.requests += 1;
                self.store.send(to, scope, req);
            }
        }
    }

    fn feed_ticks(&mut self) -> Result<(), Error> {
        let due = (self.epoch.elapsed().as_nanos() / self.tick.as_nanos()) as u64;
        while self.ticks_fed < due {
            let n = (due - self.ticks_fed).min(255);
            self.ticks_fed += n;
            self.feed(Input::Tick { elapsed: n as u8 })?;
        }
        Ok(())
    }

    /// The error at the deadline: the operation short of its quorum because replicas
    /// failed, or a plain timeout.
    fn deadline_error(&self, start: Instant) -> Error {
        let (a, _) = self.client.outstanding();
        let (mask, _) = self.client.replied();
        if let Some((req, _)) = a.and_then(|op| self.requests.get(&op)) {
            let cfg = self.client.config();
            let (what, need) = match req {
                Request::Write { family, .. } => (format!("write {}", family.name()), cfg.w),
                Request::Read { family, .. } => (format!("read {}", family.name()), cfg.r),
            };
            let got = mask.count_ones() as u8;
            // Short of its quorum because replicas failed (not merely still in flight).
            let failed = (0..N).any(|r| mask & (1 << r) == 0 && self.failures[r].is_some());
            if got < need && failed {
                let missing = (0..N)
                    .filter(|r| mask & (1 << r) == 0)
                    .map(|r| self.describe(r, self.failures[r].clone()))
                    .collect();
                return Error::NoQuorum {
                    what,
                    need,
                    got,
                    missing,
                };
            }
        }
        Error::Timeout {
            waited: start.elapsed(),
            phase: self.client.phase(),
        }
    }

    /// Runs the event loop until an output `want` accepts, `work` finishes, the deadline
    /// passes or the lease is lost.
    pub(crate) async fn drive<F: Future + Unpin>(
        &mut self,
        start: Instant,
        deadline: Option<Instant>,
        mut work: Option<&mut F>,
        want: impl Fn(&ClientOutput) -> bool,
    ) -> Result<Until<F::Output>, Error> {
        loop {
            while let Some(ev) = self.events.pop_front() {
                if want(&ev) {
                    return Ok(Until::Event(ev));
                }
                if let ClientOutput::Lost { token, .. } = ev {
                    return Err(Error::Lost { token });
                }
            }
            if !self.pending_scan.is_empty() {
                let empty = self.refresh_window().await;
                if empty && self.stop_when_empty {
                    return Err(Error::QueueEmpty);
                }
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(self.deadline_error(start));
            }
            let far = now + Duration::from_secs(3600);
            let next_tick = self.epoch
                + Duration::from_nanos(
                    (self.tick.as_nanos() as u64).saturating_mul(self.ticks_fed + 1),
                );
            let wake = self.wake_at;
            let retry = self.retries.iter().map(|r| r.0).min();
            let work_done = async {
                match work.as_mut() {
                    Some(f) => Some((&mut **f).await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                d = self.rx.recv() => {
                    if let Some(d) = d {
                        self.on_delivery(d)?;
                    }
                }
                _ = sleep_until(next_tick) => self.feed_ticks()?,
                _ = sleep_until(wake.unwrap_or(far)), if wake.is_some() => {
                    self.wake_at = None;
                    self.feed(Input::Wake)?;
                }
                _ = sleep_until(retry.unwrap_or(far)), if retry.is_some() => self.fire_retries(),
                _ = sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => {}
                v = work_done => {
                    if let Some(v) = v {
                        return Ok(Until::Done(v));
                    }
                }
            }
        }
    }
}

impl<const N: usize> BakeryLock<N> {
    /// Acquires the lock (seed lines 1–18) within `timeout`; returns the fencing token.
    pub async fn acquire(&mut self, timeout: Duration) -> Result<Ticket, Error> {
        let start = Instant::now();
        let deadline = start + timeout;
        if !self.synced {
            self.sync_clock(deadline).await?;
            self.synced = true;
        }
        self.feed(Input::Acquire)?;
        match self
            .drive(
                start,
                Some(deadline),
                None::<&mut std::future::Pending<()>>,
                |o| matches!(o, ClientOutput::Entered { .. }),
            )
            .await?
        {
            Until::Event(ClientOutput::Entered { token, .. }) => Ok(token),
            _ => Err(Error::Config("acquire ended without entering".into())),
        }
    }

    /// Releases the lock (seed line 19: the number is given back as `Released`).
    pub async fn release(&mut self, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        self.feed(Input::Release)?;
        self.drive(
            start,
            Some(start + timeout),
            None::<&mut std::future::Pending<()>>,
            |o| matches!(o, ClientOutput::Exited { .. }),
        )
        .await
        .map(|_| ())
    }

    /// Reads the lock's `choosing` and `number` entries from every replica that answers
    /// (at least `R`, all `N` unless one fails) and moves the Lamport clock past them.
    async fn sync_clock(&mut self, deadline: Instant) -> Result<(), Error> {
        let need = self.client.config().r;
        let fams = [Family::Choosing, Family::Number];
        let mut got = vec![0u8; N];
        let mut failed: Vec<Option<String>> = vec![None; N];
        let mut max = 0u32;
        let send = |s: &Self, r: usize| {
            for family in fams {
                let req = Request::Read {
                    op: 0,
                    family,
                    row: Some(Row(0)),
                };
                s.store.send(ReplicaId(r as u8), s.scope.clone(), req);
            }
        };
        for r in 0..N {
            send(self, r);
        }
        self.stats.ops += 1;
        self.stats.requests += 2 * N as u64;
        let mut backoff = Duration::from_millis(10);
        loop {
            let answered = got.iter().filter(|&&g| g == 2).count();
            let settled = (0..N)
                .filter(|&r| got[r] == 2 || failed[r].is_some())
                .count();
            if answered >= need as usize && settled == N {
                break;
            }
            if settled == N {
                // Fewer than R answered: ask the failed ones again after a pause.
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = sleep_until(deadline) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                for r in 0..N {
                    if failed[r].is_some() && Instant::now() < deadline {
                        failed[r] = None;
                        got[r] = 0;
                        self.stats.retries += 1;
                        self.stats.requests += 2;
                        send(self, r);
                    }
                }
            }
            let d = tokio::select! {
                d = self.rx.recv() => d,
                _ = sleep_until(deadline) => None,
            };
            let Some(d) = d else {
                if answered >= need as usize {
                    // R answers move the clock far enough; the others were waited for
                    // only to read more.
                    break;
                }
                let missing = (0..N)
                    .filter(|&r| got[r] < 2)
                    .map(|r| {
                        let why = failed[r].clone().unwrap_or_else(|| {
                            "no answer before the deadline (--timeout-ms)".into()
                        });
                        self.describe(r, Some(why))
                    })
                    .collect();
                return Err(Error::NoQuorum {
                    what: "read of the lock's entries at start".into(),
                    need,
                    got: answered as u8,
                    missing,
                });
            };
            if d.op != 0 {
                continue;
            }
            let r = d.from.0 as usize;
            match d.result {
                Ok(Reply::Answer { rows, .. }) => {
                    for cell in rows.iter().flatten().flatten() {
                        max = max.max(cell.ts.0);
                    }
                    if failed[r].is_none() {
                        got[r] += 1;
                    }
                }
                Ok(Reply::Ack { .. }) => failed[r] = Some("acknowledged a read".into()),
                Err(e) => {
                    self.note_failure(d.from, &e);
                    failed[r] = Some(e.to_string());
                }
            }
        }
        self.client.advance_clock(Ts(max));
        Ok(())
    }
}

/// Whether a client in `phase` works a queue (scans for, gives up or removes an item).
fn is_queue(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Scan | Phase::ScanSleep | Phase::GiveUp | Phase::ReadDetails | Phase::Remove { .. }
    )
}

/// Where a client stands, in words, for a timeout's message (the bakery algorithm's lines,
/// `kernel/src/bakery/client.rs`).
fn phase_text(phase: Phase) -> String {
    match phase {
        Phase::Idle => "not started".into(),
        Phase::Scan => "scanning for a free item".into(),
        Phase::ScanSleep => "no item was free".into(),
        Phase::Choose => "choosing a number (line 1)".into(),
        Phase::ReadMax => "reading the numbers to take a larger one (line 2)".into(),
        Phase::TakeNumber => "writing its number (line 4)".into(),
        Phase::Unchoose => "ending its choice (line 5)".into(),
        Phase::ReadChoosing => "reading who is choosing (line 6)".into(),
        Phase::ReadNumbers => "reading the numbers (line 7)".into(),
        Phase::WaitChoosing { id, .. } => {
            format!("waiting for client {id} to finish choosing its number (lines 9-11)")
        }
        Phase::RereadNumbers { id } => {
            format!("reading the numbers again before comparing with client {id}")
        }
        Phase::WaitNumber { id, .. } => {
            format!("waiting for client {id}, whose number comes first (lines 13-15)")
        }
        Phase::GiveUp => "giving up an item another worker handles".into(),
        Phase::ReadDetails => "checking that the item still exists".into(),
        Phase::Held => "holding".into(),
        Phase::Exit => "releasing (line 19)".into(),
        Phase::Remove { .. } => "removing a finished item".into(),
    }
}
