//! The node configuration (`node.toml`).
//!
//! Every node of a cluster can read the same file; only `id` differs (or is given on the
//! command line with `hilock node --config cluster.toml --id 2`):
//!
//! ```toml
//! cluster = "airline"               # peers must name the same cluster
//! secret = "a long shared secret"   # or: secret_file = "/etc/hilock/secret"
//! id = 0                            # this node: one of the ids below
//! client = "/tmp/hilock-{id}.sock"  # local client socket (`hilock lock`, `hilock status`);
//!                                   # `{id}` becomes the node id
//! request_timeout_ms = 30000        # default timeout of a lock request
//! max_clients = 1024                # client connections served at once
//! metrics_addr = "127.0.0.1:9464"   # Prometheus metrics over HTTP (default: off)
//! state_dir = "state-{id}"          # static membership: where the node keeps its
//!                                   # generation, so fences grow across restarts of the
//!                                   # whole cluster, and where SIGTERM suspends the
//!                                   # node's run for its next start to resume
//!                                   # (default: off; relative to this file)
//! record = "trace/node-{id}.jsonl"   # append one JSON line per kernel step, for
//!                                   # `hilock trace-check` (default: off; relative to this file)
//!
//! [[nodes]]
//! id = 0
//! addr = "127.0.0.1:7100"
//! [[nodes]]
//! id = 1
//! addr = "127.0.0.1:7101"
//! ```
//!
//! The ids must be exactly `0..n` (each once), `n ≤` [`MAX_NODES`]. A node listens on its
//! own `addr` (or `listen`, if given) and dials every other node's `addr`.
//!
//! # The ring engine (the Chord lock paper)
//! `engine = "ring"` makes `hilock node` run a node of the ring engine ([`crate::ring`])
//! instead of the token engine (`engine = "token"`, the default). Then the `[[nodes]]` are
//! the ring's slots (node id = slot, at most [`crate::ring::SLOTS`]) and a `[ring]` table
//! names the membership service:
//!
//! ```toml
//! engine = "ring"
//! [ring]
//! membership = "127.0.0.1:7300"   # `hilock ring membership` listens here
//! members = [0, 1, 2, 3]          # the first view (default: every node)
//! lease_ms = 1000                 # the nodes' lease (default 2000)
//! ```
//!
//! With `membership = "etcd"` (below) the ring has no service: the `[ring]` table holds only
//! `members` (the first view, installed in etcd by the first node to start), the lease is
//! `etcd_lease_ttl_s`, and `membership`/`lease_ms` in `[ring]` are refused
//! ([`crate::ring`]'s etcd mode, `docs/faults.md`, "Ring engine").
//!
//! # Membership
//! Membership (`docs/faults.md`, "With etcd membership"). By default the cluster is
//! static: the nodes above, and a dead node's paths fail only at the request timeout. With
//! etcd (a `hilock` built with `--features etcd`):
//!
//! ```toml
//! membership = "etcd"                  # default: "static"
//! etcd_endpoints = ["127.0.0.1:2379"]  # etcd's client URLs
//! etcd_lease_ttl_s = 10                # the node lease's TTL (default 10)
//! etcd_grace_ms = 1000                 # time to kill holders' commands (default 1000)
//! etcd_recovery = true                 # rebuild a dead node's locks (default true)
//! etcd_rejoin_timeout_ms = 60000       # after a lost lease: how long to wait for etcd (default 60000)
//! etcd_held_back_max = 4096            # recovery: protocol messages a node keeps unread (default 4096)
//! ```
//!
//! the node holds an etcd lease while it runs; when the lease is lost it stops granting and
//! its holders' commands are killed, and a peer whose lease ends fails the requests that
//! wait on it ([`crate::token`], `docs/faults.md`, "With etcd membership") — or, with
//! `etcd_recovery = true` (the default with etcd), the survivors install a new epoch with
//! the dead node's locks rebuilt (its tokens regenerated) and the waiting requests are
//! granted (`docs/faults.md`, "With etcd recovery"). A node whose own lease is lost (an
//! etcd stall longer than the lease, a pause, a cut) waits up to `etcd_rejoin_timeout_ms`
//! for etcd to answer and then rejoins in-process as a new run; without recovery, or if
//! etcd does not answer in time, `hilock node` exits with status 75 (`docs/faults.md`, "An
//! etcd stall").

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest cluster a node can be part of (the kernel's node capacity `N`).
pub const MAX_NODES: usize = 64;

/// Default of `max_clients`: client connections a node serves at once.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;

/// Shortest accepted cluster secret, in bytes.
pub const MIN_SECRET_LEN: usize = 8;

/// One node of the cluster, as listed in the configuration.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeAddr {
    /// The node id, `0..n`.
    pub id: u16,
    /// Where the node accepts connections from its peers.
    pub addr: SocketAddr,
}

