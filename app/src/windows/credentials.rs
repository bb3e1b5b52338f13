//! The credentials manager window: stored credentials with kind, provider, status, expiry,
//! hosts and scopes; add an API key; edit the hosts a credential may be sent to; sign in with a provider (browser or device flow);
//! re-authorize; remove (revoking OAuth tokens where the provider allows it).
//!
//! Everything that talks to the keychain or the network runs as a [`Job`], a background
//! task of the app (see [`crate::tasks`]) on the runtime's blocking threads (never on a
//! tokio worker: the Secret Service client blocks), so the window never freezes. Secrets typed here go straight to the keychain: they are
//! never shown again, logged, or kept in the window's state after "Add".

use std::path::Path;
use std::sync::Arc;

use agentloom_core::BoundHosts;
use agentloom_engine::credentials::oauth::{self, BrowserOpener, DeviceCode, Provider};
use agentloom_engine::credentials::{
    CredentialInfo, CredentialKind, CredentialStore, OAuthTokens, StoredSecret, unix_now,
};
use egui::{RichText, Ui};
use tokio_util::sync::CancellationToken;

use crate::tasks::{BackgroundTasks, Report, Reporter, Task};

use crate::theme;

/// The providers the sign-in form offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignInProvider {
    GitHub,
    Google,
    /// Any OpenID provider, found from its issuer URL.
    OpenId,
}

impl SignInProvider {
    const ALL: [SignInProvider; 3] = [Self::GitHub, Self::Google, Self::OpenId];

    fn title(self) -> &'static str {
        match self {
            Self::GitHub => "GitHub",
            Self::Google => "Google (Gmail)",
            Self::OpenId => "OpenID provider (issuer URL)",
        }
    }

    /// The credential name used when none is typed.
    fn default_name(self) -> &'static str {
        match self {
            Self::GitHub => "github",
            Self::Google => "gmail",
            Self::OpenId => "oidc",
        }
    }
}

/// What the sign-in form holds (no secret but Google's installed-app client secret, which
/// is typed masked and goes to the keychain with the tokens).
struct SignInForm {
    provider: SignInProvider,
    name: String,
    client_id: String,
    client_secret: String,
    /// The issuer (OpenID) or a GitHub Enterprise base URL.
    issuer: String,
    device: bool,
}

impl Default for SignInForm {
    fn default() -> Self {
        Self {
            provider: SignInProvider::GitHub,
            name: String::new(),
            client_id: std::env::var("AGENTLOOM_OAUTH_CLIENT_ID").unwrap_or_default(),
            client_secret: String::new(),
            issuer: String::new(),
            device: false,
        }
    }
}

/// What a job does, on a blocking thread: it reports as it goes and ends with what to tell
/// the person.
type JobWork =
    Box<dyn FnOnce(&Reporter, &CancellationToken) -> Result<String, String> + Send + 'static>;

/// Work asked of the keychain or the network, started by the app's logic.
struct Job {
    /// What is happening, e.g. "Signing in to GitHub as `github`".
    what: String,
    /// The work, until it is started.
    work: Option<JobWork>,
    /// The task doing it, once started.
    task: Option<Task>,
    /// Sign-ins can be cancelled (removals and additions run to the end).
    cancellable: bool,
    device: Option<DeviceCode>,
    browser_url: Option<String>,
}

/// Opens the system browser (or the test's opener) and tells the window the URL, so that it
/// can be opened by hand.
struct ReportingBrowser {
    reporter: Reporter,
    inner: Arc<dyn BrowserOpener>,
}

impl BrowserOpener for ReportingBrowser {
    fn open(&self, url: &str) -> Result<(), String> {
        self.reporter.report(Report::SignInBrowser(url.to_owned()));
        self.inner.open(url)
    }
}

/// A message under the window's title.
struct Notice {
    text: String,
    error: bool,
}

