//! Runs the experiments of the thesis's chapter 4 in the simulator and writes CSV and SVG
//! files next to each figure they reproduce.
//!
//! ```sh
//! cargo run --release -p hilock-benches --bin simulate -- --out docs/figures --mix entry-intention
//! cargo run --release -p hilock-benches --bin simulate -- --out /tmp/fig --quick
//! ```
//!
//! Options (clap; `--help` lists them): `--out DIR` (default `docs/figures`), `--quick`
//! (fewer sizes and accesses), `--seed S` (default 1), `--jobs J` (rayon worker threads,
//! default 2), `--per-node K` (measured accesses per node, default 40, quick 15),
//! `--experiments unprioritized,native-latency,prioritized,lavault,forwarding,constant-concurrency`
//! (default the first three; `linux-cluster` and `ibm-sp` are aliases of the first two,
//! `fig4-3` of the last), `--sizes a,b,c` and `--ratios a,b,c` (of the unprioritized and
//! native-latency experiments), `--concurrency a,b` (Fig. 4.3's levels, default 1,4),
//! `--mix thesis|entry-intention` (which locks an access takes,
//! [`hilock_benches::token::Mix`]); `--experiments bakery` (the bakery against the token
//! engine, with `--bakery-clients`, `--bakery-hold`, `--bakery-poll`; a table on stdout
//! only). Markdown tables of the unprioritized, native-latency, forwarding and Lavault
//! results on stdout. A progress bar (indicatif) on stderr when it is a terminal; CSV
//! through the `csv` crate and serde.

use clap::{Parser, ValueEnum};
use hilock_benches::plot::{line_chart, Series};

