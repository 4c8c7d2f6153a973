//! The ring engine with `membership = "etcd"` (feature `etcd`,
//! `hilock_runtime::ring::etcd`; `docs/faults.md`, "Ring engine", "etcd mode"):
//! `hilock node` processes whose view is one etcd key changed by compare-and-swap and whose
//! leases are etcd leases (TTL 2 s, grace 100 ms), against a real etcd each test starts
//! itself (`runtime/tests/support/etcd.rs`; skipped with one printed line where etcd cannot
//! be had). Only 127.0.0.1, every wait bounded, every child killed when the test ends.
//! `RING_LOG=hilock=info` shows the children's logs.
#![cfg(feature = "etcd")]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hilock_kernel::ring::{NodeId, View};
use hilock_runtime::membership::{EtcdOptions, Member, Membership, Observer};
use hilock_runtime::ring::{etcd as ring_etcd, key_of, probe, ring, RingClient, Views};

#[path = "../../runtime/tests/support/etcd.rs"]
mod etcd;
#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/ring_load.rs"]
mod ring_load;
use ring_load::{slots, Run, HELD};

const BIN: &str = env!("CARGO_BIN_EXE_hilock");
const TTL_S: u32 = 2;
const GRACE_MS: u64 = 100;

/// A child process, killed (SIGKILL) and reaped when dropped.
struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> SocketAddr {
    ports::free_addr()
}

fn options(e: &etcd::Etcd) -> EtcdOptions {
    let mut o = EtcdOptions::new(vec![e.addr.clone()]);
    o.ttl_s = TTL_S;
    o.grace = Duration::from_millis(GRACE_MS);
    o
}

/// A ring configuration with its membership in etcd.
fn ring_toml(cluster: &str, etcd: &str, addrs: &[SocketAddr], members: &[u16]) -> String {
    ring_toml_ttl(cluster, etcd, addrs, members, TTL_S)
}

/// [`ring_toml`] with etcd leases of `ttl_s` seconds.
fn ring_toml_ttl(
    cluster: &str,
    etcd: &str,
    addrs: &[SocketAddr],
    members: &[u16],
    ttl_s: u32,
) -> String {
    let mut s = format!(
        "engine = \"ring\"\ncluster = \"{cluster}\"\nsecret = \"a long shared secret\"\n\
         membership = \"etcd\"\netcd_endpoints = [\"{etcd}\"]\n\
         etcd_lease_ttl_s = {ttl_s}\netcd_grace_ms = {GRACE_MS}\n\
         [ring]\nmembers = {members:?}\n"
    );
    for (i, a) in addrs.iter().enumerate() {
        s.push_str(&format!("[[nodes]]\nid = {i}\naddr = \"{a}\"\n"));
    }
    s
}

fn spawn_node(id: u16, config: &Path) -> Proc {
    Proc(
        Command::new(BIN)
            .args(["node", "--id", &id.to_string(), "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .env(
                "RUST_LOG",
                std::env::var("RING_LOG").unwrap_or("hilock=warn".into()),
            )
            .spawn()
            .expect("hilock starts"),
    )
}

/// `kill -SIG pid` of our own child (`STOP`, `CONT`).
fn signal(p: &Proc, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(p.0.id().to_string())
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig}");
}

