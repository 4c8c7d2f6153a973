//! # hilock-spec
//!
//! hilock's specification as data: the thesis tables and rules ([`export`]), the scenario
//! format and runner ([`scenario`]), the trace format ([`trace`]), the workload of the
//! experiments ([`workload`]) and the site types of the host-side tools ([`system`]). The
//! prose is in `spec/SPEC.md`. The harness the scenario runner steps (`Cluster`: routing,
//! delivery, faults and the properties) is the crate `hilock-harness` (`harness/`).

pub mod export;
pub mod scenario;
pub mod system;
pub mod trace;
pub mod workload;

pub use scenario::{Prepared, RunReport, Scenario};
pub use system::{ModelSite, SpecMsg, SpecSite, System};
pub use trace::{NodeSnapshot, Trace};

/// `s` as one word of a POSIX shell command line, for the commands the host-side tools
/// print for a user to paste: as it is when it holds only characters no shell treats
/// specially, in single quotes otherwise (a `'` inside as `'\''`).
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Directory of the thesis scenarios (absolute, from this crate's manifest directory).
pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A printed command pastes into a shell as it is, also for paths with spaces or
    /// quotes.
    #[test]
    fn a_path_with_spaces_or_quotes_is_one_shell_word() {
        assert_eq!(shell_word("/tmp/a-b_c.json"), "/tmp/a-b_c.json");
        assert_eq!(shell_word("/tmp/my dir/c.json"), "'/tmp/my dir/c.json'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", shell_word("a b'c$d")))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b'c$d");
    }
}
