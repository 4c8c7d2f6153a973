//! Suspend and resume (`docs/faults.md`, "Suspend and resume"): node processes of a static
//! cluster with `state_dir` on 127.0.0.1, stopped with SIGTERM and started again with the
//! same configuration, come back as the same run; a snapshot is used once; a bad one is a
//! one-line error.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/procs.rs"]
mod procs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use procs::{free_port, Proc};

fn hilock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hilock"))
}

struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Proc>,
    /// Runs started so far per node (each run logs to its own file).
    runs: Vec<usize>,
}

impl Cluster {
    fn socket(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("n{id}.sock"))
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }

    fn snapshot(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("state-{id}/suspended"))
    }

    /// The log of node `id`'s latest run.
    fn log(&self, id: usize) -> String {
        let f = self
            .dir
            .path()
            .join(format!("n{id}.run{}.log", self.runs[id]));
        std::fs::read_to_string(f).unwrap_or_default()
    }

    /// Starts node `id` (again) with `config`; waits for its client socket.
    fn start_node(&mut self, id: usize, config: &Path) {
        let _ = std::fs::remove_file(self.socket(id));
        self.runs[id] += 1;
        self.nodes[id] = spawn(self.dir.path(), config, id, self.runs[id]);
        wait_serving(&self.socket(id));
    }

    /// SIGTERM to node `id`; waits (at most 10 s) for it to exit, successfully.
    fn term(&mut self, id: usize) -> Duration {
        let t = Instant::now();
        let pid = self.nodes[id].0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let st = wait_exit(&mut self.nodes[id], Duration::from_secs(10));
        assert!(st.success(), "node {id}: {st:?}\n{}", self.log(id));
        t.elapsed()
    }

    /// SIGKILL to node `id`.
    fn kill(&mut self, id: usize) {
        let _ = self.nodes[id].0.kill();
        let _ = self.nodes[id].0.wait();
    }
}

/// A 3-node static cluster with `state_dir = "state-{id}"`.
fn start() -> Cluster {
    start_with("", &[0, 1, 2])
}

