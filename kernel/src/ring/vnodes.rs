//! Virtual nodes on a circle of up to 32 bits: many points per node, for rings larger than
//! the 16 slots of [`Ring`](super::Ring) (load balance and movement for 8 … 1,024 nodes
//! with and without virtual nodes: `docs/benchmarks.md`, "Placement at 8 … 1,024 nodes
//! (simulator)").
//!
//! - [`hash32`]: the placement hash of [`ring::hash`](super::circle::hash) before its
//!   reduction — FNV-1a 32 then `fmix32` — so `hash(b, m)` is the low `m` bits of
//!   `hash32(b)` (a unit test checks it for every `m`);
//! - [`point_ident`]: virtual node `v` of the node called `name`: `v = 0` is the node's own
//!   identifier `hash32(name)` (where [`Ring`](super::Ring) places a slot named `name`),
//!   `v > 0` is `hash32(name ++ "#" ++ decimal(v))`;
//! - [`VRing`]: the points sorted on the circle, borrowed from the caller (no heap, any
//!   number of points), and the seed's lookup rule (section 2.1: "assigned to the first
//!   node whose identifier is equal to or follows o") over them. Two points with one
//!   identifier: the one of the lower node id owns it (the order in which
//!   [`Ring::successor`](super::Ring::successor) breaks a tie), the other is *shadowed*
//!   (it owns nothing) and is removed when the ring is built.
//!
//! Finger-table routing over these points is in [`super::fingers`].

use super::{placement_key, NodeId};

/// Why a virtual-node ring cannot be built or asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VnodeError {
    /// `bits` is 0 or above 32.
    BadBits(u8),
    /// No points.
    Empty,
    /// An identifier or key not below `2^bits`.
    OutsideCircle(u32),
    /// A point index not below the number of points.
    NoSuchPoint(usize),
}

impl core::fmt::Display for VnodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VnodeError::BadBits(b) => write!(f, "{b} bits: need 1 ≤ bits ≤ 32"),
            VnodeError::Empty => write!(f, "a ring needs at least one point"),
            VnodeError::OutsideCircle(x) => write!(f, "{x} is outside the identifier circle"),
            VnodeError::NoSuchPoint(i) => write!(f, "no point {i}"),
        }
    }
}

const FNV_BASIS: u32 = 2_166_136_261;
const FNV_PRIME: u32 = 16_777_619;

fn fnv(mut h: u32, bytes: &[u8]) -> u32 {
    for b in bytes {
        h ^= *b as u32;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// FNV-1a 32 of `bytes`, then MurmurHash3's `fmix32`: the placement hash
/// [`ring::hash`](super::circle::hash) without its reduction to `m` bits.
pub fn hash32(bytes: &[u8]) -> u32 {
    fmix32(fnv(FNV_BASIS, bytes))
}

/// The low `bits` bits of `x` (`bits` ≥ 32: all of them).
pub fn reduce(x: u32, bits: u8) -> u32 {
    if bits >= 32 {
        x
    } else {
        x & ((1u32 << bits) - 1)
    }
}

/// The lock key of `path` on a `bits`-bit circle: [`hash32`] of its
/// [`placement_key`] (the top-level path element), reduced.
pub fn key32(path: &str, bits: u8) -> u32 {
    reduce(hash32(placement_key(path).as_bytes()), bits)
}

/// The identifier of virtual node `v` of the node called `name` (full 32 bits; reduce it
/// with [`reduce`] for a smaller circle): `hash32(name)` for `v = 0`,
/// `hash32(name ++ "#" ++ decimal(v))` otherwise.
pub fn point_ident(name: &[u8], v: u32) -> u32 {
    if v == 0 {
        return hash32(name);
    }
    let mut digits = [0u8; 10];
    let mut n = v;
    let mut len = 0;
    while n > 0 {
        digits[len] = b'0' + (n % 10) as u8;
        n /= 10;
        len += 1;
    }
    digits[..len].reverse();
    let h = fnv(fnv(FNV_BASIS, name), b"#");
    fmix32(fnv(h, &digits[..len]))
}

/// One virtual node: an identifier on the circle and the node it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Point {
    /// Its identifier (below `2^bits`).
    pub ident: u32,
    /// The node.
    pub node: NodeId,
}

impl Point {
    /// Virtual node `v` of node `node` called `name` on a `bits`-bit circle.
    pub fn of(node: NodeId, name: &[u8], v: u32, bits: u8) -> Point {
        Point {
            ident: reduce(point_ident(name, v), bits),
            node,
        }
    }
}

/// Points on a `bits`-bit circle, sorted by identifier, no two with one identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VRing<'a> {
    bits: u8,
    points: &'a [Point],
    shadowed: usize,
}

