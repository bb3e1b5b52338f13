//! `agentloom worker` and `agentloom submit` against a real `nats-server` on 127.0.0.1 that
//! asks who connects: user and password, token, NKey, client certificate. A run goes through
//! each; a wrong password or token fails with a clear message that never shows it.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The password of `alice`: every character that must be percent-encoded in a URL.
const PASSWORD: &str = "p@ss/w:rd#1";
const PASSWORD_IN_URL: &str = "p%40ss%2Fw%3Ard%231";
const TOKEN: &str = "t0ken-s3cret-4222";
/// A user NKey made for these tests only (nkeys 0.4 `KeyPair::new_user`).
const NKEY_SEED: &str = "SUACUE3I7UOCZH5BKMNCBGYYDUJQ7EPVDHL2SMLMMITTU66WRLOML43FCQ";
const NKEY_PUBLIC: &str = "UCWUOB3YUSTTLZGUYEUSGXB3GZM5QJRWHQIZNDRTKNPNNAVVVU6PPDUL";

const NATS_VARIABLES: [&str; 8] = [
    "NATS_USER",
    "NATS_PASSWORD",
    "NATS_TOKEN",
    "NATS_NKEY",
    "NATS_CREDS",
    "NATS_CERT",
    "NATS_KEY",
    "NATS_CA",
];

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    cmd.env_remove("AGENTLOOM_LOG").env_remove("AGENTLOOM_NATS");
    for name in NATS_VARIABLES {
        cmd.env_remove(name);
    }
    cmd
}

