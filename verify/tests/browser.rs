//! The Stateright Explorer in a real browser: headless Chromium opens the Explorer at the
//! URL `hilock explore CONFIG --trace FILE` prints for a saved counterexample
//! (`spec/counterexamples/release-race-literal.json`, P1 and P3 violated) and the test
//! reads the page the browser built: the path of actions lists every step of the trace in
//! words, in order; the current state pane shows the sequence diagram (SVG, with arrows)
//! and says which property fails. A screenshot is saved as
//! `target/explorer-release-race-literal.png`. At its failing state the page numbers the
//! step as the trace does, names the two holders, says that the Properties pane does not
//! judge the state, and draws each message from its send to its delivery, with the freeze
//! still in flight drawn dashed. The inversion, tree, agents and bakery
//! models' counterexamples (`inversion-no-inheritance`, `tree-slides`,
//! `agents-majority-unneeded-surrender`, `bakery-literal`,
//! `ring/ring-paper-leave-window-duplicates`) are opened and checked the same way.
//!
//! Chromium is Debian's `chromium` (`.ci/run` installs it where it can); without it the
//! test prints one line saying it is skipped. Everything runs on 127.0.0.1, Chromium with a
//! fresh profile, no network services, and a time limit.

#[path = "../../runtime/tests/support/ports.rs"]
mod ports;

use hilock_models::check::explore;
use hilock_models::token::ModelConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Chromium binary: `$CHROMIUM`, else `chromium`, `chromium-browser` or
/// `google-chrome` on the `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(c) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(c));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Runs Chromium headless on `url` with `extra` flags; returns stdout. Killed after
/// `limit`.
fn run_chromium(bin: &Path, url: &str, extra: &[&str], limit: Duration) -> String {
    let profile = std::env::temp_dir().join(format!(
        "hilock-chromium-{}-{:x}",
        std::process::id(),
        rand_tag()
    ));
    std::fs::create_dir_all(&profile).expect("profile directory");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--window-size=1500,1300",
            "--virtual-time-budget=15000",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish within {limit:?}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap_or_default()
}

fn rand_tag() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0u8)
}

fn wait_for(addr: SocketAddr) {
    let t = Instant::now();
    loop {
        let ok = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).and_then(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(
                s,
                "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )?;
            let mut b = Vec::new();
            s.read_to_end(&mut b)?;
            Ok(b.starts_with(b"HTTP/1.1 200"))
        });
        if ok.unwrap_or(false) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the Explorer did not answer on {addr}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The texts of the `<a>` elements of the "Path of Actions" list in a dumped DOM.
fn path_of_actions(dom: &str) -> Vec<String> {
    let Some(start) = dom.find("class=\"path-list\"") else {
        return Vec::new();
    };
    let end = dom[start..].find("</ol>").map_or(dom.len(), |e| start + e);
    let mut texts = Vec::new();
    let mut rest = &dom[start..end];
    while let Some(a) = rest.find("<a ") {
        let Some(gt) = rest[a..].find('>') else { break };
        let body = &rest[a + gt + 1..];
        let Some(close) = body.find("</a>") else {
            break;
        };
        texts.push(
            body[..close]
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">"),
        );
        rest = &body[close..];
    }
    texts
}

/// How many of the diagram's arrows in a dumped DOM start higher than they end: messages
/// drawn from the row that sent them to the row that delivered them.
fn sloped(dom: &str) -> usize {
    let attr = |line: &str, name: &str| -> Option<u32> {
        let at = line.find(&format!(" {name}=\""))? + name.len() + 3;
        line[at..].split('"').next()?.parse().ok()
    };
    dom.split("<line class=\"msg\"")
        .skip(1)
        .filter(|l| matches!((attr(l, "y1"), attr(l, "y2")), (Some(a), Some(b)) if a < b))
        .count()
}

