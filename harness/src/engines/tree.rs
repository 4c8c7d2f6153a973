//! The tree engine (Preston & Prasad's document tree, `kernel/src/tree/`) as a [`Protocol`]
//! site, so that the one harness routes its requests and checks it.
//!
//! # What a site is
//! The slides lock a document that one place keeps: their operations take node latches in
//! its memory (slide 13), and editors reach it over the network. So node 0 keeps the tree
//! ([`TreeLock`]) and nodes `1..` are the users `u1, u2, …` (`UserId(node)`). The lock
//! `LockId(i)` is the tree's `i`-th leaf ([`TreeLock::leaves`]), a document item a user asks
//! for (slide 5).
//!
//! # The driving contract
//! - `TryAcquire { lock, mode: W }` at a user sends `InsertUser` to node 0. The insert never
//!   waits (slide 16: it fails, and undoes its grey counts, when another user holds the
//!   leaf), so the answer is `Granted` (the user owns the largest subtree that holds no
//!   other request, slide 7) or `WouldBlock`. A user owns its region alone, so W is the one
//!   mode; a waiting `Acquire` is not an operation of the slides
//!   ([`KernelError::Unsupported`]). A user has one request at a time (slide 14: user
//!   `u_i` and its request `w_i`): while it holds a leaf it asks for no other
//!   ([`KernelError::AlreadyHeld`] names the one it holds).
//! - `Release { lock }` sends `RemoveUser` (slide 20, with promotion): the user stops using
//!   the leaf at once, node 0 frees it when the message arrives.
//! - Node 0 runs each operation whole ([`TreeLock::insert_user_with`]), one message at a
//!   time; the interleaving of operations latch by latch is the tree model's subject
//!   (`models/src/tree.rs`). The tree is quiescent between messages, so the site's
//!   invariants audit it in every state against the requests it granted
//!   ([`TreeLock::audit`]: colours, grey counts, every region the largest that holds no
//!   other request).
//! - Channels are FIFO (the harness's default): a `RemoveUser` overtaken by the same
//!   user's next `InsertUser` of that leaf would remove the new hold.

use super::adapter::all_or_nothing;
use crate::properties::{Invariants, P1};
use crate::{Cluster, Violation};
use hilock_kernel::tree::{Outcome, TreeError, TreeLock, TreeNodeId, TreeVariant, UserId};
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink,
};
use std::sync::Arc;

/// Nodes of the binary tree.
pub const CAP: usize = 64;

/// A message between a user and node 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeMsg {
    /// `InsertUser(w, u)` for leaf `lock`.
    Insert(LockId),
    /// `RemoveUser(w, u)` for leaf `lock`.
    Remove(LockId),
    /// The user owns a region holding leaf `lock`.
    Granted(LockId),
    /// Another user holds leaf `lock`; nothing changed.
    Failed(LockId),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    Tree {
        tree: Box<TreeLock<CAP>>,
        /// The requests granted and not removed: (user, leaf).
        requests: Vec<(UserId, TreeNodeId)>,
        variant: TreeVariant,
    },
    User {
        held: Vec<LockId>,
        trying: Option<LockId>,
    },
}

/// Node 0 (the tree) or a user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TreeSite {
    id: NodeId,
    leaves: Arc<[TreeNodeId]>,
    role: Role,
}

impl TreeSite {
    /// Node 0 with `tree` (the rules of `variant`) and `users` user nodes.
    pub fn cluster(
        tree: TreeLock<CAP>,
        variant: TreeVariant,
        users: u16,
    ) -> Result<Vec<Self>, TreeError> {
        let leaves: Arc<[TreeNodeId]> = tree.leaves().collect::<Vec<_>>().into();
        if leaves.is_empty() {
            return Err(TreeError::OutsideTree(TreeNodeId(0)));
        }
        let mut sites = vec![TreeSite {
            id: NodeId(0),
            leaves: leaves.clone(),
            role: Role::Tree {
                tree: Box::new(tree),
                requests: Vec::new(),
                variant,
            },
        }];
        for u in 1..=users {
            sites.push(TreeSite {
                id: NodeId(u),
                leaves: leaves.clone(),
                role: Role::User {
                    held: Vec::new(),
                    trying: None,
                },
            });
        }
        Ok(sites)
    }

