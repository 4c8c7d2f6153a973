//! The scenario format and its runner.
//!
//! A scenario is an initial tree with its token holder, a script of user operations per
//! node, an optional fixed schedule (which node acts or which channel delivers next), and
//! the expected state of nodes at checkpoints and at the end. The thesis worked examples
//! are scenarios under `spec/scenarios/`.
//!
//! ```json
//! { "name": "…", "figure": "2.2", "description": "…",
//!   "nodes": ["A","B","C"], "token": "A", "parents": {"B": "A", "C": "B"},
//!   "scripts": {"B": ["acquire R", "release"], "C": ["acquire IR"]},
//!   "schedule": ["B", "*", "C", "C->B", "B->A", "*"],
//!   "checkpoints": [{"after": 2, "label": "(b)", "expect": {"B": {"held": "R"}}}],
//!   "expect": {"A": {"token": false, "parent": "B"}} }
//! ```
//!
//! Schedule entries: `"X"` issues node X's next script operation; `"X->Y"` delivers the
//! oldest message on the channel from X to Y; `"*"` delivers every message in flight, oldest
//! first, until the network is empty. Without a schedule the runner repeats: issue every
//! node's next operation that is not waiting for a grant, then `"*"`, until nothing moves.

use crate::system::{SpecMsg, System, MAX_LOCKS, MAX_NODES};
use crate::trace::{NodeSnapshot, Trace, TraceInput, TraceStep, TRACE_FORMAT};
use hilock_harness::{Step, StepError};
use hilock_kernel::{Inheritance, Input, LockId, Mode, NodeId, Output, Variant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A scenario file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// The thesis figure it reproduces, if any (e.g. `"2.2"`).
    #[serde(default)]
    pub figure: Option<String>,
    /// What happens, in words.
    #[serde(default)]
    pub description: String,
    /// Node names; node ids are positions in this list.
    pub nodes: Vec<String>,
    /// The initial token holder.
    pub token: String,
    /// Initial parent of every node except the token holder.
    pub parents: BTreeMap<String, String>,
    /// Further locks (lock 1, 2, …), each with its own initial tree; lock 0 is `token` and
    /// `parents`. Operations and expectations name a lock with `@N` (`acquire R @1`, `"A@1"`).
    #[serde(default)]
    pub locks: Vec<LockTree>,
    /// Initial base priority β of nodes (chapter 3; default 0). Applied as `SetPriority`
    /// steps before the schedule.
    #[serde(default)]
    pub priorities: BTreeMap<String, u8>,
    /// Priority inheritance: `"none"` (default), `"pcep"` or `"pip"` (section 3.7).
    #[serde(default)]
    pub inheritance: Option<String>,
    /// PCEP ceilings per lock index (`{"0": 5}`).
    #[serde(default)]
    pub ceilings: BTreeMap<String, u8>,
    /// Operations per node: `acquire MODE`, `release`, `upgrade`.
    #[serde(default)]
    pub scripts: BTreeMap<String, Vec<String>>,
    /// Optional fixed schedule.
    #[serde(default)]
    pub schedule: Option<Vec<String>>,
    /// Expected states after a number of schedule entries.
    #[serde(default)]
    pub checkpoints: Vec<Checkpoint>,
    /// Expected final states.
    #[serde(default)]
    pub expect: BTreeMap<String, Expect>,
}

/// The initial tree of one more lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockTree {
    /// Its initial token holder.
    pub token: String,
    /// Initial parent of every other node.
    pub parents: BTreeMap<String, String>,
}

/// Expected states after `after` schedule entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Number of schedule entries executed.
    pub after: usize,
    /// Label, e.g. the figure panel `"(b)"`.
    #[serde(default)]
    pub label: String,
    /// Expected node states.
    pub expect: BTreeMap<String, Expect>,
}

