//! The ring with `membership = "etcd"` (feature `etcd`; `spec/FAULTS.md` §2.6, etcd mode):
//! the membership service's job done through etcd, with the token engine's etcd layer
//! ([`crate::membership`]: leases, the member list, the compare-and-swap epoch install,
//! the leader key) — no second etcd client layer.
//!
//! Under the cluster's prefix `/hilock/<cluster>/`:
//! - `members/<slot>`: each running node's member key, bound to its etcd lease (TTL L).
//! - `epoch` (+ `plan`): the ring's view, one record `{epoch, members}` whose `plan` is
//!   [`VIEW_TAG`]; written only by [`Membership::install_epoch`], a transaction that
//!   succeeds only if the key is still at the revision the writer read (and the writer's
//!   own lease is alive), so two writers of epoch e + 1 cannot both succeed.
//! - `reports/<slot>`: each node's installed view and whether it is settled in it (bound
//!   to its lease).
//! - `leader`: the node that may change the view (bound to its lease).
//!
//! # The rules
//! - A node serves only from the view it read from etcd (or got by a redirect of the
//!   kernel's epoch rule); it starts only if its slot is in that view.
//! - **Self-fencing.** A node answers no request once its lease's local deadline passed:
//!   the etcd layer's `local_lease` (TTL·/(1 + ρ) − grace, then ·(1 − ρ)) after it *sent*
//!   its last renewal that etcd answered, by its own clock, looked at before every step.
//!   etcd expires the lease no earlier than TTL after it *received* that renewal.
//! - **Removal only after expiry.** The leader removes a member from the view only when
//!   that member's key is gone from etcd (its lease expired, or was revoked), and only
//!   when every live member of the view reported that it installed the view and is
//!   settled in it (the static service's `settled`: one change at a time). So the new
//!   primary of a dead member's range serves it only from a view installed after the old
//!   primary stopped answering.
//! - A node whose lease is lost, or that reads a view without itself, ends; it comes back
//!   only as a new process (a new incarnation; joins through etcd are not built).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::chord::{ChordMsg, NodeId, View};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::node::Control;
use super::{ring, slots_of, Frame, RingNode, Server, R, SLOTS};
use crate::membership::{EpochView, EtcdOptions, LeaseState, Member, Membership, Observer};

/// The `plan` of a ring view: what tells the ring's view from a token-engine epoch of a
/// cluster with the same name.
pub const VIEW_TAG: &[u8] = b"hilock-ring-view/1";

/// How often a node reads the view from etcd (and its leader looks for dead members), and
/// how often a client's view follower reads it.
pub const POLL: Duration = Duration::from_millis(100);

/// The view in `e`: `None` if none was installed yet; an error naming what is wrong if the
/// key holds something that is not a ring view of this ring.
pub fn view_of(cluster: &str, e: &EpochView) -> Result<Option<View>, String> {
    if e.epoch == 0 && e.revision == 0 {
        return Ok(None);
    }
    let key = format!("/hilock/{cluster}/epoch");
    if e.plan != VIEW_TAG {
        return Err(format!(
            "etcd key {key} (epoch {}) is not a ring view (its plan is not {:?}): is a token-engine cluster named {cluster:?} using it?",
            e.epoch,
            String::from_utf8_lossy(VIEW_TAG)
        ));
    }
    let epoch = u16::try_from(e.epoch).map_err(|_| {
        format!(
            "etcd key {key}: epoch {} exceeds the ring's 16 bits",
            e.epoch
        )
    })?;
    let mut members = 0u16;
    for m in &e.members {
        if usize::from(m.id) >= SLOTS {
            return Err(format!(
                "etcd key {key} (epoch {epoch}): member {} is not a slot of the ring (0..{SLOTS})",
                m.id
            ));
        }
        members |= 1 << m.id;
    }
    let v = View { epoch, members };
    ring()
        .check_view(v)
        .map_err(|err| format!("etcd key {key} (epoch {epoch}): not a valid view: {err}"))?;
    Ok(Some(v))
}

fn record(members: u16) -> Vec<Member> {
    (0..SLOTS as u16)
        .filter(|i| members & (1 << i) != 0)
        .map(|id| Member { id, incarnation: 0 })
        .collect()
}

/// What a node writes under `reports/<slot>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Report {
    epoch: u16,
    members: u16,
    settled: bool,
}

/// The node's membership in etcd and the view's first install: joins (lease, member key),
/// reads the view and, where none is installed, installs `initial` as epoch 1 (by
/// compare-and-swap: of several nodes starting at once one installs it, the others read
/// it).
async fn join_ring(
    o: &EtcdOptions,
    cluster: &str,
    id: u16,
    initial: u16,
) -> Result<(Membership, EpochView, View), String> {
    let incarnation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let m = Membership::join(o, cluster, Member { id, incarnation })
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    match first_view(&m, cluster, id, initial).await {
        Ok((e, v)) => Ok((m, e, v)),
        Err(err) => {
            // Not a member after all: the member key goes at once.
            let _ = m.leave().await;
            Err(err)
        }
    }
}

