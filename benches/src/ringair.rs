//! The airline workload of the simulator ([`crate::token`]) on the ring engine (the Chord lock paper,
//! hilock's replicated variant, r = 2), for the token engine / ring engine comparison of
//! `docs/benchmarks.md`, "Airline workload: token engine against the ring (simulator)".
//!
//! - **Sites.** [`RingSite`] (`hilock_harness::engines::ring`: a kernel `RingServer` and a
//!   kernel `ChordClient` at each node) behind the kernel's
//!   [`Protocol`](hilock_kernel::Protocol) interface, so that the one harness
//!   ([`hilock_harness::Cluster`]) routes and delivers its messages and checks mutual
//!   exclusion ([`hilock_harness::Cluster::check_exclusive`]) after every grant.
//! - **Workload and timing.** The simulator's own timing loop ([`token::run_sites`]): its
//!   [`Config`], per-node random streams, access draw, per-pair FIFO latencies and
//!   measurement window, so each node makes the same sequence of accesses as in
//!   [`crate::token`]. The ring's locks are exclusive only (no modes), so an access locks
//!   what the simulator's Naimi-Trehel *same work* locks under `cfg.mix` (with
//!   [`token::Mix::EntryIntention`], the published tables: IR and IW one entry's lock, R, U
//!   and W every entry lock in a fixed order). Entry `e` is the lock `/airline-entry-<e>`.
//!   Mutual exclusion is checked after every grant ([`Driven::CHECK_EXCLUSIVE`]).
//! - **Polls.** The seed's lock does not queue: a refused lock is asked again one mean
//!   message latency later ([`Driven::wants_poll`], then the poll input); each poll is a
//!   request and an answer, counted.

use crate::token::{self, Config, Driven, Proto, RelayClass, Requester, ENTRIES};
use hilock_harness::engines::ring::{RingMsg, RingSite, SLOTS};
use hilock_kernel::ring::ChordMsg;
use hilock_kernel::{LockId, NodeId};

// The site serves the simulator's entries, one lock each.
const _: () = assert!(hilock_harness::engines::ring::ENTRIES == ENTRIES);

/// What a ring run measured (the window as in [`crate::token::Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Accesses completed in the window.
    pub accesses: u64,
    /// Lock requests (`Acquire` inputs) issued in the window.
    pub lock_requests: u64,
    /// Messages sent in the window: client requests, answers, replication writes,
    /// replication acknowledgements, other.
    pub msgs: [u64; 5],
    /// Sum (µs) and count of access latencies (issue to entering the CS).
    pub lat: (u64, u64),
    /// Refused locks asked again (whole run).
    pub polls: u64,
    /// Grants after which mutual exclusion was checked.
    pub checked_grants: u64,
    /// Simulated window (µs).
    pub window_us: u64,
}

impl RingStats {
    /// All messages in the window.
    pub fn messages(&self) -> u64 {
        self.msgs.iter().sum()
    }
    /// Messages per access.
    pub fn per_access(&self) -> f64 {
        self.messages() as f64 / self.accesses.max(1) as f64
    }
    /// Messages per lock request.
    pub fn per_request(&self) -> f64 {
        self.messages() as f64 / self.lock_requests.max(1) as f64
    }
    /// Mean access latency (ms).
    pub fn mean_latency_ms(&self) -> f64 {
        self.lat.0 as f64 / self.lat.1.max(1) as f64 / 1000.0
    }
}

/// Names of [`RingStats::msgs`].
pub const RING_KINDS: [&str; 5] = ["request", "answer", "replicate", "replica-ack", "other"];

fn ring_kind(m: &RingMsg) -> usize {
    match m {
        ChordMsg::Request { .. } => 0,
        ChordMsg::Reply { .. } => 1,
        ChordMsg::Replicate { .. } => 2,
        ChordMsg::ReplicaAck { .. } => 3,
        _ => 4,
    }
}

impl Requester for RingMsg {
    fn requester(&self) -> Option<NodeId> {
        None
    }
}

impl RelayClass for RingSite {
    fn relay_class(&self, _lock: LockId) -> usize {
        3
    }
}

impl Driven for RingSite {
    fn stat_kind(msg: &RingMsg) -> usize {
        ring_kind(msg)
    }
    fn wants_poll(&self) -> Option<LockId> {
        RingSite::wants_poll(self)
    }
    const CHECK_EXCLUSIVE: bool = true;
}

/// Runs the airline workload of `cfg` on the ring engine with `cfg.n` nodes (at most
/// [`SLOTS`]), in the simulator's timing loop ([`token::run_sites`]). `cfg.proto` is
/// ignored: an access locks what Naimi-Trehel *same work* locks under `cfg.mix`.
pub fn run(cfg: &Config) -> Result<RingStats, String> {
    let n = cfg.n;
    if !(3..=SLOTS).contains(&n) {
        return Err(format!(
            "ring engine: n = {n}, need 3 ≤ n ≤ {SLOTS} (r = 2)"
        ));
    }
    let sites = (0..n)
        .map(|i| RingSite::new(i, n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let cfg = Config {
        proto: Proto::NaimiSame,
        ..*cfg
    };
    let (st, cluster) = token::run_sites(&cfg, sites).map_err(|e| format!("ring {e}"))?;
    Ok(RingStats {
        accesses: st.accesses,
        lock_requests: st.lock_requests,
        msgs: st.msgs,
        lat: st
            .lat_mode
            .iter()
            .fold((0, 0), |(s, c), (a, b)| (s + a, c + b)),
        polls: cluster.sites().map(|s| s.polls()).sum(),
        checked_grants: st.checked_grants,
        window_us: st.window_us,
    })
}
