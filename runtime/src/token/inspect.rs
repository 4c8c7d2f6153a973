//! How a node answers `hilock status`: it asks its core task for the locks, probes its
//! peers and reads its lease (the shapes it answers with are in `status.rs`).

use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::oneshot;

use super::core::Cmd;
use super::status::{CoreState, LeaseStatus, PeerStatus, Status, PROBE_WAIT};
use super::{Error, Handle, NodeLease};

/// The lease as `hilock status` shows it at `now`.
fn lease_status(l: &NodeLease, now: tokio::time::Instant) -> LeaseStatus {
    match l {
        NodeLease::Static => LeaseStatus {
            state: "none".into(),
            ..LeaseStatus::default()
        },
        NodeLease::Valid { until, lease, .. } => {
            let (state, reason) = match l.check(now) {
                Ok(()) => ("held", None),
                Err(r) => ("expired", Some(r)),
            };
            LeaseStatus {
                state: state.into(),
                id: Some(format!("{lease:#x}")),
                left_ms: Some(
                    u64::try_from(until.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX),
                ),
                reason,
            }
        }
        NodeLease::Lost { reason } => LeaseStatus {
            state: "lost".into(),
            reason: Some(reason.clone()),
            ..LeaseStatus::default()
        },
    }
}

impl Handle {
    /// Whether the node grants now, and why not: its lease first, then the core's state.
    pub(super) fn serving(&self, lease: &NodeLease, core: &CoreState) -> (bool, Option<String>) {
        let why = match lease.check(tokio::time::Instant::now()) {
            Err(r) => Some(r),
            Ok(()) => core.not_serving.clone(),
        };
        (why.is_none(), why)
    }

    /// The core's state (the metrics endpoint).
    pub(super) async fn core_state(&self) -> Result<CoreState, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Summary { reply })
            .map_err(|_| Error::Stopped)?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// Locks, peers and counters. Every peer with an open connection is probed for this
    /// call; the answer takes at most [`PROBE_WAIT`] longer when one does not answer.
    pub async fn status(&self) -> Result<Status, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Status { reply })
            .map_err(|_| Error::Stopped)?;
        let (locks, core) = rx.await.map_err(|_| Error::Stopped)?;
        let s = &self.shared;
        let lease = s.lease.borrow().clone();
        let (serving, not_serving) = self.serving(&lease, &core);
        let deadline = tokio::time::Instant::now() + PROBE_WAIT;
        // One snapshot per peer, taken as soon as its probe has ended: `connected` only
        // when the probe was answered on the connection that is still up now.
        let peers = s.peers.iter().enumerate().filter_map(|(i, p)| {
            p.as_ref().map(|p| async move {
                let answered = p.refused().is_none() && p.probe(deadline).await;
                let open = p.connected.load(Relaxed) || p.silent.load(Relaxed);
                let refused = p.refused();
                let connected = answered && refused.is_none();
                PeerStatus {
                    id: i as u16,
                    addr: p.addr.to_string(),
                    connected,
                    incoming: p.incoming.load(Relaxed),
                    state: match refused {
                        Some(r) => format!("refused: {r}"),
                        None if connected => "connected".into(),
                        None if open => p.not_answering(),
                        None => "reconnecting".into(),
                    },
                    frames_sent: p.sent.load(Relaxed),
                    frames_received: p.received.load(Relaxed),
                    resent: p.resent.load(Relaxed),
                    duplicates: p.duplicates.load(Relaxed),
                    reconnects: p.connections.load(Relaxed).saturating_sub(1),
                }
            })
        });
        let peers = futures_util::future::join_all(peers).await;
        Ok(Status {
            id: s.id,
            cluster: s.cluster.clone(),
            listen: s.listen.to_string(),
            membership: if lease == NodeLease::Static {
                "static"
            } else {
                "etcd"
            }
            .into(),
            recovery: s.recovery,
            run: format!("{:016x}", s.incarnation),
            resumed: s.resumed,
            epoch: core.epoch,
            lease: lease_status(&lease, tokio::time::Instant::now()),
            serving,
            not_serving,
            tokens_held: core.tokens,
            metrics: s.metrics_addr.map(|a| format!("http://{a}/metrics")),
            peers,
            stats: self.stats(),
            agents: self.agent_stats(),
            txn_entries: self.agent_entries().await.map_or(0, |e| e.len()),
            locks,
        })
    }
}
