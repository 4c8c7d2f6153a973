//! Trace validation: a node records every kernel step it takes (`record` in the node
//! configuration, `hilock demo --record DIR`), and [`check`] (`hilock trace-check`)
//! re-executes the records of all nodes through the real kernel in the one harness
//! [`Cluster`], per lock path, comparing every step's outputs with the recorded ones and
//! checking the harness's safety properties after every step (`docs/verification.md`,
//! "Trace validation").
//!
//! # The records
//! One JSON object per line ([`Line`]), appended to the node's file with one `write` per
//! line (a killed node leaves whole lines):
//!
//! - `run`: the node, its run (incarnation, random per start) and the cluster size `n`;
//!   the first line of every run.
//! - `site`: the node created (or re-created) the site of a lock path: `static` in
//!   generation `epoch` (the site every node computes for a static cluster, epoch 0 the
//!   fresh one: token at the path's initial holder), or `recovered` / `joining` (etcd
//!   recovery, not replayed); with the node's initial parent and the protocol variant.
//! - `step`: one call of the kernel's step on a path's site: the input (acquire, release,
//!   upgrade, set-priority, or deliver with the sender, the sender's sequence number of the
//!   message and the message), the outputs, and the kernel's error if it refused the
//!   input. Every `Send` output carries its sequence number on its link.
//! - `install`: an epoch installed on the path's site outside the step (etcd recovery),
//!   with its outputs. Not replayed: the check stops there for that path.
//!
//! **Sequence numbers** are per link and path: the k-th message the kernel of node `a`
//! addressed to node `b` about path `p` in one run is number k, and so is the k-th such
//! message node `b` hands to its kernel. They are not carried on the wire: a run's links
//! are FIFO and lossless (`crate::wire`, "Lossless channel": numbered envelopes, resent
//! after a reconnect, delivered exactly once in order while both runs live), and the node
//! numbers a message when it arrives at its core, before it may be held back. What the
//! check relies on is exactly that; a message that a node hands over in another order, twice
//! or without its record shows up as a delivery out of FIFO order, a duplicate, or a
//! missing record.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use hilock_harness::Cluster;
use hilock_kernel::token::recovery::Epoch;
use hilock_kernel::{Input, KernelError, Mode, NodeId, Output, Priority, Site, Variant, VALUE_LEN};
use serde::{Deserialize, Serialize};

use crate::config::MAX_NODES;
use crate::wire::{KMsg, LockSite, SMsg, LOCK};

use super::recover::static_site;

/// The version of the record format (in every `run` line).
pub const FORMAT: u32 = 1;

/// How a node created a path's site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The static cluster's site in a generation (`recover::static_site`; 0: fresh).
    Static,
    /// Created after an etcd recovery epoch (`recover::new_site`, epoch > 0).
    Recovered,
    /// A rejoining run's empty site (`FaultSite::joining`).
    Joining,
}

/// A kernel input as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TIn<M> {
    /// `Input::Acquire` of the path's lock.
    Acquire {
        /// The mode.
        mode: Mode,
    },
    /// `Input::TryAcquire` of the path's lock (a try-lock).
    TryAcquire {
        /// The mode.
        mode: Mode,
    },
    /// `Input::Cancel` (`spec/SPEC.md` 1.13).
    Cancel,
    /// `Input::Downgrade` (`spec/SPEC.md` 1.14).
    Downgrade {
        /// The weaker mode.
        mode: Mode,
    },
    /// `Input::Convert` (`spec/SPEC.md` 1.17).
    Convert {
        /// The mode asked for.
        mode: Mode,
        /// Whether it may wait.
        wait: bool,
    },
    /// `Input::SetValue` (`spec/SPEC.md` 1.15).
    SetValue {
        /// The value written.
        value: [u8; VALUE_LEN],
    },
    /// `Input::Release`.
    Release,
    /// `Input::Upgrade`.
    Upgrade,
    /// `Input::SetPriority`.
    SetPriority {
        /// The base priority.
        base: Priority,
    },
    /// `Input::Deliver`: the `seq`-th message from `from` on this path.
    Deliver {
        /// The sender.
        from: u16,
        /// The sender's sequence number of the message on its link and path.
        seq: u64,
        /// The message (with its epoch stamp).
        msg: M,
    },
}

