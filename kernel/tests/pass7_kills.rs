//! Checks for the mutants of the tree group (`kernel/src/tree/`) that cargo-mutants' pass 7
//! missed (spec/MUTANTS.md, "Pass 7"). Each test asserts what a line of the tree module
//! exists for; the comment above each test names the mutants it kills.

use hilock_kernel::tree::{
    Op, Outcome, Step, TreeError, TreeLock, TreeNodeId, TreeVariant, TreeViolation, UserId,
};

type T = TreeLock<16>;

/// `Display for TreeNodeId` and `Display for UserId` → `Ok(Default::default())`: node ids
/// print as `t<preorder index>` and users as `u<number>`, the names the error texts and
/// the counterexample traces use.
#[test]
fn tree_ids_display_as_t_and_u() {
    assert_eq!(TreeNodeId(5).to_string(), "t5");
    assert_eq!(UserId(12).to_string(), "u12");
}

/// `set_complete`: `needed > CAP` → `needed >= CAP`. A complete tree that fills the
/// capacity exactly (height 2: 7 nodes in `TreeLock<7>`) is built; one node less of
/// capacity is an `OverCapacity` error naming both numbers.
#[test]
fn a_complete_tree_may_fill_its_capacity_exactly() {
    let t = TreeLock::<7>::complete(2).expect("7 nodes fit in a capacity of 7");
    assert!(t.at("11").is_ok());
    assert_eq!(
        TreeLock::<6>::complete(2).err(),
        Some(TreeError::OverCapacity {
            needed: 7,
            capacity: 6
        })
    );
}

/// `from_document`: `(*p as usize) < i` → `<=`. Every item's parent must come before it;
/// an item that names itself as its parent is an invalid document (item 1 here), not a
/// chain to follow.
#[test]
fn a_document_item_may_not_be_its_own_parent() {
    let mut map = [TreeNodeId(0); 3];
    assert_eq!(
        TreeLock::<16>::from_document(&[None, Some(1), Some(0)], &mut map).err(),
        Some(TreeError::InvalidDocument { item: 1 })
    );
    assert_eq!(
        TreeLock::<16>::from_document(&[None, Some(2), Some(0)], &mut map).err(),
        Some(TreeError::InvalidDocument { item: 1 })
    );
}

/// `build`: `needed = len + 1` → `len - 1`, `len * 1`. A document that maps to more
/// binary nodes than the capacity is refused with the number of nodes reached when the
/// capacity ran out (here the whole document: a section with two items is 3 nodes).
#[test]
fn a_document_over_capacity_names_the_node_that_did_not_fit() {
    let mut map = [TreeNodeId(0); 3];
    assert_eq!(
        TreeLock::<2>::from_document(&[None, Some(0), Some(0)], &mut map).err(),
        Some(TreeError::OverCapacity {
            needed: 3,
            capacity: 2
        })
    );
    assert!(TreeLock::<3>::from_document(&[None, Some(0), Some(0)], &mut map).is_ok());
}

