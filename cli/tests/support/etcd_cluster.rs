//! `hilock node` processes with `membership = "etcd"` (feature `etcd`) for the tests that
//! run them (`#[path = "support/etcd_cluster.rs"] mod etcd_cluster;`): start and stop the
//! nodes (optionally reaching each other through proxies), a `hilock lock … -- sleep 100`
//! holder, the test's own view of the member list, and the airline workload over the nodes'
//! client sockets with every grant and release in the demo's history checker
//! (`hilock_runtime::oracle::Oracle`) and every answer recorded. Each test uses part of it.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hilock_kernel::Mode;
use hilock_runtime::client::{request, Reply, Request};
use hilock_runtime::membership::{EtcdOptions, Member, MemberView, Membership};
use hilock_runtime::oracle::Oracle;
use hilock_spec::workload::AIRLINE_MIX as MIX;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;

/// The node lease's TTL (the smallest a default etcd grants) and the grace: the local
/// lease is then (1 − ρ)(2 s − 0.5 s) ≈ 1.5 s.
pub const TTL_S: u32 = 2;
pub const GRACE_MS: u64 = 500;

/// `hilock node` processes, node `i` reaching etcd at `endpoints[i]`; each logs to
/// `n<i>.log` in the nodes' directory at the level given by [`Nodes::start_logged`]
/// (`hilock=error` otherwise).
pub struct Nodes {
    dir: tempfile::TempDir,
    kids: Vec<Option<Child>>,
    log_level: String,
}

/// `n` free loopback addresses (bound and released: a node binds its own again).
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    (0..n).map(|_| crate::ports::free_addr()).collect()
}

impl Nodes {
    /// Nodes that reach each other directly; requests time out after `request_timeout_ms`
    /// unless the client gives its own timeout.
    pub fn start(cluster: &str, endpoints: &[String], request_timeout_ms: u64) -> Nodes {
        let listen = free_addrs(endpoints.len());
        Nodes::start_routed(cluster, endpoints, request_timeout_ms, &listen, |_, j| {
            listen[j]
        })
    }

    /// Node `i` listens on `listen[i]` and reaches node `j` at `route(i, j)` (a proxy, or
    /// `listen[j]`).
    pub fn start_routed(
        cluster: &str,
        endpoints: &[String],
        request_timeout_ms: u64,
        listen: &[SocketAddr],
        route: impl Fn(usize, usize) -> SocketAddr,
    ) -> Nodes {
        Nodes::start_configured(cluster, endpoints, request_timeout_ms, listen, route, "")
    }

    /// [`Nodes::start_routed`] with `extra` appended to every node's configuration (for
    /// example `etcd_recovery = true`).
    pub fn start_configured(
        cluster: &str,
        endpoints: &[String],
        request_timeout_ms: u64,
        listen: &[SocketAddr],
        route: impl Fn(usize, usize) -> SocketAddr,
        extra: &str,
    ) -> Nodes {
        Nodes::start_logged(
            cluster,
            endpoints,
            request_timeout_ms,
            listen,
            route,
            extra,
            "hilock=error",
        )
    }

    /// Nodes reaching each other directly, `extra` appended to every configuration, each
    /// logging at `log_level` (a `RUST_LOG` filter) to its log file ([`Nodes::log`]).
    pub fn start_direct(
        cluster: &str,
        endpoints: &[String],
        request_timeout_ms: u64,
        extra: &str,
        log_level: &str,
    ) -> Nodes {
        let listen = free_addrs(endpoints.len());
        Nodes::start_logged(
            cluster,
            endpoints,
            request_timeout_ms,
            &listen,
            |_, j| listen[j],
            extra,
            log_level,
        )
    }

