//! Preston & Prasad tree locking as a Stateright model: users issue concurrent inserts and
//! removes on a complete binary tree, and the model interleaves their operations one
//! node latch at a time (the top-down handshake of slide 13). The model only starts
//! kernel operations ([`hilock_kernel::tree::Op::insert`], [`hilock_kernel::tree::Op::remove`])
//! and calls [`hilock_kernel::tree::Op::step`]; no rule is re-implemented here.
//!
//! # State
//! The kernel tree (colours, grey counts, owners, original requests, latches), per user
//! its operation in progress, the leaf it holds (its insert was granted and its remove has
//! not finished) and how many rounds it has done, and the ghost record of what the last
//! step did (for the `sometimes` properties). A user's script is `rounds` rounds of
//! "insert at one of its leaves, then remove" (a failed insert ends the round). Every
//! step takes a latch and every operation takes finitely many, so the state graph is
//! finite and acyclic.
//!
//! # Properties
//! - `P8 tree colours and exclusivity`: in every state, a user whose insert was granted
//!   (and who is not removing) holds its leaf, and every owned region (logically black
//!   node) belongs to a user that holds a request inside it, at the region's original
//!   request; no remove finds its region gone; and whenever no operation is in progress,
//!   [`hilock_kernel::tree::TreeLock::audit`] against the held requests passes: white ⇒ no
//!   request inside, black ⇒ exactly its owner's, grey ⇒ at least two and counted,
//!   exclusivity and maximality.
//! - `no kernel error`: the kernel accepted every operation and step.
//! - `one operation per user at a time`: a user whose operation is in progress may start
//!   another (the model offers, at every such state, an insert of the leaf its operation
//!   is for: a client that repeats); the kernel refuses it
//!   ([`hilock_kernel::tree::TreeError::OperationInProgress`]) and the tree stays as it
//!   was. A latch names its user (slide 13), so a second operation of the user could not
//!   tell the first's latches from its own. The refusal changes nothing, so it adds no
//!   state.
//! - `no deadlock`: whenever an operation is in progress, one of them can take its next
//!   latch.
//! - `every operation completes`: in a state with no enabled action every user has
//!   finished its script (no operation left in progress). Since every maximal path ends in
//!   such a state, this is "every operation eventually completes" without fairness.
//! - `sometimes`: a demotion, a promotion, a promotion of an owner found below the node
//!   (hilock's look-down), a failed insert undone, two operations holding latches at once,
//!   every script completed.

use crate::check::Counterexample;
use hilock_kernel::tree::{
    Color, Op, OpKind, Outcome, Step, TreeError, TreeLock, TreeNodeId, TreeVariant, UserId,
};
use serde::Serialize;
use stateright::{Checker, Model, Path, Property};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

/// Node capacity of the model's trees (height ≤ 4).
pub const MCAP: usize = 31;
/// The kernel tree the model drives.
pub type MTree = TreeLock<MCAP>;

/// Property names.
pub const P8: &str = "P8 tree colours and exclusivity";
/// Property name.
pub const NO_ERROR: &str = "no kernel error";
/// Property name.
pub const NO_DEADLOCK: &str = "no deadlock";
/// Property name.
pub const COMPLETES: &str = "every operation completes";
/// Property name.
pub const ONE_OP: &str = "one operation per user at a time";
/// The `always` properties.
pub const SAFETY: [&str; 5] = [P8, NO_ERROR, NO_DEADLOCK, COMPLETES, ONE_OP];
/// The `sometimes` properties.
pub const REACHED: [&str; 6] = [
    "demotion",
    "promotion",
    "promotion of an owner found below",
    "failed insert undone",
    "two operations hold latches",
    "every script completes",
];

/// A configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TreeModel {
    /// Name (for reports).
    pub name: String,
    /// Height of the complete tree.
    pub height: u32,
    /// Per user: the leaves its inserts choose from.
    pub choices: Vec<Vec<TreeNodeId>>,
    /// Rounds (insert, then remove) per user.
    pub rounds: u8,
    /// Algorithm variant.
    pub variant: TreeVariant,
    tree: MTree,
}