/// Waits until etcd's view satisfies `f` and every live member of it answers a probe
/// settled in it.
async fn wait_view(
    o: &EtcdOptions,
    cluster: &str,
    addrs: &[SocketAddr],
    limit: Duration,
    f: impl Fn(View, u16) -> bool,
) -> View {
    let t = Instant::now();
    loop {
        if let Ok((v, live)) = ring_etcd::read_view(o, cluster).await {
            if f(v, live) {
                let mut settled = true;
                for (i, a) in addrs.iter().enumerate() {
                    if v.has(NodeId(i as u16)) && live & (1 << i) != 0 {
                        let r = probe(*a, Duration::from_millis(500)).await;
                        settled &= r.is_some_and(|r| r.view == v && r.settled);
                    }
                }
                if settled {
                    return v;
                }
            }
        }
        if t.elapsed() >= limit {
            let mut nodes = Vec::new();
            for a in addrs {
                nodes.push(probe(*a, Duration::from_millis(500)).await);
            }
            panic!(
                "no settled view as wanted after {limit:?}: etcd {:?}, nodes {nodes:?}",
                ring_etcd::read_view(o, cluster).await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free path whose primary in `v` is `n` (placed by its top-level element).
fn path_served_by(v: View, n: NodeId, tag: &str) -> String {
    (0..10_000)
        .map(|k| format!("/{tag}{k}/x"))
        .find(|p| ring().lookup(v, key_of(p)) == Some(n))
        .expect("some path is placed on every member")
}

/// Polls etcd every 10 ms for member `n`'s key: the last time it was seen present.
fn watch_member_key(
    obs: Observer,
    n: u16,
) -> (Arc<Mutex<Option<Instant>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let h = tokio::spawn(async move {
        loop {
            let asked = Instant::now();
            if let Ok(m) = obs.list_members().await {
                if m.contains_key(&n) {
                    *s.lock().unwrap() = Some(asked);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    (seen, h)
}

/// The earliest a lease can expire in etcd after its holder's last keep-alive: the TTL less
/// the keep-alive period (a third of the local lease), less 100 ms for the round trip.
fn earliest_expiry(o: &EtcdOptions) -> Duration {
    let local = o.local_lease(u64::from(o.ttl_s)).unwrap();
    Duration::from_secs(o.ttl_s.into()) - local / 3 - Duration::from_millis(100)
}

struct Ring {
    _etcd: etcd::Etcd,
    _dir: tempfile::TempDir,
    o: EtcdOptions,
    cluster: &'static str,
    cfg: std::path::PathBuf,
    addrs: Vec<SocketAddr>,
    procs: Vec<Option<Proc>>,
    view: View,
}

/// etcd, `n` `hilock node` processes of cluster `cluster`, and their first view settled.
async fn start_ring(test: &str, cluster: &'static str, n: u16) -> Option<Ring> {
    start_ring_of(test, cluster, n, n).await
}

/// etcd, `slots` configured slots of which the first `n` start as `hilock node`
/// processes with the first view `[0, n)`, settled.
async fn start_ring_of(test: &str, cluster: &'static str, slots: u16, n: u16) -> Option<Ring> {
    start_ring_ttl(test, cluster, slots, n, TTL_S).await
}

/// [`start_ring_of`] with etcd leases of `ttl_s` seconds.
async fn start_ring_ttl(
    test: &str,
    cluster: &'static str,
    slots: u16,
    n: u16,
    ttl_s: u32,
) -> Option<Ring> {
    let e = etcd::start_healthy(test)?;
    let mut o = options(&e);
    o.ttl_s = ttl_s;
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..slots).map(|_| free_port()).collect();
    let cfg = dir.path().join("ring.toml");
    let members: Vec<u16> = (0..n).collect();
    std::fs::write(
        &cfg,
        ring_toml_ttl(cluster, &e.addr, &addrs, &members, ttl_s),
    )
    .unwrap();
    let procs = (0..slots)
        .map(|i| (i < n).then(|| spawn_node(i, &cfg)))
        .collect();
    let all = (1u16 << n) - 1;
    let view = wait_view(&o, cluster, &addrs, Duration::from_secs(10), |v, live| {
        v.members == all && live == all
    })
    .await;
    assert_eq!(view.epoch, 1, "the first view is epoch 1");
    Some(Ring {
        _etcd: e,
        _dir: dir,
        o,
        cluster,
        cfg,
        addrs,
        procs,
        view,
    })
}

/// [`start_ring_of`] under the load of `ring_load::Run` (seed `seed`), whose clients follow
/// the view in etcd: the ring, the load, the node addresses and the view follower.
async fn loaded(
    test: &str,
    cluster: &'static str,
    slots_n: u16,
    n: u16,
    seed: u64,
) -> Option<(
    Ring,
    Run,
    Arc<Vec<Option<SocketAddr>>>,
    tokio::sync::watch::Receiver<View>,
)> {
    let r = start_ring_of(test, cluster, slots_n, n).await?;
    let slots = slots(&r.addrs);
    let views = ring_etcd::follow_view(&r.o, r.cluster).await.unwrap();
    let run = Run::start(&slots, Views::Watch(views.clone()), seed).await;
    Some((r, run, slots, views))
}

/// `hilock status --config F` of the ring: asserts it succeeds and shows `want` settled.
fn status_shows(r: &Ring, want: View) -> String {
    let out = Command::new(BIN)
        .args(["status", "--config"])
        .arg(&r.cfg)
        .env("RUST_LOG", "hilock=warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "hilock status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let members: Vec<String> = (0..16u16)
        .filter(|i| want.has(NodeId(*i)))
        .map(|i| i.to_string())
        .collect();
    let line = format!(
        "view epoch {} members [{}], settled",
        want.epoch,
        members.join(", ")
    );
    assert!(text.contains(&line), "status shows {line:?}: {text}");
    text
}

/// Whether node `n` (at `addr`) reports `path`'s entry held by client `c`.
async fn node_holds(addr: SocketAddr, path: &str, c: u8) -> bool {
    probe(addr, Duration::from_millis(500))
        .await
        .is_some_and(|r| r.entries.contains(&(key_of(path).0, Some(c))))
}

/// A sixth node joins a 5-node etcd ring under load (12 clients, the demo's history
/// checker), while a client holds a lock whose range moves to it: `hilock node` with a
/// slot not in the view starts as a non-member and installs the view with itself by the
/// etcd compare-and-swap once the view is settled; the kernel hands it exactly the moved
/// arcs. Afterwards the new node serves its range (a free path of it is granted; its
/// table holds the moved lock, which a contender is refused), `hilock status` shows epoch
/// 2 with six members, and at the end 0 violations, every request answered, every path
/// free (no lost lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sixth_node_joins_a_five_node_etcd_ring_under_load() {
    tokio::time::timeout(Duration::from_secs(40), join_sixth())
        .await
        .expect("the test ended within 40 s");
}

async fn join_sixth() {
    let test = "a_sixth_node_joins_a_five_node_etcd_ring_under_load";
    let Some((mut r, mut run, slots, views)) =
        loaded(test, "ring-join", 6, 5, 0x51a7_e11d_0ca1_0003).await
    else {
        return;
    };
    let limit = Duration::from_secs(10);
    let grants = run.load.grants.clone();
    let joiner = NodeId(5);
    let six = r.view.join(joiner);
    // A lock held across the join on a path the joiner will serve.
    let moved = path_served_by(six, joiner, "moved");
    assert_ne!(ring().lookup(r.view, key_of(&moved)), Some(joiner));
    let mut keeper = RingClient::connect_to(152, slots.clone(), Views::Watch(views.clone()))
        .await
        .unwrap();
    assert!(keeper.lock(&moved).await.unwrap(), "{moved} is granted");
    let op = run.ops.fetch_add(1, Relaxed);
    run.oracle
        .register_path(op, 152, &moved, hilock_kernel::Mode::W);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t = Instant::now();
    r.procs[joiner.idx()] = Some(spawn_node(joiner.0, &r.cfg));
    let v = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| v.has(joiner)).await;
    let took = t.elapsed();
    println!(
        "node 5 joined a 5-node etcd ring under load: view {v:?} settled {took:?} after its start"
    );
    assert_eq!(v, six, "the join is one view change");
    // The new node serves its range: it holds the moved lock, refuses it to a contender,
    // and grants a free path of its range.
    assert!(
        node_holds(r.addrs[joiner.idx()], &moved, 152).await,
        "node 5 holds the moved lock after the join"
    );
    assert!(
        !run.contender.lock(&moved).await.unwrap(),
        "the lock held across the join is refused to another client"
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the held lock is refused to another client"
    );
    let free = path_served_by(six, joiner, "fresh");
    let mut prober = RingClient::connect_to(150, slots.clone(), Views::Watch(views.clone()))
        .await
        .unwrap();
    assert!(prober.lock(&free).await.unwrap(), "{free} is granted");
    assert!(
        node_holds(r.addrs[joiner.idx()], &free, 150).await,
        "node 5 serves {free}"
    );
    prober.unlock(&free).await.unwrap();
    status_shows(&r, six);
    let before = grants.load(Relaxed);
    ring_load::until_grants_pass(&grants, before, limit, "the join").await;
    run.oracle.exit(op);
    keeper.unlock(&moved).await.unwrap();
    run.finish(limit, "etcd ring join").await;
    assert!(
        r.procs[joiner.idx()]
            .as_mut()
            .unwrap()
            .0
            .try_wait()
            .unwrap()
            .is_none(),
        "the joiner still runs"
    );
}

/// The graceful leave of the primary of a held lock in a 6-node etcd ring under load:
/// SIGTERM to its `hilock node`; it installs the view without itself by the etcd
/// compare-and-swap, hands its arcs over, and exits (status 0) only once every member of
/// the new view reports that it installed it and holds every arc it must (checked by
/// probing them right after the exit), well before its lease could have expired. The
/// held lock survives (refused to a contender), `hilock status` shows epoch 2 without the
/// leaver, and at the end 0 violations, every request answered, every path free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_leave_of_a_primary_under_load_hands_over_before_it_exits() {
    tokio::time::timeout(Duration::from_secs(40), graceful_leave())
        .await
        .expect("the test ended within 40 s");
}

async fn graceful_leave() {
    let test = "graceful_leave_of_a_primary_under_load_hands_over_before_it_exits";
    let Some((mut r, mut run, _slots, _views)) =
        loaded(test, "ring-leave", 6, 6, 0x51a7_e11d_0ca1_0004).await
    else {
        return;
    };
    let limit = Duration::from_secs(10);
    let grants = run.load.grants.clone();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let leaver = ring().lookup(r.view, key_of(HELD)).unwrap();
    let want = r.view.leave(leaver);
    let mut proc = r.procs[leaver.idx()].take().unwrap();
    let t = Instant::now();
    signal(&proc, "TERM");
    let st = loop {
        if let Some(st) = proc.0.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < limit, "the leaver exits");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let took = t.elapsed();
    // Right after its exit: every member of the new view holds its arcs in it.
    for (i, a) in r.addrs.iter().enumerate() {
        if want.has(NodeId(i as u16)) {
            let rep = probe(*a, Duration::from_millis(500)).await;
            assert!(
                rep.as_ref().is_some_and(|x| x.view == want && x.settled),
                "node {i} when the leaver exited: {rep:?} (want settled in {want:?})"
            );
        }
    }
    println!(
        "graceful leave of node {} (primary of {HELD}) under load: exited {st} {took:?} after SIGTERM",
        leaver.0
    );
    assert!(st.success(), "the leaver exits cleanly: {st}");
    assert!(
        took < earliest_expiry(&r.o),
        "the leave took {took:?}: as long as a lease expiry"
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across the leave of its primary is refused to another client"
    );
    let v = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| v == want).await;
    assert_eq!(v.epoch, 2);
    status_shows(&r, want);
    let before = grants.load(Relaxed);
    ring_load::until_grants_pass(&grants, before, limit, "the leave").await;
    run.finish(limit, "etcd ring graceful leave").await;
}

/// kill -9 of a held lock's primary in a 5-node etcd ring under load; once it is removed
/// from the view (after its lease), `hilock node` is started again with the same slot: it
/// is not in the view, so it joins (epoch 3, the five members again) and is handed its
/// range back; it then holds the held lock's entry, which a contender is refused;
/// `hilock status` shows each view; at the end 0 violations, every request answered,
/// every path free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_started_again_rejoins_through_the_join() {
    tokio::time::timeout(Duration::from_secs(40), kill_and_rejoin())
        .await
        .expect("the test ended within 40 s");
}

async fn kill_and_rejoin() {
    let test = "a_killed_node_started_again_rejoins_through_the_join";
    let Some((mut r, mut run, _slots, _views)) =
        loaded(test, "ring-rejoin", 5, 5, 0x51a7_e11d_0ca1_0005).await
    else {
        return;
    };
    let limit = Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let victim = ring().lookup(r.view, key_of(HELD)).unwrap();
    let gone = r.view.leave(victim);
    let t = Instant::now();
    drop(r.procs[victim.idx()].take()); // SIGKILL and reap
    wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| v == gone).await;
    let removed = t.elapsed();
    status_shows(&r, gone);
    let t = Instant::now();
    r.procs[victim.idx()] = Some(spawn_node(victim.0, &r.cfg));
    let back = gone.join(victim);
    wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| v == back).await;
    let rejoined = t.elapsed();
    println!(
        "kill -9 of node {}: removed {removed:?} after the kill; started again, it rejoined (settled) {rejoined:?} after its start",
        victim.0
    );
    assert_eq!(back.epoch, 3);
    assert!(
        node_holds(r.addrs[victim.idx()], HELD, ring_load::HOLDER).await,
        "the rejoined node holds the held lock's entry again"
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across the kill and the rejoin is refused to another client"
    );
    status_shows(&r, back);
    run.finish(limit, "etcd ring kill -9 and rejoin").await;
}

/// kill -9 of a held lock's primary and `hilock node` started again at once with the same
/// slot (TTL 2 s: the earlier run's member key is still in etcd). Client 1 holds a path
/// of its range in `hilock lock` for 5 s; client 2 asks for it just after the restart.
/// The restarted run is refused while the earlier run's key is in etcd (exit 2, one line
/// naming the slot as still a member) and started again every 300 ms until it runs; it
/// then joins through the join and is handed its range. The history of the two commands
/// shows no overlap, client 1's hold checks keep finding its entry (exit 0), client 2 is
/// granted only after client 1's unlock, and the restarted slot is a member of a later
/// view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_and_restarted_within_its_lease_keeps_the_held_lock() {
    tokio::time::timeout(Duration::from_secs(60), restart_within_lease())
        .await
        .expect("the test ended within 60 s");
}

async fn restart_within_lease() {
    let name = "a_primary_killed_and_restarted_within_its_lease_keeps_the_held_lock";
    let Some(mut r) = start_ring(name, "ring-restart", 4).await else {
        return;
    };
    const PATH: &str = "/restart/held";
    let limit = Duration::from_secs(20);
    let victim = ring().lookup(r.view, key_of(PATH)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("holds.log");
    let wrapper = |client: &str, secs: &str| {
        let script = format!(
            "echo \"start $0 $(date +%s%N)\" >> {l}; sleep {secs}; echo \"end $0 $(date +%s%N)\" >> {l}",
            l = log.display()
        );
        tokio::process::Command::new(BIN)
            .args(["lock", "--config"])
            .arg(&r.cfg)
            .args(["--client-id", client, "--timeout-ms", "15000", PATH, "W"])
            .args(["--", "sh", "-c", &script, client])
            .env("RUST_LOG", "hilock=warn")
            .kill_on_drop(true)
            .output()
    };
    let one = tokio::spawn(wrapper("1", "5"));
    let t = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("start")) {
        assert!(t.elapsed() < limit, "client 1's command starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // kill -9 of its primary, started again at once, and again until a run stays up.
    drop(r.procs[victim.idx()].take()); // SIGKILL and reap
    let killed = Instant::now();
    let two = tokio::spawn(wrapper("2", "0"));
    let mut refused = Vec::new();
    let running = loop {
        let mut p = Proc(
            Command::new(BIN)
                .args(["node", "--id", &victim.0.to_string(), "--config"])
                .arg(&r.cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .env("RUST_LOG", "hilock=warn")
                .spawn()
                .expect("hilock starts"),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        match p.0.try_wait().unwrap() {
            None => break p,
            Some(st) => {
                let mut err = String::new();
                if let Some(mut e) = p.0.stderr.take() {
                    use std::io::Read;
                    e.read_to_string(&mut err).unwrap();
                }
                refused.push((killed.elapsed(), st.code(), err));
            }
        }
        assert!(
            killed.elapsed() < limit,
            "a run of the slot starts: {refused:?}"
        );
    };
    let started = killed.elapsed();
    r.procs[victim.idx()] = Some(running);
    let (a, b) = (one.await.unwrap().unwrap(), two.await.unwrap().unwrap());
    let events = ring_load::hold_events(&log, "");
    let order: Vec<(bool, u16)> = events.iter().map(|e| (e.1, e.2)).collect();
    assert_eq!(
        order,
        [(true, 1), (false, 1), (true, 2), (false, 2)],
        "client 2 held the path while client 1 did: {events:?}; client 1: {}; client 2: {}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    assert!(!refused.is_empty(), "the run started at once is refused");
    for (at, code, err) in &refused {
        assert_eq!(*code, Some(2), "{at:?}: {err}");
        assert!(err.contains("is still a member"), "{at:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    }

    for (who, out) in [("client 1", a), ("client 2", b)] {
        assert!(
            out.status.success(),
            "{who}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let back = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| {
        v.has(victim) && v.epoch > r.view.epoch
    })
    .await;
    println!(
        "{name}: node {} killed; {} runs refused, the run started {started:?} after the kill \
         runs; view {} {:#06b}",
        victim.0,
        refused.len(),
        back.epoch,
        back.members
    );
}

/// kill -9 of a held lock's primary in a 4-node ring under load (12 clients, the demo's
/// history checker): a client asking for a free path of the dead node's range is answered
/// only after the dead node's member key is gone from etcd (its lease expired: no poll of
/// etcd every 10 ms saw the key at or after the answer) and at least the TTL less a
/// keep-alive period after the kill; the held lock survives through the replicas (r = 2:
/// refused to a contender); `hilock status` shows view epoch 2 without the dead node; at
/// the end 0 violations, every request answered, every path free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_successor_serves_only_after_the_lease_expired_in_etcd() {
    tokio::time::timeout(Duration::from_secs(40), kill_9())
        .await
        .expect("the test ended within 40 s");
}

async fn kill_9() {
    let test = "kill_9_successor_serves_only_after_the_lease_expired_in_etcd";
    let Some((mut r, mut run, slots, views)) =
        loaded(test, "ring-kill", 4, 4, 0x51a7_e11d_0ca1_0001).await
    else {
        return;
    };
    let limit = Duration::from_secs(10);
    let grants = run.load.grants.clone();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let victim = ring().lookup(r.view, key_of(HELD)).unwrap();
    let p = path_served_by(r.view, victim, "probe");
    let mut prober = RingClient::connect_to(150, slots.clone(), Views::Watch(views.clone()))
        .await
        .unwrap();
    prober.limit = limit;
    let obs = Observer::connect(&r.o, r.cluster).await.unwrap();
    let (seen, poll) = watch_member_key(obs, victim.0);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let t = Instant::now();
    drop(r.procs[victim.idx()].take()); // SIGKILL and reap
    assert!(
        prober.lock(&p).await.unwrap(),
        "{p} is granted by the new primary"
    );
    let served = Instant::now();
    poll.abort();
    let last_seen = seen
        .lock()
        .unwrap()
        .expect("the key was seen before the kill");
    println!(
        "kill -9 of node {}: its key last seen {:?} after the kill, {p} served {:?} after it",
        victim.0,
        last_seen.saturating_duration_since(t),
        served - t
    );
    assert!(
        last_seen < served,
        "{p} was served while node {}'s member key was still in etcd",
        victim.0
    );
    assert!(
        served - t >= earliest_expiry(&r.o),
        "{p} served {:?} after the kill: before the lease could expire",
        served - t
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across kill -9 of its primary is refused to another client"
    );
    prober.unlock(&p).await.unwrap();
    let before = grants.load(Relaxed);
    ring_load::until_grants_pass(&grants, before, limit, "the kill").await;

    // `hilock status` shows the view's epoch, from etcd.
    let want = View {
        epoch: 2,
        members: r.view.members & !(1 << victim.0),
    };
    wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| v == want).await;
    let out = Command::new(BIN)
        .args(["status", "--config"])
        .arg(&r.cfg)
        .env("RUST_LOG", "hilock=warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hilock status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let members: Vec<String> = (0..4u16)
        .filter(|i| want.has(NodeId(*i)))
        .map(|i| i.to_string())
        .collect();
    let line = format!("view epoch 2 members [{}], settled", members.join(", "));
    assert!(text.contains(&line), "status shows {line:?}: {text}");

    run.finish(limit, "etcd ring kill -9").await;
}

/// SIGSTOP of a held lock's primary in a 4-node ring under load, past its lease: it is
/// removed from the view in etcd only after its lease could have expired; the held lock
/// survives (refused to a contender); a request routed with the old view, sent to it while
/// it is paused, is not answered after SIGCONT (it looks at its clock first, has stopped,
/// and ends: exit status 75); the history checker reports 0 violations (no two servers for
/// one key), every request of the load is answered and every path is free at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_lease_stops_answering_and_serves_nothing_after_sigcont() {
    tokio::time::timeout(Duration::from_secs(40), sigstop())
        .await
        .expect("the test ended within 40 s");
}

async fn sigstop() {
    let test = "sigstop_past_the_lease_stops_answering_and_serves_nothing_after_sigcont";
    let Some((mut r, mut run, slots, _views)) =
        loaded(test, "ring-stop", 4, 4, 0x51a7_e11d_0ca1_0002).await
    else {
        return;
    };
    let limit = Duration::from_secs(10);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let paused = ring().lookup(r.view, key_of(HELD)).unwrap();
    let p = path_served_by(r.view, paused, "stale");
    // A client that keeps routing with the first view.
    let (_old_tx, old) = tokio::sync::watch::channel(r.view);
    let mut stale = RingClient::connect_to(151, slots.clone(), Views::Watch(old))
        .await
        .unwrap();
    stale.limit = Duration::from_millis(2500);

    let t = Instant::now();
    signal(r.procs[paused.idx()].as_ref().unwrap(), "STOP");
    let v = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, _| !v.has(paused)).await;
    let took = t.elapsed();
    println!(
        "paused node {} removed from the view after {took:?}",
        paused.0
    );
    assert_eq!(v.epoch, 2);
    assert!(
        took >= earliest_expiry(&r.o),
        "node {} removed {took:?} after its pause: before its lease could expire",
        paused.0
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across the pause of its primary is refused to another client"
    );
    // The stale request reaches the paused node (the kernel accepts the connection) ...
    let ask = tokio::spawn(async move { (stale.lock(&p).await, p) });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ... which wakes, answers nothing and ends.
    let mut proc = r.procs[paused.idx()].take().unwrap();
    signal(&proc, "CONT");
    let (answer, p) = ask.await.unwrap();
    assert!(
        answer.is_err(),
        "the woken node answered {p} with the old view: {answer:?}"
    );
    let t = Instant::now();
    loop {
        if let Some(st) = proc.0.try_wait().unwrap() {
            // It stopped on its own (its lease ran out): 75, so a supervisor restarts it.
            assert_eq!(st.code(), Some(75), "the woken node exits 75: {st}");
            break;
        }
        assert!(t.elapsed() < limit, "the woken node exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.finish(limit, "etcd ring SIGSTOP").await;
}

/// What etcd holds under the cluster's `epoch` key must be a view of this ring: a
/// token-engine epoch of a cluster with the same name or a member that is not a slot is
/// one clear line, from the library and (the first) from `hilock node` (exit status 2);
/// a view without the starting node's slot is no error (the node joins it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_or_bad_view_in_etcd_is_a_clear_error() {
    tokio::time::timeout(Duration::from_secs(30), bad_views())
        .await
        .expect("the test ended within 30 s");
}

async fn bad_views() {
    let Some(e) = etcd::start_healthy("a_foreign_or_bad_view_in_etcd_is_a_clear_error") else {
        return;
    };
    let o = options(&e);
    let me = Member {
        id: 9,
        incarnation: 1,
    };
    let addrs = [free_port(), free_port()];
    let slots = slots(&addrs);
    let start = |cluster: &'static str, id: u16| {
        let (o, slots) = (o.clone(), slots.clone());
        async move {
            let l = tokio::net::TcpListener::bind(addrs[usize::from(id)])
                .await
                .unwrap();
            ring_etcd::start_node(id, l, slots, &o, cluster, 0b11)
                .await
                .map(|_| ())
        }
    };
    // A token engine's epoch under the same cluster name.
    let m = Membership::join(&o, "shared", me).await.unwrap();
    let base = m.current_epoch().await.unwrap();
    m.install_epoch(&base, &[me], b"token plan").await.unwrap();
    let err = start("shared", 0).await.unwrap_err();
    assert!(err.contains("is not a ring view"), "{err}");
    assert!(!err.contains('\n'), "one line: {err}");
    // A member that is not a slot.
    let m2 = Membership::join(&o, "bad", me).await.unwrap();
    let base = m2.current_epoch().await.unwrap();
    let alien = Member {
        id: 20,
        incarnation: 1,
    };
    m2.install_epoch(&base, &[alien], ring_etcd::VIEW_TAG)
        .await
        .unwrap();
    let err = start("bad", 0).await.unwrap_err();
    assert!(err.contains("member 20 is not a slot of the ring"), "{err}");
    // A view without the node's slot is no error: the node joins it. The first node
    // installs [0]; slot 1 starts as a non-member and installs [0, 1] as epoch 2.
    let n0 = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ring_etcd::start_node(0, l, slots.clone(), &o, "small", 0b01)
            .await
            .unwrap()
    };
    start("small", 1).await.unwrap();
    let t = Instant::now();
    loop {
        let (v, _) = ring_etcd::read_view(&o, "small").await.unwrap();
        if v.members == 0b11 {
            assert_eq!(v.epoch, 2, "the join is one view change");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "slot 1 joins: {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    n0.kill();

    // The same through `hilock node`: exit status 2, one line naming the key.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ring.toml");
    std::fs::write(&cfg, ring_toml("shared", &e.addr, &addrs, &[0, 1])).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(BIN)
            .args(["node", "--id", "0", "--config"])
            .arg(&cfg)
            .env("RUST_LOG", "off")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("hilock node ends")
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/hilock/shared/epoch") && err.contains("is not a ring view"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
}

/// The configuration of a ring in etcd: `[ring]` holds only `members`; the static
/// service's `membership` and `lease_ms`, and the token engine's `etcd_recovery`, are
/// one-line errors.
#[test]
fn ring_etcd_configuration_is_checked() {
    let addrs = [
        "127.0.0.1:7200".parse().unwrap(),
        "127.0.0.1:7201".parse().unwrap(),
    ];
    let good = ring_toml("c", "127.0.0.1:2379", &addrs, &[0, 1]);
    let c = hilock_runtime::Config::from_toml(&good, Some(0)).unwrap();
    assert_eq!(c.engine, hilock_runtime::config::Engine::Ring);
    let r = c.ring.unwrap();
    assert_eq!(
        (r.members, r.membership),
        (0b11, hilock_runtime::config::NO_SERVICE)
    );
    let cases = [
        (
            good.replace("[ring]\n", "[ring]\nmembership = \"127.0.0.1:7300\"\n"),
            "with membership = \"etcd\" the view is kept in etcd",
        ),
        (
            good.replace("[ring]\n", "[ring]\nlease_ms = 700\n"),
            "the lease is etcd_lease_ttl_s",
        ),
        (
            good.replace("membership = \"etcd\"\n", "membership = \"etcd\"\netcd_recovery = true\n"),
            "etcd_recovery is the token engine's",
        ),
        (
            good.replace("membership = \"etcd\"\n", "").replace(
                "etcd_endpoints = [\"127.0.0.1:2379\"]\netcd_lease_ttl_s = 2\netcd_grace_ms = 100\n",
                "",
            ),
            "[ring] needs `membership = \"host:port\"`",
        ),
    ];
    for (text, want) in &cases {
        let e = hilock_runtime::Config::from_toml(text, Some(0)).unwrap_err();
        assert!(e.contains(want), "{e:?} should mention {want:?}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
}

/// `hilock ring join|leave --config F` of a ring whose view is in etcd has no membership
/// service to ask: one line (exit status 2) saying how a node joins and leaves there,
/// without dialling anything.
#[test]
fn ring_join_and_leave_with_an_etcd_configuration_are_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ring.toml");
    let addrs = [free_port(), free_port()];
    std::fs::write(&cfg, ring_toml("c", "127.0.0.1:1", &addrs, &[0, 1])).unwrap();
    for verb in ["join", "leave"] {
        let out = Command::new(BIN)
            .args([
                "ring",
                verb,
                "--id",
                "1",
                "--timeout-ms",
                "3000",
                "--config",
            ])
            .arg(&cfg)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb}: {err}");
        assert!(
            err.contains("kept in etcd") && err.contains("SIGTERM"),
            "{verb}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    }
}

/// `hilock lock --config F` with an etcd ring's configuration takes its views from etcd
/// (`ring::client_views`): on a 3-node etcd ring, two wrappers of different clients on
/// one path run their commands one after the other (each command logs its start and end;
/// the log never shows two starts in a row), both exit 0, each command sees
/// `HILOCK_FENCE`, and the later hold's fence is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hilock_lock_on_an_etcd_ring_serializes_commands_with_growing_fences() {
    tokio::time::timeout(Duration::from_secs(40), lock_on_etcd_ring())
        .await
        .expect("the test ended within 40 s");
}

async fn lock_on_etcd_ring() {
    let name = "hilock_lock_on_an_etcd_ring_serializes_commands_with_growing_fences";
    let Some(r) = start_ring(name, "rl", 3).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let wrapper = |client: &str| {
        let script = format!(
            "echo \"start $HILOCK_FENCE\" >> {log}; sleep 0.4; echo end >> {log}",
            log = log.display()
        );
        tokio::process::Command::new(BIN)
            .args(["lock", "--config"])
            .arg(&r.cfg)
            .args([
                "--client-id",
                client,
                "--timeout-ms",
                "15000",
                "/shared",
                "W",
            ])
            .args(["--", "sh", "-c", &script])
            .env("RUST_LOG", "hilock=warn")
            .kill_on_drop(true)
            .output()
    };
    let (a, b) = tokio::join!(wrapper("1"), wrapper("2"));
    for (who, out) in [("client 1", a.unwrap()), ("client 2", b.unwrap())] {
        assert!(
            out.status.success(),
            "{who}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("start ") && lines[1] == "end",
        "one command at a time: {text}"
    );
    assert!(
        lines[2].starts_with("start ") && lines[3] == "end",
        "one command at a time: {text}"
    );
    let fence = |l: &str| -> u64 {
        l.trim_start_matches("start ")
            .parse()
            .unwrap_or_else(|e| panic!("HILOCK_FENCE is a number: {l:?}: {e}"))
    };
    assert!(
        fence(lines[2]) > fence(lines[0]),
        "the later hold's fence is larger: {text}"
    );
    eprintln!("{name}: {text}");
}

/// A second SIGTERM during a graceful leave ends the node at once (`docs/cli.md`, "hilock
/// node"; `ring::etcd::serve_config`): with another member paused (SIGSTOP), the new view
/// cannot settle, so the leaver is still leaving 400 ms after its first SIGTERM; the
/// second one ends it (status 0) long before the paused member's lease could run out and
/// let the leave finish. The leases here are of 20 s (the paused member's could run out
/// some 13 s after its pause), so a slow test or node cannot see the leave end that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_ends_a_graceful_leave_at_once() {
    tokio::time::timeout(Duration::from_secs(30), second_signal())
        .await
        .expect("the test ended within 30 s");
}

/// The etcd lease TTL of [`a_second_signal_ends_a_graceful_leave_at_once`].
const SECOND_SIGNAL_TTL_S: u32 = 20;

async fn second_signal() {
    let Some(mut r) = start_ring_ttl(
        "a_second_signal_ends_a_graceful_leave_at_once",
        "ring-second-signal",
        3,
        3,
        SECOND_SIGNAL_TTL_S,
    )
    .await
    else {
        return;
    };
    let paused = r.procs[2].take().unwrap();
    signal(&paused, "STOP");
    let mut leaver = r.procs[0].take().unwrap();
    let t = Instant::now();
    signal(&leaver, "TERM");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        leaver.0.try_wait().unwrap().is_none(),
        "the leaver is still leaving 400 ms after its SIGTERM (a member is paused)"
    );
    signal(&leaver, "TERM");
    let second = Instant::now();
    let st = loop {
        if let Some(st) = leaver.0.try_wait().unwrap() {
            break st;
        }
        // At once: well inside the time left until the paused member's lease could run
        // out (checked below); on an idle machine a few milliseconds.
        assert!(
            second.elapsed() < Duration::from_secs(5),
            "the second SIGTERM ends the leave at once"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    println!(
        "second SIGTERM: the leaver exited {st} {:?} after it ({:?} after the first)",
        second.elapsed(),
        t.elapsed()
    );
    assert!(st.success(), "a node asked to stop exits 0: {st}");
    assert!(
        t.elapsed() < earliest_expiry(&r.o),
        "ended before the paused member's lease could run out"
    );
    signal(&paused, "CONT");
}

/// A member of the first view whose node never starts is removed by the leader only once
/// it has been missing for two TTLs (`ring::etcd::lead`): earlier, its arcs would have no
/// member that has them. Slots 0 and 1 of the view [0, 1, 2] start; slot 2 never does.
/// etcd's view keeps slot 2 for two TTLs after the nodes started, then the view [0, 1]
/// is installed and settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_never_seen_alive_is_removed_after_two_ttls() {
    tokio::time::timeout(Duration::from_secs(30), never_seen())
        .await
        .expect("the test ended within 30 s");
}

async fn never_seen() {
    let test = "a_member_never_seen_alive_is_removed_after_two_ttls";
    let Some(e) = etcd::start_healthy(test) else {
        return;
    };
    let o = options(&e);
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..3).map(|_| free_port()).collect();
    let cfg = dir.path().join("ring.toml");
    std::fs::write(
        &cfg,
        ring_toml("ring-never-seen", &e.addr, &addrs, &[0, 1, 2]),
    )
    .unwrap();
    let started = Instant::now();
    let _procs = [spawn_node(0, &cfg), spawn_node(1, &cfg)];
    let two_ttls = Duration::from_secs(2 * u64::from(TTL_S));
    let mut removed = None;
    while started.elapsed() < two_ttls + Duration::from_secs(6) {
        if let Ok((v, _)) = ring_etcd::read_view(&o, "ring-never-seen").await {
            if v.epoch > 0 && !v.has(NodeId(2)) {
                removed = Some(started.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let removed = removed.expect("slot 2 removed from the view");
    println!("slot 2, never started: removed from the view {removed:?} after the nodes started");
    assert!(
        removed >= two_ttls,
        "removed {removed:?} after the start: before two TTLs ({two_ttls:?})"
    );
    let v = wait_view(
        &o,
        "ring-never-seen",
        &addrs,
        Duration::from_secs(10),
        |v, _| v.members == 0b011,
    )
    .await;
    assert!(
        v.epoch >= 2,
        "the view without slot 2 is a new epoch: {v:?}"
    );
}

/// `hilock lock PATH W --config F --client-id C -- sh -c 'echo $HILOCK_FENCE > OUT'`: the
/// fence of one hold, which must be granted.
fn fence_of_a_hold(r: &Ring, client: &str, out: &Path) -> u64 {
    let st = Command::new(BIN)
        .args(["lock", "--config"])
        .arg(&r.cfg)
        .args([
            "--client-id",
            client,
            "--timeout-ms",
            "15000",
            "/again",
            "W",
        ])
        .args([
            "--",
            "sh",
            "-c",
            &format!("echo $HILOCK_FENCE > {}", out.display()),
        ])
        .env("RUST_LOG", "hilock=warn")
        .status()
        .unwrap();
    assert!(st.success(), "hilock lock {client}: {st}");
    let text = std::fs::read_to_string(out).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("HILOCK_FENCE is a number: {text:?}: {e}"))
}

/// Waits until no member key of `r`'s cluster is left in etcd (every lease expired).
async fn wait_no_member(r: &Ring, limit: Duration) {
    let t = Instant::now();
    while ring_etcd::read_view(&r.o, r.cluster).await.unwrap().1 != 0 {
        assert!(
            t.elapsed() < limit,
            "member keys still in etcd after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The whole ring stopped and started again (`ring::etcd::start_again`, `docs/faults.md`,
/// "Ring engine"). SIGTERM to every node at once: each exits 0, the last member too (it
/// has nobody to hand its entries to; before, it kept waiting for a view that could not
/// settle). All three started again at once: one run starts the ring again with itself
/// at the next epoch, the others join, the view of the three settles and a lock is
/// granted with a larger fence than before. Then kill -9 of every node, the member keys
/// expire, and the three started again come back the same way (before, the first run
/// joined a view whose other members were dead and never settled, and the others gave up
/// after 30 s: the ring never came back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_whose_every_node_stopped_starts_again() {
    tokio::time::timeout(Duration::from_secs(60), every_node_stopped())
        .await
        .expect("the test ended within 60 s");
}

async fn every_node_stopped() {
    let name = "a_ring_whose_every_node_stopped_starts_again";
    let Some(mut r) = start_ring(name, "ring-all-stopped", 3).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fence");
    let mut fence = fence_of_a_hold(&r, "1", &out);
    let all = 0b111;
    let limit = Duration::from_secs(15);
    for round in ["SIGTERM", "kill -9"] {
        let mut procs: Vec<Proc> = r.procs.iter_mut().map(|p| p.take().unwrap()).collect();
        if round == "SIGTERM" {
            for p in &procs {
                signal(p, "TERM");
            }
            for (i, p) in procs.iter_mut().enumerate() {
                let st = exit_of(p, &format!("node {i} asked to stop"), limit).await;
                assert!(st.success(), "node {i} asked to stop exits 0: {st}");
            }
        }
        drop(procs); // kill -9 (no-op for the exited ones) and reap
        wait_no_member(&r, limit).await;
        let before = ring_etcd::read_view(&r.o, r.cluster).await.unwrap().0;
        for i in 0..3u16 {
            r.procs[usize::from(i)] = Some(spawn_node(i, &r.cfg));
        }
        let back = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, live| {
            v.members == all && live == all && v.epoch > before.epoch
        })
        .await;
        status_shows(&r, back);
        let again = fence_of_a_hold(&r, "2", &out);
        println!(
            "{round} of every node: view {} back, fence {fence} then {again}",
            back.epoch
        );
        assert!(
            again > fence,
            "{round}: a fence after the restart is larger"
        );
        fence = again;
    }
}

/// Waits until `p` exits (within `limit`) and returns its status.
async fn exit_of(p: &mut Proc, what: &str, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            return st;
        }
        assert!(t.elapsed() < limit, "{what} still running after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A new slot started first into a ring whose every member stopped
/// (`ring::etcd::before_joining`, `docs/engines/ring.md`, "Under faults"): members 0 and 1 are
/// killed with -9 and their member keys expire; slot 2, never a member, is started
/// alone. No member of the view has a member key for two TTLs, so it starts the ring
/// again with itself at the next epoch; the old members started later join it, and a
/// hold's fence is larger than before. (Before, slot 2 joined the dead view `{0, 1, 2}`
/// and never settled, and the old members, started later, waited for it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_slot_started_first_after_every_member_stopped_starts_the_ring_again() {
    tokio::time::timeout(Duration::from_secs(60), new_slot_first())
        .await
        .expect("the test ended within 60 s");
}

async fn new_slot_first() {
    let name = "a_new_slot_started_first_after_every_member_stopped_starts_the_ring_again";
    let Some(mut r) = start_ring_of(name, "ring-new-slot-first", 3, 2).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fence");
    let fence = fence_of_a_hold(&r, "1", &out);
    let limit = Duration::from_secs(15);
    drop(r.procs[0].take());
    drop(r.procs[1].take());
    wait_no_member(&r, limit).await;
    let before = ring_etcd::read_view(&r.o, r.cluster).await.unwrap().0;
    r.procs[2] = Some(spawn_node(2, &r.cfg));
    let alone = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, live| {
        v.members == 0b100 && live == 0b100 && v.epoch > before.epoch
    })
    .await;
    for i in 0..2 {
        r.procs[i] = Some(spawn_node(i as u16, &r.cfg));
    }
    let back = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, live| {
        v.members == 0b111 && live == 0b111 && v.epoch > alone.epoch
    })
    .await;
    status_shows(&r, back);
    let again = fence_of_a_hold(&r, "2", &out);
    println!(
        "view {} {{0, 1}} dead, slot 2 alone at {}, all three at {}; fence {fence} then {again}",
        before.epoch, alone.epoch, back.epoch
    );
    assert!(again > fence, "a fence after the restart is larger");
}

/// A node that joined a view whose other members stopped (`ring::etcd::bridge`): members 0
/// and 1 are paused (SIGSTOP) and slot 2 joins the view while their member keys still
/// live, so it waits for arcs that nobody can hand over once their leases expire. No
/// other member serves the view and slot 2 is not settled in it, so after two TTLs it
/// ends with exit 75 and gives its lease back; its next run (a supervisor's restart)
/// starts the ring again alone. The paused members, woken, find their leases lost and
/// exit 75; started again, they join. (Before, slot 2 waited for ever.) Leases of
/// [`JOINER_TTL_S`], so that slot 2 surely joins before the paused members' keys expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_whose_view_nobody_else_serves_ends_and_its_next_run_starts_again() {
    tokio::time::timeout(Duration::from_secs(90), joiner_of_a_dead_view())
        .await
        .expect("the test ended within 90 s");
}

/// The etcd lease TTL of [`a_joiner_whose_view_nobody_else_serves_ends_and_its_next_run_starts_again`].
const JOINER_TTL_S: u32 = 5;

async fn joiner_of_a_dead_view() {
    let name = "a_joiner_whose_view_nobody_else_serves_ends_and_its_next_run_starts_again";
    let Some(mut r) = start_ring_ttl(name, "ring-joiner-dead-view", 3, 2, JOINER_TTL_S).await
    else {
        return;
    };
    let limit = Duration::from_secs(30);
    for p in r.procs.iter().flatten() {
        signal(p, "STOP");
    }
    r.procs[2] = Some(spawn_node(2, &r.cfg));
    let t = Instant::now();
    loop {
        let (v, _) = ring_etcd::read_view(&r.o, r.cluster).await.unwrap();
        if v.members == 0b111 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(JOINER_TTL_S.into()),
            "slot 2 joins the view while the paused members' keys live (view {} {:#b})",
            v.epoch,
            v.members
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = exit_of(r.procs[2].as_mut().unwrap(), "slot 2", limit).await;
    assert_eq!(
        st.code(),
        Some(75),
        "the joiner of a dead view exits 75: {st}"
    );
    let before = ring_etcd::read_view(&r.o, r.cluster).await.unwrap().0;
    r.procs[2] = Some(spawn_node(2, &r.cfg));
    let alone = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, live| {
        v.members == 0b100 && live == 0b100 && v.epoch > before.epoch
    })
    .await;
    for i in 0..2 {
        let p = r.procs[i].as_mut().unwrap();
        signal(p, "CONT");
        let st = exit_of(p, &format!("woken node {i}"), limit).await;
        assert_eq!(st.code(), Some(75), "woken node {i} exits 75: {st}");
        r.procs[i] = Some(spawn_node(i as u16, &r.cfg));
    }
    let back = wait_view(&r.o, r.cluster, &r.addrs, limit, |v, live| {
        v.members == 0b111 && live == 0b111 && v.epoch > alone.epoch
    })
    .await;
    status_shows(&r, back);
}
