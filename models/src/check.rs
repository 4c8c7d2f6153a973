//! The API the `hilock check` / `hilock explore` subcommands and the verify suite call:
//! run an exhaustive BFS check of a [`ModelConfig`] and report every property, with
//! counterexamples as `hilock-trace/1` traces; or serve the Stateright Explorer on it.

use crate::token::{Action, BaseModel, ModelConfig, ScriptOp, State, BYPASS, REACHED, SAFETY};
use hilock_kernel::NodeId;
use hilock_spec::trace::{Trace, TraceInput, TraceStep, TRACE_FORMAT};
use serde::Serialize;
use stateright::{Checker, Expectation, Model, Path};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Stateright 0.31's BFS records, for an `always` property, the path of the *last*
/// violating state it visits (each violation overwrites the discovery before it), so a
/// discovery can run on well past the violation. This cuts `path` at its first state that
/// violates `property`: a run of the model that ends in the violation. (It is the first
/// violation on that run, not necessarily the shortest counterexample of the model.)
pub fn first_failure<M>(
    model: &M,
    property: &str,
    path: &Path<M::State, M::Action>,
) -> Path<M::State, M::Action>
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let Some(prop) = model.properties().into_iter().find(|p| p.name == property) else {
        return path.clone();
    };
    let steps = path.clone().into_vec();
    let Some(k) = steps.iter().position(|(s, _)| !(prop.condition)(model, s)) else {
        return path.clone();
    };
    let actions: Vec<M::Action> = steps[..k].iter().filter_map(|(_, a)| a.clone()).collect();
    Path::from_actions(model, steps[0].0.clone(), actions.iter()).unwrap_or_else(|| path.clone())
}

/// A shortest run of `model` that ends in a state violating the `always` property
/// `property`, or `None` if none is at most `bound` steps long: a breadth-first search from
/// the initial states that stops at the first violating state it meets, trying the
/// actions in the order the model lists them (so the same model always gives the same
/// run). It keeps a fingerprint and a parent link per state it meets, up to the depth of
/// the violation.
pub fn shortest_failure<M>(
    model: &M,
    property: &str,
    bound: usize,
) -> Option<Path<M::State, M::Action>>
where
    M: Model,
    M::State: Clone + PartialEq + std::hash::Hash,
    M::Action: Clone + PartialEq,
{
    use std::collections::{HashMap, VecDeque};
    use std::hash::{Hash, Hasher};
    // A 64-bit fingerprint, as Stateright's checkers keep (theirs is private).
    let fingerprint = |st: &M::State| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        st.hash(&mut h);
        h.finish()
    };
    let prop = model
        .properties()
        .into_iter()
        .find(|p| p.name == property && p.expectation == Expectation::Always)?;
    let bad = |st: &M::State| !(prop.condition)(model, st);
    // fingerprint → (parent's fingerprint, action index), None for an initial state.
    let mut seen: HashMap<u64, Option<(u64, usize)>> = HashMap::new();
    let mut level: VecDeque<(M::State, u64)> = VecDeque::new();
    let mut found = None;
    for (i, st) in model.init_states().into_iter().enumerate() {
        let fp = fingerprint(&st);
        if seen.insert(fp, None).is_none() {
            if bad(&st) {
                found = Some((fp, i));
                break;
            }
            level.push_back((st, fp));
        }
    }
    let mut depth = 0;
    let mut actions = Vec::new();
    while found.is_none() && !level.is_empty() && depth < bound {
        depth += 1;
        let mut next_level = VecDeque::new();
        'level: for (st, fp) in level {
            actions.clear();
            model.actions(&st, &mut actions);
            for (k, a) in actions.drain(..).enumerate() {
                let Some(next) = model.next_state(&st, a) else {
                    continue;
                };
                if !model.within_boundary(&next) {
                    continue;
                }
                let nfp = fingerprint(&next);
                if seen.contains_key(&nfp) {
                    continue;
                }
                seen.insert(nfp, Some((fp, k)));
                if bad(&next) {
                    found = Some((nfp, 0));
                    break 'level;
                }
                next_level.push_back((next, nfp));
            }
        }
        level = next_level;
    }
    let (mut fp, init_index) = found?;
    // The action indices back to an initial state, then forward.
    let mut indices = VecDeque::new();
    while let Some(Some((parent, k))) = seen.get(&fp) {
        indices.push_front(*k);
        fp = *parent;
    }
    let init_index = if indices.is_empty() {
        init_index
    } else {
        model
            .init_states()
            .iter()
            .position(|s| fingerprint(s) == fp)?
    };
    let inits = model.init_states();
    let init = inits.get(init_index)?.clone();
    let mut st = init.clone();
    let mut taken = Vec::new();
    for k in indices {
        let mut acts = Vec::new();
        model.actions(&st, &mut acts);
        let a = acts.into_iter().nth(k)?;
        st = model.next_state(&st, a.clone())?;
        taken.push(a);
    }
    Path::from_actions(model, init, taken.iter())
}

