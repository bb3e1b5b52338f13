//! Reading a cases file: JSON Lines (one case a line) or CSV (graph inputs as columns,
//! `expect.OUTPUT` columns for outputs that must equal the cell, an optional `case` column
//! naming the case).

use std::path::Path;

use agentloom_core::{Value, ValueMap};

use super::checks::{Check, JudgeSpec, RunChecks};

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

/// Why a cases file cannot be used: the line and the field, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {message}")]
pub struct CasesError {
    pub file: String,
    pub line: usize,
    /// Like `expect.greeting.regex`; `-` for the line as a whole.
    pub field: String,
    pub message: String,
}

/// Reads the cases in `text`, from the file at `path` (CSV when it ends in `.csv`).
pub fn parse_cases(path: &Path, text: &str) -> Result<Vec<Case>, CasesError> {
    let file = path.display().to_string();
    let error = |line: usize, field: &str, message: String| CasesError {
        file: file.clone(),
        line,
        field: field.to_owned(),
        message,
    };
    let is_csv = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("csv"));
    let cases = if is_csv {
        parse_csv(text, &error)?
    } else {
        parse_jsonl(text, &error)?
    };
    if cases.is_empty() {
        return Err(error(1, "-", "the file holds no case".to_owned()));
    }
    let mut seen = std::collections::HashMap::new();
    for case in &cases {
        if let Some(first) = seen.insert(case.name.clone(), case.line) {
            return Err(error(
                case.line,
                "name",
                format!(
                    "`{}` is the name of the case on line {first} too; names must differ",
                    case.name
                ),
            ));
        }
    }
    Ok(cases)
}

fn parse_jsonl(
    text: &str,
    error: &dyn Fn(usize, &str, String) -> CasesError,
) -> Result<Vec<Case>, CasesError> {
    let mut cases = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let json: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| error(line, "-", format!("not a JSON object: {e}")))?;
        let serde_json::Value::Object(object) = json else {
            return Err(error(
                line,
                "-",
                "a case is a JSON object: {\"name\", \"inputs\", \"expect\"}".to_owned(),
            ));
        };
        for key in object.keys() {
            if !matches!(key.as_str(), "name" | "inputs" | "expect") {
                return Err(error(
                    line,
                    key,
                    "unknown field; a case has `name`, `inputs` and `expect`".to_owned(),
                ));
            }
        }
        let name = match object.get("name") {
            None => format!("case {}", cases.len() + 1),
            Some(serde_json::Value::String(name)) if !name.trim().is_empty() => name.clone(),
            Some(_) => return Err(error(line, "name", "must be a non-empty text".to_owned())),
        };
        let inputs = match object.get("inputs") {
            None => ValueMap::new(),
            Some(serde_json::Value::Object(map)) => map
                .iter()
                .map(|(k, v)| (k.clone(), Value::from_json(v.clone())))
                .collect(),
            Some(_) => {
                return Err(error(
                    line,
                    "inputs",
                    "must be an object of input names and values".to_owned(),
                ));
            }
        };
        let mut expect = Vec::new();
        let mut run = RunChecks::default();
        match object.get("expect") {
            None => {}
            Some(serde_json::Value::Object(map)) => {
                for (output, check) in map {
                    if output == "run" {
                        run = RunChecks::parse(check)
                            .map_err(|(field, message)| error(line, &field, message))?;
                        continue;
                    }
                    for check in Check::parse(output, check)
                        .map_err(|(field, message)| error(line, &field, message))?
                    {
                        expect.push((output.clone(), check));
                    }
                }
            }
            Some(_) => {
                return Err(error(
                    line,
                    "expect",
                    "must be an object: output name → check".to_owned(),
                ));
            }
        }
        cases.push(Case {
            name,
            line,
            inputs,
            expect,
            run,
        });
    }
    Ok(cases)
}

fn parse_csv(
    text: &str,
    error: &dyn Fn(usize, &str, String) -> CasesError,
) -> Result<Vec<Case>, CasesError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| error(1, "-", format!("the header row does not read: {e}")))?
        .clone();
    let mut cases = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let line = record
            .as_ref()
            .ok()
            .and_then(|r| r.position())
            .map_or(index + 2, |p| {
                usize::try_from(p.line()).unwrap_or(index + 2)
            });
        let record = record.map_err(|e| error(line, "-", format!("the row does not read: {e}")))?;
        let mut name = None;
        let mut inputs = ValueMap::new();
        let mut expect = Vec::new();
        for (column, cell) in headers.iter().zip(record.iter()) {
            if column == "case" {
                name = Some(cell.to_owned()).filter(|n| !n.trim().is_empty());
            } else if let Some(output) = column.strip_prefix("expect.") {
                if output.is_empty() {
                    return Err(error(line, column, "names no output".to_owned()));
                }
                expect.push((output.to_owned(), Check::Equals(Value::text(cell))));
            } else {
                inputs.insert(column.to_owned(), Value::text(cell));
            }
        }
        cases.push(Case {
            name: name.unwrap_or_else(|| format!("case {}", cases.len() + 1)),
            line,
            inputs,
            expect,
            run: RunChecks::default(),
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
        let text =
            "{\"name\": \"a\"}\n{\"name\": \"b\", \"expect\": {\"out\": {\"regex\": \"(\"}}}\n";
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
