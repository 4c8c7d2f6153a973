//! The kernel's observable API beyond the protocol rules: mode parsing, the mode-set algebra
//! the frozen sets and Table 2.2–2.4 lookups use, the text of modes, ids and errors as traces
//! and error messages show it, and the token generation. (These were cargo-mutants misses of
//! the kernel's own tests: `docs/verification.md`, "Mutation testing". The checks used to
//! live in verify/tests/mutants.rs, outside the fast pass that cargo mutants runs.)

use hilock_kernel::mode::{strongest, Incompatible};
use hilock_kernel::{
    Frozen, Inheritance, Input, KernelError, LockId, Mode, ModeSet, Msg, NodeId, Output, Outputs,
    Rule, RuleSet, Site, Variant,
};

#[test]
fn mode_sets_and_conflicts_display_as_in_the_thesis() {
    assert_eq!(ModeSet::of(&[Mode::IR, Mode::R]).to_string(), "{IR, R}");
    assert_eq!(ModeSet::of(&[Mode::W]).to_string(), "{W}");
    assert_eq!(ModeSet::EMPTY.to_string(), "{}");
    assert_eq!(
        format!("{:?}", ModeSet::of(&[Mode::IR, Mode::U])),
        "{IR, U}"
    );
    let e: Incompatible = strongest(Mode::U, Mode::IW).unwrap_err();
    assert_eq!(e.to_string(), "modes U and IW conflict (Table 2.1)");
}

#[test]
fn mode_set_algebra_matches_membership() {
    for a in 0u8..64 {
        for b in 0u8..64 {
            let (x, y) = (ModeSet::from_bits(a), ModeSet::from_bits(b));
            assert_eq!(x.bits(), a);
            for m in Mode::ALL {
                let (in_x, in_y) = (x.contains(m), y.contains(m));
                assert_eq!(x.union(y).contains(m), in_x || in_y, "{x} ∪ {y}");
                assert_eq!(x.intersect(y).contains(m), in_x && in_y, "{x} ∩ {y}");
                assert_eq!(x.minus(y).contains(m), in_x && !in_y, "{x} \\ {y}");
            }
            assert_eq!(x.len() as usize, x.iter().count());
        }
    }
    assert_eq!(
        ModeSet::from_bits(0xff).bits(),
        0b11_1111,
        "bits naming no mode are masked"
    );
    assert_eq!(ModeSet::of(&[Mode::IR, Mode::R, Mode::W]).len(), 3);
}

