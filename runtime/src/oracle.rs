//! The history checker of `hilock demo` and the tests ([`Oracle`]), and the loopback
//! cluster they run on ([`local_cluster`]).
//!
//! The oracle: every lock a guard holds is registered between its grant and its release,
//! and checked against every lock registered on the same path on any node; two
//! registrations that Table 2.1 does not allow together are a violation. (Registration
//! happens strictly inside the real hold, so an overlap the oracle sees is real.) With
//! fencing tokens, each grant is also checked against the holds of its path that ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use hilock_kernel::{compatible, Mode};
use tokio::net::TcpListener;

use crate::config::{Config, NodeAddr};
use crate::token::{Guard, Node};

/// Start `n` nodes on 127.0.0.1 (ephemeral ports) in one cluster.
pub async fn local_cluster(
    n: usize,
    cluster: &str,
    secret: &[u8],
    request_timeout: Duration,
) -> std::io::Result<Vec<Node>> {
    local_cluster_recording(n, cluster, secret, request_timeout, None).await
}

/// [`local_cluster`] whose nodes record their kernel steps in `record`/`node-<id>.jsonl`
/// if `record` is given ([`Config::record`]).
pub async fn local_cluster_recording(
    n: usize,
    cluster: &str,
    secret: &[u8],
    request_timeout: Duration,
    record: Option<&std::path::Path>,
) -> std::io::Result<Vec<Node>> {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for id in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(NodeAddr {
            id: id as u16,
            addr: l.local_addr()?,
        });
        listeners.push(l);
    }
    let mut nodes = Vec::new();
    for (id, l) in listeners.into_iter().enumerate() {
        let mut c = Config::new(cluster, secret.to_vec(), id as u16, addrs.clone())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        c.request_timeout = request_timeout;
        c.record = record.map(|d| d.join(format!("node-{id}.jsonl")));
        nodes.push(Node::start_on(c, l).await?);
    }
    Ok(nodes)
}

/// A registration of the oracle: operation, node, mode, fencing token (if known).
type Holding = (u64, u16, Mode, Option<u64>);

/// Checks every grant against Table 2.1 across all nodes.
#[derive(Debug, Default)]
pub struct Oracle {
    held: Mutex<HashMap<String, Vec<Holding>>>,
    /// Per path, the largest fence of the holds that ended, per mode (`Mode as usize`).
    ended: Mutex<HashMap<String, [Option<u64>; 6]>>,
    violations: Mutex<Vec<String>>,
    checks: AtomicU64,
    same_node: AtomicU64,
    fence_checks: AtomicU64,
    /// Grants whose fence was not above an ended conflicting hold's (also in `violations`).
    fence_regressions: AtomicU64,
}

impl Oracle {
    /// Register the locks of `guard`, held by `node` in operation `op`.
    pub fn enter(&self, op: u64, node: u16, guard: &Guard) {
        for (p, m, f) in guard.fenced_locks() {
            self.register(op, node, p, m, Some(f));
        }
    }

    /// Register one lock: `op` holds `path` in `mode` on `node` (fence not known).
    pub fn register_path(&self, op: u64, node: u16, path: &str, mode: Mode) {
        self.register(op, node, path, mode, None);
    }

    /// Register one lock with its fencing token (e.g. from a client reply).
    pub fn register_fenced(&self, op: u64, node: u16, path: &str, mode: Mode, fence: u64) {
        self.register(op, node, path, mode, Some(fence));
    }

    fn register(&self, op: u64, node: u16, path: &str, mode: Mode, fence: Option<u64>) {
        let mut held = self.held.lock().expect("oracle lock");
        if let Some(f) = fence {
            // Fencing: every hold of this path in a conflicting mode that ended before this
            // one was granted (its end was registered before this grant) had a lower fence.
            if let Some(ended) = self.ended.lock().expect("oracle lock").get(path) {
                self.fence_checks.fetch_add(1, Relaxed);
                for m in Mode::REQUESTABLE {
                    match ended[m as usize] {
                        Some(e) if e >= f && !compatible(m, mode) => {
                            self.fence_regressions.fetch_add(1, Relaxed);
                            self.violations.lock().expect("oracle lock").push(format!(
                                "{path}: node {node} granted {mode} with fence {f}, not above \
                                 fence {e} of an earlier {m} hold"
                            ));
                        }
                        _ => {}
                    }
                }
            }
        }
        let v = held.entry(path.to_string()).or_default();
        for &(_, n, m, _) in v.iter().filter(|x| x.0 != op) {
            self.checks.fetch_add(1, Relaxed);
            if n == node {
                self.same_node.fetch_add(1, Relaxed);
            }
            if !compatible(m, mode) {
                self.violations.lock().expect("oracle lock").push(format!(
                    "{path}: node {node} granted {mode} while node {n} holds {m} (Table 2.1)"
                ));
            }
        }
        v.retain(|&(o, _, _, _)| o != op);
        v.push((op, node, mode, fence));
    }

