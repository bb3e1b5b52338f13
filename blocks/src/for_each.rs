//! `control.for_each`: runs one block, or a sub-graph, for every item of a list.

use std::sync::Arc;

use agentloom_core::{
    ApprovalDecision, ApprovalRequest, Block, BlockError, BlockMeta, Config, ConfigCtx,
    ConfigError, ConfigField, ConfigReader, GraphDoc, InputsExt as _, NodeImpl, PortSpec, Ports,
    RunCtx, Value, ValueMap, ValueType, approval_action, async_trait, coerce, resolved_details,
};
use futures::StreamExt as _;

const ITEMS: &str = "items";
const RESULTS: &str = "results";
/// The run input of a per-item sub-graph that receives the item.
const GRAPH_ITEM: &str = "item";
/// The run output of a per-item sub-graph that gives the result.
const GRAPH_RESULT: &str = "result";
const MAX_CONCURRENCY: u64 = 64;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(ForEach::new())]
}

struct ForEach {
    meta: BlockMeta,
}

impl ForEach {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "control.for_each",
                "For each",
                "Control",
                "Runs a block or a sub-graph once for every item of a list and collects the results in order.",
            )
            .field(ConfigField::text("block", "Block").help(
                "The kind of block to run per item, e.g. `http.request`; its other inputs become inputs of this node.",
            ))
            .field(ConfigField::json("config", "Block config").help("The config of that block, as a JSON object."))
            .field(ConfigField::text("item_port", "Item input").help(
                "The block input that receives each item; by default its first required input.",
            ))
            .field(
                ConfigField::text("output_port", "Result output")
                    .help("The block output collected into `results`; by default its first output."),
            )
            .field(
                #[allow(clippy::cast_possible_wrap, reason = "small constant")]
                ConfigField::integer("concurrency", "Concurrency", Some(1), Some(MAX_CONCURRENCY as i64))
                    .default_value(serde_json::json!(4))
                    .help("How many items run at the same time."),
            )
            .field(ConfigField::json("graph", "Sub-graph").help(
                "Instead of a block: a graph run per item, with a graph input named `item` and a graph output named `result`.",
            )),
        }
    }
}

/// What runs for each item.
enum Inner {
    Block {
        kind: String,
        /// The inner node changes the outside world: safe mode asks before each item.
        side_effects: bool,
        config: Config,
        /// What an approval prompt shows of the inner node before its inputs: its
        /// block's config defaults with its config over them.
        configured: ValueMap,
        item_port: String,
        item_type: ValueType,
        output_port: String,
    },
    Graph(Box<GraphDoc>),
}

impl Block for ForEach {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let concurrency = reader.u64_or("concurrency", 4)?;
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            return Err(ConfigError::new(
                "concurrency",
                format!("must be between 1 and {MAX_CONCURRENCY}, got {concurrency}"),
            ));
        }
        let kind = reader
            .str("block")?
            .map(str::trim)
            .filter(|k| !k.is_empty());
        let graph = reader.get("graph");
        let (inner, extra) = match (kind, graph) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "graph",
                    "set either `block` or `graph`, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    "block",
                    "is required: name the block to run per item, or set `graph` to run a sub-graph per item",
                ));
            }
            (Some(kind), None) => inner_block(kind, &reader, ctx)?,
            (None, Some(graph)) => inner_graph(graph, ctx)?,
        };
        let mut inputs = vec![
            PortSpec::new(ITEMS, ValueType::list_of(ValueType::Any))
                .describe("The items to run over."),
        ];
        for port in extra {
            if port.name == ITEMS {
                return Err(ConfigError::new(
                    "block",
                    "the inner block has an input named `items` besides the item input; wrap it in a sub-graph instead",
                ));
            }
            inputs.push(port);
        }
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new(RESULTS, ValueType::list_of(ValueType::Any))
                    .describe("One result per item, in item order."),
            ],
        );
        #[allow(clippy::cast_possible_truncation, reason = "at most MAX_CONCURRENCY")]
        Ok(Arc::new(ForEachNode {
            inner,
            concurrency: concurrency as usize,
            ports,
        }))
    }
}

