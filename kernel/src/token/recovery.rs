//! Fault tolerance of the token protocol: epochs, leases and the recovery transitions
//! (`docs/faults.md`, "The recovery mechanism (kernel and model)", is the design; this
//! module is its kernel part).
//!
//! The base protocol (thesis chapter 2) assumes that no node fails: the token of a lock
//! lives at one node, and a node on a request path forwards for everybody behind it. Here a
//! membership service (etcd in a runtime, an atomic oracle in the model) installs numbered
//! **epochs**; every message is [`Stamped`] with its sender's epoch and a site accepts only
//! messages of its own epoch ([`FaultSite::accepts`]: [`KernelError::StaleEpoch`] /
//! [`KernelError::FutureEpoch`] otherwise, nothing changes). A new epoch is installed in
//! four pure steps:
//!
//! 1. [`next_members`]: who is in the new epoch. A crashed node, or a node whose lease
//!    has expired *on its own clock* ([`FaultSite::expire_lease`] killed its holds first),
//!    leaves; a new incarnation ([`FaultSite::joining`]) enters. A node the service merely
//!    cannot hear (partitioned, paused) stays until its own lease has run out: the timing
//!    that guarantees this order is [`local_lease`] (TTL, grace, clock drift ρ).
//! 2. [`FaultSite::report`]: every member of the new epoch reports each lock: held mode,
//!    pending request, local queue, token (with its generation) and the highest generation
//!    it has seen.
//! 3. [`rebuild`] (at the recovery leader, per lock): if a member reports the token it
//!    stays there; if none does, it is **regenerated once**, at the lowest member, with a
//!    generation above every generation reported. The new tree is a star around the token
//!    node, whose copyset records each member's held mode (the survivors' holds are kept,
//!    and they are compatible: P1 held before). Every pending request of a member, from
//!    the token node's queue, the other queues and the members' own pending records, goes
//!    into the token node's queue once, in its old FIFO order and then Rule 8.1's priority
//!    order (stable).
//! 4. [`FaultSite::install`] (at every member): the epoch advances (only forward: a plan
//!    for an epoch already installed is rejected, so a token is never regenerated twice),
//!    every per-peer counter restarts (old messages are rejected by their epoch, so the
//!    counters agree again), the parent pointer points at the token node, and the token
//!    node serves its queue by the ordinary rules (`Check_requests_on_queue`).
//!
//! [`RecoveryVariant`] switches each safeguard off, so that the model checker can show
//! what it prevents (`spec/counterexamples/faults/*.json`).

use crate::error::KernelError;
use crate::mode::{conflicts, Mode, ModeSet};
use crate::msg::{Input, LockId, Msg, MsgKind, NodeId, Output, QueueEntry, Sink};
use crate::protocol::Protocol;
use crate::report::{Report, RuleSet};
use crate::token::node::{sort_by_priority, Ctx, LockNode, Peer, Pending};
use crate::token::prio::Frozen;
use crate::token::site::Site;
use crate::token::value::ValueBlock;
use core::fmt;

/// An epoch: the number of a membership the membership service installed (0 at start).
pub type Epoch = u32;

/// A protocol message stamped with the epoch of its sender.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stamped<M> {
    /// The sender's epoch when it sent the message.
    pub epoch: Epoch,
    /// The message.
    pub msg: M,
}

/// Where a site stands with the membership service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Standing {
    /// A member of its epoch whose lease is valid on its own clock.
    Member,
    /// Its lease expired on its own clock: its holds were killed, it takes no step until a
    /// new incarnation of it joins.
    Expired,
    /// A new incarnation (after a crash or an expired lease) that waits for an epoch that
    /// lets it in.
    Joining,
}

/// What the membership service knows of a node when it decides the next epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Renews its lease.
    Up,
    /// Stopped renewing (partitioned away from the service, or paused); its lease is
    /// running out on the service's clock, but on its own clock it is still valid.
    Suspected,
    /// Its lease expired on its own clock (its holds are killed).
    Expired,
    /// Crashed (a crash-stop node renews nothing; its lease runs out).
    Crashed,
    /// A new incarnation asking to join.
    Joining,
}

/// The safeguards of recovery; [`RecoveryVariant::HILOCK`] has all of them. Each `false`
/// is a deliberately broken variant for the model checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RecoveryVariant {
    /// A site accepts only messages of its own epoch. `false`: the epoch stamp is ignored.
    pub epoch_check: bool,
    /// A node leaves the membership only once its lease has expired on its own clock (it
    /// killed its holds first). `false`: a node the service cannot hear is removed at once.
    pub kill_before_regrant: bool,
    /// A plan is installed only for an epoch later than the site's. `false`: a plan that
    /// is delivered again is installed again (and regenerates its token again).
    pub install_once: bool,
    /// An install forgets the old epoch's forwarding shortcuts
    /// ([`crate::Forwarding::Compress`]'s shortcut, [`crate::Forwarding::ClassPointers`]'
    /// routing pointers) with its other links. `false`: they survive the install, and one
    /// may point at a node that crashed — a request sent along it is lost (counterexample
    /// `class-pointers-pointer-to-crashed-node`, `verify/tests/faults.rs`).
    #[cfg_attr(feature = "serde", serde(default = "yes"))]
    pub forget_shortcuts: bool,
    /// Once a member has frozen and reported for the next epoch, that epoch is installed
    /// even if the change that started it went away ([`next_members_after_reports`]): only
    /// an install unfreezes a member. `false`: a new incarnation that asked to join and
    /// died before its report leaves the members that froze for it frozen for good
    /// (counterexample `staged-joiner-lost-before-report`, `verify/tests/faults.rs`).
    #[cfg_attr(feature = "serde", serde(default = "yes"))]
    pub install_after_reports: bool,
}

#[cfg(feature = "serde")]
pub(crate) fn yes() -> bool {
    true
}

impl RecoveryVariant {
    /// Every safeguard on.
    pub const HILOCK: RecoveryVariant = RecoveryVariant {
        epoch_check: true,
        kill_before_regrant: true,
        install_once: true,
        forget_shortcuts: true,
        install_after_reports: true,
    };
}

impl Default for RecoveryVariant {
    fn default() -> Self {
        RecoveryVariant::HILOCK
    }
}

