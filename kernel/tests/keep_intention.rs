//! hilock's kept intention modes ([`ReleaseRule::KeepIntention`], `spec/SPEC.md` 1.7,
//! "Keeping intention modes"): an idle node keeps IR/IW without a `Release`,
//! re-enters by Rule 2 without a message, and gives the mode back on a freeze, on a
//! request for a mode it does not cover, and on recovery. Every step runs in the one
//! harness (`hilock_harness::Cluster`), which checks P1–P3b after each.

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{rebuild, FaultSite, LockReport, Plan, Stamped};
use hilock_kernel::{
    Input, LockId, Mode, ModeSet, Msg, MsgKind, NodeId, Output, Outputs, ReleaseRule, Site, Variant,
};

type S = Site<4, 1, 4>;
const L: LockId = LockId(0);

fn star(release: ReleaseRule) -> Cluster<S> {
    let v = Variant {
        release,
        ..Variant::HILOCK
    };
    Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap().with_variant(v))
            .collect(),
    )
}

/// Runs `input` at `at`, then delivers everything; returns the kinds of the messages sent
/// meanwhile and whether `at` was granted by its own step.
fn run(c: &mut Cluster<S>, at: u16, input: Input<'_, Msg<4>>) -> (Vec<MsgKind>, bool) {
    let step = c.input(NodeId(at), input).unwrap();
    let granted = step
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Granted { .. }));
    let mut kinds: Vec<MsgKind> = step
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send { msg, .. } => Some(msg.kind()),
            _ => None,
        })
        .collect();
    c.check_safety().unwrap();
    while let Some((f, t)) = c.oldest_channel() {
        let (_, r) = c.deliver(f, t).unwrap();
        for o in &r.unwrap().outputs {
            if let Output::Send { msg, .. } = o {
                kinds.push(msg.kind());
            }
        }
        c.check_safety().unwrap();
    }
    (kinds, granted)
}

/// The token node 0 holds `mode` while node `at` takes a copy of it (a token node owning
/// IR or IW grants the same mode as a copy, Rule 3.2) and releases it; then 0 releases.
fn copy_then_release(c: &mut Cluster<S>, at: u16, mode: Mode) -> (Vec<MsgKind>, Vec<MsgKind>) {
    run(c, 0, Input::Acquire { lock: L, mode });
    let (a, _) = run(c, at, Input::Acquire { lock: L, mode });
    let (r, _) = run(c, at, Input::Release { lock: L });
    run(c, 0, Input::Release { lock: L });
    (a, r)
}

fn node(c: &Cluster<S>, i: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(i)).lock(L).unwrap()
}

/// The thesis: a copy of IR costs request + grant + release. Kept: the release is not
/// sent, the second IR is a local grant (no message), and a W at the token node recalls
/// the kept IR by a freeze, answered by the release.
#[test]
fn kept_ir_reenters_locally_and_goes_back_on_freeze() {
    use MsgKind::*;
    let mut e = star(ReleaseRule::Eager);
    let (a, r) = copy_then_release(&mut e, 1, Mode::IR);
    assert_eq!((a, r), (vec![Request, Grant], vec![Release]));
    assert_eq!(node(&e, 1).owned(), Mode::Phi);

    let mut c = star(ReleaseRule::KeepIntention);
    let (a, r) = copy_then_release(&mut c, 1, Mode::IR);
    assert_eq!((a, r), (vec![Request, Grant], vec![]));
    assert_eq!(node(&c, 1).kept(), Mode::IR);
    assert_eq!(node(&c, 1).owned(), Mode::IR);
    assert_eq!(node(&c, 0).peers()[1].child_owned, Mode::IR);
    // P3 restated holds while IR is kept: a non-token node, nothing pending, nothing frozen.
    assert!(node(&c, 1).kept_invariant());
    let (k, granted) = run(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::IR,
        },
    );
    assert!(
        granted && k.is_empty(),
        "Rule 2 local grant under the kept IR"
    );
    let (k, _) = run(&mut c, 1, Input::Release { lock: L });
    assert!(k.is_empty());
    // W at the token node: queued behind the kept IR; IR is frozen (Table 2.4), node 1
    // gets the freeze and gives IR back; then W is granted.
    let (k, granted) = run(
        &mut c,
        0,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    assert!(!granted);
    assert_eq!(k, vec![Freeze, Release]);
    assert_eq!(node(&c, 0).held(), Mode::W);
    assert_eq!(
        (node(&c, 1).kept(), node(&c, 1).owned()),
        (Mode::Phi, Mode::Phi)
    );
    assert!(node(&c, 1).kept_invariant());
}

