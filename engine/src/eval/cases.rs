//! Reading a cases file: JSON Lines (one case a line) or CSV (graph inputs as columns,
//! `expect.OUTPUT` columns for outputs that must equal the cell, an optional `case` column
//! naming the case, an optional `expect.run` column holding `completes`).
//!
//! A JSON Lines case is `{"name", "inputs", "expect"}`. Under `expect`, each output has a
//! plain value it must equal (a text, number, list…) or an object of checks
//! (`{"contains": "x", "regex": "…"}`): an object names checks only, so an object the output
//! must equal is written `{"equals": {...}}`. `"run"` holds the run checks, or
//! `"completes"` (the same as `{"status": "completed"}`) when completing is the check.
//! A case must check something: no `expect`, `"expect": {}` or `"run": {}` is refused.
//!
//! The file is read as bytes: a UTF-8 byte order mark at its start is skipped, and bytes
//! that are not UTF-8 are refused naming their line. Lines are counted as an editor counts
//! them: from 1, blank lines counted.

use std::path::Path;

use agentloom_core::{Value, ValueMap};

use super::checks::{Check, JudgeSpec, RunChecks, did_you_mean};

/// One case: inputs for a run and what its outputs must be.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub name: String,
    /// The line (JSON Lines) or row (CSV, the header is line 1) it was read from.
    pub line: usize,
    pub inputs: ValueMap,
    /// Checks per output, in file order.
    pub expect: Vec<(String, Check)>,
    pub run: RunChecks,
}

/// Why a cases file cannot be used: the line and the field, and what is wrong (ending with
/// the case it is about, when known).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {message}")]
pub struct CasesError {
    pub file: String,
    pub line: usize,
    /// Like `expect.greeting.regex`; `-` for the line as a whole.
    pub field: String,
    pub message: String,
}

/// The fields of a JSON Lines case.
const CASE_FIELDS: [&str; 3] = ["name", "inputs", "expect"];

/// What a case checking nothing is told.
const CHECKS_NOTHING: &str = "checks nothing: give `expect` an output and its value or \
    checks, or \"run\": \"completes\" when completing is the check";

/// Builds the errors of one file.
struct Errors {
    file: String,
}

impl Errors {
    fn at(&self, line: usize, field: &str, message: String) -> CasesError {
        CasesError {
            file: self.file.clone(),
            line,
            field: field.to_owned(),
            message,
        }
    }

    /// An error about the case `case` (as [`case_label`] shows it).
    fn in_case(&self, line: usize, field: &str, message: &str, case: &str) -> CasesError {
        self.at(line, field, format!("{message} (in {case})"))
    }
}

/// How an error names a case: `case "greets Ada"`, or `case 3` for one without a name.
fn case_label(name: Option<&str>, number: usize) -> String {
    match name {
        Some(name) => format!("case {name:?}"),
        None => format!("case {number}"),
    }
}

/// Reads the cases in `bytes`, the content of the file at `path` (CSV when it ends in
/// `.csv`, else JSON Lines). Takes a `&str` as well as bytes.
pub fn parse_cases(path: &Path, bytes: impl AsRef<[u8]>) -> Result<Vec<Case>, CasesError> {
    let errors = Errors {
        file: path.display().to_string(),
    };
    let bytes = bytes.as_ref();
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let before = &bytes[..e.valid_up_to()];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        // Valid UTF-8 up to the bad bytes: their column counted in characters.
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        errors.at(
            line,
            "-",
            format!(
                "not UTF-8 text: the bytes at column {column} are not UTF-8 (save the file \
                 as UTF-8)"
            ),
        )
    })?;
    let is_csv = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("csv"));
    let cases = if is_csv {
        parse_csv(text, &errors)?
    } else {
        parse_jsonl(text, &errors)?
    };
    if cases.is_empty() {
        return Err(errors.at(1, "-", "the file holds no case".to_owned()));
    }
    let mut seen = std::collections::HashMap::new();
    for case in &cases {
        if let Some(first) = seen.insert(case.name.clone(), case.line) {
            return Err(errors.at(
                case.line,
                if is_csv { "case" } else { "name" },
                format!(
                    "`{}` is the name of the case on line {first} too; names must differ",
                    case.name
                ),
            ));
        }
    }
    Ok(cases)
}

