//! The lock server ("the object algorithm" of Wiger's locks).

use super::{
    AgentError, AgentId, Announce, LockInfo, LockMode, LockPath, QEntry, Report, Rule, ServerId,
    ServerMsg, Sink,
};

/// Where a surrendering holder goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SurrenderTo {
    /// To the end of the queue (the seed: "the only safe general way").
    End,
    /// Swapped with the client directly behind it (the seed: "It is not safe to just swap
    /// with the client directly behind it"); kept to be refuted by the model checker.
    SwapWithNext,
}

/// The server's algorithm variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct ServerVariant {
    /// Surrender rule.
    pub surrender: SurrenderTo,
    /// An entry that an earlier granted entry of its own agent covers (a path covering
    /// its path, in a mode covering its mode: "a lock on `[a]` covers `[a, b]`") holds at
    /// once. Without it (refuted): it waits behind the entries of others queued between,
    /// which wait for the agent's own covering entry — the agent waits for itself through
    /// them, and surrenders with no cycle of distinct agents.
    #[cfg_attr(feature = "serde", serde(default = "crate::token::recovery::yes"))]
    pub grant_covered: bool,
}

impl ServerVariant {
    /// The seed's server.
    pub const SEED: ServerVariant = ServerVariant {
        surrender: SurrenderTo::End,
        grant_covered: true,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct Entry<const D: usize> {
    agent: AgentId,
    path: LockPath<D>,
    mode: LockMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct Record<const D: usize> {
    path: LockPath<D>,
    version: u32,
}

/// One server's lock table: at most `Q` direct entries (so every announced queue fits in
/// `Q`) and `R` lock records, paths of depth at most `D`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LockServer<const D: usize, const Q: usize, const R: usize> {
    id: ServerId,
    /// Direct entries in arrival order (a surrender re-appends).
    entries: heapless::Vec<Entry<D>, Q>,
    /// Lock records, one per path some agent asked for.
    records: heapless::Vec<Record<D>, R>,
    /// The version counter (one per server, so a dropped and re-created record never
    /// repeats a version).
    clock: u32,
    variant: ServerVariant,
}

/// Whether `e` holds given the entries before it: every earlier related entry of another
/// agent holds and is compatible with it, or (`covered`) an earlier entry of its own agent
/// that holds covers it. A covering entry of the agent holds only if no other agent holds
/// a conflicting related entry, so neither does any for the covered one.
fn grants<const D: usize, const Q: usize>(entries: &[Entry<D>], covered: bool) -> [bool; Q] {
    let mut g = [false; Q];
    for i in 0..entries.len().min(Q) {
        let e = entries[i];
        g[i] = (0..i).all(|j| {
            let f = entries[j];
            f.agent == e.agent || !f.path.related(&e.path) || (g[j] && f.mode.compatible(e.mode))
        }) || (covered
            && (0..i).any(|j| {
                let f = entries[j];
                g[j] && f.agent == e.agent && f.path.covers(&e.path) && f.mode.covers(e.mode)
            }));
    }
    g
}

impl<const D: usize, const Q: usize, const R: usize> LockServer<D, Q, R> {
    /// The most announcements one step can send: every record to every queued agent.
    pub const MAX_OUTPUTS: usize = R * Q;

    /// An empty server.
    pub fn new(id: ServerId) -> Self {
        LockServer {
            id,
            entries: heapless::Vec::new(),
            records: heapless::Vec::new(),
            clock: 0,
            variant: ServerVariant::SEED,
        }
    }

    /// The same server with another variant.
    pub fn with_variant(mut self, variant: ServerVariant) -> Self {
        self.variant = variant;
        self
    }

    fn grants(&self) -> [bool; Q] {
        grants::<D, Q>(&self.entries, self.variant.grant_covered)
    }

    /// The server id.
    pub fn id(&self) -> ServerId {
        self.id
    }

    /// Every direct entry in arrival order, with whether it holds.
    pub fn entries(&self) -> impl Iterator<Item = QEntry<D>> + '_ {
        let g = self.grants();
        self.entries.iter().enumerate().map(move |(i, e)| QEntry {
            agent: e.agent,
            path: e.path,
            mode: e.mode,
            granted: g[i],
        })
    }

    /// The paths that have a lock record, with their versions.
    pub fn records(&self) -> impl Iterator<Item = (LockPath<D>, u32)> + '_ {
        self.records.iter().map(|r| (r.path, r.version))
    }

