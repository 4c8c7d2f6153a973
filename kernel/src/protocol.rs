//! The site interface shared by the hierarchical protocol and the Naimi-Trehel baselines,
//! so that the models, the simulator and the runtime can drive any of them.

use crate::error::KernelError;
use crate::mode::Mode;
use crate::msg::{Input, LockId, MsgKind, NodeId, Output, Sink};
use crate::report::Report;
use crate::token::value::ValueBlock;

/// A site of a token-based locking protocol, driven sans-IO: one input in, outputs appended
/// to `out`. On `Err` neither the state nor `out` has changed: every step validates its
/// input (ids, modes, duplicates, output room) before it changes anything.
pub trait Protocol {
    /// The messages the protocol exchanges.
    type Msg: Clone + core::fmt::Debug;

    /// The most outputs one step can produce; a sink with less room is refused.
    const MAX_OUTPUTS: usize;

    /// Whether every grant carries a fencing token ([`Protocol::fence`] is `Some` right
    /// after a grant). The harness then counts a grant without one as a breach of P10.
    const FENCED: bool = false;

    /// Whether a token stands for each lock ([`Protocol::has_token`] is true at one site,
    /// or a token message is in flight). The harness checks P2 (one token per lock) only
    /// then; an engine without tokens (a lock server's queue, a quorum store, a document
    /// tree) says `false`.
    const TOKENS: bool = true;

    /// This site's node id.
    fn id(&self) -> NodeId;

    /// Apply one input.
    fn step<S: Sink<Output<Self::Msg>>>(
        &mut self,
        input: Input<'_, Self::Msg>,
        out: &mut S,
    ) -> Result<Report, KernelError>;

    /// The mode this site holds `lock` in (Φ if none).
    fn held(&self, lock: LockId) -> Result<Mode, KernelError>;

    /// Whether this site holds the token of `lock`.
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError>;

    /// Whether a request of this site for `lock` (or an upgrade) is outstanding.
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError>;

    /// The mode of this site's pending request for `lock` (W for a Rule 7 upgrade; Φ if
    /// none, or a protocol that does not say).
    fn pending_mode(&self, lock: LockId) -> Result<Mode, KernelError> {
        let _ = lock;
        Ok(Mode::Phi)
    }

    /// The fencing token of this site's current hold of `lock` (`None`: nothing held, or
    /// a protocol without fencing tokens). Read it right after the step that granted.
    fn fence(&self, lock: LockId) -> Result<Option<u64>, KernelError> {
        let _ = lock;
        Ok(None)
    }

    /// The lock value block this site's hold of `lock` reads (`spec/SPEC.md` 1.15; `None`:
    /// nothing held, or a protocol without value blocks).
    fn value(&self, lock: LockId) -> Result<Option<ValueBlock>, KernelError> {
        let _ = lock;
        Ok(None)
    }

    /// The kind of a message, for counting.
    fn kind(msg: &Self::Msg) -> MsgKind;

    /// The lock a message is about.
    fn lock_of(msg: &Self::Msg) -> LockId;
}
