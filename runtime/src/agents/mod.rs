//! The agents engine (Wiger's locks, Ulf Wiger's deadlock-resolving lock agents) on real nodes:
//! transactions over many locks whose deadlocks are detected and resolved by a surrender.
//!
//! Every rule is the kernel's ([`hilock_kernel::agents`]): each node runs one
//! [`LockServer`](hilock_kernel::agents::LockServer) (the server of the locks whose *home*
//! it is) and one [`Agent`](hilock_kernel::agents::Agent) per transaction started on it;
//! its `engine` module only routes the kernel's outputs — a server's
//! announcements to the node of the agent they name, an agent's requests to the servers'
//! nodes, its forwarded dependency information to the other agents' nodes — and turns the
//! agents' outputs into answers for the client.
//!
//! # Where a lock lives
//! A lock is a path `/a/b/c`; its home is the node [`home`] picks by hashing the *top-level*
//! element (`/a`), so a whole subtree lives on one server and the server sees the
//! hierarchy (a lock on `/a` covers `/a/b`). [`Transaction::lock_on`] asks the same path of
//! several nodes with `all | any | majority`. Path elements become the kernel's 16-bit keys
//! by hashing ([`lock_path`]); two names with the same key are one lock to the server, which
//! can only make a transaction wait longer, never let two conflicting holders in.
//!
//! # Transport
//! The agents engine sends on the node's peer links ([`Net`], implemented by the node):
//! lossless and FIFO per ordered pair of nodes while both run, the model's assumption
//! (FIFO per pair of processes). Messages between processes of one node go through one
//! local FIFO queue.
//!
//! # Failures
//! - The client of a transaction goes away (the [`Transaction`] is dropped, or the process
//!   behind `hilock lock --txn` dies and its client connection closes): its agent finishes,
//!   which releases every entry on every server (the seed: "a cancel request always arrives
//!   when a client process is somehow killed").
//! - A peer node unreachable for [`SERVER_DOWN_AFTER`] (or refused as restarted) is a dead
//!   lock server for the running agents: the kernel aborts the transactions with a lock that
//!   can no longer get its `all | any | majority` ([`TxnError::ServerDown`] names the node)
//!   and lets the others go on. After [`AGENTS_GONE_AFTER`] the node's own server releases
//!   the entries of that node's agents (their client is unreachable). The second delay is
//!   longer so that an agent stops counting a server before that server can give its locks
//!   to others; like every lease, this assumes the two nodes' clocks run at similar rates
//!   and that neither is paused for longer than the difference.
//! - A new run of a peer replaces its old run (a restart under etcd recovery): the engine
//!   hears it before any frame of the new run, counts the old run's server as down for the
//!   running agents and releases the old run's agents' entries on this node's server at
//!   once. With etcd recovery a node's own server takes no request for [`RESTART_GRACE`]
//!   after it starts.
//! - This run of the node is refused by the cluster (a restart with fresh state): the token
//!   core tells the engine, which then serves nothing ([`TxnError::NotServing`]); until a
//!   majority has let the run in, lock calls wait. A node with `state_dir` runs no
//!   transaction ([`TxnError::StateDir`]): a suspend cannot carry the engine's state.

mod engine;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::agents::{AgentError, AgentId, LockInfo, LockPath, ServerMsg, Servers};
pub use hilock_kernel::agents::{LockMode, Req};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, watch};

pub(crate) use engine::run;

/// Deepest lock path (elements).
pub const DEPTH: usize = 8;
/// Entries one node's lock server holds at once (all its locks together).
pub const QUEUE: usize = 128;
/// Lock records one server keeps at once.
pub const RECORDS: usize = 128;
/// Locks and known queues per transaction.
pub const LOCKS: usize = 32;
/// Largest cluster the agents engine serves (the kernel names servers in a 32-bit set).
pub const MAX_SERVERS: usize = hilock_kernel::agents::MAX_SERVERS;