/// Why a recovery transition was rejected (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RecoveryError {
    /// The lock id is not one of the site's locks.
    UnknownLock(LockId),
    /// A node id is not one of the `0..N` nodes.
    UnknownNode(NodeId),
    /// The site (or a report's node) is not a member where it must be one.
    NotMember(NodeId),
    /// The site's lease already expired (it must rejoin as a new incarnation).
    Expired(NodeId),
    /// The new epoch is not later than the epoch it replaces (or than the site's own).
    StaleEpoch {
        /// The epoch of the plan.
        plan: Epoch,
        /// The epoch it had to exceed.
        current: Epoch,
    },
    /// A member of the new epoch did not report.
    MissingReport(NodeId),
    /// A node reported twice.
    DuplicateReport(NodeId),
    /// A report or plan is about another lock than expected.
    WrongLock(LockId),
    /// Two members report the token of the lock.
    TwoTokens(LockId),
    /// Two members report holds that conflict (Table 2.1): P1 was already broken.
    ConflictingHolds(LockId),
    /// A member reports a pending upgrade or conversion without holding the token.
    UpgradeWithoutToken(NodeId),
    /// A reported queue entry is invalid (unknown requester, or Φ).
    BadEntry(LockId),
    /// The queue does not fit (more distinct requesters than the queue capacity).
    QueueOverflow(LockId),
    /// The new epoch has no member.
    NoMembers,
    /// The plans do not cover the site's locks one by one.
    WrongPlans,
    /// The output buffer has less room than [`FaultSite::INSTALL_OUTPUTS`].
    OutputsFull,
    /// Lease timing: ρ must be below 10^6 ppm.
    DriftTooLarge,
    /// Lease timing: the TTL leaves no time for the grace period under drift ρ.
    LeaseTooShort,
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::UnknownLock(l) => write!(f, "unknown lock {l}"),
            RecoveryError::UnknownNode(n) => write!(f, "unknown node {n}"),
            RecoveryError::NotMember(n) => write!(f, "{n} is not a member"),
            RecoveryError::Expired(n) => write!(f, "the lease of {n} has expired"),
            RecoveryError::StaleEpoch { plan, current } => {
                write!(f, "epoch {plan} is not later than epoch {current}")
            }
            RecoveryError::MissingReport(n) => write!(f, "member {n} did not report"),
            RecoveryError::DuplicateReport(n) => write!(f, "{n} reported twice"),
            RecoveryError::WrongLock(l) => write!(f, "report or plan of the wrong lock {l}"),
            RecoveryError::TwoTokens(l) => write!(f, "two members report the token of {l}"),
            RecoveryError::ConflictingHolds(l) => {
                write!(f, "members hold conflicting modes of {l}")
            }
            RecoveryError::UpgradeWithoutToken(n) => {
                write!(
                    f,
                    "{n} reports a pending upgrade or conversion without the token"
                )
            }
            RecoveryError::BadEntry(l) => write!(f, "invalid queue entry reported for {l}"),
            RecoveryError::QueueOverflow(l) => write!(f, "the rebuilt queue of {l} does not fit"),
            RecoveryError::NoMembers => write!(f, "the new epoch has no member"),
            RecoveryError::WrongPlans => write!(f, "one plan per lock, in lock order"),
            RecoveryError::OutputsFull => write!(f, "output buffer too small for an install"),
            RecoveryError::DriftTooLarge => write!(f, "clock drift must be below 10^6 ppm"),
            RecoveryError::LeaseTooShort => write!(f, "lease TTL too short for grace and drift"),
        }
    }
}

/// The membership of the next epoch (`true`: member), if one is needed, from the current
/// one and what the service knows of each node: `Up` members stay, `Crashed` and `Expired`
/// ones leave, `Joining` nodes (new incarnations, also of a current member) enter. A
/// `Suspected` member stays until its own lease has expired — unless
/// `kill_before_regrant` is off, when it leaves at once although it may still hold locks
/// and grant locally. `None`: the membership stays as it is (no new epoch).
pub fn next_members<const N: usize>(
    current: &[bool; N],
    view: &[Liveness; N],
    variant: RecoveryVariant,
) -> Option<[bool; N]> {
    let next = core::array::from_fn(|i| match view[i] {
        Liveness::Up => current[i],
        Liveness::Suspected => current[i] && variant.kill_before_regrant,
        Liveness::Expired | Liveness::Crashed => false,
        Liveness::Joining => true,
    });
    let joining = view.contains(&Liveness::Joining);
    (next != *current || joining).then_some(next)
}

/// The membership of the next epoch when members may have frozen and reported for it
/// already (`reported`: some member's report for the next epoch exists): [`next_members`],
/// and, where that finds no change, the membership as it is — a member that froze is
/// unfrozen only by an install, so the epoch it froze for must come even when the change
/// that started it went away (a new incarnation asked to join and died before its own
/// report). Without [`RecoveryVariant::install_after_reports`], [`next_members`] alone.
pub fn next_members_after_reports<const N: usize>(
    current: &[bool; N],
    view: &[Liveness; N],
    variant: RecoveryVariant,
    reported: bool,
) -> Option<[bool; N]> {
    next_members(current, view, variant)
        .or_else(|| (reported && variant.install_after_reports).then_some(*current))
}

/// Parts per million.
const PPM: u64 = 1_000_000;

/// How long (on its own clock, from the moment it sent a renewal) a node may consider its
/// lease valid, so that it has stopped granting and killed its holders' commands before
/// the membership service can let anybody else be granted:
///
/// the service expires the lease `ttl` after it *received* the renewal, on a clock that
/// runs at most ρ fast: at least `ttl / (1 + ρ)` real time after the node sent it. The
/// node's clock runs at most ρ slow, so `local` of its time last at most `local / (1 − ρ)`
/// real time; with `grace` (real time) to kill the commands,
/// `local / (1 − ρ) + grace ≤ ttl / (1 + ρ)`. Returns the largest such `local`
/// (rounded down; all quantities in one unit, e.g. ms; `rho_ppm` in parts per million).
pub fn local_lease(ttl: u64, grace: u64, rho_ppm: u32) -> Result<u64, RecoveryError> {
    let rho = u64::from(rho_ppm);
    if rho >= PPM {
        return Err(RecoveryError::DriftTooLarge);
    }
    // ttl / (1 + ρ), rounded down (u128: no overflow for any u64 ttl).
    let real_min = (u128::from(ttl) * u128::from(PPM) / u128::from(PPM + rho)) as u64;
    let Some(avail) = real_min.checked_sub(grace).filter(|a| *a > 0) else {
        return Err(RecoveryError::LeaseTooShort);
    };
    let local = (u128::from(avail) * u128::from(PPM - rho) / u128::from(PPM)) as u64;
    if local == 0 {
        return Err(RecoveryError::LeaseTooShort);
    }
    Ok(local)
}

