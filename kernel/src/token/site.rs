//! A site: one node of the system with `L` locks of the hierarchical protocol.

use crate::error::KernelError;
use crate::mode::Mode;
use crate::msg::{Input, LockId, Msg, MsgKind, NodeId, Output, Sink};
use crate::protocol::Protocol;
use crate::report::{Report, Rule, RuleSet};
use crate::token::node::{Ctx, LockNode, Pending, Variant};
use crate::token::prio::{Frozen, Inheritance, Priority};
use crate::token::value::ValueBlock;

/// One site of the hierarchical protocol.
///
/// - `N`: number of nodes in the system (node ids `0..N`, at most 65535);
/// - `L`: number of locks;
/// - `Q`: capacity of a local queue and of the queue carried by the token; `Q ≥ N` is
///   required at compile time, so no queue can overflow (a node has at most one
///   outstanding request per lock, and a queue keeps one entry per requester).
///
/// Capacities outside these ranges do not build. A queue shorter than the number of nodes:
///
/// ```compile_fail
/// # use hilock_kernel::{NodeId, Site};
/// let _ = Site::<4, 1, 3>::new(NodeId(0), NodeId(0));
/// ```
///
/// No node, or no lock:
///
/// ```compile_fail
/// # use hilock_kernel::{NodeId, Site};
/// let _ = Site::<0, 1, 4>::new(NodeId(0), NodeId(0));
/// ```
///
/// ```compile_fail
/// # use hilock_kernel::{NodeId, Site};
/// let _ = Site::<4, 0, 4>::new(NodeId(0), NodeId(0));
/// ```
///
/// The same with capacities in range builds:
///
/// ```
/// # use hilock_kernel::{NodeId, Site};
/// assert!(Site::<4, 1, 4>::new(NodeId(0), NodeId(0)).is_ok());
/// ```
///
/// A step appends at most [`Site::MAX_OUTPUTS`] = `N + Q + L + 6` outputs to the caller's
/// [`Sink`]: one message per queued request (grant or forward), one freeze per child, one
/// reissued request per lock (PIP), and a bounded number of others (forward/release to the
/// parent, release to an old parent, a token, a resync release, a grant signal). A
/// blocking notification (`spec/SPEC.md` 1.16) fits in these: at the token node it is
/// told for a request that stays queued — one output for that request instead of its
/// grant or forward — and at a copy holder a freeze tells at most three (the modes that
/// conflict with a held IW) in a step that serves no request of its own. A sink
/// with less room is refused before anything changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Site<const N: usize, const L: usize, const Q: usize> {
    me: NodeId,
    variant: Variant,
    prio: Priorities<L>,
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_array"))]
    locks: [LockNode<N, Q>; L],
}

/// The default capacities: 8 nodes, 4 locks.
pub type DefaultSite = Site<8, 4, 8>;

/// A site's priorities (chapter 3): base β, effective ξ, and per lock the inherited
/// priority ξ(lock) (PIP) and the ceiling C_i (PCEP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Priorities<const L: usize> {
    /// Base priority β(self).
    pub base: Priority,
    /// Effective priority ξ(self); new requests carry it.
    pub effective: Priority,
    /// ξ(lock): the highest priority inherited through each lock while it is held (PIP).
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_array"))]
    pub inherited: [Priority; L],
    /// C_i: the priority ceiling of each lock (PCEP).
    #[cfg_attr(feature = "serde", serde(with = "crate::serde_array"))]
    pub ceiling: [Priority; L],
}

impl<const N: usize, const L: usize, const Q: usize> Site<N, L, Q> {
    const CAPACITIES_OK: () = {
        assert!(N >= 1 && N <= u16::MAX as usize, "N must be in 1..=65535");
        assert!(L >= 1 && L <= u16::MAX as usize, "L must be in 1..=65535");
        assert!(
            Q >= N,
            "Q must be at least N (a queue keeps one entry per requester)"
        );
    };

    /// The most outputs one step can append: `N + Q + L + 6` (see [`Site`]).
    pub const MAX_OUTPUTS: usize = N + Q + L + 6;

    /// A site whose locks all start with the token at `root` and every other node's parent
    /// pointer at `root` (a star, the usual initial tree).
    pub fn new(me: NodeId, root: NodeId) -> Result<Self, KernelError> {
        Self::with_parents(me, |_| if me == root { None } else { Some(root) })
    }

    /// A site whose lock `l` starts with parent `parent(l)` (`None`: this site holds the
    /// token of `l`). Parent ids are validated.
    pub fn with_parents(
        me: NodeId,
        parent: impl Fn(LockId) -> Option<NodeId>,
    ) -> Result<Self, KernelError> {
        let () = Self::CAPACITIES_OK;
        if me.idx() >= N {
            return Err(KernelError::UnknownNode(me));
        }
        for l in 0..L {
            if let Some(p) = parent(LockId(l as u16)) {
                if p.idx() >= N || p == me {
                    return Err(KernelError::UnknownNode(p));
                }
            }
        }
        Ok(Site {
            me,
            variant: Variant::HILOCK,
            prio: Priorities {
                base: 0,
                effective: 0,
                inherited: [0; L],
                ceiling: [0; L],
            },
            locks: core::array::from_fn(|l| LockNode::new(parent(LockId(l as u16)))),
        })
    }

