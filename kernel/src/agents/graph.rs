//! The wait-for graph an agent builds from the queues it knows ("the graph expressing which
//! client waits for which other client to get access to an object").
//!
//! Two relations over agents:
//!
//! - *waits* (`W → F`): a waiting entry `w` of agent `W` stands behind an earlier entry `f`
//!   of another agent `F` on a related path that either conflicts with it (read/write,
//!   write/anything) or is itself waiting (nobody overtakes a waiting entry). Information is
//!   spread along this relation (rule A7).
//! - *waits for a holder* (`W ⇒ H`): `w` cannot be granted before `H` gives up an entry it
//!   holds: `H`'s granted entry blocks `w` directly, or blocks a waiting entry that `w`
//!   waits behind, transitively, on the same server (across the queues of related locks:
//!   an entry is one `(server, agent, path, mode)` in every queue it appears in). This is
//!   the seed's graph: "not all clients need be presented in the graph, but only those that
//!   hold a lock. However, the relation that expresses a client waiting for another client
//!   takes all known clients into account". A deadlock is a cycle of `⇒` (every member
//!   holds a lock another member waits for); its resolver is its largest member ("from the
//!   nodes on this cycle the client with largest reference surrenders the object it
//!   locks"). A cycle of *waits* through an agent that only waits (behind a third agent that
//!   holds) is not a deadlock yet: the holder outside it goes on, and when the waiter gets
//!   the lock the cycle of `⇒` appears — seen alike by every member that knows it.
//!
//! Every cycle runs through distinct agents: an entry never waits for an entry of its own
//! agent ([`WaitGraph::blocked_by`]), and a lock server grants an entry that a holding
//! entry of its own agent covers, so no agent waits behind others for a lock it has. A
//! cycle of `⇒` can still be one agent `H` (`H ⇒ H`): `H`'s waiting entry stands behind a
//! waiting entry of another agent `W` that waits for `H`'s granted one — a cycle `H → W →
//! H` of two agents of which only `H` holds, a real deadlock that only `H` can resolve.
//! The graph assumes the queues of one server are one snapshot (entries shared by two
//! queues shown alike, [`WaitGraph::agree`]): joined from two versions, one entry could
//! be granted in one queue and waiting in another, and its agent would wait for itself.

use super::{AgentId, LockPath, QEntry, ServerId};

/// Agents one graph can name (a 64-bit set per agent).
pub const MAX_GRAPH: usize = 64;

/// A wait-for graph over at most [`MAX_GRAPH`] agents; agents beyond that are left out
/// (an agent that sees more than 64 agents at once may miss a cycle through the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitGraph {
    agents: heapless::Vec<AgentId, MAX_GRAPH>,
    /// `waits[i]`: the agents `i` waits for.
    waits: [u64; MAX_GRAPH],
    /// `holds[i]`: the agents `i` waits for that hold the entry it waits behind.
    holds: [u64; MAX_GRAPH],
    /// Transitive closure of `waits` (filled by [`WaitGraph::close`]).
    reach: [u64; MAX_GRAPH],
    /// `hwaits[i]`: the agents `i` waits for as holders (`⇒`, see the module doc).
    hwaits: [u64; MAX_GRAPH],
    /// Transitive closure of `hwaits`.
    hreach: [u64; MAX_GRAPH],
}

impl Default for WaitGraph {
    fn default() -> Self {
        WaitGraph {
            agents: heapless::Vec::new(),
            waits: [0; MAX_GRAPH],
            holds: [0; MAX_GRAPH],
            reach: [0; MAX_GRAPH],
            hwaits: [0; MAX_GRAPH],
            hreach: [0; MAX_GRAPH],
        }
    }
}

