//! Identifiers, messages, inputs and outputs of the sans-IO interface.

use crate::mode::Mode;
use crate::token::prio::{Frozen, Priority};
use crate::token::value::{ValueBlock, VALUE_LEN};
use core::fmt;

/// A node (site) of the system: an index `0..N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct NodeId(pub u16);

impl NodeId {
    /// The index of the node as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A lock held by every site: an index `0..L`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct LockId(pub u16);

impl LockId {
    /// The index of the lock as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}", self.0)
    }
}

/// A request waiting in a local queue (Rule 4) or carried with the token.
///
/// `serial` numbers the requests of one requester for one lock (1, 2, …); with the
/// requester it identifies a request, so that grants, tokens and duplicates can be matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct QueueEntry {
    /// The node that issued the request.
    pub requester: NodeId,
    /// The requested mode M_R (never Φ).
    pub mode: Mode,
    /// The requester's serial number of this request.
    pub serial: u32,
    /// The request's effective priority ξ (0 when priorities are not used). A PIP reissue
    /// repeats the request with the same serial and a higher priority.
    pub prio: Priority,
}

/// A protocol message of the hierarchical protocol. `Q` bounds the queue carried by the token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Msg<const Q: usize> {
    /// Rule 2 / Rule 4: a request travelling towards the token along parent pointers.
    Request {
        /// The lock.
        lock: LockId,
        /// The request.
        entry: QueueEntry,
        /// Number of this request among those the sender sent to the receiver for this lock
        /// (1, 2, …): re-deliveries are recognised by it.
        hop: u32,
    },
    /// Rule 3.1 / 3.2: a granted copy; the requester becomes a child of the sender.
    Grant {
        /// The lock.
        lock: LockId,
        /// The request being answered.
        entry: QueueEntry,
        /// Attachment counter of the (sender → requester) parent/child link after this grant.
        epoch: u32,
        /// The sender's record of the requester's owned mode after this grant.
        recorded: Mode,
        /// Frozen modes and thresholds the requester must respect (invariant 2.3).
        frozen: Frozen,
        /// The fencing token of this grant ([`crate::LockNode::fence`]).
        fence: u64,
        /// The granter's value block (`spec/SPEC.md` 1.15): the requester's from now on.
        value: ValueBlock,
    },
    /// Rule 3.2: the token, with the sender's queue; the requester becomes the token node
    /// and the sender becomes its child if it still owns a mode.
    Token {
        /// The lock.
        lock: LockId,
        /// The request being answered.
        entry: QueueEntry,
        /// Generation of the token (incremented by every transfer); detects duplicates.
        generation: u64,
        /// The mode the sender still owns (its subtree, without the requester's).
        sender_owned: Mode,
        /// Attachment counter of the new (requester → sender) parent/child link.
        epoch: u32,
        /// The frozen modes the sender had (what the sender already respects).
        frozen: Frozen,
        /// The sender's local queue (Rule 5.1: "the local queue is piggybacked").
        queue: heapless::Vec<QueueEntry, Q>,
        /// The fencing counter carried with the token: the fence of this transfer.
        fence: u64,
        /// The token node's value block (`spec/SPEC.md` 1.15), carried with the token.
        value: ValueBlock,
    },
    /// Rule 5.2: the sender's owned mode changed; `owned` is its new owned mode (Φ: the
    /// sender leaves the copyset). `epoch` names the link the sender believes it is on.
    Release {
        /// The lock.
        lock: LockId,
        /// The sender's new owned mode.
        owned: Mode,
        /// The sender's attachment counter for this link.
        epoch: u32,
    },
    /// Rule 6 / 6_PRIO: modes the receiver must no longer grant to requests up to their
    /// thresholds (invariant 2.3, Table 3.1).
    Freeze {
        /// The lock.
        lock: LockId,
        /// The frozen modes with thresholds.
        modes: Frozen,
        /// hilock's blocking notification (`spec/SPEC.md` 1.16): the modes requested by the
        /// requests that wait at the token node (its queue and a waiting Rule 7 upgrade),
        /// each with the highest priority waiting for it, so that a copy holder can name
        /// the waiter its hold blocks ([`Output::Blocking`]). A relay passes on what it
        /// received. Absent from frames saved before it: nothing waits.
        #[cfg_attr(feature = "serde", serde(default))]
        waiting: Frozen,
    },
    /// hilock's try-lock (`spec/SPEC.md` 1.12): a request that must not wait. It travels
    /// the route of a [`Msg::Request`] (Rules 2, 4.1 F) and is granted where a request
    /// would be granted (Rules 3.1, 3.2); where a request would be queued (Rules 4.1 Q,
    /// 4.2) or frozen for (Rule 6) the node answers [`Msg::Busy`] instead.
    TryRequest {
        /// The lock.
        lock: LockId,
        /// The request (never queued anywhere).
        entry: QueueEntry,
        /// Numbered with the [`Msg::Request`]s the sender sent the receiver for this lock.
        hop: u32,
    },
    /// hilock's try-lock (`spec/SPEC.md` 1.12): the sender would have queued the
    /// [`Msg::TryRequest`] `entry`; sent straight to its requester, which gives up.
    Busy {
        /// The lock.
        lock: LockId,
        /// The refused request.
        entry: QueueEntry,
    },
}