    /// The tree (node 0 only).
    pub fn tree(&self) -> Option<&TreeLock<CAP>> {
        match &self.role {
            Role::Tree { tree, .. } => Some(tree),
            Role::User { .. } => None,
        }
    }

    /// The leaf of `lock`.
    pub fn leaf(&self, lock: LockId) -> Result<TreeNodeId, KernelError> {
        self.leaves
            .get(lock.0 as usize)
            .copied()
            .ok_or(KernelError::UnknownLock(lock))
    }

    fn apply(
        &mut self,
        input: Input<'_, TreeMsg>,
        outs: &mut Vec<Output<TreeMsg>>,
    ) -> Result<(), KernelError> {
        let me = self.id;
        let lock = match input {
            Input::Acquire { lock, .. }
            | Input::TryAcquire { lock, .. }
            | Input::Release { lock }
            | Input::Cancel { lock }
            | Input::Downgrade { lock, .. }
            | Input::Convert { lock, .. }
            | Input::SetValue { lock, .. }
            | Input::Upgrade { lock } => lock,
            Input::SetPriority { .. } => return Err(KernelError::Unsupported(LockId(0))),
            Input::Deliver { msg, .. } => <Self as Protocol>::lock_of(msg),
        };
        let leaf = self.leaf(lock)?;
        match (&mut self.role, input) {
            (Role::User { held, trying }, Input::TryAcquire { mode, .. }) => {
                if mode != Mode::W {
                    return Err(KernelError::InvalidMode);
                }
                if let Some(h) = held.first() {
                    // One request per user (slide 14: user u_i and its request w_i).
                    return Err(KernelError::AlreadyHeld(*h));
                }
                if trying.is_some() {
                    return Err(KernelError::AlreadyPending(lock));
                }
                *trying = Some(lock);
                outs.push(Output::Send {
                    to: NodeId(0),
                    msg: TreeMsg::Insert(lock),
                });
                Ok(())
            }
            (Role::User { held, .. }, Input::Release { .. }) => {
                let Some(i) = held.iter().position(|l| *l == lock) else {
                    return Err(KernelError::NotHeld(lock));
                };
                held.remove(i);
                outs.push(Output::Send {
                    to: NodeId(0),
                    msg: TreeMsg::Remove(lock),
                });
                Ok(())
            }
            (Role::User { held, trying }, Input::Deliver { from, msg }) => {
                if from != NodeId(0) || *trying != Some(lock) {
                    return Err(KernelError::UnknownNode(from));
                }
                *trying = None;
                match *msg {
                    TreeMsg::Granted(_) => {
                        held.push(lock);
                        outs.push(Output::Granted {
                            lock,
                            mode: Mode::W,
                        });
                    }
                    TreeMsg::Failed(_) => outs.push(Output::WouldBlock {
                        lock,
                        mode: Mode::W,
                    }),
                    TreeMsg::Insert(_) | TreeMsg::Remove(_) => {
                        return Err(KernelError::UnknownNode(from))
                    }
                }
                Ok(())
            }
            (
                Role::Tree {
                    tree,
                    requests,
                    variant,
                },
                Input::Deliver { from, msg },
            ) => {
                let u = UserId(from.0);
                if from == me {
                    return Err(KernelError::UnknownNode(from));
                }
                match *msg {
                    TreeMsg::Insert(_) => {
                        match tree.insert_user_with(leaf, u, *variant).map_err(terr)? {
                            Outcome::Granted { .. } | Outcome::AlreadyHeld { .. } => {
                                if !requests.contains(&(u, leaf)) {
                                    requests.push((u, leaf));
                                }
                                outs.push(Output::Send {
                                    to: from,
                                    msg: TreeMsg::Granted(lock),
                                });
                            }
                            _ => outs.push(Output::Send {
                                to: from,
                                msg: TreeMsg::Failed(lock),
                            }),
                        }
                    }
                    TreeMsg::Remove(_) => {
                        tree.remove_user_with(leaf, u, *variant).map_err(terr)?;
                        requests.retain(|r| *r != (u, leaf));
                    }
                    TreeMsg::Granted(_) | TreeMsg::Failed(_) => {
                        return Err(KernelError::UnknownNode(from))
                    }
                }
                Ok(())
            }
            (_, Input::Cancel { .. }) => Err(KernelError::CancelUnsupported(lock)),
            (_, Input::Downgrade { .. }) => Err(KernelError::DowngradeUnsupported(lock)),
            (_, Input::Convert { .. }) => Err(KernelError::ConvertUnsupported(lock)),
            (_, Input::SetValue { .. }) => Err(KernelError::ValueUnsupported(lock)),
            _ => Err(KernelError::Unsupported(lock)),
        }
    }
}