impl TreeModel {
    /// A configuration on the complete tree of `height`; `choices[u]` names user `u`'s
    /// leaves by their slide-10 paths (`"010"`), or is `["*"]` for every leaf.
    pub fn new(
        name: &str,
        height: u32,
        choices: &[&[&str]],
        rounds: u8,
        variant: TreeVariant,
    ) -> Result<TreeModel, TreeError> {
        let tree = MTree::complete(height)?;
        let mut cs = Vec::new();
        for c in choices {
            let mut v = Vec::new();
            for p in c.iter() {
                if *p == "*" {
                    v.extend(tree.leaves());
                } else {
                    let n = tree.at(p)?;
                    if !tree.node(n)?.is_leaf() {
                        return Err(TreeError::NotALeaf(n));
                    }
                    v.push(n);
                }
            }
            cs.push(v);
        }
        Ok(TreeModel {
            name: name.to_string(),
            height,
            choices: cs,
            rounds,
            variant,
            tree,
        })
    }

    /// The same configuration with another variant.
    pub fn with_variant(mut self, variant: TreeVariant, name: &str) -> TreeModel {
        self.variant = variant;
        self.name = name.to_string();
        self
    }

    /// The tree the model starts from.
    pub fn tree(&self) -> &MTree {
        &self.tree
    }

    fn users(&self) -> usize {
        self.choices.len()
    }

    /// The requests held in a state: `(user, leaf)` of every user holding a leaf.
    pub fn requests(st: &TreeState) -> Vec<(UserId, TreeNodeId)> {
        st.users
            .iter()
            .enumerate()
            .filter_map(|(u, us)| us.held.map(|l| (UserId(u as u16), l)))
            .collect()
    }

    /// P8 on one state: `Err` says what is violated.
    pub fn p8(&self, st: &TreeState) -> Result<(), String> {
        if let Some(u) = st.vanished {
            return Err(format!(
                "u{u}'s remove found no region of its own on its path"
            ));
        }
        let t = &st.tree;
        for (u, us) in st.users.iter().enumerate() {
            if let (Some(l), None) = (us.held, us.op) {
                match t.holder(l) {
                    Some(r) if r.owner == UserId(u as u16) => {}
                    other => {
                        return Err(format!(
                            "u{u} was granted {} but {}",
                            name(t, l),
                            other.map_or("nobody holds it".to_string(), |r| format!(
                                "it is held by {} (region {})",
                                r.owner,
                                name(t, r.node)
                            ))
                        ))
                    }
                }
            }
        }
        for r in t.regions() {
            let held = st.users.get(r.owner.0 as usize).and_then(|us| us.held);
            let ok = held.is_some_and(|l| t.contains(r.node, l) && r.original == Some(l));
            if !ok {
                return Err(format!(
                    "region {} belongs to {}, {} ({})",
                    name(t, r.node),
                    r.owner,
                    held.map_or("who requests no leaf".to_string(), |l| format!(
                        "whose request is {}",
                        name(t, l)
                    )),
                    r.original
                        .map_or("no original request".to_string(), |l| format!(
                            "original request {}",
                            name(t, l)
                        ))
                ));
            }
        }
        if st.users.iter().all(|us| us.op.is_none()) {
            t.audit(&Self::requests(st))
                .map_err(|v| format!("quiescent tree: {}", describe_violation(t, v)))?;
        }
        Ok(())
    }

    fn deadlocked(&self, st: &TreeState) -> bool {
        let busy: Vec<&Op> = st.users.iter().filter_map(|u| u.op.as_ref()).collect();
        !busy.is_empty()
            && busy.iter().all(|op| {
                op.want()
                    .and_then(|w| st.tree.node(w).ok())
                    .is_none_or(|n| n.latch().is_some())
            })
    }

