//! The checks of a case: on one output (`equals`, `contains`, `regex`, `json_schema`,
//! `number`, `llm_judge`) and on the run (`status`, `max_cost_usd`, `max_duration_ms`,
//! `tool_called`).

use agentloom_core::Value;
use serde::Serialize;

/// A check on one output.
#[derive(Clone, Debug)]
pub enum Check {
    Equals(Value),
    Contains(String),
    Regex(regex::Regex),
    JsonSchema(serde_json::Value),
    Number { min: Option<f64>, max: Option<f64> },
    LlmJudge(JudgeSpec),
}

impl PartialEq for Check {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Check::Equals(a), Check::Equals(b)) => a == b,
            (Check::Contains(a), Check::Contains(b)) => a == b,
            (Check::Regex(a), Check::Regex(b)) => a.as_str() == b.as_str(),
            (Check::JsonSchema(a), Check::JsonSchema(b)) => a == b,
            (Check::Number { min, max }, Check::Number { min: m, max: x }) => min == m && max == x,
            (Check::LlmJudge(a), Check::LlmJudge(b)) => a == b,
            _ => false,
        }
    }
}

/// How to ask a model whether an output meets `criteria`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JudgeSpec {
    pub criteria: String,
    /// `openai`, `anthropic`… as the `llm.chat` block takes them.
    pub provider: Option<String>,
    pub model: Option<String>,
    pub credential: Option<String>,
    pub base_url: Option<String>,
}

/// Checks on the run as a whole (`"run"` in `expect`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunChecks {
    pub status: Option<String>,
    pub max_cost_usd: Option<f64>,
    pub max_duration_ms: Option<u64>,
    /// Tools an agent of the run must have called.
    pub tool_called: Vec<String>,
}

/// What one check found.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct CheckResult {
    /// The output checked, or `run`.
    pub output: String,
    /// The check's name (`equals`, `tool_called`…).
    pub check: String,
    pub passed: bool,
    /// Why it failed, or what was found (a judge's reason).
    pub detail: String,
}

/// What a run did, for the run checks.
#[derive(Clone, Debug, Default)]
pub struct RunFacts {
    pub status: String,
    pub cost_usd: f64,
    pub duration_ms: u64,
    pub tools_called: Vec<String>,
}

type FieldError = (String, String);

/// The checks an output can have.
const CHECK_NAMES: [&str; 6] = [
    "equals",
    "contains",
    "regex",
    "json_schema",
    "number",
    "llm_judge",
];

/// The checks a run can have (`expect.run`).
const RUN_CHECK_NAMES: [&str; 4] = ["status", "max_cost_usd", "max_duration_ms", "tool_called"];

/// The edit distance between `a` and `b` (insertions, deletions, substitutions).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `did you mean `x`? ` for the name of `names` closest to `word` (an edit distance of 2
/// at most), else nothing.
pub(super) fn did_you_mean(word: &str, names: &[&str]) -> String {
    let lower = word.to_lowercase();
    names
        .iter()
        .map(|name| (edit_distance(&lower, name), *name))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map_or_else(String::new, |(_, name)| format!("did you mean `{name}`? "))
}

