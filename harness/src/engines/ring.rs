//! The ring engine (the Chord lock paper, hilock's replicated variant, r = [`R`]) as a
//! [`Protocol`] site of the one harness, for the simulator's airline workload
//! (`hilock_benches::ringair`).
//!
//! - **Sites.** [`RingSite`] puts one kernel [`RingServer`] (slot `i` of a 16-slot ring,
//!   slots at `hash("hilock-ring-slot-<i>")` as in the runtime) and one kernel
//!   [`ChordClient`] (client `i`, routing with a full membership view) at node `i`, behind
//!   the kernel's [`Protocol`] interface, so that the one harness ([`crate::Cluster`])
//!   routes and delivers its messages and checks mutual exclusion
//!   ([`crate::Cluster::check_exclusive`]) after every grant. A message between the client
//!   and the server of one node is a local call (not sent, no delay), as the token engine's
//!   local acquire.
//! - **Locks.** The ring's locks are exclusive only (no modes): a site serves [`ENTRIES`]
//!   locks, entry `e` the lock `/airline-entry-<e>` (each its own top-level element, so the
//!   entries are spread over the ring, [`entry_key`]), and grants them in W.
//! - **The seed's lock does not queue**: a refused lock is asked again at the next poll
//!   (the poll input is [`Input::Upgrade`] of the lock, which the ring has no other use for;
//!   [`RingSite::wants_poll`] names the lock; each poll is a request and an answer). A
//!   `Retry` answer of the node's own server (a write on the key waits for its replicas) is
//!   resent at the next poll too; one from another node's server is resent at once (the
//!   round trip is the wait).

use super::adapter::{all_or_nothing, exclusive_held};
use crate::Invariants;
use crate::VecSink;
use hilock_kernel::ring::{
    hash, Addr, Answer, ChordClient, ChordError, ChordMsg, ClientEvent, ClientId, Key, Op, Out,
    Ring, RingServer, View,
};
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink,
};
use std::collections::VecDeque;

/// Slots of the ring (the kernel's ring holds at most 16).
pub const SLOTS: usize = 16;
/// Lock-table capacity of a server.
pub const TABLE: usize = 16;
/// Successor replicas (the kernel's default).
pub const R: u8 = 2;
/// Entry locks a site serves: locks `0..ENTRIES`, lock `e` at the key [`entry_key`]`(e)`
/// (the entries of the simulator's airline workload).
pub const ENTRIES: usize = 8;

/// The ring's messages.
pub type RingMsg = ChordMsg<TABLE>;

/// The 16-slot ring of the runtime: slot `i` at `hash("hilock-ring-slot-<i>", 16)`.
pub fn ring() -> Result<Ring<SLOTS>, ChordError> {
    let ids: [u16; SLOTS] =
        core::array::from_fn(|i| hash(format!("hilock-ring-slot-{i}").as_bytes(), 16).0);
    Ring::new(16, ids)
}

/// The key of entry lock `e`.
pub fn entry_key(e: usize) -> Key {
    hash(format!("airline-entry-{e}").as_bytes(), 16)
}

fn entry_of(k: Key) -> Option<usize> {
    (0..ENTRIES).find(|e| entry_key(*e) == k)
}

/// A ring server and a client at one node, as a [`Protocol`] site.
#[derive(Clone, Debug)]
pub struct RingSite {
    id: NodeId,
    server: RingServer<SLOTS, TABLE>,
    client: ChordClient<SLOTS>,
    keys: [Key; ENTRIES],
    held: [bool; ENTRIES],
    current: Option<(Op, usize)>,
    queue: VecDeque<(Op, usize)>,
    /// The current request waits to be asked again ([`Input::Upgrade`], the poll input).
    poll: Option<Poll>,
    polls: u64,
}

/// Why the current request waits for a poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Poll {
    /// The lock was refused (held by another client): ask again.
    Refused,
    /// The local server said retry (a write on the key in progress): resend.
    Retry,
}

impl RingSite {
    /// Node `i` of a ring whose members are the first `n` slots.
    pub fn new(i: usize, n: usize) -> Result<Self, ChordError> {
        if n == 0 || n > SLOTS || i >= n {
            return Err(ChordError::BadView);
        }
        let ring = ring()?;
        let view = View {
            epoch: 0,
            members: if n == 16 { 0xffff } else { (1u16 << n) - 1 },
        };
        let id = NodeId(i as u16);
        Ok(RingSite {
            id,
            server: RingServer::new(id, ring, R, view)?,
            client: ChordClient::new(ClientId(i as u8), ring, view)?,
            keys: core::array::from_fn(entry_key),
            held: [false; ENTRIES],
            current: None,
            queue: VecDeque::new(),
            poll: None,
            polls: 0,
        })
    }

