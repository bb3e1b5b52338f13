//! Reading the run log back: run lists, one run in detail, its events.

use std::collections::BTreeMap;

use agentloom_core::{GraphDoc, LoadError, Usage, ValueMap};
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::{RunStore, StoreError, from_i64, values};
use crate::events::{EventKind, NodeStatus, RunEvent, RunStatus};
use crate::run_state::{NodeProgress, RunState};

/// One run in a list of runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub id: String,
    pub graph_name: String,
    pub status: RunStatus,
    /// Unix milliseconds.
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
    pub duration_ms: Option<u64>,
    /// Tokens and cost of the whole run (so far, for a run still going).
    pub usage: Usage,
    pub error: Option<String>,
    pub node_count: usize,
    /// The worker that ran it, for a run recorded from a queue (`submit --wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// One run with everything recorded about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunRow,
    /// The graph document as run.
    pub graph: serde_json::Value,
    pub inputs: ValueMap,
    pub outputs: ValueMap,
    /// The process that recorded the run.
    pub pid: Option<u32>,
    /// Every node of the graph (and any other that reported), sorted by node id.
    pub nodes: Vec<NodeRow>,
}

impl RunDetail {
    /// The graph as run, as a document (to run it again or open it on the canvas).
    pub fn graph_doc(&self) -> Result<GraphDoc, LoadError> {
        GraphDoc::from_json_value(self.graph.clone())
    }

    pub fn node(&self, id: &str) -> Option<&NodeRow> {
        self.nodes.iter().find(|n| n.node_id == id)
    }
}

impl From<&RunDetail> for RunState {
    /// A run as recorded: the nodes that never started are pending. The run's own fields
    /// come from the one reducer: a run that finished (its row has the duration
    /// `run_finished` gave) folds that event again, as the live view did; one that did not
    /// (still going, waiting, or interrupted) takes its status and error as a run's report
    /// (`RunState::apply_report`), and its usage as the row sums its nodes' so far, which no
    /// event carries before the run finishes.
    fn from(detail: &RunDetail) -> Self {
        let mut state = RunState {
            nodes: detail
                .nodes
                .iter()
                .map(|row| (row.node_id.clone(), row.progress.clone()))
                .collect(),
            reused: detail
                .nodes
                .iter()
                .filter(|row| row.status == NodeStatus::Done && row.attempts == 0)
                .map(|row| row.node_id.clone())
                .collect(),
            ..RunState::default()
        };
        let run = &detail.run;
        match run.duration_ms {
            Some(duration_ms) => {
                state.run_id = Some(run.id.clone());
                state.apply(&EventKind::RunFinished {
                    status: run.status,
                    outputs: detail.outputs.clone(),
                    error: run.error.clone(),
                    usage: run.usage,
                    duration_ms,
                });
            }
            None => {
                state.apply_report(&run.id, run.status, run.error.clone());
                state.outputs = detail.outputs.clone();
                state.usage = run.usage;
            }
        }
        state
    }
}

/// One node's execution within a run, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    pub node_id: String,
    /// Unix milliseconds of the first attempt's start.
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    /// What its events said (the block kind is empty if the graph does not list the node).
    #[serde(flatten)]
    pub progress: NodeProgress,
    /// Redaction replaced a secret in the outputs it finished with: they are not the
    /// node's own values, and a seed does not hand them on (see [`crate::RunSeed::redacted`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outputs_redacted: bool,
}

impl std::ops::Deref for NodeRow {
    type Target = NodeProgress;

    fn deref(&self) -> &NodeProgress {
        &self.progress
    }
}

const RUN_COLUMNS: &str = "id, graph_name, status, started_at_ms, finished_at_ms, duration_ms, \
                           input_tokens, output_tokens, cost_usd, error, node_count, \
                           (SELECT worker FROM remote_runs WHERE remote_runs.run_id = runs.id)";

/// The raw columns of a run row, checked afterwards (a rusqlite row callback cannot
/// return our own errors).
struct RawRun {
    id: String,
    graph_name: String,
    status: String,
    started_at_ms: i64,
    finished_at_ms: Option<i64>,
    duration_ms: Option<i64>,
    input_tokens: i64,
    output_tokens: i64,
    cost_usd: f64,
    error: Option<String>,
    node_count: i64,
    worker: Option<String>,
}

