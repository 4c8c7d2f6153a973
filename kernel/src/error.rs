//! Typed errors: every input that does not fit the state is rejected with one of these,
//! and a rejected input changes nothing (no state change, no output).

use crate::msg::{LockId, NodeId};
use core::fmt;

/// Why the kernel rejected an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum KernelError {
    /// The lock id is not one of this site's `0..L` locks.
    UnknownLock(LockId),
    /// The node id is not one of the `0..N` nodes (or a message names this site as a peer
    /// where it cannot be one, e.g. a message from itself).
    UnknownNode(NodeId),
    /// Φ was requested, or a message carries Φ where a requested mode is required.
    InvalidMode,
    /// `Acquire` while this site already holds the lock (a site holds one mode at a time;
    /// use `Upgrade` for U → W).
    AlreadyHeld(LockId),
    /// `Acquire`/`Upgrade` while a request of this site for the lock is still pending.
    AlreadyPending(LockId),
    /// `Cancel` while this site has no request, try or upgrade of the lock pending, or
    /// only one it already cancelled (`spec/SPEC.md` 1.13).
    NotPending(LockId),
    /// `Acquire`/`TryAcquire` of another mode or kind than a cancelled request of this
    /// site that still runs in the protocol (`spec/SPEC.md` 1.13): the same mode and kind
    /// take that request back; anything else waits until it has completed.
    CancelRunning(LockId),
    /// `Cancel` on a protocol that has no cancel (the Naimi-Trehel baselines).
    CancelUnsupported(LockId),
    /// `Downgrade` to a mode that is not weaker than the held one (`spec/SPEC.md` 1.14,
    /// [`crate::Mode::downgrades_to`]).
    NotWeaker(LockId),
    /// `Downgrade` on a protocol that has no downgrade (the Naimi-Trehel baselines).
    DowngradeUnsupported(LockId),
    /// `Convert` on a protocol that has no conversion (the Naimi-Trehel baselines).
    ConvertUnsupported(LockId),
    /// `SetValue` while this site does not hold the lock in W (`spec/SPEC.md` 1.15): only
    /// the W holder writes the value block.
    NotWriter(LockId),
    /// `SetValue` on a protocol that has no value block (the Naimi-Trehel baselines).
    ValueUnsupported(LockId),
    /// `Release` or `Downgrade` while this site holds nothing.
    NotHeld(LockId),
    /// `Upgrade` while this site does not hold the lock in U (Rule 7).
    NotHoldingU(LockId),
    /// `Release` or `Downgrade` of U while the upgrade to W is pending (Rule 7 keeps U
    /// until W is granted).
    UpgradePending(LockId),
    /// A message that is a duplicate of one already delivered (a token whose generation or
    /// a grant whose epoch was already seen).
    Duplicate(LockId),
    /// A request this site could not queue: the local queue is full.
    QueueFull(LockId),
    /// A token whose queue could not be merged with the local queue within capacity.
    QueueOverflow(LockId),
    /// The site has no parent to forward to although it is not the token node
    /// (the initial tree was not set up for this lock).
    NoParent(LockId),
    /// The step would produce more outputs than the output buffer has room for.
    OutputsFull,
    /// A message stamped with an earlier epoch than the receiver's ([`crate::token::recovery`]):
    /// it was sent before the current membership was installed.
    StaleEpoch(LockId),
    /// A message stamped with a later epoch than the receiver's: the receiver has not
    /// installed that epoch yet (a runtime keeps the message until it has).
    FutureEpoch(LockId),
    /// The site is not a member of the current epoch: its lease expired, or it is a new
    /// incarnation waiting to be let in ([`crate::token::recovery`]).
    NotMember,
    /// The engine behind this site does not take this input (a host-side adapter of an
    /// engine other than the token engine: the tree has no waiting acquire, for example).
    Unsupported(LockId),
    /// The engine took back a lock its user was told it holds, or ended the user's hold of
    /// it (a host-side adapter whose interface has no revocation: the agents engine's
    /// revoke or abort).
    Revoked(LockId),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::UnknownLock(l) => write!(f, "unknown lock {l}"),
            KernelError::UnknownNode(n) => write!(f, "unknown node {n}"),
            KernelError::InvalidMode => write!(f, "Φ is not a requestable mode"),
            KernelError::AlreadyHeld(l) => write!(f, "lock {l} is already held here"),
            KernelError::AlreadyPending(l) => {
                write!(f, "a request for lock {l} is already pending")
            }
            KernelError::NotPending(l) => write!(f, "nothing of lock {l} is pending to cancel"),
            KernelError::CancelRunning(l) => write!(
                f,
                "lock {l}: a cancelled request of another mode is still running"
            ),
            KernelError::CancelUnsupported(l) => {
                write!(f, "lock {l}: this protocol cannot cancel a request")
            }
            KernelError::NotWeaker(l) => {
                write!(
                    f,
                    "lock {l}: downgrade needs a weaker mode than the held one"
                )
            }
            KernelError::DowngradeUnsupported(l) => {
                write!(f, "lock {l}: this protocol cannot downgrade a hold")
            }
            KernelError::ConvertUnsupported(l) => {
                write!(f, "lock {l}: this protocol cannot convert a hold")
            }
            KernelError::NotWriter(l) => {
                write!(f, "lock {l}: only its W holder writes the value block")
            }
            KernelError::ValueUnsupported(l) => {
                write!(f, "lock {l}: this protocol has no value block")
            }
            KernelError::NotHeld(l) => write!(f, "lock {l} is not held here"),
            KernelError::NotHoldingU(l) => write!(f, "upgrade needs lock {l} held in U"),
            KernelError::UpgradePending(l) => write!(
                f,
                "lock {l}: U cannot be released while its upgrade is pending"
            ),
            KernelError::Duplicate(l) => write!(f, "duplicate message for lock {l}"),
            KernelError::QueueFull(l) => write!(f, "local queue of lock {l} is full"),
            KernelError::QueueOverflow(l) => write!(f, "token queue of lock {l} does not fit"),
            KernelError::NoParent(l) => write!(f, "lock {l}: not the token node and no parent"),
            KernelError::OutputsFull => write!(f, "output buffer too small for this step"),
            KernelError::StaleEpoch(l) => write!(f, "lock {l}: message from an earlier epoch"),
            KernelError::FutureEpoch(l) => write!(f, "lock {l}: message from a later epoch"),
            KernelError::NotMember => write!(f, "this site is not a member of the current epoch"),
            KernelError::Unsupported(l) => {
                write!(f, "lock {l}: this engine does not take that input")
            }
            KernelError::Revoked(l) => {
                write!(f, "lock {l}: the engine took back a lock its user holds")
            }
        }
    }
}
