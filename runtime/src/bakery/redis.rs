//! The replica backend over one `redis-server`.
//!
//! Layout: the lock `NAME`'s column family `F` (`choosing`, `number`) is the hash
//! `hilock:bakery:NAME:F`; field = client id, value = [`encode_cell`]'s text. A read is one
//! `HGETALL`; a write is [`LWW_SCRIPT`] (one `EVALSHA`), which applies the cell only if it
//! supersedes the stored one by the kernel's rule
//! ([`Cell::supersedes`](hilock_kernel::bakery::Cell::supersedes): larger timestamp wins, on
//! a tie a tombstone, then the larger value), so a late, stale write never overwrites a
//! newer one; it refuses to touch a field whose text is not hilock's.

use super::store::{
    cell_args, decode_field, LockReply, ReplicaBackend, ReplicaError, COLUMNS, ROWS,
};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use hilock_kernel::bakery::{Family, Reply, Request};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Last-write-wins per field. `KEYS[1]`: the family's hash; `ARGV`: field, ts, kind
/// (`I`, `R`, `T`), n. Returns 1 (applied) or 0 (superseded: the stored cell is newer).
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
if old then
  local ots, okind, on = parse(old)
  if not ots then
    return redis.error_reply('hilock-foreign ' .. KEYS[1] .. ' field ' .. ARGV[1] .. ' = ' .. string.sub(old, 1, 60))
  end
  local a, b = rank(nts, nkind, nn), rank(ots, okind, on)
  for i = 1, 4 do
    if a[i] < b[i] then return 0 end
    if a[i] > b[i] then break end
    if i == 4 then return 0 end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], 'v1 ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return 1
"#;

/// The hash of `family` of the lock `lock`.
pub fn key(lock: &str, family: Family) -> String {
    format!("hilock:bakery:{lock}:{}", family.name())
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

    async fn run(self: Arc<Self>, lock: Arc<str>, req: Request) -> Result<LockReply, ReplicaError> {
        let mut conn = self.connection().await?;
        let result = match req {
            Request::Write {
                op,
                row,
                family,
                col,
                cell,
            } => {
                if row.0 as usize >= ROWS {
                    return Err(ReplicaError::Refused(format!("row {} of a lock", row.0)));
                }
                let (ts, kind, n) = cell_args(&cell);
                self.script
                    .key(key(&lock, family))
                    .arg(col)
                    .arg(ts)
                    .arg(kind)
                    .arg(n)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map(|_| Reply::Ack { op })
            }
            Request::Read { op, family, row } => {
                if row.is_none_or(|r| r.0 as usize >= ROWS) {
                    return Err(ReplicaError::Refused("a lock reads one row".into()));
                }
                let fields: Result<HashMap<Vec<u8>, Vec<u8>>, _> = redis::cmd("HGETALL")
                    .arg(key(&lock, family))
                    .query_async(&mut conn)
                    .await;
                match fields {
                    Ok(fields) => {
                        let mut rows = [[None; COLUMNS]; ROWS];
                        for (f, v) in &fields {
                            let (col, cell) = decode_field(family, f, v).map_err(|e| {
                                ReplicaError::Malformed(format!("{}: {e}", key(&lock, family)))
                            })?;
                            rows[0][col] = Some(cell);
                        }
                        Ok(Reply::Answer { op, family, rows })
                    }
                    Err(e) => Err(e),
                }
            }
        };
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
}

impl ReplicaBackend for RedisReplica {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn call(
        self: Arc<Self>,
        lock: Arc<str>,
        req: Request,
    ) -> BoxFuture<'static, Result<LockReply, ReplicaError>> {
        self.run(lock, req).boxed()
    }
}
