//! Bounded frames (cargo feature `codec`): the token protocol's messages ([`Msg`]) in
//! postcard's wire format, with the largest frame of each message kind known at compile
//! time for a queue capacity `Q`.
//!
//! The leaf types derive postcard's `MaxSize`; [`Msg`] gets its bound here, kind by kind
//! ([`Msg::max_frame`]), because postcard has no `MaxSize` for heapless 0.9's `Vec` (the
//! token's queue): that field counts as its length's varint plus `Q` entries. The bound
//! depends on `Q` only, not on `N`: a node id is a `u16`, written as a varint of at most 3
//! bytes whatever `N` is (1 byte below 128), and the counters (`serial`, `hop`, `epoch`,
//! `generation`, `fence`) grow without bound over a run, so their bound is their type's.
//! `kernel/tests/codec.rs` encodes every message kind with every field at its largest value
//! and checks that the frame is exactly [`Msg::max_frame`] (and no frame longer).
//!
//! ```
//! use hilock_kernel::{Frozen, LockId, Mode, Msg, MsgKind};
//! let msg: Msg<8> = Msg::Freeze { lock: LockId(1), modes: Frozen::EMPTY, waiting: Frozen::EMPTY };
//! let mut buf = [0u8; Msg::<8>::MAX_FRAME];
//! let frame = hilock_kernel::codec::encode(&msg, &mut buf).unwrap();
//! assert!(frame.len() <= Msg::<8>::max_frame(MsgKind::Freeze));
//! assert_eq!(hilock_kernel::codec::decode::<8>(frame), Ok(msg));
//! ```

use crate::mode::Mode;
use crate::msg::{LockId, Msg, MsgKind, QueueEntry};
use crate::token::prio::Frozen;
use crate::token::value::ValueBlock;
use core::fmt;
use postcard::experimental::max_size::MaxSize;

/// Why a frame could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodecError {
    /// The buffer is shorter than the encoding (a buffer of [`Msg::MAX_FRAME`] bytes is
    /// never too short).
    BufferTooSmall,
    /// The bytes are not one whole message of capacity `Q`: truncated, an unknown variant or
    /// mode, a queue longer than `Q`, or bytes left over after the message.
    Malformed,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::BufferTooSmall => write!(f, "buffer too small for the frame"),
            CodecError::Malformed => write!(f, "not one well-formed message"),
        }
    }
}

/// Bytes of postcard's varint of `n`.
const fn varint_len(n: usize) -> usize {
    let mut k = 1;
    let mut v = n >> 7;
    while v > 0 {
        k += 1;
        v >>= 7;
    }
    k
}

/// The variant index, a varint: one byte for the seven variants.
const TAG: usize = varint_len(6);
const LOCK: usize = LockId::POSTCARD_MAX_SIZE;
const ENTRY: usize = QueueEntry::POSTCARD_MAX_SIZE;
const MODE: usize = Mode::POSTCARD_MAX_SIZE;
const FROZEN: usize = Frozen::POSTCARD_MAX_SIZE;
const U32: usize = u32::POSTCARD_MAX_SIZE;
const U64: usize = u64::POSTCARD_MAX_SIZE;
const VALUE: usize = ValueBlock::POSTCARD_MAX_SIZE;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

impl<const Q: usize> Msg<Q> {
    /// The largest frame of a [`Msg::Request`] or a [`Msg::TryRequest`] (both of kind
    /// [`MsgKind::Request`]): lock, entry, hop.
    pub const MAX_REQUEST: usize = TAG + LOCK + ENTRY + U32;
    /// The largest frame of a [`Msg::Busy`]: lock, entry.
    pub const MAX_BUSY: usize = TAG + LOCK + ENTRY;
    /// The largest frame of a [`Msg::Grant`]: lock, entry, epoch, recorded, frozen, fence,
    /// value block.
    pub const MAX_GRANT: usize = TAG + LOCK + ENTRY + U32 + MODE + FROZEN + U64 + VALUE;
    /// The largest frame of a [`Msg::Token`]: lock, entry, generation, sender_owned, epoch,
    /// frozen, the queue (its length's varint and `Q` entries), fence, value block.
    pub const MAX_TOKEN: usize =
        TAG + LOCK + ENTRY + U64 + MODE + U32 + FROZEN + varint_len(Q) + Q * ENTRY + U64 + VALUE;
    /// The largest frame of a [`Msg::Release`]: lock, owned, epoch.
    pub const MAX_RELEASE: usize = TAG + LOCK + MODE + U32;
    /// The largest frame of a [`Msg::Freeze`]: lock, modes, waiting modes.
    pub const MAX_FREEZE: usize = TAG + LOCK + FROZEN + FROZEN;
    /// The largest frame of any message: a buffer of this many bytes holds every one.
    pub const MAX_FRAME: usize = max(
        max(max(Self::MAX_REQUEST, Self::MAX_GRANT), Self::MAX_TOKEN),
        max(max(Self::MAX_RELEASE, Self::MAX_FREEZE), Self::MAX_BUSY),
    );

    /// The largest frame of a message of kind `kind`.
    pub const fn max_frame(kind: MsgKind) -> usize {
        match kind {
            MsgKind::Request => Self::MAX_REQUEST,
            MsgKind::Grant => Self::MAX_GRANT,
            MsgKind::Token => Self::MAX_TOKEN,
            MsgKind::Release => Self::MAX_RELEASE,
            MsgKind::Freeze => Self::MAX_FREEZE,
            MsgKind::Busy => Self::MAX_BUSY,
        }
    }
}

impl<const Q: usize> MaxSize for Msg<Q> {
    const POSTCARD_MAX_SIZE: usize = Self::MAX_FRAME;
}

/// Encodes `msg` into the front of `buf` and returns the frame (at most
/// [`Msg::max_frame`] of its kind).
pub fn encode<'b, const Q: usize>(
    msg: &Msg<Q>,
    buf: &'b mut [u8],
) -> Result<&'b mut [u8], CodecError> {
    postcard::to_slice(msg, buf).map_err(|_| CodecError::BufferTooSmall)
}

/// Decodes one whole frame (nothing may follow the message).
pub fn decode<const Q: usize>(frame: &[u8]) -> Result<Msg<Q>, CodecError> {
    match postcard::take_from_bytes(frame) {
        Ok((msg, [])) => Ok(msg),
        _ => Err(CodecError::Malformed),
    }
}
