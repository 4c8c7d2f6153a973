//! hilock's downgrade (`spec/SPEC.md` 1.14): `Input::Downgrade` converts the held mode to a
//! weaker one in place and is answered at once with `Output::Downgraded`. The hold keeps its
//! fence; then the site does what Rule 5 does after a release: a non-token node whose owned
//! mode changed tells its parent (Rule 5.2) and the queue is served (Rule 5.1). Every step
//! runs in the one harness with every safety property checked after it (P1 mutual
//! exclusion, P3 owned-mode invariant, P10 fencing tokens among them).

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{FaultSite, Stamped};
use hilock_kernel::{Input, KernelError, Mode, Msg, NodeId, Output, Pending, Rule};

use crate::star;
use star::*;

fn downgrade<M>(mode: Mode) -> Input<'static, M> {
    Input::Downgrade { lock: L, mode }
}

/// Whether `log` has an output of node `n` matching `f`.
fn has(log: &Log, n: u16, f: impl Fn(&Output<Msg<4>>) -> bool) -> bool {
    log.iter().any(|(at, o)| *at == n && f(o))
}
fn granted(log: &Log, n: u16, mode: Mode) -> bool {
    has(
        log,
        n,
        |o| matches!(o, Output::Granted { mode: m, .. } if *m == mode),
    )
}
fn releases(log: &Log, n: u16) -> Vec<Mode> {
    log.iter()
        .filter_map(|(at, o)| match o {
            Output::Send {
                msg: Msg::Release { owned, .. },
                ..
            } if *at == n => Some(*owned),
            _ => None,
        })
        .collect()
}

/// Node 0 (the token node) holds R, node 1 gets an R copy (Rule 3.2), node 0 releases:
/// node 1 holds a copy and node 0 owns R through it.
fn copy_holder() -> Cluster<S> {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    release(&mut c, 0);
    assert!(node(&c, 0).has_token() && !node(&c, 1).has_token());
    c
}

/// Node `n`'s state of the lock.
fn node(c: &Cluster<S>, n: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(n)).lock(L).unwrap()
}

