//! Cases files for `agentloom eval`: a byte order mark is skipped, every error names the
//! file, the line (as an editor counts them), the case and the field, an object under an
//! output names checks only, and a case must check something.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::Path;

use agentloom_core::Value;
use agentloom_engine::eval::{Case, CasesError, Check, parse_cases};
use serde_json::json;

fn jsonl(bytes: &[u8]) -> Result<Vec<Case>, CasesError> {
    parse_cases(Path::new("cases.jsonl"), bytes)
}

fn csv(bytes: &[u8]) -> Result<Vec<Case>, CasesError> {
    parse_cases(Path::new("cases.csv"), bytes)
}

fn refused(result: Result<Vec<Case>, CasesError>) -> (usize, String, String) {
    let err = result.unwrap_err();
    let shown = err.to_string();
    assert!(shown.starts_with("cases."), "names the file: {shown}");
    (err.line, err.field, shown)
}

#[test]
fn a_byte_order_mark_is_skipped_and_later_lines_keep_their_numbers() {
    let cases = jsonl(b"\xEF\xBB\xBF{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\n").unwrap();
    assert_eq!((cases[0].name.as_str(), cases[0].line), ("a", 1));

    let (line, field, shown) = refused(jsonl(
        b"\xEF\xBB\xBF{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\n\n{\"name\": \"b\"\n",
    ));
    assert_eq!((line, field.as_str()), (3, "-"), "{shown}");
    assert!(
        shown.starts_with("cases.jsonl:3: -: not a JSON object"),
        "{shown}"
    );
    assert!(
        !shown.contains("line 1"),
        "no position of the line alone: {shown}"
    );

    let cases =
        csv(b"\xEF\xBB\xBFcase,name,expect.greeting\r\nada,Ada,\"Hello, Ada!\"\r\n").unwrap();
    assert_eq!(
        cases[0].name, "ada",
        "the first column is `case`, not a BOM and `case`"
    );
    assert_eq!(cases[0].inputs["name"], Value::from("Ada"));
    assert_eq!(cases[0].line, 2);
}

#[test]
fn bytes_that_are_not_utf8_are_refused_naming_their_line() {
    let (line, field, shown) = refused(jsonl(
        b"{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\n\n{\"name\": \"caf\xE9\", \"expect\": {\"out\": \"x\"}}\n",
    ));
    assert_eq!((line, field.as_str()), (3, "-"), "{shown}");
    assert!(
        shown.contains("not UTF-8") && shown.contains("column 14"),
        "{shown}"
    );

    let (line, _, shown) = refused(csv(b"name,expect.out\nAda,x\nBob,\xFF\n"));
    assert_eq!(line, 3, "{shown}");
}

#[test]
fn errors_name_the_line_counting_blank_ones_the_case_and_the_field() {
    let (line, field, shown) = refused(jsonl(
        b"{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\n\n\n{\"name\": \"b\", \"expect\": {\"out\": {\"regex\": \"(\"}}}\n",
    ));
    assert_eq!((line, field.as_str()), (4, "expect.out.regex"), "{shown}");
    assert!(
        shown.contains("invalid regex") && shown.ends_with("(in case \"b\")"),
        "{shown}"
    );

    // A case without a name is named by its number, as the report names it.
    let (_, field, shown) = refused(jsonl(
        b"{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\n{\"inputs\": 3, \"expect\": {\"out\": \"x\"}}\n",
    ));
    assert_eq!(field, "inputs");
    assert!(shown.ends_with("(in case 2)"), "{shown}");

    // Windows line ends count once.
    let (line, field, shown) = refused(jsonl(
        b"{\"name\": \"a\", \"expect\": {\"out\": \"x\"}}\r\n\r\n{\"name\": \"b\", \"nmae\": 1, \"expect\": {\"out\": \"x\"}}\r\n",
    ));
    assert_eq!((line, field.as_str()), (3, "nmae"), "{shown}");

    // CSV: a row of the wrong length after a blank line is named by its own line.
    let (line, _, shown) = refused(csv(b"case,expect.out\na,x\n\nb,x,extra\n"));
    assert_eq!(line, 4, "{shown}");
    let cases = csv(b"case,expect.out\na,x\n\nb,y\n").unwrap();
    assert_eq!(cases[1].line, 4);
}

