//! The state of one lock at one site, and the rules of chapter 2 as transitions on it.
//!
//! Every function here is total: it checks everything that can make it fail before it
//! changes anything, so a rejected input changes nothing (no rollback copy). Two failures
//! are excluded by construction rather than checked: a queue cannot overflow (`Q ≥ N` is a
//! compile-time requirement of [`crate::Site`], and a queue keeps one entry per requester)
//! and the output sink cannot fill up (`Site::step` checks its room against
//! [`crate::Site::MAX_OUTPUTS`] first). A non-token node always has a parent (`LockNode::new`
//! gives one to every non-token node and every token transfer sets one).
//!
//! No function here can panic (`embedded/no-panic.sh` checks it on the linked firmware): a
//! node id is checked against `N` where it enters the state (`Site::step` checks the
//! sender, `LockNode::on_request` the requester, `LockNode::on_token` every queued
//! entry), and the per-peer records are then read through `LockNode::peer`, which refuses
//! an id out of range with [`KernelError::UnknownNode`] instead of indexing. No valid input
//! reaches that refusal: it is the total form of a bounds check that cannot fail.

use crate::error::KernelError;
use crate::mode::{compatible, conflicts, strongest, Mode, ModeSet};
use crate::msg::{LockId, Msg, NodeId, Output, QueueEntry, Sink};
use crate::report::{Rule, RuleSet};
use crate::token::prio::{Frozen, Inheritance, Priority};
use crate::token::tables::{
    frozen_by, grantable, grantable_set, queue_or_forward_prio, tokenable, QueueOrForward,
};
use crate::token::value::{ValueBlock, VALUE_LEN};
use crate::token::wrap;

/// When a non-token node tells its parent that its owned mode dropped (Rule 5.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ReleaseRule {
    /// The thesis (Fig. 2.7, Rule 5.2): at once, whenever the owned mode changes.
    #[default]
    Eager,
    /// hilock's extension (`spec/SPEC.md` 1.7): an owned intention mode is kept while
    /// idle and given back on a freeze, a request for another mode, a token or a new
    /// epoch. Off by default.
    KeepIntention,
    /// Deliberately wrong, to show that the model checker catches it: keeps like
    /// [`ReleaseRule::KeepIntention`] but a freeze does not make the node give the kept
    /// mode back, so a W request behind a kept IR waits for ever (P4/P5).
    KeepWithoutGiveBack,
}

impl ReleaseRule {
    /// Whether this is the thesis's eager rule (the default; not serialized then, so that
    /// saved configurations stay as they were).
    pub fn is_eager(&self) -> bool {
        *self == ReleaseRule::Eager
    }
    /// Whether an idle node keeps its owned intention mode.
    pub const fn keeps(self) -> bool {
        !matches!(self, ReleaseRule::Eager)
    }
    /// Whether a freeze makes the node give its kept mode back.
    pub const fn gives_back_on_freeze(self) -> bool {
        !matches!(self, ReleaseRule::KeepWithoutGiveBack)
    }
}

/// What this site knows about one other node for one lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Peer {
    /// The owned mode of that node as recorded here while it is our child (Φ: not a child).
    /// The children with a non-Φ record are the copyset of Definition 4.
    pub child_owned: Mode,
    /// Attachment counter of the link "that node is our child": bumped by every grant we
    /// send it and every token we receive from it (and when it takes our token). A
    /// [`Msg::Release`] is applied only if it carries the current value.
    pub parent_epoch: u32,
    /// Attachment counter of the link "we are that node's child", as seen from here.
    pub child_epoch: u32,
    /// Requests sent to that node so far (the `hop` number of the last one).
    pub requests_sent: u32,
    /// Highest `hop` number of a request received from that node.
    pub requests_seen: u32,
    /// Bit `k` set: the request with `hop = requests_seen - 1 - k` was received too. With
    /// `requests_seen` it recognises a re-delivered request even on a reordering network.
    /// A request more than 32 behind the newest cannot be told apart from a re-delivery
    /// and is refused as one (`kernel/tests/node_paths.rs` checks the window against a
    /// reference set).
    pub requests_window: u32,
}

/// Protocol variant: hilock's decisions (the default) or the literal thesis readings they
/// replace (`spec/SPEC.md` 1.4, "Decisions where the thesis is silent"), so that the model
/// checker can show where the literal reading fails. Every flag is `true` in
/// [`Variant::HILOCK`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Variant {
    /// When a non-token node releases its owned mode (`spec/SPEC.md` 1.7; default: the
    /// thesis's eager Rule 5.2; [`ReleaseRule::KeepIntention`] keeps an idle intention mode).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "ReleaseRule::is_eager")
    )]
    pub release: ReleaseRule,
    /// Rule 6 freezing. `false`: nothing is ever frozen (the thesis's chapter-2 protocol
    /// "ignoring freeze messages", to measure the FIFO bypass bound without it).
    pub freezing: bool,
    /// Attachment epochs on releases and the resynchronising release after a grant
    /// (Decision 5 of `spec/SPEC.md` 1.4, releases racing grants). `false`: the literal
    /// `HandleRelease`, which sets the child's record to the released mode whenever a
    /// release arrives.
    pub release_epochs: bool,
    /// The token branch of `HandleRequest` as "tokenable ⇒ transfer the token"
    /// (Decision 1 of `spec/SPEC.md` 1.4). `false`: the literal indentation of Fig. 2.4, which
    /// transfers the token only to a requester that is already a child.
    pub tokenable_transfers: bool,
    /// A non-token node forwards queued requests that it can neither grant nor keep
    /// behind its pending mode (Decision 4(c) of `spec/SPEC.md` 1.4). `false`: the literal
    /// `Check_requests_on_queue`, which only grants from the local queue.
    pub forward_stranded: bool,
    /// Priority inheritance across the site's locks (section 3.7).
    pub inheritance: Inheritance,
    /// Where a non-token node sends the requests it forwards (`spec/SPEC.md` 1.6; default:
    /// hilock's per-class routing pointers, [`Forwarding::ClassPointers`]; the thesis's
    /// parent pointer is [`Forwarding::Thesis`]).
    #[cfg_attr(feature = "serde", serde(default))]
    pub forwarding: Forwarding,
}

/// How a non-token node routes the requests it forwards (`spec/SPEC.md` 1.6, "Forwarding").
/// hilock's default is [`Forwarding::ClassPointers`]; [`Forwarding::Thesis`] is the
/// thesis's rule, kept for comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Forwarding {
    /// The thesis (Fig. 2.4): always along `Parent`, which changes only on a grant or a
    /// token transfer. hilock's default before the routing pointers; kept as the named
    /// variant the chapter-4 reproductions and the model checks compare against.
    Thesis,
    /// hilock's extension: an *idle relay* (not the token node, owns Φ, nothing pending,
    /// empty queue) remembers the last request it forwarded, `{S, M_S, ξ_S}`, as a
    /// shortcut if it came straight from `S` (else it forgets the shortcut), and sends a later request `{D, M_D, ξ_D}` of another node to `S` instead
    /// of its parent iff `S` would keep it behind its own pending request (Table 3.2:
    /// `queue_or_forward_prio(M_S, ξ_S, M_D, ξ_D) = Q`). The shortcut is dropped when the
    /// node requests, or receives a grant or the token. `Parent` itself is unchanged, so
    /// releases and freezes are untouched.
    Compress,
    /// Naimi's path reversal applied literally: an idle relay points its parent at every
    /// requester it forwards. Deliberately wrong (the requester keeps its own parent, so
    /// relay and requester point at each other and a third request cycles between them);
    /// kept to show that property P9 (bounded forwarding) catches it.
    NaiveReversal,
    /// hilock's extension, second form (`spec/SPEC.md` 1.6, "Forwarding"): per-mode-class
    /// routing pointers. An idle relay keeps, for each requestable mode M, the last request
    /// `{S, M, ξ_S}` of mode M that it forwarded straight from its requester S (a child),
    /// newest first; it sends a later request `{D, M_D, ξ_D}` of another node to the
    /// newest such S whose pending request keeps it by Table 3.2
    /// (`queue_or_forward_prio(M, ξ_S, M_D, ξ_D) = Q`), else to its parent. Unlike
    /// Compress's single shortcut, a pointer survives requests of other modes and requests
    /// forwarded from elsewhere. The pointers are dropped when the node requests, or
    /// receives a grant or the token; `Parent` is unchanged. hilock's default (the
    /// `#[default]` and [`Variant::HILOCK`]'s).
    #[default]
    ClassPointers,
    /// hilock's extension, third form (experimental, `spec/SPEC.md` 1.6, "Forwarding"):
    /// [`Forwarding::ClassPointers`] with Naimi-style pointers to *any* requester an idle
    /// relay forwarded (not only a child's), used only towards a requester with a smaller
    /// node id than the request's requester — the id order is meant to rule out two
    /// pending requesters keeping each other's requests (the deadlock of the unordered
    /// form) — and only once (a used pointer is dropped). Everything else (Table 3.2
    /// condition, when pointers are dropped) is ClassPointers'.
    OrderedPointers,
}

impl Variant {
    /// hilock's protocol.
    pub const HILOCK: Variant = Variant {
        release: ReleaseRule::Eager,
        freezing: true,
        release_epochs: true,
        tokenable_transfers: true,
        forward_stranded: true,
        inheritance: Inheritance::None,
        forwarding: Forwarding::ClassPointers,
    };
}

impl Default for Variant {
    fn default() -> Self {
        Variant::HILOCK
    }
}

/// The site's own outstanding request for the lock, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Pending {
    /// No request outstanding (M_P = Φ).
    None,
    /// A request for `entry.mode` (M_P) is outstanding.
    Request(QueueEntry),
    /// The site holds U and waits for W (Rule 7; M_P = W).
    Upgrade,
    /// The token node holds a mode and waits to convert it to this one (`spec/SPEC.md`
    /// 1.17; M_P = the mode): Rule 7's wait, for any target mode.
    Convert(Mode),
    /// A try request for `entry.mode` is outstanding (`spec/SPEC.md` 1.12): it ends in a
    /// grant or a [`Msg::Busy`]; it is never queued, and the site keeps no other request
    /// behind it.
    Try(QueueEntry),
}

/// Counters of messages that arrived but no longer fitted the state and were dropped as
/// harmless (they are not errors: the races of Decision 5 of `spec/SPEC.md` 1.4, releases
/// racing grants and token moves, produce them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stale {
    /// Releases from a link that a later grant or token transfer superseded.
    pub releases: u32,
    /// Freezes from a node that is no longer our parent, or while we own nothing.
    pub freezes: u32,
    /// Grants for a request that is no longer pending here (answered with a Release).
    pub grants: u32,
    /// Tokens answering a request that is no longer pending here (the token is kept).
    pub tokens: u32,
    /// Requests already waiting here at the same or a higher priority, or older than the
    /// one waiting here (copies left behind by PIP reissues).
    pub requests: u32,
    /// [`Msg::Busy`] answers for a try request that is no longer pending here.
    pub busies: u32,
}

