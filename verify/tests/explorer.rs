//! The Stateright Explorer serves a base-model configuration (`hilock explore <config>`
//! calls the same `hilock_models::check::explore`): its page, its status JSON and its state
//! API answer over plain HTTP.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;

use hilock_models::check::explore;
use hilock_models::token::ModelConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// `GET path` over HTTP/1.1 with `Connection: close`; returns (status line, body).
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

#[test]
fn explorer_serves_page_status_and_states() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/configs/star3-r-w.json"),
    )
    .expect("example configuration");
    let cfg = ModelConfig::from_json(&text).expect("valid configuration");
    // A free port below the ephemeral range, which no outgoing connection takes before
    // the Explorer binds it.
    let addr = ports::free_addr();
    // `explore` blocks while it serves: run it on a thread the test process abandons.
    std::thread::spawn(move || {
        if let Err(e) = explore(&cfg, addr) {
            eprintln!("explore: {e}");
        }
    });
    let t = Instant::now();
    let (status, page) = loop {
        match get(addr, "/") {
            Ok(r) => break r,
            Err(e) if t.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("explorer did not answer on {addr}: {e}"),
        }
    };
    assert!(status.contains("200"), "GET /: {status}");
    assert!(
        page.to_lowercase().contains("<html"),
        "GET / is the Explorer page"
    );

    let (status, json) = get(addr, "/.status").expect("GET /.status");
    assert!(status.contains("200"), "GET /.status: {status}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("status is JSON");
    assert!(
        v["model"].as_str().unwrap_or("").contains("BaseModel"),
        "{v}"
    );
    let props: Vec<&str> = v["properties"]
        .as_array()
        .expect("properties")
        .iter()
        .filter_map(|p| p[1].as_str())
        .collect();
    assert!(props.contains(&"P1 mutual exclusion"), "{props:?}");
    assert!(props.contains(&"P6 FIFO bypass ≤ 0"), "{props:?}");

    // The state API: the initial state, then its successors.
    let (status, json) = get(addr, "/.states").expect("GET /.states");
    assert!(status.contains("200"), "GET /.states: {status}");
    let init: serde_json::Value = serde_json::from_str(&json).expect("states are JSON");
    let init = init.as_array().expect("list of initial states");
    assert_eq!(init.len(), 1);
    assert!(
        init[0]["state"].as_str().unwrap_or("").contains("n0@0"),
        "{init:?}"
    );
    let (status, json) = get(addr, "/.states/0").expect("GET /.states/0");
    assert!(status.contains("200"), "GET /.states/0: {status}");
    let next: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let next = next.as_array().expect("successors");
    assert_eq!(
        next.len(),
        3,
        "each of the three nodes can run its first operation"
    );
    assert!(
        next[0]["action"]
            .as_str()
            .unwrap_or("")
            .contains(" acquire "),
        "{next:?}"
    );
    let (status, _) = get(addr, "/.states/0/99").expect("GET invalid path");
    assert!(status.contains("404"), "an invalid action index: {status}");
}

/// The Explorer's text of the last step of the path `encoded` (`#/steps/…`'s action
/// indices): each index picks among the actions enabled in the state reached so far.
fn last_step_text<M: stateright::Model>(model: &M, encoded: &str) -> String
where
    M::State: Clone + std::fmt::Debug,
    M::Action: Copy,
{
    let mut st = model.init_states().remove(0);
    let mut last = None;
    for i in encoded.split('/').skip(1) {
        let mut actions = Vec::new();
        model.actions(&st, &mut actions);
        let a = actions[i.parse::<usize>().expect("index")];
        last = Some((st.clone(), a));
        st = model.next_state(&st, a).expect("enabled");
    }
    let (before, a) = last.expect("a step");
    model.format_step(&before, a).expect("text")
}

fn counterexamples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/counterexamples")
}

