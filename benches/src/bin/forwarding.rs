//! Issue 19: messages per lock request of hilock with the thesis's forwarding, hilock with
//! compressed forwarding (`Forwarding::Compress`) and Naimi-Trehel (pure, one lock), on
//! the same thesis workload and seed, at 8 … 1,024 nodes — all in one run; plus the
//! per-kind breakdown and the sequential Naimi-Trehel baseline against Lavault's mean
//! H(n − 1) request hops.
//!
//! ```sh
//! cargo run --release -p hilock-benches --bin forwarding -- --out docs/figures
//! ```
//!
//! Options (clap, `--help`): `--out DIR` (default `docs/figures`), `--seed S` (default 1),
//! `--jobs J` (rayon worker threads, default 2), `--per-node K` (measured accesses per
//! node, default 40), `--ratio R` (NCS / CS, default 10), `--latency MS` (mean message
//! latency, default 150), `--sizes a,b,c` (default 8,16,32,64,120,256,512,1024). Writes
//! `forwarding.csv`, `forwarding_messages.svg` and `forwarding_kinds.svg` and prints
//! Markdown tables.

use clap::Parser;
use hilock_benches::plot::{line_chart, Series};
use hilock_benches::sim::{self, Config, CsvRow, Proto, Stats, KIND_NAMES};
use indicatif::ProgressBar;
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

const PROTOS: [Proto; 4] = [
    Proto::Hilock,
    Proto::HilockCompress,
    Proto::HilockPointers,
    Proto::NaimiPure,
];

/// Messages per lock request of the forwarding rules against Naimi-Trehel, 8 … 1,024 nodes.
#[derive(Debug, Parser)]
#[command(name = "forwarding")]
struct Opts {
    /// Output directory.
    #[arg(long, default_value = "docs/figures")]
    out: PathBuf,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Parallel runs (rayon worker threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Measured accesses per node.
    #[arg(long, default_value_t = 40)]
    per_node: u64,
    /// NCS / CS.
    #[arg(long, default_value_t = 10.0)]
    ratio: f64,
    /// Mean message latency (ms).
    #[arg(long = "latency", default_value_t = 150.0)]
    latency_ms: f64,
    /// Node counts (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,32,64,120,256,512,1024"
    )]
    sizes: Vec<usize>,
}

fn main() {
    let mut o = Opts::parse();
    o.jobs = o.jobs.max(1);
    if let Err(e) = real_main(&o) {
        eprintln!("forwarding: {e}");
        std::process::exit(1);
    }
}

/// "mean p50 p90 p99 max" of a histogram (`h[k]` items had value k).
fn hist_summary(h: &[u64]) -> String {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let mean = h.iter().enumerate().map(|(k, c)| k as u64 * c).sum::<u64>() as f64 / total as f64;
    let q = |p: f64| {
        let mut acc = 0;
        for (k, c) in h.iter().enumerate() {
            acc += c;
            if acc as f64 >= p * total as f64 {
                return k;
            }
        }
        h.len() - 1
    };
    format!(
        "{mean:.2} {} {} {} {}",
        q(0.5),
        q(0.9),
        q(0.99),
        h.len() - 1
    )
}

