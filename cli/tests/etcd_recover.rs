//! Recovery through etcd (`etcd_recovery = true`, feature `etcd`; `docs/faults.md`, "With
//! etcd recovery"): `hilock node` processes against a real etcd that the test starts itself
//! (`runtime/tests/support/etcd.rs`; skipped with one printed line where etcd cannot be
//! had). The token node of a lock is killed with SIGKILL while the other nodes wait on it;
//! the survivors install a new epoch with the lock rebuilt and the waiting requests are
//! granted. Every hold is seen by the demo's history checker
//! (`hilock_runtime::oracle::Oracle`); the body runs under a time bound.
//!
//! `cargo test -p hilock --features etcd --test etcd_recover`

#[path = "../../runtime/tests/support/etcd.rs"]
mod etcd;
#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "../../runtime/tests/support/ports.rs"]
mod ports;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_cluster::{all_members, lock_req, register, rooted_at, try_req, Nodes, TTL_S};
use hilock_runtime::agents::{AGENTS_GONE_AFTER, RESTART_GRACE};
use hilock_runtime::client::{request, Reply, Request};
use hilock_runtime::membership::Membership;
use hilock_runtime::oracle::Oracle;
use tokio::net::UnixStream;
use tokio::time::Instant;

/// Requests wait this long unless granted or failed first: far above the recovery time.
const REQUEST_TIMEOUT_MS: u64 = 30_000;

/// `n` nodes of `cluster` with etcd recovery, logging at info, once all are members; and
/// the test's own view of the members (kept for the test's length).
async fn recovering_nodes(etcd: &str, cluster: &str, n: usize) -> (Nodes, Membership) {
    let nodes = Nodes::start_direct(
        cluster,
        &vec![etcd.to_string(); n],
        REQUEST_TIMEOUT_MS,
        "etcd_recovery = true\n",
        "hilock=info",
    );
    let (observer, _) = all_members(etcd, cluster, n).await;
    (nodes, observer)
}

/// A lock request on node `node` that registers its grant with the oracle; the grant's
/// time and the held stream (dropping it releases).
async fn take(
    oracle: &Oracle,
    socket: &std::path::Path,
    op: u64,
    node: usize,
    path: &str,
    mode: &str,
) -> (Instant, Reply, UnixStream) {
    let (reply, stream) = request(socket, &lock_req(path, mode, REQUEST_TIMEOUT_MS))
        .await
        .unwrap();
    let at = Instant::now();
    if reply.ok {
        register(oracle, op, node as u16, &reply);
    }
    (at, reply, stream)
}

