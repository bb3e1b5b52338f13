//! The forms a secret travels in, and finding a secret in data however it was encoded.
//!
//! [`encoded_forms`] lists a secret as it may be written out: plain, Base64 (standard and
//! URL-safe, at any alignment, so also inside `user:SECRET`), hex, URL-, JSON- and
//! HTML-escaped, UTF-16. Redaction replaces those forms; [`Forms`] matches them without regard to
//! ASCII case (a secret upper-cased, hex in either case).
//!
//! [`Forms::find_decoded`] also looks into what the data decodes to: escapes undone (JSON
//! `\uXXXX` and `\/`, `\xHH`, percent-encoding, HTML entities, mixed in any way), Base64 and
//! hex runs decoded, nested a few levels deep. A secret the graph itself transforms (reversed,
//! spaced out, split over requests) is not recognised: the graph file is trusted.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;

/// Shorter secrets are not looked for: replacing every `ab` would garble all output, and a
/// secret that short protects nothing.
pub(crate) const MIN_SECRET_LEN: usize = 4;

/// An encoded form shorter than this (a Base64 fragment of a short secret) is left out: it
/// would match ordinary words.
const MIN_ENCODED_LEN: usize = 6;

/// How many decodings deep [`Forms::find_decoded`] looks (Base64 of a URL-encoded JSON
/// string is three).
const MAX_DEPTH: usize = 3;

/// `plain` as it may appear in output or in a request, each form once.
pub(crate) fn encoded_forms(plain: &str) -> Vec<String> {
    if plain.len() < MIN_SECRET_LEN {
        return Vec::new();
    }
    let mut forms = vec![plain.to_owned()];
    let mut add = |form: String, min: usize| {
        if form.len() >= min && !forms.contains(&form) {
            forms.push(form);
        }
    };
    let bytes = plain.as_bytes();
    add(plain.replace(' ', "+"), MIN_SECRET_LEN);
    // The password of `user:password`.
    if let Some((_, password)) = plain.split_once(':') {
        add(password.to_owned(), MIN_SECRET_LEN);
    }
    add(plain.escape_debug().to_string(), MIN_SECRET_LEN);
    // Percent-encoding: a form (space as `+`), a path (space as %20), every byte.
    add(
        url::form_urlencoded::byte_serialize(bytes).collect(),
        MIN_SECRET_LEN,
    );
    add(
        escape_bytes(bytes, |b| !is_unreserved(b), |b| format!("%{b:02X}")),
        MIN_SECRET_LEN,
    );
    add(
        escape_bytes(bytes, |_| true, |b| format!("%{b:02X}")),
        MIN_SECRET_LEN,
    );
    add(hex_of(bytes), MIN_ENCODED_LEN);
    // JSON strings: `\/`, and `\uXXXX` for punctuation or for every character.
    add(plain.replace('/', "\\/"), MIN_SECRET_LEN);
    add(
        escape_chars(plain, |c| !c.is_ascii_alphanumeric(), json_unit),
        MIN_SECRET_LEN,
    );
    add(escape_chars(plain, |_| true, json_unit), MIN_SECRET_LEN);
    // HTML: the named entities, decimal and hex references.
    add(escape_chars(plain, |_| true, html_named), MIN_SECRET_LEN);
    for reference in [html_decimal, html_hex] {
        add(
            escape_chars(plain, |c| !c.is_ascii_alphanumeric(), reference),
            MIN_SECRET_LEN,
        );
        add(escape_chars(plain, |_| true, reference), MIN_SECRET_LEN);
    }
    // UTF-16 text (both byte orders): the secret's characters with NUL bytes between.
    for little_endian in [true, false] {
        let units: Vec<u8> = plain
            .encode_utf16()
            .flat_map(|unit| {
                if little_endian {
                    unit.to_le_bytes()
                } else {
                    unit.to_be_bytes()
                }
            })
            .collect();
        if let Ok(form) = String::from_utf8(units) {
            add(form, MIN_ENCODED_LEN);
        }
    }
    // Base64 of the secret wherever it starts in the encoded data: the characters that
    // depend on its bytes alone, for each of the three alignments.
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for offset in 0..3usize {
            let mut padded = vec![0u8; offset];
            padded.extend_from_slice(bytes);
            let encoded = engine.encode(&padded);
            let first = (offset * 8).div_ceil(6);
            let end = ((offset + bytes.len()) * 8) / 6;
            if let Some(part) = encoded.get(first..end) {
                add(part.to_owned(), MIN_ENCODED_LEN);
            }
        }
        add(engine.encode(bytes), MIN_ENCODED_LEN);
    }
    forms
}

