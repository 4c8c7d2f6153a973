//! Three nodes in one process on 127.0.0.1, taking hierarchical locks through the API.
//!
//! `cargo run -p hilock-runtime --example airline`

use std::time::Duration;

use hilock_runtime::{Config, Mode, Node, NodeAddr, Options};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Bind the listeners first so that every node knows every address.
    let mut listeners = Vec::new();
    let mut nodes = Vec::new();
    for id in 0..3u16 {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        nodes.push(NodeAddr {
            id,
            addr: l.local_addr()?,
        });
        listeners.push(l);
    }
    let mut running = Vec::new();
    for (id, l) in listeners.into_iter().enumerate() {
        let config = Config::new("airline", "example secret", id as u16, nodes.clone())?;
        running.push(Node::start_on(config, l).await?);
    }
    let (a, b, c) = (&running[0], &running[1], &running[2]);

    // Readers of two entries share the table (IR on /airline, R on each entry).
    let r1 = a.lock("/airline/UA93", Mode::R).await?;
    let r2 = b.lock("/airline/LH400", Mode::R).await?;
    println!("node 0 holds {r1:?}, node 1 holds {r2:?}");

    // A writer of the whole table waits for them; here it gives up after 100 ms.
    let quick = Options {
        priority: 0,
        timeout: Some(Duration::from_millis(100)),
        nested: false,
    };
    match c.lock_with("/airline", Mode::W, quick).await {
        Err(e) => println!("node 2: {e}"),
        Ok(g) => println!("node 2 unexpectedly got {g:?}"),
    }
    drop((r1, r2));

    // Update lock: read first, then upgrade to W (Rule 7).
    let mut u = c.lock("/airline", Mode::U).await?;
    println!("node 2 holds {u:?}");
    u.upgrade().await?;
    println!("node 2 upgraded: {u:?}");
    drop(u);

    let s = a.status().await?;
    println!("{}", hilock_runtime::client::render_status(&s));
    for n in running {
        n.shutdown().await;
    }
    Ok(())
}
