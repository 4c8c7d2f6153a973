//! The `hilock` binary end to end: `spec`, `scenario`, `replay`.

use std::process::Command;

fn hilock(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args(args)
        .output()
        .expect("hilock runs")
}

fn scenarios() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/scenarios")
}

#[test]
fn spec_json_is_valid_json_with_the_thesis_tables() {
    let out = hilock(&["spec", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let tables = v["tables"].as_array().unwrap();
    let ids: Vec<&str> = tables.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["2.1", "2.2", "2.3", "3.2", "2.4", "3.1"]);
    for t in tables {
        if !t["derived"].is_null() {
            assert_eq!(
                t["derived"], t["literal"],
                "Table {} derived == literal",
                t["id"]
            );
        }
    }
    assert!(v["rules"].as_array().unwrap().len() >= 10);
}

#[test]
fn every_thesis_scenario_runs_and_passes() {
    for e in std::fs::read_dir(scenarios()).unwrap() {
        let p = e.unwrap().path();
        let out = hilock(&["scenario", p.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {text}", p.display());
        assert!(text.contains("PASS"), "{text}");
    }
}

#[test]
fn scenario_json_trace_replays() {
    let file = scenarios().join("fig-2.10-upgrade.json");
    let out = hilock(&["scenario", "--json", file.to_str().unwrap()]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["format"], "hilock-trace/1");
    let dir = std::env::temp_dir().join(format!("hilock-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    std::fs::write(&trace, &out.stdout).unwrap();
    let out = hilock(&["replay", trace.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("upgraded to W"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_scenarios_give_one_line_errors_and_no_panic() {
    let base = std::fs::read_to_string(scenarios().join("fig-2.2-request-granting.json")).unwrap();
    let dir = std::env::temp_dir().join(format!("hilock-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "bad-mode.json",
            base.replace("\"acquire R\"", "\"acquire RW\""),
            "unknown mode 'RW'",
        ),
        (
            "truncated.json",
            base[..base.len() / 2].to_string(),
            "malformed scenario",
        ),
        (
            "cycle.json",
            base.replace("\"B\": \"A\"", "\"B\": \"C\"")
                .replace("\"C\": \"A\"", "\"C\": \"B\""),
            "cycle",
        ),
    ];
    for (name, text, want) in cases {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        let out = hilock(&["scenario", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{name}: not one line: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = hilock(&["scenario", dir.join("missing.json").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_mismatching_expectation_exits_1() {
    let base = std::fs::read_to_string(scenarios().join("fig-2.2-request-granting.json")).unwrap();
    let dir = std::env::temp_dir().join(format!("hilock-cli-mismatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("wrong.json");
    std::fs::write(
        &f,
        base.replacen(
            "\"owned\": \"R\", \"held\": \"R\"",
            "\"owned\": \"W\", \"held\": \"R\"",
            1,
        ),
    )
    .unwrap();
    let out = hilock(&["scenario", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("MISMATCH"));
    std::fs::remove_dir_all(&dir).ok();
}

fn configs() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/configs")
}

#[test]
fn check_passes_a_correct_configuration_and_traces_a_literal_one() {
    let out = hilock(&["check", configs().join("star3-r-w.json").to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("P1 mutual exclusion") && text.contains("holds"),
        "{text}"
    );

    let dir = std::env::temp_dir().join(format!("hilock-cli-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = hilock(&[
        "check",
        configs()
            .join("release-race-literal.json")
            .to_str()
            .unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let trace = dir.join("release-race-literal.p1-mutual-exclusion.trace.json");
    assert!(trace.exists(), "{}", String::from_utf8_lossy(&out.stdout));
    let replay = hilock(&["replay", trace.to_str().unwrap()]);
    assert!(replay.status.success());
    assert!(String::from_utf8_lossy(&replay.stdout).contains("P1 mutual exclusion violated"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn check_rejects_a_bad_configuration_with_one_line() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.json");
    std::fs::write(&f, "{ \"nodes\": 99 }").unwrap();
    let out = hilock(&["check", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
