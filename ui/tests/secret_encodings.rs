//! A token the credential's own host quotes back, in any common encoding, is refused when a
//! graph forwards it to a host the credential is not bound to; a token quoted back in a body
//! that is not UTF-8 is in no file of the run log nor in `agentloom runs --export`. Real
//! loopback HTTP servers, the real binary, the real SQLite files.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// `+` and `/` so that the escapes of JSON, URLs and HTML change it.
const TOKEN: &str = "tok+CANARY/enc-7f3a9";

/// Each way the bound host quotes the token back.
const ENCODINGS: &[&str] = &[
    "json_slash",
    "json_unicode",
    "json_every_char",
    "url_lower",
    "url_every_byte",
    "hex_lower",
    "hex_upper",
    "basic",
    "basic_password_only",
    "base64_url_safe",
    "upper",
    "lower",
    "html_named",
    "html_decimal",
    "html_hex",
    "latin1",
    "utf16",
];

fn base64(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(alphabet[(n >> (18 - 6 * i)) as usize & 63]));
        }
        if pad {
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
    }
    out
}

fn from_base64(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut bits, mut count) = (0u32, 0u32);
    for c in text.bytes().filter(|&c| c != b'=') {
        let sextet = STANDARD.iter().position(|&a| a == c).unwrap();
        bits = (bits << 6) | u32::try_from(sextet).unwrap();
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push(u8::try_from((bits >> count) & 0xff).unwrap());
        }
    }
    out
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `token` as the bound host sends it back for `encoding`.
fn quoted(encoding: &str, token: &str) -> Vec<u8> {
    let each_char = |form: &dyn Fn(char) -> String| -> String { token.chars().map(form).collect() };
    let text = match encoding {
        "json_slash" => format!(r#"{{"echo":"{}"}}"#, token.replace('/', "\\/")),
        "json_unicode" => format!(r#"{{"echo":"{}"}}"#, token.replace('+', "\\u002B")),
        "json_every_char" => format!(
            r#"{{"echo":"{}"}}"#,
            each_char(&|c| format!("\\u{:04x}", u32::from(c)))
        ),
        "url_lower" => format!("token={}", token.replace('+', "%2b").replace('/', "%2f")),
        "url_every_byte" => format!("token={}", each_char(&|c| format!("%{:02x}", u32::from(c)))),
        "hex_lower" => each_char(&|c| format!("{:02x}", u32::from(c))),
        "hex_upper" => each_char(&|c| format!("{:02X}", u32::from(c))),
        "basic" => format!(
            "Authorization: Basic {}",
            base64(format!("bob:{token}").as_bytes(), STANDARD, true)
        ),
        "basic_password_only" => base64(format!("{token}:").as_bytes(), STANDARD, true),
        "base64_url_safe" => base64(token.as_bytes(), URL_SAFE, false),
        "upper" => format!("your key is {}", token.to_uppercase()),
        "lower" => format!("your key is {}", token.to_lowercase()),
        "html_named" => format!(
            "<p>{}</p>",
            token.replace('+', "&plus;").replace('/', "&sol;")
        ),
        "html_decimal" => format!(
            "<p>{}</p>",
            token.replace('+', "&#43;").replace('/', "&#47;")
        ),
        "html_hex" => format!(
            "<p>{}</p>",
            each_char(&|c| format!("&#x{:X};", u32::from(c)))
        ),
        "latin1" => {
            let mut body = b"caf\xe9 cl\xe9: ".to_vec();
            body.extend_from_slice(token.as_bytes());
            return body;
        }
        "utf16" => return token.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        other => panic!("no encoding {other}"),
    };
    text.into_bytes()
}

/// A loopback HTTP server. `/quote/ENCODING` answers with the bearer token it was sent,
/// encoded so; every request is kept.
struct Peer {
    base: String,
    port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Peer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || quote_back(stream, &kept));
            }
        });
        Self {
            base: format!("http://127.0.0.1:{port}"),
            port,
            seen,
        }
    }

    fn requests(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().clone()
    }
}

