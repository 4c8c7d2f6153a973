//! SPEC.md stays in step with the specification data: every rule and every kernel function
//! that `hilock spec --json` lists is named in SPEC.md, and every scenario figure is listed.

use hilock_spec::{export, scenarios_dir, Scenario};

fn spec_md() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("SPEC.md"))
        .expect("spec/SPEC.md")
}

#[test]
fn spec_md_names_every_rule_and_kernel_function() {
    let md = spec_md();
    for rule in export::rules() {
        assert!(
            md.contains(&format!("| {} |", rule.id)),
            "SPEC.md has no row for {}",
            rule.id
        );
        for f in &rule.kernel {
            assert!(md.contains(f), "SPEC.md does not name {f} ({})", rule.id);
        }
    }
}

#[test]
fn spec_md_lists_every_scenario_with_its_figure() {
    let md = spec_md();
    for e in std::fs::read_dir(scenarios_dir()).unwrap() {
        let p = e.unwrap().path();
        let sc = Scenario::from_json(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let file = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(md.contains(&file), "SPEC.md does not list {file}");
        if let Some(f) = sc.figure {
            assert!(
                md.contains(&format!("Fig. {f}")),
                "SPEC.md does not name Fig. {f}"
            );
        }
    }
}
