//! The canvas: the egui-snarl viewer of the graph, what it remembers between frames, wires
//! being dragged, groups, the minimap, quick add, the wire menu and the View settings; below
//! them all, the plain data they share (`model`).

mod area;
pub mod breakpoints;
mod ghost;
mod glyphs;
pub mod groups;
pub mod minimap;
pub mod model;
pub mod quick_add;
pub(crate) mod session;
mod state;
mod viewer;
pub mod wire_drop;
pub mod wire_menu;
pub mod wiring;

pub use state::CanvasState;
