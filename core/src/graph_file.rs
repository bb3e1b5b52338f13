//! Reading graph files safely: a size cap checked before parsing, a UTF-8 byte-order mark
//! accepted, and duplicate keys refused (JSON parsers keep the last one silently, so a
//! hand-edited file could run something other than what its reader saw). Writing them
//! short: a config value equal to its block's declared default is left out of the file,
//! and a value left out is that default when the node is configured.

use std::borrow::Cow;
use std::path::Path;

use crate::block::{BlockCatalog, BlockMeta};
use crate::config::Config;
use crate::graph::{GraphDoc, LoadError};

/// Graph files larger than this are refused unless [`MAX_GRAPH_BYTES_ENV`] says otherwise.
pub const DEFAULT_MAX_GRAPH_BYTES: u64 = 64 * 1024 * 1024;
/// Environment variable with the largest graph file accepted, in bytes.
pub const MAX_GRAPH_BYTES_ENV: &str = "AGENTLOOM_MAX_GRAPH_BYTES";

/// The size cap for graph files: [`MAX_GRAPH_BYTES_ENV`] when set to a number, else 64 MiB.
pub fn max_graph_bytes() -> u64 {
    std::env::var(MAX_GRAPH_BYTES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_MAX_GRAPH_BYTES)
}

/// A graph file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GraphFileError {
    #[error("cannot read the file: {0}")]
    Io(#[from] std::io::Error),
    #[error(
        "the file is {size} bytes, more than the {max} bytes graph files may have; set {MAX_GRAPH_BYTES_ENV} to allow larger files"
    )]
    TooLarge { size: u64, max: u64 },
    #[error("it is {kind}, not a regular file; give the path of a graph file")]
    NotAFile { kind: &'static str },
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Reads and parses the graph file at `path`, refusing files over `max_bytes` before
/// reading them.
pub fn read_graph_file(path: &Path, max_bytes: u64) -> Result<GraphDoc, GraphFileError> {
    Ok(GraphDoc::from_json_str(&read_graph_text(path, max_bytes)?)?)
}

/// The text of the graph file at `path`, refusing what is not a regular file (a FIFO would
/// block the read forever, a device never end) and files over `max_bytes`, before reading.
pub fn read_graph_text(path: &Path, max_bytes: u64) -> Result<String, GraphFileError> {
    use std::io::Read as _;
    let not_regular = |kind: std::fs::FileType| GraphFileError::NotAFile {
        kind: file_kind(kind),
    };
    // Checked before opening: opening a FIFO for reading waits for a writer.
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    // Swapped for something else between the two looks.
    if !metadata.file_type().is_file() {
        return Err(not_regular(metadata.file_type()));
    }
    let size = metadata.len();
    if size > max_bytes {
        return Err(GraphFileError::TooLarge {
            size,
            max: max_bytes,
        });
    }
    // Room for the whole file at once: grown by doubling, a large file was copied over and
    // over while it was read (as long as parsing it).
    let mut text = String::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    // Never past the cap, even if the file grows while it is read.
    file.take(max_bytes.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > max_bytes {
        return Err(GraphFileError::TooLarge {
            size: text.len() as u64,
            max: max_bytes,
        });
    }
    Ok(text)
}

/// `doc` as its file holds it: each node's config without the values equal to the default
/// its block declares (a value that only looks alike, `0` or `""` where the default is
/// something else, stays), and without an empty label. Nodes of blocks `catalog` does not
/// know keep their config whole. The app and the editing tools save through this, so a
/// file saved, opened and saved again is the same bytes.
pub fn without_declared_defaults(doc: &GraphDoc, catalog: &dyn BlockCatalog) -> GraphDoc {
    let mut short = doc.clone();
    for node in &mut short.nodes {
        if let Some(block) = catalog.block(&node.block) {
            leave_out_declared_defaults(&mut node.config, block.meta());
        }
        if node.label.as_deref().is_some_and(str::is_empty) {
            node.label = None;
        }
    }
    short
}

/// Removes from `config` the values equal to the defaults `meta` declares.
pub fn leave_out_declared_defaults(config: &mut Config, meta: &BlockMeta) {
    config.retain(|name, value| {
        meta.config
            .iter()
            .find(|field| field.name == *name)
            .and_then(|field| field.default.as_ref())
            .is_none_or(|default| default != value)
    });
}

/// `config` with each field `meta` declares a default for, and `config` leaves out, set to
/// that default: what a block is configured with, so a value left out of a file is its
/// default whatever the block reads when it is missing.
pub fn with_declared_defaults<'c>(config: &'c Config, meta: &BlockMeta) -> Cow<'c, Config> {
    let missing = |field: &&crate::config::ConfigField| {
        field.default.is_some() && !config.contains_key(&field.name)
    };
    if !meta.config.iter().any(|field| missing(&field)) {
        return Cow::Borrowed(config);
    }
    let mut filled = config.clone();
    for field in meta.config.iter().filter(missing) {
        if let Some(default) = &field.default {
            filled.insert(field.name.clone(), default.clone());
        }
    }
    Cow::Owned(filled)
}

fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRAPH: &str =
        r#"{"format": "agentloom.graph", "version": 1, "name": "g", "nodes": [], "edges": []}"#;

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let doc = GraphDoc::from_json_str(&format!("\u{feff}{GRAPH}")).unwrap();
        assert_eq!(doc.name, "g");
    }

    #[test]
    fn a_duplicate_key_is_an_error_naming_the_key_and_where() {
        let text = r#"{"format": "agentloom.graph", "version": 1, "name": "g", "edges": [],
            "nodes": [{"id": "a", "block": "data.constant", "id": "b"}]}"#;
        let err = GraphDoc::from_json_str(text).unwrap_err().to_string();
        assert!(err.contains("duplicate key `id` in $.nodes[0]"), "{err}");
        let top = r#"{"format": "agentloom.graph", "version": 1, "name": "g", "name": "h", "nodes": [], "edges": []}"#;
        let err = GraphDoc::from_json_str(top).unwrap_err().to_string();
        assert!(err.contains("duplicate key `name` in $;"), "{err}");
    }

    #[test]
    fn a_duplicate_key_deep_down_or_in_a_large_object_is_found() {
        let many: String = (0..40).map(|i| format!(r#""k{i}": {i}, "#)).collect();
        let text = format!(
            r#"{{"format": "agentloom.graph", "version": 1, "name": "g", "edges": [],
            "nodes": [{{"id": "a", "block": "data.constant"}},
                      {{"id": "b", "block": "data.constant",
                        "config": {{"value": [1, {{{many}"k7": 0}}]}}}}]}}"#
        );
        let err = GraphDoc::from_json_str(&text).unwrap_err().to_string();
        assert!(
            err.contains("duplicate key `k7` in $.nodes[1].config.value[1];"),
            "{err}"
        );
        let escaped = r#"{"format": "agentloom.graph", "version": 1, "name": "g", "edges": [],
            "nodes": [{"id": "a", "block": "data.constant", "config": {"\u0061": 1, "a": 2}}]}"#;
        let err = GraphDoc::from_json_str(escaped).unwrap_err().to_string();
        assert!(
            err.contains("duplicate key `a` in $.nodes[0].config;"),
            "{err}"
        );
    }

    #[test]
    fn a_large_file_is_checked_for_duplicate_keys_too_and_read_whole_without() {
        // Large files are checked on another thread while they are parsed.
        let nodes = |last: &str| -> String {
            (0..5_000)
                .map(|i| format!(r#"{{"id": "n{i}", "block": "data.constant", "config": {{"value": {i}}}}}, "#))
                .chain(std::iter::once(last.to_owned()))
                .collect()
        };
        let graph = |nodes: String| {
            format!(
                r#"{{"format": "agentloom.graph", "version": 1, "name": "g", "edges": [], "nodes": [{nodes}]}}"#
            )
        };
        let clean = graph(nodes(r#"{"id": "last", "block": "data.constant"}"#));
        assert!(clean.len() > 256 << 10, "{} bytes", clean.len());
        assert_eq!(GraphDoc::from_json_str(&clean).unwrap().nodes.len(), 5_001);
        let twice = graph(nodes(
            r#"{"id": "last", "block": "data.constant", "config": {"value": 1, "value": 2}}"#,
        ));
        let err = GraphDoc::from_json_str(&twice).unwrap_err().to_string();
        assert!(
            err.contains("duplicate key `value` in $.nodes[5000].config;"),
            "{err}"
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        std::fs::write(&path, GRAPH).unwrap();
        let err = read_graph_file(&path, 10).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "the file is {} bytes, more than the 10 bytes",
                GRAPH.len()
            )),
            "{err}"
        );
        assert!(err.contains(MAX_GRAPH_BYTES_ENV), "{err}");
        assert_eq!(read_graph_file(&path, 1024).unwrap().name, "g");
    }
}