    fn terminal(&self, st: &TreeState) -> bool {
        let mut a = Vec::new();
        self.actions(st, &mut a);
        a.is_empty()
    }

    fn finished(&self, st: &TreeState) -> bool {
        st.users
            .iter()
            .all(|u| u.op.is_none() && u.held.is_none() && u.round >= self.rounds)
    }

    /// Runs the exhaustive check (BFS, no depth limit); each counterexample is the checker's
    /// run cut at its first violation.
    pub fn check(&self) -> TreeReport {
        self.check_with(Counterexample::Cut)
    }

    /// [`Self::check`] with each counterexample a shortest run (`hilock check`).
    pub fn check_shortest(&self) -> TreeReport {
        self.check_with(Counterexample::Shortest)
    }

    fn check_with(&self, which: Counterexample) -> TreeReport {
        let t = Instant::now();
        let checker = self.clone().checker().spawn_bfs().join();
        let mut properties = Vec::new();
        for p in SAFETY {
            let path = checker.discovery(p);
            properties.push(TreePropertyReport {
                name: p.to_string(),
                kind: "always".into(),
                holds: path.is_none(),
                counterexample: path.map(|path| {
                    let run = match which {
                        Counterexample::Cut => crate::check::first_failure(self, p, &path),
                        Counterexample::Shortest => {
                            crate::check::shortest_counterexample(self, p, &path)
                        }
                    };
                    self.trace(p, &run)
                }),
            });
        }
        for p in REACHED {
            properties.push(TreePropertyReport {
                name: p.to_string(),
                kind: "sometimes".into(),
                holds: checker.discovery(p).is_some(),
                counterexample: None,
            });
        }
        TreeReport {
            config: self.name.clone(),
            states: checker.state_count(),
            unique_states: checker.unique_state_count(),
            max_depth: checker.max_depth(),
            // The whole check: the search and the counterexamples' traces.
            elapsed: t.elapsed(),
            properties,
        }
    }

    /// A counterexample path as a readable trace.
    pub fn trace(&self, property: &str, path: &Path<TreeState, TreeAction>) -> TreeTrace {
        let states = path.clone().into_states();
        let actions = path.clone().into_actions();
        let mut steps = Vec::new();
        for (i, a) in actions.iter().enumerate() {
            let Some(st) = states.get(i + 1) else { break };
            steps.push(TreeTraceStep {
                index: i,
                action: self.describe(&states[i], a),
                effects: st.last.describe(&st.tree),
                tree: snapshot(&st.tree),
            });
        }
        let last = states.last().cloned();
        let violation = match (property, last) {
            (P8, Some(st)) => self.p8(&st).err().unwrap_or_default(),
            (NO_ERROR, Some(st)) => st
                .error
                .map(|e| describe_error(&st.tree, e))
                .unwrap_or_default(),
            (NO_DEADLOCK, _) => "every operation in progress waits for a latch".into(),
            (COMPLETES, _) => "no action is enabled but an operation has not finished".into(),
            _ => String::new(),
        };
        TreeTrace {
            format: "hilock-tree-trace/1".into(),
            model: self.name.clone(),
            height: self.height,
            variant: self.variant,
            property: property.to_string(),
            violation,
            note: String::new(),
            steps,
        }
    }

    /// Whether `a` in `before` is the recorded step `step` of a `hilock-tree-trace/1`
    /// trace: the same action text and the same tree afterwards.
    pub fn fits_step(&self, before: &TreeState, a: &TreeAction, step: &serde_json::Value) -> bool {
        if step["action"].as_str() != Some(self.describe(before, a).as_str()) {
            return false;
        }
        let Some(next) = self.next_state(before, *a) else {
            return false;
        };
        serde_json::to_value(snapshot(&next.tree)).ok().as_ref() == step.get("tree")
    }