use hilock_benches::token::{
    self, Config, CsvRow, Mix, PrioMode, Proto, Stats, KIND_NAMES, MIX, PRIO_LEVELS,
};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The thesis's chapter-4 experiments in the deterministic simulator; writes CSV + SVG.
#[derive(Debug, Parser)]
#[command(name = "simulate")]
struct Opts {
    /// Output directory.
    #[arg(long, default_value = "docs/figures")]
    out: PathBuf,
    /// Fewer sizes and accesses.
    #[arg(long)]
    quick: bool,
    /// Seed of every random stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Parallel runs (rayon worker threads).
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Measured accesses per node (0: 40, quick 15).
    #[arg(long, default_value_t = 0)]
    per_node: u64,
    /// Experiments to run (comma-separated; default: unprioritized, native-latency,
    /// prioritized).
    #[arg(long, value_enum, value_delimiter = ',')]
    experiments: Vec<Experiment>,
    /// Node counts of the unprioritized and native-latency experiments (comma-separated;
    /// default: 2 … 1,024, quick 2 … 256).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Which locks an access takes: `thesis` (default; IR/IW = the table alone in that
    /// mode, R/U/W = one entry under IR/IW on the table) or `entry-intention` (the mapping
    /// the earlier tables were measured with: IR/IW = table in IR/IW + entry in R/W, R/U/W =
    /// the table).
    #[arg(long, value_enum, default_value_t = MixArg::Thesis)]
    mix: MixArg,
    /// Concurrency levels N · CS / NCS of the constant-concurrency experiment (Fig. 4.3;
    /// comma-separated; default 1,4 — the thesis's two levels are lost from its text).
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<f64>,
    /// NCS / CS ratios of the unprioritized and native-latency experiments
    /// (comma-separated; default 1,5,10,25, the thesis's Fig. 4.2).
    #[arg(long, value_delimiter = ',')]
    ratios: Vec<f64>,
    /// Clients of the bakery experiment (comma-separated; default 1,2,4,8,16,31; at most 31).
    #[arg(long, value_delimiter = ',')]
    bakery_clients: Vec<usize>,
    /// Bakery experiment: the critical section, in message delays.
    #[arg(long, default_value_t = 2.0)]
    bakery_hold: f64,
    /// Bakery experiment: the bakery's "sleep a little", in message delays.
    #[arg(long, default_value_t = 2.0)]
    bakery_poll: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MixArg {
    /// [`Mix::Thesis`].
    Thesis,
    /// [`Mix::EntryIntention`].
    EntryIntention,
}

impl MixArg {
    fn mix(self) -> Mix {
        match self {
            MixArg::Thesis => Mix::Thesis,
            MixArg::EntryIntention => Mix::EntryIntention,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Experiment {
    /// Fig. 4.1, the thesis's Linux-cluster setting (section 4.2.1, "3.25 messages"):
    /// CS 15 ms, NCS ratio × 15 ms, simulated latency 150 ms, all ±33.33 %; hilock with
    /// the thesis's forwarding rule (`hilock-thesis`) and both Naimi variants, every
    /// ratio. Alias `linux-cluster`.
    #[value(alias = "linux-cluster")]
    Unprioritized,
    /// Fig. 4.2 and 4.4, the thesis's IBM SP setting (section 4.2.2, "6.5 messages" at
    /// ratio 10): the same with the native interconnect latency, here 50 µs. Alias
    /// `ibm-sp`.
    #[value(alias = "ibm-sp")]
    NativeLatency,
    /// Fig. 4.5–4.7: priorities, PCEP, PIP (`hilock-thesis`) and the prioritized Naimi
    /// baseline.
    Prioritized,
    /// Naimi-Trehel one request at a time from a random node against Lavault's mean
    /// H(n − 1) messages per CS (sizes ≤ 128 of `--sizes`).
    Lavault,
    /// Every forwarding variant of hilock (`hilock` = the default, ClassPointers;
    /// `hilock-thesis`, `hilock-compress`, `hilock-ordered`) and Naimi-Trehel pure, ratio
    /// 10, 150 ms, over `--sizes`.
    Forwarding,
    /// Fig. 4.3, constant concurrency level (section 4.2.2): NCS grown with N so that
    /// N · CS / NCS stays at each `--concurrency` level; the IBM SP setting (50 µs
    /// latency); `hilock-thesis` (thesis rule), `hilock` (ClassPointers) and Naimi pure
    /// over `--sizes`.
    /// Alias `fig4-3`.
    #[value(alias = "fig4-3")]
    ConstantConcurrency,
    /// The bakery (kernel clients over 3 simulated replicas, R = W = 2) against the token
    /// engine, C clients on one lock (acquire, hold, release); a markdown table on stdout,
    /// no files. Not in the default set.
    Bakery,
}

impl Experiment {
    fn name(self) -> &'static str {
        match self {
            Experiment::Unprioritized => "unprioritized",
            Experiment::NativeLatency => "native-latency",
            Experiment::Prioritized => "prioritized",
            Experiment::Lavault => "lavault",
            Experiment::Forwarding => "forwarding",
            Experiment::ConstantConcurrency => "constant-concurrency",
            Experiment::Bakery => "bakery",
        }
    }
}

#[derive(Clone, Debug)]
struct Job {
    exp: &'static str,
    cfg: Config,
    /// The concurrency level N · CS / NCS of a constant-concurrency run (else 0).
    level: f64,
}

fn main() {
    let mut o = Opts::parse();
    if o.per_node == 0 {
        o.per_node = if o.quick { 15 } else { 40 };
    }
    o.jobs = o.jobs.max(1);
    if o.experiments.is_empty() {
        o.experiments = vec![
            Experiment::Unprioritized,
            Experiment::NativeLatency,
            Experiment::Prioritized,
        ];
    }
    if o.sizes.is_empty() {
        o.sizes = sizes(o.quick);
    }
    if o.ratios.is_empty() {
        o.ratios = RATIOS.to_vec();
    }
    if o.concurrency.is_empty() {
        o.concurrency = vec![1.0, 4.0];
    }
    if o.experiments.contains(&Experiment::Bakery) {
        if let Err(e) = bakery(&o) {
            eprintln!("simulate: {e}");
            std::process::exit(1);
        }
        o.experiments.retain(|e| *e != Experiment::Bakery);
        if o.experiments.is_empty() {
            return;
        }
    }
    if let Err(e) = real_main(&o) {
        eprintln!("simulate: {e}");
        std::process::exit(1);
    }
}

/// The bakery experiment ([`hilock_benches::bakery`]): one row per client count, run in
/// parallel, printed as a markdown table.
fn bakery(o: &Opts) -> Result<(), String> {
    use hilock_benches::bakery::{self, Workload};
    let clients = if o.bakery_clients.is_empty() {
        vec![1, 2, 4, 8, 16, 31]
    } else {
        o.bakery_clients.clone()
    };
    let t0 = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.jobs)
        .build()
        .map_err(|e| e.to_string())?;
    let rows: Vec<Result<bakery::Comparison, String>> = pool.install(|| {
        clients
            .par_iter()
            .map(|&c| {
                let w = Workload {
                    hold: o.bakery_hold,
                    poll: o.bakery_poll,
                    seed: o.seed,
                    ..Workload::new(c)
                };
                bakery::compare(&w)
            })
            .collect()
    });
    let rows = rows.into_iter().collect::<Result<Vec<_>, _>>()?;
    println!(
        "\nbakery (seed {}): hold {} message delays, sleep a little {} message delays, ±1/3 jitter; latencies in message delays\n",
        o.seed, o.bakery_hold, o.bakery_poll
    );
    print!("{}", bakery::markdown(&rows));
    eprintln!(
        "simulate: bakery done in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![2, 4, 8, 16, 32, 64, 120, 256]
    } else {
        vec![2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 120, 256, 512, 1024]
    }
}

fn prio_sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![8, 16, 32, 48]
    } else {
        vec![8, 16, 24, 32, 40, 48]
    }
}

/// Mean message latency of the native-latency runs (IBM SP interconnect stand-in).
const NATIVE_LATENCY_MS: f64 = 0.05;
const RATIOS: [f64; 4] = [1.0, 5.0, 10.0, 25.0];
/// The protocols of the unprioritized chapter-4 experiments (Fig. 4.1, 4.2, 4.4): hilock
/// with the thesis's own forwarding rule (`hilock-thesis`), so that the reproductions stay
/// comparable with the thesis's figures, and the Naimi-Trehel baselines.
const UNPRIO: [Proto; 3] = [Proto::HilockThesis, Proto::NaimiSame, Proto::NaimiPure];
/// The protocols of the `constant-concurrency` experiment (Fig. 4.3).
const FIG43: [Proto; 3] = [Proto::HilockThesis, Proto::Hilock, Proto::NaimiPure];
/// The protocols of the `forwarding` experiment.
const FORWARDING: [Proto; 6] = [
    Proto::HilockThesis,
    Proto::HilockCompress,
    Proto::Hilock,
    Proto::HilockOrdered,
    Proto::HilockKeep,
    Proto::NaimiPure,
];

