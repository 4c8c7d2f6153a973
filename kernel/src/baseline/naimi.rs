//! The plain Naimi-Trehel token protocol (thesis section 2.1, Fig. 2.1): probable-owner
//! pointers with path reversal, a `next` pointer forming the distributed FIFO queue, one
//! exclusive mode. It is the baseline the thesis compares against, behind the same
//! [`Protocol`] interface: every requested mode is held exclusively ("Naimi doing the same
//! work"), so `U → W` upgrades complete at once.

use crate::error::KernelError;
use crate::mode::Mode;
use crate::msg::{Input, LockId, MsgKind, NodeId, Output, Sink};
use crate::protocol::Protocol;
use crate::report::Report;
use crate::token::wrap::newer_generation;

/// A Naimi-Trehel message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum NaimiMsg {
    /// A request of `requester`, forwarded along probable owners.
    Request {
        /// The lock.
        lock: LockId,
        /// The requesting node.
        requester: NodeId,
    },
    /// The token.
    Token {
        /// The lock.
        lock: LockId,
        /// Generation of the token (incremented by every transfer); detects duplicates. A
        /// `u64` compared modulo 2^64 ([`newer_generation`]), as the token engine's.
        generation: u64,
    },
}

impl NaimiMsg {
    /// The lock of the message.
    pub fn lock(&self) -> LockId {
        match self {
            NaimiMsg::Request { lock, .. } | NaimiMsg::Token { lock, .. } => *lock,
        }
    }
}

/// One lock at one Naimi-Trehel site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NaimiLock {
    /// Probable owner ("father"); `None` at the root of the tree (the last requester).
    pub owner: Option<NodeId>,
    /// Next node to receive the token after this one.
    pub next: Option<NodeId>,
    /// `Some(generation)` while the token is here.
    pub token: Option<u64>,
    /// Highest token generation seen.
    pub generation_seen: u64,
    /// Mode requested and not yet granted (Φ if none).
    pub pending: Mode,
    /// Mode held (Φ if none); always exclusive.
    pub held: Mode,
}

impl NaimiLock {
    fn new(owner: Option<NodeId>) -> Self {
        NaimiLock {
            owner,
            next: None,
            token: if owner.is_none() { Some(0) } else { None },
            generation_seen: 0,
            pending: Mode::Phi,
            held: Mode::Phi,
        }
    }
    fn busy(&self) -> bool {
        self.pending != Mode::Phi || self.held != Mode::Phi
    }
    /// Sends the token (next generation) to `to`.
    fn send_token<S: Sink<Output<NaimiMsg>>>(
        &mut self,
        lock: LockId,
        to: NodeId,
        out: &mut S,
    ) -> Result<(), KernelError> {
        let generation = self.token.unwrap_or(self.generation_seen).wrapping_add(1);
        self.token = None;
        self.generation_seen = generation;
        push(
            out,
            Output::Send {
                to,
                msg: NaimiMsg::Token { lock, generation },
            },
        )
    }
}

/// A Naimi-Trehel site with `N` nodes and `L` locks (a step emits at most 2 outputs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NaimiSite<const N: usize, const L: usize> {
    me: NodeId,
    locks: [NaimiLock; L],
}

impl<const N: usize, const L: usize> NaimiSite<N, L> {
    const CAPACITIES_OK: () = {
        assert!(N >= 1 && N <= u16::MAX as usize, "N must be in 1..=65535");
        assert!(L >= 1 && L <= u16::MAX as usize, "L must be in 1..=65535");
    };

    /// A site whose locks start with the token at `root` and every probable owner at `root`.
    pub fn new(me: NodeId, root: NodeId) -> Result<Self, KernelError> {
        let () = Self::CAPACITIES_OK;
        if me.idx() >= N {
            return Err(KernelError::UnknownNode(me));
        }
        if root.idx() >= N {
            return Err(KernelError::UnknownNode(root));
        }
        let owner = if me == root { None } else { Some(root) };
        Ok(NaimiSite {
            me,
            locks: [NaimiLock::new(owner); L],
        })
    }

    /// The state of one lock.
    pub fn lock(&self, lock: LockId) -> Result<&NaimiLock, KernelError> {
        self.locks
            .get(lock.idx())
            .ok_or(KernelError::UnknownLock(lock))
    }

