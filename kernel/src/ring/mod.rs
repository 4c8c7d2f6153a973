//! The Chord lock paper: lock service placed on a Chord ring by consistent hashing (P2P-based locking
//! for real-time collaborative editing, Fig. 2 server side, Fig. 4 client side, Fig. 5 the
//! double-leave loss), as pure state machines.
//!
//! - [`circle`]: the m-bit identifier circle, successor/predecessor of a view, `lookup`, the
//!   fixed placement hash ([`circle::hash`]) of a lock's placement key
//!   ([`circle::placement_key`]: its top-level path element);
//! - [`paper`]: the seed's server LITERALLY — `olock`, `olock_b`, `s_lock`, `s_unlock`,
//!   `s_dellock`, leave = Fig. 2(d) `append`, join = Fig. 2(e) `remove` — with every remote
//!   call a separate message (non-atomic), kept to be refuted by the model checker;
//! - [`replicated`]: hilock's server: per-key entries on the primary and its `r` successors
//!   (`r` configurable, default 2), a write answered only after every replica acknowledged
//!   it, hand-over of exactly the moved elementary arcs on a view change, and epochs: a
//!   request routed with another view is redirected, a retried request is answered from
//!   the entry (never served twice);
//! - [`client`]: the client of Fig. 4 (`lookup`, then the RPC), with redirects and retries.
//!
//! Every step validates its input first: a typed [`ChordError`] leaves the state and the
//! output buffer untouched; a [`Report`] names the [`Rule`]s that fired. No clock, no
//! randomness, no heap.
//!
//! The priority extension of section 3 (`olock(oid, islocked, priority)`) is NOT built: the
//! seed does not say what the stored priority becomes on unlock, whether the displaced
//! holder is told, or how a backup learns the priority; see `spec/SPEC.md` 4.4, "Priority
//! locking (section 3): what the paper does not say".
//!
//! # Citing the seed
//! `(a)3` is line 3 of Fig. 2(a); `(d)`, `(e)` are node leave and node join.

pub mod circle;
pub mod client;
pub mod fingers;
pub mod paper;
pub mod replicated;
pub mod vnodes;

pub use circle::{hash, placement_key, Ring, View};
pub use client::{ChordClient, ClientEvent};
pub use paper::PaperNode;
pub use replicated::{RetryFence, RingServer};

use core::fmt;

pub use crate::msg::NodeId;
use crate::msg::Sink;

/// A lock's identifier on the circle (`hash(placement_key(path))`, below `2^m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Key(pub u16);

/// A client (a collaborating site's user).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ClientId(pub u8);

/// What a client asks of the service node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Op {
    /// `c_lock` / `s_lock`.
    Lock,
    /// `c_unlock` / `s_unlock`.
    Unlock,
    /// `c_dellock` / `s_dellock` (paper only).
    Delete,
    /// hilock: a lock that takes over a hold of the asking client id by another
    /// incarnation (a killed run of the same client id; the asker vouches that it is
    /// dead), as a lock otherwise. Not in the Chord lock paper; its server refuses it.
    TakeOver,
}

/// A request's identity: the client, its incarnation and its request number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Token {
    /// The client.
    pub client: ClientId,
    /// The client's incarnation: a number its process drew at its start
    /// ([`ChordClient::with_incarnation`]; the runtime draws it from the clock and the
    /// process id), so that two processes given one client id are two holders to the
    /// ring, not one. Not in the Chord lock paper: hilock's.
    pub incarnation: u64,
    /// Its request number: 1 for a client's first request, one more for each later one
    /// ([`ChordClient::start`]), continued across incarnations
    /// ([`ChordClient::resume_after`]). 64 bits, so a client never runs out of numbers:
    /// they do not wrap, and any two of one client compare as plain integers.
    pub seq: u64,
}

impl Token {
    /// Whether this request was sent before `later` by the same client: request numbers
    /// count up by one per request and never wrap, so a lower number is an earlier
    /// request, however many requests lie between the two. A client's requests are one at
    /// a time ([`ChordClient`] refuses a second while one waits), so a copy of `self` still
    /// arriving after `later` was served is a stale retry.
    ///
    /// Only requests of one incarnation compare: request numbers are an incarnation's
    /// own, and a new one (a restarted process) numbers from its own start.
    pub fn precedes(self, later: Token) -> bool {
        self.holder() == later.holder() && self.seq < later.seq
    }

    /// Who sent it: the client id and its incarnation.
    pub fn holder(self) -> Holder {
        Holder {
            client: self.client,
            incarnation: self.incarnation,
        }
    }
}

