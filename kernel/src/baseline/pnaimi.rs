//! Mueller's prioritized token protocol (thesis section 3.1.1, Fig. 3.1): Naimi-Trehel with
//! probable owners per priority level and priority-ordered local queues. It is the baseline
//! for the prioritized hierarchical protocol, behind the same [`Protocol`] interface; every
//! requested mode is held exclusively.
//!
//! Reading of section 3.1.1 implemented here:
//! - each node keeps a probable owner per priority level (`owner[p]`, `None` = itself);
//! - a request at priority p travels along `owner[p]` until it reaches the token holder or
//!   a node with a pending request of priority ≥ p, where it is queued (priority first,
//!   then FIFO); every node it passes, and the requester itself, redirect `owner[q]` for
//!   all q ≤ p to the requester ("edges with less or equal priority than the current
//!   request are replaced by the new request");
//! - a release passes the token to the head of the holder's queue, with the rest of the
//!   queue; the receiver merges it with its own queue in priority order.
//!
//! Simplification (documented in `spec/SPEC.md` 1.10): the cited protocol \[30\] logs every
//! request at every node it passes and prunes the logs as the token moves; here a request
//! is stored only where it stops, which is what the thesis's example (Fig. 3.1) shows.

use crate::error::KernelError;
use crate::mode::Mode;
use crate::msg::{Input, LockId, MsgKind, NodeId, Output, Outputs, Sink};
use crate::protocol::Protocol;
use crate::report::Report;
use crate::token::prio::Priority;
use crate::token::wrap::newer_generation;

/// A request of the prioritized protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PrioRequest {
    /// The requesting node.
    pub requester: NodeId,
    /// Its priority.
    pub prio: Priority,
}

/// A message of the prioritized Naimi protocol (`Q` bounds the queue carried by the token).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PrioNaimiMsg<const Q: usize> {
    /// A request travelling along probable owners.
    Request {
        /// The lock.
        lock: LockId,
        /// The request.
        req: PrioRequest,
    },
    /// The token with the sender's queue.
    Token {
        /// The lock.
        lock: LockId,
        /// Token generation (detects duplicates; a `u64` compared modulo 2^64,
        /// [`newer_generation`]).
        generation: u64,
        /// The remaining queue, highest priority first.
        queue: heapless::Vec<PrioRequest, Q>,
    },
}

impl<const Q: usize> PrioNaimiMsg<Q> {
    /// The lock of the message.
    pub fn lock(&self) -> LockId {
        match self {
            PrioNaimiMsg::Request { lock, .. } | PrioNaimiMsg::Token { lock, .. } => *lock,
        }
    }
}

/// One lock at one site; `P` priority levels (0..P).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PrioNaimiLock<const P: usize, const Q: usize> {
    /// Probable owner per priority level (`None`: this node).
    pub owner: [Option<NodeId>; P],
    /// `Some(generation)` while the token is here.
    pub token: Option<u64>,
    /// Highest token generation seen.
    pub generation_seen: u64,
    /// Pending request's mode (Φ if none) and priority.
    pub pending: (Mode, Priority),
    /// Held mode (Φ if none).
    pub held: Mode,
    /// Requests queued here, highest priority first, FIFO within a priority.
    pub queue: heapless::Vec<PrioRequest, Q>,
}

/// A site of the prioritized Naimi protocol: `N` nodes, `L` locks, `P` priority levels,
/// queue capacity `Q` (a step emits at most 2 outputs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PrioNaimiSite<const N: usize, const L: usize, const P: usize, const Q: usize> {
    me: NodeId,
    base: Priority,
    locks: [PrioNaimiLock<P, Q>; L],
}

fn insert<const Q: usize>(
    q: &mut heapless::Vec<PrioRequest, Q>,
    r: PrioRequest,
    lock: LockId,
) -> Result<(), KernelError> {
    if q.iter().any(|x| x.requester == r.requester) {
        return Err(KernelError::Duplicate(lock));
    }
    let at = q.iter().position(|x| x.prio < r.prio).unwrap_or(q.len());
    q.insert(at, r).map_err(|_| KernelError::QueueFull(lock))
}

impl<const N: usize, const L: usize, const P: usize, const Q: usize> PrioNaimiSite<N, L, P, Q> {
    const CAPACITIES_OK: () = {
        assert!(N >= 1 && N <= u16::MAX as usize, "N must be in 1..=65535");
        assert!(L >= 1 && L <= u16::MAX as usize, "L must be in 1..=65535");
        assert!(P >= 1 && P <= 256, "P must be in 1..=256");
        assert!(Q >= 1, "Q must be at least 1");
    };

    /// A site whose locks start with the token at `root` and every probable owner at `root`.
    pub fn new(me: NodeId, root: NodeId) -> Result<Self, KernelError> {
        Self::with_owners(me, |_| if me == root { None } else { Some(root) })
    }

