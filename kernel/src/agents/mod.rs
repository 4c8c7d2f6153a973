//! Ulf Wiger's deadlock-resolving lock agents, as model-checked and refined by Thomas Arts
//! (Wiger's Erlang application `locks`, uwiger/locks; quotations below are from its section
//! "Description of the algorithm and some implementation issues").
//!
//! Two pure state machines, in the shape of the rest of the kernel (validate, then apply;
//! a typed [`AgentError`] leaves the state and the output buffer untouched; a [`Report`]
//! names the [`Rule`]s that fired; fixed capacities; no clock, no randomness, no heap):
//!
//! - [`LockServer`] ("the object algorithm"): one lock table, "requests are stored in a
//!   waiting queue in order of arrival", read shared and write exclusive, upgrade read →
//!   write, hierarchical lock ids (a lock on `[a]` covers `[a, b]`), every queue change
//!   increments the version and is announced "to all clients in the queue" with "the
//!   identity of the client that induced the notification"; surrender puts the holder
//!   last; cancel removes.
//! - [`Agent`] ("the client algorithm"): one transaction over many locks on one or more
//!   servers; it keeps the newest queue of every lock it hears of, ignores older versions,
//!   ignores a surrendered lock's updates until one carries its own identity, builds the
//!   wait-for graph and, when it is the largest holder in a cycle, surrenders the lock that
//!   closes it (or aborts, under `abort_on_deadlock`, when the client was already told it
//!   holds that lock); otherwise it passes its dependency information on. The client is
//!   told it holds its locks only when it holds all of them ([`AgentOutput::HaveAll`], the
//!   seed's "have all locks"): a lock granted on its servers before the others is not
//!   told, and surrendering it is invisible to the client, as for a lock still pending
//!   (`locks` counts a lock as claimed only when it was asked for before the last "have
//!   all locks").
//!
//! # Queues, holders and hierarchy
//! A server keeps one list of *direct* entries `(agent, path, mode)` in arrival order.
//! The queue of the lock `p` (what a [`LockInfo`] announces) is the sub-list of entries
//! whose path is *related* to `p` (a prefix of it, or it a prefix of theirs): an entry on
//! `[a, b]` appears, as an *indirect* entry, in the queue of `[a]`, and an entry on `[a]`
//! in the queue of `[a, b, c]`. A lock record (a version counter and a path) exists only
//! for paths that some agent asked for, so an indirect lock on `[a, b, c]` is created only
//! when somebody asks for `[a, b, c]` (the seed: "as-needed … the domain of potential
//! children is unbounded"). An entry holds ([`QEntry::granted`]) when every earlier
//! related entry of another agent is granted and compatible with it: the heads of the
//! queue hold, read with read, and nobody overtakes a waiting writer. An entry that an
//! earlier holding entry of its own agent covers (its `[a]` write covers `[a, b]`) holds at
//! once: the agent has that lock already, and does not wait behind others that wait for
//! it ([`ServerVariant::grant_covered`]).
//!
//! # Spreading strategy (the seed lists several; hilock picks one)
//! "Clients only send to clients that it is waiting for and only send the information of
//! the clients that wait for it": an agent that waits sends to each agent it waits for
//! the queues (versions included) of the locks on which some agent that waits,
//! transitively, for the sender is blocked — unless the receiver is in that queue (then
//! the server tells it) or already got that version from the sender ("no superfluous
//! information is sent if avoidable"). Information therefore travels along the wait-for
//! edges, and around a cycle every member ends up with the whole cycle, so the largest
//! holder in it detects it. `docs/benchmarks.md` counts the messages this costs.
//!
//! # One snapshot per server
//! The queues of related locks of one server share entries (those of `[a]` are in the
//! queues of `[a, b]` and of `[a, c]`), and an agent hears them one by one, each with its
//! own version. An agent builds its wait-for graph only from queues that agree on the
//! entries they share: a queue that a newer one of its server contradicts is out of date
//! (its newer version is on its way) and is left out until it arrives
//! ([`WaitGraph::agree`], [`AgentVariant::skip_outdated`]). So every cycle it finds is one
//! of distinct agents present together in the queues it knows at that moment.

