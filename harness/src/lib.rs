//! # hilock-harness
//!
//! The one harness every host-side driver of the kernel uses. A property is written here
//! once and checked by every driver: the Stateright models (`hilock-models`), the scenario
//! runner and robustness proptests (`hilock-spec`), the simulator (`hilock-benches`) and
//! the kernel's integration tests.
//!
//! - [`cluster`]: a [`Cluster`] of sites of one [`hilock_kernel::Protocol`], the network
//!   between them (FIFO or unordered channels) and the faults a caller injects;
//! - [`properties`]: the global properties checked over it, one file each (P1, P2, P3,
//!   P3b, P4, no kernel error, P10–P12, P14–P17);
//! - [`engines`]: engines other than the token engine as `Protocol` sites (agents, tree,
//!   bakery, ring, and a central lock server), one file each;
//! - [`sink`]: [`VecSink`], a growable output sink for host programs.

pub mod cluster;
pub mod engines;
pub mod properties;
pub mod sink;

pub use cluster::{Cluster, Faults, InFlight, Order, Step, StepError};
pub use properties::{covers, FenceBreach, Invariants, Violation};
pub use sink::VecSink;
