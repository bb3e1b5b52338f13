//! Agentloom's desktop app ([`app`]) and command line ([`cli`]), one binary.

pub mod app;
pub mod cli;
pub mod logging;
pub mod runner;
pub mod serve;
pub mod trust;
