//! The import rule of ARCHITECTURE.md, checked on the source itself: within a crate no file
//! imports, directly or through others, a file that imports it back, and no crate depends
//! on a crate of a layer above its own.
//!
//! Files are read, not compiled: each crate's module tree is followed from `lib.rs`
//! (`mod` lines, `#[path]` included), and every `use crate::…`, `use super::…`, `use
//! self::…`, relative `use child::…` and `crate::…`/`super::…` path in the code is an arrow
//! from its file to the file that defines the name (through `use` re-exports and globs).
//! `#[cfg(test)]` items are test code and draw no arrow.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates, lowest layer first, with the layer of each: a crate may depend only on
/// crates of a lower layer (blocks and engine share one and neither uses the other).
const LAYERS: &[(&str, u32)] = &[
    ("core", 0),
    ("blocks", 1),
    ("engine", 1),
    ("runner", 2),
    ("app", 3),
    ("ui", 4),
];

/// Circles that stand in the code today and are to be cut; each is its files in order. A
/// circle not listed fails the check, and so does a listed one that no longer exists (so
/// that the list only ever shrinks).
const KNOWN_CIRCLES: &[&[&str]] = &[];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let root = workspace();
    let mut found = Vec::new();
    for (krate, _) in LAYERS {
        let graph = file_graph(&root, &root.join(krate).join("src").join("lib.rs"));
        for circle in circles(&graph) {
            found.push(
                circle
                    .iter()
                    .map(|file| relative(&root, file))
                    .collect::<Vec<_>>(),
            );
        }
    }
    let known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|f| (*f).to_owned()).collect())
        .collect();
    let new: Vec<String> = found
        .iter()
        .filter(|c| !known.contains(c))
        .map(|c| format!("{} -> {}", c.join(" -> "), c[0]))
        .collect();
    let gone: Vec<String> = known
        .iter()
        .filter(|c| !found.contains(c))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(
        new.is_empty(),
        "files that import each other in a circle (break it: move what both need below both):\n  {}",
        new.join("\n  ")
    );
    assert!(
        gone.is_empty(),
        "circles listed in KNOWN_CIRCLES that no longer exist (remove them from the list):\n  {}",
        gone.join("\n  ")
    );
}

/// Every source file of every crate is in the check: a room in a folder of its own
/// (runner/src/remote, engine/src/executor) is read like any other file, and a file the
/// module tree does not reach (test code, a binary's own files) is named here.
#[test]
fn every_source_file_of_a_crate_is_read() {
    let root = workspace();
    let mut unread = Vec::new();
    for (krate, _) in LAYERS {
        let src = root.join(krate).join("src");
        let graph = file_graph(&root, &src.join("lib.rs"));
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let name = relative(&root, &file);
            if !graph.contains_key(&file) && !OUTSIDE_THE_TREE.contains(&name.as_str()) {
                unread.push(name);
            }
        }
    }
    assert!(
        unread.is_empty(),
        "source files the import check does not read (declare them with `mod`, or list them \
         in OUTSIDE_THE_TREE when only tests or a binary use them):\n  {}",
        unread.join("\n  ")
    );
}

/// Source files outside a crate's library module tree: test code (`#[cfg(test)]`
/// modules draw no arrow) and the binary's `main.rs`.
const OUTSIDE_THE_TREE: &[&str] = &[
    "ui/src/main.rs",
    "blocks/src/llm/tests.rs",
    "engine/src/store/tests.rs",
    "engine/src/store/values_tests.rs",
];

/// Every `.rs` file under `dir`, at any depth.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_crate_depends_on_a_crate_above_its_layer() {
    let root = workspace();
    let mut wrong = Vec::new();
    for (krate, _) in LAYERS {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        wrong.extend(dependencies_against_layers(krate, &manifest));
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the one-way order core <- blocks, core <- engine, \
         {{core, blocks, engine}} <- runner <- app <- ui:\n  {}",
        wrong.join("\n  ")
    );
}

/// The check sees a dependency on a crate of the same layer or above, also per target;
/// dev-dependencies (tests may use any crate) are not dependencies of the crate.
#[test]
fn a_dependency_against_the_layers_is_named() {
    let manifest = "[package]\nname = \"agentloom-engine\"\n\n[dependencies]\n\
        agentloom-core.workspace = true\n\
        [target.'cfg(unix)'.dependencies]\nagentloom-blocks = { path = \"../blocks\" }\n\
        [dev-dependencies]\nagentloom-runner.workspace = true\n";
    assert_eq!(
        dependencies_against_layers("engine", manifest),
        vec!["engine depends on agentloom-blocks".to_owned()]
    );
}

