//! The site interface shared by the hierarchical protocol and the Naimi-Trehel baseline,
//! so that the models, the simulator and the runtime can drive either.

use crate::error::KernelError;
use crate::mode::Mode;
use crate::msg::{Input, LockId, MsgKind, NodeId, Outputs};

/// A site of a token-based locking protocol, driven sans-IO: one input in, outputs appended
/// to `out`. On `Err` neither the state nor `out` has changed.
pub trait Protocol<const O: usize> {
    /// The messages the protocol exchanges.
    type Msg: Clone + core::fmt::Debug;

    /// This site's node id.
    fn id(&self) -> NodeId;

    /// Apply one input.
    fn step(
        &mut self,
        input: Input<'_, Self::Msg>,
        out: &mut Outputs<Self::Msg, O>,
    ) -> Result<(), KernelError>;

    /// The mode this site holds `lock` in (Φ if none).
    fn held(&self, lock: LockId) -> Result<Mode, KernelError>;

    /// Whether this site holds the token of `lock`.
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError>;

    /// Whether a request of this site for `lock` (or an upgrade) is outstanding.
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError>;

    /// The kind of a message, for counting.
    fn kind(msg: &Self::Msg) -> MsgKind;

    /// The lock a message is about.
    fn lock_of(msg: &Self::Msg) -> LockId;
}
