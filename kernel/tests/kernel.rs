//! The kernel's tests, one module per file of this directory, built as one test binary
//! (`cargo test -p hilock-kernel`; one file's tests: `cargo test -p hilock-kernel --test
//! kernel try_lock::`). One binary links the kernel, the harness and proptest once instead
//! of once per file. A new file here is a test only once it is named below (the CI step
//! "kernel tests" checks that every file is).

// What several files share (`common/`).
mod common;
#[path = "common/ring_one.rs"]
mod ring_one;
#[path = "common/rng.rs"]
mod rng;
#[path = "common/star.rs"]
mod star;

mod agents;
mod agents_reference;
mod agents_schedules;
mod api;
mod bakery_client;
mod baselines;
mod blocking;
mod cancel;
mod codec;
mod convert;
mod device_reset;
mod downgrade;
mod forwarding_and_pcep;
mod keep_intention;
mod naimi;
mod node_paths;
mod output_order;
mod pnaimi;
mod prio;
mod recovery;
mod ring;
mod ring_copies;
mod ring_incarnations;
mod ring_reclaim;
mod ring_reconnect;
mod ring_retry;
mod rules;
mod tree;
mod tree_edge_cases;
mod tree_service;
mod try_lock;
mod value_block;
mod wrap;
