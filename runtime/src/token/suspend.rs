//! Suspend and resume: a node of a static cluster with a state directory that is stopped
//! with SIGTERM saves everything it needs to come back as the *same* run
//! ([`Node::suspend`](super::Node::suspend)), and its next start with that state
//! directory resumes it (`docs/faults.md`, "Suspend and resume").
//!
//! The file `state_dir/suspended` holds the run (its incarnation), the run's generation,
//! every lock's kernel site, and each link's channel state: the next number to send, the
//! messages sent and not acknowledged (resent after the reconnect, as after any lost
//! connection), the last number delivered from the peer and the peer's run. Its peers
//! see the suspend as a long pause of a node they know: messages wait for it and are
//! resent, and the resumed run is let in because it is the run they knew.
//!
//! The file is written like the generation (a temporary file, fsynced, renamed, the
//! directory fsynced), with the SHA-256 of its body on its first line; a resumed node
//! deletes it durably before it takes any step, so a later restart (a crash of the
//! resumed run) never reuses it: that start is a new run, refused as before.

use std::io::Write;
use std::path::{Path, PathBuf};

use hilock_kernel::NodeId;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::{hex, unhex};
use crate::config::Config;
use crate::wire::LockSite;

/// The file in the state directory.
pub(crate) const FILE: &str = "suspended";

/// The first word of the file's first line (with the format's version).
const MAGIC: &str = "hilock-suspended 1";

/// Who wrote the file: it is resumed only by the same node of the same cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub(crate) cluster: String,
    pub(crate) id: u16,
    /// Every node of the cluster: id and address, by id.
    pub(crate) nodes: Vec<(u16, String)>,
}

impl Identity {
    pub(crate) fn of(c: &Config) -> Identity {
        let mut nodes: Vec<(u16, String)> =
            c.nodes.iter().map(|n| (n.id, n.addr.to_string())).collect();
        nodes.sort();
        Identity {
            cluster: c.cluster.clone(),
            id: c.id,
            nodes,
        }
    }
}

/// One lock of the suspended node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SavedLock {
    pub(crate) path: String,
    pub(crate) site: LockSite,
    /// The node's request for the lock went to this refused peer (static membership).
    #[serde(default)]
    pub(crate) dead_end: Option<u16>,
    /// Requests of other nodes told about `dead_end`.
    #[serde(default)]
    pub(crate) told: Vec<(NodeId, u32)>,
}

/// One link of the suspended node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct SavedLink {
    pub(crate) peer: u16,
    /// The number the next message to the peer gets.
    pub(crate) next_seq: u64,
    /// Messages to the peer not acknowledged: number and payload (hex of its encoding).
    pub(crate) unacked: Vec<(u64, String)>,
    /// The peer's run this node knew, if any.
    pub(crate) peer_run: Option<u64>,
    /// The last number of the peer's messages delivered here.
    pub(crate) delivered: u64,
    /// Why the peer is refused, if it is.
    #[serde(default)]
    pub(crate) refused: Option<String>,
}

/// What a suspended node saves.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub(crate) identity: Identity,
    /// The run (incarnation).
    pub(crate) run: u64,
    /// The run's generation (`super::generation`).
    pub(crate) generation: u32,
    pub(crate) locks: Vec<SavedLock>,
    pub(crate) links: Vec<SavedLink>,
}

impl Snapshot {
    /// Messages kept for resending, over every link.
    pub(crate) fn unacked(&self) -> usize {
        self.links.iter().map(|l| l.unacked.len()).sum()
    }
}

