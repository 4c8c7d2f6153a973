//! The ring engine (the Chord lock paper) on real sockets: lock servers placed on a Chord ring by
//! consistent hashing, each key's entry on its service node and `r` = 2 successors.
//!
//! Every rule is the kernel's ([`hilock_kernel::ring`]): a [`RingNode`] runs one
//! [`hilock_kernel::ring::RingServer`] and only routes its outputs; a
//! [`RingClient`] runs the kernel's [`ChordClient`](hilock_kernel::ring::ChordClient)
//! (lookup, redirects, retries); the [`Membership`] service plays the model's `Chord`
//! actor (etcd's role): it announces views with `NewView` and starts the next change (a
//! join, a graceful leave, the removal of a crashed node) only when every live node of the
//! current change has installed the view and has all its arcs — the model's `settled`.
//!
//! # Placement
//! The ring has [`SLOTS`] node slots on a 16-bit circle; slot `i` has the identifier
//! [`hilock_kernel::ring::hash`] of `"hilock-ring-slot-<i>"` (FNV-1a then fmix32,
//! fixed, so every process places alike). A lock path is placed by its top-level element
//! ([`Ring::key_of`](hilock_kernel::ring::Ring::key_of)).
//!
//! # Transport
//! Length-delimited frames (postcard) over TCP. Every connection starts with
//! [`Frame::Hello`] naming the sender (a node's connection to the membership service then
//! with [`Frame::Peers`], its slot addresses: see [`Membership`]); a node sends to a peer on the connection it dialed,
//! and answers a client on the connection the client dialed. A connection that breaks is
//! not re-established for the messages it carried: a peer that closed is down (the model's
//! crash: its messages are gone). The links are not authenticated (loopback only so far).
//!
//! # Limits (said, not hidden)
//! - The static membership service is one process (`hilock ring membership`, or a test).
//!   Without it no view changes; with `membership = "etcd"` (the `etcd` module, with the `etcd` feature) the view is in etcd
//!   and the nodes change it themselves.
//! - Crash detection is by the successor, removal under the lease rule (see [`Membership`]
//!   and `docs/faults.md`, "Ring engine"): every node renews a lease with the service and
//!   stops answering when it cannot; it beats to its successor, which reports a silent
//!   predecessor; the service removes a member only when its successor suspects it and its
//!   lease has run out.

mod client;
#[cfg(feature = "etcd")]
pub mod etcd;
mod membership;
mod node;

pub use client::{clock_seq, ClientError, Grant, Held, Loss, RingClient, Views};
pub use membership::Membership;
pub use node::{RingNode, Snapshot};

use futures_util::{SinkExt, StreamExt};
use hilock_kernel::ring::{hash, Addr, ChordMsg, Key, NodeId, Out, Ring, RingServer, View};
use hilock_kernel::Sink;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

/// Node slots of the ring (the kernel's views are 16-bit sets).
pub const SLOTS: usize = 16;
/// Entries one server holds (its own keys and its replicas').
pub const TABLE: usize = 64;
/// Identifier bits.
pub const BITS: u8 = 16;
/// Successor replicas.
pub const R: u8 = 2;

/// The kernel server the runtime runs.
pub type Server = RingServer<SLOTS, TABLE>;
/// The kernel message.
pub type Msg = ChordMsg<TABLE>;
/// A step's outputs, kept on the heap. An [`Out`] carries its message inline (a
/// hand-over or a dump holds up to [`TABLE`] entries: the kernel has no heap), so one is
/// about 3.5 KiB and the room a step needs, [`Server::MAX_OUTPUTS`] of them, about
/// 340 KiB. As a stack value (a `heapless::Vec`, plus the copies a debug build makes of
/// it) that overflowed the 2 MiB stack of a tokio worker thread as soon as a node had a
/// peer. A node allocates one buffer and reuses it for every step.
pub(crate) struct Outs {
    outs: Vec<Out<TABLE>>,
    room: usize,
}

impl Outs {
    /// An empty buffer taking at most `room` outputs (the kernel checks the room it needs
    /// before it sends anything, as with a `heapless::Vec` of that capacity).
    pub(crate) fn with_room(room: usize) -> Self {
        Outs {
            outs: Vec::new(),
            room,
        }
    }

    /// Takes the outputs out in order, leaving the buffer empty (its memory is kept).
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Out<TABLE>> {
        self.outs.drain(..)
    }
}

impl Sink<Out<TABLE>> for Outs {
    fn room(&self) -> usize {
        self.room.saturating_sub(self.outs.len())
    }
    fn put(&mut self, t: Out<TABLE>) -> Result<(), Out<TABLE>> {
        if self.outs.len() >= self.room {
            return Err(t);
        }
        self.outs.push(t);
        Ok(())
    }
}

/// The ring every process uses.
pub fn ring() -> Ring<SLOTS> {
    let mut idents = [0u16; SLOTS];
    for (i, x) in idents.iter_mut().enumerate() {
        *x = hash(format!("hilock-ring-slot-{i}").as_bytes(), BITS).0;
    }
    Ring::new(BITS, idents).expect("the slot identifiers are distinct (checked by a test)")
}

/// The key a lock path is placed by.
pub fn key_of(path: &str) -> Key {
    ring().key_of(path)
}

