//! The type lattice of ports, and the one compatibility function that decides what may
//! connect. The canvas (while a wire is dragged), the validator and the executor all use
//! [`compatibility`] and [`coerce`]; no other code decides type questions.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::value::Value;

/// The static type of a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// Any JSON value (`json`). Accepts everything; flowing out of it is checked at run time.
    Any,
    Text,
    Number,
    Integer,
    Bool,
    Object,
    Bytes,
    /// Chat messages: a list of `{role, content}` objects.
    Messages,
    /// A tool description an agent can call.
    Tool,
    List(Box<ValueType>),
}

impl ValueType {
    pub fn list_of(item: ValueType) -> ValueType {
        ValueType::List(Box::new(item))
    }

    /// Every type name the parser accepts at the top level, for pickers in the UI.
    pub fn common() -> Vec<ValueType> {
        vec![
            ValueType::Text,
            ValueType::Number,
            ValueType::Integer,
            ValueType::Bool,
            ValueType::Any,
            ValueType::Object,
            ValueType::list_of(ValueType::Text),
            ValueType::list_of(ValueType::Any),
            ValueType::Messages,
            ValueType::Bytes,
        ]
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::Any => f.write_str("json"),
            ValueType::Text => f.write_str("text"),
            ValueType::Number => f.write_str("number"),
            ValueType::Integer => f.write_str("integer"),
            ValueType::Bool => f.write_str("bool"),
            ValueType::Object => f.write_str("object"),
            ValueType::Bytes => f.write_str("bytes"),
            ValueType::Messages => f.write_str("messages"),
            ValueType::Tool => f.write_str("tool"),
            ValueType::List(item) => write!(f, "list<{item}>"),
        }
    }
}

/// The type a graph input declares to take a secret (a password, a token): its value is
/// text, handled like a resolved credential.
pub const SECRET_INPUT_TYPE: &str = "secret";

/// A type name that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown type `{0}`: expected one of text, number, integer, bool, json, object, bytes, messages, tool, list<T>"
)]
pub struct UnknownType(pub String);

impl FromStr for ValueType {
    type Err = UnknownType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        let simple = match trimmed {
            "json" | "any" => Some(ValueType::Any),
            "text" | "string" => Some(ValueType::Text),
            "number" | "float" => Some(ValueType::Number),
            "integer" | "int" => Some(ValueType::Integer),
            "bool" | "boolean" => Some(ValueType::Bool),
            "object" => Some(ValueType::Object),
            "bytes" | "file" => Some(ValueType::Bytes),
            "messages" => Some(ValueType::Messages),
            "tool" => Some(ValueType::Tool),
            _ => None,
        };
        if let Some(ty) = simple {
            return Ok(ty);
        }
        if let Some(inner) = trimmed
            .strip_prefix("list<")
            .and_then(|rest| rest.strip_suffix('>'))
        {
            return Ok(ValueType::list_of(inner.parse()?));
        }
        Err(UnknownType(s.to_owned()))
    }
}

impl Serialize for ValueType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ValueType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for ValueType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ValueType".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A port type: text, number, integer, bool, json, object, bytes, messages, tool, or list<T>.",
            "pattern": "^(list<)*(text|number|integer|bool|json|object|bytes|messages|tool)(>)*$"
        })
    }
}

/// How a wire from one type to another carries its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compat {
    /// Same type, or into `json`: the value passes unchanged.
    Exact,
    /// A lossless conversion from the coercion table (e.g. integer → number, number → text).
    Coerce,
    /// From `json` into a specific type: the value is checked when it arrives.
    Checked,
}

/// Why two types cannot be connected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot connect {from} to {to}: {reason}")]
pub struct TypeMismatch {
    pub from: ValueType,
    pub to: ValueType,
    pub reason: String,
}

