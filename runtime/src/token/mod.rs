//! A hilock node: one tokio task drives the kernel sites of every lock this node has seen;
//! one task per peer dials it and sends; one task per accepted connection receives.
//!
//! Locks are named by paths. Each path is its own kernel site
//! ([`LockSite`](crate::wire::LockSite), one lock per site), created on first use; its
//! initial token holder is [`initial_holder`](crate::wire::initial_holder). The node
//! re-implements no rule: every protocol decision is a
//! [`LockSite::step`](crate::wire::LockSite). What the node
//! adds is local bookkeeping the kernel leaves to its user:
//!
//! - **Local holders.** The kernel holds one mode per lock per site (M_H). Any number of
//!   local callers share it whose modes it covers (`LockEntry::joinable`): reference
//!   counting per hold, with the mode of each. A caller the held mode does not cover
//!   waits until the local holders are gone; the site's next kernel request is then the
//!   first waiter's. Callers do not overtake local waiters or remote requests waiting
//!   here, except nested ones ([`Options::nested`]). The kernel releases when the last
//!   local holder does.
//! - **Timeouts and cancellation.** A request whose caller gave up (timeout, or the future
//!   was dropped) is cancelled: a local waiter leaves the node's queue, a kernel request
//!   is given `Input::Cancel` (`spec/SPEC.md` 1.13), after which no grant of it reaches a
//!   caller (the kernel releases it when it comes).
//! - **Hierarchy.** [`Node::lock`] takes the intention mode on every ancestor path first,
//!   outermost first (see [`intention`]); all guards take locks in that order.
//!
//! The module's parts: this file holds the lock API ([`Node`], [`Handle`], [`Guard`],
//! [`Error`], [`Options`]) and the node's shared state; `core` the task that drives the
//! kernel sites and the local holders; `net` the peer channels (dialing, sending and
//! resending, accepting, acknowledgements, heartbeats); `handshake` the authentication of
//! a connection; `status` what `hilock status` shows; `metrics` the Prometheus metrics;
//! `lease` the node's etcd lease and its peers' (membership through etcd, [`NodeLease`]);
//! `recover` the new epoch installed through etcd when a member's lease ends
//! (`etcd_recovery`).

mod core;
mod generation;
mod handshake;
mod inspect;
mod lease;
mod metrics;
mod net;
mod recover;
mod status;
mod suspend;
pub mod trace;
mod transport;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hilock_kernel::{KernelError, Mode, Priority, ValueBlock, VALUE_LEN};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};
use tracing::info;

use crate::config::Config;
use crate::wire::{self, ancestors, check_path};

pub use self::core::Blocked;
use self::core::{Cmd, Core};
pub use self::handshake::{HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES};
pub use self::lease::NodeLease;
pub use self::metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
use self::net::{accept, dial, Inbound, Outbox, PeerLink};
pub use self::net::{HAND_OVER, HEARTBEAT, REDIAL_AFTER, SILENT_AFTER};
pub use self::status::{LeaseStatus, LockStatus, PeerStatus, Status, PROBE_WAIT};
use self::transport::{Entropy, Listener, Network};

/// Errors of the lock API. New kinds of failure may be added: match with a `_` arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The path is not a valid lock path.
    InvalidPath(String),
    /// Φ is not a mode one can request.
    InvalidMode,
    /// The lock was not granted in time. `disconnected` lists the peers this node had no
    /// working connection to when it gave up (a crashed, stopped or cut-off peer);
    /// `waiting` says what the request was waiting for as this node saw it then.
    Timeout {
        /// The lock that was not granted (an ancestor of the requested path, or itself).
        path: String,
        /// The mode asked for on it.
        mode: Mode,
        /// How long the request waited.
        after: Duration,
        /// Peers without a working connection at that moment.
        disconnected: Vec<u16>,
        /// `etcd_recovery` is on: the survivors take back the tokens of a peer whose etcd
        /// lease ends.
        recovers: bool,
        /// Where the request stood: its place in this node's queue, who holds the lock
        /// here or was granted it from here (node and mode), or the peer its request went
        /// to and that peer's state (connected, not answering for how long, unreachable
        /// since when, refused).
        waiting: String,
    },
    /// `upgrade` on a guard that does not hold its lock in U alone.
    NotUpgradable {
        /// The guard's path.
        path: String,
        /// The mode the guard holds.
        mode: Mode,
    },
    /// `set_value` on a guard that does not hold W (`spec/SPEC.md` 1.15: only the W holder
    /// writes the lock value block).
    NotWriter {
        /// The guard's path.
        path: String,
        /// The mode the guard holds.
        mode: Mode,
    },
    /// `downgrade` to a mode that is not weaker than the guard's (`spec/SPEC.md` 1.14), or
    /// while the guard's upgrade is under way.
    NotDowngradable {
        /// The guard's path.
        path: String,
        /// The mode the guard holds.
        mode: Mode,
        /// The mode asked for.
        to: Mode,
    },
    /// The kernel refused the operation (a bug in the runtime's bookkeeping if it happens).
    Kernel {
        /// The lock.
        path: String,
        /// The kernel's error.
        error: KernelError,
    },
    /// The node has stopped.
    Stopped,
    /// This node is a new run of a node its peers knew (it crashed and restarted with
    /// fresh state while they ran): it serves no lock.
    Refused {
        /// Who refused it and why.
        reason: String,
    },
    /// A peer this request waited on restarted with fresh state; it is refused, so the
    /// request cannot be served.
    PeerRestarted {
        /// The lock.
        path: String,
        /// The restarted peer.
        peer: u16,
    },
    /// A try-lock ([`Handle::try_lock`]) was refused: `path` could not be taken in `mode`
    /// without waiting (`spec/SPEC.md` 1.12). Nothing of the request is left anywhere and
    /// nothing is granted later; the ancestors it had taken are released.
    WouldBlock {
        /// The lock that was busy (an ancestor of the requested path, or itself).
        path: String,
        /// The mode tried on it.
        mode: Mode,
    },
    /// A try-lock ([`Handle::try_lock`]) at a node that grants nothing yet: a majority of
    /// the cluster has not let it in (it just started), an epoch is being installed
    /// (recovery), or it waits for its peers' generations (`state_dir`). The lock may well
    /// be free: a try does not wait for the node, so ask again (or use [`Handle::lock`],
    /// which waits). Nothing of the request is left anywhere.
    NotServing {
        /// The lock tried.
        path: String,
        /// Why the node grants nothing now.
        reason: String,
    },
    /// Membership through etcd: a peer this request waited on (the lock's token or the
    /// request's path is at it, as this node knows it) has left the cluster — its etcd
    /// lease ended.
    PeerGone {
        /// The lock.
        path: String,
        /// The peer.
        peer: u16,
        /// How it left (its lease ended, at which etcd revision).
        reason: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidPath(e) => write!(f, "invalid lock path: {e}"),
            Error::InvalidMode => write!(f, "Φ is not a mode one can request"),
            Error::Timeout {
                path,
                mode,
                after,
                disconnected,
                recovers,
                waiting,
            } => {
                write!(
                    f,
                    "timed out after {after:.1?} waiting for {path} in {mode}"
                )?;
                if !waiting.is_empty() {
                    write!(f, ": {waiting}")?;
                }
                if disconnected.is_empty() {
                    Ok(())
                } else {
                    write!(
                        f,
                        " (no working connection to node{} {}: not answering, which may be a cut-off as well as a stop; {})",
                        if disconnected.len() > 1 { "s" } else { "" },
                        disconnected
                            .iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        if *recovers {
                            "with etcd recovery the survivors take its tokens back once its etcd lease ends"
                        } else {
                            "the protocol cannot take back the tokens of a node that does not come back"
                        }
                    )
                }
            }
            Error::NotUpgradable { path, mode } => {
                write!(f, "{path} is held in {mode}; only a U guard can upgrade")
            }
            Error::NotDowngradable { path, mode, to } => write!(
                f,
                "{path} is held in {mode}, which cannot be downgraded to {to}"
            ),
            Error::NotWriter { path, mode } => write!(
                f,
                "{path} is held in {mode}; only a W guard writes the value block"
            ),
            Error::Kernel { path, error } => write!(f, "{path}: kernel refused: {error}"),
            Error::Stopped => write!(f, "the node has stopped"),
            Error::WouldBlock { path, mode } => {
                write!(f, "busy: {path} cannot be taken in {mode} without waiting")
            }
            Error::Refused { reason } => write!(f, "this node serves no lock: {reason}"),
            Error::NotServing { path, reason } => write!(
                f,
                "{path}: this node grants nothing yet ({reason}); a try-lock does not wait for \
                 it, and the lock may be free: ask again, or lock and wait"
            ),
            Error::PeerRestarted { path, peer } => write!(
                f,
                "{path}: node {peer} restarted with fresh state and is refused; the protocol \
                 cannot recover its tokens and copies ({RESTART_ALL})"
            ),
            Error::PeerGone { path, peer, reason } => write!(
                f,
                "{path}: node {peer} has left the cluster ({reason}); this request waits on it \
                 (the lock's token or the request's path is at node {peer}) and cannot be served \
                 (without `etcd_recovery` its tokens are not regenerated: restart the whole cluster)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// What to do when a static cluster refuses a new run of a node (said in every message
/// about it): a whole-cluster restart as a new run, which `state_dir` prevents unless the
/// snapshots go too (`docs/operations.md`, "Rolling restart of a static cluster").
pub(crate) const RESTART_ALL: &str = "restart the whole cluster as a new run (stop every \
     node; with state_dir, also remove every node's state_dir/suspended), or run with \
     membership = \"etcd\" and etcd_recovery (the default with etcd), whose recovery takes \
     a restarted node back";

/// Options of a lock request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The request's priority (chapter 3; among the requests of different nodes, higher
    /// is served first; 0 by default). Callers waiting on one node are served in order of
    /// arrival.
    pub priority: Priority,
    /// Give up after this long (whole hierarchy); `None`: the node's `request_timeout`.
    pub timeout: Option<Duration>,
    /// The caller already holds a lock of this node (it nests, like a `hilock lock` run
    /// under another). A nested request shares the node's current hold of a lock when that
    /// hold covers its mode, even ahead of local waiters and of remote requests that wait
    /// for the lock, so that it does not queue behind requests that wait for its own
    /// caller (e.g. IW on `/db` for `/db/b` while it holds `/db/a` in W). Requests that are
    /// not nested do not overtake waiting requests. A mode the node's hold does not cover
    /// needs a stronger hold, which waits until the node's holders are gone — its own
    /// caller among them, so it waits for itself until its timeout: under R on `/db/x`
    /// (IR on `/db`) a nested W on `/db/y` needs IW on `/db`, which IR does not cover.
    /// Take the stronger lock first (W on `/db/y` before R on `/db/x`).
    pub nested: bool,
}

/// With etcd membership, how long a request waits for its answer before it also watches
/// the gone peers (`Handle::lock_with`): token-local grants come back within microseconds
/// and never subscribe; a request that waits on a peer that left fails at most this much
/// later than it would otherwise.
const FAST_GRANT: Duration = Duration::from_millis(1);

/// The intention mode taken on every ancestor of a lock requested in `mode`
/// (multi-granularity locking, Gray et al., as the thesis uses it in section 4.1):
/// IR above IR and R; IW above U, IW and W.
pub const fn intention(mode: Mode) -> Mode {
    match mode {
        Mode::IR | Mode::R => Mode::IR,
        _ => Mode::IW,
    }
}

/// Counters of a node, for `hilock status`, the metrics endpoint and the demo.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) frames_sent: AtomicU64,
    pub(crate) frames_received: AtomicU64,
    pub(crate) kernel_requests: AtomicU64,
    pub(crate) grants: AtomicU64,
    pub(crate) rejected_connections: AtomicU64,
    pub(crate) kernel_rejections: AtomicU64,
    pub(crate) abandoned_grants: AtomicU64,
    pub(crate) stale_epoch: AtomicU64,
    pub(crate) held_back_full: AtomicU64,
    /// Lock requests (one per lock of a hierarchy) not granted on the spot: queued behind
    /// local holders or waiters, or sent to the kernel without an immediate grant.
    pub(crate) waits: AtomicU64,
    /// Lock requests that timed out.
    pub(crate) timeouts: AtomicU64,
    pub(crate) would_block: AtomicU64,
    /// Kernel requests cancelled because their caller gave up (`Input::Cancel`).
    pub(crate) cancels: AtomicU64,
    /// Protocol messages sent and delivered, by kind ([`MSG_KINDS`]).
    pub(crate) sent_by_kind: [AtomicU64; MSG_KINDS.len()],
    pub(crate) received_by_kind: [AtomicU64; MSG_KINDS.len()],
    /// Renewals of this node's etcd lease seen (membership through etcd).
    pub(crate) lease_renewals: AtomicU64,
    /// This node's etcd lease lost (at most once per run; the runs of a process share the
    /// counters).
    pub(crate) lease_losses: AtomicU64,
    /// Epochs installed (recovery: each one rebuilds the locks of members that left).
    pub(crate) epochs_installed: AtomicU64,
    /// Peers seen leave the cluster (their etcd lease ended).
    pub(crate) peers_gone: AtomicU64,
    /// Client connections refused: `max_clients` reached, or no file descriptor left.
    pub(crate) clients_refused: AtomicU64,
    /// Failed `accept` calls on the client socket and the peer listener.
    pub(crate) accept_errors: AtomicU64,
    /// Connections closed because the peer went away mid-handshake or mid-stream (cut,
    /// reset, closed) rather than for bad input.
    pub(crate) cut_connections: AtomicU64,
    /// Client connections served now (a gauge).
    pub(crate) clients: AtomicU64,
}

