//! The `agent` block end to end against the real `fakellm` peer, over the OpenAI and the
//! Anthropic wire formats, scripted by `tests/fixtures/agent/fakellm.yaml` (the goal names
//! the script; each model call is the next conversation turn). Each test starts its own
//! server. The workspace is a fresh temporary folder.
//!
//! `fakellm` must be on PATH (`pip install fakellm==0.3.5`); set AGENTLOOM_SKIP_PEERS=1 to
//! skip these tests instead.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;

use agentloom_blocks::Registry;
use agentloom_blocks::testing::{TestCtx, run_block_with};
use agentloom_core::{
    ApprovalDecision, BlockError, EdgeDoc, GraphDoc, NodeDoc, Value, ValueMap, validate,
};
use agentloom_engine::{CollectSink, EventKind, Executor, RunOptions, RunStatus};
use agentloom_tests::FakeLlm;
use serde_json::json;

const FORMATS: [&str; 2] = ["openai", "anthropic"];

fn config(fake: &FakeLlm, provider: &str, extra: serde_json::Value) -> serde_json::Value {
    let base = match provider {
        "anthropic" => fake.base(),
        _ => format!("{}/v1", fake.base()),
    };
    let mut config = json!({"provider": provider, "base_url": base, "model": "test-model"});
    if let (Some(target), serde_json::Value::Object(more)) = (config.as_object_mut(), extra) {
        target.extend(more);
    }
    config
}

fn goal(text: &str) -> ValueMap {
    ValueMap::from([("goal".to_owned(), Value::from(text))])
}

async fn run_agent(
    ctx: &TestCtx,
    fake: &FakeLlm,
    provider: &str,
    extra: serde_json::Value,
    task: &str,
) -> Result<ValueMap, BlockError> {
    run_block_with(ctx, "ai.agent", config(fake, provider, extra), goal(task)).await
}

fn steps(transcript: &Value) -> Vec<serde_json::Value> {
    transcript.to_json().as_array().cloned().unwrap_or_default()
}

/// The transcript an agent that stopped carries in its error data.
fn stopped_transcript(err: &BlockError) -> Vec<serde_json::Value> {
    let data = err.data.as_ref().unwrap().to_json();
    data["transcript"].as_array().cloned().unwrap()
}

#[tokio::test]
async fn runs_code_writes_a_file_and_finishes() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let out = run_agent(
            &ctx,
            &fake,
            provider,
            json!({}),
            "TASK-MULTI: compute 6 times 7 and save it",
        )
        .await
        .unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(
            out["answer"],
            Value::from("The answer is 42, saved in out/answer.txt.")
        );
        assert_eq!(out["artifacts"].to_json(), json!(["out/answer.txt"]));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out/answer.txt")).unwrap(),
            "42"
        );
        let steps = steps(&out["transcript"]);
        assert_eq!(steps.len(), 3, "{provider}: {steps:#?}");
        assert_eq!(steps[0]["tool"], "run_code");
        // fakellm's OpenAI format drops the text next to a tool call; Anthropic's keeps it.
        if provider == "anthropic" {
            assert_eq!(steps[0]["thought"], "First compute the product.");
        }
        assert!(
            steps[0]["observation"]
                .as_str()
                .unwrap()
                .contains("stdout:\n42")
        );
        assert!(steps[0]["input_tokens"].as_u64().unwrap() > 0);
        assert_eq!(
            steps[1]["arguments"],
            json!({"path": "out/answer.txt", "content": "42"})
        );
        assert_eq!(steps[2]["tool"], "finish");
        // Outside safe mode nobody was asked; each tool's time is kept.
        assert!(steps.iter().all(|step| step.get("approval").is_none()));
        assert!(steps[0]["duration_ms"].as_u64().unwrap() > 0);
        // Each step was shown as it happened, one JSON line each, after a line saying its
        // tool started (a tool ran for run_code and write_file, none for finish).
        let lines: Vec<serde_json::Value> = ctx
            .partials()
            .iter()
            .filter(|(port, _)| port == "transcript")
            .map(|(_, line)| serde_json::from_str::<serde_json::Value>(line.trim()).unwrap())
            .collect();
        let started: Vec<_> = lines
            .iter()
            .filter(|step| step["running"] == true)
            .map(|step| (step["step"].clone(), step["tool"].clone()))
            .collect();
        assert_eq!(
            started,
            [
                (json!(1), json!("run_code")),
                (json!(2), json!("write_file"))
            ]
        );
        let live: Vec<_> = lines
            .into_iter()
            .filter(|step| step.get("running").is_none())
            .collect();
        assert_eq!(live, steps);
        let counts = fake.rule_counts().await;
        for rule in ["multi_run_code", "multi_write", "multi_finish"] {
            assert_eq!(counts[rule], 1, "{provider}: {counts}");
        }
    }
}

