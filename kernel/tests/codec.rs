//! Bounded frames (`kernel/src/codec.rs`, cargo feature `codec`): every message kind,
//! encoded with every field at its largest value, is exactly its compile-time bound
//! `Msg::<Q>::max_frame(kind)`; ordinary messages of an `N`-node system are within it; a
//! buffer one byte short is refused; frames that are not one whole message are refused.
//!
//! The table of `docs/benchmarks.md` ("Bounded frames") is this file's output:
//!
//!     cargo test -p hilock-kernel --test kernel codec::frame_table -- --nocapture

use hilock_kernel::codec::{decode, encode, CodecError};
use hilock_kernel::{
    Frozen, LockId, Mode, ModeSet, Msg, MsgKind, NodeId, QueueEntry, ValueBlock, VALUE_LEN,
};

const KINDS: [MsgKind; 6] = [
    MsgKind::Request,
    MsgKind::Grant,
    MsgKind::Token,
    MsgKind::Release,
    MsgKind::Freeze,
    MsgKind::Busy,
];

/// A message of `kind` built from the given field values, the token's queue full (`Q`
/// entries of requesters `0..Q` mapped through `id`).
fn message<const Q: usize>(
    kind: MsgKind,
    id: impl Fn(usize) -> NodeId,
    counter: u32,
    fence: u64,
    prio: u8,
) -> Msg<Q> {
    let entry = |i: usize| QueueEntry {
        requester: id(i),
        mode: Mode::W,
        serial: counter,
        prio,
    };
    let frozen = Frozen::of(
        ModeSet::of(&[Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W]),
        prio,
    );
    let lock = LockId(id(0).0);
    match kind {
        MsgKind::Request => Msg::Request {
            lock,
            entry: entry(0),
            hop: counter,
        },
        MsgKind::Grant => Msg::Grant {
            lock,
            entry: entry(0),
            epoch: counter,
            recorded: Mode::W,
            frozen,
            fence,
            value: ValueBlock::new([0xff; VALUE_LEN]),
        },
        MsgKind::Token => Msg::Token {
            lock,
            entry: entry(0),
            // A u64 as the fence: any value in a long run.
            generation: fence,
            sender_owned: Mode::W,
            epoch: counter,
            frozen,
            queue: (0..Q).map(entry).collect(),
            fence,
            value: ValueBlock::new([0xff; VALUE_LEN]),
        },
        MsgKind::Release => Msg::Release {
            lock,
            owned: Mode::W,
            epoch: counter,
        },
        MsgKind::Freeze => Msg::Freeze {
            lock,
            modes: frozen,
            waiting: frozen,
        },
        MsgKind::Busy => Msg::Busy {
            lock,
            entry: entry(0),
        },
    }
}

/// The try-lock's request (`spec/SPEC.md` 1.12), of kind [`MsgKind::Request`]: the same
/// fields as `Msg::Request`, so the same bound.
fn try_request<const Q: usize>(msg: Msg<Q>) -> Msg<Q> {
    match msg {
        Msg::Request { lock, entry, hop } => Msg::TryRequest { lock, entry, hop },
        other => other,
    }
}

/// Every field at its type's largest value.
fn largest<const Q: usize>(kind: MsgKind) -> Msg<Q> {
    message(kind, |_| NodeId(u16::MAX), u32::MAX, u64::MAX, u8::MAX)
}

/// Encodes `msg` into a buffer of exactly `Msg::<Q>::MAX_FRAME` bytes, checks that it
/// decodes to itself, and returns the frame length.
fn frame_len<const Q: usize>(msg: &Msg<Q>) -> usize {
    let mut buf = [0u8; 4096];
    let frame = encode(msg, &mut buf[..Msg::<Q>::MAX_FRAME]).expect("MAX_FRAME bytes suffice");
    let len = frame.len();
    assert_eq!(decode::<Q>(frame).as_ref(), Ok(msg), "round trip");
    len
}

