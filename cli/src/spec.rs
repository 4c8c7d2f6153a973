//! Subcommands of `hilock` that work on the specification: print the tables and rules, run a
//! scenario, replay a trace. Each returns the text to print or a one-line error.

use hilock_spec::export;
#[cfg(feature = "models")]
use hilock_spec::trace::{Trace, TRACE_FORMAT};
use hilock_spec::Scenario;
use std::path::{Path, PathBuf};

/// `hilock spec [--json]`.
pub fn spec(json: bool) -> Result<String, String> {
    let doc = export::document();
    if json {
        return serde_json::to_string_pretty(&doc)
            .map_err(|e| format!("cannot encode the specification: {e}"));
    }
    let mut s = format!("{}\n{}\n\n", doc.format, doc.source);
    s.push_str("Modes (strength, inequation 2.1): ");
    let modes: Vec<String> = doc
        .modes
        .iter()
        .map(|m| format!("{}={}", m.symbol, m.strength))
        .collect();
    s.push_str(&modes.join(" "));
    s.push_str("\n\n");
    for t in &doc.tables {
        s.push_str(&format!(
            "Table {} (p. {}): {}\n  rows: {}; columns: {}; cell: {}\n",
            t.id, t.page, t.title, t.rows_are, t.columns_are, t.cell
        ));
        s.push_str(&format!("  {:<5}", ""));
        for c in &t.columns {
            s.push_str(&format!("{c:<14}"));
        }
        s.push('\n');
        for (r, row) in t.rows.iter().zip(&t.literal) {
            s.push_str(&format!("  {r:<5}"));
            for cell in row {
                // Table 2.2's cells say "may grant"; print the thesis's X where it may not.
                let x = |b: bool| if b != (t.id == "2.2") { "X" } else { "." };
                let text = match cell {
                    serde_json::Value::Bool(b) => x(*b).to_string(),
                    serde_json::Value::Array(a) if a.is_empty() => "-".to_string(),
                    serde_json::Value::Array(a) => a
                        .iter()
                        .filter_map(|v| v.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    v => v.as_str().unwrap_or("?").to_string(),
                };
                s.push_str(&format!("{text:<14}"));
            }
            s.push('\n');
        }
        let same = t.derived.as_ref().map(|d| d == &t.literal);
        match same {
            Some(true) => s.push_str("  derived from the axioms: identical cell by cell\n\n"),
            Some(false) => s.push_str("  derived from the axioms: DIFFERS (see SPEC.md)\n\n"),
            None => s.push_str("  a design choice, kept literal\n\n"),
        }
    }
    for r in &doc.rules {
        s.push_str(&format!(
            "{}: {}\n  kernel: {}\n",
            r.id,
            r.text,
            r.kernel.join(", ")
        ));
    }
    Ok(s)
}

/// `hilock scenario <file> [--json]`: runs the scenario; `Ok` carries the trace (rendered or
/// JSON) and whether every expectation held.
pub fn scenario(path: &Path, json: bool) -> Result<(String, bool), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let sc = Scenario::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let prepared = sc
        .prepare()
        .map_err(|e| format!("{}: inconsistent scenario: {e}", path.display()))?;
    let report = prepared
        .run()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let passed = report.passed();
    let out = if json {
        // A failing expectation is the trace's verdict, and each mismatch a line on
        // stderr, as the text mode prints them.
        let mut trace = report.trace.clone();
        if !passed {
            for m in &report.mismatches {
                eprintln!("MISMATCH {m}");
            }
            trace.verdict = Some(format!(
                "FAIL: {} expectation(s) do not match: {}",
                report.mismatches.len(),
                report.mismatches.join("; ")
            ));
        }
        serde_json::to_string_pretty(&trace).map_err(|e| format!("cannot encode the trace: {e}"))?
    } else {
        let mut s = report.trace.render();
        s.push_str("\nfinal states (M_O, M_H, M_P):\n");
        for (n, st) in &report.final_states {
            s.push_str(&format!("  {n:<3} {}\n", st.line()));
        }
        s.push_str(&format!("{} messages\n", report.messages));
        if passed {
            s.push_str("PASS: every expected state matches\n");
        } else {
            for m in &report.mismatches {
                s.push_str(&format!("MISMATCH {m}\n"));
            }
            s.push_str(&format!(
                "FAIL: {} expectation(s) do not match\n",
                report.mismatches.len()
            ));
        }
        s
    };
    Ok((out, passed))
}

