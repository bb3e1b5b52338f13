//! Refusing duplicate keys in a JSON text (JSON parsers keep the last one silently, so a
//! hand-edited graph file could run something other than what its reader saw). Plain
//! JSON, no graph types: the graph model and the file reader both stand above it.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Fails on the first object that has a key twice, naming the key and where it is.
pub(crate) fn check_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    Walk { at: &Place::Root }.deserialize(&mut deserializer)
}

/// Where a value sits in the document, as a chain up to the top; spelled out
/// (`$.nodes[2].config`) only for an error, so a large file is walked without allocating
/// a path per value.
enum Place<'a> {
    Root,
    Index(&'a Place<'a>, usize),
    Key(&'a Place<'a>, &'a str),
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Root => f.write_str("$"),
            Place::Index(parent, index) => write!(f, "{parent}[{index}]"),
            Place::Key(parent, key) => write!(f, "{parent}.{key}"),
        }
    }
}

/// Visits a JSON value without keeping it.
struct Walk<'a> {
    at: &'a Place<'a>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let at = Place::Index(self.at, index);
            if seq.next_element_seed(Walk { at: &at })?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // Keys borrowed from the text where they have no escapes; objects are small, so a
        // list is searched rather than hashed.
        let mut seen: Vec<Cow<'de, str>> = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key `{key}` in {}; each key may appear once per object",
                    self.at
                )));
            }
            map.next_value_seed(Walk {
                at: &Place::Key(self.at, &key),
            })?;
            if seen.len() >= SEEN_LIST_MAX {
                return walk_large_map(self.at, seen, map);
            }
            seen.push(key);
        }
        Ok(())
    }
}

/// Objects with more keys than this are checked with a hash set.
const SEEN_LIST_MAX: usize = 32;

fn walk_large_map<'de, A: MapAccess<'de>>(
    at: &Place<'_>,
    seen: Vec<Cow<'de, str>>,
    mut map: A,
) -> Result<(), A::Error> {
    let mut seen: HashSet<Cow<'de, str>> = seen.into_iter().collect();
    while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
        if seen.contains(&key) {
            return Err(de::Error::custom(format!(
                "duplicate key `{key}` in {at}; each key may appear once per object"
            )));
        }
        map.next_value_seed(Walk {
            at: &Place::Key(at, &key),
        })?;
        seen.insert(key);
    }
    Ok(())
}

/// An object key, borrowed from the text unless it holds an escape.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
            fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}
