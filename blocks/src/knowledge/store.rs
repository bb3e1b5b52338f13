//! A knowledge store: named collections of embedded text chunks in one SQLite file.
//!
//! Each collection records the embedding model (name and dimensions) its vectors came
//! from; a search that brings another model's vector is refused. Vectors live in a
//! `sqlite-vec` `vec0` table per collection (cosine distance), the chunks' text in one
//! FTS5 table, so a search ranks by vector, by BM25 keywords, or both fused by reciprocal
//! rank (hybrid). A document is keyed by its source within a collection and carries a
//! content hash: adding it again unchanged is a no-op, changed it replaces its chunks.
//!
//! The store is synchronous (rusqlite): callers in async code run it on the blocking pool.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension as _, params, params_from_iter};
use serde_json::{Map, Value as Json};
use sha2::{Digest as _, Sha256};

/// Candidates taken from each ranking before fusing, per result asked for.
const FUSION_CANDIDATES_PER_HIT: usize = 5;
/// At least this many candidates from each ranking, however few results are asked for.
const MIN_FUSION_CANDIDATES: usize = 50;
/// The constant of reciprocal rank fusion (Cormack et al.): 1 / (K + rank).
const RRF_K: f64 = 60.0;
/// The longest collection name accepted.
const MAX_COLLECTION_NAME_CHARS: usize = 100;
/// The most vector dimensions a collection accepts (sqlite-vec's own limit is 8192).
pub const MAX_DIMENSIONS: usize = 8192;
/// The most results one search returns.
pub const MAX_K: usize = 1000;

/// What went wrong in the store. Messages name the collection, file or source concerned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("knowledge store {path}: {message}")]
    Database { path: String, message: String },
    #[error("no collection named '{0}' in this knowledge store")]
    NoSuchCollection(String),
    #[error(
        "collection '{collection}' was embedded with model '{recorded_model}' ({recorded_dimensions} dimensions); it cannot be searched or added to with '{asked_model}' ({asked_dimensions} dimensions): use '{recorded_model}', or a new collection for the other model"
    )]
    ModelMismatch {
        collection: String,
        recorded_model: String,
        recorded_dimensions: usize,
        asked_model: String,
        asked_dimensions: usize,
    },
    #[error("{0}")]
    Invalid(String),
}

type Result<T> = std::result::Result<T, StoreError>;

/// The embedding model a collection's vectors come from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EmbeddingModel {
    /// The model's name as the embedding service knows it, e.g. `text-embedding-3-small`.
    pub name: String,
    /// The length of its vectors.
    pub dimensions: usize,
}

/// A collection as listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Collection {
    pub name: String,
    pub model: EmbeddingModel,
    pub documents: usize,
    pub chunks: usize,
    /// Bytes of chunk text held.
    pub text_bytes: u64,
}

/// A document of a collection as listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DocumentInfo {
    /// Where it came from (a workspace-relative path for loaded files).
    pub source: String,
    pub content_hash: String,
    pub chunks: usize,
    /// Bytes of chunk text held for it.
    pub text_bytes: u64,
    pub metadata: Json,
    /// Seconds since the Unix epoch when it was last added or replaced.
    pub added_at: i64,
}

/// A chunk to add: its text, vector and where it sits in its document.
#[derive(Clone, Debug, PartialEq)]
pub struct NewChunk {
    pub text: String,
    pub vector: Vec<f32>,
    /// Byte offsets of the chunk in its document's text.
    pub start: usize,
    pub end: usize,
    /// An object; searches filter on its fields.
    pub metadata: Map<String, Json>,
}

/// A document to add: every chunk of one source.
#[derive(Clone, Debug, PartialEq)]
pub struct NewDocument {
    pub source: String,
    /// Identifies the content; [`content_hash`] computes one from chunk texts.
    pub content_hash: String,
    pub metadata: Map<String, Json>,
    pub chunks: Vec<NewChunk>,
}

/// What adding a document did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddOutcome {
    /// A new source: its chunks were stored.
    Added,
    /// The source was there with another hash: its old chunks were replaced.
    Replaced,
    /// The source was there with the same hash: nothing was written.
    Unchanged,
}

/// How a search ranks chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Vector similarity and BM25 keyword rank, fused by reciprocal rank.
    #[default]
    Hybrid,
    /// Vector similarity only.
    Vector,
    /// FTS5 BM25 keyword rank only.
    Keyword,
}

/// Equality conditions on chunk metadata fields, all of which must hold. The field
/// `source` matches the document's source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter(pub Vec<(String, Json)>);

