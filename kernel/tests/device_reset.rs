//! Why a device that resets must not simply build its site again (`docs/embedding.md`, "The
//! transport contract", a device reset): the token engine of the thesis has no notion of a
//! site that lost its state, so a site made anew by `Site::new` is a second, different
//! participant under the old id. These tests show the two ways it goes wrong, so that the
//! contract's rule (restart every device together, or keep the site across the reset) has a
//! reason that fails visibly if the kernel ever changes.

use hilock_harness::Cluster;
use hilock_kernel::{Input, KernelError, LockId, Mode, NodeId, Output, Protocol, Site};

type S = Site<4, 2, 4>;

fn cluster() -> Cluster<S> {
    Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap())
            .collect(),
    )
}

fn granted(outputs: &[Output<hilock_kernel::Msg<4>>], mode: Mode) -> bool {
    outputs
        .iter()
        .any(|o| matches!(o, Output::Granted { mode: m, .. } if *m == mode))
}

/// The token of lock 0 starts at node 0. Node 1 takes it in W; node 0 resets and builds its
/// site again, which starts with the token, and grants itself W at once: two holders of W
/// (P1, Table 2.1), with no message lost or repeated.
#[test]
fn a_reset_token_node_built_again_makes_a_second_token() {
    let mut c = cluster();
    let lock = LockId(0);
    c.input(
        NodeId(1),
        Input::Acquire {
            lock,
            mode: Mode::W,
        },
    )
    .unwrap();
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(NodeId(1)).held(lock).unwrap(), Mode::W);
    assert!(c.check_mutual_exclusion().is_ok());

    c.crash(NodeId(0));
    assert!(c.restart(NodeId(0), S::new(NodeId(0), NodeId(0)).unwrap()));
    let step = c
        .input(
            NodeId(0),
            Input::Acquire {
                lock,
                mode: Mode::W,
            },
        )
        .unwrap();
    assert!(granted(&step.outputs, Mode::W), "{:?}", step.outputs);
    let v = c.check_mutual_exclusion().unwrap_err();
    assert!(
        v.detail.contains("n0 holds W") && v.detail.contains("n1 holds W"),
        "{v}"
    );
}

/// Node 1 takes a copy of lock 0 and releases it; nothing is held anywhere. It resets and
/// builds its site again: its hop numbers start again at 1, so node 0 refuses its next
/// request for lock 0 as a repeat (`KernelError::Duplicate`) and the request never
/// completes. Lock 1, which node 1 never asked for, is still granted: the damage is every
/// lock the device ever asked for, not only those it held.
#[test]
fn a_reset_requester_built_again_is_refused_as_a_repeat() {
    let mut c = cluster();
    let (l0, l1) = (LockId(0), LockId(1));
    c.input(
        NodeId(0),
        Input::Acquire {
            lock: l0,
            mode: Mode::R,
        },
    )
    .unwrap();
    c.input(
        NodeId(1),
        Input::Acquire {
            lock: l0,
            mode: Mode::R,
        },
    )
    .unwrap();
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert_eq!(c.site(NodeId(1)).held(l0).unwrap(), Mode::R);
    c.input(NodeId(1), Input::Release { lock: l0 }).unwrap();
    c.input(NodeId(0), Input::Release { lock: l0 }).unwrap();
    c.settle(100, |_, _, _, _| Ok(())).unwrap();
    assert!((0..4).all(|n| c.site(NodeId(n)).held(l0).unwrap() == Mode::Phi));

    c.crash(NodeId(1));
    assert!(c.restart(NodeId(1), S::new(NodeId(1), NodeId(0)).unwrap()));
    c.input(
        NodeId(1),
        Input::Acquire {
            lock: l0,
            mode: Mode::R,
        },
    )
    .unwrap();
    let (_, r) = c
        .deliver(NodeId(1), NodeId(0))
        .expect("the request is in flight");
    assert!(
        matches!(r, Err(e) if e.kernel() == Some(KernelError::Duplicate(l0))),
        "the root took the reset node's request"
    );
    assert!(c.site(NodeId(1)).is_pending(l0).unwrap());

    c.input(
        NodeId(1),
        Input::Acquire {
            lock: l1,
            mode: Mode::R,
        },
    )
    .unwrap();
    let mut got = false;
    c.settle(100, |_, _, _, step| {
        got |= step.node == NodeId(1) && granted(&step.outputs, Mode::R);
        Ok(())
    })
    .unwrap();
    assert!(got, "lock 1 was not granted");
}
