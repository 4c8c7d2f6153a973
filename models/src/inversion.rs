//! The priority-inversion model of thesis section 3.6 (Fig. 3.3–3.6): two locks, a
//! low-priority node A, a high-priority node D and `m` medium-priority nodes, driving
//! hilock-kernel sites (no rule is re-implemented here).
//!
//! - L_i (lock 0): A takes R; D asks for IW and must wait for A's release.
//! - L_j (lock 1): while holding R on L_i, A asks for IR; the medium nodes ask for W.
//!   The token of L_j starts at D, which never uses L_j.
//!
//! Timing assumption: a medium node issues a new request only while no message is in
//! flight (message delays are short compared with non-critical sections). In a fully
//! asynchronous model a request — also A's boosted one — can be delayed in the network
//! while others are served any number of times, and no protocol bounds the inversion.
//!
//! Property P7 "bounded inversion": D waits for A (which holds R on L_i); while A in turn
//! waits for its IR on L_j, every critical section granted on L_j to a node of lower
//! priority than D other than A delays D without being one D asked to wait for — a priority
//! inversion. P7(B): at most B such critical sections while D's request is pending. The
//! checker reports the least B that holds.
//!
//! Property P13 "blocking bound" (only when the configuration sets `blocking`): D's grant
//! comes at most `hops` message delays δ plus `sections` stretches of critical-section code
//! C after D's request, where C bounds the code a node runs inside a critical section
//! between two of its lock operations. D asks once A holds R on L_i. From D's request (time
//! 0; every earlier event at time ≤ 0) the model keeps, per event, a bound on its time,
//! given by what forces it to happen:
//!
//! - a message is delivered at most δ after its send (FIFO links, delay at most δ);
//! - a lock operation of a node inside a critical section comes at most C after the stretch
//!   of code before it began (the node's grant or its previous operation);
//! - D's request is at time 0; a medium node's new request, which the timing assumption
//!   lets happen only while no message is in flight, comes before the next operation of
//!   every node running critical-section code (the least of their bounds), and so does
//!   every earlier event;
//! - what a step sends or grants happens when the step does.
//!
//! A bound is a pair (hops, sections), the time hops·δ + sections·C; two bounds combine
//! component by component, so the bound holds for every δ and C. The checker reports the
//! least `hops` and the least `sections` that hold ([`least_blocking`]);
//! [`pip_blocking_bound`] is their closed form under PIP.

use crate::token::Delivered;
use hilock_harness::{properties, Cluster};
use hilock_kernel::{Inheritance, Input, LockId, Mode, NodeId, Output, Variant};
use hilock_spec::system::{ModelSite, MODEL_NODES};
use stateright::{Checker, Model, Path, Property};

/// Nodes: A, D and up to three medium nodes.
pub const MAX: usize = MODEL_NODES;
const L: usize = 2;
/// The kernel site the model drives.
pub type ISite = ModelSite<L>;

/// Node A (low priority).
pub const A: u16 = 0;
/// Node D (high priority).
pub const D: u16 = 1;
/// Priority of A.
pub const PRIO_A: u8 = 1;
/// Priority of the medium nodes.
pub const PRIO_M: u8 = 2;
/// Priority of D.
pub const PRIO_D: u8 = 4;

/// The protocol variant of a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Flavor {
    /// Chapter 2: every request has the same priority (FIFO with freezing).
    Fifo,
    /// Chapter 3 without inheritance.
    Prioritized,
    /// PCEP, ceiling of L_i = priority of D (its highest contender).
    Pcep,
    /// PIP.
    Pip,
}

/// A configuration: the variant, the number of medium-priority nodes (0–3) and how often
/// each of them asks for L_j.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InversionConfig {
    /// Protocol variant.
    pub flavor: Flavor,
    /// Number of medium-priority nodes.
    pub mediums: usize,
    /// How many times each medium node takes W on L_j (1–3).
    pub rounds: usize,
    /// The bound B checked by P7.
    pub bound: u8,
    /// The bounds checked by P13 (D's blocking time, [`Stamp`]); `None`: no clocks are kept
    /// and P13 is not checked (the state space is that of P7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<Stamp>,
}

/// An upper bound on the real time of an event since D's request, as `hops` message delays
/// δ plus `sections` stretches of code run inside a critical section, each at most C.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(deny_unknown_fields)]
pub struct Stamp {
    /// Message delays δ.
    pub hops: u8,
    /// Stretches of code inside a critical section, each at most C long.
    pub sections: u8,
}

impl Stamp {
    /// The later of two bounds, component by component (a bound for both events).
    fn max(self, o: Stamp) -> Stamp {
        Stamp {
            hops: self.hops.max(o.hops),
            sections: self.sections.max(o.sections),
        }
    }

