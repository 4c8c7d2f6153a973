//! The retry fence of hilock's ring server (`spec/SPEC.md` 4.1, rows "hilock: not served
//! twice" and "hilock: a stale retry is not applied"): an entry remembers the newest
//! request of the client that set its holder (`Slot::writer`, `RetryFence::Latest`), and a
//! request of the same client older than that one — a stale retry, overtaken on the network
//! by the client's own later request — is answered from the entry and not applied
//! (`Rule::Superseded`). Without it (`RingServer::without_retry_fence`, the model's
//! `Sabotage::NoRetryFence`) the released lock is written again for a client that no longer
//! holds it (`spec/counterexamples/ring/ring-short-cut-join-stale-retry.json`).

use hilock_kernel::ring::{
    Addr, Answer, ChordMsg, ClientId, NodeId, Op, RetryFence, Ring, Rule, Token,
};

use crate::ring_one;
use ring_one::*;

/// n8 with the retry fence alone: the request memory, which within one view answers most
/// of the copies below before the fence looks at them (`kernel/tests/ring_copies.rs`), is
/// off. The fence is what still holds across views, where the memory is dropped.
fn server() -> S {
    with_memory().without_request_memory()
}

/// n8 as shipped.
fn with_memory() -> S {
    alone()
}

/// Request `seq` of client `client` (its one incarnation).
fn tok(client: u8, seq: u64) -> Token {
    token(client, 0, seq)
}

/// The saved defect in one server: c1's lock (request 1) is granted, c1 unlocks
/// (request 2), then a copy of request 1 arrives. It is answered from the entry, nothing
/// is written, and c2 gets the lock. Without the fence the copy locks it again for c1,
/// and c2 is refused.
#[test]
fn a_lock_retry_older_than_the_clients_unlock_is_not_applied() {
    for fenced in [true, false] {
        let mut s = if fenced {
            server()
        } else {
            server().without_retry_fence()
        };
        assert_eq!(ask(&mut s, tok(1, 1), Op::Lock).1, Answer::Granted);
        assert_eq!(ask(&mut s, tok(1, 2), Op::Unlock).1, Answer::Released);
        let before = s.clone();
        let (rep, _) = ask(&mut s, tok(1, 1), Op::Lock);
        if fenced {
            assert!(rep.contains(Rule::Superseded), "{rep:?}");
            assert!(!rep.contains(Rule::WriteStarted), "{rep:?}");
            assert_eq!(s, before, "a stale retry changes nothing");
            assert_eq!(ask(&mut s, tok(2, 1), Op::Lock).1, Answer::Granted);
        } else {
            assert!(rep.contains(Rule::WriteStarted), "{rep:?}");
            assert_eq!(s.holder(K), Some(ClientId(1)), "the released lock, again");
            assert_eq!(ask(&mut s, tok(2, 1), Op::Lock).1, Answer::Refused);
        }
    }
}

/// The mirror case, which breaks mutual exclusion: c1 unlocks (request 2), locks again
/// (request 3), and a copy of its unlock arrives. It must not free the lock c1 holds —
/// not even after another client's unlock rewrote the entry (that rewrite keeps the
/// writer: the writer changes only with the holder).
#[test]
fn an_unlock_retry_older_than_the_clients_lock_does_not_free_it() {
    let mut s = server();
    ask(&mut s, tok(1, 1), Op::Lock);
    ask(&mut s, tok(1, 2), Op::Unlock);
    assert_eq!(ask(&mut s, tok(1, 3), Op::Lock).1, Answer::Granted);
    // c2's unlock of a lock it does not hold: answered, the entry rewritten, same holder.
    let (rep, a) = ask(&mut s, tok(2, 1), Op::Unlock);
    assert!(rep.contains(Rule::Idempotent) && a == Answer::Released);
    assert_eq!(s.slots()[0].writer, Some(tok(1, 3)));
    let (rep, _) = ask(&mut s, tok(1, 2), Op::Unlock);
    assert!(rep.contains(Rule::Superseded), "{rep:?}");
    assert_eq!(s.holder(K), Some(ClientId(1)));
    assert_eq!(ask(&mut s, tok(2, 2), Op::Lock).1, Answer::Refused);
}

