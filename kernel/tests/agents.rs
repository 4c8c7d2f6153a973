//! The agents engine's rules at the edges the kernel's unit tests miss (Wiger's locks, as
//! refined by Arts: S1–S6 for the lock server, A1–A8 for the agent; `spec/SPEC.md`, the
//! agents part): the wait-for graph and its cycles (A5), the closing lock, versions (A2),
//! own-identity acknowledgements (A3), forwarding (A7), servers down (A8) and every typed
//! error. Each test names the rule it pins; the comment above it names the mutants of
//! `kernel/src/agents/` it kills (`docs/verification.md`, mutation testing).

use hilock_kernel::agents::{
    Agent, AgentError, AgentId, AgentInput, AgentOutput, AgentVariant, Announce, LockInfo,
    LockMode, LockPath, LockServer, QEntry, Report, Req, Resolver, Rule, ServerId, ServerMsg,
    ServerVariant, Servers, Status, SurrenderTo, WaitGraph, MAX_SERVERS,
};
use std::collections::VecDeque;

type Path = LockPath<3>;

fn p(k: &[u16]) -> Path {
    Path::new(k).unwrap()
}

fn entry(a: u16, k: &[u16], mode: LockMode, granted: bool) -> QEntry<3> {
    QEntry {
        agent: AgentId(a),
        path: p(k),
        mode,
        granted,
    }
}

fn info(entries: &[QEntry<3>]) -> LockInfo<3, 4> {
    LockInfo {
        server: ServerId(0),
        path: p(&[1]),
        version: 1,
        cause: AgentId(1),
        surrender: false,
        queue: entries.iter().copied().collect(),
    }
}

// mod.rs: the Display impls of AgentId, ServerId, LockMode and LockPath replaced with
// `Ok(Default::default())`, and the separator test `i > 0` of LockPath's (`==`, `>=`, `<`).
#[test]
fn names_print_as_the_traces_show_them() {
    assert_eq!(AgentId(7).to_string(), "A7");
    assert_eq!(ServerId(3).to_string(), "S3");
    assert_eq!(LockMode::Read.to_string(), "R");
    assert_eq!(LockMode::Write.to_string(), "W");
    assert_eq!(p(&[4]).to_string(), "/4");
    assert_eq!(p(&[1, 20, 3]).to_string(), "/1/20/3");
}

// mod.rs: `Servers::one` and `Servers::contains` with the range test `<` replaced by `<=`
// (server 32 would shift a u32 by 32).
#[test]
fn a_server_id_out_of_range_is_in_no_set() {
    let last = ServerId(MAX_SERVERS as u16 - 1);
    let out = ServerId(MAX_SERVERS as u16);
    assert_eq!(Servers::one(last), Servers(1 << 31));
    assert_eq!(Servers::one(out), Servers(0));
    assert!(Servers(u32::MAX).contains(last));
    assert!(!Servers(u32::MAX).contains(out));
}

// mod.rs: `LockInfo::contended` replaced with `true` or `false`, and its `!` deleted.
#[test]
fn a_queue_is_contended_when_some_entry_waits() {
    use LockMode::{Read, Write};
    assert!(!info(&[]).contended());
    assert!(!info(&[entry(1, &[1], Read, true), entry(2, &[1], Read, true)]).contended());
    assert!(info(&[entry(1, &[1], Read, true), entry(2, &[1], Write, false)]).contended());
}

// mod.rs: `<AgentError as Display>::fmt` replaced with `Ok(Default::default())`.
#[test]
fn every_agent_error_has_its_own_text() {
    use hilock_kernel::agents::AgentError::*;
    let all = [
        EmptyPath,
        PathTooDeep,
        UnknownAgent(AgentId(1)),
        NotHolder(AgentId(1)),
        AlreadyQueued(AgentId(1)),
        NotQueued(AgentId(1)),
        BadServers,
        Finished,
        Full,
        OutputsFull,
    ];
    let texts: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    for (i, t) in texts.iter().enumerate() {
        assert!(!t.is_empty(), "{:?}", all[i]);
        assert!(!texts[..i].contains(t), "{t}");
    }
    assert!(UnknownAgent(AgentId(4)).to_string().contains("A4"));
}

// graph.rs: `WaitGraph::agent` replaced with `None`, `len` with 0 or 1, `is_empty` with
// `true` or `false`.
#[test]
fn the_graph_names_its_agents_in_order_of_arrival() {
    let mut g = WaitGraph::new();
    assert!(g.is_empty() && g.agent(0).is_none());
    assert_eq!(g.index(AgentId(9)), Some(0));
    assert_eq!(g.index(AgentId(4)), Some(1));
    assert_eq!(g.index(AgentId(9)), Some(0));
    assert!(!g.is_empty());
    assert_eq!(g.len(), 2);
    assert_eq!(g.agent(0), Some(AgentId(9)));
    assert_eq!(g.agent(1), Some(AgentId(4)));
    assert_eq!(g.agent(2), None);
}

fn bit(g: &WaitGraph, a: u16) -> u64 {
    1 << g.find(AgentId(a)).unwrap()
}

// graph.rs, `WaitGraph::add_queues`: the search for an earlier occurrence of a waiting
// entry limited to the queues before its own (`take(k + 1)` → `take(k * 1)`). An entry
// that appears twice in one queue (two views of one server merged) is one entry: what
// blocks its later occurrence also blocks whoever waits behind its first.
#[test]
fn a_repeated_entry_in_one_queue_shares_its_holders() {
    use LockMode::Write;
    // H holds [1]; X waits; Y waits behind X; G holds (in this view) and X appears again.
    let q = [
        entry(1, &[1], Write, true),  // H = A1
        entry(2, &[1], Write, false), // X = A2
        entry(3, &[1], Write, false), // Y = A3
        entry(4, &[1], Write, true),  // G = A4
        entry(2, &[1], Write, false), // X again
    ];
    let mut g = WaitGraph::new();
    let hs = g.add_queues::<3, 5, 2>(&[(ServerId(0), &q)], |_, _| false);
    let (h, gg) = (bit(&g, 1), bit(&g, 4));
    assert_eq!(
        hs[0][1],
        h | gg,
        "X's first occurrence takes the second's holders"
    );
    assert_eq!(hs[0][4], h | gg);
    assert_eq!(g.waits_for_holders(g.find(AgentId(3)).unwrap()), h | gg);
}

