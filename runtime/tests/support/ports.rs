//! Loopback ports for servers that a test starts in another process (a node, etcd, a
//! redis replica). Shared by every test that needs one (`#[path = "support/ports.rs"] mod
//! ports;`, from cli/tests `#[path = "../../runtime/tests/support/ports.rs"]`).
//!
//! Binding port 0 and releasing it is racy: the kernel hands out that port again as the
//! local end of the next outgoing connection (a node dialling etcd, a client dialling a
//! node), and the server started a moment later cannot bind it. Ports here are taken from
//! below the kernel's ephemeral range, which outgoing connections never use; each test
//! process starts at a point derived from its process id and walks upward, so one process
//! hands out a port at most once, and a port is handed out only if it can be bound now.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The lowest port considered: well above the registered services most machines run.
const LOW: u32 = 10_000;

/// The low end of the kernel's ephemeral range (`ip_local_port_range`), 32768 where it
/// cannot be read.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A loopback port no outgoing connection can take, free when this returns.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let high = ephemeral_low();
    if high <= LOW + 1_000 {
        // No room below the ephemeral range: fall back to the kernel's choice.
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind a loopback port");
    }
    let span = high - LOW;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let port = LOW + (start + NEXT.fetch_add(1, Relaxed)) % span;
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free loopback port in {LOW}..{high}");
}

/// [`free_port`] as `127.0.0.1:PORT`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}
