//! The ring engine (the Chord lock paper) as `hilock` processes: `hilock node --config F` with
//! `engine = "ring"`, `hilock ring membership`, `hilock ring join|leave`. Only 127.0.0.1,
//! every wait bounded; every child is killed when the test ends. `RING_LOG=hilock=info`
//! shows the children's logs (default `hilock=warn`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hilock_kernel::ring::NodeId;
use hilock_kernel::Mode;
use hilock_runtime::oracle::Oracle;
use hilock_runtime::ring::{key_of, ring, Admin, RingClient};

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/ring_load.rs"]
mod ring_load;
use ring_load::{slots, Run, CONTENDER, HELD};

#[path = "support/procs.rs"]
mod procs;
use procs::{free_port, Proc};

const BIN: &str = env!("CARGO_BIN_EXE_hilock");

/// A ring configuration: `n` slots at `addrs`, the service at `m`, first view `members`.
fn ring_toml(addrs: &[SocketAddr], m: SocketAddr, members: &[u16], lease_ms: u64) -> String {
    let mut s = format!(
        "engine = \"ring\"\ncluster = \"ring-cli\"\nsecret = \"a long shared secret\"\n\
         [ring]\nmembership = \"{m}\"\nmembers = {members:?}\nlease_ms = {lease_ms}\n"
    );
    for (i, a) in addrs.iter().enumerate() {
        s.push_str(&format!("[[nodes]]\nid = {i}\naddr = \"{a}\"\n"));
    }
    s
}

const GOOD: &str = r#"
engine = "ring"
cluster = "c"
secret = "0123456789"
id = 1
[ring]
membership = "127.0.0.1:7300"
members = [0, 2]
lease_ms = 700
[[nodes]]
id = 0
addr = "127.0.0.1:7200"
[[nodes]]
id = 1
addr = "127.0.0.1:7201"
[[nodes]]
id = 2
addr = "127.0.0.1:7202"
"#;

