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

use crate::system::{System, MAX_NODES};
use crate::trace::{NodeSnapshot, Trace, TraceInput, TraceOutput, TraceStep, TRACE_FORMAT};
use hilock_kernel::{Input, LockId, Mode, NodeId, Output};
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
    /// `acquire MODE`.
    Acquire(Mode),
    /// `release`.
    Release,
    /// `upgrade`.
    Upgrade,
}

impl Op {
    /// Parses `acquire MODE`, `release`, `upgrade`.
    pub fn parse(s: &str) -> Result<Op, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        match words.as_slice() {
            ["acquire", m] => Mode::parse(m)
                .filter(|m| *m != Mode::Phi)
                .map(Op::Acquire)
                .ok_or_else(|| format!("unknown mode '{m}' (expected one of IR, R, U, IW, W)")),
            ["release"] => Ok(Op::Release),
            ["upgrade"] => Ok(Op::Upgrade),
            _ => Err(format!(
                "unknown operation '{s}' (expected 'acquire MODE', 'release' or 'upgrade')"
            )),
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
    token: NodeId,
    parents: Vec<Option<NodeId>>,
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

const LOCK: LockId = LockId(0);

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
        let token = id(&self.token, "token")?;
        let mut parents = vec![None; names.len()];
        for (child, parent) in &self.parents {
            let c = id(child, "parents")?;
            let p = id(parent, &format!("parents.{child}"))?;
            if c == token {
                return Err(format!(
                    "parents: the token holder '{child}' cannot have a parent"
                ));
            }
            if c == p {
                return Err(format!("parents: '{child}' cannot be its own parent"));
            }
            parents[c.idx()] = Some(p);
        }
        for (i, n) in names.iter().enumerate() {
            if i != token.idx() && parents[i].is_none() {
                return Err(format!(
                    "parents: node '{n}' has no parent (only the token holder '{}' may lack one)",
                    self.token
                ));
            }
            // Following parent pointers must reach the token holder.
            let mut at = i;
            for _ in 0..names.len() {
                match parents[at] {
                    Some(p) => at = p.idx(),
                    None => break,
                }
            }
            if at != token.idx() {
                return Err(format!("parents: the parent pointers from '{n}' form a cycle and never reach the token holder"));
            }
        }
        let mut scripts = vec![Vec::new(); names.len()];
        for (node, ops) in &self.scripts {
            let n = id(node, "scripts")?;
            for (k, op) in ops.iter().enumerate() {
                scripts[n.idx()]
                    .push(Op::parse(op).map_err(|e| format!("scripts.{node}[{k}]: {e}"))?);
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
            for (node, e) in m {
                id(node, what)?;
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
            token,
            parents,
            scripts,
            schedule,
        })
    }
}

struct Runner<'p> {
    p: &'p Prepared,
    sys: System,
    next_op: Vec<usize>,
    waiting: Vec<bool>,
    steps: Vec<TraceStep>,
}

impl Runner<'_> {
    fn record(
        &mut self,
        node: NodeId,
        input: TraceInput,
        r: &crate::system::StepResult,
    ) -> Result<(), String> {
        let names = &self.p.names;
        for o in &r.outputs {
            if matches!(o, Output::Granted { .. } | Output::Upgraded { .. }) {
                self.waiting[node.idx()] = false;
            }
        }
        let step = TraceStep {
            index: self.steps.len(),
            node: names[node.idx()].clone(),
            input,
            outputs: r
                .outputs
                .iter()
                .map(|o| TraceOutput::from_output(o, names))
                .collect(),
            error: r.error.map(|e| e.to_string()),
            state: NodeSnapshot::of(&self.sys.sites[node.idx()], LOCK, names),
        };
        self.steps.push(step);
        if let Some(e) = r.error {
            return Err(format!(
                "step {} ({}): the kernel rejected the input: {e}",
                self.steps.len() - 1,
                names[node.idx()]
            ));
        }
        self.sys.check_mutual_exclusion()?;
        self.sys.check_single_token()
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
        if self.waiting[node.idx()] {
            return Err(format!(
                "schedule runs '{}' operation {k} while its previous request is still pending",
                names[node.idx()]
            ));
        }
        self.next_op[node.idx()] += 1;
        let (input, tin) = match op {
            Op::Acquire(mode) => (
                Input::Acquire { lock: LOCK, mode },
                TraceInput::Acquire { lock: 0, mode },
            ),
            Op::Release => (
                Input::Release { lock: LOCK },
                TraceInput::Release { lock: 0 },
            ),
            Op::Upgrade => (
                Input::Upgrade { lock: LOCK },
                TraceInput::Upgrade { lock: 0 },
            ),
        };
        if matches!(op, Op::Acquire(_) | Op::Upgrade) {
            self.waiting[node.idx()] = true;
        }
        let r = self.sys.input(node, input);
        self.record(node, tin, &r)
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
        let tin = TraceInput::Deliver {
            from: names[from.idx()].clone(),
            msg,
        };
        self.record(to, tin, &r)
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
            let Some(i) = names.iter().position(|n| n == node) else {
                continue;
            };
            let s = NodeSnapshot::of(&self.sys.sites[i], LOCK, names);
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
        }
    }
}

impl Prepared {
    /// Node names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Runs the scenario. `Err` is a one-line reason the run could not be completed (a
    /// schedule that does not fit, an input the kernel rejected, a violated safety
    /// property); expectation mismatches are reported in [`RunReport::mismatches`].
    pub fn run(&self) -> Result<RunReport, String> {
        let parents = self.parents.clone();
        let sys = System::new(self.names.len(), |_, me| parents[me.idx()])
            .map_err(|e| format!("cannot build the system: {e}"))?;
        let _ = self.token;
        let mut r = Runner {
            p: self,
            sys,
            next_op: vec![0; self.names.len()],
            waiting: vec![false; self.names.len()],
            steps: Vec::new(),
        };
        let mut mismatches = Vec::new();
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
                    if !r.waiting[i] && r.next_op[i] < self.scripts[i].len() {
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
        let final_states = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    NodeSnapshot::of(&r.sys.sites[i], LOCK, &self.names),
                )
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
            messages: r.sys.sent,
        })
    }
}
