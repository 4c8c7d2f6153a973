//! The bakery over quorum reads and writes (`kernel/src/bakery/`; the Cassandra wiki page
//! "Locking", `spec/SPEC.md` section 5) one client step at a time, over three in-memory
//! replicas: the texts of ids, errors and cells; the fencing token of a ticket (line 18);
//! which phases wait, sleep and hold entries under a lease; the number a client draws
//! (lines 2–4) and its lease (wiki 85–86, 154–155), renewed once and lost when it runs
//! out; the replies and timestamps a model checker renames; the work queue's read of an
//! item's details (wiki 139–140) and its re-read of `choosing` (wiki 131); `skip_self`
//! and an expired `choosing` flag in the loop of lines 8–12; and a repeated write at a
//! replica. The comment above each test names the mutants it kills: the kernel's unit
//! tests and `verify --test bakery` missed them (`docs/verification.md`, "Mutation
//! testing").

use hilock_kernel::bakery::{
    BakeryError, Cell, Client, ClientId, ClientOutput, Config, Family, Input, Phase, Program,
    Renaming, Replica, ReplicaId, ReplicaReport, Reply, Request, Row, Rule, Ticket, Ts, Value,
    Variant,
};
use std::collections::VecDeque;

type Outs = heapless::Vec<ClientOutput, 8>;

/// Three replicas and the clients of one lock row, with a FIFO of requests in flight
/// (client index, replica, request); everything is delivered in order.
struct Bakery<const K: usize, const C: usize = 3> {
    clients: Vec<Client<3, K, C>>,
    replicas: [Replica<K, C>; 3],
    net: VecDeque<(usize, ReplicaId, Request)>,
    events: Vec<(usize, ClientOutput)>,
}

impl<const K: usize, const C: usize> Bakery<K, C> {
    fn new(clients: usize, variant: Variant) -> Self {
        Self::with(clients, variant, Program::Lock { row: Row(0) })
    }
    fn with(clients: usize, variant: Variant, program: Program) -> Self {
        let cfg = Config {
            r: 2,
            w: 2,
            variant,
            lease: 4,
            expiry: 4,
            renew_below: 1,
            program,
        };
        Bakery {
            clients: (1..=clients)
                .map(|i| Client::new(ClientId(i as u16), cfg).unwrap())
                .collect(),
            replicas: [Replica::new(), Replica::new(), Replica::new()],
            net: VecDeque::new(),
            events: Vec::new(),
        }
    }
    /// Steps client `c` and returns the rule that fired; its requests join the network,
    /// its other outputs the event list.
    fn input(&mut self, c: usize, input: Input<'_, K, C>) -> Rule {
        let mut out = Outs::new();
        let rule = self.clients[c].step(input, &mut out).unwrap().rule;
        for o in out {
            match o {
                ClientOutput::Send { to, req } => self.net.push_back((c, to, req)),
                other => self.events.push((c, other)),
            }
        }
        rule
    }
    /// Work items enqueued before the run (wiki 108–109): `details` and the `0=0` marker
    /// of each row, on every replica.
    fn enqueue(&mut self, rows: &[Row]) {
        let cell = |v| Cell {
            ts: Ts(1),
            val: Some(Value::Int(v)),
        };
        for r in &mut self.replicas {
            for &row in rows {
                r.seed(row, Family::Number, 0, cell(0)).unwrap();
                r.seed(row, Family::Details, 0, cell(1)).unwrap();
            }
        }
    }
    /// Delivers every request and its reply until nothing is in flight.
    fn settle(&mut self) {
        while let Some((c, to, req)) = self.net.pop_front() {
            self.deliver(c, to, req);
        }
    }
    /// Delivers client `c`'s requests and their replies until none of its is in flight;
    /// the others' wait.
    fn settle_only(&mut self, c: usize) {
        while self.deliver_next(c) {}
    }
    /// Delivers client `c`'s requests one at a time (the others' wait) until its phase
    /// satisfies `done`; panics if it stalls first.
    fn until(&mut self, c: usize, done: impl Fn(Phase) -> bool) {
        while !done(self.clients[c].phase()) {
            let phase = self.clients[c].phase();
            assert!(self.deliver_next(c), "client {c} stalled in {phase:?}");
        }
    }
    /// Delivers client `c`'s oldest request in flight and its reply; false if none.
    fn deliver_next(&mut self, c: usize) -> bool {
        let Some(i) = self.net.iter().position(|m| m.0 == c) else {
            return false;
        };
        let (c, to, req) = self.net.remove(i).unwrap();
        self.deliver(c, to, req);
        true
    }
    fn deliver(&mut self, c: usize, to: ReplicaId, req: Request) {
        let mut replies: heapless::Vec<Reply<K, C>, 2> = heapless::Vec::new();
        self.replicas[to.0 as usize]
            .step(&req, &mut replies)
            .unwrap();
        for r in replies {
            let reply = Input::Reply {
                from: to,
                reply: &r,
            };
            self.input(c, reply);
        }
    }
}