    /// This site's id.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The same site running protocol variant `variant` (default: [`Variant::HILOCK`]).
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The protocol variant this site runs.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The same site with priority ceilings `ceiling[l]` for PCEP (section 3.7.1).
    pub fn with_ceilings(mut self, ceiling: [Priority; L]) -> Self {
        self.prio.ceiling = ceiling;
        self
    }

    /// The site's priorities.
    pub fn priorities(&self) -> &Priorities<L> {
        &self.prio
    }

    /// ξ(self) from β and what the held locks contribute: ceilings under PCEP (Fig. 3.7),
    /// inherited priorities under PIP (Fig. 3.8, `RequestUnlock`).
    fn effective_from_held(&self) -> Priority {
        let mut e = self.prio.base;
        let per_lock = self.prio.ceiling.iter().zip(&self.prio.inherited);
        for (node, (&ceiling, &inherited)) in self.locks.iter().zip(per_lock) {
            if node.held() == Mode::Phi {
                continue;
            }
            match self.variant.inheritance {
                Inheritance::None => {}
                Inheritance::Pcep => e = e.max(ceiling),
                Inheritance::Pip => e = e.max(inherited),
            }
        }
        e
    }

    /// The state of one lock.
    pub fn lock(&self, lock: LockId) -> Result<&LockNode<N, Q>, KernelError> {
        self.locks
            .get(lock.idx())
            .ok_or(KernelError::UnknownLock(lock))
    }

    /// The lock value block this site's hold of `lock` reads (`spec/SPEC.md` 1.15):
    /// `Some` while the site holds `lock` (the block of its grant or of the token, as the
    /// last W holder before it wrote it; see [`ValueBlock::get`] for a block that is not
    /// valid), `None` while it holds nothing.
    pub fn value(&self, lock: LockId) -> Result<Option<ValueBlock>, KernelError> {
        Ok(self.lock(lock)?.value())
    }

    /// All locks.
    pub fn locks(&self) -> &[LockNode<N, Q>; L] {
        &self.locks
    }

    /// All locks, for the recovery transitions ([`crate::token::recovery`]), which rebuild a lock's
    /// state outside the rules of [`Site::step`].
    pub(crate) fn locks_mut(&mut self) -> &mut [LockNode<N, Q>; L] {
        &mut self.locks
    }

