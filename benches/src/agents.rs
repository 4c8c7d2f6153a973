//! Multi-lock transactions on both engines (`docs/benchmarks.md`, "Ordered acquisition
//! against detection, in the simulator"): the token engine (hilock's sites,
//! [`hilock_kernel::Site`]) taking a transaction's locks one by one in one global order
//! (deadlock *prevention*), against Wiger's agents (Wiger's locks, [`hilock_kernel::agents`])
//! taking them one by one in the transaction's own order and resolving the deadlocks that
//! follow by a surrender (*detection*). The same workload, the same network model, one
//! deterministic discrete-event loop.
//!
//! - **Workload**: `nodes` nodes, one client on each. A client runs `txns_per_node`
//!   transactions one after the other: think for `think` message delays, then lock
//!   `per_txn` distinct locks drawn uniformly out of `locks` (write, or read with
//!   probability `read_percent`), in random order — sorted by lock id for the token engine
//!   and for [`Engine::AgentsOrdered`] — each asked when all before it are held; hold them
//!   for `hold` message delays; release everything. Lock `l` lives on node `l mod nodes`
//!   (the token starts there; the agents' lock server of `l` is there). With `children > 0`
//!   (agents only) lock `l < children` also has a child path `[l, 1]` in the universe, which
//!   the lock `[l]` covers.
//! - **Network**: reliable, FIFO per ordered pair of processes (a node's site for the
//!   token engine; each agent and each lock server for the agents engine); a message
//!   between two nodes takes one *message delay* (mean 1,000 µs, uniform within
//!   ±`jitter`), a message between two processes of one node takes none (it still keeps
//!   its channel's order) and is counted apart as local.
//! - **Routing only**: the token engine's sites are driven through the harness
//!   ([`hilock_harness::Cluster`]: channels, delivery, mutual-exclusion check); the agents
//!   engine's servers and agents through their `step` functions, whose outputs are put on
//!   the channels they name (the routing of `models/src/agents.rs` and
//!   `runtime/src/agents/engine.rs`, with times). No rule is decided here.
//! - **Oracle**: when a client enters its critical section, no other client in its
//!   critical section holds a related lock in a conflicting mode; for the agents engine,
//!   the lock servers' own queues grant every lock the agent believes it holds; for the
//!   token engine, the harness's mutual-exclusion check after every step. A violation, a
//!   kernel error, or a transaction that waits for more than `stall_after` message delays
//!   ends the run with an error that describes the state.
//! - **Metrics**: committed and aborted transactions, surrenders, messages (total,
//!   between nodes, by kind) per committed transaction, throughput (committed transactions
//!   per 1,000 message delays) and latency (first request to holding every lock, in
//!   message delays, mean and maximum).

use hilock_harness::Cluster;
use hilock_harness::VecSink;
use hilock_kernel::agents::{
    Agent, AgentError, AgentId, AgentInput, AgentOutput, Announce, LockInfo, LockMode, LockPath,
    LockServer, QEntry, Req, Rule, ServerId, ServerMsg, Servers, Status,
};
use hilock_kernel::{Input, LockId, Mode, NodeId, Output, Protocol, Site};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

/// Most nodes a run may have.
pub const MAX_NODES: usize = 16;
/// Most locks a run may have.
pub const MAX_LOCKS: usize = 32;
/// One message delay in µs.
pub const DELAY_US: u64 = 1000;

const PD: usize = 2;
const PQ: usize = 128;
const PR: usize = 64;
const PK: usize = 32;
type TSite = Site<MAX_NODES, MAX_LOCKS, MAX_NODES>;
type AAgent = Agent<PD, PQ, PK>;
type AServer = LockServer<PD, PQ, PR>;
type AInfo = LockInfo<PD, PQ>;

/// Which engine and acquisition order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// The token engine, every transaction taking its locks in increasing lock id.
    TokenOrdered,
    /// The agents engine, locks taken in the transaction's own (random) order.
    AgentsRandom,
    /// The agents engine, locks taken in increasing lock id (no deadlock can form).
    AgentsOrdered,
}