impl Filter {
    /// A filter from a JSON object of field → value; `null` or `{}` filter nothing.
    pub fn from_json(value: &Json) -> Result<Filter> {
        match value {
            Json::Null => Ok(Filter::default()),
            Json::Object(map) => {
                let mut conditions = Vec::with_capacity(map.len());
                for (key, value) in map {
                    if matches!(value, Json::Array(_) | Json::Object(_)) {
                        return Err(StoreError::Invalid(format!(
                            "filter field '{key}': compare with text, a number, true/false or null, not a list or object"
                        )));
                    }
                    conditions.push((key.clone(), value.clone()));
                }
                Ok(Filter(conditions))
            }
            other => Err(StoreError::Invalid(format!(
                "a filter is an object of field → value, not {}",
                json_kind(other)
            ))),
        }
    }
}

/// A search request: the query's vector (from the collection's model) and/or text.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The query's text, for the keyword ranking. Needed by `Hybrid` and `Keyword`.
    pub text: Option<String>,
    /// The query's embedding and the model it came from. Needed by `Hybrid` and `Vector`.
    pub vector: Option<(EmbeddingModel, Vec<f32>)>,
    pub k: usize,
    pub filter: Filter,
    pub mode: SearchMode,
}

/// One search result.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hit {
    pub source: String,
    pub text: String,
    pub start: usize,
    pub end: usize,
    pub metadata: Json,
    /// Higher is better: cosine similarity in `Vector` mode, the negated BM25 score in
    /// `Keyword` mode, the reciprocal-rank-fusion score in `Hybrid` mode.
    pub score: f64,
    /// Cosine similarity to the query vector, when the vector ranking found it.
    pub similarity: Option<f64>,
    /// 1-based rank in the vector ranking, when it found it.
    pub vector_rank: Option<usize>,
    /// 1-based rank in the keyword ranking, when it found it.
    pub keyword_rank: Option<usize>,
}

/// The hits as numbered quotes with their sources, for a prompt: `[1] source (bytes a–b):`
/// then the text.
pub fn quoted_context(hits: &[Hit]) -> String {
    let mut text = String::new();
    for (i, hit) in hits.iter().enumerate() {
        let _ = writeln!(
            text,
            "[{}] {} (bytes {}–{}):",
            i + 1,
            hit.source,
            hit.start,
            hit.end
        );
        let _ = writeln!(text, "{}\n", hit.text.trim());
    }
    text.trim_end().to_owned()
}

/// A content hash over a document's chunk texts and offsets, in order.
pub fn content_hash<'a>(chunks: impl IntoIterator<Item = (&'a str, usize, usize)>) -> String {
    let mut hasher = Sha256::new();
    for (text, start, end) in chunks {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
        hasher.update((start as u64).to_le_bytes());
        hasher.update((end as u64).to_le_bytes());
    }
    let digest = hasher.finalize();
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// An open knowledge store file.
pub struct KnowledgeStore {
    conn: Connection,
    path: PathBuf,
}

/// Registers sqlite-vec with SQLite once, for every connection opened after it.
fn register_sqlite_vec() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        #[allow(
            unsafe_code,
            reason = "sqlite-vec is a C extension: SQLite takes its entry point as a raw function pointer"
        )]
        // SAFETY: sqlite3_vec_init has the signature SQLite's auto extensions expect
        // (db, error message, API routines); it is registered once before any connection.
        unsafe {
            type EntryPoint = unsafe extern "C" fn(
                *mut rusqlite::ffi::sqlite3,
                *mut *mut std::os::raw::c_char,
                *const rusqlite::ffi::sqlite3_api_routines,
            ) -> std::os::raw::c_int;
            let entry: EntryPoint = std::mem::transmute::<*const (), EntryPoint>(
                sqlite_vec::sqlite3_vec_init as *const (),
            );
            rusqlite::ffi::sqlite3_auto_extension(Some(entry));
        }
    });
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    model TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id),
    source TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    metadata TEXT NOT NULL,
    added_at INTEGER NOT NULL,
    UNIQUE (collection_id, source)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id),
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    metadata TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_text USING fts5(text);
";

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn json_kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "true/false",
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn vector_table(collection_id: i64) -> String {
    format!("vectors_{collection_id}")
}

