//! hilock's conversion in place (`spec/SPEC.md` 1.17): `Input::Convert` converts the held
//! mode to another one without releasing it, answered at once — `Converted` where the site
//! could grant the new mode as a request at once (the token node: compatible with every
//! other hold, not frozen, no conflicting request queued; a non-token node: covered by its
//! owned mode, Table 2.2, and not frozen), `ConvertBusy` with nothing changed otherwise,
//! `Downgraded` for a weaker mode. With `wait`, the token node's conversion that only
//! other holds stand in the way of waits for them (`Pending::Convert`, Rule 7's wait) and
//! is answered `Converted` when they have gone. Every step runs in the one harness with every safety
//! property checked after it (P1 mutual exclusion, P3 owned-mode invariant, P10 fencing
//! tokens, P16 value block among them).

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{FaultSite, Stamped};
use hilock_kernel::{Input, KernelError, Mode, Msg, NodeId, Output, Pending, Rule};

use crate::star;
use star::*;

/// A conversion that does not wait (`wait: false`, the DLM's `LKF_NOQUEUE`).
fn convert<M>(mode: Mode) -> Input<'static, M> {
    Input::Convert {
        lock: L,
        mode,
        wait: false,
    }
}

/// A conversion that may wait at the token node.
fn convert_waiting<M>(mode: Mode) -> Input<'static, M> {
    Input::Convert {
        lock: L,
        mode,
        wait: true,
    }
}

fn node(c: &Cluster<S>, n: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(n)).lock(L).unwrap()
}

fn granted(log: &Log, n: u16, mode: Mode) -> bool {
    log.iter()
        .any(|(at, o)| *at == n && matches!(o, Output::Granted { mode: m, .. } if *m == mode))
}

/// The conversion at `at`, refused as busy: the only output is `ConvertBusy`, the
/// `ConvertBusy` rule fired, and the site and the network are as they were.
fn busy(c: &mut Cluster<S>, at: u16, mode: Mode) {
    let before = c.clone();
    let st = c.input(NodeId(at), convert(mode)).unwrap();
    assert_eq!(st.outputs, vec![Output::ConvertBusy { lock: L, mode }]);
    assert!(st.rules.contains(Rule::ConvertBusy), "{:?}", st.rules);
    assert!(c.sites().eq(before.sites()) && c.in_flight() == before.in_flight());
}

/// The conversion at `at`, done in place: `Converted` is its only output (no message),
/// the `Convert` rule fired and the site holds `mode`.
fn converted(c: &mut Cluster<S>, at: u16, mode: Mode) {
    let st = c.input(NodeId(at), convert(mode)).unwrap();
    c.check_safety().unwrap();
    assert_eq!(st.outputs, vec![Output::Converted { lock: L, mode }]);
    assert!(st.rules.contains(Rule::Convert), "{:?}", st.rules);
    assert_eq!(node(c, at).held(), mode);
}

/// `spec/SPEC.md` 1.17 at the token node (Rule 3.2's own grant): node 0 holds R and nobody
/// else holds anything, so R → W is done in place, with a fence above the R hold's (W
/// conflicts with holds R did not); a reader then waits for the W (P1), and the W holder
/// may write the value block that the reader then reads.
#[test]
fn a_lone_token_node_converts_r_to_w_in_place_with_a_new_fence() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    let fence = node(&c, 0).fence().unwrap();
    converted(&mut c, 0, Mode::W);
    assert!(node(&c, 0).fence().unwrap() > fence);
    run(
        &mut c,
        0,
        Input::SetValue {
            lock: L,
            value: [7; hilock_kernel::VALUE_LEN],
        },
    );
    assert!(!granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    assert!(granted(&release(&mut c, 0), 1, Mode::R));
    let read = c.site(NodeId(1)).value(L).unwrap().unwrap();
    assert_eq!(read.get(), Some(&[7; hilock_kernel::VALUE_LEN]));
}

