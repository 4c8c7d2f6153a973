//! The harness: a [`Cluster`] of kernel sites and the network between them.
//!
//! Every host-side driver of the kernel — the Stateright models (`hilock_models`), the
//! scenario runner (`hilock_spec::scenario`), the robustness proptests, the simulator
//! (`hilock_benches::token`), the kernel's integration tests and the bench scenarios — routes
//! the `Send` outputs of a step, delivers messages and checks the global properties through
//! this one type. A property is written once, in its own file under [`crate::properties`]
//! (P1, P2, P3, P3b, deadlock at quiescence, no kernel error, P10 fencing tokens, P11 and P12
//! for try-locks, P14 and P15 for cancels), and checked by all of them.
//!
//! # The network
//! Per ordered pair of nodes a channel: FIFO ([`Order::Fifo`], the thesis assumption), or a
//! multiset ([`Order::Unordered`]: any message in flight may be delivered next; kept sorted
//! by a content hash so that the order in which messages were sent is not state). Faults are
//! explicit operations the caller chooses — deliver out of order ([`Cluster::deliver_at`]),
//! duplicate ([`Cluster::duplicate`]), lose ([`Cluster::lose`]), inject an arbitrary message
//! ([`Cluster::inject`]), crash ([`Cluster::crash`]) and restart ([`Cluster::restart`]) a
//! node — and each is recorded in [`Faults`], so that a property is checked only where its
//! assumption holds (P3 exact needs FIFO delivery without faults, for example).
//!
//! # As a model state
//! `Clone + Hash + Eq` and canonical: the messages in flight in one vector sorted by channel
//! (no empty channel stored), each with its content key computed when it was sent; the sites
//! and the ghost history of the properties behind `Arc`s with a cached hash (a step copies
//! and rehashes only the site it changes, and the ghost only when it changes it, which is
//! what makes cloning and fingerprinting a state cheap). Equality and hash cover the sites,
//! the messages in flight (in channel order), the order discipline, the crashed nodes, the
//! faults, the first kernel error and the ghost history. They do **not** cover the
//! bookkeeping a run observes: the send order of the messages (used only for "oldest first"
//! delivery), the counts of messages sent and steps taken, and the rules fired so far.
//!
//! # Many nodes
//! Sites and channels live on the heap and every step's outputs go to a growable
//! [`VecSink`], so a cluster of 1,024 sites needs no large stack.

use crate::VecSink;
use hilock_kernel::{
    Input, KernelError, LockId, Mode, ModeSet, MsgKind, NodeId, Output, Priority, Protocol, Report,
    RuleSet, Sink, Site, VALUE_LEN,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How a blocking notification broke P17 (`crate::properties::p17_blocking`; kept with
/// the cluster's ghost state, so that the cluster does not depend on the property's module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockingBreach {
    /// The site does not hold the lock in a mode that conflicts with the waiting mode.
    NotBlocking(Mode),
    /// No other site has a request for the waiting mode pending.
    NoWaiter,
    /// The same hold was told about the same waiting mode before.
    Twice,
}

/// How a channel orders its messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// Per-pair FIFO channels (the thesis assumption, section 2.1).
    #[default]
    Fifo,
    /// Any message in flight on a channel may be delivered next (no duplication, no loss).
    Unordered,
}

/// The faults applied to the cluster so far (each an explicit operation of the caller).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Faults {
    /// A message was delivered out of its FIFO order ([`Cluster::deliver_at`]).
    pub reordered: bool,
    /// A message was delivered and kept in flight ([`Cluster::duplicate`]).
    pub duplicated: bool,
    /// A message was dropped ([`Cluster::lose`]).
    pub lost: bool,
    /// A message that no site sent was delivered ([`Cluster::inject`]).
    pub injected: bool,
    /// A node crashed ([`Cluster::crash`]).
    pub crashed: bool,
}

impl Faults {
    /// No fault at all.
    pub fn none(self) -> bool {
        self == Faults::default()
    }

    /// Only reordering (every message sent is delivered exactly once, possibly out of order).
    pub(crate) fn at_most_reordered(self) -> bool {
        Faults {
            reordered: false,
            ..self
        }
        .none()
    }
}

/// Why a step was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepError {
    /// The kernel rejected the input at the node (its state is unchanged).
    Kernel(NodeId, KernelError),
    /// The node has crashed ([`Cluster::crash`]).
    Down(NodeId),
    /// The node is not a member of the cluster.
    NoSuchNode(NodeId),
}

impl StepError {
    /// The kernel's error, if the kernel rejected the input.
    pub fn kernel(self) -> Option<KernelError> {
        match self {
            StepError::Kernel(_, e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Kernel(n, e) => write!(f, "{n}: {e}"),
            StepError::Down(n) => write!(f, "{n} has crashed"),
            StepError::NoSuchNode(n) => write!(f, "{n} is not a node of the cluster"),
        }
    }
}

/// What one accepted step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<M> {
    /// The node that stepped.
    pub node: NodeId,
    /// Its outputs, in order (the `Send`s are also in flight now).
    pub outputs: Vec<Output<M>>,
    /// The rules that fired.
    pub rules: RuleSet,
}

impl<M> Step<M> {
    /// Whether the step granted a request (or completed an upgrade) of its node.
    pub fn granted(&self) -> bool {
        self.outputs
            .iter()
            .any(|o| matches!(o, Output::Granted { .. } | Output::Upgraded { .. }))
    }
}