/// The forms of some secrets, compiled to be found in one pass, ASCII case ignored.
#[derive(Clone, Default)]
pub(crate) struct Forms {
    matcher: Option<AhoCorasick>,
    /// The shortest secret among them, in bytes.
    shortest: usize,
}

impl Forms {
    /// Matches nothing.
    pub(crate) const EMPTY: Forms = Forms {
        matcher: None,
        shortest: MIN_SECRET_LEN,
    };

    /// Matches every form in `forms` (of secrets of at least `shortest` bytes; a form may
    /// be shorter, as the password of `user:password` is).
    pub(crate) fn new(forms: &[String], shortest: usize) -> Self {
        let shortest = forms.iter().map(String::len).fold(shortest, usize::min);
        let matcher = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostLongest)
            .build(forms.iter().filter(|form| !form.is_empty()))
            .ok()
            .filter(|matcher| matcher.patterns_len() > 0);
        Self {
            matcher,
            shortest: shortest.max(MIN_SECRET_LEN),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Whether `data` holds one of the forms as it is.
    pub(crate) fn is_in(&self, data: &[u8]) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|matcher| matcher.is_match(data))
    }

    /// `text` with every form replaced by `with`; `None` when it holds none.
    pub(crate) fn replaced(&self, text: &str, with: &str) -> Option<String> {
        let matcher = self.matcher.as_ref()?;
        matcher.is_match(text).then(|| {
            let mut out = String::with_capacity(text.len());
            matcher.replace_all_with(text, &mut out, |_, _, out| {
                out.push_str(with);
                true
            });
            out
        })
    }

    /// `bytes` with every form replaced by `with`; `None` when they hold none.
    pub(crate) fn replaced_bytes(&self, bytes: &[u8], with: &[u8]) -> Option<Vec<u8>> {
        let matcher = self.matcher.as_ref()?;
        matcher.is_match(bytes).then(|| {
            let mut out = Vec::with_capacity(bytes.len());
            matcher.replace_all_with_bytes(bytes, &mut out, |_, _, out| {
                out.extend_from_slice(with);
                true
            });
            out
        })
    }

    /// Whether `data` holds one of the forms, as it is or once decoded (see the module).
    pub(crate) fn find_decoded(&self, data: &[u8]) -> bool {
        self.matcher.is_some() && self.search(data, 0)
    }

    fn search(&self, data: &[u8], depth: usize) -> bool {
        if data.len() < self.shortest {
            return false;
        }
        if self.is_in(data) {
            return true;
        }
        if depth == MAX_DEPTH {
            return false;
        }
        if let Some(unescaped) = unescape(data)
            && self.search(&unescaped, depth + 1)
        {
            return true;
        }
        // A run of Base64 decodes to at least the secret: four characters for three bytes.
        let base64_min = (self.shortest * 4).div_ceil(3);
        let found_in_base64 = runs(data, is_base64_char, base64_min)
            .any(|run| self.search(&decode_base64(run), depth + 1));
        if found_in_base64 {
            return true;
        }
        runs(data, u8::is_ascii_hexdigit, self.shortest * 2).any(|run| {
            self.search(&decode_hex(run), depth + 1)
                || (run.len() > 2 && self.search(&decode_hex(&run[1..]), depth + 1))
        })
    }
}

