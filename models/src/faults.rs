//! The base protocol with crashes, restarts, partitions/pauses, lease expiry and epoch
//! installation (`docs/faults.md`, "The recovery mechanism (kernel and model)"), driving
//! `hilock_kernel::token::recovery`.
//!
//! The sites are [`FaultSite`]s in the one harness ([`Cluster`]); the model re-implements no
//! rule. It runs each node's script, delivers messages (FIFO), and by default plays the
//! membership service as an **atomic oracle** (the runtime's stages: "Staged install"
//! below): one [`FaultAction::Install`] computes the next
//! membership ([`next_members`]), collects every new member's report
//! ([`FaultSite::report`]), rebuilds the lock ([`rebuild`]) and installs the plan at every
//! member ([`FaultSite::install`]) in one step. Fault actions, each within a budget of the
//! configuration:
//!
//! - [`FaultAction::Crash`]: crash-stop ([`Cluster::crash`]: messages to the node are lost;
//!   those it sent are still delivered — and rejected by their epoch once a new one is
//!   installed);
//! - [`FaultAction::Suspect`]: the node is partitioned away or paused: the service stops
//!   hearing its renewals, and no message to or from it is delivered while it lasts; the
//!   node itself still runs its script (a local grant, Rule 2, needs no message). Its own
//!   lease then expires ([`FaultAction::Expire`], [`FaultSite::expire_lease`]: holds killed);
//! - [`FaultAction::Restart`]: a crashed or expired node comes back as a new incarnation
//!   ([`FaultSite::joining`]) and reruns its script from the start once it is let in;
//! - [`FaultAction::Reinstall`]: the plan of the current epoch is delivered again to a
//!   member (a duplicated install).
//!
//! The oracle installs only when the membership changes, and only when it can hear every
//! member of the new epoch (a suspected member is waited for until its lease expired).
//! Epochs only grow and every budget is finite, so the state graph is finite and acyclic
//! (so it is with staged installs: a freeze ends only with an install of a later epoch or
//! with a fault).
//!
//! # Staged install
//! With [`FaultConfig::staged_install`] the single [`FaultAction::Install`] is replaced by
//! the stages the runtime goes through (`runtime/src/token/recover.rs`), each a model
//! action, with every fault action still enabled between them:
//!
//! - [`FaultAction::Freeze`]: a member of the next membership ([`next_members`] as soon as
//!   the service sees the change; once a member has reported, the epoch it froze for even
//!   if the change went away: [`next_members_after_reports`]) that the service hears and that has installed the
//!   recorded epoch (or a new incarnation) writes its [`FaultSite::report`] and freezes:
//!   it runs no script step and takes no delivery (messages to it stay in flight) until it
//!   installs;
//! - [`FaultAction::Lead`]: once every member of the next membership has reported, the
//!   recovery leader runs [`rebuild`] on the reports given at freeze time and records the
//!   plan of the next epoch (the runtime's compare-and-swap: one plan per epoch). Which
//!   node leads is not modelled: the rebuild is a pure function of the reports, and a
//!   leader that fails before its compare-and-swap has recorded nothing;
//! - [`FaultAction::InstallAt`]: a member named by the recorded plan, up and heard,
//!   runs [`FaultSite::install`] at its own time and unfreezes.
//!
//! A member that reported may crash, be cut off or expire before the leader records or
//! before it installs (its report and its pending install are then gone; the next epoch
//! removes it); a member that installed sends to one that has not (which is frozen: the
//! message stays in flight until it installs, as the runtime holds it back); a node that
//! has not frozen yet runs and sends. [`FaultConfig::no_freeze`] sabotages the freeze (a node that reported
//! keeps stepping) to show what the freeze prevents.
//!
//! # Properties
//! - [`P1`]: no two nodes that are up hold conflicting modes (Table 2.1). A node that is
//!   up holds something only while its lease is valid on its own clock (expiry kills), so
//!   this is mutual exclusion among the holders with a live lease. A frozen node keeps its
//!   holds (its holders' commands go on), so it counts like any other.
//! - [`ONE_TOKEN`]: per epoch at most one token: at the up members of that epoch plus the
//!   tokens of that epoch in flight (staged install: plus the recorded plan's token while
//!   its root, up, has not installed the plan).
//! - [`NO_LOST`] (liveness, over quiescent states — no message deliverable, no script can
//!   run, no lease expiry or install pending; staged install: no freeze, record or install
//!   enabled): every up member of the current epoch ran its script to the end and has no
//!   request pending (staged install: and is neither frozen nor behind the recorded
//!   epoch). As in the base model, the graph is acyclic and finite, so this is "every
//!   request of a live member is eventually granted" on every path.
//! - [`NO_ERROR`]: every input and recovery transition the model gave was accepted (a
//!   message of an earlier epoch, or to a node that is not a member, is dropped by design).
//! - `sometimes`: a token regenerated, a lease expired while holding, a request granted
//!   after an install, a restarted node granted.

use crate::check::{property_reports, Counterexample};
use crate::token::ScriptOp;
use hilock_harness::Cluster;
use hilock_kernel::token::recovery::{
    next_members, next_members_after_reports, rebuild, Epoch, FaultSite, Liveness, LockReport,
    Plan, RecoveryVariant, Stamped, Standing,
};
use hilock_kernel::{
    Forwarding, Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, ReleaseRule, Site,
    Variant,
};
use hilock_spec::system::{SpecMsg, MODEL_NODES, QUEUE};
use hilock_spec::trace::describe_msg;
use serde::{Deserialize, Serialize};
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::collections::BTreeSet;
use std::fmt;
use std::time::Instant;

