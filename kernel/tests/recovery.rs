//! The kernel part of recovery (`kernel/src/token/recovery.rs`; `spec/SPEC.md` 1.8, and
//! `docs/faults.md`, "The recovery mechanism (kernel and model)"), line by line: each test
//! asserts what a line of the module exists for: the error texts, the rebuild's conflict
//! check (a holder is not compared with itself), its tolerance of a pending request naming
//! an unknown node, the highest priority of a reissued request, the install's output bound
//! and its validation of a plan, the root's copyset built from the other members' holds,
//! the per-peer links forgotten at a new epoch, the `Protocol` view (`held`, `has_token`,
//! `is_pending`) of a `FaultSite`, and the default of a saved `RecoveryVariant`. (Written
//! for the mutants of the module that its unit tests missed: `docs/verification.md`,
//! "Mutation testing".)

use hilock_kernel::token::recovery::{
    rebuild, Epoch, FaultSite, LockReport, Plan, RecoveryError, RecoveryVariant, Stamped,
};
use hilock_kernel::{
    Input, LockId, Mode, Msg, NodeId, Output, Peer, Pending, Protocol, QueueEntry, Site,
};

type FS = FaultSite<4, 1, 4>;
type Out = heapless::Vec<Output<Stamped<Msg<4>>>, 64>;
const L0: LockId = LockId(0);

fn site(i: u16) -> FS {
    FS::new(Site::new(NodeId(i), NodeId(0)).unwrap())
}

fn entry(r: u16, mode: Mode, serial: u32, prio: u8) -> QueueEntry {
    QueueEntry {
        requester: NodeId(r),
        mode,
        serial,
        prio,
    }
}

/// An empty report of lock `lock` by `node` at `epoch`.
fn report(node: u16, epoch: Epoch, lock: LockId) -> LockReport<4> {
    LockReport::empty(NodeId(node), epoch, lock)
}

/// Runs one input at `s` and returns its outputs.
fn step(s: &mut FS, input: Input<'_, Stamped<Msg<4>>>) -> Out {
    let mut out = Out::new();
    s.step(input, &mut out).unwrap();
    out
}

fn acquire(mode: Mode) -> Input<'static, Stamped<Msg<4>>> {
    Input::Acquire { lock: L0, mode }
}

/// The plan of epoch 1 for members n0 and n1, nobody holding or waiting (n0 is the root).
fn plain_plan() -> Plan<4> {
    let members = [true, true, false, false];
    rebuild::<4, 4>(1, &members, &[report(0, 0, L0), report(1, 0, L0)]).unwrap()
}

/// Every recovery error says what went wrong (the runtime logs and returns these texts):
/// no text is empty and no two are the same.
#[test]
fn recovery_errors_have_distinct_texts() {
    let all = [
        RecoveryError::UnknownLock(LockId(3)),
        RecoveryError::UnknownNode(NodeId(7)),
        RecoveryError::NotMember(NodeId(1)),
        RecoveryError::Expired(NodeId(1)),
        RecoveryError::StaleEpoch {
            plan: 1,
            current: 2,
        },
        RecoveryError::MissingReport(NodeId(2)),
        RecoveryError::DuplicateReport(NodeId(2)),
        RecoveryError::WrongLock(LockId(1)),
        RecoveryError::TwoTokens(L0),
        RecoveryError::ConflictingHolds(L0),
        RecoveryError::UpgradeWithoutToken(NodeId(3)),
        RecoveryError::BadEntry(L0),
        RecoveryError::QueueOverflow(L0),
        RecoveryError::NoMembers,
        RecoveryError::WrongPlans,
        RecoveryError::OutputsFull,
        RecoveryError::DriftTooLarge,
        RecoveryError::LeaseTooShort,
    ];
    let texts: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    for (e, t) in all.iter().zip(&texts) {
        assert!(!t.is_empty(), "{e:?} has no text");
    }
    for (i, a) in texts.iter().enumerate() {
        assert!(!texts[i + 1..].contains(a), "two errors read {a:?}");
    }
    assert_eq!(
        RecoveryError::StaleEpoch {
            plan: 1,
            current: 2
        }
        .to_string(),
        "epoch 1 is not later than epoch 2"
    );
}

/// A single holder of a self-conflicting mode (W, U) is no conflict: the check compares
/// each holder with the *other* members only.
#[test]
fn rebuild_accepts_a_single_holder_of_w_or_u() {
    let members = [true, true, false, false];
    for m in [Mode::W, Mode::U] {
        let mut r = [report(0, 0, L0), report(1, 0, L0)];
        r[0].held = m;
        r[0].token = Some(1);
        let p = rebuild::<4, 4>(1, &members, &r).unwrap();
        assert_eq!(&p.holds[..], &[(NodeId(0), m), (NodeId(1), Mode::Phi)]);
    }
}

