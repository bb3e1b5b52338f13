//! How a block fails: [`BlockError`] and its [`ErrorClass`], which decides retries.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::value::Value;

/// How a failure should be treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Retrying will not help (bad input, 4xx, refused).
    Permanent,
    /// May succeed on retry (network error, 5xx, 429, timeout).
    Transient,
    /// The run was stopped.
    Cancelled,
}

/// An error and its causes, on one line (for messages people read).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// A block's failure: a message a person can act on, and optional data for the `error` output.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct BlockError {
    pub class: ErrorClass,
    pub message: String,
    /// Wait at least this long before retrying (e.g. from `Retry-After`).
    pub retry_after: Option<Duration>,
    /// Extra data for the `error` output (e.g. an HTTP status and body).
    pub data: Option<Value>,
}

impl BlockError {
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Permanent,
            message: message.into(),
            retry_after: None,
            data: None,
        }
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Transient,
            ..Self::permanent(message)
        }
    }

    pub fn cancelled() -> Self {
        Self {
            class: ErrorClass::Cancelled,
            ..Self::permanent("cancelled")
        }
    }

    /// A required input is missing or has the wrong shape.
    pub fn input(port: &str, problem: impl fmt::Display) -> Self {
        Self::permanent(format!("input `{port}`: {problem}"))
    }

    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    #[must_use]
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    pub fn is_retryable(&self) -> bool {
        self.class == ErrorClass::Transient
    }
}