/// The site of the fault model: one lock.
pub type FSite = FaultSite<MODEL_NODES, 1, QUEUE>;
/// Its message: a base-protocol message stamped with an epoch.
pub type FMsg = Stamped<SpecMsg>;

const L0: LockId = LockId(0);

/// Property names.
pub const P1: &str = "P1 mutual exclusion (live leases)";
/// See the module docs.
pub const ONE_TOKEN: &str = "single token per lock per epoch";
/// See the module docs.
pub const NO_LOST: &str = "no lost request of a live member";
/// See the module docs.
pub const NO_ERROR: &str = "no kernel error";
/// `sometimes`: an install regenerated a token.
pub const REGENERATED: &str = "reached: token regenerated";
/// `sometimes`: a lease expired while its node held the lock.
pub const KILLED: &str = "reached: holder killed at lease expiry";
/// `sometimes`: a request was granted after an install.
pub const AFTER_INSTALL: &str = "reached: granted after an install";
/// `sometimes`: a restarted incarnation was granted.
pub const REJOINED: &str = "reached: restarted node granted";

/// The `always` properties.
pub const SAFETY: [&str; 4] = [P1, ONE_TOKEN, NO_LOST, NO_ERROR];
/// The `sometimes` properties.
pub const REACHED: [&str; 4] = [REGENERATED, KILLED, AFTER_INSTALL, REJOINED];

/// A configuration: a star around n0 (the initial token node) with one lock. As a file
/// (`hilock check`, `hilock explore`: `"model": "faults"`), only `name` and `scripts` are
/// needed: the budgets default to 0, the variant to [`RecoveryVariant::HILOCK`], the rules
/// to the kernel's defaults.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Name (reports, counterexamples).
    pub name: String,
    /// Per node, its script (`acquire M`, `release`, `upgrade`; lock 0 only).
    pub scripts: Vec<Vec<ScriptOp>>,
    /// Crash budget.
    #[serde(default)]
    pub crashes: u8,
    /// Partition/pause budget ([`FaultAction::Suspect`]).
    #[serde(default)]
    pub suspicions: u8,
    /// Restart budget.
    #[serde(default)]
    pub restarts: u8,
    /// Duplicated installs.
    #[serde(default)]
    pub reinstalls: u8,
    /// The recovery safeguards.
    #[serde(default = "hilock_recovery")]
    pub variant: RecoveryVariant,
    /// The forwarding rule of the sites of the initial membership (`spec/SPEC.md` 1.6;
    /// default: the kernel's default). A restarted node's new incarnation
    /// (`FaultSite::joining`) always runs the kernel's default.
    #[serde(default)]
    pub forwarding: Forwarding,
    /// The release rule of the sites of the initial membership (`spec/SPEC.md` 1.7;
    /// default: the thesis's eager Rule 5.2). Not serialized while it is the default.
    #[serde(default, skip_serializing_if = "ReleaseRule::is_eager")]
    pub release: ReleaseRule,
    /// Install each epoch in the runtime's stages ([`FaultAction::Freeze`],
    /// [`FaultAction::Lead`], [`FaultAction::InstallAt`]; see the module docs) instead of
    /// the atomic [`FaultAction::Install`]. Default `false`; not serialized while `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub staged_install: bool,
    /// Sabotage of a staged install: a node that reported keeps stepping (it runs its
    /// script and takes deliveries) until it installs, so its report goes stale. Only with
    /// `staged_install`. Default `false`; not serialized while `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_freeze: bool,
}

fn hilock_recovery() -> RecoveryVariant {
    RecoveryVariant::HILOCK
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl FaultConfig {
    /// The configuration's error, if the model cannot be built from it (a configuration
    /// read from a file): 2 to 5 nodes, and scripts on lock 0 only.
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=MODEL_NODES).contains(&self.scripts.len()) {
            return Err(format!(
                "{} nodes: the fault model has 2 to {MODEL_NODES}",
                self.scripts.len()
            ));
        }
        if let Some(op) = self.scripts.iter().flatten().find(|op| op.lock() != 0) {
            return Err(format!("'{op}': the fault model has one lock, lock 0"));
        }
        if self.no_freeze && !self.staged_install {
            return Err("no_freeze needs staged_install".into());
        }
        Ok(())
    }

    /// A configuration with no fault budget yet (add with the `with_*` methods).
    ///
    /// # Panics
    /// If a script operation does not parse, or names another lock than 0.
    pub fn new(name: &str, scripts: &[&[&str]]) -> Self {
        let scripts: Vec<Vec<ScriptOp>> = scripts
            .iter()
            .map(|s| {
                s.iter()
                    .map(|op| op.parse().unwrap_or_else(|e| panic!("{e}")))
                    .collect()
            })
            .collect();
        let c = FaultConfig {
            name: name.to_string(),
            scripts,
            crashes: 0,
            suspicions: 0,
            restarts: 0,
            reinstalls: 0,
            variant: RecoveryVariant::HILOCK,
            forwarding: Forwarding::default(),
            release: ReleaseRule::Eager,
            staged_install: false,
            no_freeze: false,
        };
        c.validate().unwrap_or_else(|e| panic!("{e}"));
        c
    }
    /// With release rule `r` at the sites of the initial membership (`spec/SPEC.md` 1.7).
    pub fn with_release(mut self, r: ReleaseRule) -> Self {
        self.release = r;
        self
    }
    /// With forwarding rule `f` at the sites of the initial membership (`spec/SPEC.md` 1.6).
    pub fn with_forwarding(mut self, f: Forwarding) -> Self {
        self.forwarding = f;
        self
    }
    /// With budgets: crashes, suspicions (partition/pause), restarts, duplicated installs.
    pub fn with_faults(
        mut self,
        crashes: u8,
        suspicions: u8,
        restarts: u8,
        reinstalls: u8,
    ) -> Self {
        self.crashes = crashes;
        self.suspicions = suspicions;
        self.restarts = restarts;
        self.reinstalls = reinstalls;
        self
    }
    /// With the runtime's staged install instead of the atomic oracle.
    pub fn with_staged_install(mut self) -> Self {
        self.staged_install = true;
        self
    }
    /// With a staged install whose nodes do not freeze when they report (a sabotage).
    pub fn without_freeze(mut self) -> Self {
        self.staged_install = true;
        self.no_freeze = true;
        self
    }
    /// With recovery variant `v`.
    pub fn with_variant(mut self, v: RecoveryVariant) -> Self {
        self.variant = v;
        self
    }
    /// Under another name.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
    fn n(&self) -> usize {
        self.scripts.len()
    }
}

