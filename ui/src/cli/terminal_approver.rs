//! Asking the person at the terminal before a side effect (safe mode), the same way for
//! `agentloom run` and `agentloom agent`: approve, reject with a reason (an agent hands it
//! to its model), or edit the arguments first.

use std::io::{BufRead, Write};
use std::sync::Arc;

use agentloom_core::{ApprovalDecision, ApprovalRequest, Escaped, Value};
use agentloom_engine::Approver;

use super::progress::ProgressSink;

/// The reason given when the person rejects without saying why.
const NOT_ALLOWED: &str = "The person did not allow this.";

/// Asks on stdin/stderr; hides the progress spinner, if any, while asking.
pub struct TerminalApprover {
    progress: Option<Arc<ProgressSink>>,
}

impl TerminalApprover {
    pub fn new(progress: Option<Arc<ProgressSink>>) -> Self {
        Self { progress }
    }
}

#[agentloom_core::async_trait]
impl Approver for TerminalApprover {
    async fn decide_or_pause(
        &self,
        _run_id: &str,
        node: &str,
        request: &ApprovalRequest,
    ) -> Option<ApprovalDecision> {
        let node = node.to_owned();
        let request = request.clone();
        let progress = self.progress.clone();
        let asked = tokio::task::spawn_blocking(move || {
            let ask_here = || {
                ask(
                    &node,
                    &request,
                    &mut std::io::stdin().lock(),
                    &mut std::io::stderr(),
                )
            };
            match progress {
                Some(progress) => progress.suspend(ask_here),
                None => ask_here(),
            }
        })
        .await;
        let failed = |err: String| ApprovalDecision::Rejected {
            message: format!("could not ask at the terminal: {err}"),
        };
        Some(match asked {
            Ok(Ok(decision)) => decision,
            Ok(Err(err)) => failed(err.to_string()),
            Err(err) => failed(err.to_string()),
        })
    }
}

/// Shows what `node` wants to do and reads the decision from `input`, one line at a time:
/// `y` approves, `e` edits the arguments (JSON on one line), `n` asks for a reason, any
/// other text rejects with that text as the reason. End of input rejects.
pub(crate) fn ask(
    node: &str,
    request: &ApprovalRequest,
    input: &mut impl BufRead,
    out: &mut impl Write,
) -> std::io::Result<ApprovalDecision> {
    let mut arguments = request.arguments.clone();
    writeln!(
        out,
        "`{}` wants to: {}\n{}",
        Escaped(node),
        Escaped(&request.action),
        pretty(request.shown())
    )?;
    loop {
        write!(
            out,
            "approve? [y]es / [e]dit arguments / [n]o, or type why not: "
        )?;
        out.flush()?;
        let Some(answer) = read_answer(input)? else {
            return Ok(ApprovalDecision::Rejected {
                message: "no answer (end of input)".to_owned(),
            });
        };
        match answer.as_str() {
            "" => {}
            "y" | "Y" | "yes" => return Ok(ApprovalDecision::Approved { arguments }),
            "e" | "edit" => {
                write!(out, "new arguments as JSON on one line: ")?;
                out.flush()?;
                let text = read_answer(input)?.unwrap_or_default();
                match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(json) => {
                        arguments = Value::from_json(json);
                        writeln!(out, "arguments now:\n{}", pretty(&arguments))?;
                    }
                    Err(err) => writeln!(out, "not JSON ({err}); arguments unchanged")?,
                }
            }
            "n" | "N" | "no" => {
                write!(out, "why (sent back as the reason; Enter to skip): ")?;
                out.flush()?;
                let why = read_answer(input)?.unwrap_or_default();
                let message = if why.is_empty() {
                    NOT_ALLOWED.to_owned()
                } else {
                    why
                };
                return Ok(ApprovalDecision::Rejected { message });
            }
            why => {
                return Ok(ApprovalDecision::Rejected {
                    message: why.to_owned(),
                });
            }
        }
    }
}

/// One trimmed line, or None at the end of input.
fn read_answer(input: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if input.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim().to_owned()))
}

fn pretty(arguments: &Value) -> String {
    serde_json::to_string_pretty(&arguments.to_json()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ApprovalRequest {
        ApprovalRequest::new(
            "write file",
            Value::from_json(serde_json::json!({"path": "a.txt", "text": "hi"})),
        )
    }

    fn answer(typed: &str) -> (ApprovalDecision, String) {
        let mut shown = Vec::new();
        let decision = ask(
            "save",
            &request(),
            &mut std::io::Cursor::new(typed.as_bytes()),
            &mut shown,
        )
        .expect("in-memory input and output cannot fail");
        (decision, String::from_utf8_lossy(&shown).into_owned())
    }

    fn approved(decision: &ApprovalDecision) -> serde_json::Value {
        match decision {
            ApprovalDecision::Approved { arguments } => arguments.to_json(),
            other => panic!("expected approval, got {other:?}"),
        }
    }

    fn rejected(decision: &ApprovalDecision) -> &str {
        match decision {
            ApprovalDecision::Rejected { message } => message,
            other => panic!("expected rejection, got {other:?}"),
        }
    }

    #[test]
    fn shows_the_request_and_approves_as_is() {
        let (decision, shown) = answer("\ny\n");
        assert!(
            shown.starts_with("`save` wants to: write file\n"),
            "{shown}"
        );
        assert!(shown.contains("\"path\": \"a.txt\""), "{shown}");
        assert_eq!(
            approved(&decision),
            serde_json::json!({"path": "a.txt", "text": "hi"})
        );
    }

    #[test]
    fn edited_arguments_are_approved_and_bad_json_changes_nothing() {
        let (decision, shown) = answer("e\n{oops\ne\n{\"path\": \"b.txt\"}\nyes\n");
        assert!(shown.contains("not JSON"), "{shown}");
        assert!(shown.contains("arguments now:"), "{shown}");
        assert_eq!(approved(&decision), serde_json::json!({"path": "b.txt"}));
    }

    #[test]
    fn rejects_with_the_reason_given_either_way() {
        let (decision, _) = answer("n\nwrong folder\n");
        assert_eq!(rejected(&decision), "wrong folder");
        let (decision, _) = answer("n\n\n");
        assert_eq!(rejected(&decision), NOT_ALLOWED);
        let (decision, _) = answer("write it to notes/ instead\n");
        assert_eq!(rejected(&decision), "write it to notes/ instead");
        let (decision, _) = answer("");
        assert_eq!(rejected(&decision), "no answer (end of input)");
    }
}
