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
///
/// With the `serde` feature a human-readable format (JSON: traces, counterexamples) writes
/// a valid block as 64 lowercase hex digits and a block that is not valid as `null`; a
/// binary one (postcard: the wire and the `codec` module) writes the 32 bytes and the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

#[cfg(feature = "serde")]
mod serde_impl {
    use super::{ValueBlock, VALUE_LEN};
    use core::fmt;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::ser::SerializeTuple;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    const HEX: &[u8; 16] = b"0123456789abcdef";

    impl Serialize for ValueBlock {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            if s.is_human_readable() {
                if !self.valid {
                    return s.serialize_none();
                }
                let mut text = [0u8; 2 * VALUE_LEN];
                for (i, b) in self.bytes.iter().enumerate() {
                    text[2 * i] = HEX[usize::from(b >> 4)];
                    text[2 * i + 1] = HEX[usize::from(b & 15)];
                }
                let text = core::str::from_utf8(&text).map_err(serde::ser::Error::custom)?;
                return s.serialize_some(text);
            }
            let mut t = s.serialize_tuple(VALUE_LEN + 1)?;
            for b in &self.bytes {
                t.serialize_element(b)?;
            }
            t.serialize_element(&self.valid)?;
            t.end()
        }
    }

    /// Reads the human-readable form: `null` or 64 hex digits.
    struct Text;

    impl<'de> Visitor<'de> for Text {
        type Value = ValueBlock;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "null or {} hex digits", 2 * VALUE_LEN)
        }
        fn visit_none<E: de::Error>(self) -> Result<ValueBlock, E> {
            Ok(ValueBlock::NOT_VALID)
        }
        fn visit_unit<E: de::Error>(self) -> Result<ValueBlock, E> {
            Ok(ValueBlock::NOT_VALID)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<ValueBlock, D::Error> {
            d.deserialize_str(self)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<ValueBlock, E> {
            let t = v.as_bytes();
            if t.len() != 2 * VALUE_LEN {
                return Err(E::invalid_length(t.len(), &self));
            }
            let digit = |c: u8| match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(E::invalid_value(de::Unexpected::Str(v), &"hex digits")),
            };
            let mut bytes = [0u8; VALUE_LEN];
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (digit(t[2 * i])? << 4) | digit(t[2 * i + 1])?;
            }
            Ok(ValueBlock::new(bytes))
        }
    }

    /// Reads the binary form: the bytes, then the flag.
    struct Bytes;

    impl<'de> Visitor<'de> for Bytes {
        type Value = ValueBlock;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} bytes and a flag", VALUE_LEN)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ValueBlock, A::Error> {
            let mut bytes = [0u8; VALUE_LEN];
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(i, &self))?;
            }
            let valid = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(VALUE_LEN, &self))?;
            Ok(ValueBlock { bytes, valid })
        }
    }

    impl<'de> Deserialize<'de> for ValueBlock {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ValueBlock, D::Error> {
            if d.is_human_readable() {
                d.deserialize_option(Text)
            } else {
                d.deserialize_tuple(VALUE_LEN + 1, Bytes)
            }
        }
    }
}
