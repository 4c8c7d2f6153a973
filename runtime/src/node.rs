//! A hilock node: one tokio task drives the kernel sites of every lock this node has seen;
//! one task per peer dials it and sends; one task per accepted connection receives.
//!
//! Locks are named by paths. Each path is its own kernel site ([`LockSite`], one lock per
//! site), created on first use; its initial token holder is [`initial_holder`]. The node
//! re-implements no rule: every protocol decision is a [`LockSite::step`]. What the node
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
//!   was dropped) stays in the protocol until it is granted, and is then released at once.
//! - **Hierarchy.** [`Node::lock`] takes the intention mode on every ancestor path first,
//!   outermost first (see [`intention`]); all guards take locks in that order.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hilock_kernel::mode::strongest;
use hilock_kernel::{compatible, Input, KernelError, Mode, NodeId, Output, Priority};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::wire::{
    self, ancestors, check_frame, check_path, initial_holder, Frame, Hello, KMsg, KOutputs,
    LockSite, Side, Transcript, LOCK, MAX_FRAME, PROTOCOL_VERSION,
};

/// How long each side waits for the next handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections allowed in the handshake at once; more are closed at once (a flood of
/// unauthenticated connections cannot pile up tasks).
pub const MAX_PENDING_HANDSHAKES: usize = 64;

/// Errors of the lock API.
#[derive(Clone, Debug, PartialEq, Eq)]
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
                        " (no working connection to node{} {}; the protocol cannot recover a crashed node)",
                        if disconnected.len() > 1 { "s" } else { "" },
                        disconnected
                            .iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            }
            Error::NotUpgradable { path, mode } => {
                write!(f, "{path} is held in {mode}; only a U guard can upgrade")
            }
            Error::Kernel { path, error } => write!(f, "{path}: kernel refused: {error}"),
            Error::Stopped => write!(f, "the node has stopped"),
            Error::Refused { reason } => write!(f, "this node serves no lock: {reason}"),
            Error::PeerRestarted { path, peer } => write!(
                f,
                "{path}: node {peer} restarted with fresh state and is refused; the protocol \
                 cannot recover its tokens and copies (restart the whole cluster)"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Options of a lock request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The request's priority (chapter 3; higher is served first; 0 by default).
    pub priority: Priority,
    /// Give up after this long (whole hierarchy); `None`: the node's `request_timeout`.
    pub timeout: Option<Duration>,
    /// The caller already holds a lock of this node (it nests, like a `hilock lock` run
    /// under another). A nested request shares the node's current hold whenever Table 2.1
    /// allows, even ahead of local waiters and of remote requests that wait for the lock,
    /// so that a caller never waits for a hold of its own (e.g. IW on `/db` for `/db/b`
    /// while it holds `/db/a` in W). Requests that are not nested do not overtake waiting
    /// requests.
    pub nested: bool,
}

/// The intention mode taken on every ancestor of a lock requested in `mode`
/// (multi-granularity locking, Gray et al., as the thesis uses it in section 4.1):
/// IR above IR and R; IW above U, IW and W.
pub const fn intention(mode: Mode) -> Mode {
    match mode {
        Mode::IR | Mode::R => Mode::IR,
        _ => Mode::IW,
    }
}

/// Counters of a node, for `hilock status` and the demo.
#[derive(Debug, Default)]
struct Counters {
    frames_sent: AtomicU64,
    frames_received: AtomicU64,
    kernel_requests: AtomicU64,
    grants: AtomicU64,
    rejected_connections: AtomicU64,
    kernel_rejections: AtomicU64,
    abandoned_grants: AtomicU64,
}

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
    /// Connections closed for a bad handshake or a bad frame.
    pub rejected_connections: u64,
    /// Delivered messages the kernel refused (logged and dropped).
    pub kernel_rejections: u64,
    /// Grants that arrived for callers that had given up, released at once.
    pub abandoned_grants: u64,
}

/// The receiving side of the channel from one peer.
#[derive(Default)]
struct Inbound {
    /// The run (incarnation) of the peer this node knows, from either direction's handshake.
    incarnation: Option<u64>,
    /// Messages of that run delivered to the core (the last number).
    delivered: u64,
    /// Counts accepted connections from the peer: only the newest one delivers.
    conn: u64,
}

struct PeerLink {
    addr: SocketAddr,
    /// This node's connection to the peer is up (handshake done, not seen closed).
    connected: AtomicBool,
    /// A connection from the peer is up.
    incoming: AtomicBool,
    sent: AtomicU64,
    /// Messages the peer has acknowledged (the channel's last delivered number).
    acked: AtomicU64,
    received: AtomicU64,
    resent: AtomicU64,
    duplicates: AtomicU64,
    dropped: AtomicU64,
    /// The peer has welcomed this node's run at least once.
    welcomed: AtomicBool,
    /// The connection to the peer is open but the peer has not answered for
    /// [`SILENT_AFTER`].
    silent: AtomicBool,
    inbound: std::sync::Mutex<Inbound>,
    refused: std::sync::Mutex<Option<String>>,
    /// When this node last lost its working connection to the peer (`None` while it has
    /// one, or before the first).
    down_since: std::sync::Mutex<Option<Instant>>,
    tx: mpsc::UnboundedSender<Bytes>,
}

impl PeerLink {
    fn refused(&self) -> Option<String> {
        self.refused.lock().expect("refused lock").clone()
    }

    /// The working connection is gone since `at` (closed, or the peer went silent).
    fn went_down(&self, at: Instant) {
        self.down_since
            .lock()
            .expect("down_since lock")
            .get_or_insert(at);
    }

    fn came_up(&self) {
        *self.down_since.lock().expect("down_since lock") = None;
    }

    /// The peer's state for people: connected, not answering for how long, unreachable
    /// for how long, never reached, or refused.
    fn describe(&self, id: u16) -> String {
        if let Some(r) = self.refused() {
            return format!("node {id} is refused ({r})");
        }
        let since = *self.down_since.lock().expect("down_since lock");
        if self.connected.load(Relaxed) {
            format!("node {id} is connected")
        } else if self.silent.load(Relaxed) {
            let t = since.map_or(Duration::ZERO, |s| s.elapsed());
            format!("node {id} has not answered for {t:.1?} (stopped, hung or cut off)")
        } else if let Some(s) = since {
            format!(
                "node {id} is unreachable for {:.1?} (reconnecting)",
                s.elapsed()
            )
        } else {
            format!("node {id} has not been reached yet")
        }
    }

    fn refuse(&self, reason: String) {
        self.refused
            .lock()
            .expect("refused lock")
            .get_or_insert(reason);
    }
}

