//! From a counterexample to the browser: replay a saved trace through the model to find
//! its path, the Stateright Explorer URL of that path, and the sequence diagram of any
//! saved trace.
//!
//! Stateright 0.31's Explorer names a path by *action indices*: `#/steps/0/2/1` is the
//! initial state 0, then the action at index 2 of the enabled actions of that state, then
//! index 1 of the next state's (see `Path::encode`). A trace is replayed step by step: each
//! step must be one of the actions the model enables in the state reached so far, or the
//! replay stops with one line naming the first step that does not fit.

use crate::agents::{AgentsModel, Delivery, ScriptLock};
use crate::bakery::{BakeryModel, BakerySystem};
use crate::faults::FaultConfig;
use crate::inversion::InversionConfig;
use crate::ring::RingModel;
use crate::seq::Diagram;
use crate::token::{Action, BaseModel, Delivered, ModelConfig, ScriptOp, State};
use crate::tree::TreeModel;
use hilock_kernel::agents::{AgentVariant, LockMode, Req, ServerVariant};
use hilock_kernel::tree::TreeVariant;
use hilock_kernel::NodeId;
use hilock_spec::trace::{Trace, TraceInput, TraceOutput, TRACE_FORMAT};
use serde::{Deserialize, Serialize};
use stateright::{Model, Path};
use std::path::Path as FsPath;

/// The default port of `hilock explore`.
pub const DEFAULT_PORT: u16 = 3000;

/// A trace replayed through a model configuration.
#[derive(Clone, Debug)]
pub struct Opened {
    /// The Explorer path (`0/2/1/…`).
    pub encoded: String,
    /// Steps replayed.
    pub steps: usize,
    /// The `always` properties the last state violates (empty: none).
    pub violated: Vec<String>,
    /// The actions in words.
    pub texts: Vec<String>,
    /// The verdict of a witness trace (its last state is not a failure: the P6 witness).
    pub witness: Option<String>,
}

/// The Explorer URL of an encoded path on `127.0.0.1:port`.
pub fn url(port: u16, encoded: &str) -> String {
    format!("http://127.0.0.1:{port}/#/steps/{encoded}")
}

/// The lines that tell a user how to open a counterexample: the command and the URL.
pub fn how_to_open(config: &FsPath, trace: &FsPath, encoded: &str) -> String {
    how_to_open_at(config, trace, encoded, "the failing state")
}

/// [`how_to_open`] for a trace whose last state is not a failure (a witness of a bound that
/// holds): `what` names that state.
pub fn how_to_open_at(config: &FsPath, trace: &FsPath, encoded: &str, what: &str) -> String {
    format!(
        "  open it in the Stateright Explorer: hilock explore {} --trace {}\n  \
         then browse {} ({what})\n",
        hilock_spec::shell_word(&config.display().to_string()),
        hilock_spec::shell_word(&trace.display().to_string()),
        url(DEFAULT_PORT, encoded)
    )
}

/// The format tag of a trace file's JSON, if it has one.
pub fn format_of(v: &serde_json::Value) -> Option<&str> {
    v.get("format").and_then(|f| f.as_str())
}

/// Parses a base-model trace (`hilock-trace/1`); any other format, or a file of that format
/// that does not parse, is one line saying so.
pub fn parse_base_trace(text: &str) -> Result<Trace, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON trace: {e}"))?;
    match format_of(&v) {
        Some(TRACE_FORMAT) => {}
        Some(other) => {
            return Err(format!(
                "a {other} trace ({}), not a base-model trace ({TRACE_FORMAT}): \
                 it belongs to another model",
                model_of_format(other)
            ))
        }
        None => {
            return Err(format!(
                "no \"format\" field: an older or foreign trace, not {TRACE_FORMAT}"
            ))
        }
    }
    let t: Trace = serde_json::from_value(v).map_err(|e| {
        format!("a malformed {TRACE_FORMAT} trace (of an older shape, or edited): {e}")
    })?;
    // Nodes are named by their place in `nodes`: a name given twice names two nodes.
    if t.nodes.is_empty() {
        return Err("the trace names no node (\"nodes\" is empty)".into());
    }
    if let Some((i, n)) = t
        .nodes
        .iter()
        .enumerate()
        .find(|(i, n)| t.nodes[..*i].contains(n))
    {
        return Err(format!(
            "the trace names node '{n}' twice (\"nodes\"[{i}]): each node has one name"
        ));
    }
    // Every reader prints a step by its `index`: one out of place would name another step.
    if let Some((i, s)) = t.steps.iter().enumerate().find(|(i, s)| s.index != *i) {
        return Err(format!(
            "the step at position {i} is numbered {}: a trace's steps are numbered 0, 1, … in \
             order",
            s.index
        ));
    }
    Ok(t)
}

fn model_of_format(f: &str) -> &'static str {
    match f {
        TRACE_FORMAT => "the base model",
        "hilock-tree-trace/1" => "the tree-locking model",
        "hilock-agents-trace/1" => "the agents model",
        "hilock-bakery-trace/1" => "the bakery model",
        "hilock-inversion-trace/1" => "the priority-inversion model",
        crate::ring::TRACE_FORMAT => "the ring model",
        crate::faults::TRACE_FORMAT => "the fault model",
        _ => "an unknown model",
    }
}

/// The configuration name a base-model trace names in its `source`, if any.
pub fn source_config(trace: &Trace) -> Option<&str> {
    let s = trace.source.split_once("configuration '")?.1;
    s.rsplit_once('\'').map(|(name, _)| name)
}

/// Replays `trace` through the model of `cfg`.
pub fn open_base(cfg: &ModelConfig, trace: &Trace) -> Result<Opened, String> {
    match cfg.locks {
        1 => open_l::<1>(&cfg.clone().into_model_with::<1>()?, trace),
        2 => open_l::<2>(&cfg.clone().into_model_with::<2>()?, trace),
        n => Err(format!("locks must be 1 or 2, not {n}")),
    }
}

