//! The bakery client of the bakery design as a pure state machine, with the coordinator logic in
//! the client: every operation is sent to all `N` replicas; a write is done after `W`
//! acknowledgements, a read after `R` answers, merged column by column by write
//! timestamp (tombstones hide values).
//!
//! # The lock program (seed "Algorithm", lines 1–19)
//! ```text
//!  1 write choosing[me] = 1        Phase::Choose
//!  2 number_hash = read number     Phase::ReadMax
//!  3 client_number = max + 1
//!  4 write number[me] = number     Phase::TakeNumber
//!  5 delete choosing[me]           Phase::Unchoose
//!  6 choosing_hash = read choosing Phase::ReadChoosing
//!  7 number_hash = read number     Phase::ReadNumbers
//!  8 for id = 1 to max_clients
//!  9   while choosing_hash[id] == 1: sleep, re-read choosing    Phase::WaitChoosing
//! 13   while number_hash[id] exists and < client_number:
//!          sleep, re-read number                                Phase::WaitNumber
//! 18 critical section                                           Phase::Held
//! 19 delete number[me]                                          Phase::Exit
//! ```
//! # The work-queue program (seed "Distributed work queue")
//! `scan` the `number` family of every item row (`Phase::Scan`), take the lowest row whose
//! `number` family has only the `0=0` column, run lines 1–7 on that row, then for each id
//! wait while `choosing` is set and *give up* (delete the own number, rescan:
//! `Phase::GiveUp`) if a smaller number exists; process (`Phase::Held`); remove the item
//! (`details`, `0=0`, the own number: `Phase::Remove`) and scan again.
//!
//! # Variants
//! [`Variant::LITERAL`] is the text as written; every flag of [`Variant`] switches one
//! correction on, and [`Variant::HILOCK`] has them all. The defects they fix are named in
//! `spec/SPEC.md` 5.1, "Defects of the literal text", with their counterexamples.
//!
//! # Time and leases
//! Time is an input: [`Input::Tick`] says how many ticks passed. With leases
//! ([`Variant::leases`]) a client's entries are valid for [`Config::lease`] ticks from the
//! start of the write that created or last renewed them; the client renews its `number`
//! entry when fewer than [`Config::renew_below`] ticks are left, and when the lease runs out
//! it stops: a holder reports [`ClientOutput::Lost`], a waiter abandons and starts over.
//! A reader counts another client's entry as expired only when it has seen the same write
//! (same timestamp) for [`Config::expiry`] ticks *and a read started after that* still
//! returns it: with `expiry ≥ lease` and intersecting quorums the writer has stopped by
//! then (a renewal completed before that read began would have been seen).
//!
//! Write timestamps come from a Lamport clock (one more than every timestamp the client
//! has written or read), so a delete always supersedes the cell it deletes.

use super::store::{Cell, ClientId, Columns, Family, Reply, Request, Row, Ts, Value};
use super::{BakeryError, Renaming, ReplicaId, Sink, Ticket};

/// The corrections of hilock; every flag `false` is the seed as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Variant {
    /// Line 13 compares tickets `(number, id)`; literally `number_hash[id] < client_number`,
    /// so two clients that drew the same number both pass each other.
    pub tie_break: bool,
    /// After waiting for `choosing_hash[id]` to clear, `number_hash` is read again before
    /// line 13 looks at it; literally line 13 uses the hash of line 7 (or of the last
    /// number re-read), read before that client had written its number.
    pub reread_numbers: bool,
    /// The loop of line 8 skips the client's own id; literally it compares the client
    /// with its own entry (a non-issue when `R + W > N`, see `spec/SPEC.md` 5.1).
    pub skip_self: bool,
    /// Lines 1 and 5 write the column `client_id` (the reading the syntax note gives);
    /// `false` reads `client_id=1` as column 1: every client sets and clears the same flag.
    pub own_choosing_column: bool,
    /// Work queue: the choosing re-read reads the work item's row; literally
    /// `read <lock_id, CF=choosing>`, a row nobody writes.
    pub queue_reads_item: bool,
    /// Leases on `choosing` and `number` entries (the seed's own "Some issues").
    pub leases: bool,
    /// Line 19 (and a give-up) writes `Released(number)` instead of a tombstone, so the
    /// next `max` still counts it and tickets — the fencing tokens — only grow; literally
    /// a delete, and numbers start again at 1 whenever the bakery empties.
    pub keep_tickets: bool,
    /// The client refuses `R + W ≤ N` (quorums that need not intersect).
    pub intersecting_quorums: bool,
    /// Work queue: wiki 140 (`work_details = read <work_item_id, CF=details>`) is read after
    /// the win, before processing, and an item whose details are gone — removed by a worker
    /// that processed it after this worker's scan saw it free — is given up (own number
    /// given back, rescan) instead of processed again. Literally the details are read and
    /// processed whatever they are (the stale-scan defect, `spec/SPEC.md` 5.1). Traces saved
    /// before this flag existed read it as `false`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub item_exists: bool,
}

impl Variant {
    /// The seed as written.
    pub const LITERAL: Variant = Variant {
        tie_break: false,
        reread_numbers: false,
        skip_self: false,
        own_choosing_column: false,
        queue_reads_item: false,
        leases: false,
        keep_tickets: false,
        intersecting_quorums: false,
        item_exists: false,
    };
    /// hilock's bakery: every correction.
    pub const HILOCK: Variant = Variant {
        tie_break: true,
        reread_numbers: true,
        skip_self: true,
        own_choosing_column: true,
        queue_reads_item: true,
        leases: true,
        keep_tickets: true,
        intersecting_quorums: true,
        item_exists: true,
    };
}

