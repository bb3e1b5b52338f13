//! Opens a checked [`WorkspacePath`] without a race: the check resolved every link, so the
//! file is opened again relative to the workspace directory with no link followed at all
//! (Linux `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). A directory or file
//! swapped for a symbolic link between the check and the open makes the open fail instead
//! of leading outside the workspace.

use std::fs::File;

use crate::workspace_path::WorkspacePath;

/// How a file block opens its file.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Access {
    /// Never blocks on opening (a FIFO without a writer).
    Read,
    Write {
        append: bool,
    },
}

pub(crate) fn open(target: &WorkspacePath, access: Access) -> std::io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        match beneath::open(target, access) {
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {}
            result => return result,
        }
    }
    // Without openat2 (other systems, kernels before 5.6): the checked path as it is.
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
    options.open(&target.full)
}

#[cfg(target_os = "linux")]
mod beneath {
    use std::fs::File;

    use rustix::fs::{Mode, OFlags, ResolveFlags};

    use super::{Access, WorkspacePath};

    pub(super) fn open(target: &WorkspacePath, access: Access) -> std::io::Result<File> {
        let inside = target.full.strip_prefix(&target.root).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the path is not inside the workspace",
            )
        })?;
        let root = rustix::fs::open(
            &target.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
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
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        Ok(File::from(fd))
    }
}
