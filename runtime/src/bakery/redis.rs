//! The replica backend over one `redis-server`.
//!
//! Layout of a lock `NAME`: its column family `F` (`choosing`, `number`) is the hash
//! `hilock:bakery:NAME:F`; field = client id, value = [`encode_cell`](super::store::encode_cell)'s text
//! (`v1 <ts> <I|R|T> <n>`).
//!
//! Layout of a work queue `NAME` (the bakery design's "Distributed work queue": a row per item whose
//! key is the item's enqueue timestamp):
//!
//! | key | type | what |
//! |---|---|---|
//! | `hilock:bakery:q:NAME:ITEM:F` | hash | the item's row: family `F` (`choosing`, `number`, `details`), field = column, value as for a lock; `number` field `0` is the seed's `0=0` marker (`v1 1 I 0`), `details` field `0` says the item exists (`v1 1 I 1`) |
//! | `hilock:bakery:q:NAME:ITEM:payload` | string | what the item asks for (written once at push; not kernel state) |
//! | `hilock:bakery:q:NAME:items` | sorted set, score 0 | the index: pending item keys in key (= enqueue time) order |
//! | `hilock:bakery:q:NAME:done` | set | items whose marker delete this replica applied |
//! | `hilock:bakery:q:NAME:clock` | sorted set, member `max` | the largest write timestamp this replica saw in the queue |
//!
//! A read is one `HGETALL` per row (a scan pipelines one per item of the worker's window);
//! a write is [`LWW_SCRIPT`] (one `EVALSHA`), which applies the cell only if it supersedes
//! the stored one by the kernel's rule
//! ([`Cell::supersedes`](hilock_kernel::bakery::Cell::supersedes): larger timestamp wins, on
//! a tie a tombstone, then the larger value), so a late, stale write never overwrites a
//! newer one; it refuses to touch a field whose text is not hilock's. For a queue the same
//! script also raises the queue's clock and, for the delete of the `0=0` marker, moves the
//! item from the index to the done set. A push is [`PUSH_SCRIPT`].

use super::store::{
    cell_args, decode_field_in, Listed, Listing, ReplicaBackend, ReplicaError, Scope, COLUMNS,
};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use hilock_kernel::bakery::{Family, Reply, Request};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Last-write-wins per field. `KEYS[1]`: the family's hash; `ARGV`: field, ts, kind
/// (`I`, `R`, `T`), n. Returns 1 (applied) or 0 (superseded: the stored cell is newer).
/// For a queue item also `KEYS[2..4]` (the queue's index, done set and clock) and `ARGV[5]`
/// (the item), `ARGV[6]` (`done` for the marker's delete): the clock is raised to `ts`, and
/// the marker's delete moves the item from the index to the done set.
pub const LWW_SCRIPT: &str = r#"
local function parse(v)
  local ts, kind, n = string.match(v, '^v1 ([1-9]%d*) ([IRT]) (%d+)$')
  if not ts then return nil end
  return tonumber(ts), kind, tonumber(n)
end
-- Cell::supersedes: (ts, tombstone, Int < Released, n), compared in this order.
local function rank(ts, kind, n)
  local tomb, variant = 0, 0
  if kind == 'T' then tomb = 1; n = 0 elseif kind == 'R' then variant = 1 end
  return {ts, tomb, variant, n}
end
local nts, nkind, nn = parse('v1 ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
if not nts then return redis.error_reply('hilock: bad write ' .. ARGV[2] .. ' ' .. ARGV[3]) end
local old = redis.call('HGET', KEYS[1], ARGV[1])
local apply = 1
if old then
  local ots, okind, on = parse(old)
  if not ots then
    return redis.error_reply('hilock-foreign ' .. KEYS[1] .. ' field ' .. ARGV[1] .. ' = ' .. string.sub(old, 1, 60))
  end
  local a, b = rank(nts, nkind, nn), rank(ots, okind, on)
  apply = 0
  for i = 1, 4 do
    if a[i] < b[i] then break end
    if a[i] > b[i] then apply = 1; break end
  end
end
if #KEYS >= 4 then
  redis.call('ZADD', KEYS[4], 'GT', ARGV[2], 'max')
  if ARGV[6] == 'done' then
    redis.call('ZREM', KEYS[2], ARGV[5])
    redis.call('SADD', KEYS[3], ARGV[5])
  end
end
if apply == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], 'v1 ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return 1
"#;

