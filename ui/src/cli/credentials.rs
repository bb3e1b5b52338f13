//! `agentloom credentials list|add|login|remove`: the keychain credentials from the shell.
//! Secrets are read from stdin (when it is not a terminal) or a hidden prompt, never from
//! arguments.

use std::io::{IsTerminal as _, Read as _};
use std::sync::Arc;
use std::time::Duration;

use agentloom_engine::credentials::oauth::{self, Provider, SystemBrowser};
use agentloom_engine::credentials::unix_now;
use agentloom_engine::{CredentialStore, StoredSecret};
use anyhow::Context as _;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum CredentialsCmd {
    /// List stored credentials with kind, provider, status, expiry and scopes.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Store an API key or token (read from stdin, or a hidden prompt).
    Add {
        name: String,
        /// The provider it is for (`github`, `google`, `openai`…).
        #[arg(long, default_value = "generic")]
        provider: String,
    },
    /// Sign in with OAuth: `github`, `google`, or `oidc` with --issuer.
    Login {
        provider: String,
        /// The credential name (default: the provider).
        #[arg(long)]
        name: Option<String>,
        /// Your OAuth app's client id (see docs/credentials.md).
        #[arg(long, env = "AGENTLOOM_OAUTH_CLIENT_ID")]
        client_id: Option<String>,
        /// The OpenID issuer URL (for `oidc`), or a GitHub Enterprise base URL.
        #[arg(long)]
        issuer: Option<String>,
        /// Use the device flow (a code typed on another device) instead of the browser.
        #[arg(long)]
        device: bool,
    },
    /// Remove a credential (OAuth tokens are revoked at the provider where possible).
    Remove { name: String },
}

pub fn credentials_command(cmd: CredentialsCmd) -> anyhow::Result<i32> {
    let store = Arc::new(CredentialStore::open_default()?);
    match cmd {
        CredentialsCmd::List { json } => {
            let list = store.list()?;
            if json {
                out!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                out!(
                    "No credentials. Add one with `agentloom credentials add NAME` or `agentloom credentials login PROVIDER`."
                );
            } else {
                let now = unix_now();
                for c in &list {
                    let expiry = c.expires_at.map_or_else(
                        || "-".to_owned(),
                        |at| {
                            if at > now {
                                format!("in {} min", (at - now) / 60)
                            } else {
                                "expired".to_owned()
                            }
                        },
                    );
                    out!(
                        "{:<24} {:<7} {:<12} {:<18} {:<12} {}",
                        c.name,
                        c.kind.to_string(),
                        c.provider,
                        c.status(now),
                        expiry,
                        c.scopes.join(" ")
                    );
                }
            }
            if let Err(e) = store.check_available() {
                eprintln!("warning: {e}");
            }
            Ok(0)
        }
        CredentialsCmd::Add { name, provider } => {
            store.check_available()?;
            let secret = read_secret(&name)?;
            store.put(
                &name,
                &StoredSecret::ApiKey {
                    provider,
                    key: secret,
                },
            )?;
            out!("Stored credential `{name}` in the keychain.");
            Ok(0)
        }
        CredentialsCmd::Login {
            provider,
            name,
            client_id,
            issuer,
            device,
        } => {
            store.check_available()?;
            let client_id = client_id.context("--client-id is required: create an OAuth app and pass its client id (see docs/credentials.md)")?;
            let runtime = tokio::runtime::Runtime::new()?;
            let tokens = runtime.block_on(async {
                let profile = match provider.as_str() {
                    "github" => match &issuer {
                        Some(base) => Provider::github_at(base, &client_id),
                        None => Provider::github(&client_id),
                    },
                    "google" => {
                        let secret = std::env::var("AGENTLOOM_OAUTH_CLIENT_SECRET").ok();
                        Provider::google(&client_id, secret.as_deref())
                    }
                    "oidc" => {
                        let issuer = issuer.clone().context("`oidc` needs --issuer URL")?;
                        Provider::discover(&issuer, &client_id).await?
                    }
                    other => {
                        anyhow::bail!("unknown provider `{other}`: use github, google or oidc")
                    }
                };
                let scopes = profile.default_scopes.clone();
                let tokens = if device {
                    oauth::authorize_device(&profile, &scopes, &|code| {
                        eprintln!(
                            "Open {} and enter the code {}",
                            code.verification_uri, code.user_code
                        );
                    })
                    .await?
                } else {
                    eprintln!("Opening the browser to sign in (waiting up to 5 minutes)…");
                    oauth::authorize_code(
                        &profile,
                        &scopes,
                        &PrintingBrowser,
                        Duration::from_secs(300),
                    )
                    .await?
                };
                Ok(tokens)
            })?;
            let name = name.unwrap_or_else(|| provider.clone());
            store.put(&name, &StoredSecret::OAuth(tokens))?;
            out!("Signed in; stored as credential `{name}`.");
            Ok(0)
        }
        CredentialsCmd::Remove { name } => {
            let runtime = tokio::runtime::Runtime::new()?;
            let removal = runtime.block_on(oauth::remove_credential(&store, &name))?;
            if removal.revoked {
                out!("Revoked and removed `{name}`.");
            } else {
                out!("Removed `{name}`.");
            }
            if let Some(note) = removal.note {
                eprintln!("note: {note}");
            }
            Ok(0)
        }
    }
}

/// Opens the system browser and always prints the URL too.
struct PrintingBrowser;

impl oauth::BrowserOpener for PrintingBrowser {
    fn open(&self, url: &str) -> Result<(), String> {
        eprintln!("If no browser opens, visit:\n  {url}");
        oauth::BrowserOpener::open(&SystemBrowser, url)
    }
}

fn read_secret(name: &str) -> anyhow::Result<String> {
    let text = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(format!("Secret for `{name}` (input hidden): "))?
    } else {
        let mut buf = String::new();
        std::io::stdin().read_to_string(&mut buf)?;
        buf
    };
    let text = text.trim_end_matches(['\r', '\n']).to_owned();
    anyhow::ensure!(
        !text.is_empty(),
        "no secret given: pipe it on stdin or type it at the prompt"
    );
    Ok(text)
}
