//! The ring server's request memory (`RingServer::step`, "Copies"; `Rule::CopyAnswered`):
//! per client id, the newest request a server answered in its current view. A request of
//! that client with a lower number, or a copy of a lock it answered Refused, is a copy:
//! answered again, nothing written. A refused lock writes nothing to the entry, so without
//! the memory a late copy of it locked a key that had become free for a client no longer
//! waiting for it (`spec/counterexamples/ring/ring-late-duplicate-locks-for-nobody.json`).
//! The memory is of one view: a server drops it when it installs a newer one.

use hilock_kernel::ring::{
    Addr, Answer, ChordError, ChordMsg, ClientId, Key, NodeId, Op, Report, RingServer, Rule, Token,
    View,
};

use crate::ring_one;
use ring_one::*;

fn server() -> S {
    alone()
}

/// Request `seq` of client `client` (its one incarnation).
fn tok(client: u8, seq: u64) -> Token {
    token(client, 0, seq)
}

/// `op` of `token` on key 10 routed with `view`: the rules that fired and the one reply
/// with its epoch.
fn ask_in(s: &mut S, token: Token, op: Op, view: View) -> (Report, u16, Answer) {
    let mut out = O::new();
    let rep = s
        .step(
            Addr::Client(token.client),
            &request(token, op, view),
            &mut out,
        )
        .unwrap();
    let replies: Vec<_> = out
        .iter()
        .filter_map(|o| match o.msg {
            ChordMsg::Reply {
                token: t,
                epoch,
                answer,
            } if t == token && o.to == Addr::Client(token.client) => Some((epoch, answer)),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 1, "one reply: {out:?}");
    (rep, replies[0].0, replies[0].1)
}

/// The saved defect in one server: c1 holds; c2's lock (request 1) is refused; c1
/// unlocks; a copy of c2's request 1 arrives. It is refused again and nothing is
/// written: the key stays free, and c2's next request is served. Without the memory the
/// copy locks the free key for c2, and c1's next lock is refused.
#[test]
fn a_late_copy_of_a_refused_lock_is_refused_again() {
    for memory in [true, false] {
        let mut s = if memory {
            server()
        } else {
            server().without_request_memory()
        };
        assert_eq!(ask(&mut s, tok(1, 1), Op::Lock).1, Answer::Granted);
        assert_eq!(ask(&mut s, tok(2, 1), Op::Lock).1, Answer::Refused);
        assert_eq!(ask(&mut s, tok(1, 2), Op::Unlock).1, Answer::Released);
        let before = s.clone();
        let (rep, a) = ask(&mut s, tok(2, 1), Op::Lock);
        if memory {
            assert!(rep.contains(Rule::CopyAnswered), "{rep:?}");
            assert!(!rep.contains(Rule::WriteStarted), "{rep:?}");
            assert_eq!(a, Answer::Refused);
            assert_eq!(s, before, "a copy changes nothing");
            assert_eq!(ask(&mut s, tok(1, 3), Op::Lock).1, Answer::Granted);
        } else {
            assert_eq!(a, Answer::Granted);
            assert_eq!(s.holder(K), Some(ClientId(2)), "locked for nobody");
            assert_eq!(ask(&mut s, tok(1, 3), Op::Lock).1, Answer::Refused);
        }
    }
}

/// A copy older than the client's newest request here is a copy however it was answered,
/// also where the retry fence does not see it: c2's lock (request 1) is granted and
/// released (request 2), then c1 locks and unlocks, so the entry's writer is c1's; a
/// late copy of c2's request 1 is not older than anything the entry remembers, but it is
/// older than c2's request 2, which this server answered in this view.
#[test]
fn a_copy_older_than_the_clients_newest_request_here_is_not_served() {
    for memory in [true, false] {
        let mut s = if memory {
            server()
        } else {
            server().without_request_memory()
        };
        ask(&mut s, tok(2, 1), Op::Lock);
        ask(&mut s, tok(2, 2), Op::Unlock);
        ask(&mut s, tok(1, 1), Op::Lock);
        ask(&mut s, tok(1, 2), Op::Unlock);
        let (rep, a) = ask(&mut s, tok(2, 1), Op::Lock);
        if memory {
            assert!(rep.contains(Rule::CopyAnswered), "{rep:?}");
            assert_eq!(a, Answer::Refused, "from the entry: c2 does not hold");
            assert_eq!(s.holder(K), None);
        } else {
            assert_eq!(s.holder(K), Some(ClientId(2)), "locked for nobody");
        }
    }
    // An older unlock is answered from the entry and frees nothing.
    let mut s = server();
    ask(&mut s, tok(1, 1), Op::Lock);
    ask(&mut s, tok(1, 3), Op::Lock);
    let (rep, a) = ask(&mut s, tok(1, 2), Op::Unlock);
    assert!(rep.contains(Rule::CopyAnswered) && a == Answer::Released);
    assert_eq!(s.holder(K), Some(ClientId(1)));
}

/// Not a copy: a copy of a request answered Granted (the client may still wait for it) is
/// answered from the entry as before, written again; the client's next request is
/// served; and another client's numbers are its own.
#[test]
fn a_retry_of_a_granted_lock_and_other_clients_are_served() {
    let mut s = server();
    ask(&mut s, tok(1, 7), Op::Lock);
    let (rep, a) = ask(&mut s, tok(1, 7), Op::Lock);
    assert!(rep.contains(Rule::Idempotent) && !rep.contains(Rule::CopyAnswered));
    assert_eq!(a, Answer::Granted);
    let (rep, a) = ask(&mut s, tok(2, 1), Op::Lock);
    assert!(!rep.contains(Rule::CopyAnswered) && a == Answer::Refused);
    let (rep, a) = ask(&mut s, tok(1, 8), Op::Unlock);
    assert!(rep.contains(Rule::WriteStarted) && a == Answer::Released);
    let (rep, a) = ask(&mut s, tok(2, 2), Op::Lock);
    assert!(rep.contains(Rule::WriteStarted) && a == Answer::Granted);
}

/// The memory is of one view. c2's lock is refused in view 0; the server installs view 1;
/// a copy routed with view 0 is redirected (never served in view 1), and c2's request
/// resent with view 1 (same number) is served: the key is free, and it is granted.
#[test]
fn the_memory_is_dropped_with_the_view() {
    let mut s = server();
    ask(&mut s, tok(1, 1), Op::Lock);
    assert_eq!(ask(&mut s, tok(2, 1), Op::Lock).1, Answer::Refused);
    ask(&mut s, tok(1, 2), Op::Unlock);
    // The same members in the next epoch: n8 stays key 10's primary.
    let v1 = View {
        epoch: 1,
        members: ALONE.members,
    };
    let mut out = O::new();
    s.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    let (rep, epoch, a) = ask_in(&mut s, tok(2, 1), Op::Lock, ALONE);
    assert!(rep.contains(Rule::Redirected) && a == Answer::Redirect(v1));
    assert_eq!(epoch, 0, "the reply names the copy's view");
    let (rep, epoch, a) = ask_in(&mut s, tok(2, 1), Op::Lock, v1);
    assert!(!rep.contains(Rule::CopyAnswered), "{rep:?}");
    assert_eq!((epoch, a), (1, Answer::Granted));
}

/// A reply names the epoch of the view its request was routed with — a redirect of an
/// older view's request, and a write in progress redirected when a view is installed
/// (`ChordClient::on_reply` takes only answers to copies sent in its newest view).
#[test]
fn a_reply_names_the_epoch_its_request_was_routed_with() {
    let two = PAIR;
    // n21 is key 10's primary in {n8, n21}, replicated on n8: the write waits.
    let mut p = S::new(NodeId(1), ring(), 1, two).unwrap();
    let mut out = O::new();
    p.step(
        Addr::Client(ClientId(1)),
        &request(tok(1, 1), Op::Lock, two),
        &mut out,
    )
    .unwrap();
    assert_eq!(p.pending(), 1);
    out.clear();
    let v1 = View {
        epoch: 1,
        members: 0b111,
    };
    p.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    let redirected = out.iter().find_map(|o| match o.msg {
        ChordMsg::Reply {
            token,
            epoch,
            answer: Answer::Redirect(v),
        } if token == tok(1, 1) => Some((epoch, v)),
        _ => None,
    });
    assert_eq!(redirected, Some((0, v1)), "{out:?}");
}

/// The memory has a row per client id below `C`; a request of a client id it has no row
/// for is refused (`ChordError::BadSender`) and changes nothing.
#[test]
fn a_client_id_beyond_the_memory_is_refused() {
    let mut s = RingServer::<3, 4, 2>::new(NodeId(0), ring(), 1, ALONE).unwrap();
    let before = s.clone();
    let mut out = O::new();
    assert_eq!(
        s.step(
            Addr::Client(ClientId(2)),
            &request(tok(2, 1), Op::Lock, ALONE),
            &mut out
        ),
        Err(ChordError::BadSender)
    );
    assert_eq!(s, before);
    assert!(out.is_empty());
    assert!(s
        .step(
            Addr::Client(ClientId(1)),
            &request(tok(1, 1), Op::Lock, ALONE),
            &mut out
        )
        .is_ok());
}

/// What the memory asks of a new incarnation of a client id: to number on past every
/// request the earlier one sent, not only past the request a key's entry records. Client
/// 1 locks key 10 (request 5), then sends this server requests 6 and 7 for other keys.
/// A new incarnation that resumes only after the writer (5) unlocks key 10 as request 6:
/// lower than request 7, so it is taken for a copy, answered Released, and the key stays
/// locked. Resumed after every number the earlier one used (as `RingClient` does from the
/// clock), its unlock is request 8 and frees the key.
#[test]
fn a_new_incarnation_that_resumes_only_after_the_writer_is_taken_for_a_copy() {
    use hilock_kernel::ring::ChordClient;
    let other = |seq: u64, key: u16| ChordMsg::Request {
        token: tok(1, seq),
        op: Op::Lock,
        key: Key(key),
        view: ALONE,
    };
    for past_every_request in [false, true] {
        let mut s = server();
        assert_eq!(ask(&mut s, tok(1, 5), Op::Lock).1, Answer::Granted);
        let mut out = O::new();
        s.step(Addr::Client(ClientId(1)), &other(6, 11), &mut out)
            .unwrap();
        s.step(Addr::Client(ClientId(1)), &other(7, 12), &mut out)
            .unwrap();
        let mut c = ChordClient::new(ClientId(1), ring(), ALONE).unwrap();
        let writer = s.slots().iter().find(|e| e.key == K).unwrap().writer;
        c.resume_after(writer.unwrap()).unwrap();
        if past_every_request {
            c.resume_after(tok(1, 7)).unwrap();
        }
        out.clear();
        c.start(Op::Unlock, K, &mut out).unwrap();
        let (rep, a) = ask(&mut s, tok(1, c.seq()), Op::Unlock);
        assert_eq!(a, Answer::Released);
        if past_every_request {
            assert!(rep.contains(Rule::WriteStarted), "{rep:?}");
            assert_eq!(s.holder(K), None);
        } else {
            assert!(rep.contains(Rule::CopyAnswered), "{rep:?}");
            assert_eq!(s.holder(K), Some(ClientId(1)), "freed nothing");
        }
    }
}
