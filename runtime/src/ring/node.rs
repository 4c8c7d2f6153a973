//! One ring node: the kernel's [`Server`] behind a TCP listener. It only routes: every
//! message it receives goes to [`Server::step`](hilock_kernel::ring::RingServer::step),
//! every output goes to the node or client it names, and after each step it tells the
//! membership service its view and whether it is settled in it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::ring::{Addr, ChordMsg, ClientId, NodeId, Slot, View};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::{
    dial, read_peer, ring, Frame, Outs, Reader, Server, R, RHO, SUSPECT_AFTER_BEATS,
    TICKS_PER_LEASE,
};
use tokio::time::Instant;

/// What a node shows of itself (for status and the tests' lost-lock check).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Its view (`None` before the membership service answered).
    pub view: Option<View>,
    /// Its entries (its own keys and those it replicates).
    pub slots: Vec<Slot>,
    /// Whether it has every arc it holds in its view.
    pub settled: bool,
    /// Kernel errors (an input the server refused); a correct run has none.
    pub errors: Vec<String>,
    /// Messages it stepped (every message it received).
    pub steps: u64,
    /// Answers it sent to clients.
    pub replies: u64,
    /// It lost its lease (could not renew it in time): it answers no request any more.
    pub lease_lost: bool,
    /// Suspicions of its predecessor it reported to the membership service.
    pub suspicions: u64,
    /// Clients it keeps an answer connection for: one per client incarnation (a client id
    /// and the incarnation its process drew) that sent a request on a connection still
    /// open (a closed connection is forgotten; its client's locks are not touched).
    pub clients: usize,
    /// Tasks reading a connection or the membership frames that have not ended yet (an
    /// ended one is reaped at once).
    pub readers: usize,
    /// The membership service told it its graceful leave is done ([`Frame::Left`]): it
    /// stopped because it was asked to.
    pub left: bool,
}

/// A running ring node.
#[derive(Debug)]
pub struct RingNode {
    id: u16,
    addr: SocketAddr,
    task: JoinHandle<()>,
    snap: watch::Receiver<Snapshot>,
}

enum Ev {
    /// A connection said who it is.
    Open(Addr, mpsc::UnboundedSender<Frame>),
    /// A frame on a connection.
    Frame(Addr, Frame),
    /// A client's frame, and the connection it came on (the client's answers go there).
    Client(ClientId, mpsc::UnboundedSender<Frame>, Frame),
    /// A client's connection closed.
    Closed(ClientId),
    /// The membership connection closed.
    MembershipGone,
}

/// How long a starting node waits for the membership service to take its connection and
/// answer it; the service answers at once, so a silent one is not a ring's service (or
/// not of this version).
const FIRST_ANSWER: Duration = Duration::from_secs(10);

impl RingNode {
    /// Starts node `id` on `listener`; `peers[i]` is slot `i`'s address (`None`: no such
    /// node); `membership` is the membership service's address. A service whose slot
    /// addresses differ refuses it ([`Frame::Misplaced`]): an error of kind
    /// [`std::io::ErrorKind::InvalidInput`] naming each slot and both its addresses. A
    /// service that does not answer within 10 s is an error of kind
    /// [`std::io::ErrorKind::TimedOut`] naming it.
    pub async fn start(
        id: u16,
        listener: TcpListener,
        peers: Arc<Vec<Option<SocketAddr>>>,
        membership: SocketAddr,
    ) -> std::io::Result<RingNode> {
        Self::start_waiting(id, listener, peers, membership, FIRST_ANSWER).await
    }

