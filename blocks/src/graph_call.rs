//! `graph.call`: runs a saved graph file as one node. The node's inputs are the child
//! graph's `graph.input` nodes and its outputs the child's `graph.output` nodes.
//!
//! A relative `path` is resolved against the directory of the graph file that holds the
//! node: the registry built for that file carries it ([`for_graph_file`]). The child file is
//! read when the node is configured, so a missing file, a broken file or a reference cycle
//! (a file that ends up calling itself) is a validation problem before anything runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_core::{
    Block, BlockCatalog as _, BlockError, BlockMeta, Config, ConfigError, ConfigField,
    ConfigReader, GraphDoc, GraphInterface, NodeImpl, PortSpec, Ports, RunCtx, RunInput, ValueMap,
    ValueType, async_trait,
};

use crate::Registry;
use crate::registry::shared_builtin;

/// The block's kind id.
pub const KIND: &str = "graph.call";
/// The config field naming the graph file.
pub const PATH: &str = "path";

pub(crate) fn register(r: &mut Registry) {
    r.register(Box::new(GraphCall::new(None)));
}

/// Makes `registry`'s `graph.call` resolve relative paths against the directory of the
/// graph file at `graph_file` (the file whose nodes the registry configures).
pub fn for_graph_file(registry: &mut Registry, graph_file: Option<&Path>) {
    registry.register(Box::new(GraphCall::new(graph_file.map(Path::to_path_buf))));
}

/// [`for_graph_file`] for a file its user has not trusted: `graph.call` may only run graph
/// files inside the folder of `graph_file` (and what they call, in turn); any other file is
/// a problem whose message ends with `why` (how to trust the file).
pub fn for_untrusted_graph_file(registry: &mut Registry, graph_file: &Path, why: String) {
    let folder = std::fs::canonicalize(graph_file)
        .ok()
        .and_then(|file| file.parent().map(Path::to_path_buf));
    let mut call = GraphCall::new(Some(graph_file.to_path_buf()));
    call.confined = Some(Confinement {
        // A file that cannot be resolved confines to nothing: every call is refused.
        folder: folder.unwrap_or_default(),
        why,
    });
    registry.register(Box::new(call));
}

struct GraphCall {
    meta: BlockMeta,
    /// The graph file holding the node, if it has been saved.
    parent_file: Option<PathBuf>,
    /// Set for an untrusted file: the only folder its calls may reach.
    confined: Option<Confinement>,
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
    fn new(parent_file: Option<PathBuf>) -> Self {
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
            parent_file,
            confined: None,
        }
    }
}

/// The graph interface of a document: its run inputs (sorted by name) and the names of its
/// run outputs (sorted). Nodes of blocks outside the built-in set are checked when it runs.
pub(crate) fn graph_interface(doc: &GraphDoc) -> Result<(Vec<RunInput>, Vec<String>), String> {
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for node in &doc.nodes {
        let Some(block) = shared_builtin().block(&node.block) else {
            continue;
        };
        let imp = block
            .instantiate(&node.config)
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
pub fn with_absolute_paths(mut doc: GraphDoc, graph_file: Option<&Path>) -> GraphDoc {
    let Some(file) = graph_file else {
        return doc;
    };
    let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    for node in doc.nodes.iter_mut().filter(|node| node.block == KIND) {
        let Some(serde_json::Value::String(path)) = node.config.get(PATH) else {
            continue;
        };
        if let Ok(target) = resolve(Some(&file), path.trim()) {
            node.config.insert(
                PATH.to_owned(),
                serde_json::Value::String(target.display().to_string()),
            );
        }
    }
    doc
}

/// Reads the graph file at `path` and every file it calls in turn, failing on a missing or
/// broken file and on a reference cycle. `chain` holds the files calling it (canonical
/// paths). The returned document's own `graph.call` paths are made absolute, so it runs
/// the same from anywhere.
fn load_child(
    path: &Path,
    chain: &mut Vec<PathBuf>,
    confined: Option<&Confinement>,
) -> Result<GraphDoc, String> {
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot read graph file `{}`: {e}", path.display()))?;
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
    let doc = agentloom_core::read_graph_file(&canonical, agentloom_core::max_graph_bytes())
        .map_err(|e| format!("graph file `{}`: {e}", canonical.display()))?;
    let doc = with_absolute_paths(doc, Some(&canonical));
    chain.push(canonical);
    let result = doc
        .nodes
        .iter()
        .filter(|node| node.block == KIND)
        // A node without a path says so when it is configured.
        .filter_map(|node| node.config.get(PATH)?.as_str())
        .try_for_each(|target| load_child(Path::new(target), chain, confined).map(drop));
    chain.pop();
    result.map(|()| doc)
}

impl Block for GraphCall {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(&self, config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let path = ConfigReader(config).required_str(PATH)?.trim();
        if path.is_empty() {
            return Err(ConfigError::new(
                PATH,
                "is empty: name the graph file to run",
            ));
        }
        let err = |message: String| ConfigError::new(PATH, message);
        let target = resolve(self.parent_file.as_deref(), path).map_err(err)?;
        let mut chain: Vec<PathBuf> = self
            .parent_file
            .as_deref()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .into_iter()
            .collect();
        let child = load_child(&target, &mut chain, self.confined.as_ref()).map_err(err)?;
        let (inputs, outputs) = graph_interface(&child)
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
        Ok(Arc::new(GraphCallNode {
            child: Box::new(child),
            ports,
        }))
    }
}

struct GraphCallNode {
    child: Box<GraphDoc>,
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
    use agentloom_core::validate;
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
        for_graph_file(&mut registry, Some(file));
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
        let node = registry_for(&parent)
            .block(KIND)
            .unwrap()
            .instantiate(
                &calling("child.json")["nodes"][0]["config"]
                    .as_object()
                    .unwrap()
                    .clone(),
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
            for_untrusted_graph_file(&mut registry, caller, "TRUST IT".to_owned());
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