/// A peer unreachable this long counts as a dead lock server for the running agents.
pub const SERVER_DOWN_AFTER: Duration = Duration::from_millis(1500);
/// A peer unreachable this long: this node's server releases the entries of its agents.
pub const AGENTS_GONE_AFTER: Duration = Duration::from_secs(4);
/// How often the engine looks at the peer links.
pub const LINK_CHECK: Duration = Duration::from_millis(50);
/// The lease of a transaction's hold at its client (`hilock lock --txn`): the node renews
/// it every quarter of it while it runs, and the client kills its command once it ends
/// without a renewal, within half of [`HOLD_LEASE_GRACE`]. A paused or hung node renews
/// nothing, and its peers release its agents' entries [`AGENTS_GONE_AFTER`] after they last
/// heard from it (a heartbeat comes at least every 200 ms, `token::net::HEARTBEAT`), so the
/// command is gone before another transaction can be granted its locks.
pub const HOLD_LEASE: Duration = Duration::from_secs(2);
/// The grace of [`HOLD_LEASE`]: by how much later the command must be gone.
pub const HOLD_LEASE_GRACE: Duration = Duration::from_secs(1);
const _: () = assert!(
    HOLD_LEASE.as_millis() + HOLD_LEASE_GRACE.as_millis() / 2 + 200 + 1000
        <= AGENTS_GONE_AFTER.as_millis(),
    "a paused node's command must be gone a second before its peers release its entries"
);
/// With etcd recovery, a node's lock server takes no request for this long after the node
/// starts: a peer whose transaction held a lock on the server of this node's earlier run
/// has by then either counted that run as down (its link to it was gone for
/// [`SERVER_DOWN_AFTER`], looked at every [`LINK_CHECK`]) or met this run on the link and
/// aborted the transaction at once (`Cmd::PeerRestarted`). The new run's table is empty:
/// granting from it earlier could give such a lock a second holder.
pub const RESTART_GRACE: Duration = Duration::from_millis(1600);
/// Default wait for a lock, after which the transaction aborts.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The kernel agent the runtime runs.
pub type RtAgent = hilock_kernel::agents::Agent<DEPTH, QUEUE, LOCKS>;
/// The kernel lock server the runtime runs.
pub type RtServer = hilock_kernel::agents::LockServer<DEPTH, QUEUE, RECORDS>;
/// A queue announcement.
pub type Info = LockInfo<DEPTH, QUEUE>;

/// What the agents engines of two nodes send each other.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum AgentFrame {
    /// From an agent on the sending node to the lock server of the receiving node.
    ToServer(ServerMsg<DEPTH>),
    /// A queue for agent `to` on the receiving node: a server's announcement or another
    /// agent's forwarded dependency information.
    Info {
        /// The agent.
        to: AgentId,
        /// The queue.
        info: Box<Info>,
    },
    /// The receiving node's agent `agent` asked the sender's server for something it
    /// refused (a full server, a surrender of a lock not held): the transaction aborts.
    Refused {
        /// The agent.
        agent: AgentId,
        /// Why.
        error: AgentError,
    },
}

/// The state of a peer link, as the node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Link {
    /// Connected.
    Up,
    /// Not connected (yet, or any more).
    Down,
    /// Refused for good (the peer is a new run of the node, or this node is): its state is
    /// gone.
    Gone(String),
}

/// The node's peer links, as the agents engine uses them.
pub trait Net: Send + Sync + 'static {
    /// This node's id.
    fn id(&self) -> u16;
    /// Nodes in the cluster.
    fn n(&self) -> usize;
    /// Send `frame` to `peer` on the lossless FIFO link; `false` if there is no such peer.
    fn send(&self, peer: u16, frame: AgentFrame) -> bool;
    /// The link to `peer`.
    fn link(&self, peer: u16) -> Link;
}

