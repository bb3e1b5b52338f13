//! `agentloom trust GRAPH | --list | --revoke GRAPH`, and the question `agentloom run` asks
//! at a terminal before running a file that is not trusted.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use crate::runner::GraphSource;
use crate::trust::{TrustStore, fingerprint};

use super::EXIT_INVALID;

#[derive(Debug, clap::Args)]
pub struct TrustArgs {
    /// The graph file to trust as it is now.
    #[arg(required_unless_present_any = ["list", "revoke"])]
    pub graph: Option<PathBuf>,
    /// List the trusted files (and which changed since).
    #[arg(long, conflicts_with_all = ["graph", "revoke"])]
    pub list: bool,
    /// Stop trusting this graph file.
    #[arg(long, value_name = "GRAPH", conflicts_with = "graph")]
    pub revoke: Option<PathBuf>,
}

pub fn trust_command(args: TrustArgs) -> anyhow::Result<i32> {
    let store = TrustStore::open_default()?;
    if args.list {
        let files = store.list()?;
        if files.is_empty() {
            eprintln!("no trusted graph files in {}", store.path().display());
        }
        for file in files {
            let path = &file.fingerprint.path;
            let state = match fingerprint(path) {
                Ok(now) if now == file.fingerprint => "",
                Ok(_) => "  (changed since: not trusted)",
                Err(_) => "  (cannot be read)",
            };
            out!("{}  {}{state}", file.trusted_at, path.display());
        }
        return Ok(0);
    }
    if let Some(path) = args.revoke {
        return Ok(if store.revoke(&path)? {
            eprintln!("{}: no longer trusted", path.display());
            0
        } else {
            eprintln!(
                "{}: was not trusted; `agentloom trust --list` lists the trusted files",
                path.display()
            );
            EXIT_INVALID
        });
    }
    let Some(path) = args.graph else {
        return Ok(EXIT_INVALID);
    };
    // Read once: what is trusted is what was read, and what it lets is said of that.
    let source = match GraphSource::read(&path) {
        Ok(source) => source,
        Err(message) => {
            eprintln!("{message}");
            return Ok(EXIT_INVALID);
        }
    };
    let print = match source.fingerprint() {
        Some(print) => print.clone(),
        None => fingerprint(&path)?,
    };
    store.trust(print)?;
    let lines = source.needs().lines();
    if lines.is_empty() {
        eprintln!(
            "{}: trusted (it runs without safe mode forced on)",
            path.display()
        );
    } else {
        eprintln!("{}: trusted; it may now:", path.display());
        for line in lines {
            eprintln!("  - {line}");
        }
    }
    Ok(0)
}

/// Whether `agentloom run` runs `path` trusted. `--trust` (`given`) or recorded trust:
/// yes. A file that needs nothing trust-gated runs untrusted (in safe mode) without a
/// question. Otherwise a person at the terminal is shown what trusting allows and asked
/// (yes records the trust; no runs it offline); without a terminal the list and the fix
/// are printed and the answer is `None` (exit 2).
/// `source` is the file as read once for the run: trust is checked against what runs.
pub(crate) fn trust_for_run(path: &Path, given: bool, source: &GraphSource) -> Option<bool> {
    if given || source.is_trusted() {
        return Some(true);
    }
    let needs = source.needs();
    if needs.is_empty() {
        return Some(false);
    }
    let refusal = crate::trust::refusal(path, &needs);
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        for line in &refusal {
            eprintln!("{line}");
        }
        return None;
    }
    let mut stderr = std::io::stderr().lock();
    // The fix is the question itself here.
    for line in &refusal[..refusal.len() - 1] {
        let _ = writeln!(stderr, "{line}");
    }
    let _ = write!(stderr, "Trust this file and connect? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
        let _ = writeln!(stderr, "kept offline: running it untrusted, in safe mode");
        return Some(false);
    }
    let recorded = match source.fingerprint() {
        Some(print) => TrustStore::open_default().and_then(|store| store.trust(print.clone())),
        None => crate::trust::fingerprint(path)
            .and_then(|print| TrustStore::open_default()?.trust(print)),
    };
    match recorded {
        Ok(()) => {
            let _ = writeln!(stderr, "{}: trusted", path.display());
        }
        // Trusted for this run all the same: the person said so.
        Err(err) => {
            let _ = writeln!(stderr, "warning: the trust is not recorded: {err:#}");
        }
    }
    Some(true)
}