/// Whether `action` is the step `step` of a trace with node names `names`.
fn fits<const L: usize>(
    st: &State<L>,
    names: &[String],
    node: usize,
    input: &TraceInput,
    action: &Action,
) -> bool {
    let idx = |n: &str| names.iter().position(|x| x == n);
    match (*action, input) {
        (Action::Run { node: n, op }, _) if usize::from(n) == node => {
            matches!(
                (op, input),
                (ScriptOp::Acquire(m, l), TraceInput::Acquire { lock, mode }) if m == *mode && l == *lock
            ) || matches!((op, input), (ScriptOp::Release(l), TraceInput::Release { lock }) if l == *lock)
                || matches!((op, input), (ScriptOp::Try(m, l), TraceInput::TryAcquire { lock, mode }) if m == *mode && l == *lock)
                || matches!((op, input), (ScriptOp::Cancel(l), TraceInput::Cancel { lock }) if l == *lock)
                || matches!((op, input), (ScriptOp::Downgrade(m, l), TraceInput::Downgrade { lock, mode }) if m == *mode && l == *lock)
                || matches!((op, input), (ScriptOp::Convert(m, l, w), TraceInput::Convert { lock, mode, wait }) if m == *mode && l == *lock && w == *wait)
                || matches!((op, input), (ScriptOp::Write(v, l), TraceInput::SetValue { lock, value }) if v == *value && l == *lock)
                || matches!((op, input), (ScriptOp::Upgrade(l), TraceInput::Upgrade { lock }) if l == *lock)
                || matches!((op, input), (ScriptOp::Priority(p), TraceInput::SetPriority { base }) if p == *base)
        }
        (
            Action::Deliver {
                from, to, index, ..
            }
            | Action::Duplicate {
                from, to, index, ..
            },
            TraceInput::Deliver { from: f, msg, copy },
        ) if usize::from(to) == node
            && idx(f) == Some(usize::from(from))
            && *copy == matches!(action, Action::Duplicate { .. }) =>
        {
            st.cluster
                .channel(NodeId(from.into()), NodeId(to.into()))
                .nth(index.into())
                .is_some_and(|m| m == msg)
        }
        _ => false,
    }
}

fn input_text(node: &str, input: &TraceInput) -> String {
    match input {
        TraceInput::Acquire { lock, mode } => format!("{node} acquire {mode} on L{lock}"),
        TraceInput::TryAcquire { lock, mode } => format!("{node} try {mode} on L{lock}"),
        TraceInput::Cancel { lock } => format!("{node} cancel L{lock}"),
        TraceInput::Downgrade { lock, mode } => format!("{node} downgrade L{lock} to {mode}"),
        TraceInput::Convert { lock, mode, wait } => {
            let how = if *wait { "convert" } else { "try to convert" };
            format!("{node} {how} L{lock} to {mode}")
        }
        TraceInput::SetValue { lock, value } => format!("{node} write {value} to L{lock}"),
        TraceInput::Release { lock } => format!("{node} release L{lock}"),
        TraceInput::Upgrade { lock } => format!("{node} upgrade L{lock}"),
        TraceInput::SetPriority { base } => format!("{node} priority {base}"),
        TraceInput::Deliver { from, msg, copy } => {
            let f = from.trim_start_matches('n').parse().unwrap_or(0);
            let copy = if *copy { " (a copy)" } else { "" };
            format!("{from} → {node} {}{copy}", Delivered::of(msg).label(f))
        }
    }
}

/// An output of the step of node `name` (index `node`) in words.
fn output_text(name: &str, node: usize, o: &TraceOutput) -> String {
    match o {
        TraceOutput::Send { to, msg } => {
            let label = Delivered::of(msg).label(node as u8);
            format!("{name} sends {label} to {to}")
        }
        TraceOutput::Granted { lock, mode } => format!("{name} is granted {mode} on L{lock}"),
        TraceOutput::Upgraded { lock } => format!("{name} is upgraded to W on L{lock}"),
        TraceOutput::WouldBlock { lock, mode } => {
            format!("{name} is refused {mode} on L{lock} (would block)")
        }
        TraceOutput::Cancelled { lock } => format!("{name} cancelled its request of L{lock}"),
        TraceOutput::Downgraded { lock, mode } => format!("{name} downgraded L{lock} to {mode}"),
        TraceOutput::Converted { lock, mode } => format!("{name} converted L{lock} to {mode}"),
        TraceOutput::ConvertBusy { lock, mode } => {
            format!("{name} is refused the conversion of L{lock} to {mode} (busy)")
        }
        TraceOutput::Blocking { lock, mode, prio } => {
            format!("{name} is told a request for {mode} (priority {prio}) waits on L{lock}")
        }
    }
}