/// A grant whose fencing token is not larger than that of an earlier conflicting grant of
/// the same lock (what [`Cluster::check_fences`] reports).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FenceBreach {
    /// The node granted.
    pub node: NodeId,
    /// The lock.
    pub lock: LockId,
    /// The mode granted.
    pub mode: Mode,
    /// Its fence.
    pub fence: u64,
    /// The mode of the earlier conflicting grant.
    pub earlier: Mode,
    /// The earlier grant's fence (at least `fence`).
    pub earlier_fence: u64,
}

/// A message in flight, with its global send number. The send number orders "oldest first"
/// delivery across channels; it is bookkeeping, not state (equality and hash ignore it).
/// `copied`: a duplicating network has delivered a copy of it ([`Cluster::duplicate`]), so
/// its own delivery will be a second one.
/// The message is shared (`Arc`): cloning a cluster copies no message, and a large message
/// (the simulator's token carries a queue of up to 1,024 entries) is copied once when sent.
/// The message's content key (a hash of its content), kind and lock are computed once, when
/// it is sent: equal messages have equal keys, so the key stands for the message in the
/// hash, and unequal keys decide equality without comparing the messages; the properties
/// that look for a kind of message in flight (P2, P3) read the kind and lock without
/// following the `Arc`.
#[derive(Clone, Debug)]
pub struct InFlight<M> {
    /// Global send order.
    pub seq: u64,
    /// The message.
    pub msg: Arc<M>,
    /// A copy of it was delivered already.
    pub copied: bool,
    /// The content key of `msg`.
    key: u64,
    /// The kind of `msg`.
    pub(crate) kind: MsgKind,
    /// The lock of `msg`.
    pub(crate) lock: LockId,
}

impl<M: Hash> InFlight<M> {
    fn new(seq: u64, msg: M, kind: MsgKind, lock: LockId) -> Self {
        InFlight {
            seq,
            key: content_key(&msg),
            msg: Arc::new(msg),
            copied: false,
            kind,
            lock,
        }
    }
}

impl<M: PartialEq> PartialEq for InFlight<M> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.copied == other.copied
            && (Arc::ptr_eq(&self.msg, &other.msg) || self.msg == other.msg)
    }
}
impl<M: Eq> Eq for InFlight<M> {}
impl<M> Hash for InFlight<M> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.key);
        if self.copied {
            true.hash(h);
        }
    }
}

/// A site behind an `Arc` (clones of a cluster share the sites no step has changed since)
/// with its hash cached (0: not computed yet), so a fingerprint rehashes only changed sites.
#[derive(Debug)]
struct Slot<P> {
    site: Arc<P>,
    hash: AtomicU64,
}

impl<P> Slot<P> {
    fn new(value: P) -> Self {
        Slot {
            site: Arc::new(value),
            hash: AtomicU64::new(0),
        }
    }

    /// The value for a change: copied first if another cluster shares it, its cached hash
    /// dropped.
    fn get_mut(&mut self) -> &mut P
    where
        P: Clone,
    {
        self.hash = AtomicU64::new(0);
        Arc::make_mut(&mut self.site)
    }
}

impl<P> Clone for Slot<P> {
    fn clone(&self) -> Self {
        Slot {
            site: Arc::clone(&self.site),
            hash: AtomicU64::new(self.hash.load(Ordering::Relaxed)),
        }
    }
}

impl<P: PartialEq> PartialEq for Slot<P> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.site, &other.site) || self.site == other.site
    }
}
impl<P: Eq> Eq for Slot<P> {}

impl<P: Hash> Hash for Slot<P> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let mut v = self.hash.load(Ordering::Relaxed);
        if v == 0 {
            v = content_key(&*self.site).max(1);
            self.hash.store(v, Ordering::Relaxed);
        }
        h.write_u64(v);
    }
}

/// A fast deterministic 64-bit hash of a value (of a site, for its cached hash; of a message,
/// for the canonical order of an unordered channel). Each word is mixed in by a step that is
/// a bijection of the running state for a fixed word and of the word for a fixed state, so
/// two inputs of equal length that differ in one word never collide; the result is
/// avalanched (MurmurHash3's finaliser). A site's derived `Hash` writes a few hundred small
/// words, where SipHash's per-call cost dominated the model checker's profile.
fn content_key<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut h = WordHasher(0x243F_6A88_85A3_08D3);
    value.hash(&mut h);
    h.finish()
}

struct WordHasher(u64);

impl WordHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(31);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.mix(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w));
        }
    }
    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }
    #[inline(always)]
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }
    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }
    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 33;
        h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        h ^ (h >> 33)
    }
}

/// The messages in flight: one vector, sorted by channel (`(from, to)`), each channel's
/// messages contiguous and in channel order (head first). No empty channel is stored, so
/// equal networks are equal vectors; a clone is one allocation.
type Net<M> = Vec<(Link, InFlight<M>)>;
/// Messages of the network (a channel's, for example).
type Flights<M> = [(Link, InFlight<M>)];

/// A channel `from → to` as one word, `from` in the high half: ordered as `(from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Link(u32);

impl Link {
    #[inline(always)]
    fn new(from: NodeId, to: NodeId) -> Self {
        Link(u32::from(from.0) << 16 | u32::from(to.0))
    }
    #[inline(always)]
    fn nodes(self) -> (NodeId, NodeId) {
        (NodeId((self.0 >> 16) as u16), NodeId(self.0 as u16))
    }
}

/// Steps a copy of a site that another cluster shares (the model checker's states share
/// most sites), and keeps the copy if the step is accepted. Out of line: a copy of a large
/// site (the simulator's are hundreds of KiB) must not enlarge the frame of every step.
#[inline(never)]
fn step_shared<P: Protocol + Clone, S: Sink<Output<P::Msg>>>(
    site: &mut Arc<P>,
    input: Input<'_, P::Msg>,
    out: &mut S,
) -> Result<Report, KernelError> {
    let mut copy = Arc::clone(site);
    let r = Arc::make_mut(&mut copy).step(input, out);
    if r.is_ok() {
        *site = copy;
    }
    r
}

