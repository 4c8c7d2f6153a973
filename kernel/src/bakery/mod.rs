//! The bakery design: Lamport's bakery over a store that offers only quorum reads and writes
//! (the Cassandra wiki page "Locking", 2010, marked "musings"), and its distributed
//! work queue, as pure state machines.
//!
//! - [`store`]: the abstract replicated store: per-column cells with write timestamps,
//!   last-write-wins, tombstones; one [`Replica`] answers one [`Request`] at a time.
//! - [`client`]: the client (coordinator logic as Cassandra's coordinator does it: send a
//!   request to every replica, wait for `W` acknowledgements or `R` answers, merge the
//!   answers by timestamp) running either the lock algorithm of the seed (lines 1–19) or the
//!   work-queue loop, literally or with hilock's corrections ([`Variant`]).
//!
//! # Citing the seed
//! `line N` is line N of the numbered algorithm of "Locking a row" (seed file
//! `004_9b8aad623e7bdf46.txt`, lines 62–80); `wiki L` is line L of the seed file itself
//! (set-up: wiki 49–54; the issues it names: wiki 85–88; the work queue: wiki 96–146 and
//! its issues wiki 151–155).
//!
//! Nothing here has a clock: time enters as [`Input::Tick`] (elapsed ticks), and "sleep a
//! little" is the caller's business ([`Input::Wake`] ends the sleep).
//!
//! Where the literal text goes wrong, and why each correction is needed, is written in
//! `spec/SPEC.md` 5.1, "Defects of the literal text", with the counterexamples in
//! `spec/counterexamples/`.

pub mod client;
pub mod store;

pub use client::{Client, ClientOutput, Config, Input, Phase, Program, Rule, Variant};
pub use store::{Cell, ClientId, Family, Replica, ReplicaReport, Reply, Request, Row, Ts, Value};

use core::fmt;

use crate::msg::Sink;

/// A replica: an index `0..N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReplicaId(pub u8);

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// A fencing token: the ticket `(number, client id)` of seed line 9, compared
/// lexicographically. As one integer (for a storage system that checks fencing tokens):
/// [`Ticket::as_u64`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Ticket {
    /// `client_number` (seed line 3).
    pub number: u32,
    /// The client's id (the tie-break of line 9 of the classic algorithm).
    pub id: ClientId,
}

impl Ticket {
    /// `number · 2¹⁶ + id`: increasing in the ticket order.
    pub const fn as_u64(self) -> u64 {
        ((self.number as u64) << 16) | self.id.0 as u64
    }
}

/// Why an input was rejected. A rejected input changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BakeryError {
    /// A replica id outside `0..N`.
    UnknownReplica(ReplicaId),
    /// A client id outside `1..C` (column 0 is the work queue's `0=0` marker).
    UnknownClient(ClientId),
    /// A row outside `0..K`.
    UnknownRow(Row),
    /// `R` or `W` is 0 or larger than the number of replicas.
    BadQuorum,
    /// `R + W ≤ N` although the variant demands intersecting quorums.
    WeakQuorum,
    /// Reader expiry shorter than the holder's lease (or a zero lease) with leases on.
    BadLease,
    /// `Acquire`/`Work` while the client is not idle.
    NotIdle,
    /// `Release`/`Done` while the client does not hold the lock or an item.
    NotHeld,
    /// The input does not fit the program (`Acquire` to a queue worker, `Work` to a
    /// lock client).
    WrongProgram,
    /// A reply whose shape does not fit the request it answers (an answer to a write,
    /// an acknowledgement of a read, a family that was not asked for).
    BadReply,
    /// A timestamp renaming that is not two strictly increasing lists of equal length
    /// without 0, or that misses a timestamp the client or replica holds.
    BadRenaming,
    /// The output buffer has less room than the step may need.
    OutputsFull,
}

impl fmt::Display for BakeryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BakeryError::UnknownReplica(r) => write!(f, "unknown replica {r}"),
            BakeryError::UnknownClient(c) => write!(f, "unknown client {}", c.0),
            BakeryError::UnknownRow(r) => write!(f, "unknown row {}", r.0),
            BakeryError::BadQuorum => write!(f, "R and W must be between 1 and N"),
            BakeryError::WeakQuorum => write!(f, "R + W must exceed N"),
            BakeryError::BadLease => write!(f, "expiry must be at least the lease, lease > 0"),
            BakeryError::NotIdle => write!(f, "the client is busy"),
            BakeryError::NotHeld => write!(f, "nothing is held"),
            BakeryError::WrongProgram => write!(f, "input does not fit the client's program"),
            BakeryError::BadReply => write!(f, "reply does not fit its request"),
            BakeryError::BadRenaming => {
                write!(f, "not an order-preserving renaming of the timestamps held")
            }
            BakeryError::OutputsFull => write!(f, "output buffer too small for this step"),
        }
    }
}