    /// One message delay later.
    fn delayed(self) -> Stamp {
        Stamp {
            hops: self.hops.saturating_add(1),
            ..self
        }
    }

    /// One stretch of critical-section code later.
    fn computed(self) -> Stamp {
        Stamp {
            sections: self.sections.saturating_add(1),
            ..self
        }
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}δ + {}C", self.hops, self.sections)
    }
}

/// The clocks of P13 while D waits: per node the bound on its latest event and on the
/// start of the stretch of critical-section code it runs, and the bound on the send of
/// every message sent since D's request, per channel in sending order (a message sent
/// before D's request has none: it was sent at time ≤ 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Clocks {
    clock: Vec<Stamp>,
    start: Vec<Stamp>,
    sent: Vec<(u16, u16, Stamp)>,
}

/// A scripted operation: acquire a mode on lock 0 (L_i) or 1 (L_j), or release it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `RequestLock(mode)` on the lock.
    Acquire(u16, Mode),
    /// `RequestUnlock()` of the lock.
    Release(u16),
}

fn lock_name(l: u16) -> &'static str {
    if l == 0 {
        "L_i"
    } else {
        "L_j"
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Acquire(l, m) => write!(f, "acquire {m} on {}", lock_name(l)),
            Op::Release(l) => write!(f, "release {}", lock_name(l)),
        }
    }
}

/// The name of node `n`: A, D, M2, M3, M4.
pub fn node_name(n: u16) -> String {
    match n {
        A => "A".into(),
        D => "D".into(),
        m => format!("M{m}"),
    }
}

/// A model action: run a node's next operation, or deliver the oldest message on a
/// channel. Each carries what it does, so that the Explorer can name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Node `node` runs its next script operation `op`.
    Run {
        /// The node.
        node: u16,
        /// The operation.
        op: Op,
    },
    /// Deliver the oldest message from `from` to `to`.
    Deliver {
        /// Sender.
        from: u16,
        /// Receiver.
        to: u16,
        /// The message.
        msg: Delivered,
    },
}

impl std::fmt::Display for Action {
    /// `A acquire R on L_i`, `M2 → D request W @L1 p=2`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Action::Run { node, op } => write!(f, "{} {op}", node_name(node)),
            Action::Deliver { from, to, msg } => {
                let label = msg
                    .label_with(from as u8, |l| format!(" on {}", lock_name(l)))
                    .replace(
                        &format!(" for n{} ", msg.requester),
                        &format!(" for {} ", node_name(msg.requester)),
                    );
                write!(f, "{} → {} {label}", node_name(from), node_name(to))
            }
        }
    }
}

/// A state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InvState {
    /// The sites, the messages in flight and the first kernel error: the one harness.
    cluster: Cluster<ISite>,
    pc: Vec<u8>,
    waiting: Vec<bool>,
    /// D's request on L_i is pending.
    d_pending: bool,
    /// A's request on L_j is pending.
    a_waits_j: bool,
    /// Lower-priority grants while D's request was pending.
    pub overtakes: u8,
    /// P13's clocks, kept from D's request to D's grant (only if the configuration checks
    /// P13).
    clocks: Option<Clocks>,
    /// The bound on the time of D's grant since its request, once granted (P13).
    pub blocked: Option<Stamp>,
}

impl InversionConfig {
    fn nodes(&self) -> usize {
        2 + self.mediums
    }

    fn prio(&self, n: u16) -> u8 {
        match n {
            A => PRIO_A,
            D => PRIO_D,
            _ => PRIO_M,
        }
    }

