//! What a step did: the rules that fired, named as in the thesis.
//!
//! Every [`crate::Site::step`] returns a [`Report`] whose [`RuleSet`] says which rules of
//! chapters 2 and 3 (and which of hilock's decisions of `spec/SPEC.md` 1.4 and 1.5) the
//! step applied. Traces, the Explorer and the rule-coverage counts read it; nothing in
//! the kernel depends on it.

use core::fmt;
use core::marker::PhantomData;

/// Declares an engine's `Rule` enum (at most 64 rules, `#[repr(u8)]`, in order) with its
/// labels: `ALL`, `label`, `Display` and [`RuleName`], so that [`Rules`] is its rule set.
macro_rules! named_rules {
    ($(#[$enum_doc:meta])* ; $( $(#[$doc:meta])* $name:ident = $label:literal, )*) => {
        $(#[$enum_doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[repr(u8)]
        pub enum Rule {
            $( $(#[$doc])* $name, )*
        }

        impl Rule {
            /// Every rule, in declaration order.
            pub const ALL: &'static [Rule] = &[$(Rule::$name,)*];

            /// The rule's short label, as its source names it.
            pub const fn label(self) -> &'static str {
                match self {
                    $( Rule::$name => $label, )*
                }
            }
        }

        impl core::fmt::Display for Rule {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.label())
            }
        }

        impl $crate::report::RuleName for Rule {
            const ALL: &'static [Rule] = Rule::ALL;
            fn index(self) -> u8 {
                self as u8
            }
            fn label(self) -> &'static str {
                Rule::label(self)
            }
        }
    };
}
pub(crate) use named_rules;

