//! The agents engine (Wiger's locks) under many seeded delivery schedules, driven through
//! the one harness: each node is a lock server and a client's transactions
//! ([`AgentsSite`], `harness/src/engines/agents.rs`); the harness routes every message over
//! FIFO channels (Erlang's guarantee between two processes) and checks mutual exclusion
//! over the hierarchy after every step; a seeded generator picks which channel delivers
//! next and when a client that holds its locks ends its transaction. Every rule is the
//! kernel's.

use hilock_harness::engines::agents::AgentsSite;
use hilock_harness::{Cluster, StepError};
use hilock_kernel::agents::{AgentVariant, Resolver, ServerVariant, SurrenderTo};
use hilock_kernel::{Input, KernelError, LockId, Mode, NodeId, Protocol};

use crate::rng;
use rng::Rng;

/// What one run did.
#[derive(Debug, Default)]
struct Run {
    started: usize,
    committed: usize,
    surrenders: u32,
}

/// Whether every lock `node`'s transaction asked for is held (its client may end it).
fn holds_all(c: &Cluster<AgentsSite>, node: NodeId, locks: u16) -> bool {
    let s = c.site(node);
    let mut any = false;
    for l in (0..locks).map(LockId) {
        if s.is_pending(l).unwrap() {
            return false;
        }
        any |= s.held(l).unwrap() != Mode::Phi;
    }
    any
}

/// One run, schedule `seed`: `calls[n]` are node `n`'s transactions, one after the other,
/// each asking for all its locks at once (`locks:lock_objects/2`); a transaction that holds
/// them all is ended (every lock released) at a time the schedule picks. Checks safety after
/// every step; every transaction must commit and the cluster must drain.
fn run(
    seed: u64,
    mut c: Cluster<AgentsSite>,
    calls: &[Vec<Vec<(u16, Mode)>>],
) -> Result<Run, String> {
    let locks = c.locks() as u16;
    let mut rng = Rng::new(seed);
    let mut made = vec![0; calls.len()];
    let mut r = Run::default();
    let call = |c: &mut Cluster<AgentsSite>, n: usize, made: &mut Vec<usize>| {
        if let Some(call) = calls[n].get(made[n]) {
            made[n] += 1;
            for &(l, mode) in call {
                c.input(
                    NodeId(n as u16),
                    Input::Acquire {
                        lock: LockId(l),
                        mode,
                    },
                )
                .map_err(|e| format!("seed {seed}: acquire at n{n}: {e}"))?;
            }
            return Ok::<bool, String>(true);
        }
        Ok(false)
    };
    for n in 0..calls.len() {
        r.started += usize::from(call(&mut c, n, &mut made)?);
    }
    for _ in 0..100_000 {
        let channels = c.busy_channels();
        let finishing: Vec<usize> = (0..calls.len())
            .filter(|&n| holds_all(&c, NodeId(n as u16), locks))
            .collect();
        let k = channels.len() + finishing.len();
        if k == 0 {
            break;
        }
        let pick = rng.below(k);
        if pick < channels.len() {
            let (from, to) = channels[pick];
            let (m, step) = c.deliver(from, to).expect("a busy channel");
            step.map_err(|e| format!("seed {seed}: {from} -> {to} {m:?}: {e}"))?;
        } else {
            let n = finishing[pick - channels.len()];
            let node = NodeId(n as u16);
            for l in (0..locks).map(LockId) {
                if c.site(node).held(l).unwrap() != Mode::Phi {
                    c.input(node, Input::Release { lock: l })
                        .map_err(|e| format!("seed {seed}: release at {node}: {e}"))?;
                }
            }
            r.committed += 1;
            r.started += usize::from(call(&mut c, n, &mut made)?);
        }
        c.check_safety().map_err(|v| format!("seed {seed}: {v}"))?;
    }
    c.drain(4, 10_000, |c, _| {
        c.check_safety().map_err(|v| v.to_string())
    })
    .map_err(|e| format!("seed {seed}: {e}"))?;
    r.surrenders = c.sites().map(|s| s.surrenders()).sum();
    Ok(r)
}

const W: Mode = Mode::W;
const R: Mode = Mode::R;

