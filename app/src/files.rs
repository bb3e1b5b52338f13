//! Files: open, save, export and import graph documents; the per-user data directory with
//! the autosave (crash recovery) and the last opened graph.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentloom_core::GraphDoc;

use crate::tasks::{BackgroundTasks, Report, Task};

pub use agentloom_runner::data_dir;

/// How an autosave file's name ends inside the data directory.
const AUTOSAVE_SUFFIX: &str = ".agentloom.json";
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
    agentloom_runner::save::write_graph_file(doc, path).map_err(|source| FileError::Write {
        path: path.to_owned(),
        source,
    })
}

/// When unsaved changes are next written to the data files.
pub(crate) struct AutosaveTimer {
    /// Due then (`None`: nothing to write).
    pub(crate) due: Option<Instant>,
    /// How long changes wait before they are written.
    pub(crate) delay: Duration,
}

/// Where unsaved work and the last-graph note are kept.
///
/// Each window autosaves into a file of its own (`autosave-<id>.agentloom.json`) and holds
/// an OS lock on its `.lock` file beside it while it lives: a crashed window's lock is gone
/// with its process, which is how the next start tells its unsaved work from a window that
/// is still open.
#[derive(Debug)]
pub struct DataFiles {
    pub dir: PathBuf,
    /// This window's autosave file, once claimed (first autosave or a recovery).
    slot: std::sync::Mutex<Option<AutosaveSlot>>,
}

/// One window's autosave file and the lock that says the window is alive.
#[derive(Debug)]
struct AutosaveSlot {
    file: PathBuf,
    lock_path: PathBuf,
    /// Held (locked) while this window lives; the OS releases it if the process dies.
    _lock: std::fs::File,
}

impl Drop for AutosaveSlot {
    fn drop(&mut self) {
        // The lock is released as the file closes; the autosave, if any, stays to be
        // recovered. (On Windows a file still open cannot be removed: best effort.)
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// What the autosave holds: the document and the file it belongs to.
#[derive(serde::Serialize, serde::Deserialize)]
struct Autosave {
    path: Option<PathBuf>,
    graph: serde_json::Value,
}

/// The name of a window's autosave: this process, and a count for its windows.
fn new_slot_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static WINDOWS: AtomicU32 = AtomicU32::new(0);
    let n = WINDOWS.fetch_add(1, Ordering::Relaxed);
    format!("autosave-{}-{n}", std::process::id())
}

/// The lock file of an autosave file (`autosave-1-0.agentloom.json` → `autosave-1-0.lock`).
fn lock_path_of(autosave: &Path) -> Option<PathBuf> {
    let name = autosave.file_name()?.to_str()?;
    let stem = name.strip_suffix(AUTOSAVE_SUFFIX)?;
    Some(autosave.with_file_name(format!("{stem}.lock")))
}

/// Locks `lock_path` for this window; `None` while another live window holds it.
fn try_lock(lock_path: &Path) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .ok()?;
    file.try_lock().ok()?;
    Some(file)
}