impl WaitGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index of `a`, added if new (`None` when the graph is full).
    pub fn index(&mut self, a: AgentId) -> Option<usize> {
        if let Some(i) = self.agents.iter().position(|x| *x == a) {
            return Some(i);
        }
        self.agents.push(a).ok()?;
        Some(self.agents.len() - 1)
    }

    /// The index of `a` if it is in the graph.
    pub fn find(&self, a: AgentId) -> Option<usize> {
        self.agents.iter().position(|x| *x == a)
    }

    /// The agent at index `i`.
    pub fn agent(&self, i: usize) -> Option<AgentId> {
        self.agents.get(i).copied()
    }

    /// Number of agents.
    pub fn len(&self) -> usize {
        self.agents.len()
    }

    /// Whether the graph names no agent.
    pub fn is_empty(&self) -> bool {
        self.agents.is_empty()
    }

    /// Whether entry `w` waits behind the earlier entry `f` of the same queue, and whether
    /// `f` holds (`Some(true)`: `f`'s agent is a holder `w` waits for).
    pub fn blocked_by<const D: usize>(w: &QEntry<D>, f: &QEntry<D>) -> Option<bool> {
        let waits = !w.granted
            && f.agent != w.agent
            && f.path.related(&w.path)
            && (!f.granted || !f.mode.compatible(w.mode));
        waits.then_some(f.granted)
    }

    /// Whether the queues `a` of lock `p` and `b` of lock `q`, announced by one server,
    /// show the entries they share (those on paths related to both locks: the entries on
    /// `[1]` are in the queues of `[1, 2]` and of `[1, 3]`) alike: the same
    /// entries, in the same order, holding alike. Two queues announced at one time do;
    /// if they differ, they were announced at different times and the older (the lower
    /// version) is out of date: a chain of waits through a shared entry would join what
    /// the entry was in one to what it is in the other.
    pub fn agree<const D: usize>(
        p: &LockPath<D>,
        a: &[QEntry<D>],
        q: &LockPath<D>,
        b: &[QEntry<D>],
    ) -> bool {
        a.iter()
            .filter(|e| e.path.related(q))
            .eq(b.iter().filter(|e| e.path.related(p)))
    }

    /// Adds the *waits* edges of one queue (entries in arrival order) and its direct
    /// holders ([`WaitGraph::holds_for`]); not the `⇒` relation ([`WaitGraph::add_queues`]
    /// adds both). `skip(w)` leaves a waiting entry out (an agent's own entry for a lock it
    /// already has on enough servers).
    pub fn add_queue<const D: usize>(
        &mut self,
        queue: &[QEntry<D>],
        skip: impl Fn(&QEntry<D>) -> bool,
    ) {
        for (i, w) in queue.iter().enumerate() {
            if w.granted || skip(w) {
                continue;
            }
            for f in &queue[..i] {
                if let Some(holder) = Self::blocked_by(w, f) {
                    if let (Some(a), Some(b)) = (self.index(w.agent), self.index(f.agent)) {
                        self.waits[a] |= 1 << b;
                        if holder {
                            self.holds[a] |= 1 << b;
                        }
                    }
                }
            }
        }
    }

    /// Adds the edges of both relations for a set of queues, each announced by server
    /// `queues[k].0` (at most `K` queues of at most `Q` entries are read; the rest is left
    /// out). An entry is the same entry in every queue of its server where it appears, so
    /// a chain of waiting entries is followed from one lock's queue into a related lock's;
    /// the queues of one server must therefore agree on the entries they share
    /// ([`WaitGraph::agree`]: the caller leaves an out-of-date queue out).
    /// `skip(server, w)` leaves a waiting entry's own edges out (an agent's own entry for a
    /// lock it already has on enough servers); chains of other entries still pass through
    /// it. Returns, per queue and entry, the graph indices of the agents whose granted
    /// entries that (waiting) entry waits for, directly or through waiting entries: the
    /// `⇒` relation entry by entry (0 for granted entries).
    pub fn add_queues<const D: usize, const Q: usize, const K: usize>(
        &mut self,
        queues: &[(ServerId, &[QEntry<D>])],
        skip: impl Fn(ServerId, &QEntry<D>) -> bool,
    ) -> [[u64; Q]; K] {
        let n = queues.len().min(K);
        let len = |k: usize| queues[k].1.len().min(Q);
        let mut hs = [[0u64; Q]; K];
        // The first occurrence (queue, index) of each waiting entry on its server.
        let mut canon = [[(0u16, 0u16); Q]; K];
        for k in 0..n {
            let (s, q) = queues[k];
            for i in 0..len(k) {
                canon[k][i] = (k as u16, i as u16);
                let w = &q[i];
                if w.granted {
                    continue;
                }
                'find: for (k2, (s2, q2)) in queues.iter().enumerate().take(k + 1) {
                    if *s2 != s {
                        continue;
                    }
                    for (i2, f) in q2.iter().enumerate().take(len(k2)) {
                        if k2 == k && i2 >= i {
                            break 'find;
                        }
                        if !f.granted && f.agent == w.agent && f.path == w.path && f.mode == w.mode
                        {
                            canon[k][i] = (k2 as u16, i2 as u16);
                            break 'find;
                        }
                    }
                }
            }
        }
        // Holders that block an entry directly.
        for k in 0..n {
            let q = queues[k].1;
            for i in 0..len(k) {
                let w = &q[i];
                if w.granted {
                    continue;
                }
                let (ck, ci) = canon[k][i];
                for f in &q[..i] {
                    if Self::blocked_by(w, f) == Some(true) {
                        if let Some(b) = self.index(f.agent) {
                            hs[ck as usize][ci as usize] |= 1 << b;
                        }
                    }
                }
            }
        }
        // Through waiting entries, to a fixpoint (each round adds a bit or stops).
        loop {
            let mut changed = false;
            for k in 0..n {
                let q = queues[k].1;
                for i in 0..len(k) {
                    let w = &q[i];
                    if w.granted {
                        continue;
                    }
                    let mut add = 0;
                    for (j, f) in q[..i].iter().enumerate() {
                        if Self::blocked_by(w, f) == Some(false) {
                            let (fk, fi) = canon[k][j];
                            add |= hs[fk as usize][fi as usize];
                        }
                    }
                    let (ck, ci) = canon[k][i];
                    let h = &mut hs[ck as usize][ci as usize];
                    if add & !*h != 0 {
                        *h |= add;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        // Every occurrence gets its entry's set; the edges of both relations.
        for k in 0..n {
            let (s, q) = queues[k];
            for i in 0..len(k) {
                let w = &q[i];
                if w.granted {
                    continue;
                }
                let (ck, ci) = canon[k][i];
                hs[k][i] = hs[ck as usize][ci as usize];
                if skip(s, w) {
                    continue;
                }
                let Some(a) = self.index(w.agent) else {
                    continue;
                };
                self.hwaits[a] |= hs[k][i];
                for f in &q[..i] {
                    if let Some(holder) = Self::blocked_by(w, f) {
                        if let Some(b) = self.index(f.agent) {
                            self.waits[a] |= 1 << b;
                            if holder {
                                self.holds[a] |= 1 << b;
                            }
                        }
                    }
                }
            }
        }
        hs
    }

    /// Computes the transitive closures (call after the last [`WaitGraph::add_queue`] or
    /// [`WaitGraph::add_queues`]).
    pub fn close(&mut self) {
        let n = self.agents.len();
        self.reach[..n].copy_from_slice(&self.waits[..n]);
        self.hreach[..n].copy_from_slice(&self.hwaits[..n]);
        for k in 0..n {
            for i in 0..n {
                if self.reach[i] & (1 << k) != 0 {
                    self.reach[i] |= self.reach[k];
                }
                if self.hreach[i] & (1 << k) != 0 {
                    self.hreach[i] |= self.hreach[k];
                }
            }
        }
    }

    /// The agents `i` waits for directly.
    pub fn waits_for(&self, i: usize) -> u64 {
        self.waits.get(i).copied().unwrap_or(0)
    }

    /// The agents `i` waits for directly behind an entry they hold.
    pub fn holds_for(&self, i: usize) -> u64 {
        self.holds.get(i).copied().unwrap_or(0)
    }

    /// The agents that wait for `i`, directly or not (after [`WaitGraph::close`]).
    pub fn waiting_for(&self, i: usize) -> u64 {
        (0..self.agents.len())
            .filter(|&j| self.reach[j] & (1 << i) != 0)
            .fold(0, |m, j| m | 1 << j)
    }

    /// The agents `i` waits for as holders (`⇒`, after [`WaitGraph::add_queues`]).
    pub fn waits_for_holders(&self, i: usize) -> u64 {
        self.hwaits.get(i).copied().unwrap_or(0)
    }

    fn component(reach: &[u64; MAX_GRAPH], n: usize, i: usize) -> Option<u64> {
        if i >= n || reach[i] & (1 << i) == 0 {
            return None;
        }
        Some(
            (0..n)
                .filter(|&j| reach[i] & (1 << j) != 0 && reach[j] & (1 << i) != 0)
                .fold(0, |m, j| m | 1 << j),
        )
    }

    /// The deadlock of `i`: its strongly connected component of `⇒` if `i` is on a cycle of
    /// it (after [`WaitGraph::close`]). Every member holds a lock another member waits for.
    pub fn cycle_of(&self, i: usize) -> Option<u64> {
        Self::component(&self.hreach, self.agents.len(), i)
    }

    /// Every deadlock (strongly connected component of `⇒` with an edge), once each, by its
    /// lowest index.
    pub fn cycles(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.agents.len()).filter_map(move |i| {
            let c = self.cycle_of(i)?;
            (c.trailing_zeros() as usize == i).then_some(c)
        })
    }

    /// Every strongly connected component of *waits* with an edge (the pre-fix rule's
    /// "cycles", kept for the refuted variants), once each, by its lowest index.
    pub fn wait_components(&self) -> impl Iterator<Item = u64> + '_ {
        let n = self.agents.len();
        (0..n).filter_map(move |i| {
            let c = Self::component(&self.reach, n, i)?;
            (c.trailing_zeros() as usize == i).then_some(c)
        })
    }

    /// The agents of `component` that hold a lock another member waits for directly (the
    /// holders of a component of *waits*).
    pub fn holders_in(&self, component: u64) -> u64 {
        (0..self.agents.len())
            .filter(|&j| component & (1 << j) != 0)
            .fold(0, |m, j| m | (self.holds[j] & component))
    }

    /// The largest agent of a set of indices.
    pub fn largest(&self, set: u64) -> Option<AgentId> {
        (0..self.agents.len())
            .filter(|&j| set & (1 << j) != 0)
            .map(|j| self.agents[j])
            .max()
    }

    /// The agents of a set of indices.
    pub fn members(&self, set: u64) -> impl Iterator<Item = AgentId> + '_ {
        (0..self.agents.len())
            .filter(move |&j| set & (1 << j) != 0)
            .map(|j| self.agents[j])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::{LockMode, LockPath};

    fn e(a: u16, k: &[u16], mode: LockMode, granted: bool) -> QEntry<2> {
        QEntry {
            agent: AgentId(a),
            path: LockPath::new(k).unwrap(),
            mode,
            granted,
        }
    }
    use LockMode::{Read, Write};

    const S0: ServerId = ServerId(0);

    #[test]
    fn two_cycle_and_its_holders() {
        let q1 = [e(1, &[1], Write, true), e(2, &[1], Write, false)];
        let q2 = [e(2, &[2], Write, true), e(1, &[2], Write, false)];
        let mut g = WaitGraph::new();
        g.add_queues::<2, 4, 2>(&[(S0, &q1), (S0, &q2)], |_, _| false);
        g.close();
        let c: heapless::Vec<u64, 4> = g.cycles().collect();
        assert_eq!(c, [0b11]);
        assert_eq!(g.wait_components().count(), 1);
        assert_eq!(g.holders_in(c[0]), 0b11);
        assert_eq!(g.largest(c[0]), Some(AgentId(2)));
    }

    /// The 3x3 counterexample's last state as A1 knew it: A1 waits for /3 behind A2, who
    /// waits for /3 behind A0; A2 waits for /1 behind A1. A cycle of *waits* (A1 → A2 → A1)
    /// but no deadlock: A0 holds /3 and goes on. Only once A2 holds /3 is there one.
    #[test]
    fn a_waiter_behind_a_third_holder_closes_no_deadlock() {
        let q3 = [
            e(0, &[3], Write, true),
            e(2, &[3], Write, false),
            e(1, &[3], Write, false),
        ];
        let q1 = [e(1, &[1], Write, true), e(2, &[1], Read, false)];
        let mut g = WaitGraph::new();
        let hs = g.add_queues::<2, 4, 2>(&[(S0, &q3), (S0, &q1)], |_, _| false);
        g.close();
        let (a0, a1, a2) = (
            g.find(AgentId(0)).unwrap(),
            g.find(AgentId(1)).unwrap(),
            g.find(AgentId(2)).unwrap(),
        );
        assert_eq!(g.wait_components().count(), 1, "A1 → A2 → A1 in *waits*");
        assert_eq!(g.cycles().count(), 0, "no deadlock");
        assert_eq!(g.waits_for_holders(a1), 1 << a0);
        assert_eq!(g.waits_for_holders(a2), (1 << a0) | (1 << a1));
        assert_eq!(hs[0][2], 1 << a0, "A1's /3 waits for A0 through A2's entry");
        // A0 has released /3 and A2 holds it: now a deadlock of A1 and A2.
        let q3 = [e(2, &[3], Write, true), e(1, &[3], Write, false)];
        let mut g = WaitGraph::new();
        g.add_queues::<2, 4, 2>(&[(S0, &q3), (S0, &q1)], |_, _| false);
        g.close();
        let c: heapless::Vec<u64, 4> = g.cycles().collect();
        assert_eq!(c.len(), 1);
        assert_eq!(g.members(c[0]).max(), Some(AgentId(2)));
    }

    /// A chain of waits through a waiting entry whose holder only another lock's queue
    /// shows: A3 waits on [1,1] behind A2's waiting [1], which waits behind A1's [1,2].
    #[test]
    fn chains_follow_one_entry_across_related_queues_of_its_server() {
        let q11 = [e(2, &[1], Write, false), e(3, &[1, 1], Write, false)];
        let q1 = [e(1, &[1, 2], Write, true), e(2, &[1], Write, false)];
        let mut g = WaitGraph::new();
        let hs = g.add_queues::<2, 4, 2>(&[(S0, &q11), (S0, &q1)], |_, _| false);
        g.close();
        let a1 = g.find(AgentId(1)).unwrap();
        let a3 = g.find(AgentId(3)).unwrap();
        assert_eq!(g.waits_for_holders(a3), 1 << a1);
        assert_eq!(hs[0][1], 1 << a1);
        // The same entries on another server are other entries.
        let mut g = WaitGraph::new();
        g.add_queues::<2, 4, 2>(&[(S0, &q11), (ServerId(1), &q1)], |_, _| false);
        g.close();
        let a3 = g.find(AgentId(3)).unwrap();
        assert_eq!(g.waits_for_holders(a3), 0);
    }

    /// The queues of `[1,2]` and `[1,3]` share the entries on `[1]` (not those on `[1,2]`
    /// or `[1,3]`); two versions that show one of them otherwise disagree.
    #[test]
    fn queues_agree_on_the_entries_they_share() {
        let (p12, p13) = (
            LockPath::new(&[1, 2]).unwrap(),
            LockPath::new(&[1, 3]).unwrap(),
        );
        let old = [e(2, &[1, 2], Write, true), e(1, &[1], Write, false)];
        let new = [e(1, &[1], Write, true), e(3, &[1, 3], Write, false)];
        assert!(!WaitGraph::agree(&p12, &old, &p13, &new));
        let now = [e(1, &[1], Write, false), e(3, &[1, 3], Read, true)];
        assert!(WaitGraph::agree(&p12, &old, &p13, &now));
        assert!(WaitGraph::agree(&p13, &now, &p12, &old));
        // One more shared entry in one of them: they disagree.
        let more = [e(1, &[1], Write, false), e(4, &[1], Read, false)];
        assert!(!WaitGraph::agree(&p12, &old, &p13, &more));
    }

    /// A1 holds `[1,2]`; A2's `[1]` waits behind it; A1's `[1]` waits behind A2's (nobody
    /// overtakes a waiting entry). A1 waits for itself *through* A2: a cycle of two agents
    /// of which only A1 holds, a real deadlock that A1 resolves (`cycles` names A1 alone,
    /// its only holder).
    #[test]
    fn a_holder_behind_a_waiter_that_waits_for_it_is_a_deadlock() {
        let q = [
            e(1, &[1, 2], Write, true),
            e(2, &[1], Write, false),
            e(1, &[1], Write, false),
        ];
        let mut g = WaitGraph::new();
        g.add_queues::<2, 4, 1>(&[(S0, &q)], |_, _| false);
        g.close();
        let (a1, a2) = (g.find(AgentId(1)).unwrap(), g.find(AgentId(2)).unwrap());
        assert_eq!(g.waits_for(a1), 1 << a2);
        assert_eq!(g.waits_for_holders(a1), 1 << a1);
        assert_eq!(g.waits_for_holders(a2), 1 << a1);
        let c: heapless::Vec<u64, 4> = g.cycles().collect();
        assert_eq!(c, [1 << a1]);
    }

    #[test]
    fn compatible_holders_are_not_waited_for_but_waiting_entries_are() {
        // A1 R holds, A2 W waits, A3 R waits: A3 waits for A2 (no overtaking), not for A1.
        let q = [
            e(1, &[1], Read, true),
            e(2, &[1], Write, false),
            e(3, &[1], Read, false),
        ];
        let mut g = WaitGraph::new();
        g.add_queue(&q, |_| false);
        g.close();
        let (a1, a2, a3) = (
            g.find(AgentId(1)).unwrap(),
            g.find(AgentId(2)).unwrap(),
            g.find(AgentId(3)).unwrap(),
        );
        assert_eq!(g.waits_for(a3), 1 << a2);
        assert_eq!(g.waits_for(a2), 1 << a1);
        assert_eq!(g.waiting_for(a1), (1 << a2) | (1 << a3));
        assert_eq!(g.cycles().count(), 0);
    }

    #[test]
    fn unrelated_paths_in_one_queue_do_not_wait() {
        // In the queue of [1]: A1 holds [1,1], A2 waits on [1,2] behind a waiting [1] of A3.
        let q = [
            e(1, &[1, 1], Write, true),
            e(3, &[1], Read, false),
            e(2, &[1, 2], Write, false),
        ];
        let mut g = WaitGraph::new();
        g.add_queue(&q, |_| false);
        g.close();
        let (a1, a2, a3) = (
            g.find(AgentId(1)).unwrap(),
            g.find(AgentId(2)).unwrap(),
            g.find(AgentId(3)).unwrap(),
        );
        assert_eq!(g.waits_for(a2), 1 << a3);
        assert_eq!(g.waits_for(a3), 1 << a1);
        assert_eq!(g.holders_in(u64::MAX), 1 << a1);
    }

    #[test]
    fn skipped_entries_add_no_edge() {
        let mut g = WaitGraph::new();
        g.add_queue(&[e(1, &[1], Write, true), e(2, &[1], Write, false)], |w| {
            w.agent == AgentId(2)
        });
        g.close();
        assert!(g.find(AgentId(2)).is_none());
    }
}
