//! The peer channels: the sending side of each link (dial, number, keep until
//! acknowledged, resend after a reconnect, notice a silent peer) and the receiving side
//! (accept, deliver in order exactly once, acknowledge, heartbeat).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hilock_kernel::NodeId;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracing::{debug, info, warn};

use super::core::Cmd;
use super::handshake::{connect, handshake_accept, is_cut, ConnectError, MAX_PENDING_HANDSHAKES};
use super::transport::{Listener, Stream};
use super::Shared;
use crate::wire::{self, check_frame, codec, Hello};

/// The receiving side of the channel from one peer.
#[derive(Default)]
pub(super) struct Inbound {
    /// The run (incarnation) of the peer this node knows, from either direction's handshake.
    pub(super) incarnation: Option<u64>,
    /// Messages of that run delivered to the core (the last number).
    pub(super) delivered: u64,
    /// Counts accepted connections from the peer: only the newest one delivers.
    pub(super) conn: u64,
}

/// The sending side's state of the channel to one peer: the number of the next message
/// and the messages sent but not acknowledged, oldest first, with their numbers. Kept in
/// the link (not in the dialing task) so that a suspending node can save it
/// ([`Node::suspend`](super::Node::suspend)).
#[derive(Debug)]
pub(super) struct Outbox {
    pub(super) next_seq: u64,
    pub(super) unacked: VecDeque<(u64, Bytes)>,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            next_seq: 1,
            unacked: VecDeque::new(),
        }
    }
}

pub(super) struct PeerLink {
    pub(super) addr: SocketAddr,
    /// This node's connection to the peer is up (handshake done, not seen closed).
    pub(super) connected: AtomicBool,
    /// A connection from the peer is up.
    pub(super) incoming: AtomicBool,
    pub(super) sent: AtomicU64,
    /// Messages the peer has acknowledged (the channel's last delivered number).
    pub(super) acked: AtomicU64,
    pub(super) received: AtomicU64,
    pub(super) resent: AtomicU64,
    pub(super) duplicates: AtomicU64,
    pub(super) dropped: AtomicU64,
    /// The peer has welcomed this node's run at least once.
    pub(super) welcomed: AtomicBool,
    /// The connection to the peer is open but the peer has not answered for
    /// [`SILENT_AFTER`] — or this node gave that connection up for its silence
    /// ([`REDIAL_AFTER`]) and has no new one yet.
    pub(super) silent: AtomicBool,
    pub(super) inbound: std::sync::Mutex<Inbound>,
    pub(super) refused: std::sync::Mutex<Option<String>>,
    /// When this node last lost its working connection to the peer (`None` while it has
    /// one, or before the first).
    pub(super) down_since: std::sync::Mutex<Option<Instant>>,
    /// Why the last attempt to connect to the peer failed (`None` after a success): told
    /// in [`PeerLink::describe`], so that a timeout names a wrong secret or a refused port.
    pub(super) last_failure: std::sync::Mutex<Option<String>>,
    pub(super) tx: mpsc::UnboundedSender<Bytes>,
    /// The messages given to `tx` that the dialing task has not numbered yet: the dialing
    /// task holds the lock while it runs; a suspending node reads what is left once the
    /// task has stopped.
    pub(super) rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<Bytes>>,
    /// Numbered messages: the next number and those not acknowledged yet.
    pub(super) out: std::sync::Mutex<Outbox>,
    /// When this node last heard from the peer on its connection (the Welcome or an
    /// acknowledgement).
    pub(super) heard: std::sync::Mutex<Option<Instant>>,
    /// Probes asked for ([`PeerLink::probe`]): the newest probe's number.
    pub(super) pings: AtomicU64,
    /// Wakes the dialing task to send a probe.
    pub(super) ping_now: tokio::sync::Notify,
    /// The newest probe the peer has answered, and how many of this node's connections
    /// to it have been lost (a probe stops waiting when its connection is lost).
    pub(super) pong: tokio::sync::watch::Sender<(u64, u64)>,
    /// Connections this node has made to the peer (handshake done); all but the first
    /// are reconnects.
    pub(super) connections: AtomicU64,
    /// Counts the runs of the peer this link has been switched to ([`Shared::adopt_run`]):
    /// the dialing task starts its numbering afresh when it changes.
    pub(super) run_gen: AtomicU64,
}

impl PeerLink {
    pub(super) fn refused(&self) -> Option<String> {
        self.refused.lock().expect("refused lock").clone()
    }

