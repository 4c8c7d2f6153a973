//! The base protocol (thesis chapter 2) as a Stateright model that drives `hilock-kernel`
//! sites: no rule is re-implemented here. The model only runs each node's script, routes
//! the `Send` outputs of every step into the network, delivers messages in every order the
//! network allows, and keeps the ghost history the properties need.
//!
//! A configuration is a value ([`ModelConfig`], serde JSON) with [`ModelConfig::into_model`].
//!
//! # State
//! The sites (the kernel's own state, unchanged), the per-node script position, the
//! network — per ordered pair of nodes a FIFO queue, or for the unordered network the same
//! multiset kept sorted by a content hash (canonical: delivery order is not state) — and the
//! ghost history of the outstanding requests (for P6) and of what the last step did (for
//! the `sometimes` properties). Every script is finite and the kernel's per-link counters
//! (request hop numbers, attachment epochs, token generations) only grow, so no state
//! repeats on a path: the state graph is acyclic. On the FIFO network it is also finite
//! (the checker terminates without any bound). On the unordered network a request can
//! overtake the token it chases and be forwarded between two nodes for ever, so unordered
//! configurations set [`ModelConfig::max_messages`] (a boundary) and are checked up to it.
//!
//! # Properties (names as in `docs/engines/token.md`, "Properties")
//! - `P1 mutual exclusion`: no two sites hold modes of a lock that conflict by the literal
//!   Table 2.1 ([`hilock_kernel::token::tables::TABLE_2_1`], not the kernel's `conflicts`).
//! - `P2 single token`: per lock, tokens at sites + `Token` messages in flight = 1.
//! - `P3 owned-mode invariant` (invariant 2.2): for every lock and every node `c` that is
//!   not the token node, with parent `p`: if no `Release`, `Grant` or `Token` of that lock is
//!   in flight between `c` and `p` (either direction), then on FIFO channels `p`'s record
//!   of `c` *equals* `c`'s owned mode `M_O(c)` (so a weakening such as R → IR must reach the
//!   parent, Rule 5.2), and on the unordered network it *covers* it: the record is at least
//!   as strong (inequation 2.1) and every mode that conflicts with `M_O(c)` (Table 2.1) also
//!   conflicts with the record. (With U = IW in strength this excludes a record IW for an
//!   owned U.) By induction up the tree every node then owns a mode covering every mode held
//!   in its subtree.
//! - `P3b frozen-mode invariant` (invariant 2.3): for the same quiet links (no message of
//!   the lock in flight either way) and a child with a non-Φ record, every mode the parent
//!   has frozen that the child could grant (`tables::grantable_set` of the record) is frozen
//!   at the child with at least the parent's threshold. Deleting a freeze to children (Rule
//!   6, in `LockNode::finish_freeze` or when the token arrives in `LockNode::on_token`)
//!   breaks it. Checked on FIFO channels (on the unordered network a freeze can overtake
//!   the grant that makes its receiver a child, and is then dropped as stale).
//! - `P4 no deadlock`, safety over quiescent states: in a state with no enabled action (the
//!   network is empty and every script is finished or blocked on its request) no site has a
//!   pending request.
//! - `P5 liveness`, also over quiescent states: every script ran to its end and every
//!   request it made was granted. Where the state graph is acyclic and finite (FIFO) every
//!   maximal path ends in a quiescent state, so this is exactly "every request is
//!   eventually granted and every script completes" on every path, without fairness.
//!   With a message bound, quiescent states within the bound are checked and paths cut by
//!   the bound are not: there it is only a partial check.
//!   (`Property::eventually` is not used: Stateright 0.31 can miss its counterexamples at
//!   DAG joins, see its test `fixme_can_miss_counterexample_when_revisiting_a_state`.)
//! - `no kernel error`: the kernel accepted every input the model gave it.
//! - `P10 fencing tokens increase`: of two grants (or completed upgrades) of one lock in
//!   conflicting modes, the later carries the larger fencing token
//!   ([`hilock_kernel::LockNode::fence`]; the harness's ghost history,
//!   `Cluster::check_fences`).
//! - `P6 FIFO bypass ≤ k` for k = 0..=7: a request *arrives* when it first sits in the
//!   token node's queue or is granted (by the token node, by a copy-granting child, or
//!   locally by Rule 2); an upgrade arrives when it is issued. A waiting request `r` is
//!   *bypassed* by a grant to another node in a mode that conflicts with `r`'s mode for a
//!   request that arrived after `r`. The bound holds if no request is bypassed more than k
//!   times; [`crate::check::CheckReport::fifo_bound`] is the least k that holds.
//! - `P9 bounded forwarding` (`spec/SPEC.md` 1.6): a request's *journey* starts when its
//!   requester sends it (Rule 2, or a PIP reissue) or when a node that had queued it sends
//!   it on (a stranded request, Decision 4(c) of `spec/SPEC.md` 1.4), and ends where it is
//!   queued, served (granted, copy-granted, token) or dropped as stale. P9 holds if every
//!   journey has at most [`forward_bound`]`(n) = n − 1` `Request` messages (the requester's
//!   send plus at most n − 2 forwards) *plus one per token transfer of the lock during the
//!   journey* (a token in flight when it starts counts): between token moves the parent
//!   pointers form a tree rooted at the token node, and each move can put the root one step
//!   further away (a request chasing the token: `n2 → n0 → n1 → n0` in a star of 3, where
//!   n − 1 = 2 alone fails). The ghost counter [`State::excess`] keeps, per outstanding
//!   request, messages minus token moves of its current journey; the check is
//!   `excess ≤ n − 1`. Stated for FIFO channels: on the unordered network a request can
//!   overtake the token it chases and be forwarded between two nodes for ever
//!   (`spec/SPEC.md` 1.6). A journey is that of the newest copy of a request: the copy a
//!   PIP reissue leaves behind (lower priority) is not counted.
//! - `P11`, `P12` (try-lock, `spec/SPEC.md` 1.12) and `P14 no grant after Cancel`,
//!   `P15 a cancel leaves nothing` (cancel, 1.13): the harness's properties
//!   (`hilock_harness::properties`) over its ghost of refused tries and cancelled requests.
//!   A `cancel` script operation races the answer to the operation before it: it is enabled
//!   while that request is pending and skipped once the answer came.
//! - `sometimes` properties, so a pass cannot be vacuous: a copy grant by a non-token node,
//!   a token transfer, local queueing (Table 2.3 Q at a non-token node), a freeze delivered
//!   (and applied), an upgrade completed, an idle relay's shortcut taken (only under
//!   [`hilock_kernel::Forwarding::Compress`]), a try refused, a cancelled request
//!   completed.

use hilock_harness::{Cluster, Order};
use hilock_kernel::token::tables::table_2_1;
use hilock_kernel::{
    Frozen, Input, KernelError, LockId, Mode, Msg, MsgKind, NodeId, Output, Pending, Rule, Variant,
    VALUE_LEN,
};
use hilock_spec::system::{ModelSite, SpecMsg, MODEL_NODES};
use hilock_spec::trace::describe_msg;
use serde::{Deserialize, Serialize};
use stateright::{Model, Path, Property};
use std::fmt;

/// Largest number of nodes of a configuration (the model sites' capacity,
/// [`hilock_spec::system::MODEL_NODES`]).
pub const MAX_NODES: usize = MODEL_NODES;
/// Largest number of locks of a configuration.
pub const MAX_LOCKS: usize = 2;
/// Largest FIFO bypass bound the model checks for (`P6 FIFO bypass ≤ 0` … `≤ 7`).
pub const MAX_BYPASS: u8 = 7;

/// The network between the sites.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Per-pair FIFO channels (the thesis assumption).
    #[default]
    Fifo,
    /// Any message in flight may be delivered next; no duplication, no loss.
    Unordered,
}

impl Network {
    /// The channel order of the harness.
    pub fn order(self) -> Order {
        match self {
            Network::Fifo => Order::Fifo,
            Network::Unordered => Order::Unordered,
        }
    }
}

