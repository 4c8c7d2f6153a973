//! No kernel error: the kernel accepted every ordinary input it was given
//! ([`Cluster::check_no_kernel_error`]). Injected messages, duplicates and the rejections a
//! driver expects ([`Cluster::deliver_at_expecting`]) are not counted.

use super::Violation;
use crate::Cluster;
use hilock_kernel::Protocol;
use std::hash::Hash;

/// The kernel accepted every input it was given.
pub const NO_ERROR: &str = "no kernel error";

impl<P: Protocol + Clone> Cluster<P>
where
    P::Msg: Hash,
{
    /// No kernel error: the kernel accepted every ordinary input (injected messages aside).
    pub fn check_no_kernel_error(&self) -> Result<(), Violation> {
        match self.error {
            None => Ok(()),
            Some(e) => Err(Violation {
                property: NO_ERROR,
                detail: e.to_string(),
            }),
        }
    }
}
