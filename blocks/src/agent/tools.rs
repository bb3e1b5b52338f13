//! The built-in tools: files confined to the workspace, Python in a sandbox (sandbox.rs),
//! HTTP GET and web search. Each returns the observation shown to the model, or an error
//! text that is shown instead.

use std::path::Path;
use std::time::Duration;

use agentloom_core::{BlockError, RunCtx, clip_chars};

use super::bounded_output::{Captured, OutputLimits};
use super::sandbox::{Sandbox, run_python};
use super::schema::Builtin;
use crate::confined::{self, EntryKind, OverCap};
use crate::net;
use crate::web_search::{SearchSettings, search};

/// The longest file or body text returned to the model, in characters.
const MAX_TEXT_CHARS: usize = 20_000;
/// The most of a file read_file reads (more than [`MAX_TEXT_CHARS`] in any encoding).
const MAX_READ_BYTES: u64 = 256 * 1024;
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_LISTED: usize = 500;
/// The most of run_code's stdout, and of its stderr, shown to the model, in characters: both
/// with their notes fit in the loop's 8,000 characters of an observation.
const RUN_CODE_STREAM_CHARS: usize = 3_500;

/// What a built-in tool needs besides its arguments.
pub(crate) struct ToolEnv<'a> {
    pub ctx: &'a dyn RunCtx,
    pub search: Option<&'a SearchSettings>,
    pub http_get: HttpGetSettings,
    /// Where run_code's program runs.
    pub sandbox: Sandbox<'a>,
    /// How much of run_code's output is kept.
    pub run_code_output: OutputLimits,
    /// The knowledge collections search_knowledge searches.
    pub knowledge: &'a [super::knowledge::KnowledgeSource],
}

/// http_get reads at most this much of a body unless the agent's `http_max_bytes` says.
pub(crate) const DEFAULT_HTTP_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// Where http_get may connect and how much of a body it reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpGetSettings {
    pub reach: net::Reach,
    pub max_bytes: u64,
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
        Builtin::ReadFile => read_file(workspace, &text("path")).await,
        Builtin::WriteFile => {
            let content = text("content");
            let size = content.len();
            let written = confined::write(workspace, &text("path"), content.into_bytes(), false)
                .await
                .map_err(|e| e.message)?;
            Ok(Done {
                observation: format!("wrote {size} bytes to {written}"),
                wrote: Some(written),
            })
        }
        Builtin::ListFiles => list_files(workspace, &text("path")).await,
        Builtin::RunCode => run_code(&text("code"), workspace, env.sandbox, env.run_code_output)
            .await
            .map(Done::said),
        Builtin::HttpGet => http_get(env.ctx, env.http_get, &text("url"))
            .await
            .map(Done::said),
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
        Builtin::SaveNotes => super::notes::save_notes(env.ctx, &text("notes"))
            .await
            .map(Done::said),
        Builtin::SearchKnowledge => {
            let k = arguments.get("k").and_then(serde_json::Value::as_u64);
            super::knowledge::search_knowledge(env.ctx, env.knowledge, &text("query"), k)
                .await
                .map(Done::said)
        }
        Builtin::Finish => Err("finish ends the task; it is not run as a tool".to_owned()),
    }
}

/// Reads a file of the workspace, its first [`MAX_READ_BYTES`] when it is larger (the
/// observation says so).
async fn read_file(workspace: &Path, relative: &str) -> Result<Done, String> {
    let read = confined::read(workspace, relative, MAX_READ_BYTES, OverCap::Cut)
        .await
        .map_err(|e| e.describe(workspace, &format!("{MAX_READ_BYTES} bytes")))?;
    let mut observation = clip_chars(&String::from_utf8_lossy(&read.bytes), MAX_TEXT_CHARS);
    if read.was_cut() {
        observation.push_str(&format!(
            "\n[cut: `{}` is {} bytes; only the start was read]",
            read.relative, read.size
        ));
    }
    Ok(Done::said(observation))
}

async fn list_files(workspace: &Path, relative: &str) -> Result<Done, String> {
    let entries = confined::list(workspace, relative)
        .await
        .map_err(|e| e.message)?;
    let total = entries.len();
    let mut names: Vec<String> = entries
        .into_iter()
        .take(MAX_LISTED)
        .map(|entry| match entry.kind {
            EntryKind::Dir => format!("{}/", entry.name),
            EntryKind::File | EntryKind::Other => entry.name,
        })
        .collect();
    if total > MAX_LISTED {
        names.push(format!("… and {} more", total - MAX_LISTED));
    }
    let listing = if names.is_empty() {
        "(empty)".to_owned()
    } else {
        names.join("\n")
    };
    Ok(Done::said(listing))
}

