//! Every engine's model covers its whole API: each public operation of an engine's kernel
//! (a public function of its client and server, or a variant of its input type) is driven
//! by a model action, or is listed here as a query or a sabotage switch, or is named as
//! not modelled with the reason (each engine's chapter under `docs/engines/`, "Operations
//! and adversaries"). An operation added to a kernel without a model action turns the
//! engine's check red, and so does a model that stops driving one.
//!
//! The checks read the sources as text: an enum's variants, a type's `pub fn`s, and
//! whether the model's source names or calls them.

use std::path::PathBuf;

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The variants of `pub enum NAME` in `src` (lines of four spaces and a capital).
fn variants(src: &str, name: &str) -> Vec<String> {
    let start = src
        .find(&format!("pub enum {name}"))
        .unwrap_or_else(|| panic!("no enum {name}"));
    src[start..]
        .lines()
        .skip(1)
        .take_while(|l| *l != "}")
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect()
        })
        .collect()
}

/// The names of the methods declared `pub fn` (four spaces in) in `src`.
fn pub_fns(src: &str) -> Vec<String> {
    src.lines()
        .filter_map(|l| l.strip_prefix("    pub fn "))
        .map(|l| {
            l.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Asserts that `model` names `ENUM::V` for every variant `V` of `variants`.
fn each_variant_named(model: &str, enum_name: &str, variants: &[String], who: &str) {
    for v in variants {
        assert!(
            model.contains(&format!("{enum_name}::{v}")),
            "{who} never gives {enum_name}::{v}"
        );
    }
}

/// The source before its unit tests.
fn code(src: &str) -> &str {
    &src[..src.find("#[cfg(test)]").unwrap_or(src.len())]
}

/// The token engine: every `Input` of a site (`kernel/src/msg.rs`: acquire, try-acquire,
/// cancel, release, upgrade, set priority, deliver) is given by one of its models (`models/src/token.rs`,
/// `inversion.rs`, `faults.rs`); every public function of the recovery layer's `FaultSite`
/// is driven by an action of the fault model (`models/src/faults.rs`) or is a query.
#[test]
fn the_token_models_drive_every_input_and_fault_operation() {
    let models: String = ["token", "inversion", "faults"]
        .iter()
        .map(|m| read(&format!("models/src/{m}.rs")))
        .collect();
    let inputs = variants(&read("kernel/src/msg.rs"), "Input");
    assert!(inputs.len() >= 7, "{inputs:?}");
    assert!(inputs.iter().any(|i| i == "TryAcquire"), "{inputs:?}");
    assert!(inputs.iter().any(|i| i == "Cancel"), "{inputs:?}");
    each_variant_named(&models, "Input", &inputs, "no token model");
    let faults = read("models/src/faults.rs");
    // (function, the fault model's action that drives it; "" for a query)
    const FAULT_API: &[(&str, &str)] = &[
        ("new", "Restart"),
        ("joining", "Restart"),
        ("with_recovery", "Restart"),
        ("site", ""),
        ("epoch", ""),
        ("standing", ""),
        ("recovery", ""),
        ("accepts", ""),
        ("expire_lease", "Expire"),
        ("report", "Suspect"),
        ("install", "Install"),
    ];
    let recovery = read("kernel/src/token/recovery.rs");
    for f in pub_fns(code(&recovery)) {
        let (_, action) = FAULT_API
            .iter()
            .find(|(n, _)| *n == f)
            .unwrap_or_else(|| panic!("FaultSite::{f} is not in FAULT_API"));
        if !action.is_empty() {
            assert!(
                faults.contains(&format!(".{f}(")) || faults.contains(&format!("::{f}(")),
                "the fault model never calls FaultSite::{f}"
            );
            assert!(faults.contains(action), "no fault action {action}");
        }
    }
}

/// The tree engine: every kind of operation (`OpKind`: insert, remove) is run by the
/// model's users (`models/src/tree.rs`).
#[test]
fn the_tree_model_runs_every_kind_of_operation() {
    let model = read("models/src/tree.rs");
    let kinds = variants(&read("kernel/src/tree/ops.rs"), "OpKind");
    assert!(kinds.len() >= 2, "{kinds:?}");
    each_variant_named(&model, "OpKind", &kinds, "the tree model");
}

/// The bakery engine: every `Input` of a client (acquire, release, work, done, wake, a
/// timer tick, a replica's reply) is given by the model (`models/src/bakery.rs`).
#[test]
fn the_bakery_model_gives_every_client_input() {
    let model = read("models/src/bakery.rs");
    let inputs = variants(&read("kernel/src/bakery/client.rs"), "Input");
    assert!(inputs.len() >= 7, "{inputs:?}");
    each_variant_named(&model, "Input", &inputs, "the bakery model");
}

/// The bakery's adversaries: every action of the model (`BAction`) is named in the
/// "Operations and adversaries" table of `docs/engines/bakery.md`, the model restarts a
/// client through `Client::advance_clock`, and the table has no row left "not modelled".
/// An action added without its row, a row that claims an action the model lost, or a
/// restart that no longer moves the clock turns this red.
#[test]
fn the_bakery_docs_name_every_model_action() {
    let model = read("models/src/bakery.rs");
    let docs = read("docs/engines/bakery.md");
    let start = docs
        .find("## Operations and adversaries")
        .expect("the section in docs/engines/bakery.md");
    let section = &docs[start..];
    let table: String = section
        .lines()
        .skip_while(|l| !l.starts_with("| operation or adversary |"))
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    let actions = variants(&model, "BAction");
    assert!(actions.len() >= 11, "{actions:?}");
    for a in &actions {
        assert!(
            table.contains(&format!("`{a}`")),
            "the bakery's adversary table does not name the action {a}"
        );
    }
    for named in table.split('`').skip(1).step_by(2) {
        if named.chars().all(|c| c.is_ascii_alphabetic()) && named.starts_with(char::is_uppercase) {
            let known =
                actions.iter().any(|a| a == named) || ["RestartAt", "BakeryModel"].contains(&named);
            assert!(known, "the table names `{named}`, which is no model action");
        }
    }
    assert!(
        model.contains(".advance_clock("),
        "a restart moves no clock"
    );
    assert!(
        !table.contains("not modelled"),
        "a row of the bakery's adversary table is not modelled"
    );
}

/// How the ring model covers one public function of the ring's client or server.
#[derive(Clone, Copy, Debug)]
enum Cov {
    /// Driven by this model action: the model calls the function, and the action exists.
    Action(&'static str),
    /// Called only to break the server on purpose (`Sabotage`).
    Sabotage,
    /// Called to set the server up as a configuration asks (`RingModel::table`).
    Config,
    /// Reads state; changes nothing.
    Query,
}

/// Every public function of `ChordClient` and `RingServer`, and how the model covers it
/// (`docs/engines/ring.md`, "Operations and adversaries").
const RING_API: &[(&str, Cov)] = &[
    // ChordClient
    ("new", Cov::Action("Restart")),
    ("with_incarnation", Cov::Action("Restart")),
    ("id", Cov::Query),
    ("incarnation", Cov::Query),
    ("view", Cov::Query),
    ("waiting", Cov::Query),
    ("seq", Cov::Query),
    ("sent_in", Cov::Query),
    ("start", Cov::Action("Start")),
    ("learn", Cov::Action("Join")),
    ("timeout", Cov::Action("Timeout")),
    ("abandon", Cov::Action("Abandon")),
    ("resume_after", Cov::Action("Restart")),
    ("on_reply", Cov::Action("Deliver")),
    // RingServer
    ("without_retry_fence", Cov::Sabotage),
    ("with_retry_fence", Cov::Sabotage),
    ("without_request_memory", Cov::Sabotage),
    ("merging_late_hand_overs", Cov::Sabotage),
    ("without_deferred_unlocks", Cov::Sabotage),
    ("ignoring_full_replicas", Cov::Sabotage),
    ("with_table", Cov::Config),
    ("slots", Cov::Query),
    // `ChordClient::holder` and `RingServer::holder`.
    ("holder", Cov::Query),
    ("holding", Cov::Query),
    ("settled_in", Cov::Query),
    ("pending", Cov::Query),
    ("writing", Cov::Query),
    ("stop", Cov::Action("Expire")),
    ("stopped", Cov::Query),
    ("waits_for", Cov::Query),
    ("reconnected", Cov::Action("Heal")),
    ("step", Cov::Action("Deliver")),
];

/// The model's actions cover the ring's whole API: every public function of the kernel's
/// `ChordClient` (`kernel/src/ring/client.rs`) and `RingServer`
/// (`kernel/src/ring/replicated.rs`) is listed in [`RING_API`], and each one listed as
/// driven by an action (or by a sabotage) is called by the model
/// (`models/src/ring.rs`) and its action exists. A public function added to either type
/// without a model action (or a reason it needs none) turns this red, and so does a model
/// that stops calling one. `Op::Delete` (the paper's `s_dellock`) is the one operation
/// outside the model: hilock's server refuses it (`ChordError::WrongVariant`), and the
/// model's paper clients only lock and unlock.
#[test]
fn the_model_drives_every_public_operation_of_the_ring() {
    let model = read("models/src/ring.rs");
    let mut unlisted = Vec::new();
    for file in ["kernel/src/ring/client.rs", "kernel/src/ring/replicated.rs"] {
        for name in pub_fns(code(&read(file))) {
            if !RING_API.iter().any(|(n, _)| *n == name) {
                unlisted.push(format!("{file}: {name}"));
            }
        }
    }
    assert!(unlisted.is_empty(), "not in RING_API: {unlisted:?}");
    for (name, cov) in RING_API {
        let called = model.contains(&format!(".{name}(")) || model.contains(&format!("::{name}("));
        match cov {
            Cov::Action(a) => {
                assert!(called, "the model never calls {name}");
                assert!(
                    model.contains(&format!("RAction::{a}")),
                    "no action {a} for {name}"
                );
            }
            Cov::Sabotage | Cov::Config => assert!(called, "the model never calls {name}"),
            Cov::Query => {}
        }
    }
    for op in ["Op::Lock", "Op::Unlock", "Op::TakeOver"] {
        assert!(model.contains(op), "the model's clients never send {op}");
    }
}

/// The model drives every input of the agents engine's API. Each variant of
/// `AgentInput` (what a client and the network give an agent: lock, a queue's
/// announcement, a server down, finish) is built by the model (`models/src/agents.rs`),
/// and each variant of `ServerMsg` (an agent's messages to a lock server) is sent by the
/// kernel's agent outside its unit tests — the model delivers every message an agent
/// sends to its server — except `ServerMsg::Cancel`, which the server handles and no agent
/// sends (`docs/engines/agents.md`, "Operations and adversaries"). A variant added
/// without a model action, or a model that stops building one, turns this red.
#[test]
fn the_model_drives_every_input_of_the_agents_engine() {
    let model = read("models/src/agents.rs");
    let agent = read("kernel/src/agents/transaction.rs");
    let agent_code = code(&agent);
    let inputs = variants(&agent, "AgentInput");
    assert!(inputs.len() >= 4, "{inputs:?}");
    each_variant_named(&model, "AgentInput", &inputs, "the agents model");
    let messages = variants(&read("kernel/src/agents/mod.rs"), "ServerMsg");
    assert!(messages.len() >= 4, "{messages:?}");
    for v in &messages {
        let sent = agent_code.contains(&format!("ServerMsg::{v}"));
        if v == "Cancel" {
            assert!(
                !sent,
                "agents now send Cancel: model it and update the docs"
            );
        } else {
            assert!(sent, "no agent sends ServerMsg::{v}");
        }
    }
    assert!(
        model.contains("fn server_step"),
        "the model delivers agents' messages to servers"
    );
}