#[tokio::test]
async fn a_failing_tool_is_an_observation_the_model_recovers_from() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("present.txt"), "here").unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let out = run_agent(
            &ctx,
            &fake,
            provider,
            json!({}),
            "TASK-RECOVER: read missing.txt",
        )
        .await
        .unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(
            out["answer"],
            Value::from("missing.txt does not exist; present.txt does.")
        );
        let steps = steps(&out["transcript"]);
        assert!(
            steps[0]["observation"]
                .as_str()
                .unwrap()
                .starts_with("error: cannot read `missing.txt`"),
            "{steps:#?}"
        );
        assert_eq!(steps[1]["observation"], "present.txt");
    }
}

#[tokio::test]
async fn invalid_decisions_go_back_with_the_problem() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let out = run_agent(&ctx, &fake, provider, json!({}), "TASK-INVALID: answer")
            .await
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(out["answer"], Value::from("fixed"));
        let steps = steps(&out["transcript"]);
        assert_eq!(steps[0]["invalid"], true);
        assert!(
            steps[0]["observation"]
                .as_str()
                .unwrap()
                .contains("no tool was called")
        );
        assert_eq!(steps[1]["invalid"], true);
        assert!(
            steps[1]["observation"]
                .as_str()
                .unwrap()
                .contains("\"content\" is a required property")
        );
        assert!(
            !dir.path().join("x.txt").exists(),
            "an invalid call must not run"
        );

        let err = run_agent(&ctx, &fake, provider, json!({}), "TASK-NEVER-VALID: chat")
            .await
            .unwrap_err();
        assert!(
            err.message
                .starts_with("the model made 4 invalid decisions in a row"),
            "{err}"
        );
        assert_eq!(stopped_transcript(&err).len(), 4);
    }
}

#[tokio::test]
async fn the_same_call_again_and_again_is_a_loop() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let err = run_agent(&ctx, &fake, provider, json!({}), "TASK-LOOP: list")
            .await
            .unwrap_err();
        assert_eq!(
            err.message,
            "loop detected: the model called `list_files` with the same arguments 4 times in a row"
        );
        let steps = stopped_transcript(&err);
        assert_eq!(steps.len(), 4);
        assert!(
            steps[2]["observation"]
                .as_str()
                .unwrap()
                .contains("Warning: you called `list_files` with the same arguments 3 times")
        );
        assert_eq!(steps[3]["observation"], "(not run: loop detected)");
        assert_eq!(fake.rule_counts().await["looping"], 4);
    }
}