/// A shortest run that violates the `always` property `property`, given the run `path` a
/// check found: `path` cut at its first violation ([`first_failure`]), then
/// [`shortest_failure`] bounded by that length (so the search never goes deeper than the
/// check's own counterexample). The same model always gives the same run.
pub fn shortest_counterexample<M>(
    model: &M,
    property: &str,
    path: &Path<M::State, M::Action>,
) -> Path<M::State, M::Action>
where
    M: Model,
    M::State: Clone + PartialEq + std::hash::Hash,
    M::Action: Clone + PartialEq,
{
    let cut = first_failure(model, property, path);
    let bound = cut.clone().into_actions().len();
    shortest_failure(model, property, bound).unwrap_or(cut)
}

/// The `always` properties `st` violates, as a line for the Explorer's step text
/// (empty if none): `⚠ violates: P1 mutual exclusion, P3 owned-mode invariant`, and a
/// line that says the Properties pane's marks do not judge this state (the Explorer marks
/// a property "✅ Safety holds" at every state off the paths its own search recorded, even
/// at a state that violates it).
pub fn violations_line<M: Model>(model: &M, st: &M::State) -> String {
    violations_line_except(model, st, &[])
}

/// [`violations_line`] without the properties named in `skip` (the base model's P6 bypass
/// bounds, which measure the least bound rather than require one).
pub fn violations_line_except<M: Model>(model: &M, st: &M::State, skip: &[&str]) -> String {
    let v: Vec<&str> = model
        .properties()
        .into_iter()
        .filter(|p| p.expectation == Expectation::Always && !(p.condition)(model, st))
        .filter(|p| !skip.contains(&p.name))
        .map(|p| p.name)
        .collect();
    if v.is_empty() {
        String::new()
    } else {
        format!("\n⚠ violates: {}\n{PANE_NOTE}", v.join(", "))
    }
}

/// What the Explorer's step text says under a violation about the Properties pane.
pub const PANE_NOTE: &str = "  (evaluated at this state; the Properties pane's per-state \
     marks only follow the Explorer's own search and do not judge this state)";

/// The outcome of one property; `C` is the counterexample's trace format (`hilock-trace/1`
/// for the base model, `hilock-tree-trace/1` for the tree model).
#[derive(Clone, Debug, Serialize)]
pub struct PropertyReport<C = Trace> {
    /// Property name (as in SPEC.md).
    pub name: String,
    /// `always` or `sometimes`.
    pub kind: String,
    /// `always`: no state violates it; `sometimes`: a state satisfying it was reached.
    pub holds: bool,
    /// `always` that fails: a run that ends in a violating state (cut at its first violation,
    /// [`first_failure`], or a shortest one, [`shortest_counterexample`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<C>,
}

/// Which run [`property_reports`] gives for an `always` property that fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counterexample {
    /// The run the checker kept, cut at its first violation ([`first_failure`]): what the
    /// verify suite saves in `spec/counterexamples/`, each with a note that tells its story.
    Cut,
    /// A shortest run ([`shortest_counterexample`]): what `hilock check` prints.
    Shortest,
}

