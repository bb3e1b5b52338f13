//! `docs.load`: files of the workspace as documents — a file, a folder (every file of a
//! known format under it) or a glob (`docs/**/*.md`) — read only through the confined file
//! layer, so no path or link leads outside the workspace. Formats: see [`super::formats`].
//! Caps bound each file, the total and the number of files; a file that cannot be read
//! fails the node naming it, so nothing of a bad batch goes further.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use super::formats::{Format, documents_of};
use super::values::document_value;
use crate::confined::{self, EntryKind, OverCap};

const DEFAULT_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
const DEFAULT_MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;
const DEFAULT_MAX_FILES: u64 = 1000;
/// Folders deeper than this under the starting folder are not walked.
const MAX_DEPTH: usize = 32;

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(DocsLoad::new())]
}

struct DocsLoad {
    meta: BlockMeta,
}

impl DocsLoad {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "docs.load",
                "Load documents",
                "Knowledge",
                "Reads files of the workspace as documents: txt, md, html, pdf, json, jsonl, csv; one path, folder or glob per line.",
            )
            .field(ConfigField::multiline("paths", "Paths").help(
                "One per line, relative to the workspace: a file, a folder (its files of known formats, recursively) or a glob such as `docs/**/*.md`. Empty: from the `paths` input.",
            ))
            .field(
                ConfigField::integer("max_file_bytes", "Max bytes per file", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_MAX_FILE_BYTES))
                    .help("A larger file fails the node, naming it."),
            )
            .field(
                ConfigField::integer("max_total_bytes", "Max bytes in all", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_MAX_TOTAL_BYTES))
                    .help("The most all the files may hold together; beyond it the node fails."),
            )
            .field(
                ConfigField::integer("max_files", "Max files", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_MAX_FILES))
                    .help("The most files the paths may name; beyond it the node fails."),
            ),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Caps {
    file_bytes: u64,
    total_bytes: u64,
    files: usize,
}

impl Block for DocsLoad {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let read = ConfigReader(config);
        let paths = patterns(read.str("paths")?.unwrap_or_default());
        let caps = Caps {
            file_bytes: read
                .u64_or("max_file_bytes", DEFAULT_MAX_FILE_BYTES)?
                .max(1),
            total_bytes: read
                .u64_or("max_total_bytes", DEFAULT_MAX_TOTAL_BYTES)?
                .max(1),
            files: usize::try_from(read.u64_or("max_files", DEFAULT_MAX_FILES)?.max(1))
                .unwrap_or(usize::MAX),
        };
        let inputs = if paths.is_empty() {
            vec![
                PortSpec::new("paths", ValueType::Any)
                    .describe("A path, folder or glob, or a list of them."),
            ]
        } else {
            Vec::new()
        };
        Ok(Arc::new(DocsLoadNode {
            paths,
            caps,
            ports: Ports::new(
                inputs,
                vec![PortSpec::new("documents", ValueType::list_of(ValueType::Object)).describe(
                    "{text, source, metadata: {source, format, offset, page/index/line/row}}, in path order.",
                )],
            ),
        }))
    }
}

