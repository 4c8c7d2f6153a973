//! What travels between nodes: the handshake and the frames that carry kernel messages.
//!
//! Every TCP stream is a sequence of length-delimited frames (4-byte big-endian length,
//! at most [`MAX_FRAME`] bytes) whose payloads are postcard-encoded. A node dials every
//! peer and sends its kernel messages on that connection only; it receives on the
//! connections its peers dialed. So each ordered pair of nodes has one channel.
//!
//! Handshake (dialer D, acceptor A, shared secret `k`):
//! 1. D → A [`Hello::Dial`]: protocol version, cluster, D's id, A's id, nonce `n_d`, D's
//!    incarnation `i_d` (a random number drawn when the node starts).
//! 2. A checks version, cluster and ids, → D [`Hello::Challenge`]: nonce `n_a`, A's
//!    incarnation `i_a` and `HMAC-SHA256(k, "hilock/accept" ‖ transcript)`, so D knows A
//!    has the secret.
//! 3. D checks that MAC and that `i_a` is the incarnation of A it knew (if it knew one),
//!    → A [`Hello::Auth`]: `HMAC-SHA256(k, "hilock/dial" ‖ transcript)`.
//! 4. A checks it (in constant time) and that `i_d` is the incarnation of D it knew (if
//!    any), and answers [`Hello::Welcome`] with the number of D's messages it has
//!    delivered so far — or [`Hello::Refused`] if D is a new run of a node it knew.
//!
//! The transcript is cluster, both ids, both nonces and both incarnations, so a MAC cannot
//! be replayed on another connection. Any failure closes the connection with a logged
//! reason.
//!
//! **Lossless channel.** After the handshake D sends [`Envelope`]s: its kernel messages
//! numbered 1, 2, … for the whole life of its incarnation (not per connection). A
//! delivers exactly the next number, drops numbers it has delivered already (a resent
//! message) and closes the connection on a gap; it acknowledges with [`Ack`] (cumulative).
//! D keeps every message until it is acknowledged and, after a reconnect, resends those
//! after the number the Welcome names. So every message is delivered once and in order
//! across any number of lost connections, while both nodes live.
//!
//! **Probes** (version 4). D may send `Envelope { seq: 0, frame: Payload::Ping(p) }`
//! between its numbered messages: number 0 is outside the numbered stream, nothing is
//! delivered, and A answers at once with an [`Ack`] whose `ping` is `p`; every later Ack
//! on that connection carries the newest ping A has seen. `hilock status` pings each
//! peer to show only peers that answer *now* as connected.
//!
//! **Epochs** (version 5). Every kernel message is [`Stamped`] with its sender's epoch
//! (`docs/faults.md`, "The recovery mechanism", "Stamps"; on the wire [`Payload::Stamped`],
//! or [`Payload::Token`] for epoch 0): the receiving site takes it only in the same epoch
//! ([`FaultSite::accepts`](hilock_kernel::token::recovery::FaultSite::accepts)); a message of an
//! earlier epoch is dropped and counted, one of a later epoch waits until the receiver has
//! installed that epoch. Without recovery every node stays in epoch 0.
//!
//! **Compatibility.** The handshake's first field is [`PROTOCOL_VERSION`]; an acceptor
//! refuses any other version, so nodes of different versions never exchange frames.
//! Version 4 added `Payload::Ping` and `Ack::ping` (version 3 nodes could decode
//! neither); version 5 the epoch stamp of every kernel message; version 6
//! `Payload::DeadEnd` and `Payload::Generation`; version 7 the try-lock's kernel messages
//! `Msg::TryRequest` and `Msg::Busy` (`spec/SPEC.md` 1.12); version 8 the lock value
//! block carried by `Msg::Grant` and `Msg::Token` (`spec/SPEC.md` 1.15); version 9 the
//! waiting modes carried by `Msg::Freeze` (`spec/SPEC.md` 1.16).

use hilock_kernel::token::recovery::{FaultSite, Stamped};
use hilock_kernel::{LockId, Msg, NodeId};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::MAX_NODES;

/// The protocol version carried by the handshake.
pub const PROTOCOL_VERSION: u32 = 9;

/// Largest frame accepted (bytes). A token carries at most [`MAX_NODES`] queue entries,
/// far below this.
pub const MAX_FRAME: usize = 64 * 1024;

/// Longest lock path, in bytes.
pub const MAX_PATH: usize = 1024;

/// The kernel site the runtime runs per lock: up to [`MAX_NODES`] nodes, one lock per
/// site (locks are created on demand, by path), a queue that can hold every node; with
/// an epoch and the recovery transitions ([`FaultSite`], `docs/faults.md`, "The recovery
/// mechanism").
pub type LockSite = FaultSite<MAX_NODES, 1, MAX_NODES>;

