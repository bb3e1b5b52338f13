//! How values reach the run log. Small values stay inline in their row's JSON. A larger one
//! is stored once per run in `run_values`, keyed by the SHA-256 of its JSON text (a chain
//! that hands a value on stores it once, not once per node), deflated when that pays, and
//! replaced in the row by a reference. A value over the cap keeps only its size, hash and
//! a preview, so no value can make a write fail and the log never fails a run.
//!
//! A value handed from node to node is serialized and hashed once: values share their
//! contents when handed on, so the writer keeps the large values it stored lately (a
//! reference, not a copy) and recognises them again by the address of their contents, a
//! check that costs the same whatever the value's size.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

use agentloom_core::{GraphDoc, Value, ValueMap};
use flate2::Compression;
use flate2::write::DeflateEncoder;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

/// Values whose JSON text is at most this long stay inline.
const INLINE_MAX_BYTES: usize = 256;
/// Stored values at least this long are deflated (when that makes them smaller).
const DEFLATE_MIN_BYTES: usize = 4096;
/// What a truncated value keeps of its JSON text.
const PREVIEW_BYTES: usize = 1000;
/// The default cap on one value in the log.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
/// The cap with full logging: well under what SQLite accepts in one row (1e9 bytes).
const FULL_MAX_VALUE_BYTES: usize = 256 << 20;
/// What the recent values may hold in all (their JSON size); past it they are forgotten,
/// so the log keeps no value alive for long after the run let it go. A value handed down
/// is met again soon, so a small window catches it.
const RECENT_BUDGET_BYTES: usize = 8 << 20;
/// The key of the object that stands for a value kept in `run_values`.
const REF_KEY: &str = "\u{0}agentloom.value";

/// How much of each value the run log keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPolicy {
    /// A value whose JSON text is longer keeps only its size, SHA-256 and a preview.
    pub max_value_bytes: usize,
}

impl Default for LogPolicy {
    fn default() -> Self {
        Self {
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
        }
    }
}

impl LogPolicy {
    /// Keeps every value whole (up to 256 MiB each, which SQLite can always store).
    pub fn full() -> Self {
        Self {
            max_value_bytes: FULL_MAX_VALUE_BYTES,
        }
    }
}

/// One row of `run_values` waiting to be written.
pub(super) struct StoredValue {
    pub hash: String,
    pub size: usize,
    pub encoding: &'static str,
    pub data: Vec<u8>,
}

/// The writer's side: turns maps into their logged form, remembering which values this
/// run has stored already.
pub(super) struct ValueLog {
    policy: LogPolicy,
    seen: HashSet<String>,
    /// Rows for the next batch; kept until a batch with them is written.
    pub pending: Vec<StoredValue>,
    /// Large values stored lately, by the address of their shared contents (see
    /// [`Value::shared_address`]), with their hash.
    recent: HashMap<usize, (Value, String)>,
    recent_bytes: usize,
    /// How many large values were serialized and hashed (each distinct one once).
    pub hashed: u64,
}

impl ValueLog {
    pub fn new(policy: LogPolicy) -> Self {
        Self {
            policy,
            seen: HashSet::new(),
            pending: Vec::new(),
            recent: HashMap::new(),
            recent_bytes: 0,
            hashed: 0,
        }
    }

    /// The cap on one value's JSON text.
    pub fn max_value_bytes(&self) -> usize {
        self.policy.max_value_bytes
    }

    /// A new run under this writer: values are stored again for it.
    pub fn reset(&mut self) {
        self.seen.clear();
        self.pending.clear();
        self.recent.clear();
        self.recent_bytes = 0;
    }

    /// `map` with every large value replaced by a reference to its stored row.
    pub fn shrink(&mut self, mut map: ValueMap) -> ValueMap {
        // In place: most values stay as they are, and a new map costs an allocation.
        for value in map.values_mut() {
            *value = self.shrink_value(std::mem::replace(value, Value::Null));
        }
        map
    }

