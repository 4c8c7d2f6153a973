//! The I/O side of the kernel's replicated store: one [`ReplicaBackend`] per replica, the
//! strict text form of a cell, and [`QuorumStore`], which sends requests to replicas with
//! a time limit. Counting quorums and merging answers is the kernel client's
//! (`Client::reply`); nothing here decides what an answer means.

use futures_util::future::BoxFuture;
use hilock_kernel::bakery::{Cell, Family, ReplicaId, Reply, Request, Ts, Value};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Columns per family: client ids `1..COLUMNS` (column 0 is the work queue's marker).
pub const COLUMNS: usize = 32;
/// Rows the lock program uses: one, the lock.
pub const ROWS: usize = 1;
/// Rows a work-queue worker sees at once: its window of pending items (see
/// [`super::queue`]).
pub const QUEUE_ROWS: usize = 8;
/// A reply as the kernel's lock client takes it.
pub type LockReply = Reply<ROWS, COLUMNS>;

/// What the kernel's row indices name in the store, fixed for the lifetime of one request
/// (a retry goes to the same rows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The lock `NAME`: row 0.
    Lock(String),
    /// The work queue `name`: row `k` is the item `items[k]` (`None`: an empty slot, read
    /// as an empty row and never written).
    Queue {
        /// The queue's name.
        name: String,
        /// Item keys by row.
        items: Vec<Option<String>>,
    },
}

impl Scope {
    /// The scope of the lock `name`.
    pub fn lock(name: &str) -> Arc<Scope> {
        Arc::new(Scope::Lock(name.to_string()))
    }

    /// Whether this is a work queue (column 0 is the `0=0` marker / the details).
    pub fn is_queue(&self) -> bool {
        matches!(self, Scope::Queue { .. })
    }

    /// The item of row `k` (queues only).
    pub fn item(&self, k: usize) -> Option<&str> {
        match self {
            Scope::Lock(_) => None,
            Scope::Queue { items, .. } => items.get(k).and_then(|i| i.as_deref()),
        }
    }
}
/// The columns of one family of the lock's row.
pub type LockColumns = [Option<Cell>; COLUMNS];

/// Why a replica gave no usable answer. Every case counts as a missing answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicaError {
    /// No answer within the time limit.
    Timeout(Duration),
    /// Cannot connect, or the connection failed.
    Unreachable(String),
    /// The replica answered with an error.
    Refused(String),
    /// An entry that is not hilock's (or not this lock's): reported, never trusted.
    Malformed(String),
}

impl fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicaError::Timeout(d) => write!(f, "no answer within {} ms", d.as_millis()),
            ReplicaError::Unreachable(e) => write!(f, "unreachable: {e}"),
            ReplicaError::Refused(e) => write!(f, "error: {e}"),
            ReplicaError::Malformed(e) => write!(f, "malformed or foreign entry: {e}"),
        }
    }
}

/// One item of a queue's index as one replica lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The item's key.
    pub key: String,
    /// The replica has applied the delete of the item's `0=0` marker.
    pub done: bool,
}

/// A queue's index on one replica: the lowest pending keys, and the largest write
/// timestamp the replica has seen in the queue (a restarted worker's clock starts past it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Pending keys in key order (at most the limit asked for), with those of the keys
    /// asked about that this replica knows to be done.
    pub items: Vec<Listed>,
    /// Largest write timestamp of the queue.
    pub clock: u32,
    /// Index entries that cannot be item keys (not hilock's), each described with where
    /// it is: skipped, never listed in `items`.
    pub foreign: Vec<String>,
}

/// How long a push or a queue listing waits at least for the other replicas once enough
/// answered: as long again as they took, at least this, at most the call timeout.
pub const LINGER: Duration = Duration::from_millis(20);

/// The wait for the other replicas once enough answered after `took`: as long again, at
/// least [`LINGER`], at most `call_timeout` (for [`gather`]).
pub(crate) fn linger(took: Duration, call_timeout: Duration) -> Duration {
    took.max(LINGER).min(call_timeout)
}

