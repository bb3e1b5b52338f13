//! What a person dragging a wire is told before letting go: the pin under the pointer and,
//! when the wire cannot end there, why (an output dropped on an output, types that do not
//! fit). Snarl keeps its dragged wire to itself, so the pins are found from the geometry the
//! canvas remembers.

use egui::{Pos2, RichText};
use egui_snarl::{InPinId, OutPinId, Snarl};

use super::model::Lod;
pub use super::model::Pin;
use super::state::CanvasState;
use crate::document::{CanvasNode, check_wire};
use crate::theme;

/// The pin within `radius` (graph units) of `at`, if any.
pub fn pin_at(
    state: &CanvasState,
    snarl: &Snarl<CanvasNode>,
    at: Pos2,
    radius: f32,
) -> Option<Pin> {
    let mut best: Option<(f32, Pin)> = None;
    for (node, pos, canvas) in snarl.nodes_pos_ids() {
        let pins = (0..canvas.inputs.len())
            .map(|input| (false, Pin::In(InPinId { node, input })))
            .chain(
                (0..canvas.outputs.len()).map(|output| (true, Pin::Out(OutPinId { node, output }))),
            );
        for (output, pin) in pins {
            let index = match pin {
                Pin::Out(p) => p.output,
                Pin::In(p) => p.input,
            };
            let distance = state.pin_pos(node, pos, output, index).distance(at);
            if distance <= radius && best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, pin));
            }
        }
    }
    best.map(|(_, pin)| pin)
}

/// Why a wire dragged from `from` cannot end on `to`; `None` when it can.
pub fn refusal(snarl: &Snarl<CanvasNode>, from: Pin, to: Pin) -> Option<String> {
    let (out, inp) = match (from, to) {
        (Pin::Out(_), Pin::Out(_)) => {
            return Some(
                "an output feeds an input: drop the wire on an input pin, on the left side of \
                 a block"
                    .to_owned(),
            );
        }
        (Pin::In(_), Pin::In(_)) => {
            return Some(
                "an input takes its value from an output: drop the wire on an output pin, on \
                 the right side of a block"
                    .to_owned(),
            );
        }
        (Pin::Out(out), Pin::In(inp)) | (Pin::In(inp), Pin::Out(out)) => (out, inp),
    };
    check_wire(snarl, out, inp).err().map(|err| err.to_string())
}

/// A wire being dragged: where it started, and what was last said about its end.
#[derive(Default)]
pub struct WireDrag {
    from: Option<Pin>,
    /// Why the wire cannot end where the pointer is.
    pub refused: Option<String>,
}

impl WireDrag {
    /// The type a wire dragged from an input takes, while one is: outputs that could feed
    /// it are shown.
    pub fn dragged_into(&self, snarl: &Snarl<CanvasNode>) -> Option<agentloom_core::ValueType> {
        let Some(Pin::In(inp)) = self.from else {
            return None;
        };
        let port = snarl.get_node(inp.node)?.inputs.get(inp.input)?;
        Some(port.wire_type().clone())
    }

    /// Follows the pointer: a press on a pin starts a drag, a release ends it. Returns why
    /// the wire was refused when it was let go where it cannot end.
    pub fn update(
        &mut self,
        ctx: &egui::Context,
        state: &CanvasState,
        snarl: &Snarl<CanvasNode>,
        pointer: Option<Pos2>,
    ) -> Option<String> {
        let radius = theme::PIN_SIZE / state.transform.scaling.max(f32::EPSILON);
        let (pressed, down, released) = ctx.input(|i| {
            (
                i.pointer.primary_pressed(),
                i.pointer.primary_down(),
                i.pointer.primary_released(),
            )
        });
        let at = pointer.map(|p| state.to_graph(p));
        if pressed {
            self.from = at.and_then(|at| pin_at(state, snarl, at, radius));
            self.refused = None;
        }
        let from = self.from?;
        let over = at
            .and_then(|at| pin_at(state, snarl, at, radius))
            .filter(|pin| *pin != from);
        self.refused = over.and_then(|to| refusal(snarl, from, to));
        if released || !down {
            self.from = None;
            return self.refused.take();
        }
        if let (Some(reason), Some(pointer)) = (&self.refused, pointer) {
            note_at_cursor(
                ctx,
                "wire-refusal",
                pointer,
                &format!("Cannot connect: {reason}"),
                theme::WARN,
            );
        }
        None
    }
}

/// A wire's shape as snarl draws it: a straight line when zoomed out, else snarl's
/// `Bezier3` whose ends leave the pins horizontally by its default frame (three pin sizes,
/// shrunk for short wires). Hover, right-click and the wires the canvas draws itself all
/// use this one shape, so what is hit is what is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WireCurve {
    Line([Pos2; 2]),
    Cubic([Pos2; 4]),
}