    /// One action in words.
    pub fn describe(&self, before: &TreeState, a: &TreeAction) -> String {
        let t = &before.tree;
        match *a {
            TreeAction::Insert { user, leaf } => {
                format!("u{user}: InsertUser({}) starts", name(t, leaf))
            }
            TreeAction::Remove { user } => {
                let l = before.users[user as usize].held;
                format!(
                    "u{user}: RemoveUser({}) starts",
                    l.map(|l| name(t, l)).unwrap_or_default()
                )
            }
            TreeAction::Step { user } => {
                let op = before.users[user as usize].op;
                let what = match op {
                    Some(op) if op.undoing() => "undo of InsertUser",
                    Some(op) if op.kind() == OpKind::Insert => "InsertUser",
                    _ => "RemoveUser",
                };
                format!(
                    "u{user}: {what} latches {}",
                    op.and_then(|o| o.want())
                        .map(|n| name(t, n))
                        .unwrap_or_default()
                )
            }
            TreeAction::Again { user, leaf } => {
                format!(
                    "u{user}: InsertUser({}) again while its operation runs",
                    name(t, leaf)
                )
            }
        }
    }
}

/// The slide-10 name of a node: `t` for the root, else its path (`t010`).
pub fn name<const CAP: usize>(t: &TreeLock<CAP>, n: TreeNodeId) -> String {
    match t.path_bits(n) {
        Some((bits, len)) => {
            let mut s = String::from("t");
            for i in (0..len).rev() {
                s.push(if bits >> i & 1 == 1 { '1' } else { '0' });
            }
            s
        }
        None => format!("{n}"),
    }
}

fn describe_violation<const CAP: usize>(
    t: &TreeLock<CAP>,
    v: hilock_kernel::tree::TreeViolation,
) -> String {
    use hilock_kernel::tree::TreeViolation as V;
    match v {
        V::WhiteOccupied(n) => format!("white {} has a request inside", name(t, n)),
        V::BlackNotSole(n) => format!(
            "black {} (owner {}) does not hold exactly its owner's request",
            name(t, n),
            t.node(n)
                .ok()
                .and_then(|x| x.owner())
                .map_or("none".to_string(), |u| u.to_string())
        ),
        V::GreyUnderTwo(n) => format!(
            "grey {} (count {}) has fewer than two owners below",
            name(t, n),
            t.node(n).map(|x| x.grey()).unwrap_or(0)
        ),
        V::GreyCount {
            node,
            count,
            requests,
        } => format!(
            "grey {} counts {count}, {requests} requests below",
            name(t, node)
        ),
        V::NotHeld { user, leaf } => format!("{user} does not own its leaf {}", name(t, leaf)),
        V::NotMaximal {
            user,
            region,
            largest,
        } => format!(
            "{user} owns {}, the largest allowed is {}",
            name(t, region),
            name(t, largest)
        ),
        other => other.to_string(),
    }
}

/// A kernel error in words, its nodes by their slide-10 paths ([`name`]) as the traces
/// name them, not by their index.
fn describe_error<const CAP: usize>(t: &TreeLock<CAP>, e: TreeError) -> String {
    match e {
        TreeError::OutsideTree(n) => format!("node {} is not in the tree", name(t, n)),
        TreeError::NotALeaf(n) => format!("node {} is not a leaf", name(t, n)),
        TreeError::NotOwner { user, node } => {
            format!(
                "user {user} does not own the region of node {}",
                name(t, node)
            )
        }
        TreeError::Busy { node, holder } => format!(
            "node {} is latched by an operation of {holder}",
            name(t, node)
        ),
        TreeError::Inconsistent(n) => format!("inconsistent colouring at node {}", name(t, n)),
        other => other.to_string(),
    }
}

