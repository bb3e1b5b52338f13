//! Unpacks the squashfs image into a new folder. Nothing it writes lands outside that folder:
//! paths are checked part by part, a symbolic link may only point inside the image, files are
//! created new (never through a link) and set-id bits are dropped.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use backhand::{FilesystemReader, InnerNode};

/// Unpacks the image at `offset` in `appimage` into `target`, a folder that must not exist
/// yet. Returns how many entries were written.
pub fn unpack(appimage: &Path, offset: u64, target: &Path) -> anyhow::Result<usize> {
    let file =
        File::open(appimage).with_context(|| format!("cannot open {}", appimage.display()))?;
    let image = FilesystemReader::from_reader_with_offset(BufReader::new(file), offset)
        .with_context(|| format!("cannot read the squashfs image in {}", appimage.display()))?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(target)
        .with_context(|| format!("cannot create {}", target.display()))?;

    let mut nodes: Vec<_> = image.files().collect();
    // Parents before their children.
    nodes.sort_by(|a, b| a.fullpath.cmp(&b.fullpath));
    let mut links = HashSet::new();
    // Folders get their own mode last: a read-only one must still take its children.
    let mut folder_modes = Vec::new();
    for node in &nodes {
        let relative = inside_path(&node.fullpath)?;
        if relative.ancestors().any(|above| links.contains(above)) {
            bail!(
                "the image puts {} under a symbolic link: refused",
                node.fullpath.display()
            );
        }
        let destination = target.join(&relative);
        let mode = u32::from(node.header.permissions) & 0o777;
        match &node.inner {
            InnerNode::Dir(_) => {
                if !relative.as_os_str().is_empty() {
                    fs::DirBuilder::new()
                        .mode(0o700)
                        .create(&destination)
                        .with_context(|| format!("cannot create {}", destination.display()))?;
                }
                folder_modes.push((destination, mode | 0o700));
            }
            InnerNode::File(entry) => {
                let mut out = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(mode | 0o600)
                    .open(&destination)
                    .with_context(|| format!("cannot create {}", destination.display()))?;
                let mut reader = image.file(entry).reader();
                let mut writer = BufWriter::new(&mut out);
                io::copy(&mut reader, &mut writer).with_context(|| {
                    format!("cannot unpack {} from the image", node.fullpath.display())
                })?;
                writer
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(|| format!("cannot write {}", destination.display()))?;
            }
            InnerNode::Symlink(link) => {
                check_link_stays_inside(&relative, &link.link)?;
                symlink(&link.link, &destination)
                    .with_context(|| format!("cannot create {}", destination.display()))?;
                links.insert(relative);
            }
            InnerNode::CharacterDevice(_)
            | InnerNode::BlockDevice(_)
            | InnerNode::NamedPipe
            | InnerNode::Socket => bail!(
                "the image holds a device, pipe or socket at {}, which an application image \
                 has no use for: refused",
                node.fullpath.display()
            ),
        }
    }
    for (folder, mode) in folder_modes.iter().rev() {
        fs::set_permissions(folder, fs::Permissions::from_mode(*mode))
            .with_context(|| format!("cannot set the mode of {}", folder.display()))?;
    }
    Ok(nodes.len())
}

/// The entry's path relative to the image's root, made only of plain names.
fn inside_path(fullpath: &Path) -> anyhow::Result<PathBuf> {
    let mut relative = PathBuf::new();
    for part in fullpath.components() {
        match part {
            Component::RootDir => {}
            Component::Normal(name) => relative.push(name),
            _ => bail!(
                "the image names an entry {}, which leaves its folder: refused",
                fullpath.display()
            ),
        }
    }
    Ok(relative)
}

/// A link at `link` (relative to the root) pointing at `points_to` must resolve inside the
/// image, as far as its own text goes (the links it may pass through are checked the same).
fn check_link_stays_inside(link: &Path, points_to: &Path) -> anyhow::Result<()> {
    let outside = || {
        anyhow::anyhow!(
            "the image's symbolic link {} points outside the image ({}): refused",
            link.display(),
            points_to.display()
        )
    };
    let mut depth: usize = link.components().count().saturating_sub(1);
    for part in points_to.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth = depth.checked_sub(1).ok_or_else(outside)?,
            Component::RootDir | Component::Prefix(_) => return Err(outside()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_within_the_image_are_kept_and_links_out_refused() {
        assert!(check_link_stays_inside(Path::new("AppRun"), Path::new("usr/bin/app")).is_ok());
        assert!(check_link_stays_inside(Path::new("usr/lib/a"), Path::new("../bin/b")).is_ok());
        assert!(check_link_stays_inside(Path::new("usr/a"), Path::new("../AppRun")).is_ok());
        let refused = check_link_stays_inside(Path::new("usr/a"), Path::new("../../etc/passwd"))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("points outside the image"), "{refused}");
        assert!(check_link_stays_inside(Path::new("a"), Path::new("/etc/passwd")).is_err());
        assert!(check_link_stays_inside(Path::new("a"), Path::new("..")).is_err());
    }

    #[test]
    fn entry_paths_must_be_plain_names() {
        assert_eq!(
            inside_path(Path::new("/usr/bin/app")).unwrap(),
            Path::new("usr/bin/app")
        );
        assert!(inside_path(Path::new("/usr/../../etc")).is_err());
    }
}