/// Runs `calls` (one per replica) at once and keeps each answer at its replica's place,
/// until every one answered, or `enough` holds of the answers so far and then
/// `linger(how long that took)` has passed without the others answering; the replicas not
/// waited for are `None`. (A stopped replica then costs the quorum nothing, and with a
/// linger a write still reaches the replicas that answer about as fast as the quorum.)
pub(crate) async fn gather<T, F: std::future::Future<Output = T>>(
    calls: impl Iterator<Item = F>,
    enough: impl Fn(&[Option<T>]) -> bool,
    linger: impl Fn(Duration) -> Duration,
) -> Vec<Option<T>> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let start = tokio::time::Instant::now();
    let mut pending: FuturesUnordered<_> = calls
        .enumerate()
        .map(|(i, f)| async move { (i, f.await) })
        .collect();
    let mut answers: Vec<Option<T>> = (0..pending.len()).map(|_| None).collect();
    let mut until: Option<tokio::time::Instant> = None;
    loop {
        let next = match until {
            None => pending.next().await,
            Some(t) => match tokio::time::timeout_at(t, pending.next()).await {
                Ok(next) => next,
                Err(_) => break,
            },
        };
        let Some((i, r)) = next else { break };
        answers[i] = Some(r);
        if until.is_none() && enough(&answers) {
            let took = start.elapsed();
            let more = linger(took);
            if more.is_zero() {
                break;
            }
            until = Some(start + took + more);
        }
    }
    answers
}

fn no_queue<T: Send + 'static>() -> BoxFuture<'static, Result<T, ReplicaError>> {
    Box::pin(async {
        Err(ReplicaError::Refused(
            "this backend has no work queue".into(),
        ))
    })
}

/// One replica of the store: applies a kernel [`Request`] to the rows `scope` names and
/// answers as the kernel's `Replica::step` would (an `Ack` for a write — applied or
/// superseded —, the family's cells for a read). `K` is the number of rows of the kernel
/// client (1 for a lock, [`QUEUE_ROWS`] for a queue worker). The queue's methods outside
/// the kernel's requests (push, listing, payload) default to a refusal.
pub trait ReplicaBackend<const K: usize = 1>: Send + Sync + fmt::Debug + 'static {
    /// Where it is (for messages), e.g. `127.0.0.1:6379`.
    fn addr(&self) -> &str;
    /// Sends one request.
    fn call(
        self: Arc<Self>,
        scope: Arc<Scope>,
        req: Request,
    ) -> BoxFuture<'static, Result<Reply<K, COLUMNS>, ReplicaError>>;
    /// Enqueues `item` with `payload` in `queue` (idempotent; never overwrites a later
    /// write of the item's cells).
    fn push(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
        payload: Arc<str>,
    ) -> BoxFuture<'static, Result<(), ReplicaError>> {
        let _ = (queue, item, payload);
        no_queue()
    }
    /// The lowest `limit` pending keys of `queue`, and which of `known` are done here; index
    /// entries that cannot be item keys are skipped and named in [`Listing::foreign`].
    fn list(
        self: Arc<Self>,
        queue: Arc<str>,
        limit: usize,
        known: Arc<[String]>,
    ) -> BoxFuture<'static, Result<Listing, ReplicaError>> {
        let _ = (queue, limit, known);
        no_queue()
    }
    /// The payload of `item` (`None`: this replica does not have it).
    fn payload(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
    ) -> BoxFuture<'static, Result<Option<String>, ReplicaError>> {
        let _ = (queue, item);
        no_queue()
    }
}

/// The text of a cell in the store: `v1 <ts> <I|R|T> <n>` (`I`: `Value::Int(n)`, `R`:
/// `Value::Released(n)`, `T`: tombstone with `n = 0`).
pub fn encode_cell(cell: &Cell) -> String {
    let (kind, n) = match cell.val {
        None => ('T', 0),
        Some(Value::Int(n)) => ('I', n),
        Some(Value::Released(n)) => ('R', n),
    };
    format!("v1 {} {kind} {n}", cell.ts.0)
}

/// The parts of [`encode_cell`] as the Lua script takes them: `ts`, kind, `n`.
pub fn cell_args(cell: &Cell) -> (u32, &'static str, u32) {
    match cell.val {
        None => (cell.ts.0, "T", 0),
        Some(Value::Int(n)) => (cell.ts.0, "I", n),
        Some(Value::Released(n)) => (cell.ts.0, "R", n),
    }
}

