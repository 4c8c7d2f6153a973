//! Trace validation end to end: node processes that record their kernel steps (`record` in
//! the configuration), `hilock lock` clients with conflicting requests on nested paths,
//! then `hilock trace-check` on the records as written and on tampered copies; and
//! `hilock demo --record`.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/records.rs"]
mod records;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ports::free_port;
use procs::Proc;

fn hilock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hilock"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const NODES: usize = 4;

/// The records of one run of a 4-node cluster whose clients take conflicting locks on
/// nested paths concurrently; made once, shared by the tests (each tampers with a copy).
fn recorded() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(record_run).path()
}

fn record_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_recording(dir.path());
    lock_rounds(dir.path(), 3);
    try_locks(dir.path());
    stop(&mut nodes);
    dir
}

/// Node `id` of the cluster configured in `file`.
fn spawn_node(file: &Path, id: usize) -> Proc {
    Proc(
        hilock()
            .args(["node", "--config"])
            .arg(file)
            .args(["--id", &id.to_string()])
            .env("RUST_LOG", "hilock=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn sock(dir: &Path, id: usize) -> PathBuf {
    dir.join(format!("n{id}.sock"))
}

fn wait_socket(dir: &Path, id: usize) {
    let t = Instant::now();
    while !sock(dir, id).exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "node {id} starts");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts [`NODES`] nodes in `dir` that record their steps in `dir/node-<id>.jsonl`.
fn start_recording(dir: &Path) -> Vec<Proc> {
    let mut toml = String::from(
        "cluster = \"trace\"\nsecret = \"trace test secret\"\nrequest_timeout_ms = 20000\n",
    );
    toml.push_str(&format!(
        "client = \"{}\"\nrecord = \"{}\"\n",
        dir.join("n{id}.sock").display(),
        dir.join("node-{id}.jsonl").display()
    ));
    for id in 0..NODES {
        toml.push_str(&format!(
            "[[nodes]]\nid = {id}\naddr = \"127.0.0.1:{}\"\n",
            free_port()
        ));
    }
    let file = dir.join("cluster.toml");
    std::fs::write(&file, toml).unwrap();
    let nodes = (0..NODES).map(|id| spawn_node(&file, id)).collect();
    for id in 0..NODES {
        wait_socket(dir, id);
    }
    // A node grants nothing (a try-lock there fails at once) until a majority let its run
    // in: wait until every one serves.
    for id in 0..NODES {
        let t = Instant::now();
        loop {
            let out = hilock()
                .args(["status", "--json", "--socket"])
                .arg(sock(dir, id))
                .output()
                .unwrap();
            let serving = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|v| v["serving"] == true);
            if serving {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "node {id} serves");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    nodes
}

/// `rounds` rounds; in each, every node's clients ask at once for locks that conflict:
/// W and R on /db (against everyone's intention modes below it), W on /db/a against R on
/// /db/a and on /db/a/x, U and W on /db/b; and two try-locks (W on /db and on /db/b).
fn lock_rounds(dir: &Path, rounds: usize) {
    let asks = [
        ("/db", "W"),
        ("/db/a/x", "R"),
        ("/db/a", "W"),
        ("/db/b", "U"),
        ("/db", "R"),
        ("/db/a/x", "W"),
        ("/db/b", "W"),
        ("/db/a", "R"),
    ];
    for round in 0..rounds {
        let mut kids = Vec::new();
        for (k, (path, mode)) in asks.iter().enumerate() {
            let id = (k + round) % NODES;
            kids.push(
                hilock()
                    .args(["lock", path, mode, "--socket"])
                    .arg(sock(dir, id))
                    .args(["--", "sh", "-c", "sleep 0.02"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
        }
        // Two try-locks a round, against the others: granted (0) or busy (79).
        for (k, path) in ["/db", "/db/b"].iter().enumerate() {
            kids.push(
                hilock()
                    .args(["lock", "--try", path, "W", "--socket"])
                    .arg(sock(dir, (k + round + 1) % NODES))
                    .args(["--", "sh", "-c", "sleep 0.02"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
        }
        for k in kids {
            let out = k.wait_with_output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0) | Some(79)),
                "a lock client failed: {code:?}: {}",
                text(&out.stderr)
            );
        }
    }
}

/// A try-lock the kernel refuses (node 0 holds /db in W; node 2's site is idle, so its try
/// goes to the token node and comes back `Busy`: exit 79) and, once node 0 released, one
/// the kernel grants.
fn try_locks(dir: &Path) {
    // The holder's command says it runs (`held`), then keeps /db until the test has made
    // its try (`done`; at most 60 s, so a failed test leaves no holder behind).
    let (held, done) = (dir.join("held"), dir.join("done"));
    let script = format!(
        "touch {0}; i=0; while [ ! -e {1} ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done",
        held.display(),
        done.display()
    );
    let mut holder = hilock()
        .args(["lock", "/db", "W", "--socket"])
        .arg(sock(dir, 0))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // The try must come while node 0 holds /db: wait until the holder's command runs.
    let t = Instant::now();
    while !held.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "node 0 is granted /db"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let try_db = || {
        hilock()
            .args(["lock", "--try", "/db", "W", "--socket"])
            .arg(sock(dir, 2))
            .args(["--", "true"])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .code()
    };
    let refused = try_db();
    std::fs::write(&done, "").unwrap();
    assert_eq!(refused, Some(79), "a try while node 0 holds /db");
    assert!(holder.wait().unwrap().success());
    assert_eq!(try_db(), Some(0), "a try on a free /db");
}

/// Stops the nodes (SIGTERM: releases travel, then the node exits; a node not gone in
/// 10 s is killed); every record line is written when its step is taken.
fn stop(nodes: &mut [Proc]) {
    records::terminate(nodes.iter_mut().map(|p| &mut p.0));
}

fn record_files(dir: &Path) -> Vec<PathBuf> {
    records::record_files(dir, NODES)
}

fn trace_check(dir: &Path) -> Output {
    records::trace_check(&record_files(dir))
}

fn lines(dir: &Path, node: usize) -> Vec<String> {
    std::fs::read_to_string(dir.join(format!("node-{node}.jsonl")))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A copy of the records with node `node`'s lines replaced by `new`.
fn tampered(node: usize, new: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in record_files(recorded()) {
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join(format!("node-{node}.jsonl")),
        new.join("\n") + "\n",
    )
    .unwrap();
    dir
}

/// `trace-check` of the records with node `node`'s lines replaced by `ls`: it must exit 1
/// naming node `node`'s record at `line` (1-based). Its output.
fn rejected_at(node: usize, ls: &[String], line: usize) -> String {
    let dir = tampered(node, ls);
    let out = trace_check(dir.path());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let at = format!(
        "node {node} at {}:{line}:",
        dir.path().join(format!("node-{node}.jsonl")).display()
    );
    assert!(stdout.contains(&at), "{at} in {stdout}");
    stdout
}

/// The first record, by node and line, that `find` accepts (given its node): its node,
/// line index and record.
fn first_record(
    find: impl Fn(usize, &serde_json::Value) -> bool,
) -> Option<(usize, usize, serde_json::Value)> {
    (0..NODES).find_map(|n| {
        lines(recorded(), n)
            .iter()
            .map(|l| json(l))
            .enumerate()
            .find(|(_, v)| find(n, v))
            .map(|(i, v)| (n, i, v))
    })
}

/// [`rejected_at`] with node `node`'s line at index `i` replaced by `v`, rejected there.
fn rejected_with(node: usize, i: usize, v: &serde_json::Value) -> String {
    let mut ls = lines(recorded(), node);
    ls[i] = v.to_string();
    rejected_at(node, &ls, i + 1)
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap()
}

/// A delivery: (path, sender).
fn delivery(v: &serde_json::Value) -> Option<(String, u64)> {
    let d = v.get("input")?.get("deliver")?;
    Some((v["path"].as_str()?.to_string(), d["from"].as_u64()?))
}

#[test]
fn a_recorded_cluster_run_validates() {
    let out = trace_check(recorded());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("trace validated: "), "{stdout}");
    assert!(stdout.contains(&format!("{NODES} nodes")), "{stdout}");
    // The paths the clients locked and their ancestors.
    assert!(stdout.contains(" 4 paths"), "{stdout}");
    let steps: u64 = stdout
        .trim_start_matches("trace validated: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(steps >= 3 * 8 * 2, "{stdout}");
    // The try-locks were recorded (and replayed through the kernel with the rest).
    let tries = record_files(recorded())
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .filter(|t| t.contains("try_acquire"))
        .count();
    assert!(tries > 0, "no try-lock in the records");
}

/// Node `node`'s first delivery whose next record on the same path is a delivery from the
/// same sender: its line index and the next one's.
fn removable_delivery(ls: &[String]) -> Option<(usize, usize)> {
    let vs: Vec<serde_json::Value> = ls.iter().map(|l| json(l)).collect();
    for (i, v) in vs.iter().enumerate() {
        let Some((path, from)) = delivery(v) else {
            continue;
        };
        let next = vs
            .iter()
            .enumerate()
            .skip(i + 1)
            .find(|(_, w)| w["t"] == "step" && w["path"] == path.as_str())?;
        if delivery(next.1) == Some((path.clone(), from)) {
            return Some((i, next.0));
        }
    }
    None
}

#[test]
fn a_removed_delivery_is_rejected_naming_the_node_and_record() {
    let (node, (gone, next)) = (0..NODES)
        .find_map(|n| removable_delivery(&lines(recorded(), n)).map(|x| (n, x)))
        .expect("a node delivered two messages of one sender in a row on a path");
    let mut ls = lines(recorded(), node);
    ls.remove(gone);
    // The record after the removed one is the first that cannot be applied: its line in
    // the tampered file is its old line number minus one (1-based: `next`).
    let stdout = rejected_at(node, &ls, next);
    assert!(stdout.contains("out of FIFO order"), "{stdout}");
}

#[test]
fn a_changed_grant_mode_is_rejected_naming_the_node_and_record() {
    let (node, i, line) = (0..NODES)
        .find_map(|n| {
            lines(recorded(), n)
                .into_iter()
                .enumerate()
                .find(|(_, l)| l.contains("\"Granted\":{\"lock\":0,\"mode\":\"IR\"}"))
                .map(|(i, l)| (n, i, l))
        })
        .expect("some node was granted IR");
    let mut ls = lines(recorded(), node);
    // Only the grant's mode: the same line's input may name IR too (a request for IR).
    ls[i] = line.replacen(
        "\"Granted\":{\"lock\":0,\"mode\":\"IR\"}",
        "\"Granted\":{\"lock\":0,\"mode\":\"IW\"}",
        1,
    );
    assert_ne!(ls[i], line);
    let stdout = rejected_at(node, &ls, i + 1);
    assert!(stdout.contains("divergence"), "{stdout}");
    assert!(stdout.contains("mode: IW"), "{stdout}");
}

#[test]
fn a_duplicated_delivery_is_rejected() {
    let (node, i) = (0..NODES)
        .find_map(|n| {
            lines(recorded(), n)
                .iter()
                .position(|l| delivery(&json(l)).is_some())
                .map(|i| (n, i))
        })
        .expect("a delivery");
    let mut ls = lines(recorded(), node);
    ls.insert(i + 1, ls[i].clone());
    let stdout = rejected_at(node, &ls, i + 2);
    assert!(stdout.contains("again"), "{stdout}");
}

/// `hilock demo` on 3 nodes with `requests` requests, recording into `dir`.
fn demo_recording(requests: u32, dir: &Path) -> Output {
    hilock()
        .args(["demo", "--nodes", "3", "--requests", &requests.to_string()])
        .args(["--quiet", "--record"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn a_demo_run_recorded_with_record_validates() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo_recording(150, dir.path());
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let files: Vec<PathBuf> = (0..3)
        .map(|id| dir.path().join(format!("node-{id}.jsonl")))
        .collect();
    let check = hilock().arg("trace-check").args(&files).output().unwrap();
    let stdout = text(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{stdout}{}",
        text(&check.stderr)
    );
    assert!(stdout.contains("3 nodes"), "{stdout}");
    // A second run into the same directory would mix two runs' records: refused. A file
    // where the directory goes, and a directory that cannot be created: named.
    let file = dir.path().join("node-0.jsonl");
    for (record, words) in [
        (
            dir.path().to_path_buf(),
            format!("{} exists: record into an empty directory", file.display()),
        ),
        (
            file.clone(),
            format!("--record {}: it is a file, not a directory", file.display()),
        ),
        (
            file.join("sub"),
            format!("--record {}: cannot create it", file.join("sub").display()),
        ),
    ] {
        let out = demo_recording(10, &record);
        let e = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains(&words), "{e}");
    }
    // Another run's record of a node this run does not have (a 6-node run's node 5)
    // would be checked with this run's by `trace-check DIR/*.jsonl`: refused too.
    let other = tempfile::tempdir().unwrap();
    let five = other.path().join("node-5.jsonl");
    std::fs::write(&five, "").unwrap();
    let out = demo_recording(10, other.path());
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains(&format!("{} exists", five.display())), "{e}");
}

/// A step record whose number is not the one after the node's record before it (the
/// recorder numbers a run's steps 1, 2, … over every path) is rejected at that record,
/// even where the replay finds nothing wrong with it (a number edited by hand).
#[test]
fn a_step_numbered_out_of_turn_is_rejected_at_that_record() {
    let (node, i, mut v) =
        first_record(|_, v| v["t"] == "step" && v["i"].as_u64() > Some(2)).expect("a third step");
    v["i"] = 999_999.into();
    let stdout = rejected_with(node, i, &v);
    assert!(stdout.contains("step 999999 on"), "{stdout}");
    assert!(stdout.contains("numbered 1, 2, …"), "{stdout}");
}

#[test]
fn an_unreadable_record_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("node-0.jsonl");
    std::fs::write(&f, "not json\n").unwrap();
    let out = hilock().arg("trace-check").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a record"),
        "{}",
        text(&out.stderr)
    );
}

/// The same node's file given twice is a file-set problem, exit 2, one line naming the
/// node: not a rejected trace.
#[test]
fn a_node_file_given_twice_exits_2_naming_the_node() {
    let mut files = record_files(recorded());
    files.push(files[0].clone());
    let out = records::trace_check(&files);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{stderr}", text(&out.stdout));
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("node 0's records are given twice"),
        "{stderr}"
    );
}

/// A node's file left out while the others deliver its messages is a file-set problem,
/// exit 2, one line saying whose records are missing: not "a message never sent".
#[test]
fn a_missing_node_file_exits_2_naming_the_node() {
    let sender = (0..NODES)
        .flat_map(|n| lines(recorded(), n))
        .find_map(|l| delivery(&json(&l)))
        .map(|(_, from)| from as usize)
        .expect("a delivery");
    let files: Vec<PathBuf> = record_files(recorded())
        .into_iter()
        .enumerate()
        .filter(|(n, _)| *n != sender)
        .map(|(_, f)| f)
        .collect();
    let out = records::trace_check(&files);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}{stderr}", text(&out.stdout));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("no records of node {sender} were given")),
        "{stderr}"
    );
}

/// A node killed with SIGKILL and started again is a new run (static membership refuses
/// it): the check validates the records up to it and stops there, exit 3, naming it.
#[test]
fn a_restarted_node_stops_the_check_at_its_new_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start_recording(dir.path());
    lock_rounds(dir.path(), 1);
    let victim = NODES - 1;
    assert!(Command::new("kill")
        .args(["-9", &nodes[victim].0.id().to_string()])
        .status()
        .unwrap()
        .success());
    let _ = nodes[victim].0.wait();
    let _ = std::fs::remove_file(sock(dir.path(), victim));
    nodes[victim] = spawn_node(&dir.path().join("cluster.toml"), victim);
    wait_socket(dir.path(), victim);
    stop(&mut nodes);
    let runs = lines(dir.path(), victim)
        .iter()
        .filter(|l| l.starts_with("{\"t\":\"run\""))
        .count();
    assert_eq!(runs, 2, "the restarted node appended a second run");
    let out = trace_check(dir.path());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("trace validated: "), "{stdout}");
    assert!(
        stdout.contains(&format!("stopped: node {victim} at ")) && stdout.contains("a new run"),
        "{stdout}"
    );
}