// graph.rs, `WaitGraph::add_queues`: the search's stop `k2 == k && i2 >= i` with `&&` →
// `||`, `==` → `!=` or `>=` → `<`: an occurrence of the entry in an earlier queue of the
// same server at a larger index than in its own queue is not found (or the search stops
// too early), so the entry's two occurrences keep apart holder sets and an agent waiting
// behind the first does not learn the holder only the second shows.
#[test]
fn an_entry_seen_in_two_views_of_one_server_is_one_entry() {
    use LockMode::Write;
    // The queue of [1]: A holds it, C waits on [1, 3], X waits on [1, 2], Y waits on [1].
    let q1 = [
        entry(1, &[1], Write, true),
        entry(3, &[1, 3], Write, false),
        entry(2, &[1, 2], Write, false),
        entry(5, &[1], Write, false),
    ];
    // An older view of [1, 2] on the same server: G holds it and X waits.
    let q12 = [
        entry(4, &[1, 2], Write, true),
        entry(2, &[1, 2], Write, false),
    ];
    let mut g = WaitGraph::new();
    let hs = g.add_queues::<3, 4, 2>(&[(ServerId(0), &q1), (ServerId(0), &q12)], |_, _| false);
    let (a, gg) = (bit(&g, 1), bit(&g, 4));
    assert_eq!(hs[0][2], a | gg);
    assert_eq!(hs[1][1], a | gg);
    assert_eq!(g.waits_for_holders(g.find(AgentId(5)).unwrap()), a | gg);
    // On another server the two are different entries.
    let mut g = WaitGraph::new();
    let hs = g.add_queues::<3, 4, 2>(&[(ServerId(0), &q1), (ServerId(1), &q12)], |_, _| false);
    let (a, gg) = (bit(&g, 1), bit(&g, 4));
    assert_eq!((hs[0][2], hs[1][1]), (a, gg));
    assert_eq!(g.waits_for_holders(g.find(AgentId(5)).unwrap()), a);
}

/// The agents of a set of graph indices, sorted.
fn ids(g: &WaitGraph, set: u64) -> Vec<u16> {
    let mut v: Vec<u16> = (0..64)
        .filter(|j| set & (1 << j) != 0)
        .map(|j| g.agent(j).unwrap().0)
        .collect();
    v.sort();
    v
}

/// One server, seven locks (single keys, unrelated), each `(key, [(agent, granted)])` in
/// arrival order, every entry a write:
/// - a deadlock of three: A1 holds 1 (A2, A10 wait), A2 holds 2 (A1, A12 wait), A10 holds
///   11 (A1 waits);
/// - A3 holds 3, A4 and A2 wait;
/// - a cycle of *waits* that is no deadlock: A8 holds 5 (A7, A6 wait), A6 holds 6 (A7
///   waits); A7 holds 7 (A13 waits).
fn seven_locks() -> WaitGraph {
    let locks: [(u16, &[(u16, bool)]); 7] = [
        (1, &[(1, true), (2, false), (10, false)]),
        (2, &[(2, true), (1, false), (12, false)]),
        (11, &[(10, true), (1, false)]),
        (3, &[(3, true), (4, false), (2, false)]),
        (5, &[(8, true), (7, false), (6, false)]),
        (6, &[(6, true), (7, false)]),
        (7, &[(7, true), (13, false)]),
    ];
    let queues: Vec<Vec<QEntry<3>>> = locks
        .iter()
        .map(|(k, es)| {
            es.iter()
                .map(|&(a, g)| entry(a, &[*k], LockMode::Write, g))
                .collect()
        })
        .collect();
    let refs: Vec<(ServerId, &[QEntry<3>])> =
        queues.iter().map(|q| (ServerId(0), q.as_slice())).collect();
    let mut g = WaitGraph::new();
    g.add_queues::<3, 4, 7>(&refs, |_, _| false);
    g.close();
    g
}

// graph.rs: `holds_for` replaced with 0 or 1; `component`'s guard `i >= n || reach[i] &
// (1 << i) == 0` with `||` → `&&` or `&` → `|`/`^`, its member test's two `&` → `|`/`^`;
// `cycles` and `wait_components` with `trailing_zeros() == i` → `!=`; `holders_in`'s member
// test `&` → `|`/`^` and its fold `|` → `^`; `largest`'s and `members`' member tests `&` →
// `|`/`^`.
#[test]
fn deadlocks_components_and_holders_of_a_known_graph() {
    let g = seven_locks();
    let at = |a: u16| g.find(AgentId(a)).unwrap();
    let set = |agents: &[u16]| agents.iter().fold(0u64, |m, &a| m | 1 << at(a));
    let deadlock = set(&[1, 2, 10]);
    // Direct holders waited for.
    assert_eq!(ids(&g, g.holds_for(at(2))), [1, 3]);
    assert_eq!(ids(&g, g.holds_for(at(13))), [7]);
    assert_eq!(g.holds_for(at(3)), 0);
    // Who waits, transitively, for A1: the deadlock and A12 behind it.
    assert_eq!(ids(&g, g.waiting_for(at(1))), [1, 2, 10, 12]);
    // The one deadlock, seen from each member, and nobody else is on one.
    for a in [1, 2, 10] {
        assert_eq!(g.cycle_of(at(a)), Some(deadlock), "A{a}");
    }
    for a in [3, 4, 6, 7, 8, 12, 13] {
        assert_eq!(g.cycle_of(at(a)), None, "A{a}");
    }
    assert_eq!(g.cycle_of(64), None);
    assert_eq!(g.cycles().collect::<Vec<_>>(), [deadlock]);
    // Components of waits: the deadlock and {A6, A7} (A7 waits for A6 and A6 behind A7).
    let waits = set(&[6, 7]);
    assert_eq!(g.wait_components().collect::<Vec<_>>(), [deadlock, waits]);
    // Holders: every member of the deadlock holds what another waits for; of {A6, A7}
    // only A6 (A7 holds 7, but only A13, outside, waits for it).
    assert_eq!(g.holders_in(deadlock), deadlock);
    assert_eq!(g.holders_in(waits), set(&[6]));
    assert_eq!(g.largest(waits), Some(AgentId(7)));
    assert_eq!(g.largest(deadlock), Some(AgentId(10)));
    assert_eq!(g.largest(0), None);
    let mut m: Vec<u16> = g.members(waits).map(|a| a.0).collect();
    m.sort();
    assert_eq!(m, [6, 7]);
}

type Srv = LockServer<3, 6, 4>;
type SOut = heapless::Vec<Announce<3, 6>, 64>;

fn request(s: &mut Srv, a: u16, k: &[u16], mode: LockMode) -> SOut {
    let mut out = SOut::new();
    let msg = ServerMsg::Request {
        agent: AgentId(a),
        path: p(k),
        mode,
    };
    s.step(&msg, &mut out).unwrap();
    out
}

// server.rs, `LockServer::step`: the cancel's check `e.agent == agent && e.path == path`
// with `e.agent == agent` → `!=`: a cancel of a path another agent is queued for (A1 is
// queued for another) would be taken.
#[test]
fn a_cancel_of_a_path_not_asked_for_is_refused_and_changes_nothing() {
    let mut s = Srv::new(ServerId(0));
    request(&mut s, 1, &[1], LockMode::Write);
    request(&mut s, 2, &[2], LockMode::Write);
    let before = s.clone();
    let mut out = SOut::new();
    let cancel = ServerMsg::Cancel {
        agent: AgentId(1),
        path: p(&[2]),
    };
    assert_eq!(
        s.step(&cancel, &mut out),
        Err(AgentError::NotQueued(AgentId(1)))
    );
    assert!(out.is_empty());
    assert_eq!(s, before);
}

