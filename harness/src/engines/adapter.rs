//! What the engine sites of [`super`] share as [`Protocol`](hilock_kernel::Protocol) sites
//! of the one harness: their step is all-or-nothing ([`all_or_nothing`], every site), and
//! the bakery, central and ring sites serve exclusive (W-only) locks without a token
//! ([`exclusive_held`]).
//!
//! These sites are host-side adapters around kernel engines (or, for the central server,
//! a stand-in with no kernel engine), so unlike the kernel's own `step` they may keep a
//! copy of themselves to undo a step that failed half-way.

use hilock_kernel::{KernelError, Mode, Output, Report, Sink};

/// Runs `f` on `site`, which collects its outputs in a vector, and hands them to `out`
/// only if `f` succeeded and they all fit. A sink with less room than `max` (the site's
/// `Protocol::MAX_OUTPUTS`) is refused before anything runs, as the kernel's steps refuse
/// it. On an error (from `f`, or [`KernelError::OutputsFull`] when `out` has too little
/// room) `site` is as it was before the call and `out` is untouched.
pub fn all_or_nothing<T: Clone, M, S: Sink<Output<M>>>(
    site: &mut T,
    out: &mut S,
    max: usize,
    f: impl FnOnce(&mut T, &mut Vec<Output<M>>) -> Result<(), KernelError>,
) -> Result<Report, KernelError> {
    if out.room() < max {
        return Err(KernelError::OutputsFull);
    }
    let before = site.clone();
    let mut sends = Vec::new();
    let r = f(site, &mut sends).and_then(|()| {
        if out.room() < sends.len() {
            Err(KernelError::OutputsFull)
        } else {
            Ok(())
        }
    });
    if let Err(e) = r {
        *site = before;
        return Err(e);
    }
    for s in sends {
        // Cannot fail: the room was checked above.
        let _ = out.put(s);
    }
    Ok(Report::default())
}

/// The held mode of a lock on a site whose locks are exclusive: `W` when held, `Φ`
/// otherwise; `known` is whether the site knows the lock (else the `error`).
pub fn exclusive_held(known: bool, held: bool, error: KernelError) -> Result<Mode, KernelError> {
    match (known, held) {
        (false, _) => Err(error),
        (true, true) => Ok(Mode::W),
        (true, false) => Ok(Mode::Phi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VecSink;
    use hilock_kernel::{LockId, NodeId};

    /// A sink with room for `n` outputs.
    struct Small(Vec<Output<u8>>, usize);
    impl Sink<Output<u8>> for Small {
        fn put(&mut self, o: Output<u8>) -> Result<(), Output<u8>> {
            if self.0.len() < self.1 {
                self.0.push(o);
                Ok(())
            } else {
                Err(o)
            }
        }
        fn room(&self) -> usize {
            self.1 - self.0.len()
        }
    }

    fn two_sends(site: &mut u32, sends: &mut Vec<Output<u8>>) -> Result<(), KernelError> {
        *site += 1;
        for msg in [1, 2] {
            sends.push(Output::Send { to: NodeId(0), msg });
        }
        Ok(())
    }

    #[test]
    fn a_step_that_does_not_fit_or_fails_changes_nothing() {
        let mut site = 7u32;
        let mut out = Small(Vec::new(), 1);
        assert_eq!(
            all_or_nothing(&mut site, &mut out, 0, two_sends),
            Err(KernelError::OutputsFull)
        );
        assert_eq!((site, out.0.len()), (7, 0));
        let failing = |s: &mut u32, _: &mut Vec<Output<u8>>| {
            *s = 99;
            Err(KernelError::UnknownLock(LockId(3)))
        };
        assert_eq!(
            all_or_nothing(&mut site, &mut out, 0, failing),
            Err(KernelError::UnknownLock(LockId(3)))
        );
        assert_eq!(site, 7);
        let mut out: VecSink<Output<u8>> = VecSink::new();
        assert_eq!(
            all_or_nothing(&mut site, &mut out, 0, two_sends),
            Ok(Report::default())
        );
        assert_eq!((site, out.0.len()), (8, 2));
        // Less room than the site's most outputs: refused before the step runs.
        let mut out = Small(Vec::new(), 2);
        assert_eq!(
            all_or_nothing(&mut site, &mut out, 3, two_sends),
            Err(KernelError::OutputsFull)
        );
        assert_eq!((site, out.0.len()), (8, 0));
    }

    #[test]
    fn exclusive_locks_are_held_in_w_or_not_at_all() {
        let e = KernelError::UnknownLock(LockId(1));
        assert_eq!(exclusive_held(true, true, e), Ok(Mode::W));
        assert_eq!(exclusive_held(true, false, e), Ok(Mode::Phi));
        assert_eq!(exclusive_held(false, true, e), Err(e));
    }
}