impl<'a> VRing<'a> {
    /// Sorts `points` (by identifier, then node) and keeps, of the points sharing an
    /// identifier, the one of the lowest node; the ring is the prefix of `points` that
    /// remains. On error `points` is untouched.
    pub fn new(bits: u8, points: &'a mut [Point]) -> Result<VRing<'a>, VnodeError> {
        if bits == 0 || bits > 32 {
            return Err(VnodeError::BadBits(bits));
        }
        if points.is_empty() {
            return Err(VnodeError::Empty);
        }
        if let Some(p) = points.iter().find(|p| reduce(p.ident, bits) != p.ident) {
            return Err(VnodeError::OutsideCircle(p.ident));
        }
        points.sort_unstable();
        let mut kept = 1;
        for i in 1..points.len() {
            if points[i].ident != points[kept - 1].ident {
                points[kept] = points[i];
                kept += 1;
            }
        }
        let shadowed = points.len() - kept;
        Ok(VRing {
            bits,
            points: &points[..kept],
            shadowed,
        })
    }

    /// The circle's bits.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// The points, sorted by identifier.
    pub fn points(&self) -> &'a [Point] {
        self.points
    }

    /// Points removed because another point of a lower node had their identifier.
    pub fn shadowed(&self) -> usize {
        self.shadowed
    }

    /// `x` is on the circle.
    pub fn check(&self, x: u32) -> Result<(), VnodeError> {
        if reduce(x, self.bits) == x {
            Ok(())
        } else {
            Err(VnodeError::OutsideCircle(x))
        }
    }

    /// The index of the first point whose identifier is equal to or follows `x`.
    pub fn successor_index(&self, x: u32) -> Result<usize, VnodeError> {
        self.check(x)?;
        let i = self.points.partition_point(|p| p.ident < x);
        Ok(if i == self.points.len() { 0 } else { i })
    }

    /// `lookup(key)`: the node of the first point equal to or following `key`.
    pub fn lookup(&self, key: u32) -> Result<NodeId, VnodeError> {
        Ok(self.points[self.successor_index(key)?].node)
    }

    /// Clockwise distance from `a` to `b` on this circle.
    pub fn dist(&self, a: u32, b: u32) -> u32 {
        reduce(b.wrapping_sub(a), self.bits)
    }

