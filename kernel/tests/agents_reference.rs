//! uwiger/locks' own test suite (`test/locks_tests.erl`), case by case, against the agents
//! engine's kernel: each Erlang script becomes a run of `Agent`s and `LockServer`s over a
//! network that delivers every message in the order it was sent (so FIFO per pair, as
//! Erlang guarantees). Client `n` of a script is agent `An` (Erlang spawns the clients, and
//! with them their agents, in that order, so a later client's agent has the larger pid, as
//! here the larger reference). Where the script waits 100 ms and expects `timeout`, the run
//! delivers everything in flight and the agent has not got all its locks; `kill_client` and
//! `end_transaction` are `AgentInput::Finish`. Where hilock answers otherwise by design, the
//! test asserts hilock's answer and its comment says what the Erlang test expects instead
//! (`docs/engines/agents.md`, "Compared with uwiger/locks' test suite").

use hilock_harness::VecSink;
use hilock_kernel::agents::{
    AbortReason, Agent, AgentError, AgentId, AgentInput, AgentOutput, LockInfo, LockMode, LockPath,
    LockServer, Req, ServerId, ServerMsg, Servers, Status,
};
use std::collections::{BTreeSet, VecDeque};
use LockMode::{Read, Write};

const D: usize = 3;
const Q: usize = 8;
const K: usize = 6;
type Path = LockPath<D>;

fn path(keys: &[u16]) -> Path {
    Path::new(keys).unwrap()
}

/// A queue after a surrender, as an agent heard it: from whom (`None`: the server), who
/// surrendered, where, which lock.
type Note = (Option<AgentId>, AgentId, ServerId, Path);

/// A message in flight and where it goes.
enum Wire {
    ToServer(ServerId, ServerMsg<D>),
    /// A queue for an agent: announced by its server (`None`) or forwarded by an agent.
    ToAgent(AgentId, LockInfo<D, Q>, Option<AgentId>),
}

/// The agents of one script (client `n` is `An`, at index `n - 1`) and its lock servers.
struct Script {
    agents: Vec<Agent<D, Q, K>>,
    servers: Vec<LockServer<D, Q, K>>,
    /// Servers that are not running (the Erlang tests' `dead_1@host`): what is sent to
    /// them is lost.
    dead: Servers,
    /// Every message in flight, oldest first.
    wire: VecDeque<Wire>,
    /// Per agent, what its client was told (`Granted`, `Revoked`, `HaveAll`, `Aborted`).
    told: Vec<Vec<AgentOutput<D, Q>>>,
    /// Per agent, the queues after a surrender that it heard (`LockInfo::surrender`).
    notes: Vec<BTreeSet<Note>>,
    /// Per agent, the surrenders it sent.
    surrendered: Vec<Vec<(ServerId, Path)>>,
}

impl Script {
    /// Clients `1..=n` (`abort[n - 1]`: that agent's `abort_on_deadlock`) and `servers`
    /// lock servers (one per Erlang node).
    fn new(abort: &[bool], servers: u16) -> Script {
        let n = abort.len();
        Script {
            agents: (1..=n)
                .map(|a| Agent::new(AgentId(a as u16), abort[a - 1]))
                .collect(),
            servers: (0..servers).map(|s| LockServer::new(ServerId(s))).collect(),
            dead: Servers(0),
            wire: VecDeque::new(),
            told: vec![Vec::new(); n],
            notes: vec![BTreeSet::new(); n],
            surrendered: vec![Vec::new(); n],
        }
    }

    /// Steps client `n`'s agent and puts what it sends on the wire.
    fn step(&mut self, n: usize, input: AgentInput<'_, D, Q>) -> Result<(), AgentError> {
        let mut out = VecSink::default();
        self.agents[n - 1].step(input, &mut out)?;
        for o in out.0 {
            match o {
                AgentOutput::ToServer { server, msg } => {
                    if let ServerMsg::Surrender { path, .. } = msg {
                        self.surrendered[n - 1].push((server, path));
                    }
                    self.wire.push_back(Wire::ToServer(server, msg));
                }
                AgentOutput::ToAgent { agent, info } => {
                    let from = Some(AgentId(n as u16));
                    self.wire.push_back(Wire::ToAgent(agent, info, from))
                }
                told => self.told[n - 1].push(told),
            }
        }
        Ok(())
    }