impl Check {
    pub fn name(&self) -> &'static str {
        match self {
            Check::Equals(_) => "equals",
            Check::Contains(_) => "contains",
            Check::Regex(_) => "regex",
            Check::JsonSchema(_) => "json_schema",
            Check::Number { .. } => "number",
            Check::LlmJudge(_) => "llm_judge",
        }
    }

    /// The checks `spec` asks of output `output`: an object of check names (one or more),
    /// else a plain value (text, number, list…) the output must equal. An object names
    /// checks only: a literal object the output must equal is written
    /// `{"equals": {...}}`. Errors name the field.
    pub fn parse(output: &str, spec: &serde_json::Value) -> Result<Vec<Check>, FieldError> {
        let field = |name: &str| format!("expect.{output}.{name}");
        let serde_json::Value::Object(map) = spec else {
            return Ok(vec![Check::Equals(Value::from_json(spec.clone()))]);
        };
        if map.is_empty() {
            return Err((
                format!("expect.{output}"),
                format!(
                    "names no check; the checks are {} (an empty object the output must \
                     equal is written {{\"equals\": {{}}}})",
                    CHECK_NAMES.join(", ")
                ),
            ));
        }
        if let Some(unknown) = map.keys().find(|k| !CHECK_NAMES.contains(&k.as_str())) {
            return Err((
                field(unknown),
                format!(
                    "unknown check; {}the checks are {} (an object the output must equal \
                     is written {{\"equals\": {{...}}}})",
                    did_you_mean(unknown, &CHECK_NAMES),
                    CHECK_NAMES.join(", ")
                ),
            ));
        }
        let mut checks = Vec::new();
        for (name, arg) in map {
            let check = match name.as_str() {
                "equals" => Check::Equals(Value::from_json(arg.clone())),
                "contains" => Check::Contains(
                    arg.as_str()
                        .ok_or_else(|| (field(name), "must be a text".to_owned()))?
                        .to_owned(),
                ),
                "regex" => {
                    let pattern = arg
                        .as_str()
                        .ok_or_else(|| (field(name), "must be a text".to_owned()))?;
                    Check::Regex(regex::Regex::new(pattern).map_err(|e| {
                        // The parser's message ends with its one-line reason.
                        let text = e.to_string();
                        let reason = text.lines().last().unwrap_or_default().trim();
                        let reason = reason.strip_prefix("error: ").unwrap_or(reason);
                        (field(name), format!("invalid regex: {reason}"))
                    })?)
                }
                "json_schema" => {
                    jsonschema::validator_for(arg)
                        .map_err(|e| (field(name), format!("invalid JSON Schema: {e}")))?;
                    Check::JsonSchema(arg.clone())
                }
                "number" => {
                    let bound = |key: &str| -> Result<Option<f64>, FieldError> {
                        match arg.get(key) {
                            None | Some(serde_json::Value::Null) => Ok(None),
                            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                                (
                                    format!("{}.{key}", field(name)),
                                    "must be a number".to_owned(),
                                )
                            }),
                        }
                    };
                    if !arg.is_object() {
                        return Err((
                            field(name),
                            "must be an object with `min` and/or `max`".to_owned(),
                        ));
                    }
                    Check::Number {
                        min: bound("min")?,
                        max: bound("max")?,
                    }
                }
                "llm_judge" => Check::LlmJudge(parse_judge(arg, &field(name))?),
                other => {
                    return Err((
                        field(other),
                        format!("unknown check; the checks are {}", CHECK_NAMES.join(", ")),
                    ));
                }
            };
            checks.push(check);
        }
        Ok(checks)
    }

    /// Runs the check on `value` (`None`: the run did not produce the output). An
    /// `llm_judge` is not decided here: see [`crate::eval`]'s judge.
    pub fn evaluate(&self, output: &str, value: Option<&Value>) -> CheckResult {
        let result = |passed: bool, detail: String| CheckResult {
            output: output.to_owned(),
            check: self.name().to_owned(),
            passed,
            detail,
        };
        let Some(value) = value else {
            return result(false, format!("the run has no output `{output}`"));
        };
        let text = value.to_text();
        match self {
            Check::Equals(expected) => {
                let equal = value == expected
                    || value.to_json() == expected.to_json()
                    || matches!(expected, Value::Text(t) if **t == text);
                result(
                    equal,
                    if equal {
                        String::new()
                    } else {
                        format!("expected {}, got {}", shown(expected), shown(value))
                    },
                )
            }
            Check::Contains(part) => {
                let found = text.contains(part.as_str());
                result(
                    found,
                    if found {
                        String::new()
                    } else {
                        format!("{} does not contain {part:?}", shown(value))
                    },
                )
            }
            Check::Regex(regex) => {
                let found = regex.is_match(&text);
                result(
                    found,
                    if found {
                        String::new()
                    } else {
                        format!("{} does not match /{}/", shown(value), regex.as_str())
                    },
                )
            }
            Check::JsonSchema(schema) => {
                let json = match value {
                    // Text that holds JSON is checked as that JSON.
                    Value::Text(t) => serde_json::from_str(t).unwrap_or_else(|_| value.to_json()),
                    other => other.to_json(),
                };
                match jsonschema::validator_for(schema) {
                    Ok(validator) => {
                        let errors: Vec<String> = validator
                            .iter_errors(&json)
                            .take(3)
                            .map(|e| format!("{} at `{}`", e, e.instance_path()))
                            .collect();
                        result(errors.is_empty(), errors.join("; "))
                    }
                    Err(e) => result(false, format!("invalid JSON Schema: {e}")),
                }
            }
            Check::Number { min, max } => {
                let number = match value {
                    #[allow(clippy::cast_precision_loss, reason = "compared with a bound")]
                    Value::Integer(i) => Some(*i as f64),
                    Value::Number(n) => Some(*n),
                    _ => text.trim().parse::<f64>().ok(),
                };
                match number {
                    None => result(false, format!("{} is not a number", shown(value))),
                    Some(n) if min.is_some_and(|m| n < m) => result(
                        false,
                        format!("{n} is below the minimum {}", min.unwrap_or_default()),
                    ),
                    Some(n) if max.is_some_and(|m| n > m) => result(
                        false,
                        format!("{n} is above the maximum {}", max.unwrap_or_default()),
                    ),
                    Some(_) => result(true, String::new()),
                }
            }
            Check::LlmJudge(_) => result(false, "the judge was not asked".to_owned()),
        }
    }
}