    fn shrink_value(&mut self, value: Value) -> Value {
        let address = value.shared_address();
        if let Some(address) = address
            && let Some((_, hash)) = self.recent.get(&address)
        {
            return reference_to(hash.clone());
        }
        let mut text = Measured::new(self.policy.max_value_bytes);
        // Writing to memory cannot fail, and every Value serializes.
        let _ = serde_json::to_writer(&mut text, &value);
        if text.size <= INLINE_MAX_BYTES {
            return value;
        }
        self.hashed += 1;
        let hash = hex(&text.hasher.finalize());
        if self.seen.insert(hash.clone()) {
            self.pending
                .push(stored(hash.clone(), text.size, text.head));
        }
        if let Some(address) = address {
            if self.recent_bytes + text.size > RECENT_BUDGET_BYTES {
                self.recent.clear();
                self.recent_bytes = 0;
            }
            self.recent_bytes += text.size;
            // Kept, the value's contents stay where they are: the address stays theirs.
            self.recent.insert(address, (value, hash.clone()));
        }
        reference_to(hash)
    }
}

fn reference_to(hash: String) -> Value {
    Value::object(ValueMap::from([(REF_KEY.to_owned(), Value::text(hash))]))
}

fn stored(hash: String, size: usize, head: Vec<u8>) -> StoredValue {
    if head.len() < size {
        let mut preview = head;
        preview.truncate(PREVIEW_BYTES);
        // Cut at a character boundary.
        let preview = String::from_utf8_lossy(&preview)
            .trim_end_matches('\u{fffd}')
            .to_owned();
        return StoredValue {
            hash,
            size,
            encoding: "preview",
            data: preview.into_bytes(),
        };
    }
    if size >= DEFLATE_MIN_BYTES
        && let Some(deflated) = deflate(&head)
        && deflated.len() < head.len()
    {
        return StoredValue {
            hash,
            size,
            encoding: "deflate",
            data: deflated,
        };
    }
    StoredValue {
        hash,
        size,
        encoding: "json",
        data: head,
    }
}

fn deflate(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut encoder = DeflateEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// Counts and hashes JSON text as it is written, keeping at most `keep` bytes of it.
struct Measured {
    hasher: Sha256,
    size: usize,
    head: Vec<u8>,
    keep: usize,
}

impl Measured {
    fn new(keep: usize) -> Self {
        Self {
            hasher: Sha256::new(),
            size: 0,
            head: Vec::new(),
            keep,
        }
    }
}

impl Write for Measured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        self.size += buf.len();
        let room = self.keep.saturating_sub(self.head.len());
        self.head.extend_from_slice(&buf[..room.min(buf.len())]);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the pending rows (in the batch's transaction).
pub(super) fn insert_values(
    tx: &Connection,
    run_id: &str,
    values: &[StoredValue],
) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT OR IGNORE INTO run_values (run_id, hash, size, encoding, data)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for value in values {
        insert.execute(params![
            run_id,
            value.hash,
            i64::try_from(value.size).unwrap_or(i64::MAX),
            value.encoding,
            value.data,
        ])?;
    }
    Ok(())
}

/// The reader's side: puts stored values back into `map`. A truncated value reads as text:
/// "[truncated: N bytes, sha256 …]", then the start of its JSON text.
pub(super) fn restore(conn: &Connection, run_id: &str, map: &mut ValueMap) -> Result<(), String> {
    for value in map.values_mut() {
        let Some(hash) = reference(value) else {
            continue;
        };
        *value = load(conn, run_id, &hash)?;
    }
    Ok(())
}

fn reference(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) if map.len() == 1 => match map.get(REF_KEY) {
            Some(Value::Text(hash)) => Some(String::clone(hash)),
            _ => None,
        },
        _ => None,
    }
}

fn load(conn: &Connection, run_id: &str, hash: &str) -> Result<Value, String> {
    let row: Option<(i64, String, Vec<u8>)> = conn
        .prepare_cached(
            "SELECT size, encoding, data FROM run_values WHERE run_id = ?1 AND hash = ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![run_id, hash], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()
        })
        .map_err(|e| format!("value {hash}: {e}"))?;
    let Some((size, encoding, data)) = row else {
        return Err(format!("value {hash} is missing"));
    };
    let text = match encoding.as_str() {
        "json" => data,
        "deflate" => {
            let mut decoder = flate2::write::DeflateDecoder::new(Vec::new());
            decoder
                .write_all(&data)
                .and_then(|()| decoder.finish())
                .map_err(|e| format!("value {hash} does not inflate: {e}"))?
        }
        "preview" => {
            let preview = String::from_utf8_lossy(&data);
            return Ok(Value::text(format!(
                "[truncated: {size} bytes, sha256 {hash}] {preview}…"
            )));
        }
        other => return Err(format!("value {hash} has an unknown encoding `{other}`")),
    };
    serde_json::from_slice(&text).map_err(|e| format!("value {hash} is not valid JSON: {e}"))
}