/// An output as recorded: a `Send` has its sequence number on its link and path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TOut<M> {
    /// The output.
    pub o: Output<M>,
    /// For a `Send`: its number on (this node → `to`, path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// One line of a record file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Line<S, M> {
    /// A run of a node starts.
    Run {
        /// The node.
        node: u16,
        /// Its run (incarnation).
        run: u64,
        /// Nodes in the cluster.
        n: usize,
        /// [`FORMAT`].
        format: u32,
    },
    /// The node created the site of `path`.
    Site {
        /// The node.
        node: u16,
        /// Its run.
        run: u64,
        /// The lock path.
        path: S,
        /// How.
        how: How,
        /// The site's epoch (generation).
        epoch: Epoch,
        /// The node's initial parent for the path (`None`: it holds the token).
        parent: Option<u16>,
        /// The protocol variant the site runs.
        variant: Variant,
    },
    /// A kernel step.
    Step {
        /// The node.
        node: u16,
        /// Its run.
        run: u64,
        /// The node's step number in this run (1, 2, …; all paths).
        i: u64,
        /// The lock path.
        path: S,
        /// The input.
        input: TIn<M>,
        /// The outputs, in order.
        out: Vec<TOut<M>>,
        /// The kernel's error, if it refused the input.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        err: Option<String>,
    },
    /// An epoch installed outside the step (recovery).
    Install {
        /// The node.
        node: u16,
        /// Its run.
        run: u64,
        /// The lock path.
        path: S,
        /// The epoch.
        epoch: Epoch,
        /// The outputs.
        out: Vec<TOut<M>>,
    },
}

/// Appends a node's records to its file (see the [module](self) docs).
pub(crate) struct Recorder {
    file: std::fs::File,
    node: u16,
    run: u64,
    n: usize,
    steps: u64,
    /// Per path, per peer: the last sequence number sent and received.
    sent: HashMap<String, Vec<u64>>,
    received: HashMap<String, Vec<u64>>,
    buf: Vec<u8>,
    failed: bool,
}