/// `spec/SPEC.md` 1.14 at the token node (Rule 5.1): node 0 holds W and two readers wait
/// in its queue (Rule 4.2). Downgraded to R, node 0 says `Downgraded` first and grants
/// both readers their copies in the same step; it still holds R with the fence of its W
/// hold, and a writer then waits for all three.
#[test]
fn a_token_node_downgrading_w_to_r_grants_the_waiting_readers_at_once() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    let fence = node(&c, 0).fence();
    assert!(!granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    assert!(!granted(&acquire(&mut c, 2, Mode::R), 2, Mode::R));
    assert_eq!(node(&c, 0).queue().len(), 2, "Rule 4.2 queues both readers");
    let st = c.input(NodeId(0), downgrade(Mode::R)).unwrap();
    c.check_safety().unwrap();
    assert!(st.rules.contains(Rule::Downgrade), "{:?}", st.rules);
    assert_eq!(
        st.outputs.first(),
        Some(&Output::Downgraded {
            lock: L,
            mode: Mode::R
        })
    );
    let grants = st
        .outputs
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Send {
                    msg: Msg::Grant { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(grants, 2, "{:?}", st.outputs);
    let log = settle(&mut c);
    assert!(
        granted(&log, 1, Mode::R) && granted(&log, 2, Mode::R),
        "{log:?}"
    );
    let n0 = node(&c, 0);
    assert_eq!((n0.held(), n0.fence()), (Mode::R, fence));
    assert!(n0.queue().is_empty());
    assert!(!granted(&acquire(&mut c, 3, Mode::W), 3, Mode::W));
    release(&mut c, 1);
    release(&mut c, 2);
    assert!(granted(&release(&mut c, 0), 3, Mode::W));
}

/// `spec/SPEC.md` 1.14 at a copy holder (Rule 5.2): node 1 holds an R copy, so node 2's
/// IW request waits at the token node (Table 2.1: R conflicts with IW). Node 1 downgrades
/// to IR: it tells its parent its new owned mode (`Release { owned: IR }`), node 0's record
/// of it drops to IR and node 2 is granted IW while node 1 still holds IR.
#[test]
fn a_copy_holder_downgrading_r_to_ir_tells_its_parent_and_the_waiting_iw_is_granted() {
    let mut c = copy_holder();
    assert!(!granted(&acquire(&mut c, 2, Mode::IW), 2, Mode::IW));
    let st = step(&mut c, 1, downgrade(Mode::IR));
    assert_eq!(
        st.first(),
        Some(&(
            1,
            Output::Downgraded {
                lock: L,
                mode: Mode::IR
            }
        ))
    );
    assert_eq!(releases(&st, 1), vec![Mode::IR], "{st:?}");
    let log = settle(&mut c);
    assert!(granted(&log, 2, Mode::IW), "{log:?}");
    assert_eq!(node(&c, 1).held(), Mode::IR);
    assert_eq!(node(&c, 0).peers()[1].child_owned, Mode::IR);
    release(&mut c, 1);
    release(&mut c, 2);
    assert!(granted(&acquire(&mut c, 3, Mode::W), 3, Mode::W));
}

/// `spec/SPEC.md` 1.14, Rule 5.2 ("whose owned mode changed"): in the chain 0 ← 1 ← 2,
/// node 0 holds R, node 1 an R copy of it, and node 1 has granted node 2 an R copy (Rule
/// 3.1). Downgraded to IR, node 1 still owns R through node 2, so no release goes to node
/// 0; when node 2 releases, node 1 tells node 0 it owns IR.
#[test]
fn a_holder_whose_child_still_owns_its_mode_sends_no_release_on_downgrade() {
    let mut c = chain();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    assert!(!node(&c, 1).has_token());
    let log = acquire(&mut c, 2, Mode::R);
    assert!(granted(&log, 2, Mode::R), "{log:?}");
    assert_eq!(node(&c, 1).peers()[2].child_owned, Mode::R);
    let log = run(&mut c, 1, downgrade(Mode::IR));
    assert!(releases(&log, 1).is_empty(), "{log:?}");
    assert_eq!(
        (node(&c, 1).held(), node(&c, 1).owned()),
        (Mode::IR, Mode::R)
    );
    let log = release(&mut c, 2);
    assert_eq!(releases(&log, 1), vec![Mode::IR], "{log:?}");
    assert_eq!(node(&c, 0).peers()[1].child_owned, Mode::IR);
}

/// `spec/SPEC.md` 1.14: W → U at the token node (a W holder always is the token node, so U
/// stays where Rule 7 needs it): the hold keeps its fence, a reader is then granted its
/// copy (U is compatible with R), and the U holder can upgrade again once the reader is
/// gone (Rule 7).
#[test]
fn a_w_holder_downgrades_to_u_keeps_its_fence_and_may_upgrade_again() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    let fence = node(&c, 0).fence();
    assert!(!granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    let log = run(&mut c, 0, downgrade(Mode::U));
    assert!(granted(&log, 1, Mode::R), "{log:?}");
    assert_eq!((node(&c, 0).held(), node(&c, 0).fence()), (Mode::U, fence));
    let log = run(&mut c, 0, Input::Upgrade { lock: L });
    assert!(!has(&log, 0, |o| matches!(o, Output::Upgraded { .. })));
    let log = release(&mut c, 1);
    assert!(
        has(&log, 0, |o| matches!(o, Output::Upgraded { .. })),
        "{log:?}"
    );
    assert_eq!(node(&c, 0).held(), Mode::W);
}

/// `spec/SPEC.md` 1.14: every refused downgrade leaves the site and the network as they
/// were and emits nothing — nothing held (`NotHeld`), Φ (`InvalidMode`), a mode that is
/// not weaker (`NotWeaker`: the same mode, a stronger one, IW → R and U → IW, whose new
/// mode conflicts with modes the old one did not) and U while its upgrade waits
/// (`UpgradePending`, Rule 7).
#[test]
fn a_refused_downgrade_changes_nothing() {
    fn refused(c: &Cluster<S>, at: u16, mode: Mode) -> KernelError {
        let mut site = c.site(NodeId(at)).clone();
        let mut out: heapless::Vec<Output<Msg<4>>, 32> = heapless::Vec::new();
        let e = site.step(downgrade(mode), &mut out).unwrap_err();
        assert!(out.is_empty() && site == *c.site(NodeId(at)), "{e}");
        e
    }
    let mut c = star();
    assert_eq!(refused(&c, 1, Mode::IR), KernelError::NotHeld(L));
    acquire(&mut c, 1, Mode::R);
    assert_eq!(refused(&c, 1, Mode::Phi), KernelError::InvalidMode);
    for m in [Mode::R, Mode::U, Mode::IW, Mode::W] {
        assert_eq!(refused(&c, 1, m), KernelError::NotWeaker(L), "R -> {m}");
    }
    release(&mut c, 1);
    acquire(&mut c, 2, Mode::IW);
    assert_eq!(
        refused(&c, 2, Mode::R),
        KernelError::NotWeaker(L),
        "IW -> R"
    );
    release(&mut c, 2);
    acquire(&mut c, 0, Mode::U);
    assert_eq!(
        refused(&c, 0, Mode::IW),
        KernelError::NotWeaker(L),
        "U -> IW"
    );
    acquire(&mut c, 1, Mode::R);
    run(&mut c, 0, Input::Upgrade { lock: L });
    assert_eq!(node(&c, 0).pending(), Pending::Upgrade);
    assert_eq!(refused(&c, 0, Mode::R), KernelError::UpgradePending(L));
    // The harness refuses the input the same way, leaving the cluster unchanged.
    let before = c.clone();
    assert!(c.input(NodeId(0), downgrade(Mode::R)).is_err());
    assert!(c.sites().eq(before.sites()) && c.in_flight() == before.in_flight());
}

/// `FaultSite` accepts a downgrade like its site (the output and the Rule 5.2 release
/// stamped with its epoch); the Naimi-Trehel baseline refuses it with
/// `DowngradeUnsupported`, changing nothing.
#[test]
fn a_fault_site_downgrades_and_the_baseline_refuses_to() {
    use hilock_kernel::Protocol;
    let c = copy_holder();
    let mut f = FaultSite::new(c.site(NodeId(1)).clone());
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    Protocol::step(&mut f, downgrade(Mode::IR), &mut out).unwrap();
    assert_eq!(
        out.first(),
        Some(&Output::Downgraded {
            lock: L,
            mode: Mode::IR
        })
    );
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Send {
            to: NodeId(0),
            msg: Stamped {
                msg: Msg::Release {
                    owned: Mode::IR,
                    ..
                },
                ..
            }
        }
    )));
    assert_eq!(f.site().lock(L).unwrap().held(), Mode::IR);
    baseline_refuses(
        true,
        downgrade(Mode::R),
        KernelError::DowngradeUnsupported(L),
    );
}

/// `spec/SPEC.md` 1.14 with 1.7: under `ReleaseRule::KeepIntention` a copy holder that
/// downgrades R → IR still tells its parent at once (the rule keeps an intention mode
/// only once nothing is held), so the IW waiting at the token node is granted.
#[test]
fn keep_intention_still_sends_the_release_of_a_downgrade() {
    use hilock_kernel::{ReleaseRule, Variant};
    let v = Variant {
        release: ReleaseRule::KeepIntention,
        ..Variant::HILOCK
    };
    let mut c = Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap().with_variant(v))
            .collect(),
    );
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    release(&mut c, 0);
    assert!(!granted(&acquire(&mut c, 2, Mode::IW), 2, Mode::IW));
    let st = step(&mut c, 1, downgrade(Mode::IR));
    assert_eq!(releases(&st, 1), vec![Mode::IR], "{st:?}");
    assert!(granted(&settle(&mut c), 2, Mode::IW));
}