/// The cluster with `extra` configuration lines, of which the nodes `up` are started.
fn start_with(extra: &str, up: &[usize]) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut toml = String::from(
        "cluster = \"resume\"\nsecret = \"resume test secret\"\nrequest_timeout_ms = 10000\n\
         state_dir = \"state-{id}\"\n",
    );
    toml.push_str(extra);
    toml.push_str(&format!(
        "client = \"{}\"\n",
        dir.path().join("n{id}.sock").display()
    ));
    for id in 0..3 {
        toml.push_str(&format!(
            "[[nodes]]\nid = {id}\naddr = \"127.0.0.1:{}\"\n",
            free_port().port()
        ));
    }
    std::fs::write(dir.path().join("cluster.toml"), toml).unwrap();
    let file = dir.path().join("cluster.toml");
    // A node not started is a `true` that has exited.
    let nodes = (0..3)
        .map(|id| {
            if up.contains(&id) {
                spawn(dir.path(), &file, id, 0)
            } else {
                Proc(Command::new("true").spawn().unwrap())
            }
        })
        .collect();
    let c = Cluster {
        dir,
        nodes,
        runs: vec![0; 3],
    };
    for &id in up {
        wait_serving(&c.socket(id));
    }
    // The socket is up before the nodes agree on the run's generation; a node stopped
    // before that does not suspend, so a test that stops one first waits for the agreement.
    if up.len() == 3 {
        for &id in up {
            let t = Instant::now();
            while !c.log(id).contains("every node offered a generation") {
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "node {id} agrees on a generation:\n{}",
                    c.log(id)
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    c
}

fn spawn(dir: &Path, config: &Path, id: usize, run: usize) -> Proc {
    let log = std::fs::File::create(dir.join(format!("n{id}.run{run}.log"))).unwrap();
    Proc(
        hilock()
            .args(["node", "--config"])
            .arg(config)
            .args(["--id", &id.to_string()])
            .env("RUST_LOG", "hilock=info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn wait_serving(sock: &Path) {
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "node at {} starts",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_exit(p: &mut Proc, wait: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = p.0.try_wait().unwrap() {
            return st;
        }
        assert!(t.elapsed() < wait, "exits within {wait:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A path whose initial token holder is `node` in a cluster of 3, named `{prefix}{i}`.
fn path_at(prefix: &str, node: u16) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, 3) == hilock_kernel::NodeId(node))
        .unwrap()
}

/// `hilock lock path W` at node `node` with a 10 s timeout: the command's fence, or the
/// failure's output; and how long it took.
fn lock(c: &Cluster, node: usize, path: &str) -> (Result<u64, Output>, Duration) {
    let t = Instant::now();
    let out = hilock()
        .args(["lock", path, "W", "--timeout-ms", "10000", "--socket"])
        .arg(c.socket(node))
        .args(["--", "sh", "-c", "echo $HILOCK_FENCE"])
        .output()
        .unwrap();
    let took = t.elapsed();
    if !out.status.success() {
        return (Err(out), took);
    }
    let s = text(&out.stdout);
    let f = s
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("HILOCK_FENCE is not a number: {s:?}"));
    (Ok(f), took)
}

/// Every path taken in W from every node, in turn: each must be granted, with a fence
/// above every earlier fence of its path. Returns the slowest grant.
fn take_everything(c: &Cluster, paths: &[String], last: &mut [u64], when: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    for node in 0..3 {
        for (p, last) in paths.iter().zip(last.iter_mut()) {
            let (r, took) = lock(c, node, p);
            let f = match r {
                Ok(f) => f,
                Err(out) => panic!(
                    "{when}: {p} at node {node} failed after {took:?}: {}",
                    text(&out.stderr).trim()
                ),
            };
            assert!(
                f > *last,
                "{when}: {p} at node {node}: fence {f} after {last}"
            );
            *last = f;
            slowest = slowest.max(took);
        }
    }
    slowest
}

/// A rolling restart with SIGTERM of every node of a static cluster with `state_dir`:
/// each node suspends and resumes as the same run, and afterwards every path — nested
/// ones, with their tokens and routes at the restarted node — is granted from every node,
/// with fences that grow across the whole run. (Without the suspend the restarted node is
/// a new run, refused by its peers, and the paths whose token or route is at it fail.)
#[test]
fn a_sigterm_rolling_restart_of_a_static_cluster_leaves_every_path_usable() {
    let mut c = start();
    let a = path_at("/a", 0);
    let c1 = path_at("/c", 1);
    let d = path_at("/d", 2);
    let paths = vec![
        a.clone(),
        format!("{a}/b"),
        c1.clone(),
        format!("{c1}/x/y"),
        d.clone(),
        format!("{d}/e"),
    ];
    let mut last = vec![0u64; paths.len()];
    let t = take_everything(&c, &paths, &mut last, "before the restarts");
    eprintln!("before the restarts: slowest grant {t:?}");
    let config = c.config();
    for id in 0..3 {
        // Every token is at the node that stops, and the other nodes' routes go to it.
        for (i, p) in paths.iter().enumerate() {
            let (r, _) = lock(&c, id, p);
            let f = r.unwrap_or_else(|o| panic!("{p} at node {id}: {}", text(&o.stderr)));
            assert!(f > last[i], "{p} at node {id}: fence {f} after {}", last[i]);
            last[i] = f;
        }
        let stopped = c.term(id);
        let log = c.log(id);
        let saved = c.snapshot(id).exists();
        let t = Instant::now();
        c.start_node(id, &config);
        let started = t.elapsed();
        let slowest = take_everything(&c, &paths, &mut last, &format!("after node {id}'s restart"));
        let took = t.elapsed();
        let line = log
            .lines()
            .find(|l| l.contains("suspended:"))
            .unwrap_or_else(|| panic!("node {id} logs its suspend:\n{log}"));
        assert!(saved, "{line}");
        eprintln!(
            "node {id}: exited {stopped:?} after SIGTERM; back and every path taken from \
             every node {took:?} after its start ({started:?} to its socket, slowest grant \
             {slowest:?}); {line}"
        );
        assert!(!c.snapshot(id).exists(), "the snapshot is consumed");
        assert!(c.log(id).contains("resumed from"), "{}", c.log(id));
        let st = hilock()
            .args(["status", "--socket"])
            .arg(c.socket(id))
            .output()
            .unwrap();
        assert!(
            text(&st.stdout).contains("(resumed after a suspend)"),
            "{}",
            text(&st.stdout)
        );
        assert!(took < Duration::from_secs(30), "{took:?}");
    }
    eprintln!("fences at the end: {last:?}");
}

/// A resumed node that crashes (SIGKILL) and starts again does not resume a second time:
/// its snapshot was deleted when it resumed, so it is a new run, refused by its peers as
/// before, and it grants nothing.
#[test]
fn a_resumed_node_killed_and_started_again_is_refused_as_a_new_run() {
    let mut c = start();
    let p = path_at("/k", 2);
    let (r, _) = lock(&c, 2, &p);
    let before = r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    let config = c.config();
    c.term(2);
    c.start_node(2, &config);
    let (r, _) = lock(&c, 2, &p);
    let resumed = r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    assert!(resumed > before, "{resumed} after {before}");
    c.kill(2);
    c.start_node(2, &config);
    let t = Instant::now();
    loop {
        let (r, took) = lock(&c, 2, &p);
        match r {
            Ok(f) => panic!("a new run of node 2 granted {p} (fence {f})"),
            Err(out) => {
                let e = text(&out.stderr);
                if e.contains("refused") {
                    eprintln!(
                        "the new run is refused after {:?}: {}",
                        t.elapsed(),
                        e.trim()
                    );
                    break;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(15),
                    "refused within 15 s; last answer after {took:?}: {e}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !c.log(2).contains("resumed from"),
        "the second start does not resume:\n{}",
        c.log(2)
    );
    assert!(!c.snapshot(2).exists());
    // The refused run does not suspend either.
    c.term(2);
    assert!(c.log(2).contains("not suspended ("), "{}", c.log(2));
    assert!(!c.snapshot(2).exists());
}

/// A node started while another process holds its `state_dir` — its previous run, which
/// closes its peer port when it stops and writes its suspended run only after that —
/// waits for that process to let go, then resumes the run as the same run. Before, a start
/// in that window found no snapshot yet and came up as a new run, which the cluster
/// refused (`docs/faults.md`, "Suspend and resume"). Here the test holds the lock the
/// stopping run would.
#[test]
fn a_start_while_the_previous_run_holds_state_dir_waits_and_resumes_it() {
    let mut c = start();
    let p = path_at("/g", 2);
    let (r, _) = lock(&c, 2, &p);
    let before = r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    c.term(2);
    assert!(c.snapshot(2).exists());
    // flock(1) holds the lock (flock(2)) as the stopping run's process would; `-o`: only
    // flock itself, not its `sleep`, has the file open, so killing it lets go.
    let lock_file = c.dir.path().join("state-2/lock");
    let mut held = Command::new("flock")
        .arg("-o")
        .arg(&lock_file)
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while Command::new("flock")
        .arg("-n")
        .arg(&lock_file)
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "flock(1) holds the lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(c.socket(2));
    c.runs[2] += 1;
    c.nodes[2] = spawn(c.dir.path(), &c.config(), 2, c.runs[2]);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !c.socket(2).exists(),
        "serves only once state_dir is its own"
    );
    assert!(c.snapshot(2).exists(), "the snapshot is not taken yet");
    assert!(
        c.log(2).contains("is locked by another process"),
        "{}",
        c.log(2)
    );
    held.kill().unwrap();
    let _ = held.wait();
    wait_serving(&c.socket(2));
    let (r, _) = lock(&c, 2, &p);
    let after = r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    assert!(after > before, "{after} after {before}");
    assert!(c.log(2).contains("resumed from"), "{}", c.log(2));
}

/// A suspend that cannot write its temporary file (a directory in its place) says so,
/// naming that file, not `suspended`, and the node stops as without `state_dir`.
#[test]
fn a_suspend_that_cannot_write_names_the_file_in_the_way() {
    let mut c = start();
    let tmp = c.dir.path().join("state-1/suspended.tmp");
    std::fs::create_dir(&tmp).unwrap();
    c.term(1);
    let log = c.log(1);
    assert!(
        log.contains(&format!("not suspended (cannot write {}", tmp.display())),
        "{log}"
    );
    assert!(!c.snapshot(1).exists());
}

/// A snapshot written by another node or cluster, or corrupted, is not resumed: the node
/// exits non-zero at once with one line naming the file, without a panic; a refused
/// snapshot is left in place.
#[test]
fn a_mismatching_or_corrupted_snapshot_is_a_one_line_error() {
    let mut c = start();
    let (r, _) = lock(&c, 1, &path_at("/m", 1));
    r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    c.term(1);
    let file = c.snapshot(1);
    assert!(file.exists());
    let start_fails = |config: &Path| -> String {
        let t = Instant::now();
        let out = hilock()
            .args(["node", "--config"])
            .arg(config)
            .args(["--id", "1"])
            .env("RUST_LOG", "hilock=warn")
            .output()
            .unwrap();
        let e = text(&out.stderr);
        eprintln!("{:?} after {:?}: {}", out.status, t.elapsed(), e.trim());
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(!e.contains("panicked"), "{e}");
        assert!(e.contains(&file.display().to_string()), "{e}");
        e
    };
    // Another cluster's configuration with the same state directory.
    let other = c.dir.path().join("other.toml");
    let toml = std::fs::read_to_string(c.config()).unwrap();
    std::fs::write(
        &other,
        toml.replace("cluster = \"resume\"", "cluster = \"other\""),
    )
    .unwrap();
    let e = start_fails(&other);
    assert!(e.contains("written by node 1 of cluster \"resume\""), "{e}");
    assert!(file.exists(), "a refused snapshot stays");
    // One byte of the body changed.
    let mut b = std::fs::read(&file).unwrap();
    let at = b.len() - 10;
    b[at] = if b[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&file, &b).unwrap();
    let e = start_fails(&c.config());
    assert!(e.contains("corrupted"), "{e}");
    // Not a snapshot at all.
    std::fs::write(&file, "{}").unwrap();
    let e = start_fails(&c.config());
    assert!(e.contains("not a snapshot"), "{e}");
}

/// `hilock status --json` of node `id`.
fn status_json(c: &Cluster, id: usize) -> serde_json::Value {
    let out = hilock()
        .args(["status", "--json", "--socket"])
        .arg(c.socket(id))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits (at most 10 s) until `path`'s queue at node `id` holds a request of `from`.
fn wait_queued(c: &Cluster, id: usize, path: &str, from: usize) {
    let t = Instant::now();
    loop {
        let s = status_json(c, id);
        let queued = s["locks"].as_array().unwrap().iter().any(|l| {
            l["path"] == path
                && l["queue"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|q| q.as_str().unwrap().starts_with(&format!("{from}:")))
        });
        if queued {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{s}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(p: &Proc, sig: &str) {
    assert!(Command::new("kill")
        .args([sig, &p.0.id().to_string()])
        .status()
        .unwrap()
        .success());
}

/// `hilock lock path W` at node `node` in the background, printing its fence.
fn lock_in_background(c: &Cluster, node: usize, path: &str) -> Proc {
    Proc(
        hilock()
            .args(["lock", path, "W", "--timeout-ms", "10000", "--socket"])
            .arg(c.socket(node))
            .args(["--", "sh", "-c", "echo $HILOCK_FENCE"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// The fence a background `hilock lock` printed; it must succeed within 10 s.
fn background_fence(mut p: Proc) -> u64 {
    use std::io::Read;
    let st = wait_exit(&mut p, Duration::from_secs(10));
    let (mut out, mut err) = (String::new(), String::new());
    p.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    p.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(st.success(), "{err}");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out:?} {err}"))
}

/// Messages of either side wait for a suspended node: node 1 suspends while the grant of
/// its lock to node 2 (stopped with SIGSTOP) is not acknowledged — it is saved and resent
/// by the resumed run — and node 0 asks node 1 for a lock while it is down — node 0 keeps
/// the request and resends it. Both are granted once node 1 is back, with fences above
/// the earlier ones.
#[test]
fn messages_of_either_side_wait_for_a_suspended_node_and_are_delivered_after_it_resumes() {
    let mut c = start();
    let p = path_at("/h", 1);
    let q = path_at("/q", 1);
    let marker = c.dir.path().join("held");
    let holder = Proc(
        hilock()
            .args(["lock", &p, "W", "--socket"])
            .arg(c.socket(1))
            .args([
                "--",
                "sh",
                "-c",
                &format!(
                    "echo $HILOCK_FENCE > {0}.tmp; mv {0}.tmp {0}; sleep 30",
                    marker.display()
                ),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !marker.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "node 1 holds {p}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let held: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let waiter = lock_in_background(&c, 2, &p);
    wait_queued(&c, 1, &p, 2);
    signal(&c.nodes[2], "-STOP");
    c.term(1);
    drop(holder);
    let log = c.log(1);
    let line = log
        .lines()
        .find(|l| l.contains("suspended:"))
        .unwrap_or_else(|| panic!("node 1 logs its suspend:\n{log}"));
    let kept: usize = line
        .split("locks, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        kept >= 1,
        "the hand-over to the stopped node 2 is kept: {line}"
    );
    // Node 0 asks the suspended node 1 for `q` (its token is there).
    let asker = lock_in_background(&c, 0, &q);
    std::thread::sleep(Duration::from_millis(300));
    signal(&c.nodes[2], "-CONT");
    let t = Instant::now();
    c.start_node(1, &c.config());
    let to_2 = background_fence(waiter);
    let took_2 = t.elapsed();
    let to_0 = background_fence(asker);
    let took_0 = t.elapsed();
    eprintln!(
        "{line}\nnode 2 granted {p} (fence {to_2}, node 1 held {held}) {took_2:?} and node 0 \
         granted {q} (fence {to_0}) {took_0:?} after node 1's start"
    );
    assert!(to_2 > held, "{to_2} after {held}");
    assert!(c.log(1).contains("resumed from"), "{}", c.log(1));
}

/// A suspend cannot carry the agents engine's state, so on a cluster with `state_dir`
/// `hilock lock --txn` is refused at every node (exit 2, one line, the command does not
/// run, no agents message is sent); afterwards the whole cluster stopped with SIGTERM
/// still suspends and resumes as the same run, fences going on.
#[test]
fn txn_is_refused_with_state_dir_and_the_whole_cluster_still_resumes() {
    let mut c = start();
    let p = path_at("/t", 1);
    let (r, _) = lock(&c, 0, &p);
    let before = r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    let marker = c.dir.path().join("ran");
    let txn = |c: &Cluster, id: usize| {
        hilock()
            .args(["lock", "--txn", "/acct/1:W", "/acct/2:W", "--socket"])
            .arg(c.socket(id))
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .unwrap()
    };
    for id in 0..3 {
        let out = txn(&c, id);
        let e = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "node {id}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains("state_dir"), "{e}");
        assert!(!e.contains("Txn") && !e.contains("StateDir"), "{e}");
        assert!(!marker.exists(), "the command did not run");
    }
    let config = c.config();
    for id in 0..3 {
        c.term(id);
        assert!(
            c.snapshot(id).exists(),
            "node {id} suspends:\n{}",
            c.log(id)
        );
    }
    for id in 0..3 {
        c.start_node(id, &config);
    }
    let mut last = before;
    for id in 0..3 {
        let (r, _) = lock(&c, id, &p);
        let f = r.unwrap_or_else(|o| panic!("node {id}: {}", text(&o.stderr)));
        assert!(f > last, "fence {f} after {last}");
        last = f;
        assert!(c.log(id).contains("resumed from"), "{}", c.log(id));
    }
    assert_eq!(txn(&c, 2).status.code(), Some(2));
}

/// A node that has not agreed on the run's generation with every node yet (its peers
/// never started), and a node that records its steps (`record`), stop as without
/// `state_dir`: their next start is a new run.
#[test]
fn a_node_without_the_generation_or_with_record_does_not_suspend() {
    let mut c = start_with("", &[0]);
    c.term(0);
    assert!(
        c.log(0)
            .contains("not suspended (waiting for the generation"),
        "{}",
        c.log(0)
    );
    assert!(!c.snapshot(0).exists());
    let mut c = start_with("record = \"trace-{id}.jsonl\"\n", &[0, 1, 2]);
    let (r, _) = lock(&c, 0, &path_at("/r", 1));
    r.unwrap_or_else(|o| panic!("{}", text(&o.stderr)));
    c.term(0);
    assert!(
        c.log(0).contains("not suspended (`record` is on"),
        "{}",
        c.log(0)
    );
    assert!(!c.snapshot(0).exists());
}