/// One operation of a node's script, written `acquire MODE [@LOCK]`, `try MODE [@LOCK]`,
/// `cancel [@LOCK]`, `downgrade MODE [@LOCK]`, `convert MODE [@LOCK]`, `try-convert MODE
/// [@LOCK]`, `write V [@LOCK]`, `release [@LOCK]` or `upgrade [@LOCK]` in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ScriptOp {
    /// `RequestLock(mode)`; the script waits until it is granted.
    Acquire(Mode, u16),
    /// `try MODE`: hilock's try-lock (`Input::TryAcquire`, `spec/SPEC.md` 1.12); the
    /// script waits for the answer. Granted, it goes on; refused (`WouldBlock`), it skips
    /// its next operation if that is the `release` of the same lock.
    Try(Mode, u16),
    /// `cancel`: hilock's cancel (`Input::Cancel`, `spec/SPEC.md` 1.13) of the request, try
    /// or upgrade of the lock that the script's previous operation made. It races the
    /// answer: the checker may run it at any point while that request is pending; if the
    /// grant (or the try's refusal, or the completed upgrade) comes first, the cancel is
    /// skipped. Cancelled (`Cancelled`), the script goes on without waiting and skips its
    /// next operation if that is the `release` of the same lock (not after an upgrade:
    /// U is still held).
    Cancel(u16),
    /// `downgrade MODE`: hilock's downgrade (`Input::Downgrade`, `spec/SPEC.md` 1.14) of
    /// the mode the script holds to the weaker `MODE`; answered at once (`Downgraded`),
    /// the script goes on holding `MODE` (its next `release` releases it).
    Downgrade(Mode, u16),
    /// `convert MODE` (`wait`) or `try-convert MODE`: hilock's conversion (`Input::Convert`,
    /// `spec/SPEC.md` 1.17) of the mode the script holds to `MODE`. `try-convert` is
    /// answered at once: converted (`Converted`, or `Downgraded` for a weaker mode) or
    /// refused (`ConvertBusy`, the old mode still held). `convert` may wait at the token
    /// node (`Pending::Convert`): the script then waits for `Converted`, as for an upgrade
    /// (a `cancel` may withdraw it). The script goes on holding what it holds (its next
    /// `release` releases it); refused, it skips its next operation if that is a `write`
    /// of the same lock (only W writes).
    Convert(Mode, u16, bool),
    /// `write V`: hilock's lock value block (`Input::SetValue`, `spec/SPEC.md` 1.15): the
    /// script, holding W, writes a block whose every byte is `V` (small values, 1–3, keep
    /// the state space small); no answer, the script goes on.
    Write(u8, u16),
    /// `RequestUnlock()`.
    Release(u16),
    /// `RequestUpgrade()` (Rule 7); the script waits until it completes.
    Upgrade(u16),
    /// `priority N`: set the node's base priority β (chapter 3; with PIP/PCEP in the
    /// configuration's variant this may raise ξ and reissue pending requests, Fig. 3.8).
    Priority(u8),
}

impl ScriptOp {
    /// The lock of the operation.
    pub fn lock(self) -> u16 {
        match self {
            ScriptOp::Acquire(_, l)
            | ScriptOp::Try(_, l)
            | ScriptOp::Cancel(l)
            | ScriptOp::Downgrade(_, l)
            | ScriptOp::Convert(_, l, _)
            | ScriptOp::Write(_, l)
            | ScriptOp::Release(l)
            | ScriptOp::Upgrade(l) => l,
            ScriptOp::Priority(_) => 0,
        }
    }
}

impl TryFrom<String> for ScriptOp {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl std::str::FromStr for ScriptOp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use hilock_spec::scenario::Op;
        // Each form reads as `acquire …` or `release …`; an error names what was written,
        // not the rewritten text.
        let unknown = || {
            format!(
                "unknown operation '{s}' (expected 'acquire MODE', 'try MODE', 'release', \
                 'upgrade', 'downgrade MODE', 'convert MODE', 'try-convert MODE', 'cancel', \
                 'write V' (each with an optional @LOCK) or 'priority N')"
            )
        };
        let parse = |text: &str| {
            Op::parse(text).map_err(|e| {
                if e.starts_with("unknown operation") {
                    unknown()
                } else {
                    e
                }
            })
        };
        if let Some(rest) = s.trim_start().strip_prefix("try ") {
            // `try MODE [@LOCK]` reads as `acquire MODE [@LOCK]`.
            return match parse(&format!("acquire {rest}"))? {
                Op::Acquire(m, l) => Ok(ScriptOp::Try(m, l)),
                _ => Err(unknown()),
            };
        }
        if let Some(rest) = s.trim_start().strip_prefix("downgrade ") {
            // `downgrade MODE [@LOCK]` reads as `acquire MODE [@LOCK]`.
            return match parse(&format!("acquire {rest}"))? {
                Op::Acquire(m, l) => Ok(ScriptOp::Downgrade(m, l)),
                _ => Err(unknown()),
            };
        }
        for (word, wait) in [("convert ", true), ("try-convert ", false)] {
            if let Some(rest) = s.trim_start().strip_prefix(word) {
                // `[try-]convert MODE [@LOCK]` reads as `acquire MODE [@LOCK]`.
                return match parse(&format!("acquire {rest}"))? {
                    Op::Acquire(m, l) => Ok(ScriptOp::Convert(m, l, wait)),
                    _ => Err(unknown()),
                };
            }
        }
        if let Some(rest) = s.trim().strip_prefix("write ") {
            // `write V [@LOCK]`: V is a byte, the lock reads as in `release [@LOCK]`.
            let (v, lock) = rest.split_once(' ').unwrap_or((rest, ""));
            let v: u8 = v
                .parse()
                .map_err(|_| format!("'{s}': the value is a number 0..=255"))?;
            return match parse(format!("release {lock}").trim_end())? {
                Op::Release(l) => Ok(ScriptOp::Write(v, l)),
                _ => Err(unknown()),
            };
        }
        if let Some(rest) = s.trim().strip_prefix("cancel") {
            // `cancel [@LOCK]` reads as `release [@LOCK]`.
            return match parse(&format!("release{rest}"))? {
                Op::Release(l) => Ok(ScriptOp::Cancel(l)),
                _ => Err(unknown()),
            };
        }
        let op = parse(s)?;
        match op {
            Op::Acquire(m, l) => Ok(ScriptOp::Acquire(m, l)),
            Op::Release(l) => Ok(ScriptOp::Release(l)),
            Op::Upgrade(l) => Ok(ScriptOp::Upgrade(l)),
            Op::Priority(p) => Ok(ScriptOp::Priority(p)),
        }
    }
}

impl From<ScriptOp> for String {
    fn from(op: ScriptOp) -> String {
        op.to_string()
    }
}

impl fmt::Display for ScriptOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, l) = match self {
            ScriptOp::Acquire(m, l) => (format!("acquire {}", m.name()), *l),
            ScriptOp::Try(m, l) => (format!("try {}", m.name()), *l),
            ScriptOp::Cancel(l) => ("cancel".to_string(), *l),
            ScriptOp::Downgrade(m, l) => (format!("downgrade {}", m.name()), *l),
            ScriptOp::Convert(m, l, true) => (format!("convert {}", m.name()), *l),
            ScriptOp::Convert(m, l, false) => (format!("try-convert {}", m.name()), *l),
            ScriptOp::Write(v, l) => (format!("write {v}"), *l),
            ScriptOp::Release(l) => ("release".to_string(), *l),
            ScriptOp::Upgrade(l) => ("upgrade".to_string(), *l),
            ScriptOp::Priority(p) => return write!(f, "priority {p}"),
        };
        if l == 0 {
            f.write_str(&s)
        } else {
            write!(f, "{s} @{l}")
        }
    }
}

fn one() -> usize {
    1
}