/// What travels on a ring connection.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Frame {
    /// First frame: who dialed.
    Hello(Addr),
    /// A kernel message (its sender is the connection's `Hello`).
    Msg(Box<Msg>),
    /// Membership → node or client: the current view (first answer to `Hello`, and every
    /// later view for clients).
    Current(View),
    /// Node → membership: the view the node has installed and whether it has every arc it
    /// holds in it.
    Status {
        /// The node's view.
        view: View,
        /// `settled_in(view)`.
        settled: bool,
    },
    /// Membership → a node that left gracefully: the change is complete, stop.
    Left,
    /// Admin (`hilock ring join|leave`, connected as [`Addr::Chord`]) → membership: start
    /// a change.
    Ask(Request),
    /// Membership → admin: the service's state, sent on connect and whenever it changes.
    State(MembershipState),
    /// Node → membership: renew my lease (number `0`, `1`, …).
    Renew(u64),
    /// Membership → node: renewal `seq` granted for `ms` milliseconds, counted on the node's
    /// clock from when it sent `Renew(seq)`.
    Lease {
        /// The renewal.
        seq: u64,
        /// The lease's length.
        ms: u32,
    },
    /// Node → its successor in its view, every tenth of a lease while it serves.
    Beat,
    /// Node → membership: my predecessor (this slot) sent no beat for three beat periods.
    Suspect(u16),
    /// Node → a status probe (a connection that said `Hello(Chord)`): what it holds.
    Report(NodeReport),
    /// Admin → membership: withdraw a change asked for that has not started yet.
    Withdraw(Request),
    /// Membership → admin: the answer to its [`Frame::Ask`] or [`Frame::Withdraw`].
    Answer(Answer),
    /// Node → client: the node's kernel refused the client's request `token` (as many of
    /// its writes wait for their replicas as its table holds: `ChordError::TableFull`),
    /// with why, in words; nothing was written. A lock its table has no room for is not
    /// refused so: it is answered `Answer::Full`.
    Refused {
        /// The request refused.
        token: hilock_kernel::ring::Token,
        /// Why, naming the key.
        why: String,
    },
    /// Node → membership, right after its `Hello`: its address of every slot (`[i]`: slot
    /// `i`, `None`: no address given), which the service compares with its own before it
    /// answers the node at all. Appended after every earlier frame, so theirs keep their
    /// encoding.
    Peers(Vec<Option<SocketAddr>>),
    /// Membership → a node whose [`Frame::Peers`] disagree with the service's: every slot
    /// that differs. The node is not let in (no view, no lease) and stops.
    Misplaced(Vec<SlotDiff>),
}

/// A slot whose address differs between a node and the membership service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotDiff {
    /// The slot.
    pub slot: u16,
    /// Its address at the node (`None`: none given).
    pub node: Option<SocketAddr>,
    /// Its address at the membership service.
    pub service: Option<SocketAddr>,
}

/// The slots whose address differs between `node` and `service` (missing entries are
/// `None`), in slot order.
pub fn slot_diffs(node: &[Option<SocketAddr>], service: &[Option<SocketAddr>]) -> Vec<SlotDiff> {
    let at = |v: &[Option<SocketAddr>], i: usize| v.get(i).copied().flatten();
    (0..node.len().max(service.len()))
        .filter(|i| at(node, *i) != at(service, *i))
        .map(|i| SlotDiff {
            slot: i as u16,
            node: at(node, i),
            service: at(service, i),
        })
        .collect()
}

/// `diffs` in words: `slot 0 is A here but B at the membership service, slot 1 is B here
/// but A there: start every node with the same --peers order` (`here` and `service` name
/// the two sides).
pub fn misplaced_words(diffs: &[SlotDiff], here: &str, service: &str) -> String {
    let addr = |a: Option<SocketAddr>| a.map_or("no address".to_string(), |a| a.to_string());
    let parts: Vec<String> = diffs
        .iter()
        .enumerate()
        .map(|(k, d)| {
            format!(
                "slot {} is {} {here} but {} {}",
                d.slot,
                addr(d.node),
                addr(d.service),
                if k == 0 { service } else { "there" }
            )
        })
        .collect();
    format!(
        "{}: start every node with the same --peers order",
        parts.join(", ")
    )
}

/// The membership service's answer to an administrator's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The change is queued (a join waits for its node to connect, every change for the
    /// one before it to settle).
    Queued,
    /// A leave of a slot that is not a member of `view`: nothing to leave. `withdrew`: a
    /// join of the slot was still queued and is withdrawn.
    NotMember {
        /// The service's view.
        view: View,
        /// A queued join of the slot was withdrawn.
        withdrew: bool,
    },
    /// The slot is not one of the ring's [`SLOTS`].
    NoSuchSlot,
    /// To a [`Frame::Withdraw`]: the change was still queued and is withdrawn (`true`), or
    /// it is not queued (`false`: it started, or was never asked).
    Withdrawn(bool),
    /// To the join of a slot whose node was refused ([`Frame::Misplaced`]) and no node of
    /// the slot was let in since: the slots that differed. Nothing is queued.
    Misplaced(Vec<SlotDiff>),
}

/// What a node tells `hilock ring status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Its view.
    pub view: View,
    /// Whether it holds every arc it must in its view.
    pub settled: bool,
    /// Whether it lost its lease (answers no request).
    pub lease_lost: bool,
    /// Its entries (its own keys and its replicas'): key and holder.
    pub entries: Vec<(u16, Option<u8>)>,
    /// The same entries in full (holder, version, the request that set the holder): what
    /// a ring client's read-only check of a held lock reads ([`RingClient::recorded`]).
    pub slots: Vec<hilock_kernel::ring::Slot>,
}

