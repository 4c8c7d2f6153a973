//! Wiger's deadlock-resolving agents (uwiger/locks) as a Stateright model: transactions
//! (`hilock_kernel::agents::Agent`) lock paths on lock servers
//! (`hilock_kernel::agents::LockServer`) over a network that delivers in any order across
//! pairs of processes and in order between one pair (Erlang's guarantee; the
//! configuration can drop that too). The model only routes messages and plays the
//! clients; every rule is the kernel's.
//!
//! # Clients
//! A client's script is a list of locks `(path, mode, servers, all|any|majority)`. The
//! first is asked at the start; each next one as soon as the agent reports holding every
//! lock so far (`txn.lock(…).await`); a read followed by a write of the same path is an
//! upgrade. When the agent holds the whole script the client may end the transaction
//! ([`AgentAction::Finish`]), which releases everything. With [`AgentsModel::give_up`] one
//! client per run may also end it while it waits for a lock it asked for (a timeout, a
//! dropped transaction): the same `Finish`, which aborts it. An aborted transaction is not
//! retried.
//!
//! # Properties
//! - `mutual exclusion`: no two live agents *believe* (the locks their clients were told
//!   they hold, on the servers whose queue — as the agent knows it — grants them) that they
//!   hold related paths on one server in conflicting modes; and no server grants two
//!   conflicting related entries.
//! - `no kernel error`: every server and agent step was accepted.
//! - `no deadlock remains`: in a state where no action is enabled, every transaction has
//!   ended (committed or aborted). Every step consumes a message, advances a script or
//!   ends a transaction, and with the seed's rules servers' versions only grow and agents
//!   never take an older queue, so no state repeats on a path: every run is finite and ends
//!   in such a state, which makes this also `every transaction eventually completes`.
//! - `no phantom deadlock`: every surrender resolves a real cycle present at the moment
//!   it was decided: in the state in which the agent decides (the servers' queues then,
//!   not the agent's view of them), an entry the surrender moves — a granted entry of the
//!   agent, on that server, on a path related to the surrendered lock — lies on a cycle of
//!   the servers' *entry* wait-for graph ([`AgentsModel::real_cycle`]; for an abort on
//!   deadlock, any granted entry of the agent). That graph is computed here, apart from the
//!   kernel's [`WaitGraph`]: a waiting entry waits for every earlier related entry of
//!   another agent that is waiting or conflicts with it; a granted entry waits for every
//!   waiting entry of its agent (the agent keeps it until it has all its locks). Entries of
//!   ended agents and waiting entries of locks already held on enough servers are left
//!   out. Every cycle of it runs through at least two distinct agents.
//! - `one surrender per deadlock`: a deadlock is a cycle of the true wait-for graph with
//!   its wait edges; no agent surrenders (or aborts on deadlock) for a deadlock that
//!   another surrender was already made for while that cycle has existed ever since.
//! - `every transaction eventually ends` (`eventually`): on every path, a state where
//!   every transaction has committed or aborted. Stateright 0.31 can miss a
//!   counterexample of `eventually` where paths join, so `no deadlock remains` above is
//!   the check this rests on; this one is kept because it fails fast where it does see one.
//! - `versions bounded`: no server's version counter passes the configuration's bound (a
//!   guard: a livelock of surrenders would otherwise make the state space infinite).
//! - `sometimes`: a surrender, a forward, every transaction committed, an abort.

use crate::check::Counterexample;
use hilock_harness::VecSink;
use hilock_kernel::agents::{
    AbortReason, Agent, AgentError, AgentInput, AgentOutput, AgentVariant, Announce, LockInfo,
    LockMode, LockPath, LockServer, QEntry, Report, Req, Rule, ServerId, ServerMsg, ServerVariant,
    Servers, Status, WaitGraph,
};
use serde::Serialize;
use stateright::{Checker, HasDiscoveries, Model, Path, Property};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Path depth in the model.
pub const MD: usize = 2;
/// Queue capacity (entries per server).
pub const MQ: usize = 8;
/// Locks and views per agent.
pub const MK: usize = 6;
/// Records per server.
pub const MR: usize = 4;
/// Servers a configuration may have.
pub const MAX_SERVERS_MODEL: usize = 4;
/// The kernel agent the model drives.
pub type MAgent = Agent<MD, MQ, MK>;
/// The kernel server the model drives.
pub type MServer = LockServer<MD, MQ, MR>;
/// A queue announcement.
pub type MInfo = LockInfo<MD, MQ>;

/// Property names.
pub const EXCLUSION: &str = "mutual exclusion";
/// Property name.
pub const NO_ERROR: &str = "no kernel error";
/// Property name.
pub const NO_DEADLOCK: &str = "no deadlock remains";
/// Property name.
pub const NO_PHANTOM: &str = "no phantom deadlock";
/// Property name.
pub const BOUNDED: &str = "versions bounded";
/// Property name.
pub const ONE_SURRENDER: &str = "one surrender per deadlock";
/// Property name: every transaction given an [`Outcome`] ends as it says.
pub const OUTCOME: &str = "transactions end as expected";
/// Property name (`eventually`).
pub const ENDS: &str = "every transaction eventually ends";
/// The `always` properties.
pub const SAFETY: [&str; 7] = [
    EXCLUSION,
    NO_ERROR,
    NO_DEADLOCK,
    NO_PHANTOM,
    ONE_SURRENDER,
    BOUNDED,
    OUTCOME,
];
/// The `sometimes` properties.
pub const REACHED: [&str; 4] = [
    "a surrender",
    "a forward",
    "every transaction commits",
    "an abort",
];

/// One lock of a client's script as a configuration gives it: `(keys, mode, servers as a
/// bit set, all|any|majority)`.
pub type ScriptLock<'a> = (&'a [u16], LockMode, u32, Req);

/// One lock of a client's script.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct LockStep {
    /// The path.
    pub path: LockPath<MD>,
    /// The mode.
    pub mode: LockMode,
    /// The servers.
    pub servers: Servers,
    /// How many must grant.
    pub req: Req,
}

impl LockStep {
    /// The agent's input for this lock: its client asks for it.
    fn input(self) -> AgentInput<'static, MD, MQ> {
        AgentInput::Lock {
            path: self.path,
            mode: self.mode,
            servers: self.servers,
            req: self.req,
        }
    }
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Script {
    /// Its locks, in order.
    pub steps: Vec<LockStep>,
    /// `abort_on_deadlock`.
    pub abort_on_deadlock: bool,
}

/// How a transaction must have ended in every state where no action is enabled
/// ([`AgentsModel::with_outcome`]; property `transactions end as expected`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Committed.
    Commits,
    /// Committed, or aborted because server `.0` went down (naming it); the abort only
    /// while that server is down.
    CommitsOrDownAborts(u16),
}

