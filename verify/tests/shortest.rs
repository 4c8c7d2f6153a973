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

/// `hilock check` on the other models (`hilock_models::open::check_other`) reports a
/// shortest counterexample too, the same on every run: the paper's ring server with a join
/// (`spec/counterexamples/ring/ring-paper-join-window.json`, Fig. 2(e)) gives two holders
/// after 11 steps at the least, where the run the refutation saved takes 12.
#[test]
fn the_ring_join_window_gives_two_holders_after_11_steps_at_the_least() {
    use hilock_models::open::{check_other, OtherConfig};
    use hilock_models::ring::RingModel;
    const MUTEX: &str = "at most one holder per lock";
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../spec/counterexamples/ring/ring-paper-join-window.json"),
        )
        .expect("saved counterexample"),
    )
    .expect("JSON");
    assert_eq!(saved["steps"].as_array().map(Vec::len), Some(12));
    let model: RingModel = serde_json::from_value(saved["config"].clone()).expect("config");
    let cfg = OtherConfig::Ring(model.clone());
    let steps = |c: &hilock_models::open::OtherCheck| -> serde_json::Value {
        let (_, t) = c
            .traces
            .iter()
            .find(|(p, _)| p == MUTEX)
            .expect("two holders");
        t["steps"].clone()
    };
    let first = check_other(&cfg, |_, _, _| {}).expect("check");
    let again = check_other(&cfg, |_, _, _| {}).expect("check");
    assert_eq!(steps(&first).as_array().map(Vec::len), Some(11));
    assert!(steps(&first) == steps(&again), "a different counterexample");
    assert!(shortest_failure(&model, MUTEX, 10).is_none());
    assert!(shortest_failure(&model, MUTEX, 11).is_some());
}
