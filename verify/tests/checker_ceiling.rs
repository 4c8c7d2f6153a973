//! How fast Stateright's own breadth-first loop goes when the model costs nothing: the
//! ceiling any model checked with it can reach, in the profile `cargo test -p verify` runs
//! in. `verify/throughput.sh` runs it beside the token model and Stateright's Paxos
//! example, one thread each on one CPU (`docs/benchmarks.md`, "Model checking
//! throughput").
//!
//! The free model's state is eight digits 0–6 (5,764,801 states, up to eight successors
//! each, depth ≤ 48); a step copies eight bytes and every property is `s[0] < 200`. It is
//! checked twice: with one property, and with as many as the token model registers. For
//! every state it expands, Stateright's loop looks each property's name up in a `DashMap`
//! of discoveries (SipHash) before it evaluates it, and it clones the action path for
//! every successor; that cost is the model's no matter how cheap its states are.
//!
//! ```text
//! cargo test -p verify --test checker_ceiling -- --ignored --nocapture --test-threads 1
//! ```

/// As in the other checking test files (`docs/benchmarks.md`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use hilock_models::token::ModelConfig;
use stateright::{Checker, Model, Property};
use std::time::Instant;

/// Eight digits 0–6, each step raises one; `properties` copies of `s[0] < 200`.
struct Free {
    properties: usize,
}

/// Names for up to 64 properties (Stateright wants `&'static str`).
const NAMES: [&str; 64] = [
    "p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10", "p11", "p12",
    "p13", "p14", "p15", "p16", "p17", "p18", "p19", "p20", "p21", "p22", "p23", "p24", "p25",
    "p26", "p27", "p28", "p29", "p30", "p31", "p32", "p33", "p34", "p35", "p36", "p37", "p38",
    "p39", "p40", "p41", "p42", "p43", "p44", "p45", "p46", "p47", "p48", "p49", "p50", "p51",
    "p52", "p53", "p54", "p55", "p56", "p57", "p58", "p59", "p60", "p61", "p62", "p63",
];

impl Model for Free {
    type State = [u8; 8];
    type Action = usize;

    fn init_states(&self) -> Vec<[u8; 8]> {
        vec![[0; 8]]
    }

    fn actions(&self, s: &[u8; 8], actions: &mut Vec<usize>) {
        actions.extend((0..8).filter(|&i| s[i] < 6));
    }

    fn next_state(&self, s: &[u8; 8], i: usize) -> Option<[u8; 8]> {
        let mut t = *s;
        t[i] += 1;
        Some(t)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        NAMES[..self.properties]
            .iter()
            .map(|name| Property::always(name, |_: &Free, s: &[u8; 8]| s[0] < 200))
            .collect()
    }
}

/// Checks the free model with `properties` properties on one thread; prints the rate in
/// the form `verify/throughput.sh` reads.
fn ceiling(properties: usize) {
    let t = Instant::now();
    let checker = Free { properties }.checker().spawn_bfs().join();
    let secs = t.elapsed().as_secs_f64();
    let unique = checker.unique_state_count();
    assert_eq!(
        unique,
        7usize.pow(8),
        "every state of the free model is reached"
    );
    assert!(checker.discoveries().is_empty(), "no property of it fails");
    println!(
        "ceiling: {properties} properties: {unique} unique states in {secs:.2} s: {:.0} states/s",
        unique as f64 / secs
    );
}

#[test]
#[ignore = "a measurement (about 20 s): run by verify/throughput.sh"]
fn stateright_loop_on_a_model_that_costs_nothing() {
    // As many properties as the token model's "mix" configurations are checked with.
    let mix = ModelConfig::star(
        "mix star4",
        &[&["acquire R", "release"], &["acquire W", "release"]],
    );
    let token = mix.into_model_with::<1>().expect("a valid configuration");
    let n = token.properties().len();
    assert!(n <= NAMES.len(), "at most {} properties", NAMES.len());
    ceiling(1);
    ceiling(n);
}
