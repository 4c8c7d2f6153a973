//! Child processes and ports of the process-level tests (`#[path = "support/procs.rs"] mod
//! procs;`): one copy for every test file.
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

/// A loopback address for a server another process starts ([`crate::ports`]).
pub fn free_port() -> SocketAddr {
    crate::ports::free_addr()
}
