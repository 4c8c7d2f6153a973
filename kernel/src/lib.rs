//! # hilock-kernel
//!
//! The rules of Desai & Mueller's peer-to-peer hierarchical locking protocol (N. Desai,
//! *Scalable Distributed Concurrency Protocol with Priority Support*, NCSU 2003, chapter 2)
//! as pure transition functions: `no_std`, no heap, safe Rust only, no clock, no randomness.
//!
//! What every engine shares stays at the root: [`mode`] (modes IR, R, U, IW, W, their
//! strength, inequation 2.1, and Table 2.1), [`msg`] (ids, the token engine's messages,
//! the output sinks), [`report`] (the rules that fired), [`error`], and [`protocol`] (the
//! step contract every engine implements); with the cargo feature `codec`, `codec` (the
//! token engine's messages as bounded postcard frames). The engines, one module each:
//!
//! - [`token`]: Desai & Mueller's token tree, Rules 2–8, Tables 2.1–2.4, priorities, PCEP
//!   and PIP, recovery; entry point [`Site::step`] (types re-exported here);
//! - [`baseline`]: Naimi-Trehel and Mueller's prioritized Naimi, the measured baselines;
//! - [`tree`]: Preston & Prasad's multi-granular tree locking (colours, grey counts,
//!   demotion and promotion, top-down handshake latches); entry point [`tree::TreeLock`];
//! - [`agents`]: Wiger's deadlock-resolving lock agents (uwiger/locks): lock servers and
//!   transaction agents; entry points [`agents::LockServer`] and [`agents::Agent`];
//! - [`ring`]: the Chord-placed lock service and hilock's replicated ring server; entry
//!   points [`ring::RingServer`] and [`ring::ChordClient`];
//! - [`bakery`]: Lamport's bakery over quorum reads and writes; entry point
//!   [`bakery::Client`].
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

pub mod agents;
pub mod bakery;
pub mod baseline;
#[cfg(feature = "codec")]
pub mod codec;
pub mod error;
pub mod mode;
pub mod msg;
pub mod protocol;
pub mod report;
pub mod ring;
#[cfg(feature = "serde")]
mod serde_array;
pub mod token;
pub mod tree;

pub use baseline::naimi::{NaimiMsg, NaimiSite};
pub use baseline::pnaimi::{PrioNaimiMsg, PrioNaimiSite, PrioRequest};
pub use error::KernelError;
pub use mode::{compatible, conflicts, Mode, ModeSet};
pub use msg::{Input, LockId, Msg, MsgKind, NodeId, Output, Outputs, QueueEntry, Sink};
pub use protocol::Protocol;
pub use report::{Report, Rule, RuleSet};
pub use token::keep::ReleaseRule;
pub use token::node::{Forwarding, LockNode, Peer, Pending, Stale, Variant};
pub use token::prio::{Frozen, Inheritance, Priority};
pub use token::site::{DefaultSite, Priorities, Site};
pub use token::value::{ValueBlock, VALUE_LEN};

/// The README's code blocks, compiled and run as doctests (`cargo test --doc -p
/// hilock-kernel`), so the kernel example there cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