/// A model configuration: nodes, initial tree and token holder, scripts, network, variant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Short name (used in reports and traces).
    #[serde(default)]
    pub name: String,
    /// Number of nodes, 2 to 5.
    pub nodes: usize,
    /// Number of locks, 1 or 2 (every lock starts with the same tree).
    #[serde(default = "one")]
    pub locks: usize,
    /// The initial token holder of every lock.
    pub token: u16,
    /// Initial parent of every node (`parents[token]` must be `null`); the
    /// pointers must form a tree rooted at the token holder.
    pub parents: Vec<Option<u16>>,
    /// Per node, its script (`"acquire R"`, `"try W"`, `"release"`, `"upgrade"`,
    /// `"acquire W @1"`).
    pub scripts: Vec<Vec<ScriptOp>>,
    /// The network.
    #[serde(default)]
    pub network: Network,
    /// The protocol variant ([`Variant::HILOCK`] unless given).
    #[serde(default)]
    pub variant: Variant,
    /// Optional bound on the number of messages sent in a run: states beyond it are not
    /// explored (a Stateright boundary). Required on the unordered network
    /// ([`ModelConfig::validate`] refuses one without it), where a request can overtake
    /// the token it chases and be forwarded around forever (the state space is then
    /// infinite); `None` (the default, and what every FIFO configuration uses) explores
    /// everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u16>,
    /// How many times in a run the network may deliver a copy of a message in flight while
    /// the original stays in flight ([`Action::Duplicate`]; 0, the default: never). On the
    /// FIFO network the copy is of a channel's oldest message, so the message is delivered
    /// twice in a row on its channel.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicates: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl ModelConfig {
    /// A configuration on the FIFO network running [`Variant::HILOCK`], one lock; `parents`
    /// as in [`ModelConfig::parents`], scripts as strings.
    ///
    /// # Panics
    /// If a script operation does not parse.
    pub fn new(name: &str, token: u16, parents: &[Option<u16>], scripts: &[&[&str]]) -> Self {
        ModelConfig {
            name: name.to_string(),
            nodes: parents.len(),
            locks: 1,
            token,
            parents: parents.to_vec(),
            scripts: scripts
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|op| op.parse().unwrap_or_else(|e| panic!("{e}")))
                        .collect()
                })
                .collect(),
            network: Network::Fifo,
            variant: Variant::HILOCK,
            max_messages: None,
            duplicates: 0,
        }
    }

    /// A star of `n` nodes around node 0 (the token holder).
    pub fn star(name: &str, scripts: &[&[&str]]) -> Self {
        let parents: Vec<Option<u16>> = (0..scripts.len()).map(|i| (i != 0).then_some(0)).collect();
        Self::new(name, 0, &parents, scripts)
    }

    /// A chain 0 ← 1 ← 2 ← … of `n` nodes, token at node 0.
    pub fn chain(name: &str, scripts: &[&[&str]]) -> Self {
        let parents: Vec<Option<u16>> = (0..scripts.len())
            .map(|i| (i != 0).then(|| i as u16 - 1))
            .collect();
        Self::new(name, 0, &parents, scripts)
    }

    /// The same configuration with another network.
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// The same configuration with another protocol variant.
    pub fn with_variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// The same configuration on a network that duplicates up to `n` messages per run.
    pub fn with_duplicates(mut self, n: u8) -> Self {
        self.duplicates = n;
        self
    }

    /// The same configuration with at most `n` messages sent per run.
    pub fn with_max_messages(mut self, n: u16) -> Self {
        self.max_messages = Some(n);
        self
    }

    /// The same configuration with `locks` locks.
    pub fn with_locks(mut self, locks: usize) -> Self {
        self.locks = locks;
        self
    }

    /// The same configuration under another name.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Parses a JSON configuration.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let c: ModelConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    /// Checks sizes, the tree and the scripts.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.nodes;
        if !(2..=MAX_NODES).contains(&n) {
            return Err(format!("nodes must be 2 to {MAX_NODES}, not {n}"));
        }
        if !(1..=MAX_LOCKS).contains(&self.locks) {
            return Err(format!(
                "locks must be 1 or {MAX_LOCKS}, not {}",
                self.locks
            ));
        }
        if self.token as usize >= n {
            return Err(format!("token holder {} is not a node", self.token));
        }
        if self.parents.len() != n || self.scripts.len() != n {
            return Err(format!("parents and scripts must have {n} entries each"));
        }
        if let Some(p) = self.parents[self.token as usize] {
            return Err(format!(
                "parents[{t}] is {p}, but node {t} holds the token and has no parent: write null",
                t = self.token
            ));
        }
        for i in 0..n {
            if i == self.token as usize {
                continue;
            }
            // Follow the parent pointers to the token holder.
            let mut at = i;
            for _ in 0..=n {
                if at == self.token as usize {
                    break;
                }
                match self.parents[at] {
                    Some(p) if (p as usize) < n && p as usize != at => at = p as usize,
                    _ => return Err(format!("node {at} has no valid parent")),
                }
            }
            if at != self.token as usize {
                return Err(format!("the parents of node {i} form a cycle"));
            }
        }
        if self.network == Network::Unordered && self.max_messages.is_none() {
            return Err(
                "an unordered network needs max_messages: a request can overtake the \
                 token it chases and be forwarded between two nodes for ever, so the search \
                 would not end"
                    .into(),
            );
        }
        for (i, s) in self.scripts.iter().enumerate() {
            if s.len() > 250 {
                return Err(format!("script of node {i} is too long"));
            }
            if let Some(op) = s.iter().find(|op| op.lock() as usize >= self.locks) {
                return Err(format!("node {i}: '{op}' names a lock that does not exist"));
            }
            // A cancel withdraws what the operation before it left pending on its lock: a
            // request, try, upgrade or waiting conversion of that lock.
            for (k, op) in s.iter().enumerate() {
                let ScriptOp::Cancel(l) = *op else { continue };
                let cancels = k.checked_sub(1).and_then(|p| s.get(p)).is_some_and(|prev| {
                    prev.lock() == l
                        && matches!(
                            prev,
                            ScriptOp::Acquire(..)
                                | ScriptOp::Try(..)
                                | ScriptOp::Upgrade(_)
                                | ScriptOp::Convert(_, _, true)
                        )
                });
                if !cancels {
                    return Err(format!(
                        "node {i}: '{op}' (operation {k}) must follow an acquire, try, upgrade \
                         or convert of its lock: it withdraws what that operation left pending"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Parent of node `i` in the initial tree (`None` for the token holder).
    pub fn parent(&self, i: usize) -> Option<u16> {
        if i == self.token as usize {
            None
        } else {
            self.parents[i]
        }
    }

    /// The model with `L` locks (`L` must equal [`ModelConfig::locks`]).
    pub fn into_model_with<const L: usize>(self) -> Result<BaseModel<L>, String> {
        self.validate()?;
        if self.locks != L {
            return Err(format!("configuration has {} locks, not {L}", self.locks));
        }
        Ok(BaseModel { cfg: self })
    }

    /// The one-lock model (use [`ModelConfig::into_model_with`] for two locks, or the
    /// dispatching [`crate::check::check`]).
    pub fn into_model(self) -> Result<BaseModel<1>, String> {
        self.into_model_with::<1>()
    }
}

/// The model of a configuration, with `L` locks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BaseModel<const L: usize> {
    /// The configuration.
    pub cfg: ModelConfig,
}

/// A model action. Each carries what it does (the script operation, a summary of the
/// message delivered), so that the Explorer can name it without the state
/// ([`Model::format_action`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Node `node` runs its next script operation, `op`.
    Run {
        /// The node.
        node: u8,
        /// Its next script operation.
        op: ScriptOp,
    },
    /// Deliver the message at `index` of the channel `from → to` (always 0 on FIFO).
    Deliver {
        /// Sender.
        from: u8,
        /// Receiver.
        to: u8,
        /// Position in the channel.
        index: u8,
        /// The message.
        msg: Delivered,
    },
    /// Deliver a copy of the message at `index` of the channel `from → to`; the original
    /// stays in flight (a duplicating network, [`ModelConfig::duplicates`]).
    Duplicate {
        /// Sender.
        from: u8,
        /// Receiver.
        to: u8,
        /// Position in the channel.
        index: u8,
        /// The message.
        msg: Delivered,
    },
}

/// A summary of a delivered message (what an action label needs: kind, lock, mode,
/// requester, priority, frozen modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Delivered {
    /// Request, grant, token, release, freeze or busy.
    pub kind: MsgKind,
    /// A request that is a try request (`Msg::TryRequest`).
    pub tried: bool,
    /// The lock.
    pub lock: u16,
    /// The requester (request, grant, token).
    pub requester: u16,
    /// The requested mode (request, grant, token) or the sender's new owned mode
    /// (release).
    pub mode: Mode,
    /// The request's priority.
    pub prio: u8,
    /// Frozen modes carried (grant, token, freeze).
    pub frozen: Frozen,
}

impl Delivered {
    /// The summary of `m`.
    pub fn of(m: &SpecMsg) -> Self {
        let (requester, mode, prio, frozen) = match m {
            Msg::Request { entry, .. } => {
                (entry.requester.0, entry.mode, entry.prio, Frozen::default())
            }
            Msg::Grant { entry, frozen, .. } | Msg::Token { entry, frozen, .. } => {
                (entry.requester.0, entry.mode, entry.prio, *frozen)
            }
            Msg::Release { owned, .. } => (0, *owned, 0, Frozen::default()),
            Msg::Freeze { modes, .. } => (0, Mode::Phi, 0, *modes),
            Msg::TryRequest { entry, .. } | Msg::Busy { entry, .. } => {
                (entry.requester.0, entry.mode, entry.prio, Frozen::default())
            }
        };
        Delivered {
            kind: m.kind(),
            tried: matches!(m, Msg::TryRequest { .. }),
            lock: m.lock().0,
            requester,
            mode,
            prio,
            frozen,
        }
    }

    /// The message in words, as the sequence diagram labels it (`request W p=3 for n1`).
    pub fn label(&self, from: u8) -> String {
        self.label_with(from, |l| {
            if l == 0 {
                String::new()
            } else {
                format!(" @L{l}")
            }
        })
    }

    /// [`Delivered::label`] with the lock named by `lock` (a suffix such as `" on L_j"`).
    pub fn label_with(&self, from: u8, lock: impl Fn(u16) -> String) -> String {
        let lock = lock(self.lock);
        match self.kind {
            MsgKind::Request => {
                let what = if self.tried { "try request" } else { "request" };
                let mut s = format!("{what} {}{lock}", self.mode);
                if self.prio > 0 {
                    s.push_str(&format!(" p={}", self.prio));
                }
                if self.requester != u16::from(from) {
                    s.push_str(&format!(" for n{} (forwarded)", self.requester));
                }
                s
            }
            MsgKind::Grant if self.frozen.is_empty() => format!("grant {}{lock}", self.mode),
            MsgKind::Grant => format!("grant {}{lock}, frozen {}", self.mode, self.frozen),
            MsgKind::Token => format!("token for {}{lock}", self.mode),
            MsgKind::Release => format!("release{lock}, owns {} now", self.mode),
            MsgKind::Freeze => format!("freeze {}{lock}", self.frozen),
            MsgKind::Busy => format!("busy {}{lock} for n{}", self.mode, self.requester),
        }
    }
}

impl fmt::Display for Action {
    /// `n1 acquire R`, `n2 → n0 request W p=3 for n1 (forwarded)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Run { node, op } => write!(f, "n{node} {op}"),
            Action::Deliver { from, to, msg, .. } => {
                write!(f, "n{from} → n{to} {}", msg.label(*from))
            }
            Action::Duplicate { from, to, msg, .. } => {
                write!(f, "n{from} → n{to} {} (a copy)", msg.label(*from))
            }
        }
    }
}

