//! The handshake of a peer connection: version, cluster and ids, HMAC challenge-response
//! over both nonces and both runs (incarnations), then Welcome (with how much of the
//! channel the acceptor has delivered) or Refused.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::time::timeout;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::transport::Stream;
use super::Shared;
use crate::wire::{self, codec, Hello, Side, Transcript, PROTOCOL_VERSION};

/// How long each side waits for the next handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections allowed in the handshake at once; more are closed at once (a flood of
/// unauthenticated connections cannot pile up tasks).
pub const MAX_PENDING_HANDSHAKES: usize = 64;

/// Why a connection attempt failed.
pub(super) enum ConnectError {
    /// The peer refused this node as a new run of a node it knew.
    Refused(String),
    /// The peer is a new run of a node this node knew.
    Restarted(String),
    /// The peer answered but did not prove the cluster's secret: a wrong secret on one
    /// side (or not a node of this cluster). Counted as a rejected connection and logged;
    /// tried again later (the operator may fix the file and restart).
    Unauthenticated(String),
    /// Anything else (not reachable, timeout, bad handshake): try again later.
    Other(String),
}

impl From<String> for ConnectError {
    fn from(e: String) -> Self {
        ConnectError::Other(e)
    }
}

/// Connect and authenticate; returns the connection and how many of this node's messages
/// the peer has delivered.
pub(super) async fn connect(
    shared: &Shared,
    peer: u16,
    addr: SocketAddr,
) -> Result<(Framed<Stream, LengthDelimitedCodec>, u64), ConnectError> {
    let s = timeout(HANDSHAKE_TIMEOUT, shared.network.connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let mut fr = Framed::new(s, codec());
    let nd = shared.entropy.nonce();
    let hello = Hello::Dial {
        version: PROTOCOL_VERSION,
        cluster: shared.cluster.clone(),
        from: shared.id,
        to: peer,
        nonce: nd,
        incarnation: shared.incarnation,
    };
    fr.send(Bytes::from(wire::encode(&hello)))
        .await
        .map_err(|e| e.to_string())?;
    let (na, ia) = match next_hello(&mut fr).await? {
        Hello::Challenge {
            nonce,
            incarnation,
            tag,
        } => {
            let tr = Transcript {
                cluster: &shared.cluster,
                from: shared.id,
                to: peer,
                nd: &nd,
                na: &nonce,
                id: shared.incarnation,
                ia: incarnation,
            };
            if !tr.verify(&shared.secret, Side::Accept, &tag) {
                return Err(ConnectError::Unauthenticated(
                    "peer failed authentication (wrong cluster secret?)".to_string(),
                ));
            }
            (nonce, incarnation)
        }
        Hello::Refused { reason } => return Err(ConnectError::Refused(reason)),
        other => return Err(format!("unexpected handshake message {other:?}").into()),
    };
    let link = shared.peers[usize::from(peer)]
        .as_ref()
        .expect("dial only peers");
    {
        let mut inb = link.inbound.lock().expect("inbound lock");
        match inb.incarnation {
            Some(k) if k != ia && shared.recovery => {
                // Recovery: the new run replaces the old one once it holds its member key.
                shared
                    .adopt_run(peer, link, &mut inb, ia)
                    .map_err(ConnectError::Other)?;
            }
            Some(k) if k != ia => {
                return Err(ConnectError::Restarted(format!(
                    "node {peer} restarted (run {ia:016x}, was {k:016x}) and lost the state the \
                     protocol needs (tokens, copies, queues); {}",
                    super::RESTART_ALL
                )))
            }
            _ => inb.incarnation = Some(ia),
        }
    }
    let t = Transcript {
        cluster: &shared.cluster,
        from: shared.id,
        to: peer,
        nd: &nd,
        na: &na,
        id: shared.incarnation,
        ia,
    }
    .tag(&shared.secret, Side::Dial);
    fr.send(Bytes::from(wire::encode(&Hello::Auth { tag: t })))
        .await
        .map_err(|e| e.to_string())?;
    match next_hello(&mut fr).await? {
        Hello::Welcome { delivered } => Ok((fr, delivered)),
        Hello::Refused { reason } => Err(ConnectError::Refused(reason)),
        other => Err(format!("unexpected handshake message {other:?}").into()),
    }
}

/// How the reason of a handshake that failed because the connection went away (closed,
/// reset or silent: cut off, not bad input) begins ([`is_cut`]).
const CUT: &str = "connection cut during the handshake";

/// Whether a handshake failed because the connection went away rather than for bad input.
pub(super) fn is_cut(reason: &str) -> bool {
    reason.starts_with(CUT)
}

async fn next_hello(fr: &mut Framed<Stream, LengthDelimitedCodec>) -> Result<Hello, String> {
    match timeout(HANDSHAKE_TIMEOUT, fr.next()).await {
        Err(_) => Err(format!("{CUT} (nothing within {HANDSHAKE_TIMEOUT:?})")),
        Ok(None) => Err(format!("{CUT} (closed)")),
        Ok(Some(Err(e))) if e.kind() != std::io::ErrorKind::InvalidData => {
            Err(format!("{CUT} ({e})"))
        }
        Ok(Some(Err(e))) => Err(format!("bad handshake frame: {e}")),
        Ok(Some(Ok(b))) => {
            wire::decode::<Hello>(&b).map_err(|e| format!("handshake does not decode: {e}"))
        }
    }
}

/// The acceptor's side of the handshake up to the dialer's Auth; returns the dialer's id
/// and incarnation. (The Welcome or Refused is the caller's.)
pub(super) async fn handshake_accept(
    shared: &Shared,
    fr: &mut Framed<Stream, LengthDelimitedCodec>,
) -> Result<(u16, u64), String> {
    let (from, nd, id) = match next_hello(fr).await? {
        Hello::Dial {
            version,
            cluster,
            from,
            to,
            nonce,
            incarnation,
        } => {
            if version != PROTOCOL_VERSION {
                return Err(format!(
                    "protocol version {version}, this node speaks {PROTOCOL_VERSION}"
                ));
            }
            if cluster != shared.cluster {
                return Err(format!(
                    "cluster {cluster:?}, this node is in {:?}",
                    shared.cluster
                ));
            }
            if to != shared.id {
                return Err(format!(
                    "addressed to node {to}, this is node {}",
                    shared.id
                ));
            }
            if usize::from(from) >= shared.n || from == shared.id {
                return Err(format!("unknown node id {from}"));
            }
            (from, nonce, incarnation)
        }
        other => return Err(format!("expected a Dial, got {other:?}")),
    };
    let na = shared.entropy.nonce();
    let tr = Transcript {
        cluster: &shared.cluster,
        from,
        to: shared.id,
        nd: &nd,
        na: &na,
        id,
        ia: shared.incarnation,
    };
    let t = tr.tag(&shared.secret, Side::Accept);
    fr.send(Bytes::from(wire::encode(&Hello::Challenge {
        nonce: na,
        incarnation: shared.incarnation,
        tag: t,
    })))
    .await
    .map_err(|e| e.to_string())?;
    match next_hello(fr).await? {
        Hello::Auth { tag } => {
            if !tr.verify(&shared.secret, Side::Dial, &tag) {
                return Err(format!(
                    "node {from} failed authentication (wrong cluster secret?)"
                ));
            }
        }
        other => return Err(format!("expected Auth, got {other:?}")),
    }
    Ok((from, id))
}
