//! Criterion benches of the kernel: one `step` per input kind on a warm site, table
//! look-ups, and the size of a site.
//!
//! `cargo bench -p hilock-benches --bench step`. Each iteration steps a fresh clone of a
//! prepared site (`iter_batched_ref`: the clone is made outside the measurement), so only
//! the `step` call is timed. The site sizes are printed and written to
//! `target/criterion/site_sizes.txt`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hilock_benches::scenarios::{self, DefaultOutputs};
use hilock_benches::token::LOCKS;
use hilock_harness::VecSink;
use hilock_kernel::{
    token::tables, DefaultSite, Input, LockId, Mode, Msg, NaimiSite, NodeId, Output, QueueEntry,
    Site,
};
use std::hint::black_box;

fn steps(c: &mut Criterion) {
    let mut g = c.benchmark_group("step");
    for s in scenarios::all() {
        g.bench_function(s.name, |b| {
            b.iter_batched_ref(
                || (s.site.clone(), DefaultOutputs::new()),
                |(site, out)| {
                    site.step(black_box(s.input()), out).expect("step");
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// A token node of an `N`-node system holding R, with node 1 in its copyset (R), and the
/// two messages the scaling bench delivers: a request for R from node `N - 1` (answered by
/// a copy grant, Rule 3.2) and node 1's release (Rule 5.2, then the queue check and the
/// freeze loop). Every per-step cost that scanned all `N` peers shows here.
fn scaling_site<const N: usize>() -> (Site<N, 1, N>, Msg<N>, Msg<N>) {
    let lock = LockId(0);
    let mut s = Site::<N, 1, N>::new(NodeId(0), NodeId(0)).expect("site");
    let mut out = VecSink::new();
    s.step(
        Input::Acquire {
            lock,
            mode: Mode::R,
        },
        &mut out,
    )
    .expect("acquire");
    let req = |from: u16| Msg::Request {
        lock,
        entry: QueueEntry {
            requester: NodeId(from),
            mode: Mode::R,
            serial: 1,
            prio: 0,
        },
        hop: 1,
    };
    s.step(
        Input::Deliver {
            from: NodeId(1),
            msg: &req(1),
        },
        &mut out,
    )
    .expect("request from 1");
    assert!(matches!(out.0.last(), Some(Output::Send { .. })));
    let release = Msg::Release {
        lock,
        owned: Mode::Phi,
        epoch: 1,
    };
    (s, req(N as u16 - 1), release)
}

fn scaling_at<const N: usize>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
) {
    let (site, req, release) = scaling_site::<N>();
    for (name, from, msg) in [
        ("request_copy_grant", NodeId(N as u16 - 1), &req),
        ("release_from_child", NodeId(1), &release),
    ] {
        g.bench_function(format!("{name}/n={N}"), |b| {
            b.iter_batched_ref(
                || (site.clone(), VecSink(Vec::with_capacity(8))),
                |(site, out)| {
                    site.step(black_box(Input::Deliver { from, msg }), out)
                        .expect("step");
                },
                BatchSize::LargeInput,
            )
        });
    }
}

/// Step cost against the number of nodes (the aim: ≤ 2× from 8 to 1,024 nodes;
/// `docs/benchmarks.md`, "Step cost against the number of nodes").
fn scaling(c: &mut Criterion) {
    let mut g = c.benchmark_group("step_scaling");
    scaling_at::<8>(&mut g);
    scaling_at::<64>(&mut g);
    scaling_at::<1024>(&mut g);
    g.finish();
}

fn lookups(c: &mut Criterion) {
    let mut g = c.benchmark_group("tables");
    let pairs: Vec<(Mode, Mode)> = Mode::ALL
        .iter()
        .flat_map(|&a| Mode::REQUESTABLE.iter().map(move |&b| (a, b)))
        .collect();
    let n = pairs.len() as u64;
    g.throughput(criterion::Throughput::Elements(n));
    g.bench_function("all_30_cells_table_2_1", |b| {
        b.iter(|| {
            pairs
                .iter()
                .filter(|&&(h, r)| tables::table_2_1(black_box(h), black_box(r)))
                .count()
        })
    });
    g.bench_function("all_30_cells_table_2_2_grantable", |b| {
        b.iter(|| {
            pairs
                .iter()
                .filter(|&&(h, r)| tables::grantable(black_box(h), black_box(r)))
                .count()
        })
    });
    g.bench_function("all_30_cells_table_2_3_queue_or_forward", |b| {
        b.iter(|| {
            pairs
                .iter()
                .filter(|&&(h, r)| {
                    tables::queue_or_forward(black_box(h), black_box(r))
                        == tables::QueueOrForward::Forward
                })
                .count()
        })
    });
    g.bench_function("all_30_cells_table_2_4_frozen_by", |b| {
        b.iter(|| {
            pairs
                .iter()
                .map(|&(h, r)| tables::frozen_by(black_box(h), black_box(r)).bits() as u32)
                .sum::<u32>()
        })
    });
    g.finish();
}

fn sizes() {
    let lines = [
        format!(
            "DefaultSite = Site<8, 4, 8>: {} bytes",
            std::mem::size_of::<DefaultSite>()
        ),
        format!(
            "Msg<8>: {} bytes; Outputs<Msg<8>, 26>: {} bytes",
            std::mem::size_of::<Msg<8>>(),
            std::mem::size_of::<DefaultOutputs>()
        ),
        format!(
            "simulator site Site<16, {LOCKS}, 16>: {} bytes",
            std::mem::size_of::<Site<16, LOCKS, 16>>()
        ),
        format!(
            "simulator site Site<128, {LOCKS}, 128>: {} bytes",
            std::mem::size_of::<Site<128, LOCKS, 128>>()
        ),
        format!(
            "simulator site Site<1024, {LOCKS}, 1024>: {} bytes",
            std::mem::size_of::<Site<1024, LOCKS, 1024>>()
        ),
        format!(
            "NaimiSite<8, 4>: {} bytes",
            std::mem::size_of::<NaimiSite<8, 4>>()
        ),
    ];
    let text = lines.join("\n") + "\n";
    eprint!("site sizes:\n{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("site_sizes.txt"), text);
    }
}

fn all(c: &mut Criterion) {
    sizes();
    steps(c);
    scaling(c);
    lookups(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
