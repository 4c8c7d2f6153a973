//! The bakery design (the bakery over quorum reads and writes, and its work queue) as a Stateright
//! model that drives `hilock_kernel::bakery` clients and replicas: 2–3 clients, 3
//! replicas, R and W as parameters, every interleaving, an unordered network with
//! arbitrary delay, client crashes as an action, and time as a `Tick` action. The model
//! only routes: every rule of the seed runs in the kernel ([`Client::step`],
//! [`Replica::step`]).
//!
//! # Adversaries (each bounded by a field of [`BakeryModel`], 0 = off)
//! - [`BAction::Crash`]: a client crashes (anywhere, or only after its number). A client
//!   that gives up at its deadline is, to the replicas, the same: the runtime's `acquire`
//!   returns an error with its requests still in flight and sends nothing more.
//! - [`BAction::Restart`]: a crashed client starts again under its id, its clock moved
//!   past what it reads ([`Client::advance_clock`]), at once or once its earlier run's
//!   requests are gone ([`RestartAt`]).
//! - [`BAction::Duplicate`]: the network copies a request.
//! - [`BAction::Lose`]: a request or its answer is lost; the runtime resends a request of
//!   an outstanding operation, so the kernel, which has no timeout input, never needs one.
//! - [`BAction::CrashReplica`]: a replica stops for ever.
//! - [`BAction::Cut`]: a link between a client and a replica is cut for ever.
//!
//! # State
//! The kernel replicas and clients, the requests in flight (a sorted multiset: delivery
//! order is not state), the ticks and crashes used, and ghost fields (last fencing token
//! per row, completions per item, the first fencing violation, the first kernel error).
//!
//! # Reductions (each exact for the properties below)
//! - A replica's reply is handed to the client in the same step in which the replica
//!   handles the request. A reply is an immutable snapshot and the client does nothing
//!   else while it waits, so delaying the reply only delays the client's next send, whose
//!   own delivery is already arbitrary; a crash can still come in between.
//! - Requests of operations the client no longer waits for are renamed to operation 0 (the
//!   client ignores their replies); such reads are dropped (a read changes no replica), and
//!   such writes are dropped once their replica holds a cell that wins over them
//!   (delivering them would change nothing). Outstanding operations are renamed 1 and 2
//!   ([`Client::compact_ops`]).
//! - Write timestamps are renamed to the least values with the same order and the same
//!   adjacency ([`Renaming`]): last-write-wins only compares timestamps and a client only
//!   writes its clock plus one.
//! - Replicas are interchangeable: every state is replaced by the one whose replicas are
//!   sorted by (contents, requests in flight to them, which outstanding operations they
//!   answered). Stateright 0.31's BFS ignores `symmetry_fn`, so this is done in
//!   `next_state` itself; paths replay exactly because `next_state` is deterministic.
//!
//! # Properties
//! - `mutual exclusion`: no two live clients hold the lock (the same work item) at once.
//! - `fencing tokens increase`: every entry's ticket is larger than the previous entry's
//!   on that row.
//! - `no kernel error`: every input was accepted.
//! - `no item completed twice` (queue).
//! - `every waiting client eventually enters` (`Property::eventually`): every live client
//!   does its critical sections (lock), every item is completed (queue). Stateright 0.31
//!   evaluates `eventually` only at terminal states and can miss counterexamples at DAG
//!   joins and on cycles; it is exact here because (a) the condition ([`BakerySystem::finished`])
//!   is stable — once true it stays true on every extension — so the bits Stateright
//!   carries along a path equal the condition of the state itself, whatever path reached
//!   it; and (b) the model makes a *blocked* state terminal: nothing in flight, every live
//!   unfinished client asleep in a waiting loop (lines 9–16, or the queue's scan), no
//!   quorum of `R` replicas could answer any of them a read that lets it out, and time
//!   cannot help (leases off, no tick left, or not its turn). In such a state `Wake` is
//!   not offered (its re-reads return what the client knows), so it has no successor.
//!   Every other state has a successor that makes progress under fair delivery, so a
//!   terminal state is finished or blocked, and a blocked unfinished state is a client
//!   that waits for ever. Cycles of re-reads that never change anything are unfair paths
//!   and are not counterexamples. One gap: while crashes are left, crashing the waiting
//!   client is a way out of a blocked state, so deadlocks are checked with `crashes = 0`
//!   or with the crash budget used up. With restarts left, a crashed client's `Restart`
//!   is always enabled, so liveness there assumes that it does start again.
//! - `sometimes`: a client enters; every client finishes; a client enters after another
//!   crashed; a lease is lost; the tick horizon is reached while every client is blocked.
//!
//! # Time
//! [`Timing::None`]: no ticks (variants without leases). [`Timing::Free`]: a tick may come
//! between any two steps, up to a horizon (safety of leases against arbitrary delays).
//! [`Timing::Synchronous`]: a tick comes only when every live client is blocked (message
//! delays and processing are shorter than a tick) — the assumption under which a lease
//! protocol can promise liveness at all. Every client counts the same ticks: clock rates
//! do not drift in the model (a drift bound ρ is a margin `expiry ≥ lease · (1 + ρ)`).

use crate::check::Counterexample;
use hilock_kernel::bakery::store::Columns;
use hilock_kernel::bakery::{
    BakeryError, Cell, Client, ClientId, ClientOutput, Config, Family, Input, Phase, Program,
    Renaming, Replica, ReplicaId, Reply, Request, Row, Ticket, Ts, Value, Variant,
};
use serde::Serialize;
use stateright::{Checker, HasDiscoveries, Model, Path, Property};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Replicas.
pub const NR: usize = 3;
/// Most rows: up to two items, plus `lock_id` for the literal queue.
pub const MAX_ROWS: usize = 3;
type Outs = heapless::Vec<ClientOutput, 8>;

/// Property names.
pub const MUTEX: &str = "mutual exclusion";
/// Property name.
pub const FENCING: &str = "fencing tokens increase";
/// Property name.
pub const NO_ERROR: &str = "no kernel error";
/// Property name.
pub const ONCE: &str = "no item completed twice";
/// The `always` properties.
pub const SAFETY: [&str; 4] = [MUTEX, FENCING, NO_ERROR, ONCE];
/// The `eventually` property.
pub const LIVE: &str = "every waiting client eventually enters";
/// `sometimes`: a client enters.
pub const ENTERS: &str = "a client enters";
/// `sometimes`: final state.
pub const FINISHES: &str = "every client finishes";
/// `sometimes`: entered after a crash.
pub const AFTER_CRASH: &str = "a client enters after another crashed";
/// `sometimes`: lease lost.
pub const LEASE_LOST: &str = "a lease is lost";
/// `sometimes`: horizon.
pub const HORIZON: &str = "tick horizon reached while blocked";
/// `sometimes`: a ticket at [`BakeryModel::max_number`] (the bound may have cut paths).
pub const BOUND: &str = "a ticket reaches the bound";
/// The `sometimes` properties.
pub const REACHED: [&str; 6] = [ENTERS, FINISHES, AFTER_CRASH, LEASE_LOST, HORIZON, BOUND];

