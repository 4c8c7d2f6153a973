//! The trace format: the steps of a run (input, messages sent, state after), as JSON.
//!
//! Scenario runs, model-checker counterexamples and runtime recordings all use it, and
//! `hilock replay` prints one step by step.

use crate::system::SpecMsg;
use hilock_harness::{Step, StepError};
use hilock_kernel::{LockId, Mode, NodeId, Output, Pending, Site};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format tag of a trace file.
pub const TRACE_FORMAT: &str = "hilock-trace/1";

/// A whole trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// Always [`TRACE_FORMAT`].
    pub format: String,
    /// What produced the trace (scenario name, model configuration, …).
    pub source: String,
    /// Node names, indexed by node id.
    pub nodes: Vec<String>,
    /// The steps in order.
    pub steps: Vec<TraceStep>,
    /// Optional verdict (e.g. the property a counterexample violates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

/// What a step's input was.
// A delivered message is inline (since the value block, `spec/SPEC.md` 1.15, a `Grant` or
// `Token` is some 200 bytes): traces are built and read a step at a time, never stored in
// bulk in memory, so a box would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceInput {
    /// User API `RequestLock`.
    Acquire {
        /// The lock.
        lock: u16,
        /// The mode.
        mode: Mode,
    },
    /// hilock's try-lock (`spec/SPEC.md` 1.12).
    TryAcquire {
        /// The lock.
        lock: u16,
        /// The mode.
        mode: Mode,
    },
    /// hilock's cancel (`spec/SPEC.md` 1.13).
    Cancel {
        /// The lock.
        lock: u16,
    },
    /// hilock's downgrade (`spec/SPEC.md` 1.14).
    Downgrade {
        /// The lock.
        lock: u16,
        /// The weaker mode.
        mode: Mode,
    },
    /// hilock's conversion (`spec/SPEC.md` 1.17).
    Convert {
        /// The lock.
        lock: u16,
        /// The mode asked for.
        mode: Mode,
        /// Whether it may wait (`Input::Convert::wait`).
        #[serde(default)]
        wait: bool,
    },
    /// hilock's lock value block (`spec/SPEC.md` 1.15): the W holder writes a block whose
    /// every byte is `value` (the models write small values).
    SetValue {
        /// The lock.
        lock: u16,
        /// Every byte of the block written.
        value: u8,
    },
    /// User API `RequestUnlock`.
    Release {
        /// The lock.
        lock: u16,
    },
    /// User API `RequestUpgrade`.
    Upgrade {
        /// The lock.
        lock: u16,
    },
    /// A new base priority β (chapter 3).
    SetPriority {
        /// The base priority.
        base: u8,
    },
    /// A message delivered from `from`.
    Deliver {
        /// Sender name.
        from: String,
        /// The message.
        msg: SpecMsg,
        /// A copy the network delivered while the original stayed in flight (a duplicating
        /// network); absent: the message itself.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        copy: bool,
    },
}

/// One step of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStep {
    /// Position in the trace (0-based).
    pub index: usize,
    /// The node that stepped.
    pub node: String,
    /// Its input.
    pub input: TraceInput,
    /// Messages it sent and grants it signalled.
    pub outputs: Vec<TraceOutput>,
    /// The kernel's rejection, if the input was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The stepping node's state of the lock after the step.
    pub state: NodeSnapshot,
}

impl TraceStep {
    /// Step `index` of a run through the harness: `node` took `input` and the harness
    /// answered `r` (its outputs, or the kernel's rejection), and `site` is that node
    /// afterwards, whose state of `lock` the step records.
    pub fn of<const N: usize, const L: usize, const Q: usize>(
        index: usize,
        node: NodeId,
        input: TraceInput,
        r: &Result<Step<SpecMsg>, StepError>,
        site: &Site<N, L, Q>,
        lock: LockId,
        names: &[String],
    ) -> Self {
        let outputs: &[Output<SpecMsg>] = r.as_ref().map_or(&[], |s| &s.outputs);
        TraceStep {
            index,
            node: names[node.idx()].clone(),
            input,
            outputs: outputs
                .iter()
                .map(|o| TraceOutput::from_output(o, names))
                .collect(),
            error: r.as_ref().err().map(|e| match e.kernel() {
                Some(k) => k.to_string(),
                None => e.to_string(),
            }),
            state: NodeSnapshot::of(site, lock, names),
        }
    }
}