/// The message itself: moved out if no other cluster shares it, else copied.
fn unshare<M: Clone>(m: Arc<M>) -> M {
    Arc::try_unwrap(m).unwrap_or_else(|m| M::clone(&m))
}

/// A step of a protocol with at most this many outputs, each of at most
/// [`SMALL_OUTPUT_BYTES`], collects them on the stack (no allocation per step); others use
/// a heap buffer kept between steps.
const SMALL_OUTPUTS: usize = 32;
/// See [`SMALL_OUTPUTS`].
const SMALL_OUTPUT_BYTES: usize = 512;

/// The ghost history the properties keep (part of the state: equality and hash cover it).
/// A cluster keeps it behind one `Arc` ([`Slot`]): most steps change none of it, so a clone
/// shares it and a fingerprint reuses its cached hash.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Ghost {
    /// Ghost history for the fencing property: per lock, the largest fence granted in
    /// each mode (indexed by `Mode as usize`), and the first grant that broke the order.
    /// (A vector sorted by lock: few locks are granted, and a copy is one small allocation.)
    pub(crate) fences: Vec<(LockId, [Option<u64>; 6])>,
    pub(crate) fence_breach: Option<FenceBreach>,
    /// Ghost history for the try-lock properties: the (node, lock) pairs whose last try
    /// was refused (`Output::WouldBlock`) and which have asked for nothing since, and the
    /// first grant to one of them.
    pub(crate) refused: BTreeSet<(NodeId, LockId)>,
    pub(crate) try_breach: Option<(NodeId, LockId, Mode)>,
    /// Ghost history for the cancel properties (P14, P15): the (node, lock) pairs whose
    /// last request, try or upgrade was cancelled (`Output::Cancelled`) with the mode the
    /// node held then (Φ, or U for an upgrade), until the node asks again (`Acquire`,
    /// `TryAcquire`, `Upgrade`) or releases; and the first grant to one of them.
    pub(crate) cancelled: BTreeMap<(NodeId, LockId), Mode>,
    pub(crate) cancel_breach: Option<(NodeId, LockId, Mode)>,
    /// Ghost history for the value block property (P16): per lock, the last value written
    /// (`SetValue` accepted), and the first grant of a valid block that read another
    /// (node, lock, mode, first byte read, first byte of the last value written).
    pub(crate) written: BTreeMap<LockId, [u8; VALUE_LEN]>,
    pub(crate) value_breach: Option<(NodeId, LockId, Mode, u8, u8)>,
    /// Ghost history for the blocking property (P17): per (node, lock), the waiting modes
    /// its current hold was told about (`Output::Blocking`), and the first breach
    /// (node, lock, waiting mode, priority, how).
    pub(crate) told: BTreeMap<(NodeId, LockId), ModeSet>,
    pub(crate) blocking_breach: Option<(NodeId, LockId, Mode, Priority, BlockingBreach)>,
    /// The first notification told while no waiter existed (P17, judged per variant).
    pub(crate) blocking_no_waiter: Option<(NodeId, LockId, Mode, Priority)>,
    /// The locks and modes of which an upgrade (W) or a conversion was withdrawn by a
    /// cancel (P17's allowance).
    pub(crate) upgrade_withdrawn: BTreeMap<LockId, ModeSet>,
}

/// Sites of one protocol and the channels between them. See the [module](self) docs.
#[derive(Debug)]
pub struct Cluster<P: Protocol> {
    sites: Vec<Slot<P>>,
    net: Net<P::Msg>,
    pub(crate) order: Order,
    pub(crate) locks: u16,
    pub(crate) crashed: BTreeSet<NodeId>,
    pub(crate) faults: Faults,
    pub(crate) error: Option<StepError>,
    /// The ghost history of the properties, shared between clones until a step changes it
    /// (with its hash cached, like a site's).
    ghost: Slot<Ghost>,
    // Bookkeeping (not state).
    seq: u64,
    sent: u64,
    steps: u64,
    rules: RuleSet,
    /// A step's output buffer, kept between steps of sites with many outputs (not state;
    /// a clone starts without one).
    scratch: Vec<Output<P::Msg>>,
}

impl<P: Protocol> Clone for Cluster<P> {
    fn clone(&self) -> Self {
        Cluster {
            sites: self.sites.clone(),
            net: self.net.clone(),
            order: self.order,
            locks: self.locks,
            crashed: self.crashed.clone(),
            faults: self.faults,
            error: self.error,
            ghost: self.ghost.clone(),
            seq: self.seq,
            sent: self.sent,
            steps: self.steps,
            rules: self.rules,
            scratch: Vec::new(),
        }
    }
}

impl<P: Protocol> Cluster<P> {
    /// The ghost history of the properties.
    pub(crate) fn ghost(&self) -> &Ghost {
        &self.ghost.site
    }

    /// The ghost history for a change (copied first if another cluster shares it).
    pub(crate) fn ghost_mut(&mut self) -> &mut Ghost {
        self.ghost.get_mut()
    }

    /// Where channel `from → to` is in the network (empty if no message is in flight on it).
    fn span(&self, from: NodeId, to: NodeId) -> std::ops::Range<usize> {
        // A scan: few messages are in flight.
        let link = Link::new(from, to).0;
        let mut lo = 0;
        while lo < self.net.len() && self.net[lo].0 .0 < link {
            lo += 1;
        }
        let mut hi = lo;
        while hi < self.net.len() && self.net[hi].0 .0 == link {
            hi += 1;
        }
        lo..hi
    }