mod graph;
mod server;
mod transaction;

pub use graph::{WaitGraph, MAX_GRAPH};
pub use server::{LockServer, ServerVariant, SurrenderTo};
pub use transaction::{Agent, AgentInput, AgentVariant, Resolver, Status};

pub use crate::msg::Sink;
use core::fmt;

/// A transaction's agent, named by its *reference*: unique, totally ordered ("clients and
/// objects have a unique reference and a total order exists among these references"); a
/// later agent should get a larger one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AgentId(pub u16);

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "A{}", self.0)
    }
}

/// A lock server (one per node in `locks`). At most 32 ([`MAX_SERVERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServerId(pub u16);

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0)
    }
}

/// Servers are named in a 32-bit set ([`Servers`]).
pub const MAX_SERVERS: usize = 32;

/// A set of servers (bit `i` is `ServerId(i)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Servers(pub u32);

impl Servers {
    /// The one server `s` (empty if `s` is out of range).
    pub const fn one(s: ServerId) -> Servers {
        if (s.0 as usize) < MAX_SERVERS {
            Servers(1 << s.0)
        } else {
            Servers(0)
        }
    }
    /// Whether `s` is in the set.
    pub const fn contains(self, s: ServerId) -> bool {
        (s.0 as usize) < MAX_SERVERS && self.0 & (1 << s.0) != 0
    }
    /// Number of servers.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }
    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The servers, in increasing order.
    pub fn iter(self) -> impl Iterator<Item = ServerId> {
        (0..MAX_SERVERS as u16)
            .map(ServerId)
            .filter(move |s| self.contains(*s))
    }
}

/// Read (shared) or write (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum LockMode {
    /// Shared.
    Read,
    /// Exclusive.
    Write,
}

impl LockMode {
    /// Read with read is the only compatible pair.
    pub const fn compatible(self, other: LockMode) -> bool {
        matches!((self, other), (LockMode::Read, LockMode::Read))
    }
    /// Whether holding `self` gives what `wanted` asks for (write covers read).
    pub const fn covers(self, wanted: LockMode) -> bool {
        matches!(
            (self, wanted),
            (LockMode::Write, _) | (LockMode::Read, LockMode::Read)
        )
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockMode::Read => "R",
            LockMode::Write => "W",
        })
    }
}

/// How many of a lock's servers must grant it (`locks:lock(Agent, LockID, Mode, Nodes,
/// Req)`, `Req :: all | any | majority`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Req {
    /// Every server.
    All,
    /// One server.
    Any,
    /// More than half of the servers.
    Majority,
}

impl Req {
    /// Grants needed out of `n` servers.
    pub const fn needed(self, n: u32) -> u32 {
        match self {
            Req::All => n,
            Req::Any => 1,
            Req::Majority => n / 2 + 1,
        }
    }
}

/// A hierarchical lock id: a non-empty list of at most `D` keys (`[DbInstance, Table,
/// Lock]`). `[a]` covers `[a, b]`. (With the `serde` feature it is a list of keys.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockPath<const D: usize> {
    len: u8,
    keys: [u16; D],
}

impl<const D: usize> LockPath<D> {
    /// The path of `keys`: [`AgentError::EmptyPath`] for `[]` and
    /// [`AgentError::PathTooDeep`] for more than `D` (or 255) keys.
    pub fn new(keys: &[u16]) -> Result<Self, AgentError> {
        if keys.is_empty() {
            return Err(AgentError::EmptyPath);
        }
        if keys.len() > D || keys.len() > u8::MAX as usize {
            return Err(AgentError::PathTooDeep);
        }
        let mut k = [0; D];
        k[..keys.len()].copy_from_slice(keys);
        Ok(LockPath {
            len: keys.len() as u8,
            keys: k,
        })
    }

    /// The keys.
    pub fn keys(&self) -> &[u16] {
        &self.keys[..self.len as usize]
    }

    /// Whether a lock on `self` covers `other` (`self` is a prefix of `other`, or equal).
    pub fn covers(&self, other: &Self) -> bool {
        self.len <= other.len && self.keys() == &other.keys()[..self.len as usize]
    }

