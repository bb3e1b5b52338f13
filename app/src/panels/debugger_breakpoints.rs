//! Breakpoints: where the person wants a run to stop, before or after a node. They belong to
//! the person debugging, not to the graph: they are kept per graph file in the app's data
//! directory (`breakpoints.json`), never in the shared graph file, and an unsaved graph
//! keeps them in memory until it is saved somewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// When a run stops at a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BreakWhen {
    /// Before the node runs: its resolved inputs can be changed.
    Before,
    /// After it ran: its outputs can be changed before anything downstream sees them.
    After,
}

impl BreakWhen {
    pub fn word(self) -> &'static str {
        match self {
            BreakWhen::Before => "before",
            BreakWhen::After => "after",
        }
    }
}

/// The breakpoints of one graph: node id → when (one breakpoint a node).
pub type GraphBreakpoints = BTreeMap<String, BreakWhen>;

/// The file they are kept in, in the app's data directory.
pub fn breakpoints_file(data_dir: &Path) -> PathBuf {
    data_dir.join("breakpoints.json")
}

/// The breakpoints of the graph shown, and where they are kept.
#[derive(Debug, Default)]
pub struct Breakpoints {
    /// The graph file they belong to (`None`: an unsaved graph).
    file: Option<PathBuf>,
    /// Its breakpoints.
    set: GraphBreakpoints,
    /// Counts the changes of `set`, so what was made of it can tell it is stale.
    generation: u64,
    /// Where every graph file's breakpoints are kept (`None`: this session only).
    store: Option<PathBuf>,
}

/// What the store file holds: each graph file's breakpoints, by its absolute path.
type Stored = BTreeMap<String, GraphBreakpoints>;

/// The key a graph file's breakpoints are kept under: its absolute, resolved path.
fn key_of(file: &Path) -> String {
    std::fs::canonicalize(file)
        .or_else(|_| std::path::absolute(file))
        .unwrap_or_else(|_| file.to_owned())
        .to_string_lossy()
        .into_owned()
}

fn read_store(store: &Path) -> Stored {
    // A missing or damaged file holds none; it is written whole at the next change.
    std::fs::read_to_string(store)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

impl Breakpoints {
    /// Breakpoints kept in `data_dir` (none: for this session only).
    pub fn kept_in(data_dir: Option<&Path>) -> Self {
        Breakpoints {
            store: data_dir.map(breakpoints_file),
            ..Breakpoints::default()
        }
    }

    /// The breakpoint at `node`, if any.
    pub fn at(&self, node: &str) -> Option<BreakWhen> {
        self.set.get(node).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Every breakpoint, by node id.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &BreakWhen)> {
        self.set.iter()
    }

    /// Changes with every change of the breakpoints.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The graph shown was saved to `file` (Save, Save As): its breakpoints go with it,
    /// kept under that file from now on.
    pub fn saved_to(&mut self, file: &Path) -> Result<(), String> {
        if self.file.as_deref() == Some(file) {
            return Ok(());
        }
        self.file = Some(file.to_owned());
        self.keep()
    }

    /// Follows the graph shown to `file` (another graph opened): that file's own
    /// breakpoints, none for a graph never saved. Returns whether the file changed.
    pub fn follow_file(&mut self, file: Option<&Path>) -> bool {
        if self.file.as_deref() == file {
            return false;
        }
        self.file = file.map(Path::to_owned);
        self.generation += 1;
        self.set = match (&self.store, file) {
            (Some(store), Some(file)) => {
                read_store(store).remove(&key_of(file)).unwrap_or_default()
            }
            _ => GraphBreakpoints::new(),
        };
        true
    }

    /// The breakpoints kept for another graph file `file` (one a `graph.call` node runs).
    pub fn of_file(&self, file: &Path) -> GraphBreakpoints {
        if self.file.as_deref() == Some(file) {
            return self.set.clone();
        }
        self.store
            .as_deref()
            .and_then(|store| read_store(store).remove(&key_of(file)))
            .unwrap_or_default()
    }

    /// Sets (`Some`) or removes (`None`) the breakpoint at `node`, and keeps the change.
    pub fn set(&mut self, node: &str, when: Option<BreakWhen>) -> Result<(), String> {
        let changed = match when {
            Some(when) => self.set.insert(node.to_owned(), when) != Some(when),
            None => self.set.remove(node).is_some(),
        };
        if !changed {
            return Ok(());
        }
        self.generation += 1;
        self.keep()
    }

    /// F9: a breakpoint before `node`, or none if it has one (before or after).
    pub fn toggle(&mut self, node: &str) -> Result<(), String> {
        let when = match self.at(node) {
            Some(_) => None,
            None => Some(BreakWhen::Before),
        };
        self.set(node, when)
    }

    /// Keeps this graph's breakpoints in the store, beside the other files'.
    fn keep(&self) -> Result<(), String> {
        let (Some(store), Some(file)) = (&self.store, &self.file) else {
            return Ok(());
        };
        let mut stored = read_store(store);
        let key = key_of(file);
        if self.set.is_empty() {
            stored.remove(&key);
        } else {
            stored.insert(key, self.set.clone());
        }
        let text = serde_json::to_string_pretty(&stored).map_err(|e| e.to_string())?;
        if let Some(dir) = store.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        // Written aside, then renamed: a crash leaves the old file or the new, whole.
        let partial = store.with_extension("json.partial");
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::rename(&partial, store))
            .map_err(|e| format!("cannot keep the breakpoints in {}: {e}", store.display()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::{BreakWhen, Breakpoints};

    #[test]
    fn breakpoints_are_kept_per_file_and_follow_a_first_save() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (one, two) = (dir.path().join("one.json"), dir.path().join("two.json"));

        // An unsaved graph's breakpoints go with it to its first file.
        let mut shown = Breakpoints::kept_in(Some(&data));
        shown.toggle("fetch").unwrap();
        shown.saved_to(&one).unwrap();
        assert_eq!(shown.at("fetch"), Some(BreakWhen::Before));
        shown.set("summarize", Some(BreakWhen::After)).unwrap();

        // Another file has none of them, nor a new graph; coming back finds them, also in
        // a new window.
        assert!(shown.follow_file(None));
        assert!(shown.is_empty());
        shown.follow_file(Some(&two));
        assert!(shown.is_empty());
        shown.toggle("other").unwrap();
        let mut again = Breakpoints::kept_in(Some(&data));
        again.follow_file(Some(&one));
        assert_eq!(again.at("fetch"), Some(BreakWhen::Before));
        assert_eq!(again.at("summarize"), Some(BreakWhen::After));
        assert_eq!(again.at("other"), None);

        // F9 on a node with a breakpoint (before or after) removes it.
        again.toggle("summarize").unwrap();
        let mut third = Breakpoints::kept_in(Some(&data));
        third.follow_file(Some(&one));
        assert_eq!(third.at("summarize"), None);
        assert_eq!(third.at("fetch"), Some(BreakWhen::Before));

        // Nothing of them is in the graph files.
        assert!(!one.exists() && !two.exists());
    }

    #[test]
    fn a_damaged_store_holds_none_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.json");
        std::fs::write(super::breakpoints_file(dir.path()), "{not json").unwrap();
        let mut shown = Breakpoints::kept_in(Some(dir.path()));
        shown.follow_file(Some(&file));
        assert!(shown.is_empty());
        shown.toggle("a").unwrap();
        let mut again = Breakpoints::kept_in(Some(dir.path()));
        again.follow_file(Some(&file));
        assert_eq!(again.at("a"), Some(BreakWhen::Before));
    }
}