/// The non-white or latched nodes of a tree, by name.
pub fn snapshot<const CAP: usize>(t: &TreeLock<CAP>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (i, node) in t.nodes().iter().enumerate() {
        let n = TreeNodeId(i as u32);
        let mut s = match node.color() {
            Color::White => String::new(),
            Color::Grey => format!("grey {}", node.grey()),
            Color::Black => format!(
                "black {} req {}",
                node.owner().map(|u| u.to_string()).unwrap_or_default(),
                node.original().map(|l| name(t, l)).unwrap_or_default()
            ),
        };
        if let Some(u) = node.latch() {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(&format!("[latched by {u}]"));
        }
        if !s.is_empty() {
            m.insert(name(t, n), s);
        }
    }
    m
}

/// A user's part of the state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserState {
    /// Rounds finished.
    pub round: u8,
    /// The operation in progress.
    pub op: Option<Op>,
    /// The leaf held: the insert was granted and the remove has not finished.
    pub held: Option<TreeNodeId>,
}

/// Ghost record of the last step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Last {
    /// The node demoted.
    pub demoted: Option<TreeNodeId>,
    /// The node promoted.
    pub promoted: Option<TreeNodeId>,
    /// The promoted owner was found below the promoted node's children.
    pub promoted_from_below: bool,
    /// A failed insert finished its undo.
    pub undone: bool,
    /// At least two operations hold latches.
    pub concurrent: bool,
}

impl Last {
    fn describe<const CAP: usize>(&self, t: &TreeLock<CAP>) -> String {
        let mut v = Vec::new();
        if let Some(n) = self.demoted {
            v.push(format!("demoted {}", name(t, n)));
        }
        if let Some(n) = self.promoted {
            v.push(format!("promoted {}", name(t, n)));
        }
        if self.undone {
            v.push("failed insert undone".to_string());
        }
        v.join(", ")
    }
}

/// A state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TreeState {
    /// The kernel tree.
    pub tree: MTree,
    /// Per user.
    pub users: Vec<UserState>,
    /// Ghost: the last step.
    pub last: Last,
    /// A kernel error (a bug).
    pub error: Option<TreeError>,
    /// Ghost: a remove found no region of its user (a bug).
    pub vanished: Option<u16>,
    /// Ghost: this user's second operation, started while its first ran, was not refused
    /// or its refusal changed the tree (a bug).
    pub second: Option<u16>,
}

/// A model action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeAction {
    /// User `user` starts `InsertUser(leaf)`.
    Insert {
        /// The user.
        user: u16,
        /// The leaf.
        leaf: TreeNodeId,
    },
    /// User `user` starts `RemoveUser` of the leaf it holds.
    Remove {
        /// The user.
        user: u16,
    },
    /// User `user`'s operation takes its next latch.
    Step {
        /// The user.
        user: u16,
    },
    /// User `user`, whose operation is in progress, starts `InsertUser(leaf)` again (the
    /// kernel must refuse it and change nothing; then this action has no next state).
    Again {
        /// The user.
        user: u16,
        /// The leaf.
        leaf: TreeNodeId,
    },
}

impl Model for TreeModel {
    type State = TreeState;
    type Action = TreeAction;

    fn init_states(&self) -> Vec<TreeState> {
        vec![TreeState {
            tree: self.tree.clone(),
            users: vec![UserState::default(); self.users()],
            last: Last::default(),
            error: None,
            vanished: None,
            second: None,
        }]
    }

    fn actions(&self, st: &TreeState, actions: &mut Vec<TreeAction>) {
        if st.error.is_some() {
            return;
        }
        for (u, us) in st.users.iter().enumerate() {
            let user = u as u16;
            match us.op {
                Some(op) => {
                    let free = op
                        .want()
                        .and_then(|w| st.tree.node(w).ok())
                        .is_some_and(|n| n.latch().is_none());
                    if free {
                        actions.push(TreeAction::Step { user });
                    }
                    actions.push(TreeAction::Again {
                        user,
                        leaf: op.target(),
                    });
                }
                None if us.held.is_some() => actions.push(TreeAction::Remove { user }),
                None if us.round < self.rounds => {
                    for &leaf in &self.choices[u] {
                        actions.push(TreeAction::Insert { user, leaf });
                    }
                }
                None => {}
            }
        }
    }