/// The maximal runs of bytes for which `keep` holds, at least `min` long.
fn runs(data: &[u8], keep: fn(&u8) -> bool, min: usize) -> impl Iterator<Item = &[u8]> {
    data.split(move |b| !keep(b))
        .filter(move |run| run.len() >= min)
}

fn is_base64_char(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_')
}

/// Decodes a run of Base64 characters, standard and URL-safe alike, ignoring the bits of an
/// incomplete last group.
fn decode_base64(run: &[u8]) -> Vec<u8> {
    let sextet = |b: u8| -> u32 {
        u32::from(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            _ => 63,
        })
    };
    let mut out = Vec::with_capacity(run.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0u32);
    for &b in run {
        bits = (bits << 6) | sextet(b);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn decode_hex(run: &[u8]) -> Vec<u8> {
    run.chunks_exact(2)
        .filter_map(|pair| Some(hex_value(pair[0])? << 4 | hex_value(pair[1])?))
        .collect()
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn escape_bytes(bytes: &[u8], escape: impl Fn(u8) -> bool, form: impl Fn(u8) -> String) -> String {
    bytes
        .iter()
        .map(|&b| {
            if escape(b) {
                form(b)
            } else {
                char::from(b).to_string()
            }
        })
        .collect()
}

fn escape_chars(text: &str, escape: impl Fn(char) -> bool, form: fn(char) -> String) -> String {
    text.chars()
        .map(|c| if escape(c) { form(c) } else { c.to_string() })
        .collect()
}

fn json_unit(c: char) -> String {
    let mut units = [0u16; 2];
    c.encode_utf16(&mut units)
        .iter()
        .map(|unit| format!("\\u{unit:04x}"))
        .collect()
}

fn html_decimal(c: char) -> String {
    format!("&#{};", u32::from(c))
}

fn html_hex(c: char) -> String {
    format!("&#x{:x};", u32::from(c))
}

fn html_named(c: char) -> String {
    NAMED_ENTITIES
        .iter()
        .find(|(_, named)| *named == c)
        .map_or_else(|| c.to_string(), |(name, _)| format!("&{name};"))
}

/// The HTML named references of ASCII characters (and the no-break space).
const NAMED_ENTITIES: &[(&str, char)] = &[
    ("amp", '&'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("excl", '!'),
    ("num", '#'),
    ("dollar", '$'),
    ("percnt", '%'),
    ("lpar", '('),
    ("rpar", ')'),
    ("ast", '*'),
    ("midast", '*'),
    ("plus", '+'),
    ("comma", ','),
    ("period", '.'),
    ("sol", '/'),
    ("colon", ':'),
    ("semi", ';'),
    ("equals", '='),
    ("quest", '?'),
    ("commat", '@'),
    ("lsqb", '['),
    ("lbrack", '['),
    ("bsol", '\\'),
    ("rsqb", ']'),
    ("rbrack", ']'),
    ("hat", '^'),
    ("lowbar", '_'),
    ("underbar", '_'),
    ("grave", '`'),
    ("diacriticalgrave", '`'),
    ("lcub", '{'),
    ("lbrace", '{'),
    ("verbar", '|'),
    ("vert", '|'),
    ("verticalline", '|'),
    ("rcub", '}'),
    ("rbrace", '}'),
    ("tilde", '~'),
    ("dash", '-'),
    ("hyphen", '-'),
    ("minus", '-'),
    ("nbsp", ' '),
    ("tab", '\t'),
    ("newline", '\n'),
];

/// `data` with every escape undone that JSON, JavaScript, URLs or HTML write: `\uXXXX`
/// (surrogate pairs joined), `\xHH`, `\/` and the other backslash escapes, `%HH`, `&name;`,
/// `&#N;` and `&#xH;`. `None` when it holds none.
fn unescape(data: &[u8]) -> Option<Vec<u8>> {
    if !data.iter().any(|b| matches!(b, b'\\' | b'%' | b'&')) {
        return None;
    }
    let mut out = Vec::with_capacity(data.len());
    let mut changed = false;
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        let decoded = match rest[0] {
            b'\\' => backslash_escape(rest, &mut out),
            b'%' => match (
                rest.get(1).copied().and_then(hex_value),
                rest.get(2).copied().and_then(hex_value),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    Some(3)
                }
                _ => None,
            },
            b'&' => html_reference(rest, &mut out),
            _ => None,
        };
        match decoded {
            Some(used) => {
                changed = true;
                at += used;
            }
            None => {
                out.push(rest[0]);
                at += 1;
            }
        }
    }
    changed.then_some(out)
}

fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// Decodes the backslash escape at the start of `rest` into `out`: how many bytes it used.
fn backslash_escape(rest: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let simple = match rest.get(1)? {
        b'/' => Some(b'/'),
        b'\\' => Some(b'\\'),
        b'"' => Some(b'"'),
        b'\'' => Some(b'\''),
        b'n' => Some(b'\n'),
        b'r' => Some(b'\r'),
        b't' => Some(b'\t'),
        b'b' => Some(0x08),
        b'f' => Some(0x0c),
        _ => None,
    };
    if let Some(byte) = simple {
        out.push(byte);
        return Some(2);
    }
    match rest[1] {
        b'x' | b'X' => {
            let byte = hex_value(*rest.get(2)?)? << 4 | hex_value(*rest.get(3)?)?;
            out.push(byte);
            Some(4)
        }
        b'u' | b'U' => {
            let unit = |at: usize| -> Option<u32> {
                let digits = rest.get(at..at + 4)?;
                digits
                    .iter()
                    .try_fold(0u32, |acc, &d| Some(acc << 4 | u32::from(hex_value(d)?)))
            };
            let first = unit(2)?;
            if (0xD800..0xDC00).contains(&first)
                && rest.get(6) == Some(&b'\\')
                && matches!(rest.get(7), Some(b'u' | b'U'))
                && let Some(second) = unit(8).filter(|s| (0xDC00..0xE000).contains(s))
            {
                let c = char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))?;
                push_char(out, c);
                return Some(12);
            }
            push_char(out, char::from_u32(first).unwrap_or('\u{FFFD}'));
            Some(6)
        }
        _ => None,
    }
}

