//! The task of a node's agents engine: its lock server, its transactions' agents, and the
//! routing between them and the other nodes. No rule is decided here: every queue change
//! is a [`RtServer::step`], every agent decision an [`RtAgent::step`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use hilock_harness::VecSink;
use hilock_kernel::agents::{
    AbortReason, AgentError, AgentId, AgentInput, AgentOutput, Announce, LockPath, Rule, ServerId,
    ServerMsg, Status,
};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::{
    AgentFrame, Ask, Cmd, Counters, EngineRx, Inbox, Info, Link, Net, Reply, RtAgent, RtServer,
    TxnError, TxnView, AGENTS_GONE_AFTER, DEPTH, LINK_CHECK, MAX_SERVERS, RESTART_GRACE,
    SERVER_DOWN_AFTER,
};

/// Local messages (between this node's agents and its lock server) delivered per turn of
/// the engine's task; the rest wait for the next turn, after the frames and calls that came
/// in meanwhile.
const DRAIN_BUDGET: usize = 4096;

/// A message between processes of this node (one FIFO queue keeps each pair in order).
enum Work {
    ToServer(ServerMsg<DEPTH>),
    Info {
        to: AgentId,
        info: Box<Info>,
    },
    Refused {
        agent: AgentId,
        from: u16,
        error: AgentError,
    },
}

/// A transaction whose agent runs here.
struct Local {
    agent: Box<RtAgent>,
    names: Vec<(LockPath<DEPTH>, String)>,
    waiters: Vec<Reply<()>>,
    view: watch::Sender<TxnView>,
    /// A server refused one of its requests: the reason its abort reports.
    refused: Option<TxnError>,
    /// Why it ended, once it has (answers later calls).
    ended: Option<TxnError>,
}

impl Local {
    fn name(&self, p: &LockPath<DEPTH>) -> String {
        self.names
            .iter()
            .find(|(q, _)| q == p)
            .map_or_else(|| p.to_string(), |(_, n)| n.clone())
    }
}

/// What the engine knows of a peer link.
#[derive(Default, Clone, Copy)]
struct Watch {
    since: Option<Instant>,
    declared: bool,
    released: bool,
}

pub(crate) struct Engine {
    net: Arc<dyn Net>,
    counters: Arc<Counters>,
    me: u16,
    n: usize,
    server: Box<RtServer>,
    agents: HashMap<AgentId, Local>,
    work: VecDeque<Work>,
    links: Vec<Watch>,
    /// A majority of the cluster has let this run in: calls are served; until then they
    /// wait here (as the token core's requests do).
    admitted: bool,
    /// Calls that wait for the admission.
    parked: Vec<(AgentId, Vec<Ask>, Reply<()>)>,
    /// The cluster refused this run (for good): the reason every call is answered with.
    fenced: Option<String>,
    /// The node runs with `state_dir`: the engine is off (a suspend could not carry its
    /// state), and drops what peers send it.
    state_dir: bool,
    /// Until then the lock server takes no request ([`RESTART_GRACE`]); what reaches it
    /// meanwhile waits in `deferred`, in order, and is served at the first look at the
    /// links after it.
    serve_from: Option<Instant>,
    deferred: VecDeque<(u16, ServerMsg<DEPTH>)>,
    /// When the engine's task last ran ([`Engine::turn`]; at least every [`LINK_CHECK`]).
    last_turn: Instant,
    /// While [`Engine::turn`] counts the other servers down after this node's own stall:
    /// how long it was (an abort then names the stall, not a server).
    stalled: Option<std::time::Duration>,
}

/// The engine's task: commands and frames in, and a look at the peer links every
/// [`LINK_CHECK`].
pub(crate) async fn run(net: Arc<dyn Net>, rx: EngineRx) {
    let EngineRx {
        mut rx,
        counters,
        state_dir,
        recovery,
    } = rx;
    let mut e = Engine::new(net, Some(counters));
    e.state_dir = state_dir;
    if recovery {
        e.serve_from = Some(Instant::now() + RESTART_GRACE);
    }
    let mut tick = tokio::time::interval(LINK_CHECK);
    loop {
        if e.has_work() {
            // Local messages left by the budget: the node's other tasks run first (the
            // peer links among them), then this task goes on after any new input.
            tokio::task::yield_now().await;
        }
        tokio::select! {
            c = rx.recv() => {
                let Some(c) = c else { return };
                e.turn(Instant::now());
                e.handle(c);
            }
            _ = tick.tick() => {
                e.turn(Instant::now());
                e.check_links(Instant::now());
            }
            () = std::future::ready(()), if e.has_work() => {
                e.turn(Instant::now());
                e.drain();
            }
        }
    }
}

