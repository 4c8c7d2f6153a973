//! A ring client: the kernel's [`ChordClient`] (Fig. 4: `lookup`, then the call; redirects
//! and retries) on sockets. One request at a time, routed with the membership service's
//! newest view. A request whose node went away (its connection closed), or that is not
//! answered while the service installs a newer view (its node paused or cut off), is sent
//! again with the service's current view ([`ChordClient::timeout`]), with the same request
//! number, so the new primary answers it from the entry instead of serving it twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::ring::{
    Addr, Answer, ChordClient, ChordError, ChordMsg, ClientEvent, ClientId, Key, NodeId, Op, Out,
    Slot, Token, View,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::{dial, ring, Frame, SLOTS, TABLE};

type COuts = heapless::Vec<Out<TABLE>, 1>;

/// How often a client waiting for an answer looks for a newer view.
const VIEW_CHECK: Duration = Duration::from_millis(100);

/// Why a request failed.
#[derive(Debug)]
pub enum ClientError {
    /// The kernel refused (a bug, or a client used wrongly).
    Kernel(ChordError),
    /// No answer within the bound.
    Timeout {
        /// What was asked.
        op: Op,
        /// The key.
        key: Key,
    },
    /// A read of the key's entry ([`RingClient::recorded`]: a hold's check) was not
    /// answered within the bound by a primary that serves it.
    Unread {
        /// The key.
        key: Key,
    },
    /// The membership service is unreachable.
    Membership(std::io::Error),
    /// The connection to the membership service closed: every node of a static ring
    /// stops when its own connection to the service closes, and a restarted ring has
    /// none of the old ring's locks (`docs/faults.md`, "Ring engine").
    ServiceGone(SocketAddr),
    /// The key's primary does not record the lock as held by this client.
    NotHeld(String),
    /// A node's kernel refused the request (as many of its writes wait for their replicas
    /// as its table holds): nothing was written.
    Refused {
        /// What was asked.
        op: Op,
        /// The key.
        key: Key,
        /// The node's words.
        why: String,
    },
    /// The ring has no room for the lock ([`Answer::Full`]): a table of a node that keeps
    /// the key's entry (its primary, or one of its replicas) is full of held keys. Not
    /// granted, and nothing of it is held: the ring gave the key back before answering.
    TableFull {
        /// The key.
        key: Key,
    },
    /// Another incarnation of this client id (another process given the id, or a killed
    /// run's hold) holds the key ([`Answer::InUse`]): not granted.
    IdInUse {
        /// The client id.
        id: u8,
        /// The key.
        key: Key,
    },
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Kernel(e) => write!(f, "ring client: {e}"),
            ClientError::Timeout { op, key } => {
                write!(f, "{op:?} of key {:#06x} not answered", key.0)
            }
            ClientError::Unread { key } => write!(
                f,
                "no primary that serves key {:#06x} answered the read of its entry",
                key.0
            ),
            ClientError::Membership(e) => write!(f, "membership service: {e}"),
            ClientError::ServiceGone(a) => write!(
                f,
                "the membership service at {a} went away (the ring's nodes stop with it \
                 and a restarted ring has none of its locks)"
            ),
            ClientError::Refused { op, key, why } => {
                write!(f, "{op:?} of key {:#06x} refused: {why}", key.0)
            }
            ClientError::TableFull { key } => write!(
                f,
                "key {:#06x} not granted: lock table full (a node that keeps the key's \
                 entry, its primary or a replica, has all {TABLE} entries held; nothing of \
                 the lock is left held, and it may be granted once keys are released: \
                 docs/engines/ring.md, \"Limits\")",
                key.0
            ),
            ClientError::IdInUse { id, key } => write!(
                f,
                "key {:#06x} is held by another process with client id {id}",
                key.0
            ),
            ClientError::NotHeld(path) => {
                write!(
                    f,
                    "the ring does not record the lock on {path} as this client's"
                )
            }
        }
    }
}

impl std::error::Error for ClientError {}

impl From<ChordError> for ClientError {
    fn from(e: ChordError) -> Self {
        ClientError::Kernel(e)
    }
}

