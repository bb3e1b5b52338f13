//! [`Config`]: a node's config object, kept as a short sorted list.
//!
//! Every node of a graph holds one, most with one to three fields. A `serde_json::Map` (a
//! B-tree) allocates a 600-byte leaf for even one field, which made configs the largest part
//! of a loaded graph; a sorted vector holds exactly its fields. Keys are kept in order, so
//! iteration and serialization match the map's (sorted by key) byte for byte.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap as _;
use serde_json::Value;

/// A node's config as stored in the graph document: a JSON object, fields sorted by name.
#[derive(Clone, Default, PartialEq)]
pub struct Config {
    fields: Vec<(String, Value)>,
}

impl Config {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.fields.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).ok().map(|i| &self.fields[i].1)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.position(key).ok().map(|i| &mut self.fields[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key`, returning the value it replaced.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.fields[i].1, value)),
            Err(i) => {
                self.fields.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.position(key).ok().map(|i| self.fields.remove(i).1)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut Value) -> bool) {
        self.fields.retain_mut(|(k, v)| keep(k, v));
    }

    /// Fields in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &Value)> + Clone {
        self.fields.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = (&String, &mut Value)> {
        self.fields.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> + Clone {
        self.fields.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &Value> + Clone {
        self.fields.iter().map(|(_, v)| v)
    }

    /// The config as a JSON object.
    pub fn to_map(&self) -> serde_json::Map<String, Value> {
        self.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Builds from fields in any order; a repeated key keeps its last value, as in a map.
    fn from_unsorted(mut fields: Vec<(String, Value)>) -> Self {
        // Stable: equal keys keep their order, so the last one can win below.
        fields.sort_by(|(a, _), (b, _)| a.cmp(b));
        let mut kept: Vec<(String, Value)> = Vec::with_capacity(fields.len());
        for (key, value) in fields {
            match kept.last_mut() {
                Some(last) if last.0 == key => last.1 = value,
                _ => kept.push((key, value)),
            }
        }
        kept.shrink_to_fit();
        Self { fields: kept }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// `config["field"]`, as on a map: panics when the field is missing.
impl std::ops::Index<&str> for Config {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        self.get(key)
            .unwrap_or_else(|| panic!("config has no field `{key}`"))
    }
}

impl FromIterator<(String, Value)> for Config {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Self::from_unsorted(iter.into_iter().collect())
    }
}

impl From<serde_json::Map<String, Value>> for Config {
    fn from(map: serde_json::Map<String, Value>) -> Self {
        // The map is sorted and has no repeats already.
        let mut fields: Vec<(String, Value)> = map.into_iter().collect();
        fields.shrink_to_fit();
        Self { fields }
    }
}

impl From<Config> for serde_json::Map<String, Value> {
    fn from(config: Config) -> Self {
        config.fields.into_iter().collect()
    }
}

impl From<Config> for Value {
    fn from(config: Config) -> Self {
        Value::Object(config.into())
    }
}

impl<'a> IntoIterator for &'a Config {
    type Item = (&'a String, &'a Value);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Value)>,
        fn(&'a (String, Value)) -> (&'a String, &'a Value),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.fields.iter().map(|(k, v)| (k, v))
    }
}

impl IntoIterator for Config {
    type Item = (String, Value);
    type IntoIter = std::vec::IntoIter<(String, Value)>;

    fn into_iter(self) -> Self::IntoIter {
        self.fields.into_iter()
    }
}

impl serde::Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Config {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ConfigVisitor;

        impl<'de> Visitor<'de> for ConfigVisitor {
            type Value = Config;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Config, A::Error> {
                // Most configs hold a field or two: start small rather than at the default 4.
                let mut fields = Vec::with_capacity(access.size_hint().unwrap_or(1).min(64));
                while let Some(entry) = access.next_entry::<String, Value>()? {
                    fields.push(entry);
                }
                let sorted = fields.is_sorted_by(|(a, _), (b, _)| a < b);
                if sorted {
                    fields.shrink_to_fit();
                    Ok(Config { fields })
                } else {
                    Ok(Config::from_unsorted(fields))
                }
            }
        }

        deserializer.deserialize_map(ConfigVisitor)
    }
}

impl schemars::JsonSchema for Config {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Config".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <std::collections::BTreeMap<String, Value>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_kept_sorted_and_serialize_like_a_map() {
        let text = r#"{"zeta": 1, "alpha": {"b": 2, "a": 1}, "mid": "x"}"#;
        let config: Config = serde_json::from_str(text).unwrap();
        let map: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&config).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        assert_eq!(config.keys().collect::<Vec<_>>(), ["alpha", "mid", "zeta"]);
        assert_eq!(config.get("mid"), Some(&Value::from("x")));
        assert_eq!(config.get("nope"), None);
        assert_eq!(Config::from(map.clone()), config);
        assert_eq!(serde_json::Map::from(config), map);
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_like_a_map() {
        let text = r#"{"b": 1, "a": 2, "b": 3}"#;
        let config: Config = serde_json::from_str(text).unwrap();
        let map: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::Map::from(config), map);
    }

    #[test]
    fn insert_and_remove_keep_the_order() {
        let mut config = Config::new();
        assert_eq!(config.insert("m".into(), 1.into()), None);
        assert_eq!(config.insert("a".into(), 2.into()), None);
        assert_eq!(config.insert("z".into(), 3.into()), None);
        assert_eq!(config.insert("m".into(), 4.into()), Some(1.into()));
        assert_eq!(config.keys().collect::<Vec<_>>(), ["a", "m", "z"]);
        assert_eq!(config.remove("a"), Some(2.into()));
        assert_eq!(config.remove("a"), None);
        assert_eq!(config.len(), 2);
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            serde_json::json!({"m": 4, "z": 3})
        );
    }

    #[test]
    fn not_an_object_is_refused() {
        let err = serde_json::from_str::<Config>("[1]").unwrap_err();
        assert!(err.to_string().contains("a JSON object"), "{err}");
    }
}
