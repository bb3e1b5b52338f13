//! The built-in tools: files confined to the workspace, Python in a sandbox (sandbox.rs),
//! HTTP GET and web search. Each returns the observation shown to the model, or an error
//! text that is shown instead.

use std::path::Path;
use std::time::Duration;

use agentloom_core::{BlockError, RunCtx, clip_chars};

use super::sandbox::{Sandbox, run_python};
use super::schema::Builtin;
use crate::net;
use crate::web_search::{SearchSettings, search};
use crate::workspace_path;

/// The longest file or body text returned to the model, in characters.
const MAX_TEXT_CHARS: usize = 20_000;
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LISTED: usize = 500;

/// What a built-in tool needs besides its arguments.
pub(crate) struct ToolEnv<'a> {
    pub ctx: &'a dyn RunCtx,
    pub search: Option<&'a SearchSettings>,
    /// Where run_code's program runs.
    pub sandbox: Sandbox<'a>,
}

/// A tool's result: the observation, and the workspace-relative path it wrote, if any.
pub(crate) struct Done {
    pub observation: String,
    pub wrote: Option<String>,
}

impl Done {
    fn said(observation: impl Into<String>) -> Self {
        Done {
            observation: observation.into(),
            wrote: None,
        }
    }
}

/// Runs built-in `tool` (never `finish`, which the loop handles) with checked `arguments`.
pub(crate) async fn run_builtin(
    tool: Builtin,
    arguments: &serde_json::Value,
    env: &ToolEnv<'_>,
) -> Result<Done, String> {
    let text = |name: &str| -> String {
        arguments
            .get(name)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let workspace = env.ctx.workspace();
    match tool {
        Builtin::ReadFile => {
            let path = workspace_path::for_read(workspace, &text("path")).map_err(|e| e.message)?;
            let content = tokio::fs::read(&path.full).await.map_err(|e| {
                format!(
                    "cannot read `{}`: {}",
                    path.relative,
                    workspace_path::io_reason(&e)
                )
            })?;
            let content = String::from_utf8_lossy(&content);
            Ok(Done::said(clip_chars(&content, MAX_TEXT_CHARS)))
        }
        Builtin::WriteFile => {
            let path =
                workspace_path::for_write(workspace, &text("path")).map_err(|e| e.message)?;
            let content = text("content");
            tokio::fs::write(&path.full, content.as_bytes())
                .await
                .map_err(|e| {
                    format!(
                        "cannot write `{}`: {}",
                        path.relative,
                        workspace_path::io_reason(&e)
                    )
                })?;
            Ok(Done {
                observation: format!("wrote {} bytes to {}", content.len(), path.relative),
                wrote: Some(path.relative),
            })
        }
        Builtin::ListFiles => list_files(workspace, &text("path")).await,
        Builtin::RunCode => run_code(&text("code"), workspace, env.sandbox)
            .await
            .map(Done::said),
        Builtin::HttpGet => http_get(env.ctx, &text("url")).await.map(Done::said),
        Builtin::WebSearch => {
            let Some(settings) = env.search else {
                return Err(
                    "web search is not set up for this agent (config `search_provider`)".to_owned(),
                );
            };
            let hits = search(env.ctx, settings, &text("query"))
                .await
                .map_err(|e| e.message)?;
            if hits.is_empty() {
                return Ok(Done::said("no results"));
            }
            let lines: Vec<String> = hits
                .iter()
                .enumerate()
                .map(|(i, h)| format!("{}. {} <{}>\n   {}", i + 1, h.title, h.url, h.snippet))
                .collect();
            Ok(Done::said(lines.join("\n")))
        }
        Builtin::Finish => Err("finish ends the task; it is not run as a tool".to_owned()),
    }
}

async fn list_files(workspace: &Path, relative: &str) -> Result<Done, String> {
    let relative = relative.trim().trim_matches('/');
    let dir = if relative.is_empty() || relative == "." {
        workspace.to_path_buf()
    } else {
        workspace_path::for_read(workspace, relative)
            .map_err(|e| e.message)?
            .full
    };
    let mut entries = tokio::fs::read_dir(&dir).await.map_err(|e| {
        format!(
            "cannot list `{relative}`: {}",
            workspace_path::io_reason(&e)
        )
    })?;
    let mut names = Vec::new();
    while let Some(entry) = entries.next_entry().await.map_err(|e| {
        format!(
            "cannot list `{relative}`: {}",
            workspace_path::io_reason(&e)
        )
    })? {
        let mut name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
            name.push('/');
        }
        names.push(name);
    }
    names.sort();
    let total = names.len();
    names.truncate(MAX_LISTED);
    let mut listing = names.join("\n");
    if total > MAX_LISTED {
        listing.push_str(&format!("\n… and {} more", total - MAX_LISTED));
    }
    if listing.is_empty() {
        listing = "(empty)".to_owned();
    }
    Ok(Done::said(listing))
}

