//! The bakery engine as a [`Protocol`] site of the one harness: `C` kernel bakery clients
//! ([`hilock_kernel::bakery::Client`]) over a quorum store of [`REPLICAS`] kernel replicas
//! ([`hilock_kernel::bakery::Replica`]), R = W = 2, all contending on one lock (lock 0).
//! The simulator drives it (`hilock_benches::bakery`, next to the token engine on the same
//! workload).
//!
//! - **Sites.** [`BakerySite`] is a client (nodes `0..C`, bakery client id = node + 1;
//!   column 0 is the work queue's marker) or a replica (nodes `C..C + 3`) behind the
//!   kernel's [`Protocol`] interface, so that the one harness ([`crate::Cluster`]) routes
//!   and delivers every request and answer and checks mutual exclusion
//!   ([`crate::Cluster::check_exclusive`]) after every grant. The site only translates: a
//!   kernel `Send` to replica `r` is a message to node `C + r`, a replica's reply goes back
//!   to the sender, `Entered` is the grant. Every rule of the seed runs in the kernel. An
//!   `Acquire` that comes while the client's line-19 write is still in flight waits for it
//!   (the kernel client does one thing at a time).
//! - **"Sleep a little"**: a client that the kernel put to sleep (lines 9–16) asks for a
//!   poll ([`BakerySite::wants_poll`]); the poll input ([`Input::Upgrade`] of lock 0) wakes
//!   it (the kernel client's `Input::Wake`) and it re-reads. How long it sleeps
//!   ([`BakerySite::poll`], in message delays) is the driver's to honour.
//! - **Leases.** The corrected variant has leases, but no time passes for the clients (no
//!   `Tick`): the lease is taken to be far longer than any wait here (the runtime's is 2 s
//!   against waits of tens of ms), so no entry expires and no renewal is sent.
//! - **Counts.** Each client counts its acquires, quorum operations, sleeps and the
//!   answers and entries it read ([`Counts`]).

use super::adapter::{all_or_nothing, exclusive_held};
use crate::Invariants;
use crate::VecSink;
use hilock_kernel::bakery::{
    BakeryError, Client, ClientId, ClientOutput, Config as BakeryConfig, Input as BInput, Phase,
    Program, Replica, ReplicaId, Reply, Request, Row, Variant,
};
use hilock_kernel::{
    Input, KernelError, LockId, Mode, MsgKind, NodeId, Output, Protocol, Report, Sink,
};

/// Replicas of the store.
pub const REPLICAS: usize = 3;
/// Read and write quorum.
pub const QUORUM: u8 = 2;
/// Columns of a family: column 0 (the work queue's `0=0` marker) and one per client. The
/// kernel client keeps per-column bitmasks in a `u32`, so 32 is its limit.
pub const COLUMNS: usize = 32;
/// Most clients: one per column but column 0.
pub const MAX_CLIENTS: usize = COLUMNS - 1;
/// Quorum operations of an uncontended acquire (seed lines 1, 2, 4, 5, 6, 7) and of a
/// release (line 19).
pub const OPS_ACQUIRE: u64 = 6;
/// Quorum operations of a release (line 19).
pub const OPS_RELEASE: u64 = 1;

type BClient = Client<REPLICAS, 1, COLUMNS>;
type BReplica = Replica<1, COLUMNS>;
/// A replica's reply in this store.
pub type BReply = Reply<1, COLUMNS>;

/// A message between a bakery client and a replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BakeryMsg {
    /// Client → replica.
    Req(Request),
    /// Replica → client (boxed: an answer carries a whole family).
    Rep(Box<BReply>),
}

/// What one client counted over the whole run (warm-up included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Acquires granted (`Entered`).
    pub acquires: u64,
    /// Quorum operations started between `Acquire` and `Entered` (one request to every
    /// replica each).
    pub acquire_ops: u64,
    /// Quorum operations started by releases (line 19).
    pub release_ops: u64,
    /// "Sleep a little" waits between `Acquire` and `Entered` (each is followed by a poll
    /// and a re-read).
    pub sleeps: u64,
    /// Answers to reads the client received (every replica answers, also after the
    /// quorum is reached).
    pub answers: u64,
    /// Entries (non-empty cells) in those answers: the data the client read.
    pub entries_read: u64,
    /// Leases lost or attempts abandoned (none can happen without ticks; counted to show it).
    pub lost: u64,
}

impl Counts {
    /// Adds `o`'s counters to these.
    pub fn add(&mut self, o: &Counts) {
        self.acquires += o.acquires;
        self.acquire_ops += o.acquire_ops;
        self.release_ops += o.release_ops;
        self.sleeps += o.sleeps;
        self.answers += o.answers;
        self.entries_read += o.entries_read;
        self.lost += o.lost;
    }
}

