//! Confines file blocks to the run's workspace directory: relative paths only, no `..`,
//! and no symbolic link that leads outside.

use std::path::{Component, Path, PathBuf};

use agentloom_core::BlockError;

/// A path checked to lie inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkspacePath {
    /// The absolute path to open.
    pub full: PathBuf,
    /// The path relative to the workspace, with `/` separators, as the user should see it.
    pub relative: String,
    /// The canonical workspace directory `full` lies in.
    pub root: PathBuf,
}

/// Refuses a workspace that is the root of the file system, the home folder or a folder
/// holding the home folder: the file tools and run_code would reach every file of the user
/// (keys, credentials, shell startup files). The message says how to choose one.
pub fn refuse_broad_workspace(workspace: &Path) -> Result<(), String> {
    // A folder that cannot be resolved is refused later, with its own reason.
    let Ok(resolved) = std::fs::canonicalize(workspace) else {
        return Ok(());
    };
    let home = std::env::home_dir()
        .filter(|home| home.is_absolute())
        .map(|home| std::fs::canonicalize(&home).unwrap_or(home));
    let what = if resolved.parent().is_none() {
        "the root of the file system"
    } else if home.as_deref() == Some(resolved.as_path()) {
        "the home folder"
    } else if home
        .as_deref()
        .is_some_and(|home| home.starts_with(&resolved))
    {
        "a folder holding the home folder"
    } else {
        return Ok(());
    };
    Err(format!(
        "the workspace {} is {what}: the file tools and run_code would reach every file there (keys, credentials, settings), so they refuse to work in it. Choose a folder of its own for the run's files: `--workspace DIR` (agentloom run, agent, open, serve, worker, mcp, eval), or, in the app, keep the graph's file in a folder of its own (its runs work in that folder)",
        workspace.display()
    ))
}

/// Checks `relative` for reading: it must exist and resolve (through any links) inside
/// `workspace`.
pub(crate) fn for_read(workspace: &Path, relative: &str) -> Result<WorkspacePath, BlockError> {
    let (root, parts) = check_syntax(workspace, relative)?;
    let joined = join(&root, &parts);
    let full = std::fs::canonicalize(&joined).map_err(|e| {
        BlockError::permanent(format!(
            "cannot read `{relative}`: {} (workspace: {})",
            io_reason(&e),
            workspace.display()
        ))
    })?;
    ensure_inside(&root, &full, relative, workspace)?;
    Ok(WorkspacePath {
        full,
        relative: parts.join("/"),
        root,
    })
}

/// Checks `relative` for writing: creates missing parent directories (inside the workspace
/// only) and refuses a path whose directories or file lead outside through a link.
pub(crate) fn for_write(workspace: &Path, relative: &str) -> Result<WorkspacePath, BlockError> {
    let (root, parts) = check_syntax(workspace, relative)?;
    let Some((file_name, dirs)) = parts.split_last() else {
        return Err(refused(
            relative,
            "it names the workspace itself, not a file",
            workspace,
        ));
    };
    let mut dir = root.clone();
    for part in dirs {
        let next = dir.join(part);
        match std::fs::symlink_metadata(&next) {
            Ok(_) => {
                let resolved = std::fs::canonicalize(&next).map_err(|e| {
                    BlockError::permanent(format!(
                        "cannot write `{relative}`: `{part}` cannot be resolved: {} (workspace: {})",
                        io_reason(&e),
                        workspace.display()
                    ))
                })?;
                ensure_inside(&root, &resolved, relative, workspace)?;
                if !resolved.is_dir() {
                    return Err(BlockError::permanent(format!(
                        "cannot write `{relative}`: `{part}` is a file, not a directory (workspace: {})",
                        workspace.display()
                    )));
                }
                dir = resolved;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                crate::workspace_open::create_dir(&root, &dir, part).map_err(|e| {
                    BlockError::permanent(format!(
                        "cannot create directory `{part}` for `{relative}`: {} (workspace: {})",
                        io_reason(&e),
                        workspace.display()
                    ))
                })?;
                dir = next;
            }
            Err(e) => {
                return Err(BlockError::permanent(format!(
                    "cannot write `{relative}`: {} (workspace: {})",
                    io_reason(&e),
                    workspace.display()
                )));
            }
        }
    }
    let full = dir.join(file_name);
    if let Ok(meta) = std::fs::symlink_metadata(&full) {
        if meta.file_type().is_symlink() {
            // Writing through a link writes its target: it must be inside too, and exist.
            let target = std::fs::canonicalize(&full).map_err(|_| {
                refused(
                    relative,
                    "it is a symbolic link to a file that does not exist",
                    workspace,
                )
            })?;
            ensure_inside(&root, &target, relative, workspace)?;
            return Ok(WorkspacePath {
                full: target,
                relative: parts.join("/"),
                root,
            });
        }
        if meta.is_dir() {
            return Err(refused(relative, "it is a directory", workspace));
        }
    }
    Ok(WorkspacePath {
        full,
        relative: parts.join("/"),
        root,
    })
}