    /// `locks:lock_nowait`: client `n` asks for `keys` in `mode` on `servers` (a bit set);
    /// nothing is delivered yet.
    fn ask_on(&mut self, n: usize, keys: &[u16], mode: LockMode, servers: u32, req: Req) {
        let input = AgentInput::Lock {
            path: path(keys),
            mode,
            servers: Servers(servers),
            req,
        };
        self.step(n, input).expect("the agent takes the request");
    }

    /// `locks:lock_nowait(Agent, Lock, Mode)`: on this node's server (S0), `all`.
    fn ask(&mut self, n: usize, keys: &[u16], mode: LockMode) {
        self.ask_on(n, keys, mode, 1, Req::All);
    }

    /// `locks:lock(Agent, Lock, Mode)` followed by the script's wait: the request and
    /// everything it causes is delivered.
    fn lock(&mut self, n: usize, keys: &[u16], mode: LockMode) {
        self.ask(n, keys, mode);
        self.settle();
    }

    /// `end_transaction` or `kill_client`: the agent ends and its entries are released.
    fn end(&mut self, n: usize) {
        self.step(n, AgentInput::Finish)
            .expect("a running agent ends");
        self.settle();
    }

    /// Delivers every message in flight, and what it causes.
    fn settle(&mut self) {
        while let Some(m) = self.wire.pop_front() {
            match m {
                Wire::ToServer(s, _) if self.dead.contains(s) => {}
                Wire::ToServer(s, msg) => {
                    let mut out = VecSink::default();
                    self.servers[s.0 as usize]
                        .step(&msg, &mut out)
                        .expect("the server takes the message");
                    for a in out.0 {
                        self.wire.push_back(Wire::ToAgent(a.to, a.info, None));
                    }
                }
                Wire::ToAgent(a, info, from) => {
                    let n = a.0 as usize;
                    if info.surrender {
                        self.notes[n - 1].insert((from, info.cause, info.server, info.path));
                    }
                    self.step(n, AgentInput::Info(&info))
                        .expect("the agent takes the queue");
                }
            }
        }
    }

    fn status(&self, n: usize) -> Status {
        self.agents[n - 1].status()
    }

    /// `await_all_locks` would answer `have_all_locks` now.
    fn has_all(&self, n: usize) -> bool {
        self.status(n) == Status::HaveAll
    }

    /// The locks client `n` was told had been surrendered.
    fn revoked(&self, n: usize) -> Vec<Path> {
        self.told[n - 1]
            .iter()
            .filter_map(|o| match o {
                AgentOutput::Revoked { path } => Some(*path),
                _ => None,
            })
            .collect()
    }

    /// Who surrendered which lock, as client `n`'s agent heard it from the servers.
    fn notes(&self, n: usize) -> Vec<(u16, Vec<u16>)> {
        self.notes[n - 1]
            .iter()
            .filter(|(from, ..)| from.is_none())
            .map(|(_, a, _, p)| (a.0, p.keys().to_vec()))
            .collect()
    }

    /// The queues after a surrender that other agents forwarded to client `n`'s agent:
    /// from whom, who surrendered, which lock.
    fn relayed(&self, n: usize) -> Vec<(u16, u16, Vec<u16>)> {
        self.notes[n - 1]
            .iter()
            .filter_map(|(from, a, _, p)| from.map(|f| (f.0, a.0, p.keys().to_vec())))
            .collect()
    }

    /// The entries of server `s`: `(agent, keys, mode, granted)` in queue order.
    fn entries(&self, s: u16) -> Vec<(u16, Vec<u16>, LockMode, bool)> {
        self.servers[s as usize]
            .entries()
            .map(|e| (e.agent.0, e.path.keys().to_vec(), e.mode, e.granted))
            .collect()
    }
}

