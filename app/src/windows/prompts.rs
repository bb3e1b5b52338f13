//! The small windows that ask the person something, and what they wait on: "save
//! changes?", the examples gallery, the quick-add search, and whether file dialogs are the
//! platform's.

use crate::Command;
use crate::canvas::quick_add::QuickAdd;

/// The app's prompts.
#[derive(Default)]
pub(crate) struct Prompts {
    /// "Save changes?" is asked before the window closes.
    pub(crate) close: bool,
    /// What waits for an answer to "save changes?" before it replaces the graph.
    pub(crate) discard: Option<Command>,
    /// The window may close now (the person answered).
    pub(crate) allow_close: bool,
    /// Whether native file dialogs can appear here: found out in the background as the app
    /// starts, or on first use if that has not answered yet.
    pub(crate) native_dialogs: Option<bool>,
    /// Finding that out, in the background.
    pub(crate) finding_dialogs: Option<crate::tasks::Task>,
    /// The quick-add search, when open.
    pub(crate) quick_add: Option<QuickAdd>,
    /// The examples gallery is showing.
    pub(crate) examples_open: bool,
}
