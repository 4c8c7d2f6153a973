//! Warm sites, one per kind of kernel step, for the criterion benches and the
//! no-allocation test: each [`Scenario`] is a site in a prepared state plus the input whose
//! `step` is measured. Building them allocates (a small in-memory network); stepping a
//! clone of one does not.

use hilock_harness::Cluster;
use hilock_kernel::{DefaultSite, Input, LockId, Mode, Msg, MsgKind, NodeId, Output, Outputs};

/// Output buffer of the default site.
pub type DefaultOutputs = Outputs<Msg<8>, 26>;

/// The input of a scenario (owned, so a scenario can be stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `Input::Acquire`.
    Acquire(Mode),
    /// `Input::Release`.
    Release,
    /// `Input::Deliver` of a message from a node.
    Deliver(NodeId, Msg<8>),
}

/// A prepared site and the input to step it with.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Bench name.
    pub name: &'static str,
    /// What the step does, in thesis terms.
    pub what: &'static str,
    /// The site before the step.
    pub site: DefaultSite,
    /// The input.
    pub op: Op,
}

/// The lock all scenarios use.
pub const LOCK: LockId = LockId(0);

impl Scenario {
    /// The kernel input of this scenario.
    pub fn input(&self) -> Input<'_, Msg<8>> {
        match &self.op {
            Op::Acquire(mode) => Input::Acquire {
                lock: LOCK,
                mode: *mode,
            },
            Op::Release => Input::Release { lock: LOCK },
            Op::Deliver(from, msg) => Input::Deliver { from: *from, msg },
        }
    }

    /// Steps `site` (a clone of [`Scenario::site`]) with the scenario's input into `out`.
    pub fn step(&self, site: &mut DefaultSite, out: &mut DefaultOutputs) {
        out.clear();
        site.step(self.input(), out).expect("scenario step");
    }
}

/// Four sites (A = 0 holds the token; B, C, D point to A) in the one harness
/// ([`hilock_harness::Cluster`], FIFO channels): building a scenario routes and delivers
/// through it, so the prepared sites are in states the protocol reaches.
#[derive(Clone, Debug)]
pub struct Net(pub Cluster<DefaultSite>);

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

impl Net {
    /// A fresh system of four sites.
    pub fn new() -> Net {
        Net(Cluster::new(
            (0..4)
                .map(|i| DefaultSite::new(NodeId(i), NodeId(0)).expect("site"))
                .collect(),
        ))
    }

    /// Site `i`.
    pub fn site(&self, i: usize) -> &DefaultSite {
        self.0.site(NodeId(i as u16))
    }

    /// Steps site `i` with `input`; its messages are in flight.
    pub fn act(&mut self, i: usize, input: Input<'_, Msg<8>>) {
        self.0.input(NodeId(i as u16), input).expect("step");
    }

    /// Takes the oldest message in flight out of the network without delivering it.
    pub fn take(&mut self) -> (NodeId, NodeId, Msg<8>) {
        let (from, to) = self.0.oldest_channel().expect("a message in flight");
        let msg = self.0.lose(from, to, 0).expect("a message in flight");
        (from, to, msg)
    }

    /// Delivers every message in flight (and those that follow), oldest first.
    pub fn settle(&mut self) {
        self.0.settle(1000, |_, _, _, _| Ok(())).expect("settles");
    }
}

impl Default for Net {
    fn default() -> Self {
        Net::new()
    }
}

fn kinds(out: &[Output<Msg<8>>]) -> Vec<MsgKind> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { msg, .. } => Some(msg.kind()),
            _ => None,
        })
        .collect()
}

fn acq(mode: Mode) -> Input<'static, Msg<8>> {
    Input::Acquire { lock: LOCK, mode }
}

