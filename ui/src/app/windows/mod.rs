//! The windows over the app: credentials, MCP servers, the examples gallery and the in-app
//! file prompt.

pub mod credentials;
pub mod examples;
pub mod mcp_servers;
pub mod path_prompt;
