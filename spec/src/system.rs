//! The capacities and site types of every host-side tool, in one place.
//!
//! All of them share one message type, [`SpecMsg`] (the queue capacity [`QUEUE`] is the same
//! everywhere), so a run of the model checker, of the scenario runner or of a test is one
//! trace format and no message is ever converted between capacities. Sites differ only in
//! how many nodes and locks they have room for: [`SpecSite`] for scenarios and tests,
//! [`ModelSite`] (at most [`MODEL_NODES`] nodes: a smaller site hashes and clones faster)
//! for the Stateright models. (The simulator sizes its sites by the run, up to 1,024 nodes,
//! and never records traces; the runtime has its own wire types.)

use hilock_harness::Cluster;
use hilock_kernel::{Msg, Site};

/// Largest number of nodes of a scenario or test system.
pub const MAX_NODES: usize = 16;
/// Locks per site of a scenario or test system.
pub const MAX_LOCKS: usize = 4;
/// Queue capacity of every host-side site (at least [`MAX_NODES`], so no queue overflows).
pub const QUEUE: usize = MAX_NODES;
/// Largest number of nodes of a model-checker site.
pub const MODEL_NODES: usize = 5;

/// The one message type of the host-side tools (model checker, scenarios, traces, tests).
pub type SpecMsg = Msg<QUEUE>;
/// The site of scenarios and tests.
pub type SpecSite = Site<MAX_NODES, MAX_LOCKS, QUEUE>;
/// The site of the Stateright models, with `L` locks.
pub type ModelSite<const L: usize> = Site<MODEL_NODES, L, QUEUE>;
/// A cluster of [`SpecSite`]s: the system of the scenario runner and the robustness tests.
pub type System = Cluster<SpecSite>;