/// Every saved counterexample (`spec/counterexamples/*.json`; its configuration in
/// `configs/`) of every model — base, inversion, tree, agents, bakery — replays through its
/// configuration's model to a state that violates the property it names (for an
/// `eventually` property, to its last state): `hilock explore CONFIG --trace FILE` opens it
/// at the failing state.
#[test]
fn saved_counterexamples_open_at_their_failing_state() {
    let mut per_format = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(counterexamples()).expect("counterexamples") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("trace");
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let name = p.file_name().expect("name");
        let cfg = std::fs::read_to_string(counterexamples().join("configs").join(name))
            .unwrap_or_else(|e| panic!("{}: no configuration in configs/: {e}", p.display()));
        let format = v["format"].as_str().unwrap_or("").to_string();
        let (opened, property, steps) = if format == "hilock-trace/1" {
            let cfg = ModelConfig::from_json(&cfg).expect("configuration");
            let trace = hilock_models::open::parse_base_trace(&text).expect("a base trace");
            let opened = hilock_models::open::open_base(&cfg, &trace)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let verdict = trace.verdict.clone().unwrap_or_default();
            let property = verdict.split(" violated").next().unwrap_or("").to_string();
            (opened, property, trace.steps.len())
        } else {
            let cfg: hilock_models::open::OtherConfig =
                serde_json::from_str(&cfg).expect("configuration");
            let opened = hilock_models::open::open_other(&cfg, &v)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let steps = v["steps"].as_array().map_or(0, Vec::len);
            (
                opened,
                v["property"].as_str().unwrap_or("").to_string(),
                steps,
            )
        };
        if !property.contains("eventually") {
            assert!(
                opened.violated.contains(&property),
                "{}: the last state violates {:?}, the trace says {property}",
                p.display(),
                opened.violated
            );
        }
        assert_eq!(opened.steps, steps);
        assert_eq!(opened.encoded.split('/').count(), steps + 1);
        *per_format.entry(format).or_insert(0) += 1;
    }
    for f in [
        "hilock-trace/1",
        "hilock-tree-trace/1",
        "hilock-agents-trace/1",
        "hilock-bakery-trace/1",
        "hilock-inversion-trace/1",
    ] {
        assert!(
            per_format.get(f).is_some_and(|n| *n > 0),
            "{f}: {per_format:?}"
        );
    }
}

/// Every saved counterexample of the ring and fault models (`spec/counterexamples/ring/`,
/// `faults/`) replays through the configuration it embeds, as a `"model": "ring"` or
/// `"faults"` configuration file holds it, to a state that violates the property it names
/// (for the ring's `eventually` property, to its last state): `hilock explore` opens it
/// given that configuration.
#[test]
fn saved_ring_and_fault_counterexamples_open_with_their_configuration() {
    let mut n = 0;
    for (dir, model) in [("ring", "ring"), ("faults", "faults")] {
        for e in std::fs::read_dir(counterexamples().join(dir)).expect("counterexamples") {
            let p = e.expect("entry").path();
            if p.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("trace")).expect("JSON");
            let mut cfg = v["config"].clone();
            cfg["model"] = model.into();
            let cfg: hilock_models::open::OtherConfig =
                serde_json::from_value(cfg).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let opened = hilock_models::open::open_other(&cfg, &v)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let property = v["property"].as_str().unwrap_or("").to_string();
            if property != hilock_models::ring::LIVE {
                assert!(
                    opened.violated.contains(&property),
                    "{}: the last state violates {:?}, the trace says {property}",
                    p.display(),
                    opened.violated
                );
            }
            let actions = v["steps"].as_array().map_or(0, |s| {
                s.iter()
                    .filter(|s| !s.is_object() || s.get("action").is_some())
                    .count()
            });
            assert_eq!(opened.steps, actions, "{}", p.display());
            n += 1;
        }
    }
    assert!(n >= 8, "{n} traces");
}

