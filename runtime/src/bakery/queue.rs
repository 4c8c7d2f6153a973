//! The bakery design's distributed work queue on real replicas: `hilock bakery queue push|work`.
//!
//! The worker is the kernel's queue client (`Program::Queue`, `Variant::HILOCK`: the seed's
//! loop with hilock's corrections, among them leases and `item_exists`) driven by the same
//! [`Driver`] as the lock: every scan, choosing/number write, wait, give-up, details read and
//! removal is a kernel step carried out against the [`QuorumStore`](super::QuorumStore).
//!
//! # Rows: the window
//! The kernel client has a fixed number of rows ([`QUEUE_ROWS`]); the queue has any number
//! of items. Before each scan the kernel starts (`scan <0.., CF=number>`, wiki 117), the
//! driver refreshes its *window*: it lists the queue's index on the replicas (the lowest
//! `2 · QUEUE_ROWS` pending keys and which of the window's items are done there) and
//! uses the first `R` listings and those that come within as long again (at least
//! [`LINGER`](super::store::LINGER); a push reached `W`, and `R + W > N`, so `R` listings
//! name every item, and a paused replica costs a refresh no more than that); an item
//! stays in its row until some replica reports it done (the delete of its `0=0` marker was
//! applied there, which happens only after it was processed), and free rows take the
//! lowest pending keys not in the window. A row keeps its item while the kernel works on
//! it: the window only changes before a scan, and every request carries the window it was
//! sent with (a retry goes to the same items). So row order is not key order once rows are
//! reused: "lowest row key" (wiki 118) becomes "lowest row of the window", an approximate
//! order, as the seed allows ("(approximate) order").
//! Each refresh is one round trip more per scan ([`Stats::ops`](super::Stats) counts it).
//!
//! A replica can miss a write for good (one that reached `W` others is not sent to it
//! again: a paused replica), among them the delete of an item's marker: it then lists the
//! done item as pending for ever. The driver remembers an item some replica reported done
//! for as long as another still lists it as pending, and never puts it in the window
//! again; without that, such items came back into the window as soon as they left it and
//! a worker's window never got empty. An index entry that cannot be an item key is not
//! hilock's: the listing skips it and names it, and the driver reports it once
//! ([`Driver::on_malformed`](super::Driver::on_malformed)).
//!
//! Listings also return the largest write timestamp each replica saw in the queue; the
//! kernel's Lamport clock is moved past it (`Client::advance_clock`) so that a restarted
//! worker under an earlier run's id writes above that run's cells (and a reused row never
//! shows another item's cell under a timestamp the kernel watched for lease expiry).
//!
//! # Push
//! Not a kernel step (the kernel model starts with the items in the store, and the seed
//! puts no consistency constraint on the enqueue): a push names the item by a fresh key
//! (`<unix time in µs, 20 digits>-<8 hex digits>`, so key order is push order, as the
//! seed's "unique timestamp") and writes, atomically on each replica, the payload, the
//! details and the `0=0` marker at timestamp 1 (the smallest: any worker's later write
//! supersedes them) and the index entry. It returns once `W` replicas applied it (so a
//! read quorum meets it) and the others had as long again
//! ([`LINGER`](super::store::LINGER) at least) to apply it too; fewer by the deadline is an
//! error naming the replicas.
//!
//! # What a worker guarantees
//! Every pushed item is processed to completion at least once while some worker runs
//! (and, within the lease, the kernel's mutual exclusion per item — model-checked for the
//! queue in `verify` — keeps two workers from holding it at once). It is processed more
//! than once only if a worker lost its lease while processing it (stopped or too slow to
//! renew): that worker is told (`Error::Lost`) and kills its command, and the next worker
//! holds a larger fencing token. Without lost leases every item is processed exactly once.

use super::lock::{redis_replicas, Driver, Error, Options, Until};
use super::store::{gather, linger, Listing, ReplicaBackend, Scope, QUEUE_ROWS};
use hilock_kernel::bakery::{ClientOutput, Input, Phase, Program, Row, Ticket, Ts};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Whether `key` can be an item key: 1 to 64 bytes of digits, lowercase letters and `-`.
pub fn valid_item_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

/// Largest payload accepted by [`push`].
pub const MAX_PAYLOAD: usize = 1 << 20;

/// Refuses a queue name the replicas' keys cannot carry (before anything is written).
pub fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > 200 || name.contains(|c: char| c.is_control()) {
        return Err(Error::Config(
            "the queue name must have 1 to 200 bytes and no control characters".into(),
        ));
    }
    if name.contains(':') {
        return Err(Error::Config(format!(
            "the queue name '{name}' has a ':': the replicas' keys are \
             hilock:bakery:q:NAME:ITEM:…, so it could share keys with another queue"
        )));
    }
    Ok(())
}

