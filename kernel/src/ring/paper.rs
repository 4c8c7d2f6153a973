//! The seed's server side (Fig. 2), literally: `olock(oid, islocked)` and its backup
//! `olock_b` on the successor, with the table operations of section 2.2.1 as defined there
//! (`getIslocked` of a missing oid is false; `modify` appends a missing oid; `insert`
//! appends — the seed does not say it replaces —; `dump(l)` appends every entry to `l`;
//! `delete` removes the oid; `get` returns its entry). Every remote call `n.foo(..)` is a
//! separate message, so other messages interleave with a procedure's remote calls:
//!
//! - (a)/(b): `s_lock`/`s_unlock` change `olock`, call `successor.olock_b.modify` and
//!   answer the client when that call returns ([`ChordMsg::BackupAck`]);
//! - (c): `s_dellock`;
//! - (d) `append`, run when Chord notifies that the predecessor left (abruptly — the seed's
//!   leave sends nothing from the leaving node): `olock_b.dump(olock)`;
//!   `successor.olock_b.insert(..)` per oid; `olock_b.clear()`;
//!   `predecessor.olock.dump(olock_b)` (a call and its return);
//! - (e) `remove`, run when Chord notifies that a node joined as predecessor:
//!   `olock_b.dump(predecessor.olock_b)`; `olock_b.clear()`; per oid
//!   `predecessor.olock.insert`, `olock_b.insert`, `olock.delete`, `successor.olock_b.delete`.
//!
//! Chord's successor/predecessor pointers are given by [`PaperNode::set_view`] (the model
//! changes them for every node at once, the most favourable reading of Chord).
//! Simplification: the remote calls of (c), (d) and (e) are sent without waiting for their
//! return (nothing in those procedures uses a return value, and their receivers differ or
//! are handled in order), (a)/(b) do wait.

use super::{
    node_sender, send, Addr, Answer, Change, ChordError, ChordMsg, Entry, Key, NodeId, Op, Out,
    Report, Ring, Rule, Server, Token, View,
};
use crate::msg::Sink;

/// One site of the seed's ring: slots `N`, table capacity `T`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PaperNode<const N: usize, const T: usize> {
    id: NodeId,
    ring: Ring<N>,
    view: View,
    olock: heapless::Vec<Entry, T>,
    olock_b: heapless::Vec<Entry, T>,
    /// Client requests whose backup RPC has not returned, with the answer to give.
    waiting: heapless::Vec<(Token, u16, Answer), T>,
}

fn get_islocked(t: &[Entry], k: Key) -> bool {
    t.iter().find(|e| e.key == k).is_some_and(|e| e.locked)
}

fn get(t: &[Entry], k: Key) -> Option<Entry> {
    t.iter().find(|e| e.key == k).copied()
}

/// `olock.modify(oid, v)`. Room for a missing oid was checked ([`has_room`]).
fn modify<const T: usize>(t: &mut heapless::Vec<Entry, T>, k: Key, v: bool) {
    match t.iter_mut().find(|e| e.key == k) {
        Some(e) => e.locked = v,
        None => {
            let _ = t.push(Entry { key: k, locked: v });
        }
    }
}

/// `olock.insert(e)` (appends). Room was checked ([`has_room`]).
fn insert<const T: usize>(t: &mut heapless::Vec<Entry, T>, e: Entry) {
    let _ = t.push(e);
}

/// Whether `extra` more entries fit in `t`.
fn has_room<const T: usize>(t: &heapless::Vec<Entry, T>, extra: usize) -> Result<(), ChordError> {
    if t.len() + extra > T {
        Err(ChordError::TableFull)
    } else {
        Ok(())
    }
}

/// Whether `modify(t, k, _)` fits: `k` is there, or there is room to append it.
fn modify_fits<const T: usize>(t: &heapless::Vec<Entry, T>, k: Key) -> Result<(), ChordError> {
    if t.iter().any(|e| e.key == k) {
        Ok(())
    } else {
        has_room(t, 1)
    }
}

