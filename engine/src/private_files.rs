//! Files and folders Agentloom creates in the data directory (the run log, the trusted
//! files, the credential index, the examples) are the user's alone: on Unix, folders 0700
//! and files 0600 from the moment they exist, never readable by other users in between.
//!
//! On Windows a file created under the user profile (`%APPDATA%`) inherits the profile's
//! access list, which already grants only the user, the administrators and the system;
//! nothing more is done there.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;

/// Creates `dir` and every missing folder above it, each readable by the user alone.
/// Folders that exist already keep their permissions.
pub fn create_dir_all(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Options that create a file readable and writable by the user alone.
pub fn open_options() -> OpenOptions {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    options
}

/// Creates (or truncates) `path` as a file of the user alone.
pub fn create(path: &Path) -> std::io::Result<File> {
    open_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// Writes `contents` to `path`, created as a file of the user alone.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    create(path)?.write_all(contents.as_ref())
}

/// Takes group and other permissions off `path` if it has any (a file an earlier version
/// created readable by all). A file that is missing or not the user's is left alone.
pub fn restrict_to_owner(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        let mode = meta.permissions().mode();
        if meta.is_file() && mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_the_users_alone() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&nested), 0o700);
        let file = nested.join("f.json");
        write(&file, "{}").unwrap();
        assert_eq!(mode(&file), 0o600);
        let old = nested.join("old.json");
        std::fs::write(&old, "x").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        restrict_to_owner(&old).unwrap();
        assert_eq!(mode(&old), 0o600);
    }
}
