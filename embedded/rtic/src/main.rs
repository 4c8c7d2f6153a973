//! The kernel under RTIC 2: three devices (`Site`s, nodes 0, 1, 2) in one image, joined by a
//! simulated link, run one lock through a short scenario to an expected end state.
//!
//! The loop of `docs/embedding.md`, in RTIC's terms:
//!
//! - each device has one inbox (an `rtic_sync` channel of [`INBOX`] events) and one software
//!   task, `device_0`..`device_2`, that takes one event at a time and feeds it to its site;
//! - the link's receive interrupt (the hardware task `link`, IRQ 31, priority 2) only moves
//!   frames from the wire into the receivers' inboxes, and the application (the software task
//!   `director`) only queues acquire and release events;
//! - nothing is dropped: a frame that finds its receiver's inbox full stays at the head of
//!   its wire (per sender and receiver, FIFO) and is offered again when the receiver's task
//!   has taken an event.
//!
//! The scenario: node 1 takes W; nodes 2 (W) and 0 (R) ask while it holds; node 1 releases;
//! each of the two later grants is released as it arrives. When nothing is left to run
//! (`idle`), the image checks the end state and exits through semihosting with success only
//! if the grants came in the expected order, no two conflicting modes were ever held at once,
//! no step failed, every site is back to Φ with an empty queue, exactly one site holds the
//! token, every frame sent was delivered, and at least one frame was held back at a full
//! inbox (so the back-pressure path ran). Run by `embedded/run-rtic.sh`.

#![no_std]
#![no_main]

mod device;

use hilock_kernel::{compatible, Input, LockId, Mode, Msg, NodeId, Output, Outputs, Site};

/// Devices (nodes 0..N) in the image.
const N: usize = 3;
/// Locks.
const L: usize = 1;
/// Queue entries per lock (the kernel requires Q >= N).
const Q: usize = 3;
/// Room for the most outputs of one step: `Site::MAX_OUTPUTS`.
const O: usize = N + Q + L + 6;
/// Events an inbox holds: one, so that a second frame for a busy device finds it full.
const INBOX: usize = 1;
/// Frames one wire (one sender to one receiver) holds.
const WIRE: usize = 4;
/// The one lock.
const LOCK: LockId = LockId(0);

type MySite = Site<N, L, Q>;

/// What the link and the application hand to a device's task.
pub enum Event {
    /// A protocol message from a peer.
    Deliver(NodeId, Msg<Q>),
    /// The local application asks for the lock.
    Acquire(Mode),
    /// The local application gives the lock back.
    Release,
}

/// A grant, reported by a device's task to the application.
pub struct Grant {
    node: usize,
    mode: Mode,
}

/// Everything the tasks share: the sites, the wires, and the counters the end state is
/// checked against.
pub struct World {
    sites: [MySite; N],
    /// `wires[from][to]`: the frames in flight from `from` to `to`, oldest first.
    wires: [[heapless::Deque<Msg<Q>, WIRE>; N]; N],
    /// The mode each device holds now (Φ: none), for the mutual-exclusion check.
    holding: [Mode; N],
    sent: u32,
    delivered: u32,
    held_back: u32,
    dropped: u32,
    violations: u32,
    errors: u32,
    /// The director saw every grant it expected.
    done: bool,
}

// Log lines: plain semihosting text, or defmt frames over semihosting with `--features
// defmt` (decoded on the host by `defmt-print`).
#[cfg(not(feature = "defmt"))]
macro_rules! say {
    ($($t:tt)*) => { cortex_m_semihosting::hprintln!($($t)*) };
}
#[cfg(feature = "defmt")]
macro_rules! say {
    ($($t:tt)*) => { defmt::println!($($t)*) };
}
#[cfg(feature = "defmt")]
use defmt_semihosting as _;

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Phi => "Phi",
        Mode::IR => "IR",
        Mode::R => "R",
        Mode::U => "U",
        Mode::IW => "IW",
        Mode::W => "W",
    }
}