/// What the clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Mode {
    /// The lock (row 0), `rounds` critical sections per client.
    Lock {
        /// Critical sections per client.
        rounds: u8,
    },
    /// The work queue with `items` items enqueued on every replica before the run.
    Queue {
        /// Items (1 or 2).
        items: u8,
    },
}

/// When time passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Timing {
    /// Never (no leases).
    None,
    /// Between any two steps, at most `horizon` ticks in all.
    Free {
        /// Ticks in all.
        horizon: u8,
    },
    /// Only when every live client is blocked, at most `horizon` ticks in all.
    Synchronous {
        /// Ticks in all.
        horizon: u8,
    },
}

/// Where a client may crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum CrashAt {
    /// In any state.
    Anywhere,
    /// Only after its number is written and before it is given back (the seed's "if a
    /// client crashes after setting its number"): [`Phase::numbered`].
    AfterNumber,
}

/// When a crashed client may start again under its id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum RestartAt {
    /// At once, while requests of its earlier run may still be in flight: a wrapper that
    /// gives up at its deadline gives its id's registration back at once
    /// (`cli/src/bakery.rs`, `Kept::end`), so a new client with that id may start then.
    #[default]
    AtOnce,
    /// Once no request of its earlier run is in flight: after a crash the id's
    /// registration (`runtime/src/bakery/ident.rs`) lives on for a lease before a new
    /// client can take the id, and with message delays shorter than a tick (the
    /// synchronous assumption of the lease checks) every request of the earlier run has
    /// landed or is lost by then.
    Quiet,
}

impl RestartAt {
    fn is_default(&self) -> bool {
        *self == RestartAt::default()
    }
}

/// Adversaries off are left out of saved configurations (traces saved before they
/// existed read them as off).
fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// A configuration of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BakeryModel {
    /// Name.
    pub name: String,
    /// Clients (2 or 3), ids 1..=clients.
    pub clients: u8,
    /// Read quorum.
    pub r: u8,
    /// Write quorum.
    pub w: u8,
    /// Variant.
    pub variant: Variant,
    /// Lock or queue.
    pub mode: Mode,
    /// Client crashes allowed in all.
    pub crashes: u8,
    /// Where crashes may happen.
    pub crash_at: CrashAt,
    /// Time.
    pub timing: Timing,
    /// Lease, expiry, renew-below (ticks).
    pub lease: (u8, u8, u8),
    /// States in which a client drew a ticket above this are not explored
    /// (`within_boundary`): a give-up loop with tickets kept (`keep_tickets`) draws ever
    /// larger numbers, an infinite state space. [`BOUND`] tells whether the bound cut.
    pub max_number: u32,
    /// Requests the network may copy in all ([`BAction::Duplicate`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicates: u8,
    /// Requests or answers the network may lose in all ([`BAction::Lose`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub losses: u8,
    /// Replicas that may crash in all ([`BAction::CrashReplica`]); liveness is promised
    /// only up to `N − max(R, W)`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replica_crashes: u8,
    /// Crashed clients that may start again under their id in all ([`BAction::Restart`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u8,
    /// When a restart may come.
    #[serde(default, skip_serializing_if = "RestartAt::is_default")]
    pub restart_at: RestartAt,
    /// Links between a client and a replica that may be cut for ever in all
    /// ([`BAction::Cut`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cuts: u8,
}

/// One client in the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CState<const K: usize, const C: usize> {
    /// The kernel client.
    pub c: Client<NR, K, C>,
    /// Crashed (its state is reset: it is no longer observable).
    pub crashed: bool,
    /// Critical sections finished (exited or lost) — lock.
    pub rounds: u8,
}

/// A state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BState<const K: usize, const C: usize> {
    /// Clients `0..clients` (id = index + 1).
    pub clients: Vec<CState<K, C>>,
    /// Replicas.
    pub replicas: Vec<Replica<K, C>>,
    /// Requests in flight: (client index, replica, request), sorted.
    pub net: Vec<(u8, u8, Request)>,
    /// Ticks so far.
    pub ticks: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Copies made so far.
    pub duplicated: u8,
    /// Requests or answers lost so far.
    pub lost: u8,
    /// Crashed replicas (bit `r`).
    pub down: u8,
    /// Per client, the replicas it can no longer reach (bit `r`).
    pub cut: Vec<u8>,
    /// Restarts so far.
    pub restarted: u8,
    /// Ghost: last fencing token per row.
    pub last_token: [Option<Ticket>; K],
    /// Ghost: a token that was not larger than its predecessor (new, previous).
    pub fencing_violation: Option<(Ticket, Ticket)>,
    /// Ghost: completions per item.
    pub completed: [u8; K],
    /// Ghost: a kernel error.
    pub error: Option<BakeryError>,
    /// Ghost: the last step let a client enter after a crash.
    pub entered_after_crash: bool,
    /// Ghost: the last step lost a lease.
    pub lease_lost: bool,
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BAction {
    /// Client starts (`Acquire` / `Work`).
    Start(u8),
    /// Client leaves the critical section (`Release` / `Done`).
    Release(u8),
    /// Client wakes from "sleep a little".
    Wake(u8),
    /// A request reaches its replica; the reply goes back to the client.
    Deliver(u8, u8, Request),
    /// Client crashes.
    Crash(u8),
    /// The network copies a request in flight (bounded by [`BakeryModel::duplicates`]).
    Duplicate(u8, u8, Request),
    /// A request or its answer is lost (bounded by [`BakeryModel::losses`]). The runtime
    /// resends a request of an outstanding operation to a replica that did not answer in
    /// time (`runtime/src/bakery/lock.rs`, `fire_retries`), so for such a request the loss
    /// that changes anything is that of the answer: the replica applies the write, the
    /// client hears nothing and the request stays in flight (the resend). A request of an
    /// operation nobody waits for (operation 0: a finished operation's, a crashed
    /// client's) is not resent: it is dropped.
    Lose(u8, u8, Request),
    /// A replica crashes: it stops answering; what is in flight to it and everything sent
    /// to it later is dropped (the runtime asks it again for ever, in vain).
    CrashReplica(u8),
    /// A crashed client starts again under its id: a new kernel client whose Lamport
    /// clock is moved past the largest timestamp it reads from the live replicas (the
    /// `u32`; `BakeryLock::sync_clock` in the runtime) and that it can reach, at once or
    /// once no request of its earlier run is in flight ([`RestartAt`]).
    Restart(u8, u32),
    /// The link between a client and a replica is cut for ever (a partition that does not
    /// heal; one that heals only delays messages, which the network does anyway, and the
    /// runtime resends): what is in flight on it and everything the client sends over it
    /// later is dropped.
    Cut(u8, u8),
    /// One tick of time.
    Tick,
}

/// A configuration with its state sizes: `K` rows, `C` columns (client ids `1..C`). The
/// model [`BakeryModel::check`] runs; [`std::ops::Deref`] gives the configuration.
#[derive(Clone, Debug)]
pub struct BakerySystem<const K: usize, const C: usize>(pub BakeryModel);

impl<const K: usize, const C: usize> std::ops::Deref for BakerySystem<K, C> {
    type Target = BakeryModel;
    fn deref(&self) -> &BakeryModel {
        &self.0
    }
}

