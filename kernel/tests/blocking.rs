//! hilock's blocking notification (`spec/SPEC.md` 1.16, the DLM's blocking AST): a holder
//! is told (`Output::Blocking { lock, mode, prio }`) that a request for a conflicting mode
//! waits — at the token node when it queues the request (Rule 4.2), at a copy holder when
//! the freeze the request causes arrives (Rule 6, Table 2.4; the freeze names the waiting
//! modes) — at most once per waiting mode per hold. Every step runs in the one harness with
//! every safety property checked after it (P17, every notification names a waiter that
//! exists, once per hold, among them).

use hilock_kernel::{Input, Mode, Msg, NodeId, Output, Rule};

use crate::star;
use star::*;

/// The blocking notifications in `log`: (node told, waiting mode, priority).
fn told(log: &Log) -> Vec<(u16, Mode, u8)> {
    log.iter()
        .filter_map(|(at, o)| match o {
            Output::Blocking { mode, prio, .. } => Some((*at, *mode, *prio)),
            _ => None,
        })
        .collect()
}

/// Rule 4.2 at the token node: node 0 holds W; node 1's R request is queued and node 0 is
/// told once; node 2's R request (the same waiting mode) tells it nothing more; node 3's
/// IW request (another mode) tells it again.
#[test]
fn rule_4_2_the_token_holder_is_told_once_per_waiting_mode() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    let log = acquire(&mut c, 1, Mode::R);
    assert_eq!(told(&log), vec![(0, Mode::R, 0)], "{log:?}");
    let log = acquire(&mut c, 2, Mode::R);
    assert_eq!(told(&log), vec![], "{log:?}");
    let log = acquire(&mut c, 3, Mode::IW);
    assert_eq!(told(&log), vec![(0, Mode::IW, 0)], "{log:?}");
    assert!(c.site(NodeId(0)).lock(L).unwrap().told().contains(Mode::IW));
}

/// Rule 6, Table 2.4 at a copy holder: node 0 (the token node) grants node 1 an R copy
/// and releases its own R; node 2's W request is queued at node 0, whose freeze of IR
/// and R to node 1 names the waiting W; node 1 is told, node 0 (which holds nothing) is not.
#[test]
fn rule_6_a_copy_holder_is_told_by_the_freeze_that_names_the_waiter() {
    let mut c = star();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::R);
    assert!(!c.site(NodeId(1)).lock(L).unwrap().has_token());
    release(&mut c, 0);
    let log = acquire(&mut c, 2, Mode::W);
    assert!(log.iter().any(|(at, o)| *at == 0
        && matches!(o, Output::Send { msg: Msg::Freeze { waiting, .. }, .. } if waiting.modes().contains(Mode::W))));
    assert_eq!(told(&log), vec![(1, Mode::W, 0)], "{log:?}");
    let log = release(&mut c, 1);
    assert!(
        log.iter()
            .any(|(at, o)| *at == 2 && matches!(o, Output::Granted { .. })),
        "{log:?}"
    );
}

/// Rule 7 and Table 2.4: node 0 holds U and node 1 an R copy; node 0's upgrade waits for
/// node 1 and the freeze it sends names W, so node 1 is told that W waits.
#[test]
fn rule_7_a_waiting_upgrade_tells_the_copy_holders() {
    let mut c = star();
    acquire(&mut c, 0, Mode::U);
    acquire(&mut c, 1, Mode::R);
    let log = run(&mut c, 0, Input::Upgrade { lock: L });
    assert_eq!(told(&log), vec![(1, Mode::W, 0)], "{log:?}");
}

/// Nobody conflicts: node 0 holds R, nodes 1 and 2 are granted R and IR copies, node 3
/// U; no one is told anything.
#[test]
fn compatible_requests_tell_no_holder() {
    let mut c = star();
    let mut log = acquire(&mut c, 0, Mode::R);
    log.extend(acquire(&mut c, 1, Mode::R));
    log.extend(acquire(&mut c, 2, Mode::IR));
    log.extend(acquire(&mut c, 3, Mode::U));
    assert_eq!(told(&log), vec![], "{log:?}");
    assert!(!c.rules_fired().contains(Rule::Blocking));
}

/// Re-armed when the hold ends: node 0 holds W and is told R waits; it releases, node 1
/// is granted R; node 0 holds W again once node 1 releases, and node 2's R request tells
/// node 0's new hold again.
#[test]
fn a_new_hold_is_told_again() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    assert_eq!(told(&acquire(&mut c, 1, Mode::R)), vec![(0, Mode::R, 0)]);
    release(&mut c, 0);
    assert!(c.site(NodeId(0)).lock(L).unwrap().told().is_empty());
    let log = acquire(&mut c, 0, Mode::W);
    assert_eq!(told(&log), vec![(1, Mode::W, 0)], "{log:?}");
    release(&mut c, 1);
    assert_eq!(c.site(NodeId(0)).lock(L).unwrap().held(), Mode::W);
    let log = acquire(&mut c, 2, Mode::R);
    assert_eq!(told(&log), vec![(0, Mode::R, 0)], "{log:?}");
}

/// The priority named is the waiting request's (Rule 6_PRIO's thresholds): node 1 at
/// priority 3 asks for R while node 0 holds W.
#[test]
fn the_notification_names_the_waiting_priority() {
    let mut c = star();
    acquire(&mut c, 0, Mode::W);
    run(&mut c, 1, Input::SetPriority { base: 3 });
    let log = acquire(&mut c, 1, Mode::R);
    assert_eq!(told(&log), vec![(0, Mode::R, 3)], "{log:?}");
}