// server.rs, `LockServer::surrender_swap` (the refuted variant S4'): the search for the
// surrendering agent's first holding entry in the queue (`&&` → `||`, twice), and for the
// next entry of another agent in that queue (`&&` → `||`).
#[test]
fn surrender_by_swap_swaps_with_the_next_other_entry_of_that_queue() {
    use LockMode::{Read, Write};
    let mut s = Srv::new(ServerId(0)).with_variant(ServerVariant {
        surrender: SurrenderTo::SwapWithNext,
        ..ServerVariant::SEED
    });
    // A2 holds [2]; A5 and A1 read [1]; A3 holds [3]; A4 waits to write [1].
    for (a, k, m) in [
        (2, 2, Write),
        (5, 1, Read),
        (1, 1, Read),
        (3, 3, Write),
        (4, 1, Write),
    ] {
        request(&mut s, a, &[k], m);
    }
    let mut out = SOut::new();
    let surrender = ServerMsg::Surrender {
        agent: AgentId(1),
        path: p(&[1]),
    };
    assert!(s
        .step(&surrender, &mut out)
        .unwrap()
        .contains(Rule::SurrenderSwap));
    let order: Vec<(u16, bool)> = s.entries().map(|e| (e.agent.0, e.granted)).collect();
    // A1's entry and A4's swap places; A4 still waits behind A5's read.
    assert_eq!(
        order,
        [(2, true), (5, true), (4, false), (3, true), (1, false)]
    );
}

// server.rs, `LockServer::complete_upgrades`: `touched[k] |= …` → `&=`: a completed upgrade
// would un-mark the records that the step touched for another reason, so a queue changed by
// a release is not announced.
#[test]
fn a_release_that_completes_an_upgrade_announces_every_changed_queue() {
    use LockMode::{Read, Write};
    let mut s = Srv::new(ServerId(0));
    // A1 and A2 read [1]; A1 asks to write it (the upgrade waits for A2); A2 writes [5]
    // and A3 waits for [5].
    request(&mut s, 1, &[1], Read);
    request(&mut s, 2, &[1], Read);
    request(&mut s, 1, &[1], Write);
    request(&mut s, 2, &[5], Write);
    request(&mut s, 3, &[5], Write);
    let mut out = SOut::new();
    let rep = s
        .step(&ServerMsg::Release { agent: AgentId(2) }, &mut out)
        .unwrap();
    assert!(rep.contains(Rule::UpgradeDone) && rep.contains(Rule::Release));
    let told: Vec<(u16, Vec<u16>)> = out
        .iter()
        .map(|a| (a.to.0, a.info.path.keys().to_vec()))
        .collect();
    assert!(told.contains(&(1, vec![1])), "{told:?}");
    assert!(told.contains(&(3, vec![5])), "{told:?}");
    let q5 = s.info(&p(&[5]), AgentId(0)).unwrap();
    assert!(q5.holds_direct(AgentId(3), Write));
}

// server.rs, `LockServer::announce`: `is_last` with `==` → `!=`: the surrendered lock's own
// queue is announced last of a surrender's announcements (the agent's acknowledgement
// closes them), not first.
#[test]
fn the_surrendered_lock_is_announced_last() {
    use LockMode::Write;
    let mut s = Srv::new(ServerId(0));
    request(&mut s, 1, &[1], Write);
    request(&mut s, 1, &[1, 2], Write);
    request(&mut s, 2, &[1], Write);
    let mut out = SOut::new();
    let surrender = ServerMsg::Surrender {
        agent: AgentId(1),
        path: p(&[1]),
    };
    s.step(&surrender, &mut out).unwrap();
    let paths: Vec<(u16, Vec<u16>)> = out
        .iter()
        .map(|a| (a.to.0, a.info.path.keys().to_vec()))
        .collect();
    // Both agents are in both queues (A2's entry on [1] covers [1, 2]).
    assert_eq!(
        paths,
        [(2, vec![1, 2]), (1, vec![1, 2]), (2, vec![1]), (1, vec![1])]
    );
    assert!(out
        .iter()
        .all(|a| a.info.surrender && a.info.cause == AgentId(1)));
}

type Ag = Agent<3, 6, 4>;
type AOut = heapless::Vec<AgentOutput<3, 6>, 160>;

/// A message in flight.
enum Msg {
    ToServer(ServerMsg<3>),
    ToAgent(AgentId, LockInfo<3, 6>),
}

/// Agents and one server with a FIFO network; the client's notices are kept per agent.
struct Net {
    agents: Vec<Ag>,
    server: Srv,
    net: VecDeque<Msg>,
    told: Vec<(AgentId, AgentOutput<3, 6>)>,
    /// Every forward: sender, receiver, queue.
    forwards: Vec<(AgentId, AgentId, LockInfo<3, 6>)>,
}

impl Net {
    fn new(agents: &[u16]) -> Net {
        Net {
            agents: agents.iter().map(|&a| Ag::new(AgentId(a), false)).collect(),
            server: Srv::new(ServerId(0)),
            net: VecDeque::new(),
            told: Vec::new(),
            forwards: Vec::new(),
        }
    }
    fn agent(&mut self, a: u16) -> &mut Ag {
        self.agents
            .iter_mut()
            .find(|x| x.id() == AgentId(a))
            .unwrap()
    }
    /// Steps agent `a` and puts its messages on the network.
    fn input(&mut self, a: u16, input: AgentInput<'_, 3, 6>) {
        let mut out = AOut::new();
        self.agent(a).step(input, &mut out).unwrap();
        for o in out {
            match o {
                AgentOutput::ToServer { msg, .. } => self.net.push_back(Msg::ToServer(msg)),
                AgentOutput::ToAgent { agent, info } => {
                    self.forwards.push((AgentId(a), agent, info.clone()));
                    self.net.push_back(Msg::ToAgent(agent, info))
                }
                other => self.told.push((AgentId(a), other)),
            }
        }
    }
    fn lock(&mut self, a: u16, k: &[u16], mode: LockMode) {
        let input = AgentInput::Lock {
            path: p(k),
            mode,
            servers: Servers(1),
            req: Req::All,
        };
        self.input(a, input);
    }
    /// Delivers the oldest message; false when none is left.
    fn deliver(&mut self) -> bool {
        let Some(m) = self.net.pop_front() else {
            return false;
        };
        match m {
            Msg::ToAgent(a, info) => self.input(a.0, AgentInput::Info(&info)),
            Msg::ToServer(msg) => {
                let mut out = SOut::new();
                self.server.step(&msg, &mut out).unwrap();
                for ann in out {
                    self.net.push_back(Msg::ToAgent(ann.to, ann.info));
                }
            }
        }
        true
    }
    fn run(&mut self) {
        while self.deliver() {}
    }
}

