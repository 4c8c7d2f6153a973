//! The client side (Fig. 4): `n = lookup(oid)`, then `n.s_lock(oid)` (or `s_unlock`,
//! `s_dellock`), one request at a time. With hilock's servers it also follows redirects
//! (adopting the newer view) and retries; a request is resent with the same request number
//! (one request of a client is outstanding at a time, so the number only tells answers to
//! an earlier request apart).

use super::{
    room, send, Addr, Answer, ChordError, ChordMsg, ClientId, Holder, Key, Op, Out, Report, Ring,
    Rule, Token, View,
};
use crate::msg::Sink;

/// What a client step finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientEvent {
    /// Still waiting (sent or resent).
    Waiting,
    /// The request ended with this answer.
    Done(Op, Key, Answer),
    /// An answer to an earlier request, ignored.
    Ignored,
}

/// A client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChordClient<const N: usize> {
    id: ClientId,
    /// Its incarnation ([`Token::incarnation`]).
    incarnation: u64,
    ring: Ring<N>,
    view: View,
    seq: u64,
    /// The epoch of the view its newest copy of the waiting request was routed with.
    sent_in: u16,
    waiting: Option<(Op, Key)>,
}

impl<const N: usize> ChordClient<N> {
    /// A client that routes with `view`.
    pub fn new(id: ClientId, ring: Ring<N>, view: View) -> Result<Self, ChordError> {
        ring.check_view(view)?;
        Ok(ChordClient {
            id,
            incarnation: 0,
            ring,
            view,
            seq: 0,
            sent_in: view.epoch,
            waiting: None,
        })
    }