impl BakeryModel {
    /// A lock configuration without leases and without crashes.
    pub fn lock(name: &str, clients: u8, rounds: u8, r: u8, w: u8, variant: Variant) -> Self {
        BakeryModel {
            name: name.to_string(),
            clients,
            r,
            w,
            variant,
            mode: Mode::Lock { rounds },
            crashes: 0,
            crash_at: CrashAt::Anywhere,
            timing: Timing::None,
            lease: (2, 2, 1),
            max_number: 6,
            duplicates: 0,
            losses: 0,
            replica_crashes: 0,
            restarts: 0,
            restart_at: RestartAt::AtOnce,
            cuts: 0,
        }
    }

    /// A work-queue configuration without leases and without crashes.
    pub fn queue(name: &str, workers: u8, items: u8, r: u8, w: u8, variant: Variant) -> Self {
        BakeryModel {
            mode: Mode::Queue { items },
            ..Self::lock(name, workers, 1, r, w, variant)
        }
    }

    /// With up to `n` client crashes at `at`.
    pub fn with_crashes(mut self, n: u8, at: CrashAt) -> Self {
        self.crashes = n;
        self.crash_at = at;
        self
    }

    /// With up to `n` requests copied by the network.
    pub fn with_duplicates(mut self, n: u8) -> Self {
        self.duplicates = n;
        self
    }

    /// With up to `n` requests or answers lost.
    pub fn with_losses(mut self, n: u8) -> Self {
        self.losses = n;
        self
    }

    /// With up to `n` replica crashes.
    pub fn with_replica_crashes(mut self, n: u8) -> Self {
        self.replica_crashes = n;
        self
    }

    /// With up to `n` restarts of crashed clients under their id, at `at`.
    pub fn with_restarts(mut self, n: u8, at: RestartAt) -> Self {
        self.restarts = n;
        self.restart_at = at;
        self
    }

    /// With up to `n` links cut for ever.
    pub fn with_cuts(mut self, n: u8) -> Self {
        self.cuts = n;
        self
    }

    /// With time.
    pub fn with_timing(mut self, t: Timing) -> Self {
        self.timing = t;
        self
    }

    /// With lease, expiry and renew-below ticks.
    pub fn with_lease(mut self, lease: u8, expiry: u8, renew_below: u8) -> Self {
        self.lease = (lease, expiry, renew_below);
        self
    }

    /// Renamed.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Runs the exhaustive check (BFS, two threads): every property.
    pub fn check(&self) -> BakeryReport {
        self.dispatch(HasDiscoveries::All, 2)
    }

    /// [`Self::check`] on one thread, each `always` counterexample a shortest run: slower,
    /// but the same counterexamples on every run (`hilock check`).
    pub fn check_on_one_thread(&self) -> BakeryReport {
        self.dispatch_with(HasDiscoveries::All, 1, Counterexample::Shortest)
    }

    /// Runs the check until `property` has a discovery (for refutations: the state count
    /// is then not a property of the configuration). One thread, so that the
    /// counterexample is the same on every run.
    pub fn refute(&self, property: &'static str) -> BakeryReport {
        self.dispatch(HasDiscoveries::AnyOf(BTreeSet::from([property])), 1)
    }

    /// The rows and columns the configuration needs: the lock's row (or the items and
    /// `lock_id`), column 0 and one column per client.
    pub fn sizes(&self) -> (usize, usize) {
        let k = match self.mode {
            Mode::Lock { .. } => 1,
            Mode::Queue { items } => items as usize + 1,
        };
        (k, (self.clients as usize + 1).max(3))
    }

    fn dispatch(&self, finish: HasDiscoveries, threads: usize) -> BakeryReport {
        self.dispatch_with(finish, threads, Counterexample::Cut)
    }

    /// [`crate::check::check_model`] of this configuration (`hilock check`): progress
    /// through `progress`, the first violation stops the search, which then goes on to
    /// [`crate::check::DEPTH_AFTER_VIOLATION`] times its depth for the shortest
    /// counterexamples; the bound reached, if the search stopped there.
    pub fn check_with_progress(
        &self,
        progress: impl FnMut(usize, usize, usize),
    ) -> (BakeryReport, Option<usize>) {
        fn run<const K: usize, const C: usize>(
            s: BakerySystem<K, C>,
            progress: impl FnMut(usize, usize, usize),
        ) -> (BakeryReport, Option<usize>) {
            let name = s.name.clone();
            crate::check::check_model(&s, &name, |p, path| s.trace(p, path), progress)
        }
        let m = self.clone();
        match self.sizes() {
            (1, 3) => run(BakerySystem::<1, 3>(m), progress),
            (1, 4) => run(BakerySystem::<1, 4>(m), progress),
            (2, 3) => run(BakerySystem::<2, 3>(m), progress),
            (2, 4) => run(BakerySystem::<2, 4>(m), progress),
            (3, 3) => run(BakerySystem::<3, 3>(m), progress),
            _ => run(BakerySystem::<3, 4>(m), progress),
        }
    }

    fn dispatch_with(
        &self,
        finish: HasDiscoveries,
        threads: usize,
        which: Counterexample,
    ) -> BakeryReport {
        let m = self.clone();
        match self.sizes() {
            (1, 3) => BakerySystem::<1, 3>(m).run(finish, threads, which),
            (1, 4) => BakerySystem::<1, 4>(m).run(finish, threads, which),
            (2, 3) => BakerySystem::<2, 3>(m).run(finish, threads, which),
            (2, 4) => BakerySystem::<2, 4>(m).run(finish, threads, which),
            (3, 3) => BakerySystem::<3, 3>(m).run(finish, threads, which),
            _ => BakerySystem::<3, 4>(m).run(finish, threads, which),
        }
    }
}

impl<const K: usize, const C: usize> BakerySystem<K, C> {
    fn config(&self) -> Config {
        Config {
            r: self.r,
            w: self.w,
            variant: self.variant,
            lease: self.lease.0,
            expiry: self.lease.1,
            renew_below: self.lease.2,
            program: match self.mode {
                Mode::Lock { .. } => Program::Lock { row: Row(0) },
                Mode::Queue { items } => Program::Queue {
                    items,
                    lock_id: Row(K as u8 - 1),
                },
            },
        }
    }

    fn new_client(&self, i: usize) -> Client<NR, K, C> {
        Client::new(ClientId(i as u16 + 1), self.config()).expect("validated configuration")
    }

