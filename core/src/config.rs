//! Block configuration: the field list a block declares (from which the inspector form and
//! the JSON Schema are generated) and typed reading with errors that name the field.

use serde::Serialize;

use crate::types::ValueType;

pub use crate::config_map::Config;

/// How a config field is edited and what it holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FieldKind {
    Text,
    Multiline,
    /// A minijinja template; its variables become input ports.
    Template,
    Number {
        min: Option<f64>,
        max: Option<f64>,
    },
    Integer {
        min: Option<i64>,
        max: Option<i64>,
    },
    Bool,
    Choice {
        options: Vec<String>,
    },
    Json,
    /// A port type name (`text`, `list<json>`…).
    Type,
    /// The name of a stored credential for `provider`.
    Credential {
        provider: String,
    },
}

/// One field of a block's config.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigField {
    pub name: String,
    pub label: String,
    #[serde(flatten)]
    pub kind: FieldKind,
    pub default: Option<serde_json::Value>,
    pub required: bool,
    pub help: String,
}

impl ConfigField {
    pub fn new(name: &str, label: &str, kind: FieldKind) -> Self {
        Self {
            name: name.to_owned(),
            label: label.to_owned(),
            kind,
            default: None,
            required: false,
            help: String::new(),
        }
    }

    pub fn text(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Text)
    }

    pub fn multiline(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Multiline)
    }

    pub fn template(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Template)
    }

    pub fn integer(name: &str, label: &str, min: Option<i64>, max: Option<i64>) -> Self {
        Self::new(name, label, FieldKind::Integer { min, max })
    }

    pub fn number(name: &str, label: &str, min: Option<f64>, max: Option<f64>) -> Self {
        Self::new(name, label, FieldKind::Number { min, max })
    }

    pub fn boolean(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Bool)
    }

    pub fn choice(name: &str, label: &str, options: &[&str]) -> Self {
        Self::new(
            name,
            label,
            FieldKind::Choice {
                options: options.iter().map(|s| (*s).to_owned()).collect(),
            },
        )
    }

    pub fn json(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Json)
    }

    pub fn value_type(name: &str, label: &str) -> Self {
        Self::new(name, label, FieldKind::Type)
    }

    pub fn credential(name: &str, label: &str, provider: &str) -> Self {
        Self::new(
            name,
            label,
            FieldKind::Credential {
                provider: provider.to_owned(),
            },
        )
    }

    #[must_use]
    pub fn default_value(mut self, value: serde_json::Value) -> Self {
        self.default = Some(value);
        self
    }

    #[must_use]
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    #[must_use]
    pub fn help(mut self, help: &str) -> Self {
        self.help = help.to_owned();
        self
    }
}

/// A config value that is missing or wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config `{field}`: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// Typed access to a config object; every error names the field.
#[derive(Clone, Copy)]
pub struct ConfigReader<'a>(pub &'a Config);

impl<'a> ConfigReader<'a> {
    pub fn get(&self, field: &str) -> Option<&'a serde_json::Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    pub fn str(&self, field: &str) -> Result<Option<&'a str>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(ConfigError::new(
                field,
                format!("expected text, got {other}"),
            )),
        }
    }

    pub fn str_or(&self, field: &str, default: &'a str) -> Result<&'a str, ConfigError> {
        Ok(self.str(field)?.unwrap_or(default))
    }

    pub fn required_str(&self, field: &str) -> Result<&'a str, ConfigError> {
        match self.str(field)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(ConfigError::new(field, "is required")),
        }
    }

    pub fn u64(&self, field: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ConfigError::new(field, format!("expected a whole number ≥ 0, got {v}"))
            }),
        }
    }

    pub fn u64_or(&self, field: &str, default: u64) -> Result<u64, ConfigError> {
        Ok(self.u64(field)?.unwrap_or(default))
    }

    pub fn f64(&self, field: &str) -> Result<Option<f64>, ConfigError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| ConfigError::new(field, format!("expected a number, got {v}"))),
        }
    }

    pub fn bool_or(&self, field: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(field) {
            None => Ok(default),
            Some(serde_json::Value::Bool(b)) => Ok(*b),
            Some(other) => Err(ConfigError::new(
                field,
                format!("expected true or false, got {other}"),
            )),
        }
    }

    pub fn value_type_or(&self, field: &str, default: ValueType) -> Result<ValueType, ConfigError> {
        match self.str(field)? {
            None => Ok(default),
            Some(s) => s
                .parse()
                .map_err(|e: crate::types::UnknownType| ConfigError::new(field, e.to_string())),
        }
    }

    pub fn choice_or(
        &self,
        field: &str,
        options: &[&str],
        default: &'a str,
    ) -> Result<&'a str, ConfigError> {
        let value = self.str_or(field, default)?;
        if options.contains(&value) {
            Ok(value)
        } else {
            Err(ConfigError::new(
                field,
                format!("`{value}` is not one of {}", options.join(", ")),
            ))
        }
    }
}

/// Generates the JSON Schema of a config object from its field list.
pub fn fields_json_schema(fields: &[ConfigField]) -> serde_json::Value {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for field in fields {
        let mut schema = match &field.kind {
            FieldKind::Text | FieldKind::Multiline | FieldKind::Template | FieldKind::Type => {
                serde_json::json!({ "type": "string" })
            }
            FieldKind::Credential { provider } => {
                serde_json::json!({ "type": "string", "x-credential-provider": provider })
            }
            FieldKind::Number { min, max } => {
                let mut s = serde_json::json!({ "type": "number" });
                if let Some(min) = min {
                    s["minimum"] = serde_json::json!(min);
                }
                if let Some(max) = max {
                    s["maximum"] = serde_json::json!(max);
                }
                s
            }
            FieldKind::Integer { min, max } => {
                let mut s = serde_json::json!({ "type": "integer" });
                if let Some(min) = min {
                    s["minimum"] = serde_json::json!(min);
                }
                if let Some(max) = max {
                    s["maximum"] = serde_json::json!(max);
                }
                s
            }
            FieldKind::Bool => serde_json::json!({ "type": "boolean" }),
            FieldKind::Choice { options } => {
                serde_json::json!({ "type": "string", "enum": options })
            }
            FieldKind::Json => serde_json::json!({}),
        };
        schema["title"] = serde_json::json!(field.label);
        if !field.help.is_empty() {
            schema["description"] = serde_json::json!(field.help);
        }
        if let Some(default) = &field.default {
            schema["default"] = default.clone();
        }
        if field.required {
            required.push(field.name.clone());
        }
        properties.insert(field.name.clone(), schema);
    }
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_names_the_field() {
        let config: Config = serde_json::from_str(r#"{"ms": "soon", "name": ""}"#).unwrap();
        let reader = ConfigReader(&config);
        let err = reader.u64("ms").unwrap_err();
        assert_eq!(err.field, "ms");
        assert!(
            err.to_string()
                .starts_with("config `ms`: expected a whole number")
        );
        assert_eq!(
            reader.required_str("name").unwrap_err().to_string(),
            "config `name`: is required"
        );
        assert_eq!(reader.u64_or("missing", 7).unwrap(), 7);
    }

    #[test]
    fn schema_lists_fields_and_required() {
        let schema = fields_json_schema(&[
            ConfigField::integer("ms", "Delay (ms)", Some(0), None).required(),
            ConfigField::choice("method", "Method", &["GET", "POST"]),
        ]);
        assert_eq!(schema["properties"]["ms"]["minimum"], 0);
        assert_eq!(schema["properties"]["method"]["enum"][1], "POST");
        assert_eq!(schema["required"][0], "ms");
    }
}
