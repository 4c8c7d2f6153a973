//! The membership service: the model's `Chord` actor (etcd's role in cluster mode). It
//! holds the view, announces each new one to every live node of the old and the new view
//! (`NewView`), and starts the next change only when each of them reports that it has
//! installed the view and has all its arcs. A node whose connection closes is down; its
//! removal is queued as a change like the others (the model's `Detect`).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::Arc;

use hilock_kernel::chord::{Addr, ChordMsg, NodeId, View};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::{read_peer, ring, Frame, MembershipState, Request};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Join(u16),
    Leave(u16),
    Remove(u16),
}

enum Ev {
    Open(Addr, mpsc::UnboundedSender<Frame>),
    Frame(Addr, Frame),
    Closed(Addr),
    Ask(Change),
}

/// A running membership service.
#[derive(Debug)]
pub struct Membership {
    addr: SocketAddr,
    ask: mpsc::UnboundedSender<Ev>,
    state: watch::Receiver<(View, bool)>,
    up: Arc<AtomicU16>,
    task: JoinHandle<()>,
}

impl Membership {
    /// Starts the service on `listener` with the initial members `initial` (bit per slot).
    pub async fn start(listener: TcpListener, initial: u16) -> std::io::Result<Membership> {
        let addr = listener.local_addr()?;
        let view = View {
            epoch: 0,
            members: initial,
        };
        ring()
            .check_view(view)
            .map_err(|e| std::io::Error::other(format!("initial view: {e}")))?;
        let (ask, rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel((view, true));
        let up = Arc::new(AtomicU16::new(0));
        let task = tokio::spawn(run(listener, view, ask.clone(), rx, state_tx, up.clone()));
        Ok(Membership {
            addr,
            ask,
            state,
            up,
            task,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Queues the join of slot `n` (done once the node is connected).
    pub fn join(&self, n: u16) {
        let _ = self.ask.send(Ev::Ask(Change::Join(n)));
    }
    /// Queues the graceful leave of slot `n`.
    pub fn leave(&self, n: u16) {
        let _ = self.ask.send(Ev::Ask(Change::Leave(n)));
    }
    /// The slots whose node is connected to the service (bit per slot).
    pub fn up(&self) -> u16 {
        self.up.load(Relaxed)
    }
    /// The current view and whether every live node of its change is settled in it.
    pub fn view(&self) -> (View, bool) {
        *self.state.borrow()
    }
    /// Waits until the view satisfies `f` and is settled, or `limit` passes.
    pub async fn wait_for(
        &self,
        limit: std::time::Duration,
        f: impl Fn(View) -> bool,
    ) -> Result<View, String> {
        let mut st = self.state.clone();
        let r = tokio::time::timeout(limit, st.wait_for(|(v, s)| *s && f(*v))).await;
        match r {
            Ok(Ok(v)) => Ok(v.0),
            _ => Err(format!("view {:?} after {limit:?}", self.view())),
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    view: View,
    /// The view before the change in progress (its nodes must install the new one too).
    old: View,
    up: u16,
    nodes: HashMap<u16, mpsc::UnboundedSender<Frame>>,
    clients: Vec<mpsc::UnboundedSender<Frame>>,
    /// `hilock ring join|leave` connections: they get every new [`MembershipState`].
    admins: Vec<mpsc::UnboundedSender<Frame>>,
    status: HashMap<u16, (View, bool)>,
    queue: VecDeque<Change>,
    leaving: Option<u16>,
}

impl State {
    fn state(&self) -> MembershipState {
        MembershipState {
            view: self.view,
            settled: self.settled() && self.leaving.is_none(),
            up: self.up,
            queued: self.queue.len() as u16,
        }
    }

    /// Every live node of the old or the new view has installed the view and is settled.
    fn settled(&self) -> bool {
        (0..16u16).all(|i| {
            let n = NodeId(i);
            let involved = self.view.has(n) || self.old.has(n);
            !involved || self.up & (1 << i) == 0 || self.status.get(&i) == Some(&(self.view, true))
        })
    }

    fn announce(&mut self, new: View) {
        self.old = self.view;
        self.view = new;
        for (i, tx) in &self.nodes {
            if self.up & (1 << i) != 0 && (self.old.has(NodeId(*i)) || new.has(NodeId(*i))) {
                let _ = tx.send(Frame::Msg(Box::new(ChordMsg::NewView(new))));
            }
        }
        self.clients.retain(|c| c.send(Frame::Current(new)).is_ok());
    }

    /// Starts the next change if the current one is done.
    fn advance(&mut self) {
        if !self.settled() {
            return;
        }
        if let Some(n) = self.leaving.take() {
            if let Some(tx) = self.nodes.get(&n) {
                let _ = tx.send(Frame::Left);
            }
        }
        let ring = ring();
        // Removals of crashed nodes first; a join waits for its node to connect.
        let pick = self
            .queue
            .iter()
            .position(|c| matches!(c, Change::Remove(_)))
            .or_else(|| {
                self.queue.iter().position(|c| match c {
                    Change::Join(n) => self.up & (1 << n) != 0,
                    _ => true,
                })
            });
        let Some(i) = pick else { return };
        let Some(c) = self.queue.remove(i) else {
            return;
        };
        let new = match c {
            Change::Join(n) if !self.view.has(NodeId(n)) => self.view.join(NodeId(n)),
            Change::Leave(n) | Change::Remove(n)
                if self.view.has(NodeId(n)) && self.view.members.count_ones() > 1 =>
            {
                self.view.leave(NodeId(n))
            }
            _ => return self.advance(),
        };
        if ring.check_view(new).is_err() {
            return self.advance();
        }
        if let Change::Leave(n) = c {
            self.leaving = Some(n);
        }
        tracing::info!("ring membership: {c:?}: view {new:?}");
        self.announce(new);
    }
}

async fn run(
    listener: TcpListener,
    view: View,
    ev_tx: mpsc::UnboundedSender<Ev>,
    mut rx: mpsc::UnboundedReceiver<Ev>,
    state_tx: watch::Sender<(View, bool)>,
    up: Arc<AtomicU16>,
) {
    let mut st = State {
        view,
        old: view,
        up: 0,
        nodes: HashMap::new(),
        clients: Vec::new(),
        admins: Vec::new(),
        status: HashMap::new(),
        queue: VecDeque::new(),
        leaving: None,
    };
    let mut readers = JoinSet::new();
    let mut shown = None;
    loop {
        tokio::select! {
            acc = listener.accept() => {
                let Ok((s, _)) = acc else { continue };
                let ev_tx = ev_tx.clone();
                readers.spawn(async move {
                    if let Some(from) = read_peer(s, ev_tx.clone(), Ev::Open, Ev::Frame).await {
                        let _ = ev_tx.send(Ev::Closed(from));
                    }
                });
            }
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                match ev {
                    Ev::Open(Addr::Node(n), tx) => {
                        let _ = tx.send(Frame::Current(st.view));
                        st.nodes.insert(n.0, tx);
                        st.up |= 1 << n.0;
                    }
                    Ev::Open(Addr::Client(_), tx) => {
                        let _ = tx.send(Frame::Current(st.view));
                        st.clients.push(tx);
                    }
                    Ev::Open(Addr::Chord, tx) => {
                        let _ = tx.send(Frame::State(st.state()));
                        st.admins.push(tx);
                    }
                    Ev::Frame(Addr::Chord, Frame::Ask(r)) => match r {
                        Request::Join(n) if n < 16 => st.queue.push_back(Change::Join(n)),
                        Request::Leave(n) if n < 16 => st.queue.push_back(Change::Leave(n)),
                        _ => {}
                    },
                    Ev::Frame(Addr::Node(n), Frame::Status { view, settled }) => {
                        st.status.insert(n.0, (view, settled));
                    }
                    Ev::Frame(..) => {}
                    Ev::Closed(Addr::Node(n)) => {
                        st.up &= !(1 << n.0);
                        st.nodes.remove(&n.0);
                        if st.view.has(n) {
                            tracing::info!("ring membership: node {} is down", n.0);
                            st.queue.push_back(Change::Remove(n.0));
                        }
                    }
                    Ev::Closed(_) => {}
                    Ev::Ask(c) => st.queue.push_back(c),
                }
                st.advance();
                up.store(st.up, Relaxed);
                let now = st.state();
                state_tx.send_replace((now.view, now.settled));
                if shown != Some(now) {
                    shown = Some(now);
                    st.admins.retain(|a| a.send(Frame::State(now)).is_ok());
                }
            }
        }
    }
}
