//! `graph.call`: runs a saved graph file as one node. The node's inputs are the child
//! graph's `graph.input` nodes and its outputs the child's `graph.output` nodes.
//!
//! A relative `path` is resolved against the directory of the graph file that holds the
//! node: the registry built for that file carries it (`Registry::for_graph_file`), and
//! hands it to the block with the node's [`ConfigCtx`]. The child file is
//! read when the node is configured, so a missing file, a broken file or a reference cycle
//! (a file that ends up calling itself) is a validation problem before anything runs.
//!
//! The files a registry's `graph.call` nodes read go through its [`GraphFiles`]: configuring
//! a node reads and checks each file below it once however many nodes call it (a diamond of
//! files calling the next twice stays linear), a text already parsed is not parsed again,
//! nesting is capped at [`MAX_CALL_DEPTH`] files, and the text read is kept, so that a run
//! is recorded with the exact graphs it called and resumes with them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agentloom_core::{
    Block, BlockError, BlockMeta, CalledGraphs, Config, ConfigCtx, ConfigError, ConfigField,
    ConfigReader, GraphDoc, GraphInterface, NodeImpl, PortSpec, Ports, RunCtx, RunInput, ValueMap,
    ValueType, async_trait,
};

/// The block's kind id.
pub const KIND: &str = "graph.call";
/// The config field naming the graph file.
pub const PATH: &str = "path";

/// How many graph files deep `graph.call` may nest (the calling file counts).
pub const MAX_CALL_DEPTH: usize = 32;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(GraphCall::new())]
}

/// The graph file a registry configures nodes of, and the files its `graph.call` nodes
/// read: what the block finds behind [`ConfigCtx::called_graphs`].
pub(crate) struct GraphScope {
    /// The graph file holding the nodes, if it has been saved.
    file: Option<PathBuf>,
    files: Arc<GraphFiles>,
    /// The files are recorded with a run (made for a graph file or a recorded run).
    recorded: bool,
    /// Set for an untrusted file: the only folder its calls may reach.
    confined: Option<Confinement>,
}

impl Default for GraphScope {
    /// No file: only absolute paths may be called, and nothing is recorded.
    fn default() -> Self {
        Self {
            file: None,
            files: Arc::new(GraphFiles::new()),
            recorded: false,
            confined: None,
        }
    }
}

impl GraphScope {
    pub(crate) fn for_file(file: Option<&Path>) -> Self {
        Self {
            file: file.map(Path::to_path_buf),
            recorded: true,
            ..Self::default()
        }
    }

    pub(crate) fn untrusted(file: &Path, why: String) -> Self {
        let folder = std::fs::canonicalize(file)
            .ok()
            .and_then(|file| file.parent().map(Path::to_path_buf));
        Self {
            confined: Some(Confinement {
                // A file that cannot be resolved confines to nothing: every call is refused.
                folder: folder.unwrap_or_default(),
                why,
            }),
            ..Self::for_file(Some(file))
        }
    }

    /// The scope of `file` whose calls read only `files` (a snapshot); confined to the
    /// file's folder when `untrusted_why` says why.
    pub(crate) fn with_files(
        file: Option<&Path>,
        files: Arc<GraphFiles>,
        untrusted_why: Option<String>,
    ) -> Self {
        let base = match (file, untrusted_why) {
            (Some(file), Some(why)) => Self::untrusted(file, why),
            (file, _) => Self::for_file(file),
        };
        Self { files, ..base }
    }

    pub(crate) fn kept(files: Arc<GraphFiles>) -> Self {
        Self {
            files,
            recorded: true,
            ..Self::default()
        }
    }

    pub(crate) fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    pub(crate) fn files(&self) -> &Arc<GraphFiles> {
        &self.files
    }

    pub(crate) fn recorded_files(&self) -> Option<&Arc<GraphFiles>> {
        self.recorded.then_some(&self.files)
    }
}

impl CalledGraphs for GraphScope {
    fn load(&self, path: &Path) -> Result<Arc<GraphDoc>, String> {
        let mut chain: Vec<PathBuf> = self
            .file
            .as_deref()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .into_iter()
            .collect();
        self.files.load_checked(
            path,
            &mut chain,
            &mut HashMap::new(),
            self.confined.as_ref(),
        )
    }
}