fn quote_back(mut stream: TcpStream, kept: &Mutex<Vec<Vec<u8>>>) {
    let (head, body) =
        agentloom_tests::read_http_request(&mut BufReader::new(stream.try_clone().unwrap()));
    let mut request = head.clone().into_bytes();
    request.extend_from_slice(&body);
    kept.lock().unwrap().push(request);
    let bearer = head
        .lines()
        .find_map(|line| line.strip_prefix("authorization: Bearer "))
        .or_else(|| {
            head.lines()
                .find_map(|line| line.strip_prefix("Authorization: Bearer "))
        })
        .unwrap_or("")
        .trim()
        .to_owned();
    let path = head.split(' ').nth(1).unwrap_or("/");
    let answer = match path.strip_prefix("/quote/") {
        Some(encoding) => quoted(encoding, &bearer),
        None => b"ok".to_vec(),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    );
    let _ = stream.write_all(&answer);
}

/// A graph that, for each encoding, fetches the quoted token from `home` with credential
/// `svc` and posts the answer's body to `away`; each forwarding node's error is an output.
fn forwarding_graph(dir: &Path, home: &Peer, away: &Peer, encodings: &[&str]) -> PathBuf {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for encoding in encodings {
        let (fetch, forward) = (format!("fetch_{encoding}"), format!("forward_{encoding}"));
        nodes.push(json!({"id": fetch, "block": "http.request", "config": {
            "url": format!("{}/quote/{encoding}", home.base), "credential": "svc",
            "allow_private_network": true}}));
        nodes.push(json!({"id": forward, "block": "http.request", "config": {
            "url": format!("{}/collect/{encoding}", away.base), "method": "POST",
            "allow_private_network": true}}));
        nodes.push(
            json!({"id": format!("{forward}_error"), "block": "graph.output",
            "config": {"name": format!("{forward}_error")}}),
        );
        edges.push(json!({"from": [fetch, "body"], "to": [forward, "body"]}));
        edges
            .push(json!({"from": [forward, "error"], "to": [format!("{forward}_error"), "value"]}));
    }
    let path = dir.join("forward.agentloom.json");
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "forward",
        "nodes": nodes, "edges": edges});
    std::fs::write(&path, graph.to_string()).unwrap();
    path
}

fn agentloom(dir: &Path, args: &[&str], home: &Peer) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentloom"))
        .env_remove("AGENTLOOM_LOG")
        .env("AGENTLOOM_SECRET_SVC", TOKEN)
        .env(
            "AGENTLOOM_SECRET_SVC_HOSTS",
            format!("127.0.0.1:{}", home.port),
        )
        .env("XDG_DATA_HOME", dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `agentloom run GRAPH --json --trust` with the run log in `dir` and `extra` arguments;
/// the run must succeed. Its output and `--json` report.
fn run_graph(dir: &Path, graph: &Path, home: &Peer, extra: &[&str]) -> (Output, Value) {
    let db = dir.join("runs.sqlite3");
    let mut args = vec![
        "run",
        graph.to_str().unwrap(),
        "--json",
        "--trust",
        "--db",
        db.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = agentloom(dir, &args, home);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    assert!(
        output.status.success(),
        "{}\n{report}",
        String::from_utf8_lossy(&output.stderr)
    );
    (output, report)
}

/// The bytes of every file of the run log (the database, its -wal and -shm).
fn run_log_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains("runs.sqlite3") {
            bytes.extend(std::fs::read(path).unwrap());
        }
    }
    bytes
}

/// Whether `haystack` holds the token plain, upper-cased or as UTF-16.
fn holds_token(haystack: &[u8]) -> bool {
    let utf16: Vec<u8> = TOKEN.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let upper = haystack.to_ascii_uppercase();
    let contains = |needle: &[u8]| upper.windows(needle.len()).any(|w| w == needle);
    contains(TOKEN.to_ascii_uppercase().as_bytes()) || contains(&utf16.to_ascii_uppercase())
}

#[test]
fn every_encoding_of_a_quoted_back_token_is_refused_at_an_unbound_host() {
    let dir = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    let graph = forwarding_graph(dir.path(), &home, &away, ENCODINGS);
    let (output, report) = run_graph(dir.path(), &graph, &home, &[]);
    assert_eq!(
        home.requests().len(),
        ENCODINGS.len(),
        "every fetch reached home"
    );
    let mut let_through = Vec::new();
    for encoding in ENCODINGS {
        let id = format!("forward_{encoding}");
        let error = report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|node| node["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no node {id} in {report}"))["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let refused = format!(
            "credential `svc` may not be sent to 127.0.0.1:{} (it is bound to 127.0.0.1:{})",
            away.port, home.port
        );
        if !error.contains(&refused) {
            let_through.push(format!("{encoding}: {error:?}"));
        }
    }
    assert!(
        let_through.is_empty(),
        "forwarded unrefused:\n{}",
        let_through.join("\n")
    );
    assert!(
        away.requests().is_empty(),
        "the unbound host got requests: {:?}",
        away.requests()
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect::<Vec<_>>()
    );
    assert!(!holds_token(&output.stdout) && !holds_token(&output.stderr));
}