/// uwiger/locks test/locks_tests.erl: "simple_lock"
#[test]
fn a_lock_is_granted_and_ending_the_transaction_releases_it() {
    let mut s = Script::new(&[false], 1);
    s.lock(1, &[1], Write);
    assert!(s.has_all(1));
    assert_eq!(
        s.told[0],
        [
            AgentOutput::Granted {
                path: path(&[1]),
                mode: Write
            },
            AgentOutput::HaveAll
        ]
    );
    s.end(1);
    assert_eq!(s.status(1), Status::Committed);
    assert!(s.entries(0).is_empty());
    // The agent is gone (`is_process_alive` is false): it takes no more requests.
    let again = AgentInput::Lock {
        path: path(&[1]),
        mode: Write,
        servers: Servers(1),
        req: Req::All,
    };
    assert_eq!(s.step(1, again), Err(AgentError::Finished));
}

/// uwiger/locks test/locks_tests.erl: "one_lock_two_clients"
#[test]
fn a_second_client_waits_for_the_lock_until_the_first_ends() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1], Write);
    s.lock(2, &[1], Write);
    assert!(s.has_all(1));
    assert_eq!(s.status(2), Status::Running);
    assert!(s.told[1].is_empty(), "client 2 is still in its call");
    s.end(1);
    assert!(s.has_all(2));
    assert!(s.notes(2).is_empty(), "{{ok, []}}: no deadlock");
}

/// uwiger/locks test/locks_tests.erl: "one_lock_wrr_clients"
#[test]
fn two_readers_queued_behind_a_writer_share_the_lock_when_it_ends() {
    let mut s = Script::new(&[false, false, false], 1);
    s.lock(1, &[1], Write);
    s.ask(2, &[1], Read);
    s.ask(3, &[1], Read);
    s.settle();
    assert!(!s.has_all(2) && !s.has_all(3));
    s.end(1);
    assert!(s.has_all(2) && s.has_all(3));
    assert_eq!(
        s.entries(0),
        [(2, vec![1], Read, true), (3, vec![1], Read, true)]
    );
}

/// uwiger/locks test/locks_tests.erl: "three_locks_three_clients"
///
/// `lock_nowait` is the kernel's `Lock` input (it never blocks); `await_all_locks` and
/// `transaction_status` read `Agent::status` (`waiting` is `Running`). Ending client 2
/// while it waits is an abort in hilock (`Aborted(Client)`); `end_transaction` is the
/// same call either way in uwiger/locks. Both release everything.
#[test]
fn three_clients_over_three_locks_finish_one_after_another_without_a_deadlock() {
    let (l1, l2, l3): (&[u16], &[u16], &[u16]) = (&[1], &[2], &[3]);
    let mut s = Script::new(&[false, false, false], 1);
    s.lock(1, l1, Write);
    s.lock(1, l2, Write);
    s.ask(2, l2, Write);
    s.ask(1, l3, Write);
    s.ask(3, l3, Write);
    s.ask(2, l3, Write);
    s.ask(3, l1, Write);
    s.ask(2, l1, Write);
    s.settle();
    // Client 1 has all three; client 2 is waiting: not the same answer.
    assert!(s.has_all(1));
    assert_eq!(s.status(2), Status::Running);
    s.end(1);
    s.end(2);
    assert_eq!(s.status(1), Status::Committed);
    assert_eq!(s.status(2), Status::Aborted(AbortReason::Client));
    // Client 3 gets [1] and [3], then [2]: `{have_all_locks, []}` both times.
    assert!(s.has_all(3));
    s.lock(3, l2, Write);
    assert!(s.has_all(3));
    assert!(s.surrendered.iter().all(|v| v.is_empty()));
    assert!(s.notes(3).is_empty());
}

/// uwiger/locks test/locks_tests.erl: "lock_merge"
///
/// uwiger/locks merges the entries; hilock keeps one entry per request, all three holding
/// (an entry whose earlier related entries are the agent's own holds).
#[test]
fn one_client_locks_two_children_and_then_their_parent() {
    let mut s = Script::new(&[false], 1);
    s.lock(1, &[1, 1], Read);
    assert!(s.has_all(1));
    s.lock(1, &[1, 2], Write);
    assert!(s.has_all(1));
    s.lock(1, &[1], Write);
    assert!(s.has_all(1));
    assert_eq!(
        s.entries(0),
        [
            (1, vec![1, 1], Read, true),
            (1, vec![1, 2], Write, true),
            (1, vec![1], Write, true)
        ]
    );
}