/// A member's pending record that names a requester outside `0..N` (bad input) is dropped
/// like a dead node's request: no panic, nothing queued.
#[test]
fn rebuild_drops_a_pending_request_of_an_unknown_node() {
    let members = [true, true, true, true];
    let mut r: Vec<LockReport<4>> = (0..4).map(|i| report(i, 0, L0)).collect();
    r[0].token = Some(1);
    r[1].pending = Pending::Request(entry(4, Mode::R, 1, 0));
    let p = rebuild::<4, 4>(1, &members, &r).unwrap();
    assert!(p.queue.is_empty(), "queue {:?}", p.queue);
}

/// The same request seen twice (the token node's queue holds it at priority 1, its
/// requester's own record was reissued at priority 3 under PIP) is queued once, at the
/// higher priority.
#[test]
fn rebuild_keeps_the_raised_priority_of_a_reissued_request() {
    let members = [true, true, false, false];
    let mut r = [report(0, 0, L0), report(1, 0, L0)];
    r[0].token = Some(1);
    r[0].held = Mode::W;
    r[0].queue.push(entry(1, Mode::W, 3, 1)).unwrap();
    r[1].pending = Pending::Request(entry(1, Mode::W, 3, 3));
    let p = rebuild::<4, 4>(1, &members, &r).unwrap();
    assert_eq!(&p.queue[..], &[entry(1, Mode::W, 3, 3)]);
}

/// `install` needs room for what one step of the base protocol appends per lock and the
/// refusal of a pending try (`INSTALL_OUTPUTS = L × (Site::MAX_OUTPUTS + 1)`, here
/// 1 × 16 and 2 × 17): exactly that room is enough, one slot less is refused with the
/// site unchanged.
#[test]
fn install_needs_exactly_l_times_a_steps_outputs() {
    assert_eq!(FS::INSTALL_OUTPUTS, 16);
    assert_eq!(FaultSite::<4, 2, 4>::INSTALL_OUTPUTS, 34);
    let plan = plain_plan();
    // L = 1: 16 slots suffice, 15 do not.
    let mut s = site(1);
    let mut short: heapless::Vec<Output<Stamped<Msg<4>>>, 15> = heapless::Vec::new();
    assert_eq!(
        s.install(1, core::slice::from_ref(&plan), &mut short),
        Err(RecoveryError::OutputsFull)
    );
    assert_eq!(s, site(1));
    let mut exact: heapless::Vec<Output<Stamped<Msg<4>>>, 16> = heapless::Vec::new();
    s.install(1, core::slice::from_ref(&plan), &mut exact)
        .unwrap();
    assert_eq!(s.epoch(), 1);
    // L = 2: 33 slots are refused, 34 suffice.
    let two = |i: u16| FaultSite::<4, 2, 4>::new(Site::new(NodeId(i), NodeId(0)).unwrap());
    let members = [true, true, false, false];
    let plans: Vec<Plan<4>> = (0..2)
        .map(|l| {
            let reps = [report(0, 0, LockId(l)), report(1, 0, LockId(l))];
            rebuild::<4, 4>(1, &members, &reps).unwrap()
        })
        .collect();
    let mut s = two(1);
    let mut short: heapless::Vec<Output<Stamped<Msg<4>>>, 33> = heapless::Vec::new();
    assert_eq!(
        s.install(1, &plans, &mut short),
        Err(RecoveryError::OutputsFull)
    );
    assert_eq!(s, two(1));
    let mut exact: heapless::Vec<Output<Stamped<Msg<4>>>, 34> = heapless::Vec::new();
    s.install(1, &plans, &mut exact).unwrap();
    assert_eq!(s.epoch(), 1);
}

/// Site 1 with a try of `L0` in W pending, and the outputs so far.
fn pending_try() -> (FS, Out) {
    let mut s = site(1);
    let mut out = Out::new();
    s.step(
        Input::TryAcquire {
            lock: L0,
            mode: Mode::W,
        },
        &mut out,
    )
    .unwrap();
    assert!(matches!(
        s.site().lock(L0).unwrap().pending(),
        Pending::Try(_)
    ));
    (s, out)
}

