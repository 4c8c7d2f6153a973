//! hilock's extension of the release rule (`spec/SPEC.md` 1.7, "Keeping intention
//! modes"): a non-token node may **keep** its owned intention mode (IR or IW)
//! when its held mode drops to Φ, instead of telling its parent by a `Release` (Rule 5.2),
//! and re-enter under Rule 2 (a local grant, no message) the next time. The kept mode is
//! given back — the eager Rule 5.2 release is sent then — when
//!
//! - a `Freeze` reaches the node (Rule 6, Fig. 2.9): the token node queued a request that
//!   conflicts with what it owns, and invariant 2.3 carries the frozen modes down to every
//!   child that could grant them, i.e. to every child whose record is IR/IW or stronger;
//! - the node's own request needs a mode that the kept mode does not cover (Rule 2 sends a
//!   request; the kept mode is released just before it);
//! - the node becomes the token node (a stale token, `LockNode::on_token`), or a new
//!   epoch is installed (recovery rebuilds the tree from held modes only);
//! - the node passes on (Rule 4.1 F) another node's request for a mode that conflicts with
//!   the kept mode (`LockNode::pass_on`).
//!
//! **FIFO (P6).** A node that passes a conflicting request on knows that the request will
//! wait at the token node (Rule 4.2, Table 2.4 freezes the kept mode) or be granted there;
//! re-entering by Rule 2 from the kept mode before the `Freeze` arrives would grant a
//! conflicting mode past it — a bypass the eager release cannot make, since its next
//! request travels behind the passed one on the same FIFO link. So the kept mode goes back
//! before the request is passed on (its `Release` is ahead of it on the link), and a node
//! that passes such a request while it owns a mode or waits for one does not keep the
//! conflicting intention modes when they are released (`passed`), until its owned mode
//! drops to Φ (the eager `Release(Φ)` then follows the passed request on the link, and any
//! later mode comes by a request behind it). What a node cannot see — a conflicting
//! request that reaches the token node by another path while the `Freeze` is on its way —
//! stays a window of one bypass (`verify/tests/keep_intention.rs`,
//! `kept_mode_reentry_races_the_freeze`).
//!
//! No new message is needed for the recall: whenever the token node queues a request that
//! conflicts with an intention mode it could have granted (the only modes a node keeps),
//! Table 2.4 freezes that mode ([`recall_set`] ⊆ `frozen_by`, checked for every cell by
//! the test `table_2_4_freezes_every_conflicting_intention_mode`), and Rule 6 sends it to
//! every child whose record could grant it — a keeper's record is its owned mode, at least
//! the kept mode — and on down the tree (invariant 2.3).
//!
//! The owned mode (Definition 3) becomes `M_O = max(M_H, kept, children's owned)`: the
//! invariant P3 (record = owned on quiet FIFO links) is unchanged, and its second half,
//! `M_O = max(M_H, children)`, is restated as `M_O ≥ max(M_H, children)` with the excess
//! only an intention mode kept while the node is not the token node, has no request
//! pending and has nothing frozen ([`LockNode::kept_invariant`]).

use crate::error::KernelError;
use crate::mode::{conflicts, Mode, ModeSet};
use crate::msg::{Msg, Output, QueueEntry, Sink};
use crate::token::node::{Ctx, LockNode, Pending};
use crate::token::tables::grantable_set;

pub use crate::token::node::ReleaseRule;

/// The modes a keeper must be told about: the intention modes that the token node owning
/// `owned` could have granted (Table 2.2's row, [`grantable_set`]) and that conflict with a
/// queued request for `requested` (Table 2.1). Table 2.4 already freezes all of them.
pub fn recall_set(owned: Mode, requested: Mode) -> ModeSet {
    let mut out = ModeSet::EMPTY;
    for m in grantable_set(owned)
        .intersect(ModeSet::of(&[Mode::IR, Mode::IW]))
        .iter()
    {
        if conflicts(m, requested) {
            out.insert(m);
        }
    }
    out
}

/// The intention modes (the only modes a node keeps) that conflict with `mode` (Table 2.1).
fn intentions_conflicting(mode: Mode) -> ModeSet {
    let mut out = ModeSet::EMPTY;
    for m in [Mode::IR, Mode::IW] {
        if conflicts(m, mode) {
            out.insert(m);
        }
    }
    out
}

impl<const N: usize, const Q: usize> LockNode<N, Q> {
    /// The intention mode this node keeps while idle ([`ReleaseRule::KeepIntention`]; Φ
    /// under the thesis's eager release).
    pub fn kept(&self) -> Mode {
        self.kept
    }

    /// The intention modes this node may not keep until its owned mode drops to Φ: a
    /// request that conflicts with them passed through it (`LockNode::pass_on`; empty
    /// under the thesis's eager release).
    pub fn passed(&self) -> ModeSet {
        self.passed
    }