/// `Display for ReplicaId` → `Ok(Default::default())`: replicas print as `r<index>`, the
/// name the error texts use.
#[test]
fn replica_ids_display_as_r() {
    assert_eq!(ReplicaId(2).to_string(), "r2");
    assert_eq!(
        BakeryError::UnknownReplica(ReplicaId(4)).to_string(),
        "unknown replica r4"
    );
}

/// `Ticket::as_u64` → 0, 1, and `(number << 16) | id` with `|` → `&`, `^`, `<<` → `>>`:
/// the fencing token is `number · 2¹⁶ + id`, increasing in the ticket order.
#[test]
fn a_ticket_as_one_integer_is_number_then_id() {
    let t = |number: u32, id: u16| Ticket {
        number,
        id: ClientId(id),
    };
    assert_eq!(t(3, 5).as_u64(), 3 * 65_536 + 5);
    assert_eq!(t(0, 7).as_u64(), 7);
    assert_eq!(t(u32::MAX, u16::MAX).as_u64(), (1 << 48) - 1);
    let mut all = [t(2, 1), t(1, 9), t(1, 2), t(0, 3), t(7, 0)];
    all.sort();
    for w in all.windows(2) {
        assert!(w[0].as_u64() < w[1].as_u64(), "{:?} {:?}", w[0], w[1]);
    }
}