/// The kinds of protocol messages counted apart (`Counters::sent_by_kind`): the kernel's
/// five, the agents engine's, then the try-lock's busy answer (`Msg::Busy`; a try request
/// counts as a request).
pub const MSG_KINDS: [&str; 7] = [
    "request", "grant", "token", "release", "freeze", "agents", "busy",
];

/// The index in [`MSG_KINDS`] of a kernel message.
fn kind_index(m: &wire::KMsg) -> usize {
    use hilock_kernel::msg::MsgKind;
    match m.kind() {
        MsgKind::Request => 0,
        MsgKind::Grant => 1,
        MsgKind::Token => 2,
        MsgKind::Release => 3,
        MsgKind::Freeze => 4,
        MsgKind::Busy => 6,
    }
}

/// The index in [`MSG_KINDS`] of the agents engine's messages.
const AGENTS_KIND: usize = 5;

/// A snapshot of a node's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Protocol messages sent to peers.
    pub frames_sent: u64,
    /// Protocol messages received from peers.
    pub frames_received: u64,
    /// Kernel requests issued (acquires and upgrades; one per lock of a hierarchy).
    pub kernel_requests: u64,
    /// Grants delivered to callers (local sharing included).
    pub grants: u64,
    /// Connections closed for a bad handshake or a bad frame, on either side: a peer that
    /// dialled in and one this node dialled (a wrong cluster secret shows here on both
    /// nodes, with a warning in the log).
    pub rejected_connections: u64,
    /// Delivered messages the kernel refused (logged and dropped).
    pub kernel_rejections: u64,
    /// Grants that arrived for callers that had given up, released at once.
    pub abandoned_grants: u64,
    /// Delivered messages of an earlier epoch than this node's (recovery), refused by
    /// the kernel (`StaleEpoch`) and dropped.
    #[serde(default)]
    pub stale_epoch: u64,
    /// Recovery: connections from peers closed because the node already kept
    /// `etcd_held_back_max` of their messages unread (the peers resend after reconnecting).
    #[serde(default)]
    pub held_back_full: u64,
    /// Lock requests not granted on the spot (they waited).
    #[serde(default)]
    pub waits: u64,
    /// Lock requests that timed out.
    #[serde(default)]
    pub timeouts: u64,
    /// Try-locks refused because they would have waited ([`Error::WouldBlock`]; one per
    /// refused try, whatever level of the hierarchy refused it).
    #[serde(default)]
    pub would_block: u64,
    /// Kernel requests cancelled (`Input::Cancel`, `spec/SPEC.md` 1.13) because their
    /// caller gave up (timeout, dropped future, failed peer); none of them is granted to a
    /// caller later.
    #[serde(default)]
    pub cancels: u64,
    /// Client connections refused (too many clients, or no file descriptor left).
    #[serde(default)]
    pub clients_refused: u64,
    /// Peer connections that were cut (closed or reset by the other side or the network)
    /// rather than closed for bad input (`rejected_connections`).
    #[serde(default)]
    pub cut_connections: u64,
}

