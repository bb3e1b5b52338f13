//! Where the user's own files live, one answer for every part of Agentloom: the run log,
//! the credential index, the trust list and the price file all ask here, so they are found
//! in the same folders on every system (the conventions of the `directories` crate).
//!
//! | system  | data                                          | config              | cache                   |
//! |---------|-----------------------------------------------|---------------------|-------------------------|
//! | Linux   | `~/.local/share/agentloom`                    | `~/.config/agentloom` | `~/.cache/agentloom`  |
//! | macOS   | `~/Library/Application Support/dev.agentloom.agentloom` | the same  | `~/Library/Caches/dev.agentloom.agentloom` |
//! | Windows | `%APPDATA%\agentloom\agentloom\data`          | `…\agentloom\config` | `%LOCALAPPDATA%\agentloom\agentloom\cache` |
//!
//! (`XDG_DATA_HOME`, `XDG_CONFIG_HOME` and `XDG_CACHE_HOME` move them on Linux.)

use std::path::{Path, PathBuf};

/// The per-user folders of Agentloom.
#[derive(Clone, Debug)]
pub struct UserDirs(directories::ProjectDirs);

impl UserDirs {
    /// The folders of the user running this process; `None` when no home folder is known.
    pub fn of_this_user() -> Option<UserDirs> {
        directories::ProjectDirs::from("dev", "agentloom", "agentloom").map(UserDirs)
    }

    /// Files the user keeps: the run log, the credential index, evaluations.
    pub fn data(&self) -> &Path {
        self.0.data_dir()
    }

    /// Settings the user writes: the price file, the trust list.
    pub fn config(&self) -> &Path {
        self.0.config_dir()
    }

    /// Files that can be made again.
    pub fn cache(&self) -> &Path {
        self.0.cache_dir()
    }
}

/// The per-user data folder; `None` when no home folder is known.
pub fn user_data_dir() -> Option<PathBuf> {
    UserDirs::of_this_user().map(|dirs| dirs.data().to_owned())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn on_linux_the_folders_follow_the_xdg_variables_and_name_agentloom() {
        // Read, not set: the variables of this process are shared with other tests.
        let dirs = UserDirs::of_this_user().unwrap();
        for (dir, variable, default) in [
            (dirs.data(), "XDG_DATA_HOME", ".local/share"),
            (dirs.config(), "XDG_CONFIG_HOME", ".config"),
            (dirs.cache(), "XDG_CACHE_HOME", ".cache"),
        ] {
            let base = std::env::var_os(variable)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(default));
            assert_eq!(dir, base.join("agentloom"));
        }
        assert_eq!(user_data_dir().unwrap(), dirs.data());
    }
}
