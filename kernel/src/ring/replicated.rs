//! hilock's ring server: each key's entry lives on its service node (the primary) and the
//! `r` members after it; views have epochs.
//!
//! - A request carries the client's view. A server with an older view installs the newer
//!   one first; a request with an older view, or for a key this server is not primary of,
//!   is answered [`Answer::Redirect`] with the server's view — never served.
//! - A write (lock or unlock that changes the entry) gets version `(epoch, counter)`, is
//!   sent to the other `r` replicas, and the client is answered only when every one of them
//!   acknowledged it ([`Rule::WriteAcknowledged`]). A replica with a newer view refuses
//!   ([`ChordMsg::ReplicaNack`]); installing a view answers every write still waiting
//!   with a redirect, so a write of an old view completes only if every replica of the old
//!   view had it before leaving that view.
//! - A retried request is answered from the entry: a lock held by the asking client (the
//!   same id and incarnation, [`super::Holder`]) is
//!   [`Answer::Granted`] again, an unlock of a lock it does not hold is
//!   [`Answer::Released`] — a request is never served twice. The entry is written again
//!   (new version, same holder) and replicated before that answer: the first attempt may
//!   have reached only the old primary before a view change redirected it (the model
//!   checker found the grant from such an unreplicated entry).
//! - A late copy of a request (a lower request number of a client than one this server
//!   answered in its view, or a copy of a lock it refused) is answered again and not
//!   served ([`Rule::CopyAnswered`]; [`RingServer::step`], "Copies").
//! - A write in progress is sent again to a replica whose link was re-established
//!   ([`RingServer::reconnected`]): a cut shorter than the lease loses the `Replicate`s and
//!   `ReplicaAck`s it carried (the Chord lock paper's Fig. 2(a)4 RPC has the same gap;
//!   `docs/faults.md`, "Ring engine"). A replica acknowledges a copy of a write it already
//!   applied (same entry, same version) again and does not apply it twice
//!   ([`Rule::Idempotent`]).
//! - Installing a view hands over exactly the moved ranges: for every elementary arc
//!   ([`Ring::arc_of`]) this server has complete state for, every member that holds the arc
//!   in the new view but did not in the old one gets this server's entries of that arc
//!   ([`ChordMsg::Transfer`]). A server serves a key only once it has its arc (`ready`,
//!   on the first hand-over of it); entries are merged newest version first, a hand-over
//!   of an arc it is ready for already is not merged ([`RingServer::step`], "Hand-over"),
//!   entries of arcs it no longer holds are dropped.
//!
//! - A released entry is reclaimed when its room is needed ([`RingServer::step`],
//!   "Reclaim"): a new key on a full table takes the place of a free entry of a ready
//!   arc; the request floor of its client keeps the entry's retry guard.
//! - A lock that finds no room is answered [`Answer::Full`] and leaves nothing held
//!   ([`RingServer::step`], "Full replicas"): a primary whose own table is full of held
//!   keys writes nothing; a replica whose table is full refuses the primary's write
//!   ([`ChordMsg::ReplicaFull`]), and the primary writes the key back free, replicates
//!   that, and answers Full once every replica has it (a refusal left unanswered would
//!   keep the write waiting for ever, its key answering Retry, beyond any take-over).
//!
//! The membership service (etcd in cluster mode; the model's `Chord` actor) announces
//! views with [`ChordMsg::NewView`] and starts the next change only when every live member
//! of the current view has installed it and is ready for all its arcs.

use super::{
    node_sender, send, Addr, Answer, ChordError, ChordMsg, Holder, Key, NodeId, Op, Out, Report,
    Ring, Rule, Server, Slot, Token, Version, View,
};
use crate::msg::Sink;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pending {
    /// The entry as written, sent again by [`RingServer::reconnected`].
    slot: Slot,
    token: Token,
    answer: Answer,
    /// Replicas that have not acknowledged yet (bit per slot).
    need: u16,
    /// An unlock of the key by the write's own client (a later request of the same
    /// incarnation) that arrived while the write waited: served as soon as the write is
    /// acknowledged, with the view it was routed with ([`RingServer::step`], "Given-up
    /// locks").
    then: Option<(Token, View)>,
    /// A replica refused the write for want of room: once every other replica answered
    /// it, the lock is given back instead of granted.
    refused: bool,
}

/// Which requests of a client the ring server takes for stale retries and answers from
/// the entry without applying them ([`Rule::Superseded`]). An entry remembers one request,
/// its writer ([`Slot::writer`](super::Slot::writer)); a request of the same client that
/// [`Token::precedes`] it is stale: that client has already had a later request served
/// here. Not in the Chord lock paper (its table is `(oid, islocked)`): hilock's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RetryFence {
    /// No fence: a stale retry is served like a new request (the defect
    /// `spec/counterexamples/ring/ring-short-cut-join-stale-retry.json`).
    Off,
    /// The writer changes with the holder only. A re-grant to the holder (it locks again
    /// while it holds) keeps the older writer, so an unlock the holder sent before that
    /// re-grant and that is still in flight frees the lock it was just granted again: two
    /// clients hold the key (`spec/counterexamples/ring/ring-regrant-keeps-writer.json`).
    HolderChanges,
    /// Shipped: the writer also moves to every later request of the client it names (a
    /// re-grant, a repeated unlock), so that client's older requests stay stale.
    #[default]
    Latest,
}

/// The newest request of one client id this server answered in its current view
/// ([`RingServer`]'s request memory), of the incarnation it heard from last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Answered {
    /// The incarnation that sent it.
    incarnation: u64,
    /// Its request number.
    seq: u64,
    /// The refusal it was answered with, if it was a lock answered [`Answer::Refused`],
    /// [`Answer::InUse`] or [`Answer::Full`].
    refusal: Option<Answer>,
}

/// What a reclaimed entry's writer ([`Slot::writer`]) guarded, kept per client id for
/// the rest of the view ([`RingServer::step`], "Reclaim"): a request of that client
/// numbered `seq` or below, for a key without an entry, is a stale retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Floor {
    /// The incarnation the writers were of; `None` once writers of two incarnations of the
    /// id were folded in: then `seq` is compared with every incarnation's numbers.
    incarnation: Option<u64>,
    /// The highest request number of the folded writers.
    seq: u64,
}

impl Floor {
    /// The floor once `w` is folded in.
    fn with(row: Option<Floor>, w: Token) -> Floor {
        match row {
            None => Floor {
                incarnation: Some(w.incarnation),
                seq: w.seq,
            },
            Some(f) => Floor {
                incarnation: f.incarnation.filter(|i| *i == w.incarnation),
                seq: f.seq.max(w.seq),
            },
        }
    }

    /// Whether `token` is numbered at or below this floor (of its incarnation). At: a
    /// free entry's writer is the unlock that freed it (or a later unlock of its client),
    /// and a copy of it is answered Released from the free key, as the entry answered it.
    fn covers(self, token: Token) -> bool {
        self.incarnation.is_none_or(|i| i == token.incarnation) && token.seq <= self.seq
    }
}

/// One server of hilock's ring: slots `N`, table capacity `T`, and the client ids below
/// `C` it serves (its request memory has one row per client id; 256, the default, is
/// every [`ClientId`](super::ClientId)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RingServer<const N: usize, const T: usize, const C: usize = 256> {
    id: NodeId,
    ring: Ring<N>,
    r: u8,
    view: View,
    slots: heapless::Vec<Slot, T>,
    /// Arcs (bit per slot) this server has complete state for.
    ready: u16,
    clock: u32,
    pending: heapless::Vec<Pending, T>,
    /// Lost its lease: answers no request ([`RingServer::stop`]).
    stopped: bool,
    /// Which requests are stale retries ([`RetryFence::Latest`], but for
    /// [`RingServer::with_retry_fence`]).
    fence: RetryFence,
    /// Per client id, the newest request this server answered in its current view
    /// (cleared when it installs a newer view): see [`RingServer::step`], "Copies".
    answered: [Option<Answered>; C],
    /// Whether the request memory is used (off only for
    /// [`RingServer::without_request_memory`]).
    memory: bool,
    /// Whether a hand-over of an arc that is ready already is still merged (only for
    /// [`RingServer::merging_late_hand_overs`]).
    late_hand_overs: bool,
    /// Per client id, the request floor of the entries reclaimed in the current view
    /// (cleared when it installs a newer view): see [`RingServer::step`], "Reclaim".
    floors: [Option<Floor>; C],
    /// Entries the table holds at most: `T`, but for [`RingServer::with_table`].
    limit: usize,
    /// Whether an unlock behind its own lock's write waits for it (off only for
    /// [`RingServer::without_deferred_unlocks`]).
    defer: bool,
    /// Whether a lock refused by a full replica is given back (off only for
    /// [`RingServer::ignoring_full_replicas`]).
    give_back: bool,
}

/// What a request comes to, decided from the state as it is after the request's view is
/// installed (the same before and after [`RingServer::install`]: see [`RingServer::decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Old view, or not the primary: redirect.
    Redirect,
    /// Arc not here yet, or a write on the key pending: retry.
    Retry,
    /// An unlock by the client whose lock of the key is being written: served once that
    /// write is acknowledged ("Given-up locks").
    Defer,
    /// Held by another client.
    Refused,
    /// Held by another incarnation of the asking client id: [`Answer::InUse`].
    InUse,
    /// A lock of a new key that the table has no room for: [`Answer::Full`], nothing
    /// written.
    Full,
    /// A stale retry: older than the request that set the entry ([`Slot::writer`]);
    /// answered from the entry, nothing written.
    Superseded(Answer),
    /// A copy of a request this server already answered in its view, or older than one
    /// it answered (the request memory); answered again, nothing written.
    Copy(Answer),
    /// Write the entry and answer once the replicas `need` acknowledged.
    Write {
        holder: Option<Holder>,
        writer: Option<Token>,
        answer: Answer,
        idempotent: bool,
        /// An [`Op::TakeOver`] that takes the key from another incarnation.
        taken_over: bool,
        need: u16,
    },
}