/// What a model step applies at a node: a script operation, or the delivery of message
/// `index` of the channel from `from`.
#[derive(Clone, Copy, Debug)]
enum StepInput {
    User(ScriptOp),
    Deliver { from: u8, index: usize },
    Duplicate { from: u8, index: usize },
}

/// An output of a step as the ghost history sees it.
#[derive(Clone, Copy, Debug)]
enum Note {
    /// A message sent; for a grant or token: (requester, lock, serial, token?).
    Sent(Option<(NodeId, LockId, u32, bool)>),
    /// A `Request` sent: (requester, lock, serial, priority).
    Request(NodeId, LockId, u32, u8),
    Granted(LockId, Mode),
    Upgraded(LockId),
    WouldBlock(LockId),
    Cancelled(LockId),
    /// A conversion in place (`spec/SPEC.md` 1.17): a grant of the new mode to a holder.
    Converted(LockId, Mode),
    /// A conversion refused (`spec/SPEC.md` 1.17): the hold is unchanged.
    ConvertBusy(LockId),
    /// A downgrade answered (it keeps the hold) or a blocking notification: nothing to
    /// record.
    Downgraded,
}

/// Ghost record of one outstanding request (or upgrade) of a node for a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// Requested mode (W for an upgrade).
    pub mode: Mode,
    /// Arrival rank (1, 2, … among outstanding requests; 0: not arrived yet).
    pub arrival: u8,
    /// Grants of conflicting, later-arrived requests while this one waited.
    pub bypass: u8,
}

/// What the last step did (for the `sometimes` properties).
pub mod event {
    /// A non-token node sent a copy grant (Rule 3.1).
    pub const COPY_BY_CHILD: u16 = 1;
    /// The token was sent (Rule 3.2).
    pub const TOKEN_TRANSFER: u16 = 2;
    /// A non-token node queued another node's request (Rule 4.1, Table 2.3 Q).
    pub const LOCAL_QUEUE: u16 = 4;
    /// A delivered `Freeze` changed the receiver's frozen modes (Rule 6).
    pub const FREEZE_DELIVERED: u16 = 8;
    /// An upgrade U → W completed (Rule 7).
    pub const UPGRADED: u16 = 16;
    /// An idle relay used its shortcut ([`hilock_kernel::Forwarding::Compress`]).
    pub const SHORTCUT: u16 = 32;
    /// A try request was refused (`Output::WouldBlock`, `spec/SPEC.md` 1.12).
    pub const TRY_REFUSED: u16 = 64;
    /// A cancelled request's answer arrived and ended it (a grant or the token released
    /// at once, a busy answer dropped; `spec/SPEC.md` 1.13).
    pub const CANCEL_COMPLETED: u16 = 128;
    /// A conversion was done in place (`Output::Converted`, `spec/SPEC.md` 1.17).
    pub const CONVERTED: u16 = 256;
    /// A conversion was refused (`Output::ConvertBusy`, `spec/SPEC.md` 1.17).
    pub const CONVERT_REFUSED: u16 = 512;
    /// A conversion began to wait at the token node (`Pending::Convert`, `spec/SPEC.md`
    /// 1.17).
    pub const CONVERT_WAITED: u16 = 1024;
}

/// A state of the model.
#[derive(Clone, PartialEq, Eq)]
pub struct State<const L: usize> {
    /// The sites, the messages in flight and the first kernel error: the one harness.
    pub cluster: Cluster<ModelSite<L>>,
    /// Per node, the index of its next script operation.
    pub pc: [u8; MAX_NODES],
    /// Per node and lock (`n * L + l`), the outstanding request.
    pub reqs: [Option<Req>; MAX_NODES * MAX_LOCKS],
    /// [`event`] bits of the last step.
    pub events: u16,
    /// Messages sent so far (kept only when [`ModelConfig::max_messages`] is set).
    pub sent: u16,
    /// Copies the network delivered so far ([`Action::Duplicate`]).
    pub dups: u8,
    /// Per node and lock (`n * L + l`), for the outstanding request whose current journey
    /// is in progress: its `Request` messages minus the token transfers of the lock during
    /// it (a token in flight at its start counts); [`NOT_TRAVELLING`] otherwise (P9).
    pub excess: [i8; MAX_NODES * MAX_LOCKS],
}

impl<const L: usize> std::hash::Hash for State<L> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As derived, but the ghost requests packed into one word each (an injective
        // packing), so that they are hashed as one slice of integers.
        let reqs = self.reqs.map(|r| {
            r.map_or(0u32, |r| {
                1 << 24
                    | u32::from(r.mode as u8) << 16
                    | u32::from(r.arrival) << 8
                    | u32::from(r.bypass)
            })
        });
        self.cluster.hash(h);
        self.pc.hash(h);
        reqs.hash(h);
        self.events.hash(h);
        self.sent.hash(h);
        self.dups.hash(h);
        self.excess.hash(h);
    }
}

impl<const L: usize> State<L> {
    /// Whether node `n` waits for a grant or an upgrade.
    pub fn blocked(&self, n: usize) -> bool {
        self.reqs[n * L..(n + 1) * L].iter().any(|r| r.is_some())
    }

    /// The largest bypass count of any outstanding request.
    pub fn max_bypass(&self) -> u8 {
        self.reqs
            .iter()
            .flatten()
            .map(|r| r.bypass)
            .max()
            .unwrap_or(0)
    }

    /// Whether every journey in progress has at most `base` `Request` messages more than
    /// token transfers during it (P9 with `base` = [`forward_bound`]`(n)`).
    pub fn journeys_within(&self, base: usize) -> bool {
        self.excess
            .iter()
            .all(|&e| e == NOT_TRAVELLING || e <= 0 || e.unsigned_abs() as usize <= base)
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.cluster.in_flight()
    }
}

impl<const L: usize> fmt::Debug for State<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.cluster.sites().enumerate() {
            for (l, n) in s.locks().iter().enumerate() {
                write!(
                    f,
                    "n{i}@{l}: (M_O {}, M_H {}, M_P {})",
                    n.owned(),
                    n.held(),
                    n.pending_mode()
                )?;
                if n.has_token() {
                    f.write_str(" token")?;
                } else if let Some(p) = n.parent() {
                    write!(f, " parent n{}", p.0)?;
                }
                let ch: Vec<String> = n.children().map(|(c, m)| format!("{c}:{m}")).collect();
                if !ch.is_empty() {
                    write!(f, " children {{{}}}", ch.join(","))?;
                }
                let q: Vec<String> = n
                    .queue()
                    .iter()
                    .map(|e| format!("{}:{}", e.requester, e.mode))
                    .collect();
                if !q.is_empty() {
                    write!(f, " queue [{}]", q.join(","))?;
                }
                if !n.frozen().is_empty() {
                    write!(f, " frozen {}", n.frozen())?;
                }
                if let Some(r) = self.reqs[i * L + l] {
                    write!(
                        f,
                        " waits {} (arrival {}, bypassed {})",
                        r.mode, r.arrival, r.bypass
                    )?;
                }
                writeln!(f)?;
            }
            writeln!(f, "n{i}: script at {}", self.pc[i])?;
        }
        let names: Vec<String> = (0..self.cluster.len()).map(|i| format!("n{i}")).collect();
        for (a, b, m) in self.cluster.messages() {
            writeln!(
                f,
                "in flight n{} → n{}: {}",
                a.0,
                b.0,
                describe_msg(m, &names)
            )?;
        }
        if let Some(e) = self.cluster.error() {
            writeln!(f, "kernel error: {e}")?;
        }
        Ok(())
    }
}

