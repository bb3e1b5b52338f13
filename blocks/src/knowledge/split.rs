//! `text.split`: documents (or plain text) into chunks for embedding — by characters or
//! tokens with overlap, by Markdown headings, or by sentences. Every chunk keeps its
//! document's source and metadata and its byte offsets in the document's text.

use std::sync::Arc;

use agentloom_core::{
    Block, BlockError, BlockMeta, Config, ConfigCtx, ConfigError, ConfigField, ConfigReader,
    InputsExt as _, NodeImpl, PortSpec, Ports, RunCtx, ValueMap, ValueType, async_trait,
};

use super::values::{Chunk, Document, chunks_value, documents_from};

const METHODS: [&str; 4] = ["characters", "tokens", "markdown", "sentences"];
const DEFAULT_SIZE: u64 = 1000;
const DEFAULT_OVERLAP: u64 = 100;

/// How to cut text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// At most `size` characters, `overlap` shared with the previous chunk, cut at white
    /// space where there is some.
    Characters,
    /// At most `size` tokens (words and punctuation marks), `overlap` shared.
    Tokens,
    /// One chunk per Markdown section (a heading and what follows it), long sections cut
    /// by characters.
    Markdown,
    /// Whole sentences gathered up to `size` characters; `overlap` counts sentences.
    Sentences,
}

/// Chunk sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub size: usize,
    pub overlap: usize,
}

/// Byte ranges of the chunks of `text`, in order.
pub fn split_ranges(text: &str, method: Method, sizes: Sizes) -> Vec<(usize, usize)> {
    let ranges = match method {
        Method::Characters => by_characters(text, 0, text.len(), sizes),
        Method::Tokens => by_tokens(text, sizes),
        Method::Markdown => by_headings(text)
            .into_iter()
            .flat_map(|(start, end)| {
                if text[start..end].chars().count() <= sizes.size {
                    vec![(start, end)]
                } else {
                    by_characters(text, start, end, sizes)
                }
            })
            .collect(),
        Method::Sentences => by_sentences(text, sizes),
    };
    ranges
        .into_iter()
        .map(|(start, end)| trim_range(text, start, end))
        .filter(|(start, end)| end > start)
        .collect()
}

/// The range without white space at its ends.
fn trim_range(text: &str, start: usize, end: usize) -> (usize, usize) {
    let piece = &text[start..end];
    let lead = piece.len() - piece.trim_start().len();
    let trail = piece.len() - piece.trim_end().len();
    if lead == piece.len() {
        return (start, start);
    }
    (start + lead, end - trail)
}

/// Character-sized windows of `text[from..to]`, cut at the last white space of a window
/// when it has one in its second half.
fn by_characters(text: &str, from: usize, to: usize, sizes: Sizes) -> Vec<(usize, usize)> {
    let size = sizes.size.max(1);
    let overlap = sizes.overlap.min(size - 1);
    // Byte offsets of every character boundary in the range.
    let bounds: Vec<usize> = text[from..to]
        .char_indices()
        .map(|(i, _)| from + i)
        .chain(std::iter::once(to))
        .collect();
    let chars = bounds.len() - 1;
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < chars {
        let mut end = (start + size).min(chars);
        let at_a_break = end == chars || text[bounds[end]..].starts_with(char::is_whitespace);
        if !at_a_break {
            // Prefer to cut after white space in the window's second half.
            let window = &text[bounds[start]..bounds[end]];
            if let Some(cut) = window
                .char_indices()
                .filter(|(_, c)| c.is_whitespace())
                .map(|(i, _)| i)
                .next_back()
            {
                let cut_chars = text[bounds[start]..bounds[start] + cut].chars().count();
                if cut_chars > size / 2 {
                    end = start + cut_chars + 1;
                }
            }
        }
        ranges.push((bounds[start], bounds[end]));
        if end >= chars {
            break;
        }
        start = if end - start > overlap {
            end - overlap
        } else {
            end
        };
    }
    ranges
}

/// Tokens: runs of letters and digits, or single other non-space characters.
fn token_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut word_start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            word_start.get_or_insert(i);
            continue;
        }
        if let Some(start) = word_start.take() {
            spans.push((start, i));
        }
        if !c.is_whitespace() {
            spans.push((i, i + c.len_utf8()));
        }
    }
    if let Some(start) = word_start {
        spans.push((start, text.len()));
    }
    spans
}

