//! File → MCP servers…: the graph's MCP servers, to add (a stdio command or an HTTP URL,
//! with an optional credential name) and remove. Their tools appear in the palette as blocks
//! once connected; connecting is a background task of the app (see [`crate::tasks`]), so a
//! slow or unreachable server never holds up the window.

use agentloom_runner::Trust;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_core::{GraphDoc, McpServerDoc, Problem, SecretSource};

use crate::command::McpEdit;
use crate::tasks::{BackgroundTasks, Report, Task};

/// Connects to the graph's MCP servers in the background and hands back the catalog with
/// their tools (and `graph.call` resolving against the graph's file).
#[derive(Default)]
pub struct McpConnector {
    /// What the app's catalog was built for.
    connected: CatalogFor,
    pending: Option<PendingConnection>,
}

/// What a catalog depends on: the MCP servers whose tools it holds, the graph file
/// `graph.call` paths are relative to, and whether that file is trusted (an untrusted one
/// connects to no server and calls no file outside its folder).
#[derive(Clone, Debug, Default, PartialEq)]
struct CatalogFor {
    servers: BTreeMap<String, McpServerDoc>,
    graph_file: Option<PathBuf>,
    trusted: bool,
}

impl CatalogFor {
    fn builtin(&self) -> Registry {
        let file = self.graph_file.as_deref();
        agentloom_runner::catalog::for_editing(file, &Trust::of(self.trusted, file))
    }
}

struct PendingConnection {
    wanted: CatalogFor,
    /// Dropped when the app wants other servers: what it would connect is not wanted.
    _task: Task,
}

/// A finished connection: the built-in blocks plus the servers' tools.
pub struct Connected {
    pub catalog: Registry,
    pub problems: Vec<Problem>,
}

impl McpConnector {
    /// A connector whose catalog is the built-in blocks for a graph in `graph_file`.
    pub fn for_graph_file(graph_file: Option<PathBuf>, trusted: bool) -> Self {
        Self {
            connected: CatalogFor {
                servers: BTreeMap::new(),
                graph_file,
                trusted,
            },
            pending: None,
        }
    }

    /// Starts connecting to the servers `doc` names, unless the catalog has (or is getting)
    /// exactly those for `graph_file`. Without servers, or for a file that is not
    /// `trusted` (whose servers are never connected), there is nothing to wait for: the
    /// new catalog is returned at once.
    pub fn connect(
        &mut self,
        tasks: &mut BackgroundTasks,
        doc: &GraphDoc,
        graph_file: Option<&Path>,
        trusted: bool,
        secrets: impl FnOnce() -> Arc<dyn SecretSource>,
    ) -> Option<Connected> {
        let wanted = CatalogFor {
            servers: doc.mcp_servers.clone(),
            graph_file: graph_file.map(Path::to_path_buf),
            trusted,
        };
        if wanted == self.connected {
            // Back to what is connected (an undo while connecting): that connection is moot.
            self.pending = None;
            return None;
        }
        if self.pending.as_ref().is_some_and(|p| p.wanted == wanted) {
            return None;
        }
        if wanted.servers.is_empty() || !trusted {
            self.pending = None;
            let catalog = wanted.builtin();
            let problems = match (&wanted.graph_file, trusted) {
                (Some(file), false) => {
                    agentloom_runner::launch::untrusted_problems(doc, Some(file))
                }
                _ => Vec::new(),
            };
            self.connected = wanted;
            return Some(Connected { catalog, problems });
        }
        let servers = doc.clone();
        let secrets = secrets();
        let for_task = wanted.clone();
        let builtin = wanted.clone();
        // Connecting waits for the servers (on the MCP runtime): a blocking thread's work.
        let spawned = tasks.spawn_blocking(
            move |_, _| {
                let file = for_task.graph_file.as_deref();
                let (catalog, problems) = agentloom_runner::catalog::for_editing_with_servers(
                    &servers,
                    file,
                    &Trust::Trusted,
                    secrets.as_ref(),
                );
                Report::McpConnected(catalog, problems)
            },
            move |why| {
                let problem = Problem {
                    kind: agentloom_core::ProblemKind::McpServer,
                    node: None,
                    port: None,
                    path: "$.mcp_servers".to_owned(),
                    message: format!(
                        "connecting to the MCP servers failed: {why}; change a server to try again"
                    ),
                };
                Report::McpConnected(builtin.builtin(), vec![problem])
            },
        );
        match spawned {
            Ok(task) => {
                self.pending = Some(PendingConnection {
                    wanted,
                    _task: task,
                })
            }
            Err(err) => tracing::error!("cannot start connecting to the MCP servers: {err}"),
        }
        None
    }

    /// The names of the servers being connected to, if a connection is under way.
    pub fn connecting(&self) -> Option<Vec<&str>> {
        self.pending
            .as_ref()
            .map(|p| p.wanted.servers.keys().map(String::as_str).collect())
    }

    /// The connection under way ended with `catalog` and the `problems` of the servers
    /// that could not be reached: the app's catalog from now on.
    pub fn connected(&mut self, catalog: Registry, problems: Vec<Problem>) -> Option<Connected> {
        let pending = self.pending.take()?;
        self.connected = pending.wanted;
        Some(Connected { catalog, problems })
    }
}