/// An output of a step, with node names.
// A sent message is inline, as in [`TraceInput`].
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceOutput {
    /// A message sent.
    Send {
        /// Destination name.
        to: String,
        /// The message.
        msg: SpecMsg,
    },
    /// The local request was granted.
    Granted {
        /// The lock.
        lock: u16,
        /// The mode now held.
        mode: Mode,
    },
    /// The local upgrade completed.
    Upgraded {
        /// The lock.
        lock: u16,
    },
    /// The local try-lock was refused (`spec/SPEC.md` 1.12).
    WouldBlock {
        /// The lock.
        lock: u16,
        /// The mode tried.
        mode: Mode,
    },
    /// The local cancel was accepted (`spec/SPEC.md` 1.13).
    Cancelled {
        /// The lock.
        lock: u16,
    },
    /// The local downgrade was accepted (`spec/SPEC.md` 1.14).
    Downgraded {
        /// The lock.
        lock: u16,
        /// The mode now held.
        mode: Mode,
    },
    /// The local conversion was done in place (`spec/SPEC.md` 1.17).
    Converted {
        /// The lock.
        lock: u16,
        /// The mode now held.
        mode: Mode,
    },
    /// The local conversion was refused; the hold is unchanged (`spec/SPEC.md` 1.17).
    ConvertBusy {
        /// The lock.
        lock: u16,
        /// The mode asked for.
        mode: Mode,
    },
    /// A request for a conflicting mode waits for the local hold (`spec/SPEC.md` 1.16).
    Blocking {
        /// The lock.
        lock: u16,
        /// The waiting mode.
        mode: Mode,
        /// Its priority.
        prio: u8,
    },
}

impl TraceOutput {
    /// Converts a kernel output, naming nodes with `names`.
    pub fn from_output(o: &Output<SpecMsg>, names: &[String]) -> Self {
        match o {
            Output::Send { to, msg } => TraceOutput::Send {
                to: name(names, to.idx()),
                msg: msg.clone(),
            },
            Output::Granted { lock, mode } => TraceOutput::Granted {
                lock: lock.0,
                mode: *mode,
            },
            Output::Upgraded { lock } => TraceOutput::Upgraded { lock: lock.0 },
            Output::WouldBlock { lock, mode } => TraceOutput::WouldBlock {
                lock: lock.0,
                mode: *mode,
            },
            Output::Cancelled { lock } => TraceOutput::Cancelled { lock: lock.0 },
            Output::Downgraded { lock, mode } => TraceOutput::Downgraded {
                lock: lock.0,
                mode: *mode,
            },
            Output::Converted { lock, mode } => TraceOutput::Converted {
                lock: lock.0,
                mode: *mode,
            },
            Output::ConvertBusy { lock, mode } => TraceOutput::ConvertBusy {
                lock: lock.0,
                mode: *mode,
            },
            Output::Blocking { lock, mode, prio } => TraceOutput::Blocking {
                lock: lock.0,
                mode: *mode,
                prio: *prio,
            },
        }
    }
}

/// A node's view of one lock, with names instead of ids: the (M_O, M_H, M_P) tuple of the
/// thesis figures, the token, the parent, the copyset, the queue and the frozen modes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Whether the node holds the token.
    pub token: bool,
    /// Parent name (`null` at the token node).
    pub parent: Option<String>,
    /// Owned mode M_O.
    pub owned: Mode,
    /// Held mode M_H.
    pub held: Mode,
    /// Pending mode M_P.
    pub pending: Mode,
    /// Children and their recorded owned modes (the copyset).
    pub children: BTreeMap<String, Mode>,
    /// Local queue, head first, as `NODE:MODE`.
    pub queue: Vec<String>,
    /// Frozen modes.
    pub frozen: Vec<Mode>,
    /// Non-zero thresholds of frozen modes (Rule 6_PRIO), by mode name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thresholds: BTreeMap<String, u8>,
}

impl NodeSnapshot {
    /// The snapshot of `lock` at `site`.
    pub fn of<const N: usize, const L: usize, const Q: usize>(
        site: &Site<N, L, Q>,
        lock: LockId,
        names: &[String],
    ) -> Self {
        let Ok(n) = site.lock(lock) else {
            return NodeSnapshot::empty();
        };
        NodeSnapshot {
            token: n.has_token(),
            parent: n
                .parent()
                .filter(|_| !n.has_token())
                .map(|p| name(names, p.idx())),
            owned: n.owned(),
            held: n.held(),
            pending: match n.pending() {
                Pending::None => Mode::Phi,
                Pending::Request(e) | Pending::Try(e) => e.mode,
                Pending::Upgrade => Mode::W,
                Pending::Convert(m) => m,
            },
            children: n
                .children()
                .map(|(c, m)| (name(names, c.idx()), m))
                .collect(),
            queue: n
                .queue()
                .iter()
                .map(|e| format!("{}:{}", name(names, e.requester.idx()), e.mode.name()))
                .collect(),
            frozen: n.frozen().iter().collect(),
            thresholds: n
                .frozen()
                .iter()
                .filter_map(|m| {
                    let t = n.frozen_thresholds().threshold(m)?;
                    (t > 0).then(|| (m.name().to_string(), t))
                })
                .collect(),
        }
    }

    fn empty() -> Self {
        NodeSnapshot {
            token: false,
            parent: None,
            owned: Mode::Phi,
            held: Mode::Phi,
            pending: Mode::Phi,
            children: BTreeMap::new(),
            queue: vec![],
            frozen: vec![],
            thresholds: BTreeMap::new(),
        }
    }

