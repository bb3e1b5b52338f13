//! The run timeline: each node of the shown run as a bar from its start to its end, so
//! parallelism and slow nodes are seen at a glance. Read from the run log (the node rows'
//! start and finish times), again while the run goes on. Drawing only says which run it
//! shows; the app's logic reads the log in a background task (see [`crate::tasks`]), so a
//! slow or locked log never holds up a frame.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloom_engine::{NodeStatus, RunDetail, RunStore};

use crate::tasks::{BackgroundTasks, Report, Task};

/// How often the timeline of a run still going is read again.
const REFRESH: Duration = Duration::from_millis(500);
/// How often while the run waits for a person (nothing moves but the running bars).
const REFRESH_WAITING: Duration = Duration::from_secs(1);
const LABEL_WIDTH: f32 = 140.0;
const ROW_HEIGHT: f32 = 18.0;

/// One node's bar, in milliseconds since the run started.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub node: String,
    pub start_ms: u64,
    /// `None` while the node runs.
    pub end_ms: Option<u64>,
    pub failed: bool,
}

/// The timeline of one run, kept between frames.
#[derive(Default)]
pub struct RunTimeline {
    /// The run last asked for, and the bars read of it.
    run_id: Option<String>,
    bars: Vec<Bar>,
    /// The bars are of `run_id` (read at least once).
    read: bool,
    read_at: Option<Instant>,
    /// The live run's messages taken when last read (see [`crate::run::RunView`]).
    read_after: u64,
    /// The last read failed (the log busy): it is tried again.
    failed: bool,
    /// What the timeline drawn since the app's logic last looked shows.
    wanted: Option<Wanted>,
    /// The read under way.
    reading: Option<Task>,
}

/// The run a drawn timeline shows, and how it goes.
struct Wanted {
    run_id: String,
    /// How often to read it again while it goes on.
    every: Option<Duration>,
    /// It waits for a person or has ended.
    settled: bool,
    /// The run's messages taken so far.
    messages: u64,
}

impl RunTimeline {
    /// Reads the bars of the run the timeline showed, from `store` in the background, again
    /// when the run changed or, while it goes on, every half second, or second while it
    /// waits; and at once as it begins to wait or ends, so neither a paused nor a finished
    /// run shows the timeline of before. Nothing while the timeline is folded.
    pub(crate) fn follow(&mut self, store: Option<&Arc<RunStore>>, tasks: &mut BackgroundTasks) {
        let (Some(wanted), Some(store)) = (self.wanted.take(), store) else {
            return;
        };
        let every = wanted
            .every
            .or(self.failed.then_some(REFRESH))
            .filter(|_| self.reading.is_none());
        let stale = self.run_id.as_deref() != Some(wanted.run_id.as_str())
            || every.is_some_and(|every| self.read_at.is_none_or(|at| at.elapsed() >= every))
            || (wanted.settled && wanted.messages != self.read_after);
        if !stale {
            return;
        }
        if self.run_id.as_deref() != Some(wanted.run_id.as_str()) {
            self.bars.clear();
            self.read = false;
        }
        self.run_id = Some(wanted.run_id.clone());
        self.read_at = Some(Instant::now());
        self.read_after = wanted.messages;
        let store = store.clone();
        let run_id = wanted.run_id;
        let lost_run = run_id.clone();
        let shown = self.read.then(|| self.bars.clone());
        let lost = move |why: String| Report::RunRead {
            run_id: lost_run,
            detail: Err(why),
            unchanged: false,
        };
        // A read still under way is of before: dropping it drops what it finds.
        self.reading = match tasks.spawn_blocking(
            move |_, _| {
                let detail = store.get_run(&run_id).map_err(|e| e.to_string());
                // Read again while a run waits, mostly the same: nothing to wake the window for.
                let unchanged = match (&detail, &shown) {
                    (Ok(Some(detail)), Some(shown)) => bars_of(detail) == *shown,
                    _ => false,
                };
                Report::RunRead {
                    run_id,
                    detail,
                    unchanged,
                }
            },
            lost,
        ) {
            Ok(task) => Some(task),
            Err(why) => {
                tracing::warn!("the timeline cannot be read: {why}");
                None
            }
        };
    }

