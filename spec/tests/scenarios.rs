//! Every scenario file under spec/scenarios/ runs through the kernel and matches the
//! states the thesis shows.

use hilock_kernel::Forwarding;
use hilock_spec::{scenarios_dir, Scenario};

/// Under the thesis's own forwarding rule ([`Forwarding::Thesis`], kept for comparison).
#[test]
fn every_thesis_scenario_passes() {
    run_every_scenario(Forwarding::Thesis);
}

/// The thesis's worked examples (Table 3.2 in Fig. 3.2, the priority examples of Fig.
/// 3.3/3.4, PCEP, PIP, …) end in the states the thesis shows also under hilock's compressed
/// forwarding.
#[test]
fn every_thesis_scenario_passes_under_compressed_forwarding() {
    run_every_scenario(Forwarding::Compress);
}

/// The same under hilock's per-class routing pointers, hilock's default (what
/// `hilock scenario` runs).
#[test]
fn every_thesis_scenario_passes_under_class_pointers() {
    assert_eq!(Forwarding::default(), Forwarding::ClassPointers);
    run_every_scenario(Forwarding::ClassPointers);
}

/// The same under the experimental id-ordered requester pointers (`spec/SPEC.md` 1.6).
#[test]
fn every_thesis_scenario_passes_under_ordered_pointers() {
    run_every_scenario(Forwarding::OrderedPointers);
}

fn run_every_scenario(forwarding: Forwarding) {
    let mut files: Vec<_> = std::fs::read_dir(scenarios_dir())
        .expect("spec/scenarios exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected the five thesis scenarios, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        let sc = Scenario::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let report = sc
            .prepare()
            .and_then(|p| p.with_forwarding(forwarding).run());
        match report {
            Err(e) => failures.push(format!("{}: {e}", f.display())),
            Ok(r) => {
                println!(
                    "{}: {} steps, {} messages",
                    sc.name,
                    r.trace.steps.len(),
                    r.messages
                );
                if !r.passed() {
                    println!("{}", r.trace.render());
                    for m in &r.mismatches {
                        failures.push(format!("{}: {m}", f.display()));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "scenario failures:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_five_thesis_figures_are_present() {
    let mut figs: Vec<String> = std::fs::read_dir(scenarios_dir())
        .expect("dir")
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.ok()?.path()).ok()?;
            Scenario::from_json(&text).ok()?.figure
        })
        .collect();
    figs.sort();
    for f in ["2.10", "2.2", "2.3", "2.6", "2.8"] {
        assert!(figs.iter().any(|x| x == f), "Fig. {f} has no scenario");
    }
}

#[test]
fn a_wrong_expectation_is_reported() {
    let text =
        std::fs::read_to_string(scenarios_dir().join("fig-2.2-request-granting.json")).unwrap();
    let mut sc = Scenario::from_json(&text).unwrap();
    sc.expect.get_mut("B").unwrap().held = Some("W".into());
    let r = sc.prepare().unwrap().run().unwrap();
    assert!(!r.passed());
    assert!(
        r.mismatches.iter().any(|m| m.contains("B.held")),
        "{:?}",
        r.mismatches
    );
}

#[test]
fn bad_files_give_one_line_errors() {
    let base =
        std::fs::read_to_string(scenarios_dir().join("fig-2.2-request-granting.json")).unwrap();
    let cases = [
        (
            base.replace("\"acquire R\"", "\"acquire RW\""),
            "unknown mode 'RW'",
        ),
        (
            base.replace("\"token\": \"A\"", "\"token\": \"Z\""),
            "unknown node 'Z'",
        ),
        (base.replace("\"E\": \"A\"}", "\"E\": \"E\"}"), "own parent"),
        ("{ not json".to_string(), "malformed scenario"),
        (
            base.replace(
                "\"schedule\": [\"A\", \"E\", \"*\", \"B\", \"*\"]",
                "\"schedule\": [\"A\", \"A\", \"*\", \"B\", \"*\"]",
            ),
            "no operation left",
        ),
    ];
    for (text, want) in cases {
        let r = Scenario::from_json(&text)
            .and_then(|s| s.prepare())
            .and_then(|p| p.run().map(|_| ()));
        let e = r.expect_err(want);
        assert!(e.contains(want), "expected '{want}' in '{e}'");
        assert!(!e.contains('\n'), "error is not one line: {e}");
    }
}