/// uwiger/locks test/locks_tests.erl: "lock_upgrade1"
#[test]
fn a_sole_reader_upgrades_at_once_and_a_reader_of_a_child_then_waits() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1], Read);
    s.lock(1, &[1], Write);
    assert!(s.has_all(1));
    assert_eq!(s.entries(0), [(1, vec![1], Write, true)]);
    s.lock(2, &[1, 1], Read);
    assert_eq!(s.status(2), Status::Running);
    s.end(1);
    assert!(s.has_all(2));
}

/// uwiger/locks test/locks_tests.erl: "lock_upgrade2"
#[test]
fn an_upgrade_waits_for_the_reader_of_a_child_lock() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1], Read);
    s.lock(2, &[1, 1], Read);
    assert!(s.has_all(1) && s.has_all(2));
    s.lock(1, &[1], Write);
    assert_eq!(s.status(1), Status::Running);
    s.end(2);
    assert!(s.has_all(1));
    assert_eq!(s.entries(0), [(1, vec![1], Write, true)]);
}

/// uwiger/locks test/locks_tests.erl: "lock_upgrade3"
///
/// The Erlang test lets either client win; in hilock the larger, A2, surrenders (as the
/// larger pid does in uwiger/locks), and its client, told earlier that it holds the read
/// lock, is told it was revoked (uwiger/locks only adds the surrender to the deadlock
/// list of the next answer).
#[test]
fn two_readers_upgrading_at_once_deadlock_and_the_larger_surrenders() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1], Read);
    s.lock(2, &[1], Read);
    s.ask(1, &[1], Write);
    s.ask(2, &[1], Write);
    s.settle();
    assert!(s.has_all(1));
    assert_eq!(
        s.status(2),
        Status::Running,
        "not the same answer as client 1"
    );
    assert_eq!(s.surrendered[1], [(ServerId(0), path(&[1]))]);
    assert!(s.surrendered[0].is_empty());
    assert_eq!(s.revoked(2), [path(&[1])]);
    s.end(1);
    assert!(s.has_all(2));
    assert_eq!(s.entries(0), [(2, vec![1], Write, true)]);
}

/// uwiger/locks test/locks_tests.erl: "two_w_locks_parent_read"
#[test]
fn a_read_of_the_parent_waits_for_a_write_of_another_child() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1, 1], Write);
    s.lock(2, &[1, 2], Write);
    s.lock(1, &[1], Read);
    assert_eq!(s.status(1), Status::Running);
    s.end(2);
    assert!(s.has_all(1));
    assert!(s.notes(1).is_empty());
}

/// uwiger/locks test/locks_tests.erl: "two_w_locks_parent_read_deadlock"
///
/// Differs: both Erlang calls return `{ok, [_|_]}`, a deadlock list naming the surrender.
/// hilock's answer (`HaveAll`) carries no list; the surrender is seen in the queues the
/// servers announce (`LockInfo::surrender` with its `cause`), by every agent in them, and
/// the surrendering client is told `Revoked` for the lock it was told it held.
#[test]
fn two_readers_of_the_parent_holding_one_child_each_deadlock_and_both_go_on() {
    let mut s = Script::new(&[false, false], 1);
    s.lock(1, &[1, 1], Write);
    s.lock(2, &[1, 2], Write);
    s.lock(1, &[1], Read);
    s.lock(2, &[1], Read);
    // A2 surrenders [1, 2] (its entries on [1, 2] and [1] go to the end): A1 goes on
    // without anybody ending.
    assert_eq!(s.surrendered[1], [(ServerId(0), path(&[1, 2]))]);
    assert!(s.has_all(1));
    assert_eq!(s.revoked(2), [path(&[1, 2])]);
    for n in [1, 2] {
        assert!(s.notes(n).iter().all(|(a, _)| *a == 2), "client {n}");
        assert!(s.notes(n).contains(&(2, vec![1, 2])), "client {n}");
    }
    s.end(1);
    assert!(s.has_all(2));
}

