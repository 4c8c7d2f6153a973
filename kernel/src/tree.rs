//! Preston & Prasad's multi-granular hierarchical locking of a document tree (J. A. Preston,
//! S. K. Prasad, *A Deadlock-free Multi-granular, Hierarchical Locking Scheme for Real-time
//! Collaborative Editing*; the slides are cited as "slide N").
//!
//! The document tree is mapped to a binary tree (slide 6, [`TreeLock::from_document`]; or
//! [`TreeLock::complete`]). Each node has a colour (slide 12): white — nobody owns anything
//! inside; black — one user owns the whole subtree; grey — at least two owned regions
//! below, counted by the node's grey count. A black node also records its owner and the
//! *original request* (slide 11): the leaf the owner asked for, which tells a later
//! demotion where to push the ownership. Users ask for leaves (slide 5); a user who enters
//! gets the largest subtree that holds no other request (slide 7).
//!
//! # Logical and physical state
//! Only the nodes whose proper ancestors are all grey mean anything ("all sub-tree nodes
//! are white/black logically", slide 12). The nodes below a black or white node keep
//! whatever they held: they are never read until a demotion writes them again. The logical
//! state is what [`TreeLock::holder`], [`TreeLock::regions`] and [`TreeLock::audit`] read.
//!
//! # Operations and locking
//! [`TreeLock::insert_user`] (slide 16, `InsertUser`, with demotion, slide 15) and
//! [`TreeLock::remove_user`] (slide 20, `RemoveUser`, with promotion, slides 18–19) run an
//! [`Op`] to its end. An [`Op`] is the same operation as a concurrent implementation runs
//! it: a step-wise state machine whose [`Op::step`] takes exactly one node latch, top-down
//! (slide 13: acquire a node, acquire its child, release the node), and does the work the
//! latches it holds allow. A model checker interleaves the steps of several operations;
//! [`Op::want`] is the next latch, and the sequence of [`Progress::node`] is the order in
//! which the operation takes the latches. [`TreeLock::path`] is the handshake order of one
//! pass: the nodes from the root down to a node.
//!
//! # hilock's reading and the literal slides
//! [`TreeVariant::HILOCK`] is the algorithm that the exhaustive model check
//! (`verify/tests/tree.rs`) and the proptests (`kernel/tests/tree.rs`) pass;
//! [`TreeVariant::SLIDES`] is the pseudocode of slides 16 and 20 as written. They differ in
//! three places, each a flag of [`TreeVariant`], and the model checker refutes each literal
//! reading (`spec/counterexamples/tree-*.json`, `spec/SPEC.md`):
//! - promotion (slide 20): the slides test `w.sibling` and then `w` — nodes next to the
//!   requested *leaf* — at every node of the path, and the second test, meant for the undo
//!   of slide 21, also fires in a plain `RemoveUser`, where `w` is the leaving user's own
//!   leaf; hilock tests the other child of the path node and, when that child is not
//!   black, keeps the node latched and looks further down the path for the owner that is
//!   left ([`Promotion`]);
//! - the undo of a failed insert (slides 16 and 21): the slides run `RecurseRemove(root, w,
//!   u)` for a user that never owned anything, which decrements every grey node on the
//!   path, also counts the insert never incremented; hilock decrements only the nodes above
//!   the depth where the insert stopped and promotes the owner found there if a count falls
//!   to one ([`Undo`]);
//! - demotion (slides 15–16): a same-path demotion of the slides leaves the other child of
//!   the demoted node as it was, and a stale owner there is later read as a region; hilock
//!   paints it white. hilock also fails at the black node whose original request is the
//!   requested leaf, before demoting, where the slides demote down to the leaf, fail there
//!   and promote back ([`Demotion`]; this part only saves work: [`Demotion::PaintWhite`]
//!   leaves it out and passes the same model checks).
//!
//! The guards `w.owner ≠ u` (slide 16) and `w.owner = u` (slide 20) are read as the
//! *logical* owner of `w` in every variant: the physical `w.owner` is empty as soon as the
//! user owns more than the leaf, and such a user could never leave.
//!
//! Everything is allocation-free with capacity `CAP` nodes, total (bad input is a
//! [`TreeError`], never a panic), with no clock and no randomness.

use core::fmt;

/// A node of the binary tree: its preorder index (the root is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TreeNodeId(pub u32);

