//! Trust per file content. A graph file is untrusted until its user trusts it; trust is
//! recorded in the data directory as the file's canonical path with the SHA-256 of its
//! content and of every file it calls through `graph.call` (in turn), so any change to any
//! of them makes it untrusted again. Shipped examples are trusted as they are.
//!
//! An untrusted graph starts no MCP server and connects to none, gets no credential, calls
//! no graph file outside its own folder, and runs with safe mode on. Opening, editing and
//! validating it are always safe. The CLI (`agentloom trust`, `--trust`) and the app both
//! decide through this module.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use agentloom_blocks::Registry;
use agentloom_core::{
    BlockCatalog as _, GraphDoc, Problem, ProblemKind, Secret, SecretError, SecretSource,
};
use agentloom_engine::private_files;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The trust store's file name in the data directory.
pub const STORE_FILE: &str = "trusted-graphs.json";

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the trust store `{}`: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the trust store `{}` is damaged ({detail}); remove it and trust your graph files again",
        path.display()
    )]
    Damaged { path: PathBuf, detail: String },
    #[error("there is no per-user data directory to keep trust in (set HOME or XDG_DATA_HOME)")]
    NoDataDir,
}

/// The sentence every refusal ends with: what is wrong and the fix.
pub fn not_trusted(path: &Path) -> String {
    format!("this file is not trusted ({})", trust_command(path))
}

/// `agentloom trust PATH` as it can be pasted into this system's shell: the path quoted
/// when it holds a space or a character the shell would read.
pub fn trust_command(path: &Path) -> String {
    format!(
        "agentloom trust {}",
        shell_quoted(&path.display().to_string())
    )
}

/// `word` as one word for a POSIX shell.
#[cfg(not(windows))]
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=~".contains(c);
    if !word.is_empty() && word.chars().all(plain) && !word.starts_with('~') {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// `word` as one word for cmd.exe and PowerShell (a path holds no `"`).
#[cfg(windows)]
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "\\/._-:".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("\"{word}\"")
}

/// One file a graph calls, by canonical path, with the SHA-256 of its content (`None`: it
/// does not exist, so creating it changes the fingerprint too).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CalledFile {
    pub path: PathBuf,
    pub sha256: Option<String>,
}

/// What trust is given to: a graph file's content and the content of everything it calls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Canonical.
    pub path: PathBuf,
    pub sha256: String,
    /// Sorted by path.
    #[serde(default)]
    pub calls: Vec<CalledFile>,
}

/// The SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads at most the graph size limit (and one byte more, so an oversized file still
/// hashes differently from its first part).
/// Only a regular file is read: opening a FIFO would wait for a writer, a device never end.
fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    let not_a_file = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_a_file());
    }
    let cap = agentloom_core::max_graph_bytes();
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path)?;
    // Swapped for something else between the two looks.
    if !file.metadata()?.is_file() {
        return Err(not_a_file());
    }
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The files `doc` (the content of `file`) calls directly, resolved against `file`.
fn called_paths(doc: &GraphDoc, file: &Path) -> Vec<PathBuf> {
    doc.nodes
        .iter()
        .filter(|node| node.block == agentloom_blocks::graph_call::KIND)
        .filter_map(|node| {
            node.config
                .get(agentloom_blocks::graph_call::PATH)?
                .as_str()
        })
        .filter_map(|path| agentloom_blocks::graph_call::resolve(Some(file), path.trim()).ok())
        .collect()
}

/// A graph file and the files it calls, in turn, each read once.
pub(crate) struct FileTree {
    pub(crate) root: Fingerprint,
    /// Every document read, with its canonical path (the root first, when it was read).
    pub(crate) docs: Vec<(PathBuf, GraphDoc)>,
    /// Every file called, by the paths its callers name it (resolved, and canonical): its
    /// text as read and hashed, or why it could not be read. A run calls only these.
    pub(crate) texts: Vec<(PathBuf, Result<String, String>)>,
    /// The names by which called files call the root file back (a cycle, found when the
    /// call is checked): its own text goes with them.
    pub(crate) root_aliases: Vec<PathBuf>,
}

fn read_tree(path: &Path) -> Result<FileTree, TrustError> {
    let read_error = |source| TrustError::Read {
        path: path.to_owned(),
        source,
    };
    let canonical = std::fs::canonicalize(path).map_err(read_error)?;
    let bytes = read_capped(&canonical).map_err(read_error)?;
    let root = Fingerprint {
        path: canonical.clone(),
        sha256: sha256_hex(&bytes),
        calls: Vec::new(),
    };
    let mut tree = FileTree {
        root,
        docs: Vec::new(),
        texts: Vec::new(),
        root_aliases: Vec::new(),
    };
    tree.read_from(vec![(canonical, bytes)]);
    Ok(tree)
}