#[test]
fn an_object_under_an_output_names_checks_only() {
    let case = |expect: serde_json::Value| {
        let line = json!({"name": "greets", "expect": {"greeting": expect}}).to_string();
        jsonl(line.as_bytes())
    };
    let (_, field, shown) = refused(case(json!({"contians": "x"})));
    assert_eq!(field, "expect.greeting.contians");
    assert!(shown.contains("did you mean `contains`?"), "{shown}");
    assert!(
        shown.contains("equals, contains, regex, json_schema, number, llm_judge"),
        "{shown}"
    );
    assert!(shown.ends_with("(in case \"greets\")"), "{shown}");

    let (_, field, shown) = refused(case(json!({"equalz": "x"})));
    assert_eq!(field, "expect.greeting.equalz");
    assert!(shown.contains("did you mean `equals`?"), "{shown}");
    let (_, field, _) = refused(case(json!({"equalz": "x", "contains": "y"})));
    assert_eq!(field, "expect.greeting.equalz");

    let (_, field, shown) = refused(case(json!({"first": "Ada"})));
    assert_eq!(field, "expect.greeting.first");
    assert!(!shown.contains("did you mean"), "nothing close: {shown}");
    assert!(
        shown.contains("{\"equals\": {...}}"),
        "says how to compare an object: {shown}"
    );

    let (_, field, _) = refused(case(json!({})));
    assert_eq!(field, "expect.greeting");

    // A literal object, and plain values, are compared for equality.
    let cases = case(json!({"equals": {"first": "Ada"}})).unwrap();
    assert_eq!(
        cases[0].expect[0].1,
        Check::Equals(Value::from_json(json!({"first": "Ada"})))
    );
    assert!(matches!(
        case(json!("Hello")).unwrap()[0].expect[0].1,
        Check::Equals(_)
    ));
    assert!(matches!(
        case(json!(["a", 1])).unwrap()[0].expect[0].1,
        Check::Equals(_)
    ));

    // The run checks too.
    let line = json!({"name": "r", "expect": {"run": {"stauts": "completed"}}}).to_string();
    let (_, field, shown) = refused(jsonl(line.as_bytes()));
    assert_eq!(field, "expect.run.stauts");
    assert!(shown.contains("did you mean `status`?"), "{shown}");
}

#[test]
fn a_case_must_check_something_or_say_completing_is_the_check() {
    for line in [
        json!({"name": "forgot", "inputs": {"a": 1}}),
        json!({"name": "forgot", "expect": {}}),
        json!({"name": "forgot", "expect": {"run": {}}}),
    ] {
        let (_, field, shown) = refused(jsonl(line.to_string().as_bytes()));
        assert!(field.starts_with("expect"), "{shown}");
        assert!(
            shown.contains("checks nothing") || shown.contains("names no check"),
            "{shown}"
        );
        assert!(
            shown.contains("\"completes\""),
            "says how to check completing: {shown}"
        );
        assert!(shown.ends_with("(in case \"forgot\")"), "{shown}");
    }
    let line = json!({"name": "runs", "expect": {"run": "completes"}}).to_string();
    let cases = jsonl(line.as_bytes()).unwrap();
    assert_eq!(cases[0].run.status.as_deref(), Some("completed"));
    assert!(cases[0].expect.is_empty());

    let (line, field, shown) = refused(csv(b"case,name\nada,Ada\n"));
    assert_eq!((line, field.as_str()), (2, "expect"), "{shown}");
    assert!(
        shown.contains("expect.run") && shown.ends_with("(in case \"ada\")"),
        "{shown}"
    );
    let cases = csv(b"case,name,expect.run\nada,Ada,completes\n").unwrap();
    assert_eq!(cases[0].run.status.as_deref(), Some("completed"));
    assert!(cases[0].expect.is_empty() && !cases[0].inputs.contains_key("expect.run"));
}

#[test]
fn the_example_cases_file_still_reads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/hello.cases.jsonl");
    let cases = parse_cases(&path, std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(cases.len(), 3);
    assert_eq!(cases[2].run.max_duration_ms, Some(10000));
}