impl fmt::Display for TreeNodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A user (an editor, slide 14's `u_i`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UserId(pub u16);

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "u{}", self.0)
    }
}

/// Node colour (slide 12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Color {
    /// Unowned: nobody owns anything in the subtree.
    White,
    /// Owned: one user owns the whole subtree.
    Black,
    /// At least two owned regions below (the grey count).
    Grey,
}

/// What a binary node stands for in the document tree (slide 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Label {
    /// A node of [`TreeLock::complete`].
    None,
    /// Document item `0`: a leaf (its content), or a section with two or more children
    /// (the last of a chain of single-child sections, which map to the same node).
    Item(u32),
    /// Artificial node of the mapping: the children `from..` of document item `item`.
    Rest {
        /// The section.
        item: u32,
        /// Index of the first child (among the item's children) below this node.
        from: u32,
    },
}

/// One node of the binary tree (slide 11: children, sibling, colour, owner, original
/// request), plus the handshake latch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Node {
    parent: Option<TreeNodeId>,
    size: u32,
    depth: u32,
    label: Label,
    color: Color,
    grey: u32,
    owner: Option<UserId>,
    original: Option<TreeNodeId>,
    latch: Option<UserId>,
}

impl Node {
    const fn fresh(parent: Option<TreeNodeId>, depth: u32, label: Label) -> Node {
        Node {
            parent,
            size: 1,
            depth,
            label,
            color: Color::White,
            grey: 0,
            owner: None,
            original: None,
            latch: None,
        }
    }

    /// The colour.
    pub fn color(&self) -> Color {
        self.color
    }
    /// The grey count (slide 16 `greyColor`; meaningful on grey nodes).
    pub fn grey(&self) -> u32 {
        self.grey
    }
    /// The owner of a black node.
    pub fn owner(&self) -> Option<UserId> {
        self.owner
    }
    /// The original request of a black node (the leaf its owner asked for).
    pub fn original(&self) -> Option<TreeNodeId> {
        self.original
    }
    /// The parent (`None` at the root).
    pub fn parent(&self) -> Option<TreeNodeId> {
        self.parent
    }
    /// Number of nodes in the subtree (1 for a leaf).
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Depth (the root has depth 0).
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// What the node stands for in the document.
    pub fn label(&self) -> Label {
        self.label
    }
    /// The user whose operation holds the node's latch.
    pub fn latch(&self) -> Option<UserId> {
        self.latch
    }
    /// Whether the node is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.size == 1
    }
}

/// Why the tree rejected an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TreeError {
    /// The node is not in the tree.
    OutsideTree(TreeNodeId),
    /// Requests are for leaves (slide 5): this node is not one.
    NotALeaf(TreeNodeId),
    /// The tree would need `needed` nodes, more than the capacity `capacity`.
    OverCapacity {
        /// Nodes needed (saturated at `u32::MAX`).
        needed: u32,
        /// `CAP`.
        capacity: u32,
    },
    /// A document description that is not a tree whose items list their parents first
    /// (`item` is the first bad entry), or an output map shorter than the document.
    InvalidDocument {
        /// The offending item.
        item: u32,
    },
    /// `remove_user`: the user does not own the region that holds the node (slide 20's
    /// guard `w.owner = u`).
    NotOwner {
        /// The user.
        user: UserId,
        /// The node.
        node: TreeNodeId,
    },
    /// A whole-operation call while an [`Op`] holds latches (`node` is latched by
    /// `holder`); finish the stepped operations first.
    Busy {
        /// A latched node.
        node: TreeNodeId,
        /// Its holder.
        holder: UserId,
    },
    /// The tree's state contradicts the colouring (e.g. a grey leaf or a grey count that
    /// would fall below zero) at this node. Only a broken variant gets here.
    Inconsistent(TreeNodeId),
    /// [`Op::step`] on an operation that has finished.
    Finished,
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::OutsideTree(n) => write!(f, "node {n} is not in the tree"),
            TreeError::NotALeaf(n) => write!(f, "node {n} is not a leaf"),
            TreeError::OverCapacity { needed, capacity } => {
                write!(f, "the tree needs {needed} nodes, capacity is {capacity}")
            }
            TreeError::InvalidDocument { item } => {
                write!(f, "document item {item}: not a tree listed parents first")
            }
            TreeError::NotOwner { user, node } => {
                write!(f, "user {user} does not own the region of node {node}")
            }
            TreeError::Busy { node, holder } => {
                write!(f, "node {node} is latched by an operation of {holder}")
            }
            TreeError::Inconsistent(n) => write!(f, "inconsistent colouring at node {n}"),
            TreeError::Finished => write!(f, "the operation has finished"),
        }
    }
}