/// Budget slots in [`FState::used`].
const CRASH: usize = 0;
const SUSPECT: usize = 1;
const RESTART: usize = 2;
const REINSTALL: usize = 3;

/// [`FState::events`] bits of the last step.
mod ev {
    pub const REGENERATED: u8 = 1;
    pub const KILLED: u8 = 2;
    pub const AFTER_INSTALL: u8 = 4;
    pub const REJOINED: u8 = 8;
}

/// A state of the fault model.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FState {
    /// The sites and the network: the one harness.
    pub cluster: Cluster<FSite>,
    /// Per node, its next script operation.
    pub pc: [u8; MODEL_NODES],
    /// The oracle's epoch (staged install: the last epoch the leader recorded, which some
    /// of its members may not have installed yet).
    pub epoch: Epoch,
    /// The oracle's members of `epoch`.
    pub members: [bool; MODEL_NODES],
    /// Nodes the oracle cannot hear (partitioned or paused).
    pub suspected: [bool; MODEL_NODES],
    /// Per node, whether it is a restarted incarnation (for [`REJOINED`]).
    pub restarted: [bool; MODEL_NODES],
    /// Fault budgets used: crashes, suspicions, restarts, reinstalls.
    pub used: [u8; 4],
    /// The plan of the current epoch (for [`FaultAction::Reinstall`]; staged install: the
    /// recorded plan that [`FaultAction::InstallAt`] installs).
    pub plan: Option<Plan<QUEUE>>,
    /// Staged install: per node, whether it reported and froze ([`FaultAction::Freeze`])
    /// and has not installed since.
    pub frozen: [bool; MODEL_NODES],
    /// Staged install: per node, the report it gave when it froze, until the leader used
    /// it ([`FaultAction::Lead`]).
    pub reports: [Option<LockReport<QUEUE>>; MODEL_NODES],
    /// Staged install: per node, whether the recorded plan of `epoch` names it and it has
    /// not installed that plan yet ([`FaultAction::InstallAt`]).
    pub to_install: [bool; MODEL_NODES],
    /// Whether an install happened (for [`AFTER_INSTALL`]).
    pub installed: bool,
    /// A script input or recovery transition the kernel rejected (a violation of
    /// [`NO_ERROR`]).
    pub error: Option<String>,
    /// What the last step did.
    pub events: u8,
}

/// An action of the fault model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// Node `node` runs its next script operation.
    Run {
        /// The node.
        node: u8,
        /// The operation.
        op: ScriptOp,
    },
    /// Deliver the head of channel `from → to`.
    Deliver {
        /// Sender.
        from: u8,
        /// Receiver.
        to: u8,
        /// Kind of the message.
        kind: MsgKind,
        /// Its epoch.
        epoch: Epoch,
    },
    /// Crash-stop a node.
    Crash(u8),
    /// The service stops hearing a node (partition or pause).
    Suspect(u8),
    /// A suspected node's lease expires on its own clock: its holds are killed.
    Expire(u8),
    /// The oracle installs the next epoch.
    Install,
    /// Staged install: a member of the next epoch sees the membership change, writes its
    /// report and freezes (no kernel step until it installs).
    Freeze(u8),
    /// Staged install: every member of the next epoch has reported; the recovery leader
    /// rebuilds from the reports and records the plan of the next epoch (once per epoch).
    Lead,
    /// Staged install: a frozen member named by the recorded plan installs it and unfreezes.
    InstallAt(u8),
    /// A crashed or expired node restarts as a new incarnation.
    Restart(u8),
    /// The current plan is delivered again to a member.
    Reinstall(u8),
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultAction::Run { node, op } => write!(f, "n{node} {op}"),
            FaultAction::Deliver {
                from,
                to,
                kind,
                epoch,
            } => write!(f, "n{from} → n{to} {kind:?} (epoch {epoch})"),
            FaultAction::Crash(n) => write!(f, "n{n} crashes"),
            FaultAction::Suspect(n) => write!(f, "n{n} is cut off (partition or pause)"),
            FaultAction::Expire(n) => write!(f, "n{n}'s lease expires on its own clock"),
            FaultAction::Install => write!(f, "the membership service installs the next epoch"),
            FaultAction::Freeze(n) => {
                write!(f, "n{n} sees the membership change, reports and freezes")
            }
            FaultAction::Lead => write!(
                f,
                "the recovery leader rebuilds from the reports and records the next epoch"
            ),
            FaultAction::InstallAt(n) => write!(f, "n{n} installs the recorded plan and unfreezes"),
            FaultAction::Restart(n) => write!(f, "n{n} restarts (new incarnation)"),
            FaultAction::Reinstall(n) => write!(f, "the current plan reaches n{n} again"),
        }
    }
}