impl<const Q: usize> Msg<Q> {
    /// The lock the message is about.
    pub fn lock(&self) -> LockId {
        match self {
            Msg::Request { lock, .. }
            | Msg::Grant { lock, .. }
            | Msg::Token { lock, .. }
            | Msg::Release { lock, .. }
            | Msg::Freeze { lock, .. }
            | Msg::TryRequest { lock, .. }
            | Msg::Busy { lock, .. } => *lock,
        }
    }

    /// A short name of the message kind.
    pub fn kind(&self) -> MsgKind {
        match self {
            Msg::Request { .. } => MsgKind::Request,
            Msg::Grant { .. } => MsgKind::Grant,
            Msg::Token { .. } => MsgKind::Token,
            Msg::Release { .. } => MsgKind::Release,
            Msg::Freeze { .. } => MsgKind::Freeze,
            Msg::TryRequest { .. } => MsgKind::Request,
            Msg::Busy { .. } => MsgKind::Busy,
        }
    }
}

/// Kinds of messages, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MsgKind {
    /// [`Msg::Request`] and [`Msg::TryRequest`] (and Naimi-Trehel requests).
    Request,
    /// [`Msg::Grant`].
    Grant,
    /// [`Msg::Token`] (and Naimi-Trehel tokens).
    Token,
    /// [`Msg::Release`].
    Release,
    /// [`Msg::Freeze`].
    Freeze,
    /// [`Msg::Busy`].
    Busy,
}