/// Why a transaction call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnError {
    /// The lock path is not a path (empty, the root, a bad element).
    InvalidPath(String),
    /// The kernel's agent refused the call and nothing changed: the lock is asked for
    /// already, too many locks, a path deeper than [`DEPTH`], no server.
    Refused(AgentError),
    /// A node list that names no node, a node outside the cluster, or one twice.
    BadNodes(String),
    /// Aborted by `abort_on_deadlock`: resolving a deadlock needed a lock this
    /// transaction had already been told it holds.
    Deadlock,
    /// Aborted: too few of a lock's servers are left; `node` is the one whose loss decided.
    ServerDown {
        /// The node.
        node: u16,
    },
    /// Aborted: this node's engine did not run for `for_ms` ms (the node was paused or
    /// starved), more than a lock server may be silent, so its running transactions counted
    /// every other lock server as down: a grant sent meanwhile may be stale.
    Stalled {
        /// How long the engine did not run.
        for_ms: u64,
    },
    /// Aborted: the lock server of `node` refused a request of this transaction.
    ServerRefused {
        /// The node.
        node: u16,
        /// Its reason.
        error: AgentError,
    },
    /// No grant within the wait; the transaction was aborted.
    Timeout {
        /// The locks of the transaction not granted when the wait ended, separated by
        /// `, `.
        path: String,
        /// How long.
        after: Duration,
    },
    /// The transaction ended already.
    Ended,
    /// The node stopped.
    Stopped,
    /// This node has started as many transactions as its share of the kernel's 16-bit
    /// agent references allows (a run of a node never reuses one): node `node` of `n`
    /// starts at most [`txn_cap`]`(node, n)` = `count` transactions per run.
    IdsExhausted {
        /// The node.
        node: u16,
        /// Nodes in the cluster.
        n: usize,
        /// Transactions it started in this run (its cap).
        count: usize,
    },
    /// The cluster has more nodes than the agents engine can name ([`MAX_SERVERS`]).
    ClusterTooLarge {
        /// Nodes in the cluster.
        n: usize,
    },
    /// This run of the node serves no lock: the cluster refused it (a restarted node of a
    /// static cluster, or a lost lease); the reason says which.
    NotServing(String),
    /// The node runs with `state_dir`: a suspend saves the token engine's state only, so
    /// the agents engine is off (see `docs/engines/agents.md`, "Running it").
    StateDir,
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnError::InvalidPath(e) => write!(f, "invalid lock path: {e}"),
            TxnError::Refused(e) => match e {
                AgentError::Full => write!(
                    f,
                    "refused: a transaction takes at most {LOCKS} locks and hears of at most \
                     {LOCKS} queues"
                ),
                AgentError::PathTooDeep => {
                    write!(f, "refused: a lock path has at most {DEPTH} elements")
                }
                AgentError::AlreadyQueued(_) => f.write_str(
                    "refused: the transaction has asked for that lock already (a read then \
                     a write is the one upgrade)",
                ),
                e => write!(f, "refused: {e}"),
            },
            TxnError::BadNodes(e) => write!(f, "bad node list: {e}"),
            TxnError::Deadlock => f.write_str(
                "transaction aborted: a deadlock needed a lock it already held (abort_on_deadlock)",
            ),
            TxnError::ServerDown { node } => write!(
                f,
                "transaction aborted: the lock server of node {node} is down and too few remain"
            ),
            TxnError::Stalled { for_ms } => write!(
                f,
                "transaction aborted: this node did not run for {for_ms} ms (paused or \
                 starved), so it counted every other lock server as down"
            ),
            TxnError::ServerRefused {
                node,
                error: AgentError::Full,
            } => write!(
                f,
                "transaction aborted: the lock server of node {node} is full (it keeps at most \
                 {QUEUE} entries and {RECORDS} locks at once, of all transactions together)"
            ),
            TxnError::ServerRefused { node, error } => write!(
                f,
                "transaction aborted: the lock server of node {node} refused a request: {error}"
            ),
            TxnError::Timeout { path, after } => write!(
                f,
                "timed out after {} ms: {path} not granted; the transaction was aborted",
                after.as_millis()
            ),
            TxnError::Ended => f.write_str("the transaction has ended"),
            TxnError::Stopped => f.write_str("the node stopped"),
            TxnError::IdsExhausted { node, n, count } => write!(
                f,
                "node {node} has started the {count} transactions one run of a node may start \
                 in a cluster of {n} nodes; restart the whole cluster to start more"
            ),
            TxnError::ClusterTooLarge { n } => write!(
                f,
                "the agents engine serves clusters of at most {MAX_SERVERS} nodes (this one has \
                 {n})"
            ),
            TxnError::NotServing(reason) => write!(f, "this node serves no lock: {reason}"),
            TxnError::StateDir => f.write_str(
                "transactions are off on a cluster with state_dir: a suspend cannot carry \
                 the agents engine's locks (run transactions on a cluster without state_dir)",
            ),
        }
    }
}

impl std::error::Error for TxnError {}

/// Options of a transaction.
#[derive(Clone, Copy, Debug, Default)]
pub struct TxnOptions {
    /// Abort (with [`TxnError::Deadlock`]) instead of surrendering a lock the client was
    /// already told it holds (the seed's `abort_on_deadlock`): a lock held when an earlier
    /// call of the transaction (`lock`, `lock_on`, `lock_all`, each answered only when
    /// every lock asked so far is held: the seed's "have all locks") returned `Ok`, and
    /// not surrendered since. Surrenders of the other locks — still pending, or granted
    /// on their servers while the call waits for the rest — happen either way and are
    /// invisible to the client.
    pub abort_on_deadlock: bool,
    /// How long one `lock` call may wait (default [`DEFAULT_TIMEOUT`]); then the
    /// transaction aborts.
    pub timeout: Option<Duration>,
}

/// Counters of a node's agents engine.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    begun: AtomicU64,
    committed: AtomicU64,
    aborted_deadlock: AtomicU64,
    aborted_server_down: AtomicU64,
    aborted_other: AtomicU64,
    surrenders: AtomicU64,
    surrenders_done: AtomicU64,
    surrenders_refused: AtomicU64,
    revoked: AtomicU64,
    forwards: AtomicU64,
    stale_ignored: AtomicU64,
    frames_sent: AtomicU64,
    frames_received: AtomicU64,
    local_messages: AtomicU64,
    server_refusals: AtomicU64,
    foreign_frames: AtomicU64,
    peers_released: AtomicU64,
}

