//! The Chord lock paper (Chord-placed lock service) as a Stateright model that drives
//! `hilock_kernel::ring`: up to 4 ring slots, clients that lock one key and unlock it,
//! joins, leaves and crashes, and an unordered network (any message in flight may be
//! delivered next: reordering). The model only routes; every rule runs in the kernel
//! ([`PaperNode::step`], [`RingServer::step`], [`ChordClient`]).
//!
//! # Variants
//! - [`Variant::Paper`]: Fig. 2 literally. Chord's pointers change for every node and
//!   client at once (the most favourable reading of Chord); the table moves — Fig. 2(d)
//!   and (e) — start when Chord's notification (a message) reaches the successor. A leave is
//!   abrupt, as in the seed (the leaving node sends nothing; its successor takes over from
//!   `olock_b`), so a leave is a crash.
//! - [`Variant::Hilock`]: the replicated server with `r` successor replicas. The membership
//!   service (etcd's role) announces each view with `NewView` messages and starts the next
//!   change (a join, a graceful leave, the removal of a crashed node) only when every live
//!   member of the current view has installed it and has all its arcs. A crash stops a node
//!   at once; its removal (`Detect`) is a later action, and its slot may then be started
//!   again as a new process with an empty table, which joins (`Reboot`).
//!
//! A client whose request (or its answer) died with a node times out (`Timeout`: no
//! message of it in flight, the node it asked is down) and resends with the current view.
//!
//! # Clients that repeat, give up and restart (hilock variant)
//! The client API ([`ChordClient`]) lets a client do more than lock once and unlock: the
//! model's clients may run several lock/unlock rounds ([`RingModel::rounds`]), give up a
//! request they wait for (`Abandon`: [`ChordClient::abandon`], the request stays in
//! flight and may still be served) and ask again, and restart as a new incarnation of the
//! same client id (`Restart`: a new [`ChordClient`] with a new incarnation, which first
//! reads the key's entry from its primary and continues after the request the ring
//! records, [`ChordClient::resume_after`], and whose next lock is a take-over,
//! [`Op::TakeOver`], as `hilock lock --take-over`'s); the network may duplicate
//! a client's request (`Duplicate`). Each is bounded per run by its field
//! ([`RingModel::abandons`], [`RingModel::restarts`], [`RingModel::duplicates`]). A client
//! that gave up or restarted asks for the lock again and then unlocks it: it does not know
//! whether it holds, so it holds only once it is granted again. Clients may share a
//! client id ([`RingModel::ids`]): two processes given one id, two incarnations to the
//! ring, counted as two holders.
//!
//! # Small tables (hilock variant)
//! A configuration may give each server a table smaller than the keys its clients use
//! ([`RingModel::table`]) and each client a second key for its later rounds
//! ([`RingModel::later`]): a new key on a full table then takes the place of a released
//! one (`RingServer::step`, "Reclaim"), at primaries and replicas, and every property
//! must hold as with room for every key. A table may also fill with held keys: a lock
//! that finds no room, at its primary or at a replica, is answered `Full` and leaves
//! nothing held (`RingServer::step`, "Full replicas"; [`STUCK`]).
//!
//! # Partitions and pauses (hilock variant)
//! `Isolate(n)` cuts node `n` off from everybody (the other nodes, the membership service
//! and the clients) until `Heal(n)`: every message to or from it, in flight or sent
//! while the cut lasts, is lost (its TCP connections broke). A process pause (GC, SIGSTOP)
//! is the same as far as the others can tell. On `Heal(n)` the links between `n` and the
//! others are new connections, and both ends of each send again the replica writes it
//! owes ([`RingServer::reconnected`]; clients recover what they lost by their own
//! timeout). Nobody can tell a cut node from a crashed
//! one, so suspicion is all a successor has. What the service does with it is
//! [`Takeover`]:
//! - [`Takeover::Lease`] (shipped): a member holds a lease from the service and stops
//!   answering requests when it cannot renew it (`Expire`: [`RingServer::stop`]); the
//!   service removes a live suspected node (`Detect`) only once its lease has run out, so
//!   its successor takes its range over only from an installed view, after the old
//!   primary stopped. A paused node's lease runs out during the pause; on waking it looks
//!   at its clock before anything else, so the model's `Expire` may come at the moment
//!   the lease runs out, before the node's next step.
//! - [`Takeover::Suspicion`] (naive): the service removes a node as soon as its successor
//!   suspects it (cut off), without waiting for a lease.
//! - [`Takeover::Local`] (naive, Chord's own way): the successor of a node it suspects
//!   installs, by itself, the view without it (epoch + 1); there is no authority for
//!   epochs. A client whose node does not answer tries the node's successor (Chord's
//!   client), so a client finds a server that took over.
//!
//! # Properties
//! - `at most one holder per lock`: no two clients hold one key (between their grant and
//!   the sending of their unlock).
//! - `no lost lock`: a held key is recorded as locked by its holder somewhere — in a live
//!   node's table (`olock`/`olock_b`; hilock: any replica) or in a message in flight.
//! - `no kernel error`.
//! - `fences strictly increase per key`: of two successive grants of one key, to any
//!   clients, the later has the strictly larger fence (the entry's version naming the
//!   granted client when the grant reaches it, as `RingClient::grant` reads it).
//! - `no lock recorded for nobody` (hilock variant): the key's primary in the service's
//!   view names as holder only a client locking, holding or unlocking the key (or one
//!   that gave a request up or restarted).
//! - `no key held for a client that gave up and unlocked` (hilock variant): once nothing
//!   is in flight, no live node names as holder a client that gave its lock up, sent an
//!   unlock and stopped (`GiveUp`, [`RingModel::give_ups`]; its unlock follows the lock
//!   copies it sent to the same node, as on the runtime's one connection).
//! - `a key answers Retry only while its write can end` (hilock variant): a primary that
//!   answers Retry for a key it is writing has a message of that write in flight (or a
//!   node down, cut off or stopped, which a view change or a heal resolves). A write
//!   nothing will answer any more makes its key answer Retry for ever, a cycle the
//!   `eventually` property cannot see (Stateright 0.31 judges it at terminal states).
//! - `every request answered` (eventually; Stateright 0.31 evaluates it at terminal
//!   states): every client finished its lock/unlock.
//! - sometimes: `a lock is granted`, `the membership changed`.

use hilock_kernel::ring::{
    Addr, Answer, Change, ChordClient, ChordMsg, ClientEvent, ClientId, Entry, Holder, Key, NodeId,
    Op, Out, PaperNode, RetryFence, Ring, RingServer, Slot, Token, Version, View,
};
use serde::{Deserialize, Serialize};
use stateright::{Checker, HasDiscoveries, Model, Path, Property};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Slots.
pub const NS: usize = 4;
/// Table capacity.
pub const T: usize = 4;
/// Client ids the servers remember requests of (the model's clients are 1, 2, …).
pub const CL: usize = 4;
type Outs = heapless::Vec<Out<T>, 32>;
type Msg = ChordMsg<T>;

/// Property name.
pub const MUTEX: &str = "at most one holder per lock";
/// Property name.
pub const LOST: &str = "no lost lock";
/// Property name.
pub const NO_ERROR: &str = "no kernel error";
/// Property name.
pub const LIVE: &str = "every request answered";
/// Property name: a request is answered only by a server that has the key's current
/// state. Checked where a server refuses a lock: the holder its table names must hold the
/// lock or be between its lock request and the end of its unlock. A write's answer needs
/// every replica (fenced by epochs, `MUTEX` and `LOST`); a refusal is answered from the
/// server's own table, so it is what a replaced server that still serves gets wrong.
pub const ONE_SERVER: &str = "one server per key: no answer from a replaced server";
/// Property name: of two successive grants of one key (to any clients, in the order the
/// clients take them), the later has the strictly larger fence. A grant's fence is what
/// `RingClient::grant` hands the command as `HILOCK_FENCE`: the version of the key's entry
/// that names the granted client — the newest such entry in a live node's table or in a
/// replica write or hand-over in flight, read when the grant reaches the client.
pub const FENCES: &str = "fences strictly increase per key";
/// Property name: the key's primary in the service's view (live, serving, with that view
/// installed) names as a key's holder only a client that is locking, holding or unlocking
/// that key, or one that gave a request up or restarted (which may hold without knowing,
/// or whose killed incarnation left the hold until the restarted run takes it over).
/// A late copy of a refused lock served after the key became free broke it
/// (`ring-late-duplicate-locks-for-nobody`); `ONE_SERVER` sees that only once another
/// client is refused.
pub const NOBODY: &str = "no lock recorded for nobody";
/// Property name: once nothing is in flight, no live node records as holder a client that
/// gave its lock up and sent an unlock (`GiveUp`, as `hilock lock` does on a timeout or a
/// signal: `RingClient::give_up`).
pub const GAVE_UP: &str = "no key held for a client that gave up and unlocked";
/// Property name: a primary answers Retry for a key it is writing only while something
/// of that write is in flight (its replica writes, their acknowledgements or refusals,
/// a newer view on its way to it), or a node is down, cut off or stopped. A replica that
/// refused a lock for want of room, and a primary that ignored the refusal, left the
/// key answering Retry for ever (`Sabotage::IgnoreFullReplica`).
pub const STUCK: &str = "a key answers Retry only while its write can end";
/// `sometimes`.
pub const GRANTED: &str = "a lock is granted";
/// `sometimes`.
pub const CHANGED: &str = "the membership changed";

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Variant {
    /// Fig. 2 literally.
    Paper,
    /// hilock's replicated server.
    Hilock {
        /// Successor replicas.
        r: u8,
    },
}

/// When a successor takes its predecessor's range over (hilock variant; see the module's
/// documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Takeover {
    /// Shipped: only from a view the service installed, and for a live node only once its
    /// lease ran out (the node stopped).
    #[default]
    Lease,
    /// Naive: the service removes a node as soon as it is suspected.
    Suspicion,
    /// Naive: the successor installs a view without its suspected predecessor itself.
    Local,
}

