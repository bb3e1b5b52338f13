//! The per-user cache of unpacked images: `$XDG_CACHE_HOME/agentloom/appimage/<sha256>`.
//! An image is unpacked into a private folder beside its place, then renamed into it in one
//! step, so a folder at its place is always whole. Unpacking holds a lock on the cache (an OS
//! lock, released when the process ends however it ends): a second launch at once waits and
//! then finds the copy, and a launch killed half-way leaves a private folder that the next
//! one removes.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The folder that holds the unpacked images, from `XDG_CACHE_HOME` (else `HOME/.cache`).
pub fn cache_root(xdg_cache_home: Option<&OsStr>, home: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    let base = match (xdg_cache_home, home) {
        // The XDG spec ignores a relative XDG_CACHE_HOME.
        (Some(cache), _) if Path::new(cache).is_absolute() => PathBuf::from(cache),
        (_, Some(home)) if Path::new(home).is_absolute() => Path::new(home).join(".cache"),
        _ => bail!(
            "neither XDG_CACHE_HOME nor HOME names a folder to unpack the application into: \
             set one, or unpack it with --appimage-extract"
        ),
    };
    Ok(base.join("agentloom").join("appimage"))
}

/// The whole unpacked copy of the image named `digest` under `root`, unpacking it with
/// `unpack(into)` first when there is none.
pub fn unpacked_copy(
    root: &Path,
    digest: &str,
    unpack: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let place = root.join(digest);
    if whole_copy_at(&place)? {
        return Ok(place);
    }
    create_folders(root)?;
    let lock_path = root.join(".lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open the cache's lock {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    // Another launch may have placed it while this one waited.
    if whole_copy_at(&place)? {
        return Ok(place);
    }
    remove_abandoned(root);
    let private = root.join(format!(".{digest}.partial"));
    if let Err(err) = unpack(&private) {
        let _ = fs::remove_dir_all(&private);
        return Err(err);
    }
    if let Err(err) = fs::rename(&private, &place) {
        let _ = fs::remove_dir_all(&private);
        return Err(err)
            .with_context(|| format!("cannot move the unpacked copy to {}", place.display()));
    }
    Ok(place)
}

/// Whether the copy at `place` is there (a folder there is whole: it was renamed in whole).
fn whole_copy_at(place: &Path) -> anyhow::Result<bool> {
    match fs::symlink_metadata(place) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => bail!(
            "{} is in the way of the unpacked application (it is not a folder): remove it",
            place.display()
        ),
        // A file above it is named by create_folders.
        Err(err) if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            Ok(false)
        }
        Err(err) => Err(err).with_context(|| format!("cannot look at {}", place.display())),
    }
}

/// Creates `root` and the folders above it, naming the one a file stands in the way of.
fn create_folders(root: &Path) -> anyhow::Result<()> {
    if let Err(err) = fs::create_dir_all(root) {
        let blocker = root
            .ancestors()
            .find(|above| fs::metadata(above).is_ok_and(|meta| !meta.is_dir()));
        return match blocker {
            Some(file) => bail!(
                "cannot make the cache folder {}: {} is a file, not a folder; remove it or set \
                 XDG_CACHE_HOME to another folder",
                root.display(),
                file.display()
            ),
            None => Err(err).with_context(|| {
                format!(
                    "cannot make the cache folder {} (set XDG_CACHE_HOME to a writable folder)",
                    root.display()
                )
            }),
        };
    }
    Ok(())
}

/// Removes private folders of launches killed while unpacking (called under the lock, so
/// none is in use).
fn remove_abandoned(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.ends_with(".partial") {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_folder(name: &str) -> PathBuf {
        let folder = std::env::temp_dir().join(format!(
            "appimage-runtime-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).unwrap();
        folder
    }

    fn write_app_run(into: &Path) -> anyhow::Result<()> {
        fs::create_dir(into)?;
        fs::write(into.join("AppRun"), "#!/bin/sh\n")?;
        Ok(())
    }

    #[test]
    fn the_cache_follows_xdg_then_home() {
        let root = cache_root(Some(OsStr::new("/c")), Some(OsStr::new("/h"))).unwrap();
        assert_eq!(root, Path::new("/c/agentloom/appimage"));
        let root = cache_root(Some(OsStr::new("relative")), Some(OsStr::new("/h"))).unwrap();
        assert_eq!(root, Path::new("/h/.cache/agentloom/appimage"));
        let err = cache_root(None, None).unwrap_err().to_string();
        assert!(err.contains("XDG_CACHE_HOME"), "{err}");
    }

    #[test]
    fn an_image_is_unpacked_once_and_a_killed_unpack_is_cleared() {
        let folder = temp_folder("once");
        let root = folder.join("cache");
        fs::create_dir_all(&root).unwrap();
        // A launch that was killed while unpacking another image.
        let abandoned = root.join(".def.partial");
        fs::create_dir(&abandoned).unwrap();
        fs::write(abandoned.join("half"), "").unwrap();

        let placed = unpacked_copy(&root, "abc", write_app_run).unwrap();
        assert!(placed.join("AppRun").is_file());
        assert!(
            !abandoned.exists(),
            "the abandoned partial copy is still there"
        );
        let again = unpacked_copy(&root, "abc", |_| panic!("unpacked twice")).unwrap();
        assert_eq!(placed, again);
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn two_launches_at_once_unpack_once() {
        let folder = temp_folder("race");
        let root = folder.join("cache");
        let unpacks = std::sync::atomic::AtomicUsize::new(0);
        let slow_unpack = |into: &Path| {
            unpacks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(200));
            write_app_run(into)
        };
        let placed: Vec<PathBuf> = std::thread::scope(|scope| {
            let launches: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| unpacked_copy(&root, "abc", slow_unpack).unwrap()))
                .collect();
            launches.into_iter().map(|l| l.join().unwrap()).collect()
        });
        assert_eq!(placed, [root.join("abc"), root.join("abc")]);
        assert_eq!(unpacks.into_inner(), 1);
        let mut left: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        left.sort();
        assert_eq!(left, [".lock", "abc"]);
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let folder = temp_folder("in-the-way");
        fs::write(folder.join("agentloom"), "").unwrap();
        let err = unpacked_copy(&folder.join("agentloom/appimage"), "abc", write_app_run)
            .unwrap_err()
            .to_string();
        assert!(err.contains("agentloom is a file, not a folder"), "{err}");

        let root = folder.join("cache");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("abc"), "").unwrap();
        let err = unpacked_copy(&root, "abc", write_app_run)
            .unwrap_err()
            .to_string();
        assert!(err.contains("is in the way"), "{err}");
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_failed_unpack_leaves_nothing() {
        let folder = temp_folder("failed");
        let root = folder.join("cache");
        let err = unpacked_copy(&root, "abc", |into| {
            write_app_run(into)?;
            bail!("the image is damaged")
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "the image is damaged");
        assert!(!root.join(".abc.partial").exists() && !root.join("abc").exists());
        fs::remove_dir_all(&folder).unwrap();
    }
}
