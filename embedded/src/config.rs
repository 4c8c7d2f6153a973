//! Capacities, chosen by cargo features (default N = 8, Q = 8).

/// Sites in the image (node ids `0..N`).
pub const N: usize = if cfg!(feature = "n16") {
    16
} else if cfg!(feature = "n4") {
    4
} else {
    8
};
/// Queue capacity (local queue and the queue carried by the token); the kernel requires
/// `Q >= N` at compile time.
pub const Q: usize = if cfg!(feature = "q16") { 16 } else { 8 };
/// Locks per site.
pub const L: usize = crate::script::LOCKS;
/// Room of one step's output buffer: `Site::MAX_OUTPUTS`.
pub const O: usize = N + Q + L + 6;
/// Messages the wire holds.
pub const W: usize = 4 * O;
