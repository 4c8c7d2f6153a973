//! P14, no grant after Cancel: once a site's pending request, try or upgrade of a lock was
//! cancelled (`Output::Cancelled`), that site is not granted the lock (`Granted`) nor
//! upgraded (`Upgraded`) until it asks again ([`Cluster::check_no_grant_after_cancel`]).
//! The cluster keeps a ghost of the cancelled (node, lock) pairs, recorded as the step's
//! outputs are routed and cleared by the node's next `Acquire`, `TryAcquire`, `Upgrade` or
//! `Release` of the lock (`spec/SPEC.md` 1.13).

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, Mode, NodeId, Protocol};
use std::hash::Hash;

/// A cancelled request is never granted.
pub const P14: &str = "P14 no grant after Cancel";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The ghost history of P14 and P15: `node` cancelled what it had pending for `lock`
    /// while it held `held` (Φ; U for an upgrade).
    pub(crate) fn note_cancelled(&mut self, node: NodeId, lock: LockId, held: Mode) {
        if self.ghost().cancelled.get(&(node, lock)) != Some(&held) {
            self.ghost_mut().cancelled.insert((node, lock), held);
        }
    }

    /// The ghost history of P14: `node` was granted `lock` in `mode` (W: an upgrade); a
    /// breach if it cancelled and has not asked since.
    pub(crate) fn note_cancelled_grant(&mut self, node: NodeId, lock: LockId, mode: Mode) {
        let g = self.ghost();
        if g.cancel_breach.is_none() && g.cancelled.contains_key(&(node, lock)) {
            self.ghost_mut().cancel_breach = Some((node, lock, mode));
        }
    }

    /// P14, no grant after Cancel: no site was granted a lock (or completed an upgrade)
    /// after it cancelled its request of the lock, unless it asked again in between.
    pub fn check_no_grant_after_cancel(&self) -> Result<(), Violation> {
        match self.ghost().cancel_breach {
            None => Ok(()),
            Some((n, l, m)) => Err(Violation {
                property: P14,
                detail: format!("{n} was granted {l} in {m} after it cancelled its request"),
            }),
        }
    }

    /// The (node, lock) pairs whose last request was cancelled, with nothing asked since,
    /// and the mode each held at the cancel.
    pub fn cancelled_requests(&self) -> impl Iterator<Item = ((NodeId, LockId), Mode)> + '_ {
        self.ghost().cancelled.iter().map(|(k, m)| (*k, *m))
    }
}