fn open_l<const L: usize>(model: &BaseModel<L>, trace: &Trace) -> Result<Opened, String> {
    let cfg = &model.cfg;
    // A trace the checker wrote names its configuration: one of another is refused even
    // where its steps would replay (a variant that changes nothing on its path, another
    // script that starts the same way), since its verdict is about that configuration.
    if let Some(n) = source_config(trace).filter(|n| *n != cfg.name) {
        return Err(format!(
            "the trace is of configuration '{n}', not '{}': open it with that configuration",
            cfg.name
        ));
    }
    if trace.nodes.len() != cfg.nodes {
        return Err(format!(
            "the trace has {} nodes, configuration '{}' has {}",
            trace.nodes.len(),
            cfg.name,
            cfg.nodes
        ));
    }
    let init = model.init_states().remove(0);
    let mut st = init.clone();
    let mut actions = Vec::new();
    let mut texts = Vec::new();
    for (i, step) in trace.steps.iter().enumerate() {
        let node = trace
            .nodes
            .iter()
            .position(|n| *n == step.node)
            .ok_or_else(|| format!("step {i}: unknown node '{}'", step.node))?;
        let mut enabled = Vec::new();
        model.actions(&st, &mut enabled);
        let candidates: Vec<Action> = enabled
            .iter()
            .filter(|a| fits(&st, &trace.nodes, node, &step.input, a))
            .copied()
            .collect();
        // The step must also do what the trace recorded: the same outputs, error and
        // state of the node afterwards.
        let does = |a: &Action| {
            crate::check::record_step(&st, *a, &trace.nodes, i).map(|r| {
                let mut differs = Vec::new();
                if r.outputs != step.outputs {
                    let text = |o: &[TraceOutput]| {
                        let t: Vec<String> =
                            o.iter().map(|o| output_text(&step.node, node, o)).collect();
                        if t.is_empty() {
                            "nothing".to_string()
                        } else {
                            t.join("; ")
                        }
                    };
                    differs.push(format!(
                        "it outputs {}, the trace records {}",
                        text(&r.outputs),
                        text(&step.outputs)
                    ));
                }
                if r.error != step.error {
                    let text = |e: &Option<String>| match e {
                        Some(e) => format!("the error '{e}'"),
                        None => "no error".to_string(),
                    };
                    differs.push(format!(
                        "it gives {}, the trace records {}",
                        text(&r.error),
                        text(&step.error)
                    ));
                }
                if r.state != step.state {
                    differs.push(format!(
                        "{}'s state afterwards is {}, the trace records {}",
                        step.node,
                        r.state.line(),
                        step.state.line()
                    ));
                }
                differs
            })
        };
        // Each candidate stepped once: what differs from the record (`None`: a delivery
        // that finds no message there).
        let differences: Vec<Option<Vec<String>>> = candidates.iter().map(does).collect();
        let doing = differences
            .iter()
            .position(|d| d.as_ref().is_some_and(|d| d.is_empty()));
        if let (Some(first), None) = (differences.first(), doing) {
            let differs = first.clone().unwrap_or_default().join("; ");
            return Err(format!(
                "step {i} ({}) does not do what the trace recorded in configuration '{}': \
                 {differs}",
                input_text(&step.node, &step.input),
                cfg.name
            ));
        }
        let Some(a) = doing.map(|k| candidates[k]) else {
            let what: Vec<String> = enabled.iter().map(|a| a.to_string()).collect();
            return Err(format!(
                "step {i} ({}) cannot happen in configuration '{}'; enabled there: {}",
                input_text(&step.node, &step.input),
                cfg.name,
                if what.is_empty() {
                    "nothing".to_string()
                } else {
                    what.join("; ")
                }
            ));
        };
        st = model
            .next_state(&st, a)
            .ok_or_else(|| format!("step {i} ({a}) is refused by the model"))?;
        texts.push(a.to_string());
        actions.push(a);
    }
    let path = Path::from_actions(model, init, actions.iter())
        .ok_or_else(|| "the replayed path is not a path of the model".to_string())?;
    let last = path.last_state().clone();
    // A trace that records a property violated must end where it is.
    if let Some(p) = trace
        .verdict
        .as_deref()
        .and_then(|v| v.split_once(" violated"))
        .map(|(p, _)| p)
        .filter(|p| crate::token::SAFETY.contains(p))
    {
        if crate::token::why_violated(model, &last, p).is_none() {
            return Err(format!(
                "the trace records {p} violated, but its last state (after {} steps) in \
                 configuration '{}' does not violate it",
                trace.steps.len(),
                cfg.name
            ));
        }
    }
    // The P6 bounds measure the least bound k; a state past one is not a failure.
    let violated = model
        .properties()
        .into_iter()
        .filter(|p| {
            p.expectation == stateright::Expectation::Always
                && !crate::token::BYPASS.contains(&p.name)
                && !(p.condition)(model, &last)
        })
        .map(|p| p.name.to_string())
        .collect();
    let witness = trace
        .verdict
        .as_ref()
        .filter(|v| v.starts_with(crate::check::WITNESS_VERDICT))
        .cloned();
    Ok(Opened {
        encoded: path.encode(model),
        steps: actions.len(),
        violated,
        witness,
        texts,
    })
}

/// The sequence diagram of a `hilock-trace/1` trace, its steps in words and, per step,
/// its details: every message drawn from the step that sent it to the step that delivered
/// it (the ones never delivered as in flight after the last step), a dot per user
/// operation; each step's outputs (the messages it sent, the grants) and then every
/// node's state of each lock after it (a node that has not stepped yet is in its initial
/// state). Rows and steps are numbered as the trace numbers its steps, from 0.
pub fn trace_diagram(t: &Trace) -> (Diagram, Vec<String>, Vec<Vec<String>>) {
    let lane = |n: &str| t.nodes.iter().position(|x| x == n).unwrap_or(0);
    let mut d = Diagram::new(t.nodes.clone());
    let mut texts = Vec::new();
    let mut details = Vec::new();
    // (node, lock) → the node's state of that lock after its last step on it.
    let mut states: std::collections::BTreeMap<(usize, u16), String> = Default::default();
    for step in &t.steps {
        let node = lane(&step.node);
        let line = input_text(&step.node, &step.input);
        let lock = match &step.input {
            TraceInput::Deliver { from, msg, copy } => {
                let f = lane(from);
                let label = Delivered::of(msg).label(f as u8);
                if *copy {
                    d.deliver_copy(f, node, &format!("{msg:?}"), format!("{label} (a copy)"));
                } else {
                    d.deliver(f, node, &format!("{msg:?}"), label);
                }
                msg.lock().0
            }
            TraceInput::Acquire { lock, .. }
            | TraceInput::TryAcquire { lock, .. }
            | TraceInput::Cancel { lock }
            | TraceInput::Downgrade { lock, .. }
            | TraceInput::Convert { lock, .. }
            | TraceInput::SetValue { lock, .. }
            | TraceInput::Release { lock }
            | TraceInput::Upgrade { lock } => {
                d.local(node, line.split_once(' ').map_or("", |x| x.1).to_string());
                *lock
            }
            TraceInput::SetPriority { .. } => {
                d.local(node, line.split_once(' ').map_or("", |x| x.1).to_string());
                0
            }
        };
        let mut lines = Vec::new();
        for o in &step.outputs {
            if let TraceOutput::Send { to, msg } = o {
                let label = Delivered::of(msg).label(node as u8);
                d.send(node, lane(to), format!("{msg:?}"), label);
            }
            lines.push(output_text(&step.node, node, o));
        }
        if let Some(e) = &step.error {
            lines.push(format!("rejected: {e}"));
        }
        states.insert((node, lock), step.state.line());
        for (i, n) in t.nodes.iter().enumerate() {
            let known: Vec<String> = states
                .range((i, 0)..=(i, u16::MAX))
                .map(|((_, l), st)| format!("L{l} {st}"))
                .collect();
            lines.push(if known.is_empty() {
                format!("{n}: initial state")
            } else {
                format!("{n}: {}", known.join("; "))
            });
        }
        texts.push(line);
        details.push(lines);
    }
    (d, texts, details)
}

/// The first step of `t` that names a node the trace does not list (as its stepping node,
/// a delivery's sender or a message's receiver), in words.
fn unknown_node(t: &Trace) -> Option<String> {
    let known = |n: &str| t.nodes.iter().any(|x| x == n);
    t.steps.iter().enumerate().find_map(|(i, step)| {
        let from = match &step.input {
            TraceInput::Deliver { from, .. } => Some(from.as_str()),
            _ => None,
        };
        let to = step.outputs.iter().filter_map(|o| match o {
            TraceOutput::Send { to, .. } => Some(to.as_str()),
            _ => None,
        });
        // The state it records names nodes too: its parent, its children, its queue's
        // requesters (`NODE:MODE`).
        let st = &step.state;
        let queued = st
            .queue
            .iter()
            .map(|e| e.rsplit_once(':').map_or(e.as_str(), |(n, _)| n));
        std::iter::once(step.node.as_str())
            .chain(from)
            .chain(to)
            .chain(st.parent.as_deref())
            .chain(st.children.keys().map(String::as_str))
            .chain(queued)
            .find(|n| !known(n))
            .map(|n| {
                format!(
                    "step {i}: unknown node '{n}' (the trace's nodes are {})",
                    t.nodes.join(", ")
                )
            })
    })
}