fn jobs(o: &Opts) -> Vec<Job> {
    let mut v = Vec::new();
    let on = |e: Experiment| o.experiments.contains(&e);
    let config = |proto: Proto, n: usize, ratio: f64| Config {
        mix: o.mix.mix(),
        ..Config::thesis(proto, n, ratio, o.per_node, o.seed)
    };
    // Fig. 4.1, 4.2, 4.4: every ratio, every size, the three unprioritized protocols on
    // the same seed (ratio 10 is Fig. 4.1).
    for &ratio in o.ratios.iter().filter(|_| on(Experiment::Unprioritized)) {
        for &n in &o.sizes {
            for proto in UNPRIO {
                v.push(Job {
                    exp: "unprioritized",
                    cfg: config(proto, n, ratio),
                    level: 0.0,
                });
            }
        }
    }
    // Fig. 4.2 and 4.4 were measured on the IBM SP with its native interconnect latency
    // (section 4.2.2, "we did not resort to simulation of network latency"): the same runs
    // with a 50 µs mean latency.
    for &ratio in o.ratios.iter().filter(|_| on(Experiment::NativeLatency)) {
        for &n in &o.sizes {
            for proto in UNPRIO {
                let mut cfg = config(proto, n, ratio);
                cfg.latency_ms = NATIVE_LATENCY_MS;
                v.push(Job {
                    exp: "native-latency",
                    cfg,
                    level: 0.0,
                });
            }
        }
    }
    // Fig. 4.5–4.7: ratio 10, 8..48 nodes, hilock without and with priorities, PCEP, PIP
    // and the prioritized Naimi baseline.
    for &n in prio_sizes(o.quick)
        .iter()
        .filter(|_| on(Experiment::Prioritized))
    {
        for (proto, prio) in [
            (Proto::HilockThesis, PrioMode::Off),
            (Proto::HilockThesis, PrioMode::On),
            (Proto::HilockThesis, PrioMode::Pcep),
            (Proto::HilockThesis, PrioMode::Pip),
            (Proto::PrioNaimi, PrioMode::On),
        ] {
            let mut cfg = config(proto, n, 10.0);
            cfg.prio = prio;
            v.push(Job {
                exp: "prioritized",
                cfg,
                level: 0.0,
            });
        }
    }
    // The forwarding variants against Naimi-Trehel pure, ratio 10, 150 ms.
    for &n in o.sizes.iter().filter(|_| on(Experiment::Forwarding)) {
        for proto in FORWARDING {
            v.push(Job {
                exp: "forwarding",
                cfg: config(proto, n, 10.0),
                level: 0.0,
            });
        }
    }
    // Fig. 4.3: constant concurrency level, NCS = N / level × CS (section 4.2.2, "NCT to
    // NCT (N + K) / N"), on the IBM SP (native latency).
    for &level in o
        .concurrency
        .iter()
        .filter(|_| on(Experiment::ConstantConcurrency))
    {
        for &n in &o.sizes {
            for proto in FIG43 {
                let mut cfg = config(proto, n, n as f64 / level);
                cfg.latency_ms = NATIVE_LATENCY_MS;
                v.push(Job {
                    exp: "constant-concurrency",
                    cfg,
                    level,
                });
            }
        }
    }
    // Largest runs first, so that the parallel workers finish together.
    v.sort_by_key(|j| std::cmp::Reverse(j.cfg.n));
    v
}

