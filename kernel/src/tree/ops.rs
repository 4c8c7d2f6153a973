//! Whole and step-wise operations: `InsertUser` and `RemoveUser` with demotion, promotion
//! and undo, one node latch per step (slides 13–21).

use super::{
    Color, Demotion, Promotion, TreeError, TreeLock, TreeNodeId, TreeVariant, Undo, UserId,
};

impl<const CAP: usize> TreeLock<CAP> {
    // ----- whole operations -------------------------------------------------------------

    /// `InsertUser(w, u)` (slide 16) with hilock's rules: user `u` asks for leaf `w` and
    /// gets the largest subtree that holds no other request, demoting an owner whose
    /// region has to be split (slide 15); fails — and undoes its grey counts — if another
    /// user holds `w` itself. O(h).
    pub fn insert_user(&mut self, w: TreeNodeId, u: UserId) -> Result<Outcome, TreeError> {
        self.insert_user_with(w, u, TreeVariant::HILOCK)
    }

    /// [`TreeLock::insert_user`] with the rules of `variant`.
    pub fn insert_user_with(
        &mut self,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Outcome, TreeError> {
        self.idle()?;
        if let Some(r) = self.holder(w) {
            if r.owner == u {
                // slide 16: `if w.owner ≠ u_i` guards the whole insert
                return Ok(Outcome::AlreadyHeld { region: r.node });
            }
        }
        let mut op = Op::insert(&mut *self, w, u, variant)?;
        self.run(&mut op)
    }

    /// `RemoveUser(w, u)` (slide 20) with hilock's rules: user `u`, which owns the region
    /// holding leaf `w`, leaves it; the grey counts on the path fall and the largest region
    /// a remaining owner may have is promoted to it (slides 18–19). O(h).
    pub fn remove_user(&mut self, w: TreeNodeId, u: UserId) -> Result<Outcome, TreeError> {
        self.remove_user_with(w, u, TreeVariant::HILOCK)
    }

    /// [`TreeLock::remove_user`] with the rules of `variant`.
    pub fn remove_user_with(
        &mut self,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Outcome, TreeError> {
        self.idle()?;
        let mut op = Op::remove(&mut *self, w, u, variant)?;
        self.run(&mut op)
    }

    fn idle(&self) -> Result<(), TreeError> {
        if self.latched == 0 {
            return Ok(());
        }
        let (i, n) = self
            .nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.latch.is_some())
            .ok_or(TreeError::Inconsistent(TreeNodeId(0)))?;
        Err(TreeError::Busy {
            node: TreeNodeId(i as u32),
            holder: n.latch.unwrap_or(UserId(0)),
        })
    }

    /// Runs an operation to its end (no other operation may hold latches).
    pub fn run(&mut self, op: &mut Op) -> Result<Outcome, TreeError> {
        // every step takes a latch on a path of at most h + 1 nodes, per pass, plus two per
        // demotion level and one per promotion look-up: far below this bound
        let bound = 8usize.saturating_mul(self.nodes.len()).saturating_add(16);
        for _ in 0..bound {
            match op.step(self)? {
                Step::Blocked { node, holder } => return Err(TreeError::Busy { node, holder }),
                Step::Progress(p) => {
                    if let Some(o) = p.outcome {
                        return Ok(o);
                    }
                }
            }
        }
        Err(TreeError::Inconsistent(TreeNodeId(0)))
    }

    // ----- node writes (SetOwner / ReleaseOwner, slide 16 and 20) ----------------------

    fn set_owner(&mut self, n: TreeNodeId, u: UserId, r: TreeNodeId) -> Result<(), TreeError> {
        let node = self.node_mut(n)?;
        node.color = Color::Black;
        node.grey = 0;
        node.owner = Some(u);
        node.original = Some(r);
        Ok(())
    }
    fn release_owner(&mut self, n: TreeNodeId) -> Result<(), TreeError> {
        let node = self.node_mut(n)?;
        node.color = Color::White;
        node.grey = 0;
        node.owner = None;
        node.original = None;
        Ok(())
    }
    fn set_grey(&mut self, n: TreeNodeId, count: u32) -> Result<(), TreeError> {
        let node = self.node_mut(n)?;
        node.color = Color::Grey;
        node.grey = count;
        node.owner = None;
        node.original = None;
        Ok(())
    }
    fn take_latch(&mut self, n: TreeNodeId, u: UserId) -> Result<(), TreeError> {
        let node = self.node_mut(n)?;
        if node.latch.is_none() {
            node.latch = Some(u);
            self.latched = self.latched.saturating_add(1);
        }
        Ok(())
    }
    fn drop_latch(&mut self, n: TreeNodeId) {
        if let Ok(node) = self.node_mut(n) {
            if node.latch.take().is_some() {
                self.latched = self.latched.saturating_sub(1);
            }
        }
    }

    /// Records that an operation of `u` starts; refused, changing nothing, while one of
    /// `u`'s runs or when `CAP` are running.
    fn begin(&mut self, u: UserId) -> Result<(), TreeError> {
        match self.running.binary_search(&u) {
            Ok(_) => Err(TreeError::OperationInProgress { user: u }),
            Err(i) => self
                .running
                .insert(i, u)
                .map_err(|_| TreeError::TooManyOperations {
                    capacity: u32::try_from(CAP).unwrap_or(u32::MAX),
                }),
        }
    }

    /// Records that `u`'s operation ended.
    fn end(&mut self, u: UserId) {
        if let Ok(i) = self.running.binary_search(&u) {
            self.running.remove(i);
        }
    }
}

// ----- step-wise operations --------------------------------------------------------------

/// The result of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Outcome {
    /// Insert: the user owns `region` (slide 16, `SetOwner(n, u, w)`).
    Granted {
        /// The node made black.
        region: TreeNodeId,
    },
    /// Insert by a user that already holds the leaf (slide 16's guard).
    AlreadyHeld {
        /// The user's region.
        region: TreeNodeId,
    },
    /// Insert failed: `holder` holds the requested leaf; the grey counts were undone.
    Failed {
        /// The user that holds the leaf.
        holder: UserId,
    },
    /// Remove: the user's region was released.
    Released,
    /// Remove: the path held no region of the user any more (only broken variants).
    Vanished,
}