/// The credentials manager: its store, window state and running job.
pub struct Credentials {
    store: Result<Arc<CredentialStore>, String>,
    /// Whether the window is shown.
    pub open: bool,
    list: Vec<CredentialInfo>,
    list_loaded: bool,
    list_error: Option<String>,
    add_name: String,
    add_provider: String,
    /// Comma-separated; empty: the provider's hosts.
    add_hosts: String,
    add_secret: String,
    /// The credential whose hosts are being edited, and the text being edited.
    edit_hosts: Option<(String, String)>,
    sign_in: SignInForm,
    job: Option<Job>,
    confirm_remove: Option<String>,
    notice: Option<Notice>,
    browser: Arc<dyn BrowserOpener>,
}

impl Credentials {
    /// Credentials in the OS keychain, indexed in `dir` (`None`: no store; the window says
    /// so).
    pub fn new(dir: Option<&Path>) -> Self {
        let store = match dir {
            Some(dir) => Ok(Arc::new(CredentialStore::open(dir))),
            None => Err("no data directory is known for this user, so credentials cannot be listed; runs still read AGENTLOOM_SECRET_<NAME> environment variables".to_owned()),
        };
        Self {
            store,
            open: false,
            list: Vec::new(),
            list_loaded: false,
            list_error: None,
            add_name: String::new(),
            add_provider: String::new(),
            add_hosts: String::new(),
            add_secret: String::new(),
            edit_hosts: None,
            sign_in: SignInForm::default(),
            job: None,
            confirm_remove: None,
            notice: None,
            browser: Arc::new(oauth::SystemBrowser),
        }
    }

    /// The store, for runs to read secrets from.
    pub fn store(&self) -> Option<Arc<CredentialStore>> {
        self.store.as_ref().ok().cloned()
    }

    /// Replaces how sign-in pages are opened.
    pub fn set_browser(&mut self, browser: Arc<dyn BrowserOpener>) {
        self.browser = browser;
    }

    /// Shows the window with a fresh list.
    pub fn show_window(&mut self) {
        self.open = true;
        self.list_loaded = false;
    }

    /// The stored credentials, sorted by name (read from the index, which needs no keychain).
    pub fn list(&mut self) -> &[CredentialInfo] {
        if !self.list_loaded {
            self.reload();
        }
        &self.list
    }

    fn reload(&mut self) {
        self.list_loaded = true;
        match &self.store {
            Ok(store) => match store.list() {
                Ok(list) => {
                    self.list = list;
                    self.list_error = None;
                }
                Err(err) => {
                    self.list.clear();
                    self.list_error = Some(err.to_string());
                }
            },
            Err(_) => self.list.clear(),
        }
    }

    /// Why secrets cannot be stored or read, if they cannot.
    fn unavailable(&self) -> Option<String> {
        match &self.store {
            Ok(store) => store.check_available().err().map(|e| {
                format!("The keychain cannot be used: {e}. Restart Agentloom once it is fixed.")
            }),
            Err(why) => Some(format!("No credential store: {why}.")),
        }
    }

    /// Takes what the running job reported.
    pub(crate) fn take_report(&mut self, report: Report) {
        let Some(job) = &mut self.job else { return };
        let result = match report {
            Report::SignInDevice(code) => {
                job.device = Some(code);
                return;
            }
            Report::SignInBrowser(url) => {
                job.browser_url = Some(url);
                return;
            }
            Report::CredentialsDone(result) => result,
            _ => return,
        };
        self.job = None;
        self.notice = Some(match result {
            Ok(text) => Notice { text, error: false },
            Err(text) => Notice { text, error: true },
        });
        self.reload();
    }

    /// Starts the job asked for since the last frame.
    pub(crate) fn start_asked(&mut self, tasks: &mut BackgroundTasks) {
        let Some(job) = &mut self.job else { return };
        let Some(work) = job.work.take() else { return };
        match tasks.spawn_blocking(
            move |reporter, cancel| Report::CredentialsDone(work(reporter, cancel)),
            |why| Report::CredentialsDone(Err(format!("The operation failed: {why}."))),
        ) {
            Ok(task) => job.task = Some(task),
            Err(e) => {
                self.job = None;
                self.notice = Some(Notice {
                    text: format!("Could not start: {e}"),
                    error: true,
                });
            }
        }
    }

