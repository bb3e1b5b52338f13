//! The Knowledge window (View → Knowledge): the collections of the knowledge stores the
//! open graph's `knowledge.*` nodes name in its workspace (and `knowledge.sqlite` there),
//! and of the stores in the data folder's `knowledge` folder: each collection with its
//! embedding model, its documents, chunk counts and sizes. The search box searches the
//! chosen collection as the graph's own `knowledge.search` (or `knowledge.add`) node of
//! that collection is set up (embedding endpoint, model, credential): a one-node run
//! through the runner, not recorded; without such a node it searches by keywords only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};

use agentloom_blocks::knowledge::store::{Collection, DocumentInfo, KnowledgeStore};
use agentloom_core::{GraphDoc, Value, ValueMap};
use agentloom_runner::{Launch, Prepared, Trust, Workspace};

use agentloom_blocks::Registry;

use crate::document::Document;

/// The store file a `knowledge.*` node uses when its config names none.
const DEFAULT_STORE: &str = "knowledge.sqlite";
/// Hits asked of one search.
const SEARCH_HITS: u64 = 10;

/// The window's state: what was listed, the collection chosen, the search and its hits.
#[derive(Default)]
pub struct KnowledgeWindow {
    pub open: bool,
    /// `None` until listed (on opening, and on Refresh).
    stores: Option<Vec<StoreView>>,
    /// The chosen collection: the store's place in `stores` and the collection's name.
    chosen: Option<(usize, String)>,
    pub query: String,
    searching: Option<Receiver<Result<Vec<ShownHit>, String>>>,
    pub hits: Vec<ShownHit>,
    /// What the last search said (how it searched, or why it failed).
    pub status: String,
}

/// One knowledge store file and what it holds.
struct StoreView {
    path: PathBuf,
    /// Where it was found: "workspace" or "data folder".
    place: &'static str,
    collections: Vec<(Collection, Vec<DocumentInfo>)>,
    error: Option<String>,
}

/// A hit as shown.
#[derive(Clone, Debug, PartialEq)]
pub struct ShownHit {
    pub source: String,
    pub start: u64,
    pub end: u64,
    pub score: f64,
    pub text: String,
}

impl KnowledgeWindow {
    /// Lists the stores again when next shown.
    fn forget_listing(&mut self) {
        self.stores = None;
        self.chosen = None;
        self.hits.clear();
    }
}

/// The store files the open graph's knowledge nodes name in `workspace` (each once, those
/// that exist), then the `.sqlite` files of `<data folder>/knowledge`.
fn store_files(
    doc: &GraphDoc,
    workspace: &Path,
    data_dir: Option<&Path>,
) -> Vec<(PathBuf, &'static str)> {
    let mut files: Vec<(PathBuf, &'static str)> = Vec::new();
    let mut add = |path: PathBuf, place| {
        if path.is_file() && !files.iter().any(|(p, _)| *p == path) {
            files.push((path, place));
        }
    };
    add(workspace.join(DEFAULT_STORE), "workspace");
    for node in doc
        .nodes
        .iter()
        .filter(|n| n.block.starts_with("knowledge."))
    {
        let store = store_of(&node.config);
        if let Some(path) = store_file(&store, workspace, data_dir) {
            let place = if store.starts_with(DATA_PREFIX) {
                "data folder"
            } else {
                "workspace"
            };
            add(path, place);
        }
    }
    if let Some(folder) = data_dir.map(|d| d.join("knowledge"))
        && let Ok(entries) = std::fs::read_dir(&folder)
    {
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
            .collect();
        found.sort();
        for path in found {
            add(path, "data folder");
        }
    }
    files
}

/// A store setting naming a file of the data folder's `knowledge` folder: `data:NAME`.
const DATA_PREFIX: &str = "data:";

/// The file a node's `store` setting names: `data:NAME` in the data folder's `knowledge`
/// folder, anything else under the workspace.
fn store_file(store: &str, workspace: &Path, data_dir: Option<&Path>) -> Option<PathBuf> {
    match store.strip_prefix(DATA_PREFIX) {
        Some(name) => data_dir.map(|d| d.join("knowledge").join(name)),
        None => Some(workspace.join(store)),
    }
}

/// A node's `store` setting, or the default.
fn store_of(config: &agentloom_core::Config) -> String {
    config
        .get("store")
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_STORE)
        .to_owned()
}

