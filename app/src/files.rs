//! Files: open, save, export and import graph documents; the per-user data directory with
//! the autosave (crash recovery) and the last opened graph.

use std::path::{Path, PathBuf};

use agentloom_core::GraphDoc;

pub use agentloom_runner::data_dir;

/// The autosave file inside the data directory.
const AUTOSAVE_FILE: &str = "autosave.agentloom.json";
/// Remembers which graph was open last.
const LAST_FILE: &str = "last-graph.txt";

/// A file operation that failed, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a graph Agentloom can open: {source}", path.display())]
    Load {
        path: PathBuf,
        source: agentloom_core::LoadError,
    },
}

/// Reads a graph file.
pub fn load_graph(path: &Path) -> Result<GraphDoc, FileError> {
    use agentloom_core::GraphFileError;
    let path = path.to_owned();
    agentloom_runner::load_graph(&path).map_err(|err| match err.source {
        GraphFileError::Io(source) => FileError::Read { path, source },
        GraphFileError::Load(source) => FileError::Load { path, source },
        refused @ (GraphFileError::TooLarge { .. } | GraphFileError::NotAFile { .. }) => {
            FileError::Read {
                path,
                source: std::io::Error::other(refused.to_string()),
            }
        }
    })
}

/// Writes a graph file in its canonical form (atomically: a temporary file, then rename).
/// The document holds credential names only, never secrets, so saving and exporting write
/// the same shareable JSON.
pub fn save_graph(doc: &GraphDoc, path: &Path) -> Result<(), FileError> {
    let write_error = |source| FileError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).map_err(write_error)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, doc.to_json_string()).map_err(write_error)?;
    std::fs::rename(&tmp, path).map_err(write_error)
}

/// Where unsaved work and the last-graph note are kept.
#[derive(Clone, Debug)]
pub struct DataFiles {
    pub dir: PathBuf,
}

/// What the autosave holds: the document and the file it belongs to.
#[derive(serde::Serialize, serde::Deserialize)]
struct Autosave {
    path: Option<PathBuf>,
    graph: serde_json::Value,
}

impl DataFiles {
    pub fn new(dir: PathBuf) -> Self {
        DataFiles { dir }
    }

    /// Saves unsaved work.
    pub fn autosave(&self, doc: &GraphDoc, path: Option<&Path>) -> Result<(), FileError> {
        let autosave = Autosave {
            path: path.map(Path::to_owned),
            graph: serde_json::from_str(&doc.to_json_string()).unwrap_or_default(),
        };
        let file = self.dir.join(AUTOSAVE_FILE);
        let write_error = |source| FileError::Write {
            path: file.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(write_error)?;
        let text = serde_json::to_string_pretty(&autosave).unwrap_or_default();
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(write_error)?;
        std::fs::rename(&tmp, &file).map_err(write_error)
    }

    /// Unsaved work left by a session that did not end cleanly.
    pub fn recover(&self) -> Option<(GraphDoc, Option<PathBuf>)> {
        let text = std::fs::read_to_string(self.dir.join(AUTOSAVE_FILE)).ok()?;
        let autosave: Autosave = serde_json::from_str(&text).ok()?;
        let doc = GraphDoc::from_json_value(autosave.graph).ok()?;
        Some((doc, autosave.path))
    }

    /// Forgets the autosave (after a save, or a deliberate discard).
    pub fn clear_autosave(&self) {
        let _ = std::fs::remove_file(self.dir.join(AUTOSAVE_FILE));
    }

    pub fn remember_last(&self, path: &Path) {
        let _ = std::fs::create_dir_all(&self.dir);
        if let Err(err) =
            std::fs::write(self.dir.join(LAST_FILE), path.to_string_lossy().as_bytes())
        {
            tracing::warn!(error = %err, "could not remember the last graph");
        }
    }

    pub fn last_graph(&self) -> Option<PathBuf> {
        let text = std::fs::read_to_string(self.dir.join(LAST_FILE)).ok()?;
        let path = PathBuf::from(text.trim());
        path.exists().then_some(path)
    }
}

/// Whether a native file dialog can appear. On Linux rfd asks the xdg desktop portal over
/// D-Bus, then falls back to zenity; with neither it returns nothing, just as if the person
/// had cancelled, so the app asks first and types paths in a prompt of its own instead.
pub fn native_dialogs_available() -> bool {
    #[cfg(target_os = "linux")]
    {
        let zenity = std::env::var_os("PATH").is_some_and(|paths| {
            std::env::split_paths(&paths).any(|dir| dir.join("zenity").is_file())
        });
        zenity || portal_on_session_bus()
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Whether the session bus has (or can start) the desktop portal.
#[cfg(target_os = "linux")]
fn portal_on_session_bus() -> bool {
    const PORTAL: &str = "org.freedesktop.portal.Desktop";
    // A blocking D-Bus connection must not be made on an async runtime's thread.
    let asked = std::thread::spawn(|| -> zbus::Result<bool> {
        let connection = zbus::blocking::Connection::session()?;
        let bus = zbus::blocking::fdo::DBusProxy::new(&connection)?;
        let portal = zbus::names::BusName::try_from(PORTAL)?;
        if bus.name_has_owner(portal)? {
            return Ok(true);
        }
        Ok(bus
            .list_activatable_names()?
            .iter()
            .any(|name| name.as_str() == PORTAL))
    })
    .join();
    match asked {
        Ok(Ok(found)) => found,
        Ok(Err(err)) => {
            tracing::info!(error = %err, "no session bus to reach the file dialog portal");
            false
        }
        Err(_) => false,
    }
}

/// A native "open" dialog for graph files.
pub fn pick_open(title: &str) -> Option<PathBuf> {
    rfd::FileDialog::new()
        .set_title(title)
        .add_filter("Agentloom graph", &["json"])
        .pick_file()
}

/// A native "save" dialog for graph files.
pub fn pick_save(title: &str, file_name: &str) -> Option<PathBuf> {
    rfd::FileDialog::new()
        .set_title(title)
        .add_filter("Agentloom graph", &["json"])
        .set_file_name(file_name)
        .save_file()
}
