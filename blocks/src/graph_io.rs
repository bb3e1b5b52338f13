//! `graph.input` and `graph.output`: the graph's interface to the one who runs it.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, BoundHosts, Config, ConfigCtx, ConfigError, ConfigField,
    ConfigReader, GraphInterface, InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, RunInput,
    SECRET_INPUT_TYPE, Value, ValueMap, ValueType, async_trait, coerce, coerce_given,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(GraphInput::new()), Box::new(GraphOutput::new())]
}

/// `graph.input`: one named run input.
struct GraphInput {
    meta: BlockMeta,
}

impl GraphInput {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "graph.input",
                "Graph input",
                "Graph",
                "A value given when the graph is run, from the run dialog or `--input name=VALUE`.",
            )
            .field(
                ConfigField::text("name", "Name")
                    .required()
                    .help("The input's name, as in `agentloom run --input name=VALUE`."),
            )
            .field(
                ConfigField::value_type("type", "Type")
                    .default_value(serde_json::json!("text"))
                    .help(
                        "The type of the value; text given on the command line is parsed into it. `secret`: text kept out of the run log and sent only to the input's hosts.",
                    ),
            )
            .field(ConfigField::text("hosts", "Secret's hosts").help(
                "For a `secret` input: the hosts (`host` or `host:port`, comma-separated) it may be sent to; none when empty.",
            ))
            .field(ConfigField::json("default", "Default").help(
                "Used when the run does not give this input; leave empty to make it required.",
            ))
            .field(
                ConfigField::multiline("description", "Description")
                    .help("Tells the person running the graph what to give."),
            ),
        }
    }
}

impl Block for GraphInput {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let name = reader.required_str("name")?.trim().to_owned();
        let secret = reader.str("type")? == Some(SECRET_INPUT_TYPE);
        let ty = if secret {
            ValueType::Text
        } else {
            reader.value_type_or("type", ValueType::Text)?
        };
        let secret = secret.then(|| secret_hosts(&reader)).transpose()?;
        let description = reader.str_or("description", "")?.trim().to_owned();
        let default = match reader.get("default") {
            None => None,
            Some(json) => Some(coerce(Value::from_json(json.clone()), &ty).map_err(|e| {
                ConfigError::new("default", format!("does not fit type {ty}: {e}"))
            })?),
        };
        let ports = Ports::new(
            Vec::new(),
            vec![PortSpec::new("value", ty.clone()).describe(description.clone())],
        );
        Ok(Arc::new(GraphInputNode {
            input: RunInput {
                name,
                ty,
                default,
                description,
                secret,
            },
            ports,
        }))
    }
}

/// The `hosts` a secret input may be sent to: a comma-separated text or a list of texts.
fn secret_hosts(reader: &ConfigReader<'_>) -> Result<BoundHosts, ConfigError> {
    let hosts = match reader.get("hosts") {
        None | Some(serde_json::Value::Null) => Ok(BoundHosts::none()),
        Some(serde_json::Value::String(list)) => BoundHosts::parse_list(list),
        Some(serde_json::Value::Array(items)) => {
            let hosts: Option<Vec<&str>> = items.iter().map(serde_json::Value::as_str).collect();
            hosts.map_or_else(
                || Err("expected host names as text".to_owned()),
                |hosts| BoundHosts::parse(&hosts),
            )
        }
        Some(other) => Err(format!("expected a list of hosts, got {other}")),
    };
    hosts.map_err(|message| ConfigError::new("hosts", message))
}

struct GraphInputNode {
    input: RunInput,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for GraphInputNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn interface(&self) -> Option<GraphInterface> {
        Some(GraphInterface::Input(self.input.clone()))
    }

    async fn run(&self, _inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let name = &self.input.name;
        let value = match ctx.graph_input(name) {
            Some(given) => coerce_given(given, &self.input.ty)
                .map_err(|e| BlockError::permanent(format!("run input `{name}`: {e}")))?,
            None => self.input.default.clone().ok_or_else(|| {
                BlockError::permanent(format!(
                    "run input `{name}` was not given; pass --input {name}=VALUE"
                ))
            })?,
        };
        Ok(agentloom_core::outputs([("value", value)]))
    }
}

/// `graph.output`: publishes a value as a run output.
struct GraphOutput {
    meta: BlockMeta,
}

impl GraphOutput {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "graph.output",
                "Graph output",
                "Graph",
                "Publishes the value wired into it as a named result of the run.",
            )
            .field(
                ConfigField::text("name", "Name")
                    .required()
                    .help("The output's name in the run's results."),
            ),
        }
    }
}

impl Block for GraphOutput {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let name = ConfigReader(config).required_str("name")?.trim().to_owned();
        let ports = Ports::new(
            vec![PortSpec::new("value", ValueType::Any).describe("The value to publish.")],
            Vec::new(),
        );
        Ok(Arc::new(GraphOutputNode { name, ports }))
    }
}

