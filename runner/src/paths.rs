//! Where per-user files live.

use std::path::PathBuf;

/// The per-user data directory (`~/.local/share/agentloom` on Linux), if there is a home.
pub fn data_dir() -> Option<PathBuf> {
    agentloom_core::user_data_dir()
}