/// The Explorer's text of the last step of every saved fault-model counterexample marks the
/// violation as the other models' do: `⚠ violates: <property>` and the note that the
/// Properties pane does not judge that state, above the state after the step.
#[test]
fn the_explorer_marks_a_fault_counterexamples_violation() {
    let mut n = 0;
    for e in std::fs::read_dir(counterexamples().join("faults")).expect("counterexamples") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("trace")).expect("JSON");
        let cfg: hilock_models::faults::FaultConfig =
            serde_json::from_value(v["config"].clone()).expect("configuration");
        let mut other = v["config"].clone();
        other["model"] = "faults".into();
        let other: hilock_models::open::OtherConfig =
            serde_json::from_value(other).expect("configuration");
        let opened = hilock_models::open::open_other(&other, &v).expect("it replays");
        let model = cfg.into_model();
        let step = last_step_text(&model, &opened.encoded);
        let property = v["property"].as_str().expect("property");
        let last_state = v["steps"]
            .as_array()
            .and_then(|s| s.last())
            .and_then(|s| s["state"].as_array())
            .expect("the last state");
        assert!(
            step.contains(&format!("⚠ violates: {property}")),
            "{}: {step}",
            p.display()
        );
        assert!(
            step.contains(hilock_models::check::PANE_NOTE),
            "{}: {step}",
            p.display()
        );
        for line in last_state {
            let line = line.as_str().expect("a line");
            assert!(step.contains(line), "{}: {line} in {step}", p.display());
        }
        n += 1;
    }
    assert!(n >= 4, "{n} traces");
}

/// A failing check (here the literal token branch, which deadlocks) writes its
/// configuration and counterexamples for the Explorer and says how to open each: the
/// command and the URL of the failing state.
#[test]
fn a_failing_check_prints_how_to_open_it() {
    let cfg = ModelConfig::star(
        "tokenable request from a non-child, literal token branch",
        &[&[], &["acquire R", "release"], &["acquire IR", "release"]],
    )
    .with_variant(hilock_kernel::Variant {
        tokenable_transfers: false,
        ..hilock_kernel::Variant::HILOCK
    });
    let r = hilock_models::check::check(&cfg, |_, _, _| {}).expect("check");
    assert!(!r.ok());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-explorer-failing-check");
    let text = hilock_models::open::save_for_explorer(&cfg, &r, &dir).expect("saved");
    let config = dir.join("tokenable-request-from-a-non-child-literal-token-branch.config.json");
    let trace = dir
        .join("tokenable-request-from-a-non-child-literal-token-branch.p4-no-deadlock.trace.json");
    let cmd = format!(
        "hilock explore {} --trace {}",
        config.display(),
        trace.display()
    );
    assert!(text.contains(&cmd), "{text}");
    assert!(
        text.contains("then browse http://127.0.0.1:3000/#/steps/0/"),
        "{text}"
    );
    // What was written opens at the failing state.
    let cfg2 = ModelConfig::from_json(&std::fs::read_to_string(&config).expect("config"))
        .expect("configuration");
    assert_eq!(cfg2, cfg);
    let t = hilock_models::open::parse_base_trace(&std::fs::read_to_string(&trace).expect("trace"))
        .expect("trace");
    let opened = hilock_models::open::open_base(&cfg2, &t).expect("replays");
    assert!(opened.violated.iter().any(|p| p == "P4 no deadlock"));
    assert!(text.contains(&opened.encoded));
}

/// A passing configuration's P6 witness (a request bypassed k times, the least bound k
/// reached) opens as the witness: no property fails at its last state, and the Explorer's
/// step text says the request was bypassed instead of `⚠ violates: P6 FIFO bypass ≤ 0`.
#[test]
fn a_p6_witness_opens_as_a_witness_not_a_failure() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../models/configs/upgrade-chain4.json"),
    )
    .expect("configuration");
    let cfg = ModelConfig::from_json(&text).expect("configuration");
    let report = hilock_models::check::check_shortest(&cfg, |_, _, _| {}).expect("check");
    assert_eq!(report.fifo_bound, Some(1));
    let w = report.fifo_witness.expect("a witness");
    let verdict = w.verdict.clone().unwrap_or_default();
    assert!(
        verdict.starts_with(hilock_models::check::WITNESS_VERDICT) && !verdict.contains("violated"),
        "{verdict}"
    );
    let opened = hilock_models::open::open_base(&cfg, &w).expect("it replays");
    assert!(opened.violated.is_empty(), "{:?}", opened.violated);
    assert_eq!(opened.witness.as_deref(), Some(verdict.as_str()));
    // The Explorer's text of the last step.
    let model = cfg.clone().into_model_with::<1>().expect("model");
    let step = last_step_text(&model, &opened.encoded);
    assert!(!step.contains("⚠ violates"), "{step}");
    assert!(
        step.contains("P6: a request has been bypassed once"),
        "{step}"
    );
}
