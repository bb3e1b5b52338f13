//! The one place that defines the app's colours, spacing and pin looks.
//! No other module writes a colour literal.

use agentloom_core::ValueType;
use agentloom_engine::NodeStatus;
use egui::{Color32, CornerRadius, Margin, Stroke, Visuals};
use egui_snarl::ui::{BackgroundPattern, NodeLayout, PinPlacement, PinShape, SnarlStyle};

/// Canvas background.
pub const CANVAS_BG: Color32 = Color32::from_rgb(0x1b, 0x1e, 0x24);
/// Panels around the canvas.
pub const PANEL_BG: Color32 = Color32::from_rgb(0x23, 0x27, 0x2e);
/// Node body.
pub const NODE_BG: Color32 = Color32::from_rgb(0x2c, 0x31, 0x3a);
/// Node header band.
pub const NODE_HEADER_BG: Color32 = Color32::from_rgb(0x35, 0x3b, 0x46);
pub const NODE_BORDER: Color32 = Color32::from_rgb(0x45, 0x4c, 0x59);
pub const GRID: Color32 = Color32::from_rgb(0x26, 0x2a, 0x31);
pub const TEXT: Color32 = Color32::from_rgb(0xd8, 0xdc, 0xe3);
pub const TEXT_WEAK: Color32 = Color32::from_rgb(0x8c, 0x93, 0xa0);
pub const ACCENT: Color32 = Color32::from_rgb(0x5b, 0x9d, 0xf5);
pub const OK: Color32 = Color32::from_rgb(0x4c, 0xc3, 0x7a);
pub const WARN: Color32 = Color32::from_rgb(0xe8, 0xb3, 0x3c);
pub const ERROR: Color32 = Color32::from_rgb(0xe5, 0x5b, 0x5b);
/// A group's frame on the canvas.
pub const GROUP_FILL: Color32 = Color32::from_rgba_premultiplied(0x2a, 0x32, 0x40, 0x60);
pub const GROUP_BORDER: Color32 = Color32::from_rgb(0x4a, 0x5a, 0x72);
/// A wire whose value is converted on the way (number to text, text to messages…).
pub const CONVERTING_WIRE: Color32 = Color32::from_rgb(0xc9, 0x8a, 0xe8);

/// Inner spacing of panels and nodes.
pub const PAD: i8 = 8;
/// Default width of the side panels.
pub const SIDE_PANEL_WIDTH: f32 = 260.0;
/// Longest value preview shown inside a node.
pub const NODE_PREVIEW_CHARS: usize = 60;
/// Longest error or problem text shown inside a node (the whole text is on hover and in
/// the run panel), so that a long message does not grow the node over its neighbours.
pub const NODE_MESSAGE_CHARS: usize = 140;
/// The farthest zoom out, for the wheel and fit-to-view alike: far enough that a graph as
/// wide as the whole canvas (see `document::CANVAS_EXTENT`) still fits in a window.
pub const MIN_SCALE: f32 = 0.002;
/// The closest zoom.
pub const MAX_SCALE: f32 = 2.0;
/// One step of the zoom buttons.
pub const ZOOM_STEP: f32 = 1.25;
/// Zoom per point the wheel turns: one notch (a line, 40 points) zooms by 10 %.
pub const WHEEL_ZOOM_SPEED: f32 = 0.095_31 / 40.0;
/// The smallest text size anywhere in the app, in points.
pub const MIN_TEXT_POINTS: f32 = 11.0;
/// Longest value text shown when hovering a value in a node's badge.
pub const NODE_HOVER_CHARS: usize = 2000;
/// How many values and messages a node's badge lists; the rest are in the inspector.
pub const NODE_BADGE_LINES: usize = 3;
/// Below this zoom the canvas drops pin labels and node bodies, and draws straight wires.
pub const LOD_SCALE: f32 = 0.55;
/// Below this zoom nodes are drawn as plain boxes without pins (too small to wire).
pub const PIN_SCALE: f32 = 0.3;
/// Below this zoom plain boxes carry no title either.
pub const BOX_TITLE_SCALE: f32 = 0.14;
/// A plain box's title size on screen, in points.
pub const BOX_TITLE_POINTS: f32 = 11.0;
/// The largest font a plain box's title is laid out with (graph units).
pub const BOX_TITLE_MAX_SIZE: f32 = 64.0;
/// Nodes this close to the view (graph units) are drawn in full, so they are ready when
/// scrolled in.
pub const LOD_MARGIN: f32 = 120.0;
/// Size used for nodes not laid out yet when fitting the view.
pub const NODE_SIZE_GUESS: egui::Vec2 = egui::vec2(200.0, 110.0);
/// Where the first pin row of a node not laid out yet is guessed to start (below the header).
pub const NODE_HEADER_GUESS: f32 = 34.0;
/// Guessed pin row height of a node not laid out yet.
pub const PIN_ROW_GUESS: f32 = 22.0;
/// Pin diameter on the canvas, in graph units.
pub const PIN_SIZE: f32 = 10.0;
/// Wire width on the canvas, in graph units at 1:1.
pub const WIRE_WIDTH: f32 = 2.0;
/// Thinnest wire on screen when zoomed far out, in points.
pub const MIN_WIRE_WIDTH_ON_SCREEN: f32 = 1.0;
/// Node border width when the border shows a state (inspected, failed, run status): whole
/// points wider than the plain border, taken from the node's inner margin.
pub const STATUS_BORDER: f32 = 2.0;
/// How strongly a plain box (zoomed far out) is filled with its state's colour.
pub const BOX_STATE_FILL: f32 = 0.7;
/// How much of its colours a bypassed node keeps.
pub const BYPASSED_OPACITY: f32 = 0.45;

