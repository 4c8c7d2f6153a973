//! etcd itself stalls, and a node is killed, in the default etcd configuration (no
//! `etcd_recovery` key: recovery on; `docs/faults.md`, "An etcd stall", and
//! `docs/operations.md`, "An etcd stall"): `hilock node` processes against a real etcd the
//! test starts itself (`runtime/tests/support/etcd.rs`; skipped with one printed line where
//! etcd cannot be had). Every test body runs under a time bound.
//!
//! - An etcd SIGSTOP of twice the lease TTL: every node loses its lease (the command of a
//!   `hilock lock` running then is killed), its process stays up, and once etcd is resumed
//!   every node serves again as a new run, without a restart, with fences above every
//!   fence handed out before.
//! - kill -9 of a path's token holder: the path is granted at the survivors within the
//!   lease TTL + 1 s, with a larger fence; the killed node, started again at once (its old
//!   lease still alive at etcd), waits for that lease itself and rejoins.
//! - A node whose lease is lost and that cannot reach etcd exits 75 after
//!   `etcd_rejoin_timeout_ms`.
//! - A second live process with a running node's id waits out the lease etcd says the
//!   other run has left, then is refused (exit 2).
//!
//! `cargo test -p hilock --features etcd --test etcd_stall -- --nocapture`

#[path = "../../runtime/tests/support/etcd.rs"]
mod etcd;
#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "../../runtime/tests/support/ports.rs"]
mod ports;

use std::path::Path;
use std::time::Duration;

use etcd_cluster::{lock_req, rooted_at, status_json, until_serving, Nodes, Wrapper, TTL_S};
use hilock_runtime::client::{request, Request};
use tokio::net::UnixStream;
use tokio::time::Instant;

/// Nodes in the cluster.
const N: usize = 3;

/// One test at a time: each starts etcd and its nodes, and a loaded 2-core machine would
/// otherwise starve the nodes' lease renewals and blur the times measured.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The node lease's TTL.
const TTL: Duration = Duration::from_secs(TTL_S as u64);

/// `hilock status` of the node at `socket` through the client API (`None` if it does not
/// answer within 2 s: stopped, or between two runs).
async fn status(socket: &Path) -> Option<serde_json::Value> {
    let (reply, _) =
        tokio::time::timeout(Duration::from_secs(2), request(socket, &Request::Status))
            .await
            .ok()?
            .ok()?;
    reply.status
}

/// A lock request's answer.
struct Got {
    ok: bool,
    fence: Option<u64>,
    error: Option<String>,
}

/// `W` on `path` at the node at `socket`: the answer and the stream that holds the lock
/// (dropped: released).
async fn take(socket: &Path, path: &str, timeout_ms: u64) -> (Got, Option<UnixStream>) {
    match request(socket, &lock_req(path, "W", timeout_ms)).await {
        Ok((r, s)) => (
            Got {
                ok: r.ok,
                fence: r.fence,
                error: r.error,
            },
            Some(s),
        ),
        Err(e) => (
            Got {
                ok: false,
                fence: None,
                error: Some(e),
            },
            None,
        ),
    }
}

/// Takes and releases `path` at the node at `socket`; its fence.
async fn fence_of(socket: &Path, path: &str) -> u64 {
    let (r, s) = take(socket, path, 5_000).await;
    assert!(r.ok, "{path} at {}: {:?}", socket.display(), r.error);
    drop(s);
    r.fence.expect("a grant carries its fence")
}