/// One lock as seen by one site: parent pointer, token, held/owned/pending modes, the
/// copyset (children with their owned modes), the local queue and the frozen modes.
///
/// Its `Hash` is not derived: it writes the fields packed into few words (a model checker
/// fingerprints every state it generates, and a derived hash writes each small field on
/// its own) and leaves out `copyset` and `owned_count`, which `peers` determines. Equal
/// nodes hash equally, and the packing is injective, so unequal nodes differ in the words
/// written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LockNode<const N: usize, const Q: usize> {
    pub(crate) parent: Option<NodeId>,
    /// `Some(generation)` at the token node.
    pub(crate) token: Option<u64>,
    pub(crate) generation_seen: u64,
    pub(crate) held: Mode,
    pub(crate) pending: Pending,
    pub(crate) frozen: Frozen,
    pub(crate) queue: heapless::Vec<QueueEntry, Q>,
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_array"))]
    pub(crate) peers: [Peer; N],
    /// The copyset (Definition 4) as a sorted list of the children with a non-Φ record, and
    /// how many children have each owned mode (indexed by [`Mode::index`]): derived from
    /// `peers[_].child_owned`, kept so that the owned mode and the freeze loop cost
    /// O(copyset), not O(N).
    pub(crate) copyset: heapless::Vec<u16, N>,
    pub(crate) owned_count: [u16; 6],
    pub(crate) next_serial: u32,
    pub(crate) stale: Stale,
    /// Fencing counter (see [`LockNode::fence`]): at the token node the last fence issued
    /// (it travels with the token); elsewhere the highest fence received.
    pub(crate) fence: u64,
    /// The fence of the current hold (meaningful while `held` is not Φ).
    pub(crate) held_fence: u64,
    /// [`Forwarding::Compress`]: the last request this node forwarded as an idle relay.
    pub(crate) shortcut: Option<QueueEntry>,
    /// [`Forwarding::ClassPointers`]: for each requestable mode at most one pointer, the
    /// last request of that mode this node forwarded as an idle relay; newest first, the
    /// `Some`s before the `None`s, no requester twice.
    pub(crate) routes: [Option<QueueEntry>; 5],
    /// [`ReleaseRule::KeepIntention`]: the intention mode kept while idle (Φ: none).
    pub(crate) kept: Mode,
    /// [`ReleaseRule::KeepIntention`]: the intention modes this node may not keep, because
    /// it passed on (Rule 4.1 F) a request that conflicts with them while it owned a mode
    /// (`keep.rs`, `LockNode::pass_on`); emptied when the owned mode drops to Φ. Always
    /// empty under the thesis's eager release.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "no_modes"))]
    pub(crate) passed: ModeSet,
    /// hilock's cancel (`spec/SPEC.md` 1.13): the pending request or try was cancelled by
    /// the local user; it keeps running in the protocol and is released (or ended) when
    /// its answer arrives. Only ever `true` while `pending` is a request or a try.
    pub(crate) cancelled: bool,
    /// hilock's lock value block (`spec/SPEC.md` 1.15): at the token node the lock's
    /// current block (it travels with the token), elsewhere the block of the last grant.
    pub(crate) value: ValueBlock,
    /// hilock's blocking notification (`spec/SPEC.md` 1.16): the waiting modes the
    /// current hold was told about ([`Output::Blocking`]); emptied when the hold ends.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "no_modes"))]
    pub(crate) told: ModeSet,
}

/// A queue entry or none in one word, injectively: the mode is stored plus one, so `None`
/// (all zero) differs from every entry.
fn entry_word(e: Option<&QueueEntry>) -> u64 {
    e.map_or(0, |e| {
        let QueueEntry {
            requester,
            mode,
            serial,
            prio,
        } = e;
        u64::from(requester.0)
            | (u64::from(*mode as u8) + 1) << 16
            | u64::from(*prio) << 24
            | u64::from(*serial) << 32
    })
}

impl<const N: usize, const Q: usize> core::hash::Hash for LockNode<N, Q> {
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        // Every field named: a field added to `LockNode` (or to `Peer`, `Stale`,
        // `QueueEntry`) does not compile here until the hash writes it, so a model checker
        // that takes the hash for the state's identity cannot merge states that differ in it.
        let LockNode {
            parent,
            token,
            generation_seen,
            held,
            pending,
            frozen,
            queue,
            peers,
            copyset: _,
            owned_count: _,
            next_serial,
            stale,
            fence,
            held_fence,
            shortcut,
            routes,
            kept,
            passed,
            cancelled,
            value,
            told,
        } = self;
        let Stale {
            releases,
            freezes,
            grants,
            tokens,
            requests,
            busies,
        } = stale;
        let (pending, entry) = match pending {
            Pending::None => (0u64, None),
            Pending::Request(e) => (1, Some(e)),
            Pending::Upgrade => (2, None),
            Pending::Try(e) => (3, Some(e)),
            Pending::Convert(m) => (4 + *m as u64, None),
        };
        // The small fields: parent (17 bits with its tag), held, kept, cancelled, the kind
        // of pending, the told modes, whether the token is here, and the queue's length.
        h.write_u64(
            parent.map_or(0, |p| 1 << 16 | u64::from(p.0))
                | u64::from(*held as u8) << 17
                | u64::from(*kept as u8) << 20
                | u64::from(*cancelled) << 23
                | pending << 24
                | u64::from(told.bits()) << 26
                | u64::from(token.is_some()) << 34
                | (queue.len() as u64) << 35,
        );
        h.write_u64(token.unwrap_or(0));
        h.write_u64(*generation_seen);
        h.write_u64(entry_word(entry));
        h.write_u64(frozen.word());
        // The modes not to keep beside the serial (0 under the eager release: the same word).
        h.write_u64(u64::from(*next_serial) | u64::from(passed.bits()) << 32);
        h.write_u64(u64::from(*releases) | u64::from(*freezes) << 32);
        h.write_u64(u64::from(*grants) | u64::from(*tokens) << 32);
        h.write_u64(u64::from(*requests) | u64::from(*busies) << 32);
        h.write_u64(*fence);
        h.write_u64(*held_fence);
        h.write_u64(entry_word(shortcut.as_ref()));
        for r in routes {
            h.write_u64(entry_word(r.as_ref()));
        }
        for e in queue {
            h.write_u64(entry_word(Some(e)));
        }
        for p in peers {
            let Peer {
                child_owned,
                parent_epoch,
                child_epoch,
                requests_sent,
                requests_seen,
                requests_window,
            } = p;
            h.write_u64(u64::from(*child_owned as u8) | u64::from(*parent_epoch) << 32);
            h.write_u64(u64::from(*child_epoch) | u64::from(*requests_sent) << 32);
            h.write_u64(u64::from(*requests_seen) | u64::from(*requests_window) << 32);
        }
        value.hash(h);
    }
}

/// Where a step's effects go: this site's id, the lock, and the output buffer.
pub(crate) struct Ctx<'o, const Q: usize, S> {
    pub me: NodeId,
    pub variant: Variant,
    /// The site's effective priority ξ(self): new requests carry it.
    pub effective: Priority,
    /// PIP: the priority the site must inherit after this step (0: none).
    pub boost: Priority,
    pub lock: LockId,
    pub out: &'o mut S,
    /// The rules that fired so far in this step.
    pub rules: RuleSet,
    /// A `Granted` output was emitted in this step (PCEP raises ξ then).
    pub granted: bool,
    /// The sender of the delivered message, if the step delivers one.
    pub sender: Option<NodeId>,
    /// The waiting modes a delivered [`Msg::Freeze`] named (`spec/SPEC.md` 1.16): a
    /// relay passes them on with the freezes it sends in the same step.
    pub waiting: Frozen,
}

impl<const Q: usize, S: Sink<Output<Msg<Q>>>> Ctx<'_, Q, S> {
    fn emit(&mut self, o: Output<Msg<Q>>) -> Result<(), KernelError> {
        if matches!(o, Output::Granted { .. }) {
            self.granted = true;
        }
        self.out.put(o).map_err(|_| KernelError::OutputsFull)
    }
    fn send(&mut self, to: NodeId, msg: Msg<Q>) -> Result<(), KernelError> {
        self.emit(Output::Send { to, msg })
    }
    pub(crate) fn fire(&mut self, r: Rule) {
        self.rules.insert(r);
    }
}

impl<const N: usize, const Q: usize> LockNode<N, Q> {
    /// A lock whose initial tree gives this site `parent` (`None`: this site holds the token).
    pub fn new(parent: Option<NodeId>) -> Self {
        LockNode {
            parent,
            token: if parent.is_none() { Some(0) } else { None },
            generation_seen: 0,
            held: Mode::Phi,
            pending: Pending::None,
            frozen: Frozen::EMPTY,
            queue: heapless::Vec::new(),
            peers: [Peer::default(); N],
            copyset: heapless::Vec::new(),
            owned_count: [0; 6],
            next_serial: 0,
            stale: Stale::default(),
            fence: 0,
            held_fence: 0,
            shortcut: None,
            routes: [None; 5],
            kept: Mode::Phi,
            passed: ModeSet::EMPTY,
            cancelled: false,
            value: ValueBlock::INITIAL,
            told: ModeSet::EMPTY,
        }
    }

