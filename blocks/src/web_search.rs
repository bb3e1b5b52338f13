//! `web.search`: searches the web through a SearXNG instance, the Brave Search API or
//! Tavily, and outputs the top results. The agent's `web_search` tool uses the same search.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, Value, ValueMap, ValueType, async_trait,
};

use crate::net;

pub(crate) const PROVIDERS: [&str; 3] = ["searxng", "brave", "tavily"];
const DEFAULT_MAX_RESULTS: u64 = 5;
/// How long one search may take.
const SEARCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The blocks this file provides.
pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(WebSearch::new())]
}

/// Where and how to search, read from config.
#[derive(Clone, Debug)]
pub(crate) struct SearchSettings {
    pub provider: String,
    /// The API root: the SearXNG instance, or a Brave/Tavily URL override.
    pub base_url: String,
    /// The stored credential with the API key (Brave, Tavily; optional for SearXNG).
    pub credential: Option<String>,
    pub max_results: usize,
}

impl SearchSettings {
    /// Reads `{prefix}provider`, `{prefix}url`, `{prefix}credential`, `{prefix}max_results`.
    pub(crate) fn from_config(config: &Config, prefix: &str) -> Result<Self, ConfigError> {
        let reader = ConfigReader(config);
        let field = |name: &str| format!("{prefix}{name}");
        let provider = reader
            .choice_or(&field("provider"), &PROVIDERS, "searxng")?
            .to_owned();
        let url = reader
            .str(&field("url"))?
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        let base_url = match (provider.as_str(), url) {
            (_, Some(url)) => url,
            ("brave", None) => "https://api.search.brave.com".to_owned(),
            ("tavily", None) => "https://api.tavily.com".to_owned(),
            _ => {
                return Err(ConfigError::new(
                    &field("url"),
                    "is required for SearXNG: the URL of the instance, e.g. http://127.0.0.1:8888",
                ));
            }
        };
        reqwest::Url::parse(&base_url).map_err(|e| {
            ConfigError::new(&field("url"), format!("`{base_url}` is not a URL: {e}"))
        })?;
        let credential = reader
            .str(&field("credential"))?
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if credential.is_none() && provider != "searxng" {
            return Err(ConfigError::new(
                &field("credential"),
                format!("is required for {provider}: the stored credential with the API key"),
            ));
        }
        let max_results = reader.u64_or(&field("max_results"), DEFAULT_MAX_RESULTS)?;
        Ok(SearchSettings {
            provider,
            base_url: base_url.trim_end_matches('/').to_owned(),
            credential,
            max_results: usize::try_from(max_results.clamp(1, 50)).unwrap_or(5),
        })
    }
}

/// The config fields of a search, named with `prefix`.
pub(crate) fn search_fields(meta: BlockMeta, prefix: &str) -> BlockMeta {
    meta.field(
        ConfigField::choice(&format!("{prefix}provider"), "Search provider", &PROVIDERS)
            .default_value(serde_json::json!("searxng"))
            .help("searxng: a SearXNG instance (its JSON format must be enabled). brave: the Brave Search API. tavily: the Tavily API."),
    )
    .field(ConfigField::text(&format!("{prefix}url"), "Search URL").help(
        "SearXNG: the instance URL (required). Brave and Tavily: empty for their public API.",
    ))
    .field(
        ConfigField::credential(&format!("{prefix}credential"), "Search credential", "search")
            .help("The stored credential with the API key (Brave, Tavily). Headless runs read AGENTLOOM_SECRET_<NAME>."),
    )
    .field(
        ConfigField::integer(&format!("{prefix}max_results"), "Max results", Some(1), Some(50))
            .default_value(serde_json::json!(DEFAULT_MAX_RESULTS))
            .help("How many results to return (1 to 50)."),
    )
}

/// One search result.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

impl Hit {
    fn to_value(&self) -> Value {
        Value::object(BTreeMap::from([
            ("title".to_owned(), Value::text(self.title.clone())),
            ("url".to_owned(), Value::text(self.url.clone())),
            ("snippet".to_owned(), Value::text(self.snippet.clone())),
        ]))
    }
}

