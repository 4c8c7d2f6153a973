//! The ring engine's kernel parts (`kernel/src/ring/`; the Chord lock service paper,
//! `spec/SPEC.md` section 4) one guard at a time: the error texts; the client of Fig. 4
//! (request numbers, output room, a timed-out request resent to the new service node);
//! Chord's finger routing on sparse circles (§2.1, `fingers`, `vnodes`); the paper's server
//! of Fig. 2 (`PaperNode`: the lock table changed in place, the backup RPCs, leave (d) and
//! join (e) with their output bound, the remote table operations); and hilock's replicated
//! server (`RingServer`): its output bound, the copies owed to a reconnected peer, a stale
//! retry answered from the entry, replica versions, the hand-over of moved arcs at a join,
//! a full replica, views that change by one epoch, and the requests a newer view decides
//! or redirects. The comment above each test names the mutants it kills: the kernel's unit
//! tests, `ring_reconnect.rs` and `ring_retry.rs` missed them (`docs/verification.md`,
//! "Mutation testing").

use hilock_kernel::msg::Sink;
use hilock_kernel::ring::fingers::{closest_preceding, route};
use hilock_kernel::ring::vnodes::{Point, VRing};
use hilock_kernel::ring::{
    Addr, Answer, Change, ChordClient, ChordError, ChordMsg, ClientId, Entry, Key, NodeId, Op, Out,
    PaperNode, Ring, Rule, Token, View,
};

type O = heapless::Vec<Out<4>, 8>;

fn ring() -> Ring<3> {
    Ring::new(6, [8, 21, 32]).unwrap()
}

const ALL: View = View {
    epoch: 0,
    members: 0b111,
};

// mod.rs: `<ChordError as Display>::fmt` replaced with `Ok(Default::default())`.
#[test]
fn every_chord_error_has_its_own_text() {
    use ChordError::*;
    let all = [
        BadRing,
        BadKey(Key(70)),
        BadView,
        NotMember(NodeId(2)),
        BadSender,
        WrongVariant,
        TableFull,
        BadReplication,
        Busy,
        OutputsFull,
        SeqExhausted,
    ];
    let texts: Vec<String> = all.iter().map(|e| e.to_string()).collect();
    for (i, t) in texts.iter().enumerate() {
        assert!(!t.is_empty(), "{:?}", all[i]);
        assert!(!texts[..i].contains(t), "{t}");
    }
    assert!(BadKey(Key(70)).to_string().contains("70"));
}

// mod.rs: `room` with `out.room() < need` → `<=` (a buffer with exactly the room a step
// needs would be refused); client.rs: `ChordClient::seq` replaced with 0 or 1.
#[test]
fn a_client_request_fits_a_buffer_of_one_and_numbers_count_up() {
    let mut c = ChordClient::new(ClientId(1), ring(), ALL).unwrap();
    assert_eq!(c.seq(), 0);
    let mut out = heapless::Vec::<Out<4>, 1>::new();
    c.start(Op::Lock, Key(10), &mut out).unwrap();
    assert_eq!(c.seq(), 1);
    assert_eq!(out[0].to, Addr::Node(NodeId(1)));
    let token = Token {
        client: ClientId(1),
        incarnation: 0,
        seq: 1,
    };
    let mut none = heapless::Vec::<Out<4>, 0>::new();
    assert_eq!(
        c.start(Op::Unlock, Key(10), &mut none),
        Err(ChordError::Busy)
    );
    let mut out = O::new();
    c.on_reply(token, 0, Answer::Granted, &mut out).unwrap();
    assert_eq!(
        c.start(Op::Unlock, Key(10), &mut none),
        Err(ChordError::OutputsFull)
    );
    c.start(Op::Unlock, Key(10), &mut out).unwrap();
    assert_eq!(c.seq(), 2);
}

// client.rs: `ChordClient::timeout` replaced with `Ok(Default::default())`: a timed-out
// request is looked up again with the given view and resent with the same number.
#[test]
fn a_timed_out_request_is_resent_to_the_new_service_node() {
    let mut c = ChordClient::new(ClientId(3), ring(), ALL).unwrap();
    let mut out = O::new();
    c.start(Op::Lock, Key(10), &mut out).unwrap();
    out.clear();
    // n21 (slot 1) is gone: key 10 goes to n32 (slot 2).
    let v1 = View {
        epoch: 1,
        members: 0b101,
    };
    let rep = c.timeout(v1, &mut out).unwrap();
    assert!(rep.contains(Rule::Resent));
    assert_eq!(c.view(), v1);
    assert_eq!(
        out.as_slice(),
        [Out {
            to: Addr::Node(NodeId(2)),
            msg: ChordMsg::Request {
                token: Token {
                    client: ClientId(3),
                    incarnation: 0,
                    seq: 1
                },
                op: Op::Lock,
                key: Key(10),
                view: v1
            }
        }]
    );
}

fn pt(ident: u32, n: u16) -> Point {
    Point {
        ident,
        node: NodeId(n),
    }
}

// fingers.rs, `open`: the whole circle `1u64 << bits` → `>>` (the interval `(a, a)` would
// be empty), and `ax > 0` → `>=` (`a` itself would be inside `(a, b)`). On a 6-bit circle
// with points 0, 10 and 40, the finger of 0 closest before key 0 (the whole circle but 0)
// is its highest, 40; on one with points 0 and 60, the fingers 3, 4 and 5 of 60 are 60
// itself, and the closest before key 30 is 0.
#[test]
fn closest_preceding_fingers_on_sparse_circles() {
    let mut pts = [pt(0, 0), pt(10, 1), pt(40, 2)];
    let r = VRing::new(6, &mut pts).unwrap();
    assert_eq!(closest_preceding(&r, 0, 0).unwrap(), 2);
    let mut pts = [pt(0, 0), pt(60, 1)];
    let r = VRing::new(6, &mut pts).unwrap();
    assert_eq!(closest_preceding(&r, 1, 30).unwrap(), 0);
    assert_eq!(route(&r, 1, 30).unwrap().owner, 1);
    assert_eq!(route(&r, 0, 30).unwrap().hops, 1);
}

