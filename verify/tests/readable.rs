//! Every action of every model reads as words in the Stateright Explorer: a breadth-first
//! walk of a small run of each model (base, inversion, tree, agents, bakery, ring) renders every
//! enabled action with `Model::format_action` and `Model::format_step`, and no text is the
//! action's `Debug` form or contains a bare enum variant with indices (`Run(0)`,
//! `Deliver { from: 1, .. }`, `Deliver(1, 0)`). The sequence diagram (`Model::as_svg`) of
//! a path draws one lane per site and an arrow or dot per step.

use hilock_kernel::agents::LockMode::{Read as R, Write as W};
use hilock_kernel::agents::Req;
use hilock_kernel::tree::TreeVariant;
use hilock_models::agents::AgentsModel;
use hilock_models::bakery::{BakeryModel, BakerySystem};
use hilock_models::inversion::{Flavor, InversionConfig};
use hilock_models::token::ModelConfig;
use hilock_models::tree::TreeModel;
use stateright::{Model, Path};
use std::collections::{HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;

/// The first piece of `s` shaped like a `Debug`-printed enum variant with indices:
/// `Name(3`, `Name { field: `.
fn debug_shape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts_word =
            b[i].is_ascii_uppercase() && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
        if !starts_word {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
            j += 1;
        }
        let rest = &s[j..];
        let tuple = rest.starts_with('(') && rest[1..].starts_with(|c: char| c.is_ascii_digit());
        let record = rest.starts_with(" { ") && {
            let r = &rest[3..];
            let k = r
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(r.len());
            k > 0 && r[k..].starts_with(':')
        };
        if tuple || record {
            return Some(s[i..(j + 12).min(s.len())].to_string());
        }
        i = j;
    }
    None
}

#[test]
fn the_detector_catches_debug_shapes() {
    for bad in [
        "Run(0)",
        "Deliver { from: 1, to: 0, index: 0 }",
        "Deliver(1, 0)",
        "x Start(2)",
        "Step { user: 1 }",
    ] {
        assert!(debug_shape(bad).is_some(), "{bad}");
    }
    for good in [
        "n1 acquire R",
        "n2 → n0 request W p=3 for n1 (forwarded)",
        "u0: InsertUser(t01) starts",
        "A2 → S0: request /1 R",
        "c1: acquire",
    ] {
        assert_eq!(debug_shape(good), None, "{good}");
    }
}

/// Walks up to `limit` states breadth-first and checks the text of every enabled action;
/// returns the texts seen. Panics on the first unreadable one.
fn walk<M>(m: &M, limit: usize) -> Vec<String>
where
    M: Model,
    M::State: Hash + Eq + Clone + Debug,
    M::Action: Clone + Debug,
{
    let mut seen = HashSet::new();
    let mut queue: VecDeque<M::State> = m.init_states().into_iter().collect();
    let mut texts = Vec::new();
    while let Some(st) = queue.pop_front() {
        if seen.len() >= limit {
            break;
        }
        if !seen.insert(st.clone()) {
            continue;
        }
        let mut actions = Vec::new();
        m.actions(&st, &mut actions);
        for a in actions {
            let text = m.format_action(&a);
            let debug = format!("{a:?}");
            assert_ne!(text, debug, "action rendered as its Debug form");
            assert!(
                debug_shape(&text).is_none(),
                "action text '{text}' has a bare enum variant: {:?}",
                debug_shape(&text)
            );
            if let Some(step) = m.format_step(&st, a.clone()) {
                let first = step.lines().next().unwrap_or("");
                assert!(
                    debug_shape(first).is_none(),
                    "step text '{first}' has a bare enum variant"
                );
            }
            if let Some(next) = m.next_state(&st, a) {
                queue.push_back(next);
            }
            texts.push(text);
        }
    }
    assert!(
        texts.len() > 10,
        "the walk saw only {} actions",
        texts.len()
    );
    texts
}

/// The sequence diagram of the first `n` steps of the path that always takes the last
/// enabled action (which is a delivery where one is enabled): `lanes` lanes, at least one
/// arrow.
fn diagram<M>(m: &M, n: usize, lanes: &[&str]) -> String
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let init = m.init_states()[0].clone();
    let mut st = init.clone();
    let mut taken = Vec::new();
    for _ in 0..n {
        let mut actions = Vec::new();
        m.actions(&st, &mut actions);
        let Some(a) = actions.pop() else { break };
        let Some(next) = m.next_state(&st, a.clone()) else {
            break;
        };
        st = next;
        taken.push(a);
    }
    let path = Path::from_actions(m, init, taken.iter()).expect("a path of the model");
    let svg = m.as_svg(path).expect("an SVG");
    for l in lanes {
        assert!(svg.contains(&format!(">{l}</text>")), "lane {l} in {svg}");
    }
    svg
}