/// A violation of the colour invariants, exclusivity or maximality found by
/// [`TreeLock::audit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TreeViolation {
    /// A request names a node outside the tree or not a leaf.
    BadRequest(TreeNodeId),
    /// Two requests for the same leaf.
    DuplicateRequest(TreeNodeId),
    /// A node is still latched (audit is for quiescent trees).
    Latched(TreeNodeId),
    /// White, but a request lies inside (white ⇒ nobody owns inside).
    WhiteOccupied(TreeNodeId),
    /// Black, but the subtree does not hold exactly the owner's request at the original
    /// request (black ⇒ one user owns the whole subtree).
    BlackNotSole(TreeNodeId),
    /// Grey with fewer than two requests below (grey ⇒ at least two owners below).
    GreyUnderTwo(TreeNodeId),
    /// Grey count different from the number of requests below.
    GreyCount {
        /// The node.
        node: TreeNodeId,
        /// Its grey count.
        count: u32,
        /// Requests below it.
        requests: u32,
    },
    /// Exclusivity: the user's requested leaf is not in a region the user owns.
    NotHeld {
        /// The user.
        user: UserId,
        /// The requested leaf.
        leaf: TreeNodeId,
    },
    /// Maximality: the user owns `region`, but `largest` is the largest subtree with no
    /// other request.
    NotMaximal {
        /// The user.
        user: UserId,
        /// Region owned.
        region: TreeNodeId,
        /// Largest allowed region.
        largest: TreeNodeId,
    },
}

impl fmt::Display for TreeViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeViolation::BadRequest(n) => write!(f, "request for {n}, not a leaf of the tree"),
            TreeViolation::DuplicateRequest(n) => write!(f, "two requests for leaf {n}"),
            TreeViolation::Latched(n) => write!(f, "node {n} is latched"),
            TreeViolation::WhiteOccupied(n) => write!(f, "white node {n} has a request inside"),
            TreeViolation::BlackNotSole(n) => {
                write!(
                    f,
                    "black node {n} does not hold exactly its owner's request"
                )
            }
            TreeViolation::GreyUnderTwo(n) => {
                write!(f, "grey node {n} has fewer than two owners below")
            }
            TreeViolation::GreyCount {
                node,
                count,
                requests,
            } => write!(
                f,
                "grey node {node} counts {count}, {requests} requests below"
            ),
            TreeViolation::NotHeld { user, leaf } => {
                write!(f, "user {user} does not own its leaf {leaf}")
            }
            TreeViolation::NotMaximal {
                user,
                region,
                largest,
            } => write!(
                f,
                "user {user} owns {region}, the largest allowed is {largest}"
            ),
        }
    }
}

/// Promotion rule of `RecurseRemove` (slide 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Promotion {
    /// Literal slide 20: when the grey count of a path node `n` falls to 1, promote
    /// `w.sibling` if it is black, else `w` if it is black (`w` is the requested leaf);
    /// when it falls to 0 paint `n` white; continue down the path in every case.
    Slides,
    /// hilock: when the count of `n` falls to 1, latch the other child of `n` (the sibling
    /// of the path node); if it is black promote its owner to `n`. Otherwise the remaining
    /// owner is further down the path: keep `n` latched and look at the other child of
    /// every following path node until a black one is found (in the undo of a failed
    /// insert, also the black node the path runs into), then promote it to `n`. If none is
    /// found, the one left is an operation still in flight (a failed insert that has not
    /// undone its count yet) and `n` stays grey until that operation passes. A count that
    /// falls to 0 paints the node white. The operation ends there (the nodes below a black
    /// or white node are no longer read).
    PathSibling,
}

/// Undo of a failed insert (slides 16 and 21).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Undo {
    /// Literal slide 16: `RecurseRemove(root, w, u)`: every grey node on the path to `w`
    /// is decremented (with the promotion rule), whatever happened since the insert
    /// passed.
    Slides,
    /// hilock: a second pass from the root decrements only the nodes above the depth where
    /// the insert stopped — the ones it incremented; if a count falls to 1 the owner that
    /// made the insert fail (the black node at that depth) can be the one promoted.
    Counted,
}

