//! Scraping a node's metrics endpoint (`metrics_addr`) in the tests
//! (`#[path = "support/scrape.rs"] mod scrape;`): a plain HTTP GET over TCP and a reader of
//! the Prometheus text format.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::time::Duration;

/// `GET /metrics` at `url` (`http://127.0.0.1:PORT/metrics`, as `hilock status` shows it):
/// the status line and the body.
pub fn get(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (addr, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(addr).expect("the metrics endpoint accepts");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /{path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text)
        .expect("the endpoint answers and closes");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// The body of a successful scrape.
pub fn scrape(url: &str) -> String {
    let (status, body) = get(url);
    assert!(status.contains("200"), "{status}: {body}");
    body
}

/// The value of metric `name` whose labels include every `k="v"` of `labels` (`None` if
/// no sample matches).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, ls) = match series.split_once('{') {
            Some((n, ls)) => (n, ls.trim_end_matches('}')),
            None => (series, ""),
        };
        let all = labels
            .iter()
            .all(|(k, v)| ls.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
        (n == name && all).then(|| value.parse().ok())?
    })
}