/// A U request behind a kept IW: Table 2.4's cell (IW, U) freezes IW, the freeze reaches
/// the keeper, which gives IW back, and U is granted.
#[test]
fn u_request_recalls_a_kept_iw() {
    use MsgKind::*;
    let mut c = star(ReleaseRule::KeepIntention);
    copy_then_release(&mut c, 1, Mode::IW);
    assert_eq!(node(&c, 1).kept(), Mode::IW);
    let (k, _) = run(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::U,
        },
    );
    assert_eq!(k, vec![Request, Freeze, Release, Token]);
    assert_eq!(node(&c, 2).held(), Mode::U);
    assert_eq!(node(&c, 1).kept(), Mode::Phi);
}

/// A freeze that does not make the keeper give back (`KeepWithoutGiveBack`) leaves a W
/// request waiting for ever behind a kept IR.
#[test]
fn without_give_back_a_w_request_waits_for_ever() {
    let mut c = star(ReleaseRule::KeepWithoutGiveBack);
    copy_then_release(&mut c, 1, Mode::IR);
    let (k, _) = run(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::W,
        },
    );
    assert!(k.contains(&MsgKind::Freeze));
    assert_eq!(node(&c, 2).held(), Mode::Phi);
    assert_eq!(node(&c, 1).kept(), Mode::IR);
    assert!(
        !node(&c, 1).kept_invariant(),
        "frozen while keeping: P3 restated is red"
    );
}

/// A request for a mode the kept mode does not cover gives the kept mode back first
/// (Release, then Request, on the same FIFO link); IW then covers a later IR locally.
#[test]
fn a_request_for_another_mode_gives_the_kept_mode_back() {
    use MsgKind::*;
    let mut c = star(ReleaseRule::KeepIntention);
    copy_then_release(&mut c, 1, Mode::IR);
    // The token node holds IW, so node 1's IW is a copy (not a token transfer).
    run(
        &mut c,
        0,
        Input::Acquire {
            lock: L,
            mode: Mode::IW,
        },
    );
    let (k, granted) = run(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::IW,
        },
    );
    assert!(!granted);
    assert_eq!(k, vec![Release, Request, Grant]);
    run(&mut c, 1, Input::Release { lock: L });
    assert_eq!(node(&c, 1).kept(), Mode::IW);
    let (k, granted) = run(
        &mut c,
        1,
        Input::Acquire {
            lock: L,
            mode: Mode::IR,
        },
    );
    assert!(granted && k.is_empty(), "IW covers IR (Table 2.2)");
}

/// A try for a mode the kept mode does not cover gives the kept mode back first, as a
/// request does (Release, then the try request — counted as a `Request` — on the same FIFO
/// link). Node 1 keeps IR; the
/// token node holds IW; node 1's try of IW is granted as a copy.
#[test]
fn a_try_for_another_mode_gives_the_kept_mode_back() {
    use MsgKind::*;
    let mut c = star(ReleaseRule::KeepIntention);
    copy_then_release(&mut c, 1, Mode::IR);
    assert_eq!(node(&c, 1).kept(), Mode::IR);
    run(
        &mut c,
        0,
        Input::Acquire {
            lock: L,
            mode: Mode::IW,
        },
    );
    let (k, granted) = run(
        &mut c,
        1,
        Input::TryAcquire {
            lock: L,
            mode: Mode::IW,
        },
    );
    assert!(!granted);
    assert_eq!(k, vec![Release, Request, Grant]);
    assert_eq!(node(&c, 1).held(), Mode::IW);
}