    /// Asks for `work` to be done in the background (see [`Credentials::start_asked`]).
    fn spawn(
        &mut self,
        ctx: &egui::Context,
        what: String,
        cancellable: bool,
        work: impl FnOnce(&Reporter, &CancellationToken) -> Result<String, String> + Send + 'static,
    ) {
        self.notice = None;
        self.job = Some(Job {
            what,
            work: Some(Box::new(work)),
            task: None,
            cancellable,
            device: None,
            browser_url: None,
        });
        // The app's logic starts it before the next frame.
        ctx.request_repaint();
    }

    fn add_api_key(&mut self, ctx: &egui::Context) {
        let Ok(store) = self.store.clone() else {
            return;
        };
        let name = self.add_name.trim().to_owned();
        if let Err(err) = agentloom_engine::credentials::check_name(&name) {
            self.notice = Some(Notice {
                text: err.to_string(),
                error: true,
            });
            return;
        }
        if self.add_secret.is_empty() {
            self.notice = Some(Notice {
                text: "Type or paste the secret first.".to_owned(),
                error: true,
            });
            return;
        }
        let provider = match self.add_provider.trim() {
            "" => "generic".to_owned(),
            p => p.to_owned(),
        };
        let hosts = match BoundHosts::parse_list(&self.add_hosts) {
            Ok(hosts) => hosts,
            Err(problem) => {
                self.notice = Some(Notice {
                    text: format!("Hosts: {problem}"),
                    error: true,
                });
                return;
            }
        };
        // The secret leaves the window's state now; it is never shown again.
        let key = std::mem::take(&mut self.add_secret);
        self.add_name.clear();
        self.add_hosts.clear();
        self.spawn(
            ctx,
            format!("Storing `{name}` in the keychain"),
            false,
            move |_, _| {
                store
                    .put_with_hosts(&name, &StoredSecret::ApiKey { provider, key }, &hosts)
                    .map(|_| format!("Stored `{name}` in the keychain."))
                    .map_err(|e| e.to_string())
            },
        );
    }

    fn remove(&mut self, ctx: &egui::Context, name: String) {
        let Ok(store) = self.store.clone() else {
            return;
        };
        self.spawn(ctx, format!("Removing `{name}`"), false, move |_, _| {
            let removal = app_runtime()?
                .block_on(oauth::remove_credential(&store, &name))
                .map_err(|e| e.to_string())?;
            let mut text = if removal.revoked {
                format!("Revoked and removed `{name}`.")
            } else {
                format!("Removed `{name}`.")
            };
            if let Some(note) = removal.note {
                text.push_str(" Note: ");
                text.push_str(&note);
            }
            Ok(text)
        });
    }