/// The kernel message type of the base protocol.
pub type KMsg = Msg<MAX_NODES>;

/// A kernel message on the wire: stamped with its sender's epoch.
pub type SMsg = Stamped<KMsg>;

/// The kernel outputs buffer for [`LockSite`]: room for a step and for an install (a
/// step's outputs and the refusal of a pending try-lock, `FaultSite::INSTALL_OUTPUTS`).
pub type KOutputs = hilock_kernel::Outputs<SMsg, { LockSite::INSTALL_OUTPUTS }>;

/// The lock id every runtime site uses (one lock per site).
pub const LOCK: LockId = LockId(0);

/// A kernel message for the lock named `path`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Frame {
    /// The lock's path.
    pub path: String,
    /// The kernel message.
    pub msg: KMsg,
}

/// A random nonce.
pub type Nonce = [u8; 32];

/// A MAC.
pub type Tag = [u8; 32];

/// The handshake messages.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Hello {
    /// Dialer → acceptor.
    Dial {
        /// [`PROTOCOL_VERSION`] of the dialer.
        version: u32,
        /// The dialer's cluster.
        cluster: String,
        /// The dialer's node id.
        from: u16,
        /// The node the dialer means to reach.
        to: u16,
        /// The dialer's nonce.
        nonce: Nonce,
        /// The dialer's incarnation (random, drawn when the node started).
        incarnation: u64,
    },
    /// Acceptor → dialer.
    Challenge {
        /// The acceptor's nonce.
        nonce: Nonce,
        /// The acceptor's incarnation.
        incarnation: u64,
        /// `HMAC(k, "hilock/accept" ‖ transcript)`.
        tag: Tag,
    },
    /// Dialer → acceptor.
    Auth {
        /// `HMAC(k, "hilock/dial" ‖ transcript)`.
        tag: Tag,
    },
    /// Acceptor → dialer: authenticated; envelopes may follow.
    Welcome {
        /// How many of the dialer's messages (this incarnation) the acceptor has
        /// delivered: the dialer resends from the next one.
        delivered: u64,
    },
    /// Acceptor → dialer: the dialer is a new run of a node the acceptor knew; the
    /// protocol cannot take back the old run's tokens and copies, so it is not let in.
    Refused {
        /// Why, for the dialer's log and its callers' errors.
        reason: String,
    },
}

/// What one numbered message carries: a token-engine frame, or a frame of the agents
/// engine ([`crate::agents`], Wiger's locks). Both engines share the peer links.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
// The token frame is the common message; boxing it would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
pub enum Payload {
    /// A kernel message of the token engine.
    Token(Frame),
    /// A message between lock servers and agents.
    Agents(Box<crate::agents::AgentFrame>),
    /// A probe (only with message number 0, never delivered): the acceptor answers with
    /// an [`Ack`] whose `ping` is this number (version 4).
    Ping(u64),
    /// A kernel message of the token engine sent in epoch `.0` (recovery, version 5);
    /// [`Payload::Token`] is the same in epoch 0 ([`Payload::stamped`]).
    Stamped(u32, Frame),
    /// The generation the sender offers for its run (static membership with a state
    /// directory): the first message of its run on every link (version 6).
    Generation(u32),
    /// To the requester of a lock request this node forwarded to a refused peer (a new
    /// run of a node it knew, static membership): the request is lost there, and the
    /// requester's callers fail at once instead of waiting out their timeout (version 6).
    DeadEnd {
        /// The lock.
        path: String,
        /// The refused peer the request went to.
        peer: u16,
        /// The requester's serial number of the request.
        serial: u32,
    },
}

impl Payload {
    /// The payload of a kernel message stamped with its sender's epoch: the short form
    /// [`Payload::Token`] in epoch 0 (every node without recovery), else
    /// [`Payload::Stamped`].
    pub fn stamped(path: String, msg: SMsg) -> Payload {
        let frame = Frame { path, msg: msg.msg };
        if msg.epoch == 0 {
            Payload::Token(frame)
        } else {
            Payload::Stamped(msg.epoch, frame)
        }
    }
}

/// Dialer → acceptor after the handshake: message number `seq` (1, 2, … over the
/// dialer's incarnation).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Envelope {
    /// The message's number.
    pub seq: u64,
    /// The message.
    pub frame: Payload,
}

/// Encode an [`Envelope`] around a payload encoded already (postcard encodes a struct as
/// its fields one after the other).
pub fn envelope(seq: u64, frame: &[u8]) -> Vec<u8> {
    let mut v = encode(&seq);
    v.extend_from_slice(frame);
    v
}