/// Who holds a key: a client id and its incarnation ([`Token::incarnation`]). Two
/// processes with one client id are two holders: neither is granted a key the other
/// holds ([`Answer::InUse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Holder {
    /// The client id.
    pub client: ClientId,
    /// Its incarnation.
    pub incarnation: u64,
}

/// The answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Answer {
    /// `s_lock` returned true: the client holds the lock.
    Granted,
    /// `s_lock` returned false: somebody holds it.
    Refused,
    /// `s_unlock` returned true (or the client did not hold it: hilock answers idempotently).
    Released,
    /// `s_unlock` returned false: the lock was not locked (paper).
    NotLocked,
    /// `s_dellock` done.
    Deleted,
    /// hilock: routed with another view; here is the server's.
    Redirect(View),
    /// hilock: the server does not have this key's arc yet, or a write on it is in
    /// progress; ask again.
    Retry,
    /// hilock: another incarnation of the asking client id holds the key (two processes
    /// were given one client id). Nothing is written; the lock is not granted while that
    /// hold lasts, and only [`Op::TakeOver`] takes it over.
    InUse,
    /// hilock: a lock of a key with no holder that a table has no room for: the
    /// primary's own table, or a replica's, is full of held keys (and of keys whose arc
    /// is not handed over yet). Not granted, and nothing of it is left: a primary with no
    /// room writes nothing; a primary whose replica refused the write
    /// ([`ChordMsg::ReplicaFull`]) writes the key back free and answers only once every
    /// replica has that ([`RingServer::step`], "Full replicas"). The request ends; asking
    /// again may find room once a key is released.
    Full,
}

/// One row of the paper's lock table: `(oid, islocked)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Entry {
    /// `oid`.
    pub key: Key,
    /// `islocked`.
    pub locked: bool,
}

/// An entry's version in hilock's table: the epoch of the view it was written in, then
/// the writer's counter (one primary per key and epoch, so versions of a key are totally
/// ordered by their writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Version {
    /// View epoch.
    pub epoch: u16,
    /// Writer's counter.
    pub n: u32,
}

/// One key's entry in hilock's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Slot {
    /// The key.
    pub key: Key,
    /// Who holds it (`None`: free).
    pub holder: Option<ClientId>,
    /// The holder's incarnation ([`Token::incarnation`]; 0 while the key is free).
    pub incarnation: u64,
    /// Its version.
    pub version: Version,
    /// The newest request of the client that set `holder` (its lock, or the unlock that
    /// freed it, and any later request of that client served here: a re-grant, a repeated
    /// unlock; [`RetryFence::Latest`]); `None` for an entry no request has set. Not in the Chord lock paper, whose Fig. 2(a)/(b) table is only
    /// `(oid, islocked)`: hilock's. A request of the same client that [`Token::precedes`]
    /// it is a stale retry and is answered from the entry, not applied
    /// ([`Rule::Superseded`]; `spec/counterexamples/ring/ring-short-cut-join-stale-retry.json`).
    pub writer: Option<Token>,
}

impl Slot {
    /// Who holds it: the holder and its incarnation.
    pub fn holding(&self) -> Option<Holder> {
        self.holder.map(|client| Holder {
            client,
            incarnation: self.incarnation,
        })
    }
}

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Addr {
    /// A ring node.
    Node(NodeId),
    /// A client.
    Client(ClientId),
    /// The Chord layer (notifications; the membership service).
    Chord,
}

/// Chord's notification of a change in the keys a node is responsible for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Change {
    /// The predecessor left (abruptly): run Fig. 2(d).
    PredecessorLeft,
    /// A node joined as predecessor: run Fig. 2(e).
    PredecessorJoined,
}