impl<const N: usize, const T: usize, const C: usize> RingServer<N, T, C> {
    /// The most messages one step sends: redirects of every waiting write, a transfer per
    /// member, and a write to every replica.
    pub const MAX_OUTPUTS: usize = T + 2 * N + 1;

    /// The default number of successor replicas.
    pub const DEFAULT_R: u8 = 2;

    /// A server in `view` with `r` successor replicas (`1 ≤ r < N`). A member of `view`
    /// starts ready for its arcs (an empty table is complete at the start); a server that
    /// joins later starts with nothing. So only the ring's first members are made members
    /// here: a new process of a slot that was a member (a restart) is made in a view
    /// without it and joins, which hands it its arcs (the runtime's membership service
    /// and etcd mode see to it; `docs/faults.md`, "Ring engine").
    pub fn new(id: NodeId, ring: Ring<N>, r: u8, view: View) -> Result<Self, ChordError> {
        ring.ident(id).ok_or(ChordError::BadView)?;
        ring.check_view(view)?;
        if r == 0 || r as usize >= N {
            return Err(ChordError::BadReplication);
        }
        let ready = if view.has(id) {
            ring.covered(view, id, r + 1)
        } else {
            0
        };
        Ok(RingServer {
            id,
            ring,
            r,
            view,
            slots: heapless::Vec::new(),
            ready,
            clock: 0,
            pending: heapless::Vec::new(),
            stopped: false,
            fence: RetryFence::Latest,
            answered: [None; C],
            memory: true,
            late_hand_overs: false,
            floors: [None; C],
            limit: T,
            defer: true,
            give_back: true,
        })
    }

    /// The server with a table of at most `entries` entries (at most `T`): so that the
    /// model checker and the tests fill a table, and watch entries reclaimed, with a few
    /// keys ([`RingServer::step`], "Reclaim"). Errors: 0 entries, or more than `T`
    /// ([`ChordError::TableFull`]: no table of that size).
    pub fn with_table(mut self, entries: usize) -> Result<Self, ChordError> {
        if entries == 0 || entries > T {
            return Err(ChordError::TableFull);
        }
        self.limit = entries;
        Ok(self)
    }

    /// The server without its request memory: a copy of a request it already answered
    /// Refused, or one older than a request of the same client it answered since, is
    /// served like a new request. Kept only so that the model checker shows the memory
    /// matters (the model's `Sabotage::NoRequestMemory` finds
    /// `spec/counterexamples/ring/ring-late-duplicate-locks-for-nobody.json` again); no
    /// deployment wants it.
    pub fn without_request_memory(mut self) -> Self {
        self.memory = false;
        self
    }

    /// The server as it was before the hand-over rule ([`RingServer::step`], "Hand-over"):
    /// a hand-over that reaches it after it is ready for the arc (and may have answered
    /// from it) still overwrites the arc's entries with newer ones. Kept only so that the
    /// model checker shows the rule matters (the model's `Sabotage::LateHandOverMerged`
    /// finds `spec/counterexamples/ring/ring-join-after-crash-stale-first-transfer.json`
    /// again); no deployment wants it.
    pub fn merging_late_hand_overs(mut self) -> Self {
        self.late_hand_overs = true;
        self
    }

    /// The server as it was before the retry fence: a request older than the one that set
    /// the entry ([`Slot::writer`]) is served like a new one. Kept only so that the model
    /// checker shows the fence matters (the model's `Sabotage::NoRetryFence` finds
    /// `spec/counterexamples/ring/ring-short-cut-join-stale-retry.json` again); no
    /// deployment wants it.
    pub fn without_retry_fence(self) -> Self {
        self.with_retry_fence(RetryFence::Off)
    }

    /// The server with another retry fence than the shipped [`RetryFence::Latest`]. Kept
    /// only so that the model checker shows what the shipped fence prevents (the model's
    /// `Sabotage::NoRetryFence` and `Sabotage::WriterFollowsHolder`); no deployment wants
    /// it.
    pub fn with_retry_fence(mut self, fence: RetryFence) -> Self {
        self.fence = fence;
        self
    }

    /// The server as it was before "Given-up locks" ([`RingServer::step`]): an unlock
    /// that reaches its own lock's write in progress is answered Retry, which a client
    /// that gave the lock up never follows. Kept only so that the model checker shows the
    /// rule matters (the model's `Sabotage::NoDeferredUnlock`); no deployment wants it.
    pub fn without_deferred_unlocks(mut self) -> Self {
        self.defer = false;
        self
    }

    /// The server as it was before "Full replicas" ([`RingServer::step`]) at the primary:
    /// a replica's refusal of a write for want of room ([`ChordMsg::ReplicaFull`]) is
    /// ignored, so the write waits for ever and its key answers Retry for ever. Kept only
    /// so that the model checker shows the give-back matters (the model's
    /// `Sabotage::IgnoreFullReplica`); no deployment wants it.
    pub fn ignoring_full_replicas(mut self) -> Self {
        self.give_back = false;
        self
    }

    /// This server.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// Its view.
    pub fn view(&self) -> View {
        self.view
    }
    /// Its entries.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }
    /// Who holds `key` in this server's table (the client id; [`RingServer::holding`]
    /// with its incarnation).
    pub fn holder(&self, key: Key) -> Option<super::ClientId> {
        self.holding(key).map(|h| h.client)
    }
    /// Who holds `key` in this server's table: the client id and its incarnation.
    pub fn holding(&self, key: Key) -> Option<Holder> {
        self.slots
            .iter()
            .find(|s| s.key == key)
            .and_then(|s| s.holding())
    }
    /// Whether it has every arc it holds in its view, and its view is `v`.
    pub fn settled_in(&self, v: View) -> bool {
        self.view == v && self.ready == self.covered(v)
    }
    /// Writes waiting for acknowledgements.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// The entry as written by the write of `key` waiting for acknowledgements, if there
    /// is one.
    pub fn writing(&self, key: Key) -> Option<Slot> {
        self.pending
            .iter()
            .find(|p| p.slot.key == key)
            .map(|p| p.slot)
    }