    fn script(&self, n: u16) -> &'static [Op] {
        const SA: [Op; 4] = [
            Op::Acquire(0, Mode::R),
            Op::Acquire(1, Mode::IR),
            Op::Release(1),
            Op::Release(0),
        ];
        const SD: [Op; 2] = [Op::Acquire(0, Mode::IW), Op::Release(0)];
        const SM: [Op; 6] = [
            Op::Acquire(1, Mode::W),
            Op::Release(1),
            Op::Acquire(1, Mode::W),
            Op::Release(1),
            Op::Acquire(1, Mode::W),
            Op::Release(1),
        ];
        match n {
            A => &SA,
            D => &SD,
            _ => &SM[..2 * self.rounds.clamp(1, 3)],
        }
    }

    /// Records the grants of a step at `n` (its other outputs the harness has routed) and,
    /// while D waits, P13's clocks: the step happened at time ≤ `at`, so do its sends and
    /// grants; at D's grant the bound is kept and the clocks are dropped.
    fn apply(
        &self,
        st: &mut InvState,
        n: u16,
        outputs: &[Output<hilock_spec::SpecMsg>],
        at: Option<Stamp>,
    ) {
        if let (Some(c), Some(t)) = (st.clocks.as_mut(), at) {
            c.clock[n as usize] = c.clock[n as usize].max(t);
            for o in outputs {
                match o {
                    Output::Send { to, .. } => c.sent.push((n, to.0, t)),
                    // A grant begins a stretch of critical-section code.
                    Output::Granted { .. } | Output::Upgraded { .. } => c.start[n as usize] = t,
                    Output::WouldBlock { .. }
                    | Output::Cancelled { .. }
                    | Output::Downgraded { .. }
                    | Output::Converted { .. }
                    | Output::ConvertBusy { .. }
                    | Output::Blocking { .. } => {}
                }
            }
        }
        for o in outputs {
            match o {
                // The inversion model issues no try-lock, cancel or conversion.
                Output::Send { .. }
                | Output::WouldBlock { .. }
                | Output::Cancelled { .. }
                | Output::Downgraded { .. }
                | Output::Converted { .. }
                | Output::ConvertBusy { .. }
                | Output::Blocking { .. } => {}
                Output::Granted { .. } | Output::Upgraded { .. } => {
                    st.waiting[n as usize] = false;
                    if n == D {
                        st.d_pending = false;
                        if st.clocks.take().is_some() {
                            st.blocked = at;
                        }
                    } else if n == A {
                        st.a_waits_j = false;
                    } else if st.d_pending && st.a_waits_j && self.prio(n) < PRIO_D {
                        st.overtakes = st.overtakes.saturating_add(1);
                    }
                }
            }
        }
    }

    /// One step of the harness at `n` at time ≤ `at` (the harness keeps a kernel error).
    fn step(
        &self,
        st: &mut InvState,
        n: u16,
        input: Input<'_, hilock_spec::SpecMsg>,
        at: Option<Stamp>,
    ) {
        if let Ok(step) = st.cluster.input(NodeId(n), input) {
            self.apply(st, n, &step.outputs, at);
        }
    }

    /// Whether node `x` holds a lock (runs or waits inside a critical section).
    fn holds(st: &InvState, x: usize) -> bool {
        st.cluster
            .site(NodeId(x as u16))
            .locks()
            .iter()
            .any(|l| l.held() != Mode::Phi)
    }

    /// P13: the bound on the time of the next script operation of `n`, while D waits.
    /// Inside a critical section the operation ends a stretch of code: at most C after the
    /// stretch began (at the grant, or at the node's previous operation). Outside one — a
    /// medium node's new request, which the timing assumption lets happen only while no
    /// message is in flight — it happens before the next operation of every node running
    /// critical-section code, so before the bound of any one of them: the least, by
    /// (sections, hops). (While D waits and nothing is in flight some node runs one, or
    /// nothing could happen, which P4 excludes; should none, the latest bound of any event
    /// is taken. A scratch run that panicked there instead stayed green on every default
    /// P13 configuration.) D's request is at time 0.
    fn run_time(&self, st: &InvState, n: u16) -> Option<Stamp> {
        let c = st.clocks.as_ref()?;
        let i = n as usize;
        if n == D {
            return Some(Stamp::default());
        }
        if Self::holds(st, i) {
            return Some(c.start[i].computed());
        }
        let running = (0..self.nodes())
            .filter(|&x| Self::holds(st, x) && !st.waiting[x])
            .map(|x| c.start[x].computed())
            .min_by_key(|s| (s.sections, s.hops));
        Some(running.unwrap_or_else(|| c.clock.iter().copied().fold(Stamp::default(), Stamp::max)))
    }

    /// P13: the bound on the time of delivering the oldest message from `from` to `to`,
    /// while D waits: one delay after its send (a message sent before D's request: after
    /// time 0). Takes the message's stamp.
    fn delivery_time(&self, st: &mut InvState, from: u16, to: u16) -> Option<Stamp> {
        let queued = st.cluster.channel_len(NodeId(from), NodeId(to));
        let c = st.clocks.as_mut()?;
        let stamped = c.sent.iter().filter(|s| (s.0, s.1) == (from, to)).count();
        let sent = if stamped < queued {
            Stamp::default()
        } else {
            let k = c.sent.iter().position(|s| (s.0, s.1) == (from, to))?;
            c.sent.remove(k).2
        };
        Some(sent.delayed())
    }

    /// Whether no script can run (with nothing in flight, every medium node may run).
    fn idle(&self, st: &InvState) -> bool {
        (0..self.nodes()).all(|n| st.waiting[n] || st.pc[n] as usize >= self.script(n as u16).len())
    }

    /// A state as a table: per node and lock (M_O, M_H, M_P), token or parent, children,
    /// queue and frozen modes; the scripts' positions, the messages in flight and the count
    /// of overtakes.
    pub fn table(&self, st: &InvState) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for (i, site) in st.cluster.sites().enumerate() {
            let me = node_name(i as u16);
            for (l, n) in site.locks().iter().enumerate() {
                let _ = write!(
                    s,
                    "{me} on {}: (M_O {}, M_H {}, M_P {})",
                    lock_name(l as u16),
                    n.owned(),
                    n.held(),
                    n.pending_mode()
                );
                if n.has_token() {
                    s.push_str(" token");
                } else if let Some(p) = n.parent() {
                    let _ = write!(s, " parent {}", node_name(p.0));
                }
                let ch: Vec<String> = n
                    .children()
                    .map(|(c, m)| format!("{}:{m}", node_name(c.0)))
                    .collect();
                if !ch.is_empty() {
                    let _ = write!(s, " children {{{}}}", ch.join(","));
                }
                let q: Vec<String> = n
                    .queue()
                    .iter()
                    .map(|e| format!("{}:{} p={}", node_name(e.requester.0), e.mode, e.prio))
                    .collect();
                if !q.is_empty() {
                    let _ = write!(s, " queue [{}]", q.join(", "));
                }
                if !n.frozen().is_empty() {
                    let _ = write!(s, " frozen {}", n.frozen());
                }
                s.push('\n');
            }
            let _ = writeln!(
                s,
                "{me}: script at {}{}",
                st.pc[i],
                if st.waiting[i] { ", waiting" } else { "" }
            );
        }
        for (a, b, m) in st.cluster.messages() {
            let _ = writeln!(
                s,
                "in flight {}",
                Action::Deliver {
                    from: a.0,
                    to: b.0,
                    msg: Delivered::of(m)
                }
            );
        }
        let _ = write!(
            s,
            "lower-priority critical sections on L_j while D waited: {}",
            st.overtakes
        );
        if let Some(c) = &st.clocks {
            let clocks: Vec<String> = (0..self.nodes())
                .map(|i| format!("{} {}", node_name(i as u16), c.clock[i]))
                .collect();
            let _ = write!(s, "\nclocks since D's request: {}", clocks.join(", "));
        }
        if let Some(b) = st.blocked {
            let _ = write!(s, "\nD granted at most {b} after its request");
        }
        s
    }

    /// Checks the sizes: 0 to 3 medium nodes, 1 to 3 rounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.mediums > MAX - 2 || !(1..=3).contains(&self.rounds) {
            return Err(format!(
                "an inversion configuration has 0 to {} medium nodes and 1 to 3 rounds",
                MAX - 2
            ));
        }
        Ok(())
    }

    /// The configuration's name (`P7 Prioritized mediums=2 rounds=1 B=1`).
    pub fn name(&self) -> String {
        match self.blocking {
            None => format!(
                "P7 {:?} mediums={} rounds={} B={}",
                self.flavor, self.mediums, self.rounds, self.bound
            ),
            Some(b) => format!(
                "P13 {:?} mediums={} rounds={} blocking ≤ {b}",
                self.flavor, self.mediums, self.rounds
            ),
        }
    }

    /// A path as a readable trace (`hilock-inversion-trace/1`).
    pub fn trace(&self, property: &str, path: &Path<InvState, Action>) -> InversionTrace {
        let states = path.clone().into_states();
        let steps = path
            .clone()
            .into_actions()
            .iter()
            .zip(states.iter().skip(1))
            .enumerate()
            .map(|(index, (a, st))| InversionTraceStep {
                index,
                action: a.to_string(),
                overtakes: st.overtakes,
            })
            .collect();
        InversionTrace {
            format: "hilock-inversion-trace/1".into(),
            model: self.name(),
            config: *self,
            property: property.to_string(),
            violation: states
                .last()
                .map(|s| {
                    format!(
                        "{} lower-priority critical sections on L_j while D waited (bound {})",
                        s.overtakes, self.bound
                    )
                })
                .unwrap_or_default(),
            steps,
        }
    }

    /// Whether `a` in `before` is the recorded step `step` of a `hilock-inversion-trace/1`
    /// trace: the same action text and the same count of overtakes afterwards.
    pub fn fits_step(&self, before: &InvState, a: &Action, step: &serde_json::Value) -> bool {
        step["action"].as_str() == Some(a.to_string().as_str())
            && self
                .next_state(before, *a)
                .is_some_and(|st| step["overtakes"].as_u64() == Some(u64::from(st.overtakes)))
    }

    /// One run of the model in real time, against which P13's bounds can be tested: every
    /// message is delivered a random time of at most `delay` after its send (FIFO per
    /// link), every operation inside a critical section comes a random time of at most
    /// `section` after its stretch of code began, and a request outside one (A's first, D's,
    /// a medium node's while nothing is in flight) a random time of at most 2·`section`
    /// after it became possible; the earliest due event happens next. Returns D's blocking
    /// time and the run's P13 bound at D's grant; `None` if the configuration does not set
    /// `blocking` or no event can happen before D's grant.
    pub fn timed_blocking(&self, seed: u64, delay: f64, section: f64) -> Option<(f64, Stamp)> {
        self.blocking?;
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut random = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = self.nodes();
        let mut st = self.init_states().remove(0);
        let mut now = 0.0f64;
        let mut run_due: Vec<Option<f64>> = vec![None; n];
        let mut msg_due: std::collections::BTreeMap<(u16, u16), std::collections::VecDeque<f64>> =
            Default::default();
        let mut asked = None;
        let mut actions = Vec::new();
        loop {
            actions.clear();
            self.actions(&st, &mut actions);
            let mut enabled = vec![false; n];
            for a in &actions {
                if let Action::Run { node, .. } = *a {
                    let i = node as usize;
                    enabled[i] = true;
                    if run_due[i].is_none() {
                        let most = if Self::holds(&st, i) {
                            section
                        } else {
                            2.0 * section
                        };
                        run_due[i] = Some(now + random() * most);
                    }
                }
            }
            for (due, on) in run_due.iter_mut().zip(&enabled) {
                if !on {
                    *due = None;
                }
            }
            let (at, action) = actions
                .iter()
                .map(|a| match *a {
                    Action::Run { node, .. } => (run_due[node as usize].unwrap_or(now), *a),
                    Action::Deliver { from, to, .. } => (
                        msg_due
                            .get(&(from, to))
                            .and_then(|q| q.front().copied())
                            .unwrap_or(now),
                        *a,
                    ),
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))?;
            now = now.max(at);
            let mut before = vec![0usize; n * n];
            for (k, b) in before.iter_mut().enumerate() {
                *b = st
                    .cluster
                    .channel_len(NodeId((k / n) as u16), NodeId((k % n) as u16));
            }
            let next = self.next_state(&st, action)?;
            match action {
                Action::Run { node, op } => {
                    run_due[node as usize] = None;
                    if node == D && matches!(op, Op::Acquire(..)) {
                        asked = Some(now);
                    }
                }
                Action::Deliver { from, to, .. } => {
                    if let Some(q) = msg_due.get_mut(&(from, to)) {
                        q.pop_front();
                    }
                    before[from as usize * n + to as usize] -= 1;
                }
            }
            for (k, b) in before.iter().enumerate() {
                let (f, t) = ((k / n) as u16, (k % n) as u16);
                for _ in *b..next.cluster.channel_len(NodeId(f), NodeId(t)) {
                    let q = msg_due.entry((f, t)).or_default();
                    let last = q.back().copied().unwrap_or(now);
                    q.push_back(last.max(now + random() * delay));
                }
            }
            st = next;
            if let (Some(b), Some(t0)) = (st.blocked, asked) {
                return Some((now - t0, b));
            }
        }
    }

    /// Runs the checker (BFS, no depth limit) and returns it.
    pub fn check(self) -> impl Checker<InversionConfig> {
        self.checker().spawn_bfs().join()
    }
}

