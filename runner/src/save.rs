//! Writing a graph file: the one save path of the app and of the editing tools.

use std::path::Path;

use agentloom_core::GraphDoc;

/// Writes `doc` to `path` in its canonical form (sorted, pretty-printed), atomically: a
/// temporary file beside it, then a rename, so a reader never sees half a graph. The
/// document holds credential names only, never secrets, so the file is shareable as is.
pub fn write_graph_file(doc: &GraphDoc, path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, doc.to_json_string())?;
    std::fs::rename(&tmp, path)
}