named_rules! {
    /// A rule (or hilock decision) that a step applied.
    ;
    /// Rule 2: the owned mode covers the request (M_O ≥ M_R, compatible, not frozen): the
    /// site enters without a message.
    Rule2Local = "Rule 2 (local grant)",
    /// Rule 2: the request is sent to the parent.
    Rule2Request = "Rule 2 (request to parent)",
    /// Rule 3.1: a non-token node grants a copy (Table 2.2).
    Rule3_1CopyGrant = "Rule 3.1 (copy grant by a child)",
    /// Rule 3.2: the token node grants a copy (Table 2.2).
    Rule3_2CopyGrant = "Rule 3.2 (copy grant by the token node)",
    /// Rule 3.2: the token node grants its own request.
    Rule3_2OwnGrant = "Rule 3.2 (token node enters)",
    /// Rule 3.2: the token is transferred to the requester (with the queue, Rule 5.1).
    Rule3_2TokenTransfer = "Rule 3.2 (token transfer)",
    /// Rule 4.1: a non-token node queues a request behind its pending one (Table 2.3 / 3.2 Q).
    Rule4_1Queue = "Rule 4.1 (queue behind pending)",
    /// Rule 4.1: a non-token node forwards a request to its parent (Table 2.3 / 3.2 F).
    Rule4_1Forward = "Rule 4.1 (forward)",
    /// Rule 4.2: the token node queues a request it cannot grant.
    Rule4_2Queue = "Rule 4.2 (queue at the token)",
    /// Rule 5: the local user released (`RequestUnlock`).
    Rule5Release = "Rule 5 (release)",
    /// Rule 5.2: the owned mode changed (weakened or became Φ): the parent is told.
    Rule5_2Propagate = "Rule 5.2 (release to parent)",
    /// Rule 5.2: `HandleRelease` updated a child's record.
    Rule5_2Apply = "Rule 5.2 (record updated)",
    /// Rule 6: newly frozen modes were sent to children (invariant 2.3).
    Rule6FreezeSent = "Rule 6 (freeze to children)",
    /// Rule 6: a freeze from the parent was merged into the frozen modes.
    Rule6FreezeApplied = "Rule 6 (freeze applied)",
    /// Rule 7: U → W at once (no child owns a mode).
    Rule7Upgrade = "Rule 7 (upgrade at once)",
    /// Rule 7: the upgrade waits for the children's releases (W pending, modes frozen).
    Rule7UpgradeWaits = "Rule 7 (upgrade waits)",
    /// Rule 7: a waiting upgrade completed.
    Rule7UpgradeDone = "Rule 7 (upgrade completed)",
    /// Rule 8.1: a request was placed by priority (behind every entry of at least its
    /// priority).
    Rule8_1Order = "Rule 8.1 (priority order)",
    /// Rule 8.2: the token's queue was merged with the local queue.
    Rule8_2Merge = "Rule 8.2 (queue merge)",
    /// `ReceiveGrant` (Fig. 2.5): the pending request was granted by a copy.
    GrantReceived = "ReceiveGrant",
    /// `ReceiveToken` (Fig. 2.5): the token arrived for the pending request.
    TokenReceived = "ReceiveToken",
    /// hilock (`spec/SPEC.md` 1.4, Decision 8): leaving the old parent, its record of this
    /// site drops to Φ.
    LeaveOldParent = "leave old parent",
    /// hilock (`spec/SPEC.md` 1.4, Decision 5): a resynchronising release after a grant
    /// whose record differs from the owned mode.
    ResyncRelease = "resync release",
    /// Chapter 3: the base priority β changed.
    SetPriority = "set priority",
    /// PIP (Fig. 3.8): the site inherits a waiting request's priority.
    PipInherit = "PIP inherit",
    /// PIP (Fig. 3.8): pending requests reissued at a raised priority.
    PipReissue = "PIP reissue",
    /// PIP `HandleReissuedRequest` (Fig. 3.8): a queued request's priority raised.
    PipRequeue = "PIP requeue",
    /// PCEP (Fig. 3.7): the effective priority raised to the lock's ceiling.
    PcepCeiling = "PCEP ceiling",
    /// hilock (`spec/SPEC.md` 1.5, "Decisions"): a stale token made this site the token
    /// node; its current pending request was queued here.
    OwnRequestRequeued = "own request requeued",
    /// hilock ([`crate::Forwarding::Compress`], `spec/SPEC.md` 1.6): an idle relay sent a
    /// request to the requester it forwarded last, which keeps it behind its own (Table
    /// 3.2 Q).
    CompressShortcut = "compress shortcut",
    /// A stale request copy was dropped.
    StaleRequest = "stale request",
    /// A stale grant was answered with a release.
    StaleGrant = "stale grant",
    /// A token for a request that is no longer pending was kept.
    StaleToken = "stale token",
    /// A release from a superseded link was dropped.
    StaleRelease = "stale release",
    /// A freeze from a node that is not the parent (or while owning Φ) was dropped.
    StaleFreeze = "stale freeze",
    /// hilock's try-lock (`spec/SPEC.md` 1.12): a try request that Rule 4.1 Q or 4.2 would
    /// queue was refused (a busy answer, or `WouldBlock` at the requester itself).
    TryRefused = "try refused",
    /// hilock's try-lock: a busy answer withdrew this site's try request (`WouldBlock`).
    TryWouldBlock = "try would block",
    /// A busy answer for a try request that is no longer pending was dropped.
    StaleBusy = "stale busy",
    /// hilock's cancel (`spec/SPEC.md` 1.13): the local user withdrew its pending request,
    /// try or upgrade (`Cancelled`); the grant or token of a cancelled request arrived and
    /// the site released at once (Rule 5, no `Granted`); a busy answer or the site's own
    /// returning try ended a cancelled try; or an `Acquire`/`TryAcquire` took a cancelled
    /// request of the same mode back.
    Cancel = "cancel",
    /// hilock's downgrade (`spec/SPEC.md` 1.14): the local holder converted its held mode
    /// to a weaker one (`Downgraded`); Rule 5.2 and Rule 5.1 then fire as after a release.
    Downgrade = "downgrade",
    /// hilock's conversion (`spec/SPEC.md` 1.17): the local holder converted its held mode
    /// in place (`Converted`).
    Convert = "convert",
    /// hilock's conversion (`spec/SPEC.md` 1.17): a conversion that would have waited was
    /// refused (`ConvertBusy`); nothing changed.
    ConvertBusy = "convert busy",
    /// hilock's conversion (`spec/SPEC.md` 1.17): the token node's conversion waits for
    /// the holds it conflicts with (`Pending::Convert`, Rule 7's wait for any mode).
    ConvertWaits = "convert waits",
    /// hilock's lock value block (`spec/SPEC.md` 1.15): the local W holder wrote the lock's
    /// value block (`SetValue`).
    SetValue = "set value",
    /// hilock's blocking notification (`spec/SPEC.md` 1.16): the local holder was told
    /// that a request for a conflicting mode waits (`Blocking`).
    Blocking = "blocking",
}