/// The engine is named in the file; a bad name or a missing `[ring]` field is one clear
/// line, from the library and from `hilock node`.
#[test]
fn the_engine_is_named_in_the_config_and_ring_errors_are_clear() {
    use hilock_runtime::config::Engine;
    let c = hilock_runtime::Config::from_toml(GOOD, None).unwrap();
    assert_eq!(c.engine, Engine::Ring);
    let r = c.ring.clone().unwrap();
    assert_eq!(r.membership, "127.0.0.1:7300".parse().unwrap());
    assert_eq!(r.members, 0b101);
    assert_eq!(r.lease, Duration::from_millis(700));
    // Without `members`: every node; without `lease_ms`: the default.
    let c = hilock_runtime::Config::from_toml(
        &GOOD
            .replace("members = [0, 2]\n", "")
            .replace("lease_ms = 700\n", ""),
        None,
    )
    .unwrap();
    let r = c.ring.unwrap();
    assert_eq!(r.members, 0b111);
    assert_eq!(
        r.lease,
        Duration::from_millis(hilock_runtime::config::DEFAULT_RING_LEASE_MS)
    );
    // The token engine stays the default.
    let token = GOOD.replace("engine = \"ring\"\n", "");
    let token = &token[..token.find("[ring]").unwrap()].to_string();
    let token = format!("{token}{}", &GOOD[GOOD.find("[[nodes]]").unwrap()..]);
    let c = hilock_runtime::Config::from_toml(&token, None).unwrap();
    assert_eq!((c.engine, c.ring), (Engine::Token, None));

    let many: String = (0..17)
        .map(|i| format!("[[nodes]]\nid = {i}\naddr = \"127.0.0.1:{}\"\n", 7200 + i))
        .collect();
    let head = &GOOD[..GOOD.find("[[nodes]]").unwrap()];
    let cases = [
        (
            GOOD.replace("engine = \"ring\"", "engine = \"rnig\""),
            "engine \"rnig\": expected \"token\" or \"ring\"",
        ),
        (
            GOOD.replace(
                "[ring]\nmembership = \"127.0.0.1:7300\"\nmembers = [0, 2]\nlease_ms = 700\n",
                "",
            ),
            "engine = \"ring\" needs a [ring] table",
        ),
        (
            GOOD.replace("membership = \"127.0.0.1:7300\"\n", ""),
            "membership",
        ),
        (
            GOOD.replace("engine = \"ring\"\n", ""),
            "a [ring] table needs engine = \"ring\"",
        ),
        (
            GOOD.replace("members = [0, 2]", "members = [0, 3]"),
            "ring member 3 is not one of the configured nodes",
        ),
        (
            GOOD.replace("members = [0, 2]", "members = []"),
            "at least one node",
        ),
        (
            GOOD.replace("members = [0, 2]", "members = [0, 0, 2]"),
            "ring member 0 is named twice",
        ),
        (
            GOOD.replace("127.0.0.1:7300", "127.0.0.1:7201"),
            "[ring] membership 127.0.0.1:7201 is node 1's address",
        ),
        (GOOD.replace("lease_ms = 700", "lease_ms = 0"), "lease_ms 0"),
        (GOOD.replace("lease_ms = 700", "lease = 700"), "lease"),
        (
            format!("{head}{many}"),
            "the ring has 16 slots; 17 nodes configured",
        ),
    ];
    for (text, want) in &cases {
        let e = hilock_runtime::Config::from_toml(text, None).unwrap_err();
        assert!(e.contains(want), "{e:?} should mention {want:?}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
    // The same through the command: exit 2, one line on stderr.
    let dir = tempfile::tempdir().unwrap();
    for (i, (text, want)) in cases.iter().take(2).enumerate() {
        let f = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let out = Command::new(BIN)
            .args(["node", "--config"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err:?} should mention {want:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    }
}

/// Polls until the service answers.
async fn admin(m: SocketAddr) -> Admin {
    let t = Instant::now();
    loop {
        if let Ok(a) = Admin::connect(m, Duration::from_secs(2)).await {
            return a;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the membership service listens"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three `hilock node` processes of a ring (slots 0–2, lease `lease_ms`) and its `hilock
/// ring membership` process, configured in `dir/ring.toml`, once all three are up.
struct ThreeNodes {
    addrs: Vec<SocketAddr>,
    maddr: SocketAddr,
    cfg: std::path::PathBuf,
    service: Proc,
    nodes: Vec<Proc>,
    view: hilock_kernel::ring::View,
}

async fn three_nodes(dir: &Path, lease_ms: u64) -> ThreeNodes {
    let addrs: Vec<SocketAddr> = (0..3).map(|_| free_port()).collect();
    let maddr = free_port();
    let cfg = dir.join("ring.toml");
    std::fs::write(&cfg, ring_toml(&addrs, maddr, &[0, 1, 2], lease_ms)).unwrap();
    let service = spawn(&["ring", "membership"], &cfg);
    let mut adm = admin(maddr).await;
    let nodes = (0..3)
        .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
        .collect();
    let view = adm
        .wait_for(Duration::from_secs(20), |s| s.up == 0b111)
        .await
        .unwrap()
        .view;
    ThreeNodes {
        addrs,
        maddr,
        cfg,
        service,
        nodes,
        view,
    }
}

fn spawn(args: &[&str], config: &Path) -> Proc {
    Proc(command(args, config).spawn().expect("hilock starts"))
}

/// `hilock ARGS --config F`, its stdout discarded, logs as `RING_LOG` says ([`spawn`]).
fn command(args: &[&str], config: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .env(
            "RUST_LOG",
            std::env::var("RING_LOG").unwrap_or("hilock=warn".into()),
        );
    c
}

/// Waits at most `limit` for `p` to exit: its status code.
async fn exit_of(p: &mut Proc, limit: Duration) -> Option<i32> {
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            return st.code();
        }
        assert!(t.elapsed() < limit, "the process exits within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A ring of `n` slots with `members` in its first view, in `dir/ring.toml`: its
/// membership service running, and an administrator's connection to it.
async fn ring_of(
    dir: &Path,
    n: usize,
    members: &[u16],
) -> (Vec<SocketAddr>, std::path::PathBuf, Proc, Admin) {
    let addrs: Vec<SocketAddr> = (0..n).map(|_| free_port()).collect();
    let maddr = free_port();
    let cfg = dir.join("ring.toml");
    std::fs::write(&cfg, ring_toml(&addrs, maddr, members, 1000)).unwrap();
    let service = spawn(&["ring", "membership"], &cfg);
    let adm = admin(maddr).await;
    (addrs, cfg, service, adm)
}

/// Waits (at most `limit`) until every node at `addrs` answers a probe (it serves).
async fn until_serving(addrs: &[SocketAddr], limit: Duration) {
    let t = Instant::now();
    for a in addrs {
        while hilock_runtime::ring::probe(*a, Duration::from_millis(200))
            .await
            .is_none()
        {
            assert!(t.elapsed() < limit, "node at {a} serves");
        }
    }
}

/// Runs `hilock ring ARGS --config F` to its end (at most `limit`): its exit code, stdout
/// and stderr.
async fn ring_cmd(args: &[&str], config: &Path, limit: Duration) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(
        limit,
        tokio::process::Command::new(BIN)
            .arg("ring")
            .args(args)
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "hilock=warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("hilock ring ends in time")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Five `hilock node` processes (`engine = "ring"`) and `hilock ring membership`, load
/// from twelve clients and a lock held throughout: `hilock ring join` of a sixth node,
/// then `hilock ring leave` of the held lock's primary (its entries are handed over while
/// clients hold locks; its process exits by itself, status 0). The history checker
/// reports 0 violations; the held lock survives the leave (refused to a contender, granted
/// after its holder's unlock); afterwards every path is free; every request is answered.
/// A join of a slot whose node does not run fails after `--timeout-ms`, exit 2, one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_join_and_leave_commands_hand_over_held_locks_under_load() {
    tokio::time::timeout(Duration::from_secs(120), join_and_leave())
        .await
        .expect("the test ended within 120 s");
}

async fn join_and_leave() {
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..6).map(|_| free_port()).collect();
    let maddr = free_port();
    let cfg = dir.path().join("ring.toml");
    std::fs::write(&cfg, ring_toml(&addrs, maddr, &[0, 1, 2, 3, 4], 1000)).unwrap();
    let _service = spawn(&["ring", "membership"], &cfg);
    let mut adm = admin(maddr).await;
    let mut procs: Vec<Option<Proc>> = (0..6).map(|_| None).collect();
    for (i, p) in procs.iter_mut().enumerate().take(5) {
        *p = Some(spawn(&["node", "--id", &i.to_string()], &cfg));
    }
    let limit = Duration::from_secs(15);
    adm.wait_for(limit, |s| s.up == 0b1_1111).await.unwrap();

    let slots = slots(&addrs);
    let mut run = Run::start(&slots, maddr, 0x5851_f42d_4c95_7f2d).await;
    let grants = run.load.grants.clone();
    tokio::time::sleep(Duration::from_millis(400)).await;

    // `hilock ring join` of slot 5, whose node runs.
    procs[5] = Some(spawn(&["node", "--id", "5"], &cfg));
    let (code, out, err) = ring_cmd(&["join", "--id", "5"], &cfg, limit).await;
    assert_eq!(code, Some(0), "ring join: {out} {err}");
    assert!(
        out.starts_with("joined 5: view epoch 1 members [0, 1, 2, 3, 4, 5]"),
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    // `hilock ring leave` of the held lock's primary, while the lock is held and the load
    // runs.
    let v = adm
        .wait_for(limit, |s| s.view.has(NodeId(5)))
        .await
        .unwrap()
        .view;
    let leaver = ring().lookup(v, key_of(HELD)).unwrap();
    let before = grants.load(Relaxed);
    let (code, out, err) = ring_cmd(&["leave", "--id", &leaver.0.to_string()], &cfg, limit).await;
    assert_eq!(code, Some(0), "ring leave: {out} {err}");
    assert!(
        out.starts_with(&format!("left {}: view epoch 2", leaver.0)),
        "{out}"
    );
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
    let v = adm
        .wait_for(limit, |s| !s.view.has(leaver))
        .await
        .unwrap()
        .view;
    assert_ne!(ring().lookup(v, key_of(HELD)), Some(leaver));
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across the leave of its primary is refused to another client"
    );
    ring_load::until_grants_pass(&grants, before, limit, "the leave").await;

    run.finish(limit, "ring join/leave processes").await;
    println!("ring join/leave processes: leaver node {}", leaver.0);
    assert!(grants.load(Relaxed) > 200);

    check_status(&cfg, limit).await;

    // A join whose node does not run: exit 2 after the timeout, one line.
    let (code, _, err) = ring_cmd(
        &["join", "--id", &leaver.0.to_string(), "--timeout-ms", "500"],
        &cfg,
        limit,
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("withdrawn") && err.contains("is not connected"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
}

/// `hilock ring join` of a slot whose node does not run, `--timeout-ms 1500`: exit 2 and
/// one line saying the join is withdrawn because the node is not connected; the node
/// started afterwards stays out of the view (the join did not happen later). `hilock ring
/// leave` of that running non-member: exit 2, one line "not a member", and the node keeps
/// running. A join still queued (asked without a timeout, its node down) is withdrawn by
/// a leave of the slot, which says so; the node started afterwards stays out. A join
/// asked with the node running then joins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_join_is_withdrawn_and_a_leave_of_a_non_member_says_so() {
    tokio::time::timeout(Duration::from_secs(90), withdrawn_join())
        .await
        .expect("the test ended within 90 s");
}

/// Once slot 2's node is connected, slot 2 is not in the view for 2.5 s.
async fn stays_out(adm: &mut Admin, why: &str) {
    adm.wait_for(Duration::from_secs(15), |s| s.up & 0b100 != 0)
        .await
        .unwrap();
    let joined = adm
        .wait_for(Duration::from_millis(2500), |s| s.view.has(NodeId(2)))
        .await;
    assert!(joined.is_err(), "{why}: slot 2 joined: {joined:?}");
}

async fn withdrawn_join() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cfg, _service, mut adm) = ring_of(dir.path(), 3, &[0, 1]).await;
    let _nodes: Vec<Proc> = (0..2)
        .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
        .collect();
    let limit = Duration::from_secs(15);
    adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    let (code, out, err) =
        ring_cmd(&["join", "--id", "2", "--timeout-ms", "1500"], &cfg, limit).await;
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains("join of slot 2 withdrawn after")
            && err.contains("node 2 is not connected to the membership service"),
        "{err}"
    );
    let mut two = spawn(&["node", "--id", "2"], &cfg);
    stays_out(&mut adm, "after the timed-out join").await;

    let (code, out, err) = ring_cmd(&["leave", "--id", "2"], &cfg, limit).await;
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains("slot 2 is not a member") && !err.contains("withdrawn"),
        "{err}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        two.0.try_wait().unwrap().is_none(),
        "the non-member runs on"
    );

    // A join still queued, its node down: a leave withdraws it.
    drop(two);
    adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    adm.ask(hilock_runtime::ring::Request::Join(2)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, out, err) = ring_cmd(&["leave", "--id", "2"], &cfg, limit).await;
    assert_eq!(code, Some(2), "{out} {err}");
    assert!(
        err.contains("slot 2 is not a member")
            && err.contains("its join, which was still queued, is withdrawn"),
        "{err}"
    );
    let _two = spawn(&["node", "--id", "2"], &cfg);
    stays_out(&mut adm, "after the leave").await;

    let (code, out, err) = ring_cmd(&["join", "--id", "2"], &cfg, limit).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(
        out.starts_with("joined 2: view epoch 1 members [0, 1, 2]"),
        "{out}"
    );

    // Down to one member; its leave is refused at once (before, it was queued and the
    // line said it "completes on its own", which it never did).
    for n in ["2", "1"] {
        let (code, out, err) = ring_cmd(&["leave", "--id", n], &cfg, limit).await;
        assert_eq!(code, Some(0), "leave {n}: {out} {err}");
    }
    let t = std::time::Instant::now();
    let (code, out, err) = ring_cmd(&["leave", "--id", "0"], &cfg, limit).await;
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains("slot 0 is the only member") && !err.contains("completes on its own"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// Ctrl-C (SIGINT), SIGTERM or SIGHUP of a `hilock ring join` whose join is queued (its node does
/// not run): exit 2 and one line, "join of slot 2 interrupted after …: withdrawn, it does
/// not happen later"; the node started afterwards stays out of the view. (Before, the
/// process died of the signal and the join stayed queued: the node joined when it started.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_join_is_withdrawn() {
    tokio::time::timeout(Duration::from_secs(90), interrupted_join())
        .await
        .expect("the test ended within 90 s");
}

async fn interrupted_join() {
    let limit = Duration::from_secs(15);
    for sig in ["INT", "TERM", "HUP"] {
        let dir = tempfile::tempdir().unwrap();
        let (_, cfg, _service, mut adm) = ring_of(dir.path(), 3, &[0, 1]).await;
        let _nodes: Vec<Proc> = (0..2)
            .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
            .collect();
        adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
        let mut join = Proc(
            command(&["ring", "join", "--id", "2"], &cfg)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        adm.wait_for(limit, |s| s.queued > 0).await.unwrap();
        signal(&join, sig);
        let code = exit_of(&mut join, limit).await;
        let mut err = String::new();
        std::io::Read::read_to_string(&mut join.0.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(code, Some(2), "SIG{sig}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "SIG{sig}: one line: {err:?}"
        );
        assert!(
            err.contains("join of slot 2 interrupted after")
                && err.contains("withdrawn, it does not happen later"),
            "SIG{sig}: {err}"
        );
        let _two = spawn(&["node", "--id", "2"], &cfg);
        stays_out(&mut adm, &format!("after SIG{sig}")).await;
    }
}

/// A ring node that is not a member (started, never joined) whose membership service is
/// killed stops on its own as a member does: exit 75, "the membership service at … went
/// away; it stopped" (exit 0 is for a requested leave only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_member_whose_membership_service_goes_away_exits_75() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, cfg, service, mut adm) = ring_of(dir.path(), 2, &[0]).await;
    let limit = Duration::from_secs(15);
    let mut nodes: Vec<Proc> = (0..2)
        .map(|i| {
            let mut c = command(&["node", "--id", &i.to_string()], &cfg);
            Proc(c.stderr(Stdio::piped()).spawn().unwrap())
        })
        .collect();
    adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    // Both serve (granted their first lease: a node whose service goes away before that
    // did not start, exit 2).
    until_serving(&addrs, limit).await;
    drop(service);
    for (i, p) in nodes.iter_mut().enumerate() {
        assert_eq!(exit_of(p, limit).await, Some(75), "node {i}");
        let mut err = String::new();
        std::io::Read::read_to_string(p.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        let last = err.trim_end().lines().last().unwrap_or("");
        assert!(
            last.starts_with(&format!(
                "hilock: error: ring node {i}: the membership service at"
            )) && last.ends_with("went away; it stopped"),
            "node {i}: {err}"
        );
    }
}

/// A `hilock lock` holding a static ring's lock ends with 75 and kills its command as
/// soon as the membership service goes away, not a check bound later: the ring's nodes
/// stop with the service, and a ring started again (its epochs from 0 again) would grant
/// the lock to another client while the old command still ran (`docs/faults.md`, "Ring
/// engine"). Before, the holder's checks waited out their bound (here 20 s) for an answer
/// of the view they knew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_holder_whose_membership_service_goes_away_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, cfg, service, mut adm) = ring_of(dir.path(), 2, &[0, 1]).await;
    let limit = Duration::from_secs(15);
    let _nodes: Vec<Proc> = (0..2)
        .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
        .collect();
    adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    until_serving(&addrs, limit).await;
    let log = dir.path().join("held");
    let script = format!("echo in >> {0}; sleep 30; echo out >> {0}", log.display());
    let holder = spawn_w(
        &cfg,
        "7",
        &["--timeout-ms", "20000"],
        "/svc",
        script,
        Duration::from_secs(60),
    );
    let t = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|s| s.contains("in")) {
        assert!(t.elapsed() < Duration::from_secs(30), "the command started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gone = Instant::now();
    drop(service);
    let (code, err, _) = holder.await.unwrap();
    let took = gone.elapsed();
    assert_eq!(code, Some(75), "{err}");
    assert!(
        took < Duration::from_secs(5),
        "ended when the service went away, not 20 s later: {took:?}"
    );
    assert!(
        err.contains("lock on /svc lost: the membership service at") && err.contains("went away"),
        "{err}"
    );
    assert!(!std::fs::read_to_string(&log).unwrap().contains("out"));
}

/// A second ring node with a running node's id — `hilock node --config F --id 0` and
/// `hilock ring-node --id 0 …` — exits 2 with the one line a token node gives: "cannot
/// listen on ADDR: Address already in use (is another hilock node with id 0 running?)".
/// A second `hilock ring membership` of the file asks the same of the service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_ring_node_or_service_is_asked_about_the_running_one() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, cfg, _service, mut adm) = ring_of(dir.path(), 2, &[0, 1]).await;
    let limit = Duration::from_secs(15);
    let _nodes: Vec<Proc> = (0..2)
        .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
        .collect();
    adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    let maddr = hilock_runtime::Config::from_file(&cfg, Some(0))
        .unwrap()
        .ring
        .unwrap()
        .membership
        .to_string();
    let peers = format!("{},{}", addrs[0], addrs[1]);
    let file = command(&["node", "--id", "0"], &cfg);
    let mut bare = Command::new(BIN);
    bare.args([
        "ring-node",
        "--id",
        "0",
        "--peers",
        &peers,
        "--membership",
        &maddr,
    ]);
    for (what, c) in [("node", file), ("ring-node", bare)] {
        let out = tokio::process::Command::from(c).kill_on_drop(true).output();
        let out = tokio::time::timeout(limit, out)
            .await
            .expect("the second node exits")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{what}: one line: {err:?}"
        );
        let err = err.trim_end();
        assert!(
            err.starts_with(&format!("hilock: error: cannot listen on {}: ", addrs[0]))
                && err.ends_with("(is another hilock node with id 0 running?)"),
            "{what}: {err}"
        );
    }
    let out = tokio::process::Command::from(command(&["ring", "membership"], &cfg))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, out)
        .await
        .expect("the second service exits")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let err = err.trim_end();
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.starts_with(&format!("hilock: error: cannot listen on {maddr}: "))
            && err.ends_with("(is this ring's membership service running already?)"),
        "{err}"
    );
}

/// `hilock ring status` tells a member that does not answer: after kill -9 of node 2
/// (lease 10 s: still a member), exit 1 (as `hilock dump` when a node does not answer),
/// the text says "not settled: member [2] not answering", the JSON has `"settled": false`
/// and `"down": [2]`. `hilock status --config F --id 2` is refused with one line (a ring's
/// status covers every slot). With the membership service not answering too (SIGSTOP),
/// it still prints what the nodes report (their view, their entries) and the service's
/// error, exit 1; with every node down as well, exit 2 and one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_status_tells_a_member_or_the_service_that_does_not_answer() {
    tokio::time::timeout(Duration::from_secs(90), status_of_a_broken_ring())
        .await
        .expect("the test ended within 90 s");
}

async fn status_of_a_broken_ring() {
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        cfg,
        maddr,
        service,
        mut nodes,
        view,
        ..
    } = three_nodes(dir.path(), 10_000).await;
    let limit = Duration::from_secs(20);
    let (code, out, err) = ring_cmd(&["status"], &cfg, limit).await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.lines().next().unwrap().ends_with(", settled"), "{out}");

    drop(nodes.pop()); // kill -9 of node 2
    let (code, out, err) = ring_cmd(&["status"], &cfg, limit).await;
    assert_eq!(code, Some(1), "{out} {err}");
    assert!(
        out.lines()
            .next()
            .unwrap()
            .ends_with(", not settled: member [2] not answering or without a lease"),
        "{out}"
    );
    let (code, out, err) = ring_cmd(&["status", "--json"], &cfg, limit).await;
    assert_eq!(code, Some(1), "{out} {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["settled"], false, "{out}");
    assert_eq!(doc["down"], serde_json::json!([2]), "{out}");
    assert_eq!(doc["members"], serde_json::json!([0, 1, 2]), "{out}");
    assert!(doc["nodes"][2]["node"].is_null(), "{out}");

    let by_id = tokio::process::Command::new(BIN)
        .args(["status", "--id", "2", "--config"])
        .arg(&cfg)
        .kill_on_drop(true)
        .output();
    let by_id = tokio::time::timeout(limit, by_id).await.unwrap().unwrap();
    let err = String::from_utf8_lossy(&by_id.stderr);
    assert_eq!(by_id.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains("--id 2") && err.contains("without --id"),
        "{err}"
    );

    // A paused service (its nodes run on while their lease lasts).
    signal(&service, "STOP");
    let quick = ["--timeout-ms", "1000"];
    let (code, out, err) = ring_cmd(&["status", "--json", quick[0], quick[1]], &cfg, limit).await;
    assert_eq!(code, Some(1), "{out} {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        doc["membership_error"]
            .as_str()
            .is_some_and(|e| e.contains(&maddr.to_string())),
        "{out}"
    );
    assert_eq!(doc["epoch"], view.epoch, "{out}");
    assert_eq!(doc["down"], serde_json::json!([2]), "{out}");
    for i in 0..2 {
        assert_eq!(
            doc["nodes"][i]["node"]["epoch"], view.epoch,
            "node {i}: {out}"
        );
    }
    let (code, out, _) = ring_cmd(&["status", quick[0], quick[1]], &cfg, limit).await;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("ring: 16-bit identifiers, r = 2; no view from the membership service"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("node: epoch")).count(),
        2,
        "{out}"
    );

    drop(nodes);
    let (code, out, err) = ring_cmd(&["status", quick[0], quick[1]], &cfg, limit).await;
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains("no node of the file answers either"), "{err}");
}