impl fmt::Debug for FState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members: Vec<String> = (0..MODEL_NODES)
            .filter(|i| self.members[*i])
            .map(|i| format!("n{i}"))
            .collect();
        writeln!(f, "epoch {} members {{{}}}", self.epoch, members.join(","))?;
        for (i, s) in self.cluster.sites().enumerate() {
            if self.cluster.is_down(NodeId(i as u16)) {
                writeln!(f, "n{i}: crashed")?;
                continue;
            }
            let l = s.site().locks()[0].clone();
            write!(
                f,
                "n{i}: {:?} epoch {} M_H {} M_P {}",
                s.standing(),
                s.epoch(),
                l.held(),
                l.pending_mode()
            )?;
            if l.has_token() {
                write!(f, " token g{}", l.token_generation().unwrap_or(0))?;
            } else if let Some(p) = l.parent() {
                write!(f, " parent n{}", p.0)?;
            }
            let ch: Vec<String> = l.children().map(|(c, m)| format!("{c}:{m}")).collect();
            if !ch.is_empty() {
                write!(f, " children {{{}}}", ch.join(","))?;
            }
            let q: Vec<String> = l
                .queue()
                .iter()
                .map(|e| format!("{}:{}", e.requester, e.mode))
                .collect();
            if !q.is_empty() {
                write!(f, " queue [{}]", q.join(","))?;
            }
            if self.suspected[i] {
                f.write_str(" (cut off)")?;
            }
            if self.to_install[i] {
                write!(f, " (frozen, epoch {} to install)", self.epoch)?;
            } else if self.frozen[i] {
                f.write_str(" (frozen, reported)")?;
            }
            writeln!(f, " script at {}", self.pc[i])?;
        }
        let names: Vec<String> = (0..self.cluster.len()).map(|i| format!("n{i}")).collect();
        for (a, b, m) in self.cluster.messages() {
            writeln!(
                f,
                "in flight n{} → n{}: {} (epoch {})",
                a.0,
                b.0,
                describe_msg(&m.msg, &names),
                m.epoch
            )?;
        }
        if let Some(e) = self.cluster.error() {
            writeln!(f, "kernel error: {e}")?;
        }
        if let Some(e) = &self.error {
            writeln!(f, "recovery error: {e}")?;
        }
        Ok(())
    }
}

/// The model of a [`FaultConfig`].
#[derive(Clone, Debug)]
pub struct FaultModel {
    /// The configuration.
    pub cfg: FaultConfig,
}

impl FaultConfig {
    /// The model.
    pub fn into_model(self) -> FaultModel {
        FaultModel { cfg: self }
    }
}

fn kernel_input<M>(op: ScriptOp) -> Input<'static, M> {
    crate::token::BaseModel::<1>::input_of(op)
}

impl FaultModel {
    fn node(i: usize) -> NodeId {
        NodeId(i as u16)
    }

    fn up(st: &FState, i: usize) -> bool {
        !st.cluster.is_down(Self::node(i))
    }

    fn standing(st: &FState, i: usize) -> Standing {
        st.cluster.site(Self::node(i)).standing()
    }

    fn runnable(&self, st: &FState, i: usize) -> Option<ScriptOp> {
        if !Self::up(st, i) || Self::standing(st, i) != Standing::Member || !self.steps(st, i) {
            return None;
        }
        let op = *self.cfg.scripts[i].get(st.pc[i] as usize)?;
        let l = &st.cluster.site(Self::node(i)).site().locks()[0];
        (l.pending_mode() == Mode::Phi).then_some(op)
    }

    /// Whether node `i` takes kernel steps (runs its script, takes deliveries): not while
    /// it is frozen (staged install), unless freezing is sabotaged (`no_freeze`).
    fn steps(&self, st: &FState, i: usize) -> bool {
        !st.frozen[i] || self.cfg.no_freeze
    }

    /// The oracle's view of each node. A new incarnation named by the recorded plan (staged
    /// install, not installed yet) is a member of that epoch: `Up`, as the runtime counts
    /// a run the installed epoch names.
    fn view(st: &FState) -> [Liveness; MODEL_NODES] {
        core::array::from_fn(|i| {
            if i >= st.cluster.len() || st.cluster.is_down(Self::node(i)) {
                Liveness::Crashed
            } else {
                match Self::standing(st, i) {
                    Standing::Expired => Liveness::Expired,
                    Standing::Joining if st.to_install[i] => Liveness::Up,
                    Standing::Joining => Liveness::Joining,
                    Standing::Member if st.suspected[i] => Liveness::Suspected,
                    Standing::Member => Liveness::Up,
                }
            }
        })
    }

    /// The next membership, if the oracle would install one now: it differs from the
    /// current one and every new member can be heard.
    fn next(&self, st: &FState) -> Option<[bool; MODEL_NODES]> {
        let new = next_members(&st.members, &Self::view(st), self.cfg.variant)?;
        let heard = (0..MODEL_NODES).all(|i| !new[i] || !st.suspected[i]);
        (heard && new.iter().any(|m| *m)).then_some(new)
    }

    /// Staged install: the next membership as soon as the service sees a change. Unlike
    /// [`FaultModel::next`] a member the service cannot hear does not hold it back: the
    /// others freeze and report, and the leader waits for that member's report (or its
    /// lease expiry, which removes it).
    ///
    /// Once a member has reported (it is frozen), the epoch it froze for comes even when
    /// the change went away ([`next_members_after_reports`]), as the runtime's recovery
    /// task decides it.
    fn change(&self, st: &FState) -> Option<[bool; MODEL_NODES]> {
        let reported = st.reports.iter().any(Option::is_some);
        let new =
            next_members_after_reports(&st.members, &Self::view(st), self.cfg.variant, reported)?;
        new.iter().any(|m| *m).then_some(new)
    }

