//! Agentloom's command line, `serve` and `mcp`: the binary's front ends, above the desktop
//! app ([`app`]) and the runner every front end starts runs through ([`runner`]).

pub use agentloom_app as app;
pub use agentloom_runner as runner;
pub use agentloom_runner::{remote, trust};

pub mod cli;
pub mod logging;
pub mod serve;