/// One member's report of one lock ([`FaultSite::report`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LockReport<const Q: usize> {
    /// The reporting node.
    pub node: NodeId,
    /// Its epoch.
    pub epoch: Epoch,
    /// The lock.
    pub lock: LockId,
    /// Its held mode M_H.
    pub held: Mode,
    /// Its pending request or upgrade.
    pub pending: Pending,
    /// `Some(generation)` if it holds the token.
    pub token: Option<u64>,
    /// The highest token generation it has seen.
    pub generation_seen: u64,
    /// Its local queue, head first.
    pub queue: heapless::Vec<QueueEntry, Q>,
}

impl<const Q: usize> LockReport<Q> {
    /// The report of a node that knows nothing of `lock`: nothing held, nothing pending,
    /// no token, no generation seen, an empty queue (what a joining incarnation reports).
    pub const fn empty(node: NodeId, epoch: Epoch, lock: LockId) -> Self {
        LockReport {
            node,
            epoch,
            lock,
            held: Mode::Phi,
            pending: Pending::None,
            token: None,
            generation_seen: 0,
            queue: heapless::Vec::new(),
        }
    }
}

/// The new state of one lock, computed by [`rebuild`] and installed by
/// [`FaultSite::install`] at every member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Plan<const Q: usize> {
    /// The lock.
    pub lock: LockId,
    /// The epoch the plan belongs to.
    pub epoch: Epoch,
    /// The token node of the new epoch (every other member's parent).
    pub root: NodeId,
    /// The token's generation.
    pub generation: u64,
    /// Whether the token was regenerated (no member reported it).
    pub regenerated: bool,
    /// The members with the mode each holds (the root's copyset is built from them).
    pub holds: heapless::Vec<(NodeId, Mode), Q>,
    /// The root's queue: every pending request of a member, once, in order.
    pub queue: heapless::Vec<QueueEntry, Q>,
}

/// Whether `e` is `p`, the pending request of its requester.
fn is_request(p: Pending, e: &QueueEntry) -> bool {
    matches!(p, Pending::Request(p) if p.requester == e.requester && p.serial == e.serial && p.mode == e.mode)
}

/// The rebuild of one lock at the recovery leader for epoch `epoch` with `members`, from
/// the members' reports (one each). Pure: see the [module](self) docs for the rules.
pub fn rebuild<const N: usize, const Q: usize>(
    epoch: Epoch,
    members: &[bool; N],
    reports: &[LockReport<Q>],
) -> Result<Plan<Q>, RecoveryError> {
    let first = reports.first().ok_or(RecoveryError::NoMembers)?;
    let lock = first.lock;
    let mut seen = [false; N];
    let mut token: Option<(NodeId, u64)> = None;
    // The newest generation reported (generations wrap: `super::wrap`); a report of
    // generation 0 without the token (a new incarnation's) says nothing.
    let mut generation: Option<u64> = None;
    let mut newest = |g: u64| {
        if g != 0 {
            generation = Some(generation.map_or(g, |n| super::wrap::newest_generation(n, g)));
        }
    };
    for r in reports {
        let i = r.node.idx();
        if i >= N {
            return Err(RecoveryError::UnknownNode(r.node));
        }
        if !members[i] {
            return Err(RecoveryError::NotMember(r.node));
        }
        if seen[i] {
            return Err(RecoveryError::DuplicateReport(r.node));
        }
        seen[i] = true;
        if r.lock != lock {
            return Err(RecoveryError::WrongLock(r.lock));
        }
        if r.epoch >= epoch {
            return Err(RecoveryError::StaleEpoch {
                plan: epoch,
                current: r.epoch,
            });
        }
        if let Some(g) = r.token {
            if token.is_some() {
                return Err(RecoveryError::TwoTokens(lock));
            }
            token = Some((r.node, g));
            newest(g);
        }
        newest(r.generation_seen);
        if matches!(r.pending, Pending::Upgrade | Pending::Convert(_)) && r.token.is_none() {
            return Err(RecoveryError::UpgradeWithoutToken(r.node));
        }
        if r.queue
            .iter()
            .any(|e| e.requester.idx() >= N || e.mode == Mode::Phi)
        {
            return Err(RecoveryError::BadEntry(lock));
        }
    }
    if let Some(i) = (0..N).find(|&i| members[i] && !seen[i]) {
        return Err(RecoveryError::MissingReport(NodeId(i as u16)));
    }
    // The survivors' holds were compatible (P1); a conflict means an unkilled holder.
    for (k, a) in reports.iter().enumerate() {
        if reports[k + 1..]
            .iter()
            .any(|b| a.held != Mode::Phi && b.held != Mode::Phi && conflicts(a.held, b.held))
        {
            return Err(RecoveryError::ConflictingHolds(lock));
        }
    }
    let (root, generation, regenerated) = match token {
        Some((n, g)) => (n, g, false),
        None => {
            let root = (0..N).find(|&i| members[i]).unwrap_or(0);
            let above = generation.unwrap_or(0).wrapping_add(1);
            (NodeId(root as u16), above, true)
        }
    };
    let pending_of = |n: NodeId| {
        reports
            .iter()
            .find(|r| r.node == n)
            .map_or(Pending::None, |r| r.pending)
    };
    // The root's queue first (it is the token's FIFO order), then the other members'
    // queues in node order, then own pending requests that no queue holds yet.
    let mut queue: heapless::Vec<QueueEntry, Q> = heapless::Vec::new();
    let root_first = reports
        .iter()
        .filter(|r| r.node == root)
        .chain(reports.iter().filter(|r| r.node != root));
    let candidates = root_first
        .clone()
        .flat_map(|r| r.queue.iter().copied())
        .chain(root_first.filter_map(|r| match r.pending {
            Pending::Request(e) => Some(e),
            _ => None,
        }));
    for e in candidates {
        let live = e.requester.idx() < N && members[e.requester.idx()];
        if !live || !is_request(pending_of(e.requester), &e) {
            continue; // a dead node's request, or an answered one
        }
        if let Some(x) = queue.iter_mut().find(|x| x.requester == e.requester) {
            if e.prio > x.prio {
                x.prio = e.prio; // a PIP reissue raised it
            }
            continue;
        }
        queue
            .push(e)
            .map_err(|_| RecoveryError::QueueOverflow(lock))?;
    }
    sort_by_priority(&mut queue);
    let mut holds: heapless::Vec<(NodeId, Mode), Q> = heapless::Vec::new();
    for r in reports {
        holds
            .push((r.node, r.held))
            .map_err(|_| RecoveryError::QueueOverflow(lock))?;
    }
    Ok(Plan {
        lock,
        epoch,
        root,
        generation,
        regenerated,
        holds,
        queue,
    })
}

