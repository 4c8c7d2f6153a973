//! Counters that wrap: the request hop numbers, grant epochs and request serials are
//! `u32`s that grow by one per request, grant or new request on one link or at one node,
//! so a busy lock wraps them (2^32 requests are 50 days at 1,000 a second). They are
//! compared as sequence numbers modulo 2^32 (RFC 1982's serial number arithmetic): `a` is
//! newer than `b` if it is at most 2^31 − 1 steps ahead. Two values of one counter that are
//! alive at the same time (in flight, queued, recorded) are never that far apart.
//!
//! Token generations are different: every node records the last generation it saw, and a
//! node that has not held the token for a long time lags by every move made since, with
//! no bound. They are `u64`s ([`newer_generation`]), so no lag reached in practice makes
//! the token look old.

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

/// Whether token generation `a` is newer than `b` (ahead of it by 1 to 2^63 − 1, modulo
/// 2^64). Generations are `u64`: a node that has not seen the token for a while may lag
/// its generation by any number of moves below 2^63 (at 10^9 moves a second, 292 years),
/// where a `u32` generation compared with [`newer`] refused the token once the lag reached
/// 2^31 moves.
#[inline]
pub fn newer_generation(a: u64, b: u64) -> bool {
    let ahead = a.wrapping_sub(b);
    ahead != 0 && ahead < 1 << 63
}

/// The newer of two token generations ([`newer_generation`]; `a` if neither is).
#[inline]
pub fn newest_generation(a: u64, b: u64) -> u64 {
    if newer_generation(b, a) {
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

    /// Generations: a lag of 2^31 moves (and far more) is still newer; across the `u64`
    /// wrap the order is modular as for the `u32` counters.
    #[test]
    fn a_generation_lagging_2_pow_31_and_more_is_still_older() {
        assert!(newer_generation(5 + (1 << 31), 5));
        assert!(newer_generation(5 + (1 << 62), 5));
        assert!(newer_generation(0, u64::MAX) && !newer_generation(u64::MAX, 0));
        assert!(!newer_generation(7, 7) && !newer_generation(6, 7));
        assert_eq!(newest_generation(u64::MAX, 1), 1);
    }
}