/// Expected state of one node; absent fields are not checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Token held?
    #[serde(default)]
    pub token: Option<bool>,
    /// Parent (`null` for none).
    #[serde(default, with = "double_option")]
    pub parent: Option<Option<String>>,
    /// Owned mode.
    #[serde(default)]
    pub owned: Option<String>,
    /// Held mode.
    #[serde(default)]
    pub held: Option<String>,
    /// Pending mode.
    #[serde(default)]
    pub pending: Option<String>,
    /// Copyset: child → owned mode.
    #[serde(default)]
    pub children: Option<BTreeMap<String, String>>,
    /// Local queue as `NODE:MODE`, head first.
    #[serde(default)]
    pub queue: Option<Vec<String>>,
    /// Frozen modes.
    #[serde(default)]
    pub frozen: Option<Vec<String>>,
    /// Thresholds of the frozen modes (Rule 6_PRIO), e.g. `{"R": 4}`; modes frozen at 0 are
    /// not listed.
    #[serde(default)]
    pub thresholds: Option<BTreeMap<String, u8>>,
    /// The site's effective priority ξ.
    #[serde(default)]
    pub effective_priority: Option<u8>,
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Ok(Some(Option::<String>::deserialize(d)?))
    }
}

/// A scenario operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `acquire MODE [@LOCK]`.
    Acquire(Mode, u16),
    /// `release [@LOCK]`.
    Release(u16),
    /// `upgrade [@LOCK]`.
    Upgrade(u16),
    /// `priority N`: set the base priority β.
    Priority(u8),
}

impl Op {
    /// Parses `acquire MODE [@LOCK]`, `release [@LOCK]`, `upgrade [@LOCK]`, `priority N`.
    pub fn parse(s: &str) -> Result<Op, String> {
        let mut words: Vec<&str> = s.split_whitespace().collect();
        let mut lock = 0u16;
        if let Some(last) = words.last() {
            if let Some(l) = last.strip_prefix('@') {
                lock = l
                    .parse()
                    .ok()
                    .filter(|l: &u16| (*l as usize) < MAX_LOCKS)
                    .ok_or_else(|| format!("lock '{last}' is not @0 to @{}", MAX_LOCKS - 1))?;
                words.pop();
            }
        }
        match words.as_slice() {
            ["acquire", m] => Mode::parse(m)
                .filter(|m| *m != Mode::Phi)
                .map(|m| Op::Acquire(m, lock))
                .ok_or_else(|| format!("unknown mode '{m}' (expected one of IR, R, U, IW, W)")),
            ["release"] => Ok(Op::Release(lock)),
            ["upgrade"] => Ok(Op::Upgrade(lock)),
            ["priority", p] => p
                .parse()
                .map(Op::Priority)
                .map_err(|_| format!("priority '{p}' is not a number from 0 to 255")),
            _ => Err(format!(
                "unknown operation '{s}' (expected 'acquire MODE [@LOCK]', 'release [@LOCK]', 'upgrade [@LOCK]' or 'priority N')"
            )),
        }
    }
}

impl Op {
    /// The lock the operation is about (`None` for `priority`).
    pub fn lock(self) -> Option<u16> {
        match self {
            Op::Acquire(_, l) | Op::Release(l) | Op::Upgrade(l) => Some(l),
            Op::Priority(_) => None,
        }
    }
}

/// One parsed schedule entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
    Op(NodeId),
    Deliver(NodeId, NodeId),
    All,
}

/// A scenario checked for consistency, ready to run.
#[derive(Clone, Debug)]
pub struct Prepared {
    scenario: Scenario,
    names: Vec<String>,
    /// Parent pointers per lock (index = lock).
    parents: Vec<Vec<Option<NodeId>>>,
    variant: Variant,
    ceilings: [u8; MAX_LOCKS],
    priorities: Vec<(NodeId, u8)>,
    scripts: Vec<Vec<Op>>,
    schedule: Option<Vec<Sched>>,
}

/// The result of a run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The trace of the run.
    pub trace: Trace,
    /// Mismatches between expected and actual states (empty: the scenario passed).
    pub mismatches: Vec<String>,
    /// Final state of every node.
    pub final_states: BTreeMap<String, NodeSnapshot>,
    /// Messages sent.
    pub messages: u64,
}