struct Shared {
    id: u16,
    cluster: String,
    secret: Vec<u8>,
    n: usize,
    request_timeout: Duration,
    listen: SocketAddr,
    peers: Vec<Option<PeerLink>>,
    counters: Counters,
    /// Set when the node stops: clients holding locks are told they are lost.
    stopping: tokio::sync::watch::Sender<bool>,
    /// This run of the node (random, drawn at start).
    incarnation: u64,
    /// Peers that have welcomed this run.
    welcomed: std::sync::atomic::AtomicUsize,
    /// Numbers the lock requests of callers (to find one in a queue).
    tickets: AtomicU64,
    /// The agents engine's inbox (seed 001, [`crate::agents`]).
    agents: crate::agents::Inbox,
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

type Reply<T> = oneshot::Sender<Result<T, Error>>;

enum Cmd {
    Acquire {
        path: String,
        mode: Mode,
        prio: Priority,
        nested: bool,
        ticket: u64,
        /// The hold id and the hold's fencing token.
        reply: Reply<(u64, u64)>,
    },
    Release {
        path: String,
        hold: u64,
    },
    Upgrade {
        path: String,
        hold: u64,
        /// The fencing token of the W hold.
        reply: Reply<u64>,
    },
    Deliver {
        from: NodeId,
        // Boxed: a token frame is a few hundred bytes, every other command is small.
        frame: Box<Frame>,
    },
    Status {
        reply: oneshot::Sender<Vec<LockStatus>>,
    },
    /// Where request `ticket` for `path` stands (for a timeout's error).
    Explain {
        path: String,
        ticket: u64,
        reply: oneshot::Sender<String>,
    },
    /// Answered once every command before it has been handled.
    Flush {
        reply: oneshot::Sender<()>,
    },
    /// A majority of the cluster has let this run of the node in: it may grant.
    Admitted,
    /// A peer knew an earlier run of this node: serve nothing.
    Fenced {
        reason: String,
    },
    /// A peer is a new run of a node this node knew.
    PeerRestarted {
        peer: u16,
    },
}

/// A running node. Dropping it (or [`Node::shutdown`]) stops every task of the node; the
/// guards it handed out then release nothing (the node is gone).
pub struct Node {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Cmd>,
    tasks: JoinSet<()>,
    client: Option<tokio::task::JoinHandle<()>>,
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

impl Node {
    /// Start a node: listen on `config.listen`, dial every peer, serve the client socket
    /// if one is configured.
    pub async fn start(config: Config) -> std::io::Result<Node> {
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
        })?;
        Self::start_on(config, listener).await
    }

    /// Start a node on a listener bound already (e.g. to port 0).
    pub async fn start_on(config: Config, listener: TcpListener) -> std::io::Result<Node> {
        config
            .validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let listen = listener.local_addr()?;
        let mut tasks = JoinSet::new();
        let mut peers = Vec::new();
        let mut outboxes = Vec::new();
        for n in &config.nodes {
            if n.id == config.id {
                peers.push(None);
                continue;
            }
            let (tx, rx) = mpsc::unbounded_channel();
            peers.push(Some(PeerLink {
                addr: n.addr,
                connected: AtomicBool::new(false),
                incoming: AtomicBool::new(false),
                sent: AtomicU64::new(0),
                acked: AtomicU64::new(0),
                received: AtomicU64::new(0),
                resent: AtomicU64::new(0),
                duplicates: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                welcomed: AtomicBool::new(false),
                silent: AtomicBool::new(false),
                inbound: std::sync::Mutex::new(Inbound::default()),
                refused: std::sync::Mutex::new(None),
                down_since: std::sync::Mutex::new(None),
                tx,
            }));
            outboxes.push((n.id, rx));
        }
        let (agents_inbox, agents_rx) = crate::agents::inbox(config.id, config.n());
        let shared = Arc::new(Shared {
            id: config.id,
            cluster: config.cluster.clone(),
            secret: config.secret.clone(),
            n: config.n(),
            request_timeout: config.request_timeout,
            listen,
            peers,
            counters: Counters::default(),
            stopping: tokio::sync::watch::Sender::new(false),
            incarnation: rand::random(),
            welcomed: std::sync::atomic::AtomicUsize::new(0),
            tickets: AtomicU64::new(0),
            agents: agents_inbox,
        });
        tasks.spawn(crate::agents::run(shared.clone(), agents_rx));
        let (tx, rx) = mpsc::unbounded_channel();
        tasks.spawn(Core::new(shared.clone()).run(rx));
        for (peer, rx) in outboxes {
            tasks.spawn(dial(shared.clone(), peer, rx, tx.clone()));
        }
        tasks.spawn(accept(shared.clone(), listener, tx.clone()));
        let mut node = Node {
            shared,
            tx,
            tasks,
            client: None,
        };
        if let Some(path) = &config.client {
            let l = crate::client::bind(path)?;
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

    /// Stop every task of the node and close its sockets. Clients of the client socket
    /// that hold a lock are told first that it is lost, the commands they registered are
    /// killed, and their locks are released; the messages that hand the released locks
    /// over to waiting nodes are sent and acknowledged before the node's connections close
    /// (for at most [`HAND_OVER`]). Locks held by this node that nobody waits for stay
    /// with it (the protocol cannot recover them).
    pub async fn shutdown(mut self) {
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
        self.tasks.shutdown().await;
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
    /// The agents engine's inbox ([`crate::agents`]).
    pub(crate) fn agents(&self) -> &crate::agents::Inbox {
        &self.shared.agents
    }

    /// Becomes `true` when the node stops.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.stopping.subscribe()
    }

    /// See [`Node::lock`].
    pub async fn lock(&self, path: &str, mode: Mode) -> Result<Guard, Error> {
        self.lock_with(path, mode, Options::default()).await
    }

    /// See [`Node::lock_with`]. The ancestors are taken first, outermost first, each in
    /// [`intention`]`(mode)`; the timeout covers the whole hierarchy. On any error the
    /// locks taken so far are released.
    pub async fn lock_with(&self, path: &str, mode: Mode, opts: Options) -> Result<Guard, Error> {
        check_path(path).map_err(Error::InvalidPath)?;
        if mode == Mode::Phi {
            return Err(Error::InvalidMode);
        }
        let wait = opts.timeout.unwrap_or(self.shared.request_timeout);
        let start = Instant::now();
        let deadline = start + wait;
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
                    ticket,
                    reply,
                })
                .map_err(|_| Error::Stopped)?;
            match timeout_at(deadline, &mut rx).await {
                Ok(Ok(Ok((hold, fence)))) => guard.held.push((p.to_string(), m, hold, fence)),
                Ok(Ok(Err(e))) => return Err(e),
                Ok(Err(_)) => return Err(Error::Stopped),
                // Dropping `rx` (after asking where the request stands) marks the request
                // abandoned: the core releases it when it is granted.
                Err(_) => {
                    let after = start.elapsed();
                    let waiting = self.explain(p, ticket).await;
                    drop(rx);
                    return Err(Error::Timeout {
                        path: p.to_string(),
                        mode: m,
                        after,
                        disconnected: self.shared.disconnected(),
                        waiting,
                    });
                }
            }
        }
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
        }
    }

    /// Locks, peers and counters.
    pub async fn status(&self) -> Result<Status, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Status { reply })
            .map_err(|_| Error::Stopped)?;
        let locks = rx.await.map_err(|_| Error::Stopped)?;
        let s = &self.shared;
        Ok(Status {
            id: s.id,
            cluster: s.cluster.clone(),
            listen: s.listen.to_string(),
            peers: s
                .peers
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    p.as_ref().map(|p| {
                        let connected = p.connected.load(Relaxed);
                        PeerStatus {
                            id: i as u16,
                            addr: p.addr.to_string(),
                            connected,
                            incoming: p.incoming.load(Relaxed),
                            state: match p.refused() {
                                Some(r) => format!("refused: {r}"),
                                None if connected => "connected".into(),
                                None if p.silent.load(Relaxed) => "silent".into(),
                                None => "reconnecting".into(),
                            },
                            frames_sent: p.sent.load(Relaxed),
                            frames_received: p.received.load(Relaxed),
                            resent: p.resent.load(Relaxed),
                            duplicates: p.duplicates.load(Relaxed),
                        }
                    })
                })
                .collect(),
            stats: self.stats(),
            locks,
        })
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
    /// guard keeps U; dropping the guard then releases once the upgrade completes.
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
                let waiting = self.handle.explain(&path, 0).await;
                Err(Error::Timeout {
                    path,
                    mode: Mode::W,
                    after: wait,
                    disconnected: self.handle.shared.disconnected(),
                    waiting,
                })
            }
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