    /// Signs in with the form's provider, or again with the client a stored credential
    /// was issued through (`reauthorize`).
    fn start_sign_in(&mut self, ctx: &egui::Context, reauthorize: Option<String>) {
        let Ok(store) = self.store.clone() else {
            return;
        };
        let form = &self.sign_in;
        let request = match reauthorize {
            Some(name) => SignInRequest {
                name,
                source: ProviderSource::Stored,
                device: form.device,
            },
            None => {
                let client_id = form.client_id.trim().to_owned();
                if client_id.is_empty() {
                    self.notice = Some(Notice {
                        text: "Give your OAuth app's client id (docs/credentials.md shows how to create one).".to_owned(),
                        error: true,
                    });
                    return;
                }
                let issuer = form.issuer.trim().to_owned();
                if form.provider == SignInProvider::OpenId && issuer.is_empty() {
                    self.notice = Some(Notice {
                        text: "Give the issuer URL of the OpenID provider, e.g. https://id.example.com.".to_owned(),
                        error: true,
                    });
                    return;
                }
                let name = match form.name.trim() {
                    "" => form.provider.default_name().to_owned(),
                    n => n.to_owned(),
                };
                if let Err(err) = agentloom_engine::credentials::check_name(&name) {
                    self.notice = Some(Notice {
                        text: err.to_string(),
                        error: true,
                    });
                    return;
                }
                let secret = form.client_secret.trim();
                SignInRequest {
                    name,
                    source: ProviderSource::Form {
                        provider: form.provider,
                        client_id,
                        client_secret: (!secret.is_empty()).then(|| secret.to_owned()),
                        issuer: (!issuer.is_empty()).then_some(issuer),
                    },
                    device: form.device,
                }
            }
        };
        let what = match &request.source {
            ProviderSource::Stored => format!("Signing in again for `{}`", request.name),
            ProviderSource::Form { provider, .. } => {
                format!("Signing in to {} as `{}`", provider.title(), request.name)
            }
        };
        let browser = self.browser.clone();
        self.spawn(ctx, what, true, move |reporter, cancel| {
            let tokens = app_runtime()?.block_on(async {
                tokio::select! {
                    tokens = sign_in(&store, &request, reporter, browser) => tokens,
                    () = cancel.cancelled() => Err("Sign-in cancelled.".to_owned()),
                }
            })?;
            store
                .put(&request.name, &StoredSecret::OAuth(tokens))
                .map_err(|e| e.to_string())?;
            Ok(format!(
                "Signed in; stored as credential `{}`.",
                request.name
            ))
        });
    }

    /// Draws the window when it is open.
    pub fn window_ui(&mut self, ctx: &egui::Context) {
        if !self.open {
            return;
        }
        if !self.list_loaded {
            self.reload();
        }
        let mut open = true;
        egui::Window::new("Credentials")
            .collapsible(false)
            .resizable(true)
            .default_size([720.0, 600.0])
            .open(&mut open)
            .show(ctx, |ui| {
                egui::ScrollArea::vertical()
                    .auto_shrink(false)
                    .show(ui, |ui| self.contents_ui(ui));
            });
        if !open {
            self.open = false;
            self.confirm_remove = None;
        }
    }

    fn contents_ui(&mut self, ui: &mut Ui) {
        let ctx = ui.ctx().clone();
        let unavailable = self.unavailable();
        if let Some(why) = &unavailable {
            ui.label(RichText::new(why).color(theme::ERROR));
            ui.separator();
        }
        if let Some(notice) = &self.notice {
            let color = if notice.error {
                theme::ERROR
            } else {
                theme::OK
            };
            ui.label(RichText::new(&notice.text).color(color));
        }
        self.job_ui(ui);
        ui.add_space(4.0);
        self.list_ui(ui, &ctx, unavailable.is_none());
        ui.separator();
        let enabled = unavailable.is_none() && self.job.is_none();
        ui.add_enabled_ui(enabled, |ui| {
            egui::CollapsingHeader::new("Add an API key")
                .default_open(true)
                .show(ui, |ui| self.add_ui(ui, &ctx));
            egui::CollapsingHeader::new("Sign in with a provider")
                .default_open(true)
                .show(ui, |ui| self.sign_in_ui(ui, &ctx));
        });
        ui.label(
            RichText::new(
                "Graphs refer to credentials by name only. For headless runs, set AGENTLOOM_SECRET_<NAME> (the name upper-cased, other characters as `_`).",
            )
            .small()
            .color(theme::TEXT_WEAK),
        );
    }

