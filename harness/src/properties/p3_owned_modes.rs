//! P3, the owned-mode invariant (the thesis's invariant 2.2): a parent's record of a child is
//! the child's owned mode on FIFO channels without faults, and covers it ([`covers`]) on the
//! unordered network or after reordering, once their link is quiet
//! ([`Cluster::check_owned_records`]); on FIFO channels without faults, also the converse: a
//! node recorded as a child has the recorder as its parent. Hilock sites only
//! ([`super::Invariants`] for `Site`).

use super::Violation;
use crate::{Cluster, Order};
use hilock_kernel::token::tables::table_2_1;
use hilock_kernel::{LockId, Mode, MsgKind, Site};

/// Invariant 2.2: a parent's record of a child is its owned mode (FIFO) or covers it.
pub const P3: &str = "P3 owned-mode invariant";

/// Every mode that conflicts with `owned` also conflicts with `record`, and `record` is at
/// least as strong (literal Table 2.1).
pub fn covers(record: Mode, owned: Mode) -> bool {
    owned == Mode::Phi
        || (record.at_least(owned)
            && Mode::REQUESTABLE
                .iter()
                .all(|m| !table_2_1(owned, *m) || table_2_1(record, *m)))
}

fn records(k: MsgKind) -> bool {
    matches!(k, MsgKind::Release | MsgKind::Grant | MsgKind::Token)
}

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// P3, invariant 2.2: for every lock and every non-token node `c` with parent `p` whose
    /// link is quiet (no `Release`, `Grant` or `Token` of the lock in flight either way),
    /// `p`'s record of `c` equals `c`'s owned mode on FIFO channels without faults (so a
    /// weakening such as R → IR must reach the parent, Rule 5.2), and covers it
    /// ([`covers`]) on the unordered network or after reordering, where a release can
    /// overtake the grant it follows. Not checked after duplication, loss, injection or a
    /// crash.
    pub fn check_owned_records(&self) -> Result<(), Violation> {
        if !self.faults.at_most_reordered() {
            return Ok(());
        }
        let exact = self.order == Order::Fifo && self.faults.none();
        for (lock, c, p) in self.quiet_links(records) {
            let record = self.site(p).locks()[lock.idx()].peers()[c.idx()].child_owned;
            let owned = self.site(c).locks()[lock.idx()].owned();
            let ok = if exact {
                record == owned
            } else {
                covers(record, owned)
            };
            if !ok {
                return Err(Violation {
                    property: P3,
                    detail: format!("on {lock}: {p} records {c} as {record}, {c} owns {owned}"),
                });
            }
        }
        if exact {
            self.check_records_name_children()?;
        }
        Ok(())
    }

    /// P3, the converse half (FIFO channels without faults): a node that records `c` as a
    /// child (a non-Φ record) is `c`'s parent, once their link is quiet (no `Release`,
    /// `Grant` or `Token` of the lock in flight either way). A node granted by a new parent
    /// must release its old parent's record (leave-old-parent, `LockNode::on_grant` and
    /// `on_token`); a record left behind at a node that is no longer the parent is not seen
    /// by the first half, which reads records only along parent pointers, yet it keeps that
    /// node's owned mode up for ever.
    fn check_records_name_children(&self) -> Result<(), Violation> {
        for l in 0..L {
            let lock = LockId(l as u16);
            for (p, s) in self.live() {
                let node = &s.locks()[l];
                for (c, record) in node.children() {
                    if c.idx() >= self.len()
                        || self.crashed.contains(&c)
                        || !self.quiet(c, p, lock, records)
                    {
                        continue;
                    }
                    let child = &self.site(c).locks()[l];
                    if child.has_token() || child.parent() != Some(p) {
                        return Err(Violation {
                            property: P3,
                            detail: format!(
                                "on {lock}: {p} records {c} as {record}, but {c}'s parent is {}",
                                child
                                    .parent()
                                    .map_or("none (it holds the token)".to_string(), |x| x
                                        .to_string())
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}
