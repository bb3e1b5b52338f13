//! Where per-user files live.

use std::path::PathBuf;

/// The per-user data directory (`~/.local/share/agentloom`), if there is a home.
pub fn data_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("dev", "agentloom", "agentloom").map(|d| d.data_dir().to_owned())
}
