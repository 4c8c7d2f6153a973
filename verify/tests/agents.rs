//! Seed 001 (Wiger's deadlock-resolving agents): exhaustive Stateright checks of agents
//! and lock servers (model: `models/src/agents.rs`).

use hilock_kernel::agent::LockMode::{Read as R, Write as W};
use hilock_kernel::agent::Req;
use hilock_models::agents::{AgentsModel, AgentsReport};

fn run(m: &AgentsModel) -> AgentsReport {
    let r = m.check();
    println!("{}", r.summary());
    r
}

#[test]
fn explore() {
    let m = AgentsModel::new(
        "2 agents, /1 then /2 against /2 then /1, one server",
        1,
        &[
            (&[(&[1], W, 1, Req::All), (&[2], W, 1, Req::All)], false),
            (&[(&[2], W, 1, Req::All), (&[1], W, 1, Req::All)], false),
        ],
    )
    .unwrap();
    let r = run(&m);
    for p in &r.properties {
        if let Some(c) = &p.counterexample {
            println!("{}", serde_json::to_string_pretty(c).unwrap());
        }
    }
    let _ = R;
}
