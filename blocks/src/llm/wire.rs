//! What differs between the providers' chat APIs, as one trait: where a call goes, the
//! headers and body it carries, how a whole reply reads and how a streamed one is framed
//! and assembled. `provider.rs` does what is the same for all (sending, retries, reading,
//! errors); `openai.rs`, `anthropic.rs` and `ollama.rs` each implement [`WireFormat`].

use reqwest::header::{AUTHORIZATION, HeaderName};
use serde_json::Value as Json;

use super::types::{ChatRequest, Reply};

/// Who a provider is: its name, how messages name it, where it is by default.
#[derive(Clone, Copy, Debug)]
pub(crate) struct About {
    /// The block config's `provider` value, e.g. `openai`.
    pub name: &'static str,
    /// How messages name the server, e.g. `Anthropic`.
    pub title: &'static str,
    pub default_base_url: &'static str,
    /// The model runs on this machine: one missing from the price table costs nothing.
    pub runs_locally: bool,
}

impl About {
    /// A hosted API. Its key comes only from the credential the block names: none is
    /// implied, so a block without one sends no key (and the API answers 401).
    pub(crate) const fn hosted(
        name: &'static str,
        title: &'static str,
        default_base_url: &'static str,
    ) -> Self {
        Self {
            name,
            title,
            default_base_url,
            runs_locally: false,
        }
    }
}

/// One provider's chat API.
pub(crate) trait WireFormat: Send + Sync + std::fmt::Debug {
    fn about(&self) -> About;
    fn name(&self) -> &'static str {
        self.about().name
    }
    fn title(&self) -> &'static str {
        self.about().title
    }
    fn default_base_url(&self) -> &'static str {
        self.about().default_base_url
    }
    fn runs_locally(&self) -> bool {
        self.about().runs_locally
    }
    /// The chat URL under `base_url` (which has no trailing slash).
    fn url(&self, base_url: &str) -> String;
    /// Headers every call carries besides the key.
    fn fixed_headers(&self) -> Vec<(HeaderName, &'static str)> {
        Vec::new()
    }
    /// The header carrying the API key, and its value.
    fn key_header(&self, key: &str) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {key}"))
    }
    /// The request body for `request`, sent to `base_url`.
    fn body(&self, request: &ChatRequest, base_url: &str) -> Json;
    /// A whole (not streamed) reply, or what is wrong with its shape.
    fn parse_reply(&self, json: &Json) -> Result<Reply, String>;
    /// How a streamed reply is cut into pieces.
    fn framing(&self) -> Framing {
        Framing::ServerSentEvents
    }
    /// A fresh assembler of one streamed reply.
    fn stream_parser(&self) -> Box<dyn StreamParse>;
    /// What a "model not found" message adds: how to get the model, or what to check.
    fn not_found_hint(&self, model: &str) -> String;
    /// What a "could not connect" message adds.
    fn connect_hint(&self) -> &'static str {
        "; is the server running and base_url right?"
    }
}

/// How a streamed reply is cut into the pieces a [`StreamParse`] is fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events: each piece is an event name and its data.
    ServerSentEvents,
    /// One JSON document per line; the event name is empty.
    JsonLines,
}

/// Assembles one streamed reply from its pieces.
pub(crate) trait StreamParse: Send {
    /// Feeds one piece; returns the text it adds, if any.
    fn feed(&mut self, event: &str, data: &str) -> Result<Option<String>, StreamFault>;
    /// The end marker arrived: nothing more is to be read.
    fn is_done(&self) -> bool;
    /// The reply is whole (its end marker, or what some servers send instead).
    fn is_complete(&self) -> bool;
    /// Characters of text so far, for messages about a cut-off stream.
    fn text_len(&self) -> usize;
    fn into_reply(self: Box<Self>) -> Reply;
}

/// Something wrong inside a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StreamFault {
    /// The provider reported an error in the stream.
    Provider(String),
    /// The stream held something that is not the expected format.
    Malformed(String),
}
