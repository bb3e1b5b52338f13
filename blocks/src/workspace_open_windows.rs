//! The no-link open beneath the workspace on Windows: every folder from the workspace down
//! to the file is opened in turn with `FILE_FLAG_OPEN_REPARSE_POINT` (a symbolic link or
//! junction is opened itself, never followed) and refused if it is a reparse point; the
//! folders stay open without `FILE_SHARE_DELETE` until the file is open, so none of them can
//! be renamed or replaced by a link meanwhile. The file itself is opened the same way.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::windows::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_SHARE_READ, FILE_SHARE_WRITE,
};

use super::{Access, Entry, EntryKind, file_and_folders, names_below};

/// Never: every Windows this runs on has the calls it makes.
pub(super) fn unsupported(_: &std::io::Error) -> bool {
    false
}

fn refused(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_owned())
}

/// Fails when `file` is a symbolic link, junction or other reparse point.
fn not_a_link(file: File) -> std::io::Result<File> {
    if file.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        return Err(refused(
            "a symbolic link or junction is on the way: links are not followed",
        ));
    }
    Ok(file)
}

/// The folders from `root` down through `names`, each open (not deletable or renamable while
/// it is) and checked to be no link; the last one's path.
fn pin(root: &Path, names: &[&OsStr]) -> std::io::Result<(Vec<File>, PathBuf)> {
    let open_dir = |path: &Path| {
        OpenOptions::new()
            .read(true)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
            .open(path)
            .and_then(not_a_link)
    };
    let mut held = vec![open_dir(root)?];
    let mut path = root.to_owned();
    for name in names {
        path.push(name);
        let dir = open_dir(&path)?;
        if !dir.metadata()?.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "not a folder",
            ));
        }
        held.push(dir);
    }
    Ok((held, path))
}

pub(super) fn open(root: &Path, full: &Path, access: Access) -> std::io::Result<File> {
    let names = names_below(root, full)?;
    let (last, parents) = file_and_folders(&names)?;
    let (_held, dir) = pin(root, parents)?;
    let mut options = OpenOptions::new();
    match access {
        Access::Read => {
            options.read(true);
        }
        Access::Write { append } => {
            options
                .create(true)
                .write(true)
                .append(append)
                .truncate(false);
        }
    }
    let file = not_a_link(
        options
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(dir.join(last))?,
    )?;
    // Truncated only once known to be no link (opening a link opens the link itself).
    if let Access::Write { append: false } = access {
        file.set_len(0)?;
    }
    Ok(file)
}

pub(super) fn list_dir(root: &Path, full: &Path) -> std::io::Result<Vec<Entry>> {
    let (_held, dir) = pin(root, &names_below(root, full)?)?;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // A link or junction reads as a link here, never as what it points to.
        let kind = match entry.file_type() {
            Ok(kind) if kind.is_dir() && !kind.is_symlink() => EntryKind::Dir,
            Ok(kind) if kind.is_file() && !kind.is_symlink() => EntryKind::File,
            _ => EntryKind::Other,
        };
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind,
        });
    }
    Ok(entries)
}

pub(super) fn create_dir(root: &Path, parent: &Path, name: &str) -> std::io::Result<()> {
    let (_held, dir) = pin(root, &names_below(root, parent)?)?;
    std::fs::create_dir(dir.join(name))
}