/// Checks the inner block and returns it with the inputs it adds to the for-each node.
fn inner_block(
    kind: &str,
    reader: &ConfigReader<'_>,
    ctx: &ConfigCtx<'_>,
) -> Result<(Inner, Vec<PortSpec>), ConfigError> {
    let config = match reader.get("config") {
        None => Config::new(),
        Some(serde_json::Value::Object(map)) => map.clone().into(),
        Some(other) => {
            return Err(ConfigError::new(
                "config",
                format!("must be a JSON object, got {other}"),
            ));
        }
    };
    let block = ctx.catalog.block(kind).ok_or_else(|| {
        ConfigError::new(
            "block",
            format!("unknown block kind `{kind}`; see `agentloom blocks` for the available kinds"),
        )
    })?;
    let node = block
        .instantiate(&config, ctx)
        .map_err(|e| ConfigError::new("config", format!("for block `{kind}`: {e}")))?;
    let ports = node.ports();
    let item_port = match reader
        .str("item_port")?
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        Some(name) => ports.input(name).ok_or_else(|| {
            ConfigError::new(
                "item_port",
                format!(
                    "block `{kind}` has no input `{name}`; {}",
                    list(&ports.inputs)
                ),
            )
        })?,
        None => ports.inputs.iter().find(|p| p.required).ok_or_else(|| {
            ConfigError::new(
                "item_port",
                format!("block `{kind}` has no required input to take the item; name one"),
            )
        })?,
    };
    let output_port = match reader
        .str("output_port")?
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        Some(name) => ports
            .outputs
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                ConfigError::new(
                    "output_port",
                    format!(
                        "block `{kind}` has no output `{name}`; {}",
                        list(&ports.outputs)
                    ),
                )
            })?,
        None => ports.outputs.first().ok_or_else(|| {
            ConfigError::new(
                "output_port",
                format!("block `{kind}` has no output to collect"),
            )
        })?,
    };
    let extra = ports
        .inputs
        .iter()
        .filter(|p| p.name != item_port.name)
        .cloned()
        .collect();
    Ok((
        Inner::Block {
            kind: kind.to_owned(),
            side_effects: node.side_effects().unwrap_or(block.meta().side_effects),
            configured: resolved_details(block.meta(), &config, &ValueMap::new())
                .into_object()
                .unwrap_or_default(),
            config,
            item_port: item_port.name.clone(),
            item_type: item_port.ty.clone(),
            output_port: output_port.name.clone(),
        },
        extra,
    ))
}

fn list(ports: &[PortSpec]) -> String {
    if ports.is_empty() {
        return "it has none".to_owned();
    }
    let names: Vec<String> = ports.iter().map(|p| format!("`{}`", p.name)).collect();
    format!("it has {}", names.join(", "))
}

/// Checks the per-item sub-graph; its graph inputs other than `item` become inputs of the
/// for-each node.
fn inner_graph(
    json: &serde_json::Value,
    ctx: &ConfigCtx<'_>,
) -> Result<(Inner, Vec<PortSpec>), ConfigError> {
    let doc = GraphDoc::from_json_value(json.clone())
        .map_err(|e| ConfigError::new("graph", e.to_string()))?;
    let (graph_inputs, graph_outputs) =
        crate::graph_call::graph_interface(&doc, ctx).map_err(|e| ConfigError::new("graph", e))?;
    if !graph_inputs.iter().any(|input| input.name == GRAPH_ITEM) {
        return Err(ConfigError::new(
            "graph",
            "the sub-graph needs a graph input named `item` to receive each item",
        ));
    }
    if !graph_outputs.iter().any(|name| name == GRAPH_RESULT) {
        return Err(ConfigError::new(
            "graph",
            "the sub-graph needs a graph output named `result` to give each item's result",
        ));
    }
    let extra = graph_inputs
        .into_iter()
        .filter(|input| input.name != GRAPH_ITEM)
        .map(|input| {
            let port = PortSpec::new(input.name, input.ty)
                .describe("Passed to every run of the sub-graph.");
            if input.default.is_some() {
                port.optional()
            } else {
                port
            }
        })
        .collect();
    Ok((Inner::Graph(Box::new(doc)), extra))
}

struct ForEachNode {
    inner: Inner,
    concurrency: usize,
    ports: Ports,
}

/// The runnable form of [`Inner`] for one run.
enum Runner {
    Block {
        node: Arc<dyn NodeImpl>,
        /// Safe mode asks before each item.
        side_effects: bool,
        title: String,
        configured: ValueMap,
        item_port: String,
        item_type: ValueType,
        output_port: String,
    },
    Graph(Box<GraphDoc>),
}

