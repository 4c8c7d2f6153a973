//! The engines that are not the token engine, as [`hilock_kernel::Protocol`] sites of the
//! one harness: each wraps kernel state machines, translates the harness's inputs into
//! theirs and their outputs into `Send` and `Granted`, so that [`crate::Cluster`] routes
//! their messages, injects faults and checks the same properties as for the token engine.
//!
//! - [`agents`]: Wiger's lock agents; a node is a lock server and a client's transactions.
//! - [`tree`]: Preston & Prasad's document tree; node 0 holds the tree, the others are users.

pub mod agents;
pub mod tree;
