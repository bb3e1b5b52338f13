//! Breakpoints: a run option (never part of the graph file) that pauses a run before a node
//! starts or after it finished, shows the node's values, and goes on with them, edited or
//! not. A breakpoint pauses the way an approval does: nobody to ask, the pause is stored in
//! the run log (`pending_breakpoints`), the node waits holding no slot, the rest of the graph
//! runs on, and the run ends `waiting`, to be continued from the log by another process.
//!
//! Nodes are named by path: `render`, `call/render` inside the sub-run of `call`, and
//! `each/3/render` inside item 3 of a for-each over a graph (`each/*/render`: every item).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agentloom_core::{PortSpec, Value, ValueMap, ValueType, coerce};
use serde::{Deserialize, Serialize};

/// Where a breakpoint stops: before the node starts (its resolved inputs are shown) or after
/// it finished (its outputs are shown, before its dependents get them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakAt {
    Before,
    After,
}

impl BreakAt {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakAt::Before => "before",
            BreakAt::After => "after",
        }
    }

    pub fn parse(text: &str) -> Option<BreakAt> {
        match text {
            "before" => Some(BreakAt::Before),
            "after" => Some(BreakAt::After),
            _ => None,
        }
    }
}

/// One breakpoint: a node path (see the module) and where it stops.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Breakpoint {
    pub node: String,
    pub at: BreakAt,
}

impl Breakpoint {
    pub fn new(node: impl Into<String>, at: BreakAt) -> Breakpoint {
        Breakpoint {
            node: node.into(),
            at,
        }
    }

    /// `NODE`, `NODE:before` or `NODE:after` (as `--break` takes it).
    pub fn parse(text: &str) -> Result<Breakpoint, String> {
        let (node, at) = match text.rsplit_once(':') {
            Some((node, at)) => match BreakAt::parse(at) {
                Some(at) => (node, at),
                None => {
                    return Err(format!(
                        "breakpoint `{text}`: expected NODE, NODE:before or NODE:after, not `:{at}`"
                    ));
                }
            },
            None => (text, BreakAt::Before),
        };
        if node.is_empty() || node.split('/').any(str::is_empty) {
            return Err(format!("breakpoint `{text}`: the node path is empty"));
        }
        Ok(Breakpoint::new(node, at))
    }

    /// Whether this breakpoint names the node at `path` (a `*` segment matches any one).
    pub fn matches(&self, path: &str, at: BreakAt) -> bool {
        if self.at != at {
            return false;
        }
        let mut wanted = self.node.split('/');
        let mut found = path.split('/');
        loop {
            match (wanted.next(), found.next()) {
                (None, None) => return true,
                (Some(w), Some(f)) if w == "*" || w == f => {}
                _ => return false,
            }
        }
    }
}

impl std::fmt::Display for Breakpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.node, self.at.as_str())
    }
}

/// A run paused at a breakpoint: what the person sees and may edit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakpointHit {
    /// The node path (`call/render` inside a sub-run).
    pub node: String,
    pub at: BreakAt,
    /// The node's resolved inputs (before) or its outputs (after).
    pub values: ValueMap,
    /// The ports those values are for (inputs before, outputs after), to check edits.
    pub ports: Vec<HitPort>,
    /// The pause is an implicit one of Step, not a breakpoint of the run's set.
    #[serde(default)]
    pub stepping: bool,
}

impl BreakpointHit {
    /// `values` applied over the hit's own, each checked against its port's type: an
    /// unknown port or a value that does not fit names `node.port` and the type.
    pub fn edited(&self, values: &ValueMap) -> Result<ValueMap, String> {
        let mut merged = self.values.clone();
        for (name, value) in values {
            merged.insert(
                name.clone(),
                checked_value(&self.node, &self.ports, name, value)?,
            );
        }
        Ok(merged)
    }
}

/// `value` for port `port` of node `node`, converted to the port's type, or why not.
pub fn checked_value(
    node: &str,
    ports: &[HitPort],
    port: &str,
    value: &Value,
) -> Result<Value, String> {
    let Some(spec) = ports.iter().find(|p| p.name == port) else {
        let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "`{node}` has no port `{port}` here (it has: {})",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ));
    };
    coerce(value.clone(), &spec.ty).map_err(|err| {
        format!(
            "`{node}.{port}` takes {}: the value given does not fit ({err})",
            spec.ty
        )
    })
}

/// A port of a node paused at a breakpoint: its name and type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HitPort {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ValueType,
}

impl HitPort {
    pub fn of(ports: &[PortSpec]) -> Vec<HitPort> {
        ports
            .iter()
            .map(|p| HitPort {
                name: p.name.clone(),
                ty: p.ty.clone(),
            })
            .collect()
    }
}

/// What a person decided at a breakpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum BreakpointDecision {
    /// Go on to the next breakpoint, with these values over the shown ones (inputs before,
    /// outputs after), each checked against its port's type.
    Continue {
        #[serde(default, skip_serializing_if = "ValueMap::is_empty")]
        values: ValueMap,
    },
    /// Go on and pause again before the next node that starts (every node that starts from
    /// now on, until a Continue), with these values as for Continue.
    Step {
        #[serde(default, skip_serializing_if = "ValueMap::is_empty")]
        values: ValueMap,
    },
    /// Stop the run (it ends `cancelled`).
    Stop,
}

