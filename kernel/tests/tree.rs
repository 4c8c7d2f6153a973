//! Preston & Prasad tree locking (`hilock_kernel::tree`): the slides' examples (slides
//! 6, 10, 14–21) replayed on the kernel, and proptests of random insert/remove sequences
//! (and random interleavings of step-wise operations) against a naive reference.

use hilock_kernel::tree::{
    Color, Op, OpKind, Outcome, Phase, Step, TreeError, TreeLock, TreeNodeId, TreeVariant,
    TreeViolation, UserId,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

type T = TreeLock<64>;

const U1: UserId = UserId(1);
const U2: UserId = UserId(2);
const U3: UserId = UserId(3);
const U4: UserId = UserId(4);

fn at(t: &T, p: &str) -> TreeNodeId {
    t.at(p).unwrap()
}
fn color(t: &T, p: &str) -> Color {
    t.node(at(t, p)).unwrap().color()
}
fn grey(t: &T, p: &str) -> u32 {
    t.node(at(t, p)).unwrap().grey()
}
fn owner(t: &T, p: &str) -> Option<UserId> {
    t.node(at(t, p)).unwrap().owner()
}
fn ins(t: &mut T, p: &str, u: UserId) -> Outcome {
    let w = at(t, p);
    t.insert_user(w, u).unwrap()
}
fn rem(t: &mut T, p: &str, u: UserId) -> Outcome {
    let w = at(t, p);
    t.remove_user(w, u).unwrap()
}
fn granted(t: &T, p: &str) -> Outcome {
    Outcome::Granted { region: at(t, p) }
}
fn audit(t: &T, reqs: &[(UserId, &str)]) {
    let r: Vec<(UserId, TreeNodeId)> = reqs.iter().map(|&(u, p)| (u, at(t, p))).collect();
    assert_eq!(t.audit(&r), Ok(()), "{t:#?}");
}

/// Runs an operation step by step, returning the latches it took in order.
fn run_op(t: &mut T, mut op: Op) -> (Outcome, Vec<TreeNodeId>) {
    let mut order = Vec::new();
    loop {
        match op.step(t).unwrap() {
            Step::Blocked { node, holder } => panic!("blocked on {node} by {holder}"),
            Step::Progress(p) => {
                order.push(p.node);
                if let Some(o) = p.outcome {
                    return (o, order);
                }
            }
        }
    }
}

/// Slide 6: the document tree (title, paragraph A with a title and paragraphs A1–A3, A1
/// with A11 and A12, paragraph B) mapped to the binary tree: a section's first child on
/// the left, the rest of its children on the right.
#[test]
fn tree_slide_6_document_mapping() {
    // 0 t_artif, 1 p_a, 2 t_a1, 3 p_a1, 4 p_a11, 5 p_a12, 6 p_a2, 7 p_a3, 8 p_b
    let parents = [
        None,
        Some(0),
        Some(1),
        Some(1),
        Some(3),
        Some(3),
        Some(1),
        Some(1),
        Some(0),
    ];
    let mut map = [TreeNodeId(u32::MAX); 9];
    let t = T::from_document(&parents, &mut map).unwrap();
    assert_eq!(t.len(), 11, "6 leaves, 5 internal nodes");
    let names = ["", "0", "00", "010", "0100", "0101", "0110", "0111", "1"];
    for (i, name) in names.iter().enumerate() {
        assert_eq!(map[i], at(&t, name), "item {i}");
    }
    assert_eq!(t.leaves().count(), 6);
    // the artificial node for p_a2, p_a3
    assert_eq!(
        t.node(at(&t, "011")).unwrap().label(),
        hilock_kernel::tree::Label::Rest { item: 1, from: 2 }
    );
    // full binary tree: every internal node has two children
    for i in 0..t.len() as u32 {
        let n = TreeNodeId(i);
        assert_eq!(t.left(n).is_some(), t.right(n).is_some());
    }
    // a single-child section maps to its child's node
    let mut map = [TreeNodeId(u32::MAX); 4];
    let t = T::from_document(&[None, Some(0), Some(1), Some(1)], &mut map).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(map[0], map[1]);
}

/// Slide 10: nodes are named by their path, left = 0, right = 1: node 1011.
#[test]
fn tree_slide_10_path_names() {
    let t = T::complete(4).unwrap();
    let n = at(&t, "1011");
    assert_eq!(t.path_bits(n), Some((0b1011, 4)));
    assert!(t.node(n).unwrap().is_leaf());
    // the handshake order of a pass: root, 1, 10, 101, 1011
    let order: Vec<_> = t.path(n).collect();
    let names: Vec<_> = ["", "1", "10", "101", "1011"]
        .iter()
        .map(|p| at(&t, p))
        .collect();
    assert_eq!(order, names);
    for leaf in t.leaves() {
        let (bits, len) = t.path_bits(leaf).unwrap();
        let s: String = (0..len)
            .rev()
            .map(|i| if bits >> i & 1 == 1 { '1' } else { '0' })
            .collect();
        assert_eq!(at(&t, &s), leaf);
    }
}

/// Slide 14: the nodes from the root t to v are grey; the first white node on the path to
/// w is locked ("if white, lock higher"); the grey counts on the path go up by one.
#[test]
fn tree_slide_14_insert_locks_higher_and_counts_up() {
    let mut t = T::complete(3).unwrap();
    // u1 at 000, u2 at 111: the root is grey(2), 0 and 1 black.
    assert_eq!(ins(&mut t, "000", U1), granted(&t, ""));
    assert_eq!(ins(&mut t, "111", U2), granted(&t, "1"));
    assert_eq!(owner(&t, "0"), Some(U1));
    // u3 asks for 011: demotes u1's 0 (slide 15), gets the whole 01
    assert_eq!(ins(&mut t, "011", U3), granted(&t, "01"));
    assert_eq!((color(&t, ""), grey(&t, "")), (Color::Grey, 3));
    assert_eq!((color(&t, "0"), grey(&t, "0")), (Color::Grey, 2));
    // u4 asks for 101: path t(grey) → 1 is black(u2): demotion, 10 goes to u4
    assert_eq!(ins(&mut t, "101", U4), granted(&t, "10"));
    assert_eq!(grey(&t, ""), 4);
    audit(&t, &[(U1, "000"), (U2, "111"), (U3, "011"), (U4, "101")]);
    // an insert whose path is grey down to a white node locks that node and counts up on
    // the whole grey path: a fifth user at 001 demotes u1's 00
    let u5 = UserId(5);
    let w = at(&t, "001");
    let op = Op::insert(&mut t, w, u5, TreeVariant::HILOCK).unwrap();
    let (o, order) = run_op(&mut t, op);
    assert_eq!(o, granted(&t, "001"));
    assert_eq!(grey(&t, ""), 5);
    assert_eq!(grey(&t, "0"), 3);
    assert_eq!(grey(&t, "00"), 2);
    // latches: t, 0, 00 (black: demote) then both children of 00
    let names: Vec<_> = ["", "0", "00", "000", "001"]
        .iter()
        .map(|p| at(&t, p))
        .collect();
    assert_eq!(order, names);
    audit(
        &t,
        &[
            (U1, "000"),
            (U2, "111"),
            (U3, "011"),
            (U4, "101"),
            (u5, "001"),
        ],
    );
}

/// Slide 15: demotion. u2 owns v (black, original request x); u1 asks for w below v on
/// another path: v turns grey(2), the child towards x goes to u2, the child towards w to
/// u1. When x and w share the path below v the demotion recurses down to where they split.
#[test]
fn tree_slide_15_demotion() {
    let mut t = T::complete(3).unwrap();
    // u2 alone: owns the root (the largest subtree), original request 000
    assert_eq!(ins(&mut t, "000", U2), granted(&t, ""));
    assert_eq!(t.node(at(&t, "")).unwrap().original(), Some(at(&t, "000")));
    // u1 at 100: paths split at the root
    assert_eq!(ins(&mut t, "100", U1), granted(&t, "1"));
    assert_eq!((color(&t, ""), grey(&t, "")), (Color::Grey, 2));
    assert_eq!(owner(&t, "0"), Some(U2));
    assert_eq!(owner(&t, "1"), Some(U1));
    audit(&t, &[(U2, "000"), (U1, "100")]);

    // same path: u1 at 001 while u2 owns the root with original request 000: the
    // demotion recurses t → 0 → 00, where 000 and 001 split
    let mut t = T::complete(3).unwrap();
    ins(&mut t, "000", U2);
    let mut op = {
        let w = at(&t, "001");
        Op::insert(&mut t, w, U1, TreeVariant::HILOCK)
    }
    .unwrap();
    let mut demoted = Vec::new();
    while op.outcome().is_none() {
        if let Step::Progress(p) = op.step(&mut t).unwrap() {
            demoted.extend(p.demoted);
        }
    }
    assert_eq!(op.outcome(), Some(granted(&t, "001")));
    let names: Vec<_> = ["", "0", "00"].iter().map(|p| at(&t, p)).collect();
    assert_eq!(demoted, names);
    for p in ["", "0", "00"] {
        assert_eq!((color(&t, p), grey(&t, p)), (Color::Grey, 2), "{p}");
    }
    assert_eq!(color(&t, "1"), Color::White);
    assert_eq!(color(&t, "01"), Color::White);
    assert_eq!(owner(&t, "000"), Some(U2));
    assert_eq!(owner(&t, "001"), Some(U1));
    audit(&t, &[(U2, "000"), (U1, "001")]);
}

/// Slide 16: InsertUser fails on a leaf that another user holds ("if a leaf, fail"), and
/// the inflated grey counts on the path are undone by a second pass from the root.
#[test]
fn tree_slide_16_failed_insert_is_undone() {
    for variant in [TreeVariant::HILOCK, TreeVariant::SLIDES] {
        let mut t = T::complete(3).unwrap();
        ins(&mut t, "000", U1);
        ins(&mut t, "001", U2);
        ins(&mut t, "111", U3);
        let before = t.clone();
        let w = at(&t, "001");
        let mut op = Op::insert(&mut t, w, U4, variant).unwrap();
        let mut undo_started = false;
        let mut counts_inflated = false;
        while op.outcome().is_none() {
            if let Step::Progress(p) = op.step(&mut t).unwrap() {
                if p.undo_started {
                    undo_started = true;
                    counts_inflated = t.node(at(&t, "")).unwrap().grey() == 4;
                }
            }
        }
        assert_eq!(
            op.outcome(),
            Some(Outcome::Failed { holder: U2 }),
            "{variant:?}"
        );
        assert!(undo_started && counts_inflated, "{variant:?}");
        assert_eq!(op.kind(), OpKind::Insert);
        assert_eq!(op.phase(), Phase::Done(Outcome::Failed { holder: U2 }));
        // the logical state is back
        assert_eq!(
            t.regions().collect::<Vec<_>>(),
            before.regions().collect::<Vec<_>>(),
            "{variant:?}"
        );
        if variant == TreeVariant::HILOCK {
            assert_eq!(t, before);
        }
        audit(&t, &[(U1, "000"), (U2, "001"), (U3, "111")]);
    }
    // same path on an internal black node: hilock fails at once, at the node, without
    // demoting; the slides demote down to the leaf, fail there and promote back
    for variant in [TreeVariant::HILOCK, TreeVariant::SLIDES] {
        let mut t = T::complete(3).unwrap();
        ins(&mut t, "000", U1);
        ins(&mut t, "111", U3);
        let w = at(&t, "000");
        let mut op = Op::insert(&mut t, w, U2, variant).unwrap();
        let mut demotions = 0;
        while op.outcome().is_none() {
            if let Step::Progress(p) = op.step(&mut t).unwrap() {
                demotions += usize::from(p.demoted.is_some());
            }
        }
        assert_eq!(op.outcome(), Some(Outcome::Failed { holder: U1 }));
        let expected = if variant == TreeVariant::HILOCK { 0 } else { 2 };
        assert_eq!(demotions, expected, "{variant:?}");
        audit(&t, &[(U1, "000"), (U3, "111")]);
    }
    // slide 16's guard: a user that already holds w
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    assert_eq!(
        ins(&mut t, "11", U1),
        Outcome::AlreadyHeld { region: at(&t, "") }
    );
}

/// Slides 17–18: RemoveUser without promotion (a count of 3 or more falls by one, the
/// node stays grey) and with promotion (a count falls from 2 to 1: the sibling's owner
/// gets the node).
#[test]
fn tree_slide_18_remove_with_and_without_promotion() {
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    ins(&mut t, "10", U2);
    ins(&mut t, "11", U3);
    assert_eq!(grey(&t, ""), 3);
    // without promotion: t goes 3 → 2
    assert_eq!(rem(&mut t, "00", U1), Outcome::Released);
    assert_eq!((color(&t, ""), grey(&t, "")), (Color::Grey, 2));
    assert_eq!(color(&t, "0"), Color::White);
    audit(&t, &[(U2, "10"), (U3, "11")]);
    // with promotion: u2 leaves; the root counts u2 and u3 and falls 2 → 1, its other
    // child 0 is white, so the root stays latched while the owner left is looked for
    // below: at 1 (2 → 1) the other child 11 is black(u3), promoted to the root
    let w = at(&t, "10");
    let op = Op::remove(&mut t, w, U2, TreeVariant::HILOCK).unwrap();
    let (o, order) = run_op(&mut t, op);
    assert_eq!(o, Outcome::Released);
    // latches: t (count 2 → 1), 0 (the other child: white), 1 (count 2 → 1), 11 (black)
    let names: Vec<_> = ["", "0", "1", "11"].iter().map(|p| at(&t, p)).collect();
    assert_eq!(order, names);
    assert_eq!(color(&t, ""), Color::Black);
    assert_eq!(owner(&t, ""), Some(U3));
    audit(&t, &[(U3, "11")]);

    // the plain case of slide 18: t has 2, its children are black(ui), black(uj)
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    ins(&mut t, "11", U2);
    let mut copy = t.clone();
    let w = at(&t, "00");
    let op = Op::remove(&mut copy, w, U1, TreeVariant::HILOCK).unwrap();
    let (o, order) = run_op(&mut copy, op);
    assert_eq!(o, Outcome::Released);
    assert_eq!(
        order,
        vec![at(&t, ""), at(&t, "1")],
        "t, then its other child"
    );
    rem(&mut t, "00", U1);
    assert_eq!(owner(&t, ""), Some(U2));
    assert_eq!(t.node(at(&t, "")).unwrap().original(), Some(at(&t, "11")));
    audit(&t, &[(U2, "11")]);
}

/// Slide 19: when a grey count falls from 2 to 1, promote — to the topmost such node:
/// v counts 3, below it a chain of 2s down to where u1 and u2 split; RemoveUser(w, u1)
/// leaves v at 2 and makes the top of the chain black(u2).
#[test]
fn tree_slide_19_promotion_to_the_largest_subtree() {
    let mut t = T::complete(4).unwrap();
    ins(&mut t, "0000", U2);
    ins(&mut t, "0001", U1); // chain t, 0, 00, 000 of 2s
    ins(&mut t, "1111", U3); // t: 3
    ins(&mut t, "0111", U4); // 0: 3
    assert_eq!(grey(&t, ""), 4);
    assert_eq!(grey(&t, "0"), 3);
    assert_eq!(grey(&t, "00"), 2);
    assert_eq!(grey(&t, "000"), 2);
    assert_eq!(rem(&mut t, "0001", U1), Outcome::Released);
    assert_eq!(grey(&t, ""), 3);
    assert_eq!(grey(&t, "0"), 2);
    assert_eq!(color(&t, "00"), Color::Black);
    assert_eq!(owner(&t, "00"), Some(U2));
    audit(&t, &[(U2, "0000"), (U3, "1111"), (U4, "0111")]);
    // the literal slide 20 gets this case right: u2's leaf is w.sibling
    let mut t = T::complete(4).unwrap();
    for (p, u) in [("0000", U2), ("0001", U1), ("1111", U3), ("0111", U4)] {
        t.insert_user_with(at(&t, p), u, TreeVariant::SLIDES)
            .unwrap();
    }
    t.remove_user_with(at(&t, "0001"), U1, TreeVariant::SLIDES)
        .unwrap();
    audit(&t, &[(U2, "0000"), (U3, "1111"), (U4, "0111")]);
}

/// Slide 20 as written promotes `w.sibling`: right only when the owner left is next to
/// the leaf w. Here it is the other child of the root, and the literal rule leaves the
/// root grey with one owner below; hilock promotes it.
#[test]
fn tree_slide_20_literal_w_sibling_fails_where_hilock_promotes() {
    let mut lit = T::complete(2).unwrap();
    let mut hil = T::complete(2).unwrap();
    for t in [&mut lit, &mut hil] {
        t.insert_user(at(t, "00"), U1).unwrap();
        t.insert_user(at(t, "11"), U2).unwrap();
    }
    lit.remove_user_with(at(&lit, "11"), U2, TreeVariant::SLIDES)
        .unwrap();
    hil.remove_user(at(&hil, "11"), U2).unwrap();
    let r = vec![(U1, at(&hil, "00"))];
    assert_eq!(hil.audit(&r), Ok(()));
    assert_eq!(
        lit.audit(&r),
        Err(TreeViolation::GreyUnderTwo(TreeNodeId(0)))
    );
}

/// Slide 21: removals between a failed insert and its undo. The count of a node can fall
/// to 1 during the undo — the owner that made the insert fail is promoted — or to 0 —
/// the node is painted white.
#[test]
fn tree_slide_21_removals_between_failure_and_undo() {
    // count falls to 1: u1 at 00, u3 at 10; u4 fails on 00 (root inflated to 3); u3
    // leaves (root 3 → 2, no promotion); the undo takes the root 2 → 1 and promotes u1
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    ins(&mut t, "10", U3);
    let mut op = {
        let w = at(&t, "00");
        Op::insert(&mut t, w, U4, TreeVariant::HILOCK)
    }
    .unwrap();
    loop {
        let Step::Progress(p) = op.step(&mut t).unwrap() else {
            panic!()
        };
        if p.undo_started {
            break;
        }
    }
    assert_eq!(grey(&t, ""), 3);
    assert_eq!(rem(&mut t, "10", U3), Outcome::Released);
    assert_eq!(grey(&t, ""), 2, "the inflated count hides the promotion");
    let (o, _) = run_op(&mut t, op);
    assert_eq!(o, Outcome::Failed { holder: U1 });
    assert_eq!(owner(&t, ""), Some(U1));
    audit(&t, &[(U1, "00")]);

    // count falls to 0: u1 at 00, u3 at 10; u4 fails on 00; then u1 and u3 leave; the
    // undo takes the root 1 → 0 and paints it white
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    ins(&mut t, "10", U3);
    let mut op = {
        let w = at(&t, "00");
        Op::insert(&mut t, w, U4, TreeVariant::HILOCK)
    }
    .unwrap();
    while !matches!(op.step(&mut t).unwrap(), Step::Progress(p) if p.undo_started) {}
    rem(&mut t, "00", U1);
    rem(&mut t, "10", U3);
    assert_eq!((color(&t, ""), grey(&t, "")), (Color::Grey, 1));
    let (o, _) = run_op(&mut t, op);
    assert_eq!(o, Outcome::Failed { holder: U1 });
    assert_eq!(color(&t, ""), Color::White);
    audit(&t, &[]);
}

/// Slide 13: two operations on the same path cannot overtake each other, and a node
/// whose count fell to one stays latched while the owner left is looked for.
#[test]
fn tree_slide_13_handshake_latches() {
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    ins(&mut t, "01", U2);
    ins(&mut t, "11", U3);
    // u2 leaves: root 3 → 2, then 0: 2 → 1, the other child 00 is black: promote
    let mut a = {
        let w = at(&t, "01");
        Op::remove(&mut t, w, U2, TreeVariant::HILOCK)
    }
    .unwrap();
    let mut b = {
        let w = at(&t, "10");
        Op::insert(&mut t, w, U4, TreeVariant::HILOCK)
    }
    .unwrap();
    assert!(matches!(a.step(&mut t).unwrap(), Step::Progress(_))); // root
    assert_eq!(
        b.step(&mut t).unwrap(),
        Step::Blocked {
            node: at(&t, ""),
            holder: U2
        }
    );
    assert!(matches!(a.step(&mut t).unwrap(), Step::Progress(_))); // 0, root released
    assert_eq!(a.held()[0], Some(at(&t, "0")));
    assert!(matches!(b.step(&mut t).unwrap(), Step::Progress(_))); // root
    assert_eq!(t.latched(), 2);
    while a.outcome().is_none() {
        a.step(&mut t).unwrap();
    }
    while b.outcome().is_none() {
        b.step(&mut t).unwrap();
    }
    assert_eq!(t.latched(), 0);
    audit(&t, &[(U1, "00"), (U3, "11"), (U4, "10")]);
    // whole operations refuse to run while latches are held
    let mut c = {
        let w = at(&t, "01");
        Op::insert(&mut t, w, U2, TreeVariant::HILOCK)
    }
    .unwrap();
    c.step(&mut t).unwrap();
    assert!(matches!(
        t.insert_user(at(&t, "01"), UserId(9)),
        Err(TreeError::Busy { .. })
    ));
    while c.outcome().is_none() {
        c.step(&mut t).unwrap();
    }
    assert_eq!(c.step(&mut t), Err(TreeError::Finished));
}

/// Typed errors, and no change on a rejected input.
#[test]
fn tree_errors() {
    assert!(matches!(
        T::complete(6),
        Err(TreeError::OverCapacity {
            needed: 127,
            capacity: 64
        })
    ));
    assert!(matches!(
        T::complete(200),
        Err(TreeError::OverCapacity { .. })
    ));
    let mut map = [TreeNodeId(0); 3];
    assert_eq!(
        T::from_document(&[None, Some(2), Some(0)], &mut map),
        Err(TreeError::InvalidDocument { item: 1 })
    );
    assert_eq!(
        T::from_document(&[Some(0)], &mut map),
        Err(TreeError::InvalidDocument { item: 0 })
    );
    assert_eq!(
        T::from_document(&[], &mut map),
        Err(TreeError::InvalidDocument { item: 0 })
    );
    assert_eq!(
        T::from_document(&[None, Some(0), Some(0), Some(0)], &mut map),
        Err(TreeError::InvalidDocument { item: 3 })
    );
    let wide: Vec<Option<u32>> = std::iter::once(None)
        .chain((0..40).map(|_| Some(0)))
        .collect();
    let mut map = vec![TreeNodeId(0); 41];
    assert!(matches!(
        T::from_document(&wide, &mut map),
        Err(TreeError::OverCapacity { .. })
    ));
    let mut t = T::complete(2).unwrap();
    ins(&mut t, "00", U1);
    let before = t.clone();
    assert_eq!(
        t.insert_user(TreeNodeId(99), U2),
        Err(TreeError::OutsideTree(TreeNodeId(99)))
    );
    assert_eq!(
        t.insert_user(at(&t, "0"), U2),
        Err(TreeError::NotALeaf(at(&t, "0")))
    );
    assert_eq!(
        t.remove_user(at(&t, "11"), U2),
        Err(TreeError::NotOwner {
            user: U2,
            node: at(&t, "11")
        })
    );
    assert_eq!(
        t.remove_user(TreeNodeId(7), U1),
        Err(TreeError::OutsideTree(TreeNodeId(7)))
    );
    assert_eq!(t, before);
    let mut empty = T::new();
    assert!(empty.is_empty());
    assert_eq!(
        empty.insert_user(TreeNodeId(0), U1),
        Err(TreeError::OutsideTree(TreeNodeId(0)))
    );
    assert_eq!(empty.holder(TreeNodeId(0)), None);
    assert_eq!(empty.at(""), Err(TreeError::OutsideTree(TreeNodeId(0))));
    assert_eq!(t.at("0x"), Err(TreeError::OutsideTree(at(&t, "0"))));
    // an op used on a smaller tree
    let mut big = T::complete(5).unwrap();
    let mut small = T::complete(1).unwrap();
    let mut op = Op::insert(&mut big, TreeNodeId(40), U1, TreeVariant::HILOCK).unwrap();
    let r = (0..10).map(|_| op.step(&mut small)).find(|r| r.is_err());
    assert!(r.is_some());
    assert_eq!(small.latched(), 0);
    // the audit reports what is wrong
    assert_eq!(
        t.audit(&[(U1, at(&t, "0"))]),
        Err(TreeViolation::BadRequest(at(&t, "0")))
    );
    assert_eq!(
        t.audit(&[(U1, at(&t, "00")), (U2, at(&t, "00"))]),
        Err(TreeViolation::DuplicateRequest(at(&t, "00")))
    );
    assert_eq!(
        t.audit(&[]),
        Err(TreeViolation::BlackNotSole(TreeNodeId(0)))
    );
    assert_eq!(
        t.audit(&[(U1, at(&t, "00")), (U2, at(&t, "11"))]),
        Err(TreeViolation::BlackNotSole(TreeNodeId(0)))
    );
    assert_eq!(
        T::complete(2).unwrap().audit(&[(U1, at(&t, "00"))]),
        Err(TreeViolation::WhiteOccupied(TreeNodeId(0)))
    );
}

// ----- proptests -------------------------------------------------------------------------

/// The naive reference: the requests `(leaf → user)`, and what the tree must look like,
/// computed from leaf sets.
struct Reference<'a> {
    t: &'a T,
    requests: BTreeMap<TreeNodeId, UserId>,
}