/// The report of every property of a finished check, written once for the models that
/// report through [`PropertyReport`] (agents, bakery, faults, inversion, ring): each
/// `always` property with its counterexample (`which`: cut at the first violation, or a
/// shortest run), each `eventually` property with the path the checker found, each
/// `sometimes` property reached or not. `trace` renders a path as the model's trace
/// format.
pub fn property_reports<M, C>(
    model: &M,
    checker: &impl Checker<M>,
    always: &[&'static str],
    eventually: &[&'static str],
    sometimes: &[&'static str],
    which: Counterexample,
    trace: impl Fn(&str, &Path<M::State, M::Action>) -> C,
) -> Vec<PropertyReport<C>>
where
    M: Model,
    M::State: Clone + PartialEq + std::hash::Hash,
    M::Action: Clone + PartialEq,
{
    let mut out = Vec::new();
    for &p in always {
        let path = checker.discovery(p).map(|path| match which {
            Counterexample::Cut => first_failure(model, p, &path),
            Counterexample::Shortest => shortest_counterexample(model, p, &path),
        });
        out.push(PropertyReport {
            name: p.to_string(),
            kind: "always".into(),
            holds: path.is_none(),
            counterexample: path.map(|path| trace(p, &path)),
        });
    }
    for &p in eventually {
        let path = checker.discovery(p);
        out.push(PropertyReport {
            name: p.to_string(),
            kind: "eventually".into(),
            holds: path.is_none(),
            counterexample: path.map(|path| trace(p, &path)),
        });
    }
    for &p in sometimes {
        out.push(PropertyReport {
            name: p.to_string(),
            kind: "sometimes".into(),
            holds: checker.discovery(p).is_some(),
            counterexample: None,
        });
    }
    out
}

impl<C> PropertyReport<C> {
    /// The report's line for this property: its name and `holds` / `VIOLATED` (`always`,
    /// `eventually`) or `reached` / `not reached` (`sometimes`).
    pub fn line(&self) -> String {
        self.line_in(NAME_COLUMN)
    }

    /// [`PropertyReport::line`] with the name padded to `width` characters (the verdict
    /// after one space at least).
    pub fn line_in(&self, width: usize) -> String {
        let verdict = match (self.kind.as_str(), self.holds) {
            ("sometimes", true) => "reached",
            ("sometimes", false) => "not reached",
            (_, true) => "holds",
            (_, false) => "VIOLATED",
        };
        format!("  {:<width$} {verdict}\n", self.name)
    }
}

/// The width of the report's column of property names: 45 characters, or the longest
/// name's.
const NAME_COLUMN: usize = 45;

/// The column width for `properties`' names: the longest one's, and at least
/// `NAME_COLUMN`, so that every verdict starts in the same column.
pub fn name_column<C>(properties: &[PropertyReport<C>]) -> usize {
    properties
        .iter()
        .map(|p| p.name.chars().count())
        .fold(NAME_COLUMN, usize::max)
}

/// The result of a check of the models that report through [`PropertyReport`] (agents,
/// bakery, faults, tree); `C` is the model's counterexample format.
#[derive(Clone, Debug, Serialize)]
pub struct ModelReport<C> {
    /// Configuration name.
    pub config: String,
    /// States generated (with repetitions).
    pub states: usize,
    /// Unique states.
    pub unique_states: usize,
    /// Longest path.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Every property, in the model's order.
    pub properties: Vec<PropertyReport<C>>,
}

impl<C> ModelReport<C> {
    /// The report of property `name`, if the model has it.
    pub fn property(&self, name: &str) -> Option<&PropertyReport<C>> {
        self.properties.iter().find(|p| p.name == name)
    }
    /// Whether `name` holds (`always`, `eventually`) or was reached (`sometimes`).
    ///
    /// # Panics
    /// If the model has no such property (a misspelt name must not read as "fails").
    pub fn holds(&self, name: &str) -> bool {
        self.property(name)
            .unwrap_or_else(|| panic!("no property {name}"))
            .holds
    }
    /// Whether every `always` and `eventually` property holds.
    pub fn ok(&self) -> bool {
        self.violations().is_empty()
    }
    /// The `always` and `eventually` properties that fail.
    pub fn violations(&self) -> Vec<&str> {
        violated(&self.properties)
    }
    /// The `sometimes` properties not reached.
    pub fn unreached(&self) -> Vec<&str> {
        unreached(&self.properties)
    }
    /// One line.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} unique states ({} generated, depth {}) in {:.2?}; violated {:?}; not reached {:?}",
            self.config,
            self.unique_states,
            self.states,
            self.max_depth,
            self.elapsed,
            self.violations(),
            self.unreached()
        )
    }
}

/// Names of the violated `always` (and `eventually`) properties among `properties`.
pub fn violated<C>(properties: &[PropertyReport<C>]) -> Vec<&str> {
    properties
        .iter()
        .filter(|p| (p.kind == "always" || p.kind == "eventually") && !p.holds)
        .map(|p| p.name.as_str())
        .collect()
}

/// Names of the `sometimes` properties among `properties` that were not reached.
pub fn unreached<C>(properties: &[PropertyReport<C>]) -> Vec<&str> {
    properties
        .iter()
        .filter(|p| p.kind == "sometimes" && !p.holds)
        .map(|p| p.name.as_str())
        .collect()
}

/// Waits for a spawned check to finish, reporting (states, unique states, depth) about every
/// 25 ms and once more at the end; returns the joined checker.
fn run_to_end<M: Model, C: Checker<M>>(
    checker: C,
    progress: &mut impl FnMut(usize, usize, usize),
) -> C {
    while !checker.is_done() {
        progress(
            checker.state_count(),
            checker.unique_state_count(),
            checker.max_depth(),
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    let checker = checker.join();
    progress(
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
    );
    checker
}

/// A breadth-first check of `model` with every property, reported through
/// [`property_reports`] (the model's `always`, `eventually` and `sometimes` properties in
/// its order), each `always` counterexample a shortest run. The search is exhaustive
/// unless an `always` or `eventually` property fails: a configuration that breaks a
/// property can have no end to its states (two tokens of one epoch in the fault model keep
/// moving), so the search first stops at the first violation, at depth `d`, and then
/// searches again every state of depth below [`DEPTH_AFTER_VIOLATION`] × `d`. The second
/// value is that bound when the second search reached it (the verdicts then hold for the
/// states below it), `None` when the search was exhaustive. One checker thread:
/// Stateright's BFS then visits the states in the same order on every run, so the
/// counterexamples are the same, step for step (with more threads, which thread meets a
/// violation first decides which path is kept). `progress` is called as in [`check`].
pub fn check_model<M, C>(
    model: &M,
    config: &str,
    trace: impl Fn(&str, &Path<M::State, M::Action>) -> C,
    mut progress: impl FnMut(usize, usize, usize),
) -> (ModelReport<C>, Option<usize>)
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + PartialEq + std::hash::Hash + Send + Sync + std::fmt::Debug,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    let t = Instant::now();
    let names = |e: Expectation| -> Vec<&'static str> {
        model
            .properties()
            .into_iter()
            .filter(|p| p.expectation == e)
            .map(|p| p.name)
            .collect()
    };
    let failures: Vec<&'static str> = names(Expectation::Always)
        .into_iter()
        .chain(names(Expectation::Eventually))
        .collect();
    let first = run_to_end(
        model
            .clone()
            .checker()
            .threads(1)
            .finish_when(stateright::HasDiscoveries::AnyOf(
                failures.iter().copied().collect(),
            ))
            .spawn_bfs(),
        &mut progress,
    );
    let (checker, bound) = if failures.iter().any(|p| first.discovery(p).is_some()) {
        let bound = DEPTH_AFTER_VIOLATION * first.max_depth().max(1);
        let checker = run_to_end(
            model
                .clone()
                .checker()
                .threads(1)
                .target_max_depth(bound)
                .spawn_bfs(),
            &mut progress,
        );
        let reached = checker.max_depth() >= bound;
        (checker, reached.then_some(bound))
    } else {
        (first, None)
    };
    let properties = property_reports(
        model,
        &checker,
        &names(Expectation::Always),
        &names(Expectation::Eventually),
        &names(Expectation::Sometimes),
        Counterexample::Shortest,
        trace,
    );
    let report = ModelReport {
        config: config.to_string(),
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        // The whole check: the searches and the counterexamples' traces.
        elapsed: t.elapsed(),
        properties,
    };
    (report, bound)
}

/// [`check_model`] searches a configuration that breaks a property to this many times the
/// depth of its first violation.
pub const DEPTH_AFTER_VIOLATION: usize = 3;

/// The result of [`check`].
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// Configuration name.
    pub config: String,
    /// States generated (with repetitions).
    pub states: usize,
    /// Unique states.
    pub unique_states: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// P1–P5, `no kernel error`, P10, then the `sometimes` properties. (The `P6 FIFO bypass ≤ k`
    /// properties are summarised in [`CheckReport::fifo_bound`].)
    pub properties: Vec<PropertyReport>,
    /// P6: the least k such that no request is bypassed more than k times (`None`: more
    /// than [`crate::token::MAX_BYPASS`]).
    pub fifo_bound: Option<u8>,
    /// Counterexample for `P6 FIFO bypass ≤ fifo_bound − 1`, if the bound is above 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fifo_witness: Option<Trace>,
    /// The configuration's [`ModelConfig::max_messages`]: runs that send more messages
    /// were not explored, and the verdicts hold for the shorter runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u16>,
}