/// Operation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum OpKind {
    /// `InsertUser` (slide 16).
    Insert,
    /// `RemoveUser` (slide 20).
    Remove,
}

/// Where an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Phase {
    /// `RecurseInsert` down the path (grey counts up).
    Insert,
    /// Demoting the black node `cur`: latching its left child.
    DemoteLeft,
    /// Demoting the black node `cur`: latching its right child.
    DemoteRight,
    /// `RecurseRemove` down the path (grey counts down), for a remove or for the undo of a
    /// failed insert.
    Remove,
    /// A count fell to one: latching the other child of `cur` to see whether it is black.
    Peek,
    /// Finished.
    Done(Outcome),
}

/// One step's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Progress {
    /// The latch taken in this step.
    pub node: TreeNodeId,
    /// A black node demoted to grey in this step (slide 15).
    pub demoted: Option<TreeNodeId>,
    /// A node made black by promotion in this step (slide 19).
    pub promoted: Option<TreeNodeId>,
    /// The insert failed at this step and starts its undo pass (slide 21).
    pub undo_started: bool,
    /// The operation finished with this outcome.
    pub outcome: Option<Outcome>,
}

/// What [`Op::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Step {
    /// The next latch, `node`, is held by `holder`'s operation; nothing changed.
    Blocked {
        /// The wanted node.
        node: TreeNodeId,
        /// Its holder.
        holder: UserId,
    },
    /// The latch was taken and the work done.
    Progress(Progress),
}

