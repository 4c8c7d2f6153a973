//! The bakery in the simulator (`docs/benchmarks.md`, "In the simulator, against the token
//! engine and a central lock server"): `C` kernel bakery clients
//! ([`hilock_kernel::bakery::Client`], [`Variant::HILOCK`] unless told otherwise)
//! contending on one lock over a simulated quorum store of [`REPLICAS`] kernel replicas
//! ([`hilock_kernel::bakery::Replica`]), R = W = 2, next to the token engine on the same
//! workload in the same timing loop.
//!
//! - **Sites.** [`BakerySite`] is a client (nodes `0..C`, bakery client id = node + 1;
//!   column 0 is the work queue's marker) or a replica (nodes `C..C + 3`) behind the
//!   kernel's [`Protocol`] interface, so that the one harness ([`hilock_harness::Cluster`])
//!   routes and delivers every request and answer and checks mutual exclusion
//!   ([`hilock_harness::Cluster::check_exclusive`]) after every grant. The site only
//!   translates: a kernel `Send` to replica `r` is a message to node `C + r`, a replica's
//!   reply goes back to the sender, `Entered` is the grant. Every rule of the seed runs in
//!   the kernel.
//! - **Workload and timing.** The simulator's own loop ([`token::run_sites`]) with
//!   [`Mix::OneLockW`]: every client loops acquire, hold (the critical section, `hold`
//!   message delays), release, and acquires again at once (no think time); every message
//!   takes one message delay (mean 1,000 µs of simulated time, uniform within ±`jitter`),
//!   FIFO per pair of nodes. Replicas are passive nodes ([`Driven::active`]). An `Acquire`
//!   that comes while the client's line-19 write is still in flight waits for it (the
//!   kernel client does one thing at a time).
//! - **"Sleep a little"** is the simulator's poll ([`Driven::wants_poll`]): a client that
//!   the kernel put to sleep (lines 9–16) is woken (the kernel client's `Input::Wake`) after `poll` message
//!   delays and re-reads.
//! - **Leases.** The corrected variant has leases, but no time passes for the clients (no
//!   `Tick`): the lease is taken to be far longer than any wait here (the runtime's is 2 s
//!   against waits of tens of ms), so no entry expires and no renewal is sent. Renewal
//!   traffic is not in these figures.
//! - **The token engine** on the same workload: `C` hilock sites ([`Site`], the thesis's
//!   forwarding, [`hilock_kernel::Variant::HILOCK`]), all locking lock 0 in W, in the same
//!   loop with the same [`Config`] (node 0 starts with the token).
//! - **A central lock server** on three members (leader + two followers, commit on a
//!   majority), the etcd stand-in ([`crate::central`], what it models and what not), on the
//!   same workload in the same loop.

use crate::adapter::{all_or_nothing, exclusive_held};
use crate::central::CentralSite;
use crate::token::{self, Config, Driven, Mix, PrioMode, Proto, RelayClass, Requester, Stats};
use hilock_harness::Invariants;
use hilock_harness::VecSink;
use hilock_kernel::bakery::{
    BakeryError, Client, ClientId, ClientOutput, Config as BakeryConfig, Input as BInput, Phase,
    Program, Replica, ReplicaId, Reply, Request, Row, Variant,
};
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink, Site,
};

/// Replicas of the store.
pub const REPLICAS: usize = 3;
/// Read and write quorum.
pub const QUORUM: u8 = 2;
/// Columns of a family: column 0 (the work queue's `0=0` marker) and one per client. The
/// kernel client keeps per-column bitmasks in a `u32`, so 32 is its limit.
pub const COLUMNS: usize = 32;
/// Most clients: one per column but column 0.
pub const MAX_CLIENTS: usize = COLUMNS - 1;
/// Quorum operations of an uncontended acquire (seed lines 1, 2, 4, 5, 6, 7) and of a
/// release (line 19).
pub const OPS_ACQUIRE: u64 = 6;
/// Quorum operations of a release (line 19).
pub const OPS_RELEASE: u64 = 1;

type BClient = Client<REPLICAS, 1, COLUMNS>;
type BReplica = Replica<1, COLUMNS>;
/// A replica's reply in this store.
pub type BReply = Reply<1, COLUMNS>;

/// A message between a bakery client and a replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BakeryMsg {
    /// Client → replica.
    Req(Request),
    /// Replica → client (boxed: an answer carries a whole family).
    Rep(Box<BReply>),
}