/// Two transactions take the same two locks in opposite orders, each asking for both at
/// once, with `abort_on_deadlock`: on one server, and on two (one lock each). Whenever each
/// gets one lock first, the servers' queues deadlock, but neither client was told it holds
/// anything, so the largest holder surrenders its lock silently — never aborts
/// (uwiger/locks: only a lock claimed in an earlier "have all locks" counts; an abort is a
/// step error of the site). 1,000 schedules; red before the kernel counted a lock as told
/// only with "have all locks" (it counted every lock granted on its servers).
#[test]
fn crossing_lock_all_calls_with_abort_on_deadlock_never_abort() {
    let mut total = Run::default();
    for seed in 0..1000 {
        let servers = 1 + u16::from(seed % 2 == 1);
        let sites = AgentsSite::cluster(2, servers, &[&[1], &[2]])
            .unwrap()
            .into_iter()
            .map(|s| s.with_abort_on_deadlock(true))
            .collect();
        let calls = [vec![vec![(0, W), (1, W)]], vec![vec![(1, W), (0, W)]]];
        let r = run(seed, Cluster::new(sites), &calls).unwrap();
        assert_eq!(r.committed, 2, "seed {seed}: {r:?}");
        total.committed += r.committed;
        total.surrenders += r.surrenders;
    }
    println!("{total:?}");
    assert_eq!(total.committed, 2000);
    assert!(total.surrenders > 100, "the schedules deadlock: {total:?}");
}

/// The hierarchy: `[1]` covers `[1, 1]` and `[1, 2]`.
const PATHS: &[&[u16]] = &[&[1], &[1, 1], &[1, 2], &[2], &[2, 1], &[3]];

/// Random transactions of one to three locks of [`PATHS`] in R or W, three per node on
/// three nodes (three servers), under 300 schedules.
fn random_calls(rng: &mut Rng, nodes: usize) -> Vec<Vec<Vec<(u16, Mode)>>> {
    (0..nodes)
        .map(|_| {
            (0..3)
                .map(|_| {
                    let mut call: Vec<(u16, Mode)> = Vec::new();
                    for _ in 0..1 + rng.below(3) {
                        let l = rng.below(PATHS.len()) as u16;
                        let m = if rng.below(2) == 0 { R } else { W };
                        if call.iter().all(|(x, _)| *x != l) {
                            call.push((l, m));
                        }
                    }
                    call
                })
                .collect()
        })
        .collect()
}

fn random_runs(agent: AgentVariant, server: ServerVariant, seeds: u64) -> Result<Run, String> {
    let mut total = Run::default();
    for seed in 0..seeds {
        let sites = AgentsSite::cluster(3, 3, PATHS)
            .unwrap()
            .into_iter()
            .map(|s| s.with_variants(agent, server))
            .collect();
        let calls = random_calls(&mut Rng::new(seed ^ 0xA5A5), 3);
        let r = run(seed, Cluster::new(sites), &calls)?;
        if r.committed != r.started {
            return Err(format!("seed {seed}: {r:?}"));
        }
        total.started += r.started;
        total.committed += r.committed;
        total.surrenders += r.surrenders;
    }
    Ok(total)
}

/// Transactions over hierarchical locks (`[a]` covers `[a, b]`, read shared, write
/// exclusive; the seed's "hierarchical lock ids") on three servers: after every step no two
/// clients are told they hold related paths in conflicting modes, and every told lock is
/// granted by its server (`AgentsSite`'s invariants, P1); every transaction commits and the
/// cluster drains with nothing pending (P4), with deadlocks resolved by surrender.
#[test]
fn hierarchical_transactions_are_exclusive_and_all_commit() {
    let total = random_runs(AgentVariant::SEED, ServerVariant::SEED, 300).unwrap();
    println!("{total:?}");
    assert_eq!(total.committed, 2700);
    assert!(total.surrenders > 10, "the schedules deadlock: {total:?}");
}

/// The harness catches the surrender Arts refuted (the seed: "the only safe general way of
/// implementing a surrender action" is to move the holder to the end of the queue; a swap
/// with the client behind it lets a client be told of a lock its server has given away).
#[test]
fn the_harness_catches_surrender_by_swap() {
    let swap = ServerVariant {
        surrender: SurrenderTo::SwapWithNext,
        ..ServerVariant::SEED
    };
    let e = random_runs(AgentVariant::SEED, swap, 300).unwrap_err();
    println!("{e}");
}

