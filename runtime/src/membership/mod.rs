//! Cluster membership, node leases, epochs and the recovery leader through etcd
//! (`docs/faults.md`, "With etcd membership" and "With etcd recovery"; feature `etcd`).
//!
//! Under the cluster's prefix `/hilock/<cluster>/` etcd keeps:
//!
//! - `members/<id>`: one key per live node, `{"id":…,"incarnation":…}`, bound to the node's
//!   etcd lease. The member list is the set of these keys: a node whose lease expires (or
//!   is revoked) disappears from it, and every watcher sees a delete event.
//! - `epoch`: the installed epoch, `{"epoch":e,"members":[…]}`, and `plan`: the bytes of
//!   its recovery plan. Both are written by one transaction that compares the epoch key's
//!   mod revision with the one the installer read ([`Membership::install_epoch`]), so two
//!   installers of epoch `e + 1` cannot both succeed, and an installer that read an old
//!   epoch is refused ([`Error::StaleEpoch`]).
//! - `reports/<id>`: a node's recovery reports ([`Membership::put_report`]), bound to its
//!   lease.
//! - `runs/<id>`: the last run (incarnation) of node `id` that joined, *not* bound to a
//!   lease: it outlives the run, so a new run learns that an earlier one of its id existed
//!   ([`Membership::previous_run`]; with `etcd_recovery` such a run rejoins as a new
//!   incarnation, `docs/faults.md`, "With etcd recovery"). Written in the transaction that
//!   creates the member key.
//! - `leader`: the recovery leader, bound to its lease and created only where it does not
//!   exist (create revision 0), so there is at most one, and the next one can take over
//!   as soon as its lease is gone ([`Membership::lead`]).
//!
//! **Node lease.** [`Membership::join`] grants an etcd lease with the configured TTL and
//! keeps it alive from a task. The node treats its lease as valid only for the kernel's
//! [`local_lease`](hilock_kernel::token::recovery::local_lease) after it *sent* its last
//! successful renewal (TTL shortened by the drift bound ρ and the grace to kill the
//! holders' commands); when that has passed without a renewal, or etcd answers that the
//! lease is gone, [`LeaseState::Lost`] is published on [`Membership::lease`] — once, for
//! good: the node must stop granting and kill its holders' commands, and can only come
//! back as a new incarnation. A process paused past its deadline sees it at its first
//! step after the pause, before it takes any renewal answer.
//!
//! Every etcd call runs under [`EtcdOptions::timeout`]: an unreachable, stopped or paused
//! etcd gives [`Error::Unreachable`], never a hang.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use crate::leases::{LeaseState, LostReason, Member, MemberView};

/// How a node uses etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// etcd's client endpoints, `HOST:PORT` or `http://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// The node lease's TTL in whole seconds (etcd's unit; etcd may raise a small TTL to
    /// its minimum, and the granted TTL is the one used).
    pub ttl_s: u32,
    /// Real time the node needs to stop granting and kill its holders' commands.
    pub grace: Duration,
    /// Bound on the clock rate drift ρ, parts per million.
    pub rho_ppm: u32,
    /// Every etcd call (connect, grant, renew, read, transaction) fails with
    /// [`Error::Unreachable`] after this long.
    pub timeout: Duration,
}

impl EtcdOptions {
    /// TTL 10 s, grace 1 s, ρ = 100 ppm, timeout 2 s.
    pub fn new(endpoints: Vec<String>) -> EtcdOptions {
        EtcdOptions {
            endpoints,
            ttl_s: 10,
            grace: Duration::from_secs(1),
            rho_ppm: 100,
            timeout: Duration::from_secs(2),
        }
    }

    /// The options of a configuration with `membership = "etcd"` (its endpoints, lease TTL
    /// and grace; ρ and the timeout as in [`EtcdOptions::new`]); an error for a static one.
    pub fn of_config(cfg: &crate::Config) -> Result<EtcdOptions, String> {
        match &cfg.membership {
            crate::config::Membership::Etcd {
                endpoints,
                ttl_s,
                grace,
            } => Ok(EtcdOptions {
                ttl_s: *ttl_s,
                grace: *grace,
                ..EtcdOptions::new(endpoints.clone())
            }),
            crate::config::Membership::Static => Err("not an etcd configuration".into()),
        }
    }

    /// The local lease for a TTL ([`crate::leases::local_lease`]).
    pub fn local_lease(&self, ttl_s: u64) -> Result<Duration, Error> {
        crate::leases::local_lease(Duration::from_secs(ttl_s), self.grace, self.rho_ppm)
            .map_err(|e| Error::Config(format!("etcd {e}")))
    }

