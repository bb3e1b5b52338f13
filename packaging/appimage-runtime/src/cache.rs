//! The per-user cache of unpacked images: `$XDG_CACHE_HOME/agentloom/appimage/<sha256>`.
//! An image is unpacked into a private folder beside its place, then renamed into it in one
//! step, so a folder at its place is always whole. Every launch holds a lock on the cache (an
//! OS lock, released when the process ends however it ends) while it looks: a second launch
//! at once waits and then finds the copy, and a launch killed half-way leaves a private
//! folder that the next one removes.
//!
//! A launch then holds a shared lock on its copy's marker `.<sha256>.in-use` for as long as
//! the application runs (the descriptor outlives the exec), and touches it. A copy whose
//! marker nobody holds and that no launch touched for [`KEEP_UNUSED`] is removed by the next
//! launch of any image: an updated AppImage does not leave the old one's copy behind.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};

/// How long a copy no launch used stays: a day, so that two images run in turns (an old and a
/// new version side by side) are not unpacked at every switch.
pub const KEEP_UNUSED: Duration = Duration::from_secs(24 * 60 * 60);

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

/// A whole unpacked copy of an image, held in use.
pub struct Copy {
    /// The copy's folder.
    pub place: PathBuf,
    /// The shared lock on the copy's marker: while a process holds it (or a descendant
    /// inherited it), the copy is not removed.
    pub in_use: File,
}

/// The whole unpacked copy of the image named `digest` under `root`, unpacking it with
/// `unpack(into)` first when there is none; copies of other images unused for `keep_unused`
/// are removed on the way.
pub fn unpacked_copy(
    root: &Path,
    digest: &str,
    keep_unused: Duration,
    unpack: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<Copy> {
    let place = root.join(digest);
    create_folders(root)?;
    let lock_path = root.join(".lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open the cache's lock {}", lock_path.display()))?;
    // Held while this launch looks, so that no copy is removed between the moment a launch
    // finds it and the moment it holds it.
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    if !whole_copy_at(&place)? {
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
    }
    let marker = marker_of(root, digest);
    let in_use = open_marker(&marker)?;
    in_use
        .lock_shared()
        .with_context(|| format!("cannot lock {}", marker.display()))?;
    // The launch's time, which keeps the copy for `keep_unused` after it ends.
    let _ = in_use.set_modified(SystemTime::now());
    remove_unused(root, digest, keep_unused);
    Ok(Copy { place, in_use })
}

/// The marker a launch of the copy `name` holds.
fn marker_of(root: &Path, name: &str) -> PathBuf {
    root.join(format!(".{name}.in-use"))
}

fn open_marker(marker: &Path) -> anyhow::Result<File> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(marker)
        .with_context(|| format!("cannot open {}", marker.display()))
}

/// Removes the copies other than `current` that no process holds and no launch touched for
/// `keep_unused` (called under the cache's lock, so no launch takes one meanwhile). A copy
/// left by a runtime that knew no markers counts from when it was unpacked.
fn remove_unused(root: &Path, current: &str, keep_unused: Duration) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name
            .to_str()
            .filter(|name| is_digest(name) && *name != current)
        else {
            continue;
        };
        // Not followed: a link put here is not a copy, and what it points at is not ours.
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let marker = marker_of(root, name);
        let last_used = fs::metadata(&marker)
            .or_else(|_| entry.metadata())
            .and_then(|meta| meta.modified());
        let unused_for = last_used.map(|at| now.duration_since(at).unwrap_or_default());
        if !unused_for.is_ok_and(|unused_for| unused_for >= keep_unused) {
            continue;
        }
        let Ok(held) = open_marker(&marker) else {
            continue;
        };
        // A running launch holds it shared: then the copy stays.
        if held.try_lock().is_err() {
            continue;
        }
        if fs::remove_dir_all(entry.path()).is_ok() {
            let _ = fs::remove_file(&marker);
        }
    }
}