    /// The server lost its lease with the membership service (it could not renew it in
    /// time: a partition, a pause): from now on it answers no request
    /// ([`Rule::LeaseLost`]), so that the membership service may give its ranges to
    /// another server once the lease has run out, without two servers answering for one
    /// key. It drops the writes it was waiting for unanswered (their clients time out and
    /// ask the new primary, which answers from the entry if the write reached the
    /// replicas), and keeps acknowledging replica writes and installing views (it is still
    /// a member until the service removes it). Permanent: a server that lost its lease
    /// comes back only by joining again. The model's `Expire` action.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.pending.clear();
    }
    /// Whether it lost its lease.
    pub fn stopped(&self) -> bool {
        self.stopped
    }
    /// Whether a write of `client`'s (that incarnation of the id) is waiting for
    /// acknowledgements here.
    pub fn waits_for(&self, client: Holder) -> bool {
        self.pending.iter().any(|p| {
            p.token.holder() == client || p.then.is_some_and(|(t, _)| t.holder() == client)
        })
    }

    /// The link to `peer` was (re)established: sends `peer` again the
    /// [`ChordMsg::Replicate`] of every write in progress that `peer` has not acknowledged,
    /// exactly as first sent (same view, same entry and version, same request), and
    /// returns how many it sent. Changes nothing.
    ///
    /// The view is the server's view, which is the one the write was first sent in: a
    /// write in progress does not outlive its view (installing a newer one answers every
    /// waiting write with [`Answer::Redirect`] and forgets it, and only a newer epoch
    /// changes the view), so nothing is resent in a later view. The write's own view is
    /// the one a copy must carry: with a later one, a replica that installed it would
    /// accept a write of an old epoch from a server that may no longer be the key's
    /// primary (`kernel/tests/ring_reconnect.rs`,
    /// `a_write_in_progress_ends_with_its_view_and_is_not_resent_in_the_next`).
    ///
    /// Why: a connection that breaks loses what it carried. A member cut off for less than
    /// its lease (a partition, a pause: the model's `Isolate` then `Heal`) keeps its writes
    /// waiting, but their `Replicate` messages, or the replicas' `ReplicaAck`s, died with
    /// the connection, and nothing else sends them again: the write and its client waited
    /// for ever (`spec/counterexamples/ring/ring-short-cut-strands-write.json`;
    /// `docs/faults.md`, "Ring engine"). The Chord lock paper's own backup write, Fig. 2(a)4
    /// `successor.olock_b.modify`, is an RPC with no answer for a lost call either. A
    /// replica that already applied the write acknowledges the copy again without
    /// applying it twice (same version: [`Rule::Idempotent`]); one that installed a newer
    /// view refuses it ([`ChordMsg::ReplicaNack`]), which redirects the write here. The
    /// runtime calls this when it opens a new connection to `peer`, on either side; the
    /// model calls it for both ends of every link on `Heal`.
    ///
    /// Errors, with nothing sent: `peer` is not one of the `N` slots or is this server
    /// ([`ChordError::BadSender`]); `out` has no room for the copies
    /// ([`ChordError::OutputsFull`]).
    pub fn reconnected<S: Sink<Out<T>>>(
        &self,
        peer: NodeId,
        out: &mut S,
    ) -> Result<usize, ChordError> {
        if node_sender::<N>(Addr::Node(peer))? == self.id {
            return Err(ChordError::BadSender);
        }
        let bit = 1u16 << peer.0;
        let owed = self.pending.iter().filter(|p| p.need & bit != 0);
        let n = owed.clone().count();
        if out.room() < n {
            return Err(ChordError::OutputsFull);
        }
        for p in owed {
            self.replicate(out, peer, p.slot, p.token);
        }
        Ok(n)
    }

    /// Sends `to` the write of `slot` for `token` in this server's view (first sent by
    /// [`RingServer::step`], again by [`RingServer::reconnected`]).
    fn replicate<S: Sink<Out<T>>>(&self, out: &mut S, to: NodeId, slot: Slot, token: Token) {
        let view = self.view;
        send(
            out,
            Addr::Node(to),
            ChordMsg::Replicate { view, slot, token },
        );
    }

    fn copies(&self) -> u8 {
        self.r + 1
    }

    fn covered(&self, v: View) -> u16 {
        if v.has(self.id) {
            self.ring.covered(v, self.id, self.copies())
        } else {
            0
        }
    }

    /// The arcs of a hand-over of `arcs` in view `v` that this server merges once `v`
    /// is installed: those it holds in `v` and is not yet ready for. An arc it is ready
    /// for already answers requests; a late hand-over must not change its entries.
    fn taken(&self, v: View, arcs: u16) -> u16 {
        let ready = if self.late_hand_overs {
            0
        } else if v.epoch > self.view.epoch {
            self.ready & self.covered(v)
        } else {
            self.ready
        };
        arcs & self.covered(v) & !ready
    }

    fn arc_key(&self, arc: usize) -> Key {
        Key(self.ring.ident(NodeId(arc as u16)).unwrap_or(0))
    }

    /// Writes `s` unless the entry is newer; a new key on a full table takes the place of
    /// a reclaimed entry ([`RingServer::reclaim_one`]), or, with no entry spare, is
    /// reclaimed as it is written (it is spare itself: [`RingServer::fits`] checked the
    /// room).
    fn upsert(&mut self, s: Slot) {
        match self.slots.iter_mut().find(|x| x.key == s.key) {
            Some(x) => {
                if s.version > x.version {
                    *x = s;
                }
            }
            None => {
                if self.slots.len() >= self.limit && !self.reclaim_one() {
                    self.fold(s);
                    return;
                }
                let _ = self.slots.push(s);
            }
        }
    }

    /// Whether entry `s` may be reclaimed once `v` is installed ([`RingServer::step`],
    /// "Reclaim"): the key is free, its arc is ready or in `soon` (a hand-over still to
    /// come for it would otherwise write an older entry back; `soon` are the arcs a
    /// hand-over being merged makes ready, for its own entries only), and its writer's
    /// guard fits the request floors (a client id below `C`, or a writer of an older
    /// view, which guards nothing any more).
    fn spare(&self, s: &Slot, v: View, soon: u16) -> bool {
        let newer = v.epoch > self.view.epoch;
        let (ready, epoch) = if newer {
            (self.ready & self.covered(v), v.epoch)
        } else {
            (self.ready, self.view.epoch)
        };
        let ready = ready | soon;
        let guarded =
            s.version.epoch < epoch || s.writer.is_none_or(|w| usize::from(w.client.0) < C);
        s.holder.is_none() && ready & (1 << self.ring.arc_of(s.key)) != 0 && guarded
    }

    /// Drops the spare entry written longest ago (the lowest version, then the lowest
    /// key), if there is one, and says whether it did.
    fn reclaim_one(&mut self) -> bool {
        let view = self.view;
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| self.spare(s, view, 0))
            .min_by_key(|(_, s)| (s.version, s.key))
            .map(|(i, _)| i);
        let Some(i) = victim else {
            return false;
        };
        let s = self.slots.remove(i);
        self.fold(s);
        true
    }

    /// Folds the writer of reclaimed entry `s` into the request floors, if `s` was
    /// written in this view (an older writer guards nothing any more: "Reclaim").
    fn fold(&mut self, s: Slot) {
        if let (true, Some(w)) = (s.version.epoch == self.view.epoch, s.writer) {
            if let Some(row) = self.floors.get_mut(usize::from(w.client.0)) {
                *row = Some(Floor::with(*row, w));
            }
        }
    }

    /// The view this server has once `v` is installed (the newer of the two).
    fn after(&self, v: View) -> View {
        if v.epoch > self.view.epoch {
            v
        } else {
            self.view
        }
    }

    /// Whether the entries `new` fit into the table as it is once `v` is installed
    /// (installing drops the entries of arcs no longer held), reclaiming spare entries
    /// ([`RingServer::spare`]) where room is needed, or a new entry itself if it is spare
    /// and no other is (its arc ready, or in `soon`: a hand-over's arcs, which it makes
    /// ready).
    fn fits(&self, v: View, new: impl Iterator<Item = Slot>, soon: u16) -> Result<(), ChordError> {
        let kept: &dyn Fn(&Slot) -> bool = if v.epoch > self.view.epoch {
            let cov = self.covered(v);
            &move |s: &Slot| cov & (1 << self.ring.arc_of(s.key)) != 0
        } else {
            &|_: &Slot| true
        };
        let mut len = self.slots.iter().filter(|s| kept(s)).count();
        let mut spare = self
            .slots
            .iter()
            .filter(|s| kept(s) && self.spare(s, v, 0))
            .count();
        let mut seen: heapless::Vec<Key, T> = heapless::Vec::new();
        for n in new {
            let k = n.key;
            if seen.contains(&k) || self.slots.iter().any(|s| s.key == k && kept(s)) {
                continue;
            }
            if len < self.limit {
                len += 1;
            } else if spare > 0 {
                spare -= 1;
            } else if !self.spare(&n, v, soon) {
                return Err(ChordError::TableFull);
            }
            if seen.push(k).is_err() {
                return Err(ChordError::TableFull);
            }
        }
        Ok(())
    }

    /// What a request of `token` to `op` on `key`, routed with `view`, comes to. Decided
    /// from the state after installing `view`: the view [`RingServer::after`], the ready
    /// arcs it keeps, and no pending write if it is newer (installing redirects them).
    fn decide(&self, token: Token, op: Op, key: Key, view: View) -> Decision {
        let v = self.after(view);
        let newer = v != self.view;
        if view.epoch < v.epoch || self.ring.lookup(v, key) != Some(self.id) {
            return Decision::Redirect;
        }
        let ready = if newer {
            self.ready & self.covered(v)
        } else {
            self.ready
        };
        let busy = !newer && self.pending.iter().any(|p| p.slot.key == key);
        if ready & (1 << self.ring.arc_of(key)) == 0 {
            return Decision::Retry;
        }
        if busy {
            // Given-up locks: an unlock of the lock this client's write in progress grants.
            let own = self.pending.iter().any(|p| {
                p.slot.key == key
                    && p.then.is_none()
                    && p.answer == Answer::Granted
                    && p.token.precedes(token)
            });
            return if self.defer && op == Op::Unlock && own {
                Decision::Defer
            } else {
                Decision::Retry
            };
        }
        // The primary holds the key's arc in `v`, so installing keeps its entry.
        let entry = self.slots.iter().find(|s| s.key == key);
        let holder = entry.and_then(|s| s.holding());
        let last = entry.and_then(|s| s.writer);
        let me = Some(token.holder());
        // Held by another incarnation of the asking client id.
        let twin = holder.is_some_and(|h| h.client == token.client) && holder != me;
        let from_entry = match op {
            Op::Lock | Op::TakeOver if holder == me => Answer::Granted,
            Op::Lock if twin => Answer::InUse,
            Op::Lock | Op::TakeOver => Answer::Refused,
            _ => Answer::Released,
        };
        // A copy (see `step`, "Copies"): installing `v` would clear the memory.
        let seen = if newer { None } else { self.answered(token) };
        if let Some(a) = seen {
            if token.seq < a.seq {
                return Decision::Copy(from_entry);
            }
            if let (true, Some(refusal)) = (token.seq == a.seq, a.refusal) {
                return Decision::Copy(refusal);
            }
        }
        // A stale retry: a later request of this client set the entry, so the client has
        // had this request's answer (in the saved trace from the old primary, before the
        // client released the lock here). Serving it would lock again what the client
        // released, or free what it locked again; it is answered from the entry and
        // nothing is written.
        //
        // A key without an entry may have had one, reclaimed in this view: its writer's
        // guard is the client's request floor ("Reclaim").
        let floored = !newer
            && entry.is_none()
            && self
                .floors
                .get(usize::from(token.client.0))
                .copied()
                .flatten()
                .is_some_and(|f| f.covers(token));
        if self.fence != RetryFence::Off && (last.is_some_and(|w| token.precedes(w)) || floored) {
            return Decision::Superseded(from_entry);
        }
        // A request whose outcome the entry already shows (a retry after a redirect, whose
        // first write may never have reached the replicas) is written again, so that it is
        // answered only once every replica has it.
        //
        // A lock of a key held by another incarnation of the same client id is not a
        // re-grant: that is another process given the id (or a killed run's hold), and
        // granting it made two holders. It is answered InUse and nothing is written; only
        // a take-over, whose asker vouches that the other incarnation is dead, takes the
        // key from it. An unlock frees only its own incarnation's hold.
        let (holder, answer, idempotent) = match (op, holder) {
            (Op::Lock | Op::TakeOver, h) if h == me => (me, Answer::Granted, true),
            (Op::Lock, Some(_)) if twin => return Decision::InUse,
            (Op::TakeOver, Some(_)) if twin => (me, Answer::Granted, false),
            (Op::Lock | Op::TakeOver, Some(_)) => return Decision::Refused,
            (Op::Lock | Op::TakeOver, None) => (me, Answer::Granted, false),
            (_, h) if h == me => (None, Answer::Released, false),
            (_, h) => (h, Answer::Released, true),
        };
        let need = self.ring.replicas(v, key, self.copies()) & !(1 << self.id.0);
        // The writer is the newest request of the client that set the holder: it changes
        // with the holder, and with every later request of that same client (a re-grant to
        // the holder, a repeated unlock of the last holder), so that the client's older
        // requests still in flight stay stale retries. Another client's idempotent rewrite
        // (an unlock of a lock it does not hold) keeps it.
        let same_client = last.is_some_and(|w| w.holder() == token.holder());
        let follows = self.fence == RetryFence::Latest && same_client;
        let writer = if entry.is_none() || holder != entry.and_then(|s| s.holding()) || follows {
            Some(token)
        } else {
            last
        };
        // Room: the entry as `serve` writes it, but for the counter, which no room depends
        // on. Only a new key with a holder can find none ("Reclaim", "Full replicas").
        let slot = Slot {
            key,
            holder: holder.map(|h| h.client),
            incarnation: holder.map_or(0, |h| h.incarnation),
            version: Version {
                epoch: v.epoch,
                n: 0,
            },
            writer,
        };
        if self.fits(view, core::iter::once(slot), 0).is_err() {
            return Decision::Full;
        }
        Decision::Write {
            holder,
            writer,
            answer,
            idempotent,
            taken_over: twin && op == Op::TakeOver,
            need,
        }
    }

    /// The newest request of `token`'s client this server answered in its view, if the
    /// memory is on and that request was of `token`'s incarnation.
    fn answered(&self, token: Token) -> Option<Answered> {
        if !self.memory {
            return None;
        }
        self.answered
            .get(usize::from(token.client.0))
            .copied()
            .flatten()
            .filter(|a| a.incarnation == token.incarnation)
    }

    /// Remembers that `token` was answered (`refusal`: with [`Answer::Refused`],
    /// [`Answer::InUse`] or [`Answer::Full`]) in this view, unless a later request of its
    /// incarnation was. A
    /// request of another incarnation of the id takes the row: the memory has one row per
    /// client id, of the incarnation it heard from last (`step`, "Copies").
    fn remember(&mut self, token: Token, answer: Answer) {
        let refusal =
            matches!(answer, Answer::Refused | Answer::InUse | Answer::Full).then_some(answer);
        if let Some(row) = self.answered.get_mut(usize::from(token.client.0)) {
            if row.is_none_or(|a| a.incarnation != token.incarnation || a.seq < token.seq) {
                *row = Some(Answered {
                    incarnation: token.incarnation,
                    seq: token.seq,
                    refusal,
                });
            }
        }
    }

    /// Installs `v` if it is newer: redirects waiting writes, hands over moved arcs,
    /// drops arcs no longer held.
    fn install<S: Sink<Out<T>>>(&mut self, v: View, out: &mut S, rep: &mut Report) {
        if v.epoch <= self.view.epoch {
            return;
        }
        let old = self.view;
        for p in self.pending.iter() {
            answer(out, p.token, p.slot.version.epoch, Answer::Redirect(v));
        }
        self.pending.clear();
        for y in 0..N {
            let yn = NodeId(y as u16);
            if yn == self.id || !v.has(yn) {
                continue;
            }
            let mut arcs = 0u16;
            for a in 0..N {
                if self.ready & (1 << a) == 0 {
                    continue;
                }
                let k = self.arc_key(a);
                let bit = 1u16 << y;
                let new = self.ring.replicas(v, k, self.copies());
                let was = self.ring.replicas(old, k, self.copies());
                if new & bit != 0 && was & bit == 0 {
                    arcs |= 1 << a;
                }
            }
            if arcs != 0 {
                let mut slots = heapless::Vec::new();
                for s in &self.slots {
                    if arcs & (1 << self.ring.arc_of(s.key)) != 0 {
                        let _ = slots.push(*s);
                    }
                }
                send(
                    out,
                    Addr::Node(yn),
                    ChordMsg::Transfer {
                        view: v,
                        arcs,
                        slots,
                    },
                );
            }
        }
        // The memory is of this view's requests: a request of an older view is redirected
        // from now on, never served here.
        self.answered = [None; C];
        // So are the request floors: they guard against copies of this view's requests
        // ("Reclaim").
        self.floors = [None; C];
        let cov = self.covered(v);
        self.ready &= cov;
        let ring = self.ring;
        self.slots.retain(|s| cov & (1 << ring.arc_of(s.key)) != 0);
        self.view = v;
        rep.insert(Rule::ViewInstalled);
    }

    /// Handles one message from `from`. On error nothing changed and nothing was sent.
    ///
    /// # Copies
    /// The network may deliver a client's request more than once (a duplicate, or a
    /// resend whose original survived). A refused lock writes nothing, so the entry cannot
    /// tell a late copy of it from a new request: served after the key became free, it
    /// locked the key for a client that no longer waits for it
    /// (`spec/counterexamples/ring/ring-late-duplicate-locks-for-nobody.json`). So the server
    /// remembers, per client id, the newest request it answered in its current view
    /// ([`Rule::CopyAnswered`]): a request of that client with a lower number, or with the
    /// same number when that request was a lock answered Refused, is a copy: answered
    /// again (Refused, or from the entry as a stale retry) and nothing is written. Request
    /// numbers never wrap ([`Token::seq`]), so "lower" holds for any distance. The memory
    /// is dropped when the server installs a newer view: a request carries the view its
    /// client routed it with, and only that view's primary serves it, in that view (any
    /// other server, and this one once it installed a newer view, redirects it). A copy
    /// sent into a newer view is the client's newest, and the client takes an answer
    /// only from a copy sent in its newest view ([`super::ChordClient::on_reply`]).
    ///
    /// Request numbers are an incarnation's own ([`Token::incarnation`]): the row holds
    /// the incarnation it was written by, a request of another incarnation of the id is
    /// not compared with it and takes the row over. One incarnation per id is the normal
    /// case (a restarted process's predecessor is dead); while two processes share an id,
    /// a late copy of the one's request after the other's was answered is not recognised
    /// by the memory (the retry fence and the holder's incarnation still judge it, so it
    /// never makes a second holder: [`Answer::InUse`]).
    ///
    /// # Incarnations
    /// A key held by incarnation `i` of client id `c` is granted to no other incarnation
    /// of `c` by a lock ([`Answer::InUse`], [`Rule::IdInUse`], nothing written) and freed
    /// only by `i`'s unlock (another incarnation's unlock is answered Released and frees
    /// nothing); [`Op::TakeOver`] of another incarnation of `c` makes it the holder
    /// ([`Rule::TakenOver`]), for the run that replaces a killed one. Without this a
    /// second process given the id was granted the key as a re-grant to the holder, and
    /// both ran under it.
    ///
    /// # Given-up locks
    /// A client that gives a lock up before its answer (its bound passed, it was
    /// interrupted) sends an unlock of the key on the same connection and stops; nothing
    /// of it asks again. A write of a key in progress makes every other request of the key
    /// answer [`Answer::Retry`], which such a client never follows: its lock, served when
    /// the paused primary (or replica) went on, stayed held for nobody. So an unlock by
    /// the very client (same incarnation, a later request number) whose lock of the key is
    /// the write in progress waits for that write ([`Rule::UnlockDeferred`], one per
    /// write) and is served as a new request the moment the write is acknowledged; its
    /// answer goes to the client as any other. A view installed before that drops it
    /// unanswered (its client asks nothing again; the step's output bound has no room for
    /// a second redirect per write): a lock given up while its write is redirected by a
    /// view change may stay held until `--take-over`. Any other request of a key being
    /// written is answered Retry.
    ///
    /// # Hand-over
    /// An arc this server holds in its new view and did not hold in the previous one is
    /// ready — its keys served — once the first [`ChordMsg::Transfer`] of it arrives; its
    /// entries are merged newest version first. A hand-over of an arc this server is
    /// ready for already is not merged: from the moment it is ready it may have answered
    /// from the arc's entries (a refusal writes nothing), so they change only by its own
    /// writes and its primary's [`ChordMsg::Replicate`]s. Enough: every hand-over of an
    /// arc holds every acknowledged write of it (a write of an old view is acknowledged
    /// only once every replica of that view had it, and a replica that installed the new
    /// view, which it does before it hands over, refuses it). Hand-overs differ only in
    /// unacknowledged writes — the crashed primary's last write at one replica, the new
    /// primary's own write that no replica acknowledged before the view changed — whose
    /// clients had no answer and ask again. Merged late, such a write made the joiner's
    /// entry name a client it had refused, who held nothing
    /// (`spec/counterexamples/ring/ring-join-after-crash-stale-first-transfer.json`;
    /// [`RingServer::merging_late_hand_overs`]). The member that sent the ignored
    /// hand-over keeps its own newer unacknowledged entry until the key is written again
    /// in the new view.
    ///
    /// # Reclaim
    /// Not in the Chord lock paper, whose table rows are deleted only by `s_dellock`
    /// (Fig. 2(c)): hilock's. A new key on a full table (`T` entries, or
    /// [`RingServer::with_table`]'s) takes the place of a spare entry: a free key (no
    /// holder) of an arc this server is ready for; the one written longest ago goes. With
    /// none spare, a new entry that is spare itself (an unlock's, a replica write freeing
    /// the key, a free key of the arcs a hand-over makes ready) is reclaimed as it is
    /// written: its table has no room for a free key, and a key without an entry is free.
    /// Only then is there no room: every entry names a holder or is of an arc not handed
    /// over yet, and so does the new one (a lock is answered [`Answer::Full`], "Full
    /// replicas"; a hand-over is refused with [`ChordError::TableFull`]). A free entry
    /// whose write is still waiting for its replicas
    /// (an unlock, or an unlock's copy written again) is spare too: the write in progress
    /// keeps its own copy of the entry for the replicas and for a resend, its client is
    /// answered when they acknowledge it, and the key answers Retry until then; a key
    /// without an entry is free, as the write says. Reclaiming when room is needed, not at
    /// release, keeps every entry (its version and writer) for as long as there is room,
    /// so that nothing is given up that is not needed. A dropped entry held two things:
    ///
    /// - Its version, which orders the key's writes for merges. The next holder's fence
    ///   does not grow from it: a write's version is the writing server's view epoch and
    ///   its own counter ([`Version`]), and in one epoch a key has one primary, whose
    ///   counter only grows; a later epoch is larger whatever the counter. So a key written
    ///   again after its entry was dropped still gets a larger version than every earlier
    ///   write of it. What the version also did, keep an older copy of the entry from
    ///   being merged over it, is why only an arc that is ready loses entries: a ready arc
    ///   takes no hand-over, and a replica write of this view comes from the key's one
    ///   primary, which writes the key again only once the earlier write is acknowledged.
    /// - Its writer ([`Slot::writer`]), the retry fence: a request of that client numbered
    ///   below it is stale. A client numbers its requests across keys, one at a time
    ///   ([`Token::seq`]), so the writer's guard is folded into the client id's request
    ///   floor, the highest reclaimed writer's number, and a request for a key without an
    ///   entry numbered at or below the floor is answered from the (free) key and not
    ///   applied ([`Rule::Superseded`]; at: the writer itself, an unlock, answered
    ///   Released as the entry answered a copy of it, but not written again). The floor is per incarnation; once writers of two
    ///   incarnations of one id are folded, it compares every incarnation's numbers
    ///   (stricter: the runtime's clients number from the clock, so a later process
    ///   numbers above an earlier one's). Floors are kept for the current view only,
    ///   and travel in no message: a request is served only in the view it was routed
    ///   with, and a client routes with ever newer views, so a stale copy is older than
    ///   a writer of its own view (or of a later one, whose servers redirect it); in this
    ///   view the key's writes are this server's, so this server's floor holds every
    ///   writer that can make the copy stale. An entry written in an older view is
    ///   dropped without a floor.
    ///
    /// # Full replicas
    /// Not in the Chord lock paper, whose tables have no bound: hilock's. A key's entry is
    /// on its primary and its `r` replicas, and each server's table holds its own keys and
    /// its replicas' together, so a replica can be full of held keys while the primary
    /// has room. Only a write that adds an entry with a holder for a key the table has no
    /// entry of can find no room (`fits`): a key already there is written
    /// over, and a free entry is spare where its arc is ready (it is reclaimed as it is
    /// written, a key without an entry being free).
    ///
    /// - A lock whose primary has no room is answered [`Answer::Full`] ([`Rule::NoRoom`])
    ///   and writes nothing, as a refusal; the request memory keeps the answer, so a copy
    ///   of the request is answered Full again, never served ("Copies").
    /// - A replica with no room for a write applies nothing and answers
    ///   [`ChordMsg::ReplicaFull`] with the write's version ([`Rule::ReplicaFull`]). For
    ///   a write that grants the lock, the primary waits until every other replica
    ///   answered it, then gives the lock back ([`Rule::GivenBack`]): it writes the key
    ///   free again (a new version, the same writer) and replicates that like any write; the key answers Retry
    ///   meanwhile, and the client is answered Full only once every replica acknowledged
    ///   the free entry. Waiting for the others first keeps this server's one rule for a
    ///   key's writes, that the next is sent only once the last was answered by every
    ///   replica, so a replica never gets the free entry before the lock, which could
    ///   then be applied over it once the free entry was reclaimed. The request memory
    ///   keeps the answer Full, so a copy of the request is not served; a primary that
    ///   stops or crashes in between leaves the client unanswered, and its retry is
    ///   answered by the new primary from whatever entry it has (granted again, with
    ///   every replica, or Full).
    ///
    /// Every refused write that grants the lock is given back so, a re-grant or a
    /// take-over too (a replica lacks the key's entry only if it never had the hold, and
    /// a hold is answered Granted only once every replica has it: nobody who was
    /// answered holds the key). Still not given back: a free entry refused by a joiner
    /// whose table is full of held entries and entries of arcs not handed over to it yet;
    /// that write waits.
    ///
    /// A new incarnation of a client id must number on after every request the earlier
    /// one sent ([`super::ChordClient::resume_after`]), or its requests are taken for
    /// copies. Errors, besides those of each message: a request of a client id not below
    /// `C` ([`ChordError::BadSender`]).
    pub fn step<S: Sink<Out<T>>>(
        &mut self,
        from: Addr,
        msg: &ChordMsg<T>,
        out: &mut S,
    ) -> Result<Report, ChordError> {
        super::step(self, from, msg, out)
    }

    /// Gives back the lock written by pending write `i`, which a replica had no room for
    /// ("Full replicas"): the key is written free again (a new version, the same writer)
    /// and sent to every replica of the key, and the write's client is to be answered
    /// [`Answer::Full`] once they all acknowledged it. The free entry fits at every server
    /// ready for the key's arc: a free key's entry is spare there, and a key without an
    /// entry is free (a joiner not ready yet may refuse it: "Full replicas").
    fn give_back<S: Sink<Out<T>>>(&mut self, i: usize, out: &mut S, rep: &mut Report) {
        let Some(p) = self.pending.get(i).copied() else {
            return;
        };
        self.clock = self.clock.wrapping_add(1);
        let slot = Slot {
            holder: None,
            incarnation: 0,
            version: Version {
                epoch: self.view.epoch,
                n: self.clock,
            },
            ..p.slot
        };
        self.upsert(slot);
        // The request's answer is Full now: a copy of it is answered so ("Copies").
        let t = p.token;
        if let Some(row) = self.answered.get_mut(usize::from(t.client.0)) {
            if row.is_none_or(|a| a.incarnation != t.incarnation || a.seq <= t.seq) {
                *row = Some(Answered {
                    incarnation: t.incarnation,
                    seq: t.seq,
                    refusal: Some(Answer::Full),
                });
            }
        }
        let need = self.ring.replicas(self.view, slot.key, self.copies()) & !(1 << self.id.0);
        if let Some(w) = self.pending.get_mut(i) {
            w.slot = slot;
            w.answer = Answer::Full;
            w.need = need;
            w.refused = false;
        }
        rep.insert(Rule::GivenBack);
        if need == 0 {
            // No replica in this view (cannot happen: the refusal came from one):
            // answered at once, and the unlock that waited for the lock served.
            let p = self.pending.remove(i);
            answer(out, p.token, p.slot.version.epoch, Answer::Full);
            if let Some((t, v)) = p.then {
                self.serve(t, Op::Unlock, slot.key, v, out, rep);
            }
            return;
        }
        for y in 0..N {
            if need & (1 << y) != 0 {
                self.replicate(out, NodeId(y as u16), slot, p.token);
            }
        }
    }

    /// Serves a request routed with `view` once `view` is installed (from a client, or an
    /// unlock that waited for a write of its key: "Given-up locks").
    fn serve<S: Sink<Out<T>>>(
        &mut self,
        token: Token,
        op: Op,
        key: Key,
        view: View,
        out: &mut S,
        rep: &mut Report,
    ) {
        let reply = |out: &mut S, a| answer(out, token, view.epoch, a);
        let (holder, writer, answer, need) = match self.decide(token, op, key, view) {
            Decision::Redirect => {
                reply(out, Answer::Redirect(self.view));
                rep.insert(Rule::Redirected);
                return;
            }
            Decision::Retry => {
                reply(out, Answer::Retry);
                rep.insert(Rule::RetryLater);
                return;
            }
            Decision::Defer => {
                if let Some(p) = self.pending.iter_mut().find(|p| p.slot.key == key) {
                    p.then = Some((token, view));
                }
                self.remember(token, Answer::Released);
                rep.insert(Rule::UnlockDeferred);
                return;
            }
            Decision::Refused => {
                self.remember(token, Answer::Refused);
                reply(out, Answer::Refused);
                rep.insert(Rule::LockRefused);
                return;
            }
            Decision::InUse => {
                self.remember(token, Answer::InUse);
                reply(out, Answer::InUse);
                rep.insert(Rule::IdInUse);
                return;
            }
            Decision::Full => {
                self.remember(token, Answer::Full);
                reply(out, Answer::Full);
                rep.insert(Rule::NoRoom);
                return;
            }
            Decision::Superseded(answer) => {
                self.remember(token, answer);
                reply(out, answer);
                rep.insert(Rule::Superseded);
                return;
            }
            Decision::Copy(answer) => {
                reply(out, answer);
                rep.insert(Rule::CopyAnswered);
                return;
            }
            Decision::Write {
                holder,
                writer,
                answer,
                idempotent,
                taken_over,
                need,
            } => {
                if idempotent {
                    rep.insert(Rule::Idempotent);
                }
                if taken_over {
                    rep.insert(Rule::TakenOver);
                }
                self.remember(token, answer);
                (holder, writer, answer, need)
            }
        };
        self.clock = self.clock.wrapping_add(1);
        let slot = Slot {
            key,
            holder: holder.map(|h| h.client),
            incarnation: holder.map_or(0, |h| h.incarnation),
            version: Version {
                epoch: self.view.epoch,
                n: self.clock,
            },
            writer,
        };
        self.upsert(slot);
        rep.insert(Rule::WriteStarted);
        if need == 0 {
            reply(out, answer);
            rep.insert(Rule::WriteAcknowledged);
            return;
        }
        // Room checked.
        let _ = self.pending.push(Pending {
            slot,
            token,
            answer,
            need,
            then: None,
            refused: false,
        });
        for y in 0..N {
            if need & (1 << y) != 0 {
                self.replicate(out, NodeId(y as u16), slot, token);
            }
        }
    }
}