#[test]
fn a_token_quoted_back_in_a_body_that_is_not_utf8_is_in_no_run_log_file_nor_export() {
    let dir = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    let graph = forwarding_graph(dir.path(), &home, &away, &["latin1", "utf16"]);
    let (output, _) = run_graph(dir.path(), &graph, &home, &[]);
    assert!(!holds_token(&output.stdout) && !holds_token(&output.stderr));
    let db = dir.path().join("runs.sqlite3");
    let db_arg = db.to_str().unwrap();
    assert_eq!(home.requests().len(), 2);

    let log = run_log_bytes(dir.path());
    assert!(!log.is_empty());
    assert!(!holds_token(&log), "the run log holds the token");

    // The calls are recorded: the Latin-1 body redacted, the UTF-16 one (NUL bytes) kept
    // as its hash and size only.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let calls: Vec<(String, Option<String>, i64)> = conn
        .prepare("SELECT node_id, response_json, body_size FROM run_calls ORDER BY node_id")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    drop(conn);
    let fetched: Vec<_> = calls.iter().filter(|c| c.0.starts_with("fetch_")).collect();
    assert_eq!(fetched.len(), 2, "{calls:?}");
    // Bytes are kept as `{"$bytes": BASE64}`: the token would be there, encoded.
    let latin1 = fetched.iter().find(|c| c.0 == "fetch_latin1").unwrap();
    let latin1_json: Value = serde_json::from_str(latin1.1.as_deref().unwrap()).unwrap();
    let latin1_body = from_base64(latin1_json["body"]["$bytes"].as_str().unwrap_or_default());
    assert!(
        latin1_body.starts_with(b"caf\xe9 cl\xe9: ") && !holds_token(&latin1_body),
        "{}",
        String::from_utf8_lossy(&latin1_body)
    );
    assert!(latin1_body.ends_with(b"[redacted]"));
    let utf16 = fetched.iter().find(|c| c.0 == "fetch_utf16").unwrap();
    let utf16_json: Value = serde_json::from_str(utf16.1.as_deref().unwrap()).unwrap();
    assert_eq!(utf16_json["body"]["omitted"], "binary body", "{utf16_json}");
    assert_eq!(utf16_json["body"]["bytes"], TOKEN.len() * 2);
    assert_eq!(
        utf16_json["body"]["sha256"].as_str().map(str::len),
        Some(64),
        "{utf16_json}"
    );
    assert_eq!(utf16.2, i64::try_from(TOKEN.len() * 2).unwrap());

    let export = dir.path().join("export.sqlite3");
    let exported = agentloom(
        dir.path(),
        &["runs", "--db", db_arg, "--export", export.to_str().unwrap()],
        &home,
    );
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );
    let export_bytes = std::fs::read(&export).unwrap();
    assert!(export_bytes.len() > 4096);
    assert!(!holds_token(&export_bytes), "the export holds the token");
    assert!(away.requests().is_empty());
}