/// A value in a failure's reason: as JSON (texts quoted), clipped.
fn shown(value: &Value) -> String {
    agentloom_core::clip_chars(&value.to_json().to_string(), 200)
}

fn parse_judge(arg: &serde_json::Value, field: &str) -> Result<JudgeSpec, FieldError> {
    let text = |key: &str| -> Result<Option<String>, FieldError> {
        match arg.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err((format!("{field}.{key}"), "must be a text".to_owned())),
        }
    };
    let spec = match arg {
        serde_json::Value::String(criteria) => JudgeSpec {
            criteria: criteria.clone(),
            provider: None,
            model: None,
            credential: None,
            base_url: None,
        },
        serde_json::Value::Object(map) => {
            for key in map.keys() {
                if !matches!(
                    key.as_str(),
                    "criteria" | "provider" | "model" | "credential" | "base_url"
                ) {
                    return Err((
                        format!("{field}.{key}"),
                        "unknown field; a judge has criteria, provider, model, credential and base_url".to_owned(),
                    ));
                }
            }
            JudgeSpec {
                criteria: text("criteria")?.unwrap_or_default(),
                provider: text("provider")?,
                model: text("model")?,
                credential: text("credential")?,
                base_url: text("base_url")?,
            }
        }
        _ => {
            return Err((
                field.to_owned(),
                "must be an object with `criteria` (and provider, model, credential)".to_owned(),
            ));
        }
    };
    if spec.criteria.trim().is_empty() {
        return Err((format!("{field}.criteria"), "is required".to_owned()));
    }
    Ok(spec)
}

