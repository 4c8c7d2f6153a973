//! Why the tree rejects an input, and what its audit finds.

use super::{TreeNodeId, UserId};
use core::fmt;

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
    /// A whole-operation call while an [`Op`](super::Op) holds latches (`node` is latched by
    /// `holder`); finish the stepped operations first.
    Busy {
        /// A latched node.
        node: TreeNodeId,
        /// Its holder.
        holder: UserId,
    },
    /// [`Op::insert`](super::Op::insert) or [`Op::remove`](super::Op::remove) (or a
    /// whole operation) for a user whose earlier operation has not finished: a user runs
    /// one operation at a time. Nothing changed.
    OperationInProgress {
        /// The user.
        user: UserId,
    },
    /// More operations in progress at once than the tree's capacity `CAP`. Nothing changed.
    TooManyOperations {
        /// `CAP`.
        capacity: u32,
    },
    /// The tree's state contradicts the colouring (e.g. a grey leaf or a grey count that
    /// would fall below zero) at this node. Only a broken variant gets here.
    Inconsistent(TreeNodeId),
    /// [`Op::step`](super::Op::step) on an operation that has finished.
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
            TreeError::OperationInProgress { user } => write!(
                f,
                "an operation of {user} is in progress: a user runs one operation at a time"
            ),
            TreeError::TooManyOperations { capacity } => {
                write!(f, "more than {capacity} operations in progress at once")
            }
            TreeError::Inconsistent(n) => write!(f, "inconsistent colouring at node {n}"),
            TreeError::Finished => write!(f, "the operation has finished"),
        }
    }
}

/// A violation of the colour invariants, exclusivity or maximality found by
/// [`TreeLock::audit`](super::TreeLock::audit).
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