// transaction.rs: `Agent::views` with `awaiting > 0` → `==` or `>=`: after a surrender
// and before its acknowledgement, exactly the surrendered queue is void.
#[test]
fn only_the_surrendered_view_awaits_its_acknowledgement() {
    use LockMode::Write;
    let mut n = Net::new(&[1, 2]);
    n.lock(1, &[1], Write);
    n.lock(2, &[2], Write);
    n.run();
    n.lock(1, &[2], Write);
    n.lock(2, &[1], Write);
    // Deliver until A2 (the larger) has sent its surrender, not the server's answer.
    while !n
        .net
        .iter()
        .any(|m| matches!(m, Msg::ToServer(ServerMsg::Surrender { .. })))
    {
        assert!(n.deliver(), "no surrender");
    }
    let views: Vec<(Vec<u16>, bool)> = n
        .agent(2)
        .views()
        .map(|(i, w)| (i.path.keys().to_vec(), w))
        .collect();
    assert!(views.contains(&(vec![2], true)), "{views:?}");
    assert!(views.contains(&(vec![1], false)), "{views:?}");
    n.run();
    assert!(n.agent(2).views().all(|(_, w)| !w));
    assert_eq!(n.agent(1).status(), Status::HaveAll);
}

// transaction.rs: `Agent::believed` with its `!` deleted: what the client may act on is
// the locks reported held while the transaction runs, and nothing once it has ended.
#[test]
fn beliefs_last_as_long_as_the_transaction() {
    use LockMode::Read;
    let mut n = Net::new(&[1]);
    n.lock(1, &[1, 2], Read);
    n.run();
    let b: Vec<_> = n.agent(1).believed().collect();
    assert_eq!(b, [(ServerId(0), p(&[1, 2]), Read)]);
    n.input(1, AgentInput::Finish);
    assert_eq!(n.agent(1).status(), Status::Committed);
    assert_eq!(n.agent(1).believed().count(), 0);
}

// transaction.rs: `Agent::MAX_OUTPUTS` with any of its `*` or `+` replaced. The bound is
// pinned to its documented sum (forwards: every view to every agent of every view; the
// client's notices; a surrender; a release per server), like the state counts in verify,
// and a buffer one short of it is refused.
#[test]
fn the_agent_output_bound_is_the_documented_sum() {
    assert_eq!(Ag::MAX_OUTPUTS, 4 * 4 * 6 + 2 * 4 + MAX_SERVERS + 3);
    assert_eq!(Agent::<2, 3, 5>::MAX_OUTPUTS, 5 * 5 * 3 + 2 * 5 + 32 + 3);
    let mut a = Ag::new(AgentId(1), false);
    let mut short = heapless::Vec::<AgentOutput<3, 6>, 138>::new();
    assert_eq!(
        a.step(AgentInput::Finish, &mut short),
        Err(AgentError::OutputsFull)
    );
    let mut exact = heapless::Vec::<AgentOutput<3, 6>, 139>::new();
    assert!(a.step(AgentInput::Finish, &mut exact).is_ok());
}

fn lock_input(k: &[u16], mode: LockMode, servers: u32, req: Req) -> AgentInput<'static, 3, 6> {
    AgentInput::Lock {
        path: p(k),
        mode,
        servers: Servers(servers),
        req,
    }
}

// transaction.rs, `Agent::step`: the upgrade check `… || r.servers != servers || r.req !=
// req` with its second `||` → `&&`: an upgrade asked of other servers (same requirement)
// would be taken.
#[test]
fn an_upgrade_must_name_the_same_servers_and_requirement() {
    use LockMode::{Read, Write};
    let mut a = Ag::new(AgentId(1), false);
    let mut out = AOut::new();
    a.step(lock_input(&[1], Read, 0b1, Req::All), &mut out)
        .unwrap();
    let before = a.clone();
    for (servers, req) in [(0b11, Req::All), (0b1, Req::Any), (0b11, Req::Any)] {
        let mut out = AOut::new();
        assert_eq!(
            a.step(lock_input(&[1], Write, servers, req), &mut out),
            Err(AgentError::AlreadyQueued(AgentId(1)))
        );
        assert!(out.is_empty() && a == before);
    }
    let mut out = AOut::new();
    assert!(a
        .step(lock_input(&[1], Write, 0b1, Req::All), &mut out)
        .is_ok());
}

// transaction.rs, `Agent::step`: `self.down.0 | Servers::one(s).0` → `^`: a server reported
// down twice stays down.
#[test]
fn a_server_reported_down_twice_stays_down() {
    let mut a = Ag::new(AgentId(1), false);
    let mut out = AOut::new();
    a.step(
        lock_input(&[1], LockMode::Write, 0b111, Req::Majority),
        &mut out,
    )
    .unwrap();
    for s in [1, 1] {
        let mut out = AOut::new();
        a.step(AgentInput::ServerDown(ServerId(s)), &mut out)
            .unwrap();
        assert_eq!(a.status(), Status::Running);
    }
    let mut out = AOut::new();
    let rep = a
        .step(AgentInput::ServerDown(ServerId(2)), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::AbortServersDown));
    assert_eq!(
        a.status(),
        Status::Aborted(hilock_kernel::agents::AbortReason::ServersDown(ServerId(2)))
    );
}

// transaction.rs, `Agent::forward` (A7, "no superfluous information is sent if avoidable"):
// the record of what was sent (its insert left out, or its lookup negated), the skip test
// `awaiting > 0 || has(t) || sent.binary_search(&t).is_ok()` (`||` → `&&`, `>` → `<`), and
// the relevance test (a waiting entry of an agent that
// waits for the sender, `&&` → `||`): around a three-agent deadlock every forward is a
// contended queue, to an agent not in it, sent once.
#[test]
fn forwards_are_contended_new_to_the_receiver_and_sent_once() {
    use LockMode::Write;
    let mut n = Net::new(&[1, 2, 3]);
    for (a, k) in [(1, 1), (2, 2), (3, 3)] {
        n.lock(a, &[k], Write);
    }
    n.run();
    for (a, k) in [(1, 2), (2, 3), (3, 1)] {
        n.lock(a, &[k], Write);
    }
    n.run();
    assert!(!n.forwards.is_empty());
    let mut seen = Vec::new();
    for (from, to, info) in &n.forwards {
        assert!(info.contended(), "{from} → {to}: {info:?}");
        assert!(!info.has(*to), "{from} → {to}: {info:?}");
        let key = (*from, *to, info.path, info.version);
        assert!(!seen.contains(&key), "sent twice: {key:?}");
        seen.push(key);
    }
    // The deadlock was resolved: the largest surrendered, the others go on.
    assert_eq!(n.agent(2).status(), Status::HaveAll);
}

/// A queue announcement of server 0, built by hand.
fn ann(k: &[u16], version: u32, cause: u16, surrender: bool, q: &[QEntry<3>]) -> LockInfo<3, 6> {
    LockInfo {
        server: ServerId(0),
        path: p(k),
        version,
        cause: AgentId(cause),
        surrender,
        queue: q.iter().copied().collect(),
    }
}

