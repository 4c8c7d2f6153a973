//! Chord's finger tables (Stoica et al., "Chord", SIGCOMM 2001, section 4.3 — the routing
//! under the Chord lock paper's `lookup`) over the points of a [`VRing`]: finger `i` of point `n`
//! (`0 ≤ i < bits`) is `successor(n + 2^i)`; a request for `key` at `n` goes to `n`'s
//! successor if `key ∈ (n, successor]`, and otherwise to `n`'s closest finger preceding
//! `key` (recursive routing). Fingers are not stored: each is one [`VRing`] lookup, so a
//! table is exact for the ring it is asked on (a stabilised ring).
//!
//! Each forward strictly shortens the clockwise distance to the key, and (with `p` the
//! key's predecessor point) the distance from the current point to `p` loses at least its
//! top bit per finger step, so a route has at most `bits + 1` hops (`bits` finger steps,
//! then the step to the successor). With a full membership view a request goes to the
//! owner in one message.

use super::vnodes::{VRing, VnodeError};

/// A routed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// The point the request ends at (the key's owner).
    pub owner: usize,
    /// Forwards from point to point.
    pub hops: u32,
    /// Forwards between points of different nodes (messages on the network).
    pub messages: u32,
}

/// `x ∈ (a, b)` clockwise; `a == b` is the whole circle but `a`.
fn open(r: &VRing<'_>, a: u32, b: u32, x: u32) -> bool {
    let full = 1u64 << r.bits();
    let ab = match r.dist(a, b) as u64 {
        0 => full,
        d => d,
    };
    let ax = r.dist(a, x) as u64;
    ax > 0 && ax < ab
}

/// `x ∈ (a, b]` clockwise; `a == b` is the whole circle.
fn open_closed(r: &VRing<'_>, a: u32, b: u32, x: u32) -> bool {
    x == b || open(r, a, b, x)
}

/// Finger `i` of point `at`: the index of `successor(ident(at) + 2^i)`.
pub fn finger(r: &VRing<'_>, at: usize, i: u8) -> Result<usize, VnodeError> {
    if i >= r.bits() {
        return Err(VnodeError::BadBits(i));
    }
    let p = r.point(at)?;
    let x = super::vnodes::reduce(p.ident.wrapping_add(1u32 << i), r.bits());
    r.successor_index(x)
}

/// The finger of `at` closest before `key` (the highest finger in `(at, key)`), or `at`'s
/// successor if none is.
pub fn closest_preceding(r: &VRing<'_>, at: usize, key: u32) -> Result<usize, VnodeError> {
    let n = r.point(at)?.ident;
    r.check(key)?;
    for i in (0..r.bits()).rev() {
        let f = finger(r, at, i)?;
        if open(r, n, key, r.points()[f].ident) {
            return Ok(f);
        }
    }
    Ok((at + 1) % r.points().len())
}

/// Routes a request for `key` from point `from` to the key's owner, calling `visit` with
/// every point it reaches (`from` first, the owner last).
pub fn route_with(
    r: &VRing<'_>,
    from: usize,
    key: u32,
    mut visit: impl FnMut(usize),
) -> Result<Route, VnodeError> {
    r.point(from)?;
    let owner = r.successor_index(key)?;
    let pts = r.points();
    let (mut n, mut hops, mut messages) = (from, 0u32, 0u32);
    visit(n);
    // Terminates: every forward goes to a point in (n, key], strictly closer to the key.
    while n != owner {
        let s = (n + 1) % pts.len();
        let next = if open_closed(r, pts[n].ident, pts[s].ident, key) {
            s
        } else {
            closest_preceding(r, n, key)?
        };
        hops += 1;
        if pts[next].node != pts[n].node {
            messages += 1;
        }
        n = next;
        visit(n);
    }
    Ok(Route {
        owner,
        hops,
        messages,
    })
}

/// [`route_with`] without the visits.
pub fn route(r: &VRing<'_>, from: usize, key: u32) -> Result<Route, VnodeError> {
    route_with(r, from, key, |_| {})
}

#[cfg(test)]
mod tests {
    use super::super::vnodes::{reduce, Point};
    use super::super::NodeId;
    use super::*;