impl RunReport {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Splits an expectation key `NODE` or `NODE@LOCK` (lock `None` if `@…` is not a number).
fn split_key(key: &str) -> (&str, Option<u16>) {
    match key.split_once('@') {
        Some((n, l)) => (n, l.parse().ok()),
        None => (key, Some(0)),
    }
}

impl Scenario {
    /// Parses a scenario from JSON text. Errors are one line.
    pub fn from_json(text: &str) -> Result<Scenario, String> {
        serde_json::from_str(text).map_err(|e| format!("malformed scenario: {e}"))
    }

    /// Checks the scenario for consistency: known names, one token holder, every other node
    /// with a parent, parent pointers that lead to the token holder, valid operations,
    /// schedule entries and expectations.
    pub fn prepare(&self) -> Result<Prepared, String> {
        let names = self.nodes.clone();
        if names.is_empty() || names.len() > MAX_NODES {
            return Err(format!(
                "'nodes' must list 1 to {MAX_NODES} nodes, found {}",
                names.len()
            ));
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || n.contains("->") || n == "*" || n.contains(char::is_whitespace) {
                return Err(format!(
                    "node name '{n}' is not allowed (no spaces, '->' or '*')"
                ));
            }
            if names[..i].contains(n) {
                return Err(format!("node '{n}' is listed twice"));
            }
        }
        let id = |n: &str, what: &str| -> Result<NodeId, String> {
            names
                .iter()
                .position(|x| x == n)
                .map(|i| NodeId(i as u16))
                .ok_or_else(|| format!("{what}: unknown node '{n}'"))
        };
        let mut trees = vec![LockTree {
            token: self.token.clone(),
            parents: self.parents.clone(),
        }];
        trees.extend(self.locks.iter().cloned());
        if trees.len() > MAX_LOCKS {
            return Err(format!("at most {MAX_LOCKS} locks, found {}", trees.len()));
        }
        let mut all_parents = Vec::new();
        for (l, tree) in trees.iter().enumerate() {
            let at = if l == 0 {
                String::new()
            } else {
                format!("locks[{}].", l - 1)
            };
            let token = id(&tree.token, &format!("{at}token"))?;
            let mut parents = vec![None; names.len()];
            for (child, parent) in &tree.parents {
                let c = id(child, &format!("{at}parents"))?;
                let p = id(parent, &format!("{at}parents.{child}"))?;
                if c == token {
                    return Err(format!(
                        "{at}parents: the token holder '{child}' cannot have a parent"
                    ));
                }
                if c == p {
                    return Err(format!("{at}parents: '{child}' cannot be its own parent"));
                }
                parents[c.idx()] = Some(p);
            }
            for (i, n) in names.iter().enumerate() {
                if i != token.idx() && parents[i].is_none() {
                    return Err(format!(
                        "{at}parents: node '{n}' has no parent (only the token holder '{}' may lack one)",
                        tree.token
                    ));
                }
                // Following parent pointers must reach the token holder.
                let mut here = i;
                for _ in 0..names.len() {
                    match parents[here] {
                        Some(p) => here = p.idx(),
                        None => break,
                    }
                }
                if here != token.idx() {
                    return Err(format!("{at}parents: the parent pointers from '{n}' form a cycle and never reach the token holder"));
                }
            }
            all_parents.push(parents);
        }
        while all_parents.len() < MAX_LOCKS {
            // Locks the scenario does not use: a star around node 0.
            all_parents.push(
                (0..names.len())
                    .map(|i| (i != 0).then_some(NodeId(0)))
                    .collect(),
            );
        }
        let inheritance = match self
            .inheritance
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("none") => Inheritance::None,
            Some("pcep") => Inheritance::Pcep,
            Some("pip") => Inheritance::Pip,
            Some(other) => {
                return Err(format!(
                    "inheritance: '{other}' is not one of none, pcep, pip"
                ))
            }
        };
        let mut ceilings = [0u8; MAX_LOCKS];
        for (l, c) in &self.ceilings {
            let li: usize = l
                .parse()
                .ok()
                .filter(|x| *x < trees.len())
                .ok_or_else(|| format!("ceilings: '{l}' is not a lock of this scenario"))?;
            ceilings[li] = *c;
        }
        let mut priorities = Vec::new();
        for (n, p) in &self.priorities {
            priorities.push((id(n, "priorities")?, *p));
        }
        let mut scripts = vec![Vec::new(); names.len()];
        for (node, ops) in &self.scripts {
            let n = id(node, "scripts")?;
            for (k, op) in ops.iter().enumerate() {
                let op = Op::parse(op).map_err(|e| format!("scripts.{node}[{k}]: {e}"))?;
                if let Op::Acquire(_, l) | Op::Release(l) | Op::Upgrade(l) = op {
                    if l as usize >= trees.len() {
                        return Err(format!("scripts.{node}[{k}]: lock @{l} is not defined (the scenario has {} locks)", trees.len()));
                    }
                }
                scripts[n.idx()].push(op);
            }
        }
        let schedule = match &self.schedule {
            None => None,
            Some(s) => {
                let mut v = Vec::new();
                for (k, e) in s.iter().enumerate() {
                    let e = e.trim();
                    let item = if e == "*" {
                        Sched::All
                    } else if let Some((a, b)) = e.split_once("->") {
                        Sched::Deliver(
                            id(a.trim(), &format!("schedule[{k}]"))?,
                            id(b.trim(), &format!("schedule[{k}]"))?,
                        )
                    } else {
                        Sched::Op(id(e, &format!("schedule[{k}]"))?)
                    };
                    v.push(item);
                }
                Some(v)
            }
        };
        let check_expect = |what: &str, m: &BTreeMap<String, Expect>| -> Result<(), String> {
            for (key, e) in m {
                let (node, lock) = split_key(key);
                id(node, what)?;
                if lock.is_none_or(|l| l as usize >= trees.len()) {
                    return Err(format!("{what}: '{key}' names no lock of this scenario"));
                }
                let modes = [
                    ("owned", &e.owned),
                    ("held", &e.held),
                    ("pending", &e.pending),
                ];
                for (field, v) in modes {
                    if let Some(v) = v {
                        Mode::parse(v)
                            .ok_or_else(|| format!("{what}.{node}.{field}: unknown mode '{v}'"))?;
                    }
                }
                if let Some(Some(p)) = &e.parent {
                    id(p, &format!("{what}.{node}.parent"))?;
                }
                for (c, m) in e.children.iter().flatten() {
                    id(c, &format!("{what}.{node}.children"))?;
                    Mode::parse(m)
                        .ok_or_else(|| format!("{what}.{node}.children.{c}: unknown mode '{m}'"))?;
                }
                for m in e.frozen.iter().flatten() {
                    Mode::parse(m)
                        .ok_or_else(|| format!("{what}.{node}.frozen: unknown mode '{m}'"))?;
                }
                for q in e.queue.iter().flatten() {
                    let (n, m) = q
                        .split_once(':')
                        .ok_or_else(|| format!("{what}.{node}.queue: '{q}' is not NODE:MODE"))?;
                    id(n, &format!("{what}.{node}.queue"))?;
                    Mode::parse(m)
                        .ok_or_else(|| format!("{what}.{node}.queue: unknown mode '{m}'"))?;
                }
            }
            Ok(())
        };
        check_expect("expect", &self.expect)?;
        let len = schedule.as_ref().map(|s| s.len());
        for (k, c) in self.checkpoints.iter().enumerate() {
            match len {
                None => return Err(format!("checkpoints[{k}]: checkpoints need a schedule")),
                Some(l) if c.after > l => {
                    return Err(format!(
                        "checkpoints[{k}]: after {} entries, but the schedule has {l}",
                        c.after
                    ))
                }
                _ => {}
            }
            check_expect(&format!("checkpoints[{k}].expect"), &c.expect)?;
        }
        Ok(Prepared {
            scenario: self.clone(),
            names,
            parents: all_parents,
            variant: Variant {
                inheritance,
                ..Variant::HILOCK
            },
            ceilings,
            priorities,
            scripts,
            schedule,
        })
    }
}