/// The `agentloom-*` crates `krate`'s manifest depends on that are not of a lower layer.
fn dependencies_against_layers(krate: &str, manifest: &str) -> Vec<String> {
    let layer_of: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let ours = layer_of[krate];
    normal_dependencies(manifest)
        .iter()
        .filter_map(|dependency| dependency.strip_prefix("agentloom-"))
        .filter(|name| layer_of.get(name).is_none_or(|theirs| *theirs >= ours))
        .map(|name| format!("{krate} depends on agentloom-{name}"))
        .collect()
}

/// The check sees a circle: two files of a scratch crate that import each other, and a
/// third reached through a re-export.
#[test]
fn a_circle_through_a_re_export_is_found_and_named_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("shapes")).unwrap();
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).unwrap();
    write(
        "lib.rs",
        "mod shapes;\nmod paint;\n#[cfg(test)]\nmod tests { use crate::paint::Brush; }\n",
    );
    write("shapes/mod.rs", "mod square;\npub use square::Square;\n");
    write(
        "shapes/square.rs",
        "// crate::paint::Brush in a comment is no import\npub struct Square;\n\
         fn fill() { let _ = \"crate::paint\"; crate::paint::Brush::new(); }\n",
    );
    write(
        "paint.rs",
        "use crate::shapes::{Square};\npub struct Brush;\n",
    );
    let graph = file_graph(dir.path(), &src.join("lib.rs"));
    let named: Vec<Vec<String>> = circles(&graph)
        .iter()
        .map(|c| c.iter().map(|f| relative(dir.path(), f)).collect())
        .collect();
    assert_eq!(
        named,
        vec![vec![
            "src/paint.rs".to_owned(),
            "src/shapes/square.rs".to_owned()
        ]]
    );
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The `agentloom-*` names under `[dependencies]` (also per target), not dev or build ones.
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]"
                || (line.starts_with("[target.") && line.ends_with(".dependencies]"));
            continue;
        }
        if in_dependencies && let Some((name, _)) = line.split_once('=') {
            let name = name.trim();
            names.push(name.split('.').next().unwrap_or(name).trim().to_owned());
        }
    }
    names
}

// ---- reading Rust source as tokens ----

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
    /// `::`
    PathSep,
    /// `$` followed by an identifier (a macro variable such as `$crate`)
    MacroVar,
}

/// The tokens of `text` that matter here: comments dropped, string and char literals kept
/// as one token each, lifetimes and numbers dropped.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some((literal, end)) = raw_string(&chars, i) {
            out.push(Token::Str(literal));
            i = end;
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            i += if c == 'b' { 2 } else { 1 };
            let mut literal = String::new();
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&ch) = chars.get(i) {
                    literal.push(ch);
                }
                i += 1;
            }
            out.push(Token::Str(literal));
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): neither matters.
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else if c == '$' && next.is_some_and(|n| n.is_alphabetic() || n == '_') {
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::MacroVar);
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// `r"…"`, `r#"…"#`, `br#"…"#` starting at `i`: its text and the index past it.
fn raw_string(chars: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    // Not the end of an identifier such as `for`.
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    let start = j;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some((chars[start..j].iter().collect(), j + 1 + hashes));
        }
        j += 1;
    }
    None
}

// ---- the module tree and its imports ----

/// One module (a file, or an inline `mod name { … }` in one).
#[derive(Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Names this module's own code defines.
    defines: BTreeSet<String>,
    /// `use` lines: the name bound (None for a glob) and the path written.
    uses: Vec<(Option<String>, Vec<String>)>,
    /// Paths written in code: `crate::…`, `super::…`, `self::…`.
    paths: Vec<Vec<String>>,
}

type ModPath = Vec<String>;

struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

