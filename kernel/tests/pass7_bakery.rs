//! Checks for the mutants of the bakery group (`kernel/src/bakery/`) that cargo-mutants'
//! pass 7 missed with the bakery fast pass (the kernel's unit tests and `verify --test
//! bakery`; spec/MUTANTS.md, "Pass 7, bakery"). The comment above each test names the
//! mutants it kills.

use hilock_kernel::bakery::{BakeryError, ClientId, Phase, ReplicaId, Row, Ticket};

/// `Display for ReplicaId` → `Ok(Default::default())`: replicas print as `r<index>`, the
/// name the error texts use.
#[test]
fn replica_ids_display_as_r() {
    assert_eq!(ReplicaId(2).to_string(), "r2");
    assert_eq!(
        BakeryError::UnknownReplica(ReplicaId(4)).to_string(),
        "unknown replica r4"
    );
}

/// `Ticket::as_u64` → 0, 1, and `(number << 16) | id` with `|` → `&`, `^`, `<<` → `>>`:
/// the fencing token is `number · 2¹⁶ + id`, increasing in the ticket order.
#[test]
fn a_ticket_as_one_integer_is_number_then_id() {
    let t = |number: u32, id: u16| Ticket {
        number,
        id: ClientId(id),
    };
    assert_eq!(t(3, 5).as_u64(), 3 * 65_536 + 5);
    assert_eq!(t(0, 7).as_u64(), 7);
    assert_eq!(t(u32::MAX, u16::MAX).as_u64(), (1 << 48) - 1);
    let mut all = [t(2, 1), t(1, 9), t(1, 2), t(0, 3), t(7, 0)];
    all.sort();
    for w in all.windows(2) {
        assert!(w[0].as_u64() < w[1].as_u64(), "{:?} {:?}", w[0], w[1]);
    }
}

/// `Display for BakeryError` → `Ok(Default::default())`: every refusal has its own text.
#[test]
fn bakery_errors_have_distinct_texts() {
    let all = [
        BakeryError::UnknownReplica(ReplicaId(3)),
        BakeryError::UnknownClient(ClientId(9)),
        BakeryError::UnknownRow(Row(2)),
        BakeryError::BadQuorum,
        BakeryError::WeakQuorum,
        BakeryError::BadLease,
        BakeryError::NotIdle,
        BakeryError::NotHeld,
        BakeryError::WrongProgram,
        BakeryError::BadReply,
        BakeryError::BadRenaming,
        BakeryError::OutputsFull,
    ];
    let texts: Vec<String> = all.iter().map(ToString::to_string).collect();
    for (i, a) in texts.iter().enumerate() {
        assert!(!a.is_empty(), "{:?}", all[i]);
        for b in &texts[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(all[1].to_string(), "unknown client 9");
    assert_eq!(all[2].to_string(), "unknown row 2");
    assert_eq!(all[4].to_string(), "R + W must exceed N");
}

/// `Phase::waiting` → `true`, `false` (and the other three predicates): which phases are
/// the waiting loops (lines 9–16 and the queue's scan), which sleep, which hold entries
/// under the lease and which have the own number written.
#[test]
fn phase_predicates_name_the_loops_sleeps_and_leased_phases() {
    use Phase::*;
    // (phase, sleeping, waiting, leased, numbered)
    let table = [
        (Idle, false, false, false, false),
        (Scan, false, true, false, false),
        (ScanSleep, true, true, false, false),
        (Choose, false, false, true, false),
        (ReadMax, false, false, true, false),
        (TakeNumber, false, false, true, false),
        (Unchoose, false, false, true, true),
        (ReadChoosing, false, false, true, true),
        (ReadNumbers, false, false, true, true),
        (
            WaitChoosing {
                id: 2,
                reading: false,
            },
            true,
            true,
            true,
            true,
        ),
        (
            WaitChoosing {
                id: 2,
                reading: true,
            },
            false,
            true,
            true,
            true,
        ),
        (RereadNumbers { id: 2 }, false, false, true, true),
        (
            WaitNumber {
                id: 2,
                reading: false,
            },
            true,
            true,
            true,
            true,
        ),
        (
            WaitNumber {
                id: 2,
                reading: true,
            },
            false,
            true,
            true,
            true,
        ),
        (GiveUp, false, false, false, false),
        (ReadDetails, false, false, true, true),
        (Held, false, false, true, true),
        (Exit, false, false, false, false),
        (Remove { step: 1 }, false, false, false, false),
    ];
    for (p, sleeping, waiting, leased, numbered) in table {
        assert_eq!(
            (p.sleeping(), p.waiting(), p.leased(), p.numbered()),
            (sleeping, waiting, leased, numbered),
            "{p:?}"
        );
    }
}