impl Recorder {
    /// Opens (appends to) `path` and writes the run's first line.
    pub(crate) fn open(path: &Path, node: u16, run: u64, n: usize) -> std::io::Result<Recorder> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let mut r = Recorder {
            file,
            node,
            run,
            n,
            steps: 0,
            sent: HashMap::new(),
            received: HashMap::new(),
            buf: Vec::with_capacity(1024),
            failed: false,
        };
        r.write(&Line::<&str, &SMsg>::Run {
            node,
            run,
            n,
            format: FORMAT,
        });
        if r.failed {
            return Err(std::io::Error::other("cannot write the record"));
        }
        Ok(r)
    }

    fn write(&mut self, line: &Line<&str, &SMsg>) {
        if self.failed {
            return;
        }
        self.buf.clear();
        if serde_json::to_writer(&mut self.buf, line).is_err() {
            return;
        }
        self.buf.push(b'\n');
        if let Err(e) = self.file.write_all(&self.buf) {
            tracing::warn!(error = %e, "cannot append to the record file; recording stops");
            self.failed = true;
        }
    }

    fn counters<'a>(map: &'a mut HashMap<String, Vec<u64>>, n: usize, path: &str) -> &'a mut [u64] {
        if !map.contains_key(path) {
            map.insert(path.to_string(), vec![0; n]);
        }
        map.get_mut(path).expect("inserted above")
    }

    /// A message from `from` about `path` arrived at the core: its sequence number.
    pub(crate) fn arrived(&mut self, from: NodeId, path: &str) -> u64 {
        let c = Self::counters(&mut self.received, self.n, path);
        match c.get_mut(from.idx()) {
            Some(k) => {
                *k += 1;
                *k
            }
            None => 0,
        }
    }

    /// The site of `path` was created: `site`.
    pub(crate) fn site(&mut self, path: &str, how: How, site: &LockSite) {
        let (node, run) = (self.node, self.run);
        let parent = site
            .site()
            .lock(LOCK)
            .ok()
            .and_then(|k| k.parent())
            .map(|p| p.0);
        self.write(&Line::Site {
            node,
            run,
            path,
            how,
            epoch: site.epoch(),
            parent,
            variant: site.site().variant(),
        });
    }

    fn outputs<'a>(&mut self, path: &str, out: &'a [Output<SMsg>]) -> Vec<TOut<&'a SMsg>> {
        let n = self.n;
        let sent = Self::counters(&mut self.sent, n, path);
        out.iter()
            .map(|o| {
                let seq = match o {
                    Output::Send { to, .. } => sent.get_mut(to.idx()).map(|k| {
                        *k += 1;
                        *k
                    }),
                    _ => None,
                };
                TOut { o: o.as_ref(), seq }
            })
            .collect()
    }

    /// A kernel step on `path`'s site: its input (`seq`: a delivered message's number),
    /// its outputs and its result.
    pub(crate) fn step(
        &mut self,
        path: &str,
        input: &Input<'_, SMsg>,
        seq: u64,
        out: &[Output<SMsg>],
        result: Result<(), KernelError>,
    ) {
        self.steps += 1;
        let input = match *input {
            Input::Acquire { mode, .. } => TIn::Acquire { mode },
            Input::TryAcquire { mode, .. } => TIn::TryAcquire { mode },
            Input::Cancel { .. } => TIn::Cancel,
            Input::Downgrade { mode, .. } => TIn::Downgrade { mode },
            Input::Convert { mode, wait, .. } => TIn::Convert { mode, wait },
            Input::SetValue { value, .. } => TIn::SetValue { value },
            Input::Release { .. } => TIn::Release,
            Input::Upgrade { .. } => TIn::Upgrade,
            Input::SetPriority { base } => TIn::SetPriority { base },
            Input::Deliver { from, msg } => TIn::Deliver {
                from: from.0,
                seq,
                msg,
            },
        };
        let (out, err) = match result {
            Ok(()) => (self.outputs(path, out), None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let (node, run, i) = (self.node, self.run, self.steps);
        self.write(&Line::Step {
            node,
            run,
            i,
            path,
            input,
            out,
            err,
        });
    }

    /// An epoch installed on `path`'s site outside the step, with its outputs.
    pub(crate) fn install(&mut self, path: &str, epoch: Epoch, out: &[Output<SMsg>]) {
        let out = self.outputs(path, out);
        let (node, run) = (self.node, self.run);
        self.write(&Line::Install {
            node,
            run,
            path,
            epoch,
            out,
        });
    }
}

/// A copy of a kernel input (`Input` is `Copy` only for `Copy` messages).
pub(crate) fn copy_input<'a>(i: &Input<'a, SMsg>) -> Input<'a, SMsg> {
    match *i {
        Input::Acquire { lock, mode } => Input::Acquire { lock, mode },
        Input::TryAcquire { lock, mode } => Input::TryAcquire { lock, mode },
        Input::Cancel { lock } => Input::Cancel { lock },
        Input::Downgrade { lock, mode } => Input::Downgrade { lock, mode },
        Input::Convert { lock, mode, wait } => Input::Convert { lock, mode, wait },
        Input::SetValue { lock, value } => Input::SetValue { lock, value },
        Input::Release { lock } => Input::Release { lock },
        Input::Upgrade { lock } => Input::Upgrade { lock },
        Input::SetPriority { base } => Input::SetPriority { base },
        Input::Deliver { from, msg } => Input::Deliver { from, msg },
    }
}

// ------------------------------------------------------------------------- the check

/// The kernel site the check replays: the base protocol's site inside the runtime's
/// [`crate::wire::LockSite`] (whose step is this site's step for a message of its epoch).
type RSite = Site<MAX_NODES, 1, MAX_NODES>;

/// What a validated set of records holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Nodes with records.
    pub nodes: usize,
    /// Lock paths.
    pub paths: usize,
    /// Kernel steps replayed.
    pub steps: u64,
    /// Messages sent in the replayed steps.
    pub messages: u64,
    /// Messages sent that no record delivers (e.g. in flight when a node stopped).
    pub in_flight: usize,
    /// Where the check stopped before the end of a path's records, and why (recovery
    /// installs, a new run of a node): what follows is not checked.
    pub stopped: Vec<String>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trace validated: {} steps, {} messages, {} paths, {} nodes; {} messages never delivered",
            self.steps, self.messages, self.paths, self.nodes, self.in_flight
        )?;
        for s in &self.stopped {
            write!(f, "\nstopped: {s}")?;
        }
        Ok(())
    }
}

