//! Templates that only put texts between literal text (`"{{ s }}."`, `"Dear {{ name }},\n"`)
//! are rendered by joining the pieces: the output is written once, where handing each
//! text to minijinja copies it first and checks the result is UTF-8 after.

use std::ops::Range;
use std::sync::Arc;

use agentloom_core::{Value, ValueMap};

use crate::jinja::MAX_OUTPUT_BYTES;

/// One piece of a plain template.
enum Piece {
    /// Text of the source, as it is.
    Literal(Range<usize>),
    /// An input, printed as it is.
    Variable(String),
}

/// A template made only of literal text and `{{ name }}` expressions.
pub(super) struct PlainTemplate {
    source: Arc<str>,
    pieces: Vec<Piece>,
}

impl PlainTemplate {
    /// The plain form of `source`, when it has one: no statement, comment, filter,
    /// whitespace control or expression other than a name among `variables`.
    pub(super) fn of(source: &Arc<str>, variables: &[String]) -> Option<Self> {
        if source.contains("{%") || source.contains("{#") {
            return None;
        }
        let mut pieces = Vec::new();
        let mut at = 0;
        while let Some(open) = source[at..].find("{{").map(|found| at + found) {
            let close = source[open..].find("}}").map(|found| open + found)?;
            let name = source[open + 2..close].trim_matches([' ', '\t', '\n', '\r']);
            if !is_plain_name(name) || !variables.iter().any(|v| v == name) {
                return None;
            }
            if open > at {
                pieces.push(Piece::Literal(at..open));
            }
            pieces.push(Piece::Variable(name.to_owned()));
            at = close + 2;
        }
        if at < source.len() {
            pieces.push(Piece::Literal(at..source.len()));
        }
        Some(Self {
            source: Arc::clone(source),
            pieces,
        })
    }

    /// The rendered text, or `None` when an input is not a text (minijinja prints the
    /// others) or the output would pass the cap (minijinja says so).
    #[cfg(test)]
    pub(super) fn render(&self, inputs: &ValueMap) -> Option<String> {
        self.render_owned(inputs.clone()).ok()
    }

    /// As `render`, taking the inputs: when the template starts with a text nobody else
    /// holds (a chain appending to what the node before wrote), the rest is appended to
    /// that text in place instead of copying it, so a chain growing a text costs what it
    /// appends, not what it carries. The inputs come back when minijinja must render.
    pub(super) fn render_owned(&self, mut inputs: ValueMap) -> Result<String, ValueMap> {
        let Some(length) = self.length(&inputs) else {
            return Err(inputs);
        };
        if length > MAX_OUTPUT_BYTES {
            return Err(inputs);
        }
        let (mut text, rest) = match self.pieces.split_first() {
            Some((Piece::Variable(name), rest)) if !self.names_again(name, rest) => {
                // `length` found it a text.
                let Some(Value::Text(shared)) = inputs.remove(name) else {
                    return Err(inputs);
                };
                let mut text = Arc::try_unwrap(shared).unwrap_or_else(|shared| {
                    let mut copy = String::with_capacity(length);
                    copy.push_str(&shared);
                    copy
                });
                // Amortised: a chain's text doubles its room now and then.
                text.reserve(length - text.len());
                (text, rest)
            }
            _ => (String::with_capacity(length), &self.pieces[..]),
        };
        // `length` found every piece; the first variable, taken, is not named again.
        for piece in rest
            .iter()
            .filter_map(|piece| self.piece_text(piece, &inputs))
        {
            text.push_str(piece);
        }
        Ok(text)
    }

    /// The output's length, or `None` when an input is missing or not a text.
    fn length(&self, inputs: &ValueMap) -> Option<usize> {
        let mut length = 0usize;
        for piece in &self.pieces {
            length += self.piece_text(piece, inputs)?.len();
        }
        Some(length)
    }

    /// Whether `name` is printed again among `pieces`.
    fn names_again(&self, name: &str, pieces: &[Piece]) -> bool {
        pieces
            .iter()
            .any(|piece| matches!(piece, Piece::Variable(other) if other == name))
    }

