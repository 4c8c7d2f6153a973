//! The agent of one transaction ("the client algorithm" of Wiger's locks).

use super::{
    AbortReason, AgentError, AgentId, AgentOutput, LockInfo, LockMode, LockPath, QEntry, Report,
    Req, Rule, ServerId, ServerMsg, Servers, Sink, WaitGraph, MAX_GRAPH, MAX_SERVERS,
};

/// Who resolves a cycle, and which lock it gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Resolver {
    /// The seed: a deadlock is a cycle of *waits for a holder* (`⇒`, see
    /// [`WaitGraph`]), so every member holds a lock another member waits for; the largest
    /// member surrenders the lock that closes it — a lock it holds that a member of the
    /// cycle waits for ("the object it holds that caused the deadlock situation").
    LargestHolder,
    /// The rule before the fix (refuted: a second surrender for one deadlock, and in the
    /// runtime a livelock): a "cycle" is a strongly connected component of *waits*, which
    /// also runs through agents that only wait (behind a third agent that holds); the
    /// largest of its holders surrenders the first lock in which a member of the component
    /// waits behind it.
    LargestHolderOfWaitComponent,
    /// The largest reference in a component of *waits*, holder or not (refuted: "it is
    /// important to select this particular client among the ones that indeed hold a
    /// lock").
    LargestInCycle,
}

/// The agent's algorithm variant: the seed's, or one of the alternatives Arts found
/// unsound, kept so that the model checker can refute them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct AgentVariant {
    /// Ignore information not newer than the version kept ("It is [not safe] to
    /// disregard the version information").
    pub check_versions: bool,
    /// After a surrender, ignore the lock's updates until one carries the agent's own
    /// identity (without it: the next newer update is taken).
    pub await_own_ack: bool,
    /// Who resolves a cycle.
    pub resolver: Resolver,
    /// After surrendering lock `p` on a server, also void the views of the related locks
    /// whose queues the surrender changes there (the server moves every entry of the agent
    /// related to `p`, e.g. its entry on `[p, x]`, and announces each changed queue with
    /// the agent's identity). Without it (refuted): a view of `[p, x]` still says the agent
    /// holds it while the server has it waiting.
    pub void_related: bool,
    /// Leave a view out of the wait-for graph while a newer view of its server shows an
    /// entry they share otherwise (it is out of date: [`WaitGraph::agree`]). Without it
    /// (refuted): a chain of waits joins what one entry was in an old queue to what it is
    /// in a new one, and the agent surrenders with no cycle in the servers' queues.
    #[cfg_attr(feature = "serde", serde(default = "crate::token::recovery::yes"))]
    pub skip_outdated: bool,
}

impl AgentVariant {
    /// The seed's agent.
    pub const SEED: AgentVariant = AgentVariant {
        check_versions: true,
        await_own_ack: true,
        resolver: Resolver::LargestHolder,
        void_related: true,
        skip_outdated: true,
    };
}

/// Where the transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Status {
    /// Some lock asked for is not held yet (or nothing was asked yet).
    Running,
    /// Every lock asked for is held.
    HaveAll,
    /// The client ended the transaction holding every lock.
    Committed,
    /// The transaction was aborted.
    Aborted(AbortReason),
}

impl Status {
    /// Whether the transaction has ended.
    pub fn ended(self) -> bool {
        matches!(self, Status::Committed | Status::Aborted(_))
    }
}