#[tokio::test]
async fn step_and_cost_limits_stop_the_agent_with_the_reason() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new().with_workspace(dir.path());
        let err = run_agent(
            &ctx,
            &fake,
            provider,
            json!({"max_steps": 2}),
            "TASK-BUSY: keep going",
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.message,
            "step limit reached: the agent took 2 steps without finishing (max_steps 2)"
        );
        assert_eq!(stopped_transcript(&err).len(), 2);

        // $1000 per million tokens: the first call alone costs more than a cent.
        let priced = json!({"max_cost_usd": 0.01, "price_in": 1000.0, "price_out": 1000.0});
        let err = run_agent(&ctx, &fake, provider, priced, "TASK-BUSY: spend")
            .await
            .unwrap_err();
        assert!(
            err.message
                .starts_with("cost limit reached: the agent spent $"),
            "{err}"
        );
        let steps = stopped_transcript(&err);
        assert_eq!(steps.len(), 1);
        assert!(steps[0]["cost_usd"].as_f64().unwrap() > 0.01);
        assert!(
            ctx.usage().cost_usd > 0.01,
            "the cost is reported to the run"
        );
    }
}

#[tokio::test]
async fn a_rejection_message_reaches_the_model() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let ctx = TestCtx::new()
            .with_workspace(dir.path())
            .with_safe_mode(vec![ApprovalDecision::Rejected {
                message: "Leave secrets.txt alone.".to_owned(),
            }]);
        let out = run_agent(&ctx, &fake, provider, json!({}), "TASK-REJECT: tidy up")
            .await
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(
            out["answer"],
            Value::from("Understood, I did not write it.")
        );
        assert!(!dir.path().join("secrets.txt").exists());
        let requests = ctx.approval_requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].action, "write_file");
        assert_eq!(
            requests[0].arguments.to_json(),
            json!({"path": "secrets.txt", "content": "oops"})
        );
        assert_eq!(out["artifacts"].to_json(), json!([]));
        // The step keeps the person's decision.
        let steps = steps(&out["transcript"]);
        assert_eq!(steps[0]["approval"], "rejected: Leave secrets.txt alone.");
    }
}

#[tokio::test]
async fn a_paused_agent_resumes_from_its_checkpoint_without_asking_the_model_again() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        // Nobody answers: the approval fails, as a run that pauses stops here.
        let paused = TestCtx::new()
            .with_workspace(dir.path())
            .with_safe_mode(Vec::new());
        let err = run_agent(
            &paused,
            &fake,
            provider,
            json!({}),
            "TASK-RESUME: save notes",
        )
        .await
        .unwrap_err();
        assert!(err.message.contains("was not approved"), "{err}");
        assert!(!dir.path().join("notes.md").exists());
        let checkpoint = paused.approval_requests()[0].checkpoint.clone().unwrap();

        // Resumed with edited arguments: the write happens once, with the edit.
        let resumed = TestCtx::new()
            .with_workspace(dir.path())
            .with_safe_mode(vec![ApprovalDecision::Approved {
                arguments: Value::from_json(json!({"path": "notes.md", "content": "edited"})),
            }])
            .with_resume_checkpoint(checkpoint);
        let out = run_agent(
            &resumed,
            &fake,
            provider,
            json!({}),
            "TASK-RESUME: save notes",
        )
        .await
        .unwrap_or_else(|e| panic!("{provider}: {e}"));
        assert_eq!(out["answer"], Value::from("Notes saved."));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
            "edited"
        );
        assert_eq!(out["artifacts"].to_json(), json!(["notes.md"]));
        let steps = steps(&out["transcript"]);
        assert_eq!(steps.len(), 2);
        if provider == "anthropic" {
            assert_eq!(steps[0]["thought"], "Saving the notes.");
        }
        assert_eq!(
            steps[0]["arguments"],
            json!({"path": "notes.md", "content": "edited"})
        );
        let counts = fake.rule_counts().await;
        assert_eq!(
            counts["resume_write"], 1,
            "the first step is not decided again: {counts}"
        );
        assert_eq!(counts["resume_finish"], 1, "{counts}");
    }
}

