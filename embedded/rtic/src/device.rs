//! The device module that RTIC's `#[app(device = ...)]` reads, written for QEMU's
//! `mps2-an386` (Cortex-M4F), which has no peripheral-access crate: the `Interrupt` enum
//! with the two external interrupts this image uses, the number of NVIC priority bits, and
//! the vector table of the external interrupts (cortex-m-rt's `device` feature leaves it to
//! the device crate). No device of the example raises IRQ 30 or 31: software pends them.

use cortex_m::interrupt::InterruptNumber;
// The vector table, `Reset` and `DefaultHandler` come from cortex-m-rt.
use cortex_m_rt as _;

/// Priority bits RTIC uses (8 levels; the example uses 1 and 2).
pub const NVIC_PRIO_BITS: u8 = 3;

/// The external interrupts RTIC may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Interrupt {
    /// The dispatcher of the priority-1 software tasks.
    IRQ30 = 30,
    /// The simulated link's receive interrupt (a hardware task).
    IRQ31 = 31,
}

/// RTIC names interrupts through `device::interrupt`, as svd2rust's PACs export them.
pub use self::Interrupt as interrupt;

// SAFETY: every variant is an external interrupt number of the device (below 32).
unsafe impl InterruptNumber for Interrupt {
    #[inline]
    fn number(self) -> u16 {
        self as u16
    }
}

extern "C" {
    fn DefaultHandler();
    fn IRQ30();
    fn IRQ31();
}

/// The 32 external interrupt vectors after cortex-m-rt's exception vectors; the unused
/// ones go to cortex-m-rt's `DefaultHandler`.
#[link_section = ".vector_table.interrupts"]
#[no_mangle]
pub static __INTERRUPTS: [unsafe extern "C" fn(); 32] = {
    let mut v: [unsafe extern "C" fn(); 32] = [DefaultHandler; 32];
    v[30] = IRQ30;
    v[31] = IRQ31;
    v
};