impl Default for Variant {
    fn default() -> Self {
        Variant::HILOCK
    }
}

/// Which algorithm of the seed the client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub enum Program {
    /// "Locking a row": the lock is the row `row`.
    Lock {
        /// `lock_id`.
        row: Row,
    },
    /// "Distributed work queue" over the item rows `0..items`.
    Queue {
        /// Number of item rows.
        items: u8,
        /// The row the literal choosing re-read reads (`lock_id`).
        lock_id: Row,
    },
}

/// A client's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Config {
    /// Read quorum R.
    pub r: u8,
    /// Write quorum W.
    pub w: u8,
    /// Variant.
    pub variant: Variant,
    /// Ticks an entry stays valid after the start of the write that (re)wrote it.
    pub lease: u8,
    /// Ticks a reader watches an unchanged entry before a later read may count it expired.
    pub expiry: u8,
    /// Renew when at most this many ticks of the lease are left.
    pub renew_below: u8,
    /// Lock or work queue.
    pub program: Program,
}

/// Where the client is in its program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Phase {
    /// Remainder section (lock) or not started (queue).
    Idle,
    /// Queue: `scan <0.., CF=number>` in flight.
    Scan,
    /// Queue: no item was free; sleeping before the next scan.
    ScanSleep,
    /// Line 1 in flight.
    Choose,
    /// Line 2 in flight.
    ReadMax,
    /// Line 4 in flight.
    TakeNumber,
    /// Line 5 in flight.
    Unchoose,
    /// Line 6 in flight.
    ReadChoosing,
    /// Line 7 in flight.
    ReadNumbers,
    /// Lines 9–11 for `id`: sleeping (`reading == false`) or re-reading `choosing`.
    WaitChoosing {
        /// The id waited for.
        id: u16,
        /// A re-read is in flight.
        reading: bool,
    },
    /// hilock: the `number` re-read after a choosing wait, before line 13 for `id`.
    RereadNumbers {
        /// The id about to be checked.
        id: u16,
    },
    /// Lines 13–15 for `id`.
    WaitNumber {
        /// The id waited for.
        id: u16,
        /// A re-read is in flight.
        reading: bool,
    },
    /// Queue: "someone else is handling this work item": the own number's delete in flight.
    GiveUp,
    /// Queue, hilock (`item_exists`): won; wiki 140's read of the item's `details` in
    /// flight, to give the item up if it was removed meanwhile.
    ReadDetails,
    /// Line 18: in the critical section (lock) or processing the item (queue).
    Held,
    /// Line 19 in flight.
    Exit,
    /// Queue: removing the item: 0 = `details`, 1 = `0=0`, 2 = the own number.
    Remove {
        /// Which delete is in flight.
        step: u8,
    },
}

impl Phase {
    /// Whether the client is sleeping ("sleep a little") and waits for [`Input::Wake`].
    pub const fn sleeping(self) -> bool {
        matches!(
            self,
            Phase::ScanSleep
                | Phase::WaitChoosing { reading: false, .. }
                | Phase::WaitNumber { reading: false, .. }
        )
    }

    /// Whether the phase is one of the waiting loops (lines 9–16) or the queue's scan loop.
    pub const fn waiting(self) -> bool {
        matches!(
            self,
            Phase::ScanSleep | Phase::Scan | Phase::WaitChoosing { .. } | Phase::WaitNumber { .. }
        )
    }

    /// The client has entries in the store that its lease covers (lines 1–18).
    pub const fn leased(self) -> bool {
        matches!(
            self,
            Phase::Choose
                | Phase::ReadMax
                | Phase::TakeNumber
                | Phase::Unchoose
                | Phase::ReadChoosing
                | Phase::ReadNumbers
                | Phase::WaitChoosing { .. }
                | Phase::RereadNumbers { .. }
                | Phase::WaitNumber { .. }
                | Phase::ReadDetails
                | Phase::Held
        )
    }

    /// The own `number` entry has been written (line 4 done) and not yet given back
    /// (line 19): the seed's "if a client crashes after setting its number".
    pub const fn numbered(self) -> bool {
        self.leased() && !matches!(self, Phase::Choose | Phase::ReadMax | Phase::TakeNumber)
    }
}

/// An input to a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input<'a, const K: usize, const C: usize> {
    /// Lock: start line 1.
    Acquire,
    /// Lock: leave the critical section (line 19).
    Release,
    /// Queue: start the worker loop.
    Work,
    /// Queue: the item is processed; remove it.
    Done,
    /// "Sleep a little" is over: re-read.
    Wake,
    /// `elapsed` ticks passed.
    Tick {
        /// Ticks.
        elapsed: u8,
    },
    /// A replica's reply.
    Reply {
        /// The replica.
        from: ReplicaId,
        /// The reply.
        reply: &'a Reply<K, C>,
    },
}

/// What a client step emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientOutput {
    /// Send `req` to replica `to`.
    Send {
        /// Replica.
        to: ReplicaId,
        /// Request.
        req: Request,
    },
    /// The client entered the critical section (or took the item) with this ticket,
    /// which is its fencing token.
    Entered {
        /// Row.
        row: Row,
        /// Fencing token.
        token: Ticket,
    },
    /// Line 19 is done: the lock is free of this client.
    Exited {
        /// Row.
        row: Row,
    },
    /// The lease ran out while holding: stop using the lock now.
    Lost {
        /// Row.
        row: Row,
        /// The token that is no longer valid.
        token: Ticket,
    },
    /// The lease ran out while waiting: the client starts over with a new number.
    Abandoned {
        /// Row.
        row: Row,
    },
    /// Queue: the item's `0=0` column is deleted (the item is done).
    Completed {
        /// Row.
        row: Row,
    },
    /// The client sleeps until [`Input::Wake`].
    Sleep,
}