    fn check(&self) -> Result<(), Error> {
        if self.endpoints.is_empty() || self.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(Error::Config("etcd endpoints must not be empty".into()));
        }
        if self.ttl_s == 0 {
            return Err(Error::Config("etcd lease TTL must be at least 1 s".into()));
        }
        if self.timeout.is_zero() {
            return Err(Error::Config("etcd timeout must not be zero".into()));
        }
        self.local_lease(u64::from(self.ttl_s)).map(|_| ())
    }
}

/// A membership error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Bad options (empty endpoints, a TTL too short for the grace and drift).
    Config(String),
    /// etcd did not answer `op` within the timeout, or could not be reached at all.
    Unreachable { op: &'static str, detail: String },
    /// This node's lease is lost (locally expired, or gone at etcd): it is no longer a
    /// member and may not act as one.
    LeaseLost,
    /// The install of epoch `tried` was refused: the installed epoch is `current`, not
    /// the one the installer read.
    StaleEpoch { tried: u32, current: u32 },
    /// Another incarnation of node `id` is still a member (its lease has not ended).
    /// `left`: the most time that lease had left when etcd was asked (etcd answers whole
    /// seconds rounded down: its answer plus 1 s; `None` if etcd did not say).
    IdInUse {
        id: u16,
        incarnation: u64,
        left: Option<Duration>,
    },
    /// etcd answered `op` with an error.
    Etcd { op: &'static str, detail: String },
    /// A key under the cluster's prefix does not hold what hilock writes there.
    Corrupt { key: String, detail: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(s) => write!(f, "membership configuration: {s}"),
            Error::Unreachable { op, detail } => write!(f, "etcd unreachable ({op}): {detail}"),
            Error::LeaseLost => write!(f, "this node's etcd lease is lost"),
            Error::StaleEpoch { tried, current } => write!(
                f,
                "stale epoch: installing epoch {tried} refused, epoch {current} is installed"
            ),
            Error::IdInUse {
                id,
                incarnation,
                left: Some(left),
            } => write!(
                f,
                "node {id} is still a member (incarnation {incarnation:#018x}): its etcd lease \
                 ends within {} s unless that run renews it; start again after that",
                left.as_secs()
            ),
            Error::IdInUse {
                id,
                incarnation,
                left: None,
            } => write!(
                f,
                "node {id} is still a member (incarnation {incarnation:#018x}): wait until its \
                 lease has ended (at most the lease TTL)"
            ),
            Error::Etcd { op, detail } => write!(f, "etcd error ({op}): {detail}"),
            Error::Corrupt { key, detail } => write!(f, "etcd key {key}: {detail}"),
        }
    }
}

impl std::error::Error for Error {}

fn classify(op: &'static str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    match e {
        E::TransportError(_) | E::IoError(_) | E::EndpointError(_) => Error::Unreachable {
            op,
            detail: innermost(&e),
        },
        // gRPC codes 1 (cancelled), 4 (deadline exceeded), 14 (unavailable): no answer.
        E::GRpcStatus(ref s) if matches!(i32::from(s.code()), 1 | 4 | 14) => Error::Unreachable {
            op,
            detail: innermost(s),
        },
        // A status that only wraps a broken connection (code "unknown", message "transport
        // error", an I/O error underneath: etcd stopped while the channel was open).
        E::GRpcStatus(ref s) if s.message() == "transport error" || io_underneath(s) => {
            Error::Unreachable {
                op,
                detail: innermost(s),
            }
        }
        _ => Error::Etcd {
            op,
            detail: e.to_string(),
        },
    }
}

/// Whether an I/O error is among `e`'s causes.
fn io_underneath(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = e.source();
    while let Some(c) = cause {
        if c.is::<std::io::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// `f` under the timeout; etcd's errors classified.
async fn timed<T>(
    timeout: Duration,
    op: &'static str,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout, f).await {
        Err(_) => Err(Error::Unreachable {
            op,
            detail: format!("no answer within {timeout:?}"),
        }),
        Ok(Err(e)) => Err(classify(op, e)),
        Ok(Ok(v)) => Ok(v),
    }
}

/// What an error says at the bottom of its chain of causes ("Connection refused (os error
/// 111)"), rather than the transport layers' own text around it, which prints them in Rust
/// syntax (`tonic::transport::Error(Transport, ConnectError(…))`).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut e = e;
    while let Some(s) = e.source() {
        e = s;
    }
    e.to_string()
}

/// An installed epoch, as read from etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochView {
    /// The epoch; 0: none installed yet.
    pub epoch: u32,
    /// Its members.
    pub members: Vec<Member>,
    /// Its plan, as the installer wrote it.
    pub plan: Vec<u8>,
    /// The epoch key's mod revision (0: none): what the next install compares.
    pub revision: i64,
}