// fingers.rs, `open`: `ax < ab` → `<=` (`b` itself would be inside `(a, b)`): on a 6-bit
// circle with points 0, 10 and 32, the finger of 0 closest before key 32 is 10, not 32
// (finger 5 of 0 is 32 itself).
#[test]
fn the_key_itself_does_not_precede_the_key() {
    let mut pts = [pt(0, 0), pt(10, 1), pt(32, 2)];
    let r = VRing::new(6, &mut pts).unwrap();
    assert_eq!(closest_preceding(&r, 0, 32).unwrap(), 1);
}

// fingers.rs, `closest_preceding`: the fall-back `(at + 1) % len` (`+` → `-`/`*`, `%` →
// `/`/`+`): with no finger before the key (the key lies between the point and its
// successor), the answer is the successor, also across 0.
#[test]
fn without_a_finger_before_the_key_the_successor_is_next() {
    let mut pts = [pt(0, 0), pt(10, 1), pt(40, 2)];
    let r = VRing::new(6, &mut pts).unwrap();
    assert_eq!(closest_preceding(&r, 2, 0).unwrap(), 0);
    assert_eq!(closest_preceding(&r, 2, 63).unwrap(), 0);
    assert_eq!(closest_preceding(&r, 0, 5).unwrap(), 1);
}

type P = PaperNode<3, 4>;
type PO = heapless::Vec<Out<4>, 16>;

/// A sink with room for exactly `room` messages: what does not fit is lost (and counted).
struct Exact {
    room: usize,
    got: Vec<Out<4>>,
    lost: usize,
}

impl Sink<Out<4>> for Exact {
    fn room(&self) -> usize {
        self.room - self.got.len()
    }
    fn put(&mut self, t: Out<4>) -> Result<(), Out<4>> {
        if self.got.len() < self.room {
            self.got.push(t);
            Ok(())
        } else {
            self.lost += 1;
            Err(t)
        }
    }
}

/// `client`'s first request, to `op` on `key`, routed with the full ring ([`req`]).
fn client_req(client: u8, op: Op, key: u16) -> ChordMsg<4> {
    req(client, 1, op, key, ALL).1
}

fn paper_ask(n: &mut P, client: u8, op: Op, key: u16) -> Result<PO, ChordError> {
    let mut out = PO::new();
    n.step(
        Addr::Client(ClientId(client)),
        &client_req(client, op, key),
        &mut out,
    )?;
    Ok(out)
}

/// n21 alone on the ring: it answers at once.
fn alone() -> P {
    let v = View {
        epoch: 0,
        members: 0b010,
    };
    P::new(NodeId(1), ring(), v).unwrap()
}

// paper.rs, `modify`: `e.key == k` → `!=` (the unlock would append a second entry instead
// of changing the first); `modify_fits` replaced with `Ok(())` or its `==` → `!=` (a lock
// of a new key on a full table would be answered and not recorded).
#[test]
fn the_paper_table_changes_in_place_and_refuses_when_full() {
    let mut n = alone();
    for k in [9, 10, 11, 12] {
        paper_ask(&mut n, 1, Op::Lock, k).unwrap();
    }
    paper_ask(&mut n, 1, Op::Unlock, 10).unwrap();
    assert!(!n.is_locked(Key(10)) && n.is_locked(Key(11)));
    assert_eq!(n.olock().len(), 4);
    paper_ask(&mut n, 1, Op::Lock, 10).unwrap();
    assert!(n.is_locked(Key(10)));
    let before = n.clone();
    assert_eq!(
        paper_ask(&mut n, 1, Op::Lock, 13).err(),
        Some(ChordError::TableFull)
    );
    assert_eq!(n, before);
}

// paper.rs, (d) `append` after the predecessor left: `get` replaced with `None` or its `==`
// → `!=`, and `keys` with its `!` deleted: n21 backs up n8's key 5 and serves key 15; when
// n8 leaves, n21 takes key 5 over, backs it up on its new successor n32, and fetches its
// new predecessor's table.
#[test]
fn after_the_predecessor_left_its_keys_are_backed_up_on_the_successor() {
    let mut n = P::new(NodeId(1), ring(), ALL).unwrap();
    let mut out = PO::new();
    let backup = ChordMsg::BackupModify {
        entry: Entry {
            key: Key(5),
            locked: true,
        },
        token: Token {
            client: ClientId(2),
            incarnation: 0,
            seq: 1,
        },
    };
    n.step(Addr::Node(NodeId(0)), &backup, &mut out).unwrap();
    paper_ask(&mut n, 1, Op::Lock, 15).unwrap();
    n.set_view(View {
        epoch: 1,
        members: 0b110,
    })
    .unwrap();
    out.clear();
    let rep = n
        .step(
            Addr::Chord,
            &ChordMsg::Notify(Change::PredecessorLeft),
            &mut out,
        )
        .unwrap();
    assert!(rep.contains(Rule::Append));
    let five = Entry {
        key: Key(5),
        locked: true,
    };
    assert_eq!(
        out.as_slice(),
        [
            Out {
                to: Addr::Node(NodeId(2)),
                msg: ChordMsg::BackupInsert { entry: five }
            },
            Out {
                to: Addr::Node(NodeId(2)),
                msg: ChordMsg::Fetch
            }
        ]
    );
    assert!(n.is_locked(Key(5)) && n.is_locked(Key(15)) && n.olock_b().is_empty());
}