/// The arrows between the files of the crate whose root is `root_file`.
fn file_graph(_root: &Path, root_file: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut krate = Crate {
        modules: BTreeMap::new(),
    };
    read_module_file(&mut krate, Vec::new(), root_file, true);
    // The module paths each file is read as (a file may be included twice by `#[path]`).
    let mut read_as: BTreeMap<&Path, Vec<&ModPath>> = BTreeMap::new();
    for (path, module) in &krate.modules {
        read_as.entry(&module.file).or_default().push(path);
    }
    // A file's own parts (the modules it declares, at any depth) are not drawn as its
    // imports: lib.rs or a folder's mod.rs is the face of what its parts share.
    let is_part_of = |part: &Path, whole: &Path| {
        read_as[part].iter().any(|inner| {
            read_as[whole]
                .iter()
                .any(|outer| inner.len() > outer.len() && inner.starts_with(outer))
        })
    };
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, module) in &krate.modules {
        graph.entry(module.file.clone()).or_default();
        let mut written: Vec<Vec<String>> = module.paths.clone();
        written.extend(module.uses.iter().map(|(_, p)| p.clone()));
        for segments in written {
            if let Some(target) = krate.resolve(path, &segments, 0)
                && target != module.file
                && !is_part_of(&target, &module.file)
            {
                graph.entry(module.file.clone()).or_default().insert(target);
            }
        }
    }
    graph
}