/// Asks the node at `addr` for its [`NodeReport`]; `None` if it does not answer in `limit`.
pub async fn probe(addr: SocketAddr, limit: Duration) -> Option<NodeReport> {
    let go = async {
        let (mut r, _tx) = dial(addr, Addr::Chord).await.ok()?;
        loop {
            match r.next().await? {
                Frame::Report(x) => return Some(x),
                _ => continue,
            }
        }
    };
    tokio::time::timeout(limit, go).await.ok().flatten()
}

/// `hilock ring status`: the service's view, each slot's identifier, the key range it
/// serves as primary (`(from, to]` on the identifier circle, the kernel's `lookup`), the
/// replica set of that range (the kernel's `replicas`, r + 1 members) and what the node
/// itself reports (its view, its entries). JSON (format `hilock-ring-status/1`) or text,
/// and whether all is well: `false` when a member does not answer or has lost its lease
/// (`down`; the ring is not settled then, whatever the service says), or when the
/// membership service (the view's source) does not answer — then the view shown is the
/// latest any node reports, and `membership_error` says what failed. An error only when
/// neither the service nor any node answers.
pub fn status(cfg: &crate::Config, json: bool, limit: Duration) -> Result<(String, bool), String> {
    let ringcfg = cfg
        .ring
        .as_ref()
        .ok_or("not a ring configuration (engine = \"ring\" and a [ring] table)")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(async move {
        let reports =
            futures_util::future::join_all(cfg.nodes.iter().map(|n| probe(n.addr, limit))).await;
        let service: Result<MembershipState, String> = match &cfg.membership {
            crate::config::Membership::Static => Admin::connect(ringcfg.membership, limit)
                .await
                .map(|a| a.state()),
            #[cfg(feature = "etcd")]
            crate::config::Membership::Etcd { .. } => {
                let o = crate::membership::EtcdOptions::of_config(cfg)?;
                match tokio::time::timeout(limit, etcd::read_view(&o, &cfg.cluster)).await {
                    Err(_) => Err(format!("etcd: no answer within {limit:?}")),
                    Ok(Err(e)) => Err(e),
                    Ok(Ok((view, up))) => {
                        // Settled: every live member answers the probe settled in this view.
                        let settled = cfg.nodes.iter().zip(&reports).all(|(n, r)| {
                            !(view.has(NodeId(n.id)) && up & (1 << n.id) != 0)
                                || r.as_ref().is_some_and(|r| r.view == view && r.settled)
                        });
                        Ok(MembershipState {
                            view,
                            settled,
                            up,
                            queued: 0,
                        })
                    }
                }
            }
            #[cfg(not(feature = "etcd"))]
            crate::config::Membership::Etcd { .. } => {
                return Err("membership = \"etcd\" needs a hilock built with --features etcd".into())
            }
        };
        // Without the service: the latest view a node reports.
        let (st, service_error) = match service {
            Ok(st) => (Some(st), None),
            Err(e) => (None, Some(e)),
        };
        let v = match (&st, reports.iter().flatten().map(|r| r.view).max_by_key(|v| v.epoch)) {
            (Some(st), _) => st.view,
            (None, Some(v)) => v,
            (None, None) => {
                return Err(format!(
                    "{}; no node of the file answers either",
                    service_error.unwrap_or_default()
                ))
            }
        };
        let r = ring();
        let mut nodes = Vec::new();
        let mut down = Vec::new();
        for (n, report) in cfg.nodes.iter().zip(reports) {
            let id = NodeId(n.id);
            let ident = r.ident(id).ok_or("slot out of range")?;
            let member = v.has(id);
            if member && report.as_ref().is_none_or(|x| x.lease_lost) {
                down.push(n.id);
            }
            let (from, replicas) = if member {
                let p = r.prev(v, id).and_then(|p| r.ident(p)).unwrap_or(ident);
                let set = r.replicas(v, Key(ident), R + 1);
                let set: Vec<u16> = (0..16).filter(|i| set & (1 << i) != 0).collect();
                (Some(p), set)
            } else {
                (None, Vec::new())
            };
            nodes.push(serde_json::json!({
                "slot": n.id,
                "addr": n.addr.to_string(),
                "ident": ident,
                "member": member,
                // Connected to the service (unknown without it).
                "up": st.map(|st| st.up & (1 << n.id) != 0),
                // The primary range (from, to]; a lone member serves the whole circle.
                "range": from.map(|f| [f, ident]),
                "replicas": replicas,
                "node": report.map(|x| serde_json::json!({
                    "epoch": x.view.epoch,
                    "members": (0..16u16).filter(|i| x.view.members & (1 << i) != 0).collect::<Vec<_>>(),
                    "settled": x.settled,
                    "lease_lost": x.lease_lost,
                    "entries": x.entries.iter().map(|e| e.0).collect::<Vec<_>>(),
                    "locked": x.entries.iter().filter(|e| e.1.is_some()).count(),
                })),
            }));
        }
        let settled = st.is_some_and(|st| st.settled) && down.is_empty();
        let mut doc = serde_json::json!({
            "format": "hilock-ring-status/1",
            "bits": BITS,
            "r": R,
            "epoch": v.epoch,
            "members": (0..16u16).filter(|i| v.members & (1 << i) != 0).collect::<Vec<_>>(),
            "settled": settled,
            "down": down,
            "nodes": nodes,
        });
        if let Some(e) = &service_error {
            doc["membership_error"] = serde_json::json!(e);
        }
        let ok = service_error.is_none() && down.is_empty();
        if json {
            return serde_json::to_string_pretty(&doc)
                .map(|s| (s + "\n", ok))
                .map_err(|e| e.to_string());
        }
        let how = if !down.is_empty() {
            format!(
                "not settled: member{} {} not answering or without a lease",
                if down.len() == 1 { "" } else { "s" },
                slots_of(down.iter().fold(0, |b, i| b | 1 << i))
            )
        } else if settled {
            "settled".to_string()
        } else if st.is_some() {
            "changing".to_string()
        } else {
            "not settled".to_string()
        };
        let mut out = match &service_error {
            None => format!(
                "ring: {BITS}-bit identifiers, r = {R}; view epoch {} members {}, {how}\n",
                v.epoch,
                slots_of(v.members),
            ),
            Some(e) => format!(
                "ring: {BITS}-bit identifiers, r = {R}; no view from the membership service \
                 ({e}); the latest view a node reports: epoch {} members {}, {how}\n",
                v.epoch,
                slots_of(v.members),
            ),
        };
        for n in doc["nodes"].as_array().into_iter().flatten() {
            let range = match n["range"].as_array() {
                Some(a) => format!(
                    "primary for ({:#06x}, {:#06x}]  replicas {}",
                    a[0].as_u64().unwrap_or(0),
                    a[1].as_u64().unwrap_or(0),
                    n["replicas"]
                ),
                None => "not a member".to_string(),
            };
            let node = match n["node"].as_object() {
                Some(x) => format!(
                    "node: epoch {}, {}, {} entries ({} locked){}",
                    x["epoch"],
                    if x["settled"] == true { "settled" } else { "not settled" },
                    x["entries"].as_array().map_or(0, |e| e.len()),
                    x["locked"],
                    if x["lease_lost"] == true { ", lease lost" } else { "" }
                ),
                None => "node: no answer".to_string(),
            };
            out.push_str(&format!(
                "slot {:>2}  {}  id {:#06x}  {range}  {node}\n",
                n["slot"],
                n["addr"].as_str().unwrap_or(""),
                n["ident"].as_u64().unwrap_or(0)
            ));
        }
        Ok((out, ok))
    })
}