/// `plain_plan` installed as epoch 1 at `s`: its outputs.
fn install_plain(s: &mut FS) -> heapless::Vec<Output<Stamped<Msg<4>>>, 16> {
    let mut installed = heapless::Vec::new();
    s.install(1, core::slice::from_ref(&plain_plan()), &mut installed)
        .unwrap();
    installed
}

/// A try request pending when an epoch is installed is refused (`spec/SPEC.md` 1.12): its
/// messages belong to the old epoch and the plan queues no try, so `install` answers
/// `WouldBlock` and leaves nothing pending.
#[test]
fn install_refuses_a_pending_try() {
    let (mut s, _) = pending_try();
    let installed = install_plain(&mut s);
    assert!(installed.contains(&Output::WouldBlock {
        lock: L0,
        mode: Mode::W
    }));
    assert_eq!(s.site().lock(L0).unwrap().pending(), Pending::None);
}

/// A try request cancelled (`spec/SPEC.md` 1.13) and still pending when an epoch is
/// installed ends with its epoch, silently: `install` answers no `WouldBlock` for it (the
/// user was told `Cancelled`) and leaves nothing pending.
#[test]
fn install_ends_a_cancelled_try_without_an_answer() {
    let (mut s, mut out) = pending_try();
    s.step(Input::Cancel { lock: L0 }, &mut out).unwrap();
    let installed = install_plain(&mut s);
    assert!(
        !installed
            .iter()
            .any(|o| matches!(o, Output::WouldBlock { .. })),
        "{installed:?}"
    );
    assert_eq!(s.site().lock(L0).unwrap().pending(), Pending::None);
}

/// The epoch and the recovery variant a site reports are its own.
#[test]
fn a_fault_site_reports_its_epoch_and_variant() {
    let mut s = site(1);
    assert_eq!((s.epoch(), s.recovery()), (0, RecoveryVariant::HILOCK));
    let mut out = Out::new();
    s.install(1, core::slice::from_ref(&plain_plan()), &mut out)
        .unwrap();
    assert_eq!(s.epoch(), 1);
    let off = RecoveryVariant {
        install_once: false,
        ..RecoveryVariant::HILOCK
    };
    assert_eq!(site(2).with_recovery(off).recovery(), off);
}

/// A plan whose queue names an unknown requester or asks for Φ, or whose holds name an
/// unknown node, is refused as a bad entry (each fault on its own), the site unchanged.
#[test]
fn install_refuses_each_bad_entry_of_a_plan_on_its_own() {
    let plan = plain_plan();
    let mut bad_requester = plan.clone();
    bad_requester.queue.push(entry(9, Mode::R, 1, 0)).unwrap();
    let mut phi = plan.clone();
    phi.queue.push(entry(1, Mode::Phi, 1, 0)).unwrap();
    let mut bad_hold = plan.clone();
    bad_hold.holds.push((NodeId(9), Mode::Phi)).unwrap();
    for p in [bad_requester, phi, bad_hold] {
        for me in [0, 1] {
            let mut s = site(me);
            let mut out = Out::new();
            assert_eq!(
                s.install(1, core::slice::from_ref(&p), &mut out),
                Err(RecoveryError::BadEntry(L0)),
                "plan {p:?} at n{me}"
            );
            assert_eq!((s, out.len()), (site(me), 0));
        }
    }
}

/// After a regeneration at n1, n1's copyset records the other holder (n2: R), never itself.
#[test]
fn the_new_roots_copyset_holds_the_other_members() {
    let members = [false, true, true, false];
    let mut r = [report(1, 0, L0), report(2, 0, L0)];
    r[0].held = Mode::R;
    r[1].held = Mode::R;
    let plan = rebuild::<4, 4>(1, &members, &r).unwrap();
    assert_eq!((plan.root, plan.regenerated), (NodeId(1), true));
    let mut s = site(1);
    let mut out = Out::new();
    s.install(1, core::slice::from_ref(&plan), &mut out)
        .unwrap();
    let l = s.site().lock(L0).unwrap();
    assert!(l.has_token());
    assert_eq!(l.children().collect::<Vec<_>>(), vec![(NodeId(2), Mode::R)]);
}

