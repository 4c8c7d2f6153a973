//! Recovery through etcd (`docs/faults.md`, "With etcd recovery", and "Installing an
//! epoch"): when a member's etcd lease ends, the survivors install a new epoch with every
//! lock rebuilt by the kernel's recovery transitions — the runtime decides nothing itself:
//!
//! 1. every survivor that sees a member of its epoch gone computes the next membership
//!    ([`recovery::next_members`]; once a member froze, the epoch it froze for comes
//!    even if the change went away: [`recovery::next_members_after_reports`]), **freezes**
//!    its core (no kernel step until the new epoch is installed: local kernel requests and
//!    releases wait, delivered messages are held back) and writes its
//!    [`FaultSite::report`] of every lock it knows to its report key in etcd (bound to its
//!    lease);
//! 2. the recovery leader (a key bound to its lease, created only where none exists:
//!    [`Membership::lead`]) waits for the reports of every member of the next epoch, runs
//!    [`recovery::rebuild`] per lock (a member without a lock reports what its lazily
//!    created site would, [`new_site`]) and installs epoch `e + 1` with the plans by a
//!    compare-and-swap transaction on the epoch key ([`Membership::install_epoch`]: at most
//!    one plan per epoch is ever installed);
//! 3. every member reads the installed plans and runs [`FaultSite::install`] on each lock
//!    (the token node serves its rebuilt queue; a lock no member knew is created fresh in
//!    the new epoch), unfreezes, and delivers what it held back: messages of the old epoch
//!    are refused by the kernel (`StaleEpoch`) and counted; messages of a later epoch wait
//!    until that epoch is installed.
//!
//! The cut of the reports is consistent: a frozen node sends nothing, so every message a
//! node received before it reported was sent before its sender reported.

use hilock_kernel::token::recovery::{self, Epoch, FaultSite, LockReport, Plan};
use hilock_kernel::{KernelError, NodeId, Site};
use serde::{Deserialize, Serialize};

use crate::config::MAX_NODES;
use crate::wire::{initial_holder, KOutputs, LockSite, LOCK};

/// One node's reports, as it writes them to etcd.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) struct Reports {
    /// The epoch the reports are of.
    pub(crate) epoch: Epoch,
    /// The run (incarnation) of the node that wrote them.
    #[serde(default)]
    pub(crate) incarnation: u64,
    /// Written by a new run that rejoins: it holds nothing (its locks' reports are those
    /// of [`FaultSite::joining`]).
    #[serde(default)]
    pub(crate) joining: bool,
    /// Per lock path, the kernel's report.
    pub(crate) locks: Vec<(String, LockReport<MAX_NODES>)>,
}

/// The plans of one epoch, as the leader installs them in etcd.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) struct Plans {
    /// The epoch.
    pub(crate) epoch: Epoch,
    /// Its members.
    pub(crate) members: Vec<u16>,
    /// Per lock path, the kernel's plan.
    pub(crate) locks: Vec<(String, Plan<MAX_NODES>)>,
}

/// The members of epoch 0: every configured node.
pub(crate) fn all_members(n: usize) -> [bool; MAX_NODES] {
    core::array::from_fn(|i| i < n)
}

/// The site of lock `path` at node `me` as it is created on first use in `epoch` with
/// `members`: the fresh site of epoch 0 (token at [`initial_holder`]) and, after epoch 0,
/// the plan the kernel rebuilds from every member's empty report installed on it (the
/// token regenerated at the lowest member, fences from `epoch << 32` on) — so
/// every node computes the same site for a lock no member knew, and the leader the same
/// report for a member that does not know a lock. Fails only if `me` is not a member.
pub(crate) fn new_site(
    me: NodeId,
    path: &str,
    n: usize,
    epoch: Epoch,
    members: &[bool; MAX_NODES],
) -> Result<LockSite, KernelError> {
    let root = initial_holder(path, n);
    let site = FaultSite::new(Site::new(me, root)?);
    if epoch == 0 {
        return Ok(site);
    }
    // Every member reports the lock empty — no token anywhere — so the kernel regenerates
    // it at the lowest member with its fences above every fence of earlier epochs (3.6):
    // the initial holder may be a new run whose earlier run granted the lock before it
    // died (an epoch-0 token there would hand out fence 1 again).
    let mut reports = Vec::new();
    for i in (0..n).filter(|&i| members[i]) {
        let fresh: LockSite = FaultSite::joining(NodeId(i as u16))?;
        reports.push(fresh.report(LOCK).map_err(|_| KernelError::NotMember)?);
    }
    let plan = recovery::rebuild(epoch, members, &reports).map_err(|_| KernelError::NotMember)?;
    let mut site = site;
    let mut out: Box<KOutputs> = Box::default();
    site.install(epoch, &[plan], &mut *out)
        .map_err(|_| KernelError::NotMember)?;
    Ok(site)
}