/// Demotion and the failure of an insert (slides 15–16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Demotion {
    /// Literal slide 16: demote every black node met; when the requested leaf and the
    /// original request share the path, recurse, leaving the other child as it was; fail
    /// (and undo) only at a leaf that is not white.
    Slides,
    /// hilock: a same-path demotion paints the other child white (required: the model
    /// checker refutes the literal demotion); and fail at a black node whose original
    /// request is the requested leaf, where the paths would never split (saves the
    /// demotions and their undo; [`Demotion::PaintWhite`], without it, passes the same
    /// checks in `verify/tests/tree.rs`).
    Checked,
    /// The literal demotion with only the fix that the checker requires: a same-path
    /// demotion paints the other child white; the insert still demotes down to the leaf
    /// and fails there. Kept to show that the early failure of [`Demotion::Checked`] is
    /// an optimisation, not a correctness fix.
    PaintWhite,
}

/// Which reading of the slides' pseudocode the operations run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TreeVariant {
    /// Promotion rule.
    pub promotion: Promotion,
    /// Undo of a failed insert.
    pub undo: Undo,
    /// Demotion and failure.
    pub demotion: Demotion,
}

impl TreeVariant {
    /// hilock's algorithm.
    pub const HILOCK: TreeVariant = TreeVariant {
        promotion: Promotion::PathSibling,
        undo: Undo::Counted,
        demotion: Demotion::Checked,
    };
    /// The pseudocode of slides 16 and 20 as written.
    pub const SLIDES: TreeVariant = TreeVariant {
        promotion: Promotion::Slides,
        undo: Undo::Slides,
        demotion: Demotion::Slides,
    };
}

impl Default for TreeVariant {
    fn default() -> Self {
        TreeVariant::HILOCK
    }
}

/// A user's owned region: a logically black node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Region {
    /// The black node.
    pub node: TreeNodeId,
    /// Its owner.
    pub owner: UserId,
    /// Its original request.
    pub original: Option<TreeNodeId>,
}

/// The binary tree with colours, grey counts, owners, original requests and latches, for
/// at most `CAP` nodes, numbered in preorder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TreeLock<const CAP: usize> {
    nodes: heapless::Vec<Node, CAP>,
    latched: u32,
}

impl<const CAP: usize> Default for TreeLock<CAP> {
    fn default() -> Self {
        Self::new()
    }
}

fn capacity_error(needed: u64, cap: usize) -> TreeError {
    TreeError::OverCapacity {
        needed: u32::try_from(needed).unwrap_or(u32::MAX),
        capacity: u32::try_from(cap).unwrap_or(u32::MAX),
    }
}

/// The document tree of [`TreeLock::from_document`]: `parents[i]` is item `i`'s parent.
struct Doc<'a> {
    parents: &'a [Option<u32>],
}

impl Doc<'_> {
    fn children(&self, d: u32) -> u32 {
        let n = self.parents.iter().filter(|p| **p == Some(d)).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
    fn child(&self, d: u32, j: u32) -> Option<u32> {
        self.parents
            .iter()
            .enumerate()
            .filter(|(_, p)| **p == Some(d))
            .nth(j as usize)
            .and_then(|(i, _)| u32::try_from(i).ok())
    }
}

/// What to build for one binary node: an item (after following single-child chains) or
/// the children `from..` of an item.
#[derive(Clone, Copy)]
enum Shape {
    Complete { height: u32 },
    Item(u32),
    Group { item: u32, from: u32 },
}

impl<const CAP: usize> TreeLock<CAP> {
    /// An empty tree (no nodes; every operation on it reports [`TreeError::OutsideTree`]).
    pub const fn new() -> Self {
        TreeLock {
            nodes: heapless::Vec::new(),
            latched: 0,
        }
    }

    /// The complete binary tree of the given height (`2^(height+1) − 1` nodes, leaves at
    /// depth `height`), all white.
    pub fn complete(height: u32) -> Result<Self, TreeError> {
        let mut t = Self::new();
        t.set_complete(height)?;
        Ok(t)
    }

    /// Replaces the tree in place by [`TreeLock::complete`] (for large `CAP`, to avoid a
    /// second copy); on error the tree is left empty.
    pub fn set_complete(&mut self, height: u32) -> Result<(), TreeError> {
        self.nodes.clear();
        self.latched = 0;
        let needed = if height >= 62 {
            u64::MAX
        } else {
            (1u64 << (height + 1)) - 1
        };
        if needed > CAP as u64 || needed > u32::MAX as u64 {
            return Err(capacity_error(needed, CAP));
        }
        self.build(Shape::Complete { height }, &Doc { parents: &[] }, &mut [])
    }

