//! `llm.condition`: a language model picks one of named branches; only that branch's
//! output is produced, so the others are skipped (as with `control.branch`).

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::common::{
    LlmSettings, Meter, PromptTemplate, connection_fields, retry_feedback, tuning_fields,
};
use super::provider::complete;
use super::types::{Message, Role};

const RESERVED: [&str; 3] = ["value", "base_url", "model"];
const DEFAULT_MAX_ATTEMPTS: u64 = 2;
const MAX_BRANCHES: usize = 20;

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(LlmCondition::new())]
}

struct LlmCondition {
    meta: BlockMeta,
}

impl LlmCondition {
    fn new() -> Self {
        let meta = BlockMeta::new(
            "llm.condition",
            "LLM condition",
            "AI",
            "Lets a language model pick one of several named branches; only that branch's output is produced and the others are skipped.",
        );
        let meta = connection_fields(meta)
            .field(ConfigField::template("prompt", "Question").required().help(
                "What the model decides, in Jinja syntax, e.g. \"Is this email a complaint? {{ email }}\". Every variable becomes an input.",
            ))
            .field(
                ConfigField::json("branches", "Branches")
                    .default_value(serde_json::json!(["yes", "no"]))
                    .help("The names the model chooses from, as a JSON list, e.g. [\"bug\", \"feature\", \"question\"]; each becomes an output."),
            )
            .field(
                ConfigField::integer("max_attempts", "Max attempts", Some(1), Some(10))
                    .default_value(serde_json::json!(DEFAULT_MAX_ATTEMPTS))
                    .help("How many answers to try when the model answers with something that is not a branch name. When all fail, the node's retry policy (if any) runs it again, telling the model why."),
            );
        Self {
            meta: tuning_fields(meta, false),
        }
    }
}

fn read_branches(config: &Config) -> Result<Vec<String>, ConfigError> {
    let fail = |message: String| ConfigError::new("branches", message);
    let names: Vec<String> = match ConfigReader(config).get("branches") {
        None => vec!["yes".to_owned(), "no".to_owned()],
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(|s| s.trim().to_owned())
                    .ok_or_else(|| fail(format!("every branch must be a name (text), got {item}")))
            })
            .collect::<Result<_, _>>()?,
        Some(serde_json::Value::String(text)) => {
            text.split(',').map(|s| s.trim().to_owned()).collect()
        }
        Some(other) => return Err(fail(format!("must be a list of names, got {other}"))),
    };
    if names.len() < 2 {
        return Err(fail("needs at least two branches".to_owned()));
    }
    if names.len() > MAX_BRANCHES {
        return Err(fail(format!("may have at most {MAX_BRANCHES} branches")));
    }
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(fail(format!("branch {i} has an empty name")));
        }
        if !name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            return Err(fail(format!(
                "`{name}` may only use letters, digits, `_` and `-` (it names an output)"
            )));
        }
        if matches!(name.as_str(), "choice" | "error") {
            return Err(fail(format!(
                "`{name}` is the name of one of the block's own outputs; rename it"
            )));
        }
        if names[..i]
            .iter()
            .any(|other| other.eq_ignore_ascii_case(name))
        {
            return Err(fail(format!("`{name}` is listed twice")));
        }
    }
    Ok(names)
}

impl Block for LlmCondition {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let settings = LlmSettings::from_config(config, false)?;
        let prompt =
            PromptTemplate::from_config(config, "prompt", &RESERVED)?.ok_or_else(|| {
                ConfigError::new("prompt", "is required: the question the model answers")
            })?;
        let branches = read_branches(config)?;
        let max_attempts = ConfigReader(config).u64_or("max_attempts", DEFAULT_MAX_ATTEMPTS)?;
        if !(1..=10).contains(&max_attempts) {
            return Err(ConfigError::new("max_attempts", "must be between 1 and 10"));
        }
        let mut inputs: Vec<PortSpec> = prompt.ports().collect();
        inputs.push(PortSpec::new("value", ValueType::Any).optional().describe(
            "Sent on the chosen branch; the branch name is sent when this is not wired.",
        ));
        inputs.extend(settings.ports());
        let mut outputs: Vec<PortSpec> = branches
            .iter()
            .map(|name| {
                PortSpec::new(name.clone(), ValueType::Any)
                    .describe("Taken when the model picks this branch.")
            })
            .collect();
        outputs.push(
            PortSpec::new("choice", ValueType::Text)
                .describe("The name of the branch the model picked."),
        );
        Ok(Arc::new(ConditionNode {
            settings,
            prompt,
            branches,
            max_attempts: u32::try_from(max_attempts).unwrap_or(10),
            ports: Ports::new(inputs, outputs),
        }))
    }
}

struct ConditionNode {
    settings: LlmSettings,
    prompt: PromptTemplate,
    branches: Vec<String>,
    max_attempts: u32,
    ports: Ports,
}

