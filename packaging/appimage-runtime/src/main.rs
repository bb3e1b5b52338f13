//! The runtime at the head of Agentloom's AppImage (type 2: this ELF file, then a squashfs
//! image of the AppDir). Instead of mounting the image with FUSE, which needs libfuse and
//! /dev/fuse, it unpacks the image once into the user's cache and starts `AppRun` from there
//! with `APPIMAGE`, `APPDIR`, `ARGV0` and `OWD` set, passing its arguments through.
//!
//! Its own options (as first argument): `--appimage-extract` (into ./squashfs-root),
//! `--appimage-extract-and-run` (what it always does), `--appimage-offset`,
//! `--appimage-version`, `--appimage-help`, `--appimage-updateinformation`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

mod cache;
mod payload;
mod unpack;

/// The AppImage's update information (empty: none), in the section the AppImage
/// specification names, where desktop integration tools look for it.
#[used]
#[unsafe(link_section = ".upd_info")]
static UPDATE_INFORMATION: [u8; 1024] = [0; 1024];

/// The AppImage's signature and its key (empty: unsigned), in their sections.
#[used]
#[unsafe(link_section = ".sha256_sig")]
static SIGNATURE: [u8; 1024] = [0; 1024];
#[used]
#[unsafe(link_section = ".sig_key")]
static SIGNATURE_KEY: [u8; 8192] = [0; 8192];

const HELP: &str = "\
This is Agentloom packed as an AppImage. Run it to start Agentloom; its arguments are
Agentloom's. It unpacks itself once into $XDG_CACHE_HOME/agentloom/appimage (else
~/.cache/agentloom/appimage) and needs no FUSE.

Options of the AppImage itself (as the first argument):
  --appimage-extract          unpack the image into ./squashfs-root and exit
  --appimage-extract-and-run  unpack (once) and run, passing the other arguments through
  --appimage-offset           print where the image starts in this file
  --appimage-updateinformation  print the update information (none)
  --appimage-version          print this runtime's version
  --appimage-help             print this help
";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("Agentloom AppImage: {err:#}");
            ExitCode::from(127)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    let mut rest: Vec<OsString> = args.collect();
    // The AppImage is this file: the kernel's name for it, as the specification asks.
    let appimage = std::fs::read_link("/proc/self/exe")
        .or_else(|_| std::env::current_exe())
        .context("cannot find the AppImage's own file")?;

    let option = rest
        .first()
        .and_then(|first| first.to_str())
        .filter(|first| first.starts_with("--appimage-"))
        .map(str::to_owned);
    match option.as_deref() {
        None => {}
        Some("--appimage-help") => {
            print!("{HELP}");
            return Ok(ExitCode::SUCCESS);
        }
        Some("--appimage-version") => {
            println!(
                "Agentloom AppImage runtime {} (unpacks, no FUSE)",
                env!("CARGO_PKG_VERSION")
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some("--appimage-offset") => {
            println!("{}", payload::squashfs_offset(&appimage)?);
            return Ok(ExitCode::SUCCESS);
        }
        Some("--appimage-updateinformation") => {
            let text = UPDATE_INFORMATION.split(|b| *b == 0).next().unwrap_or(&[]);
            println!("{}", String::from_utf8_lossy(text));
            return Ok(ExitCode::SUCCESS);
        }
        Some("--appimage-extract") => {
            if rest.len() > 1 {
                bail!("--appimage-extract unpacks the whole image and takes no pattern");
            }
            extract_here(&appimage)?;
            return Ok(ExitCode::SUCCESS);
        }
        Some("--appimage-extract-and-run") => {
            rest.remove(0);
        }
        Some(other) => bail!("unknown option {other}: see --appimage-help"),
    }
    let copy = unpack_into_cache(&appimage)?;
    keep_across_exec(&copy.in_use)?;
    let err = start_app_run(&appimage, &copy.place, argv0, rest);
    Err(err)
}

/// `--appimage-extract`: the image into ./squashfs-root, which must not exist yet (an old one
/// is not overwritten in part).
fn extract_here(appimage: &Path) -> anyhow::Result<()> {
    let target = PathBuf::from("squashfs-root");
    if std::fs::symlink_metadata(&target).is_ok() {
        bail!("squashfs-root already exists here: remove it, or extract in another folder");
    }
    let offset = payload::squashfs_offset(appimage)?;
    let private = PathBuf::from(format!(".squashfs-root.partial-{}", std::process::id()));
    if let Err(err) = unpack::unpack(appimage, offset, &private) {
        let _ = std::fs::remove_dir_all(&private);
        return Err(err);
    }
    std::fs::rename(&private, &target)
        .context("cannot rename the unpacked folder to squashfs-root")?;
    println!("squashfs-root");
    Ok(())
}

/// The unpacked AppDir in the user's cache, unpacked now if this image was not before.
fn unpack_into_cache(appimage: &Path) -> anyhow::Result<cache::Copy> {
    let offset = payload::squashfs_offset(appimage)?;
    let digest = payload::image_digest(appimage, offset)?;
    let root = cache::cache_root(
        std::env::var_os("XDG_CACHE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )?;
    cache::unpacked_copy(&root, &digest, cache::KEEP_UNUSED, |into| {
        unpack::unpack(appimage, offset, into).map(|_| ())
    })
}

/// Leaves `file` open in the program this process becomes, so that the application holds
/// its copy's in-use lock for as long as it runs.
fn keep_across_exec(file: &std::fs::File) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor this process owns, changing only its close-on-exec flag.
    let done = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFD, 0) };
    if done == -1 {
        return Err(std::io::Error::last_os_error())
            .context("cannot keep the unpacked copy's in-use lock for the application");
    }
    Ok(())
}

/// Replaces this process with the AppDir's `AppRun`; returns only if that cannot start.
fn start_app_run(
    appimage: &Path,
    appdir: &Path,
    argv0: OsString,
    args: Vec<OsString>,
) -> anyhow::Error {
    let app_run = appdir.join("AppRun");
    let mut command = Command::new(&app_run);
    command
        // The name the person typed, so that the app's usage lines name the AppImage.
        .arg0(&argv0)
        .args(args)
        .env("APPIMAGE", appimage)
        .env("APPDIR", appdir)
        .env("ARGV0", argv0);
    if let Ok(here) = std::env::current_dir() {
        command.env("OWD", here);
    }
    let err = command.exec();
    anyhow::Error::new(err).context(format!("cannot start {}", app_run.display()))
}
