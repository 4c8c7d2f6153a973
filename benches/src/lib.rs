//! # hilock-benches
//!
//! - `benches/step.rs`: criterion benches of one kernel `step` per input kind, table
//!   look-ups and the size of a site (`cargo bench -p hilock-benches --bench step`);
//! - [`token`]: a deterministic discrete-event simulator that drives `n` kernel sites with the
//!   thesis workload (the thesis, chapter 4) for hilock and the Naimi-Trehel baselines;
//! - [`bakery`]: the bakery engine (kernel clients over simulated quorum replicas, the
//!   site `hilock_harness::engines::bakery`) in the simulator's loop, next to the token
//!   engine and a central lock server on the same one-lock workload;
//! - [`central`]: the simulator's view of the central lock server on three members (the
//!   etcd stand-in of [`bakery`], the site `hilock_harness::engines::central`);
//! - [`plot`]: SVG line charts of the simulator's results;
//! - [`agents`]: multi-lock transactions on the token engine (ordered acquisition) and on the
//!   agents engine (detection and surrender), and the `txn_compare` binary that tabulates
//!   and plots them (`cargo run --release -p hilock-benches --bin txn_compare`);
//! - [`ring`]: the ring engine's placement figures (the Chord lock paper: load balance, keys moved per
//!   join/leave, lookup messages), by the kernel's `ring::vnodes` and `ring::fingers`;
//!   the `ringsim` binary prints them (`cargo run --release -p hilock-benches --bin ringsim`);
//! - [`ringair`]: the simulator's airline workload on the ring engine (kernel `RingServer`
//!   and `ChordClient` as a `Protocol` site, `hilock_harness::engines::ring`), next to the
//!   token engine;
//! - [`scenarios`]: warm sites, one per kind of kernel step, for the criterion benches and
//!   the no-allocation test;
//! - the `simulate` binary: runs the experiments of chapter 4 and writes CSV and SVG files
//!   (`cargo run --release -p hilock-benches --bin simulate -- --out docs/figures`).
//!
//! Results and the commands that produced them are in `docs/benchmarks.md`.

pub mod agents;
pub mod bakery;
pub mod central;
pub mod plot;
pub mod ring;
pub mod ringair;
pub mod scenarios;
pub mod token;