    /// Refused locks asked again so far.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// The lock whose request waits for a poll ([`Input::Upgrade`] of it).
    pub fn wants_poll(&self) -> Option<LockId> {
        match (self.poll, self.current) {
            (Some(_), Some((_, l))) => Some(LockId(l as u16)),
            _ => None,
        }
    }

    /// The server's table.
    pub fn server(&self) -> &RingServer<SLOTS, TABLE> {
        &self.server
    }

    /// A lock request for entry `l` is waiting or queued.
    fn pending(&self, l: usize) -> bool {
        let lock = |c: &(Op, usize)| c.0 == Op::Lock && c.1 == l;
        self.current.as_ref().is_some_and(lock) || self.queue.iter().any(lock)
    }

    /// [`RingSite::pump`] of `first`, whose messages may also be for other nodes.
    fn pump_out(
        &mut self,
        first: Vec<(Addr, Addr, RingMsg)>,
        sends: &mut Vec<Output<RingMsg>>,
    ) -> Result<(), ChordError> {
        let me_client = Addr::Client(ClientId(self.id.0 as u8));
        let mut local = Vec::new();
        for (f, t, m) in first {
            match t {
                t if t == me_client || t == Addr::Node(self.id) => local.push((f, t, m)),
                Addr::Node(x) => sends.push(Output::Send { to: x, msg: m }),
                _ => return Err(ChordError::BadSender),
            }
        }
        self.pump(local, sends)
    }

    /// Runs `first` (sender, receiver, message: each to this node's client or server) and
    /// every local message it causes, starting queued client requests when the client is
    /// idle; messages to other nodes go to `sends`.
    fn pump(
        &mut self,
        first: Vec<(Addr, Addr, RingMsg)>,
        sends: &mut Vec<Output<RingMsg>>,
    ) -> Result<(), ChordError> {
        let me_client = Addr::Client(ClientId(self.id.0 as u8));
        let me_node = Addr::Node(self.id);
        let mut work: VecDeque<(Addr, Addr, RingMsg)> = first.into();
        let route = |origin: Addr,
                     out: VecSink<Out<TABLE>>,
                     work: &mut VecDeque<(Addr, Addr, RingMsg)>,
                     sends: &mut Vec<Output<RingMsg>>|
         -> Result<(), ChordError> {
            for o in out.0 {
                match o.to {
                    t if t == me_client || t == me_node => work.push_back((origin, t, o.msg)),
                    Addr::Node(x) => sends.push(Output::Send { to: x, msg: o.msg }),
                    Addr::Client(c) => sends.push(Output::Send {
                        to: NodeId(c.0 as u16),
                        msg: o.msg,
                    }),
                    Addr::Chord => return Err(ChordError::BadSender),
                }
            }
            Ok(())
        };
        loop {
            if self.current.is_none() {
                if let Some((op, l)) = self.queue.pop_front() {
                    let mut out: VecSink<Out<TABLE>> = VecSink::new();
                    self.client.start(op, self.keys[l], &mut out)?;
                    self.current = Some((op, l));
                    route(me_client, out, &mut work, sends)?;
                }
            }
            let Some((from, to, msg)) = work.pop_front() else {
                return Ok(());
            };
            let mut out: VecSink<Out<TABLE>> = VecSink::new();
            if to == me_client {
                let ChordMsg::Reply {
                    token,
                    epoch,
                    answer,
                } = msg
                else {
                    return Err(ChordError::BadSender);
                };
                let (ev, _) = self.client.on_reply(token, epoch, answer, &mut out)?;
                if ev == ClientEvent::Waiting && from == me_node {
                    // A retry from this node's own server (a write on the key waits for
                    // its replicas): resending now would loop without time passing.
                    out.0.clear();
                    self.poll = Some(Poll::Retry);
                }
                if let ClientEvent::Done(op, key, a) = ev {
                    let l = entry_of(key).ok_or(ChordError::BadKey(key))?;
                    match (op, a) {
                        (Op::Lock, Answer::Granted) => {
                            self.held[l] = true;
                            self.current = None;
                            sends.push(Output::Granted {
                                lock: LockId(l as u16),
                                mode: Mode::W,
                            });
                        }
                        (Op::Lock, _) => {
                            // Refused: the seed's lock does not queue; asked again at the
                            // next poll.
                            self.poll = Some(Poll::Refused);
                        }
                        _ => self.current = None,
                    }
                }
                route(me_client, out, &mut work, sends)?;
            } else {
                let from = match &msg {
                    ChordMsg::Request { token, .. } => Addr::Client(token.client),
                    _ => from,
                };
                self.server.step(from, &msg, &mut out)?;
                route(me_node, out, &mut work, sends)?;
            }
        }
    }
}

