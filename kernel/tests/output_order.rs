//! What a driver must keep in order: one step can grant its own site and, after the
//! grant, send a message to a node that a release taken right after the grant also sends
//! to (the token moves on while this site keeps a mode, then the release tells the new
//! token node). A driver that acts on the grant first — a caller that gave up is released
//! at once — would put the release's message on the link ahead of the first step's,
//! which a FIFO link never does in the harness. The runtime therefore sends all of a
//! step's messages before it acts on its grants (`runtime/src/token/core.rs`, `act`), and
//! trace validation relies on it (`docs/verification.md`, "Trace validation").

use hilock_harness::Cluster;
use hilock_kernel::{Input, LockId, Mode, NodeId, Output, Site};

type S = Site<4, 1, 4>;

fn sends(outputs: &[Output<<S as hilock_kernel::Protocol>::Msg>]) -> Vec<NodeId> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send { to, .. } => Some(*to),
            _ => None,
        })
        .collect()
}

#[test]
fn a_release_right_after_a_grant_can_address_a_node_the_granting_step_sent_to_after_it() {
    let lock = LockId(0);
    let modes = [Mode::IR, Mode::R, Mode::U, Mode::IW, Mode::W];
    let mut seed: u64 = 12_345;
    let mut rnd = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for _ in 0..50 {
        let mut c: Cluster<S> = Cluster::star(4, NodeId(0)).unwrap();
        for _ in 0..200 {
            let busy = c.busy_channels();
            let step = if rnd(3) < 2 && !busy.is_empty() {
                let (f, t) = busy[rnd(busy.len() as u64) as usize];
                match c.deliver(f, t) {
                    Some((_, Ok(s))) => s,
                    _ => continue,
                }
            } else {
                let n = NodeId(rnd(4) as u16);
                let k = c.site(n).lock(lock).unwrap();
                let input = match (k.held(), k.pending_mode()) {
                    (Mode::Phi, Mode::Phi) => Input::Acquire {
                        lock,
                        mode: modes[rnd(5) as usize],
                    },
                    (_, Mode::Phi) => Input::Release { lock },
                    _ => continue,
                };
                c.input(n, input).unwrap()
            };
            c.check_safety().unwrap();
            let Some(g) = step
                .outputs
                .iter()
                .position(|o| matches!(o, Output::Granted { .. }))
            else {
                continue;
            };
            let after = sends(&step.outputs[g + 1..]);
            if after.is_empty() {
                continue;
            }
            let mut then = c.clone();
            let release = then.input(step.node, Input::Release { lock }).unwrap();
            if sends(&release.outputs).iter().any(|t| after.contains(t)) {
                return;
            }
        }
    }
    panic!("no step granted and then sent to a node its release would address");
}
