//! `agentloom credentials login` from the shell, against a real OpenID provider
//! (node-oidc-provider on 127.0.0.1) and the real keychain: the device flow signs in, the
//! token is stored bound to the issuer's host, and `credentials remove` revokes it. Bad
//! arguments are refused naming what is wrong.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloom_tests::oidc::{Browser, Oidc};

/// The binary with its data (credential index included) in `data`.
fn agentloom(data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentloom"));
    command
        .env_remove("AGENTLOOM_LOG")
        .env_remove("AGENTLOOM_OAUTH_CLIENT_ID")
        .env("XDG_DATA_HOME", data);
    command
}

#[test]
fn signing_in_by_device_code_stores_the_token_for_the_issuer_and_removing_revokes_it() {
    if !agentloom_tests::keychain_available() {
        return;
    }
    let Some(oidc) = Oidc::start() else { return };
    let data = tempfile::tempdir().unwrap();
    let name = format!("login-test-{}", std::process::id());
    let mut login = agentloom(data.path())
        .args([
            "credentials",
            "login",
            "oidc",
            "--issuer",
            &oidc.issuer,
            "--client-id",
            "agentloom-test",
            "--device",
            "--name",
            &name,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "Open URL and enter the code CODE" on stderr: the person approves on another device.
    let mut stderr = BufReader::new(login.stderr.take().unwrap());
    let mut shown = String::new();
    let started = Instant::now();
    let (uri, code) = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "login ended without a code: {shown}"
        );
        shown.push_str(&line);
        if let Some(rest) = line.trim().strip_prefix("Open ")
            && let Some((uri, code)) = rest.split_once(" and enter the code ")
        {
            break (uri.to_owned(), code.to_owned());
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{shown}");
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(Browser::new(&oidc.issuer).approve_device_code(&uri, &code));
    let output = login.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let host = oidc.issuer.trim_start_matches("http://");
    assert!(output.status.success(), "{stdout}{shown}");
    assert!(
        stdout.contains(&format!(
            "Signed in; stored as credential `{name}`; it may be sent to {host}."
        )),
        "{stdout}"
    );

    let listed = agentloom(data.path())
        .args(["credentials", "list", "--json"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let stored = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(stored["kind"], "oauth", "{stored}");
    assert_eq!(stored["hosts"], serde_json::json!([host]), "{stored}");

    let removed = agentloom(data.path())
        .args(["credentials", "remove", &name])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&removed.stdout);
    assert!(removed.status.success(), "{said}");
    assert_eq!(said.trim(), format!("Revoked and removed `{name}`."));
}

#[test]
fn a_sign_in_with_a_wrong_argument_says_what_is_wrong() {
    let data = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["credentials", "login", "myspace", "--client-id", "x"],
            "unknown provider `myspace`: use github, google or oidc",
        ),
        (
            &["credentials", "login", "oidc", "--client-id", "x"],
            "`oidc` needs --issuer URL",
        ),
        (
            &["credentials", "login", "github"],
            "--client-id is required: create an OAuth app and pass its client id",
        ),
    ];
    if !agentloom_tests::keychain_available() {
        return;
    }
    for (args, message) in cases {
        let output = agentloom(data.path()).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
