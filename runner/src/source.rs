//! A graph source, read once: the bytes hashed for trust are the bytes parsed, for the
//! graph file and for every file it calls (the whole tree is read, hashed and parsed from
//! one snapshot). Nothing that runs, validates or lists a graph reads its files again after
//! the trust check: `graph.call` reads the snapshot ([`GraphFiles::snapshot`]), never the
//! disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::graph_call::{self, GraphFiles};
use agentloom_core::GraphDoc;

use crate::LoadError;
use crate::trust::{self, FileTree, Fingerprint, TrustNeeds, TrustStore};

/// Files from this size on are hashed beside the parse rather than before it.
const PARALLEL_HASH_BYTES: usize = 1 << 20;

/// A graph and the files it calls, as read once.
pub struct GraphSource {
    /// The file, as it was named (messages), when the graph is a file's.
    path: Option<PathBuf>,
    /// As read, its `graph.call` paths made absolute (a run can be resumed from anywhere).
    doc: GraphDoc,
    /// What trust is given to: the hash of exactly the bytes parsed, and of every file the
    /// graph calls (`None`: not a file's, or its folder could not be resolved).
    fingerprint: Option<Fingerprint>,
    /// The called files' documents, for the list of what trust would allow.
    tree: Option<FileTree>,
    /// The called files' text, the only content `graph.call` may run.
    files: Arc<GraphFiles>,
    /// Read from this machine's disk (not a request's or a recorded run's copy): an
    /// untrusted graph's calls are confined to its file's folder here.
    on_disk: bool,
}

impl GraphSource {
    /// Reads the graph file at `path` and every file it calls, each once, up to the graph
    /// size limit. The error names the file.
    pub fn read(path: &Path) -> Result<GraphSource, LoadError> {
        let failed = |source| LoadError {
            path: path.to_owned(),
            source,
        };
        let canonical = std::fs::canonicalize(path).map_err(|e| failed(e.into()))?;
        let text = agentloom_core::read_graph_text(&canonical, agentloom_core::max_graph_bytes())
            .map_err(failed)?;
        // A large file is hashed on another core while it is parsed.
        let (sha256, doc) = if text.len() >= PARALLEL_HASH_BYTES {
            std::thread::scope(|scope| {
                let hashing = scope.spawn(|| trust::sha256_hex(text.as_bytes()));
                let doc = GraphDoc::from_json_str(&text);
                let sha256 = hashing
                    .join()
                    .unwrap_or_else(|_| trust::sha256_hex(text.as_bytes()));
                (sha256, doc)
            })
        } else {
            (
                trust::sha256_hex(text.as_bytes()),
                GraphDoc::from_json_str(&text),
            )
        };
        let doc = doc.map_err(|e| failed(e.into()))?;
        Ok(Self::of_file_doc(path, &canonical, doc, Some(sha256), text))
    }

    /// The graph `doc`, shown from the file at `path` (maybe with edits not saved yet: the
    /// app's document), or no file's: the files it calls are read now, once.
    pub fn of_doc(doc: GraphDoc, path: Option<&Path>) -> GraphSource {
        match path.and_then(|path| Some((path, std::fs::canonicalize(path).ok()?))) {
            Some((path, canonical)) => {
                let text = serde_json::to_string(&doc).unwrap_or_default();
                Self::of_file_doc(path, &canonical, doc, None, text)
            }
            None => GraphSource {
                path: path.map(Path::to_path_buf),
                doc,
                fingerprint: None,
                tree: None,
                files: Arc::new(GraphFiles::snapshot(Vec::new())),
                on_disk: false,
            },
        }
    }

    /// A graph that came with the text of every file it calls (a queued request, a
    /// recorded run): nothing is read from this machine's disk.
    pub fn with_files(
        doc: GraphDoc,
        label: Option<&Path>,
        files: Vec<(String, String)>,
    ) -> GraphSource {
        let files = files
            .into_iter()
            .map(|(path, text)| (PathBuf::from(path), Ok(text)));
        GraphSource {
            path: label.map(Path::to_path_buf),
            doc,
            fingerprint: None,
            tree: None,
            files: Arc::new(GraphFiles::snapshot(files)),
            on_disk: false,
        }
    }

    fn of_file_doc(
        path: &Path,
        canonical: &Path,
        doc: GraphDoc,
        sha256: Option<String>,
        text: String,
    ) -> GraphSource {
        let doc = graph_call::with_absolute_paths(doc, Some(canonical));
        let tree = trust::calls_tree(canonical, &doc).ok();
        let fingerprint = match (&tree, sha256) {
            (Some(tree), Some(sha256)) => Some(Fingerprint {
                sha256,
                ..tree.root.clone()
            }),
            _ => None,
        };
        let mut texts = Vec::new();
        if let Some(tree) = &tree {
            texts.clone_from(&tree.texts);
            // A file that calls this one back finds it as read (and the cycle is reported).
            if !tree.root_aliases.is_empty() {
                for alias in tree.root_aliases.iter().chain([&tree.root.path]) {
                    texts.push((alias.clone(), Ok(text.clone())));
                }
            }
        }
        drop(text);
        GraphSource {
            path: Some(path.to_owned()),
            doc,
            fingerprint,
            tree,
            files: Arc::new(GraphFiles::snapshot(texts)),
            on_disk: true,
        }
    }

    /// The file, as named, when the graph is a file's.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn doc(&self) -> &GraphDoc {
        &self.doc
    }

    pub fn into_doc(self) -> GraphDoc {
        self.doc
    }

    /// The fingerprint of what was read (`None` for a document not read from its file).
    pub fn fingerprint(&self) -> Option<&Fingerprint> {
        self.fingerprint.as_ref()
    }

    /// Whether it was read from a file on this machine (its folder confines an untrusted
    /// graph's calls).
    pub fn is_on_disk(&self) -> bool {
        self.on_disk
    }

    /// The called files, as read with the graph.
    pub fn files(&self) -> &Arc<GraphFiles> {
        &self.files
    }

    /// What trusting this graph would allow, each with its target.
    pub fn needs(&self) -> TrustNeeds {
        trust::needs_in(&self.doc, self.path.as_deref(), self.tree.as_ref())
    }

    /// Whether its user trusts exactly what was read (recorded in `store`, or a shipped
    /// example). A document not read from its file is not trusted here.
    pub fn is_trusted_in(&self, store: Option<&TrustStore>) -> bool {
        let Some(fingerprint) = &self.fingerprint else {
            return false;
        };
        match store {
            Some(store) => store.is_trusted(fingerprint),
            None => trust::is_shipped_example(fingerprint),
        }
    }

    /// Whether `doc`, shown from the graph file at `file` (opened in the app), is what its
    /// user trusts: the file read once now is trusted (in `store`) and holds exactly `doc`.
    /// A file renamed over between opening and this check is not trusted for what it
    /// held before.
    pub fn shows_trusted(store: Option<&TrustStore>, doc: &GraphDoc, file: &Path) -> bool {
        let Ok(source) = GraphSource::read(file) else {
            return false;
        };
        source.is_trusted_in(store)
            && *source.doc() == graph_call::with_absolute_paths(doc.clone(), Some(file))
    }

    /// [`GraphSource::is_trusted_in`] the per-user trust store.
    pub fn is_trusted(&self) -> bool {
        match TrustStore::open_default() {
            Ok(store) => self.is_trusted_in(Some(&store)),
            Err(err) => {
                tracing::warn!("{err}");
                self.is_trusted_in(None)
            }
        }
    }
}