/// What `hilock status` shows of a node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// Node id.
    pub id: u16,
    /// Cluster name.
    pub cluster: String,
    /// Listening address.
    pub listen: String,
    /// Peers.
    pub peers: Vec<PeerStatus>,
    /// Counters.
    pub stats: Stats,
    /// Every lock this node has seen, by path.
    pub locks: Vec<LockStatus>,
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
    /// and the peer answers (it acknowledges at least every 200 ms; after a second of
    /// silence it counts as not connected).
    pub connected: bool,
    /// Whether a connection from it is up.
    pub incoming: bool,
    /// `connected`, `silent` (the connection is open but the peer has not answered for a
    /// second: stopped or hung), `reconnecting` (messages wait and are resent when it is
    /// back) or `refused: …` (it restarted, or refused this node as a restarted one).
    pub state: String,
    /// Messages sent to it (each once, however often resent).
    pub frames_sent: u64,
    /// Messages received from it and delivered (each once).
    pub frames_received: u64,
    /// Messages resent to it after a reconnect.
    pub resent: u64,
    /// Resent messages from it that had been delivered already (dropped).
    pub duplicates: u64,
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

struct Waiter {
    /// The caller's request number ([`Cmd::Explain`]).
    ticket: u64,
    mode: Mode,
    prio: Priority,
    /// Made by a caller that holds another lock of this node ([`Options::nested`]).
    nested: bool,
    reply: Reply<(u64, u64)>,
}

/// A U → W upgrade asked for by holder `hold`.
struct Upgrading {
    hold: u64,
    reply: Option<Reply<u64>>,
    /// Given to the kernel (only once `hold` is the only local holder).
    issued: bool,
}

struct LockEntry {
    site: Box<LockSite>,
    /// The kernel's held mode M_H: covers every local holder's mode.
    held: Mode,
    /// Local holders: hold id and mode; pairwise compatible (Table 2.1).
    holders: Vec<(u64, Mode)>,
    waiters: VecDeque<Waiter>,
    requesting: Option<Waiter>,
    upgrading: Option<Upgrading>,
    release_when_upgraded: bool,
}

impl LockEntry {
    /// The fencing token of the site's current hold (0 while it holds nothing).
    fn fence(&self) -> u64 {
        self.site
            .lock(LOCK)
            .ok()
            .and_then(|k| k.fence())
            .unwrap_or(0)
    }

    /// Whether a local caller asking for `w` may share what the node holds now, without
    /// a kernel request: the kernel's held mode covers `w.mode` (it is the stronger of
    /// the two compatible modes, so every mode a remote node may hold beside it is
    /// compatible with `w.mode` too), no upgrade is under way, and — unless the caller is nested, i.e. already holds a lock
    /// of this node and could otherwise wait for itself — no remote request waits for this
    /// lock here and `w.mode` is not frozen (Rule 6), so local sharing cannot starve a
    /// remote request.
    fn joinable(&self, me: NodeId, w: &Waiter) -> bool {
        if self.held == Mode::Phi || self.upgrading.is_some() || self.requesting.is_some() {
            return false;
        }
        if strongest(self.held, w.mode) != Ok(self.held) {
            return false;
        }
        // Implied by the cover: the modes a held mode covers (IR under R, IR and R under
        // U, IR under IW) are compatible with one another and with it, and the local
        // holders all have the held mode or a covered one.
        debug_assert!(self.holders.iter().all(|&(_, m)| compatible(m, w.mode)));
        if w.nested {
            return true;
        }
        let k = self.site.lock(LOCK).expect("one lock per site");
        !k.frozen().contains(w.mode) && k.queue().iter().all(|q| q.requester == me)
    }
}

struct Core {
    shared: Arc<Shared>,
    locks: HashMap<String, LockEntry>,
    out: Box<KOutputs>,
    next_hold: u64,
    /// A majority of the cluster has let this run in (until then requests wait).
    admitted: bool,
    /// This run was refused by a peer that knew an earlier one: nothing is served.
    fenced: Option<String>,
}

impl Core {
    fn new(shared: Arc<Shared>) -> Core {
        Core {
            admitted: shared.quorum() <= 1,
            shared,
            locks: HashMap::new(),
            out: Box::default(),
            next_hold: 1,
            fenced: None,
        }
    }