fn real_main(o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let jobs = jobs(o);
    let total = jobs.len();
    let t0 = Instant::now();
    eprintln!(
        "simulate: {total} runs ({}) on {} worker(s), seed {}, {} accesses per node{}",
        o.experiments
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(", "),
        o.jobs,
        o.seed,
        o.per_node,
        if o.quick { " (quick)" } else { "" }
    );
    // indicatif draws only when stderr is a terminal.
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:40}] {pos}/{len} {msg}")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.jobs)
        .build()
        .map_err(|e| e.to_string())?;
    let results: Vec<Result<Stats, String>> = pool.install(|| {
        jobs.par_iter()
            .map(|job| {
                let r = token::run(&job.cfg);
                bar.set_message(format!(
                    "{} {} n={} ratio={}",
                    job.exp,
                    job.cfg.proto.name(),
                    job.cfg.n,
                    job.cfg.ratio
                ));
                bar.inc(1);
                r
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut rows: Vec<(Job, Stats)> = Vec::new();
    let mut failures = Vec::new();
    for (job, r) in jobs.into_iter().zip(results) {
        match r {
            Ok(st) => rows.push((job, st)),
            Err(e) => failures.push(e),
        }
    }
    // Deterministic order in the files: experiment, protocol, prio, ratio, n.
    let key = |j: &Job| {
        (
            j.exp,
            j.cfg.proto,
            j.cfg.prio,
            (j.level * 1000.0) as u64,
            j.cfg.ratio as u64,
            j.cfg.n,
        )
    };
    rows.sort_by(|(a, _), (b, _)| key(a).cmp(&key(b)));
    write_outputs(&o.out, &rows)?;
    let lavault = if o.experiments.contains(&Experiment::Lavault) {
        pool.install(|| lavault(o))
    } else {
        Vec::new()
    };
    print_tables(&rows, &lavault);
    eprintln!(
        "simulate: done in {:.1} s; files in {}",
        t0.elapsed().as_secs_f64(),
        o.out.display()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} run(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        ))
    }
}

/// One row of the Lavault check: n, messages per CS, request hops per CS.
type LavaultRow = (usize, f64, f64);

/// Naimi-Trehel one request at a time (Lavault's setting) at every size ≤ 128 of
/// `--sizes`: 20·n warm-up requests, 40,000 counted; written to `lavault.csv`.
fn lavault(o: &Opts) -> Vec<LavaultRow> {
    let sizes: Vec<usize> = o.sizes.iter().copied().filter(|&n| n <= 128).collect();
    let rows: Vec<LavaultRow> = sizes
        .par_iter()
        .map(|&n| {
            let r = token::naimi_sequential(n, 20 * n as u64, 40_000, o.seed);
            (n, r.messages, r.request_hops)
        })
        .collect();
    let mut text = String::from(
        "n,messages_per_cs,harmonic_n_minus_1,request_hops_per_cs,harmonic_n_minus_one_minus_1\n",
    );
    for (n, m, h) in &rows {
        text.push_str(&format!(
            "{n},{m:.4},{:.4},{h:.4},{:.4}\n",
            token::harmonic(n - 1),
            token::harmonic(*n) - 1.0
        ));
    }
    if let Err(e) = std::fs::write(o.out.join("lavault.csv"), text) {
        eprintln!("simulate: lavault.csv: {e}");
    }
    rows
}

/// Markdown tables of the unprioritized, native-latency and forwarding runs and the
/// Lavault check, on stdout (`docs/benchmarks.md` quotes them).
fn print_tables(rows: &[(Job, Stats)], lavault: &[LavaultRow]) {
    let get = |exp: &str, p: Proto, r: f64, n: usize| {
        rows.iter()
            .find(|(j, _)| j.exp == exp && j.cfg.proto == p && j.cfg.ratio == r && j.cfg.n == n)
            .map(|(_, st)| st)
    };
    let mut sizes: Vec<usize> = rows.iter().map(|(j, _)| j.cfg.n).collect();
    if let Some((j, _)) = rows.first() {
        println!("\nmix: {} (simulate --mix)", j.cfg.mix.name());
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut ratios: Vec<f64> = rows.iter().map(|(j, _)| j.cfg.ratio).collect();
    ratios.sort_by(f64::total_cmp);
    ratios.dedup();
    for (exp, what) in [
        ("unprioritized", "Linux-cluster setting (latency 150 ms)"),
        ("native-latency", "IBM SP setting (latency 50 µs)"),
    ] {
        for &r in &ratios {
            if sizes
                .iter()
                .all(|&n| get(exp, Proto::HilockThesis, r, n).is_none())
            {
                continue;
            }
            println!("\n{what}, ratio {r}: messages per lock request; hilock by kind\n");
            println!("| n | hilock-thesis | Naimi same work | Naimi pure | hilock-thesis / pure | hilock-thesis / same | request | forward | grant | token | release | freeze | latency ms |");
            println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
            for &n in &sizes {
                let (Some(h), Some(s), Some(p)) = (
                    get(exp, Proto::HilockThesis, r, n),
                    get(exp, Proto::NaimiSame, r, n),
                    get(exp, Proto::NaimiPure, r, n),
                ) else {
                    continue;
                };
                let lr = h.lock_requests.max(1) as f64;
                println!(
                    "| {n} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
                    h.per_request(),
                    s.per_request(),
                    p.per_request(),
                    h.per_request() / p.per_request(),
                    h.per_request() / s.per_request(),
                    (h.msgs[0] - h.forwards) as f64 / lr,
                    h.forwards as f64 / lr,
                    h.kind_per_request(1),
                    h.kind_per_request(2),
                    h.kind_per_request(3),
                    h.kind_per_request(4),
                    h.mean_latency_ms(),
                );
            }
        }
    }
    if sizes
        .iter()
        .any(|&n| get("forwarding", Proto::NaimiPure, 10.0, n).is_some())
    {
        let hilocks: Vec<Proto> = FORWARDING
            .iter()
            .copied()
            .filter(|&p| p != Proto::NaimiPure)
            .collect();
        println!("\nForwarding variants, ratio 10, 150 ms: messages per lock request (and / Naimi-Trehel pure)\n");
        print!("| n | Naimi pure |");
        for p in &hilocks {
            print!(" {} |", p.name());
        }
        println!(" hilock-thesis lock requests / access | hilock-thesis msgs / access | hilock msgs / access | Naimi msgs / access |");
        println!(
            "|---:|---:|{}---:|---:|---:|---:|",
            "---:|".repeat(hilocks.len())
        );
        for &n in &sizes {
            let Some(nt) = get("forwarding", Proto::NaimiPure, 10.0, n) else {
                continue;
            };
            print!("| {n} | {:.2} |", nt.per_request());
            for &p in &hilocks {
                match get("forwarding", p, 10.0, n) {
                    Some(st) => print!(
                        " {:.2} ({:.2}×) |",
                        st.per_request(),
                        st.per_request() / nt.per_request()
                    ),
                    None => print!(" - |"),
                }
            }
            let pointers = get("forwarding", Proto::Hilock, 10.0, n)
                .map_or("-".to_string(), |st| format!("{:.2}", st.per_access()));
            match get("forwarding", Proto::HilockThesis, 10.0, n) {
                Some(h) => println!(
                    " {:.3} | {:.2} | {pointers} | {:.2} |",
                    h.requests_per_access(),
                    h.per_access(),
                    nt.per_access()
                ),
                None => println!(" - | - | {pointers} | - |"),
            }
        }
        println!("\n| n | protocol | request | forward | grant | token | release | freeze | entry-lock journey mean / p99 | idle-relay parent age, table: mean p50 p90 | entries: mean p50 p90 | idle-relay forwards via pointer | entry token moves / lock request |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|");
        for &n in &sizes {
            for &p in &hilocks {
                let Some(st) = get("forwarding", p, 10.0, n) else {
                    continue;
                };
                let lr = st.lock_requests.max(1) as f64;
                let (mean, p99) = hist(&st.journey_hops[1]).map_or((0.0, 0), |(m, q)| (m, q(0.99)));
                println!(
                    "| {n} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {mean:.2} / {p99} | {} | {} | {:.2} | {:.3} |",
                    p.name(),
                    (st.msgs[0] - st.forwards) as f64 / lr,
                    st.forwards as f64 / lr,
                    st.kind_per_request(1),
                    st.kind_per_request(2),
                    st.kind_per_request(3),
                    st.kind_per_request(4),
                    hist3(&st.relay_age[0]),
                    hist3(&st.relay_age[1]),
                    st.relay_via_pointer as f64 / st.forwards_by_state[0].max(1) as f64,
                    st.token_moves[1] as f64 / lr,
                );
            }
        }
    }
    if sizes
        .iter()
        .any(|&n| get("forwarding", Proto::NaimiPure, 10.0, n).is_some())
    {
        // Per access (a user request: the table lock, and for R/U/W the entry too), where
        // the messages go, by lock class and kind; Naimi-Trehel pure takes one lock per
        // access (its "table" columns).
        println!("\nPer access (messages per access by lock: table / entries; request = sent by the requester, forward = sent on by another node)\n");
        println!("| n | protocol | lock requests / access | table: request forward grant token release freeze | entries: request forward grant token release freeze | total / access |");
        println!("|---:|---|---:|---|---|---:|");
        for &n in &sizes {
            for p in [
                Proto::NaimiPure,
                Proto::HilockThesis,
                Proto::Hilock,
                Proto::HilockKeep,
            ] {
                let Some(st) = get("forwarding", p, 10.0, n) else {
                    continue;
                };
                let f = |c: usize| {
                    st.class_kinds_per_access(c)
                        .iter()
                        .map(|x| format!("{x:.3}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!(
                    "| {n} | {} | {:.3} | {} | {} | {:.3} |",
                    p.name(),
                    st.lock_requests as f64 / st.accesses.max(1) as f64,
                    f(0),
                    f(1),
                    st.per_access()
                );
            }
        }
        // ClassPointers with and without kept intention modes (`spec/SPEC.md` 1.7), per
        // lock request and per access, against Naimi-Trehel pure (same run, same seed).
        println!("\nKept intention modes: messages per lock request and per access (and / Naimi-Trehel pure)\n");
        println!("| n | Naimi pure | hilock (ClassPointers) per lock request | hilock per access | hilock-keep per lock request | hilock-keep per access | hilock-keep lock requests / access |");
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        for &n in &sizes {
            let Some(nt) = get("forwarding", Proto::NaimiPure, 10.0, n) else {
                continue;
            };
            let base = nt.per_access();
            let cell = |p: Proto| {
                get("forwarding", p, 10.0, n).map_or(["-".to_string(), "-".to_string()], |st| {
                    [
                        format!("{:.2} ({:.2}×)", st.per_request(), st.per_request() / base),
                        format!("{:.2} ({:.2}×)", st.per_access(), st.per_access() / base),
                    ]
                })
            };
            let [pr, pa] = cell(Proto::Hilock);
            let [kr, ka] = cell(Proto::HilockKeep);
            let lr = get("forwarding", Proto::HilockKeep, 10.0, n).map_or("-".to_string(), |st| {
                format!("{:.3}", st.lock_requests as f64 / st.accesses.max(1) as f64)
            });
            println!("| {n} | {base:.2} | {pr} | {pa} | {kr} | {ka} | {lr} |");
        }
        println!("\nJourneys: request messages per lock request that sent one (table lock / entry locks: mean, p50, p90, p99, max), and who forwarded (share of forwards sent by an idle relay / a node owning a mode / a pending node / other)\n");
        println!("| n | protocol | table: mean p50 p90 p99 max | entries: mean p50 p90 p99 max | idle | owns | pending | other |");
        println!("|---:|---|---|---|---:|---:|---:|---:|");
        for &n in &sizes {
            for p in FORWARDING.iter().filter(|&&p| p != Proto::NaimiPure) {
                let Some(st) = get("forwarding", *p, 10.0, n) else {
                    continue;
                };
                let fw = st.forwards.max(1) as f64;
                let f = &st.forwards_by_state;
                println!(
                    "| {n} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    p.name(),
                    hist5(&st.journey_hops[0]),
                    hist5(&st.journey_hops[1]),
                    f[0] as f64 / fw,
                    f[1] as f64 / fw,
                    f[2] as f64 / fw,
                    f[3] as f64 / fw
                );
            }
        }
    }
    let levels: Vec<f64> = {
        let mut l: Vec<f64> = rows
            .iter()
            .filter(|(j, _)| j.exp == "constant-concurrency")
            .map(|(j, _)| j.level)
            .collect();
        l.sort_by(f64::total_cmp);
        l.dedup();
        l
    };
    if !levels.is_empty() {
        let cc = |p: Proto, level: f64, n: usize| {
            rows.iter()
                .find(|(j, _)| {
                    j.exp == "constant-concurrency"
                        && j.cfg.proto == p
                        && j.level == level
                        && j.cfg.n == n
                })
                .map(|(_, st)| st)
        };
        println!("\nFig. 4.3, constant concurrency level (NCS = N / level × 15 ms, CS 15 ms, latency 50 µs): messages per lock request, latency (ms)\n");
        print!("| level | n | NCS/CS |");
        for p in FIG43 {
            print!(" {} msgs | {} latency |", p.name(), p.name());
        }
        println!(" hilock-thesis request | hilock-thesis forward |");
        println!(
            "|---:|---:|---:|{}---:|---:|",
            "---:|---:|".repeat(FIG43.len())
        );
        for &level in &levels {
            for &n in &sizes {
                let Some(h) = cc(Proto::HilockThesis, level, n) else {
                    continue;
                };
                print!("| {level} | {n} | {} |", n as f64 / level);
                for p in FIG43 {
                    match cc(p, level, n) {
                        Some(st) => {
                            print!(" {:.2} | {:.1} |", st.per_request(), st.mean_latency_ms())
                        }
                        None => print!(" - | - |"),
                    }
                }
                let lr = h.lock_requests.max(1) as f64;
                println!(
                    " {:.2} | {:.2} |",
                    (h.msgs[0] - h.forwards) as f64 / lr,
                    h.forwards as f64 / lr
                );
            }
        }
    }
    if !lavault.is_empty() {
        println!("\nNaimi-Trehel one request at a time from a random node (Lavault's setting)\n");
        println!(
            "| n | messages per CS | H(n − 1) | difference | request hops per CS | H(n) − 1 |"
        );
        println!("|---:|---:|---:|---:|---:|---:|");
        for &(n, m, h) in lavault {
            let hn = token::harmonic(n - 1);
            println!(
                "| {n} | {m:.3} | {hn:.3} | {:+.2} % | {h:.3} | {:.3} |",
                100.0 * (m / hn - 1.0),
                token::harmonic(n) - 1.0
            );
        }
    }
}

/// Mean and a quantile function of a histogram (`h[k]` items had value k); `None` when
/// it is empty.
fn hist(h: &[u64]) -> Option<(f64, impl Fn(f64) -> usize + '_)> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    let mean = h.iter().enumerate().map(|(k, c)| k as u64 * c).sum::<u64>() as f64 / total as f64;
    let q = move |p: f64| {
        let mut acc = 0;
        h.iter()
            .position(|c| {
                acc += c;
                acc as f64 >= p * total as f64
            })
            .unwrap_or(0)
    };
    Some((mean, q))
}

/// "mean p50 p90 p99 max" of a histogram.
fn hist5(h: &[u64]) -> String {
    match hist(h) {
        Some((mean, q)) => format!(
            "{mean:.2} {} {} {} {}",
            q(0.5),
            q(0.9),
            q(0.99),
            h.len() - 1
        ),
        None => "-".into(),
    }
}

/// "mean p50 p90" of a histogram.
fn hist3(h: &[u64]) -> String {
    match hist(h) {
        Some((mean, q)) => format!("{mean:.1} {} {}", q(0.5), q(0.9)),
        None => "-".into(),
    }
}

fn csv(path: &Path, rows: &[&(Job, Stats)]) -> Result<(), String> {
    if rows.is_empty() {
        return Ok(());
    }
    let rows: Vec<CsvRow> = rows
        .iter()
        .map(|(j, st)| CsvRow::new(j.exp, &j.cfg, st))
        .collect();
    token::write_csv(path, &rows)
}

fn series<F: Fn(&Stats) -> f64>(
    rows: &[(Job, Stats)],
    label: String,
    pick: impl Fn(&Job) -> bool,
    y: F,
) -> Series {
    Series {
        label,
        points: rows
            .iter()
            .filter(|(j, _)| pick(j))
            .map(|(j, st)| (j.cfg.n as f64, y(st)))
            .collect(),
    }
}

fn write_outputs(out: &Path, rows: &[(Job, Stats)]) -> Result<(), String> {
    // The ratios that were run (in order).
    let mut ratios: Vec<f64> = Vec::new();
    for (j, _) in rows {
        if j.exp != "prioritized" && !ratios.contains(&j.cfg.ratio) {
            ratios.push(j.cfg.ratio);
        }
    }
    ratios.sort_by(f64::total_cmp);
    let ratios = &ratios;
    let all: Vec<&(Job, Stats)> = rows.iter().collect();
    csv(&out.join("simulate.csv"), &all)?;
    let unprio = |p: Proto, r: f64| {
        move |j: &Job| j.exp == "unprioritized" && j.cfg.proto == p && j.cfg.ratio == r
    };
    let native = |p: Proto, r: f64| {
        move |j: &Job| j.exp == "native-latency" && j.cfg.proto == p && j.cfg.ratio == r
    };
    let name = |p: Proto| p.name().to_string();

    // Fig. 4.1: ratio 10, the three protocols.
    let f41: Vec<&(Job, Stats)> = rows
        .iter()
        .filter(|(j, _)| j.exp == "unprioritized" && j.cfg.ratio == 10.0)
        .collect();
    csv(&out.join("fig4_1.csv"), &f41)?;
    let s: Vec<Series> = UNPRIO
        .iter()
        .map(|&p| series(rows, name(p), unprio(p, 10.0), |st| st.per_request()))
        .collect();
    chart(
        &out.join("fig4_1a_messages.svg"),
        "Fig. 4.1(a) messages per lock request, ratio 10 (simulated)",
        "nodes",
        "messages / request",
        &s,
        true,
    )?;
    let s: Vec<Series> = UNPRIO
        .iter()
        .map(|&p| series(rows, name(p), unprio(p, 10.0), |st| st.mean_latency_ms()))
        .collect();
    chart(
        &out.join("fig4_1b_latency.svg"),
        "Fig. 4.1(b) request latency, ratio 10 (simulated)",
        "nodes",
        "latency (ms)",
        &s,
        true,
    )?;

    // Fig. 4.2: hilock at every ratio, native latency (the thesis setting) and 150 ms.
    for (exp, suffix, what) in [
        ("native-latency", "", "50 µs latency"),
        ("unprioritized", "_150ms", "150 ms latency"),
    ] {
        let f42: Vec<&(Job, Stats)> = rows
            .iter()
            .filter(|(j, _)| j.exp == exp && j.cfg.proto == Proto::HilockThesis)
            .collect();
        csv(&out.join(format!("fig4_2{suffix}.csv")), &f42)?;
        let by_ratio = |y: fn(&Stats) -> f64| -> Vec<Series> {
            ratios
                .iter()
                .map(|&r| {
                    series(
                        rows,
                        format!("ratio {r}"),
                        move |j: &Job| {
                            j.exp == exp && j.cfg.proto == Proto::HilockThesis && j.cfg.ratio == r
                        },
                        y,
                    )
                })
                .collect()
        };
        chart(
            &out.join(format!("fig4_2a_messages{suffix}.svg")),
            &format!("Fig. 4.2(a) hilock messages per request by NCS/CS ratio, {what}"),
            "nodes",
            "messages / request",
            &by_ratio(|st| st.per_request()),
            true,
        )?;
        chart(
            &out.join(format!("fig4_2b_latency{suffix}.svg")),
            &format!("Fig. 4.2(b) hilock request latency by NCS/CS ratio, {what}"),
            "nodes",
            "latency (ms)",
            &by_ratio(|st| st.mean_latency_ms()),
            true,
        )?;
    }
    // The hilock / Naimi ratios at every ratio (same runs, same seeds).
    let s: Vec<Series> = ratios
        .iter()
        .flat_map(|&r| {
            [Proto::NaimiPure, Proto::NaimiSame].map(|p| {
                let h = series(rows, String::new(), unprio(Proto::HilockThesis, r), |st| {
                    st.per_request()
                });
                let b = series(rows, String::new(), unprio(p, r), |st| st.per_request());
                Series {
                    label: format!("hilock / {} ratio {r}", p.name()),
                    points: h
                        .points
                        .iter()
                        .zip(&b.points)
                        .map(|(a, b)| (a.0, a.1 / b.1))
                        .collect(),
                }
            })
        })
        .collect();
    chart(
        &out.join("hilock_over_naimi.svg"),
        "messages per request, hilock / Naimi (same run, same seed)",
        "nodes",
        "ratio",
        &s,
        true,
    )?;

    // Fig. 4.4: breakdown by message kind.
    let kinds: [fn(&Stats) -> f64; 5] = [
        |st| st.kind_per_request(0),
        |st| st.kind_per_request(1),
        |st| st.kind_per_request(2),
        |st| st.kind_per_request(3),
        |st| st.kind_per_request(4),
    ];
    let s: Vec<Series> = KIND_NAMES
        .iter()
        .zip(kinds)
        .map(|(k, f)| series(rows, k.to_string(), native(Proto::HilockThesis, 10.0), f))
        .collect();
    chart(
        &out.join("fig4_4a_breakup.svg"),
        "Fig. 4.4(a) hilock messages per request by kind, ratio 10, 50 µs latency",
        "nodes",
        "messages / request",
        &s,
        true,
    )?;
    for (i, (k, f)) in KIND_NAMES.iter().zip(kinds).enumerate() {
        let letter = ["b", "c", "d", "e", "f"][i];
        let s: Vec<Series> = ratios
            .iter()
            .map(|&r| {
                series(
                    rows,
                    format!("ratio {r}"),
                    native(Proto::HilockThesis, r),
                    f,
                )
            })
            .collect();
        chart(
            &out.join(format!("fig4_4{letter}_{k}.svg")),
            &format!("Fig. 4.4({letter}) hilock {k} messages per request, 50 µs latency"),
            "nodes",
            "messages / request",
            &s,
            true,
        )?;
    }

    // Fig. 4.5–4.7: prioritized runs.
    let pr: Vec<&(Job, Stats)> = rows
        .iter()
        .filter(|(j, _)| j.exp == "prioritized")
        .collect();
    csv(&out.join("fig4_5_to_4_7.csv"), &pr)?;
    let variants = [
        (Proto::HilockThesis, PrioMode::Off, "hilock unprioritized"),
        (Proto::HilockThesis, PrioMode::On, "hilock prioritized"),
        (Proto::HilockThesis, PrioMode::Pcep, "hilock PCEP"),
        (Proto::HilockThesis, PrioMode::Pip, "hilock PIP"),
        (Proto::PrioNaimi, PrioMode::On, "prioritized Naimi"),
    ];
    let prio_pick = |p: Proto, m: PrioMode| {
        move |j: &Job| j.exp == "prioritized" && j.cfg.proto == p && j.cfg.prio == m
    };
    let s: Vec<Series> = variants
        .iter()
        .map(|&(p, m, l)| series(rows, l.to_string(), prio_pick(p, m), |st| st.per_request()))
        .collect();
    chart(
        &out.join("fig4_5a_messages.svg"),
        "Fig. 4.5(a) messages per request with priorities, ratio 10",
        "nodes",
        "messages / request",
        &s,
        false,
    )?;
    let top = PRIO_LEVELS - 1;
    let s: Vec<Series> = variants
        .iter()
        .map(|&(p, m, l)| {
            if m == PrioMode::Off {
                series(rows, format!("{l} (all requests)"), prio_pick(p, m), |st| {
                    st.mean_latency_ms()
                })
            } else {
                series(
                    rows,
                    format!("{l} (priority {top})"),
                    prio_pick(p, m),
                    move |st| st.prio_latency_ms(top),
                )
            }
        })
        .collect();
    chart(
        &out.join("fig4_5b_latency.svg"),
        "Fig. 4.5(b) latency: unprioritized (all) vs highest priority",
        "nodes",
        "latency (ms)",
        &s,
        false,
    )?;
    for (file, title, m) in [
        (
            "fig4_6a_prio_levels.svg",
            "Fig. 4.6(a) latency per priority level, no inheritance",
            PrioMode::On,
        ),
        (
            "fig4_6b_pcep_levels.svg",
            "Fig. 4.6(b) latency per priority level, PCEP",
            PrioMode::Pcep,
        ),
        (
            "fig4_7a_pip_levels.svg",
            "Fig. 4.7(a) latency per priority level, PIP",
            PrioMode::Pip,
        ),
    ] {
        let s: Vec<Series> = (0..PRIO_LEVELS)
            .map(|p| {
                series(
                    rows,
                    format!("priority {p}"),
                    prio_pick(Proto::HilockThesis, m),
                    move |st| st.prio_latency_ms(p),
                )
            })
            .collect();
        chart(&out.join(file), title, "nodes", "latency (ms)", &s, false)?;
    }
    // The forwarding variants against Naimi-Trehel pure (same run, same seed).
    let fwd = |p: Proto| move |j: &Job| j.exp == "forwarding" && j.cfg.proto == p;
    let s: Vec<Series> = FORWARDING
        .iter()
        .map(|&p| series(rows, name(p), fwd(p), |st| st.per_request()))
        .collect();
    chart(
        &out.join("forwarding_variants.svg"),
        "messages per lock request by forwarding rule, ratio 10, 150 ms (one run)",
        "nodes",
        "messages / request",
        &s,
        true,
    )?;
    let base = series(rows, String::new(), fwd(Proto::NaimiPure), |st| {
        st.per_request()
    });
    let s: Vec<Series> = FORWARDING
        .iter()
        .filter(|&&p| p != Proto::NaimiPure)
        .map(|&p| {
            let h = series(rows, String::new(), fwd(p), |st| st.per_request());
            Series {
                label: format!("{} / naimi-pure", p.name()),
                points: h
                    .points
                    .iter()
                    .zip(&base.points)
                    .map(|(a, b)| (a.0, a.1 / b.1))
                    .collect(),
            }
        })
        .collect();
    chart(
        &out.join("forwarding_over_naimi.svg"),
        "messages per lock request, hilock variant / Naimi-Trehel (same run)",
        "nodes",
        "ratio",
        &s,
        true,
    )?;
    let kinds: Vec<Series> = FORWARDING
        .iter()
        .filter(|&&p| p != Proto::NaimiPure)
        .flat_map(|&p| {
            KIND_NAMES.iter().enumerate().map(move |(k, kind)| {
                series(rows, format!("{} {kind}", p.name()), fwd(p), move |st| {
                    st.kind_per_request(k)
                })
            })
        })
        .collect();
    chart(
        &out.join("forwarding_kinds.svg"),
        "messages per lock request by kind and forwarding rule, ratio 10, 150 ms",
        "nodes",
        "messages / request",
        &kinds,
        true,
    )?;
    let f: Vec<&(Job, Stats)> = rows.iter().filter(|(j, _)| j.exp == "forwarding").collect();
    csv(&out.join("forwarding_variants.csv"), &f)?;

    // Fig. 4.3: constant concurrency level.
    let cc: Vec<&(Job, Stats)> = rows
        .iter()
        .filter(|(j, _)| j.exp == "constant-concurrency")
        .collect();
    csv(&out.join("fig4_3.csv"), &cc)?;
    let mut levels: Vec<f64> = cc.iter().map(|(j, _)| j.level).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    for (file, title, y_label, y) in [
        (
            "fig4_3a_messages.svg",
            "Fig. 4.3(a) messages per lock request, constant concurrency, 50 µs",
            "messages / request",
            (|st: &Stats| st.per_request()) as fn(&Stats) -> f64,
        ),
        (
            "fig4_3b_latency.svg",
            "Fig. 4.3(b) request latency, constant concurrency, 50 µs",
            "latency (ms)",
            |st: &Stats| st.mean_latency_ms(),
        ),
    ] {
        let s: Vec<Series> = levels
            .iter()
            .flat_map(|&level| {
                FIG43.map(|p| {
                    series(
                        rows,
                        format!("{} level {level}", p.name()),
                        move |j: &Job| {
                            j.exp == "constant-concurrency" && j.cfg.proto == p && j.level == level
                        },
                        y,
                    )
                })
            })
            .collect();
        chart(&out.join(file), title, "nodes", y_label, &s, true)?;
    }

    // Latency per access mode (hilock, ratio 10), not a thesis figure but asked for.
    let s: Vec<Series> = MIX
        .iter()
        .enumerate()
        .map(|(i, (m, _))| {
            series(
                rows,
                format!("{} access", m.symbol()),
                unprio(Proto::HilockThesis, 10.0),
                move |st| st.mode_latency_ms(i),
            )
        })
        .collect();
    chart(
        &out.join("latency_per_mode.svg"),
        "hilock request latency per access mode, ratio 10",
        "nodes",
        "latency (ms)",
        &s,
        true,
    )?;
    Ok(())
}

/// [`line_chart`], skipped when no series has a point (an experiment not selected).
fn chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), String> {
    if series.iter().all(|s| s.points.is_empty()) {
        return Ok(());
    }
    line_chart(path, title, x_label, y_label, series, log_x)
}
