//! The graph document, format v1: plain, deterministic JSON (nodes and edges sorted by id,
//! stable key order, pretty-printed) so that a graph diffs cleanly. Credentials appear by
//! name only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::duplicate_keys::check_duplicate_keys;

/// The value of the `format` field.
pub const FORMAT_NAME: &str = "agentloom.graph";
/// The newest format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A graph as saved to disk and shared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphDoc {
    /// Always `agentloom.graph`.
    pub format: String,
    /// Format version; files from a newer version are refused.
    pub version: u32,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Limits and policies for a run of this graph.
    #[serde(default, skip_serializing_if = "RunSettings::is_default")]
    pub settings: RunSettings,
    #[serde(default)]
    pub nodes: Vec<NodeDoc>,
    #[serde(default)]
    pub edges: Vec<EdgeDoc>,
    /// Titled frames on the canvas that group blocks (and hold notes); they do not change
    /// how the graph runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupDoc>,
    /// MCP servers whose tools the graph uses as blocks (`mcp.<server>.<tool>`), by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, McpServerDoc>,
}

/// A titled frame on the canvas: a comment, and the blocks inside it move with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupDoc {
    pub id: String,
    #[serde(default)]
    pub title: String,
    /// Where the frame is: left, top, width, height, in canvas units.
    pub rect: [f64; 4],
}

/// How to reach an MCP server: a command started with stdio (`command`, `args`, `env`), or
/// a streamable HTTP endpoint (`url`). A token for it is a stored credential, by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerDoc {
    /// The program to start, e.g. `npx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables for the command (no secrets: use `credential`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// The streamable HTTP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A stored credential sent as the bearer token (HTTP) or as `MCP_TOKEN` (stdio).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
}

impl Default for GraphDoc {
    fn default() -> Self {
        Self::new("Untitled")
    }
}

/// One block placed in the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeDoc {
    /// Unique within the graph.
    pub id: String,
    /// The block kind id, e.g. `http.request`.
    pub block: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Canvas position `[x, y]`.
    #[serde(default)]
    pub position: [f64; 2],
    #[serde(default, skip_serializing_if = "Config::is_empty")]
    #[schemars(with = "std::collections::BTreeMap<String, serde_json::Value>")]
    pub config: Config,
    /// Fail an attempt that takes longer than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Outputs to use instead of running the node (pin data): runs take these as if the
    /// node had finished with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<std::collections::BTreeMap<String, serde_json::Value>>")]
    pub pinned: Option<crate::value::ValueMap>,
    /// Bypassed: runs do not run the node but pass its inputs through to its outputs (by
    /// port name, else the first input of the output's type; null when none fits).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bypass: bool,
    /// The canvas shows the node's `error` output though it is not wired ("Handle errors
    /// here"); a wired one shows anyway. Runs ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub show_error: bool,
    /// The canvas shows the node's `tool` output though it is not wired ("Use as a
    /// tool"); a wired one shows anyway. Runs ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub show_tool: bool,
}

impl NodeDoc {
    pub fn new(id: impl Into<String>, block: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            block: block.into(),
            label: None,
            position: [0.0, 0.0],
            config: Config::new(),
            timeout_ms: None,
            retry: None,
            pinned: None,
            bypass: false,
            show_error: false,
            show_tool: false,
        }
    }

    #[must_use]
    pub fn with_config(mut self, config: serde_json::Value) -> Self {
        if let serde_json::Value::Object(map) = config {
            self.config = map.into();
        }
        self
    }

    #[must_use]
    pub fn at(mut self, x: f64, y: f64) -> Self {
        self.position = [x, y];
        self
    }
}

/// A wire from an output port to an input port: `{"from": [node, port], "to": [node, port]}`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct EdgeDoc {
    pub from: (String, String),
    pub to: (String, String),
}

impl EdgeDoc {
    pub fn new(from_node: &str, from_port: &str, to_node: &str, to_port: &str) -> Self {
        Self {
            from: (from_node.to_owned(), from_port.to_owned()),
            to: (to_node.to_owned(), to_port.to_owned()),
        }
    }
}

/// How often and how patiently a failed node is tried again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts, including the first.
    pub max_attempts: u32,
    /// Wait before the second attempt.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// Each further wait is this many times the previous one.
    #[serde(default = "default_backoff_factor")]
    pub backoff_factor: f64,
    /// Waits never exceed this.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
}

