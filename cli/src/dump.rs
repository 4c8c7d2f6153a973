//! `hilock dump`: every node's `hilock status`, asked at once, merged by lock path into one
//! table of the cluster's locks (like `dlm_tool lockdump`): where each token is, who holds
//! which mode, who waits for what, what is frozen, and which nodes did not answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hilock_runtime::client::{request, Request};
use hilock_runtime::token::LockStatus;
use hilock_runtime::Status;
use serde_json::{json, Value};

use crate::runtime;

/// The format name in `hilock dump --json`.
pub const FORMAT: &str = "hilock-dump/1";

/// One node to ask: its id when known from the configuration, and its client socket.
struct Target {
    id: Option<u16>,
    socket: PathBuf,
}

/// What a node said, or why it said nothing.
struct Answer {
    target: Target,
    status: Result<Status, String>,
}

impl Answer {
    /// The node's name in the output: its id if known, else its socket.
    fn name(&self) -> String {
        match (self.id(), &self.target.socket) {
            (Some(id), s) => format!("node {id} ({})", s.display()),
            (None, s) => format!("the node at {}", s.display()),
        }
    }

    fn id(&self) -> Option<u16> {
        match &self.status {
            Ok(s) => Some(s.id),
            Err(_) => self.target.id,
        }
    }
}

/// The arguments of `hilock dump`: one of `--config` and `--socket` (clap's usage line
/// names both when neither is given).
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("nodes").required(true).multiple(false)))]
pub struct DumpArgs {
    /// The cluster's configuration file: every node of its `[[nodes]]`, at its `client`
    /// socket.
    #[arg(long, group = "nodes")]
    config: Option<PathBuf>,
    /// …or the nodes' client sockets (one or more).
    #[arg(long, num_args = 1.., group = "nodes")]
    socket: Vec<PathBuf>,
    /// Print JSON (format hilock-dump/1).
    #[arg(long)]
    json: bool,
    /// Also the idle locks (nothing held, owned, pending, queued or frozen at any node).
    #[arg(long)]
    all: bool,
    /// How long each node is given to answer, in milliseconds (all are asked at once).
    #[arg(long, default_value_t = crate::node::DEFAULT_STATUS_TIMEOUT_MS)]
    timeout_ms: u64,
}

