//! P12, a refused try leaves nothing pending: after `Output::WouldBlock` the site has no
//! request pending for the lock and no site's queue holds an entry of that try
//! ([`Cluster::check_try_leaves_nothing`]; `spec/SPEC.md` 1.12). Together with P11 this is
//! "the try is withdrawn": nothing of it waits anywhere, so nothing of it can be served.

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, NodeId, Site};

/// After `WouldBlock`, nothing of the try is pending or queued anywhere.
pub const P12: &str = "P12 a try leaves nothing pending";

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// P12: for every (node, lock) whose last try was refused (the ghost of P11), the node
    /// has nothing pending for the lock and no live site's queue of the lock holds an entry
    /// of the node with the try's serial (the node's newest, since it asked nothing since).
    pub fn check_try_leaves_nothing(&self) -> Result<(), Violation> {
        for &(n, lock) in &self.ghost().refused {
            if self.crashed.contains(&n) {
                continue;
            }
            let Ok(node) = self.site(n).lock(lock) else {
                continue;
            };
            if node.pending_mode() != hilock_kernel::Mode::Phi {
                return Err(Violation {
                    property: P12,
                    detail: format!("{n} still has a request for {lock} pending after WouldBlock"),
                });
            }
            let serial = node.serial();
            if let Some(m) = self.queued_at(n, lock, serial) {
                return Err(Violation {
                    property: P12,
                    detail: format!(
                        "{m}'s queue of {lock} holds {n}'s refused try (serial {serial})"
                    ),
                });
            }
        }
        Ok(())
    }

    /// A live site whose queue of `lock` holds the entry of `n`'s request `serial`, if any
    /// (P12 for a refused try, P15 for a cancelled request).
    pub(crate) fn queued_at(&self, n: NodeId, lock: LockId, serial: u32) -> Option<NodeId> {
        self.live().find_map(|(m, s)| {
            let other = s.lock(lock).ok()?;
            other
                .queue()
                .iter()
                .any(|e| e.requester == n && e.serial == serial)
                .then_some(m)
        })
    }
}