    fn job_ui(&mut self, ui: &mut Ui) {
        let Some(job) = &self.job else { return };
        let mut cancel = false;
        ui.group(|ui| {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(&job.what);
            });
            if let Some(code) = &job.device {
                ui.label("On any device, open this address and enter the code:");
                ui.horizontal(|ui| {
                    ui.hyperlink(&code.verification_uri);
                    if ui.small_button("Copy address").clicked() {
                        ui.ctx().copy_text(code.verification_uri.clone());
                    }
                });
                ui.horizontal(|ui| {
                    ui.label(
                        RichText::new(&code.user_code)
                            .monospace()
                            .strong()
                            .size(18.0),
                    );
                    if ui.small_button("Copy code").clicked() {
                        ui.ctx().copy_text(code.user_code.clone());
                    }
                });
                ui.label(
                    RichText::new(format!(
                        "Waiting for approval (the code expires in {} min)…",
                        code.expires_in.as_secs().div_ceil(60)
                    ))
                    .color(theme::TEXT_WEAK),
                );
            } else if let Some(url) = &job.browser_url {
                ui.label("Waiting for the browser… If no browser opened, open this address:");
                ui.horizontal(|ui| {
                    ui.add(egui::Label::new(RichText::new(url).monospace().small()).truncate())
                        .on_hover_text(url);
                    if ui.small_button("Copy address").clicked() {
                        ui.ctx().copy_text(url.clone());
                    }
                });
            }
            if job.cancellable && ui.button("Cancel").clicked() {
                cancel = true;
            }
        });
        if cancel && let Some(task) = self.job.as_ref().and_then(|j| j.task.as_ref()) {
            // The sign-in stops and says so.
            task.stop();
        }
    }

    fn list_ui(&mut self, ui: &mut Ui, ctx: &egui::Context, keychain_ok: bool) {
        if let Some(err) = &self.list_error {
            ui.label(RichText::new(err).color(theme::ERROR));
        }
        if self.list.is_empty() {
            ui.label(RichText::new("No credentials stored yet.").color(theme::TEXT_WEAK));
            return;
        }
        let now = unix_now();
        let idle = self.job.is_none();
        let mut remove = None;
        let mut reauthorize = None;
        let mut edit_hosts = None;
        egui::Grid::new("credentials_list")
            .num_columns(8)
            .striped(true)
            .spacing([12.0, 4.0])
            .show(ui, |ui| {
                for title in [
                    "Name", "Kind", "Provider", "Status", "Expires", "Hosts", "Scopes", "",
                ] {
                    ui.label(RichText::new(title).strong());
                }
                ui.end_row();
                for c in &self.list {
                    ui.label(RichText::new(&c.name).monospace());
                    ui.label(c.kind.to_string());
                    ui.label(&c.provider);
                    let status = c.status(now);
                    let color = if status == "ok" {
                        theme::OK
                    } else if status.starts_with("expired:") {
                        theme::ERROR
                    } else {
                        theme::WARN
                    };
                    ui.label(RichText::new(status).color(color));
                    ui.label(expiry_text(c.expires_at, now));
                    ui.label(RichText::new(hosts_text(&c.hosts)).monospace())
                        .on_hover_text("The only hosts this credential is ever sent to");
                    ui.label(RichText::new(c.scopes.join(" ")).small());
                    ui.horizontal(|ui| {
                        if named_button(ui, "Hosts…", &format!("Edit hosts of {}", c.name))
                            .clicked()
                        {
                            edit_hosts = Some((c.name.clone(), c.hosts.join(", ")));
                        }
                        ui.add_enabled_ui(idle && keychain_ok, |ui| {
                            if c.kind == CredentialKind::OAuth
                                && named_button(
                                    ui,
                                    "Re-authorize",
                                    &format!("Re-authorize {}", c.name),
                                )
                                .on_hover_text("Sign in again with the same provider and client")
                                .clicked()
                            {
                                reauthorize = Some(c.name.clone());
                            }
                            if named_button(ui, "Remove…", &format!("Remove {}", c.name)).clicked()
                            {
                                remove = Some(c.name.clone());
                            }
                        });
                    });
                    ui.end_row();
                }
            });
        if let Some(name) = remove {
            self.confirm_remove = Some(name);
        }
        if edit_hosts.is_some() {
            self.edit_hosts = edit_hosts;
        }
        self.edit_hosts_ui(ui);
        if let Some(name) = reauthorize {
            self.start_sign_in(ctx, Some(name));
        }
        if let Some(name) = self.confirm_remove.clone() {
            let mut answer = None;
            ui.group(|ui| {
                ui.label(format!(
                    "Remove `{name}` from the keychain? OAuth tokens are revoked at the provider where it allows it. Graphs that use it will fail until it is added again."
                ));
                ui.horizontal(|ui| {
                    if named_button(ui, "Remove", "Confirm removal").clicked() {
                        answer = Some(true);
                    }
                    if named_button(ui, "Keep", "Cancel removal").clicked() {
                        answer = Some(false);
                    }
                });
            });
            match answer {
                Some(true) => {
                    self.confirm_remove = None;
                    self.remove(ctx, name);
                }
                Some(false) => self.confirm_remove = None,
                None => {}
            }
        }
    }

    /// The hosts editor of one credential, under the list. Saving needs no keychain.
    fn edit_hosts_ui(&mut self, ui: &mut Ui) {
        let Some((name, text)) = &mut self.edit_hosts else {
            return;
        };
        let mut answer = None;
        ui.group(|ui| {
            ui.label(format!(
                "Hosts `{name}` may be sent to, comma-separated: `host` or `host:port` (`*`: any host). Empty: its provider's."
            ));
            let label = ui.label(format!("Hosts of {name}"));
            let field = ui
                .add(egui::TextEdit::singleline(text).desired_width(320.0))
                .on_hover_text("e.g. api.example.com, 127.0.0.1:8080")
                .labelled_by(label.id);
            if field.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                answer = Some(true);
            }
            ui.horizontal(|ui| {
                if named_button(ui, "Save hosts", "Save hosts").clicked() {
                    answer = Some(true);
                }
                if named_button(ui, "Cancel", "Cancel editing hosts").clicked() {
                    answer = Some(false);
                }
            });
        });
        match answer {
            Some(true) => {
                let name = name.clone();
                let saved = BoundHosts::parse_list(text).map_err(|p| format!("Hosts: {p}"));
                let saved = saved.and_then(|hosts| match &self.store {
                    Ok(store) => store.set_hosts(&name, &hosts).map_err(|e| e.to_string()),
                    Err(err) => Err(err.clone()),
                });
                match saved {
                    Ok(info) => {
                        self.notice = Some(Notice {
                            text: format!("`{name}` may be sent to {}.", hosts_text(&info.hosts)),
                            error: false,
                        });
                        self.edit_hosts = None;
                        self.list_loaded = false;
                    }
                    Err(text) => self.notice = Some(Notice { text, error: true }),
                }
            }
            Some(false) => self.edit_hosts = None,
            None => {}
        }
    }

    fn add_ui(&mut self, ui: &mut Ui, ctx: &egui::Context) {
        let mut submit = false;
        egui::Grid::new("add_api_key")
            .num_columns(2)
            .min_col_width(150.0)
            .spacing([8.0, 4.0])
            .show(ui, |ui| {
                let label = ui.label("Name");
                ui.add(
                    egui::TextEdit::singleline(&mut self.add_name)
                        .hint_text("e.g. openai")
                        .desired_width(240.0),
                )
                .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Provider");
                ui.add(
                    egui::TextEdit::singleline(&mut self.add_provider)
                        .hint_text("openai, anthropic, github… (empty: generic)")
                        .desired_width(240.0),
                )
                .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Hosts");
                ui.add(
                    egui::TextEdit::singleline(&mut self.add_hosts)
                        .hint_text("api.example.com, 127.0.0.1:8080 (empty: the provider's)")
                        .desired_width(240.0),
                )
                .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Secret");
                let secret = ui
                    .add(
                        egui::TextEdit::singleline(&mut self.add_secret)
                            .password(true)
                            .hint_text("API key or token (never shown again)")
                            .desired_width(240.0),
                    )
                    .labelled_by(label.id);
                if secret.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                    submit = true;
                }
                ui.end_row();
            });
        if ui.button("Add").clicked() {
            submit = true;
        }
        if submit {
            self.add_api_key(ctx);
        }
    }

    fn sign_in_ui(&mut self, ui: &mut Ui, ctx: &egui::Context) {
        let form = &mut self.sign_in;
        egui::Grid::new("sign_in")
            .num_columns(2)
            .min_col_width(150.0)
            .spacing([8.0, 4.0])
            .show(ui, |ui| {
                let label = ui.label("Provider");
                egui::ComboBox::from_id_salt("sign_in_provider")
                    .selected_text(form.provider.title())
                    .show_ui(ui, |ui| {
                        for p in SignInProvider::ALL {
                            ui.selectable_value(&mut form.provider, p, p.title());
                        }
                    })
                    .response
                    .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Credential name");
                ui.add(
                    egui::TextEdit::singleline(&mut form.name)
                        .hint_text(form.provider.default_name())
                        .desired_width(240.0),
                )
                .labelled_by(label.id);
                ui.end_row();
                let label = ui.label("Client id");
                ui.add(
                    egui::TextEdit::singleline(&mut form.client_id)
                        .hint_text("your OAuth app's client id")
                        .desired_width(240.0),
                )
                .labelled_by(label.id);
                ui.end_row();
                match form.provider {
                    SignInProvider::GitHub => {
                        let label = ui.label("GitHub Enterprise URL");
                        ui.add(
                            egui::TextEdit::singleline(&mut form.issuer)
                                .hint_text("empty: github.com")
                                .desired_width(240.0),
                        )
                        .labelled_by(label.id);
                        ui.end_row();
                    }
                    SignInProvider::Google => {
                        let label = ui.label("Client secret");
                        ui.add(
                            egui::TextEdit::singleline(&mut form.client_secret)
                                .password(true)
                                .hint_text("if your desktop client has one")
                                .desired_width(240.0),
                        )
                        .labelled_by(label.id);
                        ui.end_row();
                    }
                    SignInProvider::OpenId => {
                        let label = ui.label("Issuer URL");
                        ui.add(
                            egui::TextEdit::singleline(&mut form.issuer)
                                .hint_text("https://id.example.com")
                                .desired_width(240.0),
                        )
                        .labelled_by(label.id);
                        ui.end_row();
                    }
                }
            });
        ui.checkbox(
            &mut form.device,
            "Use the device flow (type a code on any device) instead of the browser",
        );
        ui.label(
            RichText::new("Create your own OAuth app first: docs/credentials.md shows how, step by step. Re-authorize uses the same choice of flow.")
                .small()
                .color(theme::TEXT_WEAK),
        );
        if ui.button("Sign in").clicked() {
            self.start_sign_in(ctx, None);
        }
    }
}

