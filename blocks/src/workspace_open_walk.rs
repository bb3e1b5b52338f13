//! The no-link open beneath the workspace where `openat2` does not exist (macOS): the path
//! is walked one name at a time from the workspace folder, each folder opened relative to
//! the one before with `O_NOFOLLOW | O_DIRECTORY` and the last name with `O_NOFOLLOW`, so a
//! folder or file swapped for a symbolic link fails the open instead of leading outside.
//! Written with POSIX calls only; its tests race it on Linux too.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::{Access, Entry, file_and_folders, names_below};

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Never: every system this walk is used on has the calls it makes.
#[cfg(target_os = "macos")]
pub(super) fn unsupported(_: &std::io::Error) -> bool {
    false
}

/// The folder reached through `names` from `root`, no link followed on the way.
fn walk(root: &Path, names: &[&OsStr]) -> std::io::Result<OwnedFd> {
    let mut dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for name in names {
        dir = rustix::fs::openat(&dir, *name, DIR_FLAGS, Mode::empty())?;
    }
    Ok(dir)
}

fn open_dir(root: &Path, full: &Path) -> std::io::Result<OwnedFd> {
    walk(root, &names_below(root, full)?)
}

pub(super) fn open(root: &Path, full: &Path, access: Access) -> std::io::Result<File> {
    let names = names_below(root, full)?;
    let (last, parents) = file_and_folders(&names)?;
    let dir = walk(root, parents)?;
    let flags = OFlags::CLOEXEC
        | OFlags::NOFOLLOW
        | match access {
            Access::Read => OFlags::RDONLY | OFlags::NONBLOCK,
            Access::Write { append: true } => OFlags::WRONLY | OFlags::CREATE | OFlags::APPEND,
            Access::Write { append: false } => OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        };
    let fd = rustix::fs::openat(&dir, last, flags, Mode::from_raw_mode(0o666))?;
    Ok(File::from(fd))
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::io::{Read as _, Write as _};

    use super::*;
    use crate::workspace_open::EntryKind;

    #[test]
    fn links_are_never_followed_on_the_way_or_at_the_end() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "SECRET").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt"))
            .unwrap();

        let mut text = String::new();
        open(&root, &root.join("sub/f.txt"), Access::Read)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "inside");
        for path in ["out/secret.txt", "link.txt"] {
            assert!(
                open(&root, &root.join(path), Access::Read).is_err(),
                "{path}"
            );
        }
        assert!(
            open(
                &root,
                &root.join("out/new.txt"),
                Access::Write { append: false }
            )
            .is_err()
        );
        assert!(!outside.path().join("new.txt").exists());
        assert!(create_dir(&root, &root.join("out"), "made").is_err());
        assert!(!outside.path().join("made").exists());
        assert!(list_dir(&root, &root.join("out")).is_err());
        assert!(open(&root, &root.join("sub/../../x"), Access::Read).is_err());

        let mut listed = list_dir(&root, &root).unwrap();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let kinds: Vec<(&str, EntryKind)> =
            listed.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("link.txt", EntryKind::Other),
                ("out", EntryKind::Other),
                ("sub", EntryKind::Dir)
            ]
        );
        create_dir(&root, &root.join("sub"), "made").unwrap();
        open(
            &root,
            &root.join("sub/made/w.txt"),
            Access::Write { append: true },
        )
        .unwrap()
        .write_all(b"x")
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("sub/made/w.txt")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_folder_swapped_for_a_link_mid_walk_never_leads_outside() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.txt"), "SECRET").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f.txt"), "inside").unwrap();
        let flipper = crate::testing::Flipper::start(&root.join("sub"), outside.path());
        let (mut reads, mut writes, mut refused) = (0, 0, 0);
        let started = std::time::Instant::now();
        // Until both outcomes were seen many times: the race was really run.
        while (reads < 100 || writes < 100 || refused < 100)
            && started.elapsed() < std::time::Duration::from_secs(20)
        {
            match open(&root, &root.join("sub/f.txt"), Access::Read) {
                Ok(mut file) => {
                    let mut text = String::new();
                    file.read_to_string(&mut text).unwrap();
                    assert_eq!(text, "inside", "a read escaped");
                    reads += 1;
                }
                Err(_) => refused += 1,
            }
            if open(
                &root,
                &root.join("sub/w.txt"),
                Access::Write { append: false },
            )
            .is_ok()
            {
                writes += 1;
            }
            let _ = create_dir(&root, &root.join("sub"), "d");
            assert!(!outside.path().join("w.txt").exists(), "a write escaped");
            assert!(
                !outside.path().join("d").exists(),
                "a folder was made outside"
            );
        }
        drop(flipper);
        assert!(
            reads >= 100 && writes >= 100 && refused >= 100,
            "reads {reads}, writes {writes}, refused {refused}"
        );
    }
}