impl CheckReport {
    /// Whether every `always` property (P1–P5, no kernel error, P10) holds.
    pub fn ok(&self) -> bool {
        self.properties
            .iter()
            .filter(|p| p.kind == "always")
            .all(|p| p.holds)
    }

    /// The report of property `name`.
    pub fn property(&self, name: &str) -> Option<&PropertyReport> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// Names of the violated `always` properties.
    pub fn violations(&self) -> Vec<&str> {
        violated(&self.properties)
    }

    /// Names of the `sometimes` properties that were not reached.
    pub fn unreached(&self) -> Vec<&str> {
        unreached(&self.properties)
    }

    /// A multi-line human summary (with the rendered counterexamples). It leaves out the
    /// wall time ([`CheckReport::elapsed`]): two checks of one configuration render the
    /// same text.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: {} unique states ({} generated, depth {})\n",
            self.config, self.unique_states, self.states, self.max_depth
        );
        if let Some(m) = self.max_messages {
            s.push_str(&format!(
                "  bounded: runs that send more than {m} messages were not explored \
                 (max_messages); the verdicts hold for the shorter runs\n"
            ));
        }
        let width = name_column(&self.properties);
        for p in &self.properties {
            s.push_str(&p.line_in(width));
        }
        match self.fifo_bound {
            Some(k) => s.push_str(&format!("  P6 FIFO bypass: least bound k = {k}\n")),
            None => s.push_str(&format!(
                "  P6 FIFO bypass: more than {}\n",
                crate::token::MAX_BYPASS
            )),
        }
        for p in &self.properties {
            if let Some(t) = &p.counterexample {
                s.push_str(&t.render());
            }
        }
        s
    }
}

