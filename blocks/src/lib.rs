//! agentloom-blocks: the block library and the [`Registry`] that lists it.
//!
//! Each block family lives in its own module and adds its blocks to the registry with a
//! `register` function; [`Registry::builtin`] calls them all. Blocks only talk to the run
//! through [`agentloom_core::RunCtx`], so they run the same in the app, the CLI and tests.
//!
//! | kind                  | module            |
//! |-----------------------|-------------------|
//! | `graph.input`, `graph.output` | `graph_io` |
//! | `data.constant`       | `constant`        |
//! | `text.template`       | `template`        |
//! | `json.parse`          | `json_parse`      |
//! | `json.query`          | `json_query`      |
//! | `control.branch`      | `branch`          |
//! | `control.merge`       | `merge`           |
//! | `control.for_each`    | `for_each`        |
//! | `control.delay`       | `delay`           |
//! | `control.passthrough` | `passthrough`     |
//! | `file.read`, `file.write` | `file`        |
//! | `http.request`        | `http`            |

mod branch;
mod constant;
mod delay;
mod file;
mod for_each;
mod graph_io;
mod http;
mod json_parse;
mod json_query;
mod merge;
mod passthrough;
mod registry;
mod template;
mod workspace_path;

#[doc(hidden)]
pub mod testing;

pub use registry::Registry;
