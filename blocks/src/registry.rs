//! The catalog of blocks a graph may use.
//!
//! Every block file says which blocks it provides (its `blocks()`); [`BUILTIN`] lists
//! those files. A block sees the catalog it is configured from through its
//! [`ConfigCtx`], never a global one.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use agentloom_core::{Block, BlockCatalog, CatalogCall, ConfigCtx};

use crate::graph_call::{GraphFiles, GraphScope};

/// What a block file exports: the blocks it provides.
type BlockFile = fn() -> Vec<Box<dyn Block>>;

/// The block files of the built-in set: adding a block is its own file plus a line here.
const BUILTIN: [BlockFile; 21] = [
    crate::graph_io::blocks,
    crate::graph_call::blocks,
    crate::constant::blocks,
    crate::template::blocks,
    crate::json_parse::blocks,
    crate::json_query::blocks,
    crate::branch::blocks,
    crate::merge::blocks,
    crate::for_each::blocks,
    crate::delay::blocks,
    crate::passthrough::blocks,
    crate::human_approval::blocks,
    crate::file::blocks,
    crate::http::blocks,
    crate::github::blocks,
    crate::gmail::blocks,
    crate::llm::blocks,
    crate::agent::blocks,
    crate::web_search::blocks,
    crate::knowledge::blocks,
    crate::memory::blocks,
];

/// A set of blocks keyed by kind id, and the graph file whose nodes they configure.
/// Iterates in kind order.
#[derive(Default)]
pub struct Registry {
    blocks: BTreeMap<String, Box<dyn Block>>,
    /// The graph file and the files its `graph.call` nodes read.
    scope: GraphScope,
    /// What was learnt from outside while the catalog was built (MCP tool lists).
    catalog_calls: Vec<CatalogCall>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every block this crate provides.
    pub fn builtin() -> Registry {
        let mut r = Registry::new();
        for block in BUILTIN.iter().flat_map(|blocks| blocks()) {
            r.register(block);
        }
        r
    }

    /// Adds `block`, replacing a block of the same kind if there is one. It is configured
    /// with its declared defaults filled in, as a graph file leaves them out.
    pub fn register(&mut self, block: Box<dyn Block>) {
        self.blocks
            .insert(block.meta().kind.clone(), Box::new(DeclaredDefaults(block)));
    }

    /// [`Registry::register`], by value, for chaining.
    #[must_use]
    pub fn with(mut self, block: Box<dyn Block>) -> Self {
        self.register(block);
        self
    }

    /// Configures the nodes of the graph file at `graph_file`: `graph.call` resolves
    /// relative paths against its directory. Returns the files its nodes read, to record
    /// with a run.
    pub fn for_graph_file(&mut self, graph_file: Option<&Path>) -> Arc<GraphFiles> {
        self.scope = GraphScope::for_file(graph_file);
        Arc::clone(self.scope.files())
    }

    /// [`Registry::for_graph_file`] for a file its user has not trusted: `graph.call` may
    /// only run graph files inside the folder of `graph_file` (and what they call, in
    /// turn); any other file is a problem whose message ends with `why` (how to trust it).
    pub fn for_untrusted_graph_file(&mut self, graph_file: &Path, why: String) -> Arc<GraphFiles> {
        self.scope = GraphScope::untrusted(graph_file, why);
        Arc::clone(self.scope.files())
    }

    /// `graph.call` resolves against `graph_file` and reads only `files` (a snapshot read
    /// with the graph, see [`GraphFiles::snapshot`]); with `untrusted_why`, only files in
    /// the graph file's folder may be called, as [`Registry::for_untrusted_graph_file`].
    pub fn for_graph_snapshot(
        &mut self,
        graph_file: Option<&Path>,
        files: Arc<GraphFiles>,
        untrusted_why: Option<String>,
    ) {
        self.scope = GraphScope::with_files(graph_file, files, untrusted_why);
    }

    /// Makes `graph.call` read the called files from `files` (the content kept with a
    /// recorded run); paths must be absolute, as in a recorded graph.
    pub fn for_kept_graph_files(&mut self, files: Arc<GraphFiles>) {
        self.scope = GraphScope::kept(files);
    }

    /// The graph files its `graph.call` nodes read, once made for a graph file or a
    /// recorded run.
    pub fn graph_files(&self) -> Option<&Arc<GraphFiles>> {
        self.scope.recorded_files()
    }

    /// Keeps an answer got from outside while building the catalog, for every run's log.
    pub fn keep_catalog_call(&mut self, call: CatalogCall) {
        self.catalog_calls.push(call);
    }