#[derive(Serialize, Deserialize)]
struct EpochRecord {
    epoch: u32,
    members: Vec<Member>,
}

/// The recovery leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leader {
    pub member: Member,
    /// This node is the leader.
    pub mine: bool,
}

/// The keys under one cluster's prefix.
#[derive(Clone, Debug)]
struct Keys {
    members: String,
    epoch: String,
    plan: String,
    leader: String,
    reports: String,
    runs: String,
}

impl Keys {
    fn new(cluster: &str) -> Keys {
        let p = format!("/hilock/{cluster}/");
        Keys {
            members: format!("{p}members/"),
            epoch: format!("{p}epoch"),
            plan: format!("{p}plan"),
            leader: format!("{p}leader"),
            reports: format!("{p}reports/"),
            runs: format!("{p}runs/"),
        }
    }

    fn member(&self, id: u16) -> String {
        format!("{}{id:05}", self.members)
    }

    fn run(&self, id: u16) -> String {
        format!("{}{id:05}", self.runs)
    }
}

fn parse<T: for<'a> Deserialize<'a>>(key: &[u8], value: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(value).map_err(|e| Error::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        detail: e.to_string(),
    })
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("plain structs serialise")
}

fn connect_options(o: &EtcdOptions) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(o.timeout)
        .with_timeout(o.timeout)
        // HTTP/2 pings: a connection to a stopped or paused etcd is found dead.
        .with_keep_alive(Duration::from_millis(500), o.timeout)
        .with_keep_alive_while_idle(true)
}

/// How often the endpoints of a client with more than one are probed ([`Endpoints`]).
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// The longest one probe of an endpoint may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(400);

/// With more than one endpoint, the task that keeps only those that answer in the
/// client's set: etcd-client sends each call to any endpoint it was given, a stopped one
/// too, and does not try another, so with one of three etcd members down a node failed to
/// join two times in three. Every [`PROBE_EVERY`] each endpoint is asked for its status
/// on a connection of its own; one that does not answer is taken out of the set (never
/// the last one), one that answers again is put back. Dropping it stops the task.
struct Endpoints(Option<JoinHandle<()>>);

impl Drop for Endpoints {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.abort();
        }
    }
}

/// Whether `endpoint` answers a status request within [`PROBE_TIMEOUT`] (`probe` is its
/// own client, made on first use).
async fn answers(o: &EtcdOptions, endpoint: &str, probe: &mut Option<Client>) -> bool {
    if probe.is_none() {
        *probe = Client::connect([endpoint], Some(connect_options(o)))
            .await
            .ok();
    }
    let Some(c) = probe else { return false };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT.min(o.timeout), c.status()).await,
        Ok(Ok(_))
    )
}

/// Which of `o`'s endpoints answer now, asked at once (`probes[i]`: endpoint `i`'s client).
async fn probe_all(o: &EtcdOptions, probes: &mut [Option<Client>]) -> Vec<bool> {
    futures_util::future::join_all(
        o.endpoints
            .iter()
            .zip(probes.iter_mut())
            .map(|(e, p)| answers(o, e, p)),
    )
    .await
}

/// A client of `o`'s endpoints: with more than one, of those that answer now (all of them
/// if none does, so that the first call reports why), kept so by [`Endpoints`].
async fn connect(o: &EtcdOptions) -> Result<(Client, Endpoints), Error> {
    if o.endpoints.len() <= 1 {
        let c = timed(
            o.timeout,
            "connect",
            Client::connect(&o.endpoints, Some(connect_options(o))),
        )
        .await?;
        return Ok((c, Endpoints(None)));
    }
    let mut probes: Vec<Option<Client>> = vec![None; o.endpoints.len()];
    let live = probe_all(o, &mut probes).await;
    let mut set: Vec<bool> = if live.iter().any(|&l| l) {
        live
    } else {
        vec![true; o.endpoints.len()]
    };
    let first: Vec<&String> = o
        .endpoints
        .iter()
        .zip(&set)
        .filter_map(|(e, &l)| l.then_some(e))
        .collect();
    let client = timed(
        o.timeout,
        "connect",
        Client::connect(first, Some(connect_options(o))),
    )
    .await?;
    let (c, o) = (client.clone(), o.clone());
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let live = probe_all(&o, &mut probes).await;
            for (i, e) in o.endpoints.iter().enumerate() {
                let others = set.iter().filter(|&&x| x).count() > 1;
                if live[i] && !set[i] && c.add_endpoint(e).await.is_ok() {
                    tracing::info!(endpoint = %e, "etcd endpoint answers again; using it");
                    set[i] = true;
                } else if !live[i]
                    && set[i]
                    && others
                    && c.remove_endpoint(endpoint_uri(e)).await.is_ok()
                {
                    tracing::warn!(endpoint = %e, "etcd endpoint does not answer; not using it until it does");
                    set[i] = false;
                }
            }
        }
    });
    Ok((client, Endpoints(Some(task))))
}