/// Writes `s` to `dir/suspended` durably (temporary file, fsync, rename, fsync the
/// directory); returns the file.
pub(crate) fn write(dir: &Path, s: &Snapshot) -> Result<PathBuf, String> {
    let file = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let err = |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", file.display());
    // The temporary file's own failures name it: it is the file in the way.
    let tmp_err = |what: &str, e: std::io::Error| format!("cannot {what} {}: {e}", tmp.display());
    let body = serde_json::to_string(s).map_err(|e| format!("cannot encode the snapshot: {e}"))?;
    let digest = hex(&Sha256::digest(body.as_bytes()));
    std::fs::create_dir_all(dir).map_err(|e| err("create the directory of", e))?;
    let mut f = std::fs::File::create(&tmp).map_err(|e| tmp_err("write", e))?;
    f.write_all(format!("{MAGIC} sha256={digest}\n{body}\n").as_bytes())
        .map_err(|e| tmp_err("write", e))?;
    f.sync_all().map_err(|e| tmp_err("sync", e))?;
    drop(f);
    std::fs::rename(&tmp, &file).map_err(|e| err("replace", e))?;
    sync_dir(dir).map_err(|e| err("sync the directory of", e))?;
    Ok(file)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

/// The snapshot in `dir`, if there is one, checked (its digest, and that it was written
/// by the node `me` describes), and then deleted durably: it is never resumed twice.
/// `Err`: one line naming the file.
pub(crate) fn take(dir: &Path, me: &Identity) -> Result<Option<(Snapshot, PathBuf)>, String> {
    let file = dir.join(FILE);
    let text = match std::fs::read(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    let s = parse(&text, me).map_err(|e| {
        format!(
            "{}: {e}; remove it to start this node as a new run (which the cluster refuses \
             until the whole cluster restarts as a new run: stop every node and remove every \
             node's state_dir/suspended)",
            file.display()
        )
    })?;
    std::fs::remove_file(&file)
        .and_then(|()| sync_dir(dir))
        .map_err(|e| format!("cannot delete {} before resuming: {e}", file.display()))?;
    Ok(Some((s, file)))
}

fn parse(text: &[u8], me: &Identity) -> Result<Snapshot, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not a snapshot (not UTF-8)".to_string())?;
    let (head, body) = text
        .split_once('\n')
        .ok_or_else(|| "not a snapshot (no header line)".to_string())?;
    let digest = head
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(" sha256="))
        .ok_or_else(|| format!("not a snapshot of this version (header {head:?})"))?;
    let body = body.strip_suffix('\n').unwrap_or(body);
    if hex(&Sha256::digest(body.as_bytes())) != digest {
        return Err("corrupted (its SHA-256 does not match)".into());
    }
    let s: Snapshot = serde_json::from_str(body).map_err(|e| format!("does not decode: {e}"))?;
    if s.identity != *me {
        return Err(format!(
            "written by node {} of cluster {:?} with nodes {:?}, but this is node {} of \
             cluster {:?} with nodes {:?}",
            s.identity.id, s.identity.cluster, s.identity.nodes, me.id, me.cluster, me.nodes
        ));
    }
    let n = me.nodes.len();
    for l in &s.locks {
        crate::wire::check_path(&l.path)?;
        if l.site.site().id() != NodeId(me.id) {
            return Err(format!("the site of {} is not node {}'s", l.path, me.id));
        }
        if l.dead_end.is_some_and(|p| usize::from(p) >= n) {
            return Err(format!("{}: dead end at unknown node", l.path));
        }
    }
    for k in &s.links {
        if usize::from(k.peer) >= n || k.peer == me.id {
            return Err(format!("a link to unknown node {}", k.peer));
        }
        let mut last = 0;
        for (seq, b) in &k.unacked {
            if *seq <= last || *seq >= k.next_seq {
                return Err(format!(
                    "link to node {}: message number {seq} out of order",
                    k.peer
                ));
            }
            last = *seq;
            unhex(b).map_err(|e| format!("link to node {}: {e}", k.peer))?;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Identity {
        Identity {
            cluster: "c".into(),
            id: 1,
            nodes: vec![(0, "127.0.0.1:1".into()), (1, "127.0.0.1:2".into())],
        }
    }

    fn snapshot() -> Snapshot {
        let site = crate::token::recover::static_site(NodeId(1), "/a", 2, 3).unwrap();
        Snapshot {
            identity: me(),
            run: 0xabcdef,
            generation: 3,
            locks: vec![SavedLock {
                path: "/a".into(),
                site,
                dead_end: None,
                told: vec![],
            }],
            links: vec![SavedLink {
                peer: 0,
                next_seq: 4,
                unacked: vec![(2, hex(b"xy")), (3, hex(b"z"))],
                peer_run: Some(7),
                delivered: 9,
                refused: None,
            }],
        }
    }

    #[test]
    fn a_snapshot_is_read_back_once_and_then_gone() {
        let d = tempfile::tempdir().unwrap();
        let s = snapshot();
        let file = write(d.path(), &s).unwrap();
        let (back, at) = take(d.path(), &me()).unwrap().unwrap();
        assert_eq!(at, file);
        assert_eq!(back.run, s.run);
        assert_eq!(back.locks[0].site, s.locks[0].site);
        assert_eq!(back.links[0].unacked, s.links[0].unacked);
        assert!(!file.exists());
        assert!(take(d.path(), &me()).unwrap().is_none());
    }

    #[test]
    fn a_corrupted_or_foreign_snapshot_is_a_one_line_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        let file = write(d.path(), &snapshot()).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            text.replacen("\"run\":11259375", "\"run\":11259376", 1),
        )
        .unwrap();
        let e = take(d.path(), &me()).unwrap_err();
        assert!(
            e.contains("corrupted") && e.contains(FILE) && !e.contains('\n'),
            "{e}"
        );
        assert!(file.exists(), "a refused snapshot is left for the operator");
        write(d.path(), &snapshot()).unwrap();
        let mut other = me();
        other.id = 0;
        let e = take(d.path(), &other).unwrap_err();
        assert!(e.contains("written by node 1"), "{e}");
        std::fs::write(&file, "garbage").unwrap();
        assert!(take(d.path(), &me())
            .unwrap_err()
            .contains("not a snapshot"));
    }
}