    /// A site whose lock `l` starts with probable owner `owner(l)` at every priority level
    /// (`None`: this site holds the token).
    pub fn with_owners(
        me: NodeId,
        owner: impl Fn(LockId) -> Option<NodeId>,
    ) -> Result<Self, KernelError> {
        let () = Self::CAPACITIES_OK;
        if me.idx() >= N {
            return Err(KernelError::UnknownNode(me));
        }
        for l in 0..L {
            if let Some(o) = owner(LockId(l as u16)) {
                if o.idx() >= N || o == me {
                    return Err(KernelError::UnknownNode(o));
                }
            }
        }
        Ok(PrioNaimiSite {
            me,
            base: 0,
            locks: core::array::from_fn(|l| {
                let o = owner(LockId(l as u16));
                PrioNaimiLock {
                    owner: [o; P],
                    token: if o.is_none() { Some(0) } else { None },
                    generation_seen: 0,
                    pending: (Mode::Phi, 0),
                    held: Mode::Phi,
                    queue: heapless::Vec::new(),
                }
            }),
        })
    }

    /// The state of one lock.
    pub fn lock(&self, lock: LockId) -> Result<&PrioNaimiLock<P, Q>, KernelError> {
        self.locks
            .get(lock.idx())
            .ok_or(KernelError::UnknownLock(lock))
    }