/// `hilock ring join|leave --config F --id SLOT` of a slot the file has no node for is
/// refused at once, the membership service running: exit 2 and one line naming the slot,
/// long before `--timeout-ms` (no node of the file can run in the slot, so the change
/// would only wait the timeout out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_join_and_leave_of_a_slot_the_file_has_no_node_for_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = [free_port(), free_port()];
    let maddr = free_port();
    let cfg = dir.path().join("ring.toml");
    std::fs::write(&cfg, ring_toml(&addrs, maddr, &[0, 1], 1000)).unwrap();
    let _service = spawn(&["ring", "membership"], &cfg);
    admin(maddr).await;
    for verb in ["join", "leave"] {
        let t = Instant::now();
        let (code, out, err) = ring_cmd(
            &[verb, "--id", "9", "--timeout-ms", "3000"],
            &cfg,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(code, Some(2), "{verb}: {out} {err}");
        assert!(
            err.contains("no slot 9") && err.contains("slots 0 to 1"),
            "{verb}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{verb}: refused after {:?}, not at once",
            t.elapsed()
        );
    }
}

/// A `hilock ring-node` whose `--peers` swaps slots 0 and 1 (its own slot 2 in place) is
/// refused when it connects to the membership service, whose file says otherwise: exit 2
/// within seconds and one line naming each slot and both its addresses, before it was
/// granted a lease or counted as connected. `hilock ring join --id 2` then fails at once
/// (exit 2, one line naming the slots) instead of waiting out `--timeout-ms`; the members
/// keep running in the first view. Node 2 started from the file afterwards joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_node_whose_peers_order_differs_is_refused_and_its_join_fails_at_once() {
    tokio::time::timeout(Duration::from_secs(90), swapped_peers())
        .await
        .expect("the test ended within 90 s");
}