fn exit(ok: bool) -> ! {
    use cortex_m_semihosting::debug;
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Puts `msg` on the wire from `me` to `to` and raises the link's interrupt. A frame that
/// does not fit its wire counts as dropped, which fails the run like any lost frame (this
/// scenario fills no wire; a driver for a real link would wait for room instead).
fn transmit(me: usize, to: usize, msg: Msg<Q>, world: &mut impl rtic::Mutex<T = World>) {
    world.lock(|w| {
        w.sent += 1;
        if w.wires[me][to].push_back(msg).is_err() {
            w.dropped += 1;
        }
    });
    rtic::pend(device::Interrupt::IRQ31);
}

/// A device's task: one event at a time into its site, outputs to the wire or the
/// application.
async fn run_device(
    me: usize,
    inbox: &mut rtic_sync::channel::Receiver<'static, Event, INBOX>,
    grants: &mut rtic_sync::channel::Sender<'static, Grant, 4>,
    out: &mut Outputs<Msg<Q>, O>,
    mut world: impl rtic::Mutex<T = World>,
) {
    while let Ok(ev) = inbox.recv().await {
        // The inbox has room again: a frame held back at it can come in now.
        rtic::pend(device::Interrupt::IRQ31);
        out.clear();
        let ok = world.lock(|w| {
            let site = &mut w.sites[me];
            let r = match &ev {
                Event::Deliver(from, msg) => site.step(Input::Deliver { from: *from, msg }, out),
                Event::Acquire(mode) => site.step(
                    Input::Acquire {
                        lock: LOCK,
                        mode: *mode,
                    },
                    out,
                ),
                Event::Release => site.step(Input::Release { lock: LOCK }, out),
            };
            match r {
                Ok(_) => {
                    if let Event::Release = ev {
                        w.holding[me] = Mode::Phi;
                    }
                    true
                }
                Err(_) => {
                    w.errors += 1;
                    false
                }
            }
        });
        if !ok {
            say!("node {}: the kernel refused a step", me);
            continue;
        }
        for o in out.iter() {
            match o {
                Output::Send { to, msg } => {
                    transmit(me, usize::from(to.0), msg.clone(), &mut world)
                }
                Output::Granted { lock, mode } => {
                    let mode = *mode;
                    world.lock(|w| {
                        for (j, held) in w.holding.iter().enumerate() {
                            if j != me && !compatible(*held, mode) {
                                w.violations += 1;
                            }
                        }
                        w.holding[me] = mode;
                    });
                    say!(
                        "node {}: granted lock {} in {}",
                        me,
                        lock.0,
                        mode_name(mode)
                    );
                    let _ = grants.send(Grant { node: me, mode }).await;
                }
                // The scenario issues neither upgrades nor try-locks nor cancels nor
                // downgrades nor conversions.
                Output::Upgraded { .. }
                | Output::WouldBlock { .. }
                | Output::Cancelled { .. }
                | Output::Downgraded { .. }
                | Output::Converted { .. }
                | Output::ConvertBusy { .. } => {
                    world.lock(|w| w.errors += 1);
                }
                // A holder told that a conflicting request waits (`spec/SPEC.md` 1.16):
                // the scenario's holders release on their own schedule.
                Output::Blocking { .. } => {}
            }
        }
    }
}

#[rtic::app(device = crate::device, peripherals = false, dispatchers = [IRQ30])]
mod app {
    use super::*;
    use rtic_sync::channel::{Receiver, Sender, TrySendError};
    use rtic_sync::make_channel;

    #[shared]
    struct Shared {
        world: World,
    }

    #[local]
    struct Local {
        inbox_0: Receiver<'static, Event, INBOX>,
        inbox_1: Receiver<'static, Event, INBOX>,
        inbox_2: Receiver<'static, Event, INBOX>,
        grants_0: Sender<'static, Grant, 4>,
        grants_1: Sender<'static, Grant, 4>,
        grants_2: Sender<'static, Grant, 4>,
        out_0: Outputs<Msg<Q>, O>,
        out_1: Outputs<Msg<Q>, O>,
        out_2: Outputs<Msg<Q>, O>,
        link_to: [Sender<'static, Event, INBOX>; N],
        app_to: [Sender<'static, Event, INBOX>; N],
        grants: Receiver<'static, Grant, 4>,
    }

    #[init]
    fn init(_: init::Context) -> (Shared, Local) {
        let (tx0, inbox_0) = make_channel!(Event, INBOX);
        let (tx1, inbox_1) = make_channel!(Event, INBOX);
        let (tx2, inbox_2) = make_channel!(Event, INBOX);
        let (grants_0, grants) = make_channel!(Grant, 4);
        // Node 0 starts with the token; every site's parent is node 0.
        let (Ok(s0), Ok(s1), Ok(s2)) = (
            MySite::new(NodeId(0), NodeId(0)),
            MySite::new(NodeId(1), NodeId(0)),
            MySite::new(NodeId(2), NodeId(0)),
        ) else {
            say!("rtic: the sites could not be made");
            exit(false)
        };
        if device_0::spawn().is_err()
            || device_1::spawn().is_err()
            || device_2::spawn().is_err()
            || director::spawn().is_err()
        {
            exit(false)
        }
        say!(
            "rtic: {} sites, {} lock, inbox of {} event(s), wire of {} frames",
            N,
            L,
            INBOX,
            WIRE
        );
        (
            Shared {
                world: World {
                    sites: [s0, s1, s2],
                    wires: Default::default(),
                    holding: [Mode::Phi; N],
                    sent: 0,
                    delivered: 0,
                    held_back: 0,
                    dropped: 0,
                    violations: 0,
                    errors: 0,
                    done: false,
                },
            },
            Local {
                inbox_0,
                inbox_1,
                inbox_2,
                grants_1: grants_0.clone(),
                grants_2: grants_0.clone(),
                grants_0,
                out_0: Outputs::new(),
                out_1: Outputs::new(),
                out_2: Outputs::new(),
                link_to: [tx0.clone(), tx1.clone(), tx2.clone()],
                app_to: [tx0, tx1, tx2],
                grants,
            },
        )
    }

    /// Runs only when no task is ready and no interrupt pending: the system is quiet, so
    /// nothing more can happen. Checks the end state and exits.
    #[idle(shared = [world])]
    fn idle(mut cx: idle::Context) -> ! {
        let ok = cx.shared.world.lock(|w| {
            let mut ok = w.done && w.violations == 0 && w.errors == 0;
            let mut tokens = 0;
            for (i, site) in w.sites.iter().enumerate() {
                let Ok(node) = site.lock(LOCK) else {
                    return false;
                };
                if node.has_token() {
                    tokens += 1;
                    say!("rtic: node {} holds the token", i);
                }
                let idle = node.held() == Mode::Phi
                    && node.pending_mode() == Mode::Phi
                    && node.queue().is_empty();
                if !idle {
                    say!(
                        "rtic: node {} is not idle: holds {}, waits for {}, {} queued",
                        i,
                        mode_name(node.held()),
                        mode_name(node.pending_mode()),
                        node.queue().len()
                    );
                }
                ok &= idle;
            }
            let in_flight: usize = w.wires.iter().flatten().map(|q| q.len()).sum();
            say!(
                "rtic: frames sent {}, delivered {}, held back at a full inbox {}, dropped {}, in flight {}",
                w.sent,
                w.delivered,
                w.held_back,
                w.dropped,
                in_flight
            );
            say!(
                "rtic: tokens {}, conflicting holds {}, refused steps {}, director done {}",
                tokens,
                w.violations,
                w.errors,
                w.done
            );
            ok && tokens == 1
                && in_flight == 0
                && w.dropped == 0
                && w.sent == w.delivered
                && w.held_back > 0
        });
        say!("{}", if ok { "rtic: PASS" } else { "rtic: FAIL" });
        exit(ok)
    }

    #[task(priority = 1, shared = [world], local = [inbox_0, grants_0, out_0])]
    async fn device_0(cx: device_0::Context) {
        let l = cx.local;
        run_device(0, l.inbox_0, l.grants_0, l.out_0, cx.shared.world).await;
    }

    #[task(priority = 1, shared = [world], local = [inbox_1, grants_1, out_1])]
    async fn device_1(cx: device_1::Context) {
        let l = cx.local;
        run_device(1, l.inbox_1, l.grants_1, l.out_1, cx.shared.world).await;
    }

    #[task(priority = 1, shared = [world], local = [inbox_2, grants_2, out_2])]
    async fn device_2(cx: device_2::Context) {
        let l = cx.local;
        run_device(2, l.inbox_2, l.grants_2, l.out_2, cx.shared.world).await;
    }

    /// The simulated receive interrupt: moves frames from the wires into the inboxes, oldest
    /// first per wire; a frame whose receiver's inbox is full stays at the head of its wire.
    #[task(binds = IRQ31, priority = 2, shared = [world], local = [link_to])]
    fn link(mut cx: link::Context) {
        let link_to = cx.local.link_to;
        cx.shared.world.lock(|w| {
            for (from, row) in w.wires.iter_mut().enumerate() {
                for (to, wire) in row.iter_mut().enumerate() {
                    while let Some(msg) = wire.pop_front() {
                        let from_id = NodeId(from as u16);
                        match link_to[to].try_send(Event::Deliver(from_id, msg)) {
                            Ok(()) => w.delivered += 1,
                            Err(TrySendError::Full(Event::Deliver(_, msg)))
                                if !cfg!(feature = "drop-when-full") =>
                            {
                                w.held_back += 1;
                                // The slot it came from is free: this cannot fail.
                                let _ = wire.push_front(msg);
                                break;
                            }
                            Err(_) => w.dropped += 1,
                        }
                    }
                }
            }
        });
    }

    /// The application of all three devices: queues acquire and release events and checks
    /// the grants it is told of.
    #[task(priority = 1, shared = [world], local = [app_to, grants])]
    async fn director(mut cx: director::Context) {
        let to = cx.local.app_to;
        let grants = cx.local.grants;
        // Node 1 takes W: the token moves from node 0 to node 1.
        let _ = to[1].send(Event::Acquire(Mode::W)).await;
        let first = if cfg!(feature = "wrong-expectation") {
            2
        } else {
            1
        };
        match grants.recv().await {
            Ok(g) if g.node == first && g.mode == Mode::W => {}
            Ok(g) => {
                say!(
                    "rtic: MISMATCH: first grant to node {} in {}, expected node {} in W",
                    g.node,
                    mode_name(g.mode),
                    first
                );
                return;
            }
            Err(_) => return,
        }
        // While node 1 holds W, node 2 asks for W and node 0 for R; then node 1 releases.
        let _ = to[2].send(Event::Acquire(Mode::W)).await;
        let _ = to[0].send(Event::Acquire(Mode::R)).await;
        let _ = to[1].send(Event::Release).await;
        // Both are granted, one after the other (W and R conflict), each released at once.
        let mut seen = [false; N];
        for _ in 0..2 {
            let Ok(g) = grants.recv().await else { return };
            let expected = match g.node {
                2 => Mode::W,
                0 => Mode::R,
                _ => Mode::Phi,
            };
            if g.mode != expected || seen[g.node] {
                say!(
                    "rtic: MISMATCH: grant to node {} in {}",
                    g.node,
                    mode_name(g.mode)
                );
                return;
            }
            seen[g.node] = true;
            let _ = to[g.node].send(Event::Release).await;
        }
        cx.shared.world.lock(|w| w.done = true);
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    say!("rtic: PANIC");
    exit(false)
}