    /// One line in the thesis notation: `(M_O, M_H, M_P)` plus token, parent, copyset,
    /// queue and frozen modes.
    pub fn line(&self) -> String {
        let mut s = format!("({}, {}, {})", self.owned, self.held, self.pending);
        if self.token {
            s.push_str(" token");
        }
        if let Some(p) = &self.parent {
            s.push_str(&format!(" parent={p}"));
        }
        if !self.children.is_empty() {
            let c: Vec<String> = self
                .children
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect();
            s.push_str(&format!(" children={{{}}}", c.join(",")));
        }
        if !self.queue.is_empty() {
            s.push_str(&format!(" queue=[{}]", self.queue.join(",")));
        }
        if !self.frozen.is_empty() {
            let f: Vec<String> = self
                .frozen
                .iter()
                .map(|m| match self.thresholds.get(m.name()) {
                    Some(t) => format!("{m}@{t}"),
                    None => m.to_string(),
                })
                .collect();
            s.push_str(&format!(" frozen={{{}}}", f.join(",")));
        }
        s
    }
}

/// Name of node `i`, or `n<i>` if unnamed.
pub fn name(names: &[String], i: usize) -> String {
    names.get(i).cloned().unwrap_or_else(|| format!("n{i}"))
}

/// One-line human description of a message.
pub fn describe_msg(m: &SpecMsg, names: &[String]) -> String {
    use hilock_kernel::Msg;
    match m {
        Msg::Request { entry, .. } if entry.prio > 0 => format!(
            "Request({} {} prio {})",
            name(names, entry.requester.idx()),
            entry.mode,
            entry.prio
        ),
        Msg::Request { entry, .. } => format!(
            "Request({} {})",
            name(names, entry.requester.idx()),
            entry.mode
        ),
        Msg::Grant { entry, frozen, .. } => {
            if frozen.is_empty() {
                format!("Grant({})", entry.mode)
            } else {
                format!("Grant({}, frozen {})", entry.mode, frozen)
            }
        }
        Msg::Token {
            entry,
            queue,
            sender_owned,
            ..
        } => {
            let q: Vec<String> = queue
                .iter()
                .map(|e| format!("{}:{}", name(names, e.requester.idx()), e.mode))
                .collect();
            format!(
                "Token({}, sender owns {}, queue [{}])",
                entry.mode,
                sender_owned,
                q.join(",")
            )
        }
        Msg::Release { owned, .. } => format!("Release(now owns {owned})"),
        Msg::Freeze { modes, .. } => format!("Freeze({modes})"),
        Msg::TryRequest { entry, .. } => format!(
            "TryRequest({} {})",
            name(names, entry.requester.idx()),
            entry.mode
        ),
        Msg::Busy { entry, .. } => format!(
            "Busy({} {})",
            name(names, entry.requester.idx()),
            entry.mode
        ),
    }
}

impl Trace {
    /// A human-readable rendering, one line per step.
    pub fn render(&self) -> String {
        let mut s = format!("trace of {}\n", self.source);
        for st in &self.steps {
            let input = match &st.input {
                TraceInput::Acquire { mode, .. } => format!("acquire {mode}"),
                TraceInput::TryAcquire { mode, .. } => format!("try {mode}"),
                TraceInput::Cancel { .. } => "cancel".to_string(),
                TraceInput::Downgrade { mode, .. } => format!("downgrade {mode}"),
                TraceInput::Convert { mode, wait, .. } => {
                    format!("{}convert {mode}", if *wait { "" } else { "try-" })
                }
                TraceInput::SetValue { value, .. } => format!("write {value}"),
                TraceInput::Release { .. } => "release".to_string(),
                TraceInput::Upgrade { .. } => "upgrade".to_string(),
                TraceInput::SetPriority { base } => format!("priority {base}"),
                TraceInput::Deliver { from, msg, copy } => {
                    let copy = if *copy { " (a copy)" } else { "" };
                    format!("from {from}: {}{copy}", describe_msg(msg, &self.nodes))
                }
            };
            s.push_str(&format!("{:>3}. {:<3} {input}\n", st.index, st.node));
            for o in &st.outputs {
                let line = match o {
                    TraceOutput::Send { to, msg } => {
                        format!("-> {to}: {}", describe_msg(msg, &self.nodes))
                    }
                    TraceOutput::Granted { mode, .. } => format!("granted {mode}"),
                    TraceOutput::Upgraded { .. } => "upgraded to W".to_string(),
                    TraceOutput::WouldBlock { mode, .. } => format!("would block ({mode})"),
                    TraceOutput::Cancelled { .. } => "cancelled".to_string(),
                    TraceOutput::Downgraded { mode, .. } => format!("downgraded to {mode}"),
                    TraceOutput::Converted { mode, .. } => format!("converted to {mode}"),
                    TraceOutput::ConvertBusy { mode, .. } => {
                        format!("conversion to {mode} refused (busy)")
                    }
                    TraceOutput::Blocking { mode, prio, .. } => {
                        format!("blocking: a request for {mode} (priority {prio}) waits")
                    }
                };
                s.push_str(&format!("          {line}\n"));
            }
            if let Some(e) = &st.error {
                s.push_str(&format!("          rejected: {e}\n"));
            }
            s.push_str(&format!("          {} now {}\n", st.node, st.state.line()));
        }
        if let Some(v) = &self.verdict {
            s.push_str(&format!("verdict: {v}\n"));
        }
        s
    }
}