fn by_tokens(text: &str, sizes: Sizes) -> Vec<(usize, usize)> {
    let spans = token_spans(text);
    let size = sizes.size.max(1);
    let overlap = sizes.overlap.min(size - 1);
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < spans.len() {
        let end = (start + size).min(spans.len());
        ranges.push((spans[start].0, spans[end - 1].1));
        if end == spans.len() {
            break;
        }
        start = end - overlap;
    }
    ranges
}

/// Sections starting at each ATX heading (`#` to `######` at a line's start, outside code
/// fences); text before the first heading is a section of its own.
fn by_headings(text: &str) -> Vec<(usize, usize)> {
    let mut starts = vec![0];
    let mut in_fence = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
        } else if !in_fence && is_heading(line) && offset > 0 {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(text.len());
    starts.windows(2).map(|w| (w[0], w[1])).collect()
}

fn is_heading(line: &str) -> bool {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    (1..=6).contains(&hashes) && line[hashes..].starts_with([' ', '\t'])
}

/// Sentence ranges: ends at `.`, `!` or `?` (then white space) or a blank line.
fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (n, &(i, c)) in chars.iter().enumerate() {
        let next = chars.get(n + 1).map(|&(_, c)| c);
        let ends = matches!(c, '.' | '!' | '?' | '。') && next.is_none_or(char::is_whitespace)
            || c == '\n' && next == Some('\n');
        if ends {
            let end = i + c.len_utf8();
            spans.push((start, end));
            start = end;
        }
    }
    if start < text.len() {
        spans.push((start, text.len()));
    }
    spans
        .into_iter()
        .map(|(s, e)| trim_range(text, s, e))
        .filter(|(s, e)| e > s)
        .collect()
}

fn by_sentences(text: &str, sizes: Sizes) -> Vec<(usize, usize)> {
    let sentences = sentence_spans(text);
    let mut ranges = Vec::new();
    let mut first = 0;
    while first < sentences.len() {
        let mut last = first;
        while last + 1 < sentences.len()
            && text[sentences[first].0..sentences[last + 1].1]
                .chars()
                .count()
                <= sizes.size
        {
            last += 1;
        }
        ranges.push((sentences[first].0, sentences[last].1));
        if last + 1 >= sentences.len() {
            break;
        }
        let next = last + 1;
        first = next.saturating_sub(sizes.overlap).max(first + 1);
    }
    ranges
}

/// Splits each document into chunks carrying its source, metadata and offsets.
pub fn split_documents(documents: &[Document], method: Method, sizes: Sizes) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    for document in documents {
        let ranges = split_ranges(&document.text, method, sizes);
        let count = ranges.len();
        for (index, (start, end)) in ranges.into_iter().enumerate() {
            let mut metadata = document.metadata.clone();
            metadata.insert("chunk".into(), serde_json::json!(index));
            metadata.insert("chunks".into(), serde_json::json!(count));
            chunks.push(Chunk {
                text: document.text[start..end].to_owned(),
                source: document.source.clone(),
                start: document.offset + start,
                end: document.offset + end,
                metadata,
                embedding: None,
            });
        }
    }
    chunks
}

pub(crate) fn blocks() -> Vec<Box<dyn Block>> {
    vec![Box::new(TextSplit::new())]
}

struct TextSplit {
    meta: BlockMeta,
}

impl TextSplit {
    fn new() -> Self {
        Self {
            meta: BlockMeta::new(
                "text.split",
                "Split text",
                "Knowledge",
                "Splits documents (from docs.load) or text into chunks for embedding; each chunk keeps its source, metadata and offsets.",
            )
            .field(
                ConfigField::choice("method", "Split by", &METHODS)
                    .default_value(serde_json::json!("characters"))
                    .help("characters or tokens: windows of `size` with `overlap`; markdown: one chunk per heading's section (long ones cut by characters); sentences: whole sentences up to `size` characters, `overlap` sentences shared."),
            )
            .field(
                ConfigField::integer("size", "Chunk size", Some(1), Some(1_000_000))
                    .default_value(serde_json::json!(DEFAULT_SIZE))
                    .help("The longest chunk: characters (tokens with `tokens`)."),
            )
            .field(
                ConfigField::integer("overlap", "Overlap", Some(0), Some(1_000_000))
                    .default_value(serde_json::json!(DEFAULT_OVERLAP))
                    .help("How much of a chunk's end the next chunk repeats (sentences with `sentences`), so a passage cut in two is still found whole."),
            ),
        }
    }
}