    /// Checks the configuration (the kernel validates quorums and leases).
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=3).contains(&self.clients) {
            return Err("1 to 3 clients".into());
        }
        if let Mode::Queue { items } = self.mode {
            if !(1..=2).contains(&items) {
                return Err("1 or 2 items".into());
            }
        }
        if self.replica_crashes as usize >= NR {
            return Err("at least one replica stays up".into());
        }
        Client::<NR, K, C>::new(ClientId(1), self.config())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn rounds(&self) -> u8 {
        match self.mode {
            Mode::Lock { rounds } => rounds,
            Mode::Queue { .. } => 1,
        }
    }

    fn is_lock(&self) -> bool {
        matches!(self.mode, Mode::Lock { .. })
    }

    /// Whether a live client has nothing left to do.
    fn client_done(&self, st: &BState<K, C>, cs: &CState<K, C>) -> bool {
        if cs.crashed {
            return true;
        }
        match self.mode {
            Mode::Lock { rounds } => cs.rounds >= rounds && cs.c.phase() == Phase::Idle,
            Mode::Queue { .. } => self.all_items_done(st),
        }
    }

    fn all_items_done(&self, st: &BState<K, C>) -> bool {
        match self.mode {
            Mode::Queue { items } => st.completed[..items as usize].iter().all(|&n| n > 0),
            Mode::Lock { .. } => true,
        }
    }

    /// The goal of the liveness property, and stable: every live client did its critical
    /// sections (lock: a client that finished does nothing more), every item is completed
    /// (queue: completions only grow).
    pub fn finished(&self, st: &BState<K, C>) -> bool {
        st.clients.iter().all(|cs| self.client_done(st, cs)) && self.all_items_done(st)
    }

    /// Whether a sleeping client could leave its loop after `Wake` and some quorum of
    /// `R` replicas answering from their current contents.
    fn could_leave(&self, st: &BState<K, C>, i: usize) -> bool {
        let cs = &st.clients[i];
        let before = cs.c.phase();
        for mask in 0u8..(1 << NR) {
            if mask.count_ones() != self.r as u32 || mask & (st.down | st.cut[i]) != 0 {
                continue;
            }
            let mut c = cs.c.clone();
            let mut out = Outs::new();
            if c.step(Input::Wake, &mut out).is_err() {
                return true;
            }
            let reqs: Vec<(u8, Request)> = out
                .iter()
                .filter_map(|o| match o {
                    ClientOutput::Send { to, req } => Some((to.0, *req)),
                    _ => None,
                })
                .collect();
            for (to, req) in reqs {
                if mask & (1 << to) == 0 {
                    continue;
                }
                let mut rep = st.replicas[to as usize].clone();
                let mut rout: heapless::Vec<Reply<K, C>, 1> = heapless::Vec::new();
                if rep.step(&req, &mut rout).is_err() {
                    return true;
                }
                let mut o2 = Outs::new();
                for reply in &rout {
                    let input = Input::Reply {
                        from: ReplicaId(to),
                        reply,
                    };
                    if c.step(input, &mut o2).is_err() {
                        return true;
                    }
                }
            }
            if c.phase() != before {
                return true;
            }
        }
        false
    }

    /// Nothing in flight, every live unfinished client asleep in a waiting loop, and no
    /// quorum read lets any of them out.
    pub fn blocked(&self, st: &BState<K, C>) -> bool {
        if !st.net.is_empty() {
            return false;
        }
        for (i, cs) in st.clients.iter().enumerate() {
            if cs.crashed || (self.is_lock() && self.client_done(st, cs)) {
                continue;
            }
            let p = cs.c.phase();
            if !p.sleeping() || self.could_leave(st, i) {
                // Not asleep with nothing in flight: it has a step to take (start,
                // release).
                return false;
            }
        }
        true
    }

    /// The clocks a restarted client may start with: the largest timestamp of the lock's
    /// (queue: every) entries on each set of at least `R` live replicas — the runtime's
    /// start-up read (`BakeryLock::sync_clock`) waits for every replica but counts one that
    /// fails or does not answer in time as missing, and needs `R` answers.
    fn restart_clocks(&self, st: &BState<K, C>, i: usize) -> Vec<u32> {
        let mut clocks = BTreeSet::new();
        for mask in 1u8..(1 << NR) {
            if mask & (st.down | st.cut[i]) != 0 || mask.count_ones() < self.r as u32 {
                continue;
            }
            let mut max = 0;
            for (r, rep) in st.replicas.iter().enumerate() {
                if mask & (1 << r) != 0 {
                    rep.timestamps(|t| max = max.max(t.0));
                }
            }
            clocks.insert(max);
        }
        clocks.into_iter().collect()
    }

    /// Whether losing `req` (to `r`) or its answer changes the state: a request nobody
    /// waits for is dropped; for an outstanding operation only a write the replica would
    /// apply changes it (a read's answer lost and resent is the read delayed).
    fn loss_changes(&self, st: &BState<K, C>, r: u8, req: &Request) -> bool {
        match *req {
            _ if req.op() == 0 => true,
            Request::Write {
                row,
                family,
                col,
                cell,
                ..
            } => st.replicas[r as usize]
                .cell(row, family, col)
                .is_none_or(|h| cell.supersedes(&h)),
            Request::Read { .. } => false,
        }
    }

    fn horizon(&self) -> Option<u8> {
        match self.timing {
            Timing::None => None,
            Timing::Free { horizon } | Timing::Synchronous { horizon } => Some(horizon),
        }
    }

    /// The state after one tick, if it differs in a client.
    fn ticked(&self, st: &BState<K, C>) -> Option<BState<K, C>> {
        let h = self.horizon()?;
        if st.ticks >= h {
            return None;
        }
        let mut next = st.clone();
        next.ticks += 1;
        let mut changed = false;
        for i in 0..next.clients.len() {
            if next.clients[i].crashed {
                continue;
            }
            let before = next.clients[i].c.clone();
            let mut out = Outs::new();
            if let Err(e) = next.clients[i].c.step(Input::Tick { elapsed: 1 }, &mut out) {
                next.error = Some(e);
            }
            changed |= next.clients[i].c != before;
            self.route(&mut next, i, &out);
        }
        changed.then_some(next)
    }

    fn horizon_hit(&self, st: &BState<K, C>) -> bool {
        matches!(self.horizon(), Some(h) if st.ticks >= h) && !self.finished(st) && self.blocked(st)
    }

    /// Handles a client's outputs: requests into the network, ghost updates.
    fn route(&self, st: &mut BState<K, C>, i: usize, out: &[ClientOutput]) {
        for o in out {
            match *o {
                // A crashed replica never gets it (the runtime's resends to it are lost too).
                ClientOutput::Send { to, .. } if (st.down | st.cut[i]) & (1 << to.0) != 0 => {}
                ClientOutput::Send { to, req } => st.net.push((i as u8, to.0, req)),
                ClientOutput::Entered { row, token } => {
                    let r = row.0 as usize;
                    if let Some(prev) = st.last_token[r] {
                        if token <= prev && st.fencing_violation.is_none() {
                            st.fencing_violation = Some((token, prev));
                        }
                    }
                    st.last_token[r] = Some(token);
                    if st.crashes > 0 {
                        st.entered_after_crash = true;
                    }
                }
                ClientOutput::Exited { .. } => st.clients[i].rounds += 1,
                ClientOutput::Lost { .. } => {
                    st.lease_lost = true;
                    if self.is_lock() {
                        st.clients[i].rounds += 1;
                    }
                }
                ClientOutput::Completed { row } => {
                    let r = row.0 as usize;
                    st.completed[r] = st.completed[r].saturating_add(1);
                }
                ClientOutput::Abandoned { .. } | ClientOutput::Sleep => {}
            }
        }
    }

    /// The representative of `st` (see "Reductions" in the module docs).
    fn canonical(&self, st: &mut BState<K, C>) {
        // Operations: outstanding → 1 (main), 2 (renewal); others → 0, and dead.
        let maps: Vec<_> = st
            .clients
            .iter_mut()
            .map(|cs| {
                if cs.crashed {
                    (None, None)
                } else {
                    cs.c.compact_ops()
                }
            })
            .collect();
        let mut net = Vec::with_capacity(st.net.len());
        for (i, to, req) in st.net.drain(..) {
            let (main, renew) = maps[i as usize];
            let op = req.op();
            let new = if op != 0 && Some(op) == main {
                1
            } else if op != 0 && Some(op) == renew {
                2
            } else {
                0
            };
            let req = match req {
                Request::Write {
                    row,
                    family,
                    col,
                    cell,
                    ..
                } => {
                    let here = st.replicas[to as usize].cell(row, family, col);
                    if new == 0 && here.is_some_and(|h| !cell.supersedes(&h)) {
                        continue;
                    }
                    Request::Write {
                        op: new,
                        row,
                        family,
                        col,
                        cell,
                    }
                }
                Request::Read { family, row, .. } => {
                    if new == 0 {
                        continue;
                    }
                    Request::Read {
                        op: new,
                        family,
                        row,
                    }
                }
            };
            net.push((i, to, req));
        }
        st.net = net;
        rename_timestamps(st);
        *st = representative(st);
    }

    fn step_client(&self, st: &mut BState<K, C>, i: usize, input: Input<'_, K, C>) {
        let mut out = Outs::new();
        match st.clients[i].c.step(input, &mut out) {
            Ok(_) => self.route(st, i, &out),
            Err(e) => st.error = Some(e),
        }
    }

    /// One action in words.
    pub fn describe(&self, a: &BAction) -> String {
        match *a {
            BAction::Start(i) => format!(
                "c{}: {}",
                i + 1,
                if self.is_lock() { "acquire" } else { "work" }
            ),
            BAction::Release(i) => format!(
                "c{}: {}",
                i + 1,
                if self.is_lock() {
                    "release (line 19)"
                } else {
                    "done processing"
                }
            ),
            BAction::Wake(i) => format!("c{}: wakes, re-reads", i + 1),
            BAction::Deliver(i, r, req) => format!("r{r} handles c{}'s {}", i + 1, req_str(&req)),
            BAction::Crash(i) => format!("c{} crashes", i + 1),
            BAction::Duplicate(i, r, req) => {
                format!("the network copies c{}'s {} to r{r}", i + 1, req_str(&req))
            }
            BAction::Lose(i, r, req) if req.op() == 0 => {
                format!("c{}'s {} to r{r} is lost", i + 1, req_str(&req))
            }
            BAction::Lose(i, r, req) => format!(
                "r{r} handles c{}'s {}; the answer is lost, the request is resent",
                i + 1,
                req_str(&req)
            ),
            BAction::CrashReplica(r) => format!("r{r} crashes"),
            BAction::Cut(i, r) => format!("the link between c{} and r{r} is cut", i + 1),
            BAction::Restart(i, clock) => {
                format!("c{} restarts under its id, clock moved to {clock}", i + 1)
            }
            BAction::Tick => "tick".to_string(),
        }
    }

    fn run(&self, finish: HasDiscoveries, threads: usize, which: Counterexample) -> BakeryReport {
        self.validate().expect("valid configuration");
        let t = Instant::now();
        let checker = self
            .clone()
            .checker()
            .threads(threads)
            .finish_when(finish)
            .spawn_bfs()
            .join();
        let properties = crate::check::property_reports(
            self,
            &checker,
            &SAFETY,
            &[LIVE],
            &REACHED,
            which,
            |p, path| self.trace(p, path),
        );
        BakeryReport {
            config: self.name.clone(),
            states: checker.state_count(),
            unique_states: checker.unique_state_count(),
            max_depth: checker.max_depth(),
            // The whole check: the search and the counterexamples' traces.
            elapsed: t.elapsed(),
            properties,
        }
    }

    /// What is wrong in a state, for `property`.
    pub fn violation(&self, property: &str, st: &BState<K, C>) -> String {
        match property {
            MUTEX => {
                let holders: Vec<String> = st
                    .clients
                    .iter()
                    .filter(|c| !c.crashed)
                    .filter_map(|c| {
                        c.c.held().map(|t| {
                            format!("c{} (row {}, ticket {})", c.c.id().0, c.c.row().0, t_str(t))
                        })
                    })
                    .collect();
                format!("in the critical section together: {}", holders.join(", "))
            }
            FENCING => st
                .fencing_violation
                .map(|(t, p)| {
                    format!(
                        "ticket {} entered after ticket {}: the fencing token did not grow",
                        t_str(t),
                        t_str(p)
                    )
                })
                .unwrap_or_default(),
            NO_ERROR => st.error.map(|e| e.to_string()).unwrap_or_default(),
            LIVE => {
                let waiting: Vec<String> = st
                    .clients
                    .iter()
                    .filter(|c| !self.client_done(st, c))
                    .map(|c| format!("c{} {}", c.c.id().0, phase_str(c.c.phase())))
                    .collect();
                let crashed: Vec<String> = st
                    .clients
                    .iter()
                    .filter(|c| c.crashed)
                    .map(|c| format!("c{}", c.c.id().0))
                    .collect();
                format!(
                    "blocked for ever: nothing in flight, {}; no quorum read lets any out{}{}",
                    waiting.join(", "),
                    if crashed.is_empty() {
                        String::new()
                    } else {
                        format!("; crashed: {}", crashed.join(", "))
                    },
                    match self.horizon() {
                        Some(h) if st.ticks >= h => format!("; tick horizon {h} reached"),
                        Some(_) => "; another tick changes nothing".into(),
                        None => String::new(),
                    }
                )
            }
            ONCE => format!("completions per item: {:?}", &st.completed),
            _ => String::new(),
        }
    }

    /// Whether `a` in `before` is the recorded step `step` of a `hilock-bakery-trace/1`
    /// trace: the same action text, and the same clients and replicas afterwards.
    pub fn fits_step(&self, before: &BState<K, C>, a: &BAction, step: &serde_json::Value) -> bool {
        if step["action"].as_str() != Some(self.describe(a).as_str()) {
            return false;
        }
        let Some(st) = self.next_state(before, *a) else {
            return false;
        };
        let clients: BTreeMap<String, String> = st
            .clients
            .iter()
            .map(|c| (format!("c{}", c.c.id().0), client_str(c)))
            .collect();
        let replicas: BTreeMap<String, String> = st
            .replicas
            .iter()
            .enumerate()
            .map(|(r, rep)| (format!("r{r}"), replica_str(rep, self.rows())))
            .collect();
        serde_json::to_value(clients).ok().as_ref() == step.get("clients")
            && serde_json::to_value(replicas).ok().as_ref() == step.get("replicas")
    }

    /// A path as a readable trace (`hilock-bakery-trace/1`).
    pub fn trace(&self, property: &str, path: &Path<BState<K, C>, BAction>) -> BakeryTrace {
        let states = path.clone().into_states();
        let actions = path.clone().into_actions();
        let mut steps = Vec::new();
        for (i, a) in actions.iter().enumerate() {
            let Some(st) = states.get(i + 1) else { break };
            steps.push(BakeryTraceStep {
                index: i,
                action: self.describe(a),
                clients: st
                    .clients
                    .iter()
                    .map(|c| (format!("c{}", c.c.id().0), client_str(c)))
                    .collect(),
                replicas: st
                    .replicas
                    .iter()
                    .enumerate()
                    .map(|(r, rep)| (format!("r{r}"), replica_str(rep, self.rows())))
                    .collect(),
                in_flight: st.net.len(),
            });
        }
        BakeryTrace {
            format: "hilock-bakery-trace/1".into(),
            model: self.name.clone(),
            config: self.0.clone(),
            property: property.to_string(),
            violation: states
                .last()
                .map(|s| self.violation(property, s))
                .unwrap_or_default(),
            note: String::new(),
            steps,
        }
    }

    fn rows(&self) -> usize {
        match self.mode {
            Mode::Lock { .. } => 1,
            Mode::Queue { items } => items as usize,
        }
    }
}

