//! The runtime value that travels along wires.
//!
//! Text, lists, objects and bytes are shared and immutable: handing a value on (to the
//! next node, to an event, to the run log) copies a pointer, whatever the value's size.
//! A block that changes one gets its own copy on write (`Arc::make_mut`, or
//! [`Value::list_mut`] / [`Value::object_mut`]), so what another node holds never changes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map of port name to value: a node's inputs or outputs. Sorted, so it prints stably.
pub type ValueMap = BTreeMap<String, Value>;

/// The key under which bytes are carried when a [`Value`] is written as JSON.
const BYTES_KEY: &str = "$bytes";

/// A value flowing between blocks. JSON-shaped, plus raw bytes. Cloning one is cheap: the
/// text, items, fields and bytes are shared (see the module's documentation).
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Integer(i64),
    Number(f64),
    Text(Arc<String>),
    List(Arc<Vec<Value>>),
    Object(Arc<BTreeMap<String, Value>>),
    Bytes(Arc<Vec<u8>>),
}

impl Value {
    /// A text value.
    pub fn text(text: impl Into<String>) -> Value {
        Value::Text(Arc::new(text.into()))
    }

    /// A list value.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Arc::new(items))
    }

    /// An object value.
    pub fn object(fields: BTreeMap<String, Value>) -> Value {
        Value::Object(Arc::new(fields))
    }

    /// A bytes value.
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Value {
        Value::Bytes(Arc::new(bytes.into()))
    }

    /// Whether `self` and `other` share their contents (one handed on from the other),
    /// without comparing them: a pointer check.
    pub fn shares_with(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Text(a), Value::Text(b)) => Arc::ptr_eq(a, b),
            (Value::List(a), Value::List(b)) => Arc::ptr_eq(a, b),
            (Value::Object(a), Value::Object(b)) => Arc::ptr_eq(a, b),
            (Value::Bytes(a), Value::Bytes(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The address of the shared contents of a text, list, object or bytes value (what
    /// [`Value::shares_with`] compares); `None` for a scalar.
    pub fn shared_address(&self) -> Option<usize> {
        match self {
            Value::Text(text) => Some(Arc::as_ptr(text).addr()),
            Value::List(items) => Some(Arc::as_ptr(items).addr()),
            Value::Object(fields) => Some(Arc::as_ptr(fields).addr()),
            Value::Bytes(bytes) => Some(Arc::as_ptr(bytes).addr()),
            Value::Null | Value::Bool(_) | Value::Integer(_) | Value::Number(_) => None,
        }
    }

    /// The items of a list, to change: copied first if another value shares them.
    pub fn list_mut(&mut self) -> Option<&mut Vec<Value>> {
        match self {
            Value::List(items) => Some(Arc::make_mut(items)),
            _ => None,
        }
    }

    /// The fields of an object, to change: copied first if another value shares them.
    pub fn object_mut(&mut self) -> Option<&mut BTreeMap<String, Value>> {
        match self {
            Value::Object(fields) => Some(Arc::make_mut(fields)),
            _ => None,
        }
    }

    /// The text, owned: taken without a copy when nothing else shares it.
    pub fn into_text(self) -> Option<String> {
        match self {
            Value::Text(text) => Some(Arc::unwrap_or_clone(text)),
            _ => None,
        }
    }

    /// The items of a list, owned: taken without a copy when nothing else shares them.
    pub fn into_list(self) -> Option<Vec<Value>> {
        match self {
            Value::List(items) => Some(Arc::unwrap_or_clone(items)),
            _ => None,
        }
    }

    /// The fields of an object, owned: taken without a copy when nothing else shares them.
    pub fn into_object(self) -> Option<BTreeMap<String, Value>> {
        match self {
            Value::Object(fields) => Some(Arc::unwrap_or_clone(fields)),
            _ => None,
        }
    }

    /// A short name of the value's shape, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Integer(_) => "integer",
            Value::Number(_) => "number",
            Value::Text(_) => "text",
            Value::List(_) => "list",
            Value::Object(_) => "object",
            Value::Bytes(_) => "bytes",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            #[allow(clippy::cast_precision_loss, reason = "JSON numbers are f64 anyway")]
            Value::Integer(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            #[allow(clippy::cast_possible_truncation, reason = "checked to be integral")]
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => Some(*n as i64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }

    /// Truthiness as a person would expect it in a condition: empty things and zero are false.
    pub fn is_truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Integer(i) => *i != 0,
            Value::Number(n) => *n != 0.0,
            Value::Text(s) => !s.is_empty() && s.as_str() != "false",
            Value::List(l) => !l.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Bytes(b) => !b.is_empty(),
        }
    }

    /// The value as text: strings as they are, everything else as compact JSON.
    pub fn to_text(&self) -> String {
        match self {
            Value::Text(s) => String::clone(s),
            Value::Null => String::new(),
            // Whole numbers print without a trailing `.0`, as a person writes them.
            Value::Number(n) if n.fract() == 0.0 && n.abs() < 1e15 => format!("{n:.0}"),
            other => other.to_json().to_string(),
        }
    }

    /// Converts to plain JSON. Bytes become `{"$bytes": "<base64>"}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Integer(i) => serde_json::Value::from(*i),
            Value::Number(n) => serde_json::Number::from_f64(*n)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Text(s) => serde_json::Value::String(String::clone(s)),
            Value::List(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_json).collect())
            }
            Value::Object(map) => serde_json::Value::Object(
                map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
            ),
            Value::Bytes(bytes) => {
                let mut map = serde_json::Map::new();
                map.insert(
                    BYTES_KEY.to_owned(),
                    serde_json::Value::String(
                        base64::engine::general_purpose::STANDARD.encode(bytes.as_slice()),
                    ),
                );
                serde_json::Value::Object(map)
            }
        }
    }

    /// Converts from plain JSON; the inverse of [`Value::to_json`].
    pub fn from_json(json: serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Integer(i),
                None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::text(s),
            serde_json::Value::Array(items) => {
                Value::list(items.into_iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(map) => {
                if map.len() == 1
                    && let Some(serde_json::Value::String(encoded)) = map.get(BYTES_KEY)
                    && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(encoded)
                {
                    return Value::bytes(bytes);
                }
                Value::object(
                    map.into_iter()
                        .map(|(k, v)| (k, Value::from_json(v)))
                        .collect(),
                )
            }
        }
    }

    /// A one-line preview at most `max_chars` long, for showing on a node.
    /// Reads only the start of a long text, so it costs the same whatever the text's size.
    pub fn preview(&self, max_chars: usize) -> String {
        let full;
        let text = match self {
            Value::Text(text) => text.as_str(),
            Value::Bytes(b) => {
                full = format!("<{} bytes>", b.len());
                &full
            }
            other => {
                full = other.to_text();
                &full
            }
        };
        let single_line: String = one_line_chars(text).take(max_chars + 1).collect();
        if single_line.chars().count() <= max_chars {
            single_line
        } else {
            clip_chars(&single_line, max_chars.saturating_sub(1))
        }
    }
}

