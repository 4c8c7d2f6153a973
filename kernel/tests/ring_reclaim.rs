//! Reclaiming released entries of hilock's ring server (`RingServer::step`, "Reclaim";
//! `docs/engines/ring.md`, "Limits"): a new key on a full table takes the place of a free
//! entry, and neither the retry guard of the dropped entry (its writer, kept as its
//! client's request floor) nor the order of the key's versions (the fences) is lost.
//! Before, a full table refused every new key for ever ("lock table full").

use hilock_kernel::ring::{
    Addr, Answer, ChordMsg, ClientId, Key, NodeId, Op, Rule, Slot, Token, Version, View,
};

use crate::ring_one;
use ring_one::*;

/// The entry of `key`, if the table has one.
fn entry(s: &S, key: u16) -> Option<Slot> {
    s.slots().iter().find(|e| e.key == Key(key)).copied()
}

/// Client `client` (incarnation `incarnation`) locks and unlocks each of `keys`, numbering
/// its requests from `seq` on; returns its next request number.
fn lock_and_release(s: &mut S, client: u8, incarnation: u64, mut seq: u64, keys: &[u16]) -> u64 {
    for k in keys {
        let t = token(client, incarnation, seq);
        assert_eq!(ask_key(s, t, Op::Lock, *k).1, Answer::Granted, "key {k}");
        let t = token(client, incarnation, seq + 1);
        assert_eq!(ask_key(s, t, Op::Unlock, *k).1, Answer::Released, "key {k}");
        seq += 2;
    }
    seq
}