    /// The current queue of `path` as it would be announced (`None`: no record).
    pub fn info(&self, path: &LockPath<D>, cause: AgentId) -> Option<LockInfo<D, Q>> {
        let r = self.records.iter().find(|r| r.path == *path)?;
        Some(self.info_of(r, &self.grants(), cause, false))
    }

    fn info_of(
        &self,
        r: &Record<D>,
        g: &[bool; Q],
        cause: AgentId,
        surrender: bool,
    ) -> LockInfo<D, Q> {
        let mut queue = heapless::Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            if e.path.related(&r.path) {
                // Cannot fail: the queue is a sub-list of at most Q entries.
                let _ = queue.push(QEntry {
                    agent: e.agent,
                    path: e.path,
                    mode: e.mode,
                    granted: g[i],
                });
            }
        }
        LockInfo {
            server: self.id,
            path: r.path,
            version: r.version,
            cause,
            surrender,
            queue,
        }
    }

    /// Applies one message from an agent: validates it (an error changes nothing), changes
    /// the queue, completes upgrades, drops empty records, gives every changed record a new
    /// version and announces it to every agent in its queue, with the sender as the cause.
    pub fn step<S: Sink<Announce<D, Q>>>(
        &mut self,
        msg: &ServerMsg<D>,
        out: &mut S,
    ) -> Result<Report, AgentError> {
        if out.room() < Self::MAX_OUTPUTS {
            return Err(AgentError::OutputsFull);
        }
        let agent = msg.agent();
        let known = self.entries.iter().any(|e| e.agent == agent);
        let mut report = Report::default();
        // Records whose queue changes (by index).
        let mut touched = [false; R];
        match *msg {
            ServerMsg::Request { path, mode, .. } => {
                let mine = |m: LockMode| {
                    self.entries
                        .iter()
                        .any(|e| e.agent == agent && e.path == path && e.mode == m)
                };
                let (has_r, has_w) = (mine(LockMode::Read), mine(LockMode::Write));
                if has_w || (has_r && mode == LockMode::Read) {
                    return Err(AgentError::AlreadyQueued(agent));
                }
                let new_record = !self.records.iter().any(|r| r.path == path);
                if self.entries.is_full() || (new_record && self.records.is_full()) {
                    return Err(AgentError::Full);
                }
                // Validated: apply.
                let _ = self.entries.push(Entry { agent, path, mode });
                if new_record {
                    let _ = self.records.push(Record { path, version: 0 });
                    report.insert(Rule::RecordCreated);
                }
                report.insert(if has_r {
                    Rule::UpgradeQueued
                } else {
                    Rule::Enqueue
                });
                self.touch(&path, &mut touched);
            }
            ServerMsg::Surrender { path, .. } => {
                if !known {
                    return Err(AgentError::UnknownAgent(agent));
                }
                let g = self.grants();
                let held = self
                    .entries
                    .iter()
                    .enumerate()
                    .any(|(i, e)| e.agent == agent && e.path.related(&path) && g[i]);
                if !held || !self.records.iter().any(|r| r.path == path) {
                    return Err(AgentError::NotHolder(agent));
                }
                self.touch(&path, &mut touched);
                match self.variant.surrender {
                    SurrenderTo::End => {
                        self.surrender_to_end(agent, &path, &mut touched);
                        report.insert(Rule::SurrenderToEnd);
                    }
                    SurrenderTo::SwapWithNext => {
                        self.surrender_swap(agent, &path, &g, &mut touched);
                        report.insert(Rule::SurrenderSwap);
                    }
                }
            }
            ServerMsg::Cancel { path, .. } => {
                if !known {
                    return Err(AgentError::UnknownAgent(agent));
                }
                if !self
                    .entries
                    .iter()
                    .any(|e| e.agent == agent && e.path == path)
                {
                    return Err(AgentError::NotQueued(agent));
                }
                self.entries
                    .retain(|e| !(e.agent == agent && e.path == path));
                self.touch(&path, &mut touched);
                report.insert(Rule::Cancel);
            }
            ServerMsg::Release { .. } => {
                if !known {
                    return Err(AgentError::UnknownAgent(agent));
                }
                for e in self.entries.iter().filter(|e| e.agent == agent) {
                    self.touch(&e.path, &mut touched);
                }
                self.entries.retain(|e| e.agent != agent);
                report.insert(Rule::Release);
            }
        }
        self.complete_upgrades(&mut touched, &mut report);
        let surrendered = match *msg {
            ServerMsg::Surrender { path, .. } => Some(path),
            _ => None,
        };
        self.announce(agent, surrendered, &touched, out, &mut report);
        Ok(report)
    }

    /// Marks the records whose queue shows an entry on `path`.
    fn touch(&self, path: &LockPath<D>, touched: &mut [bool; R]) {
        for (k, r) in self.records.iter().enumerate() {
            touched[k] |= r.path.related(path);
        }
    }

    /// Rule S4: every entry of `agent` in the queue of `path` goes, in order, to the end.
    fn surrender_to_end(&mut self, agent: AgentId, path: &LockPath<D>, touched: &mut [bool; R]) {
        let mut moved: heapless::Vec<Entry<D>, Q> = heapless::Vec::new();
        for e in self.entries.iter() {
            if e.agent == agent && e.path.related(path) {
                let _ = moved.push(*e);
                self.touch(&e.path, touched);
            }
        }
        self.entries
            .retain(|e| !(e.agent == agent && e.path.related(path)));
        for e in moved {
            let _ = self.entries.push(e);
        }
    }

    /// Rule S4' (refuted): the agent's first holding entry in the queue of `path` swaps
    /// places with the next entry of another agent in that queue.
    fn surrender_swap(
        &mut self,
        agent: AgentId,
        path: &LockPath<D>,
        g: &[bool; Q],
        touched: &mut [bool; R],
    ) {
        let in_queue = |e: &Entry<D>| e.path.related(path);
        let Some(i) = self
            .entries
            .iter()
            .enumerate()
            .position(|(i, e)| e.agent == agent && in_queue(e) && g[i])
        else {
            return;
        };
        let next = (i + 1..self.entries.len())
            .find(|&j| self.entries[j].agent != agent && in_queue(&self.entries[j]));
        if let Some(j) = next {
            let (a, b) = (self.entries[i].path, self.entries[j].path);
            self.touch(&a, touched);
            self.touch(&b, touched);
            self.entries.swap(i, j);
        }
    }

    /// Rule S3: a granted write entry of an upgrade makes the agent's read entry on the
    /// same path redundant; it is dropped.
    fn complete_upgrades(&mut self, touched: &mut [bool; R], report: &mut Report) {
        let g = self.grants();
        let mut drop = [false; Q];
        let mut any = false;
        for (i, e) in self.entries.iter().enumerate() {
            if e.mode == LockMode::Read {
                let w = self.entries.iter().enumerate().any(|(j, f)| {
                    f.agent == e.agent && f.path == e.path && f.mode == LockMode::Write && g[j]
                });
                if w {
                    drop[i] = true;
                    any = true;
                    for (k, r) in self.records.iter().enumerate() {
                        touched[k] |= r.path.related(&e.path);
                    }
                }
            }
        }
        if any {
            let mut i = 0;
            self.entries.retain(|_| {
                i += 1;
                !drop[i - 1]
            });
            report.insert(Rule::UpgradeDone);
        }
    }

    /// Rules S6 and S7: drops the records whose queue is now empty and announces every
    /// other record related to a touched path, with a new version. After a surrender of
    /// `surrendered`, that lock's record comes last: its announcement to the surrendering
    /// agent closes the acknowledgements of the surrender (the agent knows every
    /// announcement of this server that arrives before it was sent before or with the
    /// surrender).
    fn announce<S: Sink<Announce<D, Q>>>(
        &mut self,
        cause: AgentId,
        surrendered: Option<LockPath<D>>,
        touched: &[bool; R],
        out: &mut S,
        report: &mut Report,
    ) {
        // Drop the touched records with an empty queue; remember which of the records left
        // were touched, in their new positions.
        let mut kept = [false; R];
        let (mut old, mut new) = (0, 0);
        let entries = &self.entries;
        self.records.retain(|r| {
            let t = touched[old];
            old += 1;
            let keep = !t || entries.iter().any(|e| e.path.related(&r.path));
            if keep {
                kept[new] = t;
                new += 1;
            } else {
                report.insert(Rule::RecordDropped);
            }
            keep
        });
        let g = self.grants();
        let surrender = surrendered.is_some();
        let is_last = |r: &Record<D>| Some(r.path) == surrendered;
        let n = self.records.len();
        let order = (0..n)
            .filter(|&k| !is_last(&self.records[k]))
            .chain((0..n).filter(|&k| is_last(&self.records[k])));
        let order: heapless::Vec<usize, R> = order.collect();
        for k in order.into_iter().filter(|&k| kept[k]) {
            self.clock = self.clock.saturating_add(1);
            self.records[k].version = self.clock;
            let info = self.info_of(&self.records[k], &g, cause, surrender);
            for (i, e) in info.queue.iter().enumerate() {
                if info.queue[..i].iter().all(|f| f.agent != e.agent) {
                    // Room was checked: at most R records × Q agents.
                    let _ = out.put(Announce {
                        to: e.agent,
                        info: info.clone(),
                    });
                }
            }
            report.insert(Rule::Announce);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Srv = LockServer<3, 6, 4>;
    type Out = heapless::Vec<Announce<3, 6>, 400>;

    fn p(k: &[u16]) -> LockPath<3> {
        LockPath::new(k).unwrap()
    }
    fn req(a: u16, k: &[u16], mode: LockMode) -> ServerMsg<3> {
        ServerMsg::Request {
            agent: AgentId(a),
            path: p(k),
            mode,
        }
    }
    fn holders(s: &Srv, k: &[u16]) -> heapless::Vec<(u16, bool), 6> {
        s.info(&p(k), AgentId(0))
            .unwrap()
            .queue
            .iter()
            .map(|e| (e.agent.0, e.granted))
            .collect()
    }
    use LockMode::{Read, Write};

    #[test]
    fn s1_arrival_order_and_announce_to_every_agent_in_the_queue_with_the_cause() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        let r = s.step(&req(1, &[1], Write), &mut out).unwrap();
        assert!(r.contains(Rule::Enqueue) && r.contains(Rule::RecordCreated));
        assert_eq!(out.len(), 1);
        out.clear();
        let r = s.step(&req(2, &[1], Write), &mut out).unwrap();
        assert!(r.contains(Rule::Announce));
        assert_eq!(holders(&s, &[1]).as_slice(), &[(1, true), (2, false)]);
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|a| a.info.cause == AgentId(2) && a.info.version == 2));
        assert_eq!(out[0].to, AgentId(1));
        assert_eq!(out[1].to, AgentId(2));
    }

    #[test]
    fn s1_readers_share_and_a_waiting_writer_is_not_overtaken() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        s.step(&req(1, &[1], Read), &mut out).unwrap();
        s.step(&req(2, &[1], Read), &mut out).unwrap();
        s.step(&req(3, &[1], Write), &mut out).unwrap();
        s.step(&req(4, &[1], Read), &mut out).unwrap();
        assert_eq!(
            holders(&s, &[1]).as_slice(),
            &[(1, true), (2, true), (3, false), (4, false)]
        );
    }

    #[test]
    fn s2_hierarchy_indirect_entries_only_in_records_that_exist() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        // A1 holds [1,2]; A2 asks for [1,3] (a sibling: both hold); A3 asks for [1].
        s.step(&req(1, &[1, 2], Write), &mut out).unwrap();
        s.step(&req(2, &[1, 3], Write), &mut out).unwrap();
        assert_eq!(s.records().count(), 2, "no record for [1] yet");
        out.clear();
        let r = s.step(&req(3, &[1], Read), &mut out).unwrap();
        assert!(r.contains(Rule::RecordCreated));
        // [1]'s queue shows both descendants (indirect entries) before A3, who waits.
        assert_eq!(
            holders(&s, &[1]).as_slice(),
            &[(1, true), (2, true), (3, false)]
        );
        // [1,2]'s queue gains A3's indirect entry; [1,3]'s too: all three announced.
        assert!(out.iter().any(|a| a.info.path == p(&[1, 2])));
        assert!(out.iter().any(|a| a.info.path == p(&[1, 3])));
        // A lock on [1] covers [1,3,7]: created on demand, A2 and A3 in it.
        s.step(&req(4, &[1, 3, 7], Read), &mut out).unwrap();
        assert_eq!(
            holders(&s, &[1, 3, 7]).as_slice(),
            &[(2, true), (3, false), (4, false)]
        );
    }

    /// A1 holds `[1]`; A2's `[1,2]` waits behind it; A1 asks for `[1,2]` too. Its own `[1]`
    /// covers it: it holds at once (the seed's server left it waiting behind A2's entry,
    /// which waits for A1: A1 waited for itself). A read of `[1]` covers a read of
    /// `[1,2]` but not a write.
    #[test]
    fn s1_a_request_covered_by_an_own_held_lock_holds_at_once() {
        let run = |variant: ServerVariant, held: LockMode, asked: LockMode| {
            let mut s = Srv::new(ServerId(0)).with_variant(variant);
            let mut out = Out::new();
            s.step(&req(1, &[1], held), &mut out).unwrap();
            s.step(&req(2, &[1, 2], Write), &mut out).unwrap();
            s.step(&req(1, &[1, 2], asked), &mut out).unwrap();
            holders(&s, &[1, 2])
        };
        let seed = ServerVariant::SEED;
        let waits = ServerVariant {
            grant_covered: false,
            ..seed
        };
        let covered: &[(u16, bool)] = &[(1, true), (2, false), (1, true)];
        let behind: &[(u16, bool)] = &[(1, true), (2, false), (1, false)];
        assert_eq!(run(seed, Write, Write).as_slice(), covered);
        assert_eq!(run(seed, Write, Read).as_slice(), covered);
        assert_eq!(run(seed, Read, Read).as_slice(), covered);
        assert_eq!(run(seed, Read, Write).as_slice(), behind);
        assert_eq!(run(waits, Write, Write).as_slice(), behind);
    }

    #[test]
    fn s3_upgrade_waits_for_other_readers_then_drops_the_read_entry() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        s.step(&req(1, &[1], Read), &mut out).unwrap();
        s.step(&req(2, &[1], Read), &mut out).unwrap();
        let r = s.step(&req(1, &[1], Write), &mut out).unwrap();
        assert!(r.contains(Rule::UpgradeQueued) && !r.contains(Rule::UpgradeDone));
        assert_eq!(
            holders(&s, &[1]).as_slice(),
            &[(1, true), (2, true), (1, false)]
        );
        let r = s
            .step(&ServerMsg::Release { agent: AgentId(2) }, &mut out)
            .unwrap();
        assert!(r.contains(Rule::UpgradeDone));
        assert_eq!(holders(&s, &[1]).as_slice(), &[(1, true)]);
        assert_eq!(
            s.step(&req(1, &[1], Read), &mut out),
            Err(AgentError::AlreadyQueued(AgentId(1)))
        );
    }

    #[test]
    fn s3_sole_reader_upgrades_at_once() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        s.step(&req(1, &[1], Read), &mut out).unwrap();
        let r = s.step(&req(1, &[1], Write), &mut out).unwrap();
        assert!(r.contains(Rule::UpgradeQueued) && r.contains(Rule::UpgradeDone));
        let q = s.info(&p(&[1]), AgentId(1)).unwrap();
        assert!(q.holds_direct(AgentId(1), Write) && q.queue.len() == 1);
    }

    #[test]
    fn s4_surrender_moves_the_holder_to_the_end() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        for a in 1..=3 {
            s.step(&req(a, &[1], Write), &mut out).unwrap();
        }
        out.clear();
        let r = s
            .step(
                &ServerMsg::Surrender {
                    agent: AgentId(1),
                    path: p(&[1]),
                },
                &mut out,
            )
            .unwrap();
        assert!(r.contains(Rule::SurrenderToEnd));
        assert_eq!(
            holders(&s, &[1]).as_slice(),
            &[(2, true), (3, false), (1, false)]
        );
        assert!(out
            .iter()
            .all(|a| a.info.cause == AgentId(1) && a.info.surrender));
        // A waiting agent cannot surrender; a stranger is unknown; nothing changes.
        let before = s.clone();
        let sur = |a| ServerMsg::Surrender {
            agent: AgentId(a),
            path: p(&[1]),
        };
        assert_eq!(
            s.step(&sur(3), &mut out),
            Err(AgentError::NotHolder(AgentId(3)))
        );
        assert_eq!(
            s.step(&sur(9), &mut out),
            Err(AgentError::UnknownAgent(AgentId(9)))
        );
        assert_eq!(s, before);
    }

    #[test]
    fn s4_swap_variant_swaps_with_the_next() {
        let mut s = Srv::new(ServerId(0)).with_variant(ServerVariant {
            surrender: SurrenderTo::SwapWithNext,
            ..ServerVariant::SEED
        });
        let mut out = Out::new();
        for a in 1..=3 {
            s.step(&req(a, &[1], Write), &mut out).unwrap();
        }
        let r = s
            .step(
                &ServerMsg::Surrender {
                    agent: AgentId(1),
                    path: p(&[1]),
                },
                &mut out,
            )
            .unwrap();
        assert!(r.contains(Rule::SurrenderSwap));
        assert_eq!(
            holders(&s, &[1]).as_slice(),
            &[(2, true), (1, false), (3, false)]
        );
    }

    #[test]
    fn s5_cancel_and_release_remove_and_empty_records_are_dropped() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        s.step(&req(1, &[1], Write), &mut out).unwrap();
        s.step(&req(2, &[1], Write), &mut out).unwrap();
        s.step(&req(2, &[2], Write), &mut out).unwrap();
        let v = s.info(&p(&[1]), AgentId(0)).unwrap().version;
        out.clear();
        let r = s
            .step(
                &ServerMsg::Cancel {
                    agent: AgentId(1),
                    path: p(&[1]),
                },
                &mut out,
            )
            .unwrap();
        assert!(r.contains(Rule::Cancel));
        let q = s.info(&p(&[1]), AgentId(0)).unwrap();
        assert!(q.version > v && q.holds_direct(AgentId(2), Write));
        assert_eq!(out.len(), 1, "only A2 is left in the queue");
        assert_eq!(
            s.step(
                &ServerMsg::Cancel {
                    agent: AgentId(2),
                    path: p(&[3]),
                },
                &mut out
            ),
            Err(AgentError::NotQueued(AgentId(2)))
        );
        let r = s
            .step(&ServerMsg::Release { agent: AgentId(2) }, &mut out)
            .unwrap();
        assert!(r.contains(Rule::Release) && r.contains(Rule::RecordDropped));
        assert_eq!(s.records().count(), 0);
        assert_eq!(
            s.step(&ServerMsg::Release { agent: AgentId(2) }, &mut out),
            Err(AgentError::UnknownAgent(AgentId(2)))
        );
    }

    #[test]
    fn s6_versions_never_repeat_after_a_record_is_dropped() {
        let mut s = Srv::new(ServerId(0));
        let mut out = Out::new();
        s.step(&req(1, &[1], Write), &mut out).unwrap();
        let v1 = s.info(&p(&[1]), AgentId(0)).unwrap().version;
        s.step(&ServerMsg::Release { agent: AgentId(1) }, &mut out)
            .unwrap();
        s.step(&req(1, &[1], Write), &mut out).unwrap();
        assert!(s.info(&p(&[1]), AgentId(0)).unwrap().version > v1);
    }

    #[test]
    fn capacity_and_output_room_are_checked_first() {
        let mut s = LockServer::<3, 2, 1>::new(ServerId(0));
        let mut out: heapless::Vec<Announce<3, 2>, 2> = heapless::Vec::new();
        s.step(&req(1, &[1], Write), &mut out).unwrap();
        out.clear();
        let before = s.clone();
        assert_eq!(
            s.step(&req(1, &[2], Write), &mut out),
            Err(AgentError::Full)
        );
        let mut small: heapless::Vec<Announce<3, 2>, 1> = heapless::Vec::new();
        assert_eq!(
            s.step(&req(2, &[1], Write), &mut small),
            Err(AgentError::OutputsFull)
        );
        assert_eq!(s, before);
    }
}