/// A button whose accessible name differs from its text (e.g. says which row it acts on).
/// A credential's hosts for the list: `a, b`, or `none` (then it is sent nowhere).
fn hosts_text(hosts: &[String]) -> String {
    if hosts.is_empty() {
        "none".to_owned()
    } else {
        hosts.join(", ")
    }
}

fn named_button(ui: &mut Ui, text: &str, name: &str) -> egui::Response {
    let response = ui.button(text);
    let enabled = ui.is_enabled();
    response.widget_info(|| egui::WidgetInfo::labeled(egui::WidgetType::Button, enabled, name));
    response
}

/// `in 42 min`, `in 3 h`, `in 2 days`, `expired`, or `-` for no expiry.
fn expiry_text(expires_at: Option<u64>, now: u64) -> String {
    match expires_at {
        None => "-".to_owned(),
        Some(at) if at <= now => "expired".to_owned(),
        Some(at) => {
            let secs = at - now;
            if secs < 2 * 3600 {
                format!("in {} min", secs.div_ceil(60))
            } else if secs < 2 * 86_400 {
                format!("in {} h", secs / 3600)
            } else {
                format!("in {} days", secs / 86_400)
            }
        }
    }
}

/// Where a sign-in gets its provider from.
enum ProviderSource {
    /// The sign-in form.
    Form {
        provider: SignInProvider,
        client_id: String,
        client_secret: Option<String>,
        issuer: Option<String>,
    },
    /// The client and endpoints the stored credential was issued through.
    Stored,
}