fn delete<const T: usize>(t: &mut heapless::Vec<Entry, T>, k: Key) {
    t.retain(|e| e.key != k);
}

/// The distinct keys of `t`, in table order.
fn keys<const T: usize>(t: &[Entry]) -> heapless::Vec<Key, T> {
    let mut ks: heapless::Vec<Key, T> = heapless::Vec::new();
    for e in t {
        if !ks.contains(&e.key) {
            let _ = ks.push(e.key);
        }
    }
    ks
}

impl<const N: usize, const T: usize> PaperNode<N, T> {
    /// The most messages one step sends ((e): a dump, then two per oid).
    pub const MAX_OUTPUTS: usize = 2 * T + 2;

    /// A node with empty tables in view `view` (it need not be a member yet).
    pub fn new(id: NodeId, ring: Ring<N>, view: View) -> Result<Self, ChordError> {
        ring.ident(id).ok_or(ChordError::BadView)?;
        ring.check_view(view)?;
        Ok(PaperNode {
            id,
            ring,
            view,
            olock: heapless::Vec::new(),
            olock_b: heapless::Vec::new(),
            waiting: heapless::Vec::new(),
        })
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// `olock`.
    pub fn olock(&self) -> &[Entry] {
        &self.olock
    }
    /// `olock_b`.
    pub fn olock_b(&self) -> &[Entry] {
        &self.olock_b
    }
    /// `olock.getIslocked(oid)`.
    pub fn is_locked(&self, k: Key) -> bool {
        get_islocked(&self.olock, k)
    }
    /// The current view (Chord's pointers).
    pub fn view(&self) -> View {
        self.view
    }

    /// Chord changed the ring: successor and predecessor pointers follow `view`.
    pub fn set_view(&mut self, view: View) -> Result<(), ChordError> {
        self.ring.check_view(view)?;
        self.view = view;
        Ok(())
    }

    /// A node out of its view has no successor (the paper's node must be on the ring).
    fn member(&self) -> Result<(), ChordError> {
        if self.view.has(self.id) {
            Ok(())
        } else {
            Err(ChordError::NotMember(self.id))
        }
    }

    /// Chord's successor pointer. A view always has a member ([`Ring::check_view`]), so
    /// `next` finds one; for a member ([`PaperNode::member`]) it is its successor.
    fn succ(&self) -> NodeId {
        self.ring.next(self.view, self.id).unwrap_or(self.id)
    }

    /// Chord's predecessor pointer (see [`PaperNode::succ`]).
    fn pred(&self) -> NodeId {
        self.ring.prev(self.view, self.id).unwrap_or(self.id)
    }

    /// Handles one message from `from`. On error nothing changed and nothing was sent.
    pub fn step<S: Sink<Out<T>>>(
        &mut self,
        from: Addr,
        msg: &ChordMsg<T>,
        out: &mut S,
    ) -> Result<Report, ChordError> {
        super::step(self, from, msg, out)
    }
}

impl<const N: usize, const T: usize> Server<T> for PaperNode<N, T> {
    const MAX_OUTPUTS: usize = Self::MAX_OUTPUTS;