    fn p(ident: u32, n: u16) -> Point {
        Point {
            ident,
            node: NodeId(n),
        }
    }

    /// Every identifier of a 4-bit circle is a point: fingers are exactly `n + 2^i`, and
    /// 0 → 13 goes 0 → 8 → 12 → 13.
    #[test]
    fn a_full_circle_routes_by_powers_of_two() {
        let mut pts: [Point; 16] = core::array::from_fn(|i| p(i as u32, i as u16));
        let r = VRing::new(4, &mut pts).unwrap();
        assert_eq!(
            [0, 1, 2, 3].map(|i| finger(&r, 5, i).unwrap()),
            [6, 7, 9, 13]
        );
        let mut seen = [0usize; 8];
        let mut k = 0;
        let rt = route_with(&r, 0, 13, |x| {
            seen[k] = x;
            k += 1;
        })
        .unwrap();
        assert_eq!(&seen[..k], &[0, 8, 12, 13]);
        assert_eq!(
            rt,
            Route {
                owner: 13,
                hops: 3,
                messages: 3
            }
        );
        assert_eq!(route_with(&r, 4, 4, |_| {}).unwrap().hops, 0, "own key");
        assert_eq!(finger(&r, 0, 4).err(), Some(VnodeError::BadBits(4)));
        assert_eq!(route(&r, 16, 1).err(), Some(VnodeError::NoSuchPoint(16)));
        assert_eq!(route(&r, 0, 16).err(), Some(VnodeError::OutsideCircle(16)));
    }

    /// From every point to every key of sparse rings: the route ends at `lookup`'s owner,
    /// every forward but the last (to the owner, at or after the key) is strictly closer
    /// to the key, at most `bits + 1` hops, at least one
    /// when the start is not the owner.
    #[test]
    fn every_route_ends_at_the_owner_within_bits_plus_one_hops() {
        for (bits, count) in [(6u8, 1usize), (6, 2), (6, 9), (8, 23), (10, 40), (32, 40)] {
            let mut pts = [p(0, 0); 40];
            for (i, x) in pts.iter_mut().enumerate().take(count) {
                *x = Point::of(NodeId(i as u16), b"f", i as u32, bits);
            }
            let r = VRing::new(bits, &mut pts[..count]).unwrap();
            let len = r.points().len();
            let mut max = 0;
            for k in 0..512u32 {
                let key = reduce(k.wrapping_mul(0x9E37_79B9) ^ k, bits);
                for from in 0..len {
                    let mut last: Option<u32> = None;
                    let mut ok = true;
                    let owner = r.successor_index(key).unwrap();
                    let rt = route_with(&r, from, key, |x| {
                        if x == owner {
                            return;
                        }
                        let d = r.dist(r.points()[x].ident, key);
                        if let Some(l) = last {
                            ok &= d < l;
                        }
                        last = Some(d);
                    })
                    .unwrap();
                    assert!(ok, "bits {bits}: a forward not closer to {key}");
                    assert_eq!(rt.owner, owner);
                    assert!(rt.hops <= bits as u32 + 1, "{rt:?}");
                    assert_eq!(rt.hops == 0, from == rt.owner);
                    assert_eq!(rt.messages, rt.hops, "one point per node");
                    max = max.max(rt.hops);
                }
            }
            assert!(count < 9 || max >= 2, "fingers used: max {max} hops");
        }
    }

    /// A forward between two points of one node is not a message.
    #[test]
    fn forwards_within_a_node_are_not_messages() {
        let mut pts = [p(0, 0), p(16, 0), p(32, 1), p(48, 1)];
        let r = VRing::new(6, &mut pts).unwrap();
        // 0 → 16 (node 0 to node 0) → 32 (node 1): key 20 is 32's.
        let rt = route(&r, 0, 20).unwrap();
        assert_eq!(
            rt,
            Route {
                owner: 2,
                hops: 2,
                messages: 1
            }
        );
        let rt = route(&r, 0, 60).unwrap();
        assert_eq!(rt.owner, 0);
        let rt = route(&r, 2, 10).unwrap();
        assert_eq!((rt.owner, rt.hops, rt.messages), (1, 2, 1), "32 → 0 → 16");
    }
}
