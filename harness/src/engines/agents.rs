//! The agents engine (Wiger's deadlock-resolving lock agents, `kernel/src/agents/`) as a
//! [`Protocol`] site, so that the one harness routes its messages and checks it.
//!
//! # What a site is
//! Node `n` runs the lock server `S{n}` ([`LockServer`]) and one client, whose transactions
//! it runs one after the other, each with a fresh [`Agent`]. The lock `LockId(i)` is the
//! hierarchical path `paths[i]` (given when the cluster is built); every path lives on the
//! server of its first key (`key % servers`), so related paths (`[a]` and `[a, b]`) share a
//! server and meet in its queues, as in `locks`.
//!
//! # The driving contract
//! - `Acquire { lock, mode }` with `R` (read) or `W` (write) adds the lock to the site's
//!   transaction, starting one if none runs (`locks:lock/4`; the other modes are the token
//!   engine's: [`KernelError::InvalidMode`]).
//! - `Granted` is emitted for every lock of the transaction when the agent reports that it
//!   has them all (the seed's "have all locks", [`AgentOutput::HaveAll`]); until then a
//!   lock is pending, however many of its servers grant it. A lock that the agent
//!   surrenders to resolve a deadlock before that report is never told, so the client
//!   never sees it (the seed: only a lock claimed in an earlier "have all locks" counts).
//! - Once told, a transaction takes no new lock until all of its locks are released
//!   ([`KernelError::AlreadyHeld`] names a held one): a lock asked for after "have all
//!   locks" could close a cycle through a lock the client already acts on, and the agent
//!   would then revoke it ([`AgentOutput::Revoked`]) or abort, which [`Protocol`]'s
//!   grant-only outputs cannot say. So a transaction asks for all its locks before the
//!   first answer, as `locks:lock_objects/2` does.
//! - `Release { lock }` ends the client's use of a told lock; the locks stay in the
//!   servers' queues until the last one is released, when the agent ends the transaction
//!   (two-phase locking, `locks:end_transaction/1`, [`AgentInput::Finish`]).
//! - A revocation or an abort is a step error, [`KernelError::Revoked`] (the harness
//!   records it): with this contract and no failed server neither can happen, and the
//!   tests hold the engine to it.
//!
//! Messages: an agent's message to a server, and a queue for an agent (a server's
//! announcement or another agent's forward), addressed by its reference so that a queue
//! for a transaction that has ended is dropped. Agent `A{k}` runs on node `k % nodes`.

use super::adapter::all_or_nothing;
use crate::properties::{Invariants, P1};
use crate::{Cluster, VecSink, Violation};
use hilock_kernel::agents::{
    Agent, AgentError, AgentId, AgentInput, AgentOutput, AgentVariant, Announce, LockInfo,
    LockMode, LockPath, LockServer, Req, ServerId, ServerMsg, ServerVariant, Servers, Status,
};
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink,
};
use std::sync::Arc;

/// Depth of a path.
pub const D: usize = 3;
/// Entries of a server's table (so of an announced queue).
pub const Q: usize = 8;
/// Locks of one transaction (and queues its agent knows).
pub const K: usize = 6;
/// Lock records of a server.
pub const R: usize = 8;

/// A message between agents sites.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AgentsMsg {
    /// From an agent to the receiving node's lock server.
    Server(ServerMsg<D>),
    /// A queue for agent `to`: announced by the sending node's server, or forwarded by its
    /// agent.
    Info {
        /// The agent it is for.
        to: AgentId,
        /// The queue.
        info: Box<LockInfo<D, Q>>,
    },
}

/// Where a lock of the site's transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Hold {
    /// Asked for; not reported held yet.
    Pending,
    /// Reported held ("have all locks").
    Held,
    /// Released by the client; kept by the servers until the transaction ends.
    Released,
}

/// What the client of a site sees of its transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Txn {
    agent: Agent<D, Q, K>,
    locks: Vec<(LockId, LockMode, Hold)>,
}

