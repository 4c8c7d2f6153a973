//! P10, fencing tokens increase: of two grants of a lock in conflicting modes, the later has
//! the larger fence ([`Cluster::check_fences`]). The cluster keeps a ghost history of the
//! fences granted ([`Cluster::fences_granted`]), recorded at every grant and completed
//! upgrade as the step's outputs are routed.

use super::Violation;
use crate::Cluster;
use hilock_kernel::token::tables::table_2_1;
use hilock_kernel::{LockId, Mode, NodeId, Protocol};
use std::hash::Hash;

/// Of two grants of a lock in conflicting modes, the later has the larger fence.
pub const FENCE: &str = "P10 fencing tokens increase";

pub use crate::cluster::FenceBreach;

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The ghost history of the fencing property: `node` was just granted `lock` in `mode`
    /// (the step is applied, so the site reports the grant's fence). A protocol without
    /// fencing tokens reports none and is not recorded; a grant of a fenced protocol
    /// ([`Protocol::FENCED`]) without a fence counts as fence 0, below every fence issued
    /// (they start at 1), so it breaches P10 after any conflicting grant.
    pub(crate) fn note_fence(&mut self, node: NodeId, lock: LockId, mode: Mode) {
        let fence = match self.site(node).fence(lock) {
            Ok(Some(fence)) => fence,
            _ if P::FENCED => 0,
            _ => return,
        };
        let g = self.ghost_mut();
        let at = match g.fences.binary_search_by_key(&lock, |(l, _)| *l) {
            Ok(at) => at,
            Err(at) => {
                g.fences.insert(at, (lock, [None; 6]));
                at
            }
        };
        let seen = &mut g.fences[at].1;
        if g.fence_breach.is_none() {
            for m in Mode::REQUESTABLE {
                match seen[m as usize] {
                    Some(f) if f >= fence && (table_2_1(m, mode) || table_2_1(mode, m)) => {
                        g.fence_breach = Some(FenceBreach {
                            node,
                            lock,
                            mode,
                            fence,
                            earlier: m,
                            earlier_fence: f,
                        });
                        break;
                    }
                    _ => {}
                }
            }
        }
        let slot = &mut seen[mode as usize];
        *slot = Some(slot.map_or(fence, |f| f.max(fence)));
    }

    /// P10, fencing tokens: every grant (and completed upgrade) so far had a fence larger than
    /// that of every earlier grant of the same lock in a conflicting mode (literal Table
    /// 2.1). Not checked once a node crashed: a node restarted with fresh state starts its
    /// counter again (the runtime refuses such a node instead: `docs/faults.md`, "Static
    /// cluster (the default)").
    pub fn check_fences(&self) -> Result<(), Violation> {
        match &self.ghost().fence_breach {
            Some(b) if !self.faults.crashed => Err(Violation {
                property: FENCE,
                detail: format!(
                    "{} granted {} {} with fence {}, not above the fence {} of an earlier {} grant",
                    b.node, b.lock, b.mode, b.fence, b.earlier_fence, b.earlier
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The fencing ghost: per lock, the largest fence granted so far in each mode.
    pub fn fences_granted(&self, lock: LockId) -> Option<[Option<u64>; 6]> {
        let fences = &self.ghost().fences;
        fences
            .binary_search_by_key(&lock, |(l, _)| *l)
            .ok()
            .map(|at| fences[at].1)
    }
}