impl<const N: usize, const T: usize, const C: usize> Server<T> for RingServer<N, T, C> {
    const MAX_OUTPUTS: usize = Self::MAX_OUTPUTS;

    fn check(&self, from: Addr, msg: &ChordMsg<T>) -> Result<(), ChordError> {
        match msg {
            ChordMsg::Request {
                token,
                op,
                key,
                view,
            } => {
                if from != Addr::Client(token.client) || usize::from(token.client.0) >= C {
                    return Err(ChordError::BadSender);
                }
                if *op == Op::Delete {
                    return Err(ChordError::WrongVariant);
                }
                self.ring.check_key(*key)?;
                self.ring.check_view(*view)?;
                if self.stopped {
                    return Ok(());
                }
                // A lock the table has no room for is answered Full (`decide`).
                if let Decision::Write { need, .. } = self.decide(*token, *op, *key, *view) {
                    let pending_full = self.after(*view) == self.view && self.pending.is_full();
                    if need != 0 && pending_full {
                        return Err(ChordError::TableFull);
                    }
                }
                Ok(())
            }
            ChordMsg::Replicate { view, slot, .. } => {
                // A write with no room is refused with a message (`apply`), not an error.
                node_sender::<N>(from)?;
                self.ring.check_view(*view)?;
                self.ring.check_key(slot.key)
            }
            ChordMsg::ReplicaFull { view, key, .. } => {
                node_sender::<N>(from)?;
                self.ring.check_view(*view)?;
                self.ring.check_key(*key)
            }
            ChordMsg::ReplicaAck { view, .. } | ChordMsg::ReplicaNack { view } => {
                node_sender::<N>(from)?;
                self.ring.check_view(*view)
            }
            ChordMsg::Transfer { view, arcs, slots } => {
                node_sender::<N>(from)?;
                self.ring.check_view(*view)?;
                for s in slots {
                    self.ring.check_key(s.key)?;
                }
                let v = self.after(*view);
                if view.epoch < v.epoch {
                    return Ok(());
                }
                let take = self.taken(v, *arcs);
                let moved = slots
                    .iter()
                    .filter(|s| take & (1 << self.ring.arc_of(s.key)) != 0)
                    .copied();
                self.fits(*view, moved, take)
            }
            ChordMsg::NewView(v) => {
                if from != Addr::Chord {
                    return Err(ChordError::BadSender);
                }
                self.ring.check_view(*v)
            }
            _ => Err(ChordError::WrongVariant),
        }
    }

