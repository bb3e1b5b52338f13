//! An evaluation as JUnit XML (`agentloom eval --junit FILE`), for CI test reports: one
//! `<testsuite>` named for the graph, one `<testcase>` per case run (`NAME #N` for run N
//! when the cases repeat), a `<failure>` naming every failed check, an `<error>` for a run
//! that did not complete, and `<skipped>` for a run a stopped evaluation never started.
//! Made from the summary `agentloom eval --json` prints, which stays the machine format.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// How long a `message` attribute gets (the element's text has everything).
const MESSAGE_CHARS: usize = 500;

/// The JUnit XML of evaluation `summary`.
pub fn to_junit(summary: &Value) -> String {
    let graph = summary["graph_name"].as_str().unwrap_or("evaluation");
    let repeat = summary["repeat"].as_u64().unwrap_or(1).max(1);
    let stopped = summary["stopped"] == true;
    let (mut tests, mut failures, mut errors, mut skipped) = (0u64, 0u64, 0u64, 0u64);
    let mut body = String::new();
    for case in summary["cases"].as_array().into_iter().flatten() {
        let name = case["name"].as_str().unwrap_or_default();
        let runs = case["runs"].as_array().cloned().unwrap_or_default();
        for index in 0..repeat {
            let run = runs.iter().enumerate().find(|(at, run)| {
                run["repeat"]
                    .as_u64()
                    .map_or(u64::try_from(*at).ok() == Some(index), |r| r == index)
            });
            let shown = if repeat > 1 {
                format!("{name} #{}", index + 1)
            } else {
                name.to_owned()
            };
            let Some((_, run)) = run else {
                // Without a stop every run is there: a run missing is only one not started.
                if stopped {
                    tests += 1;
                    skipped += 1;
                    testcase(&mut body, &shown, graph, 0);
                    body.push_str(
                        ">\n      <skipped message=\"not started: the evaluation was stopped\"/>\n    </testcase>\n",
                    );
                }
                continue;
            };
            tests += 1;
            testcase(
                &mut body,
                &shown,
                graph,
                run["duration_ms"].as_u64().unwrap_or(0),
            );
            if run["passed"] == true {
                body.push_str("/>\n");
                continue;
            }
            if run["cut_short"] == true {
                skipped += 1;
                let _ = write!(
                    body,
                    ">\n      <skipped message=\"cut short: the evaluation was stopped (run {})\"/>\n    </testcase>\n",
                    escape(run["run_id"].as_str().unwrap_or_default(), true)
                );
                continue;
            }
            let failed: Vec<String> = run["checks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["passed"] == false)
                .map(crate::eval::check_line)
                .collect();
            let status = run["status"].as_str().unwrap_or_default();
            let (element, kind) = if status == "completed" {
                failures += 1;
                ("failure", "check failed".to_owned())
            } else {
                errors += 1;
                ("error", format!("run {status}"))
            };
            let message = failed
                .first()
                .cloned()
                .unwrap_or_else(|| format!("the run {status}"));
            let mut text = failed.join("\n");
            let _ = write!(
                text,
                "\nrun {} (agentloom show {0})",
                run["run_id"].as_str().unwrap_or_default()
            );
            let _ = write!(
                body,
                ">\n      <{element} message=\"{}\" type=\"{}\">{}</{element}>\n    </testcase>\n",
                escape(&agentloom_core::clip_chars(&message, MESSAGE_CHARS), true),
                escape(&kind, true),
                escape(&text, false)
            );
        }
    }
    let seconds = seconds(summary["duration_ms"].as_u64().unwrap_or(0));
    let counts =
        format!("tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{seconds}\"");
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // The schema (Jenkins' junit-10.xsd) has `skipped` on a suite, not on the suites.
    let _ = writeln!(
        xml,
        "<testsuites name=\"agentloom eval\" {counts}>\n  <testsuite name=\"{}\" {counts} skipped=\"{skipped}\">",
        escape(graph, true)
    );
    xml.push_str("    <properties>\n");
    for (name, value) in [
        ("eval_id", summary["eval_id"].clone()),
        ("graph", summary["graph"].clone()),
        ("pass_rate", summary["pass_rate"].clone()),
        ("runs", summary["runs"].clone()),
        ("stopped", Value::Bool(stopped)),
    ] {
        let value = match value {
            Value::String(text) => text,
            Value::Null => continue,
            other => other.to_string(),
        };
        let _ = writeln!(
            xml,
            "      <property name=\"{name}\" value=\"{}\"/>",
            escape(&value, true)
        );
    }
    xml.push_str("    </properties>\n");
    xml.push_str(&body);
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// Writes the JUnit XML of `summary` to `path` whole or not at all: into a file beside it,
/// then renamed over it.
pub fn write_junit(summary: &Value, path: &Path) -> std::io::Result<()> {
    let xml = to_junit(summary);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(xml.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

fn testcase(body: &mut String, name: &str, classname: &str, ms: u64) {
    let _ = write!(
        body,
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
        escape(name, true),
        escape(classname, true),
        seconds(ms)
    );
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// `text` as XML character data (or an attribute value, where a line break or tab is kept
/// as a character reference): markup escaped, characters XML 1.0 does not allow left out.
fn escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' if !attribute => out.push('\n'),
            '\t' | '\n' | '\r' => {
                let _ = write!(out, "&#{};", u32::from(c));
            }
            '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}' => {
                out.push(c);
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped_and_characters_xml_refuses_are_left_out() {
        assert_eq!(
            escape("a<b>&\"c'\u{1}\u{FFFE}\td\ne", true),
            "a&lt;b&gt;&amp;&quot;c&apos;&#9;d&#10;e"
        );
        assert_eq!(escape("x\ny\r", false), "x\ny&#13;");
    }
}