    /// The channels with a message in flight, in (from, to) order, each with its messages
    /// head first.
    pub(crate) fn busy(&self) -> impl Iterator<Item = ((NodeId, NodeId), &Flights<P::Msg>)> + '_ {
        self.net
            .chunk_by(|a, b| a.0 .0 == b.0 .0)
            .map(|c| (c[0].0.nodes(), c))
    }

    /// Every message in flight, with its channel.
    pub(crate) fn in_flight_all(&self) -> impl Iterator<Item = &InFlight<P::Msg>> + '_ {
        self.net.iter().map(|(_, m)| m)
    }
}

impl<P: Protocol + PartialEq> PartialEq for Cluster<P>
where
    P::Msg: PartialEq,
{
    fn eq(&self, o: &Self) -> bool {
        self.sites == o.sites
            && self.net == o.net
            && self.order == o.order
            && self.crashed == o.crashed
            && self.faults == o.faults
            && self.error == o.error
            && self.ghost == o.ghost
    }
}
impl<P: Protocol + Eq> Eq for Cluster<P> where P::Msg: Eq {}

impl<P: Protocol + Hash> Hash for Cluster<P>
where
    P::Msg: Hash,
{
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.sites.hash(h);
        h.write_usize(self.net.len());
        for (link, m) in &self.net {
            h.write_u32(link.0);
            m.hash(h);
        }
        self.order.hash(h);
        self.crashed.hash(h);
        self.faults.hash(h);
        self.error.hash(h);
        self.ghost.hash(h);
    }
}

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The cluster of `sites` (site `i` must have id `i`) on FIFO channels.
    ///
    /// # Panics
    /// If a site's id is not its position (a harness set-up error).
    pub fn new(sites: Vec<P>) -> Self {
        for (i, s) in sites.iter().enumerate() {
            assert_eq!(s.id().idx(), i, "site {i} has id {}", s.id());
        }
        // The number of locks: the first lock id the sites do not know.
        let locks = sites.first().map_or(0, |s| {
            (0..u16::MAX)
                .find(|l| s.has_token(LockId(*l)).is_err())
                .unwrap_or(u16::MAX)
        });
        Cluster {
            sites: sites.into_iter().map(Slot::new).collect(),
            net: Vec::new(),
            order: Order::Fifo,
            locks,
            crashed: BTreeSet::new(),
            faults: Faults::default(),
            error: None,
            ghost: Slot::new(Ghost::default()),
            seq: 0,
            sent: 0,
            steps: 0,
            rules: RuleSet::EMPTY,
            scratch: Vec::new(),
        }
    }

    /// The same cluster with channels ordered by `order` (set before the first send).
    pub fn with_order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// The order discipline of the channels.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether the cluster has no sites.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Number of locks of every site.
    pub fn locks(&self) -> usize {
        self.locks as usize
    }

    /// Site `node`.
    ///
    /// # Panics
    /// If `node` is not a node of the cluster.
    pub fn site(&self, node: NodeId) -> &P {
        &self.sites[node.idx()].site
    }

    /// The sites, by node id.
    pub fn sites(&self) -> impl ExactSizeIterator<Item = &P> + '_ {
        self.sites.iter().map(|s| &*s.site)
    }

    /// Site `node` for changes outside the protocol (configuration before a run).
    ///
    /// # Panics
    /// If `node` is not a node of the cluster.
    pub fn site_mut(&mut self, node: NodeId) -> &mut P {
        self.sites[node.idx()].get_mut()
    }

    /// The faults applied so far.
    pub fn faults(&self) -> Faults {
        self.faults
    }

    /// The first input the kernel rejected in an ordinary step (not an injected message).
    pub fn error(&self) -> Option<StepError> {
        self.error
    }

    /// Whether `node` has crashed.
    pub fn is_down(&self, node: NodeId) -> bool {
        self.crashed.contains(&node)
    }

    /// Messages sent so far (bookkeeping).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Steps applied so far (bookkeeping).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Every rule any step reported so far (bookkeeping).
    pub fn rules_fired(&self) -> RuleSet {
        self.rules
    }

    // ------------------------------------------------------------------ stepping

    /// One kernel step at `node`; each output is shown to `see` (by reference) before the
    /// `Send`s are routed into their channels. `record`: a kernel rejection is kept as the
    /// cluster's [`Cluster::error`].
    fn run(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        record: bool,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Result<Report, StepError> {
        if node.idx() >= self.sites.len() {
            return Err(StepError::NoSuchNode(node));
        }
        if self.crashed.contains(&node) {
            return Err(StepError::Down(node));
        }
        if P::MAX_OUTPUTS <= SMALL_OUTPUTS
            && std::mem::size_of::<Output<P::Msg>>() <= SMALL_OUTPUT_BYTES
        {
            self.run_small(node, input, record, see)
        } else {
            self.run_large(node, input, record, see)
        }
    }

    /// A step whose outputs are collected on the stack (no allocation).
    #[inline(never)]
    fn run_small(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        record: bool,
        mut see: impl FnMut(&Output<P::Msg>),
    ) -> Result<Report, StepError> {
        let mut out: heapless::Vec<Output<P::Msg>, SMALL_OUTPUTS> = heapless::Vec::new();
        let report = self.apply(node, input, record, &mut out)?;
        for o in out.drain(..) {
            self.emit(node, o, &mut see);
        }
        Ok(report)
    }

    /// A step whose outputs go to the heap (a buffer kept between steps).
    #[inline(never)]
    fn run_large(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        record: bool,
        mut see: impl FnMut(&Output<P::Msg>),
    ) -> Result<Report, StepError> {
        let mut out = VecSink(std::mem::take(&mut self.scratch));
        let report = self.apply(node, input, record, &mut out);
        let mut outputs = std::mem::take(&mut out.0);
        if report.is_ok() {
            for o in outputs.drain(..) {
                self.emit(node, o, &mut see);
            }
        }
        outputs.clear();
        self.scratch = outputs;
        report
    }

    /// The kernel step at `node` (outputs to `out`), and the bookkeeping.
    fn apply<S: Sink<Output<P::Msg>>>(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        record: bool,
        out: &mut S,
    ) -> Result<Report, StepError> {
        let asked = match input {
            Input::Acquire { lock, .. } | Input::TryAcquire { lock, .. } => Some(lock),
            _ => None,
        };
        let asked_or_released = match input {
            Input::Acquire { lock, .. }
            | Input::TryAcquire { lock, .. }
            | Input::Upgrade { lock }
            | Input::Downgrade { lock, .. }
            | Input::Convert { lock, .. }
            | Input::Release { lock } => Some(lock),
            _ => None,
        };
        let released = match input {
            Input::Release { lock } => Some(lock),
            _ => None,
        };
        let wrote = match input {
            Input::SetValue { lock, value } => Some((lock, value)),
            _ => None,
        };
        // A holder's cancel withdraws its waiting upgrade or conversion: the mode it waited
        // for (P17's allowance).
        let withdrawn = match input {
            Input::Cancel { lock } => {
                let site = &self.sites[node.idx()].site;
                let held = site.held(lock).unwrap_or(Mode::Phi);
                let waits = site.pending_mode(lock).unwrap_or(Mode::Phi);
                (held != Mode::Phi && waits != Mode::Phi).then_some((lock, waits))
            }
            _ => None,
        };
        let slot = &mut self.sites[node.idx()];
        // The cached hash is stale once the site may have changed.
        slot.hash = AtomicU64::new(0);
        // Step in place unless another cluster shares the site; a rejected step leaves the
        // site unchanged (the kernel validates before it applies), so a shared site is only
        // replaced by its stepped copy when the step is accepted.
        let report = match Arc::get_mut(&mut slot.site) {
            Some(site) => site.step(input, out),
            None => step_shared(&mut slot.site, input, out),
        };
        match report {
            Ok(r) => {
                // The ghost is changed (and so copied if shared) only where it changes.
                if let Some(lock) = asked.filter(|l| self.ghost().refused.contains(&(node, *l))) {
                    // A new request: the refusal of an earlier try is history.
                    self.ghost_mut().refused.remove(&(node, lock));
                }
                if let Some(lock) =
                    asked_or_released.filter(|l| self.ghost().cancelled.contains_key(&(node, *l)))
                {
                    // Asked again (or released what a cancelled upgrade left held): the
                    // cancel is history.
                    self.ghost_mut().cancelled.remove(&(node, lock));
                }
                if let Some(lock) = released {
                    // P17's ghost: the hold ended (`spec/SPEC.md` 1.16).
                    self.forget_told(node, lock);
                }
                if let Some((lock, mode)) = withdrawn {
                    self.note_upgrade_withdrawn(lock, mode);
                }
                if let Some((lock, value)) = wrote {
                    // P16's ghost: the last value written (`spec/SPEC.md` 1.15).
                    if self.ghost().written.get(&lock) != Some(&value) {
                        self.ghost_mut().written.insert(lock, value);
                    }
                }
                self.steps += 1;
                self.rules = self.rules.union(r.rules);
                Ok(r)
            }
            Err(e) => {
                let e = StepError::Kernel(node, e);
                if record && self.error.is_none() {
                    self.error = Some(e);
                }
                Err(e)
            }
        }
    }

    /// Shows an output of `from`'s step to `see`, and routes it if it is a `Send`.
    #[inline(always)]
    fn emit(&mut self, from: NodeId, o: Output<P::Msg>, see: &mut impl FnMut(&Output<P::Msg>)) {
        see(&o);
        match o {
            Output::Send { to, msg } => self.route(from, to, msg),
            Output::Granted { lock, mode } => {
                self.forget_told(from, lock);
                self.note_try_grant(from, lock, mode);
                self.note_cancelled_grant(from, lock, mode);
                self.note_value(from, lock, mode);
                self.note_fence(from, lock, mode)
            }
            Output::Upgraded { lock } => {
                self.note_cancelled_grant(from, lock, Mode::W);
                self.note_value(from, lock, Mode::W);
                self.note_fence(from, lock, Mode::W)
            }
            Output::WouldBlock { lock, .. } => self.note_would_block(from, lock),
            Output::Cancelled { lock } => {
                // A cancel leaves the held mode as it was (Φ, or the mode an upgrade or a
                // conversion would have left; its withdrawal was noted by the step).
                let held = self.sites[from.idx()].site.held(lock).unwrap_or(Mode::Phi);
                self.note_cancelled(from, lock, held)
            }
            // A downgrade keeps the hold and its fence (`spec/SPEC.md` 1.14): no grant.
            Output::Downgraded { .. } => {}
            // A conversion in place (`spec/SPEC.md` 1.17) is a grant of the new mode to the
            // holder: it reads the value block and its fence, and no cancelled request
            // may have it.
            Output::Converted { lock, mode } => {
                self.note_cancelled_grant(from, lock, mode);
                self.note_value(from, lock, mode);
                self.note_fence(from, lock, mode)
            }
            // A refused conversion changes nothing.
            Output::ConvertBusy { .. } => {}
            Output::Blocking { lock, mode, prio } => self.note_blocking(from, lock, mode, prio),
        }
    }

    #[inline(always)]
    fn route(&mut self, from: NodeId, to: NodeId, msg: P::Msg) {
        self.seq += 1;
        self.sent += 1;
        if !self.crashed.is_empty() && self.crashed.contains(&to) {
            return;
        }
        let (kind, lock) = (P::kind(&msg), P::lock_of(&msg));
        let m = InFlight::new(self.seq, msg, kind, lock);
        let span = self.span(from, to);
        let at = match self.order {
            Order::Fifo => span.end,
            Order::Unordered => {
                span.start + self.net[span].partition_point(|(_, x)| x.key <= m.key)
            }
        };
        self.net.insert(at, (Link::new(from, to), m));
    }

    fn collect(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        record: bool,
    ) -> Result<Step<P::Msg>, StepError> {
        let mut outputs = Vec::new();
        let report = self.run(node, input, record, |o| outputs.push(o.clone()))?;
        Ok(Step {
            node,
            outputs,
            rules: report.rules,
        })
    }

    /// Apply a user input at `node` (acquire, release, upgrade, priority).
    pub fn input(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
    ) -> Result<Step<P::Msg>, StepError> {
        self.collect(node, input, true)
    }

    /// [`Cluster::input`] without copying the outputs: each is shown to `see`.
    pub fn input_with(
        &mut self,
        node: NodeId,
        input: Input<'_, P::Msg>,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Result<Report, StepError> {
        self.run(node, input, true, see)
    }

    /// Takes message `index` (0 = oldest) of channel `from → to` out of the network.
    fn take(&mut self, from: NodeId, to: NodeId, index: usize) -> Option<InFlight<P::Msg>> {
        let span = self.span(from, to);
        (index < span.len()).then(|| self.net.remove(span.start + index).1)
    }

    /// Deliver the oldest message on channel `from → to`, if any. A message the kernel
    /// rejects is consumed all the same (it is returned with the error).
    #[allow(clippy::type_complexity)]
    pub fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
    ) -> Option<(P::Msg, Result<Step<P::Msg>, StepError>)> {
        self.deliver_index(from, to, 0)
    }

    /// [`Cluster::deliver`] without copying the outputs: each is shown to `see`. On a
    /// rejection the message is put back at the head of its channel (the network is then
    /// unchanged, like the site) and returned with the error; `None` if the channel is empty.
    pub fn deliver_with(
        &mut self,
        from: NodeId,
        to: NodeId,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Option<Result<Report, (StepError, P::Msg)>> {
        let m = self.take(from, to, 0)?;
        let r = self.run(to, Input::Deliver { from, msg: &m.msg }, true, see);
        Some(r.map_err(|e| {
            let msg = P::Msg::clone(&m.msg);
            let at = self.span(from, to).start;
            self.net.insert(at, (Link::new(from, to), m));
            (e, msg)
        }))
    }

    /// Deliver message `index` (0 = oldest) of channel `from → to`. On FIFO channels an
    /// index other than 0 is a reordering fault ([`Faults::reordered`]).
    #[allow(clippy::type_complexity)]
    pub fn deliver_at(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
    ) -> Option<(P::Msg, Result<Step<P::Msg>, StepError>)> {
        if index > 0 && self.order == Order::Fifo && index < self.channel_len(from, to) {
            self.faults.reordered = true;
        }
        self.deliver_index(from, to, index)
    }

    /// [`Cluster::deliver_at`] without copying the outputs: each is shown to `see`. The
    /// message is consumed even if the kernel rejects it; `None` if there is no message
    /// `index` on the channel.
    pub fn deliver_at_with(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Option<Result<Report, StepError>> {
        if index > 0 && self.order == Order::Fifo && index < self.channel_len(from, to) {
            self.faults.reordered = true;
        }
        let m = self.take(from, to, index)?;
        Some(self.run(to, Input::Deliver { from, msg: &m.msg }, true, see))
    }

    #[allow(clippy::type_complexity)]
    fn deliver_index(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
    ) -> Option<(P::Msg, Result<Step<P::Msg>, StepError>)> {
        let m = self.take(from, to, index)?;
        let r = self.collect(to, Input::Deliver { from, msg: &m.msg }, true);
        Some((unshare(m.msg), r))
    }

    /// Deliver a copy of message `index` of channel `from → to` and keep the original in
    /// flight (a duplicating network).
    #[allow(clippy::type_complexity)]
    pub fn duplicate(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
    ) -> Option<(P::Msg, Result<Step<P::Msg>, StepError>)> {
        let msg = self.copy_of(from, to, index)?;
        let r = self.collect(to, Input::Deliver { from, msg: &msg }, false);
        Some((msg, r))
    }

    /// [`Cluster::duplicate`] without copying the outputs: each is shown to `see`. A
    /// rejection for which `expected` holds (the kernel refusing the copy as a duplicate) is
    /// not kept as [`Cluster::error`]; any other is. `None` if there is no message `index`.
    pub fn duplicate_with(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
        expected: impl Fn(KernelError) -> bool,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Option<Result<Report, StepError>> {
        let msg = self.copy_of(from, to, index)?;
        let r = self.run(to, Input::Deliver { from, msg: &msg }, false, see);
        self.keep_unexpected(r, expected);
        Some(r)
    }

    /// Keeps `r`'s rejection as [`Cluster::error`] (if none is kept yet) unless `expected`
    /// holds for it: a rejection that is part of the protocol is not an error.
    fn keep_unexpected(
        &mut self,
        r: Result<Report, StepError>,
        expected: impl Fn(KernelError) -> bool,
    ) {
        if let Err(e) = r {
            if !e.kernel().is_some_and(expected) && self.error.is_none() {
                self.error = Some(e);
            }
        }
    }

    /// Whether a copy of message `index` of channel `from → to` was delivered already
    /// ([`Cluster::duplicate`]): delivering it is then a second delivery.
    pub fn is_copied(&self, from: NodeId, to: NodeId, index: usize) -> bool {
        let span = self.span(from, to);
        index < span.len() && self.net[span.start + index].1.copied
    }

    /// A copy of message `index` of channel `from → to`, which is marked as copied.
    fn copy_of(&mut self, from: NodeId, to: NodeId, index: usize) -> Option<P::Msg> {
        let span = self.span(from, to);
        if index >= span.len() {
            return None;
        }
        let m = &mut self.net[span.start + index].1;
        m.copied = true;
        self.faults.duplicated = true;
        Some(P::Msg::clone(&m.msg))
    }

    /// Drop message `index` of channel `from → to` (a lossy network).
    pub fn lose(&mut self, from: NodeId, to: NodeId, index: usize) -> Option<P::Msg> {
        let m = self.take(from, to, index)?;
        self.faults.lost = true;
        Some(unshare(m.msg))
    }

    /// Deliver `msg` to `to` as if sent by `from`, although no site sent it (duplicates of
    /// delivered messages, nonsense). A rejection is not kept as [`Cluster::error`].
    pub fn inject(
        &mut self,
        from: NodeId,
        to: NodeId,
        msg: &P::Msg,
    ) -> Result<Step<P::Msg>, StepError> {
        self.faults.injected = true;
        self.collect(to, Input::Deliver { from, msg }, false)
    }

    /// [`Cluster::deliver_at_with`] for a network where some rejections are part of the
    /// protocol (e.g. a message of an earlier epoch, [`KernelError::StaleEpoch`]): a
    /// rejection for which `expected` holds consumes the message and is not kept as
    /// [`Cluster::error`]; any other is kept as usual.
    pub fn deliver_at_expecting(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
        expected: impl Fn(KernelError) -> bool,
        see: impl FnMut(&Output<P::Msg>),
    ) -> Option<Result<Report, StepError>> {
        if index > 0 && self.order == Order::Fifo && index < self.channel_len(from, to) {
            self.faults.reordered = true;
        }
        let m = self.take(from, to, index)?;
        let r = self.run(to, Input::Deliver { from, msg: &m.msg }, false, see);
        self.keep_unexpected(r, expected);
        Some(r)
    }
    /// Applies `f`, a transition of `node`'s site outside [`Protocol::step`] (the recovery
    /// transitions of `hilock_kernel::token::recovery`), and routes the `Send`s it appends like a
    /// step's. On `Err` the site is unchanged (the transition is total) and nothing is
    /// routed; the error is not kept as [`Cluster::error`]. `Err(None)`: the node is not
    /// a node of the cluster or has crashed.
    #[allow(clippy::type_complexity)]
    pub fn transition<T, E>(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut P, &mut VecSink<Output<P::Msg>>) -> Result<T, E>,
    ) -> Result<(T, Vec<Output<P::Msg>>), Option<E>> {
        if node.idx() >= self.sites.len() || self.crashed.contains(&node) {
            return Err(None);
        }
        let slot = &mut self.sites[node.idx()];
        slot.hash = AtomicU64::new(0);
        let mut copy = Arc::clone(&slot.site);
        let mut out = VecSink(Vec::new());
        let t = f(Arc::make_mut(&mut copy), &mut out).map_err(Some)?;
        slot.site = copy;
        self.steps += 1;
        let outputs = out.0;
        for o in &outputs {
            if let Output::Send { to, msg } = o {
                self.route(node, *to, msg.clone());
            }
        }
        Ok((t, outputs))
    }
    /// Crash-stop `node`: it takes no more steps, the messages in flight to it are lost and
    /// later messages to it are dropped. Returns the messages lost.
    pub fn crash(&mut self, node: NodeId) -> usize {
        if node.idx() >= self.sites.len() || !self.crashed.insert(node) {
            return 0;
        }
        self.faults.crashed = true;
        let before = self.net.len();
        self.net.retain(|(link, _)| link.nodes().1 != node);
        before - self.net.len()
    }

    /// Restart crashed `node` with the state `site` (e.g. a fresh site, or one recovered
    /// from stable storage). Returns `false` if the node is not down or `site` has another id.
    pub fn restart(&mut self, node: NodeId, site: P) -> bool {
        if site.id() != node || !self.crashed.remove(&node) {
            return false;
        }
        self.sites[node.idx()] = Slot::new(site);
        let g = self.ghost();
        if g.refused.iter().any(|(n, _)| *n == node) || g.cancelled.keys().any(|(n, _)| *n == node)
        {
            let g = self.ghost_mut();
            g.refused.retain(|(n, _)| *n != node);
            g.cancelled.retain(|(n, _), _| *n != node);
        }
        true
    }

    // ------------------------------------------------------------------ the network

    /// Messages in flight on channel `from → to`, head first.
    pub fn channel(&self, from: NodeId, to: NodeId) -> impl Iterator<Item = &P::Msg> + '_ {
        self.net[self.span(from, to)].iter().map(|(_, m)| &*m.msg)
    }

    /// Number of messages in flight on channel `from → to`.
    pub fn channel_len(&self, from: NodeId, to: NodeId) -> usize {
        self.span(from, to).len()
    }

    /// The channels with a message in flight, in (from, to) order, each with its messages
    /// head first.
    pub fn channels(
        &self,
    ) -> impl Iterator<Item = ((NodeId, NodeId), impl Iterator<Item = &P::Msg> + '_)> + '_ {
        self.busy()
            .map(|(k, q)| (k, q.iter().map(|(_, m)| &*m.msg)))
    }

    /// Channels with a message in flight.
    pub fn busy_channels(&self) -> Vec<(NodeId, NodeId)> {
        self.busy().map(|(k, _)| k).collect()
    }

    /// Every message in flight: (from, to, message).
    pub fn messages(&self) -> impl Iterator<Item = (NodeId, NodeId, &P::Msg)> + '_ {
        self.net.iter().map(|(link, m)| {
            let (f, t) = link.nodes();
            (f, t, &*m.msg)
        })
    }

    /// The channel whose head message was sent first, if any message is in flight.
    pub fn oldest_channel(&self) -> Option<(NodeId, NodeId)> {
        self.busy()
            .map(|(k, q)| (q[0].1.seq, k))
            .min()
            .map(|(_, k)| k)
    }

    /// Number of messages in flight.
    pub fn in_flight(&self) -> usize {
        self.net.len()
    }

    /// Delivers the oldest message in flight until the network is empty, calling `check`
    /// after every delivery with the sender, the message and the receiver's step; at most
    /// `limit` deliveries. A rejected delivery is an error.
    pub fn settle(
        &mut self,
        limit: usize,
        mut check: impl FnMut(&Self, NodeId, &P::Msg, &Step<P::Msg>) -> Result<(), String>,
    ) -> Result<(), String> {
        for _ in 0..limit {
            let Some((from, to)) = self.oldest_channel() else {
                return Ok(());
            };
            let (m, r) = self.deliver(from, to).expect("a busy channel");
            let step = r.map_err(|e| format!("delivery {from} -> {to} of {m:?} rejected: {e}"))?;
            check(self, from, &m, &step)?;
        }
        Err(format!(
            "the network did not become quiet within {limit} deliveries"
        ))
    }

    /// Whether a message of `lock` that satisfies `kind` is in flight from `a` to `b`.
    pub fn in_flight_on(
        &self,
        a: NodeId,
        b: NodeId,
        lock: LockId,
        kind: impl Fn(MsgKind) -> bool,
    ) -> bool {
        self.net[self.span(a, b)]
            .iter()
            .any(|(_, m)| m.lock == lock && kind(m.kind))
    }

    /// Whether the link between `a` and `b` carries no message of `lock` that satisfies
    /// `kind`, in either direction.
    pub fn quiet(
        &self,
        a: NodeId,
        b: NodeId,
        lock: LockId,
        kind: impl Fn(MsgKind) -> bool,
    ) -> bool {
        // One pass over the network for both directions.
        let (ab, ba) = (Link::new(a, b), Link::new(b, a));
        !self
            .net
            .iter()
            .any(|(k, m)| (*k == ab || *k == ba) && m.lock == lock && kind(m.kind))
    }

    /// The live (not crashed) sites, with their node ids.
    pub(crate) fn live(&self) -> impl Iterator<Item = (NodeId, &P)> + '_ {
        let all = self.crashed.is_empty();
        self.sites
            .iter()
            .enumerate()
            .map(|(i, s)| (NodeId(i as u16), &*s.site))
            .filter(move |(n, _)| all || !self.crashed.contains(n))
    }

    /// Drives the cluster to quiescence: delivers every message (oldest first) and releases
    /// every lock a site holds without a pending upgrade, until nothing is held or in
    /// flight, calling `check` after every step (with the step); then checks P4 (no
    /// request pending). At most `rounds` rounds of deliveries and releases, `limit`
    /// deliveries each.
    pub fn drain(
        &mut self,
        rounds: usize,
        limit: usize,
        mut check: impl FnMut(&Self, &Step<P::Msg>) -> Result<(), String>,
    ) -> Result<(), String> {
        for _ in 0..rounds {
            self.settle(limit, |c, _, _, step| check(c, step))?;
            let held: Vec<(NodeId, LockId)> = self
                .live()
                .flat_map(|(n, s)| {
                    (0..self.locks).map(LockId).filter_map(move |l| {
                        (s.held(l).unwrap_or(Mode::Phi) != Mode::Phi
                            && !s.is_pending(l).unwrap_or(false))
                        .then_some((n, l))
                    })
                })
                .collect();
            if held.is_empty() && self.in_flight() == 0 {
                return Ok(self.check_no_deadlock(true)?);
            }
            for (n, lock) in held {
                let step = self
                    .input(n, Input::Release { lock })
                    .map_err(|e| format!("drain: release rejected: {e}"))?;
                check(self, &step)?;
            }
        }
        Err(format!("the cluster did not drain within {rounds} rounds"))
    }
}

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// `n` hilock sites whose lock `l` has parent `parent(l, node)` (`None`: the token
    /// holder), all running `variant`.
    pub fn hilock(
        n: usize,
        parent: impl Fn(LockId, NodeId) -> Option<NodeId>,
    ) -> Result<Self, KernelError> {
        if n == 0 || n > N {
            return Err(KernelError::UnknownNode(NodeId(
                n.min(u16::MAX as usize) as u16
            )));
        }
        let sites = (0..n)
            .map(|i| {
                let me = NodeId(i as u16);
                Site::with_parents(me, |l| parent(l, me))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cluster::new(sites))
    }

    /// `n` hilock sites in a star around `root` for every lock.
    pub fn star(n: usize, root: NodeId) -> Result<Self, KernelError> {
        Self::hilock(n, |_, me| (me != root).then_some(root))
    }

    /// Applies `f` to every site (configuration before a run: variant, ceilings).
    pub fn configure(&mut self, f: impl Fn(Site<N, L, Q>) -> Site<N, L, Q>) {
        for i in 0..self.sites.len() {
            let s = self.site_mut(NodeId(i as u16));
            *s = f(s.clone());
        }
    }
}