/// A client of the ring.
#[derive(Debug)]
pub struct RingClient {
    kc: ChordClient<SLOTS>,
    nodes: Arc<Vec<Option<SocketAddr>>>,
    conns: HashMap<NodeId, mpsc::UnboundedSender<Frame>>,
    tx: mpsc::UnboundedSender<(NodeId, Option<Frame>)>,
    rx: mpsc::UnboundedReceiver<(NodeId, Option<Frame>)>,
    view: watch::Receiver<View>,
    /// The membership service whose connection [`RingClient::view`] follows (static
    /// mode): its sender is dropped when that connection closes.
    service: Option<SocketAddr>,
    target: Option<NodeId>,
    /// The end of the request in progress (bounds its dials too).
    deadline: tokio::time::Instant,
    tasks: JoinSet<()>,
    /// Bound on one request.
    pub limit: Duration,
    /// Requests sent again (redirect, retry or a node gone).
    pub resent: u64,
    /// The key of a lock this client gave up after sending it (its bound passed, or its
    /// caller stopped waiting): the ring may still grant it ([`RingClient::give_up`]).
    given_up: Option<Key>,
}

/// Where a client's views come from.
#[derive(Clone, Debug)]
pub enum Views {
    /// The membership service at this address.
    Service(SocketAddr),
    /// A view follower (etcd mode: `ring::etcd::follow_view`; or a test's fixed view).
    Watch(watch::Receiver<View>),
}

impl From<SocketAddr> for Views {
    fn from(a: SocketAddr) -> Views {
        Views::Service(a)
    }
}

impl RingClient {
    /// Client `id` of the ring whose nodes are at `nodes`, views from `membership`.
    pub async fn connect(
        id: u8,
        nodes: Arc<Vec<Option<SocketAddr>>>,
        membership: SocketAddr,
    ) -> Result<RingClient, ClientError> {
        Self::connect_to(id, nodes, Views::Service(membership)).await
    }