impl Requester for BakeryMsg {
    fn requester(&self) -> Option<NodeId> {
        None
    }
}

/// What one client counted over the whole run (warm-up included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Acquires granted (`Entered`).
    pub acquires: u64,
    /// Quorum operations started between `Acquire` and `Entered` (one request to every
    /// replica each).
    pub acquire_ops: u64,
    /// Quorum operations started by releases (line 19).
    pub release_ops: u64,
    /// "Sleep a little" waits between `Acquire` and `Entered` (each is followed by a poll
    /// and a re-read).
    pub sleeps: u64,
    /// Answers to reads the client received (every replica answers, also after the
    /// quorum is reached).
    pub answers: u64,
    /// Entries (non-empty cells) in those answers: the data the client read.
    pub entries_read: u64,
    /// Leases lost or attempts abandoned (none can happen without ticks; counted to show it).
    pub lost: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.acquires += o.acquires;
        self.acquire_ops += o.acquire_ops;
        self.release_ops += o.release_ops;
        self.sleeps += o.sleeps;
        self.answers += o.answers;
        self.entries_read += o.entries_read;
        self.lost += o.lost;
    }
}

#[derive(Clone, Debug)]
enum Role {
    Client {
        c: Box<BClient>,
        /// In the critical section (from `Entered` to the `Release` input).
        held: bool,
        /// Between `Acquire` and `Entered`.
        acquiring: bool,
        /// An `Acquire` came while line 19 was in flight; started at `Exited`.
        queued: bool,
        counts: Counts,
    },
    Replica(Box<BReplica>),
}

/// A bakery client or a replica as a [`Protocol`] site for the one harness.
#[derive(Clone, Debug)]
pub struct BakerySite {
    id: NodeId,
    /// Node of replica 0 (replica `r` is node `base + r`).
    base: u16,
    /// "Sleep a little", in message delays.
    poll: f64,
    role: Role,
}

fn kerr(e: BakeryError, id: NodeId) -> KernelError {
    match e {
        BakeryError::OutputsFull => KernelError::OutputsFull,
        BakeryError::UnknownReplica(r) => KernelError::UnknownNode(NodeId(r.0 as u16)),
        _ => KernelError::UnknownNode(id),
    }
}

impl BakerySite {
    /// Node `i` of a system of `clients` clients and [`REPLICAS`] replicas: a client for
    /// `i < clients` running `variant`, else a replica. `poll` is "sleep a little" in message
    /// delays.
    pub fn new(i: usize, clients: usize, variant: Variant, poll: f64) -> Result<Self, String> {
        if clients == 0 || clients > MAX_CLIENTS || i >= clients + REPLICAS {
            return Err(format!(
                "bakery: node {i} of {clients} clients (1..={MAX_CLIENTS}) + {REPLICAS} replicas"
            ));
        }
        let role = if i < clients {
            let cfg = BakeryConfig {
                r: QUORUM,
                w: QUORUM,
                variant,
                // No ticks reach the clients (see the module text): the lease values only
                // have to be valid.
                lease: 200,
                expiry: 200,
                renew_below: 50,
                program: Program::Lock { row: Row(0) },
            };
            let c = BClient::new(ClientId(i as u16 + 1), cfg).map_err(|e| e.to_string())?;
            Role::Client {
                c: Box::new(c),
                held: false,
                acquiring: false,
                queued: false,
                counts: Counts::default(),
            }
        } else {
            Role::Replica(Box::new(BReplica::new()))
        };
        Ok(BakerySite {
            id: NodeId(i as u16),
            base: clients as u16,
            poll,
            role,
        })
    }

    /// The client's counters (`None` for a replica).
    pub fn counts(&self) -> Option<Counts> {
        match &self.role {
            Role::Client { counts, .. } => Some(*counts),
            Role::Replica(_) => None,
        }
    }

    /// The kernel client (`None` for a replica).
    pub fn client(&self) -> Option<&BClient> {
        match &self.role {
            Role::Client { c, .. } => Some(c),
            Role::Replica(_) => None,
        }
    }

