//! The abstract replicated store of the bakery design ("Set-up"): a row per lock (or per work
//! item), column families `choosing`, `number` and `details`, one column per client id.
//! Each replica keeps, per column, the cell with the largest write timestamp
//! (last-write-wins); a delete writes a tombstone, which wins a tie, as in Cassandra.

use super::{BakeryError, Renaming, Sink};
use core::fmt;

/// A client id: the column it writes (`1..C`; column 0 is the work queue's `0=0` marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ClientId(pub u16);

/// A row key: the lock (`lock_id`) or a work item (its enqueue timestamp, as an index
/// `0..K` in key order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Row(pub u8);

/// A column family of the seed's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Family {
    /// The `choosing` array.
    Choosing = 0,
    /// The `number` array (and the work queue's `0=0` column).
    Number = 1,
    /// The work item's description.
    Details = 2,
}

impl Family {
    /// All families, in index order.
    pub const ALL: [Family; 3] = [Family::Choosing, Family::Number, Family::Details];
    /// Index `0..3`.
    pub const fn idx(self) -> usize {
        self as usize
    }
    /// Name as in the seed.
    pub const fn name(self) -> &'static str {
        match self {
            Family::Choosing => "choosing",
            Family::Number => "number",
            Family::Details => "details",
        }
    }
}

/// A write timestamp (the clients keep Lamport clocks, see [`super::client`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Ts(pub u32);

/// A cell's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Value {
    /// A number: `1` in `choosing`, `client_number` in `number`, `0` for `0=0`.
    Int(u32),
    /// hilock: a ticket given back (line 19 writes it instead of a tombstone so that the
    /// next `max` still sees it and tickets — fencing tokens — only grow).
    Released(u32),
}

impl Value {
    /// The number a `max(number_hash.values)` counts (seed line 3).
    pub const fn number(self) -> u32 {
        match self {
            Value::Int(n) | Value::Released(n) => n,
        }
    }
}

/// One column of one replica: the value (`None`: tombstone) and its write timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Cell {
    /// Write timestamp.
    pub ts: Ts,
    /// Value; `None` is a tombstone (a delete).
    pub val: Option<Value>,
}

impl Cell {
    /// Last-write-wins: whether `self` replaces `other`. Larger timestamp wins; on a tie
    /// the tombstone wins, then the larger value (Cassandra's reconciliation).
    pub fn supersedes(&self, other: &Cell) -> bool {
        fn rank(c: &Cell) -> (Ts, u8, Option<Value>) {
            (c.ts, c.val.is_none() as u8, c.val)
        }
        rank(self) > rank(other)
    }

    /// The merge of two optional cells by [`Cell::supersedes`].
    pub fn merge(a: Option<Cell>, b: Option<Cell>) -> Option<Cell> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if y.supersedes(&x) { y } else { x }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.val {
            None => write!(f, "†@{}", self.ts.0),
            Some(Value::Int(n)) => write!(f, "{n}@{}", self.ts.0),
            Some(Value::Released(n)) => write!(f, "rel{n}@{}", self.ts.0),
        }
    }
}

/// The columns `0..C` of one family of one row.
pub type Columns<const C: usize> = [Option<Cell>; C];

/// A client's request to a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Request {
    /// `write <row, CF=family, col=value>` or `delete …` (`cell.val == None`).
    Write {
        /// The client's operation number (answers are matched by it).
        op: u32,
        /// Row.
        row: Row,
        /// Family.
        family: Family,
        /// Column.
        col: u16,
        /// The cell, with the writer's timestamp.
        cell: Cell,
    },
    /// `read <row, CF=family>`; `row == None` is the queue's `scan <0.., CF=family>`.
    Read {
        /// Operation number.
        op: u32,
        /// Family.
        family: Family,
        /// Row, or every row.
        row: Option<Row>,
    },
}

impl Request {
    /// The operation number.
    pub const fn op(&self) -> u32 {
        match self {
            Request::Write { op, .. } | Request::Read { op, .. } => *op,
        }
    }
}

/// A replica's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply<const K: usize, const C: usize> {
    /// The write was applied (or was older than what the replica has: also acknowledged,
    /// as Cassandra does).
    Ack {
        /// Operation number.
        op: u32,
    },
    /// The replica's cells of `family` in the rows asked for (other rows: `None`).
    Answer {
        /// Operation number.
        op: u32,
        /// Family.
        family: Family,
        /// Per row.
        rows: [Columns<C>; K],
    },
}