    /// [`Nodes::start_configured`] with every node logging at `log_level` (a `RUST_LOG`
    /// filter) to its log file ([`Nodes::log`]).
    pub fn start_logged(
        cluster: &str,
        endpoints: &[String],
        request_timeout_ms: u64,
        listen: &[SocketAddr],
        route: impl Fn(usize, usize) -> SocketAddr,
        extra: &str,
        log_level: &str,
    ) -> Nodes {
        assert_eq!(listen.len(), endpoints.len(), "one address per node");
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Nodes {
            kids: Vec::new(),
            dir,
            log_level: log_level.to_string(),
        };
        for (id, endpoint) in endpoints.iter().enumerate() {
            let mut toml = format!(
                "cluster = \"{cluster}\"\nsecret = \"etcd node test secret\"\nid = {id}\n\
                 request_timeout_ms = {request_timeout_ms}\nclient = \"{}\"\n\
                 membership = \"etcd\"\netcd_endpoints = [\"{endpoint}\"]\n\
                 etcd_lease_ttl_s = {TTL_S}\netcd_grace_ms = {GRACE_MS}\n{extra}",
                nodes.socket(id).display()
            );
            for (j, &own) in listen.iter().enumerate() {
                let a = if j == id { own } else { route(id, j) };
                toml.push_str(&format!("[[nodes]]\nid = {j}\naddr = \"{a}\"\n"));
            }
            std::fs::write(nodes.config(id), toml).unwrap();
            let child = nodes.spawn(id);
            nodes.kids.push(Some(child));
        }
        // A node binds its client socket only after it has joined etcd.
        for id in 0..endpoints.len() {
            nodes.until_socket(id);
        }
        nodes
    }

