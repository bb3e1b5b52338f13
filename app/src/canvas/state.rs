//! What the canvas remembers between frames: the view's transform, where each node was
//! laid out (for level of detail and the wires of nodes drawn as boxes), and the state of
//! the dropped-wire menu.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use egui::emath::TSTransform;
use egui::epaint::MarginF32;
use egui::{Id, IdMap, Pos2, Rect, Vec2};
use egui_snarl::{InPinId, NodeId, OutPinId, Snarl};

use super::model::{self, Geometry, Lod, MINIMAP_MARGIN, MINIMAP_SIZE, ViewPrefs, WireDrop};
use crate::document::CanvasNode;
use crate::theme;

/// Room left around a fitted graph, in points on screen.
const FIT_MARGIN: f32 = 24.0;

/// The last fit of the view: the canvas it was made for, the view it chose, and the frames
/// since.
#[derive(Clone, Debug)]
pub(crate) struct Fitted {
    canvas: Rect,
    view: TSTransform,
    /// The nodes fitted (one added since is placed by the person, not fitted).
    nodes: Vec<NodeId>,
    frames: u8,
}

/// Frames after a fit in which the panels and nodes still settle their size (a node's
/// detail follows the zoom the fit chose); a node growing later (a run's badges) or a
/// panel widened later leaves the view as it is.
const FIT_SETTLE: u8 = 10;

/// The canvas's view state that lives across frames.
pub struct CanvasState {
    /// A wire right-clicked this frame: the app opens its menu.
    pub wire_menu_request: Option<(OutPinId, InPinId)>,
    /// This frame's right-click is on a wire (its menu, not the canvas's, opens).
    pub(crate) right_click_on_wire: bool,
    /// Graph → screen transform of the last frame.
    pub transform: TSTransform,
    /// A transform to apply on the next frame (fit to view, 1:1).
    pub set_transform: Option<TSTransform>,
    /// Each node's rectangle in graph coordinates, from the last frame it was drawn.
    pub node_rects: HashMap<NodeId, Rect>,
    /// The canvas rectangle on screen.
    pub screen_rect: Rect,
    /// Where the pointer opened the canvas or dropped-wire menu, in graph coordinates: new
    /// blocks go there (snarl's own menu position moves when a long menu is pushed on screen).
    pub menu_origin: Option<Pos2>,
    /// Level of detail for the zoom of this frame (nodes off screen are boxes whatever it is).
    pub(crate) zoom_lod: Lod,
    /// Each node's level of detail this frame, by `NodeId`.
    pub(crate) lods: Vec<Lod>,
    /// The same by document id, for viewer calls that get only the node's data.
    pub(crate) lods_by_doc: IdMap<Lod>,
    /// Each node's last laid-out geometry, by `NodeId`.
    pub(crate) geometry: Vec<Geometry>,
    /// A laid-out geometry per block kind, the guess for nodes of that kind not laid out yet.
    pub(crate) kind_geometry: IdMap<Geometry>,
    /// A wire dropped on empty canvas whose menu is open.
    pub(crate) wire_drop: Option<WireDrop>,
    /// The dropped-wire menu was open last frame (its wire's pins must stay laid out).
    pub(crate) wire_menu_open: bool,
    /// What is typed in the dropped-wire menu's search.
    pub(crate) wire_menu_query: String,
    /// Margins of the node and header frames, as snarl applies them.
    pub(crate) node_margin: MarginF32,
    pub(crate) header_margin: MarginF32,
    /// Selected blocks that egui-snarl's own selection does not hold (it cannot be given
    /// blocks from outside): Select all, and the block a plain click picked, which a
    /// shift-click or shift-drag box adds to.
    pub(crate) also_selected: Vec<NodeId>,
    /// The View menu's settings, and the file they are kept in.
    pub(crate) prefs: ViewPrefs,
    pub(crate) prefs_file: Option<PathBuf>,
    /// The canvas rectangle and the view of the last fit (see
    /// [`CanvasState::fit_is_stale`]).
    pub(crate) fitted: Option<Fitted>,
}

impl Default for CanvasState {
    fn default() -> Self {
        CanvasState {
            transform: TSTransform::default(),
            set_transform: None,
            node_rects: HashMap::new(),
            wire_menu_request: None,
            right_click_on_wire: false,
            screen_rect: Rect::ZERO,
            menu_origin: None,
            zoom_lod: Lod::Full,
            lods: Vec::new(),
            lods_by_doc: IdMap::default(),
            geometry: Vec::new(),
            kind_geometry: IdMap::default(),
            wire_drop: None,
            wire_menu_open: false,
            wire_menu_query: String::new(),
            node_margin: MarginF32::ZERO,
            header_margin: MarginF32::ZERO,
            also_selected: Vec::new(),
            prefs: ViewPrefs::default(),
            prefs_file: None,
            fitted: None,
        }
    }
}

