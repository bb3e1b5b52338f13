//! How the canvas is viewed: the wheel's zoom in small steps, the setting that makes the
//! plain wheel zoom, and the minimap that can be hidden; both settings kept between
//! sessions; group titles never cut, nor painted over the palette when zoomed. Driven
//! through the real UI (egui_kittest, no window).
#![allow(clippy::unwrap_used, reason = "tests")]

mod support;

use agentloom::app::App;
use egui::accesskit::Role;
use egui::{Modifiers, Pos2, Rect};
use egui_kittest::kittest::{NodeT as _, Queryable as _};
use support::{AppHarness, example, harness, harness_for, paths};

/// The zoom of the canvas: screen points per graph unit.
fn zoom(h: &AppHarness) -> f32 {
    let app = h.state();
    app.graph_to_screen(Pos2::new(1.0, 0.0)).x - app.graph_to_screen(Pos2::ZERO).x
}

/// A point of empty canvas.
fn empty_canvas(h: &AppHarness) -> Pos2 {
    let greeting = h.state().node_screen_rect("greeting").unwrap();
    Pos2::new(greeting.center().x, greeting.bottom() + 60.0)
}

/// Turns the mouse wheel one notch up at `at` with `modifiers` held, and lets the
/// smoothed scroll play out.
fn wheel_notch(h: &mut AppHarness, at: Pos2, modifiers: Modifiers) {
    h.event(egui::Event::PointerMoved(at));
    h.event(egui::Event::ModifiersChanged(modifiers));
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Line,
        delta: egui::vec2(0.0, 1.0),
        phase: egui::TouchPhase::Move,
        modifiers,
    });
    h.run_steps(60);
    h.event(egui::Event::ModifiersChanged(Modifiers::NONE));
    h.run_steps(2);
}

/// Ticks or unticks the View menu's `label`.
fn toggle_in_view_menu(h: &mut AppHarness, label: &str) {
    h.get_by_label("View").click();
    h.run_steps(2);
    h.get_by_role_and_label(Role::CheckBox, label).click();
    h.run_steps(2);
    h.key_press(egui::Key::Escape);
    h.run_steps(2);
}

#[test]
fn ctrl_wheel_zooms_a_tenth_per_notch_about_the_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    let under = h.state().graph_to_screen(Pos2::ZERO);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::COMMAND);
    let ratio = zoom(&h) / before;
    assert!((1.08..1.12).contains(&ratio), "one notch zoomed by {ratio}");
    assert_ne!(h.state().graph_to_screen(Pos2::ZERO), under, "it zoomed");
}

#[test]
fn the_plain_wheel_scrolls_until_set_to_zoom_and_the_setting_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let at = empty_canvas(&h);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::NONE);
    assert!((zoom(&h) - before).abs() < 1e-4, "the plain wheel scrolls");

    toggle_in_view_menu(&mut h, "Zoom with the mouse wheel");
    let before = zoom(&h);
    let origin_before = h.state().graph_to_screen(Pos2::ZERO);
    wheel_notch(&mut h, at, Modifiers::NONE);
    let ratio = zoom(&h) / before;
    assert!(
        (1.08..1.12).contains(&ratio),
        "one plain notch zoomed by {ratio}"
    );
    // About the pointer: the graph point under it stays under it.
    let pointed_before = (at - origin_before) / before;
    let pointed = (at - h.state().graph_to_screen(Pos2::ZERO)) / zoom(&h);
    assert!(
        (pointed - pointed_before).length() < 0.5,
        "the point under the pointer moved: {pointed_before:?} -> {pointed:?}"
    );

    // A new session keeps it.
    drop(h);
    let mut h = harness_for(App::new(&example(), None, &paths(&dir)));
    let at = empty_canvas(&h);
    let before = zoom(&h);
    wheel_notch(&mut h, at, Modifiers::NONE);
    let ratio = zoom(&h) / before;
    assert!(
        (1.08..1.12).contains(&ratio),
        "kept: one plain notch zoomed by {ratio}"
    );
}

#[test]
fn the_minimap_can_be_hidden_and_stays_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    h.get_by_label("Minimap");
    toggle_in_view_menu(&mut h, "Minimap");
    assert!(h.query_by_label("Minimap").is_none(), "hidden");
    drop(h);
    let h = harness_for(App::new(&example(), None, &paths(&dir)));
    assert!(h.query_by_label("Minimap").is_none(), "still hidden");
}