fn decimal(s: &str) -> Option<u32> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse().ok()).flatten()
}

/// Decodes one field of a lock's `family` (column `field`, text `value`) strictly: anything
/// that [`encode_cell`] cannot have written for this family — another format, a column
/// outside `1..COLUMNS`, a timestamp 0, a choosing value other than 1, a number 0 — is an
/// error.
pub fn decode_field(family: Family, field: &[u8], value: &[u8]) -> Result<(usize, Cell), String> {
    decode_field_in(false, family, field, value)
}

/// [`decode_field`] for a lock (`queue == false`) or a queue item's row, where column 0 is
/// also allowed: the `0=0` marker in `number` (`I 0`), the item's existence in `details`
/// (`I 1`), or their tombstones; `details` has no other column.
pub fn decode_field_in(
    queue: bool,
    family: Family,
    field: &[u8],
    value: &[u8],
) -> Result<(usize, Cell), String> {
    let show = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .chars()
            .take(60)
            .collect::<String>()
    };
    let bad = || {
        format!(
            "{} field '{}' = '{}'",
            family.name(),
            show(field),
            show(value)
        )
    };
    let col = std::str::from_utf8(field)
        .ok()
        .and_then(decimal)
        .filter(|&c| (c >= 1 || queue) && (c as usize) < COLUMNS)
        .filter(|&c| family != Family::Details || (queue && c == 0))
        .ok_or_else(bad)? as usize;
    let text = std::str::from_utf8(value).map_err(|_| bad())?;
    let parts: Vec<&str> = text.split(' ').collect();
    let [v, ts, kind, n] = parts[..] else {
        return Err(bad());
    };
    let (ts, n) = match (decimal(ts), decimal(n)) {
        (Some(ts), Some(n)) if v == "v1" && ts > 0 => (ts, n),
        _ => return Err(bad()),
    };
    let val = match (family, kind, n) {
        (Family::Choosing, _, _) if col == 0 => return Err(bad()),
        (_, "T", 0) => None,
        (Family::Number, "I", 0) if col == 0 => Some(Value::Int(0)),
        (Family::Details, "I", 1) => Some(Value::Int(1)),
        (_, _, _) if col == 0 => return Err(bad()),
        (Family::Choosing, "I", 1) => Some(Value::Int(1)),
        (Family::Number, "I", n) if n > 0 => Some(Value::Int(n)),
        (Family::Number, "R", n) if n > 0 => Some(Value::Released(n)),
        _ => return Err(bad()),
    };
    Ok((col, Cell { ts: Ts(ts), val }))
}

/// A reply from one replica to one operation, as [`QuorumStore`] delivers it.
#[derive(Debug)]
pub struct Delivery<const K: usize = 1> {
    /// The replica.
    pub from: ReplicaId,
    /// The operation the request belonged to.
    pub op: u32,
    /// Its answer, or why there is none.
    pub result: Result<Reply<K, COLUMNS>, ReplicaError>,
}

/// `N` replicas and a time limit per call: [`QuorumStore::send`] sends a request to one
/// replica and delivers the reply (or the reason there is none) on the channel given at
/// construction. The kernel client counts the quorums.
#[derive(Debug, Clone)]
pub struct QuorumStore<const K: usize = 1> {
    replicas: Vec<Arc<dyn ReplicaBackend<K>>>,
    call_timeout: Duration,
    tx: mpsc::UnboundedSender<Delivery<K>>,
}

impl<const K: usize> QuorumStore<K> {
    /// The store over `replicas` (index = [`ReplicaId`]); replies arrive on the receiver.
    pub fn new(
        replicas: Vec<Arc<dyn ReplicaBackend<K>>>,
        call_timeout: Duration,
    ) -> (Self, mpsc::UnboundedReceiver<Delivery<K>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            QuorumStore {
                replicas,
                call_timeout,
                tx,
            },
            rx,
        )
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Whether there are no replicas.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// The replicas.
    pub fn replicas(&self) -> &[Arc<dyn ReplicaBackend<K>>] {
        &self.replicas
    }