fn real_main(o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let mut cfgs = Vec::new();
    // Largest first, so the long runs do not end up alone at the end.
    let mut sizes = o.sizes.clone();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    for &n in &sizes {
        for proto in PROTOS {
            let mut c = Config::thesis(proto, n, o.ratio, o.per_node, o.seed);
            c.latency_ms = o.latency_ms;
            cfgs.push(c);
        }
    }
    let t = Instant::now();
    let bar = ProgressBar::new(cfgs.len() as u64);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.jobs)
        .build()
        .map_err(|e| e.to_string())?;
    let results: Vec<Result<Stats, String>> = pool.install(|| {
        cfgs.par_iter()
            .map(|c| {
                let r = sim::run(c);
                bar.inc(1);
                r
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut rows = Vec::new();
    for (c, r) in cfgs.into_iter().zip(results) {
        rows.push((
            c,
            r.map_err(|e| format!("{} n={}: {e}", c.proto.name(), c.n))?,
        ));
    }
    rows.sort_by_key(|(c, _)| (c.n, c.proto));
    let elapsed = t.elapsed();

    let csv: Vec<CsvRow> = rows
        .iter()
        .map(|(c, st)| CsvRow::new("forwarding", c, st))
        .collect();
    sim::write_csv(&o.out.join("forwarding.csv"), &csv)?;

    let get = |p: Proto, n: usize| rows.iter().find(|(c, _)| c.proto == p && c.n == n);
    println!(
        "ratio {}, latency {} ms, CS 15 ms, seed {}, {} accesses per node; {} runs in {:.1} s",
        o.ratio,
        o.latency_ms,
        o.seed,
        o.per_node,
        rows.len(),
        elapsed.as_secs_f64()
    );
    println!();
    println!(
        "| n | hilock (thesis) | hilock (compress) | hilock (pointers) | Naimi-Trehel | \
         thesis / Naimi | compress / Naimi | pointers / Naimi | lock requests / access (hilock) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &o.sizes {
        let (Some(h), Some(c), Some(p), Some(nt)) = (
            get(Proto::Hilock, n),
            get(Proto::HilockCompress, n),
            get(Proto::HilockPointers, n),
            get(Proto::NaimiPure, n),
        ) else {
            continue;
        };
        let lr = h.1.lock_requests as f64 / h.1.accesses.max(1) as f64;
        let (h, c, p, nt) = (
            h.1.per_request(),
            c.1.per_request(),
            p.1.per_request(),
            nt.1.per_request(),
        );
        println!(
            "| {n} | {h:.2} | {c:.2} | {p:.2} | {nt:.2} | {:.2} | {:.2} | {:.2} | {lr:.2} |",
            h / nt,
            c / nt,
            p / nt
        );
    }
    println!();
    println!(
        "Per kind (messages per lock request): request (sent by the requester) / forward \
         (request sent on by another node) / grant / token / release / freeze"
    );
    println!();
    println!("| n | protocol | request | forward | grant | token | release | freeze |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for (c, st) in &rows {
        if c.proto == Proto::NaimiPure {
            continue;
        }
        let lr = st.lock_requests.max(1) as f64;
        print!(
            "| {} | {} | {:.3} | {:.3} |",
            c.n,
            c.proto.name(),
            (st.msgs[0] - st.forwards) as f64 / lr,
            st.forwards as f64 / lr
        );
        for k in 1..KIND_NAMES.len() {
            print!(" {:.3} |", st.kind_per_request(k));
        }
        println!();
    }
    println!();
    println!(
        "Journeys: request messages per lock request that sent one (table lock / entry locks: \
         mean, p50, p90, p99, max), and who forwarded (share of forwards sent by an idle \
         relay / a node owning a mode / a pending node / other)"
    );
    println!();
    println!("| n | protocol | table: mean p50 p90 p99 max | entries: mean p50 p90 p99 max | idle | owns | pending | other |");
    println!("|---:|---|---|---|---:|---:|---:|---:|");
    for (c, st) in &rows {
        if c.proto == Proto::NaimiPure {
            continue;
        }
        let fw = st.forwards.max(1) as f64;
        let f = &st.forwards_by_state;
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
            c.n,
            c.proto.name(),
            hist_summary(&st.journey_hops[0]),
            hist_summary(&st.journey_hops[1]),
            f[0] as f64 / fw,
            f[1] as f64 / fw,
            f[2] as f64 / fw,
            f[3] as f64 / fw
        );
    }
    println!();
    println!("Naimi-Trehel, one request at a time from a random node (Lavault's setting):");
    println!();
    println!("| n | messages per CS | H(n − 1) | request hops per CS | H(n) − 1 |");
    println!("|---:|---:|---:|---:|---:|");
    for &n in o.sizes.iter().filter(|&&n| n <= 128) {
        let r = sim::naimi_sequential(n, 20 * n as u64, 40_000, o.seed);
        println!(
            "| {n} | {:.3} | {:.3} | {:.3} | {:.3} |",
            r.messages,
            sim::harmonic(n - 1),
            r.request_hops,
            sim::harmonic(n) - 1.0
        );
    }

    let series = |p: Proto, y: &dyn Fn(&Stats) -> f64| Series {
        label: p.name().to_string(),
        points: rows
            .iter()
            .filter(|(c, _)| c.proto == p)
            .map(|(c, st)| (c.n as f64, y(st)))
            .collect(),
    };
    let s: Vec<Series> = PROTOS
        .iter()
        .map(|&p| series(p, &|st| st.per_request()))
        .collect();
    line_chart(
        &o.out.join("forwarding_messages.svg"),
        &format!(
            "messages per lock request, ratio {} (simulated, one run)",
            o.ratio
        ),
        "nodes",
        "messages / request",
        &s,
        true,
    )?;
    let mut s = Vec::new();
    for p in [Proto::Hilock, Proto::HilockCompress, Proto::HilockPointers] {
        for (k, name) in KIND_NAMES.iter().enumerate() {
            let mut x = series(p, &|st| st.kind_per_request(k));
            x.label = format!("{} {name}", p.name());
            s.push(x);
        }
    }
    line_chart(
        &o.out.join("forwarding_kinds.svg"),
        "messages per lock request by kind",
        "nodes",
        "messages / request",
        &s,
        true,
    )?;
    Ok(())
}
