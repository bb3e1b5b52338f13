//! Asking a person before a side effect runs (safe mode).

use serde::{Deserialize, Serialize};

use crate::value::Value;

/// A side effect waiting for a person's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// What will happen: a tool name (`write_file`) or the block's title.
    pub action: String,
    /// What it will run with (a block's inputs as an object, a tool's arguments); the
    /// person may edit them before approving.
    pub arguments: Value,
    /// What the node needs to carry on after the run was paused and resumed (an agent's
    /// transcript so far). `None` for a node that simply runs again from its inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// What the node will do, for the person deciding: its configuration (defaults
    /// filled in) with its inputs over it, so a configured URL, method, path or recipient
    /// shows even when no input carries it. Not editable: `arguments` are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ApprovalRequest {
    pub fn new(action: impl Into<String>, arguments: Value) -> Self {
        Self {
            action: action.into(),
            arguments,
            checkpoint: None,
            details: None,
        }
    }

    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// What is shown for the request: `details` when known, else the arguments.
    pub fn shown(&self) -> &Value {
        self.details.as_ref().unwrap_or(&self.arguments)
    }

    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: Value) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// The decision that lets the action run unchanged.
    pub fn approve_as_is(&self) -> ApprovalDecision {
        ApprovalDecision::Approved {
            arguments: self.arguments.clone(),
        }
    }
}

/// A person's answer to an [`ApprovalRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Go ahead, with these arguments: the request's own, or the person's edit.
    Approved { arguments: Value },
    /// Do not; `message` says why (an agent hands it to its model).
    Rejected { message: String },
}

impl ApprovalDecision {
    pub fn is_approved(&self) -> bool {
        matches!(self, ApprovalDecision::Approved { .. })
    }
}