    fn apply<S: Sink<Out<T>>>(&mut self, from: Addr, msg: &ChordMsg<T>, out: &mut S) -> Report {
        let mut rep = Report::default();
        match msg {
            ChordMsg::Request {
                token,
                op,
                key,
                view,
            } => {
                if self.stopped {
                    rep.insert(Rule::LeaseLost);
                    return rep;
                }
                self.install(*view, out, &mut rep);
                self.serve(*token, *op, *key, *view, out, &mut rep);
                rep
            }
            ChordMsg::Replicate { view, slot, token } => {
                self.install(*view, out, &mut rep);
                if view.epoch < self.view.epoch {
                    let nack = ChordMsg::ReplicaNack { view: self.view };
                    send(out, from, nack);
                    rep.insert(Rule::Stale);
                    return rep;
                }
                if self.covered(self.view) & (1 << self.ring.arc_of(slot.key)) == 0 {
                    rep.insert(Rule::Stale);
                    return rep;
                }
                // A copy of a write this replica already applied (sent again by
                // `reconnected` because the acknowledgement was lost): acknowledged again,
                // not applied twice.
                if self.slots.iter().any(|s| s == slot) {
                    rep.insert(Rule::Idempotent);
                } else if self.fits(self.view, core::iter::once(*slot), 0).is_err() {
                    // No room: refused, nothing applied; the primary gives the write up
                    // ("Full replicas").
                    let full = ChordMsg::ReplicaFull {
                        view: self.view,
                        key: slot.key,
                        version: slot.version,
                    };
                    send(out, from, full);
                    rep.insert(Rule::ReplicaFull);
                    return rep;
                } else {
                    self.upsert(*slot);
                    rep.insert(Rule::Replicated);
                }
                let ack = ChordMsg::ReplicaAck {
                    view: self.view,
                    key: slot.key,
                    token: *token,
                };
                send(out, from, ack);
                rep
            }
            ChordMsg::ReplicaAck { view, key, token } => {
                self.install(*view, out, &mut rep);
                let from_bit = match from {
                    Addr::Node(y) => 1u16 << y.0,
                    _ => 0,
                };
                let i = self
                    .pending
                    .iter()
                    .position(|p| p.slot.key == *key && p.token == *token);
                match (view.epoch == self.view.epoch, i) {
                    (true, Some(i)) => {
                        self.pending[i].need &= !from_bit;
                        if self.pending[i].need == 0 && self.pending[i].refused {
                            // Every replica answered the lock, one with no room: given
                            // back ("Full replicas").
                            self.give_back(i, out, &mut rep);
                        } else if self.pending[i].need == 0 {
                            let p = self.pending.remove(i);
                            answer(out, p.token, p.slot.version.epoch, p.answer);
                            rep.insert(Rule::WriteAcknowledged);
                            // The unlock that waited for this write: served now (room:
                            // the write's place in the pending list is free, and the key's
                            // entry is there to be written over).
                            if let Some((t, v)) = p.then {
                                self.serve(t, Op::Unlock, *key, v, out, &mut rep);
                            }
                        }
                    }
                    _ => rep.insert(Rule::Stale),
                }
                rep
            }
            ChordMsg::ReplicaNack { view } => {
                self.install(*view, out, &mut rep);
                rep.insert(Rule::Stale);
                rep
            }
            ChordMsg::ReplicaFull { view, key, version } => {
                self.install(*view, out, &mut rep);
                let from_bit = match from {
                    Addr::Node(y) => 1u16 << y.0,
                    _ => 0,
                };
                let i = self.pending.iter().position(|p| {
                    p.slot.key == *key && p.slot.version == *version && p.answer == Answer::Granted
                });
                match (view.epoch == self.view.epoch && self.give_back, i) {
                    (true, Some(i)) => {
                        self.pending[i].need &= !from_bit;
                        self.pending[i].refused = true;
                        rep.insert(Rule::ReplicaFull);
                        // Given back once no acknowledgement of the lock is still to come:
                        // a replica then has it, or has refused it, before the free entry
                        // is sent ("Full replicas").
                        if self.pending[i].need == 0 {
                            self.give_back(i, out, &mut rep);
                        }
                    }
                    _ => rep.insert(Rule::Stale),
                }
                rep
            }
            ChordMsg::Transfer { view, arcs, slots } => {
                self.install(*view, out, &mut rep);
                if view.epoch < self.view.epoch {
                    rep.insert(Rule::Stale);
                    return rep;
                }
                let take = self.taken(self.view, *arcs);
                for s in slots {
                    if take & (1 << self.ring.arc_of(s.key)) != 0 {
                        self.upsert(*s);
                    }
                }
                self.ready |= take;
                rep.insert(Rule::TransferMerged);
                rep
            }
            ChordMsg::NewView(v) => {
                self.install(*v, out, &mut rep);
                if rep.iter().next().is_none() {
                    rep.insert(Rule::Stale);
                }
                rep
            }
            // Refused by `check`.
            _ => rep,
        }
    }
}