    /// Answer a caller's request with `err` now; a kernel request already out stays in
    /// the protocol and is released when granted (as for a caller that gave up).
    fn fail_requesting(e: &mut LockEntry, err: Error) {
        if let Some(w) = e.requesting.as_mut() {
            let (gone, _) = oneshot::channel();
            let _ = std::mem::replace(&mut w.reply, gone).send(Err(err));
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        while let Some(cmd) = rx.recv().await {
            self.handle(cmd);
        }
    }

    fn entry(&mut self, path: &str) -> Result<&mut LockEntry, KernelError> {
        if !self.locks.contains_key(path) {
            let me = NodeId(self.shared.id);
            let root = initial_holder(path, self.shared.n);
            let site = LockSite::new(me, root)?;
            self.locks.insert(
                path.to_string(),
                LockEntry {
                    site: Box::new(site),
                    held: Mode::Phi,
                    holders: Vec::new(),
                    waiters: VecDeque::new(),
                    requesting: None,
                    upgrading: None,
                    release_when_upgraded: false,
                },
            );
        }
        Ok(self.locks.get_mut(path).expect("inserted above"))
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Acquire { reply, .. } if self.fenced.is_some() => {
                let reason = self.fenced.clone().unwrap_or_default();
                let _ = reply.send(Err(Error::Refused { reason }));
            }
            Cmd::Acquire {
                path,
                mode,
                prio,
                nested,
                ticket,
                reply,
            } => match self.entry(&path) {
                Ok(e) => {
                    e.waiters.push_back(Waiter {
                        ticket,
                        mode,
                        prio,
                        nested,
                        reply,
                    });
                    self.pump(&path);
                }
                Err(error) => {
                    let _ = reply.send(Err(Error::Kernel { path, error }));
                }
            },
            Cmd::Release { path, hold } => self.release(&path, hold),
            Cmd::Upgrade { path, hold, reply } => self.upgrade(&path, hold, reply),
            Cmd::Deliver { from, frame } => {
                let Frame { path, msg } = *frame;
                if self.entry(&path).is_err() {
                    return;
                }
                if let Err(e) = self.kstep(&path, Input::Deliver { from, msg: &msg }) {
                    self.shared.counters.kernel_rejections.fetch_add(1, Relaxed);
                    warn!(from = from.0, %path, error = %e, msg = ?msg, "kernel refused a message; dropped");
                }
                self.pump(&path);
            }
            Cmd::Admitted => {
                self.admitted = true;
                let paths: Vec<String> = self.locks.keys().cloned().collect();
                for p in paths {
                    self.pump(&p);
                }
            }
            Cmd::Fenced { reason } => {
                warn!(%reason, "this run of the node is refused by the cluster; serving nothing");
                for e in self.locks.values_mut() {
                    for w in e.waiters.drain(..) {
                        let _ = w.reply.send(Err(Error::Refused {
                            reason: reason.clone(),
                        }));
                    }
                    Self::fail_requesting(
                        e,
                        Error::Refused {
                            reason: reason.clone(),
                        },
                    );
                }
                self.fenced.get_or_insert(reason);
            }
            Cmd::PeerRestarted { peer } => {
                // Requests on their way to the restarted node will not come back: fail them.
                for (path, e) in self.locks.iter_mut() {
                    let k = e.site.lock(LOCK).expect("one lock per site");
                    if e.requesting.is_some() && k.parent() == Some(NodeId(peer)) {
                        Self::fail_requesting(
                            e,
                            Error::PeerRestarted {
                                path: path.clone(),
                                peer,
                            },
                        );
                    }
                }
            }
            Cmd::Flush { reply } => {
                let _ = reply.send(());
            }
            Cmd::Explain {
                path,
                ticket,
                reply,
            } => {
                let _ = reply.send(self.explain(&path, ticket));
            }
            Cmd::Status { reply } => {
                let mut v: Vec<LockStatus> = self
                    .locks
                    .iter()
                    .map(|(path, e)| {
                        let k = e.site.lock(LOCK).expect("one lock per site");
                        LockStatus {
                            path: path.clone(),
                            token: k.has_token(),
                            parent: k.parent().map(|p| p.0),
                            held: k.held().to_string(),
                            owned: k.owned().to_string(),
                            pending: k.pending_mode().to_string(),
                            frozen: k.frozen().to_string(),
                            queue: k
                                .queue()
                                .iter()
                                .map(|q| format!("{}:{}@{}", q.requester.0, q.mode, q.prio))
                                .collect(),
                            holders: e.holders.len(),
                            waiters: e.waiters.len() + usize::from(e.requesting.is_some()),
                        }
                    })
                    .collect();
                v.sort_by(|a, b| a.path.cmp(&b.path));
                let _ = reply.send(v);
            }
        }
    }

    /// Where request `ticket` for `path` stands: its place among this node's callers, who
    /// holds the lock here or was granted it from here, or which peer the request went to
    /// and that peer's state.
    fn explain(&self, path: &str, ticket: u64) -> String {
        let Some(e) = self.locks.get(path) else {
            return "the lock is not known at this node".into();
        };
        let Ok(k) = e.site.lock(LOCK) else {
            return String::new();
        };
        let mut parts = Vec::new();
        if let Some(r) = &self.fenced {
            parts.push(format!("this node serves no lock ({r})"));
        } else if !self.admitted {
            parts.push("this node is waiting for a majority of the cluster to let it in".into());
        }
        let out = e.requesting.as_ref();
        if out.is_some_and(|w| w.ticket == ticket) {
            parts.push(format!(
                "this node's request for {} is the one in the protocol",
                k.pending_mode()
            ));
        } else if let Some(i) = e.waiters.iter().position(|w| w.ticket == ticket) {
            let ahead = i + usize::from(out.is_some());
            parts.push(format!(
                "queue position {} at this node ({ahead} local request{} ahead)",
                ahead + 1,
                if ahead == 1 { "" } else { "s" }
            ));
        } else if e.upgrading.is_some() {
            parts.push("an upgrade to W waits for the other local holders".into());
        }
        if !e.holders.is_empty() {
            let mut modes: Vec<String> = e.holders.iter().map(|(_, m)| m.to_string()).collect();
            modes.dedup();
            parts.push(format!(
                "held at this node (node {}) in {} by {} local caller{} ({})",
                self.shared.id,
                e.held,
                e.holders.len(),
                if e.holders.len() == 1 { "" } else { "s" },
                modes.join(", ")
            ));
        }
        let granted: Vec<String> = k
            .children()
            .filter(|&(_, m)| m != Mode::Phi)
            .map(|(n, m)| format!("node {} in {m}", n.0))
            .collect();
        if !granted.is_empty() {
            parts.push(format!(
                "granted from here to {} (or nodes below them)",
                granted.join(", ")
            ));
        }
        let remote: Vec<String> = k
            .queue()
            .iter()
            .filter(|q| q.requester.0 != self.shared.id)
            .map(|q| format!("node {} for {}", q.requester.0, q.mode))
            .collect();
        if !remote.is_empty() {
            parts.push(format!("queued here before it: {}", remote.join(", ")));
        }
        if k.has_token() {
            parts.push("this node has the lock's token".into());
        } else if let Some(p) = k.parent() {
            let state = self
                .shared
                .peers
                .get(p.idx())
                .and_then(|l| l.as_ref())
                .map_or_else(|| format!("node {}", p.0), |l| l.describe(p.0));
            parts.push(format!(
                "the token is at node {} or beyond it; {state}",
                p.0
            ));
        }
        parts.join("; ")
    }

