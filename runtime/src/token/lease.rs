//! The node's lease and its peers' leases (`docs/faults.md`, "With etcd membership").
//!
//! With `membership = "etcd"` ([`crate::config::Membership::Etcd`], feature `etcd`) the node
//! joins etcd before it serves ([`crate::membership::Membership::join`]: an etcd lease kept
//! alive, its member key bound to it) and follows two watches:
//!
//! - **Its own lease.** While it is valid, [`NodeLease::Valid`] says until when (the local
//!   lease of `docs/faults.md`, "The recovery mechanism", "Leases: kill before regrant",
//!   which ends at least the grace before etcd can expire the lease). The client socket
//!   hands that deadline, renewed at every renewal, to each holder (`hilock lock` kills its
//!   command when the deadline passes unrenewed, even if this node is paused). When the
//!   lease is lost (its local lease ended without a renewal, or etcd says it is gone) the
//!   node publishes [`NodeLease::Lost`] once: it stops granting at once (the core refuses
//!   every waiting and new request with an error naming the lease, and a grant that comes
//!   back after the loss is released, not handed out), and every holder of the client
//!   socket is told that its lock is lost and its command's process group is killed before
//!   the lock is released. That run is over; `hilock node` replaces it by a new run of the
//!   node in the same process as soon as etcd answers ([`Node::rejoin`](super::Node::rejoin),
//!   with `etcd_recovery`), or exits 75 (`docs/faults.md`, "An etcd stall").
//! - **The member list.** A peer that was a member and whose member key is gone (its lease
//!   ended at etcd: it crashed, was paused or cut off past its TTL, or left) is *gone* for
//!   this node's run: the requests of this node that wait on it — the lock's token or the
//!   request's path is at that peer as this node knows it (its parent for the lock) — fail
//!   with [`Error::PeerGone`](super::Error::PeerGone) naming it, and so do later requests
//!   that would be sent to it — unless `etcd_recovery` is on: then the survivors install a
//!   new epoch with its locks rebuilt and those requests are granted (`super::recover`).
//!
//! With static membership (the default) [`NodeLease::Static`]: none of this.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;

/// The node's lease, as the lock API and the client socket act on it
/// ([`Handle::lease`](super::Handle::lease)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeLease {
    /// Static membership: no lease.
    Static,
    /// The node's etcd lease is valid until `until` (this machine's clock); a holder's
    /// command must be gone within `grace` after it.
    Valid {
        /// The end of the local lease.
        until: Instant,
        /// The grace to kill holders' commands (`etcd_grace_ms`).
        grace: Duration,
        /// etcd's lease id.
        lease: i64,
    },
    /// Lost for good: the node grants nothing more (`reason` names the lease and why).
    Lost {
        /// Why, for errors.
        reason: String,
    },
}

impl NodeLease {
    /// `Err(reason)` if the node may not grant at `now`: the lease is lost, or its local
    /// lease has ended (the loss is about to be published).
    pub fn check(&self, now: Instant) -> Result<(), String> {
        match self {
            NodeLease::Static => Ok(()),
            NodeLease::Valid { until, lease, .. } if now >= *until => Err(format!(
                "this node's etcd lease {lease:#x} was not renewed in time (its local lease ended \
                 {:.1?} ago): the node grants nothing more",
                now - *until
            )),
            NodeLease::Valid { .. } => Ok(()),
            NodeLease::Lost { reason } => Err(reason.clone()),
        }
    }

    /// For a holder: the end of the lease as `CLOCK_MONOTONIC` milliseconds
    /// ([`crate::proc::instant_to_monotonic_ms`]) and the grace in milliseconds; `None`
    /// with static membership or a lost lease.
    pub fn deadline_ms(&self) -> Option<(u64, u64)> {
        match self {
            NodeLease::Valid { until, grace, .. } => Some((
                crate::proc::instant_to_monotonic_ms(*until),
                u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            )),
            _ => None,
        }
    }
}

/// The drift bound ρ the nodes on the simulated etcd assume (`EtcdOptions::new`'s, of
/// `membership`), parts per million.
#[cfg(feature = "sim")]
const RHO_PPM: u32 = 100;

