//! The ring engine (the Chord lock paper) on a loopback ring: six nodes serve locks under load from
//! twelve clients while two nodes join, one leaves gracefully and the primary of a held
//! lock is killed. The nodes run in this process as tasks; a kill aborts the node's task,
//! which drops (closes) every socket it has at once — what the operating system does to
//! the sockets of a process killed with SIGKILL — and sends nothing more.
//!
//! Checks: the demo's history checker ([`Oracle`]: every grant registered
//! after the client got it, every end before the client sends the unlock; an overlap of two
//! holds of one path is a violation) reports 0 violations; no lock is lost (the lock held
//! across the kill is recorded by its new primary and both replicas, a contender is refused
//! it, and after everybody unlocked no entry is left locked); every request is answered
//! within its bound; no server refused an input.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hilock_kernel::ring::{ClientId, NodeId, View};
use hilock_kernel::Mode;
use hilock_runtime::oracle::Oracle;
use hilock_runtime::ring::{key_of, ring, Membership, RingClient, RingNode, SLOTS};
use tokio::net::TcpListener;

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/ring_load.rs"]
mod ring_load;
use ring_load::{holders_of, Load, Run, HELD, HOLDER};

#[path = "support/procs.rs"]
mod procs;
use procs::Proc;

/// The tests of this file bind ports and hand free ports to child processes ("bound and
/// released; the child binds it again"). Run in parallel, a port one test released can be
/// taken by another test's listener before the child binds it (seen in CI: "Address already
/// in use", then "4 nodes connect" failed), so each test takes this lock first and they run
/// one at a time.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn slot(nodes: &[Option<RingNode>], n: NodeId) -> &RingNode {
    nodes[n.idx()].as_ref().expect("live node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_node_ring_joins_leave_and_kill_under_load_no_violation_no_lost_lock() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(90), run())
        .await
        .expect("the ring test ended within 90 s");
}