/// Every message of the ring service, `T` entries at most per table copy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ChordMsg<const T: usize> {
    /// Client → service node (Fig. 4: `n.s_lock(oid)` …). `view` is the client's view
    /// (hilock checks it; the paper ignores it).
    Request {
        /// Who asks.
        token: Token,
        /// What.
        op: Op,
        /// Which lock.
        key: Key,
        /// The view the client routed with.
        view: View,
    },
    /// Service node → client.
    Reply {
        /// The request answered.
        token: Token,
        /// The epoch of the view the answered copy of the request was routed with
        /// ([`ChordMsg::Request`]'s `view`): a client takes an answer only to a copy sent
        /// in its newest view ([`ChordClient::on_reply`]).
        epoch: u16,
        /// The answer.
        answer: Answer,
    },
    /// Paper (a)4 / (b)4: `successor.olock_b.modify(oid, v)`, an RPC; `token` is the
    /// client request it belongs to.
    BackupModify {
        /// Entry written.
        entry: Entry,
        /// The client request waiting for the RPC.
        token: Token,
    },
    /// Paper: the return of [`ChordMsg::BackupModify`].
    BackupAck {
        /// The client request.
        token: Token,
    },
    /// Paper (c)2 and (e)7: `successor.olock_b.delete(oid)`.
    BackupDelete {
        /// The key.
        key: Key,
    },
    /// Paper (d)3: `successor.olock_b.insert(olock.get(oid))`.
    BackupInsert {
        /// The entry.
        entry: Entry,
    },
    /// Paper (d)5: `predecessor.olock.dump(olock_b)`, the call.
    Fetch,
    /// Paper (d)5: the predecessor's `olock`, to be dumped into the caller's `olock_b`.
    FetchReply {
        /// A copy of the predecessor's `olock`.
        entries: heapless::Vec<Entry, T>,
    },
    /// Paper (e)1: `olock_b.dump(predecessor.olock_b)`.
    BackupDump {
        /// A copy of the sender's `olock_b`.
        entries: heapless::Vec<Entry, T>,
    },
    /// Paper (e)4: `predecessor.olock.insert(olock.get(oid))`.
    Insert {
        /// The entry.
        entry: Entry,
    },
    /// Chord → node: the keys this node serves changed.
    Notify(Change),
    /// hilock: primary → replica, a write of `slot` in `view`.
    Replicate {
        /// The primary's view.
        view: View,
        /// The entry.
        slot: Slot,
        /// The client request it serves.
        token: Token,
    },
    /// hilock: replica → primary.
    ReplicaAck {
        /// The replica's view.
        view: View,
        /// The key.
        key: Key,
        /// The client request.
        token: Token,
    },
    /// hilock: a replica with a newer view refuses a write of an older one.
    ReplicaNack {
        /// The replica's view.
        view: View,
    },
    /// hilock: hand-over on a view change: the sender's entries in the elementary arcs
    /// `arcs` (a bit per node slot, see [`Ring::arc_of`]), which the receiver newly covers.
    Transfer {
        /// The new view.
        view: View,
        /// The arcs handed over.
        arcs: u16,
        /// The sender's entries in them.
        slots: heapless::Vec<Slot, T>,
    },
    /// hilock: the membership service announces a view.
    NewView(View),
    /// hilock: a replica refuses a write of its view because its table has no room for
    /// the entry (a new key with a holder, every entry held): nothing applied. The
    /// primary gives its write up ([`RingServer::step`], "Full replicas"). Last, so
    /// that every earlier message keeps its encoding.
    ReplicaFull {
        /// The replica's view.
        view: View,
        /// The key.
        key: Key,
        /// The version of the write refused.
        version: Version,
    },
}

/// A message on its way.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Out<const T: usize> {
    /// The receiver.
    pub to: Addr,
    /// The message.
    pub msg: ChordMsg<T>,
}

