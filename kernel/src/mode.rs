//! Lock modes, their strength order (inequation 2.1) and their compatibility (Rule 1, Table 2.1).

use core::fmt;

/// A lock mode of the CORBA concurrency service as used by the thesis (section 2.2.1).
///
/// `Phi` (Φ) is "no lock". Strength order (inequation 2.1): Φ < IR < R < U = IW < W.
/// U and IW have *equal strength* but *conflict* with each other, so strength is a
/// preorder, not a total order: this type deliberately does not implement `Ord`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub enum Mode {
    /// Φ: no lock.
    #[default]
    Phi,
    /// Intention read.
    IR,
    /// Read.
    R,
    /// Upgrade (exclusive read that may later become W, Rule 7).
    U,
    /// Intention write.
    IW,
    /// Write.
    W,
}

impl Mode {
    /// All six modes, Φ first, in the row order of the thesis tables.
    pub const ALL: [Mode; 6] = [Mode::Phi, Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W];
    /// The five modes that can be requested (the columns of Tables 2.1–2.4).
    pub const REQUESTABLE: [Mode; 5] = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W];

    /// Row index of this mode in the thesis tables (Φ = 0 … W = 5).
    pub const fn index(self) -> usize {
        match self {
            Mode::Phi => 0,
            Mode::IR => 1,
            Mode::R => 2,
            Mode::U => 3,
            Mode::IW => 4,
            Mode::W => 5,
        }
    }

    /// Column index of a requested mode in the thesis tables (IR = 0 … W = 4); `None` for Φ.
    pub const fn column(self) -> Option<usize> {
        match self {
            Mode::Phi => None,
            m => Some(m.index() - 1),
        }
    }

    /// Strength of the mode, inequation 2.1: Φ=0 < IR=1 < R=2 < U=IW=3 < W=4.
    pub const fn strength(self) -> u8 {
        match self {
            Mode::Phi => 0,
            Mode::IR => 1,
            Mode::R => 2,
            Mode::U | Mode::IW => 3,
            Mode::W => 4,
        }
    }

    /// `self ≥ other` in strength (inequation 2.1). U ≥ IW and IW ≥ U both hold.
    pub const fn at_least(self, other: Mode) -> bool {
        self.strength() >= other.strength()
    }

    /// `self < other` in strength (inequation 2.1).
    pub const fn weaker_than(self, other: Mode) -> bool {
        self.strength() < other.strength()
    }

    /// hilock's downgrade (`spec/SPEC.md` 1.14): whether a holder of `self` may convert
    /// to `to` in place. `to` is not Φ, strictly weaker (inequation 2.1) and conflicts
    /// with no mode that `self` is compatible with (Table 2.1), so no other holder can
    /// conflict with it: W → U, R, IW, IR; U → R, IR; R → IR; IW → IR. IW → R is
    /// refused although R is weaker: R conflicts with another site's IW.
    pub const fn downgrades_to(self, to: Mode) -> bool {
        if matches!(to, Mode::Phi) || !to.weaker_than(self) {
            return false;
        }
        let mut i = 0;
        while i < Mode::REQUESTABLE.len() {
            let c = Mode::REQUESTABLE[i];
            if conflicts(to, c) && !conflicts(self, c) {
                return false;
            }
            i += 1;
        }
        true
    }

    /// Short name as in the thesis: `Φ`, `IR`, `R`, `U`, `IW`, `W`.
    pub const fn symbol(self) -> &'static str {
        match self {
            Mode::Phi => "Φ",
            Mode::IR => "IR",
            Mode::R => "R",
            Mode::U => "U",
            Mode::IW => "IW",
            Mode::W => "W",
        }
    }

    /// ASCII name, as used in JSON (`Phi`, `IR`, `R`, `U`, `IW`, `W`).
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Phi => "Phi",
            Mode::IR => "IR",
            Mode::R => "R",
            Mode::U => "U",
            Mode::IW => "IW",
            Mode::W => "W",
        }
    }

    /// Parses `Phi`/`Φ`/`-`, `IR`, `R`, `U`, `IW`, `W` (case-insensitive for the ASCII names).
    pub fn parse(s: &str) -> Option<Mode> {
        let t = s.trim();
        if t == "Φ" || t == "φ" || t == "-" {
            return Some(Mode::Phi);
        }
        Mode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(t))
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// Rule 1, Table 2.1: `true` iff `a` and `b` conflict. Φ conflicts with nothing.
///
/// This is the axiom every other table is derived from. The literal transcription of
/// the thesis table is [`crate::token::tables::TABLE_2_1`]; a unit test checks both agree.
pub const fn conflicts(a: Mode, b: Mode) -> bool {
    use Mode::*;
    matches!(
        (a, b),
        (IR, W)
            | (W, IR)
            | (R, IW)
            | (IW, R)
            | (R, W)
            | (W, R)
            | (U, U)
            | (U, IW)
            | (IW, U)
            | (U, W)
            | (W, U)
            | (IW, W)
            | (W, IW)
            | (W, W)
    )
}