/// The configuration file, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    cluster: String,
    secret: Option<String>,
    secret_file: Option<PathBuf>,
    id: Option<u16>,
    listen: Option<SocketAddr>,
    client: Option<PathBuf>,
    max_clients: Option<usize>,
    request_timeout_ms: Option<u64>,
    metrics_addr: Option<SocketAddr>,
    state_dir: Option<PathBuf>,
    record: Option<PathBuf>,
    // Membership: see the module documentation.
    membership: Option<String>,
    etcd_endpoints: Option<Vec<String>>,
    etcd_lease_ttl_s: Option<u32>,
    etcd_grace_ms: Option<u64>,
    etcd_recovery: Option<bool>,
    etcd_rejoin_timeout_ms: Option<u64>,
    etcd_held_back_max: Option<usize>,
    nodes: Vec<NodeAddr>,
    // The ring engine (the Chord lock paper).
    engine: Option<String>,
    ring: Option<RingFile>,
}

/// Which engine `hilock node` runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// The token engine (the thesis), the default.
    #[default]
    Token,
    /// The ring of lock servers (the Chord lock paper, [`crate::ring`]).
    Ring,
}

/// The `[ring]` table, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RingFile {
    membership: Option<SocketAddr>,
    members: Option<Vec<u16>>,
    lease_ms: Option<u64>,
}

/// The ring engine's settings (`engine = "ring"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// The membership service's address (with `membership = "etcd"` there is none and
    /// this is [`NO_SERVICE`]).
    pub membership: SocketAddr,
    /// The first view: bit per slot (default every configured node).
    pub members: u16,
    /// The lease the membership service grants the nodes.
    pub lease: Duration,
}

/// [`RingConfig::membership`] of a ring whose membership is in etcd: no service.
pub const NO_SERVICE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// Default of `lease_ms` in `[ring]`.
pub const DEFAULT_RING_LEASE_MS: u64 = 2000;

