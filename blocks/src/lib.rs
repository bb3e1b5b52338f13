//! agentloom-blocks: the block library and the [`Registry`] that lists it.
//!
//! Each block family lives in its own module and exports its blocks with a `blocks`
//! function; [`Registry::builtin`] lists those modules. Blocks only talk to the run
//! through [`agentloom_core::RunCtx`], so they run the same in the app, the CLI and tests.
//!
//! | kind                  | module            |
//! |-----------------------|-------------------|
//! | `graph.input`, `graph.output` | `graph_io` |
//! | `graph.call`          | `graph_call`      |
//! | `data.constant`       | `constant`        |
//! | `text.template`       | `template`        |
//! | `json.parse`          | `json_parse`      |
//! | `json.query`          | `json_query`      |
//! | `control.branch`      | `branch`          |
//! | `control.merge`       | `merge`           |
//! | `control.for_each`    | `for_each`        |
//! | `control.delay`       | `delay`           |
//! | `control.passthrough` | `passthrough`     |
//! | `human.approval`      | `human_approval`  |
//! | `file.read`, `file.write` | `file`        |
//! | `http.request`        | `http`            |
//! | `github.*` (issues, comments, files, pull requests) | `github` |
//! | `gmail.*` (search, read, send, draft) | `gmail` |
//! | `llm.chat`, `llm.structured`, `llm.condition` | `llm` |
//! | `ai.agent`            | `agent`           |
//! | `web.search`          | `web_search`      |
//! | `mcp.<server>.<tool>` (a graph's MCP servers) | `mcp` |

pub mod agent;
mod branch;
pub mod confined;
mod constant;
mod delay;
mod file;
mod for_each;
mod github;
mod gmail;
pub mod graph_call;
mod graph_io;
mod http;
mod human_approval;
mod jinja;
mod json_parse;
mod json_query;
pub mod knowledge;
mod llm;
pub mod mcp;
mod memory;
mod merge;
mod net;
mod passthrough;
mod registry;
mod rest;
mod template;
mod web_search;
#[cfg(windows)]
mod windows_job;
mod workspace_open;
mod workspace_path;

#[doc(hidden)]
pub mod testing;

pub use agent::{BWRAP_ENV, UNSANDBOXED_FIELD, unsandboxed_code_nodes};
pub use llm::ollama::{
    DEFAULT_URL as OLLAMA_DEFAULT_URL, ListModelsError, list_models as list_local_ollama_models,
};
pub use llm::price::{PRICES_ENV_VAR, Price, PriceError, PriceTable, price_file_path};
pub use registry::Registry;