/// A5 holds [1] and waits for [2] behind A2, which waits for [1]: A5, the larger, has just
/// surrendered [1] (its acknowledgement has not arrived).
fn after_surrender(variant: AgentVariant) -> Ag {
    use LockMode::Write;
    let mut a = Ag::new(AgentId(5), false).with_variant(variant);
    let mut out = AOut::new();
    a.step(lock_input(&[1], Write, 1, Req::All), &mut out)
        .unwrap();
    a.step(lock_input(&[2], Write, 1, Req::All), &mut out)
        .unwrap();
    let infos = [
        ann(&[1], 1, 5, false, &[entry(5, &[1], Write, true)]),
        ann(
            &[2],
            2,
            2,
            false,
            &[entry(2, &[2], Write, true), entry(5, &[2], Write, false)],
        ),
        ann(
            &[1],
            3,
            2,
            false,
            &[entry(5, &[1], Write, true), entry(2, &[1], Write, false)],
        ),
    ];
    for i in &infos {
        out.clear();
        a.step(AgentInput::Info(i), &mut out).unwrap();
    }
    let surrender = ServerMsg::Surrender {
        agent: AgentId(5),
        path: p(&[1]),
    };
    assert!(out.contains(&AgentOutput::ToServer {
        server: ServerId(0),
        msg: surrender
    }));
    a
}

fn view_of(a: &Ag, k: &[u16]) -> Option<(u32, bool)> {
    a.views()
        .find(|(i, _)| i.path == p(k))
        .map(|(i, w)| (i.version, w))
}

fn feed(a: &mut Ag, info: &LockInfo<3, 6>) -> Report {
    let mut out = AOut::new();
    a.step(AgentInput::Info(info), &mut out).unwrap()
}

// transaction.rs, `Agent::step` (A3): a void view's guard `v.awaiting > 0 && …` → `<`, and
// its test `cause != me || !surrender` → `&&`: while the surrender is unacknowledged, an
// update of the surrendered lock that is not the agent's own surrender announcement is
// ignored, even a newer one that does not show the agent (a forwarded queue) or one the
// agent caused otherwise.
#[test]
fn a_void_view_takes_only_the_own_surrender_announcement() {
    use LockMode::Write;
    for (cause, surrender) in [(2, false), (5, false), (2, true)] {
        let mut a = after_surrender(AgentVariant::SEED);
        assert_eq!(view_of(&a, &[1]), Some((3, true)));
        // A2's queue of [1], without A5 in it (forwarded, or a made-up cause).
        let r = feed(
            &mut a,
            &ann(&[1], 10, cause, surrender, &[entry(2, &[1], Write, true)]),
        );
        assert!(r.contains(Rule::AwaitingAck), "{cause} {surrender}");
        assert_eq!(view_of(&a, &[1]), Some((3, true)), "{cause} {surrender}");
        // The acknowledgement ends it.
        let ack = ann(
            &[1],
            11,
            5,
            true,
            &[entry(2, &[1], Write, true), entry(5, &[1], Write, false)],
        );
        assert!(feed(&mut a, &ack).contains(Rule::SurrenderAcked));
        assert_eq!(view_of(&a, &[1]), Some((11, false)));
    }
}

// transaction.rs, `Agent::step` (A3): `ack = cause == me && surrender` → `||`: another
// agent's surrender announcement of the surrendered lock would count as this agent's
// acknowledgement and end the pending surrender, so that a queue sent before the surrender
// (here of [1, 7], which it changes) would then be taken.
#[test]
fn another_agents_surrender_is_no_acknowledgement() {
    use LockMode::Write;
    let mut a = after_surrender(AgentVariant::SEED);
    let other = ann(
        &[1],
        5,
        2,
        true,
        &[entry(5, &[1], Write, true), entry(2, &[1], Write, false)],
    );
    assert!(feed(&mut a, &other).contains(Rule::AwaitingAck));
    let before = ann(
        &[1, 7],
        6,
        2,
        false,
        &[entry(5, &[1], Write, true), entry(2, &[1, 7], Write, false)],
    );
    assert!(feed(&mut a, &before).contains(Rule::AwaitingAck));
    assert_eq!(view_of(&a, &[1, 7]), None);
}

// transaction.rs, `Agent::step`: the report's `SurrenderAcked` after the version check,
// `v.awaiting > 0` → `==`, `>=` (every store would say so) or `<` (never): without
// `await_own_ack`, the next newer update of a void view ends it and says so; an update of a
// view that was not void does not.
#[test]
fn without_awaiting_the_ack_the_next_newer_update_ends_the_surrender() {
    use LockMode::Write;
    let variant = AgentVariant {
        await_own_ack: false,
        ..AgentVariant::SEED
    };
    let mut a = after_surrender(variant);
    assert_eq!(view_of(&a, &[1]), Some((3, true)));
    let r = feed(
        &mut a,
        &ann(
            &[2],
            4,
            2,
            false,
            &[entry(2, &[2], Write, true), entry(5, &[2], Write, false)],
        ),
    );
    assert!(r.contains(Rule::Stored) && !r.contains(Rule::SurrenderAcked));
    let r = feed(
        &mut a,
        &ann(&[1], 10, 2, false, &[entry(2, &[1], Write, true)]),
    );
    assert!(r.contains(Rule::SurrenderAcked) && r.contains(Rule::Stored));
    assert_eq!(view_of(&a, &[1]), Some((10, false)));
}

/// Agent `me` after asking for `locks` (write, on server 0) and hearing `infos`; the
/// outputs and report of the last step.
fn fed(
    me: u16,
    variant: AgentVariant,
    locks: &[(&[u16], u32, Req)],
    infos: &[LockInfo<3, 6>],
) -> (Ag, AOut, Report) {
    let mut a = Ag::new(AgentId(me), false).with_variant(variant);
    let mut out = AOut::new();
    for (k, servers, req) in locks {
        a.step(lock_input(k, LockMode::Write, *servers, *req), &mut out)
            .unwrap();
    }
    let mut rep = Report::default();
    for i in infos {
        out.clear();
        rep = a.step(AgentInput::Info(i), &mut out).unwrap();
    }
    (a, out, rep)
}

fn surrenders(out: &[AgentOutput<3, 6>]) -> Vec<Vec<u16>> {
    out.iter()
        .filter_map(|o| match o {
            AgentOutput::ToServer {
                msg: ServerMsg::Surrender { path, .. },
                ..
            } => Some(path.keys().to_vec()),
            _ => None,
        })
        .collect()
}

// transaction.rs, `Agent::evaluate`: the match arm `Resolver::LargestInCycle => c` deleted
// (the refuted variant would then pick among the component's holders, like the pre-fix
// rule). A9 waits for [1] behind A1 (which holds it) and before A2; A1 waits for A2's [2]:
// a component of *waits* {A1, A2, A9} whose largest, A9, holds nothing.
#[test]
fn largest_in_cycle_picks_the_largest_member_holder_or_not() {
    use LockMode::Write;
    let infos = [
        ann(
            &[1],
            1,
            2,
            false,
            &[
                entry(1, &[1], Write, true),
                entry(9, &[1], Write, false),
                entry(2, &[1], Write, false),
            ],
        ),
        ann(
            &[2],
            2,
            1,
            false,
            &[entry(2, &[2], Write, true), entry(1, &[2], Write, false)],
        ),
    ];
    let locks: [(&[u16], u32, Req); 1] = [(&[1], 1, Req::All)];
    let variant = |resolver| AgentVariant {
        resolver,
        ..AgentVariant::SEED
    };
    // A9 is the resolver; it holds no lock in the component, so it surrenders nothing.
    let (_, out, rep) = fed(9, variant(Resolver::LargestInCycle), &locks, &infos);
    assert!(!rep.contains(Rule::DeferToLarger) && surrenders(&out).is_empty());
    // The pre-fix rule leaves it to the largest holder, A2.
    let (_, _, rep) = fed(
        9,
        variant(Resolver::LargestHolderOfWaitComponent),
        &locks,
        &infos,
    );
    assert!(rep.contains(Rule::DeferToLarger));
}