    fn check(&self, from: Addr, msg: &ChordMsg<T>) -> Result<(), ChordError> {
        let node_from = || node_sender::<N>(from).map(|_| ());
        match msg {
            ChordMsg::Request { token, op, key, .. } => {
                if from != Addr::Client(token.client) {
                    return Err(ChordError::BadSender);
                }
                self.ring.check_key(*key)?;
                self.member()?;
                let locked = match op {
                    Op::Lock => true,
                    Op::Unlock => false,
                    Op::Delete => return Ok(()),
                    // hilock's: the paper's server has no incarnations.
                    Op::TakeOver => return Err(ChordError::WrongVariant),
                };
                if get_islocked(&self.olock, *key) == locked {
                    return Ok(());
                }
                // (a)3 / (b)3, then the wait for (a)4's return.
                modify_fits(&self.olock, *key)?;
                if self.succ() != self.id && self.waiting.is_full() {
                    return Err(ChordError::TableFull);
                }
                Ok(())
            }
            ChordMsg::BackupModify { entry, .. } => {
                node_from()?;
                self.ring.check_key(entry.key)?;
                modify_fits(&self.olock_b, entry.key)
            }
            ChordMsg::BackupAck { .. } | ChordMsg::BackupDelete { .. } | ChordMsg::Fetch => {
                node_from()
            }
            ChordMsg::BackupInsert { .. } => {
                node_from()?;
                has_room(&self.olock_b, 1)
            }
            ChordMsg::Insert { .. } => {
                node_from()?;
                has_room(&self.olock, 1)
            }
            ChordMsg::FetchReply { entries } | ChordMsg::BackupDump { entries } => {
                node_from()?;
                has_room(&self.olock_b, entries.len())
            }
            ChordMsg::Notify(change) => {
                if from != Addr::Chord {
                    return Err(ChordError::BadSender);
                }
                self.member()?;
                match change {
                    // (d)1 appends all of `olock_b` to `olock`.
                    Change::PredecessorLeft => has_room(&self.olock, self.olock_b.len()),
                    // (e)2 clears `olock_b` before (e)5 inserts one entry per distinct oid
                    // of `olock`: at most `T`.
                    Change::PredecessorJoined => Ok(()),
                }
            }
            ChordMsg::Reply { .. }
            | ChordMsg::Replicate { .. }
            | ChordMsg::ReplicaAck { .. }
            | ChordMsg::ReplicaNack { .. }
            | ChordMsg::ReplicaFull { .. }
            | ChordMsg::Transfer { .. }
            | ChordMsg::NewView(_) => Err(ChordError::WrongVariant),
        }
    }