    /// Client `id` of the ring whose nodes are at `nodes`, views from `views`.
    pub async fn connect_to(
        id: u8,
        nodes: Arc<Vec<Option<SocketAddr>>>,
        views: Views,
    ) -> Result<RingClient, ClientError> {
        let mut tasks = JoinSet::new();
        let service = match views {
            Views::Service(a) => Some(a),
            Views::Watch(_) => None,
        };
        let (v, view) = match views {
            Views::Watch(w) => {
                let v = *w.borrow();
                (v, w)
            }
            Views::Service(membership) => {
                let (mut r, mtx) = dial(membership, Addr::Client(ClientId(id)))
                    .await
                    .map_err(ClientError::Membership)?;
                let Some(Frame::Current(v)) = r.next().await else {
                    return Err(ClientError::Membership(std::io::Error::other(
                        "no view from the membership service",
                    )));
                };
                let (vtx, view) = watch::channel(v);
                tasks.spawn(async move {
                    let _keep = mtx;
                    while let Some(f) = r.next().await {
                        if let Frame::Current(v) = f {
                            vtx.send_replace(v);
                        }
                    }
                });
                (v, view)
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // This process's incarnation of the id: drawn at random, so that another process
        // given the same id is another holder to the ring (`Answer::InUse`).
        let mut kc = ChordClient::new(ClientId(id), ring(), v)?.with_incarnation(rand::random());
        kc.resume_after(Token {
            client: ClientId(id),
            incarnation: kc.incarnation(),
            seq: clock_seq(),
        })?;
        Ok(RingClient {
            kc,
            nodes,
            conns: HashMap::new(),
            tx,
            rx,
            view,
            service,
            target: None,
            deadline: tokio::time::Instant::now(),
            tasks,
            limit: Duration::from_secs(20),
            resent: 0,
            given_up: None,
        })
    }

    /// Its id.
    pub fn id(&self) -> ClientId {
        self.kc.id()
    }

    /// Its incarnation of the id: a random number drawn when it connected
    /// ([`ChordClient::with_incarnation`](hilock_kernel::ring::ChordClient::with_incarnation)).
    pub fn incarnation(&self) -> u64 {
        self.kc.incarnation()
    }

    /// The number of its newest request (before the first: where its numbering starts,
    /// [`clock_seq`] at [`connect_to`](Self::connect_to)).
    pub fn seq(&self) -> u64 {
        self.kc.seq()
    }

    /// `c_lock(path)`: `true` if granted, `false` if another client holds it;
    /// [`ClientError::IdInUse`] if another incarnation of this client id holds it;
    /// [`ClientError::TableFull`] if the ring has no room for it.
    pub async fn lock(&mut self, path: &str) -> Result<bool, ClientError> {
        self.lock_as(Op::Lock, path).await
    }

    /// [`Op::TakeOver`] of `path`: as [`RingClient::lock`], but a hold of another
    /// incarnation of this client id is taken over (the caller vouches that the process
    /// that held it is dead: a killed `hilock lock` whose lock stayed held).
    pub async fn take_over(&mut self, path: &str) -> Result<bool, ClientError> {
        self.lock_as(Op::TakeOver, path).await
    }

    async fn lock_as(&mut self, op: Op, path: &str) -> Result<bool, ClientError> {
        let key = super::key_of(path);
        match self.call(op, key).await? {
            Answer::Granted => Ok(true),
            Answer::InUse => Err(ClientError::IdInUse {
                id: self.id().0,
                key,
            }),
            Answer::Full => Err(ClientError::TableFull { key }),
            _ => Ok(false),
        }
    }

    /// What the primary of `path`'s key records for it, read-only (nothing is written, no
    /// lock taken): its entry, `None` if it has none. Asks the primary in the newest view
    /// it knows (the service's, or a newer one a node reports) for its table
    /// ([`super::probe`]) and trusts only a primary that serves (its lease not lost), is
    /// settled (holds every arc it must) and has installed at least that view; otherwise
    /// it asks again every 50 ms until `limit` passed (`Timeout`).
    pub async fn recorded(&mut self, path: &str) -> Result<Option<Slot>, ClientError> {
        let key = super::key_of(path);
        let end = tokio::time::Instant::now() + self.limit;
        let mut newest = *self.view.borrow();
        loop {
            self.service_alive()?;
            let v = *self.view.borrow();
            if v.epoch > newest.epoch {
                newest = v;
            }
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(ClientError::Unread { key });
            }
            let primary = ring().lookup(newest, key);
            let addr = primary.and_then(|n| self.nodes.get(n.idx()).copied().flatten());
            if let Some(r) = match addr {
                Some(a) => super::probe(a, left).await,
                None => None,
            } {
                if r.view.epoch > newest.epoch {
                    newest = r.view;
                    continue;
                }
                if r.view.epoch == newest.epoch && r.settled && !r.lease_lost {
                    return Ok(r.slots.iter().find(|s| s.key == key).copied());
                }
            }
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(Duration::from_millis(50).min(left)).await;
        }
    }

    /// `Err(ClientError::ServiceGone)` once the connection to the membership service
    /// closed (static mode; never with views from a follower).
    fn service_alive(&self) -> Result<(), ClientError> {
        match self.service {
            Some(a) if self.view.has_changed().is_err() => Err(ClientError::ServiceGone(a)),
            _ => Ok(()),
        }
    }

    /// Continues this client's request numbers after the request the ring records for
    /// `path` if an earlier incarnation of this client id wrote it
    /// ([`ChordClient::resume_after`](hilock_kernel::ring::ChordClient::resume_after)),
    /// so that one id's numbers keep rising across its runs. The ring judges retries per
    /// incarnation, so this is not what lets a new run take a killed run's hold over
    /// ([`RingClient::take_over`] is). Reads the entry like [`RingClient::recorded`]
    /// (bounded the same way); sends no request.
    pub async fn resume(&mut self, path: &str) -> Result<(), ClientError> {
        if let Some(Slot {
            writer: Some(w), ..
        }) = self.recorded(path).await?
        {
            if w.client == self.id() {
                self.kc.resume_after(w)?;
            }
        }
        Ok(())
    }

    /// The hold of `path` this client was just granted, as its primary records it: the
    /// request that set the holder (kept by later requests of the same holder) and its
    /// fencing token. An error if the ring does not record this client as the holder.
    pub async fn grant(&mut self, path: &str) -> Result<Grant, ClientError> {
        match self.recorded(path).await? {
            Some(s) if s.holding() == Some(self.kc.holder()) => Ok(Grant {
                writer: s.writer,
                fence: (u64::from(s.version.epoch) << 32) | u64::from(s.version.n),
            }),
            _ => Err(ClientError::NotHeld(path.to_string())),
        }
    }

    /// `c_unlock(path)`.
    pub async fn unlock(&mut self, path: &str) -> Result<(), ClientError> {
        self.call(Op::Unlock, super::key_of(path)).await.map(|_| ())
    }

    /// Asks for the lock of `path` until it is granted or `limit` has passed: a refused
    /// lock is asked again 5 ms later, the pause doubling up to 200 ms. `Ok(true)`: granted;
    /// `Ok(false)`: another client held it until the end. Each request is bounded by what
    /// is left of `limit` (an error then: the last request may have been granted unseen).
    /// [`ClientError::IdInUse`] at once if another incarnation of this id holds it, and
    /// [`ClientError::TableFull`] at once if the ring has no room for it.
    pub async fn acquire(&mut self, path: &str, limit: Duration) -> Result<bool, ClientError> {
        self.acquire_as(Op::Lock, path, limit).await
    }

    /// [`RingClient::acquire`] with [`RingClient::take_over`]'s requests: a hold of
    /// another incarnation of this id is taken over.
    pub async fn acquire_taking_over(
        &mut self,
        path: &str,
        limit: Duration,
    ) -> Result<bool, ClientError> {
        self.acquire_as(Op::TakeOver, path, limit).await
    }

    async fn acquire_as(
        &mut self,
        op: Op,
        path: &str,
        limit: Duration,
    ) -> Result<bool, ClientError> {
        let end = tokio::time::Instant::now() + limit;
        let mut pause = Duration::from_millis(5);
        let bound = self.limit;
        // Asked at least once, even with a zero limit (then within the client's own bound
        // for one answer): "not granted" must come from the ring, not from the clock.
        let mut first = true;
        let r = loop {
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() && !first {
                break Ok(false);
            }
            self.limit = if left.is_zero() { bound } else { left };
            first = false;
            match self.lock_as(op, path).await {
                Ok(false) => {}
                r => break r,
            }
            let left = end.saturating_duration_since(tokio::time::Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        };
        self.limit = bound;
        r
    }

    async fn send(&mut self, out: COuts) {
        for o in out {
            let Addr::Node(n) = o.to else { continue };
            self.target = Some(n);
            if !self.conns.contains_key(&n) {
                let tx = self.open(n).await;
                self.conns.insert(n, tx);
            }
            let ok = self.conns[&n].send(Frame::Msg(Box::new(o.msg))).is_ok();
            if !ok {
                self.conns.remove(&n);
                let _ = self.tx.send((n, None));
            }
        }
    }

    /// A connection to node `n`; its frames (and its end, `None`) come on `self.rx`.
    async fn open(&mut self, n: NodeId) -> mpsc::UnboundedSender<Frame> {
        let back = self.tx.clone();
        let addr = self.nodes.get(n.idx()).copied().flatten();
        let me = Addr::Client(self.kc.id());
        // A dial that hangs (a node that does not accept) is bounded by the request's.
        let conn = match addr {
            Some(a) => tokio::time::timeout_at(self.deadline, dial(a, me))
                .await
                .ok()
                .and_then(|r| r.ok()),
            None => None,
        };
        match conn {
            Some((mut r, tx)) => {
                self.tasks.spawn(async move {
                    while let Some(f) = r.next().await {
                        if back.send((n, Some(f))).is_err() {
                            return;
                        }
                    }
                    let _ = back.send((n, None));
                });
                tx
            }
            None => {
                let _ = back.send((n, None));
                // A closed channel: the next send fails and reports the node gone.
                mpsc::unbounded_channel().0
            }
        }
    }

    async fn call(&mut self, op: Op, key: Key) -> Result<Answer, ClientError> {
        let deadline = tokio::time::Instant::now() + self.limit;
        self.deadline = deadline;
        let r = self.exchange(op, key, deadline).await;
        if r.is_err() {
            // Past its bound: give the request up so that the next one can start (without
            // this every later request was refused as `Busy`); a late answer is ignored.
            self.abandon();
        }
        r
    }

    /// Gives up the request it waits for, if any; a lock given up is remembered for
    /// [`RingClient::give_up`].
    fn abandon(&mut self) {
        if let Some((Op::Lock | Op::TakeOver, key)) = self.kc.abandon() {
            self.given_up = Some(key);
        }
    }

    /// Frees what a lock this client gave up may leave held: after a lock request that
    /// was not answered (a timeout, an error after it went out) or whose wait its caller
    /// dropped (an interrupted [`RingClient::acquire`]), the ring may still grant it — its
    /// primary or a replica was paused with the request on its way. This sends an unlock
    /// of that key, routed as the lock was (on the same connection, so a node that
    /// serves the lock later serves the unlock after it; the server keeps an unlock that
    /// reaches its own lock's write in progress until that write is done: `RingServer`,
    /// "Given-up locks"), and waits at most `limit` for its answer. `Ok(None)`: no lock
    /// was given up; `Ok(Some(key))`: the unlock of `key` was answered (nothing of the
    /// lock is held); an error: it was not, and the key may stay held by this client id
    /// until a `--take-over` run frees it.
    pub async fn give_up(&mut self, limit: Duration) -> Result<Option<Key>, ClientError> {
        self.abandon();
        let Some(key) = self.given_up.take() else {
            return Ok(None);
        };
        let bound = self.limit;
        self.limit = limit;
        let r = self.call(Op::Unlock, key).await;
        self.limit = bound;
        r.map(|_| Some(key))
    }

    async fn exchange(
        &mut self,
        op: Op,
        key: Key,
        deadline: tokio::time::Instant,
    ) -> Result<Answer, ClientError> {
        let mut out = COuts::new();
        // Route with the service's newest view.
        let v = *self.view.borrow();
        self.kc.learn(v)?;
        self.kc.start(op, key, &mut out)?;
        self.send(out).await;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout { op, key });
            }
            let wake = deadline.min(now + VIEW_CHECK);
            let ev = match tokio::time::timeout_at(wake, self.rx.recv()).await {
                Ok(ev) => ev,
                Err(_) => {
                    // No answer yet: if the service has installed a newer view since the
                    // request went out (its node may be paused or cut off, its connection
                    // still open), ask again with it, same request number.
                    let v = *self.view.borrow();
                    if self.kc.waiting().is_some() && v.epoch > self.kc.view().epoch {
                        let mut out = COuts::new();
                        self.kc.timeout(v, &mut out)?;
                        self.resent += 1;
                        self.send(out).await;
                    }
                    continue;
                }
            };
            let Some((n, f)) = ev else {
                return Err(ClientError::Timeout { op, key });
            };
            let mut out = COuts::new();
            if let Some(Frame::Refused { token, why }) = &f {
                let ours = token.holder() == self.kc.holder() && token.seq == self.kc.seq();
                if ours && self.kc.waiting().is_some() {
                    // Refused, so not given up: nothing of it is served later.
                    self.kc.abandon();
                    let why = why.clone();
                    return Err(ClientError::Refused { op, key, why });
                }
                continue;
            }
            let reply = match f {
                Some(Frame::Msg(m)) => match *m {
                    ChordMsg::Reply {
                        token,
                        epoch,
                        answer,
                    } => Some(Some((token, epoch, answer))),
                    _ => Some(None),
                },
                Some(_) => Some(None),
                None => None,
            };
            match reply {
                Some(Some((token, epoch, answer))) => {
                    if answer == Answer::Retry {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    let (e, _) = self.kc.on_reply(token, epoch, answer, &mut out)?;
                    match e {
                        ClientEvent::Done(_, _, a) => return Ok(a),
                        ClientEvent::Waiting => {
                            self.resent += 1;
                            self.send(out).await;
                        }
                        ClientEvent::Ignored => {}
                    }
                }
                Some(None) => {}
                None => {
                    self.conns.remove(&n);
                    if self.target == Some(n) && self.kc.waiting().is_some() {
                        // The node it asked is gone: ask again with the service's view.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let v = *self.view.borrow();
                        self.kc.timeout(v, &mut out)?;
                        self.resent += 1;
                        self.send(out).await;
                    }
                }
            }
        }
    }
}

