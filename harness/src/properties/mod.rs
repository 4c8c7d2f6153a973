//! The properties the harness checks, one file each: its statement (the file's docs), its
//! name as violations report it (as in `spec/SPEC.md`; saved counterexamples and tests match
//! on it) and its check, a method of [`Cluster`].
//!
//! | property | what it means | thesis/paper section | kernel module it checks | checked by |
//! |---|---|---|---|---|
//! | [P1 mutual exclusion](p1_mutual_exclusion) | no two sites hold modes of a lock that conflict by the literal Table 2.1 (`check_mutual_exclusion`); for protocols whose every mode is exclusive, at most one holder (`check_exclusive`) | Table 2.1; Naimi-Trehel, section 2.1 | `kernel/src/token/` (grants: `node.rs`, `site.rs`; the table: `tables.rs`), `kernel/src/baseline/` | models `token`, `inversion`, `faults`; simulator (`benches/src/agents.rs`, and `check_exclusive` in `benches/src/token.rs`, `benches/tests/ringair.rs`); every caller of `check_safety`, with the agents and tree sites' own invariants (P1 over the agents' path hierarchy, the tree's audit: [`crate::engines`]) in `kernel/tests/agents_schedules.rs` and `kernel/tests/tree_service.rs` |
//! | [P2 single token](p2_single_token) | per lock one token, at a site or in flight (at most one after a loss or a crash); for protocols with tokens only (`Protocol::TOKENS`) | section 2.1 (the token of Naimi-Trehel, per lock) | `kernel/src/token/node.rs` (token transfer), `kernel/src/baseline/` | models `token`, `inversion`; every caller of `check_safety` |
//! | [P3 owned-mode invariant](p3_owned_modes) | on a quiet link a parent's record of a child is the child's owned mode (FIFO, no faults) or covers it (unordered or reordered); a recorded child has the recorder as its parent | invariant 2.2 | `kernel/src/token/node.rs` (`LockNode::on_grant`, `on_token`, `on_release`) | models `token`, `inversion`; `check_safety` on hilock sites |
//! | [P3b frozen-mode invariant](p3b_frozen_modes) | on a quiet link every mode the parent froze that the child could grant is frozen at the child, with at least the parent's threshold (FIFO, no faults) | invariant 2.3 (Rule 6; thresholds: chapter 3) | `kernel/src/token/node.rs` (freezes), `kernel/src/token/prio.rs` (thresholds) | models `token`, `inversion`; `check_safety` on hilock sites |
//! | [P4 no deadlock](p4_no_deadlock) | nothing in flight and every user idle: no request is pending | none (hilock's statement: `docs/engines/token.md`, "Properties") | queueing and forwarding of every `Protocol` engine (`kernel/src/token/`, `kernel/src/baseline/`) | models `token`, `inversion`; [`Cluster::drain`] (`spec/tests/robustness.rs`, `kernel/tests/naimi.rs`, `kernel/tests/pnaimi.rs`, `kernel/tests/agents_schedules.rs`, `kernel/tests/tree_service.rs`) |
//! | [no kernel error](no_kernel_error) | the kernel accepted every ordinary input | none | the validation of `Protocol::step` (`kernel/src/error.rs`, every engine) | models `token`, `inversion` (the scenario runner reports a rejection itself) |
//! | [P10 fencing tokens increase](p10_fencing) | of two grants of a lock in conflicting modes, the later has the larger fence | none (hilock's extension: `spec/SPEC.md`, fencing tokens) | `kernel/src/token/node.rs` (`LockNode::fence`, the fence counter) | model `token`; `check_safety` on hilock sites |
//! | [P11 no grant after WouldBlock](p11_no_grant_after_would_block) | a site whose try-lock was refused is not granted the lock until it asks again | none (hilock's try-lock: `spec/SPEC.md` 1.12) | `kernel/src/token/node.rs` (`LockNode::try_acquire`, `on_try_request`, `on_busy`) | model `token`; every caller of `check_safety` |
//! | [P12 a try leaves nothing pending](p12_try_leaves_nothing) | after `WouldBlock` the site has nothing pending for the lock and no queue holds the try | none (hilock's try-lock: `spec/SPEC.md` 1.12) | `kernel/src/token/node.rs` (the try never enters a queue) | model `token`; `check_safety` on hilock sites |
//! | [P14 no grant after Cancel](p14_no_grant_after_cancel) | a site that cancelled its request, try or upgrade of a lock is not granted (or upgraded) until it asks again | none (hilock's cancel: `spec/SPEC.md` 1.13) | `kernel/src/token/node.rs` (`LockNode::cancel`, `enter_or_release`, `release_cancelled`) | model `token`; every caller of `check_safety` |
//! | [P15 a cancel leaves nothing](p15_cancel_leaves_nothing) | once a cancelled request completes the site holds what it held at the cancel and (FIFO, no faults, no PIP) no queue holds the request; while it runs it stays marked cancelled | none (hilock's cancel: `spec/SPEC.md` 1.13) | `kernel/src/token/node.rs` (the cancelled request's grant is released by Rule 5) | model `token`; `check_safety` on hilock sites |
//! | [P16 a valid value block is the last one written](p16_value_block) | every grant (and completed upgrade) whose value block is valid reads the last value a W holder wrote before it | none (hilock's lock value block: `spec/SPEC.md` 1.15) | `kernel/src/token/node.rs` (`LockNode::set_value`, the block carried by `Msg::Token` and `Msg::Grant`), `kernel/src/token/recovery.rs` (a regenerated token's block is not valid) | model `token`; every caller of `check_safety` |
//! | [P17 a blocking notification names a waiter, once per hold](p17_blocking) | every `Blocking` goes to a holder of a conflicting mode while a request for the waiting mode is pending at another site, at most once per holder, waiting mode and hold | none (hilock's blocking notification: `spec/SPEC.md` 1.16; Rule 6, Table 2.4) | `kernel/src/token/node.rs` (`LockNode::tell_blocking`, the `waiting` modes of `Msg::Freeze`) | model `token`; every caller of `check_safety` |
//!
//! "Every caller of `check_safety`": the scenario runner (`hilock_spec::scenario`),
//! `spec/tests/robustness.rs`, `spec/tests/embedded_script.rs` and the kernel's integration
//! tests (`kernel/tests/`). Which of P3, P3b, P10, P12, P15 and P17's waiter
//! [`Cluster::check_safety`] checks besides P1, P2, P11, P14, P16 and P17 is the protocol's
//! [`Invariants`].

