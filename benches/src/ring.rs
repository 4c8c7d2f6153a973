//! Placement figures of the ring engine (`docs/benchmarks.md`, "Placement at 8 … 1,024
//! nodes (simulator)"): load balance, keys moved per join and leave, and lookup hops —
//! measured with the kernel's placement hash and lookup rule
//! ([`hilock_kernel::ring::vnodes`]) and its finger routing
//! ([`hilock_kernel::ring::fingers`]); nothing here places a key itself.
//!
//! - Nodes are named `hilock-ring-slot-<i>` (as the runtime's ring names its slots); node
//!   `i`'s virtual node `v` is [`Point::of`]; lock `j` is the path `/lock<j>/x`, placed by
//!   its top-level element through [`key32`].
//! - The circle has [`BITS`] = 32 bits (the kernel's 16-slot [`Ring`](hilock_kernel::ring::Ring)
//!   has 16; a 16-bit circle cannot hold 1,024 × 128 distinct points).

use hilock_kernel::ring::fingers::route;
use hilock_kernel::ring::vnodes::{key32, Point, VRing, VnodeError};
use hilock_kernel::NodeId;

/// Bits of the identifier circle.
pub const BITS: u8 = 32;

/// The name of node `i`.
pub fn node_name(i: usize) -> String {
    format!("hilock-ring-slot-{i}")
}

/// The keys of `k` locks `/lock0/x` … on the circle.
pub fn lock_keys(k: usize) -> Vec<u32> {
    (0..k)
        .map(|j| key32(&format!("/lock{j}/x"), BITS))
        .collect()
}

/// The `v` points of each node in `nodes`.
pub fn points(nodes: &[usize], v: u32) -> Vec<Point> {
    let mut p = Vec::with_capacity(nodes.len() * v as usize);
    for &i in nodes {
        let name = node_name(i);
        for j in 0..v {
            p.push(Point::of(NodeId(i as u16), name.as_bytes(), j, BITS));
        }
    }
    p
}

/// The owner (node index) of every key, in a ring of `nodes` with `v` points each; and the
/// number of shadowed points.
pub fn owners(nodes: &[usize], v: u32, keys: &[u32]) -> Result<(Vec<u16>, usize), VnodeError> {
    let mut pts = points(nodes, v);
    let ring = VRing::new(BITS, &mut pts)?;
    let own = keys
        .iter()
        .map(|k| ring.lookup(*k).map(|n| n.0))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((own, ring.shadowed()))
}

/// Keys per node.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Balance {
    /// Nodes.
    pub n: usize,
    /// Points per node.
    pub v: u32,
    /// Keys.
    pub keys: usize,
    /// Fewest keys on a node.
    pub min: usize,
    /// Keys / nodes.
    pub mean: f64,
    /// Most keys on a node.
    pub max: usize,
    /// max / mean.
    pub max_over_mean: f64,
    /// Points lost to identifier collisions.
    pub shadowed: usize,
}

/// Keys per node for nodes `0..n`, `v` points each.
pub fn balance(n: usize, v: u32, keys: &[u32]) -> Result<Balance, VnodeError> {
    let nodes: Vec<usize> = (0..n).collect();
    let (own, shadowed) = owners(&nodes, v, keys)?;
    let mut count = vec![0usize; n];
    for o in own {
        count[o as usize] += 1;
    }
    let min = count.iter().copied().min().unwrap_or(0);
    let max = count.iter().copied().max().unwrap_or(0);
    let mean = keys.len() as f64 / n as f64;
    Ok(Balance {
        n,
        v,
        keys: keys.len(),
        min,
        mean,
        max,
        max_over_mean: max as f64 / mean,
        shadowed,
    })
}

/// Keys moved by joins and leaves at one size.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Movement {
    /// Nodes before a join (and before a leave).
    pub n: usize,
    /// Points per node.
    pub v: u32,
    /// Keys.
    pub keys: usize,
    /// Joins measured.
    pub joins: usize,
    /// Mean keys moved by a join.
    pub join_mean: f64,
    /// Most keys moved by one join.
    pub join_max: usize,
    /// K / (n + 1): a joiner's fair share.
    pub join_share: f64,
    /// Leaves measured.
    pub leaves: usize,
    /// Mean keys moved by a leave.
    pub leave_mean: f64,
    /// Most keys moved by one leave.
    pub leave_max: usize,
    /// K / n: a leaver's fair share.
    pub leave_share: f64,
}

