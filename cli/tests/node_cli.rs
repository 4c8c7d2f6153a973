//! `hilock node`, `hilock lock -- cmd` and `hilock status` end to end: two node processes
//! on 127.0.0.1, locks taken from the shell.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn hilock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hilock"))
}

/// Kills the node process when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

use ports::free_port;

struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Proc>,
}

impl Cluster {
    fn socket(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("n{id}.sock"))
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("cluster.toml")
    }

    /// `kill SIG pid` of node `id` (e.g. `-STOP`, `-CONT`, `-TERM`).
    fn signal(&self, id: usize, sig: &str) {
        let pid = self.nodes[id].0.id().to_string();
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    }
}

fn start(n: usize) -> Cluster {
    start_with(n, "")
}

/// `n` nodes with `extra` lines in their configuration file.
fn start_with(n: usize, extra: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let mut toml = String::from(
        "cluster = \"cli\"\nsecret = \"cli test secret\"\nrequest_timeout_ms = 10000\n",
    );
    toml.push_str(extra);
    // One file for the whole cluster; `{id}` in the socket path becomes each node's id.
    toml.push_str(&format!(
        "client = \"{}\"\n",
        dir.path().join("n{id}.sock").display()
    ));
    for id in 0..n {
        toml.push_str(&format!(
            "[[nodes]]\nid = {id}\naddr = \"127.0.0.1:{}\"\n",
            free_port()
        ));
    }
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, toml).unwrap();
    let nodes = (0..n).map(|id| spawn_node(&file, id)).collect();
    let c = Cluster { dir, nodes };
    for id in 0..n {
        wait_socket(&c, id);
    }
    c
}