/// All scenarios, each checked to produce the step it is named after.
pub fn all() -> Vec<Scenario> {
    let mut v = Vec::new();

    // Rule 2: a non-token site requests R; the request goes to its parent.
    let net = Net::new();
    v.push(Scenario {
        name: "local_request_forward",
        what: "Acquire(R) at a non-token site: Rule 2 sends the request to the parent",
        site: net.site(B).clone(),
        op: Op::Acquire(Mode::R),
    });

    // Rule 3.2 for the token node's own request: granted without a message.
    v.push(Scenario {
        name: "local_request_grant",
        what: "Acquire(R) at the idle token site: granted locally, no message",
        site: net.site(A).clone(),
        op: Op::Acquire(Mode::R),
    });

    // Rule 3.2: the token node holds IR; B's IR request gets a copy.
    let mut net = Net::new();
    net.act(A, acq(Mode::IR));
    net.act(B, acq(Mode::IR));
    let (f, _, m) = net.take();
    v.push(Scenario {
        name: "copy_grant",
        what: "Deliver(Request IR) at the token site holding IR: Rule 3.2 grants a copy",
        site: net.site(A).clone(),
        op: Op::Deliver(f, m),
    });

    // Rule 5.1: A holds W with B's and C's W requests queued; releasing passes the token to
    // B with C's request piggybacked.
    let mut net = Net::new();
    net.act(A, acq(Mode::W));
    net.act(B, acq(Mode::W));
    net.act(C, acq(Mode::W));
    net.settle();
    v.push(Scenario {
        name: "token_transfer_with_queue",
        what: "Release(W) at the token site with two queued W requests: the token moves with the queue",
        site: net.site(A).clone(),
        op: Op::Release,
    });

    // Rule 5.2: B holds an R copy granted by A; releasing it tells the parent.
    let mut net = Net::new();
    net.act(A, acq(Mode::R));
    net.act(B, acq(Mode::R));
    net.settle();
    v.push(Scenario {
        name: "release_propagation",
        what: "Release(R) at a copy holder: Rule 5.2 sends Release to the parent",
        site: net.site(B).clone(),
        op: Op::Release,
    });
    let mut net2 = net.clone();
    net2.act(B, Input::Release { lock: LOCK });
    let (f, _, m) = net2.take();
    v.push(Scenario {
        name: "release_receive",
        what: "Deliver(Release Φ) at the parent: the child leaves the copyset",
        site: net2.site(A).clone(),
        op: Op::Deliver(f, m),
    });

    // Rule 6: A holds R and granted B a copy of R; C's W request is queued and A freezes
    // the grantable modes at its child B.
    net.act(C, acq(Mode::W));
    let (f, _, m) = net.take();
    v.push(Scenario {
        name: "freeze",
        what: "Deliver(Request W) at the token site with an R copy out: queue it and send Freeze to the child",
        site: net.site(A).clone(),
        op: Op::Deliver(f, m.clone()),
    });
    let mut net3 = net.clone();
    net3.act(A, Input::Deliver { from: f, msg: &m });
    let (f, _, m) = net3
        .0
        .messages()
        .find(|(_, _, m)| m.kind() == MsgKind::Freeze)
        .map(|(f, t, m)| (f, t, m.clone()))
        .expect("a freeze");
    v.push(Scenario {
        name: "freeze_receive",
        what: "Deliver(Freeze) at a child: it stops granting the frozen modes",
        site: net3.site(B).clone(),
        op: Op::Deliver(f, m),
    });

    // Check that each scenario does what its name says.
    for s in &v {
        let mut site = s.site.clone();
        let mut out = DefaultOutputs::new();
        s.step(&mut site, &mut out);
        let out: Vec<_> = out.into_iter().collect();
        let k = kinds(&out);
        let granted = out.iter().any(|o| matches!(o, Output::Granted { .. }));
        let ok = match s.name {
            "local_request_forward" => k == [MsgKind::Request],
            "local_request_grant" => k.is_empty() && granted,
            "copy_grant" => k == [MsgKind::Grant],
            "token_transfer_with_queue" => out.iter().any(|o| {
                matches!(o, Output::Send { msg: Msg::Token { queue, .. }, .. } if !queue.is_empty())
            }),
            "release_propagation" => k == [MsgKind::Release],
            "release_receive" => site.lock(LOCK).expect("lock").children().count() == 0,
            "freeze" => k.contains(&MsgKind::Freeze),
            "freeze_receive" => !site.lock(LOCK).expect("lock").frozen().is_empty(),
            _ => false,
        };
        assert!(ok, "scenario {} produced {:?}", s.name, out);
    }
    v
}
