//! The workload of the thesis's experiments (chapter 4), shared by the simulator
//! (`hilock-benches`) and `hilock demo` (`runtime/`).

use hilock_kernel::Mode;

/// The access mix of the multi-airline reservation table (section 4.1): the access modes in
/// thesis order with their probabilities in percent (IR 80, R 10, U 4, IW 5, W 1).
pub const AIRLINE_MIX: [(Mode, u32); 5] = [
    (Mode::IR, 80),
    (Mode::R, 10),
    (Mode::U, 4),
    (Mode::IW, 5),
    (Mode::W, 1),
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_mix_adds_up_to_100() {
        assert_eq!(super::AIRLINE_MIX.iter().map(|m| m.1).sum::<u32>(), 100);
    }
}