/// A table of 4 entries takes any number of keys locked and released one after another:
/// each new key takes the place of the free entry written longest ago. Before, the fifth
/// key was refused (`ChordError::TableFull`).
#[test]
fn a_released_key_is_reclaimed_when_the_table_is_full() {
    let mut s = alone();
    lock_and_release(&mut s, 1, 0, 1, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(s.slots().len(), 4, "{:?}", s.slots());
    let keys: Vec<u16> = s.slots().iter().map(|e| e.key.0).collect();
    assert_eq!(keys, [6, 7, 8, 9], "the newest four stay");
}

/// Only a free entry is reclaimed: with every entry naming a holder a new key is answered
/// Full and nothing is written; once one holder releases, the new key takes that entry's
/// place.
#[test]
fn a_held_key_is_never_reclaimed() {
    let mut s = alone();
    for (i, k) in [0u16, 1, 2, 3].iter().enumerate() {
        let t = token(i as u8 + 1, 0, 1);
        assert_eq!(ask_key(&mut s, t, Op::Lock, *k).1, Answer::Granted);
    }
    let before = s.clone();
    let mut out = O::new();
    let fifth = ChordMsg::Request {
        token: token(9, 0, 1),
        op: Op::Lock,
        key: Key(4),
        view: ALONE,
    };
    let rep = s.step(Addr::Client(ClientId(9)), &fifth, &mut out).unwrap();
    assert!(rep.contains(Rule::NoRoom), "{rep:?}");
    assert_eq!(s.slots(), before.slots());
    assert!(
        matches!(out.as_slice(), [o] if matches!(o.msg, ChordMsg::Reply { answer: Answer::Full, .. })),
        "{out:?}"
    );
    assert_eq!(
        ask_key(&mut s, token(3, 0, 2), Op::Unlock, 2).1,
        Answer::Released
    );
    // A copy of the request answered Full is answered so again; the next is served.
    assert_eq!(ask_key(&mut s, token(9, 0, 1), Op::Lock, 4).1, Answer::Full);
    assert_eq!(
        ask_key(&mut s, token(9, 0, 2), Op::Lock, 4).1,
        Answer::Granted
    );
    assert_eq!(entry(&s, 2), None, "the released key's entry went");
    for (k, c) in [(0u16, 1u8), (1, 2), (3, 4), (4, 9)] {
        assert_eq!(s.holder(Key(k)), Some(ClientId(c)), "key {k}");
    }
}

/// The guard of a reclaimed entry, the retry fence: c1 locks key 10 (request 1) and
/// releases it (request 2); other keys push the entry out; a late copy of c1's lock then
/// arrives. It is below c1's request floor: answered from the free key (Refused, which
/// c1 does not wait for) and not applied, so the key is not locked again for c1, which
/// released it. The request memory (which answers most copies in one view,
/// `kernel/tests/ring_copies.rs`) is off, so the floor alone is judged; with it on, the
/// floor still judges a copy of one incarnation after another incarnation of the id
/// took the memory's row (below).
#[test]
fn a_late_retry_for_a_reclaimed_key_is_not_applied() {
    let mut s = alone().without_request_memory();
    lock_and_release(&mut s, 1, 0, 1, &[10]);
    lock_and_release(&mut s, 2, 0, 1, &[0, 1, 2, 3]);
    assert_eq!(entry(&s, 10), None, "key 10's entry was reclaimed");
    let before = s.clone();
    let (rep, a) = ask_key(&mut s, token(1, 0, 1), Op::Lock, 10);
    assert!(rep.contains(Rule::Superseded), "{rep:?}");
    assert!(!rep.contains(Rule::WriteStarted), "{rep:?}");
    assert_eq!(a, Answer::Refused);
    assert_eq!(s, before, "a stale retry changes nothing");
    // c1's next request (numbered on, across keys) is served, and so is another client.
    assert_eq!(
        ask_key(&mut s, token(1, 0, 3), Op::Lock, 10).1,
        Answer::Granted
    );
    assert_eq!(
        ask_key(&mut s, token(1, 0, 4), Op::Unlock, 10).1,
        Answer::Released
    );
    assert_eq!(
        ask_key(&mut s, token(3, 0, 1), Op::Lock, 10).1,
        Answer::Granted
    );
}

/// As shipped, with the request memory: two processes with client id 1 (incarnations 0
/// and 7). Incarnation 0 locks and releases key 10; incarnation 7's requests take the
/// memory's row of id 1 and push key 10's entry out; a late copy of incarnation 0's lock
/// is then judged by the floor alone, and not applied (the copy takes the memory's row,
/// as any request of another incarnation does, and writes nothing).
#[test]
fn a_late_copy_of_one_incarnation_after_another_took_the_memory_is_not_applied() {
    let mut s = alone();
    lock_and_release(&mut s, 1, 0, 1, &[10]);
    let next = lock_and_release(&mut s, 1, 7, 5, &[0, 1, 2, 3]);
    assert_eq!(entry(&s, 10), None);
    let before = s.clone();
    let (rep, a) = ask_key(&mut s, token(1, 0, 1), Op::Lock, 10);
    assert!(rep.contains(Rule::Superseded), "{rep:?}");
    assert_eq!((a, s.slots()), (Answer::Refused, before.slots()));
    assert_eq!(
        ask_key(&mut s, token(1, 7, next), Op::Lock, 10).1,
        Answer::Granted
    );
}

/// Fences: the key written again after its entry was reclaimed gets a larger version
/// than every earlier write of it (a version is the view epoch and the writing server's
/// own counter, not grown from the entry).
#[test]
fn a_key_granted_again_after_its_entry_was_reclaimed_gets_a_larger_fence() {
    let mut s = alone();
    assert_eq!(
        ask_key(&mut s, token(1, 0, 1), Op::Lock, 10).1,
        Answer::Granted
    );
    let first = entry(&s, 10).unwrap().version;
    ask_key(&mut s, token(1, 0, 2), Op::Unlock, 10);
    let released = entry(&s, 10).unwrap().version;
    lock_and_release(&mut s, 2, 0, 1, &[0, 1, 2, 3]);
    assert_eq!(entry(&s, 10), None);
    assert_eq!(
        ask_key(&mut s, token(3, 0, 1), Op::Lock, 10).1,
        Answer::Granted
    );
    let again = entry(&s, 10).unwrap().version;
    assert!(
        first < released && released < again,
        "{first:?} {released:?} {again:?}"
    );
}

/// A free entry of an arc the server is not ready for (a joiner's replica write that came
/// before the arc's hand-over) is not reclaimed: the hand-over, merged later, would write
/// an older entry of the key back over its newer, dropped one.
#[test]
fn a_free_entry_of_an_arc_not_handed_over_yet_is_not_reclaimed() {
    // n32 joins n8 and n21 (r = 1): in `v1` it replicates n21's arc (keys 9 to 21),
    // which is not ready at n32 until its hand-over comes; n21's replica writes of keys
    // 12 to 15 (each freed) fill its table first.
    let v0 = PAIR;
    let v1 = v0.join(NodeId(2));
    let mut j = S::new(NodeId(2), ring(), 1, v0).unwrap();
    let mut out = O::new();
    let free = |k: u16, n: u32| ChordMsg::Replicate {
        view: v1,
        slot: Slot {
            key: Key(k),
            holder: None,
            incarnation: 0,
            version: Version { epoch: 1, n },
            writer: Some(token(1, 0, u64::from(n))),
        },
        token: token(1, 0, u64::from(n)),
    };
    for (n, k) in [12u16, 13, 14, 15].iter().enumerate() {
        j.step(Addr::Node(NodeId(1)), &free(*k, n as u32 + 1), &mut out)
            .unwrap();
    }
    assert_eq!(j.slots().len(), 4);
    let before = j.clone();
    out.clear();
    let rep = j
        .step(Addr::Node(NodeId(1)), &free(16, 9), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::ReplicaFull), "{rep:?}");
    assert!(
        matches!(out.as_slice(), [o] if matches!(o.msg, ChordMsg::ReplicaFull { key: Key(16), .. })),
        "{out:?}"
    );
    assert_eq!(j, before);
}