/// The URI etcd-client keys an endpoint by (it adds `http://` to `HOST:PORT`).
fn endpoint_uri(e: &str) -> String {
    if e.contains("://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

/// One node's membership: its lease, kept alive by a task, and the member list, kept by a
/// watch. Dropping it stops both tasks (the lease then expires at etcd after its TTL);
/// [`Membership::leave`] revokes the lease at once.
pub struct Membership {
    client: Client,
    keys: Keys,
    me: Member,
    lease_id: i64,
    ttl: Duration,
    local: Duration,
    timeout: Duration,
    lease: watch::Receiver<LeaseState>,
    lease_tx: watch::Sender<LeaseState>,
    members: watch::Receiver<MemberView>,
    tasks: Vec<JoinHandle<()>>,
    previous_run: Option<u64>,
    /// Keeps the client's endpoints to those that answer.
    _endpoints: Endpoints,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field("me", &self.me)
            .field("lease_id", &self.lease_id)
            .field("ttl", &self.ttl)
            .field("local", &self.local)
            .field("lease", &*self.lease.borrow())
            .finish_non_exhaustive()
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Membership {
    /// Joins `cluster` as node `me`: grants the node lease, creates the member key only if
    /// no other incarnation of `me.id` holds it ([`Error::IdInUse`]), and starts the
    /// keep-alive and the member watch. All of it within [`EtcdOptions::timeout`]
    /// ([`Error::Unreachable`] after that; a lease granted by then expires after its TTL).
    pub async fn join(o: &EtcdOptions, cluster: &str, me: Member) -> Result<Membership, Error> {
        o.check()?;
        match tokio::time::timeout(o.timeout, Self::join_within(o, cluster, me)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Unreachable {
                op: "join",
                detail: format!("no answer within {:?}", o.timeout),
            }),
        }
    }

    async fn join_within(o: &EtcdOptions, cluster: &str, me: Member) -> Result<Membership, Error> {
        let keys = Keys::new(cluster);
        let (mut client, endpoints) = connect(o).await?;
        // The local lease counts from before the grant was sent.
        let sent = Instant::now();
        let grant = timed(
            o.timeout,
            "lease grant",
            client.lease_grant(i64::from(o.ttl_s), None),
        )
        .await?;
        let lease_id = grant.id();
        let ttl_s = u64::try_from(grant.ttl()).unwrap_or(0).max(1);
        let local = o.local_lease(ttl_s)?;
        let key = keys.member(me.id);
        let run = keys.run(me.id);
        // The run key is read before it is overwritten (the operations of a transaction
        // apply in order).
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    json(&me),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::get(run.clone(), None),
                TxnOp::put(run, json(&me), None),
            ])
            .or_else([TxnOp::get(key.clone(), None)]);
        let created = timed(o.timeout, "create member key", client.txn(txn)).await;
        let mut previous_run = None;
        let refused = match created {
            Ok(r) if r.succeeded() => {
                if let Some(TxnOpResponse::Get(g)) = r.op_responses().get(1) {
                    if let Some(kv) = g.kvs().first() {
                        // Its existence is what counts; an unreadable one is a run too.
                        let m = parse::<Member>(kv.key(), kv.value());
                        previous_run = Some(m.map_or(0, |m| m.incarnation));
                    }
                }
                None
            }
            Ok(r) => Some(match other_member(&r) {
                Some(Ok(m)) => Error::IdInUse {
                    id: me.id,
                    incarnation: m.incarnation,
                    left: match other_lease(&r) {
                        Some(l) => lease_left(&mut client, l, o.timeout).await,
                        None => None,
                    },
                },
                Some(Err(e)) => e,
                None => Error::Etcd {
                    op: "create member key",
                    detail: "refused without the existing key".into(),
                },
            }),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            let _ = timed(o.timeout, "lease revoke", client.lease_revoke(lease_id)).await;
            return Err(e);
        }
        let (lease_tx, lease) = watch::channel(LeaseState::Valid {
            until: sent + local,
        });
        let (members_tx, members) = watch::channel(MemberView::default());
        let keeper = tokio::spawn(crate::leases::keep_alive(
            Keeper {
                client: client.clone(),
                stream: None,
                lease: lease_id,
            },
            lease_id,
            local,
            o.timeout,
            sent + local,
            lease_tx.clone(),
        ));
        let watcher = tokio::spawn(watch_members(
            client.clone(),
            keys.members.clone(),
            o.timeout,
            members_tx,
        ));
        Ok(Membership {
            client,
            keys,
            me,
            lease_id,
            ttl: Duration::from_secs(ttl_s),
            local,
            timeout: o.timeout,
            lease,
            lease_tx,
            members,
            tasks: vec![keeper, watcher],
            previous_run,
            _endpoints: endpoints,
        })
    }

    /// The incarnation of the run of this node id that joined before this one, if any
    /// (the `runs/<id>` key; `None`: this is the first run of the id under this cluster's
    /// prefix).
    pub fn previous_run(&self) -> Option<u64> {
        self.previous_run
    }

    pub fn me(&self) -> Member {
        self.me
    }

    /// The etcd lease id.
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long after a renewal was sent the node holds its lease valid.
    pub fn local_lease(&self) -> Duration {
        self.local
    }

    /// The lease's state; [`LeaseState::Lost`] is published once and never changes back.
    pub fn lease(&self) -> watch::Receiver<LeaseState> {
        self.lease.clone()
    }

    /// The member list, kept up to date by a watch.
    pub fn members(&self) -> watch::Receiver<MemberView> {
        self.members.clone()
    }

    fn check_lease(&self) -> Result<(), Error> {
        match *self.lease.borrow() {
            LeaseState::Lost(_) => Err(Error::LeaseLost),
            LeaseState::Valid { until } if Instant::now() >= until => Err(Error::LeaseLost),
            LeaseState::Valid { .. } => Ok(()),
        }
    }

    /// The live members, read from etcd now.
    pub async fn list_members(&self) -> Result<BTreeMap<u16, Member>, Error> {
        read_members(&self.client, &self.keys, self.timeout).await
    }

    /// The installed epoch (epoch 0 with no members where none is), its members and plan,
    /// read in one transaction.
    pub async fn current_epoch(&self) -> Result<EpochView, Error> {
        read_epoch(&self.client, &self.keys, self.timeout).await
    }

    /// Installs epoch `base.epoch + 1` with `members` and `plan`, in one transaction that
    /// succeeds only if the installed epoch is still `base` (the epoch key's mod revision
    /// is `base.revision`) and this node's member key still exists (its lease is alive at
    /// etcd). Refused: [`Error::StaleEpoch`] (another install came first) or
    /// [`Error::LeaseLost`].
    pub async fn install_epoch(
        &self,
        base: &EpochView,
        members: &[Member],
        plan: &[u8],
    ) -> Result<EpochView, Error> {
        self.check_lease()?;
        let tried = base.epoch.checked_add(1).ok_or(Error::StaleEpoch {
            tried: u32::MAX,
            current: base.epoch,
        })?;
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        let record = EpochRecord {
            epoch: tried,
            members: members.clone(),
        };
        let me = self.keys.member(self.me.id);
        let txn = Txn::new()
            .when([
                Compare::mod_revision(self.keys.epoch.clone(), CompareOp::Equal, base.revision),
                Compare::lease(me.clone(), CompareOp::Equal, self.lease_id),
            ])
            .and_then([
                TxnOp::put(self.keys.epoch.clone(), json(&record), None),
                TxnOp::put(self.keys.plan.clone(), plan.to_vec(), None),
            ])
            .or_else([
                TxnOp::get(self.keys.epoch.clone(), None),
                TxnOp::get(self.keys.plan.clone(), None),
                TxnOp::get(me, None),
            ]);
        let r = timed(self.timeout, "install epoch", self.client.clone().txn(txn)).await?;
        let ops = r.op_responses();
        if r.succeeded() {
            let revision = r.header().map(|h| h.revision()).unwrap_or(0);
            return Ok(EpochView {
                epoch: tried,
                members,
                plan: plan.to_vec(),
                revision,
            });
        }
        let mine_alive = matches!(ops.get(2), Some(TxnOpResponse::Get(g))
            if g.kvs().first().is_some_and(|kv| kv.lease() == self.lease_id));
        if !mine_alive {
            return Err(Error::LeaseLost);
        }
        let current = epoch_view(&ops[..2])?;
        Err(Error::StaleEpoch {
            tried,
            current: current.epoch,
        })
    }

    /// Becomes the recovery leader if there is none (the leader key, bound to this
    /// node's lease, is created only where it does not exist); returns the leader either
    /// way. The leadership ends with the leader's lease, or with [`Membership::resign`].
    pub async fn lead(&self) -> Result<Leader, Error> {
        self.check_lease()?;
        let key = self.keys.leader.clone();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                json(&self.me),
                Some(PutOptions::new().with_lease(self.lease_id)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let r = timed(self.timeout, "lead", self.client.clone().txn(txn)).await?;
        if r.succeeded() {
            return Ok(Leader {
                member: self.me,
                mine: true,
            });
        }
        match other_member(&r) {
            Some(Ok(m)) => Ok(Leader {
                member: m,
                mine: m == self.me,
            }),
            Some(Err(e)) => Err(e),
            // Deleted between the compare and the get of the same transaction: cannot
            // happen (one revision), but say so rather than guess.
            None => Err(Error::Etcd {
                op: "lead",
                detail: "leader key neither created nor found".into(),
            }),
        }
    }

    /// Writes this node's recovery reports (`reports/<id>`, bound to its lease: they go
    /// with it).
    pub async fn put_report(&self, report: Vec<u8>) -> Result<(), Error> {
        self.check_lease()?;
        let key = format!("{}{:05}", self.keys.reports, self.me.id);
        timed(
            self.timeout,
            "put report",
            self.client.clone().put(
                key,
                report,
                Some(PutOptions::new().with_lease(self.lease_id)),
            ),
        )
        .await?;
        Ok(())
    }

    /// Deletes this node's recovery reports (`reports/<id>`): once the epoch they were
    /// written for is installed, nobody reads them again, and every idle look of every
    /// member reads the whole prefix.
    pub async fn delete_report(&self) -> Result<(), Error> {
        let key = format!("{}{:05}", self.keys.reports, self.me.id);
        timed(
            self.timeout,
            "delete report",
            self.client.clone().delete(key, None),
        )
        .await?;
        Ok(())
    }

    /// Every live node's recovery reports, by node id.
    pub async fn reports(&self) -> Result<BTreeMap<u16, Vec<u8>>, Error> {
        let prefix = self.keys.reports.clone();
        let r = timed(
            self.timeout,
            "read reports",
            self.client
                .clone()
                .get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let mut out = BTreeMap::new();
        for kv in r.kvs() {
            let id = std::str::from_utf8(&kv.key()[prefix.len()..])
                .ok()
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| Error::Corrupt {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    detail: "not a report key".into(),
                })?;
            out.insert(id, kv.value().to_vec());
        }
        Ok(out)
    }

    /// Gives up the leadership if this node holds it (the key is deleted only if it is
    /// bound to this node's lease).
    pub async fn resign(&self) -> Result<(), Error> {
        let key = self.keys.leader.clone();
        let txn = Txn::new()
            .when([Compare::lease(key.clone(), CompareOp::Equal, self.lease_id)])
            .and_then([TxnOp::delete(key, None)]);
        timed(self.timeout, "resign", self.client.clone().txn(txn)).await?;
        Ok(())
    }

    /// Leaves the cluster: stops the keep-alive and revokes the lease (the member key, and
    /// the leader key if this node held it, are deleted at once). The lease state becomes
    /// [`LostReason::Left`].
    pub async fn leave(mut self) -> Result<(), Error> {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.lease_tx
            .send_replace(LeaseState::Lost(LostReason::Left));
        timed(
            self.timeout,
            "lease revoke",
            self.client.clone().lease_revoke(self.lease_id),
        )
        .await?;
        Ok(())
    }
}

/// The member in the `or_else` get of a refused create.
fn other_member(r: &etcd_client::TxnResponse) -> Option<Result<Member, Error>> {
    r.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| parse(kv.key(), kv.value())),
        _ => None,
    })
}