/// The rules of one engine, named: an enum of at most 64 variants (`#[repr(u8)]`, declared
/// in order), each with a label. [`Rule`] (the thesis), `agents::Rule` (Wiger's locks) and
/// `ring::Rule` (the Chord lock paper) are the three; [`Rules`] is the one bit set over any of them.
pub trait RuleName: Copy + 'static {
    /// Every rule, in declaration order (at most 64).
    const ALL: &'static [Self];
    /// The rule's position in [`RuleName::ALL`].
    fn index(self) -> u8;
    /// The rule's short label, as its source names it.
    fn label(self) -> &'static str;
}

/// A set of rules of one engine (a bit set; iteration in declaration order). Serialised as
/// its bits (a number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent, bound = "")
)]
pub struct Rules<R> {
    bits: u64,
    #[cfg_attr(feature = "serde", serde(skip))]
    _rule: PhantomData<R>,
}

/// The thesis's rules that one token-engine step applied.
pub type RuleSet = Rules<Rule>;

impl<R> Default for Rules<R> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<R> Rules<R> {
    /// The empty set.
    pub const EMPTY: Self = Rules {
        bits: 0,
        _rule: PhantomData,
    };

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// Number of rules in the set.
    pub fn len(self) -> usize {
        self.bits.count_ones() as usize
    }

    /// The union of two sets.
    pub fn union(self, other: Self) -> Self {
        Rules {
            bits: self.bits | other.bits,
            _rule: PhantomData,
        }
    }
}

impl<R: RuleName> Rules<R> {
    /// The set of `r` alone.
    pub fn of(r: R) -> Self {
        let mut s = Self::EMPTY;
        s.insert(r);
        s
    }

    /// Adds `r`.
    pub fn insert(&mut self, r: R) {
        self.bits |= 1 << r.index();
    }

    /// Whether `r` is in the set.
    pub fn contains(self, r: R) -> bool {
        self.bits & (1 << r.index()) != 0
    }

    /// The rules, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = R> {
        R::ALL.iter().copied().filter(move |r| self.contains(*r))
    }
}

impl<R: RuleName> fmt::Display for Rules<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(r.label())?;
        }
        Ok(())
    }
}

/// What one accepted step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Report {
    /// The rules that fired.
    pub rules: RuleSet,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_fits_the_bit_set_and_iterates_in_order() {
        assert!(Rule::ALL.len() <= 64);
        let mut s = RuleSet::EMPTY;
        for r in Rule::ALL.iter().rev() {
            s.insert(*r);
        }
        assert_eq!(s.len(), Rule::ALL.len());
        assert!(s.iter().eq(Rule::ALL.iter().copied()));
        let mut one = RuleSet::EMPTY;
        one.insert(Rule::Rule6FreezeSent);
        assert!(one.contains(Rule::Rule6FreezeSent) && !one.contains(Rule::Rule2Local));
        assert_eq!(one.to_string_for_test(), "Rule 6 (freeze to children)");
    }

    fn indexes_are_positions<R: RuleName>() {
        assert!(R::ALL.len() <= 64);
        for (i, r) in R::ALL.iter().enumerate() {
            assert_eq!(usize::from(r.index()), i, "{}", r.label());
        }
        let mut s = Rules::<R>::EMPTY;
        for r in R::ALL.iter().rev() {
            s.insert(*r);
        }
        assert_eq!(s.len(), R::ALL.len());
        assert!(s.iter().map(R::index).eq(R::ALL.iter().map(|r| r.index())));
        assert!(Rules::of(R::ALL[0]).contains(R::ALL[0]));
        assert!(!Rules::of(R::ALL[0]).contains(R::ALL[R::ALL.len() - 1]));
    }

    #[test]
    fn the_three_engines_rules_share_one_set() {
        indexes_are_positions::<Rule>();
        indexes_are_positions::<crate::agents::Rule>();
        indexes_are_positions::<crate::ring::Rule>();
        let two = Rules::of(crate::ring::Rule::LockLocal)
            .union(Rules::of(crate::ring::Rule::BackupModified));
        let mut s = heapless::String::<64>::new();
        core::fmt::Write::write_fmt(&mut s, format_args!("{two}")).unwrap();
        assert_eq!(s, "(a) lock, (a)/(b) backup modified");
    }

    impl RuleSet {
        fn to_string_for_test(self) -> heapless::String<64> {
            use core::fmt::Write;
            let mut s = heapless::String::new();
            write!(s, "{self}").unwrap();
            s
        }
    }
}