/// The coercion table: every conversion the type system allows, in one place.
///
/// | from                         | to        | how                                   |
/// |------------------------------|-----------|---------------------------------------|
/// | anything                     | json      | unchanged                             |
/// | json                         | anything  | checked on arrival                    |
/// | integer                      | number    | unchanged (integers are numbers)      |
/// | number, integer, bool        | text      | formatted                             |
/// | object, list, messages       | text      | compact JSON                          |
/// | text                         | messages  | one user message                      |
/// | messages                     | list<object>, list<json> | unchanged              |
/// | list<A>                      | list<B>   | element-wise, if A → B                |
///
/// A `tool` output goes only into an input that takes tools: its node is called by that
/// consumer, so anywhere else it would hand on a description instead of running.
pub fn compatibility(from: &ValueType, to: &ValueType) -> Result<Compat, TypeMismatch> {
    use ValueType as T;
    let mismatch = |reason: &str| TypeMismatch {
        from: from.clone(),
        to: to.clone(),
        reason: reason.to_owned(),
    };
    match (from, to) {
        (a, b) if a == b => Ok(Compat::Exact),
        (T::Tool, _) => Err(mismatch(
            "a tool is called by the block it is wired to; wire it to an input that takes tools (an agent's `tools`)",
        )),
        (_, T::Any) => Ok(Compat::Exact),
        (T::Any, _) => Ok(Compat::Checked),
        (T::Integer, T::Number) => Ok(Compat::Coerce),
        (T::Number | T::Integer | T::Bool, T::Text) => Ok(Compat::Coerce),
        (T::Object | T::List(_) | T::Messages, T::Text) => Ok(Compat::Coerce),
        (T::Text, T::Messages) => Ok(Compat::Coerce),
        (T::Messages, T::List(item)) if matches!(**item, T::Object | T::Any) => Ok(Compat::Exact),
        (T::List(item), T::Messages) if matches!(**item, T::Object | T::Any) => Ok(Compat::Checked),
        (T::List(a), T::List(b)) => match compatibility(a, b) {
            Ok(inner) => Ok(inner),
            Err(inner) => Err(mismatch(&format!("list items: {}", inner.reason))),
        },
        (T::Bytes, T::Text) => Err(mismatch("bytes are not text; decode them first")),
        (T::Text, T::Number | T::Integer | T::Bool) => Err(mismatch(
            "text is not parsed implicitly; use a JSON parse block",
        )),
        (T::Number, T::Integer) => Err(mismatch("a number may have a fraction")),
        (_, T::List(_)) => Err(mismatch("a single value is not a list")),
        (T::List(_), _) => Err(mismatch("a list is not a single value")),
        _ => Err(mismatch("the types are unrelated")),
    }
}

/// A value that does not fit the type it must have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("expected {expected}, got {got}")]
pub struct CoerceError {
    pub expected: ValueType,
    pub got: String,
}

/// A run input as a person gives it (text from `--input` or a form) in its declared type.
/// Text is read as JSON first when the type is not text: `3` becomes a number, `{"a":1}`
/// an object; for `json` any other text stays text.
pub fn coerce_given(value: Value, to: &ValueType) -> Result<Value, CoerceError> {
    if let Value::Text(text) = &value
        && !matches!(to, ValueType::Text | ValueType::Bytes)
    {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(text)
            && let Ok(parsed) = coerce(Value::from_json(json), to)
        {
            return Ok(parsed);
        }
        if *to == ValueType::Any {
            return Ok(value);
        }
    }
    coerce(value, to)
}