    /// Apply one input (see [`Protocol::step`]).
    pub fn step<S: Sink<Output<NaimiMsg>>>(
        &mut self,
        input: Input<'_, NaimiMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        if out.room() < 2 {
            return Err(KernelError::OutputsFull);
        }
        let me = self.me;
        let lock = match input {
            Input::Acquire { lock, .. }
            | Input::TryAcquire { lock, .. }
            | Input::Release { lock }
            | Input::Upgrade { lock } => lock,
            // The baselines have no cancel (`spec/SPEC.md` 1.13): refused, nothing changes.
            Input::Cancel { lock } => return Err(KernelError::CancelUnsupported(lock)),
            // Nor a downgrade (`spec/SPEC.md` 1.14): refused, nothing changes.
            Input::Downgrade { lock, .. } => return Err(KernelError::DowngradeUnsupported(lock)),
            // Nor a conversion (`spec/SPEC.md` 1.17).
            Input::Convert { lock, .. } => return Err(KernelError::ConvertUnsupported(lock)),
            // Nor a value block (`spec/SPEC.md` 1.15).
            Input::SetValue { lock, .. } => return Err(KernelError::ValueUnsupported(lock)),
            // Plain Naimi-Trehel has no priorities.
            Input::SetPriority { .. } => return Ok(Report::default()),
            Input::Deliver { from, msg } => {
                if from.idx() >= N || from == me {
                    return Err(KernelError::UnknownNode(from));
                }
                msg.lock()
            }
        };
        let s = self
            .locks
            .get_mut(lock.idx())
            .ok_or(KernelError::UnknownLock(lock))?;
        // Every branch validates before it changes anything and emits at most 2 outputs
        // (room checked above), so no error can occur after a change.
        match input {
            Input::Acquire { mode, .. } => {
                super::check_request(lock, mode, s.held, s.pending)?;
                match s.owner {
                    None => {
                        // The root holds the token (it is not busy, so no one queued behind it
                        // can be waiting without it).
                        s.held = mode;
                        push(out, Output::Granted { lock, mode })?;
                    }
                    Some(o) => {
                        s.pending = mode;
                        s.owner = None;
                        push(
                            out,
                            Output::Send {
                                to: o,
                                msg: NaimiMsg::Request {
                                    lock,
                                    requester: me,
                                },
                            },
                        )?;
                    }
                }
            }
            Input::TryAcquire { mode, .. } => {
                super::check_request(lock, mode, s.held, s.pending)?;
                // The baseline's try: granted if this site holds the idle token, refused
                // otherwise without a message (it never asks anyone).
                if s.owner.is_none() {
                    s.held = mode;
                    push(out, Output::Granted { lock, mode })?;
                } else {
                    push(out, Output::WouldBlock { lock, mode })?;
                }
            }
            Input::Release { .. } => {
                if s.held == Mode::Phi {
                    return Err(KernelError::NotHeld(lock));
                }
                s.held = Mode::Phi;
                if let Some(n) = s.next.take() {
                    s.send_token(lock, n, out)?;
                }
            }
            Input::SetPriority { .. }
            | Input::Cancel { .. }
            | Input::Downgrade { .. }
            | Input::Convert { .. }
            | Input::SetValue { .. } => {}
            Input::Upgrade { .. } => {
                if s.pending != Mode::Phi {
                    return Err(KernelError::AlreadyPending(lock));
                }
                if s.held != Mode::U {
                    return Err(KernelError::NotHoldingU(lock));
                }
                s.held = Mode::W;
                push(out, Output::Upgraded { lock })?;
            }
            Input::Deliver {
                msg: NaimiMsg::Request { requester, .. },
                ..
            } => {
                let requester = *requester;
                if requester.idx() >= N {
                    return Err(KernelError::UnknownNode(requester));
                }
                if requester == me {
                    return Err(KernelError::Duplicate(lock));
                }
                match s.owner {
                    None => {
                        if s.busy() || s.token.is_none() {
                            if s.next.is_some() {
                                return Err(KernelError::Duplicate(lock));
                            }
                            s.next = Some(requester);
                        } else {
                            s.send_token(lock, requester, out)?;
                        }
                    }
                    Some(o) => {
                        push(
                            out,
                            Output::Send {
                                to: o,
                                msg: NaimiMsg::Request { lock, requester },
                            },
                        )?;
                    }
                }
                s.owner = Some(requester);
            }
            Input::Deliver {
                msg: NaimiMsg::Token { generation, .. },
                ..
            } => {
                if !newer_generation(*generation, s.generation_seen) || s.token.is_some() {
                    return Err(KernelError::Duplicate(lock));
                }
                s.generation_seen = *generation;
                s.token = Some(*generation);
                if s.pending != Mode::Phi {
                    let mode = s.pending;
                    s.pending = Mode::Phi;
                    s.held = mode;
                    push(out, Output::Granted { lock, mode })?;
                }
            }
        }
        Ok(Report::default())
    }
}

fn push<S: Sink<Output<NaimiMsg>>>(out: &mut S, o: Output<NaimiMsg>) -> Result<(), KernelError> {
    out.put(o).map_err(|_| KernelError::OutputsFull)
}

impl<const N: usize, const L: usize> Protocol for NaimiSite<N, L> {
    type Msg = NaimiMsg;
    const MAX_OUTPUTS: usize = 2;
    fn id(&self) -> NodeId {
        self.me
    }
    fn step<S: Sink<Output<NaimiMsg>>>(
        &mut self,
        input: Input<'_, NaimiMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        NaimiSite::step(self, input, out)
    }
    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.lock(lock)?.held)
    }
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.token.is_some())
    }
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.pending != Mode::Phi)
    }
    fn kind(msg: &NaimiMsg) -> MsgKind {
        match msg {
            NaimiMsg::Request { .. } => MsgKind::Request,
            NaimiMsg::Token { .. } => MsgKind::Token,
        }
    }
    fn lock_of(msg: &NaimiMsg) -> LockId {
        msg.lock()
    }
}