/// An insert or remove in progress, one latch per [`Op::step`] (slide 13's handshake:
/// a path node's child is latched before the node is released; a node whose count fell to
/// one stays latched while its new owner is looked for below; a demotion latches both
/// children of the demoted node). Latches are always taken top-down, so operations cannot
/// deadlock. An operation is identified by its user: a user runs one operation at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Op {
    kind: OpKind,
    user: UserId,
    target: TreeNodeId,
    variant: TreeVariant,
    phase: Phase,
    /// The path node latched (the handshake's current node).
    cur: Option<TreeNodeId>,
    /// A node whose count fell to one, kept latched until its new owner is found.
    keep: Option<TreeNodeId>,
    /// A child latched besides `cur` (demotion: the left child; promotion: the other one).
    side: Option<TreeNodeId>,
    /// The next latch to take.
    want: Option<TreeNodeId>,
    /// This pass is the undo of a failed insert.
    undoing: bool,
    /// Depth of the node where the failed insert stopped.
    fail_depth: u32,
    /// The failed insert's outcome, reported when its undo ends.
    pending: Option<Outcome>,
    /// Latches taken so far.
    taken: u32,
    /// Demotions done.
    demotions: u32,
    /// Promotions done.
    promotions: u32,
}

impl Op {
    /// An insert of user `u` at leaf `w` (slide 16). The first latch is the root.
    ///
    /// The tree records the operation until it finishes: step it to its end. Refused,
    /// changing nothing, while another operation of `u` runs
    /// ([`TreeError::OperationInProgress`]).
    pub fn insert<const CAP: usize>(
        tree: &mut TreeLock<CAP>,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Op, TreeError> {
        if !tree.node(w)?.is_leaf() {
            return Err(TreeError::NotALeaf(w));
        }
        tree.begin(u)?;
        Ok(Op::new(OpKind::Insert, Phase::Insert, w, u, variant))
    }

    /// A remove of user `u` from the region holding leaf `w` (slide 20; the guard
    /// `w.owner = u` is checked here). Recorded and refused as [`Op::insert`].
    pub fn remove<const CAP: usize>(
        tree: &mut TreeLock<CAP>,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Op, TreeError> {
        if !tree.node(w)?.is_leaf() {
            return Err(TreeError::NotALeaf(w));
        }
        match tree.holder(w) {
            Some(r) if r.owner == u => {
                tree.begin(u)?;
                Ok(Op::new(OpKind::Remove, Phase::Remove, w, u, variant))
            }
            _ => Err(TreeError::NotOwner { user: u, node: w }),
        }
    }

    fn new(kind: OpKind, phase: Phase, w: TreeNodeId, u: UserId, variant: TreeVariant) -> Op {
        Op {
            kind,
            user: u,
            target: w,
            variant,
            phase,
            cur: None,
            keep: None,
            side: None,
            want: Some(TreeNodeId(0)),
            undoing: false,
            fail_depth: 0,
            pending: None,
            taken: 0,
            demotions: 0,
            promotions: 0,
        }
    }

    /// The kind.
    pub fn kind(&self) -> OpKind {
        self.kind
    }
    /// The user.
    pub fn user(&self) -> UserId {
        self.user
    }
    /// The requested leaf.
    pub fn target(&self) -> TreeNodeId {
        self.target
    }
    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// The outcome, once finished.
    pub fn outcome(&self) -> Option<Outcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }
    /// The next latch the operation takes (`None` once finished).
    pub fn want(&self) -> Option<TreeNodeId> {
        self.want
    }
    /// The latches held: path node, kept promotion node, latched child.
    pub fn held(&self) -> [Option<TreeNodeId>; 3] {
        [self.cur, self.keep, self.side]
    }
    /// Whether this pass is the undo of a failed insert.
    pub fn undoing(&self) -> bool {
        self.undoing
    }
    /// Number of latches taken so far.
    pub fn taken(&self) -> u32 {
        self.taken
    }
    /// Number of demotions done.
    pub fn demotions(&self) -> u32 {
        self.demotions
    }
    /// Number of promotions done.
    pub fn promotions(&self) -> u32 {
        self.promotions
    }

    /// Takes the next latch and does the work it allows. If the latch is held by another
    /// operation, returns [`Step::Blocked`] and changes nothing. On an error the operation
    /// releases its latches and finishes.
    pub fn step<const CAP: usize>(&mut self, tree: &mut TreeLock<CAP>) -> Result<Step, TreeError> {
        let n = self.want.ok_or(TreeError::Finished)?;
        let node = match tree.node(n) {
            Ok(node) => *node,
            Err(e) => {
                self.abort(tree);
                return Err(e);
            }
        };
        if let Some(h) = node.latch {
            if h != self.user {
                return Ok(Step::Blocked { node: n, holder: h });
            }
            // Our own user's latch: the tree runs one operation per user
            // (`TreeLock::begin`), so only a copy of this operation stepped beside it in the
            // same tree gets here. That copy ends; the tree, and the latches the other copy
            // holds, stay as they are.
            self.cur = None;
            self.keep = None;
            self.side = None;
            self.want = None;
            self.phase = Phase::Done(Outcome::Vanished);
            return Err(TreeError::Busy { node: n, holder: h });
        }
        tree.take_latch(n, self.user)?;
        self.taken = self.taken.saturating_add(1);
        let mut p = Progress {
            node: n,
            demoted: None,
            promoted: None,
            undo_started: false,
            outcome: None,
        };
        match self.work(tree, n, &mut p) {
            Ok(()) => Ok(Step::Progress(p)),
            Err(e) => {
                tree.drop_latch(n);
                self.abort(tree);
                Err(e)
            }
        }
    }

    /// Ends the operation after an error: every latch released.
    fn abort<const CAP: usize>(&mut self, tree: &mut TreeLock<CAP>) {
        self.release_all(tree);
        tree.end(self.user);
        self.want = None;
        self.phase = Phase::Done(Outcome::Vanished);
    }

    fn release_all<const CAP: usize>(&mut self, tree: &mut TreeLock<CAP>) {
        for n in [self.cur.take(), self.keep.take(), self.side.take()]
            .into_iter()
            .flatten()
        {
            tree.drop_latch(n);
        }
    }

    fn finish<const CAP: usize>(&mut self, tree: &mut TreeLock<CAP>, p: &mut Progress, o: Outcome) {
        self.release_all(tree);
        tree.end(self.user);
        let o = self.pending.take().unwrap_or(o);
        self.want = None;
        self.phase = Phase::Done(o);
        p.outcome = Some(o);
    }

    /// Moves the handshake to path node `n`: release the previous path node unless it is
    /// kept for a promotion.
    fn advance<const CAP: usize>(&mut self, tree: &mut TreeLock<CAP>, n: TreeNodeId) {
        if let Some(c) = self.cur {
            if Some(c) != self.keep {
                tree.drop_latch(c);
            }
        }
        self.cur = Some(n);
    }

    fn next_on_path<const CAP: usize>(
        &self,
        tree: &TreeLock<CAP>,
        n: TreeNodeId,
    ) -> Result<TreeNodeId, TreeError> {
        tree.next_in_path(n, self.target)
            .ok_or(TreeError::Inconsistent(n))
    }

    fn work<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        n: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        match self.phase {
            Phase::Insert => {
                self.advance(tree, n);
                self.insert_at(tree, n, p)
            }
            Phase::DemoteLeft => {
                self.side = Some(n);
                let c = self.cur.ok_or(TreeError::Inconsistent(n))?;
                self.want = Some(tree.right(c).ok_or(TreeError::Inconsistent(c))?);
                self.phase = Phase::DemoteRight;
                Ok(())
            }
            Phase::DemoteRight => self.demote(tree, n, p),
            Phase::Remove => {
                self.advance(tree, n);
                self.remove_at(tree, n, p)
            }
            Phase::Peek => self.peek(tree, n, p),
            Phase::Done(_) => Err(TreeError::Finished),
        }
    }