fn fresh_key() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut x = (now.as_nanos() as u64) ^ ((std::process::id() as u64) << 32);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    format!("{:020}-{:08x}", now.as_micros(), x as u32)
}

/// Enqueues `payload` in the queue `name` on `replicas`; returns the item's key once `w`
/// replicas (0: a majority) applied the push (and the others had as long again, at least
/// [`LINGER`](super::store::LINGER)), retrying with backoff up to `timeout` while fewer did.
pub async fn push<const K: usize>(
    name: &str,
    replicas: &[Arc<dyn ReplicaBackend<K>>],
    payload: &str,
    w: u8,
    call_timeout: Duration,
    timeout: Duration,
) -> Result<String, Error> {
    check_name(name)?;
    let n = replicas.len();
    if n == 0 || n > 7 {
        return Err(Error::Config(format!(
            "{n} replicas: between 1 and 7 are supported"
        )));
    }
    let need = if w == 0 { (n / 2 + 1) as u8 } else { w };
    if need as usize > n {
        return Err(Error::Config(format!("W={need} of {n} replicas")));
    }
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::Config(format!(
            "the item has {} bytes; at most {MAX_PAYLOAD}",
            payload.len()
        )));
    }
    let key = fresh_key();
    let (queue, item, data): (Arc<str>, Arc<str>, Arc<str>) =
        (name.into(), key.as_str().into(), payload.into());
    let deadline = Instant::now() + timeout;
    let mut why: Vec<Option<String>> = vec![Some("not asked yet".into()); n];
    let mut backoff = Duration::from_millis(10);
    loop {
        let asked: Vec<usize> = (0..n).filter(|&r| why[r].is_some()).collect();
        let stored_before = n - asked.len();
        let asks = asked.iter().map(|&r| {
            let call = replicas[r]
                .clone()
                .push(queue.clone(), item.clone(), data.clone());
            async move { tokio::time::timeout(call_timeout, call).await }
        });
        // Once `need` replicas stored it, the others get as long again as that took (at
        // least LINGER) and are not waited for after: a paused replica costs a push
        // that much, not its call timeout, and the item still reaches every replica that
        // answers about as fast as the quorum.
        let stored = |a: &[Option<Result<Result<(), _>, _>>]| {
            stored_before + a.iter().filter(|x| matches!(x, Some(Ok(Ok(()))))).count()
        };
        let answers = gather(
            asks,
            |a| stored(a) >= need as usize,
            |took| linger(took, call_timeout),
        )
        .await;
        for (&r, res) in asked.iter().zip(answers) {
            why[r] = match res {
                Some(Ok(Ok(()))) => None,
                Some(Ok(Err(e))) => Some(e.to_string()),
                Some(Err(_)) => Some(format!("no answer within {} ms", call_timeout.as_millis())),
                None => Some("not waited for: enough replicas had stored the item".into()),
            };
        }
        let got = why.iter().filter(|w| w.is_none()).count();
        if got >= need as usize {
            return Ok(key);
        }
        if Instant::now() + backoff >= deadline {
            return Err(Error::NoQuorum {
                what: format!("push of {key}"),
                need,
                got: got as u8,
                missing: (0..n)
                    .filter_map(|r| {
                        why[r]
                            .as_ref()
                            .map(|w| format!("r{r} {} ({w})", replicas[r].addr()))
                    })
                    .collect(),
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

impl<const N: usize, const K: usize> Driver<N, K> {
    /// Before a queue scan: asks every replica for its listing of the index and uses the
    /// first `R` (and those within the linger), moves the kernel's clock past the queue's,
    /// rebuilds the window (see the module's doc), then sends the scan with it. Returns
    /// whether the window is empty. With fewer than `R` listings the window is kept as it
    /// was (the scan is still sent).
    pub(crate) async fn refresh_window(&mut self) -> bool {
        let Scope::Queue { name, items } = &*self.scope else {
            self.send_pending_scan();
            return false;
        };
        let (name, old) = (name.clone(), items.clone());
        let queue: Arc<str> = name.as_str().into();
        let known: Arc<[String]> = old.iter().flatten().cloned().collect();
        let limit = 2 * K;
        let ct = self.store.call_timeout();
        let need = self.client.config().r as usize;
        let asks = self.store.replicas().iter().map(|b| {
            let call = b.clone().list(queue.clone(), limit, known.clone());
            async move { tokio::time::timeout(ct, call).await }
        });
        // `R` listings are enough; the others get as long again as they took (at least
        // LINGER: what only they list, a foreign entry say, is still seen while they
        // answer) and are not waited for after (a paused replica costs a refresh that
        // much, not its call timeout). Replicas not waited for count as not listing.
        let answers = gather(
            asks,
            |a| a.iter().filter(|x| matches!(x, Some(Ok(Ok(_))))).count() >= need,
            |took| linger(took, ct),
        )
        .await;
        self.stats.ops += 1;
        self.stats.requests += N as u64;
        let mut listings: Vec<Listing> = Vec::new();
        for (r, a) in answers.into_iter().enumerate() {
            let from = hilock_kernel::bakery::ReplicaId(r as u8);
            match a {
                Some(Ok(Ok(l))) => {
                    for f in &l.foreign {
                        self.note_malformed(from, &format!("foreign entry: {f}; skipped"));
                    }
                    listings.push(l)
                }
                Some(Ok(Err(e))) => self.note_failure(from, &e),
                Some(Err(_)) => self.note_failure(from, &super::ReplicaError::Timeout(ct)),
                None => {}
            }
        }
        if listings.len() < need {
            self.send_pending_scan();
            return false;
        }
        let clock = listings.iter().map(|l| l.clock).max().unwrap_or(0);
        self.client.advance_clock(Ts(clock));
        // Done: what a replica reports done now, and what one reported done before while
        // another still lists it as pending (that one missed the marker's delete, e.g. a
        // replica that was paused: without this memory such an item comes back into the
        // window as soon as it leaves it, and the window of a worker never gets empty).
        let mut done: BTreeSet<&str> = listings
            .iter()
            .flat_map(|l| l.items.iter())
            .filter(|i| i.done)
            .map(|i| i.key.as_str())
            .collect();
        done.extend(self.finished.iter().map(String::as_str));
        let mut window: Vec<Option<String>> = old
            .iter()
            .map(|i| i.clone().filter(|k| !done.contains(k.as_str())))
            .collect();
        let mut pending: BTreeSet<&str> = listings
            .iter()
            .flat_map(|l| l.items.iter())
            .filter(|i| !i.done && !done.contains(i.key.as_str()))
            .map(|i| i.key.as_str())
            .collect();
        for k in window.iter().flatten() {
            pending.remove(k.as_str());
        }
        let mut fresh = pending.into_iter();
        for slot in window.iter_mut().filter(|s| s.is_none()) {
            match fresh.next() {
                Some(k) => *slot = Some(k.to_string()),
                None => break,
            }
        }
        let empty = window.iter().all(Option::is_none);
        // Kept only while some replica still lists it as pending: at most the listings'
        // length. (What a replica not among this refresh's listings lists is not kept: a
        // done item only it lists may come back into the window when it answers again,
        // until a listing reports it done.)
        let finished: BTreeSet<String> = listings
            .iter()
            .flat_map(|l| l.items.iter())
            .filter(|i| !i.done && done.contains(i.key.as_str()))
            .map(|i| i.key.clone())
            .collect();
        self.finished = finished;
        self.scope = Arc::new(Scope::Queue {
            name,
            items: window,
        });
        self.send_pending_scan();
        empty
    }
}

/// An item a worker holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The item's key.
    pub item: String,
    /// What it asks for.
    pub payload: String,
    /// The fencing token (the worker's ticket on the item).
    pub token: Ticket,
}

/// One worker of the queue `name` on `N` replicas (the kernel's
/// `Client<N, QUEUE_ROWS, 32>` running the work-queue program).
#[derive(Debug)]
pub struct BakeryQueue<const N: usize> {
    d: Driver<N, QUEUE_ROWS>,
    name: Arc<str>,
}

impl<const N: usize> BakeryQueue<N> {
    /// A worker of the queue `name` on `replicas` (exactly `N`).
    pub fn new(
        name: &str,
        replicas: Vec<Arc<dyn ReplicaBackend<QUEUE_ROWS>>>,
        opts: Options,
    ) -> Result<Self, Error> {
        check_name(name)?;
        let scope = Arc::new(Scope::Queue {
            name: name.to_string(),
            items: vec![None; QUEUE_ROWS],
        });
        let program = Program::Queue {
            items: QUEUE_ROWS as u8,
            lock_id: Row(0),
        };
        Ok(BakeryQueue {
            d: Driver::with_program(scope, replicas, opts, program)?,
            name: name.into(),
        })
    }

    /// A worker over `redis-server`s at `addrs`.
    pub fn redis(name: &str, addrs: &[String], opts: Options) -> Result<Self, Error> {
        Self::new(name, redis_replicas(addrs)?, opts)
    }

    /// The counters.
    pub fn stats(&self) -> &super::Stats {
        &self.d.stats
    }

    /// Calls `report` with each malformed or foreign entry met, once per entry and replica,
    /// when it is met (see [`Driver::on_malformed`](super::Driver::on_malformed)).
    pub fn on_malformed(&mut self, report: impl Fn(&str) + Send + Sync + 'static) {
        self.d.on_malformed(report);
    }

    /// Runs the worker loop until it holds an item (and has its payload): `Ok(None)` if
    /// `stop_when_empty` and a refresh finds no pending item; an error at `timeout`.
    pub async fn next(
        &mut self,
        timeout: Option<Duration>,
        stop_when_empty: bool,
    ) -> Result<Option<Taken>, Error> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        if self.d.client.phase() == Phase::Idle {
            self.d.feed(Input::Work)?;
        }
        self.d.stop_when_empty = stop_when_empty;
        let r = self
            .d
            .drive(
                start,
                deadline,
                None::<&mut std::future::Pending<()>>,
                |o| matches!(o, ClientOutput::Entered { .. }),
            )
            .await;
        self.d.stop_when_empty = false;
        let (row, token) = match r {
            Ok(Until::Event(ClientOutput::Entered { row, token })) => (row, token),
            Err(Error::QueueEmpty) => return Ok(None),
            Err(e) => return Err(e),
            Ok(_) => return Err(Error::Config("the worker stopped without an item".into())),
        };
        let item = self
            .d
            .scope
            .item(row.0 as usize)
            .ok_or_else(|| Error::Config(format!("entered the empty row {}", row.0)))?
            .to_string();
        let limit = deadline.unwrap_or(Instant::now() + Duration::from_secs(10));
        let payload = self.payload(&item, limit).await?;
        Ok(Some(Taken {
            item,
            payload,
            token,
        }))
    }

    /// The item's payload from the first replica that has it (pushes reached `W`).
    async fn payload(&mut self, item: &str, deadline: Instant) -> Result<String, Error> {
        let item: Arc<str> = item.into();
        let ct = self.d.store.call_timeout();
        let mut backoff = Duration::from_millis(10);
        loop {
            let asks = self.d.store.replicas().iter().map(|b| {
                let call = b.clone().payload(self.name.clone(), item.clone());
                async move { tokio::time::timeout(ct, call).await }
            });
            // The first replica that has it ends the read (a paused one is not waited for).
            let answers = gather(
                asks,
                |a| a.iter().any(|x| matches!(x, Some(Ok(Ok(Some(_)))))),
                |_| Duration::ZERO,
            )
            .await;
            self.d.stats.ops += 1;
            let mut missing = Vec::new();
            for (r, a) in answers.into_iter().enumerate() {
                let addr = self.d.store.replicas()[r].addr();
                match a {
                    Some(Ok(Ok(Some(p)))) => return Ok(p),
                    Some(Ok(Ok(None))) => missing.push(format!("r{r} {addr} (no payload)")),
                    Some(Ok(Err(e))) => missing.push(format!("r{r} {addr} ({e})")),
                    Some(Err(_)) => missing.push(format!(
                        "r{r} {addr} (no answer within {} ms)",
                        ct.as_millis()
                    )),
                    None => missing.push(format!("r{r} {addr} (not waited for)")),
                }
            }
            if Instant::now() + backoff >= deadline {
                return Err(Error::NoQuorum {
                    what: format!("read of the payload of {item}"),
                    need: 1,
                    got: 0,
                    missing,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// The end of the item's lease while one is held (see [`super::Driver::lease_end`]).
    pub fn lease_end(&self) -> Option<Instant> {
        self.d.lease_end()
    }

    /// Holds the item while `work` runs (renewing the lease); [`Error::Lost`] as soon as
    /// the lease runs out — the kernel has then gone back to scanning, and `work` must stop.
    pub async fn hold<F: std::future::Future + Unpin>(
        &mut self,
        work: F,
    ) -> Result<F::Output, Error> {
        self.d.hold(work).await
    }

    /// The item is processed: removes it (wiki 143–145: details, the `0=0` marker, the own
    /// number); returns once the marker's delete has its `W` acknowledgements.
    pub async fn done(&mut self, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        self.d.feed(Input::Done)?;
        self.d
            .drive(
                start,
                Some(start + timeout),
                None::<&mut std::future::Pending<()>>,
                |o| matches!(o, ClientOutput::Completed { .. }),
            )
            .await
            .map(|_| ())
    }
}

/// `hilock bakery queue push`: prints nothing itself; returns the item's key.
pub async fn push_command(
    name: &str,
    addrs: &[String],
    payload: &str,
    timeout: Duration,
) -> Result<String, String> {
    let replicas = redis_replicas::<QUEUE_ROWS>(addrs).map_err(|e| e.to_string())?;
    let opts = Options::new(1);
    push(name, &replicas, payload, 0, opts.call_timeout, timeout)
        .await
        .map_err(|e| e.to_string())
}
