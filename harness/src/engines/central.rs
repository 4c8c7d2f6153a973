//! A central lock server replicated on three members, as a stand-in for etcd's lock in the
//! simulator's bakery comparison (`hilock_benches::bakery`). It models the *messages and
//! message delays* of a Raft-replicated lock service, nothing else:
//!
//! - a client sends `Lock` (or `Unlock`) to the leader (node `C`); the leader appends it
//!   to its log and sends it to both followers (nodes `C + 1`, `C + 2`), each of which
//!   acknowledges; an entry is committed when one follower has it (a majority with the
//!   leader; acknowledgements are cumulative, so commits follow the log order);
//! - a committed `Lock` queues the client; the head of the queue gets `Grant`; a committed
//!   `Unlock` answers `UnlockAck` and grants the next client (etcd: the waiter's watch on
//!   its predecessor's key fires).
//!
//! So an acquire and its release cost exactly 12 messages whatever the contention
//! (1 + 2 + 2 + 1 each), and an uncontended acquire 4 message delays. **Not modelled**:
//! leases and their keep-alives, fsync and disk time, the leader's processing time,
//! elections and failures, the watch set-up (etcd's `Lock` reads the predecessor's
//! revision and opens a watch), batching of log entries, and etcd 3.4's v3lock catch-up
//! delay (its 100 ms `syncWatchersLoop`). A client does one request at a time: an
//! `Acquire` that comes before its `UnlockAck` waits for it.

use super::adapter::{all_or_nothing, exclusive_held};
use crate::Invariants;
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink,
};
use std::collections::VecDeque;

/// A message of the central lock service.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CentralMsg {
    /// Client → leader: take the lock.
    Lock,
    /// Client → leader: give it back.
    Unlock,
    /// Leader → follower: log entry `index`.
    Append {
        /// Log index (1-based).
        index: u64,
    },
    /// Follower → leader: has every entry up to `index`.
    Ack {
        /// Log index.
        index: u64,
    },
    /// Leader → client: the lock is yours.
    Grant,
    /// Leader → client: the unlock is committed.
    UnlockAck,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Lock(NodeId),
    Unlock(NodeId),
}

#[derive(Clone, Debug)]
enum Role {
    Client {
        held: bool,
        acquiring: bool,
        unlocking: bool,
        queued: bool,
    },
    Leader {
        log: Vec<Entry>,
        /// Highest index each follower acknowledged.
        acked: [u64; 2],
        applied: u64,
        queue: VecDeque<NodeId>,
    },
    Follower,
}

/// A client, the leader or a follower of the central lock service.
#[derive(Clone, Debug)]
pub struct CentralSite {
    id: NodeId,
    leader: NodeId,
    role: Role,
}

impl CentralSite {
    /// Node `i` of `clients` clients and 3 members (leader first).
    pub fn new(i: usize, clients: usize) -> Result<Self, String> {
        if clients == 0 || i >= clients + 3 {
            return Err(format!(
                "central: node {i} of {clients} clients + 3 members"
            ));
        }
        let role = match i.checked_sub(clients) {
            None => Role::Client {
                held: false,
                acquiring: false,
                unlocking: false,
                queued: false,
            },
            Some(0) => Role::Leader {
                log: Vec::new(),
                acked: [0; 2],
                applied: 0,
                queue: VecDeque::new(),
            },
            Some(_) => Role::Follower,
        };
        Ok(CentralSite {
            id: NodeId(i as u16),
            leader: NodeId(clients as u16),
            role,
        })
    }

    /// A client (not the leader or a follower): the nodes that take and give back the lock.
    pub fn is_client(&self) -> bool {
        matches!(self.role, Role::Client { .. })
    }
}

impl Protocol for CentralSite {
    type Msg = CentralMsg;
    const MAX_OUTPUTS: usize = 128;