/// The rules of the Chord lock paper and of hilock's ring variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Rule {
    /// (a)1–2: already locked, return false.
    LockRefused,
    /// (a)3–4: `olock.modify(oid,true)`, backup RPC sent.
    LockLocal,
    /// (b)1–2: not locked, return false.
    UnlockNotLocked,
    /// (b)3–4: `olock.modify(oid,false)`, backup RPC sent.
    UnlockLocal,
    /// (c)1–2.
    DelLock,
    /// (a)4/(b)4 at the successor: `olock_b.modify`.
    BackupModified,
    /// The backup RPC returned: the client is answered ((a)5 / (b)5).
    Answered,
    /// (d)1–5 at the node whose predecessor left.
    Append,
    /// (d)5 at the new predecessor: its `olock` sent back.
    FetchServed,
    /// (d)5 returns: the copy dumped into `olock_b`.
    FetchDumped,
    /// (e)1–7 at the node whose new predecessor joined.
    Remove,
    /// A remote `insert`/`delete`/`dump` on `olock` or `olock_b` applied.
    RemoteTableOp,
    /// hilock: request routed with another view, or to a node not primary in it.
    Redirected,
    /// hilock: arc not handed over yet, or a write on the key in progress.
    RetryLater,
    /// hilock: a retried request answered from the entry (not served twice).
    Idempotent,
    /// hilock: a write applied at the primary and sent to the replicas.
    WriteStarted,
    /// hilock: a replica applied a write.
    Replicated,
    /// hilock: the last replica acknowledged: the client is answered.
    WriteAcknowledged,
    /// hilock: a view installed (writes of the old view redirected, arcs handed over).
    ViewInstalled,
    /// hilock: handed-over entries merged (newest version wins).
    TransferMerged,
    /// A message of an older view ignored.
    Stale,
    /// Client: request sent to `lookup(key)`.
    Sent,
    /// Client: an answer ended the request.
    Done,
    /// Client: redirected or told to retry; request sent again.
    Resent,
    /// hilock: a request reached a server that lost its lease ([`RingServer::stop`]): not
    /// answered (the client times out and asks the membership service for the view).
    LeaseLost,
    /// hilock: a request older than the one that set the entry ([`Slot::writer`], same
    /// client): a stale retry, answered from the entry and not applied.
    Superseded,
    /// hilock: a copy of a request the server already answered in its view — a lower
    /// request number of the same client, or the same number answered Refused — answered
    /// again and not applied ([`RingServer::step`], "Copies").
    CopyAnswered,
    /// hilock: a lock of a key held by another incarnation of the asking client id
    /// answered [`Answer::InUse`], nothing written.
    IdInUse,
    /// hilock: [`Op::TakeOver`] took the key over from another incarnation of the
    /// asking client id.
    TakenOver,
    /// hilock: an unlock by the client whose lock of the key is still being written (it
    /// gave the lock up) waits for that write and is served when it is acknowledged
    /// ([`RingServer::step`], "Given-up locks").
    UnlockDeferred,
    /// hilock: a lock of a new key on a table full of held keys answered
    /// [`Answer::Full`], nothing written.
    NoRoom,
    /// hilock: a replica with no room for a write's entry refused it
    /// ([`ChordMsg::ReplicaFull`]), nothing applied.
    ReplicaFull,
    /// hilock: a lock refused by a full replica given back: the key written free again
    /// and replicated, the client to be answered [`Answer::Full`] once every replica has
    /// it ([`RingServer::step`], "Full replicas").
    GivenBack,
}

impl Rule {
    /// All rules, in declaration order.
    pub const ALL: [Rule; 33] = [
        Rule::LockRefused,
        Rule::LockLocal,
        Rule::UnlockNotLocked,
        Rule::UnlockLocal,
        Rule::DelLock,
        Rule::BackupModified,
        Rule::Answered,
        Rule::Append,
        Rule::FetchServed,
        Rule::FetchDumped,
        Rule::Remove,
        Rule::RemoteTableOp,
        Rule::Redirected,
        Rule::RetryLater,
        Rule::Idempotent,
        Rule::WriteStarted,
        Rule::Replicated,
        Rule::WriteAcknowledged,
        Rule::ViewInstalled,
        Rule::TransferMerged,
        Rule::Stale,
        Rule::Sent,
        Rule::Done,
        Rule::Resent,
        Rule::LeaseLost,
        Rule::Superseded,
        Rule::CopyAnswered,
        Rule::IdInUse,
        Rule::TakenOver,
        Rule::UnlockDeferred,
        Rule::NoRoom,
        Rule::ReplicaFull,
        Rule::GivenBack,
    ];
}

impl crate::report::RuleName for Rule {
    const ALL: &'static [Rule] = &Rule::ALL;
    fn index(self) -> u8 {
        self as u8
    }
    fn label(self) -> &'static str {
        match self {
            Rule::LockRefused => "(a) lock refused",
            Rule::LockLocal => "(a) lock",
            Rule::UnlockNotLocked => "(b) unlock of a free lock",
            Rule::UnlockLocal => "(b) unlock",
            Rule::DelLock => "(c) dellock",
            Rule::BackupModified => "(a)/(b) backup modified",
            Rule::Answered => "(a)/(b) answered",
            Rule::Append => "(d) append",
            Rule::FetchServed => "(d) fetch served",
            Rule::FetchDumped => "(d) fetch dumped",
            Rule::Remove => "(e) remove",
            Rule::RemoteTableOp => "remote table op",
            Rule::Redirected => "redirected",
            Rule::RetryLater => "retry later",
            Rule::Idempotent => "idempotent retry",
            Rule::WriteStarted => "write started",
            Rule::Replicated => "replicated",
            Rule::WriteAcknowledged => "write acknowledged",
            Rule::ViewInstalled => "view installed",
            Rule::TransferMerged => "transfer merged",
            Rule::Stale => "stale",
            Rule::Sent => "sent",
            Rule::Done => "done",
            Rule::Resent => "resent",
            Rule::LeaseLost => "lease lost: stopped",
            Rule::Superseded => "stale retry answered from the entry",
            Rule::CopyAnswered => "copy of an answered request answered again",
            Rule::IdInUse => "held by another incarnation of the client id: in use",
            Rule::TakenOver => "taken over from another incarnation of the client id",
            Rule::UnlockDeferred => "unlock of a lock being written: served after it",
            Rule::NoRoom => "lock of a new key on a full table: answered full",
            Rule::ReplicaFull => "replica table full: write refused",
            Rule::GivenBack => "lock refused by a full replica: key written back free",
        }
    }
}

