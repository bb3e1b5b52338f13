//! The panels around the canvas: the block palette, the inspector (with pinned outputs and
//! a node's sub-runs), the run history, problems, approvals and the trust banner.

pub mod agent_trace;
pub mod approval_panel;
pub mod debug_command;
pub mod debugger;
pub mod debugger_breakpoints;
pub mod debugger_fork;
pub mod debugger_pause;
pub mod graph_info;
pub mod history;
pub mod inspector;
pub mod json_tree;
pub mod palette;
pub mod pinned;
pub mod problems;
pub mod run_list;
pub mod run_timeline;
pub mod subgraph;
pub mod trust_banner;
