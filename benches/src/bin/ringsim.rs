//! The ring engine's figures (`docs/benchmarks.md`, "Ring"): load balance, keys moved per
//! join and leave, lookup hops with finger tables against a full view, and the airline
//! workload on the token engine and the ring engine side by side.
//!
//! ```sh
//! cargo run --release -p hilock-benches --bin ringsim -- --out docs/figures
//! ```
//!
//! Options (`--help`): `--sizes` (default 8,16,…,1024), `--vnodes` (points per node,
//! default 1,8,32,128), `--keys K` (default 100,000), `--trials T` (joins and leaves per
//! size, default 16), `--jobs J` (rayon threads, default 2), `--out DIR` (CSV + SVG),
//! `--parts` (which of balance, movement, hops, airline), and for the airline comparison
//! `--airline-sizes` (default 4,8,16), `--ratio`, `--per-node`, `--seed`. Markdown tables on stdout, a
//! progress bar on stderr.

use clap::{Parser, ValueEnum};
use hilock_benches::plot::{line_chart, Series};
use hilock_benches::ring::{self, Balance, Hops, Movement};
use hilock_benches::ringair::{self, RING_KINDS};
use hilock_benches::token::{self, Config, Mix, Proto, KIND_NAMES};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Ring engine figures; writes CSV and SVG, prints Markdown tables.
#[derive(Debug, Parser)]
#[command(name = "ringsim")]
struct Opts {
    /// Output directory of the CSV and SVG files.
    #[arg(long, default_value = "docs/figures")]
    out: PathBuf,
    /// Node counts (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,32,64,128,256,512,1024"
    )]
    sizes: Vec<usize>,
    /// Points (virtual nodes) per node (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    vnodes: Vec<u32>,
    /// Lock names placed.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Joins and leaves measured per size and V.
    #[arg(long, default_value_t = 16)]
    trials: usize,
    /// Parallel jobs (rayon threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Node counts of the airline comparison (the kernel's ring holds at most 16).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16")]
    airline_sizes: Vec<usize>,
    /// Airline: NCS / CS ratio.
    #[arg(long, default_value_t = 10.0)]
    ratio: f64,
    /// Airline: measured accesses per node (at least 2,000 in all).
    #[arg(long, default_value_t = 40)]
    per_node: u64,
    /// Airline: seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Parts to run (comma-separated; default all).
    #[arg(long, value_enum, value_delimiter = ',')]
    parts: Vec<Part>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// Keys per node.
    Balance,
    /// Keys moved per join and leave.
    Movement,
    /// Lookup messages: finger tables vs a full view.
    Hops,
    /// The airline workload on the token engine and the ring engine.
    Airline,
}

fn main() {
    let mut o = Opts::parse();
    if o.parts.is_empty() {
        o.parts = Part::value_variants().to_vec();
    }
    if let Err(e) = real_main(&o) {
        eprintln!("ringsim: {e}");
        std::process::exit(1);
    }
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    if let Ok(s) =
        ProgressStyle::with_template("{msg:>10} [{elapsed_precise}] {bar:40} {pos}/{len}")
    {
        b.set_style(s);
    }
    b.set_message(what.to_string());
    b
}

fn write_csv<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<(), String> {
    let mut w = csv::Writer::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}