async fn swapped_peers() {
    let dir = tempfile::tempdir().unwrap();
    let (addrs, cfg, _service, mut adm) = ring_of(dir.path(), 3, &[0, 1]).await;
    let limit = Duration::from_secs(15);
    let _members: Vec<Proc> = (0..2)
        .map(|i| spawn(&["node", "--id", &i.to_string()], &cfg))
        .collect();
    let first = adm.wait_for(limit, |s| s.up == 0b11).await.unwrap().view;
    let maddr = hilock_runtime::Config::from_file(&cfg, Some(0))
        .unwrap()
        .ring
        .unwrap()
        .membership;
    let swapped = format!("{},{},{}", addrs[1], addrs[0], addrs[2]);
    let t = Instant::now();
    let out = tokio::process::Command::new(BIN)
        .args(["ring-node", "--id", "2", "--peers", &swapped])
        .args(["--membership", &maddr.to_string()])
        .env("RUST_LOG", "hilock=warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(5), out)
        .await
        .expect("the node with swapped --peers exits within 5 s")
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let err = err.trim_end();
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert_eq!(
        err,
        format!(
            "hilock: error: ring node 2: slot 0 is {} here but {} at the membership service \
             at {maddr}, slot 1 is {} here but {} there: start every node with the same \
             --peers order",
            addrs[1], addrs[0], addrs[0], addrs[1]
        )
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let (code, out, err) = ring_cmd(
        &["join", "--id", "2", "--timeout-ms", "20000"],
        &cfg,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(code, Some(2), "{out} {err}");
    let err = err.trim_end();
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.starts_with("hilock: error: join of slot 2: its node was refused: ")
            && err.contains(&format!(
                "slot 0 is {} at that node but {} at the membership service",
                addrs[1], addrs[0]
            ))
            && err.contains(&format!(
                "slot 1 is {} at that node but {}",
                addrs[0], addrs[1]
            ))
            && err.ends_with("start every node with the same --peers order"),
        "{err}"
    );
    // Nothing changed: both members connected, the first view, settled.
    let s = adm.wait_for(limit, |s| s.up == 0b11).await.unwrap();
    assert_eq!(s.view, first, "{s:?}");
    assert_eq!(s.queued, 0, "{s:?}");
    // Node 2 from the file (the service's addresses) is let in and joins.
    let _two = spawn(&["node", "--id", "2"], &cfg);
    adm.wait_for(limit, |s| s.up == 0b111).await.unwrap();
    let (code, out, err) = ring_cmd(
        &["join", "--id", "2", "--timeout-ms", "20000"],
        &cfg,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.starts_with("joined 2: "), "{out}");
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

/// Crash detection by the successor under the lease rule, with `hilock node` processes
/// (lease 1000 ms) under load and a lock held throughout:
/// - SIGSTOP of the held lock's primary (a pause: its sockets stay open): its successor
///   suspects it within three beats (0.3 lease), but the service removes it only after its
///   lease ran out — at least 0.75 lease after the pause, as it renews every quarter lease;
///   on SIGCONT it looks at its clock first, answers nothing and exits (status 75: it
///   stopped on its own);
/// - kill -9 of the new primary of the held lock: removed once its successor suspects it
///   and its lease ran out.
///
/// After each, the held lock is refused to a contender; at the end the history checker
/// reports 0 violations, every request was answered and every path is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successor_detects_a_pause_and_kill_9_removal_only_after_the_lease() {
    tokio::time::timeout(Duration::from_secs(120), crash_detection())
        .await
        .expect("the test ended within 120 s");
}

async fn crash_detection() {
    const LEASE: Duration = Duration::from_millis(1000);
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..5).map(|_| free_port()).collect();
    let maddr = free_port();
    let cfg = dir.path().join("ring.toml");
    let toml = ring_toml(&addrs, maddr, &[0, 1, 2, 3, 4], LEASE.as_millis() as u64);
    std::fs::write(&cfg, toml).unwrap();
    let _service = spawn(&["ring", "membership"], &cfg);
    let mut adm = admin(maddr).await;
    let mut procs: Vec<Option<Proc>> = (0..5)
        .map(|i| Some(spawn(&["node", "--id", &i.to_string()], &cfg)))
        .collect();
    let limit = Duration::from_secs(15);
    adm.wait_for(limit, |s| s.up == 0b1_1111).await.unwrap();

    let slots = slots(&addrs);
    let mut run = Run::start(&slots, maddr, 0x1405_7b7e_f767_814f).await;
    let grants = run.load.grants.clone();
    tokio::time::sleep(Duration::from_millis(400)).await;

    // A pause of the held lock's primary.
    let v = adm.wait_for(limit, |_| true).await.unwrap().view;
    let paused = ring().lookup(v, key_of(HELD)).unwrap();
    let t = Instant::now();
    signal(procs[paused.idx()].as_ref().unwrap(), "STOP");
    let v = adm
        .wait_for(limit, |s| !s.view.has(paused))
        .await
        .unwrap()
        .view;
    let took = t.elapsed();
    println!("paused node {} removed after {took:?}", paused.0);
    assert!(
        took >= LEASE.mul_f64(0.75),
        "node {} removed {took:?} after its pause: before its lease ran out",
        paused.0
    );
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across the pause of its primary is refused to another client"
    );
    // Woken, it answers nothing and exits once it sees it was removed.
    let mut p = procs[paused.idx()].take().unwrap();
    signal(&p, "CONT");
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            // It stopped on its own (its lease ran out): 75, so a supervisor restarts it.
            assert_eq!(st.code(), Some(75), "the woken node exits 75: {st}");
            break;
        }
        assert!(t.elapsed() < limit, "the woken node exits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // kill -9 of the new primary of the held lock.
    let victim = ring().lookup(v, key_of(HELD)).unwrap();
    let before = grants.load(Relaxed);
    let t = Instant::now();
    drop(procs[victim.idx()].take()); // SIGKILL and reap
    adm.wait_for(limit, |s| !s.view.has(victim)).await.unwrap();
    println!("killed node {} removed after {:?}", victim.0, t.elapsed());
    assert!(
        !run.contender.lock(HELD).await.unwrap(),
        "the lock held across kill -9 of its primary is refused to another client"
    );
    ring_load::until_grants_pass(&grants, before, limit, "the kill").await;

    run.finish(limit, "ring crash detection").await;
}

/// A `hilock lock` command of client `id` that appends `start ID NANOS` and
/// `end ID NANOS` to `log` around `sleep SECS`.
fn logged(log: &Path, id: &str, secs: &str) -> String {
    format!(
        "echo \"start {id} $(date +%s%N)\" >> {l}; sleep {secs}; echo \"end {id} $(date +%s%N)\" >> {l}",
        l = log.display()
    )
}

/// kill -9 of a held lock's primary and `hilock node` started again at once with the same
/// slot and address (lease 2000 ms: the old run's lease still runs). Client 1 holds the
/// path in `hilock lock` for 5 s; client 2 asks for it just after the restart. The
/// restarted run must not answer for the range with an empty table: the history of the
/// two commands (their start and end times) shows no overlap, client 1's hold checks keep
/// finding its entry (exit 0), and client 2 is granted only after client 1's unlock. The
/// restarted slot is a member again afterwards and the path is free at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_and_restarted_within_its_lease_keeps_the_held_lock() {
    tokio::time::timeout(Duration::from_secs(90), restart_within_lease())
        .await
        .expect("the test ended within 90 s");
}