/// Graph JSON up to this size is stored as text; a longer one is deflated as it is written.
const GRAPH_TEXT_MAX_BYTES: usize = 64 << 10;

/// The graph as run, as the run log stores it: its JSON text when short (readable in any
/// SQLite tool), deflated when long. A large graph is never held whole as text: its JSON
/// goes through the encoder as it is serialized, and SQLite copies only the deflated bytes.
pub(super) enum StoredGraph {
    Text(String),
    Deflated(Vec<u8>),
}

impl StoredGraph {
    pub(super) fn of(graph: &GraphDoc) -> StoredGraph {
        let empty = || StoredGraph::Text("{}".to_owned());
        // The serializer writes token by token: the encoder gets them in blocks.
        let mut buffered = io::BufWriter::with_capacity(16 << 10, GraphSink::Text(Vec::new()));
        if serde_json::to_writer(&mut buffered, graph).is_err() {
            return empty();
        }
        let Ok(sink) = buffered.into_inner() else {
            return empty();
        };
        match sink {
            GraphSink::Text(bytes) => {
                String::from_utf8(bytes).map_or_else(|_| empty(), StoredGraph::Text)
            }
            GraphSink::Deflating(encoder) => encoder
                .finish()
                .map_or_else(|_| empty(), StoredGraph::Deflated),
        }
    }

    /// Nothing: what a writer keeps once the graph is in the file.
    pub(super) fn written() -> StoredGraph {
        StoredGraph::Text(String::new())
    }

    /// The `graph_json` and `graph_deflated` columns.
    pub(super) fn columns(&self) -> (&str, Option<&[u8]>) {
        match self {
            StoredGraph::Text(text) => (text, None),
            StoredGraph::Deflated(bytes) => ("", Some(bytes)),
        }
    }

    /// The JSON text of a graph read back from its two columns; at most the graph size
    /// limit is inflated.
    pub(super) fn read(text: String, deflated: Option<Vec<u8>>) -> Result<String, String> {
        Self::read_capped(text, deflated, agentloom_core::max_graph_bytes())
    }

    /// [`StoredGraph::read`] inflating at most `cap` bytes.
    fn read_capped(text: String, deflated: Option<Vec<u8>>, cap: u64) -> Result<String, String> {
        use std::io::Read as _;
        let Some(deflated) = deflated else {
            return Ok(text);
        };
        let mut json = String::new();
        flate2::read::DeflateDecoder::new(deflated.as_slice())
            .take(cap.saturating_add(1))
            .read_to_string(&mut json)
            .map_err(|e| format!("the graph does not inflate: {e}"))?;
        if json.len() as u64 > cap {
            return Err(format!("the graph inflates past {cap} bytes"));
        }
        Ok(json)
    }
}

/// Where a graph's JSON is written: kept as text until it passes
/// [`GRAPH_TEXT_MAX_BYTES`], deflated from then on.
enum GraphSink {
    Text(Vec<u8>),
    Deflating(DeflateEncoder<Vec<u8>>),
}

impl Write for GraphSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            GraphSink::Text(bytes) if bytes.len() + buf.len() <= GRAPH_TEXT_MAX_BYTES => {
                bytes.extend_from_slice(buf);
            }
            GraphSink::Text(bytes) => {
                let mut encoder = DeflateEncoder::new(Vec::new(), Compression::fast());
                encoder.write_all(bytes)?;
                encoder.write_all(buf)?;
                *self = GraphSink::Deflating(encoder);
            }
            GraphSink::Deflating(encoder) => encoder.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod stored_graph_tests {
    use super::*;

    #[test]
    fn a_deflated_graph_inflating_past_the_graph_cap_is_refused_not_read_whole() {
        // A run log edited by someone else: a small blob that inflates to far more.
        let mut encoder = DeflateEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(&vec![b' '; 8 << 20]).unwrap();
        let bomb = encoder.finish().unwrap();
        assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
        let err = StoredGraph::read_capped(String::new(), Some(bomb), 1 << 20).unwrap_err();
        assert!(err.contains("inflates past 1048576 bytes"), "{err}");
    }
}