/// A free entry whose write is still waiting for its replica is reclaimed too, and the
/// write completes: key 33's unlock waits for n21 when the table is full; a new key takes
/// its entry's place at once; the acknowledgement then answers the unlock Released, and
/// the key reads free.
#[test]
fn a_free_entry_with_a_write_in_progress_is_reclaimed_and_the_write_completes() {
    // n8 and n21, r = 1: n8 is the primary of keys 22 to 63 and 0 to 8, n21 the replica.
    let v = PAIR;
    let mut p = S::new(NodeId(0), ring(), 1, v).unwrap();
    let mut r = S::new(NodeId(1), ring(), 1, v).unwrap();
    // `op` of `t` on `k` at n8, its replica write applied at n21; n21's acknowledgement,
    // delivered to n8 unless `hold`.
    let mut run = |p: &mut S, t: Token, op: Op, k: u16, hold: bool| -> ChordMsg<4> {
        let mut out = O::new();
        let msg = ChordMsg::Request {
            token: t,
            op,
            key: Key(k),
            view: v,
        };
        p.step(Addr::Client(t.client), &msg, &mut out).unwrap();
        let w = out.pop().unwrap();
        assert_eq!(w.to, Addr::Node(NodeId(1)), "{w:?}");
        let mut back = O::new();
        r.step(Addr::Node(NodeId(0)), &w.msg, &mut back).unwrap();
        let a = back.pop().unwrap().msg;
        if !hold {
            p.step(Addr::Node(NodeId(1)), &a, &mut out).unwrap();
        }
        a
    };
    for (i, k) in [30u16, 31, 32].iter().enumerate() {
        run(&mut p, token(i as u8 + 1, 0, 1), Op::Lock, *k, false);
    }
    run(&mut p, token(4, 0, 1), Op::Lock, 33, false);
    let ack = run(&mut p, token(4, 0, 2), Op::Unlock, 33, true);
    assert_eq!(p.pending(), 1);
    run(&mut p, token(5, 0, 1), Op::Lock, 34, false);
    assert_eq!(entry(&p, 33), None, "the free entry went");
    assert_eq!(p.holder(Key(34)), Some(ClientId(5)));
    let mut out = O::new();
    p.step(Addr::Node(NodeId(1)), &ack, &mut out).unwrap();
    assert_eq!(p.pending(), 0);
    assert!(
        matches!(
            out.as_slice(),
            [o] if o.to == Addr::Client(ClientId(4))
                && matches!(o.msg, ChordMsg::Reply { answer: Answer::Released, .. })
        ),
        "{out:?}"
    );
}