/// Clock-rate bound assumed between any two processes (1 %, far above a real clock's
/// drift): a node stops at `L·(1 − RHO)` after sending a renewal, by its clock; the
/// service counts the lease as running out `L·(1 + RHO)` after it received the renewal,
/// by its clock.
pub const RHO: f64 = 0.01;

/// Beats and lease checks per lease.
pub const TICKS_PER_LEASE: u32 = 10;

/// Beat periods without a beat after which a successor suspects its predecessor.
pub const SUSPECT_AFTER_BEATS: u32 = 3;

/// Default lease of [`Membership::start`].
pub const DEFAULT_LEASE: Duration = Duration::from_millis(2000);

/// A change an administrator asks the membership service for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Slot `n` joins (once its node is connected to the service).
    Join(u16),
    /// Slot `n` leaves gracefully (hands its entries over, then its process exits).
    Leave(u16),
}

impl std::fmt::Display for Request {
    /// `join of slot 7`, `leave of slot 3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Join(n) => write!(f, "join of slot {n}"),
            Request::Leave(n) => write!(f, "leave of slot {n}"),
        }
    }
}

/// What the membership service says of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipState {
    /// The current view.
    pub view: View,
    /// Every live node of the last change installed `view` and has all its arcs, and no
    /// graceful leave is in progress.
    pub settled: bool,
    /// Slots whose node is connected to the service (bit per slot).
    pub up: u16,
    /// Changes asked for and not started yet.
    pub queued: u16,
}

/// An administrator's connection to the membership service (`hilock ring join|leave`).
pub struct Admin {
    reader: Reader,
    tx: mpsc::UnboundedSender<Frame>,
    last: MembershipState,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("last", &self.last).finish()
    }
}

impl Admin {
    /// Connects to the service at `membership`; fails after `limit`.
    pub async fn connect(membership: SocketAddr, limit: Duration) -> Result<Admin, String> {
        let go = async {
            let (mut reader, tx) = dial(membership, Addr::Chord)
                .await
                .map_err(|e| format!("membership service at {membership}: {e}"))?;
            loop {
                match reader.next().await {
                    Some(Frame::State(last)) => return Ok(Admin { reader, tx, last }),
                    Some(_) => continue,
                    None => {
                        return Err(format!(
                            "membership service at {membership} closed the connection"
                        ))
                    }
                }
            }
        };
        tokio::time::timeout(limit, go)
            .await
            .map_err(|_| format!("no answer from the membership service at {membership}"))?
    }

    /// The state last heard of.
    pub fn state(&self) -> MembershipState {
        self.last
    }

    /// Asks for `r` (the answer is not waited for: [`Admin::ask_answered`] does).
    pub fn ask(&self, r: Request) -> Result<(), String> {
        self.tx
            .send(Frame::Ask(r))
            .map_err(|_| "the membership connection closed".to_string())
    }

