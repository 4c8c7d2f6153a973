//! What the tests of one ring server's copies, retries and incarnations share: the ring
//! n8, n21, n32 on a 6-bit circle, n8 alone as key 10's primary with no replica (so a write
//! is answered at once), and a request to it answered by exactly one reply. Each file uses it as
//! `crate::ring_one` (`kernel.rs` declares it once).

use hilock_kernel::ring::{
    Addr, Answer, ChordMsg, ClientId, Key, NodeId, Op, Out, Report, Ring, RingServer, Token, View,
};

/// A server of the three-node ring with request memories for every client id.
pub type S = RingServer<3, 4>;
/// Room for a step's outputs.
pub type O = heapless::Vec<Out<4>, 32>;

/// n8 alone: key 10's primary with no replica, so a write is answered at once.
pub const ALONE: View = View {
    epoch: 0,
    members: 0b001,
};
/// n8 and n21: key 10 is n21's, replicated on n8; n8's keys (22 to 63 and 0 to 8) are
/// replicated on n21.
pub const PAIR: View = View {
    epoch: 0,
    members: 0b011,
};
/// The key every test locks.
pub const K: Key = Key(10);

/// The ring n8, n21, n32 on a 6-bit circle.
pub fn ring() -> Ring<3> {
    Ring::new(6, [8, 21, 32]).unwrap()
}

/// n8 as shipped, alone in its view.
pub fn alone() -> S {
    S::new(NodeId(0), ring(), 1, ALONE).unwrap()
}

/// Request `seq` of incarnation `incarnation` of client `client`.
pub fn token(client: u8, incarnation: u64, seq: u64) -> Token {
    Token {
        client: ClientId(client),
        incarnation,
        seq,
    }
}

/// `op` of `token` on key 10, routed with `view`.
pub fn request(token: Token, op: Op, view: View) -> ChordMsg<4> {
    ChordMsg::Request {
        token,
        op,
        key: K,
        view,
    }
}

/// `op` of `token` on key 10 at n8 alone: the rules that fired and the one reply, which is
/// the step's only output.
pub fn ask(s: &mut S, token: Token, op: Op) -> (Report, Answer) {
    ask_key(s, token, op, K.0)
}

/// `op` of `token` on `key` at n8 alone (every key is its own, no replica): the rules that
/// fired and the one reply to the client, which is the step's only output.
pub fn ask_key(s: &mut S, token: Token, op: Op, key: u16) -> (Report, Answer) {
    let mut out = O::new();
    let msg = ChordMsg::Request {
        token,
        op,
        key: Key(key),
        view: ALONE,
    };
    let rep = s
        .step(Addr::Client(token.client), &msg, &mut out)
        .unwrap_or_else(|e| panic!("{op:?} of key {key} by {token:?}: {e}"));
    assert_eq!(out.len(), 1, "one reply and nothing else: {out:?}");
    match out[0].msg {
        ChordMsg::Reply {
            token: t, answer, ..
        } if t == token && out[0].to == Addr::Client(token.client) => (rep, answer),
        ref m => panic!("not the reply: {m:?}"),
    }
}
