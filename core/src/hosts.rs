//! The hosts a credential may be sent to, and the one function that decides whether a URL
//! is among them.
//!
//! A host is written `host` or `host:port` (`[::1]:8080` for IPv6), case-insensitive. Without
//! a port it means the default port of the URL's scheme (443 for https, 80 for http), so
//! `api.github.com` allows `https://api.github.com/…` but not `https://api.github.com:8443/`.
//! `*` allows every host, and only when written: there is no implicit wildcard. A list that
//! is empty allows nothing.

use std::fmt;

/// One allowed host.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: anywhere.
    Any,
    /// A host name or address (lower case, IPv6 in brackets), with a port or the scheme's.
    Host { name: String, port: Option<u16> },
}

impl HostPattern {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(Self::Any);
        }
        if text.is_empty() {
            return Err("a host is empty".to_owned());
        }
        if text.contains("://") || text.contains('/') {
            return Err(format!(
                "`{text}` is not a host: write `host` or `host:port`, without scheme or path"
            ));
        }
        // Parse it as a URL's authority, which lower-cases it and checks the port. The
        // port is read from the text: the parser drops one equal to http's default.
        let name = url::Url::parse(&format!("http://{text}/"))
            .ok()
            .filter(|u| u.username().is_empty() && u.password().is_none())
            .and_then(|u| u.host_str().map(str::to_owned))
            .filter(|name| !name.is_empty());
        match name {
            Some(name) => Ok(Self::Host {
                name,
                port: text
                    .rsplit_once(':')
                    .and_then(|(_, port)| port.parse::<u16>().ok()),
            }),
            None => Err(format!(
                "`{text}` is not a host: write `host` or `host:port` (e.g. api.github.com or 127.0.0.1:8080)"
            )),
        }
    }

    fn allows(&self, target: &Target) -> bool {
        match self {
            Self::Any => true,
            Self::Host { name, port } => {
                *name == target.name
                    && match port {
                        Some(port) => *port == target.port,
                        None => target.default_port,
                    }
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Host {
                name,
                port: Some(port),
            } => write!(f, "{name}:{port}"),
            Self::Host { name, port: None } => f.write_str(name),
        }
    }
}

/// The hosts a credential may be sent to. Empty: none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoundHosts(Vec<HostPattern>);

impl BoundHosts {
    /// No host at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses hosts given one by one (`--host` flags, stored lists). Duplicates are kept once.
    pub fn parse<S: AsRef<str>>(hosts: &[S]) -> Result<Self, String> {
        let mut bound = Self::none();
        for host in hosts {
            let pattern = HostPattern::parse(host.as_ref())?;
            if !bound.0.contains(&pattern) {
                bound.0.push(pattern);
            }
        }
        Ok(bound)
    }

    /// Parses a comma-separated list (`AGENTLOOM_SECRET_<NAME>_HOSTS`).
    pub fn parse_list(text: &str) -> Result<Self, String> {
        let hosts: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        Self::parse(&hosts)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a request to `url` may carry the credential.
    pub fn allows(&self, url: &url::Url) -> bool {
        Target::of(url).is_some_and(|target| self.0.iter().any(|p| p.allows(&target)))
    }

    /// The hosts as written (`host`, `host:port`, `*`), for storing and showing.
    pub fn to_strings(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for BoundHosts {
    /// `api.github.com, 127.0.0.1:8080`, or `no host` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no host");
        }
        f.write_str(&self.to_strings().join(", "))
    }
}

/// Where a request goes, as a host pattern would name it.
struct Target {
    name: String,
    port: u16,
    /// The port is the scheme's default (an explicit `:443` on https included).
    default_port: bool,
}

impl Target {
    fn of(url: &url::Url) -> Option<Self> {
        let name = url.host_str()?.to_ascii_lowercase();
        let port = url.port_or_known_default()?;
        // `Url` drops a port equal to the scheme's default, so `port()` is None exactly then.
        Some(Self {
            name,
            port,
            default_port: url.port().is_none(),
        })
    }
}

/// How an error names the host of `url`: `host` on the scheme's default port, else
/// `host:port`, i.e. what to add to a credential's hosts to allow it.
pub fn host_of(url: &url::Url) -> String {
    match Target::of(url) {
        Some(target) if target.default_port => target.name,
        Some(target) => format!("{}:{}", target.name, target.port),
        None => url.scheme().to_owned(),
    }
}

/// The API hosts of the providers Agentloom knows, for a credential of that provider (or
/// an environment credential of that name) that was given no hosts. Empty for others.
pub fn preset_hosts(provider: &str) -> &'static [&'static str] {
    match provider.to_ascii_lowercase().as_str() {
        "github" => &["api.github.com"],
        "google" | "gmail" => &["gmail.googleapis.com", "www.googleapis.com"],
        "openai" => &["api.openai.com"],
        "anthropic" => &["api.anthropic.com"],
        "brave" => &["api.search.brave.com"],
        "tavily" => &["api.tavily.com"],
        _ => &[],
    }
}