/// The example with the `name` input in a group titled "Inputs and outputs".
fn example_with_group() -> agentloom_core::GraphDoc {
    let mut doc = example();
    let name = doc.node("name").unwrap().position;
    doc.groups.push(agentloom_core::GroupDoc {
        id: "g".to_owned(),
        title: "Inputs and outputs".to_owned(),
        rect: [name[0] - 24.0, name[1] - 64.0, 250.0, 190.0],
    });
    doc
}

/// Gives block `id` a long value on its `value` output, as a finished run shows it.
fn show_a_long_value(h: &mut AppHarness, id: &str) {
    let long = "a value far longer than any node is wide ".repeat(20);
    let run = h.state_mut().run.nodes.entry(id.to_owned()).or_default();
    run.status = agentloom_engine::NodeStatus::Done;
    run.outputs
        .insert("value".to_owned(), agentloom_core::Value::text(long));
    h.run_steps(10);
}

#[test]
fn a_group_frames_its_blocks_as_their_badges_come_and_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    // Grouped while a run's values make the block tall.
    show_a_long_value(&mut h, "name");
    let tall = h.state().node_screen_rect("name").unwrap();
    h.state_mut()
        .send(agentloom::app::Command::InspectById("name".to_owned()));
    h.run_steps(3);
    support::keys(&mut h, Modifiers::COMMAND, egui::Key::G);
    h.run_steps(3);
    let group = h.state().document.to_doc().groups[0].id.clone();
    let framed = h.state().group_screen_rect(&group).unwrap();
    assert!(framed.contains_rect(tall), "{tall:?} in {framed:?}");

    // The values go: the block shrinks, and its frame with it.
    h.state_mut().run.nodes.clear();
    h.run_steps(10);
    let short = h.state().node_screen_rect("name").unwrap();
    let after = h.state().group_screen_rect(&group).unwrap();
    let shrunk = tall.height() - short.height();
    assert!(shrunk > 10.0, "the block shrank by {shrunk}");
    assert!(
        (framed.height() - after.height() - shrunk).abs() < 1.0,
        "the group went from {} to {} high while its block shrank by {shrunk}",
        framed.height(),
        after.height()
    );

    // They come back: the frame grows with the block.
    show_a_long_value(&mut h, "name");
    let name = h.state().node_screen_rect("name").unwrap();
    let grown = h.state().group_screen_rect(&group).unwrap();
    assert!(grown.contains_rect(name), "{name:?} runs out of {grown:?}");
}

#[test]
fn a_group_title_is_never_cut_however_far_out_the_view_is() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example_with_group(), &paths(&dir));
    for _ in 0..3 {
        h.state_mut().send(agentloom::app::Command::Zoom(0.6));
        h.run_steps(3);
        let field = h
            .get_by_role_and_label(Role::TextInput, "Group title")
            .rect();
        let font = h.ctx.style_of(egui::Theme::Dark).text_styles[&egui::TextStyle::Heading].clone();
        let needed = h.ctx.fonts_mut(|f| {
            f.layout_no_wrap("Inputs and outputs".to_owned(), font, egui::Color32::WHITE)
                .size()
                .x
        });
        assert!(
            field.width() >= needed,
            "the title field is {} wide for a title {needed} wide",
            field.width()
        );
    }
}

