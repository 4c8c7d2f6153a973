//! Stateright models of hilock that drive `hilock-kernel` sites.
//!
//! - [`token`]: the token engine, chapter 2 of the thesis (properties P1–P6),
//!   configurations as values; [`faults`] and [`inversion`] model it under faults and
//!   priorities;
//! - [`agents`]: Wiger's deadlock-resolving agents and lock servers;
//! - [`ring`]: the Chord-placed lock service, the paper's server and hilock's replicated
//!   one;
//! - [`bakery`]: the bakery lock over quorum reads and writes;
//! - [`check`]: `check` / `explore`, the API of `hilock check` and `hilock explore` for
//!   the token engine, and `check_model`, a one-thread check of any model with every
//!   property (behind `hilock check` for the inversion, ring and fault models);
//! - [`faults`]: the base protocol with crashes, restarts, partitions, lease expiry and
//!   epoch installation, driving `hilock_kernel::token::recovery` (`docs/faults.md`);
//! - [`inversion`]: the priority-inversion model of thesis section 3.6 (property P7);
//! - [`open`]: a saved trace replayed to its Explorer path and URL, and its sequence
//!   diagram (`hilock explore --trace`, `hilock replay --svg/--html`); the configuration
//!   files of the other models (`"model": "tree"`, …, `"ring"`, `"faults"`) and their
//!   checks;
//! - [`seq`]: message sequence diagrams (SVG), which every model's `as_svg` draws;
//! - [`tree`]: Preston & Prasad tree locking, concurrent inserts and removes interleaved
//!   one node latch at a time (property P8).

pub mod agents;
pub mod bakery;
pub mod check;
pub mod faults;
pub mod inversion;
pub mod open;
pub mod ring;
pub mod seq;
pub mod token;
pub mod tree;