struct Shared {
    id: u16,
    cluster: String,
    secret: Vec<u8>,
    n: usize,
    request_timeout: Duration,
    listen: SocketAddr,
    peers: Vec<Option<PeerLink>>,
    /// Shared by the runs of one process (a rejoin keeps counting where the run before
    /// stopped: a lost lease stays visible in the metrics).
    counters: Arc<Counters>,
    /// Set when the node stops: clients holding locks are told they are lost.
    stopping: tokio::sync::watch::Sender<bool>,
    /// This run of the node (random, drawn at start).
    incarnation: u64,
    /// Peers that have welcomed this run.
    welcomed: std::sync::atomic::AtomicUsize,
    /// Numbers the lock requests of callers (to find one in a queue).
    tickets: AtomicU64,
    /// The agents engine's inbox (Wiger's locks, [`crate::agents`]).
    agents: crate::agents::Inbox,
    /// This node's lease ([`NodeLease::Static`] without etcd).
    lease: tokio::sync::watch::Sender<NodeLease>,
    /// Peers that left the cluster (etcd membership), with how; a waiting request
    /// watches it (woken when a peer leaves).
    gone: tokio::sync::watch::Sender<std::collections::BTreeMap<u16, String>>,
    /// Wakes the recovery task (a message of a later epoch arrived).
    nudge: tokio::sync::Notify,
    /// `etcd_recovery` is on.
    recovery: bool,
    /// Recovery: etcd's member keys, node id → the run (incarnation) holding it, as the
    /// recovery task last saw them. A new run of a peer is let onto the peer links only
    /// once it holds its member key (so the old run's lease has ended, `net`).
    etcd_runs: std::sync::Mutex<std::collections::BTreeMap<u16, u64>>,
    /// Recovery: protocol messages handed to the core and not yet given to the kernel (or
    /// dropped): queued, or held back; at most `held_back_max` (`net::serve_peer`).
    unread: std::sync::atomic::AtomicUsize,
    held_back_max: usize,
    /// Where the metrics are served (`metrics_addr`), if they are.
    metrics_addr: Option<SocketAddr>,
    /// Static membership with a state directory: the directory, and the generation this
    /// run offers (`generation`; a resumed run: the run's generation).
    state: Option<(std::path::PathBuf, u32)>,
    /// The node suspends ([`Node::suspend`]): the peer connections deliver and acknowledge
    /// nothing more.
    suspending: AtomicBool,
    /// This run was resumed from a suspend (`suspend`).
    resumed: bool,
    /// The network of the peer links (real TCP, or turmoil's simulated one).
    network: Network,
    /// The handshake's nonces (and this run's number) come from here.
    entropy: Entropy,
}

/// The agents engine sends on the same peer links (see [`crate::agents::Net`]).
impl crate::agents::Net for Shared {
    fn id(&self) -> u16 {
        self.id
    }
    fn n(&self) -> usize {
        self.n
    }
    fn send(&self, peer: u16, frame: crate::agents::AgentFrame) -> bool {
        let Some(Some(p)) = self.peers.get(usize::from(peer)) else {
            return false;
        };
        let bytes = Bytes::from(wire::encode(&wire::Payload::Agents(Box::new(frame))));
        let ok = p.tx.send(bytes).is_ok();
        if ok {
            p.sent.fetch_add(1, Relaxed);
            self.counters.frames_sent.fetch_add(1, Relaxed);
            self.counters.sent_by_kind[AGENTS_KIND].fetch_add(1, Relaxed);
        }
        ok
    }
    fn link(&self, peer: u16) -> crate::agents::Link {
        match self.peers.get(usize::from(peer)) {
            Some(Some(p)) => match p.refused() {
                Some(reason) => crate::agents::Link::Gone(reason),
                None if p.connected.load(Relaxed) => crate::agents::Link::Up,
                None => crate::agents::Link::Down,
            },
            _ => crate::agents::Link::Gone(format!("node {peer} is not in the cluster")),
        }
    }
}

impl Shared {
    /// Count a rejected connection; returns the count (warnings are logged only when it
    /// is a power of two, so a flood of bad connections costs a few log lines).
    fn reject(&self) -> u64 {
        self.counters.rejected_connections.fetch_add(1, Relaxed) + 1
    }

    /// Nodes (this one included) that must have let this run in before it grants
    /// anything: a majority.
    fn quorum(&self) -> usize {
        self.n / 2 + 1
    }

    fn disconnected(&self) -> Vec<u16> {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Some(p) if !p.connected.load(Relaxed) => Some(i as u16),
                _ => None,
            })
            .collect()
    }
}

/// A running node. [`Node::shutdown`] hands the released locks over and stops every task;
/// dropping the node stops every task at once, so a release that had not been sent yet is
/// lost and the tokens this node holds stay with it (other nodes wait for them until a
/// recovery, `docs/faults.md`). The guards it handed out then release nothing (the node is
/// gone).
pub struct Node {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Cmd>,
    tasks: JoinSet<()>,
    client: Option<tokio::task::JoinHandle<()>>,
    session: Option<lease::Session>,
    /// The configuration this run started from, with the addresses it bound (a new run
    /// started by [`Node::rejoin`] binds the same ones).
    config: Config,
    /// The lock on `state_dir/lock` ([`lock_state_dir`]), held until the node is dropped:
    /// after a suspend, once its file is written.
    _state_lock: Option<std::fs::File>,
}

/// How long a start waits for another process to let go of its `state_dir`.
const STATE_DIR_WAIT: Duration = Duration::from_secs(20);

/// Locks `dir/lock` for this process (an advisory lock the system drops when the process
/// exits), waiting at most [`STATE_DIR_WAIT`] for the process that holds it: the node's
/// previous run stopping with SIGTERM writes its suspended run there until it exits, and
/// a start before that would find no snapshot and come up as a new run, which the cluster
/// refuses. `Err`: one line.
async fn lock_state_dir(dir: &std::path::Path, id: u16) -> std::io::Result<std::fs::File> {
    let file = dir.join("lock");
    let failed = |what: &str, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("cannot {what} {}: {e}", file.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| failed("create the directory of", e))?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&file)
        .map_err(|e| failed("open", e))?;
    let start = Instant::now();
    let mut told = false;
    loop {
        if crate::proc::try_lock_exclusive(&f).map_err(|e| failed("lock", e))? {
            return Ok(f);
        }
        if start.elapsed() >= STATE_DIR_WAIT {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "{} is locked by another process for {STATE_DIR_WAIT:?}: is another \
                     hilock node with id {id} running?",
                    file.display()
                ),
            ));
        }
        if !told {
            told = true;
            tracing::warn!(
                "{} is locked by another process (this node's previous run still \
                 stopping?): waiting for it, at most {STATE_DIR_WAIT:?}",
                file.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.shared.id)
            .field("cluster", &self.shared.cluster)
            .field("listen", &self.shared.listen)
            .finish()
    }
}

/// The one line for a peer address the node cannot listen on (`again`: "" or " again"):
/// in use, it is most likely taken by a node of the same id that runs already.
fn listen_failed(config: &Config, e: std::io::Error, again: &str) -> std::io::Error {
    let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(" (is another hilock node with id {} running?)", config.id)
    } else {
        String::new()
    };
    std::io::Error::new(
        e.kind(),
        format!("cannot listen on {}{again}: {e}{hint}", config.listen),
    )
}

