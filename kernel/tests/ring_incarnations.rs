//! Incarnations of one client id on hilock's ring server (`RingServer::step`,
//! "Incarnations"; `spec/SPEC.md` 4.1, row "hilock: one holder per incarnation"): a key's
//! holder is a client id and the incarnation its process drew ([`Holder`]). A lock of a
//! key held by another incarnation of the same id is answered `InUse` and writes nothing;
//! only that incarnation's unlock frees the key; `Op::TakeOver` (the run that replaces a
//! killed one) takes the hold over. Before, a lock of the holder's id was a re-grant to the
//! holder, and two processes given one id both held the key.

use hilock_kernel::ring::{Addr, Answer, ChordMsg, ClientId, Holder, NodeId, Op, Out, Rule, View};

use crate::ring_one;
use ring_one::*;

fn server() -> S {
    alone()
}

fn holder(client: u8, incarnation: u64) -> Holder {
    Holder {
        client: ClientId(client),
        incarnation,
    }
}

/// Incarnation 7 of client 1 holds key 10; incarnation 9 of client 1 (a second process
/// given id 1) asks for it: `InUse`, and the table is as it was. Its unlock is answered
/// Released and frees nothing; its lock is `InUse` again, under any request number. Once
/// incarnation 7 unlocks, incarnation 9 is granted the key.
#[test]
fn a_lock_of_a_key_another_incarnation_holds_is_in_use_and_writes_nothing() {
    let mut s = server();
    assert_eq!(ask(&mut s, token(1, 7, 5), Op::Lock).1, Answer::Granted);
    assert_eq!(s.holding(K), Some(holder(1, 7)));
    let before = s.slots().to_vec();
    let (rep, a) = ask(&mut s, token(1, 9, 1), Op::Lock);
    assert_eq!(a, Answer::InUse);
    assert!(
        rep.contains(Rule::IdInUse) && !rep.contains(Rule::WriteStarted),
        "{rep:?}"
    );
    assert_eq!(s.slots(), &before[..], "nothing written");
    let (rep, a) = ask(&mut s, token(1, 9, 2), Op::Unlock);
    assert_eq!(a, Answer::Released);
    assert!(rep.contains(Rule::Idempotent), "{rep:?}");
    assert_eq!(s.holding(K), Some(holder(1, 7)), "not freed");
    for seq in [3, 100] {
        assert_eq!(ask(&mut s, token(1, 9, seq), Op::Lock).1, Answer::InUse);
    }
    // The holder's own requests keep their behaviour: a re-grant, then the unlock.
    let (rep, a) = ask(&mut s, token(1, 7, 6), Op::Lock);
    assert_eq!(a, Answer::Granted);
    assert!(rep.contains(Rule::Idempotent), "{rep:?}");
    assert_eq!(ask(&mut s, token(1, 7, 7), Op::Unlock).1, Answer::Released);
    assert_eq!(s.holding(K), None);
    assert_eq!(ask(&mut s, token(1, 9, 101), Op::Lock).1, Answer::Granted);
    assert_eq!(s.holding(K), Some(holder(1, 9)));
}

/// A take-over (`Op::TakeOver`) of incarnation 9 takes key 10 from incarnation 7 of the
/// same id: the entry names incarnation 9, and incarnation 7's later requests are another
/// incarnation's (its lock `InUse`, its unlock frees nothing). A take-over does not take a
/// key another client id holds (Refused), and on a free key it is a lock.
#[test]
fn a_take_over_moves_the_hold_to_the_new_incarnation_of_the_id_only() {
    let mut s = server();
    assert_eq!(ask(&mut s, token(1, 7, 5), Op::Lock).1, Answer::Granted);
    assert_eq!(ask(&mut s, token(2, 0, 1), Op::TakeOver).1, Answer::Refused);
    let (rep, a) = ask(&mut s, token(1, 9, 1), Op::TakeOver);
    assert_eq!(a, Answer::Granted);
    assert!(
        rep.contains(Rule::TakenOver) && rep.contains(Rule::WriteStarted),
        "{rep:?}"
    );
    assert_eq!(s.holding(K), Some(holder(1, 9)));
    assert_eq!(s.slots()[0].writer, Some(token(1, 9, 1)));
    assert_eq!(ask(&mut s, token(1, 7, 6), Op::Unlock).1, Answer::Released);
    assert_eq!(
        s.holding(K),
        Some(holder(1, 9)),
        "the old run frees nothing"
    );
    assert_eq!(ask(&mut s, token(1, 7, 7), Op::Lock).1, Answer::InUse);
    // A repeated take-over of the holder is a re-grant.
    let (rep, a) = ask(&mut s, token(1, 9, 2), Op::TakeOver);
    assert_eq!(a, Answer::Granted);
    assert!(
        rep.contains(Rule::Idempotent) && !rep.contains(Rule::TakenOver),
        "{rep:?}"
    );
    assert_eq!(ask(&mut s, token(1, 9, 3), Op::Unlock).1, Answer::Released);
    assert_eq!(s.holding(K), None);
    assert_eq!(ask(&mut s, token(2, 0, 2), Op::TakeOver).1, Answer::Granted);
    assert_eq!(s.holder(K), Some(ClientId(2)));
}