/// A saved trace drawn: what [`diagram_of`] returns.
#[derive(Clone, Debug)]
pub struct Drawn {
    /// The trace's source and verdict (or model, property and violation).
    pub title: String,
    /// Its sequence diagram.
    pub diagram: Diagram,
    /// Its steps in words, from step 0.
    pub steps: Vec<String>,
    /// Per step, what it output and the sites' states after it.
    pub details: Vec<Vec<String>>,
}

/// The sequence diagram of a saved trace of any model, its steps in words and each step's
/// details: a `hilock-trace/1` trace as [`trace_diagram`] draws it; the other models'
/// traces from their action texts (`A2 → S0: …` is an arrow, `u0: …` a dot on u0's line,
/// `r1 handles c2's …` an arrow from c2 to r1), with each step's other recorded fields (the
/// servers', agents', clients' or replicas' states, …) as its details.
pub fn diagram_of(text: &str) -> Result<Drawn, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON trace: {e}"))?;
    if format_of(&v) == Some(TRACE_FORMAT) {
        let t = parse_base_trace(text)?;
        unknown_node(&t).map_or(Ok(()), Err)?;
        let (diagram, steps, details) = trace_diagram(&t);
        let title = format!(
            "{}{}",
            t.source,
            t.verdict.map(|v| format!(": {v}")).unwrap_or_default()
        );
        return Ok(Drawn {
            title,
            diagram,
            steps,
            details,
        });
    }
    let Some(format) = format_of(&v) else {
        return Err(format!(
            "no \"format\" field: an older or foreign trace, not {TRACE_FORMAT} or a model trace"
        ));
    };
    if model_of_format(format) == "an unknown model" {
        return Err(format!("unknown trace format '{format}'"));
    }
    let steps = v
        .get("steps")
        .and_then(|s| s.as_array())
        .ok_or_else(|| format!("a {format} trace without steps"))?;
    // A step is an object with its `action` (none for a fault trace's last state) or,
    // in a ring trace, the action's text itself. Anything else is not a step.
    let ring = format == crate::ring::TRACE_FORMAT;
    if let Some((i, _)) = steps.iter().enumerate().find(|(_, s)| match s {
        serde_json::Value::String(_) => !ring,
        serde_json::Value::Object(o) => o.get("action").is_some_and(|a| !a.is_string()),
        _ => true,
    }) {
        return Err(format!(
            "step {i} of this {format} trace is not a step (an object with a text \
             \"action\"{})",
            if ring { ", or the action's text" } else { "" }
        ));
    }
    let mut texts: Vec<String> = steps
        .iter()
        .filter_map(|s| s.as_str().or_else(|| s.get("action")?.as_str()))
        .map(str::to_string)
        .collect();
    let mut details: Vec<Vec<String>> = steps
        .iter()
        .filter(|s| s.is_string() || s.get("action").is_some_and(|a| a.is_string()))
        .map(step_details)
        .collect();
    if format == crate::faults::TRACE_FORMAT {
        // A fault trace records at each step the state its action is taken from, and the
        // last (violating) state as a step without an action: the state after step k is
        // the one recorded at step k + 1, one line per node and message.
        details = (0..texts.len())
            .map(|k| {
                steps
                    .get(k + 1)
                    .and_then(|s| s.get("state")?.as_array())
                    .map(|lines| {
                        lines
                            .iter()
                            .filter_map(|l| l.as_str())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect();
    }
    if format == crate::ring::TRACE_FORMAT {
        // Its steps are the actions' Rust expressions (`Deliver(Client(…), Node(…), …)`):
        // replayed through the configuration the trace embeds, they read as the model
        // words them (`c2 → n21: Request Lock`), and are drawn as the other models' are.
        // A trace that does not replay keeps its steps as they are, without a diagram.
        let replayed = v
            .get("config")
            .and_then(|c| serde_json::from_value::<RingModel>(c.clone()).ok())
            .and_then(|c| open_other(&OtherConfig::Ring(c), &v).ok());
        match replayed {
            Some(o) => texts = o.texts,
            None => {
                let title = format!(
                    "ring — {}: {}",
                    v.get("property").and_then(|m| m.as_str()).unwrap_or(""),
                    v.get("violation").and_then(|m| m.as_str()).unwrap_or("")
                );
                return Ok(Drawn {
                    title,
                    diagram: Diagram::default(),
                    steps: texts,
                    details,
                });
            }
        }
    }
    // Lanes in order of appearance, clients and agents first.
    let mut d = Diagram::default();
    let lane = |d: &mut Diagram, name: &str| match d.lanes.iter().position(|l| l == name) {
        Some(i) => i,
        None => {
            d.lanes.push(name.to_string());
            d.lanes.len() - 1
        }
    };
    for t in &texts {
        // `A2 → S0: request /1 R [queue]` (agents), `D → A request IW on L_i` (inversion).
        let arrow = t
            .split_once(" → ")
            .filter(|(a, _)| !a.contains(' '))
            .and_then(|(a, rest)| {
                rest.split_once(' ')
                    .map(|(b, l)| (a, b.trim_end_matches(':'), l))
            });
        if let Some((a, b, label)) = arrow {
            let (a, b) = (lane(&mut d, a), lane(&mut d, b));
            let label = label.split_once(" [").map_or(label, |x| x.0);
            d.message(a, b, label);
        } else if let Some(what) = t.strip_prefix("the membership service ") {
            // The fault model's oracle (`… installs the next epoch`, `the current plan
            // reaches n1 again`) has a lane of its own.
            let at = lane(&mut d, "membership");
            d.local(at, what);
        } else if let Some(n) = t
            .strip_prefix("the current plan reaches ")
            .and_then(|r| r.strip_suffix(" again"))
        {
            let (m, n) = (lane(&mut d, "membership"), lane(&mut d, n));
            d.message(m, n, "the current plan again");
        } else if let Some((who, label)) = t.split_once(": ") {
            let at = lane(&mut d, who);
            d.local(at, label);
        } else if let Some((r, rest)) = t.split_once(" handles ") {
            if let Some((c, label)) = rest.split_once("'s ") {
                let (c, r) = (lane(&mut d, c), lane(&mut d, r));
                d.message(c, r, label);
            }
        } else if let Some((who, what)) = t.split_once(' ') {
            let at = lane(&mut d, who);
            d.local(at, what);
        }
    }
    let title = format!(
        "{} — {}: {}",
        v.get("model")
            .and_then(|m| m.as_str())
            .unwrap_or(if format == crate::ring::TRACE_FORMAT {
                "ring"
            } else {
                format
            }),
        v.get("property").and_then(|m| m.as_str()).unwrap_or(""),
        v.get("violation").and_then(|m| m.as_str()).unwrap_or("")
    );
    Ok(Drawn {
        title,
        diagram: d,
        steps: texts,
        details,
    })
}

/// A model trace step's recorded fields other than its index and action, one line each:
/// `servers: S0=A1:/1W*, S1=…` (an object's entries), `outputs: S0 → A2: info …; …` (a
/// list of texts), `in_flight: 6`.
fn step_details(step: &serde_json::Value) -> Vec<String> {
    let Some(fields) = step.as_object() else {
        return Vec::new();
    };
    let value = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(a) if a.iter().all(|x| x.is_string()) => a
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join("; "),
        other => other.to_string(),
    };
    fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "index" | "action"))
        .map(|(k, v)| match v.as_object() {
            Some(o) if o.is_empty() => format!("{k}: (none)"),
            Some(o) => {
                let entries: Vec<String> =
                    o.iter().map(|(n, x)| format!("{n}={}", value(x))).collect();
                format!("{k}: {}", entries.join(", "))
            }
            None => format!("{k}: {}", value(v)),
        })
        .collect()
}