impl Node {
    /// Start a node: listen on `config.listen`, dial every peer, serve the client socket
    /// if one is configured.
    pub async fn start(config: Config) -> std::io::Result<Node> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| listen_failed(&config, e, ""))?;
        Self::start_on(config, listener).await
    }

    /// Start a node on a listener bound already (e.g. to port 0).
    pub async fn start_on(config: Config, listener: TcpListener) -> std::io::Result<Node> {
        Self::start_with(
            config,
            Listener::Tcp(listener),
            Entropy::os(),
            lease::Join::default(),
            Arc::default(),
        )
        .await
    }

    /// Start a node inside a turmoil simulation (feature `sim`): its peer links run over
    /// turmoil's simulated TCP (listening on `config.listen`, which must be an unspecified
    /// address such as `0.0.0.0:PORT`: turmoil binds no other), its clock is the
    /// simulation's, and its
    /// run number and handshake nonces come from a generator seeded with `seed` — so that
    /// the same seed replays the same run. Static membership only; neither the metrics
    /// endpoint nor the client socket is served (they are real sockets).
    #[cfg(feature = "sim")]
    pub async fn start_sim(config: Config, seed: u64) -> std::io::Result<Node> {
        if !matches!(config.membership, crate::config::Membership::Static) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "Node::start_sim runs static membership only (Node::start_sim_leased: etcd's)",
            ));
        }
        Self::start_sim_on(config, seed, lease::Join::default()).await
    }

    /// [`Node::start_sim`] with a lease: the node joins `etcd`, the simulation's stand-in
    /// for etcd ([`crate::leases::sim::Etcd`]), with the lease TTL and grace of its
    /// `membership = "etcd"` configuration (the endpoints are not used, `etcd_recovery`
    /// is refused), and runs the lease path of a node with etcd membership
    /// (`token/lease.rs`): its lease is [`NodeLease::Valid`] while its keep-alive renews it,
    /// it is lost for good when a renewal does not come back within the local lease, and a
    /// peer whose member key the stand-in deletes is gone ([`Error::PeerGone`]).
    #[cfg(feature = "sim")]
    pub async fn start_sim_leased(
        config: Config,
        seed: u64,
        etcd: crate::leases::sim::Etcd,
    ) -> std::io::Result<Node> {
        Self::start_sim_on(config, seed, lease::Join { sim: Some(etcd) }).await
    }

    #[cfg(feature = "sim")]
    async fn start_sim_on(config: Config, seed: u64, join: lease::Join) -> std::io::Result<Node> {
        if config.metrics.is_some() || config.client.is_some() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a simulated node serves neither metrics nor a client socket",
            ));
        }
        let listener = turmoil::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
            })?;
        let resets = Arc::new(transport::sim::Resets::default());
        Self::start_with(
            config,
            Listener::Sim(listener, resets),
            Entropy::seeded(seed),
            join,
            Arc::default(),
        )
        .await
    }

    /// Simulation (feature `sim`): reset this node's open connections with the node at
    /// `peer` (both directions), as a network or a peer's kernel resetting them would; both
    /// ends see an error and the links reconnect. Returns how many were reset (none for a
    /// node not started with [`Node::start_sim`]).
    #[cfg(feature = "sim")]
    pub fn sim_reset(&self, peer: std::net::IpAddr) -> usize {
        match &self.shared.network {
            Network::Sim(resets) => resets.reset(peer),
            Network::Tcp => 0,
        }
    }

    async fn start_with(
        config: Config,
        listener: Listener,
        entropy: Entropy,
        join: lease::Join,
        counters: Arc<Counters>,
    ) -> std::io::Result<Node> {
        config
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listen = listener.local_addr()?;
        let mut config = config;
        config.listen = listen;
        let metrics = match config.metrics {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    if e.kind() == std::io::ErrorKind::AddrInUse {
                        format!(
                            "cannot listen for metrics on {addr} (metrics_addr): {e} (nodes \
                             on one host that share a configuration file need their own \
                             port each: give \"127.0.0.1:0\" for a free one, shown by \
                             hilock status)"
                        )
                    } else {
                        format!("cannot listen for metrics on {addr} (metrics_addr): {e}")
                    },
                )
            })?),
            None => None,
        };
        let metrics_addr = match &metrics {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        // One process at a time uses the state directory: a previous run still writing
        // its suspended run is waited for.
        let state_lock = match &config.state_dir {
            Some(dir) => Some(lock_state_dir(dir, config.id).await?),
            None => None,
        };
        // A suspended run of this node comes back (`suspend`): its file is deleted before
        // anything else happens.
        let resumed = match &config.state_dir {
            Some(dir) => suspend::take(dir, &suspend::Identity::of(&config)).map_err(bad)?,
            None => None,
        };
        let mut tasks = JoinSet::new();
        let mut peers = Vec::new();
        let mut dialed = Vec::new();
        for n in &config.nodes {
            if n.id == config.id {
                peers.push(None);
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let saved = resumed
                .as_ref()
                .and_then(|(s, _)| s.links.iter().find(|l| l.peer == n.id))
                .cloned()
                .unwrap_or_default();
            let mut out = Outbox::default();
            if resumed.is_some() {
                out.next_seq = saved.next_seq.max(1);
                for (seq, b) in &saved.unacked {
                    let b = crate::client::unhex(b).map_err(bad)?;
                    out.unacked.push_back((*seq, Bytes::from(b)));
                }
            }
            let sent = out.next_seq - 1;
            let acked = out.unacked.front().map_or(sent, |(s, _)| s - 1);
            peers.push(Some(PeerLink {
                addr: n.addr,
                connected: AtomicBool::new(false),
                incoming: AtomicBool::new(false),
                sent: AtomicU64::new(sent),
                acked: AtomicU64::new(acked),
                received: AtomicU64::new(0),
                resent: AtomicU64::new(0),
                duplicates: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                welcomed: AtomicBool::new(false),
                silent: AtomicBool::new(false),
                inbound: std::sync::Mutex::new(Inbound {
                    incarnation: saved.peer_run,
                    delivered: saved.delivered,
                    conn: 0,
                }),
                refused: std::sync::Mutex::new(saved.refused),
                down_since: std::sync::Mutex::new(None),
                last_failure: std::sync::Mutex::new(None),
                tx,
                rx: tokio::sync::Mutex::new(rx),
                out: std::sync::Mutex::new(out),
                heard: std::sync::Mutex::new(None),
                pings: AtomicU64::new(0),
                ping_now: tokio::sync::Notify::new(),
                pong: tokio::sync::watch::Sender::new((0, 0)),
                run_gen: AtomicU64::new(0),
                connections: AtomicU64::new(0),
            }));
            dialed.push(n.id);
        }
        let state = match &config.state_dir {
            Some(dir) if resumed.is_some() => {
                // The run's generation is agreed already: no offer.
                resumed.as_ref().map(|(s, _)| (dir.clone(), s.generation))
            }
            Some(dir) => {
                let last = generation::read(dir).map_err(bad)?;
                let offer = last.checked_add(1).ok_or_else(|| {
                    bad(format!(
                        "{}: generation {last} is the last one",
                        dir.display()
                    ))
                })?;
                // The first message of this run on every link.
                let bytes = Bytes::from(wire::encode(&wire::Payload::Generation(offer)));
                for p in peers.iter().flatten() {
                    if p.tx.send(bytes.clone()).is_ok() {
                        p.sent.fetch_add(1, Relaxed);
                    }
                }
                info!(
                    state_dir = %dir.display(),
                    last,
                    offer,
                    "offering a generation; serving once every node has offered one"
                );
                Some((dir.clone(), offer))
            }
            None => None,
        };
        config.metrics = metrics_addr;
        let (agents_inbox, mut agents_rx) =
            crate::agents::inbox(config.id, config.n(), config.state_dir.is_some());
        let incarnation = match &resumed {
            Some((s, _)) => s.run,
            None => entropy.run(),
        };
        let (session, first_lease) = lease::Session::start(&config, incarnation, join).await?;
        let shared = Arc::new(Shared {
            id: config.id,
            cluster: config.cluster.clone(),
            secret: config.secret.clone(),
            n: config.n(),
            request_timeout: config.request_timeout,
            listen,
            peers,
            counters,
            stopping: tokio::sync::watch::Sender::new(false),
            incarnation,
            welcomed: std::sync::atomic::AtomicUsize::new(0),
            tickets: AtomicU64::new(0),
            agents: agents_inbox,
            lease: tokio::sync::watch::Sender::new(first_lease),
            gone: tokio::sync::watch::Sender::new(Default::default()),
            nudge: tokio::sync::Notify::new(),
            recovery: session.recovery(),
            etcd_runs: std::sync::Mutex::new(Default::default()),
            unread: std::sync::atomic::AtomicUsize::new(0),
            held_back_max: config.etcd_held_back_max,
            metrics_addr,
            state,
            suspending: AtomicBool::new(false),
            resumed: resumed.is_some(),
            network: listener.network(),
            entropy,
        });
        agents_rx.recovery = shared.recovery;
        tasks.spawn(crate::agents::run(shared.clone(), agents_rx));
        let (tx, rx) = mpsc::unbounded_channel();
        let rejoining = session.rejoining();
        if rejoining {
            info!(
                id = config.id,
                "an earlier run of this node joined the cluster: this run rejoins (nothing \
                 held; no kernel step until an epoch lets it in)"
            );
        }
        let recorder = match &config.record {
            Some(_) if resumed.is_some() => {
                tracing::warn!(
                    "a resumed run records no trace (`record`): a trace starts with its run"
                );
                None
            }
            Some(file) => Some(trace::Recorder::open(
                file,
                config.id,
                incarnation,
                config.n(),
            )?),
            None => None,
        };
        let core = match resumed {
            Some((s, file)) => {
                info!(
                    run = format!("{incarnation:016x}"),
                    generation = s.generation,
                    "resumed from {}: {} locks, {} unacknowledged messages to resend (the file is deleted)",
                    file.display(),
                    s.locks.len(),
                    s.unacked()
                );
                Core::resume(shared.clone(), s.generation, s.locks)
            }
            None => Core::new(shared.clone(), rejoining, recorder),
        };
        tasks.spawn(core.run(rx));
        session.follow(&shared, &tx, &mut tasks);
        for peer in dialed {
            tasks.spawn(dial(shared.clone(), peer, tx.clone()));
        }
        tasks.spawn(accept(shared.clone(), listener, tx.clone()));
        let mut node = Node {
            shared,
            tx,
            tasks,
            client: None,
            session: Some(session),
            config: config.clone(),
            _state_lock: state_lock,
        };
        if let Some(l) = metrics {
            if let Some(addr) = node.shared.metrics_addr {
                info!(%addr, "serving metrics at http://{addr}/metrics");
            }
            node.tasks.spawn(metrics::serve(node.handle(), l));
        }
        if let Some(path) = &config.client {
            let l = match crate::client::bind(path) {
                Ok(l) => l,
                Err(e) => {
                    // Joined already (etcd membership): leave at once, so that no member
                    // key stays behind for the next start to wait out.
                    node.shutdown().await;
                    return Err(e);
                }
            };
            let h = node.handle();
            node.client = Some(tokio::spawn(crate::client::serve(
                h,
                l,
                path.clone(),
                config.max_clients,
            )));
        }
        info!(
            id = config.id,
            cluster = %config.cluster,
            %listen,
            nodes = config.n(),
            "node started"
        );
        Ok(node)
    }

    /// A cheap handle for taking locks from other tasks.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
            tx: self.tx.clone(),
        }
    }

    /// This node's id.
    pub fn id(&self) -> u16 {
        self.shared.id
    }

    /// The address this node listens on for peers.
    pub fn listen_addr(&self) -> SocketAddr {
        self.shared.listen
    }

    /// Take `path` in `mode` (and the intention mode on its ancestors), with the node's
    /// default timeout and priority 0.
    pub async fn lock(&self, path: &str, mode: Mode) -> Result<Guard, Error> {
        self.handle().lock(path, mode).await
    }

    /// Try-lock: take `path` in `mode` only if nothing has to wait, else
    /// [`Error::WouldBlock`] (see [`Handle::try_lock_with`]).
    pub async fn try_lock(&self, path: &str, mode: Mode) -> Result<Guard, Error> {
        self.handle().try_lock(path, mode).await
    }

    /// Try-lock with options (see [`Handle::try_lock_with`]).
    pub async fn try_lock_with(
        &self,
        path: &str,
        mode: Mode,
        opts: Options,
    ) -> Result<Guard, Error> {
        self.handle().try_lock_with(path, mode, opts).await
    }

    /// Take `path` in `mode` with options.
    pub async fn lock_with(&self, path: &str, mode: Mode, opts: Options) -> Result<Guard, Error> {
        self.handle().lock_with(path, mode, opts).await
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.handle().stats()
    }

    /// Locks, peers and counters.
    pub async fn status(&self) -> Result<Status, Error> {
        self.handle().status().await
    }

    /// Resolves when this run's etcd lease is lost (membership through etcd,
    /// `docs/faults.md`, "An etcd stall"), with the reason; never with static membership.
    /// By then the node grants nothing more and its client socket's holders have been told
    /// their locks are lost (their commands are killed). What is left to do is
    /// [`Node::etcd_answers`] and [`Node::rejoin`] (with `etcd_recovery`), or
    /// [`Node::shutdown`].
    pub async fn lease_lost(&self) -> String {
        let mut rx = self.shared.lease.subscribe();
        loop {
            if let NodeLease::Lost { reason } = &*rx.borrow_and_update() {
                return reason.clone();
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// `etcd_recovery` is on: a run that lost its lease can be replaced by a new run of
    /// this node in this process ([`Node::rejoin`]).
    pub fn recovery(&self) -> bool {
        self.shared.recovery
    }

    /// After [`Node::lease_lost`]: waits until etcd answers again, at most `within`
    /// (`etcd_rejoin_timeout_ms`), and revokes this run's lost lease there, so that its
    /// member key goes at once and a new run of this node can join without waiting for
    /// the TTL. Meanwhile this run keeps refusing every request (naming its lease) and
    /// answering `hilock status`. `Err` (one line) if etcd did not answer in time, or
    /// the membership is static.
    pub async fn etcd_answers(&self, within: Duration) -> Result<(), String> {
        let lease = self
            .session
            .as_ref()
            .and_then(|s| s.lease_id())
            .ok_or("static membership: there is no etcd lease")?;
        lease::etcd_answers(&self.config, lease, within).await
    }

    /// Replaces this run, whose lease is lost, by a new run of the node in this process:
    /// this run stops ([`Node::shutdown`], without leaving: its lease is gone), and a new
    /// one starts from the same configuration and addresses — a new incarnation that joins
    /// through etcd exactly as a restarted process does (an earlier run of its id joined:
    /// with `etcd_recovery` it rejoins holding nothing, and the epoch that lets it in
    /// regenerates its tokens with fences above every earlier one; `docs/faults.md`, "With
    /// etcd recovery"). Call it once [`Node::etcd_answers`] said etcd answers.
    pub async fn rejoin(mut self) -> std::io::Result<Node> {
        let config = self.config.clone();
        let counters = self.shared.counters.clone();
        // The lease is lost: nothing to revoke on the way out (etcd_answers did).
        self.session = None;
        self.shutdown().await;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| listen_failed(&config, e, " again"))?;
        Self::start_with(
            config,
            Listener::Tcp(listener),
            Entropy::os(),
            lease::Join::default(),
            counters,
        )
        .await
    }

    /// Stop every task of the node and close its sockets. Clients of the client socket
    /// that hold a lock are told first that it is lost, the commands they registered are
    /// killed, and their locks are released; the messages that hand the released locks
    /// over to waiting nodes are sent and acknowledged before the node's connections close
    /// (for at most [`HAND_OVER`]).
    ///
    /// Nothing else is handed over. With static membership the protocol cannot take a
    /// token back from a node that does not come back, so these stay with the stopped
    /// node and their paths cannot be locked by anyone (with etcd recovery, the next
    /// epoch regenerates them):
    /// - the locks of in-process [`Guard`]s still alive (a guard's holder may still be in
    ///   its critical section, so the node does not release under it): drop them first;
    /// - every token at this node, including that of every path whose token starts here
    ///   (`SHA-256(path) mod n`, [`crate::wire::initial_holder`]) and that nobody used yet;
    /// - the grants of this node's requests still waiting: they arrive at a stopped node.
    ///
    /// [`Node::suspend`] (with `state_dir`) stops a node so that the cluster gets all of
    /// it back when it starts again.
    pub async fn shutdown(mut self) {
        self.hand_over().await;
        self.finish().await;
    }

    /// The first half of a stop: clients of the client socket that hold a lock are told
    /// it is lost, their commands killed and their locks released, and the messages that
    /// hand the released locks over are sent and acknowledged (for at most
    /// [`HAND_OVER`]).
    async fn hand_over(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(c) = self.client.take() {
            let _ = c.await;
        }
        let deadline = Instant::now() + HAND_OVER;
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Cmd::Flush { reply }).is_ok() {
            let _ = timeout_at(deadline, rx).await;
        }
        // Every release is in the kernel now and its messages in the peers' queues: wait
        // for the peers that are up to acknowledge them.
        loop {
            let pending = self.shared.peers.iter().flatten().any(|p| {
                p.connected.load(Relaxed)
                    && p.refused().is_none()
                    && p.acked.load(Relaxed) < p.sent.load(Relaxed)
            });
            if !pending || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The second half of a stop: every task ends, the sockets close, an etcd lease is
    /// given up.
    async fn finish(mut self) {
        self.tasks.shutdown().await;
        // A lost lease is not revoked again (etcd may not answer; `etcd_answers` revoked
        // it where etcd did).
        let lost = matches!(*self.shared.lease.borrow(), NodeLease::Lost { .. });
        if let Some(s) = self.session.take().filter(|_| !lost) {
            s.leave().await;
        }
    }

    /// Stops the node so that its next start with the same configuration resumes this
    /// run (static membership with [`Config::state_dir`]; `docs/faults.md`, "Suspend and
    /// resume"). As [`Node::shutdown`], the client socket's holders lose their locks and
    /// the released locks are handed over; then every local caller's request is withdrawn
    /// (`Input::Cancel`), the peer connections deliver and acknowledge nothing more, and
    /// the run — its incarnation, generation, every lock's kernel site and each link's
    /// channel state with the messages not acknowledged yet — is written to
    /// `state_dir/suspended`. To the peers this is a pause of a node they know: the
    /// resumed run is let in, and the messages of either side not acknowledged are
    /// resent. Returns the one line to log: what was saved and where.
    ///
    /// `Err` (one line) when this run cannot be resumed, after a stop like
    /// [`Node::shutdown`] (the next start is a new run, refused as before): no
    /// `state_dir`, membership through etcd, `record` on, the run is refused or has not agreed on its
    /// generation yet, or the file cannot be written.
    pub async fn suspend(mut self) -> Result<String, String> {
        self.hand_over().await;
        let why_not = if self.shared.state.is_none() {
            Some("no state_dir".to_string())
        } else if !matches!(*self.shared.lease.borrow(), NodeLease::Static) {
            Some("membership through etcd".into())
        } else if self.config.record.is_some() {
            Some("`record` is on (a trace starts with its run)".into())
        } else {
            None
        };
        if let Some(why) = why_not {
            self.finish().await;
            return Err(format!(
                "not suspended ({why}): the next start is a new run"
            ));
        }
        // Nothing is delivered or acknowledged from here on. Every delivery before this
        // took the link's inbound lock, and its command is in the core's queue ahead of
        // the suspend below: the saved state covers every acknowledged message.
        self.shared.suspending.store(true, Relaxed);
        for p in self.shared.peers.iter().flatten() {
            drop(p.inbound.lock().expect("inbound lock"));
        }
        let (reply, rx) = oneshot::channel();
        let core = match self.tx.send(Cmd::Suspend { reply }) {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err("the core has stopped".into())),
            Err(_) => Err("the core has stopped".into()),
        };
        // The senders stop; what they had not numbered yet is numbered below.
        self.tasks.shutdown().await;
        // With state_dir the agents engine is off (`TxnError::StateDir`): it has no state
        // to save.
        let r = match core {
            Ok((generation, locks)) => self.save(generation, locks),
            Err(why) => Err(why),
        };
        self.finish().await;
        r.map_err(|why| format!("not suspended ({why}): the next start is a new run"))
    }

    /// Writes the suspended run (`Node::suspend`); the tasks have stopped.
    fn save(&self, generation: u32, locks: Vec<suspend::SavedLock>) -> Result<String, String> {
        let Some((dir, _)) = &self.shared.state else {
            return Err("no state_dir".into());
        };
        let mut links = Vec::new();
        for (i, p) in self.shared.peers.iter().enumerate() {
            let Some(p) = p else { continue };
            let mut out = p.outbox();
            if let Ok(mut rx) = p.rx.try_lock() {
                while let Ok(b) = rx.try_recv() {
                    let seq = out.next_seq;
                    out.next_seq += 1;
                    out.unacked.push_back((seq, b));
                }
            } else {
                return Err(format!("the link to node {i} is still in use"));
            }
            let inb = p.inbound.lock().expect("inbound lock");
            links.push(suspend::SavedLink {
                peer: i as u16,
                next_seq: out.next_seq,
                unacked: out
                    .unacked
                    .iter()
                    .map(|(s, b)| (*s, crate::client::hex(b)))
                    .collect(),
                peer_run: inb.incarnation,
                delivered: inb.delivered,
                refused: p.refused(),
            });
        }
        let snapshot = suspend::Snapshot {
            identity: suspend::Identity::of(&self.config),
            run: self.shared.incarnation,
            generation,
            locks,
            links,
        };
        let file = suspend::write(dir, &snapshot)?;
        Ok(format!(
            "suspended: {} locks, {} unacknowledged messages kept in {}; start again with the \
             same config to resume",
            snapshot.locks.len(),
            snapshot.unacked(),
            file.display()
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            c.abort();
        }
    }
}

/// A handle to a node's lock API (cheap to clone, `Send`).
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Cmd>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.shared.id)
            .finish()
    }
}

