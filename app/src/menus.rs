//! The menu bar and the keyboard shortcuts, both made from [`menu_commands`].

use std::path::PathBuf;

use agentloom_core::GraphDoc;
use egui::{Key, Modifiers, RichText};

use super::command::{Command, Keys, Menu, REDO_Y, menu_commands};
use super::{App, theme};

impl App {
    /// Whether the menus offer `command` now.
    fn enabled(&self, command: &Command) -> bool {
        match command {
            Command::Undo => self.document.can_undo(),
            Command::Redo => self.document.can_redo(),
            Command::Copy(nodes)
            | Command::DuplicateNodes(nodes)
            | Command::DeleteNodes(nodes)
            | Command::ToggleBypass(nodes) => !nodes.is_empty(),
            Command::Paste => self.session.clipboard.is_some(),
            Command::Run => !self.run.is_running(),
            Command::StopRun => self.run.is_running(),
            _ => true,
        }
    }

    /// One menu button of the menu bar for `command`.
    fn menu_item(&mut self, ui: &mut egui::Ui, command: Command) {
        let Some(entry) = command.menu_entry() else {
            return;
        };
        let mut button = egui::Button::new(entry.label);
        if let Some(shortcut) = entry.shortcut {
            button = button.shortcut_text(ui.ctx().format_shortcut(&shortcut));
        }
        if ui.add_enabled(self.enabled(&command), button).clicked() {
            self.commands.push(command);
            ui.close();
        }
    }

    /// A toolbar button for `command`, its shortcut on hover.
    fn tool_button(
        &mut self,
        ui: &mut egui::Ui,
        text: impl Into<egui::WidgetText>,
        command: Command,
    ) {
        let hover = command
            .shortcut()
            .map(|s| ui.ctx().format_shortcut(&s))
            .unwrap_or_default();
        if ui
            .add_enabled(self.enabled(&command), egui::Button::new(text))
            .on_hover_text(hover)
            .clicked()
        {
            self.commands.push(command);
        }
    }

    pub(super) fn menu_ui(&mut self, ui: &mut egui::Ui) {
        let selected = self.targets(ui.ctx());
        egui::MenuBar::new().ui(ui, |ui| {
            for menu in Menu::ALL {
                ui.menu_button(menu.title(), |ui| {
                    for command in menu_commands(&selected) {
                        if command.menu_entry().is_some_and(|e| e.menu == menu) {
                            self.menu_item(ui, command);
                        }
                    }
                    if menu == Menu::Run {
                        self.run_menu_extras(ui);
                    }
                    if menu == Menu::View {
                        self.view_menu_extras(ui);
                    }
                });
            }
            ui.separator();
            self.tool_button(ui, RichText::new("▶ Run").color(theme::OK), Command::Run);
            self.tool_button(ui, "■ Stop", Command::StopRun);
            self.safe_mode_indicator(ui);
            ui.separator();
            self.tool_button(ui, "Undo", Command::Undo);
            self.tool_button(ui, "Redo", Command::Redo);
            ui.separator();
            let file = self
                .document
                .path
                .as_ref()
                .and_then(|p| p.file_name())
                .map_or_else(
                    || "not saved".to_owned(),
                    |n| n.to_string_lossy().into_owned(),
                );
            let dirty = if self.document.dirty { " •" } else { "" };
            ui.label(
                RichText::new(format!("{} — {file}{dirty}", self.document.name))
                    .color(theme::TEXT_WEAK),
            );
        });
    }

    /// While safe mode is on, a toolbar button that says so; clicking it turns it off.
    fn safe_mode_indicator(&mut self, ui: &mut egui::Ui) {
        if !self.document.settings.safe_mode {
            // An untrusted file's runs are in safe mode whatever the setting says.
            if self.untrusted.is_some() {
                ui.label(RichText::new("Safe mode (untrusted file)").color(theme::WARN))
                    .on_hover_text(
                        "This file is not trusted: its runs ask before blocks with side \
                         effects, whatever the Run menu says. Trust the file to change that.",
                    );
            }
            return;
        }
        let button = egui::Button::new(RichText::new("Safe mode").color(theme::WARN))
            .stroke(egui::Stroke::new(1.0, theme::WARN));
        if ui
            .add(button)
            .on_hover_text(
                "Safe mode is on: blocks with side effects ask before they run. \
                 Click to turn it off (Run menu to turn it on again).",
            )
            .clicked()
        {
            self.commands.push(Command::SetSafeMode(false));
        }
    }

    /// Safe mode and where file blocks work, under Run and Stop.
    fn run_menu_extras(&mut self, ui: &mut egui::Ui) {
        ui.separator();
        let mut safe = self.document.settings.safe_mode;
        if ui
            .checkbox(&mut safe, "Safe mode")
            .on_hover_text(
                "Ask before running blocks with side effects (writing files, sending \
                 mail, calling APIs that change things). Saved with the graph.",
            )
            .changed()
        {
            self.commands.push(Command::SetSafeMode(safe));
        }
        ui.separator();
        ui.label(
            RichText::new(format!(
                "File blocks work in {}",
                self.run_workspace().display()
            ))
            .small()
            .color(theme::TEXT_WEAK),
        );
    }

