//! `hilock node` processes with `membership = "etcd"` (feature `etcd`) against a real etcd
//! that each test starts itself (`runtime/tests/support/etcd.rs`; skipped with one printed
//! line where etcd cannot be had): what a node does when its own lease is lost, and when a
//! peer's lease ends (`docs/faults.md`, "With etcd membership"). Every test body runs under
//! a time bound; every hold is seen by the demo's history checker
//! (`hilock_runtime::oracle::Oracle`).
//!
//! `cargo test -p hilock --features etcd --test etcd_node`

#[path = "../../runtime/tests/support/etcd.rs"]
mod etcd;
#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/scrape.rs"]
mod scrape;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_cluster::{all_members, register, rooted_at, Nodes, Wrapper, GRACE_MS, TTL_S};
use hilock_kernel::Mode;
use hilock_runtime::client::{request, Reply, Request};
use hilock_runtime::oracle::Oracle;
use tokio::time::Instant;

/// Requests wait this long unless they fail first: far above TTL + 1 s, so a request
/// that fails within TTL + 1 s did not time out.
const REQUEST_TIMEOUT_MS: u64 = 30_000;

/// The tests of what a node does without recovery (`etcd_recovery = false`; the default
/// with etcd is on).
const NO_RECOVERY: &str = "etcd_recovery = false\n";

fn lock_req(path: &str, mode: &str) -> Request {
    etcd_cluster::lock_req(path, mode, REQUEST_TIMEOUT_MS)
}