/// The environment variable that carries credential `name` for headless runs:
/// `AGENTLOOM_SECRET_` + the name upper-cased, with every non-alphanumeric as `_`.
pub fn secret_env_var(name: &str) -> String {
    let suffix: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("AGENTLOOM_SECRET_{suffix}")
}

/// Why a request carrying credential `credential` was not sent to `url`, and how to allow it.
pub fn refused_message(credential: &str, url: &url::Url, bound: &BoundHosts) -> String {
    let host = host_of(url);
    format!(
        "credential `{credential}` may not be sent to {host} (it is bound to {bound}); if that host is meant to get it, allow it with `agentloom credentials hosts {credential} --add {host}` (or, for an environment credential, {}_HOSTS)",
        secret_env_var(credential)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    fn url(text: &str) -> url::Url {
        url::Url::parse(text).unwrap()
    }

    fn bound(hosts: &[&str]) -> BoundHosts {
        BoundHosts::parse(hosts).unwrap()
    }

    #[test]
    fn a_host_without_port_means_the_schemes_default_port() {
        let github = bound(&["api.github.com"]);
        assert!(github.allows(&url("https://api.github.com/repos/x")));
        assert!(github.allows(&url("https://api.github.com:443/repos/x")));
        assert!(github.allows(&url("http://api.github.com/")));
        assert!(!github.allows(&url("https://api.github.com:8443/")));
        assert!(!github.allows(&url("https://evil.api.github.com/")));
        assert!(!github.allows(&url("https://api.github.com.evil.test/")));
    }

    #[test]
    fn names_are_case_insensitive_and_ports_exact() {
        let local = bound(&["LocalHost:4000", "127.0.0.1:80"]);
        assert!(local.allows(&url("http://localhost:4000/x")));
        assert!(local.allows(&url("http://LOCALHOST:4000/x")));
        assert!(!local.allows(&url("http://localhost:4001/x")));
        assert!(!local.allows(&url("http://127.0.0.1:4000/x")));
        // An explicit :80 still matches http's default port.
        assert!(local.allows(&url("http://127.0.0.1/x")));
        assert!(!local.allows(&url("https://127.0.0.1/x")));
        assert_eq!(local.to_strings(), ["localhost:4000", "127.0.0.1:80"]);
    }

    #[test]
    fn ipv6_and_the_explicit_wildcard() {
        let v6 = bound(&["[::1]:9000"]);
        assert!(v6.allows(&url("http://[::1]:9000/")));
        assert!(!v6.allows(&url("http://127.0.0.1:9000/")));
        let any = BoundHosts::parse_list(" * ").unwrap();
        assert!(any.allows(&url("https://anything.test:1234/")));
        assert!(!BoundHosts::none().allows(&url("https://api.github.com/")));
        assert_eq!(BoundHosts::none().to_string(), "no host");
    }

    #[test]
    fn lists_and_mistakes() {
        let list = BoundHosts::parse_list("api.openai.com, 127.0.0.1:8080,,").unwrap();
        assert_eq!(list.to_string(), "api.openai.com, 127.0.0.1:8080");
        for bad in [
            "https://api.github.com",
            "api.github.com/x",
            "a:b",
            "user@host",
            "",
        ] {
            let err = BoundHosts::parse(&[bad]).unwrap_err();
            assert!(err.contains("host"), "{bad}: {err}");
        }
    }

    #[test]
    fn errors_name_hosts_as_they_would_be_allowed() {
        assert_eq!(host_of(&url("https://api.github.com/x")), "api.github.com");
        assert_eq!(host_of(&url("http://127.0.0.1:4000/x")), "127.0.0.1:4000");
        assert_eq!(host_of(&url("http://[::1]:9/")), "[::1]:9");
        let message = refused_message(
            "github",
            &url("http://127.0.0.1:4000/x?token=1"),
            &bound(&["api.github.com"]),
        );
        assert_eq!(
            message,
            "credential `github` may not be sent to 127.0.0.1:4000 (it is bound to api.github.com); if that host is meant to get it, allow it with `agentloom credentials hosts github --add 127.0.0.1:4000` (or, for an environment credential, AGENTLOOM_SECRET_GITHUB_HOSTS)"
        );
    }

    #[test]
    fn a_port_is_read_whole() {
        let odd = bound(&["host.test:180"]);
        assert!(odd.allows(&url("http://host.test:180/")));
        assert!(!odd.allows(&url("http://host.test/")));
        assert_eq!(preset_hosts("GitHub"), ["api.github.com"]);
        assert!(preset_hosts("generic").is_empty());
    }
}
