//! The membership service: the model's `Chord` actor (etcd's role in cluster mode). It
//! holds the view, announces each new one to every live node of the old and the new view
//! (`NewView`), and starts the next change only when each of them reports that it has
//! installed the view and has all its arcs.
//!
//! # Leases and crash detection (the model's `Takeover::Lease`)
//! Every node holds a lease ([`Frame::Renew`] → [`Frame::Lease`]); the service counts it as
//! running out `L·(1 + RHO)` after it received the last renewal it granted, and grants no
//! renewal once it ran out (the node comes back only by joining again). The node counts
//! `L·(1 − RHO)` from when it sent the renewal and answers no request after that
//! ([`RingServer::stop`](hilock_kernel::ring::RingServer::stop)). A node's successor
//! reports it ([`Frame::Suspect`]) when it sent no beat for a while; the service removes a
//! member (the model's `Detect`) only when its successor suspects it AND its lease has run
//! out — never on a suspicion alone, and not because its connection to the service closed.
//! So the old primary has stopped before the view without it is announced. A member its
//! successor reported within the last two beat periods gets no renewal: a node cut off
//! from its successor but not from the service lets its lease run out and is removed like
//! a crashed one (`docs/faults.md`, "Ring engine").
//!
//! # Restarts
//! A node connects once per run, so a node connecting as a slot whose earlier run is a
//! member holding a lease is a new run with an empty table: it gets no lease until the
//! earlier run's lease ran out and the slot was removed, then the view without its slot
//! and its join (`State::restarted`).
//!
//! # Slot addresses
//! A node sends its address of every slot ([`Frame::Peers`]) right after its `Hello`, and
//! the service answers it only then. A service started with the ring's slot addresses
//! ([`Membership::start_with_slots`]: `hilock ring membership` gives its file's
//! `[[nodes]]`) refuses a node whose addresses differ in any slot — two slots swapped in
//! its `--peers` — with [`Frame::Misplaced`] before anything else: it is not counted as
//! connected, gets no view and no lease, so the ring never routes to it. A join of that
//! slot is then answered [`Answer::Misplaced`] until a node of the slot is let in.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::Arc;

use hilock_kernel::ring::{Addr, ChordMsg, NodeId, View};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::{
    read_peer, ring, slot_diffs, Answer, Frame, MembershipState, Request, SlotDiff, DEFAULT_LEASE,
    RHO, TICKS_PER_LEASE,
};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Join(u16),
    Leave(u16),
    Remove(u16),
}

enum Ev {
    Open(Addr, mpsc::UnboundedSender<Frame>),
    Frame(Addr, Frame),
    /// A frame from an administrator (`hilock ring join|leave`), and its connection (the
    /// answer goes there).
    Admin(mpsc::UnboundedSender<Frame>, Frame),
    /// A node's slot addresses ([`Frame::Peers`]), and its connection.
    Peers(u16, mpsc::UnboundedSender<Frame>, Vec<Option<SocketAddr>>),
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
    /// Starts the service on `listener` with the initial members `initial` (bit per slot)
    /// and the [`DEFAULT_LEASE`].
    pub async fn start(listener: TcpListener, initial: u16) -> std::io::Result<Membership> {
        Self::start_with_lease(listener, initial, DEFAULT_LEASE).await
    }

    /// [`Membership::start`] with the nodes' lease `lease` (at least 50 ms).
    pub async fn start_with_lease(
        listener: TcpListener,
        initial: u16,
        lease: Duration,
    ) -> std::io::Result<Membership> {
        Self::start_inner(listener, initial, lease, None).await
    }

    /// [`Membership::start_with_lease`] for the ring whose slot `i` is at `slots[i]`
    /// (`None`: no such node): a node whose slot addresses differ is refused
    /// ([`Frame::Misplaced`]).
    pub async fn start_with_slots(
        listener: TcpListener,
        initial: u16,
        lease: Duration,
        slots: Vec<Option<SocketAddr>>,
    ) -> std::io::Result<Membership> {
        Self::start_inner(listener, initial, lease, Some(slots)).await
    }

