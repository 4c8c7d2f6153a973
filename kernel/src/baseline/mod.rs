//! The baselines the token engine is measured against, behind the same
//! [`Protocol`](crate::Protocol) interface.
//!
//! - [`naimi`]: Naimi-Trehel's path-reversal token protocol (one exclusive token);
//! - [`pnaimi`]: Mueller's prioritized Naimi protocol, the baseline of the thesis's chapter 3.

pub mod naimi;
pub mod pnaimi;

use crate::{KernelError, LockId, Mode};

/// A local request (`Acquire` or `TryAcquire`) at a baseline site: refused with a typed
/// error, nothing changed, unless `mode` is a mode and the site neither holds (`held`)
/// nor waits (`pending`: the mode it waits for, Φ if none).
pub(crate) fn check_request(
    lock: LockId,
    mode: Mode,
    held: Mode,
    pending: Mode,
) -> Result<(), KernelError> {
    if mode == Mode::Phi {
        return Err(KernelError::InvalidMode);
    }
    if held != Mode::Phi {
        return Err(KernelError::AlreadyHeld(lock));
    }
    if pending != Mode::Phi {
        return Err(KernelError::AlreadyPending(lock));
    }
    Ok(())
}