/// Where a new client's request numbers start: the wall clock in microseconds since the
/// Unix epoch, so that one client id's request numbers keep rising across its processes
/// (as the entries' writers show them) while the clock does not go back. The ring judges
/// copies and stale retries per incarnation ([`RingClient::incarnation`]), so a new
/// process's requests are served whatever it numbers them.
pub fn clock_seq() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A hold as the key's primary records it ([`RingClient::grant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The request that set the holder (`Slot::writer`): a later grant of the key, to
    /// anyone, is another request.
    pub writer: Option<Token>,
    /// The fencing token: the entry's version (view epoch · 2^32 + the primary's write
    /// counter). Every later write of the key — another grant — has a higher version
    /// while the primary's 32-bit write counter does not wrap within one view (2^32
    /// writes of one node in one view).
    pub fence: u64,
}

/// Why a [`Held`] lock is no longer known to be held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// A check found another holder of the key: another client (the ring lost the entry —
    /// more than `r` adjacent nodes failed at once), or another incarnation of this client
    /// id that took the hold over ([`RingClient::take_over`]: a run started with
    /// `--take-over` while this one was alive).
    Taken(String),
    /// A check found the key free or held under another request of this incarnation (the
    /// ring lost the entry; another process cannot unlock it).
    Released(String),
    /// A check was not answered within its bound (the ring is unreachable), or the
    /// connection to the static ring's membership service closed.
    Unreachable(String),
}