// paper.rs: `PaperNode::MAX_OUTPUTS = 2 * T + 2` with its `*` or a `+` replaced. Pinned
// to the documented bound; and (e) `remove` with four keys to hand over sends 2 · 4 + 1
// messages, all of which fit a sink with exactly that room.
#[test]
fn the_paper_output_bound_holds_for_a_full_hand_over() {
    assert_eq!(P::MAX_OUTPUTS, 2 * 4 + 2);
    // n32 (slot 2) alone serves every key; keys 9..12 belong to n21 once it joins.
    let mut n = P::new(
        NodeId(2),
        ring(),
        View {
            epoch: 0,
            members: 0b100,
        },
    )
    .unwrap();
    let mut out = PO::new();
    for k in [9, 10, 11, 12] {
        n.step(
            Addr::Client(ClientId(1)),
            &client_req(1, Op::Lock, k),
            &mut out,
        )
        .unwrap();
    }
    n.set_view(View {
        epoch: 1,
        members: 0b110,
    })
    .unwrap();
    let mut sink = Exact {
        room: P::MAX_OUTPUTS,
        got: Vec::new(),
        lost: 0,
    };
    let rep = n
        .step(
            Addr::Chord,
            &ChordMsg::Notify(Change::PredecessorJoined),
            &mut sink,
        )
        .unwrap();
    assert!(rep.contains(Rule::Remove));
    assert_eq!((sink.got.len(), sink.lost), (9, 0));
    assert!(n.olock().is_empty());
}

// paper.rs: `PaperNode::member` replaced with `Ok(())` (a node outside its view has no
// successor and serves nothing); the check `succ() != id && waiting.is_full()` with `!=` →
// `==` (a fifth backup RPC in flight would be lost).
#[test]
fn the_paper_node_refuses_outside_its_view_and_with_every_rpc_slot_taken() {
    let mut out = n21_of(View {
        epoch: 0,
        members: 0b101,
    });
    assert_eq!(
        paper_ask(&mut out, 1, Op::Lock, 10).err(),
        Some(ChordError::NotMember(NodeId(1)))
    );
    // n21 with a successor: every lock waits for its backup RPC.
    let mut n = n21_of(ALL);
    for k in [9, 10, 11, 12] {
        let sent = paper_ask(&mut n, 1, Op::Lock, k).unwrap();
        assert!(matches!(sent[0].msg, ChordMsg::BackupModify { .. }));
    }
    let before = n.clone();
    assert_eq!(
        paper_ask(&mut n, 1, Op::Unlock, 9).err(),
        Some(ChordError::TableFull)
    );
    assert_eq!(n, before);
}

fn n21_of(v: View) -> P {
    P::new(NodeId(1), ring(), v).unwrap()
}

// paper.rs, `apply`: the match arms of `BackupDelete`, `BackupInsert`, `Insert` and `Fetch`
// deleted (the section 2.2.1 table operations a remote call runs).
#[test]
fn the_remote_table_operations_change_the_named_table() {
    let mut n = n21_of(ALL);
    let e = |key, locked| Entry {
        key: Key(key),
        locked,
    };
    let mut out = PO::new();
    let call = |n: &mut P, msg: ChordMsg<4>, out: &mut PO| {
        n.step(Addr::Node(NodeId(0)), &msg, out).unwrap()
    };
    let rep = call(
        &mut n,
        ChordMsg::BackupInsert { entry: e(5, true) },
        &mut out,
    );
    assert!(rep.contains(Rule::RemoteTableOp));
    call(
        &mut n,
        ChordMsg::BackupInsert { entry: e(6, false) },
        &mut out,
    );
    assert_eq!(n.olock_b(), [e(5, true), e(6, false)]);
    call(&mut n, ChordMsg::BackupDelete { key: Key(5) }, &mut out);
    assert_eq!(n.olock_b(), [e(6, false)]);
    let rep = call(&mut n, ChordMsg::Insert { entry: e(15, true) }, &mut out);
    assert!(rep.contains(Rule::RemoteTableOp));
    assert_eq!(n.olock(), [e(15, true)]);
    assert!(out.is_empty());
    let rep = call(&mut n, ChordMsg::Fetch, &mut out);
    assert!(rep.contains(Rule::FetchServed));
    let mut entries = heapless::Vec::new();
    entries.push(e(15, true)).unwrap();
    assert_eq!(
        out.as_slice(),
        [Out {
            to: Addr::Node(NodeId(0)),
            msg: ChordMsg::FetchReply { entries }
        }]
    );
}

type RS = hilock_kernel::ring::RingServer<3, 4>;

// replicated.rs: `RingServer::settled_in` replaced with `true` or its `&&` → `||` (a view
// with the same members but another epoch is not the server's view); `stopped` replaced
// with `true`; `MAX_OUTPUTS = T + 2 * N + 1` with any `+` or `*` replaced (pinned to the
// documented sum).
#[test]
fn ring_server_settled_stopped_and_its_output_bound() {
    let mut s = RS::new(NodeId(1), ring(), 1, ALL).unwrap();
    assert!(s.settled_in(ALL));
    let next = View {
        epoch: 1,
        members: 0b111,
    };
    assert!(!s.settled_in(next));
    assert!(!s.stopped());
    s.stop();
    assert!(s.stopped());
    assert_eq!(RS::MAX_OUTPUTS, 4 + 2 * 3 + 1);
}

/// n21 of the full ring with one replica, after c1's lock of key 10 (n21 is its primary,
/// n32 its replica): the write waits for n32's acknowledgement.
fn writing() -> RS {
    let mut s = RS::new(NodeId(1), ring(), 1, ALL).unwrap();
    let mut out = PO::new();
    s.step(
        Addr::Client(ClientId(1)),
        &client_req(1, Op::Lock, 10),
        &mut out,
    )
    .unwrap();
    assert!(matches!(out[0].msg, ChordMsg::Replicate { .. }), "{out:?}");
    assert_eq!(s.pending(), 1);
    s
}

