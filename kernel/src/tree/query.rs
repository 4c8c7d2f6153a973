//! Structure, navigation and the logical state: holders, regions and the audit.

use super::{Color, Node, Region, TreeError, TreeLock, TreeNodeId, TreeViolation, UserId};

impl<const CAP: usize> TreeLock<CAP> {
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
    pub(super) fn node_mut(&mut self, n: TreeNodeId) -> Result<&mut Node, TreeError> {
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