fn list_store(path: PathBuf, place: &'static str) -> StoreView {
    let listed = KnowledgeStore::open(&path).and_then(|store| {
        store
            .collections()?
            .into_iter()
            .map(|c| {
                let documents = store.documents(&c.name)?;
                Ok((c, documents))
            })
            .collect::<Result<Vec<_>, _>>()
    });
    match listed {
        Ok(collections) => StoreView {
            path,
            place,
            collections,
            error: None,
        },
        Err(err) => StoreView {
            path,
            place,
            collections: Vec::new(),
            error: Some(err.to_string()),
        },
    }
}

/// `bytes` for people: 512 B, 3.4 KB, 1.2 MB.
fn size_text(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "a size shown to one decimal")]
    let value = bytes as f64;
    if bytes < 1_000 {
        format!("{bytes} B")
    } else if bytes < 1_000_000 {
        format!("{:.1} KB", value / 1e3)
    } else {
        format!("{:.1} MB", value / 1e6)
    }
}

/// The graph one search runs: `knowledge.search` set up as `settings` says (the graph's
/// node of that collection, else keywords only) on the store `file` of `workspace`.
fn search_graph(
    settings: Option<&agentloom_core::Config>,
    file: &str,
    collection: &Collection,
) -> GraphDoc {
    let mut config: serde_json::Map<String, serde_json::Value> = settings
        .map(|c| c.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    // Only what searching takes: the node's ingest settings (chunks, filters) stay out.
    config.retain(|key, _| {
        matches!(
            key.as_str(),
            "provider"
                | "model"
                | "base_url"
                | "credential"
                | "timeout_ms"
                | "max_retries"
                | "price_in"
                | "mode"
        )
    });
    if settings.is_none() {
        config.insert("mode".into(), "keyword".into());
        config.insert("model".into(), collection.model.name.clone().into());
    }
    config.insert("store".into(), file.into());
    config.insert("collection".into(), collection.name.clone().into());
    config.insert("k".into(), SEARCH_HITS.into());
    let graph = serde_json::json!({
        "format": "agentloom.graph", "version": 1, "name": "Knowledge search",
        "nodes": [
            {"id": "query", "block": "graph.input", "position": [0, 0],
             "config": {"name": "query", "type": "text"}},
            {"id": "search", "block": "knowledge.search", "position": [200, 0], "config": config},
            {"id": "hits", "block": "graph.output", "position": [400, 0],
             "config": {"name": "hits"}}
        ],
        "edges": [
            {"from": ["query", "value"], "to": ["search", "query"]},
            {"from": ["search", "hits"], "to": ["hits", "value"]}
        ]
    });
    GraphDoc::from_json_str(&graph.to_string()).unwrap_or_default()
}

/// The hits of a search run's `hits` output.
fn shown_hits(hits: &Value) -> Vec<ShownHit> {
    hits.to_json()
        .as_array()
        .map(|hits| {
            hits.iter()
                .map(|hit| ShownHit {
                    source: hit["source"].as_str().unwrap_or_default().to_owned(),
                    start: hit["start"].as_u64().unwrap_or_default(),
                    end: hit["end"].as_u64().unwrap_or_default(),
                    score: hit["score"].as_f64().unwrap_or_default(),
                    text: hit["text"].as_str().unwrap_or_default().to_owned(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the Knowledge window reads of the app: the graph shown, where its runs go, and how
/// a search runs.
pub(crate) struct KnowledgeEnv<'a> {
    pub(crate) document: &'a Document,
    /// The workspace the graph's runs use.
    pub(crate) workspace: PathBuf,
    /// The data folder (`data:` stores live in its `knowledge/`).
    pub(crate) data_dir: Option<&'a Path>,
    pub(crate) trusted: bool,
    pub(crate) runtime: Option<&'a tokio::runtime::Runtime>,
    pub(crate) catalog: &'a Arc<Registry>,
    pub(crate) credentials: &'a agentloom_runner::Credentials,
}

impl KnowledgeWindow {
    /// Starts searching the chosen collection for the typed query.
    fn start_search(&mut self, env: &KnowledgeEnv) {
        let doc = env.document.to_doc();
        let workspace = &env.workspace;
        let data_dir = env.data_dir;
        let trust = Trust::of(env.trusted, env.document.path.as_deref());
        let runtime = env.runtime.map(|r| r.handle().clone());
        let (Some((store_index, name)), Some(stores)) = (&self.chosen, &self.stores) else {
            return;
        };
        let query = self.query.trim().to_owned();
        if query.is_empty() {
            self.status = "Type what to look for.".to_owned();
            return;
        }
        let Some(store) = stores.get(*store_index) else {
            return;
        };
        let Some((collection, _)) = store.collections.iter().find(|(c, _)| &c.name == name) else {
            return;
        };
        let (Some(folder), Some(file)) = (store.path.parent(), store.path.file_name()) else {
            return;
        };
        let file = file.to_string_lossy().into_owned();
        // The graph's own node for this store and collection gives the embedding settings;
        // a search node before an add node.
        let mut configured: Vec<&agentloom_core::NodeDoc> = doc
            .nodes
            .iter()
            .filter(|n| matches!(n.block.as_str(), "knowledge.search" | "knowledge.add"))
            .filter(|n| {
                store_file(&store_of(&n.config), workspace, data_dir).as_deref()
                    == Some(store.path.as_path())
            })
            .filter(|n| {
                n.config
                    .get("collection")
                    .and_then(serde_json::Value::as_str)
                    == Some(name)
            })
            .collect();
        configured.sort_by_key(|n| n.block != "knowledge.search");
        let settings = configured.first().map(|n| &n.config);
        self.status = match settings {
            Some(_) => format!("Searching with {} (as the graph's node sets it up)…", collection.model.name),
            None => "Searching by keywords only: the open graph has no knowledge node of this collection to take its embedding settings from…".to_owned(),
        };
        let graph = search_graph(settings, &file, collection);
        let prepared = Prepared::with_catalog(env.catalog.clone(), graph, trust, env.credentials);
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(problems) => {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                self.status = format!("Cannot search: {}", problems.join("; "));
                return;
            }
        };
        let Some(runtime) = runtime else {
            self.status = "Cannot search: the run threads did not start.".to_owned();
            return;
        };
        let (sender, receiver) = channel();
        let inputs = ValueMap::from([("query".to_owned(), Value::text(query))]);
        let folder = folder.to_path_buf();
        runtime.spawn(async move {
            let launched = prepared
                .launch(Launch::new(inputs, Workspace::Shared(folder)))
                .await;
            let report = launched.report;
            let outcome = match report.outputs.get("hits") {
                Some(hits) if report.error.is_none() => Ok(shown_hits(hits)),
                _ => Err(report
                    .nodes
                    .iter()
                    .find_map(|n| n.error.clone())
                    .or(report.error)
                    .unwrap_or_else(|| "the search gave no hits".to_owned())),
            };
            let _ = sender.send(outcome);
        });
        self.searching = Some(receiver);
        self.hits.clear();
    }

    /// The Knowledge window, when open.
    pub(crate) fn show(&mut self, ctx: &egui::Context, env: &KnowledgeEnv) {
        if !self.open {
            return;
        }
        if self.stores.is_none() {
            let doc = env.document.to_doc();
            let stores = store_files(&doc, &env.workspace, env.data_dir)
                .into_iter()
                .map(|(path, place)| list_store(path, place))
                .collect();
            self.stores = Some(stores);
        }
        if let Some(receiver) = &self.searching {
            match receiver.try_recv() {
                Ok(Ok(hits)) => {
                    self.status = match hits.len() {
                        0 => "No passage matches.".to_owned(),
                        1 => "1 hit.".to_owned(),
                        n => format!("{n} hits."),
                    };
                    self.hits = hits;
                    self.searching = None;
                }
                Ok(Err(error)) => {
                    self.status = format!("Search failed: {error}");
                    self.searching = None;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => ctx.request_repaint(),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    self.status = "Search failed: it stopped before answering.".to_owned();
                    self.searching = None;
                }
            }
        }
        let mut open = true;
        let mut search = false;
        egui::Window::new("Knowledge")
            .open(&mut open)
            .default_width(560.0)
            .default_height(480.0)
            .show(ctx, |ui| {
                search = self.window_ui(ui);
            });
        if search {
            self.start_search(env);
        }
        self.open = open;
        if !open {
            self.forget_listing();
        }
    }
}

impl KnowledgeWindow {
    /// The window's content; whether a search was asked for.
    fn window_ui(&mut self, ui: &mut egui::Ui) -> bool {
        let mut search = false;
        ui.horizontal(|ui| {
            ui.label("Collections of the workspace and the data folder.");
            if ui.button("Refresh").clicked() {
                self.forget_listing();
            }
        });
        let Some(stores) = &self.stores else {
            return false;
        };
        if stores.is_empty() {
            ui.label("No knowledge store yet: run a graph with a knowledge.add node (its store file is made in the workspace), or put one in the data folder's knowledge folder.");
            return false;
        }
        let mut chosen = self.chosen.clone();
        egui::ScrollArea::vertical()
            .id_salt("knowledge collections")
            .max_height(200.0)
            .show(ui, |ui| {
                for (index, store) in stores.iter().enumerate() {
                    ui.strong(format!("{} ({})", store.path.display(), store.place));
                    if let Some(error) = &store.error {
                        ui.colored_label(ui.visuals().error_fg_color, error);
                    }
                    if store.collections.is_empty() && store.error.is_none() {
                        ui.label("No collection.");
                    }
                    for (collection, _) in &store.collections {
                        let label = format!(
                            "{} — {} documents, {} chunks, {} · {} ({} dimensions)",
                            collection.name,
                            collection.documents,
                            collection.chunks,
                            size_text(collection.text_bytes),
                            collection.model.name,
                            collection.model.dimensions
                        );
                        let is_chosen = chosen.as_ref() == Some(&(index, collection.name.clone()));
                        if ui.selectable_label(is_chosen, label).clicked() {
                            chosen = Some((index, collection.name.clone()));
                        }
                    }
                }
            });
        if chosen != self.chosen {
            self.chosen = chosen;
            self.hits.clear();
            self.status.clear();
        }
        let Some((index, name)) = &self.chosen else {
            ui.label("Choose a collection to see its documents and search it.");
            return false;
        };
        let Some((_, documents)) = stores
            .get(*index)
            .and_then(|s| s.collections.iter().find(|(c, _)| &c.name == name))
        else {
            return false;
        };
        ui.separator();
        egui::ScrollArea::vertical()
            .id_salt("knowledge documents")
            .max_height(120.0)
            .show(ui, |ui| {
                egui::Grid::new("knowledge documents grid")
                    .striped(true)
                    .show(ui, |ui| {
                        ui.strong("Document");
                        ui.strong("Chunks");
                        ui.strong("Size");
                        ui.end_row();
                        for document in documents {
                            ui.label(&document.source);
                            ui.label(document.chunks.to_string());
                            ui.label(size_text(document.text_bytes));
                            ui.end_row();
                        }
                    });
            });
        ui.separator();
        ui.horizontal(|ui| {
            let label = ui.label("Query");
            let field = ui
                .add(
                    egui::TextEdit::singleline(&mut self.query)
                        .hint_text("Search this collection")
                        .desired_width(ui.available_width() - 80.0),
                )
                .labelled_by(label.id);
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            let busy = self.searching.is_some();
            if ui.add_enabled(!busy, egui::Button::new("Search")).clicked() || (entered && !busy) {
                search = true;
            }
        });
        if !self.status.is_empty() {
            ui.label(&self.status);
        }
        egui::ScrollArea::vertical()
            .id_salt("knowledge hits")
            .show(ui, |ui| {
                for (number, hit) in self.hits.iter().enumerate() {
                    ui.strong(format!(
                        "[{}] {} (bytes {}–{}) · score {:.4}",
                        number + 1,
                        hit.source,
                        hit.start,
                        hit.end,
                        hit.score
                    ));
                    ui.label(agentloom_core::clip_chars(hit.text.trim(), 600));
                    ui.add_space(4.0);
                }
            });
        search
    }
}

#[cfg(test)]
mod tests {
    use super::size_text;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size_text(512), "512 B");
        assert_eq!(size_text(3_400), "3.4 KB");
        assert_eq!(size_text(1_250_000), "1.2 MB");
    }
}