/// A name as part of a file name: `P1 mutual exclusion` → `p1-mutual-exclusion`.
/// Every other character is a hyphen, one for a run of them, none at either end
/// (`P17 a …, once per hold` → `p17-a-…-once-per-hold`).
pub fn slug(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.is_empty() && !s.ends_with('-') {
            s.push('-');
        }
    }
    while s.ends_with('-') {
        s.pop();
    }
    s
}

/// Writes the configuration and every counterexample of `report` into `dir`
/// (`<slug>.config.json`, `<slug>.<property>.trace.json`) and returns, per counterexample,
/// the command that opens it in the Explorer and the URL of its failing state: what a
/// failing check in `cargo test -p verify` prints.
pub fn save_for_explorer(
    cfg: &ModelConfig,
    report: &crate::check::CheckReport,
    dir: &FsPath,
) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name = slug(&cfg.name);
    let config = dir.join(format!("{name}.config.json"));
    let json = serde_json::to_string_pretty(cfg).map_err(|e| e.to_string())?;
    std::fs::write(&config, json + "\n").map_err(|e| format!("{}: {e}", config.display()))?;
    let mut out = String::new();
    for p in &report.properties {
        let Some(trace) = &p.counterexample else {
            continue;
        };
        let file = dir.join(format!("{name}.{}.trace.json", slug(&p.name)));
        let json = serde_json::to_string_pretty(trace).map_err(|e| e.to_string())?;
        std::fs::write(&file, json + "\n").map_err(|e| format!("{}: {e}", file.display()))?;
        let opened = open_base(cfg, trace)?;
        out.push_str(&format!("counterexample of '{}':\n", p.name));
        out.push_str(&how_to_open(&config, &file, &opened.encoded));
    }
    Ok(out)
}

// ------------------------------------------------------------------ the other models

/// A configuration of one of the other models as a file: `{"model": "tree", …}`,
/// `"agents"`, `"bakery"`, `"inversion"`, `"ring"` or `"faults"` (a base-model
/// configuration has no `model` field).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum OtherConfig {
    /// Preston & Prasad tree locking.
    Tree(TreeConfig),
    /// Wiger's agents and lock servers.
    Agents(AgentsConfig),
    /// The bakery (its configuration as a bakery trace embeds it).
    Bakery(BakeryModel),
    /// The priority-inversion model (P7).
    Inversion(InversionConfig),
    /// The Chord-placed lock service (the paper's Fig. 2 or hilock's replicated server).
    Ring(RingModel),
    /// The token protocol under crashes, partitions and restarts (one lock).
    Faults(FaultConfig),
}

/// A tree-locking configuration ([`TreeModel::new`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeConfig {
    /// Name.
    pub name: String,
    /// Height of the complete tree.
    pub height: u32,
    /// Per user, its leaves by their slide-10 paths (`"01"`), or `["*"]`.
    pub choices: Vec<Vec<String>>,
    /// Rounds per user.
    pub rounds: u8,
    /// Algorithm variant.
    pub variant: TreeVariant,
}

/// One lock of an agent's script.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentLockConfig {
    /// The path's keys (`[1]` is `/1`).
    pub path: Vec<u16>,
    /// `Read` or `Write`.
    pub mode: LockMode,
    /// The servers, as a bit set.
    pub servers: u32,
    /// `All`, `Any` or `Majority`.
    pub req: Req,
}

/// One agent's script.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentScriptConfig {
    /// Its locks in order.
    pub locks: Vec<AgentLockConfig>,
    /// `abort_on_deadlock`.
    #[serde(default)]
    pub abort_on_deadlock: bool,
}

/// An agents configuration ([`AgentsModel::new`] and its variants).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// Name.
    pub name: String,
    /// Number of servers.
    pub servers: u16,
    /// The agents' scripts.
    pub scripts: Vec<AgentScriptConfig>,
    /// Agent variant (the seed's if absent).
    #[serde(default = "seed_agent")]
    pub agent_variant: AgentVariant,
    /// Server variant (the seed's if absent).
    #[serde(default = "seed_server")]
    pub server_variant: ServerVariant,
    /// Delivery.
    #[serde(default = "fifo_per_pair")]
    pub delivery: Delivery,
    /// Bound on the servers' version counters.
    #[serde(default = "forty")]
    pub max_version: u32,
    /// A server that may crash.
    #[serde(default)]
    pub crash: Option<u16>,
    /// Clients may give up while they wait ([`AgentsModel::give_up`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub give_up: bool,
}

fn seed_agent() -> AgentVariant {
    AgentVariant::SEED
}
fn seed_server() -> ServerVariant {
    ServerVariant::SEED
}
fn fifo_per_pair() -> Delivery {
    Delivery::FifoPerPair
}
fn forty() -> u32 {
    40
}