/// The number of the last message node `from` sent to node `to` on `path`, by `from`'s
/// records (0: none).
fn last_sent(from: usize, to: u64, path: &str) -> u64 {
    lines(recorded(), from)
        .iter()
        .map(|l| json(l))
        .filter(|v| v["t"] == "step" && v["path"] == path)
        .flat_map(|v| v["out"].as_array().cloned().unwrap_or_default())
        .filter(|o| {
            let send = o["o"].as_object().and_then(|m| m.values().next());
            send.is_some_and(|s| s["to"].as_u64() == Some(to))
        })
        .filter_map(|o| o["seq"].as_u64())
        .max()
        .unwrap_or(0)
}

/// A delivery of a message its sender never sent: a node's delivery of the last message
/// its sender sent on that link and path, recorded again with the next number. (A link
/// with a message still in flight when the nodes stopped is not taken: a delivery of that
/// message would be a valid record, and one beyond it a FIFO error.)
#[test]
fn a_delivery_of_a_message_never_sent_is_rejected() {
    let (node, mut v) = (0..NODES)
        .find_map(|n| {
            let ls = lines(recorded(), n);
            ls.iter()
                .rev()
                .map(|l| json(l))
                .find(|v| {
                    delivery(v).is_some_and(|(path, from)| {
                        v["input"]["deliver"]["seq"].as_u64()
                            == Some(last_sent(from as usize, n as u64, &path))
                    })
                })
                .map(|v| (n, v))
        })
        .expect("a delivery of the last message sent on its link");
    let seq = v["input"]["deliver"]["seq"].as_u64().unwrap();
    v["input"]["deliver"]["seq"] = serde_json::json!(seq + 1);
    let mut ls = lines(recorded(), node);
    ls.push(v.to_string());
    let stdout = rejected_at(node, &ls, ls.len());
    assert!(
        stdout.contains(&format!("delivers message #{} ", seq + 1))
            && stdout.contains(&format!(
                "never sent (node {} sent {seq} ",
                v["input"]["deliver"]["from"]
            )),
        "{stdout}"
    );
}