fn kerr(e: ChordError, id: NodeId) -> KernelError {
    match e {
        ChordError::OutputsFull => KernelError::OutputsFull,
        ChordError::NotMember(n) => KernelError::UnknownNode(n),
        _ => KernelError::UnknownNode(id),
    }
}

impl Protocol for RingSite {
    type Msg = RingMsg;
    const MAX_OUTPUTS: usize = 4 * (TABLE + 2 * SLOTS + 1);

    const TOKENS: bool = false;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<RingMsg>>>(
        &mut self,
        input: Input<'_, RingMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        all_or_nothing(self, out, Self::MAX_OUTPUTS, |site, sends| {
            let first = match input {
                Input::Acquire { lock, mode } => {
                    let l = lock.idx();
                    if l >= ENTRIES {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if mode == Mode::Phi {
                        return Err(KernelError::InvalidMode);
                    }
                    if site.held[l] {
                        return Err(KernelError::AlreadyHeld(lock));
                    }
                    if site.pending(l) {
                        return Err(KernelError::AlreadyPending(lock));
                    }
                    site.queue.push_back((Op::Lock, l));
                    Vec::new()
                }
                Input::Release { lock } => {
                    let l = lock.idx();
                    if l >= ENTRIES {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if !site.held[l] {
                        return Err(KernelError::NotHeld(lock));
                    }
                    site.held[l] = false;
                    site.queue.push_back((Op::Unlock, l));
                    Vec::new()
                }
                Input::Deliver { from, msg } => {
                    let me_client = Addr::Client(ClientId(site.id.0 as u8));
                    match msg {
                        ChordMsg::Reply { .. } => vec![(Addr::Node(from), me_client, msg.clone())],
                        _ => vec![(Addr::Node(from), Addr::Node(site.id), msg.clone())],
                    }
                }
                // The poll input: ask again for the refused (or retried) lock.
                Input::Upgrade { lock } => {
                    let me_client = Addr::Client(ClientId(site.id.0 as u8));
                    let (Some(p), Some((op, l))) = (site.poll, site.current) else {
                        return Err(KernelError::NotHoldingU(lock));
                    };
                    if l != lock.idx() {
                        return Err(KernelError::NotHoldingU(lock));
                    }
                    let mut out: VecSink<Out<TABLE>> = VecSink::new();
                    let r = match p {
                        Poll::Refused => site.client.start(op, site.keys[l], &mut out),
                        Poll::Retry => site.client.timeout(site.client.view(), &mut out),
                    };
                    r.map_err(|e| kerr(e, site.id))?;
                    site.poll = None;
                    site.polls += 1;
                    out.0
                        .into_iter()
                        .map(|o| (me_client, o.to, o.msg))
                        .collect()
                }
                _ => return Err(KernelError::InvalidMode),
            };
            site.pump_out(first, sends).map_err(|e| kerr(e, site.id))
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        let held = self.held.get(lock.idx());
        exclusive_held(
            held.is_some(),
            held == Some(&true),
            KernelError::UnknownLock(lock),
        )
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock).map(|_| self.pending(lock.idx()))
    }

    fn kind(msg: &RingMsg) -> MsgKind {
        match msg {
            ChordMsg::Request { .. } => MsgKind::Request,
            ChordMsg::Reply { .. } => MsgKind::Grant,
            _ => MsgKind::Release,
        }
    }

    fn lock_of(msg: &RingMsg) -> LockId {
        let key = match msg {
            ChordMsg::Request { key, .. } | ChordMsg::ReplicaAck { key, .. } => Some(*key),
            ChordMsg::Replicate { slot, .. } => Some(slot.key),
            _ => None,
        };
        LockId(key.and_then(entry_of).unwrap_or(0) as u16)
    }
}

impl Invariants for RingSite {}
