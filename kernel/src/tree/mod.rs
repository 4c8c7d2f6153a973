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

mod build;
mod error;
mod ops;
mod query;
mod variant;

pub use error::{TreeError, TreeViolation};
pub use ops::{Op, OpKind, Outcome, Phase, Progress, Step};
pub use query::{Path, Regions};
pub use variant::{Demotion, Promotion, TreeVariant, Undo};

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
    /// The users with an [`Op`] in progress, in ascending order: one operation per user at
    /// a time, because a latch names its user (slide 13) and two operations of one user
    /// could not tell each other's latches from their own.
    running: heapless::Vec<UserId, CAP>,
}

impl<const CAP: usize> Default for TreeLock<CAP> {
    fn default() -> Self {
        Self::new()
    }
}
