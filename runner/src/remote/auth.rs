//! How [`super::Nats::connect`] authenticates, and the server list it shows in messages.
//!
//! Credentials come from the URL (`nats://user:password@host`, `nats://TOKEN@host`,
//! percent-encoded) or, when the URL has none, from `NATS_USER` + `NATS_PASSWORD` or
//! `NATS_TOKEN`; `NATS_NKEY` names an NKey seed file, `NATS_CREDS` a credentials file;
//! `NATS_CERT` + `NATS_KEY` a client certificate and `NATS_CA` the CA to trust (either makes
//! TLS required). The client is handed the server URLs without their credentials, and every
//! message shows them with the secret replaced by `***`.

use std::path::{Path, PathBuf};

use async_nats::ConnectOptions;

/// A user name and password, or a token.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Secret {
    UserPassword(String, String),
    Token(String),
}

impl Secret {
    /// The text that must never appear in a message.
    fn hidden(&self) -> &str {
        match self {
            Secret::UserPassword(_, password) => password,
            Secret::Token(token) => token,
        }
    }
}

/// The servers of a `--nats` URL (comma-separated for a cluster), split from their
/// credentials.
pub(super) struct Servers {
    /// Each server's URL with no credentials in it: what the client is handed.
    pub addresses: Vec<String>,
    /// The credentials the URLs carry (the same on each that carries any).
    pub secret: Option<Secret>,
    /// The raw and decoded credentials seen in the URL, to scrub from any message.
    hidden: Vec<String>,
}

impl Servers {
    /// Fails with a message that shows no credential; [`redact_list`] names the servers.
    pub fn parse(url: &str) -> Result<Servers, String> {
        let entries = entries(url);
        let mut servers = Servers {
            addresses: Vec::new(),
            secret: None,
            hidden: Vec::new(),
        };
        for entry in entries {
            let Some((scheme, userinfo, host)) = split_userinfo(entry) else {
                servers.addresses.push(entry.to_owned());
                continue;
            };
            servers.addresses.push(format!("{scheme}{host}"));
            let raw_secret = userinfo.split_once(':').map_or(userinfo, |(_, pass)| pass);
            if !raw_secret.is_empty() {
                servers.hidden.push(raw_secret.to_owned());
            }
            let secret = match userinfo.split_once(':') {
                Some((user, password)) => {
                    Secret::UserPassword(decode(user, "user name")?, decode(password, "password")?)
                }
                // A user name alone is a token, as in the other NATS clients.
                None => Secret::Token(decode(userinfo, "token")?),
            };
            servers.hidden.push(secret.hidden().to_owned());
            match &servers.secret {
                Some(known) if *known != secret => {
                    return Err("the servers of the list carry different credentials; give \
                                them once (NATS_USER and NATS_PASSWORD, or NATS_TOKEN)"
                        .to_owned());
                }
                _ => servers.secret = Some(secret),
            }
        }
        servers.hidden.retain(|s| !s.is_empty());
        Ok(servers)
    }

    /// `message` with every credential of the URL replaced by `***`.
    pub fn scrub(&self, message: &str) -> String {
        let mut message = message.to_owned();
        for secret in &self.hidden {
            message = message.replace(secret.as_str(), "***");
        }
        message
    }

    /// `options` with the credentials, keys and certificates to connect with.
    pub async fn options(&mut self, mut options: ConnectOptions) -> Result<ConnectOptions, String> {
        let secret = match self.secret.clone() {
            Some(secret) => Some(secret),
            None => secret_from_env()?,
        };
        match secret {
            Some(Secret::UserPassword(user, password)) => {
                self.hidden.push(password.clone());
                options = options.user_and_password(user, password);
            }
            Some(Secret::Token(token)) => {
                self.hidden.push(token.clone());
                options = options.token(token);
            }
            None => {}
        }
        self.hidden.retain(|s| !s.is_empty());
        if let Some(path) = env_path("NATS_NKEY") {
            let seed =
                read_seed(&path).map_err(|e| format!("NATS_NKEY {}: {e}", path.display()))?;
            self.hidden.push(seed.clone());
            options = options.nkey(seed);
        }
        if let Some(creds) = env_path("NATS_CREDS") {
            options = options
                .credentials_file(&creds)
                .await
                .map_err(|e| format!("NATS_CREDS {}: {e}", creds.display()))?;
        }
        match (env_path("NATS_CERT"), env_path("NATS_KEY")) {
            (Some(cert), Some(key)) => {
                readable("NATS_CERT", &cert)?;
                readable("NATS_KEY", &key)?;
                options = options.add_client_certificate(cert, key).require_tls(true);
            }
            (Some(_), None) => return Err("NATS_CERT needs NATS_KEY (its private key)".into()),
            (None, Some(_)) => return Err("NATS_KEY needs NATS_CERT (its certificate)".into()),
            (None, None) => {}
        }
        if let Some(ca) = env_path("NATS_CA") {
            readable("NATS_CA", &ca)?;
            options = options.add_root_certificates(ca).require_tls(true);
        }
        Ok(options)
    }
}