impl Reference<'_> {
    fn leaves_below(&self, n: TreeNodeId) -> BTreeSet<TreeNodeId> {
        let mut out = BTreeSet::new();
        let mut stack = vec![n];
        while let Some(x) = stack.pop() {
            match (self.t.left(x), self.t.right(x)) {
                (Some(l), Some(r)) => {
                    stack.push(l);
                    stack.push(r);
                }
                _ => {
                    out.insert(x);
                }
            }
        }
        out
    }
    fn ancestors_top_down(&self, leaf: TreeNodeId) -> Vec<TreeNodeId> {
        let mut v = vec![leaf];
        let mut x = leaf;
        while let Some(p) = self.t.node(x).unwrap().parent() {
            v.push(p);
            x = p;
        }
        v.reverse();
        v
    }
    /// The owned subtrees: per request, the topmost ancestor whose leaves hold no other
    /// request.
    fn regions(&self) -> BTreeSet<(TreeNodeId, UserId, TreeNodeId)> {
        self.requests
            .iter()
            .map(|(&leaf, &u)| {
                let region = self
                    .ancestors_top_down(leaf)
                    .into_iter()
                    .find(|&a| {
                        self.leaves_below(a)
                            .iter()
                            .filter(|l| self.requests.contains_key(l))
                            .count()
                            == 1
                    })
                    .unwrap();
                (region, u, leaf)
            })
            .collect()
    }
    fn region_of(&self, leaf: TreeNodeId) -> Option<(TreeNodeId, UserId, TreeNodeId)> {
        self.regions()
            .into_iter()
            .find(|(r, _, _)| self.leaves_below(*r).contains(&leaf))
    }
    fn list(&self) -> Vec<(UserId, TreeNodeId)> {
        self.requests.iter().map(|(&l, &u)| (u, l)).collect()
    }

    /// Colour invariants, exclusivity and maximality, checked from the leaf sets.
    fn check(&self) -> Result<(), String> {
        let t = self.t;
        let expected = self.regions();
        // exclusivity: no two owned regions overlap
        let regs: Vec<_> = expected.iter().collect();
        for (i, a) in regs.iter().enumerate() {
            for b in &regs[..i] {
                let (la, lb) = (self.leaves_below(a.0), self.leaves_below(b.0));
                if !la.is_disjoint(&lb) {
                    return Err(format!("reference regions overlap: {a:?} {b:?}"));
                }
            }
        }
        let got: BTreeSet<_> = t
            .regions()
            .map(|r| (r.node, r.owner, r.original.unwrap()))
            .collect();
        if got != expected {
            return Err(format!("regions {got:?}, reference {expected:?}"));
        }
        // colours of the logical nodes (those below grey nodes only)
        let mut stack = vec![t.root().unwrap()];
        while let Some(n) = stack.pop() {
            let node = t.node(n).unwrap();
            let inside: Vec<_> = self
                .leaves_below(n)
                .into_iter()
                .filter(|l| self.requests.contains_key(l))
                .collect();
            match node.color() {
                Color::White if !inside.is_empty() => {
                    return Err(format!("white {n} has requests {inside:?}"))
                }
                Color::Black => {
                    let users: BTreeSet<_> = inside.iter().map(|l| self.requests[l]).collect();
                    if users.len() != 1 || node.owner() != users.first().copied() {
                        return Err(format!(
                            "black {n} owned by {:?}, requests {inside:?}",
                            node.owner()
                        ));
                    }
                    // maximality: the parent holds another request
                    if let Some(p) = node.parent() {
                        if self
                            .leaves_below(p)
                            .iter()
                            .filter(|l| self.requests.contains_key(l))
                            .count()
                            < 2
                        {
                            return Err(format!("black {n} is not maximal"));
                        }
                    }
                }
                Color::Grey => {
                    if inside.len() < 2 || node.grey() as usize != inside.len() {
                        return Err(format!(
                            "grey {n} counts {}, requests {inside:?}",
                            node.grey()
                        ));
                    }
                    stack.push(t.left(n).unwrap());
                    stack.push(t.right(n).unwrap());
                }
                Color::White => {}
            }
        }
        // every leaf's holder is the owner of the reference region holding it
        for leaf in t.leaves() {
            let want = self.region_of(leaf).map(|(r, u, _)| (r, u));
            let have = t.holder(leaf).map(|r| (r.node, r.owner));
            if want != have {
                return Err(format!("leaf {leaf}: holder {have:?}, reference {want:?}"));
            }
        }
        t.audit(&self.list()).map_err(|v| format!("audit: {v}"))?;
        if t.latched() != 0 {
            return Err("latches left".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Cmd {
    Insert(u16, usize),
    Remove(u16, usize),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        3 => (0u16..5, any::<usize>()).prop_map(|(u, l)| Cmd::Insert(u, l)),
        2 => (0u16..5, any::<usize>()).prop_map(|(u, l)| Cmd::Remove(u, l)),
    ]
}

/// A tree: a complete tree of height 0–5, or a random document of up to 24 items.
fn tree() -> impl Strategy<Value = T> {
    prop_oneof![
        (0u32..=5).prop_map(|h| T::complete(h).unwrap()),
        prop::collection::vec(any::<prop::sample::Index>(), 0..24).prop_map(|ps| {
            let parents: Vec<Option<u32>> = std::iter::once(None)
                .chain(
                    ps.iter()
                        .enumerate()
                        .map(|(i, p)| Some(p.index(i + 1) as u32)),
                )
                .collect();
            let mut map = vec![TreeNodeId(0); parents.len()];
            T::from_document(&parents, &mut map).unwrap()
        }),
    ]
}

fn leaf(t: &T, i: usize) -> TreeNodeId {
    let leaves: Vec<_> = t.leaves().collect();
    leaves[i % leaves.len()]
}

/// 10,000 cases by default; `HILOCK_CASES=N` sets another count (the mutation testing of
/// `docs/verification.md` runs fewer, a deep run more).
fn cases() -> u32 {
    std::env::var("HILOCK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Random insert/remove sequences, one operation at a time, against the naive
    /// reference: after every operation the colours (white ⇒ no request inside, black ⇒
    /// exactly its owner's, grey ⇒ at least two and counted), exclusivity, maximality and
    /// the outcome are as the reference says.
    #[test]
    fn tree_random_insert_remove_match_the_reference(
        mut t in tree(),
        cmds in prop::collection::vec(cmd(), 1..40),
    ) {
        // structure of the mapping: a full binary tree in preorder
        for i in 0..t.len() as u32 {
            let n = TreeNodeId(i);
            prop_assert_eq!(t.left(n).is_some(), t.right(n).is_some());
            if let Some(l) = t.left(n) {
                prop_assert_eq!(t.node(l).unwrap().parent(), Some(n));
                prop_assert_eq!(t.sibling(l), t.right(n));
            }
        }
        let mut requests: BTreeMap<TreeNodeId, UserId> = BTreeMap::new();
        for c in cmds {
            let reference = Reference { t: &t, requests: requests.clone() };
            match c {
                Cmd::Insert(u, i) => {
                    let (u, w) = (UserId(u), leaf(&t, i));
                    let expected = match reference.region_of(w) {
                        Some((r, v, _)) if v == u => Outcome::AlreadyHeld { region: r },
                        Some((_, v, l)) if l == w => Outcome::Failed { holder: v },
                        _ => Outcome::Granted { region: TreeNodeId(u32::MAX) },
                    };
                    let got = t.insert_user(w, u).unwrap();
                    match (expected, got) {
                        (Outcome::Granted { .. }, Outcome::Granted { region }) => {
                            prop_assert!(t.contains(region, w));
                            requests.insert(w, u);
                        }
                        (e, g) => prop_assert_eq!(e, g),
                    }
                }
                Cmd::Remove(u, i) => {
                    let (u, w) = (UserId(u), leaf(&t, i));
                    let before = t.clone();
                    match reference.region_of(w) {
                        Some((_, v, l)) if v == u => {
                            prop_assert_eq!(t.remove_user(w, u), Ok(Outcome::Released));
                            requests.remove(&l);
                        }
                        _ => {
                            prop_assert_eq!(t.remove_user(w, u), Err(TreeError::NotOwner { user: u, node: w }));
                            prop_assert_eq!(&t, &before);
                        }
                    }
                }
            }
            let reference = Reference { t: &t, requests: requests.clone() };
            if let Err(e) = reference.check() {
                prop_assert!(false, "{}\n{:#?}", e, t);
            }
        }
    }

    /// Random interleavings of step-wise operations (up to four users, each inserting and
    /// removing in turn): every operation finishes (no deadlock: some operation can
    /// always step), a user whose insert was granted holds its leaf in every state until it
    /// leaves, and when all have finished the tree matches the reference of the requests
    /// that were granted and not removed.
    #[test]
    fn tree_random_interleavings_match_the_reference(
        h in 1u32..=4,
        scripts in prop::collection::vec(prop::collection::vec(any::<usize>(), 1..4), 2..=4),
        schedule in prop::collection::vec(any::<prop::sample::Index>(), 0..400),
    ) {
        let mut t = T::complete(h).unwrap();
        let n = scripts.len();
        // per user: script position (insert at scripts[u][k/2] for even k, remove for odd)
        let mut pc = vec![0usize; n];
        let mut ops: Vec<Option<Op>> = vec![None; n];
        let mut held: Vec<Option<TreeNodeId>> = vec![None; n];
        let mut sched = schedule.into_iter();
        loop {
            // users that can act: idle with script left, or whose next latch is free
            let ready: Vec<usize> = (0..n)
                .filter(|&u| match ops[u] {
                    Some(op) => op
                        .want()
                        .is_some_and(|w| t.node(w).unwrap().latch().is_none()),
                    None => pc[u] < 2 * scripts[u].len(),
                })
                .collect();
            if ready.is_empty() {
                // no deadlock: nothing may be left in progress
                prop_assert!(ops.iter().all(|o| o.is_none()), "deadlock: {:?}", ops);
                break;
            }
            let u = match sched.next() {
                Some(ix) => ready[ix.index(ready.len())],
                None => ready[0],
            };
            let user = UserId(u as u16);
            if ops[u].is_none() {
                let k = pc[u];
                pc[u] += 1;
                if k % 2 == 0 {
                    let w = leaf(&t, scripts[u][k / 2]);
                    ops[u] = Some(Op::insert(&mut t, w, user, TreeVariant::HILOCK).unwrap());
                } else if let Some(w) = held[u].take() {
                    ops[u] = Some(Op::remove(&mut t, w, user, TreeVariant::HILOCK).unwrap());
                }
                continue;
            }
            let op = ops[u].as_mut().unwrap();
            match op.step(&mut t).unwrap() {
                Step::Blocked { node, holder } => {
                    prop_assert!(false, "stepped while blocked on {} by {}", node, holder);
                }
                Step::Progress(p) => {
                    if let Some(o) = p.outcome {
                        let op = ops[u].take().unwrap();
                        if let (OpKind::Insert, Outcome::Granted { .. }) = (op.kind(), o) {
                            held[u] = Some(op.target());
                        }
                    }
                }
            }
            for (v, h) in held.iter().enumerate() {
                if let (Some(l), None) = (h, ops[v]) {
                    prop_assert_eq!(t.holder(*l).map(|r| r.owner), Some(UserId(v as u16)), "user {} lost {}", v, l);
                }
            }
        }
        let requests: BTreeMap<TreeNodeId, UserId> = held
            .iter()
            .enumerate()
            .filter_map(|(u, l)| l.map(|l| (l, UserId(u as u16))))
            .collect();
        let reference = Reference { t: &t, requests };
        if let Err(e) = reference.check() {
            prop_assert!(false, "{}\n{:#?}", e, t);
        }
    }

    /// Every input is answered without a panic: random node ids (also outside the tree),
    /// users, variants and step sequences on random trees.
    #[test]
    fn tree_total_on_any_input(
        mut t in tree(),
        cmds in prop::collection::vec((0u8..4, 0u16..4, 0u32..80, 0u8..8), 0..40),
    ) {
        let variants = [
            TreeVariant::HILOCK,
            TreeVariant::SLIDES,
            TreeVariant { promotion: hilock_kernel::tree::Promotion::Slides, ..TreeVariant::HILOCK },
            TreeVariant { undo: hilock_kernel::tree::Undo::Slides, ..TreeVariant::HILOCK },
        ];
        let mut pending: Vec<Op> = Vec::new();
        for (kind, u, n, v) in cmds {
            let (u, n, variant) = (UserId(u), TreeNodeId(n), variants[v as usize % 4]);
            let before = t.clone();
            match kind {
                0 => {
                    if let Err(e) = t.insert_user_with(n, u, variant) {
                        if !matches!(e, TreeError::Inconsistent(_)) {
                            prop_assert_eq!(&t, &before);
                        }
                    }
                }
                1 => {
                    if let Err(e) = t.remove_user_with(n, u, variant) {
                        if !matches!(e, TreeError::Inconsistent(_)) {
                            prop_assert_eq!(&t, &before);
                        }
                    }
                }
                2 => {
                    if !pending.iter().any(|o| o.user() == u) {
                        if let Ok(op) = Op::insert(&mut t, n, u, variant) {
                            pending.push(op);
                        }
                    }
                }
                _ => {
                    let ix = n.0 as usize % pending.len().max(1);
                    if let Some(op) = pending.get_mut(ix) {
                        let _ = op.step(&mut t);
                    }
                    pending.retain(|o| o.outcome().is_none());
                }
            }
            let _ = t.audit(&[]);
            let _ = t.regions().count();
        }
    }
}