/// A push, atomic on one replica. `KEYS`: the item's `details` and `number` hashes, its
/// payload, the queue's index, clock and done set; `ARGV`: the item, the payload. Writes the
/// details (`v1 1 I 1`) and the `0=0` marker (`v1 1 I 0`) only where the field is absent
/// (timestamp 1 is the smallest: any worker's write supersedes them), the payload (refused
/// if another one is stored), and indexes the item unless it is done here.
pub const PUSH_SCRIPT: &str = r#"
local p = redis.call('GET', KEYS[3])
if p and p ~= ARGV[2] then
  return redis.error_reply('hilock-foreign ' .. KEYS[3] .. ' holds another payload')
end
redis.call('HSETNX', KEYS[1], '0', 'v1 1 I 1')
redis.call('HSETNX', KEYS[2], '0', 'v1 1 I 0')
redis.call('SET', KEYS[3], ARGV[2])
if redis.call('SISMEMBER', KEYS[6], ARGV[1]) == 0 then
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
end
redis.call('ZADD', KEYS[5], 'GT', 1, 'max')
return 1
"#;

/// How many pages of the index (of the listing's limit each) a listing reads past the
/// first when foreign entries took places in it.
const FOREIGN_PAGES: usize = 16;

/// The hash of `family` of the lock `lock`.
pub fn key(lock: &str, family: Family) -> String {
    format!("hilock:bakery:{lock}:{}", family.name())
}

/// The key `what` (`number`, `payload`, …) of the item `item` of the queue `queue`.
pub fn item_key(queue: &str, item: &str, what: &str) -> String {
    format!("hilock:bakery:q:{queue}:{item}:{what}")
}

/// The queue's key `what` (`items`, `done`, `clock`).
pub fn queue_key(queue: &str, what: &str) -> String {
    format!("hilock:bakery:q:{queue}:{what}")
}

/// The hash of `family` of row `row` in `scope` (`None`: an empty queue slot).
fn row_key(scope: &Scope, row: usize, family: Family) -> Result<Option<String>, ReplicaError> {
    match scope {
        Scope::Lock(name) if row == 0 => Ok(Some(key(name, family))),
        Scope::Lock(_) => Err(ReplicaError::Refused(format!("row {row} of a lock"))),
        Scope::Queue { name, items } => match items.get(row) {
            Some(item) => Ok(item.as_ref().map(|i| item_key(name, i, family.name()))),
            None => Err(ReplicaError::Refused(format!(
                "row {row} outside the window"
            ))),
        },
    }
}

/// One `redis-server` (connected lazily; a failed connection is dropped and made again on
/// the next call).
#[derive(Debug)]
pub struct RedisReplica {
    addr: String,
    client: redis::Client,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
    script: redis::Script,
}

impl RedisReplica {
    /// The replica at `host:port`.
    pub fn new(addr: &str) -> Result<Arc<Self>, String> {
        let client = redis::Client::open(format!("redis://{addr}/"))
            .map_err(|e| format!("bad replica address '{addr}': {e}"))?;
        Ok(Arc::new(RedisReplica {
            addr: addr.to_string(),
            client,
            conn: Mutex::new(None),
            script: redis::Script::new(LWW_SCRIPT),
        }))
    }