// transaction.rs, `Agent::held_elsewhere` replaced with `false`, and its `r.mode == w.mode`
// → `!=`: A5 has [1] (any of servers 0 and 1) on server 0, where A2 waits behind it, and
// waits for it on server 1 behind A2. That waiting entry adds no edge: there is no deadlock
// and nothing to surrender.
#[test]
fn a_waiting_entry_for_a_lock_held_elsewhere_is_no_deadlock() {
    use LockMode::Write;
    let s1 = |mut i: LockInfo<3, 6>| {
        i.server = ServerId(1);
        i
    };
    let infos = [
        ann(&[1], 1, 5, false, &[entry(5, &[1], Write, true)]),
        s1(ann(
            &[1],
            2,
            5,
            false,
            &[entry(2, &[1], Write, true), entry(5, &[1], Write, false)],
        )),
        ann(
            &[1],
            3,
            2,
            false,
            &[entry(5, &[1], Write, true), entry(2, &[1], Write, false)],
        ),
    ];
    // [3] is asked for too (not answered yet), so the agent does not have all it asked for.
    let locks: [(&[u16], u32, Req); 2] = [(&[1], 0b11, Req::Any), (&[3], 1, Req::All)];
    let (a, out, rep) = fed(5, AgentVariant::SEED, &locks, &infos);
    assert_eq!(a.status(), Status::Running);
    assert!(
        surrenders(&out).is_empty() && !rep.contains(Rule::Surrender),
        "{out:?}"
    );
    assert!(a.requests().any(|(k, _, held, _)| k == p(&[1]) && held));
}

/// A5 holds [1], where A3 (not in the deadlock) waits, and [3], where A2 waits; A5 waits
/// for A2's [2]. A5 hears the three queues in `order` (indices into [1], [2], [3]); the
/// outputs and report of the last step.
fn a5_a2_deadlock(variant: AgentVariant, order: [usize; 3]) -> (Ag, AOut, Report) {
    use LockMode::Write;
    let infos = [
        ann(
            &[1],
            1,
            3,
            false,
            &[entry(5, &[1], Write, true), entry(3, &[1], Write, false)],
        ),
        ann(
            &[2],
            2,
            5,
            false,
            &[entry(2, &[2], Write, true), entry(5, &[2], Write, false)],
        ),
        ann(
            &[3],
            3,
            2,
            false,
            &[entry(5, &[3], Write, true), entry(2, &[3], Write, false)],
        ),
    ];
    let heard = order.map(|i| infos[i].clone());
    let locks: [(&[u16], u32, Req); 3] = [
        (&[1], 1, Req::All),
        (&[2], 1, Req::All),
        (&[3], 1, Req::All),
    ];
    fed(5, variant, &locks, &heard)
}

// transaction.rs, `Agent::closing_lock`: the member test `c & (1 << j) != 0` (`!=` → `==`,
// `&` → `|`/`^`, `<<` → `>>`) and `in_c(w) && !held_elsewhere(w)` (`&&` → `||`, `!`
// deleted). The deadlock of `a5_a2_deadlock`, queues heard in the order [1], [3], [2]: the
// lock that closes the deadlock is [3], not the first one that blocks somebody.
#[test]
fn the_surrendered_lock_is_the_one_a_member_of_the_deadlock_waits_for() {
    let (_, out, rep) = a5_a2_deadlock(AgentVariant::SEED, [0, 2, 1]);
    assert!(rep.contains(Rule::Surrender));
    assert_eq!(surrenders(&out), [vec![3]]);
}

// transaction.rs, `Agent::closing_view` (the pre-fix rule's choice of lock): replaced with
// `None`, `Some(0)` or `Some(1)`; `v.awaiting == 0` → `!=`; its `&&`s → `||`; the member
// test (`!=` → `==`, `&` → `|`/`^`, `<<` → `>>`); `f.agent == self.me` → `!=`;
// `blocked_by(w, f) == Some(true)` → `!=`. The same deadlock, queues heard in the order
// [1], [2], [3]: the first view in which a member of the component waits directly behind
// A5 is [3].
#[test]
fn the_pre_fix_rule_surrenders_the_first_lock_a_member_waits_for_directly() {
    let variant = AgentVariant {
        resolver: Resolver::LargestHolderOfWaitComponent,
        ..AgentVariant::SEED
    };
    let (a, out, rep) = a5_a2_deadlock(variant, [0, 1, 2]);
    assert!(rep.contains(Rule::Surrender));
    assert_eq!(surrenders(&out), [vec![3]]);
    let order: Vec<Vec<u16>> = a.views().map(|(i, _)| i.path.keys().to_vec()).collect();
    assert_eq!(order, [vec![1], vec![2], vec![3]]);
}

// transaction.rs, `Agent::touches`: `p.related(surrendered) || …` → `&&`. A5 holds [1];
// A2 waits for [1, 2] behind it and holds [2], for which A5 waits. A5 surrenders [1, 2]: the
// server moves A5's entry on [1], which changes the queue of [1, 3] as well (unrelated to
// [1, 2], related to A5's [1]), so A5's view of [1, 3] is void until acknowledged.
#[test]
fn a_surrender_voids_the_views_its_moved_entries_change() {
    use LockMode::Write;
    let infos = [
        ann(
            &[1, 2],
            1,
            2,
            false,
            &[entry(5, &[1], Write, true), entry(2, &[1, 2], Write, false)],
        ),
        ann(
            &[2],
            2,
            5,
            false,
            &[entry(2, &[2], Write, true), entry(5, &[2], Write, false)],
        ),
        ann(&[1, 3], 3, 5, false, &[entry(5, &[1], Write, true)]),
    ];
    let locks: [(&[u16], u32, Req); 2] = [(&[1], 1, Req::All), (&[2], 1, Req::All)];
    // The last announcement closes the cycle only once [1, 3] is known: feed it first.
    let (a, out, _) = fed(
        5,
        AgentVariant::SEED,
        &locks,
        &[infos[2].clone(), infos[0].clone(), infos[1].clone()],
    );
    assert_eq!(surrenders(&out), [vec![1, 2]]);
    assert_eq!(view_of(&a, &[1, 2]), Some((1, true)));
    assert_eq!(view_of(&a, &[1, 3]), Some((3, true)));
    assert_eq!(view_of(&a, &[2]), Some((2, false)));
}

