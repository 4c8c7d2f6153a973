//! # hilock-kernel
//!
//! The rules of Desai & Mueller's peer-to-peer hierarchical locking protocol (N. Desai,
//! *Scalable Distributed Concurrency Protocol with Priority Support*, NCSU 2003, chapter 2)
//! as pure transition functions: `no_std`, no heap, safe Rust only, no clock, no randomness.
//!
//! - [`mode`]: modes IR, R, U, IW, W, their strength (inequation 2.1) and Table 2.1;
//! - [`tables`]: Tables 2.1–2.4, literal and derived;
//! - [`node`]: one lock at one site, Rules 2–7;
//! - [`site`]: a site with `L` locks and the single entry point [`Site::step`];
//! - [`prio`]: priorities, frozen thresholds (Rule 6_PRIO) and inheritance (PCEP, PIP);
//! - [`recovery`]: epochs, leases and the recovery transitions of the fault model
//!   (`docs/faults.md`, "The recovery mechanism"): stale-epoch messages rejected, a lost
//!   token regenerated once;
//! - [`naimi`]: the Naimi-Trehel baseline behind the same [`Protocol`] interface;
//! - [`pnaimi`]: Mueller's prioritized Naimi protocol, the baseline of chapter 3;
//! - [`tree`]: Preston & Prasad's multi-granular tree locking (colours, grey counts,
//!   demotion and promotion, top-down handshake latches).
//!
//! ```
//! use hilock_kernel::{DefaultSite, Input, LockId, Mode, NodeId, Output, Outputs, Msg};
//! let root = NodeId(0);
//! let mut a = DefaultSite::new(NodeId(0), root).unwrap();
//! let mut b = DefaultSite::new(NodeId(1), root).unwrap();
//! let mut out: Outputs<Msg<8>, 26> = Outputs::new();
//! // b asks for R: Rule 2 sends the request to its parent, the token node a.
//! b.step(Input::Acquire { lock: LockId(0), mode: Mode::R }, &mut out).unwrap();
//! let Some(Output::Send { to, msg }) = out.pop() else { panic!() };
//! assert_eq!(to, root);
//! // a owns Φ < R: Rule 3.2 transfers the token to b.
//! a.step(Input::Deliver { from: NodeId(1), msg: &msg }, &mut out).unwrap();
//! let Some(Output::Send { msg, .. }) = out.pop() else { panic!() };
//! b.step(Input::Deliver { from: root, msg: &msg }, &mut out).unwrap();
//! assert_eq!(out.pop(), Some(Output::Granted { lock: LockId(0), mode: Mode::R }));
//! assert!(b.lock(LockId(0)).unwrap().has_token());
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod agent;
pub mod bakery;
pub mod chord;
pub mod error;
pub mod keep;
pub mod mode;
pub mod msg;
pub mod naimi;
pub mod node;
pub mod pnaimi;
pub mod prio;
pub mod protocol;
pub mod recovery;
pub mod report;
pub mod site;
pub mod tables;
pub mod tree;

pub use error::KernelError;
pub use keep::ReleaseRule;
pub use mode::{compatible, conflicts, Mode, ModeSet};
pub use msg::{Input, LockId, Msg, MsgKind, NodeId, Output, Outputs, QueueEntry, Sink};
pub use naimi::{NaimiMsg, NaimiSite};
pub use node::{Forwarding, LockNode, Peer, Pending, Stale, Variant};
pub use pnaimi::{PrioNaimiMsg, PrioNaimiSite, PrioRequest};
pub use prio::{Frozen, Inheritance, Priority};
pub use protocol::Protocol;
pub use report::{Report, Rule, RuleSet};
pub use site::{DefaultSite, Priorities, Site};

/// The README's code blocks, compiled and run as doctests (`cargo test --doc -p
/// hilock-kernel`), so the kernel example there cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
