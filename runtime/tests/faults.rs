//! Faults between real nodes on 127.0.0.1: a fault-injecting TCP proxy between every pair
//! of nodes cuts connections at random while clients lock and unlock, and a node that
//! restarts with fresh state. A checker (the demo's oracle) sees every hold between its
//! grant and its release and flags any overlap Table 2.1 forbids and any hold whose fencing
//! token is not above that of an earlier conflicting hold of its path that had ended; every
//! request must be granted (none lost) and every kernel message delivered exactly once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hilock::demo::Oracle;
use hilock::{Config, Error, Node, NodeAddr, Options};
use hilock_kernel::{Mode, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const SECRET: &[u8] = b"fault test secret";

/// A TCP proxy from one node to another that can cut its connections, after a stall
/// during which it throws away what it reads (data the sender believes sent is lost, as in
/// a socket buffer of a connection that breaks).
struct Proxy {
    addr: SocketAddr,
    stalled: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// New connections are refused until then (so a cut peer stays cut for a while).
    down_until: Arc<Mutex<Instant>>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let down_until = Arc::new(Mutex::new(Instant::now()));
        let stalled = Arc::new(AtomicBool::new(false));
        let (c, d, st) = (conns.clone(), down_until.clone(), stalled.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut a, _)) = l.accept().await else {
                    continue;
                };
                if Instant::now() < *d.lock().unwrap() {
                    continue; // dropped: refused
                }
                let Ok(mut b) = TcpStream::connect(target).await else {
                    continue;
                };
                let st = st.clone();
                let h = tokio::spawn(async move {
                    let (ar, aw) = a.split();
                    let (br, bw) = b.split();
                    let _ = tokio::join!(pipe(ar, bw, &st), pipe(br, aw, &st));
                });
                let mut v = c.lock().unwrap();
                v.retain(|h| !h.is_finished());
                v.push(h);
            }
        });
        Proxy {
            addr,
            stalled,
            conns,
            down_until,
            task,
        }
    }

    /// Throw away everything read from now until the cut.
    fn stall(&self) {
        self.stalled.store(true, Relaxed);
    }

    /// Cut every live connection and refuse new ones for `down`; how many were cut.
    fn cut(&self, down: Duration) -> usize {
        self.stalled.store(false, Relaxed);
        *self.down_until.lock().unwrap() = Instant::now() + down;
        let mut v = self.conns.lock().unwrap();
        let live = v.iter().filter(|h| !h.is_finished()).count();
        for h in v.drain(..) {
            h.abort();
        }
        live
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

/// Copy `r` to `w` until either ends; while `stalled`, what is read is thrown away.
async fn pipe(
    mut r: tokio::net::tcp::ReadHalf<'_>,
    mut w: tokio::net::tcp::WriteHalf<'_>,
    stalled: &AtomicBool,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.load(Relaxed) {
            continue;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `n` nodes where node i reaches node j through proxy `[i][j]`.
async fn proxied_cluster(n: usize, timeout: Duration) -> (Vec<Node>, Vec<Vec<Option<Proxy>>>) {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let real: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut proxies = Vec::new();
    for i in 0..n {
        let mut row = Vec::new();
        for (j, addr) in real.iter().enumerate() {
            row.push(if i == j {
                None
            } else {
                Some(Proxy::start(*addr).await)
            });
        }
        proxies.push(row);
    }
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let addrs = (0..n)
            .map(|j| NodeAddr {
                id: j as u16,
                addr: proxies[i][j].as_ref().map_or(real[j], |p| p.addr),
            })
            .collect();
        let mut c = Config::new("faults", SECRET.to_vec(), i as u16, addrs).unwrap();
        c.request_timeout = timeout;
        nodes.push(Node::start_on(c, l).await.unwrap());
    }
    (nodes, proxies)
}

async fn peer_state(node: &Node, peer: u16) -> (bool, String) {
    let s = node.status().await.unwrap();
    let p = s.peers.iter().find(|p| p.id == peer).unwrap();
    (p.connected, p.state.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_connection_cuts_lose_nothing_and_break_no_exclusion() {
    const N: usize = 3;
    const CUTS: u64 = 100;
    let (nodes, proxies) = proxied_cluster(N, Duration::from_secs(60)).await;
    let oracle = Arc::new(Oracle::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (invoked, granted, next) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut clients = tokio::task::JoinSet::new();
    for n in &nodes {
        for c in 0..4u64 {
            let (h, id) = (n.handle(), n.id());
            let (oracle, stop, invoked, granted, next) = (
                oracle.clone(),
                stop.clone(),
                invoked.clone(),
                granted.clone(),
                next.clone(),
            );
            clients.spawn(async move {
                let mut rng = StdRng::seed_from_u64(u64::from(id) * 5 + c);
                while !stop.load(Relaxed) {
                    let op = next.fetch_add(1, Relaxed);
                    let mut path = String::from("/f");
                    if rng.random_bool(0.7) {
                        path.push_str(&format!("/e{}", rng.random_range(0..4)));
                    }
                    let mode = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W]
                        [rng.random_range(0..5usize)];
                    invoked.fetch_add(1, Relaxed);
                    let g = match h.lock(&path, mode).await {
                        Ok(g) => g,
                        Err(e) => panic!("lost request: node {id} {path} {mode}: {e}"),
                    };
                    granted.fetch_add(1, Relaxed);
                    oracle.enter(op, id, &g);
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..500))).await;
                    oracle.exit(op);
                    drop(g);
                }
            });
        }
    }
    // The faults: stall a random pair's connection (what is sent meanwhile is lost) for
    // 0–30 ms, cut it and keep it down 60 ms; 20 ms after the cut both ends must show it
    // down.
    let mut rng = StdRng::seed_from_u64(99);
    let (mut cuts, mut shown_connected) = (0u64, Vec::new());
    let t0 = Instant::now();
    while cuts < CUTS {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "{cuts} cuts in 90 s"
        );
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
        let (i, j) = (rng.random_range(0..N), rng.random_range(0..N));
        let Some(p) = &proxies[i][j] else { continue };
        p.stall();
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
        let cut = p.cut(Duration::from_millis(60));
        if cut == 0 {
            continue;
        }
        cuts += cut as u64;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (connected, state) = peer_state(&nodes[i], j as u16).await;
        let incoming = nodes[j]
            .status()
            .await
            .unwrap()
            .peers
            .iter()
            .find(|p| p.id == i as u16)
            .unwrap()
            .incoming;
        if connected || state == "connected" || incoming {
            shown_connected.push(format!("{i}->{j}: {state} incoming {incoming}"));
        }
    }
    stop.store(true, Relaxed);
    let run = async {
        while let Some(r) = clients.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every request is served after the cuts");
    // Exactly once: at quiescence every message sent was delivered once.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (sent, delivered) = loop {
        let sent: u64 = nodes.iter().map(|n| n.stats().frames_sent).sum();
        let delivered: u64 = nodes.iter().map(|n| n.stats().frames_received).sum();
        if sent == delivered || Instant::now() > deadline {
            break (sent, delivered);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut resent = 0;
    let mut duplicates = 0;
    for n in &nodes {
        for p in n.status().await.unwrap().peers {
            resent += p.resent;
            duplicates += p.duplicates;
        }
        assert_eq!(
            n.stats().kernel_rejections,
            0,
            "no message refused by a kernel"
        );
    }
    eprintln!(
        "{} requests invoked, {} granted; {cuts} connections cut; {} pairs checked, {} fences \
         checked, {} violations; {sent} messages sent, {delivered} delivered, {resent} resent, \
         {duplicates} duplicates dropped; {} times a cut peer was shown connected",
        invoked.load(Relaxed),
        granted.load(Relaxed),
        oracle.checks(),
        oracle.fence_checks(),
        oracle.violations().len(),
        shown_connected.len()
    );
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert_eq!(
        invoked.load(Relaxed),
        granted.load(Relaxed),
        "no request lost"
    );
    assert!(granted.load(Relaxed) > 200);
    assert!(
        oracle.fence_checks() > 200,
        "fences compared with ended holds"
    );
    assert_eq!(sent, delivered, "every message delivered exactly once");
    assert!(resent > 10, "the cuts lost messages that had to be resent");
    assert_eq!(shown_connected, Vec::<String>::new());
    // Everything is idle at the end: no lock stuck.
    let t = Instant::now();
    loop {
        let mut busy = Vec::new();
        for n in &nodes {
            for l in n.status().await.unwrap().locks {
                if !l.is_idle() {
                    busy.push(format!("node {}: {l:?}", n.id()));
                }
            }
        }
        if busy.is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "stuck: {busy:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A path whose initial token holder is `holder` among `n` nodes.
fn path_rooted_at(prefix: &str, holder: u16, n: usize) -> String {
    (0..)
        .map(|i| format!("/{prefix}{i}"))
        .find(|p| hilock::wire::initial_holder(p, n) == NodeId(holder))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_with_fresh_state_is_refused_without_a_double_grant_or_a_storm() {
    const N: usize = 3;
    let mut listeners = Vec::new();
    for _ in 0..N {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let addrs: Vec<NodeAddr> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| NodeAddr {
            id: i as u16,
            addr: l.local_addr().unwrap(),
        })
        .collect();
    let cfg = |i: u16| {
        let mut c = Config::new("restart", SECRET.to_vec(), i, addrs.clone()).unwrap();
        c.request_timeout = Duration::from_secs(5);
        c
    };
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        nodes.push(Node::start_on(cfg(i as u16), l).await.unwrap());
    }
    // Node 0 takes W on a lock whose token starts at node 2: the token moves to node 0.
    let p = path_rooted_at("re", 2, N);
    let g = nodes[0].lock(&p, Mode::W).await.unwrap();
    let oracle = Oracle::default();
    oracle.enter(1, 0, &g);
    // Node 2 crashes and comes back with fresh state on the same address.
    let old = nodes.pop().unwrap();
    let addr2 = old.listen_addr();
    old.shutdown().await;
    let l = TcpListener::bind(addr2).await.unwrap();
    let fresh = Node::start_on(cfg(2), l).await.unwrap();
    // Its fresh state says it holds the token of `p`: it must not grant it.
    let t = Instant::now();
    let opts = Options {
        priority: 0,
        timeout: Some(Duration::from_secs(5)),
        nested: false,
    };
    match fresh.lock_with(&p, Mode::W, opts).await {
        Ok(g2) => {
            oracle.enter(2, 2, &g2);
            panic!("double grant: {:?}", oracle.violations());
        }
        Err(e @ Error::Refused { .. }) => {
            eprintln!("restarted node refused after {:?}: {e}", t.elapsed());
            assert!(t.elapsed() < Duration::from_secs(3), "refused at once: {e}");
            assert!(e.to_string().contains("restart the whole cluster"), "{e}");
        }
        Err(e) => panic!("expected a refusal, got {e}"),
    }
    // The old nodes refuse it too, and show it so; no storm of messages or connections.
    let t = Instant::now();
    loop {
        let (_, s0) = peer_state(&nodes[0], 2).await;
        let (_, s1) = peer_state(&nodes[1], 2).await;
        if s0.starts_with("refused") && s1.starts_with("refused") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{s0} / {s1}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before: Vec<_> = nodes.iter().map(|n| n.stats()).collect();
    let fresh_before = fresh.stats();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (n, b) in nodes.iter().zip(&before) {
        let s = n.stats();
        assert!(
            s.frames_sent - b.frames_sent == 0,
            "no messages to anyone: {s:?}"
        );
        assert!(
            s.rejected_connections - b.rejected_connections <= 2,
            "no connection storm: {s:?}"
        );
    }
    assert_eq!(fresh.stats().frames_sent, fresh_before.frames_sent);
    // The rest of the cluster keeps serving what does not need node 2.
    drop(g);
    oracle.exit(1);
    let q = path_rooted_at("ok", 1, N);
    let g = tokio::time::timeout(Duration::from_secs(5), nodes[0].lock(&q, Mode::W))
        .await
        .expect("served")
        .unwrap();
    drop(g);
    assert_eq!(oracle.violations(), Vec::<String>::new());
    fresh.shutdown().await;
}