    /// Apply one input (see [`Protocol::step`]).
    pub fn step<S: Sink<Output<PrioNaimiMsg<Q>>>>(
        &mut self,
        input: Input<'_, PrioNaimiMsg<Q>>,
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
            Input::SetPriority { base } => {
                if base as usize >= P {
                    return Err(KernelError::InvalidMode);
                }
                self.base = base;
                return Ok(Report::default());
            }
            Input::Deliver { from, msg } => {
                if from.idx() >= N || from == me {
                    return Err(KernelError::UnknownNode(from));
                }
                msg.lock()
            }
        };
        let Some(s) = self.locks.get_mut(lock.idx()) else {
            return Err(KernelError::UnknownLock(lock));
        };
        // The baseline keeps a copy of the lock for the error path (hilock's `Site` does
        // not: it validates first); outputs go to a 2-slot buffer and reach `out` only on
        // success.
        let saved = s.clone();
        let mut local: Outputs<PrioNaimiMsg<Q>, 2> = Outputs::new();
        let r = Self::apply(s, me, self.base, lock, input, &mut local);
        if let Err(e) = r {
            *s = saved;
            return Err(e);
        }
        for o in local {
            out.put(o).map_err(|_| KernelError::OutputsFull)?;
        }
        Ok(Report::default())
    }

    fn apply(
        s: &mut PrioNaimiLock<P, Q>,
        me: NodeId,
        base: Priority,
        lock: LockId,
        input: Input<'_, PrioNaimiMsg<Q>>,
        out: &mut Outputs<PrioNaimiMsg<Q>, 2>,
    ) -> Result<(), KernelError> {
        let push = |out: &mut Outputs<PrioNaimiMsg<Q>, 2>, o| {
            out.push(o).map_err(|_| KernelError::OutputsFull)
        };
        match input {
            Input::TryAcquire { mode, .. } => {
                super::check_request(lock, mode, s.held, s.pending.0)?;
                // The baseline's try: granted if this site holds the (idle) token, refused
                // otherwise without a message.
                if s.token.is_some() {
                    s.held = mode;
                    push(out, Output::Granted { lock, mode })
                } else {
                    push(out, Output::WouldBlock { lock, mode })
                }
            }
            Input::Acquire { mode, .. } => {
                super::check_request(lock, mode, s.held, s.pending.0)?;
                if s.token.is_some() {
                    // An idle token holder never keeps a queue (it passes the token on at
                    // once), so the token is free.
                    s.held = mode;
                    return push(out, Output::Granted { lock, mode });
                }
                s.pending = (mode, base);
                let req = PrioRequest {
                    requester: me,
                    prio: base,
                };
                let to = s.owner[base as usize].ok_or(KernelError::NoParent(lock))?;
                for q in 0..=base as usize {
                    s.owner[q] = None;
                }
                push(
                    out,
                    Output::Send {
                        to,
                        msg: PrioNaimiMsg::Request { lock, req },
                    },
                )
            }
            Input::Release { .. } => {
                if s.held == Mode::Phi {
                    return Err(KernelError::NotHeld(lock));
                }
                s.held = Mode::Phi;
                Self::pass_token(s, lock, out)
            }
            Input::Upgrade { .. } => {
                if s.pending.0 != Mode::Phi {
                    return Err(KernelError::AlreadyPending(lock));
                }
                if s.held != Mode::U {
                    return Err(KernelError::NotHoldingU(lock));
                }
                s.held = Mode::W;
                push(out, Output::Upgraded { lock })
            }
            Input::SetPriority { .. }
            | Input::Cancel { .. }
            | Input::Downgrade { .. }
            | Input::Convert { .. }
            | Input::SetValue { .. } => Ok(()),
            Input::Deliver {
                msg: PrioNaimiMsg::Request { req, .. },
                ..
            } => {
                let req = *req;
                if req.requester.idx() >= N || req.requester == me {
                    return Err(KernelError::UnknownNode(req.requester));
                }
                if req.prio as usize >= P {
                    return Err(KernelError::InvalidMode);
                }
                let busy = s.held != Mode::Phi || s.pending.0 != Mode::Phi;
                if s.token.is_some() || (s.pending.0 != Mode::Phi && s.pending.1 >= req.prio) {
                    insert(&mut s.queue, req, lock)?;
                    if s.token.is_some() && !busy {
                        Self::pass_token(s, lock, out)?;
                    }
                } else {
                    let to = s.owner[req.prio as usize].ok_or(KernelError::NoParent(lock))?;
                    push(
                        out,
                        Output::Send {
                            to,
                            msg: PrioNaimiMsg::Request { lock, req },
                        },
                    )?;
                }
                // Edges of priority ≤ ξ(R) now lead to R, which will hold the token before
                // any later request of those priorities.
                for q in 0..=req.prio as usize {
                    s.owner[q] = Some(req.requester);
                }
                Ok(())
            }
            Input::Deliver {
                msg:
                    PrioNaimiMsg::Token {
                        generation, queue, ..
                    },
                ..
            } => {
                if !newer_generation(*generation, s.generation_seen) || s.token.is_some() {
                    return Err(KernelError::Duplicate(lock));
                }
                // The token's queue first (its entries are older), then ours; then a stable
                // sort by priority keeps FIFO within a level.
                let mut merged: heapless::Vec<PrioRequest, Q> = heapless::Vec::new();
                for r in queue.iter().chain(s.queue.iter()) {
                    if r.requester != me && !merged.iter().any(|x| x.requester == r.requester) {
                        merged
                            .push(*r)
                            .map_err(|_| KernelError::QueueOverflow(lock))?;
                    }
                }
                for i in 1..merged.len() {
                    let mut j = i;
                    while j > 0 && merged[j - 1].prio < merged[j].prio {
                        merged.swap(j - 1, j);
                        j -= 1;
                    }
                }
                s.generation_seen = *generation;
                s.token = Some(*generation);
                s.queue = merged;
                s.owner = [None; P];
                if s.pending.0 != Mode::Phi {
                    let mode = s.pending.0;
                    s.pending = (Mode::Phi, 0);
                    s.held = mode;
                    push(out, Output::Granted { lock, mode })
                } else {
                    Self::pass_token(s, lock, out)
                }
            }
        }
    }

    /// The idle token holder passes the token to the head of its queue, with the rest.
    fn pass_token(
        s: &mut PrioNaimiLock<P, Q>,
        lock: LockId,
        out: &mut Outputs<PrioNaimiMsg<Q>, 2>,
    ) -> Result<(), KernelError> {
        if s.held != Mode::Phi || s.token.is_none() || s.queue.is_empty() {
            return Ok(());
        }
        let head = s.queue.remove(0);
        let generation = s.token.unwrap_or(s.generation_seen).wrapping_add(1);
        s.token = None;
        s.generation_seen = generation;
        s.owner = [Some(head.requester); P];
        let queue = core::mem::take(&mut s.queue);
        out.push(Output::Send {
            to: head.requester,
            msg: PrioNaimiMsg::Token {
                lock,
                generation,
                queue,
            },
        })
        .map_err(|_| KernelError::OutputsFull)
    }
}

impl<const N: usize, const L: usize, const P: usize, const Q: usize> Protocol
    for PrioNaimiSite<N, L, P, Q>
{
    type Msg = PrioNaimiMsg<Q>;
    const MAX_OUTPUTS: usize = 2;
    fn id(&self) -> NodeId {
        self.me
    }
    fn step<S: Sink<Output<PrioNaimiMsg<Q>>>>(
        &mut self,
        input: Input<'_, PrioNaimiMsg<Q>>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        PrioNaimiSite::step(self, input, out)
    }
    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.lock(lock)?.held)
    }
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.token.is_some())
    }
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.pending.0 != Mode::Phi)
    }
    fn kind(msg: &PrioNaimiMsg<Q>) -> MsgKind {
        match msg {
            PrioNaimiMsg::Request { .. } => MsgKind::Request,
            PrioNaimiMsg::Token { .. } => MsgKind::Token,
        }
    }
    fn lock_of(msg: &PrioNaimiMsg<Q>) -> LockId {
        msg.lock()
    }
}