/// etcd SIGSTOPped for twice the lease TTL, with every node serving and a `hilock lock …
/// -- sleep 100` running on node 0, then SIGCONT (`docs/faults.md`, "An etcd stall"):
/// during the stall every node's lease is lost — the sleep is killed and its wrapper exits
/// 77 — while every node process stays up and answers `hilock status` (not serving); after
/// the SIGCONT every node serves again as a new run (another `run` in its status) within
/// 2 s, its process never having exited, and each node is granted the path whose token
/// started at it, and the next node's, with fences above every fence handed out for those
/// paths before the stall (3.6: regenerated tokens count from the new epoch on), and its
/// counters go on from the old run's (a lost lease stays visible in the metrics). Twice:
/// the second stall starts from the epoch the first one's rejoin installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_stall_of_twice_the_lease_costs_only_the_commands_running_during_it() {
    let name = "an_etcd_stall_of_twice_the_lease_costs_only_the_commands_running_during_it";
    let _one = SERIAL.lock().await;
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let mut nodes = Nodes::start_direct(
            "stall",
            &vec![etcd.addr.clone(); N],
            10_000,
            "",
            "hilock=info",
        );
        let mut runs = Vec::new();
        for i in 0..N {
            let (run, _) = until_serving(&nodes.socket(i), "", Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("node {i} serves; its log:\n{}", nodes.log(i)));
            runs.push(run);
        }
        // Each node takes the path whose token starts at it, then the next node's path.
        let paths: Vec<String> = (0..N).map(|i| rooted_at("/stall", i as u16, N)).collect();
        let mut before = vec![0u64; N];
        for i in 0..N {
            for p in [i, (i + 1) % N] {
                before[p] = before[p].max(fence_of(&nodes.socket(i), &paths[p]).await);
            }
        }
        // Two stalls: from epoch 0, then from the epoch the first one's rejoin installed.
        let mut epoch = 0;
        for stall in 1..=2 {
            let mut wrapper = Wrapper::start(&nodes, 0, &rooted_at("/cmd", 0, N)).await;
            let grants_before = status(&nodes.socket(0)).await.expect("node 0 answers")["stats"]
                ["grants"]
                .as_u64()
                .unwrap();

            etcd.pause();
            let paused = Instant::now();
            let mut dead = None;
            while paused.elapsed() < 2 * TTL {
                if dead.is_none() && !wrapper.alive() {
                    dead = Some(paused.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Every old run still answers, and none serves.
            let mut during = Vec::new();
            for i in 0..N {
                let v = status(&nodes.socket(i))
                    .await
                    .unwrap_or_else(|| panic!("node {i}'s old run answers during the stall"));
                during.push((v["serving"].clone(), v["lease"]["state"].clone()));
            }
            let code = wrapper.exit_code(Duration::from_secs(1)).await;

            etcd.resume();
            let resumed = Instant::now();
            let mut waits = tokio::task::JoinSet::new();
            for (i, run) in runs.iter().enumerate() {
                let (socket, run) = (nodes.socket(i), run.clone());
                waits.spawn(async move {
                    let r = until_serving(&socket, &run, Duration::from_secs(10)).await;
                    (i, r)
                });
            }
            let mut again = vec![None; N];
            while let Some(r) = waits.join_next().await {
                let (i, r) = r.unwrap();
                again[i] = r.map(|(run, at)| (run, at - resumed));
            }
            let mut after = vec![0u64; N];
            let mut granted = Vec::new();
            for i in 0..N {
                for p in [i, (i + 1) % N] {
                    let (r, s) = take(&nodes.socket(i), &paths[p], 5_000).await;
                    drop(s);
                    if let Some(f) = r.fence.filter(|_| r.ok) {
                        after[p] = after[p].max(f);
                        granted.push((i, p, f));
                    } else {
                        granted.push((i, p, 0));
                        eprintln!("node {i}, {}: {:?}", paths[p], r.error);
                    }
                }
            }
            let cli = status_json(&nodes.socket(0));
            let up: Vec<bool> = (0..N).map(|i| nodes.running(i)).collect();
            let times: Vec<String> = again
                .iter()
                .enumerate()
                .map(|(i, a)| match a {
                    Some((_, t)) => format!("node {i} {:.0} ms", t.as_secs_f64() * 1000.0),
                    None => format!("node {i} not within 10 s"),
                })
                .collect();
            eprintln!(
                "{name}, stall {stall}: etcd stopped {:?}; the command dead {dead:.3?} after the SIGSTOP (wrapper \
                 exit {code:?}); during the stall (serving, lease) {during:?}; after the SIGCONT \
                 serving again as a new run: {}; fences before {before:?}, after {after:?} \
                 (grants (node, path, fence) {granted:?}); processes up {up:?}",
                2 * TTL,
                times.join(", ")
            );
            for i in 0..N {
                assert!(
                    again[i]
                        .as_ref()
                        .is_some_and(|(_, t)| *t <= Duration::from_secs(2)),
                    "node {i} serves again within 2 s of the SIGCONT ({}); its log:\n{}",
                    times[i],
                    nodes.log(i)
                );
            }
            assert!(
                dead.is_some(),
                "the command running during the stall is killed"
            );
            assert_eq!(code, Some(77), "its wrapper says: lease lost");
            for (i, (serving, lease)) in during.iter().enumerate() {
                assert_eq!(*serving, false, "node {i} serves nothing during the stall");
                assert_eq!(*lease, "lost", "node {i}'s lease is lost during the stall");
            }
            assert_eq!(up, vec![true; N], "no node process exited");
            for &(i, p, f) in &granted {
                assert!(
                    f > before[p],
                    "node {i} is granted {} after the stall with a fence ({f}) above every fence \
                     before it ({})",
                    paths[p],
                    before[p]
                );
            }
            let cli = cli.expect("hilock status --json answers");
            assert_eq!(cli["serving"], true, "{cli}");
            assert_eq!(cli["lease"]["state"], "held", "{cli}");
            // The counters belong to the process: the new run counts on.
            let grants = cli["stats"]["grants"].as_u64().unwrap();
            assert!(
                grants >= grants_before + 2,
                "node 0's grants counted on from {grants_before} across the rejoin: {cli}"
            );
            let now = cli["epoch"].as_u64().unwrap_or(0);
            assert!(now > epoch, "a new epoch after stall {stall}: {cli}");
            epoch = now;
            runs = again.into_iter().map(|a| a.unwrap().0).collect();
            before = after;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// kill -9 of the node holding a path's token (taken there, fence F) in the default etcd
/// configuration — no `etcd_recovery` key (`docs/faults.md`, "With etcd recovery"): the
/// path is granted to each survivor within the lease TTL + 1 s of the kill, with fences
/// above F. The killed node, started again at once while etcd still holds its old lease,
/// waits for that lease to end by itself (it says how long) instead of exiting, rejoins
/// as a new run and is granted the path again, with a fence above the survivors'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_token_holder_with_the_default_config_is_recovered_within_ttl_plus_1s() {
    let name = "kill_9_of_a_token_holder_with_the_default_config_is_recovered_within_ttl_plus_1s";
    let _one = SERIAL.lock().await;
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let mut nodes = Nodes::start_direct(
            "killed",
            &vec![etcd.addr.clone(); N],
            10_000,
            "",
            "hilock=info",
        );
        for i in 0..N {
            until_serving(&nodes.socket(i), "", Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("node {i} serves; its log:\n{}", nodes.log(i)));
        }
        let k = 2usize;
        let path = rooted_at("/k", k as u16, N);
        let (held, _hold) = take(&nodes.socket(k), &path, 5_000).await;
        assert!(held.ok, "{:?}", held.error);
        let f0 = held.fence.expect("a fence");
        // The survivors wait for the path while node 2 holds it.
        let mut waits = tokio::task::JoinSet::new();
        for i in 0..k {
            let (socket, path) = (nodes.socket(i), path.clone());
            waits.spawn(async move {
                let (r, s) = take(&socket, &path, 10_000).await;
                let at = Instant::now();
                drop(s);
                (i, r, at)
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed = Instant::now();
        nodes.kill(k);
        // Started again at once: etcd still holds the killed run's lease.
        nodes.respawn(k);
        let mut got = Vec::new();
        while let Some(r) = waits.join_next().await {
            let (i, r, at) = r.unwrap();
            got.push((i, r.ok, r.fence.unwrap_or(0), at - killed, r.error));
        }
        got.sort_by_key(|g| g.0);
        let (back, _) = until_serving(&nodes.socket(k), "", Duration::from_secs(15))
            .await
            .map(|(run, at)| (Some(at - killed), run))
            .unwrap_or((None, String::new()));
        let again = if back.is_some() {
            Some(take(&nodes.socket(k), &path, 5_000).await.0)
        } else {
            None
        };
        let log = nodes.log(k);
        let waited = log
            .lines()
            .find(|l| l.contains("still holds its member key"))
            .map(str::to_string);
        eprintln!(
            "{name}: node {k} killed holding {path} (fence {f0}); survivors (node, granted, \
             fence, after the kill, error): {got:?}; node {k} started again at once: serving \
             {back:.3?} after the kill, then granted {path}: {:?}; it said: {waited:?}",
            again.as_ref().map(|r| (r.ok, r.fence))
        );
        for (i, ok, f, after, e) in &got {
            assert!(*ok, "node {i} is granted {path}: {e:?}");
            assert!(
                *after <= TTL + Duration::from_secs(1),
                "node {i} is granted {path} within the TTL + 1 s of the kill ({after:?})"
            );
            assert!(
                *f > f0,
                "node {i}'s fence {f} is above the killed holder's {f0}"
            );
        }
        assert!(
            waited.is_some_and(|l| l.contains("lease ends within")),
            "the new run says how long it waits for the old lease; its log:\n{log}"
        );
        assert!(back.is_some(), "the new run serves; its log:\n{log}");
        let again = again.unwrap();
        let top = got.iter().map(|g| g.2).max().unwrap_or(0);
        assert!(again.ok, "the new run is granted {path}: {:?}", again.error);
        assert!(
            again.fence > Some(top),
            "its fence {:?} is above the survivors' {top}",
            again.fence
        );
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A node cut from etcd (a proxy that swallows everything) with `etcd_rejoin_timeout_ms =
/// 1000`: it loses its lease, keeps answering `hilock status` (lease lost, not serving)
/// while it waits for etcd, and exits with status 75 (`docs/operations.md`, "An etcd
/// stall") about 1 s after the loss — for a supervisor's `Restart=on-failure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_reach_etcd_after_losing_its_lease_exits_75() {
    let name = "a_node_that_cannot_reach_etcd_after_losing_its_lease_exits_75";
    let _one = SERIAL.lock().await;
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let proxy = etcd::Proxy::start(&etcd.addr).await;
        let endpoints = vec![etcd.addr.clone(), proxy.addr.clone()];
        let listen = etcd_cluster::free_addrs(2);
        let mut nodes = Nodes::start_logged(
            "gone",
            &endpoints,
            10_000,
            &listen,
            |_, j| listen[j],
            "etcd_rejoin_timeout_ms = 1000\n",
            "hilock=info",
        );
        until_serving(&nodes.socket(1), "", Duration::from_secs(10))
            .await
            .expect("node 1 serves");
        let cut = Instant::now();
        proxy.cut();
        let lost = loop {
            let v = status(&nodes.socket(1)).await;
            if let Some(v) = v.filter(|v| v["lease"]["state"] == "lost") {
                break (cut.elapsed(), v);
            }
            assert!(
                cut.elapsed() < TTL + Duration::from_secs(3),
                "the lease is lost"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let code = tokio::task::block_in_place(|| nodes.exit_code(1, Duration::from_secs(10)));
        let exited = cut.elapsed();
        let log = nodes.log(1);
        eprintln!(
            "{name}: cut at 0; lease shown lost after {:.3?}; exit {code:?} after {exited:.3?}",
            lost.0
        );
        assert_eq!(lost.1["serving"], false, "{}", lost.1);
        assert_eq!(code, Some(75), "exit 75; its log:\n{log}");
        assert!(
            exited >= lost.0 + Duration::from_millis(900),
            "it waited etcd_rejoin_timeout_ms for etcd first ({exited:?})"
        );
        assert!(
            log.contains("does not rejoin") && log.contains("etcd_rejoin_timeout_ms"),
            "one line says why: {log}"
        );
        assert!(nodes.running(0), "the other node runs on");
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A second `hilock node` process with node 0's id (its own peer address and client
/// socket) while node 0 runs: etcd says node 0's run still holds the member key, so it
/// waits the time etcd says that lease has left (logged), tries again, is refused — node 0
/// renews its lease — and exits 2 with one line naming the other run; node 0 serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_process_with_the_same_id_is_refused_after_waiting_out_the_lease() {
    let name = "a_second_live_process_with_the_same_id_is_refused_after_waiting_out_the_lease";
    let _one = SERIAL.lock().await;
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let mut nodes = Nodes::start_direct(
            "twice",
            &vec![etcd.addr.clone(); 2],
            10_000,
            "",
            "hilock=info",
        );
        let (run, _) = until_serving(&nodes.socket(0), "", Duration::from_secs(10))
            .await
            .expect("node 0 serves");
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(nodes.config(0)).unwrap();
        let other = dir.path().join("n0.sock");
        let text = text.replace(
            &format!("client = \"{}\"", nodes.socket(0).display()),
            &format!(
                "listen = \"{}\"\nclient = \"{}\"",
                ports::free_addr(),
                other.display()
            ),
        );
        let file = dir.path().join("n0.toml");
        std::fs::write(&file, text).unwrap();
        let t = Instant::now();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
                .args(["node", "--config"])
                .arg(&file)
                .env("RUST_LOG", "hilock=info")
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or_default().to_string();
        let after = status(&nodes.socket(0)).await;
        eprintln!(
            "{name}: exit {:?} after {took:.3?}; last line: {last}",
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("lease ends within") && err.contains("waiting that long"),
            "it says how long it waits: {err}"
        );
        assert!(
            took >= Duration::from_secs(1),
            "it waited before giving up ({took:?})"
        );
        assert!(
            last.starts_with("hilock: error:")
                && last.contains(&format!("another run of node 0 (run {run})"))
                && last.contains("is alive"),
            "one line naming the other run: {last}"
        );
        let after = after.expect("node 0 answers");
        assert_eq!(after["serving"], true, "{after}");
        assert_eq!(
            after["run"],
            run.as_str(),
            "node 0's run is untouched: {after}"
        );
        assert!(nodes.running(0));
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}