/// `text` on one line for a one-line label: each line break a `¶` (a glyph every font of
/// the app has), a carriage return dropped, any other control character a space.
pub fn one_line(text: &str) -> String {
    one_line_chars(text).collect()
}

fn one_line_chars(text: &str) -> impl Iterator<Item = char> + '_ {
    text.chars().filter(|&c| c != '\r').map(|c| match c {
        '\n' => '¶',
        c if c.is_control() => ' ',
        c => c,
    })
}

/// The first `max_chars` characters of `text`, with an ellipsis after them when it was
/// longer; cut on a character boundary.
pub fn clip_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Writes what [`Value::to_json`] gives, without building that copy first (the run log
/// serializes every value it records).
impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeSeq as _};
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Integer(i) => serializer.serialize_i64(*i),
            Value::Number(n) if n.is_finite() => serializer.serialize_f64(*n),
            Value::Number(_) => serializer.serialize_unit(),
            Value::Text(s) => serializer.serialize_str(s),
            Value::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, value) in map.iter() {
                    out.serialize_entry(key, value)?;
                }
                out.end()
            }
            Value::Bytes(bytes) => {
                let mut out = serializer.serialize_map(Some(1))?;
                out.serialize_entry(
                    BYTES_KEY,
                    &base64::engine::general_purpose::STANDARD.encode(bytes.as_slice()),
                )?;
                out.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Value::from_json)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::text(s)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::text(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Integer(i)
    }
}

