//! SPEC.md stays in step with the specification data: every rule and every kernel function
//! that `hilock spec --json` lists is named in SPEC.md, every test a rule names exists, and
//! every scenario figure is listed.

use std::path::Path;

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

/// Every test a rule of `hilock spec` names as its check exists: `kernel NAME` and
/// `PATH::tests::NAME` a function of the kernel's sources or tests, `scenario NAME` a file
/// of `spec/scenarios/`.
#[test]
fn every_test_a_rule_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources: String = ["kernel/src", "kernel/tests"]
        .iter()
        .flat_map(|dir| rust_files(&root.join(dir)))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let scenarios: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let mut missing = Vec::new();
    for rule in export::rules() {
        assert!(!rule.tests.is_empty(), "{} names no test", rule.id);
        for t in &rule.tests {
            let found = match t.split_once(' ') {
                Some(("scenario", name)) => scenarios
                    .iter()
                    .any(|f| f.starts_with(&format!("{name}-")) || f == &format!("{name}.json")),
                Some(("kernel", name)) => sources.contains(&format!("fn {name}(")),
                _ => {
                    let name = t.rsplit("::").next().unwrap();
                    t.contains("::tests::") && sources.contains(&format!("fn {name}("))
                }
            };
            if !found {
                missing.push(format!("{}: {t}", rule.id));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named tests that do not exist:\n{}",
        missing.join("\n")
    );
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

/// The index of the bracket that closes the one at `at` (or the end of `b`).
fn matching(b: &[u8], at: usize, open: u8, close: u8) -> usize {
    let mut depth = 0i32;
    for (j, &c) in b.iter().enumerate().skip(at) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    b.len()
}

/// The `.rs` files under `dir`, at any depth.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files
}

/// Every function of `kernel/src` with the names it calls (a textual call graph: a name
/// followed by `(` inside the body counts as a call; methods of different types with the
/// same name are one node — the check can miss a dead function that shares a name with a
/// live one, never the other way round).
fn kernel_call_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let files = rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel/src"));
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for f in files {
        let t = std::fs::read_to_string(f).unwrap();
        let b = t.as_bytes();
        let mut i = 0;
        while let Some(k) = t[i..].find("fn ") {
            let at = i + k;
            i = at + 3;
            if at > 0 && ident(b[at - 1]) {
                continue;
            }
            let name: String = t[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            // Skip the parameter list, then find the body (or `;` for a declaration).
            let Some(open) = t[i..].find('(').map(|x| i + x) else {
                break;
            };
            let j = matching(b, open, b'(', b')');
            let mut k = j;
            while k < b.len() && b[k] != b'{' && b[k] != b';' {
                k += 1;
            }
            if k >= b.len() || b[k] == b';' {
                continue;
            }
            let e = matching(b, k, b'{', b'}');
            let body = &t[k..e.min(b.len())];
            let calls = graph.entry(name).or_default();
            let bb = body.as_bytes();
            for (p, _) in body.match_indices('(') {
                let mut s = p;
                while s > 0 && ident(bb[s - 1]) {
                    s -= 1;
                }
                if s < p {
                    calls.insert(body[s..p].to_string());
                }
            }
        }
    }
    graph
}

/// SPEC.md's traceability is checked, not typed: every kernel function that the
/// rule tables of SPEC.md (and the rule list of `hilock spec --json`) name exists in
/// `kernel/src` and is reachable from a step (`Site::step`, the baselines' and the tree's
/// `step`) or from the constructors a driver calls before stepping.
#[test]
fn spec_md_rule_functions_exist_and_are_reachable_from_step() {
    let graph = kernel_call_graph();
    let roots = [
        "step",
        "new",
        "with_parents",
        "with_variant",
        "with_ceilings",
    ];
    let mut reach: std::collections::BTreeSet<String> =
        roots.iter().map(|s| s.to_string()).collect();
    let mut stack: Vec<String> = reach.iter().cloned().collect();
    while let Some(n) = stack.pop() {
        for c in graph.get(&n).into_iter().flatten() {
            if graph.contains_key(c) && reach.insert(c.clone()) {
                stack.push(c.clone());
            }
        }
    }
    let mut named: Vec<(String, String)> = Vec::new();
    // Only the tables whose header has a "kernel function(s)" column (sections 3 and 6).
    let mut in_rule_table = false;
    for line in spec_md().lines() {
        if !line.starts_with('|') {
            in_rule_table = false;
            continue;
        }
        if line.contains("kernel function") {
            in_rule_table = true;
            continue;
        }
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        if !in_rule_table
            || cols.len() < 5
            || !(cols[1].starts_with("Rule")
                || cols[1].starts_with("PIP")
                || cols[1].starts_with("PCEP")
                || cols[1].starts_with("`Receive"))
        {
            continue;
        }
        for part in cols[3].split('`').skip(1).step_by(2) {
            named.push((cols[1].to_string(), part.to_string()));
        }
    }
    for rule in export::rules() {
        for f in &rule.kernel {
            named.push((rule.id.to_string(), f.to_string()));
        }
    }
    assert!(named.len() > 30, "only {} functions named", named.len());
    let mut bad = Vec::new();
    for (rule, path) in &named {
        let f = path.rsplit("::").next().unwrap();
        if !f.starts_with(|c: char| c.is_ascii_lowercase()) || path.contains("::tests::") {
            continue; // a type or constant, or a unit test named as evidence
        }
        if !graph.contains_key(f) {
            bad.push(format!("{rule}: `{path}` does not exist in kernel/src"));
        } else if !reach.contains(f) {
            bad.push(format!("{rule}: `{path}` is not reachable from a step"));
        }
    }
    assert!(bad.is_empty(), "SPEC.md traceability:\n{}", bad.join("\n"));
}
