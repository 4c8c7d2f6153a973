//! `hilock_runtime::membership` against a real etcd (feature `etcd`): every test starts its own
//! single-member etcd on free 127.0.0.1 ports with a temporary data directory
//! (`support/etcd.rs`, which installs Debian's etcd-server where it is missing and it can)
//! and skips with one printed line where etcd cannot be had. Every test body runs under a
//! time bound: a hang is a failure.
//!
//! `cargo test -p hilock-runtime --features etcd --test etcd_membership`

#[path = "support/etcd.rs"]
mod etcd;
#[path = "support/ports.rs"]
mod ports;

use std::time::Duration;

use hilock_runtime::membership::{
    EpochView, Error, EtcdOptions, LeaseState, LostReason, Member, MemberView, Membership,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// The smallest TTL a default single-member etcd grants (it raises smaller ones).
const TTL_S: u32 = 2;

fn opts(addr: &str, timeout: Duration) -> EtcdOptions {
    EtcdOptions {
        endpoints: vec![addr.to_string()],
        ttl_s: TTL_S,
        grace: Duration::from_millis(500),
        rho_ppm: 100,
        timeout,
    }
}

fn m(id: u16, incarnation: u64) -> Member {
    Member { id, incarnation }
}

/// `f` on a 2-thread runtime, failing if it takes longer than `limit`.
fn run<F: std::future::Future<Output = ()>>(limit: Duration, f: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(limit, f)
                .await
                .expect("test body did not end within its bound")
        })
}

/// Waits (at most `within`) until the member view satisfies `p`; returns when it did.
async fn view_until(
    w: &mut watch::Receiver<MemberView>,
    within: Duration,
    p: impl FnMut(&MemberView) -> bool,
) -> Instant {
    tokio::time::timeout(within, w.wait_for(p))
        .await
        .expect("member view not reached in time")
        .expect("member watch ended");
    Instant::now()
}

fn ids(v: &MemberView) -> Vec<u16> {
    v.members.keys().copied().collect()
}

/// Two nodes join and see each other; a second incarnation of a member is refused while
/// the first one's lease lives; a node that leaves is seen gone, and its id can join again.
#[test]
fn two_nodes_join_and_see_each_other() {
    let Some(etcd) = etcd::start_healthy("two_nodes_join_and_see_each_other") else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(2));
    run(Duration::from_secs(30), async {
        let a = Membership::join(&o, "c", m(0, 10)).await.unwrap();
        let b = Membership::join(&o, "c", m(1, 11)).await.unwrap();
        assert!(a.ttl() >= Duration::from_secs(u64::from(TTL_S)));
        for n in [&a, &b] {
            let mut w = n.members();
            view_until(&mut w, Duration::from_secs(5), |v| {
                v.connected && ids(v) == [0, 1]
            })
            .await;
            assert_eq!(w.borrow().members[&0], m(0, 10));
            assert_eq!(w.borrow().members[&1], m(1, 11));
            let listed = n.list_members().await.unwrap();
            assert_eq!(
                listed.values().copied().collect::<Vec<_>>(),
                [m(0, 10), m(1, 11)]
            );
        }
        // Node 1 again, as a new incarnation, while the old one is a member: refused.
        let e = Membership::join(&o, "c", m(1, 12)).await.unwrap_err();
        let Error::IdInUse {
            id: 1,
            incarnation: 11,
            left: Some(left),
        } = e
        else {
            panic!("refused naming the live run and its lease's time left: {e:?}")
        };
        assert!(
            left <= b.ttl() + Duration::from_secs(1),
            "{left:?} left of a TTL of {:?}",
            b.ttl()
        );
        assert!(
            e.to_string()
                .contains(&format!("ends within {} s", left.as_secs())),
            "{e}"
        );
        assert_eq!(a.list_members().await.unwrap().len(), 2);
        // Another cluster's prefix is another member list.
        let other = Membership::join(&o, "other", m(1, 13)).await.unwrap();
        assert_eq!(other.list_members().await.unwrap().len(), 1);
        // Node 1 leaves (its lease revoked): node 0 sees it go at once, and node 1 can
        // come back as a new incarnation.
        let mut bl = b.lease();
        b.leave().await.unwrap();
        assert_eq!(*bl.borrow_and_update(), LeaseState::Lost(LostReason::Left));
        let mut w = a.members();
        view_until(&mut w, Duration::from_secs(2), |v| ids(v) == [0]).await;
        let _b2 = Membership::join(&o, "c", m(1, 12)).await.unwrap();
        view_until(&mut w, Duration::from_secs(2), |v| {
            v.members.get(&1) == Some(&m(1, 12))
        })
        .await;
    });
}