/// The engine and `[ring]` table of a file, validated against its `nodes`.
fn ring_part(
    engine: Option<&str>,
    ring: Option<RingFile>,
    nodes: &[NodeAddr],
    etcd: bool,
) -> Result<(Engine, Option<RingConfig>), String> {
    let engine = match engine {
        None | Some("token") => Engine::Token,
        Some("ring") => Engine::Ring,
        Some(e) => return Err(format!("engine {e:?}: expected \"token\" or \"ring\"")),
    };
    let Some(r) = ring else {
        return match engine {
            Engine::Token => Ok((engine, None)),
            Engine::Ring => Err(if etcd {
                "engine = \"ring\" needs a [ring] table (`members = [...]`: the first view)"
            } else {
                "engine = \"ring\" needs a [ring] table with `membership = \"host:port\"`"
            }
            .into()),
        };
    };
    if engine != Engine::Ring {
        return Err("a [ring] table needs engine = \"ring\"".into());
    }
    let slots = crate::ring::SLOTS;
    if nodes.len() > slots {
        return Err(format!(
            "the ring has {slots} slots; {} nodes configured",
            nodes.len()
        ));
    }
    let members = match r.members {
        None => ((1u32 << nodes.len()) - 1) as u16,
        Some(m) => {
            let mut bits = 0u16;
            for i in m {
                if usize::from(i) >= nodes.len() {
                    return Err(format!(
                        "ring member {i} is not one of the configured nodes"
                    ));
                }
                if bits & (1 << i) != 0 {
                    return Err(format!("ring member {i} is named twice in [ring] members"));
                }
                bits |= 1 << i;
            }
            if bits == 0 {
                return Err("ring members must name at least one node".into());
            }
            bits
        }
    };
    // With etcd the views and leases are etcd's: no service address, no lease_ms.
    let membership = match (etcd, r.membership) {
        (false, Some(m)) => {
            // The service would take a node's port, and that node would fail with a
            // misleading "is another hilock node with id N running?".
            if let Some(n) = nodes.iter().find(|n| n.addr == m) {
                return Err(format!(
                    "[ring] membership {m} is node {}'s address: the membership service needs \
                     an address of its own",
                    n.id
                ));
            }
            m
        }
        (false, None) => {
            return Err("[ring] needs `membership = \"host:port\"` (the membership service)".into())
        }
        (true, None) => NO_SERVICE,
        (true, Some(_)) => {
            return Err("[ring] membership is the static service's address; with membership = \"etcd\" the view is kept in etcd: remove it".into())
        }
    };
    if etcd && r.lease_ms.is_some() {
        return Err("[ring] lease_ms is the static service's lease; with membership = \"etcd\" the lease is etcd_lease_ttl_s".into());
    }
    let lease_ms = r.lease_ms.unwrap_or(DEFAULT_RING_LEASE_MS);
    if !(50..=600_000).contains(&lease_ms) {
        return Err(format!("ring lease_ms {lease_ms}: must be in 50..=600000"));
    }
    Ok((
        engine,
        Some(RingConfig {
            membership,
            members,
            lease: Duration::from_millis(lease_ms),
        }),
    ))
}

/// How the cluster's membership is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Membership {
    /// The configured nodes, for the node's whole run (the default).
    #[default]
    Static,
    /// Node leases and the member list in etcd (`hilock_runtime::membership`, feature `etcd`).
    Etcd {
        /// etcd's client endpoints.
        endpoints: Vec<String>,
        /// The node lease's TTL, whole seconds.
        ttl_s: u32,
        /// Real time the node needs to stop granting and kill its holders' commands.
        grace: Duration,
    },
}

/// A validated node configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    /// The cluster name; a peer naming another cluster is refused.
    pub cluster: String,
    /// The shared secret that authenticates peers (HMAC-SHA256 challenge-response).
    pub secret: Vec<u8>,
    /// This node's id.
    pub id: u16,
    /// Where this node listens for peers (its own entry's `addr` unless `listen` is set).
    pub listen: SocketAddr,
    /// Every node of the cluster, sorted by id (ids `0..n`).
    pub nodes: Vec<NodeAddr>,
    /// The local client socket (Unix domain socket), if any.
    pub client: Option<PathBuf>,
    /// Client connections served at once; more are refused with a one-line error.
    pub max_clients: usize,
    /// Default timeout of a lock request.
    pub request_timeout: Duration,
    /// Where the node serves its metrics in the Prometheus text format over HTTP
    /// (`GET /metrics`, [`crate::Handle::metrics`]); `None` (the default): no endpoint.
    pub metrics: Option<SocketAddr>,
    /// The engine `hilock node` runs.
    pub engine: Engine,
    /// The ring engine's settings (with `engine = "ring"`).
    pub ring: Option<RingConfig>,
    /// Static, or etcd leases and member list.
    pub membership: Membership,
    /// With etcd membership: when a member's lease ends, install a new epoch with its locks
    /// rebuilt (`docs/faults.md`, "With etcd recovery") instead of failing the requests
    /// that wait on it; and a node whose own lease is lost rejoins as a new run
    /// ([`crate::Node::rejoin`]). On by default in a configuration file with
    /// `membership = "etcd"` (the token engine); [`Config::new`] (static) leaves it off.
    pub etcd_recovery: bool,
    /// With etcd membership: how long a node whose lease is lost waits for etcd to answer
    /// before `hilock node` gives up (exit status 75; [`crate::Node::etcd_answers`]).
    /// Default [`REJOIN_TIMEOUT`].
    pub etcd_rejoin_timeout: Duration,
    /// With `etcd_recovery`: the most protocol messages from peers the node keeps that it
    /// has not given to the kernel yet — queued, or held back while it is frozen or until
    /// it has installed a later epoch (`docs/faults.md`, "With etcd recovery"). At the cap
    /// a peer's connection is closed before the next message is acknowledged, and the peer
    /// resends it after reconnecting. Default [`HELD_BACK_MAX`].
    pub etcd_held_back_max: usize,
    /// Static membership: the directory where the node keeps the cluster's generation
    /// (`generation`), so that the fences of a run of the whole cluster are above every
    /// fence of the earlier runs (`docs/faults.md`, "Fences across restarts"). With it
    /// the nodes grant nothing until every node of the cluster has told its generation.
    /// It also holds a suspended run (`suspended`): `hilock node` stopped with SIGTERM
    /// suspends instead of leaving ([`crate::Node::suspend`]), and its next
    /// start with the same configuration resumes the same run, which its peers let in
    /// (`docs/faults.md`, "Suspend and resume"; a rolling restart,
    /// `docs/operations.md`). `None`: off, every run's fences start at 1, and a restarted
    /// node is a new run that its peers refuse.
    pub state_dir: Option<PathBuf>,
    /// Token engine: append one JSON line per kernel step this node takes to this file,
    /// for `hilock trace-check` (`crate::token::trace`; `docs/verification.md`, "Trace
    /// validation"). `None` (the default): nothing is recorded.
    pub record: Option<PathBuf>,
}

