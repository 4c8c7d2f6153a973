//! An in-process stand-in for etcd's leases and member keys, for nodes started with
//! [`Node::start_sim_leased`](crate::Node::start_sim_leased) inside a turmoil simulation
//! (feature `sim`).
//!
//! One [`Etcd`] is shared by the simulated nodes of a simulation. It keeps what the node's
//! lease path uses of etcd: a lease per joined node with its TTL, renewed by the node's
//! keep-alive (`leases::keep_alive`, the loop the etcd membership runs), and the node's
//! member key bound to it, which is deleted when the lease expires or is revoked; every
//! node follows the member list through a [`MemberView`] of its own. Leases expire on the
//! simulation's clock ([`Etcd::run`], the lessor, runs as a task of the simulation). A fault
//! can cut a node from it ([`Etcd::cut`]): the node's renewals wait unanswered (until its
//! keep-alive gives up on them) and its member view is disconnected and falls behind, as
//! with an etcd the node cannot reach; [`Etcd::heal`] ends that. Every lease that ended is
//! kept with when and how ([`Etcd::ended`]), for the simulation's checks.
//!
//! Not kept: epochs, plans, reports, the recovery leader and the `runs/` keys
//! (`etcd_recovery` is not simulated).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{LeaseState, LostReason, Member, MemberView};

/// How long a node's call to the stand-in waits for an answer (as
/// `membership::EtcdOptions::timeout` does by default).
const TIMEOUT: Duration = Duration::from_secs(2);

/// The simulation's clock: the time since the simulation started (`Err` outside one).
fn now() -> Result<Duration, String> {
    turmoil::sim_elapsed().ok_or_else(|| "the simulated etcd runs inside a simulation only".into())
}

/// How a lease ended at the stand-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its TTL passed without a renewal; its member key was deleted.
    Expired,
    /// Its node revoked it (it left).
    Revoked,
}

/// A lease that ended at the stand-in ([`Etcd::ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseEnd {
    /// The node that held it.
    pub node: u16,
    /// The lease id.
    pub lease: i64,
    /// When it ended, in simulated time since the simulation started.
    pub at: Duration,
    /// How.
    pub how: Ended,
}

#[derive(Debug)]
struct Lease {
    node: u16,
    ttl: Duration,
    /// When it expires, in simulated time.
    expires: Duration,
}

#[derive(Debug, Default)]
struct State {
    next_lease: i64,
    revision: i64,
    leases: BTreeMap<i64, Lease>,
    /// The member keys: each member with the lease it is bound to.
    members: BTreeMap<u16, (Member, i64)>,
    /// Every node's member view.
    views: BTreeMap<u16, watch::Sender<MemberView>>,
    /// Nodes cut from the stand-in.
    cut: BTreeSet<u16>,
    ended: Vec<LeaseEnd>,
}

impl State {
    /// Brings node `id`'s member view up to date, unless it is cut.
    fn publish_to(&self, id: u16) {
        let Some(view) = self.views.get(&id).filter(|_| !self.cut.contains(&id)) else {
            return;
        };
        view.send_modify(|v| {
            v.members = self.members.iter().map(|(&id, &(m, _))| (id, m)).collect();
            for (&id, &m) in &v.members {
                v.seen.entry(id).or_insert(m);
            }
            v.revision = self.revision;
            v.connected = true;
        });
    }

    /// The member list changed: a new revision, published to every node that is not cut.
    fn publish(&mut self) {
        self.revision += 1;
        for &id in self.views.keys() {
            self.publish_to(id);
        }
    }

    /// Ends lease `lease` (deleting the member key bound to it).
    fn end(&mut self, lease: i64, at: Duration, how: Ended) {
        let Some(l) = self.leases.remove(&lease) else {
            return;
        };
        self.members.retain(|_, &mut (_, bound)| bound != lease);
        self.ended.push(LeaseEnd {
            node: l.node,
            lease,
            at,
            how,
        });
        self.publish();
    }
}

/// The stand-in, shared by the nodes of one simulation (cloning shares it).
#[derive(Clone, Debug, Default)]
pub struct Etcd {
    state: Arc<Mutex<State>>,
}