/// What a step did (the rule of the seed that fired).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Line 1 started.
    Line1Choosing,
    /// Line 2 started.
    Line2ReadMax,
    /// Lines 3–4: a number drawn and written.
    Line4TakeNumber,
    /// Line 5 started.
    Line5Unchoose,
    /// Line 6 started.
    Line6ReadChoosing,
    /// Line 7 started.
    Line7ReadNumbers,
    /// Line 9: the client sleeps on a `choosing` entry.
    Line9WaitChoosing,
    /// A wait-loop re-read started (lines 11, 15) or the queue rescans.
    Reread,
    /// hilock: `number` re-read after a choosing wait.
    RereadNumbers,
    /// Line 13: the client sleeps on a smaller `number`.
    Line13WaitNumber,
    /// Line 18: entered.
    Line18Enter,
    /// Line 19 started.
    Line19Release,
    /// Line 19 done.
    Exited,
    /// Queue: scan started.
    Scan,
    /// Queue: nothing free; sleep.
    NothingToDo,
    /// Queue: a smaller number exists; give up the item.
    GiveUp,
    /// Queue (`item_exists`): won; wiki 140's read of `details` started.
    ReadDetails,
    /// Queue (`item_exists`): the item's `details` are gone (removed after the scan); give
    /// it up.
    ItemGone,
    /// Queue: one of the removal deletes.
    RemoveItem,
    /// Queue: the item's `0=0` is deleted.
    ItemCompleted,
    /// A reply was counted; the quorum is not reached yet.
    Collecting,
    /// A reply to an operation that is no longer outstanding (ignored).
    Stale,
    /// A `Wake` while not sleeping, or a `Tick` that changed nothing visible.
    Idle,
    /// Ticks counted.
    Tick,
    /// A lease renewal started.
    LeaseRenew,
    /// A lease renewal completed.
    LeaseRenewed,
    /// The lease ran out.
    LeaseLost,
}

/// The step's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Report {
    /// What fired.
    pub rule: Rule,
}

const fn rep(rule: Rule) -> Result<Report, BakeryError> {
    Ok(Report { rule })
}

/// How long a reader has watched one write of another client's entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Obs {
    ts: Ts,
    age: u8,
}

/// An operation in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Op<const K: usize, const C: usize> {
    id: u32,
    /// `Some(family)` for a read.
    read: Option<Family>,
    /// Bit `r`: replica `r` has answered.
    replied: u8,
    /// Reads: the answers merged so far.
    view: [Columns<C>; K],
    /// Reads with leases: per row, the columns whose observation was ripe (watched for
    /// `expiry` ticks) when the read was sent.
    ripe: [u32; K],
}

/// A lease renewal in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Renewal {
    op: u32,
    replied: u8,
    /// Ticks left of the lease it will grant, counted from its start.
    left: u8,
}

/// One bakery client (seed lines 1–19 or the work-queue loop): `N` replicas, `K` rows,
/// `C` columns (client ids `1..C`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client<const N: usize, const K: usize, const C: usize> {
    id: ClientId,
    cfg: Config,
    clock: u32,
    next_op: u32,
    phase: Phase,
    op: Option<Op<K, C>>,
    row: Row,
    ticket: u32,
    choosing: Columns<C>,
    choosing_expired: u32,
    numbers: Columns<C>,
    numbers_expired: u32,
    /// `numbers` was read before `choosing` was last re-read.
    numbers_stale: bool,
    /// Ticks left of the own lease (leases on, entries written).
    lease: Option<u8>,
    renewal: Option<Renewal>,
    /// Per row, for `choosing` and `number`, per column.
    obs: [[[Obs; C]; 2]; K],
}

impl<const N: usize, const K: usize, const C: usize> Client<N, K, C> {
    /// A client with id `id` (`1..C`). Rejects quorums outside `1..=N`, `R + W ≤ N` when
    /// the variant demands intersecting quorums, a lease of 0 or an expiry shorter than the
    /// lease when leases are on, and rows outside `0..K`.
    pub fn new(id: ClientId, cfg: Config) -> Result<Self, BakeryError> {
        if id.0 == 0 || id.0 as usize >= C || C > 32 {
            return Err(BakeryError::UnknownClient(id));
        }
        let (r, w) = (cfg.r as usize, cfg.w as usize);
        if r == 0 || w == 0 || r > N || w > N || N > 8 {
            return Err(BakeryError::BadQuorum);
        }
        if cfg.variant.intersecting_quorums && r + w <= N {
            return Err(BakeryError::WeakQuorum);
        }
        if cfg.variant.leases && (cfg.lease == 0 || cfg.expiry < cfg.lease) {
            return Err(BakeryError::BadLease);
        }
        let row = match cfg.program {
            Program::Lock { row } => row,
            Program::Queue { items, lock_id } => {
                if items as usize > K || items == 0 {
                    return Err(BakeryError::UnknownRow(Row(items)));
                }
                lock_id
            }
        };
        if row.0 as usize >= K {
            return Err(BakeryError::UnknownRow(row));
        }
        Ok(Client {
            id,
            cfg,
            clock: 0,
            next_op: 1,
            phase: Phase::Idle,
            op: None,
            row: match cfg.program {
                Program::Lock { row } => row,
                Program::Queue { .. } => Row(0),
            },
            ticket: 0,
            choosing: [None; C],
            choosing_expired: 0,
            numbers: [None; C],
            numbers_expired: 0,
            numbers_stale: false,
            lease: None,
            renewal: None,
            obs: [[[Obs::default(); C]; 2]; K],
        })
    }

