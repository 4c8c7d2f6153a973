//! The `hilock` binary end to end: `spec`, `scenario`, `replay`.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;
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
    let rules: Vec<&str> = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(rules.len() >= 10, "{rules:?}");
    // hilock's extensions of the thesis, each with its kernel functions (SPEC.md 1.12–1.17).
    for id in [
        "Try-lock",
        "Cancel",
        "Downgrade",
        "Conversion",
        "Value block",
        "Blocking notification",
    ] {
        assert!(
            rules.contains(&id),
            "hilock spec --json has no rule {id}: {rules:?}"
        );
    }
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
    // With --json: the trace's verdict names the mismatch, and stderr says it.
    let mismatch = "final state: B.owned: expected W, found R";
    let out = hilock(&["scenario", "--json", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON trace");
    assert_eq!(v["format"], "hilock-trace/1");
    let verdict = v["verdict"].as_str().unwrap_or_default();
    assert!(
        verdict.starts_with("FAIL: 1 expectation(s) do not match: ") && verdict.contains(mismatch),
        "{verdict}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err, format!("MISMATCH {mismatch}\n"));
    std::fs::remove_dir_all(&dir).ok();
}

fn configs() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/configs")
}

/// `hilock check models/configs/release-race-literal.json --out DIR`: a configuration whose
/// literal release handling fails P1, P3 and P10.
fn check_literal_release_race(out: &std::path::Path) -> std::process::Output {
    hilock(&[
        "check",
        configs()
            .join("release-race-literal.json")
            .to_str()
            .unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
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
    let out = check_literal_release_race(&dir);
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
    // Each counterexample comes with the command that opens it and its Explorer URL.
    let text = String::from_utf8_lossy(&out.stdout);
    let cmd = format!(
        "hilock explore {} --trace {}",
        configs().join("release-race-literal.json").display(),
        trace.display()
    );
    assert!(text.contains(&cmd), "{text}");
    assert!(
        text.contains("then browse http://127.0.0.1:3000/#/steps/0/"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Two runs of `hilock check` on a failing configuration print the same text, byte for
/// byte (the wall time goes to stderr), and write byte-identical traces: for the base
/// model, and for the bakery and ring models, whose own checks run on two threads. The
/// base model's verdict names what violates the property in words (the holders of a P1
/// violation with their modes), and its counterexamples are the shortest.
#[test]
fn check_counterexamples_are_deterministic_and_name_the_violating_pair() {
    let base = std::env::temp_dir().join(format!("hilock-check-twice-{}", std::process::id()));
    let ring = failing_configs(&base.join("configs")).0;
    let bakery = counterexamples().join("configs/bakery-literal.json");
    let literal = configs().join("release-race-literal.json");
    for config in [&literal, &bakery, &ring] {
        let dir = base.join("out");
        let run = || {
            std::fs::remove_dir_all(&dir).ok();
            let out = hilock(&[
                "check",
                config.to_str().unwrap(),
                "--out",
                dir.to_str().unwrap(),
            ]);
            assert_eq!(out.status.code(), Some(1), "{}", config.display());
            let mut traces: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .map(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    (name, std::fs::read(&p).unwrap())
                })
                .collect();
            traces.sort();
            (out.stdout, traces)
        };
        let (first, second) = (run(), run());
        let text = String::from_utf8_lossy(&first.0).into_owned();
        assert!(
            !first.1.is_empty(),
            "{}: no trace written",
            config.display()
        );
        assert!(
            first.0 == second.0,
            "{}: the printed reports differ:\n{text}\n---\n{}",
            config.display(),
            String::from_utf8_lossy(&second.0)
        );
        assert!(
            first.1 == second.1,
            "{}: the trace files differ",
            config.display()
        );
        if config == &literal {
            assert!(
                text.contains(
                    "verdict: P1 mutual exclusion violated: on L0: n1 holds R, n3 holds W"
                ),
                "{text}"
            );
            // The shortest counterexamples: P1 after 18 steps (verify/tests/shortest.rs
            // shows that none is shorter; the checker's own path takes 22), P3 after 14.
            let steps = |file: &str| -> usize {
                let (_, json) = first.1.iter().find(|(n, _)| n == file).expect(file);
                let v: serde_json::Value = serde_json::from_slice(json).unwrap();
                v["steps"].as_array().map_or(0, Vec::len)
            };
            assert_eq!(
                steps("release-race-literal.p1-mutual-exclusion.trace.json"),
                18
            );
            assert_eq!(
                steps("release-race-literal.p3-owned-mode-invariant.trace.json"),
                14
            );
        }
    }
    std::fs::remove_dir_all(&base).ok();
}

/// `--out` is created before the check starts (parents included) or refused at once: a
/// check that finds a counterexample after minutes of work is never refused its output.
/// A passing configuration's P6 witness is not called a failing state.
#[test]
fn check_prepares_its_out_directory_and_labels_a_witness_as_a_witness() {
    let base = std::env::temp_dir().join(format!("hilock-check-out-{}", std::process::id()));
    let nested = base.join("new/deeper");
    let out = check_literal_release_race(&nested);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        nested
            .join("release-race-literal.p1-mutual-exclusion.trace.json")
            .exists(),
        "{text}"
    );
    let witness = text
        .lines()
        .skip_while(|l| !l.contains("p6-bypass-witness"))
        .nth(2)
        .unwrap_or_default()
        .to_string();
    assert!(
        witness.contains("the P6 witness") && !witness.contains("failing state"),
        "{text}"
    );

    // A file where a directory must be: refused with the reason, before the check runs
    // (a check that ran says how long it took), for the base model and another model.
    let file = base.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let ring = failing_configs(&base.join("configs")).0;
    for config in [configs().join("release-race-literal.json"), ring] {
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            file.join("x").to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--out") && err.contains("cannot write there"),
            "{err}"
        );
        assert!(!err.contains("checked in"), "{err}");
    }
    std::fs::remove_dir_all(&base).ok();
}

/// A trace `hilock check` cannot write (a directory where its file goes) does not lose the
/// report: it is printed, saying the trace was not written, the other traces are written,
/// stderr names the file, and the failing check exits 1; for the base and the fault model.
#[test]
fn check_prints_its_report_when_a_trace_cannot_be_written() {
    let base = std::env::temp_dir().join(format!("hilock-check-unwritable-{}", std::process::id()));
    let faults = failing_configs(&base.join("configs")).1;
    for (config, blocked, written) in [
        (
            configs().join("release-race-literal.json"),
            "release-race-literal.p1-mutual-exclusion.trace.json",
            Some("release-race-literal.p3-owned-mode-invariant.trace.json"),
        ),
        (
            faults,
            "faults-no-kill.p1-mutual-exclusion-live-leases.trace.json",
            None,
        ),
    ] {
        let out_dir = base.join("out");
        std::fs::create_dir_all(out_dir.join(blocked)).unwrap();
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{text}{err}");
        assert!(
            text.contains("VIOLATED") || text.contains("violated"),
            "{text}"
        );
        assert!(
            text.contains(&format!("NOT written: {}", out_dir.join(blocked).display())),
            "{text}"
        );
        assert!(
            err.contains(&format!(
                "hilock: error: cannot write {}: ",
                out_dir.join(blocked).display()
            )),
            "{err}"
        );
        if let Some(w) = written {
            assert!(out_dir.join(w).is_file(), "{w} written: {text}");
        }
        std::fs::remove_dir_all(&out_dir).ok();
    }
    // A passing check whose P6 witness cannot be written: the report, then exit 2.
    let out_dir = base.join("out");
    let blocked = out_dir.join("upgrade-chain4.p6-bypass-witness.trace.json");
    std::fs::create_dir_all(&blocked).unwrap();
    let out = hilock(&[
        "check",
        configs().join("upgrade-chain4.json").to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{text}{err}");
    assert!(
        text.contains("upgrade-chain4: ") && text.contains("NOT written"),
        "{text}"
    );
    assert!(
        err.contains(&format!("cannot write {}: ", blocked.display())),
        "{err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("hilock: error:"))
            .count(),
        1,
        "one error line: {err}"
    );
    std::fs::remove_dir_all(&base).ok();
}

/// `hilock check` accepts every model `hilock explore` serves: a tree, agents, bakery and
/// inversion configuration whose literal rules fail each exit 1, say what violates the
/// property in words under it, and write their counterexamples in the model's trace
/// format, each of which `hilock replay` prints.
#[test]
fn check_accepts_every_model_the_explorer_serves() {
    let base = std::env::temp_dir().join(format!("hilock-check-models-{}", std::process::id()));
    for (name, property, words) in [
        (
            "tree-w-sibling",
            "no-kernel-error",
            "user u2 does not own the region of node t10",
        ),
        (
            "agents-self-wait",
            "no-phantom-deadlock",
            "A1 surrendered (or aborted on deadlock) with no entry it gives up",
        ),
        (
            "bakery-literal",
            "mutual-exclusion",
            "in the critical section together: c1 (row 0",
        ),
        (
            "inversion-no-inheritance",
            "p7-bounded-inversion",
            "2 lower-priority critical sections on L_j while D waited (bound 1)",
        ),
    ] {
        let config = counterexamples().join(format!("configs/{name}.json"));
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            base.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("VIOLATED"), "{name}: {text}");
        // What violates it, in words, under the property's line.
        assert!(
            text.lines()
                .skip_while(|l| !l.contains("VIOLATED"))
                .any(|l| l.starts_with("    ") && l.contains(words)),
            "{name}: {text}"
        );
        let trace = base.join(format!("{name}.{property}.trace.json"));
        assert!(trace.exists(), "{name}: {text}");
        assert!(text.contains("(the failing state)"), "{name}: {text}");
        let replay = hilock(&["replay", trace.to_str().unwrap()]);
        assert!(
            replay.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&replay.stderr)
        );
    }
    std::fs::remove_dir_all(&base).ok();
}

/// A check of another model that runs for seconds says how far it got on stderr, about
/// once a second, as the base model's does: here hilock's ring server (r = 2) with two
/// crashes, 386,442 states (the count `verify/tests/ring.rs` pins), about 3 s.
#[test]
fn check_of_a_ring_configuration_prints_its_progress() {
    let dir = std::env::temp_dir().join(format!("hilock-check-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ring-crashes.json");
    let json = serde_json::json!({
        "model": "ring",
        "name": "hilock r2: 3 nodes, 2 crashes, 2 clients on key 10",
        "variant": { "Hilock": { "r": 2 } },
        "initial": 0b0111,
        "clients": [10, 10],
        "crashable": 0b0111,
        "crashes": 2
    });
    std::fs::write(&config, json.to_string()).unwrap();
    let out = hilock(&[
        "check",
        config.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(text.contains(": 386442 unique states"), "{text}");
    let progress = err.lines().find(|l| l.contains(" states/s, depth "));
    assert!(progress.is_some(), "no progress on stderr: {err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes a ring and a fault-model configuration that fail into `dir`: the ring example
/// with the paper's server (Fig. 2) and n21 leaving, and the fault example whose service
/// removes a node it cannot hear before that node's lease ran out.
fn failing_configs(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(configs().join(f)).unwrap()).unwrap()
    };
    let mut ring = read("ring-r1-restart.json");
    ring["name"] = "paper: 3 nodes, 1 leave of n21".into();
    ring["variant"] = "Paper".into();
    ring["initial"] = 0b0111.into();
    ring["rounds"] = 1.into();
    ring["restarts"] = 0.into();
    ring["leaves"] = 0b0010.into();
    ring["changes"] = 1.into();
    let mut faults = read("faults-wwr-crash-reinstall.json");
    faults["name"] = "W W R, 1 partition or pause, no kill before regrant".into();
    faults["crashes"] = 0.into();
    faults["reinstalls"] = 0.into();
    faults["suspicions"] = 1.into();
    faults["variant"] = serde_json::json!({
        "epoch_check": true,
        "kill_before_regrant": false,
        "install_once": true
    });
    let (r, f) = (
        dir.join("ring-paper-leave.json"),
        dir.join("faults-no-kill.json"),
    );
    std::fs::write(&r, ring.to_string()).unwrap();
    std::fs::write(&f, faults.to_string()).unwrap();
    (r, f)
}

/// `hilock explore CONFIG --trace TRACE` on a free port: the first line of its stdout (the
/// URL of the trace's last state) and its stderr, once the process is stopped.
fn explore_url(config: &std::path::Path, trace: &std::path::Path) -> (String, String, String) {
    use std::io::{BufRead, BufReader};
    let port = free_port().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args([
            "explore",
            config.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--port",
            &port,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hilock runs");
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    child.kill().ok();
    let out = child.wait_with_output().expect("hilock ends");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(read.is_ok(), "{}: {err}", config.display());
    (port, line, err)
}

/// `hilock check` takes the ring and fault models (`"model": "ring"`, `"faults"`): the
/// examples in `models/configs/` pass (exit 0, nothing written, no failing state named);
/// a failing configuration of each exits 1 with its counterexample in the model's trace
/// format, what is wrong in words, and the command that opens it, which `hilock explore`
/// then serves at the trace's last state and `hilock replay` prints.
#[test]
fn check_and_explore_take_ring_and_fault_configurations() {
    let base = std::env::temp_dir().join(format!("hilock-check-ring-{}", std::process::id()));
    for name in ["ring-r1-restart", "faults-wwr-crash-reinstall"] {
        let dir = base.join(name);
        let config = configs().join(format!("{name}.json"));
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains(" holds\n") && !text.contains("VIOLATED"),
            "{name}: {text}"
        );
        assert!(!text.contains("failing state"), "{name}: {text}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "{name}: {text}"
        );
    }
    let (ring, faults) = failing_configs(&base.join("configs"));
    for (config, trace, format, words, property) in [
        (
            &ring,
            "ring-paper-leave.at-most-one-holder-per-lock.trace.json",
            "hilock-ring-trace/1",
            "two clients hold one lock: key 10: c1 and c2",
            "at most one holder per lock",
        ),
        (
            &faults,
            "faults-no-kill.p1-mutual-exclusion-live-leases.trace.json",
            "hilock-faults-trace/1",
            "P1 mutual exclusion violated: on L0: n0 holds W, n1 holds W",
            "P1 mutual exclusion (live leases)",
        ),
    ] {
        let dir = base.join("out");
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{trace}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("VIOLATED") && text.contains(words), "{text}");
        let trace = dir.join(trace);
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&trace).expect("trace written")).unwrap();
        assert_eq!(saved["format"], format);
        let cmd = format!(
            "hilock explore {} --trace {}",
            config.display(),
            trace.display()
        );
        assert!(text.contains(&cmd), "{text}");
        assert!(text.contains("(the failing state)"), "{text}");
        let (port, line, err) = explore_url(config, &trace);
        assert!(
            line.starts_with(&format!("http://127.0.0.1:{port}/#/steps/0/")),
            "{line} {err}"
        );
        assert!(err.contains(&format!("there {property}")), "{err}");
        let replay = hilock(&["replay", trace.to_str().unwrap()]);
        assert!(
            replay.status.success() && String::from_utf8_lossy(&replay.stdout).contains(words),
            "{}{}",
            String::from_utf8_lossy(&replay.stdout),
            String::from_utf8_lossy(&replay.stderr)
        );
    }
    std::fs::remove_dir_all(&base).ok();
}

/// Saved fault-model counterexamples, their configurations given `"model": "faults"`, are
/// checked by `hilock check` (`docs/faults.md`, "Counterexamples"): each exits 1 with the
/// saved property VIOLATED. `token-regenerated-twice` has no end to its states (two tokens
/// of one epoch keep moving): the check searches to 3× the depth of its first violation and
/// says so, where an exhaustive search never ended. In `staged-install-no-freeze` the saved
/// P1 breach lies deeper than the first violation, which a check that stopped there would
/// miss.
#[test]
fn check_finds_the_saved_violation_also_where_the_states_have_no_end() {
    let base = std::env::temp_dir().join(format!("hilock-check-faults-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let dir = counterexamples().join("faults");
    for name in [
        "token-regenerated-twice",
        "staged-install-no-freeze",
        "no-epoch-check",
    ] {
        let file = dir.join(format!("{name}.json"));
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let mut config = saved["config"].clone();
        config["model"] = "faults".into();
        let path = base.join(file.file_name().unwrap());
        std::fs::write(&path, config.to_string()).unwrap();
        let stdout = base.join("stdout");
        let mut child = Command::new(env!("CARGO_BIN_EXE_hilock"))
            .args(["check", path.to_str().unwrap(), "--out"])
            .arg(base.join("out"))
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{}: the check did not end in 120 s", file.display());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let text = std::fs::read_to_string(&stdout).unwrap();
        assert_eq!(status.code(), Some(1), "{}: {text}", file.display());
        let property = saved["property"].as_str().unwrap();
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(property) && l.ends_with("VIOLATED")),
            "{}: {property}: {text}",
            file.display()
        );
        if name == "token-regenerated-twice" {
            assert!(
                text.contains("searched every state of depth below"),
                "{text}"
            );
        }
    }
    std::fs::remove_dir_all(&base).ok();
}

/// `hilock check` of `models/configs/star3-r-w.json` changed by `edit`: it must be refused
/// (exit 2) with one line on stderr, which is returned.
fn check_refuses_star3_with(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(configs().join("star3-r-w.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut v);
    let path = dir.path().join("edited.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let out = hilock(&[
        "check",
        path.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    e
}

/// A base-model configuration whose token holder is given a parent is refused (exit 2, one
/// line naming the entry), as `hilock scenario` refuses one; it was checked as if the
/// entry were `null`.
#[test]
fn check_refuses_a_configuration_whose_token_holder_has_a_parent() {
    let e = check_refuses_star3_with(|v| v["parents"] = serde_json::json!([1, 0, 0]));
    assert!(
        e.contains("parents[0] is 1, but node 0 holds the token and has no parent"),
        "{e}"
    );
}

/// A base-model configuration on the unordered network without `max_messages` is refused
/// (exit 2, one line saying why): a request can overtake the token it chases and be
/// forwarded for ever, so its search had no end (`models/src/token.rs`, the module doc).
/// With the bound, the report says that longer runs were not explored.
#[test]
fn check_refuses_an_unbounded_unordered_network_and_names_the_bound_it_is_given() {
    let e = check_refuses_star3_with(|v| v["network"] = "unordered".into());
    assert!(e.contains("an unordered network needs max_messages"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(configs().join("star3-r-w.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["network"] = "unordered".into();
    v["max_messages"] = 6.into();
    let path = dir.path().join("bounded.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let out = hilock(&[
        "check",
        path.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    assert!(
        text.contains("bounded: runs that send more than 6 messages were not explored"),
        "{text}"
    );
}

/// An unknown script operation is refused with one line that lists every operation a
/// base-model script takes.
#[test]
fn check_names_every_script_operation_when_one_is_unknown() {
    let e = check_refuses_star3_with(|v| v["scripts"][0][0] = "grab R".into());
    for op in [
        "'acquire MODE'",
        "'try MODE'",
        "'release'",
        "'upgrade'",
        "'downgrade MODE'",
        "'convert MODE'",
        "'try-convert MODE'",
        "'cancel'",
        "'write V'",
        "'priority N'",
    ] {
        assert!(e.contains(op), "{op}: {e}");
    }
}

/// A malformed operation of any form is named as it was written, not as the form it is
/// read as (`try-convert W W` reads as `acquire W W`, `cancelx` as `releasex`).
#[test]
fn check_names_a_malformed_operation_as_written() {
    for (op, shown, rewritten) in [
        ("try-convert W W", "'try-convert W W'", "'acquire W W'"),
        ("cancelx", "'cancelx'", "'releasex'"),
    ] {
        let e = check_refuses_star3_with(|v| v["scripts"][0][0] = op.into());
        assert!(e.contains(shown) && !e.contains(rewritten), "{op}: {e}");
    }
}

fn counterexamples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/counterexamples")
}

use ports::free_port;

/// `hilock explore CONFIG --trace FILE` prints the URL of the trace's last state and
/// serves it, for a saved counterexample of each model (base, inversion, tree, agents,
/// bakery); the process is stopped by the test.
#[test]
fn explore_opens_a_saved_counterexample_at_its_last_state() {
    for (name, property) in [
        ("token-branch-literal", "P4 no deadlock"),
        ("inversion-no-inheritance", "P7 bounded inversion"),
        ("tree-slides", "P8 tree colours and exclusivity"),
        ("agents-majority-unneeded-surrender", "no phantom deadlock"),
        ("bakery-literal", "mutual exclusion"),
    ] {
        let (port, line, err) = explore_url(
            &counterexamples().join(format!("configs/{name}.json")),
            &counterexamples().join(format!("{name}.json")),
        );
        assert!(
            line.starts_with(&format!("http://127.0.0.1:{port}/#/steps/0/")),
            "{name}: {line} {err}"
        );
        assert!(
            err.contains(&format!("there {property}")),
            "{name}: the last state violates {property}: {err}"
        );
    }
}

/// `hilock explore --port 0` serves on a port the system chooses and prints that port, in
/// the Explorer's address on stderr and in the trace's URL on stdout, where it answers.
#[test]
fn explore_on_port_0_prints_the_port_it_serves_on() {
    use std::io::{BufRead, BufReader, Read, Write};
    let name = "token-branch-literal";
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hilock"))
        .args([
            "explore",
            counterexamples()
                .join(format!("configs/{name}.json"))
                .to_str()
                .unwrap(),
            "--trace",
            counterexamples()
                .join(format!("{name}.json"))
                .to_str()
                .unwrap(),
            "--port",
            "0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hilock runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).expect("stderr");
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut url)
        .expect("stdout");
    let port: u16 = first
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first}"));
    assert_ne!(port, 0, "{first}");
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{port}/#/steps/0/")),
        "{url} {first}"
    );
    // The Explorer answers there.
    let t = std::time::Instant::now();
    let page = loop {
        let got = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            write!(
                s,
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            )?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        });
        match got {
            Ok(b) => break b,
            Err(e) if t.elapsed() < std::time::Duration::from_secs(20) => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("nothing answers on port {port}: {e}"),
        }
    };
    child.kill().ok();
    child.wait().ok();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
}

/// One line naming the mismatch, exit 2, for a trace that does not fit the configuration.
fn explore_fails(config: &std::path::Path, trace: &std::path::Path, expect: &str) {
    let port = free_port().to_string();
    let out = hilock(&[
        "explore",
        config.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--port",
        &port,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(expect), "{err} should name: {expect}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_trace_that_does_not_fit_gives_one_line() {
    let dir = std::env::temp_dir().join(format!(
        "hilock-cli-explore-mismatch-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let star3 = configs().join("star3-r-w.json");
    let race = counterexamples().join("release-race-literal.json");
    // Another configuration, by the name the trace gives it (even where the steps would
    // replay, as they do under the race's configuration with another name).
    explore_fails(
        &star3,
        &race,
        "the trace is of configuration 'release race, literal HandleRelease', not 'star3-r-w'",
    );
    let renamed = |config: &str| {
        let text = std::fs::read_to_string(configs().join(config)).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["name"] = "release race, literal HandleRelease".into();
        let f = dir.join(config);
        std::fs::write(&f, v.to_string()).unwrap();
        f
    };
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(counterexamples().join("configs/release-race-literal.json"))
            .unwrap(),
    )
    .unwrap();
    v["name"] = "other".into();
    let other = dir.join("other-name.json");
    std::fs::write(&other, v.to_string()).unwrap();
    explore_fails(
        &other,
        &race,
        "the trace is of configuration 'release race, literal HandleRelease', not 'other'",
    );
    // A configuration of that name but 4 nodes against 3.
    explore_fails(
        &renamed("star3-r-w.json"),
        &race,
        "the trace has 4 nodes, configuration 'release race, literal HandleRelease' has 3",
    );
    // The same nodes: the first step that cannot happen.
    explore_fails(
        &renamed("upgrade-chain4.json"),
        &race,
        "step 1 (n2 acquire IR on L0) cannot happen in configuration 'release race, literal \
         HandleRelease'",
    );
    // Another model's trace.
    explore_fails(
        &star3,
        &counterexamples().join("tree-slides.json"),
        "a hilock-tree-trace/1 trace (the tree-locking model)",
    );
    // An older format: no format tag, or the steps of an older shape.
    let text = std::fs::read_to_string(&race).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("format");
    let untagged = dir.join("untagged.json");
    std::fs::write(&untagged, v.to_string()).unwrap();
    explore_fails(&star3, &untagged, "no \"format\" field");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for s in v["steps"].as_array_mut().unwrap() {
        s.as_object_mut().unwrap().remove("state");
    }
    let old = dir.join("old.json");
    std::fs::write(&old, v.to_string()).unwrap();
    explore_fails(
        &star3,
        &old,
        "a malformed hilock-trace/1 trace (of an older shape",
    );
    // Not a configuration.
    explore_fails(
        &counterexamples().join("tree-slides.json"),
        &race,
        "not a model configuration",
    );
    // Another model's configuration, and a trace of the same model but another
    // configuration.
    let tree = counterexamples().join("configs/tree-slides.json");
    explore_fails(
        &tree,
        &race,
        "a hilock-trace/1 trace (the base model), but the configuration is of the tree-locking model",
    );
    explore_fails(
        &tree,
        &counterexamples().join("tree-undo.json"),
        "a trace of another configuration: its \"variant\" is",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `hilock replay --svg/--html` writes the sequence diagram of a saved trace of any model;
/// the page lists each step's recorded fields under it.
#[test]
fn replay_writes_the_sequence_diagram() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, lanes, arrows) in [
        ("release-race-literal", &["n0", "n1", "n2", "n3"][..], true),
        ("agents-no-ack", &["A0", "A1", "A2", "S0"][..], true),
        ("bakery-literal", &["c1", "c2", "r0"][..], true),
        ("tree-slides", &["u0", "u1", "u2"][..], false),
        (
            "inversion-no-inheritance",
            &["A", "D", "M2", "M3"][..],
            true,
        ),
    ] {
        let (svg, html) = (
            dir.join(format!("{name}.svg")),
            dir.join(format!("{name}.html")),
        );
        replay_drawn(&counterexamples().join(format!("{name}.json")), &svg, &html);
        let svg = std::fs::read_to_string(&svg).expect("SVG written");
        assert!(svg.starts_with("<svg"), "{name}");
        for l in lanes {
            assert!(svg.contains(&format!(">{l}</text>")), "{name}: lane {l}");
        }
        assert_eq!(svg.contains("class=\"msg\""), arrows, "{name}: arrows");
        let html = std::fs::read_to_string(&html).expect("HTML written");
        assert!(
            html.contains("<svg") && html.contains("<li value=\"0\">"),
            "{name}"
        );
        // Under each step, what the trace recorded after it: the agents' and servers'
        // states and the step's outputs; the bakery's clients and replicas.
        let details: &[&str] = match name {
            "agents-no-ack" => &[
                "<li value=\"0\">A2 → S0: request /1 R<ul class=\"details\">",
                "<li>servers: S0=A2:/1R*</li>",
                "<li>outputs: S0 → A2: info S0 /1 v1 by A2 [A2:/1R*]</li>",
                "<li>agents: A0=Running; locks: /1W; knows: , A1=",
            ],
            "bakery-literal" => &[
                "<li>clients: c1=line 1 (write choosing), c2=idle</li>",
                "<li>in_flight: 3</li>",
            ],
            _ => &[],
        };
        for d in details {
            assert!(html.contains(d), "{name}: {d} in {html}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `hilock replay --html` of a base-model trace lists under each step what it output (the
/// grants, the messages sent) and every node's state after it; the steps are numbered as
/// the trace numbers them (0 to 21 here), as the text `replay` prints and the diagram's
/// rows are; the freeze sent at step 17 and never delivered is drawn in flight.
#[test]
fn replay_html_shows_grants_and_every_node_per_step() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("race.html");
    let out = hilock(&[
        "replay",
        counterexamples()
            .join("release-race-literal.json")
            .to_str()
            .unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("\n 21. n1  from n0: Grant(R)\n"), "{text}");
    assert!(!text.contains("\n 22. "), "{text}");
    let html = std::fs::read_to_string(&html).expect("HTML written");
    let step = |k: usize| -> &str {
        let at = html
            .find(&format!("<li value=\"{k}\">"))
            .unwrap_or_else(|| panic!("no step {k}: {html}"));
        let end = html[at..].find("</ul></li>").map_or(html.len(), |e| at + e);
        &html[at..end]
    };
    // Step 20: n3 enters W; step 21: n1 enters R, while n3 still holds W.
    let s20 = step(20);
    assert!(s20.contains("n3 is granted W on L0"), "{s20}");
    let s21 = step(21);
    for what in [
        "n0 → n1 grant R",
        "n1 is granted R on L0",
        "<li>n0: L0 (",
        "<li>n1: L0 (R, R,",
        "<li>n2: L0 (",
        "<li>n3: L0 (W, W,",
    ] {
        assert!(s21.contains(what), "step 21 shows {what}: {s21}");
    }
    // Step 17 sends the freeze; nothing delivers it.
    assert!(step(17).contains("n0 sends freeze"), "{}", step(17));
    assert!(html.contains(">21</text>") && !html.contains(">22</text>"));
    assert_eq!(html.matches("class=\"inflight\"").count(), 1, "{html}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `hilock replay FILE --svg SVG --html HTML`, asserted to succeed.
fn replay_drawn(file: &std::path::Path, svg: &std::path::Path, html: &std::path::Path) {
    let out = hilock(&[
        "replay",
        file.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `hilock replay --html` of a fault-model trace lists under each step every node's state
/// after it (the trace records the state each action is taken from): the acquire at step 0
/// shows n1 pending W, the install at step 5, the last one, shows the violating state of
/// epoch 1. The membership service's steps are drawn on a lane named `membership`.
#[test]
fn replay_html_of_a_fault_trace_shows_the_state_after_each_step() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-faults-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svg, html) = (dir.join("f.svg"), dir.join("f.html"));
    replay_drawn(
        &counterexamples().join("faults/no-kill-before-regrant.json"),
        &svg,
        &html,
    );
    let html = std::fs::read_to_string(&html).expect("HTML written");
    let step = |k: usize| -> &str {
        let at = html
            .find(&format!("<li value=\"{k}\">"))
            .unwrap_or_else(|| panic!("no step {k}: {html}"));
        let end = html[at..].find("</ul></li>").map_or(html.len(), |e| at + e);
        &html[at..end]
    };
    let s0 = step(0);
    assert!(s0.starts_with("<li value=\"0\">n1 acquire W"), "{s0}");
    assert!(
        s0.contains("<li>n1: Member epoch 0 M_H Φ M_P W parent n0 script at 1</li>"),
        "{s0}"
    );
    let s5 = step(5);
    for what in [
        "the membership service installs the next epoch",
        "<li>epoch 1 members {n0,n2}</li>",
        "<li>n0: Member epoch 1 M_H W M_P Φ token g2 script at 1</li>",
        "<li>n1: Member epoch 0 M_H W M_P Φ token g1 (cut off) script at 1</li>",
    ] {
        assert!(s5.contains(what), "step 5 shows {what}: {s5}");
    }
    assert!(!html.contains("<li value=\"6\">"), "{html}");
    let svg = std::fs::read_to_string(&svg).expect("SVG written");
    assert!(svg.contains(">membership</text>"), "{svg}");
    assert!(!svg.contains(">the</text>"), "{svg}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A configuration the model cannot be built from is one line and exit 2, before anything
/// is checked or served: a base-model one with too many nodes, a ring whose slots are not
/// a ring (two at 8), a fault model with more nodes than it has room for.
#[test]
fn check_rejects_a_bad_configuration_with_one_line() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, config, says) in [
        ("bad.json", "{ \"nodes\": 99 }".to_string(), ""),
        (
            "ring.json",
            serde_json::json!({
                "model": "ring", "name": "two slots at 8", "variant": "Paper",
                "idents": [8, 8, 32, 48], "initial": 7, "clients": [10]
            })
            .to_string(),
            "not a ring",
        ),
        (
            "faults.json",
            serde_json::json!({
                "model": "faults", "name": "six nodes",
                "scripts": [["acquire W", "release"], [], [], [], [], []]
            })
            .to_string(),
            "the fault model has 2 to 5",
        ),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, config).unwrap();
        for cmd in ["check", "explore"] {
            let out = hilock(
                &[cmd, f.to_str().unwrap(), "--port", "1"][..if cmd == "check" { 2 } else { 4 }],
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {name}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{cmd} {name}: {err}");
            assert!(err.contains(says), "{cmd} {name}: {err}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The subcommands `hilock ARGS --help` lists (clap's "Commands:" section, without `help`)
/// and the summary it gives each.
fn summaries(args: &[&str]) -> Vec<(String, String)> {
    let mut a = args.to_vec();
    a.push("--help");
    let out = hilock(&a);
    assert!(out.status.success(), "hilock {args:?} --help");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let (c, rest) = l
                .trim()
                .split_once(char::is_whitespace)
                .unwrap_or((l.trim(), ""));
            (c != "help").then(|| (c.to_string(), rest.trim().to_string()))
        })
        .collect()
}

/// The subcommands `hilock ARGS --help` lists (clap's "Commands:" section, without `help`).
fn subcommands(args: &[&str]) -> Vec<String> {
    summaries(args).into_iter().map(|(c, _)| c).collect()
}

/// `hilock node`'s summary in `hilock --help` is one whole sentence, the first line of
/// `hilock node --help`, whose text ends with a whole sentence too. (clap takes a doc
/// comment's first paragraph as the summary and drops its final period: a paragraph of
/// several sentences shows there as text cut off after its last one.)
#[test]
fn the_node_summary_in_help_is_one_whole_sentence() {
    let summary = summaries(&[])
        .into_iter()
        .find_map(|(c, s)| (c == "node").then_some(s))
        .expect("hilock --help lists node");
    assert_eq!(
        summary,
        "Run a node from a configuration file until Ctrl-C, SIGTERM or SIGHUP"
    );
    let help = String::from_utf8(hilock(&["node", "--help"]).stdout).unwrap();
    assert!(help.starts_with(&format!("{summary}.\n\n")), "{help}");
    let text = help.split("\nUsage:").next().unwrap().trim_end();
    assert!(
        text.ends_with("its membership service went away."),
        "{text}"
    );
}

/// `docs/cli.md` documents every subcommand clap knows: a `### \`hilock NAME` section for
/// each top-level one, and `hilock PARENT NAME` for each nested one (`ring`, `bakery`,
/// `bakery queue`). A subcommand added without its documentation turns this red.
#[test]
fn docs_cli_md_documents_every_subcommand() {
    let md = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md"),
    )
    .expect("docs/cli.md");
    let top = subcommands(&[]);
    assert!(top.len() >= 10, "{top:?}");
    let mut missing = Vec::new();
    let mut parents: Vec<Vec<String>> = Vec::new();
    for c in &top {
        if !md.contains(&format!("### `hilock {c}")) {
            missing.push(format!("hilock {c}"));
        }
        parents.push(vec![c.clone()]);
    }
    while let Some(p) = parents.pop() {
        let args: Vec<&str> = p.iter().map(String::as_str).collect();
        for c in subcommands(&args) {
            let mut full = p.clone();
            full.push(c);
            let name = format!("hilock {}", full.join(" "));
            let listed = md.contains(&name)
                || md.contains(&format!("`{}`", full[full.len() - 1]))
                    && md.contains(&format!("`hilock {}", p.join(" ")));
            if !listed {
                missing.push(name);
            }
            parents.push(full);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/cli.md does not document: {missing:?}"
    );
}

/// `hilock check` on `file` (relative to the repository) with the object at JSON pointer
/// `at` changed by `edit`: exit 2 and one line on stderr that names `field`, before
/// anything is checked.
fn check_refuses_the_field(
    file: &str,
    at: &str,
    field: &str,
    edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap();
    edit(
        v.pointer_mut(at)
            .and_then(|o| o.as_object_mut())
            .unwrap_or_else(|| panic!("{file}: no object at {at}")),
    );
    let dir =
        std::env::temp_dir().join(format!("hilock-cli-field-{}-{}", std::process::id(), field));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("config.json");
    std::fs::write(&f, v.to_string()).unwrap();
    let out = hilock(&["check", f.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{file} {at} {field}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{file} {at}: {err}");
    assert!(err.contains(field), "{file} {at}: {err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Renames the field `from` (one with a default, so that only the misspelling can be
/// refused) to `to`.
fn rename(
    from: &'static str,
    to: &'static str,
) -> impl FnOnce(&mut serde_json::Map<String, serde_json::Value>) {
    move |o| {
        let v = o.remove(from).unwrap_or_else(|| panic!("no field {from}"));
        o.insert(to.to_string(), v);
    }
}

/// Adds a field `name` (a number) next to the right one.
fn add(name: &'static str) -> impl FnOnce(&mut serde_json::Map<String, serde_json::Value>) {
    move |o| {
        o.insert(name.to_string(), serde_json::json!(1));
    }
}

#[test]
fn check_refuses_a_misspelled_field_in_a_base_model_variant() {
    let f = "spec/counterexamples/configs/naive-reversal-cycle.json";
    check_refuses_the_field(
        f,
        "/variant",
        "forwardng",
        rename("forwarding", "forwardng"),
    );
}

#[test]
fn check_refuses_a_misspelled_field_in_a_bakery_configuration() {
    let f = "spec/counterexamples/configs/bakery-literal.json";
    check_refuses_the_field(f, "", "replica_crashs", add("replica_crashs"));
    check_refuses_the_field(f, "", "bogus", add("bogus"));
    check_refuses_the_field(f, "/variant", "item_exist", add("item_exist"));
    check_refuses_the_field(f, "/mode/Lock", "round", add("round"));
}

#[test]
fn check_refuses_a_misspelled_field_in_a_tree_variant() {
    let f = "spec/counterexamples/configs/tree-slides.json";
    check_refuses_the_field(f, "/variant", "promote", add("promote"));
}

#[test]
fn check_refuses_a_misspelled_field_in_an_agents_variant() {
    let f = "spec/counterexamples/configs/agents-self-wait.json";
    check_refuses_the_field(
        f,
        "/agent_variant",
        "skip_outdate",
        rename("skip_outdated", "skip_outdate"),
    );
    check_refuses_the_field(
        f,
        "/server_variant",
        "grant_coverd",
        rename("grant_covered", "grant_coverd"),
    );
}

#[test]
fn check_refuses_a_misspelled_field_in_a_ring_variant() {
    let f = "models/configs/ring-r1-restart.json";
    check_refuses_the_field(f, "/variant/Hilock", "replicas", add("replicas"));
}

#[test]
fn check_refuses_a_misspelled_field_in_a_fault_model_variant() {
    let f = "models/configs/faults-wwr-crash-reinstall.json";
    check_refuses_the_field(f, "", "forget_shortcut", |o| {
        o.insert(
            "variant".into(),
            serde_json::json!({"epoch_check": true, "kill_before_regrant": true,
                "install_once": true, "forget_shortcut": true}),
        );
    });
}

#[test]
fn check_refuses_a_misspelled_field_in_an_inversion_bound() {
    let f = "spec/counterexamples/configs/inversion-no-inheritance.json";
    check_refuses_the_field(f, "", "sektions", |o| {
        o.insert(
            "blocking".into(),
            serde_json::json!({"hops": 1, "sections": 1, "sektions": 1}),
        );
    });
}

/// An agents configuration with no server, or whose script names a server that is not
/// there, is one line and exit 2 for `check` and `explore` (not an index out of bounds).
#[test]
fn check_and_explore_refuse_agents_servers_out_of_range() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let base: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("spec/counterexamples/configs/agents-self-wait.json"))
            .unwrap(),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("hilock-cli-servers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut none = base.clone();
    none["servers"] = serde_json::json!(0);
    let mut beyond = base.clone();
    beyond["scripts"][1]["locks"][0]["servers"] = serde_json::json!(2);
    let mut crash = base.clone();
    crash["crash"] = serde_json::json!(3);
    for (name, config, says) in [
        ("none.json", none, "at least one server"),
        ("beyond.json", beyond, "agent 1's lock 0 names server S1"),
        ("crash.json", crash, "names server S3"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, config.to_string()).unwrap();
        for cmd in ["check", "explore"] {
            let args = [cmd, f.to_str().unwrap(), "--port", "1"];
            let out = hilock(&args[..if cmd == "check" { 2 } else { 4 }]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {name}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{cmd} {name}: {err}");
            assert!(err.contains(says), "{cmd} {name}: {err}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A trace whose every action the model enables, but of another configuration of the same
/// model, or whose steps do not do what it recorded, or that records a violation its last
/// state does not show, is one line and exit 2, naming the field or the first step that
/// differs.
#[test]
fn explore_refuses_a_trace_that_does_not_do_what_it_recorded() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-recorded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let read = |p: std::path::PathBuf| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let write = |name: &str, v: &serde_json::Value| {
        let f = dir.join(name);
        std::fs::write(&f, v.to_string()).unwrap();
        f
    };
    // The fault and ring models: the configuration the trace embeds, one budget more.
    for (model, file, field) in [
        ("faults", "faults/no-epoch-check.json", "reinstalls"),
        (
            "ring",
            "ring/ring-late-duplicate-locks-for-nobody.json",
            "restarts",
        ),
    ] {
        let trace = read(counterexamples().join(file));
        let mut config = trace["config"].clone();
        config["model"] = model.into();
        let own = write(&format!("{model}-own.json"), &config);
        let n = config[field].as_u64().unwrap_or(0);
        config[field] = (n + 1).into();
        let other = write(&format!("{model}-other.json"), &config);
        let t = counterexamples().join(file);
        explore_fails(
            &other,
            &t,
            &format!("a trace of another configuration: its \"{field}\" is {n}"),
        );
        if model == "faults" {
            // A state the model does not reach there.
            let mut changed = trace.clone();
            let lines = changed["steps"][2]["state"].as_array_mut().unwrap();
            lines[0] = format!("{} (changed)", lines[0].as_str().unwrap()).into();
            explore_fails(&own, &write("faults-state.json", &changed), "step 2 (");
        }
    }
    // The base model: a step whose outputs or state differ from the model's.
    let config = counterexamples().join("configs/release-race-literal.json");
    let race = read(counterexamples().join("release-race-literal.json"));
    let mut quiet = race.clone();
    quiet["steps"][0]["outputs"] = serde_json::json!([]);
    explore_fails(
        &config,
        &write("quiet.json", &quiet),
        "step 0 (n1 acquire IR on L0) does not do what the trace recorded",
    );
    let mut state = race.clone();
    state["steps"][3]["state"]["pending"] = "W".into();
    explore_fails(&config, &write("state.json", &state), "step 3 (");
    // A verdict without the steps that lead to it.
    let mut empty = race.clone();
    empty["steps"] = serde_json::json!([]);
    explore_fails(
        &config,
        &write("empty.json", &empty),
        "the trace records P1 mutual exclusion violated, but its last state (after 0 steps)",
    );
    let mut empty = read(counterexamples().join("tree-slides.json"));
    empty["steps"] = serde_json::json!([]);
    explore_fails(
        &counterexamples().join("configs/tree-slides.json"),
        &write("tree-empty.json", &empty),
        "but its last state (after 0 steps)",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Every failing property's verdict says in words what violates it, naming the
/// transaction, agent, member or node: an agents check's second surrender and
/// transactions that never end, a base-model P5 stopped by a kernel error, a fault model's
/// member whose request is lost.
#[test]
fn check_names_what_violates_in_every_verdict() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-verdicts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let faults = {
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(counterexamples().join("faults/no-epoch-check.json")).unwrap(),
        )
        .unwrap();
        let mut c = v["config"].clone();
        c["model"] = "faults".into();
        let f = dir.join("faults-no-epoch-check.json");
        std::fs::write(&f, c.to_string()).unwrap();
        f
    };
    let base = dir.join("release-first.json");
    std::fs::write(
        &base,
        r#"{"name": "release first", "nodes": 2, "token": 0, "parents": [null, 0],
            "scripts": [["release"], []]}"#,
    )
    .unwrap();
    for (config, words) in [
        (
            counterexamples().join("configs/agents-no-ack.json"),
            &[
                "A2 surrendered on a deadlock a surrender had already been made for",
                "no action is enabled and these transactions never end: A0 (Running), A2 (Running)",
            ][..],
        ),
        (
            faults,
            &["quiescent, but n0, a live member, has run 1 of its 2 operations"][..],
        ),
        (
            base,
            &[
                "P5 liveness violated: nothing is in flight and no script can run, but the kernel \
               rejected a step (n0: ",
            ][..],
        ),
    ] {
        let out = hilock(&[
            "check",
            config.to_str().unwrap(),
            "--out",
            dir.join("out").to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        for w in words {
            assert!(text.contains(w), "{}: {w}: {text}", config.display());
        }
        // No verdict line is empty, and no name is left out.
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.ends_with("VIOLATED") && !config.ends_with("release-first.json") {
                let why = lines.get(i + 1).copied().unwrap_or_default();
                assert!(
                    why.starts_with("    ") && !why.trim().is_empty(),
                    "{l}: {text}"
                );
            }
        }
        assert!(!text.contains("but  has"), "{text}");
    }
    for e in std::fs::read_dir(dir.join("out")).unwrap() {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap();
        if let Some(why) = v.get("violation") {
            assert!(why.as_str().is_some_and(|w| !w.is_empty()), "{v}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A passing configuration's P6 witness trace is labelled as the witness, not as a
/// failure: by `hilock replay` (its verdict), `replay --html` (title and heading) and
/// `explore --trace` (its last state).
#[test]
fn a_p6_witness_is_labelled_a_witness_by_replay_and_explore() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-witness-{}", std::process::id()));
    let config = configs().join("upgrade-chain4.json");
    let out = hilock(&[
        "check",
        config.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let witness = dir.join("upgrade-chain4.p6-bypass-witness.trace.json");
    assert!(witness.exists(), "{text}");
    assert!(text.contains("a request bypassed once"), "{text}");
    let html = dir.join("w.html");
    let out = hilock(&[
        "replay",
        witness.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let replay = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{replay}");
    let verdict = replay
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_default();
    assert!(
        verdict.contains("P6 witness: a request is bypassed once") && !verdict.contains("violated"),
        "{replay}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    for tag in ["title", "h1"] {
        let at = page.find(&format!("<{tag}>")).expect(tag);
        let end = page[at..].find(&format!("</{tag}>")).expect(tag) + at;
        assert!(
            page[at..end].contains("P6 witness") && !page[at..end].contains("violated"),
            "{}",
            &page[at..end]
        );
    }
    let (_, line, err) = explore_url(&config, &witness);
    assert!(line.contains("/#/steps/0/"), "{line} {err}");
    assert!(
        err.contains("the witness, not a failure") && !err.contains("fails"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `hilock replay` of a trace with a step by a node the trace does not list is one line
/// and exit 2, as `hilock explore` refuses it (not drawn on another node's lane).
#[test]
fn replay_refuses_a_step_by_an_unknown_node() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-unknown-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(counterexamples().join("release-race-literal.json")).unwrap(),
    )
    .unwrap();
    v["steps"][2]["node"] = "n9".into();
    let f = dir.join("n9.json");
    std::fs::write(&f, v.to_string()).unwrap();
    for html in [false, true] {
        let page = dir.join("x.html");
        let mut args = vec!["replay", f.to_str().unwrap()];
        if html {
            args.extend(["--html", page.to_str().unwrap()]);
        }
        let out = hilock(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("step 2: unknown node 'n9'"), "{err}");
        assert!(!page.exists());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `hilock replay` refuses, with one line and exit 2, what it would misdraw or lose: a node
/// the trace does not list named in a step's recorded state (its parent, a child, a queued
/// requester), a model trace whose step is not a step object, and a diagram file that is
/// the trace itself or is given for both `--svg` and `--html` (the trace stays as it was).
#[test]
fn replay_refuses_unknown_state_nodes_non_steps_and_writing_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let base =
        std::fs::read_to_string(counterexamples().join("release-race-literal.json")).unwrap();
    let refused = |text: &str, extra: &[&str], want: &str| {
        let f = dir.path().join("t.json");
        std::fs::write(&f, text).unwrap();
        let mut args = vec!["replay", f.to_str().unwrap()];
        args.extend(extra);
        let out = hilock(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(want), "{want}: {err}");
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            text,
            "the trace is kept"
        );
    };
    for edit in [
        serde_json::json!({"parent": "n9"}),
        serde_json::json!({"children": {"n9": "R"}}),
        serde_json::json!({"queue": ["n9:W"]}),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&base).unwrap();
        for (k, x) in edit.as_object().unwrap() {
            v["steps"][3]["state"][k] = x.clone();
        }
        refused(&v.to_string(), &[], "step 3: unknown node 'n9'");
    }
    for (nodes, want) in [
        (
            serde_json::json!(["n0", "n0", "n1", "n2", "n3"]),
            "names node 'n0' twice",
        ),
        (serde_json::json!([]), "names no node"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&base).unwrap();
        v["nodes"] = nodes;
        refused(&v.to_string(), &[], want);
    }
    let agents = std::fs::read_to_string(counterexamples().join("agents-swap.json")).unwrap();
    for not_a_step in [serde_json::json!(5), serde_json::json!("S0: grant")] {
        let mut v: serde_json::Value = serde_json::from_str(&agents).unwrap();
        v["steps"][1] = not_a_step;
        refused(
            &v.to_string(),
            &[],
            "step 1 of this hilock-agents-trace/1 trace is not a step",
        );
    }
    let f = dir.path().join("t.json");
    let page = dir.path().join("p.html");
    refused(
        &base,
        &["--svg", f.to_str().unwrap()],
        "is the trace being replayed",
    );
    refused(
        &base,
        &["--html", f.to_str().unwrap()],
        "is the trace being replayed",
    );
    refused(
        &base,
        &[
            "--svg",
            page.to_str().unwrap(),
            "--html",
            page.to_str().unwrap(),
        ],
        "given for both --svg and --html",
    );
    // The same files under other names: a hard link to the trace, `DIR/./p.html`.
    let link = dir.path().join("link.json");
    std::fs::write(&f, &base).unwrap();
    std::fs::hard_link(&f, &link).unwrap();
    refused(
        &base,
        &["--svg", link.to_str().unwrap()],
        "is the trace being replayed",
    );
    let dotted = dir.path().join(".").join("p.html");
    refused(
        &base,
        &[
            "--svg",
            page.to_str().unwrap(),
            "--html",
            dotted.to_str().unwrap(),
        ],
        "given for both --svg and --html",
    );
    assert!(!page.exists());
}

/// The time `hilock check` prints on stderr is its whole wall time: the search, the
/// shortest counterexamples and the traces (not the search alone).
#[test]
fn check_reports_its_whole_wall_time() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-walltime-{}", std::process::id()));
    let config = counterexamples().join("configs/agents-no-ack.json");
    let start = std::time::Instant::now();
    let out = hilock(&[
        "check",
        config.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    let wall = start.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    let printed = err
        .lines()
        .find_map(|l| l.strip_prefix("checked in "))
        .unwrap_or_else(|| panic!("{err}"));
    let secs = if let Some(ms) = printed.strip_suffix("ms") {
        ms.parse::<f64>().unwrap() / 1e3
    } else if let Some(us) = printed.strip_suffix("µs") {
        us.parse::<f64>().unwrap() / 1e6
    } else {
        printed.strip_suffix('s').unwrap().parse::<f64>().unwrap()
    };
    assert!(
        secs >= 0.8 * wall && secs <= wall,
        "printed {printed}, the process took {wall:.3}s"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--out FILE` where FILE is an existing file: refused before the check, saying it is not
/// a directory.
#[test]
fn check_out_an_existing_file_says_it_is_not_a_directory() {
    let dir = std::env::temp_dir().join(format!("hilock-cli-outfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let out = hilock(&[
        "check",
        configs().join("star3-r-w.json").to_str().unwrap(),
        "--out",
        file.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a directory"), "{err}");
    assert!(!err.contains("os error"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