/// How long after a lease's TTL etcd may take to delete its keys (its lessor looks for
/// expired leases every 0.5 s, then revokes them through raft).
#[cfg(feature = "etcd")]
const EXPIRY_SWEEP: Duration = Duration::from_secs(2);

/// Where a node with `membership = "etcd"` joins: etcd (the default), or the
/// simulation's stand-in for it ([`Node::start_sim_leased`](super::Node::start_sim_leased)).
#[derive(Default)]
pub(super) struct Join {
    #[cfg(feature = "sim")]
    pub(super) sim: Option<crate::leases::sim::Etcd>,
}

#[cfg(any(feature = "etcd", feature = "sim"))]
type LeaseWatch = tokio::sync::watch::Receiver<crate::leases::LeaseState>;
#[cfg(any(feature = "etcd", feature = "sim"))]
type MembersWatch = tokio::sync::watch::Receiver<crate::leases::MemberView>;

/// The node's membership session: the etcd membership it joined, or its lease at the
/// simulation's stand-in (nothing when static).
pub(super) struct Session {
    #[cfg(feature = "etcd")]
    etcd: Option<std::sync::Arc<crate::membership::Membership>>,
    /// `etcd_recovery`: install a new epoch when a member's lease ends.
    #[cfg(feature = "etcd")]
    recovery: bool,
    #[cfg(feature = "sim")]
    sim: Option<crate::leases::sim::Lessee>,
}