/// A retry of the request that set the entry (same request number: the client is still
/// waiting for it) is not stale: it is answered from the entry as before (`Idempotent`,
/// written again), and a new request of the client is served.
#[test]
fn a_retry_of_the_same_request_is_still_answered_and_a_new_one_served() {
    let mut s = server();
    ask(&mut s, tok(1, 7), Op::Lock);
    let (rep, a) = ask(&mut s, tok(1, 7), Op::Lock);
    assert!(rep.contains(Rule::Idempotent) && !rep.contains(Rule::Superseded));
    assert_eq!(a, Answer::Granted);
    assert_eq!(s.slots()[0].writer, Some(tok(1, 7)));
    let (rep, a) = ask(&mut s, tok(1, 8), Op::Unlock);
    assert!(rep.contains(Rule::WriteStarted) && a == Answer::Released);
    assert_eq!(s.slots()[0].writer, Some(tok(1, 8)));
}

/// Request numbers do not wrap (`u64`): a lower number of the same client is older,
/// however far apart the two are, and another client's numbers never compare.
#[test]
fn request_numbers_compare_as_integers_and_only_within_a_client() {
    assert!(tok(1, 255).precedes(tok(1, 256)));
    assert!(!tok(1, 256).precedes(tok(1, 255)));
    assert!(tok(1, 1).precedes(tok(1, 129)), "no half circle");
    assert!(tok(1, 0).precedes(tok(1, u64::MAX)));
    assert!(!tok(1, 4).precedes(tok(1, 4)));
    assert!(!tok(2, 1).precedes(tok(1, 2)));
    let mut s = server();
    ask(&mut s, tok(1, 255), Op::Lock);
    ask(&mut s, tok(1, 256), Op::Unlock);
    let (rep, _) = ask(&mut s, tok(1, 255), Op::Lock);
    assert!(rep.contains(Rule::Superseded), "{rep:?}");
    assert_eq!(s.holder(K), None);
}

/// The writer travels with the entry: a replica applies it with the write, and the fence
/// holds at a server that has the entry only from a replica write (the new primary after a
/// hand-over in the saved trace).
#[test]
fn the_writer_is_replicated_with_the_entry() {
    let ring = Ring::new(6, [8, 21, 32]).unwrap();
    let v = PAIR;
    let mut p = S::new(NodeId(1), ring, 1, v).unwrap();
    let mut b = S::new(NodeId(0), ring, 1, v).unwrap();
    let mut out = O::new();
    let req = ChordMsg::Request {
        token: tok(1, 1),
        op: Op::Lock,
        key: K,
        view: v,
    };
    p.step(Addr::Client(ClientId(1)), &req, &mut out).unwrap();
    let m = out.pop().unwrap();
    b.step(Addr::Node(NodeId(1)), &m.msg, &mut out).unwrap();
    assert_eq!(b.slots()[0].writer, Some(tok(1, 1)));
}