/// One node of the agents engine: a lock server and a client's transactions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AgentsSite {
    id: NodeId,
    nodes: u16,
    servers: u16,
    paths: Arc<[LockPath<D>]>,
    server: LockServer<D, Q, R>,
    txn: Option<Txn>,
    /// The reference of the next transaction's agent (`id`, then `+ nodes`).
    next: u16,
    abort_on_deadlock: bool,
    variant: AgentVariant,
    surrenders: u32,
    refused: u32,
}

impl AgentsSite {
    /// The sites of a cluster of `nodes` nodes whose locks are `paths` (lock `i` is
    /// `paths[i]`), on the servers of the first `servers` nodes (at least one, at most
    /// `nodes`).
    pub fn cluster(nodes: u16, servers: u16, paths: &[&[u16]]) -> Result<Vec<Self>, AgentError> {
        if servers == 0 || servers > nodes || nodes as usize > hilock_kernel::agents::MAX_SERVERS {
            return Err(AgentError::BadServers);
        }
        let paths: Arc<[LockPath<D>]> = paths
            .iter()
            .map(|k| LockPath::new(k))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        Ok((0..nodes)
            .map(|n| AgentsSite {
                id: NodeId(n),
                nodes,
                servers,
                paths: paths.clone(),
                server: LockServer::new(ServerId(n)),
                txn: None,
                next: n,
                abort_on_deadlock: false,
                variant: AgentVariant::SEED,
                surrenders: 0,
                refused: 0,
            })
            .collect())
    }

    /// The same site whose agents abort rather than revoke a told lock
    /// (`abort_on_deadlock`).
    pub fn with_abort_on_deadlock(mut self, abort: bool) -> Self {
        self.abort_on_deadlock = abort;
        self
    }

    /// The same site with other agent and server variants (the refuted ones are kept so
    /// that a test can watch the harness catch them).
    pub fn with_variants(mut self, agent: AgentVariant, server: ServerVariant) -> Self {
        self.variant = agent;
        self.server = self.server.with_variant(server);
        self
    }

    /// Surrenders this site's agents sent (rule A5).
    pub fn surrenders(&self) -> u32 {
        self.surrenders
    }

    /// Surrenders of a lock no longer held, and releases of nothing, that this node's
    /// server refused (nothing changed; the runtime's engine ignores them the same way).
    pub fn refused(&self) -> u32 {
        self.refused
    }

    /// The lock server of this node.
    pub fn server(&self) -> &LockServer<D, Q, R> {
        &self.server
    }

    /// The path of `lock`.
    pub fn path(&self, lock: LockId) -> Result<LockPath<D>, KernelError> {
        self.paths
            .get(lock.0 as usize)
            .copied()
            .ok_or(KernelError::UnknownLock(lock))
    }

