//! Waiting for nodes' peer links (`#[path = "support/connected.rs"] mod connected;`):
//! shared by the tests that start nodes in this process and need every link up first.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use hilock_runtime::Node;

/// `node` has a connection to every peer (nodes dial each other at start), within 5 s.
pub async fn wait_connected(node: &Node) {
    connected_by(node, Instant::now() + Duration::from_secs(5)).await;
}

/// Every one of `nodes` has a connection to every peer, within 5 s for all of them.
pub async fn wait_all_connected(nodes: &[Node]) {
    let by = Instant::now() + Duration::from_secs(5);
    for node in nodes {
        connected_by(node, by).await;
    }
}

/// `node` has a connection to every peer before `by`.
async fn connected_by(node: &Node, by: Instant) {
    while !node
        .status()
        .await
        .unwrap()
        .peers
        .iter()
        .all(|p| p.connected)
    {
        assert!(Instant::now() < by, "peers connect");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