    /// This client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }
    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Where it is.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// The row it works on (the lock, or the current item).
    pub fn row(&self) -> Row {
        self.row
    }
    /// `client_number` (0 before line 3).
    pub fn number(&self) -> u32 {
        self.ticket
    }
    /// The fencing token while in the critical section.
    pub fn held(&self) -> Option<Ticket> {
        (self.phase == Phase::Held).then_some(Ticket {
            number: self.ticket,
            id: self.id,
        })
    }
    /// Ticks left of its lease.
    pub fn lease_left(&self) -> Option<u8> {
        self.lease
    }
    /// The Lamport clock (the last timestamp written or seen).
    pub fn clock(&self) -> u32 {
        self.clock
    }
    /// `choosing_hash` as last read.
    pub fn choosing_hash(&self) -> &Columns<C> {
        &self.choosing
    }
    /// `number_hash` as last read.
    pub fn number_hash(&self) -> &Columns<C> {
        &self.numbers
    }
    /// Moves the Lamport clock to at least `ts` (never back). A client that starts again
    /// under an id an earlier run used passes the largest write timestamp it finds in the
    /// store, so that its next writes supersede that run's entries in its own columns.
    pub fn advance_clock(&mut self, ts: Ts) {
        self.clock = self.clock.max(ts.0);
    }
    /// The operation ids outstanding: the main operation and a lease renewal.
    pub fn outstanding(&self) -> (Option<u32>, Option<u32>) {
        (self.op.map(|o| o.id), self.renewal.map(|r| r.op))
    }

    /// Renames the outstanding operations to 1 (main) and 2 (renewal) and returns the
    /// old ids, so that a harness can rename the requests still in flight (and drop the
    /// others' answers). Operation ids only tell outstanding operations apart; a model
    /// checker calls this after every step to keep its states canonical.
    pub fn compact_ops(&mut self) -> (Option<u32>, Option<u32>) {
        let old = self.outstanding();
        if let Some(o) = &mut self.op {
            o.id = 1;
        }
        if let Some(r) = &mut self.renewal {
            r.op = 2;
        }
        self.next_op = 3;
        old
    }

    /// Which replicas have answered the outstanding operations (bit `r`: replica `r`):
    /// the main operation and a lease renewal.
    pub fn replied(&self) -> (u8, u8) {
        (
            self.op.map_or(0, |o| o.replied),
            self.renewal.map_or(0, |r| r.replied),
        )
    }

    /// Renames the replicas: replica `r` becomes `perm[r]` (a permutation of `0..N`; any
    /// other slice is refused and changes nothing). Replicas are interchangeable, so a
    /// model checker maps symmetric states to one representative with this.
    pub fn permute_replicas(&mut self, perm: &[u8; N]) -> Result<(), BakeryError> {
        let mut seen = 0u16;
        for &p in perm {
            if p as usize >= N || seen & (1 << p) != 0 {
                return Err(BakeryError::UnknownReplica(ReplicaId(p)));
            }
            seen |= 1 << p;
        }
        let map = |bits: u8| {
            perm.iter()
                .enumerate()
                .filter(|(r, _)| bits & (1 << r) != 0)
                .fold(0u8, |acc, (_, &p)| acc | (1 << p))
        };
        if let Some(o) = &mut self.op {
            o.replied = map(o.replied);
        }
        if let Some(r) = &mut self.renewal {
            r.replied = map(r.replied);
        }
        Ok(())
    }

    /// Visits every write timestamp the client holds: its Lamport clock, the cells of
    /// `choosing_hash`, `number_hash` and of the read in progress, and the timestamps its
    /// lease observations watch (0, "none", is skipped).
    pub fn timestamps(&self, mut f: impl FnMut(Ts)) {
        if self.clock > 0 {
            f(Ts(self.clock));
        }
        let views = self.op.iter().flat_map(|o| o.view.iter());
        let hashes = [&self.choosing, &self.numbers].into_iter().chain(views);
        for cell in hashes.flatten().flatten() {
            f(cell.ts);
        }
        for o in self.obs.iter().flatten().flatten() {
            if o.ts.0 > 0 {
                f(o.ts);
            }
        }
    }

    /// Renames every timestamp the client holds (see [`Renaming`]): with a renaming that
    /// keeps order and adjacency the client behaves exactly as before. Refused, changing
    /// nothing, if a timestamp it holds is not in the renaming.
    pub fn rename_timestamps(&mut self, map: &Renaming<'_>) -> Result<(), BakeryError> {
        let mut ok = map.get(Ts(self.clock)).is_some();
        self.timestamps(|t| ok &= map.get(t).is_some());
        if !ok {
            return Err(BakeryError::BadRenaming);
        }
        self.clock = map.get(Ts(self.clock)).map_or(self.clock, |t| t.0);
        let views = self.op.iter_mut().flat_map(|o| o.view.iter_mut());
        let hashes = [&mut self.choosing, &mut self.numbers]
            .into_iter()
            .chain(views);
        for cell in hashes.flatten().flatten() {
            *cell = map.cell(*cell);
        }
        for o in self.obs.iter_mut().flatten().flatten() {
            o.ts = map.get(o.ts).unwrap_or(o.ts);
        }
        Ok(())
    }