    /// Asks for `r` and waits at most `limit` for the service's [`Answer`].
    pub async fn ask_answered(&mut self, r: Request, limit: Duration) -> Result<Answer, String> {
        self.ask(r)?;
        self.answer(limit).await
    }

    /// Withdraws `r` if it has not started; waits at most `limit` for the answer: whether
    /// it was still queued (and is withdrawn now).
    pub async fn withdraw(&mut self, r: Request, limit: Duration) -> Result<bool, String> {
        self.tx
            .send(Frame::Withdraw(r))
            .map_err(|_| "the membership connection closed".to_string())?;
        match self.answer(limit).await? {
            Answer::Withdrawn(w) => Ok(w),
            other => Err(format!("the membership service answered {other:?}")),
        }
    }

    /// The next [`Answer`] (states read meanwhile are kept), at most `limit`.
    async fn answer(&mut self, limit: Duration) -> Result<Answer, String> {
        let go = async {
            loop {
                match self.reader.next().await {
                    Some(Frame::State(s)) => self.last = s,
                    Some(Frame::Answer(a)) => return Ok(a),
                    Some(_) => {}
                    None => return Err("the membership service closed the connection".to_string()),
                }
            }
        };
        tokio::time::timeout(limit, go)
            .await
            .map_err(|_| format!("the membership service did not answer within {limit:?}"))?
    }

    /// Waits until the state is settled and satisfies `f`, at most `limit`.
    pub async fn wait_for(
        &mut self,
        limit: Duration,
        f: impl Fn(&MembershipState) -> bool,
    ) -> Result<MembershipState, String> {
        match self.wait_until(limit, f).await? {
            Some(s) => Ok(s),
            None => Err(format!(
                "not settled after {limit:?}: view epoch {} members {}, settled {}, up {}",
                self.last.view.epoch,
                slots_of(self.last.view.members),
                self.last.settled,
                slots_of(self.last.up)
            )),
        }
    }

    /// [`Admin::wait_for`], with `None` when `limit` passed.
    async fn wait_until(
        &mut self,
        limit: Duration,
        f: impl Fn(&MembershipState) -> bool,
    ) -> Result<Option<MembershipState>, String> {
        let go = async {
            loop {
                if self.last.settled && f(&self.last) {
                    return Ok(self.last);
                }
                match self.reader.next().await {
                    Some(Frame::State(s)) => self.last = s,
                    Some(_) => {}
                    None => return Err("the membership service closed the connection".to_string()),
                }
            }
        };
        match tokio::time::timeout(limit, go).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }
}

/// A slot set as `[0, 2, 5]`.
pub fn slots_of(bits: u16) -> String {
    let v: Vec<String> = (0..16)
        .filter(|i| bits & (1 << i) != 0)
        .map(|i: u16| i.to_string())
        .collect();
    format!("[{}]", v.join(", "))
}

/// How long `hilock ring join|leave` waits for the service's answer to a withdrawal.
const WITHDRAW_WAIT: Duration = Duration::from_secs(2);

