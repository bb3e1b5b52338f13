//! `text.template`: renders a minijinja template; its variables become input ports.

use std::collections::BTreeSet;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigError, ConfigField, ConfigReader, NodeImpl,
    PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};
use minijinja::{Environment, UndefinedBehavior};

use crate::Registry;

const TEMPLATE_NAME: &str = "template";

pub(crate) fn register(r: &mut Registry) {
    r.register(Box::new(TextTemplate::new()));
}

struct TextTemplate {
    meta: BlockMeta,
}

impl TextTemplate {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "text.template",
                "Template",
                "Text",
                "Fills a text template; every variable in it becomes an input.",
            )
            .field(
                ConfigField::template("template", "Template")
                    .required()
                    .help("Jinja syntax: {{ name }} inserts input `name`; {% for x in items %}…{% endfor %} repeats."),
            ),
        }
    }
}

impl Block for TextTemplate {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(&self, config: &Config) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let source = ConfigReader(config)
            .str("template")?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ConfigError::new("template", "is required"))?;
        let mut env = Environment::new();
        env.set_keep_trailing_newline(true);
        // Missing attributes fail the render, but `{% if user.nickname %}` still works.
        env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ConfigError::new("template", describe(&e)))?;
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ConfigError::new("template", describe(&e)))?;
        let globals: BTreeSet<&str> = env.globals().map(|(name, _)| name).collect();
        let variables: BTreeSet<String> = template
            .undeclared_variables(false)
            .into_iter()
            .filter(|name| !globals.contains(name.as_str()))
            .collect();
        let inputs = variables
            .into_iter()
            .map(|name| PortSpec::new(name, ValueType::Any))
            .collect();
        let ports = Ports::new(
            inputs,
            vec![PortSpec::new("text", ValueType::Text).describe("The rendered text.")],
        );
        Ok(Arc::new(TemplateNode { env, ports }))
    }
}

/// Says what is wrong with a template, and on which line.
fn describe(err: &minijinja::Error) -> String {
    let mut text = String::new();
    if let Some(line) = err.line() {
        text.push_str(&format!("line {line}: "));
    }
    text.push_str(&err.kind().to_string());
    if let Some(detail) = err.detail() {
        text.push_str(": ");
        text.push_str(detail);
    }
    text
}

struct TemplateNode {
    env: Environment<'static>,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for TemplateNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, inputs: ValueMap, _ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let fail = |e: minijinja::Error| {
            BlockError::permanent(format!("the template did not render: {}", describe(&e)))
        };
        let template = self.env.get_template(TEMPLATE_NAME).map_err(fail)?;
        let text = template
            .render(minijinja::Value::from_serialize(&inputs))
            .map_err(fail)?;
        Ok(agentloom_core::outputs([("text", text.into())]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config_error, inputs, instantiate, run_block};
    use agentloom_core::Value;
    use serde_json::json;

    #[tokio::test]
    async fn variables_become_sorted_required_inputs_and_render() {
        let template = "Hello {{ user.name }}!\n{% for t in topics %}- {{ t }}\n{% endfor %}{% set n = count %}{{ n }} {{ range(2) | list }}";
        let node = instantiate("text.template", json!({"template": template})).unwrap();
        let names: Vec<&str> = node
            .ports()
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, vec!["count", "topics", "user"]);
        assert!(
            node.ports()
                .inputs
                .iter()
                .all(|p| p.required && p.ty == ValueType::Any)
        );
        assert_eq!(node.ports().outputs[0].name, "text");

        let out = run_block(
            "text.template",
            json!({"template": template}),
            inputs([
                ("user", Value::from_json(json!({"name": "Ada"}))),
                ("topics", Value::from_json(json!(["rust", "graphs"]))),
                ("count", Value::Integer(2)),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(
            out.get("text"),
            Some(&Value::from("Hello Ada!\n- rust\n- graphs\n2 [0, 1]"))
        );
    }

    #[tokio::test]
    async fn keeps_a_trailing_newline_and_does_not_escape_html() {
        let out = run_block(
            "text.template",
            json!({"template": "<b>{{ x }}</b>\n"}),
            inputs([("x", Value::from("a&b"))]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("text"), Some(&Value::from("<b>a&b</b>\n")));
    }

    #[test]
    fn a_template_that_does_not_parse_names_the_line() {
        let err = config_error(
            "text.template",
            json!({"template": "ok\nstill ok\n{% if x %}never closed"}),
        )
        .unwrap();
        assert!(
            err.starts_with("config `template`: line 3: syntax error"),
            "{err}"
        );
        let err = config_error("text.template", json!({"template": ""})).unwrap();
        assert!(err.contains("config `template`: is required"), "{err}");
    }

    #[tokio::test]
    async fn render_errors_are_permanent() {
        let err = run_block(
            "text.template",
            json!({"template": "{{ user.name.first }}"}),
            inputs([("user", Value::from_json(json!({"id": 1})))]),
        )
        .await
        .unwrap_err();
        assert!(!err.is_retryable());
        assert!(
            err.message
                .starts_with("the template did not render: line 1: undefined value"),
            "{}",
            err.message
        );
        // A missing attribute is fine in a condition.
        let out = run_block(
            "text.template",
            json!({"template": "{% if user.nick %}{{ user.nick }}{% else %}anon{% endif %}"}),
            inputs([("user", Value::from_json(json!({"id": 1})))]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("text"), Some(&Value::from("anon")));
    }
}
