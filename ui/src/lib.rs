//! Agentloom's desktop app ([`app`]) and command line ([`cli`]), one binary.

pub mod app;
pub mod cli;
pub mod headless;
pub mod logging;
pub mod remote;
pub mod serve;
pub mod trust;