pub use hilock_harness::covers;

impl<const L: usize> BaseModel<L> {
    fn n(&self) -> usize {
        self.cfg.nodes
    }

    /// Whether node `i` can run its next script operation: it has one, and it is not
    /// waiting for a grant — except that a `priority` operation runs at any time (a
    /// scheduler raises a waiting task's priority; that is what makes PIP reissue).
    pub fn runnable(&self, st: &State<L>, i: usize) -> bool {
        match self.next_op(st, i) {
            None => false,
            Some(ScriptOp::Priority(_)) => true,
            // A cancel runs only while the request it cancels is pending.
            Some(ScriptOp::Cancel(l)) => st.reqs[i * L + l as usize].is_some(),
            Some(op @ (ScriptOp::Acquire(..) | ScriptOp::Try(..))) => {
                !st.blocked(i) && !Self::waits_for_cancel(st, i, op)
            }
            Some(_) => !st.blocked(i),
        }
    }

    /// Whether `op` (an acquire or try) of node `i` must wait until a cancelled request of
    /// its lock has completed: the kernel takes a cancelled request back only for the same
    /// mode and kind, and refuses anything else (`KernelError::CancelRunning`,
    /// `spec/SPEC.md` 1.13) — a runtime waits then, and so does the model's user.
    fn waits_for_cancel(st: &State<L>, i: usize, op: ScriptOp) -> bool {
        let node = &st.cluster.site(NodeId(i as u16)).locks()[op.lock() as usize];
        if !node.cancelled() {
            return false;
        }
        !matches!(
            (op, node.pending()),
            (ScriptOp::Acquire(m, _), Pending::Request(e)) | (ScriptOp::Try(m, _), Pending::Try(e))
                if e.mode == m
        )
    }

    /// Node `n`'s request of `lock` was answered before its cancel ran: the script skips
    /// the cancel; a refused try (`refused`) also skips the release that follows.
    fn skip_after_answer(&self, st: &mut State<L>, n: usize, lock: LockId, refused: bool) {
        if self.next_op(st, n) == Some(ScriptOp::Cancel(lock.0)) {
            st.pc[n] += 1;
        }
        if refused && self.next_op(st, n) == Some(ScriptOp::Release(lock.0)) {
            st.pc[n] += 1;
        }
    }

    /// Whether no action is enabled: nothing in flight, no script can run.
    pub fn quiescent(&self, st: &State<L>) -> bool {
        st.cluster.in_flight() == 0 && self.idle(st)
    }

    /// Whether no script can run.
    fn idle(&self, st: &State<L>) -> bool {
        (0..self.n()).all(|i| !self.runnable(st, i))
    }

