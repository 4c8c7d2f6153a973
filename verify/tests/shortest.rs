//! The shortest counterexample of a base-model configuration
//! (`hilock_models::check::shortest_failure`) against the one the check reports: the
//! literal release race (`models/configs/release-race-literal.json`) violates P1 after 18
//! steps at the least, where the check's counterexample takes 22. Stateright's own
//! breadth-first search, bounded to fewer steps, confirms that none is shorter.

use hilock_models::check::{check, shortest_failure};
use hilock_models::token::ModelConfig;
use stateright::{Checker, Model};

const P1: &str = "P1 mutual exclusion";

#[test]
fn the_literal_release_race_violates_p1_after_18_steps_at_the_least() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models/configs/release-race-literal.json"),
    )
    .expect("configuration");
    let cfg = ModelConfig::from_json(&text).expect("configuration");
    let m = cfg.clone().into_model_with::<1>().expect("model");
    let r = check(&cfg, |_, _, _| {}).expect("check");
    let reported = r
        .property(P1)
        .and_then(|p| p.counterexample.as_ref())
        .expect("P1 fails")
        .steps
        .len();
    assert_eq!(reported, 22, "the check's counterexample");

    let short = shortest_failure(&m, P1, reported).expect("a violation within 22 steps");
    let steps = short.clone().into_actions();
    assert_eq!(steps.len(), 18, "the shortest counterexample");
    let p1 = m
        .properties()
        .into_iter()
        .find(|p| p.name == P1)
        .expect("P1");
    assert!(
        !(p1.condition)(&m, short.last_state()),
        "it ends in a violation"
    );
    // The same run every time.
    let again = shortest_failure(&m, P1, reported).expect("again");
    assert!(again.into_actions() == steps, "a different shortest run");
    // No shorter one: a bound below 18 finds none, and Stateright's BFS limited to fewer
    // than 18 steps meets no violation (its depth limit counts the initial state).
    assert!(shortest_failure(&m, P1, 17).is_none());
    let below = m
        .clone()
        .checker()
        .target_max_depth(18 + 1)
        .spawn_bfs()
        .join();
    assert!(
        below.discovery(P1).is_none(),
        "a P1 violation in fewer than 18 steps"
    );
    let at = m
        .clone()
        .checker()
        .target_max_depth(18 + 2)
        .spawn_bfs()
        .join();
    assert!(
        at.discovery(P1).is_some(),
        "no P1 violation within 18 steps"
    );
}