impl Runner {
    async fn run_item(
        &self,
        index: usize,
        item: Value,
        shared: &ValueMap,
        ctx: &dyn RunCtx,
    ) -> Result<Value, BlockError> {
        let mut inputs = shared.clone();
        match self {
            Runner::Block {
                node,
                side_effects,
                title,
                configured,
                item_port,
                item_type,
                output_port,
            } => {
                let item = coerce(item, item_type).map_err(|e| {
                    BlockError::permanent(format!(
                        "item {index}: cannot be given to input `{item_port}`: {e}"
                    ))
                })?;
                inputs.insert(item_port.clone(), item);
                if *side_effects && ctx.safe_mode() {
                    // The prompt says what the inner block will do with this item, as
                    // its own approval would: `http.request (item 0): POST http://…`.
                    let mut details = configured.clone();
                    details.extend(inputs.iter().map(|(k, v)| (k.clone(), v.clone())));
                    let request = ApprovalRequest::new(
                        approval_action(&format!("{title} (item {index})"), node.as_ref(), &inputs),
                        Value::object(inputs.clone()),
                    )
                    .with_details(Value::object(details));
                    match ctx
                        .request_approval(request)
                        .await
                        .map_err(|e| at_item(index, e))?
                    {
                        ApprovalDecision::Approved {
                            arguments: Value::Object(edited),
                        } => inputs = std::sync::Arc::unwrap_or_clone(edited),
                        ApprovalDecision::Approved { .. } => {}
                        ApprovalDecision::Rejected { message } => {
                            return Err(BlockError::permanent(format!(
                                "item {index}: `{title}` was not approved: {message}"
                            )));
                        }
                    }
                }
                let mut outputs = node.run(inputs, ctx).await.map_err(|e| at_item(index, e))?;
                Ok(outputs.remove(output_port.as_str()).unwrap_or(Value::Null))
            }
            Runner::Graph(graph) => {
                inputs.insert(GRAPH_ITEM.to_owned(), item);
                let mut outputs = ctx
                    .run_subgraph_in(graph, inputs, Some(&index.to_string()))
                    .await
                    .map_err(|e| at_item(index, e))?;
                Ok(outputs.remove(GRAPH_RESULT).unwrap_or(Value::Null))
            }
        }
    }
}

fn at_item(index: usize, mut err: BlockError) -> BlockError {
    if err.class != agentloom_core::ErrorClass::Cancelled {
        err.message = format!("item {index}: {}", err.message);
    }
    err
}