async fn run_code(code: &str, workspace: &Path, sandbox: Sandbox<'_>) -> Result<String, String> {
    let output = run_python(code, workspace, sandbox).await?;
    let code = output
        .status
        .code()
        .map_or_else(|| "killed by a signal".to_owned(), |c| c.to_string());
    let stdout = clip_chars(&String::from_utf8_lossy(&output.stdout), MAX_TEXT_CHARS / 2);
    let stderr = clip_chars(&String::from_utf8_lossy(&output.stderr), MAX_TEXT_CHARS / 2);
    Ok(format!(
        "exit code: {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    ))
}

async fn http_get(ctx: &dyn RunCtx, url: &str) -> Result<String, String> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{url}`: only http and https URLs can be fetched"));
    }
    let request = net::client()
        .map_err(|e| e.message)?
        .get(parsed)
        .timeout(HTTP_TIMEOUT);
    let sent = net::send(ctx, request, |e| {
        BlockError::transient(format!("GET {url} failed: {e}"))
    })
    .await
    .map_err(|e| e.message)?;
    let status = sent.response.status();
    // The host's request slot is held until the body is read.
    let body = sent
        .response
        .text()
        .await
        .map_err(|e| format!("GET {url}: the body could not be read: {e}"))?;
    Ok(format!(
        "HTTP {}\n{}",
        status.as_u16(),
        clip_chars(&body, MAX_TEXT_CHARS)
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;
    use crate::testing::TestCtx;

    fn env<'a>(ctx: &'a TestCtx, sandbox: Option<Sandbox<'static>>) -> ToolEnv<'a> {
        ToolEnv {
            ctx,
            search: None,
            sandbox: sandbox.unwrap_or(Sandbox::Unsandboxed),
        }
    }

    #[tokio::test]
    async fn files_stay_in_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let wrote = run_builtin(
            Builtin::WriteFile,
            &serde_json::json!({"path": "out/notes.md", "content": "hello"}),
            &env(&ctx, None),
        )
        .await
        .unwrap();
        assert_eq!(wrote.wrote.as_deref(), Some("out/notes.md"));
        let read = run_builtin(
            Builtin::ReadFile,
            &serde_json::json!({"path": "out/notes.md"}),
            &env(&ctx, None),
        )
        .await
        .unwrap();
        assert_eq!(read.observation, "hello");
        let listed = run_builtin(Builtin::ListFiles, &serde_json::json!({}), &env(&ctx, None))
            .await
            .unwrap();
        assert_eq!(listed.observation, "out/");
        let escape = run_builtin(
            Builtin::ReadFile,
            &serde_json::json!({"path": "../etc/passwd"}),
            &env(&ctx, None),
        )
        .await
        .err()
        .unwrap();
        assert!(escape.contains(".."), "{escape}");
    }

    #[tokio::test]
    async fn run_code_has_no_secrets_and_no_network_in_its_sandbox() {
        let sandbox = Some(Sandbox::Isolated(super::super::sandbox::isolation().await));
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        // The test process has CARGO_* variables; the program must see none of them.
        let code = "import os, socket\nprint(sorted(os.environ))\nopen('made.txt', 'w').write('x')\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    print('online')\nexcept OSError:\n    print('offline')\n";
        let out = run_builtin(
            Builtin::RunCode,
            &serde_json::json!({"code": code}),
            &env(&ctx, sandbox),
        )
        .await
        .unwrap();
        assert!(
            out.observation.starts_with("exit code: 0"),
            "{}",
            out.observation
        );
        assert!(out.observation.contains("'PATH'"), "{}", out.observation);
        assert!(!out.observation.contains("CARGO"), "{}", out.observation);
        assert!(out.observation.contains("offline"), "{}", out.observation);
        assert!(dir.path().join("made.txt").is_file());
        let failing = run_builtin(
            Builtin::RunCode,
            &serde_json::json!({"code": "raise SystemExit(3)"}),
            &env(&ctx, sandbox),
        )
        .await
        .unwrap();
        assert!(
            failing.observation.starts_with("exit code: 3"),
            "{}",
            failing.observation
        );
    }
}