    /// One kernel client step and what follows from it (a queued `Acquire` after
    /// `Exited`); outputs translated into `sends`.
    fn client_step(
        &mut self,
        input: BInput<'_, 1, COLUMNS>,
        sends: &mut Vec<Output<BakeryMsg>>,
    ) -> Result<(), BakeryError> {
        let base = self.base;
        let Role::Client {
            c,
            held,
            acquiring,
            queued,
            counts,
        } = &mut self.role
        else {
            return Err(BakeryError::WrongProgram);
        };
        let mut next = Some(input);
        while let Some(input) = next.take() {
            if matches!(input, BInput::Acquire) {
                *acquiring = true;
            }
            let mut out: VecSink<ClientOutput> = VecSink::new();
            c.step(input, &mut out)?;
            for o in out.0 {
                match o {
                    ClientOutput::Send { to, req } => {
                        if to == ReplicaId(0) {
                            if *acquiring {
                                counts.acquire_ops += 1;
                            } else {
                                counts.release_ops += 1;
                            }
                        }
                        sends.push(Output::Send {
                            to: NodeId(base + to.0 as u16),
                            msg: BakeryMsg::Req(req),
                        });
                    }
                    ClientOutput::Entered { .. } => {
                        *held = true;
                        *acquiring = false;
                        counts.acquires += 1;
                        sends.push(Output::Granted {
                            lock: LockId(0),
                            mode: Mode::W,
                        });
                    }
                    ClientOutput::Exited { .. } => {
                        if *queued {
                            *queued = false;
                            next = Some(BInput::Acquire);
                        }
                    }
                    ClientOutput::Sleep => counts.sleeps += 1,
                    ClientOutput::Lost { .. } | ClientOutput::Abandoned { .. } => counts.lost += 1,
                    ClientOutput::Completed { .. } => {}
                }
            }
        }
        Ok(())
    }
}