/// The servers of a comma-separated list.
fn entries(url: &str) -> Vec<&str> {
    url.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// `url` (comma-separated for a cluster) with every password and token replaced by `***`.
pub(super) fn redact_list(url: &str) -> String {
    entries(url)
        .into_iter()
        .map(redact)
        .collect::<Vec<_>>()
        .join(",")
}

/// `scheme://`, the user information and the rest of `entry`, when it has credentials.
fn split_userinfo(entry: &str) -> Option<(&str, &str, &str)> {
    let start = entry.find("://").map_or(0, |i| i + 3);
    // The last `@`: a password may hold an unencoded one; a NATS URL has no path that could.
    let at = entry[start..].rfind('@')? + start;
    Some((&entry[..start], &entry[start..at], &entry[at + 1..]))
}

/// `entry` with its password or token replaced by `***`.
fn redact(entry: &str) -> String {
    match split_userinfo(entry) {
        None => entry.to_owned(),
        Some((scheme, userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}{user}:***@{host}"),
            None => format!("{scheme}***@{host}"),
        },
    }
}

/// Percent-decodes `text`, a part of a URL (`what` names it in the error, never its value).
fn decode(text: &str, what: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = bytes
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| format!("the {what} in the URL is not UTF-8 once percent-decoded"))
}

fn env_text(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `NATS_USER` + `NATS_PASSWORD`, or `NATS_TOKEN`.
fn secret_from_env() -> Result<Option<Secret>, String> {
    match (
        env_text("NATS_USER"),
        env_text("NATS_PASSWORD"),
        env_text("NATS_TOKEN"),
    ) {
        (Some(_), Some(_), Some(_)) => {
            Err("give NATS_USER and NATS_PASSWORD, or NATS_TOKEN, not both".into())
        }
        (Some(user), Some(password), None) => Ok(Some(Secret::UserPassword(user, password))),
        (Some(_), None, _) => Err("NATS_USER needs NATS_PASSWORD".into()),
        (None, Some(_), _) => Err("NATS_PASSWORD needs NATS_USER".into()),
        (None, None, token) => Ok(token.map(Secret::Token)),
    }
}

/// The user seed (`SU…`) in an NKey seed file, alone or among other lines.
fn read_seed(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with("SU"))
        .map(str::to_owned)
        .ok_or_else(|| "no user NKey seed in it (a line starting with SU)".to_owned())
}

fn readable(variable: &str, path: &Path) -> Result<(), String> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|e| format!("{variable} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_urls_and_messages() {
        let url = "nats://alice:p%40ss@127.0.0.1:4222, nats://alice:p%40ss@10.0.0.2:4222";
        let servers = Servers::parse(url).ok().unwrap_or_else(|| panic!("parses"));
        assert_eq!(
            servers.addresses,
            ["nats://127.0.0.1:4222", "nats://10.0.0.2:4222"]
        );
        assert_eq!(
            redact_list(url),
            "nats://alice:***@127.0.0.1:4222,nats://alice:***@10.0.0.2:4222"
        );
        assert!(
            servers.secret == Some(Secret::UserPassword("alice".into(), "p@ss".into())),
            "decoded"
        );
        assert_eq!(servers.scrub("bad p@ss and p%40ss"), "bad *** and ***");

        let servers = Servers::parse("tls://s3cr3t@host:4222")
            .ok()
            .unwrap_or_else(|| panic!("parses"));
        assert_eq!(servers.addresses, ["tls://host:4222"]);
        assert_eq!(redact_list("tls://s3cr3t@host:4222"), "tls://***@host:4222");
        assert!(servers.secret == Some(Secret::Token("s3cr3t".into())));

        let servers = Servers::parse("127.0.0.1:4222")
            .ok()
            .unwrap_or_else(|| panic!("parses"));
        assert_eq!(servers.addresses, ["127.0.0.1:4222"]);
        assert!(servers.secret.is_none());
    }

    #[test]
    fn different_credentials_on_one_cluster_are_refused_without_showing_them() {
        let url = "nats://a:one@h1:4222,nats://a:two@h2:4222";
        let Err(message) = Servers::parse(url) else {
            panic!("different credentials accepted");
        };
        assert_eq!(
            redact_list(url),
            "nats://a:***@h1:4222,nats://a:***@h2:4222"
        );
        assert!(
            !message.contains("one") && !message.contains("two"),
            "{message}"
        );
    }
}
