//! Node leases and the member list as a node's lease path sees them, whatever keeps them:
//! etcd (`membership`, feature `etcd`) or the simulation's stand-in for it
//! (`sim`, feature `sim`). Both publish a node's lease as a [`LeaseState`] and the member
//! list as a [`MemberView`], and both keep the lease alive with the same loop
//! (`keep_alive`): the node treats its lease as valid for the local lease
//! ([`local_lease`]) after it *sent* its last successful renewal, and publishes
//! [`LeaseState::Lost`] once, for good, when that has passed without a renewal or the
//! service answers that the lease is gone.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

#[cfg(feature = "sim")]
pub mod sim;

/// A live node, as its member key says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Member {
    pub id: u16,
    pub incarnation: u64,
}

/// The member list as a watcher sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberView {
    /// The live members by id.
    pub members: BTreeMap<u16, Member>,
    /// etcd's revision this view is at.
    pub revision: i64,
    /// Whether the watch is connected; `false`: etcd is unreachable and the view may be
    /// behind.
    pub connected: bool,
    /// Every member the watch has seen since it started, the first run of each id: a
    /// member that joined and left between two looks at the view is here, though never
    /// in `members` at a look (a watcher sees only the latest view). Members that joined
    /// and left while the watch was not connected are not.
    pub seen: BTreeMap<u16, Member>,
}

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// No renewal was answered before the local lease ended (etcd unreachable, or this
    /// process was paused).
    NotRenewed,
    /// etcd answered that the lease no longer exists (expired or revoked there).
    Expired,
    /// The node left (`Membership::leave`, or the simulated etcd's leave).
    Left,
}

/// A node's lease, as the node must act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Valid until then (local clock).
    Valid { until: Instant },
    /// Lost for good: stop granting, kill the holders' commands.
    Lost(LostReason),
}

impl LeaseState {
    pub fn is_lost(&self) -> bool {
        matches!(self, LeaseState::Lost(_))
    }
}

/// The local lease for a TTL, a grace and a drift bound
/// ([`hilock_kernel::token::recovery::local_lease`] in milliseconds): how long after it sent
/// a renewal a node holds its lease valid.
pub fn local_lease(ttl: Duration, grace: Duration, rho_ppm: u32) -> Result<Duration, String> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    hilock_kernel::token::recovery::local_lease(ms(ttl), ms(grace), rho_ppm)
        .map(Duration::from_millis)
        .map_err(|e| {
            format!(
                "lease TTL {ttl:?} with grace {grace:?} and drift {rho_ppm} ppm leaves no local \
                 lease ({e:?})"
            )
        })
}

/// One renewal of a node's lease at the service that keeps it.
pub(crate) trait Renew: Send {
    /// Sends a renewal and reads its answer: the lease's TTL in seconds, 0 when the lease
    /// is gone; `Err` when the service did not answer.
    fn renew(&mut self) -> impl Future<Output = Result<i64, String>> + Send;
}

/// Keeps the lease alive every third of the local lease; publishes `Lost` when the local
/// lease ends without a renewal or the service says the lease is gone
/// (a renewal that failed is tried again after a quarter of that period).
pub(crate) async fn keep_alive(
    mut renewer: impl Renew,
    lease: i64,
    local: Duration,
    timeout: Duration,
    mut valid_until: Instant,
    tx: watch::Sender<LeaseState>,
) {
    let period = (local / 3).max(Duration::from_millis(50));
    let retry = (period / 4).max(Duration::from_millis(25));
    let mut next = Instant::now() + period;
    let lost = |r: LostReason| {
        tx.send_replace(LeaseState::Lost(r));
        tracing::warn!(lease, ?r, "lease lost");
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = tokio::time::sleep_until(valid_until) => return lost(LostReason::NotRenewed),
        }
        // After a pause the deadline may have passed while nothing ran: that comes first.
        if Instant::now() >= valid_until {
            return lost(LostReason::NotRenewed);
        }
        let sent = Instant::now();
        let r = tokio::select! {
            r = tokio::time::timeout(timeout, renewer.renew()) => r,
            _ = tokio::time::sleep_until(valid_until) => return lost(LostReason::NotRenewed),
        };
        if Instant::now() >= valid_until {
            return lost(LostReason::NotRenewed);
        }
        match r {
            Ok(Ok(ttl)) if ttl > 0 => {
                valid_until = sent + local;
                tx.send_replace(LeaseState::Valid { until: valid_until });
                next = sent + period;
            }
            Ok(Ok(_)) => return lost(LostReason::Expired),
            Ok(Err(e)) => {
                tracing::debug!(lease, "lease renewal failed: {e}");
                next = Instant::now() + retry;
            }
            Err(_) => {
                tracing::debug!(lease, "lease renewal: no answer within {timeout:?}");
                next = Instant::now() + retry;
            }
        }
    }
}