impl ConditionNode {
    /// The branch an answer names: the whole answer, or the only branch name in it.
    fn pick(&self, answer: &str) -> Option<&str> {
        let normalized: String = answer
            .trim()
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase();
        if let Some(exact) = self
            .branches
            .iter()
            .find(|b| b.to_lowercase() == normalized)
        {
            return Some(exact);
        }
        let words: Vec<&str> = normalized
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
            .filter(|w| !w.is_empty())
            .collect();
        let mut found = self
            .branches
            .iter()
            .filter(|b| words.contains(&b.to_lowercase().as_str()));
        match (found.next(), found.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }
}

#[async_trait]
impl NodeImpl for ConditionNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let endpoint = self.settings.endpoint(&mut inputs)?;
        let model = self.settings.model(&mut inputs)?;
        let question = self.prompt.render(&mut inputs, ctx).await?;
        let value = inputs.take_optional("value");
        let options = self.branches.join(", ");
        let instruction = format!(
            "Decide, and answer with exactly one of these options and nothing else: {options}."
        );
        let mut request = self.settings.request(&model);
        request.system = Some(match &self.settings.system {
            Some(system) => format!("{system}\n\n{instruction}"),
            None => instruction,
        });
        request.messages = vec![Message::new(Role::User, question)];
        request.messages.extend(retry_feedback(
            ctx,
            &endpoint,
            &format!("Answer with exactly one of: {options}."),
        ));
        let mut meter = Meter::new(&self.settings, &model)?;
        let mut last_answer = String::new();
        for _ in 0..self.max_attempts {
            let reserved = meter.reserve(ctx, &request)?;
            let reply = complete(&endpoint, &request, self.settings.options, ctx, "choice").await?;
            meter.record(ctx, &request, &reply, reserved);
            if let Some(branch) = self.pick(&reply.text) {
                let carried = value.unwrap_or_else(|| Value::text(branch));
                return Ok(ValueMap::from([
                    (branch.to_owned(), carried),
                    ("choice".to_owned(), Value::text(branch.to_owned())),
                ]));
            }
            request
                .messages
                .push(Message::new(Role::Assistant, reply.text.clone()));
            request.messages.push(Message::new(
                Role::User,
                format!("That is not one of the options. Answer with exactly one of: {options}."),
            ));
            last_answer = reply.text;
        }
        let shown: String = last_answer.trim().chars().take(200).collect();
        // Transient: another answer may name a branch, so the node's retry policy applies.
        Err(BlockError::transient(format!(
            "the model did not pick one of the branches ({options}) in {} attempt{}; it answered `{shown}`",
            self.max_attempts,
            if self.max_attempts == 1 { "" } else { "s" },
        ))
        .with_data(Value::object(BTreeMap::from([
            ("answer".to_owned(), Value::text(last_answer)),
            ("usage".to_owned(), meter.to_value()),
        ]))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{config_error, instantiate};
    use serde_json::json;

    #[test]
    fn branches_become_outputs_and_are_checked() {
        let node = instantiate(
            "llm.condition",
            json!({"model": "m", "prompt": "Is {{ mail }} a complaint?", "branches": ["complaint", "praise", "other"]}),
        )
        .unwrap();
        let outputs: Vec<&str> = node
            .ports()
            .outputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(outputs, ["complaint", "praise", "other", "choice"]);
        let inputs: Vec<&str> = node
            .ports()
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(inputs, ["mail", "value", "base_url"]);
        let base = json!({"model": "m", "prompt": "q"});
        let with = |branches: serde_json::Value| {
            let mut c = base.clone();
            c["branches"] = branches;
            config_error("llm.condition", c).unwrap()
        };
        assert!(with(json!(["only"])).contains("at least two"));
        assert!(with(json!(["a", "A"])).contains("`A` is listed twice"));
        assert!(with(json!(["a", "choice"])).contains("own outputs"));
        assert!(with(json!(["a", "b c"])).contains("may only use"));
        assert!(with(json!([1, 2])).contains("must be a name"));
        assert!(
            config_error("llm.condition", json!({"model": "m"}))
                .unwrap()
                .starts_with("config `prompt`: is required")
        );
        assert!(
            config_error(
                "llm.condition",
                json!({"model": "m", "prompt": "{{ value }}"})
            )
            .unwrap()
            .contains("rename it")
        );
    }

    #[test]
    fn answers_are_read_leniently_but_not_ambiguously() {
        let node = ConditionNode {
            settings: LlmSettings::from_config(
                &json!({"model": "m"}).as_object().unwrap().clone().into(),
                false,
            )
            .unwrap(),
            prompt: PromptTemplate::from_config(
                &json!({"prompt": "q"}).as_object().unwrap().clone().into(),
                "prompt",
                &[],
            )
            .unwrap()
            .unwrap(),
            branches: vec!["yes".into(), "no".into(), "needs-info".into()],
            max_attempts: 1,
            ports: Ports::default(),
        };
        assert_eq!(node.pick("yes"), Some("yes"));
        assert_eq!(node.pick("  \"No.\" "), Some("no"));
        assert_eq!(node.pick("**YES**"), Some("yes"));
        assert_eq!(
            node.pick("I think the answer is needs-info here"),
            Some("needs-info")
        );
        assert_eq!(node.pick("yes or no"), None);
        assert_eq!(node.pick("maybe"), None);
    }
}
