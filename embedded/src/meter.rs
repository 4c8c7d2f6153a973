//! Measuring one kernel step on the target: its stack high-water mark and its cost.
//!
//! **Stack.** Before each step the `WINDOW` bytes below the caller's stack pointer are
//! painted with a pattern; after it, the lowest word that no longer holds the pattern gives
//! the bytes the step used (its frames, the call's return address and saved registers, and
//! everything it called). Exact for the step as called from `measure`, at the caller's SP.
//!
//! **Cost.** QEMU does not model the cycle counter (DWT CYCCNT) of the Cortex-M4. Run with
//! `-icount shift=S`, QEMU advances its virtual clock by exactly `2^S` ns per executed
//! instruction, and SysTick (clocked from the 25 MHz system clock of mps2-an386) counts that
//! virtual time. So SysTick ticks measure *instructions executed*, not cycles. The firmware
//! calibrates the ratio at start (1000 `nop`s, minus an empty measurement) and reports
//! instructions per step. A real Cortex-M4 takes at least one cycle per instruction (loads,
//! taken branches and flash wait states take more), so cycles ≥ instructions; the figure is
//! a lower bound for cycles and an exact count of instructions.

use crate::net::{FwMsg, FwOutputs, FwSite, Stepper};
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use hilock_kernel::{Input, KernelError, MsgKind, Report};

/// Bytes painted below the stack pointer before each step.
pub const WINDOW: usize = 16 * 1024;
const PATTERN: u32 = 0xDEAD_BEEF;

/// Kinds of step, for per-kind figures.
pub const KINDS: [&str; 15] = [
    "acquire",
    "release",
    "upgrade",
    "set priority",
    "deliver request",
    "deliver grant",
    "deliver token",
    "deliver release",
    "deliver freeze",
    "try acquire",
    "deliver busy",
    "cancel",
    "downgrade",
    "set value",
    "convert",
];

fn kind(input: &Input<'_, FwMsg>) -> usize {
    match input {
        Input::Acquire { .. } => 0,
        Input::Release { .. } => 1,
        Input::Upgrade { .. } => 2,
        Input::SetPriority { .. } => 3,
        Input::TryAcquire { .. } => 9,
        Input::Cancel { .. } => 11,
        Input::Downgrade { .. } => 12,
        Input::SetValue { .. } => 13,
        Input::Convert { .. } => 14,
        Input::Deliver { msg, .. } => match msg.kind() {
            MsgKind::Request => 4,
            MsgKind::Grant => 5,
            MsgKind::Token => 6,
            MsgKind::Release => 7,
            MsgKind::Freeze => 8,
            MsgKind::Busy => 10,
        },
    }
}

/// The worst step of one kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct Worst {
    /// Steps of this kind measured.
    pub count: u32,
    /// Most instructions.
    pub instructions: u32,
    /// Most stack bytes.
    pub stack: u32,
}

/// Measures every step it performs.
pub struct Meter {
    /// Owned so that nothing else reconfigures SysTick; read through `SYST::get_current`.
    #[allow(dead_code)]
    syst: SYST,
    /// SysTick ticks of an empty measurement.
    pub overhead: u32,
    /// SysTick ticks of 1000 `nop`s (after the overhead).
    pub ticks_per_1000: u32,
    /// Per kind of step.
    pub worst: [Worst; KINDS.len()],
    /// The window was used up (the stack figure is then only a lower bound).
    pub saturated: bool,
    /// Since the last [`Meter::take_phase`].
    phase: Worst,
}

/// One kernel step, out of line, so that its frame lies below the SP `measure` reads.
#[inline(never)]
fn step_once(
    site: &mut FwSite,
    input: Input<'_, FwMsg>,
    out: &mut FwOutputs,
) -> Result<Report, KernelError> {
    site.step(input, out)
}

#[inline(never)]
fn nothing() {}

#[inline(never)]
fn thousand_nops() {
    // SAFETY: `nop`s only.
    unsafe {
        core::arch::asm!(".rept 1000", "nop", ".endr", options(nomem, nostack));
    }
}

impl Meter {
    /// Starts SysTick (core clock, full 24-bit reload) and calibrates.
    pub fn new(mut syst: SYST) -> Self {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(0x00FF_FFFF);
        syst.clear_current();
        syst.enable_counter();
        let mut m = Meter {
            syst,
            overhead: 0,
            ticks_per_1000: 1,
            worst: [Worst::default(); KINDS.len()],
            saturated: false,
            phase: Worst::default(),
        };
        let overhead = (0..8).map(|_| m.measure(nothing).1).min().unwrap_or(0);
        let nops = (0..8)
            .map(|_| m.measure(thousand_nops).1)
            .min()
            .unwrap_or(0);
        m.overhead = overhead;
        m.ticks_per_1000 = nops.saturating_sub(overhead).max(1);
        m.saturated = false;
        m
    }

    /// Runs `f` (which must do its work in a call that is not inlined) and returns its
    /// result, the SysTick ticks it took and the stack bytes below the caller's SP it used.
    #[inline(never)]
    fn measure<R>(&mut self, f: impl FnOnce() -> R) -> (R, u32, u32) {
        let sp: usize;
        // SAFETY: reads the stack pointer.
        unsafe { core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack)) };
        let bottom = sp - WINDOW;
        let mut a = bottom;
        while a < sp {
            // SAFETY: the words below SP are free stack (no interrupt is enabled, so nothing
            // else uses them); the RAM region is 4 MiB, far more than WINDOW plus what runs.
            unsafe { core::ptr::write_volatile(a as *mut u32, PATTERN) };
            a += 4;
        }
        let t0 = SYST::get_current();
        let r = f();
        let t1 = SYST::get_current();
        let mut low = bottom;
        // SAFETY: the same words, read back.
        while low < sp && unsafe { core::ptr::read_volatile(low as *const u32) } == PATTERN {
            low += 4;
        }
        if low == bottom {
            self.saturated = true;
        }
        let ticks = t0.wrapping_sub(t1) & 0x00FF_FFFF;
        (r, ticks, (sp - low) as u32)
    }

    /// Instructions for `ticks` SysTick ticks of a measurement.
    pub fn instructions(&self, ticks: u32) -> u32 {
        let t = u64::from(ticks.saturating_sub(self.overhead));
        (t * 1000 / u64::from(self.ticks_per_1000)) as u32
    }

    /// The worst step since the last call (and starts a new phase).
    pub fn take_phase(&mut self) -> Worst {
        core::mem::take(&mut self.phase)
    }

    /// The worst over every kind.
    pub fn overall(&self) -> Worst {
        self.worst.iter().fold(Worst::default(), |a, w| Worst {
            count: a.count + w.count,
            instructions: a.instructions.max(w.instructions),
            stack: a.stack.max(w.stack),
        })
    }
}

impl Stepper for Meter {
    fn step(
        &mut self,
        site: &mut FwSite,
        input: Input<'_, FwMsg>,
        out: &mut FwOutputs,
    ) -> Result<Report, KernelError> {
        let k = kind(&input);
        let (r, ticks, stack) = self.measure(|| step_once(site, input, out));
        let ins = self.instructions(ticks);
        let w = &mut self.worst[k];
        w.count += 1;
        w.instructions = w.instructions.max(ins);
        w.stack = w.stack.max(stack);
        let p = &mut self.phase;
        p.count += 1;
        p.instructions = p.instructions.max(ins);
        p.stack = p.stack.max(stack);
        r
    }
}
