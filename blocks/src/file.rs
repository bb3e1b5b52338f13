//! `file.read` and `file.write`: files inside the run's workspace directory.

use std::sync::Arc;

use crate::confined::{self, OverCap};
use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

const READ_MODES: [&str; 3] = ["text", "bytes", "json"];
/// file.read refuses larger files unless `max_bytes` says otherwise.
const DEFAULT_MAX_READ_BYTES: u64 = 64 * 1024 * 1024;
const WRITE_MODES: [&str; 2] = ["text", "json"];

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(FileRead::new()), Box::new(FileWrite::new())]
}

fn path_field() -> ConfigField {
    ConfigField::text("path", "Path").help(
        "A path relative to the workspace directory, e.g. `notes/today.md`. Leave empty to take it from the `path` input.",
    )
}

/// The fixed path from config, or `None` when it comes in on the `path` input.
fn configured_path(config: &Config) -> Result<Option<String>, ConfigError> {
    Ok(ConfigReader(config)
        .str("path")?
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned))
}

fn path_port() -> PortSpec {
    PortSpec::new("path", ValueType::Text).describe("A path relative to the workspace directory.")
}

fn take_path(fixed: Option<&String>, inputs: &mut ValueMap) -> Result<String, BlockError> {
    match fixed {
        Some(path) => Ok(path.clone()),
        None => inputs.take_text("path"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Text,
    Bytes,
    Json,
}

fn mode(name: &str) -> Mode {
    match name {
        "bytes" => Mode::Bytes,
        "json" => Mode::Json,
        _ => Mode::Text,
    }
}

struct FileRead {
    meta: BlockMeta,
}

impl FileRead {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "file.read",
                "Read file",
                "Files",
                "Reads a file from the workspace directory.",
            )
            .field(path_field())
            .field(
                ConfigField::choice("mode", "Read as", &READ_MODES)
                    .default_value(serde_json::json!("text"))
                    .help("text: UTF-8 text; bytes: raw bytes; json: parse the file as JSON."),
            )
            .field(
                ConfigField::integer("max_bytes", "Max size (bytes)", Some(1), None)
                    .default_value(serde_json::json!(DEFAULT_MAX_READ_BYTES))
                    .help("Refuse files larger than this (64 MiB by default), so one big file cannot exhaust memory."),
            ),
        }
    }
}

impl Block for FileRead {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let path = configured_path(config)?;
        let mode = mode(ConfigReader(config).choice_or("mode", &READ_MODES, "text")?);
        let max_bytes = ConfigReader(config).u64_or("max_bytes", DEFAULT_MAX_READ_BYTES)?;
        if max_bytes == 0 {
            return Err(ConfigError::new("max_bytes", "must be at least 1"));
        }
        let inputs = if path.is_some() {
            Vec::new()
        } else {
            vec![path_port()]
        };
        let out_type = match mode {
            Mode::Text => ValueType::Text,
            Mode::Bytes => ValueType::Bytes,
            Mode::Json => ValueType::Any,
        };
        let ports = Ports::new(
            inputs,
            vec![PortSpec::new("content", out_type).describe("The file's content.")],
        );
        Ok(Arc::new(FileReadNode {
            path,
            mode,
            max_bytes,
            ports,
        }))
    }
}

struct FileReadNode {
    path: Option<String>,
    mode: Mode,
    max_bytes: u64,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for FileReadNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let relative = take_path(self.path.as_ref(), &mut inputs)?;
        let workspace = ctx.workspace();
        let max_bytes = self.max_bytes;
        let read = confined::read(workspace, &relative, max_bytes, OverCap::Refuse)
            .await
            .map_err(|e| {
                BlockError::permanent(e.describe(
                    workspace,
                    &format!(
                        "file.read's max_bytes of {max_bytes}; raise max_bytes if this is expected"
                    ),
                ))
            })?;
        let (shown, bytes) = (read.relative, read.bytes);
        let content = match self.mode {
            Mode::Bytes => Value::bytes(bytes),
            Mode::Text => Value::text(String::from_utf8(bytes).map_err(|_| {
                BlockError::permanent(format!(
                    "`{shown}` is not UTF-8 text; read it in bytes mode instead"
                ))
            })?),
            Mode::Json => {
                let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                    BlockError::permanent(format!("`{shown}` is not valid JSON: {e}"))
                })?;
                Value::from_json(json)
            }
        };
        Ok(agentloom_core::outputs([("content", content)]))
    }
}

struct FileWrite {
    meta: BlockMeta,
}

impl FileWrite {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "file.write",
                "Write file",
                "Files",
                "Writes its input to a file in the workspace directory, creating folders as needed.",
            )
            .with_side_effects()
            .field(path_field())
            .field(
                ConfigField::boolean("append", "Append")
                    .default_value(serde_json::json!(false))
                    .help("Add to the end of the file instead of replacing it."),
            )
            .field(
                ConfigField::choice("mode", "Write as", &WRITE_MODES)
                    .default_value(serde_json::json!("text"))
                    .help("text: text as is, other values as JSON; json: pretty JSON (one compact line per value when appending)."),
            ),
        }
    }
}