/// Why records do not validate: the file and line of the record at fault, its node, and
/// what differed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The record file.
    pub file: String,
    /// The line (1-based).
    pub line: usize,
    /// The node whose record it is.
    pub node: u16,
    /// What differed.
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trace rejected: node {} at {}:{}: {}",
            self.node, self.file, self.line, self.reason
        )
    }
}

/// A recorded step, where it is.
struct Rec {
    file: usize,
    line: usize,
    node: u16,
    i: u64,
    input: TIn<SMsg>,
    out: Vec<TOut<SMsg>>,
    err: Option<String>,
}

/// One path's records per node.
#[derive(Default)]
struct PathRecs {
    /// Per node: the generation of its site before its first step, and where.
    epoch: BTreeMap<u16, (Epoch, usize, usize)>,
    /// Per node: its recorded initial parent and variant (checked against the sites the
    /// check builds).
    start: BTreeMap<u16, (Option<u16>, Variant)>,
    steps: BTreeMap<u16, VecDeque<Rec>>,
    /// Nodes whose records of this path end early (not replayed past that point).
    stopped: BTreeMap<u16, String>,
}

/// Validates the records in `files` (every node's file of one run of a cluster).
/// `Err`: a file cannot be read or a line is not a record.
pub fn check(files: &[PathBuf]) -> Result<Result<Summary, Rejection>, String> {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut n: Option<usize> = None;
    let mut runs: BTreeMap<u16, u64> = BTreeMap::new();
    let mut paths: BTreeMap<String, PathRecs> = BTreeMap::new();
    // Nodes whose later run begins at (file, line): nothing of it is replayed.
    let mut late: BTreeMap<u16, String> = BTreeMap::new();
    // Per node: the file its records are in (a node's records are one file).
    let mut file_of: BTreeMap<u16, usize> = BTreeMap::new();
    // The runs whose `run` line was read.
    let mut begun: std::collections::BTreeSet<(u16, u64)> = Default::default();
    // Per node: the number of its last step record (the recorder numbers a run's steps
    // 1, 2, … over every path).
    let mut numbered: BTreeMap<u16, u64> = BTreeMap::new();
    let mut misnumbered: Option<Rejection> = None;
    for (fi, path) in files.iter().enumerate() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for (li, raw) in text.lines().enumerate() {
            let line = li + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let rec: Line<String, SMsg> = serde_json::from_str(raw)
                .map_err(|e| format!("{}:{line}: not a record: {e}", path.display()))?;
            let (node, run) = match &rec {
                Line::Run { node, run, .. }
                | Line::Site { node, run, .. }
                | Line::Step { node, run, .. }
                | Line::Install { node, run, .. } => (*node, *run),
            };
            if let Line::Run { n: m, format, .. } = &rec {
                if *format != FORMAT {
                    return Err(format!(
                        "{}:{line}: record format {format}, this check reads {FORMAT}",
                        path.display()
                    ));
                }
                if *m == 0 || *m > MAX_NODES {
                    return Err(format!(
                        "{}:{line}: node {node} runs in a cluster of {m} nodes; a cluster has \
                         1 to {MAX_NODES}",
                        path.display()
                    ));
                }
                if let Some(n) = n.filter(|n| n != m) {
                    return Err(format!(
                        "{}:{line}: node {node} runs in a cluster of {m} nodes, an earlier \
                         record's in one of {n}",
                        path.display()
                    ));
                }
                n = Some(*m);
                begun.insert((node, run));
            } else if !begun.contains(&(node, run)) {
                return Err(format!(
                    "{}:{line}: a record of node {node}'s run {run:#x} before that run's `run` \
                     line (each run's records begin with it)",
                    path.display()
                ));
            }
            let f0 = *file_of.entry(node).or_insert(fi);
            if f0 != fi {
                return Err(format!(
                    "node {node}'s records are given twice, in {} and in {}: give each \
                     node's file once",
                    names[f0],
                    path.display()
                ));
            }
            let first = *runs.entry(node).or_insert(run);
            if first != run {
                late.entry(node).or_insert_with(|| {
                    format!(
                        "node {node} at {}:{line}: a new run ({run:#x}) after run {first:#x}; \
                         its records and later ones of the node are not replayed",
                        path.display()
                    )
                });
                continue;
            }
            if late.contains_key(&node) {
                continue;
            }
            let at = |p: &str| format!("node {node} at {}:{line} on {p}", path.display());
            match rec {
                Line::Run { .. } => {}
                Line::Site {
                    path: p,
                    how,
                    epoch,
                    parent,
                    variant,
                    ..
                } => {
                    let pr = paths.entry(p.clone()).or_default();
                    if pr.stopped.contains_key(&node) {
                        continue;
                    }
                    let stepped = pr.steps.get(&node).is_some_and(|s| !s.is_empty());
                    if how != How::Static || stepped {
                        let what = if stepped {
                            "created again after steps were taken"
                        } else {
                            "not built from the configuration"
                        };
                        pr.stopped.insert(
                            node,
                            format!(
                                "{}: the site is {what} ({how:?}, epoch {epoch}); the rest of \
                                 the path is not replayed",
                                at(&p)
                            ),
                        );
                    } else {
                        pr.epoch.insert(node, (epoch, fi, line));
                        pr.start.insert(node, (parent, variant));
                    }
                }
                Line::Install { path: p, epoch, .. } => {
                    let pr = paths.entry(p.clone()).or_default();
                    pr.stopped.entry(node).or_insert(format!(
                        "{}: epoch {epoch} installed outside the step (recovery); the rest of \
                         the path is not replayed",
                        at(&p)
                    ));
                }
                Line::Step {
                    path: p,
                    i,
                    input,
                    out,
                    err,
                    ..
                } => {
                    let last = numbered.insert(node, i).unwrap_or(0);
                    if i != last.wrapping_add(1) && misnumbered.is_none() {
                        // Told only if the replay finds nothing: a record missing or
                        // repeated is named better by what it breaks there.
                        misnumbered = Some(Rejection {
                            file: names[fi].clone(),
                            line,
                            node,
                            reason: format!(
                                "step {i} on {p}: the node's steps are numbered 1, 2, … and \
                                 the record before is step {last} (a record missing, repeated \
                                 or out of order)"
                            ),
                        });
                    }
                    let pr = paths.entry(p.clone()).or_default();
                    if pr.stopped.contains_key(&node) {
                        continue;
                    }
                    if !pr.epoch.contains_key(&node) {
                        return Ok(Err(Rejection {
                            file: names[fi].clone(),
                            line,
                            node,
                            reason: format!(
                                "step {i} on {p}: no `site` line of the node for {p} before \
                                 it (a missing record?)"
                            ),
                        }));
                    }
                    pr.steps.entry(node).or_default().push_back(Rec {
                        file: fi,
                        line,
                        node,
                        i,
                        input,
                        out,
                        err,
                    });
                }
            }
        }
    }
    let Some(n) = n else {
        return Err("no `run` line in the records".into());
    };
    if let Some(&node) = runs.keys().find(|&&k| usize::from(k) >= n) {
        return Err(format!("node {node} is not a node of a cluster of {n}"));
    }
    // A delivery from a node whose file was not given: a missing file, not a message
    // never sent.
    for pr in paths.values() {
        for r in pr.steps.values().flatten() {
            if let TIn::Deliver { from, .. } = &r.input {
                if !runs.contains_key(from) {
                    return Err(format!(
                        "no records of node {from} were given, but node {} at {}:{} \
                         delivers a message from it: give every node's file of the run",
                        r.node, names[r.file], r.line
                    ));
                }
            }
        }
    }
    let mut summary = Summary {
        nodes: runs.len(),
        paths: paths.len(),
        stopped: late.values().cloned().collect(),
        ..Summary::default()
    };
    for (path, pr) in paths {
        summary.stopped.extend(pr.stopped.values().cloned());
        if let Err(r) = replay_path(&path, n, pr, &late, &names, &mut summary) {
            return Ok(Err(r));
        }
    }
    Ok(match misnumbered {
        Some(r) => Err(r),
        None => Ok(summary),
    })
}