impl Engine {
    /// Short name for tables and plots.
    pub fn name(self) -> &'static str {
        match self {
            Engine::TokenOrdered => "token, ordered",
            Engine::AgentsRandom => "agents, any order",
            Engine::AgentsOrdered => "agents, ordered",
        }
    }
}

/// One run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TxnConfig {
    /// Engine.
    pub engine: Engine,
    /// Nodes (2..=16), one client each.
    pub nodes: usize,
    /// Top-level locks (1..=32).
    pub locks: usize,
    /// Locks per transaction (1..=locks).
    pub per_txn: usize,
    /// Mean hold time, in message delays.
    pub hold: f64,
    /// Mean think time between a client's transactions, in message delays.
    pub think: f64,
    /// Relative half-width of the uniform jitter of delays, hold and think times.
    pub jitter: f64,
    /// Percentage of read locks.
    pub read_percent: u32,
    /// Locks `0..children` also have the child path `[l, 1]` (agents only).
    pub children: usize,
    /// Agents only: `abort_on_deadlock` for every transaction.
    pub abort_on_deadlock: bool,
    /// Transactions each client runs.
    pub txns_per_node: usize,
    /// Nodes with a client: the last `clients` nodes (default: every node).
    pub clients: usize,
    /// A transaction waiting longer than this many message delays is a stall (error).
    pub stall_after: f64,
    /// Seed of every random stream.
    pub seed: u64,
}

