//! `RingServer::reconnected` (hilock's replicated ring; `docs/faults.md`, "Ring engine"): a
//! write whose replica messages died with a broken connection is sent again when the link
//! comes back, a replica acknowledges a copy it already applied without applying it twice,
//! and a bad peer is a typed error that changes and sends nothing.

use hilock_kernel::ring::{
    Addr, Answer, ChordError, ChordMsg, ClientId, Key, NodeId, Op, Out, Ring, RingServer, Rule,
    Token, View,
};

type S = RingServer<3, 4>;
type O = heapless::Vec<Out<4>, 32>;

/// Three members, r = 2: key 10's primary is n21 (slot 1), its replicas n32 and n8.
const V: View = View {
    epoch: 0,
    members: 0b111,
};
const P: NodeId = NodeId(1);
const A: NodeId = NodeId(0);
const B: NodeId = NodeId(2);
const C1: Addr = Addr::Client(ClientId(1));
const TOKEN: Token = Token {
    client: ClientId(1),
    incarnation: 0,
    seq: 1,
};

fn servers() -> (S, S, S) {
    let ring = Ring::new(6, [8, 21, 32]).unwrap();
    (
        S::new(P, ring, 2, V).unwrap(),
        S::new(A, ring, 2, V).unwrap(),
        S::new(B, ring, 2, V).unwrap(),
    )
}

fn lock() -> ChordMsg<4> {
    ChordMsg::Request {
        token: TOKEN,
        op: Op::Lock,
        key: Key(10),
        view: V,
    }
}

/// The primary's `Replicate` to `to` among `out`.
fn replicate_to(out: &O, to: NodeId) -> ChordMsg<4> {
    out.iter()
        .find(|o| o.to == Addr::Node(to) && matches!(o.msg, ChordMsg::Replicate { .. }))
        .map(|o| o.msg.clone())
        .expect("a Replicate to the replica")
}

/// The three servers (primary n21, replicas n8 and n32) after c1's lock reached the
/// primary: the write waits for both replicas; its `Replicate`s to n8 and to n32, not
/// delivered yet.
fn started() -> (S, S, S, ChordMsg<4>, ChordMsg<4>) {
    let (mut p, a, b) = servers();
    let mut out = O::new();
    p.step(C1, &lock(), &mut out).unwrap();
    let (to_a, to_b) = (replicate_to(&out, A), replicate_to(&out, B));
    (p, a, b, to_a, to_b)
}

fn answer(out: &O) -> Option<Answer> {
    out.iter().find_map(|o| match o.msg {
        ChordMsg::Reply { token, answer, .. } if o.to == C1 && token == TOKEN => Some(answer),
        _ => None,
    })
}

/// The replica message to n32 is lost with its connection (the model's short cut): the
/// write waits. Reconnecting to n8, which acknowledged, sends nothing; reconnecting to n32
/// sends the very same `Replicate`, and its acknowledgement completes the write.
#[test]
fn reconnecting_resends_the_unacknowledged_replica_write() {
    let (mut p, mut a, mut b, to_a, to_b) = started();
    let mut out = O::new();
    a.step(Addr::Node(P), &to_a, &mut out).unwrap();
    let ack_a = out.pop().unwrap();
    p.step(Addr::Node(A), &ack_a.msg, &mut out).unwrap();
    assert_eq!(answer(&out), None, "n32 has not acknowledged");
    assert_eq!(p.pending(), 1);
    // `to_b` is lost. The link to n8 comes back: nothing is owed to it.
    let before = p.clone();
    out.clear();
    assert_eq!(p.reconnected(A, &mut out), Ok(0));
    assert!(out.is_empty());
    // The link to n32 comes back: the lost message again, and nothing changed here.
    assert_eq!(p.reconnected(B, &mut out), Ok(1));
    assert_eq!(p, before);
    let again = out.pop().unwrap();
    assert_eq!(again.to, Addr::Node(B));
    assert_eq!(again.msg, to_b);
    let rep = b.step(Addr::Node(P), &again.msg, &mut out).unwrap();
    assert!(rep.contains(Rule::Replicated));
    assert_eq!(b.holder(Key(10)), Some(ClientId(1)));
    let ack_b = out.pop().unwrap();
    let rep = p.step(Addr::Node(B), &ack_b.msg, &mut out).unwrap();
    assert!(rep.contains(Rule::WriteAcknowledged));
    assert_eq!(answer(&out), Some(Answer::Granted));
    assert_eq!(p.pending(), 0);
    out.clear();
    assert_eq!(
        p.reconnected(B, &mut out),
        Ok(0),
        "nothing in progress any more"
    );
}

