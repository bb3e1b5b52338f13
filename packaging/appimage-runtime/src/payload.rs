//! Where the squashfs image starts in the AppImage (right after the runtime's ELF file) and
//! the digest that names its unpacked copy.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

const SQUASHFS_MAGIC: &[u8; 4] = b"hsqs";

/// The byte offset of the squashfs image: the end of the runtime's ELF file, which is the end
/// of its section header table (the linker writes that table last).
pub fn squashfs_offset(appimage: &Path) -> anyhow::Result<u64> {
    let mut file =
        File::open(appimage).with_context(|| format!("cannot open {}", appimage.display()))?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header)
        .with_context(|| format!("{} is too short to be an AppImage", appimage.display()))?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        bail!(
            "{} does not start with a 64-bit little-endian ELF runtime",
            appimage.display()
        );
    }
    let section_headers = u64::from_le_bytes(header[0x28..0x30].try_into().expect("8 bytes"));
    let entry_size = u16::from_le_bytes([header[0x3a], header[0x3b]]);
    let entries = u16::from_le_bytes([header[0x3c], header[0x3d]]);
    let offset = section_headers.saturating_add(u64::from(entry_size) * u64::from(entries));

    let mut magic = [0u8; 4];
    file.seek(SeekFrom::Start(offset))?;
    let found = file.read_exact(&mut magic).is_ok() && &magic == SQUASHFS_MAGIC;
    if !found {
        bail!(
            "{} holds no squashfs image after its runtime (expected at byte {offset}): \
             the file is damaged or not an AppImage",
            appimage.display()
        );
    }
    Ok(offset)
}

/// The SHA-256 of the image (hex), which names its unpacked copy: another build, even of the
/// same version, unpacks apart.
pub fn image_digest(appimage: &Path, offset: u64) -> anyhow::Result<String> {
    let mut file =
        File::open(appimage).with_context(|| format!("cannot open {}", appimage.display()))?;
    file.seek(SeekFrom::Start(offset))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("cannot read {}", appimage.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}