    fn piece_text<'a>(&'a self, piece: &Piece, inputs: &'a ValueMap) -> Option<&'a str> {
        match piece {
            Piece::Literal(range) => Some(&self.source[range.clone()]),
            Piece::Variable(name) => match inputs.get(name)? {
                Value::Text(text) => Some(text.as_str()),
                _ => None,
            },
        }
    }
}

/// An ASCII identifier that minijinja reads as a variable (not `true`, `none` …: those are
/// not among the template's variables, so they are turned away there).
fn is_plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestCtx, inputs};

    fn plain(source: &str) -> Option<PlainTemplate> {
        let template = crate::jinja::SharedTemplate::parse(source).unwrap();
        PlainTemplate::of(template.source(), template.variables())
    }

    /// What minijinja renders for `source` with `values`.
    async fn minijinja(source: &str, values: &ValueMap) -> String {
        let template = crate::jinja::SharedTemplate::parse(source).unwrap();
        template
            .render(values.clone(), &TestCtx::new(), "render")
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn plain_templates_render_what_minijinja_renders() {
        let values = inputs([
            ("s", Value::from("a & <b> {{ not }} {% this %}\n")),
            ("name_2", Value::from("Ada")),
            ("empty", Value::from("")),
        ]);
        for source in [
            "{{ s }}.",
            "{{s}}",
            "Dear {{ name_2 }},\n\n{{\ts\n}} }} {{ empty }}end\n\n",
            "} {{ s }}}}",
            "{{ s }}{{ s }}",
            "no variables at all\n",
            "{{ s }}.txt",
            "{{ s }}.json",
            "{{ s }}.html",
            "{{ s }}.htm.j2",
            "{{ s }}.xml",
        ] {
            let joined = plain(source)
                .unwrap_or_else(|| panic!("{source:?} is plain"))
                .render(&values)
                .unwrap();
            assert_eq!(joined, minijinja(source, &values).await, "{source:?}");
        }
    }

    #[test]
    fn anything_beyond_names_between_text_is_left_to_minijinja() {
        for source in [
            "{{ s | upper }}",
            "{{ s.name }}",
            "{{ s ~ 'x' }}",
            "{{- s }}",
            "{{ s -}}",
            "{% if s %}{{ s }}{% endif %}",
            "{# note #}{{ s }}",
            "{{ true }} {{ s }}",
            "{{ none }}",
            "{{ range }}",
        ] {
            assert!(plain(source).is_none(), "{source:?} is not plain");
        }
    }

    #[tokio::test]
    async fn a_value_other_than_text_is_printed_by_minijinja() {
        let template = plain("n = {{ n }}").unwrap();
        for value in [
            Value::Integer(3),
            Value::Null,
            Value::from_json(serde_json::json!({"a": [1, 2]})),
        ] {
            assert_eq!(template.render(&inputs([("n", value)])), None);
        }
        // Through the block, the answer is minijinja's.
        let out = crate::testing::run_block(
            "text.template",
            serde_json::json!({"template": "n = {{ n }}"}),
            inputs([("n", Value::Integer(3))]),
        )
        .await
        .unwrap();
        assert_eq!(out.get("text"), Some(&Value::from("n = 3")));
    }

    #[test]
    fn a_text_held_only_by_the_inputs_is_appended_to_in_place() {
        let template = plain("{{ s }}, {{ t }}.").unwrap();
        let mut room = String::with_capacity(64);
        room.push_str("head");
        let buffer = room.as_ptr();
        let text = template
            .render_owned(inputs([
                ("s", Value::text(room)),
                ("t", Value::from("tail")),
            ]))
            .unwrap();
        assert_eq!(text, "head, tail.");
        assert_eq!(text.as_ptr(), buffer, "the text was copied");
    }

    #[test]
    fn a_text_held_elsewhere_is_copied_and_left_as_it_was() {
        for source in ["{{ s }}.", "{{ s }}{{ s }}", "<{{ s }}>"] {
            let template = plain(source).unwrap();
            let held = Value::text(String::with_capacity(64) + "head");
            let text = template
                .render_owned(inputs([("s", held.clone())]))
                .unwrap();
            assert_eq!(text, source.replace("{{ s }}", "head"), "{source:?}");
            assert_eq!(
                held,
                Value::from("head"),
                "{source:?} changed the held text"
            );
        }
    }
}