/// Recovery: reports carry held modes only and the rebuilt star records them; the kept
/// mode is dropped at install, so the member owns exactly its new record.
#[test]
fn recovery_drops_the_kept_mode() {
    let v = Variant {
        release: ReleaseRule::KeepIntention,
        ..Variant::HILOCK
    };
    type F = FaultSite<4, 1, 4>;
    let mut c: Cluster<F> = Cluster::new(
        (0..3)
            .map(|i| F::new(S::new(NodeId(i), NodeId(0)).unwrap().with_variant(v)))
            .collect(),
    );
    for (at, input) in [
        (
            0,
            Input::Acquire {
                lock: L,
                mode: Mode::IR,
            },
        ),
        (
            1,
            Input::Acquire {
                lock: L,
                mode: Mode::IR,
            },
        ),
        (1, Input::Release { lock: L }),
        (0, Input::Release { lock: L }),
    ] {
        c.input(NodeId(at), input).unwrap();
        while let Some((f, t)) = c.oldest_channel() {
            c.deliver(f, t).unwrap().1.unwrap();
        }
    }
    assert_eq!(c.site(NodeId(1)).site().lock(L).unwrap().kept(), Mode::IR);
    let reports: Vec<LockReport<4>> = (0..3)
        .map(|i| c.site(NodeId(i)).report(L).unwrap())
        .collect();
    let members = [true, true, true, false];
    let plan: Plan<4> = rebuild(1, &members, &reports).unwrap();
    for i in 0..3 {
        let mut out: Outputs<Stamped<Msg<4>>, 16> = heapless::Vec::new();
        c.site_mut(NodeId(i))
            .install(1, core::slice::from_ref(&plan), &mut out)
            .unwrap();
    }
    let n1 = c.site(NodeId(1)).site().lock(L).unwrap();
    assert_eq!((n1.kept(), n1.owned()), (Mode::Phi, Mode::Phi));
    assert!(c
        .site(NodeId(0))
        .site()
        .lock(L)
        .unwrap()
        .children()
        .next()
        .is_none());
}

/// Only the thesis's rule is eager: saved configurations leave the release rule out then
/// (`skip_serializing_if = "ReleaseRule::is_eager"`), and write the others.
#[test]
fn only_the_thesis_release_rule_is_eager() {
    assert!(ReleaseRule::Eager.is_eager());
    assert!(ReleaseRule::default().is_eager());
    assert!(!ReleaseRule::KeepIntention.is_eager());
    assert!(!ReleaseRule::KeepWithoutGiveBack.is_eager());
}

/// A token that reaches a keeper makes it the token node, which keeps no intention mode
/// (P3 restated for kept modes, `LockNode::kept_invariant`: a kept mode lives only at a
/// non-token node). A token can reach a node whose request is no longer pending — a stale
/// token (Rule 8, the PIP reissue leaves an older copy of a request behind) — and the node
/// keeps it; here node 1 keeps IR when a token for an older request of its arrives.
#[test]
fn a_token_reaching_a_keeper_drops_the_kept_mode() {
    // A genuine Token from node 0 to node 1, for a W request of node 1.
    let mut w = star(ReleaseRule::KeepIntention);
    let step = w
        .input(
            NodeId(1),
            Input::Acquire {
                lock: L,
                mode: Mode::W,
            },
        )
        .unwrap();
    let Some(Output::Send { msg: request, .. }) = step.outputs.first().cloned() else {
        panic!("node 1's W request was not sent: {:?}", step.outputs);
    };
    let mut root = w.site(NodeId(0)).clone();
    let mut out: Outputs<Msg<4>, 16> = Outputs::new();
    root.step(
        Input::Deliver {
            from: NodeId(1),
            msg: &request,
        },
        &mut out,
    )
    .unwrap();
    let token = out
        .iter()
        .find_map(|o| match o {
            Output::Send { msg, .. } if msg.kind() == MsgKind::Token => Some(msg.clone()),
            _ => None,
        })
        .expect("node 0 transfers the token for W (Rule 3.2)");

    let mut c = star(ReleaseRule::KeepIntention);
    copy_then_release(&mut c, 1, Mode::IR);
    assert_eq!(node(&c, 1).kept(), Mode::IR);
    let mut keeper = c.site(NodeId(1)).clone();
    out.clear();
    keeper
        .step(
            Input::Deliver {
                from: NodeId(0),
                msg: &token,
            },
            &mut out,
        )
        .unwrap();
    let n = keeper.lock(L).unwrap();
    assert!(n.has_token(), "a stale token is kept");
    assert_eq!(
        n.kept(),
        Mode::Phi,
        "the token node keeps no intention mode"
    );
    assert!(n.kept_invariant());
    assert_eq!(n.owned(), Mode::Phi);
}

