//! Checks for the mutants of the chord group (`kernel/src/chord/`) that cargo-mutants' pass 8
//! missed with its first, cheap stage (the kernel's unit tests, `chord_reconnect.rs` and
//! `chord_retry.rs`; spec/MUTANTS.md, "Pass 8, chord"). The comment above each test names
//! the mutants it kills.

use hilock_kernel::chord::fingers::{closest_preceding, route};
use hilock_kernel::chord::vnodes::{Point, VRing};
use hilock_kernel::chord::{
    Addr, Answer, ChordClient, ChordError, ChordMsg, ClientId, Key, NodeId, Op, Out, Ring, Rule,
    Token, View,
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
        seq: 1,
    };
    let mut none = heapless::Vec::<Out<4>, 0>::new();
    assert_eq!(
        c.start(Op::Unlock, Key(10), &mut none),
        Err(ChordError::Busy)
    );
    let mut out = O::new();
    c.on_reply(token, Answer::Granted, &mut out).unwrap();
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