/// The lease the key in the `or_else` get of a refused create is bound to.
fn other_lease(r: &etcd_client::TxnResponse) -> Option<i64> {
    r.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.lease()),
        _ => None,
    })
}

/// The most time lease `lease` has left at etcd: etcd's answer, whole seconds rounded
/// down, plus 1 s (`None`: etcd did not say, or it has none).
async fn lease_left(client: &mut Client, lease: i64, timeout: Duration) -> Option<Duration> {
    let r = timed(
        timeout,
        "lease time to live",
        client.lease_time_to_live(lease, None),
    )
    .await
    .ok()?;
    u64::try_from(r.ttl())
        .ok()
        .map(|s| Duration::from_secs(s.saturating_add(1)))
}

/// Revokes lease `lease` (a lost lease of an earlier run of this process: its member key
/// goes at once, so a new run can join without waiting for the TTL). `Ok` also where etcd
/// no longer has the lease; [`Error::Unreachable`] while etcd does not answer — so `Ok`
/// says that etcd answers.
pub async fn revoke_lease(o: &EtcdOptions, lease: i64) -> Result<(), Error> {
    let (mut client, _endpoints) = connect(o).await?;
    match tokio::time::timeout(o.timeout, client.lease_revoke(lease)).await {
        Err(_) => Err(Error::Unreachable {
            op: "lease revoke",
            detail: format!("no answer within {:?}", o.timeout),
        }),
        Ok(Ok(_)) => Ok(()),
        // gRPC code 5, not found: the lease has already ended at etcd.
        Ok(Err(etcd_client::Error::GRpcStatus(s))) if i32::from(s.code()) == 5 => Ok(()),
        Ok(Err(e)) => Err(classify("lease revoke", e)),
    }
}

