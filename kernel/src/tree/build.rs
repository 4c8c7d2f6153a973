//! Building the binary tree: complete trees and the mapping of a document tree (slide 6).

use super::{Label, Node, TreeError, TreeLock, TreeNodeId};

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
            running: heapless::Vec::new(),
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
        self.running.clear();
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
}