impl Handle {
    /// The node's counters (the client socket and the metrics endpoint add to them).
    pub(crate) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// The agents engine's inbox ([`crate::agents`]).
    pub(crate) fn agents(&self) -> &crate::agents::Inbox {
        &self.shared.agents
    }

    /// Becomes `true` when the node stops.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.stopping.subscribe()
    }

    /// This node's lease (membership through etcd; [`NodeLease::Static`] otherwise). A
    /// holder of a [`Guard`] must stop using what it guards when the lease is
    /// [`NodeLease::Lost`] or its `until` has passed: the lock is no longer its own.
    pub fn lease(&self) -> tokio::sync::watch::Receiver<NodeLease> {
        self.shared.lease.subscribe()
    }

    /// `Err` if this node's lease does not let it grant now.
    fn lease_check(&self) -> Result<(), Error> {
        self.shared
            .lease
            .borrow()
            .check(Instant::now())
            .map_err(|reason| Error::Refused { reason })
    }

    /// The error for a request the core failed because `peer` is refused or gone.
    fn peer_error(&self, path: String, peer: u16) -> Error {
        match self.shared.gone.borrow().get(&peer) {
            Some(reason) => Error::PeerGone {
                path,
                peer,
                reason: reason.clone(),
            },
            None => Error::PeerRestarted { path, peer },
        }
    }

    /// If the lock `path` waits on a peer that left the cluster — its token is not here
    /// and this node's parent for it (where its requests go) is that peer — the peer and
    /// how it left. Asks the core for this path's parent only while some peer is gone.
    async fn waits_on_gone(&self, path: &str) -> Option<(u16, String)> {
        if self.shared.gone.borrow().is_empty() {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Parent {
                path: path.to_string(),
                reply,
            })
            .ok()?;
        let parent = rx.await.ok()??;
        let gone = self.shared.gone.borrow();
        gone.get(&parent).map(|r| (parent, r.clone()))
    }

    /// See [`Node::lock`].
    pub async fn lock(&self, path: &str, mode: Mode) -> Result<Guard, Error> {
        self.lock_with(path, mode, Options::default()).await
    }

    /// Try-lock (`spec/SPEC.md` 1.12): take `path` in `mode` (and the intention mode on its
    /// ancestors, outermost first) only if no level has to wait. A level is taken at once
    /// if a local hold covers it, or by a kernel `TryAcquire` that is granted; if a local
    /// caller would have to wait for it, or the kernel answers `WouldBlock`, the ancestors
    /// already taken are released and the answer is [`Error::WouldBlock`]: nothing of the
    /// request stays queued at this node or any other, and nothing is granted later. At a
    /// node that grants nothing yet (not let in by a majority, an epoch being installed)
    /// the answer is [`Error::NotServing`], not "busy".
    /// `opts.timeout` bounds the wait for the answers (a try that meets a peer that does
    /// not answer times out like a lock).
    pub async fn try_lock_with(
        &self,
        path: &str,
        mode: Mode,
        opts: Options,
    ) -> Result<Guard, Error> {
        let r = self.acquire_chain(path, mode, opts, true).await;
        if let Err(Error::WouldBlock { .. }) = &r {
            self.shared.counters.would_block.fetch_add(1, Relaxed);
        }
        r
    }

    /// [`Handle::try_lock_with`] with the default options.
    pub async fn try_lock(&self, path: &str, mode: Mode) -> Result<Guard, Error> {
        self.try_lock_with(path, mode, Options::default()).await
    }

    /// See [`Node::lock_with`]. The ancestors are taken first, outermost first, each in
    /// [`intention`]`(mode)`; the timeout covers the whole hierarchy. On any error the
    /// locks taken so far are released.
    pub async fn lock_with(&self, path: &str, mode: Mode, opts: Options) -> Result<Guard, Error> {
        self.acquire_chain(path, mode, opts, false).await
    }

    /// [`Handle::lock_with`] (`try_lock` false) or [`Handle::try_lock_with`] (true).
    async fn acquire_chain(
        &self,
        path: &str,
        mode: Mode,
        opts: Options,
        try_lock: bool,
    ) -> Result<Guard, Error> {
        check_path(path).map_err(Error::InvalidPath)?;
        if mode == Mode::Phi {
            return Err(Error::InvalidMode);
        }
        self.lease_check()?;
        let wait = opts.timeout.unwrap_or(self.shared.request_timeout);
        let start = Instant::now();
        // A timeout too long for the clock (`Duration::MAX`: "wait as long as it takes")
        // waits about 30 years instead of overflowing.
        let deadline = start
            .checked_add(wait)
            .unwrap_or_else(|| start + Duration::from_secs(30 * 365 * 86_400));
        let mut guard = Guard {
            handle: self.clone(),
            held: Vec::new(),
        };
        let chain = ancestors(path)
            .into_iter()
            .map(|a| (a, intention(mode)))
            .chain(std::iter::once((path, mode)));
        for (p, m) in chain {
            let (reply, mut rx) = oneshot::channel();
            let ticket = self.shared.tickets.fetch_add(1, Relaxed) + 1;
            self.tx
                .send(Cmd::Acquire {
                    path: p.to_string(),
                    mode: m,
                    prio: opts.priority,
                    nested: opts.nested,
                    try_lock,
                    ticket,
                    reply,
                })
                .map_err(|_| Error::Stopped)?;
            // Until this level is answered, giving up (a timeout, an error below, or the
            // future dropped) cancels it at the node (`spec/SPEC.md` 1.13).
            let mut pending = CancelOnDrop {
                tx: &self.tx,
                path: p,
                ticket,
                armed: true,
            };
            // Membership through etcd: a request that waits on a peer that left fails
            // (now, or as soon as a peer it waits on leaves), naming the peer.
            let answer = if matches!(*self.shared.lease.borrow(), NodeLease::Static) {
                timeout_at(deadline, &mut rx).await
            } else if let Ok(a) =
                timeout_at(deadline.min(Instant::now() + FAST_GRANT), &mut rx).await
            {
                // Answered at once (the token local, a copy at hand): no need to watch the
                // gone peers, whose subscription costs a waker per request.
                Ok(a)
            } else {
                let mut gone = self.shared.gone.subscribe();
                loop {
                    gone.borrow_and_update();
                    if let Some((peer, reason)) = self.waits_on_gone(p).await {
                        // Closed, the request is abandoned (as on a timeout: the node
                        // cancels it); a grant sent before the close is taken, not lost.
                        rx.close();
                        match rx.try_recv() {
                            Ok(granted) => break Ok(Ok(granted)),
                            Err(_) => {
                                return Err(Error::PeerGone {
                                    path: p.to_string(),
                                    peer,
                                    reason,
                                })
                            }
                        }
                    }
                    tokio::select! {
                        a = timeout_at(deadline, &mut rx) => break a,
                        // A peer left (the sender lives as long as the node's shared state).
                        _ = gone.changed() => {}
                    }
                }
            };
            if let Ok(Ok(_)) = &answer {
                // Answered by the node: granted, or refused with nothing left pending.
                pending.armed = false;
            }
            match answer {
                Ok(Ok(Ok((hold, fence)))) => guard.held.push((p.to_string(), m, hold, fence)),
                Ok(Ok(Err(Error::PeerRestarted { path, peer }))) => {
                    return Err(self.peer_error(path, peer))
                }
                // A try refused as busy where the lock waits on a peer that left (an earlier
                // request of this node stranded there: etcd membership without recovery):
                // that peer is why, as for a lock request, and no try will ever succeed.
                Ok(Ok(Err(Error::WouldBlock { path, mode }))) => {
                    return Err(match self.waits_on_gone(&path).await {
                        Some((peer, reason)) => Error::PeerGone { path, peer, reason },
                        None => Error::WouldBlock { path, mode },
                    })
                }
                Ok(Ok(Err(e))) => return Err(e),
                Ok(Err(_)) => return Err(Error::Stopped),
                // Closing `rx` (after asking where the request stands) marks the request
                // abandoned, and `pending`'s drop has the node cancel it in the kernel
                // (`Input::Cancel`): it is never granted to a caller afterwards. A grant
                // that arrived in the meantime (while `explain` waited) is put in the
                // guard, whose drop releases it, instead of being dropped with `rx` and
                // left held.
                Err(_) => {
                    self.shared.counters.timeouts.fetch_add(1, Relaxed);
                    let after = start.elapsed();
                    let waiting = self.explain(p, ticket).await;
                    rx.close();
                    if let Ok(Ok((hold, fence))) = rx.try_recv() {
                        pending.armed = false;
                        guard.held.push((p.to_string(), m, hold, fence));
                    }
                    return Err(Error::Timeout {
                        path: p.to_string(),
                        mode: m,
                        after,
                        disconnected: self.shared.disconnected(),
                        recovers: self.shared.recovery,
                        waiting,
                    });
                }
            }
        }
        // A grant that comes back after the lease ended (e.g. it arrived while this node
        // was paused) is released, not handed out.
        self.lease_check()?;
        Ok(guard)
    }

    /// Where request `ticket` for `path` stands, as the core sees it (empty if the core
    /// does not answer within 100 ms).
    async fn explain(&self, path: &str, ticket: u64) -> String {
        let (reply, rx) = oneshot::channel();
        let cmd = Cmd::Explain {
            path: path.to_string(),
            ticket,
            reply,
        };
        if self.tx.send(cmd).is_err() {
            return String::new();
        }
        match timeout(Duration::from_millis(100), rx).await {
            Ok(Ok(s)) => s,
            _ => String::new(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            frames_sent: c.frames_sent.load(Relaxed),
            frames_received: c.frames_received.load(Relaxed),
            kernel_requests: c.kernel_requests.load(Relaxed),
            grants: c.grants.load(Relaxed),
            rejected_connections: c.rejected_connections.load(Relaxed),
            kernel_rejections: c.kernel_rejections.load(Relaxed),
            abandoned_grants: c.abandoned_grants.load(Relaxed),
            stale_epoch: c.stale_epoch.load(Relaxed),
            held_back_full: c.held_back_full.load(Relaxed),
            waits: c.waits.load(Relaxed),
            timeouts: c.timeouts.load(Relaxed),
            would_block: c.would_block.load(Relaxed),
            cancels: c.cancels.load(Relaxed),
            clients_refused: c.clients_refused.load(Relaxed),
            cut_connections: c.cut_connections.load(Relaxed),
        }
    }
}

