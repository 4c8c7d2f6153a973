//! The core task: one kernel site per lock path, the local holders and waiters of each,
//! and the node's answers to its callers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use hilock_kernel::mode::strongest;
use hilock_kernel::token::recovery::{Epoch, LockReport, Plan, Stamped};
use hilock_kernel::{
    compatible, conflicts, Input, KernelError, Mode, NodeId, Output, Priority, Protocol,
    ValueBlock, VALUE_LEN,
};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::generation;
use super::recover::{all_members, new_site, static_site};
use super::status::CoreState;
use super::suspend::SavedLock;
use super::trace::{How, Recorder};
use super::{kind_index, Error, LockStatus, Shared};
use crate::config::MAX_NODES;
use crate::wire::{self, Frame, KOutputs, LockSite, SMsg, LOCK};

pub(super) type Reply<T> = oneshot::Sender<Result<T, Error>>;

pub(super) enum Cmd {
    Acquire {
        path: String,
        mode: Mode,
        prio: Priority,
        nested: bool,
        /// A try-lock: answered at once or by the kernel's `WouldBlock`, never queued
        /// (`spec/SPEC.md` 1.12).
        try_lock: bool,
        ticket: u64,
        /// The hold id and the hold's fencing token.
        reply: Reply<(u64, u64)>,
    },
    Release {
        path: String,
        hold: u64,
    },
    /// The caller of request `ticket` for `path` gave up (its future was dropped or timed
    /// out): a local waiter leaves the queue; a request given to the kernel is cancelled
    /// there (`Input::Cancel`, `spec/SPEC.md` 1.13; [`Core::pump`]).
    Cancel {
        path: String,
        ticket: u64,
    },
    Upgrade {
        path: String,
        hold: u64,
        /// The fencing token of the W hold.
        reply: Reply<u64>,
    },
    /// The lock value block the site's hold of `path` reads (`spec/SPEC.md` 1.15);
    /// `None` while the site holds nothing.
    Value {
        path: String,
        reply: Reply<Option<ValueBlock>>,
    },
    /// Answer `reply` once a request that hold `hold` of `path` blocks waits (the
    /// kernel's `Output::Blocking`, `spec/SPEC.md` 1.16): at once if the site's current
    /// hold was already told about a mode conflicting with the holder's.
    Blocking {
        path: String,
        hold: u64,
        reply: oneshot::Sender<Blocked>,
    },
    /// Hold `hold` of `path`, a W hold, writes the lock value block (`Input::SetValue`,
    /// `spec/SPEC.md` 1.15).
    SetValue {
        path: String,
        hold: u64,
        value: [u8; VALUE_LEN],
        reply: Reply<()>,
    },
    /// Hold `hold` of `path` converts to the weaker `mode` (`Input::Downgrade`,
    /// `spec/SPEC.md` 1.14).
    Downgrade {
        path: String,
        hold: u64,
        mode: Mode,
        /// Answered once done (the hold keeps its fencing token).
        reply: Reply<()>,
    },
    /// Hold `hold` of `path` converts to `mode`, not weaker, at once or not at all
    /// (`Input::Convert`, `spec/SPEC.md` 1.17).
    Convert {
        path: String,
        hold: u64,
        mode: Mode,
        /// Answered with the hold's fence once converted, or [`Error::WouldBlock`].
        reply: Reply<u64>,
    },
    Deliver {
        from: NodeId,
        /// The sender's epoch when it sent the message.
        epoch: Epoch,
        // Boxed: a token frame is a few hundred bytes, every other command is small.
        frame: Box<Frame>,
    },
    /// Every lock this node knows, and the core's state.
    Status {
        reply: oneshot::Sender<(Vec<LockStatus>, CoreState)>,
    },
    /// The core's state only (the metrics endpoint).
    Summary {
        reply: oneshot::Sender<CoreState>,
    },
    /// This node's parent for `path` (where its requests go) if the token is not here.
    Parent {
        path: String,
        reply: oneshot::Sender<Option<u16>>,
    },
    /// Where request `ticket` for `path` stands (for a timeout's error).
    Explain {
        path: String,
        ticket: u64,
        reply: oneshot::Sender<String>,
    },
    /// Answered once every command before it has been handled.
    Flush {
        reply: oneshot::Sender<()>,
    },
    /// A majority of the cluster has let this run of the node in: it may grant.
    Admitted,
    /// A peer knew an earlier run of this node: serve nothing.
    Fenced {
        reason: String,
    },
    /// A peer is a new run of a node this node knew.
    PeerRestarted {
        peer: u16,
    },
    /// A peer's offer of a generation for its run (`super::generation`).
    PeerGeneration {
        peer: u16,
        generation: u32,
    },
    /// A peer forwarded this node's request `serial` for `path` to the refused `peer`.
    DeadEnd {
        path: String,
        peer: u16,
        serial: u32,
    },
    /// A request (of `requester`, `serial`) for `path` that this node sent to the refused
    /// `peer`, before or after its refusal, and that `peer` never received (the link
    /// dropped it).
    LostRequest {
        path: String,
        peer: u16,
        requester: NodeId,
        serial: u32,
    },
    /// The node suspends (`super::suspend`): every local caller's hold is released,
    /// every waiter fails ([`Error::Stopped`]) and every kernel request is cancelled; then
    /// the answer is the run's generation and every lock's site, and the core takes no
    /// step any more. `Err` (and nothing changed but the callers' end) if this run cannot
    /// be resumed: it is refused, or has not agreed on a generation.
    Suspend {
        #[allow(clippy::type_complexity)]
        reply: oneshot::Sender<Result<(u32, Vec<SavedLock>), String>>,
    },
    /// The installed epoch, its members, and whether this run is still rejoining
    /// (recovery, `super::recover`).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Epoch {
        reply: oneshot::Sender<(Epoch, [bool; MAX_NODES], bool)>,
    },
    /// Recovery, a rejoining run: `epoch` with `members` is installed and does not let
    /// this run in; it reports against it and waits for the next one.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Observe {
        epoch: Epoch,
        members: [bool; MAX_NODES],
    },
    /// Recovery: take no kernel step until the next epoch is installed, and report every
    /// lock this node knows (the kernel's `FaultSite::report`).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Freeze {
        #[allow(clippy::type_complexity)]
        reply: oneshot::Sender<(Epoch, Vec<(String, LockReport<MAX_NODES>)>)>,
    },
    /// Recovery: install `epoch` with `members` and the plans of the locks any member
    /// knew (the kernel's `FaultSite::install`); every other lock is created afresh in it.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Install {
        epoch: Epoch,
        members: [bool; MAX_NODES],
        plans: Vec<(String, Plan<MAX_NODES>)>,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

struct Waiter {
    /// The caller's request number ([`Cmd::Explain`]).
    ticket: u64,
    mode: Mode,
    prio: Priority,
    /// Made by a caller that holds another lock of this node ([`Options::nested`]).
    nested: bool,
    reply: Reply<(u64, u64)>,
}

/// A U → W upgrade asked for by holder `hold`.
struct Upgrading {
    hold: u64,
    reply: Option<Reply<u64>>,
    /// Given to the kernel (only once `hold` is the only local holder).
    issued: bool,
}

/// A blocking notification (`spec/SPEC.md` 1.16, the DLM's blocking AST): a request of
/// another node for `mode`, at priority `prio`, waits for a hold of this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The mode the waiting request asks for (it conflicts with the hold's, Table 2.1).
    pub mode: Mode,
    /// The waiting request's priority (0 without priorities).
    pub prio: Priority,
}

