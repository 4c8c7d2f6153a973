//! One site per device: what a firmware author writes to embed the kernel (the loop of
//! `docs/embedding.md` is the part between the `embedding-guide` markers, copied verbatim;
//! the host test `spec/tests/embedded_script.rs` checks the copy).
//!
//! The radio is simulated: the PendSV exception plays the receive interrupt and hands the
//! next frame of `FRAMES` to the main loop; `transmit` writes what would go on air to the
//! semihosting console. No `core::fmt`, so the image is close to the kernel's own size (the
//! flash and RAM figures of `docs/benchmarks.md`). Exits with success only if this node (the token
//! holder, holding R) answers node 1's request for R with a Grant to node 1.

#![no_std]
#![no_main]

use core::cell::Cell;
use cortex_m::peripheral::SCB;
use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::{debug, hio};
use hilock_kernel::{MsgKind, QueueEntry};

const N: usize = if cfg!(feature = "n16") {
    16
} else if cfg!(feature = "n4") {
    4
} else {
    8
};
const Q: usize = if cfg!(feature = "q16") { 16 } else { 8 };

// embedding-guide:begin
use core::cell::RefCell;
use critical_section::Mutex; // the `critical-section` crate; cortex-m provides the impl
use heapless::Deque;
use hilock_kernel::{Input, LockId, Mode, Msg, NodeId, Output, Outputs, Site};

// Capacities are compile-time: N nodes (ids 0..N), L locks, Q queue entries (Q >= N).
const L: usize = 2;
type MySite = Site<N, L, Q>;
// Room for the most outputs one step can produce: Site::MAX_OUTPUTS = N + Q + L + 6.
const O: usize = N + Q + L + 6;

/// What the interrupt handlers hand to the main loop.
enum Event {
    /// A protocol message decoded from the radio / CAN / UART.
    Deliver(NodeId, Msg<Q>),
    /// The local application asks for a lock, gives it back, upgrades U to W, or changes
    /// its base priority.
    Acquire(LockId, Mode),
    Release(LockId),
    Upgrade(LockId),
    SetPriority(u8),
}

/// Filled by interrupts (or RTIC tasks), drained by the main loop.
static INBOX: Mutex<RefCell<Deque<Event, 8>>> = Mutex::new(RefCell::new(Deque::new()));

/// `f` on the inbox inside a critical section. Every borrow of it is inside one, so
/// `try_borrow_mut` cannot fail (`borrow_ref_mut` would compile in a panic path).
fn with_inbox<R>(f: impl FnOnce(&mut Deque<Event, 8>) -> R) -> Option<R> {
    critical_section::with(|cs| {
        INBOX
            .borrow(cs)
            .try_borrow_mut()
            .ok()
            .map(|mut q| f(&mut q))
    })
}

/// Called from the receive interrupt: queue, don't step (a step is bounded but not tiny).
/// `false`: the inbox is full and the frame was not taken. The protocol assumes no message
/// is lost, so the driver leaves that frame unacknowledged in the receiver (the link layer
/// retransmits it) and offers it again after `poll` has drained the inbox.
#[must_use]
fn on_receive(from: NodeId, msg: Msg<Q>) -> bool {
    with_inbox(|q| q.push_back(Event::Deliver(from, msg)).is_ok()).unwrap_or(false)
}

/// The main loop's work: one input at a time, outputs to the wire or the application.
fn poll(site: &mut MySite, out: &mut Outputs<Msg<Q>, O>) -> Result<(), hilock_kernel::KernelError> {
    while let Some(ev) = with_inbox(Deque::pop_front).flatten() {
        out.clear();
        match &ev {
            Event::Deliver(from, msg) => site.step(Input::Deliver { from: *from, msg }, out)?,
            Event::Acquire(lock, mode) => site.step(
                Input::Acquire {
                    lock: *lock,
                    mode: *mode,
                },
                out,
            )?,
            Event::Release(lock) => site.step(Input::Release { lock: *lock }, out)?,
            Event::Upgrade(lock) => site.step(Input::Upgrade { lock: *lock }, out)?,
            Event::SetPriority(base) => site.step(Input::SetPriority { base: *base }, out)?,
        };
        for o in out.iter() {
            match o {
                Output::Send { to, msg } => transmit(*to, msg), // encode and send
                Output::Granted { lock, .. } | Output::Upgraded { lock } => granted(*lock),
                // This node issues no try-lock (`Input::TryAcquire`), no cancel
                // (`Input::Cancel`), no downgrade (`Input::Downgrade`) and no conversion
                // (`Input::Convert`), so none is refused, cancelled, downgraded or
                // converted; its holders release on their own schedule, so a blocking
                // notification (`spec/SPEC.md` 1.16) is ignored.
                Output::WouldBlock { .. }
                | Output::Cancelled { .. }
                | Output::Downgraded { .. }
                | Output::Converted { .. }
                | Output::ConvertBusy { .. }
                | Output::Blocking { .. } => {}
            }
        }
    }
    Ok(())
}
// embedding-guide:end