    /// The working connection is gone since `at` (closed, or the peer went silent).
    pub(super) fn went_down(&self, at: Instant) {
        self.down_since
            .lock()
            .expect("down_since lock")
            .get_or_insert(at);
    }

    pub(super) fn came_up(&self) {
        *self.down_since.lock().expect("down_since lock") = None;
        *self.last_failure.lock().expect("last_failure lock") = None;
    }

    /// The last attempt to connect failed for `why`.
    fn failed(&self, why: &str) {
        *self.last_failure.lock().expect("last_failure lock") = Some(why.to_string());
    }

    /// The peer's state for people: connected, not answering for how long, unreachable
    /// for how long, never reached, or refused.
    pub(super) fn describe(&self, id: u16) -> String {
        if let Some(r) = self.refused() {
            return format!("node {id} is refused ({r})");
        }
        let since = *self.down_since.lock().expect("down_since lock");
        if self.connected.load(Relaxed) {
            format!("node {id} is connected")
        } else if self.silent.load(Relaxed) {
            let t = since.map_or(Duration::ZERO, |s| s.elapsed());
            format!("node {id} has not answered for {t:.1?} (stopped, hung or cut off)")
        } else {
            let last = match self
                .last_failure
                .lock()
                .expect("last_failure lock")
                .as_deref()
            {
                Some(why) => format!("; last attempt: {why}"),
                None => String::new(),
            };
            match since {
                Some(s) => format!(
                    "node {id} is unreachable for {:.1?} (reconnecting{last})",
                    s.elapsed()
                ),
                None if last.is_empty() => format!("node {id} has not been reached yet"),
                None => format!("node {id} has not been reached yet ({})", &last[2..]),
            }
        }
    }

    /// Whether the peer answers, before `deadline`, a probe sent on this node's current
    /// connection to it, *on that connection*: `true` only if the connection is up, the
    /// peer acknowledges a probe sent after this call began, and that connection has not
    /// been lost (nor the peer gone silent) when this returns. A connection replaced while
    /// waiting is probed again (until `deadline`); a connection that is down gives `false`
    /// at once. Only a real answer counts: nothing here marks the peer as answering.
    pub(super) async fn probe(&self, deadline: Instant) -> bool {
        let mut pong = self.pong.subscribe();
        loop {
            // The connection after `lost` losses; `connected` is stored (Release) after the
            // count of losses grew, so a later connection's `true` shows a larger count.
            let lost = pong.borrow_and_update().1;
            if !self.connected.load(Acquire) {
                return false;
            }
            let id = self.pings.fetch_add(1, Relaxed) + 1;
            self.ping_now.notify_one();
            let r = match tokio::time::timeout_at(
                deadline,
                pong.wait_for(|&(p, l)| p >= id || l != lost),
            )
            .await
            {
                Ok(Ok(r)) => *r,
                _ => return false,
            };
            if r.1 != lost {
                continue; // that connection was lost: probe the next one, if any
            }
            return self.connected.load(Acquire) && self.pong.borrow().1 == lost;
        }
    }

    /// How long ago this node last heard from the peer, for people.
    pub(super) fn not_answering(&self) -> String {
        match *self.heard.lock().expect("heard lock") {
            Some(t) => format!(
                "not answering (last heard {} ms ago)",
                t.elapsed().as_millis()
            ),
            None => "not answering (never heard)".into(),
        }
    }

    /// The link's outbound state.
    pub(super) fn outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.out.lock().expect("outbox lock")
    }

    pub(super) fn refuse(&self, reason: String) {
        self.refused
            .lock()
            .expect("refused lock")
            .get_or_insert(reason);
    }
}

