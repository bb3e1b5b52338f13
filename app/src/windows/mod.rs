//! The windows over the app: credentials, MCP servers, the examples gallery, the in-app
//! file prompt and "save changes?" ([`prompts`]), knowledge and assistant editing.

pub mod assistant_edit;
pub(crate) mod close_prompt;
pub mod credentials;
pub mod evaluations;
pub mod examples;
pub mod knowledge;
pub mod mcp_servers;
pub mod path_prompt;
pub(crate) mod prompts;

/// Windows the app keeps open or shut across frames, each with its own state.
#[derive(Default)]
pub(crate) struct Windows {
    /// The graph's MCP servers (View → MCP servers).
    pub(crate) mcp: mcp_servers::McpServersWindow,
    /// The editing tools served to an MCP client for the open graph, and their window.
    pub(crate) assistant_edit: assistant_edit::AssistantEdit,
}