impl Engine {
    /// An engine over `net`; `counters` shared with the node's [`Inbox`] when given.
    pub(crate) fn new(net: Arc<dyn Net>, counters: Option<Arc<Counters>>) -> Engine {
        let (me, n) = (net.id(), net.n());
        Engine {
            counters: counters.unwrap_or_default(),
            me,
            n,
            server: Box::new(RtServer::new(ServerId(me))),
            agents: HashMap::new(),
            work: VecDeque::new(),
            // As the token core: a node alone is its own majority.
            admitted: n / 2 < 1,
            parked: Vec::new(),
            fenced: None,
            state_dir: false,
            serve_from: None,
            deferred: VecDeque::new(),
            links: vec![
                Watch {
                    since: Some(Instant::now()),
                    ..Watch::default()
                };
                n
            ],
            net,
            last_turn: Instant::now(),
            stalled: None,
        }
    }

    /// Called first at every turn of the engine's task, which turns at least every
    /// [`LINK_CHECK`]: a task that did not run for [`SERVER_DOWN_AFTER`] (the node was
    /// paused, or starved) counts every other lock server as down for its running agents
    /// (rule A8 aborts what can no longer be had), as if every link had been down that
    /// long. Its peers saw no heartbeat meanwhile, and may have released its agents'
    /// entries ([`AGENTS_GONE_AFTER`]) while a grant to one of them waited on the link: a
    /// transaction granted by that late message would share the lock with the
    /// transaction the server granted it to after the release.
    pub(crate) fn turn(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last_turn);
        self.last_turn = now;
        if gap < SERVER_DOWN_AFTER || self.agents.is_empty() {
            return;
        }
        warn!(
            gap_ms = gap.as_millis() as u64,
            "agents: this node did not run for {gap:?}; its running transactions count every \
             other lock server as down"
        );
        self.stalled = Some(gap);
        for p in 0..self.n.min(MAX_SERVERS) {
            if p as u16 != self.me {
                self.server_down(p as u16);
            }
        }
        self.drain();
        self.stalled = None;
    }

    /// One command, then every local message it caused.
    pub(crate) fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Net { from, frame } => {
                self.counters.frames_received.fetch_add(1, Relaxed);
                self.net_frame(from, *frame);
            }
            Cmd::Begin {
                id,
                abort_on_deadlock,
                view,
            } => {
                self.counters.begun.fetch_add(1, Relaxed);
                self.agents.insert(
                    id,
                    Local {
                        agent: Box::new(RtAgent::new(id, abort_on_deadlock)),
                        names: Vec::new(),
                        waiters: Vec::new(),
                        view,
                        refused: None,
                        ended: None,
                    },
                );
            }
            Cmd::Lock { id, locks, reply } => self.lock(id, locks, reply),
            Cmd::Finish { id, reply } => self.finish(id, reply),
            Cmd::Admitted => {
                if !self.admitted && self.fenced.is_none() {
                    self.admitted = true;
                    for (id, locks, reply) in std::mem::take(&mut self.parked) {
                        self.lock(id, locks, reply);
                    }
                }
            }
            Cmd::Fenced { reason } => self.fence(reason),
            Cmd::PeerRestarted { peer } => self.peer_restarted(peer),
            Cmd::Agents { reply } => {
                let v = self
                    .agents
                    .iter()
                    .map(|(id, l)| {
                        let views: Vec<String> = l
                            .agent
                            .views()
                            .map(|(i, awaiting)| {
                                let q: Vec<String> = i
                                    .queue
                                    .iter()
                                    .map(|e| {
                                        format!(
                                            "{}{}{}",
                                            e.agent,
                                            e.mode,
                                            if e.granted { "*" } else { "" }
                                        )
                                    })
                                    .collect();
                                format!(
                                    "{}{} v{} by {}{} [{}]",
                                    i.server,
                                    i.path,
                                    i.version,
                                    i.cause,
                                    if awaiting { " AWAITING" } else { "" },
                                    q.join(" ")
                                )
                            })
                            .collect();
                        let reqs: Vec<String> = l
                            .agent
                            .requests()
                            .map(|(p, m, h, r)| format!("{p}{m} held {h} reported {r:?}"))
                            .collect();
                        format!(
                            "{id} {:?} requests {reqs:?} views {views:?}",
                            l.agent.status()
                        )
                    })
                    .collect();
                let _ = reply.send(v);
            }
            Cmd::Pending { id, reply } => {
                let v = self.agents.get(&id).map_or_else(Vec::new, |l| {
                    l.agent
                        .requests()
                        .filter(|(_, _, held, _)| !held)
                        .map(|(p, _, _, _)| l.name(&p))
                        .collect()
                });
                let _ = reply.send(v);
            }
            Cmd::Entries { reply } => {
                let v = self
                    .server
                    .entries()
                    .map(|e| (e.agent.0, e.path.to_string(), e.mode, e.granted))
                    .collect();
                let _ = reply.send(v);
            }
        }
        self.drain();
    }

    fn has_work(&self) -> bool {
        !self.work.is_empty()
    }

    /// Delivers the local messages waiting, at most [`DRAIN_BUDGET`] of them. Unbounded,
    /// this call once never returned: a 3-node cluster under 20 random transaction clients
    /// wedged, one node answering no client and starving its peer links while its agents
    /// and its own lock server exchanged messages (one queue reached version 54,105). That
    /// run predates the forward record for every agent id; a seeded simulation of the
    /// same load on the kernel alone found no endless local exchange since (at most 7
    /// surrenders at a node with no frame in between). Whatever the cause, one call now
    /// ends and the task reads its frames, calls and link checks in between.
    fn drain(&mut self) {
        for _ in 0..DRAIN_BUDGET {
            let Some(w) = self.work.pop_front() else {
                return;
            };
            self.counters.local_messages.fetch_add(1, Relaxed);
            match w {
                Work::ToServer(msg) => self.server_step(self.me, msg),
                Work::Info { to, info } => self.agent_info(to, &info),
                Work::Refused { agent, from, error } => self.refused(agent, from, error),
            }
        }
    }

    fn net_frame(&mut self, from: u16, f: AgentFrame) {
        if self.fenced.is_some() {
            // A refused run serves nothing (its peers do not talk to it anyway).
            debug!(from, "agents: a frame for a refused run; dropped");
            return;
        }
        if self.state_dir {
            // A peer without state_dir (a cluster whose nodes disagree on it, which the
            // token engine never serves): this node keeps no agents state to suspend.
            warn!(
                from,
                "agents: a frame for a node with state_dir (the engine is off); dropped"
            );
            return;
        }
        match f {
            AgentFrame::ToServer(msg) => self.server_step(from, msg),
            AgentFrame::Info { to, info } => self.agent_info(to, &info),
            AgentFrame::Refused { agent, error } => self.refused(agent, from, error),
        }
    }

    fn owner(&self, a: AgentId) -> u16 {
        Inbox::owner(a, self.n)
    }

    fn send_server(&mut self, s: ServerId, msg: ServerMsg<DEPTH>) {
        if s.0 == self.me {
            self.work.push_back(Work::ToServer(msg));
        } else if self.net.send(s.0, AgentFrame::ToServer(msg)) {
            self.counters.frames_sent.fetch_add(1, Relaxed);
        } else {
            warn!(server = s.0, "agents: no such server; message dropped");
        }
    }

    fn send_agent(&mut self, a: AgentId, info: Info) {
        let node = self.owner(a);
        if node == self.me {
            self.work.push_back(Work::Info {
                to: a,
                info: Box::new(info),
            });
        } else if self.net.send(
            node,
            AgentFrame::Info {
                to: a,
                info: Box::new(info),
            },
        ) {
            self.counters.frames_sent.fetch_add(1, Relaxed);
        }
    }

    /// A message for this node's server from an agent of node `from`.
    fn server_step(&mut self, from: u16, msg: ServerMsg<DEPTH>) {
        if self.serve_from.is_some() {
            self.deferred.push_back((from, msg));
            return;
        }
        let agent = msg.agent();
        if self.owner(agent) != from {
            // Only a node's own agents speak from it.
            self.counters.foreign_frames.fetch_add(1, Relaxed);
            warn!(from, %agent, "agents: a message for another node's agent; dropped");
            return;
        }
        let mut out: VecSink<Announce<DEPTH, { super::QUEUE }>> = VecSink::default();
        match self.server.step(&msg, &mut out) {
            Ok(r) => {
                if r.contains(Rule::SurrenderToEnd) {
                    self.counters.surrenders_done.fetch_add(1, Relaxed);
                }
                for a in out.0 {
                    self.send_agent(a.to, a.info);
                }
            }
            Err(error) => {
                self.counters.server_refusals.fetch_add(1, Relaxed);
                match msg {
                    // A surrender of a queue in which the agent holds nothing any more: its
                    // own earlier surrender of a related lock (the same subtree) moved its
                    // entries, and the announcement of that move, which carries its
                    // identity, is on its way to it (sent before this refusal, on the same
                    // channel). Nothing changed; nothing to do.
                    ServerMsg::Surrender { .. } if matches!(error, AgentError::NotHolder(_)) => {
                        self.counters.surrenders_refused.fetch_add(1, Relaxed);
                        debug!(%agent, %error, "agents: surrender of a lock no longer held");
                    }
                    // The agent waits for an answer that will not come: tell its node.
                    ServerMsg::Request { .. } | ServerMsg::Surrender { .. } => {
                        debug!(%agent, %error, "agents: server refused a request");
                        if from == self.me {
                            self.work.push_back(Work::Refused {
                                agent,
                                from: self.me,
                                error,
                            });
                        } else if self.net.send(from, AgentFrame::Refused { agent, error }) {
                            self.counters.frames_sent.fetch_add(1, Relaxed);
                        }
                    }
                    // A release or cancel of nothing (e.g. after the entries were released
                    // when the agent's node looked dead): nothing to do.
                    _ => debug!(%agent, %error, "agents: server refused a release"),
                }
            }
        }
    }

    fn agent_info(&mut self, to: AgentId, info: &Info) {
        if !self.agents.contains_key(&to) {
            // A transaction that ended (ids are never reused): nothing to tell.
            return;
        }
        if let Err(e) = self.agent_step(to, AgentInput::Info(info)) {
            warn!(agent = %to, error = %e, "agents: agent refused a queue");
        }
    }

    fn refused(&mut self, agent: AgentId, from: u16, error: AgentError) {
        let Some(l) = self.agents.get_mut(&agent) else {
            return;
        };
        if l.agent.status().ended() {
            return;
        }
        l.refused = Some(TxnError::ServerRefused { node: from, error });
        let _ = self.agent_step(agent, AgentInput::Finish);
    }

    /// One agent step; routes its outputs and answers its client.
    fn agent_step(
        &mut self,
        id: AgentId,
        input: AgentInput<'_, DEPTH, { super::QUEUE }>,
    ) -> Result<(), AgentError> {
        let Some(l) = self.agents.get_mut(&id) else {
            return Err(AgentError::UnknownAgent(id));
        };
        let mut out = VecSink::default();
        let r = l.agent.step(input, &mut out)?;
        let c = &self.counters;
        if r.contains(Rule::Surrender) {
            c.surrenders.fetch_add(1, Relaxed);
        }
        if r.contains(Rule::Forward) {
            c.forwards.fetch_add(1, Relaxed);
        }
        if r.contains(Rule::StaleIgnored) {
            c.stale_ignored.fetch_add(1, Relaxed);
        }
        for o in out.0 {
            match o {
                AgentOutput::ToServer { server, msg } => self.send_server(server, msg),
                AgentOutput::ToAgent { agent, info } => self.send_agent(agent, info),
                AgentOutput::Granted { .. } => {}
                AgentOutput::Revoked { path } => {
                    self.counters.revoked.fetch_add(1, Relaxed);
                    if let Some(l) = self.agents.get_mut(&id) {
                        let name = l.name(&path);
                        l.view.send_modify(|v| v.revoked.push(name));
                    }
                }
                AgentOutput::HaveAll => {
                    if let Some(l) = self.agents.get_mut(&id) {
                        for w in l.waiters.drain(..) {
                            let _ = w.send(Ok(()));
                        }
                    }
                }
                AgentOutput::Aborted { reason } => self.aborted(id, reason),
            }
        }
        Ok(())
    }

    fn aborted(&mut self, id: AgentId, reason: AbortReason) {
        let stalled = self.stalled;
        let Some(l) = self.agents.get_mut(&id) else {
            return;
        };
        let c = &self.counters;
        let err = match (l.refused.take(), reason) {
            (Some(e), _) => {
                c.aborted_other.fetch_add(1, Relaxed);
                e
            }
            (None, AbortReason::Deadlock) => {
                c.aborted_deadlock.fetch_add(1, Relaxed);
                TxnError::Deadlock
            }
            (None, AbortReason::ServersDown(s)) => {
                c.aborted_server_down.fetch_add(1, Relaxed);
                match stalled {
                    Some(gap) => TxnError::Stalled {
                        for_ms: u64::try_from(gap.as_millis()).unwrap_or(u64::MAX),
                    },
                    None => TxnError::ServerDown { node: s.0 },
                }
            }
            (None, AbortReason::Client) => {
                c.aborted_other.fetch_add(1, Relaxed);
                TxnError::Ended
            }
        };
        for w in l.waiters.drain(..) {
            let _ = w.send(Err(err.clone()));
        }
        l.view.send_modify(|v| v.aborted = Some(err.clone()));
        l.ended = Some(err);
    }

    /// The cluster refused this run: every call waiting or to come is answered with
    /// `reason`, every local transaction aborts (its entries are released), and the lock
    /// server forgets every entry: an empty lock table of a new run must grant nothing.
    fn fence(&mut self, reason: String) {
        if self.fenced.is_some() {
            return;
        }
        warn!(%reason, "agents: this run of the node is refused; its lock server serves nothing");
        self.fenced = Some(reason.clone());
        let err = TxnError::NotServing(reason);
        for (_, _, reply) in std::mem::take(&mut self.parked) {
            let _ = reply.send(Err(err.clone()));
        }
        let ids: Vec<AgentId> = self.agents.keys().copied().collect();
        for id in ids {
            let Some(l) = self.agents.get_mut(&id) else {
                continue;
            };
            if l.ended.is_some() || l.agent.status().ended() {
                continue;
            }
            l.refused = Some(err.clone());
            let _ = self.agent_step(id, AgentInput::Finish);
        }
        // Everything, not a turn's budget: the agents are finished, so their messages end.
        while self.has_work() {
            self.drain();
        }
        let mut held: Vec<AgentId> = self.server.entries().map(|e| e.agent).collect();
        held.sort();
        held.dedup();
        for a in held {
            let mut out: VecSink<Announce<DEPTH, { super::QUEUE }>> = VecSink::default();
            let _ = self.server.step(&ServerMsg::Release { agent: a }, &mut out);
        }
    }

    /// One call's locks, asked of the agent one after the other within this engine step:
    /// no queue reaches the agent in between, so it reports holding all of them (and the
    /// client is told) only once it has every one.
    fn lock(&mut self, id: AgentId, locks: Vec<Ask>, reply: Reply<()>) {
        let Some(l) = self.agents.get_mut(&id) else {
            let _ = reply.send(Err(TxnError::Ended));
            return;
        };
        if let Some(e) = &l.ended {
            let _ = reply.send(Err(e.clone()));
            return;
        }
        if let Some(reason) = &self.fenced {
            let _ = reply.send(Err(TxnError::NotServing(reason.clone())));
            return;
        }
        if !self.admitted {
            self.parked.push((id, locks, reply));
            return;
        }
        let input = |a: &Ask| AgentInput::Lock {
            path: a.path,
            mode: a.mode,
            servers: a.servers,
            req: a.req,
        };
        // Validate first: a refused call changes nothing (the kernel's guarantee).
        let mut probe = (*l.agent).clone();
        for a in &locks {
            if let Err(e) = probe.step(input(a), &mut VecSink::default()) {
                let _ = reply.send(Err(TxnError::Refused(e)));
                return;
            }
        }
        for a in &locks {
            if !l.names.iter().any(|(p, _)| *p == a.path) {
                l.names.push((a.path, a.name.clone()));
            }
        }
        l.waiters.push(reply);
        for a in &locks {
            let _ = self.agent_step(id, input(a));
        }
        // Servers this node already counts as down: the kernel decides whether the locks
        // can still be had (rule A8).
        for s in locks.iter().flat_map(|a| a.servers.iter()) {
            if self.links.get(usize::from(s.0)).is_some_and(|w| w.declared) {
                let _ = self.agent_step(id, AgentInput::ServerDown(s));
            }
        }
        if let Some(l) = self.agents.get_mut(&id) {
            if l.agent.status() == Status::HaveAll {
                for w in l.waiters.drain(..) {
                    let _ = w.send(Ok(()));
                }
            }
        }
    }

    fn finish(&mut self, id: AgentId, reply: Option<Reply<()>>) {
        // A call parked until the admission is withdrawn with its transaction.
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(a, _, _)| *a == id);
        self.parked = kept;
        for (_, _, w) in gone {
            let _ = w.send(Err(TxnError::Ended));
        }
        let r = match self.agents.get(&id) {
            None => Err(TxnError::Ended),
            Some(l) if l.ended.is_some() => Err(l.ended.clone().unwrap_or(TxnError::Ended)),
            Some(l) => {
                let had_all = l.agent.status() == Status::HaveAll;
                let _ = self.agent_step(id, AgentInput::Finish);
                if had_all && reply.is_some() {
                    self.counters.committed.fetch_add(1, Relaxed);
                    Ok(())
                } else {
                    // Dropped, timed out or asked to commit without every lock: aborted.
                    if had_all {
                        self.counters.aborted_other.fetch_add(1, Relaxed);
                    }
                    Err(TxnError::Ended)
                }
            }
        };
        if let Some(l) = self.agents.remove(&id) {
            for w in l.waiters {
                let _ = w.send(Err(TxnError::Ended));
            }
        }
        if let Some(reply) = reply {
            let _ = reply.send(r);
        }
    }

    /// Peers unreachable for [`SERVER_DOWN_AFTER`] are dead servers for the running agents;
    /// for [`AGENTS_GONE_AFTER`], this node's server releases their agents.
    pub(crate) fn check_links(&mut self, now: Instant) {
        if self.serve_from.is_some_and(|t| now >= t) {
            self.serve_from = None;
            if !self.deferred.is_empty() {
                debug!(
                    requests = self.deferred.len(),
                    "agents: the lock server serves what reached it since the start"
                );
            }
            while let Some((from, msg)) = self.deferred.pop_front() {
                self.server_step(from, msg);
            }
        }
        for p in 0..self.n.min(MAX_SERVERS.max(self.n)) {
            let p16 = p as u16;
            if p16 == self.me {
                continue;
            }
            let (gone, up) = match self.net.link(p16) {
                Link::Up => (false, true),
                Link::Down => (false, false),
                Link::Gone(_) => (true, false),
            };
            let w = &mut self.links[p];
            if up {
                *w = Watch::default();
                continue;
            }
            let since = *w.since.get_or_insert(now);
            let down_for = now.saturating_duration_since(since);
            if !w.declared && (gone || down_for >= SERVER_DOWN_AFTER) {
                w.declared = true;
                // Only where a transaction runs here is it news for the operator: a node
                // that serves token locks only logs its peer's state once, by the links.
                if self.agents.is_empty() {
                    tracing::debug!(
                        peer = p,
                        "agents: lock server unreachable; counting it as down"
                    );
                } else {
                    warn!(
                        peer = p,
                        "agents: lock server unreachable; counting it as down"
                    );
                }
                self.server_down(p16);
            }
            let w = &mut self.links[p];
            if !w.released && (gone || down_for >= AGENTS_GONE_AFTER) {
                w.released = true;
                self.release_node(p16);
            }
        }
        self.drain();
    }

    /// A new run of `peer` replaced its old run (etcd recovery): the old run's lock server
    /// forgot every entry, so a transaction here that used it no longer holds what it was
    /// told it holds there (the kernel counts the server as down, rule A8, and aborts what
    /// can no longer be had), and the old run's agents are gone, so this node's server
    /// releases their entries at once. Runs before any frame of the new run is handled.
    fn peer_restarted(&mut self, peer: u16) {
        warn!(
            peer,
            "agents: a new run of the node replaced its old run; its lock server's entries \
             and its agents are gone"
        );
        self.server_down(peer);
        self.release_node(peer);
    }

    /// Every running agent counts the lock server of node `p` as down (rule A8 decides
    /// which transactions abort); a node beyond the kernel's servers serves none.
    fn server_down(&mut self, p: u16) {
        if usize::from(p) < MAX_SERVERS {
            let ids: Vec<AgentId> = self.agents.keys().copied().collect();
            for a in ids {
                let _ = self.agent_step(a, AgentInput::ServerDown(ServerId(p)));
            }
        }
    }

    /// This node's server releases every entry of node `p`'s agents.
    fn release_node(&mut self, p: u16) {
        let mut ids: Vec<AgentId> = self
            .server
            .entries()
            .map(|e| e.agent)
            .filter(|a| self.owner(*a) == p)
            .collect();
        ids.dedup();
        ids.sort();
        ids.dedup();
        for a in ids {
            warn!(peer = p, agent = %a, "agents: releasing an unreachable node's agent");
            self.counters.peers_released.fetch_add(1, Relaxed);
            let mut out: VecSink<Announce<DEPTH, { super::QUEUE }>> = VecSink::default();
            if self
                .server
                .step(&ServerMsg::Release { agent: a }, &mut out)
                .is_ok()
            {
                for an in out.0 {
                    self.send_agent(an.to, an.info);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hilock_kernel::agents::{LockMode, QEntry, Req, Servers};
    use std::sync::Mutex;
    use tokio::sync::oneshot;

    /// Node 0 of 2; every link up; what is sent is kept.
    #[derive(Default)]
    struct FakeNet(Mutex<Vec<(u16, AgentFrame)>>);

    impl Net for FakeNet {
        fn id(&self) -> u16 {
            0
        }
        fn n(&self) -> usize {
            2
        }
        fn send(&self, peer: u16, frame: AgentFrame) -> bool {
            self.0.lock().unwrap().push((peer, frame));
            true
        }
        fn link(&self, _: u16) -> Link {
            Link::Up
        }
    }

    fn path(k: u16) -> LockPath<DEPTH> {
        LockPath::new(&[k]).unwrap()
    }

    fn request(agent: u16, k: u16) -> Cmd {
        Cmd::Net {
            from: 1,
            frame: Box::new(AgentFrame::ToServer(ServerMsg::Request {
                agent: AgentId(agent),
                path: path(k),
                mode: LockMode::Write,
            })),
        }
    }

    fn entries(e: &Engine) -> Vec<(u16, bool)> {
        e.server.entries().map(|x| (x.agent.0, x.granted)).collect()
    }

    /// One call of `drain` delivers at most `DRAIN_BUDGET` local messages and leaves the
    /// rest for the task's next turn, so the engine's task always comes back to its frames,
    /// calls and link checks (a long local exchange once kept it inside one call: the node
    /// wedged).
    #[test]
    fn a_drain_delivers_at_most_its_budget() {
        let (mut e, _) = engine();
        for _ in 0..DRAIN_BUDGET + 10 {
            // A release of an agent the server does not know: it changes nothing.
            e.work
                .push_back(Work::ToServer(ServerMsg::Release { agent: AgentId(0) }));
        }
        e.drain();
        assert_eq!(e.work.len(), 10);
        e.drain();
        assert!(!e.has_work());
    }

    fn engine() -> (Engine, Arc<FakeNet>) {
        let net = Arc::new(FakeNet::default());
        let mut e = Engine::new(net.clone(), None);
        // Node 1 has let this run in.
        e.handle(Cmd::Admitted);
        (e, net)
    }

    #[test]
    fn a_frame_for_another_nodes_agent_is_dropped_and_changes_nothing() {
        let (mut e, net) = engine();
        // Agent 2 is node 0's (2 mod 2): node 1 may not speak for it.
        e.handle(request(2, 7));
        assert_eq!(e.counters.foreign_frames.load(Relaxed), 1);
        assert!(entries(&e).is_empty());
        assert!(net.0.lock().unwrap().is_empty());
    }

    #[test]
    fn unknown_agents_and_surrenders_of_locks_not_held_are_refused_and_change_nothing() {
        let (mut e, net) = engine();
        e.handle(request(1, 7));
        e.handle(request(3, 7));
        assert_eq!(entries(&e), vec![(1, true), (3, false)]);
        let before = (*e.server).clone();
        net.0.lock().unwrap().clear();
        let msg = |m| Cmd::Net {
            from: 1,
            frame: Box::new(AgentFrame::ToServer(m)),
        };
        // A release of an agent the server does not know: refused, nothing sent.
        e.handle(msg(ServerMsg::Release { agent: AgentId(5) }));
        assert_eq!(*e.server, before);
        assert!(net.0.lock().unwrap().is_empty());
        // A surrender by a waiting agent (it holds nothing in that queue): refused.
        e.handle(msg(ServerMsg::Surrender {
            agent: AgentId(3),
            path: path(7),
        }));
        assert_eq!(*e.server, before);
        assert_eq!(e.counters.surrenders_refused.load(Relaxed), 1);
        // A surrender by an unknown agent: refused, and its node is told.
        e.handle(msg(ServerMsg::Surrender {
            agent: AgentId(9),
            path: path(7),
        }));
        assert_eq!(*e.server, before);
        assert_eq!(
            net.0.lock().unwrap().as_slice(),
            &[(
                1,
                AgentFrame::Refused {
                    agent: AgentId(9),
                    error: AgentError::UnknownAgent(AgentId(9)),
                }
            )]
        );
        assert_eq!(e.counters.server_refusals.load(Relaxed), 3);
    }

    /// Transaction 0 begins and asks for W on `path(k)` at `server`'s lock server: its
    /// view and the call's answer.
    fn lock_w(
        e: &mut Engine,
        k: u16,
        server: u16,
    ) -> (
        watch::Receiver<TxnView>,
        oneshot::Receiver<Result<(), TxnError>>,
    ) {
        let (view, rx) = watch::channel(TxnView::default());
        e.handle(Cmd::Begin {
            id: AgentId(0),
            abort_on_deadlock: false,
            view,
        });
        let (reply, got) = oneshot::channel();
        e.handle(Cmd::Lock {
            id: AgentId(0),
            locks: vec![Ask {
                path: path(k),
                name: "/k".into(),
                mode: LockMode::Write,
                servers: Servers::one(ServerId(server)),
                req: Req::All,
            }],
            reply,
        });
        (rx, got)
    }

    #[test]
    fn a_stale_queue_is_ignored_and_the_transaction_keeps_its_lock() {
        let (mut e, _net) = engine();
        let (_view, mut got) = lock_w(&mut e, 7, 0);
        assert_eq!(got.try_recv().unwrap(), Ok(()));
        // An older version of the queue (another agent holding) arrives late.
        let mut queue = heapless::Vec::new();
        for (a, granted) in [(5, true), (0, false)] {
            let _ = queue.push(QEntry {
                agent: AgentId(a),
                path: path(7),
                mode: LockMode::Write,
                granted,
            });
        }
        let stale = Info {
            server: ServerId(0),
            path: path(7),
            version: 0,
            cause: AgentId(5),
            surrender: false,
            queue,
        };
        e.handle(Cmd::Net {
            from: 1,
            frame: Box::new(AgentFrame::Info {
                to: AgentId(0),
                info: Box::new(stale),
            }),
        });
        assert_eq!(e.counters.stale_ignored.load(Relaxed), 1);
        assert_eq!(e.agents[&AgentId(0)].agent.status(), Status::HaveAll);
        let (reply, mut done) = oneshot::channel();
        e.handle(Cmd::Finish {
            id: AgentId(0),
            reply: Some(reply),
        });
        assert_eq!(done.try_recv().unwrap(), Ok(()));
        assert!(entries(&e).is_empty());
    }

    /// A transaction of node 0 holding W on `path(9)` at node 1's lock server (node 1's
    /// announcement delivered), answered `Ok`.
    fn holding_at_node_1(e: &mut Engine) -> watch::Receiver<TxnView> {
        let (rx, mut got) = lock_w(e, 9, 1);
        let mut queue = heapless::Vec::new();
        let _ = queue.push(QEntry {
            agent: AgentId(0),
            path: path(9),
            mode: LockMode::Write,
            granted: true,
        });
        e.handle(Cmd::Net {
            from: 1,
            frame: Box::new(AgentFrame::Info {
                to: AgentId(0),
                info: Box::new(Info {
                    server: ServerId(1),
                    path: path(9),
                    version: 1,
                    cause: AgentId(0),
                    surrender: false,
                    queue,
                }),
            }),
        });
        assert_eq!(got.try_recv().unwrap(), Ok(()));
        rx
    }

    /// A new run of node 1 (etcd recovery) has an empty lock table: node 0's transaction
    /// that holds a lock there is aborted at once, naming node 1, and node 0's server
    /// releases what node 1's old agents held (`Cmd::PeerRestarted`; rule A8 in the
    /// kernel decides the abort). Without it, the transaction kept W while node 1's new
    /// run could grant it again, and the old agent's W here blocked the path for 4 s.
    #[test]
    fn a_new_run_of_a_peer_aborts_the_transactions_on_its_server_and_frees_its_old_agents() {
        let (mut e, _net) = engine();
        // Node 1's agent 1 holds W on path 7 at this node's server.
        e.handle(request(1, 7));
        assert_eq!(entries(&e), vec![(1, true)]);
        let view = holding_at_node_1(&mut e);
        e.handle(Cmd::PeerRestarted { peer: 1 });
        assert_eq!(
            view.borrow().aborted,
            Some(TxnError::ServerDown { node: 1 }),
            "the transaction no longer holds what node 1's old run granted"
        );
        assert!(entries(&e).is_empty(), "the old run's agent is released");
    }

    /// With etcd recovery the lock server takes no request for [`RESTART_GRACE`] after
    /// the start (requests wait, in order) and serves them at the first look at the links
    /// after it: by then a peer's transaction that held a lock on this node's previous run
    /// has aborted.
    #[test]
    fn with_recovery_the_server_grants_nothing_before_the_restart_grace() {
        let (mut e, net) = engine();
        let start = Instant::now();
        e.serve_from = Some(start + RESTART_GRACE);
        e.handle(request(1, 7));
        e.handle(request(3, 7));
        e.check_links(start + RESTART_GRACE - LINK_CHECK);
        assert!(entries(&e).is_empty(), "nothing granted in the grace");
        assert!(net.0.lock().unwrap().is_empty(), "nothing announced");
        e.check_links(start + RESTART_GRACE);
        assert_eq!(entries(&e), vec![(1, true), (3, false)], "served in order");
        assert!(!net.0.lock().unwrap().is_empty(), "the grant is announced");
    }
}