/// The default of [`Config::etcd_rejoin_timeout`] (`etcd_rejoin_timeout_ms`).
pub const REJOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The default of [`Config::etcd_held_back_max`].
pub const HELD_BACK_MAX: usize = 4096;

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("cluster", &self.cluster)
            .field("secret", &"<redacted>")
            .field("id", &self.id)
            .field("listen", &self.listen)
            .field("nodes", &self.nodes)
            .field("client", &self.client)
            .field("max_clients", &self.max_clients)
            .field("request_timeout", &self.request_timeout)
            .field("metrics", &self.metrics)
            .field("engine", &self.engine)
            .field("ring", &self.ring)
            .field("membership", &self.membership)
            .field("etcd_recovery", &self.etcd_recovery)
            .field("etcd_rejoin_timeout", &self.etcd_rejoin_timeout)
            .field("etcd_held_back_max", &self.etcd_held_back_max)
            .field("state_dir", &self.state_dir)
            .field("record", &self.record)
            .finish()
    }
}

impl Config {
    /// A configuration from its parts, validated.
    pub fn new(
        cluster: impl Into<String>,
        secret: impl Into<Vec<u8>>,
        id: u16,
        nodes: Vec<NodeAddr>,
    ) -> Result<Config, String> {
        let mut nodes = nodes;
        nodes.sort_by_key(|n| n.id);
        let listen = nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.addr)
            .ok_or_else(|| format!("id {id} is not one of the configured nodes"))?;
        let c = Config {
            cluster: cluster.into(),
            secret: secret.into(),
            id,
            listen,
            nodes,
            client: None,
            max_clients: DEFAULT_MAX_CLIENTS,
            request_timeout: Duration::from_secs(30),
            metrics: None,
            engine: Engine::Token,
            ring: None,
            membership: Membership::Static,
            etcd_recovery: false,
            etcd_rejoin_timeout: REJOIN_TIMEOUT,
            etcd_held_back_max: HELD_BACK_MAX,
            state_dir: None,
            record: None,
        };
        c.validate()?;
        Ok(c)
    }

    /// Read and validate a TOML file; `id` overrides the file's `id`. The error is one line.
    pub fn from_file(path: &Path, id: Option<u16>) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        let mut c =
            Self::from_toml(&text, id).map_err(|e| format!("config {}: {e}", path.display()))?;
        // A relative state directory is the config file's neighbour.
        if let Some(d) = c.state_dir.as_mut().filter(|d| d.is_relative()) {
            if let Some(dir) = path.parent() {
                *d = dir.join(&*d);
            }
        }
        // So is a relative record file.
        if let Some(d) = c.record.as_mut().filter(|d| d.is_relative()) {
            if let Some(dir) = path.parent() {
                *d = dir.join(&*d);
            }
        }
        Ok(c)
    }

    /// Parse and validate TOML text; `id` overrides the text's `id`.
    pub fn from_toml(text: &str, id: Option<u16>) -> Result<Config, String> {
        let f: File = toml::from_str(text).map_err(|e| {
            // toml's messages span several lines (with a source excerpt): keep one.
            let msg = e.message().to_string();
            match e.span() {
                Some(s) => {
                    format!("line {}: {msg}", line_of(text, s.start))
                }
                None => msg,
            }
        })?;
        let secret = match (f.secret, f.secret_file) {
            (Some(s), None) => s.into_bytes(),
            (None, Some(p)) => {
                let s = std::fs::read_to_string(&p)
                    .map_err(|e| format!("cannot read secret_file {}: {e}", p.display()))?;
                s.trim_end_matches(['\n', '\r']).as_bytes().to_vec()
            }
            (Some(_), Some(_)) => return Err("give either secret or secret_file, not both".into()),
            (None, None) => return Err("missing secret (or secret_file)".into()),
        };
        let id = id
            .or(f.id)
            .ok_or("missing id (set `id` in the file or pass --id)")?;
        let etcd = f.membership.as_deref() == Some("etcd");
        if etcd && f.engine.as_deref() == Some("ring") && f.etcd_recovery.is_some() {
            return Err(
                "etcd_recovery is the token engine's; the ring keeps its locks on r = 2 successors"
                    .into(),
            );
        }
        let (engine, ring) = ring_part(f.engine.as_deref(), f.ring, &f.nodes, etcd)?;
        let mut c = Config::new(f.cluster, secret, id, f.nodes)?;
        (c.engine, c.ring) = (engine, ring);
        if let Some(l) = f.listen {
            c.listen = l;
        }
        // One file for the whole cluster: `{id}` in the socket path becomes the node id.
        c.client = f
            .client
            .map(|p| PathBuf::from(p.to_string_lossy().replace("{id}", &id.to_string())));
        if let Some(m) = f.max_clients {
            if m == 0 {
                return Err("max_clients must be positive".into());
            }
            c.max_clients = m;
        }
        c.metrics = f.metrics_addr;
        if let Some(ms) = f.request_timeout_ms {
            if ms == 0 {
                return Err("request_timeout_ms must be positive".into());
            }
            c.request_timeout = Duration::from_millis(ms);
        }
        c.membership = match f.membership.as_deref().unwrap_or("static") {
            "static" => {
                if f.etcd_endpoints.is_some()
                    || f.etcd_lease_ttl_s.is_some()
                    || f.etcd_grace_ms.is_some()
                    || f.etcd_recovery.is_some()
                    || f.etcd_rejoin_timeout_ms.is_some()
                    || f.etcd_held_back_max.is_some()
                {
                    return Err("etcd_* settings need membership = \"etcd\"".into());
                }
                Membership::Static
            }
            "etcd" => Membership::Etcd {
                endpoints: f
                    .etcd_endpoints
                    .ok_or("membership = \"etcd\" needs etcd_endpoints")?,
                ttl_s: f.etcd_lease_ttl_s.unwrap_or(10),
                grace: Duration::from_millis(f.etcd_grace_ms.unwrap_or(1000)),
            },
            other => {
                return Err(format!(
                    "membership {other:?}: one of \"static\" or \"etcd\""
                ))
            }
        };
        c.state_dir = f
            .state_dir
            .map(|p| PathBuf::from(p.to_string_lossy().replace("{id}", &id.to_string())));
        if c.state_dir.is_some() && c.membership != Membership::Static {
            return Err("state_dir is for static membership (etcd keeps the epochs)".into());
        }
        c.record = f
            .record
            .map(|p| PathBuf::from(p.to_string_lossy().replace("{id}", &id.to_string())));
        if c.record.is_some() && c.engine != Engine::Token {
            return Err("record is the token engine's".into());
        }
        if c.state_dir.is_some() && c.engine != Engine::Token {
            return Err("state_dir is the token engine's".into());
        }
        // Where etcd decides who is alive, a dead node's locks are rebuilt unless the file
        // says otherwise (the ring keeps its own replicas: never).
        c.etcd_recovery = f.etcd_recovery.unwrap_or(etcd && c.engine == Engine::Token);
        if let Some(ms) = f.etcd_rejoin_timeout_ms {
            if ms == 0 {
                return Err("etcd_rejoin_timeout_ms must be positive".into());
            }
            c.etcd_rejoin_timeout = Duration::from_millis(ms);
        }
        c.etcd_held_back_max = f.etcd_held_back_max.unwrap_or(HELD_BACK_MAX);
        if c.etcd_held_back_max == 0 {
            return Err("etcd_held_back_max must be at least 1".into());
        }
        c.validate()?;
        Ok(c)
    }

    /// The checks behind every constructor.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.is_empty() || self.cluster.len() > 255 {
            return Err("cluster name must be 1 to 255 bytes".into());
        }
        if self.secret.len() < MIN_SECRET_LEN {
            return Err(format!(
                "secret too short ({} bytes; at least {MIN_SECRET_LEN})",
                self.secret.len()
            ));
        }
        if self.nodes.is_empty() {
            return Err("no nodes configured".into());
        }
        if self.nodes.len() > MAX_NODES {
            return Err(format!(
                "{} nodes configured; at most {MAX_NODES}",
                self.nodes.len()
            ));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if usize::from(n.id) != i {
                return Err(format!(
                    "node ids must be 0..{} each exactly once; found {} where {i} was expected",
                    self.nodes.len(),
                    n.id
                ));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(other) = self.nodes[..i].iter().find(|o| o.addr == n.addr) {
                return Err(format!(
                    "nodes {} and {} have the same address {}",
                    other.id, n.id, n.addr
                ));
            }
        }
        if usize::from(self.id) >= self.nodes.len() {
            return Err(format!("id {} is not one of the configured nodes", self.id));
        }
        if let Membership::Etcd {
            endpoints,
            ttl_s,
            grace,
        } = &self.membership
        {
            if endpoints.is_empty() || endpoints.iter().any(|e| e.trim().is_empty()) {
                return Err("etcd_endpoints must name at least one endpoint".into());
            }
            if let Some(e) = endpoints.iter().find(|e| e.starts_with("https://")) {
                return Err(format!(
                    "etcd endpoint {e}: TLS to etcd is not supported; use http:// on a \
                     trusted network, or a local TLS proxy in front of etcd"
                ));
            }
            if *ttl_s < 2 {
                return Err("etcd_lease_ttl_s must be at least 2".into());
            }
            if grace.as_millis() >= u128::from(*ttl_s) * 1000 {
                return Err(format!(
                    "etcd_grace_ms ({} ms) must be shorter than the lease TTL ({ttl_s} s)",
                    grace.as_millis()
                ));
            }
        }
        Ok(())
    }

    /// Number of nodes in the cluster.
    pub fn n(&self) -> usize {
        self.nodes.len()
    }
}

