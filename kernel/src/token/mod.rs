//! The token engine: Desai & Mueller's peer-to-peer hierarchical locking (N. Desai,
//! *Scalable Distributed Concurrency Protocol with Priority Support*, NCSU 2003, chapters 2
//! and 3). The entry point is [`site::Site::step`]; the crate root re-exports its types.
//!
//! - [`tables`]: Tables 2.1–2.4, literal and derived;
//! - [`node`]: one lock at one site, Rules 2–7;
//! - [`site`]: a site with `L` locks and the single entry point [`site::Site::step`];
//! - [`prio`]: priorities, frozen thresholds (Rule 6_PRIO) and inheritance (PCEP, PIP);
//! - [`keep`]: the release rules (the thesis's eager release, or intentions kept);
//! - [`value`]: the lock value block (`spec/SPEC.md` 1.15);
//! - [`wrap`]: the comparison of counters that wrap (hops, epochs, generations, serials);
//! - [`recovery`]: epochs, leases and the recovery transitions of the fault model
//!   (`docs/faults.md`, "The recovery mechanism").

pub mod keep;
pub mod node;
pub mod prio;
pub mod recovery;
pub mod site;
pub mod tables;
pub mod value;
pub mod wrap;