/// Acceptor → dialer: every message up to `delivered` has been delivered, and the newest
/// probe seen on this connection is `ping`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ack {
    /// The number of the last message delivered.
    pub delivered: u64,
    /// The newest [`Payload::Ping`] received on this connection (0: none yet).
    pub ping: u64,
}

/// Which side a MAC is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The acceptor's tag.
    Accept,
    /// The dialer's tag.
    Dial,
}

/// What both sides' MACs cover: the cluster, both node ids, both nonces and both
/// incarnations (and the protocol version), so that a tag is good for one connection only.
#[derive(Clone, Copy, Debug)]
pub struct Transcript<'a> {
    /// The cluster name.
    pub cluster: &'a str,
    /// The dialer's id.
    pub from: u16,
    /// The acceptor's id.
    pub to: u16,
    /// The dialer's nonce.
    pub nd: &'a Nonce,
    /// The acceptor's nonce.
    pub na: &'a Nonce,
    /// The dialer's incarnation.
    pub id: u64,
    /// The acceptor's incarnation.
    pub ia: u64,
}

impl Transcript<'_> {
    fn mac(&self, secret: &[u8], side: Side) -> Hmac<Sha256> {
        // HMAC takes keys of any length, so this cannot fail.
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC accepts any key length");
        m.update(match side {
            Side::Accept => b"hilock/accept",
            Side::Dial => b"hilock/dial\0\0",
        });
        m.update(&PROTOCOL_VERSION.to_be_bytes());
        m.update(&(self.cluster.len() as u32).to_be_bytes());
        m.update(self.cluster.as_bytes());
        m.update(&self.from.to_be_bytes());
        m.update(&self.to.to_be_bytes());
        m.update(self.nd);
        m.update(self.na);
        m.update(&self.id.to_be_bytes());
        m.update(&self.ia.to_be_bytes());
        m
    }

    /// The tag of `side`: `HMAC-SHA256(secret, side label ‖ transcript)`.
    pub fn tag(&self, secret: &[u8], side: Side) -> Tag {
        self.mac(secret, side).finalize().into_bytes().into()
    }

    /// Check the tag of `side` in constant time.
    pub fn verify(&self, secret: &[u8], side: Side, tag: &Tag) -> bool {
        self.mac(secret, side).verify_slice(tag).is_ok()
    }
}

/// A fresh random nonce.
pub fn nonce() -> Nonce {
    rand::random()
}

/// The node that initially holds the token of the lock named `path` in a cluster of `n`
/// nodes: the first 8 bytes of SHA-256(path), big-endian, modulo `n`. Every node computes
/// the same holder without coordination; the other nodes start with it as their parent
/// (a star per lock, the thesis's initial tree).
pub fn initial_holder(path: &str, n: usize) -> NodeId {
    let d = Sha256::digest(path.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    NodeId((u64::from_be_bytes(b) % n.max(1) as u64) as u16)
}

/// Check a lock path: `/` followed by non-empty segments separated by `/`, printable,
/// no `.` or `..` segment, at most [`MAX_PATH`] bytes. The root `/` itself is not a lock.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.len() > MAX_PATH {
        return Err(format!("lock path longer than {MAX_PATH} bytes"));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("lock path {path:?} must start with '/'"));
    };
    if rest.is_empty() {
        return Err("the root '/' is not a lock; name one below it, e.g. /db".into());
    }
    for seg in rest.split('/') {
        if seg.is_empty() {
            return Err(format!("lock path {path:?} has an empty segment"));
        }
        if seg == "." || seg == ".." {
            return Err(format!("lock path {path:?} has a '{seg}' segment"));
        }
        if seg.chars().any(|c| c.is_control()) {
            return Err(format!("lock path {path:?} has a control character"));
        }
    }
    Ok(())
}

/// The ancestors of a (checked) path, outermost first: `/a/b/c` → `/a`, `/a/b`.
pub fn ancestors(path: &str) -> Vec<&str> {
    path.match_indices('/')
        .skip(1)
        .map(|(i, _)| &path[..i])
        .collect()
}

/// Check what a frame from a peer may carry: a valid path and a message for the
/// runtime's single lock id.
pub fn check_frame(f: &Frame) -> Result<(), String> {
    check_path(&f.path)?;
    if f.msg.lock() != LOCK {
        return Err(format!("message for unknown lock id {}", f.msg.lock()));
    }
    Ok(())
}

/// Encode with postcard.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("in-memory postcard encoding of plain data cannot fail")
}