// replicated.rs, `RingServer::reconnected`: `out.room() < n` → `<=`: the copies owed to a
// peer fit a buffer with exactly that room.
#[test]
fn the_copies_owed_to_a_reconnected_peer_fit_exact_room() {
    let s = writing();
    let mut one = heapless::Vec::<Out<4>, 1>::new();
    assert_eq!(s.reconnected(NodeId(2), &mut one), Ok(1));
    assert!(matches!(one[0].msg, ChordMsg::Replicate { .. }));
    let mut none = heapless::Vec::<Out<4>, 0>::new();
    assert_eq!(
        s.reconnected(NodeId(2), &mut none),
        Err(ChordError::OutputsFull)
    );
    assert_eq!(s.reconnected(NodeId(0), &mut none), Ok(0));
}

/// n8 alone (no replica): a write is answered at once. `op` of `token` on key 10.
fn alone_ask(s: &mut RS, client: u8, seq: u64, op: Op) -> (hilock_kernel::ring::Report, Answer) {
    let token = Token {
        client: ClientId(client),
        incarnation: 0,
        seq,
    };
    let view = View {
        epoch: 0,
        members: 0b001,
    };
    let msg = ChordMsg::Request {
        token,
        op,
        key: Key(10),
        view,
    };
    let mut out = PO::new();
    let rep = s
        .step(Addr::Client(ClientId(client)), &msg, &mut out)
        .unwrap();
    match out.as_slice() {
        [Out {
            msg: ChordMsg::Reply {
                token: t, answer, ..
            },
            ..
        }] if *t == token => (rep, *answer),
        o => panic!("not one reply: {o:?}"),
    }
}

// replicated.rs, `RingServer::decide`: the answer of a stale lock retry (the retry fence),
// `Op::Lock if holder == me` with the guard replaced by `true` or `false`, or `==` → `!=`,
// and the `Op::Lock` arm deleted: from the entry, Granted if the client holds the lock
// again, Refused if it released it.
#[test]
fn a_stale_lock_retry_is_answered_from_the_entry() {
    let view = View {
        epoch: 0,
        members: 0b001,
    };
    // The fence alone: within one view the request memory answers these copies first.
    let mut s = RS::new(NodeId(0), ring(), 1, view)
        .unwrap()
        .without_request_memory();
    assert_eq!(alone_ask(&mut s, 1, 1, Op::Lock).1, Answer::Granted);
    assert_eq!(alone_ask(&mut s, 1, 2, Op::Unlock).1, Answer::Released);
    let (rep, a) = alone_ask(&mut s, 1, 1, Op::Lock);
    assert!(rep.contains(Rule::Superseded));
    assert_eq!(a, Answer::Refused);
    assert_eq!(alone_ask(&mut s, 1, 3, Op::Lock).1, Answer::Granted);
    let (rep, a) = alone_ask(&mut s, 1, 2, Op::Lock);
    assert!(rep.contains(Rule::Superseded));
    assert_eq!(a, Answer::Granted);
    let (rep, a) = alone_ask(&mut s, 1, 2, Op::Unlock);
    assert!(rep.contains(Rule::Superseded));
    assert_eq!(a, Answer::Released);
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));
}

// replicated.rs, `RingServer::upsert`: `s.version > x.version` → `>=`: a replica keeps its
// entry against a write of the same version (and an older one); a newer one replaces it.
#[test]
fn a_replica_takes_only_newer_versions() {
    use hilock_kernel::ring::{Slot, Version};
    let mut s = RS::new(NodeId(2), ring(), 1, ALL).unwrap();
    let write = |s: &mut RS, client: u8, n: u32| {
        let token = Token {
            client: ClientId(client),
            incarnation: 0,
            seq: 1,
        };
        let slot = Slot {
            key: Key(10),
            holder: Some(ClientId(client)),
            incarnation: 0,
            version: Version { epoch: 0, n },
            writer: Some(token),
        };
        let mut out = PO::new();
        let msg = ChordMsg::Replicate {
            view: ALL,
            slot,
            token,
        };
        s.step(Addr::Node(NodeId(1)), &msg, &mut out).unwrap();
        assert!(matches!(out[0].msg, ChordMsg::ReplicaAck { .. }));
    };
    write(&mut s, 1, 5);
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));
    write(&mut s, 2, 5);
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));
    write(&mut s, 3, 4);
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));
    write(&mut s, 3, 6);
    assert_eq!(s.holder(Key(10)), Some(ClientId(3)));
}