    /// The kind ids, sorted.
    pub fn kinds(&self) -> Vec<&str> {
        self.blocks.keys().map(String::as_str).collect()
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// A block configured with the defaults its fields declare wherever its config leaves them
/// out (see [`agentloom_core::with_declared_defaults`]).
struct DeclaredDefaults(Box<dyn Block>);

impl Block for DeclaredDefaults {
    fn meta(&self) -> &agentloom_core::BlockMeta {
        self.0.meta()
    }

    fn instantiate(
        &self,
        config: &agentloom_core::Config,
        ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn agentloom_core::NodeImpl>, agentloom_core::ConfigError> {
        let config = agentloom_core::with_declared_defaults(config, self.0.meta());
        self.0.instantiate(&config, ctx)
    }
}

impl BlockCatalog for Registry {
    fn block(&self, kind: &str) -> Option<&dyn Block> {
        self.blocks.get(kind).map(|b| &**b)
    }

    fn blocks(&self) -> Vec<&dyn Block> {
        self.blocks.values().map(|b| &**b).collect()
    }

    fn config_ctx(&self) -> ConfigCtx<'_> {
        ConfigCtx {
            catalog: self,
            graph_file: self.scope.file(),
            called_graphs: Some(&self.scope),
        }
    }

    fn catalog_calls(&self) -> Vec<CatalogCall> {
        self.catalog_calls.clone()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentloom_core::{BlockMeta, Config, ConfigCtx, ConfigError, NodeImpl};
    use std::sync::Arc;

    struct Dummy(BlockMeta);

    impl Block for Dummy {
        fn meta(&self) -> &BlockMeta {
            &self.0
        }
        fn instantiate(
            &self,
            _: &Config,
            _: &ConfigCtx<'_>,
        ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
            Err(ConfigError::new("x", "dummy"))
        }
    }

    #[test]
    fn builtin_lists_every_kind_sorted() {
        let r = Registry::builtin();
        let kinds = r.kinds();
        let mut sorted = kinds.clone();
        sorted.sort_unstable();
        assert_eq!(kinds, sorted);
        for kind in [
            "control.branch",
            "control.delay",
            "control.for_each",
            "control.merge",
            "control.passthrough",
            "data.constant",
            "file.read",
            "file.write",
            "graph.input",
            "graph.output",
            "http.request",
            "human.approval",
            "json.parse",
            "json.query",
            "text.template",
        ] {
            assert!(r.block(kind).is_some(), "missing {kind}");
        }
        let catalog_kinds: Vec<String> = r.blocks().iter().map(|b| b.meta().kind.clone()).collect();
        assert_eq!(catalog_kinds, kinds);
    }

    #[test]
    fn every_block_is_described() {
        for block in Registry::builtin().blocks() {
            let meta = block.meta();
            assert!(!meta.title.is_empty(), "{}", meta.kind);
            assert!(
                meta.category.starts_with(char::is_uppercase),
                "{}",
                meta.kind
            );
            assert!(
                meta.kind.contains('.'),
                "{} is not `family.name`",
                meta.kind
            );
            assert!(meta.description.ends_with('.'), "{}", meta.kind);
            for field in &meta.config {
                assert!(!field.label.is_empty(), "{}.{}", meta.kind, field.name);
                assert!(
                    !field.help.is_empty(),
                    "{}.{} has no help",
                    meta.kind,
                    field.name
                );
            }
        }
    }

    #[test]
    fn builtin_blocks_wire_into_a_valid_graph() {
        use agentloom_core::{
            EdgeDoc, GraphDoc, NodeDoc, ProblemKind, RunInput, ValueType, validate,
        };
        let mut doc = GraphDoc::new("greet");
        doc.nodes = vec![
            NodeDoc::new("who", "graph.input")
                .with_config(serde_json::json!({"name": "who", "description": " Whom to greet. "})),
            NodeDoc::new("t", "text.template")
                .with_config(serde_json::json!({"template": "Hi {{ name }}"})),
            NodeDoc::new("out", "graph.output")
                .with_config(serde_json::json!({"name": "greeting"})),
        ];
        doc.edges = vec![
            EdgeDoc::new("who", "value", "t", "name"),
            EdgeDoc::new("t", "text", "out", "value"),
        ];
        let registry = Registry::builtin();
        let graph = validate(&doc, &registry)
            .map_err(|p| format!("{p:?}"))
            .unwrap();
        assert_eq!(
            graph.interface_inputs(),
            vec![RunInput {
                name: "who".to_owned(),
                ty: ValueType::Text,
                default: None,
                description: "Whom to greet.".to_owned(),
                secret: None,
            }]
        );
        assert_eq!(graph.interface_outputs(), vec!["greeting".to_owned()]);

        // A template variable left unwired is reported against the node and port.
        doc.edges.remove(0);
        let problems = validate(&doc, &registry).err().unwrap();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].kind, ProblemKind::MissingInput);
        assert_eq!(problems[0].port.as_deref(), Some("name"));
    }

    #[test]
    fn register_replaces_the_same_kind_and_keeps_order() {
        let r = Registry::new()
            .with(Box::new(Dummy(BlockMeta::new("z.last", "Z", "Data", "z."))))
            .with(Box::new(Dummy(BlockMeta::new(
                "a.first", "A", "Data", "a.",
            ))))
            .with(Box::new(Dummy(BlockMeta::new(
                "a.first", "A2", "Data", "a.",
            ))));
        assert_eq!(r.kinds(), vec!["a.first", "z.last"]);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r.block("a.first").map(|b| b.meta().title.clone()),
            Some("A2".to_owned())
        );
        assert!(r.block("nope").is_none());
    }

    /// Refuses to configure unless `size` is there, and says what it was given.
    struct Sized(BlockMeta);

    impl Block for Sized {
        fn meta(&self) -> &BlockMeta {
            &self.0
        }
        fn instantiate(
            &self,
            config: &Config,
            _: &ConfigCtx<'_>,
        ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
            Err(ConfigError::new(
                "size",
                format!("given {:?}", config.get("size")),
            ))
        }
    }

    #[test]
    fn a_field_left_out_is_configured_with_its_declared_default() {
        let meta = BlockMeta::new("data.sized", "Sized", "Data", "s.").field(
            agentloom_core::ConfigField::json("size", "Size").default_value(serde_json::json!(3)),
        );
        let r = Registry::new().with(Box::new(Sized(meta)));
        let block = r.block("data.sized").unwrap();
        let said = |config: &Config| match block.instantiate(config, &r.config_ctx()) {
            Err(err) => err.to_string(),
            Ok(_) => String::new(),
        };
        assert!(said(&Config::new()).contains("given Some(Number(3))"));
        let mut zero = Config::new();
        zero.insert("size".to_owned(), serde_json::json!(0));
        assert!(said(&zero).contains("given Some(Number(0))"));
    }
}
