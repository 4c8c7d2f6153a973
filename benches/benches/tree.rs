//! Cost of Preston & Prasad tree locking (`hilock_kernel::tree`) against the height of
//! the tree: one `insert_user` + `remove_user` pair on complete trees of height 4..=20
//! (up to 2,097,151 nodes), in two worst cases for the path length:
//!
//! - `demote-promote`: one other user holds the sibling leaf of the requested leaf, so it
//!   owns the whole tree; the insert demotes it level by level down to the last level (h
//!   demotions), the remove promotes it back to the root after looking down the whole path;
//! - `grey-path`: one user in the other subtree at every level, so the path is grey; the
//!   insert counts up h − 1 grey nodes and demotes the parent of the leaf, the remove counts
//!   down and promotes the sibling leaf.
//!
//! Before measuring, it prints the latches each operation takes (the handshake steps).
//! Run: `cargo bench -p hilock-benches --bench tree`.

use criterion::{BenchmarkId, Criterion};
use hilock_kernel::tree::{Op, Outcome, Step, TreeLock, TreeNodeId, TreeVariant, UserId};
use std::hint::black_box;
use std::time::Duration;

/// Room for the complete tree of height 20.
const CAP: usize = (1 << 21) - 1;
type Big = TreeLock<CAP>;

const HEIGHTS: std::ops::RangeInclusive<u32> = 4..=20;
const ME: UserId = UserId(0);

/// The rightmost leaf (path 11…1) and its sibling.
fn target(t: &Big) -> (TreeNodeId, TreeNodeId) {
    let mut w = TreeNodeId(0);
    while let Some(r) = t.right(w) {
        w = r;
    }
    (w, t.sibling(w).expect("height ≥ 1"))
}

fn setup(t: &mut Big, h: u32, scenario: &str) -> TreeNodeId {
    t.set_complete(h).expect("capacity");
    let (w, sib) = target(t);
    match scenario {
        "demote-promote" => {
            t.insert_user(sib, UserId(1)).expect("insert");
        }
        _ => {
            // a user in the other subtree of every node on the path to w
            let path: Vec<TreeNodeId> = t.path(w).collect();
            for (i, n) in path.iter().enumerate().skip(1) {
                let other = t.sibling(*n).expect("not the root");
                let leaf = t.first_leaf(other).expect("leaf");
                t.insert_user(leaf, UserId(1 + i as u16)).expect("insert");
            }
        }
    }
    w
}

/// Latches taken by one operation run step by step.
fn latches(t: &mut Big, mut op: Op) -> u32 {
    loop {
        match op.step(t).expect("step") {
            Step::Progress(p) if p.outcome.is_some() => return op.taken(),
            Step::Progress(_) => {}
            Step::Blocked { .. } => unreachable!("no other operation"),
        }
    }
}

fn benches(c: &mut Criterion, t: &mut Big) {
    println!(
        "tree node: {} bytes; tree of capacity {CAP}: {} MB",
        std::mem::size_of::<hilock_kernel::tree::Node>(),
        std::mem::size_of::<Big>() >> 20
    );
    for scenario in ["demote-promote", "grey-path"] {
        for h in HEIGHTS {
            let w = setup(t, h, scenario);
            let before = t.clone_regions();
            let op = Op::insert(t, w, ME, TreeVariant::HILOCK).expect("op");
            let ins = latches(t, op);
            let op = Op::remove(t, w, ME, TreeVariant::HILOCK).expect("op");
            let rem = latches(t, op);
            assert_eq!(t.clone_regions(), before, "the pair restores the tree");
            println!("latches {scenario} h={h}: insert {ins}, remove {rem}");
        }
    }
    let mut g = c.benchmark_group("tree insert+remove");
    for scenario in ["demote-promote", "grey-path"] {
        for h in HEIGHTS {
            let w = setup(t, h, scenario);
            g.bench_with_input(BenchmarkId::new(scenario, h), &h, |b, _| {
                b.iter(|| {
                    let a = t.insert_user(black_box(w), ME);
                    let r = t.remove_user(black_box(w), ME);
                    debug_assert!(matches!(a, Ok(Outcome::Granted { .. })));
                    black_box((a, r))
                })
            });
        }
    }
    g.finish();
}

trait Regions {
    fn clone_regions(&self) -> Vec<hilock_kernel::tree::Region>;
}
impl Regions for Big {
    fn clone_regions(&self) -> Vec<hilock_kernel::tree::Region> {
        self.regions().collect()
    }
}

fn main() {
    // the tree lives on this thread's stack (the kernel does not allocate)
    let worker = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(|| {
            let mut c = Criterion::default()
                .warm_up_time(Duration::from_millis(300))
                .measurement_time(Duration::from_secs(1))
                .sample_size(20)
                .configure_from_args();
            let mut t = Big::new();
            benches(&mut c, &mut t);
            c.final_summary();
        })
        .expect("spawn");
    worker.join().expect("bench thread");
}