/// A snapshot of a node's agents engine counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Transactions started on this node.
    pub begun: u64,
    /// Committed (every lock held when the client ended it).
    pub committed: u64,
    /// Aborted by `abort_on_deadlock`.
    pub aborted_deadlock: u64,
    /// Aborted because too few servers of a lock were left.
    pub aborted_server_down: u64,
    /// Aborted otherwise (the client dropped it, a timeout, a refused request).
    pub aborted_other: u64,
    /// Surrenders this node's agents decided on (kernel rule A5).
    pub surrenders: u64,
    /// Surrenders this node's server applied (a holder moved to the end of a queue).
    pub surrenders_done: u64,
    /// Surrenders this node's server refused because the agent held nothing in that queue
    /// any more (its earlier surrender of a related lock had moved its entries).
    pub surrenders_refused: u64,
    /// Locks reported to a client and later surrendered (without `abort_on_deadlock`).
    pub revoked: u64,
    /// Agent steps that forwarded dependency information.
    pub forwards: u64,
    /// Queues an agent ignored as older than the one it had (kernel rule A2).
    pub stale_ignored: u64,
    /// Agents frames sent to other nodes.
    pub frames_sent: u64,
    /// Agents frames received from other nodes.
    pub frames_received: u64,
    /// Messages between a server and an agent of this node (no network).
    pub local_messages: u64,
    /// Messages this node's server refused (typed kernel errors; nothing changed).
    pub server_refusals: u64,
    /// Frames from a peer naming an agent of another node (dropped).
    pub foreign_frames: u64,
    /// Entries of agents released because their node was unreachable.
    pub peers_released: u64,
}

impl Counters {
    fn snapshot(&self) -> AgentStats {
        let g = |c: &AtomicU64| c.load(Relaxed);
        AgentStats {
            begun: g(&self.begun),
            committed: g(&self.committed),
            aborted_deadlock: g(&self.aborted_deadlock),
            aborted_server_down: g(&self.aborted_server_down),
            aborted_other: g(&self.aborted_other),
            surrenders: g(&self.surrenders),
            surrenders_done: g(&self.surrenders_done),
            surrenders_refused: g(&self.surrenders_refused),
            revoked: g(&self.revoked),
            forwards: g(&self.forwards),
            stale_ignored: g(&self.stale_ignored),
            frames_sent: g(&self.frames_sent),
            frames_received: g(&self.frames_received),
            local_messages: g(&self.local_messages),
            server_refusals: g(&self.server_refusals),
            foreign_frames: g(&self.foreign_frames),
            peers_released: g(&self.peers_released),
        }
    }
}

type Reply<T> = oneshot::Sender<Result<T, TxnError>>;

/// What a transaction knows of itself that the engine may change at any time.
#[derive(Clone, Debug, Default)]
pub struct TxnView {
    /// Locks the client had been told it holds and that were surrendered to resolve a
    /// deadlock (and asked for again); only without `abort_on_deadlock`.
    pub revoked: Vec<String>,
    /// Set when the transaction was aborted by the engine.
    pub aborted: Option<TxnError>,
}

/// The engine's inputs.
pub(crate) enum Cmd {
    /// A frame from peer `from`.
    Net { from: u16, frame: Box<AgentFrame> },
    /// A new transaction.
    Begin {
        id: AgentId,
        abort_on_deadlock: bool,
        view: watch::Sender<TxnView>,
    },
    /// One `lock`, `lock_on` or `lock_all` call: its locks are asked of the agent in one
    /// engine step, so that it cannot report holding all of them before it has every
    /// one of them (a lock granted before the others is not told to the client).
    Lock {
        id: AgentId,
        locks: Vec<Ask>,
        reply: Reply<()>,
    },
    /// The transaction ends (commit if it holds every lock asked for, else abort).
    Finish {
        id: AgentId,
        reply: Option<Reply<()>>,
    },
    /// The local agents in words, for diagnostics.
    Agents { reply: oneshot::Sender<Vec<String>> },
    /// The locks transaction `id` has asked for and does not hold yet, by name.
    Pending {
        id: AgentId,
        reply: oneshot::Sender<Vec<String>>,
    },
    /// The server's entries, for tests and status: `(agent, path, mode, granted)`.
    Entries {
        reply: oneshot::Sender<Vec<(u16, String, LockMode, bool)>>,
    },
    /// A majority of the cluster has let this run of the node in: calls are served.
    Admitted,
    /// The cluster refused this run of the node (for good): nothing is served any more.
    Fenced { reason: String },
    /// A new run of node `peer` replaced its old run on the link (etcd recovery): the old
    /// run's lock server and agents are gone.
    PeerRestarted { peer: u16 },
}