impl FileTree {
    /// Adds the files in `queue` (read, not yet parsed) and everything they call in turn.
    fn read_from(&mut self, mut queue: Vec<(PathBuf, Vec<u8>)>) {
        let mut seen = BTreeSet::from([self.root.path.clone()]);
        seen.extend(self.root.calls.iter().map(|call| call.path.clone()));
        while let Some((file, bytes)) = queue.pop() {
            // A file that is not a graph calls nothing; it is hashed all the same.
            let Ok(doc) = std::str::from_utf8(&bytes)
                .map_err(drop)
                .and_then(|text| GraphDoc::from_json_str(text).map_err(drop))
            else {
                continue;
            };
            queue.extend(self.read_calls(&doc, &file, &mut seen));
            self.docs.push((file, doc));
        }
        self.root.calls.sort();
    }

    /// Reads each file `doc` (the content of `file`) calls that is not `seen` yet, noting
    /// it in the fingerprint and its text in `texts`; returns the files read, to look into
    /// in turn.
    fn read_calls(
        &mut self,
        doc: &GraphDoc,
        file: &Path,
        seen: &mut BTreeSet<PathBuf>,
    ) -> Vec<(PathBuf, Vec<u8>)> {
        let mut read = Vec::new();
        for named in called_paths(doc, file) {
            let target = std::fs::canonicalize(&named).unwrap_or_else(|_| named.clone());
            if target == self.root.path {
                self.root_aliases.push(named);
                continue;
            }
            let text = self
                .texts
                .iter()
                .find(|(path, _)| *path == target)
                .map(|(_, text)| text.clone());
            if let Some(text) = text {
                // Called again by another name: the same content under that name too.
                if !self.texts.iter().any(|(path, _)| *path == named) {
                    self.texts.push((named, text));
                }
                continue;
            }
            if !seen.insert(target.clone()) {
                continue;
            }
            let (sha256, text) = match read_capped(&target) {
                Ok(bytes) => {
                    let sha256 = sha256_hex(&bytes);
                    let text = String::from_utf8(bytes.clone()).map_err(|_| {
                        format!("graph file `{}` is not UTF-8 text", target.display())
                    });
                    read.push((target.clone(), bytes));
                    (Some(sha256), text)
                }
                Err(err) => {
                    // Said as a graph file's reading says it (what kind of file it is).
                    let why = match agentloom_core::read_graph_text(
                        &target,
                        agentloom_core::max_graph_bytes(),
                    ) {
                        Err(refused) => refused.to_string(),
                        Ok(_) => err.to_string(),
                    };
                    (
                        None,
                        Err(format!(
                            "cannot read graph file `{}`: {why}",
                            target.display()
                        )),
                    )
                }
            };
            self.root.calls.push(CalledFile {
                path: target.clone(),
                sha256,
            });
            if named != target {
                self.texts.push((named, text.clone()));
            }
            self.texts.push((target, text));
        }
        read
    }
}

/// The files `doc`, the content of the graph file at `path`, calls, in turn (the root's
/// own bytes are neither read nor hashed: its `sha256` is left empty).
pub(crate) fn calls_tree(path: &Path, doc: &GraphDoc) -> Result<FileTree, TrustError> {
    let canonical = std::fs::canonicalize(path).map_err(|source| TrustError::Read {
        path: path.to_owned(),
        source,
    })?;
    let root = Fingerprint {
        path: canonical.clone(),
        sha256: String::new(),
        calls: Vec::new(),
    };
    let mut tree = FileTree {
        root,
        docs: Vec::new(),
        texts: Vec::new(),
        root_aliases: Vec::new(),
    };
    let mut seen = BTreeSet::from([canonical.clone()]);
    let queue = tree.read_calls(doc, &canonical, &mut seen);
    tree.read_from(queue);
    Ok(tree)
}

/// The fingerprint of the graph file at `path` as it is now.
pub fn fingerprint(path: &Path) -> Result<Fingerprint, TrustError> {
    Ok(read_tree(path)?.root)
}

/// Whether every file of `fingerprint` is a shipped example, unchanged.
pub(crate) fn is_shipped_example(fingerprint: &Fingerprint) -> bool {
    let shipped: BTreeSet<String> = crate::examples::EXAMPLES
        .iter()
        .map(|(_, text)| sha256_hex(text.as_bytes()))
        .collect();
    shipped.contains(&fingerprint.sha256)
        && fingerprint.calls.iter().all(|call| {
            call.sha256
                .as_ref()
                .is_some_and(|sha| shipped.contains(sha))
        })
}