/// A write nobody waits for (operation 0, see [`BakeryModel::canonical`]): its row and
/// family.
fn stale_write(req: &Request) -> Option<(Row, Family)> {
    match *req {
        Request::Write {
            op: 0, row, family, ..
        } => Some((row, family)),
        _ => None,
    }
}

/// Renames every write timestamp of the state to the least values with the same order and
/// adjacency (gaps of two or more become two).
fn rename_timestamps<const K: usize, const C: usize>(st: &mut BState<K, C>) {
    let mut all = BTreeSet::new();
    for r in &st.replicas {
        r.timestamps(|t| {
            all.insert(t);
        });
    }
    for c in &st.clients {
        c.c.timestamps(|t| {
            all.insert(t);
        });
    }
    for (_, _, req) in &st.net {
        if let Request::Write { cell, .. } = req {
            all.insert(cell.ts);
        }
    }
    all.remove(&Ts(0));
    let from: Vec<Ts> = all.into_iter().collect();
    let mut to = Vec::with_capacity(from.len());
    let (mut prev, mut new) = (0u32, 0u32);
    for t in &from {
        new += (t.0 - prev).min(2);
        prev = t.0;
        to.push(Ts(new));
    }
    if from == to {
        return;
    }
    let map = Renaming::new(&from, &to).expect("increasing, without 0");
    for r in st.replicas.iter_mut() {
        r.rename_timestamps(&map)
            .expect("every timestamp collected");
    }
    for c in st.clients.iter_mut() {
        c.c.rename_timestamps(&map)
            .expect("every timestamp collected");
    }
    for (_, _, req) in st.net.iter_mut() {
        if let Request::Write { cell, .. } = req {
            *cell = map.cell(*cell);
        }
    }
}