impl Protocol for BakerySite {
    type Msg = BakeryMsg;
    const MAX_OUTPUTS: usize = 2 * (REPLICAS + 2) + 2;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<BakeryMsg>>>(
        &mut self,
        input: Input<'_, BakeryMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        if out.room() < Self::MAX_OUTPUTS {
            return Err(KernelError::OutputsFull);
        }
        let id = self.id;
        all_or_nothing(self, out, |site, sends| {
            // First what the input asks of the kernel client (checks that change nothing),
            // then the step.
            let client_input: Option<BInput<'_, 1, COLUMNS>> = match (&mut site.role, input) {
                (Role::Replica(rep), Input::Deliver { from, msg }) => {
                    let BakeryMsg::Req(req) = msg else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    let mut replies: VecSink<BReply> = VecSink::new();
                    rep.step(req, &mut replies).map_err(|e| kerr(e, id))?;
                    for reply in replies.0 {
                        sends.push(Output::Send {
                            to: from,
                            msg: BakeryMsg::Rep(Box::new(reply)),
                        });
                    }
                    None
                }
                (Role::Replica(_), _) => return Err(KernelError::InvalidMode),
                (Role::Client { counts, .. }, Input::Deliver { from, msg }) => {
                    let BakeryMsg::Rep(reply) = msg else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    let Some(r) = from
                        .0
                        .checked_sub(site.base)
                        .filter(|r| *r < REPLICAS as u16)
                    else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    if let BReply::Answer { rows, .. } = &**reply {
                        counts.answers += 1;
                        counts.entries_read += rows.iter().flatten().flatten().count() as u64;
                    }
                    Some(BInput::Reply {
                        from: ReplicaId(r as u8),
                        reply: &**reply,
                    })
                }
                (
                    Role::Client {
                        held,
                        acquiring,
                        queued,
                        c,
                        ..
                    },
                    Input::Acquire { lock, mode },
                ) => {
                    if lock != LockId(0) {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if mode == Mode::Phi {
                        return Err(KernelError::InvalidMode);
                    }
                    if *held {
                        return Err(KernelError::AlreadyHeld(lock));
                    }
                    if *acquiring || *queued {
                        return Err(KernelError::AlreadyPending(lock));
                    }
                    if c.phase() != Phase::Idle {
                        // Line 19 in flight: start when it is done.
                        *queued = true;
                        None
                    } else {
                        Some(BInput::Acquire)
                    }
                }
                (Role::Client { held, .. }, Input::Release { lock }) => {
                    if lock != LockId(0) {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if !*held {
                        return Err(KernelError::NotHeld(lock));
                    }
                    *held = false;
                    Some(BInput::Release)
                }
                // The simulator's poll: "sleep a little" is over.
                (Role::Client { c, .. }, Input::Upgrade { lock }) => {
                    if lock != LockId(0) || !c.phase().sleeping() {
                        return Err(KernelError::NotHoldingU(lock));
                    }
                    Some(BInput::Wake)
                }
                // No priorities, no try-lock, no cancel, no downgrade and no value block
                // in the bakery simulator.
                (
                    Role::Client { .. },
                    Input::SetPriority { .. }
                    | Input::TryAcquire { .. }
                    | Input::Cancel { .. }
                    | Input::Downgrade { .. }
                    | Input::SetValue { .. },
                ) => return Err(KernelError::InvalidMode),
            };
            match client_input {
                Some(i) => site.client_step(i, sends).map_err(|e| kerr(e, id)),
                None => Ok(()),
            }
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        exclusive_held(
            lock == LockId(0),
            matches!(&self.role, Role::Client { held: true, .. }),
            KernelError::UnknownLock(lock),
        )
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock)?;
        Ok(matches!(
            &self.role,
            Role::Client {
                acquiring: true,
                ..
            } | Role::Client { queued: true, .. }
        ))
    }

    fn kind(msg: &BakeryMsg) -> MsgKind {
        match msg {
            BakeryMsg::Req(_) => MsgKind::Request,
            BakeryMsg::Rep(_) => MsgKind::Grant,
        }
    }

    fn lock_of(_msg: &BakeryMsg) -> LockId {
        LockId(0)
    }
}

impl RelayClass for BakerySite {
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

impl Invariants for BakerySite {}

impl Driven for BakerySite {
    fn stat_kind(msg: &BakeryMsg) -> usize {
        match msg {
            BakeryMsg::Req(_) => 0,
            BakeryMsg::Rep(_) => 1,
        }
    }
    fn wants_poll(&self) -> Option<LockId> {
        match &self.role {
            Role::Client { c, .. } if c.phase().sleeping() => Some(LockId(0)),
            _ => None,
        }
    }
    fn active(&self) -> bool {
        matches!(self.role, Role::Client { .. })
    }
    fn poll_interval(&self) -> f64 {
        self.poll
    }
    const CHECK_EXCLUSIVE: bool = true;
}

/// The workload of one comparison row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Clients contending on the lock (1..=[`MAX_CLIENTS`]).
    pub clients: usize,
    /// Critical section, in message delays (mean; jittered like the messages).
    pub hold: f64,
    /// "Sleep a little" of the bakery, in message delays.
    pub poll: f64,
    /// Relative half-width of the uniform jitter of messages and holds.
    pub jitter: f64,
    /// Warm-up acquires per client (not measured).
    pub warmup_per_client: u64,
    /// Measured acquires per client.
    pub per_client: u64,
    /// Seed.
    pub seed: u64,
}

impl Workload {
    /// The defaults of the `simulate --experiments bakery` table for `clients` clients:
    /// hold 2 message delays, "sleep a little" 2 message delays, ±1/3 jitter, 5 warm-up and
    /// 40 measured acquires per client.
    pub fn new(clients: usize) -> Workload {
        Workload {
            clients,
            hold: 2.0,
            poll: 2.0,
            jitter: 1.0 / 3.0,
            warmup_per_client: 5,
            per_client: 40,
            seed: 1,
        }
    }

    /// The simulator's configuration for `n` nodes (one message delay = 1 ms of simulated
    /// time).
    fn config(&self, n: usize) -> Config {
        Config {
            proto: Proto::Hilock,
            prio: PrioMode::Off,
            n,
            ratio: 0.0,
            cs_ms: self.hold,
            latency_ms: 1.0,
            jitter: self.jitter,
            warmup_accesses: self.warmup_per_client * self.clients as u64,
            measured_accesses: self.per_client * self.clients as u64,
            seed: self.seed,
            mix: Mix::OneLockW,
        }
    }
}

/// What a bakery run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct BakeryStats {
    /// The simulator's window statistics (messages: index 0 requests to replicas, 1
    /// answers and acknowledgements; latencies; grants checked for mutual exclusion).
    pub sim: Stats,
    /// The clients' counters summed (whole run).
    pub counts: Counts,
}