/// One lock of a call.
pub(crate) struct Ask {
    path: LockPath<DEPTH>,
    name: String,
    mode: LockMode,
    servers: Servers,
    req: Req,
}

/// The sending side of a node's agents engine (cheap to clone).
#[derive(Clone)]
pub struct Inbox {
    tx: mpsc::UnboundedSender<Cmd>,
    counters: Arc<Counters>,
    me: u16,
    n: usize,
    next: Arc<AtomicU32>,
    /// The node runs with `state_dir`: no transaction starts ([`TxnError::StateDir`]).
    state_dir: bool,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("node", &self.me).finish()
    }
}

/// What [`run`] reads: the commands, and the counters it shares with the [`Inbox`].
pub(crate) struct EngineRx {
    rx: mpsc::UnboundedReceiver<Cmd>,
    counters: Arc<Counters>,
    state_dir: bool,
    /// The node runs with etcd recovery: its lock server waits [`RESTART_GRACE`].
    pub(crate) recovery: bool,
}

/// A new engine inbox for node `me` of `n`, and the receiver [`run`] reads; with
/// `state_dir` the engine is off (no transaction starts, peers' frames are dropped).
pub(crate) fn inbox(me: u16, n: usize, state_dir: bool) -> (Inbox, EngineRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let counters = Arc::new(Counters::default());
    (
        Inbox {
            tx,
            counters: counters.clone(),
            me,
            n,
            next: Arc::new(AtomicU32::new(0)),
            state_dir,
        },
        EngineRx {
            rx,
            counters,
            state_dir,
            recovery: false,
        },
    )
}

impl Inbox {
    /// A majority of the cluster has let this run in (the token core's admission).
    pub(crate) fn admitted(&self) {
        let _ = self.tx.send(Cmd::Admitted);
    }

    /// The cluster refused this run (the token core's fence): the engine serves nothing.
    pub(crate) fn fenced(&self, reason: String) {
        let _ = self.tx.send(Cmd::Fenced { reason });
    }

    /// A new run of `peer` replaced its old run on the link (etcd recovery; sent before
    /// any frame of the new run is delivered).
    pub(crate) fn peer_restarted(&self, peer: u16) {
        let _ = self.tx.send(Cmd::PeerRestarted { peer });
    }

    /// A frame from `from` for the engine; `false` if the engine has stopped.
    pub(crate) fn deliver(&self, from: u16, frame: Box<AgentFrame>) -> bool {
        self.tx.send(Cmd::Net { from, frame }).is_ok()
    }

    /// The node whose agent `a` is: references are `k·n + node`, never reused in a run.
    pub fn owner(a: AgentId, n: usize) -> u16 {
        (usize::from(a.0) % n.max(1)) as u16
    }

    fn next_id(&self) -> Result<AgentId, TxnError> {
        if self.state_dir {
            return Err(TxnError::StateDir);
        }
        if self.n > MAX_SERVERS {
            return Err(TxnError::ClusterTooLarge { n: self.n });
        }
        let k = self.next.fetch_add(1, Relaxed) as usize;
        let id = k
            .checked_mul(self.n)
            .and_then(|x| x.checked_add(usize::from(self.me)))
            .filter(|&x| x <= usize::from(u16::MAX))
            .ok_or(TxnError::IdsExhausted {
                node: self.me,
                n: self.n,
                count: txn_cap(self.me, self.n),
            })?;
        Ok(AgentId(id as u16))
    }
}

/// How many transactions node `node` of a cluster of `n` nodes starts in one run: its
/// references are `k·n + node` up to 65535 (the kernel's 16-bit agent ids, never reused
/// in a run), so `⌊(65535 − node) / n⌋ + 1`.
pub fn txn_cap(node: u16, n: usize) -> usize {
    let n = n.max(1);
    (usize::from(u16::MAX).saturating_sub(usize::from(node))) / n + 1
}

/// The key of one path element: the first two bytes of its SHA-256.
fn key(element: &str) -> u16 {
    let d = Sha256::digest(element.as_bytes());
    u16::from_be_bytes([d[0], d[1]])
}

