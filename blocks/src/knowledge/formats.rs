//! Turning a file's bytes into documents, by format: text and Markdown as they are, HTML
//! to its text, PDF to its text page by page, JSON (an array: one document per item),
//! JSON Lines (per line) and CSV (per row, `column: value` lines). Every document keeps
//! where in the file it came from (`page`, `index`, `line`, `row`) and its byte `offset` in
//! the file's text. A file that cannot be read as its format is an error naming the file.

use serde_json::{Map, Value as Json, json};

use super::values::Document;

/// The formats read, by file extension (lower case).
pub const EXTENSIONS: [(&str, Format); 10] = [
    ("txt", Format::Text),
    ("text", Format::Text),
    ("md", Format::Markdown),
    ("markdown", Format::Markdown),
    ("html", Format::Html),
    ("htm", Format::Html),
    ("pdf", Format::Pdf),
    ("json", Format::Json),
    ("jsonl", Format::JsonLines),
    ("csv", Format::Csv),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
    Html,
    Pdf,
    Json,
    JsonLines,
    Csv,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Json => "json",
            Format::JsonLines => "jsonl",
            Format::Csv => "csv",
        }
    }

    /// The format of `path` by its extension.
    pub fn of(path: &str) -> Option<Format> {
        let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
        EXTENSIONS
            .iter()
            .find(|(ext, _)| *ext == extension)
            .map(|(_, format)| *format)
    }
}