/// The 1-based line of byte offset `pos` in `text`: one more than the newlines before it
/// (an offset at the start of a line is on that line, not the one before).
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
cluster = "c"
secret = "0123456789"
id = 1
[[nodes]]
id = 0
addr = "127.0.0.1:7100"
[[nodes]]
id = 1
addr = "127.0.0.1:7101"
"#;

    /// Two nodes on one address would each reach itself when it dials the other, and the
    /// handshake would refuse every such link ("addressed to node 1, this is node 0") for
    /// as long as the node ran: the file is refused instead, in one line.
    #[test]
    fn two_nodes_with_one_address_are_refused() {
        let twin = GOOD.replace("127.0.0.1:7101", "127.0.0.1:7100");
        assert_eq!(
            Config::from_toml(&twin, None).unwrap_err(),
            "nodes 0 and 1 have the same address 127.0.0.1:7100"
        );
    }

    #[test]
    fn record_is_off_by_default_takes_the_id_and_sits_beside_the_file() {
        assert_eq!(Config::from_toml(GOOD, None).unwrap().record, None);
        let with = GOOD.replace("id = 1\n[[", "id = 1\nrecord = \"t/node-{id}.jsonl\"\n[[");
        let c = Config::from_toml(&with, Some(0)).unwrap();
        assert_eq!(c.record, Some(PathBuf::from("t/node-0.jsonl")));
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("cluster.toml");
        std::fs::write(&file, &with).unwrap();
        let c = Config::from_file(&file, None).unwrap();
        assert_eq!(c.record, Some(d.path().join("t/node-1.jsonl")));
    }

    #[test]
    fn state_dir_takes_the_id_sits_beside_the_file_and_is_static_only() {
        let with = GOOD.replace("id = 1\n[[", "id = 1\nstate_dir = \"state-{id}\"\n[[");
        let c = Config::from_toml(&with, Some(0)).unwrap();
        assert_eq!(c.state_dir, Some(PathBuf::from("state-0")));
        assert_eq!(Config::from_toml(GOOD, None).unwrap().state_dir, None);
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("cluster.toml");
        std::fs::write(&file, &with).unwrap();
        let c = Config::from_file(&file, None).unwrap();
        assert_eq!(c.state_dir, Some(d.path().join("state-1")));
        let etcd = with.replacen(
            "id = 1\n",
            "id = 1\nmembership = \"etcd\"\netcd_endpoints = [\"127.0.0.1:2379\"]\n",
            1,
        );
        let e = Config::from_toml(&etcd, None).unwrap_err();
        assert!(e.contains("state_dir is for static membership"), "{e}");
    }

    #[test]
    fn config_parses_and_overrides_id() {
        let c = Config::from_toml(GOOD, None).unwrap();
        assert_eq!(c.id, 1);
        assert_eq!(c.listen, "127.0.0.1:7101".parse().unwrap());
        let c = Config::from_toml(GOOD, Some(0)).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7100".parse().unwrap());
        assert!(!format!("{c:?}").contains("0123456789"), "secret redacted");
        let with_socket = GOOD.replace("id = 1\n[[", "id = 1\nclient = \"/tmp/h-{id}.sock\"\n[[");
        let c = Config::from_toml(&with_socket, Some(0)).unwrap();
        assert_eq!(c.client, Some(PathBuf::from("/tmp/h-0.sock")));
        assert_eq!(c.membership, Membership::Static);
        let etcd = GOOD.replace(
            "id = 1\n[[",
            "id = 1\nmembership = \"etcd\"\netcd_endpoints = [\"127.0.0.1:2379\"]\n[[",
        );
        let c = Config::from_toml(&etcd, None).unwrap();
        assert_eq!(
            c.membership,
            Membership::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                ttl_s: 10,
                grace: Duration::from_secs(1),
            }
        );
    }

    /// Recovery is on by default where etcd decides who is alive (token engine), off in a
    /// static cluster and in `Config::new`, and the file can turn it off; a lost lease waits
    /// `etcd_rejoin_timeout_ms` for etcd (default 60 s).
    #[test]
    fn etcd_recovery_is_on_by_default_with_etcd_and_can_be_turned_off() {
        let etcd = GOOD.replace(
            "id = 1\n[[",
            "id = 1\nmembership = \"etcd\"\netcd_endpoints = [\"127.0.0.1:2379\"]\n[[",
        );
        let c = Config::from_toml(&etcd, None).unwrap();
        assert!(c.etcd_recovery);
        assert_eq!(c.etcd_rejoin_timeout, REJOIN_TIMEOUT);
        assert!(!Config::from_toml(GOOD, None).unwrap().etcd_recovery);
        let off = etcd.replacen(
            "id = 1\n",
            "id = 1\netcd_recovery = false\netcd_rejoin_timeout_ms = 1500\n",
            1,
        );
        let c = Config::from_toml(&off, None).unwrap();
        assert!(!c.etcd_recovery);
        assert_eq!(c.etcd_rejoin_timeout, Duration::from_millis(1500));
        let zero = etcd.replacen("id = 1\n", "id = 1\netcd_rejoin_timeout_ms = 0\n", 1);
        let e = Config::from_toml(&zero, None).unwrap_err();
        assert!(e.contains("etcd_rejoin_timeout_ms"), "{e}");
    }

    /// An error names the line the offending key or value is on, counted from 1: a key
    /// at the start of line 7 is line 7, as is a value in the middle of it.
    #[test]
    fn config_errors_name_the_line_of_the_key() {
        let text = "cluster = \"c\"\nsecret = \"0123456789\"\nid = 0\n\n\n\nmax_client = 3\n[[nodes]]\nid = 0\naddr = \"127.0.0.1:7100\"\n";
        let e = Config::from_toml(text, None).unwrap_err();
        assert!(e.starts_with("line 7: unknown field `max_client`"), "{e}");
        let e = Config::from_toml(&text.replace("max_client = 3", "id = \"x\""), None).unwrap_err();
        assert!(e.starts_with("line 7: "), "{e}");
        let e = Config::from_toml("bogus = 1\n", None).unwrap_err();
        assert!(e.starts_with("line 1: "), "{e}");
        assert_eq!(line_of("a\nb\n", 2), 2);
        assert_eq!(line_of("a\nb\n", 1), 1);
        assert_eq!(line_of("a\nb\n", 99), 3);
    }

    #[test]
    fn config_errors_are_one_line() {
        let cases = [
            (
                GOOD.replace("id = 1\n[[", "id = 5\n[["),
                "not one of the configured",
            ),
            (
                GOOD.replace("secret = \"0123456789\"", ""),
                "missing secret",
            ),
            (GOOD.replace("0123456789", "short"), "secret too short"),
            (GOOD.replace("id = 0", "id = 2"), "each exactly once"),
            (GOOD.replace("127.0.0.1:7100", "nowhere"), "line"),
            (format!("{GOOD}\nbogus = 1\n"), "bogus"),
            (GOOD.replace("[[nodes]]", "[[nodez]]"), "nodez"),
            // More nodes than MAX_NODES (`docs/engines/token.md`, "at most 64 nodes").
            (
                format!(
                    "cluster = \"c\"\nsecret = \"0123456789\"\nid = 0\n{}",
                    (0..=MAX_NODES)
                        .map(|i| format!("[[nodes]]\nid = {i}\naddr = \"127.0.0.1:{}\"\n", 7000 + i))
                        .collect::<String>()
                ),
                "65 nodes configured; at most 64",
            ),
            (
                GOOD.replace("id = 1\n[[", "id = 1\nmembership = \"etcd\"\n[["),
                "needs etcd_endpoints",
            ),
            (
                GOOD.replace("id = 1\n[[", "id = 1\nmembership = \"zk\"\n[["),
                "one of",
            ),
            (
                GOOD.replace(
                    "id = 1\n[[",
                    "id = 1\nmembership = \"etcd\"\netcd_endpoints = [\"https://127.0.0.1:2379\"]\n[[",
                ),
                "TLS to etcd is not supported",
            ),
            (
                GOOD.replace("id = 1\n[[", "id = 1\netcd_lease_ttl_s = 5\n[["),
                "need membership",
            ),
            (
                GOOD.replace(
                    "id = 1\n[[",
                    "id = 1\nmembership = \"etcd\"\netcd_endpoints = [\"127.0.0.1:2379\"]\netcd_lease_ttl_s = 2\netcd_grace_ms = 2000\n[[",
                ),
                "shorter than the lease TTL",
            ),
        ];
        for (text, want) in cases {
            let e = Config::from_toml(&text, None).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }
}
