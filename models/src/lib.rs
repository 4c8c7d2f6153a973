//! Stateright models of hilock that drive `hilock-kernel` sites.
//!
//! - [`agents`]: Wiger's deadlock-resolving agents and lock servers (seed 001);
//! - [`base`]: the chapter-2 protocol (properties P1–P6), configurations as values;
//! - [`check`]: `check` / `explore`, the API of `hilock check` and `hilock explore`;
//! - [`faults`]: the base protocol with crashes, restarts, partitions, lease expiry and
//!   epoch installation, driving `hilock_kernel::recovery` (`docs/faults.md`);
//! - [`inversion`]: the priority-inversion model of thesis section 3.6 (property P7);
//! - [`open`]: a saved trace replayed to its Explorer path and URL, and its sequence
//!   diagram (`hilock explore --trace`, `hilock replay --svg/--html`);
//! - [`seq`]: message sequence diagrams (SVG), which every model's `as_svg` draws;
//! - [`tree`]: Preston & Prasad tree locking, concurrent inserts and removes interleaved
//!   one node latch at a time (property P8).

pub mod agents;
pub mod bakery;
pub mod base;
pub mod check;
pub mod chord;
pub mod faults;
pub mod inversion;
pub mod open;
pub mod seq;
pub mod tree;