/// Rule 1: `a` and `b` are compatible iff they do not conflict (Table 2.1).
pub const fn compatible(a: Mode, b: Mode) -> bool {
    !conflicts(a, b)
}

/// The strongest of two *compatible* modes (the owned mode of a set, Definition 3).
///
/// Strength is only a preorder (U = IW), but U and IW conflict, so on a compatible pair
/// the strongest mode is unique. An incompatible pair has no owned mode: that is an error.
pub const fn strongest(a: Mode, b: Mode) -> Result<Mode, Incompatible> {
    if conflicts(a, b) {
        Err(Incompatible(a, b))
    } else if a.strength() >= b.strength() {
        Ok(a)
    } else {
        Ok(b)
    }
}

/// Two modes that conflict were combined where a compatible set was required.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incompatible(pub Mode, pub Mode);

impl fmt::Display for Incompatible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "modes {} and {} conflict (Table 2.1)", self.0, self.1)
    }
}

/// A set of modes as a bit set (bit `i` = mode with [`Mode::index`] `i`).
///
/// Used for frozen modes (Rule 6, Table 2.4) and for the rows of the derived tables.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct ModeSet(u8);

impl ModeSet {
    /// The empty set.
    pub const EMPTY: ModeSet = ModeSet(0);

    /// Builds a set from a slice of modes.
    pub const fn of(modes: &[Mode]) -> ModeSet {
        let mut bits = 0u8;
        let mut i = 0;
        while i < modes.len() {
            bits |= 1 << modes[i].index();
            i += 1;
        }
        ModeSet(bits)
    }

    /// Raw bits (bit `i` = mode with index `i`).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether `m` is in the set.
    pub const fn contains(self, m: Mode) -> bool {
        self.0 & (1 << m.index()) != 0
    }

    /// Adds `m`.
    pub fn insert(&mut self, m: Mode) {
        self.0 |= 1 << m.index();
    }

    /// Set union.
    pub const fn union(self, o: ModeSet) -> ModeSet {
        ModeSet(self.0 | o.0)
    }

    /// Set intersection.
    pub const fn intersect(self, o: ModeSet) -> ModeSet {
        ModeSet(self.0 & o.0)
    }

