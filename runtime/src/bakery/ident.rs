//! A client id's registration on the replicas: what refuses a second live client with an
//! id in use.
//!
//! The bakery's columns are its client ids, and the algorithm is correct only if no two
//! running clients write one column. A client therefore registers its id before it writes
//! anything: on every replica it sets the key `PREFIX:client:ID` (the lock's or queue's
//! prefix) to a random incarnation token with a time to live (`SET … PX`), unless the key
//! holds another token ([`CLAIM_SCRIPT`]). The id is registered when a majority of the
//! replicas took the token; any two majorities share a replica, which holds one token at a
//! time, so two clients cannot both be registered. A client that found another token gives
//! back what it took and fails with [`RegisterError::InUse`].
//!
//! The registration is a lease: the client sets it again every quarter of its time to live
//! ([`Kept`]); it counts its registration valid until `ttl · (1 − ρ)` after it *sent* the
//! last renewal a majority took (a replica counts the time to live from when it received
//! it). A client that crashed or was killed leaves its keys to expire: a restarted client
//! with the same id registers once they have expired on a majority, and not before. A
//! client that ends gives its keys back at once (a script that deletes a key only while it
//! holds its own token).
//!
//! A client that tries again — its attempt got no majority, or its registration ran out
//! while it kept running (paused, or cut off from a majority) — registers with the same
//! token ([`Registration::register_as`]): a replica that holds it took no other client's
//! since, so it counts as taken. With a new token each time, a paused replica that
//! executes an earlier attempt when it continues holds the client's own token, and the
//! client was refused as if another held the id.
//!
//! Not covered: a replica that restarts without its data forgets the registrations it held
//! (as it forgets the bakery's own entries).

use super::store::gather;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// Sets `KEYS[1]` to the token `ARGV[1]` with a time to live of `ARGV[2]` ms unless it
/// holds another token. Returns `{1, 0}` (set) or `{0, PTTL}` (held by another token, which
/// expires in PTTL ms).
pub const CLAIM_SCRIPT: &str = r#"
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return {0, redis.call('PTTL', KEYS[1])} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, 0}
"#;

/// Deletes `KEYS[1]` if it holds the token `ARGV[1]`.
pub const GIVE_BACK_SCRIPT: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// Clock rate difference the registration allows for (1 %).
const RHO_PERCENT: u32 = 1;

/// Why an id could not be registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// Another client holds the id on at least one replica and this one got no majority.
    InUse {
        /// The id.
        id: u16,
        /// The longest time to live left of the other registration, in milliseconds.
        left_ms: u64,
    },
    /// No majority answered (each missing replica with the reason): worth trying again.
    NoQuorum(String),
    /// A replica address or the lease is unusable: trying again cannot help.
    Invalid(String),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegisterError::InUse { id, left_ms } => write!(
                f,
                "client id {id} is in use: another running client holds it, renewing its \
                 registration (or an earlier run that stopped without giving it back: then \
                 the registration ends within {left_ms} ms)"
            ),
            RegisterError::NoQuorum(e) | RegisterError::Invalid(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for RegisterError {}

/// What one replica said to a claim.
enum Answer {
    Took,
    Held(u64),
    Failed(String),
}

/// A registration's incarnation token (random, one per client run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation(String);

impl Incarnation {
    /// A new random token: one per client run.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Incarnation {
        Incarnation(format!("{:032x}", rand::random::<u128>()))
    }
}

/// The id `id` registered on the replicas with one incarnation token.
#[derive(Debug)]
pub struct Registration {
    replicas: Vec<(String, redis::Client)>,
    conns: Vec<Option<redis::aio::MultiplexedConnection>>,
    key: String,
    token: String,
    ttl: Duration,
    call_timeout: Duration,
    until: Instant,
}

/// The registration key of client `id` in the lock or queue whose keys start with `prefix`
/// (`hilock:bakery:NAME` for a lock, `hilock:bakery:q:NAME` for a queue).
pub fn client_key(prefix: &str, id: u16) -> String {
    format!("{prefix}:client:{id}")
}

