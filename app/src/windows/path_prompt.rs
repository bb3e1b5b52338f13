//! The in-app file prompt: where no native file dialog can appear (a desktop without an xdg
//! portal that offers a file chooser and without zenity), Open, Save As, Import and Export ask for a path in a small
//! window instead of doing nothing.

use std::path::PathBuf;

use egui::RichText;

use crate::Command;
use crate::theme;

/// What the typed path is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathPurpose {
    Open,
    Import,
    SaveAs,
    Export,
    /// The cases file a past run is added to (History → Add to cases).
    AddToCases,
}

impl PathPurpose {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Self::Open => "Open graph",
            Self::Import => "Import graph",
            Self::SaveAs => "Save graph",
            Self::Export => "Export graph",
            Self::AddToCases => "Add to cases",
        }
    }

    fn action(self) -> &'static str {
        match self {
            Self::Open => "Open",
            Self::Import => "Import",
            Self::SaveAs => "Save",
            Self::Export => "Export",
            Self::AddToCases => "Add",
        }
    }

    pub(crate) fn command(self, path: PathBuf) -> Command {
        match self {
            Self::Open => Command::Open(path),
            Self::Import => Command::Import(path),
            Self::SaveAs => Command::SaveAs(path),
            Self::Export => Command::Export(path),
            Self::AddToCases => Command::AddCaseTo(path),
        }
    }
}

/// The prompt, while it is open.
pub struct PathPrompt {
    purpose: PathPurpose,
    text: String,
    focus: bool,
    /// What asked for the path and goes on once it is given (not on Cancel): what a
    /// "Save changes?" prompt held when the graph had no file yet.
    then: Option<Command>,
}

impl PathPrompt {
    /// A prompt for `purpose`, starting from `suggested`.
    pub fn new(purpose: PathPurpose, suggested: String) -> Self {
        Self {
            purpose,
            text: suggested,
            focus: true,
            then: None,
        }
    }

    /// The prompt, with `then` carried out after its own command once a path is given.
    #[must_use]
    pub fn then(mut self, then: Option<Command>) -> Self {
        self.then = then;
        self
    }
}

/// `~/…` in the user's home directory; anything else as typed.
fn expand_home(typed: &str) -> PathBuf {
    let typed = typed.trim();
    if let Some(rest) = typed.strip_prefix("~/")
        && let Some(dirs) = directories::BaseDirs::new()
    {
        return dirs.home_dir().join(rest);
    }
    PathBuf::from(typed)
}

/// Shows the prompt; closes it (sets `prompt` to `None`) on confirm or cancel.
pub fn path_prompt_ui(
    ctx: &egui::Context,
    prompt: &mut Option<PathPrompt>,
    commands: &mut Vec<Command>,
) {
    let Some(state) = prompt else {
        return;
    };
    let mut open = true;
    let mut done = false;
    egui::Window::new(state.purpose.title())
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, egui::Vec2::ZERO)
        .open(&mut open)
        .show(ctx, |ui| {
            ui.set_max_width(420.0);
            let why = match state.purpose {
                PathPurpose::AddToCases => {
                    "The JSON Lines cases file to add the run to (made when missing):"
                }
                _ => {
                    "No file dialog is available on this desktop (it needs the xdg desktop \
                     portal with a file chooser, such as xdg-desktop-portal-gtk, or zenity). \
                     Type the file's path:"
                }
            };
            ui.label(RichText::new(why).color(theme::TEXT_WEAK));
            let label = ui.label("Path");
            let field = ui
                .add(egui::TextEdit::singleline(&mut state.text).desired_width(400.0))
                .labelled_by(label.id);
            if std::mem::take(&mut state.focus) {
                field.request_focus();
            }
            let entered = field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter));
            ui.horizontal(|ui| {
                let typed = !state.text.trim().is_empty();
                let confirm = ui.add_enabled(typed, egui::Button::new(state.purpose.action()));
                if typed && (confirm.clicked() || entered) {
                    commands.push(state.purpose.command(expand_home(&state.text)));
                    // Unsaved still (the write failed), it asks "Save changes?" again.
                    commands.extend(state.then.take());
                    done = true;
                }
                if ui.button("Cancel").clicked() || ui.input(|i| i.key_pressed(egui::Key::Escape)) {
                    done = true;
                }
            });
        });
    if done || !open {
        *prompt = None;
    }
}

#[cfg(test)]
mod tests {
    use super::expand_home;

    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf());
        if let Some(home) = home {
            assert_eq!(expand_home(" ~/g.json "), home.join("g.json"));
        }
        assert_eq!(
            expand_home("/tmp/~/g.json"),
            std::path::PathBuf::from("/tmp/~/g.json")
        );
    }
}