/// The documents of file `source` (its bytes), or why it cannot be read.
pub fn documents_of(source: &str, format: Format, bytes: &[u8]) -> Result<Vec<Document>, String> {
    let base = |offset: usize, extra: Map<String, Json>| {
        let mut metadata = Map::new();
        metadata.insert("source".into(), json!(source));
        metadata.insert("format".into(), json!(format.name()));
        metadata.insert("offset".into(), json!(offset));
        metadata.extend(extra);
        metadata
    };
    let doc = |text: String, offset: usize, extra: Map<String, Json>| Document {
        text,
        source: source.to_owned(),
        offset,
        metadata: base(offset, extra),
    };
    let utf8 = || {
        std::str::from_utf8(bytes)
            .map(|t| t.strip_prefix('\u{feff}').unwrap_or(t))
            .map_err(|e| format!("`{source}` is not UTF-8 text (at byte {})", e.valid_up_to()))
    };
    match format {
        Format::Text | Format::Markdown => Ok(vec![doc(utf8()?.to_owned(), 0, Map::new())]),
        Format::Html => Ok(vec![doc(html_to_text(utf8()?), 0, Map::new())]),
        Format::Pdf => {
            let pages =
                pdf_pages(bytes).map_err(|e| format!("`{source}` is not a readable PDF: {e}"))?;
            let count = pages.len();
            let mut offset = 0;
            let mut documents = Vec::with_capacity(count);
            for (i, text) in pages.into_iter().enumerate() {
                let length = text.len();
                let mut extra = Map::new();
                extra.insert("page".into(), json!(i + 1));
                extra.insert("pages".into(), json!(count));
                documents.push(doc(text, offset, extra));
                // Pages are taken as joined by a blank line.
                offset += length + 2;
            }
            Ok(documents)
        }
        Format::Json => {
            let value: Json = serde_json::from_str(utf8()?)
                .map_err(|e| format!("`{source}` is not valid JSON: {e}"))?;
            Ok(match value {
                Json::Array(items) => items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let (text, mut extra) = json_document(item);
                        extra.insert("index".into(), json!(i));
                        doc(text, 0, extra)
                    })
                    .collect(),
                other => {
                    let (text, extra) = json_document(other);
                    vec![doc(text, 0, extra)]
                }
            })
        }
        Format::JsonLines => {
            let text = utf8()?;
            let mut documents = Vec::new();
            let mut offset = 0;
            for (i, line) in text.split_inclusive('\n').enumerate() {
                let trimmed = line.trim();
                if !trimmed.is_empty() {
                    let value: Json = serde_json::from_str(trimmed)
                        .map_err(|e| format!("`{source}` line {}: not valid JSON: {e}", i + 1))?;
                    let (text, mut extra) = json_document(value);
                    extra.insert("line".into(), json!(i + 1));
                    documents.push(doc(text, offset, extra));
                }
                offset += line.len();
            }
            Ok(documents)
        }
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new()
                .flexible(true)
                .from_reader(utf8()?.as_bytes());
            let headers = reader
                .headers()
                .map_err(|e| format!("`{source}` is not readable CSV: {e}"))?
                .clone();
            let mut documents = Vec::new();
            for (i, record) in reader.records().enumerate() {
                let record = record.map_err(|e| format!("`{source}` row {}: {e}", i + 1))?;
                let offset = record
                    .position()
                    .and_then(|p| usize::try_from(p.byte()).ok())
                    .unwrap_or(0);
                let text = record
                    .iter()
                    .enumerate()
                    .map(|(c, value)| {
                        let column = headers.get(c).unwrap_or("");
                        if column.is_empty() {
                            value.to_owned()
                        } else {
                            format!("{column}: {value}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let mut extra = Map::new();
                extra.insert("row".into(), json!(i + 1));
                documents.push(doc(text, offset, extra));
            }
            Ok(documents)
        }
    }
}

/// A JSON value as a document's text and extra metadata: an object with a `text` (or
/// `content`) string gives that text, its other plain fields becoming metadata; a string is
/// itself; anything else is its compact JSON.
fn json_document(value: Json) -> (String, Map<String, Json>) {
    match value {
        Json::String(text) => (text, Map::new()),
        Json::Object(mut fields) => {
            let key = ["text", "content"]
                .into_iter()
                .find(|k| fields.get(*k).is_some_and(Json::is_string));
            match key.and_then(|k| fields.remove(k)) {
                Some(Json::String(text)) => {
                    let extra = fields
                        .into_iter()
                        .filter(|(k, v)| {
                            !matches!(v, Json::Array(_) | Json::Object(_))
                                && !matches!(k.as_str(), "source" | "format" | "offset")
                        })
                        .collect();
                    (text, extra)
                }
                _ => (Json::Object(fields).to_string(), Map::new()),
            }
        }
        other => (other.to_string(), Map::new()),
    }
}

/// The text of each page of a PDF.
fn pdf_pages(bytes: &[u8]) -> Result<Vec<String>, String> {
    let document = lopdf::Document::load_mem(bytes).map_err(|e| e.to_string())?;
    if document.is_encrypted() {
        return Err("it is encrypted".to_owned());
    }
    let pages = document.get_pages();
    if pages.is_empty() {
        return Err("it has no pages".to_owned());
    }
    let texts = pages
        .keys()
        .map(|number| {
            document
                .extract_text(&[*number])
                .map(|text| text.trim_end().to_owned())
                .map_err(|e| format!("page {number}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A damaged file can parse with its content streams lost: refuse it rather than
    // indexing nothing under its name.
    if texts.iter().all(|t| t.trim().is_empty()) {
        return Err(
            "no text could be read from any page (a damaged file, or scanned images without a text layer)"
                .to_owned(),
        );
    }
    Ok(texts)
}

/// The readable text of an HTML page: tags dropped, `script`/`style`/`head` contents
/// dropped, block elements on lines of their own, the common entities decoded.
pub fn html_to_text(html: &str) -> String {
    const SKIPPED: [&str; 5] = ["script", "style", "head", "noscript", "template"];
    const BLOCKS: [&str; 22] = [
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "tr",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "blockquote",
        "pre",
        "hr",
        "title",
    ];
    let mut text = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        text.push_str(&decode_entities(&rest[..open]));
        rest = &rest[open..];
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |end| &rest[end + 3..]);
            continue;
        }
        let Some(close) = rest.find('>') else {
            rest = "";
            break;
        };
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if !closing && SKIPPED.contains(&name.as_str()) && !tag.ends_with('/') {
            let end = format!("</{name}");
            let lower = rest.to_ascii_lowercase();
            rest = match lower.find(&end) {
                Some(at) => rest[at..].find('>').map_or("", |gt| &rest[at + gt + 1..]),
                None => "",
            };
            continue;
        }
        if BLOCKS.contains(&name.as_str()) {
            text.push('\n');
        } else if name == "td" || name == "th" {
            text.push(' ');
        }
    }
    text.push_str(&decode_entities(rest));
    // Lines trimmed, runs of blank lines made one.
    let mut out = String::with_capacity(text.len());
    let mut blank = true;
    for line in text.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            if !blank {
                out.push('\n');
            }
            blank = true;
        } else {
            out.push_str(&line);
            out.push('\n');
            blank = false;
        }
    }
    out.trim().to_owned()
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest[..rest.len().min(12)].find(';') else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" | "#39" => Some('\''),
            "nbsp" => Some(' '),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_without_scripts_and_with_entities() {
        let html = "<html><head><title>T</title><style>p{}</style></head><body><h1>Title</h1><p>One &amp; two&#33;</p><script>alert(1)</script><ul><li>a</li><li>b &lt;c&gt;</li></ul></body></html>";
        assert_eq!(html_to_text(html), "Title\n\nOne & two!\n\na\n\nb <c>");
    }

    #[test]
    fn csv_rows_and_jsonl_lines_keep_their_place() {
        let docs = documents_of("t.csv", Format::Csv, b"name,age\nAda,36\nAlan,41\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].text, "name: Alan\nage: 41");
        assert_eq!(docs[1].metadata["row"], 2);
        let docs = documents_of("t.jsonl", Format::JsonLines, b"{\"a\":1}\n\n\"two\"\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].text, "two");
        assert_eq!(docs[1].metadata["line"], 3);
        let err = documents_of("bad.jsonl", Format::JsonLines, b"{\"a\":1}\n{oops\n").unwrap_err();
        assert!(err.contains("bad.jsonl") && err.contains("line 2"), "{err}");
    }
}