    /// Where it is, `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn connection(&self) -> Result<redis::aio::MultiplexedConnection, ReplicaError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| ReplicaError::Unreachable(e.to_string()))?;
        *slot = Some(c.clone());
        Ok(c)
    }

    async fn forget(&self) {
        *self.conn.lock().await = None;
    }

    fn classify(e: redis::RedisError) -> ReplicaError {
        let text = e.to_string();
        if text.contains("hilock-foreign") || text.contains("WRONGTYPE") {
            ReplicaError::Malformed(text)
        } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            ReplicaError::Unreachable(text)
        } else {
            ReplicaError::Refused(text)
        }
    }

    fn decode(
        scope: &Scope,
        key: &str,
        family: Family,
        fields: &HashMap<Vec<u8>, Vec<u8>>,
        row: &mut [Option<hilock_kernel::bakery::Cell>; COLUMNS],
    ) -> Result<(), ReplicaError> {
        for (f, v) in fields {
            let (col, cell) = decode_field_in(scope.is_queue(), family, f, v)
                .map_err(|e| ReplicaError::Malformed(format!("{key}: {e}")))?;
            row[col] = Some(cell);
        }
        Ok(())
    }

    async fn run<const K: usize>(
        self: Arc<Self>,
        scope: Arc<Scope>,
        req: Request,
    ) -> Result<Reply<K, COLUMNS>, ReplicaError> {
        let mut conn = self.connection().await?;
        let result = match req {
            Request::Write {
                op,
                row,
                family,
                col,
                cell,
            } => {
                let Some(hash) = row_key(&scope, row.0 as usize, family)? else {
                    return Err(ReplicaError::Refused(format!(
                        "write to the empty row {}",
                        row.0
                    )));
                };
                let (ts, kind, n) = cell_args(&cell);
                let mut inv = self.script.key(hash);
                inv.arg(col).arg(ts).arg(kind).arg(n);
                if let (Scope::Queue { name, .. }, Some(item)) =
                    (&*scope, scope.item(row.0 as usize))
                {
                    let marker_delete = family == Family::Number && col == 0 && cell.val.is_none();
                    inv.key(queue_key(name, "items"))
                        .key(queue_key(name, "done"))
                        .key(queue_key(name, "clock"))
                        .arg(item)
                        .arg(if marker_delete { "done" } else { "" });
                }
                inv.invoke_async::<i64>(&mut conn)
                    .await
                    .map(|_| Reply::Ack { op })
            }
            Request::Read { op, family, row } => {
                let rows_asked: Vec<usize> = match row {
                    Some(r) => vec![r.0 as usize],
                    None if scope.is_queue() => (0..K).collect(),
                    None => return Err(ReplicaError::Refused("a lock reads one row".into())),
                };
                let mut keys = Vec::new();
                for r in rows_asked {
                    if r >= K {
                        return Err(ReplicaError::Refused(format!("row {r} of {K}")));
                    }
                    if let Some(k) = row_key(&scope, r, family)? {
                        keys.push((r, k));
                    }
                }
                let mut pipe = redis::pipe();
                for (_, k) in &keys {
                    pipe.cmd("HGETALL").arg(k);
                }
                let fields: Result<Vec<HashMap<Vec<u8>, Vec<u8>>>, _> = if keys.is_empty() {
                    Ok(Vec::new())
                } else {
                    pipe.query_async(&mut conn).await
                };
                match fields {
                    Ok(fields) => {
                        let mut rows = [[None; COLUMNS]; K];
                        for ((r, k), f) in keys.iter().zip(&fields) {
                            Self::decode(&scope, k, family, f, &mut rows[*r])?;
                        }
                        Ok(Reply::Answer { op, family, rows })
                    }
                    Err(e) => Err(e),
                }
            }
        };
        self.settle(result).await
    }

    async fn settle<T>(&self, result: Result<T, redis::RedisError>) -> Result<T, ReplicaError> {
        match result {
            Ok(r) => Ok(r),
            Err(e) => {
                let err = Self::classify(e);
                if matches!(err, ReplicaError::Unreachable(_)) {
                    self.forget().await;
                }
                Err(err)
            }
        }
    }

    async fn push_item(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
        payload: Arc<str>,
    ) -> Result<(), ReplicaError> {
        let mut conn = self.connection().await?;
        let r = redis::Script::new(PUSH_SCRIPT)
            .key(item_key(&queue, &item, "details"))
            .key(item_key(&queue, &item, "number"))
            .key(item_key(&queue, &item, "payload"))
            .key(queue_key(&queue, "items"))
            .key(queue_key(&queue, "clock"))
            .key(queue_key(&queue, "done"))
            .arg(&*item)
            .arg(&*payload)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ());
        self.settle(r).await
    }

    async fn list_items(
        self: Arc<Self>,
        queue: Arc<str>,
        limit: usize,
        known: Arc<[String]>,
    ) -> Result<Listing, ReplicaError> {
        let mut conn = self.connection().await?;
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGE")
            .arg(queue_key(&queue, "items"))
            .arg(0)
            .arg(limit.max(1) as i64 - 1)
            .cmd("ZSCORE")
            .arg(queue_key(&queue, "clock"))
            .arg("max");
        if !known.is_empty() {
            pipe.cmd("SMISMEMBER").arg(queue_key(&queue, "done"));
            for k in known.iter() {
                pipe.arg(k);
            }
        }
        let r: Result<(Vec<String>, Option<f64>, Vec<i64>), _> = if known.is_empty() {
            pipe.query_async::<(Vec<String>, Option<f64>)>(&mut conn)
                .await
                .map(|(a, b)| (a, b, Vec::new()))
        } else {
            pipe.query_async(&mut conn).await
        };
        let (mut page, clock, done) = self.settle(r).await?;
        // An entry that cannot be an item key is not hilock's: it is skipped (and said in
        // `foreign`), and the index is read on past it until `limit` item keys are found,
        // the index ends or `FOREIGN_PAGES` further pages were read.
        let index = queue_key(&queue, "items");
        let page_len = limit.max(1);
        let mut items = Vec::new();
        let mut foreign = Vec::new();
        let mut start = 0;
        for extra in 0..=FOREIGN_PAGES {
            let full = page.len() >= page_len;
            for key in page {
                if super::queue::valid_item_key(&key) {
                    if items.len() < limit {
                        items.push(Listed { key, done: false });
                    }
                } else {
                    foreign.push(format!(
                        "{index}: entry '{}' is not an item key",
                        key.chars().take(60).collect::<String>()
                    ));
                }
            }
            if items.len() >= limit || !full || foreign.is_empty() || extra == FOREIGN_PAGES {
                break;
            }
            start += page_len;
            let r = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(start as i64)
                .arg((start + page_len) as i64 - 1)
                .query_async::<Vec<String>>(&mut conn)
                .await;
            page = self.settle(r).await?;
        }
        for (k, d) in known.iter().zip(done) {
            if d == 1 {
                items.push(Listed {
                    key: k.clone(),
                    done: true,
                });
            }
        }
        let clock = match clock {
            None => 0,
            Some(c) if c >= 0.0 && c <= u32::MAX as f64 && c.fract() == 0.0 => c as u32,
            Some(c) => {
                return Err(ReplicaError::Malformed(format!(
                    "{}: {c}",
                    queue_key(&queue, "clock")
                )))
            }
        };
        Ok(Listing {
            items,
            clock,
            foreign,
        })
    }

    async fn get_payload(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
    ) -> Result<Option<String>, ReplicaError> {
        let mut conn = self.connection().await?;
        let r = redis::cmd("GET")
            .arg(item_key(&queue, &item, "payload"))
            .query_async::<Option<String>>(&mut conn)
            .await;
        self.settle(r).await
    }
}

impl<const K: usize> ReplicaBackend<K> for RedisReplica {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn call(
        self: Arc<Self>,
        scope: Arc<Scope>,
        req: Request,
    ) -> BoxFuture<'static, Result<Reply<K, COLUMNS>, ReplicaError>> {
        self.run::<K>(scope, req).boxed()
    }

    fn push(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
        payload: Arc<str>,
    ) -> BoxFuture<'static, Result<(), ReplicaError>> {
        self.push_item(queue, item, payload).boxed()
    }

    fn list(
        self: Arc<Self>,
        queue: Arc<str>,
        limit: usize,
        known: Arc<[String]>,
    ) -> BoxFuture<'static, Result<Listing, ReplicaError>> {
        self.list_items(queue, limit, known).boxed()
    }

    fn payload(
        self: Arc<Self>,
        queue: Arc<str>,
        item: Arc<str>,
    ) -> BoxFuture<'static, Result<Option<String>, ReplicaError>> {
        self.get_payload(queue, item).boxed()
    }
}
