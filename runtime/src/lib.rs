//! # hilock-runtime
//!
//! Real hilock nodes over TCP, driven by [`hilock_kernel`] (tokio), and the hierarchical
//! lock API. The `hilock` command (package `hilock`, `cli/`) is built on it.
//!
//! ```no_run
//! use hilock_runtime::{Config, Mode, Node, NodeAddr};
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let nodes = vec![
//!     NodeAddr { id: 0, addr: "127.0.0.1:7100".parse()? },
//!     NodeAddr { id: 1, addr: "127.0.0.1:7101".parse()? },
//! ];
//! let node = Node::start(Config::new("airline", "a long shared secret", 0, nodes)?).await?;
//! // Node 1 runs the same with id 1: a node grants nothing until a majority of the
//! // configured nodes (here both) has let it in.
//! // IW on /db and /db/flights, then W on /db/flights/UA93; released on drop.
//! let guard = node.lock("/db/flights/UA93", Mode::W).await?;
//! drop(guard);
//! # Ok(()) }
//! ```
//!
//! `runtime/examples/airline.rs` runs three nodes in one process on 127.0.0.1
//! (`cargo run -p hilock-runtime --example airline`); [`oracle::local_cluster`] starts such
//! a loopback cluster for tests.
//!
//! The engines, one module each: [`token`] (the default: the node, its lock API
//! [`Node::lock`], [`Guard`], and its tasks), [`agents`] (transactions over many locks on
//! the same nodes), [`ring`] (lock servers placed on a ring), [`bakery`] (the bakery lock
//! and work queue over `redis-server` replicas). Beside them:
//!
//! - [`wire`]: the handshake and the frames;
//! - [`config`]: the configuration file;
//! - [`client`]: the local client socket behind `hilock lock` and `hilock status`;
//! - `membership` (feature `etcd`): node leases, the member list, epochs and the recovery
//!   leader through etcd;
//! - `leases` (feature `etcd` or `sim`): the lease state and member view the node follows,
//!   the keep-alive loop, and (feature `sim`) the simulation's stand-in for etcd;
//! - [`proc`]: the process group of `hilock lock`'s command (kill it, see it gone);
//! - [`oracle`]: the history checker of `hilock demo` and the tests, and the loopback
//!   cluster they run it on.

pub mod agents;
pub mod bakery;
pub mod client;
pub mod config;
#[cfg(any(feature = "etcd", feature = "sim"))]
pub mod leases;
#[cfg(feature = "etcd")]
pub mod membership;
pub mod oracle;
pub mod proc;
pub mod ring;
pub mod token;
pub mod wire;

/// The tests' loopback ports (`tests/support/ports.rs`), which the tests' etcd support
/// takes its ports from (`crate::ports`), for the unit tests that start etcd.
#[cfg(all(test, feature = "etcd"))]
#[path = "../tests/support/ports.rs"]
mod ports;

pub use config::{Config, NodeAddr, MAX_NODES};
/// The modes and priorities every lock call takes, from the kernel (one dependency is
/// enough to use the runtime).
pub use hilock_kernel::{Mode, Priority, ValueBlock, VALUE_LEN};
pub use token::{intention, Blocked, Error, Guard, Handle, Node, Options, Stats, Status};