/// Where the texts painted in the last frame that read `text` show: each text's rectangle
/// cut to its clip rectangle (empty when it is clipped away).
fn painted_texts(h: &AppHarness, text: &str) -> Vec<egui::Rect> {
    h.output()
        .shapes
        .iter()
        .filter_map(|clipped| match &clipped.shape {
            egui::Shape::Text(shape) if shape.galley.text() == text => {
                Some(shape.visual_bounding_rect().intersect(clipped.clip_rect))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_group_title_bar_is_never_painted_over_the_palette_when_zoomed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example_with_group(), &paths(&dir));
    let canvas = h.state().canvas_screen_rect();
    // Zoomed in with the pointer right of the group (Ctrl+wheel) until the group reaches
    // under the palette, its title bar starting there.
    let mut straddles = false;
    for _ in 0..20 {
        let frame = h.state().group_screen_rect("g").unwrap();
        if frame.left() + 40.0 < canvas.left() && frame.right() > canvas.left() + 40.0 {
            straddles = true;
            break;
        }
        let at = Pos2::new(frame.right() + 150.0, frame.center().y);
        wheel_notch(&mut h, at, Modifiers::COMMAND);
    }
    assert!(straddles, "the group never reached under the palette");
    h.run_steps(2);
    for text in ["Move", "Inputs and outputs", "×"] {
        // Not painted at all is fine: wholly under the palette, it is clipped away.
        for rect in painted_texts(&h, text) {
            assert!(
                !rect.is_positive() || rect.left() >= canvas.left() - 0.5,
                "`{text}` of the group's title bar is painted at {rect:?}, over the palette \
                 (the canvas starts at x = {})",
                canvas.left()
            );
        }
    }
    // What shows of it is on the canvas.
    assert!(
        painted_texts(&h, "Inputs and outputs")
            .iter()
            .any(|r| r.is_positive() && canvas.contains_rect(*r)),
        "the title is not shown on the canvas"
    );
}

/// Drags the palette's `block` button to `to` without letting go.
fn drag_from_palette(h: &mut AppHarness, block: &str, to: Pos2) {
    let from = h.get_by_role_and_label(Role::Button, block).rect().center();
    h.event(egui::Event::PointerMoved(from));
    h.event(egui::Event::PointerButton {
        pos: from,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    h.step();
    for i in 1..=12 {
        let t = i as f32 / 12.0;
        h.event(egui::Event::PointerMoved(from + (to - from) * t));
        h.step();
    }
    h.run_steps(2);
}

#[test]
fn a_block_dragged_from_the_palette_shows_where_it_will_be_placed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let to = empty_canvas(&h);
    drag_from_palette(&mut h, "Delay", to);
    let ghost = h.get_by_label("Placing Delay").rect();
    assert!(
        ghost.min.distance(to) < 16.0,
        "the ghost {ghost:?} is not at the pointer {to:?}"
    );
    assert!(ghost.width() > 40.0 && ghost.height() > 20.0, "{ghost:?}");

    h.event(egui::Event::PointerButton {
        pos: to,
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: Modifiers::NONE,
    });
    h.run_steps(3);
    assert!(
        h.query_by_label("Placing Delay").is_none(),
        "gone once dropped"
    );
    let placed = h.state().node_screen_rect("delay").unwrap();
    assert!(
        placed.min.distance(ghost.min) < 2.0,
        "placed at {placed:?}, shown at {ghost:?}"
    );
}

/// The glyph quads (screen rectangle, texel rectangle in the font atlas) of the texts reading
/// `text` that the last frame painted, left to right, as the renderer is handed them.
fn glyph_quads(h: &AppHarness, text: &str) -> Vec<Vec<(egui::Rect, egui::Rect)>> {
    let ppp = h.ctx.pixels_per_point();
    let [width, height] = h.ctx.fonts(|f| f.font_image_size());
    #[allow(
        clippy::cast_precision_loss,
        reason = "an atlas is a few thousand texels"
    )]
    let atlas = egui::vec2(width as f32, height as f32);
    h.output()
        .shapes
        .iter()
        .filter(|clipped| matches!(&clipped.shape, egui::Shape::Text(t) if t.galley.text() == text))
        .map(|clipped| {
            let primitives = h.ctx.tessellate(vec![clipped.clone()], ppp);
            let mut quads: Vec<(egui::Rect, egui::Rect)> = primitives
                .iter()
                .filter_map(|p| match &p.primitive {
                    egui::epaint::Primitive::Mesh(mesh) => Some(mesh),
                    egui::epaint::Primitive::Callback(_) => None,
                })
                .flat_map(|mesh| {
                    mesh.vertices.chunks_exact(4).map(|quad| {
                        let screen = egui::Rect::from_points(
                            &quad.iter().map(|v| v.pos).collect::<Vec<_>>(),
                        );
                        let texels = egui::Rect::from_points(
                            &quad
                                .iter()
                                .map(|v| (v.uv.to_vec2() * atlas).to_pos2())
                                .collect::<Vec<_>>(),
                        );
                        (screen, texels)
                    })
                })
                .filter(|(_, texels)| texels.width() > 0.0)
                .collect();
            quads.sort_by(|a, b| a.0.left().total_cmp(&b.0.left()));
            quads
        })
        .collect()
}

/// Where the pixels of a glyph's quad sample the font atlas: each pixel centre inside it, as
/// a texel column.
fn sampled_columns(screen: egui::Rect, texels: egui::Rect) -> Vec<f32> {
    let per_pixel = texels.width() / screen.width();
    let mut samples = Vec::new();
    let mut centre = (screen.left() - 0.5).ceil() + 0.5;
    while centre < screen.right() {
        samples.push(texels.left() + (centre - screen.left()) * per_pixel);
        centre += 1.0;
    }
    samples
}

/// The columns of a glyph's texels (in the font atlas) that hold ink but that no pixel of
/// its quad samples: a renderer sampling the atlas linearly at each pixel's centre reaches
/// a column only from a centre less than one texel from the column's middle.
fn unsampled_ink_columns(h: &AppHarness, screen: egui::Rect, texels: egui::Rect) -> Vec<i32> {
    let image = h.ctx.fonts(|f| f.image());
    let ink = |column: i32| {
        #[allow(clippy::cast_possible_truncation, reason = "texel indices")]
        let (top, bottom) = (texels.top().floor() as i32, texels.bottom().ceil() as i32);
        (top..bottom)
            .filter_map(|row| {
                let (x, y) = (usize::try_from(column).ok()?, usize::try_from(row).ok()?);
                (x < image.width() && y < image.height()).then(|| image[(x, y)].a())
            })
            .map(u32::from)
            .sum::<u32>()
            > 128
    };
    let centres = sampled_columns(screen, texels);
    #[allow(clippy::cast_possible_truncation, reason = "texel indices")]
    let columns = texels.left().floor() as i32..texels.right().ceil() as i32;
    columns
        .filter(|&column| ink(column))
        .filter(|&column| {
            #[allow(clippy::cast_precision_loss, reason = "texel indices")]
            let middle = column as f32 + 0.5;
            centres.iter().all(|u| (u - middle).abs() >= 1.0)
        })
        .collect()
}

#[test]
fn at_small_zoom_no_letter_of_a_title_or_pin_name_loses_its_edge() {
    let dir = tempfile::tempdir().unwrap();
    let doc = support::graph(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../assets/examples/pipeline.agentloom.json"
        ))
        .unwrap(),
    );
    let mut h = harness(&doc, &paths(&dir));
    for target in [0.56, 0.58, 0.60, 0.63] {
        let factor = target / zoom(&h);
        h.state_mut().send(agentloom::app::Command::Zoom(factor));
        h.run_steps(5);
        let at = zoom(&h);
        assert!((at - target).abs() < 0.005, "zoomed to {at}");
        // Titles and the names of left-hand pins, which start at the node's left.
        for text in ["people", "pause", "Unreachable service", "items", "body"] {
            let painted = glyph_quads(&h, text);
            assert!(!painted.is_empty(), "`{text}` not painted at {at}");
            for quads in painted {
                for (i, (screen, texels)) in quads.iter().enumerate() {
                    let lost = unsampled_ink_columns(&h, *screen, *texels);
                    assert!(
                        lost.is_empty(),
                        "at zoom {at}, letter {i} of `{text}` (quad {screen:?}, texels \
                         {texels:?}) loses its inked atlas columns {lost:?}"
                    );
                    // Nor does it take ink from the glyph beside it in the atlas: a sample
                    // blends the two columns around it, both within the quad's texels.
                    for u in sampled_columns(*screen, *texels) {
                        let blended = [(u - 0.5).floor(), (u - 0.5).floor() + 1.0];
                        assert!(
                            blended[0] >= texels.left().floor() - 1e-3
                                && blended[1] < texels.right().ceil() + 1e-3,
                            "at zoom {at}, letter {i} of `{text}` samples texels {blended:?} \
                             beyond its own {texels:?}"
                        );
                    }
                }
            }
        }
    }
}

/// The texts shown inside `area`.
fn labels_inside(h: &AppHarness, area: Rect) -> Vec<String> {
    h.query_all_by_role(Role::Label)
        .filter(|n| area.contains_rect(n.rect()))
        .filter_map(|n| n.accesskit_node().value().or(n.accesskit_node().label()))
        .collect()
}

#[test]
fn the_palette_ghost_shows_the_data_pins_a_placed_block_shows_and_no_error_or_tool_pin() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness(&example(), &paths(&dir));
    let to = empty_canvas(&h);
    drag_from_palette(&mut h, "Delay", to);
    let ghost = h.get_by_label("Placing Delay").rect();
    let shown = labels_inside(&h, ghost);
    // Delay's input and output, both named `value`, as a placed Delay shows them.
    assert_eq!(
        shown.iter().filter(|t| *t == "value").count(),
        2,
        "the ghost shows {shown:?}"
    );
    assert!(
        !shown.iter().any(|t| t == "error" || t == "tool"),
        "the ghost shows {shown:?}"
    );
}
