//! The windows over the app: credentials, MCP servers, the examples gallery, the in-app
//! file prompt and "save changes?".

pub mod assistant_edit;
mod close_prompt;
pub mod credentials;
pub mod evaluations;
pub mod examples;
pub mod knowledge;
pub mod mcp_servers;
pub mod path_prompt;