impl Shared {
    /// Recovery (`etcd_recovery`): a peer this node knew as run `known` is now run `run`.
    /// The new run is let onto the link only if it holds the peer's member key in etcd —
    /// then the old run's lease has ended, and by the lease rule (`docs/faults.md`, "The
    /// recovery mechanism", "Leases: kill before regrant") the old run grants nothing and
    /// its holders are dead. The receiving side starts afresh (nothing of the new run
    /// delivered yet; a connection of the old run delivers nothing more) and the sending
    /// side drops what the old run had not acknowledged and numbers from 1
    /// ([`PeerLink::run_gen`]). Everything the kernel sent to the old run is stamped with
    /// an epoch the new run has not installed: it refuses it (`StaleEpoch`). Call with the
    /// link's inbound lock held (`inb`). `Err`: why the run is not let in (yet).
    pub(super) fn adopt_run(
        &self,
        peer: u16,
        link: &PeerLink,
        inb: &mut Inbound,
        run: u64,
    ) -> Result<(), String> {
        let known = inb.incarnation.unwrap_or(0);
        let holds_key = self.etcd_runs.lock().expect("etcd_runs lock").get(&peer) == Some(&run);
        if !(self.recovery && holds_key) {
            return Err(format!(
                "node {} knew an earlier run of node {peer} (run {known:016x}; this is {run:016x}); \
                 {}",
                self.id,
                if self.recovery {
                    "this run does not hold its member key in etcd yet (try again)".to_string()
                } else {
                    format!(
                        "the protocol cannot take back the old run's tokens and copies: \
                         {}",
                        super::RESTART_ALL
                    )
                }
            ));
        }
        inb.incarnation = Some(run);
        inb.delivered = 0;
        inb.conn += 1;
        link.run_gen.fetch_add(1, Relaxed);
        // The agents engine hears of it before any frame of the new run (same queue).
        self.agents.peer_restarted(peer);
        info!(
            peer,
            old = format!("{known:016x}"),
            new = format!("{run:016x}"),
            "a new run of the peer replaces its old run on the link (recovery)"
        );
        Ok(())
    }
}

/// How long a stopping node waits for its peers to acknowledge the messages that hand its
/// released locks over ([`Node::shutdown`](super::Node::shutdown)).
pub const HAND_OVER: Duration = Duration::from_millis(100);

/// How long the acceptor may hold back an acknowledgement.
const ACK_DELAY: Duration = Duration::from_millis(5);

/// Acknowledge at once when this many messages are unacknowledged.
const ACK_EVERY: u64 = 64;

/// The acceptor acknowledges at least this often, traffic or not (a heartbeat).
pub const HEARTBEAT: Duration = Duration::from_millis(200);

/// A peer whose connection stays open but that has not acknowledged anything for this
/// long (stopped, hung, or its network gone silently) is shown as not connected.
pub const SILENT_AFTER: Duration = Duration::from_secs(1);

/// A connection to a peer on which no acknowledgement has taken a message off this node's
/// unacknowledged ones (or found none waiting) for this long, or on which a write has
/// waited this long, is given up: the dialer drops it and reconnects, and the reconnect
/// resends everything not acknowledged. A connection whose segments the network dropped (a
/// NAT or firewall that forgot the flow, a cut link, a half-open connection to a host that
/// rebooted) would otherwise carry nothing until the kernel's retransmission timeout,
/// about 15 minutes, even after the network has healed. 3 s is 15 heartbeats
/// ([`HEARTBEAT`], 200 ms) and 3 × [`SILENT_AFTER`]: a peer shown as not answering is given
/// two more seconds on its connection (a stall whose bytes TCP keeps, a short pause, a
/// loaded machine) before the connection is given up; a connection given up too early
/// costs a handshake and a resend, never a message (`wire.rs`, "Lossless channel").
pub const REDIAL_AFTER: Duration = Duration::from_secs(3);

/// A message for the refused `peer` that it will never receive: if it is a lock request
/// (`Request`, `TryRequest`), the core tells its requester ([`Cmd::LostRequest`]).
fn lost_requests(peer: u16, b: &[u8], core: &mpsc::UnboundedSender<Cmd>) {
    let frame = match wire::decode::<wire::Payload>(b) {
        Ok(wire::Payload::Token(f) | wire::Payload::Stamped(_, f)) => f,
        _ => return,
    };
    if let hilock_kernel::Msg::Request { entry, .. }
    | hilock_kernel::Msg::TryRequest { entry, .. } = frame.msg
    {
        let _ = core.send(Cmd::LostRequest {
            path: frame.path,
            peer,
            requester: entry.requester,
            serial: entry.serial,
        });
    }
}