impl Block for FileWrite {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let reader = ConfigReader(config);
        let path = configured_path(config)?;
        let append = reader.bool_or("append", false)?;
        let mode = mode(reader.choice_or("mode", &WRITE_MODES, "text")?);
        let mut inputs = vec![PortSpec::new("content", ValueType::Any).describe("What to write.")];
        if path.is_none() {
            inputs.push(path_port());
        }
        let ports = Ports::new(
            inputs,
            vec![
                PortSpec::new("path", ValueType::Text)
                    .describe("The path written, relative to the workspace."),
            ],
        );
        Ok(Arc::new(FileWriteNode {
            path,
            append,
            mode,
            ports,
        }))
    }
}

struct FileWriteNode {
    path: Option<String>,
    append: bool,
    mode: Mode,
    ports: Ports,
}

impl FileWriteNode {
    fn encode(&self, content: Value) -> Result<Vec<u8>, BlockError> {
        Ok(match (self.mode, content) {
            (Mode::Json, value) => {
                let json = value.to_json();
                let mut text = if self.append {
                    serde_json::to_string(&json)
                } else {
                    serde_json::to_string_pretty(&json)
                }
                .map_err(|e| {
                    BlockError::input("content", format!("cannot be written as JSON: {e}"))
                })?;
                text.push('\n');
                text.into_bytes()
            }
            (_, Value::Bytes(bytes)) => std::sync::Arc::unwrap_or_clone(bytes),
            (_, Value::Text(text)) => std::sync::Arc::unwrap_or_clone(text).into_bytes(),
            (_, other) => other.to_text().into_bytes(),
        })
    }
}