/// `spec/SPEC.md` 1.17, Table 2.1: node 0 (the token node) holds R and node 1 an R copy.
/// R → W conflicts with node 1's R and is refused, changing nothing; R → U is compatible
/// with R and is done; once node 1 has released, U → W is done in place too.
#[test]
fn a_token_node_converts_only_to_modes_compatible_with_the_other_holds() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    busy(&mut c, 0, Mode::W);
    converted(&mut c, 0, Mode::U);
    busy(&mut c, 0, Mode::W);
    release(&mut c, 1);
    converted(&mut c, 0, Mode::W);
}

/// `spec/SPEC.md` 1.17, no bypass: node 0 (the token node) holds R, node 1's W waits in
/// its queue (Rule 4.2). Nobody else holds anything, so R → W conflicts with no hold, and
/// W is not frozen (Table 2.4 freezes only the modes node 0 could grant beside its R):
/// only the waiting W stands in the way, and the conversion is refused rather than pass
/// it. Released, node 0 lets the W in.
#[test]
fn a_token_node_does_not_convert_past_a_waiting_request() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(!granted(&acquire(&mut c, 1, Mode::W), 1, Mode::W));
    assert_eq!(node(&c, 0).queue().len(), 1);
    assert!(!node(&c, 0).frozen().contains(Mode::W));
    busy(&mut c, 0, Mode::W);
    assert!(granted(&release(&mut c, 0), 1, Mode::W));
}

/// The chain 0 (token) ← 1 ← 2 where node 1 holds IR and its child node 2 an R copy that
/// node 1 granted (Rule 3.1): node 1 owns R.
fn copy_holder_owning_r() -> Cluster<S> {
    let mut c = chain();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    assert!(granted(&acquire(&mut c, 2, Mode::R), 2, Mode::R));
    release(&mut c, 0);
    run(
        &mut c,
        1,
        Input::Downgrade {
            lock: L,
            mode: Mode::IR,
        },
    );
    assert!(!node(&c, 1).has_token());
    assert_eq!(
        (node(&c, 1).held(), node(&c, 1).owned()),
        (Mode::IR, Mode::R)
    );
    c
}

/// `spec/SPEC.md` 1.17 at a non-token node (Rule 2, Table 2.2): node 1 holds IR and owns R
/// through its child, so IR → R is covered and done without a message; R → W is not
/// covered by the owned mode (it would need the token) and is refused.
#[test]
fn a_copy_holder_converts_within_its_owned_mode_without_a_message() {
    let mut c = copy_holder_owning_r();
    converted(&mut c, 1, Mode::R);
    assert_eq!(c.in_flight(), 0);
    busy(&mut c, 1, Mode::W);
    busy(&mut c, 1, Mode::U);
    // A copy holder that owns only its own IR cannot cover R either.
    release(&mut c, 2);
    run(
        &mut c,
        1,
        Input::Downgrade {
            lock: L,
            mode: Mode::IR,
        },
    );
    assert_eq!(node(&c, 1).owned(), Mode::IR);
    busy(&mut c, 1, Mode::R);
}

/// `spec/SPEC.md` 1.17 with Rule 6: node 1 holds IR and owns R (as above); node 3 asks for
/// W, which waits at the token node, and the freeze reaches node 1. R is frozen there now,
/// so IR → R is refused; the W is granted once everyone released.
#[test]
fn a_copy_holder_is_refused_a_conversion_to_a_frozen_mode() {
    let mut c = copy_holder_owning_r();
    assert!(!granted(&acquire(&mut c, 3, Mode::W), 3, Mode::W));
    assert!(node(&c, 1).frozen().contains(Mode::R), "the freeze arrived");
    busy(&mut c, 1, Mode::R);
    release(&mut c, 2);
    assert!(granted(&release(&mut c, 1), 3, Mode::W));
}

/// `spec/SPEC.md` 1.17: a weaker mode is a downgrade (1.14), answered `Downgraded`.
#[test]
fn a_conversion_to_a_weaker_mode_is_a_downgrade() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    let st = c.input(NodeId(0), convert(Mode::R)).unwrap();
    assert_eq!(
        st.outputs.first(),
        Some(&Output::Downgraded {
            lock: L,
            mode: Mode::R
        })
    );
    assert!(st.rules.contains(Rule::Downgrade));
    assert_eq!(node(&c, 0).held(), Mode::R);
}

