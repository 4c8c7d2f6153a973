//! Checks of the ring figures' accounting (`hilock_benches::ring`): owners against a
//! brute-force successor, keys moved only to the joiner / from the leaver and counted
//! exactly, and the hop counts' bounds.

use hilock_benches::ring::{self, BITS};
use hilock_kernel::ring::vnodes::{Point, VRing};

/// The owner of `key` by brute force: the point at the least clockwise distance from the
/// key (lowest node on a tie), over all points of nodes `0..n`.
fn brute_owner(pts: &[Point], key: u32) -> u16 {
    pts.iter()
        .min_by_key(|p| (p.ident.wrapping_sub(key), p.node))
        .map(|p| p.node.0)
        .unwrap()
}

#[test]
fn with_virtual_nodes_every_owner_is_the_brute_force_owner_and_balance_adds_up() {
    let keys = ring::lock_keys(3_000);
    for (n, v) in [(1, 1), (5, 1), (16, 8), (40, 32)] {
        let nodes: Vec<usize> = (0..n).collect();
        let pts = ring::points(&nodes, v);
        assert_eq!(pts.len(), n * v as usize);
        let (own, _) = ring::owners(&nodes, v, &keys).unwrap();
        let mut count = vec![0usize; n];
        for (k, o) in keys.iter().zip(&own) {
            assert_eq!(*o, brute_owner(&pts, *k), "n {n} v {v} key {k}");
            count[*o as usize] += 1;
        }
        let b = ring::balance(n, v, &keys).unwrap();
        assert_eq!(b.min, *count.iter().min().unwrap());
        assert_eq!(b.max, *count.iter().max().unwrap());
        assert_eq!(b.keys, 3_000);
        assert!((b.mean * n as f64 - 3_000.0).abs() < 1e-6);
    }
}

#[test]
fn moved_keys_on_a_join_all_go_to_the_joiner_and_are_its_keys() {
    let keys = ring::lock_keys(5_000);
    for v in [1, 8] {
        let base: Vec<usize> = (0..12).collect();
        let (before, _) = ring::owners(&base, v, &keys).unwrap();
        let mut with = base.clone();
        with.push(12);
        let (after, _) = ring::owners(&with, v, &keys).unwrap();
        let moved = ring::moved(&before, &after, 12, true).unwrap();
        let joiners = after.iter().filter(|o| **o == 12).count();
        assert_eq!(moved, joiners, "a join moves exactly the joiner's keys");
        assert!(moved > 0);
        // The leave of the same node moves the same keys back.
        assert_eq!(ring::moved(&after, &before, 12, false).unwrap(), moved);
        let m = ring::movement(12, v, &keys, 4).unwrap();
        assert_eq!((m.joins, m.leaves), (4, 4));
        assert!(m.join_max as f64 >= m.join_mean && m.join_mean > 0.0);
    }
}

#[test]
fn a_key_moved_between_two_other_nodes_is_refused() {
    // Key 1 moves from node 0 to node 2 on the join of node 3: not consistent hashing.
    assert!(ring::moved(&[0, 0, 1], &[0, 2, 1], 3, true).is_err());
    // The joiner owned a key before it joined.
    assert!(ring::moved(&[3, 0], &[3, 0], 3, true).is_err());
    // The leaver still owns a key after it left.
    assert!(ring::moved(&[1, 0], &[1, 0], 1, false).is_err());
    assert_eq!(ring::moved(&[0, 1, 1], &[0, 3, 1], 3, true), Ok(1));
    assert_eq!(ring::moved(&[0, 1, 1], &[0, 0, 0], 1, false), Ok(2));
}

#[test]
fn hop_counts_are_bounded_and_a_full_view_is_one_message() {
    let keys = ring::lock_keys(4_000);
    for n in [1usize, 2, 8, 64, 300] {
        let h = ring::hops(n, &keys).unwrap();
        assert!(h.finger_max <= BITS as u32 + 1, "{h:?}");
        assert!(h.full_view_max <= 1);
        assert!(h.finger_mean >= h.full_view_mean, "{h:?}");
        if n == 1 {
            assert_eq!((h.finger_max, h.full_view_mean), (0, 0.0));
        } else {
            assert!(h.finger_p50 >= 1 && h.full_view_mean > 0.5, "{h:?}");
        }
    }
    // Per request: at least one message when the start is not the owner.
    let nodes: Vec<usize> = (0..64).collect();
    let mut pts = ring::points(&nodes, 1);
    let r = VRing::new(BITS, &mut pts).unwrap();
    for (j, k) in keys.iter().enumerate() {
        let from = j % 64;
        let rt = hilock_kernel::ring::fingers::route(&r, from, *k).unwrap();
        assert_eq!(rt.owner, r.successor_index(*k).unwrap());
        assert_eq!(rt.messages >= 1, rt.owner != from);
        assert!(rt.messages <= BITS as u32 + 1);
    }
}