impl RawRun {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<RawRun> {
        Ok(RawRun {
            id: row.get(0)?,
            graph_name: row.get(1)?,
            status: row.get(2)?,
            started_at_ms: row.get(3)?,
            finished_at_ms: row.get(4)?,
            duration_ms: row.get(5)?,
            input_tokens: row.get(6)?,
            output_tokens: row.get(7)?,
            cost_usd: row.get(8)?,
            error: row.get(9)?,
            node_count: row.get(10)?,
            worker: row.get(11)?,
        })
    }

    fn check(self, store: &RunStore) -> Result<RunRow, StoreError> {
        let status = RunStatus::parse(&self.status).ok_or_else(|| {
            store.damaged(format!(
                "run {} has the unknown status `{}`",
                self.id, self.status
            ))
        })?;
        Ok(RunRow {
            graph_name: self.graph_name,
            status,
            started_at_ms: from_i64(self.started_at_ms),
            finished_at_ms: self.finished_at_ms.map(from_i64),
            duration_ms: self.duration_ms.map(from_i64),
            usage: Usage {
                input_tokens: from_i64(self.input_tokens),
                output_tokens: from_i64(self.output_tokens),
                cost_usd: self.cost_usd,
            },
            error: self.error,
            node_count: usize::try_from(self.node_count).unwrap_or(0),
            worker: self.worker,
            id: self.id,
        })
    }
}

struct RawNode {
    node_id: String,
    block: String,
    status: String,
    attempts: i64,
    started_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
    duration_ms: Option<i64>,
    inputs_json: Option<String>,
    outputs_json: Option<String>,
    error: Option<String>,
    error_caught: bool,
    skip_reason: Option<String>,
    partial_json: Option<String>,
    input_tokens: i64,
    output_tokens: i64,
    cost_usd: f64,
    outputs_redacted: Option<bool>,
}

impl RawNode {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<RawNode> {
        Ok(RawNode {
            node_id: row.get(0)?,
            block: row.get(1)?,
            status: row.get(2)?,
            attempts: row.get(3)?,
            started_at_ms: row.get(4)?,
            finished_at_ms: row.get(5)?,
            duration_ms: row.get(6)?,
            inputs_json: row.get(7)?,
            outputs_json: row.get(8)?,
            error: row.get(9)?,
            error_caught: row.get(10)?,
            skip_reason: row.get(11)?,
            partial_json: row.get(12)?,
            input_tokens: row.get(13)?,
            output_tokens: row.get(14)?,
            cost_usd: row.get(15)?,
            outputs_redacted: row.get(16)?,
        })
    }

    fn check(self, store: &RunStore, run_id: &str) -> Result<NodeRow, StoreError> {
        let what = |field: &str| format!("run {run_id}, node {}: {field}", self.node_id);
        let status = NodeStatus::parse(&self.status).ok_or_else(|| {
            store.damaged(format!("{} `{}`", what("unknown status"), self.status))
        })?;
        let inputs = parse_map(store, run_id, self.inputs_json.as_deref(), || {
            what("inputs")
        })?;
        let outputs = parse_map(store, run_id, self.outputs_json.as_deref(), || {
            what("outputs")
        })?;
        let partial = match self.partial_json.as_deref() {
            None => BTreeMap::new(),
            Some(text) => serde_json::from_str(text).map_err(|e| {
                store.damaged(format!(
                    "{} are not valid JSON: {e}",
                    what("partial outputs")
                ))
            })?,
        };
        // A row written before the log kept it: redacted when its outputs hold the marker.
        let outputs_redacted = self
            .outputs_redacted
            .unwrap_or_else(|| status == NodeStatus::Done && crate::redact::holds_marker(&outputs));
        Ok(NodeRow {
            outputs_redacted,
            started_at_ms: self.started_at_ms.map(from_i64),
            finished_at_ms: self.finished_at_ms.map(from_i64),
            progress: NodeProgress {
                block: self.block,
                status,
                attempts: u32::try_from(self.attempts).unwrap_or(0),
                duration_ms: self.duration_ms.map(from_i64),
                inputs,
                outputs,
                error: self.error,
                error_caught: self.error_caught,
                skip_reason: self.skip_reason,
                partial,
                usage: Usage {
                    input_tokens: from_i64(self.input_tokens),
                    output_tokens: from_i64(self.output_tokens),
                    cost_usd: self.cost_usd,
                },
                cancelled: false,
            },
            node_id: self.node_id,
        })
    }
}

/// Parses a stored map of values, putting back the values stored on their own.
fn parse_map(
    store: &RunStore,
    run_id: &str,
    text: Option<&str>,
    what: impl Fn() -> String,
) -> Result<ValueMap, StoreError> {
    let Some(text) = text else {
        return Ok(ValueMap::new());
    };
    let mut map = serde_json::from_str(text)
        .map_err(|e| store.damaged(format!("{} are not valid JSON: {e}", what())))?;
    store.restore_values(run_id, &mut map, what)?;
    Ok(map)
}