/// `spec/SPEC.md` 1.17: every refused conversion leaves the site as it was and emits
/// nothing — nothing held (`NotHeld`), Φ (`InvalidMode`), the held mode (`AlreadyHeld`),
/// U while its upgrade waits (`UpgradePending`, Rule 7).
#[test]
fn a_conversion_refused_as_an_error_changes_nothing() {
    fn refused(c: &Cluster<S>, at: u16, mode: Mode) -> KernelError {
        let mut site = c.site(NodeId(at)).clone();
        let mut out: heapless::Vec<Output<Msg<4>>, 32> = heapless::Vec::new();
        let e = site.step(convert(mode), &mut out).unwrap_err();
        assert!(out.is_empty() && site == *c.site(NodeId(at)), "{e}");
        e
    }
    let mut c = star();
    assert_eq!(refused(&c, 1, Mode::R), KernelError::NotHeld(L));
    acquire(&mut c, 0, Mode::U);
    assert_eq!(refused(&c, 0, Mode::Phi), KernelError::InvalidMode);
    assert_eq!(refused(&c, 0, Mode::U), KernelError::AlreadyHeld(L));
    acquire(&mut c, 1, Mode::R);
    run(&mut c, 0, Input::Upgrade { lock: L });
    assert_eq!(node(&c, 0).pending(), Pending::Upgrade);
    assert_eq!(refused(&c, 0, Mode::W), KernelError::UpgradePending(L));
}

/// `FaultSite` passes a conversion to its site (the output unstamped, as every local
/// output); the Naimi-Trehel baseline refuses it with `ConvertUnsupported`.
#[test]
fn a_fault_site_converts_and_the_baseline_refuses_to() {
    use hilock_kernel::Protocol;
    let mut c = star();
    acquire(&mut c, 0, Mode::IR);
    let mut f = FaultSite::new(c.site(NodeId(0)).clone());
    let mut out: heapless::Vec<Output<Stamped<Msg<4>>>, 64> = heapless::Vec::new();
    Protocol::step(&mut f, convert(Mode::W), &mut out).unwrap();
    assert_eq!(
        out.as_slice(),
        &[Output::Converted {
            lock: L,
            mode: Mode::W
        }]
    );
    assert_eq!(f.site().lock(L).unwrap().held(), Mode::W);
    baseline_refuses(true, convert(Mode::R), KernelError::ConvertUnsupported(L));
}

/// `spec/SPEC.md` 1.17, a waiting conversion (Rule 7's wait for any mode): node 0 (the
/// token node) holds R beside node 1's R copy and converts to W with `wait`. Nothing is
/// answered yet, the conversion waits (`Pending::Convert(W)`), and what W conflicts with
/// freezes (Table 2.4): node 2's new R waits behind it instead of joining the readers.
/// Node 0 cannot release meanwhile (`UpgradePending`). When node 1 releases, node 0 is
/// converted to W with a new fence, and node 2's R comes after node 0's release.
#[test]
fn a_waiting_conversion_goes_before_a_later_reader() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    let fence = node(&c, 0).fence().unwrap();
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    let st = c.input(NodeId(0), convert_waiting(Mode::W)).unwrap();
    c.check_safety().unwrap();
    assert!(st.rules.contains(Rule::ConvertWaits), "{:?}", st.rules);
    assert!(!st
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Converted { .. } | Output::ConvertBusy { .. })));
    assert_eq!(node(&c, 0).pending(), Pending::Convert(Mode::W));
    assert!(node(&c, 0).frozen().contains(Mode::R));
    settle(&mut c);
    assert!(!granted(&acquire(&mut c, 2, Mode::R), 2, Mode::R));
    let mut site = c.site(NodeId(0)).clone();
    let mut out: heapless::Vec<Output<Msg<4>>, 32> = heapless::Vec::new();
    assert_eq!(
        site.step(Input::Release { lock: L }, &mut out),
        Err(KernelError::UpgradePending(L))
    );
    let log = release(&mut c, 1);
    assert!(
        log.contains(&(
            0,
            Output::Converted {
                lock: L,
                mode: Mode::W
            }
        )),
        "{log:?}"
    );
    assert!(!granted(&log, 2, Mode::R));
    assert_eq!(node(&c, 0).held(), Mode::W);
    assert!(node(&c, 0).fence().unwrap() > fence);
    assert!(granted(&release(&mut c, 0), 2, Mode::R));
}

