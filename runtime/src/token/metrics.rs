//! The node's metrics in the Prometheus (OpenMetrics) text format, and the small HTTP
//! endpoint that serves them (`metrics_addr` in the configuration; `GET /metrics`).
//!
//! The counters are the node's own (plain atomics on the hot paths, `super::Counters`);
//! each scrape copies them, with gauges read at that moment (lease, epoch, serving,
//! tokens, queues, peers, clients), into a fresh `prometheus_client` registry and encodes
//! it. Every name starts with `hilock_` and carries the label `node` (the node id);
//! `docs/operations.md` lists them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::{Handle, NodeLease, MSG_KINDS};

/// The media type of [`Handle::metrics`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a scrape's connection may take to send its request.
const REQUEST_WAIT: Duration = Duration::from_secs(5);

/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// How long a scrape waits for the core task's sums (locks, tokens, queues) before it
/// answers without them.
const CORE_WAIT: Duration = Duration::from_secs(1);

type Labels = Vec<(String, String)>;

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    let c: Counter = Counter::default();
    c.inc_by(v);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    let g: Gauge = Gauge::default();
    g.set(v);
    r.register(name, help, g);
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Handle {
    /// The node's metrics in the OpenMetrics text format ([`CONTENT_TYPE`]), as its
    /// `metrics_addr` endpoint serves them.
    pub async fn metrics(&self) -> String {
        let s = &self.shared;
        let c = &s.counters;
        let mut r = Registry::with_prefix_and_labels(
            "hilock",
            [("node".into(), s.id.to_string().into())].into_iter(),
        );
        counter(
            &mut r,
            "grants",
            "Grants delivered to callers (local sharing included)",
            c.grants.load(Relaxed),
        );
        counter(
            &mut r,
            "waits",
            "Lock requests (one per lock of a hierarchy) not granted on the spot",
            c.waits.load(Relaxed),
        );
        counter(
            &mut r,
            "timeouts",
            "Lock requests that timed out",
            c.timeouts.load(Relaxed),
        );
        counter(
            &mut r,
            "kernel_requests",
            "Kernel requests issued (acquires and upgrades)",
            c.kernel_requests.load(Relaxed),
        );
        counter(
            &mut r,
            "abandoned_grants",
            "Grants that arrived for callers that had given up, released at once",
            c.abandoned_grants.load(Relaxed),
        );
        counter(
            &mut r,
            "cancels",
            "Kernel requests cancelled because their caller gave up",
            c.cancels.load(Relaxed),
        );
        let sent = Family::<Labels, Counter>::default();
        let received = Family::<Labels, Counter>::default();
        for (i, kind) in MSG_KINDS.iter().enumerate() {
            let l = vec![("kind".to_string(), kind.to_string())];
            sent.get_or_create(&l)
                .inc_by(c.sent_by_kind[i].load(Relaxed));
            received
                .get_or_create(&l)
                .inc_by(c.received_by_kind[i].load(Relaxed));
        }
        r.register(
            "messages_sent",
            "Protocol messages sent to peers, by kind",
            sent,
        );
        r.register(
            "messages_received",
            "Protocol messages received from peers and delivered, by kind",
            received,
        );
        counter(
            &mut r,
            "rejected_connections",
            "Peer connections closed for bad input (handshake or frame)",
            c.rejected_connections.load(Relaxed),
        );
        counter(
            &mut r,
            "cut_connections",
            "Peer connections that went away (closed, reset, silent) rather than sent bad input",
            c.cut_connections.load(Relaxed),
        );
        counter(
            &mut r,
            "kernel_rejections",
            "Delivered messages the kernel refused",
            c.kernel_rejections.load(Relaxed),
        );
        counter(
            &mut r,
            "stale_epoch_messages",
            "Delivered messages of an earlier epoch, dropped",
            c.stale_epoch.load(Relaxed),
        );
        counter(
            &mut r,
            "held_back_full",
            "Peer connections closed because etcd_held_back_max messages were unread",
            c.held_back_full.load(Relaxed),
        );
        counter(
            &mut r,
            "lease_renewals",
            "Renewals of this node's etcd lease",
            c.lease_renewals.load(Relaxed),
        );
        counter(
            &mut r,
            "lease_losses",
            "Losses of this node's etcd lease",
            c.lease_losses.load(Relaxed),
        );
        counter(
            &mut r,
            "recoveries",
            "Epochs installed by recovery (locks of members that left rebuilt)",
            c.epochs_installed.load(Relaxed),
        );
        counter(
            &mut r,
            "peers_gone",
            "Peers seen leave the cluster (etcd lease ended)",
            c.peers_gone.load(Relaxed),
        );
        counter(
            &mut r,
            "clients_refused",
            "Client connections refused (too many clients)",
            c.clients_refused.load(Relaxed),
        );
        counter(
            &mut r,
            "accept_errors",
            "Failed accepts of client and peer connections",
            c.accept_errors.load(Relaxed),
        );
        gauge(
            &mut r,
            "clients",
            "Client connections served now",
            i64::try_from(c.clients.load(Relaxed)).unwrap_or(i64::MAX),
        );
        let reconnects = Family::<Labels, Counter>::default();
        let up = Family::<Labels, Gauge>::default();
        for (i, p) in s.peers.iter().enumerate() {
            let Some(p) = p else { continue };
            let l = vec![("peer".to_string(), i.to_string())];
            reconnects
                .get_or_create(&l)
                .inc_by(p.connections.load(Relaxed).saturating_sub(1));
            let ok = p.connected.load(Relaxed) && p.refused().is_none();
            up.get_or_create(&l).set(i64::from(ok));
        }
        r.register(
            "peer_reconnects",
            "Connections to a peer made again after one was lost",
            reconnects,
        );
        r.register(
            "peer_up",
            "1 while this node's connection to the peer works (handshake done, answering)",
            up,
        );
        let lease = s.lease.borrow().clone();
        let now = tokio::time::Instant::now();
        if let NodeLease::Valid { until, .. } = &lease {
            let left: Gauge<f64, AtomicU64> = Gauge::default();
            left.set(until.saturating_duration_since(now).as_secs_f64());
            r.register(
                "lease_left_seconds",
                "Seconds until this node's local etcd lease ends unless renewed",
                left,
            );
        }
        gauge(
            &mut r,
            "lease_held",
            "1 while this node holds a valid etcd lease (membership through etcd)",
            i64::from(matches!(lease, NodeLease::Valid { .. }) && lease.check(now).is_ok()),
        );
        let core = tokio::time::timeout(CORE_WAIT, self.core_state()).await;
        if let Ok(Ok(core)) = core {
            let (serving, _) = self.serving(&lease, &core);
            gauge(
                &mut r,
                "serving",
                "1 while the node grants locks",
                i64::from(serving),
            );
            gauge(
                &mut r,
                "epoch",
                "The installed epoch (recovery)",
                i64::from(core.epoch),
            );
            gauge(&mut r, "locks", "Locks this node knows", count(core.locks));
            gauge(
                &mut r,
                "tokens_held",
                "Locks whose token is at this node",
                count(core.tokens),
            );
            gauge(&mut r, "holders", "Local holders", count(core.holders));
            gauge(
                &mut r,
                "waiters",
                "Local callers waiting",
                count(core.waiters),
            );
            gauge(
                &mut r,
                "queue_length",
                "Requests queued at this node's tokens (every node's)",
                count(core.queued),
            );
        }
        self.agent_metrics(&mut r).await;
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &r) {
            warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

impl Handle {
    /// The agents engine's counters (`hilock lock --txn` transactions of this node, its
    /// agents' and its lock server's work) and its lock server's entries now.
    async fn agent_metrics(&self, r: &mut Registry) {
        let a = self.agent_stats();
        counter(
            r,
            "agents_transactions_begun",
            "Transactions (hilock lock --txn) begun at this node",
            a.begun,
        );
        let ended = Family::<Labels, Counter>::default();
        for (outcome, v) in [
            ("committed", a.committed),
            ("deadlock", a.aborted_deadlock),
            ("servers_down", a.aborted_server_down),
            ("other", a.aborted_other),
        ] {
            ended
                .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
                .inc_by(v);
        }
        r.register(
            "agents_transactions_ended",
            "Transactions of this node ended, by outcome (committed, or aborted and why)",
            ended,
        );
        for (name, help, v) in [
            (
                "agents_surrenders",
                "Surrenders this node's agents decided on (rule A5)",
                a.surrenders,
            ),
            (
                "agents_surrenders_applied",
                "Surrenders this node's lock server applied",
                a.surrenders_done,
            ),
            (
                "agents_surrenders_refused",
                "Surrenders this node's lock server refused (nothing held there any more)",
                a.surrenders_refused,
            ),
            (
                "agents_revoked",
                "Locks reported to a client and later surrendered",
                a.revoked,
            ),
            (
                "agents_forwards",
                "Agent steps that forwarded dependency information (rule A7)",
                a.forwards,
            ),
            (
                "agents_frames_sent",
                "Agents frames sent to other nodes",
                a.frames_sent,
            ),
            (
                "agents_frames_received",
                "Agents frames received from other nodes",
                a.frames_received,
            ),
            (
                "agents_local_messages",
                "Messages between this node's lock server and its agents",
                a.local_messages,
            ),
            (
                "agents_peers_released",
                "Lock server entries released because their node was unreachable",
                a.peers_released,
            ),
        ] {
            counter(r, name, help, v);
        }
        if let Ok(Ok(e)) = tokio::time::timeout(CORE_WAIT, self.agent_entries()).await {
            gauge(
                r,
                "agents_entries",
                "Entries (granted or waiting) in this node's agents lock server",
                count(e.len()),
            );
        }
    }
}

/// Serves `GET /metrics` on `listener` until the node stops.
pub(super) async fn serve(node: Handle, listener: TcpListener) {
    let mut conns = tokio::task::JoinSet::new();
    let mut stop = node.stopping();
    let mut failed = 0u64;
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => { conns.spawn(answer(node.clone(), s)); }
                Err(e) => {
                    failed += 1;
                    node.shared.counters.accept_errors.fetch_add(1, Relaxed);
                    if failed.is_power_of_two() {
                        warn!(error = %e, failed, "cannot accept a metrics connection (logged for the 1st, 2nd, 4th ... failure)");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
        }
    }
}

/// One HTTP request on `s`: the metrics for `GET /metrics` (or `/`), an error status
/// otherwise; the connection is closed after the answer.
async fn answer(node: Handle, mut s: TcpStream) {
    let mut head = Vec::new();
    let read = tokio::time::timeout(REQUEST_WAIT, async {
        let mut buf = [0u8; 1024];
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(true);
            }
        }
    })
    .await;
    if !matches!(read, Ok(Ok(true))) {
        debug!("metrics connection closed before a request");
        return;
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_ascii_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics" | "/") => ("200 OK", CONTENT_TYPE, node.metrics().await),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(reply.as_bytes()).await;
    let _ = s.shutdown().await;
}
