//! A deterministic in-memory system of kernel sites connected by per-pair FIFO channels.
//!
//! It is the harness of the scenario runner and of the robustness proptests: it routes the
//! `Send` outputs of each step into channels, delivers messages when told to, and checks
//! the global safety properties (mutual exclusion, one token) after any step.

use hilock_kernel::tables::table_2_1;
use hilock_kernel::{
    Input, KernelError, LockId, Mode, Msg, NodeId, Output, Outputs, RuleSet, Site,
};
use std::collections::{BTreeMap, VecDeque};

/// Largest number of nodes a spec system supports.
pub const MAX_NODES: usize = 16;
/// Locks per site in a spec system.
pub const MAX_LOCKS: usize = 4;
/// Queue capacity (at least [`MAX_NODES`]).
pub const QUEUE: usize = MAX_NODES;
/// Output capacity (`N + Q + L + 6`).
pub const OUT: usize = MAX_NODES + QUEUE + MAX_LOCKS + 6;

/// The kernel site type the spec tools use.
pub type SpecSite = Site<MAX_NODES, MAX_LOCKS, QUEUE>;
/// The message type of [`SpecSite`].
pub type SpecMsg = Msg<QUEUE>;

/// A message in flight, with its global send number (for "oldest first" delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// Global send order.
    pub seq: u64,
    /// The message.
    pub msg: SpecMsg,
}

/// What one step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepResult {
    /// The node that stepped.
    pub node: NodeId,
    /// The outputs it produced (empty on error).
    pub outputs: Vec<Output<SpecMsg>>,
    /// The kernel's rejection, if any.
    pub error: Option<KernelError>,
    /// The rules that fired (empty on error).
    pub rules: RuleSet,
}

/// A set of sites and the channels between them.
#[derive(Clone, Debug)]
pub struct System {
    /// The sites, indexed by node id.
    pub sites: Vec<SpecSite>,
    /// FIFO channels keyed by (from, to).
    pub channels: BTreeMap<(NodeId, NodeId), VecDeque<InFlight>>,
    seq: u64,
    /// Messages sent so far.
    pub sent: u64,
}

