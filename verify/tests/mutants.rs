//! Small checks added for mutants that `cargo mutants` found missed by the kernel tests and
//! the model-checking suite: observable kernel API that the protocol itself never reads
//! (display of modes and mode sets as used in traces and errors, the token generation).

use hilock_kernel::mode::{strongest, Incompatible};
use hilock_kernel::{Input, LockId, Mode, ModeSet, Msg, NodeId, Output, Outputs, Site};

#[test]
fn mode_sets_and_conflicts_display_as_in_the_thesis() {
    assert_eq!(ModeSet::of(&[Mode::IR, Mode::R]).to_string(), "{IR, R}");
    assert_eq!(ModeSet::EMPTY.to_string(), "{}");
    let e: Incompatible = strongest(Mode::U, Mode::IW).unwrap_err();
    assert_eq!(e.to_string(), "modes U and IW conflict (Table 2.1)");
}

type S = Site<3, 1, 3>;

#[test]
fn token_generation_counts_transfers() {
    let l = LockId(0);
    let mut a = S::with_parents(NodeId(0), |_| None).unwrap();
    let mut b = S::with_parents(NodeId(1), |_| Some(NodeId(0))).unwrap();
    assert_eq!(a.lock(l).unwrap().token_generation(), Some(0));
    assert_eq!(b.lock(l).unwrap().token_generation(), None);
    let mut out: Outputs<Msg<3>, 13> = Outputs::new();
    b.step(
        Input::Acquire {
            lock: l,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send { msg, .. }) = out.pop() else {
        panic!("request expected")
    };
    a.step(
        Input::Deliver {
            from: NodeId(1),
            msg: &msg,
        },
        &mut out,
    )
    .unwrap();
    let Some(Output::Send { msg, .. }) = out.pop() else {
        panic!("token expected")
    };
    b.step(
        Input::Deliver {
            from: NodeId(0),
            msg: &msg,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(a.lock(l).unwrap().token_generation(), None);
    assert_eq!(b.lock(l).unwrap().token_generation(), Some(1));
}