#[async_trait]
impl NodeImpl for ForEachNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let items = match inputs.take_value(ITEMS)? {
            Value::List(items) => std::sync::Arc::unwrap_or_clone(items),
            other => {
                return Err(BlockError::input(
                    ITEMS,
                    format!("expected a list, got {}", other.kind_name()),
                ));
            }
        };
        // The remaining inputs are the inner block's other inputs, the same for every item.
        let shared = inputs;
        let runner = match &self.inner {
            Inner::Block {
                kind,
                side_effects,
                config,
                configured,
                item_port,
                item_type,
                output_port,
            } => Runner::Block {
                // The run's catalog: the one the node was configured from.
                node: ctx.instantiate(kind, config)?,
                side_effects: *side_effects,
                title: kind.clone(),
                configured: configured.clone(),
                item_port: item_port.clone(),
                item_type: item_type.clone(),
                output_port: output_port.clone(),
            },
            Inner::Graph(graph) => Runner::Graph(graph.clone()),
        };
        let runner = &runner;
        let shared = &shared;
        let mut results = Vec::with_capacity(items.len());
        let mut stream = futures::stream::iter(
            items
                .into_iter()
                .enumerate()
                .map(|(index, item)| runner.run_item(index, item, shared, ctx)),
        )
        .buffered(self.concurrency);
        loop {
            let next = tokio::select! {
                () = ctx.cancel_token().cancelled() => return Err(BlockError::cancelled()),
                next = stream.next() => next,
            };
            match next {
                Some(result) => results.push(result?),
                None => break,
            }
        }
        Ok(agentloom_core::outputs([(RESULTS, Value::list(results))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, config_error, inputs, instantiate, run_block, run_block_with};
    use agentloom_core::ErrorClass;
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn names(ports: &[PortSpec]) -> Vec<&str> {
        ports.iter().map(|p| p.name.as_str()).collect()
    }

    #[tokio::test]
    async fn runs_a_block_per_item_in_order_with_shared_inputs() {
        let config = json!({"block": "text.template", "config": {"template": "{{ greeting }}, {{ who }}!"}, "item_port": "who"});
        let node = instantiate("control.for_each", config.clone()).unwrap();
        assert_eq!(names(&node.ports().inputs), vec!["items", "greeting"]);
        assert_eq!(names(&node.ports().outputs), vec!["results"]);
        let out = run_block(
            "control.for_each",
            config,
            inputs([
                ("items", Value::from_json(json!(["Ada", "Grace", 3]))),
                ("greeting", Value::from("Hi")),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            inputs([(
                "results",
                Value::from_json(json!(["Hi, Ada!", "Hi, Grace!", "Hi, 3!"]))
            )])
        );
    }

    #[tokio::test]
    async fn defaults_to_first_required_input_and_first_output() {
        let out = run_block(
            "control.for_each",
            json!({"block": "json.parse"}),
            inputs([("items", Value::from_json(json!(["1", "[2]", "{\"a\":3}"])))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            inputs([("results", Value::from_json(json!([1, [2], {"a": 3}])))])
        );
    }

    #[tokio::test]
    async fn runs_items_concurrently_but_keeps_order() {
        let config = json!({"block": "control.delay", "config": {"ms": 200}, "concurrency": 4});
        let started = Instant::now();
        let out = run_block(
            "control.for_each",
            config,
            inputs([("items", Value::from_json(json!([1, 2, 3, 4])))]),
        )
        .await
        .unwrap();
        // Four waits of 200 ms overlap: well under the 800 ms they take one after another.
        assert!(
            started.elapsed() < Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            out,
            inputs([("results", Value::from_json(json!([1, 2, 3, 4])))])
        );
    }

    #[tokio::test]
    async fn an_item_failure_names_the_index() {
        let err = run_block(
            "control.for_each",
            json!({"block": "json.parse", "concurrency": 1}),
            inputs([("items", Value::from_json(json!(["1", "{oops", "3"])))]),
        )
        .await
        .unwrap_err();
        assert!(
            err.message
                .starts_with("item 1: input `text`: not valid JSON"),
            "{}",
            err.message
        );
        assert_eq!(err.class, ErrorClass::Permanent);
    }

    #[tokio::test]
    async fn cancellation_stops_all_items() {
        let ctx = Arc::new(TestCtx::new());
        let canceller = ctx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            canceller.cancel();
        });
        let err = run_block_with(
            &ctx,
            "control.for_each",
            json!({"block": "control.delay", "config": {"ms": 60_000}}),
            inputs([("items", Value::from_json(json!([1, 2])))]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::Cancelled);
    }

    fn item_graph() -> serde_json::Value {
        json!({
            "format": "agentloom.graph", "version": 1, "name": "per item",
            "nodes": [
                {"id": "in", "block": "graph.input", "config": {"name": "item", "type": "json"}},
                {"id": "prefix", "block": "graph.input", "config": {"name": "prefix"}},
                {"id": "limit", "block": "graph.input", "config": {"name": "limit", "type": "integer", "default": 3}},
                {"id": "t", "block": "text.template", "config": {"template": "{{ p }}{{ i }}"}},
                {"id": "out", "block": "graph.output", "config": {"name": "result"}}
            ],
            "edges": [
                {"from": ["in", "value"], "to": ["t", "i"]},
                {"from": ["prefix", "value"], "to": ["t", "p"]},
                {"from": ["t", "text"], "to": ["out", "value"]}
            ]
        })
    }

    #[tokio::test]
    async fn a_sub_graph_per_item_gets_its_inputs_as_ports_and_runs_through_the_context() {
        let node = instantiate("control.for_each", json!({"graph": item_graph()})).unwrap();
        assert_eq!(
            names(&node.ports().inputs),
            vec!["items", "limit", "prefix"]
        );
        let limit = node.ports().input("limit").unwrap();
        assert!(!limit.required);
        assert_eq!(limit.ty, ValueType::Integer);
        assert!(node.ports().input("prefix").unwrap().required);
        // The test context has no executor; the real one runs the sub-graph.
        let err = run_block(
            "control.for_each",
            json!({"graph": item_graph()}),
            inputs([
                ("items", Value::from_json(json!(["a"]))),
                ("prefix", Value::from("-")),
            ]),
        )
        .await
        .unwrap_err();
        assert_eq!(err.message, "item 0: sub-graphs need the executor");
    }

    #[test]
    fn config_errors_say_what_to_fix() {
        let cases = [
            (json!({}), "config `block`: is required"),
            (
                json!({"block": "no.such"}),
                "config `block`: unknown block kind `no.such`",
            ),
            (
                json!({"block": "json.parse", "item_port": "nope"}),
                "config `item_port`: block `json.parse` has no input `nope`; it has `text`",
            ),
            (
                json!({"block": "json.parse", "output_port": "x"}),
                "config `output_port`: block `json.parse` has no output `x`; it has `value`",
            ),
            (
                json!({"block": "json.query", "config": {"query": "$["}}),
                "config `config`: for block `json.query`: config `query`",
            ),
            (
                json!({"block": "json.parse", "concurrency": 0}),
                "config `concurrency`: must be between 1 and 64",
            ),
            (
                json!({"block": "json.parse", "graph": item_graph()}),
                "config `graph`: set either",
            ),
            (
                json!({"graph": {"format": "agentloom.graph", "version": 1, "nodes": []}}),
                "config `graph`: the sub-graph needs a graph input named `item`",
            ),
            (
                json!({"graph": {"nodes": []}}),
                "config `graph`: not an Agentloom graph",
            ),
        ];
        for (config, expected) in cases {
            let err = config_error("control.for_each", config.clone()).unwrap();
            assert!(err.starts_with(expected), "{config}: {err}");
        }
    }
}