#[cfg(feature = "models")]
/// `hilock replay <trace.json> [--svg F] [--html F]`: prints a trace step by step (a
/// `hilock-trace/1` trace in full, another model's trace by its action texts) and writes
/// its sequence diagram to the files given.
pub fn replay(path: &Path, svg: Option<&Path>, html: Option<&Path>) -> Result<String, String> {
    // A diagram written over the trace (or the SVG over the HTML) would lose it: the same
    // file is the same inode (a hard link too), and a file not there yet is named by its
    // directory's real path and its name (`./a.svg` is `a.svg`).
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
        let real = |p: &Path| {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
        };
        matches!((real(a), real(b)), (Some(x), Some(y)) if x == y)
    };
    for f in [svg, html].into_iter().flatten() {
        if same(f, path) {
            return Err(format!(
                "{}: is the trace being replayed; write the diagram to another file",
                f.display()
            ));
        }
    }
    if let (Some(a), Some(b)) = (svg, html) {
        if same(a, b) {
            return Err(format!(
                "{}: given for both --svg and --html; give each its own file",
                a.display()
            ));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let hilock_models::open::Drawn {
        title,
        diagram,
        steps,
        details,
    } = hilock_models::open::diagram_of(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = match serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .as_ref()
        .and_then(hilock_models::open::format_of)
    {
        Some(TRACE_FORMAT) => {
            let trace: Trace = serde_json::from_str(&text)
                .map_err(|e| format!("{}: malformed trace: {e}", path.display()))?;
            trace.render()
        }
        _ => {
            let mut s = format!("{title}\n");
            for (i, st) in steps.iter().enumerate() {
                s.push_str(&format!("{i:>3}. {st}\n"));
            }
            s
        }
    };
    if let Some(f) = svg {
        std::fs::write(f, diagram.svg()).map_err(|e| format!("{}: {e}", f.display()))?;
        out.push_str(&format!("sequence diagram written to {}\n", f.display()));
    }
    if let Some(f) = html {
        std::fs::write(f, diagram.html(&title, &steps, &details))
            .map_err(|e| format!("{}: {e}", f.display()))?;
        out.push_str(&format!(
            "sequence diagram and steps written to {}\n",
            f.display()
        ));
    }
    Ok(out)
}

#[cfg(feature = "models")]
/// `hilock check <config.json>`: an exhaustive model check with progress on stderr. `Ok`
/// carries the report and whether every property held; counterexamples (each a shortest
/// run that violates its property) are written as `hilock-trace/1` files into `out_dir`
/// and named in the report.
pub fn check(path: &Path, out_dir: &Path) -> Result<(String, bool), String> {
    use hilock_models::token::ModelConfig;
    let start = std::time::Instant::now();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a JSON configuration: {e}", path.display()))?;
    if v.get("model").is_some() {
        return check_other(path, &v, out_dir, start);
    }
    let config = ModelConfig::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    config
        .validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    prepare_out_dir(out_dir)?;
    let report = hilock_models::check::check_shortest(&config, progress_on_stderr())?;
    let mut text = report.render();
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("check")
        .to_string();
    // (property, trace, what its last state is)
    let mut traces: Vec<(String, &hilock_spec::Trace, String)> = report
        .properties
        .iter()
        .filter_map(|p| {
            let t = p.counterexample.as_ref()?;
            Some((p.name.clone(), t, "the failing state".to_string()))
        })
        .collect();
    if let (Some(w), Some(k)) = (&report.fifo_witness, report.fifo_bound) {
        let what = format!(
            "the P6 witness: a request bypassed {}, the least bound k = {k} reached, not broken",
            hilock_models::check::times(k as usize)
        );
        traces.push(("P6 bypass witness".to_string(), w, what));
    }
    let mut unwritten = Vec::new();
    for (name, trace, what) in traces {
        let file = out_dir.join(format!(
            "{stem}.{}.trace.json",
            hilock_models::open::slug(&name)
        ));
        let json = serde_json::to_string_pretty(trace)
            .map_err(|e| format!("cannot encode the trace: {e}"))?;
        if let Err(e) = std::fs::write(&file, json) {
            not_written(&mut text, &mut unwritten, &name, &file, e);
            continue;
        }
        text.push_str(&format!(
            "trace of '{name}' written to {} (hilock replay prints it)\n",
            file.display()
        ));
        let opened = hilock_models::open::open_base(&config, trace)
            .map_err(|e| format!("{}: the trace does not replay: {e}", file.display()))?;
        text.push_str(&hilock_models::open::how_to_open_at(
            path,
            &file,
            &opened.encoded,
            &what,
        ));
    }
    let ok = report.ok();
    // The whole wall time: the search, the shortest counterexamples, the traces written
    // and replayed.
    eprintln!("checked in {:.2?}", start.elapsed());
    finish_check(text, ok, &unwritten)
}

#[cfg(feature = "models")]
/// A trace `hilock check` could not write (a directory in its place, a full disk, …): the
/// report says so under the property and the check goes on with the next trace.
fn not_written(
    text: &mut String,
    unwritten: &mut Vec<String>,
    name: &str,
    file: &Path,
    e: std::io::Error,
) {
    text.push_str(&format!(
        "trace of '{name}' NOT written: {}: {e}\n",
        file.display()
    ));
    unwritten.push(format!("cannot write {}: {e}", file.display()));
}

#[cfg(feature = "models")]
/// The end of `hilock check`: the report however the traces went; each trace not written
/// is a line on stderr. A failing check exits 1 as always; a passing one whose witness was
/// not written prints its report and exits 2 (an error, not a failed property).
fn finish_check(text: String, ok: bool, unwritten: &[String]) -> Result<(String, bool), String> {
    if ok && !unwritten.is_empty() {
        print!("{text}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // One line: the error `main` prints.
        return Err(unwritten.join("; "));
    }
    for u in unwritten {
        eprintln!("hilock: error: {u}");
    }
    Ok((text, ok))
}

#[cfg(feature = "models")]
/// `hilock check` on a tree, agents, bakery, inversion, ring or faults configuration
/// (`"model": …`, the ones `hilock explore` serves): every property of the model; each
/// counterexample written into `out_dir` in the model's trace format, with the command that
/// opens it.
fn check_other(
    path: &Path,
    v: &serde_json::Value,
    out_dir: &Path,
    start: std::time::Instant,
) -> Result<(String, bool), String> {
    use hilock_models::open::{check_other, open_other, OtherConfig};
    let config: OtherConfig = serde_json::from_value(v.clone())
        .map_err(|e| format!("{}: not a model configuration: {e}", path.display()))?;
    config
        .validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    prepare_out_dir(out_dir)?;
    let report = check_other(&config, progress_on_stderr())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = report.text;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("check");
    let mut unwritten = Vec::new();
    for (name, trace) in &report.traces {
        let file = out_dir.join(format!(
            "{stem}.{}.trace.json",
            hilock_models::open::slug(name)
        ));
        let json = serde_json::to_string_pretty(trace)
            .map_err(|e| format!("cannot encode the trace: {e}"))?;
        if let Err(e) = std::fs::write(&file, json + "\n") {
            not_written(&mut text, &mut unwritten, name, &file, e);
            continue;
        }
        text.push_str(&format!(
            "trace of '{name}' written to {} (hilock replay prints it)\n",
            file.display()
        ));
        let opened = open_other(&config, trace)
            .map_err(|e| format!("{}: the trace does not replay: {e}", file.display()))?;
        text.push_str(&hilock_models::open::how_to_open(
            path,
            &file,
            &opened.encoded,
        ));
    }
    // The whole wall time, as for the base model.
    eprintln!("checked in {:.2?}", start.elapsed());
    finish_check(text, report.ok, &unwritten)
}

#[cfg(feature = "models")]
/// A check's progress callback: about once a second, the states so far, their rate and the
/// depth, on stderr.
fn progress_on_stderr() -> impl FnMut(usize, usize, usize) {
    use std::io::Write;
    use std::time::Instant;
    let start = Instant::now();
    let mut last = Instant::now();
    move |states, unique, depth| {
        if last.elapsed().as_millis() >= 1000 {
            last = Instant::now();
            let rate = states as f64 / start.elapsed().as_secs_f64().max(1e-9);
            eprintln!("  {states} states ({unique} unique), {rate:.0} states/s, depth {depth}");
            let _ = std::io::stderr().flush();
        }
    }
}

#[cfg(feature = "models")]
/// Creates `dir` (and its parents) if need be and checks that a file can be written there,
/// so that a check that finds a counterexample is not refused its output after minutes of
/// work.
fn prepare_out_dir(dir: &Path) -> Result<(), String> {
    let refuse = |e: std::io::Error| format!("--out {}: cannot write there: {e}", dir.display());
    if dir.exists() && !dir.is_dir() {
        return Err(format!(
            "--out {}: cannot write there: it is not a directory",
            dir.display()
        ));
    }
    std::fs::create_dir_all(dir).map_err(refuse)?;
    let probe = dir.join(format!(".hilock-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(refuse)?;
    std::fs::remove_file(&probe).map_err(refuse)
}

#[cfg(feature = "models")]
/// `hilock explore <config.json> --port N [--trace FILE]`: serves the Stateright Explorer on
/// 127.0.0.1 until the process is stopped; with a trace, first replays it through the
/// configuration's model and prints the URL of its last state (a trace that does not fit
/// the configuration is an error before anything is served).
pub fn explore(path: &Path, port: u16, trace: Option<&Path>) -> Result<String, String> {
    use hilock_models::token::ModelConfig;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a JSON configuration: {e}", path.display()))?;
    if v.get("model").is_some() {
        return explore_other(path, &v, port, trace);
    }
    let config = ModelConfig::from_json(&text).map_err(|e| {
        format!(
            "{}: not a model configuration (a base-model one, or one with \"model\": \"tree\", \"agents\", \"bakery\", \"inversion\", \"ring\" or \"faults\"): {e}",
            path.display()
        )
    })?;
    config
        .validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    serve_explorer(
        path,
        port,
        trace,
        |t, tt| {
            let trace = hilock_models::open::parse_base_trace(tt)
                .map_err(|e| format!("{}: {e}", t.display()))?;
            hilock_models::open::open_base(&config, &trace)
                .map_err(|e| format!("{} does not fit {}: {e}", t.display(), path.display()))
        },
        |addr| hilock_models::check::explore(&config, addr),
    )
}

#[cfg(feature = "models")]
/// The part of `hilock explore` every model shares: open `trace` (if any) with `open`, bind
/// the port first (a port in use is an error line, not a panic inside the server), say
/// where the Explorer is and where the trace's last state is, then `serve`.
fn serve_explorer(
    path: &Path,
    port: u16,
    trace: Option<&Path>,
    open: impl FnOnce(&Path, &str) -> Result<hilock_models::open::Opened, String>,
    serve: impl FnOnce(std::net::SocketAddr) -> Result<(), String>,
) -> Result<String, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let start = match trace {
        None => None,
        Some(t) => {
            let tt = std::fs::read_to_string(t).map_err(|e| format!("{}: {e}", t.display()))?;
            Some((open(t, &tt)?, t))
        }
    };
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    // Port 0: the system's choice of a free port, which the Explorer's server (it binds
    // the address itself and does not say which port it got) is then given.
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let port = addr.port();
    drop(listener);
    eprintln!(
        "Stateright Explorer for {} on http://{addr}/ (Ctrl-C to stop)",
        path.display()
    );
    announce(start.as_ref().map(|(o, t)| (o, *t)), port);
    serve(addr)?;
    Ok(String::new())
}

#[cfg(feature = "models")]
/// Prints where a replayed trace opens: its last state's URL on stdout.
fn announce(start: Option<(&hilock_models::open::Opened, &Path)>, port: u16) {
    if let Some((o, t)) = start {
        let verdict = if let Some(w) = o.witness.as_ref().filter(|_| o.violated.is_empty()) {
            format!("the witness, not a failure: {w}")
        } else if o.violated.is_empty() {
            "no property fails there".to_string()
        } else {
            format!(
                "there {} {}",
                o.violated.join(", "),
                if o.violated.len() == 1 {
                    "fails"
                } else {
                    "fail"
                }
            )
        };
        eprintln!(
            "{}: {} steps replayed; its last state ({verdict}) is at",
            t.display(),
            o.steps
        );
        println!("{}", hilock_models::open::url(port, &o.encoded));
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
}

#[cfg(feature = "models")]
/// `hilock explore` for a tree, agents, bakery, inversion, ring or faults configuration
/// (`"model": …`).
fn explore_other(
    path: &Path,
    v: &serde_json::Value,
    port: u16,
    trace: Option<&Path>,
) -> Result<String, String> {
    use hilock_models::open::{explore_other, open_other, OtherConfig};
    let config: OtherConfig = serde_json::from_value(v.clone())
        .map_err(|e| format!("{}: not a model configuration: {e}", path.display()))?;
    config
        .validate()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    serve_explorer(
        path,
        port,
        trace,
        |t, tt| {
            let tv: serde_json::Value = serde_json::from_str(tt)
                .map_err(|e| format!("{}: not a JSON trace: {e}", t.display()))?;
            open_other(&config, &tv)
                .map_err(|e| format!("{} does not fit {}: {e}", t.display(), path.display()))
        },
        |addr| explore_other(&config, addr),
    )
}

/// `hilock scenario <files…> [--json]`: each scenario's trace, and a summary when there are
/// several; `Ok` says whether every expectation held.
pub fn scenarios(files: &[PathBuf], json: bool) -> Result<(String, bool), String> {
    if json && files.len() > 1 {
        return Err("--json prints one trace: give exactly one scenario file".into());
    }
    let mut text = String::new();
    let mut all = true;
    let mut summary = Vec::new();
    for f in files {
        let (t, ok) = scenario(f, json)?;
        text.push_str(&t);
        all &= ok;
        summary.push(format!(
            "{} {}",
            if ok { "PASS" } else { "FAIL" },
            f.display()
        ));
    }
    if files.len() > 1 {
        text.push_str(&format!(
            "\n{} scenarios:\n  {}\n",
            files.len(),
            summary.join("\n  ")
        ));
    }
    Ok((text, all))
}

/// Without the `models` feature (stateright and the models are left out, e.g. for a node
/// built with `--no-default-features`): `replay`, `check` and `explore` say so.
#[cfg(not(feature = "models"))]
mod without_models {
    use std::path::Path;

    const MISSING: &str = "this hilock was built without the `models` feature (the Stateright \
                           models): build it with default features for replay, check and explore";

    /// See the `models` build.
    pub fn replay(_: &Path, _: Option<&Path>, _: Option<&Path>) -> Result<String, String> {
        Err(MISSING.into())
    }

    /// See the `models` build.
    pub fn check(_: &Path, _: &Path) -> Result<(String, bool), String> {
        Err(MISSING.into())
    }

    /// See the `models` build.
    pub fn explore(_: &Path, _: u16, _: Option<&Path>) -> Result<String, String> {
        Err(MISSING.into())
    }
}
#[cfg(not(feature = "models"))]
pub use without_models::{check, explore, replay};
