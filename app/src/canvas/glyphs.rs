//! Text inside nodes that keeps every letter whole when the canvas is zoomed out.
//!
//! The canvas layer is scaled, and so is each glyph's quad; the renderer samples the font
//! atlas only at pixel centres inside a quad. Below 100 % a quad can start just past a pixel
//! centre, and the atlas column at the glyph's edge (the stem of a `p`, `b` or `U`) is then
//! sampled by no pixel: at 56–63 % the first letter of a title read "ɔeople". Widening each
//! quad by half an atlas texel on every side brings the edge column within reach of a pixel
//! down to 50 %; the atlas keeps a transparent texel between glyphs, so a sample that far
//! out blends that gap and never the neighbouring glyph (a whole texel would).

use std::sync::Arc;

use egui::{Galley, TextWrapMode, Ui, WidgetText};

/// `text` laid out for a node on a canvas drawn at `scale`: its glyph quads widened by half
/// a texel where the canvas shrinks it, as it is otherwise.
pub(super) fn node_text(ui: &Ui, text: impl Into<WidgetText>, scale: f32) -> WidgetText {
    let text = text.into();
    if scale >= 1.0 {
        return text;
    }
    let mut galley = text.into_galley(
        ui,
        Some(TextWrapMode::Extend),
        f32::INFINITY,
        egui::TextStyle::Body,
    );
    let atlas = ui.ctx().fonts(|f| f.font_image_size());
    pad_glyphs(Arc::make_mut(&mut galley), atlas);
    WidgetText::Galley(galley)
}

/// How far a glyph's quad is widened on each side, in texels of the font atlas.
const PAD_TEXELS: f32 = 0.5;

/// Widens every glyph quad of `galley` by [`PAD_TEXELS`] of the font atlas (of size
/// `atlas`) on each side that has a texel to spare.
fn pad_glyphs(galley: &mut Galley, atlas: [usize; 2]) {
    // The pad in points: glyphs are drawn at the galley's pixels per point.
    let pad = PAD_TEXELS / galley.pixels_per_point;
    #[allow(
        clippy::cast_precision_loss,
        reason = "an atlas is a few thousand texels"
    )]
    let (width, height) = (atlas[0] as f32, atlas[1] as f32);
    for placed in &mut galley.rows {
        let row = Arc::make_mut(&mut placed.row);
        let visuals = &mut row.visuals;
        let range = visuals.glyph_vertex_range.clone();
        let Some(vertices) = visuals.mesh.vertices.get_mut(range) else {
            continue;
        };
        // Each glyph is a quad: left top, right top, left bottom, right bottom.
        for quad in vertices.chunks_exact_mut(4) {
            let (uv_min, uv_max) = (quad[0].uv, quad[3].uv);
            let left = if uv_min.x >= 1.0 { 1.0 } else { 0.0 };
            let top = if uv_min.y >= 1.0 { 1.0 } else { 0.0 };
            let right = if uv_max.x + 1.0 <= width { 1.0 } else { 0.0 };
            let bottom = if uv_max.y + 1.0 <= height { 1.0 } else { 0.0 };
            for (corner, vertex) in quad.iter_mut().enumerate() {
                let dx = if corner % 2 == 0 { -left } else { right };
                let dy = if corner < 2 { -top } else { bottom };
                vertex.pos += egui::vec2(dx, dy) * pad;
                vertex.uv += egui::vec2(dx, dy) * PAD_TEXELS;
            }
        }
        visuals.mesh_bounds = visuals.mesh_bounds.expand(pad);
    }
    galley.mesh_bounds = galley.mesh_bounds.expand(pad);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn each_glyph_quad_grows_by_half_a_texel_on_each_side_inside_the_atlas() {
        let ctx = egui::Context::default();
        let mut laid_out = None;
        let mut output = ctx.run_ui(egui::RawInput::default(), |ui| {
            laid_out = Some(WidgetText::from("people").into_galley(
                ui,
                None,
                f32::INFINITY,
                egui::TextStyle::Body,
            ));
        });
        // No renderer takes the font atlas here.
        output.textures_delta.clear();
        let before = laid_out.unwrap();
        let mut after = (*before).clone();
        pad_glyphs(&mut after, [4096, 4096]);
        let quads = |g: &Galley| -> Vec<egui::epaint::Vertex> {
            let row = &g.rows[0].row;
            row.visuals.mesh.vertices[row.visuals.glyph_vertex_range.clone()].to_vec()
        };
        let (old, new) = (quads(&before), quads(&after));
        assert_eq!(old.len(), new.len());
        assert!(!old.is_empty());
        let pad = PAD_TEXELS / before.pixels_per_point;
        for (o, n) in old.chunks_exact(4).zip(new.chunks_exact(4)) {
            // Every corner moves half a texel outwards, but for the atlas's top and left
            // edges (its first row of glyphs starts at its top).
            let outwards = |first: bool, at_edge: bool| match (first, at_edge) {
                (true, true) => 0.0,
                (true, false) => -PAD_TEXELS,
                (false, _) => PAD_TEXELS,
            };
            for corner in 0..4 {
                let d = egui::vec2(
                    outwards(corner % 2 == 0, o[0].uv.x < 1.0),
                    outwards(corner < 2, o[0].uv.y < 1.0),
                );
                assert_eq!(n[corner].uv - o[corner].uv, d, "corner {corner}");
                let moved = n[corner].pos - o[corner].pos;
                assert!(
                    (moved - d / PAD_TEXELS * pad).length() < 1e-4,
                    "corner {corner}: {moved:?}"
                );
            }
        }
    }
}
