//! What the engine benchmarks share.

use std::sync::Arc;

use agentloom_core::{ValidGraph, ValueMap};
use agentloom_engine::{EventSink, Executor, NullSink, RunOptions, RunReport, RunStore};

/// One run of `valid` with no inputs, recorded in `store` (its log written before this
/// returns) or not recorded at all.
pub fn run_once(
    runtime: &tokio::runtime::Runtime,
    executor: &Executor,
    valid: &Arc<ValidGraph>,
    store: Option<&RunStore>,
) -> RunReport {
    let recorder = store.map(|store| Arc::new(store.recorder(&valid.doc).expect("recorder")));
    let sink: Arc<dyn EventSink> = match &recorder {
        Some(recorder) => recorder.clone(),
        None => Arc::new(NullSink),
    };
    let report =
        runtime.block_on(executor.run(valid.clone(), ValueMap::new(), RunOptions::default(), sink));
    if let Some(recorder) = recorder {
        recorder.finish().expect("run log written");
    }
    report
}

/// The machine's load over the last minute (`/proc/loadavg`), printed beside each figure
/// so a figure measured on a busy machine reads as such; "?" where there is no such file.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
