//! Counters that wrap: the request hop numbers, grant epochs, token generations and request
//! serials are `u32`s that grow by one per request, grant, token move or new request, so a
//! busy lock wraps them (2^32 token moves are 50 days at 1,000 a second). They are
//! compared as sequence numbers modulo 2^32 (RFC 1982's serial number arithmetic): `a` is
//! newer than `b` if it is at most 2^31 − 1 steps ahead. Two values of one counter that are
//! alive at the same time (in flight, queued, recorded) are never that far apart.

/// Whether `a` is newer than `b` (ahead of it by 1 to 2^31 − 1, modulo 2^32).
#[inline]
pub fn newer(a: u32, b: u32) -> bool {
    let ahead = a.wrapping_sub(b);
    ahead != 0 && ahead < 1 << 31
}

/// The newer of `a` and `b` (`a` if neither is).
#[inline]
pub fn newest(a: u32, b: u32) -> u32 {
    if newer(b, a) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Across the wrap: `0` is newer than `u32::MAX`, and the order is that of the
    /// integers for small values.
    #[test]
    fn newer_is_the_integer_order_for_small_values_and_wraps() {
        assert!(newer(2, 1) && !newer(1, 2) && !newer(1, 1));
        assert!(newer(0, u32::MAX) && !newer(u32::MAX, 0));
        assert!(newer(3, u32::MAX - 2));
        assert!(newer(1 << 30, 0) && !newer(0, 1 << 30));
        // Exactly half way round is neither newer nor older.
        assert!(newer((1 << 31) - 1, 0) && !newer(1 << 31, 0) && !newer(0, 1 << 31));
        assert_eq!(newest(u32::MAX, 1), 1);
        assert_eq!(newest(5, 4), 5);
    }
}