/// One trusted file in the store.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrustedFile {
    #[serde(flatten)]
    pub fingerprint: Fingerprint,
    /// RFC 3339.
    pub trusted_at: String,
}

#[derive(Default, Serialize, Deserialize)]
struct StoreContent {
    version: u32,
    files: Vec<TrustedFile>,
}

/// The trusted files, a small JSON file in the data directory. Every change is made under
/// a lock and written whole to a temporary file then renamed, so two processes trusting
/// at once lose nothing and a crash never leaves half a file.
#[derive(Clone, Debug)]
pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    /// The store in the per-user data directory (`XDG_DATA_HOME/agentloom`).
    pub fn open_default() -> Result<Self, TrustError> {
        crate::paths::data_dir()
            .map(|dir| Self::in_dir(&dir))
            .ok_or(TrustError::NoDataDir)
    }

    /// The store in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join(STORE_FILE),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<StoreContent, TrustError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| TrustError::Damaged {
                path: self.path.clone(),
                detail: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StoreContent::default()),
            Err(source) => Err(TrustError::Read {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Changes the store under its lock; returns what `change` returned.
    fn update<T>(&self, change: impl FnOnce(&mut Vec<TrustedFile>) -> T) -> Result<T, TrustError> {
        let write_error = |source| TrustError::Write {
            path: self.path.clone(),
            source,
        };
        // The list of trusted files decides what runs with credentials: the user's alone.
        if let Some(dir) = self.path.parent() {
            private_files::create_dir_all(dir).map_err(write_error)?;
        }
        let lock = private_files::open_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.with_extension("lock"))
            .map_err(write_error)?;
        lock.lock().map_err(write_error)?;
        let mut content = self.read()?;
        let result = change(&mut content.files);
        content.version = 1;
        let tmp = self
            .path
            .with_extension(format!("json.{}.tmp", std::process::id()));
        let text = serde_json::to_vec_pretty(&content).map_err(|e| write_error(e.into()))?;
        let mut file = private_files::create(&tmp).map_err(write_error)?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(write_error)?;
        std::fs::rename(&tmp, &self.path).map_err(write_error)?;
        drop(lock);
        Ok(result)
    }

    /// Whether `fingerprint` is trusted: recorded exactly so, or a shipped example.
    pub fn is_trusted(&self, fingerprint: &Fingerprint) -> bool {
        if is_shipped_example(fingerprint) {
            return true;
        }
        match self.read() {
            Ok(content) => content
                .files
                .iter()
                .any(|file| file.fingerprint == *fingerprint),
            Err(err) => {
                tracing::warn!("{err}");
                false
            }
        }
    }

    /// Records trust in the file as `fingerprint` describes it (replacing earlier trust in
    /// the same path).
    pub fn trust(&self, fingerprint: Fingerprint) -> Result<(), TrustError> {
        self.update(|files| {
            files.retain(|file| file.fingerprint.path != fingerprint.path);
            files.push(TrustedFile {
                fingerprint,
                trusted_at: chrono::Utc::now().to_rfc3339(),
            });
            files.sort_by(|a, b| a.fingerprint.path.cmp(&b.fingerprint.path));
        })
    }

    /// Removes the trust in the file at `path`; whether there was any.
    pub fn revoke(&self, path: &Path) -> Result<bool, TrustError> {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        self.update(|files| {
            let before = files.len();
            files.retain(|file| file.fingerprint.path != canonical);
            files.len() != before
        })
    }

    /// Every trusted file, by path.
    pub fn list(&self) -> Result<Vec<TrustedFile>, TrustError> {
        Ok(self.read()?.files)
    }
}

/// What trusting a graph file allows, to show before anyone decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustNeeds {
    /// Each MCP command line, with the names of the environment variables it is given.
    pub commands: Vec<String>,
    /// Each MCP URL, with the credential it would get.
    pub urls: Vec<String>,
    /// Each credential a node would be sent.
    pub credentials: Vec<String>,
    /// Each graph file called outside the graph's own folder.
    pub outside_files: Vec<PathBuf>,
    /// Each agent that runs code without a sandbox (`run_code_unsandboxed`).
    pub unsandboxed_code: Vec<String>,
    /// Each node that asks for the private network (`allow_private_network: true`), as
    /// "node `ID`" (and the file holding it when it is not the graph's own).
    pub private_network: Vec<String>,
    /// Each URL a node would fetch on this machine or its local network (a search engine's
    /// endpoint named in the file), with the node.
    pub local_endpoints: Vec<String>,
}

