//! The wait-for graph an agent builds from the queues it knows ("the graph expressing which
//! client waits for which other client to get access to an object").
//!
//! A waiting entry `w` of agent `W` waits for every earlier entry `f` of another agent `F`
//! on a related path that either conflicts with it (read/write, write/anything) or is
//! itself waiting (nobody overtakes a waiting entry): `W → F`. When `f` holds, `F` is a
//! *holder* of a lock `W` waits for: only such agents may surrender ("it is important to
//! select this particular client among the ones that indeed hold a lock"). A cycle is a
//! strongly connected component with an edge inside.

use super::{AgentId, QEntry};

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
}

impl Default for WaitGraph {
    fn default() -> Self {
        WaitGraph {
            agents: heapless::Vec::new(),
            waits: [0; MAX_GRAPH],
            holds: [0; MAX_GRAPH],
            reach: [0; MAX_GRAPH],
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

    /// Adds the edges of one queue (entries in arrival order); `skip(w)` leaves a waiting
    /// entry out (an agent's own entry for a lock it already has on enough servers).
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

    /// Computes the transitive closure (call after the last [`WaitGraph::add_queue`]).
    pub fn close(&mut self) {
        let n = self.agents.len();
        self.reach[..n].copy_from_slice(&self.waits[..n]);
        for k in 0..n {
            for i in 0..n {
                if self.reach[i] & (1 << k) != 0 {
                    self.reach[i] |= self.reach[k];
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

    /// The strongly connected component of `i` if `i` is on a cycle (after
    /// [`WaitGraph::close`]).
    pub fn cycle_of(&self, i: usize) -> Option<u64> {
        if i >= self.agents.len() || self.reach[i] & (1 << i) == 0 {
            return None;
        }
        Some(
            (0..self.agents.len())
                .filter(|&j| self.reach[i] & (1 << j) != 0 && self.reach[j] & (1 << i) != 0)
                .fold(0, |m, j| m | 1 << j),
        )
    }

    /// Every cycle (strongly connected component with an edge), once each, by its lowest
    /// index.
    pub fn cycles(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.agents.len()).filter_map(move |i| {
            let c = self.cycle_of(i)?;
            (c.trailing_zeros() as usize == i).then_some(c)
        })
    }

    /// The agents of `component` that hold a lock another member waits for.
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
    use crate::agent::{LockMode, LockPath};

    fn e(a: u16, k: &[u16], mode: LockMode, granted: bool) -> QEntry<2> {
        QEntry {
            agent: AgentId(a),
            path: LockPath::new(k).unwrap(),
            mode,
            granted,
        }
    }
    use LockMode::{Read, Write};

    #[test]
    fn two_cycle_and_its_holders() {
        let mut g = WaitGraph::new();
        g.add_queue(&[e(1, &[1], Write, true), e(2, &[1], Write, false)], |_| {
            false
        });
        g.add_queue(&[e(2, &[2], Write, true), e(1, &[2], Write, false)], |_| {
            false
        });
        g.close();
        let c: heapless::Vec<u64, 4> = g.cycles().collect();
        assert_eq!(c.len(), 1);
        assert_eq!(g.holders_in(c[0]), 0b11);
        assert_eq!(g.largest(g.holders_in(c[0])), Some(AgentId(2)));
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