struct SignInRequest {
    name: String,
    source: ProviderSource,
    device: bool,
}

async fn sign_in(
    store: &CredentialStore,
    request: &SignInRequest,
    reporter: &Reporter,
    browser: Arc<dyn BrowserOpener>,
) -> Result<OAuthTokens, String> {
    let (provider, scopes) = match &request.source {
        ProviderSource::Form {
            provider,
            client_id,
            client_secret,
            issuer,
        } => {
            let profile = match provider {
                SignInProvider::GitHub => match issuer {
                    Some(base) => Provider::github_at(base, client_id),
                    None => Provider::github(client_id),
                },
                SignInProvider::Google => Provider::google(client_id, client_secret.as_deref()),
                SignInProvider::OpenId => {
                    let issuer = issuer.as_deref().unwrap_or_default();
                    Provider::discover(issuer, client_id)
                        .await
                        .map_err(|e| e.to_string())?
                }
            };
            let scopes = profile.default_scopes.clone();
            (profile, scopes)
        }
        ProviderSource::Stored => {
            let tokens = match store.get(&request.name).map_err(|e| e.to_string())? {
                StoredSecret::OAuth(tokens) => tokens,
                StoredSecret::ApiKey { .. } => {
                    return Err(format!(
                        "`{}` is an API key: remove it and add it again to replace it",
                        request.name
                    ));
                }
            };
            let profile = stored_provider(&tokens).await?;
            let scopes = if tokens.scopes.is_empty() {
                profile.default_scopes.clone()
            } else {
                tokens.scopes.clone()
            };
            (profile, scopes)
        }
    };
    let tokens = if request.device {
        let shown = reporter.clone();
        oauth::authorize_device(&provider, &scopes, &move |code: &DeviceCode| {
            shown.report(Report::SignInDevice(code.clone()));
        })
        .await
    } else {
        let opener = ReportingBrowser {
            reporter: reporter.clone(),
            inner: browser,
        };
        oauth::authorize_code(&provider, &scopes, &opener, oauth::DEFAULT_SIGN_IN_TIMEOUT).await
    };
    tokens.map_err(|e| e.to_string())
}