/// `Acquire` of `mode` on the lock.
fn acquire(mode: Mode) -> Input<'static, Msg<4>> {
    Input::Acquire { lock: L, mode }
}

/// A chain of four, 0 ← 1 ← 2 (node 3 idle under 0), token at 0.
fn chain(release: ReleaseRule) -> Cluster<S> {
    let v = Variant {
        release,
        ..Variant::HILOCK
    };
    Cluster::new(
        (0..4u16)
            .map(|i| {
                let parent = match i {
                    0 => None,
                    2 => Some(NodeId(1)),
                    _ => Some(NodeId(0)),
                };
                S::with_parents(NodeId(i), |_| parent)
                    .unwrap()
                    .with_variant(v)
            })
            .collect(),
    )
}

/// Delivers the oldest message on `from → to`; returns the kinds of the messages sent.
fn deliver(c: &mut Cluster<S>, from: u16, to: u16) -> Vec<MsgKind> {
    let (_, r) = c.deliver(NodeId(from), NodeId(to)).unwrap();
    c.check_safety().unwrap();
    r.unwrap()
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send { msg, .. } => Some(msg.kind()),
            _ => None,
        })
        .collect()
}

/// Runs `input` at `at` without delivering anything; whether `at` was granted.
fn step(c: &mut Cluster<S>, at: u16, input: Input<'_, Msg<4>>) -> bool {
    let s = c.input(NodeId(at), input).unwrap();
    c.check_safety().unwrap();
    s.outputs
        .iter()
        .any(|o| matches!(o, Output::Granted { .. }))
}

/// The chain 0 ← 1 ← 2 with 0 holding IW and 1 keeping IW (a copy taken and released);
/// then 2 asks for R, which goes to 1.
fn keeper_with_r_below() -> Cluster<S> {
    let mut c = chain(ReleaseRule::KeepIntention);
    run(&mut c, 0, acquire(Mode::IW));
    run(&mut c, 1, acquire(Mode::IW));
    run(&mut c, 1, Input::Release { lock: L });
    assert_eq!(node(&c, 1).kept(), Mode::IW);
    assert!(!step(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::R
        }
    ));
    c
}