/// `hilock ring join|leave`: asks the service at `membership` for `r` and waits until the
/// view has (join) or has not (leave) the slot and every node involved is settled.
///
/// A leave of a slot that is not a member is refused at once (one line, saying so); a
/// join of the slot still queued is withdrawn by it, and the line says that too. So is a
/// leave of the view's only member. A change
/// that has not started when `limit` passes is withdrawn (the line says why it did not
/// start: for a join, most often that the slot's node is not connected to the service);
/// one that started completes on its own, and the line says that.
pub fn change(membership: SocketAddr, r: Request, limit: Duration) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio: {e}"))?;
    if membership == crate::config::NO_SERVICE {
        // `--config` of a ring whose view is in etcd: there is no service to ask.
        return Err(format!(
            "{r}: this ring's view is kept in etcd (membership = \"etcd\"), there is no membership service to ask: a node joins by starting with its slot (`hilock node --config F --id N`) and leaves gracefully on SIGTERM; `hilock status --config F` shows the view"
        ));
    }
    rt.block_on(async move {
        let t0 = tokio::time::Instant::now();
        // From here Ctrl-C, SIGTERM and SIGHUP no longer end the process: once the change is
        // asked for, an interruption withdraws it as the timeout does.
        let mut stop = crate::proc::StopSignals::new()?;
        let mut a = Admin::connect(membership, limit).await?;
        let (n, join) = match r {
            Request::Join(n) => (n, true),
            Request::Leave(n) => (n, false),
        };
        if usize::from(n) >= SLOTS {
            return Err(format!("--id {n}: the ring has {SLOTS} slots"));
        }
        // The service does not empty the view: a leave of its only member would be queued
        // and never start.
        let view = a.state().view;
        if !join && view.members == 1 << n {
            return Err(format!(
                "{r}: slot {n} is the only member of view epoch {} members {}: nobody could \
                 take its entries over; stop its node instead (its locks end with it)",
                view.epoch,
                slots_of(view.members)
            ));
        }
        // The service answers at once; a `limit` shorter than that still gets its answer.
        let answer = a
            .ask_answered(r, limit.saturating_sub(t0.elapsed()).max(WITHDRAW_WAIT))
            .await
            .map_err(|e| format!("{r}: {e}"))?;
        match answer {
            Answer::Queued => {}
            Answer::NotMember { view, withdrew } => {
                return Err(format!(
                    "{r}: slot {n} is not a member of view epoch {} members {}, so it has \
                     nothing to leave{}",
                    view.epoch,
                    slots_of(view.members),
                    if withdrew {
                        "; its join, which was still queued, is withdrawn"
                    } else {
                        ""
                    }
                ))
            }
            Answer::Misplaced(diffs) => {
                return Err(format!(
                    "{r}: its node was refused: {}",
                    misplaced_words(&diffs, "at that node", "at the membership service")
                ))
            }
            other => return Err(format!("{r}: the membership service answered {other:?}")),
        }
        let left = limit.saturating_sub(t0.elapsed());
        let (done, interrupted) = tokio::select! {
            done = a.wait_until(left, |s| s.view.has(NodeId(n)) == join) => {
                (done.map_err(|e| format!("{r}: {e}"))?, false)
            }
            r = stop.recv() => {
                r?;
                (None, true)
            }
        };
        if let Some(s) = done {
            return Ok(format!(
                "{} {n}: view epoch {} members {}\n",
                if join { "joined" } else { "left" },
                s.view.epoch,
                slots_of(s.view.members)
            ));
        }
        // Timed out or interrupted: withdraw the change unless it started.
        let took = t0.elapsed();
        let ended = if interrupted {
            "interrupted"
        } else {
            "not done"
        };
        let withdrawn = a.withdraw(r, WITHDRAW_WAIT).await;
        let s = a.state();
        let now = format!(
            "view epoch {} members {}, {}, nodes connected {}",
            s.view.epoch,
            slots_of(s.view.members),
            if s.settled { "settled" } else { "changing" },
            slots_of(s.up)
        );
        Err(match withdrawn {
            Ok(true) if interrupted => format!(
                "{r} interrupted after {took:.1?}: withdrawn, it does not happen later ({now})"
            ),
            Ok(true) if join && s.up & (1 << n) == 0 => format!(
                "{r} withdrawn after {took:.1?}: node {n} is not connected to the membership \
                 service at {membership} (it does not run, or cannot reach the service): start \
                 it, then join again ({now})"
            ),
            Ok(true) => format!(
                "{r} withdrawn after {took:.1?}: it did not start, the change before it has \
                 not settled ({now}); `hilock ring status` shows which node holds it up"
            ),
            Ok(false) if interrupted => format!(
                "{r} interrupted after {took:.1?}, but it had started ({now}): it completes \
                 on its own; `hilock ring status` shows when"
            ),
            Ok(false) => format!(
                "{r} started but has not settled after {took:.1?} ({now}): it completes on \
                 its own; `hilock ring status` shows which node holds it up"
            ),
            Err(e) => format!(
                "{r} {ended} after {took:.1?} ({now}), and its withdrawal was not answered \
                 ({e}): it may still happen{}",
                if join {
                    format!("; `hilock ring leave --id {n}` withdraws a join still queued")
                } else {
                    String::new()
                }
            ),
        })
    })
}

/// `hilock ring membership`: runs the membership service on `cfg`'s `[ring]` address until
/// Ctrl-C or SIGTERM; it lets in only nodes whose slot addresses are `cfg`'s `[[nodes]]`.
pub fn membership_service(file: &crate::Config) -> Result<String, String> {
    let (slots, _) = slot_addrs(file)?;
    let cfg = file
        .ring
        .as_ref()
        .ok_or("not a ring configuration (engine = \"ring\" and a [ring] table)")?;
    if cfg.membership == crate::config::NO_SERVICE {
        return Err(
            "this ring's view is kept in etcd (membership = \"etcd\"): it has no membership \
             service to run; start its nodes (`hilock node --config F --id N`)"
                .to_string(),
        );
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(cfg.membership)
            .await
            .map_err(|e| {
                cannot_listen(
                    cfg.membership,
                    &e,
                    "is this ring's membership service running already?",
                )
            })?;
        let m = Membership::start_with_slots(l, cfg.members, cfg.lease, slots)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            "ring membership service on {}, first view {}",
            m.addr(),
            slots_of(cfg.members)
        );
        crate::proc::StopSignals::new()?.recv().await?;
        Ok(String::new())
    })
}

/// `hilock node --config F` with `engine = "ring"`: runs the ring node of `cfg.id` (see
/// [`serve`]).
/// How a ring node's process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEnd {
    /// It was asked to (a signal, or `hilock ring leave`) and stopped or left: exit 0.
    Stopped(String),
    /// On its own: its lease ran out or the membership service went away; the process
    /// exits 75 (`docs/cli.md`), so that a supervisor restarts it.
    Lost(String),
}

pub fn serve_config(cfg: &crate::Config) -> Result<NodeEnd, String> {
    if cfg.membership != crate::config::Membership::Static {
        #[cfg(feature = "etcd")]
        return etcd::serve_config(cfg);
        #[cfg(not(feature = "etcd"))]
        return Err("membership = \"etcd\" needs a hilock built with --features etcd".to_string());
    }
    let (addrs, membership) = slot_addrs(cfg)?;
    run_node(cfg.id, addrs, cfg.listen, membership)
}