    /// Apply one input. Outputs go to `out`, which must have room for `N + 2` outputs.
    /// On `Err` nothing changed.
    pub fn step(
        &mut self,
        input: Input<'_, K, C>,
        out: &mut impl Sink<ClientOutput>,
    ) -> Result<Report, BakeryError> {
        if out.room() < N + 2 {
            return Err(BakeryError::OutputsFull);
        }
        let lock = matches!(self.cfg.program, Program::Lock { .. });
        match input {
            Input::Acquire => {
                if !lock {
                    return Err(BakeryError::WrongProgram);
                }
                if self.phase != Phase::Idle {
                    return Err(BakeryError::NotIdle);
                }
                self.choose(out);
                rep(Rule::Line1Choosing)
            }
            Input::Work => {
                if lock {
                    return Err(BakeryError::WrongProgram);
                }
                if self.phase != Phase::Idle {
                    return Err(BakeryError::NotIdle);
                }
                self.scan(out);
                rep(Rule::Scan)
            }
            Input::Release => {
                if !lock {
                    return Err(BakeryError::WrongProgram);
                }
                if self.phase != Phase::Held {
                    return Err(BakeryError::NotHeld);
                }
                self.lease = None;
                self.renewal = None;
                let val = self.given_back();
                self.write(Family::Number, self.id.0, val, out);
                self.phase = Phase::Exit;
                rep(Rule::Line19Release)
            }
            Input::Done => {
                if lock {
                    return Err(BakeryError::WrongProgram);
                }
                if self.phase != Phase::Held {
                    return Err(BakeryError::NotHeld);
                }
                self.lease = None;
                self.renewal = None;
                self.write(Family::Details, 0, None, out);
                self.phase = Phase::Remove { step: 0 };
                rep(Rule::RemoveItem)
            }
            Input::Wake => Ok(self.wake(out)),
            Input::Tick { elapsed } => Ok(self.tick(elapsed, out)),
            Input::Reply { from, reply } => self.reply(from, reply, out),
        }
    }

    // ----- helpers -------------------------------------------------------------------

    /// Lines 2–17's local variables are dead once the loop of line 8 is left: forgetting
    /// them keeps states that differ only in dead values apart from nothing.
    fn forget_hashes(&mut self) {
        self.choosing = [None; C];
        self.numbers = [None; C];
        self.choosing_expired = 0;
        self.numbers_expired = 0;
        self.numbers_stale = false;
    }

    /// Line 19 / wiki 135 / wiki 145: what the own `number` column becomes when the number
    /// is given back — a tombstone (the text), or `Released(number)` (`keep_tickets`).
    fn given_back(&self) -> Option<Value> {
        self.cfg
            .variant
            .keep_tickets
            .then_some(Value::Released(self.ticket))
    }

    fn new_op(&mut self) -> u32 {
        let id = self.next_op;
        self.next_op = self.next_op.wrapping_add(1).max(3);
        id
    }

    fn send_all(&self, req: Request, out: &mut impl Sink<ClientOutput>) {
        for r in 0..N {
            let _ = out.put(ClientOutput::Send {
                to: ReplicaId(r as u8),
                req,
            });
        }
    }

    fn write(
        &mut self,
        family: Family,
        col: u16,
        val: Option<Value>,
        out: &mut impl Sink<ClientOutput>,
    ) {
        self.clock = self.clock.saturating_add(1);
        let cell = Cell {
            ts: Ts(self.clock),
            val,
        };
        let id = self.new_op();
        self.op = Some(Op {
            id,
            read: None,
            replied: 0,
            view: [[None; C]; K],
            ripe: [0; K],
        });
        self.send_all(
            Request::Write {
                op: id,
                row: self.row,
                family,
                col,
                cell,
            },
            out,
        );
    }

    fn read(&mut self, family: Family, row: Option<Row>, out: &mut impl Sink<ClientOutput>) {
        let id = self.new_op();
        let mut ripe = [0u32; K];
        if self.cfg.variant.leases && family != Family::Details {
            for (k, mask) in ripe.iter_mut().enumerate() {
                if row.is_some_and(|r| r.0 as usize != k) {
                    continue;
                }
                for (c, o) in self.obs[k][family.idx()].iter().enumerate() {
                    if o.ts != Ts(0) && o.age >= self.cfg.expiry {
                        *mask |= 1 << c;
                    }
                }
            }
        }
        self.op = Some(Op {
            id,
            read: Some(family),
            replied: 0,
            view: [[None; C]; K],
            ripe,
        });
        self.send_all(
            Request::Read {
                op: id,
                family,
                row,
            },
            out,
        );
    }

    /// Lines 1 and 5 (wiki 62, 66; queue wiki 121, 125): the column written in `choosing`
    /// — literally `client_id=1`, i.e. column 1 for every client; the column `client_id`
    /// with `own_choosing_column` (the syntax note of wiki 58–59).
    fn choosing_col(&self) -> u16 {
        if self.cfg.variant.own_choosing_column {
            self.id.0
        } else {
            1
        }
    }

    /// Line 1 (wiki 62; queue wiki 121): `write <lock_id, CF=choosing, client_id=1>`
    /// (also the restart after an abandoned attempt). Starts the lease with leases on.
    fn choose(&mut self, out: &mut impl Sink<ClientOutput>) {
        if self.cfg.variant.leases {
            self.lease = Some(self.cfg.lease);
        }
        self.renewal = None;
        let col = self.choosing_col();
        self.write(Family::Choosing, col, Some(Value::Int(1)), out);
        self.phase = Phase::Choose;
    }