/// The harness catches the resolver Arts refuted ("it is important to select this
/// particular client among the ones that indeed hold a lock").
#[test]
fn the_harness_catches_the_largest_in_cycle_resolver() {
    let largest = AgentVariant {
        resolver: Resolver::LargestInCycle,
        ..AgentVariant::SEED
    };
    let e = random_runs(largest, ServerVariant::SEED, 300).unwrap_err();
    println!("{e}");
}

/// The site's contract (`harness/src/engines/agents.rs`): R and W only, no try-lock, and
/// no new lock in a transaction that was told it holds its locks; a refused input changes
/// nothing.
#[test]
fn an_agents_site_refuses_what_a_transaction_cannot_do() {
    let mut c = Cluster::new(AgentsSite::cluster(2, 1, PATHS).unwrap());
    let n1 = NodeId(1);
    let (l0, l3, l9) = (LockId(0), LockId(3), LockId(9));
    let refuses = |c: &mut Cluster<AgentsSite>, input: Input<'_, _>, refused| {
        let (before, said) = (c.site(n1).clone(), format!("{input:?}"));
        let e = c.input(n1, input).err().and_then(|e: StepError| e.kernel());
        assert_eq!(e, Some(refused), "{said}");
        assert_eq!(*c.site(n1), before);
    };
    let u = Mode::U;
    refuses(
        &mut c,
        Input::Acquire { lock: l0, mode: u },
        KernelError::InvalidMode,
    );
    refuses(
        &mut c,
        Input::TryAcquire { lock: l0, mode: W },
        KernelError::Unsupported(l0),
    );
    refuses(
        &mut c,
        Input::Acquire { lock: l9, mode: W },
        KernelError::UnknownLock(l9),
    );
    refuses(
        &mut c,
        Input::Release { lock: l0 },
        KernelError::NotHeld(l0),
    );
    c.input(n1, Input::Acquire { lock: l0, mode: R }).unwrap();
    refuses(
        &mut c,
        Input::Acquire { lock: l0, mode: W },
        KernelError::AlreadyPending(l0),
    );
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(n1).held(l0), Ok(Mode::R));
    // Told it holds its locks: no new lock until they are released.
    refuses(
        &mut c,
        Input::Acquire { lock: l3, mode: W },
        KernelError::AlreadyHeld(l0),
    );
    c.input(n1, Input::Release { lock: l0 }).unwrap();
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(NodeId(0)).server().entries().count(), 0);
}

/// A lock the client was told it holds and that its agent then finds lost (here a forged,
/// newer queue of its server shows another agent ahead) cannot be said through
/// `Protocol`, whose outputs have no revocation: the site refuses the delivery with
/// `KernelError::Revoked` naming the lock (a delivery the harness records as a kernel
/// error) and keeps its state (`harness/src/engines/agents.rs`, "The driving contract").
#[test]
fn a_lost_told_lock_is_a_step_error_not_a_silent_change() {
    use hilock_harness::engines::agents::AgentsMsg;
    use hilock_kernel::agents::{AgentId, LockInfo, LockMode, QEntry, ServerId};
    let mut c = Cluster::new(AgentsSite::cluster(2, 1, PATHS).unwrap());
    let (n0, n1, l0) = (NodeId(0), NodeId(1), LockId(0));
    c.input(n1, Input::Acquire { lock: l0, mode: W }).unwrap();
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(n1).held(l0), Ok(W));
    let (me, _, path, _) = c.site(n1).told().next().unwrap();
    let entry = |agent, granted| QEntry {
        agent,
        path,
        mode: LockMode::Write,
        granted,
    };
    let mut queue = heapless::Vec::new();
    queue.push(entry(AgentId(9), true)).unwrap();
    queue.push(entry(me, false)).unwrap();
    let info = LockInfo {
        server: ServerId(0),
        path,
        version: 1_000,
        cause: AgentId(9),
        surrender: false,
        queue,
    };
    let lost = AgentsMsg::Info {
        to: me,
        info: Box::new(info),
    };
    let before = c.site(n1).clone();
    let r = c.inject(n0, n1, &lost);
    assert_eq!(
        r.err().and_then(|e| e.kernel()),
        Some(KernelError::Revoked(l0))
    );
    assert_eq!(*c.site(n1), before);
    assert_eq!(
        c.site(n1).held(l0),
        Ok(W),
        "still told, as before the delivery"
    );
}