/// A graph input declared `"type": "secret"`: sent to its host, refused elsewhere in any
/// form, and in no file of the run log.
#[test]
fn a_secret_input_goes_only_to_its_hosts_and_appears_nowhere_in_the_run_log() {
    const PASSWORD: &str = "pw-SECRET-input/42x";
    let dir = tempfile::tempdir().unwrap();
    let (home, away) = (Peer::start(), Peer::start());
    let post = |id: &str, url: String| {
        json!({"id": id, "block": "http.request", "config": {
            "url": url, "method": "POST", "allow_private_network": true}})
    };
    let nodes = json!([
        {"id": "password", "block": "graph.input", "config": {
            "name": "password", "type": "secret", "hosts": [format!("127.0.0.1:{}", home.port)]}},
        {"id": "login", "block": "text.template", "config": {"template": "user=ann&password={{ password | replace(\"/\", \"%2F\") }}"}},
        post("send_home", format!("{}/login", home.base)),
        post("send_away", format!("{}/login", away.base)),
        {"id": "send_away_error", "block": "graph.output", "config": {"name": "send_away_error"}},
        {"id": "echo", "block": "graph.output", "config": {"name": "echo"}}
    ]);
    let edges = json!([
        {"from": ["password", "value"], "to": ["login", "password"]},
        {"from": ["login", "text"], "to": ["send_home", "body"]},
        {"from": ["login", "text"], "to": ["send_away", "body"]},
        {"from": ["login", "text"], "to": ["echo", "value"]},
        {"from": ["send_away", "error"], "to": ["send_away_error", "value"]}
    ]);
    let path = dir.path().join("login.agentloom.json");
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "login",
        "nodes": nodes, "edges": edges});
    std::fs::write(&path, graph.to_string()).unwrap();
    let (output, report) = run_graph(
        dir.path(),
        &path,
        &home,
        &["--input", &format!("password={PASSWORD}")],
    );
    let in_output = |bytes: &[u8]| {
        let upper = bytes.to_ascii_uppercase();
        ["PW-SECRET-INPUT/42X", "PW-SECRET-INPUT%2F42X"]
            .iter()
            .any(|needle| upper.windows(needle.len()).any(|w| w == needle.as_bytes()))
    };
    let log = run_log_bytes(dir.path());
    assert!(log.len() > 4096);
    assert!(!in_output(&log), "the run log holds the secret input");
    assert!(!in_output(&output.stdout) && !in_output(&output.stderr));
    let at_home: Vec<String> = home
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert!(
        at_home
            .iter()
            .any(|r| r.contains("password=pw-SECRET-input%2F42x")),
        "{at_home:?}"
    );
    assert!(away.requests().is_empty());
    assert_eq!(
        report["outputs"]["send_away_error"]["message"],
        format!(
            "the secret run input `password` may not be sent to 127.0.0.1:{} (it may go to 127.0.0.1:{}); if that host is meant to get it, add it to the `hosts` of the graph input `password`",
            away.port, home.port
        ),
        "{report}"
    );
    assert_eq!(report["outputs"]["echo"], "user=ann&password=[redacted]");
}

/// In safe mode a POST carrying a secret input waits for a person: the request kept for
/// them (`pending_approvals`) shows it redacted, and the run log holds it nowhere.
#[test]
fn a_secret_input_in_a_request_waiting_for_approval_is_kept_redacted() {
    const PASSWORD: &str = "pw-WAITING-input/77k";
    let dir = tempfile::tempdir().unwrap();
    let home = Peer::start();
    let graph = json!({"format": "agentloom.graph", "version": 1, "name": "safe login",
    "settings": {"safe_mode": true},
    "nodes": [
        {"id": "password", "block": "graph.input", "config": {
            "name": "password", "type": "secret", "hosts": [format!("127.0.0.1:{}", home.port)]}},
        {"id": "login", "block": "text.template", "config": {"template": "password={{ password }}"}},
        {"id": "send", "block": "http.request", "config": {
            "url": format!("{}/login", home.base), "method": "POST", "allow_private_network": true}}
    ],
    "edges": [
        {"from": ["password", "value"], "to": ["login", "password"]},
        {"from": ["login", "text"], "to": ["send", "body"]}
    ]});
    let path = dir.path().join("safe.agentloom.json");
    std::fs::write(&path, graph.to_string()).unwrap();
    let db = dir.path().join("runs.sqlite3");
    let output = agentloom(
        dir.path(),
        &[
            "run",
            path.to_str().unwrap(),
            "--trust",
            "--db",
            db.to_str().unwrap(),
            "--input",
            &format!("password={PASSWORD}"),
        ],
        &home,
    );
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(home.requests().is_empty(), "sent before approval");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let arguments: String = conn
        .query_row(
            "SELECT arguments_json FROM pending_approvals WHERE node_id = 'send'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    drop(conn);
    assert!(arguments.contains("password=[redacted]"), "{arguments}");
    let log = run_log_bytes(dir.path());
    assert!(
        !log.windows(PASSWORD.len())
            .any(|w| w == PASSWORD.as_bytes()),
        "the run log holds the secret input"
    );
    for stream in [&output.stdout, &output.stderr] {
        assert!(!String::from_utf8_lossy(stream).contains(PASSWORD));
    }
}
