//! P4, no deadlock at quiescence: once nothing is in flight and the caller's users will act
//! no more, no request is pending ([`Cluster::check_no_deadlock`]; [`Cluster::drain`] checks
//! it at the end).

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, NodeId, Protocol};
use std::hash::Hash;

/// Nothing in flight and every user idle: no request is pending.
pub const P4: &str = "P4 no deadlock";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// A live site with a pending request (or upgrade), if any.
    pub fn pending(&self) -> Option<(NodeId, LockId)> {
        self.live().find_map(|(n, s)| {
            (0..self.locks)
                .map(LockId)
                .find(|l| s.is_pending(*l).unwrap_or(false))
                .map(|l| (n, l))
        })
    }

    /// P4, no deadlock at quiescence: if nothing is in flight and `users_idle` (the caller's
    /// users will issue nothing more that could unblock a request: e.g. every script has
    /// ended, or nothing is held), no request is pending.
    pub fn check_no_deadlock(&self, users_idle: bool) -> Result<(), Violation> {
        if !users_idle || self.in_flight() > 0 {
            return Ok(());
        }
        match self.pending() {
            None => Ok(()),
            Some((n, l)) => Err(Violation {
                property: P4,
                detail: format!(
                    "{n} waits for {l}, nothing is in flight and no user will act again"
                ),
            }),
        }
    }
}