    fn next_arrival(st: &State<L>) -> u8 {
        st.reqs
            .iter()
            .flatten()
            .map(|r| r.arrival)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Marks the outstanding request of `n` for `l` as arrived (if it has not yet).
    fn arrive(st: &mut State<L>, n: usize, l: usize) {
        let a = Self::next_arrival(st);
        if let Some(r) = &mut st.reqs[n * L + l] {
            if r.arrival == 0 {
                r.arrival = a;
            }
        }
    }

    /// Node `n` was granted `mode` on `l` (or completed its upgrade): count the bypasses.
    fn granted(st: &mut State<L>, n: usize, l: usize, mode: Mode) {
        Self::arrive(st, n, l);
        st.excess[n * L + l] = NOT_TRAVELLING;
        let Some(me) = st.reqs[n * L + l].take() else {
            return;
        };
        for (i, r) in st.reqs.iter_mut().enumerate() {
            if i % L != l {
                continue;
            }
            if let Some(r) = r {
                if r.arrival != 0
                    && r.arrival < me.arrival
                    && (table_2_1(r.mode, mode) || table_2_1(mode, r.mode))
                {
                    r.bypass = r.bypass.saturating_add(1);
                }
            }
        }
    }

    /// Renumbers the arrival ranks 1, 2, … (only their order matters).
    fn normalise(st: &mut State<L>) {
        let mut ranks = [u8::MAX; MAX_NODES * MAX_LOCKS];
        let mut k = 0;
        for r in st.reqs.iter().flatten() {
            if r.arrival != 0 {
                ranks[k] = r.arrival;
                k += 1;
            }
        }
        let ranks = &mut ranks[..k];
        ranks.sort_unstable();
        for r in st.reqs.iter_mut().flatten() {
            if r.arrival != 0 {
                r.arrival = ranks.iter().position(|x| *x == r.arrival).unwrap_or(0) as u8 + 1;
            }
        }
    }

    /// One step of the harness at node `n` (a user input, or the delivery of message
    /// `index` of the channel `from → n`), and the ghost history.
    fn step(&self, st: &mut State<L>, n: usize, input: StepInput) {
        let node = NodeId(n as u16);
        // What the delivered message is (for the `sometimes` events).
        let (l, request, freeze) = match input {
            StepInput::User(op) => (op.lock() as usize, None, false),
            StepInput::Deliver { from, index } | StepInput::Duplicate { from, index } => {
                let Some(msg) = st.cluster.channel(NodeId(from as u16), node).nth(index) else {
                    return;
                };
                let request = match msg {
                    Msg::Request { entry, .. } => Some(*entry),
                    _ => None,
                };
                (msg.lock().idx(), request, matches!(msg, Msg::Freeze { .. }))
            }
        };
        let prev = &st.cluster.site(node).locks()[l];
        let (had_token, frozen_before) = (prev.has_token(), prev.frozen());
        let user = matches!(input, StepInput::User(_));
        st.events = 0;
        // The outputs the ghost history needs, in order (without copying the messages).
        let mut notes: heapless::Vec<Note, 64> = heapless::Vec::new();
        let mut see = |o: &Output<SpecMsg>| {
            let note = match o {
                Output::Send {
                    msg: Msg::Grant { entry, lock, .. },
                    ..
                } => Note::Sent(Some((entry.requester, *lock, entry.serial, false))),
                Output::Send {
                    msg: Msg::Token { entry, lock, .. },
                    ..
                } => Note::Sent(Some((entry.requester, *lock, entry.serial, true))),
                Output::Send {
                    msg: Msg::Request { entry, lock, .. },
                    ..
                } => Note::Request(entry.requester, *lock, entry.serial, entry.prio),
                Output::Send { .. } => Note::Sent(None),
                Output::Granted { lock, mode } => Note::Granted(*lock, *mode),
                Output::Upgraded { lock } => Note::Upgraded(*lock),
                Output::WouldBlock { lock, .. } => Note::WouldBlock(*lock),
                Output::Cancelled { lock } => Note::Cancelled(*lock),
                Output::Converted { lock, mode } => Note::Converted(*lock, *mode),
                Output::ConvertBusy { lock, .. } => Note::ConvertBusy(*lock),
                // A blocking notification changes no ghost of the model (P17's ghost is the
                // cluster's, `spec/SPEC.md` 1.16).
                Output::Downgraded { .. } | Output::Blocking { .. } => Note::Downgraded,
            };
            notes.push(note).expect("a step has fewer than 64 outputs");
        };
        let step = match input {
            StepInput::User(op) => st.cluster.input_with(node, Self::input_of(op), &mut see),
            StepInput::Deliver { from, index } => {
                let from = NodeId(from as u16);
                let delivered = if st.cluster.is_copied(from, node, index) {
                    // The second delivery of a message the network copied: refusing it as a
                    // duplicate is the protocol working.
                    st.cluster.deliver_at_expecting(
                        from,
                        node,
                        index,
                        |e| matches!(e, KernelError::Duplicate(_)),
                        &mut see,
                    )
                } else {
                    st.cluster.deliver_at_with(from, node, index, &mut see)
                };
                match delivered {
                    Some(r) => r,
                    None => return,
                }
            }
            StepInput::Duplicate { from, index } => {
                // A copy the kernel refuses as a duplicate is the protocol working; any
                // other refusal is kept ("no kernel error").
                match st.cluster.duplicate_with(
                    NodeId(from as u16),
                    node,
                    index,
                    |e| matches!(e, KernelError::Duplicate(_)),
                    &mut see,
                ) {
                    Some(r) => r,
                    None => return,
                }
            }
        };
        let Ok(report) = step else {
            // The harness keeps the first kernel error ("no kernel error").
            return;
        };
        if report.rules.contains(Rule::CompressShortcut) {
            st.events |= event::SHORTCUT;
        }
        if !user && report.rules.contains(Rule::Cancel) {
            st.events |= event::CANCEL_COMPLETED;
        }
        let after = &st.cluster.site(node).locks()[l];
        let has_token = after.has_token();
        if let Some(entry) = request {
            if !had_token && !has_token && after.queue().contains(&entry) {
                st.events |= event::LOCAL_QUEUE;
            }
        }
        if freeze && after.frozen() != frozen_before {
            st.events |= event::FREEZE_DELIVERED;
        }
        if let Some(entry) = request {
            // P9: the request's journey ends here unless this step sent it on.
            let sent_on = notes.iter().any(|x| {
                matches!(x, Note::Request(r, lk, s, _)
                    if *r == entry.requester && lk.idx() == l && *s == entry.serial)
            });
            let newest = matches!(
                st.cluster.site(entry.requester).locks()[l].pending(),
                Pending::Request(p) if p.serial == entry.serial && p.prio == entry.prio
            );
            if !sent_on && newest {
                st.excess[entry.requester.idx() * L + l] = NOT_TRAVELLING;
            }
        }
        for &note in &notes {
            match note {
                Note::Sent(answer) => {
                    if let Some((r, lock, serial, token)) = answer {
                        let is_current = matches!(
                            st.cluster.site(r).locks()[lock.idx()].pending(),
                            Pending::Request(p) if p.serial == serial
                        );
                        if is_current {
                            Self::arrive(st, r.idx(), lock.idx());
                        }
                        if token {
                            for k in (0..MAX_NODES).map(|i| i * L + lock.idx()) {
                                if st.excess[k] != NOT_TRAVELLING {
                                    st.excess[k] = st.excess[k].saturating_sub(1).max(-100);
                                }
                            }
                            st.events |= event::TOKEN_TRANSFER;
                        } else if !had_token && !has_token {
                            st.events |= event::COPY_BY_CHILD;
                        }
                    }
                    if self.cfg.max_messages.is_some() {
                        st.sent = st.sent.saturating_add(1);
                    }
                }
                Note::Request(r, lock, serial, prio) => {
                    if self.cfg.max_messages.is_some() {
                        st.sent = st.sent.saturating_add(1);
                    }
                    // The newest copy of the outstanding request (an older copy left behind
                    // by a PIP reissue has a lower priority; it is not this journey).
                    let is_current = matches!(
                        st.cluster.site(r).locks()[lock.idx()].pending(),
                        Pending::Request(p) if p.serial == serial && p.prio == prio
                    );
                    if is_current {
                        let k = r.idx() * L + lock.idx();
                        // A user operation of the requester (Rule 2, a PIP reissue) starts a
                        // journey, and so does a PIP reissue in a step that delivered a
                        // message (the request that made the site inherit a priority), and a
                        // send by a node that had queued the request (its journey ended
                        // there); every other send continues one.
                        let reissued = r == node && report.rules.contains(Rule::PipReissue);
                        if (user && r == node) || reissued || st.excess[k] == NOT_TRAVELLING {
                            // A token in flight when the journey starts counts as a move.
                            let in_flight = st
                                .cluster
                                .messages()
                                .any(|(_, _, m)| m.lock() == lock && m.kind() == MsgKind::Token);
                            st.excess[k] = 1 - i8::from(in_flight);
                        } else {
                            st.excess[k] = st.excess[k].saturating_add(1);
                        }
                    }
                }
                Note::Granted(lock, mode) => {
                    Self::granted(st, n, lock.idx(), mode);
                    self.skip_after_answer(st, n, lock, false);
                }
                Note::Upgraded(lock) => {
                    st.events |= event::UPGRADED;
                    Self::granted(st, n, lock.idx(), Mode::W);
                    self.skip_after_answer(st, n, lock, false);
                }
                Note::WouldBlock(lock) => {
                    // The try is over: nothing outstanding; the script skips the release
                    // that would have followed a grant.
                    st.events |= event::TRY_REFUSED;
                    st.reqs[n * L + lock.idx()] = None;
                    st.excess[n * L + lock.idx()] = NOT_TRAVELLING;
                    self.skip_after_answer(st, n, lock, true);
                }
                Note::Downgraded => {}
                Note::Converted(lock, mode) => {
                    // For P6 a conversion done at once is a request that arrives and is
                    // granted at once: it passes every conflicting request that arrived
                    // before it. One that waited arrived when it began to wait.
                    st.events |= event::CONVERTED;
                    let k = n * L + lock.idx();
                    if st.reqs[k].is_none() {
                        st.reqs[k] = Some(Req {
                            mode,
                            arrival: 0,
                            bypass: 0,
                        });
                    }
                    Self::granted(st, n, lock.idx(), mode);
                    self.skip_after_answer(st, n, lock, false);
                }
                Note::ConvertBusy(lock) => {
                    st.events |= event::CONVERT_REFUSED;
                    self.skip_after_answer(st, n, lock, false);
                    if matches!(self.next_op(st, n), Some(ScriptOp::Write(_, l)) if l == lock.0) {
                        st.pc[n] += 1;
                    }
                }
                Note::Cancelled(lock) => {
                    // The user's wait is over (the request may still run in the protocol,
                    // and its journey is still checked by P9); the script skips the release
                    // that would have followed a grant — not after a cancelled upgrade,
                    // which leaves U held.
                    st.reqs[n * L + lock.idx()] = None;
                    let held = st.cluster.site(node).locks()[lock.idx()].held();
                    if held == Mode::Phi && self.next_op(st, n) == Some(ScriptOp::Release(lock.0)) {
                        st.pc[n] += 1;
                    }
                }
            }
        }
        // Requests waiting in the token node's queue have arrived (in queue order).
        for lk in 0..L {
            let site = st.cluster.site(node);
            if !site.locks()[lk].has_token() {
                continue;
            }
            for k in 0..site.locks()[lk].queue().len() {
                let r = st.cluster.site(node).locks()[lk].queue()[k].requester.idx();
                Self::arrive(st, r, lk);
            }
        }
        Self::normalise(st);
    }

    /// What `action` does in `st`, in words: the action, the rules of the thesis the kernel
    /// reports for the step ([`hilock_kernel::Report`]), and its outputs.
    pub fn explain(&self, st: &State<L>, action: Action) -> String {
        let mut cluster = st.cluster.clone();
        let (node, r) = match action {
            Action::Run { node, op } => {
                (node, cluster.input(NodeId(node.into()), Self::input_of(op)))
            }
            Action::Deliver {
                from, to, index, ..
            } => match cluster.deliver_at(NodeId(from.into()), NodeId(to.into()), index.into()) {
                Some((_, r)) => (to, r),
                None => return format!("{action}: no such message"),
            },
            Action::Duplicate {
                from, to, index, ..
            } => match cluster.duplicate(NodeId(from.into()), NodeId(to.into()), index.into()) {
                Some((_, r)) => (to, r),
                None => return format!("{action}: no such message"),
            },
        };
        let mut s = action.to_string();
        match r {
            Ok(step) => {
                if !step.rules.is_empty() {
                    s.push_str(&format!("\n  rules: {}", step.rules));
                }
                for o in &step.outputs {
                    let line = match o {
                        Output::Send { to, msg } => {
                            format!("n{node} → n{} {}", to.0, Delivered::of(msg).label(node))
                        }
                        Output::Granted { lock, mode } => {
                            format!("n{node} enters {mode} on L{}", lock.0)
                        }
                        Output::Upgraded { lock } => {
                            format!("n{node} upgraded to W on L{}", lock.0)
                        }
                        Output::WouldBlock { lock, mode } => {
                            format!("n{node} would block: try {mode} on L{} refused", lock.0)
                        }
                        Output::Cancelled { lock } => {
                            format!("n{node} cancelled its request of L{}", lock.0)
                        }
                        Output::Downgraded { lock, mode } => {
                            format!("n{node} downgraded L{} to {mode}", lock.0)
                        }
                        Output::Converted { lock, mode } => {
                            format!("n{node} converted L{} to {mode}", lock.0)
                        }
                        Output::ConvertBusy { lock, mode } => {
                            format!("n{node} refused the conversion of L{} to {mode}", lock.0)
                        }
                        Output::Blocking { lock, mode, prio } => format!(
                            "n{node} told a request for {mode} (priority {prio}) waits on L{}",
                            lock.0
                        ),
                    };
                    s.push_str(&format!("\n  {line}"));
                }
                if step.outputs.is_empty() {
                    s.push_str("\n  (no message sent)");
                }
            }
            Err(e) => s.push_str(&format!("\n  rejected by the kernel: {e}")),
        }
        s
    }

    /// The harness of a fresh run: the configuration's tree, variant and network.
    pub fn cluster(&self) -> Cluster<ModelSite<L>> {
        let sites = (0..self.n())
            .map(|i| {
                let parent = self.cfg.parent(i).map(NodeId);
                ModelSite::<L>::with_parents(NodeId(i as u16), |_| parent)
                    .expect("validated tree")
                    .with_variant(self.cfg.variant)
            })
            .collect();
        Cluster::new(sites).with_order(self.cfg.network.order())
    }

    /// The script operation node `n` runs next.
    pub fn next_op(&self, st: &State<L>, n: usize) -> Option<ScriptOp> {
        self.cfg.scripts[n].get(st.pc[n] as usize).copied()
    }

    /// The kernel input of a script operation.
    pub fn input_of<M>(op: ScriptOp) -> Input<'static, M> {
        match op {
            ScriptOp::Acquire(mode, l) => Input::Acquire {
                lock: LockId(l),
                mode,
            },
            ScriptOp::Try(mode, l) => Input::TryAcquire {
                lock: LockId(l),
                mode,
            },
            ScriptOp::Cancel(l) => Input::Cancel { lock: LockId(l) },
            ScriptOp::Downgrade(mode, l) => Input::Downgrade {
                lock: LockId(l),
                mode,
            },
            ScriptOp::Convert(mode, l, wait) => Input::Convert {
                lock: LockId(l),
                mode,
                wait,
            },
            ScriptOp::Write(v, l) => Input::SetValue {
                lock: LockId(l),
                value: [v; VALUE_LEN],
            },
            ScriptOp::Release(l) => Input::Release { lock: LockId(l) },
            ScriptOp::Upgrade(l) => Input::Upgrade { lock: LockId(l) },
            ScriptOp::Priority(base) => Input::SetPriority { base },
        }
    }
}