/// The token node n0, holding R, granted R to n1 (a child with counters); n1 dies. After
/// the install of epoch 1 with n0 and n2, n0 keeps the token and its R but no child record
/// or per-peer counter of epoch 0.
#[test]
fn an_install_forgets_the_old_epochs_links() {
    let (mut s0, mut s1) = (site(0), site(1));
    step(&mut s0, acquire(Mode::R));
    let req = step(&mut s1, acquire(Mode::R));
    let msg = req
        .iter()
        .find_map(|o| match o {
            Output::Send { to, msg } if *to == NodeId(0) => Some(msg.clone()),
            _ => None,
        })
        .unwrap();
    step(
        &mut s0,
        Input::Deliver {
            from: NodeId(1),
            msg: &msg,
        },
    );
    let l = s0.site().lock(L0).unwrap();
    assert_eq!(l.children().collect::<Vec<_>>(), vec![(NodeId(1), Mode::R)]);
    assert_ne!(l.peers()[1], Peer::default());
    let members = [true, false, true, false];
    let reports = [s0.report(L0).unwrap(), site(2).report(L0).unwrap()];
    let plan = rebuild::<4, 4>(1, &members, &reports).unwrap();
    assert_eq!((plan.root, plan.regenerated), (NodeId(0), false));
    let mut out = Out::new();
    s0.install(1, core::slice::from_ref(&plan), &mut out)
        .unwrap();
    let l = s0.site().lock(L0).unwrap();
    assert!(l.has_token());
    assert_eq!(l.children().count(), 0);
    assert_eq!((l.held(), l.owned()), (Mode::R, Mode::R));
    assert!(l.peers().iter().all(|p| *p == Peer::default()));
}

/// The harness reads a `FaultSite` through `Protocol`: the token node holding W, and a
/// node whose request is on its way.
#[test]
fn a_fault_site_answers_the_protocol_queries() {
    let (mut s0, mut s1) = (site(0), site(1));
    assert_eq!(Protocol::is_pending(&s1, L0), Ok(false));
    step(&mut s0, acquire(Mode::W));
    step(&mut s1, acquire(Mode::W));
    assert_eq!(Protocol::held(&s0, L0), Ok(Mode::W));
    assert_eq!(Protocol::has_token(&s0, L0), Ok(true));
    assert_eq!(Protocol::is_pending(&s0, L0), Ok(false));
    assert_eq!(Protocol::held(&s1, L0), Ok(Mode::Phi));
    assert_eq!(Protocol::has_token(&s1, L0), Ok(false));
    assert_eq!(Protocol::is_pending(&s1, L0), Ok(true));
}

/// A recovery variant saved before `forget_shortcuts` existed loads with that safeguard on
/// (`#[serde(default = "yes")]`), and the field is read when it is there. (The kernel's
/// `serde` feature is on in its test builds: `hilock-spec`, a dev-dependency, enables it.)
/// Kills recovery.rs `yes` → `false`.
#[test]
fn an_old_saved_recovery_variant_forgets_shortcuts() {
    use hilock_kernel::token::recovery::RecoveryVariant;
    let old = r#"{"epoch_check":true,"kill_before_regrant":true,"install_once":true}"#;
    let v: RecoveryVariant = serde_json::from_str(old).unwrap();
    assert!(v.forget_shortcuts);
    assert!(v.install_after_reports);
    let off = r#"{"epoch_check":true,"kill_before_regrant":true,"install_once":true,"forget_shortcuts":false,"install_after_reports":false}"#;
    let v: RecoveryVariant = serde_json::from_str(off).unwrap();
    assert!(!v.forget_shortcuts);
    assert!(!v.install_after_reports);
}

/// The epoch members froze for comes even when the change that started it went away (a
/// new run asked to join and died before its report): with a report of the next epoch and
/// no change, the membership as it is; no report, or the safeguard off, no epoch; a
/// change, the change (`docs/faults.md`, "Installing an epoch").
#[test]
fn an_epoch_members_froze_for_comes_without_a_change() {
    use hilock_kernel::token::recovery::{
        next_members, next_members_after_reports, Liveness, RecoveryVariant,
    };
    let h = RecoveryVariant::HILOCK;
    let current = [true, true, false];
    let same = [Liveness::Up; 3];
    assert_eq!(next_members(&current, &same, h), None);
    assert_eq!(
        next_members_after_reports(&current, &same, h, true),
        Some(current)
    );
    assert_eq!(next_members_after_reports(&current, &same, h, false), None);
    let off = RecoveryVariant {
        install_after_reports: false,
        ..h
    };
    assert_eq!(next_members_after_reports(&current, &same, off, true), None);
    let joining = [Liveness::Up, Liveness::Up, Liveness::Joining];
    assert_eq!(
        next_members_after_reports(&current, &joining, h, true),
        Some([true, true, true])
    );
    let crashed = [Liveness::Up, Liveness::Crashed, Liveness::Up];
    assert_eq!(
        next_members_after_reports(&current, &crashed, h, false),
        Some([true, false, false])
    );
}