/// A member that joins and leaves while a watcher does not look at its view is gone from
/// `members` at the watcher's next look but is in `seen`, with the first run of its id:
/// a new run of that id that joins later is in `members`, the first run stays in `seen`.
#[test]
fn a_member_that_joined_and_left_between_two_looks_is_seen() {
    let Some(etcd) = etcd::start_healthy("a_member_that_joined_and_left_between_two_looks_is_seen")
    else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(2));
    run(Duration::from_secs(30), async {
        let a = Membership::join(&o, "c", m(0, 10)).await.unwrap();
        let mut w = a.members();
        view_until(&mut w, Duration::from_secs(5), |v| {
            v.connected && ids(v) == [0]
        })
        .await;
        // Node 1 joins and leaves, then node 2 joins, without a look at node 0's view.
        let b = Membership::join(&o, "c", m(1, 11)).await.unwrap();
        b.leave().await.unwrap();
        let _c = Membership::join(&o, "c", m(2, 20)).await.unwrap();
        view_until(&mut w, Duration::from_secs(2), |v| ids(v) == [0, 2]).await;
        {
            let v = w.borrow();
            assert_eq!(
                v.seen.values().copied().collect::<Vec<_>>(),
                [m(0, 10), m(1, 11), m(2, 20)],
                "node 1's run was seen"
            );
        }
        let _b2 = Membership::join(&o, "c", m(1, 12)).await.unwrap();
        view_until(&mut w, Duration::from_secs(2), |v| {
            v.members.get(&1) == Some(&m(1, 12))
        })
        .await;
        assert_eq!(
            w.borrow().seen[&1],
            m(1, 11),
            "the first run of node 1 stays"
        );
    });
}

/// Node 1 reaches etcd through a proxy and is cut off: its own "lease lost" fires (within
/// its local lease) before node 0 sees it leave (within TTL + 1 s of the cut); the
/// leadership node 1 held passes to node 0; node 1 can no longer install or lead.
#[test]
fn a_node_cut_from_etcd_loses_its_lease_before_the_others_see_it_leave() {
    let Some(etcd) =
        etcd::start_healthy("a_node_cut_from_etcd_loses_its_lease_before_the_others_see_it_leave")
    else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(1));
    run(Duration::from_secs(40), async {
        let proxy = etcd::Proxy::start(&etcd.addr).await;
        let a = Membership::join(&o, "c", m(0, 1)).await.unwrap();
        let ob = EtcdOptions {
            endpoints: vec![proxy.addr.clone()],
            ..o.clone()
        };
        let b = Membership::join(&ob, "c", m(1, 2)).await.unwrap();
        let mut w = a.members();
        view_until(&mut w, Duration::from_secs(5), |v| ids(v) == [0, 1]).await;
        assert!(b.lead().await.unwrap().mine);
        assert_eq!(a.lead().await.unwrap().member, m(1, 2));
        // The keep-alive holds the lease past its TTL.
        tokio::time::sleep(b.ttl() + Duration::from_millis(500)).await;
        assert!(!b.lease().borrow().is_lost(), "{:?}", *b.lease().borrow());
        assert_eq!(ids(&w.borrow()), [0, 1]);

        let ttl = b.ttl();
        let local = b.local_lease();
        let mut bl = b.lease();
        let t0 = Instant::now();
        proxy.cut();
        let lost = async {
            bl.wait_for(LeaseState::is_lost).await.unwrap();
            (Instant::now(), *bl.borrow())
        };
        let left = view_until(&mut w, ttl + Duration::from_secs(3), |v| ids(v) == [0]);
        let ((lost_at, state), left_at) = tokio::join!(lost, left);
        let (lost_after, left_after) = (lost_at - t0, left_at - t0);
        eprintln!(
            "TTL {ttl:?}, local lease {local:?}: node 1 lost its lease {lost_after:?} after the cut, node 0 saw it leave {left_after:?} after the cut"
        );
        assert_eq!(state, LeaseState::Lost(LostReason::NotRenewed));
        assert!(
            lost_after <= local + Duration::from_millis(200),
            "{lost_after:?}"
        );
        assert!(left_after <= ttl + Duration::from_secs(1), "{left_after:?}");
        assert!(
            lost_at < left_at,
            "node 0 saw node 1 leave before node 1 knew"
        );
        // Lost stays lost; a node without its lease installs and leads nothing.
        let base = a.current_epoch().await.unwrap();
        assert_eq!(
            b.install_epoch(&base, &[m(1, 2)], b"b").await,
            Err(Error::LeaseLost)
        );
        assert_eq!(b.lead().await, Err(Error::LeaseLost));
        // Node 1's leadership ended with its lease: node 0 takes over.
        let l = a.lead().await.unwrap();
        assert!(l.mine && l.member == m(0, 1));
        assert!(bl.borrow().is_lost());
    });
}

