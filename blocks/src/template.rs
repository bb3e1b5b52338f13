//! `text.template`: renders a minijinja template; its variables become input ports.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

mod plain;

use crate::jinja::SharedTemplate;
use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(TextTemplate::new())]
}

struct TextTemplate {
    meta: BlockMeta,
    /// The node made last, by template source. A node holds nothing but its template and
    /// ports, so nodes with the same template (a chain, a copied node) share one instead of
    /// each carrying its own port list.
    last_made: Mutex<Option<(Arc<str>, Arc<TemplateNode>)>>,
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
            last_made: Mutex::new(None),
        }
    }

    fn remembered(&self) -> MutexGuard<'_, Option<(Arc<str>, Arc<TemplateNode>)>> {
        self.last_made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Block for TextTemplate {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let source = ConfigReader(config)
            .str("template")?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ConfigError::new("template", "is required"))?;
        if let Some((made_from, node)) = self.remembered().as_ref()
            && **made_from == *source
        {
            return Ok(Arc::clone(node) as Arc<dyn NodeImpl>);
        }
        // Parsed without the lock: other nodes are made meanwhile.
        let mut template =
            SharedTemplate::parse(source).map_err(|why| ConfigError::new("template", why))?;
        let plain = plain::PlainTemplate::of(template.source(), template.variables());
        // The names live on as the input ports, not twice.
        let inputs = template
            .take_variables()
            .into_iter()
            .map(|name| PortSpec::new(name, ValueType::Any))
            .collect();
        let ports = Ports::new(
            inputs,
            vec![PortSpec::new("text", ValueType::Text).describe("The rendered text.")],
        );
        let made_from = Arc::clone(template.source());
        let node = Arc::new(TemplateNode {
            template,
            plain,
            ports,
        });
        *self.remembered() = Some((made_from, Arc::clone(&node)));
        Ok(node)
    }
}

struct TemplateNode {
    template: SharedTemplate,
    /// The template joined piece by piece, when it only puts texts between literal text.
    plain: Option<plain::PlainTemplate>,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for TemplateNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let inputs = match self.plain.as_ref() {
            Some(plain) if !ctx.is_cancelled() => match plain.render_owned(inputs) {
                Ok(text) => return Ok(agentloom_core::outputs([("text", text.into())])),
                Err(inputs) => inputs,
            },
            _ => inputs,
        };
        // The output is mostly the inputs' texts and the template's own.
        let expected = self.template.source().len()
            + inputs
                .values()
                .filter_map(agentloom_core::Value::as_str)
                .map(str::len)
                .sum::<usize>();
        let text = self
            .template
            .render_sized(inputs, expected, ctx, "the template did not render")
            .await?;
        Ok(agentloom_core::outputs([("text", text.into())]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, config_error, inputs, instantiate, run_block, run_block_with};
    use agentloom_core::BlockCatalog as _;
    use agentloom_core::Value;
    use agentloom_core::ValueMap;
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
    async fn a_template_ending_like_a_file_name_is_not_html_escaped() {
        // Joined piece by piece, and rendered by minijinja (a filter), alike.
        for (template, expected) in [
            (
                "{{ s }} saved as report.html",
                "a & <b> saved as report.html",
            ),
            ("{{ s | trim }} in page.xml", "a & <b> in page.xml"),
        ] {
            let out = run_block(
                "text.template",
                json!({"template": template}),
                inputs([("s", Value::from("a & <b>"))]),
            )
            .await
            .unwrap();
            assert_eq!(out.get("text"), Some(&Value::from(expected)), "{template}");
        }
    }

    #[tokio::test]
    async fn nodes_with_the_same_template_share_one_and_others_get_their_own_ports() {
        let catalog = crate::Registry::builtin();
        let block = catalog.block("text.template").unwrap();
        let make = |template: &str| {
            let config =
                agentloom_core::Config::from_iter([("template".to_owned(), json!(template))]);
            block.instantiate(&config, &catalog.config_ctx()).unwrap()
        };
        let input_names = |node: &Arc<dyn NodeImpl>| -> Vec<String> {
            node.ports().inputs.iter().map(|p| p.name.clone()).collect()
        };
        let first = make("{{ a }}");
        let same = make("{{ a }}");
        assert!(Arc::ptr_eq(&first, &same), "one node for one template");
        let other = make("{{ b }} {{ c }}");
        assert_eq!(input_names(&other), ["b", "c"]);
        let again = make("{{ a }}");
        assert_eq!(input_names(&again), ["a"]);
        assert!(!Arc::ptr_eq(&other, &again));
        // A shared node renders each node's own inputs.
        let ctx = TestCtx::new();
        for (node, value) in [(&first, "x"), (&same, "y")] {
            let out = node
                .run(inputs([("a", Value::from(value))]), &ctx)
                .await
                .unwrap();
            assert_eq!(out.get("text"), Some(&Value::from(value)));
        }
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
    async fn a_template_cannot_include_another_one_rendered_before() {
        let rendered = run_block(
            "text.template",
            json!({"template": "secret {{ a }}"}),
            inputs([("a", Value::from("x"))]),
        )
        .await
        .unwrap();
        assert_eq!(rendered.get("text"), Some(&Value::from("secret x")));
        for include in [
            "{% include 'secret {{ a }}' %}",
            "{% include '<string>' %}",
            "{% include '' %}",
        ] {
            let err = run_block(
                "text.template",
                json!({"template": include}),
                inputs([("a", Value::from("y"))]),
            )
            .await
            .unwrap_err();
            assert!(
                err.message.contains("template not found"),
                "{}",
                err.message
            );
        }
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

    #[tokio::test]
    async fn runaway_output_and_endless_loops_are_stopped() {
        let err = run_block(
            "text.template",
            json!({"template": "{% for i in range(100000) %}{{ x }}{% endfor %}"}),
            inputs([("x", Value::from("y".repeat(1000)))]),
        )
        .await
        .unwrap_err();
        assert!(
            err.message
                .starts_with("the template did not render: its output passed 16 MiB"),
            "{}",
            err.message
        );
        let err = run_block(
            "text.template",
            json!({"template": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{ x }}"}),
            inputs([("x", Value::from("never"))]),
        )
        .await
        .unwrap_err();
        assert!(
            err.message
                .starts_with("the template did not render: it does too much work"),
            "{}",
            err.message
        );
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn a_cancelled_render_stops_at_its_next_output() {
        let ctx = TestCtx::new();
        ctx.cancel();
        let err = run_block_with(
            &ctx,
            "text.template",
            json!({"template": "{% for i in range(100000) %}{{ i }}{% endfor %}"}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class, agentloom_core::ErrorClass::Cancelled);
    }
}
