//! agentloom-engine: runs validated graphs and records them.
//!
//! - [`Executor`] runs a [`agentloom_core::ValidGraph`]: nodes start when their inputs are
//!   ready, independent nodes run concurrently (bounded), with per-node timeouts, retries,
//!   cancellation, skipped branches, caught errors and run limits;
//! - every run emits a typed stream of [`RunEvent`]s to an [`EventSink`];
//! - the run store records runs in SQLite.

pub mod credentials;
mod events;
mod executor;
mod limits;
mod redact;
mod store;

pub use credentials::{
    CredentialError, CredentialInfo, CredentialKind, CredentialStore, KeychainSecrets,
    OAuthClientConfig, OAuthTokens, StoredSecret,
};
pub use events::{
    ChannelSink, CollectSink, EventKind, EventSink, FanoutSink, NodeStatus, NullSink, RunEvent,
    RunStatus,
};
pub use executor::{Approver, EnvSecrets, Executor, NodeReport, RunOptions, RunReport, new_run_id};
pub use redact::REDACTED;
pub use store::{NodeRow, RUN_LOG_FILE, RunDetail, RunRecorder, RunRow, RunStore, StoreError};
