//! hilock's reading and the literal slides: the three places they differ.

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
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
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