/// A configuration. As a file (`hilock check`, `hilock explore`: `"model": "ring"`),
/// `idents` and the fields after `clients` may be left out: they take [`RingModel::new`]'s
/// values (`models/configs/ring-r1-restart.json` gives only the fields it changes).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingModel {
    /// Its name (state counts are pinned by name).
    pub name: String,
    /// Server variant.
    pub variant: Variant,
    /// Slot identifiers (m = 6).
    #[serde(default = "default_idents")]
    pub idents: [u16; NS],
    /// Members at the start (bit per slot).
    pub initial: u16,
    /// The key each client locks and then unlocks.
    pub clients: Vec<u16>,
    /// Each client's id (empty: client `i` has id `i + 1`). Clients given one id are two
    /// processes with one client id: two incarnations ([`ChordClient::with_incarnation`];
    /// the model gives client `i` incarnation `i`), which the ring must keep apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<u8>,
    /// Slots that may join.
    #[serde(default)]
    pub joins: u16,
    /// Slots that may leave (Paper: abruptly; Hilock: gracefully).
    #[serde(default)]
    pub leaves: u16,
    /// Slots that may crash (Hilock).
    #[serde(default)]
    pub crashable: u16,
    /// Most crashes (Hilock) in a run.
    #[serde(default)]
    pub crashes: u8,
    /// Most membership changes (joins + leaves; `Takeover::Local`: local take-overs) in a
    /// run.
    #[serde(default)]
    pub changes: u8,
    /// Slots that may be cut off (partitioned or paused; hilock).
    #[serde(default)]
    pub isolatable: u16,
    /// Most `Isolate` actions in a run.
    #[serde(default)]
    pub isolations: u8,
    /// Who takes a suspected node's range over.
    #[serde(default)]
    pub takeover: Takeover,
    /// `Takeover::Lease`: whether a cut may heal before the node's lease ran out. Such a
    /// cut loses the replica messages (and acknowledgements) of a write in progress; on
    /// `Heal` both ends of every re-established link call [`RingServer::reconnected`],
    /// which sends them again (without it the write waited for ever:
    /// `ring-short-cut-strands-write`, [`Sabotage::NoResend`]). The resend lets a client's
    /// retry outlive its request; an older request of a client is answered from the entry,
    /// not applied (the retry fence, [`Sabotage::NoRetryFence`]:
    /// `ring-short-cut-join-stale-retry`). `false` checks only the cuts that last until
    /// the lease ran out.
    #[serde(default)]
    pub short_cuts: bool,
    /// Lock/unlock rounds per client (1: lock once, unlock; a refused lock ends a round).
    #[serde(default = "one")]
    pub rounds: u8,
    /// Most `Abandon` actions in a run (a client gives up the request it waits for).
    #[serde(default)]
    pub abandons: u8,
    /// Most `GiveUp` actions in a run: a client waiting for its lock gives it up, sends
    /// an unlock of the key and stops (its process exits: it follows no answer, asks
    /// nothing again), as `hilock lock` on a timeout or a signal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub give_ups: u8,
    /// Most `Restart` actions in a run (a client restarts as a new incarnation).
    #[serde(default)]
    pub restarts: u8,
    /// Most `Duplicate` actions in a run (the network copies a client's request).
    #[serde(default)]
    pub duplicates: u8,
    /// Most `Reboot` actions in a run (a crashed node's slot started again as a new
    /// process, with an empty table and an empty request memory; hilock).
    #[serde(default)]
    pub reboots: u8,
    /// A client waiting for an answer resends its request (same number) with the
    /// service's view as soon as the service installed a view newer than the one its
    /// request went out with, while the request may still be on its way (`Timeout`), as
    /// `RingClient` does every 100 ms. Copies of one request then travel in two views.
    #[serde(default)]
    pub resend_on_new_view: bool,
    /// Entries each hilock server's table holds at most (`RingServer::with_table`; 0: all
    /// [`T`]). Below the number of keys the clients use, a new key takes the place of a
    /// released one (`RingServer::step`, "Reclaim").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub table: u8,
    /// The key each client locks after its first lock (empty: its first key
    /// throughout), so that a client uses two keys, one after the other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub later: Vec<u16>,
    /// Test-only: break a check on purpose (see the tests).
    #[serde(default)]
    pub sabotage: Sabotage,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

fn default_idents() -> [u16; NS] {
    [8, 21, 32, 48]
}

fn one() -> u8 {
    1
}

/// Deliberate breakage, to watch a check go red.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sabotage {
    /// None.
    #[default]
    None,
    /// Hand-over messages arrive without their entries (the arcs are still marked ready).
    EmptyTransfers,
    /// The service never removes a crashed node.
    NoDetect,
    /// `Heal` does not call [`RingServer::reconnected`]: the replica messages lost in a
    /// short cut are never sent again (the defect `ring-short-cut-strands-write`).
    NoResend,
    /// A replica does not acknowledge a copy of a write it already applied (its
    /// `ReplicaAck` is dropped).
    NoReack,
    /// Every guard against an old copy of a request off, as before the retry fence: the
    /// servers serve a stale retry like a new request ([`RingServer::without_retry_fence`]
    /// and [`RingServer::without_request_memory`]), and a client takes the answer to any
    /// copy of its request, not only to one sent in its newest view (the defect
    /// `ring-short-cut-join-stale-retry`; with the fence off alone, the memory or the
    /// client's newest-copy rule stops that trace).
    NoRetryFence,
    /// The entry's writer changes with the holder only ([`RetryFence::HolderChanges`]): a
    /// re-grant to the holder keeps the older writer, and an unlock the holder sent before
    /// it frees the lock (the defect `ring-regrant-keeps-writer`). The request memory is
    /// off too ([`RingServer::without_request_memory`]): within one view it answers that
    /// unlock as a copy before the fence looks at it.
    WriterFollowsHolder,
    /// The servers keep no request memory ([`RingServer::without_request_memory`]): a
    /// late copy of a refused lock is served like a new request (the defect
    /// `ring-late-duplicate-locks-for-nobody`).
    NoRequestMemory,
    /// A client takes the answer to any copy of its request, not only to one sent in its
    /// newest view ([`ChordClient::on_reply`]): a refusal by the old primary ends a
    /// request the new primary may still grant (the defect `ring-resend-locks-for-nobody`).
    AnyCopy,
    /// A crashed node's slot started again (`Reboot`) takes the crashed run's place at
    /// once: the new process is a member of the service's current view, ready for its
    /// arcs with an empty table (the static membership service before its restart rule
    /// granted a new run a lease while the earlier run's was still running; the defect
    /// `ring-restart-in-place`).
    RebootInPlace,
    /// A hand-over that reaches a server after it is ready for the arc still overwrites
    /// the arc's entries with newer ones ([`RingServer::merging_late_hand_overs`]): a
    /// joiner answers from the first hand-over's entry and the later one's newer,
    /// unacknowledged entry then names a client it refused (the defect
    /// `ring-join-after-crash-stale-first-transfer`).
    LateHandOverMerged,
    /// `GiveUp` sends no unlock: the client only gives its lock up and stops (the
    /// runtime's client before `RingClient::give_up`), and the lock, served late, stays
    /// held for it.
    GiveUpWithoutUnlock,
    /// The servers answer an unlock that reaches its own lock's write in progress Retry
    /// ([`RingServer::without_deferred_unlocks`]), which a client that gave up never
    /// follows.
    NoDeferredUnlock,
    /// A primary ignores a replica's refusal of its write for want of room
    /// ([`RingServer::ignoring_full_replicas`]): the write waits for ever and its key
    /// answers Retry for ever ([`STUCK`]).
    IgnoreFullReplica,
}

/// A ring node of either variant. One configuration has nodes of one variant only, so
/// the larger variant (hilock's server, with its request memory) is not boxed: every
/// state is cloned whole, and a box would add an allocation per node per state.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RNode {
    /// Paper.
    Paper(PaperNode<NS, T>),
    /// hilock.
    Hilock(RingServer<NS, T, CL>),
}

/// A client and where it is in its program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CState {
    /// Kernel client.
    pub c: ChordClient<NS>,
    /// 0 idle, 1 locking, 2 holding, 3 unlocking, 4 done, 5 gone (it gave its lock up,
    /// sent an unlock and stopped: `GiveUp`).
    pub stage: u8,
    /// The node its last request went to.
    pub target: NodeId,
    /// The key it locks.
    pub key: u16,
    /// Rounds left after the current one.
    pub rounds: u8,
    /// It gave up a request or restarted in this run: the ring may record it as the
    /// holder while it does not hold (an abandoned lock served late).
    pub unsure: bool,
    /// It restarted and has not been granted since: its next lock is a take-over
    /// ([`Op::TakeOver`]) of the hold its killed incarnation may have left.
    pub take_over: bool,
}

impl CState {
    /// Whether `h` is this client or one of its earlier incarnations (a restart adds
    /// [`CL`] to the incarnation): a hold it may have without knowing, as a client that
    /// gave a request up may be granted it late, or one its killed incarnation left (held
    /// until its take-over).
    fn lineage(&self, h: Holder) -> bool {
        let now = self.c.incarnation();
        h.client == self.c.id() && h.incarnation <= now && (now - h.incarnation) % CL as u64 == 0
    }
}

