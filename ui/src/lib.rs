//! Agentloom's desktop app ([`app`]) and command line ([`cli`]), one binary.

pub mod app;
pub mod cli;
