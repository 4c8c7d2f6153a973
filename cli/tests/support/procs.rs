//! Child processes and ports of the process-level tests (`#[path = "support/procs.rs"] mod
//! procs;`): one copy instead of one per test file (duplicates D2).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Child;

/// A child process, killed (SIGKILL) and reaped when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address with a port that was free a moment ago (bound, then released).
pub fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}