    /// [`RingNode::start`], waiting `first_answer` for the membership service.
    async fn start_waiting(
        id: u16,
        listener: TcpListener,
        peers: Arc<Vec<Option<SocketAddr>>>,
        membership: SocketAddr,
        first_answer: Duration,
    ) -> std::io::Result<RingNode> {
        let addr = listener.local_addr()?;
        let me = Addr::Node(NodeId(id));
        let silent = || {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the membership service at {membership} did not answer within {} ms: is it a \
                     hilock ring membership service of this version?",
                    first_answer.as_millis()
                ),
            )
        };
        let (mut mreader, mtx) = tokio::time::timeout(first_answer, dial(membership, me))
            .await
            .map_err(|_| silent())??;
        // Its slot addresses first: the membership service answers with the current view,
        // or refuses a node whose addresses differ from its own.
        let _ = mtx.send(Frame::Peers(peers.to_vec()));
        let first = tokio::time::timeout(first_answer, mreader.next())
            .await
            .map_err(|_| silent())?;
        let mut view = match first {
            Some(Frame::Current(v)) => v,
            Some(Frame::Misplaced(diffs)) => {
                let at = format!("at the membership service at {membership}");
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "ring node {id}: {}",
                        super::misplaced_words(&diffs, "here", &at)
                    ),
                ));
            }
            other => {
                return Err(std::io::Error::other(format!(
                    "membership answered {other:?}"
                )))
            }
        };
        // The first lease, before anything is served; what comes meanwhile is kept. Asked
        // again every 200 ms: the service grants none while this slot is being removed,
        // nor to a new run of a member until the earlier run was removed (a restart). To
        // such a run it sends the view without its slot before the lease: the server
        // starts there, outside the view with no arc, and what came before is dropped; the
        // service then has it join, and the kernel's join hands it its arcs.
        let mut seq = 0;
        let mut sent = Instant::now();
        let _ = mtx.send(Frame::Renew(seq));
        let mut early = Vec::new();
        let lease = loop {
            match tokio::time::timeout(Duration::from_millis(200), mreader.next()).await {
                Ok(Some(Frame::Lease { seq: s, ms })) if s == seq => {
                    break Duration::from_millis(ms.into())
                }
                Ok(Some(Frame::Lease { .. })) => {}
                Ok(Some(Frame::Current(v))) => {
                    view = v;
                    early.clear();
                }
                Ok(Some(f)) => early.push(f),
                Ok(None) => {
                    return Err(std::io::Error::other(
                        "the membership service closed before granting a lease",
                    ))
                }
                Err(_) => {
                    seq += 1;
                    sent = Instant::now();
                    let _ = mtx.send(Frame::Renew(seq));
                }
            }
        };
        let server = Server::new(NodeId(id), ring(), R, view)
            .map_err(|e| std::io::Error::other(format!("ring server: {e}")))?;
        let (snap_tx, snap) = watch::channel(Snapshot::default());
        let lease = Lease {
            len: lease,
            until: sent + lease.mul_f64(1.0 - RHO),
            sent: HashMap::new(),
            next: seq + 1,
            external: None,
        };
        let task = tokio::spawn(run(
            server,
            listener,
            peers,
            Control::Service(mreader),
            early,
            mtx,
            lease,
            snap_tx,
        ));
        Ok(RingNode {
            id,
            addr,
            task,
            snap,
        })
    }

    /// Its slot.
    pub fn id(&self) -> u16 {
        self.id
    }
    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// What it shows now.
    pub fn snapshot(&self) -> Snapshot {
        self.snap.borrow().clone()
    }
    /// Whether it has stopped (left, or its membership connection closed).
    pub fn stopped(&self) -> bool {
        self.task.is_finished()
    }
    /// Stops it at once, as `kill -9` does to a process: every socket it has is dropped
    /// (closed by the runtime), nothing more is sent.
    pub fn kill(self) {
        self.task.abort();
    }
}

/// The node's lease with the membership service.
struct Lease {
    /// Its length (the service's word).
    len: Duration,
    /// Valid until then, by this node's clock: `L·(1 − RHO)` after sending the renewal the
    /// service granted last.
    until: Instant,
    /// When each unanswered renewal was sent.
    sent: HashMap<u64, Instant>,
    /// The next renewal's number.
    next: u64,
    /// Etcd mode: the lease is kept by etcd's keep-alive ([`super::etcd`]); this says until
    /// when it is valid by this node's clock (`None`: lost for good). The node then sends
    /// no renewals of its own and takes `until` from here before every step.
    pub(crate) external: Option<watch::Receiver<Option<Instant>>>,
}

/// Where the node's membership frames come from: the membership service's connection, or
/// (etcd mode) the node's etcd task, which also runs beside the node and ends with it.
pub(crate) enum Control {
    Service(Reader),
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Local {
        rx: mpsc::UnboundedReceiver<Frame>,
        task: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    },
}