/// `spec/SPEC.md` 1.17 with 1.13: a waiting conversion is withdrawn by `Cancel`. Node 0
/// keeps R, the modes frozen only for it are unfrozen, node 2's R that waited behind it
/// is granted, and no `Converted` follows when node 1 releases.
#[test]
fn a_cancelled_waiting_conversion_keeps_the_old_mode_and_lets_the_reader_in() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    run(&mut c, 0, convert_waiting(Mode::W));
    assert!(!granted(&acquire(&mut c, 2, Mode::R), 2, Mode::R));
    let log = run(&mut c, 0, Input::Cancel { lock: L });
    assert!(log.contains(&(0, Output::Cancelled { lock: L })), "{log:?}");
    assert!(granted(&log, 2, Mode::R), "{log:?}");
    assert_eq!(
        (node(&c, 0).held(), node(&c, 0).pending()),
        (Mode::R, Pending::None)
    );
    let log = release(&mut c, 1);
    assert!(!log
        .iter()
        .any(|(_, o)| matches!(o, Output::Converted { .. })));
    assert_eq!(node(&c, 0).held(), Mode::R);
}

/// `spec/SPEC.md` 1.17: a conversion waits only where nothing that already waits conflicts
/// with it, and only at the token node. Node 0 (the token node) holds R while node 1's W
/// waits in its queue: even with `wait`, R → W is refused rather than queued ahead of that
/// W. A copy holder (node 1 holding an R copy of node 0's R) has no token to wait with:
/// refused too.
#[test]
fn a_conversion_waits_neither_past_a_waiting_request_nor_at_a_copy_holder() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(!granted(&acquire(&mut c, 1, Mode::W), 1, Mode::W));
    let st = c.input(NodeId(0), convert_waiting(Mode::W)).unwrap();
    assert_eq!(
        st.outputs,
        vec![Output::ConvertBusy {
            lock: L,
            mode: Mode::W
        }]
    );
    assert_eq!(node(&c, 0).pending(), Pending::None);
    assert!(granted(&release(&mut c, 0), 1, Mode::W));
    release(&mut c, 1);
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    assert!(granted(&acquire(&mut c, 1, Mode::R), 1, Mode::R));
    let st = c.input(NodeId(1), convert_waiting(Mode::W)).unwrap();
    assert_eq!(
        st.outputs,
        vec![Output::ConvertBusy {
            lock: L,
            mode: Mode::W
        }]
    );
    assert_eq!(node(&c, 1).pending(), Pending::None);
}

/// `spec/SPEC.md` 1.17, the token stays for a waiting conversion: node 0 (the token node)
/// holds IR beside node 1's IR copy and converts to W with `wait`. Node 2, at a higher
/// priority, asks for R: it passes the conversion's freeze (Rule 6_PRIO) and R is stronger
/// than node 0's IR and compatible with it, so Rule 3.2 would send node 2 the token and
/// node 0's conversion would wait at a node that can no longer complete it. It waits
/// instead; when node 1 releases, node 0 is converted to W, and node 2 gets R after node 0
/// releases.
#[test]
fn a_waiting_conversion_keeps_the_token_from_a_higher_priority_request() {
    let mut c = star();
    acquire(&mut c, 0, Mode::IR);
    assert!(granted(&acquire(&mut c, 1, Mode::IR), 1, Mode::IR));
    run(&mut c, 0, convert_waiting(Mode::W));
    assert_eq!(node(&c, 0).pending(), Pending::Convert(Mode::W));
    run(&mut c, 2, Input::SetPriority { base: 3 });
    assert!(!granted(&acquire(&mut c, 2, Mode::R), 2, Mode::R));
    assert!(
        node(&c, 0).has_token(),
        "the token stays with the converter"
    );
    let log = release(&mut c, 1);
    assert!(
        log.contains(&(
            0,
            Output::Converted {
                lock: L,
                mode: Mode::W
            }
        )),
        "{log:?}"
    );
    assert!(granted(&release(&mut c, 0), 2, Mode::R));
}
