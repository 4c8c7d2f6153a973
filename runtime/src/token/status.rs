//! What `hilock status` shows of a node.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Stats;

/// How long [`super::Handle::status`] waits for each peer to answer the probe it sends for the
/// call (all peers at once): a peer that does not answer within it is shown as not
/// answering, not connected.
pub const PROBE_WAIT: Duration = Duration::from_millis(300);

/// What `hilock status` shows of a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// Node id.
    pub id: u16,
    /// Cluster name.
    pub cluster: String,
    /// Listening address.
    pub listen: String,
    /// How membership is kept: `static` (the configured nodes) or `etcd`.
    #[serde(default)]
    pub membership: String,
    /// `etcd_recovery` is on.
    #[serde(default)]
    pub recovery: bool,
    /// This run of the node (its incarnation, drawn at start), 16 hex digits as in the logs.
    #[serde(default)]
    pub run: String,
    /// This run was resumed from a suspend ([`Node::suspend`](super::Node::suspend)).
    #[serde(default)]
    pub resumed: bool,
    /// The installed epoch (recovery; 0 without it).
    #[serde(default)]
    pub epoch: u32,
    /// The node's etcd lease.
    #[serde(default)]
    pub lease: LeaseStatus,
    /// Whether the node grants locks now.
    #[serde(default)]
    pub serving: bool,
    /// Why it does not, if so (`null` when it serves: the field is always there).
    #[serde(default)]
    pub not_serving: Option<String>,
    /// Locks whose token is at this node.
    #[serde(default)]
    pub tokens_held: usize,
    /// Where the node serves its metrics (`metrics_addr`), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Peers.
    pub peers: Vec<PeerStatus>,
    /// Counters.
    pub stats: Stats,
    /// The agents engine's counters (`hilock lock --txn` transactions begun here, and the
    /// surrenders and messages of this node's agents and lock server).
    #[serde(default)]
    pub agents: crate::agents::AgentStats,
    /// Entries in this node's agents lock server now (granted or waiting, of any node's
    /// transactions).
    #[serde(default)]
    pub txn_entries: usize,
    /// Every lock this node has seen, by path.
    pub locks: Vec<LockStatus>,
}

/// The node's lease in [`Status`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LeaseStatus {
    /// `none` (static membership), `held`, `expired` (the local lease ended without a
    /// renewal; the loss is about to be published) or `lost`.
    pub state: String,
    /// etcd's lease id, in hex as in the logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Held: milliseconds until the local lease ends unless renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_ms: Option<u64>,
    /// Expired or lost: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the core task says of itself ([`Cmd::Status`], [`Cmd::Summary`]).
#[derive(Clone, Debug, Default)]
pub(super) struct CoreState {
    /// The installed epoch.
    pub(super) epoch: u32,
    /// Why the core grants nothing now (refused, rejoining, frozen, not admitted yet).
    pub(super) not_serving: Option<String>,
    /// Locks known.
    pub(super) locks: usize,
    /// Locks whose token is here.
    pub(super) tokens: usize,
    /// Local holders.
    pub(super) holders: usize,
    /// Local callers waiting (queued here, or with a kernel request out).
    pub(super) waiters: usize,
    /// Requests (of any node) in the kernel queues of this node's locks.
    pub(super) queued: usize,
}

/// A peer in [`Status`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Node id.
    pub id: u16,
    /// Address.
    pub addr: String,
    /// Whether this node's connection to it is up (handshake done and not seen closed;
    /// this node notices a closed connection as soon as the operating system reports it)
    /// and the peer answered, on that connection, a probe sent for this status call within
    /// [`PROBE_WAIT`] (300 ms). A stopped, hung or silently cut-off peer is never shown
    /// connected.
    pub connected: bool,
    /// Whether a connection from it is up.
    pub incoming: bool,
    /// `connected` (answered this call's probe), `not answering (last heard N ms ago)`
    /// (the connection is open but the peer did not answer the probe within
    /// [`PROBE_WAIT`], or has answered nothing for a second: stopped, hung or cut off;
    /// N is the time since its last acknowledgement), `reconnecting` (no connection;
    /// messages wait and are resent when it is back) or `refused: …` (it restarted, or
    /// refused this node as a restarted one).
    pub state: String,
    /// Messages sent to it (each once, however often resent).
    pub frames_sent: u64,
    /// Messages received from it and delivered (each once).
    pub frames_received: u64,
    /// Messages resent to it after a reconnect.
    pub resent: u64,
    /// Resent messages from it that had been delivered already (dropped).
    pub duplicates: u64,
    /// Times this node connected to it again after losing its connection.
    #[serde(default)]
    pub reconnects: u64,
}

/// One lock in [`Status`]: the kernel state and the local bookkeeping.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockStatus {
    /// The path.
    pub path: String,
    /// This node holds the token.
    pub token: bool,
    /// The parent (toward the token), if not the token node.
    pub parent: Option<u16>,
    /// Held mode (M_H).
    pub held: String,
    /// Owned mode (M_O).
    pub owned: String,
    /// Pending mode (M_P).
    pub pending: String,
    /// Frozen modes.
    pub frozen: String,
    /// The local queue: `node:mode@priority`.
    pub queue: Vec<String>,
    /// Local callers holding the lock.
    pub holders: usize,
    /// Local callers waiting.
    pub waiters: usize,
}

impl LockStatus {
    /// Nothing held, requested or queued here.
    pub fn is_idle(&self) -> bool {
        self.held == "Φ"
            && self.pending == "Φ"
            && self.queue.is_empty()
            && self.holders == 0
            && self.waiters == 0
    }
}