/// Held locks: the ancestors in their intention mode, then the requested path. Dropping
/// the guard releases them, innermost first.
pub struct Guard {
    handle: Handle,
    /// Path, mode, hold id, fencing token; outermost first.
    held: Vec<(String, Mode, u64, u64)>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.held.iter().map(|(p, m, _, f)| format!("{p}:{m}#{f}")))
            .finish()
    }
}

impl Guard {
    /// The requested path.
    pub fn path(&self) -> &str {
        self.held.last().map(|h| h.0.as_str()).unwrap_or("")
    }

    /// The mode held on the requested path.
    pub fn mode(&self) -> Mode {
        self.held.last().map(|h| h.1).unwrap_or(Mode::Phi)
    }

    /// The fencing token of this hold of the requested path: of two holds of one path in
    /// conflicting modes anywhere in the cluster, the later has the larger fence (a
    /// counter that travels with the lock's token; [`hilock_kernel::LockNode::fence`]).
    /// Pass it with every write to a storage service, and let the service reject a write
    /// whose fence is lower than the highest it has seen for that path: a holder that
    /// was paused (GC, SIGSTOP) or cut off past the end of its hold is then refused
    /// instead of overwriting the work of the next holder. After [`Guard::upgrade`] it is
    /// the fence of the W hold.
    pub fn fence(&self) -> u64 {
        self.held.last().map(|h| h.3).unwrap_or(0)
    }

