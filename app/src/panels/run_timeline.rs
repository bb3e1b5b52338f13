//! The run timeline: each node of the shown run as a bar from its start to its end, so
//! parallelism and slow nodes are seen at a glance. Read from the run log (the node rows'
//! start and finish times), again while the run goes on.

use std::time::{Duration, Instant};

use agentloom_engine::{NodeStatus, RunStore};

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
    run_id: Option<String>,
    bars: Vec<Bar>,
    read_at: Option<Instant>,
    /// The live run's messages taken when last read (see [`crate::run::RunView`]).
    read_after: u64,
}

impl RunTimeline {
    /// The bars of run `run_id` from `store`, read again when the run changed or, while it
    /// goes on (`every`: how often), every half second, or second while it waits; and at
    /// once as it begins to wait or ends (`messages`: the run's messages taken so far), so
    /// neither a paused nor a finished run shows the timeline of before.
    fn refresh(
        &mut self,
        store: &RunStore,
        run_id: &str,
        every: Option<Duration>,
        settled: bool,
        messages: u64,
    ) {
        let stale = self.run_id.as_deref() != Some(run_id)
            || every.is_some_and(|every| self.read_at.is_none_or(|at| at.elapsed() >= every))
            || (settled && messages != self.read_after);
        if !stale {
            return;
        }
        self.run_id = Some(run_id.to_owned());
        self.read_at = Some(Instant::now());
        self.read_after = messages;
        self.bars = match store.get_run(run_id) {
            Ok(Some(detail)) => bars_of(&detail),
            _ => Vec::new(),
        };
    }

    pub fn bars(&self) -> &[Bar] {
        &self.bars
    }

    /// Draws the timeline of `run_id` (nothing when there is no run or no log).
    pub fn show(
        &mut self,
        ui: &mut egui::Ui,
        store: Option<&RunStore>,
        run_id: Option<&str>,
        running: bool,
        waiting: bool,
        messages: u64,
    ) {
        let (Some(store), Some(run_id)) = (store, run_id) else {
            ui.weak("Run the graph to see its timeline.");
            return;
        };
        let every = running.then_some(if waiting { REFRESH_WAITING } else { REFRESH });
        self.refresh(store, run_id, every, waiting || !running, messages);
        if let Some(every) = every {
            ui.ctx().request_repaint_after(every);
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

impl crate::App {
    /// The bars of the timeline last drawn.
    pub fn timeline_bars(&self) -> Vec<Bar> {
        self.timeline.bars().to_vec()
    }

    /// The shown run's timeline, folded under the run summary.
    pub(super) fn timeline_ui(&mut self, ui: &mut egui::Ui) {
        egui::CollapsingHeader::new("Timeline")
            .default_open(false)
            .show(ui, |ui| {
                self.timeline.show(
                    ui,
                    self.store.as_deref(),
                    self.run.run_id.as_deref(),
                    self.run.is_running(),
                    self.run.is_waiting(),
                    self.run.messages_taken,
                );
            });
    }
}
