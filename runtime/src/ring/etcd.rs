//! The ring with `membership = "etcd"` (feature `etcd`; `docs/faults.md`, "Ring engine",
//! "etcd mode"): the membership service's job done through etcd, with the token engine's
//! etcd layer ([`crate::membership`]: leases, the member list, the compare-and-swap epoch
//! install, the leader key) — no second etcd client layer.
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
//! - A node whose lease is lost, or that is removed from the view, ends; it comes back
//!   only as a new process, which joins.
//! - **Joins and leaves** ([`start_node_leavable`], [`Leave`]): a node outside the view
//!   installs the view with itself, a leaving node the view without itself, each by the
//!   same compare-and-swap and only from a view every live member reported settled in;
//!   the kernel hands the moved arcs over. A leaving node ends once every member of the
//!   new view reported settled in it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hilock_kernel::ring::{ChordMsg, NodeId, View};
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
            if v.has(NodeId(id)) && m.previous_run().is_some() {
                // An earlier run of this slot is a member of the view and its member key
                // is gone (this run could create it): that run has stopped answering, its
                // entries are on its replicas only. This run must not serve its range
                // with an empty table: its slot leaves the view first, then it joins.
                return restart(m, cluster, id, e, v).await;
            }
            if !v.has(NodeId(id)) {
                return before_joining(m, cluster, id, e, v).await;
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

/// A restarted node whose slot is still in the view (its earlier run's lease expired, the
/// leader has not removed it yet): removes its slot from the view — the leader's removal
/// of an expired member, under the same rule (every other live member settled in the
/// view), done by the slot's new run, which knows the old one is gone — and returns the
/// first view without it; the node then joins like a new one.
async fn restart(
    m: &Membership,
    cluster: &str,
    id: u16,
    mut e: EpochView,
    mut v: View,
) -> Result<(EpochView, View), String> {
    tracing::info!(
        "ring node {id}: an earlier run of this slot is in the view: removing it before joining"
    );
    let t0 = Instant::now();
    while v.has(NodeId(id)) {
        // One read of the members and reports serves both questions below.
        let heard = Heard::read(m).await.map_err(|x| format!("etcd: {x}"))?;
        if heard.serving(v, id) == 0 {
            return start_again(m, cluster, id, e, v).await;
        }
        if t0.elapsed() > m.ttl() * 10 {
            return Err(format!(
                "slot {id}: the ring's view in etcd (epoch {} members {}) did not settle within {:?}, so the earlier run of this slot could not be removed",
                v.epoch,
                slots_of(v.members),
                m.ttl() * 10
            ));
        }
        if heard.settled(v, Some(id)) {
            match m
                .install_epoch(&e, &record(v.leave(NodeId(id)).members), VIEW_TAG)
                .await
            {
                Ok(_) => tracing::info!(
                    "ring node {id}: removed the earlier run of this slot from the view"
                ),
                Err(crate::membership::Error::StaleEpoch { .. }) => {}
                Err(x) => return Err(format!("etcd: removing the earlier run of slot {id}: {x}")),
            }
        }
        tokio::time::sleep(POLL).await;
        e = m.current_epoch().await.map_err(|e| format!("etcd: {e}"))?;
        v = view_of(cluster, &e)?.ok_or("etcd: the ring's view is gone")?;
    }
    Ok((e, v))
}

/// A new slot (not in the view) joins from a view that a live member serves. If no member
/// of the view has a member key in etcd for two TTLs (the wait [`lead`] gives a first
/// member whose node has not started yet), every member stopped and nobody could ever
/// settle the view with this slot in it: the ring starts again with this run
/// ([`start_again`]). Before, such a run joined the dead view and never settled, and the
/// view's own slots, started later, waited for it.
async fn before_joining(
    m: &Membership,
    cluster: &str,
    id: u16,
    mut e: EpochView,
    mut v: View,
) -> Result<(EpochView, View), String> {
    let t0 = Instant::now();
    loop {
        let live = m.list_members().await.map_err(|x| format!("etcd: {x}"))?;
        if v.has(NodeId(id)) || (0..SLOTS as u16).any(|i| v.has(NodeId(i)) && live.contains_key(&i))
        {
            return Ok((e, v));
        }
        if t0.elapsed() >= m.ttl() * 2 {
            return start_again(m, cluster, id, e, v).await;
        }
        tokio::time::sleep(POLL).await;
        e = m.current_epoch().await.map_err(|x| format!("etcd: {x}"))?;
        v = view_of(cluster, &e)?.ok_or("etcd: the ring's view is gone")?;
    }
}

/// The whole ring stopped: no member of `view` serves it, and this slot is new or its
/// earlier run is gone too (its member key expired), so every replica of every entry is gone with them
/// (r + 1 crashes lose the locks, `docs/faults.md`). Nobody can hand this run its arcs
/// and no live member could ever settle the view, so the ring starts again here: this run
/// installs the next epoch with itself alone (compare-and-swap: of several runs starting
/// at once one wins, the others then find their slot outside the view and join) and
/// starts with an empty table. The epoch keeps growing, and with it every fence.
async fn start_again(
    m: &Membership,
    cluster: &str,
    id: u16,
    e: EpochView,
    v: View,
) -> Result<(EpochView, View), String> {
    match m.install_epoch(&e, &record(1 << id), VIEW_TAG).await {
        Ok(installed) => {
            let fresh = view_of(cluster, &installed)?.ok_or("etcd: the ring's view is gone")?;
            tracing::warn!(
                "ring node {id}: no member of the view {} {} serves it any more (every one \
                 stopped, its entries with it): the ring starts again with this node, view {} {}",
                v.epoch,
                slots_of(v.members),
                fresh.epoch,
                slots_of(fresh.members)
            );
            Ok((installed, fresh))
        }
        Err(crate::membership::Error::StaleEpoch { .. }) => {
            // Another run started the ring again first: this one joins it.
            let e = m.current_epoch().await.map_err(|e| format!("etcd: {e}"))?;
            let v = view_of(cluster, &e)?.ok_or("etcd: the ring's view is gone")?;
            if v.has(NodeId(id)) {
                return Err(format!(
                    "slot {id}: the ring's view in etcd changed to epoch {} members {} while this \
                     run started the ring again",
                    v.epoch,
                    slots_of(v.members)
                ));
            }
            Ok((e, v))
        }
        Err(x) => Err(format!("etcd: starting the ring again at slot {id}: {x}")),
    }
}

/// What etcd says of the ring's nodes at one read: the live member keys and the reports.
struct Heard {
    live: BTreeMap<u16, Member>,
    reports: BTreeMap<u16, Vec<u8>>,
}

impl Heard {
    async fn read(m: &Membership) -> Result<Heard, crate::membership::Error> {
        Ok(Heard {
            live: m.list_members().await?,
            reports: m.reports().await?,
        })
    }

    /// Whether every live member of `view` (but `except`) reported that it installed
    /// `view` and has every arc it holds in it (the static service's `settled`).
    fn settled(&self, view: View, except: Option<u16>) -> bool {
        let want = Report {
            epoch: view.epoch,
            members: view.members,
            settled: true,
        };
        (0..SLOTS as u16)
            .filter(|i| view.has(NodeId(*i)) && self.live.contains_key(i) && Some(*i) != except)
            .all(|i| {
                self.reports
                    .get(&i)
                    .and_then(|b| serde_json::from_slice::<Report>(b).ok())
                    == Some(want)
            })
    }

    /// The members of `view` other than `id` that serve it (bit per slot): their member
    /// key is in etcd and so is their report (`reports/<slot>`, which a node writes once it
    /// runs and which goes with its lease). A new run of a slot that waits to start has a
    /// member key but no report yet.
    fn serving(&self, view: View, id: u16) -> u16 {
        (0..SLOTS as u16)
            .filter(|i| *i != id && view.has(NodeId(*i)))
            .filter(|i| self.live.contains_key(i) && self.reports.contains_key(i))
            .fold(0, |b, i| b | 1 << i)
    }
}

/// [`Heard::settled`] on a fresh read of etcd.
async fn settled(m: &Membership, view: View, except: Option<u16>) -> Result<bool, String> {
    let heard = Heard::read(m).await.map_err(|x| x.to_string())?;
    Ok(heard.settled(view, except))
}

/// Starts node `id` of the ring on `listener` with its membership in etcd (cluster
/// `cluster`, first view `initial` if etcd holds none). A slot that is not in the view
/// joins it (see [`start_node_leavable`]). Fails with one clear line when etcd is
/// unreachable, the slot is in use, or the view in etcd is not a ring view of this ring.
pub async fn start_node(
    id: u16,
    listener: TcpListener,
    peers: Arc<Vec<Option<SocketAddr>>>,
    o: &EtcdOptions,
    cluster: &str,
    initial: u16,
) -> Result<RingNode, String> {
    start_node_leavable(id, listener, peers, o, cluster, initial)
        .await
        .map(|(n, _)| n)
}

/// Asks a node started by [`start_node_leavable`] to leave the ring gracefully.
#[derive(Debug)]
pub struct Leave(watch::Sender<bool>);

impl Leave {
    /// Starts the graceful leave: once every other live member reported settled in the
    /// view, the node installs the view without itself (compare-and-swap), hands its
    /// entries over (the kernel's hand-over of the moved arcs), waits until every member
    /// of the new view reported settled in it, revokes its lease and ends. A node that is
    /// not a member yet (still joining) ends at once.
    pub fn leave(&self) {
        self.0.send_replace(true);
    }
}

/// [`start_node`], and the handle of its graceful [`Leave`].
///
/// **Joins.** A node whose slot is not in the view starts as a non-member (it serves
/// nothing) and, once every live member reported settled in the view, installs the view
/// with itself by the same compare-and-swap; the kernel hands it exactly the moved arcs.
/// A restarted node whose earlier run is still a member (its lease expired, it was not
/// removed yet) first removes its slot from the view, then joins.
pub async fn start_node_leavable(
    id: u16,
    listener: TcpListener,
    peers: Arc<Vec<Option<SocketAddr>>>,
    o: &EtcdOptions,
    cluster: &str,
    initial: u16,
) -> Result<(RingNode, Leave), String> {
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
    let (leave_tx, leave_rx) = watch::channel(false);
    let len = m.ttl();
    let task = Box::pin(bridge(
        m,
        cluster.to_string(),
        (e, view),
        ctl_tx,
        mrx,
        until_tx,
        leave_rx,
    ));
    let node = RingNode::spawn(
        id,
        addr,
        server,
        listener,
        peers,
        Control::Local { rx: ctl_rx, task },
        mtx,
        (len, until_rx),
    );
    Ok((node, Leave(leave_tx)))
}

/// The node's etcd side, beside the node (ends with it): forwards the lease's deadline,
/// follows the view, writes the node's reports, joins the view if the node is not in it,
/// leaves it when asked, and — while this node holds the leader key — removes members
/// whose key expired. Returns (the node then ends) when the lease is lost, the view no
/// longer has the node (removed, or left gracefully: then its lease is revoked), or etcd
/// holds something that is not a view.
async fn bridge(
    owned: Membership,
    cluster: String,
    (mut base, mut view): (EpochView, View),
    ctl: mpsc::UnboundedSender<Frame>,
    mut from_node: mpsc::UnboundedReceiver<Frame>,
    until: watch::Sender<Option<Instant>>,
    leave: watch::Receiver<bool>,
) {
    let me = owned.me().id;
    let mut lease = owned.lease();
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
    let (m, ctl) = (&owned, &ctl);
    // Returns whether the lease goes at once: the node left gracefully, or it ends for
    // its next run to start the ring again.
    let follow = async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut mine: Option<Report> = None;
        let mut put: Option<Report> = None;
        let mut member = view.has(NodeId(me));
        let mut seen = Seen::default();
        // Since when no member of the view served it while this node waited to join.
        let mut unserved: Option<Instant> = None;
        if !member {
            tracing::info!(
                "ring node {me}: not in the view {} {}: joining",
                view.epoch,
                slots_of(view.members)
            );
        }
        loop {
            tokio::select! {
                f = from_node.recv() => match f {
                    Some(Frame::Status { view: v, settled }) => {
                        mine = Some(Report { epoch: v.epoch, members: v.members, settled });
                    }
                    // The successor's suspicion does not remove anybody here: only the end
                    // of the member's lease in etcd does.
                    Some(_) => {}
                    None => return false,
                },
                _ = tick.tick() => {
                    let leaving = *leave.borrow();
                    // The view.
                    match m.current_epoch().await {
                        Ok(e) => match view_of(&cluster, &e) {
                            Ok(Some(v)) if v.epoch > view.epoch => {
                                tracing::info!("ring node {me}: view {} {} from etcd", v.epoch, slots_of(v.members));
                                (view, base) = (v, e);
                                let _ = ctl.send(Frame::Msg(Box::new(ChordMsg::NewView(v))));
                                if v.has(NodeId(me)) {
                                    member = true;
                                } else if member && !leaving {
                                    tracing::warn!("ring node {me}: removed from the view; the node ends");
                                    return false;
                                }
                            }
                            Ok(Some(_)) => base = e,
                            Ok(None) => {}
                            Err(err) => {
                                tracing::error!("ring node {me}: {err}; the node ends");
                                return false;
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
                    // A join or a graceful leave, one change at a time: only from a view
                    // every live member reported settled in.
                    let has = view.has(NodeId(me));
                    if leaving && !member {
                        tracing::info!("ring node {me}: asked to leave before it joined; the node ends");
                        return true;
                    }
                    if leaving && !has {
                        // Left the view: the node ends once the new members hold its
                        // arcs (its hand-over is complete).
                        if settled(m, view, None).await.unwrap_or(false) {
                            tracing::info!("ring node {me}: left gracefully, view {} {} settled", view.epoch, slots_of(view.members));
                            return true;
                        }
                        continue;
                    }
                    if leaving && has && view.members.count_ones() == 1 {
                        // The last member: nobody to hand its entries to. They end with it;
                        // the view stays in etcd, and the slot's next run starts the ring
                        // again from it (`start_again`).
                        tracing::warn!(
                            "ring node {me}: the last member of the view {} {}: its entries end with it",
                            view.epoch,
                            slots_of(view.members)
                        );
                        return true;
                    }
                    // A view no other member serves, which this node is not settled in
                    // (it waits to join it, or joined it and waits for arcs): every other
                    // member stopped, and nobody can hand this node its arcs ("settled"
                    // holds of nobody, so a join would go through). After two TTLs the
                    // node ends (exit 75) and gives its lease back at once; its next run
                    // starts the ring again (`before_joining`, `restart`).
                    let unsettled = !has
                        || mine.is_none_or(|r| {
                            !r.settled || r.epoch != view.epoch || r.members != view.members
                        });
                    // That read serves the join below too.
                    let mut heard = None;
                    if !leaving && unsettled {
                        if let Ok(h) = Heard::read(m).await {
                            if h.serving(view, me) == 0 {
                                let t = *unserved.get_or_insert_with(Instant::now);
                                if t.elapsed() >= m.ttl() * 2 {
                                    tracing::warn!(
                                        "ring node {me}: no other member of the view {} {} serves it and this node is not settled in it; the node ends, and its next run starts the ring again",
                                        view.epoch,
                                        slots_of(view.members)
                                    );
                                    return true;
                                }
                                continue;
                            }
                            unserved = None;
                            heard = Some(h);
                        }
                    } else {
                        unserved = None;
                    }
                    let next = match (has, leaving) {
                        (false, false) => Some(view.join(NodeId(me))),
                        (true, true) => Some(view.leave(NodeId(me))),
                        _ => None,
                    };
                    if let Some(next) = next {
                        let ready = match &heard {
                            Some(h) => h.settled(view, None),
                            None => settled(m, view, None).await.unwrap_or(false),
                        };
                        if ready {
                            match m.install_epoch(&base, &record(next.members), VIEW_TAG).await {
                                Ok(e) => {
                                    tracing::info!(
                                        "ring node {me}: {}: view {} {}",
                                        if leaving { "leaving" } else { "joined" },
                                        next.epoch,
                                        slots_of(next.members)
                                    );
                                    (view, base) = (next, e);
                                    let _ = ctl.send(Frame::Msg(Box::new(ChordMsg::NewView(next))));
                                    member |= next.has(NodeId(me));
                                }
                                Err(e) => tracing::debug!("ring node {me}: view change: {e}"),
                            }
                        }
                    }
                    // The leader's part.
                    if let Err(e) = lead(m, &cluster, &base, view, &mut seen).await {
                        tracing::debug!("ring node {me}: as leader: {e}");
                    }
                }
            }
        }
    };
    let left = tokio::select! {
        _ = forward => false,
        l = follow => l,
    };
    if left {
        // The member key, its reports and the leader key (if held) go at once (so a next
        // run of the slot need not wait for the lease to expire); the node
        // ends when `ctl` is dropped, after this.
        if let Err(e) = owned.leave().await {
            tracing::warn!("ring node {me}: revoking the lease after leaving: {e}");
        }
    }
}

/// The members a node's leader part saw alive (bit per slot), and since when each slot's
/// member key has been missing.
#[derive(Default)]
struct Seen {
    alive: u16,
    missing: [Option<Instant>; SLOTS],
}

/// If this node is the leader: when every live member of `view` reported it settled in
/// `view` and a member's key is gone from etcd, installs `view` without that member.
///
/// A member this process never saw alive (a first member whose node has not started yet)
/// counts as gone only once it has been missing for two TTLs: removing it at once would
/// leave its arcs with no member that has them, and the view would never settle.
async fn lead(
    m: &Membership,
    cluster: &str,
    base: &EpochView,
    view: View,
    seen: &mut Seen,
) -> Result<(), String> {
    let e = |x: crate::membership::Error| x.to_string();
    // Every node keeps track (from its member watch), so that a new leader knows whom
    // it saw alive.
    let now = Instant::now();
    let watched = m.members().borrow().clone();
    if watched.connected {
        for i in 0..SLOTS as u16 {
            if watched.members.contains_key(&i) {
                seen.alive |= 1 << i;
                seen.missing[usize::from(i)] = None;
            } else {
                seen.missing[usize::from(i)].get_or_insert(now);
            }
        }
    }
    if !m.lead().await.map_err(e)?.mine {
        return Ok(());
    }
    let live = m.list_members().await.map_err(e)?;
    let dead: Vec<u16> = (0..SLOTS as u16)
        .filter(|i| view.has(NodeId(*i)) && !live.contains_key(i))
        .filter(|i| {
            seen.alive & (1 << i) != 0
                || seen.missing[usize::from(*i)].is_some_and(|t| now >= t + m.ttl() * 2)
        })
        .collect();
    let Some(&gone) = dead.first() else {
        return Ok(());
    };
    if view.members.count_ones() <= 1 || !settled(m, view, None).await? {
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

/// `hilock node --config F` with `engine = "ring"` and `membership = "etcd"`: runs the
/// node (joining the view if its slot is not in it) until its lease is lost, it was
/// removed from the view, or — on SIGTERM or Ctrl-C — it has left the ring gracefully
/// ([`Leave`]; a second signal ends it at once).
pub fn serve_config(cfg: &crate::Config) -> Result<super::NodeEnd, String> {
    let (addrs, _) = super::slot_addrs(cfg)?;
    let o = EtcdOptions::of_config(cfg)?;
    let initial = cfg.ring.as_ref().map_or(0, |r| r.members);
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio: {e}"))?;
    let (id, me, cluster) = (cfg.id, cfg.listen, cfg.cluster.clone());
    rt.block_on(async move {
        let l = super::bind_node(id, me).await?;
        let mut signals = crate::proc::StopSignals::new()?;
        // A signal while the node starts (it may wait for the view to settle before its
        // slot's earlier run can be removed) ends it at once.
        let (node, leave) = tokio::select! {
            started = start_node_leavable(id, l, Arc::new(addrs), &o, &cluster, initial) => started?,
            _ = signals.recv() => {
                return Ok(super::NodeEnd::Stopped(format!(
                    "ring node {id}: stopped before it started serving\n"
                )));
            }
        };
        let mut asked = false;
        while !node.stopped() {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = signals.recv() => asked = true,
            }
            if asked && *leave.0.borrow() {
                return Ok(super::NodeEnd::Stopped(format!(
                    "ring node {id}: stopped during its graceful leave\n"
                )));
            }
            if asked {
                tracing::info!("ring node {id}: leaving the ring gracefully");
                leave.leave();
                asked = false;
            }
        }
        // Asked to leave (a signal): stopped; otherwise on its own (its etcd lease lost,
        // removed from the view, etcd's view unreadable).
        Ok(if *leave.0.borrow() {
            super::NodeEnd::Stopped(format!("ring node {id} left the ring and stopped\n"))
        } else {
            super::NodeEnd::Lost(format!(
                "ring node {id}: its etcd lease was lost, it was removed from the view, or no \
                 member of the view it waited to join served it (the log says which); it stopped"
            ))
        })
    })
}