    /// The client as incarnation `incarnation` of its id: a number its process drew at
    /// its start, different from every other process's with the id (the runtime: the
    /// clock's nanoseconds and the process id). The ring grants a key held by another
    /// incarnation of the id to none but an [`Op::TakeOver`] ([`Answer::InUse`]), so two
    /// processes given one client id are never both holders. Requests carry it
    /// ([`Token::incarnation`]); 0 for [`ChordClient::new`].
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// Its id.
    pub fn id(&self) -> ClientId {
        self.id
    }
    /// Its incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    /// Its id and incarnation: what a key's entry names when it holds the key.
    pub fn holder(&self) -> Holder {
        Holder {
            client: self.id,
            incarnation: self.incarnation,
        }
    }
    /// The view it routes with.
    pub fn view(&self) -> View {
        self.view
    }
    /// The request it waits for.
    pub fn waiting(&self) -> Option<(Op, Key)> {
        self.waiting
    }
    /// The epoch of the view its newest copy of the waiting (or last) request was routed
    /// with: the only copy whose answer [`on_reply`](Self::on_reply) takes.
    pub fn sent_in(&self) -> u16 {
        self.sent_in
    }
    /// The current request number (0 before the first request).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn send<const T: usize, S: Sink<Out<T>>>(
        &mut self,
        op: Op,
        key: Key,
        out: &mut S,
    ) -> Result<(), ChordError> {
        let to = self
            .ring
            .lookup(self.view, key)
            .ok_or(ChordError::BadView)?;
        let token = Token {
            client: self.id,
            incarnation: self.incarnation,
            seq: self.seq,
        };
        let view = self.view;
        self.sent_in = view.epoch;
        send(
            out,
            Addr::Node(to),
            ChordMsg::Request {
                token,
                op,
                key,
                view,
            },
        );
        Ok(())
    }

    /// Starts a request: `lookup(key)`, then the call.
    pub fn start<const T: usize, S: Sink<Out<T>>>(
        &mut self,
        op: Op,
        key: Key,
        out: &mut S,
    ) -> Result<Report, ChordError> {
        if self.waiting.is_some() {
            return Err(ChordError::Busy);
        }
        self.ring.check_key(key)?;
        room(out, 1)?;
        self.ring
            .lookup(self.view, key)
            .ok_or(ChordError::BadView)?;
        let seq = self.seq.checked_add(1).ok_or(ChordError::SeqExhausted)?;
        self.seq = seq;
        self.send(op, key, out)?;
        self.waiting = Some((op, key));
        let mut rep = Report::default();
        rep.insert(Rule::Sent);
        Ok(rep)
    }

    /// Chord (or the membership service) told the client a newer ring: later lookups use
    /// it. An older view is ignored.
    pub fn learn(&mut self, view: View) -> Result<(), ChordError> {
        self.ring.check_view(view)?;
        if view.epoch >= self.view.epoch {
            self.view = view;
        }
        Ok(())
    }

    /// The service node did not answer (it is gone): look up again with `view` and resend.
    pub fn timeout<const T: usize, S: Sink<Out<T>>>(
        &mut self,
        view: View,
        out: &mut S,
    ) -> Result<Report, ChordError> {
        let Some((op, key)) = self.waiting else {
            return Err(ChordError::Busy);
        };
        self.ring.check_view(view)?;
        room(out, 1)?;
        let before = *self;
        self.learn(view)?;
        if let Err(e) = self.send(op, key, out) {
            *self = before;
            return Err(e);
        }
        let mut rep = Report::default();
        rep.insert(Rule::Resent);
        Ok(rep)
    }

    /// Gives up the request it waits for (the caller's bound for it passed) and returns
    /// it, `None` if it waits for nothing; sends nothing. A late answer to it is
    /// [`ClientEvent::Ignored`] (nothing waits for it, and the next request has the next
    /// request number), so the client can [`start`](Self::start) the next request at once.
    /// The server may still have served the given-up request: the caller finds out by
    /// asking again (a lock it holds is granted again, idempotently).
    pub fn abandon(&mut self) -> Option<(Op, Key)> {
        self.waiting.take()
    }

    /// This client continues its request numbers after `last`, a request of its id that
    /// the ring records ([`super::Slot::writer`] of an entry): its later requests are then
    /// numbered after `last`. The ring compares the numbers of one incarnation only
    /// ([`Token::precedes`]), so a new incarnation needs this no more for its requests to
    /// be served; it keeps one client id's numbers rising across its runs, as an operator
    /// reading the entries sees them. Numbers only move forward: a `last` this client is
    /// already at or after changes nothing.
    ///
    /// Errors, with nothing changed: a request waits ([`ChordError::Busy`]); `last` is
    /// another client's ([`ChordError::BadSender`]).
    pub fn resume_after(&mut self, last: Token) -> Result<(), ChordError> {
        if self.waiting.is_some() {
            return Err(ChordError::Busy);
        }
        if last.client != self.id {
            return Err(ChordError::BadSender);
        }
        if self.seq < last.seq {
            self.seq = last.seq;
        }
        Ok(())
    }

    /// An answer arrived: `answer` to the copy of request `token` that was routed with a
    /// view of epoch `epoch` ([`ChordMsg::Reply`]).
    ///
    /// Only an answer to a copy sent in the view of the client's newest copy counts; any
    /// other is [`ClientEvent::Ignored`]. A request resent into a newer view (after a
    /// redirect, or a timeout while the first copy was still on its way) may still be
    /// granted by the new primary, which never saw the old copy; a refusal of the old copy
    /// by the old primary must not end it, or the grant locks the key for a client that
    /// no longer waits for it.
    ///
    /// Every answer but [`Answer::Redirect`] and [`Answer::Retry`] ends the request
    /// ([`ClientEvent::Done`]); [`Answer::Full`] ends a lock not granted, for want of room
    /// in a table that keeps the key's entry, with nothing of it left held: asking again
    /// is a new request.
    pub fn on_reply<const T: usize, S: Sink<Out<T>>>(
        &mut self,
        token: Token,
        epoch: u16,
        answer: Answer,
        out: &mut S,
    ) -> Result<(ClientEvent, Report), ChordError> {
        let mut rep = Report::default();
        let Some((op, key)) = self.waiting else {
            rep.insert(Rule::Stale);
            return Ok((ClientEvent::Ignored, rep));
        };
        if token.holder() != self.holder() || token.seq != self.seq || epoch != self.sent_in {
            rep.insert(Rule::Stale);
            return Ok((ClientEvent::Ignored, rep));
        }
        match answer {
            Answer::Redirect(_) | Answer::Retry => {
                room(out, 1)?;
                if let Answer::Redirect(v) = answer {
                    self.ring.check_view(v)?;
                    self.learn(v)?;
                }
                self.send(op, key, out)?;
                rep.insert(Rule::Resent);
                Ok((ClientEvent::Waiting, rep))
            }
            a => {
                self.waiting = None;
                rep.insert(Rule::Done);
                Ok((ClientEvent::Done(op, key, a), rep))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abandoned_request_frees_the_client_and_its_late_answer_is_ignored() {
        let ring = Ring::new(6, [8, 21, 32]).unwrap();
        let v0 = View {
            epoch: 0,
            members: 0b111,
        };
        let mut c = ChordClient::new(ClientId(1), ring, v0).unwrap();
        let mut out: heapless::Vec<Out<2>, 4> = heapless::Vec::new();
        assert_eq!(c.abandon(), None);
        c.start(Op::Lock, Key(24), &mut out).unwrap();
        let late = Token {
            client: ClientId(1),
            incarnation: 0,
            seq: c.seq(),
        };
        assert_eq!(
            c.start(Op::Lock, Key(25), &mut out),
            Err(ChordError::Busy),
            "one request at a time"
        );
        assert_eq!(c.abandon(), Some((Op::Lock, Key(24))));
        assert_eq!(c.waiting(), None);
        out.clear();
        c.start(Op::Lock, Key(25), &mut out).unwrap();
        let (ev, _) = c.on_reply(late, 0, Answer::Granted, &mut out).unwrap();
        assert_eq!(
            ev,
            ClientEvent::Ignored,
            "the answer to the given-up request"
        );
        assert_eq!(c.waiting(), Some((Op::Lock, Key(25))));
    }

    /// A lock answered Full (no room for the key's entry) ends, not granted, and the
    /// client is free for its next request; a late copy of that answer is ignored.
    #[test]
    fn a_lock_answered_full_ends_the_request() {
        let ring = Ring::new(6, [8, 21, 32]).unwrap();
        let v0 = View {
            epoch: 0,
            members: 0b111,
        };
        let mut c = ChordClient::new(ClientId(1), ring, v0).unwrap();
        let mut out: heapless::Vec<Out<2>, 4> = heapless::Vec::new();
        c.start(Op::Lock, Key(10), &mut out).unwrap();
        let t = Token {
            client: ClientId(1),
            incarnation: 0,
            seq: c.seq(),
        };
        let (e, _) = c.on_reply(t, 0, Answer::Full, &mut out).unwrap();
        assert_eq!(e, ClientEvent::Done(Op::Lock, Key(10), Answer::Full));
        assert_eq!(c.waiting(), None);
        let (e, _) = c.on_reply(t, 0, Answer::Full, &mut out).unwrap();
        assert_eq!(e, ClientEvent::Ignored);
        assert_eq!(out.len(), 1, "nothing sent again: {out:?}");
    }

    #[test]
    fn client_routes_by_lookup_and_follows_redirects() {
        let ring = Ring::new(6, [8, 21, 32]).unwrap();
        let v0 = View {
            epoch: 0,
            members: 0b011,
        };
        let mut c = ChordClient::new(ClientId(1), ring, v0).unwrap();
        let mut out: heapless::Vec<Out<2>, 4> = heapless::Vec::new();
        c.start(Op::Lock, Key(24), &mut out).unwrap();
        assert_eq!(
            out[0].to,
            Addr::Node(super::super::NodeId(0)),
            "24 → 8 (wraps)"
        );
        assert_eq!(
            c.start(Op::Lock, Key(1), &mut out).err(),
            Some(ChordError::Busy)
        );
        let t = Token {
            client: ClientId(1),
            incarnation: 0,
            seq: 1,
        };
        let v1 = v0.join(super::super::NodeId(2));
        let (e, _) = c.on_reply(t, 0, Answer::Redirect(v1), &mut out).unwrap();
        assert_eq!(e, ClientEvent::Waiting);
        assert_eq!(
            out[1].to,
            Addr::Node(super::super::NodeId(2)),
            "24 → 32 in v1"
        );
        let t0 = Token {
            client: ClientId(1),
            incarnation: 0,
            seq: 0,
        };
        let (e, _) = c.on_reply(t0, 1, Answer::Granted, &mut out).unwrap();
        assert_eq!(e, ClientEvent::Ignored, "an answer to an earlier request");
        let (e, _) = c.on_reply(t, 0, Answer::Refused, &mut out).unwrap();
        assert_eq!(
            e,
            ClientEvent::Ignored,
            "the answer to the copy sent in v0, after the resend in v1"
        );
        assert_eq!(c.waiting(), Some((Op::Lock, Key(24))));
        let (e, _) = c.on_reply(t, 1, Answer::Granted, &mut out).unwrap();
        assert_eq!(e, ClientEvent::Done(Op::Lock, Key(24), Answer::Granted));
    }
}