/// Decode with postcard; trailing bytes are an error.
pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, String> {
    let (v, rest) = postcard::take_from_bytes(b).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(v)
}

/// The framing of a peer connection: length-delimited frames of at most [`MAX_FRAME`]
/// bytes.
pub(crate) fn codec() -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// Check the size bound in [`MAX_FRAME`] against the largest message (a token's queue of
/// [`MAX_NODES`] entries, its other fields and the value block, `spec/SPEC.md` 1.15).
const _: () = assert!(MAX_NODES * 16 + 64 + hilock_kernel::VALUE_LEN + 1 < MAX_FRAME);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(check_path("/db/flights/UA93").is_ok());
        for bad in ["", "/", "db", "/db/", "//db", "/db//x", "/a/../b", "/a/\n"] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ancestors("/db/flights/UA93"), ["/db", "/db/flights"]);
        let longest = format!("/{}", "x".repeat(MAX_PATH - 1));
        assert!(check_path(&longest).is_ok());
        assert!(check_path(&format!("{longest}y")).is_err());
        assert!(check_path("/db/\u{7f}").is_err());
        assert!(ancestors("/db").is_empty());
    }

    #[test]
    fn holder_is_deterministic_and_spreads() {
        let mut seen = [0usize; 5];
        for i in 0..500 {
            let p = format!("/t/{i}");
            let h = initial_holder(&p, 5);
            assert_eq!(h, initial_holder(&p, 5));
            seen[h.idx()] += 1;
        }
        assert!(seen.iter().all(|&c| c > 50), "{seen:?}");
    }

    #[test]
    fn nonces_are_fresh() {
        let a = nonce();
        assert_ne!(a, nonce());
        assert_ne!(a, [0; 32]);
    }

    #[test]
    fn tags_bind_secret_side_and_transcript() {
        let (nd, na) = ([1; 32], [2; 32]);
        let tr = |from, to, nd, na| Transcript {
            cluster: "c",
            from,
            to,
            nd,
            na,
            id: 5,
            ia: 6,
        };
        let t = tr(0, 1, &nd, &na).tag(b"secret-1", Side::Dial);
        assert!(tr(0, 1, &nd, &na).verify(b"secret-1", Side::Dial, &t));
        assert!(!tr(0, 1, &nd, &na).verify(b"secret-2", Side::Dial, &t));
        assert!(!tr(0, 1, &nd, &na).verify(b"secret-1", Side::Accept, &t));
        assert!(!tr(1, 0, &nd, &na).verify(b"secret-1", Side::Dial, &t));
        assert!(!tr(0, 1, &na, &nd).verify(b"secret-1", Side::Dial, &t));
        let other_run = Transcript {
            ia: 7,
            ..tr(0, 1, &nd, &na)
        };
        assert!(!other_run.verify(b"secret-1", Side::Dial, &t));
    }

    #[test]
    fn an_envelope_is_the_seq_then_the_frame() {
        let f = Frame {
            path: "/db".into(),
            msg: Msg::Release {
                lock: LOCK,
                owned: hilock_kernel::Mode::IR,
                epoch: 3,
            },
        };
        let b = envelope(300, &encode(&Payload::Token(f.clone())));
        assert_eq!(
            decode::<Envelope>(&b).unwrap(),
            Envelope {
                seq: 300,
                frame: Payload::Token(f)
            }
        );
    }

    #[test]
    fn a_kernel_message_carries_its_epoch() {
        let msg = Msg::Release {
            lock: LOCK,
            owned: hilock_kernel::Mode::IR,
            epoch: 3,
        };
        let f = Frame {
            path: "/db".into(),
            msg: msg.clone(),
        };
        let at = |epoch| {
            Payload::stamped(
                "/db".into(),
                Stamped {
                    epoch,
                    msg: msg.clone(),
                },
            )
        };
        assert_eq!(at(0), Payload::Token(f.clone()));
        assert_eq!(at(7), Payload::Stamped(7, f.clone()));
        let b = encode(&at(7));
        assert_eq!(decode::<Payload>(&b).unwrap(), Payload::Stamped(7, f));
    }

    #[test]
    fn frames_round_trip_and_garbage_fails() {
        let f = Frame {
            path: "/db".into(),
            msg: Msg::Release {
                lock: LOCK,
                owned: hilock_kernel::Mode::IR,
                epoch: 3,
            },
        };
        let b = encode(&f);
        assert_eq!(decode::<Frame>(&b).unwrap(), f);
        assert!(decode::<Frame>(&b[..b.len() - 1]).is_err());
        let mut longer = b.clone();
        longer.push(0);
        assert!(decode::<Frame>(&longer).is_err());
    }
}