/// "Connecting to `what`…" with a spinner.
pub fn connecting_ui(ui: &mut egui::Ui, what: &str) {
    ui.horizontal(|ui| {
        ui.spinner();
        ui.label(format!("Connecting to {what}…"));
    });
}

/// The window and its add form.
#[derive(Default)]
pub struct McpServersWindow {
    pub open: bool,
    name: String,
    command: String,
    args: String,
    url: String,
    credential: String,
    error: Option<String>,
}

impl McpServersWindow {
    /// The server the form describes, or why it is not one.
    fn form_server(
        &self,
        servers: &BTreeMap<String, McpServerDoc>,
    ) -> Result<(String, McpServerDoc), String> {
        let name = self.name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(
                "Name: use letters, digits, `-` and `_` (it becomes part of block kinds)."
                    .to_owned(),
            );
        }
        if servers.contains_key(name) {
            return Err(format!("Name: a server `{name}` exists already."));
        }
        let command = self.command.trim();
        let url = self.url.trim();
        let server = match (command.is_empty(), url.is_empty()) {
            (false, true) => McpServerDoc {
                command: Some(command.to_owned()),
                args: self.args.split_whitespace().map(str::to_owned).collect(),
                ..McpServerDoc::default()
            },
            (true, false) => McpServerDoc {
                url: Some(url.to_owned()),
                ..McpServerDoc::default()
            },
            _ => return Err("Give either a command (stdio) or a URL (HTTP).".to_owned()),
        };
        let credential = self.credential.trim();
        Ok((
            name.to_owned(),
            McpServerDoc {
                credential: (!credential.is_empty()).then(|| credential.to_owned()),
                ..server
            },
        ))
    }

    /// Shows the window when open; returns the edit asked for, if any.
    pub fn window_ui(
        &mut self,
        ctx: &egui::Context,
        servers: &BTreeMap<String, McpServerDoc>,
        problems: &[Problem],
        connecting: Option<Vec<&str>>,
    ) -> Option<McpEdit> {
        if !self.open {
            return None;
        }
        let mut open = self.open;
        let mut edit = None;
        egui::Window::new("MCP servers")
            .open(&mut open)
            .resizable(true)
            .show(ctx, |ui| {
                if servers.is_empty() {
                    ui.label("This graph uses no MCP server yet.");
                }
                for (name, server) in servers {
                    ui.horizontal(|ui| {
                        let target = match (&server.command, &server.url) {
                            (Some(command), _) => format!("{command} {}", server.args.join(" ")),
                            (None, Some(url)) => url.clone(),
                            (None, None) => String::new(),
                        };
                        ui.strong(name);
                        ui.label(target.trim());
                        if ui.button(format!("Remove {name}")).clicked() {
                            edit = Some(McpEdit::Remove(name.clone()));
                        }
                    });
                }
                match connecting {
                    Some(names) if !names.is_empty() => connecting_ui(ui, &names.join(", ")),
                    Some(_) => {}
                    None => {
                        for problem in problems {
                            ui.colored_label(ui.visuals().error_fg_color, &problem.message);
                        }
                    }
                }
                ui.separator();
                ui.heading("Add a server");
                egui::Grid::new("mcp_server_form")
                    .num_columns(2)
                    .show(ui, |ui| {
                        for (label, value, hint) in [
                            ("Name", &mut self.name, "e.g. files"),
                            (
                                "Command",
                                &mut self.command,
                                "a program started with stdio, e.g. npx",
                            ),
                            ("Arguments", &mut self.args, "separated by spaces"),
                            ("URL", &mut self.url, "or a streamable HTTP endpoint"),
                            (
                                "Credential",
                                &mut self.credential,
                                "a stored credential name (optional)",
                            ),
                        ] {
                            let label = ui.label(label);
                            ui.add(egui::TextEdit::singleline(value).hint_text(hint))
                                .labelled_by(label.id);
                            ui.end_row();
                        }
                    });
                if ui.button("Add server").clicked() {
                    match self.form_server(servers) {
                        Ok((name, server)) => {
                            edit = Some(McpEdit::Add(name, server));
                            *self = McpServersWindow {
                                open: true,
                                ..McpServersWindow::default()
                            };
                        }
                        Err(message) => self.error = Some(message),
                    }
                }
                if let Some(error) = &self.error {
                    ui.colored_label(ui.visuals().error_fg_color, error);
                }
            });
        self.open = open;
        edit
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn the_form_names_what_is_wrong() {
        let mut window = McpServersWindow {
            name: "files".to_owned(),
            command: "npx".to_owned(),
            args: "-y server stdio".to_owned(),
            ..McpServersWindow::default()
        };
        let (name, server) = window.form_server(&BTreeMap::new()).unwrap();
        assert_eq!(name, "files");
        assert_eq!(server.args, ["-y", "server", "stdio"]);
        let mut existing = BTreeMap::new();
        existing.insert("files".to_owned(), server);
        assert!(
            window
                .form_server(&existing)
                .unwrap_err()
                .contains("exists already")
        );
        window.url = "http://127.0.0.1:1/mcp".to_owned();
        window.name = "other".to_owned();
        assert!(
            window
                .form_server(&existing)
                .unwrap_err()
                .contains("either a command")
        );
        window.name = "bad name".to_owned();
        assert!(
            window
                .form_server(&existing)
                .unwrap_err()
                .starts_with("Name")
        );
    }
}