impl BakeryStats {
    /// Messages (requests and answers) per acquire+release, over the window.
    pub fn messages_per_acquire(&self) -> f64 {
        self.sim.per_request()
    }
    /// Quorum operations from `Acquire` to `Entered`, per acquire.
    pub fn ops_per_acquire(&self) -> f64 {
        self.counts.acquire_ops as f64 / self.counts.acquires.max(1) as f64
    }
    /// "Sleep a little" waits per acquire.
    pub fn sleeps_per_acquire(&self) -> f64 {
        self.counts.sleeps as f64 / self.counts.acquires.max(1) as f64
    }
    /// Entries read (cells in the answers received) per acquire.
    pub fn entries_per_acquire(&self) -> f64 {
        self.counts.entries_read as f64 / self.counts.acquires.max(1) as f64
    }
}

/// Runs the bakery (`variant`) on `w` in the simulator. A violation of mutual exclusion
/// or a kernel error ends the run with an error.
pub fn run_bakery(w: &Workload, variant: Variant) -> Result<BakeryStats, String> {
    let n = w.clients + REPLICAS;
    let sites = (0..n)
        .map(|i| BakerySite::new(i, w.clients, variant, w.poll))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, cluster) =
        token::run_sites(&w.config(n), sites).map_err(|e| format!("bakery: {e}"))?;
    let mut counts = Counts::default();
    for s in cluster.sites() {
        if let Some(c) = s.counts() {
            counts.add(&c);
        }
    }
    Ok(BakeryStats { sim: st, counts })
}

/// The token engine's site in this comparison: up to [`MAX_CLIENTS`] nodes, one lock.
pub type TokenSite = Site<32, 1, 32>;

/// Runs the token engine (`C` hilock sites, one lock, every access W) on `w`.
pub fn run_token(w: &Workload) -> Result<Stats, String> {
    let n = w.clients;
    if n == 0 || n > MAX_CLIENTS {
        return Err(format!("token engine: {n} clients (1..={MAX_CLIENTS})"));
    }
    let sites = (0..n)
        .map(|i| TokenSite::new(NodeId(i as u16), NodeId(0)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, _) = token::run_sites(&w.config(n), sites).map_err(|e| format!("token: {e}"))?;
    Ok(st)
}

/// Runs the central lock server ([`crate::central`]: `C` clients, a leader and two
/// followers) on `w`.
pub fn run_central(w: &Workload) -> Result<Stats, String> {
    let n = w.clients + 3;
    let sites = (0..n)
        .map(|i| CentralSite::new(i, w.clients))
        .collect::<Result<Vec<_>, _>>()?;
    let (st, _) = token::run_sites(&w.config(n), sites).map_err(|e| format!("central: {e}"))?;
    Ok(st)
}

/// One row of the comparison: the bakery and the token engine on the same workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The workload.
    pub workload: Workload,
    /// The bakery ([`Variant::HILOCK`]).
    pub bakery: BakeryStats,
    /// The token engine.
    pub token: Stats,
    /// The central lock server on 3 members ([`crate::central`], the etcd stand-in).
    pub central: Stats,
}

/// Runs both systems on `w`.
pub fn compare(w: &Workload) -> Result<Comparison, String> {
    Ok(Comparison {
        workload: *w,
        bakery: run_bakery(w, Variant::HILOCK)?,
        token: run_token(w)?,
        central: run_central(w)?,
    })
}

/// The markdown table of `rows` (`docs/benchmarks.md` quotes it). Latencies in message delays.
pub fn markdown(rows: &[Comparison]) -> String {
    let d = |us: u64| us as f64 / 1000.0;
    let mut s = String::from(
        "| clients | bakery messages / acquire+release | bakery quorum ops / acquire | bakery sleeps / acquire | bakery entries read / acquire | bakery latency p50 / p99 | token engine messages / acquire+release | token engine latency p50 / p99 | central server messages / acquire+release | central server latency p50 / p99 | acquires measured (each) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (b, t, z) = (&r.bakery, &r.token, &r.central);
        s.push_str(&format!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {} / {} / {} |\n",
            r.workload.clients,
            b.messages_per_acquire(),
            b.ops_per_acquire(),
            b.sleeps_per_acquire(),
            b.entries_per_acquire(),
            d(b.sim.latency_quantile_us(0.5)),
            d(b.sim.latency_quantile_us(0.99)),
            t.per_request(),
            d(t.latency_quantile_us(0.5)),
            d(t.latency_quantile_us(0.99)),
            z.per_request(),
            d(z.latency_quantile_us(0.5)),
            d(z.latency_quantile_us(0.99)),
            b.sim.latencies_us.len(),
            t.latencies_us.len(),
            z.latencies_us.len(),
        ));
    }
    s
}