    /// `op` now holds the requested path of `guard` in its mode (after an upgrade).
    pub fn change(&self, op: u64, node: u16, guard: &Guard) {
        self.register(op, node, guard.path(), guard.mode(), Some(guard.fence()));
    }

    /// Before `guard.downgrade(mode)`: from now on `op` holds the guard's path in `mode`
    /// and its ancestors in [`crate::intention`]`(mode)` (where that is weaker), with the
    /// same fences. Call it *before* the downgrade: the node lets other nodes in as soon
    /// as it starts it, so their grants, registered while the stronger modes still stood
    /// here, would read as overlaps.
    pub fn downgrade(&self, op: u64, node: u16, guard: &Guard, mode: Mode) {
        let last = guard.path();
        for (p, held, f) in guard.fenced_locks() {
            let to = if p == last {
                mode
            } else {
                crate::intention(mode)
            };
            let to = if held.downgrades_to(to) { to } else { held };
            self.register(op, node, p, to, Some(f));
        }
    }

    /// Unregister operation `op` (before its guard is dropped).
    pub fn exit(&self, op: u64) {
        let mut held = self.held.lock().expect("oracle lock");
        let mut ended = self.ended.lock().expect("oracle lock");
        for (path, v) in held.iter_mut() {
            for &(_, _, m, f) in v.iter().filter(|x| x.0 == op) {
                if let Some(f) = f {
                    let e = ended.entry(path.clone()).or_insert([None; 6]);
                    let slot = &mut e[m as usize];
                    *slot = Some(slot.map_or(f, |x| x.max(f)));
                }
            }
            v.retain(|&(o, _, _, _)| o != op);
        }
    }

    /// Grants whose fence was compared with the holds of their path that had ended.
    pub fn fence_checks(&self) -> u64 {
        self.fence_checks.load(Relaxed)
    }

    /// Fence regressions so far: grants whose fence was not above the fence of a hold of
    /// the same path, in a conflicting mode, that had ended before (each is also one of
    /// [`Oracle::violations`]). The holds are the checker's, whichever node or run of a
    /// node granted them.
    pub fn fence_regressions(&self) -> u64 {
        self.fence_regressions.load(Relaxed)
    }

    /// Pairs checked so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Relaxed)
    }

    /// Pairs checked so far whose two holds are on the same node (local sharing).
    pub fn same_node_checks(&self) -> u64 {
        self.same_node.load(Relaxed)
    }

    /// Violations found so far.
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().expect("oracle lock").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_flags_exactly_the_pairs_table_2_1_forbids() {
        let o = Oracle::default();
        o.register_path(1, 0, "/t", Mode::IR);
        o.register_path(2, 1, "/t", Mode::IW);
        o.register_path(3, 2, "/t", Mode::U); // U conflicts with IW (Table 2.1)
        assert_eq!(o.violations().len(), 1, "{:?}", o.violations());
        assert!(o.violations()[0].contains("node 2 granted U while node 1 holds IW"));
        o.exit(2);
        o.exit(3);
        o.register_path(4, 1, "/t", Mode::R); // R with IR: fine
        o.register_path(5, 3, "/u", Mode::W); // another path: fine
        assert_eq!(o.violations().len(), 1);
        o.register_path(4, 1, "/t", Mode::W); // op 4 upgrades over op 1's IR
        assert_eq!(o.violations().len(), 2);
        assert_eq!(o.checks(), 2 + 1 + 2);
    }

    #[test]
    fn oracle_flags_a_fence_not_above_an_ended_conflicting_hold() {
        let o = Oracle::default();
        o.register(1, 0, "/t", Mode::W, Some(5));
        o.exit(1);
        o.register(2, 1, "/t", Mode::R, Some(6)); // above the W: fine
        o.register(3, 2, "/t", Mode::R, Some(6)); // shares R's fence: compatible, fine
        o.register(4, 0, "/u", Mode::W, Some(1)); // another path: fine
        assert_eq!(o.violations(), Vec::<String>::new());
        o.exit(2);
        o.exit(3);
        o.register(5, 1, "/t", Mode::IR, Some(7)); // IR is compatible with R: fine
        assert_eq!(o.violations(), Vec::<String>::new());
        o.exit(5);
        o.register(6, 2, "/t", Mode::W, Some(7)); // W after IR with the same fence
        assert_eq!(o.violations().len(), 1, "{:?}", o.violations());
        assert!(o.violations()[0].contains("fence 7, not above fence 7 of an earlier IR hold"));
        assert_eq!(o.fence_checks(), 4);
        assert_eq!(o.fence_regressions(), 1);
    }
}