/// The provider profile a stored token set was issued by, to sign in again.
async fn stored_provider(tokens: &OAuthTokens) -> Result<Provider, String> {
    let client_id = &tokens.client.client_id;
    match tokens.provider.as_str() {
        "github" => {
            let base = tokens
                .client
                .token_url
                .strip_suffix("/login/oauth/access_token")
                .unwrap_or("https://github.com");
            Ok(Provider::github_at(base, client_id))
        }
        "google" => Ok(Provider::google(
            client_id,
            tokens.client.client_secret.as_deref(),
        )),
        issuer if issuer.starts_with("https://") || issuer.starts_with("http://") => {
            Provider::discover(issuer, client_id)
                .await
                .map_err(|e| e.to_string())
        }
        other => Err(format!(
            "credential provider `{other}` cannot be signed in to again from here: remove the credential and sign in with a provider"
        )),
    }
}

/// The app's runtime, which a job on its blocking threads waits on for network work.
fn app_runtime() -> Result<tokio::runtime::Handle, String> {
    tokio::runtime::Handle::try_current().map_err(|e| format!("no network runtime: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_reads_naturally() {
        assert_eq!(expiry_text(None, 100), "-");
        assert_eq!(expiry_text(Some(100), 100), "expired");
        assert_eq!(expiry_text(Some(100 + 59), 100), "in 1 min");
        assert_eq!(expiry_text(Some(100 + 3 * 3600), 100), "in 3 h");
        assert_eq!(expiry_text(Some(100 + 5 * 86_400), 100), "in 5 days");
    }
}