/// A try-lock out to the token node when that node is killed is refused by the
/// survivors' install of the next epoch (`spec/SPEC.md` 1.12): that is a recovery, not a
/// busy lock, so the answer says so and is not `busy` (`hilock lock --try` exits 2, not
/// 79); nothing of it is held, and a try after the install is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_out_when_its_token_node_dies_is_refused_as_a_recovery_not_busy() {
    let name = "a_try_out_when_its_token_node_dies_is_refused_as_a_recovery_not_busy";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let n = 3;
        let (mut nodes, _obs) = recovering_nodes(&etcd.addr, "try-recover", n).await;
        let t = rooted_at("/t", 2, n);
        let try_req = || try_req(&t, "W", REQUEST_TIMEOUT_MS);
        nodes.kill(2);
        let killed = Instant::now();
        let (reply, _s) = request(&nodes.socket(0), &try_req()).await.unwrap();
        let after = killed.elapsed();
        let e = reply.error.clone().unwrap_or_default();
        eprintln!("the try was answered {after:?} after the kill: {e}");
        assert!(!reply.ok && !reply.busy, "not granted, not busy: {e}");
        assert!(e.contains("(recovery) while the try was out"), "{e}");
        let (again, _s2) = request(&nodes.socket(0), &try_req()).await.unwrap();
        assert!(again.ok, "a try after the install: {:?}", again.error);
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// Four nodes; node 3 is the token node of `/p…` and holds it in W. Nodes 0, 1 and 2 ask
/// for it in W and wait on node 3; node 1 holds `/h…` (token at node 3 too) in R; clients
/// on nodes 0–2 lock `/w/e0..3` throughout. Node 3 is killed (SIGKILL): the survivors
/// install epoch 1 with the locks rebuilt (the tokens node 3 had are regenerated) and
/// every waiting request is granted, the first within TTL + 1 s of the kill; node 1's R
/// hold survives (node 2's W on `/h…` waits for its release); a lock no survivor knew,
/// whose token started at node 3, is served; 0 violations; no request of a live node
/// fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_token_node_grants_the_waiting_requests_of_the_survivors_in_a_new_epoch() {
    let name = "killing_the_token_node_grants_the_waiting_requests_of_the_survivors_in_a_new_epoch";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let (cluster, n) = ("recover", 4);
        let (mut nodes, obs) = recovering_nodes(&etcd.addr, cluster, n).await;
        let oracle = Arc::new(Oracle::default());
        let (p, h, fresh) = (
            rooted_at("/p", 3, n),
            rooted_at("/h", 3, n),
            rooted_at("/f", 3, n),
        );
        // Node 3 holds p in W; node 1 holds h in R (granted by node 3).
        let (_, held3, _s3) = take(&oracle, &nodes.socket(3), 1, 3, &p, "W").await;
        assert!(held3.ok, "{:?}", held3.error);
        let (_, held1, s1) = take(&oracle, &nodes.socket(1), 2, 1, &h, "R").await;
        assert!(held1.ok, "{:?}", held1.error);
        // The workload.
        let (ops, errors, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(Mutex::new(Vec::<String>::new())),
            Arc::new(AtomicBool::new(false)),
        );
        let mut clients = tokio::task::JoinSet::new();
        for node in 0..3usize {
            let socket = nodes.socket(node);
            let (oracle, ops, errors, stop) =
                (oracle.clone(), ops.clone(), errors.clone(), stop.clone());
            clients.spawn(async move {
                let mut granted = 0u64;
                let mut k = node as u64 * 7 + 1;
                while !stop.load(Relaxed) {
                    k = k
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let path = format!("/w/e{}", (k >> 33) % 4);
                    let mode = ["IR", "R", "U", "IW", "W"][((k >> 40) % 5) as usize];
                    let op = ops.fetch_add(1, Relaxed) + 1_000;
                    let (_, reply, stream) = take(&oracle, &socket, op, node, &path, mode).await;
                    if reply.ok {
                        granted += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        oracle.exit(op);
                        drop(stream);
                    } else {
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("node {node}: {}", reply.error.unwrap_or_default()));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                granted
            });
        }
        // Nodes 0, 1 and 2 wait for p (each holds it 50 ms once granted).
        let mut waiting = tokio::task::JoinSet::new();
        for node in 0..3usize {
            let (socket, path, oracle) = (nodes.socket(node), p.clone(), oracle.clone());
            waiting.spawn(async move {
                let op = 10 + node as u64;
                let (at, reply, stream) = take(&oracle, &socket, op, node, &path, "W").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                oracle.exit(op);
                drop(stream);
                (node, at, reply)
            });
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !waiting.is_empty() && waiting.try_join_next().is_none(),
            "the requests for {p} wait while node 3 holds it"
        );
        let killed = Instant::now();
        nodes.kill(3);
        // Node 3's holds end with it.
        oracle.exit(1);
        let mut answers = Vec::new();
        while let Some(r) = tokio::time::timeout(Duration::from_secs(15), waiting.join_next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the waiting requests are answered within 15 s of the kill; node 0's log:\n{}",
                    nodes.recovery_log(0)
                )
            })
        {
            let (node, at, reply) = r.unwrap();
            answers.push((node, at - killed, reply));
        }
        answers.sort_by_key(|a| a.1);
        let first = answers[0].1;
        // Node 1 still holds h in R: node 2's W waits until node 1 releases it.
        let h2 = {
            let (socket, path, oracle) = (nodes.socket(2), h.clone(), oracle.clone());
            tokio::spawn(async move { take(&oracle, &socket, 20, 2, &path, "W").await })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let h2_waited = !h2.is_finished();
        oracle.exit(2);
        drop(s1);
        let (_, h2_reply, _h2s) = tokio::time::timeout(Duration::from_secs(5), h2)
            .await
            .expect("node 2 is granted h once node 1 released it")
            .unwrap();
        oracle.exit(20);
        // A lock no survivor knew, whose token started at the dead node.
        let (_, f0, f0s) = take(&oracle, &nodes.socket(0), 30, 0, &fresh, "W").await;
        let f1 = {
            let (socket, path, oracle) = (nodes.socket(1), fresh.clone(), oracle.clone());
            tokio::spawn(async move { take(&oracle, &socket, 31, 1, &path, "W").await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        oracle.exit(30);
        drop(f0s);
        let (_, f1_reply, _f1s) = tokio::time::timeout(Duration::from_secs(5), f1)
            .await
            .expect("node 1 is granted the fresh lock after node 0")
            .unwrap();
        oracle.exit(31);
        stop.store(true, Relaxed);
        let mut granted = 0;
        while let Some(r) = tokio::time::timeout(Duration::from_secs(35), clients.join_next())
            .await
            .expect("the workload stops")
        {
            granted += r.unwrap();
        }
        let errors = errors.lock().unwrap().clone();
        for (node, after, reply) in &answers {
            eprintln!(
                "node {node}: {p} W answered {after:.3?} after the kill: ok {} {:?}",
                reply.ok, reply.error
            );
        }
        eprintln!(
            "kill of the token node at 0: first waiting request granted after {first:.3?} \
             (goal: TTL + 1 s = {} s); {h} W at node 2 waited for node 1's R: {h2_waited}; \
             fresh lock {fresh}: {} then {}; workload {granted} grants, {} errors {:?}; {} \
             pairs and {} fences checked, violations {:?}",
            TTL_S + 1,
            f0.ok,
            f1_reply.ok,
            errors.len(),
            errors.iter().take(3).collect::<Vec<_>>(),
            oracle.checks(),
            oracle.fence_checks(),
            oracle.violations()
        );
        assert_eq!(oracle.violations(), Vec::<String>::new());
        for (node, _, reply) in &answers {
            assert!(reply.ok, "node {node} is granted {p}: {:?}", reply.error);
        }
        assert!(
            first <= Duration::from_secs(u64::from(TTL_S) + 1),
            "first grant {first:?} after the kill (TTL + 1 s = {} s)",
            TTL_S + 1
        );
        assert!(h2_waited, "node 1's R hold of {h} survives the recovery");
        assert!(h2_reply.ok, "{:?}", h2_reply.error);
        assert!(f0.ok && f1_reply.ok, "{:?} {:?}", f0.error, f1_reply.error);
        assert!(
            errors.is_empty(),
            "no request of a live node fails: {errors:?}"
        );
        assert!(granted > 10, "the workload ran ({granted} grants)");
        // Each survivor deletes its report (every lock it knew) once it installed the
        // epoch: nobody reads it again, and every idle look of every member reads the
        // whole reports prefix (`docs/faults.md`, "etcd recovery").
        let t = Instant::now();
        loop {
            let left = obs.reports().await.unwrap();
            if left.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "reports left in etcd after the install: nodes {:?}",
                left.keys().collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(90), body)
        .await
        .expect("test body ends within 90 s");
}

/// The agents engine (`hilock lock --txn`) under etcd recovery (`docs/faults.md`, "Agents
/// engine"). Node 2's transaction holds `/p…` in W on node 0's lock server; node 2 is
/// killed and started again at once. Its new run is back before node 0 would count the old
/// run's agents as gone (4 s of silence, and the link is up again before that), so node 0
/// must release the dead agents' entries when the new run replaces the old one on the link:
/// node 1's transaction for `/p…` in W is then granted (red before: the dead agent's entry
/// stayed and node 1's transaction timed out). The new run's own lock server grants
/// nothing for `RESTART_GRACE` after it starts (red without it: node 2's transaction on a
/// path homed at node 2 was granted at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_frees_its_old_transactions_locks_and_waits_before_granting() {
    let name = "a_restarted_node_frees_its_old_transactions_locks_and_waits_before_granting";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let (cluster, n) = ("recover-txn", 3);
        let (mut nodes, _obs) = recovering_nodes(&etcd.addr, cluster, n).await;
        let (p, q) = (rooted_at("/p", 0, n), rooted_at("/q", 2, n));
        assert_eq!(hilock_runtime::agents::home(&p, n), 0);
        assert_eq!(hilock_runtime::agents::home(&q, n), 2);
        let txn = |path: &str, ms| Request::Txn {
            locks: vec![format!("{path}:W")],
            timeout_ms: Some(ms),
            abort_on_deadlock: false,
        };
        let (held, _s2) = request(&nodes.socket(2), &txn(&p, 10_000)).await.unwrap();
        assert!(held.ok, "{:?}", held.error);
        let killed = Instant::now();
        nodes.kill(2);
        nodes.restart(2);
        let back = Instant::now();
        let own = {
            let (socket, req) = (nodes.socket(2), txn(&q, 10_000));
            tokio::spawn(async move {
                let r = request(&socket, &req).await.unwrap();
                (Instant::now(), r)
            })
        };
        let (reply, _s1) = request(&nodes.socket(1), &txn(&p, 6_000)).await.unwrap();
        let granted = killed.elapsed();
        let (own_at, (own_reply, _s2q)) = own.await.unwrap();
        eprintln!(
            "node 2 killed at 0, back after {:.3?}; node 1 granted {p} after {granted:.3?}: {} \
             {:?}; node 2's new run granted {q} {:.3?} after it was back",
            back - killed,
            reply.ok,
            reply.error,
            own_at - back
        );
        assert!(
            own_reply.ok && own_at - back >= RESTART_GRACE - Duration::from_millis(300),
            "node 2's new run grants nothing for about {RESTART_GRACE:?}: {:?} after {:?}",
            own_reply.error,
            own_at - back
        );
        if back - killed >= AGENTS_GONE_AFTER {
            eprintln!(
                "{name}: node 2 took {:?} to come back, longer than the {AGENTS_GONE_AFTER:?} \
                 of silence after which node 0 frees its agents anyway; this run shows nothing \
                 about the release at a new run",
                back - killed
            );
            return;
        }
        assert!(
            reply.ok,
            "node 1 is granted {p} once node 2's new run replaced the old one: {:?}; node 0's \
             log:\n{}",
            reply.error,
            nodes
                .log(0)
                .lines()
                .filter(|l| l.contains("agents") || l.contains("run"))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}

/// A new run of a removed node asks to join (its member key appears) and dies before it
/// reports (its key goes): the survivors froze and reported for the epoch that was to let
/// it in. A frozen node is unfrozen only by an install, so they install that epoch with
/// the membership as it is (`next_members_after_reports`; the fault model's
/// `staged-joiner-lost-before-report` shows what happens without). Red before: the
/// survivors stayed frozen at epoch 1 for good and a lock request at node 0 timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_that_dies_before_its_report_leaves_no_member_frozen() {
    use hilock_runtime::membership::{EtcdOptions, Member};
    let name = "a_joiner_that_dies_before_its_report_leaves_no_member_frozen";
    let Some(etcd) = etcd::start_healthy(name) else {
        return;
    };
    let body = async {
        let (cluster, n) = ("recover-joiner", 3);
        let (mut nodes, obs) = recovering_nodes(&etcd.addr, cluster, n).await;
        let epoch_is = |want: u32, ids: &'static [u16]| {
            let obs = &obs;
            async move {
                let t = Instant::now();
                loop {
                    if let Ok(e) = obs.current_epoch().await {
                        let got: Vec<u16> = e.members.iter().map(|mb| mb.id).collect();
                        if e.epoch == want && got == ids {
                            return t.elapsed();
                        }
                        assert!(e.epoch <= want, "epoch {} {got:?}", e.epoch);
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(u64::from(TTL_S) + 10),
                        "epoch {want} with {ids:?} not installed"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        // Node 2 dies; epoch 1 is nodes 0 and 1.
        nodes.kill(2);
        epoch_is(1, &[0, 1]).await;
        // A new run of node 2 takes its member key: the survivors freeze and report.
        let mut o = EtcdOptions::new(vec![etcd.addr.clone()]);
        o.ttl_s = TTL_S;
        let joiner = Membership::join(
            &o,
            cluster,
            Member {
                id: 2,
                incarnation: 77,
            },
        )
        .await
        .unwrap();
        let t = Instant::now();
        loop {
            let reports = joiner.reports().await.unwrap();
            let of_epoch_1 = |id: u16| {
                reports.get(&id).is_some_and(|r| {
                    serde_json::from_slice::<serde_json::Value>(r).is_ok_and(|v| v["epoch"] == 1)
                })
            };
            if of_epoch_1(0) && of_epoch_1(1) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "nodes 0 and 1 report"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // It dies before it reports: its lease, and with it its member key, goes.
        joiner.leave().await.unwrap();
        let took = epoch_is(2, &[0, 1]).await;
        println!("epoch 2 (nodes 0 and 1) installed {took:?} after the joiner died");
        // Both serve again.
        for node in [0usize, 1] {
            let path = rooted_at("/after", node as u16, n);
            let (reply, _held) = request(&nodes.socket(node), &lock_req(&path, "W", 5_000))
                .await
                .unwrap();
            assert!(reply.ok, "node {node}: {:?}", reply.error);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), body)
        .await
        .expect("test body ends within 60 s");
}