#[test]
fn modes_parse_by_name_symbol_and_dash() {
    for (text, mode) in [
        ("Φ", Mode::Phi),
        ("φ", Mode::Phi),
        ("-", Mode::Phi),
        ("Phi", Mode::Phi),
        (" ir ", Mode::IR),
        ("R", Mode::R),
        ("u", Mode::U),
        ("IW", Mode::IW),
        ("w", Mode::W),
    ] {
        assert_eq!(Mode::parse(text), Some(mode), "{text:?}");
    }
    for bad in ["", "X", "RW", "--", "Φ-"] {
        assert_eq!(Mode::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn ids_and_kernel_errors_read_as_in_traces() {
    assert_eq!(NodeId(3).to_string(), "n3");
    assert_eq!(LockId(2).to_string(), "L2");
    let l = LockId(1);
    let all = [
        KernelError::UnknownLock(l),
        KernelError::UnknownNode(NodeId(9)),
        KernelError::InvalidMode,
        KernelError::AlreadyHeld(l),
        KernelError::AlreadyPending(l),
        KernelError::NotHeld(l),
        KernelError::NotHoldingU(l),
        KernelError::UpgradePending(l),
        KernelError::Duplicate(l),
        KernelError::QueueFull(l),
        KernelError::QueueOverflow(l),
        KernelError::NoParent(l),
        KernelError::OutputsFull,
    ];
    let texts: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    assert_eq!(texts[0], "unknown lock L1");
    assert_eq!(texts[1], "unknown node n9");
    for (e, t) in all.iter().zip(&texts) {
        assert!(!t.is_empty(), "{e:?} has no text");
        assert_eq!(
            texts.iter().filter(|u| *u == t).count(),
            1,
            "{t:?} is not unique"
        );
    }
}

type S = Site<3, 1, 3>;

#[test]
fn token_generation_counts_transfers() {
    let l = LockId(0);
    let mut a = S::with_parents(NodeId(0), |_| None).unwrap();
    let mut b = S::with_parents(NodeId(1), |_| Some(NodeId(0))).unwrap();
    assert_eq!(a.lock(l).unwrap().token_generation(), Some(0));
    assert_eq!(b.lock(l).unwrap().token_generation(), None);
    let mut out: Outputs<Msg<3>, 13> = Outputs::new();
    b.step(
        Input::Acquire {
            lock: l,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send { msg, .. }) = out.pop() else {
        panic!("request expected")
    };
    a.step(
        Input::Deliver {
            from: NodeId(1),
            msg: &msg,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send { msg, .. }) = out.pop() else {
        panic!("token expected")
    };
    b.step(
        Input::Deliver {
            from: NodeId(0),
            msg: &msg,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(a.lock(l).unwrap().token_generation(), None);
    assert_eq!(b.lock(l).unwrap().token_generation(), Some(1));
}

/// Frozen modes read as a mode set with each non-zero threshold after `@` (traces, the
/// Explorer); `Debug` is the same text.
#[test]
fn frozen_modes_display_with_their_thresholds() {
    assert_eq!(Frozen::default().to_string(), "{}");
    let f = Frozen::of(ModeSet::of(&[Mode::R]), 0).merge(Frozen::of(ModeSet::of(&[Mode::W]), 3));
    assert_eq!(f.to_string(), "{R, W@3}");
    assert_eq!(format!("{f:?}"), "{R, W@3}");
    let g = Frozen::of(ModeSet::of(&[Mode::IR, Mode::U]), 2);
    assert_eq!(g.to_string(), "{IR@2, U@2}");
}

/// Rules read as the thesis names them; a rule set is empty until a rule is added, and a
/// union holds each rule once.
#[test]
fn rules_and_rule_sets_read_as_the_thesis_names_them() {
    assert_eq!(Rule::Rule2Local.to_string(), "Rule 2 (local grant)");
    assert_eq!(
        Rule::Rule8_2Merge.to_string(),
        Rule::Rule8_2Merge.label().to_string()
    );
    assert!(RuleSet::EMPTY.is_empty());
    let a = RuleSet::of(Rule::Rule2Local);
    assert!(!a.is_empty());
    assert_eq!(a.union(a), a);
    assert_eq!(a.union(a).len(), 1);
    let both = a.union(RuleSet::of(Rule::Rule6FreezeSent));
    assert_eq!(both.len(), 2);
    assert_eq!(
        both.to_string(),
        "Rule 2 (local grant), Rule 6 (freeze to children)"
    );
}

/// `Site::with_parents` refuses a site id that is not a node and a parent that is the site
/// itself or not a node; a site reports the variant it runs.
#[test]
fn sites_refuse_bad_parents_and_report_their_variant() {
    type S = Site<4, 2, 4>;
    assert_eq!(
        S::new(NodeId(4), NodeId(0)).err(),
        Some(KernelError::UnknownNode(NodeId(4)))
    );
    assert_eq!(
        S::with_parents(NodeId(1), |_| Some(NodeId(1))).err(),
        Some(KernelError::UnknownNode(NodeId(1)))
    );
    assert_eq!(
        S::with_parents(NodeId(1), |l| (l.0 == 1).then_some(NodeId(4))).err(),
        Some(KernelError::UnknownNode(NodeId(4)))
    );
    assert!(S::with_parents(NodeId(1), |l| (l.0 == 1).then_some(NodeId(0))).is_ok());
    let pip = Variant {
        inheritance: Inheritance::Pip,
        ..Variant::HILOCK
    };
    let s = S::new(NodeId(0), NodeId(0)).unwrap();
    assert_eq!(s.variant(), Variant::HILOCK);
    assert_eq!(s.with_variant(pip).variant(), pip);
}