/// A ring lock held for a command (`hilock lock` with a ring configuration): a task that
/// reads the lock's entry every `every` ([`RingClient::recorded`]: read-only, it never
/// takes the lock again), reports the first check that does not find the same hold (the
/// holder this client, set by the same request, [`Grant::writer`]) or is not answered,
/// and unlocks when released. The checks and the unlock never overlap: a release asked
/// during a check waits for its end. With a static ring's membership service, the close
/// of the connection to it is a loss at once ([`ClientError::ServiceGone`]): the ring's
/// nodes stop with it, and a ring started again knows nothing of this hold.
#[derive(Debug)]
pub struct Held {
    lost: mpsc::UnboundedReceiver<Loss>,
    release: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
    limit: Duration,
}

impl Held {
    /// Keeps the lock of `path`, which `client` holds; every check and the unlock are
    /// bounded by `limit`.
    pub fn start(
        mut client: RingClient,
        path: String,
        grant: Grant,
        every: Duration,
        limit: Duration,
    ) -> Held {
        let (lost_tx, lost) = mpsc::unbounded_channel();
        let (release, mut released) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            client.limit = limit;
            let mut checking = true;
            loop {
                tokio::select! {
                    _ = &mut released => break,
                    gone = client.view.changed(), if checking && client.service.is_some() => {
                        if gone.is_ok() {
                            continue;
                        }
                        checking = false;
                        if let Some(a) = client.service {
                            let _ = lost_tx.send(Loss::Unreachable(format!(
                                "lock on {path} lost: {}",
                                ClientError::ServiceGone(a)
                            )));
                        }
                    }
                    _ = tokio::time::sleep(every), if checking => {
                        let me = client.kc.holder();
                        let loss = match client.recorded(&path).await {
                            Ok(Some(s)) if s.holding() == Some(me) && s.writer == grant.writer => {
                                continue
                            }
                            Ok(Some(s)) if s.holding().is_some_and(|h| h != me) => Loss::Taken(
                                format!("lock on {path} lost: the ring granted it to another client"),
                            ),
                            Ok(_) => Loss::Released(format!(
                                "lock on {path} lost: the ring no longer records this hold \
                                 (unlocked under the command, or the entry was lost)"
                            )),
                            Err(e) => Loss::Unreachable(format!(
                                "lock on {path} lost: the ring did not answer ({e})"
                            )),
                        };
                        checking = false;
                        let _ = lost_tx.send(loss);
                    }
                }
            }
            client.unlock(&path).await.map_err(|e| e.to_string())
        });
        Held {
            lost,
            release: Some(release),
            task: Some(task),
            limit,
        }
    }

    /// Waits for the first failed check (cancel-safe: a `select!` may drop it and call it
    /// again).
    pub async fn lost(&mut self) -> Loss {
        self.lost
            .recv()
            .await
            .unwrap_or_else(|| Loss::Unreachable("the lock's checks ended".into()))
    }

    /// Unlocks (after a check in progress ends); at most `limit` and one second.
    pub async fn release(&mut self) -> Result<(), String> {
        if let Some(r) = self.release.take() {
            let _ = r.send(());
        }
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(self.limit + Duration::from_secs(1), task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("the unlock task failed: {e}")),
            Err(_) => Err("the unlock was not answered in time".into()),
        }
    }
}
