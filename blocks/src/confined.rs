//! The one way files inside a workspace directory are read, written and listed: by
//! `file.read` and `file.write`, the agent's `read_file`/`write_file`/`list_files`, and
//! `serve`'s task directories.
//!
//! A path is checked (relative, no `..`, no link leading outside: [`crate::workspace_path`]),
//! then opened again beneath the workspace with no link followed at all
//! ([`crate::workspace_open`]), so a directory swapped for a symbolic link in between makes
//! the open fail rather than lead outside. Reads open without blocking, take regular files
//! only (not a FIFO or a device, which could block or never end), and never hold more than
//! their cap in memory.
//!
//! A workspace that would put every file of the machine or of the user in reach — `/`, the
//! home folder or a folder holding it — is refused ([`refuse_broad_workspace`]), here and by
//! run_code, whichever door chose it.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use agentloom_core::BlockError;

use crate::workspace_open::{self, Access};
pub use crate::workspace_open::{Entry, EntryKind};
pub use crate::workspace_path::refuse_broad_workspace;
use crate::workspace_path::{self, WorkspacePath, io_reason};

/// What to do with a file larger than the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverCap {
    /// Refuse to read it.
    Refuse,
    /// Read its first `max_bytes` and say it was cut.
    Cut,
}

/// A file read from a workspace.
#[derive(Debug)]
pub struct ReadFile {
    /// The path relative to the workspace, with `/` separators.
    pub relative: String,
    pub bytes: Vec<u8>,
    /// The file's size when it was opened; more than `bytes.len()` when it was cut.
    pub size: u64,
}

impl ReadFile {
    /// Whether only the first part of the file was read.
    pub fn was_cut(&self) -> bool {
        self.size > self.bytes.len() as u64
    }
}

/// Why a read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The path is refused or cannot be resolved (the message says why).
    Path(BlockError),
    /// A pipe, socket, device or directory.
    NotRegular { relative: String },
    /// Larger than the cap (with [`OverCap::Refuse`]).
    TooBig { relative: String, size: u64 },
    Io {
        relative: String,
        err: std::io::Error,
    },
}

impl ReadError {
    /// The error in words; `cap` names the limit for a file too big, e.g. "the limit of 100
    /// bytes".
    pub fn describe(&self, workspace: &Path, cap: &str) -> String {
        match self {
            ReadError::Path(err) => err.message.clone(),
            ReadError::NotRegular { relative } => format!(
                "cannot read `{relative}`: it is not a regular file (a pipe, socket, device or directory); only regular files are read"
            ),
            ReadError::TooBig { relative, size } => {
                format!("cannot read `{relative}`: it is {size} bytes, more than {cap}")
            }
            ReadError::Io { relative, err } => format!(
                "cannot read `{relative}`: {} (workspace: {})",
                io_reason(err),
                workspace.display()
            ),
        }
    }
}

/// Reads `relative` inside `workspace`: a regular file, at most `max_bytes` of it.
pub async fn read(
    workspace: &Path,
    relative: &str,
    max_bytes: u64,
    over_cap: OverCap,
) -> Result<ReadFile, ReadError> {
    let target = workspace_path::for_read(workspace, relative).map_err(ReadError::Path)?;
    blocking(move || read_checked(&target, max_bytes, over_cap)).await
}

fn read_checked(
    target: &WorkspacePath,
    max_bytes: u64,
    over_cap: OverCap,
) -> Result<ReadFile, ReadError> {
    let io = |err| ReadError::Io {
        relative: target.relative.clone(),
        err,
    };
    let (file, size) = open_regular(target)?;
    let too_big = |size| ReadError::TooBig {
        relative: target.relative.clone(),
        size,
    };
    if size > max_bytes && over_cap == OverCap::Refuse {
        return Err(too_big(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(max_bytes)).unwrap_or(0));
    // The file may grow while it is read: never read past the cap.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let read = bytes.len() as u64;
    if read > max_bytes {
        if over_cap == OverCap::Refuse {
            return Err(too_big(read));
        }
        bytes.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
    }
    Ok(ReadFile {
        relative: target.relative.clone(),
        bytes,
        size: size.max(read),
    })
}

/// Opens a checked path for reading without blocking, a regular file only; with its size.
fn open_regular(target: &WorkspacePath) -> Result<(File, u64), ReadError> {
    let io = |err| ReadError::Io {
        relative: target.relative.clone(),
        err,
    };
    let file = workspace_open::open(&target.root, &target.full, Access::Read).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular {
            relative: target.relative.clone(),
        });
    }
    Ok((file, meta.len()))
}

