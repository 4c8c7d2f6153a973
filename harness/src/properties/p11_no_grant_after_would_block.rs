//! P11, no grant after WouldBlock: once a site's try-lock was refused
//! (`Output::WouldBlock`), that site is granted the lock again only after it asks again
//! ([`Cluster::check_no_grant_after_would_block`]). The cluster keeps a ghost history of the
//! refused (node, lock) pairs, recorded as the step's outputs are routed and cleared by the
//! node's next `Acquire` or `TryAcquire` of the lock (`spec/SPEC.md` 1.12).

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, Mode, NodeId, Protocol};
use std::hash::Hash;

/// A refused try is never granted later.
pub const P11: &str = "P11 no grant after WouldBlock";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The ghost history of P11 and P12: `node`'s try of `lock` was refused.
    pub(crate) fn note_would_block(&mut self, node: NodeId, lock: LockId) {
        if !self.ghost().refused.contains(&(node, lock)) {
            self.ghost_mut().refused.insert((node, lock));
        }
    }

    /// The ghost history of P11: `node` was granted `lock` in `mode`; a breach if its
    /// last try was refused and it has not asked since.
    pub(crate) fn note_try_grant(&mut self, node: NodeId, lock: LockId, mode: Mode) {
        let g = self.ghost();
        if g.try_breach.is_none() && g.refused.contains(&(node, lock)) {
            self.ghost_mut().try_breach = Some((node, lock, mode));
        }
    }

    /// P11, no grant after WouldBlock: no site was granted a lock after its try of the lock
    /// was refused, unless it asked again in between.
    pub fn check_no_grant_after_would_block(&self) -> Result<(), Violation> {
        match self.ghost().try_breach {
            None => Ok(()),
            Some((n, l, m)) => Err(Violation {
                property: P11,
                detail: format!("{n} was granted {l} in {m} after its try of {l} was refused"),
            }),
        }
    }

    /// The (node, lock) pairs whose last try was refused, with nothing asked since.
    pub fn refused_tries(&self) -> impl Iterator<Item = (NodeId, LockId)> + '_ {
        self.ghost().refused.iter().copied()
    }
}
