//! The bakery design on real replicas: the kernel's bakery [`Client`](hilock_kernel::bakery::Client)
//! driven over `N` `redis-server` instances.
//!
//! The kernel decides everything the algorithm decides (which line comes next, the quorum
//! counts, the merge of answers by write timestamp, the number drawn, the waits, the
//! leases); this module only does I/O:
//!
//! - [`store`]: the [`ReplicaBackend`] trait (one replica answers one kernel
//!   [`Request`](hilock_kernel::bakery::Request)), the strict text encoding of a cell and
//!   [`QuorumStore`], which sends each request to its replica with a time limit and hands
//!   the answers back; a replica that does not answer in time, or whose answer does not
//!   decode, counts as missing (and is named in the error);
//! - [`redis`]: the backend over one `redis-server`: a hash per lock and column family,
//!   last-write-wins per field by a server-side Lua script that applies a write only if
//!   its cell supersedes the stored one by the kernel's rule
//!   ([`Cell::supersedes`](hilock_kernel::bakery::Cell::supersedes));
//! - [`lock`]: [`BakeryLock`], the driver: feeds the client's `Send` outputs to the store,
//!   the replies, ticks and wake-ups back in, retries missing replicas with backoff up to the
//!   caller's deadline, and tells the end of its lease ([`Driver::lease_end`]);
//!   `hilock bakery lock` runs its command under it (cli/src/run_under_lock.rs);
//! - [`ident`]: a client id's registration on the replicas, which refuses a second live
//!   client with the same id;
//! - [`queue`]: the work queue — the same driver running the kernel's queue program over a
//!   window of items, the push, `hilock bakery queue push|work`.

pub mod ident;
pub mod lock;
pub mod queue;
pub mod redis;
pub mod store;

pub use lock::{BakeryLock, Driver, Error, Options, Stats};
pub use queue::{BakeryQueue, Taken};
pub use store::{QuorumStore, ReplicaBackend, ReplicaError, Scope, COLUMNS, QUEUE_ROWS};