// replicated.rs, `RingServer::install` (the hand-over of moved arcs): the member loop's
// skip `yn == id || !v.has(yn)` (`||` → `&&`), the ready-arc test (`&` → `|`/`^`), the
// moved-arc test `new & bit != 0 && was & bit == 0` (`&&` → `||`, `&` → `|`/`^`), the
// slots of the moved arcs (`&` → `|`/`^`, `<<` → `>>`, `!=` → `==`) and the entries kept
// (`!=` → `==`, `&` → `|`/`^`, `<<` → `>>`). n8 and n32 with one replica; n32 is key 10's primary (n8 its replica) and
// holds it for c1. n21 joins: key 10's arc (arc 1) and n8's arc (arc 0, where n21 becomes
// n8's replica) move to n21, with key 10's entry; n32 keeps arcs 1 and 2 and its entry.
#[test]
fn a_join_hands_the_moved_arcs_over_with_their_entries() {
    let v0 = View {
        epoch: 0,
        members: 0b101,
    };
    let mut s = RS::new(NodeId(2), ring(), 1, v0).unwrap();
    // c1 locks key 10 (arc 1) and c2 key 30 (arc 2, which does not move).
    let mut written = Vec::new();
    for (c, k) in [(1, 10), (2, 30)] {
        let lock = ChordMsg::Request {
            token: Token {
                client: ClientId(c),
                incarnation: 0,
                seq: 1,
            },
            op: Op::Lock,
            key: Key(k),
            view: v0,
        };
        let mut out = PO::new();
        s.step(Addr::Client(ClientId(c)), &lock, &mut out).unwrap();
        let (ChordMsg::Replicate { slot, token, .. }, Addr::Node(NodeId(0))) =
            (&out[0].msg, out[0].to)
        else {
            panic!("{out:?}")
        };
        let ack = ChordMsg::ReplicaAck {
            view: v0,
            key: Key(k),
            token: *token,
        };
        written.push(*slot);
        s.step(Addr::Node(NodeId(0)), &ack, &mut out).unwrap();
        assert_eq!(s.holder(Key(k)), Some(ClientId(c)));
    }
    // n8, key 40's primary (arc 0), writes it here, its replica.
    let forty = hilock_kernel::ring::Slot {
        key: Key(40),
        holder: Some(ClientId(3)),
        incarnation: 0,
        version: hilock_kernel::ring::Version { epoch: 0, n: 1 },
        writer: None,
    };
    let copy = ChordMsg::Replicate {
        view: v0,
        slot: forty,
        token: Token {
            client: ClientId(3),
            incarnation: 0,
            seq: 1,
        },
    };
    let mut out = PO::new();
    s.step(Addr::Node(NodeId(0)), &copy, &mut out).unwrap();
    assert_eq!(s.holder(Key(40)), Some(ClientId(3)));
    let slot = written[0];
    out.clear();
    out.clear();
    let v1 = v0.join(NodeId(1));
    let rep = s
        .step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    assert!(rep.contains(Rule::ViewInstalled));
    let mut slots = heapless::Vec::new();
    slots.push(slot).unwrap();
    slots.push(forty).unwrap();
    assert_eq!(
        out.as_slice(),
        [Out {
            to: Addr::Node(NodeId(1)),
            msg: ChordMsg::Transfer {
                view: v1,
                arcs: 0b011,
                slots
            }
        }]
    );
    assert_eq!(s.slots(), written);
    assert!(s.settled_in(v1));
}

/// n32 (one replica), outside n8's ring, once it has installed the view that lets it in
/// (epoch 1: n8 and n32): it holds every arc, has received none, and sent nothing.
fn n32_joined() -> (RS, View) {
    let v0 = View {
        epoch: 0,
        members: 0b001,
    };
    let mut s = RS::new(NodeId(2), ring(), 1, v0).unwrap();
    let v1 = View {
        epoch: 1,
        members: 0b101,
    };
    let mut out = PO::new();
    s.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    assert!(out.is_empty() && !s.settled_in(v1));
    (s, v1)
}

// replicated.rs, `RingServer::install`: only ready arcs are handed over (`ready & (1 << a)
// == 0` with `&` → `|`/`^`). n32 joins n8 and has not received its arcs yet when n21
// joins too: it hands nothing over (the arcs' holders do).
#[test]
fn a_server_hands_over_only_the_arcs_it_has() {
    let (mut s, v1) = n32_joined();
    let mut out = PO::new();
    let v2 = v1.join(NodeId(1));
    s.step(Addr::Chord, &ChordMsg::NewView(v2), &mut out)
        .unwrap();
    assert!(out.is_empty(), "{out:?}");
}

/// The entry of `key` held by c1, version `n` of `view`'s epoch, written by c1's request
/// number `n`.
fn c1_entry(view: View, key: u16, n: u32) -> (hilock_kernel::ring::Slot, Token) {
    let token = Token {
        client: ClientId(1),
        incarnation: 0,
        seq: u64::from(n),
    };
    let slot = hilock_kernel::ring::Slot {
        key: Key(key),
        holder: Some(ClientId(1)),
        incarnation: 0,
        version: hilock_kernel::ring::Version {
            epoch: view.epoch,
            n,
        },
        writer: Some(token),
    };
    (slot, token)
}

/// `from`'s replica write of [`c1_entry`].
fn replica_copy(from: u16, view: View, key: u16, n: u32) -> (Addr, ChordMsg<4>) {
    let (slot, token) = c1_entry(view, key, n);
    (
        Addr::Node(NodeId(from)),
        ChordMsg::Replicate { view, slot, token },
    )
}

// replicated.rs, `check` of a replica write: the early `Ok` for a write of an older view
// or of an arc the server does not hold (answered by `apply` with a NACK or as stale), and
// the room check of the others (`view.epoch < v.epoch` with `<` → `==`/`>`/`<=`,
// `||` → `&&`, the arc test `&` → `|`/`^`, `<<` → `>>`, `== 0` → `!= 0`). n32 (one
// replica) holds arcs 1 and 2; its table of 4 is full of n21's keys 11..14.
#[test]
fn a_full_replica_refuses_a_new_write_and_still_answers_stale_ones() {
    let mut s = n32_with(ALL, 1, &[11, 12, 13, 14]);
    let copy = replica_copy;
    let mut out = PO::new();
    let before = s.clone();
    // A new key of a held arc: refused with a message to the primary, nothing applied.
    let (from, m) = copy(1, ALL, 15, 15);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::ReplicaFull), "{rep:?}");
    assert_eq!(s, before);
    assert_eq!(
        out.as_slice(),
        [Out {
            to: Addr::Node(NodeId(1)),
            msg: ChordMsg::ReplicaFull {
                view: ALL,
                key: Key(15),
                version: hilock_kernel::ring::Version { epoch: 0, n: 15 },
            }
        }]
    );
    // A key of arc 0, which n32 does not hold: stale, nothing written.
    out.clear();
    let (from, m) = copy(0, ALL, 40, 1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::Stale) && out.is_empty());
    assert_eq!(s, before);
    // A write of the previous view: refused with the server's view.
    let v1 = View {
        epoch: 1,
        members: 0b111,
    };
    s.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
        .unwrap();
    out.clear();
    let (from, m) = copy(1, ALL, 15, 16);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::Stale));
    assert_eq!(
        out.as_slice(),
        [Out {
            to: Addr::Node(NodeId(1)),
            msg: ChordMsg::ReplicaNack { view: v1 }
        }]
    );
}