    fn apply<S: Sink<Out<T>>>(&mut self, from: Addr, msg: &ChordMsg<T>, out: &mut S) -> Report {
        let me = self.id;
        match msg {
            ChordMsg::Request {
                token,
                op,
                key,
                view,
            } => {
                let epoch = view.epoch;
                let succ = self.succ();
                let to = Addr::Client(token.client);
                let (locked, answer, rule) = match op {
                    // Refused by `check`.
                    Op::Lock | Op::TakeOver => (true, Answer::Granted, Rule::LockLocal),
                    Op::Unlock => (false, Answer::Released, Rule::UnlockLocal),
                    Op::Delete => {
                        // (c)1–2.
                        delete(&mut self.olock, *key);
                        if succ != me {
                            send(out, Addr::Node(succ), ChordMsg::BackupDelete { key: *key });
                        }
                        let answer = Answer::Deleted;
                        send(
                            out,
                            to,
                            ChordMsg::Reply {
                                token: *token,
                                epoch,
                                answer,
                            },
                        );
                        return Report::of(Rule::DelLock);
                    }
                };
                // (a)1–2 / (b)1–2.
                if get_islocked(&self.olock, *key) == locked {
                    let (answer, rule) = if locked {
                        (Answer::Refused, Rule::LockRefused)
                    } else {
                        (Answer::NotLocked, Rule::UnlockNotLocked)
                    };
                    send(
                        out,
                        to,
                        ChordMsg::Reply {
                            token: *token,
                            epoch,
                            answer,
                        },
                    );
                    return Report::of(rule);
                }
                // (a)3 / (b)3.
                modify(&mut self.olock, *key, locked);
                let mut rep = Report::of(rule);
                if succ == me {
                    send(
                        out,
                        to,
                        ChordMsg::Reply {
                            token: *token,
                            epoch,
                            answer,
                        },
                    );
                    rep.insert(Rule::Answered);
                } else {
                    // (a)4 / (b)4: the RPC; (a)5 when it returns. Room checked.
                    let _ = self.waiting.push((*token, epoch, answer));
                    let entry = Entry { key: *key, locked };
                    send(
                        out,
                        Addr::Node(succ),
                        ChordMsg::BackupModify {
                            entry,
                            token: *token,
                        },
                    );
                }
                rep
            }
            ChordMsg::BackupModify { entry, token } => {
                modify(&mut self.olock_b, entry.key, entry.locked);
                send(out, from, ChordMsg::BackupAck { token: *token });
                Report::of(Rule::BackupModified)
            }
            ChordMsg::BackupAck { token } => {
                match self.waiting.iter().position(|(t, _, _)| t == token) {
                    Some(i) => {
                        let (t, epoch, answer) = self.waiting.remove(i);
                        send(
                            out,
                            Addr::Client(t.client),
                            ChordMsg::Reply {
                                token: t,
                                epoch,
                                answer,
                            },
                        );
                        Report::of(Rule::Answered)
                    }
                    None => Report::of(Rule::Stale),
                }
            }
            ChordMsg::BackupDelete { key } => {
                delete(&mut self.olock_b, *key);
                Report::of(Rule::RemoteTableOp)
            }
            ChordMsg::BackupInsert { entry } => {
                insert(&mut self.olock_b, *entry);
                Report::of(Rule::RemoteTableOp)
            }
            ChordMsg::Insert { entry } => {
                insert(&mut self.olock, *entry);
                Report::of(Rule::RemoteTableOp)
            }
            ChordMsg::Fetch => {
                let entries = self.olock.clone();
                send(out, from, ChordMsg::FetchReply { entries });
                Report::of(Rule::FetchServed)
            }
            ChordMsg::FetchReply { entries } | ChordMsg::BackupDump { entries } => {
                for e in entries {
                    insert(&mut self.olock_b, *e);
                }
                Report::of(if matches!(msg, ChordMsg::FetchReply { .. }) {
                    Rule::FetchDumped
                } else {
                    Rule::RemoteTableOp
                })
            }
            ChordMsg::Notify(Change::PredecessorLeft) => {
                let (succ, pred) = (self.succ(), self.pred());
                // oidS: the objects of the predecessor, i.e. those backed up here.
                let oids: heapless::Vec<Key, T> = keys(&self.olock_b);
                // (d)1: olock_b.dump(olock).
                for e in self.olock_b.iter() {
                    insert(&mut self.olock, *e);
                }
                // (d)2–3.
                for k in &oids {
                    if let (Some(e), true) = (get(&self.olock, *k), succ != me) {
                        send(out, Addr::Node(succ), ChordMsg::BackupInsert { entry: e });
                    }
                }
                // (d)4.
                self.olock_b.clear();
                // (d)5: the call; its return is `FetchReply`.
                if pred != me {
                    send(out, Addr::Node(pred), ChordMsg::Fetch);
                }
                Report::of(Rule::Append)
            }
            ChordMsg::Notify(Change::PredecessorJoined) => {
                let (succ, pred) = (self.succ(), self.pred());
                // oidS: the objects this node no longer serves.
                let mut oids: heapless::Vec<Key, T> = heapless::Vec::new();
                for k in keys::<T>(&self.olock) {
                    if self.ring.lookup(self.view, k) != Some(me) {
                        let _ = oids.push(k);
                    }
                }
                // (e)1–2.
                let entries = self.olock_b.clone();
                send(out, Addr::Node(pred), ChordMsg::BackupDump { entries });
                self.olock_b.clear();
                for k in &oids {
                    // (e)4–7.
                    if let Some(e) = get(&self.olock, *k) {
                        send(out, Addr::Node(pred), ChordMsg::Insert { entry: e });
                        insert(&mut self.olock_b, e);
                    }
                    delete(&mut self.olock, *k);
                    send(out, Addr::Node(succ), ChordMsg::BackupDelete { key: *k });
                }
                Report::of(Rule::Remove)
            }
            // Refused by `check`.
            _ => Report::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type P = PaperNode<3, 4>;
    type O = heapless::Vec<Out<4>, 16>;

    fn ring() -> Ring<3> {
        Ring::new(6, [8, 21, 32]).unwrap()
    }
    const ALL: View = View {
        epoch: 0,
        members: 0b111,
    };
    const C: Token = Token {
        client: super::super::ClientId(1),
        incarnation: 0,
        seq: 1,
    };

    fn req(op: Op, key: u16) -> ChordMsg<4> {
        ChordMsg::Request {
            token: C,
            op,
            key: Key(key),
            view: ALL,
        }
    }

    #[test]
    fn s_lock_answers_after_the_backup_rpc() {
        let (mut a, mut b) = (
            P::new(NodeId(1), ring(), ALL).unwrap(),
            P::new(NodeId(2), ring(), ALL).unwrap(),
        );
        let mut out = O::new();
        let rep = a
            .step(Addr::Client(C.client), &req(Op::Lock, 10), &mut out)
            .unwrap();
        assert!(rep.contains(Rule::LockLocal));
        let m = out.pop().unwrap();
        assert_eq!(m.to, Addr::Node(NodeId(2)));
        assert!(out.is_empty(), "no answer before the backup returns");
        b.step(Addr::Node(NodeId(1)), &m.msg, &mut out).unwrap();
        assert!(get_islocked(b.olock_b(), Key(10)));
        let ack = out.pop().unwrap();
        a.step(Addr::Node(NodeId(2)), &ack.msg, &mut out).unwrap();
        assert_eq!(
            out.pop().unwrap().msg,
            ChordMsg::Reply {
                token: C,
                epoch: ALL.epoch,
                answer: Answer::Granted
            }
        );
        let rep = a
            .step(Addr::Client(C.client), &req(Op::Lock, 10), &mut out)
            .unwrap();
        assert!(rep.contains(Rule::LockRefused));
        out.clear();
        let rep = a
            .step(Addr::Client(C.client), &req(Op::Delete, 10), &mut out)
            .unwrap();
        assert!(rep.contains(Rule::DelLock) && !a.is_locked(Key(10)));
        assert_eq!(out.len(), 2, "(c)2 to the successor and the answer");
    }

    #[test]
    fn rejected_inputs_change_nothing() {
        let mut a = P::new(NodeId(0), ring(), ALL).unwrap();
        let before = a.clone();
        let mut out = O::new();
        assert_eq!(
            a.step(Addr::Node(NodeId(1)), &req(Op::Lock, 10), &mut out),
            Err(ChordError::BadSender)
        );
        assert_eq!(
            a.step(Addr::Client(C.client), &req(Op::Lock, 64), &mut out),
            Err(ChordError::BadKey(Key(64)))
        );
        let mut small: heapless::Vec<Out<4>, 2> = heapless::Vec::new();
        assert_eq!(
            a.step(Addr::Client(C.client), &req(Op::Lock, 1), &mut small),
            Err(ChordError::OutputsFull)
        );
        // A full table: the fifth entry is refused, the table unchanged.
        let full: heapless::Vec<Entry, 4> = (0..4)
            .map(|k| Entry {
                key: Key(k),
                locked: true,
            })
            .collect();
        a.step(
            Addr::Node(NodeId(1)),
            &ChordMsg::FetchReply { entries: full },
            &mut out,
        )
        .unwrap();
        let before_full = a.clone();
        assert_eq!(
            a.step(
                Addr::Node(NodeId(1)),
                &ChordMsg::BackupInsert {
                    entry: Entry {
                        key: Key(5),
                        locked: true
                    }
                },
                &mut out
            ),
            Err(ChordError::TableFull)
        );
        assert_eq!(a, before_full);
        assert_ne!(a, before);
        assert!(out.is_empty());
    }
}