    /// Maps a document tree to the binary tree (slide 6). Item `i`'s parent is
    /// `parents[i]`; item 0 is the root (`None`) and every other item lists a parent with a
    /// smaller index; children are ordered by index. A section with children `c1..ck`
    /// (k ≥ 2) becomes a binary node whose left child is `c1` and whose right child is
    /// `c2` if k = 2, else an artificial node for `c2..ck` built the same way; a section
    /// with one child maps to its child's node; items without children (content) are the
    /// leaves. `map[i]` receives the binary node of item `i`.
    pub fn from_document(
        parents: &[Option<u32>],
        map: &mut [TreeNodeId],
    ) -> Result<Self, TreeError> {
        let mut t = Self::new();
        if parents.is_empty() || u32::try_from(parents.len()).is_err() {
            return Err(TreeError::InvalidDocument { item: 0 });
        }
        for (i, p) in parents.iter().enumerate() {
            let ok = match (i, p) {
                (0, None) => true,
                (_, Some(p)) => (*p as usize) < i,
                _ => false,
            };
            if !ok {
                return Err(TreeError::InvalidDocument { item: i as u32 });
            }
        }
        if map.len() < parents.len() {
            return Err(TreeError::InvalidDocument {
                item: map.len() as u32,
            });
        }
        t.build(Shape::Item(0), &Doc { parents }, map)?;
        Ok(t)
    }

    /// Builds in preorder without recursion: after a leaf, walk up to the nearest
    /// ancestor whose right child is still missing.
    fn build(
        &mut self,
        root: Shape,
        doc: &Doc<'_>,
        map: &mut [TreeNodeId],
    ) -> Result<(), TreeError> {
        let mut next = Some((root, None::<TreeNodeId>, 0u32));
        while let Some((shape, parent, depth)) = next.take() {
            let id = TreeNodeId(self.nodes.len() as u32);
            // Follow single-child chains; decide leaf or internal.
            let (label, left) = match shape {
                Shape::Complete { height } => {
                    let left = (depth < height).then_some(Shape::Complete { height });
                    (Label::None, left)
                }
                Shape::Item(mut d) => {
                    let mut guard = 0usize;
                    while doc.children(d) == 1 {
                        if let Some(m) = map.get_mut(d as usize) {
                            *m = id;
                        }
                        d = doc
                            .child(d, 0)
                            .ok_or(TreeError::InvalidDocument { item: d })?;
                        guard += 1;
                        if guard > doc.parents.len() {
                            return Err(TreeError::InvalidDocument { item: d });
                        }
                    }
                    if let Some(m) = map.get_mut(d as usize) {
                        *m = id;
                    }
                    let k = doc.children(d);
                    (
                        Label::Item(d),
                        (k >= 2).then_some(Shape::Group { item: d, from: 0 }),
                    )
                }
                Shape::Group { item, from } => (Label::Rest { item, from }, Some(shape)),
            };
            let node = Node::fresh(parent, depth, label);
            if self.nodes.push(node).is_err() {
                let needed = self.nodes.len() as u64 + 1;
                self.nodes.clear();
                return Err(capacity_error(needed, CAP));
            }
            if let Some(group) = left {
                next = Some((self.left_shape(group, doc)?, Some(id), depth + 1));
                continue;
            }
            // A leaf: find the nearest ancestor still missing its right child.
            let mut x = id;
            while let Some(p) = self.node(x).ok().and_then(|n| n.parent) {
                if x.0 == p.0 + 1 {
                    let pd = self.node(p)?.depth;
                    let shape = self.right_shape(p, root, doc)?;
                    next = Some((shape, Some(p), pd + 1));
                    break;
                }
                x = p;
            }
        }
        // Subtree sizes: children come after their parent in preorder.
        for i in (1..self.nodes.len()).rev() {
            let (size, parent) = match self.nodes.get(i) {
                Some(n) => (n.size, n.parent),
                None => continue,
            };
            if let Some(p) = parent.and_then(|p| self.nodes.get_mut(p.0 as usize)) {
                p.size = p.size.saturating_add(size);
            }
        }
        Ok(())
    }