/// serde_json's reason without its position (always line 1 of a one-line text), and the
/// column.
fn json_reason(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let reason = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(reason, _)| reason);
    format!("{reason} at column {}", error.column())
}

fn parse_jsonl(text: &str, errors: &Errors) -> Result<Vec<Case>, CasesError> {
    let mut cases = Vec::new();
    // Split on `\n` only, as editors count lines (a `\r` before it is dropped).
    for (index, raw) in text.split('\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            continue;
        }
        let number = cases.len() + 1;
        let json: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| errors.at(line, "-", format!("not a JSON object: {}", json_reason(&e))))?;
        let serde_json::Value::Object(object) = json else {
            return Err(errors.at(
                line,
                "-",
                "a case is a JSON object: {\"name\", \"inputs\", \"expect\"}".to_owned(),
            ));
        };
        let name = match object.get("name") {
            None => None,
            Some(serde_json::Value::String(name)) if !name.trim().is_empty() => Some(name.clone()),
            Some(_) => {
                return Err(errors.in_case(
                    line,
                    "name",
                    "must be a non-empty text",
                    &case_label(None, number),
                ));
            }
        };
        let label = case_label(name.as_deref(), number);
        let fail = |field: &str, message: &str| errors.in_case(line, field, message, &label);
        if let Some(key) = object.keys().find(|k| !CASE_FIELDS.contains(&k.as_str())) {
            return Err(fail(
                key,
                &format!(
                    "unknown field; {}a case has `name`, `inputs` and `expect`",
                    did_you_mean(key, &CASE_FIELDS)
                ),
            ));
        }
        let inputs = match object.get("inputs") {
            None => ValueMap::new(),
            Some(serde_json::Value::Object(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), Value::from_json(v.clone())))
                .collect(),
            Some(_) => {
                return Err(fail(
                    "inputs",
                    "must be an object of input names and values",
                ));
            }
        };
        let mut expect = Vec::new();
        let mut run = RunChecks::default();
        match object.get("expect") {
            None => return Err(fail("expect", CHECKS_NOTHING)),
            Some(serde_json::Value::Object(map)) => {
                for (output, check) in map {
                    if output == "run" {
                        run = RunChecks::parse(check)
                            .map_err(|(field, message)| fail(&field, &message))?;
                        continue;
                    }
                    for check in Check::parse(output, check)
                        .map_err(|(field, message)| fail(&field, &message))?
                    {
                        expect.push((output.clone(), check));
                    }
                }
            }
            Some(_) => {
                return Err(fail(
                    "expect",
                    "must be an object: output name → value or checks, and \"run\"",
                ));
            }
        }
        if expect.is_empty() && run.is_empty() {
            return Err(fail("expect", CHECKS_NOTHING));
        }
        cases.push(Case {
            name: name.unwrap_or_else(|| format!("case {number}")),
            line,
            inputs,
            expect,
            run,
        });
    }
    Ok(cases)
}

/// The line a CSV position is on, counted from its byte offset in `text` (1-based, blank
/// lines included: the reader's own count skips them). The reader places a record after
/// the line end before it and any blank lines, which are skipped here.
fn csv_line(text: &str, position: Option<&csv::Position>, fallback: usize) -> usize {
    let bytes = text.as_bytes();
    let Some(mut byte) = position.and_then(|p| usize::try_from(p.byte()).ok()) else {
        return fallback;
    };
    while bytes.get(byte).is_some_and(|b| matches!(b, b'\r' | b'\n')) {
        byte += 1;
    }
    bytes.get(..byte).map_or(fallback, |before| {
        before.iter().filter(|b| **b == b'\n').count() + 1
    })
}

/// Why a CSV row does not read, without the reader's own line count.
fn csv_reason(error: &csv::Error) -> String {
    match error.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("the row has {len} cells, the header row {expected_len}"),
        _ => error.to_string(),
    }
}