impl WireCurve {
    /// The wire from an output pin at `from` to an input pin at `to` (graph coordinates).
    pub fn between(state: &CanvasState, from: Pos2, to: Pos2) -> Self {
        if state.zoom_lod != Lod::Full {
            return WireCurve::Line([from, to]);
        }
        let frame = (3.0 * theme::PIN_SIZE).min((to - from).length() / 6.0);
        let bend = egui::vec2(frame, 0.0);
        WireCurve::Cubic([from, from + bend, to - bend, to])
    }

    /// How far the curve reaches beyond the box of its ends.
    pub fn bend(&self) -> f32 {
        match self {
            WireCurve::Line(_) => 0.0,
            WireCurve::Cubic([from, c1, ..]) => c1.x - from.x,
        }
    }

    /// Points along the curve, ends included.
    pub fn points(&self) -> Vec<Pos2> {
        match *self {
            WireCurve::Line(ends) => ends.to_vec(),
            WireCurve::Cubic([start, c1, c2, end]) => (0..=WIRE_SAMPLES)
                .map(|i| {
                    #[allow(clippy::cast_precision_loss, reason = "a small count")]
                    let t = i as f32 / WIRE_SAMPLES as f32;
                    let u = 1.0 - t;
                    let p = start.to_vec2() * (u * u * u)
                        + c1.to_vec2() * (3.0 * u * u * t)
                        + c2.to_vec2() * (3.0 * u * t * t)
                        + end.to_vec2() * (t * t * t);
                    p.to_pos2()
                })
                .collect(),
        }
    }
}

/// Straight pieces a curved wire is followed by when hit tested (fine enough that a piece
/// strays less than a point from the curve).
const WIRE_SAMPLES: usize = 48;

/// Points along the wire from output `from` to input `to`, in graph coordinates.
pub fn wire_points(
    state: &CanvasState,
    snarl: &Snarl<CanvasNode>,
    from: OutPinId,
    to: InPinId,
) -> Option<Vec<Pos2>> {
    let start = state.pin_pos(
        from.node,
        snarl.get_node_info(from.node)?.pos,
        true,
        from.output,
    );
    let end = state.pin_pos(to.node, snarl.get_node_info(to.node)?.pos, false, to.input);
    Some(WireCurve::between(state, start, end).points())
}

/// The wire within `radius` (graph units) of `at`, if any.
pub fn wire_at(
    state: &CanvasState,
    snarl: &Snarl<CanvasNode>,
    at: Pos2,
    radius: f32,
) -> Option<(OutPinId, InPinId)> {
    snarl.wires().find(|(from, to)| {
        wire_points(state, snarl, *from, *to).is_some_and(|points| {
            points
                .windows(2)
                .any(|pair| distance_to_segment(at, pair[0], pair[1]) <= radius)
        })
    })
}

fn distance_to_segment(p: Pos2, a: Pos2, b: Pos2) -> f32 {
    let ab = b - a;
    let t = if ab.length_sq() > 0.0 {
        ((p - a).dot(ab) / ab.length_sq()).clamp(0.0, 1.0)
    } else {
        0.0
    };
    p.distance(a + ab * t)
}

/// What a wire carries, for its hover: its ends, its types, and the last value it carried.
pub fn wire_summary(
    snarl: &Snarl<CanvasNode>,
    run: &crate::run::RunView,
    from: OutPinId,
    to: InPinId,
) -> Option<String> {
    let src = snarl.get_node(from.node)?;
    let dst = snarl.get_node(to.node)?;
    let out = src.outputs.get(from.output)?;
    let inp = dst.inputs.get(to.input)?;
    let converted =
        agentloom_core::compatibility(&out.ty, &inp.ty) == Ok(agentloom_core::Compat::Coerce);
    let mut text = format!(
        "{}.{} -> {}.{}\n{}{}",
        src.doc.id,
        out.name,
        dst.doc.id,
        inp.name,
        out.ty,
        if converted {
            format!(" converted to {}", inp.ty)
        } else {
            String::new()
        }
    );
    match run.node(&src.doc.id).and_then(|n| n.outputs.get(&out.name)) {
        Some(value) => {
            text.push_str("\nLast value: ");
            text.push_str(&value.preview(400));
        }
        None => text.push_str("\nNo value yet: run the graph."),
    }
    Some(text)
}

/// A tooltip-like note beside the pointer.
pub fn note_at_cursor(
    ctx: &egui::Context,
    id: &str,
    pointer: Pos2,
    text: &str,
    color: egui::Color32,
) {
    egui::Area::new(egui::Id::new(id))
        .order(egui::Order::Tooltip)
        .fixed_pos(pointer + egui::vec2(16.0, 16.0))
        .interactable(false)
        .show(ctx, |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.set_max_width(360.0);
                ui.label(RichText::new(text).color(color));
            });
        });
}