    fn left_shape(&self, group: Shape, doc: &Doc<'_>) -> Result<Shape, TreeError> {
        Ok(match group {
            Shape::Group { item, from } => Shape::Item(
                doc.child(item, from)
                    .ok_or(TreeError::InvalidDocument { item })?,
            ),
            other => other,
        })
    }

    fn right_shape(&self, p: TreeNodeId, root: Shape, doc: &Doc<'_>) -> Result<Shape, TreeError> {
        Ok(match self.node(p)?.label {
            Label::None => root,
            Label::Item(item) => Self::rest(doc, item, 0)?,
            Label::Rest { item, from } => Self::rest(doc, item, from)?,
        })
    }

    /// The right child of the binary node for children `from..` of `item`.
    fn rest(doc: &Doc<'_>, item: u32, from: u32) -> Result<Shape, TreeError> {
        let k = doc.children(item);
        if k < from + 2 {
            return Err(TreeError::InvalidDocument { item });
        }
        Ok(if k - from == 2 {
            Shape::Item(
                doc.child(item, from + 1)
                    .ok_or(TreeError::InvalidDocument { item })?,
            )
        } else {
            Shape::Group {
                item,
                from: from + 1,
            }
        })
    }

    // ----- structure --------------------------------------------------------------------

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    /// Whether the tree has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
    /// The root (`t0`), if the tree has nodes.
    pub fn root(&self) -> Option<TreeNodeId> {
        (!self.nodes.is_empty()).then_some(TreeNodeId(0))
    }
    /// A node.
    pub fn node(&self, n: TreeNodeId) -> Result<&Node, TreeError> {
        self.nodes
            .get(n.0 as usize)
            .ok_or(TreeError::OutsideTree(n))
    }
    fn node_mut(&mut self, n: TreeNodeId) -> Result<&mut Node, TreeError> {
        self.nodes
            .get_mut(n.0 as usize)
            .ok_or(TreeError::OutsideTree(n))
    }
    /// All nodes in preorder.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// Number of latches held by operations in progress.
    pub fn latched(&self) -> u32 {
        self.latched
    }
    /// The height: the largest leaf depth.
    pub fn height(&self) -> u32 {
        self.nodes.iter().map(|n| n.depth).max().unwrap_or(0)
    }
    /// Whether `w` is in the subtree of `n` (`n` itself included).
    pub fn contains(&self, n: TreeNodeId, w: TreeNodeId) -> bool {
        match self.node(n) {
            Ok(node) => w.0 >= n.0 && (w.0 as u64) < n.0 as u64 + node.size as u64,
            Err(_) => false,
        }
    }
    /// The left child (slide 10: direction 0).
    pub fn left(&self, n: TreeNodeId) -> Option<TreeNodeId> {
        let node = self.node(n).ok()?;
        (node.size > 1).then_some(TreeNodeId(n.0 + 1))
    }
    /// The right child (slide 10: direction 1).
    pub fn right(&self, n: TreeNodeId) -> Option<TreeNodeId> {
        let l = self.left(n)?;
        let ls = self.node(l).ok()?.size;
        let r = TreeNodeId(l.0.checked_add(ls)?);
        self.contains(n, r).then_some(r)
    }
    /// The sibling (slide 11), `None` at the root.
    pub fn sibling(&self, n: TreeNodeId) -> Option<TreeNodeId> {
        let p = self.node(n).ok()?.parent?;
        if n.0 == p.0 + 1 {
            self.right(p)
        } else {
            self.left(p)
        }
    }
    /// `NextInPath(n, w)` (slide 16): the child of `n` on the path to `w`; `None` if `w` is
    /// not strictly below `n`.
    pub fn next_in_path(&self, n: TreeNodeId, w: TreeNodeId) -> Option<TreeNodeId> {
        if w == n || !self.contains(n, w) {
            return None;
        }
        let l = self.left(n)?;
        if self.contains(l, w) {
            Some(l)
        } else {
            self.right(n)
        }
    }
    /// The child of `n` that is not on the path to `w`.
    pub fn other_child(&self, n: TreeNodeId, w: TreeNodeId) -> Option<TreeNodeId> {
        let c = self.next_in_path(n, w)?;
        if Some(c) == self.left(n) {
            self.right(n)
        } else {
            self.left(n)
        }
    }
    /// The handshake order of one top-down pass (slide 13): the nodes from the root down
    /// to `w`, `w` included (empty if `w` is not in the tree).
    pub fn path(&self, w: TreeNodeId) -> Path<'_, CAP> {
        Path {
            tree: self,
            next: if self.contains(TreeNodeId(0), w) {
                Some(TreeNodeId(0))
            } else {
                None
            },
            target: w,
        }
    }
    /// Slide 10's path name of a node: its directions from the root, left = 0, right = 1,
    /// as `(bits, length)` with the first direction in the highest of the `length` bits.
    /// `None` if the node is not in the tree or deeper than 64.
    pub fn path_bits(&self, w: TreeNodeId) -> Option<(u64, u32)> {
        let depth = self.node(w).ok()?.depth;
        if depth > 64 {
            return None;
        }
        let mut bits = 0u64;
        let mut n = TreeNodeId(0);
        while n != w {
            let c = self.next_in_path(n, w)?;
            bits = (bits << 1) | u64::from(Some(c) != self.left(n));
            n = c;
        }
        Some((bits, depth))
    }
    /// The node named by a slide-10 path such as `"1011"` (`""` is the root).
    pub fn at(&self, path: &str) -> Result<TreeNodeId, TreeError> {
        let mut n = self.root().ok_or(TreeError::OutsideTree(TreeNodeId(0)))?;
        for c in path.bytes() {
            let next = match c {
                b'0' => self.left(n),
                b'1' => self.right(n),
                _ => None,
            };
            n = next.ok_or(TreeError::OutsideTree(n))?;
        }
        Ok(n)
    }
    /// The leftmost leaf below `n`.
    pub fn first_leaf(&self, n: TreeNodeId) -> Option<TreeNodeId> {
        let mut n = n;
        self.node(n).ok()?;
        while let Some(l) = self.left(n) {
            n = l;
        }
        Some(n)
    }
    /// The leaves in preorder.
    pub fn leaves(&self) -> impl Iterator<Item = TreeNodeId> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.size == 1)
            .map(|(i, _)| TreeNodeId(i as u32))
    }

    // ----- logical state ----------------------------------------------------------------

    /// The region that holds `w` (slide 16's `w.owner`, read logically): the first
    /// non-grey node on the path from the root, if it is black.
    pub fn holder(&self, w: TreeNodeId) -> Option<Region> {
        let mut n = self.root()?;
        if !self.contains(n, w) {
            return None;
        }
        loop {
            let node = self.node(n).ok()?;
            match node.color {
                Color::Black => {
                    return Some(Region {
                        node: n,
                        owner: node.owner?,
                        original: node.original,
                    })
                }
                Color::White => return None,
                Color::Grey => n = self.next_in_path(n, w)?,
            }
        }
    }

    /// The logically black nodes (the owned regions), in preorder.
    pub fn regions(&self) -> Regions<'_, CAP> {
        Regions { tree: self, at: 0 }
    }

    /// The naive reference: the largest subtree on the path to `leaf` that holds no other
    /// request of `requests` (slide 7), found by counting requests node by node.
    pub fn largest_region(
        &self,
        requests: &[(UserId, TreeNodeId)],
        leaf: TreeNodeId,
    ) -> Option<TreeNodeId> {
        let mut n = self.root()?;
        loop {
            if !self.contains(n, leaf) {
                return None;
            }
            if self.requests_in(requests, n) <= 1 {
                return Some(n);
            }
            n = self.next_in_path(n, leaf)?;
        }
    }

    fn requests_in(&self, requests: &[(UserId, TreeNodeId)], n: TreeNodeId) -> u32 {
        requests
            .iter()
            .filter(|(_, l)| self.contains(n, *l))
            .count() as u32
    }

    /// Checks the logical state against a naive reference built from the set of requests
    /// `(user, leaf)` that hold (slides 12 and 7): every logically white node has no
    /// request inside; every logically black node holds exactly one, its owner's, at its
    /// original request; every logically grey node holds at least two and counts them;
    /// every request's leaf is owned by its user (exclusivity) in the largest subtree that
    /// holds no other request (maximality); and no latch is held.
    pub fn audit(&self, requests: &[(UserId, TreeNodeId)]) -> Result<(), TreeViolation> {
        for (i, &(_, l)) in requests.iter().enumerate() {
            if !self.node(l).map(|n| n.is_leaf()).unwrap_or(false) {
                return Err(TreeViolation::BadRequest(l));
            }
            if requests[..i].iter().any(|(_, x)| *x == l) {
                return Err(TreeViolation::DuplicateRequest(l));
            }
        }
        if let Some(i) = self.nodes.iter().position(|n| n.latch.is_some()) {
            return Err(TreeViolation::Latched(TreeNodeId(i as u32)));
        }
        let mut i = 0usize;
        while i < self.nodes.len() {
            let id = TreeNodeId(i as u32);
            let Some(&node) = self.nodes.get(i) else {
                break;
            };
            let inside = self.requests_in(requests, id);
            match node.color {
                Color::White => {
                    if inside != 0 {
                        return Err(TreeViolation::WhiteOccupied(id));
                    }
                    i += node.size as usize;
                }
                Color::Black => {
                    let sole = requests
                        .iter()
                        .find(|(_, l)| self.contains(id, *l))
                        .map(|&(u, l)| node.owner == Some(u) && node.original == Some(l))
                        .unwrap_or(false);
                    if inside != 1 || !sole {
                        return Err(TreeViolation::BlackNotSole(id));
                    }
                    i += node.size as usize;
                }
                Color::Grey => {
                    if inside < 2 {
                        return Err(TreeViolation::GreyUnderTwo(id));
                    }
                    if node.grey != inside {
                        return Err(TreeViolation::GreyCount {
                            node: id,
                            count: node.grey,
                            requests: inside,
                        });
                    }
                    i += 1;
                }
            }
        }
        for &(user, leaf) in requests {
            let held = self.holder(leaf);
            match held {
                Some(r) if r.owner == user => {
                    if let Some(largest) = self.largest_region(requests, leaf) {
                        if largest != r.node {
                            return Err(TreeViolation::NotMaximal {
                                user,
                                region: r.node,
                                largest,
                            });
                        }
                    }
                }
                _ => return Err(TreeViolation::NotHeld { user, leaf }),
            }
        }
        Ok(())
    }

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
        let mut op = Op::insert(self, w, u, variant)?;
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
        let mut op = Op::remove(self, w, u, variant)?;
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
}

