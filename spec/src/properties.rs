//! The tree invariants as functions over a slice of kernel sites, written once and checked by
//! the model checker (`hilock_models::base`, as P3 and P3b), the scenario runner (after every
//! step) and the robustness tests.
//!
//! `quiet(c, p, lock)` tells whether the link between child `c` and its parent `p` is quiet
//! for the lock, in the sense each property states (the caller owns the network).

use hilock_kernel::tables::{grantable_set, table_2_1};
use hilock_kernel::{LockId, Mode, Site};

/// Every mode that conflicts with `owned` also conflicts with `record`, and `record` is at
/// least as strong (literal Table 2.1).
pub fn covers(record: Mode, owned: Mode) -> bool {
    owned == Mode::Phi
        || (record.at_least(owned)
            && Mode::REQUESTABLE
                .iter()
                .all(|m| !table_2_1(owned, *m) || table_2_1(record, *m)))
}

/// Every (lock, child, parent) of a non-token node whose link is quiet.
fn quiet_links<const N: usize, const L: usize, const Q: usize>(
    sites: &[Site<N, L, Q>],
    locks: usize,
    quiet: impl Fn(usize, usize, usize) -> bool,
) -> Vec<(usize, usize, usize)> {
    let mut links = Vec::new();
    for l in 0..locks.min(L) {
        for (c, s) in sites.iter().enumerate() {
            let node = &s.locks()[l];
            let Some(p) = node.parent() else { continue };
            let p = p.idx();
            if !node.has_token() && p < sites.len() && quiet(c, p, l) {
                links.push((l, c, p));
            }
        }
    }
    links
}

/// P3, invariant 2.2: for every lock and every non-token node `c` with parent `p` whose link
/// is quiet (no `Release`, `Grant` or `Token` of the lock in flight either way), `p`'s record
/// of `c` equals `c`'s owned mode (`exact`, FIFO channels) or covers it (`!exact`: the
/// unordered network, where a release can overtake the grant it follows).
pub fn owned_records<const N: usize, const L: usize, const Q: usize>(
    sites: &[Site<N, L, Q>],
    locks: usize,
    exact: bool,
    quiet: impl Fn(usize, usize, usize) -> bool,
) -> Result<(), String> {
    for (l, c, p) in quiet_links(sites, locks, quiet) {
        let node = &sites[c].locks()[l];
        let record = sites[p].locks()[l].peers()[c].child_owned;
        let owned = node.owned();
        let ok = if exact {
            record == owned
        } else {
            covers(record, owned)
        };
        if !ok {
            return Err(format!(
                "P3 owned-mode invariant on {}: n{p} records n{c} as {record}, n{c} owns {owned}",
                LockId(l as u16)
            ));
        }
    }
    Ok(())
}

/// P3b, invariant 2.3: for every lock and every child `c` of `p` (non-Φ record) whose link
/// is quiet (no message of the lock in flight either way), every mode `p` has frozen that
/// `c` could grant is frozen at `c` with at least `p`'s threshold. Stated for FIFO channels.
pub fn frozen_reach_children<const N: usize, const L: usize, const Q: usize>(
    sites: &[Site<N, L, Q>],
    locks: usize,
    quiet: impl Fn(usize, usize, usize) -> bool,
) -> Result<(), String> {
    for (l, c, p) in quiet_links(sites, locks, quiet) {
        let node = &sites[c].locks()[l];
        let parent = &sites[p].locks()[l];
        let record = parent.peers()[c].child_owned;
        if record == Mode::Phi {
            continue;
        }
        let missing = parent
            .frozen_thresholds()
            .restrict(grantable_set(record))
            .beyond(node.frozen_thresholds());
        if !missing.is_empty() {
            return Err(format!(
                "P3b frozen-mode invariant on {}: n{p} froze {} that n{c} (recorded {record}) could grant, n{c} has frozen only {}",
                LockId(l as u16),
                missing.modes(),
                node.frozen()
            ));
        }
    }
    Ok(())
}