fn patterns(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

struct DocsLoadNode {
    paths: Vec<String>,
    caps: Caps,
    ports: Ports,
}

/// Whether `path` (`/`-separated) matches `pattern`: `*` and `?` within one name, `**`
/// any number of whole names.
pub(crate) fn glob_matches(pattern: &str, path: &str) -> bool {
    fn names(pattern: &[&str], path: &[&str]) -> bool {
        match pattern.split_first() {
            None => path.is_empty(),
            Some((&"**", rest)) => (0..=path.len()).any(|skip| names(rest, &path[skip..])),
            Some((first, rest)) => path
                .split_first()
                .is_some_and(|(name, tail)| name_matches(first, name) && names(rest, tail)),
        }
    }
    fn name_matches(pattern: &str, name: &str) -> bool {
        let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
        let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
        while ni < n.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
                pi += 1;
                ni += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some(pi);
                mark = ni;
                pi += 1;
            } else if let Some(s) = star {
                pi = s + 1;
                mark += 1;
                ni = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
    let pattern: Vec<&str> = pattern
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    names(&pattern, &path)
}

fn has_glob(text: &str) -> bool {
    text.contains(['*', '?'])
}

/// Every file under folder `start` (relative; empty: the workspace), in name order, not
/// following links, at most `limit` + 1 (so going over the cap can be told).
async fn files_under(
    workspace: &std::path::Path,
    start: &str,
    limit: usize,
) -> Result<Vec<String>, BlockError> {
    let mut found = Vec::new();
    let mut stack = vec![(start.to_owned(), 0)];
    while let Some((folder, depth)) = stack.pop() {
        let entries = confined::list(workspace, &folder).await?;
        let mut subfolders = Vec::new();
        for entry in entries {
            let path = if folder.is_empty() {
                entry.name.clone()
            } else {
                format!("{folder}/{}", entry.name)
            };
            match entry.kind {
                EntryKind::File => {
                    found.push(path);
                    if found.len() > limit {
                        return Ok(found);
                    }
                }
                EntryKind::Dir if depth < MAX_DEPTH => subfolders.push((path, depth + 1)),
                _ => {}
            }
        }
        stack.extend(subfolders.into_iter().rev());
    }
    Ok(found)
}

impl DocsLoadNode {
    /// The files the patterns name, each once, in pattern order.
    async fn files(
        &self,
        ctx: &dyn RunCtx,
        patterns: &[String],
    ) -> Result<Vec<String>, BlockError> {
        let workspace = ctx.workspace();
        let mut files: Vec<String> = Vec::new();
        let over = |n: usize| {
            BlockError::permanent(format!(
                "the paths name more than {n} files (max_files); narrow them or raise max_files"
            ))
        };
        for pattern in patterns {
            let pattern = pattern
                .trim()
                .trim_start_matches("./")
                .trim_end_matches('/');
            let listed = if has_glob(pattern) {
                // Walk from the folder before the first wildcard.
                let literal: Vec<&str> = pattern
                    .split('/')
                    .take_while(|name| !has_glob(name))
                    .collect();
                let start = literal.join("/");
                let under = files_under(workspace, &start, self.caps.files).await?;
                let matched: Vec<String> = under
                    .into_iter()
                    .filter(|f| glob_matches(pattern, f))
                    .collect();
                if matched.is_empty() {
                    return Err(BlockError::permanent(format!(
                        "no file of the workspace matches `{pattern}`"
                    )));
                }
                matched
            } else {
                let entries = confined::list(workspace, parent_of(pattern)).await?;
                let name = pattern.rsplit('/').next().unwrap_or(pattern);
                match entries.iter().find(|e| e.name == name).map(|e| e.kind) {
                    Some(EntryKind::Dir) => files_under(workspace, pattern, self.caps.files)
                        .await?
                        .into_iter()
                        .filter(|f| Format::of(f).is_some())
                        .collect(),
                    // A file, a link (the confined read refuses one leading out) or a
                    // missing name (the read says so).
                    _ => vec![pattern.to_owned()],
                }
            };
            for file in listed {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
            if files.len() > self.caps.files {
                return Err(over(self.caps.files));
            }
        }
        Ok(files)
    }
}

fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

fn patterns_from(value: &Value) -> Result<Vec<String>, BlockError> {
    match value {
        Value::Text(text) => Ok(patterns(text)),
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    BlockError::input(
                        "paths",
                        format!("item {i} is {}, not a path", item.kind_name()),
                    )
                })
            })
            .collect(),
        other => Err(BlockError::input(
            "paths",
            format!(
                "{} given: give a path or a list of paths",
                other.kind_name()
            ),
        )),
    }
}

#[async_trait]
impl NodeImpl for DocsLoadNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let patterns = if self.paths.is_empty() {
            let value = inputs
                .remove("paths")
                .ok_or_else(|| BlockError::input("paths", "no value arrived"))?;
            patterns_from(&value)?
        } else {
            self.paths.clone()
        };
        if patterns.is_empty() {
            return Err(BlockError::input("paths", "no path given"));
        }
        let files = self.files(ctx, &patterns).await?;
        let workspace = ctx.workspace();
        let mut total: u64 = 0;
        let mut documents = Vec::new();
        for file in files {
            let Some(format) = Format::of(&file) else {
                return Err(BlockError::permanent(format!(
                    "`{file}`: not a format docs.load reads (txt, md, html, pdf, json, jsonl, csv)"
                )));
            };
            let cap = self.caps.file_bytes;
            let read = confined::read(workspace, &file, cap, OverCap::Refuse)
                .await
                .map_err(|e| {
                    BlockError::permanent(e.describe(
                        workspace,
                        &format!(
                            "docs.load's max_file_bytes of {cap}; raise it if this is expected"
                        ),
                    ))
                })?;
            total += read.bytes.len() as u64;
            if total > self.caps.total_bytes {
                return Err(BlockError::permanent(format!(
                    "the files read up to `{}` hold more than max_total_bytes ({}); load fewer or raise it",
                    read.relative, self.caps.total_bytes
                )));
            }
            let source = read.relative.clone();
            let shown = source.clone();
            let bytes = read.bytes;
            let parsed =
                agentloom_core::run_cpu_bound(ctx, move || documents_of(&source, format, &bytes))
                    .await
                    .map_err(|_| {
                        BlockError::permanent(format!(
                            "`{shown}` could not be read as {}",
                            format.name()
                        ))
                    })?;
            documents.extend(parsed.map_err(BlockError::permanent)?);
        }
        Ok(agentloom_core::outputs([(
            "documents",
            Value::list(documents.iter().map(document_value).collect()),
        )]))
    }
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn globs() {
        assert!(glob_matches("docs/**/*.md", "docs/a.md"));
        assert!(glob_matches("docs/**/*.md", "docs/x/y/a.md"));
        assert!(!glob_matches("docs/**/*.md", "other/a.md"));
        assert!(glob_matches("*.txt", "notes.txt"));
        assert!(!glob_matches("*.txt", "dir/notes.txt"));
        assert!(glob_matches("data/row?.csv", "data/row1.csv"));
    }
}