async fn restart_within_lease() {
    const LEASE: Duration = Duration::from_millis(2000);
    const PATH: &str = "/restart/held";
    let dir = tempfile::tempdir().unwrap();
    let addrs: Vec<SocketAddr> = (0..4).map(|_| free_port()).collect();
    let maddr = free_port();
    let cfg = dir.path().join("ring.toml");
    let toml = ring_toml(&addrs, maddr, &[0, 1, 2, 3], LEASE.as_millis() as u64);
    std::fs::write(&cfg, toml).unwrap();
    let _service = spawn(&["ring", "membership"], &cfg);
    let mut adm = admin(maddr).await;
    let mut procs: Vec<Option<Proc>> = (0..4)
        .map(|i| Some(spawn(&["node", "--id", &i.to_string()], &cfg)))
        .collect();
    let limit = Duration::from_secs(20);
    let v = adm.wait_for(limit, |s| s.up == 0b1111).await.unwrap().view;
    let victim = ring().lookup(v, key_of(PATH)).unwrap();

    // Client 1 holds the path for 5 s.
    let log = dir.path().join("holds.log");
    let timeout = ["--timeout-ms", "15000"];
    let one = spawn_w(&cfg, "1", &timeout, PATH, logged(&log, "1", "5"), limit);
    let t = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("start")) {
        assert!(t.elapsed() < limit, "client 1's command starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // kill -9 of its primary, started again at once.
    drop(procs[victim.idx()].take()); // SIGKILL and reap
    let killed = Instant::now();
    procs[victim.idx()] = Some(spawn(&["node", "--id", &victim.0.to_string()], &cfg));
    let two = spawn_w(&cfg, "2", &timeout, PATH, logged(&log, "2", "0"), limit);
    // The slot leaves the view only once the earlier run's lease ran out (renewed every
    // quarter lease: at least 0.75 L after the kill), then joins again; meanwhile client 1
    // still holds, and the rejoined node was handed the entry naming it.
    // (The first settled view after the kill: the view without the slot, or already the
    // join's if the restarted run asked for its lease before the others reported.)
    adm.wait_for(limit, |s| s.view.epoch > v.epoch)
        .await
        .unwrap();
    let removed = killed.elapsed();
    let back = adm
        .wait_for(limit, |s| s.view.has(victim) && s.view.epoch > v.epoch)
        .await
        .unwrap()
        .view;
    let rejoined = killed.elapsed();
    assert!(
        removed >= LEASE.mul_f64(0.75),
        "node {} removed {removed:?} after the kill: before the earlier run's lease ran out",
        victim.0
    );
    assert_eq!(
        back,
        v.leave(victim).join(victim),
        "first the view without the slot, then its join"
    );
    let mut reports = Vec::new();
    for a in &addrs {
        reports.push(hilock_runtime::ring::probe(*a, limit).await);
    }
    assert!(
        reports[victim.idx()]
            .as_ref()
            .is_some_and(|r| r.entries.contains(&(key_of(PATH).0, Some(1)))),
        "the rejoined node holds client 1's entry: {reports:?}"
    );

    let (code1, err1, _) = one.await.unwrap();
    let (code2, err2, _) = two.await.unwrap();
    let granted = killed.elapsed();

    let events = ring_load::hold_events(&log, "");
    let order: Vec<(bool, u16)> = events.iter().map(|e| (e.1, e.2)).collect();
    assert_eq!(
        order,
        [(true, 1), (false, 1), (true, 2), (false, 2)],
        "client 2 held the path while client 1 did: {events:?}; client 1: {err1}; client 2: {err2}"
    );
    assert_eq!(code1, Some(0), "client 1 kept its hold to the end: {err1}");
    assert_eq!(
        code2,
        Some(0),
        "client 2 was granted after client 1's unlock: {err2}"
    );

    // The path is free.
    let mut other = RingClient::connect(CONTENDER, slots(&addrs), maddr)
        .await
        .unwrap();
    assert!(
        other.lock(PATH).await.unwrap(),
        "the path is free at the end"
    );
    other.unlock(PATH).await.unwrap();
    println!(
        "node {} killed and restarted within its lease: removed {removed:?}, rejoined {rejoined:?}, \
         client 2 done {granted:?} after the kill; view {} {:#06b} at the end",
        victim.0, back.epoch, back.members
    );
}

/// `hilock ring status --json` against the kernel's placement: every key's primary is the
/// member whose printed range holds it, the printed replica sets are the kernel's, and
/// every entry a node reports lies in a range it holds (primary or replica).
async fn check_status(cfg: &Path, limit: Duration) {
    let (code, out, err) = ring_cmd(&["status", "--json"], cfg, limit).await;
    assert_eq!(code, Some(0), "ring status: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["format"], "hilock-ring-status/1");
    let r = ring();
    let members = doc["members"].as_array().unwrap();
    let mut v = hilock_kernel::ring::View {
        epoch: doc["epoch"].as_u64().unwrap() as u16,
        members: 0,
    };
    for m in members {
        v.members |= 1 << m.as_u64().unwrap();
    }
    let nodes = doc["nodes"].as_array().unwrap();
    let within = |k: u64, a: u64, b: u64| {
        if a < b {
            a < k && k <= b
        } else {
            k > a || k <= b
        }
    };
    let mut checked = 0;
    for k in (0..65_536u64).step_by(97) {
        let key = hilock_kernel::ring::Key(k as u16);
        let owner: Vec<u64> = nodes
            .iter()
            .filter(|n| {
                n["range"]
                    .as_array()
                    .is_some_and(|a| within(k, a[0].as_u64().unwrap(), a[1].as_u64().unwrap()))
            })
            .map(|n| n["slot"].as_u64().unwrap())
            .collect();
        let want = r.lookup(v, key).unwrap();
        assert_eq!(
            owner,
            vec![want.0 as u64],
            "key {k}: printed owners {owner:?}"
        );
        let n = &nodes[want.idx()];
        let set = r.replicas(v, key, 3);
        let printed: u16 = n["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| 1u16 << x.as_u64().unwrap())
            .sum();
        assert_eq!(printed, set, "key {k}: replica set");
        checked += 1;
    }
    let mut entries = 0;
    for n in nodes.iter().filter(|n| n["member"] == true) {
        let slot = n["slot"].as_u64().unwrap() as u16;
        let node = n["node"]
            .as_object()
            .expect("a live member answers the probe");
        assert_eq!(
            node["epoch"].as_u64().unwrap() as u16,
            v.epoch,
            "slot {slot}'s view"
        );
        for e in node["entries"].as_array().unwrap() {
            let key = hilock_kernel::ring::Key(e.as_u64().unwrap() as u16);
            assert!(
                r.replicas(v, key, 3) & (1 << slot) != 0,
                "slot {slot} reports key {} it does not hold in the view",
                key.0
            );
            entries += 1;
        }
    }
    assert!(entries > 0, "the nodes report entries");
    println!("ring status: {checked} keys and {entries} entries agree with the kernel's placement");
    // `hilock status --config F` of a ring prints the same.
    let same = tokio::process::Command::new(BIN)
        .args(["status", "--json", "--config"])
        .arg(cfg)
        .kill_on_drop(true)
        .output();
    let same = tokio::time::timeout(limit, same).await.unwrap().unwrap();
    assert!(same.status.success(), "{same:?}");
    assert_eq!(
        String::from_utf8_lossy(&same.stdout),
        out,
        "hilock status = hilock ring status"
    );
    // The text form names every slot.
    let (code, out, _) = ring_cmd(&["status"], cfg, limit).await;
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with(&format!(
            "ring: 16-bit identifiers, r = 2; view epoch {}",
            v.epoch
        )),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("slot ")).count(),
        nodes.len(),
        "{out}"
    );
}

/// `hilock lock --config F --client-id ID OPTIONS… PATH W -- sh -c SCRIPT` run by
/// [`lock_cmd`] in a task of its own.
fn spawn_w(
    config: &Path,
    id: &str,
    options: &[&str],
    path: &str,
    script: String,
    limit: Duration,
) -> tokio::task::JoinHandle<(Option<i32>, String, Duration)> {
    let mut args: Vec<String> = vec!["--client-id".into(), id.into()];
    args.extend(options.iter().map(|o| o.to_string()));
    args.extend([path, "W", "--", "sh", "-c"].map(String::from));
    args.push(script);
    let config = config.to_path_buf();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lock_cmd(&args, &config, limit).await
    })
}