impl From<f64> for Value {
    fn from(n: f64) -> Self {
        Value::Number(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Self {
        Value::from_json(json)
    }
}

impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Self {
        Value::list(items)
    }
}

impl From<BTreeMap<String, Value>> for Value {
    fn from(fields: BTreeMap<String, Value>) -> Self {
        Value::object(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_bytes_and_numbers() {
        let value = Value::object(BTreeMap::from([
            ("b".to_owned(), Value::bytes(vec![0, 1, 255])),
            ("i".to_owned(), Value::Integer(-3)),
            ("n".to_owned(), Value::Number(1.5)),
            (
                "l".to_owned(),
                Value::list(vec![Value::Null, Value::from("x")]),
            ),
        ]));
        let text = serde_json::to_string(&value).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn serializing_writes_the_same_json_as_to_json() {
        let values = [
            Value::Null,
            Value::Bool(true),
            Value::Integer(i64::MIN),
            Value::Number(1.0),
            Value::Number(-2.5e-300),
            Value::Number(f64::NAN),
            Value::Number(f64::INFINITY),
            Value::from("quote \" and \\ and \u{1}\n ünï"),
            Value::bytes(vec![0, 1, 255]),
            Value::object(BTreeMap::from([
                (
                    "z".to_owned(),
                    Value::list(vec![Value::Null, Value::from("x")]),
                ),
                ("a".to_owned(), Value::object(BTreeMap::new())),
                ("$bytes".to_owned(), Value::Integer(1)),
            ])),
            Value::list(Vec::new()),
        ];
        for value in values {
            assert_eq!(
                serde_json::to_string(&value).unwrap(),
                value.to_json().to_string(),
                "{value:?}"
            );
            assert_eq!(
                serde_json::to_string_pretty(&value).unwrap(),
                serde_json::to_string_pretty(&value.to_json()).unwrap(),
                "{value:?}"
            );
        }
    }

    #[test]
    fn long_messages_are_clipped_on_a_character_boundary() {
        use super::clip_chars as clip;
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("exactly10!", 10), "exactly10!");
        assert_eq!(clip("ünïcödé text", 4), "ünïc…");
        assert_eq!(clip(&"x".repeat(500), 140).chars().count(), 141);
    }

    #[test]
    fn preview_is_cut_and_single_line() {
        assert_eq!(Value::from("a\nb").preview(10), "a¶b");
        assert_eq!(Value::from("abcdefghij").preview(5), "abcd…");
        assert_eq!(Value::from("abcde").preview(5), "abcde");
        assert_eq!(Value::from("ab\r\ncd").preview(5), "ab¶cd");
        assert_eq!(Value::from("ab\r\ncd\r\ne").preview(5), "ab¶c…");
    }

    #[test]
    fn a_clone_shares_its_contents_and_a_change_copies_them_first() {
        let original = Value::list(vec![Value::text("x".repeat(1000))]);
        let mut handed = original.clone();
        assert!(handed.shares_with(&original));
        handed.list_mut().unwrap().push(Value::Null);
        assert!(!handed.shares_with(&original));
        assert_eq!(original.as_list().unwrap().len(), 1);
        assert_eq!(handed.as_list().unwrap().len(), 2);
        // The items themselves are still shared.
        assert!(handed.as_list().unwrap()[0].shares_with(&original.as_list().unwrap()[0]));
    }

    #[test]
    fn truthiness() {
        assert!(!Value::from("").is_truthy());
        assert!(!Value::from("false").is_truthy());
        assert!(Value::from("yes").is_truthy());
        assert!(!Value::Integer(0).is_truthy());
        assert!(Value::list(vec![Value::Null]).is_truthy());
    }
}