async fn run() {
    let t0 = Instant::now();
    // Slots 0..5 start; 6 and 7 join.
    let mut listeners = Vec::new();
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for (i, a) in addrs.iter_mut().enumerate().take(8) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        *a = Some(l.local_addr().unwrap());
        listeners.push((i as u16, l));
    }
    let addrs = Arc::new(addrs);
    let ml = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let membership = Membership::start(ml, 0b0011_1111).await.unwrap();
    let maddr = membership.addr();
    let mut nodes: Vec<Option<RingNode>> = (0..SLOTS).map(|_| None).collect();
    let mut joiners = Vec::new();
    for (i, l) in listeners {
        if i < 6 {
            nodes[i as usize] = Some(RingNode::start(i, l, addrs.clone(), maddr).await.unwrap());
        } else {
            joiners.push((i, l));
        }
    }
    let limit = Duration::from_secs(10);
    membership
        .wait_for(limit, |v| v.members == 0b0011_1111)
        .await
        .unwrap();

    // The lock held across everything, and the load: each client locks random paths,
    // holds 1–3 ms, unlocks.
    let Run {
        oracle,
        mut holder,
        mut contender,
        held_op,
        load,
        ..
    } = Run::start(&addrs, maddr, 0x9e37_79b9_7f4a_7c15).await;
    let Load {
        stop,
        errors,
        grants,
        refusals,
        clients: load,
        ..
    } = load;
    let phase = |what: &str| {
        println!(
            "{:>6.2} s  {what}: {} grants, {} refusals so far",
            t0.elapsed().as_secs_f64(),
            grants.load(Relaxed),
            refusals.load(Relaxed)
        )
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    phase("load running on 6 nodes");

    // Two joins.
    for (i, l) in joiners {
        nodes[i as usize] = Some(RingNode::start(i, l, addrs.clone(), maddr).await.unwrap());
        membership.join(i);
        let v = membership
            .wait_for(limit, |v| v.has(NodeId(i)))
            .await
            .unwrap();
        phase(&format!("node {i} joined, view {v:?}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // A graceful leave of a node that is not among the held lock's holders.
    let v = membership.view().0;
    let keep = holders_of(v, HELD);
    let leaver = (0..8u16)
        .map(NodeId)
        .find(|n| v.has(*n) && !keep.contains(n))
        .unwrap();
    membership.leave(leaver.0);
    let v = membership
        .wait_for(limit, |v| !v.has(leaver))
        .await
        .unwrap();
    let t = Instant::now();
    while !slot(&nodes, leaver).stopped() {
        assert!(
            t.elapsed() < limit,
            "the leaver stops once the change is done"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nodes[leaver.idx()] = None;
    phase(&format!("node {} left gracefully, view {v:?}", leaver.0));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Kill the primary of the held lock, under load.
    let v = membership.view().0;
    let victim = ring().lookup(v, key_of(HELD)).unwrap();
    let before = slot(&nodes, victim).snapshot();
    let victim_locks = before.slots.iter().filter(|s| s.holder.is_some()).count();
    assert!(
        before
            .slots
            .iter()
            .any(|s| s.key == key_of(HELD) && s.holder == Some(ClientId(HOLDER))),
        "the victim holds the lock: {before:?}"
    );
    nodes[victim.idx()].take().unwrap().kill();
    let v = membership
        .wait_for(limit, |v| !v.has(victim))
        .await
        .unwrap();
    phase(&format!(
        "node {} killed holding {victim_locks} locked entries, view {v:?}",
        victim.0
    ));
    assert_eq!(
        v.members.count_ones(),
        6,
        "a 6-node ring after 2 joins, 1 leave, 1 kill"
    );

    let bad = oracle.violations();
    assert!(
        bad.is_empty(),
        "{} exclusion violations up to the kill, the first: {:?}",
        bad.len(),
        &bad[..bad.len().min(3)]
    );
    // No lost lock: the new primary and both replicas record the holder; a contender is
    // refused.
    let now = holders_of(v, HELD);
    assert_eq!(now.len(), 3);
    for n in &now {
        let s = slot(&nodes, *n).snapshot();
        assert_eq!(
            s.slots
                .iter()
                .find(|x| x.key == key_of(HELD))
                .and_then(|x| x.holder),
            Some(ClientId(HOLDER)),
            "node {} records the held lock: {s:?}",
            n.0
        );
    }
    assert!(
        !contender.lock(HELD).await.unwrap(),
        "the lock held across the kill is refused to another client"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    phase("load after the kill");

    // Stop the load; every client ends.
    stop.store(true, Relaxed);
    let mut resent = 0;
    for h in load {
        let cl = tokio::time::timeout(limit, h)
            .await
            .expect("client ends")
            .unwrap();
        resent += cl.resent;
    }
    oracle.exit(held_op);
    holder.unlock(HELD).await.unwrap();
    assert!(contender.lock(HELD).await.unwrap(), "free after the unlock");
    contender.unlock(HELD).await.unwrap();

    let errs = errors.lock().unwrap().clone();
    assert!(errs.is_empty(), "requests not answered: {errs:#?}");
    // Nothing left locked on any live node, and no server refused an input.
    let mut left: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for n in nodes.iter().flatten() {
        let s = n.snapshot();
        assert!(s.errors.is_empty(), "node {}: {:?}", n.id(), s.errors);
        for x in s.slots.iter().filter(|x| x.holder.is_some()) {
            left.entry(n.id()).or_default().push(format!("{x:?}"));
        }
    }
    assert!(left.is_empty(), "entries left locked: {left:?}");
    let g = grants.load(Relaxed);
    println!(
        "{:.2} s: {g} grants, {} refusals, {resent} requests sent again, {} violations",
        t0.elapsed().as_secs_f64(),
        refusals.load(Relaxed),
        oracle.violations().len()
    );
    assert_eq!(
        oracle.violations(),
        Vec::<String>::new(),
        "exclusion violations"
    );
    assert!(g > 200, "the load ran: {g} grants");
}

/// The view of the first `n` slots.
fn first(n: u16) -> View {
    View {
        epoch: 0,
        members: ((1u32 << n) - 1) as u16,
    }
}

/// Load balance and movement of the runtime's placement (the kernel's `Ring::lookup` over
/// the 16 slots, the kernel's `hash` of each lock's top-level element): prints the tables
/// of `docs/benchmarks.md` ("Placement in the runtime's ring") and checks consistent
/// hashing's movement property — on a join only keys that the joiner now serves move, on a
/// leave only the leaver's keys move.
#[test]
fn placement_balance_and_movement() {
    const K: usize = 10_000;
    let r = ring();
    let keys: Vec<_> = (0..K).map(|i| key_of(&format!("/lock{i}/x"))).collect();
    println!("| nodes | keys | min | mean | max | max/mean |");
    println!("|---|---|---|---|---|---|");
    for n in [4u16, 8, 12, 16] {
        let v = first(n);
        let mut per = [0usize; SLOTS];
        for k in &keys {
            per[r.lookup(v, *k).unwrap().idx()] += 1;
        }
        let per = &per[..n as usize];
        let (min, max) = (*per.iter().min().unwrap(), *per.iter().max().unwrap());
        let mean = K as f64 / n as f64;
        assert_eq!(per.iter().sum::<usize>(), K);
        println!(
            "| {n} | {K} | {min} | {mean:.0} | {max} | {:.2} |",
            max as f64 / mean
        );
    }
    println!();
    println!("| change | K/n | primaries moved | replica sets changed (r = 2) |");
    println!("|---|---|---|---|");
    for n in [4u16, 8, 12, 15] {
        let (a, b) = (first(n), first(n).join(NodeId(n)));
        let joiner = NodeId(n);
        let (mut moved, mut sets) = (0, 0);
        for k in &keys {
            let (x, y) = (r.lookup(a, *k).unwrap(), r.lookup(b, *k).unwrap());
            if x != y {
                moved += 1;
                assert_eq!(y, joiner, "on a join, keys move only to the joiner");
            }
            if r.replicas(a, *k, 3) != r.replicas(b, *k, 3) {
                sets += 1;
            }
        }
        println!(
            "| join: {n} -> {} | {:.0} | {moved} | {sets} |",
            n + 1,
            K as f64 / (n + 1) as f64
        );
        // The leave of the same node, back to `a`.
        let mut moved_back = 0;
        for k in &keys {
            let (x, y) = (r.lookup(b, *k).unwrap(), r.lookup(a, *k).unwrap());
            if x != y {
                moved_back += 1;
                assert_eq!(x, joiner, "on a leave, only the leaver's keys move");
            }
        }
        assert_eq!(moved_back, moved);
        println!(
            "| leave: {} -> {n} | {:.0} | {moved_back} | {sets} |",
            n + 1,
            K as f64 / (n + 1) as f64
        );
    }
}

/// One workload, three engines, one run (`docs/benchmarks.md`, "Three engines, one
/// workload, one run"): 6 nodes on loopback, 12 clients (2 per node), each taking W on one
/// of 16 paths 100 times, holding 1 ms. Token engine: `Node::lock`; agents engine: a
/// transaction of one lock; ring engine: `RingClient::lock`, retried every 1 ms while
/// refused (the seed's lock does not queue). About 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn engine_comparison() {
    let _ports = PORTS.lock().await;
    const NODES: usize = 6;
    const CLIENTS: usize = 12;
    const EACH: usize = 100;
    const HOLD: Duration = Duration::from_millis(1);
    let path = |c: usize, i: usize| format!("/doc{}/part", (c * 7919 + i * 104_729) % 16);
    fn pct(v: &mut [f64], p: f64) -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    }
    let mut rows = Vec::new();
    let oracle = Arc::new(Oracle::default());
    let ops = Arc::new(AtomicU64::new(1));

    // Token engine.
    {
        let nodes = hilock_runtime::oracle::local_cluster(
            NODES,
            "cmp-token",
            b"a long shared secret",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before: u64 = nodes.iter().map(|n| n.stats().frames_sent).sum();
        let t = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let h = nodes[c % NODES].handle();
            let (oracle, ops) = (oracle.clone(), ops.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                for i in 0..EACH {
                    let p = path(c, i);
                    let s = Instant::now();
                    let g = h.lock(&p, Mode::W).await.unwrap();
                    lat.push(s.elapsed().as_secs_f64() * 1e3);
                    let op = ops.fetch_add(1, Relaxed);
                    oracle.register_path(op, c as u16, &p, Mode::W);
                    tokio::time::sleep(HOLD).await;
                    oracle.exit(op);
                    drop(g);
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let secs = t.elapsed().as_secs_f64();
        let msgs: u64 = nodes.iter().map(|n| n.stats().frames_sent).sum::<u64>() - before;
        rows.push(("token (the thesis)", secs, lat, msgs, "peer frames"));
    }
    // Agents engine (single home per top-level element).
    {
        let nodes = hilock_runtime::oracle::local_cluster(
            NODES,
            "cmp-agents",
            b"a long shared secret",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before: u64 = nodes.iter().map(|n| n.agent_stats().frames_sent).sum();
        let t = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let h = nodes[c % NODES].handle();
            let (oracle, ops) = (oracle.clone(), ops.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                for i in 0..EACH {
                    let p = path(c, i);
                    let s = Instant::now();
                    let mut tx = h.transaction(Default::default()).unwrap();
                    tx.lock(&p, hilock_runtime::agents::LockMode::Write)
                        .await
                        .unwrap();
                    lat.push(s.elapsed().as_secs_f64() * 1e3);
                    let op = ops.fetch_add(1, Relaxed);
                    oracle.register_path(op, c as u16, &p, Mode::W);
                    tokio::time::sleep(HOLD).await;
                    oracle.exit(op);
                    tx.commit().await.unwrap();
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let secs = t.elapsed().as_secs_f64();
        let msgs: u64 = nodes
            .iter()
            .map(|n| n.agent_stats().frames_sent)
            .sum::<u64>()
            - before;
        rows.push(("agents (Wiger's locks)", secs, lat, msgs, "peer frames"));
    }
    // Ring engine.
    {
        let (nodes, m, addrs) = ring_of(NODES).await;
        let count = |nodes: &[RingNode]| -> u64 {
            nodes
                .iter()
                .map(|n| {
                    let s = n.snapshot();
                    s.steps + s.replies
                })
                .sum()
        };
        let before = count(&nodes);
        let t = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let mut cl = RingClient::connect(c as u8 + 1, addrs.clone(), m.addr())
                .await
                .unwrap();
            let (oracle, ops) = (oracle.clone(), ops.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                for i in 0..EACH {
                    let p = path(c, i);
                    let s = Instant::now();
                    while !cl.lock(&p).await.unwrap() {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    lat.push(s.elapsed().as_secs_f64() * 1e3);
                    let op = ops.fetch_add(1, Relaxed);
                    oracle.register_path(op, c as u16, &p, Mode::W);
                    tokio::time::sleep(HOLD).await;
                    oracle.exit(op);
                    cl.unlock(&p).await.unwrap();
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let secs = t.elapsed().as_secs_f64();
        let msgs = count(&nodes) - before;
        rows.push((
            "ring (the Chord lock paper, r = 2)",
            secs,
            lat,
            msgs,
            "messages received (requests, replication, answers)",
        ));
    }
    let n = (CLIENTS * EACH) as f64;
    println!("| engine | accesses | wall s | accesses/s | acquire p50 ms | acquire p99 ms | messages per access | counted |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, secs, mut lat, msgs, what) in rows {
        let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
        println!(
            "| {name} | {n} | {secs:.2} | {:.0} | {p50:.2} | {p99:.2} | {:.1} | {what} |",
            n / secs,
            msgs as f64 / n
        );
    }
    assert_eq!(oracle.violations(), Vec::<String>::new());
}

/// The same ring as separate `hilock ring-node` processes (the membership service and the
/// clients in this process): 6 nodes under load, a join, a graceful leave (the process
/// exits by itself) and `kill -9` of the primary of a held lock. The history checker
/// reports 0 violations; the held lock survives the kill (refused to a contender, granted
/// after its holder's unlock); afterwards every path is free (a fresh client is granted
/// each); every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_node_processes_survive_kill_9_of_a_primary_under_load() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(90), processes())
        .await
        .expect("the process test ended within 90 s");
}

async fn processes() {
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for a in addrs.iter_mut().take(7) {
        // A port of the tests' own range (`ports::free_port`): the kernel's ephemeral
        // ports, bound and released one after the other, gave two slots one port.
        *a = Some(ports::free_addr());
    }
    let peers: Vec<String> = addrs.iter().flatten().map(|a| a.to_string()).collect();
    let peers = peers.join(",");
    let addrs = Arc::new(addrs);
    let membership = Membership::start(TcpListener::bind("127.0.0.1:0").await.unwrap(), 0b11_1111)
        .await
        .unwrap();
    let maddr = membership.addr();
    let spawn = |i: u16| {
        Proc(
            std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
                .args(["ring-node", "--id", &i.to_string(), "--peers", &peers])
                .args(["--membership", &maddr.to_string()])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("hilock ring-node starts"),
        )
    };
    let mut procs: Vec<Option<Proc>> = (0..7).map(|_| None).collect();
    for i in 0..6u16 {
        procs[i as usize] = Some(spawn(i));
    }
    let limit = Duration::from_secs(10);
    let t = Instant::now();
    while membership.up() != 0b11_1111 {
        assert!(
            t.elapsed() < limit,
            "6 nodes connect: {:b}",
            membership.up()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    membership.wait_for(limit, |_| true).await.unwrap();

    let mut run = Run::start(&addrs, maddr, 0x2545_f491_4f6c_dd1d).await;
    let grants = run.load.grants.clone();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // A join.
    procs[6] = Some(spawn(6));
    membership.join(6);
    membership
        .wait_for(limit, |v| v.has(NodeId(6)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A graceful leave: the process exits by itself once the change is complete.
    let v = membership.view().0;
    let keep = holders_of(v, HELD);
    let leaver = (0..7u16)
        .map(NodeId)
        .find(|n| v.has(*n) && !keep.contains(n))
        .unwrap();
    membership.leave(leaver.0);
    membership
        .wait_for(limit, |v| !v.has(leaver))
        .await
        .unwrap();
    let mut p = procs[leaver.idx()].take().unwrap();
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            assert!(st.success(), "the leaver exits cleanly: {st}");
            break;
        }
        assert!(t.elapsed() < limit, "the leaver exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // kill -9 of the held lock's primary, under load.
    let v = membership.view().0;
    let victim = ring().lookup(v, key_of(HELD)).unwrap();
    let before = grants.load(Relaxed);
    drop(procs[victim.idx()].take()); // SIGKILL and reap
    membership
        .wait_for(limit, |v| !v.has(victim))
        .await
        .unwrap();
    assert_eq!(membership.view().0.members.count_ones(), 5);
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across kill -9 is refused to another client"
    );
    ring_load::until_grants_pass(&grants, before, limit, "the kill").await;
    run.finish(limit, "processes").await;
    println!(
        "processes: victim node {}, leaver node {}",
        victim.0, leaver.0
    );
    assert!(grants.load(Relaxed) > 200);
}

/// A node cut off from its successor but not from the membership service (`docs/faults.md`,
/// "Ring engine"): `hilock ring-node` processes, slot 0's peer list gives its successor's
/// address as a port nobody listens on, so its beats and replica writes to the successor
/// are lost while the successor still reaches it and it still renews with the service. Its
/// successor keeps suspecting it; the service grants it no renewal while that lasts; its
/// lease runs out (not before 0.75 L: it renewed just before), it is removed like a crashed
/// node and exits by itself (status 0), and a key it was primary of is served (granted,
/// released) by the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_from_its_successor_only_is_removed_after_its_lease() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(60), cut_from_successor())
        .await
        .expect("the cut test ended within 60 s");
}

async fn cut_from_successor() {
    const LEASE: Duration = Duration::from_millis(1000);
    // Ports the child processes bind: from the tests' own range (`ports::free_addr`), which
    // no outgoing connection takes in between.
    let free = ports::free_addr;
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for a in addrs.iter_mut().take(4) {
        *a = Some(free());
    }
    let v0 = View {
        epoch: 0,
        members: 0b1111,
    };
    let cut = NodeId(0);
    let succ = ring().next(v0, cut).unwrap();
    let nowhere = free();
    let membership = Membership::start_with_lease(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        v0.members,
        LEASE,
    )
    .await
    .unwrap();
    let maddr = membership.addr();
    let mut procs: Vec<Proc> = (0..4u16)
        .map(|i| {
            let peers: Vec<String> = (0..4u16)
                .map(|j| match (NodeId(i), NodeId(j)) {
                    (a, b) if a == cut && b == succ => nowhere.to_string(),
                    _ => addrs[j as usize].unwrap().to_string(),
                })
                .collect();
            Proc(
                std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
                    .args(["ring-node", "--id", &i.to_string()])
                    .args(["--peers", &peers.join(",")])
                    .args(["--membership", &maddr.to_string()])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("hilock ring-node starts"),
            )
        })
        .collect();
    let limit = Duration::from_secs(10);
    let t = Instant::now();
    while membership.up() != 0b1111 {
        assert!(t.elapsed() < limit, "4 nodes connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = Instant::now();
    membership
        .wait_for(limit, |v| !v.has(cut))
        .await
        .expect("the node cut from its successor is removed");
    let took = t.elapsed();
    println!(
        "node {} cut from its successor {}: removed after {took:?}",
        cut.0, succ.0
    );
    assert!(
        took >= LEASE.mul_f64(0.75),
        "removed after {took:?}: before its lease ran out"
    );
    let mut p = procs.remove(cut.idx());
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            // It stopped on its own (its lease ran out): 75, as `hilock node` would.
            assert_eq!(st.code(), Some(75), "the cut node exits 75: {st}");
            break;
        }
        assert!(t.elapsed() < limit, "the cut node exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = (0..)
        .map(|k| format!("/cut{k}/x"))
        .find(|p| ring().lookup(v0, key_of(p)) == Some(cut))
        .unwrap();
    let mut c = RingClient::connect(1, Arc::new(addrs), maddr)
        .await
        .unwrap();
    c.limit = limit;
    assert!(c.lock(&path).await.unwrap(), "{path} is served again");
    c.unlock(&path).await.unwrap();
}

/// A ring of `n` nodes in this process (slots 0..n, its membership service), once every
/// one of them is a member: the nodes, the service and the slots' addresses.
async fn ring_of(n: usize) -> (Vec<RingNode>, Membership, Arc<Vec<Option<SocketAddr>>>) {
    let mut listeners = Vec::new();
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for a in addrs.iter_mut().take(n) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        *a = Some(l.local_addr().unwrap());
        listeners.push(l);
    }
    let addrs = Arc::new(addrs);
    let all = (1u16 << n) - 1;
    let membership = Membership::start(TcpListener::bind("127.0.0.1:0").await.unwrap(), all)
        .await
        .unwrap();
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        nodes.push(
            RingNode::start(i as u16, l, addrs.clone(), membership.addr())
                .await
                .unwrap(),
        );
    }
    membership
        .wait_for(Duration::from_secs(10), |v| v.members == all)
        .await
        .unwrap();
    (nodes, membership, addrs)
}

/// A one-node ring in this process (slot 0, its membership service): the node, the
/// service's address and the slots' addresses.
async fn one_node_ring() -> (RingNode, Membership, Arc<Vec<Option<SocketAddr>>>) {
    let (mut nodes, membership, addrs) = ring_of(1).await;
    (nodes.remove(0), membership, addrs)
}

/// A proxy to `to` that forwards everything a client sends and, while `mute` is set,
/// drops every whole frame the node sends back (the frames are length-delimited: a 4-byte
/// big-endian length, then the body) — a server that does not answer in time.
async fn muting_proxy(to: SocketAddr, mute: Arc<std::sync::atomic::AtomicBool>) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            let Ok(s) = tokio::net::TcpStream::connect(to).await else {
                return;
            };
            let (mut cr, mut cw) = c.into_split();
            let (mut sr, mut sw) = s.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut sw).await;
            });
            let mute = mute.clone();
            tokio::spawn(async move {
                loop {
                    let mut len = [0u8; 4];
                    if sr.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    if sr.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    if mute.load(Relaxed) {
                        continue;
                    }
                    if cw.write_all(&len).await.is_err() || cw.write_all(&body).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A request the server does not answer in time ends in `Timeout` within the client's
/// bound, and the next request on the same client is served normally (it used to be
/// refused at once as `Busy`: the kernel's client still waited for the timed-out one). The
/// timed-out lock was granted unseen: the same client's next lock of it is granted again
/// (its holder), and its unlock frees it for another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_serves_the_next_request_after_a_timeout() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(30), after_timeout())
        .await
        .expect("the timeout test ended within 30 s");
}

async fn after_timeout() {
    let (node, membership, addrs) = one_node_ring().await;
    let mute = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let proxy = muting_proxy(addrs[0].unwrap(), mute.clone()).await;
    let mut via: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    via[0] = Some(proxy);
    let mut c = RingClient::connect(1, Arc::new(via), membership.addr())
        .await
        .unwrap();
    let bound = Duration::from_millis(500);
    c.limit = bound;
    let t = Instant::now();
    let r = c.lock("/slow").await;
    assert!(
        matches!(r, Err(hilock_runtime::ring::ClientError::Timeout { .. })),
        "{r:?}"
    );
    assert!(t.elapsed() < bound * 3, "{:?}", t.elapsed());
    mute.store(false, Relaxed);
    let t = Instant::now();
    let r = c.lock("/next").await;
    assert!(matches!(r, Ok(true)), "the next request is served: {r:?}");
    assert!(t.elapsed() < bound, "{:?}", t.elapsed());
    assert!(matches!(c.lock("/slow").await, Ok(true)), "granted unseen");
    let mut other = RingClient::connect(2, addrs.clone(), membership.addr())
        .await
        .unwrap();
    assert!(!other.lock("/slow").await.unwrap());
    c.unlock("/slow").await.unwrap();
    c.unlock("/next").await.unwrap();
    assert!(other.lock("/slow").await.unwrap());
    assert!(
        node.snapshot().errors.is_empty(),
        "{:?}",
        node.snapshot().errors
    );
}

/// A node forgets a client's connection when it closes: 8 clients connect, each locks a
/// path, and the node keeps 8 answer connections and 8 more connection readers; once they
/// are dropped (their sockets closed) both return to what they were before. The locks of
/// the closed connections stay held (a lock belongs to the client's incarnation, not to a
/// connection; `docs/faults.md`, "Ring engine"): another client is refused them; a new
/// client with the same id (another incarnation) is refused them as `IdInUse`, its unlock
/// frees nothing, and its take-over (`RingClient::take_over`) followed by its unlock
/// releases them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_forgets_closed_client_connections_and_keeps_their_locks() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(30), forget_closed())
        .await
        .expect("the connection test ended within 30 s");
}

async fn forget_closed() {
    const N: u8 = 8;
    let (node, membership, addrs) = one_node_ring().await;
    let before = node.snapshot();
    assert_eq!(before.clients, 0);
    let mut clients = Vec::new();
    for id in 1..=N {
        let mut c = RingClient::connect(id, addrs.clone(), membership.addr())
            .await
            .unwrap();
        assert!(c.lock(&format!("/conn{id}")).await.unwrap());
        clients.push(c);
    }
    wait_snapshot(&node, "every client known", |s| {
        s.clients == N as usize && s.readers == before.readers + N as usize
    })
    .await;
    drop(clients);
    wait_snapshot(&node, "every closed connection forgotten", |s| {
        s.clients == 0 && s.readers == before.readers
    })
    .await;
    let mut other = RingClient::connect(100, addrs.clone(), membership.addr())
        .await
        .unwrap();
    for id in 1..=N {
        let path = format!("/conn{id}");
        assert!(!other.lock(&path).await.unwrap(), "{path} stays held");
        let mut same = RingClient::connect(id, addrs.clone(), membership.addr())
            .await
            .unwrap();
        assert!(
            matches!(
                same.lock(&path).await,
                Err(hilock_runtime::ring::ClientError::IdInUse { .. })
            ),
            "{path}: held by another process with id {id}"
        );
        same.unlock(&path).await.unwrap();
        assert!(
            !other.lock(&path).await.unwrap(),
            "{path}: another incarnation's unlock frees nothing"
        );
        assert!(same.take_over(&path).await.unwrap(), "{path} taken over");
        same.unlock(&path).await.unwrap();
        assert!(other.lock(&path).await.unwrap(), "{path} released");
        other.unlock(&path).await.unwrap();
    }
    assert!(node.snapshot().errors.is_empty());
}

/// Waits (at most 5 s) until `node`'s snapshot satisfies `ok`.
async fn wait_snapshot(
    node: &RingNode,
    what: &str,
    ok: impl Fn(&hilock_runtime::ring::Snapshot) -> bool,
) {
    let t = Instant::now();
    loop {
        let s = node.snapshot();
        if ok(&s) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: clients {}, readers {}",
            s.clients,
            s.readers
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// More distinct keys than a node's table holds, locked and released one after another,
/// are all granted: a three-node ring (r = 2: every node holds every key, as primary or
/// replica) serves 3 · `TABLE` distinct keys, each released entry reclaimed when a new
/// key needs its room (`RingServer::step`, "Reclaim"; `docs/engines/ring.md`, "Limits").
/// Before, every node refused the 65th key for ever ("lock table full").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_distinct_keys_than_a_table_holds_are_all_granted_one_after_another() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(60), many_keys())
        .await
        .expect("the many-keys test ended within 60 s");
}

async fn many_keys() {
    use hilock_runtime::ring::TABLE;
    let (nodes, membership, addrs) = ring_of(3).await;
    let mut c = RingClient::connect(1, addrs.clone(), membership.addr())
        .await
        .unwrap();
    c.limit = Duration::from_secs(2);
    let mut keys = std::collections::BTreeSet::new();
    let t = Instant::now();
    for i in 0.. {
        if keys.len() > 3 * TABLE {
            break;
        }
        // Placed by its first path element: one element per path, so distinct keys.
        let path = format!("/many{i}");
        keys.insert(key_of(&path));
        let granted = c.lock(&path).await;
        assert!(
            matches!(granted, Ok(true)),
            "{path} (distinct key {}): {granted:?}; node errors: {:?}",
            keys.len(),
            nodes
                .iter()
                .map(|n| n.snapshot().errors)
                .collect::<Vec<_>>()
        );
        c.unlock(&path).await.unwrap();
    }
    println!("{} distinct keys in {:?}", keys.len(), t.elapsed());
    for n in &nodes {
        let s = n.snapshot();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        assert!(s.slots.len() <= TABLE, "{}", s.slots.len());
    }
}

/// A replica whose table is full of held keys while the key's primary has room (four
/// nodes, r = 2: a key's entry is on its primary P and the next two members A and B).
/// Half a table of held keys whose primary is A and half of keys whose primary is E (the
/// member after B) fill A's table, and only half of P's and B's. A lock of a key of P is
/// then written at P and refused by A: P writes the key back free and the client gets
/// `ClientError::TableFull` at once, nothing held anywhere, no node error. Once one of
/// the held keys is released the key is granted. Before, A's refusal was an error of its
/// step that answered nothing: the lock waited out its bound, and the key answered Retry
/// for ever after (`RingServer::step`, "Full replicas"; `docs/engines/ring.md`,
/// "Limits").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_a_full_replica_refuses_ends_table_full_and_leaves_nothing_held() {
    let _ports = PORTS.lock().await;
    tokio::time::timeout(Duration::from_secs(60), full_replica())
        .await
        .expect("the full-replica test ended within 60 s");
}

async fn full_replica() {
    use hilock_runtime::ring::{ClientError, TABLE};
    let (nodes, membership, addrs) = ring_of(4).await;
    let v = View {
        epoch: 0,
        members: 0b1111,
    };
    let r = ring();
    let star = "/star";
    let p = r.lookup(v, key_of(star)).unwrap();
    let a = r.next(v, p).unwrap();
    let b = r.next(v, a).unwrap();
    let e = r.next(v, b).unwrap();
    let mut holder = RingClient::connect(1, addrs.clone(), membership.addr())
        .await
        .unwrap();
    holder.limit = Duration::from_secs(2);
    let mut held = Vec::new();
    let mut keys = std::collections::BTreeSet::from([key_of(star)]);
    for primary in [a, e] {
        let mut n = 0;
        for i in 0.. {
            if n == TABLE / 2 {
                break;
            }
            let path = format!("/fill{i}");
            let k = key_of(&path);
            if r.lookup(v, k) != Some(primary) || !keys.insert(k) {
                continue;
            }
            assert!(matches!(holder.lock(&path).await, Ok(true)), "{path}");
            held.push(path);
            n += 1;
        }
    }
    let slots = |n: NodeId| nodes[n.0 as usize].snapshot().slots.len();
    assert_eq!(slots(a), TABLE, "A is full");
    assert!(slots(p) < TABLE && slots(b) < TABLE, "P and B have room");
    let mut asker = RingClient::connect(2, addrs.clone(), membership.addr())
        .await
        .unwrap();
    asker.limit = Duration::from_secs(5);
    let t = Instant::now();
    let got = asker.lock(star).await;
    assert!(
        matches!(got, Err(ClientError::TableFull { key }) if key == key_of(star)),
        "{got:?}"
    );
    assert!(got.unwrap_err().to_string().contains("lock table full"));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "at once: {:?}",
        t.elapsed()
    );
    for n in &nodes {
        let s = n.snapshot();
        assert!(s.errors.is_empty(), "{:?}", s.errors);
        let star = s.slots.iter().find(|e| e.key == key_of(star));
        assert!(star.is_none_or(|e| e.holder.is_none()), "{star:?}");
    }
    holder.unlock(&held[0]).await.unwrap();
    assert!(
        matches!(asker.lock(star).await, Ok(true)),
        "granted once a key is free"
    );
    asker.unlock(star).await.unwrap();
}