fn real_main(o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.jobs.max(1))
        .build()
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let keys = ring::lock_keys(o.keys);
    let grid: Vec<(usize, u32)> = o
        .vnodes
        .iter()
        .flat_map(|&v| o.sizes.iter().map(move |&n| (n, v)))
        .collect();
    let on = |p: Part| o.parts.contains(&p);
    if on(Part::Balance) {
        let b = bar(grid.len(), "balance");
        let rows: Vec<Balance> = pool.install(|| {
            grid.par_iter()
                .map(|&(n, v)| {
                    let r = ring::balance(n, v, &keys).map_err(|e| e.to_string());
                    b.inc(1);
                    r
                })
                .collect::<Result<_, _>>()
        })?;
        b.finish_and_clear();
        println!(
            "### Load balance: {} keys, {}-bit circle\n",
            o.keys,
            ring::BITS
        );
        println!("| nodes | points/node | min | mean | max | max/mean | shadowed points |");
        println!("|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {:.1} | {} | {:.2} | {} |",
                r.n, r.v, r.min, r.mean, r.max, r.max_over_mean, r.shadowed
            );
        }
        println!();
        write_csv(&o.out.join("ring_balance.csv"), &rows)?;
        let series = per_v(o, &rows, |r| (r.n, r.v, r.max_over_mean));
        line_chart(
            &o.out.join("ring_balance.svg"),
            &format!("Ring: max/mean keys per node ({} keys)", o.keys),
            "nodes",
            "max / mean keys per node",
            &series,
            true,
        )?;
    }
    if on(Part::Movement) {
        let b = bar(grid.len(), "movement");
        let rows: Vec<Movement> = pool.install(|| {
            grid.par_iter()
                .map(|&(n, v)| {
                    let r = ring::movement(n, v, &keys, o.trials);
                    b.inc(1);
                    r
                })
                .collect::<Result<_, _>>()
        })?;
        b.finish_and_clear();
        println!(
            "### Keys moved per join and per leave: {} keys, {} joins and up to {} leaves per row\n",
            o.keys, o.trials, o.trials
        );
        println!(
            "| nodes | points/node | join: mean moved | max | K/(n+1) | mean/(K/(n+1)) | leave: mean moved | max | K/n | mean/(K/n) |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {} | {:.1} | {} | {:.1} | {:.2} | {:.1} | {} | {:.1} | {:.2} |",
                r.n,
                r.v,
                r.join_mean,
                r.join_max,
                r.join_share,
                r.join_mean / r.join_share,
                r.leave_mean,
                r.leave_max,
                r.leave_share,
                r.leave_mean / r.leave_share
            );
        }
        println!();
        write_csv(&o.out.join("ring_movement.csv"), &rows)?;
        let mut series = per_v(o, &rows, |r| (r.n, r.v, r.join_mean));
        series.push(Series {
            label: "K/(n+1)".into(),
            points: o
                .sizes
                .iter()
                .map(|&n| (n as f64, o.keys as f64 / (n + 1) as f64))
                .collect(),
        });
        line_chart(
            &o.out.join("ring_movement.svg"),
            &format!("Ring: keys moved per join ({} keys)", o.keys),
            "nodes before the join",
            "keys moved (mean over joins)",
            &series,
            true,
        )?;
    }
    if on(Part::Hops) {
        let b = bar(o.sizes.len(), "hops");
        let req = o.keys.min(20_000);
        let rows: Vec<Hops> = pool.install(|| {
            o.sizes
                .par_iter()
                .map(|&n| {
                    let r = ring::hops(n, &keys[..req]).map_err(|e| e.to_string());
                    b.inc(1);
                    r
                })
                .collect::<Result<_, _>>()
        })?;
        b.finish_and_clear();
        println!(
            "### Messages for a request to reach its service node: {req} requests, m = {}, one point per node\n",
            ring::BITS
        );
        println!("| nodes | finger: mean | p50 | p99 | max | ½·log2 n | full view: mean | max |");
        println!("|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {:.2} | {} | {} | {} | {:.2} | {:.3} | {} |",
                r.n,
                r.finger_mean,
                r.finger_p50,
                r.finger_p99,
                r.finger_max,
                r.half_log2_n,
                r.full_view_mean,
                r.full_view_max
            );
        }
        println!();
        write_csv(&o.out.join("ring_hops.csv"), &rows)?;
        let pts = |f: fn(&Hops) -> f64| rows.iter().map(|r| (r.n as f64, f(r))).collect();
        line_chart(
            &o.out.join("ring_hops.svg"),
            "Ring: messages to reach the service node",
            "nodes",
            "messages per request (mean)",
            &[
                Series {
                    label: "finger tables".into(),
                    points: pts(|r| r.finger_mean),
                },
                Series {
                    label: "½·log2 n".into(),
                    points: pts(|r| r.half_log2_n),
                },
                Series {
                    label: "full view".into(),
                    points: pts(|r| r.full_view_mean),
                },
            ],
            true,
        )?;
    }
    if on(Part::Airline) {
        airline(o, &pool)?;
    }
    eprintln!("ringsim: done in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// One series per V of `(n, y)` points.
fn per_v<T>(o: &Opts, rows: &[T], f: impl Fn(&T) -> (usize, u32, f64)) -> Vec<Series> {
    o.vnodes
        .iter()
        .map(|&v| Series {
            label: format!("V = {v}"),
            points: rows
                .iter()
                .map(&f)
                .filter(|r| r.1 == v)
                .map(|(n, _, y)| (n as f64, y))
                .collect(),
        })
        .collect()
}

/// One engine's row of the airline comparison.
#[derive(Clone, Debug, serde::Serialize)]
struct AirRow {
    engine: &'static str,
    n: usize,
    ratio: f64,
    latency_ms: f64,
    seed: u64,
    accesses: u64,
    lock_requests: u64,
    messages: u64,
    msgs_per_access: f64,
    msgs_per_lock_request: f64,
    latency_ms_mean: f64,
    latency_delays_mean: f64,
    polls: u64,
    breakdown: String,
}

fn airline(o: &Opts, pool: &rayon::ThreadPool) -> Result<(), String> {
    let engines = [
        "token: hilock",
        "token: naimi-same-work",
        "ring: hilock r=2",
    ];
    let jobs: Vec<(usize, usize)> = o
        .airline_sizes
        .iter()
        .flat_map(|&n| (0..engines.len()).map(move |e| (n, e)))
        .collect();
    let b = bar(jobs.len(), "airline");
    let rows: Vec<AirRow> = pool.install(|| {
        jobs.par_iter()
            .map(|&(n, e)| {
                let proto = if e == 1 {
                    Proto::NaimiSame
                } else {
                    Proto::Hilock
                };
                // The mapping the published tables were measured with (`docs/benchmarks.md`,
                // "Airline workload: token engine against the ring (simulator)").
                let cfg = Config {
                    mix: Mix::EntryIntention,
                    ..Config::thesis(proto, n, o.ratio, o.per_node, o.seed)
                };
                let d = cfg.latency_ms;
                let row =
                    |accesses, lock_requests, messages: u64, lat: f64, polls, breakdown| AirRow {
                        engine: engines[e],
                        n,
                        ratio: cfg.ratio,
                        latency_ms: d,
                        seed: cfg.seed,
                        accesses,
                        lock_requests,
                        messages,
                        msgs_per_access: messages as f64 / (accesses as f64).max(1.0),
                        msgs_per_lock_request: messages as f64 / (lock_requests as f64).max(1.0),
                        latency_ms_mean: lat,
                        latency_delays_mean: lat / d,
                        polls,
                        breakdown,
                    };
                let r = if e < 2 {
                    let st = token::run(&cfg)?;
                    let bd = per_access(&KIND_NAMES, &st.msgs, st.accesses);
                    row(
                        st.accesses,
                        st.lock_requests,
                        st.messages(),
                        st.mean_latency_ms(),
                        0,
                        bd,
                    )
                } else {
                    let st = ringair::run(&cfg)?;
                    let bd = per_access(&RING_KINDS, &st.msgs, st.accesses);
                    row(
                        st.accesses,
                        st.lock_requests,
                        st.messages(),
                        st.mean_latency_ms(),
                        st.polls,
                        bd,
                    )
                };
                b.inc(1);
                Ok(r)
            })
            .collect::<Result<_, String>>()
    })?;
    b.finish_and_clear();
    println!(
        "### Airline workload, token engine vs ring engine: NCS/CS {}, CS 15 ms, latency 150 ms ±33 %, {} measured accesses per node (at least 2,000), seed {}\n",
        o.ratio, o.per_node, o.seed
    );
    println!("| nodes | engine | accesses | lock requests | messages/access | messages/lock request | latency (message delays) | polls (whole run) | messages per access by kind |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
            r.n,
            r.engine,
            r.accesses,
            r.lock_requests,
            r.msgs_per_access,
            r.msgs_per_lock_request,
            r.latency_delays_mean,
            r.polls,
            r.breakdown
        );
    }
    println!();
    write_csv(&o.out.join("ring_airline.csv"), &rows)
}

/// Messages of each kind per access, as `kind 1.23, kind 0.45, …`.
fn per_access(kinds: &[&str], msgs: &[u64], accesses: u64) -> String {
    kinds
        .iter()
        .zip(msgs)
        .map(|(k, m)| format!("{k} {:.2}", *m as f64 / accesses.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}
