//! How the canvas is viewed, as the person set it in the View menu and kept between
//! sessions: the minimap shown or not, and what the plain mouse wheel does.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The View menu's canvas settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewPrefs {
    /// The minimap is shown in the canvas's corner.
    pub minimap: bool,
    /// The plain wheel zooms (as in ComfyUI and n8n) instead of scrolling; Ctrl+wheel
    /// zooms either way.
    pub wheel_zooms: bool,
}

impl Default for ViewPrefs {
    fn default() -> Self {
        ViewPrefs {
            minimap: true,
            wheel_zooms: false,
        }
    }
}

/// The file they are kept in, in the app's data directory.
pub fn prefs_file(data_dir: &Path) -> PathBuf {
    data_dir.join("view.json")
}

impl ViewPrefs {
    /// The settings kept in `file`; the defaults when there are none or they cannot be
    /// read (a damaged file is replaced at the next change).
    pub fn load(file: Option<&Path>) -> Self {
        file.and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }

    /// Keeps them in `file`; why not, when that fails.
    pub fn save(&self, file: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))
    }
}