/// English words too common to rank by: a question's "how do I" would otherwise rank
/// every chunk that has them, and fusing that ranking would push good vector hits down.
const STOP_WORDS: [&str; 64] = [
    "a", "about", "after", "am", "an", "and", "any", "are", "as", "at", "be", "before", "by",
    "can", "could", "did", "do", "does", "for", "from", "get", "had", "has", "have", "how", "i",
    "i'm", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "should",
    "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to",
    "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you",
];

/// The FTS5 query for free text: each word (split at white space) but the common English
/// ones a quoted phrase, any of them matching, so punctuation and FTS5 operators in the text are taken literally
/// and an identifier like `ERR-7Q3X` matches as the phrase of its parts.
fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .filter(|w| {
            let bare: String = w
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '\'')
                .flat_map(char::to_lowercase)
                .collect();
            !STOP_WORDS.contains(&bare.as_str())
        })
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

/// A chunk's place in the rankings being fused.
#[derive(Default)]
struct Ranked {
    score: f64,
    similarity: Option<f64>,
    vector_rank: Option<usize>,
    keyword_rank: Option<usize>,
}

/// The FTS5 query for the identifiers in `text`: words holding both a letter and a digit
/// (`ERR-7Q3X`, `INV-2024-0042`, `a3f9c2e`), each a quoted phrase.
fn identifier_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| {
            w.chars().count() >= 3
                && w.chars().any(|c| c.is_ascii_digit())
                && w.chars().any(char::is_alphabetic)
        })
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
}

struct CollectionRow {
    id: i64,
    model: EmbeddingModel,
}