#[derive(Clone, Debug)]
enum Role {
    Client {
        c: Box<BClient>,
        /// In the critical section (from `Entered` to the `Release` input).
        held: bool,
        /// Between `Acquire` and `Entered`.
        acquiring: bool,
        /// An `Acquire` came while line 19 was in flight; started at `Exited`.
        queued: bool,
        counts: Counts,
    },
    Replica(Box<BReplica>),
}

/// A bakery client or a replica as a [`Protocol`] site for the one harness.
#[derive(Clone, Debug)]
pub struct BakerySite {
    id: NodeId,
    /// Node of replica 0 (replica `r` is node `base + r`).
    base: u16,
    /// "Sleep a little", in message delays.
    poll: f64,
    role: Role,
}

fn kerr(e: BakeryError, id: NodeId) -> KernelError {
    match e {
        BakeryError::OutputsFull => KernelError::OutputsFull,
        BakeryError::UnknownReplica(r) => KernelError::UnknownNode(NodeId(r.0 as u16)),
        _ => KernelError::UnknownNode(id),
    }
}

impl BakerySite {
    /// Node `i` of a system of `clients` clients and [`REPLICAS`] replicas: a client for
    /// `i < clients` running `variant`, else a replica. `poll` is "sleep a little" in message
    /// delays.
    pub fn new(i: usize, clients: usize, variant: Variant, poll: f64) -> Result<Self, String> {
        if clients == 0 || clients > MAX_CLIENTS || i >= clients + REPLICAS {
            return Err(format!(
                "bakery: node {i} of {clients} clients (1..={MAX_CLIENTS}) + {REPLICAS} replicas"
            ));
        }
        let role = if i < clients {
            let cfg = BakeryConfig {
                r: QUORUM,
                w: QUORUM,
                variant,
                // No ticks reach the clients (see the module text): the lease values only
                // have to be valid.
                lease: 200,
                expiry: 200,
                renew_below: 50,
                program: Program::Lock { row: Row(0) },
            };
            let c = BClient::new(ClientId(i as u16 + 1), cfg).map_err(|e| e.to_string())?;
            Role::Client {
                c: Box::new(c),
                held: false,
                acquiring: false,
                queued: false,
                counts: Counts::default(),
            }
        } else {
            Role::Replica(Box::new(BReplica::new()))
        };
        Ok(BakerySite {
            id: NodeId(i as u16),
            base: clients as u16,
            poll,
            role,
        })
    }

    /// The client's counters (`None` for a replica).
    pub fn counts(&self) -> Option<Counts> {
        match &self.role {
            Role::Client { counts, .. } => Some(*counts),
            Role::Replica(_) => None,
        }
    }

    /// The kernel client (`None` for a replica).
    pub fn client(&self) -> Option<&BClient> {
        match &self.role {
            Role::Client { c, .. } => Some(c),
            Role::Replica(_) => None,
        }
    }

    /// "Sleep a little", in message delays (the pause before a sleeping client is polled).
    pub fn poll(&self) -> f64 {
        self.poll
    }

    /// The lock a client the kernel put to sleep ("sleep a little") waits on: it is woken
    /// by the poll input, [`Input::Upgrade`] of that lock. `None` for a replica or a client
    /// that does not sleep.
    pub fn wants_poll(&self) -> Option<LockId> {
        match &self.role {
            Role::Client { c, .. } if c.phase().sleeping() => Some(LockId(0)),
            _ => None,
        }
    }

    /// One kernel client step and what follows from it (a queued `Acquire` after
    /// `Exited`); outputs translated into `sends`.
    fn client_step(
        &mut self,
        input: BInput<'_, 1, COLUMNS>,
        sends: &mut Vec<Output<BakeryMsg>>,
    ) -> Result<(), BakeryError> {
        let base = self.base;
        let Role::Client {
            c,
            held,
            acquiring,
            queued,
            counts,
        } = &mut self.role
        else {
            return Err(BakeryError::WrongProgram);
        };
        let mut next = Some(input);
        while let Some(input) = next.take() {
            if matches!(input, BInput::Acquire) {
                *acquiring = true;
            }
            let mut out: VecSink<ClientOutput> = VecSink::new();
            c.step(input, &mut out)?;
            for o in out.0 {
                match o {
                    ClientOutput::Send { to, req } => {
                        if to == ReplicaId(0) {
                            if *acquiring {
                                counts.acquire_ops += 1;
                            } else {
                                counts.release_ops += 1;
                            }
                        }
                        sends.push(Output::Send {
                            to: NodeId(base + to.0 as u16),
                            msg: BakeryMsg::Req(req),
                        });
                    }
                    ClientOutput::Entered { .. } => {
                        *held = true;
                        *acquiring = false;
                        counts.acquires += 1;
                        sends.push(Output::Granted {
                            lock: LockId(0),
                            mode: Mode::W,
                        });
                    }
                    ClientOutput::Exited { .. } => {
                        if *queued {
                            *queued = false;
                            next = Some(BInput::Acquire);
                        }
                    }
                    ClientOutput::Sleep => counts.sleeps += 1,
                    ClientOutput::Lost { .. } | ClientOutput::Abandoned { .. } => counts.lost += 1,
                    ClientOutput::Completed { .. } => {}
                }
            }
        }
        Ok(())
    }
}