/// What [`FaultSite::expire_lease`] killed: per lock, the mode the local holder held
/// (Φ: none) — the runtime stops those holders' commands before the lease ends on the
/// service's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Killed<const L: usize> {
    /// Per lock, the held mode that was killed.
    pub held: [Mode; L],
    /// Per lock, whether a request was pending (it fails).
    pub pending: [bool; L],
}

/// A [`Site`] of the base protocol with an epoch and a lease: the unit of the fault model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FaultSite<const N: usize, const L: usize, const Q: usize> {
    site: Site<N, L, Q>,
    epoch: Epoch,
    standing: Standing,
    variant: RecoveryVariant,
}

/// A sink of stamped outputs seen as a sink of the base protocol's outputs: every `Send`
/// gets the epoch.
struct StampSink<'a, S> {
    epoch: Epoch,
    out: &'a mut S,
}

impl<const Q: usize, S: Sink<Output<Stamped<Msg<Q>>>>> Sink<Output<Msg<Q>>> for StampSink<'_, S> {
    fn room(&self) -> usize {
        self.out.room()
    }
    fn put(&mut self, o: Output<Msg<Q>>) -> Result<(), Output<Msg<Q>>> {
        let epoch = self.epoch;
        let stamped = o.map_msg(|msg| Stamped { epoch, msg });
        self.out
            .put(stamped)
            .map_err(|o| o.map_msg(|stamped| stamped.msg))
    }
}

impl<const N: usize, const L: usize, const Q: usize> FaultSite<N, L, Q> {
    /// The most outputs [`FaultSite::install`] appends: for each lock, what one step of the
    /// base protocol can append, and the refusal of a pending try request.
    pub const INSTALL_OUTPUTS: usize = L * (Site::<N, L, Q>::MAX_OUTPUTS + 1);

    /// `site` as a member of epoch 0.
    pub fn new(site: Site<N, L, Q>) -> Self {
        FaultSite {
            site,
            epoch: 0,
            standing: Standing::Member,
            variant: RecoveryVariant::HILOCK,
        }
    }

    /// A new incarnation of node `me` (after a crash or an expired lease): empty state,
    /// waiting for an epoch that lets it in.
    pub fn joining(me: NodeId) -> Result<Self, KernelError> {
        let site = Site::with_parents(me, |_| None)?;
        Ok(FaultSite {
            site,
            epoch: 0,
            standing: Standing::Joining,
            variant: RecoveryVariant::HILOCK,
        })
    }

    /// The same site with recovery variant `variant` (default [`RecoveryVariant::HILOCK`]).
    pub fn with_recovery(mut self, variant: RecoveryVariant) -> Self {
        self.variant = variant;
        self
    }

    /// The base protocol's site.
    pub fn site(&self) -> &Site<N, L, Q> {
        &self.site
    }
    /// The site's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
    /// Where the site stands.
    pub fn standing(&self) -> Standing {
        self.standing
    }
    /// The recovery variant.
    pub fn recovery(&self) -> RecoveryVariant {
        self.variant
    }

    /// Whether a message stamped `epoch` about `lock` may be delivered here: a member, and
    /// the same epoch (unless the epoch check is off).
    pub fn accepts(&self, epoch: Epoch, lock: LockId) -> Result<(), KernelError> {
        if self.standing != Standing::Member {
            return Err(KernelError::NotMember);
        }
        if !self.variant.epoch_check || epoch == self.epoch {
            Ok(())
        } else if epoch < self.epoch {
            Err(KernelError::StaleEpoch(lock))
        } else {
            Err(KernelError::FutureEpoch(lock))
        }
    }

    /// The lease of this site expired on its own clock: every local hold is killed (the
    /// caller stops the holders' commands), every pending request fails, the token is
    /// given up (it is regenerated in the next epoch) and the site takes no more steps.
    pub fn expire_lease(&mut self) -> Result<Killed<L>, RecoveryError> {
        let me = self.site.id();
        match self.standing {
            Standing::Member => {}
            Standing::Expired => return Err(RecoveryError::Expired(me)),
            Standing::Joining => return Err(RecoveryError::NotMember(me)),
        }
        let mut killed = Killed {
            held: [Mode::Phi; L],
            pending: [false; L],
        };
        for (l, n) in self.site.locks_mut().iter_mut().enumerate() {
            killed.held[l] = n.held;
            killed.pending[l] = n.pending != Pending::None;
            n.held = Mode::Phi;
            n.told = ModeSet::EMPTY;
            n.pending = Pending::None;
            n.cancelled = false;
            n.token = None;
            n.queue.clear();
        }
        self.standing = Standing::Expired;
        Ok(killed)
    }

    /// This member's report of `lock` for the recovery leader. A joining incarnation
    /// reports an empty lock.
    pub fn report(&self, lock: LockId) -> Result<LockReport<Q>, RecoveryError> {
        let me = self.site.id();
        let n = self
            .site
            .lock(lock)
            .map_err(|_| RecoveryError::UnknownLock(lock))?;
        match self.standing {
            Standing::Member => Ok(LockReport {
                node: me,
                epoch: self.epoch,
                lock,
                held: n.held,
                pending: n.pending,
                token: n.token,
                generation_seen: n.generation_seen,
                queue: n.queue.clone(),
            }),
            Standing::Joining => Ok(LockReport::empty(me, self.epoch, lock)),
            Standing::Expired => Err(RecoveryError::Expired(me)),
        }
    }