    /// Node `id`'s configuration file.
    pub fn config(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("n{id}.toml"))
    }

    fn spawn(&self, id: usize) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("n{id}.log")))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["node", "--config"])
            .arg(self.config(id))
            .env("RUST_LOG", &self.log_level)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Waits until node `id` serves its client socket; a node that exits or does not
    /// serve within 20 s fails the test with its exit status and its log.
    fn until_socket(&mut self, id: usize) {
        let t = std::time::Instant::now();
        while !self.socket(id).exists() {
            let exited = self.kids[id]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || t.elapsed() > Duration::from_secs(20) {
                let how = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => "did not serve its socket within 20 s".to_string(),
                };
                panic!("node {id} {how}; its log:\n{}", self.log(id));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts node `id` again with the same configuration (a new run of it: after
    /// [`Nodes::kill`]); returns once it has joined etcd and serves its client socket.
    pub fn restart(&mut self, id: usize) {
        assert!(self.kids[id].is_none(), "node {id} was stopped first");
        let _ = std::fs::remove_file(self.socket(id));
        let child = self.spawn(id);
        self.kids[id] = Some(child);
        self.until_socket(id);
    }

    /// Node `id`'s log so far (every run of it).
    pub fn log(&self, id: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("n{id}.log"))).unwrap_or_default()
    }

    /// The lines of node `id`'s log that mention recovery or epochs (for a failing test's
    /// message), at most 20.
    pub fn recovery_log(&self, id: usize) -> String {
        self.log(id)
            .lines()
            .filter(|l| l.contains("recovery") || l.contains("epoch"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn len(&self) -> usize {
        self.kids.len()
    }

    pub fn socket(&self, id: usize) -> PathBuf {
        self.dir.path().join(format!("n{id}.sock"))
    }

    pub fn pid(&self, id: usize) -> u32 {
        self.kids[id].as_ref().unwrap().id()
    }

    /// `kill -SIG` node `id` (STOP, CONT, KILL, …).
    pub fn signal(&self, id: usize, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid(id).to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} node {id}");
    }

    /// Node `id`'s exit code once its process has exited, waiting at most `within`
    /// (`None`: still running, or killed by a signal).
    pub fn exit_code(&mut self, id: usize, within: Duration) -> Option<i32> {
        let t = std::time::Instant::now();
        loop {
            let c = self.kids[id].as_mut()?;
            if let Some(st) = c.try_wait().unwrap() {
                return st.code();
            }
            if t.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether node `id`'s process (the one the test started) still runs.
    pub fn running(&mut self, id: usize) -> bool {
        self.kids[id]
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// SIGTERM node `id` and reap it once it has exited (a graceful leave); its exit code,
    /// `None` if it did not exit within `within` (it is then killed) or died by a signal.
    pub fn terminate(&mut self, id: usize, within: Duration) -> Option<i32> {
        self.signal(id, "TERM");
        self.reap(id, within)
    }

    /// Node `id`'s exit code once it has exited (after a signal the test sent), waiting at
    /// most `within` (it is then killed); the process is reaped either way.
    pub fn reap(&mut self, id: usize, within: Duration) -> Option<i32> {
        let code = self.exit_code(id, within);
        self.kill(id);
        code
    }

    /// Starts node `id` again right after [`Nodes::kill`] without waiting for its socket.
    pub fn respawn(&mut self, id: usize) {
        assert!(self.kids[id].is_none(), "node {id} was stopped first");
        let _ = std::fs::remove_file(self.socket(id));
        let child = self.spawn(id);
        self.kids[id] = Some(child);
    }

    /// SIGKILL node `id` and reap it.
    pub fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.kids[id].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in self.kids.iter_mut().flatten() {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `hilock lock PATH W -- sleep 100` on node `id`'s socket, and the sleep's pid and fence
/// once it runs (it runs only once the lock is granted and its group registered).
pub struct Wrapper {
    child: Child,
    pub sleep: i32,
    pub fence: u64,
}

impl Wrapper {
    pub async fn start(nodes: &Nodes, id: usize, path: &str) -> Wrapper {
        let child = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["lock", path, "W", "--socket"])
            .arg(nodes.socket(id))
            .args(["--timeout-ms", "10000", "--", "sleep", "100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let wrapper = child.id() as i32;
        let t = Instant::now();
        // The command's name is `sleep` from the start of its exec, its environment only a
        // moment later (the kernel sets the new name before it lays out the new stack):
        // read until the fence is there.
        let (sleep, fence) = loop {
            if let Some(pid) = child_named(wrapper, "sleep") {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                let fence = env
                    .split(|&b| b == 0)
                    .find_map(|kv| kv.strip_prefix(b"HILOCK_FENCE="))
                    .map(|v| String::from_utf8_lossy(v).parse::<u64>().unwrap());
                if let Some(fence) = fence {
                    break (pid, fence);
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the command starts with HILOCK_FENCE in its environment"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        Wrapper {
            child,
            sleep,
            fence,
        }
    }

    /// Whether the command (not a zombie) still runs.
    pub fn alive(&self) -> bool {
        pid_alive(self.sleep)
    }

    /// The wrapper's exit code, waiting at most `within`.
    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            if t.elapsed() > within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Wrapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("kill")
            .args(["-KILL", &self.sleep.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether process `pid` runs (exists and is not a zombie).
pub fn pid_alive(pid: i32) -> bool {
    matches!(hilock_runtime::proc::stat(pid), Some((s, _, _)) if s != 'Z' && s != 'X')
}

/// The child of `parent` whose command name is `name`.
pub fn child_named(parent: i32, name: &str) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&pid| {
            matches!(hilock_runtime::proc::stat(pid), Some((_, ppid, _)) if ppid == parent)
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim_end() == name)
        })
}

/// The test's own view of the member list (it joins as a member with an id no node has).
pub async fn observer(etcd: &str, cluster: &str) -> (Membership, watch::Receiver<MemberView>) {
    let mut o = EtcdOptions::new(vec![etcd.to_string()]);
    o.ttl_s = TTL_S;
    o.grace = Duration::from_millis(GRACE_MS);
    let m = Membership::join(
        &o,
        cluster,
        Member {
            id: 900,
            incarnation: 1,
        },
    )
    .await
    .unwrap();
    let w = m.members();
    (m, w)
}

pub async fn until_members(
    w: &mut watch::Receiver<MemberView>,
    p: impl FnMut(&MemberView) -> bool,
) {
    tokio::time::timeout(Duration::from_secs(10), w.wait_for(p))
        .await
        .expect("member view reached in time")
        .unwrap();
}

/// An [`observer`] of `cluster` at `etcd`, returned once nodes `0..n` are all members.
pub async fn all_members(
    etcd: &str,
    cluster: &str,
    n: usize,
) -> (Membership, watch::Receiver<MemberView>) {
    let (obs, mut view) = observer(etcd, cluster).await;
    until_members(&mut view, |v| {
        (0..n as u16).all(|i| v.members.contains_key(&i))
    })
    .await;
    (obs, view)
}

pub fn lock_req(path: &str, mode: &str, timeout_ms: u64) -> Request {
    request_of(path, mode, timeout_ms, false)
}

/// [`lock_req`] as a try-lock (`hilock lock --try`).
pub fn try_req(path: &str, mode: &str, timeout_ms: u64) -> Request {
    request_of(path, mode, timeout_ms, true)
}

fn request_of(path: &str, mode: &str, timeout_ms: u64, try_lock: bool) -> Request {
    Request::Lock {
        path: path.into(),
        mode: mode.into(),
        priority: 0,
        timeout_ms: Some(timeout_ms),
        nested: false,
        try_lock,
    }
}

/// Registers a client reply's grant with the oracle.
pub fn register(oracle: &Oracle, op: u64, node: u16, reply: &Reply) {
    let locks = reply.locks.clone().unwrap_or_default();
    let fence = reply.fence.expect("a grant carries its fence");
    for (k, l) in locks.iter().enumerate() {
        let (p, m) = l.rsplit_once(':').unwrap();
        let m = Mode::parse(m).unwrap();
        if k + 1 == locks.len() {
            oracle.register_fenced(op, node, p, m, fence);
        } else {
            oracle.register_path(op, node, p, m);
        }
    }
}

/// The locks node `id` knows, as `(path, token here, parent)` (from its status; `None` if
/// it does not answer within 5 s).
pub async fn locks_of(nodes: &Nodes, id: usize) -> Option<Vec<(String, bool, Option<u16>)>> {
    locks_at(&nodes.socket(id)).await
}

/// Whether the node at `socket` says it holds `path`'s token.
pub async fn token_at(socket: &std::path::Path, path: &str) -> bool {
    locks_at(socket)
        .await
        .unwrap_or_default()
        .iter()
        .any(|l| l.0 == path && l.1)
}

async fn locks_at(socket: &std::path::Path) -> Option<Vec<(String, bool, Option<u16>)>> {
    let (reply, _) =
        tokio::time::timeout(Duration::from_secs(5), request(socket, &Request::Status))
            .await
            .ok()?
            .ok()?;
    let locks = reply.status?.get("locks")?.as_array()?.clone();
    Some(
        locks
            .iter()
            .map(|l| {
                (
                    l["path"].as_str().unwrap_or_default().to_string(),
                    l["token"].as_bool().unwrap_or(false),
                    l["parent"].as_u64().map(|p| p as u16),
                )
            })
            .collect(),
    )
}

/// Node `id`'s token flag and parent for `path` (`(false, None)` if it does not know it).
pub async fn lock_of(nodes: &Nodes, id: usize, path: &str) -> (bool, Option<u16>) {
    locks_of(nodes, id)
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|l| l.0 == path)
        .map_or((false, None), |l| (l.1, l.2))
}

/// A path `prefix<i>` (no ancestor) whose token starts at node `holder` of `n`.
pub fn rooted_at(prefix: &str, holder: u16, n: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|p| hilock_runtime::wire::initial_holder(p, n).0 == holder)
        .unwrap()
}

/// How a lock request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Granted, with a lease deadline still ahead (registered with the oracle, held, released).
    Granted,
    /// Granted, but the lease deadline the grant carries had passed when it was read (the
    /// node's lease ran out meanwhile): not used, released at once.
    ExpiredGrant,
    /// `Error::PeerGone`: "node P has left the cluster".
    PeerGone,
    /// `Error::Refused` for the node's own lost etcd lease: "this node serves no lock: …
    /// etcd lease …" ("… is lost", or "… was not renewed in time").
    LeaseLost,
    /// `Error::Timeout`: "timed out after".
    Timeout,
    /// Any other error, or a broken connection at a node that was not killed.
    Other,
    /// No answer within the request's timeout plus [`ANSWER_SLACK`]: a hang.
    NoAnswer,
    /// The connection broke because the test killed the node.
    NodeKilled,
}

/// An answer is late — a hang — if it has not come `ANSWER_SLACK` after the request's own
/// timeout (more than any pause the tests make).
pub const ANSWER_SLACK: Duration = Duration::from_secs(4);

/// One lock request and its answer.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub node: usize,
    pub path: String,
    pub probe: bool,
    pub issued: Instant,
    pub answered: Instant,
    pub kind: Kind,
    pub text: String,
}

/// The history checker and every answer, shared by the workload and the probes.
#[derive(Default)]
pub struct Recorder {
    pub oracle: Oracle,
    next_op: AtomicU64,
    outcomes: Mutex<Vec<Outcome>>,
    /// Holds of commands run by `hilock lock` (oracle op, command pid): the hold ends when
    /// the command is dead.
    commands: Mutex<Vec<(u64, i32)>>,
    killed: Mutex<HashSet<usize>>,
    /// Killed nodes the test starts again: their clients wait instead of stopping.
    returning: Mutex<HashSet<usize>>,
}

impl Recorder {
    pub fn op(&self) -> u64 {
        self.next_op.fetch_add(1, Relaxed) + 1
    }

    /// `wrapper`'s hold of `path` in W on `node` is in the history until its command dies.
    pub fn command_holds(&self, wrapper: &Wrapper, node: usize, path: &str) {
        let op = self.op();
        self.oracle
            .register_fenced(op, node as u16, path, Mode::W, wrapper.fence);
        self.commands.lock().unwrap().push((op, wrapper.sleep));
    }

    /// Ends in the history the holds of the commands that are dead by now. Called before
    /// each grant is registered: a command still alive when another conflicting grant has
    /// arrived is an overlap the oracle reports.
    fn settle(&self) {
        self.commands.lock().unwrap().retain(|&(op, pid)| {
            let alive = pid_alive(pid);
            if !alive {
                self.oracle.exit(op);
            }
            alive
        });
    }

    /// The test killed node `id`: its broken connections are not failures.
    pub fn killed(&self, id: usize) {
        self.killed.lock().unwrap().insert(id);
    }

    /// The test started node `id` again: its answers count again.
    pub fn restarted(&self, id: usize) {
        self.killed.lock().unwrap().remove(&id);
        self.returning.lock().unwrap().remove(&id);
    }

    /// The test stops node `id` and starts it again: as [`Recorder::killed`], but the
    /// workload's clients of node `id` wait for [`Recorder::restarted`] instead of stopping.
    pub fn restarting(&self, id: usize) {
        self.returning.lock().unwrap().insert(id);
        self.killed(id);
    }

    fn is_returning(&self, id: usize) -> bool {
        self.returning.lock().unwrap().contains(&id)
    }

    /// Requests lost: no answer (neither grant nor error) within their timeout plus
    /// [`ANSWER_SLACK`].
    pub fn lost(&self) -> usize {
        self.outcomes
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.kind == Kind::NoAnswer)
            .count()
    }

    fn is_killed(&self, id: usize) -> bool {
        self.killed.lock().unwrap().contains(&id)
    }

    pub fn outcomes(&self) -> Vec<Outcome> {
        self.outcomes.lock().unwrap().clone()
    }

    /// Asks node `node` for `path` in `mode` (timeout `timeout_ms`) and records the answer;
    /// a grant is registered with the oracle, held for `hold`, and released.
    #[allow(clippy::too_many_arguments)]
    pub async fn ask(
        &self,
        socket: &std::path::Path,
        node: usize,
        path: &str,
        mode: Mode,
        timeout_ms: u64,
        hold: Duration,
        probe: bool,
    ) -> Kind {
        let op = self.op();
        let issued = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_millis(timeout_ms) + ANSWER_SLACK,
            request(socket, &lock_req(path, mode.symbol(), timeout_ms)),
        )
        .await;
        let answered = Instant::now();
        let (kind, text) = match answer {
            Err(_) => (Kind::NoAnswer, String::new()),
            Ok(Err(e)) if self.is_killed(node) => (Kind::NodeKilled, e),
            Ok(Err(e)) => (Kind::Other, e),
            Ok(Ok((reply, stream))) if reply.ok => {
                let now_ms = hilock_runtime::proc::monotonic().as_millis() as u64;
                if reply.lease_until_ms.is_some_and(|u| u <= now_ms) {
                    drop(stream);
                    (Kind::ExpiredGrant, format!("{:?}", reply.locks))
                } else {
                    self.settle();
                    register(&self.oracle, op, node as u16, &reply);
                    let mut stream = stream;
                    let cut = hold_or_cut(&mut stream, hold).await;
                    self.oracle.exit(op);
                    drop(stream);
                    let cut = if cut { CUT_DURING_THE_HOLD } else { "" };
                    (Kind::Granted, format!("{:?}{cut}", reply.locks))
                }
            }
            Ok(Ok((reply, _))) => {
                let e = reply.error.unwrap_or_default();
                let kind = if e.contains("has left the cluster") {
                    Kind::PeerGone
                } else if e.contains("this node serves no lock") && e.contains("etcd lease") {
                    Kind::LeaseLost
                } else if e.contains("timed out after") {
                    Kind::Timeout
                } else if self.is_killed(node) {
                    Kind::NodeKilled
                } else {
                    Kind::Other
                };
                (kind, e)
            }
        };
        self.outcomes.lock().unwrap().push(Outcome {
            node,
            path: path.to_string(),
            probe,
            issued,
            answered,
            kind,
            text,
        });
        kind
    }
}

/// The text of a grant whose connection the node ended while it was held.
pub const CUT_DURING_THE_HOLD: &str = " (cut during the hold)";

/// Holds a granted lock for `hold`, the client watching its connection meanwhile: `true`
/// if the node ended it first (a node stopped with SIGTERM ends its clients' connections,
/// and so their holds, before it hands their locks over: the client knows its hold has
/// ended when it sees that). The hold then ends there.
async fn hold_or_cut(stream: &mut tokio::net::UnixStream, hold: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    if hold.is_zero() {
        return false;
    }
    let mut buf = [0u8; 256];
    let end = Instant::now() + hold;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(end) => return false,
            n = stream.read(&mut buf) => if matches!(n, Ok(0) | Err(_)) { return true },
        }
    }
}

/// Timeout of each workload request and probe: above the lease TTL + 1 s, so that a request
/// waiting on a dead node's direct link fails with `PeerGone` before it times out.
pub const WORK_TIMEOUT_MS: u64 = 3_000;

/// The thesis's airline workload (`hilock demo`, section 4.1) over the nodes' client
/// sockets: on each node, `clients` clients loop over a non-critical section of 5–15 ms and
/// an access — IR 80 % (R on `/airline/e<k>`, IR on `/airline`), R 10 %, U 4 %, IW 5 % (W
/// on an entry, IW on `/airline`), W 1 % on the table — held 2 ms; 8 entries. A client
/// of a killed node stops; of a node being restarted ([`Recorder::restarting`]), waits.
pub struct Airline {
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<()>,
}

pub const ENTRIES: u64 = 8;

impl Airline {
    pub fn start(nodes: &Nodes, rec: &Arc<Recorder>, on: &[usize], clients: usize) -> Airline {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        for &node in on {
            for c in 0..clients {
                let (socket, rec, stop) = (nodes.socket(node), rec.clone(), stop.clone());
                tasks.spawn(async move {
                    let mut rng = StdRng::seed_from_u64(node as u64 * 1_000 + c as u64);
                    while !stop.load(Relaxed) {
                        if rec.is_killed(node) {
                            if !rec.is_returning(node) {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                        let ncs = Duration::from_millis(rng.random_range(5..15));
                        tokio::time::sleep(ncs).await;
                        let mut x = rng.random_range(0..100u32);
                        let mut access = Mode::IR;
                        for (m, w) in MIX {
                            if x < w {
                                access = m;
                                break;
                            }
                            x -= w;
                        }
                        let entry = rng.random_range(0..ENTRIES);
                        let (path, mode) = match access {
                            Mode::IR => (format!("/airline/e{entry}"), Mode::R),
                            Mode::IW => (format!("/airline/e{entry}"), Mode::W),
                            m => ("/airline".to_string(), m),
                        };
                        let hold = Duration::from_millis(2);
                        rec.ask(&socket, node, &path, mode, WORK_TIMEOUT_MS, hold, false)
                            .await;
                    }
                });
            }
        }
        Airline { stop, tasks }
    }

    /// Stops the clients and waits for their last requests (each bounded by its timeout
    /// plus [`ANSWER_SLACK`]).
    pub async fn finish(mut self) {
        self.stop.store(true, Relaxed);
        let bound = Duration::from_millis(WORK_TIMEOUT_MS) + ANSWER_SLACK + Duration::from_secs(1);
        tokio::time::timeout(bound, async {
            while let Some(r) = self.tasks.join_next().await {
                r.unwrap();
            }
        })
        .await
        .expect("the workload's clients end");
    }
}

/// What the probes of one lock found after a fault at `t0`.
#[derive(Clone, Debug, Default)]
pub struct Probed {
    /// Time from the fault to the first answer a probe got, which node, and its kind.
    pub first: Option<(Duration, usize, Kind)>,
    /// Time from the fault to the first grant (service restored), and where.
    pub restored: Option<(Duration, usize)>,
}

/// From each of `from`, asks `path` in W again and again (100 ms apart, each with
/// [`WORK_TIMEOUT_MS`] or what is left of the window) until one is granted or `window`
/// has passed since `t0`. Every answer is recorded.
pub async fn probe(
    nodes: &Nodes,
    rec: &Arc<Recorder>,
    path: &str,
    from: &[usize],
    t0: Instant,
    window: Duration,
) -> Probed {
    let done = Arc::new(AtomicBool::new(false));
    let found = Arc::new(Mutex::new(Probed::default()));
    let mut set = tokio::task::JoinSet::new();
    for &node in from {
        let (socket, rec, done, found, path) = (
            nodes.socket(node),
            rec.clone(),
            done.clone(),
            found.clone(),
            path.to_string(),
        );
        set.spawn(async move {
            while !done.load(Relaxed) {
                let left = window.saturating_sub(t0.elapsed());
                if left < Duration::from_millis(200) {
                    return;
                }
                let ms = (left.as_millis() as u64).min(WORK_TIMEOUT_MS);
                let kind = rec
                    .ask(&socket, node, &path, Mode::W, ms, Duration::ZERO, true)
                    .await;
                let at = t0.elapsed();
                {
                    let mut f = found.lock().unwrap();
                    if f.first.is_none_or(|(t, _, _)| at < t) {
                        f.first = Some((at, node, kind));
                    }
                    if kind == Kind::Granted {
                        if f.restored.is_none_or(|(t, _)| at < t) {
                            f.restored = Some((at, node));
                        }
                        done.store(true, Relaxed);
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    let bound = window + Duration::from_millis(WORK_TIMEOUT_MS) + ANSWER_SLACK;
    tokio::time::timeout(bound, async {
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    })
    .await
    .expect("the probes end");
    let f = found.lock().unwrap().clone();
    f
}

/// "1.234 s" or "not restored within 4 s".
pub fn restored_text(p: &Probed, window: Duration) -> String {
    match p.restored {
        Some((t, n)) => format!("{:.3} s (granted at node {n})", t.as_secs_f64()),
        None => format!("not restored within {} s", window.as_secs_f64()),
    }
}

/// The paths the workload locks: `/airline` and its entries.
pub fn airline_paths() -> Vec<String> {
    std::iter::once("/airline".to_string())
        .chain((0..ENTRIES).map(|e| format!("/airline/e{e}")))
        .collect()
}

/// Time from `t0` until every path of the workload ([`airline_paths`]) has been granted in
/// W to a [`probe`] from one of `from`; `None` if one was not within `window`.
pub async fn all_usable(
    nodes: &Nodes,
    rec: &Arc<Recorder>,
    from: &[usize],
    t0: Instant,
    window: Duration,
) -> Option<Duration> {
    let paths = airline_paths();
    let found = futures_util::future::join_all(
        paths.iter().map(|p| probe(nodes, rec, p, from, t0, window)),
    )
    .await;
    found
        .iter()
        .map(|p| p.restored.map(|(t, _)| t))
        .try_fold(Duration::ZERO, |m, t| t.map(|t| m.max(t)))
}

/// `hilock status --json` of the node at `socket`, as an operator runs it (`None` if it
/// does not answer within 2 s: stopped, or between two runs).
pub fn status_json(socket: &std::path::Path) -> Option<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(["status", "--json", "--timeout-ms", "2000", "--socket"])
        .arg(socket)
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// [`status_json`] from a test's runtime (the command runs on a blocking thread).
pub async fn status_now(socket: &std::path::Path) -> Option<serde_json::Value> {
    let socket = socket.to_path_buf();
    tokio::task::spawn_blocking(move || status_json(&socket))
        .await
        .unwrap()
}

/// One line of `hilock status --json` (`docs/operations.md`, "`hilock status`"):
/// membership, lease state, serving (and why not), epoch, run; "no answer" for `None`.
pub fn status_summary(v: &Option<serde_json::Value>) -> String {
    let Some(v) = v else {
        return "no answer".to_string();
    };
    let serving = if v["serving"].as_bool() == Some(true) {
        "serving yes".to_string()
    } else {
        format!("serving NO ({})", v["not_serving"].as_str().unwrap_or("?"))
    };
    let run = v["run"].as_str().unwrap_or("?");
    format!(
        "membership {}, lease {}, {serving}, epoch {}, run {}",
        v["membership"].as_str().unwrap_or("?"),
        v["lease"]["state"].as_str().unwrap_or("?"),
        v["epoch"],
        &run[..run.len().min(6)]
    )
}

/// Waits (at most `within`) until the node at `socket` says it serves and its run is not
/// `not_run`; the run then and when it was seen.
pub async fn until_serving(
    socket: impl AsRef<std::path::Path>,
    not_run: &str,
    within: Duration,
) -> Option<(String, Instant)> {
    let socket = socket.as_ref();
    let t = Instant::now();
    while t.elapsed() < within {
        let asked = tokio::time::timeout(Duration::from_secs(2), request(socket, &Request::Status));
        if let Ok(Ok((reply, _))) = asked.await {
            if let Some(v) = reply.status {
                let run = v["run"].as_str().unwrap_or_default();
                if v["serving"].as_bool() == Some(true) && run != not_run {
                    return Some((run.to_string(), Instant::now()));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}