/// The check builds every site from the code the nodes ran and compares it with the
/// recorded start: a node that records another initial parent is rejected.
#[test]
fn a_site_recorded_with_another_initial_parent_is_rejected() {
    let (node, i, mut v) = first_record(|_, v| v["t"] == "site" && !v["parent"].is_null())
        .expect("a node that does not start with a token");
    v["parent"] = serde_json::Value::Null;
    let stdout = rejected_with(node, i, &v);
    assert!(stdout.contains("started with parent None"), "{stdout}");
}

/// A node's delivery recorded as coming from itself is rejected at that record, not at
/// another node's delivery of a message the tampered node sends later
/// (`docs/cli.md`, "`hilock trace-check`").
#[test]
fn a_delivery_from_the_node_itself_is_rejected_at_that_record() {
    let (node, i, mut v) =
        first_record(|n, v| delivery(v).is_some_and(|(_, from)| from != n as u64))
            .expect("a delivery");
    v["input"]["deliver"]["from"] = serde_json::json!(node);
    let stdout = rejected_with(node, i, &v);
    assert!(stdout.contains(", itself"), "{stdout}");
}

/// A node's file cut short: the rejection names a delivery of a message of that node and
/// says where its records end — not a delivery that waits for a node that waits for it.
#[test]
fn a_file_cut_short_is_named_by_the_rejection() {
    for node in 0..NODES {
        let ls = lines(recorded(), node);
        let cut = ls.len() / 2;
        let dir = tampered(node, &ls[..cut]);
        let out = trace_check(dir.path());
        let stdout = text(&out.stdout);
        if out.status.code() == Some(0) {
            // Nothing of what the node did after the cut was awaited by another node.
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
        let end = format!(
            "end at {}:",
            dir.path().join(format!("node-{node}.jsonl")).display()
        );
        assert!(
            stdout.contains(&format!("from node {node} that was never sent"))
                && stdout.contains(&end),
            "node {node} cut at line {cut}: {stdout}"
        );
    }
}

/// A site created again (a recovery) after any step of any node stops the check: exit 3,
/// never a rejection, also for the records of nodes that wait for the stopped node only
/// through another node (`docs/cli.md`, exit code 3).
#[test]
fn a_site_created_again_after_any_step_stops_the_check_and_rejects_nothing() {
    let mut tried = 0;
    for node in 0..NODES {
        let ls = lines(recorded(), node);
        let steps: Vec<usize> = (0..ls.len())
            .filter(|&i| json(&ls[i])["t"] == "step")
            .collect();
        for &i in steps.iter().skip(2).step_by(7) {
            let path = json(&ls[i])["path"].clone();
            let mut site = ls
                .iter()
                .map(|l| json(l))
                .find(|v| v["t"] == "site" && v["path"] == path)
                .expect("the path's site line");
            site["how"] = "recovered".into();
            site["epoch"] = 1.into();
            let mut new = ls.clone();
            new.insert(i + 1, site.to_string());
            let dir = tampered(node, &new);
            let out = trace_check(dir.path());
            let stdout = text(&out.stdout);
            assert_eq!(
                out.status.code(),
                Some(3),
                "node {node}, site again after line {}: {stdout}{}",
                i + 1,
                text(&out.stderr)
            );
            assert!(stdout.contains("stopped: "), "{stdout}");
            tried += 1;
        }
    }
    assert!(tried >= NODES, "{tried} places tried");
}

/// Records that lack what every run writes are refused, not validated: a step with no
/// `site` line of its node for that path before it (exit 1, naming the step), and a run's
/// records without their `run` line (exit 2, one line).
#[test]
fn records_without_their_site_or_run_line_are_refused() {
    let node = 1;
    let without = |kind: &str| {
        let kept: Vec<String> = lines(recorded(), node)
            .into_iter()
            .filter(|l| !l.starts_with(&format!("{{\"t\":\"{kind}\"")))
            .collect();
        tampered(node, &kept)
    };
    let dir = without("site");
    let out = trace_check(dir.path());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("trace rejected: node {node} at "))
            && stdout.contains("no `site` line of the node"),
        "{stdout}"
    );
    let dir = without("run");
    let out = trace_check(dir.path());
    let e = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains("before that run's `run` line"), "{e}");
}