    /// What the log held of run `run_id` (`unchanged`: the bars shown).
    pub(crate) fn read(
        &mut self,
        run_id: &str,
        detail: Result<Option<RunDetail>, String>,
        unchanged: bool,
    ) {
        if self.run_id.as_deref() != Some(run_id) {
            return;
        }
        self.reading = None;
        if unchanged {
            self.failed = false;
            return;
        }
        self.failed = detail.is_err();
        match detail {
            Ok(detail) => {
                self.bars = detail.as_ref().map(bars_of).unwrap_or_default();
                self.read = true;
            }
            Err(why) => tracing::debug!("the timeline's run could not be read: {why}"),
        }
    }

    pub fn bars(&self) -> &[Bar] {
        &self.bars
    }

    /// Draws the timeline of `run_id` (nothing when there is no run or no log), as last
    /// read.
    pub fn show(
        &mut self,
        ui: &mut egui::Ui,
        logged: bool,
        run_id: Option<&str>,
        running: bool,
        waiting: bool,
        messages: u64,
    ) {
        let (true, Some(run_id)) = (logged, run_id) else {
            ui.weak("Run the graph to see its timeline.");
            return;
        };
        let every = running.then_some(if waiting { REFRESH_WAITING } else { REFRESH });
        self.wanted = Some(Wanted {
            run_id: run_id.to_owned(),
            every,
            settled: waiting || !running,
            messages,
        });
        match every {
            Some(every) => ui.ctx().request_repaint_after(every),
            // The read is asked for by the next frame's logic.
            None if self.run_id.as_deref() != Some(run_id) => ui.ctx().request_repaint(),
            None => {}
        }
        if self.run_id.as_deref() != Some(run_id) || !self.read {
            ui.weak("Reading the timeline…");
            return;
        }
        if self.bars.is_empty() {
            ui.weak("No node has started yet.");
            return;
        }
        let now_ms = self
            .bars
            .iter()
            .map(|b| b.end_ms.unwrap_or(b.start_ms))
            .max()
            .unwrap_or(0)
            .max(1);
        #[allow(clippy::cast_precision_loss, reason = "milliseconds on screen")]
        let span = now_ms as f32;
        ui.label(format!("Timeline: {now_ms} ms"));
        for bar in &self.bars {
            ui.horizontal(|ui| {
                ui.add_sized(
                    [LABEL_WIDTH, ROW_HEIGHT],
                    egui::Label::new(agentloom_core::escape_control(&bar.node)).truncate(),
                );
                let width = ui.available_width().max(40.0);
                let (rect, response) =
                    ui.allocate_exact_size(egui::vec2(width, ROW_HEIGHT), egui::Sense::hover());
                #[allow(clippy::cast_precision_loss, reason = "milliseconds on screen")]
                let (start, end) = (
                    bar.start_ms as f32 / span,
                    bar.end_ms.unwrap_or(now_ms) as f32 / span,
                );
                let left = rect.left() + start * rect.width();
                let right = (rect.left() + end * rect.width()).max(left + 2.0);
                let colour = if bar.failed {
                    crate::theme::status_color(NodeStatus::Failed)
                } else if bar.end_ms.is_none() {
                    crate::theme::status_color(NodeStatus::Running)
                } else {
                    crate::theme::status_color(NodeStatus::Done)
                };
                ui.painter().rect_filled(
                    egui::Rect::from_min_max(
                        egui::pos2(left, rect.top() + 3.0),
                        egui::pos2(right, rect.bottom() - 3.0),
                    ),
                    2.0,
                    colour,
                );
                response.on_hover_text(match bar.end_ms {
                    Some(end) => format!(
                        "{}: {} → {end} ms ({} ms)",
                        bar.node,
                        bar.start_ms,
                        end - bar.start_ms
                    ),
                    None => format!("{}: since {} ms, running", bar.node, bar.start_ms),
                });
            });
        }
    }
}

/// The bars of a recorded run: nodes that started, by start time.
pub fn bars_of(detail: &agentloom_engine::RunDetail) -> Vec<Bar> {
    let origin = detail.run.started_at_ms;
    let mut bars: Vec<Bar> = detail
        .nodes
        .iter()
        .filter_map(|node| {
            let start = node.started_at_ms?;
            Some(Bar {
                node: node.node_id.clone(),
                start_ms: start.saturating_sub(origin),
                end_ms: node.finished_at_ms.map(|end| end.saturating_sub(origin)),
                failed: node.status == NodeStatus::Failed,
            })
        })
        .collect();
    bars.sort_by(|a, b| (a.start_ms, &a.node).cmp(&(b.start_ms, &b.node)));
    bars
}