/// Runs an exhaustive breadth-first check of `config` (no depth limit). `progress` is called
/// about five times a second with (states generated, unique states, max depth), and once at
/// the end.
pub fn check(
    config: &ModelConfig,
    progress: impl FnMut(usize, usize, usize),
) -> Result<CheckReport, String> {
    match config.locks {
        1 => check_l::<1>(config, progress, false),
        2 => check_l::<2>(config, progress, false),
        n => Err(format!("locks must be 1 or 2, not {n}")),
    }
}

/// [`check`], each counterexample (and the P6 witness) replaced by a shortest run that
/// violates its property ([`shortest_failure`], bounded by the length of the one the check
/// found): what `hilock check` reports. The extra search is part of the elapsed time.
pub fn check_shortest(
    config: &ModelConfig,
    progress: impl FnMut(usize, usize, usize),
) -> Result<CheckReport, String> {
    match config.locks {
        1 => check_l::<1>(config, progress, true),
        2 => check_l::<2>(config, progress, true),
        n => Err(format!("locks must be 1 or 2, not {n}")),
    }
}

/// [`check`] depth-first on `threads` checker threads: the same states and verdicts, but
/// the checker keeps the fingerprints of the states it visited and the paths it is on, not
/// a breadth-first frontier of whole states, so a configuration of tens of millions of
/// states fits in a few GB (`docs/verification.md`, "Larger configurations"). It stops at
/// the first violation it meets; that counterexample is not a shortest one, and the
/// `sometimes` properties of a failing configuration are not all searched for.
pub fn check_depth_first(
    config: &ModelConfig,
    threads: usize,
    progress: impl FnMut(usize, usize, usize),
) -> Result<CheckReport, String> {
    match config.locks {
        1 => check_depth_first_l::<1>(config, threads, progress),
        2 => check_depth_first_l::<2>(config, threads, progress),
        n => Err(format!("locks must be 1 or 2, not {n}")),
    }
}