/// The graph files read by the `graph.call` nodes of one registry.
pub struct GraphFiles {
    state: Mutex<FilesState>,
}

#[derive(Default)]
struct FilesState {
    /// By canonical path: the last content read (or the content kept with a run).
    files: BTreeMap<PathBuf, Arc<CalledFile>>,
    /// Kept content only: a file read once is not read again (a run in progress, a
    /// resumed run).
    frozen: bool,
    /// Nothing is read from the disk at all: a file not in `files` cannot be called (a
    /// snapshot, read once with the calling file and hashed for its trust).
    sealed: bool,
    /// Files of a snapshot that are not graphs, with why (said when they are called).
    unreadable: BTreeMap<PathBuf, String>,
    /// How many times a file was parsed.
    parses: usize,
}

/// One called graph file: its text and the document parsed from it.
struct CalledFile {
    text: String,
    doc: Arc<GraphDoc>,
}

impl Default for GraphFiles {
    fn default() -> Self {
        Self::new()
    }
}

impl GraphFiles {
    /// Reads files as they are now, each again when it is called again; a file's
    /// unchanged content is not parsed again.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(FilesState::default()),
        }
    }

    /// The files kept with a recorded run, `(canonical path, JSON text)`; a path among
    /// them is never read from the disk.
    pub fn kept(files: impl IntoIterator<Item = (String, String)>) -> Result<Self, String> {
        let mut state = FilesState {
            frozen: true,
            ..FilesState::default()
        };
        for (path, text) in files {
            let doc = GraphDoc::from_json_str(&text)
                .map_err(|e| format!("the kept copy of `{path}`: {e}"))?;
            let file = CalledFile {
                text,
                doc: Arc::new(doc),
            };
            state.files.insert(PathBuf::from(path), Arc::new(file));
        }
        Ok(Self {
            state: Mutex::new(state),
        })
    }

    /// A snapshot of the files a graph calls, read once with it: `(path, text or why it is
    /// not readable)` by the paths its nodes name (absolute, canonical ones included).
    /// Nothing is ever read from the disk: what runs is what was read, and hashed for trust.
    pub fn snapshot(files: impl IntoIterator<Item = (PathBuf, Result<String, String>)>) -> Self {
        let mut state = FilesState {
            frozen: true,
            sealed: true,
            ..FilesState::default()
        };
        for (path, text) in files {
            let parsed = text.and_then(|text| {
                let doc = GraphDoc::from_json_str(&text)
                    .map_err(|e| format!("graph file `{}`: {e}", path.display()))?;
                Ok((text, with_absolute_paths_to(doc, &path)))
            });
            match parsed {
                Ok((text, doc)) => {
                    let file = CalledFile {
                        text,
                        doc: Arc::new(doc),
                    };
                    state.files.insert(path, Arc::new(file));
                }
                Err(why) => {
                    state.unreadable.insert(path, why);
                }
            }
        }
        Self {
            state: Mutex::new(state),
        }
    }

    /// From now on, every file already read keeps the content read (a run starting: what
    /// it runs is what was validated).
    pub fn freeze(&self) {
        self.lock().frozen = true;
    }

    /// The files read so far, `(canonical path, JSON text)`, by path.
    pub fn contents(&self) -> Vec<(String, String)> {
        self.lock()
            .files
            .iter()
            .map(|(path, file)| (path.display().to_string(), file.text.clone()))
            .collect()
    }

    /// How many times a file was parsed (each distinct content once).
    pub fn parses(&self) -> usize {
        self.lock().parses
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FilesState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The canonical path of `path` and its document: kept, or read now.
    fn load(&self, path: &Path) -> Result<(PathBuf, Arc<GraphDoc>), String> {
        {
            let state = self.lock();
            if state.sealed {
                // The same file by another name (`lib/../lib/x.json`) is the same file: its
                // canonical name finds cycles. Only the name is looked up on the disk.
                let canonical = std::fs::canonicalize(path)
                    .ok()
                    .filter(|canonical| state.files.contains_key(canonical))
                    .unwrap_or_else(|| path.to_path_buf());
                if let Some(file) = state.files.get(&canonical) {
                    return Ok((canonical, Arc::clone(&file.doc)));
                }
            }
            if state.frozen
                && let Some(file) = state.files.get(path)
            {
                return Ok((path.to_path_buf(), Arc::clone(&file.doc)));
            }
            if state.sealed {
                return Err(state.unreadable.get(path).cloned().unwrap_or_else(|| {
                    format!(
                        "cannot read graph file `{}`: it was not there when this graph was read",
                        path.display()
                    )
                }));
            }
        }
        let canonical = std::fs::canonicalize(path)
            .map_err(|e| format!("cannot read graph file `{}`: {e}", path.display()))?;
        {
            let state = self.lock();
            if state.frozen
                && let Some(file) = state.files.get(&canonical)
            {
                return Ok((canonical, Arc::clone(&file.doc)));
            }
        }
        let text = agentloom_core::read_graph_text(&canonical, agentloom_core::max_graph_bytes())
            .map_err(|e| format!("graph file `{}`: {e}", canonical.display()))?;
        let mut state = self.lock();
        if let Some(file) = state.files.get(&canonical)
            && file.text == text
        {
            return Ok((canonical, Arc::clone(&file.doc)));
        }
        state.parses += 1;
        drop(state);
        let doc = GraphDoc::from_json_str(&text)
            .map_err(|e| format!("graph file `{}`: {e}", canonical.display()))?;
        let doc = Arc::new(with_absolute_paths(doc, Some(&canonical)));
        let file = Arc::new(CalledFile {
            text,
            doc: Arc::clone(&doc),
        });
        self.lock().files.insert(canonical.clone(), file);
        Ok((canonical, doc))
    }

    /// The graph file at `path` after checking it and every file it calls in turn: a
    /// missing or broken file, a reference cycle and nesting deeper than
    /// [`MAX_CALL_DEPTH`] fail. `chain` holds the files calling it (canonical paths);
    /// `checked` the files already checked in this validation, each checked once.
    fn load_checked(
        &self,
        path: &Path,
        chain: &mut Vec<PathBuf>,
        checked: &mut HashMap<PathBuf, Result<Arc<GraphDoc>, String>>,
        confined: Option<&Confinement>,
    ) -> Result<Arc<GraphDoc>, String> {
        if let (Some(confinement), Ok(canonical)) = (confined, std::fs::canonicalize(path)) {
            confinement.check(&canonical)?;
        }
        let (canonical, doc) = self.load(path)?;
        if let Some(confinement) = confined {
            confinement.check(&canonical)?;
        }
        if let Some(start) = chain.iter().position(|p| *p == canonical) {
            let mut files: Vec<String> = chain[start..]
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect();
            files.push(format!("`{}`", canonical.display()));
            return Err(format!(
                "reference cycle: {}; a graph cannot call itself",
                files.join(" calls ")
            ));
        }
        if let Some(done) = checked.get(&canonical) {
            return done.clone();
        }
        if chain.len() >= MAX_CALL_DEPTH {
            let first = chain.first().unwrap_or(&canonical);
            return Err(format!(
                "graph files nest more than {MAX_CALL_DEPTH} deep (`{}` calls on down to `{}`); call fewer levels of graphs",
                first.display(),
                canonical.display()
            ));
        }
        chain.push(canonical.clone());
        let result = doc
            .nodes
            .iter()
            .filter(|node| node.block == KIND)
            // A node without a path says so when it is configured.
            .filter_map(|node| node.config.get(PATH)?.as_str())
            .try_for_each(|target| {
                self.load_checked(Path::new(target), chain, checked, confined)
                    .map(drop)
            })
            .map(|()| doc);
        chain.pop();
        checked.insert(canonical, result.clone());
        result
    }
}