impl RunStore {
    fn restore_values(
        &self,
        run_id: &str,
        map: &mut ValueMap,
        what: impl Fn() -> String,
    ) -> Result<(), StoreError> {
        values::restore(&self.lock(), run_id, map)
            .map_err(|message| self.damaged(format!("{}: {message}", what())))
    }

    pub(super) fn read_error(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Read {
            path: self.path.clone(),
            source,
        }
    }

    pub(super) fn damaged(&self, message: String) -> StoreError {
        StoreError::Damaged {
            path: self.path.clone(),
            message,
        }
    }

    /// The newest `limit` runs, newest first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunRow>, StoreError> {
        self.newest_runs(None, limit)
    }

    /// The newest `limit` runs of the graph named `graph_name`, newest first.
    pub fn list_runs_of_graph(
        &self,
        graph_name: &str,
        limit: usize,
    ) -> Result<Vec<RunRow>, StoreError> {
        self.newest_runs(Some(graph_name), limit)
    }

    fn newest_runs(
        &self,
        graph_name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRow>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let raw: Vec<RawRun> = {
            let conn = self.lock();
            // Two statements: with `?1 IS NULL OR graph_name = ?1` SQLite walks every run.
            let listed = match graph_name {
                Some(graph_name) => {
                    conn.prepare_cached(&newest_runs_sql(true))
                        .and_then(|mut stmt| {
                            stmt.query_map(params![graph_name, limit], RawRun::from_row)?
                                .collect()
                        })
                }
                None => conn
                    .prepare_cached(&newest_runs_sql(false))
                    .and_then(|mut stmt| {
                        stmt.query_map(params![limit], RawRun::from_row)?.collect()
                    }),
            };
            listed.map_err(|e| self.read_error(e))?
        };
        raw.into_iter().map(|run| run.check(self)).collect()
    }

    /// The full id of the run whose id is `id_or_prefix` or starts with it (like git's
    /// short hashes). `None` if no run matches; an error if several do.
    pub fn resolve_run_id(&self, id_or_prefix: &str) -> Result<Option<String>, StoreError> {
        if id_or_prefix.is_empty() {
            return Ok(None);
        }
        let conn = self.lock();
        let exact: Option<String> = conn
            .query_row(
                "SELECT id FROM runs WHERE id = ?1",
                params![id_or_prefix],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.read_error(e))?;
        if exact.is_some() {
            return Ok(exact);
        }
        // Every id starting with the prefix sorts between it and prefix + the last char.
        let upper = format!("{id_or_prefix}{}", char::MAX);
        let mut stmt = conn
            .prepare_cached(
                "SELECT id FROM runs WHERE id >= ?1 AND id < ?2 AND substr(id, 1, length(?1)) = ?1
                 ORDER BY id LIMIT 6",
            )
            .map_err(|e| self.read_error(e))?;
        let matches: Vec<String> = stmt
            .query_map(params![id_or_prefix, upper], |row| row.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| self.read_error(e))?;
        match matches.len() {
            0 => Ok(None),
            1 => Ok(matches.into_iter().next()),
            _ => Err(StoreError::AmbiguousRunId {
                prefix: id_or_prefix.to_owned(),
                matches,
            }),
        }
    }

    /// One run in full, by id or unambiguous id prefix.
    pub fn get_run(&self, id_or_prefix: &str) -> Result<Option<RunDetail>, StoreError> {
        let Some(id) = self.resolve_run_id(id_or_prefix)? else {
            return Ok(None);
        };
        type Extra = (String, String, String, Option<i64>, Option<Vec<u8>>);
        let (raw, extra, raw_nodes) = {
            let conn = self.lock();
            let found = conn
                .query_row(
                    &format!(
                        "SELECT {RUN_COLUMNS}, g.graph_json, inputs_json, outputs_json, pid,
                                g.graph_deflated
                         FROM runs JOIN run_graphs AS g ON g.run_id = runs.id WHERE id = ?1"
                    ),
                    params![id],
                    |row| {
                        let extra: Extra = (
                            row.get(12)?,
                            row.get(13)?,
                            row.get(14)?,
                            row.get(15)?,
                            row.get(16)?,
                        );
                        Ok((RawRun::from_row(row)?, extra))
                    },
                )
                .optional()
                .map_err(|e| self.read_error(e))?;
            // Deleted between the two queries.
            let Some((raw, extra)) = found else {
                return Ok(None);
            };
            let mut stmt = conn
                .prepare_cached(
                    "SELECT node_id, block, status, attempts, started_at_ms, finished_at_ms, duration_ms,
                            inputs_json, outputs_json, error, error_caught, skip_reason, partial_json,
                            input_tokens, output_tokens, cost_usd, outputs_redacted
                     FROM node_runs WHERE run_id = ?1 ORDER BY node_id",
                )
                .map_err(|e| self.read_error(e))?;
            let raw_nodes: Vec<RawNode> = stmt
                .query_map(params![id], RawNode::from_row)
                .and_then(Iterator::collect)
                .map_err(|e| self.read_error(e))?;
            (raw, extra, raw_nodes)
        };
        let (graph_json, inputs_json, outputs_json, pid, graph_deflated) = extra;
        let graph_json = super::values::StoredGraph::read(graph_json, graph_deflated)
            .map_err(|e| self.damaged(format!("run {id}: {e}")))?;
        let graph = serde_json::from_str(&graph_json)
            .map_err(|e| self.damaged(format!("run {id}: the graph is not valid JSON: {e}")))?;
        let inputs = parse_map(self, &id, Some(&inputs_json), || {
            format!("run {id}: inputs")
        })?;
        let outputs = parse_map(self, &id, Some(&outputs_json), || {
            format!("run {id}: outputs")
        })?;
        let mut nodes = raw_nodes
            .into_iter()
            .map(|node| node.check(self, &id))
            .collect::<Result<Vec<_>, _>>()?;
        add_pending_nodes(&graph, &mut nodes);
        Ok(Some(RunDetail {
            run: raw.check(self)?,
            graph,
            inputs,
            outputs,
            pid: pid.and_then(|pid| u32::try_from(pid).ok()),
            nodes,
        }))
    }

    /// The recorded events of a run (by id or unambiguous prefix) in `seq` order. Streamed
    /// partial output and `node_queued` are not among them (see [`NodeRow::partial`] and
    /// [`NodeRow::status`]).
    pub fn events(&self, id_or_prefix: &str) -> Result<Vec<RunEvent>, StoreError> {
        let Some(id) = self.resolve_run_id(id_or_prefix)? else {
            return Ok(Vec::new());
        };
        let (run_started_at, node_rows, raw) = {
            let conn = self.lock();
            let run_started_at: i64 = conn
                .query_row(
                    "SELECT started_at_ms FROM runs WHERE id = ?1",
                    params![id],
                    |row| row.get(0),
                )
                .map_err(|e| self.read_error(e))?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT node_id, inputs_json, outputs_json, attempts, started_at_ms, finished_at_ms,
                            duration_ms, input_tokens, output_tokens, cost_usd, started_seq, finished_seq
                     FROM node_runs WHERE run_id = ?1",
                )
                .map_err(|e| self.read_error(e))?;
            let node_rows: Vec<EventNodeRow> = stmt
                .query_map(params![id], EventNodeRow::from_row)
                .and_then(Iterator::collect)
                .map_err(|e| self.read_error(e))?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, at_ms, payload_json FROM events WHERE run_id = ?1 ORDER BY seq",
                )
                .map_err(|e| self.read_error(e))?;
            let raw: Vec<(i64, i64, String)> = stmt
                .query_map(params![id], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .and_then(Iterator::collect)
                .map_err(|e| self.read_error(e))?;
            (run_started_at, node_rows, raw)
        };
        let relative = |at: Option<i64>| from_i64(at.unwrap_or(run_started_at) - run_started_at);
        let mut inputs_of = BTreeMap::new();
        let mut events = Vec::with_capacity(raw.len() + 2 * node_rows.len());
        // A node's first start and its finish live in its row.
        for row in node_rows {
            let node = row.node_id;
            let inputs = parse_map(self, &id, row.inputs_json.as_deref(), || {
                format!("run {id}, node {node}: inputs")
            })?;
            if let Some(seq) = row.started_seq {
                events.push(RunEvent {
                    seq: from_i64(seq),
                    at_ms: relative(row.started_at_ms),
                    kind: EventKind::NodeStarted {
                        node: node.clone(),
                        attempt: 1,
                        inputs: inputs.clone(),
                    },
                });
            }
            if let Some(seq) = row.finished_seq {
                let outputs = parse_map(self, &id, row.outputs_json.as_deref(), || {
                    format!("run {id}, node {node}: outputs")
                })?;
                events.push(RunEvent {
                    seq: from_i64(seq),
                    at_ms: relative(row.finished_at_ms),
                    kind: EventKind::NodeFinished {
                        node: node.clone(),
                        outputs,
                        attempts: row.attempts,
                        duration_ms: row.duration_ms.map_or(0, from_i64),
                        usage: Usage {
                            input_tokens: from_i64(row.input_tokens),
                            output_tokens: from_i64(row.output_tokens),
                            cost_usd: row.cost_usd,
                        },
                        outputs_redacted: None,
                    },
                });
            }
            inputs_of.insert(node, inputs);
        }
        for (seq, at_ms, payload) in raw {
            let mut kind: EventKind = serde_json::from_str(&payload)
                .map_err(|e| self.damaged(format!("run {id}, event {seq}: {e}")))?;
            if let EventKind::RunStarted { inputs: map, .. }
            | EventKind::RunFinished { outputs: map, .. } = &mut kind
            {
                self.restore_values(&id, map, || format!("run {id}, event {seq}"))?;
            }
            // A retry's inputs are stored once, in the node row.
            if let EventKind::NodeStarted { node, inputs, .. } = &mut kind
                && inputs.is_empty()
                && let Some(stored) = inputs_of.get(node.as_str())
            {
                inputs.clone_from(stored);
            }
            events.push(RunEvent {
                seq: from_i64(seq),
                at_ms: from_i64(at_ms),
                kind,
            });
        }
        events.sort_by_key(|event| event.seq);
        Ok(events)
    }

    /// Deletes a run (exact id) with its nodes and events. Returns whether it existed.
    pub fn delete_run(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.lock();
        let deleted = conn
            .execute(
                "DELETE FROM pending_approvals WHERE run_id = ?1",
                params![id],
            )
            .and_then(|_| conn.execute("DELETE FROM runs WHERE id = ?1", params![id]))
            .map_err(|source| StoreError::Write {
                path: self.path.clone(),
                source,
            })?;
        Ok(deleted > 0)
    }
}