fn text(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A `nats-server -c FILE` with JetStream on a free port of 127.0.0.1 and `settings` (its
/// authorization or TLS) in its configuration file; stopped when dropped.
struct NatsServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl NatsServer {
    fn start(settings: impl FnOnce(&Path) -> String) -> NatsServer {
        let server = agentloom_tests::find_on_path("nats-server")
            .unwrap_or_else(|| panic!("nats-server is not installed: apt-get install nats-server"));
        let dir = tempfile::tempdir().unwrap();
        let port = agentloom_tests::free_port();
        let config = dir.path().join("nats.conf");
        let store = dir.path().join("store");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {store:?} }}\n{}\n",
                settings(dir.path())
            ),
        )
        .unwrap();
        let log = dir.path().join("nats.log");
        let mut child = Command::new(server)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        agentloom_tests::wait_until_listening(&mut child, port, &log, "nats-server");
        NatsServer { child, port, dir }
    }

    /// `nats://{userinfo}127.0.0.1:PORT`.
    fn url(&self, userinfo: &str) -> String {
        format!("nats://{userinfo}127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `agentloom worker` with a home directory and run log of its own.
struct Worker {
    child: Child,
    dir: tempfile::TempDir,
}

impl Worker {
    fn start(url: &str, env: &[(&str, &str)]) -> Worker {
        Self::start_with(url, env, &[])
    }

    /// [`Worker::start`] with `extra` arguments.
    fn start_with(url: &str, env: &[(&str, &str)], extra: &[&str]) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let child = bin()
            .arg("worker")
            .args(["--nats", url, "--name", "w1"])
            .arg("--db")
            .arg(dir.path().join("runs.sqlite3"))
            .arg("--workspace")
            .arg(&home)
            .args(extra)
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("worker.log")).unwrap())
            .spawn()
            .unwrap();
        let mut worker = Worker { child, dir };
        worker.wait_until_ready();
        worker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }

    fn wait_until_ready(&mut self) {
        let started = Instant::now();
        while !self.log().contains("takes runs from") {
            let exited = self.child.try_wait().unwrap();
            assert!(
                exited.is_none() && started.elapsed() < Duration::from_secs(30),
                "the worker did not start ({exited:?}):\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A graph with no side effect: its input `text` goes to its output `echo`.
fn echo_graph(dir: &Path) -> PathBuf {
    let path = dir.join("echo.json");
    let doc = json!({
        "format": "agentloom.graph", "version": 1, "name": "echo",
        "nodes": [
            {"id": "text", "block": "graph.input", "config": {"name": "text", "default": "hi"}},
            {"id": "out", "block": "graph.output", "config": {"name": "echo"}}
        ],
        "edges": [{"from": ["text", "value"], "to": ["out", "value"]}]
    });
    std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    path
}

/// `agentloom submit GRAPH --nats URL --wait --json --trust` with `env`, in a home of its own.
fn submit(url: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let graph = echo_graph(dir.path());
    bin()
        .arg("submit")
        .arg(&graph)
        .args([
            "--nats",
            url,
            "--wait",
            "--json",
            "--trust",
            "--input",
            "text=through",
        ])
        .arg("--db")
        .arg(dir.path().join("runs.sqlite3"))
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A run submitted to `url` with `env` completes on a worker.
fn run_completes(url: &str, env: &[(&str, &str)]) {
    let output = submit(url, env);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["outputs"]["echo"], "through", "{report}");
}

/// A submit that must be refused: it says why, and shows none of `secrets`.
fn refused(url: &str, env: &[(&str, &str)], secrets: &[&str]) -> String {
    let output = submit(url, env);
    let shown = text(&output);
    assert!(!output.status.success(), "{shown}");
    assert!(
        shown.to_lowercase().contains("authorization"),
        "no clear reason:\n{shown}"
    );
    for secret in secrets {
        assert!(!shown.contains(secret), "`{secret}` shown:\n{shown}");
    }
    shown
}

fn users_server() -> NatsServer {
    NatsServer::start(|_| {
        format!("authorization {{ users: [ {{ user: alice, password: {PASSWORD:?} }} ] }}")
    })
}

fn token_server() -> NatsServer {
    NatsServer::start(|_| format!("authorization {{ token: {TOKEN:?} }}"))
}

#[test]
fn user_and_password_in_the_url_or_the_environment() {
    let nats = users_server();
    let url = nats.url(&format!("alice:{PASSWORD_IN_URL}@"));
    let _worker = Worker::start(&url, &[]);
    run_completes(&url, &[]);
    // A cluster list whose servers all carry them.
    run_completes(&format!("{url},{url}"), &[]);
    run_completes(
        &nats.url(""),
        &[("NATS_USER", "alice"), ("NATS_PASSWORD", PASSWORD)],
    );
}

#[test]
fn a_wrong_password_is_refused_without_showing_it() {
    let nats = users_server();
    let shown = refused(&nats.url("alice:wr0ng-pa55word@"), &[], &["wr0ng-pa55word"]);
    assert!(
        shown.contains(&nats.url("alice:***@")),
        "the server is named:\n{shown}"
    );
    refused(
        &nats.url(""),
        &[("NATS_USER", "alice"), ("NATS_PASSWORD", "wr0ng-pa55word")],
        &["wr0ng-pa55word"],
    );
    // Percent-encoded, neither form is shown.
    refused(
        &nats.url("alice:wr%40ng-secr%2Ft@"),
        &[],
        &["wr%40ng-secr%2Ft", "wr@ng-secr/t"],
    );
}

#[test]
fn a_token_in_the_url_or_the_environment() {
    let nats = token_server();
    let url = nats.url(&format!("{TOKEN}@"));
    let _worker = Worker::start(&url, &[]);
    run_completes(&url, &[]);
    run_completes(&nats.url(""), &[("NATS_TOKEN", TOKEN)]);
}

#[test]
fn a_wrong_token_is_refused_without_showing_it() {
    let nats = token_server();
    let shown = refused(&nats.url("n0t-the-t0ken@"), &[], &["n0t-the-t0ken"]);
    assert!(shown.contains(&nats.url("***@")), "{shown}");
    refused(
        &nats.url(""),
        &[("NATS_TOKEN", "n0t-the-t0ken")],
        &["n0t-the-t0ken"],
    );
}

#[test]
fn an_nkey_seed_file() {
    let nats =
        NatsServer::start(|_| format!("authorization {{ users: [ {{ nkey: {NKEY_PUBLIC} }} ] }}"));
    let seed = nats.dir.path().join("user.nk");
    std::fs::write(&seed, format!("{NKEY_SEED}\n")).unwrap();
    let seed = seed.to_str().unwrap();
    let _worker = Worker::start(&nats.url(""), &[("NATS_NKEY", seed)]);
    run_completes(&nats.url(""), &[("NATS_NKEY", seed)]);
    refused(&nats.url(""), &[], &[NKEY_SEED]);
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        text(&output)
    );
}

/// A CA, a certificate for 127.0.0.1 and a client certificate, all in `dir`.
fn certificates(dir: &Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    openssl(
        dir,
        &[
            &["req", "-x509", "-nodes", "-days", "2"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=agentloom test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat(),
    );
    for (name, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        let san = if name == "server" {
            "subjectAltName=IP:127.0.0.1\n"
        } else {
            ""
        };
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!(
                "{san}basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n\
                 extendedKeyUsage={usage}\n"
            ),
        )
        .unwrap();
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        openssl(
            dir,
            &[
                &["req", "-nodes"][..],
                &ec,
                &[
                    "-keyout",
                    &key,
                    "-out",
                    &csr,
                    "-subj",
                    &format!("/CN={name}"),
                ],
            ]
            .concat(),
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                &ext,
            ],
        );
    }
}

#[test]
fn tls_with_a_client_certificate() {
    let nats = NatsServer::start(|dir| {
        certificates(dir);
        let file = |name: &str| format!("{:?}", dir.join(name));
        format!(
            "tls {{ cert_file: {}, key_file: {}, ca_file: {}, verify: true, timeout: 5 }}",
            file("server.pem"),
            file("server.key"),
            file("ca.pem")
        )
    });
    let file = |name: &str| nats.dir.path().join(name).to_str().unwrap().to_owned();
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));
    let env = [
        ("NATS_CA", ca.as_str()),
        ("NATS_CERT", cert.as_str()),
        ("NATS_KEY", key.as_str()),
    ];
    let _worker = Worker::start(&nats.url(""), &env);
    run_completes(&nats.url(""), &env);
    // Without the client certificate the server refuses.
    let output = submit(&nats.url(""), &[("NATS_CA", ca.as_str())]);
    assert!(!output.status.success(), "{}", text(&output));
}