// transaction.rs, `Agent::pending_touches`: `*s == server && …` → `||`: a surrender pending
// on server 0 says nothing about server 1's queues, even of the same lock.
#[test]
fn a_pending_surrender_holds_back_only_its_own_servers_queues() {
    use LockMode::Write;
    let mut a = after_surrender(AgentVariant::SEED);
    let mut other = ann(&[1], 7, 5, false, &[entry(5, &[1], Write, true)]);
    other.server = ServerId(1);
    assert!(feed(&mut a, &other).contains(Rule::Stored));
    assert!(a
        .views()
        .any(|(i, w)| i.server == ServerId(1) && i.path == p(&[1]) && i.version == 7 && !w));
}

/// Agent `me` after asking for `locks` (write, server 0) and hearing `infos`, with every
/// forward it sent on the way: `(to, path)`.
fn forwards_of(me: u16, locks: &[&[u16]], infos: &[LockInfo<3, 6>]) -> Vec<(u16, Vec<u16>)> {
    let mut a = Ag::new(AgentId(me), false);
    let mut out = AOut::new();
    for k in locks {
        a.step(lock_input(k, LockMode::Write, 1, Req::All), &mut out)
            .unwrap();
    }
    let mut sent = Vec::new();
    for i in infos {
        out.clear();
        a.step(AgentInput::Info(i), &mut out).unwrap();
        for o in &out {
            if let AgentOutput::ToAgent { agent, info } = o {
                sent.push((agent.0, info.path.keys().to_vec()));
            }
        }
    }
    sent
}

// transaction.rs, `Agent::forward` (A7): the upstream set `waiting_for(me) | 1 << me` with
// `<<` → `>>` (the agent itself left out); the relevance test's member check (`&` →
// `|`/`^`) and `&&` → `||` (an entry that waits); the record of what was sent (its insert
// left out) and the skip test's second `||` → `&&`. A1 waits for [4] behind A7 and for [5] behind A8, holds [7] alone, and knows A3
// waiting behind A9 on [6]: it tells A7 about [5] and A8 about [4], once, and nobody about
// [6] or [7].
#[test]
fn an_agent_tells_whom_it_waits_for_where_it_waits_once() {
    use LockMode::Write;
    let infos = [
        ann(
            &[4],
            1,
            1,
            false,
            &[entry(7, &[4], Write, true), entry(1, &[4], Write, false)],
        ),
        ann(
            &[5],
            2,
            1,
            false,
            &[entry(8, &[5], Write, true), entry(1, &[5], Write, false)],
        ),
        ann(
            &[6],
            3,
            3,
            false,
            &[entry(9, &[6], Write, true), entry(3, &[6], Write, false)],
        ),
        ann(&[7], 4, 1, false, &[entry(1, &[7], Write, true)]),
        ann(
            &[4],
            5,
            1,
            false,
            &[entry(7, &[4], Write, true), entry(1, &[4], Write, false)],
        ),
    ];
    let sent = forwards_of(1, &[&[4], &[5], &[7]], &infos);
    assert_eq!(sent, [(7, vec![5]), (8, vec![4]), (8, vec![4])]);
}

// transaction.rs, `Agent::forward`: the upstream set `waiting_for(me) | 1 << me` with `|` →
// `^`, which takes the agent out when it is on a cycle of waits. A1 holds [1] (A2 waits)
// and waits for A2's [2] — a deadlock A2 resolves — and waits for A7's [4]: A1 tells A2
// about [4] and A7 about [2], where A1 itself waits.
#[test]
fn an_agent_on_a_cycle_still_tells_where_it_waits() {
    use LockMode::Write;
    let infos = [
        ann(
            &[1],
            1,
            2,
            false,
            &[entry(1, &[1], Write, true), entry(2, &[1], Write, false)],
        ),
        ann(
            &[2],
            2,
            1,
            false,
            &[entry(2, &[2], Write, true), entry(1, &[2], Write, false)],
        ),
        ann(
            &[4],
            3,
            1,
            false,
            &[entry(7, &[4], Write, true), entry(1, &[4], Write, false)],
        ),
    ];
    let sent = forwards_of(1, &[&[1], &[2], &[4]], &infos);
    assert!(sent.contains(&(2, vec![4])), "{sent:?}");
    assert!(sent.contains(&(7, vec![2])), "{sent:?}");
}

// transaction.rs, `Agent::forward` (A5, each version once): whom a version was sent to is
// recorded for agents of any id. The record was a 64-bit mask, so agents from 64 on heard
// a queue again at every evaluation — a runtime's ids go beyond 64 within a few dozen
// transactions, and the repeats made a message storm.
#[test]
fn an_agent_beyond_64_is_told_once() {
    use LockMode::Write;
    let infos = [
        ann(
            &[4],
            1,
            1,
            false,
            &[entry(64, &[4], Write, true), entry(1, &[4], Write, false)],
        ),
        ann(
            &[5],
            2,
            1,
            false,
            &[entry(8, &[5], Write, true), entry(1, &[5], Write, false)],
        ),
        ann(&[7], 3, 1, false, &[entry(1, &[7], Write, true)]),
    ];
    let sent = forwards_of(1, &[&[4], &[5], &[7]], &infos);
    assert_eq!(sent, [(64, vec![5]), (8, vec![4])]);
}

// transaction.rs, `Agent::forward`: the skip test `v.awaiting > 0` → `<`: a void view (a
// surrendered queue, whose acknowledgement has not arrived) is not passed on. A5 read [1],
// A2 waits to write it, and A5's upgrade waits behind A2: A5 surrenders [1]. Then A5 waits
// for A7's [4]: it tells A7 nothing about [1].
#[test]
fn a_void_view_is_not_forwarded() {
    use LockMode::{Read, Write};
    let mut a = Ag::new(AgentId(5), false);
    let mut out = AOut::new();
    a.step(lock_input(&[1], Read, 1, Req::All), &mut out)
        .unwrap();
    feed(
        &mut a,
        &ann(&[1], 1, 5, false, &[entry(5, &[1], Read, true)]),
    );
    a.step(lock_input(&[1], Write, 1, Req::All), &mut out)
        .unwrap();
    a.step(lock_input(&[4], Write, 1, Req::All), &mut out)
        .unwrap();
    let q1 = [
        entry(5, &[1], Read, true),
        entry(2, &[1], Write, false),
        entry(5, &[1], Write, false),
    ];
    out.clear();
    a.step(AgentInput::Info(&ann(&[1], 2, 5, false, &q1)), &mut out)
        .unwrap();
    assert_eq!(surrenders(&out), [vec![1]]);
    out.clear();
    let q4 = [entry(7, &[4], Write, true), entry(5, &[4], Write, false)];
    a.step(AgentInput::Info(&ann(&[4], 3, 5, false, &q4)), &mut out)
        .unwrap();
    assert!(
        !out.iter().any(|o| matches!(o, AgentOutput::ToAgent { .. })),
        "{out:?}"
    );
}