/// Refuses empty, absolute and `..` paths; returns the canonical workspace root and the
/// normal components of the path.
fn check_syntax(workspace: &Path, relative: &str) -> Result<(PathBuf, Vec<String>), BlockError> {
    if relative.trim().is_empty() {
        return Err(BlockError::permanent(format!(
            "no file path was given; give a path relative to the workspace ({})",
            workspace.display()
        )));
    }
    let path = Path::new(relative);
    if path.is_absolute() || path.has_root() {
        return Err(refused(
            relative,
            "absolute paths are not allowed; give a path relative to the workspace",
            workspace,
        ));
    }
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(refused(
                    relative,
                    "`..` may not be used to leave the workspace",
                    workspace,
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(
                    relative,
                    "absolute paths are not allowed; give a path relative to the workspace",
                    workspace,
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(refused(
            relative,
            "it names the workspace itself, not a file",
            workspace,
        ));
    }
    refuse_broad_workspace(workspace).map_err(BlockError::permanent)?;
    let root = std::fs::canonicalize(workspace).map_err(|e| {
        BlockError::permanent(format!(
            "the workspace directory {} cannot be used: {}",
            workspace.display(),
            io_reason(&e)
        ))
    })?;
    Ok((root, parts))
}

fn join(root: &Path, parts: &[String]) -> PathBuf {
    let mut full = root.to_path_buf();
    full.extend(parts);
    full
}

fn ensure_inside(
    root: &Path,
    resolved: &Path,
    relative: &str,
    workspace: &Path,
) -> Result<(), BlockError> {
    if resolved.starts_with(root) {
        Ok(())
    } else {
        Err(refused(
            relative,
            "it leads outside the workspace through a symbolic link",
            workspace,
        ))
    }
}

fn refused(relative: &str, why: &str, workspace: &Path) -> BlockError {
    BlockError::permanent(format!(
        "path `{relative}` is refused: {why} (workspace: {})",
        workspace.display()
    ))
}

/// An I/O error in words, without the OS error number.
pub(crate) fn io_reason(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_inside_and_creates_parents() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        let read = for_read(dir.path(), "./a.txt").unwrap();
        assert_eq!(read.relative, "a.txt");
        assert!(read.full.ends_with("a.txt"));
        let write = for_write(dir.path(), "out/deep/b.txt").unwrap();
        assert_eq!(write.relative, "out/deep/b.txt");
        assert!(dir.path().join("out/deep").is_dir());
    }

    #[test]
    fn refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for bad in ["../x", "a/../../x", "a/../b"] {
            let err = for_write(ws, bad).unwrap_err();
            assert!(
                err.message.contains("`..` may not be used"),
                "{bad}: {}",
                err.message
            );
        }
        let err = for_read(ws, "/etc/passwd").unwrap_err();
        assert!(
            err.message.contains("absolute paths are not allowed"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains(&ws.display().to_string()),
            "{}",
            err.message
        );
        assert!(
            for_write(ws, "")
                .unwrap_err()
                .message
                .contains("no file path")
        );
        assert!(
            for_write(ws, ".")
                .unwrap_err()
                .message
                .contains("workspace itself")
        );
    }

    #[cfg(unix)]
    #[test]
    fn refuses_links_that_lead_outside() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("nope.txt"), ws.join("dangling.txt"))
            .unwrap();
        for (what, err) in [
            ("read dir link", for_read(ws, "out/secret.txt").unwrap_err()),
            ("read file link", for_read(ws, "link.txt").unwrap_err()),
            ("write dir link", for_write(ws, "out/new.txt").unwrap_err()),
            ("write file link", for_write(ws, "link.txt").unwrap_err()),
        ] {
            assert!(
                err.message.contains("leads outside the workspace"),
                "{what}: {}",
                err.message
            );
        }
        let err = for_write(ws, "dangling.txt").unwrap_err();
        assert!(err.message.contains("does not exist"), "{}", err.message);
        assert!(!outside.path().join("new.txt").exists());
        // A link that stays inside is fine.
        std::fs::create_dir(ws.join("real")).unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("alias")).unwrap();
        assert!(for_write(ws, "alias/ok.txt").is_ok());
    }
}