impl Model for InversionConfig {
    type State = InvState;
    type Action = Action;

    fn init_states(&self) -> Vec<InvState> {
        let n = self.nodes();
        let (variant, ceil) = match self.flavor {
            Flavor::Fifo | Flavor::Prioritized => (Variant::HILOCK, [0, 0]),
            Flavor::Pcep => (
                Variant {
                    inheritance: Inheritance::Pcep,
                    ..Variant::HILOCK
                },
                [PRIO_D, 0],
            ),
            Flavor::Pip => (
                Variant {
                    inheritance: Inheritance::Pip,
                    ..Variant::HILOCK
                },
                [0, 0],
            ),
        };
        let mut st = InvState {
            cluster: Cluster::new(
                (0..n as u16)
                    .map(|i| {
                        // L_i: token at A; L_j: token at D.
                        ISite::with_parents(NodeId(i), |l| {
                            let root = if l.0 == 0 { A } else { D };
                            (i != root).then_some(NodeId(root))
                        })
                        .expect("valid tree")
                        .with_variant(variant)
                        .with_ceilings(ceil)
                    })
                    .collect(),
            ),
            pc: vec![0; n],
            waiting: vec![false; n],
            d_pending: false,
            a_waits_j: false,
            overtakes: 0,
            clocks: None,
            blocked: None,
        };
        if self.flavor != Flavor::Fifo {
            for i in 0..n as u16 {
                self.step(&mut st, i, Input::SetPriority { base: self.prio(i) }, None);
            }
        }
        vec![st]
    }