/// Serves the Explorer for the saved counterexample `name` (its configuration in
/// `spec/counterexamples/configs/`) on a free port; returns the replayed trace, the
/// property it violates and the URL of its last state.
fn serve(name: &str) -> (hilock_models::open::Opened, String, String) {
    let cx = Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/counterexamples");
    let text = std::fs::read_to_string(cx.join(format!("{name}.json"))).expect("trace");
    // A ring trace (`ring/…`) embeds its configuration; the others have theirs in
    // `configs/`.
    let cfg_text = match name.strip_prefix("ring/") {
        Some(_) => {
            let tv: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            let mut c = tv["config"].clone();
            c["model"] = "ring".into();
            c.to_string()
        }
        None => std::fs::read_to_string(cx.join(format!("configs/{name}.json"))).expect("config"),
    };
    // A free port below the ephemeral range, which no outgoing connection takes before
    // the Explorer binds it.
    let addr = ports::free_addr();
    let port = addr.port();
    let v: serde_json::Value = serde_json::from_str(&cfg_text).expect("JSON");
    let (opened, property) = if v.get("model").is_none() {
        let cfg = ModelConfig::from_json(&cfg_text).expect("configuration");
        let trace = hilock_models::open::parse_base_trace(&text).expect("a base trace");
        let opened = hilock_models::open::open_base(&cfg, &trace).expect("the trace fits");
        let verdict = trace.verdict.clone().unwrap_or_default();
        // `explore` blocks while it serves: a thread the test process abandons.
        std::thread::spawn(move || {
            if let Err(e) = explore(&cfg, addr) {
                eprintln!("explore: {e}");
            }
        });
        (
            opened,
            verdict.split(" violated").next().unwrap_or("").to_string(),
        )
    } else {
        let cfg: hilock_models::open::OtherConfig =
            serde_json::from_value(v).expect("configuration");
        let tv: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let opened = hilock_models::open::open_other(&cfg, &tv).expect("the trace fits");
        std::thread::spawn(move || {
            if let Err(e) = hilock_models::open::explore_other(&cfg, addr) {
                eprintln!("explore: {e}");
            }
        });
        (opened, tv["property"].as_str().unwrap_or("").to_string())
    };
    wait_for(addr);
    let url = hilock_models::open::url(port, &opened.encoded);
    (opened, property, url)
}