impl TreeConfig {
    /// The model.
    pub fn model(&self) -> Result<TreeModel, String> {
        let choices: Vec<Vec<&str>> = self
            .choices
            .iter()
            .map(|c| c.iter().map(String::as_str).collect())
            .collect();
        let refs: Vec<&[&str]> = choices.iter().map(Vec::as_slice).collect();
        TreeModel::new(&self.name, self.height, &refs, self.rounds, self.variant)
            .map_err(|e| format!("bad tree configuration: {e}"))
    }
}

impl AgentsConfig {
    /// The configuration's error, if its servers do not fit: no server, or a script or the
    /// crash naming a server that is not there.
    fn check_servers(&self) -> Result<(), String> {
        let n = u32::from(self.servers);
        if n == 0 {
            return Err("\"servers\": 0: an agents configuration needs at least one server".into());
        }
        let max = crate::agents::MAX_SERVERS_MODEL;
        if n as usize > max {
            return Err(format!(
                "\"servers\": {n}: the agents model has at most {max} servers"
            ));
        }
        let range = if n == 1 {
            "there is only S0".to_string()
        } else {
            format!("there are S0 to S{}", n - 1)
        };
        for (a, s) in self.scripts.iter().enumerate() {
            for (k, l) in s.locks.iter().enumerate() {
                if l.servers >> n != 0 {
                    let out = (n..32).find(|b| l.servers & (1 << b) != 0).unwrap_or(n);
                    return Err(format!(
                        "agent {a}'s lock {k} names server S{out} (\"servers\": {}, a bit set), \
                         but {range}",
                        l.servers
                    ));
                }
            }
        }
        if let Some(c) = self.crash.filter(|c| u32::from(*c) >= n) {
            return Err(format!("\"crash\": {c} names server S{c}, but {range}"));
        }
        Ok(())
    }

    /// The model.
    pub fn model(&self) -> Result<AgentsModel, String> {
        self.check_servers()
            .map_err(|e| format!("bad agents configuration: {e}"))?;
        let locks: Vec<Vec<ScriptLock>> = self
            .scripts
            .iter()
            .map(|s| {
                s.locks
                    .iter()
                    .map(|l| (l.path.as_slice(), l.mode, l.servers, l.req))
                    .collect()
            })
            .collect();
        let scripts: Vec<(&[ScriptLock], bool)> = locks
            .iter()
            .zip(&self.scripts)
            .map(|(l, s)| (l.as_slice(), s.abort_on_deadlock))
            .collect();
        let mut m = AgentsModel::new(&self.name, self.servers, &scripts)
            .map_err(|e| format!("bad agents configuration: {e}"))?
            .with_variants(self.agent_variant, self.server_variant, &self.name)
            .with_delivery(self.delivery, &self.name)
            .with_max_version(self.max_version);
        m.crash = self.crash;
        m.give_up = self.give_up;
        Ok(m)
    }
}

impl OtherConfig {
    /// The trace format of the model.
    pub fn trace_format(&self) -> &'static str {
        match self {
            OtherConfig::Tree(_) => "hilock-tree-trace/1",
            OtherConfig::Agents(_) => "hilock-agents-trace/1",
            OtherConfig::Bakery(_) => "hilock-bakery-trace/1",
            OtherConfig::Inversion(_) => "hilock-inversion-trace/1",
            OtherConfig::Ring(_) => crate::ring::TRACE_FORMAT,
            OtherConfig::Faults(_) => crate::faults::TRACE_FORMAT,
        }
    }

    /// The configuration's name.
    pub fn name(&self) -> String {
        match self {
            OtherConfig::Tree(c) => c.name.clone(),
            OtherConfig::Agents(c) => c.name.clone(),
            OtherConfig::Bakery(c) => c.name.clone(),
            OtherConfig::Inversion(c) => c.name(),
            OtherConfig::Ring(c) => c.name.clone(),
            OtherConfig::Faults(c) => c.name.clone(),
        }
    }

    /// The configuration's error, if its model cannot be built.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            OtherConfig::Tree(c) => c.model().map(drop),
            OtherConfig::Agents(c) => c.model().map(drop),
            // The sizes only pick the arrays; the rules checked do not depend on them.
            OtherConfig::Bakery(c) => BakerySystem::<3, 4>(c.clone()).validate(),
            OtherConfig::Inversion(c) => c.validate(),
            OtherConfig::Ring(c) => c.validate(),
            OtherConfig::Faults(c) => c.validate(),
        }
    }
}

/// Replays the steps of a model trace: each must be an enabled action whose text and
/// state afterwards `fits` the recorded step.
///
/// A trace that records an `always` property (`property`) violated must end in a state
/// that violates it, and `end` says what differs between the last state and the trace's
/// record of it, if anything.
fn replay_steps<M>(
    m: &M,
    name: &str,
    steps: &[serde_json::Value],
    fits: impl Fn(&M::State, &M::Action, &serde_json::Value) -> bool,
    property: Option<&str>,
    end: impl Fn(&M::State) -> Option<String>,
) -> Result<Opened, String>
where
    M: Model,
    M::State: Clone + PartialEq + std::fmt::Debug,
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    let init = m.init_states().remove(0);
    let mut st = init.clone();
    let mut actions = Vec::new();
    let mut texts = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let mut enabled = Vec::new();
        m.actions(&st, &mut enabled);
        let Some(a) = enabled.iter().find(|a| fits(&st, a, step)).cloned() else {
            let what: Vec<String> = enabled.iter().map(|a| m.format_action(a)).collect();
            return Err(format!(
                "step {i} ('{}') cannot happen in configuration '{name}'; enabled there: {}",
                step.as_str()
                    .or_else(|| step["action"].as_str())
                    .unwrap_or("?"),
                if what.is_empty() {
                    "nothing".to_string()
                } else {
                    what.join("; ")
                }
            ));
        };
        st = m
            .next_state(&st, a.clone())
            .ok_or_else(|| format!("step {i} is refused by the model"))?;
        texts.push(m.format_action(&a));
        actions.push(a);
    }
    let path = Path::from_actions(m, init, actions.iter())
        .ok_or_else(|| "the replayed path is not a path of the model".to_string())?;
    let last = path.last_state().clone();
    if let Some(differs) = end(&last) {
        return Err(format!(
            "the last state (after step {}) differs from the trace's in configuration \
             '{name}': {differs}",
            actions.len().saturating_sub(1)
        ));
    }
    let always: Vec<_> = m
        .properties()
        .into_iter()
        .filter(|p| p.expectation == stateright::Expectation::Always)
        .collect();
    let violated: Vec<String> = always
        .iter()
        .filter(|p| !(p.condition)(m, &last))
        .map(|p| p.name.to_string())
        .collect();
    if let Some(p) =
        property.filter(|p| always.iter().any(|q| q.name == *p) && !violated.iter().any(|v| v == p))
    {
        return Err(format!(
            "the trace records '{p}' violated, but its last state (after {} steps) in \
             configuration '{name}' does not violate it",
            actions.len()
        ));
    }
    Ok(Opened {
        encoded: path.encode(m),
        steps: actions.len(),
        violated,
        witness: None,
        texts,
    })
}