    fn actions(&self, st: &InvState, actions: &mut Vec<Action>) {
        if st.cluster.error().is_some() {
            return;
        }
        for n in 0..self.nodes() as u16 {
            // Medium nodes issue a new request only when no message is in flight: message
            // delays are short compared with their non-critical sections. Without this,
            // an adversarial schedule can hold A's (boosted) request in flight forever and no
            // protocol can bound the inversion.
            let quiet =
                n == A || n == D || st.cluster.in_flight() == 0 || st.pc[n as usize] % 2 == 1;
            // P13 measures D's wait behind A: D asks once A holds R on L_i (asking before,
            // it is granted at once unless A's request races it).
            let behind_a = n != D || self.blocking.is_none() || st.pc[A as usize] > 0;
            if quiet && behind_a && !st.waiting[n as usize] {
                if let Some(&op) = self.script(n).get(st.pc[n as usize] as usize) {
                    actions.push(Action::Run { node: n, op });
                }
            }
        }
        for (f, t) in st.cluster.busy_channels() {
            if let Some(m) = st.cluster.channel(f, t).next() {
                actions.push(Action::Deliver {
                    from: f.0,
                    to: t.0,
                    msg: Delivered::of(m),
                });
            }
        }
    }

    fn next_state(&self, last: &InvState, action: Action) -> Option<InvState> {
        let mut st = last.clone();
        match action {
            Action::Run { node: n, op } => {
                if self.script(n).get(st.pc[n as usize] as usize) != Some(&op) {
                    return None;
                }
                if n == D && self.blocking.is_some() && matches!(op, Op::Acquire(..)) {
                    // D's request: time 0; every earlier event happened at time ≤ 0.
                    st.clocks = Some(Clocks {
                        clock: vec![Stamp::default(); self.nodes()],
                        start: vec![Stamp::default(); self.nodes()],
                        sent: Vec::new(),
                    });
                }
                let at = self.run_time(&st, n);
                if let (Some(c), Some(b)) = (st.clocks.as_mut(), at) {
                    if !Self::holds(last, n as usize) {
                        // A new request happens at a time ≤ b, after every event so far:
                        // each of them happened at a time ≤ b too.
                        for s in c.clock.iter_mut().chain(c.start.iter_mut()) {
                            if b.hops <= s.hops && b.sections <= s.sections {
                                *s = b;
                            }
                        }
                    }
                }
                st.pc[n as usize] += 1;
                match op {
                    Op::Acquire(l, mode) => {
                        st.waiting[n as usize] = true;
                        if n == D {
                            st.d_pending = true;
                        }
                        if n == A && l == 1 {
                            st.a_waits_j = true;
                        }
                        self.step(
                            &mut st,
                            n,
                            Input::Acquire {
                                lock: LockId(l),
                                mode,
                            },
                            at,
                        );
                    }
                    Op::Release(l) => self.step(&mut st, n, Input::Release { lock: LockId(l) }, at),
                }
                // The operation ends a stretch of code and begins the next.
                if let (Some(c), Some(t)) = (st.clocks.as_mut(), at) {
                    c.start[n as usize] = t;
                }
            }
            Action::Deliver { from: f, to: t, .. } => {
                let at = self.delivery_time(&mut st, f, t);
                let (_, r) = st.cluster.deliver(NodeId(f), NodeId(t))?;
                if let Ok(step) = r {
                    self.apply(&mut st, t, &step.outputs, at);
                }
            }
        }
        Some(st)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn format_step(&self, last: &InvState, action: Action) -> Option<String> {
        let next = self.next_state(last, action)?;
        let mut cluster = last.cluster.clone();
        let r = match action {
            Action::Run { node, op } => cluster
                .input(node_input(node), op_input(op))
                .map(|s| s.rules),
            Action::Deliver { from, to, .. } => cluster
                .deliver(NodeId(from), NodeId(to))?
                .1
                .map(|s| s.rules),
        };
        let rules = match r {
            Ok(r) if r.is_empty() => String::new(),
            Ok(r) => format!("\n  rules: {r}"),
            Err(e) => format!("\n  rejected by the kernel: {e}"),
        };
        let bad = crate::check::violations_line(self, &next);
        Some(format!("{action}{rules}{bad}\n\n{}", self.table(&next)))
    }

    fn as_svg(&self, path: Path<InvState, Action>) -> Option<String> {
        let mut d = crate::seq::Diagram::new((0..self.nodes() as u16).map(node_name).collect());
        let label = |from: u16, to: u16, msg: Delivered| {
            Action::Deliver { from, to, msg }
                .to_string()
                .split_once(&format!("{} ", node_name(to)))
                .map_or(String::new(), |(_, l)| l.to_string())
        };
        // Each message from the step that sent it to the one that delivered it; the ones
        // still in flight after the last step drawn as such.
        let wires = |st: &InvState| -> Vec<crate::seq::Wire> {
            st.cluster
                .messages()
                .map(|(f, t, m)| crate::seq::Wire {
                    from: f.idx(),
                    to: t.idx(),
                    key: format!("{:?}", Delivered::of(m)),
                    label: label(f.0, t.0, Delivered::of(m)),
                })
                .collect()
        };
        d.draw_path(&path.into_vec(), wires, |d, a| match *a {
            Action::Run { node, op } => {
                d.local(node.into(), op.to_string());
                None
            }
            Action::Deliver { from, to, msg } => {
                let key = format!("{msg:?}");
                d.deliver(from.into(), to.into(), &key, label(from, to, msg));
                Some((usize::from(from), usize::from(to), key))
            }
        });
        Some(d.svg())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            // P1, P2, P3, P3b, P4 and "no kernel error" are the harness's properties
            // (`hilock_harness::properties`), written once.
            Property::always(properties::P1, |_, st: &InvState| {
                st.cluster.check_mutual_exclusion().is_ok()
            }),
            Property::always(properties::P2, |_, st: &InvState| {
                st.cluster.check_single_token().is_ok()
            }),
            Property::always(properties::P3, |_, st: &InvState| {
                st.cluster.check_owned_records().is_ok()
                    && crate::token::kept_modes_idle(&st.cluster)
            }),
            Property::always(properties::P3B, |_, st: &InvState| {
                st.cluster.check_frozen_reach_children().is_ok()
            }),
            Property::always(properties::NO_ERROR, |_, st: &InvState| {
                st.cluster.check_no_kernel_error().is_ok()
            }),
            // P4 in quiescent-state form (no fairness needed): when nothing can move,
            // nobody waits — so every script has completed.
            Property::always(properties::P4, |m: &Self, st: &InvState| {
                st.cluster.check_no_deadlock(m.idle(st)).is_ok()
            }),
            Property::always("P7 bounded inversion", |m: &Self, st: &InvState| {
                st.overtakes <= m.bound
            }),
            Property::sometimes(
                "D waits while a lower-priority request is granted",
                |_, st: &InvState| st.overtakes >= 1,
            ),
            Property::sometimes("every script completes", |m: &Self, st: &InvState| {
                (0..m.nodes())
                    .all(|n| st.pc[n] as usize == m.script(n as u16).len() && !st.waiting[n])
            }),
        ];
        if self.blocking.is_some() {
            p.extend([
                // P13: D's grant happens at most `hops` message delays plus `sections`
                // stretches of critical-section code after its request.
                Property::always(P13_DELAYS, |m: &Self, st: &InvState| {
                    match (m.blocking, st.blocked) {
                        (Some(b), Some(x)) => x.hops <= b.hops,
                        _ => true,
                    }
                }),
                Property::always(P13_SECTIONS, |m: &Self, st: &InvState| {
                    match (m.blocking, st.blocked) {
                        (Some(b), Some(x)) => x.sections <= b.sections,
                        _ => true,
                    }
                }),
                Property::sometimes(P13_BOTH, |m: &Self, st: &InvState| {
                    m.blocking.is_some() && st.blocked == m.blocking
                }),
            ]);
        }
        p
    }
}