    fn view_menu_extras(&mut self, ui: &mut egui::Ui) {
        ui.separator();
        let mut prefs = self.canvas.prefs;
        ui.checkbox(&mut prefs.minimap, "Minimap")
            .on_hover_text("The overview of the graph in the canvas's corner");
        ui.checkbox(&mut prefs.wheel_zooms, "Zoom with the mouse wheel")
            .on_hover_text(
                "The wheel zooms and Shift+wheel scrolls, as in ComfyUI and n8n; Ctrl+wheel \
                 zooms either way",
            );
        if prefs != self.canvas.prefs {
            self.commands.push(Command::SetViewPrefs(prefs));
        }
    }

    /// Whether a dialog or window of the app is open: keys then belong to it, also where
    /// its fields are disabled and so never take the keyboard.
    fn dialog_open(&self) -> bool {
        self.credentials.open
            || self.windows.mcp.open
            || self.prompts.examples_open
            || self.path_prompt.is_some()
            || self.evaluations.open
            || self.run_setup.form.open
            || self.close_prompt_open()
            || self.session.wire_menu.is_some()
            || self.canvas.wire_drop.is_some()
            || self.prompts.quick_add.is_some()
    }

    /// Whether the canvas has the keyboard: no widget has it (a field, or a button reached
    /// with Tab), no dialog, menu or popup is open, and the pointer is over no window (the
    /// approval window stays open beside the canvas).
    fn canvas_has_keys(&self, ctx: &egui::Context) -> bool {
        !ctx.egui_wants_keyboard_input()
            && !egui::Popup::is_any_open(ctx)
            && !self.dialog_open()
            && !self.pointer_over_window(ctx)
    }

    /// Turns the frame's key presses, clipboard events and dropped files into commands.
    /// The canvas's keys (Delete, F, Space, Ctrl+D…) act only while the canvas has the
    /// keyboard, so that nothing typed in a dialog or field reaches the graph.
    pub(super) fn shortcuts(&mut self, ctx: &egui::Context) {
        let canvas_keys = self.canvas_has_keys(ctx);
        let selected = self.targets(ctx);
        let mut keyed: Vec<(egui::KeyboardShortcut, Command)> = menu_commands(&selected)
            .into_iter()
            .filter(|c| match c.keys() {
                Keys::Always => true,
                Keys::Canvas => canvas_keys,
                Keys::Own => false,
            })
            .filter_map(|c| Some((c.shortcut()?, c)))
            .collect();
        if canvas_keys {
            keyed.push((REDO_Y, Command::Redo));
        }
        // Shortcuts with more modifiers first: Ctrl+Z would also match Ctrl+Shift+Z.
        keyed.sort_by_key(|(s, _)| std::cmp::Reverse(modifier_count(s.modifiers)));
        let mut found = Vec::new();
        let canvas_rect = self.canvas.screen_rect;
        ctx.input_mut(|i| {
            for (shortcut, command) in keyed {
                if i.consume_shortcut(&shortcut) {
                    found.push(command);
                }
            }
            if !canvas_keys {
                return;
            }
            if i.key_pressed(Key::Delete) || i.key_pressed(Key::Backspace) {
                found.push(match self.session.selected_wire {
                    Some((from, to)) if selected.is_empty() => Command::DeleteWire(from, to),
                    _ => Command::DeleteNodes(selected.clone()),
                });
            }
            if i.key_pressed(Key::Escape) {
                found.push(Command::ClearSelection);
            }
            // Space or Tab over the canvas: quick add at the pointer.
            if let Some(pointer) = i.pointer.hover_pos()
                && canvas_rect.contains(pointer)
                && (i.consume_key(Modifiers::NONE, Key::Space)
                    || i.consume_key(Modifiers::NONE, Key::Tab))
            {
                found.push(Command::QuickAdd(pointer));
            }
            // Copy and paste arrive as events, not key presses.
            for event in &i.events {
                match event {
                    egui::Event::Copy | egui::Event::Cut => {
                        found.push(Command::Copy(selected.clone()));
                    }
                    egui::Event::Paste(text) => {
                        if let Ok(doc) = GraphDoc::from_json_str(text) {
                            self.session.clipboard = Some(doc);
                        }
                        found.push(Command::Paste);
                    }
                    _ => {}
                }
            }
        });
        // A graph file dropped on the window opens it.
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        });
        found.extend(dropped.into_iter().map(Command::Open));
        self.commands.extend(found);
    }
}

fn modifier_count(m: Modifiers) -> u8 {
    u8::from(m.alt) + u8::from(m.ctrl) + u8::from(m.shift) + u8::from(m.command || m.mac_cmd)
}