/// Searches for `query`.
pub(crate) async fn search(
    ctx: &dyn RunCtx,
    settings: &SearchSettings,
    query: &str,
) -> Result<Vec<Hit>, BlockError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(BlockError::input(
            "query",
            "is empty: say what to search for",
        ));
    }
    // The instance is a URL the graph file chose: a local SearXNG is reached only when
    // the run may reach the private network (not for a file that is not trusted).
    let reach = net::Reach::Any;
    let client = net::client_for(ctx, reach)?;
    let base = &settings.base_url;
    let key = match &settings.credential {
        Some(name) => {
            let url = reqwest::Url::parse(base).map_err(|e| {
                BlockError::permanent(format!("`{base}` is not a valid search URL: {e}"))
            })?;
            Some(net::credential_for(ctx, name, &url)?)
        }
        None => None,
    };
    let request = match settings.provider.as_str() {
        "brave" => client
            .get(format!("{base}/res/v1/web/search"))
            .query(&[("q", query), ("count", &settings.max_results.to_string())])
            .header("Accept", "application/json")
            .header(
                "X-Subscription-Token",
                key.as_ref().map(|k| k.expose()).unwrap_or_default(),
            ),
        "tavily" => client
            .post(format!("{base}/search"))
            .bearer_auth(key.as_ref().map(|k| k.expose()).unwrap_or_default())
            .json(&serde_json::json!({"query": query, "max_results": settings.max_results})),
        _ => {
            let request = client
                .get(format!("{base}/search"))
                .query(&[("q", query), ("format", "json")]);
            match &key {
                Some(key) => request.bearer_auth(key.expose()),
                None => request,
            }
        }
    };
    let shown = format!("{} search at {base}", settings.provider);
    let request = request.timeout(SEARCH_TIMEOUT);
    let sent = net::send_within(ctx, reach, request, |e| {
        if let Some(refused) = net::local_address_refused(&e) {
            return BlockError::permanent(format!("{shown} was refused: {refused}"));
        }
        BlockError::transient(format!(
            "{shown} failed: {}",
            without_secrets(&e.to_string())
        ))
    })
    .await?;
    let status = sent.response.status();
    // The host's request slot is held until the answer is read.
    let body = sent.response.text().await.map_err(|e| {
        BlockError::transient(format!("{shown}: the answer could not be read: {e}"))
    })?;
    if !status.is_success() {
        let message = format!(
            "{shown} answered HTTP {}: {}",
            status.as_u16(),
            agentloom_core::clip_chars(body.trim(), 300)
        );
        return Err(if status.is_server_error() || status.as_u16() == 429 {
            BlockError::transient(message)
        } else {
            BlockError::permanent(message)
        });
    }
    let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| {
        BlockError::permanent(format!(
            "{shown} did not answer JSON ({e}); for SearXNG, enable the json format in its settings"
        ))
    })?;
    let (items, snippet_field) = match settings.provider.as_str() {
        "brave" => (json.pointer("/web/results"), "description"),
        _ => (json.get("results"), "content"),
    };
    let hits = items
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items
                .iter()
                .take(settings.max_results)
                .map(|item| {
                    let field = |name: &str| {
                        item.get(name)
                            .and_then(serde_json::Value::as_str)
                            .unwrap_or_default()
                            .trim()
                            .to_owned()
                    };
                    Hit {
                        title: field("title"),
                        url: field("url"),
                        snippet: field(snippet_field),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(hits)
}

/// Request errors name the URL; keep API keys in a query out of them.
fn without_secrets(text: &str) -> String {
    text.split_whitespace()
        .map(|word| match word.find('?') {
            Some(at) if word.starts_with("http") || word.starts_with("(http") => &word[..at],
            _ => word,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

struct WebSearch {
    meta: BlockMeta,
}

impl WebSearch {
    fn new() -> Self {
        let meta = BlockMeta::new(
            "web.search",
            "Web search",
            "Network",
            "Searches the web (SearXNG, Brave Search or Tavily) and outputs the top results as {title, url, snippet}.",
        );
        Self {
            meta: search_fields(meta, ""),
        }
    }
}

impl Block for WebSearch {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let settings = SearchSettings::from_config(config, "")?;
        let ports = Ports::new(
            vec![PortSpec::new("query", ValueType::Text).describe("What to search for.")],
            vec![
                PortSpec::new("results", ValueType::list_of(ValueType::Object))
                    .describe("The top results: [{title, url, snippet}]."),
            ],
        );
        Ok(Arc::new(SearchNode { settings, ports }))
    }
}

struct SearchNode {
    settings: SearchSettings,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for SearchNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let query = inputs.take_text("query")?;
        let hits = search(ctx, &self.settings, &query).await?;
        Ok(agentloom_core::outputs([(
            "results",
            Value::list(hits.iter().map(Hit::to_value).collect()),
        )]))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;
    use crate::testing::{TestCtx, run_block, run_block_with};
    use axum::Json;
    use axum::extract::Query;
    use axum::routing::get;

    /// A local server answering like SearXNG's `/search?format=json`.
    async fn searxng() -> String {
        searxng_on("127.0.0.1").await.0
    }

    /// [`searxng`] on loopback address `ip`, with the number of searches it answered.
    async fn searxng_on(ip: &str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        let app = axum::Router::new().route(
            "/search",
            get(move |Query(q): Query<BTreeMap<String, String>>| async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(q.get("format").map(String::as_str), Some("json"));
                let query = q.get("q").cloned().unwrap_or_default();
                Json(serde_json::json!({
                    "query": query,
                    "number_of_results": 2,
                    "results": [
                        {"title": format!("About {query}"), "url": "https://example.org/a", "content": "First snippet.", "engine": "ddg"},
                        {"title": "Second", "url": "https://example.org/b", "content": "Second snippet.", "engine": "ddg"}
                    ]
                }))
            }),
        );
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), hits)
    }

    #[tokio::test]
    async fn a_run_that_may_not_reach_the_private_network_reaches_no_local_instance() {
        let (url, hits) = searxng_on("127.0.0.1").await;
        let port = url.rsplit(':').next().unwrap().to_owned();
        let (other, other_hits) = searxng_on("127.0.0.2").await;
        let untrusted = TestCtx::new().with_private_network(false);
        let query = || ValueMap::from([("query".to_owned(), Value::from("rust egui"))]);
        for base in [
            url.clone(),
            format!("http://127.0.0.1:{port}/latest/meta-data/iam#"),
            format!("http://127.1:{port}"),
            format!("http://[::ffff:127.0.0.1]:{port}"),
            format!("http://localhost:{port}"),
            other,
        ] {
            let err = run_block_with(
                &untrusted,
                "web.search",
                serde_json::json!({"provider": "searxng", "url": base}),
                query(),
            )
            .await
            .unwrap_err();
            assert_eq!(
                err.class,
                agentloom_core::ErrorClass::Permanent,
                "{base}: {}",
                err.message
            );
            assert!(
                err.message.contains("is a loopback address, which this run may not reach: its graph file is not trusted (if you trust it: agentloom trust FILE)"),
                "{base}: {}",
                err.message
            );
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // The agent's web_search tool searches the same way.
        let settings = SearchSettings {
            provider: "searxng".to_owned(),
            base_url: url.clone(),
            credential: None,
            max_results: 1,
        };
        let err = search(&untrusted, &settings, "rust").await.unwrap_err();
        assert!(err.message.contains("not trusted"), "{}", err.message);
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
        // A run that may (the default) searches a local instance as before.
        for ctx in [TestCtx::new(), TestCtx::new().with_private_network(true)] {
            let out = run_block_with(
                &ctx,
                "web.search",
                serde_json::json!({"provider": "searxng", "url": url, "max_results": 1}),
                query(),
            )
            .await
            .unwrap();
            assert_eq!(out["results"].to_json()[0]["title"], "About rust egui");
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn searches_a_searxng_instance() {
        let url = searxng().await;
        let out = run_block(
            "web.search",
            serde_json::json!({"provider": "searxng", "url": url, "max_results": 1}),
            ValueMap::from([("query".to_owned(), Value::from("rust egui"))]),
        )
        .await
        .unwrap();
        assert_eq!(
            out["results"].to_json(),
            serde_json::json!([{"title": "About rust egui", "url": "https://example.org/a", "snippet": "First snippet."}])
        );
    }

    #[test]
    fn brave_needs_a_credential_and_searxng_a_url() {
        let config = |json: serde_json::Value| {
            agentloom_core::Config::from(json.as_object().unwrap().clone())
        };
        let err =
            SearchSettings::from_config(&config(serde_json::json!({"provider": "brave"})), "")
                .err()
                .unwrap();
        assert_eq!(err.field, "credential");
        let err = SearchSettings::from_config(&config(serde_json::json!({})), "")
            .err()
            .unwrap();
        assert_eq!(err.field, "url");
    }
}