/// Iterator of [`TreeLock::path`].
#[derive(Clone, Debug)]
pub struct Path<'a, const CAP: usize> {
    tree: &'a TreeLock<CAP>,
    next: Option<TreeNodeId>,
    target: TreeNodeId,
}

impl<const CAP: usize> Iterator for Path<'_, CAP> {
    type Item = TreeNodeId;
    fn next(&mut self) -> Option<TreeNodeId> {
        let n = self.next?;
        self.next = self.tree.next_in_path(n, self.target);
        Some(n)
    }
}

/// Iterator of [`TreeLock::regions`].
#[derive(Clone, Debug)]
pub struct Regions<'a, const CAP: usize> {
    tree: &'a TreeLock<CAP>,
    at: usize,
}

impl<const CAP: usize> Iterator for Regions<'_, CAP> {
    type Item = Region;
    fn next(&mut self) -> Option<Region> {
        while let Some(node) = self.tree.nodes.get(self.at) {
            let id = TreeNodeId(self.at as u32);
            match node.color {
                Color::Grey => self.at += 1,
                Color::White => self.at += node.size.max(1) as usize,
                Color::Black => {
                    self.at += node.size.max(1) as usize;
                    if let Some(owner) = node.owner {
                        return Some(Region {
                            node: id,
                            owner,
                            original: node.original,
                        });
                    }
                }
            }
        }
        None
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
    pub fn insert<const CAP: usize>(
        tree: &TreeLock<CAP>,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Op, TreeError> {
        if !tree.node(w)?.is_leaf() {
            return Err(TreeError::NotALeaf(w));
        }
        Ok(Op::new(OpKind::Insert, Phase::Insert, w, u, variant))
    }

    /// A remove of user `u` from the region holding leaf `w` (slide 20; the guard
    /// `w.owner = u` is checked here).
    pub fn remove<const CAP: usize>(
        tree: &TreeLock<CAP>,
        w: TreeNodeId,
        u: UserId,
        variant: TreeVariant,
    ) -> Result<Op, TreeError> {
        if !tree.node(w)?.is_leaf() {
            return Err(TreeError::NotALeaf(w));
        }
        match tree.holder(w) {
            Some(r) if r.owner == u => Ok(Op::new(OpKind::Remove, Phase::Remove, w, u, variant)),
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
            // our own latch: only an operation of the same user running concurrently
            // would get here
            self.abort(tree);
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