impl RunChecks {
    /// Reads `expect.run`: an object of run checks (one or more), or `"completes"`, the
    /// same as `{"status": "completed"}`: completing is the check.
    pub fn parse(spec: &serde_json::Value) -> Result<RunChecks, FieldError> {
        let what = "must be \"completes\" or an object of run checks: status, max_cost_usd, \
                    max_duration_ms, tool_called";
        let map = match spec {
            serde_json::Value::String(word) if word == "completes" => {
                return Ok(RunChecks::completes());
            }
            serde_json::Value::Object(map) if map.is_empty() => {
                return Err(("expect.run".to_owned(), format!("names no check; {what}")));
            }
            serde_json::Value::Object(map) => map,
            _ => return Err(("expect.run".to_owned(), what.to_owned())),
        };
        let mut checks = RunChecks::default();
        for (key, value) in map {
            let field = format!("expect.run.{key}");
            match key.as_str() {
                "status" => {
                    let status = value
                        .as_str()
                        .filter(|s| matches!(*s, "completed" | "failed" | "cancelled" | "waiting"))
                        .ok_or_else(|| {
                            (
                                field,
                                "must be completed, failed, cancelled or waiting".to_owned(),
                            )
                        })?;
                    checks.status = Some(status.to_owned());
                }
                "max_cost_usd" => {
                    checks.max_cost_usd = Some(
                        value
                            .as_f64()
                            .ok_or_else(|| (field, "must be a number".to_owned()))?,
                    );
                }
                "max_duration_ms" => {
                    checks.max_duration_ms = Some(
                        value
                            .as_u64()
                            .ok_or_else(|| (field, "must be a whole number".to_owned()))?,
                    );
                }
                "tool_called" => {
                    checks.tool_called = match value {
                        serde_json::Value::String(tool) => vec![tool.clone()],
                        serde_json::Value::Array(tools) => tools
                            .iter()
                            .map(|t| t.as_str().map(str::to_owned))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| (field.clone(), "must be texts".to_owned()))?,
                        _ => return Err((field, "must be a tool name or a list".to_owned())),
                    };
                }
                _ => {
                    return Err((
                        field,
                        format!(
                            "unknown run check; {}they are {}",
                            did_you_mean(key, &RUN_CHECK_NAMES),
                            RUN_CHECK_NAMES.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(checks)
    }

    /// The run must complete: `"run": "completes"`.
    pub fn completes() -> RunChecks {
        RunChecks {
            status: Some("completed".to_owned()),
            ..RunChecks::default()
        }
    }

    /// Whether any run check is asked for.
    pub fn is_empty(&self) -> bool {
        *self == RunChecks::default()
    }

    /// Runs the run checks on what the run did.
    pub fn evaluate(&self, facts: &RunFacts) -> Vec<CheckResult> {
        let result = |check: &str, passed: bool, detail: String| CheckResult {
            output: "run".to_owned(),
            check: check.to_owned(),
            passed,
            detail,
        };
        let mut results = Vec::new();
        if let Some(status) = &self.status {
            let passed = *status == facts.status;
            results.push(result(
                "status",
                passed,
                if passed {
                    String::new()
                } else {
                    format!("the run {}, not {status}", facts.status)
                },
            ));
        }
        if let Some(max) = self.max_cost_usd {
            let passed = facts.cost_usd <= max;
            results.push(result(
                "max_cost_usd",
                passed,
                if passed {
                    String::new()
                } else {
                    format!("cost ${:.6}, over ${max}", facts.cost_usd)
                },
            ));
        }
        if let Some(max) = self.max_duration_ms {
            let passed = facts.duration_ms <= max;
            results.push(result(
                "max_duration_ms",
                passed,
                if passed {
                    String::new()
                } else {
                    format!("took {} ms, over {max} ms", facts.duration_ms)
                },
            ));
        }
        for tool in &self.tool_called {
            let passed = facts.tools_called.iter().any(|t| t == tool);
            results.push(result(
                "tool_called",
                passed,
                if passed {
                    String::new()
                } else if facts.tools_called.is_empty() {
                    format!("`{tool}` was not called; no tool was")
                } else {
                    format!(
                        "`{tool}` was not called; these were: {}",
                        facts.tools_called.join(", ")
                    )
                },
            ));
        }
        results
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;
    use serde_json::json;

    fn check(spec: serde_json::Value, value: Value) -> CheckResult {
        Check::parse("out", &spec).unwrap()[0].evaluate("out", Some(&value))
    }

    #[test]
    fn output_checks_pass_and_fail_with_a_reason() {
        assert!(check(json!("Hello, Ada!"), Value::from("Hello, Ada!")).passed);
        let failed = check(json!("Hello, Ada!"), Value::from("Hello, Bob!"));
        assert!(
            !failed.passed && failed.detail.contains("expected"),
            "{failed:?}"
        );
        assert!(check(json!({"contains": "Ada"}), Value::from("Hi Ada")).passed);
        assert!(!check(json!({"regex": "^\\d+$"}), Value::from("12a")).passed);
        assert!(check(json!({"number": {"min": 1, "max": 3}}), Value::from("2.5")).passed);
        assert!(!check(json!({"number": {"max": 3}}), Value::Integer(4)).passed);
        let schema = json!({"json_schema": {"type": "object", "required": ["a"]}});
        assert!(check(schema.clone(), Value::from("{\"a\": 1}")).passed);
        assert!(!check(schema, Value::from("{\"b\": 1}")).passed);
        let missing = Check::Contains("x".into()).evaluate("nope", None);
        assert!(!missing.passed && missing.detail.contains("no output `nope`"));
    }

    #[test]
    fn run_checks_read_status_cost_time_and_tools() {
        let checks = RunChecks::parse(&json!({"status": "completed", "max_cost_usd": 0.01,
            "max_duration_ms": 100, "tool_called": "http_get"}))
        .unwrap();
        let facts = RunFacts {
            status: "completed".into(),
            cost_usd: 0.02,
            duration_ms: 50,
            tools_called: vec!["read_file".into()],
        };
        let results = checks.evaluate(&facts);
        let passed: Vec<bool> = results.iter().map(|r| r.passed).collect();
        assert_eq!(passed, [true, false, true, false]);
        assert!(results[3].detail.contains("read_file"));
    }
}