// P1–P5 and "no kernel error" are the harness's properties (`hilock_harness::properties`),
// written once; the model only says when its users are idle (no script can run).

fn p1<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_mutual_exclusion().is_ok()
}

fn p2<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_single_token().is_ok()
}

fn p3<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    // Exact on FIFO channels (invariant 2.2 as the thesis states it: a weakening that is not
    // propagated, Rule 5.2, leaves a stronger record and is caught); covering on the
    // unordered network, where a release can overtake the grant it follows.
    st.cluster.check_owned_records().is_ok() && kept_modes_idle(&st.cluster)
}

/// P3 restated for `ReleaseRule::KeepIntention` (`spec/SPEC.md` 1.7): the owned mode
/// may exceed max(held, children) only by an intention mode kept by a non-token node with
/// nothing pending and nothing frozen (`LockNode::kept_invariant`; always true under the
/// thesis's eager release, where nothing is kept).
pub fn kept_modes_idle<const L: usize>(c: &Cluster<ModelSite<L>>) -> bool {
    c.sites()
        .all(|s| s.locks().iter().all(|n| n.kept_invariant()))
}

fn p3_frozen<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    // On the unordered network a freeze can overtake the grant that makes its receiver a
    // child (and is dropped as stale): the invariant is stated for FIFO channels only.
    st.cluster.check_frozen_reach_children().is_ok()
}

fn p4<const L: usize>(m: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_no_deadlock(m.idle(st)).is_ok()
}

fn p5<const L: usize>(m: &BaseModel<L>, st: &State<L>) -> bool {
    !m.quiescent(st)
        || (st.cluster.error().is_none()
            && (0..m.n()).all(|i| !st.blocked(i) && st.pc[i] as usize == m.cfg.scripts[i].len()))
}

/// [`State::excess`] of a request that is not travelling (not sent yet, queued, served).
pub const NOT_TRAVELLING: i8 = i8::MIN;

/// The P9 bound: at most `n − 1` `Request` messages per journey of a request, plus one per
/// token transfer during the journey.
pub fn forward_bound(nodes: usize) -> usize {
    nodes.saturating_sub(1)
}

fn p9<const L: usize>(m: &BaseModel<L>, st: &State<L>) -> bool {
    m.cfg.network != Network::Fifo || st.journeys_within(forward_bound(m.n()))
}

fn no_error<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_no_kernel_error().is_ok()
}

fn p8<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_fences().is_ok()
}

fn p11<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_no_grant_after_would_block().is_ok()
}

fn p12<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_try_leaves_nothing().is_ok()
}

fn p13<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_no_grant_after_cancel().is_ok()
}

fn p14<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_cancel_leaves_nothing().is_ok()
}

fn p16<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_value_block().is_ok()
}

fn p17<const L: usize>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.cluster.check_blocking().is_ok() && st.cluster.check_blocking_waiter().is_ok()
}

/// What violates `property` in `st`, in words ("on L0: n1 holds R, n3 holds W"): the
/// sentence a counterexample's verdict ends with. `None` if `st` does not violate it (or
/// it is not one of [`SAFETY`]).
pub fn why_violated<const L: usize>(
    m: &BaseModel<L>,
    st: &State<L>,
    property: &str,
) -> Option<String> {
    let c = &st.cluster;
    let violation = match property {
        p if p == SAFETY[0] => c.check_mutual_exclusion().err(),
        p if p == SAFETY[1] => c.check_single_token().err(),
        p if p == SAFETY[2] => match c.check_owned_records() {
            Err(v) => Some(v),
            Ok(()) if !kept_modes_idle(c) => {
                return Some("a node keeps an intention mode while it waits or is frozen".into())
            }
            Ok(()) => None,
        },
        p if p == SAFETY[3] => c.check_frozen_reach_children().err(),
        p if p == SAFETY[4] => c.check_no_deadlock(m.idle(st)).err(),
        p if p == SAFETY[5] => {
            if p5(m, st) {
                return None;
            }
            let waiting: Vec<String> = (0..m.n())
                .filter(|&i| st.blocked(i) || st.pc[i] as usize != m.cfg.scripts[i].len())
                .map(|i| format!("n{i}"))
                .collect();
            let mut why = Vec::new();
            if let Some(e) = c.error() {
                why.push(format!("the kernel rejected a step ({e})"));
            }
            match waiting.len() {
                0 => {}
                1 => why.push(format!("{} has not finished its script", waiting[0])),
                _ => why.push(format!(
                    "{} have not finished their scripts",
                    waiting.join(", ")
                )),
            }
            return Some(format!(
                "nothing is in flight and no script can run, but {}",
                why.join(", and ")
            ));
        }
        p if p == SAFETY[6] => c.check_no_kernel_error().err(),
        p if p == SAFETY[7] => c.check_fences().err(),
        p if p == SAFETY[8] => {
            return (!p9(m, st)).then(|| {
                format!(
                    "a request travelled more than {} hops (n − 1) plus one per token transfer",
                    forward_bound(m.n())
                )
            })
        }
        p if p == SAFETY[9] => c.check_no_grant_after_would_block().err(),
        p if p == SAFETY[10] => c.check_try_leaves_nothing().err(),
        p if p == SAFETY[11] => c.check_no_grant_after_cancel().err(),
        p if p == SAFETY[12] => c.check_cancel_leaves_nothing().err(),
        p if p == SAFETY[13] => c.check_value_block().err(),
        p if p == SAFETY[14] => c.check_blocking().and(c.check_blocking_waiter()).err(),
        _ => None,
    };
    violation.map(|v| v.detail)
}

fn bypass<const L: usize, const K: u8>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.max_bypass() <= K
}

fn ev<const L: usize, const E: u16>(_: &BaseModel<L>, st: &State<L>) -> bool {
    st.events & E != 0
}

/// Names of the properties that must hold (`always`).
pub const SAFETY: [&str; 15] = [
    "P1 mutual exclusion",
    "P2 single token",
    "P3 owned-mode invariant",
    "P3b frozen-mode invariant",
    "P4 no deadlock",
    "P5 liveness",
    "no kernel error",
    "P10 fencing tokens increase",
    "P9 bounded forwarding",
    "P11 no grant after WouldBlock",
    "P12 a try leaves nothing pending",
    "P14 no grant after Cancel",
    "P15 a cancel leaves nothing",
    "P16 a valid value block is the last one written",
    "P17 a blocking notification names a waiter, once per hold",
];

/// Names of the `P6 FIFO bypass ≤ k` properties, index k.
pub const BYPASS: [&str; MAX_BYPASS as usize + 1] = [
    "P6 FIFO bypass ≤ 0",
    "P6 FIFO bypass ≤ 1",
    "P6 FIFO bypass ≤ 2",
    "P6 FIFO bypass ≤ 3",
    "P6 FIFO bypass ≤ 4",
    "P6 FIFO bypass ≤ 5",
    "P6 FIFO bypass ≤ 6",
    "P6 FIFO bypass ≤ 7",
];

/// Names of the `sometimes` (reachability) properties.
pub const REACHED: [&str; 11] = [
    "reached: copy grant by a non-token node",
    "reached: token transfer",
    "reached: local queueing (Table 2.3 Q)",
    "reached: freeze delivered",
    "reached: upgrade completed",
    "reached: compress shortcut",
    "reached: try refused",
    "reached: cancelled request completed",
    "reached: conversion done",
    "reached: conversion refused",
    "reached: conversion waited",
];