    /// Whether the two paths lie on one branch of the tree (one covers the other): only
    /// then do their locks meet.
    pub fn related(&self, other: &Self) -> bool {
        self.covers(other) || other.covers(self)
    }
}

#[cfg(feature = "serde")]
impl<const D: usize> serde::Serialize for LockPath<D> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(self.keys(), s)
    }
}

#[cfg(feature = "serde")]
impl<'de, const D: usize> serde::Deserialize<'de> for LockPath<D> {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Self, De::Error> {
        let keys: heapless::Vec<u16, D> = serde::Deserialize::deserialize(d)?;
        LockPath::new(&keys).map_err(serde::de::Error::custom)
    }
}

impl<const D: usize> fmt::Display for LockPath<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("/")?;
        for (i, k) in self.keys().iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{k}")?;
        }
        Ok(())
    }
}

/// One entry of an announced queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QEntry<const D: usize> {
    /// Whose entry.
    pub agent: AgentId,
    /// The path the agent asked for: the announced lock's own path (a direct entry) or a
    /// related one (an indirect entry).
    pub path: LockPath<D>,
    /// The mode asked for.
    pub mode: LockMode,
    /// Whether the entry holds.
    pub granted: bool,
}

/// A queue announcement ("every notification … is supplied with a version number … the
/// notifications are also carrying the identity of the client that induced \[it\]"). Agents
/// forward it unchanged to other agents.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LockInfo<const D: usize, const Q: usize> {
    /// The server.
    pub server: ServerId,
    /// The lock.
    pub path: LockPath<D>,
    /// Increases with every change of the queue (one counter per server).
    pub version: u32,
    /// The agent whose request, surrender, cancel or release caused this version.
    pub cause: AgentId,
    /// Whether that was a surrender: with `cause` the acknowledgement a surrendering agent
    /// waits for. (The agent's own requests carry its identity too; with read → write
    /// upgrades and hierarchical locks a request's announcement can still be on its way
    /// when the agent surrenders, so the identity alone is no acknowledgement. `locks`
    /// sends the same as a separate `{surrender, Agent}` note.)
    pub surrender: bool,
    /// The queue, in arrival order.
    pub queue: heapless::Vec<QEntry<D>, Q>,
}

impl<const D: usize, const Q: usize> LockInfo<D, Q> {
    /// Whether `a` has an entry in the queue.
    pub fn has(&self, a: AgentId) -> bool {
        self.queue.iter().any(|e| e.agent == a)
    }
    /// Whether some entry waits (the queue is worth telling others about).
    pub fn contended(&self) -> bool {
        self.queue.iter().any(|e| !e.granted)
    }
    /// Whether `a`'s own (direct) entry holds in a mode covering `mode`.
    pub fn holds_direct(&self, a: AgentId, mode: LockMode) -> bool {
        self.queue
            .iter()
            .any(|e| e.agent == a && e.path == self.path && e.granted && e.mode.covers(mode))
    }
}

/// What an agent sends to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ServerMsg<const D: usize> {
    /// Queue `agent` for `path` in `mode` (read → write on a path it has read is an
    /// upgrade).
    Request {
        /// The agent.
        agent: AgentId,
        /// The lock.
        path: LockPath<D>,
        /// The mode.
        mode: LockMode,
    },
    /// `agent` holds (part of) the queue of `path` and moves to its end.
    Surrender {
        /// The agent.
        agent: AgentId,
        /// The lock whose queue closes the cycle.
        path: LockPath<D>,
    },
    /// Remove `agent`'s entries on exactly `path`.
    Cancel {
        /// The agent.
        agent: AgentId,
        /// The lock.
        path: LockPath<D>,
    },
    /// Remove every entry of `agent` (the transaction ended, committed or aborted, or its
    /// client died: "a cancel request always arrives when a client processes is somehow
    /// killed or unreachable").
    Release {
        /// The agent.
        agent: AgentId,
    },
}

impl<const D: usize> ServerMsg<D> {
    /// The agent that sent it.
    pub fn agent(&self) -> AgentId {
        match *self {
            ServerMsg::Request { agent, .. }
            | ServerMsg::Surrender { agent, .. }
            | ServerMsg::Cancel { agent, .. }
            | ServerMsg::Release { agent } => agent,
        }
    }
}