/// The kernel lock id of a path: one hashed key per element (at most [`DEPTH`]).
pub fn lock_path(path: &str) -> Result<LockPath<DEPTH>, TxnError> {
    crate::wire::check_path(path).map_err(TxnError::InvalidPath)?;
    let keys: Vec<u16> = path[1..].split('/').map(key).collect();
    if keys.len() > DEPTH {
        return Err(TxnError::InvalidPath(format!(
            "{path} has {} elements; a lock path has at most {DEPTH}",
            keys.len()
        )));
    }
    LockPath::new(&keys).map_err(TxnError::Refused)
}

/// The home node of a (checked) path among `n`: chosen by its top-level element, so a
/// subtree lives on one server.
pub fn home(path: &str, n: usize) -> u16 {
    let top = path[1..].split('/').next().unwrap_or("");
    crate::wire::initial_holder(&format!("/{top}"), n).0
}

/// Parse `R`/`W` (also `read`/`write`).
pub fn parse_mode(s: &str) -> Option<LockMode> {
    match s {
        "R" | "r" | "read" => Some(LockMode::Read),
        "W" | "w" | "write" => Some(LockMode::Write),
        _ => None,
    }
}

/// Parse `/path:R` or `/path:W` (the `hilock lock --txn` argument). A path element may
/// not contain `:` (`/a:W:R` is refused, not read as the path `/a:W`).
pub fn parse_lock(s: &str) -> Result<(String, LockMode), String> {
    let (p, m) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s}: expected PATH:R or PATH:W"))?;
    let mode = parse_mode(m).ok_or_else(|| format!("{s}: the mode must be R or W"))?;
    if p.contains(':') {
        return Err(format!(
            "{s}: a path element may not contain ':' (expected PATH:R or PATH:W)"
        ));
    }
    lock_path(p).map_err(|e| format!("{s}: {e}"))?;
    Ok((p.to_string(), mode))
}

/// Parse and check the locks of one transaction (`hilock lock --txn`) before it starts:
/// at least one, at most [`LOCKS`], each `PATH:R|W` with a path of at most [`DEPTH`]
/// elements, no path twice; two paths the engine takes for one lock (their hashed elements
/// are equal) are that lock once, in the stronger mode. One line.
pub fn parse_txn(locks: &[String]) -> Result<Vec<(String, LockMode)>, String> {
    if locks.is_empty() {
        return Err("a transaction needs at least one lock".into());
    }
    if locks.len() > LOCKS {
        return Err(format!(
            "a transaction takes at most {LOCKS} locks (asked {})",
            locks.len()
        ));
    }
    let mut seen: Vec<(LockPath<DEPTH>, String)> = Vec::new();
    let mut out = Vec::new();
    for l in locks {
        let (p, m) = parse_lock(l)?;
        let k = lock_path(&p).map_err(|e| format!("{l}: {e}"))?;
        if let Some((_, q)) = seen.iter().find(|(x, _)| *x == k) {
            if *q == p {
                return Err(format!("lock {p} appears twice in the transaction"));
            }
            // Two paths whose hashed elements are equal are one lock to the engine (a
            // collision: more waiting, never less exclusion): taken once, under the first
            // path, in the stronger of the two modes.
            if m == LockMode::Write {
                if let Some(e) = out.iter_mut().find(|(x, _)| x == q) {
                    e.1 = LockMode::Write;
                }
            }
            continue;
        }
        seen.push((k, p.clone()));
        out.push((p, m));
    }
    Ok(out)
}

impl crate::token::Handle {
    /// Start a transaction whose agent runs on this node (see [`crate::agents`]).
    pub fn transaction(&self, opts: TxnOptions) -> Result<Transaction, TxnError> {
        Transaction::begin(self.agents().clone(), opts)
    }

    /// The agents engine's counters.
    pub fn agent_stats(&self) -> AgentStats {
        self.agents().counters.snapshot()
    }

    /// This node's lock server's entries, in queue order: `(agent, path key list, mode,
    /// granted)` (for tests and diagnostics).
    pub async fn agent_entries(&self) -> Result<Vec<(u16, String, LockMode, bool)>, TxnError> {
        let (reply, rx) = oneshot::channel();
        self.agents()
            .tx
            .send(Cmd::Entries { reply })
            .map_err(|_| TxnError::Stopped)?;
        rx.await.map_err(|_| TxnError::Stopped)
    }
}

impl crate::token::Handle {
    /// This node's agents in words (status, requests, known queues), for diagnostics.
    pub async fn agent_states(&self) -> Result<Vec<String>, TxnError> {
        let (reply, rx) = oneshot::channel();
        self.agents()
            .tx
            .send(Cmd::Agents { reply })
            .map_err(|_| TxnError::Stopped)?;
        rx.await.map_err(|_| TxnError::Stopped)
    }
}

