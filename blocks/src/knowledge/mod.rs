//! Knowledge: the user's documents loaded, split, embedded and searched from a local
//! SQLite file. The blocks `docs.load`, `text.split`, `embed`, `knowledge.add`,
//! `knowledge.search` and `knowledge.forget`, one file each; [`store`] is the collection
//! store they share with the app's Knowledge window and the agent's tool.

pub mod store;

use agentloom_core::Block;

/// The blocks of this family.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    Vec::new()
}