    /// Every lock the guard holds with its mode and fencing token, outermost first.
    pub fn fenced_locks(&self) -> impl Iterator<Item = (&str, Mode, u64)> {
        self.held.iter().map(|(p, m, _, f)| (p.as_str(), *m, *f))
    }

    /// Every lock the guard holds, outermost first.
    pub fn locks(&self) -> impl Iterator<Item = (&str, Mode)> {
        self.held.iter().map(|(p, m, _, _)| (p.as_str(), *m))
    }

    /// Upgrade U → W (Rule 7) with the node's default timeout. The ancestors already hold
    /// IW, which W needs. On timeout the upgrade stays pending in the protocol and the
    /// guard keeps U: a later `upgrade` waits for that same upgrade; if it completes while
    /// nobody waits for it, the node takes the hold back to U at once (so the guard and
    /// the node agree: readers are admitted beside it again); dropping the guard withdraws
    /// it (`Input::Cancel`, `spec/SPEC.md` 1.13) and releases U at once.
    pub async fn upgrade(&mut self) -> Result<(), Error> {
        let t = self.handle.shared.request_timeout;
        self.upgrade_within(t).await
    }

    /// [`Guard::upgrade`] with an explicit timeout.
    pub async fn upgrade_within(&mut self, wait: Duration) -> Result<(), Error> {
        let Some((path, mode, hold, _)) = self.held.last().cloned() else {
            return Err(Error::Stopped);
        };
        if mode != Mode::U {
            return Err(Error::NotUpgradable { path, mode });
        }
        let (reply, rx) = oneshot::channel();
        self.handle
            .tx
            .send(Cmd::Upgrade {
                path: path.clone(),
                hold,
                reply,
            })
            .map_err(|_| Error::Stopped)?;
        match timeout(wait, rx).await {
            Ok(Ok(Ok(fence))) => {
                if let Some(l) = self.held.last_mut() {
                    l.1 = Mode::W;
                    l.3 = fence;
                }
                Ok(())
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::Stopped),
            Err(_) => {
                self.handle.shared.counters.timeouts.fetch_add(1, Relaxed);
                let waiting = self.handle.explain(&path, 0).await;
                Err(Error::Timeout {
                    path,
                    mode: Mode::W,
                    after: wait,
                    disconnected: self.handle.shared.disconnected(),
                    recovers: self.handle.shared.recovery,
                    waiting,
                })
            }
        }
    }
}

