//! The LLM blocks and the provider layer under them.
//!
//! | kind             | file            |
//! |------------------|-----------------|
//! | `llm.chat`       | `chat.rs`       |
//! | `llm.structured` | `structured.rs` |
//! | `llm.condition`  | `condition.rs`  |
//!
//! `provider.rs` makes one call (errors, internal retries on 429/5xx, streaming,
//! cancellation); `wire.rs` says what differs between providers, and `openai.rs`,
//! `anthropic.rs` and `ollama.rs` implement it;
//! `types.rs` the provider-neutral messages; `price.rs` the price table; `common.rs`
//! the config and usage accounting the blocks share.

mod anthropic;
mod chat;
pub(crate) mod common;
mod condition;
pub(crate) mod ollama;
mod openai;
pub(crate) mod price;
pub(crate) mod provider;
mod structured;
#[cfg(test)]
mod tests;
pub(crate) mod types;
mod wire;

/// The LLM blocks.
pub(crate) fn blocks() -> Vec<Box<dyn agentloom_core::Block>> {
    let mut blocks = chat::blocks();
    blocks.extend(structured::blocks());
    blocks.extend(condition::blocks());
    blocks
}