    fn next_state(&self, last: &TreeState, action: TreeAction) -> Option<TreeState> {
        let mut st = last.clone();
        st.last = Last::default();
        match action {
            TreeAction::Insert { user, leaf } => {
                match Op::insert(&mut st.tree, leaf, UserId(user), self.variant) {
                    Ok(op) => st.users[user as usize].op = Some(op),
                    Err(e) => st.error = Some(e),
                }
            }
            TreeAction::Remove { user } => {
                let leaf = st.users[user as usize].held?;
                match Op::remove(&mut st.tree, leaf, UserId(user), self.variant) {
                    Ok(op) => st.users[user as usize].op = Some(op),
                    Err(e) => st.error = Some(e),
                }
            }
            TreeAction::Again { user, leaf } => {
                let before = st.tree.clone();
                match Op::insert(&mut st.tree, leaf, UserId(user), self.variant) {
                    Err(TreeError::OperationInProgress { user: u })
                        if u == UserId(user) && st.tree == before =>
                    {
                        return None
                    }
                    _ => {
                        st.tree = before;
                        st.second = Some(user);
                    }
                }
            }
            TreeAction::Step { user } => {
                let u = user as usize;
                let mut op = st.users[u].op?;
                match op.step(&mut st.tree) {
                    Ok(Step::Blocked { .. }) => return None,
                    Ok(Step::Progress(p)) => {
                        st.last.demoted = p.demoted;
                        st.last.promoted = p.promoted;
                        st.last.promoted_from_below = p.promoted.is_some_and(|k| {
                            st.tree.node(p.node).ok().and_then(|n| n.parent()) != Some(k)
                        });
                        match p.outcome {
                            None => st.users[u].op = Some(op),
                            Some(o) => {
                                st.users[u].op = None;
                                match (op.kind(), o) {
                                    (OpKind::Insert, Outcome::Granted { .. }) => {
                                        st.users[u].held = Some(op.target())
                                    }
                                    (OpKind::Insert, _) => {
                                        st.last.undone = op.undoing();
                                        st.users[u].round += 1;
                                    }
                                    (OpKind::Remove, o) => {
                                        if o == Outcome::Vanished {
                                            st.vanished = Some(user);
                                        }
                                        st.users[u].held = None;
                                        st.users[u].round += 1;
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => {
                        st.users[u].op = None;
                        st.error = Some(e);
                    }
                }
                st.last.concurrent = st
                    .users
                    .iter()
                    .filter(|x| x.op.is_some_and(|o| o.held().iter().any(|h| h.is_some())))
                    .count()
                    >= 2;
            }
        }
        Some(st)
    }

    fn format_action(&self, a: &TreeAction) -> String {
        match *a {
            TreeAction::Insert { user, leaf } => {
                format!("u{user}: InsertUser({}) starts", name(&self.tree, leaf))
            }
            TreeAction::Remove { user } => format!("u{user}: RemoveUser of its leaf starts"),
            TreeAction::Step { user } => format!("u{user}: its operation takes the next latch"),
            TreeAction::Again { user, leaf } => format!(
                "u{user}: InsertUser({}) again while its operation runs",
                name(&self.tree, leaf)
            ),
        }
    }

    fn format_step(&self, last: &TreeState, a: TreeAction) -> Option<String> {
        let next = self.next_state(last, a)?;
        let mut s = self.describe(last, &a);
        let effects = next.last.describe(&next.tree);
        if !effects.is_empty() {
            let _ = write!(s, "\n  {effects}");
        }
        s.push_str(&crate::check::violations_line(self, &next));
        s.push_str("\n\ntree (non-white or latched nodes):");
        for (n, what) in snapshot(&next.tree) {
            let _ = write!(s, "\n  {n}: {what}");
        }
        for (u, us) in next.users.iter().enumerate() {
            let _ = write!(
                s,
                "\nu{u}: round {}, holds {}, {}",
                us.round,
                us.held.map_or("nothing".into(), |l| name(&next.tree, l)),
                match us.op {
                    Some(op) => format!(
                        "{:?} in progress, wants {}",
                        op.kind(),
                        op.want().map_or("nothing".into(), |n| name(&next.tree, n))
                    ),
                    None => "idle".into(),
                }
            );
        }
        if let Some(e) = next.error {
            let _ = write!(s, "\nkernel error: {}", describe_error(&next.tree, e));
        }
        Some(s)
    }

    fn as_svg(&self, path: Path<TreeState, TreeAction>) -> Option<String> {
        let mut d = crate::seq::Diagram::new((0..self.users()).map(|u| format!("u{u}")).collect());
        for (st, a) in path.into_vec() {
            if let Some(a) = a {
                let user = match a {
                    TreeAction::Insert { user, .. }
                    | TreeAction::Remove { user }
                    | TreeAction::Step { user }
                    | TreeAction::Again { user, .. } => user,
                };
                let text = self.describe(&st, &a);
                let text = text
                    .split_once(": ")
                    .map_or(text.clone(), |(_, t)| t.to_string());
                d.local(user.into(), text);
            }
        }
        Some(d.svg())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(P8, |m: &Self, st: &TreeState| m.p8(st).is_ok()),
            Property::always(NO_ERROR, |_, st: &TreeState| st.error.is_none()),
            Property::always(NO_DEADLOCK, |m: &Self, st: &TreeState| !m.deadlocked(st)),
            Property::always(COMPLETES, |m: &Self, st: &TreeState| {
                !m.terminal(st) || m.finished(st) || st.error.is_some()
            }),
            Property::always(ONE_OP, |_, st: &TreeState| st.second.is_none()),
            Property::sometimes("demotion", |_, st: &TreeState| st.last.demoted.is_some()),
            Property::sometimes("promotion", |_, st: &TreeState| st.last.promoted.is_some()),
            Property::sometimes("promotion of an owner found below", |_, st: &TreeState| {
                st.last.promoted_from_below
            }),
            Property::sometimes("failed insert undone", |_, st: &TreeState| st.last.undone),
            Property::sometimes("two operations hold latches", |_, st: &TreeState| {
                st.last.concurrent
            }),
            Property::sometimes("every script completes", |m: &Self, st: &TreeState| {
                m.finished(st)
            }),
        ]
    }
}

/// One property's result, with a `hilock-tree-trace/1` counterexample.
pub type TreePropertyReport = crate::check::PropertyReport<TreeTrace>;

/// The result of [`TreeModel::check`].
pub type TreeReport = crate::check::ModelReport<TreeTrace>;

/// A counterexample as a readable trace (`hilock-tree-trace/1`): per step the action, what
/// it did, and the non-white or latched nodes afterwards, named by their slide-10 paths.
#[derive(Clone, Debug, Serialize)]
pub struct TreeTrace {
    /// `hilock-tree-trace/1`.
    pub format: String,
    /// Configuration.
    pub model: String,
    /// Tree height.
    pub height: u32,
    /// Variant.
    pub variant: TreeVariant,
    /// The property violated.
    pub property: String,
    /// What is wrong in the last state.
    pub violation: String,
    /// What the trace shows (filled in by whoever saves it).
    pub note: String,
    /// The steps.
    pub steps: Vec<TreeTraceStep>,
}

/// One step of a [`TreeTrace`].
#[derive(Clone, Debug, Serialize)]
pub struct TreeTraceStep {
    /// Index.
    pub index: usize,
    /// The action.
    pub action: String,
    /// Demotion, promotion, undo done in this step.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub effects: String,
    /// Non-white or latched nodes after the step.
    pub tree: BTreeMap<String, String>,
}