    /// Staged install: whether node `i`, a member of the next epoch `new`, can report and
    /// freeze now: it is up, the service hears it, it is not frozen and it has installed
    /// the recorded epoch (or it is a new incarnation, which reports an empty lock).
    fn can_freeze(st: &FState, i: usize, new: &[bool; MODEL_NODES]) -> bool {
        new[i]
            && Self::up(st, i)
            && !st.suspected[i]
            && !st.frozen[i]
            && !st.to_install[i]
            && match Self::standing(st, i) {
                Standing::Member => st.cluster.site(Self::node(i)).epoch() == st.epoch,
                Standing::Joining => true,
                Standing::Expired => false,
            }
    }

    /// Staged install: the next membership, if the leader can record it now: every member
    /// of it has reported.
    fn lead(&self, st: &FState) -> Option<[bool; MODEL_NODES]> {
        let new = self.change(st)?;
        (0..MODEL_NODES)
            .all(|i| !new[i] || st.reports[i].is_some())
            .then_some(new)
    }

    /// Staged install: whether node `i` can install the recorded plan now (it is named by
    /// it, up and heard).
    fn can_install_at(st: &FState, i: usize) -> bool {
        st.to_install[i] && Self::up(st, i) && !st.suspected[i]
    }

    /// The membership service's actions: [`FaultAction::Install`] (atomic), or the stages
    /// of a staged install.
    fn recovery_actions(&self, st: &FState, out: &mut Vec<FaultAction>) {
        if !self.cfg.staged_install {
            if self.next(st).is_some() {
                out.push(FaultAction::Install);
            }
            return;
        }
        if let Some(new) = self.change(st) {
            for i in (0..self.cfg.n()).filter(|i| Self::can_freeze(st, *i, &new)) {
                out.push(FaultAction::Freeze(i as u8));
            }
        }
        if self.lead(st).is_some() {
            out.push(FaultAction::Lead);
        }
        for i in (0..self.cfg.n()).filter(|i| Self::can_install_at(st, *i)) {
            out.push(FaultAction::InstallAt(i as u8));
        }
    }

    /// The deliverable channel heads: not to or from a cut-off node; staged install: not
    /// to a frozen node (unless `no_freeze`). A message of a later epoch than its
    /// receiver's, which the runtime holds back, needs no rule here: every member of the
    /// recorded epoch is frozen until it installs it, and its delivery would be a kernel
    /// error ([`NO_ERROR`]).
    fn deliverable(&self, st: &FState) -> Vec<(u8, u8, MsgKind, Epoch)> {
        st.cluster
            .channels()
            .filter(|((a, b), _)| !st.suspected[a.idx()] && !st.suspected[b.idx()])
            .filter(|((_, b), _)| self.steps(st, b.idx()))
            .filter_map(|((a, b), mut q)| {
                q.next()
                    .map(|m| (a.0 as u8, b.0 as u8, m.msg.kind(), m.epoch))
            })
            .collect()
    }

    /// No script can run, nothing can be delivered, no expiry or install is pending
    /// (staged install: no node can freeze, the leader cannot record, no node can install).
    pub fn quiescent(&self, st: &FState) -> bool {
        let mut recovery = Vec::new();
        self.recovery_actions(st, &mut recovery);
        (0..self.cfg.n()).all(|i| self.runnable(st, i).is_none())
            && self.deliverable(st).is_empty()
            && (0..self.cfg.n()).all(|i| {
                !(st.suspected[i] && Self::up(st, i) && Self::standing(st, i) == Standing::Member)
            })
            && recovery.is_empty()
    }

    /// Staged install: node `i` crashed, expired or restarted: its report (bound to its
    /// lease in the runtime) is gone, and it installs nothing any more.
    fn forget(st: &mut FState, i: usize) {
        st.frozen[i] = false;
        st.reports[i] = None;
        st.to_install[i] = false;
    }

    fn note_grants(st: &mut FState, node: usize, outputs: &[Output<FMsg>]) {
        if outputs
            .iter()
            .any(|o| matches!(o, Output::Granted { .. } | Output::Upgraded { .. }))
        {
            if st.installed {
                st.events |= ev::AFTER_INSTALL;
            }
            if st.restarted[node] {
                st.events |= ev::REJOINED;
            }
        }
    }

    fn install(&self, st: &mut FState, new: [bool; MODEL_NODES]) {
        let epoch = st.epoch + 1;
        let mut reports = Vec::new();
        for i in (0..MODEL_NODES).filter(|i| new[*i]) {
            match st.cluster.site(Self::node(i)).report(L0) {
                Ok(r) => reports.push(r),
                Err(e) => {
                    st.error = Some(format!("report of n{i}: {e}"));
                    return;
                }
            }
        }
        let Some(plan) = Self::record(st, epoch, new, &reports) else {
            return;
        };
        st.installed = true;
        for i in (0..MODEL_NODES).filter(|i| new[*i]) {
            let r = st.cluster.transition(Self::node(i), |s, out| {
                s.install(epoch, core::slice::from_ref(&plan), out)
            });
            match r {
                Ok((_, outputs)) => Self::note_grants(st, i, &outputs),
                Err(e) => {
                    st.error = Some(format!("install at n{i}: {e:?}"));
                    return;
                }
            }
        }
        st.plan = Some(plan);
    }

