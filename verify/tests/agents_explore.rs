use hilock_kernel::agent::LockMode::{Read as R, Write as W};
use hilock_kernel::agent::{AgentVariant, Req, Resolver, ServerVariant, SurrenderTo};
use hilock_models::agents::{AgentsModel, Delivery};

#[test]
fn explore() {
    let all = Req::All;
    let cfgs = vec![
        AgentsModel::new(
            "2x2 cycle",
            1,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 1, all)], false),
                (&[(&[2], W, 1, all), (&[1], W, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "3-cycle",
            1,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 1, all)], false),
                (&[(&[2], W, 1, all), (&[3], W, 1, all)], false),
                (&[(&[3], W, 1, all), (&[1], W, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "hier",
            1,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 1, all)], false),
                (&[(&[2], W, 1, all), (&[1, 5], W, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "upgrade",
            1,
            &[
                (&[(&[1], R, 1, all), (&[1], W, 1, all)], false),
                (&[(&[1], R, 1, all), (&[1], W, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "3 agents 2 locks",
            1,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 1, all)], false),
                (&[(&[2], W, 1, all), (&[1], W, 1, all)], false),
                (&[(&[1], R, 1, all), (&[2], R, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "two servers one lock",
            2,
            &[(&[(&[1], W, 3, all)], false), (&[(&[1], W, 3, all)], false)],
        )
        .unwrap(),
        AgentsModel::new(
            "two servers 2 locks",
            2,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 2, all)], false),
                (&[(&[2], W, 2, all), (&[1], W, 1, all)], false),
            ],
        )
        .unwrap(),
        AgentsModel::new(
            "abort",
            1,
            &[
                (&[(&[1], W, 1, all), (&[2], W, 1, all)], true),
                (&[(&[2], W, 1, all), (&[1], W, 1, all)], true),
            ],
        )
        .unwrap(),
    ];
    let variants = [
        ("seed", AgentVariant::SEED, ServerVariant::SEED),
        (
            "noversion",
            AgentVariant {
                check_versions: false,
                ..AgentVariant::SEED
            },
            ServerVariant::SEED,
        ),
        (
            "noack",
            AgentVariant {
                await_own_ack: false,
                ..AgentVariant::SEED
            },
            ServerVariant::SEED,
        ),
        (
            "waiter",
            AgentVariant {
                resolver: Resolver::LargestInCycle,
                ..AgentVariant::SEED
            },
            ServerVariant::SEED,
        ),
        (
            "swap",
            AgentVariant::SEED,
            ServerVariant {
                surrender: SurrenderTo::SwapWithNext,
            },
        ),
    ];
    let only = std::env::var("CFG").ok();
    for m in cfgs {
        if only.as_ref().is_some_and(|o| !m.name.contains(o.as_str())) {
            continue;
        }
        for (n, a, s) in variants {
            let name = format!("{} / {n}", m.name);
            let mm = m.clone().with_variants(a, s, &name);
            let r = mm.check();
            println!("{}", r.summary());
            if std::env::var("UNORD").is_ok() {
                let r = mm
                    .clone()
                    .with_delivery(Delivery::Unordered, &format!("{name} unordered"))
                    .check();
                println!("{}", r.summary());
            }
        }
    }
    let _ = R;
}
