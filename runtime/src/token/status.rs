//! What `hilock status` shows of a node.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::core::Cmd;
use super::{Error, Handle, NodeLease, Stats};

/// How long [`Handle::status`] waits for each peer to answer the probe it sends for the
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
    /// The installed epoch (recovery; 0 without it).
    #[serde(default)]
    pub epoch: u32,
    /// The node's etcd lease.
    #[serde(default)]
    pub lease: LeaseStatus,
    /// Whether the node grants locks now.
    #[serde(default)]
    pub serving: bool,
    /// Why it does not, if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

impl LeaseStatus {
    /// The lease as `hilock status` shows it at `now`.
    pub fn of(l: &NodeLease, now: tokio::time::Instant) -> LeaseStatus {
        match l {
            NodeLease::Static => LeaseStatus {
                state: "none".into(),
                ..LeaseStatus::default()
            },
            NodeLease::Valid { until, lease, .. } => {
                let (state, reason) = match l.check(now) {
                    Ok(()) => ("held", None),
                    Err(r) => ("expired", Some(r)),
                };
                LeaseStatus {
                    state: state.into(),
                    id: Some(format!("{lease:#x}")),
                    left_ms: Some(
                        u64::try_from(until.saturating_duration_since(now).as_millis())
                            .unwrap_or(u64::MAX),
                    ),
                    reason,
                }
            }
            NodeLease::Lost { reason } => LeaseStatus {
                state: "lost".into(),
                reason: Some(reason.clone()),
                ..LeaseStatus::default()
            },
        }
    }
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

impl Handle {
    /// Whether the node grants now, and why not: its lease first, then the core's state.
    pub(super) fn serving(&self, lease: &NodeLease, core: &CoreState) -> (bool, Option<String>) {
        let why = match lease.check(tokio::time::Instant::now()) {
            Err(r) => Some(r),
            Ok(()) => core.not_serving.clone(),
        };
        (why.is_none(), why)
    }

    /// The core's state (the metrics endpoint).
    pub(super) async fn core_state(&self) -> Result<CoreState, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Summary { reply })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// Locks, peers and counters. Every peer with an open connection is probed for this
    /// call; the answer takes at most [`PROBE_WAIT`] longer when one does not answer.
    pub async fn status(&self) -> Result<Status, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Status { reply })
            .map_err(|_| Error::Stopped)?;
        let (locks, core) = rx.await.map_err(|_| Error::Stopped)?;
        let s = &self.shared;
        let lease = s.lease.borrow().clone();
        let (serving, not_serving) = self.serving(&lease, &core);
        let deadline = tokio::time::Instant::now() + PROBE_WAIT;
        // One snapshot per peer, taken as soon as its probe has ended: `connected` only
        // when the probe was answered on the connection that is still up now.
        let peers = s.peers.iter().enumerate().filter_map(|(i, p)| {
            p.as_ref().map(|p| async move {
                let answered = p.refused().is_none() && p.probe(deadline).await;
                let open = p.connected.load(Relaxed) || p.silent.load(Relaxed);
                let refused = p.refused();
                let connected = answered && refused.is_none();
                PeerStatus {
                    id: i as u16,
                    addr: p.addr.to_string(),
                    connected,
                    incoming: p.incoming.load(Relaxed),
                    state: match refused {
                        Some(r) => format!("refused: {r}"),
                        None if connected => "connected".into(),
                        None if open => p.not_answering(),
                        None => "reconnecting".into(),
                    },
                    frames_sent: p.sent.load(Relaxed),
                    frames_received: p.received.load(Relaxed),
                    resent: p.resent.load(Relaxed),
                    duplicates: p.duplicates.load(Relaxed),
                    reconnects: p.connections.load(Relaxed).saturating_sub(1),
                }
            })
        });
        let peers = futures_util::future::join_all(peers).await;
        Ok(Status {
            id: s.id,
            cluster: s.cluster.clone(),
            listen: s.listen.to_string(),
            membership: if lease == NodeLease::Static {
                "static"
            } else {
                "etcd"
            }
            .into(),
            recovery: s.recovery,
            run: format!("{:016x}", s.incarnation),
            epoch: core.epoch,
            lease: LeaseStatus::of(&lease, tokio::time::Instant::now()),
            serving,
            not_serving,
            tokens_held: core.tokens,
            metrics: s.metrics_addr.map(|a| format!("http://{a}/metrics")),
            peers,
            stats: self.stats(),
            locks,
        })
    }
}