struct GraphCall {
    meta: BlockMeta,
}

/// The folder an untrusted graph's calls are confined to, and how to lift that.
struct Confinement {
    folder: PathBuf,
    why: String,
}

impl Confinement {
    fn check(&self, canonical: &Path) -> Result<(), String> {
        if !self.folder.as_os_str().is_empty() && canonical.starts_with(&self.folder) {
            return Ok(());
        }
        Err(format!(
            "`{}` is outside this graph's folder `{}`, and {}",
            canonical.display(),
            self.folder.display(),
            self.why
        ))
    }
}

impl GraphCall {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                KIND,
                "Call graph",
                "Graph",
                "Runs a saved graph file as one node: its graph inputs become this node's inputs and its graph outputs this node's outputs.",
            )
            .field(ConfigField::text(PATH, "Graph file").required().help(
                "The graph file to run, relative to this graph's file (or absolute). Double-click the node to open it.",
            )),
        }
    }
}

/// The graph interface of a document: its run inputs (sorted by name) and the names of its
/// run outputs (sorted). Nodes of blocks outside `ctx`'s catalog are checked when it runs.
pub(crate) fn graph_interface(
    doc: &GraphDoc,
    ctx: &ConfigCtx<'_>,
) -> Result<(Vec<RunInput>, Vec<String>), String> {
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    // A `graph.call` node is no part of the interface, and configuring one here would
    // read its files again outside this validation.
    for node in doc.nodes.iter().filter(|node| node.block != KIND) {
        let Some(block) = ctx.catalog.block(&node.block) else {
            continue;
        };
        let imp = block
            .instantiate(&node.config, ctx)
            .map_err(|e| format!("node `{}`: {e}", node.id))?;
        match imp.interface() {
            Some(GraphInterface::Input(input)) => inputs.push(input),
            Some(GraphInterface::Output { name }) => outputs.push(name),
            None => {}
        }
    }
    inputs.sort_by(|a, b| a.name.cmp(&b.name));
    outputs.sort();
    Ok((inputs, outputs))
}

