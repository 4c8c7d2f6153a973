//! # hilock-spec
//!
//! hilock's specification as data: the thesis tables and rules ([`export`]), the scenario
//! format and runner ([`scenario`]), the trace format ([`trace`]), the one harness every
//! driver of the kernel uses ([`cluster`]: routing, delivery, faults and the properties), and
//! the site types of the host-side tools ([`system`]). The prose is in `spec/SPEC.md`.

pub mod cluster;
pub mod export;
pub mod scenario;
pub mod sink;
pub mod system;
pub mod trace;
pub mod workload;

pub use cluster::{Cluster, Order, Step, StepError, Violation};
pub use scenario::{Prepared, RunReport, Scenario};
pub use sink::VecSink;
pub use system::{ModelSite, SpecMsg, SpecSite, System};
pub use trace::{NodeSnapshot, Trace};

/// Directory of the thesis scenarios (absolute, from this crate's manifest directory).
pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}
