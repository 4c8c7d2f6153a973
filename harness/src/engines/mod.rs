//! Engines other than the token engine as [`Protocol`](hilock_kernel::Protocol) sites of
//! the one harness, one file each: each wraps kernel state machines, translates the
//! harness's inputs into theirs and their outputs into `Send`, `Granted` and `WouldBlock`,
//! so that [`Cluster`](crate::Cluster) routes and delivers their messages and checks their
//! properties like any other site's:
//!
//! - [`agents`]: Wiger's lock agents; a node is a lock server and a client's transactions;
//! - [`tree`]: Preston & Prasad's document tree as a lock service; node 0 keeps the tree,
//!   the others are editors;
//! - [`bakery`]: a kernel bakery client or one of the three kernel replicas of its quorum
//!   store, all on one lock;
//! - [`ring`]: a kernel ring server and a kernel Chord client at one node of a 16-slot
//!   ring, serving the airline workload's entry locks;
//! - [`central`]: a client, the leader or a follower of a central lock server on three
//!   members (the etcd stand-in of the bakery comparison; no kernel engine);
//! - [`adapter`]: what the sites share: the all-or-nothing step and the answers of a site
//!   whose locks are exclusive.

pub mod adapter;
pub mod agents;
pub mod bakery;
pub mod central;
pub mod ring;
pub mod tree;