    /// Queue, wiki 117: `scan <0.., CF=number>`; wiki 118–119 are in [`Self::read_done`].
    fn scan(&mut self, out: &mut impl Sink<ClientOutput>) {
        self.lease = None;
        self.renewal = None;
        self.forget_hashes();
        self.ticket = 0;
        self.row = Row(0);
        self.read(Family::Number, None, out);
        self.phase = Phase::Scan;
    }

    /// "sleep a little" is over (lines 10–11 and 14–15; queue wiki 130–131): re-read
    /// `choosing` (literally the queue re-reads `lock_id`, wiki 131) or `number`, or rescan.
    fn wake(&mut self, out: &mut impl Sink<ClientOutput>) -> Report {
        let row = self.row;
        match self.phase {
            Phase::WaitChoosing { id, reading: false } => {
                let target = match self.cfg.program {
                    Program::Queue { lock_id, .. } if !self.cfg.variant.queue_reads_item => lock_id,
                    _ => row,
                };
                self.read(Family::Choosing, Some(target), out);
                self.phase = Phase::WaitChoosing { id, reading: true };
                Report { rule: Rule::Reread }
            }
            Phase::WaitNumber { id, reading: false } => {
                self.read(Family::Number, Some(row), out);
                self.phase = Phase::WaitNumber { id, reading: true };
                Report { rule: Rule::Reread }
            }
            Phase::ScanSleep => {
                self.scan(out);
                Report { rule: Rule::Reread }
            }
            _ => Report { rule: Rule::Idle },
        }
    }

    /// hilock's leases (what wiki 85–86 and 154–155 ask for): age the observations of
    /// other clients' entries, count down the own lease, renew the `number` entry when
    /// `renew_below` ticks are left, and stop when it runs out ([`Self::lose`]).
    fn tick(&mut self, elapsed: u8, out: &mut impl Sink<ClientOutput>) -> Report {
        if !self.cfg.variant.leases || elapsed == 0 {
            return Report { rule: Rule::Idle };
        }
        let expiry = self.cfg.expiry;
        for row in self.obs.iter_mut() {
            for fam in row.iter_mut() {
                for o in fam.iter_mut() {
                    if o.ts != Ts(0) {
                        o.age = o.age.saturating_add(elapsed).min(expiry);
                    }
                }
            }
        }
        if let Some(r) = &mut self.renewal {
            r.left = r.left.saturating_sub(elapsed);
        }
        let Some(left) = self.lease else {
            return Report { rule: Rule::Tick };
        };
        let left = left.saturating_sub(elapsed);
        self.lease = Some(left);
        if left == 0 && self.phase.leased() {
            self.lose(out);
            return Report {
                rule: Rule::LeaseLost,
            };
        }
        if left <= self.cfg.renew_below && self.renewal.is_none() && self.phase.numbered() {
            self.clock = self.clock.saturating_add(1);
            let cell = Cell {
                ts: Ts(self.clock),
                val: Some(Value::Int(self.ticket)),
            };
            let op = self.new_op();
            self.renewal = Some(Renewal {
                op,
                replied: 0,
                left: self.cfg.lease,
            });
            self.send_all(
                Request::Write {
                    op,
                    row: self.row,
                    family: Family::Number,
                    col: self.id.0,
                    cell,
                },
                out,
            );
            return Report {
                rule: Rule::LeaseRenew,
            };
        }
        Report { rule: Rule::Tick }
    }

    /// The lease ran out: a holder stops, a waiter starts over.
    fn lose(&mut self, out: &mut impl Sink<ClientOutput>) {
        let row = self.row;
        let held = self.held();
        self.lease = None;
        self.renewal = None;
        self.op = None;
        self.forget_hashes();
        match (held, self.cfg.program) {
            (Some(token), Program::Lock { .. }) => {
                let _ = out.put(ClientOutput::Lost { row, token });
                self.ticket = 0;
                self.phase = Phase::Idle;
            }
            (Some(token), Program::Queue { .. }) => {
                let _ = out.put(ClientOutput::Lost { row, token });
                self.scan(out);
            }
            (None, Program::Lock { .. }) => {
                let _ = out.put(ClientOutput::Abandoned { row });
                self.choose(out);
            }
            (None, Program::Queue { .. }) => {
                let _ = out.put(ClientOutput::Abandoned { row });
                self.scan(out);
            }
        }
    }

    fn reply(
        &mut self,
        from: ReplicaId,
        reply: &Reply<K, C>,
        out: &mut impl Sink<ClientOutput>,
    ) -> Result<Report, BakeryError> {
        if from.0 as usize >= N {
            return Err(BakeryError::UnknownReplica(from));
        }
        let bit = 1u8 << from.0;
        let (op_id, answer) = match reply {
            Reply::Ack { op } => (*op, None),
            Reply::Answer { op, family, rows } => (*op, Some((*family, rows))),
        };
        // A lease renewal.
        if let Some(r) = self.renewal.filter(|r| r.op == op_id) {
            if answer.is_some() {
                return Err(BakeryError::BadReply);
            }
            if r.replied & bit != 0 {
                return rep(Rule::Stale);
            }
            let replied = r.replied | bit;
            if (replied.count_ones() as u8) < self.cfg.w {
                self.renewal = Some(Renewal { replied, ..r });
                return rep(Rule::Collecting);
            }
            self.renewal = None;
            if self.lease.is_some() {
                self.lease = Some(r.left);
            }
            return rep(Rule::LeaseRenewed);
        }
        let Some(op) = self.op.filter(|o| o.id == op_id) else {
            return rep(Rule::Stale);
        };
        match (op.read, answer) {
            (None, None) => {}
            (Some(f), Some((g, _))) if f == g => {}
            _ => return Err(BakeryError::BadReply),
        }
        if op.replied & bit != 0 {
            return rep(Rule::Stale);
        }
        let replied = op.replied | bit;
        let mut op = Op { replied, ..op };
        if let Some((_, rows)) = answer {
            for (dst, src) in op.view.iter_mut().zip(rows.iter()) {
                for (d, s) in dst.iter_mut().zip(src.iter()) {
                    if let Some(c) = s {
                        self.clock = self.clock.max(c.ts.0);
                    }
                    *d = Cell::merge(*d, *s);
                }
            }
        }
        let quorum = if op.read.is_some() {
            self.cfg.r
        } else {
            self.cfg.w
        };
        if (replied.count_ones() as u8) < quorum {
            self.op = Some(op);
            return rep(Rule::Collecting);
        }
        self.op = None;
        Ok(Report {
            rule: match op.read {
                None => self.write_done(out),
                Some(f) => self.read_done(f, &op, out),
            },
        })
    }