    /// The leader's rebuild for `epoch` with `new` from `reports`: the epoch and its
    /// members become current (the atomic install and the staged install's lead share
    /// it); `None` with the rebuild's error kept.
    fn record(
        st: &mut FState,
        epoch: Epoch,
        new: [bool; MODEL_NODES],
        reports: &[LockReport<QUEUE>],
    ) -> Option<Plan<QUEUE>> {
        let plan = match rebuild::<MODEL_NODES, QUEUE>(epoch, &new, reports) {
            Ok(p) => p,
            Err(e) => {
                st.error = Some(format!("rebuild for epoch {epoch}: {e}"));
                return None;
            }
        };
        if plan.regenerated {
            st.events |= ev::REGENERATED;
        }
        st.epoch = epoch;
        st.members = new;
        Some(plan)
    }

    /// Staged install, [`FaultAction::Freeze`]: node `i` writes its report and freezes.
    fn freeze(st: &mut FState, i: usize) {
        match st.cluster.site(Self::node(i)).report(L0) {
            Ok(r) => {
                st.reports[i] = Some(r);
                st.frozen[i] = true;
            }
            Err(e) => st.error = Some(format!("report of n{i}: {e}")),
        }
    }

    /// Staged install, [`FaultAction::Lead`]: the leader rebuilds the lock for epoch
    /// `epoch + 1` from the reports the members of `new` gave when they froze, and records
    /// the plan (compare-and-swap on the epoch in the runtime: one plan per epoch). Nobody
    /// has installed it yet.
    fn lead_to(&self, st: &mut FState, new: [bool; MODEL_NODES]) {
        let epoch = st.epoch + 1;
        let reports: Vec<LockReport<QUEUE>> = (0..MODEL_NODES)
            .filter(|i| new[*i])
            .filter_map(|i| st.reports[i].clone())
            .collect();
        let Some(plan) = Self::record(st, epoch, new, &reports) else {
            return;
        };
        st.reports = Default::default();
        st.to_install = new;
        st.plan = Some(plan);
    }

    /// Staged install, [`FaultAction::InstallAt`]: node `i` installs the recorded plan and
    /// unfreezes (the messages it held back become deliverable).
    fn install_at(st: &mut FState, i: usize) {
        let Some(plan) = st.plan.clone() else {
            return;
        };
        let epoch = st.epoch;
        st.installed = true;
        st.frozen[i] = false;
        st.to_install[i] = false;
        let r = st.cluster.transition(Self::node(i), |s, out| {
            s.install(epoch, core::slice::from_ref(&plan), out)
        });
        match r {
            Ok((_, outputs)) => Self::note_grants(st, i, &outputs),
            Err(e) => st.error = Some(format!("install at n{i}: {e:?}")),
        }
    }

    /// A counterexample or witness path as a trace.
    pub fn trace(
        &self,
        property: &str,
        path: &stateright::Path<FState, FaultAction>,
    ) -> FaultTrace {
        let mut steps = Vec::new();
        for (st, a) in path.clone().into_vec() {
            let state = format!("{st:?}");
            steps.push(FaultStep {
                index: steps.len(),
                action: a.map(|a| a.to_string()),
                state: state.lines().map(str::to_string).collect(),
            });
        }
        let last = path.last_state();
        FaultTrace {
            format: TRACE_FORMAT.into(),
            config: self.cfg.clone(),
            property: property.to_string(),
            violation: self.violation(property, last),
            note: String::new(),
            steps,
        }
    }

    /// What is wrong in `st` for `property` (empty if it holds there).
    pub fn violation(&self, property: &str, st: &FState) -> String {
        let r = match property {
            P1 => st
                .cluster
                .check_mutual_exclusion()
                .map_err(|v| v.to_string()),
            ONE_TOKEN => one_token(st),
            NO_LOST => {
                if no_lost(self, st) {
                    Ok(())
                } else {
                    Err(format!(
                        "quiescent, but {}",
                        stuck_members(self, st).join(", and ")
                    ))
                }
            }
            NO_ERROR => no_error(st),
            _ => Ok(()),
        };
        r.err().unwrap_or_default()
    }

    /// Checks every property exhaustively (2 threads).
    pub fn check(&self) -> FaultReport {
        self.run(HasDiscoveries::All, 2)
    }

    /// Runs until `property` has a discovery (one thread, so that the counterexample is
    /// the same on every run).
    pub fn refute(&self, property: &'static str) -> FaultReport {
        self.run(HasDiscoveries::AnyOf(BTreeSet::from([property])), 1)
    }

    fn run(&self, finish: HasDiscoveries, threads: usize) -> FaultReport {
        let t = Instant::now();
        let checker = self
            .clone()
            .checker()
            .threads(threads)
            .finish_when(finish)
            .spawn_bfs()
            .join();
        let properties = property_reports(
            self,
            &checker,
            &SAFETY,
            &[],
            &REACHED,
            Counterexample::Cut,
            |p, path| self.trace(p, path),
        );
        FaultReport {
            config: self.cfg.name.clone(),
            states: checker.state_count(),
            unique_states: checker.unique_state_count(),
            max_depth: checker.max_depth(),
            // The whole check: the search and the counterexamples' traces.
            elapsed: t.elapsed(),
            properties,
        }
    }
}

/// The format tag of a [`FaultTrace`].
pub const TRACE_FORMAT: &str = "hilock-faults-trace/1";

/// A step of a [`FaultTrace`].
#[derive(Clone, Debug, Serialize)]
pub struct FaultStep {
    /// Position.
    pub index: usize,
    /// The action taken from this step's state (none for the last state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The state before the action, one line per node and message.
    pub state: Vec<String>,
}

