//! A deterministic discrete-event simulator that drives `n` kernel sites with the thesis
//! workload (the thesis, chapter 4) and network model.
//!
//! - **Workload** (section 4.1, the multi-airline reservation table): one lock on the table
//!   and one lock per entry ([`ENTRIES`] entries). Every node loops: non-critical code
//!   (NCS), one *access*, critical section (CS), release. The access mode is drawn with
//!   IR 80 % / R 10 % / U 4 % / IW 5 % / W 1 %, the entry uniformly.
//! - **What each protocol locks for an access** (section 4.2.1): an IR or IW access is an
//!   access to one entry; R, U and W are whole-table accesses.
//!   - hilock: entry access = intention mode on the table, then R (for IR) or W (for IW) on
//!     the entry; whole-table access = the table lock alone in the requested mode.
//!   - Naimi-Trehel *same work*: entry access = that entry's lock; whole-table access =
//!     every entry lock, one after the other in a fixed order (deadlock avoidance); all
//!     modes are exclusive.
//!   - Naimi-Trehel *pure*: one lock for every access.
//! - **Times**: CS mean 15 ms, NCS mean = ratio × CS, message latency mean 150 ms, each
//!   drawn uniformly within ±33.33 % of its mean; integer microseconds.
//! - **Network**: reliable, per-pair FIFO: a message's arrival time is at least that of the
//!   previous message on the same (sender, receiver) channel.
//! - **Priorities**: node `i` of `n` has level `8 i / n` (8 levels, section 4.3). The level is
//!   recorded with every request; it reaches the kernel only when [`PrioMode`] says so.
//! - **Metrics**: messages per lock request (an `Acquire` input, the thesis's "lock
//!   request"), per message kind, and request latency (first `Acquire` of an access to
//!   entering the CS) per access mode and per priority level, over a measurement window
//!   that starts after a warm-up.
//!
//! Routing and delivery go through the one harness, [`hilock_harness::Cluster`] (FIFO
//! channels, sites and outputs on the heap); the simulator adds only the timing: an arrival
//! time per message in flight and the event queue.
//!
//! The queue capacity `Q` of the hierarchical sites equals the node capacity, so no queue
//! can overflow; the driver still retries a rejected delivery ([`KernelError::QueueFull`] /
//! [`KernelError::QueueOverflow`]) after the receiver's next step, keeping the channel FIFO
//! (the harness puts a rejected message back at the head of its channel).

use hilock_harness::{Cluster, Invariants, StepError};
use hilock_kernel::{
    Forwarding, Inheritance, Input, KernelError, LockId, Mode, Msg, MsgKind, NaimiMsg, NaimiSite,
    NodeId, Output, PrioNaimiMsg, PrioNaimiSite, Priority, Protocol, ReleaseRule, Site, Variant,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;

/// Entry locks of the airline table.
pub const ENTRIES: usize = 8;
/// Locks per site: the table (lock 0) and the entries (locks 1..=ENTRIES).
pub const LOCKS: usize = ENTRIES + 1;
/// Priority levels (section 4.3).
pub const PRIO_LEVELS: usize = 8;
/// Largest system the simulator supports.
pub const MAX_NODES: usize = 1024;
/// The access modes in thesis order, with their probabilities in percent.
pub use hilock_spec::workload::AIRLINE_MIX as MIX;

/// The requester named by a request message (for attributing request hops to accesses).
pub trait Requester {
    /// `Some(requester)` for a request message.
    fn requester(&self) -> Option<NodeId>;
}

impl<const Q: usize> Requester for Msg<Q> {
    fn requester(&self) -> Option<NodeId> {
        match self {
            Msg::Request { entry, .. } => Some(entry.requester),
            _ => None,
        }
    }
}

impl Requester for NaimiMsg {
    fn requester(&self) -> Option<NodeId> {
        match self {
            NaimiMsg::Request { requester, .. } => Some(*requester),
            NaimiMsg::Token { .. } => None,
        }
    }
}

impl<const Q: usize> Requester for PrioNaimiMsg<Q> {
    fn requester(&self) -> Option<NodeId> {
        match self {
            PrioNaimiMsg::Request { req, .. } => Some(req.requester),
            PrioNaimiMsg::Token { .. } => None,
        }
    }
}

/// Which protocol the sites run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    /// The hierarchical protocol (table + entry locks) with hilock's default forwarding
    /// ([`Variant::HILOCK`]'s: per-class routing pointers, [`Forwarding::ClassPointers`];
    /// `spec/SPEC.md` 1.6).
    Hilock,
    /// The same with hilock's compressed forwarding ([`Forwarding::Compress`]).
    HilockCompress,
    /// The same with the thesis's forwarding ([`Forwarding::Thesis`], hilock's default
    /// before the routing pointers; the chapter-4 experiments reproduce the thesis's
    /// figures with it).
    HilockThesis,
    /// The same with id-ordered requester pointers ([`Forwarding::OrderedPointers`],
    /// experimental).
    HilockOrdered,
    /// ClassPointers with kept intention modes ([`ReleaseRule::KeepIntention`],
    /// `spec/SPEC.md` 1.7): an idle node keeps IR/IW and re-enters without messages.
    HilockKeep,
    /// Naimi-Trehel doing the same work (entry locks; all entries for a table access).
    NaimiSame,
    /// Naimi-Trehel with one lock.
    NaimiPure,
    /// Mueller's prioritized Naimi protocol (thesis 3.1.1) with one lock.
    PrioNaimi,
}

impl Proto {
    /// Short name used in CSV files and plots.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Hilock => "hilock",
            Proto::HilockCompress => "hilock-compress",
            Proto::HilockThesis => "hilock-thesis",
            Proto::HilockOrdered => "hilock-ordered",
            Proto::HilockKeep => "hilock-keep",
            Proto::NaimiSame => "naimi-same-work",
            Proto::NaimiPure => "naimi-pure",
            Proto::PrioNaimi => "prio-naimi",
        }
    }
}

/// Classifies the node that forwarded a request, for [`Stats::forwards_by_state`].
pub trait RelayClass {
    /// 0: idle relay (not the token node, owns Φ, nothing pending, empty queue); 1: owns
    /// a mode, nothing pending; 2: has a request of its own pending; 3: anything else.
    fn relay_class(&self, lock: LockId) -> usize;
    /// The node's parent pointer for `lock` (hilock; `None` elsewhere), for
    /// [`Stats::relay_age`].
    fn parent_of(&self, _lock: LockId) -> Option<NodeId> {
        None
    }
}