/// A state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RState {
    /// Nodes (by slot).
    pub nodes: Vec<RNode>,
    /// Live nodes.
    pub alive: u16,
    /// Chord's ring (Paper) / the service's view (Hilock).
    pub view: View,
    /// Clients.
    pub clients: Vec<CState>,
    /// Messages in flight (a sorted multiset).
    pub net: Vec<(Addr, Addr, Msg)>,
    /// Membership changes so far.
    pub changes: u8,
    /// Crashes so far.
    pub crashes: u8,
    /// Slots that joined.
    pub joined: u16,
    /// First kernel error.
    pub error: Option<String>,
    /// Nodes cut off from the other nodes and the service (bit per slot).
    pub cut: u16,
    /// `Isolate` actions so far.
    pub isolations: u8,
    /// The first answer from a replaced server (`ONE_SERVER`).
    pub stale: Option<String>,
    /// `Abandon` actions so far.
    pub abandons: u8,
    /// `GiveUp` actions so far.
    pub give_ups: u8,
    /// `Restart` actions so far.
    pub restarts: u8,
    /// `Duplicate` actions so far.
    pub duplicates: u8,
    /// `Reboot` actions so far.
    pub reboots: u8,
    /// The fence of the last grant of each key (`FENCES`), sorted by key.
    pub fences: Vec<(Key, Version)>,
    /// The first grant whose fence is not larger than the one before (`FENCES`).
    pub fence_error: Option<String>,
    /// The first Retry answered for a key whose write nothing will end (`STUCK`).
    pub stuck: Option<String>,
}

/// An action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RAction {
    /// Client starts its next request.
    Start(usize),
    /// A message is delivered.
    Deliver(Addr, Addr, Msg),
    /// A node joins.
    Join(NodeId),
    /// A node leaves.
    Leave(NodeId),
    /// A node crashes (Hilock).
    Crash(NodeId),
    /// The service removes a crashed node (Hilock).
    Detect(NodeId),
    /// A client times out and resends.
    Timeout(usize),
    /// A node is cut off from the other nodes and the service (a partition, a pause).
    Isolate(NodeId),
    /// The cut ends.
    Heal(NodeId),
    /// A cut node's lease runs out: it stops answering (`Takeover::Lease`).
    Expire(NodeId),
    /// `Takeover::Local`: the node installs, by itself, the view without its suspected
    /// predecessor.
    Suspect(NodeId),
    /// A client gives up the request it waits for ([`ChordClient::abandon`]) and asks for
    /// the lock again.
    Abandon(usize),
    /// A client waiting for its lock gives it up ([`ChordClient::abandon`]), sends an
    /// unlock of the key and stops: the process is gone, nothing answers it any more.
    GiveUp(usize),
    /// A client restarts as a new incarnation (a killed run's successor) that resumes
    /// after the request the ring records ([`ChordClient::resume_after`]) and takes the
    /// lock over ([`Op::TakeOver`]: the killed incarnation may have left it held). Enabled
    /// once no message from or to the old incarnation is in flight: a take-over vouches
    /// that the old run is dead, and a request of the killed process still on its way
    /// (its own take-over) could take the hold back for the dead incarnation (not
    /// covered: `hilock lock --take-over` is for a run whose wrapper is gone).
    Restart(usize),
    /// The network delivers a copy of a client's request besides the request.
    Duplicate(Addr, Addr, Msg),
    /// A crashed node's slot is started again: a new process with an empty table and an
    /// empty request memory. The service gives it no lease, so it serves nothing, until
    /// it removed the crashed run (`Detect`, once that run's lease ran out); then the new
    /// process starts outside the view and joins, and the kernel's join hands it its arcs
    /// (the runtime's membership service; `Sabotage::RebootInPlace`: at once, in the
    /// crashed run's place).
    Reboot(NodeId),
}

/// A ring message in a few words: its kind, and the operation of a request or the answer
/// of a reply (`Request Lock`, `Reply Granted`, `BackupModify`).
pub fn msg_label(m: &Msg) -> String {
    let text = format!("{m:?}");
    let kind = text
        .split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_string();
    let field = |name: &str| {
        text.split_once(name).map(|(_, rest)| {
            rest.split([',', ' ', '}', '('])
                .next()
                .unwrap_or_default()
                .to_string()
        })
    };
    match field("op: ").or_else(|| field("answer: ")) {
        Some(f) if !f.is_empty() => format!("{kind} {f}"),
        _ => kind,
    }
}

impl RingModel {
    /// An action in words, as the paper tells its steps: `c2 → n21: Request Lock` (a
    /// delivery: sender, receiver, message), `c1: times out and resends`, `n32: crashes`.
    pub fn action_text(&self, a: &RAction) -> String {
        let node = |n: NodeId| self.addr_name(Addr::Node(n));
        // Client `i` by its id, as its messages name it.
        let client = |i: usize| self.addr_name(Addr::Client(self.id(i)));
        match a {
            RAction::Start(c) => format!("{}: asks for its next lock operation", client(*c)),
            RAction::Deliver(f, t, m) => format!(
                "{} → {}: {}",
                self.addr_name(*f),
                self.addr_name(*t),
                msg_label(m)
            ),
            RAction::Duplicate(f, t, m) => format!(
                "{} → {}: {} (a copy)",
                self.addr_name(*f),
                self.addr_name(*t),
                msg_label(m)
            ),
            RAction::Join(n) => format!("{}: joins the ring", node(*n)),
            RAction::Leave(n) => format!("{}: leaves the ring", node(*n)),
            RAction::Crash(n) => format!("{}: crashes", node(*n)),
            RAction::Detect(n) => format!("{}: the service removes it (crashed)", node(*n)),
            RAction::Timeout(c) => format!("{}: times out and resends its request", client(*c)),
            RAction::Isolate(n) => format!("{}: is cut off from the others", node(*n)),
            RAction::Heal(n) => format!("{}: the cut ends", node(*n)),
            RAction::Expire(n) => format!("{}: its lease runs out", node(*n)),
            RAction::Suspect(n) => format!(
                "{}: installs the view without its suspected predecessor",
                node(*n)
            ),
            RAction::Abandon(c) => format!("{}: gives up its request and asks again", client(*c)),
            RAction::GiveUp(c) => format!("{}: gives up its lock, unlocks and stops", client(*c)),
            RAction::Restart(c) => format!("{}: restarts as a new incarnation", client(*c)),
            RAction::Reboot(n) => format!("{}: its slot starts a new process", node(*n)),
        }
    }

    /// A view in words: `epoch 1 {n8, n21}` (members by their identifiers).
    pub fn view_words(&self, v: View) -> String {
        let members: Vec<String> = (0..NS)
            .filter(|&i| v.members & (1 << i) != 0)
            .map(|i| format!("n{}", self.idents[i]))
            .collect();
        format!("epoch {} {{{}}}", v.epoch, members.join(", "))
    }

    /// An address in the diagram's and the step text's words: `c2`, `n21`, `chord`.
    pub fn addr_name(&self, a: Addr) -> String {
        match a {
            Addr::Client(c) => format!("c{}", c.0),
            Addr::Node(n) => format!("n{}", self.idents[usize::from(n.0)]),
            Addr::Chord => "chord".into(),
        }
    }
}