impl<const L: usize> Model for BaseModel<L> {
    type State = State<L>;
    type Action = Action;

    fn init_states(&self) -> Vec<State<L>> {
        vec![State {
            cluster: self.cluster(),
            pc: [0; MAX_NODES],
            reqs: [None; MAX_NODES * MAX_LOCKS],
            events: 0,
            sent: 0,
            dups: 0,
            excess: [NOT_TRAVELLING; MAX_NODES * MAX_LOCKS],
        }]
    }

    fn actions(&self, st: &State<L>, actions: &mut Vec<Action>) {
        if st.cluster.error().is_some() {
            return;
        }
        for i in 0..self.n() {
            if self.runnable(st, i) {
                if let Some(op) = self.next_op(st, i) {
                    actions.push(Action::Run { node: i as u8, op });
                }
            }
        }
        for ((from, to), mut q) in st.cluster.channels() {
            let (from, to) = (from.0 as u8, to.0 as u8);
            match self.cfg.network {
                Network::Fifo => {
                    if let Some(m) = q.next() {
                        actions.push(Action::Deliver {
                            from,
                            to,
                            index: 0,
                            msg: Delivered::of(m),
                        });
                    }
                }
                Network::Unordered => {
                    // Equal messages on one channel: delivering either is the same action.
                    let mut last = None;
                    for (i, m) in q.enumerate() {
                        if last != Some(m) {
                            actions.push(Action::Deliver {
                                from,
                                to,
                                index: i as u8,
                                msg: Delivered::of(m),
                            });
                        }
                        last = Some(m);
                    }
                }
            }
        }
        if st.dups < self.cfg.duplicates {
            // A copy of what could be delivered next: on FIFO the oldest message of each
            // channel; on the unordered network any message (equal ones once).
            let n = actions.len();
            for k in 0..n {
                if let Action::Deliver {
                    from,
                    to,
                    index,
                    msg,
                } = actions[k]
                {
                    actions.push(Action::Duplicate {
                        from,
                        to,
                        index,
                        msg,
                    });
                }
            }
        }
    }

    fn next_state(&self, last: &State<L>, action: Action) -> Option<State<L>> {
        let mut st = last.clone();
        match action {
            Action::Run { node, op: expected } => {
                let i = node as usize;
                let op = self.next_op(&st, i)?;
                if op != expected {
                    return None;
                }
                st.pc[i] += 1;
                match op {
                    ScriptOp::Acquire(mode, l) | ScriptOp::Try(mode, l) => {
                        st.reqs[i * L + l as usize] = Some(Req {
                            mode,
                            arrival: 0,
                            bypass: 0,
                        });
                    }
                    ScriptOp::Upgrade(l) => {
                        st.reqs[i * L + l as usize] = Some(Req {
                            mode: Mode::W,
                            arrival: 0,
                            bypass: 0,
                        });
                        Self::arrive(&mut st, i, l as usize);
                    }
                    ScriptOp::Cancel(_)
                    | ScriptOp::Downgrade(..)
                    | ScriptOp::Convert(..)
                    | ScriptOp::Write(..)
                    | ScriptOp::Release(_)
                    | ScriptOp::Priority(_) => {}
                }
                self.step(&mut st, i, StepInput::User(op));
                if let ScriptOp::Convert(mode, l, true) = op {
                    // A conversion that waits at the token node (`Pending::Convert`) has
                    // arrived there, as an upgrade has: the script waits for its answer.
                    let node = &st.cluster.site(NodeId(i as u16)).locks()[l as usize];
                    if node.pending() != Pending::Convert(mode) {
                        // Answered at once (a downgrade, for a weaker mode, included): the
                        // cancel that would have withdrawn the wait is skipped.
                        if self.next_op(&st, i) == Some(ScriptOp::Cancel(l)) {
                            st.pc[i] += 1;
                        }
                    } else {
                        st.events |= event::CONVERT_WAITED;
                        st.reqs[i * L + l as usize] = Some(Req {
                            mode,
                            arrival: 0,
                            bypass: 0,
                        });
                        Self::arrive(&mut st, i, l as usize);
                        Self::normalise(&mut st);
                    }
                }
            }
            Action::Deliver {
                from,
                to,
                index,
                msg,
            }
            | Action::Duplicate {
                from,
                to,
                index,
                msg,
            } => {
                let copy = matches!(action, Action::Duplicate { .. });
                let m = st
                    .cluster
                    .channel(NodeId(from as u16), NodeId(to as u16))
                    .nth(index as usize)?;
                if Delivered::of(m) != msg || (copy && st.dups >= self.cfg.duplicates) {
                    return None;
                }
                let index = index as usize;
                let input = if copy {
                    st.dups += 1;
                    StepInput::Duplicate { from, index }
                } else {
                    StepInput::Deliver { from, index }
                };
                self.step(&mut st, to as usize, input);
            }
        }
        Some(st)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn format_step(&self, last: &State<L>, action: Action) -> Option<String> {
        let next = self.next_state(last, action)?;
        // Each violated property in words: what the failing state shows.
        let why: String = SAFETY
            .iter()
            .filter_map(|p| why_violated(self, &next, p).map(|w| format!("\n  {p}: {w}")))
            .collect();
        // Numbered as the trace, the diagram's rows and `hilock replay` number it: the
        // steps taken before it.
        // The P6 bounds measure the least bound k: a request bypassed here is a witness,
        // not a failure.
        let bypassed = match next.max_bypass() {
            0 => String::new(),
            k => format!(
                "\nP6: a request has been bypassed {} (the P6 bounds measure the least bound k: \
                 not a failure)",
                crate::check::times(k.into())
            ),
        };
        Some(format!(
            "step {}: {}{}{why}{bypassed}\n\n{next:?}",
            last.cluster.steps(),
            self.explain(last, action),
            crate::check::violations_line_except(self, &next, &BYPASS)
        ))
    }

    fn as_svg(&self, path: Path<State<L>, Action>) -> Option<String> {
        // The path as a trace: its outputs pair each delivery with its send, so that a
        // message still in flight is drawn too.
        let trace = crate::check::trace_of(self, &path, "");
        Some(crate::open::trace_diagram(&trace).0.svg())
    }

    fn within_boundary(&self, st: &State<L>) -> bool {
        self.cfg.max_messages.is_none_or(|m| st.sent <= m)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        use event::*;
        vec![
            Property::always(SAFETY[0], p1::<L>),
            Property::always(SAFETY[1], p2::<L>),
            Property::always(SAFETY[2], p3::<L>),
            Property::always(SAFETY[3], p3_frozen::<L>),
            Property::always(SAFETY[4], p4::<L>),
            Property::always(SAFETY[5], p5::<L>),
            Property::always(SAFETY[6], no_error::<L>),
            Property::always(SAFETY[7], p8::<L>),
            Property::always(SAFETY[8], p9::<L>),
            Property::always(SAFETY[9], p11::<L>),
            Property::always(SAFETY[10], p12::<L>),
            Property::always(SAFETY[11], p13::<L>),
            Property::always(SAFETY[12], p14::<L>),
            Property::always(SAFETY[13], p16::<L>),
            Property::always(SAFETY[14], p17::<L>),
            Property::always(BYPASS[0], bypass::<L, 0>),
            Property::always(BYPASS[1], bypass::<L, 1>),
            Property::always(BYPASS[2], bypass::<L, 2>),
            Property::always(BYPASS[3], bypass::<L, 3>),
            Property::always(BYPASS[4], bypass::<L, 4>),
            Property::always(BYPASS[5], bypass::<L, 5>),
            Property::always(BYPASS[6], bypass::<L, 6>),
            Property::always(BYPASS[7], bypass::<L, 7>),
            Property::sometimes(REACHED[0], ev::<L, COPY_BY_CHILD>),
            Property::sometimes(REACHED[1], ev::<L, TOKEN_TRANSFER>),
            Property::sometimes(REACHED[2], ev::<L, LOCAL_QUEUE>),
            Property::sometimes(REACHED[3], ev::<L, FREEZE_DELIVERED>),
            Property::sometimes(REACHED[4], ev::<L, UPGRADED>),
            Property::sometimes(REACHED[5], ev::<L, SHORTCUT>),
            Property::sometimes(REACHED[6], ev::<L, TRY_REFUSED>),
            Property::sometimes(REACHED[7], ev::<L, CANCEL_COMPLETED>),
            Property::sometimes(REACHED[8], ev::<L, CONVERTED>),
            Property::sometimes(REACHED[9], ev::<L, CONVERT_REFUSED>),
            Property::sometimes(REACHED[10], ev::<L, CONVERT_WAITED>),
        ]
    }
}