/// Answers `token`'s client, whose request was routed with a view of epoch `epoch`.
fn answer<const T: usize, S: Sink<Out<T>>>(out: &mut S, token: Token, epoch: u16, answer: Answer) {
    let to = Addr::Client(token.client);
    send(
        out,
        to,
        ChordMsg::Reply {
            token,
            epoch,
            answer,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::super::ClientId;
    use super::*;

    type S = RingServer<3, 4>;
    type O = heapless::Vec<Out<4>, 32>;
    const V: View = View {
        epoch: 0,
        members: 0b011,
    };

    fn ring() -> Ring<3> {
        Ring::new(6, [8, 21, 32]).unwrap()
    }
    fn lock(seq: u64, view: View) -> ChordMsg<4> {
        ChordMsg::Request {
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq,
            },
            op: Op::Lock,
            key: Key(10),
            view,
        }
    }
    const C1: Addr = Addr::Client(ClientId(1));

    /// Client 1's incarnation 0, the asker of [`lock`].
    fn req_holder() -> Holder {
        Holder {
            client: ClientId(1),
            incarnation: 0,
        }
    }

    #[test]
    fn a_write_is_answered_after_the_replica_and_a_retry_is_not_served_twice() {
        let mut a = S::new(NodeId(1), ring(), 1, V).unwrap();
        let mut b = S::new(NodeId(0), ring(), 1, V).unwrap();
        let mut out = O::new();
        let rep = a.step(C1, &lock(1, V), &mut out).unwrap();
        assert!(rep.contains(Rule::WriteStarted));
        let m = out.pop().unwrap();
        assert!(out.is_empty(), "no answer before the replica has it");
        b.step(Addr::Node(NodeId(1)), &m.msg, &mut out).unwrap();
        assert_eq!(b.holder(Key(10)), Some(ClientId(1)));
        let ack = out.pop().unwrap();
        let rep = a.step(Addr::Node(NodeId(0)), &ack.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::WriteAcknowledged));
        out.clear();
        let rep = a.step(C1, &lock(2, V), &mut out).unwrap();
        assert!(rep.contains(Rule::Idempotent), "{rep:?}");
        assert_eq!(out.len(), 1);
    }

    /// "Given-up locks": the unlock a client sends after giving up its lock, which
    /// reaches the primary while that lock is still being written, is served once the
    /// write is acknowledged; it is not answered Retry (the client asks nothing again).
    /// Another client's request of the key, and a second unlock, are still answered Retry.
    #[test]
    fn an_unlock_behind_its_own_lock_being_written_is_served_after_it() {
        let mut a = S::new(NodeId(1), ring(), 1, V).unwrap();
        let mut b = S::new(NodeId(0), ring(), 1, V).unwrap();
        let mut out = O::new();
        a.step(C1, &lock(1, V), &mut out).unwrap();
        let rep1 = out.pop().unwrap();
        let unlock = |client: u8, seq: u64| ChordMsg::Request {
            token: Token {
                client: ClientId(client),
                incarnation: 0,
                seq,
            },
            op: Op::Unlock,
            key: Key(10),
            view: V,
        };
        let c2 = Addr::Client(ClientId(2));
        let rep = a.step(c2, &unlock(2, 1), &mut out).unwrap();
        assert!(rep.contains(Rule::RetryLater), "another client's: {rep:?}");
        out.clear();
        let rep = a.step(C1, &unlock(1, 2), &mut out).unwrap();
        assert!(rep.contains(Rule::UnlockDeferred), "{rep:?}");
        assert!(out.is_empty(), "not answered yet: {out:?}");
        assert!(a.waits_for(req_holder()));
        let rep = a.step(C1, &unlock(1, 3), &mut out).unwrap();
        assert!(rep.contains(Rule::RetryLater), "one per write: {rep:?}");
        out.clear();
        b.step(Addr::Node(NodeId(1)), &rep1.msg, &mut out).unwrap();
        let ack = out.pop().unwrap();
        let rep = a.step(Addr::Node(NodeId(0)), &ack.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::WriteAcknowledged), "{rep:?}");
        assert!(matches!(
            out[0].msg,
            ChordMsg::Reply {
                answer: Answer::Granted,
                ..
            }
        ));
        assert_eq!(a.holder(Key(10)), None, "the unlock is written at once");
        let rep2 = out.pop().unwrap();
        assert!(matches!(rep2.msg, ChordMsg::Replicate { .. }), "{rep2:?}");
        out.clear();
        b.step(Addr::Node(NodeId(1)), &rep2.msg, &mut out).unwrap();
        assert_eq!(b.holder(Key(10)), None);
        let ack = out.pop().unwrap();
        a.step(Addr::Node(NodeId(0)), &ack.msg, &mut out).unwrap();
        assert!(matches!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                answer: Answer::Released,
                token: Token { seq: 2, .. },
                ..
            }
        ));
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn an_old_view_is_redirected_and_a_joiner_waits_for_its_arc() {
        let v1 = V.join(NodeId(2));
        let mut a = S::new(NodeId(1), ring(), 1, V).unwrap();
        let mut c = S::new(NodeId(2), ring(), 1, V).unwrap();
        let mut out = O::new();
        a.step(Addr::Chord, &ChordMsg::NewView(v1), &mut out)
            .unwrap();
        let t = out.iter().find(|o| o.to == Addr::Node(NodeId(2))).cloned();
        assert!(
            t.is_some(),
            "the joiner gets the arcs it now holds: {out:?}"
        );
        out.clear();
        a.step(C1, &lock(1, V), &mut out).unwrap();
        assert!(matches!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                answer: Answer::Redirect(v),
                ..
            } if v == v1
        ));
        // Key 24 is the joiner's (ident 32) in v1: retry until the transfer arrives.
        let req = ChordMsg::Request {
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq: 2,
            },
            op: Op::Lock,
            key: Key(24),
            view: v1,
        };
        let rep = c.step(C1, &req, &mut out).unwrap();
        assert!(rep.contains(Rule::ViewInstalled) && rep.contains(Rule::RetryLater));
        let before = c.clone();
        assert_eq!(
            c.step(Addr::Node(NodeId(1)), &lock(1, V), &mut out),
            Err(ChordError::BadSender)
        );
        assert_eq!(c, before);
        c.step(Addr::Node(NodeId(1)), &t.unwrap().msg, &mut out)
            .unwrap();
        assert!(c.settled_in(v1));
        out.clear();
        let rep = c.step(C1, &req, &mut out).unwrap();
        assert!(rep.contains(Rule::WriteStarted));
    }

    /// A joiner is ready on the first hand-over of an arc; a later one, even with a newer
    /// entry, is not merged, since the joiner may have answered from the first
    /// (`ring-join-after-crash-stale-first-transfer`). The server before the rule
    /// ([`RingServer::merging_late_hand_overs`]) let the later entry replace it.
    #[test]
    fn a_hand_over_reaching_a_ready_arc_is_not_merged() {
        let v1 = V.join(NodeId(2));
        let entry = |c: u8, epoch: u16| Slot {
            key: Key(24),
            holder: Some(ClientId(c)),
            incarnation: 0,
            version: Version { epoch, n: 1 },
            writer: Some(Token {
                client: ClientId(c),
                incarnation: 0,
                seq: 1,
            }),
        };
        let hand_over = |s: Slot| ChordMsg::Transfer {
            view: v1,
            arcs: 0b111,
            slots: core::iter::once(s).collect(),
        };
        for (late, holder) in [(false, 1), (true, 2)] {
            let mut c = S::new(NodeId(2), ring(), 1, V).unwrap();
            if late {
                c = c.merging_late_hand_overs();
            }
            let mut out = O::new();
            // Key 24 is node 2's in v1, held by nodes 0 and 1 in V.
            c.step(Addr::Node(NodeId(0)), &hand_over(entry(1, 0)), &mut out)
                .unwrap();
            assert!(c.settled_in(v1));
            c.step(Addr::Node(NodeId(1)), &hand_over(entry(2, 1)), &mut out)
                .unwrap();
            assert_eq!(c.holder(Key(24)), Some(ClientId(holder)), "late: {late}");
        }
    }

    /// The check finds a full table before anything changes: a transfer to a joiner that
    /// brings more keys than fit. A request for a new key on a full table is answered
    /// Full and writes nothing.
    #[test]
    fn a_full_table_is_refused_and_changes_nothing() {
        // Alone in the view: every arc is this server's, no replica.
        let alone = View {
            epoch: 0,
            members: 0b001,
        };
        let mut a = S::new(NodeId(0), ring(), 1, alone).unwrap();
        let mut out = O::new();
        for k in 0..4u16 {
            let req = ChordMsg::Request {
                token: Token {
                    client: ClientId(1),
                    incarnation: 0,
                    seq: u64::from(k),
                },
                op: Op::Lock,
                key: Key(k),
                view: alone,
            };
            a.step(C1, &req, &mut out).unwrap();
        }
        let before = a.clone();
        out.clear();
        let fifth = ChordMsg::Request {
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq: 9,
            },
            op: Op::Lock,
            key: Key(4),
            view: alone,
        };
        // A fifth key: answered Full, nothing written.
        let mut full = a.clone();
        let rep = full.step(C1, &fifth, &mut out).unwrap();
        assert!(rep.contains(Rule::NoRoom), "{rep:?}");
        assert_eq!(full.slots(), a.slots());
        assert!(matches!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                answer: Answer::Full,
                ..
            }
        ));
        // The same key again is a write over its own entry: it fits.
        let again = ChordMsg::Request {
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq: 10,
            },
            op: Op::Unlock,
            key: Key(3),
            view: alone,
        };
        let mut b = a.clone();
        assert!(b.step(C1, &again, &mut out).is_ok());
        out.clear();
        let slots = |keys: core::ops::Range<u16>, holder: Option<ClientId>| {
            keys.map(|k| Slot {
                key: Key(k),
                holder,
                incarnation: 0,
                version: Version::default(),
                writer: None,
            })
            .collect()
        };
        // A joiner (node 2, not ready for any arc) with one entry, a replica write of key
        // 30 (its own arc in `v1`), handed four more held keys: 10 to 13, node 1's arc,
        // which node 2 replicates in `v1`. (Free ones would fit: with no room, a free
        // entry of the arcs a hand-over makes ready is not stored, "Reclaim".)
        let v1 = V.join(NodeId(2));
        let mut j = S::new(NodeId(2), ring(), 1, V).unwrap();
        let write = ChordMsg::Replicate {
            view: v1,
            slot: Slot {
                key: Key(30),
                holder: Some(ClientId(1)),
                incarnation: 0,
                version: Version { epoch: 1, n: 1 },
                writer: None,
            },
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq: 1,
            },
        };
        j.step(Addr::Node(NodeId(0)), &write, &mut out).unwrap();
        out.clear();
        let t = ChordMsg::Transfer {
            view: v1,
            arcs: 0b111,
            slots: slots(10..14, Some(ClientId(2))),
        };
        let joiner = j.clone();
        assert_eq!(
            j.step(Addr::Node(NodeId(1)), &t, &mut out),
            Err(ChordError::TableFull)
        );
        assert_eq!(j, joiner);
        assert!(out.is_empty());
        let t = ChordMsg::Transfer {
            view: v1,
            arcs: 0b111,
            slots: slots(10..14, None),
        };
        j.step(Addr::Node(NodeId(1)), &t, &mut out).unwrap();
        assert_eq!(j.slots().len(), 4);
        assert!(j.settled_in(v1));
        out.clear();
        // A hand-over of arcs this server is ready for is not merged, so it cannot
        // overflow the table either.
        let t = ChordMsg::Transfer {
            view: alone,
            arcs: 0b111,
            slots: slots(4..6, None),
        };
        let rep = a.step(Addr::Node(NodeId(1)), &t, &mut out).unwrap();
        assert!(rep.contains(Rule::TransferMerged));
        assert_eq!(a, before);
        assert!(out.is_empty());
        // Four writes waiting for the replica of a two-member view.
        let mut p = S::new(NodeId(1), ring(), 1, V).unwrap();
        for k in 9..13u16 {
            let req = ChordMsg::Request {
                token: Token {
                    client: ClientId(k as u8),
                    incarnation: 0,
                    seq: 1,
                },
                op: Op::Lock,
                key: Key(k),
                view: V,
            };
            p.step(Addr::Client(ClientId(k as u8)), &req, &mut out)
                .unwrap();
        }
        assert_eq!(p.pending(), 4);
        let before = p.clone();
        out.clear();
        let req = ChordMsg::Request {
            token: Token {
                client: ClientId(20),
                incarnation: 0,
                seq: 1,
            },
            op: Op::Lock,
            key: Key(13),
            view: V,
        };
        // Its table is full of the four held keys too: the lock is answered Full.
        let rep = p.step(Addr::Client(ClientId(20)), &req, &mut out).unwrap();
        assert!(rep.contains(Rule::NoRoom), "{rep:?}");
        assert_eq!(p.slots(), before.slots());
        assert_eq!(p.pending(), 4);
        assert_eq!(out.len(), 1);
    }

    /// A server that lost its lease answers no request and changes nothing for it, but
    /// still acknowledges a replica write.
    #[test]
    fn a_stopped_server_answers_no_request_but_still_replicates() {
        let mut a = S::new(NodeId(1), ring(), 1, V).unwrap();
        let mut b = S::new(NodeId(0), ring(), 1, V).unwrap();
        a.stop();
        assert!(a.stopped());
        let before = a.clone();
        let mut out = O::new();
        let rep = a.step(C1, &lock(1, V), &mut out).unwrap();
        assert!(rep.contains(Rule::LeaseLost) && !rep.contains(Rule::WriteStarted));
        assert!(out.is_empty());
        assert_eq!(a, before);
        // A request with a newer view is not installed from either.
        let v1 = V.join(NodeId(2));
        a.step(C1, &lock(2, v1), &mut out).unwrap();
        assert_eq!(a.view(), V);
        // As a replica it still acknowledges (key 30 is node 0's, replicated on node 1);
        // a primary that stops drops its waiting write unanswered.
        let req = ChordMsg::Request {
            token: Token {
                client: ClientId(1),
                incarnation: 0,
                seq: 3,
            },
            op: Op::Lock,
            key: Key(30),
            view: V,
        };
        b.step(C1, &req, &mut out).unwrap();
        assert!(b.waits_for(req_holder()));
        b.stop();
        assert!(!b.waits_for(req_holder()));
        let m = out.pop().unwrap();
        assert_eq!(m.to, Addr::Node(NodeId(1)));
        let rep = a.step(Addr::Node(NodeId(0)), &m.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::Replicated));
        let ack = out.pop().unwrap();
        out.clear();
        let rep = b.step(Addr::Node(NodeId(1)), &ack.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::Stale) && out.is_empty());
    }

    /// "Full replicas": three servers (r = 1) with tables of 2. n32 (slot 2) is the
    /// replica of n21's key 10 and the primary of key 24; with both held its table is
    /// full, while n21 has room for a lock of key 12. The replica refuses that write
    /// (before, it was refused as an error: nothing applied, nothing answered, the key
    /// answered Retry for ever); n21 writes the key back free, replicates that, and
    /// answers Full once n32 acknowledged it. A copy of the request is answered Full
    /// again, and nothing is held for the client anywhere.
    #[test]
    fn a_lock_a_full_replica_refuses_is_given_back_and_answered_full() {
        let all = View {
            epoch: 0,
            members: 0b111,
        };
        let new = |i: u16| S::new(NodeId(i), ring(), 1, all).unwrap().with_table(2);
        let (mut n21, mut n32) = (new(1).unwrap(), new(2).unwrap());
        let mut n8 = new(0).unwrap();
        let mut out = O::new();
        let req = |c: u8, seq: u64, op: Op, k: u16| ChordMsg::Request {
            token: Token {
                client: ClientId(c),
                incarnation: 0,
                seq,
            },
            op,
            key: Key(k),
            view: all,
        };
        let (n8a, n21a, n32a) = (
            Addr::Node(NodeId(0)),
            Addr::Node(NodeId(1)),
            Addr::Node(NodeId(2)),
        );
        // c1 locks key 10 (n21, replica n32); c2 locks key 24 (n32, replica n8).
        n21.step(C1, &req(1, 1, Op::Lock, 10), &mut out).unwrap();
        let w = out.pop().unwrap();
        n32.step(n21a, &w.msg, &mut out).unwrap();
        let ack = out.pop().unwrap();
        n21.step(n32a, &ack.msg, &mut out).unwrap();
        out.clear();
        let c2 = Addr::Client(ClientId(2));
        n32.step(c2, &req(2, 1, Op::Lock, 24), &mut out).unwrap();
        let w = out.pop().unwrap();
        n8.step(n32a, &w.msg, &mut out).unwrap();
        let ack = out.pop().unwrap();
        n32.step(n8a, &ack.msg, &mut out).unwrap();
        out.clear();
        assert_eq!(n32.slots().len(), 2);
        // c3 locks key 12: n21 has room, n32 has none.
        let c3 = Addr::Client(ClientId(3));
        let lock12 = req(3, 1, Op::Lock, 12);
        let rep = n21.step(c3, &lock12, &mut out).unwrap();
        assert!(rep.contains(Rule::WriteStarted), "{rep:?}");
        let w = out.pop().unwrap();
        let before = n32.clone();
        let rep = n32.step(n21a, &w.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::ReplicaFull), "{rep:?}");
        assert_eq!(n32.slots(), before.slots(), "nothing applied");
        let refusal = out.pop().unwrap();
        assert!(out.is_empty());
        assert!(
            matches!(refusal.msg, ChordMsg::ReplicaFull { key: Key(12), .. }),
            "{refusal:?}"
        );
        // The primary gives the lock back: key 12 free, written again, still Retry.
        let rep = n21.step(n32a, &refusal.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::GivenBack), "{rep:?}");
        assert_eq!(n21.holder(Key(12)), None);
        let back = out.pop().unwrap();
        assert!(
            out.is_empty(),
            "no answer before the replica has it: {out:?}"
        );
        let rep = n21.step(c3, &req(3, 1, Op::Lock, 12), &mut out).unwrap();
        assert!(rep.contains(Rule::RetryLater), "{rep:?}");
        out.clear();
        let rep = n32.step(n21a, &back.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::Replicated), "a free entry fits: {rep:?}");
        let ack = out.pop().unwrap();
        n21.step(n32a, &ack.msg, &mut out).unwrap();
        assert_eq!(
            out.pop().map(|o| o.msg),
            Some(ChordMsg::Reply {
                token: Token {
                    client: ClientId(3),
                    incarnation: 0,
                    seq: 1
                },
                epoch: 0,
                answer: Answer::Full,
            })
        );
        assert_eq!(n21.pending(), 0);
        // A copy of the request is answered Full again; nothing names c3 anywhere.
        let rep = n21.step(c3, &lock12, &mut out).unwrap();
        assert!(rep.contains(Rule::CopyAnswered), "{rep:?}");
        assert!(matches!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                answer: Answer::Full,
                ..
            }
        ));
        for s in [&n8, &n21, &n32] {
            assert_eq!(s.holder(Key(12)), None);
        }
        // A lock of a new key at n32, its own table full: Full, nothing written.
        out.clear();
        let before = n32.clone();
        let rep = n32.step(c3, &req(3, 2, Op::Lock, 30), &mut out).unwrap();
        assert!(rep.contains(Rule::NoRoom), "{rep:?}");
        assert_eq!(n32.slots(), before.slots());
        assert!(matches!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                answer: Answer::Full,
                ..
            }
        ));
    }

    /// "Full replicas" with two replicas (r = 2, tables of 1): n32 is full (its own key
    /// 24, held), n8 has room. n21's lock of key 10 is refused by n32; the free entry is
    /// sent only once n8 answered the lock too, so n8 never gets the free entry before the
    /// lock (which could then be applied over it once the free entry was reclaimed).
    #[test]
    fn a_lock_is_given_back_only_once_every_other_replica_answered_it() {
        let all = View {
            epoch: 0,
            members: 0b111,
        };
        let new = |i: u16| S::new(NodeId(i), ring(), 2, all).unwrap().with_table(1);
        let (mut n8, mut n21, mut n32) = (new(0).unwrap(), new(1).unwrap(), new(2).unwrap());
        let (n8a, n21a, n32a) = (
            Addr::Node(NodeId(0)),
            Addr::Node(NodeId(1)),
            Addr::Node(NodeId(2)),
        );
        let mut out = O::new();
        let req = |c: u8, k: u16| ChordMsg::Request {
            token: Token {
                client: ClientId(c),
                incarnation: 0,
                seq: 1,
            },
            op: Op::Lock,
            key: Key(k),
            view: all,
        };
        // c2's lock of key 24 fills n32 (its writes to the others stay in flight).
        n32.step(Addr::Client(ClientId(2)), &req(2, 24), &mut out)
            .unwrap();
        out.clear();
        n21.step(C1, &req(1, 10), &mut out).unwrap();
        let to = |n: Addr, out: &O| out.iter().find(|o| o.to == n).cloned().unwrap();
        let (w32, w8) = (to(n32a, &out), to(n8a, &out));
        out.clear();
        n32.step(n21a, &w32.msg, &mut out).unwrap();
        let refusal = out.pop().unwrap();
        let rep = n21.step(n32a, &refusal.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::ReplicaFull), "{rep:?}");
        assert!(
            out.is_empty(),
            "nothing sent while n8 may still apply the lock: {out:?}"
        );
        assert_eq!(n21.holder(Key(10)), Some(ClientId(1)));
        n8.step(n21a, &w8.msg, &mut out).unwrap();
        assert_eq!(n8.holder(Key(10)), Some(ClientId(1)));
        let ack = out.pop().unwrap();
        let rep = n21.step(n8a, &ack.msg, &mut out).unwrap();
        assert!(rep.contains(Rule::GivenBack), "{rep:?}");
        assert_eq!(n21.holder(Key(10)), None);
        let (b32, b8) = (to(n32a, &out), to(n8a, &out));
        assert_eq!(out.len(), 2, "the free entry to both replicas: {out:?}");
        out.clear();
        for (s, m) in [(&mut n32, b32), (&mut n8, b8)] {
            s.step(n21a, &m.msg, &mut out).unwrap();
            assert_eq!(s.holder(Key(10)), None);
        }
        let acks: heapless::Vec<Out<4>, 32> = out.iter().cloned().collect();
        out.clear();
        for (from, a) in [(n32a, &acks[0]), (n8a, &acks[1])] {
            n21.step(from, &a.msg, &mut out).unwrap();
        }
        assert!(
            matches!(
                out.as_slice(),
                [Out {
                    msg: ChordMsg::Reply {
                        answer: Answer::Full,
                        ..
                    },
                    ..
                }]
            ),
            "{out:?}"
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(
            S::new(NodeId(0), ring(), 0, V).err(),
            Some(ChordError::BadReplication)
        );
        assert_eq!(
            S::new(NodeId(0), ring(), 3, V).err(),
            Some(ChordError::BadReplication)
        );
        assert_eq!(
            S::new(NodeId(3), ring(), 1, V).err(),
            Some(ChordError::BadView)
        );
    }
}