/// Opens the Explorer at the last state of the saved counterexample `name` in Chromium and
/// checks the page: every step in words in the path of actions, the sequence diagram with
/// `in_flight` messages drawn in flight (as many as the state pane lists), the violated
/// property. Saves a screenshot as `target/explorer-<name>.png`.
fn check_in_browser(bin: &Path, name: &str, arrows: bool, in_flight: usize) -> String {
    let (opened, property, url) = serve(name);
    let dom = run_chromium(bin, &url, &["--dump-dom"], Duration::from_secs(90));
    let shown = path_of_actions(&dom);
    // Pre-init, Init 0, then every step of the trace in words, in order.
    assert_eq!(
        shown.get(2..),
        Some(&opened.texts[..]),
        "{name}: the path of actions in the browser:\n{shown:#?}"
    );
    assert!(
        dom.contains("<svg") && (dom.contains("class=\"local\"") || dom.contains("class=\"msg\"")),
        "{name}: the sequence diagram is on the page"
    );
    assert_eq!(
        dom.contains("class=\"msg\""),
        arrows,
        "{name}: arrows in the diagram"
    );
    assert!(
        dom.contains(&format!("⚠ violates: {property}")),
        "{name}: the failing state says that {property} fails"
    );
    assert!(
        dom.contains(hilock_models::check::PANE_NOTE),
        "{name}: the failing state says the Properties pane does not judge it"
    );
    // The state pane lists each message in flight on a line of its own
    // (`in flight A0 → S0: request /1 W`); the diagram draws each of them dashed.
    let drawn = dom.matches("class=\"inflight\"").count();
    assert_eq!(drawn, in_flight, "{name}: messages drawn in flight");
    assert_eq!(
        dom.matches("in flight ").count(),
        drawn,
        "{name}: the diagram draws what the state pane lists in flight"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shot = root.join(format!("target/explorer-{}.png", name.replace('/', "-")));
    std::fs::create_dir_all(shot.parent().expect("target")).expect("target directory");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        bin,
        &url,
        &[&format!("--screenshot={}", shot.display())],
        Duration::from_secs(90),
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(
        png.len() > 20_000,
        "a screenshot of a page, not a blank one"
    );
    println!("{name}: screenshot {}", shot.display());
    dom
}

#[test]
fn the_explorer_shows_a_saved_counterexample_in_chromium() {
    let Some(bin) = chromium() else {
        println!(
            "browser test skipped: Chromium not found (apt-get install chromium, or set CHROMIUM)"
        );
        return;
    };
    let dom = check_in_browser(&bin, "release-race-literal", true, 1);
    assert!(
        path_of_actions(&dom)
            .iter()
            .any(|t| t.contains("→ n0 request")),
        "a delivery in words"
    );
    // The step's number (as the trace and `hilock replay` number it: 0 to 21), its rules
    // (the kernel's report), the sites' tuples, the violation in words (the two holders
    // and their modes), and the note that the Properties pane does not judge this state.
    for what in [
        "step 21: n0 → n1 grant R",
        "rules: ReceiveGrant",
        "(M_O R, M_H R",
        "(M_O W, M_H W",
        "P1 mutual exclusion: on L0: n1 holds R, n3 holds W",
        hilock_models::check::PANE_NOTE,
    ] {
        assert!(dom.contains(what), "the state pane shows {what}");
    }
    // The diagram's rows are 26 px apart, row k at y = 66 + 26k; lane n0 at x = 90, n1 at
    // x = 290. The grant n0 sent n1 at step 15 runs from row 15 to its delivery at row 21
    // (the failing step); the freeze n0 sent n1 at step 17 is still in flight at the
    // failing state: a dashed arrow from row 17 to a row of its own below the last step.
    for what in [
        "class=\"msg\" x1=\"90\" y1=\"456\" x2=\"290\" y2=\"612\"",
        "class=\"inflight\" x1=\"90\" y1=\"508\" x2=\"290\" y2=\"638\"",
        ">in flight</text>",
        ">freeze {IR, R}</text>",
    ] {
        assert!(dom.contains(what), "the diagram shows {what}");
    }
}

/// The other models' saved counterexamples open the same way; the agents, inversion and
/// ring models' diagrams draw their messages from send to delivery and those in flight
/// dashed.
#[test]
fn the_explorer_shows_the_other_models_counterexamples_in_chromium() {
    let Some(bin) = chromium() else {
        println!(
            "browser test skipped: Chromium not found (apt-get install chromium, or set CHROMIUM)"
        );
        return;
    };
    let dom = check_in_browser(&bin, "inversion-no-inheritance", true, 0);
    assert!(sloped(&dom) > 0, "inversion: arrows from their send rows");
    check_in_browser(&bin, "tree-slides", false, 0);
    // Six messages are in flight at the agents' failing state, one of them (A0's request
    // to S0) since the initial state: drawn from the top of the diagram.
    let dom = check_in_browser(&bin, "agents-majority-unneeded-surrender", true, 6);
    assert!(
        dom.contains("class=\"inflight\" x1=\"90\" y1=\"40\" x2=\"490\""),
        "A0's request to S0 drawn from the start"
    );
    assert!(sloped(&dom) > 0, "agents: arrows from their send rows");
    // The bakery model renumbers its replicas after each step (a canonical state): a
    // request is drawn level, where it is delivered.
    let dom = check_in_browser(&bin, "bakery-literal", true, 0);
    assert_eq!(sloped(&dom), 0, "bakery: level arrows");
    // The ring: the paper's server, n21 leaving while it backs up a lock; at the failing
    // state the two holders in words, and the backup and fetch n32 sent n8 in flight.
    let dom = check_in_browser(&bin, "ring/ring-paper-leave-window-duplicates", true, 2);
    assert!(sloped(&dom) > 0, "ring: arrows from their send rows");
    for what in [
        "at most one holder per lock: two clients hold one lock: key 10: c1 and c2",
        "in flight n32 → n8: BackupInsert",
        "in flight n32 → n8: Fetch",
        ">BackupInsert</text>",
        ">Fetch</text>",
    ] {
        assert!(dom.contains(what), "ring: the page shows {what}");
    }
}