    /// One kernel step on `path`'s site, then act on its outputs.
    fn kstep(&mut self, path: &str, input: Input<'_, KMsg>) -> Result<(), KernelError> {
        let e = self.locks.get_mut(path).expect("entry exists");
        self.out.clear();
        e.site.step(input, &mut *self.out)?;
        let outs: Vec<Output<KMsg>> = self.out.drain(..).collect();
        for o in outs {
            match o {
                Output::Send { to, msg } => self.send(to, path, msg),
                Output::Granted { mode, .. } => self.granted(path, mode),
                Output::Upgraded { .. } => self.upgraded(path),
            }
        }
        Ok(())
    }

    fn send(&mut self, to: NodeId, path: &str, msg: KMsg) {
        let Some(Some(p)) = self.shared.peers.get(to.idx()) else {
            warn!(to = to.0, %path, "kernel addressed a node outside the cluster; dropped");
            return;
        };
        let bytes = Bytes::from(wire::encode(&wire::Payload::Token(Frame {
            path: path.to_string(),
            msg,
        })));
        if p.tx.send(bytes).is_ok() {
            p.sent.fetch_add(1, Relaxed);
            self.shared.counters.frames_sent.fetch_add(1, Relaxed);
        }
    }

    /// Give `w` a local hold in `mode`; `false` if its caller has gone (abandoned).
    fn give(&mut self, path: &str, w: Waiter) -> bool {
        self.next_hold += 1;
        let hold = self.next_hold;
        let e = self.locks.get_mut(path).expect("entry exists");
        e.holders.push((hold, w.mode));
        // Every local holder shares the site's hold, and its fence.
        let fence = e.fence();
        if w.reply.send(Ok((hold, fence))).is_err() {
            e.holders.retain(|&(h, _)| h != hold);
            self.shared.counters.abandoned_grants.fetch_add(1, Relaxed);
            false
        } else {
            self.shared.counters.grants.fetch_add(1, Relaxed);
            true
        }
    }

    /// The kernel granted the site's request: hand it to its caller. (Local callers that
    /// may share it join in [`Core::pump`].)
    fn granted(&mut self, path: &str, mode: Mode) {
        let e = self.locks.get_mut(path).expect("entry exists");
        e.held = mode;
        match e.requesting.take() {
            Some(w) => {
                self.give(path, w);
            }
            None => warn!(%path, "kernel granted a lock nobody requested"),
        }
        let e = self.locks.get_mut(path).expect("entry exists");
        if e.holders.is_empty() {
            self.kernel_release(path);
        }
    }

    fn upgraded(&mut self, path: &str) {
        let e = self.locks.get_mut(path).expect("entry exists");
        e.held = Mode::W;
        if let Some(u) = e.upgrading.take() {
            for h in e.holders.iter_mut().filter(|h| h.0 == u.hold) {
                h.1 = Mode::W;
            }
            if let Some(r) = u.reply {
                let _ = r.send(Ok(e.fence()));
            }
        }
        if e.release_when_upgraded {
            e.release_when_upgraded = false;
            e.holders.clear();
            self.kernel_release(path);
        }
    }

    fn kernel_release(&mut self, path: &str) {
        if let Err(error) = self.kstep(path, Input::Release { lock: LOCK }) {
            warn!(%path, %error, "kernel refused a release");
        }
        if let Some(e) = self.locks.get_mut(path) {
            e.held = Mode::Phi;
        }
    }

    fn release(&mut self, path: &str, hold: u64) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        let before = e.holders.len();
        e.holders.retain(|&(h, _)| h != hold);
        if e.holders.len() == before {
            return;
        }
        match &e.upgrading {
            Some(u) if u.hold == hold && u.issued => {
                // Rule 7 keeps U until W is granted; release then.
                e.holders.push((hold, Mode::U));
                e.release_when_upgraded = true;
                return;
            }
            // The upgrade had not reached the kernel yet: it is dropped with its holder.
            Some(u) if u.hold == hold => e.upgrading = None,
            _ => {}
        }
        if e.holders.is_empty() {
            self.kernel_release(path);
        } else {
            self.try_upgrade(path);
        }
        self.pump(path);
    }

    fn upgrade(&mut self, path: &str, hold: u64, reply: Reply<u64>) {
        let Some(e) = self.locks.get_mut(path) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        let mine = e.holders.iter().find(|h| h.0 == hold).map(|h| h.1);
        if mine != Some(Mode::U) || e.held != Mode::U || e.upgrading.is_some() {
            let _ = reply.send(Err(Error::NotUpgradable {
                path: path.to_string(),
                mode: mine.unwrap_or(e.held),
            }));
            return;
        }
        e.upgrading = Some(Upgrading {
            hold,
            reply: Some(reply),
            issued: false,
        });
        self.try_upgrade(path);
    }

    /// Give a waiting upgrade to the kernel once its holder is the only local holder
    /// (W is compatible with no other mode, local or remote).
    fn try_upgrade(&mut self, path: &str) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        let Some(u) = &mut e.upgrading else {
            return;
        };
        if u.issued || e.holders.len() != 1 || e.holders[0].0 != u.hold {
            return;
        }
        u.issued = true;
        self.shared.counters.kernel_requests.fetch_add(1, Relaxed);
        if let Err(error) = self.kstep(path, Input::Upgrade { lock: LOCK }) {
            let e = self.locks.get_mut(path).expect("entry exists");
            if let Some(r) = e.upgrading.take().and_then(|u| u.reply) {
                let _ = r.send(Err(Error::Kernel {
                    path: path.to_string(),
                    error,
                }));
            }
        }
    }

    /// Serve local waiters: a waiter that may share the node's current hold joins it
    /// (`LockEntry::joinable`) — the first waiter in FIFO order, or a nested waiter
    /// anywhere in the queue; when the site holds nothing and has no request out, the first
    /// waiter's request goes to the kernel.
    fn pump(&mut self, path: &str) {
        let me = NodeId(self.shared.id);
        loop {
            let Some(e) = self.locks.get_mut(path) else {
                return;
            };
            e.waiters.retain(|w| !w.reply.is_closed());
            if e.requesting.is_some() || e.upgrading.is_some() {
                return;
            }
            let pick = match e.waiters.front() {
                None => return,
                Some(w) if e.joinable(me, w) => Some(0),
                Some(_) => e.waiters.iter().position(|w| w.nested && e.joinable(me, w)),
            };
            if let Some(i) = pick {
                let w = e.waiters.remove(i).expect("index from position");
                self.give(path, w);
                continue;
            }
            if !e.holders.is_empty() || e.held != Mode::Phi || !self.admitted {
                return;
            }
            let w = e.waiters.pop_front().expect("front exists");
            let (mode, prio) = (w.mode, w.prio);
            // The site's base priority carries over between requests: set it only when it
            // changes (most requests keep priority 0).
            let reprioritise = e.site.priorities().base != prio;
            e.requesting = Some(w);
            self.shared.counters.kernel_requests.fetch_add(1, Relaxed);
            let r = if reprioritise {
                self.kstep(path, Input::SetPriority { base: prio })
            } else {
                Ok(())
            }
            .and_then(|()| self.kstep(path, Input::Acquire { lock: LOCK, mode }));
            if let Err(error) = r {
                let e = self.locks.get_mut(path).expect("entry exists");
                if let Some(w) = e.requesting.take() {
                    let _ = w.reply.send(Err(Error::Kernel {
                        path: path.to_string(),
                        error,
                    }));
                }
            }
        }
    }
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// How long a stopping node waits for its peers to acknowledge the messages that hand its
/// released locks over ([`Node::shutdown`]).
pub const HAND_OVER: Duration = Duration::from_millis(100);