impl<const N: usize, const L: usize, const Q: usize> RelayClass for Site<N, L, Q> {
    fn relay_class(&self, lock: LockId) -> usize {
        let Ok(l) = self.lock(lock) else { return 3 };
        if l.pending_mode() != Mode::Phi {
            2
        } else if l.has_token() || !l.queue().is_empty() {
            3
        } else if l.owned() != Mode::Phi {
            1
        } else {
            0
        }
    }
    fn parent_of(&self, lock: LockId) -> Option<NodeId> {
        self.lock(lock).ok().and_then(|l| l.parent())
    }
}

impl<const N: usize, const L: usize> RelayClass for NaimiSite<N, L> {
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

impl<const N: usize, const L: usize, const P: usize, const Q: usize> RelayClass
    for PrioNaimiSite<N, L, P, Q>
{
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

/// What the timing loop asks of a protocol beyond [`Protocol`]: defaults for the token
/// protocols; the ring engine ([`crate::ringair`]) overrides them.
pub trait Driven: Protocol {
    /// Index in [`Stats::msgs`] of a message (default: its [`MsgKind`], [`kind_index`]).
    fn stat_kind(msg: &Self::Msg) -> usize {
        kind_index(Self::kind(msg))
    }
    /// A lock whose request waits to be asked again: the loop steps
    /// [`Input::Upgrade`] of it one mean message latency later.
    fn wants_poll(&self) -> Option<LockId> {
        None
    }
    /// Whether the loop checks [`Cluster::check_exclusive`] after every grant.
    const CHECK_EXCLUSIVE: bool = false;
    /// Whether the node runs the workload (default); a passive node (a replica of the
    /// bakery's store, [`crate::bakery`]) only answers messages.
    fn active(&self) -> bool {
        true
    }
    /// The wait before a poll ([`Driven::wants_poll`]), in mean message latencies
    /// (default 1).
    fn poll_interval(&self) -> f64 {
        1.0
    }
}

impl<const N: usize, const L: usize, const Q: usize> Driven for Site<N, L, Q> {}
impl<const N: usize, const L: usize> Driven for NaimiSite<N, L> {}
impl<const N: usize, const L: usize, const P: usize, const Q: usize> Driven
    for PrioNaimiSite<N, L, P, Q>
{
}

/// Whether and how the kernel sees the node priorities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PrioMode {
    /// Priorities are recorded but every site runs at priority 0 (chapter 2 protocol).
    Off,
    /// Each site's base priority is its level (chapter 3), no inheritance.
    On,
    /// Priorities with the priority ceiling emulation protocol (ceilings 7 on all locks).
    Pcep,
    /// Priorities with the priority inheritance protocol.
    Pip,
}

impl PrioMode {
    /// Short name used in CSV files.
    pub fn name(self) -> &'static str {
        match self {
            PrioMode::Off => "off",
            PrioMode::On => "prio",
            PrioMode::Pcep => "pcep",
            PrioMode::Pip => "pip",
        }
    }
}

/// How an access of the airline workload maps to lock requests (`docs/benchmarks.md`, "The
/// workload (`benches/src/token.rs`)"). In both the access's mode is drawn once per access,
/// IR 80 / R 10 / U 4 / IW 5 / W 1 % ([`MIX`]), and the entry uniformly; they differ in
/// which locks the mode goes to. The counting rule is the same: every `Acquire` input is a
/// lock request, the intention lock on the table included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mix {
    /// The reading that matches the thesis's "the IR, R, U, IW and W requests are 80 %,
    /// 10 %, 4 %, 5 % and 1 % of the total requests" *and* "our protocol performs slightly
    /// more lock operations" than Naimi pure (section 4.1, 4.2.1): an IR or IW access is
    /// one lock request, the table in that intention mode; an R, U or W access is one
    /// entry's lock in that mode after the table in the intention mode that covers it (IR
    /// for R, IW for U and W, Gray's rule). Hilock: 1.15 lock requests per access; lock
    /// request modes IR 78.3 / R 8.7 / U 3.5 / IW 8.7 / W 0.9 %. Naimi same work: an IR or
    /// IW (whole-table) access takes every entry lock in order, an R/U/W access one entry.
    #[default]
    Thesis,
    /// The mapping the simulator used before (kept so that the older tables stay
    /// reproducible, `--mix entry-intention`): an IR or IW access is an entry access (the
    /// table in IR/IW, then the entry in R/W), an R, U or W access is the table alone.
    /// Hilock: 1.85 lock requests per access; lock-request modes IR 43.2 / R 48.6 / U 2.2 /
    /// IW 2.7 / W 3.2 %.
    EntryIntention,
    /// Every access is one request for lock 0 in W, whatever was drawn (the bakery
    /// comparison, [`crate::bakery`]: C clients contending on one exclusive lock).
    OneLockW,
}

impl Mix {
    /// Short name used in CSV files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Thesis => "thesis",
            Mix::EntryIntention => "entry-intention",
            Mix::OneLockW => "one-lock-w",
        }
    }
}

/// Index in [`MIX`] of the access mode that `x` in `0..100` draws.
pub fn mode_of_draw(x: u32) -> usize {
    let mut x = x;
    for (j, (_, p)) in MIX.iter().enumerate() {
        if x < *p {
            return j;
        }
        x -= p;
    }
    0
}

/// Draws one access from a node's stream (the mode index in [`MIX`], then the entry
/// `0..ENTRIES`), in the simulator's order.
pub fn draw_access(rng: &mut ChaCha8Rng) -> (usize, usize) {
    let mode_idx = mode_of_draw(rng.random_range(0..100u32));
    let entry = rng.random_range(0..ENTRIES);
    (mode_idx, entry)
}

/// The lock requests `(lock, mode)` of one access of mode `MIX[mode_idx]` to `entry`, in
/// the order they are issued, for the hierarchical protocol (lock 0 the table, lock
/// `1 + e` entry `e`) or, with `hierarchical = false`, for Naimi-Trehel *same work*
/// (lock `e` entry `e`, every lock exclusive).
pub fn access_locks(
    mix: Mix,
    mode_idx: usize,
    entry: usize,
    hierarchical: bool,
) -> Vec<(LockId, Mode)> {
    let mode = MIX[mode_idx].0;
    let intention = matches!(mode, Mode::IR | Mode::IW);
    let whole_table = match mix {
        Mix::Thesis => intention,
        Mix::EntryIntention => !intention,
        Mix::OneLockW => false,
    };
    let l = |x: usize| LockId(x as u16);
    if mix == Mix::OneLockW {
        return vec![(l(0), Mode::W)];
    }
    if !hierarchical {
        return if whole_table {
            (0..ENTRIES).map(|e| (l(e), mode)).collect()
        } else {
            vec![(l(entry), mode)]
        };
    }
    match (mix, whole_table) {
        (_, true) => vec![(l(0), mode)],
        (Mix::Thesis, false) => {
            let cover = if mode == Mode::R { Mode::IR } else { Mode::IW };
            vec![(l(0), cover), (l(1 + entry), mode)]
        }
        (Mix::EntryIntention, false) => {
            let leaf = if mode == Mode::IR { Mode::R } else { Mode::W };
            vec![(l(0), mode), (l(1 + entry), leaf)]
        }
        (Mix::OneLockW, false) => vec![(l(0), Mode::W)],
    }
}

