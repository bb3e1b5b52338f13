//! What a fork of a recorded run is: a new run whose record names its parent run, the
//! values edited in it, and what changed in the graph since the parent ran. The runner
//! plans and launches forks (runner/src/fork.rs); the run log keeps this record.

use agentloom_core::Value;
use serde::{Deserialize, Serialize};

/// One edited value: node `node`'s output `port` is `value` in the fork.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkEdit {
    pub node: String,
    pub port: String,
    pub value: Value,
}

impl ForkEdit {
    /// `NODE.PORT=JSON` (as `--set` takes it); a value that is not JSON is refused, naming
    /// the item.
    pub fn parse(text: &str) -> Result<ForkEdit, String> {
        let Some((target, json)) = text.split_once('=') else {
            return Err(format!("--set `{text}`: expected NODE.PORT=JSON"));
        };
        let Some((node, port)) = target.rsplit_once('.') else {
            return Err(format!(
                "--set `{text}`: expected NODE.PORT=JSON (`{target}` names no port)"
            ));
        };
        if node.is_empty() || port.is_empty() {
            return Err(format!(
                "--set `{text}`: expected NODE.PORT=JSON (`{target}` names no port)"
            ));
        }
        let value: serde_json::Value = serde_json::from_str(json).map_err(|err| {
            format!(
                "--set {target}: the value is not JSON ({err}); text is written in quotes, e.g. {target}='\"hello\"'"
            )
        })?;
        Ok(ForkEdit {
            node: node.to_owned(),
            port: port.to_owned(),
            value: Value::from_json(value),
        })
    }
}

/// The nodes a graph gained, lost or had reconfigured (kind, config, wiring, pins or bypass)
/// between two versions, by id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub reconfigured: Vec<String>,
}

impl GraphChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.reconfigured.is_empty()
    }
}

impl std::fmt::Display for GraphChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (word, nodes) in [
            ("added", &self.added),
            ("removed", &self.removed),
            ("reconfigured", &self.reconfigured),
        ] {
            if !nodes.is_empty() {
                let names: Vec<String> = nodes.iter().map(|n| format!("`{n}`")).collect();
                parts.push(format!("{word} {}", names.join(", ")));
            }
        }
        if parts.is_empty() {
            return f.write_str("no node changed");
        }
        f.write_str(&parts.join("; "))
    }
}

/// A fork's record in the run log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRecord {
    pub parent_run_id: String,
    pub edits: Vec<ForkEdit>,
    pub changes: GraphChanges,
}