fn read_module_file(krate: &mut Crate, path: ModPath, file: &Path, owns_dir: bool) {
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    // Where this file's `mod x;` children live: beside it for lib.rs/mod.rs, else in a
    // folder named after it.
    let child_dir = if owns_dir {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    let tokens = tokens(&text);
    let mut reader = Reader {
        tokens: &tokens,
        at: 0,
    };
    let mut declared = Vec::new();
    reader.items(krate, &path, file, &mut declared, None);
    for (child_path, explicit, name) in declared {
        let (child_file, owns) = match explicit {
            Some(relative) => (file.parent().unwrap().join(relative), false),
            None => {
                let flat = child_dir.join(format!("{name}.rs"));
                if flat.exists() {
                    (flat, false)
                } else {
                    (child_dir.join(&name).join("mod.rs"), true)
                }
            }
        };
        let owns = owns || child_file.file_name().is_some_and(|n| n == "mod.rs");
        // The same module once per OS (`#[cfg(…)] #[path = "x_macos.rs"] mod x;`): each
        // file is read as a module of its own, so that its imports are drawn from it.
        let child_path = match krate.modules.get(&child_path) {
            Some(read) if read.file != child_file => {
                let mut alternate = child_path;
                let name = alternate.pop().unwrap_or_default();
                alternate.push(format!("{name}@{}", child_file.display()));
                alternate
            }
            _ => child_path,
        };
        read_module_file(krate, child_path, &child_file, owns);
    }
}

struct Reader<'a> {
    tokens: &'a [Token],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self, ahead: usize) -> Option<&Token> {
        self.tokens.get(self.at + ahead)
    }

    fn ident(&self, ahead: usize) -> Option<&str> {
        match self.peek(ahead) {
            Some(Token::Ident(name)) => Some(name),
            _ => None,
        }
    }

    /// Reads the items of module `path` until its closing brace (or the end of the file),
    /// recording them; `mod x;` lines are returned in `declared` to be read from their files.
    fn items(
        &mut self,
        krate: &mut Crate,
        path: &ModPath,
        file: &Path,
        declared: &mut Vec<(ModPath, Option<String>, String)>,
        stop_at_depth: Option<()>,
    ) {
        let module = krate.modules.entry(path.clone()).or_default();
        module.file = file.to_path_buf();
        let mut depth = 0usize;
        let mut attribute_path: Option<String> = None;
        while let Some(token) = self.peek(0).cloned() {
            match token {
                Token::Punct('#') if self.peek(1) == Some(&Token::Punct('[')) => {
                    let attribute = self.attribute();
                    if is_cfg_test(&attribute) {
                        self.skip_item();
                    } else if let [Token::Ident(name), Token::Punct('='), Token::Str(value)] =
                        attribute.as_slice()
                        && name == "path"
                    {
                        attribute_path = Some(value.clone());
                    }
                    continue;
                }
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    if depth == 0 && stop_at_depth.is_some() {
                        self.at += 1;
                        return;
                    }
                    depth = depth.saturating_sub(1);
                }
                Token::Ident(ref word) if word == "mod" => {
                    if let Some(name) = self.ident(1).map(str::to_owned) {
                        let mut child = path.clone();
                        child.push(name.clone());
                        krate
                            .modules
                            .get_mut(path)
                            .unwrap()
                            .children
                            .insert(name.clone());
                        match self.peek(2) {
                            Some(Token::Punct(';')) => {
                                declared.push((child, attribute_path.take(), name));
                                self.at += 3;
                            }
                            Some(Token::Punct('{')) => {
                                self.at += 3;
                                self.items(krate, &child, file, declared, Some(()));
                            }
                            _ => self.at += 2,
                        }
                        attribute_path = None;
                        continue;
                    }
                }
                Token::Ident(ref word) if word == "use" => {
                    self.at += 1;
                    let mut entries = Vec::new();
                    self.use_tree(Vec::new(), &mut entries);
                    krate.modules.get_mut(path).unwrap().uses.extend(entries);
                    continue;
                }
                Token::Ident(ref word)
                    if matches!(
                        word.as_str(),
                        "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "union"
                    ) || (word == "macro_rules" && self.peek(1) == Some(&Token::Punct('!'))) =>
                {
                    let ahead = if word == "macro_rules" { 2 } else { 1 };
                    if let Some(name) = self.ident(ahead).map(str::to_owned) {
                        krate.modules.get_mut(path).unwrap().defines.insert(name);
                    }
                }
                Token::Ident(ref word)
                    if matches!(word.as_str(), "crate" | "super" | "self")
                        && self.peek(1) == Some(&Token::PathSep)
                        && !(self.at > 0
                            && matches!(self.tokens.get(self.at - 1), Some(Token::Ident(w)) if w == "in")) =>
                {
                    let segments = self.path();
                    krate.modules.get_mut(path).unwrap().paths.push(segments);
                    continue;
                }
                Token::MacroVar => {
                    // `$crate::…` in a macro: skip the path, it names the crate from outside.
                    self.at += 1;
                    while self.peek(0) == Some(&Token::PathSep) && self.ident(1).is_some() {
                        self.at += 2;
                    }
                    continue;
                }
                _ => {}
            }
            self.at += 1;
        }
    }

    /// The tokens inside `#[…]`, consumed.
    fn attribute(&mut self) -> Vec<Token> {
        self.at += 2;
        let mut depth = 0;
        let start = self.at;
        while let Some(token) = self.peek(0) {
            match token {
                Token::Punct('[') => depth += 1,
                Token::Punct(']') if depth == 0 => break,
                Token::Punct(']') => depth -= 1,
                _ => {}
            }
            self.at += 1;
        }
        let inside = self.tokens[start..self.at].to_vec();
        self.at += 1;
        inside
    }

    /// Skips one item: up to a `;` outside braces, or through its first braced block.
    fn skip_item(&mut self) {
        // Further attributes of the same item.
        while self.peek(0) == Some(&Token::Punct('#')) && self.peek(1) == Some(&Token::Punct('[')) {
            self.attribute();
        }
        let mut depth = 0usize;
        while let Some(token) = self.peek(0).cloned() {
            self.at += 1;
            match token {
                Token::Punct(';') if depth == 0 => return,
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    }

    /// A path written in code: `crate::a::b`, its segments.
    fn path(&mut self) -> Vec<String> {
        let mut segments = Vec::new();
        while let Some(name) = self.ident(0).map(str::to_owned) {
            segments.push(name);
            self.at += 1;
            if self.peek(0) == Some(&Token::PathSep) && self.ident(1).is_some() {
                self.at += 1;
            } else {
                break;
            }
        }
        segments
    }

    /// One use tree after `use` (or inside a group), flattened into (bound name, path).
    fn use_tree(&mut self, prefix: Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
        let mut segments = prefix;
        if self.peek(0) == Some(&Token::PathSep) {
            self.at += 1;
        }
        loop {
            match self.peek(0).cloned() {
                Some(Token::Ident(name)) if name == "self" && !segments.is_empty() => {
                    self.at += 1;
                    let bound = self.alias().or_else(|| segments.last().cloned());
                    out.push((bound, segments.clone()));
                    break;
                }
                Some(Token::Ident(name)) => {
                    segments.push(name);
                    self.at += 1;
                    if self.peek(0) == Some(&Token::PathSep) {
                        self.at += 1;
                        continue;
                    }
                    let bound = self.alias().or_else(|| segments.last().cloned());
                    out.push((bound, segments.clone()));
                    break;
                }
                Some(Token::Punct('*')) => {
                    self.at += 1;
                    out.push((None, segments.clone()));
                    break;
                }
                Some(Token::Punct('{')) => {
                    self.at += 1;
                    loop {
                        match self.peek(0) {
                            Some(Token::Punct('}')) => {
                                self.at += 1;
                                break;
                            }
                            Some(Token::Punct(',')) => self.at += 1,
                            None => break,
                            _ => self.use_tree(segments.clone(), out),
                        }
                    }
                    break;
                }
                _ => break,
            }
        }
        if self.peek(0) == Some(&Token::Punct(';')) {
            self.at += 1;
        }
    }

    fn alias(&mut self) -> Option<String> {
        if self.ident(0) == Some("as") {
            let name = self.ident(1).map(str::to_owned);
            self.at += 2;
            return name;
        }
        None
    }
}

fn is_cfg_test(attribute: &[Token]) -> bool {
    let words: Vec<String> = attribute
        .iter()
        .map(|t| match t {
            Token::Ident(w) => w.clone(),
            Token::Punct(c) => c.to_string(),
            _ => String::new(),
        })
        .collect();
    let joined = words.concat();
    joined == "cfg(test)" || joined.starts_with("cfg(all(test,")
}

impl Crate {
    /// The file defining what `segments` names, written in module `context`; `None` for a
    /// path into another crate.
    fn resolve(&self, context: &ModPath, segments: &[String], hops: usize) -> Option<PathBuf> {
        if hops > 16 || segments.is_empty() {
            return None;
        }
        let mut base: ModPath;
        let mut rest = segments;
        match segments[0].as_str() {
            "crate" => {
                base = Vec::new();
                rest = &segments[1..];
            }
            "self" => {
                base = context.clone();
                rest = &segments[1..];
            }
            "super" => {
                base = context.clone();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            first => {
                // A relative path: a child module of this one, else another crate.
                if !self.modules.get(context)?.children.contains(first) {
                    return None;
                }
                base = context.clone();
            }
        }
        while let Some(next) = rest.first() {
            if self.modules.get(&base)?.children.contains(next) {
                base.push(next.clone());
                rest = &rest[1..];
            } else {
                break;
            }
        }
        match rest.first() {
            Some(name) => Some(self.defining_file(&base, name, hops)),
            None => Some(self.modules.get(&base)?.file.clone()),
        }
    }

    /// The file that defines `name` as seen from module `module`: the module itself, or
    /// where a `use` of it leads.
    fn defining_file(&self, module: &ModPath, name: &str, hops: usize) -> PathBuf {
        let found = &self.modules[module];
        if found.defines.contains(name) {
            return found.file.clone();
        }
        for (bound, path) in &found.uses {
            if bound.as_deref() == Some(name)
                && let Some(file) = self.resolve(module, path, hops + 1)
            {
                return file;
            }
        }
        for (bound, path) in &found.uses {
            if bound.is_none() {
                let mut through = path.clone();
                through.push(name.to_owned());
                if let Some(file) = self.resolve(module, &through, hops + 1)
                    && self.file_defines(&file, name)
                {
                    return file;
                }
            }
        }
        found.file.clone()
    }

    fn file_defines(&self, file: &Path, name: &str) -> bool {
        self.modules
            .values()
            .any(|m| m.file == file && m.defines.contains(name))
    }
}

/// Every circle of `graph`, each as its files in import order: within each strongly
/// connected part of two files or more, the shortest loop through each file that no loop
/// found before passes through, starting at that file (files taken by name).
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    let nodes: Vec<&PathBuf> = graph.keys().collect();
    let index: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let next_of = |at: usize| -> Vec<usize> {
        graph
            .get(nodes[at])
            .into_iter()
            .flatten()
            .filter_map(|n| index.get(n).copied())
            .collect()
    };
    let reach = |from: usize| -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(at) = stack.pop() {
            for n in next_of(at) {
                if seen.insert(n) {
                    stack.push(n);
                }
            }
        }
        seen
    };
    let reached: Vec<BTreeSet<usize>> = (0..nodes.len()).map(reach).collect();
    let mut covered = BTreeSet::new();
    let mut found = Vec::new();
    for (start, reachable) in reached.iter().enumerate() {
        if covered.contains(&start) || !reachable.contains(&start) {
            continue;
        }
        // The shortest loop from `start` back to it (breadth first).
        let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut last = None;
        while let Some(at) = queue.pop_front() {
            for n in next_of(at) {
                if n == start {
                    last = Some(at);
                    break;
                }
                if let std::collections::btree_map::Entry::Vacant(slot) = came_from.entry(n) {
                    slot.insert(at);
                    queue.push_back(n);
                }
            }
            if last.is_some() {
                break;
            }
        }
        let mut walk = vec![last.unwrap()];
        while *walk.last().unwrap() != start {
            walk.push(came_from[walk.last().unwrap()]);
        }
        walk.reverse();
        if walk.len() < 2 {
            continue;
        }
        covered.extend(walk.iter().copied());
        found.push(walk.into_iter().map(|n| nodes[n].clone()).collect());
    }
    found
}