#[tokio::test]
async fn a_wired_block_is_a_tool_with_its_unwired_inputs_as_arguments() {
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start("agent/fakellm.yaml") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut doc = GraphDoc::new("wired tools");
        doc.nodes.push(
            NodeDoc::new("salutation", "data.constant")
                .with_config(json!({"type": "text", "value": "Hello"})),
        );
        let mut greet = NodeDoc::new("greet", "text.template")
            .with_config(json!({"template": "{{ greeting }}, {{ name }}!"}));
        greet.label = Some("Greeter".to_owned());
        doc.nodes.push(greet);
        doc.nodes.push(
            NodeDoc::new("goal", "data.constant")
                .with_config(json!({"type": "text", "value": "TASK-WIRED: greet Ada"})),
        );
        doc.nodes
            .push(NodeDoc::new("agent", "ai.agent").with_config(config(
                &fake,
                provider,
                json!({}),
            )));
        doc.nodes
            .push(NodeDoc::new("out", "graph.output").with_config(json!({"name": "answer"})));
        doc.edges = vec![
            EdgeDoc::new("salutation", "value", "greet", "greeting"),
            EdgeDoc::new("greet", "tool", "agent", "tools"),
            EdgeDoc::new("goal", "value", "agent", "goal"),
            EdgeDoc::new("agent", "answer", "out", "value"),
        ];
        let registry = Arc::new(Registry::builtin());
        let graph = validate(&doc, registry.as_ref()).unwrap_or_else(|p| panic!("{p:#?}"));
        let sink = Arc::new(CollectSink::default());
        let report = Executor::new(registry)
            .with_workspace(dir.path().to_path_buf())
            .run(
                Arc::new(graph),
                ValueMap::new(),
                RunOptions::default(),
                sink.clone(),
            )
            .await;
        assert_eq!(
            report.status,
            RunStatus::Completed,
            "{provider}: {:?}",
            report.error
        );
        assert_eq!(
            report.outputs["answer"],
            Value::from("It said: Hello, Ada!")
        );
        let events = sink.events();
        // The agent received the tool's description: only `name` is an argument.
        let agent_inputs = events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::NodeStarted { node, inputs, .. } if node == "agent" => {
                    Some(inputs.clone())
                }
                _ => None,
            })
            .unwrap();
        let tool = agent_inputs["tools"].to_json()[0].clone();
        assert_eq!(tool["name"], "greet");
        assert_eq!(
            tool["description"],
            "Greeter: Fills a text template; every variable in it becomes an input."
        );
        assert_eq!(tool["parameters"]["required"], json!(["name"]));
        // Template variables take any JSON value: an empty schema.
        assert_eq!(tool["parameters"]["properties"], json!({"name": {}}));
        // The call ran the node, with its wired input kept, visibly in the run.
        let greet_runs: Vec<&EventKind> = events
            .iter()
            .map(|e| &e.kind)
            .filter(|k| matches!(k, EventKind::NodeFinished { node, .. } if node == "greet"))
            .collect();
        assert!(
            greet_runs.iter().any(|k| matches!(k, EventKind::NodeFinished { outputs, .. } if outputs.get("text") == Some(&Value::from("Hello, Ada!")))),
            "{greet_runs:#?}"
        );
        // Handing over its description is no run: the node is not "reused", and it
        // shows the one run the call made.
        let mut state = agentloom_engine::RunState::starting(&doc);
        for event in &events {
            state.apply(&event.kind);
        }
        assert!(
            !state.reused.contains("greet"),
            "{provider}: {:?}",
            state.reused
        );
        assert_eq!(state.node("greet").unwrap().attempts, 1, "{provider}");
        assert!(
            !events.iter().any(|e| matches!(&e.kind, EventKind::NodeFinished { node, attempts: 0, .. } if node == "greet")),
            "{provider}: a tool-only node reports no finish before it is called"
        );
        let counts = fake.rule_counts().await;
        assert_eq!(
            counts["wired_call"], 1,
            "the tool was offered to the model: {counts}"
        );
    }
}