impl Outcome {
    /// Whether `status` (with the set `down` of crashed servers) fits.
    pub fn fits(self, status: Status, down: u32) -> bool {
        match self {
            Outcome::Commits => status == Status::Committed,
            Outcome::CommitsOrDownAborts(s) => {
                status == Status::Committed
                    || (status == Status::Aborted(AbortReason::ServersDown(ServerId(s)))
                        && down & (1 << s) != 0)
            }
        }
    }
}

/// Delivery between processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum Delivery {
    /// In order between one pair, any order across pairs (Erlang).
    FifoPerPair,
    /// Any order.
    Unordered,
}

/// A configuration.
#[derive(Clone, Debug)]
pub struct AgentsModel {
    /// Name.
    pub name: String,
    /// The clients (agent `i` has reference `A{i}`: later index, larger reference).
    pub scripts: Vec<Script>,
    /// Number of servers.
    pub servers: u16,
    /// Agent variant.
    pub agent_variant: AgentVariant,
    /// Server variant.
    pub server_variant: ServerVariant,
    /// Delivery.
    pub delivery: Delivery,
    /// Bound on every server's version counter.
    pub max_version: u32,
    /// A server that may crash (once, at any point of a run).
    pub crash: Option<u16>,
    /// Per agent, how its transaction must end (checked where no action is enabled).
    pub outcomes: Vec<(u16, Outcome)>,
    /// A client may give up while it waits (one per run; any of them): `Finish` of a
    /// transaction that does not hold every lock it asked for (a timeout, a dropped transaction; the runtime's
    /// `hilock lock --txn` past its `--timeout-ms`), which aborts it
    /// (`AbortReason::Client`) while its queue entries, surrenders and announcements are
    /// still in flight.
    pub give_up: bool,
}

/// A process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Proc {
    /// Agent `i`.
    Agent(u16),
    /// Server `i`.
    Server(u16),
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proc::Agent(i) => write!(f, "A{i}"),
            Proc::Server(i) => write!(f, "S{i}"),
        }
    }
}

/// A message in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetMsg {
    /// Agent → server.
    ToServer(ServerMsg<MD>),
    /// Server → agent (announcement) or agent → agent (forward).
    Info(MInfo),
    /// The monitor of a crashed server fired (Erlang's `'DOWN'`: it arrives after every
    /// message the server sent before it crashed).
    Down(u16),
}

/// A server or an agent in a state: shared with the state it came from until a step changes
/// it (most steps change one process), with its hash computed when it is made or changed.
/// A state hashes as the hashes of its parts (the checker hashed every whole process of
/// every successor before, a third of its time); two states are equal only if their parts
/// are. Different parts with equal hashes would make states that differ only in them
/// collide in the checker's fingerprint, as two different states can collide anyway.
#[derive(Clone, Debug)]
pub struct Part<T> {
    hash: u64,
    val: Arc<T>,
}

impl<T: Hash> Part<T> {
    /// `val` with its hash.
    pub fn new(val: T) -> Self {
        Part {
            hash: Self::hash_of(&val),
            val: Arc::new(val),
        }
    }

    fn hash_of(val: &T) -> u64 {
        let mut h = std::hash::DefaultHasher::new(); // fixed keys: the same in every run
        val.hash(&mut h);
        h.finish()
    }

    /// Applies `f` to the value (copied first if another state shares it) and hashes
    /// the result.
    pub fn update<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R
    where
        T: Clone,
    {
        let r = f(Arc::make_mut(&mut self.val));
        self.hash = Self::hash_of(&self.val);
        r
    }
}

impl<T> std::ops::Deref for Part<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.val
    }
}

impl<T: PartialEq> PartialEq for Part<T> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.val, &other.val) || self.val == other.val)
    }
}

impl<T: Eq> Eq for Part<T> {}

impl<T> Hash for Part<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AState {
    /// The servers.
    pub servers: Vec<Part<MServer>>,
    /// The agents.
    pub agents: Vec<Part<MAgent>>,
    /// Per agent: locks of its script asked so far.
    pub asked: Vec<u8>,
    /// Messages in flight per (from, to).
    pub net: BTreeMap<(Proc, Proc), Part<Vec<NetMsg>>>,
    /// Ghost: an agent surrendered without a real cycle (its index).
    pub phantom: Option<u16>,
    /// Ghost: a kernel error.
    pub error: Option<String>,
    /// Ghost: surrenders so far (saturating at 7).
    pub surrenders: u8,
    /// Ghost: some agent forwarded.
    pub forwarded: bool,
    /// Ghost: the deadlocks (cycles of the true wait-for graph, by their wait edges, see
    /// [`AgentsModel::deadlocks`]) that a surrender (or abort on deadlock) was made for and
    /// that have existed ever since, sorted.
    pub targeted: Vec<(u64, u64)>,
    /// Ghost: an episode saw more surrenders than cycles (the index of the agent whose
    /// surrender was one too many).
    pub extra_surrender: Option<u16>,
    /// Crashed servers (bit `i` is server `i`).
    pub down: u32,
}

/// An action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgentAction {
    /// Deliver the message at `index` of the channel (the head, on FIFO channels).
    Deliver {
        /// Sender.
        from: Proc,
        /// Receiver.
        to: Proc,
        /// Position in the channel.
        index: u8,
        /// What is delivered (so that the Explorer can name it without the state).
        what: Carried,
    },
    /// Client `agent` ends its transaction (it holds its whole script).
    Finish {
        /// The agent.
        agent: u16,
    },
    /// Server `server` crashes: the messages on their way to it are lost, its
    /// announcements already sent still arrive, then every agent's monitor fires.
    Crash {
        /// The server.
        server: u16,
    },
}

/// A summary of a message in flight, carried by a delivery action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Carried {
    /// Agent → server.
    ToServer(ServerMsg<MD>),
    /// A queue announcement (server → agent) or forward (agent → agent).
    Info {
        /// The server whose queue it is.
        server: u16,
        /// The lock.
        path: LockPath<MD>,
        /// The queue's version.
        version: u32,
        /// The agent that caused it.
        cause: u16,
    },
    /// The monitor of crashed server `0` fired.
    Down(u16),
}

impl Carried {
    /// The summary of `m`.
    pub fn of(m: &NetMsg) -> Self {
        match m {
            NetMsg::ToServer(msg) => Carried::ToServer(*msg),
            NetMsg::Info(i) => Carried::Info {
                server: i.server.0,
                path: i.path,
                version: i.version,
                cause: i.cause.0,
            },
            NetMsg::Down(s) => Carried::Down(*s),
        }
    }
}