    /// Installs epoch `epoch` (one plan per lock, in lock order): see the [module](self)
    /// docs. The token node of each lock then serves its rebuilt queue by the ordinary
    /// rules; the outputs (grants, a token, freezes) are stamped with the new epoch.
    pub fn install<S: Sink<Output<Stamped<Msg<Q>>>>>(
        &mut self,
        epoch: Epoch,
        plans: &[Plan<Q>],
        out: &mut S,
    ) -> Result<Report, RecoveryError> {
        let me = self.site.id();
        if self.standing == Standing::Expired {
            return Err(RecoveryError::Expired(me));
        }
        let fresh = epoch > self.epoch || self.standing == Standing::Joining;
        if self.variant.install_once && !fresh {
            return Err(RecoveryError::StaleEpoch {
                plan: epoch,
                current: self.epoch,
            });
        }
        if plans.len() != L
            || plans
                .iter()
                .enumerate()
                .any(|(l, p)| p.lock.idx() != l || p.epoch != epoch)
        {
            return Err(RecoveryError::WrongPlans);
        }
        for p in plans {
            if !p.holds.iter().any(|(n, _)| *n == me) {
                return Err(RecoveryError::NotMember(me));
            }
            if p.root.idx() >= N
                || p.holds.iter().any(|(n, _)| n.idx() >= N)
                || p.queue
                    .iter()
                    .any(|e| e.requester.idx() >= N || e.mode == Mode::Phi)
            {
                return Err(RecoveryError::BadEntry(p.lock));
            }
        }
        if out.room() < Self::INSTALL_OUTPUTS {
            return Err(RecoveryError::OutputsFull);
        }
        self.epoch = epoch;
        self.standing = Standing::Member;
        let variant = self.site.variant();
        let effective = self.site.priorities().effective;
        let mut sink = StampSink { epoch, out };
        let mut rules = RuleSet::EMPTY;
        for (p, n) in plans.iter().zip(self.site.locks_mut().iter_mut()) {
            if let Pending::Try(e) = n.pending {
                // A try request of an earlier epoch is gone with its epoch (its messages
                // are refused as stale) and the plan queues no try: it is refused here
                // (`spec/SPEC.md` 1.12) — silently if the user cancelled it (1.13). The
                // room was checked above: this cannot fail.
                n.pending = Pending::None;
                if !core::mem::take(&mut n.cancelled) {
                    sink.put(Output::WouldBlock {
                        lock: p.lock,
                        mode: e.mode,
                    })
                    .map_err(|_| RecoveryError::OutputsFull)?;
                }
            }
            reset_links(n, self.variant.forget_shortcuts);
            n.generation_seen = p.generation;
            n.frozen = Frozen::EMPTY;
            if p.root != me {
                n.parent = Some(p.root);
                n.token = None;
                n.queue.clear();
                continue;
            }
            n.parent = None;
            n.token = Some(p.generation);
            if p.regenerated {
                // The dead token node may have issued fences no survivor saw: the new
                // token's fences start above every fence of earlier epochs (the epoch in
                // the high 32 bits; `docs/faults.md`, "The recovery mechanism", "Installing
                // an epoch").
                n.fence = n.fence.max(u64::from(epoch) << 32);
                // The last value written may have been lost with the token node: the
                // value block is not valid until the next write (`spec/SPEC.md` 1.15).
                n.value = ValueBlock::NOT_VALID;
            }
            for &(c, m) in &p.holds {
                if c != me {
                    // Checked against N above, before the first change.
                    n.set_child(c, m)
                        .map_err(|_| RecoveryError::UnknownNode(c))?;
                }
            }
            n.queue.clear();
            for e in &p.queue {
                // Fits: the plan's queue has the same capacity.
                let _ = n.queue.push(*e);
            }
            let mut cx = Ctx {
                me,
                variant,
                effective,
                boost: 0,
                lock: p.lock,
                out: &mut sink,
                rules: RuleSet::EMPTY,
                granted: false,
                sender: None,
                waiting: Frozen::EMPTY,
            };
            // The room was checked for every lock: these cannot fail.
            n.check_queue(&mut cx)
                .and_then(|()| n.finish_freeze(&mut cx, Frozen::EMPTY))
                .map_err(|_| RecoveryError::OutputsFull)?;
            rules = rules.union(cx.rules);
        }
        Ok(Report { rules })
    }
}

/// Forget every per-peer counter and the copyset (the new epoch starts its links afresh;
/// messages of older epochs are rejected by their stamp).
/// Forgets the links of the old epoch: children and peers, and with
/// [`RecoveryVariant::forget_shortcuts`] the forwarding shortcuts of
/// [`crate::Forwarding::Compress`] and [`crate::Forwarding::ClassPointers`] (one may point
/// at a node that crashed).
fn reset_links<const N: usize, const Q: usize>(n: &mut LockNode<N, Q>, forget_shortcuts: bool) {
    // Every record back to Φ: no children, so an empty copyset and no counts.
    n.copyset.clear();
    n.owned_count = [0; 6];
    n.peers = [Peer::default(); N];
    // `ReleaseRule::KeepIntention`: a kept intention mode is not a hold; the plan's star
    // records the members' held modes only, so the kept mode is dropped here (else this
    // node would own more than its new record and could re-enter against a W grant).
    n.kept = Mode::Phi;
    n.passed = crate::mode::ModeSet::EMPTY;
    if forget_shortcuts {
        n.shortcut = None;
        n.forget_routes();
    }
}

impl<const N: usize, const L: usize, const Q: usize> Protocol for FaultSite<N, L, Q> {
    type Msg = Stamped<Msg<Q>>;
    const MAX_OUTPUTS: usize = Site::<N, L, Q>::MAX_OUTPUTS;

    fn id(&self) -> NodeId {
        self.site.id()
    }