    const TOKENS: bool = false;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<CentralMsg>>>(
        &mut self,
        input: Input<'_, CentralMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        let (id, leader) = (self.id, self.leader);
        all_or_nothing(self, out, Self::MAX_OUTPUTS, |site, sends| {
            let send = |to: NodeId, msg: CentralMsg, v: &mut Vec<Output<CentralMsg>>| {
                v.push(Output::Send { to, msg })
            };
            let followers = [NodeId(leader.0 + 1), NodeId(leader.0 + 2)];
            match (&mut site.role, input) {
                (
                    Role::Client {
                        held,
                        acquiring,
                        unlocking,
                        queued,
                    },
                    input,
                ) => match input {
                    Input::Acquire { lock, .. } => {
                        if lock != LockId(0) {
                            return Err(KernelError::UnknownLock(lock));
                        }
                        if *held {
                            return Err(KernelError::AlreadyHeld(lock));
                        }
                        if *acquiring || *queued {
                            return Err(KernelError::AlreadyPending(lock));
                        }
                        if *unlocking {
                            *queued = true;
                        } else {
                            *acquiring = true;
                            send(leader, CentralMsg::Lock, sends);
                        }
                    }
                    Input::Release { lock } => {
                        if lock != LockId(0) {
                            return Err(KernelError::UnknownLock(lock));
                        }
                        if !*held {
                            return Err(KernelError::NotHeld(lock));
                        }
                        *held = false;
                        *unlocking = true;
                        send(leader, CentralMsg::Unlock, sends);
                    }
                    Input::Deliver { from, msg } if from == leader => match msg {
                        CentralMsg::Grant if *acquiring => {
                            *acquiring = false;
                            *held = true;
                            sends.push(Output::Granted {
                                lock: LockId(0),
                                mode: Mode::W,
                            });
                        }
                        CentralMsg::UnlockAck if *unlocking => {
                            *unlocking = false;
                            if *queued {
                                *queued = false;
                                *acquiring = true;
                                send(leader, CentralMsg::Lock, sends);
                            }
                        }
                        _ => return Err(KernelError::UnknownNode(from)),
                    },
                    _ => return Err(KernelError::InvalidMode),
                },
                (
                    Role::Leader {
                        log,
                        acked,
                        applied,
                        queue,
                    },
                    Input::Deliver { from, msg },
                ) => match msg {
                    CentralMsg::Lock | CentralMsg::Unlock if from.0 < leader.0 => {
                        log.push(match msg {
                            CentralMsg::Lock => Entry::Lock(from),
                            _ => Entry::Unlock(from),
                        });
                        let index = log.len() as u64;
                        for f in followers {
                            send(f, CentralMsg::Append { index }, sends);
                        }
                    }
                    CentralMsg::Ack { index } => {
                        let Some(f) = followers.iter().position(|f| *f == from) else {
                            return Err(KernelError::UnknownNode(from));
                        };
                        if *index > log.len() as u64 {
                            return Err(KernelError::UnknownNode(from));
                        }
                        acked[f] = acked[f].max(*index);
                        let commit = acked[0].max(acked[1]);
                        while *applied < commit {
                            *applied += 1;
                            match log[*applied as usize - 1] {
                                Entry::Lock(c) => {
                                    queue.push_back(c);
                                    if queue.len() == 1 {
                                        send(c, CentralMsg::Grant, sends);
                                    }
                                }
                                Entry::Unlock(c) => {
                                    if queue.front() == Some(&c) {
                                        queue.pop_front();
                                    }
                                    send(c, CentralMsg::UnlockAck, sends);
                                    if let Some(&next) = queue.front() {
                                        send(next, CentralMsg::Grant, sends);
                                    }
                                }
                            }
                        }
                    }
                    _ => return Err(KernelError::UnknownNode(from)),
                },
                (Role::Follower, Input::Deliver { from, msg }) => match msg {
                    CentralMsg::Append { index } if from == leader => {
                        send(leader, CentralMsg::Ack { index: *index }, sends);
                    }
                    _ => return Err(KernelError::UnknownNode(from)),
                },
                _ => return Err(KernelError::UnknownNode(id)),
            }
            Ok(())
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        exclusive_held(
            lock == LockId(0),
            matches!(self.role, Role::Client { held: true, .. }),
            KernelError::UnknownLock(lock),
        )
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock)?;
        Ok(matches!(
            self.role,
            Role::Client {
                acquiring: true,
                ..
            } | Role::Client { queued: true, .. }
        ))
    }

    fn kind(msg: &CentralMsg) -> MsgKind {
        match msg {
            CentralMsg::Lock | CentralMsg::Unlock => MsgKind::Request,
            CentralMsg::Grant | CentralMsg::UnlockAck => MsgKind::Grant,
            CentralMsg::Append { .. } | CentralMsg::Ack { .. } => MsgKind::Release,
        }
    }

    fn lock_of(_msg: &CentralMsg) -> LockId {
        LockId(0)
    }
}

impl Invariants for CentralSite {}