impl std::fmt::Display for Carried {
    /// `request /1 W`, `info S0 /1 v2 by A1`, `DOWN S0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Carried::ToServer(ServerMsg::Request { path, mode, .. }) => {
                write!(f, "request {} {mode}", path_str(path))
            }
            Carried::ToServer(ServerMsg::Surrender { path, .. }) => {
                write!(f, "surrender {}", path_str(path))
            }
            Carried::ToServer(ServerMsg::Cancel { path, .. }) => {
                write!(f, "cancel {}", path_str(path))
            }
            Carried::ToServer(ServerMsg::Release { .. }) => f.write_str("release"),
            Carried::Info {
                server,
                path,
                version,
                cause,
            } => write!(
                f,
                "info S{server} {} v{version} by A{cause}",
                path_str(path)
            ),
            Carried::Down(s) => write!(f, "DOWN S{s}"),
        }
    }
}

/// What one transition did (for traces).
#[derive(Clone, Debug, Default)]
pub struct StepLog {
    /// The action in words.
    pub action: String,
    /// Rules that fired.
    pub rules: String,
    /// Outputs in words.
    pub outputs: Vec<String>,
    /// Nothing is written (the checker's transitions: the words are only for traces, and
    /// formatting and allocating them was among the largest costs in `perf` of a check).
    quiet: bool,
}

impl StepLog {
    /// A log that writes nothing.
    fn quiet() -> Self {
        StepLog {
            quiet: true,
            ..StepLog::default()
        }
    }

    /// Records output `f()` unless quiet.
    fn out(&mut self, f: impl FnOnce() -> String) {
        if !self.quiet {
            self.outputs.push(f());
        }
    }
}

fn path_str(p: &LockPath<MD>) -> String {
    p.to_string()
}