/// A counterexample of the fault model (`spec/counterexamples/faults/*.json`).
#[derive(Clone, Debug, Serialize)]
pub struct FaultTrace {
    /// `hilock-faults-trace/1`.
    pub format: String,
    /// The configuration.
    pub config: FaultConfig,
    /// The violated property.
    pub property: String,
    /// What is wrong in the last state.
    pub violation: String,
    /// A note by the test that saved it.
    pub note: String,
    /// The run, from the initial state.
    pub steps: Vec<FaultStep>,
}

/// The result of a check.
pub type FaultReport = crate::check::ModelReport<FaultTrace>;

/// Staged install: a node frozen for the next epoch keeps its token (of its own epoch) and
/// is counted as before; the recorded plan's token of the recorded epoch is counted while
/// its root has not installed the plan (up: a crash loses it), as a token on its way to
/// the root — so no other token of that epoch may appear meanwhile.
fn one_token(st: &FState) -> Result<(), String> {
    let mut count: std::collections::BTreeMap<Epoch, usize> = Default::default();
    if let Some(p) = &st.plan {
        if st.to_install[p.root.idx()] {
            *count.entry(p.epoch).or_default() += 1;
        }
    }
    for (i, s) in st.cluster.sites().enumerate() {
        let up = !st.cluster.is_down(NodeId(i as u16));
        if up && s.standing() == Standing::Member && s.site().locks()[0].has_token() {
            *count.entry(s.epoch()).or_default() += 1;
        }
    }
    for (_, _, m) in st.cluster.messages() {
        if m.msg.kind() == MsgKind::Token {
            *count.entry(m.epoch).or_default() += 1;
        }
    }
    match count.iter().find(|(_, n)| **n > 1) {
        Some((e, n)) => Err(format!(
            "{n} tokens of epoch {e} (at members and in flight)"
        )),
        None => Ok(()),
    }
}

fn no_lost(m: &FaultModel, st: &FState) -> bool {
    !m.quiescent(st) || stuck_members(m, st).is_empty()
}

/// The live members (up, of the current epoch) whose script did not finish or whose
/// request is still pending, in words: `n1 has run 1 of its 2 operations and waits for W`.
///
/// Staged install: a member of the recorded epoch that has not installed it, or that is
/// frozen, is live too (it is up and its lease valid) and stuck: quiescence (no freeze,
/// record or install possible) with a member frozen, or named by a plan it never
/// installs, is a lost epoch change.
fn stuck_members(m: &FaultModel, st: &FState) -> Vec<String> {
    (0..m.cfg.n())
        .filter_map(|i| {
            let s = st.cluster.site(NodeId(i as u16));
            let live = st.members[i]
                && FaultModel::up(st, i)
                && s.standing() == Standing::Member
                && (s.epoch() == st.epoch || m.cfg.staged_install);
            let (done, all) = (st.pc[i] as usize, m.cfg.scripts[i].len());
            let pending = s.site().locks()[0].pending_mode();
            let waiting = st.frozen[i] || s.epoch() != st.epoch;
            if live && waiting {
                return Some(format!(
                    "n{i}, a live member, is frozen or has not installed epoch {}",
                    st.epoch
                ));
            }
            if !live || (done == all && pending == Mode::Phi) {
                return None;
            }
            let ran = format!("n{i}, a live member, has run {done} of its {all} operations");
            Some(if pending == Mode::Phi {
                ran
            } else {
                format!("{ran} and its request for {pending} is still pending")
            })
        })
        .collect()
}