/// Clients 1 and 2 write-lock `held[0]` and `held[1]`, then ask for `wants[0]` (client 1
/// waits) and `wants[1]` (this closes the cycle), each call followed by the script's wait.
fn crossing(abort: &[bool], held: [&[u16]; 2], wants: [&[u16]; 2]) -> Script {
    let mut s = Script::new(abort, 1);
    s.lock(1, held[0], Write);
    s.lock(2, held[1], Write);
    s.lock(1, wants[0], Write);
    assert_eq!(s.status(1), Status::Running);
    s.lock(2, wants[1], Write);
    s
}

/// uwiger/locks test/locks_tests.erl: "two_clients_direct_deadlock"
///
/// Differs: each Erlang call returns `{ok, [_]}`, the one surrender `{A2, {B, Node}}`.
/// In hilock A2 surrenders B, its client is told `Revoked(B)`, and A1, in B's queue,
/// hears the one surrender announcement; A1's client is told nothing but `HaveAll`.
#[test]
fn a_direct_deadlock_of_two_clients_is_resolved_by_one_surrender() {
    let (a, b): (&[u16], &[u16]) = (&[1], &[2]);
    let mut s = crossing(&[false, false], [a, b], [b, a]);
    assert!(s.has_all(1));
    assert_eq!(s.surrendered[1], [(ServerId(0), path(b))]);
    assert!(s.surrendered[0].is_empty());
    assert_eq!(s.notes(1), [(2, b.to_vec())]);
    assert_eq!(s.revoked(2), [path(b)]);
    assert!(s.revoked(1).is_empty());
    s.end(1);
    assert!(s.has_all(2));
}

/// uwiger/locks test/locks_tests.erl: "three_clients_deadlock"
///
/// Differs: in uwiger/locks client 2 "was not involved in the lock that was surrendered,
/// but should still be informed" (its deadlock list names the surrender). In hilock the
/// server announces the surrendered queue of [3] only to A1 and A3, the agents in it; A2's
/// agent gets that queue only as A3's dependency information (A3 waits for A2), flag and
/// cause unchanged, and does not tell its client. All three still finish.
#[test]
fn a_three_cycle_is_resolved_and_the_client_outside_the_surrendered_queue_is_not_told() {
    let mut s = Script::new(&[false, false, false], 1);
    // Client n holds [n], then asks for the lock of the client before it.
    for (n, k) in [(1, 1), (2, 2), (3, 3), (1, 3), (2, 1), (3, 2)] {
        s.lock(n, &[k], Write);
    }
    assert_eq!(s.surrendered[2], [(ServerId(0), path(&[3]))]);
    assert!(s.surrendered[0].is_empty() && s.surrendered[1].is_empty());
    assert!(s.has_all(1));
    assert_eq!(s.notes(1), [(3, vec![3])]);
    assert!(s.notes(2).is_empty(), "no server tells A2");
    assert_eq!(s.relayed(2), [(3, 3, vec![3])]);
    assert_eq!(s.revoked(3), [path(&[3])]);
    s.end(1);
    assert!(s.has_all(2));
    assert_eq!(
        s.told[1],
        [
            AgentOutput::Granted {
                path: path(&[2]),
                mode: Write
            },
            AgentOutput::HaveAll,
            AgentOutput::Granted {
                path: path(&[1]),
                mode: Write
            },
            AgentOutput::HaveAll
        ],
        "client 2 hears of its grants only"
    );
    s.end(2);
    assert!(s.has_all(3));
}

/// uwiger/locks test/locks_tests.erl: "two_clients_hierarchical_deadlock"
///
/// Differs as "two_clients_direct_deadlock": no deadlock list; A2 surrenders B (A1's
/// request of B's child waits behind it), A1 hears it.
#[test]
fn a_deadlock_through_child_locks_is_resolved_by_one_surrender() {
    let mut s = crossing(&[false, false], [&[1], &[2]], [&[2, 1], &[1, 1]]);
    assert!(s.has_all(1));
    assert_eq!(s.surrendered[1], [(ServerId(0), path(&[2]))]);
    assert!(s.notes(1).contains(&(2, vec![2])));
    assert_eq!(s.revoked(2), [path(&[2])]);
    s.end(1);
    assert!(s.has_all(2));
}