    /// The time limit of one call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The address of replica `r`.
    pub fn addr(&self, r: ReplicaId) -> &str {
        self.replicas.get(r.0 as usize).map_or("?", |b| b.addr())
    }

    /// Sends `req` to replica `to` (in a task of its own); the reply, a timeout or an error
    /// is delivered later.
    pub fn send(&self, to: ReplicaId, scope: Arc<Scope>, req: Request) {
        let tx = self.tx.clone();
        let limit = self.call_timeout;
        let Some(backend) = self.replicas.get(to.0 as usize).cloned() else {
            let _ = tx.send(Delivery {
                from: to,
                op: req.op(),
                result: Err(ReplicaError::Unreachable("no such replica".into())),
            });
            return;
        };
        tokio::spawn(async move {
            let result = match tokio::time::timeout(limit, backend.call(scope, req)).await {
                Ok(r) => r,
                Err(_) => Err(ReplicaError::Timeout(limit)),
            };
            let _ = tx.send(Delivery {
                from: to,
                op: req.op(),
                result,
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_round_trip_and_foreign_text_is_refused() {
        let cells = [
            (
                Family::Choosing,
                Cell {
                    ts: Ts(3),
                    val: Some(Value::Int(1)),
                },
            ),
            (
                Family::Number,
                Cell {
                    ts: Ts(9),
                    val: Some(Value::Int(7)),
                },
            ),
            (
                Family::Number,
                Cell {
                    ts: Ts(10),
                    val: Some(Value::Released(7)),
                },
            ),
            (
                Family::Number,
                Cell {
                    ts: Ts(11),
                    val: None,
                },
            ),
        ];
        for (f, c) in cells {
            assert_eq!(
                decode_field(f, b"5", encode_cell(&c).as_bytes()),
                Ok((5, c))
            );
        }
        let bad: [(Family, &[u8], &[u8]); 11] = [
            (Family::Number, b"0", b"v1 1 I 1"),
            (Family::Number, b"32", b"v1 1 I 1"),
            (Family::Number, b"05", b"v1 1 I 1"),
            (Family::Number, b"x", b"v1 1 I 1"),
            (Family::Number, b"5", b"v2 1 I 1"),
            (Family::Number, b"5", b"v1 0 I 1"),
            (Family::Number, b"5", b"v1 1 I 0"),
            (Family::Number, b"5", b"v1 1 I 1 extra"),
            (Family::Number, b"5", b"hello"),
            (Family::Choosing, b"5", b"v1 1 I 2"),
            (Family::Choosing, b"5", b"v1 1 R 1"),
        ];
        for (f, field, value) in bad {
            assert!(
                decode_field(f, field, value).is_err(),
                "{f:?} {field:?} {value:?}"
            );
        }
    }

    #[test]
    fn column_0_is_the_queue_s_marker_and_details_only() {
        let marker = (Family::Number, b"0".as_slice(), b"v1 1 I 0".as_slice());
        let details = (Family::Details, b"0".as_slice(), b"v1 1 I 1".as_slice());
        let gone = (Family::Number, b"0".as_slice(), b"v1 9 T 0".as_slice());
        for (f, field, value) in [marker, details, gone] {
            assert!(decode_field_in(true, f, field, value).is_ok(), "{f:?}");
            assert!(decode_field_in(false, f, field, value).is_err(), "{f:?}");
        }
        let bad: [(Family, &[u8], &[u8]); 5] = [
            (Family::Number, b"0", b"v1 1 I 5"),
            (Family::Number, b"0", b"v1 1 R 1"),
            (Family::Choosing, b"0", b"v1 1 I 1"),
            (Family::Details, b"0", b"v1 1 I 2"),
            (Family::Details, b"3", b"v1 1 I 1"),
        ];
        for (f, field, value) in bad {
            assert!(
                decode_field_in(true, f, field, value).is_err(),
                "{f:?} {field:?} {value:?}"
            );
        }
        // Other columns of a queue row decode as a lock's.
        assert!(decode_field_in(true, Family::Number, b"4", b"v1 3 I 2").is_ok());
    }
}