impl BreakpointDecision {
    pub fn values(&self) -> Option<&ValueMap> {
        match self {
            BreakpointDecision::Continue { values } | BreakpointDecision::Step { values } => {
                Some(values)
            }
            BreakpointDecision::Stop => None,
        }
    }
}

/// Asked when a run reaches a breakpoint (the terminal, the app).
#[async_trait::async_trait]
pub trait BreakpointHandler: Send + Sync {
    /// Decides at `hit` of run `run_id`; may wait as long as it needs. `None`: nobody can
    /// decide now: the node waits and the run ends `waiting`, to be continued from the log.
    async fn at_breakpoint(&self, run_id: &str, hit: &BreakpointHit) -> Option<BreakpointDecision>;
}

/// The debugging choices of one run ([`crate::RunOptions::debug`]); a sub-run shares its
/// parent's.
#[derive(Default)]
pub struct RunDebug {
    /// The run's breakpoints.
    pub breakpoints: BTreeSet<Breakpoint>,
    /// Pausing before every node that starts (Step); a Continue turns it off, a Step on.
    stepping: AtomicBool,
    /// A Stop was decided: the run (with every sub-run up to it) stops.
    stopped: AtomicBool,
    /// Asked at each breakpoint (with a run log, the pause is stored first: see
    /// [`crate::DurableBreakpoints`]). `None`: every breakpoint pauses the run.
    handler: Mutex<Option<Arc<dyn BreakpointHandler>>>,
    /// Decisions made while the run was paused (a continued run), by node path: the node's
    /// next pause there takes it instead of asking.
    decided: Mutex<BTreeMap<(String, BreakAt), BreakpointDecision>>,
}

impl RunDebug {
    pub fn new(breakpoints: impl IntoIterator<Item = Breakpoint>) -> RunDebug {
        RunDebug {
            breakpoints: breakpoints.into_iter().collect(),
            ..RunDebug::default()
        }
    }

    /// Starts pausing before every node (as after a Step).
    pub fn stepping(self, on: bool) -> RunDebug {
        self.stepping.store(on, Ordering::SeqCst);
        self
    }

    pub fn with_handler(self, handler: Arc<dyn BreakpointHandler>) -> RunDebug {
        self.set_handler(Some(handler));
        self
    }

    /// Who is asked at a breakpoint (`None`: the run pauses there).
    pub fn handler(&self) -> Option<Arc<dyn BreakpointHandler>> {
        self.handler.lock().ok().and_then(|h| h.clone())
    }

    /// Replaces who is asked (the runner puts the run log first: [`crate::DurableBreakpoints`]).
    pub fn set_handler(&self, handler: Option<Arc<dyn BreakpointHandler>>) {
        if let Ok(mut slot) = self.handler.lock() {
            *slot = handler;
        }
    }

    /// The decision made on the pause of `node` at `at` while the run was paused.
    pub fn with_decision(self, node: &str, at: BreakAt, decision: BreakpointDecision) -> RunDebug {
        if let Ok(mut decided) = self.decided.lock() {
            decided.insert((node.to_owned(), at), decision);
        }
        self
    }

    /// Whether a Stop was decided at one of the run's breakpoints.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    pub fn is_stepping(&self) -> bool {
        self.stepping.load(Ordering::SeqCst)
    }

    /// Whether the run pauses at node `path` at `at` (a breakpoint, or Step before a node),
    /// and whether only because it steps.
    pub fn pauses_at(&self, path: &str, at: BreakAt) -> Option<bool> {
        if self.breakpoints.iter().any(|b| b.matches(path, at)) {
            return Some(false);
        }
        (at == BreakAt::Before && self.is_stepping()).then_some(true)
    }

    /// The decision made earlier for `path` at `at`, taken once.
    pub fn take_decision(&self, path: &str, at: BreakAt) -> Option<BreakpointDecision> {
        self.decided
            .lock()
            .ok()
            .and_then(|mut decided| decided.remove(&(path.to_owned(), at)))
    }

    /// Whether a decision is waiting for `path` at `at` (a continued run reaching it again).
    pub fn has_decision(&self, path: &str, at: BreakAt) -> bool {
        self.decided
            .lock()
            .is_ok_and(|decided| decided.contains_key(&(path.to_owned(), at)))
    }

    /// Applies what a decision says of the run's stepping.
    pub fn note_decision(&self, decision: &BreakpointDecision) {
        match decision {
            BreakpointDecision::Continue { .. } => self.stepping.store(false, Ordering::SeqCst),
            BreakpointDecision::Step { .. } => self.stepping.store(true, Ordering::SeqCst),
            BreakpointDecision::Stop => self.stopped.store(true, Ordering::SeqCst),
        }
    }
}

impl std::fmt::Debug for RunDebug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunDebug")
            .field("breakpoints", &self.breakpoints)
            .field("stepping", &self.is_stepping())
            .field("handler", &self.handler().is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches_paths() {
        let b = Breakpoint::parse("each/*/render:after").unwrap();
        assert_eq!(b, Breakpoint::new("each/*/render", BreakAt::After));
        assert!(b.matches("each/3/render", BreakAt::After));
        assert!(!b.matches("each/3/render", BreakAt::Before));
        assert!(!b.matches("each/3", BreakAt::After));
        assert_eq!(Breakpoint::parse("a").unwrap().at, BreakAt::Before);
        assert!(
            Breakpoint::parse("a:middle")
                .unwrap_err()
                .contains(":middle")
        );
        assert!(Breakpoint::parse("call//x").is_err());
    }
}