fn node_input(n: u16) -> NodeId {
    NodeId(n)
}

fn op_input(op: Op) -> Input<'static, hilock_spec::SpecMsg> {
    match op {
        Op::Acquire(l, mode) => Input::Acquire {
            lock: LockId(l),
            mode,
        },
        Op::Release(l) => Input::Release { lock: LockId(l) },
    }
}

/// P13's closed form under PIP: with `nodes` = N = m + 2 nodes (A, D and m medium nodes
/// that each ask for L_j once), D's grant comes at most `hops` message delays δ plus
/// `sections` stretches of critical-section code C after its request:
///
/// - sections = N + 1: A's stretch of code on L_i before it asks for L_j (D's request reaches
///   A while it runs); then at most one critical section per medium node on L_j ahead of A
///   — a medium node has one request at a time and asks only while no message is in flight
///   (the timing assumption), so none after A's request at ξ(D) is sent, and at the token
///   node A's request then comes first (Rule 8.1); then A's section on L_j and the rest of
///   its section on L_i.
/// - hops = N + 2 for N ≥ 4: D's request to A, the token node of L_i (1; Rule 4.2, and PIP's
///   HandleRequest makes A inherit ξ(D) and reissue its request for L_j, Fig. 3.8); the
///   reissued request from A to D, its parent on L_j, and on along the parent pointers each
///   token transfer left, once per medium node that held the token (1 + m); the token to A
///   (1; Rule 5); the token of L_i to D when A releases it (1).
/// - hops = 4 for N = 3: with one medium node the reissue only follows A's first request
///   along the same FIFO path and decides nothing; the longest chain is that first request
///   (2), sent when A's first stretch ends, then the token to A and the token to D.
///
/// The queue capacity Q does not appear: it only has to hold the requests that wait, and a
/// full queue would be a kernel error, which every check excludes. The nesting depth is the
/// model's: D waits on L_i, A on the nested L_j.
pub fn pip_blocking_bound(nodes: usize) -> Stamp {
    let n = nodes as u8;
    Stamp {
        hops: if nodes == 3 { 4 } else { n + 2 },
        sections: n + 1,
    }
}

