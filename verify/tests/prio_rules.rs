//! Chapter-3 rules checked on the thesis's own examples (run through the kernel by the
//! scenario runner): Rule 6_PRIO's thresholds, Table 3.2's conditional queueing, and the
//! bounded inversion of Fig. 3.4 with PCEP and PIP.

use hilock_spec::{scenarios_dir, Scenario};

fn run(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(scenarios_dir().join(file)).expect("scenario file");
    let report = Scenario::from_json(&text)
        .and_then(|s| s.prepare())
        .and_then(|p| p.run())
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    report.mismatches
}

/// Rule 6_PRIO (Fig. 3.3(c)): E's R (priority 5) is granted although R is frozen for the
/// IW requests of B and D (threshold 4). Without the threshold comparison E would wait.
#[test]
fn rule_6_prio_thresholds_let_a_higher_priority_request_pass() {
    let m = run("fig-3.3-prioritized-example.json");
    assert!(m.is_empty(), "{m:#?}");
}

/// Table 3.2 (Fig. 3.2): a lower-priority pending request does not keep a higher-priority one.
#[test]
fn table_3_2_higher_priority_requests_are_not_kept_behind_lower_ones() {
    let m = run("fig-3.2-prioritized-queue-forward.json");
    assert!(m.is_empty(), "{m:#?}");
}

/// Fig. 3.4: without inheritance A's request waits behind C's; with PCEP or PIP it is
/// granted at once.
#[test]
fn fig_3_4_inversion_and_its_bound() {
    for f in [
        "fig-3.4-priority-inversion.json",
        "fig-3.4-pcep.json",
        "fig-3.4-pip.json",
    ] {
        let m = run(f);
        assert!(m.is_empty(), "{f}: {m:#?}");
    }
}
