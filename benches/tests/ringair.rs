//! Checks of the ring engine in the airline simulator (`hilock_benches::ringair`, its sites
//! `hilock_harness::engines::ring`): the messages of one uncontended lock are exactly the
//! network hops of the kernel's protocol (client request, answer, a write and an
//! acknowledgement per remote replica; nothing for the node's own server or replica), a
//! contended lock is refused and granted after the release through the poll input, and a
//! whole run checks mutual exclusion at every grant.

use hilock_benches::ringair;
use hilock_benches::token::{Config, Proto, ENTRIES};
use hilock_harness::engines::ring::{self, entry_key, RingMsg, RingSite, R};
use hilock_harness::Cluster;
use hilock_kernel::ring::View;
use hilock_kernel::{Input, LockId, Mode, NodeId, Output, Protocol};

fn cluster(n: usize) -> Cluster<RingSite> {
    Cluster::new((0..n).map(|i| RingSite::new(i, n).unwrap()).collect())
}

/// Delivers everything in flight; returns the messages sent and the nodes granted.
fn settle(c: &mut Cluster<RingSite>, sent: &mut u64, granted: &mut Vec<(NodeId, LockId)>) {
    while let Some((from, to)) = c.oldest_channel() {
        let mut g = None;
        c.deliver_with(from, to, |o: &Output<RingMsg>| match o {
            Output::Send { .. } => *sent += 1,
            Output::Granted { lock, .. } => g = Some(*lock),
            _ => {}
        })
        .unwrap()
        .unwrap();
        if let Some(l) = g {
            granted.push((to, l));
        }
        c.check_exclusive().unwrap();
    }
}

#[test]
fn an_uncontended_lock_costs_the_remote_hops_of_request_answer_and_replication() {
    let n = 5;
    let ring = ring::ring().unwrap();
    let view = View {
        epoch: 0,
        members: (1 << n) - 1,
    };
    for e in 0..ENTRIES {
        for me in 0..n {
            let mut c = cluster(n);
            let node = NodeId(me as u16);
            let key = entry_key(e);
            let primary = ring.lookup(view, key).unwrap();
            let replicas = ring.replicas(view, key, R + 1) & !(1 << primary.0);
            // Request + answer if the primary is another node; a write and an ack per
            // replica other than the primary itself (the replicas are never the primary).
            let remote_primary = u64::from(primary != node);
            let expected = 2 * remote_primary + 2 * replicas.count_ones() as u64;
            let mut sent = 0u64;
            let mut granted = Vec::new();
            let lock = LockId(e as u16);
            let step = c
                .input(
                    node,
                    Input::Acquire {
                        lock,
                        mode: Mode::W,
                    },
                )
                .unwrap();
            sent += step
                .outputs
                .iter()
                .filter(|o| matches!(o, Output::Send { .. }))
                .count() as u64;
            if step.granted() {
                granted.push((node, lock));
            }
            settle(&mut c, &mut sent, &mut granted);
            assert_eq!(granted, vec![(node, lock)], "entry {e} from {me}");
            assert_eq!(sent, expected, "entry {e} from {me}, primary {primary}");
            assert_eq!(c.site(node).held(lock).unwrap(), Mode::W);
            // The unlock costs the same.
            let step = c.input(node, Input::Release { lock }).unwrap();
            let mut sent = step
                .outputs
                .iter()
                .filter(|o| matches!(o, Output::Send { .. }))
                .count() as u64;
            settle(&mut c, &mut sent, &mut granted);
            assert_eq!(sent, expected, "unlock of entry {e} from {me}");
            let p = c.site(primary).server();
            assert_eq!(p.holder(key), None, "released at the primary");
        }
    }
}

#[test]
fn a_contended_lock_is_refused_polled_and_granted_after_the_release() {
    let mut c = cluster(4);
    let lock = LockId(3);
    let (a, b) = (NodeId(0), NodeId(1));
    let (mut sent, mut granted) = (0, Vec::new());
    let s = c
        .input(
            a,
            Input::Acquire {
                lock,
                mode: Mode::W,
            },
        )
        .unwrap();
    if s.granted() {
        granted.push((a, lock));
    }
    settle(&mut c, &mut sent, &mut granted);
    let s = c
        .input(
            b,
            Input::Acquire {
                lock,
                mode: Mode::W,
            },
        )
        .unwrap();
    assert!(!s.granted());
    settle(&mut c, &mut sent, &mut granted);
    assert_eq!(granted, vec![(a, lock)]);
    assert_eq!(
        c.site(b).wants_poll(),
        Some(lock),
        "refused, waits for a poll"
    );
    // Polling while a holds it: refused again.
    c.input(b, Input::Upgrade { lock }).unwrap();
    settle(&mut c, &mut sent, &mut granted);
    assert_eq!(c.site(b).wants_poll(), Some(lock));
    assert!(
        c.input(a, Input::Upgrade { lock }).is_err(),
        "nothing to poll"
    );
    c.input(a, Input::Release { lock }).unwrap();
    settle(&mut c, &mut sent, &mut granted);
    let s = c.input(b, Input::Upgrade { lock }).unwrap();
    if s.granted() {
        granted.push((b, lock));
    }
    settle(&mut c, &mut sent, &mut granted);
    assert_eq!(granted, vec![(a, lock), (b, lock)]);
    assert_eq!(c.site(b).polls(), 2);
}

#[test]
fn a_whole_run_checks_every_grant_and_counts_the_window() {
    let cfg = Config::thesis(Proto::Hilock, 6, 10.0, 5, 3);
    let st = ringair::run(&cfg).unwrap();
    assert_eq!(st.accesses, cfg.measured_accesses);
    assert!(st.checked_grants >= st.lock_requests, "{st:?}");
    assert!(st.lock_requests >= st.accesses);
    // Every lock request and every unlock in the window is at least answered.
    assert!(st.messages() > 0 && st.msgs[2] == st.msgs[3], "{st:?}");
    assert_eq!(ringair::run(&cfg).unwrap(), st, "deterministic");
    assert!(ringair::run(&Config::thesis(Proto::Hilock, 17, 10.0, 5, 3)).is_err());
}
