//! The catalog of blocks a graph may use.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use agentloom_core::{Block, BlockCatalog};

use crate::graph_call::GraphFiles;

/// A set of blocks keyed by kind id. Iterates in kind order.
#[derive(Default)]
pub struct Registry {
    blocks: BTreeMap<String, Box<dyn Block>>,
    /// The files its `graph.call` reads, when made for a graph file or a recorded run.
    graph_files: Option<Arc<GraphFiles>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every block this crate provides.
    pub fn builtin() -> Registry {
        let mut r = Registry::new();
        crate::graph_io::register(&mut r);
        crate::graph_call::register(&mut r);
        crate::constant::register(&mut r);
        crate::template::register(&mut r);
        crate::json_parse::register(&mut r);
        crate::json_query::register(&mut r);
        crate::branch::register(&mut r);
        crate::merge::register(&mut r);
        crate::for_each::register(&mut r);
        crate::delay::register(&mut r);
        crate::passthrough::register(&mut r);
        crate::human_approval::register(&mut r);
        crate::file::register(&mut r);
        crate::http::register(&mut r);
        crate::github::register(&mut r);
        crate::gmail::register(&mut r);
        crate::llm::register(&mut r);
        crate::agent::register(&mut r);
        crate::web_search::register(&mut r);
        r
    }

    /// Adds `block`, replacing a block of the same kind if there is one.
    pub fn register(&mut self, block: Box<dyn Block>) {
        self.blocks.insert(block.meta().kind.clone(), block);
    }

    /// [`Registry::register`], by value, for chaining.
    #[must_use]
    pub fn with(mut self, block: Box<dyn Block>) -> Self {
        self.register(block);
        self
    }

    /// The graph files its `graph.call` nodes read (see [`crate::graph_call::for_graph_file`]).
    pub fn graph_files(&self) -> Option<&Arc<GraphFiles>> {
        self.graph_files.as_ref()
    }

    pub(crate) fn set_graph_files(&mut self, files: Arc<GraphFiles>) {
        self.graph_files = Some(files);
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

impl BlockCatalog for Registry {
    fn block(&self, kind: &str) -> Option<&dyn Block> {
        self.blocks.get(kind).map(|b| &**b)
    }

    fn blocks(&self) -> Vec<&dyn Block> {
        self.blocks.values().map(|b| &**b).collect()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.kinds())
            .finish()
    }
}

/// One shared [`Registry::builtin`], for blocks that must look at other blocks while they
/// are configured (a for-each derives its ports from its inner block).
pub(crate) fn shared_builtin() -> &'static Registry {
    static BUILTIN: OnceLock<Registry> = OnceLock::new();
    BUILTIN.get_or_init(Registry::builtin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentloom_core::{BlockMeta, Config, ConfigError, NodeImpl};
    use std::sync::Arc;

    struct Dummy(BlockMeta);

    impl Block for Dummy {
        fn meta(&self) -> &BlockMeta {
            &self.0
        }
        fn instantiate(&self, _: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
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
}