/// One simulation run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Protocol.
    pub proto: Proto,
    /// Priorities in the kernel.
    pub prio: PrioMode,
    /// Number of nodes (2..=1024).
    pub n: usize,
    /// NCS mean / CS mean.
    pub ratio: f64,
    /// CS mean in milliseconds.
    pub cs_ms: f64,
    /// Message latency mean in milliseconds.
    pub latency_ms: f64,
    /// Relative half-width of the uniform jitter of CS, NCS and latency (1/3 in the thesis).
    pub jitter: f64,
    /// Accesses completed before measuring starts.
    pub warmup_accesses: u64,
    /// Accesses completed in the measurement window.
    pub measured_accesses: u64,
    /// Seed of all random streams.
    pub seed: u64,
    /// Which locks an access takes ([`Mix`]).
    pub mix: Mix,
}

impl Config {
    /// The thesis defaults (CS 15 ms, latency 150 ms, ±33.33 %) for `proto` on `n` nodes
    /// at `ratio`, with a window of `per_node` accesses per node (at least 2,000 in all).
    pub fn thesis(proto: Proto, n: usize, ratio: f64, per_node: u64, seed: u64) -> Config {
        let measured = (per_node * n as u64).max(2000);
        Config {
            proto,
            prio: PrioMode::Off,
            n,
            ratio,
            cs_ms: 15.0,
            latency_ms: 150.0,
            jitter: 1.0 / 3.0,
            warmup_accesses: (measured / 5).max(2 * n as u64),
            measured_accesses: measured,
            seed,
            mix: Mix::Thesis,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Accesses (critical sections) completed in the window.
    pub accesses: u64,
    /// `Acquire` inputs issued in the window.
    pub lock_requests: u64,
    /// Messages sent in the window, by kind (request, grant, token, release, freeze).
    pub msgs: [u64; 5],
    /// Sum (µs) and count of the latencies of accesses issued and completed in the window,
    /// by access mode (IR, R, U, IW, W).
    pub lat_mode: [(u64, u64); 5],
    /// The same by priority level.
    pub lat_prio: [(u64, u64); PRIO_LEVELS],
    /// Deliveries the kernel rejected (queue full) and the driver retried.
    pub retries: u64,
    /// Simulated time of the window in µs.
    pub window_us: u64,
    /// Kernel steps executed in the whole run.
    pub steps: u64,
    /// Messages sent in the window by lock class (0: lock 0, the table; 1: the other locks)
    /// and kind (request, grant, token, release, freeze), and the forwards among the
    /// requests (where the messages of an access go).
    pub msgs_by_class: [[u64; 5]; 2],
    /// Forwards in the window by lock class (0: the table, 1: the other locks).
    pub forwards_by_class: [u64; 2],
    /// Request messages in the window that are about lock 0 (hilock: the table lock;
    /// Naimi same work: entry 0; Naimi pure: the only lock).
    pub lock0_requests: u64,
    /// Request messages in the window sent by a node other than their requester (a
    /// forward, Rule 4.1 F or a queued request sent on); the rest were sent by their
    /// requester (Rule 2, a PIP reissue).
    pub forwards: u64,
    /// Histogram of the request messages (all hops, all locks) of each access issued and
    /// completed in the window: `request_hops[k]` accesses needed k request messages.
    pub request_hops: Vec<u64>,
    /// Histogram of the request messages of each lock request (an `Acquire` that sent a
    /// request) issued and granted in the window, by lock class (0: lock 0, the table;
    /// 1: the other locks): `journey_hops[c][k]` lock requests needed k request messages.
    pub journey_hops: [Vec<u64>; 2],
    /// Forwards in the window by the state of the forwarding node after its step
    /// ([`RelayClass`]): idle relay, owns a mode (not pending), pending, other.
    pub forwards_by_state: [u64; 4],
    /// Staleness of the idle relays' parent pointers: for each forward in the window sent
    /// by an idle relay, the number of token transfers of that lock since the relay's
    /// parent pointer was last set, as a histogram by lock class (0: the table, 1: the
    /// entries): `relay_age[c][k]` forwards had age k (capped at 4,095).
    pub relay_age: [Vec<u64>; 2],
    /// Forwards in the window by idle relays that went to a routing pointer
    /// (Compress/ClassPointers), not to the parent.
    pub relay_via_pointer: u64,
    /// Token transfers in the window by lock class (0: the table, 1: the entries).
    pub token_moves: [u64; 2],
    /// Accesses started in the window by drawn mode (IR, R, U, IW, W), the draw of
    /// [`draw_access`].
    pub access_modes: [u64; 5],
    /// Lock requests (`Acquire` inputs) of the accesses started and completed in the
    /// window (those counted in [`Stats::lat_mode`]), by mode (IR, R, U, IW, W).
    pub acquire_modes: [u64; 5],
    /// Lock requests of accesses issued in the window that were granted without a request
    /// message (resolved locally, Rule 2, or by the token node itself).
    pub local_acquires: u64,
    /// Polls ([`Driven::wants_poll`]) stepped in the whole run.
    pub polls: u64,
    /// Grants after which mutual exclusion was checked ([`Driven::CHECK_EXCLUSIVE`]).
    pub checked_grants: u64,
    /// The latency (µs) of every access issued and completed in the window, in completion
    /// order (for quantiles, [`Stats::latency_quantile_us`]).
    pub latencies_us: Vec<u64>,
}

impl Stats {
    /// All messages in the window.
    pub fn messages(&self) -> u64 {
        self.msgs.iter().sum()
    }
    /// Messages per lock request.
    pub fn per_request(&self) -> f64 {
        self.messages() as f64 / self.lock_requests.max(1) as f64
    }
    /// Messages of one kind per lock request.
    pub fn kind_per_request(&self, k: usize) -> f64 {
        self.msgs[k] as f64 / self.lock_requests.max(1) as f64
    }
    /// Lock requests (`Acquire` inputs) per access, over the accesses started and
    /// completed in the window.
    pub fn requests_per_access(&self) -> f64 {
        self.acquire_modes.iter().sum::<u64>() as f64
            / self.lat_mode.iter().map(|m| m.1).sum::<u64>().max(1) as f64
    }
    /// Messages per access (critical section).
    pub fn per_access(&self) -> f64 {
        self.messages() as f64 / self.accesses.max(1) as f64
    }
    /// Messages per access of lock class `c` (0: the table, 1: the other locks), split
    /// as request (sent by the requester), forward, grant, token, release, freeze.
    pub fn class_kinds_per_access(&self, c: usize) -> [f64; 6] {
        let a = self.accesses.max(1) as f64;
        let m = &self.msgs_by_class[c];
        let f = self.forwards_by_class[c];
        [
            (m[0] - f) as f64 / a,
            f as f64 / a,
            m[1] as f64 / a,
            m[2] as f64 / a,
            m[3] as f64 / a,
            m[4] as f64 / a,
        ]
    }
    /// Mean latency over all accesses in ms.
    pub fn mean_latency_ms(&self) -> f64 {
        let (s, c) = self
            .lat_mode
            .iter()
            .fold((0u64, 0u64), |(s, c), (a, b)| (s + a, c + b));
        mean_ms(s, c)
    }
    /// Mean latency of accesses of mode index `m` (IR, R, U, IW, W) in ms.
    pub fn mode_latency_ms(&self, m: usize) -> f64 {
        mean_ms(self.lat_mode[m].0, self.lat_mode[m].1)
    }
    /// The `q`-quantile (0..=1) of request messages per access, and the maximum.
    pub fn request_hops_quantile(&self, q: f64) -> usize {
        let total: u64 = self.request_hops.iter().sum();
        let mut acc = 0;
        for (k, c) in self.request_hops.iter().enumerate() {
            acc += c;
            if acc as f64 >= q * total as f64 && acc > 0 {
                return k;
            }
        }
        0
    }
    /// The `q`-quantile (0..=1, nearest rank) of [`Stats::latencies_us`] (0 when empty).
    pub fn latency_quantile_us(&self, q: f64) -> u64 {
        let mut v = self.latencies_us.clone();
        v.sort_unstable();
        let rank = (q * v.len() as f64).ceil() as usize;
        v.get(rank.clamp(1, v.len().max(1)) - 1)
            .copied()
            .unwrap_or(0)
    }
    /// Mean latency of accesses of priority level `p` in ms.
    pub fn prio_latency_ms(&self, p: usize) -> f64 {
        mean_ms(self.lat_prio[p].0, self.lat_prio[p].1)
    }
}

fn mean_ms(sum_us: u64, count: u64) -> f64 {
    if count == 0 {
        f64::NAN
    } else {
        sum_us as f64 / count as f64 / 1000.0
    }
}

/// Kind index for [`Stats::msgs`].
pub fn kind_index(k: MsgKind) -> usize {
    match k {
        MsgKind::Request => 0,
        MsgKind::Grant => 1,
        MsgKind::Token => 2,
        MsgKind::Release => 3,
        MsgKind::Freeze => 4,
        // A try-lock's busy answer, counted with the answers to requests (the simulator
        // issues no try-lock, so none is sent).
        MsgKind::Busy => 1,
    }
}

/// Names of the message kinds in [`Stats::msgs`] order.
pub const KIND_NAMES: [&str; 5] = ["request", "grant", "token", "release", "freeze"];

/// Priority level of node `i` of `n`.
pub fn level(i: usize, n: usize) -> Priority {
    (i * PRIO_LEVELS / n) as Priority
}

/// Runs one configuration (on the caller's thread: outputs go to a heap [`hilock_harness::VecSink`]).
pub fn run(cfg: &Config) -> Result<Stats, String> {
    run_here(cfg)
}

/// Runs the workload of `cfg` on `sites` (any [`Driven`] protocol; the locks an access
/// takes follow `cfg.proto` and `cfg.mix`) and returns the statistics and the cluster as
/// the run left it. The timing loop of [`run`], for protocols outside [`Proto`] (the ring
/// engine, [`crate::ringair`]).
pub fn run_sites<P>(cfg: &Config, sites: Vec<P>) -> Result<(Stats, Cluster<P>), String>
where
    P: Protocol + Clone + Invariants + RelayClass + Driven,
    P::Msg: Requester + Hash,
{
    if sites.len() != cfg.n {
        return Err(format!("{} sites for n = {}", sites.len(), cfg.n));
    }
    Sim::new(cfg, sites).run_keep()
}

macro_rules! dispatch {
    ($cfg:expr, $($n:literal),*) => {
        match $cfg.n {
            $( n if n <= $n => dispatch_class::<$n>($cfg), )*
            n => Err(format!("n = {n} is above {MAX_NODES}")),
        }
    };
}

fn run_here(cfg: &Config) -> Result<Stats, String> {
    if cfg.n < 2 {
        return Err("n must be at least 2".into());
    }
    dispatch!(cfg, 8, 16, 32, 64, 128, 256, 512, 1024)
}

fn dispatch_class<const N: usize>(cfg: &Config) -> Result<Stats, String> {
    let n = cfg.n;
    match cfg.proto {
        Proto::Hilock
        | Proto::HilockCompress
        | Proto::HilockThesis
        | Proto::HilockOrdered
        | Proto::HilockKeep => {
            let release = match cfg.proto {
                Proto::HilockKeep => ReleaseRule::KeepIntention,
                _ => ReleaseRule::Eager,
            };
            let forwarding = match cfg.proto {
                Proto::HilockCompress => Forwarding::Compress,
                Proto::HilockThesis => Forwarding::Thesis,
                Proto::HilockOrdered => Forwarding::OrderedPointers,
                _ => Variant::HILOCK.forwarding,
            };
            let inheritance = match cfg.prio {
                PrioMode::Off | PrioMode::On => Inheritance::None,
                PrioMode::Pcep => Inheritance::Pcep,
                PrioMode::Pip => Inheritance::Pip,
            };
            let mut sites = Vec::with_capacity(n);
            for i in 0..n {
                let s = Site::<N, LOCKS, N>::new(NodeId(i as u16), NodeId(0))
                    .map_err(|e| e.to_string())?
                    .with_variant(Variant {
                        inheritance,
                        forwarding,
                        release,
                        ..Variant::HILOCK
                    })
                    .with_ceilings([(PRIO_LEVELS - 1) as Priority; LOCKS]);
                sites.push(s);
            }
            Sim::new(cfg, sites).run()
        }
        Proto::NaimiSame | Proto::NaimiPure => {
            let sites = (0..n)
                .map(|i| NaimiSite::<N, LOCKS>::new(NodeId(i as u16), NodeId(0)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            Sim::new(cfg, sites).run()
        }
        Proto::PrioNaimi => {
            let mut sites = Vec::with_capacity(n);
            for i in 0..n {
                sites.push(
                    PrioNaimiSite::<N, 1, PRIO_LEVELS, N>::new(NodeId(i as u16), NodeId(0))
                        .map_err(|e| e.to_string())?,
                );
            }
            Sim::new(cfg, sites).run()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The node's NCS or CS ends.
    Timer(u16),
    /// A message on channel (from, to) is due.
    Deliver(u16, u16),
    /// The node's waiting request is asked again ([`Driven::wants_poll`]).
    Poll(u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Ncs,
    Acquiring,
    Cs,
}

#[derive(Clone, Debug)]
struct App {
    rng: ChaCha8Rng,
    phase: Phase,
    ops: [(LockId, Mode); LOCKS],
    nops: usize,
    k: usize,
    mode_idx: usize,
    prio: Priority,
    issued_at: u64,
    measured: bool,
}

/// The timing of one channel: the arrival time of each message the harness has in flight
/// on it, head first.
#[derive(Debug, Default)]
struct Timing {
    arrivals: VecDeque<u64>,
    last_arrival: u64,
    blocked: bool,
}

struct Sim<'c, P: Protocol> {
    cfg: &'c Config,
    cluster: Cluster<P>,
    apps: Vec<App>,
    channels: HashMap<(u16, u16), Timing>,
    /// Blocked channels into each node, retried after the node's next successful step.
    blocked: Vec<Vec<u16>>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    net_rng: ChaCha8Rng,
    completed: u64,
    window_start: Option<u64>,
    stats: Stats,
    /// Request messages of each node's current access so far.
    hops: Vec<u64>,
    /// Request messages of each node's current lock request so far.
    journey: Vec<u64>,
    /// Token transfers of each lock so far (whole run).
    moves: [u64; LOCKS],
    /// Each node's parent for each lock and the value of `moves` when it was last set.
    parents: Vec<[(Option<NodeId>, u64); LOCKS]>,
    /// A poll event is scheduled for the node.
    poll_due: Vec<bool>,
    /// A failed check after a grant ([`Driven::CHECK_EXCLUSIVE`]), reported by the loop.
    violation: Option<String>,
}

fn jittered(rng: &mut ChaCha8Rng, mean_ms: f64, jitter: f64) -> u64 {
    let u: f64 = rng.random_range(-1.0..1.0);
    let v = mean_ms * 1000.0 * (1.0 + jitter * u);
    v.max(0.0).round() as u64
}

impl<'c, P: Protocol + Clone + Invariants + RelayClass + Driven> Sim<'c, P>
where
    P::Msg: Requester + Hash,
{
    fn new(cfg: &'c Config, sites: Vec<P>) -> Self {
        let n = cfg.n;
        let apps = (0..n)
            .map(|i| App {
                rng: ChaCha8Rng::seed_from_u64(
                    cfg.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ),
                phase: Phase::Ncs,
                ops: [(LockId(0), Mode::Phi); LOCKS],
                nops: 0,
                k: 0,
                mode_idx: 0,
                prio: level(i, n),
                issued_at: 0,
                measured: false,
            })
            .collect();
        Sim {
            cfg,
            cluster: Cluster::new(sites),
            apps,
            channels: HashMap::new(),
            blocked: vec![Vec::new(); n],
            events: BinaryHeap::new(),
            seq: 0,
            now: 0,
            net_rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xD1B5_4A32_D192_ED03),
            completed: 0,
            window_start: None,
            stats: Stats::default(),
            hops: vec![0; n],
            journey: vec![0; n],
            moves: [0; LOCKS],
            parents: vec![[(Some(NodeId(0)), 0); LOCKS]; n],
            poll_due: vec![false; n],
            violation: None,
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn in_window(&self) -> bool {
        self.window_start.is_some()
    }

    fn run(self) -> Result<Stats, String> {
        self.run_keep().map(|(st, _)| st)
    }

    /// [`Sim::run`], also returning the cluster as the run left it.
    fn run_keep(mut self) -> Result<(Stats, Cluster<P>), String> {
        if self.cfg.prio != PrioMode::Off {
            for i in 0..self.cfg.n {
                let base = self.apps[i].prio;
                self.step(i, Input::SetPriority { base })?;
            }
        }
        for i in 0..self.cfg.n {
            if !self.cluster.site(NodeId(i as u16)).active() {
                continue;
            }
            let ncs = jittered(
                &mut self.apps[i].rng,
                self.cfg.ratio * self.cfg.cs_ms,
                self.cfg.jitter,
            );
            self.schedule(ncs, Ev::Timer(i as u16));
        }
        let total = self.cfg.warmup_accesses + self.cfg.measured_accesses;
        while self.completed < total {
            let Some(Reverse((t, _, ev))) = self.events.pop() else {
                return Err(format!(
                    "{} n={}: no events left after {} accesses (deadlock)",
                    self.cfg.proto.name(),
                    self.cfg.n,
                    self.completed
                ));
            };
            self.now = t;
            match ev {
                Ev::Timer(i) => self.timer(i as usize)?,
                Ev::Poll(i) => {
                    self.poll_due[i as usize] = false;
                    if let Some(lock) = self.cluster.site(NodeId(i)).wants_poll() {
                        self.stats.polls += 1;
                        self.step(i as usize, Input::Upgrade { lock })?;
                    }
                }
                Ev::Deliver(from, to) => {
                    if !self.channels[&(from, to)].blocked {
                        self.deliver_ready(from, to)?;
                    }
                }
            }
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
        }
        self.stats.window_us = self.now - self.window_start.unwrap_or(self.now);
        Ok((self.stats, self.cluster))
    }

    /// Delivers the ready messages at the head of channel (from, to), in order, until one
    /// is rejected (the channel blocks) or none is ready.
    fn deliver_ready(&mut self, from: u16, to: u16) -> Result<(), String> {
        loop {
            let ch = self.channels.get_mut(&(from, to)).expect("channel");
            match ch.arrivals.front() {
                Some(t) if *t <= self.now => {}
                _ => {
                    ch.blocked = false;
                    return Ok(());
                }
            }
            match self.try_step(to as usize, None, Some(NodeId(from))) {
                Ok(()) => {}
                Err((KernelError::QueueFull(_) | KernelError::QueueOverflow(_), _)) => {
                    // The harness put the message back at the head of the channel.
                    self.stats.retries += 1;
                    let ch = self.channels.get_mut(&(from, to)).expect("channel");
                    if !ch.blocked {
                        ch.blocked = true;
                        self.blocked[to as usize].push(from);
                    }
                    return Ok(());
                }
                Err((e, what)) => {
                    return Err(format!(
                        "{} n={}: delivering {what} {} -> {} at {} µs: {e}",
                        self.cfg.proto.name(),
                        self.cfg.n,
                        from,
                        to,
                        self.now
                    ))
                }
            }
        }
    }

    fn step(&mut self, i: usize, input: Input<'_, P::Msg>) -> Result<(), String> {
        let dbg = format!("{input:?}");
        self.try_step(i, Some(input), None).map_err(|(e, _)| {
            format!(
                "{} n={}: node {i} rejected {dbg} at {} µs: {e}",
                self.cfg.proto.name(),
                self.cfg.n,
                self.now
            )
        })
    }

    /// One step of the harness at node `i` — the user input `input`, or the delivery of the
    /// head message of the channel from `from` — with the timing and the statistics of its
    /// outputs. A rejection comes with a description of the rejected message.
    fn try_step(
        &mut self,
        i: usize,
        input: Option<Input<'_, P::Msg>>,
        from: Option<NodeId>,
    ) -> Result<(), (KernelError, String)> {
        let node = NodeId(i as u16);
        let in_window = self.in_window();
        let mut granted = false;
        let mut forwarded: Option<(LockId, NodeId)> = None;
        let Sim {
            cluster,
            channels,
            stats,
            hops,
            journey,
            net_rng,
            events,
            seq,
            now,
            cfg,
            moves,
            ..
        } = self;
        // Every message sent gets its arrival time (FIFO per channel) and a delivery event.
        let mut see = |o: &Output<P::Msg>| match o {
            Output::Send { to, msg } => {
                if P::kind(msg) == MsgKind::Token {
                    let l = P::lock_of(msg).idx();
                    if let Some(m) = moves.get_mut(l) {
                        *m += 1;
                    }
                    if in_window {
                        stats.token_moves[usize::from(l != 0)] += 1;
                    }
                }
                if in_window {
                    stats.msgs[P::stat_kind(msg)] += 1;
                    let class = usize::from(P::lock_of(msg) != LockId(0));
                    stats.msgs_by_class[class][P::stat_kind(msg)] += 1;
                    if msg.requester().is_some_and(|r| r != node) {
                        stats.forwards_by_class[class] += 1;
                    }
                    if P::lock_of(msg) == LockId(0) && P::kind(msg) == MsgKind::Request {
                        stats.lock0_requests += 1;
                    }
                    if msg.requester().is_some_and(|r| r != node) {
                        stats.forwards += 1;
                        forwarded = Some((P::lock_of(msg), *to));
                    }
                }
                if let Some(r) = msg.requester() {
                    if let Some(h) = hops.get_mut(r.idx()) {
                        *h += 1;
                    }
                    if let Some(h) = journey.get_mut(r.idx()) {
                        *h += 1;
                    }
                }
                let lat = jittered(net_rng, cfg.latency_ms, cfg.jitter);
                let key = (node.0, to.0);
                let ch = channels.entry(key).or_default();
                let at = (*now + lat).max(ch.last_arrival);
                ch.last_arrival = at;
                ch.arrivals.push_back(at);
                *seq += 1;
                events.push(Reverse((at, *seq, Ev::Deliver(key.0, key.1))));
            }
            Output::Granted { .. } => granted = true,
            Output::Upgraded { .. }
            | Output::WouldBlock { .. }
            | Output::Cancelled { .. }
            | Output::Downgraded { .. }
            | Output::Converted { .. }
            | Output::ConvertBusy { .. }
            | Output::Blocking { .. } => {}
        };
        let r = match (input, from) {
            (Some(input), _) => cluster
                .input_with(node, input, &mut see)
                .map_err(|e| (e, String::new())),
            (None, Some(from)) => match cluster.deliver_with(from, node, &mut see) {
                Some(Ok(report)) => {
                    let ch = channels.get_mut(&(from.0, node.0)).expect("channel");
                    ch.arrivals.pop_front();
                    Ok(report)
                }
                Some(Err((e, msg))) => Err((e, format!("{msg:?}"))),
                None => Err((StepError::NoSuchNode(from), String::new())),
            },
            (None, None) => return Ok(()),
        };
        if let Err((e, what)) = r {
            return Err(match e {
                StepError::Kernel(_, k) => (k, what),
                _ => (KernelError::UnknownNode(node), what),
            });
        }
        self.stats.steps += 1;
        if self.cluster.site(node).wants_poll().is_some() && !self.poll_due[i] {
            self.poll_due[i] = true;
            let wait = self.cfg.latency_ms * 1000.0 * self.cluster.site(node).poll_interval();
            let at = self.now + wait.round() as u64;
            self.schedule(at, Ev::Poll(i as u16));
        }
        if let Some((lock, to)) = forwarded {
            let site = self.cluster.site(node);
            let c = site.relay_class(lock);
            self.stats.forwards_by_state[c] += 1;
            let l = lock.idx();
            if c == 0 && l < LOCKS {
                let (parent, set_at) = self.parents[i][l];
                if site.parent_of(lock) == parent {
                    let age = (self.moves[l] - set_at).min(4095) as usize;
                    let h = &mut self.stats.relay_age[usize::from(l != 0)];
                    if h.len() <= age {
                        h.resize(age + 1, 0);
                    }
                    h[age] += 1;
                }
                if parent != Some(to) {
                    self.stats.relay_via_pointer += 1;
                }
            }
        }
        // Note when this node's parent pointers changed (for the relay ages above).
        for l in 0..LOCKS {
            let p = self.cluster.site(node).parent_of(LockId(l as u16));
            if p != self.parents[i][l].0 {
                self.parents[i][l] = (p, self.moves[l]);
            }
        }
        if granted && P::CHECK_EXCLUSIVE {
            match self.cluster.check_exclusive() {
                Ok(()) => self.stats.checked_grants += 1,
                Err(v) => {
                    self.violation
                        .get_or_insert(format!("n={} at {} µs: {v:?}", self.cfg.n, self.now));
                }
            }
        }
        if granted {
            debug_assert!(self.apps[i].phase == Phase::Acquiring);
            self.granted(i)?;
        }
        // A step may have made room in a queue: retry blocked channels into this node.
        if !self.blocked[i].is_empty() {
            let froms = std::mem::take(&mut self.blocked[i]);
            for from in froms {
                let ch = self.channels.get_mut(&(from, i as u16)).expect("channel");
                ch.blocked = false;
                // Errors other than a full queue surface when the retry is attempted.
                self.deliver_ready(from, i as u16)
                    .map_err(|e| (KernelError::OutputsFull, e))?;
            }
        }
        Ok(())
    }

    fn granted(&mut self, i: usize) -> Result<(), (KernelError, String)> {
        let j = std::mem::take(&mut self.journey[i]);
        let a = &self.apps[i];
        if a.measured && j == 0 {
            self.stats.local_acquires += 1;
        }
        if a.measured && j > 0 {
            let c = usize::from(a.ops[a.k].0 != LockId(0));
            let h = &mut self.stats.journey_hops[c];
            if h.len() <= j as usize {
                h.resize(j as usize + 1, 0);
            }
            h[j as usize] += 1;
        }
        self.apps[i].k += 1;
        let a = &self.apps[i];
        if a.k < a.nops {
            let (lock, mode) = a.ops[a.k];
            self.count_acquire();
            return self.try_step(i, Some(Input::Acquire { lock, mode }), None);
        }
        let a = &mut self.apps[i];
        a.phase = Phase::Cs;
        if a.measured {
            for (_, mode) in &a.ops[..a.nops] {
                if let Some(k) = MIX.iter().position(|(m, _)| m == mode) {
                    self.stats.acquire_modes[k] += 1;
                }
            }
            let h = self.hops[i] as usize;
            if self.stats.request_hops.len() <= h {
                self.stats.request_hops.resize(h + 1, 0);
            }
            self.stats.request_hops[h] += 1;
            let l = self.now - a.issued_at;
            self.stats.lat_mode[a.mode_idx].0 += l;
            self.stats.lat_mode[a.mode_idx].1 += 1;
            self.stats.lat_prio[a.prio as usize].0 += l;
            self.stats.lat_prio[a.prio as usize].1 += 1;
            self.stats.latencies_us.push(l);
        }
        let cs = jittered(&mut a.rng, self.cfg.cs_ms, self.cfg.jitter);
        self.schedule(self.now + cs, Ev::Timer(i as u16));
        Ok(())
    }

    fn timer(&mut self, i: usize) -> Result<(), String> {
        match self.apps[i].phase {
            Phase::Ncs => self.start_access(i),
            Phase::Cs => {
                let nops = self.apps[i].nops;
                for k in (0..nops).rev() {
                    let lock = self.apps[i].ops[k].0;
                    self.step(i, Input::Release { lock })?;
                }
                self.completed += 1;
                if self.in_window() {
                    self.stats.accesses += 1;
                } else if self.completed >= self.cfg.warmup_accesses {
                    self.window_start = Some(self.now);
                }
                let a = &mut self.apps[i];
                a.phase = Phase::Ncs;
                let ncs = jittered(&mut a.rng, self.cfg.ratio * self.cfg.cs_ms, self.cfg.jitter);
                self.schedule(self.now + ncs, Ev::Timer(i as u16));
                Ok(())
            }
            Phase::Acquiring => Err("timer while acquiring".into()),
        }
    }

    fn start_access(&mut self, i: usize) -> Result<(), String> {
        let proto = self.cfg.proto;
        let in_window = self.in_window();
        let a = &mut self.apps[i];
        let (mode_idx, entry) = draw_access(&mut a.rng);
        let ops = match proto {
            _ if self.cfg.mix == Mix::OneLockW => {
                access_locks(Mix::OneLockW, mode_idx, entry, true)
            }
            Proto::Hilock
            | Proto::HilockCompress
            | Proto::HilockThesis
            | Proto::HilockOrdered
            | Proto::HilockKeep => access_locks(self.cfg.mix, mode_idx, entry, true),
            Proto::NaimiSame => access_locks(self.cfg.mix, mode_idx, entry, false),
            Proto::NaimiPure | Proto::PrioNaimi => vec![(LockId(0), MIX[mode_idx].0)],
        };
        // Under OneLockW the access is a W access whatever was drawn (the draw is kept so
        // that the random streams stay those of the other mixes).
        let mode_idx = if self.cfg.mix == Mix::OneLockW {
            MIX.iter()
                .position(|(m, _)| *m == Mode::W)
                .unwrap_or(mode_idx)
        } else {
            mode_idx
        };
        a.ops[..ops.len()].copy_from_slice(&ops);
        a.nops = ops.len();
        a.k = 0;
        a.mode_idx = mode_idx;
        a.phase = Phase::Acquiring;
        a.issued_at = self.now;
        a.measured = in_window;
        self.hops[i] = 0;
        self.journey[i] = 0;
        let (lock, mode) = a.ops[0];
        if in_window {
            self.stats.access_modes[mode_idx] += 1;
        }
        self.count_acquire();
        self.step(i, Input::Acquire { lock, mode })
    }

    /// Counts a lock request (`Acquire`) in [`Stats::lock_requests`] when it is issued in
    /// the window.
    fn count_acquire(&mut self) {
        if self.in_window() {
            self.stats.lock_requests += 1;
        }
    }
}

/// One line of the simulator's CSV files (written with the `csv` crate through serde;
/// values rounded to fixed precision, so equal runs give byte-identical files).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CsvRow {
    /// Experiment name.
    pub experiment: String,
    /// [`Proto::name`].
    pub protocol: &'static str,
    /// [`PrioMode::name`].
    pub prio: &'static str,
    /// Nodes.
    pub n: usize,
    /// NCS / CS.
    pub ratio: f64,
    /// Mean message latency (ms).
    pub latency_ms: f64,
    /// Seed.
    pub seed: u64,
    /// [`Mix::name`].
    pub mix: &'static str,
    /// Accesses in the window.
    pub accesses: u64,
    /// Lock requests (`Acquire` inputs) in the window.
    pub lock_requests: u64,
    /// Messages in the window.
    pub messages: u64,
    /// Messages per lock request.
    pub msgs_per_request: f64,
    /// Messages per access.
    pub msgs_per_access: f64,
    /// Lock requests per access started in the window.
    pub requests_per_access: f64,
    /// Lock requests granted without a request message, per lock request.
    pub local_per_request: f64,
    /// Request messages sent by their requester, per lock request.
    pub request_per_request: f64,
    /// Request messages sent on by another node (forwards), per lock request.
    pub forward_per_request: f64,
    /// Grants per lock request.
    pub grant_per_request: f64,
    /// Token transfers per lock request.
    pub token_per_request: f64,
    /// Releases per lock request.
    pub release_per_request: f64,
    /// Freezes per lock request.
    pub freeze_per_request: f64,
    /// Mean access latency (ms).
    pub latency_ms_mean: f64,
    /// Mean latency of IR accesses (ms).
    pub latency_ms_ir: f64,
    /// … R accesses.
    pub latency_ms_r: f64,
    /// … U accesses.
    pub latency_ms_u: f64,
    /// … IW accesses.
    pub latency_ms_iw: f64,
    /// … W accesses.
    pub latency_ms_w: f64,
    /// Mean latency of priority level 0 … 7 (ms).
    pub latency_ms_p0: f64,
    /// Level 1.
    pub latency_ms_p1: f64,
    /// Level 2.
    pub latency_ms_p2: f64,
    /// Level 3.
    pub latency_ms_p3: f64,
    /// Level 4.
    pub latency_ms_p4: f64,
    /// Level 5.
    pub latency_ms_p5: f64,
    /// Level 6.
    pub latency_ms_p6: f64,
    /// Level 7.
    pub latency_ms_p7: f64,
    /// Deliveries retried.
    pub retries: u64,
    /// Kernel steps.
    pub steps: u64,
    /// Simulated window (s).
    pub window_s: f64,
    /// Request messages about lock 0 per lock request.
    pub lock0_request_per_request: f64,
    /// Request messages about other locks per lock request.
    pub other_request_per_request: f64,
    /// Median request messages per access.
    pub request_msgs_per_access_p50: usize,
    /// 99th percentile of request messages per access.
    pub request_msgs_per_access_p99: usize,
    /// Largest request messages per access.
    pub request_msgs_per_access_max: usize,
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

impl CsvRow {
    /// The row of one run.
    pub fn new(experiment: &str, cfg: &Config, st: &Stats) -> CsvRow {
        let lr = st.lock_requests.max(1) as f64;
        let r4 = |x: f64| round(x, 4);
        let r3 = |x: f64| round(x, 3);
        let p = |l: usize| r3(st.prio_latency_ms(l));
        CsvRow {
            experiment: experiment.to_string(),
            protocol: cfg.proto.name(),
            prio: cfg.prio.name(),
            n: cfg.n,
            ratio: cfg.ratio,
            latency_ms: cfg.latency_ms,
            seed: cfg.seed,
            mix: cfg.mix.name(),
            accesses: st.accesses,
            lock_requests: st.lock_requests,
            messages: st.messages(),
            msgs_per_request: r4(st.per_request()),
            msgs_per_access: r4(st.per_access()),
            requests_per_access: r4(st.requests_per_access()),
            local_per_request: r4(st.local_acquires as f64 / lr),
            request_per_request: r4((st.msgs[0] - st.forwards) as f64 / lr),
            forward_per_request: r4(st.forwards as f64 / lr),
            grant_per_request: r4(st.kind_per_request(1)),
            token_per_request: r4(st.kind_per_request(2)),
            release_per_request: r4(st.kind_per_request(3)),
            freeze_per_request: r4(st.kind_per_request(4)),
            latency_ms_mean: r3(st.mean_latency_ms()),
            latency_ms_ir: r3(st.mode_latency_ms(0)),
            latency_ms_r: r3(st.mode_latency_ms(1)),
            latency_ms_u: r3(st.mode_latency_ms(2)),
            latency_ms_iw: r3(st.mode_latency_ms(3)),
            latency_ms_w: r3(st.mode_latency_ms(4)),
            latency_ms_p0: p(0),
            latency_ms_p1: p(1),
            latency_ms_p2: p(2),
            latency_ms_p3: p(3),
            latency_ms_p4: p(4),
            latency_ms_p5: p(5),
            latency_ms_p6: p(6),
            latency_ms_p7: p(7),
            retries: st.retries,
            steps: st.steps,
            window_s: r3(st.window_us as f64 / 1e6),
            lock0_request_per_request: r4(st.lock0_requests as f64 / lr),
            other_request_per_request: r4((st.msgs[0] - st.lock0_requests) as f64 / lr),
            request_msgs_per_access_p50: st.request_hops_quantile(0.5),
            request_msgs_per_access_p99: st.request_hops_quantile(0.99),
            request_msgs_per_access_max: st.request_hops.len().saturating_sub(1),
        }
    }
}

/// The CSV text (header and one line per row) of `rows`.
pub fn csv_bytes(rows: &[CsvRow]) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// Writes `rows` as a CSV file.
pub fn write_csv(path: &std::path::Path, rows: &[CsvRow]) -> Result<(), String> {
    let bytes = csv_bytes(rows)?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The harmonic number H(k).
pub fn harmonic(k: usize) -> f64 {
    (1..=k).map(|i| 1.0 / i as f64).sum()
}

/// Result of [`naimi_sequential`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SequentialNaimi {
    /// Critical sections measured.
    pub requests: u64,
    /// Request messages per critical section.
    pub request_hops: f64,
    /// All messages (request hops plus the token transfer) per critical section.
    pub messages: f64,
}

/// Naimi-Trehel with one request at a time from uniformly random nodes (any of the `n`
/// nodes, including the token holder, which then enters at once): the setting of Lavault's
/// average-case analysis of path reversal. The kernel's sites start from a star (every
/// probable owner at node 0), which is not the stationary tree of the process; the first
/// `warmup` requests are driven but not counted.
pub fn naimi_sequential(n: usize, warmup: u64, requests: u64, seed: u64) -> SequentialNaimi {
    assert!((2..=128).contains(&n), "n in 2..=128");
    let sites: Vec<NaimiSite<128, 1>> = (0..n)
        .map(|i| NaimiSite::new(NodeId(i as u16), NodeId(0)).expect("site"))
        .collect();
    let mut cluster = Cluster::new(sites);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut hops, mut msgs) = (0u64, 0u64);
    let lock = LockId(0);
    for r in 0..warmup + requests {
        let x = NodeId(rng.random_range(0..n) as u16);
        let count = r >= warmup;
        let mut granted = false;
        let mut tally = |o: &Output<NaimiMsg>| match o {
            Output::Send { msg, .. } => {
                if count {
                    msgs += 1;
                    if matches!(msg, NaimiMsg::Request { .. }) {
                        hops += 1;
                    }
                }
            }
            Output::Granted { .. } => granted = true,
            Output::Upgraded { .. }
            | Output::WouldBlock { .. }
            | Output::Cancelled { .. }
            | Output::Downgraded { .. }
            | Output::Converted { .. }
            | Output::ConvertBusy { .. }
            | Output::Blocking { .. } => {}
        };
        let acquire = Input::Acquire {
            lock,
            mode: Mode::W,
        };
        cluster.input_with(x, acquire, &mut tally).expect("acquire");
        while let Some((from, to)) = cluster.oldest_channel() {
            cluster
                .deliver_with(from, to, &mut tally)
                .expect("a message")
                .expect("deliver");
        }
        assert!(granted, "request {r} of node {x} not granted");
        let release = cluster.input(x, Input::Release { lock }).expect("release");
        assert!(release.outputs.is_empty(), "nobody waits");
    }
    SequentialNaimi {
        requests,
        request_hops: hops as f64 / requests as f64,
        messages: msgs as f64 / requests as f64,
    }
}