impl RingNode {
    /// A node whose membership frames come from `control` (etcd mode).
    #[allow(clippy::too_many_arguments)]
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn spawn(
        id: u16,
        addr: SocketAddr,
        server: Server,
        listener: TcpListener,
        peers: Arc<Vec<Option<SocketAddr>>>,
        control: Control,
        mtx: mpsc::UnboundedSender<Frame>,
        lease: (Duration, watch::Receiver<Option<Instant>>),
    ) -> RingNode {
        let (snap_tx, snap) = watch::channel(Snapshot::default());
        let until = lease.1.borrow().unwrap_or_else(Instant::now);
        let lease = Lease {
            len: lease.0,
            until,
            sent: HashMap::new(),
            next: 0,
            external: Some(lease.1),
        };
        let task = tokio::spawn(run(
            server,
            listener,
            peers,
            control,
            Vec::new(),
            mtx,
            lease,
            snap_tx,
        ));
        RingNode {
            id,
            addr,
            task,
            snap,
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    mut server: Server,
    listener: TcpListener,
    peers: Arc<Vec<Option<SocketAddr>>>,
    control: Control,
    early: Vec<Frame>,
    mtx: mpsc::UnboundedSender<Frame>,
    mut lease: Lease,
    snap_tx: watch::Sender<Snapshot>,
) {
    let me = server.id();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Ev>();
    for f in early {
        let _ = ev_tx.send(Ev::Frame(Addr::Chord, f));
    }
    let period = lease.len / TICKS_PER_LEASE;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The predecessor this node watches and when it last heard a beat of it.
    let mut watched: Option<(NodeId, Instant)> = None;
    let mut last_beat: HashMap<NodeId, Instant> = HashMap::new();
    // Every reader of this node lives in `readers`: aborting the node drops them all.
    let mut readers = JoinSet::new();
    {
        let ev_tx = ev_tx.clone();
        match control {
            Control::Service(mut mreader) => readers.spawn(async move {
                while let Some(f) = mreader.next().await {
                    if ev_tx.send(Ev::Frame(Addr::Chord, f)).is_err() {
                        return;
                    }
                }
                let _ = ev_tx.send(Ev::MembershipGone);
            }),
            Control::Local { mut rx, task } => {
                readers.spawn(task);
                readers.spawn(async move {
                    while let Some(f) = rx.recv().await {
                        if ev_tx.send(Ev::Frame(Addr::Chord, f)).is_err() {
                            return;
                        }
                    }
                    let _ = ev_tx.send(Ev::MembershipGone);
                })
            }
        };
    }
    // Answer connections by client id and incarnation: two processes given one client id
    // each get the answers to their own requests.
    let mut clients: HashMap<(ClientId, u64), mpsc::UnboundedSender<Frame>> = HashMap::new();
    let mut links: HashMap<NodeId, mpsc::UnboundedSender<Frame>> = HashMap::new();
    let mut snap = Snapshot {
        view: Some(server.view()),
        slots: server.slots().to_vec(),
        settled: server.settled_in(server.view()),
        readers: readers.len(),
        ..Snapshot::default()
    };
    let mut last_status = None;
    // The step's outputs: one buffer on the heap for the node's life (see [`Outs`]).
    let mut out = Outs::with_room(Server::MAX_OUTPUTS);
    report(&server, &mtx, &mut last_status);
    snap_tx.send_replace(snap.clone());
    loop {
        // Etcd mode: the lease's end as etcd's keep-alive last said it.
        if let Some(ext) = &lease.external {
            lease.until = (*ext.borrow()).unwrap_or_else(Instant::now);
        }
        // Before anything else: a node whose lease ran out answers nothing any more (after
        // a pause, this is the first thing it does).
        if !server.stopped() && Instant::now() >= lease.until {
            tracing::warn!("ring node {}: lease lost; answering no request", me.0);
            server.stop();
            snap.lease_lost = true;
            snap_tx.send_replace(snap.clone());
        }
        // A node that lost its lease ends once the service removed it.
        if server.stopped() && !server.view().has(me) {
            return;
        }
        tokio::select! {
            _ = tick.tick() => {
                let now = Instant::now();
                // The clock first (the wait may have been a pause); then nothing more.
                if server.stopped() || now >= lease.until {
                    continue;
                }
                // Renew the lease every quarter lease (etcd mode: etcd's keep-alive does).
                let last = lease.sent.values().max().copied();
                if lease.external.is_none() && last.is_none_or(|t| now >= t + lease.len / 4) {
                    lease.sent.insert(lease.next, now);
                    let _ = mtx.send(Frame::Renew(lease.next));
                    lease.next += 1;
                }
                lease.sent.retain(|_, t| now < *t + lease.len);
                // Beat to the successor.
                let v = server.view();
                let ring = ring();
                if let Some(next) = ring.next(v, me).filter(|n| *n != me && v.has(me)) {
                    send_node(&mut links, &server, me, &peers, next, Frame::Beat);
                }
                // Watch the predecessor.
                let pred = ring.prev(v, me).filter(|p| *p != me && v.has(me));
                match (pred, watched) {
                    (None, _) => watched = None,
                    (Some(p), Some((w, _))) if p == w => {}
                    // A new predecessor: it gets a full grace period.
                    (Some(p), _) => watched = Some((p, now)),
                }
                if let Some((p, since)) = watched {
                    let heard = last_beat.get(&p).copied().unwrap_or(since).max(since);
                    if now >= heard + period * SUSPECT_AFTER_BEATS {
                        snap.suspicions += 1;
                        tracing::info!("ring node {}: predecessor {} sends no beats", me.0, p.0);
                        let _ = mtx.send(Frame::Suspect(p.0));
                        snap_tx.send_replace(snap.clone());
                    }
                }
            }
            acc = listener.accept() => {
                let Ok((s, _)) = acc else { continue };
                let ev_tx = ev_tx.clone();
                readers.spawn(async move {
                    let from = read_peer(s, ev_tx.clone(), Ev::Open, |from, tx, f| match from {
                        Addr::Client(c) => Ev::Client(c, tx.clone(), f),
                        _ => Ev::Frame(from, f),
                    })
                    .await;
                    if let Some(Addr::Client(c)) = from {
                        let _ = ev_tx.send(Ev::Closed(c));
                    }
                });
                snap.readers = readers.len();
            }
            // An ended reader is reaped (a JoinSet keeps every ended task until joined).
            Some(_) = readers.join_next(), if !readers.is_empty() => {
                snap.readers = readers.len();
                snap_tx.send_replace(snap.clone());
            }
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { return };
                let (from, msg) = match ev {
                    // A client's answer connection is known from its first request (which
                    // names its incarnation).
                    Ev::Open(Addr::Client(_), _) => continue,
                    Ev::Closed(c) => {
                        // Forget the client's answer connection if it was the one that
                        // closed: its reader has ended, so this map holds the connection's
                        // only sender (a connection the client opened since is still read,
                        // its reader holds another). The client's locks stay as they are:
                        // a lock belongs to the client's incarnation, not to a connection
                        // (`docs/faults.md`, "Ring engine").
                        clients.retain(|(id, _), tx| *id != c || tx.strong_count() > 1);
                        snap.clients = clients.len();
                        snap_tx.send_replace(snap.clone());
                        continue;
                    }
                    Ev::Open(Addr::Chord, tx) => {
                        // A status probe (`hilock ring status`): what this node holds.
                        let _ = tx.send(Frame::Report(super::NodeReport {
                            view: server.view(),
                            settled: server.settled_in(server.view()),
                            lease_lost: server.stopped(),
                            entries: server
                                .slots()
                                .iter()
                                .map(|x| (x.key.0, x.holder.map(|c| c.0)))
                                .collect(),
                            slots: server.slots().to_vec(),
                        }));
                        continue;
                    }
                    Ev::Open(Addr::Node(p), _) => {
                        // A peer dialled in again: the acknowledgements it sent on its old
                        // connection may be lost, so it gets every replica write it has not
                        // acknowledged again (`docs/faults.md`, "Ring engine", a cut
                        // shorter than the lease).
                        let tx = links.entry(p).or_insert_with(|| link(me, p, &peers));
                        resend_owed(&server, me, p, tx);
                        continue;
                    }
                    Ev::MembershipGone => return,
                    Ev::Frame(Addr::Chord, Frame::Left) => {
                        snap.left = true;
                        snap_tx.send_replace(snap.clone());
                        return;
                    }
                    Ev::Frame(Addr::Chord, Frame::Lease { seq, ms }) => {
                        if let Some(t) = lease.sent.remove(&seq) {
                            let until = t + Duration::from_millis(ms.into()).mul_f64(1.0 - RHO);
                            lease.until = lease.until.max(until);
                        }
                        continue;
                    }
                    Ev::Frame(Addr::Node(n), Frame::Beat) => {
                        last_beat.insert(n, Instant::now());
                        continue;
                    }
                    Ev::Client(c, tx, Frame::Msg(m)) => {
                        // Answers go to the connection of the incarnation's latest request
                        // (a client that dialled again).
                        let incarnation = match &*m {
                            ChordMsg::Request { token, .. } => token.incarnation,
                            _ => 0,
                        };
                        clients.insert((c, incarnation), tx);
                        snap.clients = clients.len();
                        (Addr::Client(c), m)
                    }
                    Ev::Client(..) => continue,
                    Ev::Frame(from, Frame::Msg(m)) => (from, m),
                    Ev::Frame(..) => continue,
                };
                // The clock first: the wait for this event may have been a pause.
                if let Some(ext) = &lease.external {
                    lease.until = (*ext.borrow()).unwrap_or_else(Instant::now);
                }
                if !server.stopped() && Instant::now() >= lease.until {
                    tracing::warn!("ring node {}: lease lost; answering no request", me.0);
                    server.stop();
                    snap.lease_lost = true;
                }
                snap.steps += 1;
                let before = server.view();
                if let Err(e) = server.step(from, &msg, &mut out) {
                    let full = if e == hilock_kernel::ring::ChordError::TableFull {
                        format!(
                            " (a node's table holds {} keys, its own and its replicas'; a \
                             released key's entry makes room for a new one, so each entry \
                             is held or waits for its arc's hand-over, or as many writes \
                             wait for replicas: docs/engines/ring.md, \"Limits\")",
                            super::TABLE
                        )
                    } else {
                        String::new()
                    };
                    tracing::warn!(
                        "ring node {}: refused {} from {}: {e}{full}",
                        me.0,
                        words(&msg),
                        addr_words(from)
                    );
                    snap.errors.push(format!("{msg:?} from {from:?}: {e}"));
                    // The client is told, not left to wait for its whole bound.
                    if let (Addr::Client(c), ChordMsg::Request { token, .. }) = (from, &*msg) {
                        if let Some(tx) = clients.get(&(c, token.incarnation)) {
                            let why = format!("node {}: {e}{full}", me.0);
                            let _ = tx.send(Frame::Refused { token: *token, why });
                        }
                    }
                }
                // A member that joins may be a new process at the address of a crashed
                // one: a link dialled to the old process would lose the first frame
                // written after its end (the hand-over), so it is dialled afresh.
                let joined = server.view().members & !before.members;
                if server.view().epoch != before.epoch && joined != 0 {
                    links.retain(|n, _| joined & (1 << n.0) == 0);
                }
                for o in out.drain() {
                    if let (Addr::Node(p), ChordMsg::ReplicaFull { key, .. }) = (o.to, &o.msg) {
                        tracing::warn!(
                            "ring node {}: no room for node {}'s write of key {:#06x}: its \
                             table of {} entries is full of held keys; refused, and the \
                             primary gives the lock back (docs/engines/ring.md, \"Limits\")",
                            me.0,
                            p.0,
                            key.0,
                            super::TABLE
                        );
                    }
                    match o.to {
                        Addr::Node(n) => {
                            send_node(&mut links, &server, me, &peers, n, Frame::Msg(Box::new(o.msg)));
                        }
                        Addr::Client(c) => {
                            snap.replies += 1;
                            let incarnation = match &o.msg {
                                ChordMsg::Reply { token, .. } => token.incarnation,
                                _ => 0,
                            };
                            if let Some(tx) = clients.get(&(c, incarnation)) {
                                let _ = tx.send(Frame::Msg(Box::new(o.msg)));
                            }
                        }
                        Addr::Chord => {}
                    }
                }
                report(&server, &mtx, &mut last_status);
                snap.view = Some(server.view());
                snap.slots = server.slots().to_vec();
                snap.settled = server.settled_in(server.view());
                snap_tx.send_replace(snap.clone());
            }
        }
    }
}

/// Tells the membership service the node's view and whether it is settled, when that
/// changed.
fn report(server: &Server, mtx: &mpsc::UnboundedSender<Frame>, last: &mut Option<(View, bool)>) {
    let now = (server.view(), server.settled_in(server.view()));
    if *last != Some(now) {
        *last = Some(now);
        let _ = mtx.send(Frame::Status {
            view: now.0,
            settled: now.1,
        });
    }
}

/// Sends `f` to peer `n` on the link this node dialled. When that link's task has ended
/// (the peer was down or the connection broke) it dials a fresh one once and first sends
/// the peer again every replica write it has not acknowledged
/// ([`RingServer::reconnected`](hilock_kernel::ring::RingServer::reconnected): what the
/// broken connection may have lost, `docs/faults.md`, "Ring engine"); if that dial fails
/// too, the frame is lost with the peer, as in the model's crash.
fn send_node(
    links: &mut HashMap<NodeId, mpsc::UnboundedSender<Frame>>,
    server: &Server,
    me: NodeId,
    peers: &Arc<Vec<Option<SocketAddr>>>,
    n: NodeId,
    f: Frame,
) {
    let tx = links.entry(n).or_insert_with(|| link(me, n, peers));
    if let Err(mpsc::error::SendError(f)) = tx.send(f) {
        let tx = link(me, n, peers);
        resend_owed(server, me, n, &tx);
        let _ = tx.send(f);
        links.insert(n, tx);
    }
}

/// Queues on `tx` the copies of every write in progress that peer `p` has not
/// acknowledged (duplicates are acknowledged again by the replica, not applied twice).
fn resend_owed(server: &Server, me: NodeId, p: NodeId, tx: &mpsc::UnboundedSender<Frame>) {
    // On the heap, as a step's outputs are ([`Outs`]): room for one copy per entry.
    let mut again = Outs::with_room(super::TABLE);
    match server.reconnected(p, &mut again) {
        Ok(0) => {}
        Ok(k) => {
            tracing::info!(
                "ring node {}: {k} replica writes sent again to {}",
                me.0,
                p.0
            );
            for o in again.drain() {
                let _ = tx.send(Frame::Msg(Box::new(o.msg)));
            }
        }
        Err(e) => tracing::warn!("ring node {}: resend to {} refused: {e}", me.0, p.0),
    }
}

/// The link to peer `n`: a task that dials it and forwards frames until either side ends.
fn link(
    me: NodeId,
    n: NodeId,
    peers: &Arc<Vec<Option<SocketAddr>>>,
) -> mpsc::UnboundedSender<Frame> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    let addr = peers.get(n.idx()).copied().flatten();
    tokio::spawn(async move {
        let Some(addr) = addr else { return };
        let Ok((_r, w)) = dial(addr, Addr::Node(me)).await else {
            return;
        };
        while let Some(f) = rx.recv().await {
            if w.send(f).is_err() {
                return;
            }
        }
    });
    tx
}

