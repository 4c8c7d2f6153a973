//! Serde for arrays whose length is a const generic (`[T; N]`, which serde's own impls
//! cover only up to 32): a sequence of exactly `N` elements, read through a
//! `heapless::Vec` (no allocation). Only with the `serde` feature.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `[T; N]` as a sequence.
pub(crate) fn serialize<S: Serializer, T: Serialize, const N: usize>(
    a: &[T; N],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(a.iter())
}

/// A sequence of exactly `N` elements as `[T; N]`; any other length is an error.
pub(crate) fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>, const N: usize>(
    d: D,
) -> Result<[T; N], D::Error> {
    let v: heapless::Vec<T, N> = heapless::Vec::deserialize(d)?;
    let len = v.len();
    v.into_array()
        .map_err(|_| D::Error::invalid_length(len, &"as many elements as the array holds"))
}
