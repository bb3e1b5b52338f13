//! The agent's notes between runs (`keep_notes`): read from the graph's memory as a run
//! starts and shown with the goal; the built-in tool `save_notes` replaces them. They are
//! kept under the key `agent notes:<node id>` of the graph's memory (the run log).

use std::sync::Arc;

use agentloom_core::{BlockError, GraphMemory, MemoryError, RunCtx, clip_chars};

/// The most of the notes kept, in characters (well inside a memory value's 64 KiB).
pub(crate) const MAX_NOTES_CHARS: usize = 8_000;

/// The memory key of the notes of agent node `node_id`.
fn notes_key(node_id: &str) -> String {
    // Keys are capped at 200 bytes; a node id longer than that is cut on a char boundary.
    let mut key = format!("agent notes:{node_id}");
    while key.len() > agentloom_core::MAX_MEMORY_KEY_BYTES {
        key.pop();
    }
    key
}

fn memory(ctx: &dyn RunCtx) -> Result<Arc<dyn GraphMemory>, String> {
    ctx.memory().ok_or_else(|| {
        "this run has no memory to keep notes in: notes are kept in the run log, and this run is not recorded in one".to_owned()
    })
}

async fn on_disk<T: Send + 'static>(
    memory: Arc<dyn GraphMemory>,
    call: impl FnOnce(&dyn GraphMemory) -> Result<T, MemoryError> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(move || call(memory.as_ref()))
        .await
        .map_err(|e| format!("the notes could not be reached: {e}"))?
        .map_err(|e| e.to_string())
}

/// The notes this agent node saved in earlier runs, if any.
pub(crate) async fn read_notes(ctx: &dyn RunCtx) -> Result<Option<String>, BlockError> {
    let memory = memory(ctx).map_err(BlockError::permanent)?;
    let key = notes_key(ctx.node_id());
    let kept = on_disk(memory, move |memory| memory.get(&key))
        .await
        .map_err(BlockError::transient)?;
    Ok(kept
        .and_then(|notes| notes.as_str().map(str::to_owned))
        .filter(|notes| !notes.trim().is_empty()))
}

/// The context shown with the goal, with the notes added after it.
pub(crate) fn with_notes(context: Option<String>, notes: Option<&str>) -> Option<String> {
    let notes_part = format!(
        "Your notes from earlier runs (save_notes replaces them):\n{}",
        notes.unwrap_or("(none yet)")
    );
    Some(match context {
        Some(context) => format!("{context}\n\n{notes_part}"),
        None => notes_part,
    })
}

/// `save_notes`: replaces this agent's notes; the observation says how much was kept.
pub(crate) async fn save_notes(ctx: &dyn RunCtx, notes: &str) -> Result<String, String> {
    let memory = memory(ctx)?;
    let kept = clip_chars(notes, MAX_NOTES_CHARS);
    let chars = kept.chars().count();
    let key = notes_key(ctx.node_id());
    let run_id = ctx.run_id().to_owned();
    let value = serde_json::Value::String(kept);
    on_disk(memory, move |memory| memory.set(&key, &value, &run_id)).await?;
    Ok(if notes.chars().count() > MAX_NOTES_CHARS {
        format!(
            "saved the first {chars} characters of your notes (at most {MAX_NOTES_CHARS} are kept); the next run starts with them"
        )
    } else {
        format!("saved your notes ({chars} characters); the next run starts with them")
    })
}