/// The slots' addresses (`[i]`: slot `i`'s node, `None`: no such node) and the membership
/// service's address of a ring configuration.
pub fn slot_addrs(cfg: &crate::Config) -> Result<(Vec<Option<SocketAddr>>, SocketAddr), String> {
    let ring = cfg
        .ring
        .as_ref()
        .ok_or("engine = \"ring\" needs a [ring] table")?;
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for n in &cfg.nodes {
        *addrs
            .get_mut(usize::from(n.id))
            .ok_or_else(|| format!("node {}: the ring has {SLOTS} slots", n.id))? = Some(n.addr);
    }
    Ok((addrs, ring.membership))
}

/// Where a client of the ring configured by `cfg` takes its views, and that source's
/// name for error messages: the membership service, or — `membership = "etcd"` — the view
/// etcd holds, followed (`etcd::follow_view`; needs the `etcd` feature).
pub async fn client_views(cfg: &crate::Config) -> Result<(Views, String), String> {
    let (_, membership) = slot_addrs(cfg)?;
    if membership != crate::config::NO_SERVICE {
        return Ok((
            Views::Service(membership),
            format!("the ring's membership service at {membership}"),
        ));
    }
    #[cfg(feature = "etcd")]
    {
        let o = crate::membership::EtcdOptions::of_config(cfg)?;
        let w = etcd::follow_view(&o, &cfg.cluster).await?;
        Ok((Views::Watch(w), "the ring's view in etcd".to_string()))
    }
    #[cfg(not(feature = "etcd"))]
    Err(
        "this ring's view is kept in etcd (membership = \"etcd\"), and this hilock was built \
         without the etcd feature"
            .to_string(),
    )
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 20)
        .new_codec()
}

/// Spawns the writer of `w`: every frame sent on the returned channel goes out in order;
/// the task ends when the connection breaks or the channel closes.
pub(crate) fn writer(w: OwnedWriteHalf) -> mpsc::UnboundedSender<Frame> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
    tokio::spawn(async move {
        let mut fw = FramedWrite::new(w, codec());
        while let Some(f) = rx.recv().await {
            let bytes = postcard::to_stdvec(&f).expect("in-memory encoding cannot fail");
            if fw.send(bytes::Bytes::from(bytes)).await.is_err() {
                break;
            }
        }
    });
    tx
}

/// Reads frames from `r` until it closes or sends garbage.
pub(crate) struct Reader(FramedRead<OwnedReadHalf, LengthDelimitedCodec>);

impl Reader {
    pub(crate) fn new(r: OwnedReadHalf) -> Self {
        Reader(FramedRead::new(r, codec()))
    }
    /// The next frame; `None` when the connection is closed or broken.
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        let b = self.0.next().await?.ok()?;
        postcard::from_bytes(&b).ok()
    }
}

/// Serves one accepted connection: its first frame must be `Hello(from)`; then
/// `open(from, writer)` and every later frame as `frame(from, writer, f)` go to `ev`.
/// Returns the peer when its connection ended, `None` when it never said hello or `ev`
/// closed.
pub(crate) async fn read_peer<E>(
    s: TcpStream,
    ev: mpsc::UnboundedSender<E>,
    open: fn(Addr, mpsc::UnboundedSender<Frame>) -> E,
    frame: fn(Addr, &mpsc::UnboundedSender<Frame>, Frame) -> E,
) -> Option<Addr> {
    let _ = s.set_nodelay(true);
    let (r, w) = s.into_split();
    let mut r = Reader::new(r);
    let Some(Frame::Hello(from)) = r.next().await else {
        return None;
    };
    let w = writer(w);
    ev.send(open(from, w.clone())).ok()?;
    while let Some(f) = r.next().await {
        ev.send(frame(from, &w, f)).ok()?;
    }
    Some(from)
}

/// Dials `addr` and says who we are.
pub(crate) async fn dial(
    addr: SocketAddr,
    me: Addr,
) -> std::io::Result<(Reader, mpsc::UnboundedSender<Frame>)> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let (r, w) = s.into_split();
    let tx = writer(w);
    let _ = tx.send(Frame::Hello(me));
    Ok((Reader::new(r), tx))
}

/// `hilock ring-node`: runs node `id` of the ring whose slots are at `peers`
/// (comma-separated, slot order) until it has left gracefully or the membership service at
/// `membership` went away.
pub fn serve(id: u16, peers: &str, membership: SocketAddr) -> Result<NodeEnd, String> {
    let mut addrs: Vec<Option<SocketAddr>> = vec![None; SLOTS];
    for (i, p) in peers.split(',').enumerate() {
        let a = p
            .trim()
            .parse()
            .map_err(|e| format!("--peers: {p:?} is not an address: {e}"))?;
        let a: SocketAddr = a;
        if a.ip().is_unspecified() {
            return Err(format!(
                "--peers: slot {i} is {a}, which other nodes cannot dial; give each slot the \
                 address the others reach it at"
            ));
        }
        if let Some(j) = addrs.iter().position(|b| *b == Some(a)) {
            return Err(format!(
                "--peers: slots {j} and {i} have the same address {a}"
            ));
        }
        *addrs
            .get_mut(i)
            .ok_or_else(|| format!("--peers: more than {SLOTS} addresses"))? = Some(a);
    }
    let me = addrs
        .get(id as usize)
        .copied()
        .flatten()
        .ok_or_else(|| format!("--id {id}: no such slot in --peers"))?;
    if membership == me {
        return Err(format!(
            "--membership {membership} is slot {id}'s own address in --peers: the membership \
             service (`hilock ring membership`) listens on an address of its own"
        ));
    }
    run_node(id, addrs, me, membership)
}