/// A renaming of write timestamps: `from[i]` becomes `to[i]`; both lists strictly
/// increasing, of equal length, without 0 (0 means "no timestamp" and stays 0).
///
/// Last-write-wins only compares timestamps and a client only ever writes its clock plus
/// one, so a renaming that keeps their order *and* keeps which of them are consecutive
/// integers changes no comparison now or later: a model checker uses it to map states
/// that differ only in the values of timestamps to one representative.
#[derive(Clone, Copy, Debug)]
pub struct Renaming<'a> {
    from: &'a [store::Ts],
    to: &'a [store::Ts],
}

impl<'a> Renaming<'a> {
    /// Checks the two lists.
    pub fn new(from: &'a [store::Ts], to: &'a [store::Ts]) -> Result<Self, BakeryError> {
        let increasing = |l: &[store::Ts]| {
            l.first().is_none_or(|t| t.0 > 0) && l.windows(2).all(|w| w[0] < w[1])
        };
        if from.len() != to.len() || !increasing(from) || !increasing(to) {
            return Err(BakeryError::BadRenaming);
        }
        Ok(Renaming { from, to })
    }

    /// The new name of `t` (`None`: `t` is not renamed by this renaming).
    pub fn get(&self, t: store::Ts) -> Option<store::Ts> {
        if t.0 == 0 {
            return Some(t);
        }
        self.from.binary_search(&t).ok().map(|i| self.to[i])
    }

    /// Whether every timestamp of `cell` has a new name.
    pub(crate) fn covers(&self, cell: &Option<store::Cell>) -> bool {
        cell.is_none_or(|c| self.get(c.ts).is_some())
    }