/// Two installers read epoch e and install e + 1 at the same time, 50 times: each time
/// exactly one wins, the other is refused with `StaleEpoch`, and etcd holds the winner's
/// members and plan.
#[test]
fn concurrent_installers_of_the_same_epoch_exactly_one_wins() {
    let Some(etcd) =
        etcd::start_healthy("concurrent_installers_of_the_same_epoch_exactly_one_wins")
    else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(2));
    run(Duration::from_secs(60), async {
        let a = Membership::join(&o, "c", m(0, 1)).await.unwrap();
        let b = Membership::join(&o, "c", m(1, 2)).await.unwrap();
        let mut wins = [0u32; 2];
        for round in 0..50u32 {
            let (va, vb) = tokio::join!(a.current_epoch(), b.current_epoch());
            let (va, vb) = (va.unwrap(), vb.unwrap());
            assert_eq!((va.epoch, vb.epoch), (round, round));
            let pa = format!("plan of node 0, round {round}");
            let pb = format!("plan of node 1, round {round}");
            let (ma, mb) = ([m(0, 1), m(1, 2)], [m(1, 2)]);
            let (ra, rb) = tokio::join!(
                a.install_epoch(&va, &ma, pa.as_bytes()),
                b.install_epoch(&vb, &mb, pb.as_bytes()),
            );
            let refused = Err(Error::StaleEpoch {
                tried: round + 1,
                current: round + 1,
            });
            let (winner, plan, members): (usize, &str, Vec<Member>) = match (&ra, &rb) {
                (Ok(_), r) if *r == refused => (0, &pa, vec![m(0, 1), m(1, 2)]),
                (r, Ok(_)) if *r == refused => (1, &pb, vec![m(1, 2)]),
                _ => panic!("round {round}: not exactly one winner: {ra:?} / {rb:?}"),
            };
            wins[winner] += 1;
            let now: EpochView = a.current_epoch().await.unwrap();
            assert_eq!(now.epoch, round + 1);
            assert_eq!(now.plan, plan.as_bytes());
            assert_eq!(now.members, members);
        }
        eprintln!("50 rounds: node 0 won {}, node 1 won {}", wins[0], wins[1]);
    });
}