impl Session {
    /// Joins the cluster's membership as this run (`incarnation`) of the node; the first
    /// lease state. Static membership: nothing to join.
    pub(super) async fn start(
        config: &Config,
        incarnation: u64,
        join: Join,
    ) -> std::io::Result<(Session, NodeLease)> {
        #[cfg(not(feature = "etcd"))]
        let _ = incarnation;
        #[cfg(not(feature = "sim"))]
        let _ = join;
        #[cfg(feature = "sim")]
        if let Some(etcd) = join.sim {
            return Session::start_sim(config, incarnation, &etcd).await;
        }
        match &config.membership {
            crate::config::Membership::Static => Ok((Session::none(), NodeLease::Static)),
            #[cfg(feature = "etcd")]
            crate::config::Membership::Etcd { .. } => {
                use crate::membership::{EtcdOptions, Member, Membership};
                let o = EtcdOptions::of_config(config).map_err(std::io::Error::other)?;
                let me = Member {
                    id: config.id,
                    incarnation,
                };
                let mut m = Membership::join(&o, &config.cluster, me).await;
                // An earlier run of this id (killed, or a run of this process that lost its
                // lease) still holds the member key: its lease ends within `left` unless it
                // is renewed, and etcd deletes the key at its next sweep of expired leases
                // (every 0.5 s) after that. Wait that long, trying again; a run that is
                // still alive (renewing) is refused again after it.
                if let Err(crate::membership::Error::IdInUse {
                    id,
                    incarnation,
                    left: Some(left),
                }) = &m
                {
                    let deadline = Instant::now() + *left + EXPIRY_SWEEP;
                    tracing::warn!(
                        id,
                        run = format!("{incarnation:016x}"),
                        "an earlier run of this node still holds its member key; its etcd \
                         lease ends within {} s: waiting that long before joining (and up to \
                         {EXPIRY_SWEEP:?} more for etcd to delete the key)",
                        left.as_secs()
                    );
                    tokio::time::sleep(*left).await;
                    loop {
                        m = Membership::join(&o, &config.cluster, me).await;
                        match &m {
                            Err(crate::membership::Error::IdInUse { .. })
                                if Instant::now() < deadline =>
                            {
                                tokio::time::sleep(Duration::from_millis(200)).await
                            }
                            _ => break,
                        }
                    }
                }
                let m = m.map_err(|e| match e {
                    // Still in use after its lease should have ended: that run is alive.
                    crate::membership::Error::IdInUse {
                        id, incarnation, ..
                    } => std::io::Error::other(format!(
                        "cannot join the cluster through etcd: another run of node {id} \
                             (run {incarnation:016x}) is alive and renews its lease; stop it \
                             first, or start this one with another id"
                    )),
                    e => {
                        std::io::Error::other(format!("cannot join the cluster through etcd: {e}"))
                    }
                })?;
                let first = NodeLease::joined(
                    *m.lease().borrow(),
                    o.grace,
                    m.lease_id(),
                    config.id,
                    m.local_lease(),
                );
                tracing::info!(
                    lease = format!("{:#x}", m.lease_id()),
                    ttl = ?m.ttl(),
                    local = ?m.local_lease(),
                    "joined the cluster through etcd"
                );
                let mut session = Session::none();
                session.etcd = Some(std::sync::Arc::new(m));
                session.recovery = config.etcd_recovery;
                Ok((session, first))
            }
            #[cfg(not(feature = "etcd"))]
            crate::config::Membership::Etcd { .. } => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "membership = \"etcd\" needs a hilock built with `--features etcd`",
            )),
        }
    }

    /// No membership (static).
    fn none() -> Session {
        Session {
            #[cfg(feature = "etcd")]
            etcd: None,
            #[cfg(feature = "etcd")]
            recovery: false,
            #[cfg(feature = "sim")]
            sim: None,
        }
    }

    /// Joins the simulation's stand-in for etcd with the configuration's lease TTL and
    /// grace (`membership = "etcd"`; its endpoints are not used). No recovery.
    #[cfg(feature = "sim")]
    async fn start_sim(
        config: &Config,
        incarnation: u64,
        etcd: &crate::leases::sim::Etcd,
    ) -> std::io::Result<(Session, NodeLease)> {
        let crate::config::Membership::Etcd { ttl_s, grace, .. } = config.membership else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a node on the simulated etcd needs membership = \"etcd\" (its lease TTL and grace)",
            ));
        };
        if config.etcd_recovery {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "etcd_recovery is not simulated",
            ));
        }
        let ttl = Duration::from_secs(u64::from(ttl_s));
        let local =
            crate::leases::local_lease(ttl, grace, RHO_PPM).map_err(std::io::Error::other)?;
        let me = crate::leases::Member {
            id: config.id,
            incarnation,
        };
        let m = etcd
            .join(me, ttl, local)
            .await
            .map_err(|e| std::io::Error::other(format!("cannot join the simulated etcd: {e}")))?;
        let first = NodeLease::joined(
            *m.lease().borrow(),
            grace,
            m.lease_id(),
            config.id,
            m.local_lease(),
        );
        let mut session = Session::none();
        session.sim = Some(m);
        Ok((session, first))
    }

    /// Starts following the lease and the member list (nothing when static).
    pub(super) fn follow(
        &self,
        shared: &std::sync::Arc<super::Shared>,
        core: &tokio::sync::mpsc::UnboundedSender<super::core::Cmd>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) {
        #[cfg(any(feature = "etcd", feature = "sim"))]
        if let Some((lease, id, local, members)) = self.watches() {
            tasks.spawn(follow::follow_lease(
                shared.clone(),
                core.clone(),
                lease,
                id,
                local,
            ));
            #[cfg(feature = "etcd")]
            if let Some(m) = self.etcd.as_ref().filter(|_| self.recovery) {
                tasks.spawn(super::recover::etcd::run(
                    shared.clone(),
                    core.clone(),
                    m.clone(),
                    members,
                ));
                return;
            }
            tasks.spawn(follow::follow_members(
                shared.clone(),
                core.clone(),
                members,
            ));
        }
        #[cfg(not(any(feature = "etcd", feature = "sim")))]
        let _ = (shared, core, tasks);
    }

    /// What the node follows of the membership it joined (etcd's or the simulated etcd's):
    /// its lease's state, the lease id, the local lease and the member list.
    #[cfg(any(feature = "etcd", feature = "sim"))]
    fn watches(&self) -> Option<(LeaseWatch, i64, Duration, MembersWatch)> {
        #[cfg(feature = "sim")]
        if let Some(m) = &self.sim {
            return Some((m.lease(), m.lease_id(), m.local_lease(), m.members()));
        }
        #[cfg(feature = "etcd")]
        if let Some(m) = &self.etcd {
            return Some((m.lease(), m.lease_id(), m.local_lease(), m.members()));
        }
        None
    }

    /// `etcd_recovery` is on (the node installs epochs; a new run of a known node may
    /// replace its old run on the peer links, `super::net`).
    pub(super) fn recovery(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.etcd.is_some() && self.recovery;
        #[cfg(not(feature = "etcd"))]
        false
    }

    /// This run rejoins (`etcd_recovery`, and an earlier run of this node id joined the
    /// cluster through etcd before — `runs/<id>`): it starts with nothing, takes no kernel
    /// step and waits for an epoch that lets it in (`docs/faults.md`, "With etcd recovery").
    pub(super) fn rejoining(&self) -> bool {
        #[cfg(feature = "etcd")]
        return self.recovery()
            && self
                .etcd
                .as_ref()
                .is_some_and(|m| m.previous_run().is_some());
        #[cfg(not(feature = "etcd"))]
        false
    }

    /// The etcd lease id of this run (`None` when static or on the simulated etcd).
    pub(super) fn lease_id(&self) -> Option<i64> {
        #[cfg(feature = "etcd")]
        return self.etcd.as_ref().map(|m| m.lease_id());
        #[cfg(not(feature = "etcd"))]
        None
    }

    /// Leaves the membership (revokes the lease: peers see this node gone at once).
    pub(super) async fn leave(self) {
        #[cfg(feature = "sim")]
        if let Some(m) = self.sim {
            m.leave();
        }
        #[cfg(feature = "etcd")]
        if let Some(m) = self.etcd {
            // The node's tasks, which hold the other references, have stopped.
            let Ok(m) = std::sync::Arc::try_unwrap(m) else {
                tracing::warn!("the etcd membership is still in use; its lease ends after its TTL");
                return;
            };
            if let Err(e) = m.leave().await {
                tracing::warn!(error = %e, "could not revoke the etcd lease; it ends after its TTL");
            }
        }
    }
}