/// A message's sequence number and where it was recorded (file, line).
type Numbered = (u64, usize, usize);

/// The per-link bookkeeping of one path's replay.
#[derive(Default)]
struct Links {
    /// Per link: the sequence numbers of the messages in flight, head first (the
    /// cluster's channel holds the messages in the same order), with their record.
    flight: HashMap<(u16, u16), VecDeque<Numbered>>,
    /// Per link: the last sequence number sent.
    sent: HashMap<(u16, u16), u64>,
    /// Per link: the last sequence number delivered, and where.
    delivered: HashMap<(u16, u16), Numbered>,
}

fn replay_path(
    path: &str,
    n: usize,
    mut pr: PathRecs,
    late: &BTreeMap<u16, String>,
    names: &[String],
    summary: &mut Summary,
) -> Result<(), Rejection> {
    let reject = |r: &Rec, reason: String| Rejection {
        file: names[r.file].clone(),
        line: r.line,
        node: r.node,
        reason: format!("step {} on {path}: {reason}", r.i),
    };
    // The generation every node's site of the path starts in (they compute the same one).
    let g = pr.epoch.values().next().map_or(0, |e| e.0);
    if let Some((&node, &(other, fi, line))) = pr.epoch.iter().find(|(_, e)| e.0 != g) {
        return Err(Rejection {
            file: names[fi].clone(),
            line,
            node,
            reason: format!(
                "{path}: the site starts in generation {other}, another node's in generation {g}"
            ),
        });
    }
    let sites = (0..n)
        .map(|i| static_site(NodeId(i as u16), path, n, g).map(|s| s.site().clone()))
        .collect::<Result<Vec<RSite>, _>>()
        .map_err(|e| Rejection {
            file: names.first().cloned().unwrap_or_default(),
            line: 0,
            node: 0,
            reason: format!("{path}: cannot build the sites of generation {g}: {e}"),
        })?;
    // The sites built are the ones the nodes recorded they started with.
    for (&node, &(parent, variant)) in &pr.start {
        let built = &sites[usize::from(node)];
        let p = built
            .lock(hilock_kernel::LockId(0))
            .ok()
            .and_then(|k| k.parent())
            .map(|p| p.0);
        if p != parent || built.variant() != variant {
            let &(_, fi, line) = &pr.epoch[&node];
            return Err(Rejection {
                file: names[fi].clone(),
                line,
                node,
                reason: format!(
                    "{path}: the node started with parent {parent:?} and variant {variant:?}; \
                     the site of generation {g} has parent {p:?} and variant {:?}",
                    built.variant()
                ),
            });
        }
    }
    let mut cluster = Cluster::new(sites);
    let mut links = Links::default();
    // Per node: its last record replayed (file, line).
    let mut replayed: BTreeMap<u16, (usize, usize)> = BTreeMap::new();
    loop {
        // Deliveries first, then other local inputs, releases last: a hold lasts as long
        // as the records allow, so the properties are checked where holds overlap most.
        let class = |r: &Rec| match r.input {
            TIn::Deliver { .. } => 0,
            TIn::Release => 2,
            _ => 1,
        };
        let enabled = |r: &Rec, links: &Links| match &r.input {
            TIn::Deliver { from, seq, .. } => links
                .flight
                .get(&(*from, r.node))
                .and_then(|q| q.front())
                .is_some_and(|h| h.0 == *seq),
            _ => true,
        };
        let mut pick = None;
        for c in 0..3 {
            pick = pr
                .steps
                .iter()
                .find(|(_, q)| {
                    q.front()
                        .is_some_and(|r| class(r) == c && enabled(r, &links))
                })
                .map(|(&node, _)| node);
            if pick.is_some() {
                break;
            }
        }
        let Some(node) = pick else {
            break;
        };
        let r = pr
            .steps
            .get_mut(&node)
            .and_then(|q| q.pop_front())
            .expect("picked a node with a record");
        apply(&mut cluster, &mut links, &r, g, summary).map_err(|reason| reject(&r, reason))?;
        summary.steps += 1;
        replayed.insert(node, (r.file, r.line));
    }
    // Nothing applicable: every remaining head is a delivery whose message is not at the
    // head of its link. A head that waits for a message its sender has not sent yet, while
    // the sender has records left, waits for the sender: what is wrong is where that chain
    // of waits ends — a record at fault, a sender whose records end, or one the check
    // stopped at (then nothing is wrong: the records after it are not replayed).
    enum Wait {
        /// A record at fault: its rank (lower is worse) and why.
        Root(u8, String),
        /// The message would come from this node's records not replayed yet.
        Sender(u16),
        /// The sender's records stopped (recovery, a new run).
        Stopped(u16),
    }
    let wait = |r: &Rec| -> Option<Wait> {
        let TIn::Deliver { from, seq, .. } = &r.input else {
            return None;
        };
        let link = (*from, r.node);
        Some(
            match (
                links.delivered.get(&link),
                links.flight.get(&link).and_then(|q| q.front()),
            ) {
                _ if *from == r.node => Wait::Root(
                    0,
                    format!("delivers message #{seq} from node {from}, itself"),
                ),
                (Some(&(d, fi, line)), _) if *seq <= d => Wait::Root(
                    0,
                    format!(
                        "delivers message #{seq} from node {from} again (delivered up to #{d}, last at {}:{line})",
                        names[fi]
                    ),
                ),
                (_, Some(&(h, fi, line))) => Wait::Root(
                    1,
                    format!(
                        "delivers message #{seq} from node {from} out of FIFO order: #{h} (sent at {}:{line}) is at the head of the link and no record delivers it first (a missing record?)",
                        names[fi]
                    ),
                ),
                _ if late.contains_key(from) || pr.stopped.contains_key(from) => {
                    Wait::Stopped(*from)
                }
                _ if pr.steps.get(from).is_some_and(|q| !q.is_empty()) => Wait::Sender(*from),
                _ => {
                    let end = match replayed.get(from) {
                        Some(&(fi, line)) => {
                            format!("its records on {path} end at {}:{line}", names[fi])
                        }
                        None => format!("it has no records on {path}"),
                    };
                    Wait::Root(
                        2,
                        format!(
                            "delivers message #{seq} from node {from} that was never sent (node {from} sent {} on this link; {end})",
                            links.sent.get(&link).copied().unwrap_or(0)
                        ),
                    )
                }
            },
        )
    };
    let mut worst: Option<(u8, Rejection)> = None;
    for (&node, q) in &pr.steps {
        let Some(r) = q.front() else { continue };
        // Follow the waits from this node's head to where they end.
        let mut chain = vec![node];
        let mut head = r;
        let end = loop {
            match wait(head) {
                None => break None,
                Some(Wait::Sender(f)) if chain.contains(&f) => {
                    break Some(Wait::Root(
                        1,
                        format!(
                            "waits for a message of node {f}, whose records wait for this \
                             node's (nodes {chain:?}): a cycle of deliveries, a record missing \
                             or out of order"
                        ),
                    ))
                }
                Some(Wait::Sender(f)) => {
                    chain.push(f);
                    match pr.steps.get(&f).and_then(|q| q.front()) {
                        Some(next) => head = next,
                        None => break None,
                    }
                }
                other => break other,
            }
        };
        match end {
            Some(Wait::Root(rank, reason)) => {
                if worst.as_ref().is_none_or(|(w, _)| rank < *w) {
                    worst = Some((rank, reject(head, reason)));
                }
            }
            Some(Wait::Stopped(s)) => {
                let through = if chain.len() > 1 {
                    format!(" (through nodes {:?})", &chain[1..])
                } else {
                    String::new()
                };
                summary.stopped.push(format!(
                    "node {} at {}:{}: {} records on {path} not replayed: they wait for \
                     messages of node {s}{through}, whose records stopped",
                    r.node,
                    names[r.file],
                    r.line,
                    q.len()
                ));
            }
            Some(Wait::Sender(_)) | None => {}
        }
    }
    if let Some((_, rej)) = worst {
        return Err(rej);
    }
    summary.in_flight += cluster.in_flight();
    Ok(())
}