struct GraphOutputNode {
    name: String,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for GraphOutputNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    fn interface(&self) -> Option<GraphInterface> {
        Some(GraphInterface::Output {
            name: self.name.clone(),
        })
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let value = inputs.take_value("value")?;
        ctx.set_graph_output(&self.name, value);
        Ok(ValueMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, config_error, inputs, instantiate, run_block_with};
    use serde_json::json;

    async fn input(config: serde_json::Value, ctx: TestCtx) -> Result<Value, BlockError> {
        let mut out = run_block_with(&ctx, "graph.input", config, ValueMap::new()).await?;
        Ok(out.remove("value").unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn gives_the_run_input_as_text_by_default() {
        let got = input(
            json!({"name": "topic"}),
            TestCtx::new().with_input("topic", "rust"),
        )
        .await;
        assert_eq!(got, Ok(Value::from("rust")));
        // A text input stays text even when it looks like JSON.
        let got = input(json!({"name": "n"}), TestCtx::new().with_input("n", "3")).await;
        assert_eq!(got, Ok(Value::from("3")));
    }

    #[tokio::test]
    async fn parses_command_line_text_into_the_declared_type() {
        let cases = [
            ("number", "3", Value::Integer(3)),
            ("number", "2.5", Value::Number(2.5)),
            ("integer", "42", Value::Integer(42)),
            ("bool", "true", Value::Bool(true)),
            ("json", r#"{"a":1}"#, Value::from_json(json!({"a": 1}))),
            ("json", "not json at all", Value::from("not json at all")),
            (
                "object",
                r#"{"k":"v"}"#,
                Value::from_json(json!({"k": "v"})),
            ),
            (
                "list<text>",
                r#"["a","b"]"#,
                Value::from_json(json!(["a", "b"])),
            ),
            (
                "messages",
                "hello",
                Value::list(vec![agentloom_core::message("user", "hello")]),
            ),
        ];
        for (ty, given, expected) in cases {
            let got = input(
                json!({"name": "x", "type": ty}),
                TestCtx::new().with_input("x", given),
            )
            .await;
            assert_eq!(got, Ok(expected), "type {ty}, given {given}");
        }
        // An integer given for a number stays usable as a number.
        let got = input(
            json!({"name": "x", "type": "number"}),
            TestCtx::new().with_input("x", Value::Integer(3)),
        )
        .await;
        assert_eq!(got, Ok(Value::Integer(3)));
    }

    #[tokio::test]
    async fn wrong_shape_names_the_input() {
        let err = input(
            json!({"name": "count", "type": "integer"}),
            TestCtx::new().with_input("count", "many"),
        )
        .await
        .unwrap_err();
        assert_eq!(err.message, "run input `count`: expected integer, got text");
    }

    #[tokio::test]
    async fn default_is_used_and_missing_input_says_how_to_give_it() {
        let got = input(
            json!({"name": "n", "type": "integer", "default": 7}),
            TestCtx::new(),
        )
        .await;
        assert_eq!(got, Ok(Value::Integer(7)));
        let err = input(json!({"name": "topic"}), TestCtx::new())
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "run input `topic` was not given; pass --input topic=VALUE"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn interface_and_config_errors() {
        let node = instantiate(
            "graph.input",
            json!({"name": "n", "type": "integer", "default": 2}),
        )
        .unwrap();
        assert_eq!(
            node.interface(),
            Some(GraphInterface::Input(RunInput {
                name: "n".into(),
                ty: ValueType::Integer,
                default: Some(Value::Integer(2)),
                description: String::new(),
                secret: None,
            }))
        );
        assert_eq!(node.ports().outputs[0].ty, ValueType::Integer);
        assert!(node.ports().inputs.is_empty());
        let err = config_error("graph.input", json!({})).unwrap();
        assert!(err.contains("config `name`: is required"), "{err}");
        let err = config_error(
            "graph.input",
            json!({"name": "n", "type": "integer", "default": "x"}),
        )
        .unwrap();
        assert!(err.contains("config `default`"), "{err}");
        let err = config_error("graph.input", json!({"name": "n", "type": "strnig"})).unwrap();
        assert!(err.contains("unknown type `strnig`"), "{err}");
    }

    #[test]
    fn a_secret_input_is_text_bound_to_its_hosts() {
        let input = |config: serde_json::Value| match instantiate("graph.input", config)
            .unwrap()
            .interface()
        {
            Some(GraphInterface::Input(input)) => input,
            other => panic!("{other:?}"),
        };
        let listed = input(
            json!({"name": "pw", "type": "secret", "hosts": ["api.example.com", "127.0.0.1:8080"]}),
        );
        assert_eq!(listed.ty, ValueType::Text);
        assert_eq!(
            listed.secret,
            Some(BoundHosts::parse(&["api.example.com", "127.0.0.1:8080"]).unwrap())
        );
        let written = input(
            json!({"name": "pw", "type": "secret", "hosts": "api.example.com, 127.0.0.1:8080"}),
        );
        assert_eq!(written.secret, listed.secret);
        let nowhere = input(json!({"name": "pw", "type": "secret"}));
        assert_eq!(nowhere.secret, Some(BoundHosts::none()));
        assert_eq!(input(json!({"name": "t"})).secret, None);
        let err = config_error(
            "graph.input",
            json!({"name": "pw", "type": "secret", "hosts": ["https://x/y"]}),
        )
        .unwrap();
        assert!(
            err.contains("config `hosts`") && err.contains("`https://x/y` is not a host"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn output_publishes_the_value() {
        let node = instantiate("graph.output", json!({"name": "answer"})).unwrap();
        assert_eq!(
            node.interface(),
            Some(GraphInterface::Output {
                name: "answer".into()
            })
        );
        let ctx = TestCtx::new();
        let out = run_block_with(
            &ctx,
            "graph.output",
            json!({"name": "answer"}),
            inputs([("value", Value::Integer(42))]),
        )
        .await
        .unwrap();
        assert!(out.is_empty());
        assert_eq!(ctx.graph_outputs().get("answer"), Some(&Value::Integer(42)));
    }
}