/// Waits until etcd answers, at most `within`, and revokes `lease` there
/// ([`crate::membership::revoke_lease`]; `Node::etcd_answers`).
pub(super) async fn etcd_answers(
    config: &Config,
    lease: i64,
    within: Duration,
) -> Result<(), String> {
    #[cfg(feature = "etcd")]
    {
        let o = crate::membership::EtcdOptions::of_config(config)?;
        let deadline = Instant::now() + within;
        let mut last = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Each try under the time left: a try sent to a paused etcd is answered as
            // soon as etcd runs again.
            let o = crate::membership::EtcdOptions {
                timeout: o.timeout.min(left),
                ..o.clone()
            };
            match crate::membership::revoke_lease(&o, lease).await {
                Ok(()) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(Duration::from_millis(100).min(left)).await;
        }
        Err(format!(
            "etcd did not answer within {within:?} (etcd_rejoin_timeout_ms): {last}"
        ))
    }
    #[cfg(not(feature = "etcd"))]
    {
        let _ = (config, lease, within);
        Err("membership through etcd needs a hilock built with `--features etcd`".into())
    }
}

#[cfg(any(feature = "etcd", feature = "sim"))]
impl NodeLease {
    /// The lease of node `id` as it joined (etcd's or the simulated etcd's): `state` of
    /// lease `lease`, with the grace for holders' commands and the local lease.
    fn joined(
        state: crate::leases::LeaseState,
        grace: Duration,
        lease: i64,
        id: u16,
        local: Duration,
    ) -> NodeLease {
        match state {
            crate::leases::LeaseState::Valid { until } => NodeLease::Valid {
                until,
                grace,
                lease,
            },
            crate::leases::LeaseState::Lost(r) => NodeLease::Lost {
                reason: lost_reason(lease, id, r, local),
            },
        }
    }
}