    /// The running transaction's agent reference and the locks it was told it holds (and
    /// has not released), with their paths and modes.
    pub fn told(&self) -> impl Iterator<Item = (AgentId, LockId, LockPath<D>, LockMode)> + '_ {
        self.txn.iter().flat_map(move |t| {
            t.locks
                .iter()
                .filter(|(_, _, h)| *h == Hold::Held)
                .map(move |(l, m, _)| (t.agent.id(), *l, self.paths[l.0 as usize], *m))
        })
    }

    /// The mode of `lock` in the running transaction if it is where `hold` says (Φ if
    /// not): what `held`, `is_pending` and `pending_mode` answer.
    fn mode_in(&self, lock: LockId, hold: Hold) -> Result<Mode, KernelError> {
        self.path(lock)?;
        Ok(self
            .txn
            .iter()
            .flat_map(|t| t.locks.iter())
            .find(|e| e.0 == lock && e.2 == hold)
            .map_or(Mode::Phi, |e| mode_of(e.1)))
    }

    fn home(&self, path: &LockPath<D>) -> ServerId {
        ServerId(path.keys().first().map_or(0, |k| k % self.servers))
    }

    fn node_of(&self, agent: AgentId) -> NodeId {
        NodeId(agent.0 % self.nodes)
    }

    fn lock_of_path(&self, path: &LockPath<D>) -> Option<LockId> {
        self.paths
            .iter()
            .position(|p| p == path)
            .map(|i| LockId(i as u16))
    }

    /// Steps the running agent and turns what it says into outputs.
    fn agent_step(
        &mut self,
        input: AgentInput<'_, D, Q>,
        outs: &mut Vec<Output<AgentsMsg>>,
    ) -> Result<(), KernelError> {
        let id = self.id;
        let Some(txn) = self.txn.as_mut() else {
            return Ok(());
        };
        let mut said: VecSink<AgentOutput<D, Q>> = VecSink::new();
        txn.agent.step(input, &mut said).map_err(|e| kerr(e, id))?;
        let mut told = Vec::new();
        for o in said.0 {
            match o {
                AgentOutput::ToServer { server, msg } => {
                    if matches!(msg, ServerMsg::Surrender { .. }) {
                        self.surrenders += 1;
                    }
                    outs.push(Output::Send {
                        to: NodeId(server.0),
                        msg: AgentsMsg::Server(msg),
                    });
                }
                AgentOutput::ToAgent { agent, info } => outs.push(Output::Send {
                    to: NodeId(agent.0 % self.nodes),
                    msg: AgentsMsg::Info {
                        to: agent,
                        info: Box::new(info),
                    },
                }),
                AgentOutput::Granted { path, .. } => told.push(path),
                AgentOutput::HaveAll => {}
                // A told lock lost, or the transaction aborted: the contract above rules
                // both out, so the engine broke it.
                AgentOutput::Revoked { path } => {
                    let lock = self.lock_of_path(&path).unwrap_or(LockId(u16::MAX));
                    return Err(KernelError::Revoked(lock));
                }
                AgentOutput::Aborted { .. } => {
                    let first = txn.locks.first().map_or(LockId(u16::MAX), |e| e.0);
                    return Err(KernelError::Revoked(first));
                }
            }
        }
        let told = told
            .iter()
            .map(|p| self.lock_of_path(p).ok_or(KernelError::InvalidMode))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(txn) = self.txn.as_mut() else {
            return Ok(());
        };
        for lock in told {
            if let Some(e) = txn.locks.iter_mut().find(|e| e.0 == lock) {
                if e.2 == Hold::Pending {
                    e.2 = Hold::Held;
                    outs.push(Output::Granted {
                        lock,
                        mode: mode_of(e.1),
                    });
                }
            }
        }
        Ok(())
    }

    fn apply(
        &mut self,
        input: Input<'_, AgentsMsg>,
        outs: &mut Vec<Output<AgentsMsg>>,
    ) -> Result<(), KernelError> {
        match input {
            Input::Acquire { lock, mode } => {
                let path = self.path(lock)?;
                let mode = match mode {
                    Mode::R => LockMode::Read,
                    Mode::W => LockMode::Write,
                    _ => return Err(KernelError::InvalidMode),
                };
                if let Some(t) = &self.txn {
                    if let Some((_, _, h)) = t.locks.iter().find(|e| e.0 == lock) {
                        return Err(match h {
                            Hold::Pending => KernelError::AlreadyPending(lock),
                            _ => KernelError::AlreadyHeld(lock),
                        });
                    }
                    if let Some((l, _, _)) = t.locks.iter().find(|e| e.2 != Hold::Pending) {
                        return Err(KernelError::AlreadyHeld(*l));
                    }
                }
                if self.txn.is_none() {
                    let me = AgentId(self.next);
                    self.next = self
                        .next
                        .checked_add(self.nodes)
                        .ok_or(KernelError::QueueFull(lock))?;
                    self.txn = Some(Txn {
                        agent: Agent::new(me, self.abort_on_deadlock).with_variant(self.variant),
                        locks: Vec::new(),
                    });
                }
                if let Some(t) = self.txn.as_mut() {
                    t.locks.push((lock, mode, Hold::Pending));
                }
                let servers = Servers::one(self.home(&path));
                self.agent_step(
                    AgentInput::Lock {
                        path,
                        mode,
                        servers,
                        req: Req::All,
                    },
                    outs,
                )
            }
            Input::Release { lock } => {
                self.path(lock)?;
                let Some(t) = self.txn.as_mut() else {
                    return Err(KernelError::NotHeld(lock));
                };
                let Some(e) = t
                    .locks
                    .iter_mut()
                    .find(|e| e.0 == lock && e.2 == Hold::Held)
                else {
                    return Err(KernelError::NotHeld(lock));
                };
                e.2 = Hold::Released;
                if t.locks.iter().all(|e| e.2 == Hold::Released) {
                    self.agent_step(AgentInput::Finish, outs)?;
                    if self
                        .txn
                        .as_ref()
                        .is_some_and(|t| t.agent.status() != Status::Committed)
                    {
                        return Err(KernelError::Revoked(lock));
                    }
                    self.txn = None;
                }
                Ok(())
            }
            Input::Deliver { from, msg } => match msg {
                AgentsMsg::Server(m) => {
                    let mut said: VecSink<Announce<D, Q>> = VecSink::new();
                    match (self.server.step(m, &mut said), m) {
                        (Ok(_), _) => {}
                        // As the runtime's engine: a surrender of a queue in which the
                        // agent holds nothing any more (its own earlier surrender of a
                        // related lock moved its entries; the announcement of that move is
                        // on its way to it), and a release or cancel of nothing, change
                        // nothing and need no answer.
                        (Err(AgentError::NotHolder(_)), ServerMsg::Surrender { .. })
                        | (Err(_), ServerMsg::Release { .. } | ServerMsg::Cancel { .. }) => {
                            self.refused += 1;
                        }
                        (Err(e), _) => return Err(kerr(e, from)),
                    }
                    for a in said.0 {
                        outs.push(Output::Send {
                            to: self.node_of(a.to),
                            msg: AgentsMsg::Info {
                                to: a.to,
                                info: Box::new(a.info),
                            },
                        });
                    }
                    Ok(())
                }
                AgentsMsg::Info { to, info } => {
                    if self.txn.as_ref().is_some_and(|t| t.agent.id() == *to) {
                        self.agent_step(AgentInput::Info(info), outs)
                    } else {
                        // For a transaction of this node that has ended.
                        Ok(())
                    }
                }
            },
            Input::TryAcquire { lock, .. } => Err(KernelError::Unsupported(lock)),
            Input::Cancel { lock } => Err(KernelError::CancelUnsupported(lock)),
            Input::Downgrade { lock, .. } => Err(KernelError::DowngradeUnsupported(lock)),
            Input::Convert { lock, .. } => Err(KernelError::ConvertUnsupported(lock)),
            Input::SetValue { lock, .. } => Err(KernelError::ValueUnsupported(lock)),
            Input::Upgrade { lock } => Err(KernelError::NotHoldingU(lock)),
            Input::SetPriority { .. } => Err(KernelError::Unsupported(LockId(0))),
        }
    }
}

