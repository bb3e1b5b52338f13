//! `agentloom credentials list|add|login|remove`: the keychain credentials from the shell.
//! Secrets are read from stdin (when it is not a terminal) or a hidden prompt, never from
//! arguments.

use std::io::{IsTerminal as _, Read as _};
use std::sync::Arc;
use std::time::Duration;

use agentloom_core::BoundHosts;
use agentloom_engine::credentials::oauth::{self, Provider, SystemBrowser};
use agentloom_engine::credentials::unix_now;
use agentloom_engine::credentials::{self, CredentialError};
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
        /// A host it may be sent to: `host` or `host:port` (`*`: any). Repeatable. Default:
        /// the provider's API hosts (github, google, openai, anthropic, brave, tavily).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
    },
    /// Show or change the hosts a credential may be sent to.
    Hosts {
        name: String,
        /// Allow one more host (`host` or `host:port`). Repeatable.
        #[arg(long, value_name = "HOST")]
        add: Vec<String>,
        /// Stop allowing a host. Repeatable.
        #[arg(long, value_name = "HOST")]
        remove: Vec<String>,
        /// Replace the hosts with these. Repeatable.
        #[arg(long, value_name = "HOST", conflicts_with_all = ["add", "remove"])]
        set: Vec<String>,
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
        /// A host the token may be sent to (repeatable). Default: the provider's API hosts
        /// (GitHub: api.github.com, or the --issuer host; Google: the Gmail API hosts; an
        /// OpenID provider: its issuer's host).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
    },
    /// Remove a credential (OAuth tokens are revoked at the provider where possible).
    Remove { name: String },
}

pub fn credentials_command(cmd: CredentialsCmd) -> anyhow::Result<i32> {
    let store = Arc::new(CredentialStore::open_default()?);
    match cmd {
        CredentialsCmd::List { json } => list(&store, json)?,
        CredentialsCmd::Add {
            name,
            provider,
            hosts,
        } => add(&store, &name, provider, &hosts)?,
        CredentialsCmd::Hosts {
            name,
            add,
            remove,
            set,
        } => change_hosts(&store, &name, &add, &remove, &set)?,
        CredentialsCmd::Login {
            provider,
            name,
            client_id,
            issuer,
            device,
            hosts,
        } => {
            let mut hosts = parse_hosts("--host", &hosts)?;
            if let (true, "github", Some(base)) = (hosts.is_empty(), provider.as_str(), &issuer) {
                // GitHub Enterprise Server serves its API on its own host.
                hosts = parse_hosts("--issuer", &credentials::default_hosts(base))?;
            }
            store.check_available()?;
            let client_id = client_id.context("--client-id is required: create an OAuth app and pass its client id (see docs/credentials.md)")?;
            let runtime = super::async_runtime()?;
            let tokens =
                runtime.block_on(sign_in(&provider, &client_id, issuer.as_deref(), device))?;
            let name = name.unwrap_or_else(|| provider.clone());
            let stored = StoredSecret::OAuth(tokens);
            let info = if hosts.is_empty() {
                store.put(&name, &stored)?
            } else {
                store.put_with_hosts(&name, &stored, &hosts)?
            };
            out!(
                "Signed in; stored as credential `{name}`; it may be sent to {}.",
                shown_hosts(&info.hosts)
            );
        }
        CredentialsCmd::Remove { name } => {
            let runtime = super::async_runtime()?;
            let removal = runtime.block_on(oauth::remove_credential(&store, &name))?;
            if removal.revoked {
                out!("Revoked and removed `{name}`.");
            } else {
                out!("Removed `{name}`.");
            }
            if let Some(note) = removal.note {
                eprintln!("note: {note}");
            }
        }
    }
    Ok(0)
}