/// Where `path` points, seen from the graph file `parent_file`.
pub fn resolve(parent_file: Option<&Path>, path: &str) -> Result<PathBuf, String> {
    let path = Path::new(path);
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    match parent_file {
        Some(file) => Ok(file.parent().unwrap_or_else(|| Path::new(".")).join(path)),
        None => Err(format!(
            "`{}` is relative, but this graph has no file yet: save it first, or give an absolute path",
            path.display()
        )),
    }
}

/// `doc` (from the graph file `graph_file`) with the relative `path` of its `graph.call`
/// nodes made absolute, so that a run recorded from it finds the graphs it calls from
/// anywhere (a resumed or approved run, a run opened from the history).
pub fn with_absolute_paths(doc: GraphDoc, graph_file: Option<&Path>) -> GraphDoc {
    let Some(file) = graph_file else {
        return doc;
    };
    let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    with_absolute_paths_to(doc, &file)
}

/// [`with_absolute_paths`] against `file`, already canonical (nothing is read from the disk).
fn with_absolute_paths_to(mut doc: GraphDoc, file: &Path) -> GraphDoc {
    for node in doc.nodes.iter_mut().filter(|node| node.block == KIND) {
        let Some(serde_json::Value::String(path)) = node.config.get(PATH) else {
            continue;
        };
        if let Ok(target) = resolve(Some(file), path.trim()) {
            node.config.insert(
                PATH.to_owned(),
                serde_json::Value::String(target.display().to_string()),
            );
        }
    }
    doc
}

impl Block for GraphCall {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let path = ConfigReader(config).required_str(PATH)?.trim();
        if path.is_empty() {
            return Err(ConfigError::new(
                PATH,
                "is empty: name the graph file to run",
            ));
        }
        let err = |message: String| ConfigError::new(PATH, message);
        let target = resolve(ctx.graph_file, path).map_err(err)?;
        let graphs = ctx.called_graphs.ok_or_else(|| {
            err("graph files cannot be read here: open the graph from its file".to_owned())
        })?;
        let child = graphs.load(&target).map_err(err)?;
        let (inputs, outputs) = graph_interface(&child, ctx)
            .map_err(|e| err(format!("graph file `{}`: {e}", target.display())))?;
        let ports = Ports::new(
            inputs
                .into_iter()
                .map(|input| {
                    let port = PortSpec::new(input.name, input.ty).describe(input.description);
                    if input.default.is_some() {
                        port.optional()
                    } else {
                        port
                    }
                })
                .collect(),
            outputs
                .into_iter()
                .map(|name| {
                    PortSpec::new(name, ValueType::Any).describe("An output of the called graph.")
                })
                .collect(),
        );
        Ok(Arc::new(GraphCallNode { child, ports }))
    }
}