// ring.rs: `View::has` with `n < 16` → `<=` (slot 16 would shift a u16 by 16); `View::join`
// with `|` → `^` (joining a member would remove it); `View::leave`'s epoch `+ 1` → `-`/`*`
// and its member mask (`&` → `|`/`^`, `!` deleted, `<<` → `>>`, the `& 15` → `|`/`^`).
#[test]
fn views_join_and_leave_by_one_epoch() {
    let v = View {
        epoch: 3,
        members: 0b1010,
    };
    assert!(v.has(NodeId(1)) && v.has(NodeId(3)) && !v.has(NodeId(2)));
    assert!(!v.has(NodeId(16)) && !v.has(NodeId(17)));
    assert_eq!(
        v.join(NodeId(3)),
        View {
            epoch: 4,
            members: 0b1010
        }
    );
    assert_eq!(
        v.join(NodeId(0)),
        View {
            epoch: 4,
            members: 0b1011
        }
    );
    assert_eq!(
        v.leave(NodeId(3)),
        View {
            epoch: 4,
            members: 0b0010
        }
    );
    assert_eq!(
        v.leave(NodeId(0)),
        View {
            epoch: 4,
            members: 0b1010
        }
    );
    let wide = View {
        epoch: 0,
        members: 0xffff,
    };
    assert_eq!(wide.leave(NodeId(15)).members, 0x7fff);
}

// ring.rs: `Ring::bits` replaced with 0 or 1; `Ring::replicas` with the member bit `1 <<
// n` → `>>`.
#[test]
fn a_ring_knows_its_bits_and_the_replicas_of_a_key() {
    let r = ring();
    assert_eq!(r.bits(), 6);
    assert_eq!(Ring::<2>::new(9, [3, 400]).unwrap().bits(), 9);
    // Key 10: n21 (slot 1), then n32 (slot 2), then n8 (slot 0).
    assert_eq!(r.replicas(ALL, Key(10), 1), 0b010);
    assert_eq!(r.replicas(ALL, Key(10), 2), 0b110);
    assert_eq!(r.replicas(ALL, Key(10), 3), 0b111);
    assert_eq!(r.replicas(ALL, Key(10), 5), 0b111);
}

// vnodes.rs: `<VnodeError as Display>::fmt` replaced with `Ok(Default::default())`.
#[test]
fn every_vnode_error_has_its_own_text() {
    use hilock_kernel::ring::vnodes::VnodeError::*;
    let texts: Vec<String> = [BadBits(40), Empty, OutsideCircle(99), NoSuchPoint(7)]
        .iter()
        .map(|e| e.to_string())
        .collect();
    for (i, t) in texts.iter().enumerate() {
        assert!(!t.is_empty() && !texts[..i].contains(t), "{t}");
    }
    assert!(texts[0].contains("40") && texts[2].contains("99") && texts[3].contains('7'));
}

/// `client`'s request number `seq` to `op` on `key`, routed with `view`.
fn req(client: u8, seq: u64, op: Op, key: u16, view: View) -> (Addr, ChordMsg<4>) {
    let token = Token {
        client: ClientId(client),
        incarnation: 0,
        seq,
    };
    (
        Addr::Client(ClientId(client)),
        ChordMsg::Request {
            token,
            op,
            key: Key(key),
            view,
        },
    )
}

/// n32 (slot 2, one replica) in `view`, with c1's entries of `keys` written here by `from`.
fn n32_with(view: View, from: u16, keys: &[u16]) -> RS {
    let mut s = RS::new(NodeId(2), ring(), 1, view).unwrap();
    let mut out = PO::new();
    for (i, &k) in keys.iter().enumerate() {
        let (from, m) = replica_copy(from, view, k, i as u32 + 1);
        let rep = s.step(from, &m, &mut out).unwrap();
        assert!(rep.contains(Rule::Replicated), "{k}: {rep:?}");
    }
    assert_eq!(s.slots().len(), keys.len());
    s
}

/// The one message of `out`, if it is a reply: its answer.
fn only_answer(out: &[Out<4>]) -> Option<Answer> {
    match out {
        [Out {
            msg: ChordMsg::Reply { answer, .. },
            ..
        }] => Some(*answer),
        _ => None,
    }
}

