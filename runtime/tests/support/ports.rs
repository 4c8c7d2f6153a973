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
//!
//! Test processes that run at the same time (`cargo nextest` runs every test in a process
//! of its own) must not hand out the same port either: between one process's check and
//! its server's bind, another could take the port for its own server, and a test would
//! then talk to the other test's etcd. A port is therefore reserved for the process that
//! hands it out by a file `hilock-test-ports/PORT` in the temporary directory, created
//! exclusively and holding the process id; a file whose process has exited is stale and
//! is taken over.
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
        if reserve(port as u16) && TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free loopback port in {LOW}..{high}");
}

/// Reserves `port` for this process among the test processes running now: `false` if a
/// running process reserved it. A reservation lasts until its process exits (see the
/// module's documentation). Where the directory cannot be written, every port counts as
/// reserved by this process (the check of one process alone).
pub fn reserve(port: u16) -> bool {
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    let dir = std::env::temp_dir().join("hilock-test-ports");
    if fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let file = dir.join(port.to_string());
    let me = std::process::id();
    for _ in 0..2 {
        match OpenOptions::new().write(true).create_new(true).open(&file) {
            Ok(mut f) => return write!(f, "{me}").is_ok(),
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return true,
            Err(_) => {}
        }
        let owner = fs::read_to_string(&file).map(|s| s.trim().parse::<u32>());
        match owner {
            Ok(Ok(pid)) if pid == me => return true,
            // Stale: its process exited. Take it over.
            Ok(Ok(pid)) if !std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                let _ = fs::remove_file(&file);
            }
            // Held by a running process, or being written by one that just created it.
            _ => return false,
        }
    }
    false
}

/// [`free_port`] as `127.0.0.1:PORT`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}