/// Whether `name` is an image's digest (64 lowercase hex digits), the only names of copies.
fn is_digest(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
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

        let placed = unpacked_copy(&root, "abc", KEEP_UNUSED, write_app_run)
            .unwrap()
            .place;
        assert!(placed.join("AppRun").is_file());
        assert!(
            !abandoned.exists(),
            "the abandoned partial copy is still there"
        );
        let again = unpacked_copy(&root, "abc", KEEP_UNUSED, |_| panic!("unpacked twice")).unwrap();
        assert_eq!(placed, again.place);
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
                .map(|_| {
                    scope.spawn(|| {
                        unpacked_copy(&root, "abc", KEEP_UNUSED, slow_unpack)
                            .unwrap()
                            .place
                    })
                })
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
        assert_eq!(left, [".abc.in-use", ".lock", "abc"]);
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let folder = temp_folder("in-the-way");
        fs::write(folder.join("agentloom"), "").unwrap();
        let err = unpacked_copy(
            &folder.join("agentloom/appimage"),
            "abc",
            KEEP_UNUSED,
            write_app_run,
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(err.contains("agentloom is a file, not a folder"), "{err}");

        let root = folder.join("cache");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("abc"), "").unwrap();
        let err = unpacked_copy(&root, "abc", KEEP_UNUSED, write_app_run)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("is in the way"), "{err}");
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_failed_unpack_leaves_nothing() {
        let folder = temp_folder("failed");
        let root = folder.join("cache");
        let err = unpacked_copy(&root, "abc", KEEP_UNUSED, |into| {
            write_app_run(into)?;
            bail!("the image is damaged")
        })
        .map(|_| ())
        .unwrap_err();
        assert_eq!(err.to_string(), "the image is damaged");
        assert!(!root.join(".abc.partial").exists() && !root.join("abc").exists());
        fs::remove_dir_all(&folder).unwrap();
    }

    /// An image's digest: `c` repeated.
    fn digest(c: char) -> String {
        c.to_string().repeat(64)
    }

    /// Sets `path`'s modification time `ago` in the past.
    fn touched_ago(path: &Path, ago: Duration) {
        File::open(path)
            .unwrap()
            .set_modified(SystemTime::now() - ago)
            .unwrap();
    }

    #[test]
    fn copies_unused_for_a_day_are_removed_and_others_kept() {
        let folder = temp_folder("unused");
        let root = folder.join("cache");
        fs::create_dir_all(&root).unwrap();
        let two_days = Duration::from_secs(2 * 24 * 3600);
        let copy = |c: char, launched_ago: Option<Duration>| {
            let place = root.join(digest(c));
            write_app_run(&place).unwrap();
            if let Some(ago) = launched_ago {
                fs::write(marker_of(&root, &digest(c)), "").unwrap();
                touched_ago(&marker_of(&root, &digest(c)), ago);
            } else {
                touched_ago(&place, two_days);
            }
            place
        };
        // Last launched two days ago, nobody running it.
        let stale = copy('a', Some(two_days));
        // Unpacked two days ago by a runtime without markers.
        let unmarked = copy('b', None);
        // Launched two days ago and still running (its marker held).
        let running = copy('c', Some(two_days));
        let held = File::open(marker_of(&root, &digest('c'))).unwrap();
        held.lock_shared().unwrap();
        // Launched an hour ago.
        let recent = copy('d', Some(Duration::from_secs(3600)));
        // Not copies: a dot file, a short name, a link to a folder outside.
        let outside = folder.join("outside");
        write_app_run(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(digest('e'))).unwrap();
        fs::create_dir(root.join("notes")).unwrap();

        let current = unpacked_copy(&root, &digest('f'), KEEP_UNUSED, write_app_run).unwrap();
        assert!(current.place.join("AppRun").is_file());
        assert!(!stale.exists(), "a copy unused for two days is still there");
        assert!(!marker_of(&root, &digest('a')).exists());
        assert!(!unmarked.exists(), "an unmarked old copy is still there");
        assert!(
            running.join("AppRun").is_file(),
            "a running copy was removed"
        );
        assert!(
            recent.join("AppRun").is_file(),
            "a copy used an hour ago was removed"
        );
        assert!(outside.join("AppRun").is_file() && root.join("notes").is_dir());

        // Once its launch ends (its lock gone) and a day has passed, the next launch of
        // another image removes it; the current image's own copy always stays.
        drop(held);
        touched_ago(&marker_of(&root, &digest('f')), two_days);
        drop(current);
        unpacked_copy(&root, &digest('f'), KEEP_UNUSED, |_| {
            panic!("unpacked twice")
        })
        .unwrap();
        assert!(!running.exists(), "a copy no longer running was kept");
        assert!(root.join(digest('f')).join("AppRun").is_file());
        fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn a_launch_holds_its_copy_until_it_ends() {
        let folder = temp_folder("held");
        let root = folder.join("cache");
        let first = unpacked_copy(&root, &digest('a'), KEEP_UNUSED, write_app_run).unwrap();
        // With no time kept, another image's launch removes every copy not in use.
        unpacked_copy(&root, &digest('b'), Duration::ZERO, write_app_run).unwrap();
        assert!(first.place.is_dir(), "a copy in use was removed");
        drop(first);
        unpacked_copy(&root, &digest('b'), Duration::ZERO, write_app_run).unwrap();
        assert!(
            !root.join(digest('a')).exists(),
            "a copy no longer in use was kept"
        );
        fs::remove_dir_all(&folder).unwrap();
    }
}