// replicated.rs, the view a request is decided in (`after`, `fits`): `after`'s
// `v.epoch > self.view.epoch` → `==` (a request of a newer view decided in the old one) or
// `>=` (a view of the server's epoch taken for a newer one); `fits`' `v.epoch >
// self.view.epoch` → `==`/`<`/`>=` and its kept-entry test `cov & (1 << arc) != 0` (`!=` →
// `==`, `&` → `|`/`^`, `<<` → `>>`): room is counted in the table as it is once the view
// is installed, which drops the entries of arcs the server no longer holds.
#[test]
fn a_request_is_decided_and_its_room_counted_in_the_view_it_installs() {
    // n32 in the full ring holds arcs 1 and 2; its table is full. n21 leaves: key 10
    // (arc 1) is n32's now, and a new entry does not fit: answered Full. Decided in the
    // old view, the request would be redirected, and the full table would go unnoticed.
    let mut s = n32_with(ALL, 1, &[11, 12, 25, 30]);
    let before = s.clone();
    let v1 = ALL.leave(NodeId(1));
    let mut out = PO::new();
    let (from, m) = req(2, 1, Op::Lock, 10, v1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::NoRoom), "{rep:?}");
    assert_eq!(s.slots(), before.slots());
    let answers: Vec<Answer> = out
        .iter()
        .filter_map(|o| match o.msg {
            ChordMsg::Reply { answer, .. } => Some(answer),
            _ => None,
        })
        .collect();
    assert_eq!(answers, [Answer::Full], "{out:?}");
    out.clear();

    // A view of the server's own epoch is the server's view: key 26 is n32's in it, so
    // the request is served (the forged view would send it to n8) ...
    let forged = View {
        epoch: 0,
        members: 0b001,
    };
    let mut s = n32_with(ALL, 1, &[11, 12, 25]);
    let (from, m) = req(2, 1, Op::Lock, 26, forged);
    s.step(from, &m, &mut out).unwrap();
    assert!(
        matches!(
            out.as_slice(),
            [Out {
                to: Addr::Node(NodeId(0)),
                msg: ChordMsg::Replicate { .. }
            }]
        ),
        "{out:?}"
    );
    // ... and its room is counted in the server's table, all of it.
    let mut s = before.clone();
    answered_full(&mut s, from, &m);

    // n32 of {n8, n32} holds every arc, and key 40 of arc 0 besides 25, 30 and 31 of arc 2:
    // full. n21 joins and takes arc 0 from n32: installing the view drops key 40, so key 26
    // fits.
    let v0 = View {
        epoch: 0,
        members: 0b101,
    };
    let mut s = n32_with(v0, 0, &[40, 25, 30, 31]);
    let v1 = v0.join(NodeId(1));
    out.clear();
    let (from, m) = req(2, 1, Op::Lock, 26, v1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::ViewInstalled) && rep.contains(Rule::WriteStarted));
    let keys: Vec<u16> = s.slots().iter().map(|e| e.key.0).collect();
    assert_eq!(keys, [25, 30, 31, 26]);
    // With keys 10 (arc 1) and 25, 30, 31 instead, installing drops nothing: full.
    let mut s = n32_with(v0, 0, &[10, 25, 30, 31]);
    let before = s.clone();
    answered_full(&mut s, from, &m);
    assert_eq!(s.slots(), before.slots());
}

/// `m` from `from` is a lock `s` has no room for: answered Full, nothing written.
fn answered_full(s: &mut RS, from: Addr, m: &ChordMsg<4>) {
    let before = s.slots().to_vec();
    let mut out = PO::new();
    let rep = s.step(from, m, &mut out).unwrap();
    assert!(rep.contains(Rule::NoRoom), "{rep:?}");
    assert_eq!(s.slots(), before.as_slice());
    let full = out.iter().any(|o| {
        matches!(
            o.msg,
            ChordMsg::Reply {
                answer: Answer::Full,
                ..
            }
        )
    });
    assert!(full, "{out:?}");
}

// replicated.rs, `decide`: a key with a write in progress is busy (`newer = v !=
// self.view` → `==`, `!newer` with the `!` deleted) and a key of an arc the server has not
// received yet is not served (`ready & (1 << arc) == 0` with `&` → `|`/`^`): both are
// answered Retry. `apply` of a transfer merges exactly the arcs it names and the server
// holds (`take = arcs & covered` with `&` → `|`; the entry test `take & (1 << arc) != 0`
// with `!=` → `==`, `&` → `|`/`^`, `<<` → `>>`).
#[test]
fn a_busy_key_and_an_arc_not_yet_received_are_answered_retry() {
    // c1's lock of key 10 waits for n32 at n21: c2's lock of the key is told to retry.
    let mut s = writing();
    let mut out = PO::new();
    let (from, m) = req(2, 1, Op::Lock, 10, ALL);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::RetryLater), "{rep:?}");
    assert_eq!(only_answer(&out), Some(Answer::Retry));
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));

    // n32 joins n8 and is handed arc 1 only (the transfer also carries an entry of arc 2).
    let (mut s, v1) = n32_joined();
    let mut slots = heapless::Vec::new();
    slots.push(c1_entry(v1, 10, 1).0).unwrap();
    slots.push(c1_entry(v1, 30, 2).0).unwrap();
    let transfer = ChordMsg::Transfer {
        view: v1,
        arcs: 0b010,
        slots,
    };
    let rep = s.step(Addr::Node(NodeId(0)), &transfer, &mut out).unwrap();
    assert!(rep.contains(Rule::TransferMerged));
    assert_eq!(s.holder(Key(10)), Some(ClientId(1)));
    assert_eq!(s.holder(Key(30)), None);
    assert!(!s.settled_in(v1));
    // Key 30 (arc 2, not received): retry; key 12 (arc 1, received): served.
    out.clear();
    let (from, m) = req(2, 1, Op::Lock, 30, v1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::RetryLater), "{rep:?}");
    assert_eq!(only_answer(&out), Some(Answer::Retry));
    out.clear();
    let (from, m) = req(2, 1, Op::Lock, 12, v1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::WriteStarted), "{rep:?}");

    // Decided before the view is installed, too (`check`: the arcs ready once a newer view
    // is installed are the ready ones it keeps, `self.ready & self.covered(v)` with `&` →
    // `|`/`^`). n32 joined n8 and has arcs 0 and 1, its table full of keys 10..13 of arc
    // 1, when n21 joins: n32 is key 30's primary then (arc 2, not received): retry, and
    // the full table does not matter.
    let (mut s, _) = n32_joined();
    let mut slots = heapless::Vec::new();
    for k in 10..14 {
        slots.push(c1_entry(v1, k, k as u32).0).unwrap();
    }
    let transfer = ChordMsg::Transfer {
        view: v1,
        arcs: 0b011,
        slots,
    };
    s.step(Addr::Node(NodeId(0)), &transfer, &mut out).unwrap();
    assert_eq!(s.slots().len(), 4);
    out.clear();
    let v2 = v1.join(NodeId(1));
    let (from, m) = req(2, 1, Op::Lock, 30, v2);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::ViewInstalled), "{rep:?}");
    assert!(rep.contains(Rule::RetryLater), "{rep:?}");
    assert_eq!(s.slots().len(), 4);
}