impl Registration {
    /// Registers client `id` under `prefix` on the replicas `addrs` for `ttl`, with a new
    /// incarnation token.
    pub async fn register(
        addrs: &[String],
        prefix: &str,
        id: u16,
        ttl: Duration,
        call_timeout: Duration,
    ) -> Result<Registration, RegisterError> {
        Self::register_as(addrs, prefix, id, ttl, call_timeout, Incarnation::new()).await
    }

    /// [`Registration::register`] with `incarnation`, this client run's token for every
    /// attempt (see the module's text): a replica that holds it counts as taken, so
    /// [`RegisterError::InUse`] means that another client holds the id.
    pub async fn register_as(
        addrs: &[String],
        prefix: &str,
        id: u16,
        ttl: Duration,
        call_timeout: Duration,
        incarnation: Incarnation,
    ) -> Result<Registration, RegisterError> {
        let replicas = addrs
            .iter()
            .map(|a| {
                redis::Client::open(format!("redis://{a}/"))
                    .map(|c| (a.clone(), c))
                    .map_err(|e| {
                        RegisterError::Invalid(format!(
                            "client id registration: bad replica address '{a}': {e}"
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ttl < Duration::from_millis(4) {
            return Err(RegisterError::Invalid(
                "client id registration: the lease must be at least 4 ms".into(),
            ));
        }
        let token = incarnation.0;
        let mut reg = Registration {
            conns: vec![None; replicas.len()],
            replicas,
            key: client_key(prefix, id),
            token,
            ttl,
            call_timeout,
            until: Instant::now(),
        };
        let sent = Instant::now();
        let answers = reg.round_until_majority(CLAIM_SCRIPT).await;
        let took = answers.iter().filter(|a| matches!(a, Answer::Took)).count();
        if took >= reg.majority() {
            reg.until = reg.valid_until(sent);
            return Ok(reg);
        }
        // Give back what was taken: the other client, or a later attempt, may take it.
        reg.round(GIVE_BACK_SCRIPT).await;
        let held = answers.iter().filter_map(|a| match a {
            Answer::Held(left) => Some(*left),
            _ => None,
        });
        if let Some(left_ms) = held.max() {
            return Err(RegisterError::InUse { id, left_ms });
        }
        let missing: Vec<String> = answers
            .iter()
            .zip(&reg.replicas)
            .filter_map(|(a, (addr, _))| match a {
                Answer::Failed(why) => Some(format!("{addr} ({why})")),
                _ => None,
            })
            .collect();
        Err(RegisterError::NoQuorum(format!(
            "client id registration: {took} of the {} replicas it needs took it; missing: {}",
            reg.majority(),
            missing.join("; ")
        )))
    }

    fn majority(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.ttl * (100 - RHO_PERCENT) / 100
    }

    /// Until when the registration is valid, by this client's clock (see the module's
    /// text): no other client can register the id before.
    pub fn until(&self) -> Instant {
        self.until
    }

    /// Sets the registration again on every replica; when a majority took it, it is valid
    /// for another `ttl · (1 − ρ)` from now. Returns the new end, or why not.
    pub async fn renew(&mut self) -> Result<Instant, String> {
        let sent = Instant::now();
        let answers = self.round_until_majority(CLAIM_SCRIPT).await;
        let took = answers.iter().filter(|a| matches!(a, Answer::Took)).count();
        if took >= self.majority() {
            self.until = self.valid_until(sent);
            Ok(self.until)
        } else {
            Err(format!(
                "{took} of the {} replicas it needs took the renewal",
                self.majority()
            ))
        }
    }

    /// Gives the registration back on every replica that answers (where it still holds
    /// this client's token).
    pub async fn give_back(&mut self) {
        self.round(GIVE_BACK_SCRIPT).await;
    }

    /// Runs `script` on every replica at once, each within the call timeout.
    async fn round(&mut self, script: &str) -> Vec<Answer> {
        self.round_until(script, |_| false).await
    }

    /// [`Registration::round`] that stops waiting as soon as a majority took the token: a
    /// stopped or paused replica then costs nothing (a renewal that waited out its call
    /// timeout every time made a 500 ms lease lapse with one of three replicas paused).
    /// The replicas not waited for are `Failed`.
    async fn round_until_majority(&mut self, script: &str) -> Vec<Answer> {
        let majority = self.majority();
        self.round_until(script, move |answers| {
            answers
                .iter()
                .filter(|a| matches!(a, Some(Answer::Took)))
                .count()
                >= majority
        })
        .await
    }

    /// Runs `script` on every replica at once until every replica answered (or its call
    /// timed out) or `enough` holds of the answers so far.
    async fn round_until(
        &mut self,
        script: &str,
        enough: impl Fn(&[Option<Answer>]) -> bool,
    ) -> Vec<Answer> {
        let script = redis::Script::new(script);
        let ttl_ms = self.ttl.as_millis().to_string();
        let calls = self
            .replicas
            .iter()
            .zip(self.conns.iter_mut())
            .map(|((_, client), conn)| {
                let (script, key, token, ttl_ms) = (&script, &self.key, &self.token, &ttl_ms);
                let limit = self.call_timeout;
                async move {
                    let call = async {
                        if conn.is_none() {
                            *conn = Some(
                                client
                                    .get_multiplexed_async_connection()
                                    .await
                                    .map_err(|e| e.to_string())?,
                            );
                        }
                        let Some(c) = conn.as_mut() else {
                            return Err("no connection".to_string());
                        };
                        script
                            .key(key)
                            .arg(token)
                            .arg(ttl_ms)
                            .invoke_async::<redis::Value>(c)
                            .await
                            .map_err(|e| e.to_string())
                    };
                    match within(limit, call).await {
                        Ok(v) => decode(&v),
                        Err(e) => {
                            *conn = None;
                            Answer::Failed(e)
                        }
                    }
                }
            });
        gather(calls, enough, |_| Duration::ZERO)
            .await
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Answer::Failed(NOT_WAITED.to_string())))
            .collect()
    }

    /// Keeps the registration: a task renews it every quarter of its time to live until
    /// [`Kept::end`] gives it back.
    pub fn keep(mut self) -> Kept {
        let (tx, rx) = watch::channel(self.until);
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let every = self.ttl / 4;
        // A renewal must not wait longer than its period for a slow replica.
        self.call_timeout = self.call_timeout.min(every.max(Duration::from_millis(1)));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => {
                        if let Ok(until) = self.renew().await {
                            let _ = tx.send(until);
                        }
                    }
                    _ = &mut stop_rx => break,
                }
            }
            self.give_back().await;
        });
        Kept {
            until: rx,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }
}

/// Sets `KEYS[1]` to `ARGV[1]` unless it is set; returns what it holds then.
pub const AGREE_SCRIPT: &str = r#"
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"#;

/// The key that holds the lease every client of the lock or queue `prefix` uses.
pub fn lease_key(prefix: &str) -> String {
    format!("{prefix}:lease")
}

/// Agrees on the lease with the other clients of the lock or queue whose keys start with
/// `prefix`, before anything else is written: the first client to reach a replica sets
/// `PREFIX:lease` there (it is never changed or deleted by hilock), and a client may go on
/// only when a majority of the replicas hold its own lease. Any two majorities share a
/// replica, which holds one value, so two clients with different leases cannot both go on.
///
/// Why: a client counts the other clients' entries as given up after watching them
/// unchanged for 1.3 of *its own* leases. A client with a 500 ms lease passed the entry of
/// one holding the lock with a 2 s lease within 1.7 s, and both ran their commands at once.
/// [`RegisterError::Invalid`] names both leases; [`RegisterError::NoQuorum`] if no
/// majority answered.
pub async fn agree_lease(
    addrs: &[String],
    prefix: &str,
    lease: Duration,
    call_timeout: Duration,
) -> Result<(), RegisterError> {
    let ours = lease.as_millis().to_string();
    let key = lease_key(prefix);
    let script = redis::Script::new(AGREE_SCRIPT);
    let calls = addrs.iter().map(|a| {
        let (script, key, ours) = (&script, &key, &ours);
        async move {
            let call = async {
                let client = redis::Client::open(format!("redis://{a}/"))
                    .map_err(|e| format!("bad replica address '{a}': {e}"))?;
                let mut c = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                script
                    .key(key)
                    .arg(ours)
                    .invoke_async::<String>(&mut c)
                    .await
                    .map_err(|e| e.to_string())
            };
            within(call_timeout, call).await
        }
    });
    // Until a majority agrees (a stopped replica then costs nothing), or every one answered.
    let majority = addrs.len() / 2 + 1;
    let agreeing = |answers: &[Option<Result<String, String>>]| {
        answers
            .iter()
            .filter(|a| matches!(a, Some(Ok(v)) if *v == ours))
            .count()
    };
    let answers = gather(calls, |a| agreeing(a) >= majority, |_| Duration::ZERO).await;
    if agreeing(&answers) >= majority {
        return Ok(());
    }
    let answers: Vec<Result<String, String>> = answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|| Err(NOT_WAITED.to_string())))
        .collect();
    if let Some(other) = answers.iter().flatten().find(|v| **v != ours) {
        // Only a number of milliseconds is a lease a client set: anything else there is a
        // foreign or malformed entry, and "pass --lease-ms abc" would be no advice.
        if other.parse::<u64>().is_err() {
            return Err(RegisterError::Invalid(format!(
                "malformed or foreign entry at {key}: {other:?} is not a lease in ms (the \
                 first client of the name writes its --lease-ms there); delete the key on \
                 every replica, or pick another name"
            )));
        }
        return Err(RegisterError::Invalid(format!(
            "its clients use a lease of {other} ms (set by the first one); this one asks for \
             {ours} ms, and clients with different leases would not exclude each other: pass \
             --lease-ms {other} (to change the lease, stop every client and delete the key \
             {key} on every replica)"
        )));
    }
    let missing: Vec<String> = answers
        .iter()
        .zip(addrs)
        .filter_map(|(a, addr)| a.as_ref().err().map(|e| format!("{addr} ({e})")))
        .collect();
    Err(RegisterError::NoQuorum(format!(
        "agreeing on the lease: {} of the {majority} replicas it needs answered; missing: {}",
        answers.iter().filter(|a| a.is_ok()).count(),
        missing.join("; ")
    )))
}