/// Start node `id` of the cluster configured in `file`.
fn spawn_node(file: &Path, id: usize) -> Proc {
    let child = hilock()
        .args(["node", "--config"])
        .arg(file)
        .args(["--id", &id.to_string()])
        .env("RUST_LOG", "hilock=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Proc(child)
}

/// Wait until node `id` serves its client socket.
fn wait_socket(c: &Cluster, id: usize) {
    wait_serving(&c.socket(id), Duration::from_secs(20));
}

/// Wait (at most `limit`) until a node serves its client socket `sock`.
fn wait_serving(sock: &Path, limit: Duration) {
    let t = Instant::now();
    while !sock.exists() {
        assert!(t.elapsed() < limit, "node at {} starts", sock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A command that writes `up` to `held` once it runs, then keeps its lock until `done`
/// exists (at most 60 s, so a failed test leaves no holder behind).
fn hold_until(held: &Path, done: &Path) -> String {
    format!(
        "echo up > {0}; i=0; while [ ! -e {1} ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done",
        held.display(),
        done.display()
    )
}

/// Node 0 of `c` holds `path` in W (a [`hold_until`] command) until the returned file is
/// made; this returns once the command runs.
fn held_at_node_0(c: &Cluster, path: &str) -> (Proc, PathBuf) {
    let (held, done) = (c.dir.path().join("held"), c.dir.path().join("done"));
    let holder = Proc(
        lock_cmd(&c.socket(0), path, "W", &hold_until(&held, &done))
            .spawn()
            .unwrap(),
    );
    wait_file(&held);
    (holder, done)
}

/// A reader's command: it appends `in` to `file`, waits until two lines say `in` (the
/// other reader runs too; at most 30 s), then appends `out`.
fn overlapping_reader(file: &Path) -> String {
    format!(
        "echo in >> {0}; i=0; while [ \"$(grep -c '^in$' {0})\" -lt 2 ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done; echo out >> {0}",
        file.display()
    )
}

fn lock_cmd(socket: &Path, path: &str, mode: &str, script: &str) -> Command {
    let mut c = hilock();
    c.args(["lock", path, mode, "--socket"])
        .arg(socket)
        .args(["--", "sh", "-c", script]);
    c
}

#[test]
fn hilock_lock_runs_commands_under_mutual_exclusion_across_processes() {
    let c = start(2);
    let log = c.dir.path().join("log");
    let script = format!(
        "echo start >> {0}; sleep 0.15; echo end >> {0}",
        log.display()
    );
    // Three critical sections on each node, all in W on the same lock, concurrently.
    let mut kids = Vec::new();
    for _ in 0..3 {
        for id in 0..2 {
            kids.push(
                lock_cmd(&c.socket(id), "/db/flights", "W", &script)
                    .spawn()
                    .unwrap(),
            );
        }
    }
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 12, "{lines:?}");
    for pair in lines.chunks(2) {
        assert_eq!(
            pair,
            ["start", "end"],
            "critical sections overlapped: {lines:?}"
        );
    }

    // The command's exit status is passed through.
    let out = run(&mut lock_cmd(&c.socket(1), "/db", "R", "exit 3"));
    assert_eq!(out.status.code(), Some(3));

    // Readers share: two R holders at once on different nodes. Each waits for the other
    // to be in before it leaves, so both lines `in` come first only if they overlap.
    let both = c.dir.path().join("both");
    let script = overlapping_reader(&both);
    let a = lock_cmd(&c.socket(0), "/db/flights", "R", &script)
        .spawn()
        .unwrap();
    let b = lock_cmd(&c.socket(1), "/db/flights", "R", &script)
        .spawn()
        .unwrap();
    for mut k in [a, b] {
        assert!(k.wait().unwrap().success());
    }
    let s = std::fs::read_to_string(&both).unwrap();
    assert_eq!(
        s.lines().take(2).collect::<Vec<_>>(),
        ["in", "in"],
        "R and R overlap: {s:?}"
    );

    // status shows the locks this node has seen, and its peer.
    let out = run(hilock().args(["status", "--socket"]).arg(c.socket(0)));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("node 0 of cluster \"cli\""), "{s}");
    assert!(s.contains("/db/flights"), "{s}");
    assert!(s.contains("connected"), "{s}");
    let out = run(hilock()
        .args(["status", "--json", "--socket"])
        .arg(c.socket(1)));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["id"], 1);
    assert!(v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["holders"] == 0));

    // --config finds the socket from the cluster file (node 0's entry).
    let out = run(hilock()
        .args(["status", "--id", "0", "--config"])
        .arg(c.config()));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn hilock_lock_times_out_with_one_line_and_exit_2() {
    let c = start(3);
    // Node 0 holds /t until the request of node 1 has timed out.
    let (held, done) = (c.dir.path().join("held"), c.dir.path().join("done"));
    let holder = lock_cmd(&c.socket(0), "/t", "W", &hold_until(&held, &done))
        .spawn()
        .unwrap();
    let _holder = Proc(holder);
    wait_file(&held);
    let out = run(hilock()
        .args(["lock", "/t", "W", "--timeout-ms", "300", "--socket"])
        .arg(c.socket(1))
        .args(["--", "true"]));
    std::fs::write(&done, "").unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(e.contains("timed out"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    // The timed-out request was cancelled in node 1's kernel (`spec/SPEC.md` 1.13): it is
    // never granted to a caller there.
    let v = status_json(&c, 1);
    assert_eq!(v["stats"]["cancels"], 1, "{v}");
    // A serving node's `not_serving` is there, `null` (docs/operations.md): one schema.
    assert_eq!(v.get("not_serving"), Some(&serde_json::Value::Null), "{v}");
    // Bad input: one line, exit 2.
    for args in [
        vec!["lock", "/t", "X"],
        vec!["lock", "t", "W"],
        vec!["lock", "/t", "phi"],
    ] {
        let out = run(hilock()
            .args(&args)
            .arg("--socket")
            .arg(c.socket(0))
            .args(["--", "true"]));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr).trim_end().lines().count(), 1, "{args:?}");
    }
    // HILOCK_SOCKET names the node's socket when --socket and --config are not given.
    let out = run(hilock().env("HILOCK_SOCKET", c.socket(2)).args([
        "lock",
        "/env",
        "W",
        "--timeout-ms",
        "2000",
        "--",
        "true",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // SIGTERM, SIGINT (Ctrl-C) and SIGHUP stop a node cleanly: its client socket goes away.
    for (node, sig) in [(1, "-HUP"), (2, "-INT"), (0, "-TERM")] {
        c.signal(node, sig);
        let t = Instant::now();
        while c.socket(node).exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "node {node} stops on {sig}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Node `node`'s `hilock status --json`.
fn status_json(c: &Cluster, node: usize) -> serde_json::Value {
    let out = run(hilock()
        .args(["status", "--json", "--timeout-ms", "2000", "--socket"])
        .arg(c.socket(node)));
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `hilock lock --try` (`docs/cli.md`, exit 79; `spec/SPEC.md` 1.12): while node 0 holds
/// /t in W, a try of /t in W on node 1 exits 79 at once (well inside the 10 s request
/// timeout; a few milliseconds on loopback) with one line, and CMD does not run; when the holder releases, nothing is granted to node 1 (its
/// status: no grant, no abandoned grant, /t neither held nor pending). Then the lock is
/// free and a try runs CMD.
#[test]
fn hilock_lock_try_exits_79_at_once_and_is_never_granted_later() {
    let c = start(2);
    wait_peer_state(&c, 1, 0, "connected");
    // Node 0 holds /t until the try is answered.
    let (mut holder, done) = held_at_node_0(&c, "/t");
    let ran = c.dir.path().join("ran");
    let touch = format!("touch {}", ran.display());
    let t = Instant::now();
    let out = run(hilock()
        .args(["lock", "--try", "/t", "W", "--socket"])
        .arg(c.socket(1))
        .args(["--", "sh", "-c", &touch]));
    let took = t.elapsed();
    std::fs::write(&done, "").unwrap();
    println!("hilock lock --try refused in {took:?}");
    assert_eq!(out.status.code(), Some(79), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let e = text(&out.stderr);
    assert!(
        e.contains("busy") && e.trim_end().lines().count() == 1,
        "{e}"
    );
    assert!(!ran.exists(), "CMD did not run");
    let _ = holder.0.wait();
    // Node 0 released /t; nothing reaches node 1 for it.
    let t = Instant::now();
    loop {
        let v = status_json(&c, 0);
        let l = v["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["path"] == "/t")
            .cloned();
        if l.is_some_and(|l| l["held"] == "Φ" && l["holders"] == 0) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "node 0 releases /t: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let v = status_json(&c, 1);
    assert_eq!(v["stats"]["grants"], 0, "{v}");
    assert_eq!(v["stats"]["abandoned_grants"], 0, "{v}");
    assert_eq!(v["stats"]["would_block"], 1, "{v}");
    for l in v["locks"].as_array().unwrap() {
        assert!(l["held"] == "Φ" && l["pending"] == "Φ", "{l}");
    }
    // Free now: the try is granted and CMD runs.
    let out = run(hilock()
        .args(["lock", "--try", "/t", "W", "--socket"])
        .arg(c.socket(1))
        .args(["--", "sh", "-c", &touch]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(ran.exists());
}

/// `hilock lock --try` at a node that grants nothing yet is not "busy" (`docs/cli.md`,
/// exit 79): node 0 of a two-node cluster runs alone, so no majority has let it in; a try
/// exits 2 with one line saying why, and CMD does not run.
#[test]
fn hilock_lock_try_at_a_node_not_let_in_yet_exits_2_not_79() {
    let dir = tempfile::tempdir().unwrap();
    let mut toml = format!(
        "cluster = \"cli\"\nsecret = \"cli test secret\"\nclient = \"{}\"\n",
        dir.path().join("n{id}.sock").display()
    );
    for id in 0..2 {
        toml.push_str(&format!(
            "[[nodes]]\nid = {id}\naddr = \"127.0.0.1:{}\"\n",
            free_port()
        ));
    }
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, toml).unwrap();
    let _n0 = spawn_node(&file, 0);
    let socket = dir.path().join("n0.sock");
    let t = Instant::now();
    while !socket.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "node 0's socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ran = dir.path().join("ran");
    let out = run(hilock()
        .args(["lock", "--try", "/t", "W", "--socket"])
        .arg(&socket)
        .args(["--", "touch"])
        .arg(&ran));
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("grants nothing yet") && e.contains("majority") && !e.contains("busy"),
        "{e}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(!ran.exists(), "CMD did not run");
}

#[test]
fn config_errors_give_one_line_and_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    for (content, want) in [
        ("cluster = \"c\"\n", "missing"),
        (
            "cluster = \"c\"\nsecret=\"0123456789\"\nid=0\n[[nodes]]\nid=0\naddr=\"x\"\n",
            "line",
        ),
        (
            "cluster = \"c\"\nsecret=\"0123456789\"\nid=3\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"\n",
            "id 3",
        ),
        ("not toml at all [", "line"),
        // An unknown key at the start of line 4 is reported on line 4.
        (
            "cluster = \"c\"\nsecret=\"0123456789\"\nid=0\nmax_client=3\n[[nodes]]\nid=0\naddr=\"127.0.0.1:1\"\n",
            "line 4: unknown field `max_client`",
        ),
    ] {
        std::fs::write(&bad, content).unwrap();
        let out = run(hilock().args(["node", "--config"]).arg(&bad));
        assert_eq!(out.status.code(), Some(2), "{content}");
        let e = text(&out.stderr);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains(want), "{e} should mention {want}");
    }
    let out = run(hilock().args(["node", "--config", "/nonexistent/hilock.toml"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read config"));
    // No node listening on the socket: one line.
    let out = run(hilock()
        .args(["status", "--socket"])
        .arg(dir.path().join("none.sock")));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is `hilock node` running?"));
}

/// `hilock --version` names the optional features built in: `etcd` exactly when this
/// test binary's package was built with it (the same feature set as the binary's).
#[test]
fn version_names_the_optional_features_built_in() {
    let out = run(hilock().arg("--version"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut features = Vec::new();
    if cfg!(feature = "models") {
        features.push("models");
    }
    if cfg!(feature = "etcd") {
        features.push("etcd");
    }
    let features = if features.is_empty() {
        "none".to_string()
    } else {
        features.join(", ")
    };
    assert_eq!(
        text(&out.stdout),
        format!(
            "hilock {} (features: {features})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// Wait for `file` to exist (the command wrote it), within 10 s.
fn wait_file(file: &Path) -> String {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{} written",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    hilock_runtime::proc::stat(pid).is_some_and(|(s, _, _)| s != 'Z' && s != 'X')
}

/// A script that writes the pids of a background `sleep 100` and of the shell itself to
/// `file` (atomically), then sleeps too: three processes in the command's group, two of
/// them named in the file.
fn sleepers(file: &Path, prefix: &str) -> String {
    format!(
        "{prefix}sleep 100 & echo $! > {0}.tmp; echo $$ >> {0}.tmp; mv {0}.tmp {0}; sleep 100",
        file.display()
    )
}

fn pids(s: &str) -> Vec<i32> {
    s.split_whitespace().map(|p| p.parse().unwrap()).collect()
}

/// Wait until `node`'s status shows `path` pending in `mode` (a request is waiting there).
fn wait_pending(c: &Cluster, node: usize, path: &str, mode: &str) {
    let t = Instant::now();
    loop {
        let out = run(hilock()
            .args(["status", "--json", "--socket"])
            .arg(c.socket(node)));
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            let pending = v["locks"].as_array().is_some_and(|ls| {
                ls.iter()
                    .any(|l| l["path"] == path && (l["pending"] == mode || l["waiters"] != 0))
            });
            if pending {
                return;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "request waits");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_of_hilock_lock_kills_its_command_before_another_node_is_granted() {
    let c = start(2);
    let f = c.dir.path().join("pids");
    let holder = lock_cmd(&c.socket(0), "/k", "W", &sleepers(&f, ""))
        .spawn()
        .unwrap();
    let mut holder = Proc(holder);
    let held = pids(&wait_file(&f));
    assert!(held.iter().all(|&p| running(p)));
    // Node 1 waits for the lock; what it finds when granted goes to `seen`.
    let seen = c.dir.path().join("seen");
    let check = format!(
        "for p in {}; do if [ -r /proc/$p/stat ] && ! grep -q ') [ZX] ' /proc/$p/stat; then echo alive $p; else echo dead $p; fi; done > {1}.tmp; mv {1}.tmp {1}",
        held.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" "),
        seen.display()
    );
    let waiter = lock_cmd(&c.socket(1), "/k", "W", &check).spawn().unwrap();
    let mut waiter = Proc(waiter);
    wait_pending(&c, 1, "/k", "W");
    holder.0.kill().unwrap(); // SIGKILL: the wrapper cannot clean up
    let _ = holder.0.wait();
    let t = Instant::now();
    let st = loop {
        if let Some(st) = waiter.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "node 1 is granted once the group is dead"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(st.success());
    let s = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(
        s.matches("dead").count(),
        held.len(),
        "at node 1's grant: {s}"
    );
    assert!(held.iter().all(|&p| !running(p)));
}

/// SIGSTOP of `hilock lock` (3 s) while its command runs to its end: a hold of the token
/// engine belongs to the node, and a static node's hold has no lease, so nothing passes on
/// while the wrapper is stopped — every `hilock lock --try` of another node is refused
/// (exit 79); resumed, the wrapper releases and exits 0, and only then is the other node
/// granted, after the command's last heartbeat.
#[test]
fn a_stopped_hilock_lock_keeps_its_lock_until_it_resumes() {
    let c = start(2);
    let beats = c.dir.path().join("beats");
    let script = format!(
        "for i in $(seq 1 50); do date +%s%N >> {}; sleep 0.01; done",
        beats.display()
    );
    let mut holder = Proc(lock_cmd(&c.socket(0), "/s", "W", &script).spawn().unwrap());
    wait_file(&beats);
    let pid = holder.0.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success()));
    };
    signal("-STOP");
    let t = Instant::now();
    let mut refused = 0;
    while t.elapsed() < Duration::from_secs(3) {
        let out = hilock()
            .args(["lock", "--try", "/s", "W", "--socket"])
            .arg(c.socket(1))
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(79),
            "node 1 after {:?} of the stop: {out:?}",
            t.elapsed()
        );
        refused += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    signal("-CONT");
    assert!(wait_exit(&mut holder.0, Duration::from_secs(10)).success());
    let last_beat: u128 = std::fs::read_to_string(&beats)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .unwrap();
    let granted = c.dir.path().join("granted");
    let mut next = Proc(
        lock_cmd(
            &c.socket(1),
            "/s",
            "W",
            &format!("date +%s%N > {}", granted.display()),
        )
        .spawn()
        .unwrap(),
    );
    assert!(wait_exit(&mut next.0, Duration::from_secs(10)).success());
    let at: u128 = std::fs::read_to_string(&granted)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(at > last_beat, "node 1 was granted while the command ran");
    eprintln!("stopped hilock lock: {refused} tries of node 1 refused during the stop");
}

/// Nanoseconds since the Unix epoch (as `date +%s%N` prints them).
fn epoch_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// SIGTERM to node 0, whose holder `waiter` waits for: asserts node 0 exits 0 and the
/// waiter's command then runs and succeeds; the signal's wall-clock time (ns) and how long
/// node 0 took to exit.
fn sigterm_node_0(c: &mut Cluster, waiter: &mut Proc) -> (u128, Duration) {
    let termed = epoch_ns();
    let t = Instant::now();
    c.signal(0, "-TERM");
    let node_st = wait_exit(&mut c.nodes[0].0, Duration::from_secs(15));
    let exited = t.elapsed();
    assert!(node_st.success(), "{node_st:?}");
    assert!(wait_exit(&mut waiter.0, Duration::from_secs(10)).success());
    (termed, exited)
}

/// SIGTERM of a node while one of its clients holds a lock another node waits for: the
/// holder's command (which ignores SIGTERM, run with `--kill-grace-ms 50`) is dead before
/// the other node is granted, and both the other node's grant (its command started) and
/// the stopped node's exit come promptly: within 1.5 s of the signal, less than the 2 s
/// default kill grace and far less than the 10 s request timeout (tens of milliseconds on
/// an idle machine; the times are printed).
#[test]
fn sigterm_of_a_node_kills_its_command_and_hands_the_lock_over_promptly() {
    let mut c = start(2);
    let f = c.dir.path().join("pids");
    let mut holder = Proc(
        // The command ignores SIGTERM: the node kills it after the 50 ms it was given.
        hilock()
            .args(["lock", "/t", "W", "--kill-grace-ms", "50", "--socket"])
            .arg(c.socket(0))
            .args(["--", "sh", "-c", &sleepers(&f, "trap '' TERM; ")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let held = pids(&wait_file(&f));
    let seen = c.dir.path().join("seen");
    let check = format!(
        "date +%s%N > {1}.tmp; for p in {0}; do if [ -r /proc/$p/stat ] && ! grep -q ') [ZX] ' /proc/$p/stat; then echo alive $p; else echo dead $p; fi; done >> {1}.tmp; mv {1}.tmp {1}",
        held.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" "),
        seen.display()
    );
    let mut waiter = Proc(lock_cmd(&c.socket(1), "/t", "W", &check).spawn().unwrap());
    wait_pending(&c, 1, "/t", "W");
    let (termed, exited) = sigterm_node_0(&mut c, &mut waiter);
    let s = std::fs::read_to_string(&seen).unwrap();
    let granted: u128 = s.lines().next().unwrap().trim().parse().unwrap();
    let handed_over = Duration::from_nanos((granted - termed) as u64);
    eprintln!("SIGTERM: node exited after {exited:?}; node 1's command started {handed_over:?} after the signal");
    assert_eq!(
        s.matches("dead").count(),
        held.len(),
        "at node 1's grant: {s}"
    );
    assert!(exited < Duration::from_millis(1500), "node exit {exited:?}");
    assert!(
        handed_over < Duration::from_millis(1500),
        "hand-over {handed_over:?}"
    );
    let st = wait_exit(&mut holder.0, Duration::from_secs(10));
    assert_eq!(st.code(), Some(76));
    assert!(held.iter().all(|&p| !running(p)), "{held:?}");
}

/// SIGTERM of a node gives each holder's command the `--kill-grace-ms` its `hilock lock`
/// was given (at most 10 s) between SIGTERM and SIGKILL, as the wrapper's own kill does:
/// a command that traps SIGTERM and needs 300 ms to clean up finishes its cleanup under
/// the lock, before the waiting node is granted. Red before: the node sent SIGKILL 40 ms
/// after SIGTERM and the cleanup never ran.
#[test]
fn sigterm_of_a_node_gives_the_command_its_kill_grace_to_clean_up() {
    let mut c = start(2);
    let (started, cleaned) = (c.dir.path().join("started"), c.dir.path().join("cleaned"));
    let script = format!(
        "trap 'sleep 0.3; date +%s%N > {1}; exit 0' TERM; echo up > {0}; \
         while true; do sleep 0.05; done",
        started.display(),
        cleaned.display()
    );
    let mut holder = Proc(
        hilock()
            .args(["lock", "/g", "W", "--kill-grace-ms", "3000", "--socket"])
            .arg(c.socket(0))
            .args(["--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_file(&started);
    let granted = c.dir.path().join("granted");
    let mut waiter = Proc(
        lock_cmd(
            &c.socket(1),
            "/g",
            "W",
            &format!("date +%s%N > {}", granted.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_pending(&c, 1, "/g", "W");
    let (_, exited) = sigterm_node_0(&mut c, &mut waiter);
    let read = |p: &Path| -> u128 {
        std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .trim()
            .parse()
            .unwrap()
    };
    eprintln!("SIGTERM: node exited after {exited:?}");
    let (clean, grant) = (read(&cleaned), read(&granted));
    assert!(clean < grant, "the cleanup ran under the lock");
    assert!(exited >= Duration::from_millis(250), "{exited:?}");
    assert!(exited < Duration::from_secs(3), "{exited:?}");
    let _ = wait_exit(&mut holder.0, Duration::from_secs(10));
}

#[test]
fn the_command_dies_with_the_lock_and_exit_codes_say_why() {
    // The node crashes (SIGKILL): the connection closes, the wrapper kills the group —
    // SIGTERM, and SIGKILL after the grace since the command ignores SIGTERM — and exits 75.
    let c = start(1);
    let f = c.dir.path().join("pids");
    let mut wrapper = Proc(
        hilock()
            .args(["lock", "/g", "W", "--kill-grace-ms", "400", "--socket"])
            .arg(c.socket(0))
            .args(["--", "sh", "-c", &sleepers(&f, "trap '' TERM; ")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let held = pids(&wait_file(&f));
    let mut node = c.nodes.into_iter().next().unwrap();
    let t = Instant::now();
    node.0.kill().unwrap();
    let st = wait_exit(&mut wrapper.0, Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(st.code(), Some(75));
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "SIGKILL after the 400 ms grace: {took:?}"
    );
    assert!(held.iter().all(|&p| !running(p)), "{held:?}");
    let mut e = String::new();
    std::io::Read::read_to_string(wrapper.0.stderr.as_mut().unwrap(), &mut e).unwrap();
    assert!(e.contains("connection to the node closed"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");

    // The node stops (SIGTERM): it reports the loss, the wrapper exits 76; the node
    // itself is gone promptly (at once on an idle machine; the bound is half the 10 s
    // request timeout).
    let mut c = start(1);
    let f = c.dir.path().join("pids");
    let mut wrapper = Proc(
        hilock()
            .args(["lock", "/g", "W", "--socket"])
            .arg(c.socket(0))
            .args(["--", "sh", "-c", &sleepers(&f, "")])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let held = pids(&wait_file(&f));
    c.signal(0, "-TERM");
    let node_st = wait_exit(&mut c.nodes[0].0, Duration::from_secs(5));
    assert!(node_st.success(), "{node_st:?}");
    let st = wait_exit(&mut wrapper.0, Duration::from_secs(10));
    assert_eq!(st.code(), Some(76));
    assert!(held.iter().all(|&p| !running(p)), "{held:?}");
    let mut e = String::new();
    std::io::Read::read_to_string(wrapper.0.stderr.as_mut().unwrap(), &mut e).unwrap();
    assert!(e.contains("the node is stopping"), "{e}");

    // The command exits leaving a background process: it is killed before the release,
    // and the command's status is passed through.
    let c = start(1);
    let f = c.dir.path().join("bg");
    let script = format!(
        "sleep 100 & echo $! > {0}.tmp; mv {0}.tmp {0}; exit 4",
        f.display()
    );
    let out = run(&mut lock_cmd(&c.socket(0), "/g", "W", &script));
    assert_eq!(out.status.code(), Some(4));
    let bg = pids(&std::fs::read_to_string(&f).unwrap());
    assert!(!running(bg[0]), "the background sleep is gone");

    // SIGTERM to the wrapper goes to the command; its status says the signal (128 + 15).
    let f = c.dir.path().join("pids2");
    let mut wrapper = Proc(
        lock_cmd(&c.socket(0), "/g", "W", &sleepers(&f, ""))
            .spawn()
            .unwrap(),
    );
    let held = pids(&wait_file(&f));
    let pid = wrapper.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let st = wait_exit(&mut wrapper.0, Duration::from_secs(10));
    assert_eq!(st.code(), Some(128 + 15));
    assert!(held.iter().all(|&p| !running(p)), "{held:?}");
    // The lock was released: it can be taken again at once.
    let out = run(hilock()
        .args(["lock", "/g", "W", "--timeout-ms", "2000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A command that does not exist: 127, one line.
    let out = run(hilock()
        .args(["lock", "/g", "W", "--socket"])
        .arg(c.socket(0))
        .args(["--", "/nonexistent/command"]));
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(text(&out.stderr).trim_end().lines().count(), 1);
    // A command that exists but cannot be executed (no execute permission): 126, one line.
    let plain = c.dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\ntrue\n").unwrap();
    let out = run(hilock()
        .args(["lock", "/g", "W", "--socket"])
        .arg(c.socket(0))
        .arg("--")
        .arg(&plain));
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr).trim_end().lines().count(), 1);
}

/// Ctrl-C (SIGINT) of `hilock lock` while its request waits: the wrapper dies of the
/// signal (130 in a shell) without a word, its command never runs, and the node withdraws the
/// request when the client's connection closes — nothing of it is held later: once the
/// holder is done, the other node gets the lock.
#[test]
fn an_interrupted_waiting_hilock_lock_never_runs_its_command_and_leaves_no_hold() {
    let c = start(2);
    let (held, done) = (c.dir.path().join("held"), c.dir.path().join("done"));
    let ran = c.dir.path().join("ran");
    // Node 0 holds /int until the waiter has been interrupted.
    let mut holder = Proc(
        lock_cmd(&c.socket(0), "/int", "W", &hold_until(&held, &done))
            .spawn()
            .unwrap(),
    );
    wait_file(&held);
    let mut waiter = Proc(
        lock_cmd(
            &c.socket(1),
            "/int",
            "W",
            &format!("touch {}", ran.display()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    // The interrupt comes once node 1 has the request.
    wait_pending(&c, 1, "/int", "W");
    assert!(waiter.0.try_wait().unwrap().is_none(), "the request waits");
    let pid = waiter.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let st = wait_exit(&mut waiter.0, Duration::from_secs(10));
    // The wrapper dies of the signal, as a shell's `$?` of 130 says.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(2),
        "{st:?}"
    );
    let mut e = String::new();
    std::io::Read::read_to_string(waiter.0.stderr.as_mut().unwrap(), &mut e).unwrap();
    assert_eq!(e, "", "nothing on stderr");
    std::fs::write(&done, "").unwrap();
    assert!(wait_exit(&mut holder.0, Duration::from_secs(10)).success());
    let out = run(hilock()
        .args(["lock", "/int", "W", "--timeout-ms", "5000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ran.exists(), "the interrupted command never ran");
}

fn wait_exit(c: &mut Child, wait: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        assert!(t.elapsed() < wait, "exits within {wait:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn nested_hilock_lock_and_two_readers_on_one_node() {
    let c = start(2);
    // Nested: the command under W on /db/a takes W on /db/b from the same node (both
    // need IW on /db, which the node shares between them).
    let f = c.dir.path().join("nested");
    let inner = format!(
        "{} lock /db/b W --timeout-ms 3000 --socket {} -- sh -c 'echo $HILOCK_LOCK > {}'",
        env!("CARGO_BIN_EXE_hilock"),
        c.socket(0).display(),
        f.display()
    );
    let out = run(hilock()
        .args(["lock", "/db/a", "W", "--timeout-ms", "3000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "sh", "-c", &inner]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "/db/b\n");

    // Two readers on one node overlap: each waits for the other to be in before it
    // leaves.
    let both = c.dir.path().join("both");
    let script = overlapping_reader(&both);
    let kids: Vec<_> = (0..2)
        .map(|_| Proc(lock_cmd(&c.socket(0), "/db", "R", &script).spawn().unwrap()))
        .collect();
    for mut k in kids {
        assert!(wait_exit(&mut k.0, Duration::from_secs(40)).success());
    }
    let s = std::fs::read_to_string(&both).unwrap();
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        ["in", "in", "out", "out"],
        "R and R overlap on one node"
    );
}

#[test]
fn every_client_command_gives_up_within_its_timeout_and_logs_are_plain() {
    // A "node" that accepts connections and never answers.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("mute.sock");
    let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            held.push(s);
        }
    });
    for (args, limit) in [
        (vec!["status", "--timeout-ms", "300"], 3000),
        (vec!["lock", "/x", "W", "--timeout-ms", "300"], 4000),
    ] {
        let t = Instant::now();
        let mut cmd = hilock();
        cmd.args(&args).arg("--socket").arg(&sock);
        if args[0] == "lock" {
            cmd.args(["--", "true"]);
        }
        // Bounded even if the command would hang: killed after 10 s.
        let mut child = Proc(cmd.stderr(Stdio::piped()).spawn().unwrap());
        let st = loop {
            if let Some(st) = child.0.try_wait().unwrap() {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{args:?} gives up");
            std::thread::sleep(Duration::from_millis(10));
        };
        let took = t.elapsed();
        assert_eq!(st.code(), Some(2), "{args:?}");
        let mut e = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut e).unwrap();
        // Names the socket that did not answer.
        assert!(
            e.contains(&format!(
                "no answer from the node at {} within",
                sock.display()
            )),
            "{e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(limit),
            "{args:?}: {took:?}"
        );
    }

    // Logs to a file (not a terminal) carry no colour codes.
    let c = start(1);
    let log = c.dir.path().join("node.log");
    let toml = c.config();
    let cfg = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("n{id}.sock", "m{id}.sock");
    let toml2 = c.dir.path().join("other.toml");
    // The same node id on other ports, so it can run beside the first one.
    let cfg = cfg
        .lines()
        .map(|l| {
            if l.starts_with("addr") {
                format!("addr = \"127.0.0.1:{}\"", free_port())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&toml2, cfg).unwrap();
    let mut node = Proc(
        hilock()
            .args(["node", "--id", "0", "--config"])
            .arg(&toml2)
            .env("RUST_LOG", "hilock=info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("node started")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the node logs its start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    node.0.kill().unwrap();
    let _ = node.0.wait();
    let s = std::fs::read_to_string(&log).unwrap();
    assert!(!s.contains('\u{1b}'), "no ANSI escape codes: {s:?}");
}

/// A second `hilock node` with the id of a running node cannot listen on that node's peer
/// address: it exits 2 at once, one line asking whether that node runs.
#[test]
fn a_second_node_with_a_running_nodes_id_is_asked_about_it() {
    let c = start(1);
    let t = Instant::now();
    let mut second = Proc(
        hilock()
            .args(["node", "--id", "0", "--config"])
            .arg(c.config())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let st = loop {
        if let Some(st) = second.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the second node exits"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(st.code(), Some(2));
    let mut e = String::new();
    std::io::Read::read_to_string(second.0.stderr.as_mut().unwrap(), &mut e).unwrap();
    let e: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("hilock: error"))
        .collect();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("cannot listen on 127.0.0.1:"), "{e:?}");
    assert!(
        e[0].ends_with("(is another hilock node with id 0 running?)"),
        "{e:?}"
    );
    // The first node still serves.
    let out = run(&mut lock_cmd(&c.socket(0), "/still", "W", "true"));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A `metrics_addr` whose port is taken (two nodes on one host sharing a configuration
/// file) stops the node at start with one line that says how to give each its own.
#[test]
fn a_metrics_port_in_use_is_refused_with_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.toml");
    std::fs::write(
        &file,
        format!(
            "cluster = \"m\"\nsecret = \"cli test secret\"\nclient = \"{}\"\n\
             metrics_addr = \"{}\"\n[[nodes]]\nid = 0\naddr = \"127.0.0.1:{}\"\n",
            dir.path().join("n.sock").display(),
            taken.local_addr().unwrap(),
            free_port()
        ),
    )
    .unwrap();
    let out = run(hilock()
        .args(["node", "--id", "0", "--config"])
        .arg(&file)
        .env("RUST_LOG", "off"));
    let e = text(&out.stderr);
    let errors: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("hilock: error"))
        .collect();
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(errors.len(), 1, "{e}");
    assert!(
        errors[0].contains("(metrics_addr)") && errors[0].contains("give \"127.0.0.1:0\""),
        "{e}"
    );
}

/// `hilock --try` refused because an ancestor is held says which path it was for; a path
/// longer than a node takes is refused before it is sent, in the node's words.
#[test]
fn a_busy_try_names_its_path_and_a_long_path_is_refused_at_once() {
    let c = start(2);
    wait_peer_state(&c, 1, 0, "connected");
    let (mut holder, done) = held_at_node_0(&c, "/t");
    let try_lock = |path: &str, mode: &str| {
        run(hilock()
            .args(["lock", "--try", path, mode, "--socket"])
            .arg(c.socket(1))
            .args(["--", "true"]))
    };
    let below = try_lock("/t/sub", "R");
    let itself = try_lock("/t", "W");
    std::fs::write(&done, "").unwrap();
    let _ = holder.0.wait();
    let e = text(&below.stderr);
    assert_eq!(below.status.code(), Some(79), "{e}");
    assert!(
        e.contains("busy: /t ") && e.contains("(an ancestor of /t/sub)"),
        "{e}"
    );
    let e = text(&itself.stderr);
    assert_eq!(itself.status.code(), Some(79), "{e}");
    assert!(e.contains("busy: /t ") && !e.contains("ancestor"), "{e}");
    let long = format!("/{}", "x".repeat(40_000));
    let out = run(&mut lock_cmd(&c.socket(0), &long, "W", "true"));
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains("lock path longer than 1024 bytes"), "{e}");
}

fn peer_json(c: &Cluster, node: usize, peer: u64) -> serde_json::Value {
    let out = run(hilock()
        .args(["status", "--json", "--timeout-ms", "2000", "--socket"])
        .arg(c.socket(node)));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == peer)
        .unwrap()
        .clone()
}

fn wait_peer_state(c: &Cluster, node: usize, peer: u64, state: &str) {
    let t = Instant::now();
    loop {
        let p = peer_json(c, node, peer);
        if p["state"].as_str().is_some_and(|s| s.starts_with(state)) {
            assert_eq!(p["connected"], state == "connected", "{p}");
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{state}: {p}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_stopped_peer_is_shown_not_answering_and_named_in_errors() {
    let c = start(2);
    wait_peer_state(&c, 0, 1, "connected");
    let on1 = (0..)
        .map(|i| format!("/s{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, 2) == hilock_kernel::NodeId(1))
        .unwrap();
    let sig = |s: &str| c.signal(1, s);
    sig("-STOP");
    wait_peer_state(&c, 0, 1, "not answering");
    // Status probes the peer; the errors use the node's own silence check, which notices
    // a peer silent for SILENT_AFTER (1 s, checked every HEARTBEAT, 200 ms). Past
    // REDIAL_AFTER (3 s) node 0 has given its connection up and dials again: the peer is
    // still named as not answering, not as reconnecting.
    std::thread::sleep(Duration::from_millis(3500));
    let out = run(hilock()
        .args(["lock", &on1, "W", "--timeout-ms", "500", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"]));
    sig("-CONT");
    assert_eq!(out.status.code(), Some(2));
    let e = text(&out.stderr);
    assert!(e.contains("no working connection to node 1"), "{e}");
    assert!(
        e.contains("the token is at node 1") && e.contains("node 1 has not answered for"),
        "{e}"
    );
    assert!(!e.contains("node 1 is connected"), "{e}");
    wait_peer_state(&c, 0, 1, "connected");
    let out = run(hilock()
        .args(["lock", &on1, "W", "--timeout-ms", "5000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A path whose initial token holder is `node` in a cluster of `n`, named `{prefix}{i}`.
fn path_at(prefix: &str, n: usize, node: u16) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, n) == hilock_kernel::NodeId(node))
        .unwrap()
}

/// Static membership: node 2 is killed and started again (a new run, refused by its
/// peers). A request whose route to the lock's token runs through node 2 — straight from
/// the requester, or forwarded by another node — fails at once naming node 2, instead of
/// waiting out the 10 s request timeout; so does a try-lock (red before: it waited out its
/// timeout, and every later try of the path said "busy"); a lock whose token is elsewhere
/// is still granted.
#[test]
fn a_request_routed_through_a_restarted_node_fails_at_once_naming_it() {
    let mut c = start(3);
    for peer in [1, 2] {
        wait_peer_state(&c, 0, peer, "connected");
    }
    // Never used: its token is at node 2 where it started.
    let fresh = path_at("/fresh", 3, 2);
    // Started at node 0; node 2 takes it, so its token moves to node 2: node 0's route
    // goes straight to node 2, node 1's (its first request) through node 0.
    let moved = path_at("/moved", 3, 0);
    let also_moved = path_at("/also", 3, 0);
    for p in [&moved, &also_moved] {
        let out = run(&mut lock_cmd(&c.socket(2), p, "W", "true"));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let elsewhere = path_at("/elsewhere", 3, 1);
    let file = c.config();
    let _ = c.nodes[2].0.kill();
    let _ = c.nodes[2].0.wait();
    std::fs::remove_file(c.socket(2)).unwrap();
    c.nodes[2] = spawn_node(&file, 2);
    wait_socket(&c, 2);
    wait_peer_state(&c, 0, 2, "refused");
    wait_peer_state(&c, 1, 2, "refused");
    // A request that failed at once comes back in milliseconds; one that waited would take
    // the node's 10 s request timeout at least (the client's own is 20 s).
    let timed = |node: usize, path: &str| {
        let t = Instant::now();
        let out = run(hilock()
            .args(["lock", path, "W", "--timeout-ms", "20000", "--socket"])
            .arg(c.socket(node))
            .args(["--", "true"]));
        (out, t.elapsed())
    };
    // Node 1's first request for `moved` goes to node 0, which queues it behind its own
    // lost request, and for `also_moved` to node 0, which forwards it to node 2: either
    // way node 0 tells node 1.
    let order = [
        (0, &fresh),
        (1, &fresh),
        (0, &moved),
        (1, &moved),
        (1, &also_moved),
        (0, &also_moved),
    ];
    for (node, path) in order {
        // Twice: the first request finds the dead end, the second one waits behind it.
        for attempt in 0..2 {
            let (out, took) = timed(node, path);
            let e = text(&out.stderr);
            eprintln!(
                "node {node}, {path}, attempt {attempt}: {took:?}: {}",
                e.trim()
            );
            assert!(!out.status.success(), "{path} granted at node {node}");
            assert!(
                took < Duration::from_secs(5),
                "{path} at node {node}: {took:?}"
            );
            assert!(
                e.contains("node 2 restarted with fresh state and is refused"),
                "{e}"
            );
        }
    }
    // A try-lock routed to node 2 fails the same way, at once, each time: not the
    // request's timeout, and not "busy" for a try that never came back.
    let tried = path_at("/tried", 3, 2);
    for attempt in 0..2 {
        let t = Instant::now();
        let out = run(hilock()
            .args([
                "lock",
                &tried,
                "W",
                "--try",
                "--timeout-ms",
                "20000",
                "--socket",
            ])
            .arg(c.socket(0))
            .args(["--", "true"]));
        let (took, e) = (t.elapsed(), text(&out.stderr));
        eprintln!("try {tried}, attempt {attempt}: {took:?}: {}", e.trim());
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(
            e.contains("node 2 restarted with fresh state and is refused"),
            "{e}"
        );
    }
    for node in [0, 1] {
        let (out, took) = timed(node, &elsewhere);
        assert!(out.status.success(), "{}", text(&out.stderr));
        eprintln!("node {node}, {elsewhere}: granted in {took:?}");
    }
}

/// A request that timed out while its token node was down still runs in the kernel; when
/// that node comes back as a new run (refused), the lock is a dead end for it too
/// (`docs/faults.md`, "A node restarted with fresh state is refused"): every later request
/// of that node fails at once naming the refused node, and so does a request of a third
/// node queued behind it. Red before: both waited out their 5 s timeout.
#[test]
fn a_request_that_timed_out_towards_a_crashed_node_is_a_dead_end_once_it_is_refused() {
    let mut c = start(3);
    for peer in [1, 2] {
        wait_peer_state(&c, 0, peer, "connected");
    }
    // Its token starts at node 1; node 0 takes it, so node 1 points at node 0 and node 2
    // still at node 1.
    let p = path_at("/sp", 3, 1);
    let held = c.dir.path().join("held");
    let _holder = Proc(
        lock_cmd(
            &c.socket(0),
            &p,
            "W",
            &format!("echo held > {}; sleep 30", held.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_file(&held);
    let file = c.config();
    let _ = c.nodes[0].0.kill();
    let _ = c.nodes[0].0.wait();
    let timed = |c: &Cluster, node: usize, ms: &str| {
        let t = Instant::now();
        let out = run(hilock()
            .args(["lock", &p, "W", "--timeout-ms", ms, "--socket"])
            .arg(c.socket(node))
            .args(["--", "true"]));
        (out.status.code(), text(&out.stderr), t.elapsed())
    };
    let (code, e, _) = timed(&c, 1, "1500");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("timed out"), "{e}");
    std::fs::remove_file(c.socket(0)).unwrap();
    c.nodes[0] = spawn_node(&file, 0);
    wait_socket(&c, 0);
    wait_peer_state(&c, 1, 0, "refused");
    wait_peer_state(&c, 2, 0, "refused");
    for node in [1, 1, 2] {
        let (code, e, took) = timed(&c, node, "5000");
        eprintln!("node {node}: {took:?}: {}", e.trim());
        assert_eq!(code, Some(2), "{e}");
        assert!(took < Duration::from_secs(2), "node {node}: {took:?}");
        assert!(
            e.contains("node 0 restarted with fresh state and is refused"),
            "{e}"
        );
    }
}

/// Requests made while a token node was dead, then refused as a new run (`docs/faults.md`,
/// "A node restarted with fresh state is refused"). Both paths start with their token at
/// node 0; node 1 takes them, so node 0 points at node 1 and node 2 at node 0; node 1 is
/// killed. On `/a…` node 0's try and node 2's request (which node 0 forwards to node 1)
/// time out; on `/b…` node 0's request does. Node 1 comes back and is refused. Then every
/// request and try of node 2 fails at once naming node 1. Red before: on `/a…` node 2's
/// request waited out its 5 s (node 0 had forwarded it to node 1 before the refusal, and
/// the link dropped it untold) and its tries said "busy" (exit 79); on `/b…` node 2's first
/// try, which node 0 answers, said "busy".
#[test]
fn requests_made_while_a_token_node_was_dead_fail_at_once_once_it_is_refused() {
    let mut c = start(3);
    for peer in [1, 2] {
        wait_peer_state(&c, 0, peer, "connected");
    }
    let (a, b) = (path_at("/a", 3, 0), path_at("/b", 3, 0));
    for p in [&a, &b] {
        let out = run(&mut lock_cmd(&c.socket(1), p, "W", "true"));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let file = c.config();
    let _ = c.nodes[1].0.kill();
    let _ = c.nodes[1].0.wait();
    let ask = |c: &Cluster, node: usize, path: &str, try_: bool, ms: &str| {
        let t = Instant::now();
        let mut cmd = hilock();
        cmd.args(["lock", path, "R", "--timeout-ms", ms]);
        if try_ {
            cmd.arg("--try");
        }
        let out = run(cmd.arg("--socket").arg(c.socket(node)).args(["--", "true"]));
        (out.status.code(), text(&out.stderr), t.elapsed())
    };
    for (node, path, try_) in [(0, &a, true), (2, &a, false), (0, &b, false)] {
        let (code, e, _) = ask(&c, node, path, try_, "1000");
        assert_eq!(code, Some(2), "node {node}, {path}: {e}");
        assert!(e.contains("timed out"), "node {node}, {path}: {e}");
    }
    std::fs::remove_file(c.socket(1)).unwrap();
    c.nodes[1] = spawn_node(&file, 1);
    wait_socket(&c, 1);
    wait_peer_state(&c, 0, 1, "refused");
    wait_peer_state(&c, 2, 1, "refused");
    for (path, try_) in [(&b, true), (&a, false), (&a, true), (&b, false)] {
        let (code, e, took) = ask(&c, 2, path, try_, "5000");
        eprintln!("node 2, {path}, try {try_}: {took:?}: {}", e.trim());
        assert_eq!(code, Some(2), "{path}, try {try_}: {e}");
        assert!(
            took < Duration::from_secs(2),
            "{path}, try {try_}: {took:?}"
        );
        assert!(
            e.contains("node 1 restarted with fresh state and is refused"),
            "{path}, try {try_}: {e}"
        );
    }
}

/// `hilock status` probes every peer for the call: a peer stopped with SIGSTOP a moment
/// ago (long before the one-second silence check could notice) is already shown as not
/// answering, never as connected; after SIGCONT it is shown connected at once.
#[test]
fn status_never_shows_a_just_stopped_peer_as_connected() {
    let c = start(2);
    wait_peer_state(&c, 0, 1, "connected");
    // Node 0's link to node 1 can be up before node 1's link to node 0 (a loaded machine
    // starts node 1 later): wait for that one too, which the rounds below assert open.
    let t = Instant::now();
    while peer_json(&c, 0, 1)["incoming"] != true {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "node 1 never dialled node 0"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = c.nodes[1].0.id().to_string();
    let sig = |s: &str| c.signal(1, s);
    for round in 0..5 {
        sig("-STOP");
        // kill(2) only queues SIGSTOP: one thread takes it and then stops the others, so
        // on a loaded machine the node's other threads may run (and answer a probe) for a
        // while. The status call comes once every thread is stopped.
        wait_all_threads_stopped(&pid);
        let t = Instant::now();
        let stopped = peer_json(&c, 0, 1);
        let took = t.elapsed();
        sig("-CONT");
        assert_eq!(stopped["connected"], false, "round {round}: {stopped}");
        // `incoming` only says node 1's connection to node 0 is open (`docs/faults.md`,
        // "Static cluster (the default)"): the accepting side has no probe of its own.
        assert_eq!(stopped["incoming"], true, "round {round}: {stopped}");
        let state = stopped["state"].as_str().unwrap();
        assert!(
            state.starts_with("not answering (last heard ") && state.ends_with(" ms ago)"),
            "round {round}: {stopped}"
        );
        // The probe waits at most PROBE_WAIT (300 ms) for the answer.
        assert!(
            took < Duration::from_millis(1500),
            "round {round}: {took:?}"
        );
        let resumed = peer_json(&c, 0, 1);
        assert_eq!(resumed["connected"], true, "round {round}: {resumed}");
        assert_eq!(resumed["state"], "connected", "round {round}: {resumed}");
    }
}

#[test]
fn client_connections_are_capped_and_silent_ones_closed() {
    use std::io::{BufRead, BufReader};
    let c = start_with(1, "max_clients = 4\n");
    let connect = || std::os::unix::net::UnixStream::connect(c.socket(0)).unwrap();
    let silent: Vec<_> = (0..4).map(|_| connect()).collect();
    let opened = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    // The fifth is refused with one line.
    let mut line = String::new();
    let s = connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.contains("too many clients"), "{line}");
    // A lock request beyond the cap is refused too, after it was read.
    let mut line = String::new();
    let mut s = connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(
        &mut s,
        b"{\"op\":\"lock\",\"path\":\"/a\",\"mode\":\"R\"}\n",
    )
    .unwrap();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.contains("too many clients"), "{line}");
    // The status is still answered: an operator sees the full node.
    let out = run(hilock()
        .args(["status", "--timeout-ms", "2000", "--socket"])
        .arg(c.socket(0)));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The silent ones are told and closed after the first-line timeout; then the node
    // serves again.
    for s in silent {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        assert!(line.contains("no request within"), "{line}");
    }
    let took = opened.elapsed();
    assert!(
        took >= hilock_runtime::client::FIRST_LINE_TIMEOUT - Duration::from_millis(500)
            && took < hilock_runtime::client::FIRST_LINE_TIMEOUT + Duration::from_secs(3),
        "{took:?}"
    );
    let out = run(hilock()
        .args(["status", "--timeout-ms", "2000", "--socket"])
        .arg(c.socket(0)));
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `hilock lock --txn`: two locks in one transaction of the agents engine, taken in
/// opposite orders from two nodes at once (a deadlock whenever the requests cross); every
/// command runs, and no two critical sections overlap. Bad lock arguments: one line, exit 2.
#[test]
fn hilock_lock_txn_runs_commands_under_both_locks_across_nodes() {
    let c = start(2);
    let log = c.dir.path().join("txn-log");
    let script = format!(
        "echo start >> {0}; sleep 0.1; echo end >> {0}",
        log.display()
    );
    let txn = |id: usize, a: &str, b: &str| {
        let mut cmd = hilock();
        cmd.args(["lock", "--txn", a, b, "--socket"])
            .arg(c.socket(id))
            .args(["--", "sh", "-c", &script]);
        cmd
    };
    let mut kids = Vec::new();
    for _ in 0..3 {
        kids.push(txn(0, "/acct/1:W", "/acct/2:W").spawn().unwrap());
        kids.push(txn(1, "/acct/2:W", "/acct/1:W").spawn().unwrap());
    }
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 12, "{lines:?}");
    for pair in lines.chunks(2) {
        assert_eq!(
            pair,
            ["start", "end"],
            "critical sections overlap: {lines:?}"
        );
    }
    // `hilock status` counts each node's transactions; nothing is left in its lock server.
    for id in 0..2 {
        let out = run(hilock().args(["status", "--socket"]).arg(c.socket(id)));
        let s = text(&out.stdout);
        assert!(
            s.contains("transactions (--txn): begun 3 committed 3 aborted 0")
                && s.contains("entries at this node's lock server 0"),
            "node {id}: {s}"
        );
    }
    for bad in [
        vec!["lock", "--txn", "/a:X"],
        vec!["lock", "--txn", "/a"],
        vec!["lock", "--txn", "a:W"],
        vec!["lock", "/a"],
        // Forgotten `--` before the command.
        vec!["lock", "/a", "W", "echo", "hi"],
        // A ring's client id given to a token node.
        vec!["lock", "/a", "W", "--client-id", "3"],
    ] {
        let out = run(hilock()
            .args(&bad)
            .arg("--socket")
            .arg(c.socket(0))
            .args(["--", "true"]));
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{bad:?}");
        assert!(err.starts_with("hilock: error: "), "{bad:?}: {err}");
    }
    // The command without `--`: the line says where it goes.
    let out = run(hilock()
        .args(["lock", "/a", "W", "--socket"])
        .arg(c.socket(0))
        .args(["echo", "hi"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("goes after `--`"), "{err}");
}

/// A `--txn` hold on a paused node. The node's peers release its agents' entries 4 s after
/// they last heard from it (`AGENTS_GONE_AFTER`), paused or not, so the hold has a lease of
/// its own (`HOLD_LEASE`, 2 s, renewed by the node while it runs): the command of a
/// transaction whose node is stopped with SIGSTOP is killed (exit 77) before a transaction
/// on another node is granted the same lock, and the two commands never overlap. (Without
/// the lease both held /a in W for about a second, and the first wrapper exited 0.)
#[test]
fn a_paused_nodes_txn_command_dies_before_its_lock_passes_on() {
    let c = start(3);
    let dir = c.dir.path();
    let (held, beats, got) = (dir.join("held"), dir.join("beats"), dir.join("got"));
    // The first holder writes a time stamp every 20 ms for as long as it runs.
    let beat = format!(
        "echo in > {}; while :; do date +%s%N >> {}; sleep 0.02; done",
        held.display(),
        beats.display()
    );
    let mut first = hilock()
        .args(["lock", "--txn", "/a:W", "--socket"])
        .arg(c.socket(2))
        .args(["--", "sh", "-c", &beat])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_file(&held);
    let sig = |s: &str| c.signal(2, s);
    sig("-STOP");
    let second = run(hilock()
        .args(["lock", "--txn", "/a:W", "--timeout-ms", "20000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "sh", "-c", &format!("date +%s%N > {}", got.display())]));
    sig("-CONT");
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    let code = first.wait().unwrap().code();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(code, Some(77), "{err}");
    assert!(err.contains("did not renew the hold's lease"), "{err}");
    let stamp = |s: &str| s.trim().parse::<u128>().unwrap();
    let last = std::fs::read_to_string(&beats).unwrap();
    let last = stamp(last.lines().last().unwrap());
    let granted = stamp(&std::fs::read_to_string(&got).unwrap());
    assert!(
        last < granted,
        "the first command ran {} ms into the second's hold",
        (last - granted) / 1_000_000
    );
    // The killed command did not run to its end: its transaction is not counted committed
    // (docs/operations.md; before, node 2 said "begun 1 committed 1").
    let t = Instant::now();
    loop {
        let out = run(hilock().args(["status", "--socket"]).arg(c.socket(2)));
        let s = text(&out.stdout);
        if s.contains("transactions (--txn): begun 1 committed 0 aborted 1") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "node 2: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `--txn` that waits on a paused node (`runtime/src/agents/engine.rs`, `Engine::turn`;
/// `docs/engines/agents.md`, "Under faults"). A on node 0 holds `/w…` (served by node 0);
/// B on node 1 waits for it; node 1 is stopped (SIGSTOP), A ends and node 0's server
/// grants B while node 1 cannot hear it; 4 s later node 0 releases node 1's agents and C
/// on node 0 is granted. Node 1 resumes: the grant to B arrives late, but the node, which
/// did not run for more than 1.5 s, counts node 0's server as down first and B aborts; no
/// two commands overlap. (Before, B ran inside C's hold and both exited 0.)
#[test]
fn a_paused_nodes_waiting_txn_is_not_granted_once_its_entries_are_released() {
    let c = start(3);
    let dir = c.dir.path();
    let log = dir.join("log");
    let w = (0..)
        .map(|i| format!("/w{i}"))
        .find(|p| hilock_runtime::agents::home(p, 3) == 0)
        .unwrap();
    let txn = |node: usize, name: &str, secs: u32| {
        let script = format!(
            "echo \"{name} start $(date +%s%N)\" >> {l}; sleep {secs}; \
             echo \"{name} end $(date +%s%N)\" >> {l}",
            l = log.display()
        );
        hilock()
            .args(["lock", "--txn", &format!("{w}:W"), "--timeout-ms", "30000"])
            .arg("--socket")
            .arg(c.socket(node))
            .args(["--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let logged = |what: &str| {
        let t = Instant::now();
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(what)
        {
            assert!(t.elapsed() < Duration::from_secs(20), "{what} within 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let a = txn(0, "A", 2);
    logged("A start");
    let b = txn(1, "B", 1);
    std::thread::sleep(Duration::from_millis(500));
    c.signal(1, "-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    let cc = txn(0, "C", 4);
    logged("C start");
    c.signal(1, "-CONT");
    let mut ends = Vec::new();
    let mut b_err = String::new();
    for (name, p) in [("A", a), ("B", b), ("C", cc)] {
        let out = p.wait_with_output().unwrap();
        eprintln!(
            "{name}: {:?} {}",
            out.status.code(),
            text(&out.stderr).trim()
        );
        if name == "B" {
            b_err = text(&out.stderr);
        }
        ends.push((name, out.status.code()));
    }
    // B's abort names its own node's stall, not a server that never went down.
    assert!(
        b_err.contains("this node did not run for") && !b_err.contains("is down"),
        "{b_err}"
    );
    let text_log = std::fs::read_to_string(&log).unwrap();
    eprintln!("{text_log}");
    let at = |what: &str| {
        text_log
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .map(|t| t.trim().parse::<u128>().unwrap())
    };
    let spans: Vec<(&str, u128, u128)> = ["A", "B", "C"]
        .into_iter()
        .filter_map(|n| {
            let s = at(&format!("{n} start"))?;
            Some((n, s, at(&format!("{n} end")).unwrap_or(u128::MAX)))
        })
        .collect();
    for (i, x) in spans.iter().enumerate() {
        for y in &spans[i + 1..] {
            assert!(
                x.2 < y.1 || y.2 < x.1,
                "{} and {} held {w} in W at once: {text_log}",
                x.0,
                y.0
            );
        }
    }
    assert_eq!(ends[0].1, Some(0), "A");
    assert_eq!(ends[2].1, Some(0), "C");
}

/// `hilock lock --txn` passes no fencing token (the agents engine has none): its command
/// sees `HILOCK_FENCE` unset, even when it was set in the caller's environment — as it is
/// inside an outer `hilock lock`, whose token would otherwise pass for this hold's.
#[test]
fn hilock_lock_txn_hides_an_inherited_fencing_token() {
    let c = start(1);
    let out = run(hilock()
        .env("HILOCK_FENCE", "999")
        .args(["lock", "--txn", "/fenceless:W", "--socket"])
        .arg(c.socket(0))
        .args(["--", "sh", "-c", "echo \"fence=${HILOCK_FENCE-unset}\""]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "fence=unset");
}

/// `hilock lock --txn --abort-on-deadlock` twice at once, the same two locks in opposite
/// orders, ten times: every command runs (exit 0). No client was told it holds a lock
/// before both are held, so a deadlock of the servers' queues is resolved by a silent
/// surrender, never an abort. Before the engine asked for a call's locks in one step, 2 to
/// 5 of 20 such commands exited 2 ("a deadlock needed a lock it already held") before
/// their command started.
#[test]
fn hilock_lock_txn_abort_on_deadlock_crossing_runs_every_command() {
    let c = start(2);
    // One lock homed on each node: each transaction gets its local one first.
    let homed = |node: u16| {
        (0..)
            .map(|i| format!("/cross{i}"))
            .find(|p| hilock_runtime::agents::home(p, 2) == node)
            .unwrap()
    };
    let (a, b) = (format!("{}:W", homed(0)), format!("{}:W", homed(1)));
    for _ in 0..10 {
        let txn = |id: usize, a: &str, b: &str| {
            let mut cmd = hilock();
            cmd.args(["lock", "--txn", "--abort-on-deadlock", a, b, "--socket"])
                .arg(c.socket(id))
                .args(["--", "true"]);
            cmd.stderr(Stdio::piped()).spawn().unwrap()
        };
        let kids = [txn(0, &a, &b), txn(1, &b, &a)];
        for k in kids {
            let out = k.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
    }
}

/// `hilock lock` gives the command its hold's fencing token as `HILOCK_FENCE`: W holds on
/// alternating nodes see strictly increasing numbers, and a command under a later W hold
/// sees a larger one than two overlapping R holds before it (`docs/engines/token.md`,
/// "Fencing tokens").
#[test]
fn hilock_lock_exports_a_growing_fencing_token() {
    let c = start(2);
    let fence = |node: usize, mode: &str| -> u64 {
        let out = run(&mut lock_cmd(
            &c.socket(node),
            "/fence/f",
            mode,
            "echo \"$HILOCK_FENCE\"",
        ));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let s = text(&out.stdout);
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("HILOCK_FENCE is not a number: {s:?}"))
    };
    let mut last = 0;
    for i in 0..4 {
        let f = fence(i % 2, "W");
        assert!(f > last, "W on node {}: fence {f} after {last}", i % 2);
        last = f;
    }
    let (r0, r1) = (fence(0, "R"), fence(1, "R"));
    assert!(r0 > last && r1 > last, "R fences {r0}, {r1} after W {last}");
    let w = fence(0, "W");
    assert!(w > r0.max(r1), "W fence {w} after R fences {r0}, {r1}");
}

/// The lock value block through `hilock lock` (`docs/cli.md`, "The value block";
/// `spec/SPEC.md` 1.15): a command reads the block as 64 hex digits in `HILOCK_VALUE`
/// (zeros before any write); a W command that writes hex to the file named in
/// `HILOCK_VALUE_OUT` sets it at the release, and an R command on the other node reads it.
/// An R command has no `HILOCK_VALUE_OUT`; a W command that writes nothing leaves the value
/// as it was, and one that writes a bad value, an empty file, or fails is told on stderr
/// and changes nothing.
#[test]
fn hilock_lock_passes_the_value_block_to_the_next_holder() {
    let c = start(2);
    let value = |node: usize, mode: &str, script: &str| -> String {
        let out = run(&mut lock_cmd(&c.socket(node), "/value/v", mode, script));
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    let zeros = "0".repeat(64);
    assert_eq!(value(1, "R", "echo \"$HILOCK_VALUE\""), zeros);
    assert_eq!(
        value(1, "R", "echo \"[${HILOCK_VALUE_OUT-none}]\""),
        "[none]"
    );
    value(0, "W", "printf 68656c6c6f > \"$HILOCK_VALUE_OUT\"");
    let hello = format!("68656c6c6f{}", "0".repeat(54));
    assert_eq!(value(1, "R", "echo \"$HILOCK_VALUE\""), hello);
    assert_eq!(value(1, "W", "echo \"$HILOCK_VALUE\""), hello);
    assert_eq!(value(0, "R", "echo \"$HILOCK_VALUE\""), hello);
    let out = run(&mut lock_cmd(
        &c.socket(0),
        "/value/v",
        "W",
        "printf xyz > \"$HILOCK_VALUE_OUT\"",
    ));
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("the value block was not written"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(value(1, "R", "echo \"$HILOCK_VALUE\""), hello);
    // Not hex (a character of two bytes among them), or a directory instead of a file:
    // reported, the value unchanged, nothing left behind, the command's status kept.
    for (script, says) in [
        ("printf 'a\u{e9}b' > \"$HILOCK_VALUE_OUT\"", "is not one"),
        (
            "mkdir \"$HILOCK_VALUE_OUT\"; echo \"$HILOCK_VALUE_OUT\"",
            "not a regular file",
        ),
        // A FIFO held the release, and so the lock, for ever (the read waited for a
        // writer); a link to /dev/zero was read without end.
        (
            "mkfifo \"$HILOCK_VALUE_OUT\"; echo \"$HILOCK_VALUE_OUT\"",
            "not a regular file",
        ),
        (
            "ln -s /dev/zero \"$HILOCK_VALUE_OUT\"; echo \"$HILOCK_VALUE_OUT\"",
            "a symbolic link",
        ),
        (
            "head -c 100000 /dev/zero | tr '\\0' a > \"$HILOCK_VALUE_OUT\"",
            "more than 4096 bytes",
        ),
    ] {
        let out = run(&mut lock_cmd(&c.socket(0), "/value/v", "W", script));
        let err = text(&out.stderr);
        assert!(out.status.success(), "{script}: {err}");
        assert!(
            err.contains("the value block was not written") && err.contains(says),
            "{script}: {err}"
        );
        let left = text(&out.stdout).trim().to_string();
        assert!(left.is_empty() || !Path::new(&left).exists(), "{left} left");
    }
    assert_eq!(value(1, "R", "echo \"$HILOCK_VALUE\""), hello);
    // A command that fails (or is killed) leaves its update half done: its value is not
    // written, and its status is passed on. An empty file writes nothing either.
    for (script, code, says) in [
        (
            "printf 3333 > \"$HILOCK_VALUE_OUT\"; exit 3",
            3,
            "the command failed",
        ),
        (
            "printf 4444 > \"$HILOCK_VALUE_OUT\"; kill -9 $$",
            128 + 9,
            "the command failed",
        ),
        (": > \"$HILOCK_VALUE_OUT\"", 0, "is empty"),
    ] {
        let out = run(&mut lock_cmd(&c.socket(0), "/value/v", "W", script));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{script}: {err}");
        assert!(
            err.contains(says) && err.contains("was not written"),
            "{script}: {err}"
        );
        assert_eq!(value(1, "R", "echo \"$HILOCK_VALUE\""), hello, "{script}");
    }
    // The file is in a directory of its own (mode 700, a name with a random part), gone
    // after the hold: no other user can plant a value or a link there.
    let out = value(
        0,
        "W",
        "d=$(dirname \"$HILOCK_VALUE_OUT\"); echo \"$(stat -c %a \"$d\") $d\"",
    );
    let (mode, dir) = out.split_once(' ').unwrap();
    assert_eq!(mode, "700", "{out}");
    assert!(dir.len() > "/tmp/hilock-value-".len() + 17, "{dir}");
    assert!(!Path::new(dir).exists(), "{dir} left");
}

/// A W wrapper killed with SIGKILL while its command runs cannot remove the directory of
/// its `HILOCK_VALUE_OUT` file; its lease watchdog, which sees it die, removes it with the
/// command's group: no value that was never written is left in the temporary directory,
/// and the next holder reads the value as it was.
#[test]
fn a_killed_w_wrappers_value_directory_goes_with_it() {
    let c = start(2);
    let mark = c.dir.path().join("mark");
    let script = format!(
        "printf 02 > \"$HILOCK_VALUE_OUT\"; echo \"$HILOCK_VALUE_OUT\" > {}; sleep 30",
        mark.display()
    );
    let mut w = lock_cmd(&c.socket(0), "/value/k", "W", &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let file = loop {
        let s = std::fs::read_to_string(&mark).unwrap_or_default();
        if s.ends_with('\n') {
            break std::path::PathBuf::from(s.trim());
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the command started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let dir = file.parent().unwrap().to_path_buf();
    assert!(file.exists(), "{}", file.display());
    w.kill().unwrap();
    w.wait().unwrap();
    let t = Instant::now();
    while dir.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{} left after its wrapper died",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(&mut lock_cmd(
        &c.socket(1),
        "/value/k",
        "R",
        "echo \"$HILOCK_VALUE\"",
    ));
    assert_eq!(
        text(&out.stdout).trim(),
        "0".repeat(64),
        "{}",
        text(&out.stderr)
    );
}

/// A `hilock lock` stopped (SIGSTOP) past its own bound (timeout + 1 s) while its node
/// granted the lock within the timeout reads the grant when it is continued and runs its
/// command: before, its timer fired first and it said "no answer from the node" about an
/// answer waiting in its socket.
#[test]
fn a_wrapper_stopped_past_its_bound_reads_the_grant_that_came_in_time() {
    let c = start(2);
    let mut holder = Proc(
        lock_cmd(&c.socket(0), "/stopped", "W", "sleep 0.5")
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(100));
    let waiter = hilock()
        .args(["lock", "/stopped", "W", "--timeout-ms", "1000", "--socket"])
        .arg(c.socket(1))
        .args(["--", "sh", "-c", "echo ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let pid = waiter.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success()));
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(3));
    signal("-CONT");
    assert!(holder.0.wait().unwrap().success());
    let out = waiter.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "ran");
}

/// Static membership with `state_dir`: the whole cluster killed and started again with
/// the same state directories — each node a new run — issues fences above every fence of
/// the run before (a new generation); stopped with SIGTERM instead, every node suspends
/// and the same run resumes, its fences going on from where they were (the same
/// generation). Each generation starts its locks with a value block that is not valid
/// (`docs/cli.md`, "The value block": `HILOCK_VALUE` empty), from the first start on.
#[test]
fn fences_keep_growing_across_a_restart_of_the_whole_cluster() {
    let mut c = start_with(3, "state_dir = \"state-{id}\"\n");
    let out = run(&mut lock_cmd(
        &c.socket(1),
        "/v",
        "R",
        "echo \"[$HILOCK_VALUE]\"",
    ));
    assert_eq!(text(&out.stdout).trim(), "[]", "{}", text(&out.stderr));
    let out_file = c.dir.path().join("fence");
    let fence = |c: &Cluster, node: usize| -> u64 {
        let script = format!("echo $HILOCK_FENCE > {}", out_file.display());
        let out = run(&mut lock_cmd(&c.socket(node), "/x", "W", &script));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let s = std::fs::read_to_string(&out_file).unwrap();
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("HILOCK_FENCE is not a number: {s:?}"))
    };
    let mut first = [fence(&c, 0), fence(&c, 1), fence(&c, 2)];
    assert!(first[0] < first[1] && first[1] < first[2], "{first:?}");
    let file = c.config();
    for round in 1..=3 {
        // Rounds 1 and 2 kill every node (new runs); round 3 stops them with SIGTERM.
        let resume = round == 3;
        for id in 0..3 {
            if resume {
                c.signal(id, "-TERM");
                assert!(wait_exit(&mut c.nodes[id].0, Duration::from_secs(10)).success());
            } else {
                let _ = c.nodes[id].0.kill();
                let _ = c.nodes[id].0.wait();
            }
            let _ = std::fs::remove_file(c.socket(id));
        }
        for id in 0..3 {
            c.nodes[id] = spawn_node(&file, id);
        }
        for id in 0..3 {
            wait_socket(&c, id);
        }
        let again = [fence(&c, 2), fence(&c, 0)];
        eprintln!("run {round}: fences {first:?}, after the restart {again:?}");
        assert!(again[0] > first[2], "{again:?} after {first:?}");
        assert!(again[1] > again[0], "{again:?}");
        let generation = |f: u64| f >> 32;
        if resume {
            assert_eq!(
                generation(again[0]),
                generation(first[2]),
                "{again:?} after {first:?}"
            );
        } else {
            assert!(
                generation(again[0]) > generation(first[2]),
                "{again:?} after {first:?}"
            );
        }
        first = [again[0], again[1], again[1]];
    }
}

/// Raise this process's soft limit of open files to its hard limit (children inherit it);
/// returns the new soft limit.
fn raise_fd_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read the struct given; no other precondition.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        r.rlim_cur = r.rlim_max.min(65_536);
        if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        }
    }
    r.rlim_cur
}

/// 20,000 silent connections (half to the peer port, half to the client socket; fewer if
/// this process may not open that many files, said on stderr): the node keeps its open
/// files bounded (the client cap plus the handshake cap), answers `hilock status`
/// throughout (with the status, or with the "too many clients" refusal while the client
/// cap is taken), serves again once they are gone, and logs a handful of warnings, not
/// one per rejected connection.
#[test]
fn twenty_thousand_silent_connections_neither_exhaust_files_nor_flood_the_log() {
    let limit = raise_fd_limit();
    let total = 20_000u64.min(limit.saturating_sub(300));
    if total < 20_000 {
        eprintln!("open-file limit {limit}: {total} silent connections instead of 20000");
    }
    let c = start(1);
    // Run a second node with a log file: same file, other ports and socket.
    let log = c.dir.path().join("node.log");
    let cfg = std::fs::read_to_string(c.config())
        .unwrap()
        .replace("n{id}.sock", "m{id}.sock")
        .lines()
        .map(|l| {
            if l.starts_with("addr") {
                format!("addr = \"127.0.0.1:{}\"", free_port())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let toml = c.dir.path().join("flood.toml");
    std::fs::write(&toml, &cfg).unwrap();
    let addr: std::net::SocketAddr = cfg
        .lines()
        .find(|l| l.starts_with("addr"))
        .unwrap()
        .split('"')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let sock = c.dir.path().join("m0.sock");
    let node = Proc(
        hilock()
            .args(["node", "--id", "0", "--config"])
            .arg(&toml)
            .env("RUST_LOG", "hilock=info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_serving(&sock, Duration::from_secs(10));
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", node.0.id())).map_or(0, |d| d.count());
    // The node answers: with its status, or (while max_clients silent clients hold the
    // client socket) with the clear refusal.
    let status_ok = || {
        let out = run(hilock()
            .args(["status", "--timeout-ms", "3000", "--socket"])
            .arg(&sock));
        out.status.success() || text(&out.stderr).contains("too many clients")
    };
    let t = Instant::now();
    let mut held = Vec::new();
    let (mut tcp, mut unix, mut most) = (0u64, 0u64, 0usize);
    for i in 0..total {
        if i % 2 == 0 {
            if let Ok(s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                held.push(Box::new(s) as Box<dyn std::any::Any>);
                tcp += 1;
            }
        } else if let Ok(s) = std::os::unix::net::UnixStream::connect(&sock) {
            held.push(Box::new(s));
            unix += 1;
        }
        if i % 2000 == 1999 {
            most = most.max(fds());
            assert!(status_ok(), "status answers after {i} connections");
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{i} connections in 120 s"
        );
    }
    most = most.max(fds());
    let took = t.elapsed();
    assert!(status_ok(), "status answers with all connections open");
    drop(held);
    // With the silent clients gone, the status itself again.
    let t = Instant::now();
    while !run(hilock()
        .args(["status", "--timeout-ms", "3000", "--socket"])
        .arg(&sock))
    .status
    .success()
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "status after the flood"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = std::fs::read_to_string(&log).unwrap();
    let warns = s.lines().filter(|l| l.contains("WARN")).count();
    eprintln!(
        "{tcp} TCP + {unix} client-socket silent connections in {took:?}: the node had at most \
         {most} open files; {warns} warnings logged"
    );
    assert!(tcp + unix >= total * 9 / 10, "{tcp} + {unix} of {total}");
    let cap = hilock_runtime::config::DEFAULT_MAX_CLIENTS
        + hilock_runtime::token::MAX_PENDING_HANDSHAKES
        + 100;
    assert!(most <= cap, "{most} open files (cap {cap})");
    assert!(warns <= 40, "{warns} warnings:\n{s}");
}

/// Waits (at most 5 s) until every thread of process `pid` is stopped (state `T` in
/// `/proc/PID/task/*/stat`).
fn wait_all_threads_stopped(pid: &str) {
    let t = Instant::now();
    let stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .all(|task| {
                let stat =
                    std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap_or_default();
                // "pid (comm) S ...": the state follows the last ')'.
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            })
    };
    while !stopped() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "node {pid} stopped within 5 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[path = "support/scrape.rs"]
mod scrape;

/// The node's metrics endpoint (`metrics_addr`), scraped over plain HTTP before and after
/// some locks: grants, waits, timeouts, messages by kind and the peer gauge move; any other
/// path is a 404.
#[test]
fn the_metrics_endpoint_counts_grants_waits_timeouts_and_messages() {
    let c = start_with(2, "metrics_addr = \"127.0.0.1:0\"\n");
    wait_peer_state(&c, 0, 1, "connected");
    let out = run(hilock()
        .args(["status", "--json", "--socket"])
        .arg(c.socket(0)));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let url = v["metrics"]
        .as_str()
        .expect("status names the metrics URL")
        .to_string();
    let shown = text(&run(hilock().args(["status", "--socket"]).arg(c.socket(0))).stdout);
    assert!(shown.contains(&url), "{shown}");
    let before = scrape::scrape(&url);
    let node = ("node", "0");
    let get = |t: &str, n: &str| scrape::metric(t, n, &[node]).unwrap_or(-1.0);
    let requests = |t: &str| {
        scrape::metric(
            t,
            "hilock_messages_sent_total",
            &[node, ("kind", "request")],
        )
        .unwrap_or(-1.0)
    };
    // A path whose token is at node 1: node 0 asks for it.
    let on1 = (0..)
        .map(|i| format!("/m{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, 2) == hilock_kernel::NodeId(1))
        .unwrap();
    let out = run(&mut lock_cmd(&c.socket(0), &on1, "W", "true"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Held at node 1 for 3 s: node 0's request waits, then times out.
    let file = c.dir.path().join("held");
    let mut holder = Proc(
        lock_cmd(
            &c.socket(1),
            &on1,
            "W",
            &format!("echo held > {}; sleep 3", file.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_file(&file);
    let out = run(hilock()
        .args(["lock", &on1, "W", "--timeout-ms", "300", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let _ = holder.0.wait();
    let after = scrape::scrape(&url);
    assert!(
        get(&after, "hilock_grants_total") > get(&before, "hilock_grants_total"),
        "{after}"
    );
    assert!(
        get(&after, "hilock_waits_total") > get(&before, "hilock_waits_total"),
        "{after}"
    );
    assert_eq!(
        get(&after, "hilock_timeouts_total"),
        get(&before, "hilock_timeouts_total") + 1.0,
        "{after}"
    );
    assert!(requests(&after) > requests(&before), "{before}\n{after}");
    assert_eq!(
        scrape::metric(&after, "hilock_peer_up", &[node, ("peer", "1")]),
        Some(1.0),
        "{after}"
    );
    assert_eq!(get(&after, "hilock_serving"), 1.0, "{after}");
    assert!(get(&after, "hilock_locks") >= 1.0, "{after}");
    assert!(
        after.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
    let (status, _) = scrape::get(&url.replace("/metrics", "/nothing"));
    assert!(status.contains("404"), "{status}");
}

/// The metrics endpoint counts the agents engine's transactions (`hilock lock --txn`) by
/// outcome and shows the entries in the node's agents lock server (`docs/operations.md`,
/// "Metrics"): one committed, one that timed out behind a held lock, two entries while a
/// transaction holds two locks.
#[test]
fn the_metrics_endpoint_counts_transactions_by_outcome_and_lock_server_entries() {
    let c = start_with(1, "metrics_addr = \"127.0.0.1:0\"\n");
    let out = run(hilock()
        .args(["status", "--json", "--socket"])
        .arg(c.socket(0)));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let url = v["metrics"].as_str().expect("the metrics URL").to_string();
    let node = ("node", "0");
    let get = |t: &str, n: &str| scrape::metric(t, n, &[node]).unwrap_or(-1.0);
    let ended = |t: &str, outcome: &str| {
        scrape::metric(
            t,
            "hilock_agents_transactions_ended_total",
            &[node, ("outcome", outcome)],
        )
        .unwrap_or(-1.0)
    };
    let before = scrape::scrape(&url);
    assert_eq!(get(&before, "hilock_agents_entries"), 0.0, "{before}");
    let txn = |locks: &[&str], extra: &[&str], script: &str| {
        let mut cmd = hilock();
        cmd.args(["lock", "--txn"])
            .args(locks)
            .args(extra)
            .arg("--socket")
            .arg(c.socket(0))
            .args(["--", "sh", "-c", script]);
        cmd
    };
    let out = run(&mut txn(&["/m:R", "/m/a:W"], &[], "true"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = c.dir.path().join("held");
    let mut holder = Proc(
        txn(
            &["/h:W", "/h2:W"],
            &[],
            &format!("echo held > {}; sleep 3", file.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_file(&file);
    let held = scrape::scrape(&url);
    assert_eq!(get(&held, "hilock_agents_entries"), 2.0, "{held}");
    let out = run(&mut txn(&["/h:W"], &["--timeout-ms", "300"], "true"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let _ = holder.0.wait();
    // The holder's commit reaches the node as its wrapper ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = scrape::scrape(&url);
    while ended(&after, "committed") < ended(&before, "committed") + 2.0
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
        after = scrape::scrape(&url);
    }
    assert_eq!(
        get(&after, "hilock_agents_transactions_begun_total"),
        get(&before, "hilock_agents_transactions_begun_total") + 3.0,
        "{after}"
    );
    assert_eq!(
        ended(&after, "committed"),
        ended(&before, "committed") + 2.0,
        "{after}"
    );
    assert_eq!(
        ended(&after, "other"),
        ended(&before, "other") + 1.0,
        "{after}"
    );
    assert_eq!(ended(&after, "deadlock"), 0.0, "{after}");
    assert!(
        get(&after, "hilock_agents_local_messages_total") > 0.0,
        "{after}"
    );
}

/// One node started under `ulimit` with the given shell command before `exec` (logging at
/// info to `log`), its client socket `sock`.
fn start_limited(dir: &Path, ulimit: &str, name: &str) -> (Proc, PathBuf, PathBuf) {
    let sock = dir.join(format!("{name}.sock"));
    let toml = dir.join(format!("{name}.toml"));
    std::fs::write(
        &toml,
        format!(
            "cluster = \"lim\"\nsecret = \"cli test secret\"\nid = 0\nclient = \"{}\"\n\
             [[nodes]]\nid = 0\naddr = \"127.0.0.1:{}\"\n",
            sock.display(),
            free_port()
        ),
    )
    .unwrap();
    let log = dir.join(format!("{name}.log"));
    let node = Proc(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{ulimit} && exec \"$0\" node --config \"$1\"",))
            .arg(env!("CARGO_BIN_EXE_hilock"))
            .arg(&toml)
            .env("RUST_LOG", "hilock=info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_serving(&sock, Duration::from_secs(10));
    (node, sock, log)
}

/// `clients` client connections at once, each asking for `/lim` in R (shared: every one
/// served is granted and holds it): how many were granted, how many answered "too many
/// clients", and the connections (held open). Any connection left without an answer for
/// 5 s fails the test.
fn open_clients(
    sock: &Path,
    clients: usize,
) -> (usize, usize, Vec<std::os::unix::net::UnixStream>) {
    use std::io::{BufRead, BufReader, Write};
    let (mut granted, mut refused, mut held) = (0, 0, Vec::new());
    let t = Instant::now();
    for i in 0..clients {
        let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A refused connection may be closed before the request is written.
        let _ = s
            .write_all(b"{\"op\":\"lock\",\"path\":\"/lim\",\"mode\":\"R\",\"timeout_ms\":5000}\n");
        let mut line = String::new();
        let mut r = BufReader::new(s.try_clone().unwrap());
        match r.read_line(&mut line) {
            Ok(n) if n > 0 => {}
            other => panic!(
                "connection {i} got no answer ({other:?}; {granted} granted, {refused} refused)"
            ),
        }
        if line.contains("\"ok\":true") {
            granted += 1;
            held.push(s);
        } else {
            assert!(line.contains("too many clients"), "connection {i}: {line}");
            refused += 1;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{i} connections in 60 s"
        );
    }
    (granted, refused, held)
}

/// A node started with the usual soft open-file limit of 1024 and 1,500 client
/// connections: it raises its soft limit to the hard one (and says so), serves
/// `max_clients` (1024) and answers the rest "too many clients". Under a hard limit of 1024
/// it cannot: it lowers `max_clients` to what fits (and says so in one line), and again
/// every excess client reads "too many clients" — none is left without an answer — while
/// the ones it serves are served, and new ones are once some leave.
#[test]
fn a_node_under_ulimit_1024_answers_the_excess_of_1500_clients_too_many_clients() {
    let limit = raise_fd_limit();
    if limit < 4000 {
        eprintln!("skipped: this process may open only {limit} files (1,500 clients need more)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("ulimit -Sn 1024", "raised", 1024),
        (
            "ulimit -n 1024",
            "lowered",
            1024 - hilock_runtime::client::FD_HEADROOM as usize,
        ),
    ];
    for (ulimit, said, serves) in cases {
        let (node, sock, log) = start_limited(dir.path(), ulimit, said);
        let t = Instant::now();
        let (granted, refused, mut held) = open_clients(&sock, 1500);
        let took = t.elapsed();
        let logged = std::fs::read_to_string(&log).unwrap();
        let line = logged
            .lines()
            .find(|l| l.contains("open-file limit"))
            .unwrap_or_default()
            .to_string();
        let warns = logged.lines().filter(|l| l.contains("WARN")).count();
        eprintln!(
            "{ulimit}: {granted} granted, {refused} refused in {took:.1?}; {warns} warnings; \
             log: {line}"
        );
        assert_eq!(
            (granted, refused),
            (serves, 1500 - serves),
            "{ulimit}\n{logged}"
        );
        assert!(line.contains(said), "{ulimit}: {logged}");
        assert!(warns <= 20, "{warns} warnings:\n{logged}");
        // The ones served are still served; one that leaves makes room for a new one.
        held.truncate(held.len() - 1);
        std::thread::sleep(Duration::from_millis(100));
        let (g, r, _more) = open_clients(&sock, 1);
        assert_eq!(
            (g, r),
            (1, 0),
            "{ulimit}: a new client is served once one left"
        );
        drop(held);
        drop(node);
    }
}

/// `hilock dump` with `args` added to `--config` of cluster `c`: its output, and how long
/// it took.
fn dump(c: &Cluster, args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = run(hilock()
        .arg("dump")
        .args(args)
        .arg("--config")
        .arg(c.config()));
    (out, t.elapsed())
}

/// `hilock dump`'s text keeps every lock on one line of six cells split at whitespace: a
/// path with a space, a no-break space and a `%` is written with those as `%XX`; `--json`
/// names the path as it is.
#[test]
fn dump_writes_a_path_with_spaces_as_one_cell() {
    let c = start(1);
    let mark = c.dir.path().join("held");
    let path = "/a b/c\u{a0}d%";
    let script = format!("echo in > {}; sleep 30", mark.display());
    let _holder = Proc(lock_cmd(&c.socket(0), path, "W", &script).spawn().unwrap());
    wait_file(&mark);
    let (out, _) = dump(&c, &[]);
    let text = text(&out.stdout);
    assert!(out.status.success(), "{text}");
    for (cell, held) in [("/a%20b", "0:IW(1)"), ("/a%20b/c%C2%A0d%25", "0:W(1)")] {
        let line = dump_line(&text, cell);
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells.len(), 6, "{line}");
        assert_eq!(cells[2], held, "{line}");
    }
    let (out, _) = dump(&c, &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(dumped(&v, path).is_some(), "{v}");
}

/// `hilock dump --json`'s lock `path`, if listed.
fn dumped<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"] == path)
}

/// The text's line of lock `path`.
fn dump_line<'a>(text: &'a str, path: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(path))
        .unwrap_or_else(|| panic!("a line of {path} in {text}"))
}

/// `hilock dump` (`docs/cli.md`): in a 3-node cluster where node 0 holds /a in W, node 1
/// waits for /a in R and node 2 holds /b/c in R, the dump (asked through the configuration
/// file, every node at once) names the token node of /a, the W holder with its local
/// holder count, node 1's pending R and its request in the token node's queue, node 2's
/// R on /b/c (and IR on /b), and, with node 0 waiting for /b/c in W, the modes the token
/// node of /b/c freezes, in JSON and in the text; a lock taken and released is left out
/// unless --all; with --socket, only the nodes at the sockets given are asked. A stopped node (SIGSTOP) and then a killed one (SIGKILL) are named
/// as not answering, the locks of the others are still printed, exit 1, within the
/// timeout and a second; with the token node of /a killed, /a's token is at no node that
/// answers; with no node answering, exit 2 with one line.
#[test]
fn dump_merges_every_nodes_locks_and_names_the_nodes_that_do_not_answer() {
    let mut c = start(3);
    // Taken and released: idle everywhere.
    let out = run(&mut lock_cmd(&c.socket(0), "/idle", "W", "true"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (a_held, c_held) = (c.dir.path().join("a"), c.dir.path().join("c"));
    let _writer = Proc(
        lock_cmd(
            &c.socket(0),
            "/a",
            "W",
            &format!("echo held > {}; sleep 100", a_held.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_file(&a_held);
    let _reader = Proc(
        lock_cmd(
            &c.socket(2),
            "/b/c",
            "R",
            &format!("echo held > {}; sleep 100", c_held.display()),
        )
        .spawn()
        .unwrap(),
    );
    wait_file(&c_held);
    let waiter = hilock()
        .args(["lock", "/a", "R", "--timeout-ms", "100000", "--socket"])
        .arg(c.socket(1))
        .args(["--", "true"])
        .spawn()
        .unwrap();
    let _waiter = Proc(waiter);
    // A writer waiting behind node 2's reader: the token node of /b/c freezes R.
    let writer = hilock()
        .args(["lock", "/b/c", "W", "--timeout-ms", "100000", "--socket"])
        .arg(c.socket(0))
        .args(["--", "true"])
        .spawn()
        .unwrap();
    let _writer_waits = Proc(writer);
    // Until both requests have reached the token nodes' queues.
    let queued = |v: &serde_json::Value, path: &str, node: u64, mode: &str| {
        dumped(v, path).is_some_and(|l| {
            l["queued"]
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q["node"] == node && q["mode"] == mode)
        })
    };
    // The dump asks every node at once and each answers at its own moment, so one dump can
    // show node 1's request queued at the token node and not yet pending at node 1 (which
    // answered before it was asked to lock): wait for both.
    let pending = |v: &serde_json::Value, path: &str, node: u64| {
        dumped(v, path).is_some_and(|l| {
            l["pending"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["node"] == node)
        })
    };
    let t = Instant::now();
    let v = loop {
        let (out, _) = dump(&c, &["--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // Exit 0 once every node serves (a node is let in by the others after it starts).
        if out.status.code() == Some(0)
            && queued(&v, "/a", 1, "R")
            && pending(&v, "/a", 1)
            && queued(&v, "/b/c", 0, "W")
        {
            break v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the requests queued, every node serving: {v} {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(v["format"], "hilock-dump/1");
    assert_eq!(v["cluster"], "cli");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{v}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["id"], i as u64, "{v}");
        assert_eq!(n["answered"], true, "{v}");
        assert_eq!(n["socket"], c.socket(i).to_str().unwrap(), "{v}");
        assert_eq!(
            (&n["epoch"], &n["serving"]),
            (&0.into(), &true.into()),
            "{v}"
        );
    }
    let paths: Vec<&str> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/a", "/b", "/b/c"], "{v}");
    let a = dumped(&v, "/a").unwrap();
    assert_eq!(a["token"], serde_json::json!([0]), "{a}");
    assert_eq!(
        a["held"],
        serde_json::json!([{"node": 0, "mode": "W", "holders": 1}]),
        "{a}"
    );
    assert_eq!(
        a["pending"],
        serde_json::json!([{"node": 1, "mode": "R", "waiters": 1}]),
        "{a}"
    );
    assert_eq!(
        a["queued"],
        serde_json::json!([{"at": 0, "node": 1, "mode": "R", "priority": 0}]),
        "{a}"
    );
    // Every node's own entry, as `hilock status` shows it.
    let a0 = a["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == 0)
        .unwrap();
    assert_eq!(
        (&a0["token"], &a0["held"]),
        (&true.into(), &"W".into()),
        "{a}"
    );
    let bc = dumped(&v, "/b/c").unwrap();
    assert_eq!(
        bc["held"],
        serde_json::json!([{"node": 2, "mode": "R", "holders": 1}]),
        "{bc}"
    );
    let bc_token = bc["token"][0].as_u64().unwrap();
    assert_eq!(bc["token"].as_array().unwrap().len(), 1, "{bc}");
    assert_eq!(
        bc["queued"],
        serde_json::json!([{"at": bc_token, "node": 0, "mode": "W", "priority": 0}]),
        "{bc}"
    );
    assert_eq!(
        bc["frozen"],
        serde_json::json!([{"node": bc_token, "modes": ["IR", "R", "U"]}]),
        "{bc}"
    );
    let b = dumped(&v, "/b").unwrap();
    assert!(
        b["held"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"node": 2, "mode": "IR", "holders": 1})),
        "{b}"
    );

    // Neither --config nor --socket: clap's usage line names both ways; both at once are
    // refused too.
    let out = run(hilock().arg("dump"));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("--config") && err.contains("--socket"),
        "{err}"
    );
    let out = run(hilock()
        .args(["dump", "--config", "x.toml", "--socket"])
        .arg(c.socket(0)));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // Only the nodes at the sockets given: node 1's own request is not shown, its entry
    // in node 0's queue is.
    let out = run(hilock()
        .args(["dump", "--json", "--socket"])
        .arg(c.socket(0))
        .arg(c.socket(2)));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let two: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&serde_json::Value> = two["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["id"])
        .collect();
    assert_eq!(ids, [&serde_json::json!(0), &serde_json::json!(2)], "{two}");
    let a = dumped(&two, "/a").unwrap();
    assert_eq!(a["pending"], serde_json::json!([]), "{a}");
    assert_eq!(a["queued"][0]["node"], 1, "{a}");
    assert!(dumped(&v, "/idle").is_none(), "{v}");
    let (out, _) = dump(&c, &["--json", "--all"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let idle = dumped(&all, "/idle").unwrap();
    assert_eq!(idle["held"], serde_json::json!([]), "{idle}");
    assert_eq!(idle["queued"], serde_json::json!([]), "{idle}");

    // The text: the header and each lock's line.
    let (out, _) = dump(&c, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("cluster \"cli\": 3 of 3 nodes answered (0, 1, 2)\n"),
        "{s}"
    );
    let head: Vec<&str> = s.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        head,
        ["path", "token", "held", "pending", "frozen", "queued"],
        "{s}"
    );
    // One line per lock, six cells without spaces each.
    assert_eq!(s.lines().count(), 5, "{s}");
    assert!(
        s.lines().skip(2).all(|l| l.split_whitespace().count() == 6),
        "{s}"
    );
    let cols: Vec<&str> = dump_line(&s, "/b").split_whitespace().collect();
    assert!(cols[2].split(',').any(|h| h == "2:IR(1)"), "{s}");
    let cols: Vec<&str> = dump_line(&s, "/a").split_whitespace().collect();
    assert_eq!(&cols[..4], ["/a", "0", "0:W(1)", "1:R(1)"], "{s}");
    assert_eq!(&cols[4..], ["-", "0:[1:R@0]"], "{s}");
    let cols: Vec<&str> = dump_line(&s, "/b/c").split_whitespace().collect();
    assert_eq!(
        &cols[1..],
        [
            &bc_token.to_string(),
            "2:R(1)",
            "0:W(1)",
            &format!("{bc_token}:{{IR,R,U}}"),
            &format!("{bc_token}:[0:W@0]"),
        ],
        "{s}"
    );
    assert!(!s.contains("/idle"), "{s}");
    assert!(!s.contains("not answering"), "{s}");

    // A stopped node: asked, never answers; the others' locks are still shown.
    let pid2 = c.nodes[2].0.id().to_string();
    let sig = |s: &str, pid: &str| {
        assert!(Command::new("kill")
            .args([s, pid])
            .status()
            .unwrap()
            .success())
    };
    sig("-STOP", &pid2);
    let (out, took) = dump(&c, &["--json", "--timeout-ms", "1000"]);
    sig("-CONT", &pid2);
    assert!(
        took < Duration::from_millis(2000),
        "answers within the timeout: {took:?}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let e = text(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("1 of 3 nodes did not answer: node 2 ("), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["nodes"][2]["answered"], false, "{v}");
    assert!(
        v["nodes"][2]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 1s"),
        "{v}"
    );
    assert_eq!(
        (&v["nodes"][0]["answered"], &v["nodes"][1]["answered"]),
        (&true.into(), &true.into())
    );
    let a = dumped(&v, "/a").unwrap();
    assert_eq!(a["token"], serde_json::json!([0]), "{a}");
    assert_eq!(a["held"][0]["node"], 0, "{a}");

    // The token node of /a killed: the token is at no node that answers, node 1 still
    // waits; the killed node is named in the text too.
    c.nodes[0].0.kill().unwrap();
    let _ = c.nodes[0].0.wait();
    let (out, took) = dump(&c, &["--timeout-ms", "1000"]);
    assert!(
        took < Duration::from_millis(2000),
        "answers within the timeout: {took:?}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("1 of 3 nodes did not answer: node 0 ("));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("cluster \"cli\": 2 of 3 nodes answered (1, 2)\n"),
        "{s}"
    );
    let cols: Vec<&str> = dump_line(&s, "/a").split_whitespace().collect();
    assert_eq!(&cols[..4], ["/a", "?", "-", "1:R(1)"], "{s}");
    let cols: Vec<&str> = dump_line(&s, "/b/c").split_whitespace().collect();
    assert_eq!(cols[2], "2:R(1)", "{s}");
    assert!(
        s.lines().any(|l| l.starts_with(&format!(
            "not answering: node 0 ({}): ",
            c.socket(0).display()
        ))),
        "{s}"
    );
    let (out, _) = dump(&c, &["--json", "--timeout-ms", "1000"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        dumped(&v, "/a").unwrap()["token"],
        serde_json::json!([]),
        "{v}"
    );

    // No node answers: one line, exit 2.
    for n in &mut c.nodes {
        let _ = n.0.kill();
        let _ = n.0.wait();
    }
    let (out, took) = dump(&c, &["--timeout-ms", "1000"]);
    assert!(took < Duration::from_millis(2000), "{took:?}");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let e = text(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("hilock: error: no node answered: node 0 ("),
        "{e}"
    );
    assert!(e.contains("; node 1 (") && e.contains("; node 2 ("), "{e}");
}

/// A node that answers but serves no lock (node 2 killed with SIGKILL and started again
/// with fresh state, so the others refuse it) is named in the text with the reason its
/// status gives, on a line `not serving: node 2 (SOCKET): why`, and on stderr; the dump
/// exits 1, as when a node does not answer, in the text and in JSON.
#[test]
fn dump_names_a_node_that_answers_but_serves_no_lock_and_exits_1() {
    let mut c = start(3);
    for peer in [1, 2] {
        wait_peer_state(&c, 0, peer, "connected");
    }
    let t = Instant::now();
    loop {
        let (out, _) = dump(&c, &[]);
        if out.status.code() == Some(0) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "every node serves: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let file = c.config();
    let _ = c.nodes[2].0.kill();
    let _ = c.nodes[2].0.wait();
    std::fs::remove_file(c.socket(2)).unwrap();
    c.nodes[2] = spawn_node(&file, 2);
    wait_socket(&c, 2);
    wait_peer_state(&c, 0, 2, "refused");
    wait_peer_state(&c, 1, 2, "refused");
    let (out, _) = dump(&c, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.starts_with("cluster \"cli\": 3 of 3 nodes answered (0, 1, 2)\n"),
        "{s}"
    );
    let prefix = format!("not serving: node 2 ({}): ", c.socket(2).display());
    let line = s
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| {
            panic!("{s}");
        });
    // The reason is the node's own, as `hilock status` gives it.
    let st = run(hilock()
        .args(["status", "--json", "--socket"])
        .arg(c.socket(2)));
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["serving"], false, "{st}");
    let why = st["not_serving"].as_str().unwrap();
    assert_eq!(&line[prefix.len()..], why, "{s}");
    assert!(!s.contains("not serving: node 0") && !s.contains("not serving: node 1"));
    let e = text(&out.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("hilock: 1 of 3 nodes answered but serve no lock: node 2 ("),
        "{e}"
    );
    assert!(e.contains(why), "{e}");
    let (out, _) = dump(&c, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["nodes"][2]["serving"], &v["nodes"][2]["not_serving"]),
        (&false.into(), &why.into()),
        "{v}"
    );
    assert_eq!(v["nodes"][0]["serving"], true, "{v}");
}

/// `hilock lock --signal-waiters` (`spec/SPEC.md` 1.16, `docs/cli.md`): node 0's W
/// command traps SIGUSR1 and writes a file when it comes; node 1's `hilock lock` for R
/// waits, and the file appears. Without the flag the same command is not signalled while
/// the same reader waits. Each holder then finishes and the reader is granted.
#[test]
fn hilock_lock_signal_waiters_sends_sigusr1_when_another_node_waits() {
    let c = start(2);
    for (i, flag) in [true, false].into_iter().enumerate() {
        let dir = c.dir.path();
        let (ready, told, done) = (
            dir.join(format!("ready{i}")),
            dir.join(format!("told{i}")),
            dir.join(format!("done{i}")),
        );
        let script = format!(
            "trap 'echo usr1 > {told}' USR1; echo ready > {ready}; \
             while [ ! -f {done} ]; do sleep 0.05; done",
            told = told.display(),
            ready = ready.display(),
            done = done.display()
        );
        let path = format!("/blk{i}/x");
        let mut holder = hilock();
        holder
            .args(["lock", &path, "W", "--socket"])
            .arg(c.socket(0));
        if flag {
            holder.arg("--signal-waiters");
        }
        holder.args(["--", "sh", "-c", &script]);
        let mut holder = holder.stdout(Stdio::null()).spawn().unwrap();
        wait_file(&ready);
        let mut reader = lock_cmd(&c.socket(1), &path, "R", "true")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_pending(&c, 1, &path, "R");
        if flag {
            assert_eq!(wait_file(&told), "usr1\n");
        } else {
            std::thread::sleep(Duration::from_millis(500));
            assert!(!told.exists(), "signalled without --signal-waiters");
        }
        std::fs::write(&done, "").unwrap();
        assert!(wait_exit(&mut holder, Duration::from_secs(10)).success());
        assert!(wait_exit(&mut reader, Duration::from_secs(10)).success());
    }
}

/// `hilock lock --signal-waiters` when the waiter was queued before the grant (Rule 8.2:
/// the queue arrives with the token, `spec/SPEC.md` 1.16): node 1 holds `/q` in W, node 0
/// asks for W with the flag, node 2 for R behind it; when node 1 releases, node 0 is
/// granted with node 2's R already waiting, and its command starts with
/// `HILOCK_BLOCKING=R` (a SIGUSR1 then would come before it could trap it). Red before:
/// the note came right behind the grant and was dropped with the client's read buffer, or
/// taken for the node's answer to the command's registration.
#[test]
fn signal_waiters_tells_a_holder_of_a_waiter_queued_before_its_grant() {
    let c = start(3);
    let dir = c.dir.path();
    let (held, done1, ready, told, done0) = (
        dir.join("held"),
        dir.join("done1"),
        dir.join("ready"),
        dir.join("told"),
        dir.join("done0"),
    );
    let first = format!(
        "echo held > {held}; while [ ! -f {done1} ]; do sleep 0.05; done",
        held = held.display(),
        done1 = done1.display()
    );
    let mut first = lock_cmd(&c.socket(1), "/q", "W", &first)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_file(&held);
    let script = format!(
        "trap 'echo usr1 >> {told}' USR1; echo \"${{HILOCK_BLOCKING-none}}\" > {ready}; \
         while [ ! -f {done0} ]; do sleep 0.05; done",
        told = told.display(),
        ready = ready.display(),
        done0 = done0.display()
    );
    let mut holder = hilock()
        .args(["lock", "/q", "W", "--signal-waiters", "--socket"])
        .arg(c.socket(0))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_pending(&c, 0, "/q", "W");
    let mut reader = lock_cmd(&c.socket(2), "/q", "R", "true")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_pending(&c, 2, "/q", "R");
    std::fs::write(&done1, "").unwrap();
    assert!(wait_exit(&mut first, Duration::from_secs(10)).success());
    assert_eq!(wait_file(&ready), "R\n", "the queued reader is told");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !told.exists(),
        "told once, at the start, not by SIGUSR1 as well"
    );
    std::fs::write(&done0, "").unwrap();
    assert!(wait_exit(&mut holder, Duration::from_secs(10)).success());
    assert!(wait_exit(&mut reader, Duration::from_secs(10)).success());
}

/// A `--txn` at every documented limit at once — 32 locks, each path 1024 bytes — is one
/// request the node takes (a request line is at most 64 KiB), and it runs: before, 17
/// such locks were refused as "request line too long or unterminated" (16 KiB).
#[test]
fn a_txn_of_the_most_locks_with_the_longest_paths_is_taken() {
    let c = start(1);
    let marker = c.dir.path().join("ran");
    let locks: Vec<String> = (0..32)
        .map(|i| {
            let head = format!("/l{i:02}");
            format!("{head}{}:W", "y".repeat(1024 - head.len()))
        })
        .collect();
    assert!(locks.iter().all(|l| l.len() == 1024 + 2));
    let out = run(hilock()
        .args(["lock", "--txn"])
        .args(&locks)
        .arg("--socket")
        .arg(c.socket(0))
        .args(["--", "touch"])
        .arg(&marker));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marker.exists());
}

/// `hilock lock --txn` checks its lock list before it starts a transaction: more than 32
/// locks, a path deeper than 8 elements, a lock twice, a `:` in a path element, and the
/// token engine's `--priority`, `--try`, `--signal-waiters` are each refused with exit 2
/// and, but for the flags' usage errors, one line naming the problem; the command never
/// runs.
#[test]
fn hilock_lock_txn_refuses_a_bad_lock_list_before_starting() {
    let c = start(1);
    let marker = c.dir.path().join("ran");
    let txn = |args: &[String]| {
        run(hilock()
            .args(["lock", "--txn"])
            .args(args)
            .arg("--socket")
            .arg(c.socket(0))
            .args(["--", "touch"])
            .arg(&marker))
    };
    let many: Vec<String> = (0..40).map(|i| format!("/m{i}:W")).collect();
    let deep = format!("/{}:W", ["d"; 9].join("/"));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (many, "a transaction takes at most 32 locks (asked 40)"),
        (
            vec![deep.clone()],
            "has 9 elements; a lock path has at most 8",
        ),
        (
            vec!["/a:R".into(), "/a:R".into()],
            "lock /a appears twice in the transaction",
        ),
        (
            vec!["/a:R".into(), "/b:W".into(), "/a:W".into()],
            "lock /a appears twice in the transaction",
        ),
        (
            vec!["/a:W:R".into()],
            "/a:W:R: a path element may not contain ':'",
        ),
    ];
    for (args, want) in cases {
        let out = txn(&args);
        let e = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(!e.contains("agent A"), "no internal names: {e}");
    }
    // The token engine's flags are usage errors with --txn.
    for flag in [&["--priority", "5"][..], &["--try"], &["--signal-waiters"]] {
        let mut args: Vec<String> = flag.iter().map(|a| a.to_string()).collect();
        args.push("/p:W".into());
        let out = txn(&args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(flag[0]), "{}", text(&out.stderr));
    }
    assert!(!marker.exists(), "no command ran");
    // A good list still runs.
    assert!(txn(&["/a:R".into(), "/a/b:W".into()]).status.success());
    assert!(marker.exists());
}

/// A `--txn` that times out exits 2 with one line that says "timed out" and names only the
/// locks it was not granted.
#[test]
fn hilock_lock_txn_timeout_names_only_the_locks_not_granted() {
    let c = start(1);
    let holder = hilock()
        .args(["lock", "--txn", "/held:W", "--socket"])
        .arg(c.socket(0))
        .args(["--", "sleep", "3"])
        .spawn()
        .unwrap();
    let _holder = Proc(holder);
    std::thread::sleep(Duration::from_millis(500));
    let out = run(hilock()
        .args([
            "lock",
            "--txn",
            "/free:W",
            "/held:W",
            "--timeout-ms",
            "400",
            "--socket",
        ])
        .arg(c.socket(0))
        .args(["--", "true"]));
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("timed out after 400 ms: /held not granted"),
        "{e}"
    );
    assert!(!e.contains("/free"), "{e}");
}

/// A `--txn` hold whose lock server dies: the node aborts the transaction once the server
/// has been unreachable 1.5 s, the command's group is killed and the wrapper exits 76 with
/// one line naming the node whose lock server is down.
#[test]
fn hilock_lock_txn_exits_76_when_the_lock_server_of_its_lock_is_down() {
    let mut c = start(3);
    let p = (0..)
        .map(|i| format!("/down{i}"))
        .find(|p| hilock_runtime::agents::home(p, 3) == 2)
        .unwrap();
    let marker = c.dir.path().join("held");
    let holder = hilock()
        .args(["lock", "--txn", &format!("{p}:W"), "--socket"])
        .arg(c.socket(0))
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}; sleep 30", marker.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !marker.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "the command runs");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = c.nodes[2].0.kill();
    let _ = c.nodes[2].0.wait();
    let t = Instant::now();
    let out = holder.wait_with_output().unwrap();
    let e = text(&out.stderr);
    eprintln!("exit {:?} after {:?}: {e}", out.status.code(), t.elapsed());
    assert_eq!(out.status.code(), Some(76), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains("the lock server of node 2 is down"), "{e}");
}
