//! Test peers shared by the end-to-end tests.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

pub mod fakellm;
