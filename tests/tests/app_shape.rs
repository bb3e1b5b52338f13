//! The app's `App` stays a handful of named parts: its fields are counted on the source
//! (app/src/lib.rs), so that state which belongs together is grouped in a struct of the room
//! that owns it (the canvas session, the prompts, the problems…) rather than added flat.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;

/// The most fields `App` may have.
const MOST_APP_FIELDS: usize = 35;

#[test]
fn the_app_has_at_most_35_fields() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../app/src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    let fields = struct_fields(&source, "App").unwrap_or_else(|| {
        panic!("{}: no `pub struct App {{ … }}`", lib.display());
    });
    assert!(
        fields.len() <= MOST_APP_FIELDS,
        "App has {} fields, at most {MOST_APP_FIELDS} are allowed: group those that belong \
         together in a struct of the room that owns them. Its fields: {}",
        fields.len(),
        fields.join(", ")
    );
}

/// The check reads fields however they are declared, and only the struct's own.
#[test]
fn the_fields_of_a_struct_are_read_from_its_source() {
    let source = "/// The app.\npub struct App {\n    catalog: Arc<Registry>,\n    /// Shown.\n    \
                  pub document: Document,\n    pub(crate) run: RunView,\n    #[allow(dead_code)]\n    \
                  commands: Vec<Command>,\n}\n\nstruct Other {\n    not_counted: u8,\n}\n";
    assert_eq!(
        struct_fields(source, "App").unwrap(),
        ["catalog", "document", "run", "commands"]
    );
    assert_eq!(struct_fields(source, "Missing"), None);
}

/// The field names of `pub struct NAME { … }` in `source` (rustfmt's layout: one field a
/// line, indented four spaces), `None` when there is no such struct.
fn struct_fields(source: &str, name: &str) -> Option<Vec<String>> {
    let head = format!("pub struct {name} {{");
    let mut lines = source.lines().skip_while(|line| line.trim_end() != head);
    lines.next()?;
    let mut fields = Vec::new();
    for line in lines {
        if line.starts_with('}') {
            return Some(fields);
        }
        let Some(declaration) = line.strip_prefix("    ") else {
            continue;
        };
        if declaration.starts_with(char::is_whitespace)
            || declaration.starts_with("//")
            || declaration.starts_with('#')
        {
            continue;
        }
        let declaration = declaration
            .strip_prefix("pub(crate) ")
            .or_else(|| declaration.strip_prefix("pub "))
            .unwrap_or(declaration);
        if let Some((field, _)) = declaration.split_once(':') {
            fields.push(field.trim().to_owned());
        }
    }
    None
}