/// `credentials list`: each credential's kind, provider, status, expiry, hosts and scopes.
fn list(store: &CredentialStore, json: bool) -> anyhow::Result<()> {
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
            let hosts = if c.hosts.is_empty() {
                "(no host)".to_owned()
            } else {
                c.hosts.join(",")
            };
            out!(
                "{:<24} {:<7} {:<12} {:<18} {:<12} {:<28} {}",
                c.name,
                c.kind.to_string(),
                c.provider,
                c.status(now),
                expiry,
                hosts,
                c.scopes.join(" ")
            );
        }
    }
    if !json {
        out!(
            "Secrets are kept in {}; the list is {}.",
            credentials::KEYCHAIN_NAME,
            store.index_path().display()
        );
    }
    if let Err(e) = store.check_available() {
        eprintln!("warning: {e}");
    }
    Ok(())
}

/// `credentials add`: an API key or token read from stdin or a hidden prompt.
fn add(
    store: &CredentialStore,
    name: &str,
    provider: String,
    hosts: &[String],
) -> anyhow::Result<()> {
    let hosts = BoundHosts::parse(hosts).map_err(|e| anyhow::anyhow!("--host: {e}"))?;
    store.check_available()?;
    let secret = read_secret(name)?;
    let info = store.put_with_hosts(
        name,
        &StoredSecret::ApiKey {
            provider,
            key: secret,
        },
        &hosts,
    )?;
    out!(
        "Stored credential `{name}` in the keychain; it may be sent to {}.",
        shown_hosts(&info.hosts)
    );
    Ok(())
}

/// `credentials hosts`: shows the hosts credential `name` may be sent to, or replaces
/// them (`set`), or adds and removes some.
fn change_hosts(
    store: &CredentialStore,
    name: &str,
    add: &[String],
    remove: &[String],
    set: &[String],
) -> anyhow::Result<()> {
    let info = store.info(name)?.ok_or_else(|| CredentialError::NotFound {
        name: name.to_owned(),
    })?;
    let info = if !set.is_empty() {
        store.set_hosts(name, &parse_hosts("--set", set)?)?
    } else if add.is_empty() && remove.is_empty() {
        info
    } else {
        let added = parse_hosts("--add", add)?.to_strings();
        let removed = parse_hosts("--remove", remove)?.to_strings();
        let mut hosts = info.hosts;
        hosts.retain(|h| !removed.contains(h));
        hosts.extend(added);
        anyhow::ensure!(
            !hosts.is_empty(),
            "credential `{name}` would be bound to no host; use --set to replace its hosts"
        );
        store.set_hosts(name, &parse_hosts("the stored hosts", &hosts)?)?
    };
    out!(
        "Credential `{name}` may be sent to {}.",
        shown_hosts(&info.hosts)
    );
    Ok(())
}

/// Signs in with `provider` (`github`, `google`, `oidc` at `issuer`) as OAuth app
/// `client_id`, in the browser or with the device flow.
async fn sign_in(
    provider: &str,
    client_id: &str,
    issuer: Option<&str>,
    device: bool,
) -> anyhow::Result<agentloom_engine::OAuthTokens> {
    let profile = match provider {
        "github" => match issuer {
            Some(base) => Provider::github_at(base, client_id),
            None => Provider::github(client_id),
        },
        "google" => {
            let secret = std::env::var("AGENTLOOM_OAUTH_CLIENT_SECRET").ok();
            Provider::google(client_id, secret.as_deref())
        }
        "oidc" => {
            let issuer = issuer.context("`oidc` needs --issuer URL")?;
            Provider::discover(issuer, client_id).await?
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
}

fn parse_hosts(flag: &str, hosts: &[String]) -> anyhow::Result<BoundHosts> {
    BoundHosts::parse(hosts).map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

/// `a, b`, or `no host` (then it is sent nowhere).
fn shown_hosts(hosts: &[String]) -> String {
    if hosts.is_empty() {
        "no host (add one with `agentloom credentials hosts NAME --add HOST`)".to_owned()
    } else {
        hosts.join(", ")
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