/// The replica applied the write but its acknowledgement was lost: the copy sent on
/// reconnection is acknowledged again and changes nothing at the replica; the primary
/// then answers. A copy of an older epoch is refused as any old write, and the refusal
/// redirects the write.
#[test]
fn a_duplicate_replicate_is_acknowledged_again_and_not_applied_twice() {
    let (mut p, mut a, mut b, to_a, to_b) = started();
    let mut out = O::new();
    // n32 applies it and acknowledges; the acknowledgement is lost.
    b.step(Addr::Node(P), &to_b, &mut out).unwrap();
    out.clear();
    let before = b.clone();
    p.reconnected(B, &mut out).unwrap();
    let again = out.pop().unwrap();
    let rep = b.step(Addr::Node(P), &again.msg, &mut out).unwrap();
    assert!(rep.contains(Rule::Idempotent), "{rep:?}");
    assert!(!rep.contains(Rule::Replicated), "applied twice: {rep:?}");
    assert_eq!(b, before, "a duplicate changes nothing at the replica");
    let ack = out.pop().unwrap();
    assert!(matches!(ack.msg, ChordMsg::ReplicaAck { key: Key(10), token, .. } if token == TOKEN));
    p.step(Addr::Node(B), &ack.msg, &mut out).unwrap();
    assert_eq!(answer(&out), None, "n8 has not acknowledged yet");
    // n8 installed a newer view meanwhile: the copy of epoch 0 is refused, not applied.
    let v1 = View {
        epoch: 1,
        members: 0b111,
    };
    a.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    out.clear();
    p.reconnected(A, &mut out).unwrap();
    let again = out.pop().unwrap();
    assert_eq!(again.msg, to_a);
    let rep = a.step(Addr::Node(P), &again.msg, &mut out).unwrap();
    assert!(rep.contains(Rule::Stale) && !rep.contains(Rule::Replicated));
    assert_eq!(a.holder(Key(10)), None);
    let nack = out.pop().unwrap();
    assert_eq!(nack.msg, ChordMsg::ReplicaNack { view: v1 });
    p.step(Addr::Node(A), &nack.msg, &mut out).unwrap();
    assert_eq!(answer(&out), Some(Answer::Redirect(v1)));
    assert_eq!(p.pending(), 0);
}

/// A peer that is no slot, or the server itself, is refused; so is an output buffer too
/// small for the copies. Nothing is sent and nothing changes.
#[test]
fn a_bad_peer_or_a_full_buffer_is_refused_and_sends_nothing() {
    let (mut p, ..) = started();
    let mut out = O::new();
    let before = p.clone();
    assert_eq!(
        p.reconnected(NodeId(3), &mut out),
        Err(ChordError::BadSender)
    );
    assert_eq!(p.reconnected(P, &mut out), Err(ChordError::BadSender));
    assert!(out.is_empty());
    let mut full: heapless::Vec<Out<4>, 1> = heapless::Vec::new();
    full.push(Out {
        to: C1,
        msg: ChordMsg::Fetch,
    })
    .unwrap();
    assert_eq!(p.reconnected(B, &mut full), Err(ChordError::OutputsFull));
    assert_eq!(full.len(), 1);
    assert_eq!(p, before);
    // A server that lost its lease dropped its writes: nothing to send again.
    p.stop();
    assert_eq!(p.reconnected(B, &mut out), Ok(0));
}

/// A write in progress does not outlive its view: installing a newer view answers it with
/// a redirect and forgets it, so what `reconnected` sends is always in the view the write
/// was first sent in (the server's view). Were the write kept, its copy would have to
/// carry its own, older view — sent with the newer one, a replica that installed that
/// view would accept a write of an old epoch from a server that may no longer be the
/// key's primary — and this test fails: something is sent after the view change.
#[test]
fn a_write_in_progress_ends_with_its_view_and_is_not_resent_in_the_next() {
    let (mut p, _, mut b, _, to_b) = started();
    assert!(matches!(to_b, ChordMsg::Replicate { view, .. } if view == V));
    let mut out = O::new();
    assert_eq!(p.reconnected(B, &mut out), Ok(1));
    assert_eq!(
        out.pop().unwrap().msg,
        to_b,
        "first sent in V, sent again in V"
    );
    let v1 = View {
        epoch: 1,
        members: 0b111,
    };
    let rep = p
        .step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::ViewInstalled));
    assert_eq!(answer(&out), Some(Answer::Redirect(v1)));
    assert_eq!(p.pending(), 0);
    out.clear();
    assert_eq!(p.reconnected(B, &mut out), Ok(0), "{out:?}");
    assert!(out.is_empty());
    // The copy of V still on its way is refused by a replica in v1.
    b.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    out.clear();
    let rep = b.step(Addr::Node(P), &to_b, &mut out).unwrap();
    assert!(rep.contains(Rule::Stale) && b.holder(Key(10)).is_none());
}