impl Protocol for BakerySite {
    type Msg = BakeryMsg;
    const MAX_OUTPUTS: usize = 2 * (REPLICAS + 2) + 2;

    const TOKENS: bool = false;

    fn id(&self) -> NodeId {
        self.id
    }

    fn step<S: Sink<Output<BakeryMsg>>>(
        &mut self,
        input: Input<'_, BakeryMsg>,
        out: &mut S,
    ) -> Result<Report, KernelError> {
        let id = self.id;
        all_or_nothing(self, out, Self::MAX_OUTPUTS, |site, sends| {
            // First what the input asks of the kernel client (checks that change nothing),
            // then the step.
            let client_input: Option<BInput<'_, 1, COLUMNS>> = match (&mut site.role, input) {
                (Role::Replica(rep), Input::Deliver { from, msg }) => {
                    let BakeryMsg::Req(req) = msg else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    let mut replies: VecSink<BReply> = VecSink::new();
                    rep.step(req, &mut replies).map_err(|e| kerr(e, id))?;
                    for reply in replies.0 {
                        sends.push(Output::Send {
                            to: from,
                            msg: BakeryMsg::Rep(Box::new(reply)),
                        });
                    }
                    None
                }
                (Role::Replica(_), _) => return Err(KernelError::InvalidMode),
                (Role::Client { counts, .. }, Input::Deliver { from, msg }) => {
                    let BakeryMsg::Rep(reply) = msg else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    let Some(r) = from
                        .0
                        .checked_sub(site.base)
                        .filter(|r| *r < REPLICAS as u16)
                    else {
                        return Err(KernelError::UnknownNode(from));
                    };
                    if let BReply::Answer { rows, .. } = &**reply {
                        counts.answers += 1;
                        counts.entries_read += rows.iter().flatten().flatten().count() as u64;
                    }
                    Some(BInput::Reply {
                        from: ReplicaId(r as u8),
                        reply: &**reply,
                    })
                }
                (
                    Role::Client {
                        held,
                        acquiring,
                        queued,
                        c,
                        ..
                    },
                    Input::Acquire { lock, mode },
                ) => {
                    if lock != LockId(0) {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if mode == Mode::Phi {
                        return Err(KernelError::InvalidMode);
                    }
                    if *held {
                        return Err(KernelError::AlreadyHeld(lock));
                    }
                    if *acquiring || *queued {
                        return Err(KernelError::AlreadyPending(lock));
                    }
                    if c.phase() != Phase::Idle {
                        // Line 19 in flight: start when it is done.
                        *queued = true;
                        None
                    } else {
                        Some(BInput::Acquire)
                    }
                }
                (Role::Client { held, .. }, Input::Release { lock }) => {
                    if lock != LockId(0) {
                        return Err(KernelError::UnknownLock(lock));
                    }
                    if !*held {
                        return Err(KernelError::NotHeld(lock));
                    }
                    *held = false;
                    Some(BInput::Release)
                }
                // The simulator's poll: "sleep a little" is over.
                (Role::Client { c, .. }, Input::Upgrade { lock }) => {
                    if lock != LockId(0) || !c.phase().sleeping() {
                        return Err(KernelError::NotHoldingU(lock));
                    }
                    Some(BInput::Wake)
                }
                // No priorities, no try-lock, no cancel, no downgrade, no conversion and no
                // value block in the bakery simulator.
                (
                    Role::Client { .. },
                    Input::SetPriority { .. }
                    | Input::TryAcquire { .. }
                    | Input::Cancel { .. }
                    | Input::Downgrade { .. }
                    | Input::Convert { .. }
                    | Input::SetValue { .. },
                ) => return Err(KernelError::InvalidMode),
            };
            match client_input {
                Some(i) => site.client_step(i, sends).map_err(|e| kerr(e, id)),
                None => Ok(()),
            }
        })
    }

    fn held(&self, lock: LockId) -> Result<Mode, KernelError> {
        exclusive_held(
            lock == LockId(0),
            matches!(&self.role, Role::Client { held: true, .. }),
            KernelError::UnknownLock(lock),
        )
    }

    fn has_token(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock).map(|_| false)
    }

    fn is_pending(&self, lock: LockId) -> Result<bool, KernelError> {
        self.held(lock)?;
        Ok(matches!(
            &self.role,
            Role::Client {
                acquiring: true,
                ..
            } | Role::Client { queued: true, .. }
        ))
    }

    fn kind(msg: &BakeryMsg) -> MsgKind {
        match msg {
            BakeryMsg::Req(_) => MsgKind::Request,
            BakeryMsg::Rep(_) => MsgKind::Grant,
        }
    }

    fn lock_of(_msg: &BakeryMsg) -> LockId {
        LockId(0)
    }
}

impl Invariants for BakerySite {}
