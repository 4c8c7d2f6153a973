//! hilock's lock value block (`spec/SPEC.md` 1.15): a fixed-size block of bytes per lock,
//! written by the W holder, carried with the token and with every granted copy, and read
//! by every holder — the DLM's lock value block (LVB) and Chubby's lock contents.

/// Bytes in a [`ValueBlock`] (the DLM's LVB length).
pub const VALUE_LEN: usize = 32;

/// One lock's value block as a site knows it (`spec/SPEC.md` 1.15).
///
/// The W holder writes it ([`crate::Input::SetValue`]); the token carries the token node's
/// block and every grant carries its granter's, so a holder reads ([`crate::Site::value`])
/// the value the last W holder wrote before its grant. A block is *not valid* (the DLM's
/// `IVVALBLK`) after a recovery regenerated the token — the last value written may have
/// been lost with the token node — until the next write; its bytes are then all zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "codec", derive(postcard::experimental::max_size::MaxSize))]
pub struct ValueBlock {
    bytes: [u8; VALUE_LEN],
    valid: bool,
}

impl ValueBlock {
    /// The block of a lock that nobody has written yet: all zero and valid (as the DLM's).
    pub const INITIAL: ValueBlock = ValueBlock {
        bytes: [0; VALUE_LEN],
        valid: true,
    };
    /// The block after a recovery that regenerated the token: all zero and not valid.
    pub const NOT_VALID: ValueBlock = ValueBlock {
        bytes: [0; VALUE_LEN],
        valid: false,
    };

    /// A valid block holding `bytes`.
    pub const fn new(bytes: [u8; VALUE_LEN]) -> Self {
        ValueBlock { bytes, valid: true }
    }

    /// The value, or `None` while the block is not valid.
    pub const fn get(&self) -> Option<&[u8; VALUE_LEN]> {
        if self.valid {
            Some(&self.bytes)
        } else {
            None
        }
    }

    /// Whether the block holds the last value written (false after a regeneration, until
    /// the next write).
    pub const fn is_valid(&self) -> bool {
        self.valid
    }

    /// The bytes, valid or not (all zero while not valid).
    pub const fn bytes(&self) -> &[u8; VALUE_LEN] {
        &self.bytes
    }
}

impl Default for ValueBlock {
    fn default() -> Self {
        ValueBlock::INITIAL
    }
}