/// P13, the message delays of D's wait: at most `blocking.hops`.
pub const P13_DELAYS: &str = "P13 blocking: message delays";
/// P13, the stretches of critical-section code D waits for: at most `blocking.sections`.
pub const P13_SECTIONS: &str = "P13 blocking: critical-section code";

/// P13, both bounds on one run: D is granted exactly `blocking.hops` delays plus
/// `blocking.sections` stretches of code after its request.
pub const P13_BOTH: &str = "P13 blocking: both bounds on one run";

/// Result of searching the least bound of a property.
#[derive(Clone, Debug)]
pub struct BoundReport {
    /// The least bound for which the property holds.
    pub bound: u8,
    /// Unique states explored by the passing check.
    pub states: usize,
    /// Counterexample (as a list of actions) for the bound − 1, if it was checked.
    pub counterexample: Option<Vec<String>>,
}

/// Finds the least bound (trying `from`, `from` + 1, …, `max`) for which `property` holds
/// in the configuration `config(bound)`, checking the other properties on the way. Returns
/// an error naming a violated property. With `from` > 0 the result is the least bound only
/// if the check of `from` failed (`counterexample` is then set).
fn least(
    config: impl Fn(u8) -> InversionConfig,
    property: &'static str,
    from: u8,
    max: u8,
) -> Result<BoundReport, String> {
    let mut previous = None;
    for bound in from..=max {
        let cfg = config(bound);
        let checker = cfg.check();
        for p in [
            properties::P1,
            properties::P2,
            properties::P3,
            properties::P3B,
            properties::NO_ERROR,
            properties::P4,
        ] {
            if let Some(path) = checker.discovery(p) {
                let steps: Vec<String> =
                    path.into_actions().iter().map(|a| a.to_string()).collect();
                return Err(format!("{p} violated: {}", steps.join("; ")));
            }
        }
        match checker.discovery(property) {
            Some(path) => {
                previous = Some(path.into_actions().iter().map(|a| a.to_string()).collect())
            }
            None => {
                return Ok(BoundReport {
                    bound,
                    states: checker.unique_state_count(),
                    counterexample: previous,
                });
            }
        }
    }
    Err(format!("{property} fails for every bound up to {max}"))
}

