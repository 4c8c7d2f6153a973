//! The kernel never allocates: a counting global allocator wraps `System`, and many kernel
//! steps of every kind (local request granted and forwarded, copy grant, token transfer
//! with queue, release, freeze, and their deliveries) run with the count checked to stay 0.

// A `#[global_allocator]` needs `unsafe impl GlobalAlloc`; the workspace denies unsafe
// code, so it is allowed in this test file only. The impl only forwards to `System` and
// counts; it adds no unsafe operation of its own.
#![allow(unsafe_code)]

use hilock_benches::scenarios::{self, DefaultOutputs, LOCK};
use hilock_kernel::{DefaultSite, Input, Mode, Msg, MsgKind, NodeId, Output};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // const-initialised, no destructor: touching it never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns the number of allocations this thread made meanwhile.
fn count<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, ALLOCS.with(|a| a.get()))
}

#[test]
fn the_counter_sees_allocations() {
    let (v, n) = count(|| vec![1u8; 64]);
    assert_eq!(v.len(), 64);
    assert!(n >= 1);
}

#[test]
fn scenario_steps_do_not_allocate() {
    let all = scenarios::all();
    let mut out = DefaultOutputs::new();
    let (steps, allocs) = count(|| {
        let mut steps = 0u64;
        for _ in 0..2_000 {
            for s in &all {
                let mut site = s.site.clone();
                s.step(&mut site, &mut out);
                steps += 1;
            }
        }
        steps
    });
    assert_eq!(steps, 2_000 * all.len() as u64);
    assert_eq!(allocs, 0, "{allocs} allocations in {steps} steps");
}

/// A whole 4-node system driven by a fixed pseudo-random schedule, with a heapless wire:
/// every step of every kind, no allocation anywhere in the loop.
#[test]
fn a_random_run_of_every_step_kind_does_not_allocate() {
    const NODES: usize = 4;
    let mut sites: [DefaultSite; NODES] =
        core::array::from_fn(|i| DefaultSite::new(NodeId(i as u16), NodeId(0)).expect("site"));
    let mut wire: heapless::Deque<(NodeId, NodeId, Msg<8>), 512> = heapless::Deque::new();
    let mut out = DefaultOutputs::new();
    let mut delivered = [0u64; 6];
    let mut local = [0u64; 3]; // acquire (or try) answered at once, not at once, release
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let modes = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W];
    let ((), allocs) = count(|| {
        for _ in 0..200_000 {
            let r = rnd();
            if r % 3 != 0 && !wire.is_empty() {
                let (from, to, msg) = wire.pop_front().expect("msg");
                out.clear();
                sites[to.idx()]
                    .step(Input::Deliver { from, msg: &msg }, &mut out)
                    .expect("deliver");
                delivered[match msg.kind() {
                    MsgKind::Request => 0,
                    MsgKind::Grant => 1,
                    MsgKind::Token => 2,
                    MsgKind::Release => 3,
                    MsgKind::Freeze => 4,
                    MsgKind::Busy => 5,
                }] += 1;
                for o in out.iter() {
                    if let Output::Send { to: t, msg } = o {
                        wire.push_back((to, *t, msg.clone())).expect("wire room");
                    }
                }
                continue;
            }
            let i = (r >> 8) as usize % NODES;
            let node = sites[i].lock(LOCK).expect("lock");
            let input = if node.held() != Mode::Phi {
                local[2] += 1;
                Input::Release { lock: LOCK }
            } else if node.pending_mode() == Mode::Phi && (r >> 24) % 4 == 0 {
                // One acquire in four is a try-lock (`spec/SPEC.md` 1.12).
                Input::TryAcquire {
                    lock: LOCK,
                    mode: modes[(r >> 16) as usize % 5],
                }
            } else if node.pending_mode() == Mode::Phi {
                Input::Acquire {
                    lock: LOCK,
                    mode: modes[(r >> 16) as usize % 5],
                }
            } else {
                continue;
            };
            let is_acquire = matches!(input, Input::Acquire { .. } | Input::TryAcquire { .. });
            out.clear();
            sites[i].step(input, &mut out).expect("local step");
            if is_acquire {
                let granted = out.iter().any(|o| matches!(o, Output::Granted { .. }));
                local[usize::from(!granted)] += 1;
            }
            for o in out.iter() {
                if let Output::Send { to, msg } = o {
                    wire.push_back((NodeId(i as u16), *to, msg.clone()))
                        .expect("wire room");
                }
            }
        }
    });
    assert_eq!(allocs, 0, "allocations during kernel steps");
    for (k, n) in ["request", "grant", "token", "release", "freeze", "busy"]
        .iter()
        .zip(delivered)
    {
        assert!(n > 100, "only {n} {k} deliveries: {delivered:?}");
    }
    assert!(local.iter().all(|&n| n > 100), "{local:?}");
}
