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
//! Options: `--out DIR` (default `docs/figures`), `--seed S` (default 1), `--jobs J`
//! (parallel runs, default 2), `--per-node K` (measured accesses per node, default 40),
//! `--ratio R` (NCS / CS, default 10), `--latency MS` (mean message latency, default 150),
//! `--sizes a,b,c` (default 8,16,32,64,120,256,512,1024). Writes `forwarding.csv`,
//! `forwarding_messages.svg` and `forwarding_kinds.svg` and prints a Markdown table.

use hilock_benches::plot::{line_chart, Series};
use hilock_benches::sim::{self, Config, Proto, Stats, KIND_NAMES};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

const PROTOS: [Proto; 4] = [
    Proto::Hilock,
    Proto::HilockCompress,
    Proto::HilockPointers,
    Proto::NaimiPure,
];

struct Opts {
    out: PathBuf,
    seed: u64,
    jobs: usize,
    per_node: u64,
    ratio: f64,
    latency_ms: f64,
    sizes: Vec<usize>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        out: PathBuf::from("docs/figures"),
        seed: 1,
        jobs: 2,
        per_node: 40,
        ratio: 10.0,
        latency_ms: 150.0,
        sizes: vec![8, 16, 32, 64, 120, 256, 512, 1024],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let num = |name: &str, v: String| v.parse::<f64>().map_err(|e| format!("{name}: {e}"));
        match a.as_str() {
            "--out" => o.out = PathBuf::from(val("--out")?),
            "--seed" => o.seed = num("--seed", val("--seed")?)? as u64,
            "--jobs" => o.jobs = num("--jobs", val("--jobs")?)? as usize,
            "--per-node" => o.per_node = num("--per-node", val("--per-node")?)? as u64,
            "--ratio" => o.ratio = num("--ratio", val("--ratio")?)?,
            "--latency" => o.latency_ms = num("--latency", val("--latency")?)?,
            "--sizes" => {
                o.sizes = val("--sizes")?
                    .split(',')
                    .map(|x| x.trim().parse().map_err(|e| format!("--sizes: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!(
                    "forwarding [--out DIR] [--seed S] [--jobs J] [--per-node K] [--ratio R] \
                     [--latency MS] [--sizes a,b,c]"
                );
                std::process::exit(0);
            }
            x => return Err(format!("unknown argument {x}")),
        }
    }
    o.jobs = o.jobs.max(1);
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("forwarding: {e}");
            std::process::exit(2);
        }
    };
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
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(Config, Result<Stats, String>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..o.jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = cfgs.get(i) else { break };
                let r = sim::run(c);
                results.lock().expect("lock").push((*c, r));
            });
        }
    });
    let mut rows = Vec::new();
    for (c, r) in results.into_inner().expect("lock") {
        rows.push((
            c,
            r.map_err(|e| format!("{} n={}: {e}", c.proto.name(), c.n))?,
        ));
    }
    rows.sort_by_key(|(c, _)| (c.n, c.proto));
    let elapsed = t.elapsed();

    let mut csv = sim::csv_header();
    csv.push('\n');
    for (c, st) in &rows {
        csv.push_str(&sim::csv_row("forwarding", c, st));
        csv.push('\n');
    }
    let path = o.out.join("forwarding.csv");
    std::fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;

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