/// An install based on an epoch that is no longer the installed one is refused and
/// changes nothing; one based on the installed epoch succeeds.
#[test]
fn a_stale_epoch_install_is_refused() {
    let Some(etcd) = etcd::start_healthy("a_stale_epoch_install_is_refused") else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(2));
    run(Duration::from_secs(30), async {
        let a = Membership::join(&o, "c", m(0, 1)).await.unwrap();
        let b = Membership::join(&o, "c", m(1, 2)).await.unwrap();
        let v0 = b.current_epoch().await.unwrap();
        assert_eq!((v0.epoch, v0.revision), (0, 0));
        let v1 = a
            .install_epoch(&v0, &[m(1, 2), m(0, 1)], b"one")
            .await
            .unwrap();
        assert_eq!(v1.epoch, 1);
        assert_eq!(v1.members, [m(0, 1), m(1, 2)]);
        assert_eq!(
            b.install_epoch(&v0, &[m(1, 2)], b"stale").await,
            Err(Error::StaleEpoch {
                tried: 1,
                current: 1
            })
        );
        assert_eq!(b.current_epoch().await.unwrap(), v1);
        let v2 = b
            .install_epoch(&b.current_epoch().await.unwrap(), &[m(1, 2)], b"two")
            .await
            .unwrap();
        assert_eq!(v2.epoch, 2);
        assert_eq!(
            a.install_epoch(&v1, &[m(0, 1)], b"stale again").await,
            Err(Error::StaleEpoch {
                tried: 2,
                current: 2
            })
        );
        let now = a.current_epoch().await.unwrap();
        assert_eq!((now.epoch, &now.plan[..]), (2, &b"two"[..]));
    });
}

/// etcd paused (it keeps its sockets, answers nothing), then killed: every call fails
/// with `Unreachable` within the timeout, the member view says it is not connected, and
/// the node's lease is lost within its local lease.
#[test]
fn etcd_paused_or_stopped_gives_typed_errors_within_the_timeout() {
    let Some(mut etcd) =
        etcd::start_healthy("etcd_paused_or_stopped_gives_typed_errors_within_the_timeout")
    else {
        return;
    };
    let timeout = Duration::from_secs(1);
    let bound = timeout + Duration::from_millis(300);
    let o = opts(&etcd.addr, timeout);
    run(Duration::from_secs(60), async {
        let a = Membership::join(&o, "c", m(0, 1)).await.unwrap();
        let base = a.current_epoch().await.unwrap();
        let mut w = a.members();
        view_until(&mut w, Duration::from_secs(5), |v| v.connected).await;
        let al = a.lease();
        let local = a.local_lease();
        let unreachable = |r: &Error| matches!(r, Error::Unreachable { .. });

        // When the lease is seen lost, measured by a task of its own.
        let mut lost_at = Some(tokio::spawn({
            let mut al = a.lease();
            async move {
                al.wait_for(LeaseState::is_lost).await.unwrap();
                Instant::now()
            }
        }));
        etcd.pause();
        let t0 = Instant::now();
        for stopped in [false, true] {
            let what = if stopped { "stopped" } else { "paused" };
            let t = Instant::now();
            let e = a.current_epoch().await.unwrap_err();
            assert!(
                unreachable(&e) && t.elapsed() <= bound,
                "{what}: {e} after {:?}",
                t.elapsed()
            );
            let t = Instant::now();
            let e = a.list_members().await.unwrap_err();
            assert!(
                unreachable(&e) && t.elapsed() <= bound,
                "{what}: {e} after {:?}",
                t.elapsed()
            );
            if !al.borrow().is_lost() {
                let t = Instant::now();
                let e = a.install_epoch(&base, &[m(0, 1)], b"x").await.unwrap_err();
                assert!(unreachable(&e) && t.elapsed() <= bound, "{what}: {e}");
                let t = Instant::now();
                let e = a.lead().await.unwrap_err();
                assert!(unreachable(&e) && t.elapsed() <= bound, "{what}: {e}");
            }
            let t = Instant::now();
            let e = Membership::join(&o, "c", m(1, 2)).await.unwrap_err();
            assert!(
                unreachable(&e) && t.elapsed() <= bound,
                "{what}: {e} after {:?}",
                t.elapsed()
            );
            eprintln!("etcd {what}: {e}");
            if !stopped {
                // The lease is lost within the local lease of the last renewal, which
                // was sent before the pause.
                let lost_after = lost_at.take().unwrap().await.unwrap() - t0;
                eprintln!(
                    "lease lost {lost_after:?} after etcd was paused (local lease {local:?})"
                );
                assert!(
                    lost_after <= local + Duration::from_millis(200),
                    "{lost_after:?}"
                );
                assert_eq!(*al.borrow(), LeaseState::Lost(LostReason::NotRenewed));
                assert_eq!(a.lead().await, Err(Error::LeaseLost));
                view_until(&mut w, timeout + Duration::from_secs(2), |v| !v.connected).await;
                etcd.stop();
            }
        }
    });
}