fn no_error(st: &FState) -> Result<(), String> {
    if let Some(e) = st.cluster.error() {
        return Err(e.to_string());
    }
    match &st.error {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

impl Model for FaultModel {
    type State = FState;
    type Action = FaultAction;

    fn init_states(&self) -> Vec<FState> {
        let sites = (0..self.cfg.n())
            .map(|i| {
                let s = Site::new(NodeId(i as u16), NodeId(0))
                    .expect("valid ids")
                    .with_variant(Variant {
                        forwarding: self.cfg.forwarding,
                        release: self.cfg.release,
                        ..Variant::HILOCK
                    });
                FSite::new(s).with_recovery(self.cfg.variant)
            })
            .collect();
        vec![FState {
            cluster: Cluster::new(sites),
            pc: [0; MODEL_NODES],
            epoch: 0,
            members: core::array::from_fn(|i| i < self.cfg.n()),
            suspected: [false; MODEL_NODES],
            restarted: [false; MODEL_NODES],
            used: [0; 4],
            plan: None,
            frozen: [false; MODEL_NODES],
            reports: Default::default(),
            to_install: [false; MODEL_NODES],
            installed: false,
            error: None,
            events: 0,
        }]
    }

    fn actions(&self, st: &FState, out: &mut Vec<FaultAction>) {
        if st.cluster.error().is_some() || st.error.is_some() {
            return;
        }
        let n = self.cfg.n();
        for i in 0..n {
            if let Some(op) = self.runnable(st, i) {
                out.push(FaultAction::Run { node: i as u8, op });
            }
        }
        for (from, to, kind, epoch) in self.deliverable(st) {
            out.push(FaultAction::Deliver {
                from,
                to,
                kind,
                epoch,
            });
        }
        for i in 0..n {
            let (up, standing) = (Self::up(st, i), Self::standing(st, i));
            let id = i as u8;
            if st.suspected[i] && up && standing == Standing::Member {
                out.push(FaultAction::Expire(id));
            }
            if up && st.used[CRASH] < self.cfg.crashes {
                out.push(FaultAction::Crash(id));
            }
            if up
                && standing == Standing::Member
                && st.members[i]
                && !st.suspected[i]
                && st.used[SUSPECT] < self.cfg.suspicions
            {
                out.push(FaultAction::Suspect(id));
            }
            if (!up || standing == Standing::Expired) && st.used[RESTART] < self.cfg.restarts {
                out.push(FaultAction::Restart(id));
            }
            if up
                && st.members[i]
                && standing == Standing::Member
                && st.plan.is_some()
                && !st.frozen[i]
                && !st.to_install[i]
                && st.used[REINSTALL] < self.cfg.reinstalls
            {
                out.push(FaultAction::Reinstall(id));
            }
        }
        self.recovery_actions(st, out);
    }

    fn next_state(&self, last: &FState, action: FaultAction) -> Option<FState> {
        let mut st = last.clone();
        st.events = 0;
        match action {
            FaultAction::Run { node, op } => {
                let i = node as usize;
                if self.runnable(&st, i) != Some(op) {
                    return None;
                }
                st.pc[i] += 1;
                // A script step the kernel refuses (a second acquire, a release of nothing)
                // is kept as the model's error (`no kernel error`), not dropped.
                match st.cluster.input(Self::node(i), kernel_input(op)) {
                    Ok(step) => Self::note_grants(&mut st, i, &step.outputs),
                    Err(e) => {
                        st.error.get_or_insert_with(|| format!("n{i} {op}: {e}"));
                    }
                }
            }
            FaultAction::Deliver { from, to, .. } => {
                let mut outputs = Vec::new();
                // A rejection is either expected (an old epoch, a non-member: the message
                // is dropped) or kept as the harness's error (`no kernel error`).
                let _ = st.cluster.deliver_at_expecting(
                    NodeId(from.into()),
                    NodeId(to.into()),
                    0,
                    |e| matches!(e, KernelError::StaleEpoch(_) | KernelError::NotMember),
                    |o| outputs.push(o.clone()),
                )?;
                Self::note_grants(&mut st, to as usize, &outputs);
            }
            FaultAction::Crash(n) => {
                st.cluster.crash(Self::node(n.into()));
                st.used[CRASH] += 1;
                Self::forget(&mut st, n.into());
            }
            FaultAction::Suspect(n) => {
                st.suspected[n as usize] = true;
                st.used[SUSPECT] += 1;
            }
            FaultAction::Expire(n) => {
                let (killed, _) = st
                    .cluster
                    .transition(Self::node(n.into()), |s, _| s.expire_lease())
                    .ok()?;
                if killed.held[0] != Mode::Phi {
                    st.events |= ev::KILLED;
                }
                Self::forget(&mut st, n.into());
            }
            FaultAction::Install => {
                if self.cfg.staged_install {
                    return None;
                }
                let new = self.next(&st)?;
                self.install(&mut st, new);
            }
            FaultAction::Freeze(n) => {
                let i = n as usize;
                let new = self.change(&st)?;
                if !self.cfg.staged_install || !Self::can_freeze(&st, i, &new) {
                    return None;
                }
                Self::freeze(&mut st, i);
            }
            FaultAction::Lead => {
                if !self.cfg.staged_install {
                    return None;
                }
                let new = self.lead(&st)?;
                self.lead_to(&mut st, new);
            }
            FaultAction::InstallAt(n) => {
                let i = n as usize;
                if !self.cfg.staged_install || !Self::can_install_at(&st, i) {
                    return None;
                }
                Self::install_at(&mut st, i);
            }
            FaultAction::Restart(n) => {
                let i = n as usize;
                let id = Self::node(i);
                if !st.cluster.is_down(id) {
                    st.cluster.crash(id);
                }
                let fresh = FSite::joining(id).ok()?.with_recovery(self.cfg.variant);
                if !st.cluster.restart(id, fresh) {
                    return None;
                }
                st.pc[i] = 0;
                st.suspected[i] = false;
                st.restarted[i] = true;
                Self::forget(&mut st, i);
                st.used[RESTART] += 1;
            }
            FaultAction::Reinstall(n) => {
                let plan = st.plan.clone()?;
                let epoch = st.epoch;
                let i = n as usize;
                // The kernel refuses a plan of an epoch already installed: nothing happens.
                let (_, outputs) = st
                    .cluster
                    .transition(Self::node(i), |s, out| {
                        s.install(epoch, core::slice::from_ref(&plan), out)
                    })
                    .ok()?;
                st.used[REINSTALL] += 1;
                if plan.root == Self::node(i) {
                    st.events |= ev::REGENERATED;
                }
                Self::note_grants(&mut st, i, &outputs);
            }
        }
        Some(st)
    }

    fn format_action(&self, action: &FaultAction) -> String {
        action.to_string()
    }

    /// The Explorer's text of a step: the action, the properties its state violates (as the
    /// other models mark them) and the state after it.
    fn format_step(&self, last: &FState, action: FaultAction) -> Option<String> {
        let next = self.next_state(last, action)?;
        let mut s = action.to_string();
        s.push_str(&crate::check::violations_line(self, &next));
        s.push_str(&format!("\n\n{next:?}"));
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(P1, |_, st: &FState| {
                st.cluster.check_mutual_exclusion().is_ok()
            }),
            Property::always(ONE_TOKEN, |_, st: &FState| one_token(st).is_ok()),
            Property::always(NO_LOST, no_lost),
            Property::always(NO_ERROR, |_, st: &FState| no_error(st).is_ok()),
            Property::sometimes(REGENERATED, |_, st: &FState| {
                st.events & ev::REGENERATED != 0
            }),
            Property::sometimes(KILLED, |_, st: &FState| st.events & ev::KILLED != 0),
            Property::sometimes(AFTER_INSTALL, |_, st: &FState| {
                st.events & ev::AFTER_INSTALL != 0
            }),
            Property::sometimes(REJOINED, |_, st: &FState| st.events & ev::REJOINED != 0),
        ]
    }
}