struct Runner<'p> {
    p: &'p Prepared,
    sys: System,
    next_op: Vec<usize>,
    /// Per node and lock: an acquire or upgrade is outstanding.
    waiting: Vec<[bool; MAX_LOCKS]>,
    steps: Vec<TraceStep>,
}

impl Runner<'_> {
    fn record(
        &mut self,
        node: NodeId,
        lock: LockId,
        input: TraceInput,
        r: &Result<Step<SpecMsg>, StepError>,
    ) -> Result<(), String> {
        let names = &self.p.names;
        let outputs: &[Output<SpecMsg>] = r.as_ref().map_or(&[], |s| &s.outputs);
        for o in outputs {
            if let Output::Granted { lock, .. } | Output::Upgraded { lock } = o {
                self.waiting[node.idx()][lock.idx()] = false;
            }
        }
        let step = TraceStep::of(
            self.steps.len(),
            node,
            input,
            r,
            self.sys.site(node),
            lock,
            names,
        );
        let error = step.error.clone();
        self.steps.push(step);
        if let Some(e) = error {
            return Err(format!(
                "step {} ({}): the kernel rejected the input: {e}",
                self.steps.len() - 1,
                names[node.idx()]
            ));
        }
        // Every safety property that applies, after every step (P1, P2, P3, P3b:
        // `Cluster::check_safety`; a kernel rejection was reported above).
        self.sys
            .check_safety()
            .map_err(|e| format!("after step {}: {e}", self.steps.len() - 1))
    }

    fn op(&mut self, node: NodeId) -> Result<(), String> {
        let names = &self.p.names;
        let k = self.next_op[node.idx()];
        let Some(&op) = self.p.scripts[node.idx()].get(k) else {
            return Err(format!(
                "schedule runs '{}' but its script has no operation left",
                names[node.idx()]
            ));
        };
        if op
            .lock()
            .is_some_and(|l| self.waiting[node.idx()][l as usize])
        {
            return Err(format!(
                "schedule runs '{}' operation {k} while its previous request for that lock is still pending",
                names[node.idx()]
            ));
        }
        self.next_op[node.idx()] += 1;
        let (input, tin, lock) = match op {
            Op::Acquire(mode, l) => (
                Input::Acquire {
                    lock: LockId(l),
                    mode,
                },
                TraceInput::Acquire { lock: l, mode },
                l,
            ),
            Op::Release(l) => (
                Input::Release { lock: LockId(l) },
                TraceInput::Release { lock: l },
                l,
            ),
            Op::Upgrade(l) => (
                Input::Upgrade { lock: LockId(l) },
                TraceInput::Upgrade { lock: l },
                l,
            ),
            Op::Priority(base) => (
                Input::SetPriority { base },
                TraceInput::SetPriority { base },
                0,
            ),
        };
        if matches!(op, Op::Acquire(..) | Op::Upgrade(_)) {
            self.waiting[node.idx()][lock as usize] = true;
        }
        let r = self.sys.input(node, input);
        self.record(node, LockId(lock), tin, &r)
    }

    fn deliver(&mut self, from: NodeId, to: NodeId) -> Result<(), String> {
        let names = &self.p.names;
        let Some((msg, r)) = self.sys.deliver(from, to) else {
            return Err(format!(
                "schedule delivers on {}->{} but no message is in flight there",
                names[from.idx()],
                names[to.idx()]
            ));
        };
        let lock = msg.lock();
        let tin = TraceInput::Deliver {
            from: names[from.idx()].clone(),
            msg,
            copy: false,
        };
        self.record(to, lock, tin, &r)
    }

    fn deliver_all(&mut self) -> Result<(), String> {
        // Bounded: every delivery is one protocol step; a run that does not settle within
        // this many deliveries is reported instead of looping forever.
        for _ in 0..100_000 {
            let Some((from, to)) = self.sys.oldest_channel() else {
                return Ok(());
            };
            self.deliver(from, to)?;
        }
        Err("the network did not become quiet within 100000 deliveries".to_string())
    }

    fn compare(&self, what: &str, expect: &BTreeMap<String, Expect>, out: &mut Vec<String>) {
        let names = &self.p.names;
        for (node, e) in expect {
            let (name, lock) = split_key(node);
            let Some(i) = names.iter().position(|n| n == name) else {
                continue;
            };
            let s = NodeSnapshot::of(
                self.sys.site(NodeId(i as u16)),
                LockId(lock.unwrap_or(0)),
                names,
            );
            let mode = |v: &str| Mode::parse(v).unwrap_or(Mode::Phi);
            let mut diff = |field: &str, want: String, got: String| {
                if want != got {
                    out.push(format!(
                        "{what}: {node}.{field}: expected {want}, found {got}"
                    ));
                }
            };
            if let Some(t) = e.token {
                diff("token", t.to_string(), s.token.to_string());
            }
            if let Some(p) = &e.parent {
                diff("parent", format!("{p:?}"), format!("{:?}", s.parent));
            }
            if let Some(v) = &e.owned {
                diff("owned", mode(v).to_string(), s.owned.to_string());
            }
            if let Some(v) = &e.held {
                diff("held", mode(v).to_string(), s.held.to_string());
            }
            if let Some(v) = &e.pending {
                diff("pending", mode(v).to_string(), s.pending.to_string());
            }
            if let Some(c) = &e.children {
                let want: BTreeMap<String, String> = c
                    .iter()
                    .map(|(k, v)| (k.clone(), mode(v).to_string()))
                    .collect();
                let got: BTreeMap<String, String> = s
                    .children
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect();
                diff("children", format!("{want:?}"), format!("{got:?}"));
            }
            if let Some(q) = &e.queue {
                let want: Vec<String> = q
                    .iter()
                    .map(|x| match x.split_once(':') {
                        Some((n, m)) => format!("{n}:{}", mode(m).name()),
                        None => x.clone(),
                    })
                    .collect();
                diff("queue", format!("{want:?}"), format!("{:?}", s.queue));
            }
            if let Some(f) = &e.frozen {
                let mut want: Vec<String> = f.iter().map(|m| mode(m).to_string()).collect();
                want.sort();
                let mut got: Vec<String> = s.frozen.iter().map(|m| m.to_string()).collect();
                got.sort();
                diff("frozen", format!("{want:?}"), format!("{got:?}"));
            }
            if let Some(t) = &e.thresholds {
                let want: BTreeMap<String, u8> = t
                    .iter()
                    .map(|(k, v)| (mode(k).name().to_string(), *v))
                    .collect();
                diff(
                    "thresholds",
                    format!("{want:?}"),
                    format!("{:?}", s.thresholds),
                );
            }
            if let Some(p) = e.effective_priority {
                let got = self.sys.site(NodeId(i as u16)).priorities().effective;
                diff("effective_priority", p.to_string(), got.to_string());
            }
        }
    }
}

