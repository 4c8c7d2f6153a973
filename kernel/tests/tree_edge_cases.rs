//! Preston & Prasad tree locking (`kernel/src/tree/`; `spec/SPEC.md` section 2) at its
//! edges: each test asserts what a line of the tree module exists for, beyond the slides'
//! examples and the random runs of `tree.rs`: the ids' and errors' texts, a tree that fills
//! its capacity exactly (slide 6's document mapping), the latches of the top-down handshake
//! (slide 13), the counts of demotions and promotions (slides 15–20), path names to depth
//! 64 (slide 10), the largest region (slide 19), the audit of colours and owners (slides
//! 11–12, P8), a node's size, depth and latch, and the undo of a failed insert (slides 16
//! and 21). The comment above each test names the mutants it kills (`docs/verification.md`,
//! "Mutation testing").

use hilock_kernel::tree::{
    Color, Op, Outcome, Step, TreeError, TreeLock, TreeNodeId, TreeVariant, TreeViolation, UserId,
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
        TreeError::OperationInProgress { user: u },
        TreeError::TooManyOperations { capacity: 7 },
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
    let mut op = {
        let w = t.at("110").unwrap();
        Op::insert(&mut t, w, UserId(3), TreeVariant::HILOCK)
    }
    .unwrap();
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

/// Runs `op` to its end and checks its counters against the steps it reported from here on:
/// `taken` = steps, `demotions`/`promotions` = steps that demoted/promoted, and `undoing`
/// false until the step that started the undo, true from it on. Returns the outcome and
/// the three counts.
fn run_counted(t: &mut T, mut op: Op) -> (Outcome, u32, u32, bool) {
    let (t0, d0, p0) = (op.taken(), op.demotions(), op.promotions());
    let (mut steps, mut dem, mut prom, mut undo) = (0, 0, 0, op.undoing());
    loop {
        let Ok(Step::Progress(p)) = op.step(t) else {
            panic!("blocked or failed")
        };
        steps += 1;
        dem += u32::from(p.demoted.is_some());
        prom += u32::from(p.promoted.is_some());
        undo |= p.undo_started;
        assert_eq!(op.taken(), t0 + steps, "taken");
        assert_eq!(op.demotions(), d0 + dem, "demotions");
        assert_eq!(op.promotions(), p0 + prom, "promotions");
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
    let op = {
        let w = leaf(&t, "11");
        Op::insert(&mut t, w, UserId(2), TreeVariant::HILOCK)
    }
    .unwrap();
    let (o, dem, _, undo) = run_counted(&mut t, op);
    assert!(matches!(o, Outcome::Granted { .. }), "{o:?}");
    assert!(dem >= 1 && !undo);
    // u3 at "00", u1's leaf: fails and undoes its grey counts
    let op = {
        let w = leaf(&t, "00");
        Op::insert(&mut t, w, UserId(3), TreeVariant::HILOCK)
    }
    .unwrap();
    let (o, _, _, undo) = run_counted(&mut t, op);
    assert_eq!(o, Outcome::Failed { holder: UserId(1) });
    assert!(undo, "the failed insert never started its undo");
    let (u1, u2) = (leaf(&t, "00"), leaf(&t, "11"));
    assert_eq!(t.audit(&[(UserId(1), u1), (UserId(2), u2)]), Ok(()));
    // u2 leaves: u1 is promoted back to the root
    let op = {
        let w = leaf(&t, "11");
        Op::remove(&mut t, w, UserId(2), TreeVariant::HILOCK)
    }
    .unwrap();
    let (_, _, prom, _) = run_counted(&mut t, op);
    assert!(prom >= 1, "no promotion");
}

/// An operation that meets an error ends (`Vanished`, nothing left to take); here a copy
/// of an operation, stepped beside it in the same tree, finds its user's own latch. The
/// tree and the other copy's latch stay.
#[test]
fn an_operation_that_fails_is_finished() {
    let mut t = T::complete(2).unwrap();
    t.insert_user(t.at("00").unwrap(), UserId(1)).unwrap();
    let w = t.at("11").unwrap();
    let mut a = Op::insert(&mut t, w, UserId(3), TreeVariant::HILOCK).unwrap();
    let mut b = a;
    assert!(matches!(a.step(&mut t), Ok(Step::Progress(_))));
    let before = format!("{t:?}");
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
    assert_eq!(format!("{t:?}"), before, "the copy changed the tree");
}

/// `is_empty` → `true`, `height` → `0`/`1`: the structure queries of an empty tree, a
/// complete tree and a mapped document.
#[test]
fn empty_trees_and_heights() {
    assert!(T::new().is_empty());
    assert_eq!(T::new().height(), 0);
    let t = T::complete(3).unwrap();
    assert!(!t.is_empty());
    assert_eq!(t.height(), 3);
    // a section with two items, the second of which has two items: height 2
    let mut map = [TreeNodeId(0); 5];
    let d = T::from_document(&[None, Some(0), Some(0), Some(2), Some(2)], &mut map).unwrap();
    assert_eq!(d.height(), 2);
}

/// `next_in_path`: `w == n || !contains(n, w)` → `&&`. `NextInPath(n, w)` is only defined
/// for `w` strictly below `n`: at `n` itself and outside `n`'s subtree there is no next
/// node.
#[test]
fn next_in_path_only_below_the_node() {
    let t = T::complete(2).unwrap();
    let at = |p: &str| t.at(p).unwrap();
    assert_eq!(t.next_in_path(at(""), at("")), None);
    assert_eq!(t.next_in_path(at("0"), at("11")), None);
    assert_eq!(t.next_in_path(at("0"), at("01")), Some(at("01")));
    assert_eq!(t.next_in_path(at(""), at("10")), Some(at("1")));
}

/// `promote_slides`: delete the arm `(0, _)`. Under the slides' promotion a grey node whose
/// count falls to zero is painted white (slide 20, `ReleaseOwner`): after u1 and then u2
/// leave, the root is white again, not grey with a count of zero.
#[test]
fn the_slides_promotion_paints_a_node_white_when_its_count_falls_to_zero() {
    let v = TreeVariant::SLIDES;
    let mut t = T::complete(2).unwrap();
    let (a, b) = (t.at("00").unwrap(), t.at("11").unwrap());
    t.insert_user_with(a, UserId(1), v).unwrap();
    t.insert_user_with(b, UserId(2), v).unwrap();
    let root = t.root().unwrap();
    assert_eq!(t.node(root).unwrap().color(), Color::Grey);
    assert_eq!(t.remove_user_with(a, UserId(1), v), Ok(Outcome::Released));
    assert_eq!(t.remove_user_with(b, UserId(2), v), Ok(Outcome::Released));
    assert_eq!(t.node(root).unwrap().color(), Color::White);
    assert_eq!(t.audit(&[]), Ok(()));
}

/// `path_bits`: `depth > 64` → `==`, `>=`. A node at depth 64 has a 64-bit path name; one
/// at depth 65 has none. The tree is a caterpillar: section `s_k` holds an item and
/// section `s_{k+1}`, so `s_k` is at depth k (right, right, …) and its item at depth
/// k + 1.
#[test]
fn path_names_reach_depth_64_and_no_further() {
    const K: u32 = 65;
    let mut parents = vec![None];
    let mut item_of = Vec::new(); // item index of the leaf of s_k
    let mut section = 0u32; // item index of s_k
    for _ in 0..K {
        parents.push(Some(section));
        item_of.push(parents.len() - 1);
        parents.push(Some(section));
        section = (parents.len() - 1) as u32;
    }
    let mut map = vec![TreeNodeId(0); parents.len()];
    let t = TreeLock::<256>::from_document(&parents, &mut map).unwrap();
    let deep64 = map[item_of[63]]; // the item of s_63
    assert_eq!(t.node(deep64).unwrap().depth(), 64);
    assert_eq!(t.path_bits(deep64), Some((u64::MAX - 1, 64)));
    let deep65 = map[item_of[64]];
    assert_eq!(t.node(deep65).unwrap().depth(), 65);
    assert_eq!(t.path_bits(deep65), None);
    assert_eq!(t.path_bits(map[section as usize]), None);
}

/// `first_leaf` → `None`: the leftmost leaf below a node (the node itself for a leaf),
/// none outside the tree.
#[test]
fn first_leaf_is_the_leftmost_leaf_below() {
    let t = T::complete(2).unwrap();
    let at = |p: &str| t.at(p).unwrap();
    assert_eq!(t.first_leaf(at("")), Some(at("00")));
    assert_eq!(t.first_leaf(at("1")), Some(at("10")));
    assert_eq!(t.first_leaf(at("11")), Some(at("11")));
    assert_eq!(t.first_leaf(TreeNodeId(7)), None);
}

/// `largest_region` → `None`, and its `!self.contains(n, leaf)` with the `!` deleted: the
/// naive reference of maximality (slide 7) is the largest subtree on the path to the leaf
/// that holds no other request; none for a leaf outside the tree.
#[test]
fn the_largest_region_holds_no_other_request() {
    let t = T::complete(2).unwrap();
    let at = |p: &str| t.at(p).unwrap();
    let (u1, u2) = (UserId(1), UserId(2));
    assert_eq!(t.largest_region(&[(u1, at("00"))], at("00")), Some(at("")));
    let two = [(u1, at("00")), (u2, at("01"))];
    assert_eq!(t.largest_region(&two, at("00")), Some(at("00")));
    let apart = [(u1, at("00")), (u2, at("11"))];
    assert_eq!(t.largest_region(&apart, at("11")), Some(at("1")));
    assert_eq!(t.largest_region(&apart, TreeNodeId(9)), None);
}

/// `audit`: `owner == u && original == l` → `||`. A black node holds its owner's request
/// at its original request: the audit refuses a request list that names the right owner
/// at another leaf, or another user at the original request.
#[test]
fn the_audit_checks_both_owner_and_original_request_of_a_black_node() {
    let mut t = T::complete(2).unwrap();
    let (l00, l01, root) = (t.at("00").unwrap(), t.at("01").unwrap(), t.root().unwrap());
    t.insert_user(l00, UserId(1)).unwrap();
    assert_eq!(t.audit(&[(UserId(1), l00)]), Ok(()));
    assert_eq!(
        t.audit(&[(UserId(1), l01)]),
        Err(TreeViolation::BlackNotSole(root))
    );
    assert_eq!(
        t.audit(&[(UserId(2), l00)]),
        Err(TreeViolation::BlackNotSole(root))
    );
}

/// `fail`: `undo == Undo::Counted` → `!=`. An insert that fails at the root incremented
/// nothing, so with the counted undo it ends at once: one latch, no undo pass.
#[test]
fn an_insert_that_fails_at_the_root_runs_no_undo() {
    let mut t = T::complete(2).unwrap();
    let l00 = t.at("00").unwrap();
    t.insert_user(l00, UserId(1)).unwrap();
    let op = Op::insert(&mut t, l00, UserId(2), TreeVariant::HILOCK).unwrap();
    let (o, _, _, undo) = run_counted(&mut t, op);
    assert_eq!(o, Outcome::Failed { holder: UserId(1) });
    assert!(!undo, "an undo pass after a failure at the root");
    assert_eq!(t.audit(&[(UserId(1), l00)]), Ok(()));
}

/// `remove_at`: `counted = undoing && undo == Undo::Counted` → `!=`. The counted undo stops
/// at the depth where the insert failed, even when another operation has changed that
/// node in between: here u3's insert fails at `0` (u1's region, original request `00`),
/// then u2's insert demotes `0` to grey before u3's undo comes down. The undo must not
/// decrement `0`'s count (u3 never incremented it) nor promote anyone there.
#[test]
fn the_counted_undo_stops_where_the_insert_failed_after_a_concurrent_demotion() {
    let mut t = T::complete(2).unwrap();
    let at = |t: &T, p: &str| t.at(p).unwrap();
    t.insert_user(at(&t, "00"), UserId(1)).unwrap();
    t.insert_user(at(&t, "11"), UserId(4)).unwrap();
    let mut a = {
        let w = at(&t, "00");
        Op::insert(&mut t, w, UserId(3), TreeVariant::HILOCK)
    }
    .unwrap();
    let mut undo = false;
    while !undo {
        let Ok(Step::Progress(p)) = a.step(&mut t) else {
            panic!("u3's insert blocked or failed")
        };
        assert!(p.outcome.is_none());
        undo = p.undo_started;
    }
    let b = {
        let w = at(&t, "01");
        Op::insert(&mut t, w, UserId(2), TreeVariant::HILOCK)
    }
    .unwrap();
    let (o, dem, _, _) = run_counted(&mut t, b);
    assert_eq!(
        o,
        Outcome::Granted {
            region: at(&t, "01")
        }
    );
    assert_eq!(dem, 1);
    let (o, _, prom, _) = run_counted(&mut t, a);
    assert_eq!(o, Outcome::Failed { holder: UserId(1) });
    assert_eq!(prom, 0);
    let reqs = [
        (UserId(1), at(&t, "00")),
        (UserId(2), at(&t, "01")),
        (UserId(4), at(&t, "11")),
    ];
    assert_eq!(t.audit(&reqs), Ok(()));
}

/// `Node::size` → 1, `Node::depth` → 0 or 1, `Node::latch` → `None`, `Node::is_leaf` →
/// `true` or `false`, and its `==` → `!=`. A node's size, depth and latch as the getters
/// report them: in a complete tree of height 2 the root has 7 nodes below it (itself
/// included) at depth 0, a leaf is 1 node at depth 2; an operation in progress (u3's insert
/// at 01 while u1 holds 00) shows its user on every latch it holds between its steps.
#[test]
fn tree_nodes_report_size_depth_and_latch() {
    let mut t = TreeLock::<16>::complete(2).unwrap();
    let (root, leaf) = (t.at("").unwrap(), t.at("01").unwrap());
    let (r, l) = (t.node(root).unwrap(), t.node(leaf).unwrap());
    assert_eq!((r.size(), r.depth(), r.is_leaf()), (7, 0, false));
    assert_eq!((l.size(), l.depth(), l.is_leaf()), (1, 2, true));
    assert_eq!(t.node(t.at("0").unwrap()).unwrap().depth(), 1);
    assert_eq!(r.latch(), None);
    t.insert_user(t.at("00").unwrap(), UserId(1)).unwrap();
    let mut op = Op::insert(&mut t, leaf, UserId(3), TreeVariant::HILOCK).unwrap();
    let mut seen = 0;
    while op.outcome().is_none() {
        assert!(matches!(op.step(&mut t), Ok(Step::Progress(_))));
        for n in op.held().into_iter().flatten() {
            assert_eq!(t.node(n).unwrap().latch(), Some(UserId(3)), "{n}");
            seen += 1;
        }
    }
    assert!(seen > 0, "the insert held no latch between its steps");
}

/// One operation per user at a time (slide 13: a latch names its user, so two operations
/// of one user could not tell each other's latches from their own): a second operation
/// of a user whose operation is in progress is refused when it is made, and the tree is
/// left as it was. Before this, it took the root after the first had moved on, counted
/// itself on the grey root, met the first's latch and ended, leaving the root's grey count
/// one too high (`TreeViolation::GreyCount`).
#[test]
fn a_second_operation_of_a_user_is_refused_while_its_first_runs() {
    let mut t = TreeLock::<32>::complete(3).unwrap();
    t.insert_user(t.at("000").unwrap(), UserId(1)).unwrap();
    t.insert_user(t.at("111").unwrap(), UserId(2)).unwrap();
    let (a_leaf, b_leaf) = (t.at("010").unwrap(), t.at("011").unwrap());
    let mut a = Op::insert(&mut t, a_leaf, UserId(3), TreeVariant::HILOCK).unwrap();
    let refused = Some(TreeError::OperationInProgress { user: UserId(3) });
    // made, not stepped yet: it holds no latch, and a whole operation is refused too
    let before = format!("{t:?}");
    assert_eq!(t.insert_user(b_leaf, UserId(3)).err(), refused, "whole");
    assert_eq!(
        format!("{t:?}"),
        before,
        "a refused operation changed the tree"
    );
    assert!(matches!(a.step(&mut t), Ok(Step::Progress(_))));
    assert!(matches!(a.step(&mut t), Ok(Step::Progress(_))));
    // off the root: a second operation could take it
    assert_eq!(t.node(t.at("").unwrap()).unwrap().latch(), None);
    let after = format!("{t:?}");
    let b = Op::insert(&mut t, b_leaf, UserId(3), TreeVariant::HILOCK);
    assert_eq!(b.err(), refused, "stepped");
    assert_eq!(
        format!("{t:?}"),
        after,
        "a refused operation changed the tree"
    );
    while a.outcome().is_none() {
        assert!(matches!(a.step(&mut t), Ok(Step::Progress(_))));
    }
    let (u1, u2) = (t.at("000").unwrap(), t.at("111").unwrap());
    assert_eq!(
        t.audit(&[(UserId(1), u1), (UserId(2), u2), (UserId(3), a_leaf)]),
        Ok(())
    );
    // finished: the user may operate again
    let b = Op::insert(&mut t, b_leaf, UserId(3), TreeVariant::HILOCK);
    assert!(b.is_ok(), "{b:?}");
}

/// At most `CAP` operations run at once (`TreeLock::begin`): one more is refused with
/// `TooManyOperations` and changes nothing; once one finishes, another may start.
#[test]
fn operations_beyond_the_capacity_are_refused() {
    let mut t = TreeLock::<3>::complete(1).unwrap();
    let (l, r) = (t.at("0").unwrap(), t.at("1").unwrap());
    let mut ops: Vec<Op> = (1..=3)
        .map(|u| Op::insert(&mut t, l, UserId(u), TreeVariant::HILOCK).unwrap())
        .collect();
    let before = format!("{t:?}");
    assert_eq!(
        Op::insert(&mut t, r, UserId(4), TreeVariant::HILOCK).err(),
        Some(TreeError::TooManyOperations { capacity: 3 })
    );
    assert_eq!(format!("{t:?}"), before);
    let first = &mut ops[0];
    while first.outcome().is_none() {
        assert!(matches!(first.step(&mut t), Ok(Step::Progress(_))));
    }
    assert!(Op::insert(&mut t, r, UserId(4), TreeVariant::HILOCK).is_ok());
}