    /// `cell` renamed (unchanged when not covered; callers check `Renaming::covers` first).
    pub fn cell(&self, cell: store::Cell) -> store::Cell {
        store::Cell {
            ts: self.get(cell.ts).unwrap_or(cell.ts),
            val: cell.val,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type C3 = Client<3, 1, 3>;
    type Out = heapless::Vec<ClientOutput, 8>;

    fn cfg(r: u8, w: u8, variant: Variant) -> Config {
        Config {
            r,
            w,
            variant,
            lease: 2,
            expiry: 2,
            renew_below: 1,
            program: Program::Lock { row: Row(0) },
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok = cfg(2, 2, Variant::HILOCK);
        assert_eq!(
            C3::new(ClientId(0), ok).err(),
            Some(BakeryError::UnknownClient(ClientId(0)))
        );
        assert_eq!(
            C3::new(ClientId(3), ok).err(),
            Some(BakeryError::UnknownClient(ClientId(3)))
        );
        assert_eq!(
            C3::new(ClientId(1), cfg(0, 2, Variant::HILOCK)).err(),
            Some(BakeryError::BadQuorum)
        );
        assert_eq!(
            C3::new(ClientId(1), cfg(4, 2, Variant::HILOCK)).err(),
            Some(BakeryError::BadQuorum)
        );
        assert_eq!(
            C3::new(ClientId(1), cfg(1, 2, Variant::HILOCK)).err(),
            Some(BakeryError::WeakQuorum)
        );
        assert!(C3::new(ClientId(1), cfg(1, 2, Variant::LITERAL)).is_ok());
        let lease = Config { expiry: 1, ..ok };
        assert_eq!(
            C3::new(ClientId(1), lease).err(),
            Some(BakeryError::BadLease)
        );
    }

    #[test]
    fn rejected_inputs_change_nothing() {
        let mut c = C3::new(ClientId(1), cfg(2, 2, Variant::HILOCK)).unwrap();
        let before = c.clone();
        let mut small: heapless::Vec<ClientOutput, 2> = heapless::Vec::new();
        assert_eq!(
            c.step(Input::Acquire, &mut small).err(),
            Some(BakeryError::OutputsFull)
        );
        let mut out = Out::new();
        assert_eq!(
            c.step(Input::Release, &mut out).err(),
            Some(BakeryError::NotHeld)
        );
        assert_eq!(
            c.step(Input::Work, &mut out).err(),
            Some(BakeryError::WrongProgram)
        );
        assert_eq!(c, before);
        assert!(out.is_empty() && small.is_empty());
        c.step(Input::Acquire, &mut out).unwrap();
        assert_eq!(out.len(), 3, "line 1 goes to every replica");
        let before = c.clone();
        let reply: Reply<1, 3> = Reply::Ack { op: 1 };
        let bad = Input::Reply {
            from: ReplicaId(3),
            reply: &reply,
        };
        assert_eq!(
            c.step(bad, &mut out).err(),
            Some(BakeryError::UnknownReplica(ReplicaId(3)))
        );
        assert_eq!(
            c.step(Input::Acquire, &mut out).err(),
            Some(BakeryError::NotIdle)
        );
        assert_eq!(c, before);
    }

    #[test]
    fn advanced_clock_outranks_an_earlier_run() {
        let mut c = C3::new(ClientId(1), cfg(2, 2, Variant::HILOCK)).unwrap();
        c.advance_clock(Ts(40));
        c.advance_clock(Ts(7));
        assert_eq!(c.clock(), 40, "the clock never goes back");
        let mut out = Out::new();
        c.step(Input::Acquire, &mut out).unwrap();
        let Some(ClientOutput::Send {
            req: Request::Write { cell, .. },
            ..
        }) = out.first()
        else {
            panic!("line 1 sends a write: {out:?}");
        };
        assert_eq!(cell.ts, Ts(41));
        let old = Cell {
            ts: Ts(40),
            val: None,
        };
        assert!(cell.supersedes(&old));
    }

    #[test]
    fn last_write_wins_and_tombstones_win_ties() {
        let mut r: Replica<1, 3> = Replica::new();
        let mut out: heapless::Vec<Reply<1, 3>, 4> = heapless::Vec::new();
        let w = |ts: u32, val: Option<Value>| Request::Write {
            op: 1,
            row: Row(0),
            family: Family::Number,
            col: 1,
            cell: Cell { ts: Ts(ts), val },
        };
        assert_eq!(
            r.step(&w(5, Some(Value::Int(3))), &mut out),
            Ok(ReplicaReport::Applied)
        );
        assert_eq!(r.step(&w(4, None), &mut out), Ok(ReplicaReport::Superseded));
        assert_eq!(r.step(&w(5, None), &mut out), Ok(ReplicaReport::Applied));
        assert_eq!(
            r.cell(Row(0), Family::Number, 1),
            Some(Cell {
                ts: Ts(5),
                val: None
            })
        );
        let before = r.clone();
        let far = Request::Write {
            op: 1,
            row: Row(1),
            family: Family::Number,
            col: 1,
            cell: Cell {
                ts: Ts(9),
                val: None,
            },
        };
        assert_eq!(
            r.step(&far, &mut out).err(),
            Some(BakeryError::UnknownRow(Row(1)))
        );
        assert_eq!(r, before);
        assert_eq!(
            out.len(),
            3,
            "one acknowledgement per accepted write, none for the error"
        );
    }

    #[test]
    fn renamings_are_checked() {
        let (a, b) = ([Ts(2), Ts(5)], [Ts(1), Ts(3)]);
        assert!(Renaming::new(&a, &b).is_ok());
        assert_eq!(
            Renaming::new(&a, &b[..1]).err(),
            Some(BakeryError::BadRenaming)
        );
        assert_eq!(
            Renaming::new(&[Ts(5), Ts(2)], &b).err(),
            Some(BakeryError::BadRenaming)
        );
        assert_eq!(
            Renaming::new(&[Ts(0), Ts(2)], &b).err(),
            Some(BakeryError::BadRenaming)
        );
        let mut r: Replica<1, 3> = Replica::new();
        r.seed(
            Row(0),
            Family::Number,
            1,
            Cell {
                ts: Ts(7),
                val: None,
            },
        )
        .unwrap();
        let before = r.clone();
        let map = Renaming::new(&a, &b).unwrap();
        assert_eq!(
            r.rename_timestamps(&map).err(),
            Some(BakeryError::BadRenaming)
        );
        assert_eq!(r, before);
        let (a, b) = ([Ts(7)], [Ts(1)]);
        r.rename_timestamps(&Renaming::new(&a, &b).unwrap())
            .unwrap();
        assert_eq!(r.cell(Row(0), Family::Number, 1).map(|c| c.ts), Some(Ts(1)));
    }
}