fn check<const N: usize, const Q: usize>() {
    for kind in KINDS {
        let bound = Msg::<Q>::max_frame(kind);
        assert!(bound <= Msg::<Q>::MAX_FRAME);
        // The bound is reached: every field at its largest value.
        let big = largest::<Q>(kind);
        assert_eq!(big.kind(), kind);
        assert_eq!(frame_len(&big), bound, "{kind:?} at Q = {Q}");
        // One byte less does not hold it.
        let mut buf = [0u8; 4096];
        assert_eq!(
            encode(&big, &mut buf[..bound - 1]).map(|f| f.len()),
            Err(CodecError::BufferTooSmall)
        );
        // The messages of an N-node system: ids below N, small and large counters, every
        // priority; each within the bound.
        for counter in [0, 1, 127, 128, 16_383, 16_384, u32::MAX] {
            for fence in [0, 1, 1 << 20, u64::MAX] {
                for prio in [0, 1, u8::MAX] {
                    let msg = message::<Q>(kind, |i| NodeId((i % N) as u16), counter, fence, prio);
                    assert!(frame_len(&msg) <= bound, "{msg:?}");
                }
            }
        }
    }
    // The try-lock's request has the request's fields, kind and bound.
    let big = try_request(largest::<Q>(MsgKind::Request));
    assert!(matches!(big, Msg::TryRequest { .. }));
    assert_eq!(big.kind(), MsgKind::Request);
    assert_eq!(frame_len(&big), Msg::<Q>::max_frame(MsgKind::Request));
    assert_eq!(
        <Msg<Q> as postcard::experimental::max_size::MaxSize>::POSTCARD_MAX_SIZE,
        Msg::<Q>::MAX_FRAME
    );
}

#[test]
fn every_message_is_within_its_bound_and_the_largest_reaches_it() {
    check::<2, 2>();
    check::<4, 4>();
    check::<4, 8>();
    check::<8, 8>();
    check::<8, 16>();
    check::<16, 16>();
    check::<32, 32>();
}

#[test]
fn frames_that_are_not_one_whole_message_are_refused() {
    let token = largest::<8>(MsgKind::Token);
    let mut buf = [0u8; Msg::<8>::MAX_FRAME + 1];
    let len = encode(&token, &mut buf).unwrap().len();
    // Truncated.
    for cut in 0..len {
        assert_eq!(
            decode::<8>(&buf[..cut]),
            Err(CodecError::Malformed),
            "cut {cut}"
        );
    }
    // A byte after the message.
    assert_eq!(decode::<8>(&buf[..len + 1]), Err(CodecError::Malformed));
    // A queue longer than the receiver's capacity: a Q = 8 token read as Q = 4.
    assert_eq!(decode::<4>(&buf[..len]), Err(CodecError::Malformed));
    // An unknown variant (0..=6 are the seven messages).
    assert_eq!(decode::<8>(&[7, 0, 0, 0]), Err(CodecError::Malformed));
}

/// The codec has no checksum (`docs/embedding.md`, "The transport contract": frames must
/// arrive intact): a frame with one bit flipped can decode into another valid message.
#[test]
fn a_flipped_bit_can_decode_into_another_valid_message() {
    let release = largest::<8>(MsgKind::Release);
    let mut buf = [0u8; Msg::<8>::MAX_FRAME];
    let frame = encode(&release, &mut buf).unwrap().to_vec();
    let other = (0..frame.len() * 8).find_map(|bit| {
        let mut f = frame.clone();
        f[bit / 8] ^= 1 << (bit % 8);
        decode::<8>(&f).ok().filter(|m| *m != release)
    });
    assert!(
        other.is_some(),
        "every one-bit change of {frame:?} was refused"
    );
}

fn row<const Q: usize>() -> String {
    let mut s = format!("| {Q} |");
    for kind in KINDS {
        let measured = frame_len(&largest::<Q>(kind));
        let fits = if measured <= 64 { "" } else { " (> 64)" };
        s.push_str(&format!(" {measured}{fits} |"));
    }
    s.push_str(&format!(" {} |", Msg::<Q>::MAX_FRAME));
    s
}

/// The table of `docs/benchmarks.md`: the length of each kind's largest frame, measured by
/// encoding it, at queue capacities Q (the bound does not depend on N).
#[test]
fn frame_table() {
    println!("| Q | Request | Grant | Token | Release | Freeze | Busy | MAX_FRAME |");
    println!("|---|---|---|---|---|---|---|---|");
    println!("{}", row::<1>());
    println!("{}", row::<2>());
    println!("{}", row::<3>());
    println!("{}", row::<4>());
    println!("{}", row::<8>());
    println!("{}", row::<16>());
    println!("{}", row::<32>());
    assert_eq!(frame_len(&largest::<2>(MsgKind::Token)), 101);
}
