//! Checks of the kernel paths that cargo-mutants' first pass showed no test looked at
//! (spec/MUTANTS.md): the re-delivery window of requests, the copyset's order, the token's
//! generation, and the counters of stale messages.

use hilock_kernel::{
    Frozen, Input, KernelError, LockId, Mode, Msg, NodeId, Output, Outputs, QueueEntry, Site,
};
use hilock_spec::Cluster;
use proptest::prelude::*;
use std::collections::BTreeSet;

type S = Site<4, 1, 4>;
type Out = Outputs<Msg<4>, 32>;
const L: LockId = LockId(0);

fn request(requester: u16, serial: u32, hop: u32) -> Msg<4> {
    Msg::Request {
        lock: L,
        entry: QueueEntry {
            requester: NodeId(requester),
            mode: Mode::IR,
            serial,
            prio: 0,
        },
        hop,
    }
}

/// The reference of the re-delivery window (`Peer::requests_seen`/`requests_window`): a
/// request numbered `hop` from a peer is new iff `hop ≥ 1`, it was not received before,
/// and it is newer than every request received from that peer or at most 32 behind the
/// newest (older ones cannot be told apart from re-deliveries and are refused).
#[derive(Default)]
struct Window {
    seen: BTreeSet<u32>,
}

impl Window {
    fn accept(&mut self, hop: u32) -> bool {
        let newest = self.seen.last().copied().unwrap_or(0);
        let new = hop >= 1 && !self.seen.contains(&hop) && (hop > newest || newest - hop <= 32);
        if new {
            self.seen.insert(hop);
        }
        new
    }
}

/// Delivers requests with the given hop numbers from node 1 to the token node 0 (requester
/// 2, fresh serials so that each one is a new request) and checks each against the
/// reference: a new one is handled, a re-delivered one is refused with `Duplicate` and
/// changes nothing.
fn window_run(hops: &[u32]) -> Result<(), TestCaseError> {
    let mut site = S::new(NodeId(0), NodeId(0)).unwrap();
    let mut reference = Window::default();
    for (i, &hop) in hops.iter().enumerate() {
        let before = site.clone();
        let msg = request(2, i as u32 + 1, hop);
        let mut out = Out::new();
        let r = site.step(
            Input::Deliver {
                from: NodeId(1),
                msg: &msg,
            },
            &mut out,
        );
        if reference.accept(hop) {
            prop_assert!(r.is_ok(), "hop {hop} after {:?}: {r:?}", &hops[..i]);
        } else {
            prop_assert_eq!(r.err(), Some(KernelError::Duplicate(L)), "hop {}", hop);
            prop_assert_eq!(&site, &before);
        }
    }
    Ok(())
}

#[test]
fn request_window_in_order_with_gaps_and_repeats() {
    window_run(&[1, 2, 2, 3, 5, 4, 4, 3, 9, 6, 7, 8, 9, 1, 0]).unwrap();
}

/// The window's edge: a request exactly 32 behind the newest is still told apart, one 33
/// behind is refused; a jump of exactly 32 keeps the old newest as received.
#[test]
fn request_window_edges() {
    window_run(&[1, 33, 1, 2, 34, 2]).unwrap();
    window_run(&[5, 37, 5, 4, 38, 6]).unwrap();
    window_run(&[1, 40, 8, 7, 8, 41, 9]).unwrap();
    window_run(&[3, 70, 3, 38, 37, 38]).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any order of delivery, re-deliveries included, over hop numbers 0..80.
    #[test]
    fn request_window_matches_the_reference(hops in proptest::collection::vec(0u32..80, 1..60)) {
        window_run(&hops)?;
    }
}

fn cluster() -> Cluster<S> {
    Cluster::new(
        (0..4)
            .map(|i| S::new(NodeId(i), NodeId(0)).unwrap())
            .collect(),
    )
}

fn acquire(c: &mut Cluster<S>, at: u16, mode: Mode) {
    c.input(NodeId(at), Input::Acquire { lock: L, mode })
        .unwrap();
    c.settle(1000, |c, _, _, _| Ok(c.check_safety()?)).unwrap();
}

fn release(c: &mut Cluster<S>, at: u16) {
    c.input(NodeId(at), Input::Release { lock: L }).unwrap();
    c.settle(1000, |c, _, _, _| Ok(c.check_safety()?)).unwrap();
}

fn node(c: &Cluster<S>, i: u16) -> &hilock_kernel::LockNode<4, 4> {
    c.site(NodeId(i)).lock(L).unwrap()
}

