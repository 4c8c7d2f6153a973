//! The identifier circle: `N` node slots with fixed m-bit identifiers, a [`View`] saying
//! which of them are members, and consistent hashing (seed section 2.1: "Object o is
//! assigned to the first node whose identifier is equal to or follows o").

use super::{ChordError, Key, NodeId};

/// Which node slots are members, and the view's number (hilock's epoch; the paper's Chord
/// ring has no number and keeps 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct View {
    /// Epoch: increases with every membership change.
    pub epoch: u16,
    /// Members: bit `i` is slot `i`.
    pub members: u16,
}

impl View {
    /// Whether `n` is a member.
    pub fn has(self, n: NodeId) -> bool {
        n.0 < 16 && self.members & (1 << n.0) != 0
    }
    /// The next view with `n` added.
    pub fn join(self, n: NodeId) -> View {
        View {
            epoch: self.epoch + 1,
            members: self.members | (1 << (n.0 & 15)),
        }
    }
    /// The next view with `n` removed.
    pub fn leave(self, n: NodeId) -> View {
        View {
            epoch: self.epoch + 1,
            members: self.members & !(1 << (n.0 & 15)),
        }
    }
}

/// The placement hash: FNV-1a, 32 bits (offset basis 2166136261, prime 16777619), of
/// `bytes`, then MurmurHash3's 32-bit finalizer (`fmix32`), reduced to the low `m` bits.
/// Fixed and documented so that every client and server of every build places a lock on
/// the same node; no seed, no randomness.
///
/// The finalizer is needed: FNV-1a's last byte reaches the low bits only through one
/// multiplication by the prime, so names that differ in their last character land
/// `403·Δ` apart in the low 16 bits (`"slot-1"`, `"slot-2"`, … ten identifiers within
/// 4,030 of 65,536), and a ring of such nodes gives one node nearly every key (measured:
/// 9,828 of 10,000 keys on one of 4 nodes; `spec/SPEC.md` 4.1, the row of §2.1).
pub fn hash(bytes: &[u8], m: u8) -> Key {
    Key(super::vnodes::reduce(super::vnodes::hash32(bytes), m.min(16)) as u16)
}

/// A lock's placement key: its top-level path element (`"/doc/ch1/p3"` → `"doc"`), so that
/// every lock of one subtree lives on one node; a path without an element places as `""`.
pub fn placement_key(path: &str) -> &str {
    path.split('/').find(|s| !s.is_empty()).unwrap_or("")
}

/// `N` node slots on an m-bit circle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ring<const N: usize> {
    m: u8,
    idents: [u16; N],
}

impl<const N: usize> Ring<N> {
    /// Slot `i` has identifier `idents[i]` (e.g. `hash` of its address).
    pub fn new(m: u8, idents: [u16; N]) -> Result<Self, ChordError> {
        if m == 0 || m > 16 || N == 0 || N > 16 {
            return Err(ChordError::BadRing);
        }
        let limit = 1u32 << m;
        for (i, a) in idents.iter().enumerate() {
            if *a as u32 >= limit || idents[..i].contains(a) {
                return Err(ChordError::BadRing);
            }
        }
        Ok(Ring { m, idents })
    }

    /// `m`.
    pub fn bits(&self) -> u8 {
        self.m
    }

    /// The identifier of slot `n`.
    pub fn ident(&self, n: NodeId) -> Option<u16> {
        self.idents.get(n.idx()).copied()
    }

    /// The lock key of `path` ([`hash`] of its [`placement_key`]).
    pub fn key_of(&self, path: &str) -> Key {
        hash(placement_key(path).as_bytes(), self.m)
    }

    /// A view is valid: at least one member, all of them slots.
    pub fn check_view(&self, v: View) -> Result<(), ChordError> {
        let all = if N >= 16 { 0xffff } else { (1u16 << N) - 1 };
        if v.members == 0 || v.members & !all != 0 {
            Err(ChordError::BadView)
        } else {
            Ok(())
        }
    }

    /// A key is valid: below `2^m`.
    pub fn check_key(&self, k: Key) -> Result<(), ChordError> {
        if (k.0 as u32) < (1u32 << self.m) {
            Ok(())
        } else {
            Err(ChordError::BadKey(k))
        }
    }

    /// Clockwise distance from `a` to `b`.
    fn dist(&self, a: u16, b: u16) -> u32 {
        (b as u32 + (1u32 << self.m) - a as u32) % (1u32 << self.m)
    }

    /// `successor(x)`: the first member whose identifier is equal to or follows `x`
    /// (`None` for an empty view).
    pub fn successor(&self, v: View, x: u16) -> Option<NodeId> {
        (0..N)
            .filter(|&i| v.has(NodeId(i as u16)))
            .min_by_key(|&i| self.dist(x, self.idents[i]))
            .map(|i| NodeId(i as u16))
    }

    /// `lookup(key)`: the service node of `key` in `v`.
    pub fn lookup(&self, v: View, key: Key) -> Option<NodeId> {
        self.successor(v, key.0)
    }

    /// The member after `n` (itself if alone).
    pub fn next(&self, v: View, n: NodeId) -> Option<NodeId> {
        let x = self.ident(n)?;
        self.successor(v, ((x as u32 + 1) % (1u32 << self.m)) as u16)
    }

