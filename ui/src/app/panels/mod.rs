//! The panels around the canvas: the block palette, the inspector (with pinned outputs and
//! a node's sub-runs), the run history, problems, approvals and the trust banner.

pub mod approval_panel;
pub mod history;
pub mod inspector;
pub mod json_tree;
pub mod palette;
pub mod pinned;
pub mod problems;
pub mod subgraph;
pub mod trust_banner;