    /// A write reached its `W` acknowledgements: the next line. Line 1 → line 2, line 4
    /// → line 5, line 5 → line 6, line 19 → done; queue: give-up (wiki 135) → rescan, and
    /// the removal (wiki 143–145) one delete after the other.
    fn write_done(&mut self, out: &mut impl Sink<ClientOutput>) -> Rule {
        let row = self.row;
        match self.phase {
            Phase::Choose => {
                self.read(Family::Number, Some(row), out);
                self.phase = Phase::ReadMax;
                Rule::Line2ReadMax
            }
            Phase::TakeNumber => {
                let col = self.choosing_col();
                self.write(Family::Choosing, col, None, out);
                self.phase = Phase::Unchoose;
                Rule::Line5Unchoose
            }
            Phase::Unchoose => {
                self.read(Family::Choosing, Some(row), out);
                self.phase = Phase::ReadChoosing;
                Rule::Line6ReadChoosing
            }
            Phase::Exit => {
                self.ticket = 0;
                self.phase = Phase::Idle;
                let _ = out.put(ClientOutput::Exited { row });
                Rule::Exited
            }
            Phase::GiveUp => {
                self.scan(out);
                Rule::Scan
            }
            Phase::Remove { step: 0 } => {
                self.write(Family::Number, 0, None, out);
                self.phase = Phase::Remove { step: 1 };
                Rule::RemoveItem
            }
            Phase::Remove { step: 1 } => {
                let _ = out.put(ClientOutput::Completed { row });
                let val = self.given_back();
                self.write(Family::Number, self.id.0, val, out);
                self.phase = Phase::Remove { step: 2 };
                Rule::ItemCompleted
            }
            Phase::Remove { .. } => {
                self.scan(out);
                Rule::Scan
            }
            _ => Rule::Stale,
        }
    }

    /// Applies the lease observations of a completed read of `family` and returns, per
    /// row, the columns that count as expired.
    fn observe(&mut self, family: Family, op: &Op<K, C>) -> [u32; K] {
        let mut expired = [0u32; K];
        if !self.cfg.variant.leases || family == Family::Details {
            return expired;
        }
        for (k, (cols, exp)) in op.view.iter().zip(expired.iter_mut()).enumerate() {
            for (c, cell) in cols.iter().enumerate() {
                let Some(cell) = cell else { continue };
                let o = &mut self.obs[k][family.idx()][c];
                if o.ts == cell.ts {
                    if op.ripe[k] & (1 << c) != 0 {
                        *exp |= 1 << c;
                    }
                } else {
                    *o = Obs {
                        ts: cell.ts,
                        age: 0,
                    };
                }
            }
        }
        expired
    }

    /// A read reached its `R` answers (merged by timestamp): line 2 → line 3 (`max + 1`)
    /// and line 4; line 6 → line 7; line 7 → the loop of line 8; a re-read of lines 11 or 15
    /// → back into the loop; queue wiki 117 → wiki 118 (the lowest free row).
    fn read_done(
        &mut self,
        family: Family,
        op: &Op<K, C>,
        out: &mut impl Sink<ClientOutput>,
    ) -> Rule {
        let expired = self.observe(family, op);
        let row = self.row.0 as usize;
        match self.phase {
            Phase::ReadMax => {
                // Line 3: client_number = max(number_hash.values) + 1.
                let max = op.view[row]
                    .iter()
                    .filter_map(|c| c.and_then(|c| c.val))
                    .map(Value::number)
                    .max()
                    .unwrap_or(0);
                self.numbers = op.view[row];
                self.numbers_expired = expired[row];
                self.ticket = max.saturating_add(1);
                self.write(
                    Family::Number,
                    self.id.0,
                    Some(Value::Int(self.ticket)),
                    out,
                );
                self.phase = Phase::TakeNumber;
                Rule::Line4TakeNumber
            }
            Phase::ReadChoosing => {
                self.choosing = op.view[row];
                self.choosing_expired = expired[row];
                self.read(Family::Number, Some(self.row), out);
                self.phase = Phase::ReadNumbers;
                Rule::Line7ReadNumbers
            }
            Phase::ReadNumbers => {
                self.numbers = op.view[row];
                self.numbers_expired = expired[row];
                self.numbers_stale = false;
                self.check_from(1, out)
            }
            Phase::WaitChoosing { id, .. } => {
                // The literal queue reads `lock_id`'s row here.
                let k = match self.cfg.program {
                    Program::Queue { lock_id, .. } if !self.cfg.variant.queue_reads_item => {
                        lock_id.0 as usize
                    }
                    _ => row,
                };
                self.choosing = op.view[k];
                self.choosing_expired = expired[k];
                self.numbers_stale = true;
                self.check_from(id, out)
            }
            Phase::RereadNumbers { id } | Phase::WaitNumber { id, .. } => {
                self.numbers = op.view[row];
                self.numbers_expired = expired[row];
                self.numbers_stale = false;
                self.check_from(id, out)
            }
            Phase::ReadDetails => {
                // Wiki 140, read after the win: the item is still there iff its details are.
                if op.view[row][0].is_some_and(|c| c.val.is_some()) {
                    self.enter(out)
                } else {
                    self.give_up(out);
                    Rule::ItemGone
                }
            }
            Phase::Scan => {
                let Program::Queue { items, .. } = self.cfg.program else {
                    return Rule::Stale;
                };
                // "lowest row key where number CF only has the 0=0 column"
                let free = (0..items as usize).find(|&k| {
                    let marker = matches!(
                        op.view[k][0],
                        Some(Cell {
                            val: Some(Value::Int(0)),
                            ..
                        })
                    );
                    marker && (1..C).all(|c| !Self::live(&op.view[k], expired[k], c as u16))
                });
                match free {
                    Some(k) => {
                        self.row = Row(k as u8);
                        self.choose(out);
                        Rule::Line1Choosing
                    }
                    None => {
                        self.phase = Phase::ScanSleep;
                        let _ = out.put(ClientOutput::Sleep);
                        Rule::NothingToDo
                    }
                }
            }
            _ => Rule::Stale,
        }
    }

