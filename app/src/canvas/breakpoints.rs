//! Breakpoints drawn on the canvas: a red dot at the start of a node's header, filled for
//! "before" and hollow (a red ring) for "after", as debuggers mark a line; the node a run
//! is paused at gets a yellow arrow beside its dot.

use egui::{Color32, Painter, Pos2, Sense, Stroke, Ui, Vec2};

use crate::Command;
use crate::panels::debug_command::DebugCommand;
use crate::panels::debugger_breakpoints::BreakWhen;

/// A breakpoint's red.
pub const BREAKPOINT: Color32 = Color32::from_rgb(0xe0, 0x3e, 0x3e);
/// The arrow at the node a run is paused at.
pub const PAUSED_HERE: Color32 = Color32::from_rgb(0xf2, 0xc9, 0x4c);
/// The dot's diameter beside a title, in points at 1:1.
const DOT: f32 = 10.0;

/// What a node's header shows of the debugger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderMark {
    pub breakpoint: Option<BreakWhen>,
    /// A run is paused at this node (before or after it).
    pub paused: Option<BreakWhen>,
}

impl HeaderMark {
    pub fn is_empty(self) -> bool {
        self.breakpoint.is_none() && self.paused.is_none()
    }

    /// What the mark says, for the accessibility tree and the hover text.
    fn said(self) -> String {
        let mut parts = Vec::new();
        if let Some(when) = self.breakpoint {
            parts.push(format!("Breakpoint {}", when.word()));
        }
        if let Some(when) = self.paused {
            parts.push(format!("Paused {}", when.word()));
        }
        parts.join(", ")
    }
}

/// Paints a breakpoint's dot centred at `center`.
pub fn paint_dot(painter: &Painter, center: Pos2, radius: f32, when: BreakWhen) {
    match when {
        BreakWhen::Before => {
            painter.circle_filled(center, radius, BREAKPOINT);
        }
        BreakWhen::After => {
            painter.circle_stroke(
                center,
                radius - radius * 0.2,
                Stroke::new(radius * 0.4, BREAKPOINT),
            );
        }
    }
}

/// Paints the paused-here arrow (pointing right) centred at `center`.
fn paint_arrow(painter: &Painter, center: Pos2, radius: f32) {
    let points = vec![
        center + Vec2::new(-radius, -radius),
        center + Vec2::new(radius, 0.0),
        center + Vec2::new(-radius, radius),
    ];
    painter.add(egui::Shape::convex_polygon(
        points,
        PAUSED_HERE,
        Stroke::NONE,
    ));
}

/// The mark at the start of a node's header: room for it in the header's row, painted, and
/// named in the accessibility tree ("Breakpoint before", "Paused after").
pub fn header_mark_ui(ui: &mut Ui, mark: HeaderMark) {
    if mark.is_empty() {
        return;
    }
    let slots = usize::from(mark.breakpoint.is_some()) + usize::from(mark.paused.is_some());
    #[allow(clippy::cast_precision_loss, reason = "one or two slots")]
    let width = DOT * slots as f32 + ui.spacing().item_spacing.x * (slots as f32 - 1.0);
    let (rect, response) = ui.allocate_exact_size(Vec2::new(width, DOT), Sense::hover());
    let said = mark.said();
    response.widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::Label, true, &said));
    response.on_hover_text(&said);
    let painter = ui.painter();
    let radius = DOT * 0.5;
    let mut center = Pos2::new(rect.left() + radius, rect.center().y);
    if let Some(when) = mark.breakpoint {
        paint_dot(painter, center, radius, when);
        center.x += DOT + ui.spacing().item_spacing.x;
    }
    if mark.paused.is_some() {
        paint_arrow(painter, center, radius);
    }
}