    /// Parent pointer (`None` at the token node, and while the token is on its way here
    /// it still names the old parent).
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }
    /// Whether this site is the token node.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
    /// Generation of the token held here, if any.
    pub fn token_generation(&self) -> Option<u64> {
        self.token
    }
    /// The fencing token of the current hold (`None` while nothing is held).
    ///
    /// A counter travels with the token: the token node adds one for every grant it makes
    /// (its own, a copy, a token transfer, a completed upgrade) and stamps the grant with
    /// it; a copy granted by a non-token node (Rule 3.1) and a local grant under an owned
    /// mode (Rule 2) carry the highest fence that node has received. Of two grants of
    /// this lock in conflicting modes, the later has the larger fence (checked by the
    /// harness, `Cluster::check_fences`), so a storage service that remembers the
    /// largest fence it saw can refuse a write from a holder that lost the lock.
    pub fn fence(&self) -> Option<u64> {
        (self.held != Mode::Phi).then_some(self.held_fence)
    }
    /// The fencing counter: at the token node the last fence issued, elsewhere the highest
    /// fence received.
    pub fn fence_counter(&self) -> u64 {
        self.fence
    }
    /// The token node issues the next fence (every grant it makes takes one).
    fn next_fence(&mut self) -> u64 {
        self.fence = self.fence.saturating_add(1);
        self.fence
    }
    /// The lock value block this site's hold reads (`spec/SPEC.md` 1.15): `Some` while
    /// the site holds the lock — the block of its grant, or of the token, as written by
    /// the last W holder before it — `None` while it holds nothing.
    pub fn value(&self) -> Option<ValueBlock> {
        (self.held != Mode::Phi).then_some(self.value)
    }
    /// The waiting modes the current hold was told about ([`Output::Blocking`],
    /// `spec/SPEC.md` 1.16); empty while nothing is held.
    pub fn told(&self) -> ModeSet {
        self.told
    }
    /// Held mode M_H (Definition 2).
    pub fn held(&self) -> Mode {
        self.held
    }
    /// Pending request.
    pub fn pending(&self) -> Pending {
        self.pending
    }
    /// Pending mode M_P (Φ if none; W while an upgrade waits, the target mode while a
    /// conversion waits).
    pub fn pending_mode(&self) -> Mode {
        match self.pending {
            Pending::None => Mode::Phi,
            Pending::Request(e) | Pending::Try(e) => e.mode,
            Pending::Upgrade => Mode::W,
            Pending::Convert(m) => m,
        }
    }

    /// Whether the token stays here for a waiting conversion (`spec/SPEC.md` 1.17): a
    /// request that would take it (Rule 3.2) waits until the conversion is done or
    /// withdrawn. A request of a higher priority passes the freeze of the conversion (Rule
    /// 6_PRIO) and may be tokenable while the held mode is weak (IR → W waiting, R asked),
    /// and the token node would leave with the conversion still pending. (A Rule 7
    /// upgrade holds U: no mode compatible with U is stronger than it but W, so no
    /// request can take the token from it.)
    fn keeps_token_for_conversion(&self) -> bool {
        matches!(self.pending, Pending::Convert(_))
    }

    /// The mode a waiting upgrade (W, Rule 7) or conversion (`spec/SPEC.md` 1.17) of the
    /// held mode waits for; `None` if neither waits.
    pub fn converting(&self) -> Option<Mode> {
        match self.pending {
            Pending::Upgrade => Some(Mode::W),
            Pending::Convert(m) => Some(m),
            _ => None,
        }
    }
    /// Whether `e` is this site's pending request (same serial and mode; its priority may
    /// differ, since a PIP reissue raises it while older copies are still travelling).
    pub fn is_pending(&self, e: QueueEntry) -> bool {
        same_request(self.pending, e)
    }

    /// Whether the pending request or try was cancelled by the local user and still runs
    /// in the protocol (`spec/SPEC.md` 1.13).
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    /// The serial of this site's newest request (or try) for the lock (0: none yet).
    pub fn serial(&self) -> u32 {
        self.next_serial
    }

    /// Frozen modes (Rule 6).
    pub fn frozen(&self) -> ModeSet {
        self.frozen.modes()
    }
    /// Frozen modes with their thresholds (Rule 6_PRIO, Table 3.1).
    pub fn frozen_thresholds(&self) -> Frozen {
        self.frozen
    }
    /// Priority of the pending request (0 if none).
    pub fn pending_prio(&self) -> Priority {
        match self.pending {
            Pending::Request(e) => e.prio,
            _ => 0,
        }
    }
    /// The local queue, head first.
    pub fn queue(&self) -> &[QueueEntry] {
        &self.queue
    }
    /// Per-peer records.
    pub fn peers(&self) -> &[Peer; N] {
        &self.peers
    }
    /// Counters of dropped stale messages.
    pub fn stale(&self) -> Stale {
        self.stale
    }
    /// The copyset: children with the owned mode recorded for each, by node id.
    pub fn children(&self) -> impl Iterator<Item = (NodeId, Mode)> + '_ {
        self.copyset.iter().map(|&i| {
            (
                NodeId(i),
                self.peer(NodeId(i)).map_or(Mode::Phi, |p| p.child_owned),
            )
        })
    }

    /// This site's record of node `n` for this lock; an id outside `0..N` is
    /// [`KernelError::UnknownNode`].
    pub(crate) fn peer(&self, n: NodeId) -> Result<&Peer, KernelError> {
        self.peers.get(n.idx()).ok_or(KernelError::UnknownNode(n))
    }

    fn peer_mut(&mut self, n: NodeId) -> Result<&mut Peer, KernelError> {
        self.peers
            .get_mut(n.idx())
            .ok_or(KernelError::UnknownNode(n))
    }

    /// The strongest mode recorded for the children (Φ if none). O(1): five counters.
    pub fn children_owned(&self) -> Mode {
        let mut acc = Mode::Phi;
        for m in Mode::REQUESTABLE {
            if self.owned_count[m.index()] > 0 {
                acc = combine(acc, m);
            }
        }
        acc
    }

    /// Sets this site's record of child `n`'s owned mode (Φ: not a child), keeping the
    /// copyset list and the per-mode counts in step. The list has room for every node, so
    /// the insertion cannot fail; an id outside `0..N` changes nothing and is
    /// [`KernelError::UnknownNode`].
    pub(crate) fn set_child(&mut self, n: NodeId, m: Mode) -> Result<(), KernelError> {
        let peer = self.peer_mut(n)?;
        let old = peer.child_owned;
        if old == m {
            return Ok(());
        }
        peer.child_owned = m;
        // A count never goes below 0 nor above N (one record per node): the wrapping
        // forms only keep the release build's arithmetic in the debug build too.
        if old != Mode::Phi {
            self.owned_count[old.index()] = self.owned_count[old.index()].wrapping_sub(1);
        }
        if m != Mode::Phi {
            self.owned_count[m.index()] = self.owned_count[m.index()].wrapping_add(1);
        }
        let id = n.0;
        match (old == Mode::Phi, m == Mode::Phi) {
            (true, false) => {
                let at = self
                    .copyset
                    .iter()
                    .position(|&c| c > id)
                    .unwrap_or(self.copyset.len());
                let _ = insert_at(&mut self.copyset, at, id);
            }
            (false, true) => {
                if let Some(at) = self.copyset.iter().position(|&c| c == id) {
                    remove_at(&mut self.copyset, at);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Owned mode M_O (Definition 3): the strongest of the held mode and the children's
    /// owned modes (and the kept intention mode, [`ReleaseRule::KeepIntention`]). These
    /// form a compatible set (P1/P3); should they not, the node is treated as owning W,
    /// the mode that lets it grant nothing.
    pub fn owned(&self) -> Mode {
        combine(combine(self.held, self.kept), self.children_owned())
    }

    // ---------------------------------------------------------------- user API

    /// `RequestLock(M_R)`, Fig. 2.4: Rule 2 at a non-token node, Rule 3.2/4.2 at the token node.
    pub(crate) fn acquire<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
    ) -> Result<(), KernelError> {
        if self.adopt_cancelled(cx, mode, false)? {
            return Ok(());
        }
        let entry = self.new_request(cx, mode)?;
        self.shortcut = None;
        self.forget_routes();
        let f0 = self.frozen;
        if self.has_token() {
            if !self.enter_at_token(cx, mode, entry.prio)? {
                // Rule 4.2: the token node queues whatever it cannot grant.
                self.enqueue(cx, entry)?;
                self.pending = Pending::Request(entry);
                self.recompute_frozen(cx.variant, cx.effective);
            }
        } else if !self.enter_locally(cx, mode, entry.prio)? {
            // Rule 2: otherwise send the request to the parent (a kept mode that does not
            // cover it goes back first, `keep.rs`).
            self.give_back(cx)?;
            self.pending = Pending::Request(entry);
            self.forward(cx, entry)?;
        }
        self.finish_freeze(cx, f0)
    }

    /// Rule 3.2 for the token node's own request, subject to Rule 6_PRIO: if `mode` is
    /// compatible with the owned mode and not frozen, the site enters at once. Returns
    /// whether it did (nothing changed otherwise).
    fn enter_at_token<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
        prio: Priority,
    ) -> Result<bool, KernelError> {
        if compatible(self.owned(), mode) && !self.frozen.blocks(mode, prio) {
            self.held = mode;
            self.held_fence = self.next_fence();
            cx.fire(Rule::Rule3_2OwnGrant);
            cx.emit(Output::Granted {
                lock: cx.lock,
                mode,
            })?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Rule 2 at a non-token node: M_O ≥ M_R and compatible (Table 2.2), not frozen: the
    /// site enters without any message. Returns whether it did (nothing changed otherwise).
    fn enter_locally<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
        prio: Priority,
    ) -> Result<bool, KernelError> {
        if grantable(self.owned(), mode) && !self.frozen.blocks(mode, prio) {
            self.held = mode;
            self.held_fence = self.fence;
            cx.fire(Rule::Rule2Local);
            cx.emit(Output::Granted {
                lock: cx.lock,
                mode,
            })?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The local user's next request for `mode` (`RequestLock`, Fig. 2.4, and the try-lock):
    /// refused with a typed error, changing nothing, unless `mode` is a mode and this node
    /// neither holds nor waits; otherwise numbered with the next serial.
    fn new_request<S>(
        &mut self,
        cx: &Ctx<'_, Q, S>,
        mode: Mode,
    ) -> Result<QueueEntry, KernelError> {
        if mode == Mode::Phi {
            return Err(KernelError::InvalidMode);
        }
        if self.held != Mode::Phi {
            return Err(KernelError::AlreadyHeld(cx.lock));
        }
        if self.pending != Pending::None {
            return Err(KernelError::AlreadyPending(cx.lock));
        }
        let serial = self.next_serial.wrapping_add(1);
        self.next_serial = serial;
        Ok(QueueEntry {
            requester: cx.me,
            mode,
            serial,
            prio: cx.effective,
        })
    }

    /// hilock's try-lock (`spec/SPEC.md` 1.12): `RequestLock(M_R)` that must not wait. The
    /// token node grants its own try by Rule 3.2 (or refuses it where Rule 4.2 would queue
    /// it); a non-token node enters by Rule 2 or sends a [`Msg::TryRequest`] to its
    /// parent. A try is never granted past a conflicting request that waits in this
    /// node's queue (`queue_conflicts`).
    pub(crate) fn try_acquire<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
    ) -> Result<(), KernelError> {
        if self.adopt_cancelled(cx, mode, true)? {
            return Ok(());
        }
        let entry = self.new_request(cx, mode)?;
        // No bypass: a conflicting request waiting here goes first (`queue_conflicts`).
        let waits_here = self.queue_conflicts(mode);
        if self.has_token() {
            if waits_here || !self.enter_at_token(cx, mode, entry.prio)? {
                // Where Rule 4.2 would queue it: refused, nothing queued or frozen.
                refuse_own_try(cx, mode)?;
            }
        } else if waits_here || !self.enter_locally(cx, mode, entry.prio)? {
            // Rule 2: the try request goes to the parent (a kept mode first goes back, as
            // for `acquire`).
            self.shortcut = None;
            self.forget_routes();
            self.give_back(cx)?;
            self.pending = Pending::Try(entry);
            self.forward_try(cx, entry)?;
        }
        Ok(())
    }

    /// hilock's cancel (`spec/SPEC.md` 1.13), a new `Acquire` (`tried`: `TryAcquire`) of
    /// `mode` while a cancelled request still runs in the protocol: a request (a try) of
    /// the same mode is taken back — it is the user's again, no message is sent and its
    /// grant will be `Granted` — and `true` is returned; any other mode or kind is
    /// [`KernelError::CancelRunning`] (nothing changes; the user asks again once the
    /// cancelled request has completed). Without a cancelled request: `false`.
    fn adopt_cancelled<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
        tried: bool,
    ) -> Result<bool, KernelError> {
        if !self.cancelled {
            return Ok(false);
        }
        if mode == Mode::Phi {
            return Err(KernelError::InvalidMode);
        }
        match self.pending {
            Pending::Request(e) if !tried && e.mode == mode => {}
            Pending::Try(e) if tried && e.mode == mode => {}
            _ => return Err(KernelError::CancelRunning(cx.lock)),
        }
        self.cancelled = false;
        cx.fire(Rule::Cancel);
        Ok(true)
    }

    /// hilock's cancel (`spec/SPEC.md` 1.13): `Input::Cancel`. A pending request or try
    /// is marked cancelled and keeps running in the protocol (its queue entries, the
    /// requests kept behind it by Rule 4.1 and the freezes it caused stay as they are);
    /// when its grant or the token arrives the site releases at once by Rule 5
    /// ([`LockNode::enter_or_release`]), and a busy answer ends a cancelled try without
    /// output. A pending upgrade (Rule 7: the token node waits for its children's
    /// releases; nothing of it is in flight) is withdrawn at once: the site keeps U, the
    /// modes frozen only for the upgrade are no longer frozen (Table 2.4 recomputed) and
    /// the queue is served as after a release (Rule 5.1: copies compatible with U).
    /// [`Output::Cancelled`] in every case. Nothing pending, or a request already
    /// cancelled: [`KernelError::NotPending`], nothing changes.
    pub(crate) fn cancel<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        match self.pending {
            Pending::None => Err(KernelError::NotPending(cx.lock)),
            Pending::Request(_) | Pending::Try(_) if self.cancelled => {
                Err(KernelError::NotPending(cx.lock))
            }
            Pending::Request(_) | Pending::Try(_) => {
                self.cancelled = true;
                cx.fire(Rule::Cancel);
                cx.emit(Output::Cancelled { lock: cx.lock })
            }
            Pending::Upgrade | Pending::Convert(_) => {
                let f0 = self.frozen;
                self.pending = Pending::None;
                cx.fire(Rule::Cancel);
                cx.emit(Output::Cancelled { lock: cx.lock })?;
                self.recompute_frozen(cx.variant, cx.effective);
                self.check_queue(cx)?;
                self.finish_freeze(cx, f0)
            }
        }
    }

    /// The site has just entered `mode` for its pending request (`ReceiveGrant`,
    /// `ReceiveToken`, Rule 3.2 for its own queued request): the user is told
    /// ([`Output::Granted`]) — unless the request was cancelled (`spec/SPEC.md` 1.13):
    /// then no output, and the site releases at once by Rule 5 ([`LockNode::release_cancelled`]).
    fn enter_or_release<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
    ) -> Result<(), KernelError> {
        if self.cancelled {
            self.release_cancelled(cx)
        } else {
            cx.emit(Output::Granted {
                lock: cx.lock,
                mode,
            })
        }
    }

    /// hilock's cancel (`spec/SPEC.md` 1.13): the grant or token of a cancelled request
    /// arrived and the site entered its mode; it releases at once by the release rule
    /// (`RequestUnlock`, Rule 5: M_H = Φ; a non-token node tells its parent its new owned
    /// mode, Rule 5.2, or keeps an intention mode under [`ReleaseRule::KeepIntention`]).
    /// The caller then serves the queue as after a release.
    fn release_cancelled<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        self.cancelled = false;
        cx.fire(Rule::Cancel);
        self.give_up_held(cx)
    }

    /// Whether a request waiting in this node's queue conflicts with `mode`: a try for
    /// `mode` is then refused rather than granted ahead of it (`spec/SPEC.md` 1.12, "no
    /// bypass").
    fn queue_conflicts(&self, mode: Mode) -> bool {
        self.queue.iter().any(|e| conflicts(e.mode, mode))
    }

    /// `RequestUnlock()`, Fig. 2.7: Rule 5.
    pub(crate) fn release<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        if self.held == Mode::Phi {
            return Err(KernelError::NotHeld(cx.lock));
        }
        if self.converting().is_some() {
            return Err(KernelError::UpgradePending(cx.lock));
        }
        let f0 = self.frozen;
        self.give_up_held(cx)?;
        self.check_queue(cx)?;
        self.finish_freeze(cx, f0)
    }

    /// Rule 5 (`RequestUnlock`, Fig. 2.7): M_H = Φ; a non-token node whose owned mode
    /// changed tells its parent (Rule 5.2, or keeps an intention mode under
    /// [`ReleaseRule::KeepIntention`]). The caller then serves the queue (Rule 5.1).
    fn give_up_held<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        let before = self.owned();
        self.held = Mode::Phi;
        cx.fire(Rule::Rule5Release);
        // `spec/SPEC.md` 1.16: the next hold is told again.
        self.told = ModeSet::EMPTY;
        self.release_or_keep(cx, before)
    }

    /// hilock's downgrade (`spec/SPEC.md` 1.14): `Input::Downgrade`. The holder converts
    /// its held mode to the weaker `mode` ([`Mode::downgrades_to`]) in place: M_H = `mode`,
    /// the hold keeps its fence, [`Output::Downgraded`]; then what Rule 5 does after a
    /// release — a non-token node whose owned mode changed tells its parent (Rule 5.2;
    /// [`ReleaseRule::KeepIntention`] keeps nothing while a mode is held), the queue is served
    /// (Rule 5.1) and, at the token node, Table 2.4 recomputed. A W holder is always the
    /// token node (no copy of W can be granted, Table 2.2), so W → U leaves U at the token
    /// node as Rule 7 requires. Validated first, nothing changes on an error: nothing held
    /// ([`KernelError::NotHeld`]), Φ ([`KernelError::InvalidMode`]), not weaker
    /// ([`KernelError::NotWeaker`]), an upgrade pending ([`KernelError::UpgradePending`]).
    pub(crate) fn downgrade<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
    ) -> Result<(), KernelError> {
        self.check_change(cx.lock, mode)?;
        if !self.held.downgrades_to(mode) {
            return Err(KernelError::NotWeaker(cx.lock));
        }
        let f0 = self.frozen;
        let before = self.owned();
        self.held = mode;
        cx.fire(Rule::Downgrade);
        cx.emit(Output::Downgraded {
            lock: cx.lock,
            mode,
        })?;
        self.release_or_keep(cx, before)?;
        self.check_queue(cx)?;
        self.finish_freeze(cx, f0)
    }

    /// What a downgrade and a conversion to `mode` both refuse, in this order: Φ
    /// ([`KernelError::InvalidMode`]), nothing held ([`KernelError::NotHeld`]), an upgrade
    /// or conversion waiting ([`KernelError::UpgradePending`]).
    fn check_change(&self, lock: LockId, mode: Mode) -> Result<(), KernelError> {
        if mode == Mode::Phi {
            return Err(KernelError::InvalidMode);
        }
        if self.held == Mode::Phi {
            return Err(KernelError::NotHeld(lock));
        }
        if self.converting().is_some() {
            return Err(KernelError::UpgradePending(lock));
        }
        Ok(())
    }

    /// hilock's conversion (`spec/SPEC.md` 1.17): `Input::Convert` (the DLM's
    /// `LKF_CONVERT`, without `wait` with `LKF_NOQUEUE`). A weaker mode is a downgrade
    /// (`Downgraded`, [`LockNode::downgrade`]). Any other
    /// mode is converted only where the site could grant it as a request at once:
    /// - the token node (Rule 3.2, own grant): `mode` compatible with every other hold
    ///   (the children's owned modes and a kept mode, Table 2.1), not frozen (Rule 6) and
    ///   conflicting with no request waiting in the queue (no bypass, as the try-lock's);
    ///   the hold takes a new fence, since `mode` may conflict with holds the old one did
    ///   not;
    /// - a non-token node (Rule 2): its owned mode covers `mode` (Table 2.2) and `mode` is
    ///   not frozen; the parent's record of the node does not grow, and the hold takes
    ///   the fence a Rule 2 grant gets (that of the grant of the owned mode).
    ///
    /// Otherwise, with `wait`, at the token node and with nothing frozen or queued that
    /// conflicts with `mode`, it waits for the other holds as Rule 7's upgrade waits
    /// ([`Pending::Convert`]; `check_queue_at_token` completes it, and the token stays
    /// meanwhile: [`LockNode::keeps_token_for_conversion`]). Else [`Output::ConvertBusy`]
    /// and nothing changes: only the token node waits, so two converters never wait for
    /// each other (the DLM's `EDEADLK` case cannot arise). Validated first: nothing held
    /// ([`KernelError::NotHeld`]), Φ ([`KernelError::InvalidMode`]), the held mode
    /// ([`KernelError::AlreadyHeld`]), an upgrade or conversion waiting
    /// ([`KernelError::UpgradePending`]).
    pub(crate) fn convert<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
        wait: bool,
    ) -> Result<(), KernelError> {
        self.check_change(cx.lock, mode)?;
        if mode == self.held {
            return Err(KernelError::AlreadyHeld(cx.lock));
        }
        if self.held.downgrades_to(mode) {
            return self.downgrade(cx, mode);
        }
        let lock = cx.lock;
        let prio = cx.effective;
        let token = self.has_token();
        // Nothing that waits here conflicts with `mode`: the conversion passes no waiter.
        let unfrozen = !self.frozen.blocks(mode, prio) && (!token || !self.queue_conflicts(mode));
        let in_place = unfrozen
            && if token {
                compatible(combine(self.kept, self.children_owned()), mode)
            } else {
                grantable(self.owned(), mode)
            };
        if !in_place {
            if wait && token && unfrozen {
                // Rule 7's wait for any mode: the modes `mode` conflicts with freeze (Table
                // 2.4), and `check_queue_at_token` converts once the children let it.
                let f0 = self.frozen;
                self.pending = Pending::Convert(mode);
                cx.fire(Rule::ConvertWaits);
                self.recompute_frozen(cx.variant, cx.effective);
                return self.finish_freeze(cx, f0);
            }
            cx.fire(Rule::ConvertBusy);
            return cx.emit(Output::ConvertBusy { lock, mode });
        }
        let f0 = self.frozen;
        let before = self.owned();
        self.held = mode;
        self.held_fence = if self.has_token() {
            self.next_fence()
        } else {
            self.fence
        };
        cx.fire(Rule::Convert);
        cx.emit(Output::Converted { lock, mode })?;
        self.release_or_keep(cx, before)?;
        self.check_queue(cx)?;
        self.finish_freeze(cx, f0)
    }

    /// hilock's lock value block (`spec/SPEC.md` 1.15): `Input::SetValue`. The W holder —
    /// always the token node (no copy of W can be granted, Table 2.2) — writes the block,
    /// valid from now on; the token and every later grant carry it. Only W writes: a U
    /// holder may have R copies beside it (Table 2.1) that grant further copies of the old
    /// value (Rule 3.1), so a reader granted after a write by U could read the older value.
    /// Not held in W: [`KernelError::NotWriter`], nothing changes.
    pub(crate) fn set_value<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        value: [u8; VALUE_LEN],
    ) -> Result<(), KernelError> {
        if self.held != Mode::W {
            return Err(KernelError::NotWriter(cx.lock));
        }
        self.value = ValueBlock::new(value);
        cx.fire(Rule::SetValue);
        Ok(())
    }

    /// `RequestUpgrade()`, Fig. 2.11: Rule 7. Only a U holder may upgrade; a U holder is
    /// always the token node (no copy of U can be granted, Table 2.2).
    pub(crate) fn upgrade<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        if self.pending != Pending::None {
            return Err(KernelError::AlreadyPending(cx.lock));
        }
        if self.held != Mode::U || !self.has_token() {
            return Err(KernelError::NotHoldingU(cx.lock));
        }
        let f0 = self.frozen;
        if self.children_owned() == Mode::Phi {
            self.held = Mode::W;
            self.held_fence = self.next_fence();
            cx.fire(Rule::Rule7Upgrade);
            cx.emit(Output::Upgraded { lock: cx.lock })?;
        } else {
            self.pending = Pending::Upgrade;
            cx.fire(Rule::Rule7UpgradeWaits);
            self.recompute_frozen(cx.variant, cx.effective);
        }
        self.finish_freeze(cx, f0)
    }

    // ---------------------------------------------------------------- messages

    /// `HandleRequest(M_R)`, Fig. 2.4: Rules 3 and 4 (and 6).
    pub(crate) fn on_request<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        entry: QueueEntry,
        hop: u32,
    ) -> Result<(), KernelError> {
        self.accept_request(cx.lock, from, entry, hop)?;
        let f0 = self.frozen;
        if entry.requester == cx.me && !self.is_pending(entry) {
            // A copy of one of our own requests that is already served (a PIP reissue
            // that travelled behind the token): nothing to do.
            self.stale.requests = self.stale.requests.wrapping_add(1);
            cx.fire(Rule::StaleRequest);
        } else if self.requeue_reissued(cx, entry)? {
            // A request (or a PIP reissue of one) that already waits here.
        } else if self.has_token() {
            if entry.requester == cx.me {
                // Our own pending request reached us after we became the token node (a
                // reissue, or a reordering network): it waits in the queue like any other.
                self.enqueue(cx, entry)?;
                self.check_queue(cx)?;
            } else {
                self.serve_at_token(cx, entry)?;
            }
        } else {
            if self.copy_grantable(cx, entry) {
                // Rule 3.1 (Table 2.2) with Rule 6_PRIO.
                self.copy_grant(cx, entry)?;
            } else if self.may_serve(cx, entry) && self.keeps(entry) {
                // Rule 4.1, Table 3.2: (C)Q.
                self.enqueue(cx, entry)?;
            } else {
                // Rule 4.1, Table 3.2: F.
                self.forward(cx, entry)?;
            }
        }
        self.finish_freeze(cx, f0)
    }

    /// `HandleRequest(M_R)` for a [`Msg::TryRequest`] (`spec/SPEC.md` 1.12): where Rules 3.1
    /// and 3.2 grant a request, the try is granted the same way; where Rule 4.1 F forwards
    /// it, it is forwarded (to the parent); where Rule 4.1 Q or Rule 4.2 would queue it
    /// (and Rule 6 freeze for it), or a conflicting request waits in the queue here, the
    /// requester is sent [`Msg::Busy`] instead and nothing here changes.
    pub(crate) fn on_try_request<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        entry: QueueEntry,
        hop: u32,
    ) -> Result<(), KernelError> {
        self.accept_request(cx.lock, from, entry, hop)?;
        if entry.requester == cx.me {
            if !self.is_pending(entry) {
                self.stale.requests = self.stale.requests.wrapping_add(1);
                cx.fire(Rule::StaleRequest);
                return Ok(());
            }
            // Our own try came back to us: on to the parent. (A token node decides its try
            // when the token arrives, `on_token`; were one still pending here, it is
            // decided the same way.)
            if !self.has_token() {
                return self.forward_try(cx, entry);
            }
            return self.decide_own_try(cx, entry);
        }
        let waits_here = self.queue_conflicts(entry.mode);
        if self.has_token() {
            // Rule 3.2; where Rule 4.2 would queue it (and Rule 6 freeze for it): refused.
            if waits_here || !self.serve_at_token_now(cx, entry)? {
                self.refuse(cx, entry)?;
            }
            Ok(())
        } else if !waits_here && self.copy_grantable(cx, entry) {
            // Rule 3.1 (Table 2.2) with Rule 6_PRIO.
            self.copy_grant(cx, entry)
        } else if self.may_serve(cx, entry) && self.keeps(entry) {
            // Rule 4.1, Table 3.2 (C)Q: it would wait here behind our pending request.
            self.refuse(cx, entry)
        } else {
            // Rule 4.1, Table 3.2 F.
            self.forward_try(cx, entry)
        }
    }

    /// The token node's own try `entry` (pending here): granted at once where Rule 3.2 allows
    /// it and no queued request conflicts, refused ([`Output::WouldBlock`]) otherwise; a
    /// cancelled one just ends (`spec/SPEC.md` 1.12, 1.13). Copies of the try still in
    /// flight are stale from here on (`StaleRequest`, `StaleGrant`, `StaleBusy`).
    fn decide_own_try<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        let waits_here = self.queue_conflicts(entry.mode);
        self.pending = Pending::None;
        if core::mem::take(&mut self.cancelled) {
            // A cancelled try ends here, neither granted nor refused (`spec/SPEC.md` 1.13).
            cx.fire(Rule::Cancel);
            return Ok(());
        }
        if waits_here || !self.enter_at_token(cx, entry.mode, entry.prio)? {
            refuse_own_try(cx, entry.mode)?;
        }
        Ok(())
    }

    /// The answer to a try request that would have to wait: [`Msg::Busy`] to its requester.
    fn refuse<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        cx.fire(Rule::TryRefused);
        cx.send(
            entry.requester,
            Msg::Busy {
                lock: cx.lock,
                entry,
            },
        )
    }

    /// A [`Msg::Busy`] for our try request `entry`: it is withdrawn
    /// ([`Output::WouldBlock`]). A busy answer for a try that is no longer pending is
    /// counted and dropped.
    pub(crate) fn on_busy<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        if entry.requester != cx.me || !matches!(self.pending, Pending::Try(p) if p == entry) {
            self.stale.busies = self.stale.busies.wrapping_add(1);
            cx.fire(Rule::StaleBusy);
            return Ok(());
        }
        self.pending = Pending::None;
        cx.fire(Rule::TryWouldBlock);
        if core::mem::take(&mut self.cancelled) {
            // A cancelled try: the user was answered by `Cancelled` (`spec/SPEC.md` 1.13).
            cx.fire(Rule::Cancel);
            return Ok(());
        }
        cx.emit(Output::WouldBlock {
            lock: cx.lock,
            mode: entry.mode,
        })
    }

    /// `ReceiveGrant()`, Fig. 2.5.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_grant<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        entry: QueueEntry,
        epoch: u32,
        recorded: Mode,
        frozen: Frozen,
        fence: u64,
        value: ValueBlock,
    ) -> Result<(), KernelError> {
        let link = self.peer_mut(from)?;
        if !wrap::newer(epoch, link.child_epoch) {
            return Err(KernelError::Duplicate(cx.lock));
        }
        link.child_epoch = epoch;
        let expected = !self.has_token() && entry.requester == cx.me && self.is_pending(entry);
        if !expected {
            // A grant for a request that is no longer pending: tell the granter what we
            // really own under it, so its record is exact again.
            self.stale.grants = self.stale.grants.wrapping_add(1);
            cx.fire(Rule::StaleGrant);
            let owned = if self.parent == Some(from) && !self.has_token() {
                self.owned()
            } else {
                Mode::Phi
            };
            return cx.send(
                from,
                Msg::Release {
                    lock: cx.lock,
                    owned,
                    epoch,
                },
            );
        }
        let f0 = self.frozen;
        let before = self.owned();
        let reattach = self.parent == Some(from) && before != Mode::Phi;
        self.leave_old_parent(cx, from, before)?;
        self.parent = Some(from);
        self.held = entry.mode;
        self.fence = self.fence.max(fence);
        self.held_fence = self.fence;
        // `spec/SPEC.md` 1.15: the copy reads the granter's value block.
        self.value = value;
        self.pending = Pending::None;
        cx.fire(Rule::GrantReceived);
        self.frozen = if reattach {
            self.frozen.merge(frozen)
        } else {
            frozen
        };
        // A cancelled request is released after the resync below (`spec/SPEC.md` 1.13), so
        // that the granter's record is first made exact for the mode it granted.
        let cancelled = self.cancelled;
        if !cancelled {
            cx.emit(Output::Granted {
                lock: cx.lock,
                mode: entry.mode,
            })?;
        }
        let now = self.owned();
        if cx.variant.release_epochs && now != recorded {
            // The granter's record is not our owned mode (a release of ours crossed the
            // grant and will be dropped as stale): correct it.
            cx.fire(Rule::ResyncRelease);
            cx.send(
                from,
                Msg::Release {
                    lock: cx.lock,
                    owned: now,
                    epoch,
                },
            )?;
        }
        if cancelled {
            self.release_cancelled(cx)?;
        }
        self.check_queue(cx)?;
        self.finish_freeze(cx, f0)
    }

    /// `ReceiveToken()`, Fig. 2.5, with the queue merge of Rule 8.2's FIFO reading.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_token<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        entry: QueueEntry,
        generation: u64,
        sender_owned: Mode,
        epoch: u32,
        sender_frozen: Frozen,
        queue: &[QueueEntry],
        fence: u64,
        value: ValueBlock,
    ) -> Result<(), KernelError> {
        if !wrap::newer_generation(generation, self.generation_seen) || self.has_token() {
            return Err(KernelError::Duplicate(cx.lock));
        }
        self.peer(from)?;
        // Merge: the token's queue first, then ours; one entry per requester (the newest).
        let mut merged: heapless::Vec<QueueEntry, Q> = heapless::Vec::new();
        for e in queue.iter().chain(self.queue.iter()) {
            if e.requester.idx() >= N || e.mode == Mode::Phi {
                return Err(KernelError::UnknownNode(e.requester));
            }
            if let Some(x) = merged.iter_mut().find(|x| x.requester == e.requester) {
                if (e.serial, e.prio) > (x.serial, x.prio) {
                    *x = *e;
                }
            } else {
                merged
                    .push(*e)
                    .map_err(|_| KernelError::QueueOverflow(cx.lock))?;
            }
        }
        // Rule 8.2: the merged queue in Rule 8.1's order (stable: FIFO within a priority).
        sort_by_priority(&mut merged);
        self.generation_seen = generation;
        let f0 = self.frozen;
        let before = self.owned();
        self.leave_old_parent(cx, from, before)?;
        self.parent = None;
        self.token = Some(generation);
        self.kept = Mode::Phi;
        self.passed = ModeSet::EMPTY;
        self.fence = self.fence.max(fence);
        // `spec/SPEC.md` 1.15: the token node keeps the lock's value block.
        self.value = value;
        self.set_child(from, sender_owned)?;
        self.peer_mut(from)?.parent_epoch = epoch;
        cx.fire(Rule::Rule8_2Merge);
        if entry.requester == cx.me && self.is_pending(entry) {
            self.held = entry.mode;
            self.held_fence = self.fence;
            self.pending = Pending::None;
            cx.fire(Rule::TokenReceived);
            self.enter_or_release(cx, entry.mode)?;
        } else {
            self.stale.tokens = self.stale.tokens.wrapping_add(1);
            cx.fire(Rule::StaleToken);
        }
        let own = self.pending;
        merged.retain(|e| e.requester != cx.me || same_request(own, *e));
        if let Pending::Request(p) = own {
            // The token answered an older copy of a request of ours (a PIP reissue served
            // after the request itself was): our current request is still pending and, now
            // that we are the token node, waits in our own queue like any other (Rule 4.2).
            // Without this the token stays here while that request travels on and is lost.
            if !merged.iter().any(|e| e.requester == cx.me) {
                cx.fire(Rule::OwnRequestRequeued);
                let at = merged
                    .iter()
                    .position(|x| x.prio < p.prio)
                    .unwrap_or(merged.len());
                insert_at(&mut merged, at, p).map_err(|_| KernelError::QueueOverflow(cx.lock))?;
            }
        }
        self.queue = merged;
        self.recompute_frozen(cx.variant, cx.effective);
        if let Pending::Try(p) = own {
            // The token answered an older, withdrawn request of ours while our try travels
            // on: as the token node we decide the try now (as when it comes back to us).
            // Otherwise a copy grant for it, arriving here at the token node, is dropped as
            // stale and the try never ends (P4; found by a 400,000-case random run).
            cx.fire(Rule::OwnRequestRequeued);
            self.decide_own_try(cx, p)?;
        }
        self.check_queue(cx)?;
        // `spec/SPEC.md` 1.16, Rule 8.2: requests that arrived with the token and wait
        // behind the hold it granted here.
        self.tell_queue(cx)?;
        // Tell the children what is newly frozen: the old token node already respects
        // `sender_frozen`, our other children what we had frozen before.
        let frozen = self.frozen;
        let waiting = self.waiting(cx);
        for &c in &self.copyset {
            let child = NodeId(c);
            let rec = self.peer(child)?.child_owned;
            let known = if child == from { sender_frozen } else { f0 };
            let m = frozen.beyond(known).restrict(grantable_set(rec));
            if !m.is_empty() {
                cx.fire(Rule::Rule6FreezeSent);
                cx.send(
                    child,
                    Msg::Freeze {
                        lock: cx.lock,
                        modes: m,
                        waiting,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// `HandleRelease(M_R, M_O)`, Fig. 2.7: Rule 5.
    pub(crate) fn on_release<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        owned: Mode,
        epoch: u32,
    ) -> Result<(), KernelError> {
        let link = self.peer(from)?;
        let current = !cx.variant.release_epochs || link.parent_epoch == epoch;
        if !current || link.child_owned == Mode::Phi {
            self.stale.releases = self.stale.releases.wrapping_add(1);
            cx.fire(Rule::StaleRelease);
            return Ok(());
        }
        let f0 = self.frozen;
        let before = self.owned();
        let old_record = link.child_owned;
        self.set_child(from, owned)?;
        cx.fire(Rule::Rule5_2Apply);
        // Rule 6, invariant 2.3: a record raised by a release (the resync release of a child
        // that owns more than the grant recorded, e.g. IR granted to a node that still grants
        // R to a child of its own) lets the child grant modes it was never told are frozen
        // here; send them now. (Found by the 10^6-case PIP run of seed 8091; `spec/SPEC.md`
        // 1.5, "Decisions".)
        let newly = self
            .frozen
            .restrict(grantable_set(owned))
            .beyond(self.frozen.restrict(grantable_set(old_record)));
        if !newly.is_empty() {
            cx.fire(Rule::Rule6FreezeSent);
            cx.send(
                from,
                Msg::Freeze {
                    lock: cx.lock,
                    modes: newly,
                    waiting: self.waiting(cx),
                },
            )?;
        }
        self.release_or_keep(cx, before)?;
        self.check_queue(cx)?;
        self.finish_freeze(cx, f0)
    }

    /// `HandleFreeze(Modes)`, Fig. 2.9: Rule 6.
    pub(crate) fn on_freeze<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        modes: Frozen,
        waiting: Frozen,
    ) -> Result<(), KernelError> {
        if self.has_token() || self.parent != Some(from) || self.owned() == Mode::Phi {
            self.stale.freezes = self.stale.freezes.wrapping_add(1);
            cx.fire(Rule::StaleFreeze);
            return Ok(());
        }
        let f0 = self.frozen;
        self.frozen = self.frozen.merge(modes);
        cx.fire(Rule::Rule6FreezeApplied);
        // `spec/SPEC.md` 1.16, Rule 6 (Table 2.4): the freeze names the requests waiting at
        // the token node; a copy holder is told of those its hold blocks, and passes the
        // names on with the freezes it sends its own children.
        cx.waiting = waiting;
        for m in waiting.modes().iter() {
            self.tell_blocking(cx, m, waiting.threshold(m).unwrap_or(0))?;
        }
        self.give_back_on_freeze(cx)?;
        // PIP, HandleFreeze (Fig. 3.8): a holder that a queued request waits for inherits
        // the highest threshold (Lemma 1: the freeze reaches every conflicting holder).
        if cx.variant.inheritance == Inheritance::Pip && self.held != Mode::Phi {
            let t = modes.max_threshold().unwrap_or(0);
            if t > cx.boost {
                cx.fire(Rule::PipInherit);
                cx.boost = t;
            }
        }
        self.finish_freeze(cx, f0)
    }

    // ---------------------------------------------------------------- internals

    /// Rule 3.2 / 4.2 at the token node for a request that just arrived.
    fn serve_at_token<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        let mo = self.owned();
        let conflict = !compatible(mo, entry.mode) || self.frozen.blocks(entry.mode, entry.prio);
        if self.serve_at_token_now(cx, entry)? {
            return Ok(());
        }
        self.enqueue(cx, entry)?;
        if conflict {
            self.inherit_at_token(cx, entry);
        }
        // `spec/SPEC.md` 1.16, Rule 4.2: the holder here is told that it blocks the request.
        self.tell_blocking(cx, entry.mode, entry.prio)?;
        self.recompute_frozen(cx.variant, cx.effective);
        Ok(())
    }

    /// Rule 3.2 at the token node for another node's request: if it is compatible with the
    /// owned mode and not frozen (Rule 6_PRIO), the token goes to a tokenable request, a
    /// copy to a grantable one. Returns whether the request was served (nothing changed
    /// otherwise: it must then wait, Rule 4.2).
    fn serve_at_token_now<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<bool, KernelError> {
        let mo = self.owned();
        if !compatible(mo, entry.mode) || self.frozen.blocks(entry.mode, entry.prio) {
            return Ok(false);
        }
        let is_child = self.peer(entry.requester)?.child_owned != Mode::Phi;
        let transfer = tokenable(mo, entry.mode) && (cx.variant.tokenable_transfers || is_child);
        if transfer && self.keeps_token_for_conversion() {
            return Ok(false);
        }
        if transfer {
            self.transfer_token(cx, entry)?;
        } else if grantable(mo, entry.mode) {
            self.copy_grant(cx, entry)?;
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    /// Rule 3.1 (Table 2.2) with Rule 6_PRIO at a non-token node: it may serve the request
    /// ([`LockNode::may_serve`]), its owned mode covers it, and the mode is not frozen.
    fn copy_grantable<S>(&self, cx: &Ctx<'_, Q, S>, entry: QueueEntry) -> bool {
        self.may_serve(cx, entry)
            && grantable(self.owned(), entry.mode)
            && !self.frozen.blocks(entry.mode, entry.prio)
    }

    /// PIP, HandleRequest at the token node (Fig. 3.8): a request queued because it
    /// conflicts with the mode held here makes this site inherit its priority.
    fn inherit_at_token<S: Sink<Output<Msg<Q>>>>(&self, cx: &mut Ctx<'_, Q, S>, entry: QueueEntry) {
        if cx.variant.inheritance == Inheritance::Pip
            && conflicts(self.held, entry.mode)
            && entry.prio > cx.boost
        {
            cx.fire(Rule::PipInherit);
            cx.boost = entry.prio;
        }
    }

    /// Whether this non-token node may grant `entry` a copy (Rule 3.1) or keep it behind
    /// its pending request (Rule 4.1, (C)Q): not a request of its own, and not a request of
    /// its parent. A request of the parent reaches a child only when the child passed the
    /// token to that node for an older copy of one of its requests (a PIP reissue served
    /// after the request itself, `spec/SPEC.md` 1.5, "Decisions"): granting it would make
    /// the parent a child of its own child — a cycle, after which a release is dropped as
    /// stale and a record stays behind for ever (the robustness run of seed 8091). The
    /// request goes back up to the parent, which answers it as the token node (it now holds
    /// or is about to receive the token: FIFO puts the token ahead of the returned
    /// request).
    fn may_serve<S>(&self, cx: &Ctx<'_, Q, S>, entry: QueueEntry) -> bool {
        entry.requester != cx.me && Some(entry.requester) != self.parent
    }

    /// Whether a non-token node keeps `entry` in its queue behind its pending request
    /// (Rule 4.1, Table 3.2; with equal priorities Table 2.3).
    fn keeps(&self, entry: QueueEntry) -> bool {
        if matches!(self.pending, Pending::Try(_)) {
            // A try request may be refused: nothing waits behind it (`spec/SPEC.md` 1.12).
            return false;
        }
        queue_or_forward_prio(
            self.pending_mode(),
            self.pending_prio(),
            entry.mode,
            entry.prio,
        ) == QueueOrForward::Queue
    }

    /// PIP, HandleReissuedRequest (Fig. 3.8): a request that is already in our queue comes
    /// again with a higher priority. Raise it and restore Rule 8.1's order; a non-token
    /// node that may no longer keep it (Table 3.2) forwards it. Returns `false` if the
    /// request is not queued here (it is then handled as a fresh request; should it be
    /// granted twice, the requester answers the stale grant with a release).
    fn requeue_reissued<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<bool, KernelError> {
        let Some(queued) = self
            .queue
            .iter_mut()
            .find(|x| x.requester == entry.requester)
        else {
            return Ok(false);
        };
        if wrap::newer(entry.serial, queued.serial) {
            return Ok(false);
        }
        if wrap::newer(queued.serial, entry.serial)
            || entry.prio <= queued.prio
            || entry.mode != queued.mode
        {
            // An older request of that node, or a copy of this one that is not more urgent
            // than what waits here: nothing to do.
            self.stale.requests = self.stale.requests.wrapping_add(1);
            cx.fire(Rule::StaleRequest);
            return Ok(true);
        }
        queued.prio = entry.prio;
        cx.fire(Rule::PipRequeue);
        sort_by_priority(&mut self.queue);
        if self.has_token() {
            self.inherit_at_token(cx, entry);
            self.check_queue_at_token(cx)?;
        } else if !self.keeps(entry) {
            if let Some(j) = self.queue.iter().position(|x| *x == entry) {
                remove_at(&mut self.queue, j);
            }
            self.forward(cx, entry)?;
        }
        Ok(true)
    }

    /// PIP/PCEP: this site's effective priority rose to `prio`; a pending request of lower
    /// priority is reissued at `prio` (at the token node its queue entry is raised).
    pub(crate) fn reissue<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        prio: Priority,
    ) -> Result<(), KernelError> {
        let Pending::Request(mut e) = self.pending else {
            return Ok(());
        };
        if e.prio >= prio {
            return Ok(());
        }
        e.prio = prio;
        self.pending = Pending::Request(e);
        cx.fire(Rule::PipReissue);
        let f0 = self.frozen;
        if self.has_token() {
            if let Some(x) = self.queue.iter_mut().find(|x| x.requester == cx.me) {
                x.prio = prio;
            }
            sort_by_priority(&mut self.queue);
            self.check_queue_at_token(cx)?;
        } else {
            self.forward(cx, e)?;
        }
        self.finish_freeze(cx, f0)
    }

    /// Rule 3.1 / 3.2 (copy): the requester becomes our child with the granted mode.
    fn copy_grant<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        // The record and the granted mode are compatible (both are ≤ our owned mode, which
        // is compatible with the grant); W, the most conservative record, is the fallback.
        cx.fire(if self.has_token() {
            Rule::Rule3_2CopyGrant
        } else {
            Rule::Rule3_1CopyGrant
        });
        let i = entry.requester;
        let recorded = strongest(self.peer(i)?.child_owned, entry.mode).unwrap_or(Mode::W);
        self.set_child(i, recorded)?;
        let link = self.peer_mut(i)?;
        link.parent_epoch = link.parent_epoch.wrapping_add(1);
        let epoch = link.parent_epoch;
        let frozen = self.frozen.restrict(grantable_set(recorded));
        // The token node issues a new fence; a non-token node passes on its own.
        let fence = if self.has_token() {
            self.next_fence()
        } else {
            self.fence
        };
        cx.send(
            entry.requester,
            Msg::Grant {
                lock: cx.lock,
                entry,
                epoch,
                recorded,
                frozen,
                fence,
                // `spec/SPEC.md` 1.15: every copy carries the granter's value block.
                value: self.value,
            },
        )
    }

    /// Rule 3.2 (token): the requester becomes the token node and our parent; our queue
    /// travels with the token (Rule 5.1).
    fn transfer_token<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        cx.fire(Rule::Rule3_2TokenTransfer);
        let generation = self.token.unwrap_or(self.generation_seen).wrapping_add(1);
        self.set_child(entry.requester, Mode::Phi)?;
        let link = self.peer_mut(entry.requester)?;
        link.parent_epoch = link.parent_epoch.wrapping_add(1);
        link.child_epoch = link.child_epoch.wrapping_add(1);
        let epoch = link.child_epoch;
        let sender_owned = self.owned();
        let queue = core::mem::take(&mut self.queue);
        let frozen = self.frozen;
        let fence = self.next_fence();
        self.token = None;
        self.generation_seen = generation;
        self.parent = Some(entry.requester);
        if sender_owned == Mode::Phi {
            self.frozen = Frozen::EMPTY;
        }
        cx.send(
            entry.requester,
            Msg::Token {
                lock: cx.lock,
                entry,
                generation,
                sender_owned,
                epoch,
                frozen,
                queue,
                fence,
                // `spec/SPEC.md` 1.15: the value block travels with the token.
                value: self.value,
            },
        )
    }

    /// Rule 4.1 (F): pass the request on to the parent, unchanged.
    fn forward<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        self.pass_on(cx, entry)?;
        let parent = self.route(cx, entry)?;
        self.send_request(cx, parent, entry, false)
    }

    /// Rule 2 / Rule 4.1 (F) for a try request: to the parent. It neither uses nor updates
    /// the routing pointers of [`Forwarding`]: a pointer names a requester that would
    /// queue the request, i.e. refuse a try; and a try's requester keeps nothing behind it,
    /// so a pointer to it would lead nowhere.
    fn forward_try<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        let parent = self.parent.ok_or(KernelError::NoParent(cx.lock))?;
        self.send_request(cx, parent, entry, true)
    }

    /// Rule 2 (our own request) or Rule 4.1 (F) (another node's): send `entry` to `to`,
    /// numbered with the link's next request `hop`; a `TryRequest` if `try_request`.
    fn send_request<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        to: NodeId,
        entry: QueueEntry,
        try_request: bool,
    ) -> Result<(), KernelError> {
        cx.fire(if entry.requester == cx.me {
            Rule::Rule2Request
        } else {
            Rule::Rule4_1Forward
        });
        let link = self.peer_mut(to)?;
        link.requests_sent = link.requests_sent.wrapping_add(1);
        let hop = link.requests_sent;
        let lock = cx.lock;
        cx.send(
            to,
            if try_request {
                Msg::TryRequest { lock, entry, hop }
            } else {
                Msg::Request { lock, entry, hop }
            },
        )
    }

    /// Where [`LockNode::forward`] sends `entry` ([`Variant::forwarding`]); an idle relay
    /// under [`Forwarding::Compress`] / [`Forwarding::NaiveReversal`] also updates its
    /// shortcut / parent here.
    fn route<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<NodeId, KernelError> {
        let parent = self.parent.ok_or(KernelError::NoParent(cx.lock))?;
        let idle_relay = entry.requester != cx.me
            && !self.has_token()
            && self.pending == Pending::None
            && self.queue.is_empty()
            && self.owned() == Mode::Phi;
        if !idle_relay {
            return Ok(parent);
        }
        match cx.variant.forwarding {
            Forwarding::Thesis => Ok(parent),
            Forwarding::Compress => {
                let to = match self.shortcut {
                    Some(s)
                        if s.requester != entry.requester
                            && queue_or_forward_prio(s.mode, s.prio, entry.mode, entry.prio)
                                == QueueOrForward::Queue =>
                    {
                        cx.fire(Rule::CompressShortcut);
                        s.requester
                    }
                    _ => parent,
                };
                // Only a request that came straight from its requester (a child of this
                // node) becomes the shortcut: then this node is the requester's parent, so no
                // request routed along the shortcut can be one of the requester's parent
                // (which it would send back, Rule 3.1 `may_serve`).
                self.shortcut = (cx.sender == Some(entry.requester)).then_some(entry);
                Ok(to)
            }
            Forwarding::NaiveReversal => {
                self.parent = Some(entry.requester);
                Ok(parent)
            }
            Forwarding::ClassPointers => {
                // The newest remembered requester (other than D) that keeps D (Table 3.2).
                let to = match self.routes.iter().flatten().find(|s| {
                    s.requester != entry.requester
                        && queue_or_forward_prio(s.mode, s.prio, entry.mode, entry.prio)
                            == QueueOrForward::Queue
                }) {
                    Some(s) => {
                        cx.fire(Rule::CompressShortcut);
                        s.requester
                    }
                    None => parent,
                };
                // Only a request that came straight from its requester (a child) becomes a
                // pointer, for Compress's reason: no request sent along it can be one of the
                // requester's parent. With pointers from any sender the simulator
                // deadlocked at 120 nodes: two pending requesters kept each other's
                // requests (`spec/SPEC.md` 1.6, "Forwarding").
                if cx.sender != Some(entry.requester) {
                    return Ok(to);
                }
                // D becomes the newest pointer; it replaces the pointer of its mode and any
                // older pointer to D.
                self.push_route(entry);
                Ok(to)
            }
            Forwarding::OrderedPointers => Ok(self.route_ordered(cx, entry, parent)),
        }
    }

    /// [`Forwarding::OrderedPointers`] at an idle relay (experimental, `spec/SPEC.md` 1.6):
    /// send `entry` {D, M_D, ξ_D} to the newest remembered requester S with S < D (node id)
    /// whose remembered request keeps it by Table 3.2, else to `parent`; a pointer is used
    /// once (it is dropped when taken, so a request that comes back to this relay goes on
    /// along another pointer or the parent). Then D becomes the newest pointer, whoever
    /// sent the request (Naimi's reversal, restricted to the classes D keeps), replacing
    /// the pointer of its mode and any older pointer to D.
    fn route_ordered<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
        parent: NodeId,
    ) -> NodeId {
        let taken = self.routes.iter().position(|s| {
            s.is_some_and(|s| {
                s.requester != entry.requester
                    && s.requester < entry.requester
                    && queue_or_forward_prio(s.mode, s.prio, entry.mode, entry.prio)
                        == QueueOrForward::Queue
            })
        });
        let to = match taken.and_then(|i| self.routes.get_mut(i).and_then(Option::take)) {
            Some(s) => {
                cx.fire(Rule::CompressShortcut);
                s.requester
            }
            None => parent,
        };
        self.push_route(entry);
        to
    }

    /// hilock (`spec/SPEC.md` 1.4, Decision 8, "leave the old parent"): a grant or the
    /// token from `from` makes it this site's parent; a site that owned `before` ≠ Φ under
    /// another parent tells that parent its record of this site drops to Φ. The routes
    /// learnt under the old parent are dropped.
    fn leave_old_parent<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        from: NodeId,
        before: Mode,
    ) -> Result<(), KernelError> {
        if let Some(old) = self.parent {
            if old != from && before != Mode::Phi {
                cx.fire(Rule::LeaveOldParent);
                let e = self.peer(old)?.child_epoch;
                cx.send(
                    old,
                    Msg::Release {
                        lock: cx.lock,
                        owned: Mode::Phi,
                        epoch: e,
                    },
                )?;
            }
        }
        self.shortcut = None;
        self.forget_routes();
        Ok(())
    }

    /// `entry`'s requester D becomes the newest routing pointer: it replaces the pointer of
    /// its mode and any older pointer to D; the others keep their order (at most five, one
    /// per requestable mode). [`Forwarding::ClassPointers`] and
    /// [`Forwarding::OrderedPointers`].
    fn push_route(&mut self, entry: QueueEntry) {
        let mut next = [None; 5];
        next[0] = Some(entry);
        let mut k = 1;
        for r in self.routes.iter().flatten() {
            if r.mode != entry.mode && r.requester != entry.requester && k < next.len() {
                next[k] = Some(*r);
                k += 1;
            }
        }
        self.routes = next;
    }

    /// Drops every [`Forwarding::ClassPointers`] pointer.
    pub(crate) fn forget_routes(&mut self) {
        self.routes = [None; 5];
    }

    /// A request (or try request) from the wire: for a mode, from a known requester, and
    /// not a re-delivery ([`LockNode::accept_request_hop`]); else refused, nothing changed.
    fn accept_request(
        &mut self,
        lock: LockId,
        from: NodeId,
        entry: QueueEntry,
        hop: u32,
    ) -> Result<(), KernelError> {
        if entry.mode == Mode::Phi {
            return Err(KernelError::InvalidMode);
        }
        if entry.requester.idx() >= N {
            return Err(KernelError::UnknownNode(entry.requester));
        }
        self.accept_request_hop(lock, from, hop)
    }

    /// Exactly-once delivery of requests: a request whose `hop` number from `from` was
    /// already received is a re-delivery (a duplicate) and is rejected. Serving a request
    /// twice could let a node grant its own ancestor and close a cycle in the tree.
    fn accept_request_hop(
        &mut self,
        lock: LockId,
        from: NodeId,
        hop: u32,
    ) -> Result<(), KernelError> {
        let link = self.peer_mut(from)?;
        // Hop numbers wrap (`super::wrap`): newer is "ahead modulo 2^32".
        if wrap::newer(hop, link.requests_seen) {
            // The old newest moves to bit `shift - 1`; bits that leave the 32-bit window are
            // forgotten (a shift of exactly 32 keeps the old newest: `1 << 31`).
            let shift = hop.wrapping_sub(link.requests_seen);
            link.requests_window = link.requests_window.checked_shl(shift).unwrap_or(0)
                | 1u32.checked_shl(shift - 1).unwrap_or(0);
            link.requests_seen = hop;
            return Ok(());
        }
        let back = link.requests_seen.wrapping_sub(hop);
        if back == 0 || back > 32 || link.requests_window & (1 << (back - 1)) != 0 {
            return Err(KernelError::Duplicate(lock));
        }
        link.requests_window |= 1 << (back - 1);
        Ok(())
    }

    /// Append to the local queue; a newer request of the same requester replaces its older
    /// one in place (each node has at most one request outstanding per lock, so the queue
    /// never holds more than N entries).
    fn enqueue<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        let lock = cx.lock;
        cx.fire(if self.has_token() {
            Rule::Rule4_2Queue
        } else {
            Rule::Rule4_1Queue
        });
        if let Some(x) = self
            .queue
            .iter_mut()
            .find(|x| x.requester == entry.requester)
        {
            if !wrap::newer(entry.serial, x.serial) {
                return Err(KernelError::Duplicate(lock));
            }
            *x = entry;
            sort_by_priority(&mut self.queue);
            return Ok(());
        }
        // Rule 8.1: behind every entry of at least the same priority (FIFO within a level).
        let at = self
            .queue
            .iter()
            .position(|x| x.prio < entry.prio)
            .unwrap_or(self.queue.len());
        if at < self.queue.len() {
            cx.fire(Rule::Rule8_1Order);
        }
        insert_at(&mut self.queue, at, entry).map_err(|_| KernelError::QueueFull(lock))
    }

    /// Rule 5.2: a non-token node whose owned mode changed tells its parent. A node that
    /// owns nothing any more leaves the copyset and forgets its frozen modes (it can grant
    /// nothing; a later grant brings the granter's frozen modes along).
    pub(crate) fn after_owned_change<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        before: Mode,
    ) -> Result<(), KernelError> {
        if self.has_token() {
            return Ok(());
        }
        let now = self.owned();
        if now != before {
            if let Some(p) = self.parent {
                cx.fire(Rule::Rule5_2Propagate);
                let epoch = self.peer(p)?.child_epoch;
                cx.send(
                    p,
                    Msg::Release {
                        lock: cx.lock,
                        owned: now,
                        epoch,
                    },
                )?;
            }
            if now == Mode::Phi {
                self.frozen = Frozen::EMPTY;
                self.passed = ModeSet::EMPTY;
            }
        }
        Ok(())
    }

    /// `Check_requests_on_queue()`, Fig. 2.5 (Rules 4 and 5).
    pub(crate) fn check_queue<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        if self.has_token() {
            self.check_queue_at_token(cx)
        } else {
            self.check_queue_at_child(cx)
        }
    }

    /// At the token node: complete a waiting upgrade (Rule 7), then serve the queue strictly
    /// from its head while the head is compatible (Rule 5.1, FIFO).
    fn check_queue_at_token<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        loop {
            if let Some(to) = self.converting() {
                if compatible(combine(self.kept, self.children_owned()), to) {
                    let upgrade = self.pending == Pending::Upgrade;
                    self.held = to;
                    self.held_fence = self.next_fence();
                    self.pending = Pending::None;
                    if upgrade {
                        cx.fire(Rule::Rule7UpgradeDone);
                        cx.emit(Output::Upgraded { lock: cx.lock })?;
                    } else {
                        cx.fire(Rule::Convert);
                        cx.emit(Output::Converted {
                            lock: cx.lock,
                            mode: to,
                        })?;
                    }
                }
            }
            let Some(&head) = self.queue.first() else {
                break;
            };
            let mo = self.owned();
            let upgrade_freeze = match self.converting() {
                Some(to) if cx.variant.freezing => Frozen::of(frozen_by(mo, to), cx.effective),
                _ => Frozen::EMPTY,
            };
            if !compatible(mo, head.mode) || upgrade_freeze.blocks(head.mode, head.prio) {
                break;
            }
            remove_at(&mut self.queue, 0);
            if head.requester == cx.me {
                if self.is_pending(head) {
                    self.held = head.mode;
                    self.held_fence = self.next_fence();
                    self.pending = Pending::None;
                    cx.fire(Rule::Rule3_2OwnGrant);
                    self.enter_or_release(cx, head.mode)?;
                }
                continue;
            }
            let is_child = self.peer(head.requester)?.child_owned != Mode::Phi;
            let transfer = tokenable(mo, head.mode) && (cx.variant.tokenable_transfers || is_child);
            if transfer && !self.keeps_token_for_conversion() {
                return self.transfer_token(cx, head);
            }
            if transfer || !grantable(mo, head.mode) {
                // Literal Fig. 2.5: neither branch applies; the head waits (and so does a
                // request that needs the token while a conversion waits for it here).
                insert_at(&mut self.queue, 0, head).map_err(|_| KernelError::QueueFull(cx.lock))?;
                break;
            }
            self.copy_grant(cx, head)?;
        }
        self.recompute_frozen(cx.variant, cx.effective);
        Ok(())
    }

    /// At a non-token node: grant what Rule 3.1 allows, keep what Table 2.3 still says to
    /// queue behind the (possibly new) pending mode, forward the rest, in queue order.
    fn check_queue_at_child<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        let mo = self.owned();
        let mut i = 0;
        while let Some(&e) = self.queue.get(i) {
            if self.may_serve(cx, e) && grantable(mo, e.mode) && !self.frozen.blocks(e.mode, e.prio)
            {
                remove_at(&mut self.queue, i);
                self.copy_grant(cx, e)?;
            } else if (self.may_serve(cx, e) && self.keeps(e)) || !cx.variant.forward_stranded {
                // Table 3.2 (C)Q behind the pending mode — or, in the literal reading of
                // `Check_requests_on_queue`, every request that cannot be granted stays.
                i += 1;
            } else {
                remove_at(&mut self.queue, i);
                self.forward(cx, e)?;
            }
        }
        Ok(())
    }

    /// Table 2.4 at the token node: the frozen modes are a function of the owned mode, the
    /// queue and a waiting upgrade, recomputed whenever one of them changes.
    fn recompute_frozen(&mut self, variant: Variant, upgrade_prio: Priority) {
        if !self.has_token() {
            return;
        }
        if !variant.freezing {
            self.frozen = Frozen::EMPTY;
            return;
        }
        let mo = self.owned();
        let mut f = Frozen::EMPTY;
        if let Some(to) = self.converting() {
            f.freeze(frozen_by(mo, to), upgrade_prio);
        }
        for e in &self.queue {
            f.freeze(frozen_by(mo, e.mode), e.prio);
        }
        self.frozen = f;
    }

    /// hilock's blocking notification (`spec/SPEC.md` 1.16): the requests a [`Msg::Freeze`]
    /// sent now names as waiting. At the token node its queue and a waiting upgrade
    /// (Rule 7, W at the site's effective priority), each mode with the highest priority
    /// waiting for it — the requests Table 2.4 freezes for; at a relay what the freeze
    /// delivered in this step named ([`Ctx::waiting`]).
    fn waiting<S>(&self, cx: &Ctx<'_, Q, S>) -> Frozen {
        if !self.has_token() {
            return cx.waiting;
        }
        let mut w = Frozen::EMPTY;
        if let Some(to) = self.converting() {
            w.freeze(ModeSet::of(&[to]), cx.effective);
        }
        for e in &self.queue {
            w.freeze(ModeSet::of(&[e.mode]), e.prio);
        }
        w
    }

    /// hilock's blocking notification (`spec/SPEC.md` 1.16, the DLM's blocking AST): a
    /// request for `mode` at priority `prio` waits; if it conflicts with the mode held here
    /// (Table 2.1) and this hold was not yet told about `mode`, [`Output::Blocking`].
    /// At most once per waiting mode per hold ([`LockNode::told`]).
    fn tell_blocking<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        mode: Mode,
        prio: Priority,
    ) -> Result<(), KernelError> {
        if self.held == Mode::Phi || !conflicts(self.held, mode) || self.told.contains(mode) {
            return Ok(());
        }
        self.told.insert(mode);
        cx.fire(Rule::Blocking);
        cx.emit(Output::Blocking {
            lock: cx.lock,
            mode,
            prio,
        })
    }

    /// [`LockNode::tell_blocking`] for every request waiting in this node's queue (Rule
    /// 8.2: the queue that arrived with the token), the first of each mode at its
    /// highest priority.
    fn tell_queue<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        let mut w = Frozen::EMPTY;
        for e in &self.queue {
            w.freeze(ModeSet::of(&[e.mode]), e.prio);
        }
        for m in w.modes().iter() {
            self.tell_blocking(cx, m, w.threshold(m).unwrap_or(0))?;
        }
        Ok(())
    }

    /// Rule 6, invariant 2.3: send the modes frozen during this step to each child that
    /// could grant them ("only if the child is potential granter … and the mode is not
    /// already frozen", footnote a of Fig. 2.4).
    pub(crate) fn finish_freeze<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        before: Frozen,
    ) -> Result<(), KernelError> {
        let delta = self.frozen.beyond(before);
        if delta.is_empty() {
            return Ok(());
        }
        let waiting = self.waiting(cx);
        for &c in &self.copyset {
            let child = NodeId(c);
            let rec = self.peer(child)?.child_owned;
            let m = delta.restrict(grantable_set(rec));
            if !m.is_empty() {
                cx.fire(Rule::Rule6FreezeSent);
                cx.send(
                    child,
                    Msg::Freeze {
                        lock: cx.lock,
                        modes: m,
                        waiting,
                    },
                )?;
            }
        }
        Ok(())
    }
}

