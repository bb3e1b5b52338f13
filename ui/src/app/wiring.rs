//! What a person dragging a wire is told before letting go: the pin under the pointer and,
//! when the wire cannot end there, why (an output dropped on an output, types that do not
//! fit). Snarl keeps its dragged wire to itself, so the pins are found from the geometry the
//! canvas remembers.

use egui::{Pos2, RichText};
use egui_snarl::{InPinId, OutPinId, Snarl};

use super::canvas::CanvasState;
use super::document::{CanvasNode, check_wire};
use super::theme;

/// One end of a wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    Out(OutPinId),
    In(InPinId),
}

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
            show_at_cursor(ctx, pointer, reason);
        }
        None
    }
}

/// The reason a wire cannot end here, beside the pointer.
fn show_at_cursor(ctx: &egui::Context, pointer: Pos2, reason: &str) {
    egui::Area::new(egui::Id::new("wire-refusal"))
        .order(egui::Order::Tooltip)
        .fixed_pos(pointer + egui::vec2(16.0, 16.0))
        .interactable(false)
        .show(ctx, |ui| {
            egui::Frame::popup(ui.style()).show(ui, |ui| {
                ui.set_max_width(320.0);
                ui.label(RichText::new(format!("Cannot connect: {reason}")).color(theme::WARN));
            });
        });
}