/// A queue in words: `A0:/1 W*` (`*`: holds).
pub fn queue_str(q: &[QEntry<MD>]) -> String {
    q.iter()
        .map(|e| {
            format!(
                "A{}:{}{}{}",
                e.agent.0,
                path_str(&e.path),
                e.mode,
                if e.granted { "*" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn info_str(i: &MInfo) -> String {
    format!(
        "S{} {} v{} by A{} [{}]",
        i.server.0,
        path_str(&i.path),
        i.version,
        i.cause.0,
        queue_str(&i.queue)
    )
}

fn msg_str(m: &NetMsg) -> String {
    match m {
        NetMsg::ToServer(ServerMsg::Request { path, mode, .. }) => {
            format!("request {} {mode}", path_str(path))
        }
        NetMsg::ToServer(ServerMsg::Surrender { path, .. }) => {
            format!("surrender {}", path_str(path))
        }
        NetMsg::ToServer(ServerMsg::Cancel { path, .. }) => format!("cancel {}", path_str(path)),
        NetMsg::ToServer(ServerMsg::Release { .. }) => "release".to_string(),
        NetMsg::Info(i) => format!("info {}", info_str(i)),
        NetMsg::Down(s) => format!("DOWN S{s}"),
    }
}

impl AgentsModel {
    /// A configuration: `scripts[i]` is agent `i`'s list of `(keys, mode, servers, req)`.
    pub fn new(
        name: &str,
        servers: u16,
        scripts: &[(&[ScriptLock], bool)],
    ) -> Result<AgentsModel, AgentError> {
        if servers == 0 || servers as usize > MAX_SERVERS_MODEL {
            return Err(AgentError::BadServers);
        }
        let mut sc = Vec::new();
        for (steps, abort) in scripts {
            let mut v = Vec::new();
            for (keys, mode, srv, req) in steps.iter() {
                if srv >> servers != 0 {
                    return Err(AgentError::BadServers);
                }
                v.push(LockStep {
                    path: LockPath::new(keys)?,
                    mode: *mode,
                    servers: Servers(*srv),
                    req: *req,
                });
            }
            sc.push(Script {
                steps: v,
                abort_on_deadlock: *abort,
            });
        }
        Ok(AgentsModel {
            name: name.to_string(),
            scripts: sc,
            servers,
            agent_variant: AgentVariant::SEED,
            server_variant: ServerVariant::SEED,
            delivery: Delivery::FifoPerPair,
            max_version: 40,
            crash: None,
            outcomes: Vec::new(),
            give_up: false,
        })
    }

    /// The same configuration with other variants.
    pub fn with_variants(mut self, a: AgentVariant, s: ServerVariant, name: &str) -> Self {
        self.agent_variant = a;
        self.server_variant = s;
        self.name = name.to_string();
        self
    }

    /// The same configuration where server `server` may crash at any point.
    pub fn with_crash(mut self, server: u16, name: &str) -> Self {
        self.crash = Some(server);
        self.name = name.to_string();
        self
    }

    /// The same configuration where every client may give up while it waits
    /// ([`AgentsModel::give_up`]).
    pub fn with_give_up(mut self, name: &str) -> Self {
        self.give_up = true;
        self.name = name.to_string();
        self
    }

    /// The same configuration where agent `agent`'s transaction must end as `outcome`.
    pub fn with_outcome(mut self, agent: u16, outcome: Outcome) -> Self {
        self.outcomes.push((agent, outcome));
        self
    }

    /// Whether every transaction given an outcome ended as it says.
    pub fn outcomes_fit(&self, st: &AState) -> bool {
        self.outcomes.iter().all(|&(a, o)| {
            st.agents
                .get(a as usize)
                .is_some_and(|ag| o.fits(ag.status(), st.down))
        })
    }

    /// The same configuration with another bound on the servers' version counters.
    pub fn with_max_version(mut self, max_version: u32) -> Self {
        self.max_version = max_version;
        self
    }

    /// The same configuration with another delivery.
    pub fn with_delivery(mut self, d: Delivery, name: &str) -> Self {
        self.delivery = d;
        self.name = name.to_string();
        self
    }

    fn send(st: &mut AState, from: Proc, to: Proc, m: NetMsg) {
        if let Proc::Server(s) = to {
            if st.down & (1 << s) != 0 {
                return; // a message to a dead process is lost
            }
        }
        match st.net.get_mut(&(from, to)) {
            Some(ch) => ch.update(|ch| ch.push(m)),
            None => {
                st.net.insert((from, to), Part::new(vec![m]));
            }
        }
    }

    /// Steps agent `a` with `input`, routes its outputs, and lets the client ask its next
    /// locks while the agent holds all so far.
    fn agent_step(
        &self,
        st: &mut AState,
        a: usize,
        input: AgentInput<'_, MD, MQ>,
        log: &mut StepLog,
    ) {
        let mut out = VecSink::default();
        match st.agents[a].update(|ag| ag.step(input, &mut out)) {
            Ok(r) => {
                self.note(st, a, r, &out.0, log);
            }
            Err(e) => {
                st.error = Some(format!("A{a}: {e}"));
                return;
            }
        }
        self.route(st, a, out.0, log);
        // The client asks its next lock as soon as it holds all so far.
        while st.agents[a].status() == Status::HaveAll
            && (st.asked[a] as usize) < self.scripts[a].steps.len()
        {
            let s = self.scripts[a].steps[st.asked[a] as usize];
            st.asked[a] += 1;
            log.out(|| format!("client of A{a} asks {} {}", path_str(&s.path), s.mode));
            let mut out = VecSink::default();
            match st.agents[a].update(|ag| ag.step(s.input(), &mut out)) {
                Ok(r) => self.note(st, a, r, &out.0, log),
                Err(e) => {
                    st.error = Some(format!("A{a}: {e}"));
                    return;
                }
            }
            self.route(st, a, out.0, log);
        }
    }

    fn note(
        &self,
        st: &mut AState,
        a: usize,
        r: Report,
        out: &[AgentOutput<MD, MQ>],
        log: &mut StepLog,
    ) {
        if r.contains(Rule::Surrender) || r.contains(Rule::AbortOnDeadlock) {
            // The servers' queues are those the agent decided in (an agent step changes
            // none); an agent that aborted was live when it decided.
            let moved = out.iter().find_map(|o| match o {
                AgentOutput::ToServer {
                    server,
                    msg: ServerMsg::Surrender { path, .. },
                } => Some((*server, *path)),
                _ => None,
            });
            if !self.real_cycle(st, a, moved) && st.phantom.is_none() {
                st.phantom = Some(a as u16);
            }
            st.surrenders = (st.surrenders + 1).min(7);
            // The deadlock this surrender resolves: the true cycle through `a` (the servers
            // have not seen the surrender yet). One made already for the same cycle, which
            // has existed since, makes this one a second surrender for one deadlock.
            let g = self.true_graph(st);
            let mine = self
                .deadlocks(&g)
                .into_iter()
                .find(|(members, _)| members & (1 << a) != 0);
            if let Some((_, sig)) = mine {
                match st.targeted.binary_search(&sig) {
                    Ok(_) => {
                        if st.extra_surrender.is_none() {
                            st.extra_surrender = Some(a as u16);
                        }
                    }
                    Err(i) => st.targeted.insert(i, sig),
                }
            }
        }
        if r.contains(Rule::Forward) {
            st.forwarded = true;
        }
        if !r.is_empty() && !log.quiet {
            if !log.rules.is_empty() {
                log.rules.push_str("; ");
            }
            log.rules.push_str(&format!("A{a}: {r}"));
        }
    }

    fn route(&self, st: &mut AState, a: usize, out: Vec<AgentOutput<MD, MQ>>, log: &mut StepLog) {
        let me = Proc::Agent(a as u16);
        for o in out {
            match o {
                AgentOutput::ToServer { server, msg } => {
                    let m = NetMsg::ToServer(msg);
                    log.out(|| format!("A{a} → S{}: {}", server.0, msg_str(&m)));
                    Self::send(st, me, Proc::Server(server.0), m);
                }
                AgentOutput::ToAgent { agent, info } => {
                    let m = NetMsg::Info(info);
                    log.out(|| format!("A{a} → A{}: {}", agent.0, msg_str(&m)));
                    Self::send(st, me, Proc::Agent(agent.0), m);
                }
                AgentOutput::Granted { path, mode } => {
                    log.out(|| format!("client of A{a}: granted {} {mode}", path_str(&path)))
                }
                AgentOutput::Revoked { path } => {
                    log.out(|| format!("client of A{a}: revoked {}", path_str(&path)))
                }
                AgentOutput::HaveAll => log.out(|| format!("client of A{a}: have all")),
                AgentOutput::Aborted { reason } => {
                    log.out(|| format!("client of A{a}: aborted ({reason:?})"))
                }
            }
        }
    }

    fn server_step(&self, st: &mut AState, s: usize, msg: &ServerMsg<MD>, log: &mut StepLog) {
        let mut out: VecSink<Announce<MD, MQ>> = VecSink::default();
        match st.servers[s].update(|srv| srv.step(msg, &mut out)) {
            Ok(r) if !log.quiet => log.rules = format!("S{s}: {r}"),
            Ok(_) => {}
            Err(e) => {
                st.error = Some(format!("S{s}: {e}"));
                return;
            }
        }
        for an in out.0 {
            let m = NetMsg::Info(an.info);
            log.out(|| format!("S{s} → A{}: {}", an.to.0, msg_str(&m)));
            Self::send(st, Proc::Server(s as u16), Proc::Agent(an.to.0), m);
        }
    }

    /// Applies `action` to `last` (the transition of the model, with a log for traces).
    pub fn apply(&self, last: &AState, action: AgentAction) -> Option<(AState, StepLog)> {
        self.apply_logged(last, action, StepLog::default())
    }

    fn apply_logged(
        &self,
        last: &AState,
        action: AgentAction,
        mut log: StepLog,
    ) -> Option<(AState, StepLog)> {
        let mut st = last.clone();
        match action {
            AgentAction::Deliver {
                from,
                to,
                index,
                what,
            } => {
                let ch = st.net.get_mut(&(from, to))?;
                let i = index as usize;
                if i >= ch.len() || Carried::of(&ch[i]) != what {
                    return None;
                }
                let m = ch.update(|ch| ch.remove(i));
                if ch.is_empty() {
                    st.net.remove(&(from, to));
                }
                if !log.quiet {
                    log.action = format!("{from} → {to}: {}", msg_str(&m));
                }
                match (to, m) {
                    (Proc::Server(s), NetMsg::ToServer(msg)) => {
                        self.server_step(&mut st, s as usize, &msg, &mut log)
                    }
                    (Proc::Agent(a), NetMsg::Down(s)) => self.agent_step(
                        &mut st,
                        a as usize,
                        AgentInput::ServerDown(ServerId(s)),
                        &mut log,
                    ),
                    (Proc::Agent(a), NetMsg::Info(info)) => {
                        self.agent_step(&mut st, a as usize, AgentInput::Info(&info), &mut log)
                    }
                    _ => st.error = Some("message to the wrong kind of process".into()),
                }
            }
            AgentAction::Finish { agent } => {
                if !log.quiet {
                    log.action = if st.agents[agent as usize].status() == Status::HaveAll {
                        format!("client of A{agent} ends the transaction")
                    } else {
                        format!("client of A{agent} gives up waiting and ends the transaction")
                    };
                }
                self.agent_step(&mut st, agent as usize, AgentInput::Finish, &mut log);
            }
            AgentAction::Crash { server } => {
                if st.down & (1 << server) != 0 || self.crash != Some(server) {
                    return None;
                }
                if !log.quiet {
                    log.action = format!("S{server} crashes");
                }
                st.down |= 1 << server;
                st.net.retain(|(_, to), _| *to != Proc::Server(server));
                for a in 0..st.agents.len() {
                    Self::send(
                        &mut st,
                        Proc::Server(server),
                        Proc::Agent(a as u16),
                        NetMsg::Down(server),
                    );
                }
            }
        }
        self.update_ghost(&mut st);
        Some((st, log))
    }

    /// Whether agent `a`'s lock `path` is held on enough servers, by the servers' queues.
    fn truly_held(&self, st: &AState, a: usize, path: &LockPath<MD>, mode: LockMode) -> bool {
        let Some(step) = self.scripts[a]
            .steps
            .iter()
            .rev()
            .find(|s| s.path == *path && s.mode == mode)
        else {
            return false;
        };
        let n = step
            .servers
            .iter()
            .filter(|s| {
                st.servers[s.0 as usize].entries().any(|e| {
                    e.agent.0 as usize == a && e.path == *path && e.granted && e.mode.covers(mode)
                })
            })
            .count() as u32;
        n >= step.req.needed(step.servers.len())
    }

    /// The true wait-for graph, from the servers' queues (one queue per server: all its
    /// entries), built by the kernel's [`WaitGraph::add_queues`].
    pub fn true_graph(&self, st: &AState) -> WaitGraph {
        let mut g = WaitGraph::new();
        let qs: Vec<(ServerId, Vec<QEntry<MD>>)> = st
            .servers
            .iter()
            .enumerate()
            .filter(|(i, _)| st.down & (1 << i) == 0)
            .map(|(_, s)| (s.id(), s.entries().collect()))
            .collect();
        let refs: Vec<(ServerId, &[QEntry<MD>])> =
            qs.iter().map(|(s, q)| (*s, q.as_slice())).collect();
        let _ = g.add_queues::<MD, MQ, MAX_SERVERS_MODEL>(&refs, |_, w| {
            let a = w.agent.0 as usize;
            st.agents[a].status().ended() || self.truly_held(st, a, &w.path, w.mode)
        });
        g.close();
        g
    }

    /// The deadlocks of a true wait-for graph: per cycle (strongly connected component of
    /// *waits for a holder*, see [`WaitGraph`]), its members (a set of agent indices) and
    /// its identity, the edges inside it (bit `8·w + f` of the first word: agent `w` waits
    /// for holder `f`; of the second: directly behind an entry `f` holds). A surrender
    /// changes the edges, so a cycle that forms again after one is a new deadlock.
    pub fn deadlocks(&self, g: &WaitGraph) -> Vec<(u64, (u64, u64))> {
        let id = |i: usize| g.agent(i).map_or(0, |a| a.0 as u64);
        g.cycles()
            .map(|c| {
                let (mut waits, mut holds, mut members) = (0u64, 0u64, 0u64);
                for i in (0..g.len()).filter(|i| c & (1 << i) != 0) {
                    members |= 1 << id(i);
                    for j in (0..g.len()).filter(|j| c & (1 << j) != 0) {
                        if g.waits_for_holders(i) & (1 << j) != 0 {
                            waits |= 1 << (8 * id(i) + id(j));
                        }
                        if g.holds_for(i) & (1 << j) != 0 {
                            holds |= 1 << (8 * id(i) + id(j));
                        }
                    }
                }
                (members, (waits, holds))
            })
            .collect()
    }

    /// Whether, by the servers' queues in `st`, a granted entry of agent `a` lies on a
    /// cycle of the entry wait-for graph (see the module doc, `no phantom deadlock`): one
    /// on server `moved.0` on a path related to `moved.1` (the entries a surrender of
    /// that lock moves), or any (`None`: an abort, which releases every entry). Agent `a`
    /// counts as live even if it has just aborted, and so does an agent whose client gave
    /// up ([`AgentsModel::give_up`]): its entries stay in the queues, as waiting as they
    /// were, until its release reaches each server, and no agent can tell them apart.
    pub fn real_cycle(
        &self,
        st: &AState,
        a: usize,
        moved: Option<(ServerId, LockPath<MD>)>,
    ) -> bool {
        let live = |x: usize| {
            x == a
                || matches!(
                    st.agents[x].status(),
                    Status::Running | Status::HaveAll | Status::Aborted(AbortReason::Client)
                )
        };
        let mut all: Vec<(ServerId, QEntry<MD>)> = Vec::new();
        for (i, s) in st.servers.iter().enumerate() {
            if st.down & (1 << i) == 0 {
                all.extend(s.entries().map(|e| (s.id(), e)));
            }
        }
        // A waiting entry that a granted entry of its agent on that server covers waits
        // for nothing: its agent has that lock ("a lock on [a] covers [a, b]").
        let covered = |s: ServerId, e: &QEntry<MD>| {
            all.iter().any(|(t, g)| {
                *t == s
                    && g.granted
                    && g.agent == e.agent
                    && g.path.covers(&e.path)
                    && g.mode.covers(e.mode)
            })
        };
        // At most 64 entries (4 servers of 8).
        let es: Vec<(ServerId, QEntry<MD>)> = all
            .iter()
            .copied()
            .filter(|(s, e)| {
                let x = e.agent.0 as usize;
                live(x)
                    && (e.granted || !(self.truly_held(st, x, &e.path, e.mode) || covered(*s, e)))
            })
            .take(64)
            .collect();
        // reach[i]: the entries entry i waits for, then (closed) waits for transitively.
        let n = es.len();
        let mut reach: Vec<u64> = es
            .iter()
            .enumerate()
            .map(|(i, (s, e))| {
                let waits = |(j, (t, f)): &(usize, &(ServerId, QEntry<MD>))| {
                    if e.granted {
                        !f.granted && f.agent == e.agent
                    } else {
                        s == t && *j < i && WaitGraph::blocked_by(e, f).is_some()
                    }
                };
                es.iter()
                    .enumerate()
                    .filter(waits)
                    .fold(0, |m, (j, _)| m | 1 << j)
            })
            .collect();
        for k in 0..n {
            for i in 0..n {
                if reach[i] & (1 << k) != 0 {
                    reach[i] |= reach[k];
                }
            }
        }
        (0..n).any(|i| {
            let (s, e) = es[i];
            e.granted
                && e.agent.0 as usize == a
                && reach[i] & (1 << i) != 0
                && moved.is_none_or(|(t, p)| t == s && p.related(&e.path))
        })
    }

    fn update_ghost(&self, st: &mut AState) {
        if st.targeted.is_empty() {
            return; // nothing to forget: spare the graph (most states)
        }
        let g = self.true_graph(st);
        let now: Vec<(u64, u64)> = self.deadlocks(&g).into_iter().map(|(_, s)| s).collect();
        st.targeted.retain(|s| now.contains(s));
    }

    /// Mutual exclusion on one state: `Err` says what is violated.
    pub fn exclusion(&self, st: &AState) -> Result<(), String> {
        // Checked in every state: without a heap allocation.
        for (x, ax) in st.agents.iter().enumerate() {
            for (y, ay) in st.agents.iter().enumerate().skip(x + 1) {
                for (s, p, m) in ax.believed() {
                    for (t, q, n) in ay.believed() {
                        if s == t && p.related(&q) && !m.compatible(n) {
                            return Err(format!(
                                "A{x} believes it holds {} {m} and A{y} {} {n} on S{}",
                                path_str(&p),
                                path_str(&q),
                                s.0
                            ));
                        }
                    }
                }
            }
        }
        for (i, s) in st.servers.iter().enumerate() {
            if st.down & (1 << i) != 0 {
                continue;
            }
            let e: heapless::Vec<QEntry<MD>, MQ> = s.entries().filter(|e| e.granted).collect();
            for (k, a) in e.iter().enumerate() {
                for b in &e[k + 1..] {
                    if a.agent != b.agent && a.path.related(&b.path) && !a.mode.compatible(b.mode) {
                        return Err(format!("S{i} grants A{} and A{}", a.agent.0, b.agent.0));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether no action is enabled (what [`Model::actions`] would list, without listing
    /// it: this is checked in every state).
    fn terminal(&self, st: &AState) -> bool {
        if self.halted(st) {
            return true;
        }
        // Every channel in `net` holds a message (an emptied one is removed), and its
        // first can be delivered under either delivery.
        if st.net.values().any(|ch| !ch.is_empty()) {
            return false;
        }
        self.may_crash(st).is_none() && !(0..st.agents.len()).any(|a| self.may_finish(st, a))
    }

    /// Whether no step is taken from `st` at all: a kernel error, or the version bound
    /// passed.
    fn halted(&self, st: &AState) -> bool {
        st.error.is_some() || Self::max_version(st) > self.max_version
    }

    /// The server that may crash in `st` (the configured one, while it is up).
    fn may_crash(&self, st: &AState) -> Option<u16> {
        self.crash.filter(|s| st.down & (1 << s) == 0)
    }

    /// Whether agent `a`'s client may end its transaction: it holds all it asked for, and
    /// asked for every lock of its script.
    fn may_finish(&self, st: &AState, a: usize) -> bool {
        match st.agents[a].status() {
            Status::HaveAll => st.asked[a] as usize == self.scripts[a].steps.len(),
            // Gives up while it waits for a lock it asked for; one client per run, so
            // that the others must get their locks (a release the give-up failed to send
            // leaves them waiting: "no deadlock remains" fails).
            Status::Running => {
                self.give_up
                    && st.asked[a] > 0
                    && !st
                        .agents
                        .iter()
                        .any(|x| x.status() == Status::Aborted(AbortReason::Client))
            }
            _ => false,
        }
    }

    fn all_ended(st: &AState) -> bool {
        st.agents.iter().all(|a| a.status().ended())
    }

    /// The transactions of `st` that have not ended, with where each stands, for a
    /// verdict.
    fn unended(st: &AState) -> String {
        st.agents
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.status().ended())
            .map(|(k, a)| format!("A{k} ({:?})", a.status()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn max_version(st: &AState) -> u32 {
        st.servers
            .iter()
            .flat_map(|s| s.records().map(|(_, v)| v))
            .max()
            .unwrap_or(0)
    }

    /// Runs the exhaustive check (BFS).
    pub fn check(&self) -> AgentsReport {
        self.run(HasDiscoveries::All)
    }

    /// Runs the check (BFS) until the first violated property: for the refuted variants,
    /// whose full state space can be large (a livelock of surrenders runs up to the version
    /// bound). The state count then depends on the search order and is not pinned.
    pub fn refute(&self) -> AgentsReport {
        self.run(HasDiscoveries::AnyFailures)
    }

    /// Runs the exhaustive check depth-first: the same reachable states as [`Self::check`]
    /// with far less memory (no breadth-first frontier), for the larger configurations.
    pub fn check_dfs(&self) -> AgentsReport {
        self.run_with(HasDiscoveries::All, true)
    }

    /// [`Self::check_dfs`] on `threads` threads (the same states, in another order), with
    /// a line on standard error every `progress` (states so far, their rate, the deepest
    /// path) while it runs.
    pub fn check_dfs_with(&self, threads: usize, progress: Option<Duration>) -> AgentsReport {
        let t = Instant::now();
        let mut checker = self
            .clone()
            .checker()
            .finish_when(HasDiscoveries::All)
            .threads(threads)
            .spawn_dfs();
        let handles = checker.handles();
        if let Some(every) = progress {
            let mut next = every;
            while !handles.iter().all(|h| h.is_finished()) {
                std::thread::sleep(Duration::from_millis(50));
                if t.elapsed() >= next {
                    let n = checker.unique_state_count();
                    eprintln!(
                        "{}: {n} unique states after {:.0} s ({:.0}/s), depth {}",
                        self.name,
                        t.elapsed().as_secs_f64(),
                        n as f64 / t.elapsed().as_secs_f64(),
                        checker.max_depth()
                    );
                    next += every;
                }
            }
        }
        for h in handles {
            h.join().expect("a checker thread panicked");
        }
        self.report(&checker, t, Counterexample::Cut)
    }

    fn run(&self, finish: HasDiscoveries) -> AgentsReport {
        self.run_with(finish, false)
    }

    /// [`Self::check`] with each `always` counterexample a shortest run (`hilock check`).
    pub fn check_shortest(&self) -> AgentsReport {
        let t = Instant::now();
        let checker = self
            .clone()
            .checker()
            .finish_when(HasDiscoveries::All)
            .spawn_bfs()
            .join();
        self.report(&checker, t, Counterexample::Shortest)
    }

    fn run_with(&self, finish: HasDiscoveries, dfs: bool) -> AgentsReport {
        let t = Instant::now();
        let builder = self.clone().checker().finish_when(finish);
        if dfs {
            self.report(&builder.spawn_dfs().join(), t, Counterexample::Cut)
        } else {
            self.report(&builder.spawn_bfs().join(), t, Counterexample::Cut)
        }
    }

    fn report(
        &self,
        checker: &impl Checker<Self>,
        t: Instant,
        which: Counterexample,
    ) -> AgentsReport {
        let properties = crate::check::property_reports(
            self,
            checker,
            &SAFETY,
            &[ENDS],
            &REACHED,
            which,
            |p, path| self.trace(p, path),
        );
        AgentsReport {
            config: self.name.clone(),
            states: checker.state_count(),
            unique_states: checker.unique_state_count(),
            max_depth: checker.max_depth(),
            // The whole check: the search and the counterexamples' traces.
            elapsed: t.elapsed(),
            properties,
        }
    }

    /// Whether `a` in `before` is the recorded step `step` of a `hilock-agents-trace/1`
    /// trace: the same action text, and the same servers and agents afterwards.
    pub fn fits_step(&self, before: &AState, a: &AgentAction, step: &serde_json::Value) -> bool {
        let Some((st, log)) = self.apply(before, *a) else {
            return false;
        };
        if step["action"].as_str() != Some(log.action.as_str()) {
            return false;
        }
        let servers: BTreeMap<String, String> = st
            .servers
            .iter()
            .enumerate()
            .map(|(k, s)| (format!("S{k}"), queue_str(&s.entries().collect::<Vec<_>>())))
            .collect();
        let agents: BTreeMap<String, String> = st
            .agents
            .iter()
            .enumerate()
            .map(|(k, a)| (format!("A{k}"), agent_str(a)))
            .collect();
        serde_json::to_value(servers).ok().as_ref() == step.get("servers")
            && serde_json::to_value(agents).ok().as_ref() == step.get("agents")
    }

    /// A counterexample path as a readable trace.
    pub fn trace(&self, property: &str, path: &Path<AState, AgentAction>) -> AgentsTrace {
        let states = path.clone().into_states();
        let actions = path.clone().into_actions();
        let mut steps = Vec::new();
        for (i, a) in actions.iter().enumerate() {
            let Some((st, log)) = self.apply(&states[i], *a) else {
                break;
            };
            steps.push(AgentsTraceStep {
                index: i,
                action: log.action,
                rules: log.rules,
                outputs: log.outputs,
                servers: st
                    .servers
                    .iter()
                    .enumerate()
                    .map(|(k, s)| (format!("S{k}"), queue_str(&s.entries().collect::<Vec<_>>())))
                    .collect(),
                agents: st
                    .agents
                    .iter()
                    .enumerate()
                    .map(|(k, a)| (format!("A{k}"), agent_str(a)))
                    .collect(),
            });
        }
        let last = states.last().cloned();
        let violation = match (property, last) {
            (EXCLUSION, Some(st)) => self.exclusion(&st).err().unwrap_or_default(),
            (NO_ERROR, Some(st)) => st.error.unwrap_or_default(),
            (NO_DEADLOCK, Some(st)) => format!(
                "no action is enabled and these transactions have not ended: {}",
                Self::unended(&st)
            ),
            (NO_PHANTOM, Some(st)) => format!(
                "A{} surrendered (or aborted on deadlock) with no entry it gives up on a cycle \
                 of the servers' queues at that moment",
                st.phantom.unwrap_or(0)
            ),
            (OUTCOME, Some(st)) => format!(
                "no action is enabled and a transaction ended otherwise than expected: {}",
                st.agents
                    .iter()
                    .enumerate()
                    .map(|(k, a)| format!("A{k} ({:?})", a.status()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (BOUNDED, Some(st)) => format!(
                "a server's version counter reached {}",
                Self::max_version(&st)
            ),
            (ONE_SURRENDER, Some(st)) => format!(
                "A{} surrendered on a deadlock a surrender had already been made for (a second \
                 surrender for one deadlock)",
                st.extra_surrender.unwrap_or(0)
            ),
            (ENDS, Some(st)) if Self::max_version(&st) > self.max_version => format!(
                "the search stops here, a server's version counter past the bound ({} > {}), \
                 with these transactions not ended: {}",
                Self::max_version(&st),
                self.max_version,
                Self::unended(&st)
            ),
            (ENDS, Some(st)) => format!(
                "no action is enabled and these transactions never end: {}",
                Self::unended(&st)
            ),
            _ => String::new(),
        };
        AgentsTrace {
            format: "hilock-agents-trace/1".into(),
            model: self.name.clone(),
            agent_variant: format!("{:?}", self.agent_variant),
            server_variant: format!("{:?}", self.server_variant),
            delivery: self.delivery,
            property: property.to_string(),
            violation,
            note: String::new(),
            steps,
        }
    }
}

/// An agent in words: status, the locks asked (`*`: held; `!`: reported) and the queues it
/// knows (`?`: awaiting a surrender's acknowledgement).
pub fn agent_str(a: &MAgent) -> String {
    let reqs: Vec<String> = a
        .requests()
        .map(|(p, m, held, rep)| {
            format!(
                "{}{m}{}{}",
                path_str(&p),
                if held { "*" } else { "" },
                rep.map(|m| format!(" told {m}")).unwrap_or_default()
            )
        })
        .collect();
    let views: Vec<String> = a
        .views()
        .map(|(i, ack)| format!("{}{}", info_str(i), if ack { " ?" } else { "" }))
        .collect();
    format!(
        "{:?}; locks: {}; knows: {}",
        a.status(),
        reqs.join(", "),
        views.join(" | ")
    )
}

impl Model for AgentsModel {
    type State = AState;
    type Action = AgentAction;

    fn init_states(&self) -> Vec<AState> {
        let n = self.scripts.len();
        let mut st = AState {
            servers: (0..self.servers)
                .map(|s| Part::new(MServer::new(ServerId(s)).with_variant(self.server_variant)))
                .collect(),
            agents: (0..n)
                .map(|a| {
                    Part::new(
                        MAgent::new(
                            hilock_kernel::agents::AgentId(a as u16),
                            self.scripts[a].abort_on_deadlock,
                        )
                        .with_variant(self.agent_variant),
                    )
                })
                .collect(),
            asked: vec![0; n],
            net: BTreeMap::new(),
            phantom: None,
            error: None,
            surrenders: 0,
            forwarded: false,
            targeted: Vec::new(),
            extra_surrender: None,
            down: 0,
        };
        let mut log = StepLog::quiet();
        for a in 0..n {
            // Every client asks its first lock: as if the agent held all of nothing.
            if let Some(s) = self.scripts[a].steps.first().copied() {
                st.asked[a] = 1;
                let mut out = VecSink::default();
                if let Err(e) = st.agents[a].update(|ag| ag.step(s.input(), &mut out)) {
                    st.error = Some(format!("A{a}: {e}"));
                }
                self.route(&mut st, a, out.0, &mut log);
            }
        }
        vec![st]
    }

    fn actions(&self, st: &AState, actions: &mut Vec<AgentAction>) {
        if self.halted(st) {
            return;
        }
        for (&(from, to), ch) in &st.net {
            let n = match self.delivery {
                Delivery::FifoPerPair => ch.len().min(1),
                Delivery::Unordered => ch.len(),
            };
            for (i, m) in ch.iter().take(n).enumerate() {
                actions.push(AgentAction::Deliver {
                    from,
                    to,
                    index: i as u8,
                    what: Carried::of(m),
                })
            }
        }
        if let Some(server) = self.may_crash(st) {
            actions.push(AgentAction::Crash { server });
        }
        for a in 0..st.agents.len() {
            if self.may_finish(st, a) {
                actions.push(AgentAction::Finish { agent: a as u16 });
            }
        }
    }

    fn next_state(&self, last: &AState, action: AgentAction) -> Option<AState> {
        self.apply_logged(last, action, StepLog::quiet())
            .map(|(st, _)| st)
    }

    fn format_action(&self, a: &AgentAction) -> String {
        match *a {
            AgentAction::Deliver { from, to, what, .. } => format!("{from} → {to}: {what}"),
            AgentAction::Finish { agent } => format!("A{agent}: the client ends the transaction"),
            AgentAction::Crash { server } => format!("S{server} crashes"),
        }
    }

    fn format_step(&self, last: &AState, a: AgentAction) -> Option<String> {
        let (st, log) = self.apply(last, a)?;
        let mut s = log.action;
        if !log.rules.is_empty() {
            s.push_str(&format!("\n  rules: {}", log.rules));
        }
        for o in &log.outputs {
            s.push_str(&format!("\n  {o}"));
        }
        s.push_str(&crate::check::violations_line(self, &st));
        s.push('\n');
        for (k, srv) in st.servers.iter().enumerate() {
            s.push_str(&format!(
                "\nS{k}: {}",
                queue_str(&srv.entries().collect::<Vec<_>>())
            ));
        }
        for (k, ag) in st.agents.iter().enumerate() {
            s.push_str(&format!("\nA{k}: {}", agent_str(ag)));
        }
        for ((from, to), ch) in &st.net {
            for m in ch.iter() {
                s.push_str(&format!("\nin flight {from} → {to}: {}", msg_str(m)));
            }
        }
        if let Some(e) = &st.error {
            s.push_str(&format!("\nkernel error: {e}"));
        }
        Some(s)
    }

    fn as_svg(&self, path: Path<AState, AgentAction>) -> Option<String> {
        let agents = self.scripts.len();
        let lane = |p: Proc| match p {
            Proc::Agent(i) => i as usize,
            Proc::Server(i) => agents + i as usize,
        };
        let mut lanes: Vec<String> = (0..agents).map(|i| format!("A{i}")).collect();
        lanes.extend((0..self.servers).map(|i| format!("S{i}")));
        let mut d = crate::seq::Diagram::new(lanes);
        // Each message from the step that put it on the network to the one that took it
        // off; the ones still there after the last step in flight.
        let wires = |st: &AState| -> Vec<crate::seq::Wire> {
            st.net
                .iter()
                .flat_map(|((from, to), ch)| {
                    ch.iter().map(move |m| crate::seq::Wire {
                        from: lane(*from),
                        to: lane(*to),
                        key: format!("{:?}", Carried::of(m)),
                        label: msg_str(m),
                    })
                })
                .collect()
        };
        d.draw_path(&path.into_vec(), wires, |d, a| match *a {
            AgentAction::Deliver { from, to, what, .. } => {
                let key = format!("{what:?}");
                d.deliver(lane(from), lane(to), &key, what.to_string());
                Some((lane(from), lane(to), key))
            }
            AgentAction::Finish { agent } => {
                d.local(agent.into(), "ends the transaction");
                None
            }
            AgentAction::Crash { server } => {
                d.local(lane(Proc::Server(server)), "crashes");
                None
            }
        });
        Some(d.svg())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |m: &Self, st: &AState| m.exclusion(st).is_ok()),
            Property::always(NO_ERROR, |_, st: &AState| st.error.is_none()),
            // A state past the version bound is a cut of the search (`BOUNDED` reports
            // it), not a deadlock: its actions are not listed, not absent.
            Property::always(NO_DEADLOCK, |m: &Self, st: &AState| {
                st.error.is_some()
                    || Self::all_ended(st)
                    || Self::max_version(st) > m.max_version
                    || !m.terminal(st)
            }),
            Property::always(NO_PHANTOM, |_, st: &AState| st.phantom.is_none()),
            Property::always(ONE_SURRENDER, |_, st: &AState| st.extra_surrender.is_none()),
            Property::always(OUTCOME, |m: &Self, st: &AState| {
                m.outcomes.is_empty()
                    || st.error.is_some()
                    || Self::max_version(st) > m.max_version
                    || !m.terminal(st)
                    || m.outcomes_fit(st)
            }),
            Property::eventually(ENDS, |_, st: &AState| Self::all_ended(st)),
            Property::always(BOUNDED, |m: &Self, st: &AState| {
                Self::max_version(st) <= m.max_version
            }),
            Property::sometimes("a surrender", |_, st: &AState| st.surrenders > 0),
            Property::sometimes("a forward", |_, st: &AState| st.forwarded),
            Property::sometimes("every transaction commits", |_, st: &AState| {
                st.agents.iter().all(|a| a.status() == Status::Committed)
            }),
            Property::sometimes("an abort", |_, st: &AState| {
                st.agents
                    .iter()
                    .any(|a| matches!(a.status(), Status::Aborted(_)))
            }),
        ]
    }
}

/// One property's result, with a `hilock-agents-trace/1` counterexample.
pub type AgentsPropertyReport = crate::check::PropertyReport<AgentsTrace>;

/// The result of [`AgentsModel::check`].
pub type AgentsReport = crate::check::ModelReport<AgentsTrace>;

/// A counterexample (`hilock-agents-trace/1`): per step the action, the rules that fired,
/// the outputs, every server's entries and every agent's state afterwards.
#[derive(Clone, Debug, Serialize)]
pub struct AgentsTrace {
    /// `hilock-agents-trace/1`.
    pub format: String,
    /// Configuration.
    pub model: String,
    /// Agent variant.
    pub agent_variant: String,
    /// Server variant.
    pub server_variant: String,
    /// Delivery.
    pub delivery: Delivery,
    /// The property violated.
    pub property: String,
    /// What is wrong in the last state.
    pub violation: String,
    /// What the trace shows (filled in by whoever saves it).
    pub note: String,
    /// The steps.
    pub steps: Vec<AgentsTraceStep>,
}

/// One step of an [`AgentsTrace`].
#[derive(Clone, Debug, Serialize)]
pub struct AgentsTraceStep {
    /// Index.
    pub index: usize,
    /// The action.
    pub action: String,
    /// Rules that fired.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub rules: String,
    /// Outputs.
    pub outputs: Vec<String>,
    /// Every server's entries afterwards (`*`: holds).
    pub servers: BTreeMap<String, String>,
    /// Every agent afterwards.
    pub agents: BTreeMap<String, String>,
}