#[test]
fn base_model_actions_read_like_the_thesis() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/configs/star3-r-w.json"),
    )
    .expect("example configuration");
    let m = ModelConfig::from_json(&text)
        .expect("configuration")
        .into_model()
        .expect("model");
    let texts = walk(&m, 400);
    assert!(texts.iter().any(|t| t.contains(" acquire ")), "{texts:?}");
    assert!(
        texts.iter().any(|t| t.contains(" → n0 request ")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains(" grant ")), "{texts:?}");
    let svg = diagram(&m, 6, &["n0", "n1", "n2"]);
    assert!(svg.contains("class=\"msg\""), "an arrow: {svg}");
}

#[test]
fn inversion_model_actions_read_like_the_thesis() {
    let m = InversionConfig {
        flavor: Flavor::Pip,
        mediums: 1,
        rounds: 1,
        bound: 0,
        blocking: None,
    };
    let texts = walk(&m, 400);
    assert!(
        texts.iter().any(|t| t.starts_with("A acquire R on L_i")),
        "{texts:?}"
    );
    diagram(&m, 6, &["A", "D", "M2"]);
}

#[test]
fn tree_model_actions_read_like_the_slides() {
    let m = TreeModel::new("height 2", 2, &[&["00"], &["*"]], 1, TreeVariant::HILOCK)
        .expect("configuration");
    let texts = walk(&m, 400);
    assert!(
        texts.iter().any(|t| t.contains("InsertUser(t00)")),
        "{texts:?}"
    );
    diagram(&m, 6, &["u0", "u1"]);
}

#[test]
fn agents_model_actions_read_like_the_seed() {
    let m = AgentsModel::new(
        "2-cycle",
        1,
        &[
            (&[(&[1], W, 1, Req::All), (&[2], W, 1, Req::All)], false),
            (&[(&[2], W, 1, Req::All), (&[1], R, 1, Req::All)], false),
        ],
    )
    .expect("configuration");
    let texts = walk(&m, 400);
    assert!(texts.iter().any(|t| t.contains(" → S0: ")), "{texts:?}");
    let svg = diagram(&m, 6, &["A0", "A1", "S0"]);
    assert!(svg.contains("class=\"msg\""), "an arrow: {svg}");
}

#[test]
fn bakery_model_actions_read_like_the_seed() {
    let m = BakerySystem::<1, 3>(BakeryModel::lock(
        "corrected, no leases, 2 clients, R1 W3",
        2,
        1,
        1,
        3,
        hilock_kernel::bakery::Variant {
            leases: false,
            ..hilock_kernel::bakery::Variant::HILOCK
        },
    ));
    let texts = walk(&m, 400);
    assert!(
        texts.iter().any(|t| t.starts_with("c1: acquire")),
        "{texts:?}"
    );
    let svg = diagram(&m, 8, &["c1", "c2", "r0"]);
    assert!(svg.contains("class=\"msg\""), "an arrow: {svg}");
}

#[test]
fn ring_model_actions_read_like_the_paper() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models/configs/ring-r1-restart.json"),
    )
    .expect("example configuration");
    let hilock_models::open::OtherConfig::Ring(m) =
        serde_json::from_str(&text).expect("configuration")
    else {
        panic!("a ring configuration");
    };
    let texts = walk(&m, 400);
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("c1 → n") && t.contains(": Request")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t == "c1: asks for its next lock operation"),
        "{texts:?}"
    );
    // A saved ring trace (its steps are the actions' Rust expressions) replays, through
    // the configuration it embeds, as words and as a diagram with arrows.
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../spec/counterexamples/ring/ring-late-duplicate-locks-for-nobody.json");
    let drawn = hilock_models::open::diagram_of(&std::fs::read_to_string(file).expect("trace"))
        .expect("it draws");
    assert!(!drawn.steps.is_empty());
    for step in &drawn.steps {
        assert!(debug_shape(step).is_none(), "step '{step}' reads as Rust");
    }
    assert!(
        drawn.diagram.lanes.iter().any(|l| l == "c1"),
        "{:?}",
        drawn.diagram.lanes
    );
    assert!(drawn.title.starts_with("ring — "), "{}", drawn.title);
}