    /// The single entry point: apply `input`, append outputs to `out`, and report the rules
    /// that fired. If the input does not fit the state, return the error and leave state
    /// and `out` unchanged: the step validates first (ids, output room, then each handler
    /// its own preconditions before its first change) and then applies — there is no
    /// rollback copy.
    pub fn step<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        input: Input<'_, Msg<Q>>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        if out.room() < Self::MAX_OUTPUTS {
            return Err(KernelError::OutputsFull);
        }
        let lock = match input {
            Input::Acquire { lock, .. }
            | Input::TryAcquire { lock, .. }
            | Input::Cancel { lock }
            | Input::Downgrade { lock, .. }
            | Input::Convert { lock, .. }
            | Input::SetValue { lock, .. }
            | Input::Release { lock }
            | Input::Upgrade { lock } => Some(lock),
            Input::SetPriority { .. } => None,
            Input::Deliver { from, msg } => {
                if from.idx() >= N || from == self.me {
                    return Err(KernelError::UnknownNode(from));
                }
                Some(msg.lock())
            }
        };
        if let Some(lock) = lock {
            if lock.idx() >= L {
                return Err(KernelError::UnknownLock(lock));
            }
        }
        let mut cx = Ctx {
            me: self.me,
            variant: self.variant,
            effective: self.prio.effective,
            boost: 0,
            lock: lock.unwrap_or(LockId(0)),
            out,
            rules: RuleSet::EMPTY,
            granted: false,
            sender: match input {
                Input::Deliver { from, .. } => Some(from),
                _ => None,
            },
            waiting: Frozen::EMPTY,
        };
        self.apply(lock, input, &mut cx)?;
        Ok(Report { rules: cx.rules })
    }

    fn apply<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        lock: Option<LockId>,
        input: Input<'_, Msg<Q>>,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        let Some(lock) = lock else {
            let Input::SetPriority { base } = input else {
                return Ok(());
            };
            self.prio.base = base;
            cx.fire(Rule::SetPriority);
            let target = self.effective_from_held();
            return self.set_effective(cx, target);
        };
        let node = self
            .locks
            .get_mut(lock.idx())
            .ok_or(KernelError::UnknownLock(lock))?;
        match input {
            Input::Acquire { mode, .. } => node.acquire(cx, mode),
            Input::TryAcquire { mode, .. } => node.try_acquire(cx, mode),
            Input::Cancel { .. } => node.cancel(cx),
            Input::Downgrade { mode, .. } => node.downgrade(cx, mode),
            Input::Convert { mode, wait, .. } => node.convert(cx, mode, wait),
            Input::SetValue { value, .. } => node.set_value(cx, value),
            Input::Release { .. } => node.release(cx),
            Input::Upgrade { .. } => node.upgrade(cx),
            Input::SetPriority { .. } => Ok(()),
            Input::Deliver { from, msg } => match msg {
                Msg::Request { entry, hop, .. } => node.on_request(cx, from, *entry, *hop),
                Msg::Grant {
                    entry,
                    epoch,
                    recorded,
                    frozen,
                    fence,
                    value,
                    ..
                } => node.on_grant(cx, from, *entry, *epoch, *recorded, *frozen, *fence, *value),
                Msg::Token {
                    entry,
                    generation,
                    sender_owned,
                    epoch,
                    frozen,
                    queue,
                    fence,
                    value,
                    ..
                } => node.on_token(
                    cx,
                    from,
                    *entry,
                    *generation,
                    *sender_owned,
                    *epoch,
                    *frozen,
                    queue,
                    *fence,
                    *value,
                ),
                Msg::Release { owned, epoch, .. } => node.on_release(cx, from, *owned, *epoch),
                Msg::Freeze { modes, waiting, .. } => node.on_freeze(cx, from, *modes, *waiting),
                Msg::TryRequest { entry, hop, .. } => node.on_try_request(cx, from, *entry, *hop),
                Msg::Busy { entry, .. } => node.on_busy(cx, *entry),
            },
        }?;
        if self.variant.inheritance == Inheritance::None {
            return Ok(());
        }
        // PIP: ξ(lock) and ξ(self) inherit the boost; PCEP: acquiring raises ξ(self) to the
        // ceiling; a release lowers both (Fig. 3.7, 3.8).
        let (Some(node), Some(inherited)) = (
            self.locks.get(lock.idx()),
            self.prio.inherited.get_mut(lock.idx()),
        ) else {
            return Err(KernelError::UnknownLock(lock));
        };
        if node.held() == Mode::Phi {
            *inherited = 0;
        } else if cx.boost > 0 {
            *inherited = (*inherited).max(cx.boost);
        }
        let mut target = self.effective_from_held();
        if self.variant.inheritance == Inheritance::Pip {
            target = target.max(cx.boost);
        }
        if self.variant.inheritance == Inheritance::Pcep && cx.granted && target > cx.effective {
            // The grant raised ξ(self) to the lock's ceiling (`effective_from_held` counts
            // the ceilings of the held locks).
            cx.fire(Rule::PcepCeiling);
        }
        self.set_effective(cx, target)
    }

    /// Sets ξ(self); under PIP a rise reissues every pending request of a lower priority
    /// (Fig. 3.8, "re-issue all the pending requests for all the L_i ∈ L").
    fn set_effective<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        target: Priority,
    ) -> Result<(), KernelError> {
        let rose = target > self.prio.effective;
        self.prio.effective = target;
        cx.effective = target;
        if rose && self.variant.inheritance == Inheritance::Pip {
            for (l, node) in self.locks.iter_mut().enumerate() {
                if matches!(node.pending(), Pending::Request(_)) {
                    cx.lock = LockId(l as u16);
                    node.reissue(cx, target)?;
                }
            }
        }
        Ok(())
    }
}

impl<const N: usize, const L: usize, const Q: usize> Protocol for Site<N, L, Q> {
    type Msg = Msg<Q>;
    const MAX_OUTPUTS: usize = N + Q + L + 6;
    const FENCED: bool = true;

    fn id(&self) -> NodeId {
        self.me
    }
    fn step<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        input: Input<'_, Msg<Q>>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        Site::step(self, input, out)
    }
    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.lock(lock)?.held())
    }
    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.has_token())
    }
    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        Ok(self.lock(lock)?.pending_mode() != Mode::Phi)
    }
    fn pending_mode(&self, lock: LockId) -> Result<Mode, KernelError> {
        Ok(self.lock(lock)?.pending_mode())
    }
    fn fence(&self, lock: LockId) -> Result<Option<u64>, KernelError> {
        Ok(self.lock(lock)?.fence())
    }
    fn value(&self, lock: LockId) -> Result<Option<ValueBlock>, KernelError> {
        Site::value(self, lock)
    }
    fn kind(msg: &Msg<Q>) -> MsgKind {
        msg.kind()
    }
    fn lock_of(msg: &Msg<Q>) -> LockId {
        msg.lock()
    }
}
