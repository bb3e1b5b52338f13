//! The built-in tool `search_knowledge`: on when a search node (`knowledge.search`) is
//! wired by its `tool` output to the agent's `knowledge` input. The tool calls each wired
//! node with the model's query through the run (so its embedding call, usage and events are
//! the node's own) and quotes the hits it returns with their sources: path and position.

use std::fmt::Write as _;

use agentloom_core::{BlockError, ErrorClass, RunCtx, Value, clip_chars};

use super::schema::wired_tools;

/// The most characters of one passage shown to the model.
const MAX_PASSAGE_CHARS: usize = 1_500;
/// Passages per collection when the model does not say.
const DEFAULT_HITS: u64 = 5;
const MAX_HITS: u64 = 20;

/// A node wired to the agent's `knowledge` input.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct KnowledgeSource {
    node: String,
}

/// The sources wired to the `knowledge` input (tool descriptors, as on `tools`).
pub(crate) fn knowledge_sources(value: &Value) -> Result<Vec<KnowledgeSource>, BlockError> {
    let tools = wired_tools(value).map_err(|e| {
        BlockError::input("knowledge", e.message.replacen("input `tools`: ", "", 1))
    })?;
    Ok(tools
        .into_iter()
        .filter_map(|tool| match tool.kind {
            super::schema::ToolKind::Wired { node } => Some(KnowledgeSource { node }),
            super::schema::ToolKind::Builtin(_) => None,
        })
        .collect())
}

/// `search_knowledge`: the best passages of every wired collection for `query`, each quoted
/// with its source; or the problem, worded for the model.
pub(crate) async fn search_knowledge(
    ctx: &dyn RunCtx,
    sources: &[KnowledgeSource],
    query: &str,
    k: Option<u64>,
) -> Result<String, String> {
    if query.trim().is_empty() {
        return Err("give a `query`: what to look for".to_owned());
    }
    if sources.is_empty() {
        return Err("no knowledge collection is wired to this agent".to_owned());
    }
    let k = usize::try_from(k.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS)).unwrap_or(5);
    let mut answer = String::new();
    let mut number = 0;
    for source in sources {
        let outputs = match ctx
            .call_tool(
                &source.node,
                Value::from_json(serde_json::json!({"query": query})),
            )
            .await
        {
            Ok(outputs) => outputs,
            Err(err) if err.class == ErrorClass::Cancelled => {
                return Err("the run was stopped".to_owned());
            }
            Err(err) => {
                let _ = writeln!(
                    answer,
                    "(`{}` could not be searched: {})",
                    source.node, err.message
                );
                continue;
            }
        };
        let Some(hits) = outputs.get("hits").and_then(Value::as_list) else {
            let _ = writeln!(
                answer,
                "(`{}` gave no `hits`: wire a knowledge.search node to `knowledge`)",
                source.node
            );
            continue;
        };
        for hit in hits.iter().take(k) {
            number += 1;
            quote_hit(&mut answer, number, &hit.to_json());
        }
    }
    if number == 0 {
        if answer.is_empty() {
            return Ok(format!("no passage matches `{query}`"));
        }
        return Err(answer.trim_end().to_owned());
    }
    answer.push_str("Quote the source [n] and path of each passage you use.");
    Ok(answer)
}

/// One hit as `[n] path (bytes start–end, score s):` and its text.
fn quote_hit(answer: &mut String, number: usize, hit: &serde_json::Value) {
    let text = |field: &str| {
        hit.get(field)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
    };
    let position = match (
        hit.get("start").and_then(serde_json::Value::as_u64),
        hit.get("end").and_then(serde_json::Value::as_u64),
    ) {
        (Some(start), Some(end)) => format!("bytes {start}–{end}"),
        _ => "position unknown".to_owned(),
    };
    let score = hit
        .get("score")
        .and_then(serde_json::Value::as_f64)
        .map_or_else(String::new, |s| format!(", score {s:.3}"));
    let _ = writeln!(
        answer,
        "[{number}] {} ({position}{score}):\n{}\n",
        text("source"),
        clip_chars(text("text").trim(), MAX_PASSAGE_CHARS)
    );
}