/// What a replica step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicaReport {
    /// The write replaced the cell.
    Applied,
    /// The write was older than the cell it met and was dropped (last-write-wins).
    Superseded,
    /// A read was answered.
    Answered,
}

/// One replica: `K` rows × 3 families × `C` columns.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replica<const K: usize, const C: usize> {
    table: [[Columns<C>; 3]; K],
}

impl<const K: usize, const C: usize> Default for Replica<K, C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const K: usize, const C: usize> Replica<K, C> {
    /// An empty replica ("the row starts out empty").
    pub const fn new() -> Self {
        Replica {
            table: [[[None; C]; 3]; K],
        }
    }

    /// The cell at `(row, family, col)`.
    pub fn cell(&self, row: Row, family: Family, col: u16) -> Option<Cell> {
        self.table
            .get(row.0 as usize)
            .and_then(|r| r[family.idx()].get(col as usize))
            .copied()
            .flatten()
    }

    /// The columns of `family` in `row`.
    pub fn columns(&self, row: Row, family: Family) -> Option<&Columns<C>> {
        self.table.get(row.0 as usize).map(|r| &r[family.idx()])
    }

    /// Applies one request and pushes exactly one reply. Errors (a row or column out of
    /// range, no room in `out`) change nothing.
    pub fn step(
        &mut self,
        req: &Request,
        out: &mut impl Sink<Reply<K, C>>,
    ) -> Result<ReplicaReport, BakeryError> {
        if out.room() < 1 {
            return Err(BakeryError::OutputsFull);
        }
        match *req {
            Request::Write {
                op,
                row,
                family,
                col,
                cell,
            } => {
                let slot = self
                    .table
                    .get_mut(row.0 as usize)
                    .ok_or(BakeryError::UnknownRow(row))?[family.idx()]
                .get_mut(col as usize)
                .ok_or(BakeryError::UnknownClient(ClientId(col)))?;
                let applied = slot.is_none_or(|old| cell.supersedes(&old));
                if applied {
                    *slot = Some(cell);
                }
                let _ = out.put(Reply::Ack { op });
                Ok(if applied {
                    ReplicaReport::Applied
                } else {
                    ReplicaReport::Superseded
                })
            }
            Request::Read { op, family, row } => {
                let mut rows = [[None; C]; K];
                match row {
                    Some(r) => {
                        let src = self
                            .table
                            .get(r.0 as usize)
                            .ok_or(BakeryError::UnknownRow(r))?;
                        rows[r.0 as usize] = src[family.idx()];
                    }
                    None => {
                        for (dst, src) in rows.iter_mut().zip(self.table.iter()) {
                            *dst = src[family.idx()];
                        }
                    }
                }
                let _ = out.put(Reply::Answer { op, family, rows });
                Ok(ReplicaReport::Answered)
            }
        }
    }

    /// Visits the timestamp of every cell.
    pub fn timestamps(&self, mut f: impl FnMut(Ts)) {
        for cell in self.table.iter().flatten().flatten().flatten() {
            f(cell.ts);
        }
    }

    /// Renames every cell's timestamp (see [`Renaming`]); refused, changing nothing, if
    /// a cell's timestamp is not in the renaming.
    pub fn rename_timestamps(&mut self, map: &Renaming<'_>) -> Result<(), BakeryError> {
        if !self.table.iter().flatten().flatten().all(|c| map.covers(c)) {
            return Err(BakeryError::BadRenaming);
        }
        for cell in self.table.iter_mut().flatten().flatten().flatten() {
            *cell = map.cell(*cell);
        }
        Ok(())
    }

    /// Puts a cell directly (the initial contents of a configuration, e.g. work items
    /// enqueued before the run). Same last-write-wins rule as a write.
    pub fn seed(
        &mut self,
        row: Row,
        family: Family,
        col: u16,
        cell: Cell,
    ) -> Result<(), BakeryError> {
        let slot = self
            .table
            .get_mut(row.0 as usize)
            .ok_or(BakeryError::UnknownRow(row))?[family.idx()]
        .get_mut(col as usize)
        .ok_or(BakeryError::UnknownClient(ClientId(col)))?;
        if slot.is_none_or(|old| cell.supersedes(&old)) {
            *slot = Some(cell);
        }
        Ok(())
    }
}