impl KnowledgeStore {
    /// Opens the store at `path`, creating the file and its tables when missing.
    pub fn open(path: &Path) -> Result<KnowledgeStore> {
        register_sqlite_vec();
        let shown = path.display().to_string();
        let fail = |e: rusqlite::Error| StoreError::Database {
            path: shown.clone(),
            message: e.to_string(),
        };
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        Ok(KnowledgeStore {
            conn,
            path: path.to_owned(),
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self, e: rusqlite::Error) -> StoreError {
        StoreError::Database {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// Every collection, by name.
    pub fn collections(&self) -> Result<Vec<Collection>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.name, c.model, c.dimensions,
                        (SELECT count(*) FROM documents d WHERE d.collection_id = c.id),
                        (SELECT count(*) FROM chunks k JOIN documents d ON k.document_id = d.id
                          WHERE d.collection_id = c.id),
                        (SELECT coalesce(sum(length(CAST(k.text AS BLOB))), 0) FROM chunks k
                          JOIN documents d ON k.document_id = d.id WHERE d.collection_id = c.id)
                   FROM collections c ORDER BY c.name",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Collection {
                    name: r.get(0)?,
                    model: EmbeddingModel {
                        name: r.get(1)?,
                        dimensions: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                    },
                    documents: r.get::<_, i64>(3)?.try_into().unwrap_or(0),
                    chunks: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                    text_bytes: r.get::<_, i64>(5)?.try_into().unwrap_or(0),
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.db(e))
    }

    /// The collection named `name`, if there is one.
    pub fn collection(&self, name: &str) -> Result<Option<Collection>> {
        Ok(self.collections()?.into_iter().find(|c| c.name == name))
    }

    fn collection_row(&self, name: &str) -> Result<Option<CollectionRow>> {
        self.conn
            .query_row(
                "SELECT id, model, dimensions FROM collections WHERE name = ?1",
                [name],
                |r| {
                    Ok(CollectionRow {
                        id: r.get(0)?,
                        model: EmbeddingModel {
                            name: r.get(1)?,
                            dimensions: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                        },
                    })
                },
            )
            .optional()
            .map_err(|e| self.db(e))
    }

    fn existing(&self, name: &str) -> Result<CollectionRow> {
        self.collection_row(name)?
            .ok_or_else(|| StoreError::NoSuchCollection(name.to_owned()))
    }

    fn check_model(name: &str, row: &CollectionRow, asked: &EmbeddingModel) -> Result<()> {
        if row.model == *asked {
            return Ok(());
        }
        Err(StoreError::ModelMismatch {
            collection: name.to_owned(),
            recorded_model: row.model.name.clone(),
            recorded_dimensions: row.model.dimensions,
            asked_model: asked.name.clone(),
            asked_dimensions: asked.dimensions,
        })
    }

    /// Creates collection `name` for `model`'s vectors, or returns the existing one's when
    /// it records the same model (another model is refused).
    pub fn ensure_collection(&mut self, name: &str, model: &EmbeddingModel) -> Result<()> {
        let trimmed = name.trim();
        if trimmed.is_empty() || trimmed != name {
            return Err(StoreError::Invalid(format!(
                "collection name '{name}': give a name without leading or trailing spaces"
            )));
        }
        if name.chars().count() > MAX_COLLECTION_NAME_CHARS || name.chars().any(char::is_control) {
            return Err(StoreError::Invalid(format!(
                "collection name '{name}': at most {MAX_COLLECTION_NAME_CHARS} characters, no control characters"
            )));
        }
        if model.dimensions == 0 || model.dimensions > MAX_DIMENSIONS {
            return Err(StoreError::Invalid(format!(
                "model '{}' gives {}-dimensional vectors: a collection takes 1 to {MAX_DIMENSIONS}",
                model.name, model.dimensions
            )));
        }
        if let Some(row) = self.collection_row(name)? {
            return Self::check_model(name, &row, model);
        }
        let tx = self.conn.transaction().map_err(|e| StoreError::Database {
            path: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        let result = (|| {
            tx.execute(
                "INSERT INTO collections (name, model, dimensions, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![name, model.name, model.dimensions as i64, now_secs()],
            )?;
            let id = tx.last_insert_rowid();
            tx.execute_batch(&format!(
                "CREATE VIRTUAL TABLE {} USING vec0(embedding float[{}] distance_metric=cosine)",
                vector_table(id),
                model.dimensions
            ))?;
            tx.commit()
        })();
        result.map_err(|e| self.db(e))
    }

    /// The content hash stored for `source` in `collection`, if it holds that source.
    pub fn document_hash(&self, collection: &str, source: &str) -> Result<Option<String>> {
        let row = self.existing(collection)?;
        self.conn
            .query_row(
                "SELECT content_hash FROM documents WHERE collection_id = ?1 AND source = ?2",
                params![row.id, source],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.db(e))
    }

    /// Every document of `collection`, by source, with its chunk count and size.
    pub fn documents(&self, collection: &str) -> Result<Vec<DocumentInfo>> {
        let row = self.existing(collection)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT d.source, d.content_hash, d.metadata, d.added_at, count(k.id),
                        coalesce(sum(length(CAST(k.text AS BLOB))), 0)
                   FROM documents d LEFT JOIN chunks k ON k.document_id = d.id
                  WHERE d.collection_id = ?1 GROUP BY d.id ORDER BY d.source",
            )
            .map_err(|e| self.db(e))?;
        let rows = stmt
            .query_map([row.id], |r| {
                let metadata: String = r.get(2)?;
                Ok(DocumentInfo {
                    source: r.get(0)?,
                    content_hash: r.get(1)?,
                    metadata: serde_json::from_str(&metadata).unwrap_or(Json::Null),
                    added_at: r.get(3)?,
                    chunks: r.get::<_, i64>(4)?.try_into().unwrap_or(0),
                    text_bytes: r.get::<_, i64>(5)?.try_into().unwrap_or(0),
                })
            })
            .map_err(|e| self.db(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.db(e))
    }

    /// Adds `document` to `collection` (which must exist and record `model`): a no-op when
    /// its source is stored with the same content hash, else its chunks replace the old
    /// ones, all in one transaction.
    pub fn add_document(
        &mut self,
        collection: &str,
        model: &EmbeddingModel,
        document: &NewDocument,
    ) -> Result<AddOutcome> {
        let row = self.existing(collection)?;
        Self::check_model(collection, &row, model)?;
        for (i, chunk) in document.chunks.iter().enumerate() {
            if chunk.vector.len() != row.model.dimensions {
                return Err(StoreError::Invalid(format!(
                    "{} chunk {i}: a {}-dimensional vector, but collection '{collection}' holds {}-dimensional vectors of '{}'",
                    document.source,
                    chunk.vector.len(),
                    row.model.dimensions,
                    row.model.name
                )));
            }
            if chunk.vector.iter().any(|x| !x.is_finite()) {
                return Err(StoreError::Invalid(format!(
                    "{} chunk {i}: the vector holds a value that is not a finite number",
                    document.source
                )));
            }
        }
        let previous = self.conn.query_row(
            "SELECT id, content_hash FROM documents WHERE collection_id = ?1 AND source = ?2",
            params![row.id, document.source],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
        );
        let previous = previous.optional().map_err(|e| self.db(e))?;
        if let Some((_, hash)) = &previous
            && *hash == document.content_hash
        {
            return Ok(AddOutcome::Unchanged);
        }
        let path = self.path.display().to_string();
        let tx = self.conn.transaction().map_err(|e| StoreError::Database {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let table = vector_table(row.id);
        let result = (|| {
            if let Some((document_id, _)) = previous {
                delete_document_chunks(&tx, &table, document_id)?;
                tx.execute("DELETE FROM documents WHERE id = ?1", [document_id])?;
            }
            tx.execute(
                "INSERT INTO documents (collection_id, source, content_hash, metadata, added_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    row.id,
                    document.source,
                    document.content_hash,
                    Json::Object(document.metadata.clone()).to_string(),
                    now_secs()
                ],
            )?;
            let document_id = tx.last_insert_rowid();
            let mut chunk_insert = tx.prepare(
                "INSERT INTO chunks (document_id, position, text, start_offset, end_offset, metadata)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            let mut text_insert =
                tx.prepare("INSERT INTO chunk_text (rowid, text) VALUES (?1, ?2)")?;
            let mut vector_insert = tx.prepare(&format!(
                "INSERT INTO {table} (rowid, embedding) VALUES (?1, ?2)"
            ))?;
            for (position, chunk) in document.chunks.iter().enumerate() {
                chunk_insert.execute(params![
                    document_id,
                    position as i64,
                    chunk.text,
                    chunk.start as i64,
                    chunk.end as i64,
                    Json::Object(chunk.metadata.clone()).to_string()
                ])?;
                let chunk_id = tx.last_insert_rowid();
                text_insert.execute(params![chunk_id, chunk.text])?;
                vector_insert.execute(params![chunk_id, vector_bytes(&chunk.vector)])?;
            }
            drop((chunk_insert, text_insert, vector_insert));
            tx.commit()
        })();
        result.map_err(|e| StoreError::Database {
            path,
            message: e.to_string(),
        })?;
        Ok(if previous.is_some() {
            AddOutcome::Replaced
        } else {
            AddOutcome::Added
        })
    }

    /// Removes `source` and its chunks from `collection`; returns whether it was there.
    pub fn forget(&mut self, collection: &str, source: &str) -> Result<bool> {
        let row = self.existing(collection)?;
        let path = self.path.display().to_string();
        let tx = self.conn.transaction().map_err(|e| StoreError::Database {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let table = vector_table(row.id);
        let result = (|| {
            let id: Option<i64> = tx
                .query_row(
                    "SELECT id FROM documents WHERE collection_id = ?1 AND source = ?2",
                    params![row.id, source],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = id {
                delete_document_chunks(&tx, &table, id)?;
                tx.execute("DELETE FROM documents WHERE id = ?1", [id])?;
            }
            tx.commit()?;
            Ok(id.is_some())
        })();
        result.map_err(|e: rusqlite::Error| StoreError::Database {
            path,
            message: e.to_string(),
        })
    }

    /// Removes `collection` with every document and vector; returns whether it was there.
    pub fn drop_collection(&mut self, collection: &str) -> Result<bool> {
        let Some(row) = self.collection_row(collection)? else {
            return Ok(false);
        };
        let path = self.path.display().to_string();
        let tx = self.conn.transaction().map_err(|e| StoreError::Database {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let result = (|| {
            tx.execute(
                "DELETE FROM chunk_text WHERE rowid IN (SELECT k.id FROM chunks k
                   JOIN documents d ON k.document_id = d.id WHERE d.collection_id = ?1)",
                [row.id],
            )?;
            tx.execute(
                "DELETE FROM chunks WHERE document_id IN
                   (SELECT id FROM documents WHERE collection_id = ?1)",
                [row.id],
            )?;
            tx.execute("DELETE FROM documents WHERE collection_id = ?1", [row.id])?;
            tx.execute("DELETE FROM collections WHERE id = ?1", [row.id])?;
            tx.execute_batch(&format!("DROP TABLE {}", vector_table(row.id)))?;
            tx.commit()
        })();
        result.map_err(|e| StoreError::Database {
            path,
            message: e.to_string(),
        })?;
        Ok(true)
    }

    /// The `query.k` best chunks of `collection` that pass `query.filter`, best first.
    pub fn search(&self, collection: &str, query: &Query) -> Result<Vec<Hit>> {
        let row = self.existing(collection)?;
        if query.k == 0 || query.k > MAX_K {
            return Err(StoreError::Invalid(format!(
                "asked for {} results: ask for 1 to {MAX_K}",
                query.k
            )));
        }
        let needs_vector = query.mode != SearchMode::Keyword;
        let needs_text = query.mode != SearchMode::Vector;
        let vector = match (&query.vector, needs_vector) {
            (Some((model, vector)), true) => {
                Self::check_model(collection, &row, model)?;
                if vector.len() != model.dimensions {
                    return Err(StoreError::Invalid(format!(
                        "the query vector has {} dimensions where model '{}' gives {}",
                        vector.len(),
                        model.name,
                        model.dimensions
                    )));
                }
                Some(vector.as_slice())
            }
            (None, true) => {
                return Err(StoreError::Invalid(format!(
                    "a {} search of collection '{collection}' needs the query's vector",
                    if query.mode == SearchMode::Hybrid {
                        "hybrid"
                    } else {
                        "vector"
                    }
                )));
            }
            (_, false) => None,
        };
        let text = query.text.as_deref().filter(|t| !t.trim().is_empty());
        if needs_text && text.is_none() && query.mode == SearchMode::Keyword {
            return Err(StoreError::Invalid(format!(
                "a keyword search of collection '{collection}' needs the query's text"
            )));
        }
        let candidates = match query.mode {
            SearchMode::Hybrid => (query.k * FUSION_CANDIDATES_PER_HIT).max(MIN_FUSION_CANDIDATES),
            _ => query.k,
        };
        let vector_ranked = match vector {
            Some(v) => self.vector_ranking(&row, v, candidates, &query.filter)?,
            None => Vec::new(),
        };
        let keyword_ranked = match (text.and_then(fts_query), needs_text) {
            (Some(fts), true) => self.keyword_ranking(&row, &fts, candidates, &query.filter)?,
            _ => Vec::new(),
        };
        // Identifiers in the query (an error code, an invoice number) ranked on their own:
        // a third list in the fusion, so an exact match is not outvoted by chunks that
        // share the question's other words and meaning.
        let identifier_ranked = match (text.and_then(identifier_query), query.mode) {
            (Some(fts), SearchMode::Hybrid) => {
                self.keyword_ranking(&row, &fts, candidates, &query.filter)?
            }
            _ => Vec::new(),
        };
        let mut fused: HashMap<i64, Ranked> = HashMap::new();
        for (rank, (id, _)) in identifier_ranked.iter().enumerate() {
            fused.entry(*id).or_default().score += 1.0 / (RRF_K + (rank + 1) as f64);
        }
        for (rank, (id, distance)) in vector_ranked.iter().enumerate() {
            let entry = fused.entry(*id).or_default();
            entry.similarity = Some(1.0 - distance);
            entry.vector_rank = Some(rank + 1);
            entry.score += match query.mode {
                SearchMode::Vector => 1.0 - distance,
                _ => 1.0 / (RRF_K + (rank + 1) as f64),
            };
        }
        for (rank, (id, bm25)) in keyword_ranked.iter().enumerate() {
            let entry = fused.entry(*id).or_default();
            entry.keyword_rank = Some(rank + 1);
            entry.score += match query.mode {
                SearchMode::Keyword => -bm25,
                _ => 1.0 / (RRF_K + (rank + 1) as f64),
            };
        }
        let mut ranked: Vec<(i64, Ranked)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
        ranked.truncate(query.k);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT d.source, k.text, k.start_offset, k.end_offset, k.metadata
                   FROM chunks k JOIN documents d ON k.document_id = d.id WHERE k.id = ?1",
            )
            .map_err(|e| self.db(e))?;
        let mut hits = Vec::with_capacity(ranked.len());
        for (id, ranked) in ranked {
            let hit = stmt
                .query_row([id], |r| {
                    let metadata: String = r.get(4)?;
                    Ok(Hit {
                        source: r.get(0)?,
                        text: r.get(1)?,
                        start: r.get::<_, i64>(2)?.try_into().unwrap_or(0),
                        end: r.get::<_, i64>(3)?.try_into().unwrap_or(0),
                        metadata: serde_json::from_str(&metadata).unwrap_or(Json::Null),
                        score: ranked.score,
                        similarity: ranked.similarity,
                        vector_rank: ranked.vector_rank,
                        keyword_rank: ranked.keyword_rank,
                    })
                })
                .map_err(|e| self.db(e))?;
            hits.push(hit);
        }
        Ok(hits)
    }

    /// SQL conditions on `k` (chunks) and `d` (documents) for `filter`, and their values.
    fn filter_sql(filter: &Filter) -> (String, Vec<rusqlite::types::Value>) {
        use rusqlite::types::Value as Sql;
        let mut sql = String::new();
        let mut values = Vec::new();
        for (key, value) in &filter.0 {
            if key == "source" {
                sql.push_str(" AND d.source = ?");
                values.push(Sql::Text(
                    value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned),
                ));
                continue;
            }
            let path = format!("$.\"{}\"", key.replace('"', "\"\""));
            match value {
                Json::Null => {
                    sql.push_str(" AND json_type(k.metadata, ?) = 'null'");
                    values.push(Sql::Text(path));
                }
                Json::Bool(b) => {
                    sql.push_str(" AND json_type(k.metadata, ?) = ?");
                    values.push(Sql::Text(path));
                    values.push(Sql::Text(if *b { "true" } else { "false" }.to_owned()));
                }
                Json::Number(n) => {
                    sql.push_str(" AND json_extract(k.metadata, ?) = ?");
                    values.push(Sql::Text(path));
                    values.push(match n.as_i64() {
                        Some(i) => Sql::Integer(i),
                        None => Sql::Real(n.as_f64().unwrap_or(f64::NAN)),
                    });
                }
                Json::String(s) => {
                    sql.push_str(
                        " AND json_type(k.metadata, ?) = 'text' AND json_extract(k.metadata, ?) = ?",
                    );
                    values.push(Sql::Text(path.clone()));
                    values.push(Sql::Text(path));
                    values.push(Sql::Text(s.clone()));
                }
                Json::Array(_) | Json::Object(_) => {
                    // Refused by Filter::from_json; a filter built by hand matches nothing.
                    sql.push_str(" AND 0");
                }
            }
        }
        (sql, values)
    }

    /// Chunk ids and cosine distances, nearest first.
    fn vector_ranking(
        &self,
        row: &CollectionRow,
        vector: &[f32],
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<(i64, f64)>> {
        let table = vector_table(row.id);
        let bytes = vector_bytes(vector);
        let collect = |stmt: &mut rusqlite::Statement<'_>,
                       values: Vec<rusqlite::types::Value>|
         -> rusqlite::Result<Vec<(i64, f64)>> {
            stmt.query_map(params_from_iter(values), |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        };
        let result = if filter.0.is_empty() {
            // sqlite-vec's own k-nearest scan.
            let mut stmt = self
                .conn
                .prepare_cached(&format!(
                    "SELECT rowid, distance FROM {table} WHERE embedding MATCH ?1 AND k = ?2 ORDER BY distance"
                ))
                .map_err(|e| self.db(e))?;
            collect(
                &mut stmt,
                vec![
                    rusqlite::types::Value::Blob(bytes),
                    rusqlite::types::Value::Integer(limit as i64),
                ],
            )
        } else {
            // Only chunks that pass the filter are measured, so a narrow filter still
            // finds its best k.
            let (conditions, mut values) = Self::filter_sql(filter);
            let mut stmt = self
                .conn
                .prepare(&format!(
                    "SELECT k.id, vec_distance_cosine(v.embedding, ?) AS distance
                       FROM chunks k JOIN documents d ON k.document_id = d.id
                       JOIN {table} v ON v.rowid = k.id
                      WHERE d.collection_id = ?{conditions}
                      ORDER BY distance LIMIT ?"
                ))
                .map_err(|e| self.db(e))?;
            let mut all = vec![
                rusqlite::types::Value::Blob(bytes),
                rusqlite::types::Value::Integer(row.id),
            ];
            all.append(&mut values);
            all.push(rusqlite::types::Value::Integer(limit as i64));
            collect(&mut stmt, all)
        };
        result.map_err(|e| self.db(e))
    }

    /// Chunk ids and BM25 scores (lower is better), best first.
    fn keyword_ranking(
        &self,
        row: &CollectionRow,
        fts: &str,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<(i64, f64)>> {
        let (conditions, values) = Self::filter_sql(filter);
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT k.id, bm25(chunk_text) AS score
                   FROM chunk_text JOIN chunks k ON k.id = chunk_text.rowid
                   JOIN documents d ON k.document_id = d.id
                  WHERE chunk_text MATCH ? AND d.collection_id = ?{conditions}
                  ORDER BY score LIMIT ?"
            ))
            .map_err(|e| self.db(e))?;
        let mut all = vec![
            rusqlite::types::Value::Text(fts.to_owned()),
            rusqlite::types::Value::Integer(row.id),
        ];
        all.extend(values);
        all.push(rusqlite::types::Value::Integer(limit as i64));
        let rows = stmt
            .query_map(params_from_iter(all), |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| self.db(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.db(e))
    }
}

fn delete_document_chunks(
    tx: &rusqlite::Transaction<'_>,
    vector_table: &str,
    document_id: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        &format!(
            "DELETE FROM {vector_table} WHERE rowid IN (SELECT id FROM chunks WHERE document_id = ?1)"
        ),
        [document_id],
    )?;
    tx.execute(
        "DELETE FROM chunk_text WHERE rowid IN (SELECT id FROM chunks WHERE document_id = ?1)",
        [document_id],
    )?;
    tx.execute("DELETE FROM chunks WHERE document_id = ?1", [document_id])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, dimensions: usize) -> EmbeddingModel {
        EmbeddingModel {
            name: name.into(),
            dimensions,
        }
    }

    fn chunk(text: &str, vector: Vec<f32>, metadata: Json) -> NewChunk {
        NewChunk {
            text: text.into(),
            vector,
            start: 0,
            end: text.len(),
            metadata: metadata.as_object().cloned().unwrap_or_default(),
        }
    }

    fn document(source: &str, chunks: Vec<NewChunk>) -> NewDocument {
        NewDocument {
            source: source.into(),
            content_hash: content_hash(chunks.iter().map(|c| (c.text.as_str(), c.start, c.end))),
            metadata: Map::new(),
            chunks,
        }
    }

    #[test]
    fn adds_searches_filters_and_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = KnowledgeStore::open(&dir.path().join("k.sqlite")).unwrap();
        let m = model("toy", 3);
        store.ensure_collection("notes", &m).unwrap();
        let doc = document(
            "a.md",
            vec![
                chunk(
                    "apples are red",
                    vec![1.0, 0.0, 0.0],
                    serde_json::json!({"lang": "en", "page": 1}),
                ),
                chunk(
                    "bananas are yellow",
                    vec![0.0, 1.0, 0.0],
                    serde_json::json!({"lang": "en", "page": 2}),
                ),
                chunk(
                    "pommes rouges",
                    vec![0.9, 0.1, 0.0],
                    serde_json::json!({"lang": "fr", "page": 3}),
                ),
            ],
        );
        assert_eq!(
            store.add_document("notes", &m, &doc).unwrap(),
            AddOutcome::Added
        );
        assert_eq!(
            store.add_document("notes", &m, &doc).unwrap(),
            AddOutcome::Unchanged
        );
        let query = |filter: Filter, mode: SearchMode, text: &str| Query {
            text: Some(text.into()),
            vector: Some((m.clone(), vec![1.0, 0.0, 0.0])),
            k: 2,
            filter,
            mode,
        };
        let hits = store
            .search("notes", &query(Filter::default(), SearchMode::Vector, ""))
            .unwrap();
        assert_eq!(hits[0].text, "apples are red");
        assert_eq!(hits[1].text, "pommes rouges");
        assert!((hits[0].similarity.unwrap() - 1.0).abs() < 1e-6);
        let french = Filter(vec![("lang".into(), serde_json::json!("fr"))]);
        let hits = store
            .search("notes", &query(french, SearchMode::Vector, ""))
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].text, "pommes rouges");
        let page2 = Filter(vec![("page".into(), serde_json::json!(2))]);
        let hits = store
            .search("notes", &query(page2, SearchMode::Hybrid, "yellow"))
            .unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].text, "bananas are yellow");
        let hits = store
            .search(
                "notes",
                &query(Filter::default(), SearchMode::Keyword, "bananas \"OR"),
            )
            .unwrap();
        assert_eq!(hits.len(), 1);
        let listed = store.documents("notes").unwrap();
        assert_eq!(listed[0].chunks, 3);
        assert!(store.forget("notes", "a.md").unwrap());
        assert!(
            store
                .search(
                    "notes",
                    &query(Filter::default(), SearchMode::Hybrid, "apples")
                )
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.collections().unwrap()[0].chunks, 0);
    }

    #[test]
    fn another_model_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = KnowledgeStore::open(&dir.path().join("k.sqlite")).unwrap();
        store.ensure_collection("notes", &model("toy", 3)).unwrap();
        let err = store
            .search(
                "notes",
                &Query {
                    text: None,
                    vector: Some((model("other", 3), vec![1.0, 0.0, 0.0])),
                    k: 1,
                    filter: Filter::default(),
                    mode: SearchMode::Vector,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'toy'") && err.contains("'other'") && err.contains("notes"),
            "{err}"
        );
        assert!(
            store
                .ensure_collection("notes", &model("other", 3))
                .is_err()
        );
    }
}