/// Decodes the HTML character reference at the start of `rest` into `out`: how many bytes
/// it used. The `;` may be missing, as browsers allow.
fn html_reference(rest: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let body = rest.get(1..)?;
    let (code, used) = if body.first() == Some(&b'#') {
        let (radix, start) = match body.get(1) {
            Some(b'x' | b'X') => (16, 2),
            _ => (10, 1),
        };
        let digits = body[start..]
            .iter()
            .take_while(|b| b.is_ascii_hexdigit() && (radix == 16 || b.is_ascii_digit()))
            .count();
        if digits == 0 || digits > 8 {
            return None;
        }
        let text = std::str::from_utf8(&body[start..start + digits]).ok()?;
        let code = u32::from_str_radix(text, radix).ok()?;
        (char::from_u32(code)?, 1 + start + digits)
    } else {
        let letters = body
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        let name = std::str::from_utf8(&body[..letters]).ok()?;
        let (_, c) = NAMED_ENTITIES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))?;
        (*c, 1 + letters)
    };
    push_char(out, code);
    let semicolon = usize::from(rest.get(used) == Some(&b';'));
    Some(used + semicolon)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "tok+EN/x9 q";

    fn forms() -> Forms {
        Forms::new(&encoded_forms(TOKEN), TOKEN.len())
    }

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn every_listed_encoding_is_found() {
        let forms = forms();
        let hex: String = TOKEN.bytes().map(|b| format!("{b:02X}")).collect();
        let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(TOKEN);
        let cases = [
            TOKEN.to_owned(),
            TOKEN.to_uppercase(),
            r#"{"t":"tok\u002BEN\/x9 q"}"#.to_owned(),
            r#"{"t":"\u0074\u006F\u006B\u002b\u0045\u004e\u002f\u0078\u0039\u0020\u0071"}"#
                .to_owned(),
            "t=tok%2bEN%2fx9+q".to_owned(),
            "t=tok%2BEN%2Fx9%20q".to_owned(),
            "t=%74%6f%6b%2b%45%4e%2f%78%39%20%71".to_owned(),
            format!("hex {}", hex.to_lowercase()),
            format!("hex {hex}"),
            format!("Basic {}", b64(&format!("alice:{TOKEN}"))),
            format!("Basic {}", b64(&format!("{TOKEN}:"))),
            format!("x {}", b64(&format!("ab:{TOKEN}"))),
            format!("x {url_safe}."),
            "tok&plus;EN&sol;x9&nbsp;q".to_owned(),
            "tok&#43;EN&#47;x9&#32;q".to_owned(),
            "tok&#x2B;EN&#x2f;x9&#X20;q".to_owned(),
            format!("base64 of upper: {}", b64(&TOKEN.to_uppercase())),
            format!("{{\"b\":\"{}\"}}", b64(r#"{"t":"tok\u002bEN\/x9 q"}"#)),
        ];
        for case in &cases {
            assert!(forms.find_decoded(case.as_bytes()), "not found in {case}");
        }
        for clean in ["tok EN x9 q", "hello world, nothing here", "dG9rK0VO"] {
            assert!(!forms.find_decoded(clean.as_bytes()), "found in {clean}");
        }
    }

    #[test]
    fn base64_forms_match_at_every_alignment() {
        let forms = Forms::new(&encoded_forms(TOKEN), TOKEN.len());
        for prefix in ["", "a", "ab", "abc", "user:"] {
            let encoded = b64(&format!("{prefix}{TOKEN}:tail"));
            assert!(forms.is_in(encoded.as_bytes()), "{prefix}: {encoded}");
        }
    }

    /// Not a test: how long a look through a large body takes (`cargo test --release -p
    /// agentloom-engine secret_forms::tests::timing -- --ignored --nocapture`).
    #[test]
    #[ignore = "a measurement"]
    fn timing() {
        let forms = forms();
        let mut body = String::from("{\"messages\":[");
        while body.len() < 1 << 20 {
            body.push_str(r#"{"role":"user","content":"Summarise the attached report for the board; keep figures exact (Q3 revenue 12.5%, dGhpcyBpcyBiYXNlNjQ= 0xdeadbeef). \u00e9t\u00e9 &amp; caf&#233;"},"#);
        }
        body.push_str("]}");
        let mut times = Vec::new();
        for _ in 0..7 {
            let started = std::time::Instant::now();
            assert!(!forms.find_decoded(body.as_bytes()));
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "1 MiB body, no secret: median {:?} (min {:?}, max {:?})",
            times[3], times[0], times[6]
        );
    }

    #[test]
    fn replaced_in_text_and_bytes() {
        let forms = forms();
        let text = format!("a {TOKEN} b {} c", TOKEN.to_uppercase());
        assert_eq!(
            forms.replaced(&text, "[redacted]").unwrap(),
            "a [redacted] b [redacted] c"
        );
        let mut latin1 = b"\xe9t\xe9 ".to_vec();
        latin1.extend_from_slice(TOKEN.as_bytes());
        assert_eq!(
            forms.replaced_bytes(&latin1, b"[redacted]").unwrap(),
            b"\xe9t\xe9 [redacted]"
        );
        assert!(forms.replaced("nothing", "x").is_none());
    }
}