/// `Display for BakeryError` → `Ok(Default::default())`: every refusal has its own text.
#[test]
fn bakery_errors_have_distinct_texts() {
    let all = [
        BakeryError::UnknownReplica(ReplicaId(3)),
        BakeryError::UnknownClient(ClientId(9)),
        BakeryError::UnknownRow(Row(2)),
        BakeryError::BadQuorum,
        BakeryError::WeakQuorum,
        BakeryError::BadLease,
        BakeryError::NotIdle,
        BakeryError::NotHeld,
        BakeryError::WrongProgram,
        BakeryError::BadReply,
        BakeryError::BadRenaming,
        BakeryError::OutputsFull,
    ];
    let texts: Vec<String> = all.iter().map(ToString::to_string).collect();
    for (i, a) in texts.iter().enumerate() {
        assert!(!a.is_empty(), "{:?}", all[i]);
        for b in &texts[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(all[1].to_string(), "unknown client 9");
    assert_eq!(all[2].to_string(), "unknown row 2");
    assert_eq!(all[4].to_string(), "R + W must exceed N");
}

/// `Phase::waiting` → `true`, `false` (and the other three predicates): which phases are
/// the waiting loops (lines 9–16 and the queue's scan), which sleep, which hold entries
/// under the lease and which have the own number written.
#[test]
fn phase_predicates_name_the_loops_sleeps_and_leased_phases() {
    use Phase::*;
    let wait_choosing = |reading| WaitChoosing { id: 2, reading };
    let wait_number = |reading| WaitNumber { id: 2, reading };
    // (phase, sleeping, waiting, leased, numbered)
    let table = [
        (Idle, false, false, false, false),
        (Scan, false, true, false, false),
        (ScanSleep, true, true, false, false),
        (Choose, false, false, true, false),
        (ReadMax, false, false, true, false),
        (TakeNumber, false, false, true, false),
        (Unchoose, false, false, true, true),
        (ReadChoosing, false, false, true, true),
        (ReadNumbers, false, false, true, true),
        (wait_choosing(false), true, true, true, true),
        (wait_choosing(true), false, true, true, true),
        (RereadNumbers { id: 2 }, false, false, true, true),
        (wait_number(false), true, true, true, true),
        (wait_number(true), false, true, true, true),
        (GiveUp, false, false, false, false),
        (ReadDetails, false, false, true, true),
        (Held, false, false, true, true),
        (Exit, false, false, false, false),
        (Remove { step: 1 }, false, false, false, false),
    ];
    for (p, sleeping, waiting, leased, numbered) in table {
        assert_eq!(
            (p.sleeping(), p.waiting(), p.leased(), p.numbered()),
            (sleeping, waiting, leased, numbered),
            "{p:?}"
        );
    }
}

/// `Client::number` → 0, 1, and `lease_left` → `None`, `Some(0)`, `Some(1)`: the number a
/// client drew (line 3: one more than the largest it read; with `keep_tickets` the released
/// numbers still count) and the ticks left of its lease (full after the write that took
/// the number, counting down with ticks, gone after line 19).
#[test]
fn a_client_reports_its_number_and_lease() {
    let mut b = Bakery::<1>::new(1, Variant::HILOCK);
    assert_eq!(
        (b.clients[0].number(), b.clients[0].lease_left()),
        (0, None)
    );
    b.input(0, Input::Acquire);
    b.settle();
    assert_eq!(b.clients[0].phase(), Phase::Held);
    assert_eq!(b.clients[0].number(), 1);
    let lease = b.clients[0].lease_left().expect("a holder has a lease");
    assert_eq!(lease, 4, "no tick has passed since the lease began");
    b.input(0, Input::Tick { elapsed: 1 });
    assert_eq!(b.clients[0].lease_left(), Some(lease - 1));
    b.input(0, Input::Release);
    b.settle();
    assert_eq!(b.clients[0].lease_left(), None);
    b.input(0, Input::Acquire);
    b.settle();
    assert_eq!(b.clients[0].number(), 2, "the released ticket still counts");
    assert_eq!(b.clients[0].held().map(|t| t.number), Some(2));
}

/// `Client::replied` → (0, 0), (0, 1), (1, 0), (1, 1), with `outstanding`, `compact_ops`
/// and `permute_replicas`, the state a model checker reads and canonicalises: which
/// replicas answered the operation in flight (bit r), renamed with the replicas; the
/// outstanding operation ids, renamed to 1 (main) and 2 (renewal).
#[test]
fn a_client_reports_and_renames_its_outstanding_operation() {
    let mut b = Bakery::<1>::new(1, Variant::HILOCK);
    b.input(0, Input::Acquire);
    assert_eq!(b.clients[0].replied(), (0, 0));
    // deliver replica 1's write only: one acknowledgement of W = 2
    let (c, to, req) = b.net.remove(1).unwrap();
    assert_eq!(to, ReplicaId(1));
    let mut replies: heapless::Vec<Reply<1, 3>, 2> = heapless::Vec::new();
    b.replicas[1].step(&req, &mut replies).unwrap();
    b.input(
        c,
        Input::Reply {
            from: to,
            reply: &replies[0],
        },
    );
    assert_eq!(b.clients[0].replied(), (0b010, 0));
    // renaming the replicas renames the answers: 1 → 0
    let before = b.clients[0].clone();
    assert_eq!(
        b.clients[0].permute_replicas(&[1, 1, 2]),
        Err(BakeryError::UnknownReplica(ReplicaId(1)))
    );
    assert_eq!(
        b.clients[0].permute_replicas(&[0, 3, 1]),
        Err(BakeryError::UnknownReplica(ReplicaId(3)))
    );
    assert_eq!(
        b.clients[0], before,
        "a refused permutation changed the client"
    );
    b.clients[0].permute_replicas(&[2, 0, 1]).unwrap();
    assert_eq!(b.clients[0].replied(), (0b001, 0));
    b.clients[0].permute_replicas(&[1, 2, 0]).unwrap();
    assert_eq!(b.clients[0].replied(), (0b010, 0));
    // the rest of the run, then line 19 in flight under a later operation id
    b.settle();
    assert_eq!(b.clients[0].phase(), Phase::Held);
    assert_eq!(b.clients[0].outstanding(), (None, None));
    b.input(0, Input::Release);
    let (Some(op), None) = b.clients[0].outstanding() else {
        panic!("line 19 is not in flight")
    };
    assert!(op > 2, "operation id {op}");
    assert_eq!(b.clients[0].compact_ops(), (Some(op), None));
    assert_eq!(b.clients[0].outstanding(), (Some(1), None));
}

/// `Client::timestamps`: `clock > 0` → `>=` and `o.ts > 0` → `>=` (0 means "no timestamp"
/// and is not visited); `rename_timestamps`: `ok &= covered` → `|=` (a renaming must cover
/// every timestamp the client holds, not only its clock; else it is refused and changes
/// nothing).
#[test]
fn a_client_visits_and_renames_only_real_timestamps() {
    let mut b = Bakery::<1>::new(2, Variant::HILOCK);
    let mut seen = Vec::new();
    b.clients[0].timestamps(|t| seen.push(t));
    assert!(
        seen.is_empty(),
        "a fresh client holds no timestamp: {seen:?}"
    );
    b.input(1, Input::Acquire);
    b.settle();
    b.input(0, Input::Acquire);
    b.settle();
    b.clients[0].timestamps(|t| seen.push(t));
    seen.sort();
    seen.dedup();
    assert!(!seen.contains(&Ts(0)), "{seen:?}");
    let clock = Ts(b.clients[0].clock());
    assert!(
        seen.len() >= 2 && seen.contains(&clock),
        "the client read client 2's entries: {seen:?}"
    );
    let before = b.clients[0].clone();
    let only_clock =
        Renaming::new(std::slice::from_ref(&clock), std::slice::from_ref(&clock)).unwrap();
    assert_eq!(
        b.clients[0].rename_timestamps(&only_clock),
        Err(BakeryError::BadRenaming)
    );
    assert_eq!(b.clients[0], before);
    let to: Vec<Ts> = (1..=seen.len() as u32).map(Ts).collect();
    b.clients[0]
        .rename_timestamps(&Renaming::new(&seen, &to).unwrap())
        .unwrap();
    assert_eq!(b.clients[0].clock(), seen.len() as u32);
}

/// `read`: `leases && family != Details` → `||`. Lease observations exist for `choosing`
/// and `number` only; the queue's read of an item's `details` (wiki 140, `item_exists`)
/// under leases must not look for them. One worker, one enqueued item, every correction
/// (leases on): the worker takes the item, processes it and removes it.
#[test]
fn a_leased_queue_worker_reads_the_details_and_completes_the_item() {
    let program = Program::Queue {
        items: 1,
        lock_id: Row(0),
    };
    let mut b = Bakery::<1>::with(1, Variant::HILOCK, program);
    b.enqueue(&[Row(0)]);
    b.input(0, Input::Work);
    b.settle();
    assert_eq!(b.clients[0].phase(), Phase::Held);
    assert!(
        matches!(
            b.events[..],
            [(0, ClientOutput::Entered { row: Row(0), .. })]
        ),
        "{:?}",
        b.events
    );
    b.input(0, Input::Done);
    b.settle();
    assert!(
        b.events
            .contains(&(0, ClientOutput::Completed { row: Row(0) })),
        "{:?}",
        b.events
    );
}

/// `tick`: `!leases || elapsed == 0` → `&&`, the renewal test `left <= renew_below &&
/// no renewal && numbered` with either `&&` → `||`, and `lose` → `()`. Without leases a
/// tick does nothing, nor does a tick of 0; a holder with its full lease (4) renews only
/// when 1 tick is left, once; and when the lease runs out the holder stops (`Lost`, idle).
#[test]
fn a_holder_renews_its_lease_once_when_low_and_stops_when_it_runs_out() {
    let mut plain = Bakery::<1>::new(
        1,
        Variant {
            leases: false,
            ..Variant::HILOCK
        },
    );
    plain.input(0, Input::Acquire);
    plain.settle();
    assert_eq!(plain.input(0, Input::Tick { elapsed: 3 }), Rule::Idle);
    let mut b = Bakery::<1>::new(1, Variant::HILOCK);
    b.input(0, Input::Acquire);
    b.settle();
    assert_eq!(b.clients[0].lease_left(), Some(4));
    assert_eq!(b.input(0, Input::Tick { elapsed: 0 }), Rule::Idle);
    assert_eq!(b.input(0, Input::Tick { elapsed: 1 }), Rule::Tick);
    assert_eq!(b.input(0, Input::Tick { elapsed: 1 }), Rule::Tick);
    assert!(b.net.is_empty(), "a renewal with 2 ticks left: {:?}", b.net);
    assert_eq!(b.input(0, Input::Tick { elapsed: 1 }), Rule::LeaseRenew);
    assert_eq!(b.net.len(), 3, "the renewal goes to every replica");
    assert!(b.clients[0].outstanding().1.is_some());
    // `reply`: the renewal needs W = 2 acknowledgements (`count < w` → `==`, `>`)
    assert!(b.deliver_next(0));
    assert!(
        b.clients[0].outstanding().1.is_some(),
        "renewed after one ack"
    );
    assert_eq!(b.clients[0].lease_left(), Some(1));
    assert!(b.deliver_next(0));
    assert_eq!(b.clients[0].outstanding().1, None);
    assert_eq!(
        b.clients[0].lease_left(),
        Some(4),
        "renewed for a full lease"
    );
    // a second renewal, never answered; the lease runs out while it is in flight
    b.net.clear();
    for _ in 0..3 {
        b.input(0, Input::Tick { elapsed: 1 });
    }
    assert!(b.clients[0].outstanding().1.is_some());
    b.net.clear();
    let token = b.clients[0].held().unwrap();
    assert_eq!(b.input(0, Input::Tick { elapsed: 1 }), Rule::LeaseLost);
    assert_eq!(b.clients[0].phase(), Phase::Idle);
    assert_eq!(b.clients[0].held(), None);
    assert_eq!(
        b.events.last(),
        Some(&(0, ClientOutput::Lost { row: Row(0), token }))
    );
}

/// `wake`: the match guard `!queue_reads_item` → `false`. The literal work queue re-reads
/// `choosing` of `lock_id` (wiki 131), a row nobody writes; with `queue_reads_item` it
/// re-reads the work item's row. Worker 1 has written its `choosing` entry for item 0 and
/// is paused; worker 2 sees it at line 6, sleeps, and on waking re-reads.
#[test]
fn a_waking_queue_worker_rereads_choosing_of_the_row_its_variant_names() {
    for (reads_item, row) in [(true, Row(0)), (false, Row(1))] {
        let program = Program::Queue {
            items: 1,
            lock_id: Row(1),
        };
        let variant = Variant {
            queue_reads_item: reads_item,
            leases: false,
            ..Variant::HILOCK
        };
        let mut b = Bakery::<2>::with(2, variant, program);
        b.enqueue(&[Row(0)]);
        b.input(0, Input::Work);
        // worker 1 runs until line 1 (its choosing entry) is done, one delivery at a time
        b.until(0, |p| p == Phase::ReadMax);
        assert_eq!(b.clients[0].phase(), Phase::ReadMax);
        b.input(1, Input::Work);
        b.settle_only(1);
        assert!(
            matches!(
                b.clients[1].phase(),
                Phase::WaitChoosing { reading: false, .. }
            ),
            "{:?}",
            b.clients[1].phase()
        );
        let before = b.net.len();
        assert_eq!(b.input(1, Input::Wake), Rule::Reread);
        let reread: Vec<_> = b.net.iter().skip(before).collect();
        assert_eq!(reread.len(), 3);
        for (c, _, req) in reread {
            assert_eq!(*c, 1);
            assert!(
                matches!(req, Request::Read { family: Family::Choosing, row: Some(r), .. } if *r == row),
                "queue_reads_item {reads_item}: {req:?}"
            );
        }
    }
}

/// `reply`: the match guard `f == g` → `true`. An answer of another family than the read
/// in flight is a bad reply, refused without a change.
#[test]
fn an_answer_of_another_family_is_refused() {
    let mut b = Bakery::<1>::new(1, Variant::HILOCK);
    b.input(0, Input::Acquire);
    b.settle_only(0);
    b.input(0, Input::Release);
    b.until(0, |p| p == Phase::Idle);
    b.input(0, Input::Acquire);
    // line 1's write, then line 2's read of `number` is in flight
    b.until(0, |p| p != Phase::Choose);
    assert_eq!(b.clients[0].phase(), Phase::ReadMax);
    let (Some(op), _) = b.clients[0].outstanding() else {
        panic!("no read in flight")
    };
    let ask = Request::Read {
        op,
        family: Family::Choosing,
        row: Some(Row(0)),
    };
    let mut replies: heapless::Vec<Reply<1, 3>, 2> = heapless::Vec::new();
    b.replicas[0].step(&ask, &mut replies).unwrap();
    let before = b.clients[0].clone();
    let mut out = Outs::new();
    let wrong = Input::Reply {
        from: ReplicaId(0),
        reply: &replies[0],
    };
    assert_eq!(
        b.clients[0].step(wrong, &mut out).err(),
        Some(BakeryError::BadReply)
    );
    assert_eq!(b.clients[0], before);
    assert!(out.is_empty());
}

/// `read_done`: the match guard `!queue_reads_item` → `false`. The literal queue takes the
/// choosing re-read's answer from `lock_id`'s row. Here `lock_id` is item row 1, and
/// (literally) every worker writes `choosing` column 1: worker 1 has chosen on item 0,
/// worker 2 waits for it there, worker 3 has chosen on item 1. Worker 2's re-read of row
/// 1 finds column 1 set and sleeps again; taken from row 0 (not read: empty) it would go on.
#[test]
fn the_literal_queue_takes_the_choosing_reread_from_lock_id() {
    let program = Program::Queue {
        items: 2,
        lock_id: Row(1),
    };
    let variant = Variant {
        queue_reads_item: false,
        own_choosing_column: false,
        leases: false,
        ..Variant::HILOCK
    };
    let mut b = Bakery::<2, 4>::with(3, variant, program);
    b.enqueue(&[Row(0), Row(1)]);
    // worker 1's writes outrank worker 2's delete of the shared column (later timestamps)
    b.clients[0].advance_clock(Ts(50));
    // worker 1 scans (item 0) and sends line 1; worker 2 scans (item 0 too) and runs to
    // line 6 (its own line 5 clears column 1 before worker 1's line 1 sets it)
    b.input(0, Input::Work);
    b.until(0, |p| p == Phase::Choose);
    b.input(1, Input::Work);
    b.until(1, |p| p == Phase::ReadChoosing);
    b.until(0, |p| p == Phase::ReadMax);
    assert_eq!(b.clients[0].row(), Row(0));
    assert_eq!(b.clients[1].row(), Row(0));
    b.until(1, |p| {
        matches!(p, Phase::WaitChoosing { reading: false, .. })
    });
    b.input(2, Input::Work);
    b.until(2, |p| p == Phase::ReadMax);
    assert_eq!(b.clients[2].row(), Row(1));
    let waiting = b.clients[1].phase();
    b.input(1, Input::Wake);
    b.until(1, |p| p == waiting);
}

/// `check_from`: `id == 0 || (skip_self && id == me)` → `&&`. With `skip_self` a client
/// never waits on its own column. The columns are shared here (`own_choosing_column`
/// off, as literally): client 2 has set column 1 with a later timestamp than client 1's
/// own line 1 and line 5, so column 1 — client 1's own id — stays set; client 1 skips it
/// and enters.
#[test]
fn with_skip_self_a_client_never_waits_on_its_own_column() {
    let variant = Variant {
        own_choosing_column: false,
        leases: false,
        ..Variant::HILOCK
    };
    let mut b = Bakery::<1>::new(2, variant);
    b.clients[1].advance_clock(Ts(50));
    b.input(1, Input::Acquire);
    b.until(1, |p| p != Phase::Choose);
    b.input(0, Input::Acquire);
    b.settle_only(0);
    assert_eq!(b.clients[0].phase(), Phase::Held);
}

/// `check_from`: line 9's `live(choosing, id) && choosing[id] == 1` → `||`. With leases a
/// `choosing` flag left by a crashed client expires: the waiter, ticking, renewing its own
/// lease and re-reading, enters once it has watched the flag for `expiry` ticks; it does
/// not wait for ever on the dead flag.
#[test]
fn a_waiter_passes_the_expired_choosing_flag_of_a_crashed_client() {
    let mut b = Bakery::<1>::new(2, Variant::HILOCK);
    b.input(1, Input::Acquire);
    b.until(1, |p| p != Phase::Choose);
    b.net.retain(|m| m.0 != 1); // client 2 crashes after line 1
    b.input(0, Input::Acquire);
    b.settle();
    assert!(
        matches!(b.clients[0].phase(), Phase::WaitChoosing { id: 2, .. }),
        "{:?}",
        b.clients[0].phase()
    );
    for _ in 0..30 {
        if b.clients[0].phase() == Phase::Held {
            return;
        }
        b.input(0, Input::Tick { elapsed: 1 });
        b.settle();
        if b.clients[0].phase().sleeping() {
            b.input(0, Input::Wake);
            b.settle();
        }
    }
    panic!("still {:?} after 30 ticks", b.clients[0].phase());
}

/// `Family::name` → `"xyzzy"`, `""`: the column families are named as on the wiki page.
#[test]
fn families_are_named_as_on_the_wiki_page() {
    let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["choosing", "number", "details"]);
}

/// `Display for Cell` → `Ok(Default::default())`: cells print as `value@timestamp`, a
/// tombstone as `†`, a released number as `rel<n>`.
#[test]
fn cells_display_value_at_timestamp() {
    let c = |ts, val| Cell { ts: Ts(ts), val };
    assert_eq!(c(5, None).to_string(), "†@5");
    assert_eq!(c(7, Some(Value::Int(3))).to_string(), "3@7");
    assert_eq!(c(4, Some(Value::Released(2))).to_string(), "rel2@4");
}

/// `Cell::supersedes`: `rank(self) > rank(other)` → `>=`, and `Replica::columns` → `None`.
/// A cell does not supersede an
/// equal one: a repeated write (a retry) is acknowledged as superseded, not applied again.
#[test]
fn a_repeated_write_does_not_supersede_itself() {
    let cell = Cell {
        ts: Ts(3),
        val: Some(Value::Int(1)),
    };
    assert!(!cell.supersedes(&cell));
    let mut r: Replica<1, 3> = Replica::new();
    let w = Request::Write {
        op: 1,
        row: Row(0),
        family: Family::Number,
        col: 1,
        cell,
    };
    let mut out: heapless::Vec<Reply<1, 3>, 2> = heapless::Vec::new();
    assert_eq!(r.step(&w, &mut out), Ok(ReplicaReport::Applied));
    assert_eq!(r.step(&w, &mut out), Ok(ReplicaReport::Superseded));
    // `Replica::columns` → `None`: a family's columns of a row, none outside the rows
    assert_eq!(
        r.columns(Row(0), Family::Number),
        Some(&[None, Some(cell), None])
    );
    assert_eq!(r.columns(Row(1), Family::Number), None);
}
