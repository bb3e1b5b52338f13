//! agentloom-engine: runs validated graphs and records them.
//!
//! - [`Executor`] runs a [`agentloom_core::ValidGraph`]: nodes start when their inputs are
//!   ready, independent nodes run concurrently (bounded), with per-node timeouts, retries,
//!   cancellation, skipped branches, caught errors and run limits;
//! - every run emits a typed stream of [`RunEvent`]s to an [`EventSink`];
//! - the run store records runs in SQLite;
//! - [`RunState`] is what the events say of a run: the one reducer the run store's writer
//!   and the app's live view share.

mod approver;
mod breakpoints;
pub mod credentials;
mod durable;
mod durable_breakpoints;
pub mod eval;
mod events;
mod executor;
mod fork;
mod limits;
pub mod private_files;
mod redact;
mod replay;
mod run_state;
mod secret_forms;
mod seed;
mod store;

pub use approver::Approver;
pub use breakpoints::{
    BreakAt, Breakpoint, BreakpointDecision, BreakpointHandler, BreakpointHit, HitPort, RunDebug,
    checked_value,
};
pub use credentials::{
    CredentialError, CredentialInfo, CredentialKind, CredentialStore, KeychainSecrets,
    OAuthClientConfig, OAuthTokens, StoredSecret,
};
pub use durable::{DurableApprover, SideEffectGate};
pub use durable_breakpoints::DurableBreakpoints;
pub use events::{
    CollectSink, EventKind, EventSink, FanoutSink, NodeStatus, NullSink, OmittedBody, RecordedCall,
    RunEvent, RunStatus,
};
pub use executor::{
    DEFAULT_REQUESTS_PER_HOST, EnvSecrets, Executor, NodeReport, RunOptions, RunReport,
    default_concurrency, new_run_id,
};
pub use fork::{ForkEdit, ForkRecord, GraphChanges};
pub use redact::{REDACTED, holds_marker, redact_resolved_secrets, value_holds_marker};
pub use replay::{Replay, ReplayMiss, request_hash};
pub use run_state::{KeptValues, MAX_PARTIAL_BYTES, NodeProgress, RunState};
pub use seed::{EarlierSegments, RunSeed, downstream_of};
pub use store::{
    Claim, DEFAULT_MAX_VALUE_BYTES, EarlierDecision, EvaluationDetail, EvaluationRow,
    EvaluationRun, LogPolicy, LoggedGraph, NodeRow, PendingApproval, PendingBreakpoint,
    RUN_LOG_FILE, RunDetail, RunRecorder, RunRow, RunStore, StoreError,
};