struct LockEntry {
    site: Box<LockSite>,
    /// The kernel's held mode M_H: covers every local holder's mode.
    held: Mode,
    /// Local holders: hold id and mode; pairwise compatible (Table 2.1).
    holders: Vec<(u64, Mode)>,
    waiters: VecDeque<Waiter>,
    requesting: Option<Waiter>,
    upgrading: Option<Upgrading>,
    release_when_upgraded: bool,
    /// A request of this node for the lock went to this refused peer (a new run of a node
    /// this node knew, static membership): nothing answers it, so the site's request never
    /// completes and every later caller that cannot share a local hold fails at once,
    /// naming the peer, instead of waiting out its timeout.
    dead_end: Option<u16>,
    /// Requests of other nodes queued here that were told about `dead_end`
    /// ([`wire::Payload::DeadEnd`]): requester and serial.
    told: Vec<(NodeId, u32)>,
    /// The kernel's blocking notifications (`Output::Blocking`, `spec/SPEC.md` 1.16) to
    /// the site's current hold: waiting mode and priority. Emptied when the hold ends.
    blocking: Vec<Blocked>,
    /// Local holders waiting for a blocking notification ([`super::Guard::blocking`]).
    watchers: Vec<(u64, oneshot::Sender<Blocked>)>,
}

impl LockEntry {
    /// The fencing token of the site's current hold (0 while it holds nothing).
    fn fence(&self) -> u64 {
        self.site
            .site()
            .lock(LOCK)
            .ok()
            .and_then(|k| k.fence())
            .unwrap_or(0)
    }

    /// Whether a local caller asking for `w` may share what the node holds now, without
    /// a kernel request: the kernel's held mode covers `w.mode` (it is the stronger of
    /// the two compatible modes, so every mode a remote node may hold beside it is
    /// compatible with `w.mode` too), no upgrade is under way, and — unless the caller is nested, i.e. already holds a lock
    /// of this node and could otherwise wait for itself — no remote request waits for this
    /// lock here and `w.mode` is not frozen (Rule 6), so local sharing cannot starve a
    /// remote request.
    fn joinable(&self, me: NodeId, w: &Waiter) -> bool {
        if self.held == Mode::Phi || self.upgrading.is_some() || self.requesting.is_some() {
            return false;
        }
        if strongest(self.held, w.mode) != Ok(self.held) {
            return false;
        }
        // Implied by the cover: the modes a held mode covers (IR under R, IR and R under
        // U, IR under IW) are compatible with one another and with it, and the local
        // holders all have the held mode or a covered one.
        debug_assert!(self.holders.iter().all(|&(_, m)| compatible(m, w.mode)));
        if w.nested {
            return true;
        }
        let k = self.site.site().lock(LOCK).expect("one lock per site");
        !k.frozen().contains(w.mode) && k.queue().iter().all(|q| q.requester == me)
    }
}

pub(super) struct Core {
    shared: Arc<Shared>,
    /// Ordered by path: walking the locks (on admission, in a new generation) sends in the
    /// same order every run (a simulated run replays exactly).
    locks: BTreeMap<String, LockEntry>,
    out: Box<KOutputs>,
    next_hold: u64,
    /// A majority of the cluster has let this run in (until then requests wait).
    admitted: bool,
    /// This run was refused by a peer that knew an earlier one: nothing is served.
    fenced: Option<String>,
    /// The installed epoch and its members (recovery; epoch 0: every configured node).
    epoch: Epoch,
    members: [bool; MAX_NODES],
    /// Reported for the next epoch: no kernel step until it is installed (recovery).
    frozen: bool,
    /// The epoch whose install's outputs are being acted on ([`Core::would_block`]: a try
    /// the install refuses was not found busy).
    installing: Option<Epoch>,
    /// A new run of this node that rejoins (recovery): frozen, every site it creates is
    /// empty ([`FaultSite::joining`](hilock_kernel::token::recovery::FaultSite::joining)) until an
    /// epoch that includes this run is installed.
    rejoining: bool,
    /// Messages held back while frozen, or of an epoch not installed here yet: sender,
    /// its epoch, the message, its number on its link (recording, [`Recorder::arrived`]).
    held_back: Vec<(NodeId, Epoch, Frame, u64)>,
    /// Static membership with a state directory: each node's offer of a generation, until
    /// every node's is in (`super::generation`); frozen until then.
    offers: Vec<Option<u32>>,
    /// Waiting for the offers.
    awaiting: bool,
    /// Records every kernel step (`record` in the configuration; `super::trace`).
    trace: Option<Box<Recorder>>,
    /// The number of the message the next `Deliver` step takes (recording).
    trace_seq: u64,
    /// Suspended (`Cmd::Suspend`): the core task ends.
    suspended: bool,
}

impl Core {
    pub(super) fn new(shared: Arc<Shared>, rejoining: bool, trace: Option<Recorder>) -> Core {
        let shared_n = shared.n;
        let mut offers = Vec::new();
        if let Some((_, offer)) = &shared.state {
            offers = vec![None; shared_n];
            offers[usize::from(shared.id)] = Some(*offer);
        }
        let awaiting = !offers.is_empty();
        Core {
            admitted: shared.quorum() <= 1,
            offers,
            awaiting,
            shared,
            locks: BTreeMap::new(),
            out: Box::default(),
            next_hold: 1,
            fenced: None,
            installing: None,
            epoch: 0,
            members: all_members(shared_n),
            frozen: rejoining || awaiting,
            rejoining,
            held_back: Vec::new(),
            trace: trace.map(Box::new),
            trace_seq: 0,
            suspended: false,
        }
    }

    /// The core of a resumed run (`super::suspend`): the run's generation is agreed
    /// already (`generation`), and its locks are the saved ones.
    pub(super) fn resume(shared: Arc<Shared>, generation: u32, locks: Vec<SavedLock>) -> Core {
        let mut core = Core::new(shared, false, None);
        core.offers.clear();
        core.awaiting = false;
        core.frozen = false;
        core.epoch = generation;
        for l in locks {
            core.locks.insert(
                l.path,
                LockEntry {
                    site: Box::new(l.site),
                    held: Mode::Phi,
                    holders: Vec::new(),
                    waiters: VecDeque::new(),
                    requesting: None,
                    upgrading: None,
                    release_when_upgraded: false,
                    dead_end: l.dead_end,
                    told: l.told,
                    blocking: Vec::new(),
                    watchers: Vec::new(),
                },
            );
        }
        core
    }

    /// `Cmd::Suspend`: see there.
    fn suspend(&mut self) -> Result<(u32, Vec<SavedLock>), String> {
        // Not admitted yet is fine (the resumed run is let in again); a refused run, or one
        // without the run's generation, cannot come back.
        if self.fenced.is_some() || self.awaiting || self.frozen || self.rejoining {
            return Err(self.not_serving().unwrap_or_default());
        }
        if !self.held_back.is_empty() {
            // Delivered and acknowledged, but not given to the kernel: not in a site.
            return Err(format!("{} messages held back", self.held_back.len()));
        }
        let paths: Vec<String> = self.locks.keys().cloned().collect();
        for path in &paths {
            let e = self.locks.get_mut(path).expect("known");
            for w in e.waiters.drain(..) {
                let _ = w.reply.send(Err(Error::Stopped));
            }
            Self::fail_requesting(e, Error::Stopped);
            let holds: Vec<u64> = e.holders.iter().map(|h| h.0).collect();
            for hold in holds {
                self.release(path, hold);
            }
            self.pump(path);
        }
        for (path, e) in &self.locks {
            let k = e.site.site().lock(LOCK).expect("one lock per site");
            let idle = e.holders.is_empty()
                && e.waiters.is_empty()
                && e.requesting.is_none()
                && e.upgrading.is_none()
                && e.held == Mode::Phi
                && k.held() == Mode::Phi
                && (matches!(k.pending(), hilock_kernel::Pending::None) || k.cancelled());
            if !idle {
                return Err(format!(
                    "{path} is still held or requested in the kernel after its callers ended \
                     (held {}, pending {})",
                    k.held(),
                    k.pending_mode()
                ));
            }
        }
        let locks = std::mem::take(&mut self.locks)
            .into_iter()
            .map(|(path, e)| SavedLock {
                path,
                site: *e.site,
                dead_end: e.dead_end,
                told: e.told,
            })
            .collect();
        self.suspended = true;
        Ok((self.epoch, locks))
    }