/// Finds the least B such that P7 holds (trying 0, 1, …, `max`), checking the other
/// properties on the way. Returns an error naming a violated property.
pub fn least_bound(
    flavor: Flavor,
    mediums: usize,
    rounds: usize,
    max: u8,
) -> Result<BoundReport, String> {
    let config = |bound| InversionConfig {
        flavor,
        mediums,
        rounds,
        bound,
        blocking: None,
    };
    least(config, "P7 bounded inversion", 0, max)
}

/// The least bounds of P13: how many message delays and how many stretches of
/// critical-section code D's grant can come after its request, each searched from `from`
/// (its `hops` and `sections`) up to `max`.
#[derive(Clone, Debug)]
pub struct BlockingReport {
    /// The least bound on the message delays.
    pub delays: BoundReport,
    /// The least bound on the stretches of critical-section code.
    pub sections: BoundReport,
}

/// Finds the least bounds of P13 (message delays with any number of sections, and
/// sections with any number of delays), searching each from `from`'s component up to
/// `max`. Returns an error naming a violated property.
pub fn least_blocking(
    flavor: Flavor,
    mediums: usize,
    rounds: usize,
    from: Stamp,
    max: u8,
) -> Result<BlockingReport, String> {
    let config = |blocking| InversionConfig {
        flavor,
        mediums,
        rounds,
        bound: u8::MAX,
        blocking: Some(blocking),
    };
    let delays = least(
        |hops| {
            config(Stamp {
                hops,
                sections: u8::MAX,
            })
        },
        P13_DELAYS,
        from.hops,
        max,
    )?;
    let sections = least(
        |sections| {
            config(Stamp {
                hops: u8::MAX,
                sections,
            })
        },
        P13_SECTIONS,
        from.sections,
        max,
    )?;
    Ok(BlockingReport { delays, sections })
}

/// A counterexample of the inversion model (`hilock-inversion-trace/1`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct InversionTrace {
    /// `hilock-inversion-trace/1`.
    pub format: String,
    /// The configuration's name.
    pub model: String,
    /// The configuration.
    pub config: InversionConfig,
    /// The property violated.
    pub property: String,
    /// What is wrong in the last state.
    pub violation: String,
    /// The steps.
    pub steps: Vec<InversionTraceStep>,
}

/// One step of an [`InversionTrace`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct InversionTraceStep {
    /// Index.
    pub index: usize,
    /// The action in words.
    pub action: String,
    /// Lower-priority critical sections granted on L_j while D waited, so far.
    pub overtakes: u8,
}