fn default_backoff_ms() -> u64 {
    500
}
fn default_backoff_factor() -> f64 {
    2.0
}
fn default_max_backoff_ms() -> u64 {
    30_000
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff_ms: default_backoff_ms(),
            backoff_factor: default_backoff_factor(),
            max_backoff_ms: default_max_backoff_ms(),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `next_attempt` (2 for the first retry).
    pub fn backoff_before(&self, next_attempt: u32) -> std::time::Duration {
        let exponent = i32::try_from(next_attempt.saturating_sub(2)).unwrap_or(i32::MAX);
        let wait = (self.backoff_ms as f64) * self.backoff_factor.max(1.0).powi(exponent);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "clamped below"
        )]
        let wait_ms = wait.min(self.max_backoff_ms as f64).max(0.0) as u64;
        std::time::Duration::from_millis(wait_ms)
    }
}

/// Limits for a run; unset means unlimited (concurrency defaults to the number of cores).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// At most this many node executions (attempts count once per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    /// Stop the run when its cost reaches this many US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Stop the run after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_ms: Option<u64>,
    /// How many nodes may do CPU-bound work (templates, parsing) at once. Nodes that wait
    /// on a timer, the network, a person or a sub-run take no slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// How many requests may be in flight at once to one host (an API, an LLM provider's
    /// base_url); 8 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_host: Option<usize>,
    /// Ask before running blocks with side effects.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub safe_mode: bool,
}

impl RunSettings {
    pub fn is_default(&self) -> bool {
        *self == RunSettings::default()
    }
}

/// A file that could not be read as a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("not valid JSON: {0}")]
    Syntax(String),
    #[error("not an Agentloom graph: {0}")]
    NotAGraph(String),
    #[error(
        "this graph was saved by a newer Agentloom (format version {found}); this version reads up to {supported}. Update Agentloom to open it"
    )]
    NewerVersion { found: u64, supported: u32 },
    #[error("at {path}: {message}")]
    Shape { path: String, message: String },
}

/// Graph files at least this long are checked for duplicate keys on another thread while
/// they are parsed.
const PARALLEL_CHECK_BYTES: usize = 256 << 10;

impl GraphDoc {
    pub fn new(name: &str) -> Self {
        Self {
            format: FORMAT_NAME.to_owned(),
            version: FORMAT_VERSION,
            name: name.to_owned(),
            description: String::new(),
            settings: RunSettings::default(),
            nodes: Vec::new(),
            edges: Vec::new(),
            groups: Vec::new(),
            mcp_servers: std::collections::BTreeMap::new(),
        }
    }