/// An input to a site: a user operation or a delivered message. Time and randomness never
/// enter the kernel except through inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input<'a, M> {
    /// User API `RequestLock(M_R)` (Fig. 2.4).
    Acquire {
        /// The lock.
        lock: LockId,
        /// The requested mode (not Φ).
        mode: Mode,
    },
    /// hilock's try-lock (`spec/SPEC.md` 1.12): `RequestLock(M_R)` that must not wait. It
    /// ends in [`Output::Granted`] (at once, or when a grant or the token arrives) or in
    /// [`Output::WouldBlock`], and leaves no queue entry, freeze or pending request behind.
    TryAcquire {
        /// The lock.
        lock: LockId,
        /// The requested mode (not Φ).
        mode: Mode,
    },
    /// hilock's cancel (`spec/SPEC.md` 1.13): the local user withdraws its pending
    /// request, try or upgrade of `lock`. Answered at once with [`Output::Cancelled`]; no
    /// [`Output::Granted`], [`Output::Upgraded`] or [`Output::WouldBlock`] of the withdrawn
    /// request follows. A request or try keeps running in the protocol: when its grant or
    /// the token arrives the site releases at once (Rule 5), and a busy answer to a try
    /// ends it without output. An upgrade (Rule 7 waits at the token node, nothing is in
    /// flight) is withdrawn at once: the site keeps U. Nothing pending (or already
    /// cancelled): [`crate::KernelError::NotPending`].
    Cancel {
        /// The lock.
        lock: LockId,
    },
    /// hilock's downgrade (`spec/SPEC.md` 1.14, the DLM's down-conversion): the local
    /// holder of `lock` converts its held mode to the weaker `mode` without releasing it
    /// ([`Mode::downgrades_to`]: W → U, R, IW, IR; U → R, IR; R → IR; IW → IR). M_H =
    /// `mode` and the hold keeps its fence; then what Rule 5 does after a release: a
    /// non-token node whose owned mode changed tells its parent (Rule 5.2,
    /// [`Msg::Release`]) and the queue is served (Rule 5.1). Answered at once with
    /// [`Output::Downgraded`]. Nothing held: [`crate::KernelError::NotHeld`]; Φ:
    /// [`crate::KernelError::InvalidMode`]; not a weaker mode:
    /// [`crate::KernelError::NotWeaker`]; an upgrade pending:
    /// [`crate::KernelError::UpgradePending`] (nothing changes).
    Downgrade {
        /// The lock.
        lock: LockId,
        /// The weaker mode to hold from now on (not Φ).
        mode: Mode,
    },
    /// hilock's conversion (`spec/SPEC.md` 1.17, the DLM's `LKF_CONVERT`; without `wait`
    /// with `LKF_NOQUEUE`): the local holder of `lock` converts its held mode to `mode`
    /// without releasing it. A weaker `mode` ([`Mode::downgrades_to`]) is a downgrade,
    /// answered [`Output::Downgraded`] as [`Input::Downgrade`] is. Any other `mode` is
    /// converted at once where this site may grant it itself: at the token node if `mode`
    /// is compatible with every other hold (Table 2.1) and neither frozen nor in conflict
    /// with a waiting request, with a new fence (Rule 3.2); at a non-token node if its
    /// owned mode covers `mode` (Table 2.2) and `mode` is not frozen (Rule 2). Answered
    /// [`Output::Converted`]; else, with `wait` at the token node, the conversion waits
    /// (below); else [`Output::ConvertBusy`] and nothing changes. A conversion never passes
    /// a waiting request, and only the token node's waits, so two conversions never wait
    /// for each other. Nothing held: [`crate::KernelError::NotHeld`]; Φ:
    /// [`crate::KernelError::InvalidMode`]; the held mode:
    /// [`crate::KernelError::AlreadyHeld`]; an upgrade or conversion waiting:
    /// [`crate::KernelError::UpgradePending`] (nothing changes).
    Convert {
        /// The lock.
        lock: LockId,
        /// The mode to hold from now on (not Φ).
        mode: Mode,
        /// Whether the conversion may wait (the DLM's `LKF_CONVERT` without
        /// `LKF_NOQUEUE`): at the token node, where no frozen mode and no waiting request
        /// conflicts with `mode` but another hold does, it waits for those holds to end
        /// (`Pending::Convert`, Rule 7's wait for any mode), and `Converted` comes when
        /// they have; [`Input::Cancel`] withdraws it. Everywhere else as without it.
        wait: bool,
    },
    /// hilock's lock value block (`spec/SPEC.md` 1.15, the DLM's LVB): the local W
    /// holder of `lock` writes its value block; the block is valid from now on. The token
    /// carries it and every later grant a copy of it, so the next holders read it
    /// ([`crate::Site::value`]). No output. Only W may write: a U holder is compatible
    /// with R copies that grant further copies of the old value. Not held in W:
    /// [`crate::KernelError::NotWriter`] (nothing changes).
    SetValue {
        /// The lock.
        lock: LockId,
        /// The new value.
        value: [u8; VALUE_LEN],
    },
    /// User API `RequestUnlock()` (Fig. 2.7).
    Release {
        /// The lock.
        lock: LockId,
    },
    /// User API `RequestUpgrade()` (Fig. 2.11): U → W.
    Upgrade {
        /// The lock.
        lock: LockId,
    },
    /// The site's base priority β becomes `base` (chapter 3). Its effective priority ξ is
    /// recomputed; under PIP, pending requests are reissued if ξ rose.
    SetPriority {
        /// The new base priority.
        base: Priority,
    },
    /// A message from `from` arrives.
    Deliver {
        /// The sender.
        from: NodeId,
        /// The message.
        msg: &'a M,
    },
}

/// An output of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Output<M> {
    /// Send `msg` to `to`.
    Send {
        /// The destination.
        to: NodeId,
        /// The message.
        msg: M,
    },
    /// The local user's request was granted: it now holds `lock` in `mode`.
    Granted {
        /// The lock.
        lock: LockId,
        /// The held mode.
        mode: Mode,
    },
    /// The local user's U → W upgrade completed (Rule 7).
    Upgraded {
        /// The lock.
        lock: LockId,
    },
    /// The local user's [`Input::Cancel`] was accepted (`spec/SPEC.md` 1.13): its pending
    /// request, try or upgrade of `lock` is withdrawn; no grant of it follows.
    Cancelled {
        /// The lock.
        lock: LockId,
    },
    /// The local user's [`Input::Downgrade`] was accepted (`spec/SPEC.md` 1.14): the site
    /// holds `lock` in `mode` now, with the fence of the same hold.
    Downgraded {
        /// The lock.
        lock: LockId,
        /// The mode now held.
        mode: Mode,
    },
    /// The local user's [`Input::Convert`] was done (`spec/SPEC.md` 1.17): the site holds
    /// `lock` in `mode` now (not a weaker mode: that is [`Output::Downgraded`]), with a new
    /// fence at the token node and, at a non-token node, the fence of the grant of its
    /// owned mode (as a Rule 2 grant).
    Converted {
        /// The lock.
        lock: LockId,
        /// The mode now held.
        mode: Mode,
    },
    /// The local user's [`Input::Convert`] to `mode` was refused: converting in place would
    /// have meant waiting (another hold, a frozen mode or a waiting request conflicts, or
    /// this site cannot grant `mode` itself). The hold is unchanged.
    ConvertBusy {
        /// The lock.
        lock: LockId,
        /// The mode that was asked for.
        mode: Mode,
    },
    /// hilock's blocking notification (`spec/SPEC.md` 1.16, the DLM's blocking AST): the
    /// local user holds `lock`, and a request for `mode` — which conflicts with the held
    /// mode (Table 2.1) — waits for it, at priority `prio` (the highest priority known
    /// here to wait for `mode`). Emitted at the token node when it queues such a request
    /// (Rule 4.2, or the queue that arrives with the token, Rule 8.2) and at a copy
    /// holder when a freeze naming such a request arrives (Rule 6, Table 2.4). At most
    /// once per waiting mode per hold; a new hold is told again.
    Blocking {
        /// The lock.
        lock: LockId,
        /// The mode a waiting request asks for.
        mode: Mode,
        /// The priority of that request.
        prio: Priority,
    },
    /// The local user's [`Input::TryAcquire`] was refused: granting it would have meant
    /// waiting. Nothing of the request is left in the protocol; no grant follows.
    WouldBlock {
        /// The lock.
        lock: LockId,
        /// The mode that was tried.
        mode: Mode,
    },
}

