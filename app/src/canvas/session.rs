//! What the person has in hand on the canvas, beside the view itself ([`super::CanvasState`]):
//! the node inspected, the selection, a picked or dragged wire, a title being typed, the
//! copied blocks, the graphs walked down from, and whether the view is to be fitted.

use agentloom_core::GraphDoc;
use egui_snarl::{InPinId, NodeId, OutPinId};

use super::CanvasState;
use super::wire_menu::WireMenu;
use super::wiring::WireDrag;
use crate::document::Document;
use crate::panels::subgraph::Caller;

/// The canvas session of the graph shown.
pub(crate) struct CanvasSession {
    /// The node shown in the inspector.
    pub(crate) inspected: Option<NodeId>,
    /// The view is fitted to the graph on the next frame.
    pub(crate) pending_fit: bool,
    /// Fits still to do once the nodes are laid out (the first fit of a graph guesses their
    /// sizes, and their detail, hence size, follows the zoom the fit chose).
    pub(crate) refits_after_layout: u8,
    /// The canvas selection of the last frame.
    pub(crate) last_selection: Vec<NodeId>,
    /// Bumped to clear the canvas selection (see `App::canvas_id`).
    pub(crate) selection_epoch: u64,
    /// The wire being dragged, to say why it cannot end where the pointer is.
    pub(crate) wire_drag: WireDrag,
    /// The wire picked by a click (Delete removes it).
    pub(crate) selected_wire: Option<(OutPinId, InPinId)>,
    /// The menu of a right-clicked wire, while open.
    pub(crate) wire_menu: Option<WireMenu>,
    /// The group whose title is being typed (one undo step for it).
    pub(crate) group_title_editing: Option<String>,
    /// The blocks last copied (Edit → Copy), for Paste.
    pub(crate) clipboard: Option<GraphDoc>,
    /// The graphs walked down from to the one shown (graph-call nodes opened), first first.
    pub(crate) callers: Vec<Caller>,
}

impl Default for CanvasSession {
    fn default() -> Self {
        CanvasSession {
            inspected: None,
            // A graph is first shown whole.
            pending_fit: true,
            refits_after_layout: 0,
            last_selection: Vec::new(),
            selection_epoch: 0,
            wire_drag: WireDrag::default(),
            selected_wire: None,
            wire_menu: None,
            group_title_editing: None,
            clipboard: None,
            callers: Vec::new(),
        }
    }
}

impl CanvasSession {
    /// A graph shown afresh starts with nothing selected: the canvas widget's selection
    /// (kept by node index) is left behind under a new id.
    pub(crate) fn fresh_selection(&mut self, canvas: &mut CanvasState) {
        self.selection_epoch += 1;
        canvas.also_selected.clear();
        self.last_selection.clear();
    }

    /// The canvas as `caller` left it, its graph shown again in `document`: its view, its
    /// selection and its inspected node.
    pub(crate) fn back_at(
        &mut self,
        caller: &Caller,
        canvas: &mut CanvasState,
        document: &Document,
    ) {
        self.fresh_selection(canvas);
        self.pending_fit = false;
        self.refits_after_layout = 0;
        canvas.set_transform = Some(caller.view);
        canvas.also_selected = (caller.selected.iter())
            .filter_map(|id| document.node_by_id(id))
            .collect();
        self.inspected = (caller.inspected.as_deref()).and_then(|id| document.node_by_id(id));
    }
}
