//! P2, single token: per lock exactly one token, at a site or in flight
//! ([`Cluster::check_single_token`]); at most one once a message was lost or a node crashed.
//! A token in flight a copy of which was delivered already (a duplicating network) is that
//! copy's second delivery, not a second token.

use super::Violation;
use crate::Cluster;
use hilock_kernel::{LockId, MsgKind, Protocol};
use std::hash::Hash;

/// Per lock one token, at a site or in flight.
pub const P2: &str = "P2 single token";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// P2, single token: per lock exactly one token, at a site or in flight (at most one
    /// once a message was lost or a node crashed). Nothing to check for a protocol without
    /// tokens ([`Protocol::TOKENS`]).
    pub fn check_single_token(&self) -> Result<(), Violation> {
        if !P::TOKENS {
            return Ok(());
        }
        let lossy = self.faults.lost || self.faults.crashed;
        for l in 0..self.locks {
            let lock = LockId(l);
            let at_sites = self
                .live()
                .filter(|(_, s)| s.has_token(lock).unwrap_or(false))
                .count();
            let in_flight = self
                .in_flight_all()
                .filter(|m| !m.copied && m.kind == MsgKind::Token && m.lock == lock)
                .count();
            let n = at_sites + in_flight;
            if n > 1 || (n == 0 && !lossy) {
                return Err(Violation {
                    property: P2,
                    detail: format!("{lock}: {at_sites} tokens at sites and {in_flight} in flight"),
                });
            }
        }
        Ok(())
    }
}