    /// Set difference `self \ o`.
    pub const fn minus(self, o: ModeSet) -> ModeSet {
        ModeSet(self.0 & !o.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Number of modes in the set.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// The modes of the set, in table order.
    pub fn iter(self) -> impl Iterator<Item = Mode> {
        Mode::ALL.into_iter().filter(move |m| self.contains(*m))
    }

    /// The strongest mode of the set (Definition 3); Φ for the empty set; an error if two
    /// members conflict (then no single mode is "owned").
    pub fn strongest(self) -> Result<Mode, Incompatible> {
        let mut acc = Mode::Phi;
        for m in self.iter() {
            acc = strongest(acc, m)?;
        }
        Ok(acc)
    }

    /// Builds a set from raw bits, masking bits that name no mode.
    pub const fn from_bits(bits: u8) -> ModeSet {
        ModeSet(bits & 0b11_1111)
    }
}

impl fmt::Debug for ModeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for ModeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, m) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{m}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Linux and OpenVMS DLM's six modes mapped onto hilock's (docs/engines/token.md,
    /// "Against the Linux DLM"): NL = Φ, CR = IR, CW = IW, PR = R, PW = U, EX = W. The
    /// DLM's compatibility matrix (`__dlm_compat_matrix` in the Linux kernel's
    /// `fs/dlm/lock.c`, the VMS matrix) agrees with Table 2.1 on every pair but one: PR
    /// and PW conflict in the DLM, while R and U are compatible here (a U holder admits
    /// readers and waits for them before it upgrades, Rule 7).
    #[test]
    fn dlm_modes_map_onto_table_2_1_except_protected_read_with_protected_write() {
        use Mode::*;
        // NL, CR, CW, PR, PW, EX: rows and columns in the DLM's order.
        const DLM: [[bool; 6]; 6] = [
            [true, true, true, true, true, true],
            [true, true, true, true, true, false],
            [true, true, true, false, false, false],
            [true, true, false, true, false, false],
            [true, true, false, false, false, false],
            [true, false, false, false, false, false],
        ];
        const AS_HILOCK: [Mode; 6] = [Phi, IR, IW, R, U, W];
        let (mut differ, mut n) = ([(Phi, Phi); 36], 0);
        for (i, row) in DLM.iter().enumerate() {
            for (j, &dlm) in row.iter().enumerate() {
                let (a, b) = (AS_HILOCK[i], AS_HILOCK[j]);
                if compatible(a, b) != dlm {
                    differ[n] = (a, b);
                    n += 1;
                }
            }
        }
        assert_eq!(differ[..n], [(R, U), (U, R)]);
    }

    #[test]
    fn table_2_1_is_symmetric_and_phi_conflicts_with_nothing() {
        for a in Mode::ALL {
            assert!(compatible(Mode::Phi, a));
            for b in Mode::ALL {
                assert_eq!(conflicts(a, b), conflicts(b, a), "{a} {b}");
            }
        }
    }

    #[test]
    fn strength_order_inequation_2_1() {
        use Mode::*;
        let chain = [Phi, IR, R, U, W];
        for w in chain.windows(2) {
            assert!(w[0].weaker_than(w[1]));
        }
        assert_eq!(U.strength(), IW.strength());
        assert!(conflicts(U, IW), "equal strength but conflicting");
    }

    #[test]
    fn downgrade_pairs_are_the_weaker_modes_that_conflict_with_less() {
        use Mode::*;
        let want = [
            (W, U),
            (W, R),
            (W, IW),
            (W, IR),
            (U, R),
            (U, IR),
            (R, IR),
            (IW, IR),
        ];
        for a in Mode::ALL {
            for b in Mode::ALL {
                assert_eq!(a.downgrades_to(b), want.contains(&(a, b)), "{a} -> {b}");
            }
        }
        assert!(!IW.downgrades_to(R), "R conflicts with another IW");
    }

    /// The lemma behind "local knowledge is sufficient" (end of section 2.3): for a weaker,
    /// compatible mode a ≤ b, every mode that conflicts with a also conflicts with b.
    #[test]
    fn weaker_compatible_mode_conflicts_with_less() {
        for a in Mode::ALL {
            for b in Mode::ALL {
                if a.at_least(b) || !compatible(a, b) {
                    continue;
                }
                for c in Mode::ALL {
                    if conflicts(a, c) {
                        assert!(conflicts(b, c), "{a} <= {b}, {a} # {c} but not {b} # {c}");
                    }
                }
            }
        }
    }

    #[test]
    fn strongest_is_defined_exactly_on_compatible_sets() {
        for bits in 0u8..64 {
            let s = ModeSet::from_bits(bits);
            let compatible_set = s
                .iter()
                .all(|a| s.iter().filter(|b| *b != a).all(|b| compatible(a, b)));
            match s.strongest() {
                Ok(m) => {
                    assert!(compatible_set, "{s}");
                    assert!(s.is_empty() && m == Mode::Phi || s.contains(m));
                    assert!(s.iter().all(|x| m.at_least(x)));
                }
                Err(_) => assert!(!compatible_set, "{s}"),
            }
        }
    }

    #[test]
    fn parse_round_trips() {
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            assert_eq!(Mode::parse(m.symbol()), Some(m));
        }
        assert_eq!(Mode::parse("rw"), None);
    }
}