/// `Display for TreeError` and `Display for TreeViolation` → `Ok(Default::default())`:
/// every error and every audit finding has its own text naming the nodes and users.
#[test]
fn tree_errors_and_violations_have_distinct_texts() {
    let (n, m, u) = (TreeNodeId(3), TreeNodeId(4), UserId(2));
    let errors = [
        TreeError::OutsideTree(n),
        TreeError::NotALeaf(n),
        TreeError::OverCapacity {
            needed: 9,
            capacity: 7,
        },
        TreeError::InvalidDocument { item: 5 },
        TreeError::NotOwner { user: u, node: n },
        TreeError::Busy { node: n, holder: u },
        TreeError::Inconsistent(n),
        TreeError::Finished,
    ];
    let violations = [
        TreeViolation::BadRequest(n),
        TreeViolation::DuplicateRequest(n),
        TreeViolation::Latched(n),
        TreeViolation::WhiteOccupied(n),
        TreeViolation::BlackNotSole(n),
        TreeViolation::GreyUnderTwo(n),
        TreeViolation::GreyCount {
            node: n,
            count: 3,
            requests: 1,
        },
        TreeViolation::NotHeld { user: u, leaf: n },
        TreeViolation::NotMaximal {
            user: u,
            region: n,
            largest: m,
        },
    ];
    let texts: Vec<String> = errors
        .iter()
        .map(ToString::to_string)
        .chain(violations.iter().map(ToString::to_string))
        .collect();
    for (i, a) in texts.iter().enumerate() {
        assert!(!a.is_empty(), "text {i} is empty");
        for b in &texts[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(
        TreeError::OverCapacity {
            needed: 9,
            capacity: 7
        }
        .to_string(),
        "the tree needs 9 nodes, capacity is 7"
    );
    assert_eq!(
        TreeError::Busy { node: n, holder: u }.to_string(),
        "node t3 is latched by an operation of u2"
    );
    assert_eq!(
        TreeViolation::NotMaximal {
            user: u,
            region: n,
            largest: m
        }
        .to_string(),
        "user u2 owns t3, the largest allowed is t4"
    );
}

/// `idle` → `Ok(())`: a whole-operation call while a stepped operation holds latches is
/// refused with `Busy`, even where its own path does not cross those latches, and the tree
/// is left as it was.
#[test]
fn a_whole_operation_waits_for_no_one_it_is_refused_while_latches_are_held() {
    let mut t = TreeLock::<32>::complete(3).unwrap();
    t.insert_user(t.at("000").unwrap(), UserId(1)).unwrap();
    t.insert_user(t.at("111").unwrap(), UserId(2)).unwrap();
    let root = t.at("").unwrap();
    // u3 at "110": through the grey root into "1", u2's black region, which it demotes
    let mut op = Op::insert(&t, t.at("110").unwrap(), UserId(3), TreeVariant::HILOCK).unwrap();
    // step the insert off the root: it then latches only nodes inside subtree "1"
    while op.held().contains(&Some(root)) || op.taken() == 0 {
        assert!(matches!(op.step(&mut t), Ok(Step::Progress(_))));
        assert!(op.outcome().is_none());
    }
    let latched = op.held().into_iter().flatten().min().unwrap();
    let before = format!("{t:?}");
    assert_eq!(
        t.insert_user(t.at("010").unwrap(), UserId(4)),
        Err(TreeError::Busy {
            node: latched,
            holder: UserId(3)
        })
    );
    assert_eq!(format!("{t:?}"), before, "a refused call changed the tree");
}

/// Runs `op` to its end and checks its counters against the steps it reported:
/// `taken` = steps, `demotions`/`promotions` = steps that demoted/promoted, and `undoing`
/// false until the step that started the undo, true from it on. Returns the outcome and
/// the three counts.
fn run_counted(t: &mut T, mut op: Op) -> (Outcome, u32, u32, bool) {
    let (mut steps, mut dem, mut prom, mut undo) = (0, 0, 0, false);
    loop {
        let Ok(Step::Progress(p)) = op.step(t) else {
            panic!("blocked or failed")
        };
        steps += 1;
        dem += u32::from(p.demoted.is_some());
        prom += u32::from(p.promoted.is_some());
        undo |= p.undo_started;
        assert_eq!(op.taken(), steps, "taken");
        assert_eq!(op.demotions(), dem, "demotions");
        assert_eq!(op.promotions(), prom, "promotions");
        if let Some(o) = p.outcome {
            return (o, dem, prom, undo);
        }
        assert_eq!(op.undoing(), undo, "undoing after step {steps}");
    }
}

/// `Op::undoing`, `taken`, `demotions`, `promotions` → constants: the counters of an
/// insert that demotes, a remove that promotes, and an insert that fails and is undone.
#[test]
fn an_operation_counts_its_latches_demotions_and_promotions() {
    let mut t = T::complete(2).unwrap();
    let leaf = |t: &T, p: &str| t.at(p).unwrap();
    t.insert_user(leaf(&t, "00"), UserId(1)).unwrap();
    // u2 at "11": the root (black, u1) is demoted
    let op = Op::insert(&t, leaf(&t, "11"), UserId(2), TreeVariant::HILOCK).unwrap();
    let (o, dem, _, undo) = run_counted(&mut t, op);
    assert!(matches!(o, Outcome::Granted { .. }), "{o:?}");
    assert!(dem >= 1 && !undo);
    // u3 at "00", u1's leaf: fails and undoes its grey counts
    let op = Op::insert(&t, leaf(&t, "00"), UserId(3), TreeVariant::HILOCK).unwrap();
    let (o, _, _, undo) = run_counted(&mut t, op);
    assert_eq!(o, Outcome::Failed { holder: UserId(1) });
    assert!(undo, "the failed insert never started its undo");
    // u2 leaves: u1 is promoted back to the root
    let op = Op::remove(&t, leaf(&t, "11"), UserId(2), TreeVariant::HILOCK).unwrap();
    let (_, _, prom, _) = run_counted(&mut t, op);
    assert!(prom >= 1, "no promotion");
}

/// `Op::abort` → `()`: an operation that meets an error ends (`Vanished`, nothing left to
/// take); here a second operation of the same user finds the user's own latch.
#[test]
fn an_operation_that_fails_is_finished() {
    let mut t = T::complete(2).unwrap();
    t.insert_user(t.at("00").unwrap(), UserId(1)).unwrap();
    let w = t.at("11").unwrap();
    let mut a = Op::insert(&t, w, UserId(3), TreeVariant::HILOCK).unwrap();
    let mut b = Op::insert(&t, w, UserId(3), TreeVariant::HILOCK).unwrap();
    assert!(matches!(a.step(&mut t), Ok(Step::Progress(_))));
    let root = t.at("").unwrap();
    assert_eq!(
        b.step(&mut t),
        Err(TreeError::Busy {
            node: root,
            holder: UserId(3)
        })
    );
    assert_eq!(b.outcome(), Some(Outcome::Vanished));
    assert_eq!(b.want(), None);
    assert_eq!(b.step(&mut t), Err(TreeError::Finished));
}
