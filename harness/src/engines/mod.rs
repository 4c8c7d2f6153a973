//! Engines other than the token engine as [`Protocol`](hilock_kernel::Protocol) sites of
//! the one harness, one file each, so that [`Cluster`](crate::Cluster) routes and delivers
//! their messages and checks their properties like any other site's:
//!
//! - [`adapter`]: what the sites below share: the all-or-nothing step and the answers of a
//!   site whose locks are exclusive;
//! - [`bakery`]: a kernel bakery client or one of the three kernel replicas of its quorum
//!   store, all on one lock;
//! - [`central`]: a client, the leader or a follower of a central lock server on three
//!   members (the etcd stand-in of the bakery comparison; no kernel engine);
//! - [`ring`]: a kernel ring server and a kernel Chord client at one node of a 16-slot
//!   ring, serving the airline workload's entry locks.

pub mod adapter;
pub mod bakery;
pub mod central;
pub mod ring;