/// The site of lock `path` at node `me` in a static cluster of `n` running in generation
/// `epoch` (`super::generation`): epoch 0 is the fresh site; a later epoch installs the
/// plan the kernel rebuilds from every node's empty report with its token moved to the
/// lock's [`initial_holder`] — regenerated there, so its fences start at `epoch << 32`.
/// Every node computes the same site.
pub(crate) fn static_site(
    me: NodeId,
    path: &str,
    n: usize,
    epoch: Epoch,
) -> Result<LockSite, KernelError> {
    let root = initial_holder(path, n);
    let mut site = FaultSite::new(Site::new(me, root)?);
    if epoch == 0 {
        return Ok(site);
    }
    let members = all_members(n);
    let mut reports = Vec::new();
    for i in 0..n {
        let fresh: LockSite = FaultSite::joining(NodeId(i as u16))?;
        reports.push(fresh.report(LOCK).map_err(|_| KernelError::NotMember)?);
    }
    let mut plan =
        recovery::rebuild(epoch, &members, &reports).map_err(|_| KernelError::NotMember)?;
    plan.root = root;
    let mut out: Box<KOutputs> = Box::default();
    site.install(epoch, &[plan], &mut *out)
        .map_err(|_| KernelError::NotMember)?;
    Ok(site)
}

/// The leader's rebuild: for every lock any member reported, one report per member of
/// `next` (a member that did not report the lock reports its fresh site of `epoch` with
/// `members`, a rejoining run — `joining` in its reports — the empty report of
/// [`FaultSite::joining`]), then [`recovery::rebuild`] for epoch `epoch + 1`.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn rebuild_all(
    n: usize,
    epoch: Epoch,
    members: &[bool; MAX_NODES],
    next: &[bool; MAX_NODES],
    reports: &std::collections::BTreeMap<u16, Reports>,
) -> Result<Plans, String> {
    let mut paths: Vec<&String> = reports
        .values()
        .flat_map(|r| r.locks.iter().map(|(p, _)| p))
        .collect();
    paths.sort();
    paths.dedup();
    let new_epoch = epoch + 1;
    let mut locks = Vec::new();
    for path in paths {
        let mut rs = Vec::new();
        for i in (0..n).filter(|&i| next[i]) {
            let id = i as u16;
            let mine = reports
                .get(&id)
                .and_then(|r| r.locks.iter().find(|(p, _)| p == path))
                .map(|(_, r)| r.clone());
            let joining = reports.get(&id).is_some_and(|r| r.joining);
            let r = match mine {
                Some(r) => r,
                None if joining => LockSite::joining(NodeId(id))
                    .map_err(|e| format!("{path}: node {id}'s joining site: {e}"))?
                    .report(LOCK)
                    .map_err(|e| format!("{path}: node {id}'s joining report: {e}"))?,
                None => new_site(NodeId(id), path, n, epoch, members)
                    .map_err(|e| format!("{path}: node {id}'s fresh site: {e}"))?
                    .report(LOCK)
                    .map_err(|e| format!("{path}: node {id}'s fresh report: {e}"))?,
            };
            rs.push(r);
        }
        let plan = recovery::rebuild(new_epoch, next, &rs)
            .map_err(|e| format!("{path}: rebuild for epoch {new_epoch}: {e}"))?;
        locks.push((path.clone(), plan));
    }
    Ok(Plans {
        epoch: new_epoch,
        members: (0..n).filter(|&i| next[i]).map(|i| i as u16).collect(),
        locks,
    })
}