/// The epoch from the gets of the epoch key and the plan key.
fn epoch_view(ops: &[TxnOpResponse]) -> Result<EpochView, Error> {
    let get = |i: usize| match ops.get(i) {
        Some(TxnOpResponse::Get(g)) => Ok(g.kvs().first().cloned()),
        _ => Err(Error::Etcd {
            op: "read epoch",
            detail: "transaction answered without the gets".into(),
        }),
    };
    let Some(kv) = get(0)? else {
        return Ok(EpochView {
            epoch: 0,
            members: Vec::new(),
            plan: Vec::new(),
            revision: 0,
        });
    };
    let rec: EpochRecord = parse(kv.key(), kv.value())?;
    Ok(EpochView {
        epoch: rec.epoch,
        members: rec.members,
        plan: get(1)?.map(|p| p.value().to_vec()).unwrap_or_default(),
        revision: kv.mod_revision(),
    })
}

/// One renewal: a keep-alive request and its answer (the TTL; 0: the lease is gone).
async fn renew(
    client: &mut Client,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    lease: i64,
) -> Result<i64, etcd_client::Error> {
    let Some(s) = stream else {
        // A new stream sends the first request and reads its answer itself: it fails
        // with "lease not found" where the TTL is 0.
        return match client.lease_keep_alive(lease).await {
            Ok(s) => {
                *stream = Some(s);
                Ok(1)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(e)) if e == "lease not found" => Ok(0),
            Err(e) => Err(e),
        };
    };
    s.0.keep_alive().await?;
    match s.1.message().await? {
        Some(r) => Ok(r.ttl()),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "keep-alive stream closed".into(),
        )),
    }
}