/// A message in words for the log, not in its Rust form.
fn words(msg: &super::Msg) -> String {
    match msg {
        ChordMsg::Request { token, op, key, .. } => {
            format!("client {}'s {op:?} of key {:#06x}", token.client.0, key.0)
        }
        ChordMsg::Replicate { slot, token, .. } => format!(
            "the replica write of key {:#06x} for client {}",
            slot.key.0, token.client.0
        ),
        ChordMsg::Reply { token, .. } => format!("an answer to client {}", token.client.0),
        ChordMsg::ReplicaAck { key, .. } => {
            format!("a replica's acknowledgement of key {:#06x}", key.0)
        }
        other => {
            let name = format!("{other:?}");
            let name = name.split([' ', '(', '{']).next().unwrap_or("").to_string();
            format!("a {name} message")
        }
    }
}

/// Where a message came from, in words.
fn addr_words(a: Addr) -> String {
    match a {
        Addr::Node(n) => format!("node {}", n.0),
        Addr::Client(c) => format!("client {}", c.0),
        Addr::Chord => "the membership service".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{key_of, Membership, RingClient, SLOTS};

    /// The stack of the worker threads the nodes run on: an eighth of tokio's 2 MiB
    /// default. A step's outputs kept on the stack (about 340 KiB, see [`Outs`]) do not fit
    /// in it at any optimisation level, so a node that keeps them there overflows it (the
    /// test process aborts with "thread 'ring-small-stack' has overflowed its stack"). In
    /// a debug build that buffer, its copies and a reconnection's buffer made the node's
    /// frames about 2.4 MiB, past tokio's default, as soon as it had a peer.
    const SMALL_STACK: usize = 256 * 1024;

    /// A "membership service" that takes the connection and never answers (another
    /// program at that port, or a service of an older version) ends the start with one
    /// error naming it once the wait for the first answer is over ([`FIRST_ANSWER`], here
    /// 300 ms), instead of a wait for ever.
    #[tokio::test]
    async fn a_silent_membership_service_ends_the_start_with_an_error() {
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = silent.local_addr().unwrap();
        let accept = tokio::spawn(async move { silent.accept().await.map(|(s, _)| s) });
        let me = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peers = vec![None; SLOTS];
        peers[0] = Some(me.local_addr().unwrap());
        let wait = Duration::from_millis(300);
        let started = Instant::now();
        let run = RingNode::start_waiting(0, me, Arc::new(peers), at, wait);
        let e = match tokio::time::timeout(Duration::from_secs(10), run).await {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => panic!("started without a membership service"),
            Err(_) => panic!("still waiting after 10 s"),
        };
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains(&at.to_string()), "{e}");
        assert!(started.elapsed() >= wait);
        accept.abort();
    }

    /// Three ring nodes, their membership service and two clients run as tasks on worker
    /// threads with a [`SMALL_STACK`]: two nodes link to each other and serve a lock on
    /// each one's keys, a third joins (a hand-over to it) while both are held, and the
    /// locks are refused to another client, released and granted again; no server refused
    /// an input.
    #[test]
    fn ring_nodes_link_serve_and_hand_over_on_worker_threads_with_a_small_stack() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ring-small-stack")
            .thread_stack_size(SMALL_STACK)
            .enable_all()
            .build()
            .unwrap();
        // `block_on` runs its future on this thread: everything is spawned onto the workers.
        rt.block_on(async {
            let run = tokio::time::timeout(Duration::from_secs(30), small_stack_ring());
            tokio::spawn(run)
                .await
                .expect("the ring's task ended normally")
                .expect("the small-stack ring test ended within 30 s");
        });
    }

    async fn small_stack_ring() {
        let mut listeners = Vec::new();
        let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
        for a in addrs.iter_mut().take(3) {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            *a = Some(l.local_addr().unwrap());
            listeners.push(l);
        }
        let addrs = Arc::new(addrs);
        let membership = Membership::start(TcpListener::bind("127.0.0.1:0").await.unwrap(), 0b11)
            .await
            .unwrap();
        let maddr = membership.addr();
        let mut listeners = listeners.into_iter();
        let mut nodes = Vec::new();
        for id in 0..2 {
            let l = listeners.next().unwrap();
            nodes.push(RingNode::start(id, l, addrs.clone(), maddr).await.unwrap());
        }
        let limit = Duration::from_secs(10);
        let v = membership
            .wait_for(limit, |v| v.members == 0b11)
            .await
            .unwrap();
        // A path whose primary is each node.
        let paths: Vec<String> = (0..2u16)
            .map(|n| {
                (0..)
                    .map(|k| format!("/small{k}/x"))
                    .find(|p| ring().lookup(v, key_of(p)) == Some(NodeId(n)))
                    .unwrap()
            })
            .collect();
        let mut holder = RingClient::connect(1, addrs.clone(), maddr).await.unwrap();
        let mut other = RingClient::connect(2, addrs.clone(), maddr).await.unwrap();
        holder.limit = limit;
        other.limit = limit;
        for p in &paths {
            assert!(holder.lock(p).await.unwrap(), "{p} granted");
        }
        nodes.push(
            RingNode::start(2, listeners.next().unwrap(), addrs.clone(), maddr)
                .await
                .unwrap(),
        );
        membership.join(2);
        membership
            .wait_for(limit, |v| v.members == 0b111)
            .await
            .expect("slot 2 joined and the ring settled");
        for p in &paths {
            assert!(!other.lock(p).await.unwrap(), "{p} stays held");
            holder.unlock(p).await.unwrap();
            assert!(other.lock(p).await.unwrap(), "{p} granted once released");
            other.unlock(p).await.unwrap();
        }
        for n in &nodes {
            let s = n.snapshot();
            assert!(s.steps > 0, "node {} stepped", n.id());
            assert!(s.errors.is_empty(), "node {}: {:?}", n.id(), s.errors);
            assert!(!n.stopped(), "node {} runs", n.id());
        }
    }
}