impl crate::token::Node {
    /// Start a transaction whose agent runs on this node (see [`crate::agents`]).
    pub fn transaction(&self, opts: TxnOptions) -> Result<Transaction, TxnError> {
        self.handle().transaction(opts)
    }

    /// The agents engine's counters.
    pub fn agent_stats(&self) -> AgentStats {
        self.handle().agent_stats()
    }
}

/// A transaction over many locks: [`Transaction::lock`] waits until every lock asked for so
/// far is held; deadlocks are resolved by the agents (a surrender of a pending lock is not
/// seen here); everything is released when the transaction ends ([`Transaction::commit`],
/// or drop).
pub struct Transaction {
    id: AgentId,
    inbox: Inbox,
    view: watch::Receiver<TxnView>,
    timeout: Duration,
    ended: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("id", &self.id)
            .field("ended", &self.ended)
            .finish()
    }
}

impl Transaction {
    fn begin(inbox: Inbox, opts: TxnOptions) -> Result<Transaction, TxnError> {
        let id = inbox.next_id()?;
        let (vtx, view) = watch::channel(TxnView::default());
        inbox
            .tx
            .send(Cmd::Begin {
                id,
                abort_on_deadlock: opts.abort_on_deadlock,
                view: vtx,
            })
            .map_err(|_| TxnError::Stopped)?;
        Ok(Transaction {
            id,
            inbox,
            view,
            timeout: opts.timeout.unwrap_or(DEFAULT_TIMEOUT),
            ended: false,
        })
    }

    /// The agent's reference (unique in the cluster; later transactions of a node get
    /// larger ones).
    pub fn id(&self) -> u16 {
        self.id.0
    }

    /// Lock `path` in `mode` on its home node; returns when every lock of the transaction
    /// is held. Read then write of one path is an upgrade.
    pub async fn lock(&mut self, path: &str, mode: LockMode) -> Result<(), TxnError> {
        self.lock_all(&[(path.to_string(), mode)]).await
    }

    /// Lock `path` in `mode` on each of `nodes`; held when `req` of them grant it.
    pub async fn lock_on(
        &mut self,
        path: &str,
        mode: LockMode,
        nodes: &[u16],
        req: Req,
    ) -> Result<(), TxnError> {
        let ask = Ask {
            path: lock_path(path)?,
            name: path.to_string(),
            mode,
            servers: self.servers(nodes)?,
            req,
        };
        self.call(vec![ask]).await
    }

    /// Ask for every lock of `locks` (each on its home node) at once; returns when all are
    /// held (within one timeout). The client is told it holds them only then: with
    /// `abort_on_deadlock`, a lock of this call granted before the others is surrendered
    /// silently if a deadlock needs it, as a pending one is. A refused call (e.g. a path
    /// twice) asks for none of them.
    pub async fn lock_all(&mut self, locks: &[(String, LockMode)]) -> Result<(), TxnError> {
        let mut asks = Vec::new();
        for (path, mode) in locks {
            asks.push(Ask {
                path: lock_path(path)?,
                name: path.clone(),
                mode: *mode,
                servers: Servers::one(hilock_kernel::agents::ServerId(home(path, self.inbox.n))),
                req: Req::All,
            });
        }
        if asks.is_empty() {
            return Ok(());
        }
        self.call(asks).await
    }