/// With no entry spare, a free entry is reclaimed as it is written: a replica whose table
/// holds four held keys acknowledges the write of a fifth key that frees it (a key without
/// an entry is free) without storing it, and refuses only a write that names a holder.
#[test]
fn a_free_replica_write_on_a_table_of_holders_is_acknowledged_without_an_entry() {
    // n8 and n21, r = 1: n21 replicates n8's keys (22 to 63 and 0 to 8).
    let v = PAIR;
    let mut r = S::new(NodeId(1), ring(), 1, v).unwrap();
    let write = |k: u16, holder: Option<u8>, n: u32| ChordMsg::Replicate {
        view: v,
        slot: Slot {
            key: Key(k),
            holder: holder.map(ClientId),
            incarnation: 0,
            version: Version { epoch: 0, n },
            writer: Some(token(holder.unwrap_or(9), 0, 1)),
        },
        token: token(holder.unwrap_or(9), 0, 1),
    };
    let mut out = O::new();
    for (i, k) in [30u16, 31, 32, 33].iter().enumerate() {
        r.step(
            Addr::Node(NodeId(0)),
            &write(*k, Some(i as u8 + 1), i as u32 + 1),
            &mut out,
        )
        .unwrap();
    }
    out.clear();
    let rep = r
        .step(Addr::Node(NodeId(0)), &write(34, None, 5), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::Replicated), "{rep:?}");
    assert!(
        matches!(out.as_slice(), [o] if matches!(o.msg, ChordMsg::ReplicaAck { key: Key(34), .. })),
        "{out:?}"
    );
    assert_eq!(r.slots().len(), 4);
    assert_eq!(entry(&r, 34), None);
    let before = r.clone();
    out.clear();
    let rep = r
        .step(Addr::Node(NodeId(0)), &write(35, Some(5), 6), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::ReplicaFull), "{rep:?}");
    assert!(
        matches!(out.as_slice(), [o] if matches!(o.msg, ChordMsg::ReplicaFull { key: Key(35), .. })),
        "{out:?}"
    );
    assert_eq!(r, before);
}

/// Once writers of two incarnations of one id are folded into a floor, it compares every
/// incarnation's numbers, for the rest of the view: incarnation 0 (requests 1, 2) and
/// incarnation 7 (requests 50 on) both have reclaimed entries; incarnation 0's lock of a
/// key without an entry, numbered 3, is then answered Refused and not applied, and served
/// once the server installed a newer view (the floors are of one view's requests).
#[test]
fn a_floor_of_two_incarnations_compares_every_incarnations_numbers_until_the_next_view() {
    let mut s = alone();
    lock_and_release(&mut s, 1, 0, 1, &[10]);
    lock_and_release(&mut s, 1, 7, 50, &[11]);
    lock_and_release(&mut s, 2, 0, 1, &[0, 1, 2, 3]);
    assert_eq!((entry(&s, 10), entry(&s, 11)), (None, None));
    let (rep, a) = ask_key(&mut s, token(1, 0, 3), Op::Lock, 20);
    assert!(rep.contains(Rule::Superseded), "{rep:?}");
    assert_eq!((a, entry(&s, 20)), (Answer::Refused, None));
    let v1 = View {
        epoch: 1,
        members: ALONE.members,
    };
    let mut out = O::new();
    s.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    let msg = ChordMsg::Request {
        token: token(1, 0, 3),
        op: Op::Lock,
        key: Key(20),
        view: v1,
    };
    out.clear();
    let rep = s.step(Addr::Client(ClientId(1)), &msg, &mut out).unwrap();
    assert!(rep.contains(Rule::WriteStarted), "{rep:?}");
    assert_eq!(s.holder(Key(20)), Some(ClientId(1)));
}
