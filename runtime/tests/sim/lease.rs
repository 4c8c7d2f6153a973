//! Leased seeds: the simulated nodes run with etcd membership on the simulation's stand-in
//! for etcd (`hilock_runtime::leases::sim::Etcd`, [`Node::start_sim_leased`]), so that the
//! lease path of `runtime/src/token/lease.rs` runs: each node's lease kept alive by the
//! keep-alive loop etcd's membership runs, lost for good when no renewal comes back
//! within the local lease, and peers whose member key the stand-in deletes gone.
//!
//! A leased seed is the plan of the same seed with the lease faults added: one or two cuts
//! of a node from the stand-in (its renewals wait unanswered, its member view falls
//! behind), long enough to lose its lease in most seeds; a paused node is cut from it too.
//! Its clients space their operations and hold longer, so that holds are live when a
//! lease ends. A holder watches its node's lease ([`Node::lease`]) and stops holding —
//! the history checker's hold ends — as soon as the lease is lost or its local lease
//! (`until`) has passed: it is told its lock is lost.
//!
//! Checked besides the plain seeds' checks: no lock is handed out by a node whose lease
//! has ended (lost, or `until` passed), and every hold ends at least the grace before the
//! stand-in expires its node's lease (`docs/faults.md`, "Leases: kill before regrant": a
//! successor may be granted the lock once the lease has expired at etcd). Requests may
//! fail by the lease (refused: the node's lease is lost) or by a peer gone.

use std::time::Duration;

use hilock_runtime::leases::sim::{Ended, Etcd, LeaseEnd};
use hilock_runtime::token::NodeLease;
use hilock_runtime::{Config, Node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Fault, Plan};

/// The lease TTL of the nodes on the stand-in (the least a configuration allows).
pub const TTL_S: u32 = 2;

/// The grace of the nodes on the stand-in (`etcd_grace_ms`).
pub const GRACE: Duration = Duration::from_millis(300);

/// The leased plan of `seed`: the plain plan with one or two cuts from the stand-in.
pub fn plan(seed: u64) -> Plan {
    let mut p = Plan::of(seed);
    p.leased = true;
    let mut r = StdRng::seed_from_u64(seed ^ 0x1ea5_ed00_u64);
    for _ in 0..r.random_range(1..=2) {
        // After the nodes have joined (a node cut before it joins does not start).
        let at = Duration::from_millis(r.random_range(20..=500));
        let lasts = Duration::from_millis(r.random_range(300..=2_500));
        p.faults
            .push((at, lasts, Fault::EtcdCut(r.random_range(0..p.n))));
    }
    p.faults.sort_by_key(|f| f.0);
    p
}

/// A node's configuration on the stand-in: etcd membership with [`TTL_S`] and [`GRACE`]
/// (its endpoint is not used).
pub fn configure(c: &mut Config) {
    c.membership = hilock_runtime::config::Membership::Etcd {
        endpoints: vec!["simulated".into()],
        ttl_s: TTL_S,
        grace: GRACE,
    };
}

/// Starts node `c` on the stand-in.
pub async fn start(c: Config, seed: u64, etcd: Etcd) -> std::io::Result<Node> {
    Node::start_sim_leased(c, seed, etcd).await
}

/// How long a client of a leased seed waits before an operation and holds a lock, at most
/// (a plain seed's: 8 ms and 12 ms).
pub const SPACING: (u64, u64) = (60_000, 90_000);

/// Whether `node`'s lease lets it hand a lock out now (`Err` says why not): not lost, and
/// its local lease not passed (judged here, not by `NodeLease::check`).
pub fn live(node: &Node) -> Result<(), String> {
    match &*node.handle().lease().borrow() {
        NodeLease::Static => Ok(()),
        NodeLease::Valid { until, .. } if tokio::time::Instant::now() < *until => Ok(()),
        NodeLease::Valid { until, lease, .. } => Err(format!(
            "the local lease of {lease:#x} had ended {:?} before",
            tokio::time::Instant::now() - *until
        )),
        NodeLease::Lost { reason } => Err(format!("the lease was lost ({reason})")),
    }
}

/// Resolves when `node`'s lease is lost or its local lease has passed unrenewed: a holder
/// of the node is told its lock is lost.
pub async fn lost(node: &Node) {
    let mut rx = node.handle().lease();
    loop {
        let until = match &*rx.borrow_and_update() {
            NodeLease::Valid { until, .. } => *until,
            NodeLease::Lost { .. } => return,
            NodeLease::Static => return std::future::pending().await,
        };
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(until) => return,
            r = rx.changed() => {
                if r.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// One hold of a leased seed: node, lease id, granted and ended in simulated time.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub node: usize,
    pub lease: i64,
    pub op: u64,
    pub granted: Duration,
    pub ended: Duration,
}

/// The lease id `node` holds now (0 when it has none).
pub fn lease_id(node: &Node) -> i64 {
    match &*node.handle().lease().borrow() {
        NodeLease::Valid { lease, .. } => *lease,
        _ => 0,
    }
}

/// The first hold that did not end the grace before the stand-in expired its node's
/// lease ("kill before regrant").
pub fn check(holds: &[Hold], ended: &[LeaseEnd]) -> Result<(), String> {
    for e in ended.iter().filter(|e| e.how == Ended::Expired) {
        for h in holds.iter().filter(|h| h.lease == e.lease) {
            if h.ended + GRACE > e.at {
                return Err(format!(
                    "n{} op {} held from {:?} to {:?}, but its lease {:#x} expired at the \
                     simulated etcd at {:?}: the hold did not end the grace ({GRACE:?}) \
                     before",
                    h.node, h.op, h.granted, h.ended, e.lease, e.at
                ));
            }
        }
    }
    Ok(())
}

/// `Node::start_sim_leased` runs etcd membership without recovery: it refuses a static
/// configuration and one with `etcd_recovery`.
#[test]
fn a_node_on_the_simulated_etcd_needs_etcd_membership_without_recovery() {
    let mut sim = turmoil::Builder::new().build();
    sim.client("n0", async {
        let c = || {
            let addr = std::net::SocketAddr::new(turmoil::lookup("n0"), super::PORT);
            let mut c = Config::new(
                "sim",
                b"a simulated cluster's secret".to_vec(),
                0,
                vec![hilock_runtime::NodeAddr { id: 0, addr }],
            )?;
            c.listen = std::net::SocketAddr::new([0, 0, 0, 0].into(), super::PORT);
            Ok::<_, Box<dyn std::error::Error>>(c)
        };
        let refused = |r: std::io::Result<Node>, what: &str| match r {
            Ok(_) => panic!("{what}: started"),
            Err(e) => e.to_string(),
        };
        let e = refused(start(c()?, 1, Etcd::new()).await, "static");
        assert!(e.contains("membership = \"etcd\""), "{e}");
        let mut r = c()?;
        configure(&mut r);
        r.etcd_recovery = true;
        let e = refused(start(r, 1, Etcd::new()).await, "etcd_recovery");
        assert!(e.contains("etcd_recovery is not simulated"), "{e}");
        let mut ok = c()?;
        configure(&mut ok);
        start(ok, 1, Etcd::new()).await?.shutdown().await;
        Ok(())
    });
    if let Err(e) = sim.run() {
        panic!("{e}");
    }
}
