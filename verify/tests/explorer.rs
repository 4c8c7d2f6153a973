//! The Stateright Explorer serves a base-model configuration (`hilock explore <config>`
//! calls the same `hilock_models::check::explore`): its page, its status JSON and its state
//! API answer over plain HTTP.

use hilock_models::base::ModelConfig;
use hilock_models::check::explore;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
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
    // A free port: bind port 0, read the port, release it.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
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