/// `hilock dump` from the command line: the table (or JSON) on stdout; exit 0 if every
/// node answered and serves, 1 with one line on stderr naming the others if some did not
/// answer or serve no lock, 2 with one line if none answered or the request is wrong.
pub fn run(a: DumpArgs) -> std::process::ExitCode {
    match dump(a.config.as_deref(), &a.socket, a.json, a.all, a.timeout_ms) {
        Ok(Dump { out, missing }) => {
            print!("{out}");
            match missing {
                Some(line) => {
                    eprintln!("hilock: {line}");
                    std::process::ExitCode::from(1)
                }
                None => std::process::ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("hilock: error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The dump's output: the text (or JSON) for stdout, and, when some nodes did not answer
/// or serve no lock, the one line for stderr that names them.
pub struct Dump {
    pub out: String,
    pub missing: Option<String>,
}

/// `hilock dump`: ask the nodes of `config` (every `[[nodes]]` entry, at its `client`
/// socket) or at `sockets`, each for at most `timeout_ms`, all at once.
pub fn dump(
    config: Option<&Path>,
    sockets: &[PathBuf],
    json: bool,
    all: bool,
    timeout_ms: u64,
) -> Result<Dump, String> {
    let targets = targets(config, sockets)?;
    let wait = Duration::from_millis(timeout_ms);
    let answers = runtime()?.block_on(async {
        let asks: Vec<_> = targets
            .iter()
            .map(|t| tokio::spawn(ask(t.socket.clone(), wait)))
            .collect();
        let mut answers = Vec::new();
        for (target, ask) in targets.into_iter().zip(asks) {
            let status = match ask.await {
                Ok(r) => r,
                Err(e) => Err(format!("the request failed: {e}")),
            };
            // A socket of the configuration that answers as another node is not that node.
            let status = match (status, target.id) {
                (Ok(s), Some(id)) if s.id != id => Err(format!(
                    "its socket answered as node {} of cluster {:?}",
                    s.id, s.cluster
                )),
                (s, _) => s,
            };
            answers.push(Answer { target, status });
        }
        answers
    });
    let (answered, missing): (Vec<&Answer>, Vec<&Answer>) =
        answers.iter().partition(|a| a.status.is_ok());
    if answered.is_empty() {
        let why: Vec<String> = missing
            .iter()
            .map(|a| {
                format!(
                    "{}: {}",
                    a.name(),
                    a.status.as_ref().err().map_or("", |e| e)
                )
            })
            .collect();
        return Err(format!("no node answered: {}", why.join("; ")));
    }
    let statuses: Vec<&Status> = answered
        .iter()
        .filter_map(|a| a.status.as_ref().ok())
        .collect();
    let cluster = &statuses[0].cluster;
    if let Some(other) = statuses.iter().find(|s| &s.cluster != cluster) {
        return Err(format!(
            "the nodes are of different clusters: {cluster:?} and {:?} (node {})",
            other.cluster, other.id
        ));
    }
    let mut ids: Vec<u16> = statuses.iter().map(|s| s.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("node {} answered on two sockets", w[0]));
    }
    let locks = merge(&statuses, all)?;
    // A node that answers but grants nothing (refused after a restart with fresh state,
    // not let in yet, frozen, …) is no more a healthy node than one that is silent.
    let idle_nodes: Vec<(&Answer, &str)> = answered
        .iter()
        .filter_map(|a| {
            let s = a.status.as_ref().ok()?;
            (!s.serving).then(|| (*a, s.not_serving.as_deref().unwrap_or("serving: no")))
        })
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "{} of {} nodes did not answer: {}",
            missing.len(),
            answers.len(),
            missing
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !idle_nodes.is_empty() {
        problems.push(format!(
            "{} of {} nodes answered but serve no lock: {}",
            idle_nodes.len(),
            answers.len(),
            idle_nodes
                .iter()
                .map(|(a, why)| format!("{} ({why})", a.name()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let missing_line = (!problems.is_empty()).then(|| problems.join("; "));
    let out = if json {
        let doc = json!({
            "format": FORMAT,
            "cluster": cluster,
            "nodes": answers.iter().map(node_json).collect::<Vec<_>>(),
            "locks": locks.iter().map(Lock::to_json).collect::<Vec<_>>(),
        });
        format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        )
    } else {
        render(cluster, &answers, &locks)
    };
    Ok(Dump {
        out,
        missing: missing_line,
    })
}

/// The nodes to ask.
fn targets(config: Option<&Path>, sockets: &[PathBuf]) -> Result<Vec<Target>, String> {
    let Some(file) = config else {
        if sockets.is_empty() {
            return Err("give --config or one or more --socket".into());
        }
        return Ok(sockets
            .iter()
            .map(|s| Target {
                id: None,
                socket: s.clone(),
            })
            .collect());
    };
    // Ids are 0..n: node 0 is in every valid file.
    let cfg = hilock_runtime::Config::from_file(file, Some(0))?;
    if cfg.engine != hilock_runtime::config::Engine::Token {
        return Err(format!(
            "{} configures a ring: `hilock dump` is the token engine's (`hilock status --config` shows the ring)",
            file.display()
        ));
    }
    cfg.nodes
        .iter()
        .map(|n| {
            let c = hilock_runtime::Config::from_file(file, Some(n.id))?;
            let socket = c
                .client
                .ok_or_else(|| format!("{} has no `client` socket", file.display()))?;
            Ok(Target {
                id: Some(n.id),
                socket,
            })
        })
        .collect()
}

/// One node's status, within `wait`.
async fn ask(socket: PathBuf, wait: Duration) -> Result<Status, String> {
    let (reply, _) = tokio::time::timeout(wait, request(&socket, &Request::Status))
        .await
        .map_err(|_| format!("no answer within {wait:?}"))??;
    if !reply.ok {
        return Err(reply.error.unwrap_or_else(|| "status refused".into()));
    }
    let v = reply.status.ok_or("the node sent no status")?;
    serde_json::from_value(v).map_err(|e| format!("bad status: {e}"))
}

/// A mode some node holds.
struct Held {
    node: u16,
    mode: String,
    holders: usize,
}

/// A node's own request that waits (its pending mode and its local callers waiting).
struct Pending {
    node: u16,
    mode: String,
    waiters: usize,
}

/// A request in a node's kernel queue.
struct Queued {
    at: u16,
    node: u16,
    mode: String,
    priority: u8,
}

/// One lock, merged over the nodes that answered.
struct Lock {
    path: String,
    token: Vec<u16>,
    held: Vec<Held>,
    pending: Vec<Pending>,
    queued: Vec<Queued>,
    frozen: Vec<(u16, Vec<String>)>,
    nodes: Vec<(u16, LockStatus)>,
}

const NONE: &str = "Φ";

/// A lock path as a cell of the text: its whitespace and `%` written `%XX` (each byte of
/// their UTF-8), so that the line splits into its cells at whitespace (a path may hold
/// any character but a control character; `--json` keeps it as it is).
fn path_cell(path: &str) -> String {
    let mut cell = String::with_capacity(path.len());
    for c in path.chars() {
        if c.is_whitespace() || c == '%' {
            let mut b = [0; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                cell.push_str(&format!("%{byte:02X}"));
            }
        } else {
            cell.push(c);
        }
    }
    cell
}

/// Merge the nodes' lock entries by path (paths sorted, nodes in id order); locks idle at
/// every node that answered ([`idle`]) only with `all`.
fn merge(statuses: &[&Status], all: bool) -> Result<Vec<Lock>, String> {
    let mut by_path: BTreeMap<&str, Vec<(u16, &LockStatus)>> = BTreeMap::new();
    for s in statuses {
        for l in &s.locks {
            by_path.entry(&l.path).or_default().push((s.id, l));
        }
    }
    let mut locks = Vec::new();
    for (path, mut entries) in by_path {
        if !all && entries.iter().all(|(_, l)| idle(l)) {
            continue;
        }
        entries.sort_by_key(|(id, _)| *id);
        let mut lock = Lock {
            path: path.to_string(),
            token: Vec::new(),
            held: Vec::new(),
            pending: Vec::new(),
            queued: Vec::new(),
            frozen: Vec::new(),
            nodes: Vec::new(),
        };
        for &(node, l) in &entries {
            if l.token {
                lock.token.push(node);
            }
            if l.held != NONE || l.holders > 0 {
                lock.held.push(Held {
                    node,
                    mode: l.held.clone(),
                    holders: l.holders,
                });
            }
            if l.pending != NONE || l.waiters > 0 {
                lock.pending.push(Pending {
                    node,
                    mode: l.pending.clone(),
                    waiters: l.waiters,
                });
            }
            for q in &l.queue {
                lock.queued.push(queued(node, q).ok_or_else(|| {
                    format!("node {node} sent a queue entry of {path} that does not parse: {q:?}")
                })?);
            }
            let frozen = modes(&l.frozen);
            if !frozen.is_empty() {
                lock.frozen.push((node, frozen));
            }
            lock.nodes.push((node, l.clone()));
        }
        locks.push(lock);
    }
    Ok(locks)
}

/// Nothing held, owned (by a node below), pending, queued or frozen at this node.
fn idle(l: &LockStatus) -> bool {
    l.is_idle() && l.owned == NONE && modes(&l.frozen).is_empty()
}

/// A queue entry as `hilock status` writes it: `node:mode@priority`.
fn queued(at: u16, q: &str) -> Option<Queued> {
    let (node, rest) = q.split_once(':')?;
    let (mode, priority) = rest.split_once('@')?;
    Some(Queued {
        at,
        node: node.parse().ok()?,
        mode: mode.to_string(),
        priority: priority.parse().ok()?,
    })
}

/// The modes of a mode set as `hilock status` writes it: `{R, W}`.
fn modes(set: &str) -> Vec<String> {
    set.trim_start_matches('{')
        .trim_end_matches('}')
        .split(", ")
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect()
}

impl Lock {
    fn to_json(&self) -> Value {
        json!({
            "path": self.path,
            "token": self.token,
            "held": self.held.iter().map(|h| json!({
                "node": h.node, "mode": h.mode, "holders": h.holders,
            })).collect::<Vec<_>>(),
            "pending": self.pending.iter().map(|p| json!({
                "node": p.node, "mode": p.mode, "waiters": p.waiters,
            })).collect::<Vec<_>>(),
            "queued": self.queued.iter().map(|q| json!({
                "at": q.at, "node": q.node, "mode": q.mode, "priority": q.priority,
            })).collect::<Vec<_>>(),
            "frozen": self.frozen.iter().map(|(node, modes)| json!({
                "node": node, "modes": modes,
            })).collect::<Vec<_>>(),
            "nodes": self.nodes.iter().map(|(node, l)| {
                let mut v = serde_json::to_value(l).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.insert("node".into(), json!(node));
                }
                v
            }).collect::<Vec<_>>(),
        })
    }

    /// Each node's queue, in the order of the entries: `K:[node:mode@priority,…]`.
    fn queues(&self) -> Vec<String> {
        let mut at: Vec<(u16, Vec<String>)> = Vec::new();
        for q in &self.queued {
            let entry = format!("{}:{}@{}", q.node, q.mode, q.priority);
            match at.last_mut() {
                Some((k, v)) if *k == q.at => v.push(entry),
                _ => at.push((q.at, vec![entry])),
            }
        }
        at.into_iter()
            .map(|(k, v)| format!("{k}:[{}]", v.join(",")))
            .collect()
    }

    /// The table's cells (no spaces in any): path, token, held, pending, frozen, queued.
    fn cells(&self) -> [String; 6] {
        let or_dash = |v: Vec<String>| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(",")
            }
        };
        [
            path_cell(&self.path),
            if self.token.is_empty() {
                "?".to_string()
            } else {
                or_dash(self.token.iter().map(u16::to_string).collect())
            },
            or_dash(
                self.held
                    .iter()
                    .map(|h| format!("{}:{}({})", h.node, h.mode, h.holders))
                    .collect(),
            ),
            or_dash(
                self.pending
                    .iter()
                    .map(|p| format!("{}:{}({})", p.node, p.mode, p.waiters))
                    .collect(),
            ),
            or_dash(
                self.frozen
                    .iter()
                    .map(|(n, m)| format!("{n}:{{{}}}", m.join(",")))
                    .collect(),
            ),
            or_dash(self.queues()),
        ]
    }
}

fn node_json(a: &Answer) -> Value {
    match &a.status {
        Ok(s) => json!({
            "id": s.id,
            "socket": a.target.socket,
            "answered": true,
            "epoch": s.epoch,
            "serving": s.serving,
            "not_serving": s.not_serving,
        }),
        Err(e) => json!({
            "id": a.id(),
            "socket": a.target.socket,
            "answered": false,
            "error": e,
        }),
    }
}

/// The text: a header line, the table, and one line per node that did not answer or
/// answered but serves no lock.
fn render(cluster: &str, answers: &[Answer], locks: &[Lock]) -> String {
    let answered: Vec<String> = answers
        .iter()
        .filter_map(|a| a.status.as_ref().ok().map(|s| s.id.to_string()))
        .collect();
    let mut o = format!(
        "cluster {cluster:?}: {} of {} nodes answered ({})\n",
        answered.len(),
        answers.len(),
        answered.join(", ")
    );
    let head = ["path", "token", "held", "pending", "frozen", "queued"].map(String::from);
    let rows: Vec<[String; 6]> = std::iter::once(head)
        .chain(locks.iter().map(Lock::cells))
        .collect();
    let mut width = [0usize; 6];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(width).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(c);
                line.push_str(&" ".repeat(w - c.chars().count() + 2));
            }
        }
        o.push_str(line.trim_end());
        o.push('\n');
    }
    if locks.is_empty() {
        o.push_str("(no locks in use)\n");
    }
    for a in answers {
        match &a.status {
            Err(e) => o.push_str(&format!("not answering: {}: {e}\n", a.name())),
            Ok(s) if !s.serving => o.push_str(&format!(
                "not serving: {}: {}\n",
                a.name(),
                s.not_serving.as_deref().unwrap_or("serving: no")
            )),
            Ok(_) => {}
        }
    }
    o
}