impl System {
    /// `n` sites whose lock `l` has the parent pointers `parents(l)[i]` (`None` for the
    /// token holder).
    pub fn new(
        n: usize,
        parents: impl Fn(LockId, NodeId) -> Option<NodeId>,
    ) -> Result<Self, KernelError> {
        if n == 0 || n > MAX_NODES {
            return Err(KernelError::UnknownNode(NodeId(
                n.min(u16::MAX as usize) as u16
            )));
        }
        let sites = (0..n)
            .map(|i| SpecSite::with_parents(NodeId(i as u16), |l| parents(l, NodeId(i as u16))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(System {
            sites,
            channels: BTreeMap::new(),
            seq: 0,
            sent: 0,
        })
    }

    /// `n` sites in a star around `root` for every lock.
    pub fn star(n: usize, root: NodeId) -> Result<Self, KernelError> {
        Self::new(n, |_, me| if me == root { None } else { Some(root) })
    }

    /// Number of sites.
    pub fn len(&self) -> usize {
        self.sites.len()
    }

    /// Whether the system has no sites (never true for a constructed system).
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Apply a user input at `node`.
    pub fn input(&mut self, node: NodeId, input: Input<'_, SpecMsg>) -> StepResult {
        self.step(node, input)
    }

    fn step(&mut self, node: NodeId, input: Input<'_, SpecMsg>) -> StepResult {
        let Some(site) = self.sites.get_mut(node.idx()) else {
            return StepResult {
                node,
                outputs: vec![],
                error: Some(KernelError::UnknownNode(node)),
                rules: RuleSet::EMPTY,
            };
        };
        let mut out: Outputs<SpecMsg, OUT> = Outputs::new();
        match site.step(input, &mut out) {
            Ok(report) => {
                let outputs: Vec<_> = out.into_iter().collect();
                for o in &outputs {
                    if let Output::Send { to, msg } = o {
                        self.seq += 1;
                        self.sent += 1;
                        self.channels
                            .entry((node, *to))
                            .or_default()
                            .push_back(InFlight {
                                seq: self.seq,
                                msg: msg.clone(),
                            });
                    }
                }
                StepResult {
                    node,
                    outputs,
                    error: None,
                    rules: report.rules,
                }
            }
            Err(e) => StepResult {
                node,
                outputs: vec![],
                error: Some(e),
                rules: RuleSet::EMPTY,
            },
        }
    }

    /// Deliver an arbitrary message to `to` as if sent by `from` (it is not taken from a
    /// channel). Used to inject duplicates and nonsense.
    pub fn inject(&mut self, from: NodeId, to: NodeId, msg: &SpecMsg) -> StepResult {
        self.step(to, Input::Deliver { from, msg })
    }

    /// Deliver the oldest message on channel `from → to`, if any.
    pub fn deliver(&mut self, from: NodeId, to: NodeId) -> Option<(SpecMsg, StepResult)> {
        let q = self.channels.get_mut(&(from, to))?;
        let m = q.pop_front()?;
        if q.is_empty() {
            self.channels.remove(&(from, to));
        }
        let r = self.step(to, Input::Deliver { from, msg: &m.msg });
        Some((m.msg, r))
    }

    /// Deliver the message at position `index` of channel `from → to` (0 = oldest), out of
    /// FIFO order: a reordering network.
    pub fn deliver_at(
        &mut self,
        from: NodeId,
        to: NodeId,
        index: usize,
    ) -> Option<(SpecMsg, StepResult)> {
        let q = self.channels.get_mut(&(from, to))?;
        let m = q.remove(index)?;
        if q.is_empty() {
            self.channels.remove(&(from, to));
        }
        let r = self.step(to, Input::Deliver { from, msg: &m.msg });
        Some((m.msg, r))
    }

    /// Number of messages in flight on channel `from → to`.
    pub fn channel_len(&self, from: NodeId, to: NodeId) -> usize {
        self.channels.get(&(from, to)).map_or(0, |q| q.len())
    }

    /// The channel whose head message was sent first, if any message is in flight.
    pub fn oldest_channel(&self) -> Option<(NodeId, NodeId)> {
        self.channels
            .iter()
            .filter_map(|(k, q)| q.front().map(|m| (m.seq, *k)))
            .min()
            .map(|(_, k)| k)
    }

    /// Channels with a message in flight.
    pub fn busy_channels(&self) -> Vec<(NodeId, NodeId)> {
        self.channels
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect()
    }

    /// Number of messages in flight.
    pub fn in_flight(&self) -> usize {
        self.channels.values().map(|q| q.len()).sum()
    }

    /// P1, mutual exclusion: no two sites hold incompatible modes of the same lock
    /// (Table 2.1 as transcribed, [`hilock_kernel::tables::TABLE_2_1`]).
    pub fn check_mutual_exclusion(&self) -> Result<(), String> {
        for l in 0..MAX_LOCKS {
            let lock = LockId(l as u16);
            let held: Vec<(NodeId, Mode)> = self
                .sites
                .iter()
                .map(|s| (s.id(), s.lock(lock).map(|n| n.held()).unwrap_or(Mode::Phi)))
                .filter(|(_, m)| *m != Mode::Phi)
                .collect();
            for (i, (a, ma)) in held.iter().enumerate() {
                for (b, mb) in &held[i + 1..] {
                    // The oracle is the literal Table 2.1, independent of the kernel's
                    // `conflicts` (which a unit test compares with it cell by cell).
                    if table_2_1(*ma, *mb) || table_2_1(*mb, *ma) {
                        return Err(format!(
                            "mutual exclusion violated on {lock}: {a} holds {ma} and {b} holds {mb}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether a message of `lock` that satisfies `kind` is in flight from `a` to `b`.
    fn in_flight_on(
        &self,
        a: usize,
        b: usize,
        lock: usize,
        kind: impl Fn(&SpecMsg) -> bool,
    ) -> bool {
        self.channels
            .get(&(NodeId(a as u16), NodeId(b as u16)))
            .is_some_and(|q| q.iter().any(|m| m.msg.lock().idx() == lock && kind(&m.msg)))
    }

    /// P3 (exact: the channels are FIFO) and P3b, the tree invariants 2.2 and 2.3
    /// ([`crate::properties`]), over the sites and the messages in flight.
    pub fn check_tree_invariants(&self) -> Result<(), String> {
        let records = |m: &SpecMsg| {
            matches!(
                m,
                Msg::Release { .. } | Msg::Grant { .. } | Msg::Token { .. }
            )
        };
        crate::properties::owned_records(&self.sites, MAX_LOCKS, true, |c, p, l| {
            !self.in_flight_on(c, p, l, records) && !self.in_flight_on(p, c, l, records)
        })?;
        crate::properties::frozen_reach_children(&self.sites, MAX_LOCKS, |c, p, l| {
            !self.in_flight_on(c, p, l, |_| true) && !self.in_flight_on(p, c, l, |_| true)
        })
    }

    /// P2, single token: exactly one token per lock, at a site or in flight.
    pub fn check_single_token(&self) -> Result<(), String> {
        for l in 0..MAX_LOCKS {
            let lock = LockId(l as u16);
            let at_sites = self
                .sites
                .iter()
                .filter(|s| s.lock(lock).map(|n| n.has_token()).unwrap_or(false))
                .count();
            let in_flight = self
                .channels
                .values()
                .flatten()
                .filter(|m| matches!(&m.msg, Msg::Token { lock: ml, .. } if *ml == lock))
                .count();
            if at_sites + in_flight != 1 {
                return Err(format!(
                    "{lock}: {at_sites} tokens at sites and {in_flight} in flight"
                ));
            }
        }
        Ok(())
    }
}