impl Block for TextSplit {
    fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    fn instantiate(
        &self,
        config: &Config,
        _ctx: &ConfigCtx<'_>,
    ) -> Result<Arc<dyn NodeImpl>, ConfigError> {
        let read = ConfigReader(config);
        let method = match read.choice_or("method", &METHODS, "characters")? {
            "tokens" => Method::Tokens,
            "markdown" => Method::Markdown,
            "sentences" => Method::Sentences,
            _ => Method::Characters,
        };
        let size = read.u64_or("size", DEFAULT_SIZE)?;
        let overlap = read.u64_or("overlap", DEFAULT_OVERLAP)?;
        if size == 0 {
            return Err(ConfigError::new("size", "must be at least 1"));
        }
        if overlap >= size && method != Method::Sentences {
            return Err(ConfigError::new(
                "overlap",
                format!("must be smaller than size ({size})"),
            ));
        }
        let sizes = Sizes {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            overlap: usize::try_from(overlap).unwrap_or(usize::MAX),
        };
        Ok(Arc::new(TextSplitNode {
            method,
            sizes,
            ports: Ports::new(
                vec![PortSpec::new("documents", ValueType::Any).describe(
                    "Documents from docs.load (a list of {text, source, metadata}), one such object, or plain text.",
                )],
                vec![PortSpec::new("chunks", ValueType::list_of(ValueType::Object)).describe(
                    "Chunks: {text, source, start, end, metadata}.",
                )],
            ),
        }))
    }
}

struct TextSplitNode {
    method: Method,
    sizes: Sizes,
    ports: Ports,
}

#[async_trait]
impl NodeImpl for TextSplitNode {
    fn ports(&self) -> &Ports {
        &self.ports
    }

    async fn run(&self, mut inputs: ValueMap, ctx: &dyn RunCtx) -> Result<ValueMap, BlockError> {
        let documents = documents_from(&inputs.take_value("documents")?, "documents")?;
        let (method, sizes) = (self.method, self.sizes);
        let chunks =
            agentloom_core::run_cpu_bound(ctx, move || split_documents(&documents, method, sizes))
                .await?;
        Ok(agentloom_core::outputs([("chunks", chunks_value(&chunks))]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, method: Method, size: usize, overlap: usize) -> Vec<&str> {
        split_ranges(text, method, Sizes { size, overlap })
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    #[test]
    fn characters_overlap_and_cut_at_spaces() {
        let text = "alpha beta gamma delta epsilon zeta eta theta";
        let got = pieces(text, Method::Characters, 16, 6);
        assert_eq!(got[0], "alpha beta gamma");
        assert!(got.len() > 2);
        for pair in got.windows(2) {
            let tail: String = pair[0].chars().rev().take(3).collect();
            let tail: String = tail.chars().rev().collect();
            assert!(pair[1].contains(tail.trim()), "{pair:?}");
        }
        assert!(got.last().unwrap().ends_with("theta"));
    }

    #[test]
    fn tokens_count_words_and_marks() {
        let got = pieces("one, two three. four five", Method::Tokens, 3, 1);
        assert_eq!(got, vec!["one, two", "two three.", ". four five"]);
    }

    #[test]
    fn markdown_sections_and_fences() {
        let text = "intro\n# One\nbody one\n```\n# not a heading\n```\n## Two\nbody two\n";
        let got = pieces(text, Method::Markdown, 1000, 0);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], "intro");
        assert!(got[1].starts_with("# One") && got[1].contains("# not a heading"));
        assert!(got[2].starts_with("## Two"));
    }

    #[test]
    fn sentences_gathered_to_size() {
        let text = "First one. Second one! Third? Fourth.";
        let got = pieces(text, Method::Sentences, 22, 0);
        assert_eq!(got, vec!["First one. Second one!", "Third? Fourth."]);
    }

    #[test]
    fn offsets_point_into_the_document() {
        let doc = Document {
            text: "ünïcode text here. And more.".into(),
            source: "a.txt".into(),
            offset: 0,
            metadata: serde_json::Map::new(),
        };
        for chunk in split_documents(
            std::slice::from_ref(&doc),
            Method::Characters,
            Sizes {
                size: 7,
                overlap: 2,
            },
        ) {
            assert_eq!(&doc.text[chunk.start..chunk.end], chunk.text);
            assert_eq!(chunk.source, "a.txt");
        }
    }
}