async fn first_view(
    m: &Membership,
    cluster: &str,
    id: u16,
    initial: u16,
) -> Result<(EpochView, View), String> {
    for _ in 0..10 {
        let e = m.current_epoch().await.map_err(|e| format!("etcd: {e}"))?;
        if let Some(v) = view_of(cluster, &e)? {
            if !v.has(NodeId(id)) {
                return Err(format!(
                    "slot {id} is not in the ring's view in etcd (epoch {}, members {}): a node joins only as a member of the view (joins through etcd are not built)",
                    v.epoch,
                    slots_of(v.members)
                ));
            }
            return Ok((e, v));
        }
        match m.install_epoch(&e, &record(initial), VIEW_TAG).await {
            Ok(_) => tracing::info!(
                "ring: installed the first view {} in etcd",
                slots_of(initial)
            ),
            Err(crate::membership::Error::StaleEpoch { .. }) => {}
            Err(e) => return Err(format!("etcd: installing the first view: {e}")),
        }
    }
    Err("etcd: the ring's view kept changing while this node started".into())
}

/// Starts node `id` of the ring on `listener` with its membership in etcd (cluster
/// `cluster`, first view `initial` if etcd holds none). Fails with one clear line when
/// etcd is unreachable, the slot is in use, the view in etcd is not a ring view of this
/// ring, or the slot is not in it.
pub async fn start_node(
    id: u16,
    listener: TcpListener,
    peers: Arc<Vec<Option<SocketAddr>>>,
    o: &EtcdOptions,
    cluster: &str,
    initial: u16,
) -> Result<RingNode, String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (m, e, view) = join_ring(o, cluster, id, initial).await?;
    let server =
        Server::new(NodeId(id), ring(), R, view).map_err(|e| format!("ring server: {e}"))?;
    let until = match *m.lease().borrow() {
        LeaseState::Valid { until } => Some(until),
        LeaseState::Lost(_) => None,
    };
    let (until_tx, until_rx) = watch::channel(until);
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let (mtx, mrx) = mpsc::unbounded_channel();
    let len = m.ttl();
    let task = Box::pin(bridge(
        m,
        cluster.to_string(),
        e,
        view,
        ctl_tx,
        mrx,
        until_tx,
    ));
    Ok(RingNode::spawn(
        id,
        addr,
        server,
        listener,
        peers,
        Control::Local { rx: ctl_rx, task },
        mtx,
        (len, until_rx),
    ))
}