#[cfg(any(feature = "etcd", feature = "sim"))]
fn lost_reason(lease: i64, id: u16, why: crate::leases::LostReason, local: Duration) -> String {
    use crate::leases::LostReason;
    let why = match why {
        LostReason::NotRenewed => format!(
            "not renewed within its local lease of {local:.1?}: etcd unreachable, or this process \
             was paused"
        ),
        LostReason::Expired => "etcd says it has expired or was revoked".into(),
        LostReason::Left => "the node left the cluster".into(),
    };
    format!(
        "the etcd lease {lease:#x} of node {id} is lost ({why}); this run of the node grants \
         nothing more (a new run must join)"
    )
}

/// Following the lease and the member list, from etcd or the simulated etcd.
#[cfg(any(feature = "etcd", feature = "sim"))]
mod follow {
    use std::collections::BTreeMap;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::{mpsc, watch};
    use tracing::warn;

    use super::{lost_reason, NodeLease};
    use crate::leases::{LeaseState, MemberView};
    use crate::token::core::Cmd;
    use crate::token::Shared;

    /// Publishes the lease's state; on loss, fences the core (every waiting and new
    /// request refused with the reason) — the client socket's holders follow
    /// [`Shared::lease`](crate::token::Shared) themselves.
    pub(super) async fn follow_lease(
        shared: Arc<Shared>,
        core: mpsc::UnboundedSender<Cmd>,
        mut rx: watch::Receiver<LeaseState>,
        lease: i64,
        local: Duration,
    ) {
        let grace = match &*shared.lease.borrow() {
            NodeLease::Valid { grace, .. } => *grace,
            _ => Duration::ZERO,
        };
        let mut first = true;
        loop {
            let state = *rx.borrow_and_update();
            match state {
                LeaseState::Valid { until } => {
                    if !std::mem::take(&mut first) {
                        shared.counters.lease_renewals.fetch_add(1, Relaxed);
                    }
                    shared.lease.send_modify(|l| {
                        if !matches!(l, NodeLease::Lost { .. }) {
                            *l = NodeLease::Valid {
                                until,
                                grace,
                                lease,
                            };
                        }
                    });
                }
                LeaseState::Lost(why) => {
                    let reason = lost_reason(lease, shared.id, why, local);
                    shared.counters.lease_losses.fetch_add(1, Relaxed);
                    warn!(%reason, "lease lost: stopping to grant; holders' commands are killed");
                    shared.lease.send_replace(NodeLease::Lost {
                        reason: reason.clone(),
                    });
                    let _ = core.send(Cmd::Fenced { reason });
                    return;
                }
            }
            if rx.changed().await.is_err() {
                // The membership is gone: the node is stopping.
                return;
            }
        }
    }

    /// Marks a peer gone when its member key disappears (or another run of it took the key
    /// over) and fails the requests that wait on it.
    pub(super) async fn follow_members(
        shared: Arc<Shared>,
        core: mpsc::UnboundedSender<Cmd>,
        mut rx: watch::Receiver<MemberView>,
    ) {
        let mut seen: BTreeMap<u16, u64> = BTreeMap::new();
        loop {
            let view = rx.borrow_and_update().clone();
            if view.connected {
                let mut ended = Vec::new();
                for (&id, &incarnation) in &seen {
                    match view.members.get(&id) {
                        Some(m) if m.incarnation == incarnation => {}
                        Some(_) => {
                            ended.push((id, "its run was replaced by a new one".to_string()))
                        }
                        None => ended.push((id, "its etcd lease ended".to_string())),
                    }
                }
                for (id, why) in ended {
                    seen.remove(&id);
                    let reason = format!("{why} (etcd revision {})", view.revision);
                    let mut first = false;
                    shared.gone.send_if_modified(|g| {
                        first = g.insert(id, reason.clone()).is_none();
                        first
                    });
                    if first {
                        shared.counters.peers_gone.fetch_add(1, Relaxed);
                        warn!(peer = id, %reason, "peer left the cluster; failing the requests that wait on it");
                        let _ = core.send(Cmd::PeerRestarted { peer: id });
                    }
                }
                for (&id, m) in &view.members {
                    let peer = usize::from(id) < shared.n && id != shared.id;
                    let known_gone = shared.gone.borrow().contains_key(&id);
                    if peer && !known_gone {
                        seen.entry(id).or_insert(m.incarnation);
                    }
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}
