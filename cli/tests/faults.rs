//! Faults between real nodes on 127.0.0.1: a fault-injecting TCP proxy between every pair
//! of nodes cuts connections at random while clients lock and unlock, and a node that
//! restarts with fresh state. A checker (the demo's oracle) sees every hold between its
//! grant and its release and flags any overlap Table 2.1 forbids and any hold whose fencing
//! token is not above that of an earlier conflicting hold of its path that had ended; every
//! request must be granted (none lost) and every kernel message delivered exactly once.
//! Every node records its kernel steps (`record`), and each run ends with `hilock
//! trace-check` on the records: what the nodes did replays through the kernel.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/records.rs"]
mod records;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hilock_kernel::{Mode, NodeId};
use hilock_runtime::oracle::Oracle;
use hilock_runtime::{Config, Error, Node, NodeAddr, Options};
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
    /// Connections let through to the target so far.
    passed: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let down_until = Arc::new(Mutex::new(Instant::now()));
        let stalled = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(AtomicU64::new(0));
        let (c, d, st, pa) = (
            conns.clone(),
            down_until.clone(),
            stalled.clone(),
            passed.clone(),
        );
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
                // Checked again under the lock `cut` drains: a connection being set up
                // when the cut comes is refused too, not missed by it.
                let mut v = c.lock().unwrap();
                if Instant::now() < *d.lock().unwrap() {
                    continue;
                }
                pa.fetch_add(1, Relaxed);
                let st = st.clone();
                let h = tokio::spawn(async move {
                    let (ar, aw) = a.split();
                    let (br, bw) = b.split();
                    let _ = tokio::join!(pipe(ar, bw, &st), pipe(br, aw, &st));
                });
                v.retain(|h| !h.is_finished());
                v.push(h);
            }
        });
        Proxy {
            addr,
            stalled,
            conns,
            down_until,
            passed,
            task,
        }
    }

    /// Throw away everything read from now until the cut.
    fn stall(&self) {
        self.stalled.store(true, Relaxed);
    }

    /// Cut every live connection and refuse new ones until [`Proxy::heal_at`]; how many
    /// were cut.
    fn cut(&self) -> usize {
        self.stalled.store(false, Relaxed);
        *self.down_until.lock().unwrap() = Instant::now() + Duration::from_secs(3600);
        let mut v = self.conns.lock().unwrap();
        let live = v.iter().filter(|h| !h.is_finished()).count();
        for h in v.drain(..) {
            h.abort();
        }
        live
    }

    /// Let new connections through again from `t` on.
    fn heal_at(&self, t: Instant) {
        *self.down_until.lock().unwrap() = t;
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

/// `n` nodes where node i reaches node j through proxy `[i][j]`; each records its kernel
/// steps in `record/node-<i>.jsonl` (`hilock trace-check`).
async fn proxied_cluster(
    n: usize,
    timeout: Duration,
    record: &std::path::Path,
) -> (Vec<Node>, Vec<Vec<Option<Proxy>>>) {
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
        c.record = Some(record.join(format!("node-{i}.jsonl")));
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
    const N: usize = 5;
    const CUTS: u64 = 100;
    let records = tempfile::tempdir().unwrap();
    let (nodes, proxies) = proxied_cluster(N, Duration::from_secs(60), records.path()).await;
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
    // 0–30 ms (one in eight times also for node i's `status`, which must not show j
    // connected: the connection is open but j cannot answer through it), cut it and keep it down at least 60 ms; 20 ms after the cut, while the cut
    // is still in force (the proxy lets nothing through until both ends have been asked),
    // both ends must show it down. (The cut is held until then because `status` probes
    // peers and can take longer than the 60 ms: a peer that has really reconnected by the
    // time its flags are read is connected, not a lie; the WIP version of this test failed
    // only that way — each time > 60 ms after the cut, with the proxy having let the new
    // connection through.)
    let mut rng = StdRng::seed_from_u64(99);
    let (mut cuts, mut shown_connected) = (0u64, Vec::new());
    let (mut checks_took, mut silent_checks) = (Duration::ZERO, 0);
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
        if rng.random_ratio(1, 8) {
            // Silently cut (the connection open, everything sent on it lost): no closed
            // socket tells node i, only the unanswered probe of `status` does.
            let (connected, state) = peer_state(&nodes[i], j as u16).await;
            silent_checks += 1;
            if connected || state == "connected" {
                shown_connected.push(format!("{i}->{j} while stalled: {state}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
        let cut = p.cut();
        let cut_at = Instant::now();
        let passed = p.passed.load(Relaxed);
        if cut == 0 {
            p.heal_at(cut_at + Duration::from_millis(60));
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
        assert_eq!(
            p.passed.load(Relaxed),
            passed,
            "the cut {i}->{j} was in force while both ends were asked"
        );
        checks_took = checks_took.max(cut_at.elapsed());
        if connected || state == "connected" || incoming {
            shown_connected.push(format!(
                "{i}->{j}: {state} incoming {incoming}, {:?} after the cut",
                cut_at.elapsed()
            ));
        }
        p.heal_at(cut_at + Duration::from_millis(60));
    }
    eprintln!(
        "the longest check of a cut ended {checks_took:?} after it; {silent_checks} checks while \
         a connection was stalled"
    );
    assert!(
        silent_checks >= 5,
        "{silent_checks} checks of a stalled connection"
    );
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
    // Trace validation: across the cuts, the stalls and the resends, every node's kernel
    // steps replay through the kernel in the harness, each message delivered once, in
    // order, with the recorded outputs and the properties after every step.
    let files: Vec<std::path::PathBuf> = (0..N)
        .map(|i| records.path().join(format!("node-{i}.jsonl")))
        .collect();
    let summary = hilock_runtime::token::trace::check(&files)
        .expect("the records read")
        .unwrap_or_else(|r| panic!("{r}"));
    eprintln!("{summary}");
    assert!(summary.stopped.is_empty(), "{summary}");
    assert_eq!(summary.in_flight, 0, "{summary}");
    // Read again once every lock is idle: a release can follow the moment the counts
    // above were equal (a grant to a caller that gave up is released at once).
    let sent_at_end: u64 = nodes.iter().map(|n| n.stats().frames_sent).sum();
    assert_eq!(summary.messages, sent_at_end, "{summary}");
}

/// A path whose initial token holder is `holder` among `n` nodes.
fn path_rooted_at(prefix: &str, holder: u16, n: usize) -> String {
    (0..)
        .map(|i| format!("/{prefix}{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, n) == NodeId(holder))
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
    // The port is free once the old node's sockets are gone, but the other tests of this
    // file open and cut many connections meanwhile, and an outgoing one may take the
    // freed port as its source port for a moment (seen once in CI as AddrInUse): retry
    // for a bounded time.
    let bound = Instant::now() + Duration::from_secs(5);
    let l = loop {
        match TcpListener::bind(addr2).await {
            Ok(l) => break l,
            Err(e) if Instant::now() < bound => {
                eprintln!("rebinding {addr2}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{addr2} still in use 5 s after the shutdown: {e}"),
        }
    };
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

// ---------------------------------------------------------------- node processes

/// `hilock node` processes on 127.0.0.1 (one config file, client sockets in a temp dir),
/// for the faults that need a process: SIGSTOP/SIGCONT and SIGKILL with a restart.
struct Procs {
    dir: tempfile::TempDir,
    file: std::path::PathBuf,
    kids: Vec<Option<std::process::Child>>,
    /// Node `i` runs in network namespace `netns[i]` (empty: the test's own).
    netns: Vec<String>,
}

impl Procs {
    fn start(n: usize, timeout_ms: u64) -> Procs {
        // Ports of the tests' own range: a port bound and released here could be taken as
        // the local end of an outgoing connection before the child binds it.
        let addrs = (0..n).map(|_| ports::free_addr()).collect::<Vec<_>>();
        Self::start_at(&addrs, Vec::new(), timeout_ms)
    }

    /// Nodes listening on `addrs`, node `i` in namespace `netns[i]` if given.
    fn start_at(addrs: &[SocketAddr], netns: Vec<String>, timeout_ms: u64) -> Procs {
        let dir = tempfile::tempdir().unwrap();
        let mut toml = format!(
            "cluster = \"procs\"\nsecret = \"process fault secret\"\nrequest_timeout_ms = {timeout_ms}\n\
             client = \"{}\"\nrecord = \"{}\"\n",
            dir.path().join("n{id}.sock").display(),
            dir.path().join("node-{id}.jsonl").display()
        );
        for (id, a) in addrs.iter().enumerate() {
            toml.push_str(&format!("[[nodes]]\nid = {id}\naddr = \"{a}\"\n"));
        }
        let file = dir.path().join("cluster.toml");
        std::fs::write(&file, toml).unwrap();
        let mut p = Procs {
            dir,
            file,
            kids: (0..addrs.len()).map(|_| None).collect(),
            netns,
        };
        for id in 0..addrs.len() {
            p.spawn(id);
        }
        p
    }

    fn socket(&self, id: usize) -> std::path::PathBuf {
        self.dir.path().join(format!("n{id}.sock"))
    }

    fn spawn(&mut self, id: usize) {
        let _ = std::fs::remove_file(self.socket(id));
        let mut cmd = match self.netns.get(id) {
            // `ip netns exec` executes the node in place (same pid).
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_hilock")]);
                c
            }
            None => std::process::Command::new(env!("CARGO_BIN_EXE_hilock")),
        };
        let child = cmd
            .args(["node", "--config"])
            .arg(&self.file)
            .args(["--id", &id.to_string()])
            .env("RUST_LOG", "hilock=error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.kids[id] = Some(child);
        let t = Instant::now();
        while !self.socket(id).exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "node {id} starts");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pid(&self, id: usize) -> i32 {
        self.kids[id].as_ref().unwrap().id() as i32
    }

    /// Send `sig` (`STOP`, `CONT`) to node `id` with kill(1).
    fn signal(&self, id: usize, sig: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid(id).to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {}", self.pid(id));
    }

    /// Stops every node with SIGTERM (a node releases what it holds and exits; each record
    /// line is written when its step is taken), then validates the records the nodes wrote
    /// (`record` in the configuration) with `hilock trace-check`: its exit code and its
    /// output. A node that has not exited 10 s after the signal is killed (its record then
    /// ends where it was).
    fn stop_and_check(&mut self) -> (Option<i32>, String) {
        records::terminate(self.kids.iter_mut().flatten());
        let out = records::trace_check(&records::record_files(self.dir.path(), self.kids.len()));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }

    /// SIGKILL node `id` and reap it.
    fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.kids[id].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in self.kids.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The node's status over its client socket (`None` if it does not answer in 2 s).
async fn proc_status(socket: &std::path::Path) -> Option<serde_json::Value> {
    let req = hilock_runtime::client::Request::Status;
    let (r, _) = tokio::time::timeout(
        Duration::from_secs(2),
        hilock_runtime::client::request(socket, &req),
    )
    .await
    .ok()?
    .ok()?;
    r.status
}

async fn frames_sent(socket: &std::path::Path) -> u64 {
    proc_status(socket)
        .await
        .map_or(0, |s| s["stats"]["frames_sent"].as_u64().unwrap_or(0))
}

/// What the clients of a process workload saw.
#[derive(Default)]
struct Tally {
    invoked: AtomicU64,
    granted: AtomicU64,
    errors: Mutex<Vec<(Instant, usize, String)>>,
    /// Longest time a request took to be answered (granted or failed), in ms.
    longest_ms: AtomicU64,
}

/// Clients (`per_node` per node) that lock random paths under `/w` over the client sockets
/// until `stop`, registering each hold (with the fence of the reply) with `oracle`.
fn process_clients(
    procs: &Procs,
    per_node: u64,
    timeout_ms: u64,
    oracle: &Arc<Oracle>,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinSet<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for node in 0..procs.kids.len() {
        for c in 0..per_node {
            let socket = procs.socket(node);
            let (oracle, tally, stop, next) =
                (oracle.clone(), tally.clone(), stop.clone(), next.clone());
            set.spawn(async move {
                let mut rng = StdRng::seed_from_u64(node as u64 * 31 + c);
                while !stop.load(Relaxed) {
                    let op = next.fetch_add(1, Relaxed);
                    let mut path = String::from("/w");
                    if rng.random_bool(0.7) {
                        path.push_str(&format!("/e{}", rng.random_range(0..4)));
                    }
                    let mode = ["IR", "R", "U", "IW", "W"][rng.random_range(0..5usize)];
                    let req = hilock_runtime::client::Request::Lock {
                        path: path.clone(),
                        mode: mode.into(),
                        priority: 0,
                        timeout_ms: Some(timeout_ms),
                        nested: false,
                        try_lock: false,
                    };
                    tally.invoked.fetch_add(1, Relaxed);
                    let t = Instant::now();
                    let answer = tokio::time::timeout(
                        Duration::from_millis(timeout_ms + 3000),
                        hilock_runtime::client::request(&socket, &req),
                    )
                    .await;
                    tally
                        .longest_ms
                        .fetch_max(t.elapsed().as_millis() as u64, Relaxed);
                    let (reply, stream) = match answer {
                        Err(_) => panic!("node {node}: no answer within the timeout + 3 s"),
                        Ok(Err(e)) => {
                            tally.errors.lock().unwrap().push((Instant::now(), node, e));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        Ok(Ok(x)) => x,
                    };
                    if !reply.ok {
                        let e = reply.error.unwrap_or_default();
                        tally.errors.lock().unwrap().push((Instant::now(), node, e));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    tally.granted.fetch_add(1, Relaxed);
                    let locks = reply.locks.unwrap_or_default();
                    let fence = reply.fence.expect("a grant carries its fence");
                    for (k, l) in locks.iter().enumerate() {
                        let (p, m) = l.rsplit_once(':').unwrap();
                        let m = Mode::parse(m).unwrap();
                        if k + 1 == locks.len() {
                            oracle.register_fenced(op, node as u16, p, m, fence);
                        } else {
                            oracle.register_path(op, node as u16, p, m);
                        }
                    }
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..1500))).await;
                    oracle.exit(op);
                    drop(stream);
                }
            });
        }
    }
    set
}

/// A node stopped with SIGSTOP for 1.5 s under load and continued: no violation (overlap
/// or fence order), no request lost (all wait it out: the timeout is longer), no storm of
/// frames while it is stopped, and the cluster goes on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigstopped_node_resumes_without_violation_loss_or_storm() {
    const TIMEOUT_MS: u64 = 20_000;
    let mut procs = Procs::start(3, TIMEOUT_MS);
    let (oracle, tally, stop) = (
        Arc::new(Oracle::default()),
        Arc::new(Tally::default()),
        Arc::new(AtomicBool::new(false)),
    );
    let mut clients = process_clients(&procs, 3, TIMEOUT_MS, &oracle, &tally, &stop);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let live = [procs.socket(0), procs.socket(2)];
    let (f0, g0) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        tally.granted.load(Relaxed),
    );
    procs.signal(1, "STOP");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (f1, g1) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        tally.granted.load(Relaxed),
    );
    // While node 1 is stopped, peers are shown not connected (not answering).
    let s0 = proc_status(&live[0]).await.expect("node 0 answers");
    let p1 = s0["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == 1)
        .unwrap()
        .clone();
    procs.signal(1, "CONT");
    let (frames_paused, grants_paused) = (f1 - f0, g1 - g0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Relaxed);
    let run = async {
        while let Some(r) = clients.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(40), run)
        .await
        .expect("every client finishes after SIGCONT");
    let mut frames = 0;
    for i in 0..3 {
        frames += frames_sent(&procs.socket(i)).await;
    }
    let (invoked, granted) = (tally.invoked.load(Relaxed), tally.granted.load(Relaxed));
    eprintln!(
        "SIGSTOP 1.5 s: {invoked} requests, {granted} granted, errors {:?}; {} pairs and {} fences \
         checked, {} violations; {frames} frames in all ({:.1} per grant); while stopped: \
         {frames_paused} frames by the other nodes, {grants_paused} grants; node 0 showed node 1 \
         as {}; longest wait {} ms",
        tally.errors.lock().unwrap().iter().map(|e| &e.2).collect::<Vec<_>>(),
        oracle.checks(),
        oracle.fence_checks(),
        oracle.violations().len(),
        frames as f64 / granted.max(1) as f64,
        p1["state"],
        tally.longest_ms.load(Relaxed),
    );
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert!(tally.errors.lock().unwrap().is_empty(), "no request lost");
    assert_eq!(invoked, granted, "no request lost");
    assert!(granted > 100 && oracle.fence_checks() > 50);
    assert_eq!(
        p1["connected"], false,
        "a stopped peer is not shown connected"
    );
    // No storm: the stopped node costs no more frames than the grants made meanwhile.
    assert!(
        frames_paused <= 50 + 20 * grants_paused,
        "{frames_paused} frames while a node was stopped ({grants_paused} grants)"
    );
    assert!(
        frames <= 30 * granted,
        "{frames} frames for {granted} grants"
    );
    // What the nodes did is a behaviour of the kernel (`docs/verification.md`, "Trace
    // validation").
    let (code, out) = procs.stop_and_check();
    eprintln!("{out}");
    assert_eq!(code, Some(0), "{out}");
}

/// A node killed with SIGKILL under load and restarted at once with fresh state: it is
/// refused and grants nothing (no double grant: the oracle sees every hold, with fences),
/// requests that needed it fail with a clear error within their timeout, the others go
/// on, and there is no storm of frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_node_restarted_under_load_causes_no_double_grant_or_storm() {
    const TIMEOUT_MS: u64 = 3_000;
    let mut procs = Procs::start(3, TIMEOUT_MS);
    let (oracle, tally, stop) = (
        Arc::new(Oracle::default()),
        Arc::new(Tally::default()),
        Arc::new(AtomicBool::new(false)),
    );
    let mut clients = process_clients(&procs, 3, TIMEOUT_MS, &oracle, &tally, &stop);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before_kill = tally.granted.load(Relaxed);
    let killed_at = Instant::now();
    procs.kill(2);
    procs.spawn(2);
    // Let the survivors notice and the workload run against the restarted node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let live = [procs.socket(0), procs.socket(1)];
    let (f0, fresh0, g0) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        frames_sent(&procs.socket(2)).await,
        tally.granted.load(Relaxed),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (f1, fresh1, g1) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        frames_sent(&procs.socket(2)).await,
        tally.granted.load(Relaxed),
    );
    stop.store(true, Relaxed);
    let run = async {
        while let Some(r) = clients.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("every client finishes");
    let errors = tally.errors.lock().unwrap().clone();
    let first_error = errors
        .iter()
        .filter(|e| e.1 != 2)
        .map(|e| e.0.duration_since(killed_at))
        .min();
    let fresh_errors: Vec<&String> = errors.iter().filter(|e| e.1 == 2).map(|e| &e.2).collect();
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for e in &errors {
        let k = if e.2.contains("serves no lock") {
            "refused (restarted node)"
        } else if e.2.contains("restarted with fresh state") {
            "peer restarted"
        } else if e.2.contains("timed out") {
            "timeout"
        } else if e.1 == 2 {
            "connection to the killed node"
        } else {
            "other"
        };
        *kinds.entry(k.into()).or_default() += 1;
    }
    eprintln!(
        "SIGKILL + restart: {} requests, {} granted ({before_kill} before the kill), errors {kinds:?}; \
         first error at a survivor {first_error:?} after the kill; {} pairs and {} fences checked, \
         {} violations; over 2 s after the restart: {} frames by the survivors for {} grants, {} \
         by the restarted node; longest answer {} ms",
        tally.invoked.load(Relaxed),
        tally.granted.load(Relaxed),
        oracle.checks(),
        oracle.fence_checks(),
        oracle.violations().len(),
        f1 - f0,
        g1 - g0,
        fresh1 - fresh0,
        tally.longest_ms.load(Relaxed),
    );
    assert_eq!(oracle.violations(), Vec::<String>::new(), "no double grant");
    // At node 2: the killed process's clients see their connection go, the new run's
    // are refused.
    let unexpected: Vec<&&String> = fresh_errors
        .iter()
        .filter(|e| {
            ![
                "serves no lock",
                "cannot reach",
                "closed the connection",
                "Connection reset",
            ]
            .iter()
            .any(|k| e.contains(k))
        })
        .collect();
    assert_eq!(
        unexpected,
        Vec::<&&String>::new(),
        "the restarted node grants nothing"
    );
    assert!(
        fresh_errors.iter().any(|e| e.contains("serves no lock")),
        "the restarted node refuses its clients"
    );
    let others: Vec<_> = errors
        .iter()
        .filter(|e| e.1 != 2)
        .filter(|e| {
            !["serves no lock", "restarted with fresh state", "timed out"]
                .iter()
                .any(|k| e.2.contains(k))
        })
        .map(|e| (e.1, e.2.clone()))
        .collect();
    assert_eq!(others, Vec::new(), "every error names its cause");
    assert!(
        tally.longest_ms.load(Relaxed) <= TIMEOUT_MS + 2000,
        "every request answered within its timeout"
    );
    assert!(
        f1 - f0 <= 50 + 20 * (g1 - g0),
        "no storm: {} frames for {} grants",
        f1 - f0,
        g1 - g0
    );
    assert_eq!(fresh1 - fresh0, 0, "the refused node sends nothing");
    // What does not need node 2 is still served: a new path whose token starts at node 0.
    let q = path_rooted_at("after", 0, 3);
    let req = hilock_runtime::client::Request::Lock {
        path: q.clone(),
        mode: "W".into(),
        priority: 0,
        timeout_ms: Some(TIMEOUT_MS),
        nested: false,
        try_lock: false,
    };
    let (reply, _s) = hilock_runtime::client::request(&procs.socket(0), &req)
        .await
        .unwrap();
    assert!(reply.ok, "{q} served after the restart: {:?}", reply.error);
    drop(_s);
    // The records validate up to node 2's new run, where the check stops (exit 3).
    let (code, out) = procs.stop_and_check();
    eprintln!("{out}");
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("stopped: node 2 at ") && out.contains("a new run"),
        "{out}"
    );
}

/// Runs `ip ARGS…`; `Err` with its stderr if it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Network namespaces made by a test: one per node and one with a bridge joining them;
/// deleted (with everything in them) when dropped.
struct Netns {
    names: Vec<String>,
    bridge: String,
}

impl Netns {
    /// `n` namespaces with addresses 10.201.`net`.(i+1)/24 on veth pairs to a bridge.
    fn make(n: usize, net: u8) -> Result<Netns, String> {
        let tag = std::process::id();
        let mut ns = Netns {
            names: (0..n).map(|i| format!("hlk{tag}n{i}")).collect(),
            bridge: format!("hlk{tag}br"),
        };
        let br = ns.bridge.clone();
        ip(&["netns", "add", &br])?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let name = ns.names[i].clone();
            ip(&["netns", "add", &name]).inspect_err(|_| ns.names.truncate(i))?;
            let (a, b) = (format!("hv{i}"), format!("hb{i}"));
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &a, "netns", &name, "type", "veth", "peer", &b, "netns", &br,
            ])?;
            ip(&[
                "-n",
                &name,
                "addr",
                "add",
                &format!("10.201.{net}.{}/24", i + 1),
                "dev",
                &a,
            ])?;
            ip(&["-n", &name, "link", "set", &a, "up"])?;
            ip(&["-n", &br, "link", "set", &b, "master", "br0"])?;
            ip(&["-n", &br, "link", "set", &b, "up"])?;
        }
        Ok(ns)
    }

    /// Cut node `i` off the bridge (`false`) or join it again (`true`).
    fn link(&self, i: usize, up: bool) {
        ip(&[
            "-n",
            &self.bridge,
            "link",
            "set",
            &format!("hb{i}"),
            if up { "up" } else { "down" },
        ])
        .unwrap();
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in self.names.iter().chain(std::iter::once(&self.bridge)) {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// A partition between network namespaces the test makes (root only): node 2 is cut off
/// the bridge for 2 s under load and joined again. No violation (overlap or fence order),
/// no request lost (all wait it out), the cut peer is shown not connected, no storm of
/// frames meanwhile. Skipped with one line where namespaces cannot be made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_between_network_namespaces_heals_without_violation_loss_or_storm() {
    const TIMEOUT_MS: u64 = 20_000;
    let net = (std::process::id() % 200) as u8 + 20;
    let ns = match Netns::make(3, net) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIP partition test: cannot make network namespaces ({e})");
            return;
        }
    };
    let addrs: Vec<SocketAddr> = (0..3)
        .map(|i| format!("10.201.{net}.{}:7400", i + 1).parse().unwrap())
        .collect();
    let mut procs = Procs::start_at(&addrs, ns.names.clone(), TIMEOUT_MS);
    let (oracle, tally, stop) = (
        Arc::new(Oracle::default()),
        Arc::new(Tally::default()),
        Arc::new(AtomicBool::new(false)),
    );
    let mut clients = process_clients(&procs, 3, TIMEOUT_MS, &oracle, &tally, &stop);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let live = [procs.socket(0), procs.socket(1)];
    let (f0, g0) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        tally.granted.load(Relaxed),
    );
    ns.link(2, false);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let (f1, g1) = (
        frames_sent(&live[0]).await + frames_sent(&live[1]).await,
        tally.granted.load(Relaxed),
    );
    let s0 = proc_status(&live[0]).await.expect("node 0 answers");
    let p2 = s0["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == 2)
        .unwrap()
        .clone();
    let healed = Instant::now();
    ns.link(2, true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Relaxed);
    let run = async {
        while let Some(r) = clients.join_next().await {
            r.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(40), run)
        .await
        .expect("every client finishes after the partition heals");
    let (invoked, granted) = (tally.invoked.load(Relaxed), tally.granted.load(Relaxed));
    eprintln!(
        "partition 2 s (node 2 off the bridge): {invoked} requests, {granted} granted, errors {:?}; \
         {} pairs and {} fences checked, {} violations; while cut: {} frames by nodes 0 and 1, {} \
         grants; node 0 showed node 2 as {}; all clients done {:?} after the heal; longest wait {} ms",
        tally.errors.lock().unwrap().iter().map(|e| &e.2).collect::<Vec<_>>(),
        oracle.checks(),
        oracle.fence_checks(),
        oracle.violations().len(),
        f1 - f0,
        g1 - g0,
        p2["state"],
        healed.elapsed(),
        tally.longest_ms.load(Relaxed),
    );
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert!(tally.errors.lock().unwrap().is_empty(), "no request lost");
    assert_eq!(invoked, granted, "no request lost");
    assert!(granted > 100);
    assert_eq!(p2["connected"], false, "a cut peer is not shown connected");
    assert!(
        f1 - f0 <= 50 + 20 * (g1 - g0),
        "no storm: {} frames for {} grants",
        f1 - f0,
        g1 - g0
    );
    let (code, out) = procs.stop_and_check();
    eprintln!("{out}");
    assert_eq!(code, Some(0), "{out}");
    drop(procs);
}