    /// The point at `i`.
    pub fn point(&self, i: usize) -> Result<Point, VnodeError> {
        self.points
            .get(i)
            .copied()
            .ok_or(VnodeError::NoSuchPoint(i))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{hash, Key, Ring, View};
    use super::*;

    #[test]
    fn hash32_reduced_is_the_rings_placement_hash() {
        let names: [&[u8]; 6] = [
            b"",
            b"a",
            b"doc",
            b"lock17",
            b"hilock-ring-slot-3",
            b"\xff\x00",
        ];
        for n in names {
            for m in 1..=16u8 {
                assert_eq!(Key(reduce(hash32(n), m) as u16), hash(n, m), "{n:?} {m}");
            }
        }
        // Published FNV-1a test vector through fmix32 (as in ring.rs).
        assert_eq!(hash32(b""), 0xab3e_7c0b);
        assert_eq!(key32("/doc/ch1", 16), hash(b"doc", 16).0 as u32);
    }

    #[test]
    fn point_zero_is_the_node_and_the_others_hash_the_suffixed_name() {
        assert_eq!(point_ident(b"n1", 0), hash32(b"n1"));
        assert_eq!(point_ident(b"n1", 7), hash32(b"n1#7"));
        assert_eq!(point_ident(b"n1", 1234), hash32(b"n1#1234"));
        assert_eq!(point_ident(b"n", 4_294_967_295), hash32(b"n#4294967295"));
        assert_eq!(
            Point::of(NodeId(2), b"x", 3, 8).ident,
            hash32(b"x#3") & 0xff
        );
    }

    #[test]
    fn bad_rings_are_refused_and_left_untouched() {
        let mut none: [Point; 0] = [];
        assert_eq!(VRing::new(8, &mut none).err(), Some(VnodeError::Empty));
        let p = |ident, n| Point {
            ident,
            node: NodeId(n),
        };
        let mut pts = [p(300, 0), p(5, 1)];
        assert_eq!(VRing::new(0, &mut pts).err(), Some(VnodeError::BadBits(0)));
        assert_eq!(
            VRing::new(33, &mut pts).err(),
            Some(VnodeError::BadBits(33))
        );
        assert_eq!(
            VRing::new(8, &mut pts).err(),
            Some(VnodeError::OutsideCircle(300))
        );
        assert_eq!(pts, [p(300, 0), p(5, 1)], "untouched");
        let r = VRing::new(9, &mut pts).unwrap();
        assert_eq!(r.lookup(512).err(), Some(VnodeError::OutsideCircle(512)));
        assert_eq!(r.point(2).err(), Some(VnodeError::NoSuchPoint(2)));
    }

    /// Ties: the lower node owns the identifier; the other point is removed.
    #[test]
    fn a_shared_identifier_goes_to_the_lower_node() {
        let p = |ident, n| Point {
            ident,
            node: NodeId(n),
        };
        let mut pts = [p(40, 3), p(10, 2), p(40, 1), p(40, 5)];
        let r = VRing::new(6, &mut pts).unwrap();
        assert_eq!(r.points(), &[p(10, 2), p(40, 1)]);
        assert_eq!(r.shadowed(), 2);
        assert_eq!(r.lookup(11).unwrap(), NodeId(1));
        assert_eq!(r.lookup(40).unwrap(), NodeId(1));
        assert_eq!(r.lookup(41).unwrap(), NodeId(2), "wraps");
        assert_eq!(r.lookup(10).unwrap(), NodeId(2));
    }

    /// With one point per node the virtual-node ring places every key of a 16-bit circle
    /// where the kernel's 16-slot [`Ring`] does, for every view of 12 named slots.
    #[test]
    fn one_point_per_node_is_the_kernels_ring() {
        const N: usize = 12;
        let mut names = [[0u8; 2]; N];
        for (i, n) in names.iter_mut().enumerate() {
            *n = [b's', b'a' + i as u8];
        }
        let idents: [u16; N] = core::array::from_fn(|i| hash(&names[i], 16).0);
        let ring = Ring::new(16, idents).unwrap();
        for members in [0b1u16, 0b101, 0b1111_0000_1111, 0xfff, 0b1000_0000_0001] {
            let v = View { epoch: 0, members };
            let mut pts = [Point {
                ident: 0,
                node: NodeId(0),
            }; N];
            let mut len = 0;
            for (i, name) in names.iter().enumerate() {
                if v.has(NodeId(i as u16)) {
                    pts[len] = Point::of(NodeId(i as u16), name, 0, 16);
                    len += 1;
                }
            }
            let vr = VRing::new(16, &mut pts[..len]).unwrap();
            for k in 0..=u16::MAX {
                assert_eq!(
                    vr.lookup(k as u32).ok(),
                    ring.lookup(v, Key(k)),
                    "{members:#b} {k}"
                );
            }
        }
    }

    /// Every key's owner is the brute-force owner: the point at the least clockwise
    /// distance from the key (lowest node on a tie), over 4 nodes × 5 virtual nodes on
    /// small circles (where ties happen).
    #[test]
    fn lookup_is_the_brute_force_successor() {
        for bits in [5u8, 7, 10, 32] {
            let mut pts = [Point {
                ident: 0,
                node: NodeId(0),
            }; 20];
            for n in 0..4u16 {
                for v in 0..5u32 {
                    pts[n as usize * 5 + v as usize] =
                        Point::of(NodeId(n), &[b'n', b'0' + n as u8], v, bits);
                }
            }
            let orig = pts;
            let r = VRing::new(bits, &mut pts).unwrap();
            let keys = (0..2048u32).map(|k| reduce(k.wrapping_mul(0x9E37_79B9), bits));
            for k in keys {
                let best = orig
                    .iter()
                    .min_by_key(|p| (r.dist(k, p.ident), p.node))
                    .unwrap();
                assert_eq!(r.lookup(k).unwrap(), best.node, "bits {bits} key {k}");
            }
        }
    }
}