#[async_trait]
impl NodeImpl for FileWriteNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    /// `write notes/today.md` (or `append to …`), the path relative to the workspace.
    fn describe(&self, inputs: &ValueMap) -> Option<String> {
        let path = match &self.path {
            Some(path) => path.clone(),
            None => inputs.get("path")?.to_text(),
        };
        let operation = if self.append { "append to" } else { "write" };
        Some(format!("{operation} {path}"))
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let relative = take_path(self.path.as_ref(), &mut inputs)?;
        let content = inputs.take_value("content")?;
        let bytes = self.encode(content)?;
        let written = confined::write(ctx.workspace(), &relative, bytes, self.append).await?;
        Ok(agentloom_core::outputs([("path", Value::text(written))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, inputs, instantiate, run_block_with};
    use agentloom_core::BlockCatalog as _;
    use serde_json::json;

    #[tokio::test]
    async fn a_file_over_max_bytes_is_refused_naming_the_file_and_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.txt"), "x".repeat(2000)).unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let err = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "big.txt", "max_bytes": 1000}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "cannot read `big.txt`: it is 2000 bytes, more than file.read's max_bytes of 1000; raise max_bytes if this is expected"
        );
        let out = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "big.txt", "max_bytes": 2000}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(out["content"].to_text().len(), 2000);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_directory_swapped_for_a_link_mid_read_or_write_never_leads_outside() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.txt"), "SECRET").unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::fs::write(ws.path().join("sub/f.txt"), "inside").unwrap();
        let flipper = crate::testing::Flipper::start(&ws.path().join("sub"), outside.path());
        let ctx = TestCtx::new().with_workspace(ws.path());
        let (mut reads, mut writes) = (0, 0);
        for i in 0..1500 {
            if let Ok(out) = run_block_with(
                &ctx,
                "file.read",
                json!({"path": "sub/f.txt"}),
                ValueMap::new(),
            )
            .await
            {
                assert_eq!(out["content"].to_text(), "inside", "read {i} escaped");
                reads += 1;
            }
            if run_block_with(
                &ctx,
                "file.write",
                json!({"path": "sub/w.txt"}),
                inputs([("content", Value::from("x"))]),
            )
            .await
            .is_ok()
            {
                writes += 1;
            }
            assert!(!outside.path().join("w.txt").exists(), "write {i} escaped");
        }
        drop(flipper);
        // The race was really run: some attempts got through while `sub` was the real one.
        assert!(reads > 0 && writes > 0, "reads {reads}, writes {writes}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_fifo_is_refused_at_once_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        let ctx = TestCtx::new().with_workspace(dir.path());
        let read = run_block_with(&ctx, "file.read", json!({"path": "pipe"}), ValueMap::new());
        let err = tokio::time::timeout(std::time::Duration::from_secs(5), read)
            .await
            .expect("reading a FIFO must not block")
            .unwrap_err();
        assert!(
            err.message.contains("`pipe`") && err.message.contains("not a regular file"),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn write_then_read_text_json_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let out = run_block_with(
            &ctx,
            "file.write",
            json!({"path": "notes/today.md"}),
            inputs([("content", Value::from("# Today\n"))]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("path", Value::from("notes/today.md"))]));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes/today.md")).unwrap(),
            "# Today\n"
        );

        let read = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "notes/today.md"}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(read, inputs([("content", Value::from("# Today\n"))]));

        let data = Value::from_json(json!({"a": [1, 2]}));
        run_block_with(
            &ctx,
            "file.write",
            json!({"path": "d.json", "mode": "json"}),
            inputs([("content", data.clone())]),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("d.json")).unwrap(),
            "{\n  \"a\": [\n    1,\n    2\n  ]\n}\n"
        );
        let read = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "d.json", "mode": "json"}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(read, inputs([("content", data)]));

        std::fs::write(dir.path().join("b.bin"), [0u8, 159, 146, 150]).unwrap();
        let read = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "b.bin", "mode": "bytes"}),
            ValueMap::new(),
        )
        .await
        .unwrap();
        assert_eq!(
            read,
            inputs([("content", Value::bytes(vec![0, 159, 146, 150]))])
        );
        let err = run_block_with(&ctx, "file.read", json!({"path": "b.bin"}), ValueMap::new())
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "`b.bin` is not UTF-8 text; read it in bytes mode instead"
        );
    }

    #[tokio::test]
    async fn append_adds_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        for i in 0..3 {
            run_block_with(
                &ctx,
                "file.write",
                json!({"path": "log.jsonl", "mode": "json", "append": true}),
                inputs([("content", Value::from_json(json!({"i": i})))]),
            )
            .await
            .unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log.jsonl")).unwrap(),
            "{\"i\":0}\n{\"i\":1}\n{\"i\":2}\n"
        );
        // Without append the file is replaced.
        run_block_with(
            &ctx,
            "file.write",
            json!({"path": "log.jsonl"}),
            inputs([("content", Value::Integer(7))]),
        )
        .await
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("log.jsonl")).unwrap(),
            "7"
        );
    }

    #[tokio::test]
    async fn path_comes_from_an_input_when_not_configured() {
        let node = instantiate("file.read", json!({})).unwrap();
        assert_eq!(node.ports().inputs, vec![path_port()]);
        assert!(
            instantiate("file.read", json!({"path": "x"}))
                .unwrap()
                .ports()
                .inputs
                .is_empty()
        );
        let write = instantiate("file.write", json!({"path": "  "})).unwrap();
        let names: Vec<&str> = write
            .ports()
            .inputs
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, vec!["content", "path"]);

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.txt"), "hello").unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let out = run_block_with(
            &ctx,
            "file.read",
            json!({}),
            inputs([("path", Value::from("in.txt"))]),
        )
        .await
        .unwrap();
        assert_eq!(out, inputs([("content", Value::from("hello"))]));
    }

    #[tokio::test]
    async fn refuses_paths_outside_the_workspace() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s3cr3t").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let absolute = outside.path().join("secret.txt").display().to_string();

        let err = run_block_with(
            &ctx,
            "file.read",
            json!({"path": absolute}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert!(
            err.message.contains("absolute paths are not allowed"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains(&dir.path().display().to_string()),
            "{}",
            err.message
        );

        let err = run_block_with(
            &ctx,
            "file.write",
            json!({"path": "../escape.txt"}),
            inputs([("content", Value::from("x"))]),
        )
        .await
        .unwrap_err();
        assert!(
            err.message.contains("`..` may not be used"),
            "{}",
            err.message
        );

        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(
                outside.path().join("secret.txt"),
                dir.path().join("link.txt"),
            )
            .unwrap();
            let err = run_block_with(
                &ctx,
                "file.read",
                json!({"path": "link.txt"}),
                ValueMap::new(),
            )
            .await
            .unwrap_err();
            assert!(
                err.message.contains("leads outside the workspace"),
                "{}",
                err.message
            );
            let err = run_block_with(
                &ctx,
                "file.write",
                json!({"path": "link.txt"}),
                inputs([("content", Value::from("x"))]),
            )
            .await
            .unwrap_err();
            assert!(
                err.message.contains("leads outside the workspace"),
                "{}",
                err.message
            );
            assert_eq!(
                std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
                "s3cr3t"
            );
        }
    }

    #[tokio::test]
    async fn missing_file_names_the_path_and_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let err = run_block_with(
            &ctx,
            "file.read",
            json!({"path": "nope.txt"}),
            ValueMap::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "cannot read `nope.txt`: no such file or directory (workspace: {})",
                dir.path().display()
            )
        );
    }

    #[test]
    fn only_write_has_side_effects() {
        let r = crate::Registry::builtin();
        assert!(r.block("file.write").unwrap().meta().side_effects);
        assert!(!r.block("file.read").unwrap().meta().side_effects);
    }
}
