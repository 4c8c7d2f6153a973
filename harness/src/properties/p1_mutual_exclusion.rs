//! P1, mutual exclusion: no two sites hold modes of a lock that conflict by the literal
//! Table 2.1 of the thesis ([`Cluster::check_mutual_exclusion`]); for a protocol whose every
//! mode is exclusive (the Naimi-Trehel baselines and the simulator's stand-ins), at most one
//! site holds a lock ([`Cluster::check_exclusive`]). Checked in every state, whatever the
//! faults (a crashed site holds nothing).

use super::Violation;
use crate::Cluster;
use hilock_kernel::token::tables::table_2_1;
use hilock_kernel::{LockId, Mode, NodeId, Protocol};
use std::hash::Hash;

/// No two sites hold modes of a lock that conflict by the literal Table 2.1.
pub const P1: &str = "P1 mutual exclusion";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// P1, mutual exclusion: no two sites hold modes of the same lock that conflict by the
    /// literal Table 2.1 ([`hilock_kernel::token::tables::TABLE_2_1`], not the kernel's `conflicts`,
    /// which a unit test compares with it cell by cell). O(sites) per lock.
    pub fn check_mutual_exclusion(&self) -> Result<(), Violation> {
        for l in 0..self.locks {
            let lock = LockId(l);
            // The modes held (a bit per mode) and those held by two sites or more.
            let (mut held, mut twice) = (0u8, 0u8);
            for (_, s) in self.live() {
                let m = s.held(lock).unwrap_or(Mode::Phi);
                if m != Mode::Phi {
                    let bit = 1u8 << (m as u8);
                    twice |= held & bit;
                    held |= bit;
                }
            }
            if held.count_ones() <= 1 && twice == 0 {
                continue; // at most one holder
            }
            for a in Mode::REQUESTABLE {
                let bit_a = 1u8 << (a as u8);
                if held & bit_a == 0 {
                    continue;
                }
                for b in Mode::REQUESTABLE {
                    let bit_b = 1u8 << (b as u8);
                    let both = if a == b {
                        twice & bit_a != 0
                    } else {
                        held & bit_b != 0
                    };
                    if both && (table_2_1(a, b) || table_2_1(b, a)) {
                        let holders: Vec<String> = self
                            .live()
                            .filter_map(|(n, s)| {
                                let m = s.held(lock).unwrap_or(Mode::Phi);
                                (m == a || m == b).then(|| format!("{n} holds {m}"))
                            })
                            .collect();
                        return Err(Violation {
                            property: P1,
                            detail: format!("on {lock}: {}", holders.join(", ")),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Mutual exclusion of a protocol whose every mode is exclusive (the Naimi-Trehel
    /// baselines): at most one site holds a lock, whatever the mode.
    pub fn check_exclusive(&self) -> Result<(), Violation> {
        for l in 0..self.locks {
            let lock = LockId(l);
            let holders: Vec<NodeId> = self
                .live()
                .filter(|(_, s)| s.held(lock).unwrap_or(Mode::Phi) != Mode::Phi)
                .map(|(n, _)| n)
                .collect();
            if holders.len() > 1 {
                return Err(Violation {
                    property: P1,
                    detail: format!("{lock} is held by {holders:?} (every mode is exclusive)"),
                });
            }
        }
        Ok(())
    }
}