/// The frames the simulated radio receives, one per interrupt: node 1 asks for R.
const FRAMES: [(NodeId, Msg<Q>); 1] = [(
    NodeId(1),
    Msg::Request {
        lock: LockId(0),
        entry: QueueEntry {
            requester: NodeId(1),
            mode: Mode::R,
            serial: 1,
            prio: 0,
        },
        hop: 1,
    },
)];

static NEXT_FRAME: Mutex<Cell<usize>> = Mutex::new(Cell::new(0));
static GRANTED_TO_1: Mutex<Cell<bool>> = Mutex::new(Cell::new(false));

/// The simulated receive interrupt.
#[exception]
fn PendSV() {
    let next = critical_section::with(|cs| {
        let k = NEXT_FRAME.borrow(cs);
        k.replace(k.get().wrapping_add(1))
    });
    if let Some((from, msg)) = FRAMES.get(next) {
        // The inbox is empty here: one frame always fits.
        let _taken = on_receive(*from, msg.clone());
    }
    // `embedded/no-panic.sh` builds this to see its check fail: an index the compiler
    // cannot prove in bounds (`next` counts interrupts) is a panic path.
    #[cfg(feature = "deliberate-panic")]
    let _ = on_receive(FRAMES[next].0, FRAMES[next].1.clone());
}

fn say(s: &[u8]) {
    if let Ok(mut o) = hio::hstdout() {
        let _ = o.write_all(s);
    }
}

fn transmit(to: NodeId, msg: &Msg<Q>) {
    say(match msg.kind() {
        MsgKind::Grant => b"TX Grant\n",
        MsgKind::Token => b"TX Token\n",
        MsgKind::Request => b"TX Request\n",
        MsgKind::Release => b"TX Release\n",
        MsgKind::Freeze => b"TX Freeze\n",
        MsgKind::Busy => b"TX Busy\n",
    });
    if to == NodeId(1) && msg.kind() == MsgKind::Grant {
        critical_section::with(|cs| GRANTED_TO_1.borrow(cs).set(true));
    }
}

fn granted(_lock: LockId) {
    say(b"granted locally\n");
}

#[entry]
fn main() -> ! {
    let ok = run();
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    #[allow(clippy::empty_loop)]
    loop {}
}

fn run() -> bool {
    // This device is node 0 and starts with every token.
    let Ok(me) = MySite::new(NodeId(0), NodeId(0)) else {
        return false;
    };
    let Some(site) = cortex_m::singleton!(: MySite = me) else {
        return false;
    };
    let Some(out) = cortex_m::singleton!(: Outputs<Msg<Q>, O> = Outputs::new()) else {
        return false;
    };
    let _ = with_inbox(|inbox| {
        let _ = inbox.push_back(Event::SetPriority(1));
        let _ = inbox.push_back(Event::Acquire(LockId(0), Mode::R));
        let _ = inbox.push_back(Event::Acquire(LockId(1), Mode::U));
        let _ = inbox.push_back(Event::Upgrade(LockId(1)));
    });
    if poll(site, out).is_err() {
        return false;
    }
    SCB::set_pendsv(); // "a frame arrived"
    if poll(site, out).is_err() {
        return false;
    }
    let _ = with_inbox(|inbox| {
        let _ = inbox.push_back(Event::Release(LockId(0)));
        let _ = inbox.push_back(Event::Release(LockId(1)));
    });
    if poll(site, out).is_err() {
        return false;
    }
    let ok = critical_section::with(|cs| GRANTED_TO_1.borrow(cs).get());
    say(if ok { b"node: PASS\n" } else { b"node: FAIL\n" });
    ok
}

// With `panic-never` the `panic-never` crate's handler is linked instead: it names an
// undefined symbol, so the image links only if no panic path is left (`embedded/no-panic.sh`).
#[cfg(feature = "panic-never")]
use panic_never as _;

#[cfg(not(feature = "panic-never"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    say(b"PANIC\n");
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}