/// A tree error as the kernel's (only a broken variant meets one).
fn terr(e: TreeError) -> KernelError {
    match e {
        TreeError::NotOwner { node, .. }
        | TreeError::OutsideTree(node)
        | TreeError::NotALeaf(node) => KernelError::NotHeld(LockId(node.0 as u16)),
        _ => KernelError::Unsupported(LockId(u16::MAX)),
    }
}

impl Protocol for TreeSite {
    type Msg = TreeMsg;
    const MAX_OUTPUTS: usize = 1;

    const TOKENS: bool = false;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<TreeMsg>>>(
        &mut self,
        input: Input<'_, TreeMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        all_or_nothing(self, out, Self::MAX_OUTPUTS, |site, outs| {
            site.apply(input, outs)
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        self.leaf(lock)?;
        Ok(match &self.role {
            Role::User { held, .. } if held.contains(&lock) => Mode::W,
            _ => Mode::Phi,
        })
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.leaf(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.leaf(lock)?;
        Ok(matches!(&self.role, Role::User { trying: Some(l), .. } if *l == lock))
    }

    fn kind(msg: &TreeMsg) -> MsgKind {
        match msg {
            TreeMsg::Insert(_) => MsgKind::Request,
            TreeMsg::Remove(_) => MsgKind::Release,
            TreeMsg::Granted(_) => MsgKind::Grant,
            TreeMsg::Failed(_) => MsgKind::Busy,
        }
    }

    fn lock_of(msg: &TreeMsg) -> LockId {
        match *msg {
            TreeMsg::Insert(l) | TreeMsg::Remove(l) | TreeMsg::Granted(l) | TreeMsg::Failed(l) => l,
        }
    }
}

impl Invariants for TreeSite {
    /// The tree passes its audit ([`TreeLock::audit`]), and every leaf a user holds lies, in the tree's logical state, in a region that user
    /// owns (slide 12: a black node's owner owns its whole subtree); with P1 this is the
    /// slides' exclusion as the users see it.
    fn invariants(c: &Cluster<Self>) -> Result<(), Violation> {
        let Role::Tree { tree, requests, .. } = &c.site(NodeId(0)).role else {
            return Ok(());
        };
        if let Err(v) = tree.audit(requests) {
            return Err(Violation {
                property: P1,
                detail: format!("the tree fails its audit: {v:?}"),
            });
        }
        for (n, s) in c.sites().enumerate().skip(1) {
            if let Role::User { held, .. } = &s.role {
                for l in held {
                    let leaf = s.leaves[l.0 as usize];
                    let owner = tree.holder(leaf).map(|r| r.owner);
                    if owner != Some(UserId(n as u16)) {
                        return Err(Violation {
                            property: P1,
                            detail: format!(
                                "n{n} holds {leaf}, whose region the tree gives to {owner:?}"
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}