/// What a replica not waited for is said to have answered ([`gather`]).
const NOT_WAITED: &str = "not waited for: a majority had answered";

/// `call` within `limit`, its error or the timeout in words.
async fn within<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

/// A plain integer reply, or the claim script's `{took, pttl}`.
fn decode(v: &redis::Value) -> Answer {
    match v {
        redis::Value::Int(_) => Answer::Took,
        redis::Value::Array(a) => match a.as_slice() {
            [redis::Value::Int(1), ..] => Answer::Took,
            [redis::Value::Int(0), redis::Value::Int(left)] => {
                Answer::Held(u64::try_from(*left).unwrap_or(0))
            }
            _ => Answer::Failed(format!("unexpected answer {v:?}")),
        },
        _ => Answer::Failed(format!("unexpected answer {v:?}")),
    }
}

/// A registration kept by a task ([`Registration::keep`]).
#[derive(Debug)]
pub struct Kept {
    until: watch::Receiver<Instant>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Kept {
    /// Until when the registration is valid (moved by each renewal).
    pub fn until(&self) -> Instant {
        *self.until.borrow()
    }

    /// Waits until a renewal moved [`Kept::until`]. Cancel-safe.
    pub async fn renewed(&mut self) {
        if self.until.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Runs `work` while the registration holds: `Ok` with its result, or `Err(until)` (the
    /// instant the registration ended) if it ran out first; `work` is then dropped. For
    /// work that writes the id's column (waiting in line): it must not go on once another
    /// client may hold the id.
    pub async fn while_held<T>(
        &mut self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, Instant> {
        tokio::pin!(work);
        loop {
            let until = self.until();
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(until) => return Err(until),
                _ = self.renewed() => continue,
                r = &mut work => return Ok(r),
            }
        }
    }

    /// Stops the renewals without giving the registration back: it runs out at
    /// [`Kept::until`]. For a client that gave up with requests still in flight: a new
    /// client with its id may start only once they are gone (`docs/faults.md`, "Bakery").
    pub fn lapse(&mut self) {
        if let Some(task) = self.task.take() {
            // Aborted before the stop signal can reach it: the task gives nothing back.
            task.abort();
        }
    }

    /// Stops the renewals and gives the registration back (within a second).
    pub async fn end(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // The task gives the registration back if the runtime still runs it.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