impl<M> Output<M> {
    /// The same output with the message of a `Send` mapped by `f` (every other output
    /// carries no message and is kept as it is): how a wrapper stamps or unstamps
    /// messages.
    pub fn map_msg<N>(self, f: impl FnOnce(M) -> N) -> Output<N> {
        match self {
            Output::Send { to, msg } => Output::Send { to, msg: f(msg) },
            Output::Granted { lock, mode } => Output::Granted { lock, mode },
            Output::Upgraded { lock } => Output::Upgraded { lock },
            Output::Cancelled { lock } => Output::Cancelled { lock },
            Output::Downgraded { lock, mode } => Output::Downgraded { lock, mode },
            Output::Converted { lock, mode } => Output::Converted { lock, mode },
            Output::ConvertBusy { lock, mode } => Output::ConvertBusy { lock, mode },
            Output::Blocking { lock, mode, prio } => Output::Blocking { lock, mode, prio },
            Output::WouldBlock { lock, mode } => Output::WouldBlock { lock, mode },
        }
    }

    /// The output with a reference to its message.
    pub fn as_ref(&self) -> Output<&M> {
        match self {
            Output::Send { to, msg } => Output::Send { to: *to, msg },
            Output::Granted { lock, mode } => Output::Granted {
                lock: *lock,
                mode: *mode,
            },
            Output::Upgraded { lock } => Output::Upgraded { lock: *lock },
            Output::Cancelled { lock } => Output::Cancelled { lock: *lock },
            Output::Downgraded { lock, mode } => Output::Downgraded {
                lock: *lock,
                mode: *mode,
            },
            Output::Converted { lock, mode } => Output::Converted {
                lock: *lock,
                mode: *mode,
            },
            Output::ConvertBusy { lock, mode } => Output::ConvertBusy {
                lock: *lock,
                mode: *mode,
            },
            Output::Blocking { lock, mode, prio } => Output::Blocking {
                lock: *lock,
                mode: *mode,
                prio: *prio,
            },
            Output::WouldBlock { lock, mode } => Output::WouldBlock {
                lock: *lock,
                mode: *mode,
            },
        }
    }
}

/// The outputs of steps: a fixed-capacity buffer that the caller drains (or clears).
/// Steps append; a step that fails appends nothing.
pub type Outputs<M, const O: usize> = heapless::Vec<Output<M>, O>;

/// Where a step appends its outputs (`T` is the output type: [`Output`] for the token
/// protocols; other engines of the kernel have their own). A step first checks that [`Sink::room`] is at least the
/// most outputs it can produce (e.g. [`crate::Site::MAX_OUTPUTS`]) and is rejected with
/// [`crate::KernelError::OutputsFull`] otherwise, so a sink never fills up half-way
/// through a step. [`Outputs`] (fixed capacity, no heap) is a sink; a host program may
/// implement it over a growable buffer.
pub trait Sink<T> {
    /// How many more outputs fit.
    fn room(&self) -> usize;
    /// Appends `t`; gives it back if it does not fit.
    fn put(&mut self, t: T) -> Result<(), T>;
}

impl<T, const O: usize> Sink<T> for heapless::Vec<T, O> {
    fn room(&self) -> usize {
        O - self.len()
    }
    fn put(&mut self, t: T) -> Result<(), T> {
        self.push(t)
    }
}