impl CanvasState {
    /// A canvas with the View settings kept in the data directory `data_dir`.
    pub fn with_prefs_in(data_dir: Option<&Path>) -> Self {
        let prefs_file = data_dir.map(model::prefs_file);
        CanvasState {
            prefs: ViewPrefs::load(prefs_file.as_deref()),
            prefs_file,
            ..CanvasState::default()
        }
    }

    /// Changes the View settings and keeps them.
    pub(crate) fn set_prefs(&mut self, prefs: ViewPrefs) -> Result<(), String> {
        self.prefs = prefs;
        self.prefs_file.as_deref().map_or(Ok(()), |f| prefs.save(f))
    }

    /// The part of the graph visible on screen, in graph coordinates.
    pub fn viewport(&self) -> Rect {
        self.transform.inverse() * self.screen_rect
    }

    /// The part of the canvas a fitted graph goes in: inside a margin, and above the
    /// minimap and the zoom buttons when the minimap is shown.
    pub fn fit_area(&self) -> Rect {
        let mut area = self.screen_rect.shrink(FIT_MARGIN);
        if self.prefs.minimap {
            area.max.y -= (MINIMAP_SIZE.y + MINIMAP_MARGIN).min(area.height() / 3.0);
        }
        area
    }

    /// A transform that shows every node whole, inside [`CanvasState::fit_area`].
    pub fn fit_transform(&self, snarl: &Snarl<CanvasNode>) -> TSTransform {
        let mut bb = Rect::NOTHING;
        for (id, pos, _) in snarl.nodes_pos_ids() {
            // The laid-out rect where there is one: a node's frame need not start at its
            // position.
            let rect = self
                .node_rects
                .get(&id)
                .copied()
                .unwrap_or_else(|| Rect::from_min_size(pos, theme::NODE_SIZE_GUESS));
            bb = bb.union(rect);
        }
        let area = self.fit_area();
        if !bb.is_finite() || area.width() <= 0.0 || area.height() <= 0.0 {
            return TSTransform::default();
        }
        let fit = (area.width() / bb.width()).min(area.height() / bb.height());
        let scale = fit.clamp(theme::MIN_SCALE, 1.0);
        TSTransform::new(
            area.center().to_vec2() - bb.center().to_vec2() * scale,
            scale,
        )
    }

    /// Remembers that the view was fitted to the canvas and the nodes as they are now.
    pub(crate) fn remember_fit(&mut self, view: TSTransform, snarl: &Snarl<CanvasNode>) {
        self.fitted = Some(Fitted {
            canvas: self.screen_rect,
            view,
            nodes: snarl.node_ids().map(|(id, _)| id).collect(),
            frames: 0,
        });
    }

    /// Whether, just after a fit, the canvas changed size (the side panels laid out) or a
    /// node grew out of the view (a node measured zoomed out gains its detail when the fit
    /// zooms in): the fit is then done again. Later changes, and a view moved since the
    /// fit, leave the view as it is.
    pub(crate) fn fit_is_stale(&mut self, snarl: &Snarl<CanvasNode>) -> bool {
        let area = self.fit_area();
        let Some(fitted) = &mut self.fitted else {
            return false;
        };
        if self.set_transform.is_some() {
            return false;
        }
        if self.transform != fitted.view {
            self.fitted = None;
            return false;
        }
        fitted.frames = fitted.frames.saturating_add(1);
        if fitted.frames > FIT_SETTLE {
            return false;
        }
        // Half a point of slack: a refit lands nodes on the area's edge.
        let area = area.expand(0.5);
        fitted.canvas != self.screen_rect
            || fitted.nodes.iter().any(|id| {
                snarl.get_node(*id).is_some()
                    && self
                        .node_rects
                        .get(id)
                        .is_some_and(|r| !area.contains_rect(fitted.view * *r))
            })
    }

    /// Where a new node asked for at `wanted` can go without covering another one: the same
    /// place, or straight below the blocks in the way.
    pub fn free_spot(&self, snarl: &Snarl<CanvasNode>, wanted: Pos2) -> Pos2 {
        self.free_spot_sized(snarl, wanted, theme::NODE_SIZE_GUESS)
    }

    /// [`CanvasState::free_spot`] for something of `size` (a group of pasted blocks).
    pub fn free_spot_sized(&self, snarl: &Snarl<CanvasNode>, wanted: Pos2, size: Vec2) -> Pos2 {
        const GAP: f32 = 24.0;
        let taken: Vec<Rect> = snarl
            .nodes_pos_ids()
            .map(|(id, pos, _)| {
                let size = self
                    .node_rects
                    .get(&id)
                    .map_or(theme::NODE_SIZE_GUESS, |r| r.size());
                Rect::from_min_size(pos, size).expand(GAP / 2.0)
            })
            .collect();
        let mut spot = wanted;
        // Each step clears at least one block, so there are at most as many as blocks.
        for _ in 0..=taken.len() {
            let rect = Rect::from_min_size(spot, size);
            match taken.iter().find(|t| t.intersects(rect)) {
                Some(blocking) => spot.y = blocking.bottom() + GAP / 2.0,
                None => break,
            }
        }
        spot
    }

