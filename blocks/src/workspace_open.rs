//! Opens a checked workspace path (its canonical workspace `root` and the `full` path the
//! check resolved) without a race: the check resolved every link, so the
//! file is opened again relative to the workspace directory with no link followed at all
//! (Linux `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). A directory or file
//! swapped for a symbolic link between the check and the open makes the open fail instead
//! of leading outside the workspace. macOS walks the path one name at a time with
//! `O_NOFOLLOW` (`workspace_open_walk.rs`), Windows pins each folder and refuses reparse
//! points (`workspace_open_windows.rs`).

use std::fs::File;
use std::path::Path;

/// An entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    /// A link, pipe, socket or device: listed, never followed.
    Other,
}

/// How a file block opens its file.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Access {
    /// Never blocks on opening (a FIFO without a writer).
    Read,
    Write {
        append: bool,
    },
}

pub(crate) fn open(root: &Path, full: &Path, access: Access) -> std::io::Result<File> {
    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    {
        match beneath::open(root, full, access) {
            Err(err) if beneath::unsupported(&err) => {}
            result => return result,
        }
    }
    // Without openat2 (kernels before 5.6, other systems): the checked path as it is.
    let mut options = std::fs::OpenOptions::new();
    match access {
        Access::Read => {
            options.read(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt as _;
                options.custom_flags(libc::O_NONBLOCK);
            }
        }
        Access::Write { append } => {
            options
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append);
        }
    }
    options.open(full)
}

/// The entries of a checked folder, read from the folder opened as [`open`] does; an entry's
/// kind is its own (a link is never followed).
pub(crate) fn list_dir(root: &Path, full: &Path) -> std::io::Result<Vec<Entry>> {
    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    {
        match beneath::list_dir(root, full) {
            Err(err) if beneath::unsupported(&err) => {}
            result => return result,
        }
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(full)? {
        let entry = entry?;
        let kind = match entry.file_type() {
            Ok(kind) if kind.is_dir() => EntryKind::Dir,
            Ok(kind) if kind.is_file() => EntryKind::File,
            _ => EntryKind::Other,
        };
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind,
        });
    }
    Ok(entries)
}

/// Makes folder `name` in the checked folder `parent` (the workspace root when `parent` is
/// the root), reaching `parent` as [`open`] does: a link swapped in for it fails the call
/// instead of making the folder elsewhere.
pub(crate) fn create_dir(root: &Path, parent: &Path, name: &str) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "macos", windows))]
    {
        match beneath::create_dir(root, parent, name) {
            Err(err) if beneath::unsupported(&err) => {}
            result => return result,
        }
    }
    let _ = root;
    std::fs::create_dir(parent.join(name))
}

/// The entries of an open folder, each of its own kind (a link is never followed).
#[cfg(unix)]
fn entries_of(dir: &std::os::fd::OwnedFd) -> std::io::Result<Vec<Entry>> {
    use rustix::fs::{AtFlags, Dir, FileType};
    let mut entries = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            // Some file systems leave the type out of the listing: ask without following.
            kind = rustix::fs::statat(dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .map(|stat| FileType::from_raw_mode(stat.st_mode))?;
        }
        let kind = match kind {
            FileType::Directory => EntryKind::Dir,
            FileType::RegularFile => EntryKind::File,
            _ => EntryKind::Other,
        };
        entries.push(Entry { name, kind });
    }
    Ok(entries)
}

/// The names of the checked path `full` below `root`, which it must lie in (`..` is refused),
/// split into the last one and the folders before it: how the walks below go down one
/// folder at a time.
#[cfg(any(target_os = "macos", windows, all(test, target_os = "linux")))]
fn names_below<'a>(root: &Path, full: &'a Path) -> std::io::Result<Vec<&'a std::ffi::OsStr>> {
    use std::path::Component;
    let refused = || {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the path is not inside the workspace",
        )
    };
    let inside = full.strip_prefix(root).map_err(|_| refused())?;
    inside
        .components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(refused()),
        })
        .collect()
}

/// The file's name and the folders on its way; the workspace itself is no file.
#[cfg(any(target_os = "macos", windows, all(test, target_os = "linux")))]
fn file_and_folders<'n, 'a>(
    names: &'n [&'a std::ffi::OsStr],
) -> std::io::Result<(&'a std::ffi::OsStr, &'n [&'a std::ffi::OsStr])> {
    let (last, folders) = names.split_last().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "the workspace itself is not a file",
        )
    })?;
    Ok((last, folders))
}

#[cfg(any(target_os = "macos", all(test, target_os = "linux")))]
#[path = "workspace_open_walk.rs"]
mod walk;
#[cfg(target_os = "macos")]
use walk as beneath;

#[cfg(windows)]
#[path = "workspace_open_windows.rs"]
mod beneath;

#[cfg(target_os = "linux")]
mod beneath {
    use std::fs::File;

    use std::os::fd::OwnedFd;
    use std::path::Path;

    use rustix::fs::{Mode, OFlags, ResolveFlags};

    use super::{Access, Entry};

    /// openat2 is missing (Linux before 5.6): the checked path is opened as it is.
    pub(super) fn unsupported(err: &std::io::Error) -> bool {
        err.raw_os_error() == Some(libc::ENOSYS)
    }

    const NO_LINKS: ResolveFlags = ResolveFlags::BENEATH
        .union(ResolveFlags::NO_SYMLINKS)
        .union(ResolveFlags::NO_MAGICLINKS);

    /// `full` relative to `root`, which it must lie in.
    fn inside<'a>(root: &Path, full: &'a Path) -> std::io::Result<&'a Path> {
        full.strip_prefix(root).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the path is not inside the workspace",
            )
        })
    }

    fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
        Ok(rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?)
    }

    /// The folder `full` inside `root`, opened with no link followed.
    fn open_dir(root: &Path, full: &Path) -> std::io::Result<OwnedFd> {
        let inside = inside(root, full)?;
        let root = open_root(root)?;
        let path = if inside.as_os_str().is_empty() {
            Path::new(".")
        } else {
            inside
        };
        Ok(rustix::fs::openat2(
            &root,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            NO_LINKS,
        )?)
    }

    pub(super) fn list_dir(root: &Path, full: &Path) -> std::io::Result<Vec<Entry>> {
        super::entries_of(&open_dir(root, full)?)
    }

    pub(super) fn create_dir(root: &Path, parent: &Path, name: &str) -> std::io::Result<()> {
        let parent = open_dir(root, parent)?;
        Ok(rustix::fs::mkdirat(
            &parent,
            name,
            Mode::from_raw_mode(0o777),
        )?)
    }

    pub(super) fn open(root: &Path, full: &Path, access: Access) -> std::io::Result<File> {
        let inside = inside(root, full)?;
        let root = open_root(root)?;
        let flags = OFlags::CLOEXEC
            | match access {
                Access::Read => OFlags::RDONLY | OFlags::NONBLOCK,
                Access::Write { append: true } => OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND,
                Access::Write { append: false } => OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
            };
        let fd = rustix::fs::openat2(
            &root,
            inside,
            flags,
            // openat2 refuses a mode without O_CREAT.
            match access {
                Access::Read => Mode::empty(),
                Access::Write { .. } => Mode::from_raw_mode(0o666),
            },
            NO_LINKS,
        )?;
        Ok(File::from(fd))
    }
}