impl TrustNeeds {
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
            && self.urls.is_empty()
            && self.credentials.is_empty()
            && self.outside_files.is_empty()
            && self.unsandboxed_code.is_empty()
            && self.private_network.is_empty()
            && self.local_endpoints.is_empty()
    }

    /// One line per fact.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.extend(
            self.commands
                .iter()
                .map(|c| format!("start the command {c}")),
        );
        lines.extend(self.urls.iter().map(|u| format!("connect to {u}")));
        lines.extend(self.credentials.iter().map(|c| format!("send {c}")));
        lines.extend(
            self.outside_files
                .iter()
                .map(|f| format!("call the graph file {} (outside its folder)", f.display())),
        );
        lines.extend(self.unsandboxed_code.iter().map(|node| {
            format!("run code without a sandbox, with your own access, in agent `{node}`")
        }));
        lines.extend(self.private_network.iter().map(|node| {
            format!("reach this machine and its local network from {node} (allow_private_network)")
        }));
        lines.extend(
            self.local_endpoints
                .iter()
                .map(|endpoint| format!("fetch {endpoint}")),
        );
        // Names, commands and URLs come from the file: never a raw control character.
        lines
            .into_iter()
            .map(|line| agentloom_core::escape_control(&line).into_owned())
            .collect()
    }
}

/// What trusting `doc` allows, `file` being where it is (an unsaved graph calls nothing
/// outside a folder it does not have).
pub fn needs_of(doc: &GraphDoc, file: Option<&Path>) -> TrustNeeds {
    // The document given (shown, maybe with edits not saved yet) stands for the root file:
    // only the files it calls are read.
    let tree = file.and_then(|file| calls_tree(file, doc).ok());
    needs_in(doc, file, tree.as_ref())
}

/// What trusting `doc` (the graph file `file`, calling the files of `tree`) allows.
pub(crate) fn needs_in(doc: &GraphDoc, file: Option<&Path>, tree: Option<&FileTree>) -> TrustNeeds {
    let mut needs = TrustNeeds::default();
    for (name, server) in &doc.mcp_servers {
        if let Some(command) = &server.command {
            let mut line = format!(
                "`{}` (MCP server `{name}`)",
                shell_words(command, &server.args)
            );
            let mut env: Vec<&str> = server.env.keys().map(String::as_str).collect();
            if server.credential.is_some() {
                env.push("MCP_TOKEN");
            }
            if !env.is_empty() {
                line.push_str(&format!(" with environment {}", env.join(", ")));
            }
            if let Some(credential) = &server.credential {
                line.push_str(&format!(", MCP_TOKEN from credential `{credential}`"));
            }
            needs.commands.push(line);
        }
        if let Some(url) = &server.url {
            needs.urls.push(match &server.credential {
                Some(credential) => {
                    format!("{url} (MCP server `{name}`) with credential `{credential}`")
                }
                None => format!("{url} (MCP server `{name}`) with no credential"),
            });
        }
    }
    let docs: Vec<(Option<&Path>, &GraphDoc)> = match tree {
        Some(tree) => std::iter::once((file, doc))
            .chain(tree.docs.iter().map(|(p, d)| (Some(p.as_path()), d)))
            .collect(),
        None => vec![(file, doc)],
    };
    let builtin = Registry::builtin();
    let mut credentials = BTreeSet::new();
    let mut private_network = BTreeSet::new();
    let mut endpoints = BTreeSet::new();
    for (path, doc) in &docs {
        for node in &doc.nodes {
            // Named in its config, else the block's default.
            let mut named: Vec<String> = Vec::new();
            named.extend(
                node.config
                    .iter()
                    .filter(|(key, _)| *key == "credential" || key.ends_with("_credential"))
                    .filter_map(|(_, value)| value.as_str())
                    .filter(|name| !name.trim().is_empty())
                    .map(str::to_owned),
            );
            if named.is_empty() {
                named.extend(
                    builtin
                        .block(&node.block)
                        .and_then(|block| block.meta().credential.clone()),
                );
            }
            let place = match path {
                Some(path) if Some(*path) != file => {
                    format!(" in {}", path.display())
                }
                _ => String::new(),
            };
            let target = credential_target(node);
            for credential in named {
                credentials.insert(format!(
                    "credential `{credential}` to node `{}`{place} ({target})",
                    node.id
                ));
            }
            let asks_private = node.config.iter().any(|(key, value)| {
                key.ends_with("allow_private_network") && value.as_bool() == Some(true)
            });
            if asks_private {
                private_network.insert(format!("node `{}`{place}", node.id));
            }
            for url in local_endpoints_of(node) {
                endpoints.insert(format!(
                    "{url}, a local address, from node `{}`{place}",
                    node.id
                ));
            }
        }
    }
    needs.credentials = credentials.into_iter().collect();
    needs.private_network = private_network.into_iter().collect();
    needs.local_endpoints = endpoints.into_iter().collect();
    needs.unsandboxed_code = docs
        .iter()
        .flat_map(|(path, doc)| {
            agentloom_blocks::unsandboxed_code_nodes(doc)
                .into_iter()
                .map(move |node| match path {
                    Some(path) if Some(*path) != file => format!("{node}` in `{}", path.display()),
                    _ => node,
                })
        })
        .collect();
    if let (Some(tree), Some(file)) = (tree, file) {
        let folder = tree.root.path.parent().unwrap_or(Path::new("/"));
        // Calls of the shown document, then of the files they reach.
        let mut outside: BTreeSet<PathBuf> = called_paths(doc, file)
            .into_iter()
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .filter(|p| !p.starts_with(folder))
            .collect();
        outside.extend(
            tree.root
                .calls
                .iter()
                .filter(|call| !call.path.starts_with(folder))
                .map(|call| call.path.clone()),
        );
        needs.outside_files = outside.into_iter().collect();
    }
    needs
}