    async fn start_inner(
        listener: TcpListener,
        initial: u16,
        lease: Duration,
        slots: Option<Vec<Option<SocketAddr>>>,
    ) -> std::io::Result<Membership> {
        if lease < Duration::from_millis(50) || lease > Duration::from_secs(600) {
            return Err(std::io::Error::other("the lease must be 50 ms to 600 s"));
        }
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
        let task = tokio::spawn(run(
            listener,
            view,
            lease,
            slots,
            ask.clone(),
            rx,
            state_tx,
            up.clone(),
        ));
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
            _ => {
                let (v, settled) = self.view();
                Err(format!(
                    "view {} {}{} after {limit:?}",
                    v.epoch,
                    super::slots_of(v.members),
                    if settled { "" } else { " (not settled)" }
                ))
            }
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
    /// When each node's lease runs out, by the service's clock.
    expires: HashMap<u16, Instant>,
    /// Nodes whose lease ran out (bit per slot): no renewal any more, not waited for.
    expired: u16,
    /// Nodes their successor suspects (bit per slot).
    suspected: u16,
    /// When each node's successor last reported it (a suspicion is renewed every beat
    /// period while it lasts).
    suspected_at: HashMap<u16, Instant>,
    /// Nodes granted a lease since they were last removed (bit per slot).
    granted: u16,
    /// Slots whose new run connected while an earlier run of the slot was a member
    /// granted a lease (bit per slot): see [`State::restarted`].
    restarting: u16,
    /// Slots whose latest node was refused for its slot addresses, and how they differed
    /// (cleared when a node of the slot is let in).
    misplaced: HashMap<u16, Vec<SlotDiff>>,
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
            !involved
                || (self.up & !self.expired) & (1 << i) == 0
                || self.status.get(&i) == Some(&(self.view, true))
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

    /// A node connected as slot `n`. A node dials the service once per run (it ends when
    /// that connection closes), so if an earlier run of `n` is a member holding a lease,
    /// this is a new run — after a crash, a kill — with an empty table and an empty request
    /// memory. It must not serve `n`'s range as the member the earlier run was: it gets
    /// no lease until the earlier run's lease ran out and `n` was removed (its successor
    /// then serves the range from the replicas), and then it joins like a new node
    /// ([`State::renewal`]), handed its arcs over by the kernel's join.
    fn restarted(&mut self, n: u16) {
        let bit = 1u16 << n;
        if self.view.has(NodeId(n)) && self.granted & bit != 0 {
            tracing::info!(
                "ring membership: a new run of node {n} connected while the earlier run is a member: \
                 no lease until the earlier run's lease ran out and it was removed, then it joins"
            );
            self.restarting |= bit;
        }
    }

    /// Whether a renewal asked by slot `n` is granted: not once its lease ran out (such a
    /// node stopped serving and comes back only by joining again), not while it is being
    /// removed, not while its successor keeps suspecting it (reported within the last
    /// `window`: a node cut off from its successor but not from the service lets its lease
    /// run out and is removed like a crashed one, `docs/faults.md`, "Ring engine"), and
    /// not to a new run of a member ([`State::restarted`]) until the earlier run was
    /// removed; that first grant queues the new run's join.
    fn renewal(&mut self, n: u16, now: Instant, window: Duration) -> bool {
        let bit = 1u16 << n;
        let removing = self.queue.contains(&Change::Remove(n));
        let suspect = self.suspected_at.get(&n).is_some_and(|t| now < *t + window);
        let grant = self.expired & self.granted & bit == 0 && !removing && !suspect;
        if grant && self.restarting & bit != 0 {
            if self.view.has(NodeId(n)) {
                return false;
            }
            // Its first lease: it starts from the view without its slot, then joins.
            self.restarting &= !bit;
            tracing::info!("ring membership: the new run of node {n} joins");
            if let Some(tx) = self.nodes.get(&n) {
                let _ = tx.send(Frame::Current(self.view));
            }
            self.queue.push_back(Change::Join(n));
        }
        grant
    }

    /// An administrator asks for `r`. A leave of a slot that is not a member is refused
    /// (there is nothing to leave), and withdraws a join of the slot still queued: the
    /// slot stays out.
    fn ask(&mut self, r: Request) -> Answer {
        let (Request::Join(n) | Request::Leave(n)) = r;
        if n >= 16 {
            return Answer::NoSuchSlot;
        }
        match r {
            Request::Join(n) if self.up & (1 << n) == 0 && self.misplaced.contains_key(&n) => {
                return Answer::Misplaced(self.misplaced[&n].clone());
            }
            Request::Join(n) => self.queue.push_back(Change::Join(n)),
            Request::Leave(n) if !self.view.has(NodeId(n)) => {
                let before = self.queue.len();
                self.queue.retain(|c| *c != Change::Join(n));
                let withdrew = self.queue.len() < before;
                if withdrew {
                    tracing::info!("ring membership: leave of slot {n}, not a member: its queued join is withdrawn");
                }
                return Answer::NotMember {
                    view: self.view,
                    withdrew,
                };
            }
            Request::Leave(n) => self.queue.push_back(Change::Leave(n)),
        }
        Answer::Queued
    }

    /// An administrator withdraws `r`: removed from the queue if it has not started.
    fn withdraw(&mut self, r: Request) -> Answer {
        let c = match r {
            Request::Join(n) => Change::Join(n),
            Request::Leave(n) => Change::Leave(n),
        };
        let Some(i) = self.queue.iter().position(|x| *x == c) else {
            return Answer::Withdrawn(false);
        };
        self.queue.remove(i);
        tracing::info!("ring membership: {r} withdrawn before it started");
        Answer::Withdrawn(true)
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
        if let Change::Remove(n) | Change::Leave(n) = c {
            // Out of the view: a new incarnation may get a lease (which clears `expired`)
            // and join again; until then a node whose lease ran out is not waited for.
            let bit = !(1u16 << n);
            (self.granted, self.suspected) = (self.granted & bit, self.suspected & bit);
            self.suspected_at.remove(&n);
            self.expires.remove(&n);
        }
        let what = match c {
            Change::Join(n) => format!("slot {n} joins"),
            Change::Leave(n) => format!("slot {n} leaves"),
            Change::Remove(n) => format!("slot {n} removed"),
        };
        tracing::info!(
            "ring membership: {what}: view {} {}",
            new.epoch,
            super::slots_of(new.members)
        );
        self.announce(new);
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    listener: TcpListener,
    view: View,
    lease: Duration,
    slots: Option<Vec<Option<SocketAddr>>>,
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
        expires: HashMap::new(),
        expired: 0,
        suspected: 0,
        suspected_at: HashMap::new(),
        granted: 0,
        restarting: 0,
        misplaced: HashMap::new(),
    };
    // The service counts a lease L·(1 + RHO) from a renewal's receipt; every first member
    // is counted as holding one from now.
    let service_lease = lease.mul_f64(1.0 + RHO);
    let ms = u32::try_from(lease.as_millis()).unwrap_or(u32::MAX);
    let t0 = Instant::now();
    for i in 0..16u16 {
        if view.has(NodeId(i)) {
            st.expires.insert(i, t0 + service_lease);
        }
    }
    let beat = lease / TICKS_PER_LEASE;
    let mut tick = tokio::time::interval(beat);
    let mut readers = JoinSet::new();
    let mut shown = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = Instant::now();
                for (i, t) in &st.expires {
                    if now >= *t && st.expired & (1 << i) == 0 {
                        tracing::info!("ring membership: the lease of node {i} ran out");
                        st.expired |= 1 << i;
                    }
                }
                // Remove a member only if its lease ran out and its successor suspects it or
                // a new run of it connected (not the only member: its entries have no
                // replica, and a new run of it gets no lease).
                let many = st.view.members.count_ones() > 1;
                for i in 0..16u16 {
                    let bit = 1 << i;
                    let queued = st.queue.contains(&Change::Remove(i));
                    let gone = (st.suspected | st.restarting) & st.expired & bit != 0;
                    if gone && many && st.view.has(NodeId(i)) && !queued {
                        tracing::info!("ring membership: node {i} suspected by its successor or started again, lease out: removing it");
                        st.queue.push_back(Change::Remove(i));
                    }
                }
            }
            acc = listener.accept() => {
                let Ok((s, _)) = acc else { continue };
                let ev_tx = ev_tx.clone();
                readers.spawn(async move {
                    if let Some(from) = read_peer(s, ev_tx.clone(), Ev::Open, |a, tx, f| match (a, f) {
                        (Addr::Chord, f) => Ev::Admin(tx.clone(), f),
                        (Addr::Node(n), Frame::Peers(p)) => Ev::Peers(n.0, tx.clone(), p),
                        (a, f) => Ev::Frame(a, f),
                    }).await {
                        let _ = ev_tx.send(Ev::Closed(from));
                    }
                });
            }
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                match ev {
                    // A node is answered once it sent its slot addresses.
                    Ev::Open(Addr::Node(_), _) => {}
                    Ev::Peers(n, tx, peers) => {
                        let diffs = match &slots {
                            Some(ours) if n < 16 => slot_diffs(&peers, ours),
                            _ => Vec::new(),
                        };
                        if !diffs.is_empty() {
                            tracing::warn!(
                                "ring membership: node {n} refused: {}",
                                super::misplaced_words(&diffs, "at that node", "here")
                            );
                            let _ = tx.send(Frame::Misplaced(diffs.clone()));
                            st.misplaced.insert(n, diffs);
                            continue;
                        }
                        st.misplaced.remove(&n);
                        let n = NodeId(n);
                        if n.0 < 16 {
                            st.restarted(n.0);
                        }
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
                    Ev::Admin(tx, Frame::Ask(r)) => {
                        let _ = tx.send(Frame::Answer(st.ask(r)));
                    }
                    Ev::Admin(tx, Frame::Withdraw(r)) => {
                        let _ = tx.send(Frame::Answer(st.withdraw(r)));
                    }
                    Ev::Admin(..) => {}
                    Ev::Frame(Addr::Node(n), Frame::Status { view, settled }) => {
                        st.status.insert(n.0, (view, settled));
                    }
                    Ev::Frame(Addr::Node(n), Frame::Renew(seq)) if n.0 < 16 => {
                        let bit = 1 << n.0;
                        if st.renewal(n.0, Instant::now(), beat * 2) {
                            st.granted |= bit;
                            st.expired &= !bit;
                            st.suspected &= !bit;
                            st.expires.insert(n.0, Instant::now() + service_lease);
                            if let Some(tx) = st.nodes.get(&n.0) {
                                let _ = tx.send(Frame::Lease { seq, ms });
                            }
                        }
                    }
                    Ev::Frame(Addr::Node(n), Frame::Suspect(p)) if p < 16 => {
                        // Only the successor's word counts, and only about a member (a
                        // suspicion sent before the sender installed a view without `p`
                        // must not hold up the lease of a new run of `p` that joins).
                        let member = st.view.has(NodeId(p));
                        if member && st.view.has(n) && ring().next(st.view, NodeId(p)) == Some(n) {
                            st.suspected |= 1 << p;
                            st.suspected_at.insert(p, Instant::now());
                        }
                    }
                    Ev::Frame(..) => {}
                    Ev::Closed(Addr::Node(n)) => {
                        // Not a removal: only its successor's suspicion and the end of its
                        // lease remove it. Only if the connection kept is the one that
                        // closed (its reader has ended, so this map holds its only
                        // sender): a new run of the slot may have connected first.
                        if st.nodes.get(&n.0).is_some_and(|tx| tx.strong_count() > 1) {
                            continue;
                        }
                        st.up &= !(1 << n.0);
                        st.nodes.remove(&n.0);
                        if st.view.has(n) {
                            tracing::info!("ring membership: node {} disconnected", n.0);
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