/// The README's production layout (docs/nats-accounts.conf, included as it is): a worker, a
/// submitter and an approver, each a user with only its subjects. A run submitted by the
/// submitter waits for approval; the submitter cannot approve it (the server refuses its
/// decision); the approver's signed decision resumes it and the POST goes once.
#[test]
fn the_production_layout_lets_each_role_do_its_part_only() {
    let layout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/nats-accounts.conf");
    let nats = NatsServer::start(|dir| {
        // The passwords as nats-server would read them from its environment.
        let passwords = "ADMIN_PASSWORD: admin-pw\nWORKER_PASSWORD: worker-pw\nSUBMITTER_PASSWORD: submitter-pw\nAPPROVER_PASSWORD: approver-pw\n";
        let accounts = std::fs::read_to_string(&layout).unwrap();
        std::fs::write(dir.join("accounts.conf"), format!("{passwords}{accounts}")).unwrap();
        "include \"accounts.conf\"".to_owned()
    });
    let hook = agentloom_tests::PostCounter::start();
    // The admin makes the streams and the queue's consumer once.
    drop(Worker::start(&nats.url("admin:admin-pw@"), &[]));
    let _worker = Worker::start_with(
        &nats.url("worker:worker-pw@"),
        &[],
        &["--trust", "--approver-key", NKEY_PUBLIC],
    );
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("post.json");
    let doc = json!({
        "format": "agentloom.graph", "version": 1, "name": "post",
        "settings": {"safe_mode": true},
        "nodes": [{"id": "post", "block": "http.request", "config": {
            "method": "POST", "url": hook.url(), "allow_private_network": true}}],
        "edges": []
    });
    std::fs::write(&graph, doc.to_string()).unwrap();
    let db = dir.path().join("runs.sqlite3");
    let submitter = nats.url("submitter:submitter-pw@");
    let output = bin()
        .arg("submit")
        .arg(&graph)
        .args(["--nats", &submitter, "--wait", "--json", "--trust"])
        .arg("--db")
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "waiting", "{report}");
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    let seed = dir.path().join("approver.seed");
    std::fs::write(&seed, NKEY_SEED).unwrap();
    let approve = |url: &str| {
        bin()
            .args(["approve", &run_id, "--nats", url, "--json", "--sign-with"])
            .arg(&seed)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap()
    };
    // Even with the approver's seed, the submitter's user may not publish a decision: the
    // server says so at once (no acknowledgement ever comes), and so does `approve`.
    let asked = Instant::now();
    let output = approve(&submitter);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains(&format!(
            "permission denied: this NATS user may not publish approvals on agentloom.run.{run_id}.decision"
        )),
        "{}",
        text(&output)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "told before the publish timed out: {:?}",
        asked.elapsed()
    );
    assert!(!text(&output).contains("submitter-pw"), "{}", text(&output));
    // The approver may decide but not submit: refused at once, naming the subject.
    let asked = Instant::now();
    let output = bin()
        .arg("submit")
        .arg(&graph)
        .args(["--nats", &nats.url("approver:approver-pw@"), "--trust"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert!(
        text(&output).contains(
            ".request: permission denied: this NATS user may not publish on this subject"
        ),
        "{}",
        text(&output)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "{:?}",
        asked.elapsed()
    );
    assert!(!text(&output).contains("approver-pw"), "{}", text(&output));
    // Nor resume it with a signed decision queued as a worker takes them: no approver
    // recorded that decision.
    forge_decision(&submitter, &run_id, NKEY_SEED);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(hook.posts(), 0);
    let output = approve(&nats.url("approver:approver-pw@"));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(hook.posts(), 1);
}

/// Queues, as whoever `url` connects as, a decision approving what run `run_id` waits for,
/// signed with `seed`, without recording it on the run's decision subject.
fn forge_decision(url: &str, run_id: &str, seed: &str) {
    use agentloom::remote::{Nats, Resume, WorkItem, signed};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let nats = Nats::connect(url, "forger").await.unwrap();
        let approvals = nats
            .last_record(run_id, "approvals")
            .await
            .unwrap()
            .unwrap();
        let pending: Vec<agentloom_engine::PendingApproval> =
            serde_json::from_slice(&approvals.payload).unwrap();
        let waiting = &pending[0];
        let decision = waiting.request.approve_as_is();
        let signed = signed::sign(seed, run_id, &waiting.node, &decision).unwrap();
        let item = WorkItem {
            run_id: run_id.to_owned(),
            resume: Some(Resume {
                node: waiting.node.clone(),
                request: waiting.request.clone(),
                decision,
                signed: Some(signed),
            }),
            start_by_ms: None,
        };
        nats.queue(&item).await.unwrap();
    });
}
