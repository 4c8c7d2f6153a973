//! # hilock-spec
//!
//! hilock's specification as data: the thesis tables and rules ([`export`]), the scenario
//! format and runner ([`scenario`]), the trace format ([`trace`]), the workload of the
//! experiments ([`workload`]) and the site types of the host-side tools ([`system`]). The
//! prose is in `spec/SPEC.md`. The harness the scenario runner steps (`Cluster`: routing,
//! delivery, faults and the properties) is the crate `hilock-harness` (`harness/`).

pub mod export;
pub mod scenario;
pub mod system;
pub mod trace;
pub mod workload;

pub use scenario::{Prepared, RunReport, Scenario};
pub use system::{ModelSite, SpecMsg, SpecSite, System};
pub use trace::{NodeSnapshot, Trace};

/// Directory of the thesis scenarios (absolute, from this crate's manifest directory).
pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}
