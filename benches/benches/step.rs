//! Criterion benches of the kernel: one `step` per input kind on a warm site, table
//! look-ups, and the size of a site.
//!
//! `cargo bench -p hilock-benches --bench step`. Each iteration steps a fresh clone of a
//! prepared site (`iter_batched_ref`: the clone is made outside the measurement), so only
//! the `step` call is timed. The site sizes are printed and written to
//! `target/criterion/site_sizes.txt`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use hilock_benches::scenarios::{self, DefaultOutputs};
use hilock_benches::sim::LOCKS;
use hilock_kernel::{tables, DefaultSite, Mode, Msg, NaimiSite, Site};
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
            "DefaultSite = Site<8, 4, 8, 26>: {} bytes",
            std::mem::size_of::<DefaultSite>()
        ),
        format!(
            "Msg<8>: {} bytes; Outputs<Msg<8>, 26>: {} bytes",
            std::mem::size_of::<Msg<8>>(),
            std::mem::size_of::<DefaultOutputs>()
        ),
        format!(
            "simulator site Site<16, {LOCKS}, 16, 47>: {} bytes",
            std::mem::size_of::<Site<16, LOCKS, 16, 47>>()
        ),
        format!(
            "simulator site Site<128, {LOCKS}, 128, 271>: {} bytes",
            std::mem::size_of::<Site<128, LOCKS, 128, 271>>()
        ),
        format!(
            "simulator site Site<1024, {LOCKS}, 1024, 2063>: {} bytes",
            std::mem::size_of::<Site<1024, LOCKS, 1024, 2063>>()
        ),
        format!(
            "NaimiSite<8, 4, 2>: {} bytes",
            std::mem::size_of::<NaimiSite<8, 4, 2>>()
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
    lookups(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