/// Whether `m` is empty (serde's `skip_serializing_if` takes a reference).
#[cfg(feature = "serde")]
fn no_modes(m: &ModeSet) -> bool {
    m.is_empty()
}

/// The token node's own try that would wait (Rule 4.2 would queue it): refused at once,
/// nothing queued or frozen (`spec/SPEC.md` 1.12).
fn refuse_own_try<const Q: usize, S: Sink<Output<Msg<Q>>>>(
    cx: &mut Ctx<'_, Q, S>,
    mode: Mode,
) -> Result<(), KernelError> {
    cx.fire(Rule::TryRefused);
    cx.emit(Output::WouldBlock {
        lock: cx.lock,
        mode,
    })
}

/// Whether `e` is the request `p` (same requester, serial and mode, any priority), a try
/// request included.
fn same_request(p: Pending, e: QueueEntry) -> bool {
    matches!(p, Pending::Request(p) | Pending::Try(p) if p.requester == e.requester && p.serial == e.serial && p.mode == e.mode)
}

/// Rule 8.1: non-increasing priority, FIFO within a priority (a stable insertion sort; the
/// queue holds at most `Q` entries).
pub(crate) fn sort_by_priority<const Q: usize>(q: &mut heapless::Vec<QueueEntry, Q>) {
    let q = q.as_mut_slice();
    for i in 1..q.len() {
        let mut j = i;
        // `get_mut` of the pair `j - 1, j` (both below `i + 1 <= len`): no index can fail.
        while let Some([a, b]) = j.checked_sub(1).and_then(|k| q.get_mut(k..=j)) {
            if a.prio >= b.prio {
                break;
            }
            core::mem::swap(a, b);
            j -= 1;
        }
    }
}