/// The keep-alive stream of a lease ([`crate::leases::keep_alive`]); a renewal that failed
/// or timed out (its future dropped) leaves no stream, and the next one opens a new one.
struct Keeper {
    client: Client,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    lease: i64,
}

impl crate::leases::Renew for Keeper {
    async fn renew(&mut self) -> Result<i64, String> {
        let mut stream = self.stream.take();
        let ttl = renew(&mut self.client, &mut stream, self.lease)
            .await
            .map_err(|e| e.to_string())?;
        self.stream = stream;
        Ok(ttl)
    }
}

/// Reads the member list and follows it with a watch; after an error, reads it again.
async fn watch_members(
    client: Client,
    prefix: String,
    timeout: Duration,
    tx: watch::Sender<MemberView>,
) {
    let backoff = Duration::from_millis(200);
    loop {
        if let Err(e) = follow_members(client.clone(), &prefix, timeout, &tx).await {
            tracing::debug!("etcd member watch: {e}");
        }
        tx.send_modify(|v| v.connected = false);
        tokio::time::sleep(backoff).await;
    }
}

async fn follow_members(
    mut client: Client,
    prefix: &str,
    timeout: Duration,
    tx: &watch::Sender<MemberView>,
) -> Result<(), Error> {
    let r = timed(
        timeout,
        "list members",
        client.get(prefix, Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut view = MemberView {
        members: BTreeMap::new(),
        revision: r.header().map(|h| h.revision()).unwrap_or(0),
        connected: true,
        // What the watch saw before it was cut off stays seen.
        seen: tx.borrow().seen.clone(),
    };
    for kv in r.kvs() {
        let m: Member = parse(kv.key(), kv.value())?;
        view.members.insert(m.id, m);
        view.seen.entry(m.id).or_insert(m);
    }
    tx.send_replace(view.clone());
    let mut stream = timed(
        timeout,
        "watch members",
        client.watch(
            prefix,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(view.revision + 1),
            ),
        ),
    )
    .await?;
    loop {
        let Some(resp) = stream
            .message()
            .await
            .map_err(|e| classify("watch members", e))?
        else {
            return Err(Error::Unreachable {
                op: "watch members",
                detail: "watch stream closed".into(),
            });
        };
        if resp.canceled() {
            return Err(Error::Etcd {
                op: "watch members",
                detail: format!("watch canceled: {}", resp.cancel_reason()),
            });
        }
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            match ev.event_type() {
                EventType::Put => {
                    let m: Member = parse(kv.key(), kv.value())?;
                    view.members.insert(m.id, m);
                    view.seen.entry(m.id).or_insert(m);
                }
                EventType::Delete => {
                    let id = std::str::from_utf8(&kv.key()[prefix.len()..])
                        .ok()
                        .and_then(|s| s.parse::<u16>().ok())
                        .ok_or_else(|| Error::Corrupt {
                            key: String::from_utf8_lossy(kv.key()).into_owned(),
                            detail: "not a member key".into(),
                        })?;
                    view.members.remove(&id);
                }
            }
            view.revision = view.revision.max(kv.mod_revision());
        }
        if let Some(h) = resp.header() {
            view.revision = view.revision.max(h.revision());
        }
        tx.send_replace(view.clone());
    }
}