#[cfg(feature = "etcd")]
pub(super) mod etcd {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use hilock_kernel::token::recovery::{
        next_members, next_members_after_reports, Liveness, RecoveryVariant,
    };
    use tokio::sync::{mpsc, oneshot, watch};
    use tracing::{info, warn};

    use super::{rebuild_all, Plans, Reports};
    use crate::config::MAX_NODES;
    use crate::membership::{EpochView, Error as MError, Member, MemberView, Membership};
    use crate::token::core::Cmd;
    use crate::token::Shared;

    /// How often a member looks again while a recovery is under way.
    const BUSY: Duration = Duration::from_millis(20);
    /// How often an idle member reads the installed epoch (besides member-list changes and
    /// messages of a later epoch, which wake it at once).
    const IDLE: Duration = Duration::from_secs(1);

    /// The recovery task of one node (see the [module](super) docs).
    pub(in crate::token) async fn run(
        shared: Arc<Shared>,
        core: mpsc::UnboundedSender<Cmd>,
        m: Arc<Membership>,
        mut view: watch::Receiver<MemberView>,
    ) {
        // The incarnation of each member of the installed epoch (epoch 0: as first seen).
        let mut runs: BTreeMap<u16, u64> = BTreeMap::new();
        let mut reported: Option<u32> = None;
        // Failed looks in a row: each waits twice as long as the one before (up to IDLE),
        // and only the 1st, 2nd, 4th, 8th … is logged, so an etcd that does not answer
        // does not flood the log.
        let mut failures: u32 = 0;
        loop {
            {
                // The runs holding the member keys, for the peer links (`Shared::adopt_run`).
                let v = view.borrow();
                if v.connected {
                    *shared.etcd_runs.lock().expect("etcd_runs lock") = v
                        .members
                        .iter()
                        .map(|(&id, mb)| (id, mb.incarnation))
                        .collect();
                }
            }
            let wait = match step(&shared, &core, &m, &view, &mut runs, &mut reported).await {
                Ok(busy) => {
                    if failures > 0 {
                        info!(failures, "recovery: etcd answers again");
                        failures = 0;
                    }
                    if busy {
                        BUSY
                    } else {
                        IDLE
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if failures.is_power_of_two() {
                        warn!(failures, "recovery: {e} (trying again; logged for the 1st, 2nd, 4th ... failure in a row)");
                    }
                    (BUSY * 2u32.saturating_pow(failures.min(6))).min(IDLE)
                }
            };
            tokio::select! {
                r = view.changed() => if r.is_err() { return },
                _ = shared.nudge.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn ask<T>(
        core: &mpsc::UnboundedSender<Cmd>,
        f: impl FnOnce(oneshot::Sender<T>) -> Cmd,
    ) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        core.send(f(tx)).map_err(|_| "the node stops".to_string())?;
        rx.await.map_err(|_| "the node stops".to_string())
    }

    /// One look: install a newer epoch, or take part in the next one. `Ok(true)`: a
    /// recovery is under way (look again soon).
    async fn step(
        shared: &Shared,
        core: &mpsc::UnboundedSender<Cmd>,
        m: &Membership,
        view: &watch::Receiver<MemberView>,
        runs: &mut BTreeMap<u16, u64>,
        reported: &mut Option<u32>,
    ) -> Result<bool, String> {
        let n = shared.n;
        let installed = m.current_epoch().await.map_err(|e| e.to_string())?;
        let (epoch, members, rejoining) = ask(core, |reply| Cmd::Epoch { reply }).await?;
        // A rejoining run is let in only by an epoch that names this run.
        let names_me = installed
            .members
            .iter()
            .any(|mb| mb.id == shared.id && mb.incarnation == shared.incarnation);
        if rejoining && installed.epoch > epoch && !names_me {
            let plans: Plans = serde_json::from_slice(&installed.plan).map_err(|e| {
                format!("the plan of epoch {} does not decode: {e}", installed.epoch)
            })?;
            let mut seen = [false; MAX_NODES];
            for &i in &plans.members {
                if usize::from(i) < n {
                    seen[usize::from(i)] = true;
                }
            }
            runs.clear();
            for mb in &installed.members {
                runs.insert(mb.id, mb.incarnation);
            }
            core.send(Cmd::Observe {
                epoch: installed.epoch,
                members: seen,
            })
            .map_err(|_| "the node stops".to_string())?;
            info!(
                epoch = installed.epoch,
                "recovery: rejoining; epoch {} does not let this run in yet", installed.epoch
            );
            return Ok(true);
        }
        if installed.epoch > epoch {
            let (plans, next) = adopt(n, &installed)?;
            runs.clear();
            for mb in &installed.members {
                runs.insert(mb.id, mb.incarnation);
            }
            let locks = plans.locks.len();
            let r = ask(core, |reply| Cmd::Install {
                epoch: plans.epoch,
                members: next,
                plans: plans.locks,
                reply,
            })
            .await?;
            // A failure is logged by the loop that calls this, once.
            if r.is_ok() {
                info!(epoch = plans.epoch, locks, "recovery: installed epoch");
                // This node's report (its locks, for the epoch now installed) is read by
                // nobody any more; left, every idle look of every member would read it.
                if reported.is_some() {
                    if let Err(e) = m.delete_report().await {
                        tracing::debug!("recovery: deleting the report: {e}");
                    }
                    *reported = None;
                }
            }
            return r.map(|()| false);
        }
        let v = view.borrow().clone();
        if !v.connected {
            return Ok(false);
        }
        // Epoch 0 names no runs: each member's is the first one the member watch saw
        // (`MemberView::seen`), also one that joined and left since the last look — taken
        // from the view at this look, such a run would count as not started (up) here
        // while the members that did see it leave freeze, report and wait for this
        // node's report for good.
        if epoch == 0 {
            for (&id, mb) in &v.seen {
                if usize::from(id) < n {
                    runs.entry(id).or_insert(mb.incarnation);
                }
            }
        }
        // What etcd says of each member of this epoch: a member whose key is gone (or
        // held by another run) has crashed — its lease ended at etcd, so (3.1) it stopped
        // granting and its holders' commands died before. A node of epoch 0 never seen
        // has not started yet: it counts as up.
        //
        // A new run holding the key of a member (its old run's lease ended), or the key of
        // a node outside the epoch, is `Joining`: it enters the next epoch with nothing
        // held. A rejoining run counts itself as joining.
        let liveness: [Liveness; MAX_NODES] = core::array::from_fn(|i| {
            let id = i as u16;
            if i >= n {
                return Liveness::Up;
            }
            if id == shared.id && rejoining {
                return Liveness::Joining;
            }
            match (members[i], runs.get(&id), v.members.get(&id)) {
                (true, Some(k), Some(mb)) if mb.incarnation == *k => Liveness::Up,
                (true, Some(_), Some(_)) => Liveness::Joining,
                (true, None, _) if epoch == 0 => Liveness::Up,
                (true, _, _) => Liveness::Crashed,
                (false, _, Some(_)) => Liveness::Joining,
                (false, _, None) => Liveness::Up,
            }
        });
        // A member that froze and reported for the next epoch is unfrozen only by an
        // install: once any member did (this node, or another whose report is in etcd),
        // that epoch comes even if the change that started it went away — a new run asked
        // to join and died before its own report (`next_members_after_reports`; the fault
        // model's `staged-joiner-lost-before-report`). The reports are read only when
        // nothing else calls for an epoch.
        let next = match next_members(&members, &liveness, RecoveryVariant::HILOCK) {
            Some(next) => next,
            None => {
                let reported_next = *reported == Some(epoch)
                    || !next_reports(n, m, epoch, &members, &v).await?.is_empty();
                let after = next_members_after_reports(
                    &members,
                    &liveness,
                    RecoveryVariant::HILOCK,
                    reported_next,
                );
                let Some(next) = after else {
                    return Ok(false);
                };
                next
            }
        };
        if !next[usize::from(shared.id)] {
            return Err("this node is not in the next epoch".into());
        }
        if *reported != Some(epoch) {
            let (e, locks) = ask(core, |reply| Cmd::Freeze { reply }).await?;
            let count = locks.len();
            let r = Reports {
                epoch: e,
                incarnation: shared.incarnation,
                joining: rejoining,
                locks,
            };
            let bytes = serde_json::to_vec(&r).map_err(|e| e.to_string())?;
            m.put_report(bytes).await.map_err(|e| e.to_string())?;
            *reported = Some(epoch);
            info!(epoch, locks = count, "recovery: frozen and reported");
        }
        if rejoining {
            // A rejoining run does not lead while a run of the installed epoch is alive:
            // it knows nothing of the epoch's history. Unless every member of the next
            // epoch is a rejoining run — the whole cluster restarted: no run of the
            // epoch holds its member key any more (a live one would be in the next epoch,
            // reporting as a member), so by 3.1 none grants and their holders' commands
            // are dead, and the rebuild regenerates every token with fences above those of
            // every earlier epoch (3.6). Then it may lead like any member.
            let reports = next_reports(n, m, epoch, &next, &v).await?;
            let restart = (0..n)
                .filter(|&i| next[i])
                .all(|i| reports.get(&(i as u16)).is_some_and(|r| r.joining));
            if !restart {
                return Ok(true);
            }
        }
        let leader = m.lead().await.map_err(|e| e.to_string())?;
        if leader.mine {
            lead(n, m, &installed, epoch, &members, &next, &v).await?;
        }
        Ok(true)
    }

    /// The plans of the `installed` epoch, as every member adopts them (the core then
    /// runs the kernel's install on each lock), and its members among the `n` nodes.
    pub(super) fn adopt(
        n: usize,
        installed: &EpochView,
    ) -> Result<(Plans, [bool; MAX_NODES]), String> {
        let plans: Plans = serde_json::from_slice(&installed.plan)
            .map_err(|e| format!("the plan of epoch {} does not decode: {e}", installed.epoch))?;
        let mut next = [false; MAX_NODES];
        for &i in &plans.members {
            if usize::from(i) < n {
                next[usize::from(i)] = true;
            }
        }
        Ok((plans, next))
    }

    /// The reports in etcd of the members of the `next` epoch against `epoch`, each from
    /// the run that holds its member key now (in `v`).
    async fn next_reports(
        n: usize,
        m: &Membership,
        epoch: u32,
        next: &[bool; MAX_NODES],
        v: &MemberView,
    ) -> Result<BTreeMap<u16, Reports>, String> {
        let raw = m.reports().await.map_err(|e| e.to_string())?;
        let mut reports = BTreeMap::new();
        for (id, bytes) in raw {
            let Ok(r) = serde_json::from_slice::<Reports>(&bytes) else {
                continue;
            };
            let run = v.members.get(&id).map(|mb| mb.incarnation);
            if usize::from(id) < n
                && next[usize::from(id)]
                && r.epoch == epoch
                && run == Some(r.incarnation)
            {
                reports.insert(id, r);
            }
        }
        Ok(reports)
    }

    /// What one look of the leader did.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(super) enum Led {
        /// A member of the next epoch has not reported yet (its id): nothing installed.
        Waiting(u16),
        /// This leader installed `epoch` (with these plans).
        Installed { epoch: u32, plans: Vec<u8> },
        /// Another install came first (the compare-and-swap refused this one): etcd holds
        /// epoch `current`, which this node adopts at its next look (`step`).
        LostRace { tried: u32, current: u32 },
    }

    /// The leader's part, for the `n` nodes: every report of the next epoch's members, the
    /// rebuild, the install by compare-and-swap on `installed`.
    pub(super) async fn lead(
        n: usize,
        m: &Membership,
        installed: &EpochView,
        epoch: u32,
        members: &[bool; MAX_NODES],
        next: &[bool; MAX_NODES],
        v: &MemberView,
    ) -> Result<Led, String> {
        let reports = next_reports(n, m, epoch, next, v).await?;
        if let Some(missing) = (0..n).find(|&i| next[i] && !reports.contains_key(&(i as u16))) {
            tracing::debug!(missing, "recovery: waiting for a report");
            return Ok(Led::Waiting(missing as u16));
        }
        let plans = rebuild_all(n, epoch, members, next, &reports)?;
        let who: Vec<Member> = plans
            .members
            .iter()
            .filter_map(|id| v.members.get(id).copied())
            .collect();
        let bytes = serde_json::to_vec(&plans).map_err(|e| e.to_string())?;
        match m.install_epoch(installed, &who, &bytes).await {
            Ok(e) => {
                info!(epoch = e.epoch, members = ?plans.members, locks = plans.locks.len(), "recovery: epoch installed in etcd");
                Ok(Led::Installed {
                    epoch: e.epoch,
                    plans: bytes,
                })
            }
            Err(MError::StaleEpoch { tried, current }) => {
                info!(tried, current, "recovery: another install came first");
                Ok(Led::LostRace { tried, current })
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hilock_kernel::token::recovery::Stamped;
    use hilock_kernel::{Input, Mode, Output, Protocol};

    use super::*;
    use crate::wire::{self, Payload, SMsg};

    fn sends(out: &KOutputs) -> Vec<(NodeId, SMsg)> {
        out.iter()
            .filter_map(|o| match o {
                Output::Send { to, msg } => Some((*to, msg.clone())),
                _ => None,
            })
            .collect()
    }

    fn rooted(prefix: &str, n: usize, at: u16) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|p| initial_holder(p, n) == NodeId(at))
            .unwrap()
    }

    /// Node 2 holds the token of a lock and dies while node 0's request for it is on its
    /// way. Nodes 0 and 1 report, the leader's rebuild regenerates the token at node 0,
    /// and the install grants node 0's request; node 0's old request, as it travelled on
    /// the wire (stamped with epoch 0), is refused by a site of epoch 1 and changes
    /// nothing. A lock nobody knew, whose token started at node 2, is created in epoch 1
    /// with its token at node 0 by every node alike.
    #[test]
    fn the_old_epoch_s_messages_are_refused_after_the_install() {
        let n = 3;
        let path = rooted("/t", n, 2);
        let members = all_members(n);
        let mut s: Vec<LockSite> = (0..n)
            .map(|i| new_site(NodeId(i as u16), &path, n, 0, &members).unwrap())
            .collect();
        let mut out: Box<KOutputs> = Box::default();
        s[0].step(
            Input::Acquire {
                lock: LOCK,
                mode: Mode::W,
            },
            &mut *out,
        )
        .unwrap();
        let (to, req) = sends(&out).remove(0);
        assert_eq!((to, req.epoch), (NodeId(2), 0));
        let bytes = wire::encode(&Payload::stamped(path.clone(), req));
        // Node 2 dies.
        let next: [bool; MAX_NODES] = core::array::from_fn(|i| i < 2);
        let mut reports = BTreeMap::new();
        for (i, site) in s.iter().enumerate().take(2) {
            let locks = vec![(path.clone(), site.report(LOCK).unwrap())];
            reports.insert(
                i as u16,
                Reports {
                    epoch: 0,
                    incarnation: 1,
                    joining: false,
                    locks,
                },
            );
        }
        let plans = rebuild_all(n, 0, &members, &next, &reports).unwrap();
        assert_eq!((plans.epoch, plans.members.clone()), (1, vec![0, 1]));
        let plan = plans.locks[0].1.clone();
        assert!(plan.regenerated);
        assert_eq!(plan.root, NodeId(0));
        out.clear();
        s[0].install(1, core::slice::from_ref(&plan), &mut *out)
            .unwrap();
        assert!(out.contains(&Output::Granted {
            lock: LOCK,
            mode: Mode::W
        }));
        out.clear();
        s[1].install(1, core::slice::from_ref(&plan), &mut *out)
            .unwrap();
        let (epoch, frame) = match wire::decode::<Payload>(&bytes).unwrap() {
            Payload::Token(f) => (0, f),
            Payload::Stamped(e, f) => (e, f),
            other => panic!("not a kernel message: {other:?}"),
        };
        let before = s[1].clone();
        let old = Stamped {
            epoch,
            msg: frame.msg,
        };
        let r = s[1].step(
            Input::Deliver {
                from: NodeId(0),
                msg: &old,
            },
            &mut *out,
        );
        assert_eq!(r, Err(KernelError::StaleEpoch(LOCK)));
        assert!(s[1] == before, "a refused message changes nothing");
        // A lock no member knew, rooted at the dead node.
        let fresh = rooted("/u", n, 2);
        let a = new_site(NodeId(0), &fresh, n, 1, &next).unwrap();
        let b = new_site(NodeId(1), &fresh, n, 1, &next).unwrap();
        assert!(a.site().lock(LOCK).unwrap().has_token());
        assert_eq!(b.site().lock(LOCK).unwrap().parent(), Some(NodeId(0)));
        assert_eq!((a.epoch(), b.epoch()), (1, 1));
    }
}

/// The tests' etcd (`tests/support/etcd.rs`), for [`two_leaders`].
#[cfg(all(test, feature = "etcd"))]
#[path = "../../tests/support/etcd.rs"]
mod etcd_support;

/// Two recovery leaders race against a real etcd the test starts itself (as the etcd
/// tests under `tests/` do; skipped with one printed line where etcd cannot be had).
#[cfg(all(test, feature = "etcd"))]
mod two_leaders {
    use std::time::Duration;

    use hilock_kernel::token::recovery::Plan;
    use hilock_kernel::{Input, Mode, Output, Protocol};

    use super::etcd::{adopt, lead, Led};
    use super::etcd_support;
    use super::*;
    use crate::membership::{EtcdOptions, Member, Membership};

    fn rooted(prefix: &str, n: usize, at: u16) -> String {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|p| initial_holder(p, n) == NodeId(at))
            .unwrap()
    }

    fn tokens(sites: &[LockSite]) -> usize {
        sites
            .iter()
            .filter(|s| s.site().lock(LOCK).unwrap().has_token())
            .count()
    }

    /// Three nodes; node 2 holds the token of `/x` (it starts there) and leaves, while
    /// node 0's request for it is on its way. Nodes 0 and 1 report, and both run the
    /// runtime's leader step (`lead`: the reports, the rebuild, the compare-and-swap
    /// install) from the same installed epoch at the same time — two leaders, as when a
    /// leader's key went with its lease while it was installing. Exactly one installs
    /// epoch 1; the other is told it lost the race (`LostRace`, etcd at epoch 1) and
    /// adopts the winner's plans (`adopt`, what every member's `step` installs); a leader
    /// that tries again from the old epoch is refused again. The token of `/x` is
    /// regenerated once, at node 0, whose request is granted by the install; the plan
    /// delivered a second time is refused by the kernel and regenerates nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_leaders_install_from_the_same_epoch_exactly_one_wins() {
        let name = "two_leaders_install_from_the_same_epoch_exactly_one_wins";
        let Some(etcd) = etcd_support::start_healthy(name) else {
            return;
        };
        let body = async {
            let n = 3;
            let mut o = EtcdOptions::new(vec![etcd.addr.clone()]);
            o.ttl_s = 5;
            let mut ms = Vec::new();
            for id in 0..n as u16 {
                let me = Member {
                    id,
                    incarnation: 100 + u64::from(id),
                };
                ms.push(Membership::join(&o, "race", me).await.unwrap());
            }
            let members = all_members(n);
            let x = rooted("/x", n, 2);
            let mut sites: Vec<LockSite> = (0..n)
                .map(|i| new_site(NodeId(i as u16), &x, n, 0, &members).unwrap())
                .collect();
            let mut out: Box<KOutputs> = Box::default();
            sites[0]
                .step(
                    Input::Acquire {
                        lock: LOCK,
                        mode: Mode::W,
                    },
                    &mut *out,
                )
                .unwrap();
            // Node 2 (the token) leaves: its lease is revoked, its member key goes.
            ms.pop().unwrap().leave().await.unwrap();
            let mut views = Vec::new();
            for m in &ms {
                let mut w = m.members();
                tokio::time::timeout(Duration::from_secs(5), w.wait_for(|v| v.members.len() == 2))
                    .await
                    .expect("nodes 0 and 1 see node 2 gone")
                    .unwrap();
                views.push(w.borrow().clone());
            }
            for (i, m) in ms.iter().enumerate() {
                let r = Reports {
                    epoch: 0,
                    incarnation: m.me().incarnation,
                    joining: false,
                    locks: vec![(x.clone(), sites[i].report(LOCK).unwrap())],
                };
                m.put_report(serde_json::to_vec(&r).unwrap()).await.unwrap();
            }
            let base = ms[0].current_epoch().await.unwrap();
            assert_eq!(base.epoch, 0);
            let next: [bool; MAX_NODES] = core::array::from_fn(|i| i < 2);
            let (a, b) = tokio::join!(
                lead(n, &ms[0], &base, 0, &members, &next, &views[0]),
                lead(n, &ms[1], &base, 0, &members, &next, &views[1])
            );
            let led = [a.unwrap(), b.unwrap()];
            for (i, r) in led.iter().enumerate() {
                let said = match r {
                    Led::Installed { epoch, plans } => {
                        format!("installed epoch {epoch} ({} bytes of plans)", plans.len())
                    }
                    other => format!("{other:?}"),
                };
                eprintln!("{name}: node {i}'s leader step: {said}");
            }
            let won: Vec<usize> = (0..2)
                .filter(|&i| matches!(led[i], Led::Installed { .. }))
                .collect();
            assert_eq!(won.len(), 1, "exactly one leader installs: {led:?}");
            let (w, l) = (won[0], 1 - won[0]);
            let Led::Installed { epoch, plans } = &led[w] else {
                unreachable!()
            };
            assert_eq!(*epoch, 1);
            assert_eq!(
                led[l],
                Led::LostRace {
                    tried: 1,
                    current: 1
                },
                "the other leader is told it lost the race"
            );
            // The loser adopts the winner's epoch: what etcd holds is the winner's.
            let installed = ms[l].current_epoch().await.unwrap();
            assert_eq!(installed.epoch, 1);
            assert_eq!(&installed.plan, plans, "etcd holds the winner's plans");
            let (adopted, in_next) = adopt(n, &installed).unwrap();
            assert_eq!((adopted.epoch, adopted.members.clone()), (1, vec![0, 1]));
            assert_eq!(in_next, next);
            // A leader that tries again from the old epoch is refused again.
            let again = lead(n, &ms[l], &base, 0, &members, &next, &views[l])
                .await
                .unwrap();
            assert_eq!(
                again,
                Led::LostRace {
                    tried: 1,
                    current: 1
                }
            );
            let still = ms[w].current_epoch().await.unwrap();
            assert_eq!(
                (still.epoch, still.revision),
                (1, installed.revision),
                "etcd's epoch is the winner's, unchanged"
            );
            // Both members install the adopted plan: the token of /x is regenerated once,
            // at node 0, whose request is granted.
            let plan: Plan<MAX_NODES> = adopted.locks[0].1.clone();
            assert_eq!(adopted.locks[0].0, x);
            assert!(plan.regenerated, "node 2 had the token: regenerated");
            assert_eq!(plan.root, NodeId(0));
            let mut live = vec![sites[0].clone(), sites[1].clone()];
            let mut granted = false;
            for s in live.iter_mut() {
                out.clear();
                s.install(1, core::slice::from_ref(&plan), &mut *out)
                    .unwrap();
                granted |= out.contains(&Output::Granted {
                    lock: LOCK,
                    mode: Mode::W,
                });
            }
            assert!(granted, "node 0's request is granted in epoch 1");
            assert_eq!(tokens(&live), 1, "one token of {x} in epoch 1");
            // The plan delivered again (the losing leader's, the same epoch) is refused:
            // nothing is regenerated a second time.
            for s in live.iter_mut() {
                out.clear();
                assert!(s
                    .install(1, core::slice::from_ref(&plan), &mut *out)
                    .is_err());
            }
            assert_eq!(tokens(&live), 1, "still one token of {x}");
        };
        tokio::time::timeout(Duration::from_secs(30), body)
            .await
            .expect("test body ends within 30 s");
    }
}
