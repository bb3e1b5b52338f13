//! The desktop window: eframe's wrapper around [`App`], its window options and icon.

use std::path::PathBuf;
use std::time::Instant;

use super::{App, AppPaths};

mod wheel_notches;
mod window_class;

/// The eframe wrapper.
struct DesktopApp {
    app: App,
    started: Instant,
    logged_first_frame: bool,
    /// X11: a wheel notch may come as two events (see `wheel_notches`).
    wheel_may_double: bool,
}

impl eframe::App for DesktopApp {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.app.logic(ctx);
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.app.show(ui);
        if !self.logged_first_frame {
            self.logged_first_frame = true;
            tracing::info!(
                elapsed_ms = self.started.elapsed().as_millis(),
                nodes = self.app.document.snarl.nodes().count(),
                "first frame"
            );
        }
    }

    fn raw_input_hook(&mut self, _ctx: &egui::Context, raw_input: &mut egui::RawInput) {
        if self.wheel_may_double {
            wheel_notches::one_event_per_notch(raw_input);
        }
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        tracing::debug!(
            zoom = self.app.canvas.transform.scaling,
            "the canvas's zoom as the window closes"
        );
        self.app.close();
    }
}

/// Opens the desktop window on `graph` (or the last/example graph), recording runs in `db`
/// (or the per-user run log).
pub fn run_native(
    path: Option<PathBuf>,
    db: Option<PathBuf>,
    workspace: Option<PathBuf>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut paths = AppPaths::user_default(db);
    paths.workspace = workspace;
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("Agentloom")
            // The window's class (X11) and app id (Wayland), as the desktop entry's name and
            // StartupWMClass say, so that desktops group it under the app's icon.
            .with_app_id("agentloom")
            .with_inner_size([1280.0, 800.0])
            .with_min_inner_size([640.0, 400.0])
            .with_drag_and_drop(true)
            .with_icon(window_icon()),
        renderer: eframe::Renderer::Glow,
        ..eframe::NativeOptions::default()
    };
    eframe::run_native(
        "Agentloom",
        options,
        Box::new(move |cc| {
            window_class::name_x11_window(cc, "agentloom");
            let app = App::startup(path, &paths);
            Ok(Box::new(DesktopApp {
                app,
                started,
                logged_first_frame: false,
                wheel_may_double: wheel_notches::wheel_may_double(),
            }))
        }),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}

/// The application icon (assets/icons), on the window and in the task bar. An unreadable one
/// leaves the window without (an empty icon is none), which is no reason not to open.
fn window_icon() -> egui::IconData {
    let png = include_bytes!("../../assets/icons/agentloom-256.png");
    eframe::icon_data::from_png_bytes(png).unwrap_or_else(|e| {
        tracing::warn!("the window icon is unreadable: {e}");
        egui::IconData::default()
    })
}