fn check_depth_first_l<const L: usize>(
    config: &ModelConfig,
    threads: usize,
    mut progress: impl FnMut(usize, usize, usize),
) -> Result<CheckReport, String> {
    let model = config.clone().into_model_with::<L>()?;
    let t = Instant::now();
    // A configuration that breaks a safety property stops at its first violation; one
    // that passes runs to the end. (Not `AnyFailures`: the P6 bypass bounds are `always`
    // properties that fail below the configuration's bound.)
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(stateright::HasDiscoveries::AnyOf(
            SAFETY.iter().copied().collect(),
        ))
        .spawn_dfs();
    let checker = run_to_end(checker, &mut progress);
    Ok(report_l(config, &model, &checker, t, false))
}

fn check_l<const L: usize>(
    config: &ModelConfig,
    mut progress: impl FnMut(usize, usize, usize),
    shortest: bool,
) -> Result<CheckReport, String> {
    let model = config.clone().into_model_with::<L>()?;
    let t = Instant::now();
    let checker = run_to_end(model.clone().checker().spawn_bfs(), &mut progress);
    Ok(report_l(config, &model, &checker, t, shortest))
}

/// The report of a finished check of `model` (started at `t`).
fn report_l<const L: usize>(
    config: &ModelConfig,
    model: &BaseModel<L>,
    checker: &impl Checker<BaseModel<L>>,
    t: Instant,
    shortest: bool,
) -> CheckReport {
    let model = model.clone();
    // The run that ends in a violation of `name`: the checker's cut at its first
    // violation, or a shortest one.
    let first_failure = |model: &BaseModel<L>, name: &str, path: &Path<State<L>, Action>| {
        if shortest {
            shortest_counterexample(model, name, path)
        } else {
            first_failure(model, name, path)
        }
    };
    let mut properties = Vec::new();
    for p in model.properties() {
        if BYPASS.contains(&p.name) {
            continue;
        }
        let found = checker.discovery(p.name);
        let (kind, holds) = match p.expectation {
            Expectation::Sometimes => ("sometimes", found.is_some()),
            _ => ("always", found.is_none()),
        };
        let counterexample = match (&found, kind) {
            (Some(path), "always") => {
                let path = first_failure(&model, p.name, path);
                let verdict = match crate::token::why_violated(&model, path.last_state(), p.name) {
                    Some(why) => format!("{} violated: {why}", p.name),
                    None => format!("{} violated", p.name),
                };
                Some(trace_of(&model, &path, &verdict))
            }
            _ => None,
        };
        properties.push(PropertyReport {
            name: p.name.to_string(),
            kind: kind.to_string(),
            holds,
            counterexample,
        });
    }
    debug_assert_eq!(properties.len(), SAFETY.len() + REACHED.len());
    let fifo_bound = (0..BYPASS.len()).find(|k| checker.discovery(BYPASS[*k]).is_none());
    let fifo_witness = match fifo_bound {
        Some(k) if k > 0 => checker.discovery(BYPASS[k - 1]).map(|path| {
            trace_of(
                &model,
                &first_failure(&model, BYPASS[k - 1], &path),
                &witness_verdict(k),
            )
        }),
        _ => None,
    };
    CheckReport {
        config: config.name.clone(),
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: t.elapsed(),
        properties,
        fifo_bound: fifo_bound.map(|k| k as u8),
        fifo_witness,
        max_messages: config.max_messages,
    }
}

/// The start of the verdict of a P6 witness trace: its last state is a witness of the
/// least FIFO bypass bound, not a failure.
pub const WITNESS_VERDICT: &str = "P6 witness";

/// `once`, `twice`, `3 times`.
pub fn times(k: usize) -> String {
    match k {
        1 => "once".to_string(),
        2 => "twice".to_string(),
        k => format!("{k} times"),
    }
}

