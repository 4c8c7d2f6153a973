//! P15, a cancelled request leaves nothing once it completes: a cancelled request keeps
//! running in the protocol until its grant, token or busy answer arrives
//! (`spec/SPEC.md` 1.13); while it runs the site still knows it is cancelled, and once it
//! has completed (nothing pending) the site holds what it held at the cancel (Φ, or U
//! for an upgrade) and — on FIFO channels without faults and without PIP — no site's queue
//! holds an entry of the request ([`Cluster::check_cancel_leaves_nothing`]). (A PIP
//! reissue, a duplicated or a reordered request can leave a stale copy of any request,
//! cancelled or not, in a queue; it is answered as stale when served.)

use super::Violation;
use crate::Cluster;
use crate::Order;
use hilock_kernel::{Inheritance, Mode, Site};

/// After a cancelled request completes, nothing of it is held, pending or queued.
pub const P15: &str = "P15 a cancel leaves nothing";

impl<const N: usize, const L: usize, const Q: usize> Cluster<Site<N, L, Q>> {
    /// P15: for every (node, lock) whose last request was cancelled (the ghost of P14):
    /// while the node has a request pending it is marked cancelled; with nothing pending
    /// the node holds the mode it held at the cancel and (for a request or try, on FIFO
    /// channels without faults, without PIP) no live site's queue of the lock holds an
    /// entry of the node with the request's serial.
    pub fn check_cancel_leaves_nothing(&self) -> Result<(), Violation> {
        let exact = self.order == Order::Fifo && self.faults.none();
        for (&(n, lock), &held) in &self.ghost().cancelled {
            if self.crashed.contains(&n) {
                continue;
            }
            let Ok(node) = self.site(n).lock(lock) else {
                continue;
            };
            if node.pending_mode() != Mode::Phi {
                if held == Mode::Phi && !node.cancelled() {
                    return Err(Violation {
                        property: P15,
                        detail: format!(
                            "{n}'s request for {lock} runs on without its cancel after Cancelled"
                        ),
                    });
                }
                continue;
            }
            if node.held() != held {
                return Err(Violation {
                    property: P15,
                    detail: format!(
                        "{n} holds {lock} in {} after its cancelled request completed (held {held} at the cancel)",
                        node.held()
                    ),
                });
            }
            let pip = self.site(n).variant().inheritance == Inheritance::Pip;
            if held != Mode::Phi || !exact || pip {
                continue;
            }
            let serial = node.serial();
            if let Some(m) = self.queued_at(n, lock, serial) {
                return Err(Violation {
                    property: P15,
                    detail: format!(
                        "{m}'s queue of {lock} holds {n}'s cancelled request (serial {serial})"
                    ),
                });
            }
        }
        Ok(())
    }
}