/// `v.remove(i)` without heapless' panic for `i` out of range: `None` and nothing removed.
/// The entry at `i` moves to the end by swaps of neighbours (no index), then is popped.
fn remove_at<T, const C: usize>(v: &mut heapless::Vec<T, C>, i: usize) -> Option<T> {
    let mut rest = v.as_mut_slice().get_mut(i..).filter(|t| !t.is_empty())?;
    while let Some((a, tail)) = rest.split_first_mut() {
        let Some(b) = tail.first_mut() else { break };
        core::mem::swap(a, b);
        rest = tail;
    }
    v.pop()
}

/// `v.insert(i, x)` without heapless' panic for `i` past the end: `x` is given back if
/// `i > len` or `v` is full, and nothing changes. `x` is pushed, then moves down to `i` by
/// swaps of neighbours (no index).
fn insert_at<T, const C: usize>(v: &mut heapless::Vec<T, C>, i: usize, x: T) -> Result<(), T> {
    if i > v.len() {
        return Err(x);
    }
    v.push(x)?;
    let mut rest = v.as_mut_slice().get_mut(i..).unwrap_or_default();
    while let Some((b, init)) = rest.split_last_mut() {
        let Some(a) = init.last_mut() else { break };
        core::mem::swap(a, b);
        rest = init;
    }
    Ok(())
}

/// Strongest of two modes of an owned set; W if they conflict (see [`LockNode::owned`]).
fn combine(a: Mode, b: Mode) -> Mode {
    strongest(a, b).unwrap_or(Mode::W)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(r: u16, prio: Priority) -> QueueEntry {
        QueueEntry {
            requester: NodeId(r),
            mode: Mode::R,
            serial: 1,
            prio,
        }
    }

    /// Rule 8.1: non-increasing priority, and FIFO (stable) within a priority — with equal
    /// priorities the order of arrival is kept exactly.
    #[test]
    fn rule_8_1_sort_is_stable_within_a_priority() {
        let mut q: heapless::Vec<QueueEntry, 8> = heapless::Vec::new();
        for x in [e(1, 0), e(2, 0), e(3, 2), e(4, 0), e(5, 2)] {
            q.push(x).unwrap();
        }
        sort_by_priority(&mut q);
        let order: [u16; 5] = core::array::from_fn(|i| q[i].requester.0);
        assert_eq!(order, [3, 5, 1, 2, 4]);
    }
}