#[test]
fn the_agent_examples_are_valid_graphs() {
    let registry = Registry::builtin();
    let examples =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/examples/online");
    for file in [
        "research-agent.agentloom.json",
        "github-triage-agent.agentloom.json",
    ] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        let doc = GraphDoc::from_json_str(&text).unwrap();
        let graph = validate(&doc, &registry).unwrap_or_else(|p| panic!("{file}: {p:#?}"));
        assert!(
            graph.nodes.iter().any(|n| n.meta.kind == "ai.agent"),
            "{file}"
        );
    }
}

/// What the runs of a graph file that is not trusted get for every credential.
struct RefusingSecrets;

impl agentloom_core::SecretSource for RefusingSecrets {
    fn secret(&self, name: &str) -> Result<agentloom_core::Secret, agentloom_core::SecretError> {
        Err(agentloom_core::SecretError::Unusable {
            name: name.to_owned(),
            message: "graph file /shared/agent.agentloom.json is not trusted".to_owned(),
        })
    }
}

/// An agent on a local model that names no credential needs none: it runs in a graph
/// file that is not trusted (every credential refused). One that names a credential fails
/// with the refusal.
#[tokio::test]
async fn an_agent_naming_no_credential_runs_where_every_credential_is_refused() {
    let rules = "rules:\n  - name: done\n    when: {messages_contain: \"TASK-NO-KEY\"}\n    respond:\n      tool_calls: [{name: finish, arguments: {answer: \"done without a key\"}}]\n";
    for provider in FORMATS {
        let Some(fake) = FakeLlm::start_with_rules(rules) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let mut doc = GraphDoc::new("agent, untrusted file");
        doc.nodes.push(
            NodeDoc::new("goal", "data.constant")
                .with_config(json!({"type": "text", "value": "TASK-NO-KEY: finish"})),
        );
        doc.nodes
            .push(NodeDoc::new("agent", "ai.agent").with_config(config(
                &fake,
                provider,
                json!({"builtin_tools": "finish"}),
            )));
        doc.nodes
            .push(NodeDoc::new("answer", "graph.output").with_config(json!({"name": "answer"})));
        doc.edges
            .push(EdgeDoc::new("goal", "value", "agent", "goal"));
        doc.edges
            .push(EdgeDoc::new("agent", "answer", "answer", "value"));
        let registry = Arc::new(Registry::builtin());
        let run = |doc: GraphDoc| {
            let registry = registry.clone();
            let workspace = dir.path().to_owned();
            async move {
                let graph = validate(&doc, registry.as_ref()).unwrap();
                Executor::new(registry)
                    .with_secrets(Arc::new(RefusingSecrets))
                    .with_workspace(workspace)
                    .run(
                        Arc::new(graph),
                        ValueMap::new(),
                        RunOptions::default(),
                        Arc::new(CollectSink::default()),
                    )
                    .await
            }
        };
        let report = run(doc.clone()).await;
        assert_eq!(
            report.status,
            RunStatus::Completed,
            "{provider}: {report:#?}"
        );
        assert_eq!(
            report.outputs.get("answer"),
            Some(&Value::from("done without a key")),
            "{provider}"
        );
        let counts = fake.rule_counts().await;
        assert_eq!(counts["done"], 1, "{provider}: {counts}");

        doc.nodes[1]
            .config
            .insert("credential".to_owned(), json!("openai"));
        let report = run(doc).await;
        assert_eq!(report.status, RunStatus::Failed, "{provider}: {report:#?}");
        let error = report
            .nodes
            .iter()
            .find(|n| n.id == "agent")
            .and_then(|n| n.error.clone())
            .unwrap();
        assert!(
            error.ends_with(
                "needs an API key: credential `openai`: graph file /shared/agent.agentloom.json is not trusted"
            ),
            "{provider}: {error}"
        );
        let counts = fake.rule_counts().await;
        assert_eq!(counts["done"], 1, "{provider}: no second request: {counts}");
    }
}