fn parse_csv(text: &str, errors: &Errors) -> Result<Vec<Case>, CasesError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| {
            errors.at(
                csv_line(text, e.position(), 1),
                "-",
                format!("the header row does not read: {}", csv_reason(&e)),
            )
        })?
        .clone();
    let case_column = headers.iter().position(|h| h == "case");
    let mut cases = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let number = cases.len() + 1;
        let record = record.map_err(|e| {
            errors.in_case(
                csv_line(text, e.position(), index + 2),
                "-",
                &format!("the row does not read: {}", csv_reason(&e)),
                &case_label(None, number),
            )
        })?;
        let line = csv_line(text, record.position(), index + 2);
        let name = case_column
            .and_then(|at| record.get(at))
            .filter(|n| !n.trim().is_empty())
            .map(str::to_owned);
        let label = case_label(name.as_deref(), number);
        let fail = |field: &str, message: &str| errors.in_case(line, field, message, &label);
        let mut inputs = ValueMap::new();
        let mut expect = Vec::new();
        let mut run = RunChecks::default();
        for (column, cell) in headers.iter().zip(record.iter()) {
            if column == "case" {
                continue;
            } else if column == "expect.run" {
                match cell.trim() {
                    "" => {}
                    "completes" => run = RunChecks::completes(),
                    _ => {
                        return Err(fail(
                            column,
                            "must be `completes` (completing is the check) or empty",
                        ));
                    }
                }
            } else if let Some(output) = column.strip_prefix("expect.") {
                if output.is_empty() {
                    return Err(fail(column, "names no output"));
                }
                expect.push((output.to_owned(), Check::Equals(Value::text(cell))));
            } else {
                inputs.insert(column.to_owned(), Value::text(cell));
            }
        }
        if expect.is_empty() && run.is_empty() {
            return Err(fail(
                "expect",
                "checks nothing: add `expect.OUTPUT` columns holding the values the outputs \
                 must equal, or an `expect.run` column holding `completes` when completing \
                 is the check",
            ));
        }
        cases.push(Case {
            name: name.unwrap_or_else(|| format!("case {number}")),
            line,
            inputs,
            expect,
            run,
        });
    }
    Ok(cases)
}

/// The judges the cases call for, to check they are configured before anything runs.
pub fn judges(cases: &[Case]) -> impl Iterator<Item = &JudgeSpec> {
    cases.iter().flat_map(|case| {
        case.expect.iter().filter_map(|(_, check)| match check {
            Check::LlmJudge(spec) => Some(spec),
            _ => None,
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use super::*;

    #[test]
    fn jsonl_cases_with_checks_and_run_checks() {
        let text = r#"{"name": "ada", "inputs": {"name": "Ada"}, "expect": {"greeting": "Hello, Ada!"}}

{"inputs": {"name": "Bob"}, "expect": {"greeting": {"contains": "Bob", "regex": "^Hello"}, "run": {"status": "completed", "max_duration_ms": 5000}}}
"#;
        let cases = parse_cases(Path::new("c.jsonl"), text).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].expect.len(), 1);
        assert_eq!(cases[1].name, "case 2");
        assert_eq!(cases[1].line, 3);
        assert_eq!(cases[1].expect.len(), 2);
        assert_eq!(cases[1].run.max_duration_ms, Some(5000));
    }

    #[test]
    fn a_broken_line_names_its_line_and_field() {
        let text = "{\"name\": \"a\", \"expect\": {\"out\": 1}}\n{\"name\": \"b\", \"expect\": {\"out\": {\"regex\": \"(\"}}}\n";
        let err = parse_cases(Path::new("c.jsonl"), text).unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (2, "expect.out.regex"));
        let err = parse_cases(Path::new("c.jsonl"), "{\"nmae\": 1}\n").unwrap_err();
        assert_eq!((err.line, err.field.as_str()), (1, "nmae"));
    }

    #[test]
    fn csv_columns_are_inputs_and_expected_outputs() {
        let text = "name,expect.greeting\nAda,\"Hello, Ada!\"\nBob,\"Hello, Bob!\"\n";
        let cases = parse_cases(Path::new("c.csv"), text).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[1].line, 3);
        assert_eq!(cases[0].inputs["name"], Value::from("Ada"));
        assert_eq!(
            cases[0].expect[0].1,
            Check::Equals(Value::text("Hello, Ada!"))
        );
    }
}
