//! The cluster's generation in static membership with a state directory
//! ([`Config::state_dir`](crate::config::Config::state_dir)): fences that never go back
//! across restarts of the whole cluster (`docs/faults.md`, "Fences across restarts").
//!
//! Each node keeps in its state directory the last generation it served in. At start it
//! offers that plus one to every peer (the first message of its run on each link,
//! [`Payload::Generation`](crate::wire::Payload::Generation)); once it has every node's
//! offer the run's generation `g` is their maximum — the same at every node — and it writes
//! `g` (write, fsync, rename, fsync the directory) before it takes any protocol step. Every
//! lock is then created in epoch `g` with its token at its initial holder and its fences
//! from `g << 32` on: the kernel's seeding of a regenerated token
//! ([`FaultSite::install`](hilock_kernel::token::recovery::FaultSite::install)). A run of
//! the whole cluster that serves has every node's offer, each at least one above what that
//! node wrote in the run before, so its generation is above every earlier one, and so are
//! its fences (while a lock is granted fewer than 2³² times per run).

use std::io::Write;
use std::path::Path;

/// The file in the state directory.
const FILE: &str = "generation";

/// The generation this node last served in (0: none, or no state yet); creates the
/// directory.
pub(crate) fn read(dir: &Path) -> Result<u32, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create state_dir {}: {e}", dir.display()))?;
    let file = dir.join(FILE);
    match std::fs::read_to_string(&file) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("{}: not a generation ({e}): {s:?}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
    }
}

/// Records generation `g` durably: written to a temporary file, synced, renamed over the
/// old one, and the directory synced.
pub(crate) fn write(dir: &Path, g: u32) -> Result<(), String> {
    let file = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let err = |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", file.display());
    let mut f = std::fs::File::create(&tmp).map_err(|e| err("write", e))?;
    f.write_all(format!("{g}\n").as_bytes())
        .map_err(|e| err("write", e))?;
    f.sync_all().map_err(|e| err("sync", e))?;
    drop(f);
    std::fs::rename(&tmp, &file).map_err(|e| err("replace", e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err("sync the directory of", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_generation_is_read_back_and_a_missing_one_is_zero() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("state");
        assert_eq!(read(&dir), Ok(0));
        write(&dir, 7).unwrap();
        assert_eq!(read(&dir), Ok(7));
        write(&dir, 8).unwrap();
        assert_eq!(read(&dir), Ok(8));
        std::fs::write(dir.join(FILE), "x").unwrap();
        assert!(read(&dir).unwrap_err().contains("not a generation"));
    }
}