/// uwiger/locks test/locks_tests.erl: "two_clients_abort_on_deadlock"
///
/// The Erlang agent exits with `{deadlock, {B, Node}}`, naming the lock; hilock's
/// `AbortReason::Deadlock` names none.
#[test]
fn abort_on_deadlock_aborts_the_agent_that_would_surrender_a_lock_it_reported() {
    let (a, b): (&[u16], &[u16]) = (&[1], &[2]);
    let mut s = crossing(&[false, true], [a, b], [b, a]);
    assert_eq!(s.status(2), Status::Aborted(AbortReason::Deadlock));
    assert!(s.told[1].contains(&AgentOutput::Aborted {
        reason: AbortReason::Deadlock
    }));
    assert!(s.surrendered[1].is_empty());
    assert!(s.has_all(1));
    assert!(s.notes(1).is_empty());
    s.end(1);
    assert!(s.entries(0).is_empty());
}

/// uwiger/locks test/locks_tests.erl: "d_simple_lock_all"
#[test]
fn a_lock_on_every_node_is_held_when_all_grant_it() {
    let mut s = Script::new(&[false], 3);
    s.ask_on(1, &[1], Write, 0b111, Req::All);
    s.settle();
    assert!(s.has_all(1));
    for srv in 0..3 {
        assert_eq!(s.entries(srv), [(1, vec![1], Write, true)]);
    }
}

/// uwiger/locks test/locks_tests.erl: "d_simple_lock_majority"
///
/// The dead node is a server that never answers; its monitor fires after the request
/// (`ServerDown`).
#[test]
fn a_majority_lock_is_held_with_one_of_three_nodes_dead() {
    let mut s = Script::new(&[false], 3);
    s.dead = Servers(0b001);
    s.ask_on(1, &[1], Write, 0b111, Req::Majority);
    s.step(1, AgentInput::ServerDown(ServerId(0))).unwrap();
    s.settle();
    assert!(s.has_all(1));
}

/// uwiger/locks test/locks_tests.erl: "d_simple_lock_any"
#[test]
fn an_any_lock_is_held_with_one_of_two_nodes_dead() {
    let mut s = Script::new(&[false], 2);
    s.dead = Servers(0b01);
    s.ask_on(1, &[1], Write, 0b11, Req::Any);
    s.step(1, AgentInput::ServerDown(ServerId(0))).unwrap();
    s.settle();
    assert!(s.has_all(1));
}

/// uwiger/locks test/locks_tests.erl: "d_simple_read_lock"
///
/// The Erlang clients run on two nodes; a kernel agent has no node (the runtime runs it on
/// its client's).
#[test]
fn two_readers_hold_a_lock_on_two_nodes_together() {
    let mut s = Script::new(&[false, false], 2);
    s.ask_on(1, &[1], Read, 0b11, Req::All);
    s.settle();
    s.ask_on(2, &[1], Read, 0b11, Req::All);
    s.settle();
    assert!(s.has_all(1) && s.has_all(2));
    for srv in 0..2 {
        assert_eq!(
            s.entries(srv),
            [(1, vec![1], Read, true), (2, vec![1], Read, true)]
        );
    }
}

/// uwiger/locks src/locks_agent_lib.erl: `matching_request_` (no test case exercises it).
///
/// uwiger/locks answers a repeated request (same mode, same `Req`) with `{ok, Deadlocks}`,
/// a read of a lock asked for write as "sufficient", and more nodes for the same lock by
/// asking them too; hilock refuses all three (`AlreadyQueued`, nothing changes) and takes
/// only read → write on the same servers.
#[test]
fn a_repeated_weaker_or_widened_request_is_refused_where_locks_answers_ok() {
    let mut s = Script::new(&[false], 2);
    s.lock(1, &[1], Write);
    assert!(s.has_all(1));
    let again = |mode, servers| AgentInput::Lock {
        path: path(&[1]),
        mode,
        servers: Servers(servers),
        req: Req::All,
    };
    let refused = Err(AgentError::AlreadyQueued(AgentId(1)));
    assert_eq!(s.step(1, again(Write, 0b01)), refused);
    assert_eq!(s.step(1, again(Read, 0b01)), refused);
    assert_eq!(s.step(1, again(Write, 0b11)), refused);
    assert!(s.wire.is_empty() && s.has_all(1));
    assert_eq!(s.entries(0), [(1, vec![1], Write, true)]);
    assert!(s.entries(1).is_empty());
}