/// The request memory and the retry fence compare an incarnation's own numbers only: a
/// second incarnation that numbers below the first is served, not taken for a copy; a
/// copy of its refused lock is answered `InUse` again (not Refused); and the first
/// incarnation's stale retry is still fenced after the second one's request.
#[test]
fn copies_and_stale_retries_are_judged_per_incarnation() {
    let mut s = server();
    assert_eq!(ask(&mut s, token(1, 7, 50), Op::Lock).1, Answer::Granted);
    let (rep, a) = ask(&mut s, token(1, 9, 1), Op::Lock);
    assert_eq!(a, Answer::InUse);
    assert!(!rep.contains(Rule::CopyAnswered), "{rep:?}");
    let (rep, a) = ask(&mut s, token(1, 9, 1), Op::Lock);
    assert_eq!(a, Answer::InUse);
    assert!(rep.contains(Rule::CopyAnswered), "{rep:?}");
    // Incarnation 7 unlocks (request 51); its lock, request 50, arrives again: a stale
    // retry of incarnation 7 (the memory's row is incarnation 9's), not applied.
    assert_eq!(ask(&mut s, token(1, 7, 51), Op::Unlock).1, Answer::Released);
    let (rep, a) = ask(&mut s, token(1, 7, 50), Op::Lock);
    assert!(
        rep.contains(Rule::Superseded) || rep.contains(Rule::CopyAnswered),
        "{rep:?}"
    );
    assert_eq!(a, Answer::Refused);
    assert_eq!(s.holding(K), None);
    // Incarnation 9's next request, numbered far below incarnation 7's, is served.
    assert_eq!(ask(&mut s, token(1, 9, 2), Op::Lock).1, Answer::Granted);
    assert_eq!(s.holding(K), Some(holder(1, 9)));
}

/// The holder's incarnation travels with the entry: a replica's copy (`Replicate`) names
/// the same incarnation, and a replica that took over as primary answers another
/// incarnation's lock `InUse`.
#[test]
fn a_replica_keeps_the_holders_incarnation() {
    let mut p = S::new(NodeId(1), ring(), 1, PAIR).unwrap();
    let mut r = S::new(NodeId(0), ring(), 1, PAIR).unwrap();
    let mut out = O::new();
    p.step(
        Addr::Client(ClientId(1)),
        &request(token(1, 7, 1), Op::Lock, PAIR),
        &mut out,
    )
    .unwrap();
    let m = out.pop().unwrap();
    assert_eq!(m.to, Addr::Node(NodeId(0)));
    r.step(Addr::Node(NodeId(1)), &m.msg, &mut out).unwrap();
    assert_eq!(r.holding(K), Some(holder(1, 7)));
    // n21 is gone: n8 alone serves key 10 from its copy.
    out.clear();
    let alone = View {
        epoch: 1,
        members: 0b001,
    };
    r.step(Addr::Chord, &ChordMsg::NewView(alone), &mut out)
        .unwrap();
    out.clear();
    r.step(
        Addr::Client(ClientId(1)),
        &request(token(1, 9, 1), Op::Lock, alone),
        &mut out,
    )
    .unwrap();
    assert!(
        matches!(
            out[..],
            [Out {
                msg: ChordMsg::Reply {
                    answer: Answer::InUse,
                    ..
                },
                ..
            }]
        ),
        "{out:?}"
    );
}