    /// One call: asks for `asks` and waits until the transaction holds every lock.
    async fn call(&mut self, asks: Vec<Ask>) -> Result<(), TxnError> {
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(self.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400));
        let names: Vec<&str> = asks.iter().map(|a| a.name.as_str()).collect();
        let names = names.join(", ");
        let rx = self.request(asks)?;
        self.wait(rx, &names, deadline).await
    }

    fn servers(&self, nodes: &[u16]) -> Result<Servers, TxnError> {
        if nodes.is_empty() {
            return Err(TxnError::BadNodes("no node".into()));
        }
        let mut s = 0u32;
        for &x in nodes {
            if usize::from(x) >= self.inbox.n.min(MAX_SERVERS) {
                return Err(TxnError::BadNodes(format!(
                    "node {x} is not in the cluster of {}",
                    self.inbox.n
                )));
            }
            if s & (1 << x) != 0 {
                return Err(TxnError::BadNodes(format!("node {x} named twice")));
            }
            s |= 1 << x;
        }
        Ok(Servers(s))
    }

    /// Sends one call's locks to the engine.
    fn request(
        &mut self,
        locks: Vec<Ask>,
    ) -> Result<oneshot::Receiver<Result<(), TxnError>>, TxnError> {
        if self.ended {
            return Err(TxnError::Ended);
        }
        let (reply, rx) = oneshot::channel();
        self.inbox
            .tx
            .send(Cmd::Lock {
                id: self.id,
                locks,
                reply,
            })
            .map_err(|_| TxnError::Stopped)?;
        Ok(rx)
    }

    /// Waits for the answer to a request until `deadline`; on an abort or a timeout the
    /// transaction ends (everything is released).
    async fn wait(
        &mut self,
        rx: oneshot::Receiver<Result<(), TxnError>>,
        name: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), TxnError> {
        let r = match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(TxnError::Stopped),
            Err(_) => {
                // Name only the locks still not granted (the others were).
                let (reply, pending) = oneshot::channel();
                let _ = self.inbox.tx.send(Cmd::Pending { id: self.id, reply });
                let path = match pending.await {
                    Ok(p) if !p.is_empty() => p.join(", "),
                    _ => name.to_string(),
                };
                Err(TxnError::Timeout {
                    path,
                    after: self.timeout,
                })
            }
        };
        if let Err(e) = &r {
            if !matches!(e, TxnError::Refused(_)) {
                self.finish(None);
            }
        }
        r
    }

    fn finish(&mut self, reply: Option<Reply<()>>) {
        if !self.ended {
            self.ended = true;
            let _ = self.inbox.tx.send(Cmd::Finish { id: self.id, reply });
        }
    }

    /// Locks the client was told it held that were surrendered since (to resolve a
    /// deadlock; only without `abort_on_deadlock`) and asked for again.
    pub fn revoked(&self) -> Vec<String> {
        self.view.borrow().revoked.clone()
    }

    /// Resolves when the engine aborts the transaction (e.g. a server of one of its locks
    /// is down): the locks are lost.
    pub async fn lost(&self) -> TxnError {
        let mut v = self.view.clone();
        let r = match v.wait_for(|v| v.aborted.is_some()).await {
            Ok(v) => v.aborted.clone().unwrap_or(TxnError::Ended),
            Err(_) => TxnError::Stopped,
        };
        r
    }

    /// End the transaction: committed if it holds every lock it asked for (then `Ok`),
    /// else aborted. Every lock is released.
    pub async fn commit(mut self) -> Result<(), TxnError> {
        if self.ended {
            return Err(TxnError::Ended);
        }
        let (reply, rx) = oneshot::channel();
        self.finish(Some(reply));
        rx.await.unwrap_or(Err(TxnError::Stopped))
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        self.finish(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two paths whose hashed elements collide are one lock to the engine (`docs/engines/
    /// agents.md`, "a collision makes two locks one"): in one transaction that lock is
    /// taken once, under the first path, in the stronger mode, not refused.
    #[test]
    fn colliding_paths_in_one_transaction_are_taken_as_one_lock_in_the_stronger_mode() {
        let (a, b) = ("/a/c93", "/a/c437");
        assert_eq!(
            lock_path(a).unwrap(),
            lock_path(b).unwrap(),
            "the two collide"
        );
        let txn = |l: &[&str]| parse_txn(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            txn(&["/a/c93:R", "/a/c437:W", "/b:R"]),
            Ok(vec![
                (a.to_string(), LockMode::Write),
                ("/b".to_string(), LockMode::Read)
            ])
        );
        assert_eq!(
            txn(&["/a/c93:W", "/a/c437:R"]),
            Ok(vec![(a.to_string(), LockMode::Write)])
        );
        assert_eq!(
            txn(&["/a/c93:R", "/a/c93:W"]),
            Err("lock /a/c93 appears twice in the transaction".to_string())
        );
    }

    #[test]
    fn a_cluster_of_more_than_32_nodes_starts_no_transaction() {
        let (i, _rx) = inbox(0, 33, false);
        assert_eq!(
            i.next_id().unwrap_err().to_string(),
            "the agents engine serves clusters of at most 32 nodes (this one has 33)"
        );
        let (i, _rx) = inbox(31, 32, false);
        assert_eq!(i.next_id(), Ok(AgentId(31)));
    }

    #[test]
    fn a_paths_home_is_sha256_of_slash_and_top_element_first_8_bytes_mod_n() {
        for (path, n) in [("/h1", 3), ("/accounts/17/x", 5), ("/a", 7), ("/zz/y", 32)] {
            let top = format!("/{}", path[1..].split('/').next().unwrap());
            let d = Sha256::digest(top.as_bytes());
            let want = u64::from_be_bytes(d[..8].try_into().unwrap()) % n as u64;
            assert_eq!(u64::from(home(path, n)), want, "{path}");
        }
        assert_eq!(home("/a/b", 5), home("/a/c/d", 5));
    }
}