fn mode_of(m: LockMode) -> Mode {
    match m {
        LockMode::Read => Mode::R,
        LockMode::Write => Mode::W,
    }
}

/// An engine error as the kernel's: the inputs this site takes can only meet these.
fn kerr(e: AgentError, from: NodeId) -> KernelError {
    match e {
        AgentError::OutputsFull => KernelError::OutputsFull,
        AgentError::Full => KernelError::QueueFull(LockId(u16::MAX)),
        AgentError::UnknownAgent(_) | AgentError::NotHolder(_) | AgentError::NotQueued(_) => {
            KernelError::UnknownNode(from)
        }
        _ => KernelError::Duplicate(LockId(u16::MAX)),
    }
}

impl Protocol for AgentsSite {
    type Msg = AgentsMsg;
    const MAX_OUTPUTS: usize = {
        let a = Agent::<D, Q, K>::MAX_OUTPUTS + K;
        let s = LockServer::<D, Q, R>::MAX_OUTPUTS;
        if a > s {
            a
        } else {
            s
        }
    };

    const TOKENS: bool = false;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<AgentsMsg>>>(
        &mut self,
        input: Input<'_, AgentsMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        all_or_nothing(self, out, Self::MAX_OUTPUTS, |site, outs| {
            site.apply(input, outs)
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        self.mode_in(lock, Hold::Held)
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.path(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.mode_in(lock, Hold::Pending).map(|m| m != Mode::Phi)
    }

    fn pending_mode(&self, lock: LockId) -> Result<Mode, KernelError> {
        self.mode_in(lock, Hold::Pending)
    }

    fn kind(msg: &AgentsMsg) -> MsgKind {
        match msg {
            AgentsMsg::Server(ServerMsg::Request { .. }) => MsgKind::Request,
            AgentsMsg::Server(ServerMsg::Release { .. } | ServerMsg::Cancel { .. }) => {
                MsgKind::Release
            }
            AgentsMsg::Server(ServerMsg::Surrender { .. }) => MsgKind::Freeze,
            AgentsMsg::Info { .. } => MsgKind::Grant,
        }
    }

    /// The lock a message is about, by the first key of its path (a transaction's release
    /// names no path: lock 0).
    fn lock_of(msg: &AgentsMsg) -> LockId {
        let key = match msg {
            AgentsMsg::Server(
                ServerMsg::Request { path, .. }
                | ServerMsg::Surrender { path, .. }
                | ServerMsg::Cancel { path, .. },
            ) => path.keys().first().copied(),
            AgentsMsg::Server(ServerMsg::Release { .. }) => None,
            AgentsMsg::Info { info, .. } => info.path.keys().first().copied(),
        };
        LockId(key.unwrap_or(0))
    }
}

impl Invariants for AgentsSite {
    /// P1 over the hierarchy: no two sites are told they hold related paths (one covers the
    /// other, as `[a]` covers `[a, b]`) unless both read; and every lock a site was told it
    /// holds is granted to its agent by the lock's server (the client acts only on what the
    /// servers grant).
    fn invariants(c: &Cluster<Self>) -> Result<(), Violation> {
        let told: Vec<(NodeId, AgentId, LockPath<D>, LockMode)> = c
            .sites()
            .enumerate()
            .filter(|(n, _)| !c.is_down(NodeId(*n as u16)))
            .flat_map(|(n, s)| {
                s.told()
                    .map(move |(a, _, p, m)| (NodeId(n as u16), a, p, m))
            })
            .collect();
        for (i, (n, _, p, m)) in told.iter().enumerate() {
            for (o, _, q, k) in &told[i + 1..] {
                if n != o && p.related(q) && !m.compatible(*k) {
                    return Err(Violation {
                        property: P1,
                        detail: format!("{n} holds {p} in {m} and {o} holds {q} in {k}"),
                    });
                }
            }
        }
        for (n, a, p, m) in &told {
            let s = c.site(*n);
            let home = s.home(p);
            let server = c.site(NodeId(home.0)).server();
            let granted = server
                .entries()
                .any(|e| e.agent == *a && e.granted && e.path.covers(p) && e.mode.covers(*m));
            if !granted {
                return Err(Violation {
                    property: P1,
                    detail: format!(
                        "{n} was told it holds {p} in {m}, which {home} does not grant {a}"
                    ),
                });
            }
        }
        Ok(())
    }
}
