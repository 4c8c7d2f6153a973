//! Ending a cluster of node processes that record their kernel steps (`record` in the
//! configuration) and validating the records with `hilock trace-check`
//! (`#[path = "support/records.rs"] mod records;`): one copy for the trace and the fault
//! tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// How long a node may take to exit after SIGTERM before it is killed.
pub const EXIT_WITHIN: Duration = Duration::from_secs(10);

/// The record file of each node `0..nodes` in `dir` (`node-<id>.jsonl`).
pub fn record_files(dir: &Path, nodes: usize) -> Vec<PathBuf> {
    (0..nodes)
        .map(|id| dir.join(format!("node-{id}.jsonl")))
        .collect()
}

/// Sends SIGTERM to every child, then reaps each; a child still running [`EXIT_WITHIN`]
/// after the signals is killed (its record then ends where it was).
pub fn terminate<'a>(children: impl IntoIterator<Item = &'a mut Child>) {
    let mut children: Vec<&mut Child> = children.into_iter().collect();
    for c in &children {
        let ok = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM {}", c.id());
    }
    let t = Instant::now();
    for c in &mut children {
        while c.try_wait().unwrap().is_none() {
            if t.elapsed() > EXIT_WITHIN {
                let _ = c.kill();
                let _ = c.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `hilock trace-check` on `files`.
pub fn trace_check(files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hilock"))
        .arg("trace-check")
        .args(files)
        .output()
        .unwrap()
}