/// The URLs a node's config names (fields `url`, `base_url`, `…_url`), parsed.
fn config_urls(node: &agentloom_core::NodeDoc) -> Vec<(String, url::Url)> {
    node.config
        .iter()
        .filter(|(key, _)| *key == "url" || key.ends_with("_url"))
        .filter_map(|(key, value)| {
            let text = value.as_str()?.trim();
            // A template fills it at run time: nothing to say before.
            if text.contains("{{") {
                return None;
            }
            Some((key.to_owned(), url::Url::parse(text).ok()?))
        })
        .collect()
}

/// `host:port` of `url`, as a credential bound to hosts would be matched against.
fn host_port(url: &url::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

/// Where a node's credential would be sent: the host and port of the URL its config names,
/// else its provider's or service's own API.
fn credential_target(node: &agentloom_core::NodeDoc) -> String {
    let urls: BTreeSet<String> = config_urls(node)
        .iter()
        .filter(|(key, _)| !key.starts_with("search_"))
        .filter_map(|(_, url)| host_port(url))
        .collect();
    if !urls.is_empty() {
        return format!("at {}", urls.into_iter().collect::<Vec<_>>().join(", "));
    }
    match node.config.get("provider").and_then(|p| p.as_str()) {
        Some(provider) => format!("at the hosted API of provider `{provider}`"),
        None => format!("at the service `{}` uses by default", node.block),
    }
}

/// Whether `url` names this machine or a local network: a loopback, private, link-local
/// or unspecified address, or a `localhost` name (decided from the text: names that
/// resolve to a local address are refused when connecting).
pub fn is_local_url(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Some(url::Host::Ipv6(ip)) => match ip.to_ipv4_mapped() {
            Some(v4) => {
                v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified()
            }
            None => {
                ip.is_loopback()
                    || ip.is_unspecified()
                    || (ip.segments()[0] & 0xfe00) == 0xfc00
                    || (ip.segments()[0] & 0xffc0) == 0xfe80
            }
        },
        None => false,
    }
}

/// The local URLs a node would fetch that the file chose: its search endpoint (`web.search`,
/// an agent's search tool). A model's `base_url` is not among them: a shared graph that
/// uses a local model runs untrusted.
fn local_endpoints_of(node: &agentloom_core::NodeDoc) -> Vec<String> {
    // A request's own URL reaches a local address only with allow_private_network (listed
    // on its own); a search endpoint is fetched wherever it is, when trusted.
    let search = node.block == "web.search";
    config_urls(node)
        .into_iter()
        .filter(|(key, _)| key == "search_url" || (search && key == "url"))
        .filter(|(_, url)| is_local_url(url))
        .map(|(_, url)| url.to_string())
        .collect()
}