/// The rules one step fired (the kernel's one rule set, [`crate::report::Rules`]).
pub type Report = crate::report::Rules<Rule>;

/// Why an input was rejected. A rejected input changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChordError {
    /// `m` is 0 or above 16, or two slots share an identifier, or more than 16 slots.
    BadRing,
    /// A key or identifier not below `2^m`.
    BadKey(Key),
    /// A view naming a slot that does not exist, or with no member.
    BadView,
    /// The node is not a member of its view (the paper's node has no successor).
    NotMember(NodeId),
    /// A message from something that cannot send it (e.g. a `Request` not from a client).
    BadSender,
    /// A message this kind of node does not handle.
    WrongVariant,
    /// A lock table, or the pending list, is full: a hand-over that brings more held
    /// keys than fit, or more writes than the pending list holds (a lock that finds no
    /// room is answered [`Answer::Full`], not refused with this).
    TableFull,
    /// `r` is 0 or not below the number of slots.
    BadReplication,
    /// The client already waits for an answer.
    Busy,
    /// The output buffer has less room than the step may need.
    OutputsFull,
    /// The client has used its last request number (`u64::MAX`): it cannot number
    /// another request.
    SeqExhausted,
}

impl fmt::Display for ChordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChordError::BadRing => write!(f, "bad ring: 1 ≤ m ≤ 16, distinct identifiers"),
            ChordError::BadKey(k) => write!(f, "key {} outside the identifier space", k.0),
            ChordError::BadView => write!(f, "view with unknown or no members"),
            ChordError::NotMember(n) => write!(f, "{n} is not in its view"),
            ChordError::BadSender => write!(f, "message from a sender that cannot send it"),
            ChordError::WrongVariant => write!(f, "message of the other variant"),
            ChordError::TableFull => write!(f, "lock table full"),
            ChordError::BadReplication => write!(f, "r must be between 1 and slots - 1"),
            ChordError::Busy => write!(f, "the client is waiting for an answer"),
            ChordError::OutputsFull => write!(f, "output buffer too small for this step"),
            ChordError::SeqExhausted => write!(f, "the client has used every request number"),
        }
    }
}

/// A ring server's step in two parts (one validate-then-apply step, no rollback copy, as
/// the token engine's `Site::step`; `spec/SPEC.md` 4.1): [`Server::check`] reads the state
/// and finds every error the input can cause; [`Server::apply`] then changes the state and
/// sends, and cannot fail.
pub(crate) trait Server<const T: usize> {
    /// The most messages one step sends.
    const MAX_OUTPUTS: usize;
    /// Every error `msg` from `from` can cause; reads only.
    fn check(&self, from: Addr, msg: &ChordMsg<T>) -> Result<(), ChordError>;
    /// The step, for an input that passed [`Server::check`] with room for
    /// [`Server::MAX_OUTPUTS`] messages in `out`.
    fn apply<S: Sink<Out<T>>>(&mut self, from: Addr, msg: &ChordMsg<T>, out: &mut S) -> Report;
}

/// The step of every ring server ([`PaperNode::step`], [`RingServer::step`]): output room,
/// then the check (an error leaves the server and `out` untouched), then the change.
pub(crate) fn step<const T: usize, X: Server<T>, S: Sink<Out<T>>>(
    server: &mut X,
    from: Addr,
    msg: &ChordMsg<T>,
    out: &mut S,
) -> Result<Report, ChordError> {
    room(out, X::MAX_OUTPUTS)?;
    server.check(from, msg)?;
    Ok(server.apply(from, msg, out))
}

/// The node a server-to-server message comes from (one of the `N` slots).
pub(crate) fn node_sender<const N: usize>(from: Addr) -> Result<NodeId, ChordError> {
    match from {
        Addr::Node(n) if n.idx() < N => Ok(n),
        _ => Err(ChordError::BadSender),
    }
}

fn room<const T: usize, S: Sink<Out<T>>>(out: &S, need: usize) -> Result<(), ChordError> {
    if out.room() < need {
        Err(ChordError::OutputsFull)
    } else {
        Ok(())
    }
}

fn send<const T: usize, S: Sink<Out<T>>>(out: &mut S, to: Addr, msg: ChordMsg<T>) {
    // Cannot fail: every step checks the room it needs first.
    let _ = out.put(Out { to, msg });
}