/// The listener of ring node `id` at `me`; an address in use is most likely a node of
/// the same slot that runs already, and the one line says so (as a token node's does).
pub(crate) async fn bind_node(id: u16, me: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(me).await.map_err(|e| {
        cannot_listen(
            me,
            &e,
            &format!("is another hilock node with id {id} running?"),
        )
    })
}

/// The one line for an address this process cannot listen on; an address in use is most
/// likely taken by the process `in_use` asks about, and the line ends with that question.
fn cannot_listen(addr: SocketAddr, e: &std::io::Error, in_use: &str) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!("cannot listen on {addr}: {e} ({in_use})")
    } else {
        format!("cannot listen on {addr}: {e}")
    }
}

/// Runs node `id` listening on `me` until it has left or the service went away.
fn run_node(
    id: u16,
    addrs: Vec<Option<SocketAddr>>,
    me: SocketAddr,
    membership: SocketAddr,
) -> Result<NodeEnd, String> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio: {e}"))?;
    rt.block_on(async move {
        let l = bind_node(id, me).await?;
        let node = RingNode::start(id, l, std::sync::Arc::new(addrs), membership)
            .await
            .map_err(|e| match e.kind() {
                // Refused by the service (`Frame::Misplaced`), or a service that did not
                // answer: the line is whole and names the service.
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::TimedOut => e.to_string(),
                _ => format!("membership service at {membership}: {e}"),
            })?;
        while !node.stopped() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // Only the service's word that its graceful leave is done is a stop it was asked
        // for; a member or not, a node whose service went away stopped on its own.
        let s = node.snapshot();
        Ok(if s.left {
            NodeEnd::Stopped(format!("ring node {id} left the ring and stopped\n"))
        } else if s.lease_lost {
            NodeEnd::Lost(format!(
                "ring node {id}: its lease ran out (the process was paused, or cut off from \
                 the membership service at {membership}); it stopped"
            ))
        } else {
            NodeEnd::Lost(format!(
                "ring node {id}: the membership service at {membership} went away; it stopped"
            ))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock is its 16-bit key (`docs/engines/ring.md`, "Limits"): two top-level names
    /// that hash alike are one lock, whatever lies below them.
    #[test]
    fn two_top_level_names_that_hash_alike_are_one_lock() {
        assert_eq!(key_of("/acct215"), key_of("/acct506"));
        assert_eq!(key_of("/acct215/a"), key_of("/acct506/b/c"));
        assert_eq!(key_of("/acct215").0, 35878);
        assert_ne!(key_of("/acct215"), key_of("/acct216"));
    }

    /// `hilock ring-node` refuses, before it binds or dials anything, a slot list in which
    /// two slots share an address, a slot others cannot dial, and a membership service at
    /// the node's own address (which it would wait on for ever).
    #[test]
    fn ring_node_refuses_shared_unreachable_and_own_addresses() {
        let m: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let err = |id, peers: &str, m| match serve(id, peers, m) {
            Err(e) => e,
            Ok(_) => panic!("{peers} accepted"),
        };
        let e = err(0, "127.0.0.1:7301,127.0.0.1:7301", m);
        assert_eq!(
            e,
            "--peers: slots 0 and 1 have the same address 127.0.0.1:7301"
        );
        let e = err(0, "0.0.0.0:7301", m);
        assert!(e.contains("slot 0 is 0.0.0.0:7301"), "{e}");
        let e = err(
            1,
            "127.0.0.1:7301,127.0.0.1:7302",
            "127.0.0.1:7302".parse().unwrap(),
        );
        assert!(e.contains("slot 1's own address"), "{e}");
    }

    /// A new client numbers on from the clock ([`clock_seq`]): a later client with the same
    /// id starts past where an earlier one started; and it draws its own incarnation, so
    /// the ring tells the two apart.
    #[tokio::test]
    async fn a_new_client_numbers_its_requests_on_from_the_clock() {
        let nodes = std::sync::Arc::new(vec![None; SLOTS]);
        let view = View {
            epoch: 0,
            members: 0b1,
        };
        let before = clock_seq();
        let (_tx, w) = tokio::sync::watch::channel(view);
        let first = RingClient::connect_to(7, nodes.clone(), Views::Watch(w.clone()))
            .await
            .unwrap();
        assert!(first.seq() >= before, "{} < {before}", first.seq());
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let second = RingClient::connect_to(7, nodes, Views::Watch(w))
            .await
            .unwrap();
        assert!(second.seq() > first.seq() + 1000, "{}", second.seq());
        assert_ne!(
            first.incarnation(),
            second.incarnation(),
            "two processes with one id are two incarnations"
        );
    }

    #[test]
    fn the_slot_identifiers_are_distinct_and_frames_round_trip() {
        let r = ring();
        assert_eq!(r.bits(), BITS);
        let f = Frame::Status {
            view: View {
                epoch: 3,
                members: 0b111,
            },
            settled: true,
        };
        let b = postcard::to_stdvec(&f).unwrap();
        assert!(matches!(
            postcard::from_bytes::<Frame>(&b).unwrap(),
            Frame::Status { settled: true, .. }
        ));
    }
}
