//! A graph file edited by the tools: each edit reads the file, changes it and writes it
//! back through the app's save path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, Problem};
use serde_json::Value as Json;

use agentloom_engine::RunStore;

use super::{EditedGraph, GraphEdit, ToolError};
use crate::headless::GraphRunner;
use crate::{Trust, trust};

/// The graph file being edited. The trusted-graphs record is never touched: an edited file
/// no longer matches its fingerprint, so it is not trusted again until its user saves it in
/// the app or runs `agentloom trust`.
pub struct GraphFile {
    path: PathBuf,
}

impl GraphFile {
    pub fn new(path: PathBuf) -> Self {
        GraphFile { path }
    }

    fn empty(&self) -> GraphDoc {
        let name = self
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = name
            .trim_end_matches(".json")
            .trim_end_matches(".agentloom");
        GraphDoc::new(name)
    }

    /// Writes through the app's save path, without the built-in blocks' declared defaults.
    /// The trust record is left as it is.
    fn save(&self, doc: &GraphDoc) -> Result<(), String> {
        let short = agentloom_core::without_declared_defaults(doc, &Registry::builtin());
        crate::save::write_graph_file(&short, &self.path)
            .map_err(|err| format!("cannot write {}: {err}", self.path.display()))
    }

    /// The trust the file has as it is now.
    fn trust(&self) -> Trust {
        Trust::of(trust::is_trusted(&self.path), Some(&self.path))
    }
}

impl EditedGraph for GraphFile {
    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }

    /// The graph as the file holds it now; a missing or empty file is a new, empty graph
    /// named after the file.
    fn load(&self) -> Result<GraphDoc, String> {
        match std::fs::metadata(&self.path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(self.empty()),
            Ok(meta) if meta.is_file() && meta.len() == 0 => return Ok(self.empty()),
            _ => {}
        }
        crate::load_graph(&self.path).map_err(|err| err.to_string())
    }

    /// The blocks the graph is edited with (with its MCP servers' tools when trusted).
    fn catalog(&self, doc: &GraphDoc) -> (Arc<Registry>, Vec<Problem>) {
        let trust = self.trust();
        let secrets = crate::launch::secrets_for(&trust, &crate::Credentials::Default);
        let (catalog, problems) = crate::catalog::for_editing_with_servers(
            doc,
            Some(&self.path),
            &trust,
            secrets.as_ref(),
        );
        (Arc::new(catalog), problems)
    }

    fn apply(&self, edit: GraphEdit) -> Result<(Json, GraphDoc), ToolError> {
        let mut doc = self.load().map_err(ToolError::Failed)?;
        let answer = edit(&mut doc)?;
        self.save(&doc).map_err(ToolError::Failed)?;
        Ok((answer, doc))
    }

    fn runner(&self, store: Option<Arc<RunStore>>) -> Result<GraphRunner, Vec<String>> {
        GraphRunner::load(&self.path, store, false)
    }
}

/// Whether `path` can be edited: a graph file, or one still to be made.
pub fn check_editable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{} is a folder, not a graph file", path.display()));
    }
    Ok(())
}
