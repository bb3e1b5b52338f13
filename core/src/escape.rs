//! Text from graph files, run logs and servers is printed to terminals and logs: a control
//! character in it (a newline, an escape sequence, a bidirectional override) could forge
//! lines or rewrite what a person sees. Every message that carries such text passes it
//! through [`escape_control`] (or [`Escaped`]).

use std::borrow::Cow;
use std::fmt;

/// Whether `c` may change how the text around it is displayed: C0/C1 controls and the
/// Unicode bidirectional formatting characters.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character written as a Rust escape (`\n`, `\u{1b}`), and
/// unchanged (not copied) when it has none. Printable text, backslashes included, is kept
/// as is, so escaping twice changes nothing.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(Escaped(text).to_string())
}

/// Displays its text with control characters escaped, as [`escape_control`] does, without
/// allocating.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(is_unsafe) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            if c.escape_debug().len() > 1 {
                write!(f, "{}", c.escape_debug())?;
            } else {
                // A character `escape_debug` would leave alone: its code instead.
                write!(f, "\\u{{{:x}}}", u32::from(c))?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_printable_text_is_kept() {
        assert!(matches!(escape_control("plain \\ text"), Cow::Borrowed(_)));
        assert_eq!(escape_control("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(escape_control("\u{1b}[2Jgone"), "\\u{1b}[2Jgone");
        assert_eq!(escape_control("ab\u{202E}cd"), "ab\\u{202e}cd");
        assert_eq!(escape_control("\u{85}é"), "\\u{85}é");
        let once = escape_control("x\u{7}y").into_owned();
        assert_eq!(escape_control(&once), once);
        assert_eq!(Escaped("1\n2").to_string(), "1\\n2");
    }
}