pub mod no_kernel_error;
pub mod p10_fencing;
pub mod p11_no_grant_after_would_block;
pub mod p12_try_leaves_nothing;
pub mod p14_no_grant_after_cancel;
pub mod p15_cancel_leaves_nothing;
pub mod p16_value_block;
pub mod p17_blocking;
pub mod p1_mutual_exclusion;
pub mod p2_single_token;
pub mod p3_owned_modes;
pub mod p3b_frozen_modes;
pub mod p4_no_deadlock;

pub use crate::cluster::BlockingBreach;
pub use no_kernel_error::NO_ERROR;
pub use p10_fencing::{FenceBreach, FENCE};
pub use p11_no_grant_after_would_block::P11;
pub use p12_try_leaves_nothing::P12;
pub use p14_no_grant_after_cancel::P14;
pub use p15_cancel_leaves_nothing::P15;
pub use p16_value_block::P16;
pub use p17_blocking::P17;
pub use p1_mutual_exclusion::P1;
pub use p2_single_token::P2;
pub use p3_owned_modes::{covers, P3};
pub use p3b_frozen_modes::P3B;
pub use p4_no_deadlock::P4;

use crate::Cluster;
use hilock_kernel::{LockId, MsgKind, NaimiSite, NodeId, PrioNaimiSite, Protocol, Site};
use std::fmt;
use std::hash::Hash;

/// A violated property: its name (as in `spec/SPEC.md`) and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The property, e.g. `"P1 mutual exclusion"`.
    pub property: &'static str,
    /// What violates it.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated: {}", self.property, self.detail)
    }
}

impl From<Violation> for String {
    fn from(v: Violation) -> String {
        v.to_string()
    }
}

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// Every safety property that applies, after any step: P1, P2, P11, P14, P16, P17 and the
    /// protocol's own invariants ([`Invariants`], e.g. P3, P3b, P10, P12 and P15 for hilock
    /// sites), each where the
    /// cluster's faults allow it. (No kernel error is separate,
    /// [`Cluster::check_no_kernel_error`]: a driver that feeds nonsense on purpose expects
    /// rejections.)
    pub fn check_safety(&self) -> Result<(), Violation>
    where
        P: Invariants,
    {
        self.check_mutual_exclusion()?;
        self.check_single_token()?;
        self.check_no_grant_after_would_block()?;
        self.check_no_grant_after_cancel()?;
        self.check_value_block()?;
        self.check_blocking()?;
        P::invariants(self)
    }
}

/// Invariants of one protocol over a whole cluster, beyond P1 and P2 (which every token
/// protocol shares). [`Cluster::check_safety`] checks them.
pub trait Invariants: Protocol + Sized {
    /// Checks the protocol's own invariants where the cluster's faults allow them.
    fn invariants(cluster: &Cluster<Self>) -> Result<(), Violation> {
        let _ = cluster;
        Ok(())
    }
}

impl<const N: usize, const L: usize> Invariants for NaimiSite<N, L> {
    fn invariants(c: &Cluster<Self>) -> Result<(), Violation> {
        c.check_exclusive()
    }
}
impl<const N: usize, const L: usize, const P: usize, const Q: usize> Invariants
    for PrioNaimiSite<N, L, P, Q>
{
    fn invariants(c: &Cluster<Self>) -> Result<(), Violation> {
        c.check_exclusive()
    }
}

impl<const N: usize, const L: usize, const Q: usize> Invariants for Site<N, L, Q> {
    fn invariants(c: &Cluster<Self>) -> Result<(), Violation> {
        c.check_owned_records()?;
        c.check_frozen_reach_children()?;
        c.check_fences()?;
        c.check_try_leaves_nothing()?;
        c.check_cancel_leaves_nothing()?;
        c.check_blocking_waiter()
    }
}

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// Every (lock, child, parent) of a live non-token node whose link to a live parent is
    /// quiet by `kind`.
    pub(crate) fn quiet_links(
        &self,
        kind: fn(MsgKind) -> bool,
    ) -> impl Iterator<Item = (LockId, NodeId, NodeId)> + '_ {
        (0..L).flat_map(move |l| {
            let lock = LockId(l as u16);
            self.live().filter_map(move |(c, s)| {
                let node = &s.locks()[l];
                let p = node.parent()?;
                (!node.has_token()
                    && p.idx() < self.len()
                    && !self.crashed.contains(&p)
                    && self.quiet(c, p, lock, kind))
                .then_some((lock, c, p))
            })
        })
    }
}
