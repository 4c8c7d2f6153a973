//! One ring node: the kernel's [`Server`] behind a TCP listener. It only routes: every
//! message it receives goes to [`Server::step`](hilock_kernel::chord::RingServer::step),
//! every output goes to the node or client it names, and after each step it tells the
//! membership service its view and whether it is settled in it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hilock_kernel::chord::{Addr, ClientId, NodeId, Slot, View};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::{dial, read_peer, ring, Frame, Outs, Reader, Server, R};

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
    /// The membership connection closed.
    MembershipGone,
}

impl RingNode {
    /// Starts node `id` on `listener`; `peers[i]` is slot `i`'s address (`None`: no such
    /// node); `membership` is the membership service's address.
    pub async fn start(
        id: u16,
        listener: TcpListener,
        peers: Arc<Vec<Option<SocketAddr>>>,
        membership: SocketAddr,
    ) -> std::io::Result<RingNode> {
        let addr = listener.local_addr()?;
        let me = Addr::Node(NodeId(id));
        let (mut mreader, mtx) = dial(membership, me).await?;
        // The membership service answers with the current view.
        let view = match mreader.next().await {
            Some(Frame::Current(v)) => v,
            other => {
                return Err(std::io::Error::other(format!(
                    "membership answered {other:?}"
                )))
            }
        };
        let server = Server::new(NodeId(id), ring(), R, view)
            .map_err(|e| std::io::Error::other(format!("ring server: {e}")))?;
        let (snap_tx, snap) = watch::channel(Snapshot::default());
        let task = tokio::spawn(run(server, listener, peers, mreader, mtx, snap_tx));
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

async fn run(
    mut server: Server,
    listener: TcpListener,
    peers: Arc<Vec<Option<SocketAddr>>>,
    mut mreader: Reader,
    mtx: mpsc::UnboundedSender<Frame>,
    snap_tx: watch::Sender<Snapshot>,
) {
    let me = server.id();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Ev>();
    // Every reader of this node lives in `readers`: aborting the node drops them all.
    let mut readers = JoinSet::new();
    {
        let ev_tx = ev_tx.clone();
        readers.spawn(async move {
            while let Some(f) = mreader.next().await {
                if ev_tx.send(Ev::Frame(Addr::Chord, f)).is_err() {
                    return;
                }
            }
            let _ = ev_tx.send(Ev::MembershipGone);
        });
    }
    let mut clients: HashMap<ClientId, mpsc::UnboundedSender<Frame>> = HashMap::new();
    let mut links: HashMap<NodeId, mpsc::UnboundedSender<Frame>> = HashMap::new();
    let mut snap = Snapshot {
        view: Some(server.view()),
        slots: server.slots().to_vec(),
        settled: server.settled_in(server.view()),
        ..Snapshot::default()
    };
    let mut last_status = None;
    report(&server, &mtx, &mut last_status);
    snap_tx.send_replace(snap.clone());
    loop {
        tokio::select! {
            acc = listener.accept() => {
                let Ok((s, _)) = acc else { continue };
                let ev_tx = ev_tx.clone();
                readers.spawn(async move {
                    read_peer(s, ev_tx, Ev::Open, Ev::Frame).await;
                });
            }
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { return };
                let (from, msg) = match ev {
                    Ev::Open(Addr::Client(c), tx) => {
                        clients.insert(c, tx);
                        continue;
                    }
                    Ev::Open(..) => continue,
                    Ev::MembershipGone => return,
                    Ev::Frame(Addr::Chord, Frame::Left) => return,
                    Ev::Frame(from, Frame::Msg(m)) => (from, *m),
                    Ev::Frame(..) => continue,
                };
                let mut out = Outs::new();
                snap.steps += 1;
                if let Err(e) = server.step(from, &msg, &mut out) {
                    tracing::warn!("ring node {}: {msg:?} from {from:?} refused: {e}", me.0);
                    snap.errors.push(format!("{msg:?} from {from:?}: {e}"));
                }
                for o in out {
                    match o.to {
                        Addr::Node(n) => {
                            let tx = links.entry(n).or_insert_with(|| link(me, n, &peers));
                            if tx.send(Frame::Msg(Box::new(o.msg.clone()))).is_err() {
                                // The link task ended (the peer is down): try a fresh
                                // connection once; if that fails too, the message is lost
                                // with the peer, as in the model.
                                let tx = link(me, n, &peers);
                                let _ = tx.send(Frame::Msg(Box::new(o.msg)));
                                links.insert(n, tx);
                            }
                        }
                        Addr::Client(c) => {
                            snap.replies += 1;
                            if let Some(tx) = clients.get(&c) {
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