/// The node's etcd side, beside the node (ends with it): forwards the lease's deadline,
/// follows the view, writes the node's reports, and — while this node holds the leader
/// key — removes members whose key expired. Returns (the node then ends) when the lease is
/// lost, the view no longer has the node, or etcd holds something that is not a view.
async fn bridge(
    m: Membership,
    cluster: String,
    mut base: EpochView,
    mut view: View,
    ctl: mpsc::UnboundedSender<Frame>,
    mut from_node: mpsc::UnboundedReceiver<Frame>,
    until: watch::Sender<Option<Instant>>,
) {
    let me = m.me().id;
    let mut lease = m.lease();
    // The lease's deadline goes to the node as soon as etcd's keep-alive moves it, also
    // while the loop below waits for etcd.
    let forward = async move {
        loop {
            let r = lease.changed().await;
            let st = *lease.borrow_and_update();
            match (r, st) {
                (Ok(()), LeaseState::Valid { until: t }) => {
                    until.send_replace(Some(t));
                }
                _ => {
                    until.send_replace(None);
                    tracing::warn!("ring node {me}: etcd lease lost; the node ends");
                    return;
                }
            }
        }
    };
    let follow = async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut mine: Option<Report> = None;
        let mut put: Option<Report> = None;
        loop {
            tokio::select! {
                f = from_node.recv() => match f {
                    Some(Frame::Status { view: v, settled }) => {
                        mine = Some(Report { epoch: v.epoch, members: v.members, settled });
                    }
                    // The successor's suspicion does not remove anybody here: only the end
                    // of the member's lease in etcd does.
                    Some(_) => {}
                    None => return,
                },
                _ = tick.tick() => {
                    // The view.
                    match m.current_epoch().await {
                        Ok(e) => match view_of(&cluster, &e) {
                            Ok(Some(v)) if v.epoch > view.epoch => {
                                tracing::info!("ring node {me}: view {} {} from etcd", v.epoch, slots_of(v.members));
                                (view, base) = (v, e);
                                let _ = ctl.send(Frame::Msg(Box::new(ChordMsg::NewView(v))));
                                if !v.has(NodeId(me)) {
                                    tracing::warn!("ring node {me}: removed from the view; the node ends");
                                    return;
                                }
                            }
                            Ok(Some(_)) => base = e,
                            Ok(None) => {}
                            Err(err) => {
                                tracing::error!("ring node {me}: {err}; the node ends");
                                return;
                            }
                        },
                        Err(e) => tracing::debug!("ring node {me}: reading the view: {e}"),
                    }
                    // The report.
                    if let Some(r) = mine.filter(|r| Some(*r) != put) {
                        let b = serde_json::to_vec(&r).expect("plain struct");
                        if m.put_report(b).await.is_ok() {
                            put = Some(r);
                        }
                    }
                    // The leader's part.
                    if let Err(e) = lead(&m, &cluster, &base, view).await {
                        tracing::debug!("ring node {me}: as leader: {e}");
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = forward => {}
        _ = follow => {}
    }
}

/// If this node is the leader: when every live member of `view` reported it settled in
/// `view` and a member's key is gone from etcd, installs `view` without that member.
async fn lead(m: &Membership, cluster: &str, base: &EpochView, view: View) -> Result<(), String> {
    let e = |x: crate::membership::Error| x.to_string();
    if !m.lead().await.map_err(e)?.mine {
        return Ok(());
    }
    let live = m.list_members().await.map_err(e)?;
    let dead: Vec<u16> = (0..SLOTS as u16)
        .filter(|i| view.has(NodeId(*i)) && !live.contains_key(i))
        .collect();
    let Some(&gone) = dead.first() else {
        return Ok(());
    };
    if view.members.count_ones() <= 1 {
        return Ok(());
    }
    let reports: BTreeMap<u16, Vec<u8>> = m.reports().await.map_err(e)?;
    let want = Report {
        epoch: view.epoch,
        members: view.members,
        settled: true,
    };
    let settled = (0..SLOTS as u16)
        .filter(|i| view.has(NodeId(*i)) && live.contains_key(i))
        .all(|i| {
            reports
                .get(&i)
                .and_then(|b| serde_json::from_slice::<Report>(b).ok())
                == Some(want)
        });
    if !settled {
        return Ok(());
    }
    let next = view.leave(NodeId(gone));
    match m.install_epoch(base, &record(next.members), VIEW_TAG).await {
        Ok(_) => {
            tracing::info!(
                "ring {cluster}: member {gone}'s etcd lease expired: view {} {}",
                next.epoch,
                slots_of(next.members)
            );
            Ok(())
        }
        Err(x) => Err(x.to_string()),
    }
}

/// A view follower for clients: the view etcd holds, read every [`POLL`]; the task ends
/// when every receiver is dropped. Fails if there is no ring view in etcd yet or it is not
/// one.
pub async fn follow_view(o: &EtcdOptions, cluster: &str) -> Result<watch::Receiver<View>, String> {
    let obs = Observer::connect(o, cluster)
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    let read = |obs: Observer, cluster: String| async move {
        let e = obs
            .current_epoch()
            .await
            .map_err(|e| format!("etcd: {e}"))?;
        view_of(&cluster, &e)?.ok_or_else(|| {
            format!("etcd holds no ring view for cluster {cluster:?} yet (no node has started)")
        })
    };
    let v = read(obs.clone(), cluster.to_string()).await?;
    let (tx, rx) = watch::channel(v);
    let cluster = cluster.to_string();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        while !tx.is_closed() {
            tick.tick().await;
            if let Ok(v) = read(obs.clone(), cluster.clone()).await {
                if v.epoch > tx.borrow().epoch {
                    tx.send_replace(v);
                }
            }
        }
    });
    Ok(rx)
}

/// The view and the live members (bit per slot) etcd holds for `cluster`.
pub async fn read_view(o: &EtcdOptions, cluster: &str) -> Result<(View, u16), String> {
    let obs = Observer::connect(o, cluster)
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    let e = obs
        .current_epoch()
        .await
        .map_err(|e| format!("etcd: {e}"))?;
    let v = view_of(cluster, &e)?
        .ok_or_else(|| format!("etcd holds no ring view for cluster {cluster:?} yet"))?;
    let live = obs
        .list_members()
        .await
        .map_err(|e| format!("etcd: {e}"))?
        .keys()
        .filter(|i| usize::from(**i) < SLOTS)
        .fold(0u16, |b, i| b | 1 << i);
    Ok((v, live))
}

/// The etcd options of a configuration with `membership = "etcd"`.
pub fn options(cfg: &crate::Config) -> Result<EtcdOptions, String> {
    match &cfg.membership {
        crate::config::Membership::Etcd {
            endpoints,
            ttl_s,
            grace,
        } => {
            let mut o = EtcdOptions::new(endpoints.clone());
            o.ttl_s = *ttl_s;
            o.grace = *grace;
            Ok(o)
        }
        crate::config::Membership::Static => Err("not an etcd configuration".into()),
    }
}

/// `hilock node --config F` with `engine = "ring"` and `membership = "etcd"`: runs the
/// node until its lease is lost or it was removed from the view.
pub fn serve_config(cfg: &crate::Config) -> Result<String, String> {
    let (addrs, _) = super::slot_addrs(cfg)?;
    let o = options(cfg)?;
    let initial = cfg.ring.as_ref().map_or(0, |r| r.members);
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio: {e}"))?;
    let (id, me, cluster) = (cfg.id, cfg.listen, cfg.cluster.clone());
    rt.block_on(async move {
        let l = TcpListener::bind(me)
            .await
            .map_err(|e| format!("listen on {me}: {e}"))?;
        let node = start_node(id, l, Arc::new(addrs), &o, &cluster, initial).await?;
        while !node.stopped() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(format!("ring node {id} stopped\n"))
    })
}