    /// P3 restated for [`ReleaseRule::KeepIntention`]: a kept mode is Φ, or IR/IW at a
    /// non-token node that has no request pending, nothing frozen and passed on no request
    /// that conflicts with it.
    pub fn kept_invariant(&self) -> bool {
        self.kept == Mode::Phi
            || (matches!(self.kept, Mode::IR | Mode::IW)
                && !self.has_token()
                && self.pending == Pending::None
                && self.frozen.is_empty()
                && !self.passed.contains(self.kept))
    }

    /// Rule 5.2 under the variant's release rule, after the held mode or a child's record
    /// dropped (`before`: the owned mode before). A non-token node that holds nothing, has
    /// nothing pending and nothing frozen and owned an intention mode keeps it (no message),
    /// unless it passed on a request that conflicts with that mode (`LockNode::pass_on`);
    /// otherwise the kept mode is dropped and the thesis's release is sent if the owned
    /// mode changed.
    pub(crate) fn release_or_keep<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        before: Mode,
    ) -> Result<(), KernelError> {
        if cx.variant.release.keeps()
            && !self.has_token()
            && self.parent.is_some()
            && self.held == Mode::Phi
            && self.pending == Pending::None
            && self.frozen.is_empty()
            && matches!(before, Mode::IR | Mode::IW)
            && !self.passed.contains(before)
        {
            self.kept = before;
            return Ok(());
        }
        self.kept = Mode::Phi;
        self.after_owned_change(cx, before)
    }

    /// Gives the kept mode back: the eager Rule 5.2 release of what the node owns without
    /// it (nothing is sent if the held mode or the children still own as much).
    pub(crate) fn give_back<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        if self.kept == Mode::Phi {
            return Ok(());
        }
        let before = self.owned();
        self.kept = Mode::Phi;
        self.after_owned_change(cx, before)
    }

    /// Rule 4.1 (F) under [`ReleaseRule::KeepIntention`], before another node's request
    /// `entry` is passed on: FIFO for kept modes (P6). The request will wait at the token
    /// node behind, or be granted before, whatever this node asks for next; re-entering by
    /// Rule 2 from a kept mode that conflicts with it (Table 2.1) would overtake it while
    /// the token node's `Freeze` (Rule 6, Table 2.4) is on its way. So a kept mode that
    /// conflicts with it is given back first — the eager Rule 5.2 release goes ahead of the
    /// request on the link to the parent, which then need not freeze it — and, while this
    /// node still owns a mode or waits for one (a grant may be on its way), the intention
    /// modes that conflict with the request are not kept at a later release (`passed`,
    /// emptied when the owned mode drops to Φ). An idle node that owns nothing asks by a
    /// request of its own before it can enter, as under the eager release. Nothing happens
    /// to this node's own requests, nor under the thesis's eager release.
    pub(crate) fn pass_on<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
        entry: QueueEntry,
    ) -> Result<(), KernelError> {
        if !cx.variant.release.keeps() || entry.requester == cx.me {
            return Ok(());
        }
        let conflicting = intentions_conflicting(entry.mode);
        if conflicting.contains(self.kept) {
            self.give_back(cx)?;
        }
        if self.owned() != Mode::Phi || self.pending != Pending::None {
            self.passed = self.passed.union(conflicting);
        }
        Ok(())
    }

    /// `HandleFreeze` (Fig. 2.9) under [`ReleaseRule::KeepIntention`]: a freeze means a
    /// conflicting request waits at the token node; the kept mode goes back at once.
    pub(crate) fn give_back_on_freeze<S: Sink<Output<Msg<Q>>>>(
        &mut self,
        cx: &mut Ctx<'_, Q, S>,
    ) -> Result<(), KernelError> {
        if cx.variant.release.gives_back_on_freeze() {
            self.give_back(cx)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::tables::frozen_by;

    /// Table 2.4 freezes every intention mode a token node could have granted that
    /// conflicts with the request it queues: a Freeze therefore reaches every node that
    /// keeps such a mode (no new recall message is needed). Deleting IW from cell
    /// (IW, U) of Table 2.4 turns this red.
    #[test]
    fn table_2_4_freezes_every_conflicting_intention_mode() {
        let mut covered = 0;
        for owned in Mode::ALL {
            for req in Mode::REQUESTABLE {
                let need = recall_set(owned, req);
                assert!(
                    need.minus(frozen_by(owned, req)).is_empty(),
                    "Table 2.4 ({owned}, {req}) misses {}",
                    need.minus(frozen_by(owned, req))
                );
                covered += need.len();
            }
        }
        // IR vs W under IR, R, U, IW; IW vs R, U, W under IW.
        assert_eq!(covered, 7);
    }
}