/// How long the acceptor may hold back an acknowledgement.
const ACK_DELAY: Duration = Duration::from_millis(5);

/// Acknowledge at once when this many messages are unacknowledged.
const ACK_EVERY: u64 = 64;

/// The acceptor acknowledges at least this often, traffic or not (a heartbeat).
pub const HEARTBEAT: Duration = Duration::from_millis(200);

/// A peer whose connection stays open but that has not acknowledged anything for this
/// long (stopped, hung, or its network gone silently) is shown as not connected.
pub const SILENT_AFTER: Duration = Duration::from_secs(1);

/// The sending side of the link to `peer`: connect (with backoff), authenticate, send
/// numbered messages, keep them until acknowledged, resend after a reconnect.
async fn dial(
    shared: Arc<Shared>,
    peer: u16,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    core: mpsc::UnboundedSender<Cmd>,
) {
    let link = shared.peers[usize::from(peer)]
        .as_ref()
        .expect("dial only peers");
    let mut backoff = Duration::from_millis(10);
    // Messages sent but not acknowledged, oldest first, with their numbers.
    let mut unacked: VecDeque<(u64, Bytes)> = VecDeque::new();
    let mut next_seq = 1u64;
    let mut was_up = false;
    loop {
        if let Some(reason) = link.refused() {
            // A new run of that node (or this node is one): nothing more goes to it.
            warn!(peer, %reason, "not talking to peer any more");
            unacked.clear();
            while rx.recv().await.is_some() {
                link.dropped.fetch_add(1, Relaxed);
            }
            return;
        }
        let (mut fr, delivered) = match connect(&shared, peer, link.addr).await {
            Ok(c) => c,
            Err(ConnectError::Refused(reason)) => {
                // The peer knew an earlier run of this node: this node must not serve.
                link.refuse(reason.clone());
                let _ = core.send(Cmd::Fenced {
                    reason: format!("node {peer} refused this node: {reason}"),
                });
                continue;
            }
            Err(ConnectError::Restarted(reason)) => {
                link.refuse(reason.clone());
                warn!(peer, %reason, "peer restarted; refusing it");
                let _ = core.send(Cmd::PeerRestarted { peer });
                continue;
            }
            Err(ConnectError::Other(e)) => {
                if was_up {
                    warn!(peer, addr = %link.addr, error = %e, "cannot reconnect to peer");
                    was_up = false;
                } else {
                    debug!(peer, addr = %link.addr, error = %e, "cannot connect to peer yet");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        if delivered >= next_seq {
            // The acceptor claims messages this node never sent: not the same channel.
            warn!(
                peer,
                delivered, next_seq, "peer acknowledges messages never sent; reconnecting"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        while unacked.front().is_some_and(|(s, _)| *s <= delivered) {
            unacked.pop_front();
        }
        link.acked.fetch_max(delivered, Relaxed);
        link.connected.store(true, Relaxed);
        link.came_up();
        if !link.welcomed.swap(true, Relaxed) {
            let welcomed = shared.welcomed.fetch_add(1, Relaxed) + 1;
            if welcomed + 1 >= shared.quorum() {
                let _ = core.send(Cmd::Admitted);
            }
        }
        was_up = true;
        info!(peer, addr = %link.addr, resend = unacked.len(), "connected to peer");
        let mut heard = Instant::now();
        let mut check = tokio::time::interval(HEARTBEAT);
        let err = 'conn: {
            for (seq, b) in &unacked {
                if let Err(e) = fr.send(Bytes::from(wire::envelope(*seq, b))).await {
                    break 'conn e.to_string();
                }
                link.resent.fetch_add(1, Relaxed);
            }
            loop {
                tokio::select! {
                    m = rx.recv() => {
                        let Some(b) = m else { return };
                        let seq = next_seq;
                        next_seq += 1;
                        unacked.push_back((seq, b.clone()));
                        if let Err(e) = fr.send(Bytes::from(wire::envelope(seq, &b))).await {
                            break 'conn e.to_string();
                        }
                    }
                    _ = check.tick() => {
                        if heard.elapsed() > SILENT_AFTER && !link.silent.swap(true, Relaxed) {
                            link.connected.store(false, Relaxed);
                            link.went_down(heard);
                            warn!(peer, addr = %link.addr, "peer does not answer (stopped or hung?)");
                        }
                    }
                    r = fr.next() => match r {
                        None => break 'conn "peer closed the connection".to_string(),
                        Some(Err(e)) => break 'conn e.to_string(),
                        Some(Ok(b)) => match wire::decode::<wire::Ack>(&b) {
                            Ok(a) if a.delivered < next_seq => {
                                heard = Instant::now();
                                if link.silent.swap(false, Relaxed) {
                                    link.connected.store(true, Relaxed);
                                    link.came_up();
                                    info!(peer, addr = %link.addr, "peer answers again");
                                }
                                while unacked.front().is_some_and(|(s, _)| *s <= a.delivered) {
                                    unacked.pop_front();
                                }
                                link.acked.fetch_max(a.delivered, Relaxed);
                            }
                            Ok(a) => break 'conn format!("acknowledgement of message {} never sent", a.delivered),
                            Err(e) => break 'conn format!("bad acknowledgement: {e}"),
                        },
                    },
                }
            }
        };
        link.connected.store(false, Relaxed);
        link.went_down(Instant::now());
        link.silent.store(false, Relaxed);
        warn!(peer, addr = %link.addr, error = %err, unacked = unacked.len(), "lost the connection to peer; reconnecting");
    }
}

/// Why a connection attempt failed.
enum ConnectError {
    /// The peer refused this node as a new run of a node it knew.
    Refused(String),
    /// The peer is a new run of a node this node knew.
    Restarted(String),
    /// Anything else (not reachable, timeout, bad handshake): try again later.
    Other(String),
}

impl From<String> for ConnectError {
    fn from(e: String) -> Self {
        ConnectError::Other(e)
    }
}

/// Connect and authenticate; returns the connection and how many of this node's messages
/// the peer has delivered.
async fn connect(
    shared: &Shared,
    peer: u16,
    addr: SocketAddr,
) -> Result<(Framed<TcpStream, LengthDelimitedCodec>, u64), ConnectError> {
    let s = timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    let mut fr = Framed::new(s, codec());
    let nd = wire::nonce();
    let hello = Hello::Dial {
        version: PROTOCOL_VERSION,
        cluster: shared.cluster.clone(),
        from: shared.id,
        to: peer,
        nonce: nd,
        incarnation: shared.incarnation,
    };
    fr.send(Bytes::from(wire::encode(&hello)))
        .await
        .map_err(|e| e.to_string())?;
    let (na, ia) = match next_hello(&mut fr).await? {
        Hello::Challenge {
            nonce,
            incarnation,
            tag,
        } => {
            let tr = Transcript {
                cluster: &shared.cluster,
                from: shared.id,
                to: peer,
                nd: &nd,
                na: &nonce,
                id: shared.incarnation,
                ia: incarnation,
            };
            if !tr.verify(&shared.secret, Side::Accept, &tag) {
                return Err("peer failed authentication (wrong cluster secret?)"
                    .to_string()
                    .into());
            }
            (nonce, incarnation)
        }
        Hello::Refused { reason } => return Err(ConnectError::Refused(reason)),
        other => return Err(format!("unexpected handshake message {other:?}").into()),
    };
    let link = shared.peers[usize::from(peer)]
        .as_ref()
        .expect("dial only peers");
    {
        let mut inb = link.inbound.lock().expect("inbound lock");
        match inb.incarnation {
            Some(k) if k != ia => {
                return Err(ConnectError::Restarted(format!(
                    "node {peer} restarted (run {ia:016x}, was {k:016x}) and lost the state the \
                     protocol needs (tokens, copies, queues); restart the whole cluster"
                )))
            }
            _ => inb.incarnation = Some(ia),
        }
    }
    let t = Transcript {
        cluster: &shared.cluster,
        from: shared.id,
        to: peer,
        nd: &nd,
        na: &na,
        id: shared.incarnation,
        ia,
    }
    .tag(&shared.secret, Side::Dial);
    fr.send(Bytes::from(wire::encode(&Hello::Auth { tag: t })))
        .await
        .map_err(|e| e.to_string())?;
    match next_hello(&mut fr).await? {
        Hello::Welcome { delivered } => Ok((fr, delivered)),
        Hello::Refused { reason } => Err(ConnectError::Refused(reason)),
        other => Err(format!("unexpected handshake message {other:?}").into()),
    }
}

async fn next_hello(fr: &mut Framed<TcpStream, LengthDelimitedCodec>) -> Result<Hello, String> {
    match timeout(HANDSHAKE_TIMEOUT, fr.next()).await {
        Err(_) => Err("handshake timed out".into()),
        Ok(None) => Err("connection closed during the handshake".into()),
        Ok(Some(Err(e))) => Err(format!("bad handshake frame: {e}")),
        Ok(Some(Ok(b))) => {
            wire::decode::<Hello>(&b).map_err(|e| format!("handshake does not decode: {e}"))
        }
    }
}

/// Accept peers' connections; each is served by its own task, which the listener's task
/// owns (stopping the node stops them).
async fn accept(shared: Arc<Shared>, listener: TcpListener, core: mpsc::UnboundedSender<Cmd>) {
    let mut conns = JoinSet::new();
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((s, addr)) => {
                    let Ok(permit) = pending.clone().try_acquire_owned() else {
                        let n = shared.reject();
                        if n.is_power_of_two() {
                            warn!(%addr, rejected = n, "closing connection: {MAX_PENDING_HANDSHAKES} handshakes in progress already (logged for the 1st, 2nd, 4th, 8th ... rejected connection)");
                        } else {
                            debug!(%addr, "closing connection: {MAX_PENDING_HANDSHAKES} handshakes in progress already");
                        }
                        continue;
                    };
                    let _ = s.set_nodelay(true);
                    conns.spawn(serve_peer(shared.clone(), s, addr, core.clone(), permit));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_peer(
    shared: Arc<Shared>,
    s: TcpStream,
    addr: SocketAddr,
    core: mpsc::UnboundedSender<Cmd>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let mut fr = Framed::new(s, codec());
    let (from, incarnation) = match handshake_accept(&shared, &mut fr).await {
        Ok(x) => x,
        Err(reason) => {
            let n = shared.reject();
            if n.is_power_of_two() {
                warn!(%addr, %reason, rejected = n, "closing connection: handshake failed (logged for the 1st, 2nd, 4th, 8th ... rejected connection)");
            } else {
                debug!(%addr, %reason, "closing connection: handshake failed");
            }
            return;
        }
    };
    let link = shared.peers[usize::from(from)]
        .as_ref()
        .expect("handshake checked the id");
    // Is this the run of `from` this node knows? Take over its inbound channel.
    let admitted = {
        let mut inb = link.inbound.lock().expect("inbound lock");
        match inb.incarnation {
            Some(k) if k != incarnation => Err(format!(
                "node {} knew an earlier run of node {from} (run {k:016x}; this is {incarnation:016x}); \
                 the protocol cannot take back the old run's tokens and copies: restart the whole cluster",
                shared.id
            )),
            _ => {
                inb.incarnation = Some(incarnation);
                inb.conn += 1;
                Ok((inb.conn, inb.delivered))
            }
        }
    };
    let (conn, delivered) = match admitted {
        Ok(x) => x,
        Err(reason) => {
            let n = shared.reject();
            if n.is_power_of_two() {
                warn!(%addr, peer = from, %reason, rejected = n, "refusing a new run of a known node");
            } else {
                debug!(%addr, peer = from, %reason, "refusing a new run of a known node");
            }
            let first = link.refused().is_none();
            link.refuse(format!("node {from} restarted; refused"));
            if first {
                let _ = core.send(Cmd::PeerRestarted { peer: from });
            }
            let _ = fr
                .send(Bytes::from(wire::encode(&Hello::Refused { reason })))
                .await;
            return;
        }
    };
    if fr
        .send(Bytes::from(wire::encode(&Hello::Welcome { delivered })))
        .await
        .is_err()
    {
        return;
    }
    drop(permit);
    link.incoming.store(true, Relaxed);
    debug!(%addr, peer = from, delivered, "peer authenticated");
    let mut acked = delivered;
    let mut ack_at: Option<Instant> = None;
    // The first heartbeat is one period away: an immediate tick would send an
    // acknowledgement of nothing ahead of the frames the peer is sending right now.
    let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    let reason = loop {
        let b = tokio::select! {
            b = fr.next() => b,
            _ = beat.tick() => {
                let d = link.inbound.lock().expect("inbound lock").delivered;
                if fr.send(Bytes::from(wire::encode(&wire::Ack { delivered: d }))).await.is_err() {
                    break None;
                }
                acked = d;
                continue;
            }
            _ = async { tokio::time::sleep_until(ack_at.expect("armed")).await }, if ack_at.is_some() => {
                ack_at = None;
                let d = link.inbound.lock().expect("inbound lock").delivered;
                if d > acked {
                    if fr.send(Bytes::from(wire::encode(&wire::Ack { delivered: d }))).await.is_err() {
                        break None;
                    }
                    acked = d;
                }
                continue;
            }
        };
        let b = match b {
            None => break None,
            Some(Err(e)) => break Some(format!("bad frame: {e}")),
            Some(Ok(b)) => b,
        };
        let env = match wire::decode::<wire::Envelope>(&b) {
            Ok(f) => f,
            Err(e) => break Some(format!("frame does not decode: {e}")),
        };
        // Token frames go to the core, agents frames to the agents engine.
        let cmd = match env.frame {
            wire::Payload::Token(f) => match check_frame(&f) {
                Ok(()) => Ok(Cmd::Deliver {
                    from: NodeId(from),
                    frame: Box::new(f),
                }),
                Err(e) => break Some(e),
            },
            wire::Payload::Agents(f) => Err(f),
        };
        let d = {
            let mut inb = link.inbound.lock().expect("inbound lock");
            if inb.conn != conn {
                // A newer connection from the same peer took over.
                break None;
            }
            if env.seq <= inb.delivered {
                link.duplicates.fetch_add(1, Relaxed);
                inb.delivered
            } else if env.seq == inb.delivered + 1 {
                inb.delivered = env.seq;
                link.received.fetch_add(1, Relaxed);
                shared.counters.frames_received.fetch_add(1, Relaxed);
                let sent = match cmd {
                    Ok(cmd) => core.send(cmd).is_ok(),
                    Err(f) => shared.agents.deliver(from, f),
                };
                if !sent {
                    return;
                }
                inb.delivered
            } else {
                break Some(format!(
                    "message {} after {}: a gap in the channel",
                    env.seq, inb.delivered
                ));
            }
        };
        if d >= acked + ACK_EVERY {
            if fr
                .send(Bytes::from(wire::encode(&wire::Ack { delivered: d })))
                .await
                .is_err()
            {
                break None;
            }
            acked = d;
            ack_at = None;
        } else if d > acked && ack_at.is_none() {
            ack_at = Some(Instant::now() + ACK_DELAY);
        }
    };
    {
        let inb = link.inbound.lock().expect("inbound lock");
        if inb.conn == conn {
            link.incoming.store(false, Relaxed);
        }
    }
    if let Some(reason) = reason {
        let n = shared.reject();
        if n.is_power_of_two() {
            warn!(%addr, peer = from, %reason, rejected = n, "closing connection from peer");
        } else {
            debug!(%addr, peer = from, %reason, "closing connection from peer");
        }
    }
}

/// The acceptor's side of the handshake up to the dialer's Auth; returns the dialer's id
/// and incarnation. (The Welcome or Refused is the caller's.)
async fn handshake_accept(
    shared: &Shared,
    fr: &mut Framed<TcpStream, LengthDelimitedCodec>,
) -> Result<(u16, u64), String> {
    let (from, nd, id) = match next_hello(fr).await? {
        Hello::Dial {
            version,
            cluster,
            from,
            to,
            nonce,
            incarnation,
        } => {
            if version != PROTOCOL_VERSION {
                return Err(format!(
                    "protocol version {version}, this node speaks {PROTOCOL_VERSION}"
                ));
            }
            if cluster != shared.cluster {
                return Err(format!(
                    "cluster {cluster:?}, this node is in {:?}",
                    shared.cluster
                ));
            }
            if to != shared.id {
                return Err(format!(
                    "addressed to node {to}, this is node {}",
                    shared.id
                ));
            }
            if usize::from(from) >= shared.n || from == shared.id {
                return Err(format!("unknown node id {from}"));
            }
            (from, nonce, incarnation)
        }
        other => return Err(format!("expected a Dial, got {other:?}")),
    };
    let na = wire::nonce();
    let tr = Transcript {
        cluster: &shared.cluster,
        from,
        to: shared.id,
        nd: &nd,
        na: &na,
        id,
        ia: shared.incarnation,
    };
    let t = tr.tag(&shared.secret, Side::Accept);
    fr.send(Bytes::from(wire::encode(&Hello::Challenge {
        nonce: na,
        incarnation: shared.incarnation,
        tag: t,
    })))
    .await
    .map_err(|e| e.to_string())?;
    match next_hello(fr).await? {
        Hello::Auth { tag } => {
            if !tr.verify(&shared.secret, Side::Dial, &tag) {
                return Err(format!(
                    "node {from} failed authentication (wrong cluster secret?)"
                ));
            }
        }
        other => return Err(format!("expected Auth, got {other:?}")),
    }
    Ok((from, id))
}