/// `LockNode::children` lists the copyset by node id, whatever order the children joined
/// in (the freezes of Rule 6 go out in that order, so runs are reproducible).
#[test]
fn copyset_is_listed_by_node_id() {
    let mut c = cluster();
    // Node 0 keeps the token by holding R; 3, 1, 2 get R copies in that order.
    acquire(&mut c, 0, Mode::R);
    for i in [3, 1, 2] {
        acquire(&mut c, i, Mode::R);
    }
    let ids: Vec<u16> = node(&c, 0).children().map(|(n, _)| n.0).collect();
    assert_eq!(ids, [1, 2, 3]);
    release(&mut c, 2);
    let ids: Vec<u16> = node(&c, 0).children().map(|(n, _)| n.0).collect();
    assert_eq!(ids, [1, 3]);
    acquire(&mut c, 2, Mode::IR);
    let kids: Vec<(u16, Mode)> = node(&c, 0).children().map(|(n, m)| (n.0, m)).collect();
    assert_eq!(kids, [(1, Mode::R), (2, Mode::IR), (3, Mode::R)]);
}

/// The token's generation counts its transfers, and only the token node has one.
#[test]
fn token_generation_counts_transfers() {
    let mut c = cluster();
    assert_eq!(node(&c, 0).token_generation(), Some(0));
    assert_eq!(node(&c, 1).token_generation(), None);
    acquire(&mut c, 1, Mode::W);
    assert_eq!(node(&c, 0).token_generation(), None);
    assert_eq!(node(&c, 1).token_generation(), Some(1));
    release(&mut c, 1);
    acquire(&mut c, 2, Mode::W);
    assert_eq!(node(&c, 1).token_generation(), None);
    assert_eq!(node(&c, 2).token_generation(), Some(2));
}

/// A re-sent grant for a request that is no longer pending is counted as stale and answered
/// with a release; every further one counts again.
#[test]
fn stale_grants_are_counted() {
    let mut c = cluster();
    acquire(&mut c, 0, Mode::R);
    acquire(&mut c, 1, Mode::R);
    let grant = |epoch| Msg::Grant {
        lock: L,
        entry: QueueEntry {
            requester: NodeId(1),
            mode: Mode::R,
            serial: 9,
            prio: 0,
        },
        epoch,
        recorded: Mode::R,
        frozen: Frozen::EMPTY,
        fence: 0,
    };
    let site = c.site_mut(NodeId(1));
    for k in 1..=2u32 {
        let mut out = Out::new();
        let msg = grant(50 + k);
        site.step(
            Input::Deliver {
                from: NodeId(0),
                msg: &msg,
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(site.lock(L).unwrap().stale().grants, k);
        assert!(
            matches!(
                out.as_slice(),
                [Output::Send {
                    to: NodeId(0),
                    msg: Msg::Release { owned: Mode::R, .. }
                }]
            ),
            "{out:?}"
        );
    }
}

fn deliver_to(site: &mut S, from: u16, msg: &Msg<4>) -> Result<Out, KernelError> {
    let mut out = Out::new();
    site.step(
        Input::Deliver {
            from: NodeId(from),
            msg,
        },
        &mut out,
    )?;
    Ok(out)
}

/// Freezes from a node that is not our parent, copies of our own requests that are no
/// longer pending, and a token answering no pending request are dropped and counted, one
/// by one (`LockNode::stale`).
#[test]
fn stale_freezes_requests_and_tokens_are_counted() {
    let mut site = S::new(NodeId(1), NodeId(0)).unwrap();
    let freeze = Msg::Freeze {
        lock: L,
        modes: Frozen::EMPTY,
    };
    for k in 1..=3 {
        let out = deliver_to(&mut site, 2, &freeze).unwrap();
        assert!(out.is_empty());
        assert_eq!(site.lock(L).unwrap().stale().freezes, k);
    }
    for k in 1..=3u32 {
        // A copy of a request of ours (node 1) that is not pending here.
        let out = deliver_to(&mut site, 2, &request(1, 7, k)).unwrap();
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(site.lock(L).unwrap().stale().requests, k);
    }
    let token = Msg::Token {
        lock: L,
        entry: QueueEntry {
            requester: NodeId(1),
            mode: Mode::W,
            serial: 3,
            prio: 0,
        },
        generation: 1,
        sender_owned: Mode::Phi,
        epoch: 1,
        frozen: Frozen::EMPTY,
        queue: heapless::Vec::new(),
        fence: 4,
    };
    deliver_to(&mut site, 0, &token).unwrap();
    let n = site.lock(L).unwrap();
    assert_eq!(n.stale().tokens, 1);
    assert!(n.has_token());
    assert_eq!(n.held(), Mode::Phi);
    assert_eq!(n.stale().freezes, 3);
    assert_eq!(n.stale().requests, 3);
}
