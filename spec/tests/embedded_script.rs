//! The firmware's scenario tables (`embedded/src/script.rs`, compiled here as it is on the
//! Cortex-M4) against the shared harness and the scenario files:
//!
//! - the schedule, trees, priorities and inheritance are those of the JSON file;
//! - running the schedule through `hilock_harness::Cluster` (the one harness, with its safety
//!   checks after every step) fires exactly the rules the firmware expects at every step and
//!   ends in exactly the end states it expects;
//! - the JSON runner passes the scenario and its final states agree with the table.
//!
//! The firmware (`embedded/run-qemu.sh`) checks its own fixed-capacity delivery loop against
//! the same tables on the target. `HILOCK_PRINT_EMBEDDED_TABLES=1` prints the tables from the
//! harness run (to regenerate them after a deliberate kernel change).

#[path = "../../embedded/src/script.rs"]
#[allow(dead_code)]
mod script;

use hilock_kernel::{Inheritance, Input, LockId, Mode, NodeId, Rule, Variant};
use hilock_spec::scenario::Op as JsonOp;
use hilock_spec::{Scenario, System};
use script::{End, Op, Sched, Script, StepRules, LOCKS};

fn load(s: &Script) -> Scenario {
    let path = hilock_spec::scenarios_dir().join(s.file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    Scenario::from_json(&text).expect("scenario")
}

fn id(s: &Script, name: &str) -> u16 {
    s.nodes
        .iter()
        .position(|n| *n == name)
        .unwrap_or_else(|| panic!("{}: unknown node {name}", s.file)) as u16
}

/// The table's transcription of the JSON file: nodes, trees, inheritance, priorities and the
/// schedule with every `"X"` replaced by X's next script operation.
fn check_transcription(s: &Script) {
    let j = load(s);
    assert_eq!(j.nodes, s.nodes, "{}: nodes", s.file);
    let mut trees = vec![(j.token.clone(), j.parents.clone())];
    trees.extend(j.locks.iter().map(|t| (t.token.clone(), t.parents.clone())));
    for l in 0..LOCKS {
        let want: Vec<Option<u16>> = match trees.get(l) {
            Some((token, parents)) => s
                .nodes
                .iter()
                .map(|n| {
                    if *n == token.as_str() {
                        None
                    } else {
                        Some(id(s, &parents[*n]))
                    }
                })
                .collect(),
            None => (0..s.nodes.len()).map(|i| (i != 0).then_some(0)).collect(),
        };
        assert_eq!(s.parents[l], want.as_slice(), "{}: lock {l} tree", s.file);
    }
    let inh = match j.inheritance.as_deref() {
        None | Some("none") => Inheritance::None,
        Some("pcep") => Inheritance::Pcep,
        Some("pip") => Inheritance::Pip,
        Some(o) => panic!("{o}"),
    };
    assert_eq!(s.inheritance, inh, "{}: inheritance", s.file);
    assert!(
        j.ceilings.is_empty(),
        "{}: ceilings are not transcribed",
        s.file
    );
    let prios: Vec<(u16, u8)> = j.priorities.iter().map(|(n, p)| (id(s, n), *p)).collect();
    assert_eq!(s.priorities, prios.as_slice(), "{}: priorities", s.file);
    let mut next = vec![0usize; s.nodes.len()];
    let mut sched = Vec::new();
    for e in j.schedule.as_ref().expect("a fixed schedule") {
        let e = e.trim();
        sched.push(if e == "*" {
            Sched::All
        } else if let Some((a, b)) = e.split_once("->") {
            Sched::Deliver(id(s, a.trim()), id(s, b.trim()))
        } else {
            let n = id(s, e);
            let op = &j.scripts[e][next[n as usize]];
            next[n as usize] += 1;
            Sched::Op(
                n,
                match JsonOp::parse(op).expect("op") {
                    JsonOp::Acquire(m, l) => Op::Acquire(l, m),
                    JsonOp::Release(l) => Op::Release(l),
                    JsonOp::Upgrade(l) => Op::Upgrade(l),
                    JsonOp::Priority(_) => panic!("{}: priority ops are not transcribed", s.file),
                },
            )
        });
    }
    assert_eq!(s.schedule, sched.as_slice(), "{}: schedule", s.file);
}

/// Runs the table's schedule through the harness; returns (node, rules) of every step and
/// the end state of every node and lock.
fn run_on_cluster(s: &Script) -> (Vec<(u16, Vec<Rule>)>, Vec<End>) {
    let n = s.nodes.len();
    let mut sys = System::hilock(n, |l, me| {
        s.parents
            .get(l.idx())
            .map_or((me.0 != 0).then_some(NodeId(0)), |p| {
                p[me.idx()].map(NodeId)
            })
    })
    .expect("system");
    let variant = Variant {
        inheritance: s.inheritance,
        ..Variant::HILOCK
    };
    sys.configure(|site| site.with_variant(variant));
    let mut steps = Vec::new();
    let mut record = |sys: &System, node: u16, rules: hilock_kernel::RuleSet| {
        sys.check_safety().expect("safety");
        steps.push((node, rules.iter().collect::<Vec<_>>()));
    };
    for &(node, base) in s.priorities {
        let st = sys
            .input(NodeId(node), Input::SetPriority { base })
            .expect("priority");
        record(&sys, node, st.rules);
    }
    for e in s.schedule {
        match *e {
            Sched::Op(node, op) => {
                let input = match op {
                    Op::Acquire(l, mode) => Input::Acquire {
                        lock: LockId(l),
                        mode,
                    },
                    Op::Release(l) => Input::Release { lock: LockId(l) },
                    Op::Upgrade(l) => Input::Upgrade { lock: LockId(l) },
                };
                let st = sys.input(NodeId(node), input).expect("input");
                record(&sys, node, st.rules);
            }
            Sched::Deliver(a, b) => {
                let (_, r) = sys.deliver(NodeId(a), NodeId(b)).expect("in flight");
                record(&sys, b, r.expect("deliver").rules);
            }
            Sched::All => {
                while let Some((a, b)) = sys.oldest_channel() {
                    let (_, r) = sys.deliver(a, b).expect("in flight");
                    record(&sys, b.0, r.expect("deliver").rules);
                }
            }
        }
    }
    let mut end = Vec::new();
    for i in 0..n {
        let site = sys.site(NodeId(i as u16));
        for l in 0..LOCKS {
            let k = site.lock(LockId(l as u16)).expect("lock");
            end.push(End {
                node: i as u16,
                lock: l as u16,
                token: k.has_token(),
                parent: k.parent().filter(|_| !k.has_token()).map(|p| p.0),
                owned: k.owned(),
                held: k.held(),
                pending: k.pending_mode(),
                queue: k.queue().len() as u8,
                effective: site.priorities().effective,
            });
        }
    }
    (steps, end)
}

fn const_name(s: &Script) -> String {
    s.file
        .trim_end_matches(".json")
        .split('-')
        .take_while(|w| *w != "request" && *w != "frozen")
        .collect::<Vec<_>>()
        .join("_")
        .replace('.', "_")
        .to_uppercase()
}

fn print_tables(s: &Script, steps: &[(u16, Vec<Rule>)], end: &[End]) {
    let c = const_name(s);
    println!("const {c}_STEPS: &[StepRules] = &[");
    for (node, rules) in steps {
        let r: Vec<String> = rules.iter().map(|r| format!("Rule::{r:?}")).collect();
        println!("    at({}, &[{}]),", s.nodes[*node as usize], r.join(", "));
    }
    println!("];\n\nconst {c}_END: &[End] = &[");
    for e in end {
        let parent = match e.parent {
            Some(p) => format!("Some({})", s.nodes[p as usize]),
            None => "None".to_string(),
        };
        println!(
            "    end({}, {}, {}, {parent}, [{:?}, {:?}, {:?}], {}, {}),",
            s.nodes[e.node as usize],
            e.lock,
            e.token,
            e.owned,
            e.held,
            e.pending,
            e.queue,
            e.effective
        );
    }
    println!("];\n");
}

#[test]
fn firmware_tables_are_the_scenario_files_and_the_harness_run() {
    let print = std::env::var_os("HILOCK_PRINT_EMBEDDED_TABLES").is_some();
    for s in script::ALL {
        check_transcription(s);
        let (steps, end) = run_on_cluster(s);
        if print {
            print_tables(s, &steps, &end);
            continue;
        }
        let want: Vec<(u16, Vec<Rule>)> = s
            .steps
            .iter()
            .map(|StepRules { node, rules }| (*node, rules.to_vec()))
            .collect();
        assert_eq!(steps, want, "{}: per-step rules", s.file);
        assert_eq!(end, s.end, "{}: end states", s.file);

        // The JSON runner (the thesis expectations) passes, takes as many steps at the same
        // nodes, and ends where the table says.
        let report = load(s).prepare().expect("prepare").run().expect("run");
        assert!(report.passed(), "{}: {:?}", s.file, report.mismatches);
        let nodes: Vec<&str> = report.trace.steps.iter().map(|t| t.node.as_str()).collect();
        let table_nodes: Vec<&str> = s.steps.iter().map(|t| s.nodes[t.node as usize]).collect();
        assert_eq!(nodes, table_nodes, "{}: stepping nodes", s.file);
        let json_locks = load(s).locks.len() + 1;
        for e in s.end.iter().filter(|e| (e.lock as usize) < json_locks) {
            let name = s.nodes[e.node as usize];
            let key = if e.lock == 0 {
                name.to_string()
            } else {
                format!("{name}@{}", e.lock)
            };
            let snap = &report.final_states[&key];
            assert_eq!(
                (
                    snap.token,
                    snap.parent.as_deref(),
                    snap.owned,
                    snap.held,
                    snap.pending,
                    snap.queue.len() as u8
                ),
                (
                    e.token,
                    e.parent.map(|p| s.nodes[p as usize]),
                    e.owned,
                    e.held,
                    e.pending,
                    e.queue
                ),
                "{}: {key} (JSON runner vs table)",
                s.file
            );
        }
    }
    assert!(
        !print,
        "tables printed; unset HILOCK_PRINT_EMBEDDED_TABLES to check them"
    );
}

/// Every table is filled: steps, an end state per node and lock, and something held at the end.
#[test]
fn every_scenario_has_steps_and_end_states() {
    for s in script::ALL {
        assert!(!s.steps.is_empty() && s.end.len() == s.nodes.len() * LOCKS);
        assert!(s.end.iter().any(|e| e.held != Mode::Phi), "{}", s.file);
    }
}

/// The loop of `docs/embedding.md` is `embedded/src/bin/node.rs` between its markers,
/// verbatim (that file is built and run under QEMU by `embedded/run-qemu.sh` in CI).
#[test]
fn embedding_guide_loop_is_the_built_firmware() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let node = std::fs::read_to_string(root.join("embedded/src/bin/node.rs")).expect("node.rs");
    let begin = "// embedding-guide:begin\n";
    let region = &node[node.find(begin).expect("begin marker") + begin.len()
        ..node.find("// embedding-guide:end").expect("end marker")];
    let guide = std::fs::read_to_string(root.join("docs/embedding.md")).expect("embedding.md");
    let section = &guide[guide.find("\n## The loop\n").expect("'The loop' section")..];
    let open = "```rust,ignore\n";
    let start = section.find(open).expect("code block") + open.len();
    let block = &section[start..start + section[start..].find("```\n").expect("block end")];
    assert_eq!(
        block, region,
        "docs/embedding.md's loop differs from node.rs"
    );
}