    /// A live (not released, not expired) integer entry in column `c`.
    fn live(cols: &Columns<C>, expired: u32, c: u16) -> bool {
        matches!(
            cols.get(c as usize),
            Some(Some(Cell {
                val: Some(Value::Int(_)),
                ..
            }))
        ) && expired & (1 << c) == 0
    }

    /// Lines 8–17 (queue wiki 128–138) from `id` on: line 9 sleeps while `choosing[id]`
    /// is 1; line 13 sleeps (queue wiki 133–136: gives the item up) while `number[id]`
    /// exists and is smaller — `number[id] < client_number` literally, the ticket order
    /// `(number, id)` with `tie_break`; the own id is compared too unless `skip_self`; and
    /// with `reread_numbers` the numbers are read again after a choosing wait, as line 9 of
    /// the classic algorithm (wiki 38) reads `number[j]` only after `choosing[j]` cleared.
    /// Past the last id: line 18, the critical section.
    fn check_from(&mut self, mut id: u16, out: &mut impl Sink<ClientOutput>) -> Rule {
        let v = self.cfg.variant;
        while (id as usize) < C {
            if id == 0 || (v.skip_self && id == self.id.0) {
                id += 1;
                continue;
            }
            // Line 9: while choosing_hash[id] == 1.
            if Self::live(&self.choosing, self.choosing_expired, id)
                && matches!(
                    self.choosing[id as usize],
                    Some(Cell {
                        val: Some(Value::Int(1)),
                        ..
                    })
                )
            {
                self.phase = Phase::WaitChoosing { id, reading: false };
                let _ = out.put(ClientOutput::Sleep);
                return Rule::Line9WaitChoosing;
            }
            if v.reread_numbers && self.numbers_stale {
                self.read(Family::Number, Some(self.row), out);
                self.phase = Phase::RereadNumbers { id };
                return Rule::RereadNumbers;
            }
            // Line 13: number_hash[id].exists and number_hash[id] < client_number.
            if Self::live(&self.numbers, self.numbers_expired, id) {
                let n = self.numbers[id as usize]
                    .and_then(|c| c.val)
                    .map_or(0, Value::number);
                let smaller = if v.tie_break {
                    (n, id) < (self.ticket, self.id.0)
                } else {
                    n < self.ticket
                };
                if smaller {
                    return match self.cfg.program {
                        Program::Lock { .. } => {
                            self.phase = Phase::WaitNumber { id, reading: false };
                            let _ = out.put(ClientOutput::Sleep);
                            Rule::Line13WaitNumber
                        }
                        Program::Queue { .. } => {
                            self.give_up(out);
                            Rule::GiveUp
                        }
                    };
                }
            }
            id += 1;
        }
        if self.cfg.variant.item_exists && matches!(self.cfg.program, Program::Queue { .. }) {
            self.forget_hashes();
            self.read(Family::Details, Some(self.row), out);
            self.phase = Phase::ReadDetails;
            return Rule::ReadDetails;
        }
        self.enter(out)
    }

    /// Queue wiki 135: give the item up — the own number back (a tombstone, or
    /// `Released(number)` with `keep_tickets`), then rescan ([`Self::write_done`]).
    fn give_up(&mut self, out: &mut impl Sink<ClientOutput>) {
        self.lease = None;
        self.renewal = None;
        let val = self.given_back();
        self.write(Family::Number, self.id.0, val, out);
        self.phase = Phase::GiveUp;
    }

    /// Line 18 (queue wiki 139): the critical section / processing the item.
    fn enter(&mut self, out: &mut impl Sink<ClientOutput>) -> Rule {
        self.forget_hashes();
        self.phase = Phase::Held;
        let _ = out.put(ClientOutput::Entered {
            row: self.row,
            token: Ticket {
                number: self.ticket,
                id: self.id,
            },
        });
        Rule::Line18Enter
    }
}