impl Guard {
    /// Waits until another node's request that this guard's hold of the requested path
    /// blocks is waiting (`spec/SPEC.md` 1.16, the DLM's blocking AST), and says which
    /// mode it asks for and at what priority. It resolves at once if the node's kernel
    /// hold of the path was already told about a mode conflicting with this guard's;
    /// otherwise never while nobody conflicts. The kernel tells a hold at most once per
    /// waiting mode, so a holder that wants to give way releases or downgrades
    /// ([`Guard::downgrade`]) rather than polling. Only the requested path is watched (not
    /// the intention modes on its ancestors), and only requests of other nodes (callers on
    /// this node wait in its local queue). [`Error::Stopped`] if the node stops.
    pub async fn blocking(&self) -> Result<Blocked, Error> {
        let Some((path, _, hold, _)) = self.held.last().cloned() else {
            return Err(Error::Stopped);
        };
        let (reply, rx) = oneshot::channel();
        self.handle
            .tx
            .send(Cmd::Blocking { path, hold, reply })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// The lock value block of the requested path (`spec/SPEC.md` 1.15; the DLM's LVB):
    /// the 32 bytes the last W holder wrote before this hold was granted (all zero if none
    /// ever did), or a block that is not valid ([`ValueBlock::get`] is `None`, the DLM's
    /// `IVVALBLK`) when a recovery regenerated the lock's token and nobody has written
    /// since. Read from the node's kernel site at the call.
    pub async fn value(&self) -> Result<ValueBlock, Error> {
        let path = self.path().to_string();
        let (reply, rx) = oneshot::channel();
        self.handle
            .tx
            .send(Cmd::Value {
                path: path.clone(),
                reply,
            })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)??.ok_or(Error::Stopped)
    }

    /// Write the lock value block of the requested path (`Input::SetValue`,
    /// `spec/SPEC.md` 1.15): only a W guard may, [`Error::NotWriter`] otherwise (nothing
    /// changes). The value travels with the lock's token and with every copy granted from
    /// it, so the next holders on every node read it ([`Guard::value`]) once this guard
    /// releases or downgrades. Writing again replaces it.
    pub async fn set_value(&mut self, value: [u8; VALUE_LEN]) -> Result<(), Error> {
        let Some((path, mode, hold, _)) = self.held.last().cloned() else {
            return Err(Error::Stopped);
        };
        if mode != Mode::W {
            return Err(Error::NotWriter { path, mode });
        }
        let (reply, rx) = oneshot::channel();
        self.handle
            .tx
            .send(Cmd::SetValue {
                path,
                hold,
                value,
                reply,
            })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)?
    }

    /// Downgrade the requested path to the weaker `mode` without releasing it
    /// (`Input::Downgrade`, `spec/SPEC.md` 1.14; W → U, R, IW, IR; U → R, IR; R → IR;
    /// IW → IR), then each ancestor to the intention mode of `mode` where that is weaker
    /// (W on `/a/b` under IW on `/a` becomes R under IR). Innermost first, so an ancestor
    /// always covers what is held below it. Answered at once: a downgrade never waits.
    /// The fencing tokens are kept. Requests of other nodes that the weaker modes admit
    /// are granted meanwhile (the kernel serves its queue and tells its parent, Rule 5).
    /// A mode that is not weaker, or a guard whose upgrade is under way, is
    /// [`Error::NotDowngradable`] and changes nothing.
    pub async fn downgrade(&mut self, mode: Mode) -> Result<(), Error> {
        let Some(last) = self.held.len().checked_sub(1) else {
            return Err(Error::Stopped);
        };
        let (path, from) = (self.held[last].0.clone(), self.held[last].1);
        if !from.downgrades_to(mode) {
            return Err(Error::NotDowngradable {
                path,
                mode: from,
                to: mode,
            });
        }
        for i in (0..=last).rev() {
            let to = if i == last { mode } else { intention(mode) };
            let (path, held, hold, _) = self.held[i].clone();
            if !held.downgrades_to(to) {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            self.handle
                .tx
                .send(Cmd::Downgrade {
                    path,
                    hold,
                    mode: to,
                    reply,
                })
                .map_err(|_| Error::Stopped)?;
            rx.await.map_err(|_| Error::Stopped)??;
            self.held[i].1 = to;
        }
        Ok(())
    }

    /// Convert the requested path to `mode` at once or not at all (`Input::Convert` without
    /// `wait`, `spec/SPEC.md` 1.17; the DLM's `LKF_CONVERT | LKF_NOQUEUE`): a weaker mode is
    /// [`Guard::downgrade`]; any other is done only where no waiting is needed, and is
    /// [`Error::WouldBlock`] otherwise, the guard keeping every mode it had and the path
    /// its fence (an ancestor converted and taken back keeps the newer fence of its hold).
    /// The ancestors are converted first, outermost first, to the intention mode of
    /// `mode` where they hold less (R → W on `/a/b` under IR on `/a` makes `/a` IW), then
    /// the path; a refusal at any level takes the levels already converted back. A
    /// level is converted at once where the node's own hold covers it, or where the node
    /// holds the lock's token and no other node holds or waits for a conflicting mode;
    /// a conversion to U or W therefore succeeds only on the node that holds the path's
    /// token (the last node to take it in a mode that needed the token). Answered at
    /// once: a conversion never waits, so two guards converting cannot deadlock. The
    /// path's fence is that of the converted hold (a new one where the node's hold grew).
    pub async fn try_convert(&mut self, mode: Mode) -> Result<(), Error> {
        let Some(last) = self.held.len().checked_sub(1) else {
            return Err(Error::Stopped);
        };
        let from = self.held[last].1;
        if from.downgrades_to(mode) {
            return self.downgrade(mode).await;
        }
        let requested = self.held[last].0.clone();
        if mode == Mode::Phi {
            return Err(Error::WouldBlock {
                path: requested,
                mode,
            });
        }
        let mut done: Vec<(usize, Mode)> = Vec::new();
        for i in 0..=last {
            let (path, held, hold, _) = self.held[i].clone();
            // An ancestor holds an intention mode, compatible with every other one: it
            // takes the stronger of the two.
            let to = match hilock_kernel::mode::strongest(held, intention(mode)) {
                Ok(to) if i < last => to,
                _ => mode,
            };
            if to == held {
                continue;
            }
            let (reply, rx) = oneshot::channel();
            self.handle
                .tx
                .send(Cmd::Convert {
                    path,
                    hold,
                    mode: to,
                    reply,
                })
                .map_err(|_| Error::Stopped)?;
            match rx.await.map_err(|_| Error::Stopped)? {
                Ok(fence) => {
                    done.push((i, held));
                    self.held[i].1 = to;
                    self.held[i].3 = fence;
                }
                Err(e) => {
                    self.undo_conversions(done).await;
                    return Err(match e {
                        Error::WouldBlock { .. } => Error::WouldBlock {
                            path: requested,
                            mode,
                        },
                        e => e,
                    });
                }
            }
        }
        Ok(())
    }

    /// Takes the ancestor levels a refused [`Guard::try_convert`] converted back to the modes
    /// they held (each a downgrade, answered at once), innermost first.
    async fn undo_conversions(&mut self, done: Vec<(usize, Mode)>) {
        for (i, old) in done.into_iter().rev() {
            let (path, _, hold, _) = self.held[i].clone();
            let (reply, rx) = oneshot::channel();
            if self
                .handle
                .tx
                .send(Cmd::Downgrade {
                    path,
                    hold,
                    mode: old,
                    reply,
                })
                .is_ok()
                && matches!(rx.await, Ok(Ok(())))
            {
                self.held[i].1 = old;
            }
        }
    }
}

/// A level of a hierarchical request that the node has not answered yet: dropped armed
/// (the caller gave up: a timeout, or its future was dropped), it tells the node to
/// cancel the request ([`Cmd::Cancel`]; `spec/SPEC.md` 1.13).
struct CancelOnDrop<'a> {
    tx: &'a mpsc::UnboundedSender<Cmd>,
    path: &'a str,
    ticket: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            // A stopped node has nothing to cancel.
            let _ = self.tx.send(Cmd::Cancel {
                path: self.path.to_string(),
                ticket: self.ticket,
            });
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        for (path, _, hold, _) in self.held.drain(..).rev() {
            // A stopped node has nothing to release.
            let _ = self.handle.tx.send(Cmd::Release { path, hold });
        }
    }
}