/// A command line as a person would type it (arguments with spaces quoted).
fn shell_words(command: &str, args: &[String]) -> String {
    std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|word| {
            if word.is_empty() || word.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", word.replace('\'', "'\\''"))
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the graph file at `path` is trusted as it is now, in the per-user store. A file
/// that cannot be read is not (reading it will say why).
pub fn is_trusted(path: &Path) -> bool {
    match TrustStore::open_default() {
        Ok(store) => is_trusted_in(Some(&store), path),
        Err(err) => {
            tracing::warn!("{err}");
            is_trusted_in(None, path)
        }
    }
}

/// [`is_trusted`] with the trust recorded in `store` (`None`: only shipped examples are).
pub fn is_trusted_in(store: Option<&TrustStore>, path: &Path) -> bool {
    let Ok(fingerprint) = fingerprint(path) else {
        return false;
    };
    match store {
        Some(store) => store.is_trusted(&fingerprint),
        None => is_shipped_example(&fingerprint),
    }
}

/// Why an untrusted file that needs trust is refused where nobody can be asked: each
/// thing trusting it would allow, and the fix.
pub fn refusal(path: &Path, needs: &TrustNeeds) -> Vec<String> {
    let mut lines = vec![format!(
        "{}: this file is not trusted; trusting it lets it:",
        agentloom_core::Escaped(&path.display().to_string())
    )];
    lines.extend(needs.lines().iter().map(|line| format!("  - {line}")));
    lines.push(format!(
        "if you trust it, run `{}` (or pass --trust), then try again",
        agentloom_core::Escaped(&trust_command(path))
    ));
    lines
}

/// What to tell whoever runs the untrusted graph file at `path` when that is why its side
/// effects will ask for approval (nothing when it has none).
pub fn safe_mode_note(path: &Path, graph: &agentloom_core::ValidGraph) -> Option<String> {
    graph
        .nodes
        .iter()
        .any(|node| node.meta.side_effects)
        .then(|| {
            format!(
                "note: {} is not trusted, so it runs in safe mode: its side effects need approval (if you trust it: {})",
                path.display(),
                trust_command(path)
            )
        })
}

/// Credentials for an untrusted graph: none, each refusal saying how to trust the file.
pub struct UntrustedSecrets {
    file: Option<PathBuf>,
}

impl UntrustedSecrets {
    /// For the graph file `file` (`None`: a graph that is no file's here, such as a queued
    /// request whose submitter did not trust it).
    pub fn new(file: Option<&Path>) -> Self {
        Self {
            file: file.map(Path::to_path_buf),
        }
    }
}

impl SecretSource for UntrustedSecrets {
    fn secret(&self, name: &str) -> Result<Secret, SecretError> {
        let message = match &self.file {
            Some(file) => format!(
                "graph file {} is not trusted: run `{}`",
                file.display(),
                trust_command(file)
            ),
            None => "this graph is not trusted, so it gets no credential: trust its file where it is run or submitted from".to_owned(),
        };
        Err(SecretError::Unusable {
            name: name.to_owned(),
            message,
        })
    }
}

/// One problem per agent of an untrusted file that would run code without a sandbox: only
/// a file its user trusts may ask for that.
pub fn unsandboxed_code_problems(doc: &GraphDoc, file: &Path) -> Vec<Problem> {
    agentloom_blocks::unsandboxed_code_nodes(doc)
        .into_iter()
        .map(|node| {
            let index = doc.nodes.iter().position(|n| n.id == node).unwrap_or(0);
            Problem {
                kind: ProblemKind::BadConfig,
                path: format!("$.nodes[{index}].config.run_code_unsandboxed"),
                message: format!(
                    "node `{}`: runs code without a sandbox, which only a trusted file may: {}",
                    agentloom_core::Escaped(&node),
                    not_trusted(file)
                ),
                node: Some(node),
                port: None,
            }
        })
        .collect()
}

/// One problem per MCP server of an untrusted file: not connected, and how to trust it.
pub fn offline_server_problems(doc: &GraphDoc, file: &Path) -> Vec<Problem> {
    doc.mcp_servers
        .keys()
        .map(|name| Problem {
            kind: ProblemKind::McpServer,
            node: None,
            port: None,
            path: format!("$.mcp_servers.{name}"),
            message: format!("MCP server `{name}`: not connected: {}", not_trusted(file)),
        })
        .collect()
}

/// Validation of an untrusted file's MCP tool nodes is static: a node of a server that is
/// not connected is covered by that server's problem, not reported as an unknown block.
pub fn drop_offline_tool_nodes(problems: &mut Vec<Problem>, doc: &GraphDoc) {
    let prefixes: Vec<String> = doc
        .mcp_servers
        .keys()
        .map(|name| agentloom_blocks::mcp::tool_kind(name, ""))
        .collect();
    problems.retain(|problem| {
        problem.kind != ProblemKind::UnknownBlock
            || !problem.node.as_ref().is_some_and(|id| {
                doc.nodes
                    .iter()
                    .find(|node| &node.id == id)
                    .is_some_and(|node| prefixes.iter().any(|p| node.block.starts_with(p)))
            })
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn write(path: &Path, doc: &serde_json::Value) {
        std::fs::write(path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
    }

    fn calling(path: &str) -> serde_json::Value {
        json!({
            "format": "agentloom.graph", "version": 1, "name": "caller",
            "nodes": [{"id": "call", "block": "graph.call", "config": {"path": path}}],
            "edges": []
        })
    }

    #[test]
    fn trust_follows_the_content_of_the_file_and_of_the_files_it_calls() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_dir(&dir.path().join("data"));
        let parent = dir.path().join("parent.json");
        let child = dir.path().join("child.json");
        write(&parent, &calling("child.json"));
        write(&child, &calling("grandchild.json"));
        let grandchild = dir.path().join("grandchild.json");
        write(
            &grandchild,
            &json!({"format": "agentloom.graph", "version": 1, "name": "g", "nodes": [], "edges": []}),
        );

        let print = fingerprint(&parent).unwrap();
        assert_eq!(print.calls.len(), 2, "{print:?}");
        assert!(!store.is_trusted(&print));
        store.trust(print.clone()).unwrap();
        assert!(store.is_trusted(&fingerprint(&parent).unwrap()));

        // One byte more in a file two calls down: untrusted again.
        let mut bytes = std::fs::read(&grandchild).unwrap();
        bytes.push(b'\n');
        std::fs::write(&grandchild, &bytes).unwrap();
        assert!(!store.is_trusted(&fingerprint(&parent).unwrap()));
        store.trust(fingerprint(&parent).unwrap()).unwrap();
        assert!(store.is_trusted(&fingerprint(&parent).unwrap()));
        assert_eq!(store.list().unwrap().len(), 1, "trusting again replaces");

        // The caller itself changed.
        std::fs::write(&parent, std::fs::read_to_string(&parent).unwrap() + " ").unwrap();
        assert!(!store.is_trusted(&fingerprint(&parent).unwrap()));

        // Revoking removes it.
        store.trust(fingerprint(&parent).unwrap()).unwrap();
        assert!(store.revoke(&parent).unwrap());
        assert!(!store.revoke(&parent).unwrap());
        assert!(!store.is_trusted(&fingerprint(&parent).unwrap()));
    }

    #[test]
    fn a_called_file_that_appears_later_makes_the_caller_untrusted() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_dir(dir.path());
        let parent = dir.path().join("parent.json");
        write(&parent, &calling("later.json"));
        store.trust(fingerprint(&parent).unwrap()).unwrap();
        assert!(store.is_trusted(&fingerprint(&parent).unwrap()));
        write(&dir.path().join("later.json"), &calling("parent.json"));
        assert!(!store.is_trusted(&fingerprint(&parent).unwrap()));
    }

    #[test]
    fn threads_trusting_at_once_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_dir(&dir.path().join("data"));
        let files: Vec<PathBuf> = (0..16)
            .map(|i| {
                let path = dir.path().join(format!("g{i}.json"));
                write(&path, &calling(&format!("other{i}.json")));
                path
            })
            .collect();
        std::thread::scope(|scope| {
            for file in &files {
                let store = store.clone();
                scope.spawn(move || store.trust(fingerprint(file).unwrap()).unwrap());
            }
        });
        assert_eq!(store.list().unwrap().len(), 16);
        for file in &files {
            assert!(store.is_trusted(&fingerprint(file).unwrap()));
        }
    }

    #[test]
    fn a_damaged_store_says_how_to_fix_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STORE_FILE), "{not json").unwrap();
        let err = TrustStore::in_dir(dir.path())
            .list()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("is damaged") && err.contains("remove it"),
            "{err}"
        );
    }

    #[test]
    fn shipped_examples_are_trusted_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = crate::examples::write_examples(dir.path(), 3).unwrap();
        let print = fingerprint(&path).unwrap();
        assert!(
            !print.calls.is_empty(),
            "the subgraph example calls another"
        );
        assert!(TrustStore::in_dir(dir.path()).is_trusted(&print));
        std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + " ").unwrap();
        assert!(!TrustStore::in_dir(dir.path()).is_trusted(&fingerprint(&path).unwrap()));
    }

    #[test]
    fn needs_list_commands_urls_credentials_and_outside_files() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        write(&dir.path().join("outside.json"), &calling("missing.json"));
        let path = inner.join("g.json");
        let doc = json!({
            "format": "agentloom.graph", "version": 1, "name": "g",
            "mcp_servers": {
                "files": {"command": "sh", "args": ["-c", "touch marker"], "env": {"LEVEL": "1"}},
                "remote": {"url": "http://127.0.0.1:9/mcp", "credential": "remote-token"}
            },
            "nodes": [
                {"id": "call", "block": "graph.call", "config": {"path": "../outside.json"}},
                {"id": "fetch", "block": "http.request", "config": {"url": "http://127.0.0.1:9/"}, "credential": "api"},
                {"id": "hosted", "block": "http.request", "config": {"url": "https://api.example.org/v1", "credential": "svc"}},
                {"id": "admin", "block": "http.request", "config": {"url": "http://127.0.0.1:9/admin", "allow_private_network": true}},
                {"id": "search", "block": "web.search", "config": {"provider": "searxng", "url": "http://[::ffff:127.0.0.1]:8888/latest/meta-data/iam#"}},
                {"id": "local_model", "block": "llm.chat", "config": {"base_url": "http://127.0.0.1:11434/v1"}}
            ],
            "edges": []
        });
        write(&path, &doc);
        let doc = GraphDoc::from_json_str(&doc.to_string()).unwrap();
        let needs = needs_of(&doc, Some(&path));
        assert_eq!(
            needs.commands,
            ["`sh -c 'touch marker'` (MCP server `files`) with environment LEVEL"]
        );
        assert_eq!(
            needs.urls,
            ["http://127.0.0.1:9/mcp (MCP server `remote`) with credential `remote-token`"]
        );
        // Each credential with the host and port it would reach; only credentials the file
        // names (the local model names none, so needs none).
        assert_eq!(
            needs.credentials,
            [
                "credential `api` to node `fetch` (at 127.0.0.1:9)",
                "credential `svc` to node `hosted` (at api.example.org:443)",
            ]
        );
        assert_eq!(needs.private_network, ["node `admin`"]);
        // The search endpoint on a loopback address (whatever its spelling) needs trust; the
        // model's local base_url and a request URL without allow_private_network do not.
        assert_eq!(
            needs.local_endpoints,
            [
                "http://[::ffff:7f00:1]:8888/latest/meta-data/iam#, a local address, from node `search`"
            ]
        );
        let lines = needs.lines();
        assert!(
            lines.contains(&"reach this machine and its local network from node `admin` (allow_private_network)".to_owned()),
            "{lines:?}"
        );
        let outside = std::fs::canonicalize(dir.path().join("outside.json")).unwrap();
        assert!(needs.outside_files.contains(&outside), "{needs:?}");
        assert_eq!(needs.lines().len(), 6 + needs.outside_files.len());
    }

    #[test]
    fn an_agent_running_code_unsandboxed_needs_trust_and_is_a_problem_until_then() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.json");
        let doc = json!({
            "format": "agentloom.graph", "version": 1, "name": "g",
            "nodes": [
                {"id": "sandboxed", "block": "ai.agent", "config": {}},
                {"id": "loose", "block": "ai.agent", "config": {"run_code_unsandboxed": true}}
            ],
            "edges": []
        });
        write(&path, &doc);
        let doc = GraphDoc::from_json_str(&doc.to_string()).unwrap();
        let needs = needs_of(&doc, Some(&path));
        assert_eq!(needs.unsandboxed_code, ["loose"]);
        assert!(
            needs.lines().contains(
                &"run code without a sandbox, with your own access, in agent `loose`".to_owned()
            ),
            "{needs:?}"
        );
        let problems = unsandboxed_code_problems(&doc, &path);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].node.as_deref(), Some("loose"));
        assert_eq!(problems[0].path, "$.nodes[1].config.run_code_unsandboxed");
        assert!(
            problems[0].message.contains("agentloom trust"),
            "{}",
            problems[0].message
        );
        // The catalog of the untrusted file holds it back; trusted, it is not.
        let secrets = UntrustedSecrets::new(Some(&path));
        let source = crate::GraphSource::read(&path).unwrap();
        let untrusted_run = crate::Trust::of(false, Some(&path));
        let (_, untrusted) = crate::launch::catalog_for(&source, &untrusted_run, &secrets, None);
        assert_eq!(untrusted, problems);
        let (_, trusted) =
            crate::launch::catalog_for(&source, &crate::Trust::Trusted, &secrets, None);
        assert!(trusted.is_empty(), "{trusted:?}");
        // The app's catalog, and a run made ready through the runner, refuse it too.
        let (_, editing) =
            crate::catalog::for_editing_with_servers(&doc, Some(&path), &untrusted_run, &secrets);
        assert_eq!(editing, problems);
        let catalog = Arc::new(crate::catalog::for_editing(Some(&path), &untrusted_run));
        let refused = crate::Prepared::with_catalog(
            catalog,
            doc.clone(),
            untrusted_run,
            &crate::Credentials::Default,
        )
        .err()
        .unwrap();
        assert_eq!(refused[0], problems[0], "{refused:?}");
    }

    #[test]
    fn untrusted_secrets_refuse_with_the_fix() {
        let err = UntrustedSecrets::new(Some(Path::new("/tmp/shared.json")))
            .secret("api")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "graph file /tmp/shared.json is not trusted: run `agentloom trust /tmp/shared.json`"
            ),
            "{err}"
        );
    }
}