struct GraphCallNode {
    child: Arc<GraphDoc>,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for GraphCallNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        ctx.run_subgraph_in(&self.child, inputs, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;
    use agentloom_core::{BlockCatalog as _, validate};
    use serde_json::json;

    fn write(dir: &Path, name: &str, doc: &serde_json::Value) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    fn calling(path: &str) -> serde_json::Value {
        json!({
            "format": "agentloom.graph", "version": 1, "name": "caller",
            "nodes": [{"id": "call", "block": "graph.call", "config": {"path": path}}],
            "edges": []
        })
    }

    fn registry_for(file: &Path) -> Registry {
        let mut registry = Registry::builtin();
        registry.for_graph_file(Some(file));
        registry
    }

    fn problems(file: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(file).unwrap();
        let doc = GraphDoc::from_json_str(&text).unwrap();
        match validate(&doc, &registry_for(file)) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn ports_are_the_child_graphs_inputs_and_outputs() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "child.json",
            &json!({
                "format": "agentloom.graph", "version": 1, "name": "child",
                "nodes": [
                    {"id": "n", "block": "graph.input", "config": {"name": "n", "type": "integer", "description": "How many."}},
                    {"id": "who", "block": "graph.input", "config": {"name": "who", "default": "you"}},
                    {"id": "out", "block": "graph.output", "config": {"name": "greeting"}}
                ],
                "edges": [{"from": ["who", "value"], "to": ["out", "value"]}]
            }),
        );
        let parent = write(dir.path(), "parent.json", &calling("child.json"));
        let registry = registry_for(&parent);
        let node = registry
            .block(KIND)
            .unwrap()
            .instantiate(
                &calling("child.json")["nodes"][0]["config"]
                    .as_object()
                    .unwrap()
                    .clone()
                    .into(),
                &registry.config_ctx(),
            )
            .unwrap();
        let ports = node.ports();
        let n = ports.input("n").unwrap();
        assert_eq!((n.ty.clone(), n.required), (ValueType::Integer, true));
        assert_eq!(n.description, "How many.");
        assert!(!ports.input("who").unwrap().required);
        let outputs: Vec<&str> = ports.outputs.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(outputs, vec!["greeting"]);
        // Validation sees the same ports: the child's required input must be wired.
        let found = problems(&parent);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("required input `n` (integer) is not wired"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn a_reference_cycle_is_a_problem_naming_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.json", &calling("b.json"));
        write(dir.path(), "b.json", &calling("a.json"));
        let found = problems(&a);
        assert_eq!(found.len(), 1, "{found:?}");
        let a_path = std::fs::canonicalize(&a).unwrap();
        let b_path = std::fs::canonicalize(dir.path().join("b.json")).unwrap();
        let expected = format!(
            "reference cycle: `{}` calls `{}` calls `{}`",
            a_path.display(),
            b_path.display(),
            a_path.display()
        );
        assert!(found[0].contains(&expected), "{}", found[0]);
        assert!(found[0].contains("node `call`"), "{}", found[0]);

        let selfish = write(dir.path(), "self.json", &calling("self.json"));
        let found = problems(&selfish);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("reference cycle"), "{}", found[0]);
        assert!(found[0].contains("self.json"), "{}", found[0]);
    }

