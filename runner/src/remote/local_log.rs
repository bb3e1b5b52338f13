//! A remote run recorded in this machine's run log as its events arrive, with the names of
//! the workers that ran it (`submit --wait`, `approve --nats`, `serve --nats`).

use std::sync::{Arc, Mutex};

use agentloom_engine::{EventKind, EventSink, LogPolicy, RunRecorder, RunStore};

/// The submitter's run log entry of a remote run, written as its events arrive: one
/// recorder per attempt (a worker taking the run over starts it again under its id).
pub struct LocalRecord {
    store: Option<Arc<RunStore>>,
    doc: agentloom_core::GraphDoc,
    recorder: Mutex<Option<RunRecorder>>,
    /// Every worker that ran a part of the run, in order (one that took it over after
    /// another stopped comes after it).
    workers: Mutex<Vec<String>>,
}

impl LocalRecord {
    pub fn new(store: Option<Arc<RunStore>>, doc: agentloom_core::GraphDoc) -> LocalRecord {
        LocalRecord {
            store,
            doc,
            recorder: Mutex::new(None),
            workers: Mutex::new(Vec::new()),
        }
    }

    pub fn record(&self, event: &agentloom_engine::RunEvent, worker: &str) {
        let Some(store) = &self.store else { return };
        let mut recorder = self
            .recorder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let EventKind::RunStarted { run_id, .. } = &event.kind {
            if let Some(earlier) = recorder.take()
                && let Err(err) = earlier.finish()
            {
                eprintln!("warning: the run log may be incomplete: {err}");
            }
            match store.recorder_with(&self.doc, LogPolicy::default()) {
                Ok(started) => {
                    started.emit(event);
                    let workers = {
                        let mut workers = self
                            .workers
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if !workers.iter().any(|known| known == worker) {
                            workers.push(worker.to_owned());
                        }
                        workers.join(", ")
                    };
                    let named = started
                        .flush()
                        .and_then(|()| store.record_worker(run_id, &workers));
                    if let Err(err) = named {
                        eprintln!("warning: the run's worker is not recorded: {err}");
                    }
                    *recorder = Some(started);
                }
                Err(err) => eprintln!("warning: this run will not be logged: {err}"),
            }
            return;
        }
        if let Some(recorder) = &*recorder {
            recorder.emit(event);
        }
    }

    pub fn finish(&self) {
        let recorder = self
            .recorder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(recorder) = recorder
            && let Err(err) = recorder.finish()
        {
            eprintln!("warning: the run log may be incomplete: {err}");
        }
    }
}
