//! agentloom-core: the data model every other crate builds on.
//!
//! - [`Value`] and [`ValueType`], with the one compatibility function [`compatibility`]
//!   and its runtime twin [`coerce`];
//! - [`GraphDoc`], the versioned, deterministic graph file format;
//! - [`validate`], which turns a document into a runnable [`ValidGraph`] or a list of
//!   [`Problem`]s naming node, port and JSON path;
//! - the [`Block`] / [`NodeImpl`] traits and the [`RunCtx`] a running node talks to.
//!
//! No UI and no storage here.

mod approval;
mod block;
mod bypass;
mod config;
mod config_map;
mod duplicate_keys;
mod error;
mod escape;
mod graph;
mod graph_file;
mod hosts;
mod json_schema;
mod memory;
mod replay;
mod tool;
mod types;
mod user_dirs;
mod validate;
mod value;
mod wire;

pub use approval::{ApprovalDecision, ApprovalRequest};
pub use block::{
    Block, BlockCatalog, BlockMeta, CalledGraphs, ConfigCtx, CpuJob, ERROR_PORT, GraphInterface,
    InputsExt, NodeImpl, PortSpec, Ports, REDACTED, RequestSlot, RunCtx, RunInput, Secret,
    SecretError, SecretSource, TOOL_PORT, Usage, approval_action, env_secret, outputs,
    resolved_details, run_cpu_bound,
};
pub use bypass::bypass_outputs;
pub use config::{Config, ConfigError, ConfigField, ConfigReader, FieldKind, fields_json_schema};
pub use error::{BlockError, ErrorClass, error_chain};
pub use escape::{Escaped, escape_control};
pub use graph::{
    EdgeDoc, FORMAT_NAME, FORMAT_VERSION, GraphDoc, GroupDoc, LoadError, McpServerDoc, NodeDoc,
    RetryPolicy, RunSettings,
};
pub use graph_file::{
    DEFAULT_MAX_GRAPH_BYTES, GraphFileError, MAX_GRAPH_BYTES_ENV, leave_out_declared_defaults,
    max_graph_bytes, read_graph_file, read_graph_text, with_declared_defaults,
    without_declared_defaults,
};
pub use hosts::{BoundHosts, host_of, preset_hosts, refused_message, secret_env_var};
pub use json_schema::{value_type_from_schema, value_type_schema};
pub use memory::{
    GraphMemory, MAX_MEMORY_KEY_BYTES, MAX_MEMORY_KEYS, MAX_MEMORY_VALUE_BYTES, MemoryError,
    check_memory_key, memory_value_text,
};
pub use replay::{
    CallRecording, CatalogCall, OutboundCall, RecordedResponse, Replayed, not_recorded,
};
pub use tool::{tool_descriptor, tool_name, type_schema};
pub use types::{
    CoerceError, Compat, SECRET_INPUT_TYPE, TypeMismatch, UnknownType, ValueType, coerce,
    coerce_given, compatibility, message,
};
pub use user_dirs::{UserDirs, user_data_dir};
pub use validate::{
    InputSlot, OutputFanout, Problem, ProblemKind, ValidGraph, ValidNode, instantiate_node,
    validate, validate_shared,
};
pub use value::{Value, ValueMap, clip_chars, one_line};
pub use wire::{ConnectError, check_wire_ports};

pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