/// A saved step without the incarnations (`Token::incarnation`, `Slot::incarnation`),
/// without the entries' `writer` fields ([`Slot::writer`](hilock_kernel::ring::Slot::writer)),
/// which traces saved before the retry fence do not have, and without the replies'
/// `epoch` fields (`ChordMsg::Reply`), which traces saved before replies named their
/// request's view do not have: the same action, written before or after those fields
/// existed, has one key.
pub fn step_key(step: &str) -> String {
    // Incarnations (`Token::incarnation`, `Slot::incarnation`): traces saved before them
    // have none, and every client of such a trace is its id's only incarnation.
    const I: &str = ", incarnation: ";
    let mut bare = String::with_capacity(step.len());
    let mut rest = step;
    while let Some(i) = rest.find(I) {
        bare.push_str(&rest[..i]);
        rest = rest[i + I.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    bare.push_str(rest);
    let step = bare.as_str();
    const E: &str = ", epoch: ";
    let mut plain = String::with_capacity(step.len());
    let mut rest = step;
    // `Reply { token: Token { … }, epoch: 3, answer: … }`: the only `, epoch: ` (views and
    // versions start with their epoch).
    while let Some(i) = rest.find(E) {
        plain.push_str(&rest[..i]);
        let tail = &rest[i + E.len()..];
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    plain.push_str(rest);
    let step = plain.as_str();
    const W: &str = ", writer: ";
    let mut out = String::with_capacity(step.len());
    let mut rest = step;
    while let Some(i) = rest.find(W) {
        out.push_str(&rest[..i]);
        let tail = &rest[i + W.len()..];
        rest = match tail.strip_prefix("None") {
            Some(t) => t,
            // `Some(Token { client: ClientId(c), seq: s })`: through the first `})`.
            None => tail.find("})").map_or("", |j| &tail[j + 2..]),
        };
    }
    out.push_str(rest);
    out
}

/// The format tag of a [`Trace`].
pub const TRACE_FORMAT: &str = "hilock-ring-trace/1";

/// A counterexample as saved under `spec/counterexamples/`.
#[derive(Clone, Debug, Serialize)]
pub struct Trace {
    /// Format.
    pub format: &'static str,
    /// Configuration.
    pub config: RingModel,
    /// The property.
    pub property: String,
    /// What the trace shows.
    pub note: String,
    /// The actions.
    pub steps: Vec<String>,
    /// What is wrong at the end.
    pub violation: String,
}

/// A check's outcome.
#[derive(Clone, Debug)]
pub struct RingReport {
    /// Configuration name.
    pub config: String,
    /// Unique states.
    pub unique_states: usize,
    /// Time.
    pub elapsed: Duration,
    /// Properties with a discovery (a counterexample, or a `sometimes` example).
    pub discovered: BTreeSet<String>,
    /// Counterexample of the property asked for (refute).
    pub trace: Option<Trace>,
}

impl RingReport {
    /// Whether `always`/`eventually` property `p` holds (no counterexample), or whether a
    /// `sometimes` property `p` was reached.
    pub fn found(&self, p: &str) -> bool {
        self.discovered.contains(p)
    }
}

impl RingModel {
    /// A configuration with no membership change; add them with the fields.
    pub fn new(name: &str, variant: Variant, initial: u16, clients: Vec<u16>) -> Self {
        RingModel {
            name: name.to_string(),
            variant,
            idents: default_idents(),
            initial,
            clients,
            ids: Vec::new(),
            joins: 0,
            leaves: 0,
            crashable: 0,
            crashes: 0,
            changes: 0,
            isolatable: 0,
            isolations: 0,
            takeover: Takeover::Lease,
            short_cuts: false,
            rounds: 1,
            abandons: 0,
            give_ups: 0,
            restarts: 0,
            duplicates: 0,
            reboots: 0,
            resend_on_new_view: false,
            table: 0,
            later: Vec::new(),
            sabotage: Sabotage::None,
        }
    }

    fn ring(&self) -> Ring<NS> {
        Ring::new(6, self.idents).expect("valid ring")
    }

    /// A counterexample path as a trace (`hilock-ring-trace/1`): its actions as
    /// [`RingModel::replay`] reads them and what is wrong in its last state.
    pub fn trace(&self, property: &str, path: &Path<RState, RAction>) -> Trace {
        Trace {
            format: TRACE_FORMAT,
            config: self.clone(),
            property: property.to_string(),
            note: String::new(),
            steps: path
                .clone()
                .into_actions()
                .iter()
                .map(|a| format!("{a:?}"))
                .collect(),
            violation: self.violation(property, path.last_state()),
        }
    }

    /// The configuration's error, if the model cannot be built from it (a configuration
    /// read from a file): the ring, every slot's node and every client must build, with at
    /// least one member at the start and one client.
    pub fn validate(&self) -> Result<(), String> {
        let ring = Ring::<NS>::new(6, self.idents)
            .map_err(|e| format!("identifiers {:?}: not a ring of m = 6: {e}", self.idents))?;
        if self.initial == 0 || self.initial >> NS != 0 {
            return Err(format!(
                "initial {:#06b}: one bit per slot of {NS}, at least one set",
                self.initial
            ));
        }
        if self.clients.is_empty() || self.clients.len() > CL {
            return Err(format!("{} clients: 1 to {CL}", self.clients.len()));
        }
        if !self.ids.is_empty() && self.ids.len() != self.clients.len() {
            return Err(format!(
                "{} ids for {} clients: one per client, or none",
                self.ids.len(),
                self.clients.len()
            ));
        }
        if let Some(id) = self.ids.iter().find(|id| usize::from(**id) >= CL) {
            return Err(format!("id {id}: the servers remember ids below {CL}"));
        }
        if usize::from(self.table) > T {
            return Err(format!("table {}: at most {T} entries", self.table));
        }
        if !self.later.is_empty() && self.later.len() != self.clients.len() {
            return Err(format!(
                "{} later keys for {} clients: one per client, or none",
                self.later.len(),
                self.clients.len()
            ));
        }
        if let Some(k) = self.clients.iter().chain(&self.later).find(|k| **k >= 64) {
            return Err(format!("key {k}: keys are below 2^6 = 64"));
        }
        if self.rounds == 0 {
            return Err("rounds: at least 1".into());
        }
        let view = View {
            epoch: 0,
            members: self.initial,
        };
        for i in 0..NS {
            let id = NodeId(i as u16);
            match self.variant {
                Variant::Paper => PaperNode::<NS, T>::new(id, ring, view).map(|_| ()),
                Variant::Hilock { r } => {
                    RingServer::<NS, T, CL>::new(id, ring, r, view).map(|_| ())
                }
            }
            .map_err(|e| format!("slot {i}: {e}"))?;
        }
        for i in 0..self.clients.len() {
            ChordClient::<NS>::new(self.id(i), ring, view)
                .map_err(|e| format!("client {}: {e}", i + 1))?;
        }
        Ok(())
    }

    /// Client `i`'s id.
    fn id(&self, i: usize) -> ClientId {
        ClientId(self.ids.get(i).copied().unwrap_or(i as u8 + 1))
    }

    /// Exhaustive check of every property (two threads).
    pub fn check(&self) -> RingReport {
        self.run(HasDiscoveries::All, 2, None)
    }

    /// Exhaustive check of every property, depth-first (two threads): the same states
    /// as [`RingModel::check`], but the checker keeps only the fingerprints of the states
    /// it visited and the path it is on, not a breadth-first frontier of whole states, so
    /// the largest configurations fit in a few GB. A depth-first counterexample is not
    /// the shortest; use it for configurations that pass.
    pub fn check_depth_first(&self) -> RingReport {
        self.run_with(HasDiscoveries::All, 2, None, true)
    }

    /// Search until `property` is refuted (one thread: the same trace every run).
    pub fn refute(&self, property: &'static str) -> RingReport {
        self.run(
            HasDiscoveries::AnyOf(BTreeSet::from([property])),
            1,
            Some(property),
        )
    }

    fn run(
        &self,
        finish: HasDiscoveries,
        threads: usize,
        want: Option<&'static str>,
    ) -> RingReport {
        self.run_with(finish, threads, want, false)
    }

    fn run_with(
        &self,
        finish: HasDiscoveries,
        threads: usize,
        want: Option<&'static str>,
        depth_first: bool,
    ) -> RingReport {
        let t = Instant::now();
        let builder = self.clone().checker().threads(threads).finish_when(finish);
        if depth_first {
            self.report(&builder.spawn_dfs().join(), t, want)
        } else {
            self.report(&builder.spawn_bfs().join(), t, want)
        }
    }

    fn report(
        &self,
        checker: &impl Checker<Self>,
        t: Instant,
        want: Option<&'static str>,
    ) -> RingReport {
        let discovered: BTreeSet<String> = checker
            .discoveries()
            .keys()
            .map(|k| k.to_string())
            .collect();
        let trace = want.and_then(|p| checker.discovery(p).map(|path| self.trace(p, &path)));
        RingReport {
            config: self.name.clone(),
            unique_states: checker.unique_state_count(),
            // The whole check: the search and the counterexamples' traces.
            elapsed: t.elapsed(),
            discovered,
            trace,
        }
    }

    /// Clients holding each key, by id and incarnation: two processes with one id are
    /// two holders.
    fn holders(st: &RState, k: Key) -> Vec<Holder> {
        st.clients
            .iter()
            .filter(|c| c.stage == 2 && Key(c.key) == k)
            .map(|c| c.c.holder())
            .collect()
    }

    fn keys(&self) -> BTreeSet<Key> {
        self.clients
            .iter()
            .chain(&self.later)
            .map(|k| Key(*k))
            .collect()
    }

    fn mutex_ok(&self, st: &RState) -> bool {
        self.keys()
            .into_iter()
            .all(|k| Self::holders(st, k).len() <= 1)
    }

    /// Whether the lock of `c` on `k` is recorded somewhere.
    fn recorded(st: &RState, k: Key, c: Holder) -> bool {
        let locked = Entry {
            key: k,
            locked: true,
        };
        let in_node = st.nodes.iter().enumerate().any(|(i, n)| {
            st.alive & (1 << i) != 0
                && match n {
                    RNode::Paper(p) => p.olock().contains(&locked) || p.olock_b().contains(&locked),
                    RNode::Hilock(s) => s.holding(k) == Some(c),
                }
        });
        let in_flight = st.net.iter().any(|(_, _, m)| match m {
            ChordMsg::BackupModify { entry, .. }
            | ChordMsg::BackupInsert { entry }
            | ChordMsg::Insert { entry } => *entry == locked,
            ChordMsg::FetchReply { entries } | ChordMsg::BackupDump { entries } => {
                entries.contains(&locked)
            }
            ChordMsg::Replicate { slot, .. } => slot.key == k && slot.holding() == Some(c),
            ChordMsg::Transfer { slots, .. } => {
                slots.iter().any(|s| s.key == k && s.holding() == Some(c))
            }
            _ => false,
        });
        in_node || in_flight
    }

    /// `NOBODY`: the client the primary of `k` in the service's view names as holder.
    fn nobody_ok(&self, st: &RState) -> bool {
        let ring = self.ring();
        self.keys().into_iter().all(|k| {
            let Some(p) = ring.lookup(st.view, k) else {
                return true;
            };
            let RNode::Hilock(s) = &st.nodes[p.0 as usize] else {
                return true;
            };
            let serving = st.alive & (1 << p.0) != 0 && !s.stopped() && s.view() == st.view;
            match s.holding(k) {
                Some(h) if serving => st.clients.iter().any(|c| {
                    (c.c.holder() == h && Key(c.key) == k && (1..=3).contains(&c.stage))
                        || (c.unsure && c.lineage(h))
                }),
                _ => true,
            }
        })
    }

    fn lost_ok(&self, st: &RState) -> bool {
        self.keys().into_iter().all(|k| {
            Self::holders(st, k)
                .into_iter()
                .all(|c| Self::recorded(st, k, c))
        })
    }

    /// The fence of `c`'s hold of `k` (`FENCES`): the newest version of an entry of `k`
    /// naming `c` in a live node's table or in a replica write or hand-over in flight.
    /// `None` where nothing records the hold (`LOST` judges that) and for the paper's
    /// server, whose table has no versions.
    fn fence(st: &RState, k: Key, c: Holder) -> Option<Version> {
        let ours = |s: &hilock_kernel::ring::Slot| s.key == k && s.holding() == Some(c);
        let tables = st.nodes.iter().enumerate().filter_map(|(i, n)| match n {
            RNode::Hilock(s) if st.alive & (1 << i) != 0 => {
                s.slots().iter().find(|s| ours(s)).map(|s| s.version)
            }
            _ => None,
        });
        let flight = st.net.iter().filter_map(|(_, _, m)| match m {
            ChordMsg::Replicate { slot, .. } if ours(slot) => Some(slot.version),
            ChordMsg::Transfer { slots, .. } => {
                slots.iter().filter(|s| ours(s)).map(|s| s.version).max()
            }
            _ => None,
        });
        tables.chain(flight).max()
    }

    /// Client `c` was just granted `k`: its fence must be larger than the last grant's.
    fn take_fence(&self, st: &mut RState, k: Key, c: Holder) {
        let Some(f) = Self::fence(st, k, c) else {
            return;
        };
        match st.fences.binary_search_by_key(&k, |e| e.0) {
            Ok(i) => {
                let before = st.fences[i].1;
                if f <= before && st.fence_error.is_none() {
                    st.fence_error = Some(format!(
                        "c{} was granted key {} with fence {}.{}, not above the previous \
                         grant's {}.{}",
                        c.client.0, k.0, f.epoch, f.n, before.epoch, before.n
                    ));
                }
                st.fences[i].1 = f;
            }
            Err(i) => st.fences.insert(i, (k, f)),
        }
    }

    /// `STUCK`: node `n` just answered `token`'s request for `key` (its outputs `out`);
    /// if that was Retry for a write of `key` in progress at `n`, something of the write
    /// must be in flight, or a node down, cut off or stopped.
    fn judge_retry(&self, st: &mut RState, n: NodeId, token: Token, key: Key, out: &Outs) {
        let retry = out.iter().any(|o| {
            matches!(o.msg, ChordMsg::Reply { token: t, answer: Answer::Retry, .. } if t == token)
        });
        let RNode::Hilock(s) = &st.nodes[n.0 as usize] else {
            return;
        };
        let Some(w) = s.writing(key) else {
            return;
        };
        if !retry || st.stuck.is_some() {
            return;
        }
        let me = Addr::Node(n);
        let moving = st.net.iter().any(|(f, t, m)| match m {
            ChordMsg::Replicate { slot, .. } => *f == me && slot.key == key,
            ChordMsg::ReplicaAck { key: k, .. } | ChordMsg::ReplicaFull { key: k, .. } => {
                *t == me && *k == key
            }
            ChordMsg::ReplicaNack { .. } | ChordMsg::NewView(_) => *t == me,
            _ => false,
        });
        let trouble = st.cut != 0
            || (0..NS).any(|i| {
                let bit = 1u16 << i;
                (s.view().members & bit != 0 && st.alive & bit == 0)
                    || Self::stopped(st, NodeId(i as u16))
            });
        if !moving && !trouble {
            st.stuck = Some(format!(
                "n{} answered c{} Retry for key {}: its write of version {}.{} waits, and \
                 nothing of it is in flight",
                self.idents[n.0 as usize], token.client.0, key.0, w.version.epoch, w.version.n
            ));
        }
    }

    fn finished(st: &RState) -> bool {
        st.clients.iter().all(|c| matches!(c.stage, 4 | 5))
    }

    /// Whether `m` is the unlock of a client that gave up (`GiveUp`) and a request it
    /// sent before is still on its way to the same node: the runtime sends both on one
    /// connection (`RingClient::give_up`), which delivers them in order. The network
    /// reorders every other message.
    fn behind(st: &RState, m: &(Addr, Addr, Msg)) -> bool {
        let (Addr::Client(cid), ChordMsg::Request { token, .. }) = (m.0, &m.2) else {
            return false;
        };
        let gone = st
            .clients
            .iter()
            .any(|c| c.stage == 5 && c.c.id() == cid && c.c.holder() == token.holder());
        gone && st.net.iter().any(|(f, t, o)| {
            *f == m.0
                && *t == m.1
                && matches!(o, ChordMsg::Request { token: e, .. } if e.precedes(*token))
        })
    }

    /// `GAVE_UP`: with nothing in flight, no live node names a client that gave up.
    fn gave_up_ok(st: &RState) -> bool {
        if !st.net.is_empty() {
            return true;
        }
        st.clients.iter().filter(|c| c.stage == 5).all(|c| {
            st.nodes.iter().enumerate().all(|(i, n)| match n {
                RNode::Hilock(s) if st.alive & (1 << i) != 0 => {
                    s.slots().iter().all(|e| e.holding() != Some(c.c.holder()))
                }
                _ => true,
            })
        })
    }

    /// Follows `steps` (actions as a saved trace names them, `format!("{action:?}")`,
    /// compared by [`step_key`]) from the initial state; the state after each step, or
    /// `Err((i, state))` when step `i` is not enabled in `state`.
    #[allow(clippy::result_large_err)]
    pub fn replay(&self, steps: &[String]) -> Result<Vec<RState>, (usize, RState)> {
        let mut st = self.init_states().remove(0);
        let mut states = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let mut acts = Vec::new();
            self.actions(&st, &mut acts);
            let want = step_key(step);
            let next = acts
                .into_iter()
                .find(|a| step_key(&format!("{a:?}")) == want)
                .and_then(|a| self.next_state(&st, a));
            match next {
                Some(n) => {
                    st = n.clone();
                    states.push(n);
                }
                None => return Err((i, st)),
            }
        }
        Ok(states)
    }

    /// Whether `st` keeps the `always` property `property` (one of [`MUTEX`], [`LOST`],
    /// [`NO_ERROR`], [`ONE_SERVER`], [`FENCES`], [`NOBODY`]).
    pub fn holds(&self, property: &str, st: &RState) -> bool {
        self.properties()
            .into_iter()
            .find(|p| p.name == property)
            .map(|p| (p.condition)(self, st))
            .unwrap_or_else(|| panic!("{property}: not a property of the ring model"))
    }

    /// What is wrong in `st` for `property`.
    pub fn violation(&self, property: &str, st: &RState) -> String {
        let nodes: Vec<String> = st
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let up = if st.alive & (1 << i) != 0 {
                    ""
                } else {
                    " (down)"
                };
                match n {
                    RNode::Paper(p) => format!(
                        "n{}{up}: olock [{}] olock_b [{}]",
                        self.idents[i],
                        entries_words(p.olock()),
                        entries_words(p.olock_b())
                    ),
                    RNode::Hilock(s) => format!(
                        "n{}{up}{}{}: view {}, table [{}]",
                        self.idents[i],
                        if st.cut & (1 << i) != 0 { " (cut)" } else { "" },
                        if s.stopped() { " (stopped)" } else { "" },
                        self.view_words(s.view()),
                        s.slots()
                            .iter()
                            .map(slot_words)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            })
            .collect();
        let what = match property {
            MUTEX => {
                let h: Vec<String> = self
                    .keys()
                    .into_iter()
                    .map(|k| {
                        // By id; with the incarnation where two holders share an id.
                        let hs = Self::holders(st, k);
                        let names: Vec<String> = hs
                            .iter()
                            .map(|h| {
                                if hs.iter().filter(|o| o.client == h.client).count() > 1 {
                                    format!("c{} (incarnation {})", h.client.0, h.incarnation)
                                } else {
                                    format!("c{}", h.client.0)
                                }
                            })
                            .collect();
                        format!("key {}: {}", k.0, names.join(" and "))
                    })
                    .collect();
                format!("two clients hold one lock: {}", h.join("; "))
            }
            LOST => "a client holds a lock no live node and no message records".to_string(),
            NO_ERROR => st.error.clone().unwrap_or_default(),
            ONE_SERVER => st.stale.clone().unwrap_or_default(),
            FENCES => st.fence_error.clone().unwrap_or_default(),
            STUCK => st.stuck.clone().unwrap_or_default(),
            NOBODY => {
                let ring = self.ring();
                let h: Vec<String> = self
                    .keys()
                    .into_iter()
                    .filter_map(|k| {
                        let p = ring.lookup(st.view, k)?;
                        let RNode::Hilock(s) = &st.nodes[p.0 as usize] else {
                            return None;
                        };
                        let c = s.holding(k)?;
                        Some(format!(
                            "n{} names c{} (incarnation {}) as holder of key {}",
                            self.idents[p.0 as usize], c.client.0, c.incarnation, k.0
                        ))
                    })
                    .collect();
                let w: Vec<String> = st
                    .clients
                    .iter()
                    .map(|c| format!("c{} stage {}", c.c.id().0, c.stage))
                    .collect();
                format!(
                    "a key locked for a client that neither holds nor waits for it: {}; {}",
                    h.join(", "),
                    w.join(", ")
                )
            }
            LIVE => {
                let w: Vec<String> = st
                    .clients
                    .iter()
                    .filter(|c| c.stage != 4)
                    .map(|c| {
                        let waits = match c.c.waiting() {
                            Some((op, k)) => {
                                format!("waits for its {} of key {}", op_words(op), k.0)
                            }
                            None => "waits for nothing".to_string(),
                        };
                        format!("c{} stage {} {waits}", c.c.id().0, c.stage)
                    })
                    .collect();
                format!("no step left, unanswered: {}", w.join(", "))
            }
            _ => String::new(),
        };
        format!("{what} | {}", nodes.join(" | "))
    }

    fn hilock(&self) -> bool {
        matches!(self.variant, Variant::Hilock { .. })
    }

    /// Every live member of the service's view installed it and has its arcs, and every
    /// live node that was in the previous view has installed it.
    fn settled(&self, st: &RState) -> bool {
        st.nodes.iter().enumerate().all(|(i, n)| match n {
            RNode::Hilock(s) if st.alive & (1 << i) != 0 && !s.stopped() => {
                let involved = st.view.has(NodeId(i as u16)) || s.view().has(NodeId(i as u16));
                !involved
                    || s.settled_in(st.view)
                    || (!st.view.has(NodeId(i as u16)) && s.view() == st.view)
            }
            _ => true,
        })
    }

    /// Whether a message from `f` to `t` is lost: one of them is cut off (TCP loses what
    /// its broken connection carried).
    fn blocked(st: &RState, f: Addr, t: Addr) -> bool {
        let cut = |a: Addr| matches!(a, Addr::Node(n) if st.cut & (1 << n.0) != 0);
        cut(f) || cut(t)
    }

    fn stopped(st: &RState, n: NodeId) -> bool {
        matches!(&st.nodes[n.0 as usize], RNode::Hilock(s) if s.stopped())
    }

    /// Whether node `n` suspects node `p`: `p` crashed, or one of them is cut off.
    fn suspects(st: &RState, n: NodeId, p: NodeId) -> bool {
        st.alive & (1 << p.0) == 0 || (st.cut & ((1 << p.0) | (1 << n.0))) != 0
    }

    fn send_all(&self, st: &mut RState, from: NodeId, outs: Outs) {
        for o in outs {
            if let Addr::Node(n) = o.to {
                if st.alive & (1 << n.0) == 0 {
                    continue;
                }
            }
            st.net.push((Addr::Node(from), o.to, o.msg));
        }
    }

    /// `Heal(n)`: the links between `n` and every other live node that is not cut off are
    /// new connections; both ends send again what those links owe
    /// ([`RingServer::reconnected`]), as the runtime does when it dials a peer again.
    fn reconnect(&self, st: &mut RState, n: NodeId) {
        if st.alive & (1 << n.0) == 0 {
            return;
        }
        for i in 0..NS {
            let p = NodeId(i as u16);
            if p == n || st.alive & (1 << i) == 0 || st.cut & (1 << i) != 0 {
                continue;
            }
            for (from, to) in [(n, p), (p, n)] {
                let RNode::Hilock(s) = &st.nodes[from.0 as usize] else {
                    return;
                };
                let mut out = Outs::new();
                if let Err(e) = s.reconnected(to, &mut out) {
                    st.error = Some(format!("reconnected({to}) at {from}: {e}"));
                }
                self.send_all(st, from, out);
            }
        }
    }

    /// Node `id`'s hilock server, new in `view`, with the configuration's sabotage.
    fn server(&self, id: NodeId, r: u8, view: View) -> RingServer<NS, T, CL> {
        let mut s = RingServer::new(id, self.ring(), r, view).expect("server");
        if self.table != 0 {
            s = s.with_table(usize::from(self.table)).expect("table size");
        }
        match self.sabotage {
            Sabotage::NoRetryFence => s.without_retry_fence().without_request_memory(),
            Sabotage::WriterFollowsHolder => s
                .with_retry_fence(RetryFence::HolderChanges)
                .without_request_memory(),
            Sabotage::NoRequestMemory => s.without_request_memory(),
            Sabotage::LateHandOverMerged => s.merging_late_hand_overs(),
            Sabotage::NoDeferredUnlock => s.without_deferred_unlocks(),
            Sabotage::IgnoreFullReplica => s.ignoring_full_replicas(),
            _ => s,
        }
    }

    fn change_view(&self, st: &mut RState, new: View, notify: Option<(NodeId, Change)>) {
        let old = st.view;
        st.view = new;
        st.changes += 1;
        match self.variant {
            Variant::Paper => {
                for n in st.nodes.iter_mut() {
                    if let RNode::Paper(p) = n {
                        let _ = p.set_view(new);
                    }
                }
                for c in st.clients.iter_mut() {
                    let _ = c.c.learn(new);
                }
                if let Some((to, ch)) = notify {
                    st.net
                        .push((Addr::Chord, Addr::Node(to), ChordMsg::Notify(ch)));
                }
            }
            Variant::Hilock { .. } => {
                for i in 0..NS {
                    let n = NodeId(i as u16);
                    if st.alive & (1 << i) != 0 && (old.has(n) || new.has(n)) {
                        st.net
                            .push((Addr::Chord, Addr::Node(n), ChordMsg::NewView(new)));
                    }
                }
            }
        }
    }
}

/// Whether `m` is of client `c`'s incarnation: its request or the answer to it, or a
/// server message about its request.
fn of_client<const N: usize>(c: &ChordClient<N>, m: &Msg) -> bool {
    match m {
        ChordMsg::Request { token, .. }
        | ChordMsg::Reply { token, .. }
        | ChordMsg::BackupModify { token, .. }
        | ChordMsg::BackupAck { token }
        | ChordMsg::Replicate { token, .. }
        | ChordMsg::ReplicaAck { token, .. } => token.holder() == c.holder(),
        _ => false,
    }
}

impl RNode {
    /// Steps the node with `msg` from `from`; the error names the message and its sender
    /// (`names`: [`RingModel::addr_name`]).
    fn step(
        &mut self,
        from: Addr,
        msg: &Msg,
        out: &mut Outs,
        names: impl Fn(Addr) -> String,
    ) -> Result<(), String> {
        match self {
            RNode::Paper(p) => p.step(from, msg, out).map(|_| ()),
            RNode::Hilock(s) => s.step(from, msg, out).map(|_| ()),
        }
        .map_err(|e| format!("{} from {}: {e}", msg_label(msg), names(from)))
    }
}

/// The paper's table entries (`olock`, `olock_b`) in words: `key 10 locked, key 12 free`.
/// A client's outputs onto the network: each request to a node becomes the client's
/// target, and is in flight unless that node is down (`alive`, a bit per node).
fn send_from(c: &mut CState, alive: u16, net: &mut Vec<(Addr, Addr, Msg)>, out: Outs) {
    for o in out {
        if let Addr::Node(n) = o.to {
            c.target = n;
            if alive & (1 << n.0) != 0 {
                net.push((Addr::Client(c.c.id()), o.to, o.msg));
            }
        }
    }
}

fn entries_words(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| {
            let state = if e.locked { "locked" } else { "free" };
            format!("key {} {state}", e.key.0)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A hilock table entry in words: `key 10 held by c1 (incarnation 0), version 0.2,
/// last request c1 no. 3` (the version is the epoch, then the writer's counter).
fn slot_words(e: &Slot) -> String {
    let holder = match e.holder {
        Some(c) => format!("held by c{} (incarnation {})", c.0, e.incarnation),
        None => "free".to_string(),
    };
    let writer = match e.writer {
        Some(w) => format!(
            ", last request c{} no. {} (incarnation {})",
            w.client.0, w.seq, w.incarnation
        ),
        None => String::new(),
    };
    format!(
        "key {} {holder}, version {}.{}{writer}",
        e.key.0, e.version.epoch, e.version.n
    )
}

/// An operation in words.
fn op_words(op: Op) -> &'static str {
    match op {
        Op::Lock => "lock",
        Op::Unlock => "unlock",
        Op::Delete => "delete",
        Op::TakeOver => "take-over lock",
    }
}

impl Model for RingModel {
    type State = RState;
    type Action = RAction;

    fn init_states(&self) -> Vec<RState> {
        let ring = self.ring();
        let view = View {
            epoch: 0,
            members: self.initial,
        };
        let nodes = (0..NS)
            .map(|i| {
                let id = NodeId(i as u16);
                match self.variant {
                    Variant::Paper => RNode::Paper(PaperNode::new(id, ring, view).expect("node")),
                    Variant::Hilock { r } => RNode::Hilock(self.server(id, r, view)),
                }
            })
            .collect();
        let clients = self
            .clients
            .iter()
            .enumerate()
            .map(|(i, k)| CState {
                c: ChordClient::new(self.id(i), ring, view)
                    .expect("client")
                    .with_incarnation(i as u64),
                stage: 0,
                target: NodeId(0),
                key: *k,
                rounds: self.rounds.saturating_sub(1),
                unsure: false,
                take_over: false,
            })
            .collect();
        vec![RState {
            nodes,
            alive: self.initial,
            view,
            clients,
            net: Vec::new(),
            changes: 0,
            crashes: 0,
            joined: 0,
            error: None,
            cut: 0,
            isolations: 0,
            stale: None,
            abandons: 0,
            give_ups: 0,
            restarts: 0,
            duplicates: 0,
            reboots: 0,
            fences: Vec::new(),
            fence_error: None,
            stuck: None,
        }]
    }

    fn actions(&self, st: &RState, actions: &mut Vec<RAction>) {
        if st.error.is_some() {
            return;
        }
        for (i, c) in st.clients.iter().enumerate() {
            if matches!(c.stage, 0 | 2) {
                actions.push(RAction::Start(i));
            }
            let mentions = st
                .net
                .iter()
                .any(|(f, t, m)| of_client(&c.c, m) && !Self::blocked(st, *f, *t));
            // Nothing of its request can reach it: its node crashed, is cut off or stopped,
            // or neither the network nor the node has it any more (lost in a cut).
            let waits = matches!(&st.nodes[c.target.0 as usize],
                RNode::Hilock(s) if s.waits_for(c.c.holder()));
            let unanswering = st.alive & (1 << c.target.0) == 0
                || st.cut & (1 << c.target.0) != 0
                || Self::stopped(st, c.target)
                || (self.hilock() && !waits);
            let newer_view = self.resend_on_new_view && st.view.epoch > c.c.sent_in();
            let gone = c.stage == 5;
            if !gone && c.c.waiting().is_some() && ((!mentions && unanswering) || newer_view) {
                actions.push(RAction::Timeout(i));
            }
            if !gone && st.abandons < self.abandons && c.c.waiting().is_some() {
                actions.push(RAction::Abandon(i));
            }
            if st.give_ups < self.give_ups
                && c.stage == 1
                && matches!(c.c.waiting(), Some((Op::Lock | Op::TakeOver, _)))
            {
                actions.push(RAction::GiveUp(i));
            }
            // A new incarnation starts once nothing of the old one is in flight: its
            // connections are closed (the runtime's transport), so no reply reaches the new
            // one, and the requests it sent were served or lost. (A request of the killed
            // process still in flight when the new one starts numbering again could share
            // its request number: outside the promise, `RAction::Restart`.)
            let in_flight = st.net.iter().any(|(f, t, m)| {
                (*f == Addr::Client(c.c.id()) || *t == Addr::Client(c.c.id())) && of_client(&c.c, m)
            });
            if st.restarts < self.restarts && (1..=3).contains(&c.stage) && !in_flight {
                actions.push(RAction::Restart(i));
            }
        }
        if st.duplicates < self.duplicates {
            let mut copied = BTreeSet::new();
            for m in &st.net {
                let request =
                    matches!(m.0, Addr::Client(_)) && matches!(m.2, ChordMsg::Request { .. });
                if request && !Self::blocked(st, m.0, m.1) && copied.insert(m) {
                    actions.push(RAction::Duplicate(m.0, m.1, m.2.clone()));
                }
            }
        }
        let mut seen = BTreeSet::new();
        for m in &st.net {
            if !Self::blocked(st, m.0, m.1) && !Self::behind(st, m) && seen.insert(m) {
                actions.push(RAction::Deliver(m.0, m.1, m.2.clone()));
            }
        }
        let ring = self.ring();
        if st.changes < self.changes && (!self.hilock() || self.settled(st)) {
            for i in 0..NS {
                let n = NodeId(i as u16);
                let bit = 1u16 << i;
                let fresh = (self.initial | st.joined) & bit == 0;
                if self.joins & bit != 0 && fresh {
                    actions.push(RAction::Join(n));
                }
                if self.leaves & bit != 0
                    && st.view.has(n)
                    && st.alive & bit != 0
                    && st.view.members.count_ones() > 1
                {
                    actions.push(RAction::Leave(n));
                }
            }
        }
        if self.hilock() {
            for i in 0..NS {
                let n = NodeId(i as u16);
                let bit = 1u16 << i;
                if st.crashes < self.crashes
                    && self.crashable & bit != 0
                    && st.alive & bit != 0
                    && st.view.has(n)
                {
                    actions.push(RAction::Crash(n));
                }
                // A crashed run's slot started again: in the crashed run's place at once
                // (sabotage), or once the service removed the crashed run, as a join (one
                // change at a time).
                let crashed = st.alive & bit == 0 && (self.initial | st.joined) & bit != 0;
                let place = if self.sabotage == Sabotage::RebootInPlace {
                    st.view.has(n)
                } else {
                    !st.view.has(n) && self.settled(st)
                };
                if st.reboots < self.reboots && crashed && place {
                    actions.push(RAction::Reboot(n));
                }
                // Whom the service may remove: a crashed node; a live one whose lease
                // ran out (Lease) or that its successor suspects (Suspicion).
                let removable = st.alive & bit == 0
                    || match self.takeover {
                        Takeover::Lease => Self::stopped(st, n),
                        Takeover::Suspicion => st.cut & bit != 0,
                        Takeover::Local => false,
                    };
                if self.sabotage != Sabotage::NoDetect
                    && removable
                    && st.view.has(n)
                    && self.settled(st)
                    && ring.next(st.view, n) != Some(n)
                {
                    actions.push(RAction::Detect(n));
                }
                if st.isolations < self.isolations
                    && self.isolatable & bit != 0
                    && st.alive & bit != 0
                    && st.cut & bit == 0
                {
                    actions.push(RAction::Isolate(n));
                }
                if st.cut & bit != 0 {
                    if self.short_cuts || self.takeover != Takeover::Lease || Self::stopped(st, n) {
                        actions.push(RAction::Heal(n));
                    }
                    if self.takeover == Takeover::Lease && !Self::stopped(st, n) {
                        actions.push(RAction::Expire(n));
                    }
                }
                if let (Takeover::Local, RNode::Hilock(s)) = (self.takeover, &st.nodes[i]) {
                    let p = ring.prev(s.view(), n);
                    if st.changes < self.changes
                        && st.alive & bit != 0
                        && s.view().has(n)
                        && p.is_some_and(|p| p != n && Self::suspects(st, n, p))
                    {
                        actions.push(RAction::Suspect(n));
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &RState, action: RAction) -> Option<RState> {
        let mut st = last.clone();
        let ring = self.ring();
        match action {
            RAction::Start(i) => {
                let c = &mut st.clients[i];
                let op = match (c.stage, c.take_over) {
                    (0, false) => Op::Lock,
                    (0, true) => Op::TakeOver,
                    _ => Op::Unlock,
                };
                let mut out = Outs::new();
                if let Err(e) = c.c.start(op, Key(c.key), &mut out) {
                    st.error = Some(format!("client start: {e}"));
                    return Some(st);
                }
                c.stage += 1;
                send_from(c, st.alive, &mut st.net, out);
            }
            RAction::Timeout(i) => {
                let mut view = st.view;
                if self.takeover == Takeover::Local {
                    // Chord's client: the node does not answer; ask its successor (the
                    // client's view without it; same epoch, so no server installs it).
                    let c = &st.clients[i].c;
                    view = View {
                        epoch: c.view().epoch,
                        members: c.view().members & !(1 << st.clients[i].target.0),
                    };
                    if view.members == 0 {
                        return None;
                    }
                }
                let c = &mut st.clients[i];
                let mut out = Outs::new();
                if let Err(e) = c.c.timeout(view, &mut out) {
                    st.error = Some(format!("client timeout: {e}"));
                    return Some(st);
                }
                send_from(c, st.alive, &mut st.net, out);
            }
            RAction::Deliver(from, to, msg) => {
                let pos = st
                    .net
                    .iter()
                    .position(|m| m.0 == from && m.1 == to && m.2 == msg)?;
                st.net.remove(pos);
                match to {
                    Addr::Client(cid) => {
                        let ChordMsg::Reply {
                            token,
                            epoch,
                            answer,
                        } = msg
                        else {
                            st.error = Some("a client got a server message".into());
                            return Some(st);
                        };
                        // The incarnation it answers; none any more (it restarted): lost
                        // with its connections.
                        let Some(i) = st
                            .clients
                            .iter()
                            .position(|c| c.c.id() == cid && c.c.holder() == token.holder())
                        else {
                            st.net.sort();
                            return Some(st);
                        };
                        // A client that gave up and stopped: its process is gone.
                        if st.clients[i].stage == 5 {
                            st.net.sort();
                            return Some(st);
                        }
                        let c = &mut st.clients[i];
                        let mut out = Outs::new();
                        let mut granted = None;
                        // `NoRetryFence`, `AnyCopy`: the answer to any copy is taken as the newest copy's.
                        let any = [Sabotage::NoRetryFence, Sabotage::AnyCopy];
                        let epoch = if any.contains(&self.sabotage) {
                            c.c.sent_in()
                        } else {
                            epoch
                        };
                        match c.c.on_reply(token, epoch, answer, &mut out) {
                            Ok((ClientEvent::Done(op, key, a), _)) => {
                                let lock = matches!(op, Op::Lock | Op::TakeOver);
                                if lock && a == Answer::Granted {
                                    granted = Some(key);
                                    c.take_over = false;
                                }
                                c.stage = match (lock, a) {
                                    (true, Answer::Granted) => 2,
                                    _ if c.rounds > 0 => {
                                        c.rounds -= 1;
                                        if let Some(k) = self.later.get(i) {
                                            c.key = *k;
                                        }
                                        0
                                    }
                                    _ => 4,
                                };
                            }
                            Ok(_) => {}
                            Err(e) => st.error = Some(format!("client: {e}")),
                        }
                        for o in out {
                            if let Addr::Node(n) = o.to {
                                c.target = n;
                                if st.alive & (1 << n.0) != 0 {
                                    st.net.push((Addr::Client(cid), o.to, o.msg));
                                }
                            }
                        }
                        if let Some(key) = granted {
                            self.take_fence(&mut st, key, token.holder());
                        }
                    }
                    Addr::Node(n) => {
                        let mut out = Outs::new();
                        let asked = match (&msg, &st.nodes[n.0 as usize]) {
                            (ChordMsg::Request { token, key, .. }, RNode::Hilock(s)) => {
                                Some((*token, *key, s.holding(*key)))
                            }
                            _ => None,
                        };
                        let mut msg = msg;
                        if self.sabotage == Sabotage::EmptyTransfers {
                            if let ChordMsg::Transfer { slots, .. } = &mut msg {
                                slots.clear();
                            }
                        }
                        let applied = match (&msg, &st.nodes[n.0 as usize]) {
                            (ChordMsg::Replicate { slot, .. }, RNode::Hilock(s)) => {
                                s.slots().contains(slot)
                            }
                            _ => false,
                        };
                        if let Err(e) =
                            st.nodes[n.0 as usize].step(from, &msg, &mut out, |a| self.addr_name(a))
                        {
                            st.error = Some(e);
                        }
                        if applied && self.sabotage == Sabotage::NoReack {
                            out.retain(|o| !matches!(o.msg, ChordMsg::ReplicaAck { .. }));
                        }
                        if let Some((token, key, Some(h))) = asked {
                            let refused = out.iter().any(|o| {
                                matches!(o.msg, ChordMsg::Reply {
                                    token: t,
                                    answer: Answer::Refused | Answer::InUse,
                                    ..
                                } if t == token)
                            });
                            let holds = st.clients.iter().any(|c| {
                                (c.c.holder() == h
                                    && Key(c.key) == key
                                    && (1..=3).contains(&c.stage))
                                    || (c.unsure && c.lineage(h))
                            });
                            if refused && !holds && st.stale.is_none() {
                                st.stale = Some(format!(
                                    "n{} refused key {} to c{}: its table names c{} as holder, \
                                     who does not hold it",
                                    self.idents[n.0 as usize], key.0, token.client.0, h.client.0
                                ));
                            }
                        }
                        if let Some((token, key, _)) = asked {
                            self.judge_retry(&mut st, n, token, key, &out);
                        }
                        self.send_all(&mut st, n, out);
                    }
                    Addr::Chord => return None,
                }
            }
            RAction::Join(n) => {
                let new = st.view.join(n);
                st.alive |= 1 << n.0;
                st.joined |= 1 << n.0;
                if let RNode::Paper(_) = st.nodes[n.0 as usize] {
                    st.nodes[n.0 as usize] =
                        RNode::Paper(PaperNode::new(n, ring, new).expect("node"));
                }
                let succ = ring.next(new, n).expect("member");
                self.change_view(&mut st, new, Some((succ, Change::PredecessorJoined)));
            }
            RAction::Leave(n) => {
                let new = st.view.leave(n);
                if !self.hilock() {
                    // The seed's leave is abrupt.
                    st.alive &= !(1 << n.0);
                    st.net.retain(|m| m.1 != Addr::Node(n));
                }
                // The successor of the leaving node's identifier in the new ring.
                let succ = ring
                    .successor(new, ring.ident(n).expect("slot"))
                    .expect("member");
                self.change_view(&mut st, new, Some((succ, Change::PredecessorLeft)));
            }
            RAction::Crash(n) => {
                st.alive &= !(1 << n.0);
                st.crashes += 1;
                st.net.retain(|m| m.1 != Addr::Node(n));
            }
            RAction::Detect(n) => {
                let new = st.view.leave(n);
                self.change_view(&mut st, new, None);
                st.changes -= 1;
            }
            RAction::Reboot(n) => {
                let Variant::Hilock { r } = self.variant else {
                    return None;
                };
                st.reboots += 1;
                st.alive |= 1 << n.0;
                st.nodes[n.0 as usize] = RNode::Hilock(self.server(n, r, st.view));
                if self.sabotage != Sabotage::RebootInPlace {
                    // Outside the view: it joins, counted as no change (as `Detect`).
                    st.joined |= 1 << n.0;
                    let new = st.view.join(n);
                    self.change_view(&mut st, new, None);
                    st.changes -= 1;
                }
            }
            RAction::Isolate(n) => {
                st.cut |= 1 << n.0;
                st.isolations += 1;
            }
            RAction::Heal(n) => {
                st.cut &= !(1 << n.0);
                if self.sabotage != Sabotage::NoResend {
                    self.reconnect(&mut st, n);
                }
            }
            RAction::Expire(n) => {
                if let RNode::Hilock(s) = &mut st.nodes[n.0 as usize] {
                    s.stop();
                }
            }
            RAction::Suspect(n) => {
                let RNode::Hilock(s) = &st.nodes[n.0 as usize] else {
                    return None;
                };
                let p = ring.prev(s.view(), n)?;
                let v = s.view().leave(p);
                let mut out = Outs::new();
                if let Err(e) =
                    st.nodes[n.0 as usize].step(Addr::Chord, &ChordMsg::NewView(v), &mut out, |a| {
                        self.addr_name(a)
                    })
                {
                    st.error = Some(e);
                }
                st.changes += 1;
                self.send_all(&mut st, n, out);
            }
            RAction::Abandon(i) => {
                let c = &mut st.clients[i];
                c.c.abandon()?;
                c.stage = 0;
                c.unsure = true;
                st.abandons += 1;
            }
            RAction::GiveUp(i) => {
                let c = &mut st.clients[i];
                c.c.abandon()?;
                c.stage = 5;
                c.unsure = true;
                st.give_ups += 1;
                if self.sabotage != Sabotage::GiveUpWithoutUnlock {
                    // `RingClient::give_up`: an unlock routed as the lock was.
                    let mut out = Outs::new();
                    if let Err(e) = c.c.start(Op::Unlock, Key(c.key), &mut out) {
                        st.error = Some(format!("client give-up: {e}"));
                        return Some(st);
                    }
                    send_from(c, st.alive, &mut st.net, out);
                }
            }
            RAction::Restart(i) => {
                let key = Key(st.clients[i].key);
                let id = st.clients[i].c.id();
                // `RingClient::resume`: the entry as the key's primary in the service's
                // view records it (read-only; a settled primary answers the probe).
                let primary = ring.lookup(st.view, key)?;
                let writer = match &st.nodes[primary.0 as usize] {
                    RNode::Hilock(s) => s
                        .slots()
                        .iter()
                        .find(|e| e.key == key)
                        .and_then(|e| e.writer),
                    RNode::Paper(_) => return None,
                };
                // A new process: a new incarnation of the id (distinct from every other
                // client's, which are their indices below `CL`).
                let incarnation = st.clients[i].c.incarnation() + CL as u64;
                let mut c = ChordClient::new(id, ring, st.view)
                    .ok()?
                    .with_incarnation(incarnation);
                if let Some(w) = writer.filter(|w| w.client == id) {
                    if let Err(e) = c.resume_after(w) {
                        st.error = Some(format!("client resume_after: {e}"));
                    }
                }
                let cs = &mut st.clients[i];
                cs.c = c;
                cs.stage = 0;
                cs.unsure = true;
                cs.take_over = true;
                st.restarts += 1;
            }
            RAction::Duplicate(from, to, msg) => {
                st.net.push((from, to, msg));
                st.duplicates += 1;
            }
        }
        let lost: Vec<bool> = st
            .net
            .iter()
            .map(|m| Self::blocked(&st, m.0, m.1))
            .collect();
        let mut i = 0;
        st.net.retain(|_| {
            i += 1;
            !lost[i - 1]
        });
        st.net.sort();
        Some(st)
    }

    /// The action, what violates each `always` property that fails after it (in words),
    /// each message in flight on a line of its own, then the state.
    fn format_action(&self, action: &RAction) -> String {
        self.action_text(action)
    }

    fn format_step(&self, last: &RState, action: RAction) -> Option<String> {
        let next = self.next_state(last, action.clone())?;
        let mut s = format!(
            "{}{}",
            self.action_text(&action),
            crate::check::violations_line(self, &next)
        );
        for p in self.properties() {
            if p.expectation == stateright::Expectation::Always && !(p.condition)(self, &next) {
                s.push_str(&format!(
                    "\n  {}: {}",
                    p.name,
                    self.violation(p.name, &next)
                ));
            }
        }
        s.push('\n');
        for (f, t, m) in &next.net {
            s.push_str(&format!(
                "\nin flight {} → {}: {}",
                self.addr_name(*f),
                self.addr_name(*t),
                msg_label(m)
            ));
        }
        s.push_str(&format!("\n\n{next:#?}"));
        Some(s)
    }

    /// The path's message sequence: a lane per client (`c1`, …), per node slot (`n8`, …, by
    /// its ident) and one for the Chord layer; each message from the step that put it on
    /// the network to the step that delivered it, those still in flight after the last
    /// step dashed.
    fn as_svg(&self, path: Path<RState, RAction>) -> Option<String> {
        let clients = self.clients.len();
        let lane = |a: Addr| match a {
            Addr::Client(c) => usize::from(c.0).saturating_sub(1),
            Addr::Node(n) => clients + usize::from(n.0),
            Addr::Chord => clients + NS,
        };
        let mut lanes: Vec<String> = (1..=clients).map(|c| format!("c{c}")).collect();
        lanes.extend(self.idents.iter().map(|i| format!("n{i}")));
        lanes.push("chord".into());
        let mut d = crate::seq::Diagram::new(lanes);
        let wires = |st: &RState| -> Vec<crate::seq::Wire> {
            st.net
                .iter()
                .map(|(f, t, m)| crate::seq::Wire {
                    from: lane(*f),
                    to: lane(*t),
                    key: format!("{m:?}"),
                    label: msg_label(m),
                })
                .collect()
        };
        let word = |a: &RAction| {
            let t = format!("{a:?}");
            t.split('(').next().unwrap_or_default().to_lowercase()
        };
        let node = |n: NodeId| clients + usize::from(n.0);
        d.draw_path(&path.into_vec(), wires, |d, a| {
            match a {
                RAction::Deliver(f, t, m) => {
                    let key = format!("{m:?}");
                    d.deliver(lane(*f), lane(*t), &key, msg_label(m));
                    return Some((lane(*f), lane(*t), key));
                }
                RAction::Duplicate(f, _, m) => {
                    d.local(lane(*f), format!("duplicates {}", msg_label(m)))
                }
                RAction::Start(c)
                | RAction::Timeout(c)
                | RAction::Abandon(c)
                | RAction::GiveUp(c)
                | RAction::Restart(c) => d.local(*c, word(a)),
                RAction::Join(n)
                | RAction::Leave(n)
                | RAction::Crash(n)
                | RAction::Detect(n)
                | RAction::Isolate(n)
                | RAction::Heal(n)
                | RAction::Expire(n)
                | RAction::Suspect(n)
                | RAction::Reboot(n) => d.local(node(*n), word(a)),
            }
            None
        });
        Some(d.svg())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MUTEX, |m: &Self, st: &RState| m.mutex_ok(st)),
            Property::always(LOST, |m: &Self, st: &RState| m.lost_ok(st)),
            Property::always(NO_ERROR, |_, st: &RState| st.error.is_none()),
            Property::always(ONE_SERVER, |_, st: &RState| st.stale.is_none()),
            Property::always(FENCES, |_, st: &RState| st.fence_error.is_none()),
            Property::always(NOBODY, |m: &Self, st: &RState| m.nobody_ok(st)),
            Property::always(GAVE_UP, |_, st: &RState| Self::gave_up_ok(st)),
            Property::always(STUCK, |_, st: &RState| st.stuck.is_none()),
            Property::eventually(LIVE, |_, st: &RState| Self::finished(st)),
            Property::sometimes(GRANTED, |_, st: &RState| {
                st.clients.iter().any(|c| c.stage == 2)
            }),
            Property::sometimes(CHANGED, |_, st: &RState| st.view.epoch > 0),
        ]
    }
}