/// The representative of a state's class under renaming the replicas: replicas sorted by
/// (contents, requests in flight to them, which clients' operations they answered).
pub fn representative<const K: usize, const C: usize>(st: &BState<K, C>) -> BState<K, C> {
    let key = |r: usize| {
        let msgs: Vec<(u8, Request)> = st
            .net
            .iter()
            .filter(|m| m.1 as usize == r)
            .map(|m| (m.0, m.2))
            .collect();
        let bits: Vec<(bool, bool)> = st
            .clients
            .iter()
            .map(|c| {
                let (a, b) = c.c.replied();
                (a & (1 << r) != 0, b & (1 << r) != 0)
            })
            .collect();
        let cut: Vec<bool> = st.cut.iter().map(|c| c & (1 << r) != 0).collect();
        (
            st.down & (1 << r) != 0,
            cut,
            st.replicas[r].clone(),
            msgs,
            bits,
        )
    };
    let mut order: Vec<usize> = (0..NR).collect();
    order.sort_by_cached_key(|&r| key(r));
    // order[new] = old; perm[old] = new.
    let mut perm = [0u8; NR];
    for (new, &old) in order.iter().enumerate() {
        perm[old] = new as u8;
    }
    let mut out = st.clone();
    for (new, &old) in order.iter().enumerate() {
        out.replicas[new] = st.replicas[old].clone();
    }
    for c in out.clients.iter_mut() {
        c.c.permute_replicas(&perm).expect("a permutation");
    }
    let moved = |bits: u8| {
        (0..NR)
            .filter(|&r| bits & (1 << r) != 0)
            .fold(0, |acc, r| acc | (1 << perm[r]))
    };
    out.down = moved(st.down);
    for c in out.cut.iter_mut() {
        *c = moved(*c);
    }
    for m in out.net.iter_mut() {
        m.1 = perm[m.1 as usize];
    }
    out.net.sort();
    out
}

fn t_str(t: Ticket) -> String {
    format!("({}, c{})", t.number, t.id.0)
}

fn req_str(r: &Request) -> String {
    match *r {
        Request::Write {
            row,
            family,
            col,
            cell,
            ..
        } => match cell.val {
            None => format!(
                "delete <row{}, {}, {}> @{}",
                row.0,
                family.name(),
                col,
                cell.ts.0
            ),
            Some(v) => format!(
                "write <row{}, {}, {}={}> @{}",
                row.0,
                family.name(),
                col,
                val_str(v),
                cell.ts.0
            ),
        },
        Request::Read { family, row, .. } => match row {
            Some(row) => format!("read <row{}, {}>", row.0, family.name()),
            None => format!("scan <0.., {}>", family.name()),
        },
    }
}

fn val_str(v: Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Released(n) => format!("released {n}"),
    }
}