/// An input to an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentInput<'a, const D: usize, const Q: usize> {
    /// The client asks for `path` in `mode` on `servers`, held when `req` of them grant
    /// it (read → write on a path asked for read is an upgrade, on the same servers).
    Lock {
        /// The lock.
        path: LockPath<D>,
        /// The mode.
        mode: LockMode,
        /// The servers.
        servers: Servers,
        /// How many must grant.
        req: Req,
    },
    /// A queue, announced by a server or forwarded by another agent.
    Info(&'a LockInfo<D, Q>),
    /// A server is gone (its monitor fired).
    ServerDown(ServerId),
    /// The client ends the transaction (commit if every lock is held, else abort).
    Finish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct Request<const D: usize> {
    path: LockPath<D>,
    mode: LockMode,
    servers: Servers,
    req: Req,
    /// Held on enough servers (by the agent's views).
    held: bool,
    /// The mode the client was told it holds: set when the agent reports every lock held
    /// ([`AgentOutput::HaveAll`], the seed's "have all locks"), for every lock then held;
    /// `None`: not told yet (granted on its servers since the last such report, or still
    /// pending), or surrendered since. An upgrade keeps the read reported while the write
    /// is pending.
    reported: Option<LockMode>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct View<const D: usize, const Q: usize> {
    info: LockInfo<D, Q>,
    /// Surrenders sent whose acknowledgement (an announcement of this queue caused by this
    /// agent's surrender) has not arrived; the view is void while this is not 0.
    awaiting: u8,
    /// Agents that were sent this version (any reference: a runtime's references grow
    /// past 64 within a few dozen transactions). A forward goes to agents of the wait-for
    /// graph, at most [`MAX_GRAPH`] of them; should the list be full, a later forward is
    /// sent again rather than left out.
    sent: heapless::Vec<AgentId, MAX_GRAPH>,
}

/// One transaction's agent: at most `K` locks asked for and `K` queues known, queues of at
/// most `Q` entries, paths of depth at most `D`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Agent<const D: usize, const Q: usize, const K: usize> {
    me: AgentId,
    abort_on_deadlock: bool,
    variant: AgentVariant,
    status: Status,
    requests: heapless::Vec<Request<D>, K>,
    views: heapless::Vec<View<D, Q>, K>,
    down: Servers,
    /// Surrenders whose acknowledgements have not all arrived, oldest first: `(server,
    /// lock)`. The server announces the surrendered lock's own queue last of the
    /// acknowledgements, so its arrival ends the entry.
    pending: heapless::Vec<(ServerId, LockPath<D>), K>,
}

impl<const D: usize, const Q: usize, const K: usize> Agent<D, Q, K> {
    /// The most outputs one step can produce: forwards (every view to every agent of every
    /// view), the client's notices, a surrender, and a release per server.
    pub const MAX_OUTPUTS: usize = K * K * Q + 2 * K + MAX_SERVERS + 3;

    /// The agent of a new transaction with reference `me`.
    pub fn new(me: AgentId, abort_on_deadlock: bool) -> Self {
        Agent {
            me,
            abort_on_deadlock,
            variant: AgentVariant::SEED,
            status: Status::Running,
            requests: heapless::Vec::new(),
            views: heapless::Vec::new(),
            down: Servers(0),
            pending: heapless::Vec::new(),
        }
    }

    /// The same agent with another variant.
    pub fn with_variant(mut self, variant: AgentVariant) -> Self {
        self.variant = variant;
        self
    }

    /// The agent's reference.
    pub fn id(&self) -> AgentId {
        self.me
    }

    /// Where the transaction is.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The locks asked for: path, mode, held, the mode reported to the client.
    pub fn requests(
        &self,
    ) -> impl Iterator<Item = (LockPath<D>, LockMode, bool, Option<LockMode>)> + '_ {
        self.requests
            .iter()
            .map(|r| (r.path, r.mode, r.held, r.reported))
    }

    /// The queues known (`true`: awaiting a surrender's acknowledgement).
    pub fn views(&self) -> impl Iterator<Item = (&LockInfo<D, Q>, bool)> + '_ {
        self.views.iter().map(|v| (&v.info, v.awaiting > 0))
    }

    /// What the client may act on: `(server, path, mode)` for every lock reported held and
    /// every server whose queue (as the agent knows it) grants it.
    pub fn believed(&self) -> impl Iterator<Item = (ServerId, LockPath<D>, LockMode)> + '_ {
        self.requests
            .iter()
            .filter(|_| !self.status.ended())
            .filter_map(|r| r.reported.map(|m| (r, m)))
            .flat_map(move |(r, m)| {
                r.servers
                    .iter()
                    .filter(move |s| self.grants(*s, &r.path, m))
                    .map(move |s| (s, r.path, m))
            })
    }

    fn view(&self, server: ServerId, path: &LockPath<D>) -> Option<usize> {
        self.views
            .iter()
            .position(|v| v.info.server == server && v.info.path == *path)
    }

    /// Whether the agent's valid view of `s` grants `path` in `mode`.
    fn grants(&self, s: ServerId, path: &LockPath<D>, mode: LockMode) -> bool {
        !self.down.contains(s)
            && self
                .view(s, path)
                .map(|i| &self.views[i])
                .is_some_and(|v| v.awaiting == 0 && v.info.holds_direct(self.me, mode))
    }

    /// Whether enough of `r`'s servers grant it in `mode`.
    fn satisfied(&self, r: &Request<D>, mode: LockMode) -> bool {
        let n = r
            .servers
            .iter()
            .filter(|s| self.grants(*s, &r.path, mode))
            .count() as u32;
        n >= r.req.needed(r.servers.len())
    }

    /// Rule A4: which locks are held on enough servers; a reported lock no longer granted
    /// in the mode reported (surrendered; or, without the version check, lost to an older
    /// queue) is revoked. Nothing is reported here: see [`Agent::report_all`].
    fn refresh_grants<S: Sink<AgentOutput<D, Q>>>(&mut self, out: &mut S) {
        for i in 0..self.requests.len() {
            let r = self.requests[i];
            let now = self.satisfied(&r, r.mode);
            let keeps = r.reported.is_some_and(|m| self.satisfied(&r, m));
            let r = &mut self.requests[i];
            r.held = now;
            if !now && r.reported.is_some() && !keeps {
                r.reported = None;
                let _ = out.put(AgentOutput::Revoked { path: r.path });
            }
        }
    }

    /// Rule A4, "have all locks": every lock asked for is held; the client is told so, and
    /// of each lock not reported yet in its mode ([`AgentOutput::Granted`] before
    /// [`AgentOutput::HaveAll`]). Only from here on does a lock count as told (rule A6).
    fn report_all<S: Sink<AgentOutput<D, Q>>>(&mut self, out: &mut S, report: &mut Report) {
        for r in self.requests.iter_mut() {
            if r.reported != Some(r.mode) {
                r.reported = Some(r.mode);
                let _ = out.put(AgentOutput::Granted {
                    path: r.path,
                    mode: r.mode,
                });
                report.insert(Rule::Granted);
            }
        }
        self.status = Status::HaveAll;
        let _ = out.put(AgentOutput::HaveAll);
        report.insert(Rule::HaveAll);
    }

    /// Applies one input. Validates it first (an error changes nothing and outputs
    /// nothing), then applies it and re-evaluates: grants, deadlock analysis, surrender or
    /// forwarding.
    pub fn step<S: Sink<AgentOutput<D, Q>>>(
        &mut self,
        input: AgentInput<'_, D, Q>,
        out: &mut S,
    ) -> Result<Report, AgentError> {
        if out.room() < Self::MAX_OUTPUTS {
            return Err(AgentError::OutputsFull);
        }
        let mut report = Report::default();
        match input {
            AgentInput::Lock {
                path,
                mode,
                servers,
                req,
            } => {
                if self.status.ended() {
                    return Err(AgentError::Finished);
                }
                if servers.is_empty() {
                    return Err(AgentError::BadServers);
                }
                let existing = self.requests.iter().position(|r| r.path == path);
                match existing {
                    Some(i) => {
                        let r = self.requests[i];
                        if r.mode.covers(mode) || r.servers != servers || r.req != req {
                            return Err(AgentError::AlreadyQueued(self.me));
                        }
                        // Upgrade read → write on the same servers; the read stays
                        // reported while the write is pending.
                        self.requests[i].mode = mode;
                        self.requests[i].held = false;
                    }
                    None => {
                        if self.requests.is_full() {
                            return Err(AgentError::Full);
                        }
                        let _ = self.requests.push(Request {
                            path,
                            mode,
                            servers,
                            req,
                            held: false,
                            reported: None,
                        });
                    }
                }
                for s in servers.iter() {
                    let _ = out.put(AgentOutput::ToServer {
                        server: s,
                        msg: ServerMsg::Request {
                            agent: self.me,
                            path,
                            mode,
                        },
                    });
                }
                if self.status == Status::HaveAll {
                    self.status = Status::Running;
                }
                report.insert(Rule::Request);
            }
            AgentInput::Info(info) => {
                if self.status.ended() {
                    return Ok(report);
                }
                let ack = info.cause == self.me && info.surrender;
                if self.variant.await_own_ack {
                    if ack {
                        // The surrendered lock's own acknowledgement is the last of its
                        // surrender's: the oldest pending surrender on this server is done.
                        if let Some(i) = self.pending.iter().position(|x| x.0 == info.server) {
                            if self.pending[i].1 == info.path {
                                self.pending.remove(i);
                            }
                        }
                    } else if info.has(self.me) && self.pending_touches(info.server, &info.path) {
                        // A queue with this agent in it, from the server of a surrender
                        // not yet acknowledged, that the surrender changes: it was sent
                        // before the surrender (FIFO per pair; a forwarded queue never
                        // names its receiver) and may show entries the surrender moved.
                        // The acknowledgement of this queue follows (the agent's entry
                        // keeps its record alive).
                        report.insert(Rule::AwaitingAck);
                        return Ok(report);
                    }
                }
                match self.view(info.server, &info.path) {
                    Some(i) => {
                        let v = &mut self.views[i];
                        if v.awaiting > 0 && self.variant.await_own_ack {
                            if info.cause != self.me || !info.surrender {
                                report.insert(Rule::AwaitingAck);
                                return Ok(report);
                            }
                            // One acknowledgement per surrender that changed this queue.
                            v.awaiting -= 1;
                            if v.awaiting > 0 {
                                report.insert(Rule::AwaitingAck);
                                return Ok(report);
                            }
                            report.insert(Rule::SurrenderAcked);
                        }
                        if self.variant.check_versions && info.version <= v.info.version {
                            report.insert(Rule::StaleIgnored);
                            return Ok(report);
                        }
                        if v.awaiting > 0 {
                            report.insert(Rule::SurrenderAcked);
                        }
                        v.info = info.clone();
                        v.awaiting = 0;
                        v.sent.clear();
                    }
                    None => {
                        if self.views.is_full() {
                            return Err(AgentError::Full);
                        }
                        let _ = self.views.push(View {
                            info: info.clone(),
                            awaiting: 0,
                            sent: heapless::Vec::new(),
                        });
                    }
                }
                report.insert(Rule::Stored);
            }
            AgentInput::ServerDown(s) => {
                if (s.0 as usize) >= MAX_SERVERS {
                    return Err(AgentError::BadServers);
                }
                if self.status.ended() {
                    return Ok(report);
                }
                self.down = Servers(self.down.0 | Servers::one(s).0);
                let lost = self.requests.iter().any(|r| {
                    let alive = Servers(r.servers.0 & !self.down.0).len();
                    alive < r.req.needed(r.servers.len())
                });
                if lost {
                    self.abort(AbortReason::ServersDown(s), out);
                    report.insert(Rule::AbortServersDown);
                    return Ok(report);
                }
            }
            AgentInput::Finish => {
                if self.status.ended() {
                    return Err(AgentError::Finished);
                }
                if self.status == Status::HaveAll {
                    self.release_all(out);
                    self.status = Status::Committed;
                } else {
                    self.abort(AbortReason::Client, out);
                }
                report.insert(Rule::Finish);
                return Ok(report);
            }
        }
        self.evaluate(out, &mut report);
        Ok(report)
    }

    fn servers_used(&self) -> Servers {
        Servers(self.requests.iter().fold(0, |m, r| m | r.servers.0))
    }

    fn release_all<S: Sink<AgentOutput<D, Q>>>(&self, out: &mut S) {
        for s in self.servers_used().iter() {
            let _ = out.put(AgentOutput::ToServer {
                server: s,
                msg: ServerMsg::Release { agent: self.me },
            });
        }
    }

    fn abort<S: Sink<AgentOutput<D, Q>>>(&mut self, reason: AbortReason, out: &mut S) {
        self.release_all(out);
        self.status = Status::Aborted(reason);
        let _ = out.put(AgentOutput::Aborted { reason });
    }

    /// Rules A4–A7 after a change of what the agent knows.
    fn evaluate<S: Sink<AgentOutput<D, Q>>>(&mut self, out: &mut S, report: &mut Report) {
        self.refresh_grants(out);
        let all = !self.requests.is_empty() && self.requests.iter().all(|r| r.held);
        if all {
            if self.status == Status::Running {
                self.report_all(out, report);
            }
            // "If we have all locks we've asked for … we cannot be involved in [a
            // deadlock]": nothing to analyse or tell.
            return;
        }
        self.status = Status::Running;
        let (g, map) = self.graph();
        let Some(me) = g.find(self.me) else {
            return;
        };
        // A5: a cycle whose resolver is this agent.
        match self.variant.resolver {
            Resolver::LargestHolder => {
                for c in g.cycles() {
                    if g.largest(c) != Some(self.me) {
                        report.insert(Rule::DeferToLarger);
                        continue;
                    }
                    if let Some(k) = self.closing_lock(&g, &map, c) {
                        self.resolve(k, out, report);
                        return;
                    }
                }
            }
            r => {
                for c in g.wait_components() {
                    let candidates = match r {
                        Resolver::LargestInCycle => c,
                        _ => g.holders_in(c),
                    };
                    if g.largest(candidates) != Some(self.me) {
                        report.insert(Rule::DeferToLarger);
                        continue;
                    }
                    if let Some(k) = self.closing_view(&g, c) {
                        self.resolve(k, out, report);
                        return;
                    }
                }
            }
        }
        // A7: tell the agents this one waits for about the agents that wait for it.
        self.forward(&g, me, out, report);
    }

    /// Whether `w` (an entry of a view of `server`) is this agent's own waiting entry for a
    /// lock it already has on enough servers: it adds no edge.
    fn held_elsewhere(&self, server: ServerId, w: &QEntry<D>) -> bool {
        w.agent == self.me
            && self.requests.iter().any(|r| {
                r.held && r.servers.contains(server) && r.path == w.path && r.mode == w.mode
            })
    }

    /// Whether view `k` is out of date: a newer valid view of its server shows an entry
    /// they share otherwise ([`WaitGraph::agree`]; the queues of `[1, 2]` and `[1, 3]`
    /// share the entries on `[1]`). Its newer version is on
    /// its way (the server announces every queue a change touches); until then it is
    /// left out of the graph, so that no cycle joins old and new versions of one entry.
    fn outdated(&self, k: usize) -> bool {
        let v = &self.views[k].info;
        self.views.iter().any(|w| {
            let w = (w.awaiting == 0).then_some(&w.info);
            w.is_some_and(|w| {
                w.server == v.server
                    && w.version > v.version
                    && !WaitGraph::agree(&v.path, &v.queue, &w.path, &w.queue)
            })
        })
    }

    /// The agent's wait-for graph over every valid view and, per queue given to the
    /// graph, its view's index.
    fn graph(&self) -> (WaitGraph, heapless::Vec<usize, K>) {
        let mut g = WaitGraph::new();
        let mut qs: heapless::Vec<(ServerId, &[QEntry<D>]), K> = heapless::Vec::new();
        let mut map: heapless::Vec<usize, K> = heapless::Vec::new();
        for (k, v) in self.views.iter().enumerate() {
            if v.awaiting == 0 && !(self.variant.skip_outdated && self.outdated(k)) {
                // Cannot fail: at most K views.
                let _ = qs.push((v.info.server, &v.info.queue));
                let _ = map.push(k);
            }
        }
        let _ = g.add_queues::<D, Q, K>(&qs, |s, w| self.held_elsewhere(s, w));
        g.close();
        (g, map)
    }

    /// The lock that closes deadlock `c` (this agent is its largest member): a view in
    /// which a waiting entry of a member of `c` waits behind an entry this agent holds,
    /// directly or behind waiting entries of that queue; surrendering that lock moves the
    /// holding entry behind it. If the chain passes from one lock's queue into a related
    /// lock's ([`WaitGraph::add_queues`]), the first view in which this agent's holding
    /// entry blocks a waiting entry.
    fn closing_lock(&self, g: &WaitGraph, map: &[usize], c: u64) -> Option<usize> {
        let in_c = |a: AgentId| g.find(a).is_some_and(|j| c & (1 << j) != 0);
        let mut fallback = None;
        for &k in map {
            let v = &self.views[k];
            let q = &v.info.queue;
            // within[i]: entry i waits for one of this agent's holding entries of this queue.
            let mut within = [false; Q];
            for (i, w) in q.iter().enumerate().take(Q) {
                if w.granted {
                    continue;
                }
                within[i] =
                    q[..i]
                        .iter()
                        .enumerate()
                        .any(|(j, f)| match WaitGraph::blocked_by(w, f) {
                            Some(true) => f.agent == self.me,
                            Some(false) => within[j],
                            None => false,
                        });
                if within[i] {
                    if in_c(w.agent) && !self.held_elsewhere(v.info.server, w) {
                        return Some(k);
                    }
                    fallback = fallback.or(Some(k));
                }
            }
        }
        fallback
    }

    /// The pre-fix rule's lock ([`Resolver::LargestHolderOfWaitComponent`]): the first view
    /// in which a member of component `c` waits directly behind an entry this agent holds.
    fn closing_view(&self, g: &WaitGraph, c: u64) -> Option<usize> {
        self.views.iter().position(|v| {
            v.awaiting == 0
                && v.info.queue.iter().enumerate().any(|(i, w)| {
                    g.find(w.agent).is_some_and(|j| c & (1 << j) != 0)
                        && v.info.queue[..i].iter().any(|f| {
                            f.agent == self.me && WaitGraph::blocked_by(w, f) == Some(true)
                        })
                })
        })
    }

    /// A5/A6: surrender view `k`'s lock, or abort if `abort_on_deadlock` and the surrender
    /// moves a lock the client was told it holds (one reported with an earlier "have all
    /// locks" on that server, related to the surrendered lock). A lock granted on its
    /// servers but not told yet is surrendered silently, as a pending one is.
    fn resolve<S: Sink<AgentOutput<D, Q>>>(&mut self, k: usize, out: &mut S, report: &mut Report) {
        let (server, path) = (self.views[k].info.server, self.views[k].info.path);
        let reported = self
            .requests
            .iter()
            .any(|r| r.reported.is_some() && r.servers.contains(server) && r.path.related(&path));
        if self.abort_on_deadlock && reported {
            self.abort(AbortReason::Deadlock, out);
            report.insert(Rule::AbortOnDeadlock);
            return;
        }
        if self.variant.await_own_ack && self.pending.is_full() {
            // Too many surrenders unacknowledged to track one more: decide again when an
            // acknowledgement has arrived.
            return;
        }
        if self.variant.await_own_ack {
            let _ = self.pending.push((server, path));
        }
        let _ = out.put(AgentOutput::ToServer {
            server,
            msg: ServerMsg::Surrender {
                agent: self.me,
                path,
            },
        });
        self.views[k].awaiting = self.views[k].awaiting.saturating_add(1);
        if self.variant.void_related {
            self.void_related(server, &path, k);
        }
        report.insert(Rule::Surrender);
        // The surrendered queue no longer counts for any lock.
        self.refresh_grants(out);
    }

    /// Whether a surrender of `surrendered` on `server` changes the queue of `p` there, as
    /// far as this agent can tell: `p` is related to the surrendered lock, or to one of the
    /// agent's locks on that server that the surrender moves.
    fn touches(&self, server: ServerId, surrendered: &LockPath<D>, p: &LockPath<D>) -> bool {
        p.related(surrendered)
            || self.requests.iter().any(|r| {
                r.servers.contains(server) && r.path.related(surrendered) && r.path.related(p)
            })
    }

    /// Whether a surrender on `server` whose acknowledgements have not all arrived changes
    /// the queue of `p`.
    fn pending_touches(&self, server: ServerId, p: &LockPath<D>) -> bool {
        self.pending
            .iter()
            .any(|(s, q)| *s == server && self.touches(server, q, p))
    }

    /// After surrendering `path` on `server` (view `k`): the server moves every entry of this
    /// agent related to `path` to the end and announces each changed queue — of the locks
    /// related to `path` or to a moved entry's path — with this agent's identity, to every
    /// agent with an entry in it (this one, where one of its requests on that server is
    /// related: they all arrived before the surrender, FIFO per pair). Such a queue that
    /// this agent asked for, or knows with itself in it (its record cannot disappear while
    /// the agent's entry is there), waits for one more acknowledgement; a lock asked for
    /// whose first announcement has not arrived yet gets an empty view that waits for it,
    /// so that an announcement sent before the surrender is not taken.
    fn void_related(&mut self, server: ServerId, path: &LockPath<D>, k: usize) {
        let mut mine: heapless::Vec<LockPath<D>, K> = heapless::Vec::new();
        for r in self.requests.iter().filter(|r| r.servers.contains(server)) {
            let _ = mine.push(r.path);
        }
        let announced = |p: &LockPath<D>| mine.iter().any(|m| m.related(p));
        let mut void = [false; K];
        for (i, v) in self.views.iter().enumerate() {
            let p = v.info.path;
            if i == k
                || v.info.server != server
                || !self.touches(server, path, &p)
                || !announced(&p)
            {
                continue;
            }
            void[i] = mine.contains(&p) || v.info.has(self.me);
        }
        for (i, v) in self.views.iter_mut().enumerate() {
            if void[i] {
                v.awaiting = v.awaiting.saturating_add(1);
            }
        }
        mine.retain(|p| self.touches(server, path, p));
        for p in mine.iter() {
            if self.view(server, p).is_none() && !self.views.is_full() {
                let _ = self.views.push(View {
                    info: LockInfo {
                        server,
                        path: *p,
                        version: 0,
                        cause: self.me,
                        surrender: false,
                        queue: heapless::Vec::new(),
                    },
                    awaiting: 1,
                    sent: heapless::Vec::new(),
                });
            }
        }
    }

    /// A7: to every agent this one waits for, the contended queues in which an agent that
    /// waits (transitively) for this one — or this one — waits, unless the receiver is in
    /// that queue or was sent that version already.
    fn forward<S: Sink<AgentOutput<D, Q>>>(
        &mut self,
        g: &WaitGraph,
        me: usize,
        out: &mut S,
        report: &mut Report,
    ) {
        let upstream = g.waiting_for(me) | 1 << me;
        let targets = g.waits_for(me);
        for t in g.members(targets) {
            for v in self.views.iter_mut() {
                // Where `t` goes in the sorted record; already there: sent this version.
                let Err(at) = v.sent.binary_search(&t) else {
                    continue;
                };
                if v.awaiting > 0 || v.info.has(t) {
                    continue;
                }
                let relevant = v.info.queue.iter().enumerate().any(|(i, w)| {
                    g.find(w.agent).is_some_and(|j| upstream & (1 << j) != 0)
                        && v.info.queue[..i]
                            .iter()
                            .any(|f| WaitGraph::blocked_by(w, f).is_some())
                });
                if relevant {
                    let _ = out.put(AgentOutput::ToAgent {
                        agent: t,
                        info: v.info.clone(),
                    });
                    // Kept sorted: the same agents sent to are the same state.
                    let _ = v.sent.insert(at, t);
                    report.insert(Rule::Forward);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{Announce, LockServer};

    const D: usize = 2;
    const Q: usize = 6;
    const K: usize = 4;
    type Ag = Agent<D, Q, K>;
    type Srv = LockServer<D, Q, K>;
    type AOut = heapless::Vec<AgentOutput<D, Q>, 200>;
    type SOut = heapless::Vec<Announce<D, Q>, 400>;
    use LockMode::{Read, Write};

    fn p(k: &[u16]) -> LockPath<D> {
        LockPath::new(k).unwrap()
    }

    /// Agents and servers with instant, ordered delivery (unit tests only; the model
    /// checker explores the orders).
    struct World {
        agents: heapless::Vec<Ag, 4>,
        servers: heapless::Vec<Srv, 3>,
        /// Outputs every agent step produced, for assertions.
        log: heapless::Vec<(u16, AgentOutput<D, Q>), 256>,
        reports: heapless::Vec<(u16, Report), 256>,
    }

    impl World {
        fn new(agents: &[(u16, bool)], servers: u16) -> World {
            World {
                agents: agents
                    .iter()
                    .map(|&(a, ab)| Ag::new(AgentId(a), ab))
                    .collect(),
                servers: (0..servers).map(|s| Srv::new(ServerId(s))).collect(),
                log: heapless::Vec::new(),
                reports: heapless::Vec::new(),
            }
        }
        fn idx(&self, a: AgentId) -> usize {
            self.agents.iter().position(|x| x.id() == a).unwrap()
        }
        /// Steps agent `a` and delivers everything that follows, depth first.
        fn agent(&mut self, a: usize, input: AgentInput<'_, D, Q>) {
            let mut out = AOut::new();
            let r = self.agents[a].step(input, &mut out).unwrap();
            let me = self.agents[a].id().0;
            let _ = self.reports.push((me, r));
            for o in out {
                let _ = self.log.push((me, o.clone()));
                match o {
                    AgentOutput::ToServer { server, msg } => self.server(server, msg),
                    AgentOutput::ToAgent { agent, info } => {
                        let i = self.idx(agent);
                        self.agent(i, AgentInput::Info(&info));
                    }
                    _ => {}
                }
            }
        }
        fn server(&mut self, s: ServerId, msg: ServerMsg<D>) {
            let mut out = SOut::new();
            if self.servers[s.0 as usize].step(&msg, &mut out).is_err() {
                return; // e.g. a release from an agent already gone
            }
            for a in out {
                let i = self.idx(a.to);
                self.agent(i, AgentInput::Info(&a.info));
            }
        }
        fn lock(&mut self, a: usize, k: &[u16], mode: LockMode) {
            self.lock_on(a, k, mode, Servers(1), Req::All);
        }
        fn lock_on(&mut self, a: usize, k: &[u16], mode: LockMode, servers: Servers, req: Req) {
            self.agent(
                a,
                AgentInput::Lock {
                    path: p(k),
                    mode,
                    servers,
                    req,
                },
            );
        }
        fn fired(&self, a: u16, r: Rule) -> usize {
            self.reports
                .iter()
                .filter(|(x, rep)| *x == a && rep.contains(r))
                .count()
        }
        fn status(&self, a: usize) -> Status {
            self.agents[a].status()
        }
    }

    #[test]
    fn a1_a4_simple_lock_then_finish_releases() {
        let mut w = World::new(&[(1, false)], 1);
        w.lock(0, &[1], Write);
        assert_eq!(w.status(0), Status::HaveAll);
        assert!(w.fired(1, Rule::Request) == 1 && w.fired(1, Rule::Granted) == 1);
        w.agent(0, AgentInput::Finish);
        assert_eq!(w.status(0), Status::Committed);
        assert_eq!(w.servers[0].entries().count(), 0);
    }

    #[test]
    fn a4_two_agents_one_lock_second_waits_then_gets_it() {
        let mut w = World::new(&[(1, false), (2, false)], 1);
        w.lock(0, &[1], Write);
        w.lock(1, &[1], Write);
        assert_eq!(w.status(1), Status::Running);
        w.agent(0, AgentInput::Finish);
        assert_eq!(w.status(1), Status::HaveAll);
    }

    #[test]
    fn a4_lock_then_upgrade() {
        let mut w = World::new(&[(1, false)], 1);
        w.lock(0, &[1], Read);
        w.lock(0, &[1], Write);
        assert_eq!(w.status(0), Status::HaveAll);
        let (_, mode, held, _) = w.agents[0].requests().next().unwrap();
        assert!(mode == Write && held);
    }

    #[test]
    fn a5_two_cycle_largest_holder_surrenders_and_both_commit() {
        let mut w = World::new(&[(1, false), (2, false)], 1);
        w.lock(0, &[1], Write);
        w.lock(1, &[2], Write);
        w.lock(0, &[2], Write);
        w.lock(1, &[1], Write); // closes the cycle: A2 is the largest holder
        assert_eq!(w.fired(2, Rule::Surrender), 1);
        assert_eq!(w.fired(1, Rule::Surrender), 0);
        assert_eq!(w.status(0), Status::HaveAll);
        // A2's lock on [2] was reported held: the client is told it was surrendered.
        assert!(w
            .log
            .iter()
            .any(|(a, o)| *a == 2 && *o == AgentOutput::Revoked { path: p(&[2]) }));
        w.agent(0, AgentInput::Finish);
        assert_eq!(w.status(1), Status::HaveAll);
    }

    #[test]
    fn a6_abort_on_deadlock_aborts_instead_of_surrendering_a_reported_lock() {
        let mut w = World::new(&[(1, false), (2, true)], 1);
        w.lock(0, &[1], Write);
        w.lock(1, &[2], Write);
        w.lock(0, &[2], Write);
        w.lock(1, &[1], Write);
        assert_eq!(w.status(1), Status::Aborted(AbortReason::Deadlock));
        assert_eq!(w.fired(2, Rule::AbortOnDeadlock), 1);
        assert_eq!(w.status(0), Status::HaveAll);
    }

    #[test]
    fn a6_abort_on_deadlock_still_surrenders_a_pending_lock() {
        // Upgrade deadlock: both hold [1] read and ask for write. The write of the largest
        // (A2) is pending, but its read was reported: it aborts; with a pending lock only
        // (no read reported) it would surrender silently — see the next test.
        let mut w = World::new(&[(1, false), (2, true)], 1);
        w.lock(0, &[1], Read);
        w.lock(1, &[1], Read);
        w.lock(0, &[1], Write);
        w.lock(1, &[1], Write);
        assert_eq!(w.status(1), Status::Aborted(AbortReason::Deadlock));
        assert_eq!(w.status(0), Status::HaveAll);
    }

    #[test]
    fn a6_multi_server_conflict_inside_one_lock_is_resolved_silently() {
        // A1 and A2 both ask for [1] on S0 and S1 (all); A1 gets S0, A2 gets S1: a cycle
        // inside one lock. A2 (largest holder) surrenders S1's queue; its lock was pending,
        // so even with abort_on_deadlock nothing is reported and nothing aborts.
        let mut w = World::new(&[(1, false), (2, true)], 2);
        // Deliver by hand to get the crossing order.
        let mut out = AOut::new();
        let both = Servers(0b11);
        for a in 0..2 {
            w.agents[a]
                .step(
                    AgentInput::Lock {
                        path: p(&[1]),
                        mode: Write,
                        servers: both,
                        req: Req::All,
                    },
                    &mut out,
                )
                .unwrap();
        }
        out.clear();
        let req = |a| ServerMsg::Request {
            agent: AgentId(a),
            path: p(&[1]),
            mode: Write,
        };
        w.server(ServerId(0), req(1));
        w.server(ServerId(1), req(2));
        w.server(ServerId(0), req(2));
        w.server(ServerId(1), req(1));
        assert_eq!(w.fired(2, Rule::Surrender), 1);
        assert_eq!(w.status(0), Status::HaveAll);
        assert_eq!(w.status(1), Status::Running);
        assert!(!w
            .log
            .iter()
            .any(|(_, o)| matches!(o, AgentOutput::Revoked { .. })));
    }

    /// Agents `base + 1`, `+ 2`, `+ 3` each take one of [1], [2], [3] and then ask for the
    /// next one: a three-cycle closed by the third agent's request.
    fn three_cycle(base: u16) -> World {
        let mut w = World::new(
            &[(base + 1, false), (base + 2, false), (base + 3, false)],
            1,
        );
        w.lock(0, &[1], Write);
        w.lock(1, &[2], Write);
        w.lock(2, &[3], Write);
        w.lock(0, &[2], Write);
        w.lock(1, &[3], Write);
        w.lock(2, &[1], Write);
        w
    }

    #[test]
    fn a5_three_cycle_resolved_by_forwarding() {
        let mut w = three_cycle(0);
        assert!(w.fired(1, Rule::Forward) + w.fired(2, Rule::Forward) > 0);
        assert_eq!(w.fired(3, Rule::Surrender), 1);
        assert_eq!(w.fired(1, Rule::Surrender) + w.fired(2, Rule::Surrender), 0);
        // A2 gets [3] (A3 surrendered it), commits, and the rest follows.
        assert_eq!(w.status(1), Status::HaveAll);
        w.agent(1, AgentInput::Finish);
        assert_eq!(w.status(0), Status::HaveAll);
        w.agent(0, AgentInput::Finish);
        assert_eq!(w.status(2), Status::HaveAll);
    }

    /// A5's "each version once" for agents of any id: `three_cycle` with agents 101, 102,
    /// 103 (and 1001, 1002, 1003) sends exactly the forwards it sends with agents 1, 2, 3.
    /// The record of whom a version was sent to kept only ids below 64, and a runtime's ids
    /// go beyond 64 within a few dozen transactions: every evaluation sent every relevant
    /// view again (the five-node runs of `docs/benchmarks.md`, "Agents", took 2,300–3,000
    /// messages per transaction; 750–1,100 since).
    #[test]
    fn a5_a_version_is_forwarded_once_whatever_the_agent_ids() {
        let forwards = |base: u16| {
            let w = three_cycle(base);
            assert_eq!(w.status(1), Status::HaveAll, "ids from {base}");
            w.log
                .iter()
                .filter(|(_, o)| matches!(o, AgentOutput::ToAgent { .. }))
                .count()
        };
        let small = forwards(0);
        assert!(small > 0);
        assert_eq!(forwards(100), small);
        assert_eq!(forwards(1000), small);
    }

    /// Agent A1 (`variant`) after asking for `[1]` (write) on S0, and its outputs.
    fn a1_asking_for_1(variant: AgentVariant) -> (Ag, AOut) {
        let mut a = Ag::new(AgentId(1), false).with_variant(variant);
        let mut out = AOut::new();
        let lock = AgentInput::Lock {
            path: p(&[1]),
            mode: Write,
            servers: Servers(1),
            req: Req::All,
        };
        a.step(lock, &mut out).unwrap();
        (a, out)
    }

    /// A queue of S0 as an agent hears it: `(agent, keys, mode, granted)` per entry.
    fn queue(k: &[u16], version: u32, entries: &[(u16, &[u16], LockMode, bool)]) -> LockInfo<D, Q> {
        LockInfo {
            server: ServerId(0),
            path: p(k),
            version,
            cause: AgentId(0),
            surrender: false,
            queue: entries
                .iter()
                .map(|&(a, k, mode, granted)| QEntry {
                    agent: AgentId(a),
                    path: p(k),
                    mode,
                    granted,
                })
                .collect(),
        }
    }

    /// A1 asked for `[1]`. It heard `[1,2]` (v7) and `[1]` (v10) while its `[1]` waited
    /// behind A0's `[1,2]`, then `[1,3]` (v11): its `[1]` holds, A0's `[1]` waits behind it
    /// (A0 surrendered `[1,2]`; the queue of `[1,3]` does not show that entry). The old queues show A1's entry on `[1]` waiting, the new one
    /// holding: joined, they make a cycle (A1 behind A0's `[1,2]`, A0 behind A1's `[1]`)
    /// that the server never had. The agent leaves the old ones out and does not
    /// surrender; with `skip_outdated` off it surrenders `[1,3]`.
    #[test]
    fn a5_old_and_new_queues_of_one_entry_make_no_cycle() {
        let infos = [
            queue(
                &[1, 2],
                7,
                &[
                    (0, &[1, 2], Write, true),
                    (1, &[1], Write, false),
                    (0, &[1], Write, false),
                ],
            ),
            queue(
                &[1],
                10,
                &[
                    (0, &[1, 2], Write, true),
                    (1, &[1], Write, false),
                    (0, &[1], Write, false),
                ],
            ),
            queue(
                &[1, 3],
                11,
                &[(1, &[1], Write, true), (0, &[1], Write, false)],
            ),
        ];
        let surrenders = |variant| {
            let (mut a, mut out) = a1_asking_for_1(variant);
            let mut n = 0;
            for i in &infos {
                n += usize::from(
                    a.step(AgentInput::Info(i), &mut out)
                        .unwrap()
                        .contains(Rule::Surrender),
                );
            }
            n
        };
        assert_eq!(surrenders(AgentVariant::SEED), 0);
        let mixed = AgentVariant {
            skip_outdated: false,
            ..AgentVariant::SEED
        };
        assert_eq!(surrenders(mixed), 1);
    }

    #[test]
    fn a5_hierarchical_cycle() {
        // A1 holds [1], A2 holds [2]; A1 asks [2], A2 asks [1,5] (covered by [1]).
        let mut w = World::new(&[(1, false), (2, false)], 1);
        w.lock(0, &[1], Write);
        w.lock(1, &[2], Write);
        w.lock(0, &[2], Write);
        w.lock(1, &[1, 5], Write);
        assert_eq!(w.fired(2, Rule::Surrender), 1);
        assert_eq!(w.status(0), Status::HaveAll);
    }

    #[test]
    fn a2_stale_versions_are_ignored() {
        let (mut a, mut out) = a1_asking_for_1(AgentVariant::SEED);
        let mut s = Srv::new(ServerId(0));
        let mut so = SOut::new();
        s.step(
            &ServerMsg::Request {
                agent: AgentId(2),
                path: p(&[1]),
                mode: Write,
            },
            &mut so,
        )
        .unwrap();
        s.step(
            &ServerMsg::Request {
                agent: AgentId(1),
                path: p(&[1]),
                mode: Write,
            },
            &mut so,
        )
        .unwrap();
        let older = s.info(&p(&[1]), AgentId(2)).unwrap();
        s.step(&ServerMsg::Release { agent: AgentId(2) }, &mut so)
            .unwrap();
        let newer = s.info(&p(&[1]), AgentId(2)).unwrap();
        a.step(AgentInput::Info(&newer), &mut out).unwrap();
        assert_eq!(a.status(), Status::HaveAll);
        let r = a.step(AgentInput::Info(&older), &mut out).unwrap();
        assert!(r.contains(Rule::StaleIgnored));
        assert_eq!(a.status(), Status::HaveAll);
        // Without the version check the older queue is taken and the grant is lost.
        let mut b = a.clone().with_variant(AgentVariant {
            check_versions: false,
            ..AgentVariant::SEED
        });
        b.step(AgentInput::Info(&older), &mut out).unwrap();
        assert_eq!(b.status(), Status::Running);
    }

    #[test]
    fn a3_after_a_surrender_updates_are_ignored_until_one_carries_the_own_identity() {
        let mut w = World::new(&[(1, false), (2, false)], 1);
        w.lock(0, &[1], Write);
        w.lock(1, &[2], Write);
        w.lock(0, &[2], Write);
        // A2 asks for [1]: A2 surrenders [2]. Check that a view awaiting its ack ignores
        // another agent's update: replay an old update of [2] caused by A1.
        let old = w.servers[0].info(&p(&[2]), AgentId(1)).unwrap();
        let mut a2 = w.agents[1].clone();
        let mut out = AOut::new();
        a2.step(
            AgentInput::Lock {
                path: p(&[1]),
                mode: Write,
                servers: Servers(1),
                req: Req::All,
            },
            &mut out,
        )
        .unwrap();
        // Deliver A2's request to the server by hand, and the announcements to A2 only.
        let mut so = SOut::new();
        w.servers[0]
            .step(
                &ServerMsg::Request {
                    agent: AgentId(2),
                    path: p(&[1]),
                    mode: Write,
                },
                &mut so,
            )
            .unwrap();
        out.clear();
        for an in so.iter().filter(|x| x.to == AgentId(2)) {
            a2.step(AgentInput::Info(&an.info), &mut out).unwrap();
        }
        assert!(out.iter().any(|o| matches!(
            o,
            AgentOutput::ToServer {
                msg: ServerMsg::Surrender { .. },
                ..
            }
        )));
        let mut newer = old.clone();
        newer.version += 100;
        let r = a2.step(AgentInput::Info(&newer), &mut out).unwrap();
        assert!(r.contains(Rule::AwaitingAck));
        // The agent's own identity on an announcement of its request is no acknowledgement.
        let mut own_request = newer.clone();
        own_request.cause = AgentId(2);
        own_request.version += 1;
        let r = a2.step(AgentInput::Info(&own_request), &mut out).unwrap();
        assert!(r.contains(Rule::AwaitingAck));
        let mut ack = own_request.clone();
        ack.surrender = true;
        ack.version += 1;
        let r = a2.step(AgentInput::Info(&ack), &mut out).unwrap();
        assert!(r.contains(Rule::SurrenderAcked));
    }

    /// The hierarchical stall of the runtime's random hierarchical run, by
    /// hand: a queue of `/1/1` announced *before* A2 surrendered `/1` (A2's entry on `/1`
    /// holds in it) arrives *after* the surrender. Taken as news, it shows A2 still
    /// holding, so A2 "finds" the cycle again and surrenders `/1/1`, which the server
    /// refuses (A2 holds nothing there any more): no acknowledgement ever comes for the
    /// views that second surrender voided, and A2 never sees its grant of `/1`. The agent
    /// must ignore a queue of that server that the unacknowledged surrender changes.
    type Inbox = heapless::Vec<Announce<D, Q>, 64>;

    #[test]
    fn a3_a_queue_sent_before_a_surrender_that_arrives_after_it_is_not_taken() {
        let mut s = Srv::new(ServerId(0));
        let mut agents = [Ag::new(AgentId(1), false), Ag::new(AgentId(2), false)];
        let mut inbox = Inbox::new();
        let mut refused = 0;
        // One agent step; its requests reach the server at once; announcements queue up.
        let mut step =
            |agents: &mut [Ag; 2], a: usize, input: AgentInput<'_, D, Q>, inbox: &mut Inbox| {
                let mut out = AOut::new();
                agents[a].step(input, &mut out).unwrap();
                for o in out {
                    if let AgentOutput::ToServer { msg, .. } = o {
                        let mut so = SOut::new();
                        match s.step(&msg, &mut so) {
                            Ok(_) => inbox.extend(so),
                            Err(_) => refused += 1,
                        }
                    }
                }
            };
        let lock = |k: &[u16], mode| AgentInput::Lock {
            path: p(k),
            mode,
            servers: Servers(1),
            req: Req::All,
        };
        // Delivers every queued announcement for agent `who` (all agents: None) except
        // the one held back, in order, until nothing is left.
        fn flush(
            step: &mut impl FnMut(&mut [Ag; 2], usize, AgentInput<'_, D, Q>, &mut Inbox),
            agents: &mut [Ag; 2],
            inbox: &mut Inbox,
        ) {
            while !inbox.is_empty() {
                let an = inbox.remove(0);
                let a = an.to.0 as usize - 1;
                step(agents, a, AgentInput::Info(&an.info), inbox);
            }
        }
        step(&mut agents, 0, lock(&[2], Write), &mut inbox);
        step(&mut agents, 1, lock(&[1], Write), &mut inbox);
        step(&mut agents, 1, lock(&[2], Write), &mut inbox);
        flush(&mut step, &mut agents, &mut inbox);
        // A1 asks /1/1: the server creates its record and announces /1 and /1/1 to both.
        step(&mut agents, 0, lock(&[1, 1], Read), &mut inbox);
        let held_back = inbox
            .iter()
            .position(|an| an.to == AgentId(2) && an.info.path == p(&[1, 1]))
            .unwrap();
        let late = inbox.remove(held_back);
        // The rest arrives until A2 sees the cycle in /1 and surrenders it.
        while !agents[1].views().any(|(_, awaiting)| awaiting) {
            let an = inbox.remove(0);
            let a = an.to.0 as usize - 1;
            step(&mut agents, a, AgentInput::Info(&an.info), &mut inbox);
        }
        // The queue of /1/1 sent before the surrender arrives now, ahead of the
        // surrender's acknowledgements (FIFO from the server).
        step(&mut agents, 1, AgentInput::Info(&late.info), &mut inbox);
        flush(&mut step, &mut agents, &mut inbox);
        assert_eq!(
            agents[0].status(),
            Status::HaveAll,
            "A1 got /1/1 by A2's surrender"
        );
        step(&mut agents, 0, AgentInput::Finish, &mut inbox);
        flush(&mut step, &mut agents, &mut inbox);
        assert_eq!(refused, 0, "a surrender of a lock no longer held");
        assert_eq!(agents[1].status(), Status::HaveAll, "A2 gets /1 and /2");
    }

    #[test]
    fn a8_majority_survives_one_server_down_all_aborts() {
        let mut w = World::new(&[(1, false), (2, false)], 3);
        w.lock_on(0, &[1], Write, Servers(0b111), Req::Majority);
        w.lock_on(1, &[2], Write, Servers(0b111), Req::All);
        assert_eq!(w.status(0), Status::HaveAll);
        w.agent(0, AgentInput::ServerDown(ServerId(2)));
        assert_eq!(w.status(0), Status::HaveAll);
        w.agent(1, AgentInput::ServerDown(ServerId(2)));
        assert_eq!(
            w.status(1),
            Status::Aborted(AbortReason::ServersDown(ServerId(2)))
        );
        assert_eq!(w.fired(2, Rule::AbortServersDown), 1);
        w.agent(0, AgentInput::ServerDown(ServerId(1)));
        assert_eq!(
            w.status(0),
            Status::Aborted(AbortReason::ServersDown(ServerId(1)))
        );
    }

    #[test]
    fn a8_any_is_held_with_one_grant() {
        let mut w = World::new(&[(1, false), (2, false)], 2);
        w.lock_on(0, &[1], Write, Servers(0b01), Req::All);
        w.lock_on(1, &[1], Write, Servers(0b11), Req::Any);
        assert_eq!(w.status(1), Status::HaveAll);
    }

    #[test]
    fn bad_input_is_refused_and_changes_nothing() {
        let mut a = Ag::new(AgentId(1), false);
        let mut out = AOut::new();
        let lock = |servers| AgentInput::Lock {
            path: p(&[1]),
            mode: Read,
            servers,
            req: Req::All,
        };
        assert_eq!(
            a.step(lock(Servers(0)), &mut out),
            Err(AgentError::BadServers)
        );
        a.step(lock(Servers(1)), &mut out).unwrap();
        let before = a.clone();
        out.clear();
        assert_eq!(
            a.step(lock(Servers(1)), &mut out),
            Err(AgentError::AlreadyQueued(AgentId(1)))
        );
        assert_eq!(
            a.step(AgentInput::ServerDown(ServerId(40)), &mut out),
            Err(AgentError::BadServers)
        );
        let mut small: heapless::Vec<AgentOutput<D, Q>, 3> = heapless::Vec::new();
        assert_eq!(
            a.step(AgentInput::Finish, &mut small),
            Err(AgentError::OutputsFull)
        );
        assert_eq!(a, before);
        assert!(out.is_empty());
        a.step(AgentInput::Finish, &mut out).unwrap();
        assert_eq!(
            a.step(AgentInput::Finish, &mut out),
            Err(AgentError::Finished)
        );
    }
}