/// Lists the graph's nodes that have no row (they never started) as pending, keeping the
/// list sorted by node id.
fn add_pending_nodes(graph: &serde_json::Value, nodes: &mut Vec<NodeRow>) {
    let Some(graph_nodes) = graph.get("nodes").and_then(serde_json::Value::as_array) else {
        return;
    };
    let known: std::collections::BTreeSet<String> =
        nodes.iter().map(|n| n.node_id.clone()).collect();
    let before = nodes.len();
    for node in graph_nodes {
        let Some(node_id) = node.get("id").and_then(serde_json::Value::as_str) else {
            continue;
        };
        if known.contains(node_id) {
            continue;
        }
        nodes.push(NodeRow {
            outputs_redacted: false,
            node_id: node_id.to_owned(),
            started_at_ms: None,
            finished_at_ms: None,
            progress: NodeProgress {
                block: node
                    .get("block")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                ..NodeProgress::default()
            },
        });
    }
    if nodes.len() != before {
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    }
}

/// What [`RunStore::events`] reads of a node row.
struct EventNodeRow {
    node_id: String,
    inputs_json: Option<String>,
    outputs_json: Option<String>,
    attempts: u32,
    started_at_ms: Option<i64>,
    finished_at_ms: Option<i64>,
    duration_ms: Option<i64>,
    input_tokens: i64,
    output_tokens: i64,
    cost_usd: f64,
    started_seq: Option<i64>,
    finished_seq: Option<i64>,
}

impl EventNodeRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<EventNodeRow> {
        Ok(EventNodeRow {
            node_id: row.get(0)?,
            inputs_json: row.get(1)?,
            outputs_json: row.get(2)?,
            attempts: row.get(3)?,
            started_at_ms: row.get(4)?,
            finished_at_ms: row.get(5)?,
            duration_ms: row.get(6)?,
            input_tokens: row.get(7)?,
            output_tokens: row.get(8)?,
            cost_usd: row.get(9)?,
            started_seq: row.get(10)?,
            finished_seq: row.get(11)?,
        })
    }
}

/// The newest runs (`LIMIT` the last parameter), of one graph (the first) when `of_graph`.
pub(crate) fn newest_runs_sql(of_graph: bool) -> String {
    let filter = if of_graph {
        "WHERE graph_name = ?1 ORDER BY started_at_ms DESC, id DESC LIMIT ?2"
    } else {
        "ORDER BY started_at_ms DESC, id DESC LIMIT ?1"
    };
    format!("SELECT {RUN_COLUMNS} FROM runs {filter}")
}