/// What a server step produces: a queue announcement for one agent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Announce<const D: usize, const Q: usize> {
    /// The agent in the queue.
    pub to: AgentId,
    /// The queue.
    pub info: LockInfo<D, Q>,
}

/// Why an agent gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AbortReason {
    /// `abort_on_deadlock`: it would have had to surrender a lock the client was told it
    /// holds (reported with an earlier [`AgentOutput::HaveAll`]).
    Deadlock,
    /// Too few of a lock's servers are up for its `all | any | majority`.
    ServersDown(ServerId),
    /// The client asked.
    Client,
}

/// What an agent step produces.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AgentOutput<const D: usize, const Q: usize> {
    /// A message to a lock server.
    ToServer {
        /// The server.
        server: ServerId,
        /// The message.
        msg: ServerMsg<D>,
    },
    /// Dependency information for another agent (a queue it forwards).
    ToAgent {
        /// The agent.
        agent: AgentId,
        /// The queue.
        info: LockInfo<D, Q>,
    },
    /// To the client, right before [`AgentOutput::HaveAll`]: it holds `path` in `mode` (on
    /// enough of its servers), for each lock not reported in that mode before. A lock
    /// granted while another is still pending is not reported until all are held.
    Granted {
        /// The lock.
        path: LockPath<D>,
        /// The mode.
        mode: LockMode,
    },
    /// To the client: a lock it was told it holds was surrendered to resolve a deadlock
    /// (only without `abort_on_deadlock`; the seed: "a bad idea if the surrendering
    /// agent's client has already acted on the lock").
    Revoked {
        /// The lock.
        path: LockPath<D>,
    },
    /// To the client: every lock asked for is held ("have all locks"). From here on the
    /// client counts as told that it holds each of them (rule A6).
    HaveAll,
    /// To the client: the transaction was aborted (its entries are being released).
    Aborted {
        /// Why.
        reason: AbortReason,
    },
}

/// Why an agent or a server refused an input (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AgentError {
    /// A lock id with no keys.
    EmptyPath,
    /// A lock id deeper than the capacity `D`.
    PathTooDeep,
    /// An agent the server has no entry of (cancel, release, surrender).
    UnknownAgent(AgentId),
    /// A surrender from an agent that holds nothing in the lock's queue.
    NotHolder(AgentId),
    /// A request for a lock (and mode) the agent is already queued for.
    AlreadyQueued(AgentId),
    /// A cancel of a path the agent is not queued for.
    NotQueued(AgentId),
    /// A server id of [`MAX_SERVERS`] or more, or a lock asked of no server.
    BadServers,
    /// The agent's transaction has ended.
    Finished,
    /// A fixed capacity (entries, records, views, requests, graph) is exhausted.
    Full,
    /// The output buffer has less room than the step may need.
    OutputsFull,
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::EmptyPath => f.write_str("a lock id needs at least one key"),
            AgentError::PathTooDeep => f.write_str("lock id deeper than the capacity"),
            AgentError::UnknownAgent(a) => write!(f, "no entry of agent {a} here"),
            AgentError::NotHolder(a) => write!(f, "agent {a} holds nothing in that queue"),
            AgentError::AlreadyQueued(a) => write!(f, "agent {a} already asked for that lock"),
            AgentError::NotQueued(a) => write!(f, "agent {a} is not queued for that lock"),
            AgentError::BadServers => f.write_str("no server, or a server id out of range"),
            AgentError::Finished => f.write_str("the transaction has ended"),
            AgentError::Full => f.write_str("a fixed capacity is exhausted"),
            AgentError::OutputsFull => f.write_str("output buffer too small for this step"),
        }
    }
}

