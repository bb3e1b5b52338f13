//! The `ai.agent` block: a model works towards a goal by calling tools until it finishes.
//!
//! | file        | what                                                        |
//! |-------------|-------------------------------------------------------------|
//! | `block.rs`  | config, ports, the node                                     |
//! | `bounded_output.rs` | run_code's output read within bounds (every OS)     |
//! | `loop.rs`   | the decide → check → act loop, limits, checkpoints          |
//! | `tools.rs`  | the built-in tools (files, Python, HTTP GET, web search)    |
//! | `sandbox.rs`| where run_code's program runs on Linux: bubblewrap or Landlock |
//! | `sandbox_macos.rs` | … on macOS: Seatbelt (`sandbox-exec`)                |
//! | `sandbox_windows.rs` | … on Windows: an AppContainer in a Job Object      |
//! | `schema.rs` | tool definitions and the check of each decision             |
//! | `step.rs`   | one step of the transcript, as streamed and shown            |
//! | `notes.rs`  | the agent's notes between runs (`keep_notes`, save_notes)   |
//! | `knowledge.rs` | search_knowledge over the wired collections, quoted with sources |

mod block;
mod bounded_output;
mod knowledge;
mod notes;
#[path = "loop.rs"]
mod run_loop;
#[cfg(target_os = "linux")]
mod sandbox;
#[cfg(target_os = "macos")]
#[path = "sandbox_macos.rs"]
mod sandbox;
#[cfg(windows)]
#[path = "sandbox_windows.rs"]
mod sandbox;
mod schema;
mod step;
mod tools;

pub(crate) use block::blocks;
pub use block::{UNSANDBOXED_FIELD, unsandboxed_code_nodes};
pub use sandbox::BWRAP_ENV;
pub use step::Step;