/// The fence's other side: a client id is one numbering. A new incarnation of client 1 (a
/// `hilock lock` run after one killed while holding) starts at request 1 again; its
/// earlier incarnation locked key 10 with request 3. Without `ChordClient::resume_after`
/// its unlock (request 1) is taken for a stale retry of a request before 3: answered
/// Released, and the lock stays held. Resumed after the recorded request, its unlock is
/// request 4 and frees the lock. `resume_after` refuses another client's request and
/// while a request waits, and never moves the numbers back.
#[test]
fn a_new_incarnation_resumes_after_the_request_the_ring_records() {
    use hilock_kernel::ring::{ChordClient, ChordError};
    let ring = Ring::new(6, [8, 21, 32]).unwrap();
    let mut s = server();
    assert_eq!(ask(&mut s, tok(1, 3), Op::Lock).1, Answer::Granted);
    let writer = s.slots()[0].writer.unwrap();
    assert_eq!(writer, tok(1, 3));

    // Not resumed: request 1 is older than 3.
    let mut fresh = ChordClient::new(ClientId(1), ring, ALONE).unwrap();
    let mut out = O::new();
    fresh.start(Op::Unlock, K, &mut out).unwrap();
    let (rep, a) = ask(&mut s, tok(1, fresh.seq()), Op::Unlock);
    assert!(rep.contains(Rule::Superseded) && a == Answer::Released);
    assert_eq!(s.holder(K), Some(ClientId(1)), "freed nothing");

    // Resumed: the next request is 4.
    let mut c = ChordClient::new(ClientId(1), ring, ALONE).unwrap();
    assert_eq!(c.resume_after(tok(2, 9)), Err(ChordError::BadSender));
    c.resume_after(writer).unwrap();
    assert_eq!(c.seq(), 3);
    c.resume_after(tok(1, 2)).unwrap();
    assert_eq!(
        c.seq(),
        3,
        "an older request does not move the numbers back"
    );
    let mut out = O::new();
    c.start(Op::Unlock, K, &mut out).unwrap();
    assert_eq!(c.seq(), 4);
    assert_eq!(c.resume_after(tok(1, 9)), Err(ChordError::Busy));
    assert_eq!(c.seq(), 4);
    let ChordMsg::Request { token, .. } = out[0].msg else {
        panic!("{out:?}")
    };
    let (rep, a) = ask(&mut s, token, Op::Unlock);
    assert!(!rep.contains(Rule::Superseded), "{rep:?}");
    assert_eq!(a, Answer::Released);
    assert_eq!(s.holder(K), None);
}

/// The two-holder schedule: c1 holds (request 1) and sends its unlock (request 2), which
/// the network holds back; c1 gives it up (`ChordClient::abandon`) or a new incarnation
/// resumes, and c1 locks again (request 3): a re-grant to the holder. The unlock then
/// arrives. It is older than the re-grant, so it must be a stale retry: c1 holds through
/// request 3, and c2 is refused. Under `RetryFence::HolderChanges` (the writer changed with
/// the holder only) the re-grant kept request 1 as the writer, the unlock freed the lock
/// c1 was just granted again, and c2 was granted too: two holders
/// (`spec/counterexamples/ring/ring-regrant-keeps-writer.json`).
#[test]
fn an_unlock_older_than_the_holders_regrant_does_not_free_it() {
    for fence in [RetryFence::Latest, RetryFence::HolderChanges] {
        let mut s = server().with_retry_fence(fence);
        assert_eq!(ask(&mut s, tok(1, 1), Op::Lock).1, Answer::Granted);
        let (rep, a) = ask(&mut s, tok(1, 3), Op::Lock);
        assert!(rep.contains(Rule::Idempotent) && a == Answer::Granted);
        let (rep, _) = ask(&mut s, tok(1, 2), Op::Unlock);
        let c2 = ask(&mut s, tok(2, 1), Op::Lock).1;
        if fence == RetryFence::Latest {
            assert_eq!(s.slots()[0].writer, Some(tok(1, 3)));
            assert!(rep.contains(Rule::Superseded), "{rep:?}");
            assert_eq!(s.holder(K), Some(ClientId(1)));
            assert_eq!(c2, Answer::Refused, "c1 holds through its re-grant");
        } else {
            assert!(!rep.contains(Rule::Superseded), "{rep:?}");
            assert_eq!(c2, Answer::Granted, "the old fence: a second holder");
        }
    }
}

