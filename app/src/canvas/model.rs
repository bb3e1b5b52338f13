//! The canvas's plain data, below the modules that draw it: how much of a node is drawn
//! ([`Lod`]) and where it was laid out ([`Geometry`]), the ends of a wire ([`Pin`]), a wire
//! dropped on empty canvas ([`WireDrop`]), the minimap's place on screen, the blocks the
//! palette lists ([`PaletteEntry`], dragged as [`PaletteDrag`], found by [`search_entries`])
//! and how the canvas is viewed ([`ViewPrefs`]). It imports no other canvas module and no
//! panel, so each of them, and the commands, can import it.

use std::path::{Path, PathBuf};

use agentloom_core::PortSpec;
use egui::{Id, Pos2, Rect, Vec2};
use egui_snarl::{InPinId, OutPinId};
use serde::{Deserialize, Serialize};

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

/// One block as the palette lists it, with the ports it has with its default config.
#[derive(Clone, Debug)]
pub struct PaletteEntry {
    pub kind: String,
    pub title: String,
    pub category: String,
    pub description: String,
    pub inputs: Vec<PortSpec>,
    pub outputs: Vec<PortSpec>,
}

/// The payload of a block dragged from the palette.
#[derive(Clone, Debug)]
pub struct PaletteDrag(pub String);

/// How well `needle` matches `text` as a fuzzy search: its characters in order, not
/// necessarily together (`tmpl` finds "template"). Higher is better; `None`: no match.
pub fn fuzzy_score(needle: &str, text: &str) -> Option<i32> {
    let text: Vec<char> = text.to_lowercase().chars().collect();
    let mut score = 0;
    let mut at = 0;
    let mut previous: Option<usize> = None;
    for wanted in needle.to_lowercase().chars().filter(|c| !c.is_whitespace()) {
        let found = text[at..].iter().position(|c| *c == wanted)? + at;
        // Letters together, and letters starting a word, count more.
        if previous.is_some_and(|p| p + 1 == found) {
            score += 3;
        }
        if found == 0 || text[found - 1] == ' ' || text[found - 1] == '.' {
            score += 2;
        }
        score += 1;
        previous = Some(found);
        at = found + 1;
    }
    Some(score)
}

/// The entries matching `query` (fuzzy, on title, kind and description), best first; all
/// of them, in palette order, for an empty query.
pub fn search_entries<'e>(entries: &'e [PaletteEntry], query: &str) -> Vec<&'e PaletteEntry> {
    if query.trim().is_empty() {
        return entries.iter().collect();
    }
    let mut scored: Vec<(i32, usize, &PaletteEntry)> = entries
        .iter()
        .enumerate()
        .filter_map(|(order, entry)| {
            // The name counts over the description, which only has to contain the words.
            let name = fuzzy_score(query, &entry.title)
                .max(fuzzy_score(query, &entry.kind))
                .map(|s| s + 100);
            let described = entry
                .description
                .to_lowercase()
                .contains(&query.trim().to_lowercase())
                .then_some(0);
            name.or(described).map(|score| (score, order, entry))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, entry)| entry).collect()
}

/// The View menu's canvas settings, kept between sessions: the minimap shown or not, and
/// what the plain mouse wheel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewPrefs {
    /// The minimap is shown in the canvas's corner.
    pub minimap: bool,
    /// The plain wheel zooms (as in ComfyUI and n8n) instead of scrolling; Ctrl+wheel
    /// zooms either way.
    pub wheel_zooms: bool,
}

impl Default for ViewPrefs {
    fn default() -> Self {
        ViewPrefs {
            minimap: true,
            wheel_zooms: false,
        }
    }
}

/// The file they are kept in, in the app's data directory.
pub fn prefs_file(data_dir: &Path) -> PathBuf {
    data_dir.join("view.json")
}

impl ViewPrefs {
    /// The settings kept in `file`; the defaults when there are none or they cannot be
    /// read (a damaged file is replaced at the next change).
    pub fn load(file: Option<&Path>) -> Self {
        file.and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    }

    /// Keeps them in `file`; why not, when that fails.
    pub fn save(&self, file: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::fuzzy_score;

    #[test]
    fn fuzzy_matching_takes_letters_in_order_and_prefers_them_together() {
        assert!(fuzzy_score("tmpl", "text.template").is_some());
        assert!(fuzzy_score("lpmt", "text.template").is_none());
        assert!(fuzzy_score("temp", "template") > fuzzy_score("temp", "the mop"));
        assert_eq!(fuzzy_score("", "anything"), Some(0));
    }
}