impl TxnConfig {
    /// Defaults: 8 nodes with a client each, 16 locks, 3 per transaction, hold 1, think 1,
    /// jitter 1/3, all writes, 200 transactions per client.
    pub fn new(engine: Engine) -> TxnConfig {
        TxnConfig {
            engine,
            nodes: 8,
            locks: 16,
            per_txn: 3,
            hold: 1.0,
            think: 1.0,
            jitter: 1.0 / 3.0,
            read_percent: 0,
            children: 0,
            abort_on_deadlock: false,
            txns_per_node: 200,
            clients: 8,
            stall_after: 10_000.0,
            seed: 1,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TxnStats {
    /// Transactions that committed.
    pub committed: u64,
    /// Transactions aborted (agents with `abort_on_deadlock`).
    pub aborted: u64,
    /// Surrenders the agents sent (rule A5).
    pub surrenders: u64,
    /// Surrenders a server refused: the agent held nothing in that queue any more.
    pub surrenders_refused: u64,
    /// All messages.
    pub messages: u64,
    /// Messages between two nodes.
    pub remote: u64,
    /// Messages by kind: token engine request, grant, token, release, freeze; agents
    /// request, surrender, release, announcement, forward (index order of
    /// [`TxnStats::kind_names`]).
    pub kinds: [u64; 5],
    /// Sum of the latencies (first request to holding every lock) in µs.
    pub latency_sum_us: u64,
    /// Largest latency in µs.
    pub latency_max_us: u64,
    /// Simulated time in µs.
    pub time_us: u64,
    /// Critical sections checked by the oracle.
    pub checked: u64,
}

impl TxnStats {
    /// Names of [`TxnStats::kinds`] for `engine`.
    pub fn kind_names(engine: Engine) -> [&'static str; 5] {
        match engine {
            Engine::TokenOrdered => ["request", "grant", "token", "release", "freeze"],
            _ => ["request", "surrender", "release", "announce", "forward"],
        }
    }
    /// Transactions that ended.
    pub fn ended(&self) -> u64 {
        self.committed + self.aborted
    }
    /// Messages per committed transaction.
    pub fn per_txn(&self) -> f64 {
        self.messages as f64 / self.committed.max(1) as f64
    }
    /// Messages between nodes per committed transaction.
    pub fn remote_per_txn(&self) -> f64 {
        self.remote as f64 / self.committed.max(1) as f64
    }
    /// Surrenders per committed transaction.
    pub fn surrenders_per_txn(&self) -> f64 {
        self.surrenders as f64 / self.committed.max(1) as f64
    }
    /// Committed transactions per 1,000 message delays.
    pub fn throughput(&self) -> f64 {
        self.committed as f64 * 1000.0 * DELAY_US as f64 / self.time_us.max(1) as f64
    }
    /// Mean latency in message delays.
    pub fn mean_latency(&self) -> f64 {
        self.latency_sum_us as f64 / self.ended().max(1) as f64 / DELAY_US as f64
    }
    /// Largest latency in message delays.
    pub fn max_latency(&self) -> f64 {
        self.latency_max_us as f64 / DELAY_US as f64
    }
}

fn jittered(rng: &mut ChaCha8Rng, mean: f64, jitter: f64) -> u64 {
    let u: f64 = if jitter > 0.0 {
        rng.random_range(-1.0..1.0)
    } else {
        0.0
    };
    (mean * DELAY_US as f64 * (1.0 + jitter * u))
        .max(0.0)
        .round() as u64
}

/// A lock of the universe: top-level `l`, or its child `[l, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Lk {
    top: u16,
    child: bool,
}

impl Lk {
    fn keys(self) -> LockPath<PD> {
        let r = if self.child {
            LockPath::new(&[self.top, 1])
        } else {
            LockPath::new(&[self.top])
        };
        r.expect("paths of depth 1 or 2")
    }
    fn related(self, o: Lk) -> bool {
        self.top == o.top && (!self.child || !o.child || self == o)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Think,
    Acquiring,
    Cs,
    Done,
}

#[derive(Clone, Debug)]
struct Client {
    rng: ChaCha8Rng,
    phase: Phase,
    locks: Vec<(Lk, bool)>,
    asked: usize,
    started: u64,
    left: usize,
    agent: Option<AgentId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Proc {
    Agent(u16),
    Server(u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Timer(u16),
    Token(u16, u16),
    Agents(Proc, Proc),
}

enum AMsg {
    ToServer(ServerMsg<PD>),
    Info(Box<AInfo>),
}

/// The event loop and the clients, shared by both engines.
struct Clock {
    cfg: TxnConfig,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    net: ChaCha8Rng,
    clients: Vec<Client>,
    stats: TxnStats,
    in_cs: Vec<(usize, Vec<(Lk, bool)>)>,
    last_arrival: HashMap<(Proc, Proc), u64>,
}

impl Clock {
    fn new(cfg: TxnConfig) -> Clock {
        let clients = (0..cfg.nodes)
            .map(|i| Client {
                rng: ChaCha8Rng::seed_from_u64(
                    cfg.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ),
                phase: Phase::Think,
                locks: Vec::new(),
                asked: 0,
                started: 0,
                left: if i + cfg.clients >= cfg.nodes {
                    cfg.txns_per_node
                } else {
                    0
                },
                agent: None,
            })
            .collect();
        Clock {
            cfg,
            events: BinaryHeap::new(),
            seq: 0,
            now: 0,
            net: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xD1B5_4A32_D192_ED03),
            clients,
            stats: TxnStats::default(),
            in_cs: Vec::new(),
            last_arrival: HashMap::new(),
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    /// The arrival time of a message on channel `ch` (FIFO), one delay if `remote`.
    fn arrival(&mut self, ch: (Proc, Proc), remote: bool) -> u64 {
        let lat = if remote {
            jittered(&mut self.net, 1.0, self.cfg.jitter)
        } else {
            0
        };
        let last = self.last_arrival.entry(ch).or_insert(0);
        let at = (self.now + lat).max(*last);
        *last = at;
        at
    }

    fn think(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if c.left == 0 {
            c.phase = Phase::Done;
            return;
        }
        c.phase = Phase::Think;
        let t = jittered(&mut c.rng, self.cfg.think, self.cfg.jitter);
        let at = self.now + t;
        self.schedule(at, Ev::Timer(i as u16));
    }

    /// Draws the next transaction's locks (in the order they are asked).
    fn draw(&mut self, i: usize) {
        let cfg = self.cfg;
        let c = &mut self.clients[i];
        let mut universe: Vec<Lk> = (0..cfg.locks as u16)
            .map(|top| Lk { top, child: false })
            .collect();
        universe.extend((0..cfg.children as u16).map(|top| Lk { top, child: true }));
        universe.shuffle(&mut c.rng);
        let mut locks: Vec<(Lk, bool)> = universe
            .into_iter()
            .take(cfg.per_txn)
            .map(|l| (l, c.rng.random_range(0..100) < cfg.read_percent))
            .collect();
        if cfg.engine != Engine::AgentsRandom {
            locks.sort();
        }
        c.locks = locks;
        c.asked = 0;
        c.phase = Phase::Acquiring;
        c.started = self.now;
        c.left -= 1;
    }

    /// The client enters its critical section: the oracle, then the hold timer.
    fn enter_cs(&mut self, i: usize) -> Result<(), String> {
        let mine = self.clients[i].locks.clone();
        for (j, theirs) in &self.in_cs {
            for (a, ra) in &mine {
                for (b, rb) in theirs {
                    if a.related(*b) && !(*ra && *rb) {
                        return Err(format!(
                            "exclusion violated at {} µs: client {i} and client {j} hold {a:?} / {b:?}",
                            self.now
                        ));
                    }
                }
            }
        }
        self.stats.checked += 1;
        self.in_cs.push((i, mine));
        let c = &mut self.clients[i];
        c.phase = Phase::Cs;
        let lat = self.now - c.started;
        self.stats.latency_sum_us += lat;
        self.stats.latency_max_us = self.stats.latency_max_us.max(lat);
        let h = jittered(&mut c.rng, self.cfg.hold, self.cfg.jitter);
        let at = self.now + h;
        self.schedule(at, Ev::Timer(i as u16));
        Ok(())
    }

    fn leave_cs(&mut self, i: usize) {
        self.in_cs.retain(|(j, _)| *j != i);
        self.stats.committed += 1;
    }

    fn stalled(&self) -> Option<usize> {
        let limit = (self.cfg.stall_after * DELAY_US as f64) as u64;
        self.clients
            .iter()
            .position(|c| c.phase == Phase::Acquiring && self.now - c.started > limit)
    }

    fn all_done(&self) -> bool {
        self.clients.iter().all(|c| c.phase == Phase::Done)
    }
}

/// Runs one configuration.
pub fn run(cfg: &TxnConfig) -> Result<TxnStats, String> {
    if !(2..=MAX_NODES).contains(&cfg.nodes) {
        return Err(format!("nodes must be 2..={MAX_NODES}"));
    }
    if !(1..=MAX_LOCKS).contains(&cfg.locks) || cfg.children > cfg.locks {
        return Err(format!(
            "locks must be 1..={MAX_LOCKS}, children at most locks"
        ));
    }
    if cfg.per_txn == 0 || cfg.per_txn > cfg.locks + cfg.children {
        return Err("per_txn must be 1..=locks + children".into());
    }
    if cfg.clients == 0 || cfg.clients > cfg.nodes {
        return Err("clients must be 1..=nodes".into());
    }
    if cfg.nodes * cfg.txns_per_node >= u16::MAX as usize - 1 {
        return Err("too many transactions for 16-bit agent references".into());
    }
    match cfg.engine {
        Engine::TokenOrdered => {
            if cfg.children > 0 || cfg.abort_on_deadlock {
                return Err("children and abort_on_deadlock are for the agents engine".into());
            }
            drive(TokenSim::new(*cfg)?)
        }
        Engine::AgentsRandom | Engine::AgentsOrdered => drive(AgentsSim::new(*cfg)),
    }
}

fn home(l: Lk, nodes: usize) -> u16 {
    (l.top as usize % nodes) as u16
}

/// One engine of the comparison, driven by [`drive`]'s event loop.
trait EngineSim {
    /// The engine's name in error messages.
    const NAME: &'static str;
    fn clock(&mut self) -> &mut Clock;
    fn timer(&mut self, i: usize) -> Result<(), String>;
    /// A message event of this engine (the other engine's events are an error).
    fn event(&mut self, ev: Ev) -> Result<(), String>;
    /// What an error message shows of the engine's state (empty: nothing).
    fn state(&self) -> String {
        String::new()
    }
}

/// Runs `e` until no event is left: every client thinks first; a stalled client, or a
/// transaction pending when nothing is left to happen, is an error.
fn drive<E: EngineSim>(mut e: E) -> Result<TxnStats, String> {
    for i in 0..e.clock().cfg.nodes {
        e.clock().think(i);
    }
    while let Some(Reverse((t, _, ev))) = e.clock().events.pop() {
        e.clock().now = t;
        match ev {
            Ev::Timer(i) => e.timer(i as usize)?,
            ev => e.event(ev)?,
        }
        if let Some(i) = e.clock().stalled() {
            return Err(format!(
                "client {i} waits too long ({}){}",
                E::NAME,
                e.state()
            ));
        }
    }
    if !e.clock().all_done() {
        return Err(format!(
            "no event left but transactions pending ({}){}",
            E::NAME,
            e.state()
        ));
    }
    let c = e.clock();
    c.stats.time_us = c.now;
    Ok(std::mem::take(&mut c.stats))
}

impl EngineSim for TokenSim {
    const NAME: &'static str = "token engine";
    fn clock(&mut self) -> &mut Clock {
        &mut self.clock
    }
    fn timer(&mut self, i: usize) -> Result<(), String> {
        TokenSim::timer(self, i)
    }
    fn event(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Token(from, to) => self.step(to as usize, Some(from)),
            _ => Err("agents event in a token run".into()),
        }
    }
}

impl EngineSim for AgentsSim {
    const NAME: &'static str = "agents engine";
    fn clock(&mut self) -> &mut Clock {
        &mut self.clock
    }
    fn timer(&mut self, i: usize) -> Result<(), String> {
        AgentsSim::timer(self, i)
    }
    fn event(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Agents(from, to) => self.deliver(from, to),
            _ => Err("token event in an agents run".into()),
        }
    }
    fn state(&self) -> String {
        format!("\n{}", self.dump())
    }
}

struct TokenSim {
    clock: Clock,
    cluster: Cluster<TSite>,
}

impl TokenSim {
    fn new(cfg: TxnConfig) -> Result<TokenSim, String> {
        let n = cfg.nodes;
        let mut sites = Vec::new();
        for i in 0..n {
            let me = NodeId(i as u16);
            sites.push(
                TSite::with_parents(me, |l| {
                    let h = NodeId((l.0 as usize % n) as u16);
                    (h != me).then_some(h)
                })
                .map_err(|e| e.to_string())?,
            );
        }
        Ok(TokenSim {
            clock: Clock::new(cfg),
            cluster: Cluster::new(sites),
        })
    }

    fn timer(&mut self, i: usize) -> Result<(), String> {
        match self.clock.clients[i].phase {
            Phase::Think => {
                self.clock.draw(i);
                self.ask_next(i)
            }
            Phase::Cs => {
                let locks = self.clock.clients[i].locks.clone();
                for (l, _) in locks.iter().rev() {
                    self.input(
                        i,
                        Input::Release {
                            lock: LockId(l.top),
                        },
                    )?;
                }
                self.clock.leave_cs(i);
                self.clock.think(i);
                Ok(())
            }
            p => Err(format!("timer of client {i} in {p:?}")),
        }
    }

    fn ask_next(&mut self, i: usize) -> Result<(), String> {
        let c = &self.clock.clients[i];
        let (l, read) = c.locks[c.asked];
        let mode = if read { Mode::R } else { Mode::W };
        self.input(
            i,
            Input::Acquire {
                lock: LockId(l.top),
                mode,
            },
        )
    }

    fn input(
        &mut self,
        i: usize,
        input: Input<'_, <TSite as Protocol>::Msg>,
    ) -> Result<(), String> {
        self.step_with(i, Some(input), None)
    }

    fn step(&mut self, i: usize, from: Option<u16>) -> Result<(), String> {
        self.step_with(i, None, from)
    }

    /// One harness step at node `i` (an input, or the delivery of the head of channel
    /// `from → i`), with the timing of its messages.
    fn step_with(
        &mut self,
        i: usize,
        input: Option<Input<'_, <TSite as Protocol>::Msg>>,
        from: Option<u16>,
    ) -> Result<(), String> {
        let node = NodeId(i as u16);
        let mut granted = false;
        let mut sent = Vec::new();
        let mut see = |o: &Output<<TSite as Protocol>::Msg>| match o {
            Output::Send { to, msg } => {
                sent.push((to.0, crate::token::kind_index(TSite::kind(msg))))
            }
            Output::Granted { .. } => granted = true,
            // The simulator issues no try-lock.
            Output::Upgraded { .. }
            | Output::WouldBlock { .. }
            | Output::Cancelled { .. }
            | Output::Downgraded { .. }
            | Output::Converted { .. }
            | Output::ConvertBusy { .. }
            | Output::Blocking { .. } => {}
        };
        match (input, from) {
            (Some(input), _) => {
                self.cluster
                    .input_with(node, input, &mut see)
                    .map_err(|e| format!("node {i}: {e}"))?;
            }
            (None, Some(f)) => match self.cluster.deliver_with(NodeId(f), node, &mut see) {
                Some(Ok(_)) => {}
                Some(Err((e, m))) => return Err(format!("node {i} rejected {m:?}: {e}")),
                None => return Err(format!("no message on {f} -> {i}")),
            },
            (None, None) => return Ok(()),
        }
        for (to, kind) in sent {
            let st = &mut self.clock.stats;
            st.messages += 1;
            st.remote += 1;
            st.kinds[kind] += 1;
            let ch = (Proc::Server(i as u16), Proc::Server(to));
            let at = self.clock.arrival(ch, true);
            self.clock.schedule(at, Ev::Token(i as u16, to));
        }
        self.cluster
            .check_mutual_exclusion()
            .map_err(|v| format!("token engine: {v}"))?;
        if granted {
            let c = &mut self.clock.clients[i];
            if c.phase != Phase::Acquiring {
                return Err(format!("grant to client {i} in {:?}", c.phase));
            }
            c.asked += 1;
            if c.asked < c.locks.len() {
                return self.ask_next(i);
            }
            self.clock.enter_cs(i)?;
        }
        Ok(())
    }
}

struct AgentsSim {
    clock: Clock,
    servers: Vec<AServer>,
    agents: BTreeMap<u16, (usize, AAgent)>,
    channels: HashMap<(Proc, Proc), VecDeque<AMsg>>,
    /// The node of every agent ever started (index: reference).
    agent_node: Vec<usize>,
}

impl AgentsSim {
    fn new(cfg: TxnConfig) -> AgentsSim {
        AgentsSim {
            clock: Clock::new(cfg),
            servers: (0..cfg.nodes)
                .map(|s| AServer::new(ServerId(s as u16)))
                .collect(),
            agents: BTreeMap::new(),
            channels: HashMap::new(),
            agent_node: vec![usize::MAX],
        }
    }

    fn node_of(&self, p: Proc) -> usize {
        match p {
            Proc::Server(s) => s as usize,
            Proc::Agent(a) => self.agent_node[a as usize],
        }
    }

    fn send(&mut self, from: Proc, to: Proc, m: AMsg, kind: usize) {
        let remote = self.node_of(from) != self.node_of(to);
        let st = &mut self.clock.stats;
        st.messages += 1;
        st.kinds[kind] += 1;
        if remote {
            st.remote += 1;
        }
        let at = self.clock.arrival((from, to), remote);
        self.channels.entry((from, to)).or_default().push_back(m);
        self.clock.schedule(at, Ev::Agents(from, to));
    }

    /// The servers' entries and every live agent's requests and views.
    fn dump(&self) -> String {
        let mut s = String::new();
        for srv in &self.servers {
            let e: Vec<String> = srv.entries().map(entry_text).collect();
            let r: Vec<String> = srv.records().map(|(p, v)| format!("{p} v{v}")).collect();
            s += &format!(
                "{}: entries [{}] records [{}]\n",
                srv.id(),
                e.join(" "),
                r.join(", ")
            );
        }
        for (id, (node, a)) in &self.agents {
            s += &format!("A{id} (node {node}) {:?}\n", a.status());
            for (p, m, held, rep) in a.requests() {
                s += &format!("  request {p} {m} held {held} reported {rep:?}\n");
            }
            for (info, awaiting) in a.views() {
                let q: Vec<String> = info.queue.iter().copied().map(entry_text).collect();
                s += &format!(
                    "  view {}{} v{} by {}{}{} [{}]\n",
                    info.server,
                    info.path,
                    info.version,
                    info.cause,
                    if info.surrender { " (surrender)" } else { "" },
                    if awaiting { " AWAITING" } else { "" },
                    q.join(" ")
                );
            }
        }
        let inflight: usize = self.channels.values().map(|q| q.len()).sum();
        s += &format!(
            "messages in flight: {inflight}; surrenders {}, refused {}\n",
            self.clock.stats.surrenders, self.clock.stats.surrenders_refused
        );
        s
    }

    fn timer(&mut self, i: usize) -> Result<(), String> {
        match self.clock.clients[i].phase {
            Phase::Think => {
                self.clock.draw(i);
                let id = self.agent_node.len() as u16;
                self.agent_node.push(i);
                let abort = self.clock.cfg.abort_on_deadlock;
                self.agents.insert(id, (i, AAgent::new(AgentId(id), abort)));
                self.clock.clients[i].agent = Some(AgentId(id));
                self.advance(i)
            }
            Phase::Cs => {
                let id = self.clock.clients[i].agent.ok_or("no agent")?;
                self.clock.leave_cs(i);
                self.agent_step(id.0, AgentInput::Finish)?;
                self.end(i, id);
                Ok(())
            }
            p => Err(format!("timer of client {i} in {p:?}")),
        }
    }

    /// The transaction of client `i` ended: its agent goes (messages to it are dropped,
    /// as the runtime drops those for an ended transaction), the client thinks.
    fn end(&mut self, i: usize, id: AgentId) {
        self.agents.remove(&id.0);
        self.clock.clients[i].agent = None;
        self.clock.think(i);
    }

    /// The client asks its next lock while its agent holds every lock so far, and enters
    /// its critical section when it holds them all.
    fn advance(&mut self, i: usize) -> Result<(), String> {
        loop {
            let c = &self.clock.clients[i];
            if c.phase != Phase::Acquiring {
                return Ok(());
            }
            let Some(id) = c.agent else { return Ok(()) };
            let Some((_, a)) = self.agents.get(&id.0) else {
                return Ok(());
            };
            let status = a.status();
            let asked = c.asked;
            if asked > 0 && status != Status::HaveAll {
                return Ok(());
            }
            if asked == c.locks.len() {
                return self.enter_cs(i, id);
            }
            let (l, read) = c.locks[asked];
            self.clock.clients[i].asked += 1;
            let nodes = self.clock.cfg.nodes;
            self.agent_step(
                id.0,
                AgentInput::Lock {
                    path: l.keys(),
                    mode: if read {
                        LockMode::Read
                    } else {
                        LockMode::Write
                    },
                    servers: Servers::one(ServerId(home(l, nodes))),
                    req: Req::All,
                },
            )?;
        }
    }

    fn enter_cs(&mut self, i: usize, id: AgentId) -> Result<(), String> {
        // The servers' truth: every lock the agent believes it holds is granted there.
        let nodes = self.clock.cfg.nodes;
        for (l, read) in self.clock.clients[i].locks.clone() {
            let mode = if read {
                LockMode::Read
            } else {
                LockMode::Write
            };
            let srv = &self.servers[home(l, nodes) as usize];
            let ok = srv
                .info(&l.keys(), id)
                .is_some_and(|q| q.holds_direct(id, mode));
            if !ok {
                return Err(format!(
                    "{id} believes it holds {l:?} but its server does not grant it\n{}",
                    self.dump()
                ));
            }
        }
        self.clock.enter_cs(i)
    }

    fn agent_step(&mut self, id: u16, input: AgentInput<'_, PD, PQ>) -> Result<(), String> {
        let Some((client, a)) = self.agents.get_mut(&id) else {
            return Ok(());
        };
        let client = *client;
        let mut out = VecSink::default();
        let r = a.step(input, &mut out).map_err(|e| format!("A{id}: {e}"))?;
        if r.contains(Rule::Surrender) {
            self.clock.stats.surrenders += 1;
        }
        let me = Proc::Agent(id);
        let mut aborted = false;
        for o in out.0 {
            match o {
                AgentOutput::ToServer { server, msg } => {
                    let kind = match msg {
                        ServerMsg::Request { .. } => 0,
                        ServerMsg::Surrender { .. } => 1,
                        ServerMsg::Cancel { .. } | ServerMsg::Release { .. } => 2,
                    };
                    self.send(me, Proc::Server(server.0), AMsg::ToServer(msg), kind);
                }
                AgentOutput::ToAgent { agent, info } => {
                    self.send(me, Proc::Agent(agent.0), AMsg::Info(Box::new(info)), 4);
                }
                AgentOutput::Aborted { .. } => aborted = true,
                AgentOutput::Granted { .. }
                | AgentOutput::Revoked { .. }
                | AgentOutput::HaveAll => {}
            }
        }
        if aborted {
            let c = &mut self.clock.clients[client];
            if c.phase == Phase::Acquiring {
                let lat = self.clock.now - c.started;
                self.clock.stats.latency_sum_us += lat;
                self.clock.stats.aborted += 1;
                self.end(client, AgentId(id));
            }
            return Ok(());
        }
        self.advance(client)
    }

    fn deliver(&mut self, from: Proc, to: Proc) -> Result<(), String> {
        let m = self
            .channels
            .get_mut(&(from, to))
            .and_then(|q| q.pop_front())
            .ok_or_else(|| format!("no message on {from:?} -> {to:?}"))?;
        match (to, m) {
            (Proc::Server(s), AMsg::ToServer(msg)) => {
                let mut out: VecSink<Announce<PD, PQ>> = VecSink::default();
                match self.servers[s as usize].step(&msg, &mut out) {
                    Ok(_) => {}
                    // A surrender of a queue in which the agent holds nothing any more
                    // (the runtime's engine ignores it the same way) and a release of an
                    // agent with no entry left: nothing changed. Anything else is an error
                    // of the run.
                    Err(AgentError::NotHolder(_)) if matches!(msg, ServerMsg::Surrender { .. }) => {
                        self.clock.stats.surrenders_refused += 1;
                    }
                    Err(_) if matches!(msg, ServerMsg::Release { .. }) => {}
                    Err(e) => return Err(format!("S{s} refused {msg:?}: {e}\n{}", self.dump())),
                }
                for an in out.0 {
                    // (To an agent that has ended, too: it is dropped on arrival, as the
                    // runtime drops it.)
                    self.send(to, Proc::Agent(an.to.0), AMsg::Info(Box::new(an.info)), 3);
                }
                Ok(())
            }
            (Proc::Agent(a), AMsg::Info(info)) => self.agent_step(a, AgentInput::Info(&info)),
            _ => Err("message to the wrong kind of process".into()),
        }
    }
}

/// A queue entry as the stall dump shows it: agent, path, mode, `*` when it holds.
fn entry_text<const D: usize>(e: QEntry<D>) -> String {
    format!(
        "{}{}{}{}",
        e.agent,
        e.path,
        e.mode,
        if e.granted { "*" } else { "" }
    )
}
