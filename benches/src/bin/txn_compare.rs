//! Multi-lock transactions on the token engine (ordered acquisition) and on the agents
//! engine (detection and surrender), in the simulator `hilock_benches::agents`: a Markdown
//! table on stdout and two SVG charts (throughput and messages per transaction against
//! locks per transaction).
//!
//! ```sh
//! cargo run --release -p hilock-benches --bin txn_compare -- --out docs
//! ```

use clap::Parser;
use hilock_benches::agents::{run, Engine, TxnConfig, TxnStats};
use hilock_benches::plot::{line_chart, Series};
use std::path::PathBuf;

/// The token engine against the agents engine on one multi-lock workload.
#[derive(Debug, Parser)]
#[command(name = "txn_compare")]
struct Opts {
    /// Directory of the SVG files.
    #[arg(long, default_value = "docs")]
    out: PathBuf,
    /// Nodes (one client each).
    #[arg(long, default_value_t = 8)]
    nodes: usize,
    /// Locks.
    #[arg(long, default_value_t = 16)]
    locks: usize,
    /// Locks per transaction (comma-separated list: one row per value and engine).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2, 3, 4, 6])]
    per_txn: Vec<usize>,
    /// Mean hold time, in message delays.
    #[arg(long, default_value_t = 1.0)]
    hold: f64,
    /// Mean think time between a client's transactions, in message delays.
    #[arg(long, default_value_t = 1.0)]
    think: f64,
    /// Transactions per client.
    #[arg(long, default_value_t = 500)]
    txns: usize,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<(), String> {
    let o = Opts::parse();
    let engines = [
        Engine::TokenOrdered,
        Engine::AgentsRandom,
        Engine::AgentsOrdered,
    ];
    println!(
        "{} nodes, {} locks, hold {} and think {} message delays, {} transactions per client, seed {}",
        o.nodes, o.locks, o.hold, o.think, o.txns, o.seed
    );
    println!();
    println!("| engine | locks/txn | committed | aborted | surrenders/txn | messages/txn | between nodes/txn | throughput (txn per 1,000 delays) | latency mean (delays) | latency max (delays) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut results: Vec<(Engine, usize, TxnStats)> = Vec::new();
    for &k in &o.per_txn {
        for &e in &engines {
            let cfg = TxnConfig {
                nodes: o.nodes,
                clients: o.nodes,
                locks: o.locks,
                per_txn: k,
                hold: o.hold,
                think: o.think,
                txns_per_node: o.txns,
                seed: o.seed,
                ..TxnConfig::new(e)
            };
            let s = run(&cfg).map_err(|err| format!("{} k={k}: {err}", e.name()))?;
            println!(
                "| {} | {k} | {} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                e.name(),
                s.committed,
                s.aborted,
                s.surrenders_per_txn(),
                s.per_txn(),
                s.remote_per_txn(),
                s.throughput(),
                s.mean_latency(),
                s.max_latency()
            );
            results.push((e, k, s));
        }
    }
    let series = |f: &dyn Fn(&TxnStats) -> f64| -> Vec<Series> {
        engines
            .iter()
            .map(|&e| Series {
                label: e.name().to_string(),
                points: results
                    .iter()
                    .filter(|r| r.0 == e)
                    .map(|r| (r.1 as f64, f(&r.2)))
                    .collect(),
            })
            .collect()
    };
    std::fs::create_dir_all(&o.out).map_err(|e| e.to_string())?;
    let t = o.out.join("txn-throughput.svg");
    line_chart(
        &t,
        &format!(
            "Multi-lock transactions, {} nodes, {} locks: throughput",
            o.nodes, o.locks
        ),
        "locks per transaction",
        "committed transactions per 1,000 message delays",
        &series(&|s| s.throughput()),
        false,
    )?;
    let m = o.out.join("txn-messages.svg");
    line_chart(
        &m,
        &format!(
            "Multi-lock transactions, {} nodes, {} locks: messages",
            o.nodes, o.locks
        ),
        "locks per transaction",
        "messages per committed transaction",
        &series(&|s| s.per_txn()),
        false,
    )?;
    eprintln!("wrote {} and {}", t.display(), m.display());
    Ok(())
}