/// The sending side of the link to `peer`: connect (with backoff), authenticate, send
/// numbered messages, keep them until acknowledged, resend after a reconnect.
pub(super) async fn dial(shared: Arc<Shared>, peer: u16, core: mpsc::UnboundedSender<Cmd>) {
    let link = shared.peers[usize::from(peer)]
        .as_ref()
        .expect("dial only peers");
    let mut rx = link.rx.lock().await;
    let mut backoff = Duration::from_millis(10);
    let mut was_up = false;
    let mut run_gen = link.run_gen.load(Relaxed);
    loop {
        if let Some(reason) = link.refused() {
            // A new run of that node (or this node is one): nothing more goes to it. The
            // lock requests among what it never received are lost there: their
            // requesters are told (`lost_requests`), for those the kernel handed over
            // before the refusal and after it (the one place that tells them).
            warn!(peer, %reason, "not talking to peer any more");
            let unacked = std::mem::take(&mut link.outbox().unacked);
            for (_, b) in &unacked {
                lost_requests(peer, b, &core);
            }
            while let Some(b) = rx.recv().await {
                lost_requests(peer, &b, &core);
                link.dropped.fetch_add(1, Relaxed);
            }
            return;
        }
        let (mut fr, delivered) = match connect(&shared, peer, link.addr).await {
            Ok(c) => c,
            Err(ConnectError::Refused(reason)) if shared.recovery => {
                // A new run of a known node: let in once the peer sees it in etcd
                // (`Shared::adopt_run`); until then it is not let in, and takes no kernel
                // step anyway (it rejoins).
                debug!(peer, %reason, "peer does not let this run in yet; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
            Err(ConnectError::Refused(reason)) => {
                // The peer knew an earlier run of this node: this node must not serve.
                link.refuse(reason.clone());
                let _ = core.send(Cmd::Fenced {
                    reason: format!("node {peer} refused this node: {reason}"),
                });
                continue;
            }
            Err(ConnectError::Restarted(reason)) => {
                link.refuse(reason.clone());
                warn!(peer, %reason, "peer restarted; refusing it");
                let _ = core.send(Cmd::PeerRestarted { peer });
                continue;
            }
            Err(ConnectError::Unauthenticated(e)) => {
                link.failed(&e);
                let n = shared.reject();
                if n.is_power_of_two() {
                    warn!(peer, addr = %link.addr, error = %e, rejected = n, "peer rejected: handshake failed (logged for the 1st, 2nd, 4th, 8th ... rejected connection)");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
            Err(ConnectError::Other(e)) => {
                link.failed(&e);
                if was_up {
                    warn!(peer, addr = %link.addr, error = %e, "cannot reconnect to peer");
                    was_up = false;
                } else {
                    debug!(peer, addr = %link.addr, error = %e, "cannot connect to peer yet");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
                continue;
            }
        };
        backoff = Duration::from_millis(10);
        let g = link.run_gen.load(Relaxed);
        if g != run_gen {
            // The peer is a new run (`Shared::adopt_run`): the old run's messages are not
            // resent, the numbering starts afresh.
            run_gen = g;
            let mut out = link.outbox();
            link.dropped.fetch_add(out.unacked.len() as u64, Relaxed);
            out.unacked.clear();
            out.next_seq = 1;
            drop(out);
            link.acked.store(0, Relaxed);
            link.sent.store(0, Relaxed);
        }
        let next_seq = link.outbox().next_seq;
        if delivered >= next_seq {
            // The acceptor claims messages this node never sent: not the same channel.
            warn!(
                peer,
                delivered, next_seq, "peer acknowledges messages never sent; reconnecting"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let resend: Vec<(u64, Bytes)> = {
            let mut out = link.outbox();
            while out.unacked.front().is_some_and(|(s, _)| *s <= delivered) {
                out.unacked.pop_front();
            }
            out.unacked.iter().cloned().collect()
        };
        link.acked.fetch_max(delivered, Relaxed);
        link.silent.store(false, Relaxed);
        link.connected.store(true, Release);
        link.came_up();
        if !link.welcomed.swap(true, Relaxed) {
            let welcomed = shared.welcomed.fetch_add(1, Relaxed) + 1;
            if welcomed + 1 >= shared.quorum() {
                let _ = core.send(Cmd::Admitted);
            }
        }
        was_up = true;
        if link.connections.fetch_add(1, Relaxed) > 0 {
            info!(peer, addr = %link.addr, resend = resend.len(), "reconnected to peer");
        } else {
            info!(peer, addr = %link.addr, resend = resend.len(), "connected to peer");
        }
        let mut heard = Instant::now();
        *link.heard.lock().expect("heard lock") = Some(heard);
        // The last acknowledgement that took a message off `unacked` or found nothing
        // there (or the connection's start): [`REDIAL_AFTER`] counts from it.
        let mut progress = heard;
        // Whether this connection was given up for the silence: the peer is still shown as
        // not answering (not as reconnecting) until a connection to it is up again.
        let mut gave_up = false;
        let mut check = tokio::time::interval(HEARTBEAT);
        let err = 'conn: {
            for (seq, b) in &resend {
                if let Err(e) = send_within(&mut fr, Bytes::from(wire::envelope(*seq, b))).await {
                    break 'conn e;
                }
                link.resent.fetch_add(1, Relaxed);
            }
            loop {
                tokio::select! {
                    // In a fixed order (`biased`), so that a simulated run replays exactly (tokio's
                    // random choice cannot be seeded); the periodic check and the probes are ready at most
                    // once per period or request, the peer's acknowledgements at most once per message
                    // sent: none of them starves sending, and reading them first never leaves the peer
                    // blocked on writing to this node.
                    biased;
                    _ = check.tick() => {
                        if heard.elapsed() > SILENT_AFTER && !link.silent.swap(true, Relaxed) {
                            link.connected.store(false, Relaxed);
                            link.went_down(heard);
                            warn!(peer, addr = %link.addr, "peer not answering (stopped, hung or cut off; a new connection if it acknowledges nothing for {REDIAL_AFTER:?})");
                        }
                        let waited = progress.elapsed();
                        if waited > REDIAL_AFTER {
                            // The connection may be dead without a sign (segments dropped,
                            // in one direction or both): a new one resends what this one
                            // did not get acknowledged.
                            let unacked = link.outbox().unacked.len();
                            gave_up = true;
                            break 'conn if unacked == 0 {
                                format!("nothing heard for {waited:.1?} (no message waiting for an acknowledgement); redialing")
                            } else {
                                format!("no acknowledgement for {waited:.1?} ({unacked} messages waiting for one); redialing")
                            };
                        }
                    }
                    _ = link.ping_now.notified() => {
                        let ping = wire::Envelope { seq: 0, frame: wire::Payload::Ping(link.pings.load(Relaxed)) };
                        if let Err(e) = send_within(&mut fr, Bytes::from(wire::encode(&ping))).await {
                            break 'conn e;
                        }
                    }
                    r = fr.next() => match r {
                        None => break 'conn "peer closed the connection".to_string(),
                        Some(Err(e)) => break 'conn e.to_string(),
                        Some(Ok(b)) => match wire::decode::<wire::Ack>(&b) {
                            Ok(a) if a.delivered < link.outbox().next_seq && a.ping <= link.pings.load(Relaxed) => {
                                heard = Instant::now();
                                *link.heard.lock().expect("heard lock") = Some(heard);
                                link.pong.send_if_modified(|p| {
                                    let newer = a.ping > p.0;
                                    if newer {
                                        p.0 = a.ping;
                                    }
                                    newer
                                });
                                if link.silent.swap(false, Relaxed) {
                                    link.connected.store(true, Release);
                                    link.came_up();
                                    info!(peer, addr = %link.addr, "peer answers again");
                                }
                                let mut out = link.outbox();
                                let waiting = out.unacked.len();
                                while out.unacked.front().is_some_and(|(s, _)| *s <= a.delivered) {
                                    out.unacked.pop_front();
                                }
                                if out.unacked.len() < waiting || out.unacked.is_empty() {
                                    progress = heard;
                                }
                                drop(out);
                                link.acked.fetch_max(a.delivered, Relaxed);
                            }
                            Ok(a) => break 'conn format!("acknowledgement of message {} or probe {} never sent", a.delivered, a.ping),
                            Err(e) => break 'conn format!("bad acknowledgement: {e}"),
                        },
                    },
                    m = rx.recv() => {
                        let Some(b) = m else { return };
                        // Numbered and kept in the same poll as it is taken from the
                        // channel: a task stopped at an await never loses a message.
                        let seq = {
                            let mut out = link.outbox();
                            let seq = out.next_seq;
                            out.next_seq += 1;
                            out.unacked.push_back((seq, b.clone()));
                            seq
                        };
                        if let Err(e) = send_within(&mut fr, Bytes::from(wire::envelope(seq, &b))).await {
                            break 'conn e;
                        }
                    }
                }
            }
        };
        link.connected.store(false, Relaxed);
        link.went_down(Instant::now());
        if !gave_up {
            link.silent.store(false, Relaxed);
        }
        link.pong.send_modify(|p| p.1 += 1);
        let unacked = link.outbox().unacked.len();
        warn!(peer, addr = %link.addr, error = %err, unacked, "lost the connection to peer; reconnecting");
    }
}

/// Sends `frame` on a peer connection (either side), waiting at most [`REDIAL_AFTER`]: a
/// write that waits longer (the peer has read nothing of this connection for that long,
/// or the network dropped what was sent and the window never reopens) gives the connection
/// up, as a silence does. A task reads nothing from its connection while it writes.
async fn send_within(
    fr: &mut Framed<Stream, LengthDelimitedCodec>,
    frame: Bytes,
) -> Result<(), String> {
    match tokio::time::timeout(REDIAL_AFTER, fr.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "a write waited {REDIAL_AFTER:?} (the peer reads nothing); redialing"
        )),
    }
}

/// Accept peers' connections; each is served by its own task, which the listener's task
/// owns (stopping the node stops them).
pub(super) async fn accept(
    shared: Arc<Shared>,
    listener: Listener,
    core: mpsc::UnboundedSender<Cmd>,
) {
    let mut conns = JoinSet::new();
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        tokio::select! {
            // A fixed order (`biased`) for simulated runs to replay; finished connections
            // are reaped first (at most one per connection accepted).
            biased;
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            r = listener.accept() => match r {
                Ok((s, addr)) => {
                    let Ok(permit) = pending.clone().try_acquire_owned() else {
                        let n = shared.reject();
                        if n.is_power_of_two() {
                            warn!(%addr, rejected = n, "closing connection: {MAX_PENDING_HANDSHAKES} handshakes in progress already (logged for the 1st, 2nd, 4th, 8th ... rejected connection)");
                        } else {
                            debug!(%addr, "closing connection: {MAX_PENDING_HANDSHAKES} handshakes in progress already");
                        }
                        continue;
                    };
                    conns.spawn(serve_peer(shared.clone(), s, addr, core.clone(), permit));
                }
                Err(e) => {
                    let n = shared.counters.accept_errors.fetch_add(1, Relaxed) + 1;
                    if n.is_power_of_two() {
                        warn!(error = %e, failed = n, "cannot accept peer connections (logged for the 1st, 2nd, 4th ... failure)");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Acknowledges on an inbound connection every message delivered up to `delivered`, with
/// the newest probe received on it (`ping`, 0: none). False when the connection is gone
/// (or the write waited [`REDIAL_AFTER`], [`send_within`]).
async fn send_ack(
    fr: &mut Framed<Stream, LengthDelimitedCodec>,
    delivered: u64,
    ping: u64,
) -> bool {
    send_within(
        fr,
        Bytes::from(wire::encode(&wire::Ack { delivered, ping })),
    )
    .await
    .is_ok()
}

async fn serve_peer(
    shared: Arc<Shared>,
    s: Stream,
    addr: SocketAddr,
    core: mpsc::UnboundedSender<Cmd>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let mut fr = Framed::new(s, codec());
    let (from, incarnation) = match handshake_accept(&shared, &mut fr).await {
        Ok(x) => x,
        Err(reason) if is_cut(&reason) => {
            // Gone before it said anything wrong: cut off, reset, or a port probe.
            let n = shared.counters.cut_connections.fetch_add(1, Relaxed) + 1;
            debug!(%addr, %reason, cut = n, "connection closed during the handshake");
            return;
        }
        Err(reason) => {
            let n = shared.reject();
            if n.is_power_of_two() {
                warn!(%addr, %reason, rejected = n, "closing connection: handshake failed (logged for the 1st, 2nd, 4th, 8th ... rejected connection)");
            } else {
                debug!(%addr, %reason, "closing connection: handshake failed");
            }
            return;
        }
    };
    let link = shared.peers[usize::from(from)]
        .as_ref()
        .expect("handshake checked the id");
    // Is this the run of `from` this node knows? Take over its inbound channel.
    let admitted = {
        let mut inb = link.inbound.lock().expect("inbound lock");
        match inb.incarnation {
            Some(k) if k != incarnation => shared
                .adopt_run(from, link, &mut inb, incarnation)
                .map(|()| (inb.conn, inb.delivered)),
            _ => {
                inb.incarnation = Some(incarnation);
                inb.conn += 1;
                Ok((inb.conn, inb.delivered))
            }
        }
    };
    let (conn, delivered) = match admitted {
        Ok(x) => x,
        Err(reason) => {
            let n = shared.reject();
            if n.is_power_of_two() {
                warn!(%addr, peer = from, %reason, rejected = n, "refusing a new run of a known node");
            } else {
                debug!(%addr, peer = from, %reason, "refusing a new run of a known node");
            }
            if !shared.recovery {
                let first = link.refused().is_none();
                link.refuse(format!("node {from} restarted; refused"));
                if first {
                    let _ = core.send(Cmd::PeerRestarted { peer: from });
                }
            }
            let _ = fr
                .send(Bytes::from(wire::encode(&Hello::Refused { reason })))
                .await;
            return;
        }
    };
    if fr
        .send(Bytes::from(wire::encode(&Hello::Welcome { delivered })))
        .await
        .is_err()
    {
        return;
    }
    drop(permit);
    link.incoming.store(true, Relaxed);
    debug!(%addr, peer = from, delivered, "peer authenticated");
    let mut acked = delivered;
    // The newest probe received on this connection.
    let mut ping = 0u64;
    let mut ack_at: Option<Instant> = None;
    // The first heartbeat is one period away: an immediate tick would send an
    // acknowledgement of nothing ahead of the frames the peer is sending right now.
    let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    let reason = loop {
        let b = tokio::select! {
            // A fixed order (`biased`) for simulated runs to replay: the timers first, each
            // ready at most once per period or per delivery, so the frames are never starved.
            biased;
            _ = beat.tick() => {
                let d = {
                    let inb = link.inbound.lock().expect("inbound lock");
                    if inb.conn != conn {
                        // A newer connection from the peer took over (its dialer gave this
                        // one up, [`REDIAL_AFTER`]): closed now, not held until the kernel
                        // gives it up.
                        break None;
                    }
                    inb.delivered
                };
                if !send_ack(&mut fr, d, ping).await {
                    break None;
                }
                acked = d;
                continue;
            }
            _ = async { tokio::time::sleep_until(ack_at.expect("armed")).await }, if ack_at.is_some() => {
                ack_at = None;
                let d = link.inbound.lock().expect("inbound lock").delivered;
                if d > acked {
                    if !send_ack(&mut fr, d, ping).await {
                        break None;
                    }
                    acked = d;
                }
                continue;
            }
            b = fr.next() => b,
        };
        let b = match b {
            None => break None,
            Some(Err(e)) if e.kind() != std::io::ErrorKind::InvalidData => {
                // Reset or broken by the network, not bad input: counted apart.
                let n = shared.counters.cut_connections.fetch_add(1, Relaxed) + 1;
                debug!(%addr, peer = from, error = %e, cut = n, "connection from peer cut");
                break None;
            }
            Some(Err(e)) => break Some(format!("bad frame: {e}")),
            Some(Ok(b)) => b,
        };
        let env = match wire::decode::<wire::Envelope>(&b) {
            Ok(f) => f,
            Err(e) => break Some(format!("frame does not decode: {e}")),
        };
        // Token frames go to the core, agents frames to the agents engine.
        let cmd = match env.frame {
            wire::Payload::Token(f) => match check_frame(&f) {
                Ok(()) => Ok(Cmd::Deliver {
                    from: NodeId(from),
                    epoch: 0,
                    frame: Box::new(f),
                }),
                Err(e) => break Some(e),
            },
            wire::Payload::Stamped(epoch, f) => match check_frame(&f) {
                Ok(()) => Ok(Cmd::Deliver {
                    from: NodeId(from),
                    epoch,
                    frame: Box::new(f),
                }),
                Err(e) => break Some(e),
            },
            wire::Payload::Generation(generation) => Ok(Cmd::PeerGeneration {
                peer: from,
                generation,
            }),
            wire::Payload::DeadEnd { path, peer, serial } => match wire::check_path(&path) {
                Ok(()) if usize::from(peer) < shared.n => Ok(Cmd::DeadEnd { path, peer, serial }),
                Ok(()) => break Some(format!("dead end at unknown node {peer}")),
                Err(e) => break Some(e),
            },
            wire::Payload::Agents(f) => Err(f),
            // A probe (number 0, outside the numbered stream): answer at once.
            wire::Payload::Ping(p) => {
                if env.seq != 0 {
                    break Some(format!("probe with message number {}", env.seq));
                }
                ping = p;
                let d = link.inbound.lock().expect("inbound lock").delivered;
                if !send_ack(&mut fr, d, ping).await {
                    break None;
                }
                acked = d;
                ack_at = None;
                continue;
            }
        };
        if shared.recovery && matches!(cmd, Ok(Cmd::Deliver { .. })) {
            // The bound on unread messages (`etcd_held_back_max`): at the cap, close the
            // connection without delivering or acknowledging this one; the peer keeps it
            // and resends it after reconnecting.
            let max = shared.held_back_max;
            if shared
                .unread
                .fetch_update(Relaxed, Relaxed, |u| (u < max).then_some(u + 1))
                .is_err()
            {
                let k = shared.counters.held_back_full.fetch_add(1, Relaxed) + 1;
                if k.is_power_of_two() {
                    warn!(peer = from, max, closed = k, "{max} protocol messages unread here already (recovery under way?): closing the connection; the peer resends after reconnecting (logged for the 1st, 2nd, 4th ... time)");
                }
                break None;
            }
        }
        let d = {
            let mut inb = link.inbound.lock().expect("inbound lock");
            if shared.suspending.load(Relaxed) {
                // The node suspends (`Node::suspend`): nothing more is delivered or
                // acknowledged; the peer keeps the message and resends it to the resumed
                // run.
                if shared.recovery && matches!(cmd, Ok(Cmd::Deliver { .. })) {
                    shared.unread.fetch_sub(1, Relaxed);
                }
                break None;
            }
            if inb.conn != conn {
                if shared.recovery && matches!(cmd, Ok(Cmd::Deliver { .. })) {
                    shared.unread.fetch_sub(1, Relaxed);
                }
                // A newer connection from the same peer took over.
                break None;
            }
            if env.seq <= inb.delivered {
                link.duplicates.fetch_add(1, Relaxed);
                if shared.recovery && matches!(cmd, Ok(Cmd::Deliver { .. })) {
                    shared.unread.fetch_sub(1, Relaxed);
                }
                inb.delivered
            } else if env.seq == inb.delivered + 1 {
                inb.delivered = env.seq;
                link.received.fetch_add(1, Relaxed);
                shared.counters.frames_received.fetch_add(1, Relaxed);
                let kind = match &cmd {
                    Ok(Cmd::Deliver { frame, .. }) => Some(super::kind_index(&frame.msg)),
                    Ok(_) => None,
                    Err(_) => Some(super::AGENTS_KIND),
                };
                if let Some(kind) = kind {
                    shared.counters.received_by_kind[kind].fetch_add(1, Relaxed);
                }
                let sent = match cmd {
                    Ok(cmd) => core.send(cmd).is_ok(),
                    Err(f) => shared.agents.deliver(from, f),
                };
                if !sent {
                    return;
                }
                inb.delivered
            } else {
                if shared.recovery && matches!(cmd, Ok(Cmd::Deliver { .. })) {
                    shared.unread.fetch_sub(1, Relaxed);
                }
                break Some(format!(
                    "message {} after {}: a gap in the channel",
                    env.seq, inb.delivered
                ));
            }
        };
        if d >= acked + ACK_EVERY {
            if !send_ack(&mut fr, d, ping).await {
                break None;
            }
            acked = d;
            ack_at = None;
        } else if d > acked && ack_at.is_none() {
            ack_at = Some(Instant::now() + ACK_DELAY);
        }
    };
    {
        let inb = link.inbound.lock().expect("inbound lock");
        if inb.conn == conn {
            link.incoming.store(false, Relaxed);
        }
    }
    if let Some(reason) = reason {
        let n = shared.reject();
        if n.is_power_of_two() {
            warn!(%addr, peer = from, %reason, rejected = n, "closing connection from peer");
        } else {
            debug!(%addr, peer = from, %reason, "closing connection from peer");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::transport::Stream;
    use super::*;

    /// A write to a peer that reads nothing (its window closed, as on a connection whose
    /// segments the network drops) gives the connection up after [`REDIAL_AFTER`] instead
    /// of waiting for the kernel to give up.
    #[tokio::test]
    async fn a_write_the_peer_never_reads_gives_the_connection_up() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        // Kept open and never read.
        let (_peer, _) = l.accept().await.unwrap();
        let mut fr = Framed::new(Stream::Tcp(s), codec());
        let frame = Bytes::from(vec![0u8; wire::MAX_FRAME / 2]);
        let (e, waited) = tokio::time::timeout(3 * REDIAL_AFTER, async {
            loop {
                let at = Instant::now();
                if let Err(e) = send_within(&mut fr, frame.clone()).await {
                    return (e, at.elapsed());
                }
            }
        })
        .await
        .expect("a blocked write is given up");
        assert!(e.contains("redialing"), "{e}");
        assert!(
            waited >= REDIAL_AFTER && waited < 2 * REDIAL_AFTER,
            "{waited:?}"
        );
    }
}