impl DataFiles {
    pub fn new(dir: PathBuf) -> Self {
        DataFiles {
            dir,
            slot: std::sync::Mutex::new(None),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<AutosaveSlot>> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This window's autosave file, claimed on first use.
    fn own_autosave(&self) -> Option<PathBuf> {
        let mut slot = self.slot();
        if slot.is_none() {
            let name = new_slot_name();
            let lock_path = self.dir.join(format!("{name}.lock"));
            let lock = try_lock(&lock_path)?;
            *slot = Some(AutosaveSlot {
                file: self.dir.join(format!("{name}{AUTOSAVE_SUFFIX}")),
                lock_path,
                _lock: lock,
            });
        }
        slot.as_ref().map(|s| s.file.clone())
    }

    /// Saves unsaved work into this window's autosave.
    pub fn autosave(&self, doc: &GraphDoc, path: Option<&Path>) -> Result<(), FileError> {
        let autosave = Autosave {
            path: path.map(Path::to_owned),
            graph: serde_json::from_str(&doc.to_json_string()).unwrap_or_default(),
        };
        let write_error = |file: &Path, source| FileError::Write {
            path: file.to_owned(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| write_error(&self.dir, e))?;
        let Some(file) = self.own_autosave() else {
            return Err(write_error(
                &self.dir,
                std::io::Error::other("cannot lock an autosave file of this window"),
            ));
        };
        let text = serde_json::to_string_pretty(&autosave).unwrap_or_default();
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(|e| write_error(&file, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| write_error(&file, e))
    }

    /// Unsaved work left by a window that did not end cleanly (the newest, if several);
    /// this window takes its autosave over, so no other window recovers it too.
    pub fn recover(&self) -> Option<(GraphDoc, Option<PathBuf>)> {
        let mut left: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&self.dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("autosave") && n.ends_with(AUTOSAVE_SUFFIX))
            })
            .map(|path| {
                let modified = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
                (modified, path)
            })
            .collect();
        left.sort();
        while let Some((_, file)) = left.pop() {
            let Some(lock_path) = lock_path_of(&file) else {
                continue;
            };
            // Locked: its window is still open.
            let Some(lock) = try_lock(&lock_path) else {
                continue;
            };
            let read = std::fs::read_to_string(&file)
                .ok()
                .and_then(|text| serde_json::from_str::<Autosave>(&text).ok())
                .and_then(|a| Some((GraphDoc::from_json_value(a.graph).ok()?, a.path)));
            let Some(recovered) = read else {
                drop(lock);
                let _ = std::fs::remove_file(&lock_path);
                continue;
            };
            *self.slot() = Some(AutosaveSlot {
                file,
                lock_path,
                _lock: lock,
            });
            return Some(recovered);
        }
        None
    }

    /// Forgets this window's autosave (after a save, a deliberate discard, or an undo back
    /// to what the file holds).
    pub fn clear_autosave(&self) {
        if let Some(slot) = self.slot().as_ref() {
            let _ = std::fs::remove_file(&slot.file);
        }
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

/// Whether a native file dialog can appear, one answer per process for every dialog of
/// the app. On Linux rfd asks the xdg desktop portal over D-Bus, then falls back to zenity
/// (GTK); with neither it returns nothing, just as if the person had cancelled, so the app
/// asks first and types paths in a prompt of its own instead.
static NATIVE_DIALOGS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether a native file dialog can appear (see [`NATIVE_DIALOGS`]): the answer found in
/// the background as the app started ([`find_native_dialogs`]), or, before that comes,
/// found out now and kept.
pub fn native_dialogs_available() -> bool {
    *NATIVE_DIALOGS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            zenity_on_path() || portal_shows_file_dialogs_now()
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    })
}

/// Finds out whether native file dialogs can appear, as a task on the app's runtime, and
/// keeps the answer for [`native_dialogs_available`]; it comes as [`Report::FileDialogs`]
/// (`None` if the task failed).
pub(crate) fn find_native_dialogs(tasks: &mut BackgroundTasks) -> Option<Task> {
    tasks
        .spawn(
            |_, _| async {
                if let Some(known) = NATIVE_DIALOGS.get() {
                    return Report::FileDialogs(Some(*known));
                }
                #[cfg(target_os = "linux")]
                let found = zenity_on_path() || portal_says(portal_file_chooser().await);
                #[cfg(not(target_os = "linux"))]
                let found = true;
                Report::FileDialogs(Some(*NATIVE_DIALOGS.get_or_init(|| found)))
            },
            |_| Report::FileDialogs(None),
        )
        .map_err(|err| tracing::debug!(error = %err, "file dialogs found out on first use"))
        .ok()
}

#[cfg(target_os = "linux")]
fn zenity_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("zenity").is_file()))
}

/// Starting the portal takes a moment; a hung one must not hang what waits for it.
#[cfg(target_os = "linux")]
const PORTAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The version of the desktop portal's file chooser on the session bus (started by the bus
/// when it is installed), asked on the runtime this runs on.
#[cfg(target_os = "linux")]
async fn portal_file_chooser() -> zbus::Result<u32> {
    let connection = zbus::connection::Builder::session()?
        .method_timeout(PORTAL_TIMEOUT)
        .build()
        .await?;
    let portal = zbus::fdo::PropertiesProxy::builder(&connection)
        .destination("org.freedesktop.portal.Desktop")?
        .path("/org/freedesktop/portal/desktop")?
        .build()
        .await?;
    let chooser = zbus::names::InterfaceName::try_from("org.freedesktop.portal.FileChooser")?;
    let version = portal.get(chooser, "version").await?;
    Ok(u32::try_from(version).unwrap_or(0))
}

/// [`portal_file_chooser`] asked without a runtime, on a thread of its own (a blocking D-Bus
/// connection must not be made on an async runtime's thread).
#[cfg(target_os = "linux")]
fn portal_shows_file_dialogs_now() -> bool {
    let asked = std::thread::spawn(|| -> zbus::Result<u32> {
        let connection = zbus::blocking::connection::Builder::session()?
            .method_timeout(PORTAL_TIMEOUT)
            .build()?;
        let portal = zbus::blocking::fdo::PropertiesProxy::builder(&connection)
            .destination("org.freedesktop.portal.Desktop")?
            .path("/org/freedesktop/portal/desktop")?
            .build()?;
        let chooser = zbus::names::InterfaceName::try_from("org.freedesktop.portal.FileChooser")?;
        let version = portal.get(chooser, "version")?;
        Ok(u32::try_from(version).unwrap_or(0))
    })
    .join();
    asked.is_ok_and(portal_says)
}

/// Whether the portal offers its file chooser: a portal without a backend that implements
/// it (only xdg-desktop-portal, say) has none, and would leave every dialog silently
/// cancelled.
#[cfg(target_os = "linux")]
fn portal_says(asked: zbus::Result<u32>) -> bool {
    match asked {
        Ok(version) => {
            tracing::debug!(version, "file dialogs through the desktop portal");
            true
        }
        Err(err) => {
            tracing::info!(error = %err, "no desktop portal with a file chooser: paths are typed in the app");
            false
        }
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