async fn run_code(
    code: &str,
    workspace: &Path,
    sandbox: Sandbox<'_>,
    output_limits: OutputLimits,
) -> Result<String, String> {
    let output = run_python(code, workspace, sandbox, output_limits).await?;
    let code = output
        .status
        .code()
        .map_or_else(|| "killed by a signal".to_owned(), |c| c.to_string());
    let shown = |stream: &Captured| {
        let mut text = clip_chars(
            &String::from_utf8_lossy(&stream.kept),
            RUN_CODE_STREAM_CHARS,
        );
        if let Some(note) = stream.cut_note() {
            text.push_str(&format!("\n[{note}]"));
        }
        text
    };
    // What the sandbox did comes first: the loop clips long observations at their end.
    let mut observation = format!("exit code: {code}\n");
    if let Some(why) = &output.stopped {
        observation.push_str(&format!("stopped by the sandbox: {why}\n"));
    }
    observation.push_str(&format!(
        "limits: {}\nstdout:\n{}\nstderr:\n{}",
        output.limits,
        shown(&output.stdout),
        shown(&output.stderr)
    ));
    Ok(observation)
}

async fn http_get(
    ctx: &dyn RunCtx,
    settings: HttpGetSettings,
    url: &str,
) -> Result<String, String> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{url}`: only http and https URLs can be fetched"));
    }
    let request = net::client_for(ctx, settings.reach)
        .map_err(|e| e.message)?
        .get(parsed)
        .timeout(HTTP_TIMEOUT);
    let mut sent =
        net::send_within(
            ctx,
            settings.reach,
            request,
            |e| match net::local_address_refused(&e) {
                Some(refused) => BlockError::permanent(format!("GET {url} was refused: {refused}")),
                None => BlockError::transient(format!("GET {url} failed: {e}")),
            },
        )
        .await
        .map_err(|e| e.message)?;
    let status = sent.response.status();
    // The host's request slot is held until the body is read; no more than the cap is kept.
    let mut body = Vec::new();
    let mut cut = false;
    while let Some(chunk) = sent
        .response
        .chunk()
        .await
        .map_err(|e| format!("GET {url}: the body could not be read: {e}"))?
    {
        let room = usize::try_from(settings.max_bytes)
            .unwrap_or(usize::MAX)
            .saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    let mut observation = format!(
        "HTTP {}\n{}",
        status.as_u16(),
        clip_chars(&String::from_utf8_lossy(&body), MAX_TEXT_CHARS)
    );
    if cut {
        observation.push_str(&format!(
            "\n[cut: the body is larger than {} bytes (http_max_bytes); only the start was read]",
            settings.max_bytes
        ));
    }
    Ok(observation)
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
            http_get: HttpGetSettings {
                reach: net::Reach::Public,
                max_bytes: DEFAULT_HTTP_MAX_BYTES,
            },
            sandbox: sandbox.unwrap_or(Sandbox::Unsandboxed),
            run_code_output: OutputLimits::default(),
            knowledge: &[],
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

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn file_tools_never_leave_the_workspace_while_a_folder_flips_to_a_link() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.txt"), "SECRET").unwrap();
        std::fs::write(outside.path().join("only-outside.txt"), "x").unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::fs::write(ws.path().join("sub/f.txt"), "inside").unwrap();
        let ctx = TestCtx::new().with_workspace(ws.path());
        let flipper = crate::testing::Flipper::start(&ws.path().join("sub"), outside.path());
        let (mut reads, mut writes, mut lists) = (0, 0, 0);
        for i in 0..2500 {
            let env = env(&ctx, None);
            if let Ok(read) = run_builtin(
                Builtin::ReadFile,
                &serde_json::json!({"path": "sub/f.txt"}),
                &env,
            )
            .await
            {
                assert_eq!(read.observation, "inside", "read {i} escaped");
                reads += 1;
            }
            let write = serde_json::json!({"path": "sub/deep/w.txt", "content": "x"});
            if run_builtin(Builtin::WriteFile, &write, &env).await.is_ok() {
                writes += 1;
            }
            assert!(
                !outside.path().join("deep").exists(),
                "write {i} made a folder outside"
            );
            if let Ok(listed) = run_builtin(
                Builtin::ListFiles,
                &serde_json::json!({"path": "sub"}),
                &env,
            )
            .await
            {
                assert!(
                    !listed.observation.contains("only-outside"),
                    "list {i} escaped: {}",
                    listed.observation
                );
                lists += 1;
            }
        }
        drop(flipper);
        // The race was really run: some calls got through while `sub` was the real one.
        assert!(
            reads > 0 && writes > 0 && lists > 0,
            "reads {reads}, writes {writes}, lists {lists}"
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn read_file_refuses_pipes_and_devices_and_cuts_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        let mut specials = vec!["pipe"];
        // A character device that never ends (as /dev/zero); making one needs privileges.
        if std::process::Command::new("mknod")
            .arg(dir.path().join("zero"))
            .args(["c", "1", "5"])
            .status()
            .is_ok_and(|s| s.success())
        {
            specials.push("zero");
        }
        let tools = env(&ctx, None);
        for name in specials {
            let arguments = serde_json::json!({"path": name});
            let read = run_builtin(Builtin::ReadFile, &arguments, &tools);
            let err = tokio::time::timeout(std::time::Duration::from_secs(5), read)
                .await
                .unwrap_or_else(|_| panic!("reading `{name}` must not block"))
                .err()
                .unwrap();
            assert!(err.contains("not a regular file"), "{name}: {err}");
        }
        let big = vec![b'a'; 3 * 1024 * 1024];
        std::fs::write(dir.path().join("big.txt"), &big).unwrap();
        let read = run_builtin(
            Builtin::ReadFile,
            &serde_json::json!({"path": "big.txt"}),
            &env(&ctx, None),
        )
        .await
        .unwrap();
        assert!(
            read.observation
                .ends_with("[cut: `big.txt` is 3145728 bytes; only the start was read]"),
            "{}",
            &read.observation[read.observation.len() - 100..]
        );
    }

    #[tokio::test]
    async fn http_get_refuses_local_addresses_and_cuts_big_bodies() {
        use axum::routing::get;
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new()
            .route(
                "/admin",
                get(move || {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { "admin page" }
                }),
            )
            .route("/big", get(|| async { "b".repeat(3 * 1024 * 1024) }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let ctx = TestCtx::new();
        let public = env(&ctx, None);
        for host in ["127.1", "[::ffff:127.0.0.1]", "localhost"] {
            let err = run_builtin(
                Builtin::HttpGet,
                &serde_json::json!({"url": format!("http://{host}:{port}/admin")}),
                &public,
            )
            .await
            .err()
            .unwrap();
            assert!(
                err.contains("is a loopback address") && err.contains("allow_private_network"),
                "{host}: {err}"
            );
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        let mut allowed = env(&ctx, None);
        allowed.http_get = HttpGetSettings {
            reach: net::Reach::Any,
            max_bytes: 1024 * 1024,
        };
        let admin = run_builtin(
            Builtin::HttpGet,
            &serde_json::json!({"url": format!("http://localhost:{port}/admin")}),
            &allowed,
        )
        .await
        .unwrap();
        assert_eq!(admin.observation, "HTTP 200\nadmin page");
        let big = run_builtin(
            Builtin::HttpGet,
            &serde_json::json!({"url": format!("http://127.0.0.1:{port}/big")}),
            &allowed,
        )
        .await
        .unwrap();
        assert!(
            big.observation.ends_with(
                "[cut: the body is larger than 1048576 bytes (http_max_bytes); only the start was read]"
            ),
            "{}",
            &big.observation[big.observation.len() - 120..]
        );
    }

    #[tokio::test]
    async fn http_get_reaches_no_local_address_in_a_run_that_may_not() {
        use axum::routing::get;
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().route(
            "/admin",
            get(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "admin page" }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let untrusted = TestCtx::new().with_private_network(false);
        let mut allowed = env(&untrusted, None);
        allowed.http_get.reach = net::Reach::Any;
        for host in ["127.0.0.1", "127.1", "[::ffff:127.0.0.1]", "localhost"] {
            let err = run_builtin(
                Builtin::HttpGet,
                &serde_json::json!({"url": format!("http://{host}:{port}/admin")}),
                &allowed,
            )
            .await
            .err()
            .unwrap();
            assert!(
                err.contains("is a loopback address, which this run may not reach: its graph file is not trusted"),
                "{host}: {err}"
            );
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        let trusted = TestCtx::new();
        let mut allowed = env(&trusted, None);
        allowed.http_get.reach = net::Reach::Any;
        let admin = run_builtin(
            Builtin::HttpGet,
            &serde_json::json!({"url": format!("http://127.0.0.1:{port}/admin")}),
            &allowed,
        )
        .await
        .unwrap();
        assert_eq!(admin.observation, "HTTP 200\nadmin page");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
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