/// Replays a trace of one of the other models (its JSON) through `cfg`'s model.
pub fn open_other(cfg: &OtherConfig, trace: &serde_json::Value) -> Result<Opened, String> {
    match format_of(trace) {
        Some(f) if f == cfg.trace_format() => {}
        Some(f) => {
            return Err(format!(
                "a {f} trace ({}), but the configuration is of {} ({})",
                model_of_format(f),
                model_of_format(cfg.trace_format()),
                cfg.trace_format()
            ))
        }
        None => {
            return Err(format!(
                "no \"format\" field: an older or foreign trace, not {}",
                cfg.trace_format()
            ))
        }
    }
    let steps = trace
        .get("steps")
        .and_then(|s| s.as_array())
        .ok_or_else(|| format!("a {} trace without steps", cfg.trace_format()))?;
    let name = &cfg.name();
    if let Some(differs) = config_difference(cfg, trace)? {
        return Err(format!(
            "a trace of another configuration: {differs} (configuration '{name}')"
        ));
    }
    let property = trace.get("property").and_then(|p| p.as_str());
    match cfg {
        OtherConfig::Tree(c) => {
            let m = c.model()?;
            replay_steps(
                &m,
                name,
                steps,
                |s, a, j| m.fits_step(s, a, j),
                property,
                nothing,
            )
        }
        OtherConfig::Agents(c) => {
            let m = c.model()?;
            replay_steps(
                &m,
                name,
                steps,
                |s, a, j| m.fits_step(s, a, j),
                property,
                nothing,
            )
        }
        OtherConfig::Bakery(c) => bakery_open(c, name, steps, property),
        OtherConfig::Inversion(c) => {
            c.validate()?;
            replay_steps(
                c,
                name,
                steps,
                |s, a, j| c.fits_step(s, a, j),
                property,
                nothing,
            )
        }
        OtherConfig::Ring(c) => {
            c.validate()?;
            // Each step is the action's text (`format!("{a:?}")`), compared by `step_key`.
            replay_steps(
                c,
                name,
                steps,
                |_, a, j| {
                    j.as_str().map(crate::ring::step_key)
                        == Some(crate::ring::step_key(&format!("{a:?}")))
                },
                property,
                nothing,
            )
        }
        OtherConfig::Faults(c) => {
            c.validate()?;
            let m = c.clone().into_model();
            // Each step records the state before its action; the last step is the last
            // state, with no action after it.
            let lines = |st: &crate::faults::FState| -> serde_json::Value {
                format!("{st:?}").lines().collect::<Vec<_>>().into()
            };
            let (with, last): (Vec<serde_json::Value>, Vec<serde_json::Value>) = steps
                .iter()
                .cloned()
                .partition(|j| j.get("action").is_some());
            replay_steps(
                &m,
                name,
                &with,
                |st, a, j| {
                    j["action"].as_str() == Some(a.to_string().as_str())
                        && j.get("state") == Some(&lines(st))
                },
                property,
                |st| {
                    let recorded = last.last()?.get("state")?;
                    let ours = lines(st);
                    (*recorded != ours)
                        .then(|| format!("the model's is {ours}, the trace records {recorded}"))
                },
            )
        }
    }
}

/// Nothing differs (a model whose trace does not record its last state apart).
fn nothing<S>(_: &S) -> Option<String> {
    None
}

/// Where the configuration a trace embeds (its `config`; a tree trace's `height` and
/// `variant`, an agents trace's variants and delivery) differs from `cfg`, in words: the
/// first field that differs, its name aside (`None`: the same, or nothing embedded).
fn config_difference(
    cfg: &OtherConfig,
    trace: &serde_json::Value,
) -> Result<Option<String>, String> {
    use serde_json::{json, Value};
    // Parsed and written again, so that fields left at their defaults compare equal.
    fn normal<T: Serialize + serde::de::DeserializeOwned>(
        embedded: Option<&Value>,
        ours: &T,
    ) -> Result<Option<(Value, Value)>, String> {
        let Some(e) = embedded else {
            return Ok(None);
        };
        let theirs: T = serde_json::from_value(e.clone())
            .map_err(|e| format!("the trace's configuration does not parse: {e}"))?;
        let to = |v: &T| serde_json::to_value(v).map_err(|e| e.to_string());
        Ok(Some((to(&theirs)?, to(ours)?)))
    }
    let pair = match cfg {
        OtherConfig::Ring(c) => normal(trace.get("config"), c)?,
        OtherConfig::Faults(c) => normal(trace.get("config"), c)?,
        OtherConfig::Bakery(c) => normal(trace.get("config"), c)?,
        OtherConfig::Inversion(c) => normal(trace.get("config"), c)?,
        OtherConfig::Tree(c) => Some((
            json!({"height": trace.get("height"), "variant": trace.get("variant")}),
            json!({"height": c.height, "variant": c.variant}),
        )),
        OtherConfig::Agents(c) => Some((
            json!({
                "agent_variant": trace.get("agent_variant"),
                "server_variant": trace.get("server_variant"),
                "delivery": trace.get("delivery"),
            }),
            json!({
                "agent_variant": format!("{:?}", c.agent_variant),
                "server_variant": format!("{:?}", c.server_variant),
                "delivery": c.delivery,
            }),
        )),
    };
    let Some((Value::Object(theirs), Value::Object(ours))) = pair else {
        return Ok(None);
    };
    let keys: std::collections::BTreeSet<&String> = theirs.keys().chain(ours.keys()).collect();
    let show = |v: Option<&Value>| v.map_or("absent".to_string(), Value::to_string);
    let differs = keys
        .into_iter()
        .filter(|k| k.as_str() != "name")
        .find(|k| theirs.get(*k) != ours.get(*k))
        .map(|k| {
            format!(
                "its \"{k}\" is {}, the configuration's is {}",
                show(theirs.get(k)),
                show(ours.get(k))
            )
        });
    Ok(differs)
}