// replicated.rs, `check` of a request: the writes in progress count against the room only
// in the server's own view (`self.after(*view) == self.view` → `!=`): a request of a newer
// view redirects them all when it is applied. n21 waits for n32 on four writes (its
// capacity); c1's retry in the next view is served.
#[test]
fn the_writes_a_newer_view_redirects_leave_room() {
    let mut s = RS::new(NodeId(1), ring(), 1, ALL).unwrap();
    let mut out = PO::new();
    for (c, k) in [(1, 10), (2, 11), (3, 12), (4, 13)] {
        let (from, m) = req(c, 1, Op::Lock, k, ALL);
        s.step(from, &m, &mut out).unwrap();
    }
    assert_eq!(s.pending(), 4);
    out.clear();
    let v1 = View {
        epoch: 1,
        members: 0b111,
    };
    let (from, m) = req(1, 1, Op::Lock, 10, v1);
    let rep = s.step(from, &m, &mut out).unwrap();
    assert!(rep.contains(Rule::ViewInstalled) && rep.contains(Rule::WriteStarted));
    let redirects = out
        .iter()
        .filter(|o| {
            matches!(
                o.msg,
                ChordMsg::Reply {
                    answer: Answer::Redirect(v),
                    ..
                } if v == v1
            )
        })
        .count();
    assert_eq!(redirects, 4, "{out:?}");
    assert_eq!(s.pending(), 1);
}

// replicated.rs, `apply` of an acknowledgement: it completes the write of its key *and*
// request (`p.slot.key == *key && p.token == *token` with `&&` → `||`). An acknowledgement
// of c1's lock of key 10, sent again, does not complete c1's unlock of it.
#[test]
fn an_old_acknowledgement_does_not_complete_a_later_write_of_the_key() {
    let mut s = writing();
    let mut out = PO::new();
    let ack = ChordMsg::ReplicaAck {
        view: ALL,
        key: Key(10),
        token: Token {
            client: ClientId(1),
            incarnation: 0,
            seq: 1,
        },
    };
    let n32 = Addr::Node(NodeId(2));
    s.step(n32, &ack, &mut out).unwrap();
    assert_eq!(only_answer(&out), Some(Answer::Granted));
    out.clear();
    let (from, m) = req(1, 2, Op::Unlock, 10, ALL);
    s.step(from, &m, &mut out).unwrap();
    assert_eq!(s.pending(), 1);
    out.clear();
    let rep = s.step(n32, &ack, &mut out).unwrap();
    assert!(rep.contains(Rule::Stale), "{rep:?}");
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(s.pending(), 1);
}

// replicated.rs, `check` of a transfer: only the entries of arcs it names, the server
// holds and is not ready for count against the room (`taken`: `arcs & covered & !ready`
// with `&` → `|`; the entry test with `&` → `|`/`^`, `<<` → `>>`), and a transfer of an
// older view is stale, not counted (`view.epoch < v.epoch` → `>`); `apply` does not merge
// it (`<` → `>`).
#[test]
fn a_full_table_takes_no_new_arc_and_ignores_what_it_does_not_hold() {
    // n32 joins (view 1): four replica writes of view 1 fill its table before any
    // hand-over, so it is ready for no arc.
    let joined = View {
        epoch: 1,
        members: 0b111,
    };
    let outside = View {
        epoch: 0,
        members: 0b011,
    };
    let mut s = RS::new(NodeId(2), ring(), 1, outside).unwrap();
    let mut out = PO::new();
    for (i, &k) in [11u16, 12, 25, 30].iter().enumerate() {
        let (from, m) = replica_copy(1, joined, k, i as u32 + 1);
        let rep = s.step(from, &m, &mut out).unwrap();
        assert!(rep.contains(Rule::Replicated), "{k}: {rep:?}");
    }
    out.clear();
    let before = s.clone();
    let transfer = |view, arcs| {
        let mut slots = heapless::Vec::new();
        slots.push(c1_entry(view, 26, 9).0).unwrap();
        ChordMsg::Transfer { view, arcs, slots }
    };
    let n21 = Addr::Node(NodeId(1));
    // Arc 2, which n32 holds: key 26 does not fit.
    assert_eq!(
        s.step(n21, &transfer(joined, 0b100), &mut out),
        Err(ChordError::TableFull)
    );
    assert_eq!(s, before);
    // Arc 0, which n32 does not hold: nothing taken.
    s.step(n21, &transfer(joined, 0b001), &mut out).unwrap();
    assert_eq!(s.holder(Key(26)), None);
    assert_eq!(s.slots(), before.slots());
    // A transfer of the view before: stale.
    let v2 = View {
        epoch: 2,
        members: 0b111,
    };
    s.step(Addr::Chord, &ChordMsg::NewView(v2), &mut out)
        .unwrap();
    let rep = s.step(n21, &transfer(joined, 0b100), &mut out).unwrap();
    assert!(rep.contains(Rule::Stale), "{rep:?}");
    assert!(!rep.contains(Rule::TransferMerged), "{rep:?}");
    assert_eq!(s.slots(), before.slots());
    // A member ready for arc 2 (a first member, table full) does not merge a hand-over
    // of it, so it does not count against the room either.
    let mut m = n32_with(ALL, 1, &[11, 12, 25, 30]);
    let member = m.clone();
    let rep = m.step(n21, &transfer(ALL, 0b100), &mut out).unwrap();
    assert!(rep.contains(Rule::TransferMerged), "{rep:?}");
    assert_eq!(m, member);
}