    /// `RecurseInsert(n, w, u)` (slide 16) at the latched path node `n`.
    fn insert_at<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        n: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        let node = *tree.node(n)?;
        match node.color {
            Color::White => {
                // white: take it — the largest subtree possible
                tree.set_owner(n, self.user, self.target)?;
                self.finish(tree, p, Outcome::Granted { region: n });
                Ok(())
            }
            Color::Grey => {
                if node.is_leaf() {
                    return Err(TreeError::Inconsistent(n));
                }
                tree.node_mut(n)?.grey =
                    node.grey.checked_add(1).ok_or(TreeError::Inconsistent(n))?;
                self.want = Some(self.next_on_path(tree, n)?);
                Ok(())
            }
            Color::Black => {
                let owner = node.owner.ok_or(TreeError::Inconsistent(n))?;
                if owner == self.user {
                    self.fail(tree, n, p, Outcome::AlreadyHeld { region: n })
                } else if node.is_leaf()
                    || (self.variant.demotion == Demotion::Checked
                        && node.original == Some(self.target))
                {
                    // slide 16: a leaf that is not white cannot be demoted (hilock: nor a
                    // region whose original request is the requested leaf)
                    self.fail(tree, n, p, Outcome::Failed { holder: owner })
                } else {
                    // slide 15: demote; first latch both children
                    self.phase = Phase::DemoteLeft;
                    self.want = Some(tree.left(n).ok_or(TreeError::Inconsistent(n))?);
                    Ok(())
                }
            }
        }
    }

    /// The insert fails at `n`: release everything and start the undo pass from the root
    /// (slide 16: `RecurseRemove(root, w, u)`; slide 21).
    fn fail<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        n: TreeNodeId,
        p: &mut Progress,
        o: Outcome,
    ) -> Result<(), TreeError> {
        let depth = tree.node(n)?.depth;
        self.release_all(tree);
        self.pending = Some(o);
        if depth == 0 && self.variant.undo == Undo::Counted {
            // nothing was incremented
            self.finish(tree, p, o);
            return Ok(());
        }
        self.fail_depth = depth;
        self.undoing = true;
        self.phase = Phase::Remove;
        self.want = Some(TreeNodeId(0));
        p.undo_started = true;
        Ok(())
    }

    /// Both children of the black node `cur` are latched: demote it (slide 16's last
    /// branch).
    fn demote<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        right: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        let c = self.cur.ok_or(TreeError::Inconsistent(right))?;
        let left = self.side.ok_or(TreeError::Inconsistent(right))?;
        let node = *tree.node(c)?;
        let owner = node.owner.ok_or(TreeError::Inconsistent(c))?;
        let r = node.original.ok_or(TreeError::Inconsistent(c))?;
        let b = self.next_on_path(tree, c)?;
        let a = tree.next_in_path(c, r).ok_or(TreeError::Inconsistent(c))?;
        // SetOwner(a, n.owner, n.originalRequest); n.color = grey; n.greyColor = 2
        tree.set_owner(a, owner, r)?;
        tree.set_grey(c, 2)?;
        self.demotions = self.demotions.saturating_add(1);
        p.demoted = Some(c);
        if a != b {
            // the paths split: SetOwner(b, u, w)
            tree.set_owner(b, self.user, self.target)?;
            tree.drop_latch(right);
            self.finish(tree, p, Outcome::Granted { region: b });
            return Ok(());
        }
        // same path: RecurseInsert(b, w, u) on the node just made black
        let other = if a == left { right } else { left };
        if self.variant.demotion != Demotion::Slides {
            tree.release_owner(other)?;
        }
        tree.drop_latch(other);
        tree.drop_latch(c);
        self.side = None;
        self.cur = Some(a);
        self.phase = Phase::Insert;
        self.insert_at(tree, a, p)
    }

    /// `RecurseRemove(n, w, u)` (slide 20) at the latched path node `n`, for a remove or
    /// for the undo pass of a failed insert.
    fn remove_at<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        n: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        let node = *tree.node(n)?;
        let counted = self.undoing && self.variant.undo == Undo::Counted;
        if counted && node.depth >= self.fail_depth {
            // where the failed insert stopped: its owner is the one left, if any
            if let (Color::Black, Some(k), Some(o), Some(r)) =
                (node.color, self.keep, node.owner, node.original)
            {
                self.promote(tree, k, o, r, p)?;
            }
            self.finish(tree, p, Outcome::Released);
            return Ok(());
        }
        match node.color {
            Color::Black => {
                if node.owner == Some(self.user) && !counted {
                    // ReleaseOwner(n)
                    tree.release_owner(n)?;
                    self.finish(tree, p, Outcome::Released);
                } else if self.undoing {
                    // the undo ran into a region (where the insert failed, with the
                    // slides' undo maybe another): with hilock's promotion its owner is
                    // the one left for a kept node
                    if let (Promotion::PathSibling, Some(k), Some(o), Some(r)) =
                        (self.variant.promotion, self.keep, node.owner, node.original)
                    {
                        self.promote(tree, k, o, r, p)?;
                    }
                    self.finish(tree, p, Outcome::Released);
                } else {
                    self.finish(tree, p, Outcome::Vanished);
                }
                Ok(())
            }
            Color::White => {
                let o = if self.undoing {
                    Outcome::Released
                } else {
                    Outcome::Vanished
                };
                self.finish(tree, p, o);
                Ok(())
            }
            Color::Grey => {
                if node.is_leaf() {
                    return Err(TreeError::Inconsistent(n));
                }
                let g = node.grey.checked_sub(1).ok_or(TreeError::Inconsistent(n))?;
                tree.node_mut(n)?.grey = g;
                match self.variant.promotion {
                    Promotion::Slides => self.promote_slides(tree, n, g, p),
                    Promotion::PathSibling => {
                        if g == 0 {
                            // nothing left below: paint n white
                            tree.release_owner(n)?;
                            self.finish(tree, p, Outcome::Released);
                        } else if g == 1 {
                            // the count fell to one: is the other child the owner left?
                            self.phase = Phase::Peek;
                            self.want = Some(
                                tree.other_child(n, self.target)
                                    .ok_or(TreeError::Inconsistent(n))?,
                            );
                        } else {
                            self.want = Some(self.next_on_path(tree, n)?);
                        }
                        Ok(())
                    }
                }
            }
        }
    }

    /// Slide 20's promotion, literally: test `w.sibling`, then `w`.
    fn promote_slides<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        n: TreeNodeId,
        g: u32,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        let w = self.target;
        let sib = tree
            .sibling(w)
            .and_then(|s| tree.node(s).ok().map(|x| (s, *x)));
        let wn = *tree.node(w)?;
        match (g, sib) {
            (1, Some((s, sn))) if sn.color == Color::Black => {
                // SetOwner(n, w.sibling.owner, w.sibling)
                let o = sn.owner.ok_or(TreeError::Inconsistent(s))?;
                self.promote(tree, n, o, s, p)?;
            }
            (1, _) if wn.color == Color::Black => {
                // SetOwner(n, w.owner, w)
                let o = wn.owner.ok_or(TreeError::Inconsistent(w))?;
                self.promote(tree, n, o, w, p)?;
            }
            (0, _) => tree.release_owner(n)?,
            _ => {}
        }
        // RecurseRemove(NextInPath(n, w), w, u)
        self.want = Some(self.next_on_path(tree, n)?);
        Ok(())
    }

    fn promote<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        k: TreeNodeId,
        o: UserId,
        r: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        tree.set_owner(k, o, r)?;
        self.promotions = self.promotions.saturating_add(1);
        p.promoted = Some(k);
        Ok(())
    }

    /// The other child `c` of `cur` is latched (hilock's promotion).
    fn peek<const CAP: usize>(
        &mut self,
        tree: &mut TreeLock<CAP>,
        c: TreeNodeId,
        p: &mut Progress,
    ) -> Result<(), TreeError> {
        let cur = self.cur.ok_or(TreeError::Inconsistent(c))?;
        let node = *tree.node(c)?;
        if let (Color::Black, Some(o), Some(r)) = (node.color, node.owner, node.original) {
            // promote the owner left to the topmost node whose count fell to one
            let k = self.keep.unwrap_or(cur);
            self.side = Some(c);
            self.promote(tree, k, o, r, p)?;
            self.finish(tree, p, Outcome::Released);
            return Ok(());
        }
        tree.drop_latch(c);
        if self.keep.is_none() {
            self.keep = Some(cur);
        }
        self.phase = Phase::Remove;
        self.want = Some(self.next_on_path(tree, cur)?);
        Ok(())
    }
}