    #[test]
    fn a_missing_or_broken_child_file_is_a_problem_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let parent = write(dir.path(), "parent.json", &calling("gone.json"));
        let found = problems(&parent);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("cannot read graph file"), "{}", found[0]);
        assert!(found[0].contains("gone.json"), "{}", found[0]);

        std::fs::write(dir.path().join("broken.json"), "{\"format\": ").unwrap();
        let parent = write(dir.path(), "parent2.json", &calling("broken.json"));
        let found = problems(&parent);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("broken.json"), "{}", found[0]);
    }

    /// level0.json … level{depth}.json, each calling the next twice.
    fn diamond(dir: &Path, depth: usize) -> PathBuf {
        for level in 0..depth {
            let next = format!("level{}.json", level + 1);
            let mut doc = calling(&next);
            doc["nodes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"id": "again", "block": "graph.call", "config": {"path": next}}));
            write(dir, &format!("level{level}.json"), &doc);
        }
        write(
            dir,
            &format!("level{depth}.json"),
            &json!({"format": "agentloom.graph", "version": 1, "name": "bottom",
                    "nodes": [], "edges": []}),
        );
        dir.join("level0.json")
    }

    #[test]
    fn each_called_file_is_parsed_once_however_often_it_is_called() {
        let dir = tempfile::tempdir().unwrap();
        let top = diamond(dir.path(), 16);
        let mut registry = Registry::builtin();
        let files = registry.for_graph_file(Some(&top));
        let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&top).unwrap()).unwrap();
        validate(&doc, &registry).unwrap();
        // level1 … level16: 2^16 calls below the top file, 16 files.
        assert_eq!(files.parses(), 16);
        assert_eq!(files.contents().len(), 16);
        // Validating again reads the files again but parses nothing unchanged.
        validate(&doc, &registry).unwrap();
        assert_eq!(files.parses(), 16);
    }

    #[test]
    fn kept_files_are_used_instead_of_what_the_disk_holds_now() {
        let dir = tempfile::tempdir().unwrap();
        let child = write(
            dir.path(),
            "child.json",
            &json!({"format": "agentloom.graph", "version": 1, "name": "child",
                    "nodes": [{"id": "out", "block": "graph.output", "config": {"name": "kept"}}],
                    "edges": []}),
        );
        let parent = write(dir.path(), "parent.json", &calling("child.json"));
        let mut registry = Registry::builtin();
        let files = registry.for_graph_file(Some(&parent));
        let doc = GraphDoc::from_json_str(&std::fs::read_to_string(&parent).unwrap()).unwrap();
        let doc = with_absolute_paths(doc, Some(&parent));
        validate(&doc, &registry).unwrap();
        let kept = files.contents();
        assert_eq!(kept.len(), 1);

        std::fs::write(&child, "{ not a graph").unwrap();
        let mut resumed = Registry::builtin();
        resumed.for_kept_graph_files(Arc::new(GraphFiles::kept(kept).unwrap()));
        let valid = validate(&doc, &resumed).unwrap();
        let outputs: Vec<&str> = valid.nodes[0]
            .node
            .ports()
            .outputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(outputs, vec!["kept"]);
        // Read from the disk, the broken file is a problem.
        let found = problems(&parent);
        assert!(found[0].contains("child.json"), "{found:?}");
    }

    #[test]
    fn an_untrusted_file_calls_only_files_in_its_own_folder() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        let child = json!({
            "format": "agentloom.graph", "version": 1, "name": "child",
            "nodes": [{"id": "out", "block": "graph.output", "config": {"name": "x"}}],
            "edges": []
        });
        write(dir.path(), "outside.json", &child);
        write(&inner, "beside.json", &child);
        // A file in the folder that calls out of it is refused too.
        write(&inner, "hop.json", &calling("../outside.json"));
        let problems_untrusted = |caller: &Path| {
            let mut registry = Registry::builtin();
            registry.for_untrusted_graph_file(caller, "TRUST IT".to_owned());
            let text = std::fs::read_to_string(caller).unwrap();
            match validate(&GraphDoc::from_json_str(&text).unwrap(), &registry) {
                Ok(_) => Vec::new(),
                Err(problems) => problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }
        };
        let beside = write(&inner, "a.json", &calling("beside.json"));
        assert!(problems_untrusted(&beside).is_empty());
        for target in ["../outside.json", "hop.json"] {
            let caller = write(&inner, "b.json", &calling(target));
            let found = problems_untrusted(&caller);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].contains("outside.json` is outside this graph's folder")
                    && found[0].ends_with("TRUST IT"),
                "{}",
                found[0]
            );
            // Trusted, the same call is fine.
            assert!(problems(&caller).is_empty());
        }
    }

    #[test]
    fn a_relative_path_needs_a_saved_graph() {
        let err = crate::testing::config_error(KIND, json!({"path": "child.json"})).unwrap();
        assert!(err.contains("has no file yet: save it first"), "{err}");
        let err = crate::testing::config_error(KIND, json!({})).unwrap();
        assert!(err.contains("config `path`"), "{err}");
    }
}