/// The verdict of the P6 witness trace of a least bypass bound `k` (≥ 1).
pub fn witness_verdict(k: usize) -> String {
    format!(
        "{WITNESS_VERDICT}: a request is bypassed {}, the least bound k = {k} reached, \
         not broken",
        times(k)
    )
}

/// Serves the Stateright Explorer for `config` on `addr` (blocks for as long as the server
/// runs, i.e. until the process ends). Returns an error for an invalid configuration or if
/// `addr` cannot be bound.
pub fn explore(config: &ModelConfig, addr: SocketAddr) -> Result<(), String> {
    // tiny_http panics on a bind failure: find out first.
    drop(std::net::TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?);
    match config.locks {
        1 => {
            let m = config.clone().into_model_with::<1>()?;
            m.checker().serve(addr);
        }
        2 => {
            let m = config.clone().into_model_with::<2>()?;
            m.checker().serve(addr);
        }
        n => return Err(format!("locks must be 1 or 2, not {n}")),
    }
    Ok(())
}

/// The node names traces use: `n0`, `n1`, ….
pub fn node_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i}")).collect()
}

/// Records a path of the model as a `hilock-trace/1` trace: each step is applied again to
/// (a clone of) the harness in the path's state before it, which gives its outputs.
pub fn trace_of<const L: usize>(
    model: &BaseModel<L>,
    path: &Path<State<L>, Action>,
    verdict: &str,
) -> Trace {
    let cfg = &model.cfg;
    let names = node_names(cfg.nodes);
    let mut steps = Vec::new();
    for (state, action) in path.clone().into_vec() {
        let Some(action) = action else {
            continue;
        };
        let Some(step) = record_step(&state, action, &names, steps.len()) else {
            break;
        };
        steps.push(step);
    }
    Trace {
        format: TRACE_FORMAT.to_string(),
        source: format!("hilock-models base model, configuration '{}'", cfg.name),
        nodes: names,
        steps,
        verdict: Some(verdict.to_string()),
    }
}

/// The step `action` takes from `state` as a `hilock-trace/1` step numbered `index`: its
/// input, outputs, error and the stepping node's state of the lock afterwards (`None` if a
/// delivery finds no message there).
pub fn record_step<const L: usize>(
    state: &State<L>,
    action: Action,
    names: &[String],
    at: usize,
) -> Option<TraceStep> {
    let mut cluster = state.cluster.clone();
    let (node, lock, input, r) = match action {
        Action::Run { node: i, op } => {
            let ti = match op {
                ScriptOp::Acquire(mode, lock) => TraceInput::Acquire { lock, mode },
                ScriptOp::Try(mode, lock) => TraceInput::TryAcquire { lock, mode },
                ScriptOp::Cancel(lock) => TraceInput::Cancel { lock },
                ScriptOp::Downgrade(mode, lock) => TraceInput::Downgrade { lock, mode },
                ScriptOp::Convert(mode, lock, wait) => TraceInput::Convert { lock, mode, wait },
                ScriptOp::Write(value, lock) => TraceInput::SetValue { lock, value },
                ScriptOp::Release(lock) => TraceInput::Release { lock },
                ScriptOp::Upgrade(lock) => TraceInput::Upgrade { lock },
                ScriptOp::Priority(base) => TraceInput::SetPriority { base },
            };
            let node = NodeId(u16::from(i));
            let r = cluster.input(node, BaseModel::<L>::input_of(op));
            (node, op.lock(), ti, r)
        }
        Action::Deliver {
            from, to, index, ..
        }
        | Action::Duplicate {
            from, to, index, ..
        } => {
            let (f, t) = (NodeId(u16::from(from)), NodeId(u16::from(to)));
            let copy = matches!(action, Action::Duplicate { .. });
            let delivered = if copy {
                cluster.duplicate(f, t, index as usize)
            } else {
                cluster.deliver_at(f, t, index as usize)
            };
            let (msg, r) = delivered?;
            let lock = msg.lock().0;
            let ti = TraceInput::Deliver {
                from: names[from as usize].clone(),
                msg,
                copy,
            };
            (t, lock, ti, r)
        }
    };
    Some(TraceStep::of(
        at,
        node,
        input,
        &r,
        cluster.site(node),
        hilock_kernel::LockId(lock),
        names,
    ))
}