/// The recorded output as the base protocol's: a `Send`'s stamp must be the run's
/// generation `g` (the epoch the node's site was in).
fn unstamp(o: &Output<SMsg>, g: Epoch) -> Result<Output<KMsg>, String> {
    if let Output::Send { to, msg } = o {
        if msg.epoch != g {
            return Err(format!(
                "a message to node {} is stamped epoch {}, the site is in epoch {g}",
                to.0, msg.epoch
            ));
        }
    }
    Ok(o.as_ref().map_msg(|m| m.msg.clone()))
}

fn short<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s.chars().count() > 600 {
        format!("{}…", s.chars().take(600).collect::<String>())
    } else {
        s
    }
}

/// Applies recorded step `r` to the cluster and compares.
fn apply(
    cluster: &mut Cluster<RSite>,
    links: &mut Links,
    r: &Rec,
    g: Epoch,
    summary: &mut Summary,
) -> Result<(), String> {
    use hilock_kernel::LockId;
    let me = NodeId(r.node);
    let lock = LockId(0);
    let result = match &r.input {
        TIn::Acquire { mode } => cluster.input(me, Input::Acquire { lock, mode: *mode }),
        TIn::TryAcquire { mode } => cluster.input(me, Input::TryAcquire { lock, mode: *mode }),
        TIn::Cancel => cluster.input(me, Input::Cancel { lock }),
        TIn::Downgrade { mode } => cluster.input(me, Input::Downgrade { lock, mode: *mode }),
        TIn::Convert { mode, wait } => cluster.input(
            me,
            Input::Convert {
                lock,
                mode: *mode,
                wait: *wait,
            },
        ),
        TIn::SetValue { value } => cluster.input(
            me,
            Input::SetValue {
                lock,
                value: *value,
            },
        ),
        TIn::Release => cluster.input(me, Input::Release { lock }),
        TIn::Upgrade => cluster.input(me, Input::Upgrade { lock }),
        TIn::SetPriority { base } => cluster.input(me, Input::SetPriority { base: *base }),
        TIn::Deliver { from, seq, msg } => {
            let from_id = NodeId(*from);
            if msg.epoch != g {
                return Err(format!(
                    "delivers a message stamped epoch {}, the site is in epoch {g}",
                    msg.epoch
                ));
            }
            let head = cluster.channel(from_id, me).next().cloned();
            if head.as_ref() != Some(&msg.msg) {
                return Err(format!(
                    "delivers as #{seq} from node {from} the message {}, but node {from} sent {}",
                    short(&msg.msg),
                    short(&head)
                ));
            }
            let (_, res) = cluster
                .deliver(from_id, me)
                .ok_or_else(|| "the link is empty".to_string())?;
            links
                .flight
                .get_mut(&(*from, r.node))
                .and_then(|q| q.pop_front())
                .expect("the head was checked");
            links
                .delivered
                .insert((*from, r.node), (*seq, r.file, r.line));
            res
        }
    };
    match (result, &r.err) {
        (Err(e), Some(want)) => {
            let got = e.kernel().map(|k| k.to_string()).unwrap_or(e.to_string());
            if &got != want {
                return Err(format!(
                    "divergence: the kernel refused the input with \"{got}\", the record says \"{want}\""
                ));
            }
        }
        (Err(e), None) => {
            return Err(format!(
                "divergence: the kernel refuses the input ({e}); the record has outputs {}",
                short(&r.out.iter().map(|o| &o.o).collect::<Vec<_>>())
            ))
        }
        (Ok(step), Some(want)) => {
            return Err(format!(
            "divergence: the record says the kernel refused the input (\"{want}\"); it gives {}",
            short(&step.outputs)
        ))
        }
        (Ok(step), None) => {
            let recorded = r
                .out
                .iter()
                .map(|o| unstamp(&o.o, g))
                .collect::<Result<Vec<_>, _>>()?;
            if recorded != step.outputs {
                let at = recorded
                    .iter()
                    .zip(&step.outputs)
                    .position(|(a, b)| a != b)
                    .unwrap_or(recorded.len().min(step.outputs.len()));
                return Err(format!(
                    "divergence at output {at}: recorded {}, the kernel gives {}",
                    short(&recorded.get(at)),
                    short(&step.outputs.get(at))
                ));
            }
            for o in &r.out {
                if let Output::Send { to, .. } = &o.o {
                    let link = (r.node, to.0);
                    let last = links.sent.entry(link).or_insert(0);
                    if o.seq != Some(*last + 1) {
                        return Err(format!(
                            "a message to node {} is numbered {:?}, the next on the link is #{}",
                            to.0,
                            o.seq,
                            *last + 1
                        ));
                    }
                    *last += 1;
                    summary.messages += 1;
                    links
                        .flight
                        .entry(link)
                        .or_default()
                        .push_back((*last, r.file, r.line));
                }
            }
        }
    }
    cluster
        .check_safety()
        .map_err(|v| format!("after this step: {v}"))?;
    Ok(())
}