/// egui's bundled fonts, with Hack (the monospace font) last in the proportional family
/// too: Ubuntu-Light has no arrows (`→` in a step line, drawn as a box without it), and so
/// both families draw the same characters.
pub fn fonts() -> egui::FontDefinitions {
    let mut fonts = egui::FontDefinitions::default();
    let monospace = fonts
        .families
        .get(&egui::FontFamily::Monospace)
        .cloned()
        .unwrap_or_default();
    if let Some(proportional) = fonts.families.get_mut(&egui::FontFamily::Proportional) {
        for font in monospace {
            if !proportional.contains(&font) {
                proportional.push(font);
            }
        }
    }
    fonts
}

/// Applies the app's look to egui.
pub fn apply(ctx: &egui::Context) {
    let mut visuals = Visuals::dark();
    visuals.panel_fill = PANEL_BG;
    visuals.window_fill = NODE_BG;
    visuals.extreme_bg_color = CANVAS_BG;
    visuals.override_text_color = Some(TEXT);
    visuals.selection.bg_fill = ACCENT.gamma_multiply(0.6);
    visuals.selection.stroke = Stroke::new(1.5, ACCENT);
    visuals.hyperlink_color = ACCENT;
    visuals.window_corner_radius = CornerRadius::same(6);
    ctx.set_fonts(fonts());
    ctx.options_mut(|o| o.input_options.scroll_zoom_speed = WHEEL_ZOOM_SPEED);
    ctx.set_theme(egui::ThemePreference::Dark);
    ctx.set_visuals_of(egui::Theme::Dark, visuals);
    ctx.all_styles_mut(|style| {
        // Small text stays readable (egui's default is 9 points).
        if let Some(small) = style.text_styles.get_mut(&egui::TextStyle::Small) {
            small.size = small.size.max(MIN_TEXT_POINTS);
        }
        style.spacing.item_spacing = egui::vec2(6.0, 4.0);
        style.spacing.button_padding = egui::vec2(8.0, 3.0);
    });
}

/// The canvas style.
pub fn snarl_style() -> SnarlStyle {
    SnarlStyle {
        node_layout: Some(NodeLayout::coil()),
        pin_placement: Some(PinPlacement::Edge),
        pin_size: Some(PIN_SIZE),
        node_frame: Some(egui::Frame {
            inner_margin: Margin::same(PAD),
            outer_margin: Margin::ZERO,
            corner_radius: CornerRadius::same(6),
            fill: NODE_BG,
            stroke: Stroke::new(1.0, NODE_BORDER),
            shadow: egui::epaint::Shadow::NONE,
        }),
        header_frame: Some(egui::Frame {
            inner_margin: Margin::symmetric(PAD, 4),
            outer_margin: Margin::ZERO,
            corner_radius: CornerRadius {
                nw: 6,
                ne: 6,
                sw: 0,
                se: 0,
            },
            fill: NODE_HEADER_BG,
            stroke: Stroke::NONE,
            shadow: egui::epaint::Shadow::NONE,
        }),
        bg_frame: Some(egui::Frame::NONE.fill(CANVAS_BG)),
        bg_pattern: Some(BackgroundPattern::grid(egui::vec2(32.0, 32.0), 0.0)),
        bg_pattern_stroke: Some(Stroke::new(1.0, GRID)),
        wire_width: Some(WIRE_WIDTH),
        // No collapse triangle: it is one more widget and shape on every node every frame.
        collapsible: Some(false),
        min_scale: Some(MIN_SCALE),
        max_scale: Some(MAX_SCALE),
        centering: Some(true),
        select_stoke: Some(Stroke::new(1.5, ACCENT)),
        select_fill: Some(ACCENT.gamma_multiply(0.12)),
        ..SnarlStyle::new()
    }
}

/// The colour of a port type (pins and wires).
pub fn type_color(ty: &ValueType) -> Color32 {
    match ty {
        ValueType::Any => Color32::from_rgb(0xa0, 0xa6, 0xb2),
        ValueType::Text => Color32::from_rgb(0x6c, 0xc0, 0x8a),
        ValueType::Number | ValueType::Integer => Color32::from_rgb(0x5b, 0x9d, 0xf5),
        ValueType::Bool => Color32::from_rgb(0xe0, 0x7b, 0x9a),
        ValueType::Object => Color32::from_rgb(0xd9, 0xa4, 0x41),
        ValueType::Bytes => Color32::from_rgb(0x9a, 0x7b, 0xd8),
        ValueType::Messages => Color32::from_rgb(0x4f, 0xc6, 0xc6),
        ValueType::Tool => Color32::from_rgb(0xe8, 0x8a, 0x4a),
        ValueType::List(item) => type_color(item),
    }
}

/// The shape of a port type: lists are squares, tools stars, the rest circles.
pub fn type_shape(ty: &ValueType) -> PinShape {
    match ty {
        ValueType::List(_) | ValueType::Messages => PinShape::Square,
        ValueType::Tool => PinShape::Star,
        ValueType::Object => PinShape::Triangle,
        _ => PinShape::Circle,
    }
}

/// The colour of a node status badge.
pub fn status_color(status: NodeStatus) -> Color32 {
    match status {
        NodeStatus::Pending => TEXT_WEAK,
        NodeStatus::Queued => Color32::from_rgb(0xa0, 0xa6, 0xb2),
        NodeStatus::Running => ACCENT,
        NodeStatus::AwaitingApproval | NodeStatus::AtBreakpoint => WARN,
        NodeStatus::Done => OK,
        NodeStatus::Failed => ERROR,
        NodeStatus::Skipped => Color32::from_rgb(0x6a, 0x70, 0x7c),
    }
}

/// The error pin's colour.
pub fn error_pin_color() -> Color32 {
    ERROR
}