/// The same mark on a node drawn as a plain box (zoomed far out): painted inside the box's
/// top-left `corner` (graph coordinates), as wide on screen as beside a title whatever the
/// zoom (`scale`).
pub fn box_mark(painter: &Painter, corner: Pos2, scale: f32, mark: HeaderMark) {
    let radius = (DOT * 0.5 / scale.max(f32::EPSILON)).max(DOT * 0.5);
    let center = corner + Vec2::splat(radius);
    if let Some(when) = mark.breakpoint {
        paint_dot(painter, center, radius, when);
    }
    if mark.paused.is_some() {
        paint_arrow(painter, center + Vec2::new(2.5 * radius, 0.0), radius);
    }
}

/// The node menu's breakpoint items: before, after (each a check that toggles it), and
/// remove.
pub fn breakpoint_menu_items(
    ui: &mut Ui,
    node: &str,
    at: Option<BreakWhen>,
    commands: &mut Vec<Command>,
) {
    for (when, label, hover) in [
        (
            BreakWhen::Before,
            "Breakpoint before",
            "Runs stop before this node runs, its inputs shown to change (F9)",
        ),
        (
            BreakWhen::After,
            "Breakpoint after",
            "Runs stop after this node ran, its outputs shown to change",
        ),
    ] {
        let set = at == Some(when);
        if ui
            .add(egui::Button::selectable(set, label))
            .on_hover_text(hover)
            .clicked()
        {
            commands.push(Command::Debug(DebugCommand::SetBreakpoint {
                node: node.to_owned(),
                when: (!set).then_some(when),
            }));
            ui.close();
        }
    }
}

/// The block that runs a sub-graph per item; its items' nodes are `node/INDEX/inner` to the
/// engine, and `node/*/inner` stops in every item.
const FOR_EACH: &str = "control.for_each";

/// The nodes of the sub-graph a `for_each` node runs per item (id and title), or none when
/// it runs a single block.
pub fn item_graph_nodes(node: &agentloom_core::NodeDoc) -> Vec<(String, String)> {
    if node.block != FOR_EACH {
        return Vec::new();
    }
    let Some(graph) = node.config.get("graph").filter(|g| g.is_object()) else {
        return Vec::new();
    };
    agentloom_core::GraphDoc::from_json_value(graph.clone())
        .map(|doc| {
            doc.nodes
                .into_iter()
                .map(|inner| {
                    let title = match &inner.label {
                        Some(label) => format!("{label} ({})", inner.id),
                        None => format!("{} ({})", inner.id, inner.block),
                    };
                    (inner.id, title)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The node menu of a `for_each` over a sub-graph: a breakpoint at one of its nodes in
/// every item (`node/*/inner`), before or after, as for a node of the graph itself.
pub fn item_breakpoint_menu(
    ui: &mut Ui,
    node: &str,
    inner: &[(String, String)],
    at: impl Fn(&str) -> Option<BreakWhen>,
    commands: &mut Vec<Command>,
) {
    ui.menu_button("Breakpoint in every item", |ui| {
        for (id, title) in inner {
            let path = format!("{node}/*/{id}");
            let set = at(&path);
            let title = match set {
                Some(when) => format!("{title}: {}", when.word()),
                None => title.clone(),
            };
            ui.menu_button(title, |ui| {
                breakpoint_menu_items(ui, &path, set, commands);
            });
        }
    });
}

/// The node menu's "Edit output and rerun from here", offered on a node that finished in
/// the past run shown.
pub fn fork_menu_item(ui: &mut Ui, node: &str, finished: bool, commands: &mut Vec<Command>) {
    if ui
        .add_enabled(
            finished,
            egui::Button::new("Edit output and rerun from here"),
        )
        .on_hover_text(
            "A new run from this node's outputs as you edit them: what comes before is reused from the run shown, what depends on it runs again",
        )
        .on_disabled_hover_text("Show a run from the history in which this node finished")
        .clicked()
    {
        commands.push(Command::Debug(DebugCommand::OpenFork(node.to_owned())));
        ui.close();
    }
}