fn bakery_open(
    c: &BakeryModel,
    name: &str,
    steps: &[serde_json::Value],
    property: Option<&str>,
) -> Result<Opened, String> {
    fn go<const K: usize, const C: usize>(
        m: BakerySystem<K, C>,
        name: &str,
        steps: &[serde_json::Value],
        property: Option<&str>,
    ) -> Result<Opened, String> {
        m.validate()?;
        replay_steps(
            &m,
            name,
            steps,
            |s, a, j| m.fits_step(s, a, j),
            property,
            nothing,
        )
    }
    let m = c.clone();
    match m.sizes() {
        (1, 3) => go(BakerySystem::<1, 3>(m), name, steps, property),
        (1, 4) => go(BakerySystem::<1, 4>(m), name, steps, property),
        (2, 3) => go(BakerySystem::<2, 3>(m), name, steps, property),
        (2, 4) => go(BakerySystem::<2, 4>(m), name, steps, property),
        (3, 3) => go(BakerySystem::<3, 3>(m), name, steps, property),
        _ => go(BakerySystem::<3, 4>(m), name, steps, property),
    }
}

/// Serves the Stateright Explorer for one of the other models on `addr` (blocks while the
/// server runs).
pub fn explore_other(cfg: &OtherConfig, addr: std::net::SocketAddr) -> Result<(), String> {
    drop(std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?);
    match cfg {
        OtherConfig::Tree(c) => {
            c.model()?.checker().serve(addr);
        }
        OtherConfig::Agents(c) => {
            c.model()?.checker().serve(addr);
        }
        OtherConfig::Inversion(c) => {
            c.validate()?;
            c.checker().serve(addr);
        }
        OtherConfig::Ring(c) => {
            c.validate()?;
            c.clone().checker().serve(addr);
        }
        OtherConfig::Faults(c) => {
            c.validate()?;
            c.clone().into_model().checker().serve(addr);
        }
        OtherConfig::Bakery(c) => {
            fn serve<const K: usize, const C: usize>(
                m: BakerySystem<K, C>,
                addr: std::net::SocketAddr,
            ) -> Result<(), String> {
                m.validate()?;
                m.checker().serve(addr);
                Ok(())
            }
            let m = c.clone();
            match m.sizes() {
                (1, 3) => serve(BakerySystem::<1, 3>(m), addr)?,
                (1, 4) => serve(BakerySystem::<1, 4>(m), addr)?,
                (2, 3) => serve(BakerySystem::<2, 3>(m), addr)?,
                (2, 4) => serve(BakerySystem::<2, 4>(m), addr)?,
                (3, 3) => serve(BakerySystem::<3, 3>(m), addr)?,
                _ => serve(BakerySystem::<3, 4>(m), addr)?,
            }
        }
    }
    Ok(())
}

/// `hilock check` on a configuration of one of the other models ([`OtherConfig`]): the
/// report as text, whether every `always` and `eventually` property holds, and each
/// counterexample as its property and its trace (the model's trace format, which
/// [`open_other`] and `hilock explore --trace` open).
#[derive(Debug)]
pub struct OtherCheck {
    /// Configuration name, counts and one line per property.
    pub text: String,
    /// Every `always` and `eventually` property holds.
    pub ok: bool,
    /// (property, trace) for each property that fails.
    pub traces: Vec<(String, serde_json::Value)>,
    /// Wall time of the check (not in `text`, which is the same on every run).
    pub elapsed: std::time::Duration,
}

impl OtherCheck {
    /// `bound`: the depth below which a check of a configuration with no end to its states
    /// searched ([`crate::check::check_model`]), which the text then says.
    fn of<C: Serialize>(
        r: crate::check::ModelReport<C>,
        bound: Option<usize>,
    ) -> Result<OtherCheck, String> {
        let mut text = format!(
            "{}: {} unique states ({} generated, depth {})\n",
            r.config, r.unique_states, r.states, r.max_depth
        );
        let mut traces = Vec::new();
        let width = crate::check::name_column(&r.properties);
        for p in &r.properties {
            text.push_str(&p.line_in(width));
            if let Some(t) = &p.counterexample {
                let v =
                    serde_json::to_value(t).map_err(|e| format!("cannot encode a trace: {e}"))?;
                // What is wrong at the counterexample's last state, in the model's words.
                if let Some(why) = v.get("violation").and_then(|w| w.as_str()) {
                    text.push_str(&format!("    {why}\n"));
                }
                traces.push((p.name.clone(), v));
            }
        }
        if let Some(bound) = bound {
            text.push_str(&format!(
                "searched every state of depth below {bound} ({}× the depth of the first \
                 violation; a configuration that breaks a property can have no end to its \
                 states): the verdicts above hold for those\n",
                crate::check::DEPTH_AFTER_VIOLATION
            ));
        }
        Ok(OtherCheck {
            ok: r.ok(),
            text,
            traces,
            elapsed: r.elapsed,
        })
    }
}

/// Checks `cfg` exhaustively (breadth-first, one thread: the same counterexamples on every
/// run) with every property of its model. `progress` is called as in
/// [`crate::check::check`] for the inversion, ring and fault models (the tree, agents and
/// bakery checks report only at the end).
pub fn check_other(
    cfg: &OtherConfig,
    progress: impl FnMut(usize, usize, usize),
) -> Result<OtherCheck, String> {
    use crate::check::check_model;
    match cfg {
        // Every model alike: progress, and a failing configuration's search stops at its
        // first violation and then goes on only to a bound (a saved counterexample's full
        // space can be too large to search).
        OtherConfig::Tree(c) => {
            let m = c.model()?;
            let (report, bound) = check_model(&m, &c.name, |p, path| m.trace(p, path), progress);
            OtherCheck::of(report, bound)
        }
        OtherConfig::Agents(c) => {
            let m = c.model()?;
            let (report, bound) = check_model(&m, &c.name, |p, path| m.trace(p, path), progress);
            OtherCheck::of(report, bound)
        }
        OtherConfig::Bakery(c) => {
            cfg.validate()?;
            let (report, bound) = c.check_with_progress(progress);
            OtherCheck::of(report, bound)
        }
        OtherConfig::Inversion(c) => {
            c.validate()?;
            let (report, bound) = check_model(c, &c.name(), |p, path| c.trace(p, path), progress);
            OtherCheck::of(report, bound)
        }
        OtherConfig::Ring(c) => {
            c.validate()?;
            let (report, bound) = check_model(c, &c.name, |p, path| c.trace(p, path), progress);
            OtherCheck::of(report, bound)
        }
        OtherConfig::Faults(c) => {
            c.validate()?;
            let m = c.clone().into_model();
            let (report, bound) = check_model(&m, &c.name, |p, path| m.trace(p, path), progress);
            OtherCheck::of(report, bound)
        }
    }
}
