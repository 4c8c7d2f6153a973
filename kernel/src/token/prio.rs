//! Priorities (thesis chapter 3): frozen modes with thresholds (Rule 6_PRIO, Table 3.1) and
//! the priority-inheritance variants (section 3.7).

use crate::mode::{Mode, ModeSet};
use core::fmt;

/// A priority ξ: larger is more important (thesis section 3.5). With every priority equal
/// the prioritized rules reduce exactly to the chapter-2 protocol.
pub type Priority = u8;

/// Frozen modes with their thresholds (Rule 6_PRIO, Table 3.1): mode `m` is frozen for
/// requests of priority `≤ threshold(m)`; a request of higher priority overrules the freeze.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct Frozen {
    set: ModeSet,
    threshold: [Priority; 6],
}

impl Frozen {
    /// The whole value in one word, injectively (for `LockNode`'s hash).
    pub(crate) fn word(self) -> u64 {
        let Frozen { set, threshold } = self;
        let mut w = u64::from(set.bits());
        for (i, t) in threshold.iter().enumerate() {
            w |= u64::from(*t) << (8 * (i + 1));
        }
        w
    }

    /// Nothing frozen.
    pub const EMPTY: Frozen = Frozen {
        set: ModeSet::EMPTY,
        threshold: [0; 6],
    };

    /// `modes` frozen at threshold `prio`.
    pub fn of(modes: ModeSet, prio: Priority) -> Frozen {
        let mut f = Frozen::EMPTY;
        f.freeze(modes, prio);
        f
    }

    /// The frozen modes.
    pub fn modes(self) -> ModeSet {
        self.set
    }

    /// Threshold of `m`, if frozen.
    pub fn threshold(self, m: Mode) -> Option<Priority> {
        self.set.contains(m).then_some(self.threshold[m.index()])
    }

    /// The highest threshold (None if nothing is frozen).
    pub fn max_threshold(self) -> Option<Priority> {
        self.set.iter().map(|m| self.threshold[m.index()]).max()
    }

    /// Whether nothing is frozen.
    pub fn is_empty(self) -> bool {
        self.set.is_empty()
    }

    /// Rule 6_PRIO: does the freeze stop a request for `m` at priority `prio`? (A request
    /// is granted only if `prio > threshold(m)`.)
    pub fn blocks(self, m: Mode, prio: Priority) -> bool {
        self.threshold(m).is_some_and(|t| prio <= t)
    }

    /// Table 3.1's last line: freeze `modes`, raising thresholds to at least `prio`.
    pub fn freeze(&mut self, modes: ModeSet, prio: Priority) {
        for m in modes.iter() {
            let i = m.index();
            if self.set.contains(m) {
                self.threshold[i] = self.threshold[i].max(prio);
            } else {
                self.set.insert(m);
                self.threshold[i] = prio;
            }
        }
    }

    /// Union with the larger threshold per mode.
    pub fn merge(mut self, other: Frozen) -> Frozen {
        for m in other.set.iter() {
            self.freeze(ModeSet::of(&[m]), other.threshold[m.index()]);
        }
        self
    }

    /// Only the modes in `keep` (invariant 2.3 restricts a freeze to what a child can grant).
    pub fn restrict(self, keep: ModeSet) -> Frozen {
        let mut f = self;
        f.set = self.set.intersect(keep);
        for m in Mode::ALL {
            if !f.set.contains(m) {
                f.threshold[m.index()] = 0;
            }
        }
        f
    }

    /// What `self` freezes beyond `before`: modes newly frozen or with a raised threshold.
    pub fn beyond(self, before: Frozen) -> Frozen {
        let mut f = Frozen::EMPTY;
        for m in self.set.iter() {
            let t = self.threshold[m.index()];
            if before.threshold(m).is_none_or(|b| t > b) {
                f.freeze(ModeSet::of(&[m]), t);
            }
        }
        f
    }
}

impl fmt::Debug for Frozen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Frozen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, m) in self.set.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            let t = self.threshold[m.index()];
            if t == 0 {
                write!(f, "{m}")?;
            } else {
                write!(f, "{m}@{t}")?;
            }
        }
        f.write_str("}")
    }
}

/// Priority inheritance across the locks of a site (section 3.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Inheritance {
    /// No inheritance: ξ = β (the prioritized protocol of sections 3.2–3.4).
    #[default]
    None,
    /// Priority ceiling emulation (section 3.7.1, Fig. 3.7): on acquiring lock i the site's
    /// effective priority rises to the lock's ceiling C_i; on release it falls to the
    /// highest ceiling of the locks still held (or β).
    Pcep,
    /// Priority inheritance (section 3.7.2, Fig. 3.8): a holder that blocks a request of
    /// higher priority inherits it, transitively, and reissues its own pending requests.
    Pip,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_6_prio_higher_priority_overrules_the_freeze() {
        let f = Frozen::of(ModeSet::of(&[Mode::R, Mode::U]), 2);
        assert!(f.blocks(Mode::R, 2));
        assert!(f.blocks(Mode::R, 1));
        assert!(!f.blocks(Mode::R, 3));
        assert!(!f.blocks(Mode::IR, 0));
    }

    #[test]
    fn table_3_1_thresholds_only_rise_by_freezing() {
        let mut f = Frozen::of(ModeSet::of(&[Mode::R, Mode::U]), 2);
        f.freeze(ModeSet::of(&[Mode::R]), 4);
        f.freeze(ModeSet::of(&[Mode::U]), 1);
        assert_eq!(f.threshold(Mode::R), Some(4));
        assert_eq!(f.threshold(Mode::U), Some(2));
        let g = Frozen::of(ModeSet::of(&[Mode::R, Mode::U]), 2);
        assert_eq!(f.beyond(g), Frozen::of(ModeSet::of(&[Mode::R]), 4));
        assert_eq!(g.beyond(f), Frozen::EMPTY);
        assert_eq!(
            f.restrict(ModeSet::of(&[Mode::U])),
            Frozen::of(ModeSet::of(&[Mode::U]), 2)
        );
    }
}