/// A lease revoked at etcd behind the node's back (here through etcd's JSON gateway) is
/// lost at the node's next renewal, with the reason `Expired`, and its member key is gone.
#[test]
fn a_lease_revoked_at_etcd_is_lost_at_the_next_renewal() {
    let Some(etcd) = etcd::start_healthy("a_lease_revoked_at_etcd_is_lost_at_the_next_renewal")
    else {
        return;
    };
    let o = opts(&etcd.addr, Duration::from_secs(2));
    run(Duration::from_secs(30), async {
        let a = Membership::join(&o, "c", m(0, 1)).await.unwrap();
        let b = Membership::join(&o, "c", m(1, 2)).await.unwrap();
        let mut w = a.members();
        view_until(&mut w, Duration::from_secs(5), |v| ids(v) == [0, 1]).await;
        let mut bl = b.lease();
        let t0 = Instant::now();
        let body = format!("{{\"ID\": {}}}", b.lease_id());
        let r = tokio::task::block_in_place(|| etcd.post("/v3/lease/revoke", &body)).unwrap();
        assert!(
            r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200"),
            "{r}"
        );
        view_until(&mut w, Duration::from_secs(2), |v| ids(v) == [0]).await;
        // The next renewal is at most a third of the local lease away.
        tokio::time::timeout(
            b.local_lease() / 3 + Duration::from_millis(500),
            bl.wait_for(LeaseState::is_lost),
        )
        .await
        .expect("revoked lease not seen lost in time")
        .unwrap();
        assert_eq!(*bl.borrow(), LeaseState::Lost(LostReason::Expired));
        eprintln!(
            "revoked lease seen lost {:?} after the revoke",
            t0.elapsed()
        );
        assert_eq!(b.lead().await, Err(Error::LeaseLost));
    });
}

/// With two endpoints of which the first is a closed port (an etcd member that is down),
/// every join succeeds and the lease is renewed through the one that answers for three
/// TTLs (`docs/faults.md`, "With etcd membership"). etcd-client alone sends each call to
/// either endpoint: most joins failed with "Connection refused".
#[test]
fn a_down_endpoint_among_several_is_not_used() {
    let Some(etcd) = etcd::start_healthy("a_down_endpoint_among_several_is_not_used") else {
        return;
    };
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut o = opts(&etcd.addr, Duration::from_secs(2));
    o.endpoints.insert(0, down);
    run(Duration::from_secs(60), async {
        for id in 0..6 {
            let j = Membership::join(&o, "down", m(id, 100 + u64::from(id)))
                .await
                .unwrap_or_else(|e| panic!("join {id}: {e}"));
            j.leave().await.unwrap();
        }
        let a = Membership::join(&o, "down", m(7, 7)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3 * u64::from(TTL_S))).await;
        assert!(!a.lease().borrow().is_lost(), "{:?}", *a.lease().borrow());
        a.leave().await.unwrap();
    });
}

/// Test processes that run at the same time (as under `cargo nextest`) never hand out the
/// same port, so no test talks to another test's etcd (`support/ports.rs`): a port whose
/// reservation names a running process (here pid 1) is not handed out; one whose process
/// has exited is taken over.
#[test]
fn a_port_reserved_by_a_running_process_is_not_handed_out() {
    let port = ports::free_port();
    let file = std::env::temp_dir()
        .join("hilock-test-ports")
        .join(port.to_string());
    std::fs::write(&file, "1").unwrap();
    assert!(!ports::reserve(port), "port {port} reserved by pid 1");
    // Above Linux's largest pid (2^22): no such process.
    std::fs::write(&file, "4194305").unwrap();
    assert!(ports::reserve(port), "port {port}: its owner has exited");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        std::process::id().to_string()
    );
}