fn cols_str<const C: usize>(cols: &Columns<C>) -> String {
    cols.iter()
        .enumerate()
        .filter_map(|(c, cell)| cell.map(|cell| format!("{c}:{cell}")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn phase_str(p: Phase) -> String {
    match p {
        Phase::Idle => "idle".into(),
        Phase::Scan => "scanning".into(),
        Phase::ScanSleep => "asleep (no free item)".into(),
        Phase::Choose => "line 1 (write choosing)".into(),
        Phase::ReadMax => "line 2 (read number)".into(),
        Phase::TakeNumber => "line 4 (write number)".into(),
        Phase::Unchoose => "line 5 (delete choosing)".into(),
        Phase::ReadChoosing => "line 6 (read choosing)".into(),
        Phase::ReadNumbers => "line 7 (read number)".into(),
        Phase::WaitChoosing { id, reading } => format!(
            "line 9 waits on choosing[{id}]{}",
            if reading { ", re-reading" } else { ", asleep" }
        ),
        Phase::RereadNumbers { id } => format!("re-reads number before line 13 for {id}"),
        Phase::WaitNumber { id, reading } => format!(
            "line 13 waits on number[{id}]{}",
            if reading { ", re-reading" } else { ", asleep" }
        ),
        Phase::GiveUp => "gives the item up".into(),
        Phase::ReadDetails => "won; wiki 140 reads the item's details".into(),
        Phase::Held => "IN CRITICAL SECTION".into(),
        Phase::Exit => "line 19 (delete number)".into(),
        Phase::Remove { step } => format!("removing the item ({step}/3)"),
    }
}

fn client_str<const K: usize, const C: usize>(c: &CState<K, C>) -> String {
    if c.crashed {
        return "crashed".into();
    }
    let mut s = phase_str(c.c.phase());
    if c.c.number() > 0 {
        s.push_str(&format!(", number {}", c.c.number()));
    }
    if c.c.row() != Row(0) {
        s.push_str(&format!(", row {}", c.c.row().0));
    }
    let ch = cols_str(c.c.choosing_hash());
    let nh = cols_str(c.c.number_hash());
    if !ch.is_empty() {
        s.push_str(&format!(", choosing_hash {{{ch}}}"));
    }
    if !nh.is_empty() {
        s.push_str(&format!(", number_hash {{{nh}}}"));
    }
    if let Some(l) = c.c.lease_left() {
        s.push_str(&format!(", lease {l}"));
    }
    if c.rounds > 0 {
        s.push_str(&format!(", done {}", c.rounds));
    }
    s
}

fn replica_str<const K: usize, const C: usize>(r: &Replica<K, C>, rows: usize) -> String {
    let mut parts = Vec::new();
    for k in 0..rows {
        for f in Family::ALL {
            if let Some(cols) = r.columns(Row(k as u8), f) {
                let s = cols_str(cols);
                if !s.is_empty() {
                    parts.push(format!("row{k}.{} {{{s}}}", f.name()));
                }
            }
        }
    }
    parts.join("; ")
}

impl<const K: usize, const C: usize> Model for BakerySystem<K, C> {
    type State = BState<K, C>;
    type Action = BAction;

    fn init_states(&self) -> Vec<BState<K, C>> {
        let mut replicas = vec![Replica::<K, C>::new(); NR];
        if let Mode::Queue { items } = self.mode {
            // Enqueued before the run (wiki lines 108–109): `write <ts, CF=details, …>`,
            // `write <ts, CF=number, 0=0>`.
            for rep in replicas.iter_mut() {
                for k in 0..items {
                    let marker = Cell {
                        ts: Ts(1),
                        val: Some(Value::Int(0)),
                    };
                    let details = Cell {
                        ts: Ts(1),
                        val: Some(Value::Int(1)),
                    };
                    rep.seed(Row(k), Family::Number, 0, marker)
                        .expect("row in range");
                    rep.seed(Row(k), Family::Details, 0, details)
                        .expect("row in range");
                }
            }
        }
        vec![BState {
            clients: (0..self.clients as usize)
                .map(|i| CState {
                    c: self.new_client(i),
                    crashed: false,
                    rounds: 0,
                })
                .collect(),
            replicas,
            net: Vec::new(),
            ticks: 0,
            crashes: 0,
            duplicated: 0,
            lost: 0,
            down: 0,
            cut: vec![0; self.clients as usize],
            restarted: 0,
            last_token: [None; K],
            fencing_violation: None,
            completed: [0; K],
            error: None,
            entered_after_crash: false,
            lease_lost: false,
        }]
    }

    fn actions(&self, st: &BState<K, C>, actions: &mut Vec<BAction>) {
        if st.error.is_some() {
            return;
        }
        let blocked = self.blocked(st);
        for (i, cs) in st.clients.iter().enumerate() {
            if cs.crashed {
                continue;
            }
            let i8 = i as u8;
            let p = cs.c.phase();
            if p == Phase::Idle && cs.rounds < self.rounds() {
                actions.push(BAction::Start(i8));
            }
            if p == Phase::Held {
                actions.push(BAction::Release(i8));
            }
            if p.sleeping() && !blocked {
                actions.push(BAction::Wake(i8));
            }
            let crashable = match self.crash_at {
                CrashAt::Anywhere => true,
                CrashAt::AfterNumber => p.numbered(),
            };
            if st.crashes < self.crashes && crashable {
                actions.push(BAction::Crash(i8));
            }
        }
        if st.restarted < self.restarts {
            for (i, cs) in st.clients.iter().enumerate() {
                let quiet = || st.net.iter().all(|m| m.0 as usize != i);
                if cs.crashed && (self.restart_at == RestartAt::AtOnce || quiet()) {
                    let clocks = self.restart_clocks(st, i);
                    actions.extend(clocks.iter().map(|&t| BAction::Restart(i as u8, t)));
                }
            }
        }
        let cut: u32 = st.cut.iter().map(|c| c.count_ones()).sum();
        if cut < self.cuts as u32 {
            for (i, cs) in st.clients.iter().enumerate() {
                for r in 0..NR as u8 {
                    if !cs.crashed && (st.down | st.cut[i]) & (1 << r) == 0 {
                        actions.push(BAction::Cut(i as u8, r));
                    }
                }
            }
        }
        if st.down.count_ones() < self.replica_crashes as u32 {
            for r in 0..NR as u8 {
                if st.down & (1 << r) == 0 {
                    actions.push(BAction::CrashReplica(r));
                }
            }
        }
        let only_stale = st.net.iter().all(|m| stale_write(&m.2).is_some());
        // A restart reads the replicas directly: whether a late write landed before it
        // matters then, so such writes are not held back for a read.
        let restart_reads = st.restarted < self.restarts && st.clients.iter().any(|c| c.crashed);
        let mut last = None;
        for &(i, r, req) in &st.net {
            if last == Some((i, r, req)) {
                continue;
            }
            last = Some((i, r, req));
            if let Some((row, family)) = stale_write(&req) {
                let observed = st.net.iter().any(|&(_, to, m)| {
                    to == r
                        && matches!(m, Request::Read { family: f, row: k, .. }
                            if f == family && k.is_none_or(|k| k == row))
                });
                if !observed && !only_stale && !restart_reads {
                    continue;
                }
            }
            actions.push(BAction::Deliver(i, r, req));
            if st.duplicated < self.duplicates {
                actions.push(BAction::Duplicate(i, r, req));
            }
            if st.lost < self.losses && self.loss_changes(st, r, &req) {
                actions.push(BAction::Lose(i, r, req));
            }
        }
        let tick = match self.timing {
            Timing::None => false,
            Timing::Free { horizon } => st.ticks < horizon,
            Timing::Synchronous { horizon } => st.ticks < horizon && blocked,
        };
        if tick && self.ticked(st).is_some() {
            actions.push(BAction::Tick);
        }
    }

    fn next_state(&self, last: &BState<K, C>, action: BAction) -> Option<BState<K, C>> {
        let mut st = last.clone();
        st.entered_after_crash = false;
        st.lease_lost = false;
        match action {
            BAction::Start(i) => {
                let input = if self.is_lock() {
                    Input::Acquire
                } else {
                    Input::Work
                };
                self.step_client(&mut st, i as usize, input);
            }
            BAction::Release(i) => {
                let input = if self.is_lock() {
                    Input::Release
                } else {
                    Input::Done
                };
                self.step_client(&mut st, i as usize, input);
            }
            BAction::Wake(i) => self.step_client(&mut st, i as usize, Input::Wake),
            BAction::Deliver(i, r, req) => {
                let at = st.net.iter().position(|m| *m == (i, r, req))?;
                st.net.remove(at);
                let mut rout: heapless::Vec<Reply<K, C>, 1> = heapless::Vec::new();
                if let Err(e) = st.replicas[r as usize].step(&req, &mut rout) {
                    st.error = Some(e);
                } else if !st.clients[i as usize].crashed {
                    for reply in &rout {
                        let input = Input::Reply {
                            from: ReplicaId(r),
                            reply,
                        };
                        self.step_client(&mut st, i as usize, input);
                    }
                }
            }
            BAction::Crash(i) => {
                let cs = &mut st.clients[i as usize];
                cs.crashed = true;
                cs.rounds = 0;
                cs.c = self.new_client(i as usize);
                st.crashes += 1;
            }
            BAction::Duplicate(i, r, req) => {
                st.net.iter().position(|m| *m == (i, r, req))?;
                st.net.push((i, r, req));
                st.net.sort();
                st.duplicated += 1;
            }
            BAction::Lose(i, r, req) => {
                let at = st.net.iter().position(|m| *m == (i, r, req))?;
                st.lost += 1;
                if req.op() == 0 {
                    st.net.remove(at);
                } else {
                    // The replica handles it; its answer is lost; the resend stays in flight.
                    let mut rout: heapless::Vec<Reply<K, C>, 1> = heapless::Vec::new();
                    if let Err(e) = st.replicas[r as usize].step(&req, &mut rout) {
                        st.error = Some(e);
                    }
                }
            }
            BAction::CrashReplica(r) => {
                st.down |= 1 << r;
                st.net.retain(|m| m.1 != r);
            }
            BAction::Cut(i, r) => {
                st.cut[i as usize] |= 1 << r;
                st.net.retain(|m| (m.0, m.1) != (i, r));
            }
            BAction::Restart(i, clock) => {
                let cs = &mut st.clients[i as usize];
                if !cs.crashed {
                    return None;
                }
                cs.crashed = false;
                cs.rounds = 0;
                cs.c = self.new_client(i as usize);
                cs.c.advance_clock(Ts(clock));
                st.restarted += 1;
            }
            BAction::Tick => st = self.ticked(&st)?,
        }
        self.canonical(&mut st);
        Some(st)
    }

    fn format_action(&self, a: &BAction) -> String {
        self.describe(a)
    }

    fn format_step(&self, last: &BState<K, C>, a: BAction) -> Option<String> {
        let next = self.next_state(last, a)?;
        let mut s = self.describe(&a);
        s.push_str(&crate::check::violations_line(self, &next));
        s.push('\n');
        for c in &next.clients {
            s.push_str(&format!("\nc{}: {}", c.c.id().0, client_str(c)));
        }
        for (r, rep) in next.replicas.iter().enumerate() {
            s.push_str(&format!("\nr{r}: {}", replica_str(rep, self.rows())));
        }
        s.push_str(&format!("\nrequests in flight: {}", next.net.len()));
        Some(s)
    }

    fn as_svg(&self, path: Path<BState<K, C>, BAction>) -> Option<String> {
        let clients = self.clients as usize;
        let mut lanes: Vec<String> = (1..=clients).map(|i| format!("c{i}")).collect();
        lanes.extend((0..NR).map(|r| format!("r{r}")));
        let mut d = crate::seq::Diagram::new(lanes);
        for a in path.into_actions() {
            match a {
                BAction::Deliver(i, r, req) => {
                    d.message(i.into(), clients + r as usize, req_str(&req))
                }
                BAction::Start(i) | BAction::Release(i) | BAction::Wake(i) | BAction::Crash(i) => {
                    let text = self.describe(&a);
                    let text = text
                        .split_once(": ")
                        .map_or(text.clone(), |(_, t)| t.to_string());
                    d.local(i.into(), text)
                }
                BAction::Restart(i, _) => {
                    let text = self.describe(&a);
                    let text = text
                        .split_once(": ")
                        .map_or(text.clone(), |(_, t)| t.to_string());
                    d.local(i.into(), text)
                }
                BAction::Duplicate(..)
                | BAction::Lose(..)
                | BAction::CrashReplica(_)
                | BAction::Cut(..)
                | BAction::Tick => {}
            }
        }
        Some(d.svg())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MUTEX, |_, st: &BState<K, C>| {
                let mut held: Vec<Row> = st
                    .clients
                    .iter()
                    .filter(|c| !c.crashed && c.c.held().is_some())
                    .map(|c| c.c.row())
                    .collect();
                let n = held.len();
                held.sort();
                held.dedup();
                held.len() == n
            }),
            Property::always(FENCING, |_, st: &BState<K, C>| {
                st.fencing_violation.is_none()
            }),
            Property::always(NO_ERROR, |_, st: &BState<K, C>| st.error.is_none()),
            Property::always(ONCE, |_, st: &BState<K, C>| {
                st.completed.iter().all(|&n| n <= 1)
            }),
            Property::eventually(LIVE, |m: &Self, st: &BState<K, C>| m.finished(st)),
            Property::sometimes(ENTERS, |_, st: &BState<K, C>| {
                st.last_token.iter().any(Option::is_some)
            }),
            Property::sometimes(FINISHES, |m: &Self, st: &BState<K, C>| m.finished(st)),
            Property::sometimes(AFTER_CRASH, |_, st: &BState<K, C>| st.entered_after_crash),
            Property::sometimes(LEASE_LOST, |_, st: &BState<K, C>| st.lease_lost),
            Property::sometimes(HORIZON, |m: &Self, st: &BState<K, C>| m.horizon_hit(st)),
            Property::sometimes(BOUND, |m: &Self, st: &BState<K, C>| {
                st.clients.iter().any(|c| c.c.number() >= m.max_number)
            }),
        ]
    }

    fn within_boundary(&self, st: &BState<K, C>) -> bool {
        st.clients.iter().all(|c| c.c.number() <= self.max_number)
    }
}

/// One property's result.
pub type BakeryPropertyReport = crate::check::PropertyReport<BakeryTrace>;

/// The result of [`BakeryModel::check`].
pub type BakeryReport = crate::check::ModelReport<BakeryTrace>;

/// A counterexample (`hilock-bakery-trace/1`): per step the action, each client's program
/// position and hashes, and each replica's non-empty cells (`column:value@timestamp`,
/// `†` a tombstone).
#[derive(Clone, Debug, Serialize)]
pub struct BakeryTrace {
    /// `hilock-bakery-trace/1`.
    pub format: String,
    /// Configuration name.
    pub model: String,
    /// The configuration.
    pub config: BakeryModel,
    /// The property violated.
    pub property: String,
    /// What is wrong in the last state.
    pub violation: String,
    /// What the trace shows (filled in by whoever saves it).
    pub note: String,
    /// The steps.
    pub steps: Vec<BakeryTraceStep>,
}

/// One step of a [`BakeryTrace`].
#[derive(Clone, Debug, Serialize)]
pub struct BakeryTraceStep {
    /// Index.
    pub index: usize,
    /// The action.
    pub action: String,
    /// Clients after the step.
    pub clients: BTreeMap<String, String>,
    /// Replicas after the step.
    pub replicas: BTreeMap<String, String>,
    /// Requests in flight after the step.
    pub in_flight: usize,
}