/// The installed epoch and plan, read in one transaction ([`Membership::current_epoch`],
/// [`Observer::current_epoch`]).
async fn read_epoch(client: &Client, keys: &Keys, timeout: Duration) -> Result<EpochView, Error> {
    let txn = Txn::new().and_then([
        TxnOp::get(keys.epoch.clone(), None),
        TxnOp::get(keys.plan.clone(), None),
    ]);
    let r = timed(timeout, "read epoch", client.clone().txn(txn)).await?;
    epoch_view(&r.op_responses())
}

/// The live members' keys ([`Membership::list_members`], [`Observer::list_members`]).
async fn read_members(
    client: &Client,
    keys: &Keys,
    timeout: Duration,
) -> Result<BTreeMap<u16, Member>, Error> {
    let r = timed(
        timeout,
        "list members",
        client
            .clone()
            .get(keys.members.clone(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut out = BTreeMap::new();
    for kv in r.kvs() {
        let m: Member = parse(kv.key(), kv.value())?;
        out.insert(m.id, m);
    }
    Ok(out)
}

/// A reader of a cluster's keys that is not a member (no lease, no member key): the ring
/// engine's clients and `hilock status` read the installed view and the member list with
/// it (`crate::ring`, etcd mode).
#[derive(Clone)]
pub struct Observer {
    client: Client,
    keys: Keys,
    timeout: Duration,
    _endpoints: std::sync::Arc<Endpoints>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("prefix", &self.keys.epoch)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// Connects to etcd for `cluster`'s keys, within [`EtcdOptions::timeout`].
    pub async fn connect(o: &EtcdOptions, cluster: &str) -> Result<Observer, Error> {
        if o.endpoints.is_empty() || o.timeout.is_zero() {
            return Err(Error::Config(
                "etcd endpoints must not be empty, the timeout not zero".into(),
            ));
        }
        let (client, endpoints) = connect(o).await?;
        Ok(Observer {
            client,
            keys: Keys::new(cluster),
            timeout: o.timeout,
            _endpoints: std::sync::Arc::new(endpoints),
        })
    }

    /// The installed epoch, as [`Membership::current_epoch`] reads it.
    pub async fn current_epoch(&self) -> Result<EpochView, Error> {
        read_epoch(&self.client, &self.keys, self.timeout).await
    }

    /// The live members, as [`Membership::list_members`] reads them.
    pub async fn list_members(&self) -> Result<BTreeMap<u16, Member>, Error> {
        read_members(&self.client, &self.keys, self.timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::io_underneath;

    /// etcd not running: the error names the cause in words, not the transport layers in
    /// Rust syntax (an operator saw `tonic::transport::Error(Transport, ConnectError(…`).
    #[tokio::test]
    async fn an_unreachable_etcd_is_reported_in_words() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let o = super::EtcdOptions::new(vec![addr.to_string()]);
        // The client connects lazily: the first call meets the closed port.
        let e = match super::connect(&o).await {
            Err(e) => e.to_string(),
            Ok((mut c, _)) => super::timed(o.timeout, "status", c.status())
                .await
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
        };
        assert!(e.starts_with("etcd unreachable ("), "{e}");
        assert!(
            !e.contains("tonic") && !e.contains('{') && !e.contains("Os"),
            "{e}"
        );
    }

    /// An error that wraps another, as tonic's status wraps a transport error that wraps
    /// hyper's, which wraps the I/O error of a broken pipe.
    #[derive(Debug)]
    struct Wraps(Option<Box<dyn std::error::Error + Send + Sync + 'static>>);
    impl std::fmt::Display for Wraps {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wraps")
        }
    }
    impl std::error::Error for Wraps {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.0
                .as_deref()
                .map(|e| e as &(dyn std::error::Error + 'static))
        }
    }

    #[test]
    fn a_broken_connection_two_causes_down_is_an_io_error_underneath() {
        let pipe = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        let chain = Wraps(Some(Box::new(Wraps(Some(Box::new(pipe))))));
        assert!(io_underneath(&chain));
        assert!(!io_underneath(&Wraps(Some(Box::new(Wraps(None))))));
        assert!(!io_underneath(&Wraps(None)));
    }
}