/// The keys whose owner differs between `before` and `after`; an error names a key that
/// moved between two nodes of which neither is `changed` (consistent hashing moves only
/// the joiner's or leaver's keys), or a joiner/leaver that kept a key it should not have.
pub fn moved(before: &[u16], after: &[u16], changed: u16, join: bool) -> Result<usize, String> {
    let mut moved = 0;
    for (j, (b, a)) in before.iter().zip(after).enumerate() {
        let ok = if join {
            *b != changed && (*a == *b || *a == changed)
        } else {
            *a != changed && (*a == *b || *b == changed)
        };
        if !ok {
            return Err(format!(
                "key {j}: {b} -> {a} on the {} of {changed}",
                if join { "join" } else { "leave" }
            ));
        }
        moved += usize::from(a != b);
    }
    Ok(moved)
}

/// `trials` joins (each of a new node `n + t` into nodes `0..n`) and `trials` leaves (each
/// of node `t·n/trials` from nodes `0..n`), each measured against the same ring of `n`.
pub fn movement(n: usize, v: u32, keys: &[u32], trials: usize) -> Result<Movement, String> {
    let e = |e: VnodeError| e.to_string();
    let base: Vec<usize> = (0..n).collect();
    let (own, _) = owners(&base, v, keys).map_err(e)?;
    let (mut js, mut jmax) = (0usize, 0usize);
    for t in 0..trials {
        let joiner = n + t;
        let mut nodes = base.clone();
        nodes.push(joiner);
        let (after, _) = owners(&nodes, v, keys).map_err(e)?;
        let m = moved(&own, &after, joiner as u16, true)?;
        js += m;
        jmax = jmax.max(m);
    }
    let leaves = trials.min(n.saturating_sub(1));
    let (mut ls, mut lmax) = (0usize, 0usize);
    for t in 0..leaves {
        let leaver = t * n / leaves.max(1);
        let nodes: Vec<usize> = base.iter().copied().filter(|&i| i != leaver).collect();
        let (after, _) = owners(&nodes, v, keys).map_err(e)?;
        let m = moved(&own, &after, leaver as u16, false)?;
        ls += m;
        lmax = lmax.max(m);
    }
    let k = keys.len() as f64;
    Ok(Movement {
        n,
        v,
        keys: keys.len(),
        joins: trials,
        join_mean: js as f64 / trials.max(1) as f64,
        join_max: jmax,
        join_share: k / (n + 1) as f64,
        leaves,
        leave_mean: ls as f64 / leaves.max(1) as f64,
        leave_max: lmax,
        leave_share: k / n as f64,
    })
}

/// Messages for a request to reach its key's service node.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hops {
    /// Nodes (one point each).
    pub n: usize,
    /// Identifier bits `m`.
    pub m: u8,
    /// Requests routed.
    pub requests: usize,
    /// Finger tables: mean messages node to node until the owner has the request.
    pub finger_mean: f64,
    /// Finger tables: median.
    pub finger_p50: u32,
    /// Finger tables: 99th percentile.
    pub finger_p99: u32,
    /// Finger tables: most.
    pub finger_max: u32,
    /// ½·log2(n), Chord's expected path length.
    pub half_log2_n: f64,
    /// Full membership view: mean messages (1, or 0 when the requester is the owner).
    pub full_view_mean: f64,
    /// Full membership view: most.
    pub full_view_max: u32,
}

/// Routes a request for each key from node `(j · 7919) mod n` (one point per node): with
/// finger tables, and with a full membership view (straight to the owner).
pub fn hops(n: usize, keys: &[u32]) -> Result<Hops, VnodeError> {
    let nodes: Vec<usize> = (0..n).collect();
    let mut pts = points(&nodes, 1);
    let ring = VRing::new(BITS, &mut pts)?;
    let len = ring.points().len();
    let mut hist: Vec<usize> = Vec::new();
    let (mut fsum, mut vsum, mut vmax) = (0u64, 0u64, 0u32);
    for (j, k) in keys.iter().enumerate() {
        let from = (j * 7919) % len;
        let r = route(&ring, from, *k)?;
        let owner = ring.points()[r.owner].node;
        let direct = u32::from(owner != ring.points()[from].node);
        fsum += r.messages as u64;
        vsum += direct as u64;
        vmax = vmax.max(direct);
        let h = r.messages as usize;
        if hist.len() <= h {
            hist.resize(h + 1, 0);
        }
        hist[h] += 1;
    }
    let q = |p: f64| {
        let mut acc = 0;
        for (h, c) in hist.iter().enumerate() {
            acc += c;
            if acc as f64 >= p * keys.len() as f64 && acc > 0 {
                return h as u32;
            }
        }
        0
    };
    let req = keys.len().max(1) as f64;
    Ok(Hops {
        n,
        m: BITS,
        requests: keys.len(),
        finger_mean: fsum as f64 / req,
        finger_p50: q(0.5),
        finger_p99: q(0.99),
        finger_max: hist.len().saturating_sub(1) as u32,
        half_log2_n: 0.5 * (n as f64).log2(),
        full_view_mean: vsum as f64 / req,
        full_view_max: vmax,
    })
}