/// Converts `value` to `to`, following the coercion table of [`compatibility`].
/// Values of the right shape pass unchanged.
pub fn coerce(value: Value, to: &ValueType) -> Result<Value, CoerceError> {
    use ValueType as T;
    let fail = |value: &Value| CoerceError {
        expected: to.clone(),
        got: value.kind_name().to_owned(),
    };
    match (to, value) {
        (T::Any, v) => Ok(v),
        (T::Text, Value::Text(s)) => Ok(Value::Text(s)),
        (T::Text, Value::Bytes(b)) => String::from_utf8(Arc::unwrap_or_clone(b))
            .map(Value::text)
            .map_err(|_| CoerceError {
                expected: T::Text,
                got: "bytes that are not UTF-8".to_owned(),
            }),
        (T::Text, v) => Ok(Value::text(v.to_text())),
        (T::Number, Value::Number(n)) => Ok(Value::Number(n)),
        // Whole numbers are numbers already; keeping them integral keeps `3` printing as `3`.
        (T::Number, Value::Integer(i)) => Ok(Value::Integer(i)),
        (T::Integer, v) => v.as_i64().map(Value::Integer).ok_or_else(|| fail(&v)),
        (T::Bool, Value::Bool(b)) => Ok(Value::Bool(b)),
        (T::Object, Value::Object(o)) => Ok(Value::Object(o)),
        (T::Tool, Value::Object(o)) => Ok(Value::Object(o)),
        (T::Bytes, Value::Bytes(b)) => Ok(Value::Bytes(b)),
        (T::Bytes, Value::Text(s)) => Ok(Value::bytes(Arc::unwrap_or_clone(s).into_bytes())),
        (T::Messages, Value::Text(s)) => {
            Ok(Value::list(vec![message("user", Arc::unwrap_or_clone(s))]))
        }
        (T::Messages, Value::List(items)) => {
            if items.iter().all(is_message) {
                Ok(Value::List(items))
            } else {
                Err(CoerceError {
                    expected: T::Messages,
                    got: "a list whose items are not {role, content} objects".to_owned(),
                })
            }
        }
        (T::List(item_type), Value::List(items)) => Arc::unwrap_or_clone(items)
            .into_iter()
            .map(|item| coerce(item, item_type))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::list),
        (_, v) => Err(fail(&v)),
    }
}

/// Builds one chat message.
pub fn message(role: &str, content: impl Into<String>) -> Value {
    Value::object(BTreeMap::from([
        ("role".to_owned(), Value::from(role)),
        ("content".to_owned(), Value::text(content)),
    ]))
}

fn is_message(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        o.get("role").and_then(Value::as_str).is_some() && o.contains_key("content")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> ValueType {
        s.parse().unwrap()
    }

    #[test]
    fn parses_and_prints_nested_lists() {
        assert_eq!(t("list<list<text>>").to_string(), "list<list<text>>");
        assert_eq!(t("any"), ValueType::Any);
        assert!("list<nope>".parse::<ValueType>().is_err());
        assert!("list<text".parse::<ValueType>().is_err());
    }

    #[test]
    fn compatibility_table() {
        assert_eq!(compatibility(&t("text"), &t("text")), Ok(Compat::Exact));
        assert_eq!(compatibility(&t("number"), &t("json")), Ok(Compat::Exact));
        assert_eq!(compatibility(&t("json"), &t("number")), Ok(Compat::Checked));
        assert_eq!(
            compatibility(&t("integer"), &t("number")),
            Ok(Compat::Coerce)
        );
        assert_eq!(
            compatibility(&t("list<integer>"), &t("list<number>")),
            Ok(Compat::Coerce)
        );
        assert_eq!(
            compatibility(&t("text"), &t("messages")),
            Ok(Compat::Coerce)
        );
        let refused = compatibility(&t("text"), &t("number")).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("cannot connect text to number")
        );
        assert!(compatibility(&t("number"), &t("integer")).is_err());
        assert!(compatibility(&t("text"), &t("list<text>")).is_err());
        assert!(compatibility(&t("list<text>"), &t("list<bool>")).is_err());
        assert!(compatibility(&t("bytes"), &t("text")).is_err());
        assert_eq!(compatibility(&t("tool"), &t("tool")), Ok(Compat::Exact));
        for into in ["json", "text", "object"] {
            assert!(
                compatibility(&t("tool"), &t(into)).is_err(),
                "tool into {into}"
            );
        }
    }

    #[test]
    fn coerce_follows_the_table() {
        assert_eq!(
            coerce(Value::Integer(2), &t("number")),
            Ok(Value::Integer(2))
        );
        assert_eq!(
            coerce(Value::Number(2.0), &t("integer")),
            Ok(Value::Integer(2))
        );
        assert!(coerce(Value::Number(2.5), &t("integer")).is_err());
        assert_eq!(
            coerce(Value::Bool(true), &t("text")),
            Ok(Value::from("true"))
        );
        assert_eq!(
            coerce(Value::from("hi"), &t("messages")),
            Ok(Value::list(vec![message("user", "hi")]))
        );
        let err = coerce(Value::from("x"), &t("list<text>")).unwrap_err();
        assert_eq!(err.to_string(), "expected list<text>, got text");
        assert!(coerce(Value::list(vec![Value::from("x")]), &t("list<integer>")).is_err());
    }
}
