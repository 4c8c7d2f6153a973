//! Real nodes over TCP on 127.0.0.1: random hierarchical locking checked by the oracle,
//! timeouts that release late grants, a killed peer, and hostile connections.

#[path = "support/connected.rs"]
mod connected;
use connected::wait_connected;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hilock_kernel::{LockId, Mode, Msg, NodeId, ValueBlock, VALUE_LEN};
use hilock_runtime::oracle::{local_cluster, Oracle};
use hilock_runtime::wire::{self, Frame, Hello, Side, PROTOCOL_VERSION};
use hilock_runtime::{Config, Error, Node, NodeAddr, Options};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

const SECRET: &[u8] = b"test secret 0123";

/// Every lock on every node is idle (nothing held, pending or queued), within `wait`.
async fn assert_all_idle(nodes: &[Node], wait: Duration) {
    let t = tokio::time::Instant::now();
    loop {
        let mut busy = Vec::new();
        for n in nodes {
            for l in n.status().await.unwrap().locks {
                if !l.is_idle() {
                    busy.push(format!("node {}: {l:?}", n.id()));
                }
            }
        }
        if busy.is_empty() {
            return;
        }
        assert!(t.elapsed() < wait, "locks left busy: {busy:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A path `/{prefix}{i}` whose initial token holder is `holder` among `n` nodes.
fn path_rooted_at(prefix: &str, holder: u16, n: usize) -> String {
    (0..)
        .map(|i| format!("/{prefix}{i}"))
        .find(|p| wire::initial_holder(p, n) == NodeId(holder))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_2000_random_hierarchical_operations_satisfy_table_2_1() {
    let nodes = local_cluster(5, "rand", SECRET, Duration::from_secs(30))
        .await
        .unwrap();
    let oracle = Arc::new(Oracle::default());
    let next = Arc::new(AtomicU64::new(0));
    let upgrades = Arc::new(AtomicU64::new(0));
    const OPS: u64 = 2000;
    let mut tasks = tokio::task::JoinSet::new();
    // Two clients per node, so local sharing and local queues are exercised too.
    for n in &nodes {
        for c in 0..2u64 {
            let (h, id) = (n.handle(), n.id());
            let (oracle, next, upgrades) = (oracle.clone(), next.clone(), upgrades.clone());
            tasks.spawn(async move {
                let mut rng = StdRng::seed_from_u64(u64::from(id) * 7 + c);
                loop {
                    let op = next.fetch_add(1, Relaxed);
                    if op >= OPS {
                        return;
                    }
                    let depth = rng.random_range(1..=3);
                    let mut path = String::from("/r");
                    if depth >= 2 {
                        path.push_str(&format!("/a{}", rng.random_range(0..3)));
                    }
                    if depth >= 3 {
                        path.push_str(&format!("/b{}", rng.random_range(0..3)));
                    }
                    let mode = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W]
                        [rng.random_range(0..5usize)];
                    let mut g = h.lock(&path, mode).await.unwrap_or_else(|e| {
                        panic!("node {id}: {path} {mode}: {e}");
                    });
                    assert_eq!(g.mode(), mode);
                    assert_eq!(g.locks().count(), depth);
                    oracle.enter(op, id, &g);
                    if rng.random_bool(0.3) {
                        tokio::time::sleep(Duration::from_micros(rng.random_range(0..300))).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                    if mode == Mode::U && rng.random_bool(0.5) {
                        g.upgrade().await.unwrap();
                        assert_eq!(g.mode(), Mode::W);
                        oracle.change(op, id, &g);
                        upgrades.fetch_add(1, Relaxed);
                        tokio::task::yield_now().await;
                    }
                    oracle.exit(op);
                    drop(g);
                }
            });
        }
    }
    let run = async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("2000 operations finish within 3 minutes");
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert!(
        oracle.checks() > 1000,
        "the oracle saw overlapping holds: {}",
        oracle.checks()
    );
    assert!(upgrades.load(Relaxed) > 10, "upgrades exercised");
    assert_all_idle(&nodes, Duration::from_secs(10)).await;
    // Idle locks can still have their last releases on the wire: every frame sent must
    // arrive, within a bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (sent, received) = loop {
        let sent: u64 = nodes.iter().map(|n| n.stats().frames_sent).sum();
        let received: u64 = nodes.iter().map(|n| n.stats().frames_received).sum();
        if sent == received || tokio::time::Instant::now() > deadline {
            break (sent, received);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(sent, received, "every message arrived");
    assert!(sent > 1000, "the nodes talked: {sent}");
    for n in &nodes {
        let s = n.stats();
        assert_eq!(s.rejected_connections, 0);
        assert_eq!(s.kernel_rejections, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_request_is_cancelled_and_never_granted() {
    let nodes = local_cluster(3, "late", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let path = path_rooted_at("late", 0, 3);
    let held = nodes[0].lock(&path, Mode::W).await.unwrap();
    let opts = Options {
        priority: 0,
        timeout: Some(Duration::from_millis(200)),
        nested: false,
    };
    let e = nodes[1].lock_with(&path, Mode::R, opts).await.unwrap_err();
    match &e {
        Error::Timeout {
            path: p,
            disconnected,
            ..
        } => {
            assert_eq!(p, &path);
            assert!(disconnected.is_empty(), "{e}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The error says where the request stood: not "the lock is busy", but which node it
    // went to and that node's state; on the token node, who holds it here, in what mode,
    // and the caller's place in the queue.
    let text = e.to_string();
    assert!(text.contains("timed out"), "{e}");
    assert!(
        text.contains(&format!("{path} in R"))
            && text.contains("the token is at node 0")
            && text.contains("node 0 is connected"),
        "{e}"
    );
    let e = nodes[0].lock_with(&path, Mode::W, opts).await.unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("held at this node (node 0) in W by 1 local caller")
            && text.contains("queue position 1 at this node (0 local requests ahead)")
            && text.contains("queued here before it: node 1 for R")
            && !text.contains("connected: the lock is busy"),
        "{e}"
    );
    // Node 1's timed-out request was cancelled in the kernel (`spec/SPEC.md` 1.13); it
    // still waits in node 0's queue (above). When node 0 releases, node 1's kernel
    // releases its copy at once: no caller of node 1 is granted it, and node 2 gets W.
    let grants_1 = nodes[1].stats().grants;
    assert_eq!(nodes[1].stats().cancels, 1);
    drop(held);
    let g = tokio::time::timeout(Duration::from_secs(5), nodes[2].lock(&path, Mode::W))
        .await
        .expect("not leaked")
        .unwrap();
    drop(g);
    let s1 = nodes[1].stats();
    assert_eq!(
        (s1.grants, s1.abandoned_grants, s1.cancels),
        (grants_1, 0, 1),
        "no grant reaches node 1's callers after the cancel"
    );
    assert_eq!(nodes[0].stats().abandoned_grants, 0);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
    // The next request at node 1 is a new one, granted as usual.
    let g = tokio::time::timeout(Duration::from_secs(5), nodes[1].lock(&path, Mode::R))
        .await
        .expect("granted")
        .unwrap();
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_hierarchical_request_releases_its_ancestors() {
    let nodes = local_cluster(2, "cancel", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let g = nodes[0].lock("/db/t", Mode::W).await.unwrap();
    // Node 1 gets IW on /db, then waits for /db/t; dropping the future cancels it.
    let h = nodes[1].handle();
    let f = tokio::spawn(async move { h.lock("/db/t", Mode::R).await });
    // The cancel must find /db granted and /db/t pending: wait until node 1 shows that.
    let t = std::time::Instant::now();
    loop {
        let st = nodes[1].status().await.unwrap();
        if st
            .locks
            .iter()
            .any(|l| l.path == "/db/t" && l.pending == "R")
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "node 1's request for /db/t is pending: {:?}",
            st.locks
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f.abort();
    let _ = f.await;
    drop(g);
    // Nothing is left: W on /db works from node 0 (it conflicts with any IR left behind).
    let w = tokio::time::timeout(Duration::from_secs(5), nodes[0].lock("/db", Mode::W))
        .await
        .expect("not leaked")
        .unwrap();
    drop(w);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
    // The pending level (/db/t) was cancelled in the kernel (`spec/SPEC.md` 1.13), not
    // granted to node 1 and released afterwards.
    let s1 = nodes[1].stats();
    assert_eq!((s1.cancels, s1.abandoned_grants), (1, 0), "{s1:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peer_makes_dependent_requests_fail_with_a_clear_error() {
    let mut nodes = local_cluster(3, "kill", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(usize::from(n.id()), i);
    }
    let on2 = path_rooted_at("k", 2, 3);
    let on1 = path_rooted_at("k", 1, 3);
    // Everyone is connected first (the nodes dial each other at start).
    wait_connected(&nodes[0]).await;
    let dead = nodes.pop().unwrap();
    dead.shutdown().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let opts = Options {
        priority: 0,
        timeout: Some(Duration::from_millis(500)),
        nested: false,
    };
    let t = std::time::Instant::now();
    // The token of `on2` is at node 2.
    let e = nodes[0].lock_with(&on2, Mode::W, opts).await.unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3), "no hang");
    match &e {
        Error::Timeout { disconnected, .. } => assert_eq!(disconnected, &vec![2], "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let text = e.to_string();
    assert!(text.contains("no working connection to node 2"), "{text}");
    // Locks that do not depend on node 2 still work.
    let g = nodes[0].lock_with(&on1, Mode::W, opts).await.unwrap();
    drop(g);
    let s = nodes[0].status().await.unwrap();
    let p2 = s.peers.iter().find(|p| p.id == 2).unwrap();
    assert!(!p2.connected);
}

type Conn = Framed<TcpStream, LengthDelimitedCodec>;

async fn dial(addr: std::net::SocketAddr) -> Conn {
    let s = TcpStream::connect(addr).await.unwrap();
    Framed::new(s, LengthDelimitedCodec::new())
}

/// Handshake as node `from` with `secret`; returns the connection after `Welcome`.
async fn handshake(
    addr: std::net::SocketAddr,
    cluster: &str,
    from: u16,
    to: u16,
    secret: &[u8],
) -> Conn {
    let mut c = dial(addr).await;
    let nd = [7u8; 32];
    let hello = Hello::Dial {
        version: PROTOCOL_VERSION,
        cluster: cluster.into(),
        from,
        to,
        nonce: nd,
        incarnation: 77,
    };
    c.send(Bytes::from(wire::encode(&hello))).await.unwrap();
    let b = c.next().await.unwrap().unwrap();
    let Hello::Challenge {
        nonce: na,
        incarnation: ia,
        ..
    } = wire::decode::<Hello>(&b).unwrap()
    else {
        panic!("expected a challenge");
    };
    let tag = wire::Transcript {
        cluster,
        from,
        to,
        nd: &nd,
        na: &na,
        id: 77,
        ia,
    }
    .tag(secret, Side::Dial);
    c.send(Bytes::from(wire::encode(&Hello::Auth { tag })))
        .await
        .unwrap();
    c
}

/// Listeners on free ports for nodes `0..n` and their addresses; the last node's listener
/// is closed at once, so that a test can speak as (or pretend to be) that node.
async fn cluster_with_the_last_node_absent(n: u16) -> (Vec<TcpListener>, Vec<NodeAddr>) {
    let (mut ls, mut addrs) = (Vec::new(), Vec::new());
    for id in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(NodeAddr {
            id,
            addr: l.local_addr().unwrap(),
        });
        ls.push(l);
    }
    ls.pop();
    (ls, addrs)
}

/// Envelope number `seq`: a `Release` of `path` (its lock 0, owned mode Φ, epoch 0).
fn release_envelope(path: &str, seq: u64) -> Bytes {
    Bytes::from(wire::encode(&wire::Envelope {
        seq,
        frame: wire::Payload::Token(Frame {
            path: path.into(),
            msg: Msg::Release {
                lock: LockId(0),
                owned: Mode::Phi,
                epoch: 0,
            },
        }),
    }))
}

/// The node closes the connection within a few seconds.
async fn assert_closed(mut c: Conn) {
    let r = tokio::time::timeout(Duration::from_secs(7), async {
        loop {
            match c.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the node should close the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_bad_handshakes_are_refused_and_the_node_keeps_serving() {
    // A 3-node cluster with node 2 absent: the test speaks as (or pretends to be) node 2.
    let (mut ls, addrs) = cluster_with_the_last_node_absent(3).await;
    let (l1, l0) = (ls.pop().unwrap(), ls.pop().unwrap());
    let cfg = |id| Config::new("faults", SECRET.to_vec(), id, addrs.clone()).unwrap();
    let n0 = Node::start_on(cfg(0), l0).await.unwrap();
    let n1 = Node::start_on(cfg(1), l1).await.unwrap();
    let a0 = n0.listen_addr();

    // 1 MiB of random bytes.
    let mut s = TcpStream::connect(a0).await.unwrap();
    let mut junk = vec![0u8; 1 << 20];
    StdRng::seed_from_u64(42).fill(&mut junk[..]);
    let _ = s.write_all(&junk).await; // the node may close before reading it all
    assert_closed(Framed::new(s, LengthDelimitedCodec::new())).await;

    // A wrong secret.
    let c = handshake(a0, "faults", 2, 0, b"not the secret!!").await;
    assert_closed(c).await;

    // Wrong version, wrong cluster, unknown node, wrong addressee.
    for (version, cluster, from, to) in [
        (PROTOCOL_VERSION + 1, "faults", 2, 0),
        (PROTOCOL_VERSION, "other", 2, 0),
        (PROTOCOL_VERSION, "faults", 9, 0),
        (PROTOCOL_VERSION, "faults", 0, 0),
        (PROTOCOL_VERSION, "faults", 2, 1),
    ] {
        let mut c = dial(a0).await;
        let hello = Hello::Dial {
            version,
            cluster: cluster.into(),
            from,
            to,
            nonce: [1; 32],
            incarnation: 1,
        };
        c.send(Bytes::from(wire::encode(&hello))).await.unwrap();
        // Refused on the Dial itself: no challenge, the connection just closes.
        let r = tokio::time::timeout(Duration::from_secs(3), c.next()).await;
        assert!(
            matches!(r, Ok(None) | Ok(Some(Err(_)))),
            "{version} {cluster} {from}->{to}: closed before any challenge"
        );
    }

    // Authenticated, then a frame that does not decode.
    let mut c = handshake(a0, "faults", 2, 0, SECRET).await;
    let b = c.next().await.unwrap().unwrap();
    assert_eq!(
        wire::decode::<Hello>(&b).unwrap(),
        Hello::Welcome { delivered: 0 }
    );
    c.send(Bytes::from_static(&[0xff; 40])).await.unwrap();
    assert_closed(c).await;

    // Authenticated, then a message for an unknown lock id, or with a bad path.
    for (path, lock) in [("/x", 7), ("no-slash", 0)] {
        let mut c = handshake(a0, "faults", 2, 0, SECRET).await;
        let _welcome = c.next().await.unwrap().unwrap();
        let f = Frame {
            path: path.into(),
            msg: Msg::Release {
                lock: LockId(lock),
                owned: Mode::Phi,
                epoch: 0,
            },
        };
        let env = wire::Envelope {
            seq: 1,
            frame: wire::Payload::Token(f),
        };
        c.send(Bytes::from(wire::encode(&env))).await.unwrap();
        assert_closed(c).await;
    }

    // Authenticated, then a frame header announcing 100 KiB (over the 64 KiB limit):
    // closed on the header, without waiting for the body.
    let mut c = handshake(a0, "faults", 2, 0, SECRET).await;
    let _welcome = c.next().await.unwrap().unwrap();
    c.get_mut()
        .write_all(&(100u32 * 1024).to_be_bytes())
        .await
        .unwrap();
    assert_closed(c).await;

    let rejected = n0.stats().rejected_connections;
    assert!(
        rejected >= 11,
        "every bad connection was counted: {rejected}"
    );

    // Node 0 still serves a lock whose token is at node 1 (messages both ways).
    let p = path_rooted_at("alive", 1, 3);
    let g = tokio::time::timeout(Duration::from_secs(5), n0.lock(&p, Mode::W))
        .await
        .expect("served")
        .unwrap();
    drop(g);
    let g = tokio::time::timeout(Duration::from_secs(5), n1.lock(&p, Mode::R))
        .await
        .expect("served")
        .unwrap();
    drop(g);

    // The numbered channel, speaking as node 2 (run 77): message 1 is delivered, a second
    // message 1 is dropped as a duplicate, message 3 (a gap) closes the connection; the
    // next connection's Welcome names 1 as delivered.
    let release = |seq| release_envelope("/dup", seq);
    let peer2 = |s: hilock_runtime::Status| s.peers.into_iter().find(|p| p.id == 2).unwrap();
    let mut c = handshake(a0, "faults", 2, 0, SECRET).await;
    let b = c.next().await.unwrap().unwrap();
    assert_eq!(
        wire::decode::<Hello>(&b).unwrap(),
        Hello::Welcome { delivered: 0 }
    );
    // A pause after the Welcome: no heartbeat acknowledgement may come before the first
    // one is due (one HEARTBEAT period), so the next Ack is the one for message 1.
    tokio::time::sleep(Duration::from_millis(20)).await;
    c.send(release(1)).await.unwrap();
    c.send(release(1)).await.unwrap();
    // The acknowledgement comes within the ack delay.
    let b = tokio::time::timeout(Duration::from_secs(3), c.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        wire::decode::<wire::Ack>(&b).unwrap(),
        wire::Ack {
            delivered: 1,
            ping: 0
        }
    );
    // A probe (message number 0) is answered at once (well before the next heartbeat,
    // 200 ms) with its number, and delivers nothing (the counts below stay 1 and 1).
    let ping = |seq, p| {
        Bytes::from(wire::encode(&wire::Envelope {
            seq,
            frame: wire::Payload::Ping(p),
        }))
    };
    c.send(ping(0, 7)).await.unwrap();
    let t = std::time::Instant::now();
    loop {
        let b = tokio::time::timeout(Duration::from_millis(150), c.next())
            .await
            .expect("the probe is answered at once")
            .unwrap()
            .unwrap();
        let a = wire::decode::<wire::Ack>(&b).unwrap();
        if a.ping == 7 {
            assert_eq!(a.delivered, 1);
            break;
        }
        assert_eq!(a.ping, 0, "a heartbeat sent before the probe arrived");
        assert!(t.elapsed() < Duration::from_millis(150));
    }
    let t = std::time::Instant::now();
    loop {
        let p2 = peer2(n0.status().await.unwrap());
        assert!(p2.incoming);
        if (p2.frames_received, p2.duplicates) == (1, 1) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "{p2:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.send(release(3)).await.unwrap();
    assert_closed(c).await;
    let mut c = handshake(a0, "faults", 2, 0, SECRET).await;
    let b = c.next().await.unwrap().unwrap();
    assert_eq!(
        wire::decode::<Hello>(&b).unwrap(),
        Hello::Welcome { delivered: 1 }
    );
    // A probe must carry number 0: one with a message number closes the connection.
    c.send(ping(2, 9)).await.unwrap();
    assert_closed(c).await;
    // Another run of node 2 is refused, with a reason.
    let mut c = dial(a0).await;
    let hello = Hello::Dial {
        version: PROTOCOL_VERSION,
        cluster: "faults".into(),
        from: 2,
        to: 0,
        nonce: [3; 32],
        incarnation: 78,
    };
    c.send(Bytes::from(wire::encode(&hello))).await.unwrap();
    let b = c.next().await.unwrap().unwrap();
    let Hello::Challenge {
        nonce: na,
        incarnation: ia,
        ..
    } = wire::decode::<Hello>(&b).unwrap()
    else {
        panic!("expected a challenge");
    };
    let tag = wire::Transcript {
        cluster: "faults",
        from: 2,
        to: 0,
        nd: &[3; 32],
        na: &na,
        id: 78,
        ia,
    }
    .tag(SECRET, Side::Dial);
    c.send(Bytes::from(wire::encode(&Hello::Auth { tag })))
        .await
        .unwrap();
    let b = c.next().await.unwrap().unwrap();
    match wire::decode::<Hello>(&b).unwrap() {
        Hello::Refused { reason } => assert!(reason.contains("earlier run of node 2"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(peer2(n0.status().await.unwrap())
        .state
        .starts_with("refused"));
}

/// A dialer that gives a silent connection up connects again (`REDIAL_AFTER`): the node
/// takes the channel over on the new connection, from what it delivered, and closes the
/// connection it replaces at its next heartbeat instead of holding it until the kernel
/// gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_connection_from_a_peer_is_closed_at_the_next_heartbeat() {
    // A 2-node cluster with node 1 absent: the test speaks as node 1.
    let (mut ls, addrs) = cluster_with_the_last_node_absent(2).await;
    let l0 = ls.pop().unwrap();
    let n0 = Node::start_on(
        Config::new("redial", SECRET.to_vec(), 0, addrs).unwrap(),
        l0,
    )
    .await
    .unwrap();
    let a0 = n0.listen_addr();
    let release = |seq| release_envelope("/redial", seq);
    // The next acknowledgement of a message (heartbeats may come first).
    async fn acked(c: &mut Conn) -> u64 {
        loop {
            let b = tokio::time::timeout(Duration::from_secs(3), c.next())
                .await
                .expect("an acknowledgement")
                .expect("open")
                .unwrap();
            let a = wire::decode::<wire::Ack>(&b).unwrap();
            if a.delivered > 0 {
                return a.delivered;
            }
        }
    }
    let mut old = handshake(a0, "redial", 1, 0, SECRET).await;
    let b = old.next().await.unwrap().unwrap();
    assert_eq!(
        wire::decode::<Hello>(&b).unwrap(),
        Hello::Welcome { delivered: 0 }
    );
    old.send(release(1)).await.unwrap();
    assert_eq!(acked(&mut old).await, 1);
    // The old connection stays open, unread by the node's peer from now on (silent).
    let mut new = handshake(a0, "redial", 1, 0, SECRET).await;
    let b = new.next().await.unwrap().unwrap();
    assert_eq!(
        wire::decode::<Hello>(&b).unwrap(),
        Hello::Welcome { delivered: 1 }
    );
    let t = std::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            match old.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {} // a heartbeat sent before the new connection took over
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the replaced connection is still open after 1 s (heartbeats every 200 ms)"
    );
    let took = t.elapsed();
    new.send(release(2)).await.unwrap();
    assert_eq!(acked(&mut new).await, 2);
    eprintln!("the replaced connection was closed {took:?} after the new one was welcomed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_api_input_is_a_typed_error() {
    let nodes = local_cluster(1, "api", SECRET, Duration::from_secs(5))
        .await
        .unwrap();
    let n = &nodes[0];
    for p in ["", "/", "db", "/db//x", "/a/../b"] {
        assert!(
            matches!(n.lock(p, Mode::R).await, Err(Error::InvalidPath(_))),
            "{p:?}"
        );
    }
    assert_eq!(
        n.lock("/db", Mode::Phi).await.unwrap_err(),
        Error::InvalidMode
    );
    assert_eq!(n.id(), 0);
    // The intention rule: IR above IR and R, IW above U, IW and W.
    for (mode, above) in [
        (Mode::IR, Mode::IR),
        (Mode::R, Mode::IR),
        (Mode::U, Mode::IW),
        (Mode::IW, Mode::IW),
        (Mode::W, Mode::IW),
    ] {
        assert_eq!(hilock_runtime::intention(mode), above);
        let g = n.lock("/a/b/c", mode).await.unwrap();
        assert_eq!(
            g.locks().collect::<Vec<_>>(),
            [("/a", above), ("/a/b", above), ("/a/b/c", mode)]
        );
        assert_eq!((g.path(), g.mode()), ("/a/b/c", mode));
    }
    let mut g = n.lock("/db", Mode::R).await.unwrap();
    assert!(matches!(
        g.upgrade().await,
        Err(Error::NotUpgradable { mode: Mode::R, .. })
    ));
    drop(g);
    // One node: U and its upgrade complete locally.
    let mut g = n.lock("/db/x", Mode::U).await.unwrap();
    g.upgrade().await.unwrap();
    assert_eq!(
        g.locks().collect::<Vec<_>>(),
        [("/db", Mode::IW), ("/db/x", Mode::W)]
    );
    drop(g);
    assert_all_idle(&nodes, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_request_is_served_first() {
    let nodes = local_cluster(4, "prio", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let path = path_rooted_at("prio", 0, 4);
    let held = nodes[0].lock(&path, Mode::W).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiting = Vec::new();
    // Node 1 asks first at priority 1, then node 2 at priority 2, node 3 at priority 9.
    for (i, prio) in [(1usize, 1u8), (2, 2), (3, 9)] {
        let (h, tx) = (nodes[i].handle(), tx.clone());
        let p = path.clone();
        waiting.push(tokio::spawn(async move {
            let opts = Options {
                priority: prio,
                timeout: None,
                nested: false,
            };
            let g = h.lock_with(&p, Mode::W, opts).await.unwrap();
            tx.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(g);
        }));
        // The next request starts once this one is queued at node 0, the token holder:
        // they arrive in the order asked, and all wait there before the release.
        let queued = format!("{i}:W@{prio}");
        let t = std::time::Instant::now();
        loop {
            let st = nodes[0].status().await.unwrap();
            let l = st.locks.iter().find(|l| l.path == path);
            if l.is_some_and(|l| l.queue.contains(&queued)) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{queued} queued at node 0: {l:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    drop(held);
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(order, [3, 2, 1], "served by priority");
    for w in waiting {
        w.await.unwrap();
    }
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_is_capped_and_the_node_keeps_serving() {
    let nodes = local_cluster(2, "flood", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    wait_connected(&nodes[0]).await;
    let before = nodes[0].stats().rejected_connections;
    let n = hilock_runtime::token::MAX_PENDING_HANDSHAKES + 36;
    let mut silent = Vec::new();
    for _ in 0..n {
        silent.push(TcpStream::connect(nodes[0].listen_addr()).await.unwrap());
    }
    // The connections beyond the cap are closed at once.
    let t = std::time::Instant::now();
    while nodes[0].stats().rejected_connections < before + 36 {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "excess connections closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Meanwhile both nodes serve a lock whose token is at the other.
    let p = path_rooted_at("flood", 1, 2);
    let g = tokio::time::timeout(Duration::from_secs(3), nodes[0].lock(&p, Mode::W))
        .await
        .expect("served during the flood")
        .unwrap();
    drop(g);
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_holders_local_waiters_and_the_kernel_queue() {
    let nodes = local_cluster(2, "status", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let p = path_rooted_at("s", 0, 2);
    let g = nodes[0].lock(&p, Mode::W).await.unwrap();
    // A second caller on node 0 waits locally; node 1 waits in the kernel queue.
    let (h0, h1) = (nodes[0].handle(), nodes[1].handle());
    let (p0, p1) = (p.clone(), p.clone());
    let local = tokio::spawn(async move { drop(h0.lock(&p0, Mode::W).await.unwrap()) });
    let remote = tokio::spawn(async move { drop(h1.lock(&p1, Mode::R).await.unwrap()) });
    // (Each node shows the lock once a request for it has reached the node.)
    let lock_of = |s: hilock_runtime::Status| {
        s.locks
            .into_iter()
            .find(|l| l.path == p)
            .unwrap_or_else(|| hilock_runtime::token::LockStatus {
                path: p.clone(),
                token: false,
                parent: None,
                held: "Φ".into(),
                owned: "Φ".into(),
                pending: "Φ".into(),
                frozen: String::new(),
                queue: Vec::new(),
                holders: 0,
                waiters: 0,
            })
    };
    let t = std::time::Instant::now();
    loop {
        let l0 = lock_of(nodes[0].status().await.unwrap());
        let l1 = lock_of(nodes[1].status().await.unwrap());
        if l0.waiters == 1 && l0.queue == ["1:R@0"] && l1.waiters == 1 {
            assert!(l0.token && !l0.is_idle() && !l1.is_idle());
            assert_eq!((l0.held.as_str(), l0.holders), ("W", 1));
            assert_eq!(
                (l1.pending.as_str(), l1.holders, l1.parent),
                ("R", 0, Some(0))
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{l0:?} {l1:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(g);
    local.await.unwrap();
    remote.await.unwrap();
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// A guard's upgrade that timed out stays pending (Rule 7): when it completes with nobody
/// waiting for it, the node takes the hold back to U, so the guard (still U) and the node
/// agree and a reader on another node is admitted beside it; a later upgrade of the guard
/// waits for a pending one and gets W with a new fence. (Before, the node kept W behind
/// the guard's back: readers were refused, and the guard could neither write nor upgrade.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_upgrade_that_completes_later_leaves_the_guard_and_node_in_u() {
    let nodes = local_cluster(3, "late-upgrade", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let p = path_rooted_at("lu", 0, 3);
    let mut u = nodes[0].lock(&p, Mode::U).await.unwrap();
    let reader = nodes[1].lock(&p, Mode::R).await.unwrap();
    let e = u
        .upgrade_within(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    // The reader leaves: the pending upgrade completes, and nobody waits for it.
    drop(reader);
    let t = std::time::Instant::now();
    let r = loop {
        match nodes[2].try_lock(&p, Mode::R).await {
            Ok(r) => break r,
            Err(e) => assert!(
                t.elapsed() < Duration::from_secs(3),
                "node 0 kept W behind its U guard: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(u.mode(), Mode::U);
    let f = u.fence();
    // A new upgrade (after the reader on node 2 leaves) is granted with a larger fence.
    let leave = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(r);
    });
    u.upgrade_within(Duration::from_secs(5)).await.unwrap();
    assert_eq!(u.mode(), Mode::W);
    assert!(u.fence() > f);
    u.set_value([1; 32]).await.unwrap();
    leave.await.unwrap();
    drop(u);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// A timeout of `Duration::MAX` ("as long as it takes") is a timeout, not an overflow
/// of the clock: the lock and the try-lock are granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_of_duration_max_waits_and_does_not_panic() {
    let nodes = local_cluster(2, "forever", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let forever = hilock_runtime::Options {
        timeout: Some(Duration::MAX),
        ..Default::default()
    };
    let p = path_rooted_at("fv", 1, 2);
    drop(nodes[0].lock_with(&p, Mode::W, forever).await.unwrap());
    drop(nodes[0].try_lock_with(&p, Mode::R, forever).await.unwrap());
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// Two nodes started with different secrets: neither proves the secret to the other, and
/// each counts the other's answer as a rejected connection (not as a cut: the peer is
/// up, it is the file that is wrong); a request that needs the other node, or one that
/// waits for this node to be let in, times out with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_counts_as_rejected_on_both_nodes() {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for id in 0..2u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(NodeAddr {
            id,
            addr: l.local_addr().unwrap(),
        });
        listeners.push(l);
    }
    let l1 = listeners.pop().unwrap();
    let l0 = listeners.pop().unwrap();
    let n0 = Node::start_on(
        Config::new("sec", SECRET.to_vec(), 0, addrs.clone()).unwrap(),
        l0,
    )
    .await
    .unwrap();
    let n1 = Node::start_on(
        Config::new("sec", b"another secret entirely".to_vec(), 1, addrs).unwrap(),
        l1,
    )
    .await
    .unwrap();
    let t = std::time::Instant::now();
    while n0.stats().rejected_connections == 0 || n1.stats().rejected_connections == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "rejected {} and {}",
            n0.stats().rejected_connections,
            n1.stats().rejected_connections
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A request that needs the other node times out naming the reason, not "not reached".
    let p = path_rooted_at("sec", 1, 2);
    let opts = Options {
        timeout: Some(Duration::from_millis(300)),
        ..Options::default()
    };
    let e = n0
        .lock_with(&p, Mode::W, opts)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("wrong cluster secret"), "{e}");
    // So does one whose token is here: node 0 waits to be let in, and says why not.
    let p = path_rooted_at("sec", 0, 2);
    let e = n0
        .lock_with(&p, Mode::W, opts)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("let it in") && e.contains("wrong cluster secret"),
        "{e}"
    );
    n0.shutdown().await;
    n1.shutdown().await;
}

/// A second upgrade call of a guard whose first one timed out waits for that same pending
/// upgrade and is granted when the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upgrade_waits_for_the_pending_one() {
    let nodes = local_cluster(2, "reupgrade", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let p = path_rooted_at("ru", 0, 2);
    let mut u = nodes[0].lock(&p, Mode::U).await.unwrap();
    let reader = nodes[1].lock(&p, Mode::R).await.unwrap();
    assert!(u.upgrade_within(Duration::from_millis(200)).await.is_err());
    let leave = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(reader);
    });
    u.upgrade_within(Duration::from_secs(5)).await.unwrap();
    assert_eq!(u.mode(), Mode::W);
    leave.await.unwrap();
    drop(u);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_readers_and_a_guard_dropped_meanwhile_is_withdrawn_and_released() {
    let nodes = local_cluster(2, "upgrade", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let p = path_rooted_at("u", 0, 2);
    let reader = nodes[1].lock(&p, Mode::R).await.unwrap();
    // U is compatible with R (Table 2.1): granted while node 1 reads.
    let mut u = nodes[0].lock(&p, Mode::U).await.unwrap();
    // W is not: the upgrade waits for the reader.
    let e = u
        .upgrade_within(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(u.mode(), Mode::U);
    // The first upgrade is still pending in the protocol: a second call waits for it (and
    // times out the same way while the reader reads).
    assert!(matches!(
        u.upgrade_within(Duration::from_millis(100)).await,
        Err(Error::Timeout { .. })
    ));
    // Dropped while upgrading: the upgrade is cancelled in the kernel (`spec/SPEC.md`
    // 1.13: withdrawn at once, U kept) and U released, while node 1 still reads.
    drop(u);
    let t = std::time::Instant::now();
    loop {
        let s = nodes[0].status().await.unwrap();
        let l = s.locks.iter().find(|l| l.path == p).unwrap();
        if l.held == Mode::Phi.to_string() && l.pending == Mode::Phi.to_string() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "node 0 still holds {} with {} pending while the reader reads",
            l.held,
            l.pending
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(nodes[0].stats().cancels, 1);
    drop(reader);
    let w = tokio::time::timeout(Duration::from_secs(5), nodes[1].lock(&p, Mode::W))
        .await
        .expect("the upgraded lock was released")
        .unwrap();
    drop(w);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

fn within(ms: u64, nested: bool) -> Options {
    Options {
        priority: 0,
        timeout: Some(Duration::from_millis(ms)),
        nested,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_serves_many_compatible_local_holders_and_nesting() {
    let nodes = local_cluster(2, "many", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    wait_connected(&nodes[0]).await;
    // One client holds /db/a, then /db/b: both W under one IW on /db.
    let a = nodes[0]
        .lock_with("/db/a", Mode::W, within(2000, false))
        .await
        .unwrap();
    let b = nodes[0]
        .lock_with("/db/b", Mode::W, within(2000, false))
        .await
        .unwrap();
    assert_eq!(
        b.locks().collect::<Vec<_>>(),
        [("/db", Mode::IW), ("/db/b", Mode::W)]
    );
    // A parent, then a child path: R on /db2, then R on /db2/x (IR under R).
    let p = nodes[0]
        .lock_with("/db2", Mode::R, within(2000, false))
        .await
        .unwrap();
    let c = nodes[0]
        .lock_with("/db2/x", Mode::R, within(2000, false))
        .await
        .unwrap();
    // Two readers on one node overlap.
    let r1 = nodes[0]
        .lock_with("/x", Mode::R, within(2000, false))
        .await
        .unwrap();
    let r2 = nodes[0]
        .lock_with("/x", Mode::R, within(2000, false))
        .await
        .unwrap();
    // Table 2.1 between callers of one node: W on /db/a again waits, so does R on /db
    // (it conflicts with the IW this node holds), and W on /x behind the readers.
    for (path, mode) in [("/db/a", Mode::W), ("/db", Mode::R), ("/x", Mode::W)] {
        let e = nodes[0]
            .lock_with(path, mode, within(200, false))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{path} {mode}: {e}");
    }
    let st = nodes[0].status().await.unwrap();
    let x = st.locks.iter().find(|l| l.path == "/x").unwrap();
    assert_eq!((x.held.as_str(), x.holders), ("R", 2));
    let db = st.locks.iter().find(|l| l.path == "/db").unwrap();
    assert_eq!((db.held.as_str(), db.holders), ("IW", 2));
    drop((a, b, p, c, r1, r2));
    assert_all_idle(&nodes, Duration::from_secs(5)).await;

    // Nesting under contention. Node 1 waits for W on /n (token at node 0) while node 0
    // holds /n/a in W: a request of node 0 that is not nested must not overtake node 1
    // (it times out), a nested one shares the IW node 0 holds on /n.
    let n = path_rooted_at("n", 0, 2);
    let outer = nodes[0].lock(&format!("{n}/a"), Mode::W).await.unwrap();
    let h1 = nodes[1].handle();
    let n1 = n.clone();
    let remote = tokio::spawn(async move { h1.lock_with(&n1, Mode::W, within(5000, false)).await });
    let t = std::time::Instant::now();
    while !nodes[0]
        .status()
        .await
        .unwrap()
        .locks
        .iter()
        .any(|l| l.path == n && l.queue == ["1:W@0"])
    {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "node 1's request waits at node 0"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let e = nodes[0]
        .lock_with(&format!("{n}/b"), Mode::W, within(200, false))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    let inner = nodes[0]
        .lock_with(&format!("{n}/b"), Mode::W, within(2000, true))
        .await
        .unwrap();
    drop(inner);
    drop(outer);
    let g = remote.await.unwrap().unwrap();
    drop(g);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_local_holders_and_nested_guards_satisfy_table_2_1() {
    let nodes = local_cluster(3, "local", SECRET, Duration::from_secs(30))
        .await
        .unwrap();
    let oracle = Arc::new(Oracle::default());
    let next = Arc::new(AtomicU64::new(0));
    let nested_ops = Arc::new(AtomicU64::new(0));
    const OPS: u64 = 1500;
    let mut tasks = tokio::task::JoinSet::new();
    // Four clients per node; some hold a second, nested guard on a sibling path (taken in
    // a fixed order, so that clients cannot deadlock one another).
    for n in &nodes {
        for c in 0..4u64 {
            let (h, id) = (n.handle(), n.id());
            let (oracle, next, nested_ops) = (oracle.clone(), next.clone(), nested_ops.clone());
            tasks.spawn(async move {
                let mut rng = StdRng::seed_from_u64(u64::from(id) * 11 + c);
                loop {
                    let op = next.fetch_add(1, Relaxed);
                    if op >= OPS {
                        return;
                    }
                    let reads = rng.random_bool(0.7);
                    let pick = |rng: &mut StdRng| {
                        if reads {
                            [Mode::IR, Mode::R][rng.random_range(0..2usize)]
                        } else {
                            [Mode::U, Mode::IW, Mode::W][rng.random_range(0..3usize)]
                        }
                    };
                    let mode = pick(&mut rng);
                    let (path, second) = if rng.random_bool(0.15) {
                        ("/r".to_string(), None)
                    } else {
                        let i = rng.random_range(0..3);
                        let second = rng.random_bool(0.5).then(|| {
                            (
                                format!("/r/a{}", rng.random_range(i + 1..4)),
                                pick(&mut rng),
                            )
                        });
                        (format!("/r/a{i}"), second)
                    };
                    let g = h.lock(&path, mode).await.unwrap_or_else(|e| {
                        panic!("node {id}: {path} {mode}: {e}");
                    });
                    oracle.enter(op, id, &g);
                    let g2 = match second {
                        Some((p2, m2)) => {
                            let opts = Options {
                                priority: 0,
                                timeout: None,
                                nested: true,
                            };
                            let g2 = h.lock_with(&p2, m2, opts).await.unwrap_or_else(|e| {
                                panic!("node {id}: nested {p2} {m2} under {path} {mode}: {e}");
                            });
                            // Registered as another operation's hold: the oracle checks
                            // it against everything else, the outer guard's `/r` aside.
                            oracle.register_path(op + OPS, id, &p2, m2);
                            nested_ops.fetch_add(1, Relaxed);
                            Some(g2)
                        }
                        None => None,
                    };
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..400))).await;
                    oracle.exit(op + OPS);
                    drop(g2);
                    oracle.exit(op);
                    drop(g);
                }
            });
        }
    }
    let run = async {
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("1500 operations finish within 3 minutes");
    assert_eq!(oracle.violations(), Vec::<String>::new());
    eprintln!(
        "{OPS} operations, {} nested; oracle: {} pairs checked, {} of them on one node",
        nested_ops.load(Relaxed),
        oracle.checks(),
        oracle.same_node_checks()
    );
    assert!(
        oracle.same_node_checks() > 200,
        "callers of one node overlapped: {} of {} pairs",
        oracle.same_node_checks(),
        oracle.checks()
    );
    assert!(nested_ops.load(Relaxed) > 200);
    assert_all_idle(&nodes, Duration::from_secs(10)).await;
}

/// A storage service that checks fencing tokens the way `docs/engines/token.md` ("Fencing
/// tokens") says to: it keeps the largest fence it has accepted and refuses a write with a
/// lower one.
#[derive(Default)]
struct FencedStore {
    highest: u64,
    value: String,
}

impl FencedStore {
    fn write(&mut self, fence: u64, value: &str) -> Result<(), String> {
        if fence < self.highest {
            return Err(format!("fence {fence} < {}", self.highest));
        }
        self.highest = fence;
        self.value = value.to_string();
        Ok(())
    }
}

/// `Guard::fence` grows with every conflicting hold of a path across nodes (W after W on
/// another node, W after shared R holds, W after an upgrade), compatible holds may share
/// one, and a store that checks fences refuses the late write of a holder whose hold
/// ended (e.g. one paused past it), so it cannot overwrite the next holder's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_grow_with_every_conflicting_hold_and_a_store_refuses_a_stale_one() {
    let nodes = local_cluster(3, "fence", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let p = "/fenced/data";
    let mut store = FencedStore::default();
    let mut last = 0;
    let mut stale_guard_fence = None;
    // W holds on every node in turn, two in a row on each (the second granted by the
    // token node to itself again): each fence above the one before.
    for round in 0..2 {
        for n in nodes.iter().flat_map(|n| [n, n]) {
            let g = n.lock(p, Mode::W).await.unwrap();
            assert!(
                g.fence() > last,
                "node {} W hold fence {} not above {last}",
                n.id(),
                g.fence()
            );
            last = g.fence();
            store
                .write(g.fence(), &format!("n{} r{round}", n.id()))
                .unwrap();
            if stale_guard_fence.is_none() {
                stale_guard_fence = Some(g.fence());
            }
        }
    }
    // Shared R holds on two nodes at once: both above the last W; the next W above both.
    let r0 = nodes[0].lock(p, Mode::R).await.unwrap();
    let r1 = nodes[1].lock(p, Mode::R).await.unwrap();
    assert!(r0.fence() > last && r1.fence() > last, "{r0:?} {r1:?}");
    let top = r0.fence().max(r1.fence());
    drop((r0, r1));
    let mut u = nodes[2].lock(p, Mode::U).await.unwrap();
    assert!(u.fence() > top);
    let before = u.fence();
    u.upgrade().await.unwrap();
    assert!(u.fence() > before, "the W of an upgrade has a new fence");
    store.write(u.fence(), "upgraded").unwrap();
    drop(u);
    // The first holder, paused past its hold, wakes up and writes with its old fence.
    let err = store.write(stale_guard_fence.unwrap(), "late").unwrap_err();
    assert!(err.contains("fence"), "{err}");
    assert_eq!(store.value, "upgraded");
}

/// A node that stops right after its guards are dropped hands the released locks over to
/// the nodes waiting for them (`Node::shutdown` lets the kernel release and waits for the
/// peers' acknowledgements before it closes the connections): every waiter is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_hands_released_locks_over_to_waiting_nodes() {
    const LOCKS: usize = 20;
    let mut nodes = local_cluster(2, "handover", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    wait_connected(&nodes[0]).await;
    wait_connected(&nodes[1]).await;
    let paths: Vec<String> = (0..LOCKS).map(|i| format!("/h{i}")).collect();
    let mut guards = Vec::new();
    for p in &paths {
        guards.push(nodes[0].lock(p, Mode::W).await.unwrap());
    }
    let mut waiters = tokio::task::JoinSet::new();
    for p in &paths {
        let (h, p) = (nodes[1].handle(), p.clone());
        waiters.spawn(async move {
            h.lock_with(&p, Mode::W, within(3000, false))
                .await
                .map(drop)
                .map_err(|e| format!("{p}: {e}"))
        });
    }
    // Every request waits in node 0's queue.
    let t = std::time::Instant::now();
    loop {
        let st = nodes[0].status().await.unwrap();
        let queued = st
            .locks
            .iter()
            .filter(|l| l.queue.iter().any(|q| q.starts_with("1:W")))
            .count();
        if queued == LOCKS {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{queued} queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let n0 = nodes.remove(0);
    drop(guards);
    n0.shutdown().await;
    let mut errors = Vec::new();
    while let Some(r) = waiters.join_next().await {
        if let Err(e) = r.unwrap() {
            errors.push(e);
        }
    }
    assert_eq!(errors, Vec::<String>::new(), "every waiter is granted");
}

/// The lock status of `path` at `node` (it must know the path).
async fn lock_status(node: &Node, path: &str) -> hilock_runtime::token::LockStatus {
    node.status()
        .await
        .unwrap()
        .locks
        .into_iter()
        .find(|l| l.path == path)
        .unwrap_or_else(|| panic!("node {} knows {path}", node.id()))
}

/// Try-lock (`spec/SPEC.md` 1.12, `Handle::try_lock`): while node 0 holds W, node 1's try
/// of R is refused with `WouldBlock` within a second on loopback; node 0's queue and
/// frozen modes stay empty; when node 0 releases, nothing is granted to node 1 (no grant,
/// no abandoned grant, node 1 idle); a try of the free lock is then granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_try_lock_leaves_nothing_and_is_never_granted() {
    let nodes = local_cluster(3, "try", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    for n in &nodes {
        wait_connected(n).await;
    }
    let path = path_rooted_at("try", 0, 3);
    let held = nodes[0].lock(&path, Mode::W).await.unwrap();
    let t = std::time::Instant::now();
    let e = nodes[1]
        .try_lock(&path, Mode::R)
        .await
        .map(|_| ())
        .expect_err("refused");
    let took = t.elapsed();
    assert!(
        matches!(&e, Error::WouldBlock { path: p, mode: Mode::R } if *p == path),
        "{e:?}"
    );
    println!("try refused after {took:?}");
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    let at0 = lock_status(&nodes[0], &path).await;
    assert!(at0.queue.is_empty() && at0.frozen == "{}", "{at0:?}");
    assert!(lock_status(&nodes[1], &path).await.is_idle());
    let grants = nodes[1].stats().grants;
    assert_eq!(nodes[1].stats().would_block, 1);
    drop(held);
    // Node 2's W goes through node 0's release; node 1 gets nothing meanwhile.
    let g = tokio::time::timeout(Duration::from_secs(5), nodes[2].lock(&path, Mode::W))
        .await
        .expect("granted")
        .unwrap();
    drop(g);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
    let s1 = nodes[1].stats();
    assert_eq!((s1.grants, s1.abandoned_grants), (grants, 0));
    // The lock is free now: a try is granted (the token comes to node 1).
    let g = nodes[1].try_lock(&path, Mode::W).await.unwrap();
    assert!(lock_status(&nodes[1], &path).await.token);
    drop(g);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// A try-lock at a node that grants nothing yet is not "busy" (`Handle::try_lock_with`):
/// node 0 of two starts alone, so no majority has let it in; its try of a free path is
/// answered `NotServing` naming why, not `WouldBlock`, and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_at_a_node_not_let_in_yet_is_not_serving_rather_than_busy() {
    let (mut ls, addrs) = cluster_with_the_last_node_absent(2).await;
    let n0 = Node::start_on(
        Config::new("alone", SECRET.to_vec(), 0, addrs).unwrap(),
        ls.remove(0),
    )
    .await
    .unwrap();
    let e = n0
        .try_lock("/alone/x", Mode::R)
        .await
        .map(|_| ())
        .expect_err("not served");
    assert!(
        matches!(&e, Error::NotServing { path, reason }
            if path == "/alone" && reason.contains("majority")),
        "{e:?}"
    );
    assert!(!e.to_string().contains("busy"), "{e}");
    assert_eq!(n0.stats().would_block, 0);
    for p in ["/alone", "/alone/x"] {
        let s = n0.status().await.unwrap();
        assert!(
            s.locks.iter().filter(|l| l.path == p).all(|l| l.is_idle()),
            "{s:?}"
        );
    }
    n0.shutdown().await;
}

/// A hierarchical try-lock refused at the leaf releases the intention modes it took on
/// the ancestors; a local caller's try is refused at once where it would wait for another
/// local holder of the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hierarchical_or_local_try_lock_releases_what_it_took() {
    let nodes = local_cluster(2, "trytree", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let held = nodes[0].lock("/tt/a", Mode::W).await.unwrap();
    let e = nodes[1]
        .try_lock("/tt/a", Mode::W)
        .await
        .map(|_| ())
        .expect_err("refused");
    assert!(
        matches!(&e, Error::WouldBlock { path, .. } if path == "/tt/a"),
        "{e:?}"
    );
    // The intention mode on /tt was taken (IW is compatible with node 0's IW) and given
    // back: a W on /tt by node 1 would now wait only for node 0.
    let tt = lock_status(&nodes[1], "/tt").await;
    assert!(tt.holders == 0 && tt.held == "Φ", "{tt:?}");
    let e = nodes[0]
        .try_lock("/tt/a", Mode::R)
        .await
        .map(|_| ())
        .expect_err("local refusal");
    assert!(matches!(e, Error::WouldBlock { .. }), "{e:?}");
    // A try another /tt/b shares the local IW on /tt and is granted.
    let b = nodes[0].try_lock("/tt/b", Mode::W).await.unwrap();
    drop(b);
    drop(held);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
    assert_eq!(nodes[1].stats().would_block, 1);
    assert_eq!(nodes[0].stats().would_block, 1);
}

/// The history checker across a downgrade (`Oracle::downgrade`, registered before the
/// call): a W holder downgrades to R while a reader on another node waits; the reader is
/// granted during or right after the downgrade, and the oracle sees no overlap (R beside
/// R, IR beside IR) and checks the pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oracle_registered_before_a_downgrade_sees_no_overlap() {
    let nodes = local_cluster(2, "odown", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let oracle = Arc::new(Oracle::default());
    let root = path_rooted_at("od", 0, 2);
    let p = format!("{root}/x");
    let mut w = nodes[0].lock(&p, Mode::W).await.unwrap();
    oracle.enter(1, 0, &w);
    let reader = {
        let (n, p, o) = (nodes[1].handle(), p.clone(), oracle.clone());
        tokio::spawn(async move {
            let g = n.lock(&p, Mode::R).await.unwrap();
            o.enter(2, 1, &g);
            g
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    oracle.downgrade(1, 0, &w, Mode::R);
    w.downgrade(Mode::R).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("granted")
        .unwrap();
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert!(oracle.checks() >= 2, "{}", oracle.checks());
    oracle.exit(2);
    drop(r);
    oracle.exit(1);
    drop(w);
}

/// `spec/SPEC.md` 1.17 (`Guard::convert`): node 0 takes R on `/cN/x` first (it gets the
/// tokens), so with nobody else holding it converts to W in place — the ancestor `/cN`
/// IR → IW first — with a larger fence, and writes the value block that a reader on node 1
/// then reads. On a second path `/eN/y` node 0 again holds R with the tokens while node 1
/// holds an R copy: node 0's R → W is refused at once as busy, every level keeping its mode
/// and the path its fence, and so is node 1's (a copy holder cannot take W in place); once
/// node 1 has let go, node 0's succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_converts_r_to_w_in_place_or_is_told_busy_at_once() {
    let nodes = local_cluster(2, "convert", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let root = path_rooted_at("c", 0, 2);
    let p = format!("{root}/x");
    let mut g = nodes[0].lock(&p, Mode::R).await.unwrap();
    let fence = g.fence();
    g.try_convert(Mode::W).await.unwrap();
    assert_eq!(
        g.locks().collect::<Vec<_>>(),
        vec![(root.as_str(), Mode::IW), (p.as_str(), Mode::W)]
    );
    assert!(g.fence() > fence, "{} > {fence}", g.fence());
    g.set_value([9; VALUE_LEN]).await.unwrap();
    drop(g);
    let r = nodes[1].lock(&p, Mode::R).await.unwrap();
    assert_eq!(r.value().await.unwrap().get(), Some(&[9; VALUE_LEN]));
    drop(r);

    let q = format!("{}/y", path_rooted_at("e", 0, 2));
    let mut g = nodes[0].lock(&q, Mode::R).await.unwrap();
    let mut r = nodes[1].lock(&q, Mode::R).await.unwrap();
    let (before, fence) = (
        g.locks()
            .map(|(p, m)| (p.to_string(), m))
            .collect::<Vec<_>>(),
        g.fence(),
    );
    let started = tokio::time::Instant::now();
    let e = g.try_convert(Mode::W).await.unwrap_err();
    assert!(
        matches!(&e, Error::WouldBlock { path, mode: Mode::W } if *path == q),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered at once"
    );
    let after: Vec<_> = g.locks().map(|(p, m)| (p.to_string(), m)).collect();
    assert_eq!(
        after, before,
        "a refused conversion changes no level's mode"
    );
    assert_eq!(g.fence(), fence);
    let e = r.try_convert(Mode::W).await.unwrap_err();
    assert!(matches!(e, Error::WouldBlock { .. }), "{e}");
    assert_eq!(r.mode(), Mode::R);
    drop(r);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match g.try_convert(Mode::W).await {
            Ok(()) => break,
            Err(Error::WouldBlock { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("node 1's R was released: {e}"),
        }
    }
    assert_eq!(g.mode(), Mode::W);
}

/// `spec/SPEC.md` 1.14 in the runtime: a W holder on `/dN/x` (IW on `/dN`) downgrades to R
/// (IR on `/dN`, the intention mode of R) without releasing; a reader on the other node,
/// waiting meanwhile, is granted while the downgraded guard still holds R, whose fence is
/// unchanged. A downgrade to a mode that is not weaker is refused, and so is one of a U
/// guard whose upgrade waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_writer_lets_a_reader_on_another_node_in_while_it_still_reads() {
    let nodes = local_cluster(2, "downgrade", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let root = path_rooted_at("d", 0, 2);
    let p = format!("{root}/x");
    let mut w = nodes[0].lock(&p, Mode::W).await.unwrap();
    let fence = w.fence();
    assert_eq!(
        w.locks().collect::<Vec<_>>(),
        vec![(root.as_str(), Mode::IW), (p.as_str(), Mode::W)]
    );
    let reader = {
        let (n, p) = (nodes[1].handle(), p.clone());
        tokio::spawn(async move { n.lock(&p, Mode::R).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!reader.is_finished(), "R waits while W is held");
    assert!(matches!(
        w.downgrade(Mode::W).await,
        Err(Error::NotDowngradable {
            mode: Mode::W,
            to: Mode::W,
            ..
        })
    ));
    w.downgrade(Mode::R).await.unwrap();
    assert_eq!(
        w.locks().collect::<Vec<_>>(),
        vec![(root.as_str(), Mode::IR), (p.as_str(), Mode::R)]
    );
    assert_eq!(w.fence(), fence);
    let r = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the reader is granted once W is downgraded")
        .unwrap()
        .unwrap();
    assert_eq!((r.mode(), w.mode()), (Mode::R, Mode::R));
    drop(w);
    // A U guard whose upgrade waits for the reader cannot downgrade: refused, U kept.
    let mut u = nodes[0].lock(&p, Mode::U).await.unwrap();
    let e = u
        .upgrade_within(Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(matches!(
        u.downgrade(Mode::R).await,
        Err(Error::NotDowngradable { mode: Mode::U, .. })
    ));
    assert_eq!(u.mode(), Mode::U);
    drop(r);
    drop(u);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// `spec/SPEC.md` 1.15 in the runtime (three nodes on 127.0.0.1): a W guard on node 0
/// writes the lock value block and releases; the next R holder, on node 2, reads it, and
/// so does a reader on node 1 granted beside it. Before the first write a holder reads the
/// initial block (all zero, valid). Only a W guard writes: an R guard and a U guard are
/// refused with `Error::NotWriter`; the U guard writes once upgraded, and the next reader
/// reads that value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_written_under_w_is_read_by_the_next_reader_on_another_node() {
    let nodes = local_cluster(3, "value", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let root = path_rooted_at("v", 0, 3);
    let p = format!("{root}/x");
    let mut w = nodes[0].lock(&p, Mode::W).await.unwrap();
    assert_eq!(w.value().await.unwrap(), ValueBlock::INITIAL);
    let mut v = [0u8; VALUE_LEN];
    v[..5].copy_from_slice(b"hello");
    w.set_value(v).await.unwrap();
    assert_eq!(w.value().await.unwrap().get(), Some(&v));
    drop(w);
    let mut r2 = nodes[2].lock(&p, Mode::R).await.unwrap();
    assert_eq!(r2.value().await.unwrap().get(), Some(&v));
    let r1 = nodes[1].lock(&p, Mode::R).await.unwrap();
    assert_eq!(r1.value().await.unwrap().get(), Some(&v));
    assert!(matches!(
        r2.set_value([1; VALUE_LEN]).await,
        Err(Error::NotWriter { mode: Mode::R, .. })
    ));
    drop(r1);
    drop(r2);
    let mut u = nodes[1].lock(&p, Mode::U).await.unwrap();
    assert!(matches!(
        u.set_value([2; VALUE_LEN]).await,
        Err(Error::NotWriter { mode: Mode::U, .. })
    ));
    assert_eq!(u.value().await.unwrap().get(), Some(&v));
    u.upgrade().await.unwrap();
    u.set_value([2; VALUE_LEN]).await.unwrap();
    drop(u);
    let r0 = nodes[0].lock(&p, Mode::R).await.unwrap();
    assert_eq!(r0.value().await.unwrap().get(), Some(&[2; VALUE_LEN]));
    drop(r0);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// `spec/SPEC.md` 1.16, `Guard::blocking`: node 0 holds W; node 1's R request waits for it,
/// and node 0's guard is told (R, priority 0) — also when it asks after the notification
/// came. Once the guard is dropped, node 1 is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_w_holder_is_told_when_a_reader_on_another_node_waits() {
    let nodes = local_cluster(2, "blocking", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let root = path_rooted_at("b", 0, 2);
    let p = format!("{root}/x");
    let w = nodes[0].lock(&p, Mode::W).await.unwrap();
    let reader = {
        let (n, p) = (nodes[1].handle(), p.clone());
        tokio::spawn(async move { n.lock(&p, Mode::R).await })
    };
    let told = tokio::time::timeout(Duration::from_secs(5), w.blocking())
        .await
        .expect("the W holder is told that R waits")
        .unwrap();
    assert_eq!((told.mode, told.prio), (Mode::R, 0));
    // Asked again: the hold was already told, so it resolves at once.
    let again = tokio::time::timeout(Duration::from_millis(500), w.blocking())
        .await
        .expect("a notification already told resolves at once")
        .unwrap();
    assert_eq!(again.mode, Mode::R);
    assert!(!reader.is_finished(), "the reader waits while W is held");
    drop(w);
    let r = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    drop(r);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// `spec/SPEC.md` 1.16: nobody conflicts — node 0 holds R and node 1 is granted R beside
/// it — so `Guard::blocking` on either does not resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_notification_while_nobody_conflicts() {
    let nodes = local_cluster(2, "noblocking", SECRET, Duration::from_secs(10))
        .await
        .unwrap();
    let root = path_rooted_at("nb", 0, 2);
    let p = format!("{root}/x");
    let r0 = nodes[0].lock(&p, Mode::R).await.unwrap();
    let r1 = nodes[1].lock(&p, Mode::R).await.unwrap();
    for g in [&r0, &r1] {
        assert!(
            tokio::time::timeout(Duration::from_millis(300), g.blocking())
                .await
                .is_err(),
            "a compatible reader is no waiter"
        );
    }
    drop(r0);
    drop(r1);
    assert_all_idle(&nodes, Duration::from_secs(5)).await;
}

/// A timeout that names a peer without a working connection says what becomes of that
/// peer's tokens: with etcd recovery the survivors take them back once its lease ends;
/// without, the protocol cannot (it said "cannot" with recovery on too).
#[test]
fn a_timeout_with_a_silent_peer_says_whether_recovery_takes_its_tokens_back() {
    let timeout = |recovers| Error::Timeout {
        path: "/t".into(),
        mode: Mode::W,
        after: Duration::from_millis(1200),
        disconnected: vec![0],
        recovers,
        waiting: String::new(),
    };
    let with = timeout(true).to_string();
    assert!(
        with.contains("with etcd recovery the survivors take its tokens back")
            && !with.contains("cannot take back"),
        "{with}"
    );
    let without = timeout(false).to_string();
    assert!(without.contains("cannot take back the tokens"), "{without}");
}