    /// A 1:1 transform centred on what is shown now.
    pub fn actual_size_transform(&self) -> TSTransform {
        let center = self.viewport().center();
        TSTransform::new(self.screen_rect.center().to_vec2() - center.to_vec2(), 1.0)
    }

    /// The view zoomed by `factor` about the middle of the canvas.
    pub fn zoom_transform(&self, factor: f32) -> TSTransform {
        let center = self.to_graph(self.screen_rect.center());
        let scale = (self.transform.scaling * factor).clamp(theme::MIN_SCALE, theme::MAX_SCALE);
        TSTransform::new(
            self.screen_rect.center().to_vec2() - center.to_vec2() * scale,
            scale,
        )
    }

    /// The view zoomed by `factor` about the screen point `at`, which stays where it is.
    pub fn zoom_about(&self, at: Pos2, factor: f32) -> TSTransform {
        let scale = (self.transform.scaling * factor).clamp(theme::MIN_SCALE, theme::MAX_SCALE);
        let under = self.to_graph(at);
        TSTransform::new(at.to_vec2() - under.to_vec2() * scale, scale)
    }

    /// Screen position → graph position.
    pub fn to_graph(&self, pos: Pos2) -> Pos2 {
        self.transform.inverse() * pos
    }

    /// Decides each node's level of detail for this frame, from the zoom and where the node
    /// was when last laid out. True when a node on screen gets its pins back: snarl lays it
    /// out from the box's size this frame, so the frame is better discarded.
    pub(crate) fn plan_lod(&mut self, snarl: &Snarl<CanvasNode>, keep_pins: bool) -> bool {
        let scale = self.transform.scaling;
        self.zoom_lod = if scale >= theme::LOD_SCALE {
            Lod::Full
        } else if scale >= theme::PIN_SCALE {
            Lod::Pins
        } else {
            Lod::Box
        };
        let screen = self.viewport();
        let view = screen.expand(theme::LOD_MARGIN);
        let mut unboxed_on_screen = false;
        self.lods_by_doc.clear();
        for (id, pos, node) in snarl.nodes_pos_ids() {
            if self.lods.len() <= id.0 {
                self.lods.resize(id.0 + 1, Lod::Box);
                self.geometry.resize_with(id.0 + 1, Geometry::default);
            }
            let owner = Id::new(node.doc.id.as_str());
            let geometry = &mut self.geometry[id.0];
            if geometry.owner != owner {
                *geometry = Geometry {
                    owner,
                    ..Geometry::default()
                };
            }
            if !geometry.laid_out
                && let Some(kind) = self.kind_geometry.get(&Id::new(node.doc.block.as_str()))
            {
                // Not laid out yet: a node of the same kind is the best guess.
                *geometry = Geometry {
                    owner,
                    ..kind.clone()
                };
            }
            let rect = geometry.rect().translate(pos.to_vec2());
            let mut lod = if rect.intersects(view) {
                self.zoom_lod
            } else {
                Lod::Box
            };
            // While a wire is being dragged (or its drop menu is open) snarl needs the pins
            // it started from: never take pins away then.
            if keep_pins && lod == Lod::Box && self.lods[id.0] != Lod::Box {
                lod = Lod::Pins;
            }
            unboxed_on_screen |=
                self.lods[id.0] == Lod::Box && lod != Lod::Box && rect.intersects(screen);
            self.lods[id.0] = lod;
            self.lods_by_doc.insert(owner, lod);
        }
        unboxed_on_screen
    }

    pub(crate) fn lod(&self, node: NodeId) -> Lod {
        self.lods.get(node.0).copied().unwrap_or_default()
    }

    pub(crate) fn lod_of(&self, node: &CanvasNode) -> Lod {
        self.lods_by_doc
            .get(&Id::new(node.doc.id.as_str()))
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn geometry_mut(&mut self, node: NodeId) -> Option<&mut Geometry> {
        self.geometry.get_mut(node.0)
    }

    /// A pin's position in graph coordinates, as last laid out (or guessed).
    pub(crate) fn pin_pos(&self, node: NodeId, pos: Pos2, output: bool, index: usize) -> Pos2 {
        let relative = self.geometry.get(node.0).map_or_else(
            || Geometry::default().pin(output, index),
            |g| g.pin(output, index),
        );
        pos + relative.to_vec2()
    }
}
