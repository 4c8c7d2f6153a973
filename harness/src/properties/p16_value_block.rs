//! P16, a valid value block is the last one written: every grant (and completed upgrade) of
//! a lock whose value block is valid reads the value the last W holder wrote before it
//! (`spec/SPEC.md` 1.15; [`Cluster::check_value_block`]). The cluster keeps a ghost of the
//! last value written to each lock ([`Cluster::value_written`], all zero before the first
//! write, as the kernel's initial block), set when a `SetValue` step is accepted; a write
//! happens only under W, so every later grant comes after the writer released or
//! downgraded. A block that is not valid (after a regenerated token) satisfies P16: the
//! holder is told the value is lost.

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, Mode, NodeId, Protocol, VALUE_LEN};
use std::hash::Hash;

/// Every grant of a valid value block reads the last value written before it.
pub const P16: &str = "P16 a valid value block is the last one written";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The ghost of P16: `node` was just granted `lock` in `mode` (the step is applied, so
    /// the site reports the block its hold reads). A protocol without value blocks reports
    /// none and is not checked.
    pub(crate) fn note_value(&mut self, node: NodeId, lock: LockId, mode: Mode) {
        if self.ghost().value_breach.is_some() {
            return;
        }
        let Ok(Some(block)) = self.site(node).value(lock) else {
            return;
        };
        let Some(read) = block.get() else {
            return;
        };
        let last = self.value_written(lock);
        if *read != last {
            self.ghost_mut().value_breach = Some((node, lock, mode, read[0], last[0]));
        }
    }

    /// The ghost: the last value written to `lock` (all zero before the first write).
    pub fn value_written(&self, lock: LockId) -> [u8; VALUE_LEN] {
        self.ghost()
            .written
            .get(&lock)
            .copied()
            .unwrap_or([0; VALUE_LEN])
    }

    /// P16: every grant (and completed upgrade) so far whose value block was valid read the
    /// last value written to the lock before the grant.
    pub fn check_value_block(&self) -> Result<(), Violation> {
        match self.ghost().value_breach {
            Some((node, lock, mode, read, last)) => Err(Violation {
                property: P16,
                detail: format!(
                    "{node} granted {lock} {mode} reads a valid value block starting {read}, \
                     the last value written starts {last}"
                ),
            }),
            None => Ok(()),
        }
    }
}