    /// A member's step of the base protocol: a delivered message must carry the site's
    /// epoch ([`FaultSite::accepts`]); a site that is not a member takes no step
    /// ([`KernelError::NotMember`]). Outputs are stamped with the epoch.
    fn step<S: Sink<Output<Self::Msg>>>(
        &mut self,
        input: Input<'_, Self::Msg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        let input = match input {
            Input::Deliver { from, msg } => {
                self.accepts(msg.epoch, msg.msg.lock())?;
                Input::Deliver {
                    from,
                    msg: &msg.msg,
                }
            }
            Input::Acquire { lock, mode } => Input::Acquire { lock, mode },
            Input::TryAcquire { lock, mode } => Input::TryAcquire { lock, mode },
            Input::Cancel { lock } => Input::Cancel { lock },
            Input::Downgrade { lock, mode } => Input::Downgrade { lock, mode },
            Input::Convert { lock, mode, wait } => Input::Convert { lock, mode, wait },
            Input::SetValue { lock, value } => Input::SetValue { lock, value },
            Input::Release { lock } => Input::Release { lock },
            Input::Upgrade { lock } => Input::Upgrade { lock },
            Input::SetPriority { base } => Input::SetPriority { base },
        };
        if self.standing != Standing::Member {
            return Err(KernelError::NotMember);
        }
        let mut sink = StampSink {
            epoch: self.epoch,
            out,
        };
        self.site.step(input, &mut sink)
    }
    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.site.lock(lock)?.held())
    }
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.site.lock(lock)?.has_token())
    }
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.site.lock(lock)?.pending_mode() != Mode::Phi)
    }
    fn pending_mode(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.site.lock(lock)?.pending_mode())
    }
    fn value(&self, lock: LockId) -> Result<Option<ValueBlock>, KernelError> {
        self.site.value(lock)
    }
    fn kind(msg: &Self::Msg) -> MsgKind {
        msg.msg.kind()
    }
    fn lock_of(msg: &Self::Msg) -> LockId {
        msg.msg.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type FS = FaultSite<4, 1, 4>;
    type Out = heapless::Vec<Output<Stamped<Msg<4>>>, 64>;
    const L0: LockId = LockId(0);

    fn site(i: u16) -> FS {
        FS::new(Site::new(NodeId(i), NodeId(0)).unwrap())
    }

    fn all(n: usize) -> [bool; 4] {
        core::array::from_fn(|i| i < n)
    }

    /// Runs one input at `s` and returns its outputs.
    fn step(s: &mut FS, input: Input<'_, Stamped<Msg<4>>>) -> Out {
        let mut out = Out::new();
        s.step(input, &mut out).unwrap();
        out
    }

    fn sends(out: &Out) -> impl Iterator<Item = (NodeId, &Stamped<Msg<4>>)> + '_ {
        out.iter().filter_map(|o| match o {
            Output::Send { to, msg } => Some((*to, msg)),
            _ => None,
        })
    }

    fn entry(r: u16, mode: Mode, serial: u32) -> QueueEntry {
        QueueEntry {
            requester: NodeId(r),
            mode,
            serial,
            prio: 0,
        }
    }

    fn report(node: u16, epoch: Epoch) -> LockReport<4> {
        LockReport::empty(NodeId(node), epoch, L0)
    }

    #[test]
    fn outputs_are_stamped_and_other_epochs_rejected_unchanged() {
        let (mut a, mut b) = (site(0), site(1));
        let out = step(
            &mut b,
            Input::Acquire {
                lock: L0,
                mode: Mode::W,
            },
        );
        let (to, msg) = sends(&out).next().unwrap();
        assert_eq!((to, msg.epoch), (NodeId(0), 0));
        for (epoch, err) in [
            (1, KernelError::FutureEpoch(L0)),
            (0, KernelError::StaleEpoch(L0)),
        ] {
            let mut m = msg.clone();
            m.epoch = epoch;
            let mut x = a.clone();
            x.epoch = 1 - epoch; // the receiver is in the other epoch
            let before = x.clone();
            let mut out = Out::new();
            let r = x.step(
                Input::Deliver {
                    from: NodeId(1),
                    msg: &m,
                },
                &mut out,
            );
            assert_eq!(r, Err(err));
            assert_eq!((x, out.len()), (before, 0));
        }
        // Off: the stamp is ignored.
        let mut x = a.clone().with_recovery(RecoveryVariant {
            epoch_check: false,
            ..RecoveryVariant::HILOCK
        });
        x.epoch = 5;
        assert!(x.accepts(0, L0).is_ok());
        // Same epoch: delivered (Rule 3.2, the token goes to n1).
        let out = step(
            &mut a,
            Input::Deliver {
                from: NodeId(1),
                msg,
            },
        );
        assert!(matches!(
            sends(&out).next(),
            Some((
                _,
                Stamped {
                    epoch: 0,
                    msg: Msg::Token { .. }
                }
            ))
        ));
    }

    #[test]
    fn a_site_that_is_not_a_member_takes_no_step() {
        let mut s = site(1);
        s.expire_lease().unwrap();
        let before = s.clone();
        let mut out = Out::new();
        let acquire = || Input::Acquire {
            lock: L0,
            mode: Mode::R,
        };
        assert_eq!(s.step(acquire(), &mut out), Err(KernelError::NotMember));
        let mut j = FS::joining(NodeId(2)).unwrap();
        assert_eq!(j.step(acquire(), &mut out), Err(KernelError::NotMember));
        assert_eq!((s, out.len()), (before, 0));
    }

    #[test]
    fn lease_expiry_kills_holds_and_pending_requests() {
        let mut a = site(0);
        step(
            &mut a,
            Input::Acquire {
                lock: L0,
                mode: Mode::W,
            },
        );
        let k = a.expire_lease().unwrap();
        assert_eq!((k.held, k.pending), ([Mode::W], [false]));
        assert_eq!(a.standing(), Standing::Expired);
        let l = a.site().lock(L0).unwrap();
        assert_eq!((l.held(), l.has_token()), (Mode::Phi, false));
        let before = a.clone();
        assert_eq!(a.expire_lease(), Err(RecoveryError::Expired(NodeId(0))));
        assert_eq!(a, before);
        let mut j = FS::joining(NodeId(1)).unwrap();
        assert_eq!(j.expire_lease(), Err(RecoveryError::NotMember(NodeId(1))));
        // A pending request fails too.
        let mut b = site(1);
        step(
            &mut b,
            Input::Acquire {
                lock: L0,
                mode: Mode::W,
            },
        );
        assert_eq!(b.expire_lease().unwrap().pending, [true]);
    }

    #[test]
    fn report_errors() {
        let mut a = site(0);
        assert_eq!(
            a.report(LockId(1)),
            Err(RecoveryError::UnknownLock(LockId(1)))
        );
        a.expire_lease().unwrap();
        assert_eq!(a.report(L0), Err(RecoveryError::Expired(NodeId(0))));
        let j = FS::joining(NodeId(3)).unwrap();
        assert_eq!(j.report(L0).unwrap(), report(3, 0));
    }

    #[test]
    fn rebuild_rejects_bad_reports() {
        let m = all(2);
        let ok = [report(0, 0), report(1, 0)];
        assert!(rebuild::<4, 4>(1, &m, &ok).is_ok());
        let cases: [(&[LockReport<4>], RecoveryError); 5] = [
            (&[], RecoveryError::NoMembers),
            (&[report(0, 0)], RecoveryError::MissingReport(NodeId(1))),
            (
                &[report(0, 0), report(1, 0), report(2, 0)],
                RecoveryError::NotMember(NodeId(2)),
            ),
            (
                &[report(0, 0), report(0, 0)],
                RecoveryError::DuplicateReport(NodeId(0)),
            ),
            (
                &[report(0, 1), report(1, 0)],
                RecoveryError::StaleEpoch {
                    plan: 1,
                    current: 1,
                },
            ),
        ];
        for (reports, err) in cases {
            assert_eq!(rebuild::<4, 4>(1, &m, reports), Err(err));
        }
        let mut r = ok.clone();
        r[0].node = NodeId(9);
        assert_eq!(
            rebuild::<4, 4>(1, &m, &r),
            Err(RecoveryError::UnknownNode(NodeId(9)))
        );
        let mut r = ok.clone();
        r[1].lock = LockId(1);
        assert_eq!(
            rebuild::<4, 4>(1, &m, &r),
            Err(RecoveryError::WrongLock(LockId(1)))
        );
        let mut r = ok.clone();
        r[0].token = Some(3);
        r[1].token = Some(4);
        assert_eq!(
            rebuild::<4, 4>(1, &m, &r),
            Err(RecoveryError::TwoTokens(L0))
        );
        for pending in [Pending::Upgrade, Pending::Convert(Mode::W)] {
            let mut r = ok.clone();
            r[1].pending = pending;
            assert_eq!(
                rebuild::<4, 4>(1, &m, &r),
                Err(RecoveryError::UpgradeWithoutToken(NodeId(1)))
            );
        }
        let mut r = ok.clone();
        r[1].queue.push(entry(7, Mode::R, 1)).unwrap();
        assert_eq!(rebuild::<4, 4>(1, &m, &r), Err(RecoveryError::BadEntry(L0)));
        let mut r = ok.clone();
        r[0].held = Mode::R;
        r[1].held = Mode::IW;
        assert_eq!(
            rebuild::<4, 4>(1, &m, &r),
            Err(RecoveryError::ConflictingHolds(L0))
        );
        // More distinct requesters than the queue holds.
        let m3 = all(3);
        let r: [LockReport<2>; 3] = core::array::from_fn(|i| LockReport {
            pending: Pending::Request(entry(i as u16, Mode::W, 1)),
            ..LockReport::empty(NodeId(i as u16), 0, L0)
        });
        assert_eq!(
            rebuild::<4, 2>(1, &m3, &r),
            Err(RecoveryError::QueueOverflow(L0))
        );
    }

    #[test]
    fn a_lost_token_is_regenerated_once_above_every_generation_seen() {
        // Members n1, n2, n3; n0 (the token node) is gone.
        let m = [false, true, true, true];
        let mut r = [report(1, 2), report(2, 2), report(3, 2)];
        r[0].generation_seen = 4;
        r[1].generation_seen = 7;
        r[1].held = Mode::R;
        r[2].held = Mode::IR;
        let p = rebuild::<4, 4>(3, &m, &r).unwrap();
        assert_eq!(
            (p.root, p.generation, p.regenerated, p.epoch),
            (NodeId(1), 8, true, 3)
        );
        assert_eq!(
            &p.holds[..],
            &[
                (NodeId(1), Mode::Phi),
                (NodeId(2), Mode::R),
                (NodeId(3), Mode::IR)
            ]
        );
        // A surviving token stays where it is, with its generation: nothing regenerated.
        r[2].token = Some(9);
        let p = rebuild::<4, 4>(3, &m, &r).unwrap();
        assert_eq!((p.root, p.generation, p.regenerated), (NodeId(3), 9, false));
    }

    /// Generations are compared modulo 2^64 (`super::super::wrap::newer_generation`):
    /// reported just below and at `u64::MAX`, the regenerated token's is the next one, 0,
    /// which every member takes as newer; a new incarnation's report of 0 says nothing.
    #[test]
    fn a_token_regenerated_across_the_wrap_is_newer_than_every_generation_seen() {
        let m = [false, true, true, true];
        let mut r = [report(1, 2), report(2, 2), report(3, 2)];
        r[0].generation_seen = u64::MAX - 1;
        r[1].generation_seen = u64::MAX;
        r[2].generation_seen = 0;
        let p = rebuild::<4, 4>(3, &m, &r).unwrap();
        assert_eq!((p.generation, p.regenerated), (0, true));
        assert!(crate::token::wrap::newer_generation(p.generation, u64::MAX));
        r[1].generation_seen = 5;
        r[0].generation_seen = u64::MAX - 2;
        let p = rebuild::<4, 4>(3, &m, &r).unwrap();
        assert_eq!(p.generation, 6);
    }

    #[test]
    fn pending_requests_keep_fifo_then_priority_order_and_dead_ones_go() {
        let m = [true, true, true, false];
        let mut r = [report(0, 0), report(1, 0), report(2, 0)];
        let e1 = entry(1, Mode::W, 3);
        let mut e2 = entry(2, Mode::R, 1);
        r[1].pending = Pending::Request(e1);
        r[2].pending = Pending::Request(e2);
        // n0 (the token node) queued n2's request before n1's, and n3's (dead); n1's
        // queue holds an answered (older) request of n2.
        r[0].token = Some(1);
        for e in [e2, entry(3, Mode::W, 1), e1] {
            r[0].queue.push(e).unwrap();
        }
        r[1].queue.push(entry(2, Mode::R, 0)).unwrap();
        let p = rebuild::<4, 4>(1, &m, &r).unwrap();
        assert_eq!(&p.queue[..], &[e2, e1]);
        // A higher priority goes first (Rule 8.1), FIFO otherwise.
        e2.prio = 0;
        let mut e1p = e1;
        e1p.prio = 2;
        r[1].pending = Pending::Request(e1p);
        r[0].queue.clear();
        let p = rebuild::<4, 4>(1, &m, &r).unwrap();
        assert_eq!(&p.queue[..], &[e1p, e2]);
    }

    #[test]
    fn install_errors_leave_the_site_unchanged() {
        let m = all(2);
        let plan = rebuild::<4, 4>(1, &m, &[report(0, 0), report(1, 0)]).unwrap();
        let mut out = Out::new();
        let mut s = site(1);
        let cases = [
            (
                0,
                plan.clone(),
                RecoveryError::StaleEpoch {
                    plan: 0,
                    current: 0,
                },
            ),
            (2, plan.clone(), RecoveryError::WrongPlans),
        ];
        for (epoch, p, err) in cases {
            let before = s.clone();
            assert_eq!(s.install(epoch, &[p], &mut out), Err(err));
            assert_eq!((&s, out.len()), (&before, 0));
        }
        let mut p = plan.clone();
        p.epoch = 0;
        assert_eq!(
            s.install(0, &[p], &mut out),
            Err(RecoveryError::StaleEpoch {
                plan: 0,
                current: 0
            })
        );
        let mut p = plan.clone();
        p.lock = LockId(1);
        assert_eq!(s.install(1, &[p], &mut out), Err(RecoveryError::WrongPlans));
        assert_eq!(s.install(1, &[], &mut out), Err(RecoveryError::WrongPlans));
        let mut p = plan.clone();
        p.holds.retain(|(n, _)| *n != NodeId(1));
        assert_eq!(
            s.install(1, &[p], &mut out),
            Err(RecoveryError::NotMember(NodeId(1)))
        );
        let mut p = plan.clone();
        p.root = NodeId(9);
        assert_eq!(
            s.install(1, &[p], &mut out),
            Err(RecoveryError::BadEntry(L0))
        );
        let mut small: heapless::Vec<Output<Stamped<Msg<4>>>, 4> = heapless::Vec::new();
        assert_eq!(
            s.install(1, core::slice::from_ref(&plan), &mut small),
            Err(RecoveryError::OutputsFull)
        );
        let mut x = site(1);
        x.expire_lease().unwrap();
        assert_eq!(
            x.install(1, core::slice::from_ref(&plan), &mut out),
            Err(RecoveryError::Expired(NodeId(1)))
        );
        assert_eq!(s, site(1));
        // The install itself, then the same plan again: rejected (no second regeneration),
        // unless the safeguard is off.
        s.install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
        let before = s.clone();
        assert_eq!(
            s.install(1, core::slice::from_ref(&plan), &mut out),
            Err(RecoveryError::StaleEpoch {
                plan: 1,
                current: 1
            })
        );
        assert_eq!(s, before);
        let mut r = site(0).with_recovery(RecoveryVariant {
            install_once: false,
            ..RecoveryVariant::HILOCK
        });
        r.install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
        assert!(r.install(1, &[plan], &mut out).is_ok());
    }

    /// The whole recovery: n0 holds the token and W and dies; n1 and n2 wait for W and R.
    /// After the install the token is regenerated at n1 and n1's W, then n2's R, are granted
    /// by the ordinary rules; an old message is rejected.
    #[test]
    fn a_dead_token_holder_costs_only_its_own_hold() {
        let mut s: [FS; 3] = core::array::from_fn(|i| site(i as u16));
        step(
            &mut s[0],
            Input::Acquire {
                lock: L0,
                mode: Mode::W,
            },
        );
        let req1 = step(
            &mut s[1],
            Input::Acquire {
                lock: L0,
                mode: Mode::W,
            },
        );
        step(
            &mut s[2],
            Input::Acquire {
                lock: L0,
                mode: Mode::R,
            },
        );
        let dead_fence = s[0].site().lock(L0).unwrap().fence().unwrap();
        // n0 dies. n1 and n2 form epoch 1.
        let members = [false, true, true, false];
        let reports = [s[1].report(L0).unwrap(), s[2].report(L0).unwrap()];
        let plan = rebuild::<4, 4>(1, &members, &reports).unwrap();
        assert!(plan.regenerated);
        assert_eq!(plan.root, NodeId(1));
        let mut out = Out::new();
        s[1].install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
        assert!(out.contains(&Output::Granted {
            lock: L0,
            mode: Mode::W
        }));
        // The regenerated token's fences are above every fence of epoch 0, also those only
        // the dead node saw (3.6).
        let f1 = s[1].site().lock(L0).unwrap().fence().unwrap();
        assert!(f1 > dead_fence && f1 > u64::from(u32::MAX), "fence {f1}");
        let mut out2 = Out::new();
        s[2].install(1, core::slice::from_ref(&plan), &mut out2)
            .unwrap();
        assert!(out2.is_empty());
        let l2 = s[2].site().lock(L0).unwrap();
        assert_eq!((l2.parent(), l2.pending_mode()), (Some(NodeId(1)), Mode::R));
        // n1's old request to n0 (epoch 0) arriving somewhere now is stale.
        let (_, old) = sends(&req1).next().unwrap();
        let mut o = Out::new();
        assert_eq!(
            s[2].step(
                Input::Deliver {
                    from: NodeId(1),
                    msg: old
                },
                &mut o
            ),
            Err(KernelError::StaleEpoch(L0))
        );
        // n1 releases: n2's R is granted (token transfer, epoch 1).
        let out = step(&mut s[1], Input::Release { lock: L0 });
        let (to, tok) = sends(&out).next().unwrap();
        assert_eq!((to, tok.epoch), (NodeId(2), 1));
        let got = step(
            &mut s[2],
            Input::Deliver {
                from: NodeId(1),
                msg: tok,
            },
        );
        assert!(got.contains(&Output::Granted {
            lock: L0,
            mode: Mode::R
        }));
    }

    #[test]
    fn membership_waits_for_an_expired_lease_unless_the_safeguard_is_off() {
        let cur = [true, true, true, false];
        let view = [
            Liveness::Up,
            Liveness::Suspected,
            Liveness::Crashed,
            Liveness::Joining,
        ];
        let h = RecoveryVariant::HILOCK;
        assert_eq!(
            next_members(&cur, &view, h),
            Some([true, true, false, true])
        );
        let off = RecoveryVariant {
            kill_before_regrant: false,
            ..h
        };
        assert_eq!(
            next_members(&cur, &view, off),
            Some([true, false, false, true])
        );
        let view = [Liveness::Expired, Liveness::Up, Liveness::Up, Liveness::Up];
        assert_eq!(
            next_members(&cur, &view, h),
            Some([false, true, true, false])
        );
        // Nothing changed: no epoch. A new incarnation of a member: a new epoch.
        let view = [
            Liveness::Up,
            Liveness::Suspected,
            Liveness::Up,
            Liveness::Up,
        ];
        assert_eq!(next_members(&cur, &view, h), None);
        let view = [Liveness::Up, Liveness::Up, Liveness::Joining, Liveness::Up];
        assert_eq!(next_members(&cur, &view, h), Some(cur));
    }

    #[test]
    fn local_lease_ends_before_the_service_can_regrant() {
        assert_eq!(
            local_lease(10, 1, 1_000_000),
            Err(RecoveryError::DriftTooLarge)
        );
        assert_eq!(local_lease(10, 10, 0), Err(RecoveryError::LeaseTooShort));
        assert_eq!(
            local_lease(1, 0, 999_999),
            Err(RecoveryError::LeaseTooShort)
        );
        assert_eq!(local_lease(10_000, 1_000, 0), Ok(9_000));
        // local / (1 − ρ) + grace ≤ ttl / (1 + ρ), in exact integer arithmetic.
        for ttl in [2_000u64, 10_000, 60_000, u64::MAX / 2] {
            for grace in [0u64, 500, 1_000] {
                for rho in [0u32, 100, 50_000, 300_000] {
                    let Ok(local) = local_lease(ttl, grace, rho) else {
                        continue;
                    };
                    let (p, r) = (u128::from(PPM), u128::from(rho));
                    // local·p/(p−r) + grace ≤ ttl·p/(p+r)  ⇔  (local·p + grace·(p−r))·(p+r) ≤ ttl·p·(p−r)
                    let lhs = (u128::from(local) * p + u128::from(grace) * (p - r)) * (p + r);
                    let rhs = u128::from(ttl) * p * (p - r);
                    assert!(lhs <= rhs, "ttl {ttl} grace {grace} rho {rho}: {local}");
                }
            }
        }
    }
}
