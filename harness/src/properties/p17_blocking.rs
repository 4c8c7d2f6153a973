//! P17, a blocking notification names a real waiter, once: every `Output::Blocking { lock,
//! mode, prio }` (`spec/SPEC.md` 1.16, the DLM's blocking AST) goes to a site that holds
//! `lock` in a mode conflicting with `mode` (Table 2.1), while another site has a request
//! (or a Rule 7 upgrade) for `mode` pending — the waiter exists at that step — and no hold
//! is told about the same waiting mode twice ([`Cluster::check_blocking`]). The cluster
//! keeps a ghost of the waiting modes each hold was told about, emptied when the site
//! releases the lock (an accepted `Release`) or is granted it again. The waiter is looked
//! for only without faults: a crashed or injected history may leave a freeze naming a
//! request that no live site still has. One waiter may vanish without being granted: a
//! Rule 7 upgrade (or a conversion, 1.17) withdrawn by a cancel (`spec/SPEC.md` 1.13) ends
//! at once at the token node while a freeze naming its W (its mode) may still be on its way
//! to a copy holder; so once an upgrade or conversion of a lock has been cancelled, a
//! notification of its mode on that lock needs no waiter (the ghost remembers the lock and
//! mode for the rest of the run). Nor is the waiter looked for
//! under PIP: a reissue (section 3.7.2) leaves older copies of a request in queues, and a
//! token node may tell its hold of a copy whose request was served meanwhile (the random
//! runs of `spec/tests/robustness.rs` found it; P15 excludes PIP for the same copies).
//! That part of P17 is [`Cluster::check_blocking_waiter`], for hilock sites.

use super::Violation;
use crate::cluster::BlockingBreach;
use crate::Cluster;
use hilock_kernel::{conflicts, Inheritance, LockId, Mode, NodeId, Priority, Protocol, Site};
use std::hash::Hash;

/// Every blocking notification goes to a conflicting holder while its waiter exists, at
/// most once per holder, waiting mode and hold.
pub const P17: &str = "P17 a blocking notification names a waiter, once per hold";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// The ghost of P17: `node`'s step (already applied) emitted `Blocking { lock, mode,
    /// prio }`.
    pub(crate) fn note_blocking(&mut self, node: NodeId, lock: LockId, mode: Mode, prio: Priority) {
        if self.ghost().blocking_breach.is_some() {
            return;
        }
        let held = self.site(node).held(lock).unwrap_or(Mode::Phi);
        let told = self.ghost().told.get(&(node, lock)).copied();
        let mut no_waiter = false;
        let breach = if held == Mode::Phi || !conflicts(held, mode) {
            Some(BlockingBreach::NotBlocking(held))
        } else if told.is_some_and(|t| t.contains(mode)) {
            Some(BlockingBreach::Twice)
        } else {
            let waiter = (0..self.len()).map(|i| NodeId(i as u16)).any(|n| {
                n != node
                    && !self.crashed.contains(&n)
                    && self.site(n).pending_mode(lock) == Ok(mode)
            });
            let g = self.ghost();
            let withdrawn = g
                .upgrade_withdrawn
                .get(&lock)
                .is_some_and(|s| s.contains(mode));
            no_waiter =
                !waiter && !withdrawn && self.faults.none() && g.blocking_no_waiter.is_none();
            None
        };
        // The hold's told modes (an entry even for a breach), and what was seen.
        let g = self.ghost_mut();
        let told = g.told.entry((node, lock)).or_default();
        if breach.is_none() {
            told.insert(mode);
        }
        if no_waiter {
            g.blocking_no_waiter = Some((node, lock, mode, prio));
        }
        if let Some(b) = breach {
            g.blocking_breach = Some((node, lock, mode, prio, b));
        }
    }

    /// The ghost of P17: an upgrade (`mode` W) or a conversion to `mode` of `lock` was
    /// withdrawn by a cancel (`spec/SPEC.md` 1.13, 1.17); a freeze naming `mode` may still
    /// be in flight.
    pub(crate) fn note_upgrade_withdrawn(&mut self, lock: LockId, mode: Mode) {
        let known = self.ghost().upgrade_withdrawn.get(&lock);
        if !known.is_some_and(|s| s.contains(mode)) {
            self.ghost_mut()
                .upgrade_withdrawn
                .entry(lock)
                .or_default()
                .insert(mode);
        }
    }

    /// The ghost of P17: `node`'s hold of `lock` ended (or a new one began).
    pub(crate) fn forget_told(&mut self, node: NodeId, lock: LockId) {
        if self.ghost().told.contains_key(&(node, lock)) {
            self.ghost_mut().told.remove(&(node, lock));
        }
    }

    /// P17, for every protocol: every blocking notification so far went to a holder of a
    /// conflicting mode, once per holder, waiting mode and hold.
    pub fn check_blocking(&self) -> Result<(), Violation> {
        let Some((node, lock, mode, prio, breach)) = self.ghost().blocking_breach else {
            return Ok(());
        };
        Self::blocking_violation(node, lock, mode, prio, breach)
    }

    fn blocking_violation(
        node: NodeId,
        lock: LockId,
        mode: Mode,
        prio: Priority,
        breach: BlockingBreach,
    ) -> Result<(), Violation> {
        let why = match breach {
            BlockingBreach::NotBlocking(held) => {
                format!("it holds {held}, which does not conflict with {mode}")
            }
            BlockingBreach::NoWaiter => format!("no other site has a request for {mode} pending"),
            BlockingBreach::Twice => "its hold was told about that mode before".to_string(),
        };
        Err(Violation {
            property: P17,
            detail: format!(
                "{node} was told a request for {lock} {mode} (priority {prio}) waits, but {why}"
            ),
        })
    }
}

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// P17's waiter: every blocking notification so far was told while another site had
    /// a request for the waiting mode pending (checked without faults, not under PIP, and
    /// not for a W once an upgrade of the lock was cancelled).
    pub fn check_blocking_waiter(&self) -> Result<(), Violation> {
        let Some((node, lock, mode, prio)) = self.ghost().blocking_no_waiter else {
            return Ok(());
        };
        if self.site(node).variant().inheritance == Inheritance::Pip {
            return Ok(());
        }
        Self::blocking_violation(node, lock, mode, prio, BlockingBreach::NoWaiter)
    }
}