/// The same for a lock the client gave up: c1 unlocks (request 2), asks to lock again
/// (request 3) and abandons it while the network holds it back, then unlocks again
/// (request 4: the key is free, answered idempotently). The abandoned lock then arrives:
/// it is older than c1's repeated unlock, so it is not applied, and the key is not left
/// locked for a client that believes it holds nothing. Under `RetryFence::HolderChanges`
/// the repeated unlock kept request 2 as the writer and the lock was applied.
#[test]
fn a_lock_older_than_the_clients_repeated_unlock_is_not_applied() {
    for fence in [RetryFence::Latest, RetryFence::HolderChanges] {
        let mut s = server().with_retry_fence(fence);
        ask(&mut s, tok(1, 1), Op::Lock);
        ask(&mut s, tok(1, 2), Op::Unlock);
        let (rep, a) = ask(&mut s, tok(1, 4), Op::Unlock);
        assert!(rep.contains(Rule::Idempotent) && a == Answer::Released);
        let (rep, _) = ask(&mut s, tok(1, 3), Op::Lock);
        if fence == RetryFence::Latest {
            assert!(rep.contains(Rule::Superseded), "{rep:?}");
            assert_eq!(s.holder(K), None, "no lock recorded for nobody");
        } else {
            assert_eq!(
                s.holder(K),
                Some(ClientId(1)),
                "the old fence: locked for c1"
            );
        }
    }
}

/// Another client's idempotent rewrite does not move the writer: c2's unlock of a key c1
/// holds leaves c1's request as the writer, so c1's older requests stay stale.
#[test]
fn another_clients_idempotent_unlock_keeps_the_writer() {
    let mut s = server();
    ask(&mut s, tok(1, 5), Op::Lock);
    let (rep, _) = ask(&mut s, tok(2, 9), Op::Unlock);
    assert!(rep.contains(Rule::Idempotent), "{rep:?}");
    assert_eq!(s.slots()[0].writer, Some(tok(1, 5)));
    assert_eq!(s.holder(K), Some(ClientId(1)));
}

/// The entry keeps its writer for as long as nobody writes the key, however many
/// requests its client sends elsewhere meanwhile: c1 locks key 10 as request 5, then sends
/// other servers 200 requests (or 100,000); its unlock of key 10 (request 206, or
/// 100,006) is newer than the writer and frees the key, and c2 is granted it. With 8-bit
/// serial numbers request 206 compared as 56 requests before 5: it was taken for a stale
/// retry, answered Released from the entry, and the key stayed locked for c1.
#[test]
fn an_unlock_long_after_the_lock_frees_the_key() {
    for (later, mut s) in [
        (200u64, server()),
        (100_000, server()),
        (200, with_memory()),
        (100_000, with_memory()),
    ] {
        assert_eq!(ask(&mut s, tok(1, 5), Op::Lock).1, Answer::Granted);
        let (rep, a) = ask(&mut s, tok(1, 5 + later + 1), Op::Unlock);
        assert_eq!(a, Answer::Released);
        assert!(!rep.contains(Rule::Superseded), "{later}: {rep:?}");
        assert!(rep.contains(Rule::WriteStarted), "{later}: {rep:?}");
        assert_eq!(s.holder(K), None, "{later} requests later: freed");
        assert_eq!(ask(&mut s, tok(2, 1), Op::Lock).1, Answer::Granted);
    }
}

/// A client counts its requests with checked arithmetic: after the last number
/// (`u64::MAX`, reached only through `resume_after`) `start` refuses with
/// `ChordError::SeqExhausted` and changes nothing, instead of wrapping to a number the
/// ring takes for a stale retry.
#[test]
fn a_client_past_its_last_request_number_is_refused_not_wrapped() {
    use hilock_kernel::ring::{ChordClient, ChordError};
    let ring = Ring::new(6, [8, 21, 32]).unwrap();
    let mut c = ChordClient::new(ClientId(1), ring, ALONE).unwrap();
    c.resume_after(tok(1, u64::MAX - 1)).unwrap();
    let mut out = O::new();
    c.start(Op::Lock, K, &mut out).unwrap();
    assert_eq!(c.seq(), u64::MAX);
    assert_eq!(c.abandon(), Some((Op::Lock, K)));
    let before = c;
    out.clear();
    assert_eq!(
        c.start(Op::Unlock, K, &mut out),
        Err(ChordError::SeqExhausted)
    );
    assert_eq!(c, before);
    assert!(out.is_empty());
}
