//! Preston & Prasad's tree locking as a lock service, driven through the one harness: node 0
//! keeps the document tree, nodes `1..` are editors that ask for leaves over the network
//! and leave them again ([`TreeSite`], `harness/src/engines/tree.rs`). The harness routes
//! every request and answer and checks, after every step, that no two editors hold a leaf
//! (P1), that each held leaf lies in a region of its holder and that the tree passes its
//! audit (slides 7, 12: colours, grey counts, every region the largest subtree that holds
//! no other request).

use hilock_harness::engines::tree::TreeSite;
use hilock_harness::{Cluster, StepError};
use hilock_kernel::tree::{TreeLock, TreeVariant};
use hilock_kernel::{Input, KernelError, LockId, Mode, NodeId, Output, Protocol};

use crate::rng;
use rng::Rng;

#[derive(Debug, Default)]
struct Run {
    granted: u32,
    refused: u32,
}

/// `users` editors on a complete tree of height 3 (eight leaves) under schedule `seed`:
/// `steps` times an editor asks for a leaf (a try: the slides' insert never waits), leaves
/// one it holds, or a message is delivered; then the cluster drains.
fn run(seed: u64, variant: TreeVariant, users: u16, steps: usize) -> Result<Run, String> {
    let tree = TreeLock::complete(3).map_err(|e| format!("{e:?}"))?;
    let mut c =
        Cluster::new(TreeSite::cluster(tree, variant, users).map_err(|e| format!("{e:?}"))?);
    let leaves = c.locks() as u16;
    let mut rng = Rng::new(seed);
    let mut r = Run::default();
    let mut count = |o: &Output<_>| match o {
        Output::Granted { .. } => r.granted += 1,
        Output::WouldBlock { .. } => r.refused += 1,
        _ => {}
    };
    for _ in 0..steps {
        let channels = c.busy_channels();
        let pick = rng.below(channels.len() + 2 * users as usize);
        if pick < channels.len() {
            let (from, to) = channels[pick];
            c.deliver_with(from, to, &mut count)
                .expect("a busy channel")
                .map_err(|(e, m)| format!("seed {seed}: {from} -> {to} {m:?}: {e}"))?;
        } else {
            let u = NodeId(1 + (pick - channels.len()) as u16 / 2);
            let held: Vec<LockId> = (0..leaves)
                .map(LockId)
                .filter(|l| c.site(u).held(*l) == Ok(Mode::W))
                .collect();
            let trying = (0..leaves).any(|l| c.site(u).is_pending(LockId(l)) == Ok(true));
            let input = if (pick - channels.len()) % 2 == 0 && !held.is_empty() {
                Input::Release {
                    lock: held[rng.below(held.len())],
                }
            } else if !trying && held.is_empty() {
                let lock = LockId(rng.below(leaves as usize) as u16);
                Input::TryAcquire {
                    lock,
                    mode: Mode::W,
                }
            } else {
                continue;
            };
            c.input_with(u, input, &mut count)
                .map_err(|e| format!("seed {seed}: {u}: {e}"))?;
        }
        c.check_safety().map_err(|v| format!("seed {seed}: {v}"))?;
    }
    c.drain(4, 10_000, |c, _| {
        c.check_safety().map_err(|v| v.to_string())
    })
    .map_err(|e| format!("seed {seed}: {e}"))?;
    Ok(r)
}

/// Four editors on eight leaves, 200 schedules of 300 steps: exclusion, regions and the
/// audit hold in every state, the cluster drains with nothing pending (P4), and both
/// answers of the insert occur (slide 16: granted, or failed because another editor holds
/// the leaf).
#[test]
fn editors_over_the_network_hold_disjoint_regions_and_the_tree_stays_audited() {
    let mut total = Run::default();
    for seed in 0..200 {
        let r = run(seed, TreeVariant::HILOCK, 4, 300).unwrap();
        total.granted += r.granted;
        total.refused += r.refused;
    }
    println!("{total:?}");
    assert!(total.granted > 1000 && total.refused > 100, "{total:?}");
}

/// The harness catches the slides' literal pseudocode (slides 16, 20; the tree model's
/// counterexamples `spec/counterexamples/tree-*.json`): some schedule breaks the audit,
/// a region or an operation.
#[test]
fn the_harness_catches_the_slides_literal_pseudocode() {
    let e = (0..200)
        .find_map(|seed| run(seed, TreeVariant::SLIDES, 4, 300).err())
        .expect("a schedule that refutes the literal slides");
    println!("{e}");
}

/// The site's contract (`harness/src/engines/tree.rs`): a try in W only, no waiting
/// acquire, only editors ask; a refused input changes nothing.
#[test]
fn a_tree_site_refuses_what_the_slides_do_not_offer() {
    let tree = TreeLock::complete(2).unwrap();
    let mut c = Cluster::new(TreeSite::cluster(tree, TreeVariant::HILOCK, 2).unwrap());
    let (n0, n1, l0) = (NodeId(0), NodeId(1), LockId(0));
    let err = |r: Result<_, StepError>| r.err().and_then(|e| e.kernel());
    let (w, r) = (Mode::W, Mode::R);
    for (node, input, refused) in [
        (
            n1,
            Input::Acquire { lock: l0, mode: w },
            KernelError::Unsupported(l0),
        ),
        (
            n1,
            Input::TryAcquire { lock: l0, mode: r },
            KernelError::InvalidMode,
        ),
        (
            n0,
            Input::TryAcquire { lock: l0, mode: w },
            KernelError::Unsupported(l0),
        ),
        (n1, Input::Release { lock: l0 }, KernelError::NotHeld(l0)),
        (
            n1,
            Input::Cancel { lock: l0 },
            KernelError::CancelUnsupported(l0),
        ),
        (
            n1,
            Input::TryAcquire {
                lock: LockId(4),
                mode: w,
            },
            KernelError::UnknownLock(LockId(4)),
        ),
    ] {
        let before = c.site(node).clone();
        assert_eq!(err(c.input(node, input)), Some(refused), "{input:?}");
        assert_eq!(*c.site(node), before);
    }
    c.input(
        n1,
        Input::TryAcquire {
            lock: l0,
            mode: Mode::W,
        },
    )
    .unwrap();
    c.settle(10, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(n1).held(l0), Ok(Mode::W));
    // The other editor's try of the same leaf fails and leaves nothing pending.
    c.input(
        NodeId(2),
        Input::TryAcquire {
            lock: l0,
            mode: Mode::W,
        },
    )
    .unwrap();
    c.settle(10, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(NodeId(2)).held(l0), Ok(Mode::Phi));
    assert_eq!(c.site(NodeId(2)).is_pending(l0), Ok(false));
    c.check_safety().unwrap();
}