    /// The member before `n` (itself if alone).
    pub fn prev(&self, v: View, n: NodeId) -> Option<NodeId> {
        let x = self.ident(n)?;
        (0..N)
            .filter(|&i| v.has(NodeId(i as u16)))
            .min_by_key(|&i| {
                let d = self.dist(self.idents[i], x);
                if d == 0 {
                    1u32 << self.m
                } else {
                    d
                }
            })
            .map(|i| NodeId(i as u16))
    }

    /// The `copies` distinct members that hold `key`: its service node and the members
    /// after it, as a bit set of slots.
    pub fn replicas(&self, v: View, key: Key, copies: u8) -> u16 {
        let mut set = 0u16;
        let mut cur = self.lookup(v, key);
        for _ in 0..copies {
            let Some(n) = cur else { break };
            if set & (1 << n.0) != 0 {
                break;
            }
            set |= 1 << n.0;
            cur = self.next(v, n);
        }
        set
    }

    /// The elementary arc of `key`: the slot whose identifier is the first at or after
    /// `key` among ALL slots (members or not). Every view's ranges are unions of these
    /// arcs, so hand-over is exact by arc.
    pub fn arc_of(&self, key: Key) -> usize {
        (0..N)
            .min_by_key(|&i| self.dist(key.0, self.idents[i]))
            .unwrap_or(0)
    }

    /// The arcs (bit per slot) whose keys `n` holds in `v` with `copies` copies.
    pub fn covered(&self, v: View, n: NodeId, copies: u8) -> u16 {
        let mut arcs = 0u16;
        for i in 0..N {
            if self.replicas(v, Key(self.idents[i]), copies) & (1 << n.0) != 0 {
                arcs |= 1 << i;
            }
        }
        arcs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figure 1 of the seed: m = 6, ten nodes; objects 10 → 14, 24 and 30 → 32, 38 → 38,
    /// 54 → 56.
    #[test]
    fn figure_1_placement() {
        let r = Ring::new(6, [1, 8, 14, 21, 32, 38, 42, 48, 51, 56]).unwrap();
        let v = View {
            epoch: 0,
            members: 0x3ff,
        };
        let at = |k: u16| r.ident(r.lookup(v, Key(k)).unwrap()).unwrap();
        assert_eq!(
            [at(10), at(24), at(30), at(38), at(54), at(57)],
            [14, 32, 32, 38, 56, 1]
        );
        assert_eq!(r.next(v, NodeId(9)), Some(NodeId(0)));
        assert_eq!(r.prev(v, NodeId(0)), Some(NodeId(9)));
        assert_eq!(r.replicas(v, Key(10), 3), 0b11100);
        let alone = View {
            epoch: 0,
            members: 1,
        };
        assert_eq!(r.replicas(alone, Key(10), 3), 1);
        assert_eq!(r.prev(alone, NodeId(0)), Some(NodeId(0)));
    }

    #[test]
    fn the_hash_is_fnv1a_then_fmix32_of_the_top_level_element() {
        // FNV-1a-32("") = 0x811c9dc5, ("a") = 0xe40c292c (published test vectors); fmix32
        // of them (computed independently): 0xab3e7c0b, 0x1a80b1b3.
        assert_eq!(hash(b"", 16), Key(0x7c0b));
        assert_eq!(hash(b"a", 16), Key(0xb1b3));
        assert_eq!(hash(b"a", 6), Key(0x33));
        assert_eq!(hash(b"doc", 16), Key(0x3f32));
        // Names that differ in their last character are spread over the circle.
        let ids: [u16; 10] = core::array::from_fn(|i| hash(&[b's', b'0' + i as u8], 16).0);
        let (lo, hi) = (ids.iter().min().unwrap(), ids.iter().max().unwrap());
        assert!(hi - lo > 32_768, "{ids:?}");
        assert_eq!(placement_key("/doc/ch1/p3"), "doc");
        assert_eq!(placement_key("doc"), "doc");
        assert_eq!(placement_key("//"), "");
        let r = Ring::new(8, [0, 100]).unwrap();
        assert_eq!(r.key_of("/doc/a"), r.key_of("doc/b/c"));
        assert_eq!(r.key_of("/doc"), hash(b"doc", 8));
    }

    #[test]
    fn bad_rings_and_views_are_refused() {
        assert_eq!(Ring::new(0, [1]).err(), Some(ChordError::BadRing));
        assert_eq!(Ring::new(4, [1, 16]).err(), Some(ChordError::BadRing));
        assert_eq!(Ring::new(4, [3, 3]).err(), Some(ChordError::BadRing));
        let r = Ring::new(4, [3, 9]).unwrap();
        assert!(r
            .check_view(View {
                epoch: 0,
                members: 4
            })
            .is_err());
        assert!(r
            .check_view(View {
                epoch: 0,
                members: 0
            })
            .is_err());
        assert!(r.check_key(Key(16)).is_err());
    }

    #[test]
    fn arcs_partition_every_view() {
        let r = Ring::new(6, [8, 21, 32, 48]).unwrap();
        for members in 1u16..16 {
            let v = View { epoch: 0, members };
            for k in 0..64u16 {
                // Every key of an arc has the same service node as the arc's end.
                let a = r.arc_of(Key(k));
                assert_eq!(r.lookup(v, Key(k)), r.lookup(v, Key(r.idents[a])));
            }
            let all: u16 = (0..4)
                .filter(|&i| v.has(NodeId(i)))
                .map(|i| r.covered(v, NodeId(i), 1))
                .fold(0, |a, b| {
                    assert_eq!(a & b, 0, "one service node per arc");
                    a | b
                });
            assert_eq!(all, 0b1111);
        }
    }
}