impl Prepared {
    /// Node names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The same scenario under another forwarding rule (`spec/SPEC.md` 1.6: the thesis
    /// scenarios must end in the same states under each of hilock's forwarding rules).
    pub fn with_forwarding(mut self, forwarding: hilock_kernel::Forwarding) -> Self {
        self.variant.forwarding = forwarding;
        self
    }

    /// Runs the scenario. `Err` is a one-line reason the run could not be completed (a
    /// schedule that does not fit, an input the kernel rejected, a violated safety
    /// property); expectation mismatches are reported in [`RunReport::mismatches`].
    pub fn run(&self) -> Result<RunReport, String> {
        let parents = self.parents.clone();
        let mut sys = System::hilock(self.names.len(), |l, me| parents[l.idx()][me.idx()])
            .map_err(|e| format!("cannot build the system: {e}"))?;
        sys.configure(|s| s.with_variant(self.variant).with_ceilings(self.ceilings));
        let mut r = Runner {
            p: self,
            sys,
            next_op: vec![0; self.names.len()],
            waiting: vec![[false; MAX_LOCKS]; self.names.len()],
            steps: Vec::new(),
        };
        let mut mismatches = Vec::new();
        for &(n, base) in &self.priorities {
            let res = r.sys.input(n, Input::SetPriority { base });
            r.record(n, LockId(0), TraceInput::SetPriority { base }, &res)?;
        }
        match &self.schedule {
            Some(s) => {
                for (k, e) in s.iter().enumerate() {
                    match *e {
                        Sched::Op(n) => r.op(n),
                        Sched::Deliver(a, b) => r.deliver(a, b),
                        Sched::All => r.deliver_all(),
                    }
                    .map_err(|e| format!("schedule[{k}]: {e}"))?;
                    for c in self
                        .scenario
                        .checkpoints
                        .iter()
                        .filter(|c| c.after == k + 1)
                    {
                        let label = if c.label.is_empty() {
                            format!("after {}", c.after)
                        } else {
                            c.label.clone()
                        };
                        r.compare(&format!("checkpoint {label}"), &c.expect, &mut mismatches);
                    }
                }
            }
            None => loop {
                let mut moved = false;
                for i in 0..self.names.len() {
                    let ready = self.scripts[i]
                        .get(r.next_op[i])
                        .is_some_and(|op| !op.lock().is_some_and(|l| r.waiting[i][l as usize]));
                    if ready {
                        r.op(NodeId(i as u16))?;
                        moved = true;
                    }
                }
                if r.sys.in_flight() > 0 {
                    moved = true;
                }
                r.deliver_all()?;
                if !moved {
                    break;
                }
            },
        }
        r.compare("final state", &self.scenario.expect, &mut mismatches);
        // The script ends as the file says: every operation of every script ran, and every
        // request was granted, unless the final expectations state the pending mode of that
        // node and lock.
        for (i, name) in self.names.iter().enumerate() {
            let left = self.scripts[i].len() - r.next_op[i];
            if left > 0 {
                mismatches.push(format!(
                    "final state: {left} operation(s) of {name}'s script never ran"
                ));
            }
            for l in 0..self.scenario.locks.len() + 1 {
                let key = if l == 0 {
                    name.clone()
                } else {
                    format!("{name}@{l}")
                };
                let pending = r
                    .sys
                    .site(NodeId(i as u16))
                    .lock(LockId(l as u16))
                    .map(|n| n.pending_mode())
                    .unwrap_or(Mode::Phi);
                let stated = self
                    .scenario
                    .expect
                    .get(&key)
                    .is_some_and(|e| e.pending.is_some());
                if pending != Mode::Phi && !stated {
                    mismatches.push(format!(
                        "final state: {key} still waits for {pending}; every request must be granted by the end, or the file's \"expect\" must state {key}'s \"pending\" mode"
                    ));
                }
            }
        }
        let final_states = self
            .names
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                let site = r.sys.site(NodeId(i as u16));
                let names = &self.names;
                (0..self.scenario.locks.len() + 1).map(move |l| {
                    let key = if l == 0 {
                        n.clone()
                    } else {
                        format!("{n}@{l}")
                    };
                    (key, NodeSnapshot::of(site, LockId(l as u16), names))
                })
            })
            .collect();
        let source = match &self.scenario.figure {
            Some(f) => format!("scenario {} (Fig. {f})", self.scenario.name),
            None => format!("scenario {}", self.scenario.name),
        };
        Ok(RunReport {
            trace: Trace {
                format: TRACE_FORMAT.to_string(),
                source,
                nodes: self.names.clone(),
                steps: r.steps,
                verdict: None,
            },
            mismatches,
            final_states,
            messages: r.sys.sent(),
        })
    }
}