    /// Parses a graph file, migrating older versions and refusing newer ones.
    pub fn from_json_str(text: &str) -> Result<GraphDoc, LoadError> {
        // Editors on some systems save a byte-order mark; it is not part of the JSON.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        // A current file is read straight into the document, without building a JSON tree
        // first (several times faster for large graphs). Anything else, including every
        // error, takes the general path, which explains what is wrong. A large file is
        // checked for duplicate keys on a second core while it is read.
        let (duplicates, parsed) = if text.len() >= PARALLEL_CHECK_BYTES {
            std::thread::scope(|scope| {
                let check = scope.spawn(|| check_duplicate_keys(text));
                let parsed = serde_json::from_str::<GraphDoc>(text);
                let duplicates = check.join().unwrap_or_else(|_| check_duplicate_keys(text));
                (duplicates, parsed)
            })
        } else {
            (
                check_duplicate_keys(text),
                serde_json::from_str::<GraphDoc>(text),
            )
        };
        duplicates.map_err(|e| LoadError::Syntax(e.to_string()))?;
        if let Ok(mut doc) = parsed
            && doc.format == FORMAT_NAME
            && doc.version == FORMAT_VERSION
        {
            // A parsed list keeps up to twice the room it needs; a graph is kept whole
            // while it runs.
            doc.nodes.shrink_to_fit();
            doc.edges.shrink_to_fit();
            return Ok(doc);
        }
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| LoadError::Syntax(e.to_string()))?;
        Self::from_json_value(json)
    }

    pub fn from_json_value(mut json: serde_json::Value) -> Result<GraphDoc, LoadError> {
        let Some(object) = json.as_object_mut() else {
            return Err(LoadError::NotAGraph(
                "the top level is not a JSON object".to_owned(),
            ));
        };
        match object.get("format") {
            Some(serde_json::Value::String(f)) if f == FORMAT_NAME => {}
            Some(other) => {
                return Err(LoadError::NotAGraph(format!(
                    "`format` is {other}, expected \"{FORMAT_NAME}\""
                )));
            }
            None => {
                return Err(LoadError::NotAGraph(format!(
                    "the `format` field is missing (expected \"{FORMAT_NAME}\")"
                )));
            }
        }
        let version = object
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| {
                LoadError::NotAGraph("`version` is missing or not a whole number".to_owned())
            })?;
        if version > u64::from(FORMAT_VERSION) {
            return Err(LoadError::NewerVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if version == 0 {
            migrate_v0_to_v1(object);
        }
        migrate_node_credentials(object);
        let doc: GraphDoc =
            serde_path_to_error::deserialize(json).map_err(|e| LoadError::Shape {
                path: json_path(&e.path().to_string()),
                message: e.inner().to_string(),
            })?;
        Ok(doc)
    }

    /// The canonical file form: sorted, pretty-printed, ending in a newline.
    pub fn to_json_string(&self) -> String {
        let mut canonical = self.clone();
        canonical.normalize();
        // Serializing plain data structs cannot fail.
        let mut text = serde_json::to_string_pretty(&canonical).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Sorts nodes and edges so that equal graphs serialize identically.
    pub fn normalize(&mut self) {
        self.format = FORMAT_NAME.to_owned();
        self.version = FORMAT_VERSION;
        self.nodes.sort_by(|a, b| a.id.cmp(&b.id));
        self.edges.sort();
        self.groups.sort_by(|a, b| a.id.cmp(&b.id));
    }

    pub fn node(&self, id: &str) -> Option<&NodeDoc> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// A node id not used yet, built from `base` (`http`, `http_2`, …).
    pub fn fresh_node_id(&self, base: &str) -> String {
        let base: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        if self.node(&base).is_none() {
            return base;
        }
        (2..)
            .map(|n| format!("{base}_{n}"))
            .find(|candidate| self.node(candidate).is_none())
            .unwrap_or(base)
    }

    /// The JSON Schema of the format, generated from these types.
    pub fn json_schema() -> serde_json::Value {
        let schema = schemars::schema_for!(GraphDoc);
        serde_json::to_value(schema).unwrap_or_default()
    }
}

/// Version 0 (pre-release) used `links` with `"node.port"` strings.
fn migrate_v0_to_v1(object: &mut serde_json::Map<String, serde_json::Value>) {
    if let Some(serde_json::Value::Array(links)) = object.remove("links") {
        let edges: Vec<serde_json::Value> = links
            .into_iter()
            .filter_map(|link| {
                let from = link.get("from")?.as_str()?.split_once('.')?;
                let to = link.get("to")?.as_str()?.split_once('.')?;
                Some(serde_json::json!({"from": [from.0, from.1], "to": [to.0, to.1]}))
            })
            .collect();
        object.insert("edges".to_owned(), serde_json::Value::Array(edges));
    }
    object.insert("version".to_owned(), serde_json::json!(FORMAT_VERSION));
}

/// Files once named a node's credential beside its config (`"credential": "work"`); the
/// blocks read it from their config, so it moves there (a name already in the config wins).
fn migrate_node_credentials(object: &mut serde_json::Map<String, serde_json::Value>) {
    let Some(serde_json::Value::Array(nodes)) = object.get_mut("nodes") else {
        return;
    };
    for node in nodes
        .iter_mut()
        .filter_map(serde_json::Value::as_object_mut)
    {
        let Some(credential) = node.remove("credential") else {
            continue;
        };
        if credential
            .as_str()
            .is_none_or(|name| name.trim().is_empty())
        {
            continue;
        }
        let config = node
            .entry("config")
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
        if let serde_json::Value::Object(config) = config {
            config.entry("credential").or_insert(credential);
        }
    }
}

/// serde_path_to_error prints `nodes[0].config`; make the root explicit: `$.nodes[0].config`.
fn json_path(path: &str) -> String {
    if path == "." || path.is_empty() {
        "$".to_owned()
    } else {
        format!("$.{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_optional_round_trip_and_are_in_the_schema() {
        let plain = r#"{"format":"agentloom.graph","version":1,"name":"g","nodes":[],"edges":[]}"#;
        let doc = GraphDoc::from_json_str(plain).expect("a file without groups loads");
        assert!(doc.groups.is_empty());
        assert!(
            !doc.to_json_string().contains("groups"),
            "none: not written"
        );

        let mut grouped = doc.clone();
        grouped.groups.push(GroupDoc {
            id: "group_1".to_owned(),
            title: "Inputs".to_owned(),
            rect: [0.0, -40.0, 320.0, 200.0],
        });
        let again = GraphDoc::from_json_str(&grouped.to_json_string()).expect("round trip");
        assert_eq!(again, grouped);
        let schema = GraphDoc::json_schema().to_string();
        assert!(
            schema.contains("groups") && schema.contains("GroupDoc"),
            "{schema}"
        );
    }

    #[test]
    fn canonical_form_is_sorted_and_stable() {
        let mut doc = GraphDoc::new("t");
        doc.nodes
            .push(NodeDoc::new("b", "control.delay").with_config(serde_json::json!({"ms": 5})));
        doc.nodes.push(NodeDoc::new("a", "graph.input"));
        doc.edges.push(EdgeDoc::new("b", "value", "c", "value"));
        doc.edges.push(EdgeDoc::new("a", "value", "b", "value"));
        let text = doc.to_json_string();
        let a = text.find("\"id\": \"a\"").unwrap();
        let b = text.find("\"id\": \"b\"").unwrap();
        assert!(a < b);
        let again = GraphDoc::from_json_str(&text).unwrap().to_json_string();
        assert_eq!(text, again);
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn a_node_level_credential_moves_into_the_config() {
        let doc = GraphDoc::from_json_str(
            r#"{"format":"agentloom.graph","version":1,"nodes":[
                {"id":"a","block":"http.request","credential":"work","config":{"url":"u"}},
                {"id":"b","block":"llm.chat","credential":"old","config":{"credential":"kept"}},
                {"id":"c","block":"github.get_issue","credential":"gh"},
                {"id":"d","block":"data.constant","credential":""}]}"#,
        )
        .unwrap();
        let credential = |i: usize| doc.nodes[i].config.get("credential").cloned();
        assert_eq!(credential(0), Some(serde_json::json!("work")));
        assert_eq!(
            doc.nodes[0].config.get("url"),
            Some(&serde_json::json!("u"))
        );
        assert_eq!(credential(1), Some(serde_json::json!("kept")));
        assert_eq!(credential(2), Some(serde_json::json!("gh")));
        assert_eq!(credential(3), None);
        assert!(!doc.to_json_string().contains("\"old\""));
    }

    #[test]
    fn newer_version_is_refused_with_a_clear_message() {
        let err = GraphDoc::from_json_str(r#"{"format":"agentloom.graph","version":7,"nodes":[]}"#)
            .unwrap_err();
        assert_eq!(
            err,
            LoadError::NewerVersion {
                found: 7,
                supported: 1
            }
        );
        assert!(err.to_string().contains("newer Agentloom"));
    }

    #[test]
    fn shape_errors_name_the_json_path() {
        let err = GraphDoc::from_json_str(
            r#"{"format":"agentloom.graph","version":1,"nodes":[{"id":"a","block":"x"},{"id":"b"}]}"#,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("$.nodes[1]"), "{text}");
        assert!(text.contains("block"), "{text}");
    }

    #[test]
    fn v0_links_are_migrated() {
        let doc = GraphDoc::from_json_str(
            r#"{"format":"agentloom.graph","version":0,"nodes":[],"links":[{"from":"a.out","to":"b.in"}]}"#,
        )
        .unwrap();
        assert_eq!(doc.version, 1);
        assert_eq!(doc.edges, vec![EdgeDoc::new("a", "out", "b", "in")]);
    }

    #[test]
    fn other_json_is_not_a_graph() {
        assert!(matches!(
            GraphDoc::from_json_str("[1,2]"),
            Err(LoadError::NotAGraph(_))
        ));
        assert!(matches!(
            GraphDoc::from_json_str("{\"format\":\"x\"}"),
            Err(LoadError::NotAGraph(_))
        ));
        assert!(matches!(
            GraphDoc::from_json_str("{"),
            Err(LoadError::Syntax(_))
        ));
    }

    #[test]
    fn retry_backoff_grows_and_is_capped() {
        let policy = RetryPolicy {
            max_attempts: 5,
            backoff_ms: 100,
            backoff_factor: 2.0,
            max_backoff_ms: 300,
        };
        assert_eq!(policy.backoff_before(2).as_millis(), 100);
        assert_eq!(policy.backoff_before(3).as_millis(), 200);
        assert_eq!(policy.backoff_before(4).as_millis(), 300);
    }

    #[test]
    fn mcp_servers_round_trip_and_are_optional() {
        let without = GraphDoc::from_json_str(
            r#"{"format": "agentloom.graph", "version": 1, "name": "g", "nodes": []}"#,
        )
        .unwrap_or_default();
        assert!(without.mcp_servers.is_empty());
        assert!(!without.to_json_string().contains("mcp_servers"));
        let with = GraphDoc::from_json_str(
            r#"{"format": "agentloom.graph", "version": 1, "name": "g",
                "mcp_servers": {"files": {"command": "npx", "args": ["-y", "srv"], "credential": "files token"}}}"#,
        )
        .unwrap_or_default();
        let server = &with.mcp_servers["files"];
        assert_eq!(server.command.as_deref(), Some("npx"));
        assert_eq!(server.credential.as_deref(), Some("files token"));
        let again = GraphDoc::from_json_str(&with.to_json_string()).unwrap_or_default();
        assert_eq!(again, with);
        let schema = GraphDoc::json_schema().to_string();
        assert!(schema.contains("mcp_servers") && schema.contains("McpServerDoc"));
        // A misspelt field is refused, naming where.
        let err = GraphDoc::from_json_str(
            r#"{"format": "agentloom.graph", "version": 1, "mcp_servers": {"f": {"comand": "x"}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("mcp_servers"), "{err}");
    }
}