impl Etcd {
    /// An empty stand-in: no lease, no member.
    pub fn new() -> Etcd {
        Etcd::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (a failed test) leaves the state as it was.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lessor: expires every lease whose TTL has passed without a renewal, deleting
    /// its member key, on the simulation's clock. Runs until the simulation ends; `Err`
    /// outside a simulation.
    pub async fn run(self) -> Result<(), String> {
        loop {
            let t = now()?;
            let next = {
                let mut s = self.state();
                let due: Vec<i64> = s
                    .leases
                    .iter()
                    .filter(|(_, l)| l.expires <= t)
                    .map(|(&id, _)| id)
                    .collect();
                for lease in due {
                    s.end(lease, t, Ended::Expired);
                }
                s.leases.values().map(|l| l.expires).min()
            };
            // A renewal only moves an expiry later, and a new lease expires after every
            // lease granted before it: the earliest expiry is the next thing to do.
            let wait = next.map_or(Duration::from_millis(10), |e| e.saturating_sub(t));
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }

    /// Cuts node `id` from the stand-in: its renewals wait unanswered and its member view
    /// is disconnected until [`Etcd::heal`].
    pub fn cut(&self, id: u16) {
        let mut s = self.state();
        s.cut.insert(id);
        if let Some(v) = s.views.get(&id) {
            v.send_modify(|v| v.connected = false);
        }
    }

    /// Ends a cut: the node's waiting renewal is answered, its view catches up.
    pub fn heal(&self, id: u16) {
        let mut s = self.state();
        s.cut.remove(&id);
        s.publish_to(id);
    }

    /// Every lease that has ended so far, in the order they ended.
    pub fn ended(&self) -> Vec<LeaseEnd> {
        self.state().ended.clone()
    }

    /// Joins as `me`: grants a lease of `ttl`, creates the member key bound to it (refused
    /// while another lease holds `me.id`'s key), and starts the keep-alive, which holds the
    /// lease valid for `local` after each renewal it sent. A node cut from the stand-in
    /// waits for the heal, at most the timeout of a call to etcd.
    pub(crate) async fn join(
        &self,
        me: Member,
        ttl: Duration,
        local: Duration,
    ) -> Result<Lessee, String> {
        // The local lease counts from before the grant was sent.
        let sent = Instant::now();
        while self.state().cut.contains(&me.id) {
            if sent.elapsed() >= TIMEOUT {
                return Err(format!(
                    "node {} is cut from the simulated etcd: no answer within {TIMEOUT:?}",
                    me.id
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = now()?;
        let mut s = self.state();
        if let Some((m, _)) = s.members.get(&me.id) {
            return Err(format!(
                "node {} is still a member (incarnation {:#018x})",
                me.id, m.incarnation
            ));
        }
        s.next_lease += 1;
        let lease = s.next_lease;
        s.leases.insert(
            lease,
            Lease {
                node: me.id,
                ttl,
                expires: t + ttl,
            },
        );
        s.members.insert(me.id, (me, lease));
        let (view_tx, members) = watch::channel(MemberView::default());
        s.views.insert(me.id, view_tx);
        s.publish();
        drop(s);
        let (lease_tx, lease_rx) = watch::channel(LeaseState::Valid {
            until: sent + local,
        });
        let keeper = tokio::spawn(super::keep_alive(
            Renewer {
                etcd: self.clone(),
                node: me.id,
                lease,
            },
            lease,
            local,
            TIMEOUT,
            sent + local,
            lease_tx.clone(),
        ));
        Ok(Lessee {
            etcd: self.clone(),
            node: me.id,
            lease,
            local,
            lease_rx,
            lease_tx,
            members,
            keeper,
        })
    }
}

/// A node's renewals at the stand-in.
struct Renewer {
    etcd: Etcd,
    node: u16,
    lease: i64,
}

impl super::Renew for Renewer {
    async fn renew(&mut self) -> Result<i64, String> {
        // Cut: the renewal waits, as a request to an etcd it cannot reach would (the
        // keep-alive gives up on it after its timeout).
        while self.etcd.state().cut.contains(&self.node) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = now()?;
        let mut s = self.etcd.state();
        match s.leases.get_mut(&self.lease) {
            Some(l) if l.expires > t => {
                l.expires = t + l.ttl;
                Ok(i64::try_from(l.ttl.as_secs()).unwrap_or(i64::MAX))
            }
            _ => Ok(0),
        }
    }
}

/// A node's membership at the stand-in: its lease, kept alive by a task, and its member
/// view. Dropping it stops the keep-alive (the lease then expires after its TTL);
/// [`Lessee::leave`] revokes it at once.
#[derive(Debug)]
pub(crate) struct Lessee {
    etcd: Etcd,
    node: u16,
    lease: i64,
    local: Duration,
    lease_rx: watch::Receiver<LeaseState>,
    lease_tx: watch::Sender<LeaseState>,
    members: watch::Receiver<MemberView>,
    keeper: JoinHandle<()>,
}

impl Drop for Lessee {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl Lessee {
    /// The lease id.
    pub(crate) fn lease_id(&self) -> i64 {
        self.lease
    }

    /// How long after a renewal was sent the node holds its lease valid.
    pub(crate) fn local_lease(&self) -> Duration {
        self.local
    }

    /// The lease's state; [`LeaseState::Lost`] is published once and never changes back.
    pub(crate) fn lease(&self) -> watch::Receiver<LeaseState> {
        self.lease_rx.clone()
    }

    /// The member list as this node sees it.
    pub(crate) fn members(&self) -> watch::Receiver<MemberView> {
        self.members.clone()
    }

    /// Leaves: stops the keep-alive and revokes the lease (the member key goes at once),
    /// unless the node is cut from the stand-in (then the lease expires after its TTL).
    pub(crate) fn leave(self) {
        self.keeper.abort();
        self.lease_tx
            .send_replace(LeaseState::Lost(LostReason::Left));
        let Ok(t) = now() else { return };
        let mut s = self.etcd.state();
        if !s.cut.contains(&self.node) {
            s.end(self.lease, t, Ended::Revoked);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u16) -> Member {
        Member { id, incarnation: 7 }
    }

    fn in_view(v: &watch::Receiver<MemberView>, id: u16) -> bool {
        v.borrow().members.contains_key(&id)
    }

    /// Cut node 0 at 1 s: its lease is lost within its local lease, its view is
    /// disconnected and falls behind, its key goes at the TTL after its last renewal (node
    /// 1 sees it gone then, not before), the heal brings its view up to date; node 1's
    /// leave revokes its lease at once.
    #[test]
    fn a_cut_node_loses_its_lease_and_its_key_goes_a_ttl_after_its_last_renewal() {
        let mut sim = turmoil::Builder::new()
            .tick_duration(Duration::from_millis(1))
            .simulation_duration(Duration::from_secs(30))
            .build();
        sim.client("nodes", async {
            let etcd = Etcd::new();
            tokio::task::spawn_local(etcd.clone().run());
            let ttl = Duration::from_secs(2);
            let local = super::super::local_lease(ttl, Duration::from_millis(300), 100)?;
            let n0 = etcd.join(member(0), ttl, local).await?;
            let n1 = etcd.join(member(1), ttl, local).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            // Renewed meanwhile (every third of the local lease).
            let start = Instant::now() - Duration::from_secs(1);
            for n in [&n0, &n1] {
                match *n.lease().borrow() {
                    LeaseState::Valid { until } => assert!(until > start + local),
                    other => panic!("not renewed: {other:?}"),
                }
            }
            let (v0, v1) = (n0.members(), n1.members());
            assert!(in_view(&v1, 0) && in_view(&v0, 1));
            let cut = now()?;
            etcd.cut(0);
            assert!(!v0.borrow().connected);
            let mut l0 = n0.lease();
            let lost = tokio::time::timeout(local, l0.wait_for(|l| l.is_lost()))
                .await
                .is_ok();
            assert!(lost, "the lease was not lost within the local lease");
            assert_eq!(*l0.borrow(), LeaseState::Lost(LostReason::NotRenewed));
            assert!(in_view(&v1, 0), "gone at etcd before the TTL");
            let mut v1c = v1.clone();
            v1c.wait_for(|v| !v.members.contains_key(&0)).await?;
            let ended = etcd.ended();
            assert_eq!(ended.len(), 1);
            let e = ended[0];
            assert_eq!((e.node, e.lease, e.how), (0, n0.lease_id(), Ended::Expired));
            // The TTL after the last renewal, which was at most a third of the local lease
            // before the cut.
            assert!(
                e.at >= cut + ttl - local / 3 && e.at <= cut + ttl,
                "{e:?} cut {cut:?}"
            );
            assert!(in_view(&v0, 0), "a cut node's view falls behind");
            etcd.heal(0);
            assert!(v0.borrow().connected && !in_view(&v0, 0));
            let at = now()?;
            n1.leave();
            let ended = etcd.ended();
            assert_eq!(ended.len(), 2);
            assert_eq!(
                (ended[1].node, ended[1].how, ended[1].at),
                (1, Ended::Revoked, at)
            );
            assert!(!in_view(&v0, 1));
            Ok(())
        });
        if let Err(e) = sim.run() {
            panic!("{e}");
        }
    }
}
