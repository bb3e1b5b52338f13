//! Documents and chunks as they travel on wires, and reading them back from values.
//!
//! A document is `{text, source, metadata}` (metadata: an object, e.g. `format`, `page`,
//! `row`); a chunk is `{text, source, start, end, metadata}` with `embedding` (a list of
//! numbers) once embedded. `start`/`end` are byte offsets in the document's text.

use std::collections::BTreeMap;

use agentloom_core::{BlockError, Value};
use serde_json::{Map, Value as Json};

/// A loaded document, or a piece of one (a PDF page, a CSV row).
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    pub text: String,
    pub source: String,
    /// Where `text` starts in the source's whole text (0 for a whole file).
    pub offset: usize,
    pub metadata: Map<String, Json>,
}

/// A piece of a document, maybe with its vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    pub text: String,
    pub source: String,
    pub start: usize,
    pub end: usize,
    pub metadata: Map<String, Json>,
    pub embedding: Option<Vec<f32>>,
}

pub(crate) fn document_value(document: &Document) -> Value {
    Value::object(BTreeMap::from([
        ("text".to_owned(), Value::text(document.text.clone())),
        ("source".to_owned(), Value::text(document.source.clone())),
        (
            "metadata".to_owned(),
            Value::from_json(Json::Object(document.metadata.clone())),
        ),
    ]))
}

pub(crate) fn chunk_value(chunk: &Chunk) -> Value {
    let mut fields = BTreeMap::from([
        ("text".to_owned(), Value::text(chunk.text.clone())),
        ("source".to_owned(), Value::text(chunk.source.clone())),
        ("start".to_owned(), Value::Integer(chunk.start as i64)),
        ("end".to_owned(), Value::Integer(chunk.end as i64)),
        (
            "metadata".to_owned(),
            Value::from_json(Json::Object(chunk.metadata.clone())),
        ),
    ]);
    if let Some(embedding) = &chunk.embedding {
        fields.insert(
            "embedding".to_owned(),
            Value::list(
                embedding
                    .iter()
                    .map(|x| Value::Number(f64::from(*x)))
                    .collect(),
            ),
        );
    }
    Value::object(fields)
}

pub(crate) fn chunks_value(chunks: &[Chunk]) -> Value {
    Value::list(chunks.iter().map(chunk_value).collect())
}

fn items(value: &Value) -> Vec<&Value> {
    match value {
        Value::List(items) => items.iter().collect(),
        other => vec![other],
    }
}

fn metadata_of(
    fields: &BTreeMap<String, Value>,
    port: &str,
    i: usize,
) -> Result<Map<String, Json>, BlockError> {
    match fields.get("metadata").map(Value::to_json) {
        None | Some(Json::Null) => Ok(Map::new()),
        Some(Json::Object(map)) => Ok(map),
        Some(_) => Err(BlockError::input(
            port,
            format!("item {i}: `metadata` must be an object"),
        )),
    }
}

/// Documents from a value: a list of `{text, source?, metadata?}` objects, one such object,
/// or plain text (a list of texts too).
pub(crate) fn documents_from(value: &Value, port: &str) -> Result<Vec<Document>, BlockError> {
    items(value)
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Text(text) => Ok(Document {
                text: text.to_string(),
                source: format!("text {i}"),
                offset: 0,
                metadata: Map::new(),
            }),
            Value::Object(fields) => {
                let text = fields.get("text").and_then(Value::as_str).ok_or_else(|| {
                    BlockError::input(
                        port,
                        format!("item {i}: a document needs a `text` field holding text"),
                    )
                })?;
                let source = fields
                    .get("source")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("text {i}"), str::to_owned);
                let metadata = metadata_of(fields, port, i)?;
                let offset = metadata
                    .get("offset")
                    .and_then(Json::as_u64)
                    .and_then(|o| usize::try_from(o).ok())
                    .unwrap_or(0);
                Ok(Document {
                    text: text.to_owned(),
                    source,
                    offset,
                    metadata,
                })
            }
            other => Err(BlockError::input(
                port,
                format!(
                    "item {i} is {}: give documents ({{text, source, metadata}}) or text",
                    other.kind_name()
                ),
            )),
        })
        .collect()
}

/// Chunks from a value: a list of `{text, source?, start?, end?, metadata?, embedding?}`
/// objects (one such object, or plain text, too).
pub(crate) fn chunks_from(value: &Value, port: &str) -> Result<Vec<Chunk>, BlockError> {
    items(value)
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Text(text) => Ok(Chunk {
                text: text.to_string(),
                source: format!("text {i}"),
                start: 0,
                end: text.len(),
                metadata: Map::new(),
                embedding: None,
            }),
            Value::Object(fields) => {
                let text = fields.get("text").and_then(Value::as_str).ok_or_else(|| {
                    BlockError::input(
                        port,
                        format!("item {i}: a chunk needs a `text` field holding text"),
                    )
                })?;
                let source = fields
                    .get("source")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("text {i}"), str::to_owned);
                let offset = |name: &str, default: usize| match fields.get(name) {
                    None | Some(Value::Null) => Ok(default),
                    Some(Value::Integer(n)) if *n >= 0 => {
                        Ok(usize::try_from(*n).unwrap_or(usize::MAX))
                    }
                    Some(_) => Err(BlockError::input(
                        port,
                        format!("item {i}: `{name}` must be a whole number ≥ 0"),
                    )),
                };
                let start = offset("start", 0)?;
                let end = offset("end", start + text.len())?;
                let embedding = match fields.get("embedding") {
                    None | Some(Value::Null) => None,
                    Some(Value::List(numbers)) => Some(
                        numbers
                            .iter()
                            .map(|x| match x {
                                Value::Number(n) => Some(*n as f32),
                                Value::Integer(n) => Some(*n as f32),
                                _ => None,
                            })
                            .collect::<Option<Vec<f32>>>()
                            .ok_or_else(|| {
                                BlockError::input(
                                    port,
                                    format!("item {i}: `embedding` must be a list of numbers"),
                                )
                            })?,
                    ),
                    Some(_) => {
                        return Err(BlockError::input(
                            port,
                            format!("item {i}: `embedding` must be a list of numbers"),
                        ));
                    }
                };
                Ok(Chunk {
                    text: text.to_owned(),
                    source,
                    start,
                    end,
                    metadata: metadata_of(fields, port, i)?,
                    embedding,
                })
            }
            other => Err(BlockError::input(
                port,
                format!(
                    "item {i} is {}: give chunks ({{text, source, …}}) or text",
                    other.kind_name()
                ),
            )),
        })
        .collect()
}