/// Clients on `nodes_at` locking random paths under `/w` until `stop`; every grant goes to
/// the oracle, every error is kept.
fn workload(
    nodes: &Nodes,
    nodes_at: &[usize],
    oracle: &Arc<Oracle>,
    ops: &Arc<AtomicU64>,
    errors: &Arc<Mutex<Vec<String>>>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinSet<u64> {
    let mut set = tokio::task::JoinSet::new();
    for &node in nodes_at {
        for c in 0..2u64 {
            let socket = nodes.socket(node);
            let (oracle, ops, errors, stop) =
                (oracle.clone(), ops.clone(), errors.clone(), stop.clone());
            set.spawn(async move {
                let mut granted = 0;
                let mut k = node as u64 * 7 + c;
                while !stop.load(Relaxed) {
                    k = k
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let path = format!("/w/e{}", (k >> 33) % 4);
                    let mode = ["IR", "R", "U", "IW", "W"][((k >> 40) % 5) as usize];
                    let op = ops.fetch_add(1, Relaxed) + 1_000;
                    let answer = tokio::time::timeout(
                        Duration::from_millis(REQUEST_TIMEOUT_MS + 3_000),
                        request(&socket, &lock_req(&path, mode)),
                    )
                    .await
                    .expect("every request is answered");
                    match answer {
                        Ok((reply, stream)) if reply.ok => {
                            granted += 1;
                            register(&oracle, op, node as u16, &reply);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            oracle.exit(op);
                            drop(stream);
                        }
                        Ok((reply, _)) => {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("node {node}: {}", reply.error.unwrap_or_default()));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => {
                            errors.lock().unwrap().push(format!("node {node}: {e}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                granted
            });
        }
    }
    set
}

/// A node paused (SIGSTOP) past its lease while `hilock lock /a W -- sleep 100` holds /a
/// on it: the wrapper kills the sleep when the lease deadline the node handed it passes
/// unrenewed — before etcd ends the node's lease, so before anybody could be granted /a
/// by a membership change — and exits 77 (lease lost). After SIGCONT the node finds its
/// lease lost, grants nothing more, and releases /a; node 0 is then granted /a, with the
/// sleep long dead. Clients on nodes 0 and 2 meanwhile: 0 violations, and every error
/// names node 1 (their requests waited on it). With `etcd_recovery = false` node 1 cannot
/// rejoin: once etcd answers it, its process exits with status 75 (`docs/operations.md`,
/// "An etcd stall").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_s_command_dies_before_its_lease_ends_and_before_another_node_is_granted() {
    let name =
        "a_paused_node_s_command_dies_before_its_lease_ends_and_before_another_node_is_granted";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let cluster = "paused";
        let listen = etcd_cluster::free_addrs(3);
        let mut nodes = Nodes::start_configured(
            cluster,
            &vec![etcd.addr.clone(); 3],
            REQUEST_TIMEOUT_MS,
            &listen,
            |_, j| listen[j],
            NO_RECOVERY,
        );
        let (_obs, view) = all_members(&etcd.addr, cluster, 3).await;
        let oracle = Arc::new(Oracle::default());
        let mut wrapper = Wrapper::start(&nodes, 1, "/a").await;
        oracle.register_fenced(1, 1, "/a", Mode::W, wrapper.fence);
        let (ops, errors, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicBool::new(false)),
        );
        let mut clients = workload(&nodes, &[0, 2], &oracle, &ops, &errors, &stop);
        // Node 0 asks for /a until it is granted; at the grant, the sleep must be dead.
        let waiter = {
            let (socket, oracle, sleep) = (nodes.socket(0), oracle.clone(), wrapper.sleep);
            tokio::spawn(async move {
                let mut tries = Vec::new();
                loop {
                    let (reply, stream) = request(&socket, &lock_req("/a", "W")).await.unwrap();
                    if reply.ok {
                        let alive = matches!(hilock_runtime::proc::stat(sleep), Some((s, _, _)) if s != 'Z' && s != 'X');
                        if !alive {
                            oracle.exit(1);
                        }
                        register(&oracle, 2, 0, &reply);
                        oracle.exit(2);
                        drop(stream);
                        return (Instant::now(), alive, tries);
                    }
                    tries.push(reply.error.unwrap_or_default());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stopped = Instant::now();
        nodes.signal(1, "STOP");
        // When the sleep dies, and when etcd ends node 1's lease.
        let (mut dead, mut gone) = (None, None);
        while dead.is_none() || gone.is_none() {
            assert!(
                stopped.elapsed() < Duration::from_secs(u64::from(TTL_S) + 3),
                "sleep dead: {dead:?}, lease gone: {gone:?}"
            );
            if dead.is_none() && !wrapper.alive() {
                dead = Some(stopped.elapsed());
            }
            if gone.is_none() && !view.borrow().members.contains_key(&1) {
                gone = Some(stopped.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (dead, gone) = (dead.unwrap(), gone.unwrap());
        let code = wrapper.exit_code(Duration::from_secs(2)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let resumed = stopped.elapsed();
        nodes.signal(1, "CONT");
        let (granted_at, alive_at_grant, tries) =
            tokio::time::timeout(Duration::from_secs(15), waiter)
                .await
                .expect("node 0 is granted /a after node 1 resumes")
                .unwrap();
        stop.store(true, Relaxed);
        let mut granted = 0;
        while let Some(r) = clients.join_next().await {
            granted += r.unwrap();
        }
        let exit = tokio::task::block_in_place(|| nodes.exit_code(1, Duration::from_secs(5)));
        let errors = errors.lock().unwrap().clone();
        eprintln!(
            "SIGSTOP at 0: sleep dead after {dead:.3?}, node 1's lease gone at etcd after \
             {gone:.3?}, node 1 resumed after {resumed:.3?}, node 0 granted /a after {:.3?} \
             (after {} refusals: {:?}); wrapper exit {code:?}; node 1 exit {exit:?}; workload \
             {granted} grants, {} errors {:?}; {} pairs and {} fences checked, violations {:?}",
            granted_at - stopped,
            tries.len(),
            tries.iter().take(2).collect::<Vec<_>>(),
            errors.len(),
            errors.iter().take(3).collect::<Vec<_>>(),
            oracle.checks(),
            oracle.fence_checks(),
            oracle.violations()
        );
        assert!(
            dead < gone,
            "the command must be dead before etcd ends the lease: dead after {dead:?}, gone after {gone:?}"
        );
        assert_eq!(code, Some(77), "the wrapper says: lease lost");
        assert_eq!(
            exit,
            Some(75),
            "node 1 cannot rejoin without recovery: exit 75"
        );
        assert!(
            !alive_at_grant,
            "the sleep is dead when node 0 is granted /a"
        );
        assert_eq!(oracle.violations(), Vec::<String>::new());
        assert!(granted > 10, "the workload ran ({granted} grants)");
        for e in &errors {
            assert!(e.contains("node 1"), "an error names node 1: {e}");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A node cut from etcd (a proxy that swallows everything) while `hilock lock /c W --
/// sleep 100` holds /c on it: the command is killed within the local lease plus the grace
/// and before the others see the lease end, the wrapper exits 77, and the node refuses
/// every new request with an error naming its lease — it grants nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_from_etcd_stops_granting_and_kills_its_holders_commands() {
    let name = "a_node_cut_from_etcd_stops_granting_and_kills_its_holders_commands";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let cluster = "cut";
        let proxy = etcd::Proxy::start(&etcd.addr).await;
        let endpoints = vec![etcd.addr.clone(), proxy.addr.clone(), etcd.addr.clone()];
        let nodes = Nodes::start(cluster, &endpoints, REQUEST_TIMEOUT_MS);
        let (_obs, view) = all_members(&etcd.addr, cluster, 3).await;
        let mut wrapper = Wrapper::start(&nodes, 1, "/c").await;
        // A second holder, of the client socket only (no command): told it is lost.
        let (held, mut held_stream) = request(&nodes.socket(1), &lock_req("/d", "R"))
            .await
            .unwrap();
        assert!(held.ok, "{:?}", held.error);
        assert!(
            held.lease_until_ms.is_some(),
            "a grant carries the lease's end"
        );
        let cut = Instant::now();
        proxy.cut();
        let (mut dead, mut gone) = (None, None);
        while dead.is_none() || gone.is_none() {
            assert!(
                cut.elapsed() < Duration::from_secs(u64::from(TTL_S) + 3),
                "sleep dead: {dead:?}, lease gone: {gone:?}"
            );
            if dead.is_none() && !wrapper.alive() {
                dead = Some(cut.elapsed());
            }
            if gone.is_none() && !view.borrow().members.contains_key(&1) {
                gone = Some(cut.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (dead, gone) = (dead.unwrap(), gone.unwrap());
        let code = wrapper.exit_code(Duration::from_secs(2)).await;
        // The socket-only holder reads a lost line (renewals before it).
        let lost = {
            use tokio::io::AsyncBufReadExt;
            let mut r = tokio::io::BufReader::new(&mut held_stream);
            let mut last = None;
            for _ in 0..50 {
                let mut line = String::new();
                let n = tokio::time::timeout(Duration::from_secs(2), r.read_line(&mut line))
                    .await
                    .expect("a line within 2 s")
                    .unwrap();
                if n == 0 {
                    break;
                }
                let rep: Reply = serde_json::from_str(line.trim_end()).unwrap();
                if rep.lost {
                    last = Some(rep);
                    break;
                }
            }
            last.expect("the holder is told its lock is lost")
        };
        let refused_at = Instant::now();
        let (after, _) = request(&nodes.socket(1), &lock_req("/e", "W"))
            .await
            .unwrap();
        let refused_in = refused_at.elapsed();
        eprintln!(
            "cut at 0: sleep dead after {dead:.3?}, node 1's lease gone at etcd after {gone:.3?}; \
             wrapper exit {code:?}; holder told {:?}; a new request on node 1 answered in \
             {refused_in:.1?}: {:?}",
            lost.error, after.error
        );
        assert!(
            dead < gone,
            "killed before the lease ends at etcd: dead after {dead:?}, gone after {gone:?}"
        );
        assert!(
            dead < Duration::from_millis(1_500 + GRACE_MS),
            "within the local lease and the grace: {dead:?}"
        );
        assert_eq!(code, Some(77), "the wrapper says: lease lost");
        assert!(lost.lease_lost, "{lost:?}");
        let e = after.error.clone().unwrap_or_default();
        assert!(
            !after.ok && e.contains("etcd lease") && e.contains("node 1"),
            "a node without its lease grants nothing: {after:?}"
        );
        assert!(refused_in < Duration::from_secs(1), "refused at once");
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A peer killed with SIGKILL while it holds a path's token, with `etcd_recovery = false`:
/// the requests of the other nodes that wait on it fail with an error naming it within the
/// lease TTL + 1 s of the kill (not at their 30 s timeout), a new request for that path
/// fails at once, so do try-locks (not "busy"), and a path whose token is elsewhere is
/// still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peer_fails_the_requests_waiting_on_it_naming_it_within_ttl_plus_1s() {
    let name = "a_killed_peer_fails_the_requests_waiting_on_it_naming_it_within_ttl_plus_1s";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let cluster = "killed";
        let listen = etcd_cluster::free_addrs(3);
        let mut nodes = Nodes::start_configured(
            cluster,
            &vec![etcd.addr.clone(); 3],
            REQUEST_TIMEOUT_MS,
            &listen,
            |_, j| listen[j],
            NO_RECOVERY,
        );
        let (at1, at0) = (rooted_at("/b", 1, 3), rooted_at("/b", 0, 3));
        let mut wrapper = Wrapper::start(&nodes, 1, &at1).await;
        let mut waiting = tokio::task::JoinSet::new();
        for node in [0usize, 2] {
            let (socket, path) = (nodes.socket(node), at1.clone());
            waiting.spawn(async move {
                let (reply, _s) = request(&socket, &lock_req(&path, "W")).await.unwrap();
                (node, Instant::now(), reply)
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed = Instant::now();
        nodes.kill(1);
        let mut answers = Vec::new();
        while let Some(r) = tokio::time::timeout(Duration::from_secs(10), waiting.join_next())
            .await
            .expect("the waiting requests are answered within 10 s")
        {
            let (node, at, reply) = r.unwrap();
            answers.push((node, at - killed, reply));
        }
        let fast = Instant::now();
        let (again, _) = request(&nodes.socket(0), &lock_req(&at1, "W"))
            .await
            .unwrap();
        let again_in = fast.elapsed();
        // So do try-locks there, each naming node 1: the request stranded at node 0 does
        // not make them "busy" (which tells a script to try again for ever).
        let mut tries = Vec::new();
        for _ in 0..2 {
            let req = etcd_cluster::try_req(&at1, "W", REQUEST_TIMEOUT_MS);
            let (r, _) = request(&nodes.socket(0), &req).await.unwrap();
            tries.push(r);
        }
        let (other, _s) = request(&nodes.socket(2), &lock_req(&at0, "W"))
            .await
            .unwrap();
        let code = wrapper.exit_code(Duration::from_secs(2)).await;
        for (node, after, reply) in &answers {
            eprintln!(
                "node {node}: answered {after:.3?} after the kill: {:?}",
                reply.error
            );
        }
        eprintln!(
            "a new request for {at1} failed in {again_in:.1?}: {:?}; {at0} (token at node 0) \
             granted: {}; node 1's wrapper exit {code:?}",
            again.error, other.ok
        );
        for (node, after, reply) in &answers {
            let e = reply.error.clone().unwrap_or_default();
            assert!(!reply.ok, "node {node} was not granted {at1}");
            assert!(
                e.contains("node 1 has left the cluster"),
                "node {node}'s error names node 1: {e}"
            );
            assert!(
                *after <= Duration::from_secs(u64::from(TTL_S) + 1),
                "node {node} answered {after:?} after the kill (TTL + 1 s = {} s)",
                TTL_S + 1
            );
        }
        assert!(
            !again.ok && again.error.unwrap_or_default().contains("node 1"),
            "a new request waiting on node 1 fails naming it"
        );
        assert!(again_in < Duration::from_secs(1), "at once: {again_in:?}");
        for t in &tries {
            let e = t.error.clone().unwrap_or_default();
            assert!(
                !t.ok && !t.busy && e.contains("node 1 has left the cluster"),
                "a try names node 1, not busy: {e}"
            );
        }
        assert!(
            other.ok,
            "a lock whose token is at node 0: {:?}",
            other.error
        );
        assert!(!wrapper.alive(), "the killed node's command is dead");
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// `hilock status --json` of node `socket` (`None` if it does not answer).
fn status_json(socket: &std::path::Path) -> Option<serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["status", "--json", "--timeout-ms", "2000", "--socket"])
        .arg(socket)
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// `hilock status` (text) of node `socket`.
fn status_text(socket: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["status", "--timeout-ms", "2000", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What an operator sees of a node that loses its etcd lease (cut from etcd by a proxy
/// that swallows everything): before, `hilock status --json` says membership etcd, lease
/// held with time left, serving, the tokens it holds, every peer `connected`, and its
/// metrics endpoint counts grants and lease renewals; after, within the TTL plus 3 s, the
/// status says lease lost and not serving (naming the lease), the text says so too, and
/// the metrics say lease_held 0, serving 0, one lease loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_the_lease_and_serving_before_and_after_a_lease_loss() {
    let name = "status_and_metrics_show_the_lease_and_serving_before_and_after_a_lease_loss";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let cluster = "operator";
        let proxy = etcd::Proxy::start(&etcd.addr).await;
        let endpoints = vec![etcd.addr.clone(), proxy.addr.clone(), etcd.addr.clone()];
        let listen = etcd_cluster::free_addrs(3);
        let nodes = Nodes::start_configured(
            cluster,
            &endpoints,
            REQUEST_TIMEOUT_MS,
            &listen,
            |_, j| listen[j],
            "metrics_addr = \"127.0.0.1:0\"\n",
        );
        let (_obs, _view) = all_members(&etcd.addr, cluster, 3).await;
        let sock = nodes.socket(1);
        // A path whose token starts at node 1, taken and released there.
        let path = rooted_at("/op", 1, 3);
        let (granted, stream) = request(&sock, &lock_req(&path, "W")).await.unwrap();
        assert!(granted.ok, "{:?}", granted.error);
        drop(stream);
        // Every peer connected, as the logs say it (lower case).
        let t = Instant::now();
        let before = loop {
            let v = status_json(&sock).expect("status answers");
            let peers = v["peers"].as_array().cloned().unwrap_or_default();
            if peers.len() == 2 && peers.iter().all(|p| p["state"] == "connected") {
                break v;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "peers connect: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(before["membership"], "etcd", "{before}");
        assert_eq!(before["lease"]["state"], "held", "{before}");
        let left = before["lease"]["left_ms"].as_u64().expect("time left");
        assert!(left > 0 && left <= u64::from(TTL_S) * 1000, "{before}");
        assert!(before["lease"]["id"]
            .as_str()
            .is_some_and(|i| i.starts_with("0x")));
        assert_eq!(before["serving"], true, "{before}");
        assert!(before["not_serving"].is_null(), "{before}");
        assert_eq!(before["epoch"], 0, "{before}");
        assert_eq!(before["run"].as_str().map(str::len), Some(16), "{before}");
        assert!(before["tokens_held"].as_u64() >= Some(1), "{before}");
        let url = before["metrics"]
            .as_str()
            .expect("the metrics URL")
            .to_string();
        let m0 = tokio::task::spawn_blocking({
            let url = url.clone();
            move || scrape::scrape(&url)
        })
        .await
        .unwrap();
        let node = [("node", "1")];
        let get = |t: &str, n: &str| scrape::metric(t, n, &node);
        assert!(get(&m0, "hilock_grants_total") >= Some(1.0), "{m0}");
        assert_eq!(get(&m0, "hilock_lease_held"), Some(1.0), "{m0}");
        assert_eq!(get(&m0, "hilock_serving"), Some(1.0), "{m0}");
        assert!(get(&m0, "hilock_lease_left_seconds").is_some(), "{m0}");
        // Renewals every third of the TTL or so.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let m1 = tokio::task::spawn_blocking({
            let url = url.clone();
            move || scrape::scrape(&url)
        })
        .await
        .unwrap();
        let renewals = |t: &str| get(t, "hilock_lease_renewals_total").unwrap_or(0.0);
        assert!(
            renewals(&m1) > renewals(&m0),
            "renewals counted:\n{m0}\n{m1}"
        );

        let cut = Instant::now();
        proxy.cut();
        let after = loop {
            let v = status_json(&sock).expect("a node without its lease still answers status");
            if v["lease"]["state"] == "lost" {
                break v;
            }
            assert!(
                cut.elapsed() < Duration::from_secs(u64::from(TTL_S) + 3),
                "the lease is shown lost: {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let shown = cut.elapsed();
        assert_eq!(after["serving"], false, "{after}");
        let why = after["not_serving"].as_str().unwrap_or_default();
        assert!(
            why.contains("etcd lease") && why.contains("node 1"),
            "{after}"
        );
        assert!(after["lease"]["reason"].as_str().is_some(), "{after}");
        let text = status_text(&sock);
        assert!(
            text.contains("serving: NO") && text.contains(" lost: "),
            "{text}"
        );
        let m2 = tokio::task::spawn_blocking(move || scrape::scrape(&url))
            .await
            .unwrap();
        assert_eq!(get(&m2, "hilock_lease_held"), Some(0.0), "{m2}");
        assert_eq!(get(&m2, "hilock_serving"), Some(0.0), "{m2}");
        assert_eq!(get(&m2, "hilock_lease_losses_total"), Some(1.0), "{m2}");
        eprintln!(
            "before the cut: lease held, {left} ms left, serving; shown lost {shown:.1?} after \
             the cut: {why}"
        );
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// `hilock lock` itself paused (SIGSTOP) past the node's lease while the node, running,
/// renews it: the renewals cannot reach the command's watchdog, which kills the command at
/// the deadline it last had; resumed, the wrapper exits 77 saying that it did not run —
/// not that the node's lease was not renewed, which would send the operator to a healthy
/// node (`docs/faults.md`, "With etcd membership").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_wrapper_says_that_it_was_paused_not_the_node() {
    let name = "a_paused_wrapper_says_that_it_was_paused_not_the_node";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let cluster = "pausedwrapper";
        let listen = etcd_cluster::free_addrs(3);
        let nodes = Nodes::start_configured(
            cluster,
            &vec![etcd.addr.clone(); 3],
            REQUEST_TIMEOUT_MS,
            &listen,
            |_, j| listen[j],
            "",
        );
        let (_obs, _view) = all_members(&etcd.addr, cluster, 3).await;
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["lock", "/w", "W", "--socket"])
            .arg(nodes.socket(0))
            .args(["--timeout-ms", "10000", "--", "sleep", "100"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let wrapper = child.id() as i32;
        let t = Instant::now();
        let sleep = loop {
            if let Some(pid) = etcd_cluster::child_named(wrapper, "sleep") {
                break pid;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "the command starts");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let kill = |sig: &str| {
            assert!(std::process::Command::new("kill")
                .args([sig, &wrapper.to_string()])
                .status()
                .unwrap()
                .success())
        };
        kill("-STOP");
        tokio::time::sleep(Duration::from_secs(u64::from(TTL_S) + 1)).await;
        let dead = !etcd_cluster::pid_alive(sleep);
        kill("-CONT");
        let out = tokio::task::block_in_place(|| child.wait_with_output()).unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            dead,
            "the watchdog killed the command while the wrapper was stopped"
        );
        assert_eq!(out.status.code(), Some(77), "{err}");
        assert!(
            err.contains("this hilock lock process did not run")
                && !err.contains("the node is paused"),
            "{err}"
        );
        let s = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
                .args(["status", "--json", "--socket"])
                .arg(nodes.socket(0))
                .output()
                .unwrap()
        });
        let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
        assert_eq!(v["serving"], true, "the node was healthy all along: {v}");
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A node that joins etcd and then cannot bind its client socket (here: a running node's)
/// exits 2 with one line and leaves no member key behind: its lease is revoked on the way
/// out, so a corrected start joins at once instead of waiting out the TTL as "an earlier
/// run of this node" (`docs/faults.md`, "With etcd membership").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_joining_etcd_leaves_no_member_key() {
    let name = "a_start_that_fails_after_joining_etcd_leaves_no_member_key";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let nodes = Nodes::start_direct(
            "failedstart",
            std::slice::from_ref(&etcd.addr),
            10_000,
            "",
            "hilock=error",
        );
        // Another cluster's node 0 whose client socket is node 0's of the running cluster.
        let toml = std::fs::read_to_string(nodes.config(0))
            .unwrap()
            .replace("cluster = \"failedstart\"", "cluster = \"failedstart2\"");
        let listen = etcd_cluster::free_addrs(1)[0];
        let toml = toml
            .lines()
            .map(|l| {
                if l.starts_with("addr = ") {
                    format!("addr = \"{listen}\"")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, toml).unwrap();
        let out = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
                .args(["node", "--config"])
                .arg(&file)
                .output()
                .unwrap()
        });
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("in use"), "{err}");
        let o = hilock_runtime::membership::EtcdOptions::new(vec![etcd.addr.clone()]);
        let obs = hilock_runtime::membership::Observer::connect(&o, "failedstart2")
            .await
            .unwrap();
        let members = obs.list_members().await.unwrap();
        assert!(
            members.is_empty(),
            "a member key stayed behind: {members:?}"
        );
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}