crate::report::named_rules! {
    /// A rule of the seed that a server or agent step applied.
    ;
    /// Server: a request was put at the end of the queue ("put at the end of the queue and
    /// all clients in the queue are notified").
    Enqueue = "S1 enqueue",
    /// Server: the record of a path was created on demand (its queue shows the related
    /// entries of ancestors and descendants: indirect locks).
    RecordCreated = "S2 record on demand",
    /// Server: a read holder asked for write (upgrade); the write entry queues behind.
    UpgradeQueued = "S3 upgrade queued",
    /// Server: an upgrade's write entry was granted; the read entry is dropped.
    UpgradeDone = "S3 upgrade done",
    /// Server: the holder moved to the end of the queue ("the only safe general way of
    /// implementing a surrender action").
    SurrenderToEnd = "S4 surrender to the end",
    /// Server (refuted variant): the holder swapped with the client directly behind it.
    SurrenderSwap = "S4' surrender by swap",
    /// Server: the agent's entries on a path were removed (cancel).
    Cancel = "S5 cancel",
    /// Server: every entry of an agent was removed (transaction end, client gone).
    Release = "S5 release",
    /// Server: the changed queues were announced, with a new version and the cause.
    Announce = "S6 announce",
    /// Server: a record with an empty queue was dropped.
    RecordDropped = "S7 record dropped",
    /// Agent: a lock was asked of its servers.
    Request = "A1 request",
    /// Agent: information with a version not newer than the one kept was ignored
    /// ("this information is ignored").
    StaleIgnored = "A2 stale version ignored",
    /// Agent: a surrendered lock's update not carrying the agent's identity was ignored
    /// ("ignore all information coming from the surrendered object, until it carries its
    /// own client identity").
    AwaitingAck = "A3 update ignored until own identity",
    /// Agent: the update carrying its own identity arrived after a surrender.
    SurrenderAcked = "A3 surrender acknowledged",
    /// Agent: a newer queue was stored.
    Stored = "A2 newer version stored",
    /// Agent: the client is told it holds a lock (with "have all locks").
    Granted = "A4 granted",
    /// Agent: every lock is held; the client is told.
    HaveAll = "A4 have all locks",
    /// Agent: it is the largest holder in a cycle of the wait-for graph and surrenders the
    /// lock that closes it.
    Surrender = "A5 surrender",
    /// Agent: a cycle was found, but a larger holder in it will resolve it.
    DeferToLarger = "A5 cycle, larger holder resolves",
    /// Agent: `abort_on_deadlock` and the surrender would move a lock the client was told
    /// it holds (with an earlier "have all locks"): abort.
    AbortOnDeadlock = "A6 abort on deadlock",
    /// Agent: its dependency information was sent to the agents it waits for.
    Forward = "A7 forward dependency information",
    /// Agent: too few servers left for a lock: abort.
    AbortServersDown = "A8 abort: servers down",
    /// Agent: the transaction ended (commit or client abort): every server releases.
    Finish = "A9 finish",
}

/// The rules one step applied (the kernel's one rule set, [`crate::report::Rules`]).
pub type Report = crate::report::Rules<Rule>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cover_their_subtrees_only() {
        let a = LockPath::<3>::new(&[1]).unwrap();
        let ab = LockPath::<3>::new(&[1, 2]).unwrap();
        let ac = LockPath::<3>::new(&[1, 3]).unwrap();
        assert!(a.covers(&ab) && !ab.covers(&a) && ab.related(&a));
        assert!(!ab.related(&ac));
        assert_eq!(LockPath::<3>::new(&[]), Err(AgentError::EmptyPath));
        assert_eq!(LockPath::<1>::new(&[1, 2]), Err(AgentError::PathTooDeep));
    }

    #[test]
    fn modes_and_requirements() {
        use LockMode::*;
        assert!(Read.compatible(Read) && !Read.compatible(Write) && !Write.compatible(Write));
        assert!(Write.covers(Read) && !Read.covers(Write));
        assert_eq!(Req::Majority.needed(3), 2);
        assert_eq!(Req::Majority.needed(2), 2);
        assert_eq!(Req::Any.needed(3), 1);
        assert_eq!(Req::All.needed(3), 3);
    }

    #[test]
    fn every_rule_fits_the_report() {
        assert!(Rule::ALL.len() <= 32);
        let mut r = Report::default();
        for x in Rule::ALL {
            r.insert(*x);
        }
        assert_eq!(r.iter().count(), Rule::ALL.len());
    }
}