/// Opens `relative` inside `workspace` for reading, a regular file only (for streaming
/// a large file); with its size.
pub async fn open_for_read(
    workspace: &Path,
    relative: &str,
) -> Result<(std::fs::File, u64), ReadError> {
    let target = workspace_path::for_read(workspace, relative).map_err(ReadError::Path)?;
    blocking(move || open_regular(&target)).await
}

/// Writes `bytes` to `relative` inside `workspace` (appending or replacing), creating its
/// folders; returns the path relative to the workspace.
pub async fn write(
    workspace: &Path,
    relative: &str,
    bytes: Vec<u8>,
    append: bool,
) -> Result<String, BlockError> {
    let target = workspace_path::for_write(workspace, relative)?;
    let shown = workspace.to_path_buf();
    blocking(move || {
        let fail = |e: std::io::Error| {
            BlockError::permanent(format!(
                "cannot write `{}`: {} (workspace: {})",
                target.relative,
                io_reason(&e),
                shown.display()
            ))
        };
        let mut file = workspace_open::open(&target.root, &target.full, Access::Write { append })
            .map_err(fail)?;
        file.write_all(&bytes).map_err(fail)?;
        file.flush().map_err(fail)?;
        Ok(target.relative)
    })
    .await
}

/// The entries of folder `relative` (empty or `.`: the workspace itself), sorted by name.
pub async fn list(workspace: &Path, relative: &str) -> Result<Vec<Entry>, BlockError> {
    let relative = relative.trim().trim_matches('/');
    let target = if relative.is_empty() || relative == "." {
        None
    } else {
        Some(workspace_path::for_read(workspace, relative)?)
    };
    let workspace = workspace.to_path_buf();
    let shown = relative.to_owned();
    blocking(move || {
        let listed = match &target {
            Some(target) => workspace_open::list_dir(&target.root, &target.full),
            None => {
                refuse_broad_workspace(&workspace).map_err(BlockError::permanent)?;
                std::fs::canonicalize(&workspace)
                    .and_then(|root| workspace_open::list_dir(&root, &root))
            }
        };
        let mut entries = listed.map_err(|e| {
            BlockError::permanent(format!(
                "cannot list `{shown}`: {} (workspace: {})",
                io_reason(&e),
                workspace.display()
            ))
        })?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    })
    .await
}

/// Every regular file under `workspace`, as relative paths, sorted; links are not followed
/// and at most `max_files` are returned.
pub async fn files_under(workspace: &Path, max_files: usize) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![PathBuf::new()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = list(workspace, &folder.to_string_lossy()).await else {
            continue;
        };
        let mut subfolders = Vec::new();
        for entry in entries {
            let path = folder.join(&entry.name);
            match entry.kind {
                EntryKind::File if found.len() < max_files => found.push(path),
                EntryKind::Dir => subfolders.push(path),
                _ => {}
            }
        }
        // Depth first, in name order.
        folders.extend(subfolders.into_iter().rev());
    }
    found.sort();
    found
}

async fn blocking<T: Send + 'static, E: From<JoinFailure> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join) => Err(E::from(JoinFailure(join.to_string()))),
    }
}

/// A file operation that did not finish (its thread panicked or the runtime stopped).
struct JoinFailure(String);

impl From<JoinFailure> for BlockError {
    fn from(failure: JoinFailure) -> Self {
        BlockError::permanent(format!("the file operation failed: {}", failure.0))
    }
}

impl From<JoinFailure> for ReadError {
    fn from(failure: JoinFailure) -> Self {
        ReadError::Path(failure.into())
    }
}
