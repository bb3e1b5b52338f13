//! Knowledge: the user's documents loaded, split, embedded and searched from a local
//! SQLite file. The blocks `docs.load`, `text.split`, `embed`, `knowledge.add`,
//! `knowledge.search` and `knowledge.forget`, one file each; [`store`] is the collection
//! store they share with the app's Knowledge window and the agent's tool, [`embedding`]
//! the client of embedding services.

mod add;
mod common;
mod embed;
pub mod embedding;
mod forget;
mod formats;
mod load;
mod search;
pub mod split;
pub mod store;
pub mod values;

use agentloom_core::Block;

/// The blocks of this family.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    let mut blocks = load::blocks();
    blocks.extend(split::blocks());
    blocks.extend(embed::blocks());
    blocks.extend(add::blocks());
    blocks.extend(search::blocks());
    blocks.extend(forget::blocks());
    blocks
}
