//! The canvas's plain data, below the modules that draw it: how much of a node is drawn
//! ([`Lod`]) and where it was laid out ([`Geometry`]), the ends of a wire ([`Pin`]), a wire
//! dropped on empty canvas ([`WireDrop`]) and the minimap's place on screen. It imports no
//! other canvas module, so each of them can import it.

use egui::{Id, Pos2, Rect, Vec2};
use egui_snarl::{InPinId, OutPinId};

use crate::theme;

/// The minimap's size on screen.
pub const MINIMAP_SIZE: Vec2 = egui::vec2(150.0, 96.0);
/// Its distance from the canvas's edges.
pub const MINIMAP_MARGIN: f32 = 10.0;

/// How much of a node is drawn this frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Lod {
    /// Pin labels, body, curved wires.
    #[default]
    Full,
    /// Pins without labels, no body, straight wires (zoomed out a little).
    Pins,
    /// A plain box the size the node had when last laid out, without pins; its wires are
    /// drawn by the canvas (the node is off screen, or the view is zoomed far out).
    Box,
}

/// Where a node's frame and pins were when it was last laid out with its pins, relative to
/// the node's position.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    /// The document id of the node it belongs to (snarl reuses ids of deleted nodes).
    pub(crate) owner: Id,
    pub(crate) laid_out: bool,
    /// The node's frame.
    pub(crate) rect: Rect,
    /// Pin centres' y, in pin order.
    pub(crate) inputs: Vec<f32>,
    pub(crate) outputs: Vec<f32>,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            owner: Id::NULL,
            laid_out: false,
            rect: Rect::NOTHING,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }
}

impl Geometry {
    pub(crate) fn rect(&self) -> Rect {
        if self.laid_out {
            self.rect
        } else {
            Rect::from_min_size(Pos2::ZERO, theme::NODE_SIZE_GUESS)
        }
    }

    /// A pin's centre relative to the node's position.
    pub(crate) fn pin(&self, output: bool, index: usize) -> Pos2 {
        let rect = self.rect();
        let x = if output { rect.right() } else { rect.left() };
        let ys = if output { &self.outputs } else { &self.inputs };
        #[allow(clippy::cast_precision_loss, reason = "pin index")]
        let y = match ys.get(index) {
            Some(y) if self.laid_out => *y,
            _ => theme::NODE_HEADER_GUESS + (index as f32 + 0.5) * theme::PIN_ROW_GUESS,
        };
        Pos2::new(x, y)
    }
}

/// One end of a wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    Out(OutPinId),
    In(InPinId),
}

/// A wire dropped on empty canvas: the pins it came from and where it was dropped
/// (graph coordinates).
#[derive(Clone, Debug)]
pub struct WireDrop {
    pub pins: Vec<Pin>,
    pub at: Pos2,
    /// Opened this frame: the release that opened it does not close it.
    pub(super) fresh: bool,
}

impl WireDrop {
    pub fn new(pins: Vec<Pin>, at: Pos2) -> Self {
        WireDrop {
            pins,
            at,
            fresh: true,
        }
    }
}