/// FIFO for kept modes (`LockNode::pass_on`, Rule 4.1 F under `KeepIntention`): a keeper
/// that passes on a request conflicting with its kept mode gives the mode back first — its
/// `Release` goes ahead of the request — so its next IW is a request (Rule 2) that waits
/// at the token node behind the R (Rule 4.2, IW frozen by Table 2.4) instead of a local
/// grant that overtakes it while the token node's `Freeze` is on its way (P6, the model's
/// "keep chain3: IW, IW twice, R"). Without the rule node 1 keeps IW, passes R on and
/// re-enters at once.
#[test]
fn a_keeper_gives_back_before_passing_on_a_conflicting_request() {
    use MsgKind::*;
    let mut c = keeper_with_r_below();
    assert_eq!(deliver(&mut c, 2, 1), vec![Release, Request]);
    assert_eq!(
        (node(&c, 1).kept(), node(&c, 1).owned()),
        (Mode::Phi, Mode::Phi)
    );
    assert!(
        !step(&mut c, 1, acquire(Mode::IW)),
        "no Rule 2 grant after R passed"
    );
    // At the token node: the release, then R (queued behind 0's IW, IW frozen), then the
    // IW of node 1 (frozen: queued behind R). No freeze is sent: 1's record is Φ.
    assert_eq!(deliver(&mut c, 1, 0), Vec::<MsgKind>::new());
    assert_eq!(deliver(&mut c, 1, 0), Vec::<MsgKind>::new());
    assert_eq!(deliver(&mut c, 1, 0), Vec::<MsgKind>::new());
    let queued: Vec<(u16, Mode)> = node(&c, 0)
        .queue()
        .iter()
        .map(|e| (e.requester.0, e.mode))
        .collect();
    assert_eq!(queued, vec![(2, Mode::R), (1, Mode::IW)]);
    // 0 releases: R is served first, then (after 2 releases) the IW of node 1.
    run(&mut c, 0, Input::Release { lock: L });
    assert_eq!(node(&c, 2).held(), Mode::R);
    assert_eq!(node(&c, 1).held(), Mode::Phi);
    run(&mut c, 2, Input::Release { lock: L });
    assert_eq!(node(&c, 1).held(), Mode::IW);
}

/// The same rule for a node that still holds IW when the R passes through it: it passes R
/// on (its owned IW keeps the request on the parent link) and remembers that IW may not
/// be kept (`passed`), so its release is the eager `Release(Φ)` and its next IW a request
/// — not a Rule 2 re-entry ahead of R. Without the rule it would keep IW and re-enter.
#[test]
fn a_holder_that_passed_on_a_conflicting_request_does_not_keep() {
    use MsgKind::*;
    let mut c = chain(ReleaseRule::KeepIntention);
    run(&mut c, 0, acquire(Mode::IW));
    run(&mut c, 1, acquire(Mode::IW));
    assert_eq!(node(&c, 1).held(), Mode::IW);
    step(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::R,
        },
    );
    assert_eq!(deliver(&mut c, 2, 1), vec![Request]);
    assert_eq!(node(&c, 1).passed(), ModeSet::of(&[Mode::IW]));
    let (k, _) = run(&mut c, 1, Input::Release { lock: L });
    assert!(k.contains(&Release), "{k:?}");
    assert_eq!(
        (node(&c, 1).kept(), node(&c, 1).owned()),
        (Mode::Phi, Mode::Phi)
    );
    assert!(
        node(&c, 1).passed().is_empty(),
        "emptied with the owned mode"
    );
    assert!(
        !step(&mut c, 1, acquire(Mode::IW)),
        "a request, not a Rule 2 grant"
    );
}

/// Passing on a request that conflicts with no intention mode it keeps (an IW past a
/// kept IR) changes nothing: the keeper keeps IR and re-enters by Rule 2.
#[test]
fn a_compatible_request_passing_by_leaves_the_kept_mode() {
    use MsgKind::*;
    let mut c = chain(ReleaseRule::KeepIntention);
    run(&mut c, 0, acquire(Mode::IR));
    run(&mut c, 1, acquire(Mode::IR));
    run(&mut c, 1, Input::Release { lock: L });
    step(
        &mut c,
        2,
        Input::Acquire {
            lock: L,
            mode: Mode::IW,
        },
    );
    assert_eq!(deliver(&mut c, 2, 1), vec![Request]);
    assert_eq!(node(&c, 1).kept(), Mode::IR);
    assert!(node(&c, 1).passed().is_empty());
    assert!(
        step(&mut c, 1, acquire(Mode::IR)),
        "Rule 2 under the kept IR"
    );
}