    /// Answer a caller's request with `err` now; a kernel request already out is then
    /// cancelled in the kernel like that of a caller that gave up ([`Core::pump`]).
    fn fail_requesting(e: &mut LockEntry, err: Error) {
        if let Some(w) = e.requesting.as_mut() {
            let (gone, _) = oneshot::channel();
            let _ = std::mem::replace(&mut w.reply, gone).send(Err(err));
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        self.agree();
        while let Some(cmd) = rx.recv().await {
            self.handle(cmd);
            if self.suspended {
                return;
            }
        }
    }

    fn entry(&mut self, path: &str) -> Result<&mut LockEntry, KernelError> {
        if !self.locks.contains_key(path) {
            let me = NodeId(self.shared.id);
            let (site, how) = if self.rejoining {
                (LockSite::joining(me)?, How::Joining)
            } else if self.shared.state.is_some() {
                // Created again in the run's generation once it is known (`Core::agree`).
                (
                    static_site(me, path, self.shared.n, self.epoch)?,
                    How::Static,
                )
            } else {
                // Epoch 0: the static cluster's fresh site.
                let how = if self.epoch == 0 {
                    How::Static
                } else {
                    How::Recovered
                };
                (
                    new_site(me, path, self.shared.n, self.epoch, &self.members)?,
                    how,
                )
            };
            if let Some(t) = self.trace.as_mut() {
                t.site(path, how, &site);
            }
            self.locks.insert(
                path.to_string(),
                LockEntry {
                    site: Box::new(site),
                    held: Mode::Phi,
                    holders: Vec::new(),
                    waiters: VecDeque::new(),
                    requesting: None,
                    upgrading: None,
                    release_when_upgraded: false,
                    dead_end: None,
                    told: Vec::new(),
                    blocking: Vec::new(),
                    watchers: Vec::new(),
                },
            );
        }
        Ok(self.locks.get_mut(path).expect("inserted above"))
    }

    fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Acquire { reply, .. } if self.fenced.is_some() => {
                let reason = self.fenced.clone().unwrap_or_default();
                let _ = reply.send(Err(Error::Refused { reason }));
            }
            Cmd::Acquire {
                path,
                mode,
                prio,
                nested,
                try_lock,
                ticket,
                reply,
            } => match self.entry(&path) {
                Ok(_) if try_lock => self.try_acquire(
                    &path,
                    Waiter {
                        ticket,
                        mode,
                        prio,
                        nested,
                        reply,
                    },
                ),
                Ok(e) => {
                    e.waiters.push_back(Waiter {
                        ticket,
                        mode,
                        prio,
                        nested,
                        reply,
                    });
                    self.pump(&path);
                    // Not granted on the spot: still a local waiter, or its kernel request
                    // is out.
                    let e = self.locks.get(&path).expect("entry exists");
                    let waits = e.waiters.iter().any(|w| w.ticket == ticket)
                        || e.requesting.as_ref().is_some_and(|w| w.ticket == ticket);
                    if waits {
                        self.shared.counters.waits.fetch_add(1, Relaxed);
                    }
                }
                Err(error) => {
                    let _ = reply.send(Err(Error::Kernel { path, error }));
                }
            },
            Cmd::Release { path, hold } => self.release(&path, hold),
            Cmd::Cancel { path, ticket } => {
                if let Some(e) = self.locks.get_mut(&path) {
                    // A local waiter leaves at once; the kernel request, if it is this
                    // one, is cancelled by the pump (its reply is closed by now).
                    e.waiters.retain(|w| w.ticket != ticket);
                    self.pump(&path);
                }
            }
            Cmd::Upgrade { path, hold, reply } => self.upgrade(&path, hold, reply),
            Cmd::Value { path, reply } => {
                let value = self
                    .locks
                    .get(&path)
                    .and_then(|e| e.site.site().value(LOCK).ok().flatten());
                let _ = reply.send(Ok(value));
            }
            Cmd::SetValue {
                path,
                hold,
                value,
                reply,
            } => self.set_value(&path, hold, value, reply),
            Cmd::Blocking { path, hold, reply } => self.watch_blocking(&path, hold, reply),
            Cmd::Downgrade {
                path,
                hold,
                mode,
                reply,
            } => self.downgrade(&path, hold, mode, reply),
            Cmd::Convert {
                path,
                hold,
                mode,
                reply,
            } => {
                let r = self.convert(&path, hold, mode);
                let _ = reply.send(r);
                self.pump(&path);
            }
            Cmd::Deliver { from, epoch, frame } => {
                // Numbered as it arrives (in the link's order), before it may be held back.
                let seq = match self.trace.as_mut() {
                    Some(t) => t.arrived(from, &frame.path),
                    None => 0,
                };
                self.deliver(from, epoch, *frame, seq)
            }
            Cmd::Admitted => {
                self.admitted = true;
                self.shared.agents.admitted();
                let paths: Vec<String> = self.locks.keys().cloned().collect();
                for p in paths {
                    self.pump(&p);
                }
            }
            Cmd::Fenced { reason } => {
                warn!(%reason, "this run of the node is refused by the cluster; serving nothing");
                // The agents engine's lock server serves nothing either.
                self.shared.agents.fenced(reason.clone());
                for e in self.locks.values_mut() {
                    for w in e.waiters.drain(..) {
                        let _ = w.reply.send(Err(Error::Refused {
                            reason: reason.clone(),
                        }));
                    }
                    Self::fail_requesting(
                        e,
                        Error::Refused {
                            reason: reason.clone(),
                        },
                    );
                }
                self.fenced.get_or_insert(reason);
            }
            Cmd::PeerRestarted { peer } => {
                // Requests on their way to the restarted node will not come back: fail them.
                // A refused peer (a new run in static membership) never answers again: the
                // lock is a dead end, and the callers behind the request fail too
                // (`Core::pump`). A peer that only left the etcd view (its lease ended) may
                // come back as the same run and still hold the token: only the requests in
                // flight fail, later ones are sent again.
                let refused = matches!(
                    self.shared.peers.get(usize::from(peer)),
                    Some(Some(p)) if p.refused().is_some()
                );
                let mut dead = Vec::new();
                for (path, e) in self.locks.iter_mut() {
                    let k = e.site.site().lock(LOCK).expect("one lock per site");
                    // A request whose caller gave up (timed out while the peer was down)
                    // still runs in the kernel, and later callers would wait behind it.
                    let running = matches!(
                        k.pending(),
                        hilock_kernel::Pending::Request(_) | hilock_kernel::Pending::Try(_)
                    );
                    let waits_on_it = e.requesting.is_some() || (refused && running);
                    if waits_on_it && !k.has_token() && k.parent() == Some(NodeId(peer)) {
                        if refused {
                            e.dead_end.get_or_insert(peer);
                        } else {
                            Self::fail_requesting(
                                e,
                                Error::PeerRestarted {
                                    path: path.clone(),
                                    peer,
                                },
                            );
                        }
                        // Either way the request is cancelled in the kernel (`pump`).
                        dead.push(path.clone());
                    }
                }
                for path in dead {
                    self.pump(&path);
                }
            }
            Cmd::PeerGeneration { peer, generation } => {
                match self.offers.get_mut(usize::from(peer)) {
                    Some(o) if self.awaiting => {
                        o.get_or_insert(generation);
                        self.agree();
                    }
                    _ => {
                        tracing::debug!(
                            peer,
                            generation,
                            "a generation offered after the agreement; ignored"
                        )
                    }
                }
            }
            Cmd::DeadEnd { path, peer, serial } => {
                let Some(e) = self.locks.get_mut(&path) else {
                    return;
                };
                let k = e.site.site().lock(LOCK).expect("one lock per site");
                let ours = matches!(k.pending(), hilock_kernel::Pending::Request(q) | hilock_kernel::Pending::Try(q) if q.serial == serial);
                if ours && !k.has_token() {
                    e.dead_end.get_or_insert(peer);
                    self.pump(&path);
                }
            }
            Cmd::LostRequest {
                path,
                peer,
                requester,
                serial,
            } => {
                if requester.0 == self.shared.id {
                    self.handle(Cmd::DeadEnd { path, peer, serial });
                } else {
                    self.dead_end(requester, &path, peer, serial);
                }
            }
            Cmd::Parent { path, reply } => {
                let parent = self
                    .locks
                    .get(&path)
                    .and_then(|e| e.site.site().lock(LOCK).ok())
                    .filter(|k| !k.has_token())
                    .and_then(|k| k.parent())
                    .map(|p| p.0);
                let _ = reply.send(parent);
            }
            Cmd::Flush { reply } => {
                let _ = reply.send(());
            }
            Cmd::Suspend { reply } => {
                let r = self.suspend();
                let _ = reply.send(r);
            }
            Cmd::Epoch { reply } => {
                let _ = reply.send((self.epoch, self.members, self.rejoining));
            }
            Cmd::Observe { epoch, members } => {
                if self.rejoining && epoch > self.epoch {
                    self.epoch = epoch;
                    self.members = members;
                }
            }
            Cmd::Freeze { reply } => {
                self.frozen = true;
                let reports = self
                    .locks
                    .iter()
                    .filter_map(|(p, e)| e.site.report(LOCK).ok().map(|r| (p.clone(), r)))
                    .collect();
                let _ = reply.send((self.epoch, reports));
            }
            Cmd::Install {
                epoch,
                members,
                plans,
                reply,
            } => {
                let _ = reply.send(self.install(epoch, members, plans));
            }
            Cmd::Explain {
                path,
                ticket,
                reply,
            } => {
                let _ = reply.send(self.explain(&path, ticket));
            }
            Cmd::Status { reply } => {
                let mut v: Vec<LockStatus> = self
                    .locks
                    .iter()
                    .map(|(path, e)| {
                        let k = e.site.site().lock(LOCK).expect("one lock per site");
                        LockStatus {
                            path: path.clone(),
                            token: k.has_token(),
                            parent: k.parent().map(|p| p.0),
                            held: k.held().to_string(),
                            owned: k.owned().to_string(),
                            pending: k.pending_mode().to_string(),
                            frozen: k.frozen().to_string(),
                            queue: k
                                .queue()
                                .iter()
                                .map(|q| format!("{}:{}@{}", q.requester.0, q.mode, q.prio))
                                .collect(),
                            holders: e.holders.len(),
                            waiters: e.waiters.len() + usize::from(e.requesting.is_some()),
                        }
                    })
                    .collect();
                v.sort_by(|a, b| a.path.cmp(&b.path));
                let _ = reply.send((v, self.state()));
            }
            Cmd::Summary { reply } => {
                let _ = reply.send(self.state());
            }
        }
    }

    /// The core's state for `hilock status` and the metrics: the epoch, why it does not
    /// serve (if so), and the sums over its locks.
    fn state(&self) -> CoreState {
        let mut c = CoreState {
            epoch: self.epoch,
            not_serving: self.not_serving(),
            locks: self.locks.len(),
            ..CoreState::default()
        };
        for e in self.locks.values() {
            c.holders += e.holders.len();
            c.waiters += e.waiters.len() + usize::from(e.requesting.is_some());
            if let Ok(k) = e.site.site().lock(LOCK) {
                c.tokens += usize::from(k.has_token());
                c.queued += k.queue().len();
            }
        }
        c
    }

    /// Static membership with a state directory: once every node has offered a
    /// generation, the run's is their maximum (the same at every node). It is recorded in
    /// the state directory before anything else; then every lock known so far is created
    /// again in it (no protocol step was taken on it: frozen) and the core serves.
    fn agree(&mut self) {
        if !self.awaiting || self.offers.iter().any(Option::is_none) {
            return;
        }
        let Some((dir, _)) = self.shared.state.clone() else {
            return;
        };
        self.awaiting = false;
        let g = self.offers.iter().flatten().copied().max().unwrap_or(0);
        if let Err(e) = generation::write(&dir, g) {
            self.handle(Cmd::Fenced {
                reason: format!("cannot record the cluster's generation {g}: {e}"),
            });
            return;
        }
        let me = NodeId(self.shared.id);
        let n = self.shared.n;
        self.epoch = g;
        for (path, e) in self.locks.iter_mut() {
            match static_site(me, path, n, g) {
                Ok(site) => {
                    if let Some(t) = self.trace.as_mut() {
                        t.site(path, How::Static, &site);
                    }
                    *e.site = site;
                }
                Err(err) => {
                    warn!(%path, error = %err, "cannot create the lock in the run's generation")
                }
            }
        }
        tracing::info!(
            generation = g,
            first_fence = u64::from(g) << 32,
            "every node offered a generation: serving in the largest"
        );
        self.frozen = false;
        let paths: Vec<String> = self.locks.keys().cloned().collect();
        for p in &paths {
            self.pump(p);
        }
        for (from, e, frame, seq) in std::mem::take(&mut self.held_back) {
            self.deliver(from, e, frame, seq);
        }
    }

    /// The nodes whose generation this node still waits for.
    fn missing_offers(&self) -> Vec<usize> {
        (0..self.offers.len())
            .filter(|&i| self.offers[i].is_none())
            .collect()
    }

    /// Why the core grants nothing now, if it does not: refused, rejoining, frozen for an
    /// epoch change, or not let in by a majority yet.
    fn not_serving(&self) -> Option<String> {
        if let Some(r) = &self.fenced {
            Some(r.clone())
        } else if self.rejoining {
            Some(format!(
                "rejoining: a new run of this node waits for an epoch after epoch {} that lets \
                 it in (recovery)",
                self.epoch
            ))
        } else if self.awaiting {
            Some(format!(
                "waiting for the generation of nodes {:?} (state_dir)",
                self.missing_offers()
            ))
        } else if self.frozen {
            Some(format!(
                "frozen while epoch {} is installed (recovery)",
                self.epoch + 1
            ))
        } else if !self.admitted {
            Some("waiting for a majority of the cluster to let this run in".into())
        } else {
            None
        }
    }

    /// Where request `ticket` for `path` stands: its place among this node's callers, who
    /// holds the lock here or was granted it from here, or which peer the request went to
    /// and that peer's state.
    fn explain(&self, path: &str, ticket: u64) -> String {
        let Some(e) = self.locks.get(path) else {
            return "the lock is not known at this node".into();
        };
        let Ok(k) = e.site.site().lock(LOCK) else {
            return String::new();
        };
        let mut parts = Vec::new();
        if let Some(r) = &self.fenced {
            parts.push(format!("this node serves no lock ({r})"));
        } else if self.rejoining {
            parts.push(format!(
                "this node is a new run that rejoins the cluster: it waits for an epoch after \
                 epoch {} that lets it in (recovery)",
                self.epoch
            ));
        } else if self.awaiting {
            parts.push(format!(
                "this node waits for the generation of nodes {:?} before it serves (state_dir)",
                self.missing_offers()
            ));
        } else if !self.admitted {
            // Say why the others do not answer: a wrong secret shows only here.
            let peers: Vec<String> = self
                .shared
                .peers
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.as_ref().map(|l| (i, l)))
                .filter(|(_, l)| !l.connected.load(Relaxed))
                .map(|(i, l)| l.describe(i as u16))
                .collect();
            parts.push(if peers.is_empty() {
                "this node is waiting for a majority of the cluster to let it in".into()
            } else {
                format!(
                    "this node is waiting for a majority of the cluster to let it in ({})",
                    peers.join("; ")
                )
            });
        } else if self.frozen {
            parts.push(format!(
                "a member left and epoch {} is being installed (recovery): this node takes \
                 no protocol step until it is",
                self.epoch + 1
            ));
        }
        let out = e.requesting.as_ref();
        if out.is_some_and(|w| w.ticket == ticket) {
            parts.push(format!(
                "this node's request for {} is the one in the protocol",
                k.pending_mode()
            ));
        } else if let Some(i) = e.waiters.iter().position(|w| w.ticket == ticket) {
            let ahead = i + usize::from(out.is_some());
            parts.push(format!(
                "queue position {} at this node ({ahead} local request{} ahead)",
                ahead + 1,
                if ahead == 1 { "" } else { "s" }
            ));
        } else if e.upgrading.is_some() {
            parts.push("an upgrade to W waits for the other local holders".into());
        }
        if !e.holders.is_empty() {
            let mut modes: Vec<String> = e.holders.iter().map(|(_, m)| m.to_string()).collect();
            modes.dedup();
            parts.push(format!(
                "held at this node (node {}) in {} by {} local caller{} ({})",
                self.shared.id,
                e.held,
                e.holders.len(),
                if e.holders.len() == 1 { "" } else { "s" },
                modes.join(", ")
            ));
        }
        let granted: Vec<String> = k
            .children()
            .filter(|&(_, m)| m != Mode::Phi)
            .map(|(n, m)| format!("node {} in {m}", n.0))
            .collect();
        if !granted.is_empty() {
            parts.push(format!(
                "granted from here to {} (or nodes below them)",
                granted.join(", ")
            ));
        }
        let remote: Vec<String> = k
            .queue()
            .iter()
            .filter(|q| q.requester.0 != self.shared.id)
            .map(|q| format!("node {} for {}", q.requester.0, q.mode))
            .collect();
        if !remote.is_empty() {
            parts.push(format!("queued here before it: {}", remote.join(", ")));
        }
        if k.has_token() {
            parts.push("this node has the lock's token".into());
        } else if let Some(p) = k.parent() {
            let state = self
                .shared
                .peers
                .get(p.idx())
                .and_then(|l| l.as_ref())
                .map_or_else(|| format!("node {}", p.0), |l| l.describe(p.0));
            parts.push(format!(
                "the token is at node {} or beyond it; {state}",
                p.0
            ));
        }
        parts.join("; ")
    }

    /// One kernel step on `path`'s site, then act on its outputs.
    fn kstep(&mut self, path: &str, input: Input<'_, SMsg>) -> Result<(), KernelError> {
        let e = self.locks.get_mut(path).expect("entry exists");
        self.out.clear();
        let seen = self
            .trace
            .is_some()
            .then(|| super::trace::copy_input(&input));
        let r = e.site.step(input, &mut *self.out).map(|_| ());
        if let (Some(t), Some(input)) = (self.trace.as_mut(), seen) {
            t.step(path, &input, self.trace_seq, &self.out, r);
        }
        r?;
        self.act(path);
        Ok(())
    }

    /// Act on the outputs of a kernel step (or an install) on `path`'s site: every `Send`
    /// first, in order, then the grants. A grant may take another kernel step at once (a
    /// caller that gave up is released): its messages go out after this step's, so each
    /// link carries a step's messages together and in the order of the steps, as the
    /// harness's channels do (what trace validation relies on, `super::trace`).
    fn act(&mut self, path: &str) {
        let outs: Vec<Output<SMsg>> = self.out.drain(..).collect();
        let mut local = Vec::new();
        for o in outs {
            match o {
                Output::Send { to, msg } => self.send(to, path, msg),
                other => local.push(other),
            }
        }
        for o in local {
            match o {
                Output::Send { .. } => {}
                Output::Granted { mode, .. } => self.granted(path, mode),
                Output::Upgraded { .. } => self.upgraded(path),
                Output::WouldBlock { .. } => self.would_block(path),
                Output::Cancelled { .. } => self.cancelled(path),
                // Answered within the step that the caller's downgrade or conversion ran.
                Output::Downgraded { .. }
                | Output::Converted { .. }
                | Output::ConvertBusy { .. } => {}
                Output::Blocking { mode, prio, .. } => self.blocking(path, Blocked { mode, prio }),
            }
        }
    }

    /// A protocol message from a peer. Held back while frozen (recovery) and while its
    /// epoch is later than this node's; one of an earlier epoch is refused by the kernel
    /// (`StaleEpoch`), dropped and counted.
    fn deliver(&mut self, from: NodeId, epoch: Epoch, frame: Frame, seq: u64) {
        if self.frozen {
            self.held_back.push((from, epoch, frame, seq));
            return;
        }
        // From here on the message leaves the node's unread ones (`Shared::unread`),
        // unless it is held back again below.
        if self.shared.recovery {
            self.shared.unread.fetch_sub(1, Relaxed);
        }
        let path = frame.path.clone();
        if self.entry(&path).is_err() {
            return;
        }
        let msg = Stamped {
            epoch,
            msg: frame.msg,
        };
        // A try of another node for a lock whose request here went to a refused peer: the
        // lock is a dead end here (`Core::pump`), and the try would be answered "busy" —
        // which tells a script to try again, for ever. Its requester is told first, so
        // that its caller fails at once naming the refused node (the answer still follows).
        if let (Some(peer), hilock_kernel::Msg::TryRequest { entry, .. }) =
            (self.locks.get(&path).and_then(|e| e.dead_end), &msg.msg)
        {
            if entry.requester.0 != self.shared.id {
                self.dead_end(entry.requester, &path, peer, entry.serial);
            }
        }
        self.trace_seq = seq;
        match self.kstep(&path, Input::Deliver { from, msg: &msg }) {
            Ok(()) => {}
            Err(KernelError::FutureEpoch(_)) => {
                // Kept until this node has installed that epoch; the recovery task looks
                // at the installed epoch now.
                let frame = Frame { path, msg: msg.msg };
                if self.shared.recovery {
                    self.shared.unread.fetch_add(1, Relaxed);
                }
                self.held_back.push((from, epoch, frame, seq));
                self.shared.nudge.notify_one();
                return;
            }
            Err(KernelError::StaleEpoch(_)) => {
                self.shared.counters.stale_epoch.fetch_add(1, Relaxed);
                tracing::debug!(from = from.0, %path, epoch, mine = self.epoch, "message of an earlier epoch; dropped");
            }
            Err(e) => {
                self.shared.counters.kernel_rejections.fetch_add(1, Relaxed);
                warn!(from = from.0, %path, error = %e, msg = ?msg, "kernel refused a message; dropped");
            }
        }
        self.pump(&path);
    }

    /// Installs `epoch` (recovery): each planned lock by the kernel's `FaultSite::install`
    /// (the token node serves its rebuilt queue), every other known lock created afresh in
    /// the new epoch (no member knew it; frozen, this node took no step on it since), then
    /// what waited: kernel releases, upgrades and requests of local callers, and the
    /// messages held back.
    fn install(
        &mut self,
        epoch: Epoch,
        members: [bool; MAX_NODES],
        plans: Vec<(String, Plan<MAX_NODES>)>,
    ) -> Result<(), String> {
        if epoch <= self.epoch {
            return Err(format!(
                "epoch {epoch} is not later than the installed epoch {}",
                self.epoch
            ));
        }
        let me = NodeId(self.shared.id);
        // Every planned lock exists here, created in the old epoch where it is new.
        for (path, _) in &plans {
            self.entry(path)
                .map_err(|e| format!("{path}: cannot create its site: {e}"))?;
        }
        self.frozen = false;
        self.rejoining = false;
        let (old_epoch, old_members) = (self.epoch, self.members);
        self.epoch = epoch;
        self.members = members;
        let mut errors = Vec::new();
        let planned: std::collections::HashSet<String> =
            plans.iter().map(|(p, _)| p.clone()).collect();
        let rebuilt = plans.len();
        self.installing = Some(epoch);
        for (path, plan) in plans {
            let e = self.locks.get_mut(&path).expect("created above");
            self.out.clear();
            match e.site.install(epoch, &[plan], &mut *self.out) {
                Ok(_) => {
                    if let Some(t) = self.trace.as_mut() {
                        t.install(&path, epoch, &self.out);
                    }
                    self.act(&path)
                }
                Err(err) => errors.push(format!("{path}: {err}")),
            }
        }
        self.installing = None;
        let others: Vec<String> = self
            .locks
            .keys()
            .filter(|p| !planned.contains(*p))
            .cloned()
            .collect();
        for path in others {
            match new_site(me, &path, self.shared.n, epoch, &members) {
                Ok(site) => {
                    if let Some(t) = self.trace.as_mut() {
                        t.site(&path, How::Recovered, &site);
                    }
                    let e = self.locks.get_mut(&path).expect("known");
                    *e.site = site;
                }
                Err(err) => errors.push(format!("{path}: {err}")),
            }
        }
        self.shared.counters.epochs_installed.fetch_add(1, Relaxed);
        let ids = |m: &[bool; MAX_NODES]| -> Vec<usize> {
            m.iter()
                .enumerate()
                .filter(|(_, &b)| b)
                .map(|(i, _)| i)
                .collect()
        };
        let (was, now) = (ids(&old_members), ids(&self.members));
        let left: Vec<usize> = was.iter().copied().filter(|i| !now.contains(i)).collect();
        let added: Vec<usize> = now.iter().copied().filter(|i| !was.contains(i)).collect();
        tracing::info!(
            epoch,
            old_epoch,
            members = ?now,
            left = ?left,
            added = ?added,
            rebuilt_locks = rebuilt,
            "installed a new epoch"
        );
        let paths: Vec<String> = self.locks.keys().cloned().collect();
        for p in &paths {
            let e = self.locks.get_mut(p).expect("known");
            if e.holders.is_empty() && e.held != Mode::Phi && !e.release_when_upgraded {
                self.kernel_release(p);
            }
            self.try_upgrade(p);
            self.pump(p);
        }
        for (from, e, frame, seq) in std::mem::take(&mut self.held_back) {
            self.deliver(from, e, frame, seq);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    fn send(&mut self, to: NodeId, path: &str, msg: SMsg) {
        let Some(Some(p)) = self.shared.peers.get(to.idx()) else {
            warn!(to = to.0, %path, "kernel addressed a node outside the cluster; dropped");
            return;
        };
        let kind = kind_index(&msg.msg);
        // Nothing reaches a refused peer: its link drops what it is given, and reports every
        // lock request among it ([`Cmd::LostRequest`]), sent before the refusal or after.
        let bytes = Bytes::from(wire::encode(&wire::Payload::stamped(path.to_string(), msg)));
        if p.tx.send(bytes).is_ok() {
            p.sent.fetch_add(1, Relaxed);
            self.shared.counters.frames_sent.fetch_add(1, Relaxed);
            self.shared.counters.sent_by_kind[kind].fetch_add(1, Relaxed);
        }
    }

    /// Tell `requester` that its request `serial` for `path` went to the refused `peer`.
    fn dead_end(&self, requester: NodeId, path: &str, peer: u16, serial: u32) {
        let Some(Some(r)) = self.shared.peers.get(requester.idx()) else {
            return;
        };
        let payload = wire::Payload::DeadEnd {
            path: path.to_string(),
            peer,
            serial,
        };
        if r.refused().is_none() && r.tx.send(Bytes::from(wire::encode(&payload))).is_ok() {
            r.sent.fetch_add(1, Relaxed);
            self.shared.counters.frames_sent.fetch_add(1, Relaxed);
        }
    }

    /// Give `w` a local hold in `mode`; `false` if its caller has gone (abandoned).
    fn give(&mut self, path: &str, w: Waiter) -> bool {
        self.next_hold += 1;
        let hold = self.next_hold;
        let e = self.locks.get_mut(path).expect("entry exists");
        e.holders.push((hold, w.mode));
        // Every local holder shares the site's hold, and its fence.
        let fence = e.fence();
        if w.reply.send(Ok((hold, fence))).is_err() {
            e.holders.retain(|&(h, _)| h != hold);
            self.shared.counters.abandoned_grants.fetch_add(1, Relaxed);
            false
        } else {
            self.shared.counters.grants.fetch_add(1, Relaxed);
            true
        }
    }

    /// The kernel granted the site's request: hand it to its caller. (Local callers that
    /// may share it join in [`Core::pump`].)
    fn granted(&mut self, path: &str, mode: Mode) {
        let e = self.locks.get_mut(path).expect("entry exists");
        e.held = mode;
        match e.requesting.take() {
            Some(w) => {
                self.give(path, w);
            }
            None => warn!(%path, "kernel granted a lock nobody requested"),
        }
        let e = self.locks.get_mut(path).expect("entry exists");
        if e.holders.is_empty() {
            self.kernel_release(path);
        }
    }

    /// The kernel refused the site's try request (`Output::WouldBlock`): its caller gets
    /// [`Error::WouldBlock`]; nothing of it is left in the protocol.
    fn would_block(&mut self, path: &str) {
        let installing = self.installing;
        let e = self.locks.get_mut(path).expect("entry exists");
        match e.requesting.take() {
            Some(w) => {
                // An install refuses a try still out (`spec/SPEC.md` 1.12): the lock was
                // not found busy, the cluster recovered meanwhile.
                let _ = w.reply.send(Err(match installing {
                    Some(epoch) => Error::NotServing {
                        path: path.to_string(),
                        reason: format!(
                            "the cluster installed epoch {epoch} (recovery) while the try was \
                             out; nothing of it is held"
                        ),
                    },
                    None => Error::WouldBlock {
                        path: path.to_string(),
                        mode: w.mode,
                    },
                }));
            }
            None => warn!(%path, "kernel refused a try nobody asked for"),
        }
    }

    /// The kernel accepted the cancel of the site's request or upgrade
    /// (`Output::Cancelled`, `spec/SPEC.md` 1.13): its caller has gone; a request may still
    /// run in the protocol, and the kernel itself releases its grant when it comes — no
    /// grant of it reaches this node's callers; an upgrade is withdrawn and U kept (a
    /// kernel request and an issued upgrade are never out together: the one needs M_H = Φ,
    /// the other U).
    fn cancelled(&mut self, path: &str) {
        let e = self.locks.get_mut(path).expect("entry exists");
        if e.upgrading.as_ref().is_some_and(|u| u.issued) {
            // A withdrawn upgrade (its holder released): the site keeps U.
            e.upgrading = None;
        } else {
            e.requesting = None;
        }
        self.shared.counters.cancels.fetch_add(1, Relaxed);
    }

    /// The kernel request of a caller that has gone (timeout, dropped future, a failed
    /// peer) is cancelled (`Input::Cancel`, `spec/SPEC.md` 1.13), unless the node takes no
    /// kernel step now (frozen for an epoch change: after the install, whose pumps come
    /// here again).
    fn cancel_abandoned(&mut self, path: &str) {
        if self.frozen {
            return;
        }
        let e = self.locks.get_mut(path).expect("entry exists");
        if !e.requesting.as_ref().is_some_and(|w| w.reply.is_closed()) {
            return;
        }
        if let Err(error) = self.kstep(path, Input::Cancel { lock: LOCK }) {
            warn!(%path, %error, "kernel refused a cancel");
        }
    }

    /// Whether `w`'s request must wait for a cancelled request of the site that still runs
    /// in the protocol: the kernel takes it back for the same mode (no message) and refuses
    /// any other (`CancelRunning`); the next step on the lock after the cancelled request
    /// completed pumps again.
    fn waits_for_cancelled(e: &LockEntry, w: &Waiter) -> bool {
        let k = e.site.site().lock(LOCK).expect("one lock per site");
        k.cancelled()
            && !matches!(k.pending(), hilock_kernel::Pending::Request(q) if q.mode == w.mode)
    }

    /// Gives waiter `w` to `path`'s site as its request (`Acquire`, or `TryAcquire` for a
    /// try-lock). The site's base priority carries over between requests: it is set first
    /// only when it changes (most requests keep priority 0). A kernel refusal is answered
    /// to the waiter.
    fn submit(&mut self, path: &str, w: Waiter, try_lock: bool) {
        let e = self.locks.get_mut(path).expect("entry exists");
        let (mode, prio) = (w.mode, w.prio);
        let reprioritise = e.site.site().priorities().base != prio;
        e.requesting = Some(w);
        self.shared.counters.kernel_requests.fetch_add(1, Relaxed);
        let request = if try_lock {
            Input::TryAcquire { lock: LOCK, mode }
        } else {
            Input::Acquire { lock: LOCK, mode }
        };
        let r = if reprioritise {
            self.kstep(path, Input::SetPriority { base: prio })
        } else {
            Ok(())
        }
        .and_then(|()| self.kstep(path, request));
        if let Err(error) = r {
            let e = self.locks.get_mut(path).expect("entry exists");
            if let Some(w) = e.requesting.take() {
                let _ = w.reply.send(Err(Error::Kernel {
                    path: path.to_string(),
                    error,
                }));
            }
        }
    }

    /// A local try-lock (`spec/SPEC.md` 1.12): share the node's hold if a waiter at the
    /// front could (`LockEntry::joinable`, nobody waiting ahead unless nested); give it to
    /// the kernel as `TryAcquire` if the site is idle (nothing held, requested, upgrading
    /// or waiting here); otherwise it would wait at this node and is refused at once.
    fn try_acquire(&mut self, path: &str, w: Waiter) {
        let me = NodeId(self.shared.id);
        let (admitted, frozen) = (self.admitted, self.frozen);
        let not_serving = self.not_serving();
        let e = self.locks.get_mut(path).expect("entry exists");
        e.waiters.retain(|w| !w.reply.is_closed());
        if e.dead_end.is_some() {
            // Failed with every other caller (`Core::pump`).
            e.waiters.push_back(w);
            self.pump(path);
            return;
        }
        let free = e.requesting.is_none() && e.upgrading.is_none();
        if free && (e.waiters.is_empty() || w.nested) && e.joinable(me, &w) {
            self.give(path, w);
            return;
        }
        let cancelled_runs = e.site.site().lock(LOCK).is_ok_and(|k| k.cancelled());
        let idle = free
            && e.waiters.is_empty()
            && e.holders.is_empty()
            && e.held == Mode::Phi
            && !cancelled_runs
            && admitted
            && !frozen;
        if !idle {
            // Not serving: the lock may be free; say why rather than "busy".
            let _ = w.reply.send(Err(match not_serving {
                Some(reason) => Error::NotServing {
                    path: path.to_string(),
                    reason,
                },
                None => Error::WouldBlock {
                    path: path.to_string(),
                    mode: w.mode,
                },
            }));
            return;
        }
        self.submit(path, w, true);
        self.pump(path);
    }

    fn upgraded(&mut self, path: &str) {
        let e = self.locks.get_mut(path).expect("entry exists");
        e.held = Mode::W;
        let fence = e.fence();
        let mut untold = None;
        if let Some(u) = e.upgrading.take() {
            for h in e.holders.iter_mut().filter(|h| h.0 == u.hold) {
                h.1 = Mode::W;
            }
            if u.reply.is_none_or(|r| r.send(Ok(fence)).is_err()) {
                untold = Some(u.hold);
            }
        }
        if e.release_when_upgraded {
            e.release_when_upgraded = false;
            e.holders.clear();
            self.kernel_release(path);
        } else if let Some(hold) = untold {
            // Nobody waits for this upgrade any more (its guard's upgrade timed out, or the
            // future was dropped), and that guard still holds U: the hold goes back to U
            // at once (W → U, `spec/SPEC.md` 1.14), so that guard and node agree.
            let (reply, _) = oneshot::channel();
            self.downgrade(path, hold, Mode::U, reply);
        }
    }

    fn kernel_release(&mut self, path: &str) {
        if self.frozen {
            // After the install (`Core::install` releases what no local holder holds).
            return;
        }
        if let Err(error) = self.kstep(path, Input::Release { lock: LOCK }) {
            warn!(%path, %error, "kernel refused a release");
        }
        if let Some(e) = self.locks.get_mut(path) {
            e.held = Mode::Phi;
            // `spec/SPEC.md` 1.16: the next hold is told again.
            e.blocking.clear();
        }
    }

    /// The kernel told the site's hold of `path` that a request for `b.mode` waits
    /// (`Output::Blocking`, `spec/SPEC.md` 1.16): kept for the hold, and every local holder
    /// waiting for it whose mode conflicts with `b.mode` is answered.
    fn blocking(&mut self, path: &str, b: Blocked) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        e.blocking.push(b);
        let holders = &e.holders;
        let mine = |h: u64| holders.iter().find(|x| x.0 == h).map(|x| x.1);
        let mut kept = Vec::new();
        for (hold, reply) in e.watchers.drain(..) {
            match mine(hold) {
                Some(m) if conflicts(m, b.mode) => {
                    let _ = reply.send(b);
                }
                Some(_) if !reply.is_closed() => kept.push((hold, reply)),
                _ => {}
            }
        }
        e.watchers = kept;
    }

    /// [`Cmd::Blocking`]: answered at once with the first notification of the site's
    /// current hold that conflicts with hold `hold`'s mode, else when one comes. A hold
    /// that is not (or no longer) held here is not answered: `reply` is dropped.
    fn watch_blocking(&mut self, path: &str, hold: u64, reply: oneshot::Sender<Blocked>) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        let Some(&(_, mode)) = e.holders.iter().find(|h| h.0 == hold) else {
            return;
        };
        match e.blocking.iter().find(|b| conflicts(mode, b.mode)) {
            Some(&b) => {
                let _ = reply.send(b);
            }
            None => e.watchers.push((hold, reply)),
        }
    }

    fn release(&mut self, path: &str, hold: u64) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        let before = e.holders.len();
        e.holders.retain(|&(h, _)| h != hold);
        if e.holders.len() == before {
            return;
        }
        e.watchers.retain(|w| w.0 != hold);
        let mut withdraw = false;
        match &e.upgrading {
            Some(u) if u.hold == hold && u.issued && self.frozen => {
                // No kernel step until the next epoch is installed: Rule 7 keeps U until W
                // is granted; release then.
                e.holders.push((hold, Mode::U));
                e.release_when_upgraded = true;
                return;
            }
            // The upgrade is withdrawn in the kernel at once (`Input::Cancel`, `spec/SPEC.md`
            // 1.13: the site keeps U, `Core::cancelled`), and U is released below.
            Some(u) if u.hold == hold && u.issued => withdraw = true,
            // The upgrade had not reached the kernel yet: it is dropped with its holder.
            Some(u) if u.hold == hold => e.upgrading = None,
            _ => {}
        }
        if withdraw {
            if let Err(error) = self.kstep(path, Input::Cancel { lock: LOCK }) {
                warn!(%path, %error, "kernel refused to cancel an upgrade");
            }
        }
        let e = self.locks.get_mut(path).expect("entry exists");
        if e.holders.is_empty() {
            self.kernel_release(path);
        } else {
            self.try_upgrade(path);
        }
        self.pump(path);
    }

    /// Hold `hold` converts to the weaker `mode` (`spec/SPEC.md` 1.14). The site's kernel
    /// hold covers every local holder: it is downgraded (`Input::Downgrade`) to the
    /// strongest mode the local holders keep, if that is weaker — the kernel then serves
    /// its queue and tells the parent (Rule 5.2) in the same step — and local waiters that
    /// may now share the hold join it. No kernel step while recovery has frozen the node or
    /// an upgrade is under way: the kernel keeps the stronger mode, which still covers
    /// every local holder, until the hold ends.
    fn downgrade(&mut self, path: &str, hold: u64, mode: Mode, reply: Reply<()>) {
        let Some(e) = self.locks.get_mut(path) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        let Some(i) = e.holders.iter().position(|h| h.0 == hold) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        let from = e.holders[i].1;
        let upgrading = e.upgrading.as_ref().is_some_and(|u| u.hold == hold);
        if !from.downgrades_to(mode) || upgrading {
            let _ = reply.send(Err(Error::NotDowngradable {
                path: path.to_string(),
                mode: from,
                to: mode,
            }));
            return;
        }
        e.holders[i].1 = mode;
        let keep = e
            .holders
            .iter()
            .try_fold(Mode::Phi, |a, &(_, m)| strongest(a, m))
            .unwrap_or(e.held);
        if keep != e.held && e.held.downgrades_to(keep) && e.upgrading.is_none() && !self.frozen {
            match self.kstep(
                path,
                Input::Downgrade {
                    lock: LOCK,
                    mode: keep,
                },
            ) {
                Ok(()) => self.locks.get_mut(path).expect("entry exists").held = keep,
                Err(error) => warn!(%path, %error, "kernel refused a downgrade"),
            }
        }
        let _ = reply.send(Ok(()));
        self.pump(path);
    }

    /// Hold `hold` converts to `mode` — not weaker: [`super::Guard::try_convert`] downgrades
    /// those — in place or not at all (`spec/SPEC.md` 1.17). The site's kernel hold covers
    /// every local holder, so the conversion is refused ([`Error::WouldBlock`], nothing
    /// changes) while recovery has frozen the node or an upgrade is under way, when
    /// another local holder's mode conflicts with `mode` or a local caller waiting for a
    /// conflicting mode would be passed; where the kernel hold already covers the new
    /// modes it is done here unless a remote request waits for a conflicting mode (frozen,
    /// or in this site's queue) — else the kernel converts its hold to the strongest mode
    /// of the local holders (`Input::Convert`), and a `ConvertBusy` is a refusal.
    /// Answered with the fence of the hold.
    fn convert(&mut self, path: &str, hold: u64, mode: Mode) -> Result<u64, Error> {
        let busy = || Error::WouldBlock {
            path: path.to_string(),
            mode,
        };
        let Some(e) = self.locks.get_mut(path) else {
            return Err(Error::Stopped);
        };
        let Some(i) = e.holders.iter().position(|h| h.0 == hold) else {
            return Err(Error::Stopped);
        };
        if e.holders[i].1 == mode {
            return Ok(e.fence());
        }
        if self.frozen || e.upgrading.is_some() || e.waiters.iter().any(|w| conflicts(w.mode, mode))
        {
            return Err(busy());
        }
        let Ok(keep) = e
            .holders
            .iter()
            .enumerate()
            .try_fold(Mode::Phi, |a, (j, &(_, m))| {
                strongest(a, if j == i { mode } else { m })
            })
        else {
            return Err(busy());
        };
        if keep == e.held {
            let k = e.site.site().lock(LOCK).expect("one lock per site");
            if k.frozen().contains(mode) || k.queue().iter().any(|q| conflicts(q.mode, mode)) {
                return Err(busy());
            }
        } else {
            if let Err(error) = self.kstep(
                path,
                Input::Convert {
                    lock: LOCK,
                    mode: keep,
                    wait: false,
                },
            ) {
                return Err(Error::Kernel {
                    path: path.to_string(),
                    error,
                });
            }
            let e = self.locks.get_mut(path).expect("entry exists");
            let k = e.site.site().lock(LOCK).expect("one lock per site");
            if k.held() != keep {
                return Err(busy());
            }
            e.held = keep;
        }
        let e = self.locks.get_mut(path).expect("entry exists");
        e.holders[i].1 = mode;
        Ok(e.fence())
    }

    /// Hold `hold`, which must hold W, writes the lock value block (`spec/SPEC.md` 1.15).
    /// A W hold is the node's only local holder and the kernel holds W for it, so the
    /// kernel accepts the write; any other hold is [`Error::NotWriter`] and changes nothing.
    fn set_value(&mut self, path: &str, hold: u64, value: [u8; VALUE_LEN], reply: Reply<()>) {
        let Some(e) = self.locks.get(path) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        let Some(&(_, mode)) = e.holders.iter().find(|h| h.0 == hold) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        if mode != Mode::W {
            let _ = reply.send(Err(Error::NotWriter {
                path: path.to_string(),
                mode,
            }));
            return;
        }
        let r = self.kstep(path, Input::SetValue { lock: LOCK, value });
        let _ = reply.send(r.map_err(|error| Error::Kernel {
            path: path.to_string(),
            error,
        }));
    }

    fn upgrade(&mut self, path: &str, hold: u64, reply: Reply<u64>) {
        let Some(e) = self.locks.get_mut(path) else {
            let _ = reply.send(Err(Error::Stopped));
            return;
        };
        let mine = e.holders.iter().find(|h| h.0 == hold).map(|h| h.1);
        if let Some(u) = e.upgrading.as_mut().filter(|u| {
            u.hold == hold
                && mine == Some(Mode::U)
                && u.reply.as_ref().is_none_or(|r| r.is_closed())
        }) {
            // This guard's earlier upgrade timed out and still waits in the protocol: this
            // call waits for it.
            u.reply = Some(reply);
            self.try_upgrade(path);
            return;
        }
        if mine != Some(Mode::U) || e.held != Mode::U || e.upgrading.is_some() {
            let _ = reply.send(Err(Error::NotUpgradable {
                path: path.to_string(),
                mode: mine.unwrap_or(e.held),
            }));
            return;
        }
        e.upgrading = Some(Upgrading {
            hold,
            reply: Some(reply),
            issued: false,
        });
        self.try_upgrade(path);
    }

    /// Give a waiting upgrade to the kernel once its holder is the only local holder
    /// (W is compatible with no other mode, local or remote).
    fn try_upgrade(&mut self, path: &str) {
        let Some(e) = self.locks.get_mut(path) else {
            return;
        };
        let Some(u) = &mut e.upgrading else {
            return;
        };
        if u.issued || e.holders.len() != 1 || e.holders[0].0 != u.hold || self.frozen {
            return;
        }
        u.issued = true;
        self.shared.counters.kernel_requests.fetch_add(1, Relaxed);
        if let Err(error) = self.kstep(path, Input::Upgrade { lock: LOCK }) {
            let e = self.locks.get_mut(path).expect("entry exists");
            if let Some(r) = e.upgrading.take().and_then(|u| u.reply) {
                let _ = r.send(Err(Error::Kernel {
                    path: path.to_string(),
                    error,
                }));
            }
        }
    }

    /// Serve local waiters: a waiter that may share the node's current hold joins it
    /// (`LockEntry::joinable`) — the first waiter in FIFO order, or a nested waiter
    /// anywhere in the queue; when the site holds nothing and has no request out, the first
    /// waiter's request goes to the kernel.
    fn pump(&mut self, path: &str) {
        let me = NodeId(self.shared.id);
        if self.locks.contains_key(path) {
            self.cancel_abandoned(path);
        }
        loop {
            let Some(e) = self.locks.get_mut(path) else {
                return;
            };
            e.waiters.retain(|w| !w.reply.is_closed());
            if let Some(peer) = e.dead_end {
                // The site's request went to a refused peer: it and every caller waiting
                // behind it fail now (none could share a hold: the request never completes).
                let err = || Error::PeerRestarted {
                    path: path.to_string(),
                    peer,
                };
                Self::fail_requesting(e, err());
                for w in e.waiters.drain(..) {
                    let _ = w.reply.send(Err(err()));
                }
                // Requests of other nodes queued behind the lost one wait for a token that
                // never comes here: tell their requesters.
                let k = e.site.site().lock(LOCK).expect("one lock per site");
                let untold: Vec<(NodeId, u32)> = k
                    .queue()
                    .iter()
                    .filter(|q| q.requester != me && !e.told.contains(&(q.requester, q.serial)))
                    .map(|q| (q.requester, q.serial))
                    .collect();
                e.told.extend(untold.iter().copied());
                for (requester, serial) in untold {
                    self.dead_end(requester, path, peer, serial);
                }
                return;
            }
            if e.requesting.is_some() || e.upgrading.is_some() {
                return;
            }
            let pick = match e.waiters.front() {
                None => return,
                Some(w) if e.joinable(me, w) => Some(0),
                Some(_) => e.waiters.iter().position(|w| w.nested && e.joinable(me, w)),
            };
            if let Some(i) = pick {
                let w = e.waiters.remove(i).expect("index from position");
                self.give(path, w);
                continue;
            }
            if !e.holders.is_empty() || e.held != Mode::Phi || !self.admitted || self.frozen {
                return;
            }
            if Self::waits_for_cancelled(e, e.waiters.front().expect("front exists")) {
                return;
            }
            let w = e.waiters.pop_front().expect("front exists");
            self.submit(path, w, false);
        }
    }
}