// transaction.rs, `Agent::void_related`: the placeholder for a lock asked for whose first
// announcement has not arrived (`is_none() && !is_full()` with `&&` → `||`, or its `!`
// deleted), and `mine.contains(p) || has(me)` → `&&`. As in `after_surrender`, but A5 has
// also asked for [1, 4] (not announced yet): the surrender of [1] changes its queue, so an
// empty view of it waits for the acknowledgement; the surrendered lock gets no second view.
#[test]
fn a_surrender_makes_a_waiting_placeholder_for_an_unannounced_lock() {
    use LockMode::Write;
    let infos = [
        ann(&[1], 1, 5, false, &[entry(5, &[1], Write, true)]),
        ann(
            &[2],
            2,
            2,
            false,
            &[entry(2, &[2], Write, true), entry(5, &[2], Write, false)],
        ),
        ann(
            &[1],
            3,
            2,
            false,
            &[entry(5, &[1], Write, true), entry(2, &[1], Write, false)],
        ),
    ];
    let locks: [(&[u16], u32, Req); 3] = [
        (&[1], 1, Req::All),
        (&[2], 1, Req::All),
        (&[1, 4], 1, Req::All),
    ];
    let (a, out, _) = fed(5, AgentVariant::SEED, &locks, &infos);
    assert_eq!(surrenders(&out), [vec![1]]);
    let views: Vec<(Vec<u16>, u32, usize, bool)> = a
        .views()
        .map(|(i, w)| (i.path.keys().to_vec(), i.version, i.queue.len(), w))
        .collect();
    assert_eq!(
        views,
        [
            (vec![1], 3, 2, true),
            (vec![2], 2, 2, false),
            (vec![1, 4], 0, 0, true)
        ]
    );
    // Its first announcement, sent before the surrender, is not taken; the
    // acknowledgement is.
    let mut a = a;
    let before = ann(
        &[1, 4],
        4,
        5,
        false,
        &[entry(5, &[1], Write, true), entry(5, &[1, 4], Write, true)],
    );
    assert!(feed(&mut a, &before).contains(Rule::AwaitingAck));
    let ack = ann(
        &[1, 4],
        5,
        5,
        true,
        &[entry(5, &[1, 4], Write, true), entry(5, &[1], Write, false)],
    );
    assert!(feed(&mut a, &ack).contains(Rule::SurrenderAcked));
    assert_eq!(view_of(&a, &[1, 4]), Some((5, false)));
}

// transaction.rs, `Agent::step` (A3): after one acknowledgement, `v.awaiting > 0` → `<`: a
// view that two surrenders change waits for both acknowledgements. A5 holds [1, 5, 9] and
// [1, 7] (the queue of [1] shows both). A2 waits on [1, 5] behind A5, A5 waits for A2's
// [2]: A5 surrenders [1, 5], which changes [1]. Then A3 waits on [1, 7] behind A5, A5 waits
// for A3's [3]: A5 surrenders [1, 7], which changes [1] again.
#[test]
fn a_view_two_surrenders_change_waits_for_both_acknowledgements() {
    use LockMode::Write;
    let mut a = Agent::<3, 6, 6>::new(AgentId(5), false);
    let mut out = heapless::Vec::<AgentOutput<3, 6>, 300>::new();
    for k in [&[1, 5, 9][..], &[1, 7], &[2], &[3]] {
        a.step(lock_input(k, Write, 1, Req::All), &mut out).unwrap();
    }
    let hear = |a: &mut Agent<3, 6, 6>, i: LockInfo<3, 6>| {
        let mut out = heapless::Vec::<AgentOutput<3, 6>, 300>::new();
        a.step(AgentInput::Info(&i), &mut out).unwrap();
        surrenders(&out)
    };
    let mine = [
        entry(5, &[1, 5, 9], Write, true),
        entry(5, &[1, 7], Write, true),
    ];
    assert!(hear(&mut a, ann(&[1], 1, 5, false, &mine)).is_empty());
    let q15 = [
        entry(5, &[1, 5, 9], Write, true),
        entry(2, &[1, 5], Write, false),
    ];
    assert!(hear(&mut a, ann(&[1, 5], 2, 2, false, &q15)).is_empty());
    let q2 = [entry(2, &[2], Write, true), entry(5, &[2], Write, false)];
    assert_eq!(hear(&mut a, ann(&[2], 3, 5, false, &q2)), [vec![1, 5]]);
    let q17 = [
        entry(5, &[1, 7], Write, true),
        entry(3, &[1, 7], Write, false),
    ];
    assert!(hear(&mut a, ann(&[1, 7], 4, 3, false, &q17)).is_empty());
    let q3 = [entry(3, &[3], Write, true), entry(5, &[3], Write, false)];
    assert_eq!(hear(&mut a, ann(&[3], 5, 5, false, &q3)), [vec![1, 7]]);
    let view1 = |a: &Agent<3, 6, 6>| {
        a.views()
            .find(|(i, _)| i.path == p(&[1]))
            .map(|(i, w)| (i.version, w))
    };
    assert_eq!(view1(&a), Some((1, true)));
    // The first surrender's announcement of [1]: one acknowledgement of two.
    let after = [
        entry(5, &[1, 7], Write, true),
        entry(5, &[1, 5, 9], Write, true),
    ];
    let mut out = heapless::Vec::<AgentOutput<3, 6>, 300>::new();
    let r = a
        .step(AgentInput::Info(&ann(&[1], 6, 5, true, &after)), &mut out)
        .unwrap();
    assert!(r.contains(Rule::AwaitingAck) && !r.contains(Rule::Stored));
    assert_eq!(view1(&a), Some((1, true)));
    // The second's: the view is valid again.
    let r = a
        .step(AgentInput::Info(&ann(&[1], 8, 5, true, &after)), &mut out)
        .unwrap();
    assert!(r.contains(Rule::SurrenderAcked) && r.contains(Rule::Stored));
    assert_eq!(view1(&a), Some((8, false)));
}

// transaction.rs, `Agent::step`: a new lock while the agent has all it asked for puts it
// back to running (`status == HaveAll` → `!=`). With a queue already known that grants the
// new lock (here one heard before asking, which `step` accepts like any other), the lock is
// granted at once and the client hears `HaveAll` again.
#[test]
fn a_lock_granted_by_a_known_queue_is_reported_with_have_all_again() {
    use LockMode::Write;
    let mut a = Ag::new(AgentId(1), false);
    let mut out = AOut::new();
    a.step(lock_input(&[1], Write, 1, Req::All), &mut out)
        .unwrap();
    feed(
        &mut a,
        &ann(&[1], 1, 1, false, &[entry(1, &[1], Write, true)]),
    );
    feed(
        &mut a,
        &ann(&[2], 2, 1, false, &[entry(1, &[2], Write, true)]),
    );
    assert_eq!(a.status(), Status::HaveAll);
    out.clear();
    a.step(lock_input(&[2], Write, 1, Req::All), &mut out)
        .unwrap();
    assert!(out.contains(&AgentOutput::Granted {
        path: p(&[2]),
        mode: Write
    }));
    assert!(out.contains(&AgentOutput::HaveAll), "{out:?}");
    assert_eq!(a.status(), Status::HaveAll);
}