/// Runs `hilock lock --config F ARGS` to its end (at most `limit`): its exit code, stderr
/// and how long it ran.
async fn lock_cmd(
    args: &[&str],
    config: &Path,
    limit: Duration,
) -> (Option<i32>, String, Duration) {
    let t = Instant::now();
    let out = tokio::time::timeout(
        limit,
        tokio::process::Command::new(BIN)
            .arg("lock")
            .arg("--config")
            .arg(config)
            .args(args)
            .env("RUST_LOG", "hilock=warn")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("hilock lock ends in time")
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

/// `hilock lock --client-id 11 PATH W -- true` (client 11's next run, without
/// `--take-over`) exits 78 with one line that says what to do and does not run its
/// command; `hilock lock --client-id 11 --take-over PATH W -- sh -c CHECK` then exits 0,
/// and `other` can take `path` afterwards: the run took over the lock an earlier client 11
/// left and released it. `CHECK` is the take-over run's command (`true` when there is
/// nothing to check); its exit status is the run's.
async fn next_run_of_11_frees(
    config: &Path,
    other: &mut RingClient,
    path: &str,
    check: &str,
    limit: Duration,
) {
    let ran = std::env::temp_dir().join(format!("hilock-ring-cli-{}-ran", std::process::id()));
    let _ = std::fs::remove_file(&ran);
    let touch = format!("touch {}", ran.display());
    let plain = [
        "--client-id",
        "11",
        "--timeout-ms",
        "2000",
        path,
        "W",
        "--",
        "sh",
        "-c",
        &touch,
    ];
    let (code, err, took) = lock_cmd(&plain, config, limit).await;
    assert_eq!(code, Some(78), "{path}: {err}");
    assert!(
        err.contains("client id 11") && err.contains("--take-over"),
        "{path}: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        !ran.exists(),
        "{path}: the refused run's command did not run"
    );
    assert!(took < Duration::from_secs(5), "{path}: refused in {took:?}");
    let args = [
        "--client-id",
        "11",
        "--take-over",
        "--timeout-ms",
        "2000",
        path,
        "W",
        "--",
        "sh",
        "-c",
        check,
    ];
    let (code, err, _) = lock_cmd(&args, config, limit).await;
    assert_eq!(code, Some(0), "{path}: {err}");
    assert!(
        other.lock(path).await.unwrap(),
        "{path}: released by the next run with the same client id"
    );
    other.unlock(path).await.unwrap();
}

/// `hilock lock --config F --client-id N PATH MODE -- CMD` against three `hilock node`
/// processes of a ring:
/// - four processes on one path in W, started together: each command
///   writes its start and end to a file; replayed in time order through the history
///   checker, 0 violations, and no two holds overlap (the ring's locks are exclusive);
///   every process exits with its command's status (0; `exit 3` gives 3);
/// - HILOCK_FENCE: set, and larger for a later hold of the path;
/// - a path held by another client: exit 2 after `--timeout-ms`, one line;
/// - a bad mode, a mode other than W (the ring's locks are exclusive), a path without a
///   top-level element, no `--client-id`: exit 2, one line;
/// - the lock taken over and unlocked under the command by a client with the same id
///   (`RingClient::take_over`), nobody else taking it: the next check finds the hold gone
///   or another's (it does not take the lock again), the command's group is killed, exit
///   76, the lock free afterwards;
/// - the lock taken away while the command runs (a client with the same id takes it over
///   and unlocks it, another takes it): the next check fails, the command's group is
///   killed, exit 76;
/// - `hilock lock` killed (SIGKILL) while holding: its command and the command's background
///   process are gone within a second; the lock stays held; the next run with its client
///   id exits 78 (another process with the id holds it) without running its command, and
///   the next with `--take-over` is granted it and releases it;
/// - the ring's nodes killed under a held lock: exit 75 within the timeout and a check;
/// - the ring's nodes dead (the service up): exit 2 within the timeout, one line; the
///   service dead too: exit 2 at once, one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hilock_lock_on_a_ring_serializes_conflicting_modes_and_fails_clearly() {
    tokio::time::timeout(Duration::from_secs(120), lock_on_ring())
        .await
        .expect("the test ended within 120 s");
}

async fn lock_on_ring() {
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        addrs,
        maddr,
        cfg,
        service,
        mut nodes,
        ..
    } = three_nodes(dir.path(), 1000).await;
    let mut service = Some(service);
    let limit = Duration::from_secs(20);

    // Four processes, conflicting modes, one path.
    const PATH: &str = "/flights/UA93";
    let log = dir.path().join("holds.log");
    let script = format!(
        "echo \"start $0 $(date +%s%N)\" >> {l}; sleep 0.15; echo \"end $0 $(date +%s%N)\" >> {l}",
        l = log.display()
    );
    let modes = [(1u16, Mode::W), (2, Mode::W), (3, Mode::W), (4, Mode::W)];
    let runs: Vec<_> = modes
        .iter()
        .map(|(id, mode)| {
            let (cfg, script, id) = (cfg.clone(), script.clone(), id.to_string());
            let mode = mode.to_string();
            tokio::spawn(async move {
                let args = [
                    "--client-id",
                    &id,
                    "--timeout-ms",
                    "15000",
                    PATH,
                    &mode,
                    "--",
                    "sh",
                    "-c",
                    &script,
                    &id,
                ];
                lock_cmd(&args, &cfg, limit).await
            })
        })
        .collect();
    for r in runs {
        let (code, err, _) = r.await.unwrap();
        assert_eq!(code, Some(0), "{err}");
    }
    let events = ring_load::hold_events(&log, "");
    assert_eq!(events.len(), 2 * modes.len(), "every command ran once");
    let oracle = Oracle::default();
    let mut inside = 0;
    for &(_, start, id) in &events {
        if start {
            let mode = modes.iter().find(|m| m.0 == id).unwrap().1;
            oracle.register_path(u64::from(id), id, PATH, mode);
            inside += 1;
            assert_eq!(inside, 1, "holds overlap: {events:?}");
        } else {
            oracle.exit(u64::from(id));
            inside -= 1;
        }
    }
    assert_eq!(oracle.violations(), Vec::<String>::new());
    println!(
        "hilock lock on a ring: {} holds serialized, 0 violations",
        modes.len()
    );

    // The command's status is the exit status.
    let (code, err, _) = lock_cmd(
        &["--client-id", "5", PATH, "W", "--", "sh", "-c", "exit 3"],
        &cfg,
        limit,
    )
    .await;
    assert_eq!(code, Some(3), "{err}");

    // The fencing token: HILOCK_FENCE is set, and a later hold of the path gets a larger one.
    let fences = dir.path().join("fences");
    for id in ["7", "8"] {
        let script = format!("echo \"$HILOCK_FENCE\" >> {}", fences.display());
        let (code, err, _) = lock_cmd(
            &["--client-id", id, PATH, "W", "--", "sh", "-c", &script],
            &cfg,
            limit,
        )
        .await;
        assert_eq!(code, Some(0), "{err}");
    }
    let fence: Vec<u64> = std::fs::read_to_string(&fences)
        .unwrap()
        .lines()
        .map(|l| l.parse().expect("HILOCK_FENCE is a number"))
        .collect();
    assert_eq!(fence.len(), 2, "{fence:?}");
    assert!(fence[0] < fence[1], "the fencing token grows: {fence:?}");

    // Held by another client: exit 2 after the timeout, one line.
    let slots = slots(&addrs);
    let mut other = RingClient::connect(CONTENDER, slots.clone(), maddr)
        .await
        .unwrap();
    assert!(other.lock(PATH).await.unwrap());
    let (code, err, took) = lock_cmd(
        &[
            "--client-id",
            "6",
            "--timeout-ms",
            "400",
            PATH,
            "W",
            "--",
            "true",
        ],
        &cfg,
        limit,
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not granted within 400 ms"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    other.unlock(PATH).await.unwrap();

    // Bad requests: exit 2, one line each.
    for (args, want) in [
        (
            &["--client-id", "6", PATH, "X", "--", "true"][..],
            "mode \"X\"",
        ),
        (
            &["--client-id", "6", "/", "W", "--", "true"][..],
            "top-level element",
        ),
        (&[PATH, "W", "--", "true"][..], "--client-id"),
        (
            &["--client-id", "6", PATH, "R", "--", "true"][..],
            "exclusive",
        ),
    ] {
        let (code, err, _) = lock_cmd(args, &cfg, limit).await;
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{err:?} should mention {want:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    }

    // The lock unlocked under the command and nobody else taking it: the next check finds
    // the hold gone (it reads the entry, it does not take the lock again), the command's
    // group is killed, exit 76; the lock is free afterwards.
    let released = dir.path().join("released.flag");
    let running = dir.path().join("running.flag");
    let script = format!(
        "touch {}; sleep 20; touch {}",
        running.display(),
        released.display()
    );
    let wrapper = spawn_w(&cfg, "12", &[], "/released", script, limit);
    let t = Instant::now();
    while other.lock("/released").await.unwrap() {
        other.unlock("/released").await.unwrap();
        assert!(t.elapsed() < limit, "the wrapper takes the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Unlock only once the command runs: before that the wrapper may still be asking for
    // the lock (an answer it did not get yet), and its next ask would be granted anew.
    while !running.exists() {
        assert!(t.elapsed() < limit, "the wrapper starts its command");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Client 12 again, in this process: another incarnation of the id, which takes the
    // wrapper's hold over and unlocks it.
    let mut same12 = RingClient::connect(12, slots.clone(), maddr).await.unwrap();
    assert!(same12.take_over("/released").await.unwrap());
    same12.unlock("/released").await.unwrap();
    let t = Instant::now();
    let (code, err, _) = wrapper.await.unwrap();
    assert_eq!(code, Some(76), "{err}");
    // A check between the take-over and the unlock finds this process's hold.
    assert!(
        err.contains("no longer records this hold") || err.contains("granted it to another"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(!released.exists(), "the command was killed");
    assert!(
        other.lock("/released").await.unwrap(),
        "the wrapper did not take the lock again"
    );
    other.unlock("/released").await.unwrap();
    drop(same12);

    // The lock taken away while the command runs: exit 76, the command killed.
    let lost = dir.path().join("lost.flag");
    let script = format!("sleep 20; touch {}", lost.display());
    let wrapper = spawn_w(&cfg, "9", &[], "/lost", script, limit);
    let t = Instant::now();
    while other.lock("/lost").await.unwrap() {
        other.unlock("/lost").await.unwrap();
        assert!(t.elapsed() < limit, "the wrapper takes the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut same_id = RingClient::connect(9, slots.clone(), maddr).await.unwrap();
    let t = Instant::now();
    loop {
        assert!(same_id.take_over("/lost").await.unwrap());
        same_id.unlock("/lost").await.unwrap();
        if other.lock("/lost").await.unwrap() {
            break;
        }
        assert!(t.elapsed() < limit, "another client takes the lock");
    }
    let t = Instant::now();
    let (code, err, _) = wrapper.await.unwrap();
    assert_eq!(code, Some(76), "{err}");
    // A check that falls between the unlock and the other client's lock finds the key
    // free: the same exit, the other line.
    assert!(
        err.contains("granted it to another client") || err.contains("no longer records"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(!lost.exists(), "the command was killed");
    other.unlock("/lost").await.unwrap();

    // A lock left by a killed `hilock lock` stays held; the next run with its client id is
    // refused (exit 78: the ring cannot tell the killed run from a live one), and the next
    // with `--take-over` takes it over and releases it.
    // The killed run's command writes its pid and that of a process it started in the
    // background; both are gone within a second of the kill (the parent-death signal kills
    // the command, the lease watchdog the rest of its group), and the take-over run's
    // command fails if either is still alive, so the two commands never overlap.
    let pid_file = dir.path().join("killed.pid");
    let cmd = format!("sleep 20 & echo $! $$ > {}; wait", pid_file.display());
    let mut killed = tokio::process::Command::new(BIN)
        .arg("lock")
        .arg("--config")
        .arg(&cfg)
        .args(["--client-id", "11", "/killed", "W", "--", "sh", "-c", &cmd])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while other.lock("/killed").await.unwrap() {
        other.unlock("/killed").await.unwrap();
        assert!(t.elapsed() < limit, "the wrapper takes the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = Instant::now();
    while !std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
        assert!(t.elapsed() < limit, "the killed run's command starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    killed.start_kill().unwrap();
    killed.wait().await.unwrap();
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .expect("the killed run's command started")
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    // Gone, or a zombie nobody has reaped yet (its parent, the wrapper, is dead).
    let running =
        |p: i32| hilock_runtime::proc::stat(p).is_some_and(|(s, _, _)| s != 'Z' && s != 'X');
    let t = Instant::now();
    while pids.iter().any(|&p| running(p)) {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the command or its background process outlived the killed wrapper: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !other.lock("/killed").await.unwrap(),
        "the killed wrapper's lock stays held"
    );
    let check = pids
        .iter()
        .map(|p| format!("{{ grep -qs ') [ZX] ' /proc/{p}/stat || ! [ -e /proc/{p}/stat ]; }}"))
        .collect::<Vec<_>>()
        .join(" && ");
    next_run_of_11_frees(&cfg, &mut other, "/killed", &check, limit).await;

    // The same after an earlier incarnation whose request numbers ran ahead: client 11, in
    // this process, makes six requests, locks /ahead with its seventh and goes away. The
    // next `hilock lock --take-over` with id 11 is another incarnation, whose requests the
    // ring numbers apart from the earlier one's: its unlock frees the lock (not taken for a
    // stale retry of a request before 7).
    {
        let mut earlier = RingClient::connect(11, slots.clone(), maddr).await.unwrap();
        for _ in 0..3 {
            assert!(earlier.lock("/warmup").await.unwrap());
            earlier.unlock("/warmup").await.unwrap();
        }
        assert!(earlier.lock("/ahead").await.unwrap());
    }
    next_run_of_11_frees(&cfg, &mut other, "/ahead", "true", limit).await;

    // A stopped wrapper (SIGSTOP for 3 s): a ring hold has no lease, so nothing passes on
    // while the wrapper is stopped. Its command runs to its end meanwhile; no other client
    // is granted the lock until the wrapper, resumed, unlocks it after the command ended;
    // the wrapper exits with the command's status.
    let beats = dir.path().join("stopped.beats");
    let cmd = format!(
        "for i in $(seq 1 50); do date +%s%N >> {}; sleep 0.01; done",
        beats.display()
    );
    let stopped_run = tokio::process::Command::new(BIN)
        .arg("lock")
        .arg("--config")
        .arg(&cfg)
        .args(["--client-id", "12", "/stopped", "W", "--", "sh", "-c", &cmd])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !beats.exists() {
        assert!(t.elapsed() < limit, "the stopped run's command starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = stopped_run.id().expect("the wrapper runs").to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let t = Instant::now();
    let mut tries = 0;
    while t.elapsed() < Duration::from_secs(3) {
        assert!(
            !other.lock("/stopped").await.unwrap(),
            "another client was granted the lock of a stopped wrapper after {:?}",
            t.elapsed()
        );
        tries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal("-CONT");
    let out = tokio::time::timeout(limit, stopped_run.wait_with_output())
        .await
        .expect("the resumed wrapper ends")
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last_beat: u128 = std::fs::read_to_string(&beats)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .unwrap();
    assert!(other.lock("/stopped").await.unwrap(), "the lock is free");
    let granted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    assert!(granted > last_beat, "granted while the command ran");
    println!("stopped ring wrapper: {tries} tries of another client refused during the stop");
    other.unlock("/stopped").await.unwrap();

    // The ring dies under a held lock: exit 75 once a check is not answered within the
    // timeout, the command killed.
    let script = format!("sleep 20; touch {}", lost.display());
    let wrapper = spawn_w(
        &cfg,
        "10",
        &["--timeout-ms", "1000"],
        "/gone",
        script,
        limit,
    );
    let t = Instant::now();
    while other.lock("/gone").await.unwrap() {
        other.unlock("/gone").await.unwrap();
        assert!(t.elapsed() < limit, "the wrapper takes the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(other);
    drop(same_id);
    let t = Instant::now();
    nodes.clear();
    let (code, err, _) = wrapper.await.unwrap();
    assert_eq!(code, Some(75), "{err}");
    // A check reads the entry: it is not called a lock request.
    assert!(
        err.contains("the ring did not answer") && err.contains("answered the read of its entry"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    assert!(!lost.exists(), "the command was killed");

    // A dead ring: the nodes gone (the service up), then the service too.
    for (gone, want) in [
        ("nodes", "the ring did not answer"),
        ("service", "membership service"),
    ] {
        match gone {
            "nodes" => nodes.clear(),
            _ => drop(service.take()),
        }
        let (code, err, took) = lock_cmd(
            &[
                "--client-id",
                "6",
                "--timeout-ms",
                "1000",
                PATH,
                "W",
                "--",
                "true",
            ],
            &cfg,
            limit,
        )
        .await;
        assert_eq!(code, Some(2), "{gone} gone: {err}");
        assert!(
            err.contains(want),
            "{gone} gone: {err:?} should mention {want:?}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
        assert!(took < Duration::from_secs(4), "{gone} gone: {took:?}");
    }
}

/// Two processes given one ring client id (`docs/engines/ring.md`, "A duplicate client
/// id"; `RingServer::step`, "Incarnations"), against three `hilock node` processes:
/// - `hilock lock --client-id 1` holds a path while its command runs; a second `hilock
///   lock --client-id 1` on the path exits 78 within a few seconds with one line that
///   names the id and what to do, and its command does not run; the first exits 0;
/// - four loops of `hilock lock` processes with client ids 1, 1, 2 and 3 on one path for
///   8 s, each command a hold of 20 ms that logs its start and end: replayed through the
///   history checker, 0 violations and 0 overlapping holds; the loops with id 1 are
///   refused (78) while the other holds the path, every run of ids 2 and 3 exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_run_with_a_client_id_in_use_exits_78_and_never_enters() {
    tokio::time::timeout(Duration::from_secs(120), duplicate_ids())
        .await
        .expect("the test ended within 120 s");
}

async fn duplicate_ids() {
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        cfg,
        service: _service,
        nodes: _nodes,
        ..
    } = three_nodes(dir.path(), 1000).await;
    let limit = Duration::from_secs(20);

    // One live run holds /dup; a second with its id is refused.
    let running = dir.path().join("first.running");
    let second_ran = dir.path().join("second.ran");
    let first = spawn_w(
        &cfg,
        "1",
        &[],
        "/dup",
        format!("touch {}; sleep 3", running.display()),
        limit,
    );
    let t = Instant::now();
    while !running.exists() {
        assert!(t.elapsed() < limit, "the first run's command starts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (code, err, took) = lock_cmd(
        &[
            "--client-id",
            "1",
            "--timeout-ms",
            "2000",
            "/dup",
            "W",
            "--",
            "sh",
            "-c",
            &format!("touch {}", second_ran.display()),
        ],
        &cfg,
        limit,
    )
    .await;
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("client id 1") && err.contains("its own --client-id"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(took < Duration::from_secs(5), "refused in {took:?}");
    assert!(!second_ran.exists(), "the second run's command did not run");
    let (code, err, _) = first.await.unwrap();
    assert_eq!(code, Some(0), "{err}");
    println!("a second run with client id 1 refused in {took:?} (exit 78)");

    // Four loops, ids 1, 1, 2, 3.
    let log = dir.path().join("holds.log");
    let script = format!(
        "echo \"start $0 $(date +%s%N)\" >> {l}; sleep 0.02; echo \"end $0 $(date +%s%N)\" >> {l}",
        l = log.display()
    );
    let run_for = Duration::from_secs(8);
    let loops: Vec<_> = [1u8, 1, 2, 3]
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            let (cfg, script) = (cfg.clone(), script.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let mut codes: std::collections::BTreeMap<i32, usize> = Default::default();
                while t.elapsed() < run_for {
                    let id = id.to_string();
                    let tag = format!("loop{i}");
                    let args = [
                        "--client-id",
                        &id,
                        "--timeout-ms",
                        "10000",
                        "/dups",
                        "W",
                        "--",
                        "sh",
                        "-c",
                        &script,
                        &tag,
                    ];
                    let (code, err, _) = lock_cmd(&args, &cfg, limit).await;
                    *codes.entry(code.unwrap_or(-1)).or_default() += 1;
                    match code {
                        Some(0) => {}
                        // The other loop with this id holds it: ask again soon.
                        Some(78) => tokio::time::sleep(Duration::from_millis(20)).await,
                        _ => panic!("loop {i} (id {id}): {code:?} {err}"),
                    }
                }
                (id, codes)
            })
        })
        .collect();
    let mut codes = Vec::new();
    for l in loops {
        codes.push(l.await.unwrap());
    }
    let events = ring_load::hold_events(&log, "loop");
    let oracle = Oracle::default();
    let (mut inside, mut overlaps, mut holds) = (0usize, 0usize, 0u64);
    let mut op = [0u64; 4];
    for &(_, start, id) in &events {
        let l = usize::from(id);
        if start {
            holds += 1;
            op[l] = holds;
            oracle.register_path(holds, id, "/dups", Mode::W);
            if inside > 0 {
                overlaps += 1;
            }
            inside += 1;
        } else {
            oracle.exit(op[l]);
            inside -= 1;
        }
    }
    println!(
        "ids 1, 1, 2, 3 for {run_for:?}: {holds} holds, exit codes {codes:?}, {overlaps} \
         overlapping holds, {} violations",
        oracle.violations().len()
    );
    assert_eq!(overlaps, 0, "holds overlap: {events:?}");
    assert_eq!(oracle.violations(), Vec::<String>::new());
    assert!(holds >= 20, "too few holds to say anything: {holds}");
    for (id, c) in &codes {
        if *id != 1 {
            assert_eq!(
                c.keys().copied().collect::<Vec<_>>(),
                vec![0],
                "id {id}: {c:?}"
            );
        }
    }
    assert!(
        codes.iter().any(|(_, c)| c.contains_key(&78)),
        "the duplicated id was never refused: {codes:?}"
    );
}

/// The command ran, but its key's primary stops (SIGSTOP) before the unlock: the unlock is
/// not answered within `--timeout-ms`, so the key stays locked by the client's id. `hilock
/// lock` exits 1 (not 0: a key left locked for nobody must not look like success) with one
/// line naming the path and the take-over that frees it; after SIGCONT that take-over does.
/// Before that, on a free key: `--timeout-ms 0` is granted; `--priority` and `--id` are
/// refused with one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_unlock_exits_1_and_names_the_take_over() {
    tokio::time::timeout(Duration::from_secs(90), unanswered_unlock())
        .await
        .expect("the test ended within 90 s");
}

async fn unanswered_unlock() {
    const PATH: &str = "/unlock/unanswered";
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        cfg,
        service: _service,
        nodes: procs,
        view: v,
        ..
    } = three_nodes(dir.path(), 10_000).await;
    let limit = Duration::from_secs(20);
    let primary = &procs[ring().lookup(v, key_of(PATH)).unwrap().idx()];
    // A free key with --timeout-ms 0 is asked once and granted (it was refused without
    // asking, as held by another client); --priority and --id are the token engine's.
    let (code, err, _) = lock_cmd(
        &[
            "--client-id",
            "30",
            "--timeout-ms",
            "0",
            PATH,
            "W",
            "--",
            "true",
        ],
        &cfg,
        limit,
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    // The token engine's flags, and --txn: refused with one line naming the flag.
    // `--priority 0` too: the ring has no priorities at all, not a default one.
    let txn_lock = format!("{PATH}:W");
    for extra in [
        &["--priority", "3"][..],
        &["--priority", "0"],
        &["--id", "1"],
        &["--try"],
        &["--signal-waiters"],
        &["--txn", &txn_lock],
    ] {
        let mut args = vec!["--client-id", "30"];
        args.extend(extra);
        if extra[0] != "--txn" {
            args.extend([PATH, "W"]);
        }
        args.extend(["--", "true"]);
        let (code, err, _) = lock_cmd(&args, &cfg, limit).await;
        assert_eq!(code, Some(2), "{extra:?}: {err}");
        assert!(err.contains(extra[0]), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
    }
    let stop = format!("kill -STOP {}", primary.0.id());
    let (code, err, _) = lock_cmd(
        &[
            "--client-id",
            "31",
            "--timeout-ms",
            "1000",
            PATH,
            "W",
            "--",
            "sh",
            "-c",
            &stop,
        ],
        &cfg,
        limit,
    )
    .await;
    signal(primary, "CONT");
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(
        err.contains(PATH) && err.contains("--client-id 31 --take-over"),
        "{err}"
    );
    // The key as `hilock ring status` shows key ranges: in hex.
    let key = format!("key {:#06x}", key_of(PATH).0);
    assert!(err.contains(&key), "{err} names {key}");
    // The take-over as printed runs (its `--config` included) and frees the key.
    let printed = err
        .rsplit_once("(hilock ")
        .and_then(|(_, c)| c.trim_end().strip_suffix(')'))
        .unwrap_or_else(|| panic!("no take-over command in {err}"));
    let words: Vec<&str> = printed.split_whitespace().collect();
    let out = tokio::process::Command::new(BIN)
        .args(&words)
        .env("RUST_LOG", "hilock=warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, out).await.unwrap().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "the printed take-over `hilock {printed}` frees it: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A lock given up is freed: its key's primary, then a replica of it, is paused (SIGSTOP)
/// while `hilock lock --timeout-ms 300` waits; it exits 2 without running its command,
/// and, once the paused node goes on (SIGCONT) and serves the lock late, another client id
/// is granted the key within a few seconds: the run sent an unlock after the lock it gave
/// up, which the node serves after it. The same for a run interrupted (SIGINT) while it
/// waits: exit 130. Before, the late lock stayed held by the gone run's id until a
/// `--take-over`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_given_up_while_its_node_is_paused_is_freed_after_it() {
    tokio::time::timeout(Duration::from_secs(120), given_up_lock())
        .await
        .expect("the test ended within 120 s");
}

async fn given_up_lock() {
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        cfg,
        service: _service,
        nodes: procs,
        view: v,
        ..
    } = three_nodes(dir.path(), 10_000).await;
    let limit = Duration::from_secs(20);
    // Another client id is granted `path` within a few seconds (asked until then).
    let next_run_gets = |path: &'static str, id: &'static str| {
        let cfg = cfg.clone();
        async move {
            let t = Instant::now();
            loop {
                let (code, err, _) = lock_cmd(
                    &[
                        "--client-id",
                        id,
                        "--timeout-ms",
                        "500",
                        path,
                        "W",
                        "--",
                        "true",
                    ],
                    &cfg,
                    limit,
                )
                .await;
                if code == Some(0) {
                    return;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(8),
                    "{path} is still held for the run that gave it up: {err}"
                );
            }
        }
    };
    // (path, client id, the next run's, pause a replica, the signal while it waits).
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        bool,
        Option<(&'static str, i32)>,
    );
    let cases: [Case; 5] = [
        ("/given-up/primary", "40", "41", false, None),
        ("/given-up/replica", "42", "43", true, None),
        (
            "/given-up/interrupted",
            "44",
            "45",
            false,
            Some(("INT", 130)),
        ),
        (
            "/given-up/terminated",
            "46",
            "47",
            false,
            Some(("TERM", 143)),
        ),
        ("/given-up/hung-up", "48", "49", true, Some(("HUP", 129))),
    ];
    for (path, id, next, replica, sig) in cases {
        let primary = ring().lookup(v, key_of(path)).unwrap();
        let paused = if replica {
            ring().next(v, primary).unwrap()
        } else {
            primary
        };
        let paused = &procs[paused.idx()];
        signal(paused, "STOP");
        let (code, err) = if let Some((sig, _)) = sig {
            let run = tokio::process::Command::new(BIN)
                .args(["lock", "--config"])
                .arg(&cfg)
                .args(["--client-id", id, "--timeout-ms", "10000", path, "W"])
                .args(["--", "echo", "RAN"])
                .env("RUST_LOG", "hilock=warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let pid = run.id().unwrap().to_string();
            assert!(Command::new("kill")
                .args([&format!("-{sig}"), &pid])
                .status()
                .unwrap()
                .success());
            let out = tokio::time::timeout(limit, run.wait_with_output())
                .await
                .expect("the interrupted run ends")
                .unwrap();
            assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"));
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        } else {
            let script = "echo RAN >&2".to_string();
            let (code, err, _) = spawn_w(&cfg, id, &["--timeout-ms", "300"], path, script, limit)
                .await
                .unwrap();
            (code, err)
        };
        signal(paused, "CONT");
        let want = sig.map_or(2, |(_, code)| code);
        assert_eq!(code, Some(want), "{path}: {err}");
        assert!(!err.contains("RAN"), "{path}: the command ran: {err}");
        next_run_gets(path, next).await;
        // The unlock was not answered while the node was paused: one line says the key
        // may stay held and names the take-over that frees it.
        assert!(
            err.trim_end().lines().count() <= 1,
            "{path}: one line: {err:?}"
        );
        if want == 2 || !err.is_empty() {
            assert!(
                err.contains("may stay held")
                    && !err.contains("  ")
                    && err.contains(&format!("--client-id {id} --take-over")),
                "{path}: {err}"
            );
        }
    }
}

/// A node whose lock table is full refuses a new key and says so: with every one of the
/// `TABLE` entries of each node held (three nodes, r = 2: every node holds every key), a
/// `hilock lock` of one more key exits 2 at once, long before its timeout, with one line
/// that says "lock table full" and names the key (`docs/engines/ring.md`, "Limits").
/// Before, the node logged the refusal and sent nothing: the run waited out its timeout
/// and said the ring did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_lock_table_refuses_a_new_key_with_one_line() {
    tokio::time::timeout(Duration::from_secs(90), full_table())
        .await
        .expect("the test ended within 90 s");
}

async fn full_table() {
    use hilock_runtime::ring::TABLE;
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        addrs,
        maddr,
        cfg,
        service: _service,
        nodes: _nodes,
        ..
    } = three_nodes(dir.path(), 10_000).await;
    let mut holder = RingClient::connect(
        50,
        std::sync::Arc::new(addrs.iter().copied().map(Some).collect()),
        maddr,
    )
    .await
    .unwrap();
    holder.limit = Duration::from_secs(5);
    let mut held = std::collections::BTreeSet::new();
    for i in 0.. {
        if held.len() == TABLE {
            break;
        }
        let path = format!("/full{i}");
        if held.contains(&key_of(&path)) {
            continue;
        }
        assert!(matches!(holder.lock(&path).await, Ok(true)), "{path}");
        held.insert(key_of(&path));
    }
    let path = (0..)
        .map(|i| format!("/more{i}"))
        .find(|p| !held.contains(&key_of(p)))
        .unwrap();
    let (code, err, took) = lock_cmd(
        &[
            "--client-id",
            "51",
            "--timeout-ms",
            "8000",
            &path,
            "W",
            "--",
            "true",
        ],
        &cfg,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    let key = format!("{:#06x}", key_of(&path).0);
    assert!(
        err.contains("lock table full") && err.contains(&key) && err.contains(&path),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(4),
        "refused at once, not timed out: {took:?}"
    );
}

/// `HILOCK_SOCKET` left set in the shell does not get in the way of `--config`: the
/// variable names a token node's socket and is read only without `--config`, so a ring
/// lock runs (before, clap refused the run: "'--config' cannot be used with '--socket'",
/// an option the user never gave).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hilock_socket_in_the_environment_is_ignored_with_a_config() {
    tokio::time::timeout(Duration::from_secs(60), socket_env())
        .await
        .expect("the test ended within 60 s");
}

async fn socket_env() {
    let dir = tempfile::tempdir().unwrap();
    let ThreeNodes {
        cfg,
        service: _service,
        nodes: _nodes,
        ..
    } = three_nodes(dir.path(), 10_000).await;
    let out = tokio::process::Command::new(BIN)
        .args(["lock", "--config"])
        .arg(&cfg)
        .args(["--client-id", "3", "/e", "W", "--", "true"])
        .env("HILOCK_SOCKET", "/x")
        .env("RUST_LOG", "hilock=warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(20), out)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A membership service that takes the connection and never answers (paused, or not a
/// hilock service): `hilock lock` gives up after its wait for a view with one line that
/// names the service's address.
#[test]
fn a_silent_membership_service_is_named_when_no_view_comes() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ring.toml");
    let addrs = [free_port(), free_port()];
    let m = silent.local_addr().unwrap();
    std::fs::write(&cfg, ring_toml(&addrs, m, &[0, 1], 1000)).unwrap();
    let out = Command::new(BIN)
        .args(["lock", "--config"])
        .arg(&cfg)
        .args([
            "--client-id",
            "3",
            "--timeout-ms",
            "1000",
            "/a",
            "W",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains("no view of the ring within 1s")
            && e.contains(&format!(
                "from its membership service at {m} (is it running?)"
            )),
        "{e}"
    );
}
