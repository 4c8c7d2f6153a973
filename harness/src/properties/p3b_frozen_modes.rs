//! P3b, the frozen-mode invariant (the thesis's invariant 2.3): on a quiet link, every mode a
//! parent froze that its child could grant is frozen at the child with at least the parent's
//! threshold ([`Cluster::check_frozen_reach_children`]). FIFO channels without faults only.
//! Hilock sites only ([`super::Invariants`] for `Site`).

use super::Violation;
use crate::{Cluster, Order};
use hilock_kernel::token::tables::grantable_set;
use hilock_kernel::{Mode, Site};

/// Invariant 2.3: the modes a parent froze are frozen at its children.
pub const P3B: &str = "P3b frozen-mode invariant";

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// P3b, invariant 2.3: for every lock and every child `c` of `p` (non-Φ record) whose
    /// link is quiet (no message of the lock in flight either way), every mode `p` has
    /// frozen that `c` could grant (`tables::grantable_set` of the record) is frozen at `c`
    /// with at least `p`'s threshold. Stated for FIFO channels without faults (on the
    /// unordered network a freeze can overtake the grant that makes its receiver a child,
    /// and is then dropped as stale).
    pub fn check_frozen_reach_children(&self) -> Result<(), Violation> {
        if self.order != Order::Fifo || !self.faults.none() {
            return Ok(());
        }
        for (lock, c, p) in self.quiet_links(|_| true) {
            let node = &self.site(c).locks()[lock.idx()];
            let parent = &self.site(p).locks()[lock.idx()];
            let record = parent.peers()[c.idx()].child_owned;
            if record == Mode::Phi {
                continue;
            }
            let missing = parent
                .frozen_thresholds()
                .restrict(grantable_set(record))
                .beyond(node.frozen_thresholds());
            if !missing.is_empty() {
                return Err(Violation {
                    property: P3B,
                    detail: format!(
                        "on {lock}: {p} froze {} that {c} (recorded {record}) could grant, {c} has frozen only {}",
                        missing.modes(),
                        node.frozen()
                    ),
                });
            }
        }
        Ok(())
    }
}
