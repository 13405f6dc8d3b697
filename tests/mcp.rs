//! `avfs mcp`: a real MCP session over the binary's stdin/stdout, one JSON-RPC message per
//! line, as an MCP client (Claude Desktop, an IDE) would drive it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

use common::mount::{avfs_command, avfs_json, require_fuse};

const TOOLS: [&str; 10] = [
    "checkpoint",
    "diff",
    "exec",
    "fork",
    "list_files",
    "merge",
    "op_log",
    "read_file",
    "rollback",
    "write_file",
];

/// `avfs --json ARGS` (checked against the schema) that must succeed: its data.
fn avfs(home: &Path, args: &[&str]) -> Value {
    let (doc, _) = avfs_json(home, args);
    assert_eq!(doc["ok"], true, "avfs {args:?}: {doc}");
    doc["data"].clone()
}

/// A client end of `avfs [--json] mcp ARGS`.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
}

impl Client {
    fn start(home: &Path, args: &[&str]) -> Client {
        let mut child = avfs_command(home)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start avfs mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
        }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("a line from avfs mcp within 120 s")
    }

    /// Send a request and return its response (skipping any notifications).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let line = self.next_line();
            let msg: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
            if msg["id"] == json!(id) {
                return msg;
            }
            assert!(
                msg.get("id").is_none(),
                "response to another request: {msg}"
            );
        }
    }

    fn initialize(&mut self) -> Value {
        let init = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": "avfs-test", "version": "0" }
            }),
        );
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        init["result"].clone()
    }

    /// Call a tool; returns (is_error, the JSON in its text content).
    fn call(&mut self, tool: &str, args: Value) -> (bool, Value) {
        let resp = self.request("tools/call", json!({ "name": tool, "arguments": args }));
        let result = &resp["result"];
        assert!(
            result.is_object(),
            "{tool} {args}: not a tool result: {resp}"
        );
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: no text content: {resp}"));
        let from_text: Value = serde_json::from_str(text).expect("text content is JSON");
        // Structured content repeats it; for a list (ls, checkpoint list) only from protocol
        // 2026-07-28 on, since older revisions allow only objects there.
        match result.get("structuredContent") {
            Some(structured) => assert_eq!(&from_text, structured, "{tool}: text != structured"),
            None => assert!(
                !from_text.is_object(),
                "{tool}: no structured content: {resp}"
            ),
        }
        (result["isError"] == true, from_text)
    }

    /// A tool call that must succeed; returns its data, checked against the schema of the
    /// CLI command the tool stands for.
    fn ok(&mut self, tool: &str, args: Value) -> Value {
        let (is_error, data) = self.call(tool, args.clone());
        assert!(!is_error, "{tool} {args} failed: {data}");
        common::check_data(&cli_command(tool, &args), &data);
        data
    }

    /// A tool call that must fail; returns the error object {kind, message, details}.
    fn err(&mut self, tool: &str, args: Value) -> Value {
        let (is_error, error) = self.call(tool, args.clone());
        assert!(is_error, "{tool} {args} should have failed: {error}");
        assert!(
            error["message"].is_string() && error["details"].is_object(),
            "{error}"
        );
        error
    }

    /// Close stdin; the server must exit 0 and print nothing more on stdout.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "avfs mcp exited with {status}");
        let rest: Vec<String> = self.lines.try_iter().collect();
        assert!(rest.is_empty(), "stdout after the session: {rest:?}");
    }
}

/// The CLI command (as the schema names it) whose `--json` data a tool returns.
fn cli_command(tool: &str, args: &Value) -> String {
    match tool {
        "read_file" => "cat".into(),
        "write_file" => "write".into(),
        "list_files" => "ls".into(),
        "exec" => "proxy exec".into(),
        "fork" => "vault fork".into(),
        "checkpoint" => format!("checkpoint {}", args["action"].as_str().unwrap_or("save")),
        "op_log" => "op log".into(),
        "diff" | "merge" | "rollback" => tool.into(),
        other => panic!("tool `{other}` has no CLI command in the schema"),
    }
}

fn changed_paths(changes: &Value) -> Vec<(String, String)> {
    changes
        .as_array()
        .expect("changes is a list")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_session_drives_files_checkpoints_exec_rollback_fork_and_merge() {
    let home = tempfile::tempdir().unwrap();
    avfs(home.path(), &["vault", "create", "proj"]);
    let mut c = Client::start(home.path(), &["mcp", "--workspace", "proj"]);

    let init = c.initialize();
    assert_eq!(init["serverInfo"]["name"], "avfs", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");

    let list = c.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, TOOLS);
    for t in &tools {
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object", "{t}");
        assert!(
            schema["properties"]["workspace"].is_object(),
            "no workspace arg: {t}"
        );
        // `vault` is the old name, still accepted but not advertised.
        assert!(schema["properties"]["vault"].is_null(), "{t}");
        assert!(
            t["description"].as_str().is_some_and(|d| d.len() > 20),
            "{t}"
        );
    }
    let schema_of =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    let exec = schema_of("exec");
    for arg in [
        "argv",
        "shell",
        "cwd",
        "timeout",
        "readonly",
        "checkpoint",
        "approve",
        "session",
    ] {
        assert!(
            exec["properties"][arg].is_object(),
            "exec lacks {arg}: {exec}"
        );
    }
    assert_eq!(schema_of("read_file")["required"], json!(["path"]));
    assert_eq!(
        schema_of("write_file")["required"],
        json!(["path", "content"])
    );

    // Files.
    let wrote = c.ok(
        "write_file",
        json!({ "path": "src/hello.txt", "content": "hello\n", "parents": true }),
    );
    assert_eq!(wrote["path"], "/src/hello.txt");
    assert_eq!(wrote["size"], 6);
    let read = c.ok("read_file", json!({ "path": "src/hello.txt" }));
    assert_eq!(read["content"], "hello\n");
    assert_eq!(read["encoding"], "utf8");
    let script = c.ok(
        "write_file",
        json!({ "path": "run.sh", "content": "#!/bin/sh\n", "mode": "755" }),
    );
    assert_eq!(script["size"], 10);
    let listed = c.ok("list_files", json!({}));
    let entries: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(entries, ["run.sh", "src"], "{listed}");
    let run_sh = &listed[0];
    assert_eq!(
        run_sh["mode"].as_u64().map(|m| m & 0o777),
        Some(0o755),
        "{run_sh}"
    );

    // Same JSON as the CLI's --json data.
    assert_eq!(listed, avfs(home.path(), &["--workspace", "proj", "ls"]));

    let cp = c.ok(
        "checkpoint",
        json!({ "name": "before", "message": "before the agent" }),
    );
    assert_eq!(cp["name"], "before");
    let cps = c.ok("checkpoint", json!({ "action": "list" }));
    assert_eq!(cps[0]["name"], "before", "{cps}");

    // A denied command is an envelope, not a tool error: nothing ran.
    let denied = c.ok("exec", json!({ "argv": ["rm", "-rf", "/"] }));
    assert_eq!(denied["ran"], false, "{denied}");
    assert_eq!(denied["decision"]["action"], "deny", "{denied}");
    assert_eq!(denied["changes"], json!([]));

    // Bad input is a typed error that changes nothing.
    let both = c.err("exec", json!({ "argv": ["ls"], "shell": "ls" }));
    assert_eq!(both["kind"], "invalid_argument", "{both}");
    let missing = c.err(
        "read_file",
        json!({ "path": "src/hello.txt", "workspace": "nope" }),
    );
    assert_eq!(missing["kind"], "vault_not_found", "{missing}");
    assert_eq!(missing["details"]["name"], "nope", "{missing}");
    let bad_mode = c.err(
        "write_file",
        json!({ "path": "y.txt", "content": "", "mode": "9z" }),
    );
    assert_eq!(bad_mode["kind"], "invalid_argument", "{bad_mode}");
    let no_cp = c.err(
        "checkpoint",
        json!({ "action": "restore", "name": "never" }),
    );
    assert_eq!(no_cp["kind"], "checkpoint_not_found", "{no_cp}");

    if require_fuse() {
        // A real command through the proxy and the FUSE mount.
        let env = c.ok(
            "exec",
            json!({ "argv": ["sh", "-c", "echo hi > x.txt && cat src/hello.txt"] }),
        );
        assert_eq!(env["ran"], true, "{env}");
        assert_eq!(env["exit_code"], 0, "{env}");
        assert_eq!(env["stdout"]["text"], "hello\n", "{env}");
        assert_eq!(
            changed_paths(&env["changes"]),
            [("/x.txt".to_string(), "added".to_string())]
        );
        assert!(env["checkpoint"].is_string(), "{env}");
        let exec_id = env["exec_id"].as_i64().expect("exec_id");
        assert_eq!(
            c.ok("read_file", json!({ "path": "x.txt" }))["content"],
            "hi\n"
        );

        let diff = c.ok("diff", json!({ "from": "before", "patch": true }));
        assert_eq!(
            changed_paths(&diff["changes"]),
            [("/x.txt".to_string(), "added".to_string())]
        );
        assert!(diff["patch"].as_str().unwrap().contains("+hi"), "{diff}");

        // A failing command still returns its envelope, with the child's exit code.
        let failed = c.ok("exec", json!({ "shell": "cat missing.txt", "cwd": "/src" }));
        assert_eq!(failed["ran"], true, "{failed}");
        assert_ne!(failed["exit_code"], 0, "{failed}");

        let rolled = c.ok("rollback", json!({ "exec_id": exec_id }));
        assert!(rolled["id"].is_i64(), "{rolled}");
        let gone = c.err("read_file", json!({ "path": "x.txt" }));
        assert_eq!(gone["kind"], "path_not_found", "{gone}");
    }

    // A fork, changed through the per-call workspace, merged back into its parent.
    let fork = c.ok("fork", json!({ "name": "task-1" }));
    assert_eq!(fork["target"]["name"], "task-1", "{fork}");
    c.ok(
        "write_file",
        json!({ "path": "src/feature.txt", "content": "new\n", "workspace": "task-1" }),
    );
    let err = c.err("read_file", json!({ "path": "src/feature.txt" }));
    assert_eq!(err["kind"], "path_not_found", "the fork is isolated: {err}");
    // Clients written for the old parameter name `vault` keep working.
    assert_eq!(
        c.ok(
            "read_file",
            json!({ "path": "src/feature.txt", "vault": "task-1" })
        )["content"],
        "new\n"
    );
    let old = c.err("list_files", json!({ "path": "src", "vault": "nope" }));
    assert_eq!(old["kind"], "vault_not_found", "{old}");
    let merged = c.ok("merge", json!({ "fork": "task-1" }));
    assert_eq!(merged["applied"], true, "{merged}");
    assert_eq!(
        changed_paths(&merged["changes"]),
        [("/src/feature.txt".to_string(), "added".to_string())]
    );
    assert_eq!(
        c.ok("read_file", json!({ "path": "src/feature.txt" }))["content"],
        "new\n"
    );

    // Restoring the checkpoint drops everything since.
    c.ok(
        "checkpoint",
        json!({ "action": "restore", "name": "before" }),
    );
    let diff = c.ok("diff", json!({ "from": "before" }));
    assert_eq!(diff["changes"], json!([]), "{diff}");

    c.finish();

    // The audit log records who did it.
    let audit = avfs(
        home.path(),
        &["--workspace", "proj", "audit", "--limit", "1"],
    );
    assert_eq!(audit[0]["source"], "mcp", "{audit}");
}

/// `if_head` on the tools that change the workspace: of two agents that read one head, the
/// first change lands and the second fails with head_moved and changes nothing; a tool
/// that changes nothing refuses it.
#[test]
fn if_head_makes_a_change_apply_only_on_the_state_it_read() {
    let home = tempfile::tempdir().unwrap();
    avfs(home.path(), &["vault", "create", "proj"]);
    let mut c = Client::start(home.path(), &["mcp", "--workspace", "proj"]);
    c.initialize();
    let head = |c: &mut Client| c.ok("op_log", json!({ "limit": 1 }))[0]["id"].as_i64();
    assert_eq!(head(&mut c), None, "a new vault has no operations");
    // 0 stands for none.
    c.ok(
        "write_file",
        json!({ "path": "a.txt", "content": "one\n", "if_head": 0 }),
    );
    let read = head(&mut c).unwrap();
    c.ok(
        "write_file",
        json!({ "path": "a.txt", "content": "mine\n", "if_head": read }),
    );
    let moved = c.err(
        "write_file",
        json!({ "path": "a.txt", "content": "theirs\n", "if_head": read }),
    );
    assert_eq!(moved["kind"], "head_moved", "{moved}");
    let now = head(&mut c).unwrap();
    assert_eq!(moved["details"]["expected"], read, "{moved}");
    assert_eq!(moved["details"]["head"], now, "{moved}");
    assert_eq!(
        c.ok("read_file", json!({ "path": "a.txt" }))["content"],
        "mine\n"
    );
    // Checkpoints and rollback take it too; a stale head changes nothing there either.
    let stale = c.err("checkpoint", json!({ "name": "cas", "if_head": read }));
    assert_eq!(stale["kind"], "head_moved", "{stale}");
    assert_eq!(c.ok("checkpoint", json!({ "action": "list" })), json!([]));
    let saved = c.ok("checkpoint", json!({ "name": "cas", "if_head": now }));
    assert_eq!(saved["name"], "cas");
    let listed = c.err("checkpoint", json!({ "action": "list", "if_head": now }));
    assert_eq!(listed["kind"], "invalid_argument", "{listed}");
    let negative = c.err(
        "write_file",
        json!({ "path": "a.txt", "content": "x", "if_head": -1 }),
    );
    assert_eq!(negative["kind"], "invalid_argument", "{negative}");
    let rb = c.err("rollback", json!({ "if_head": read }));
    assert_eq!(rb["kind"], "head_moved", "{rb}");
    // Reads and the log itself take no `if_head`: an unknown argument is a typed error.
    let bad = c.err("read_file", json!({ "path": "a.txt", "if_head": now }));
    assert_eq!(bad["kind"], "invalid_argument", "{bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("if_head"),
        "{bad}"
    );
    // The field is named, and what it should be is said in the schema's words.
    for (tool, args, field, wanted) in [
        (
            "write_file",
            json!({ "path": "a.txt", "content": "x", "if_head": "7" }),
            "if_head",
            "an integer",
        ),
        (
            "op_log",
            json!({ "limit": -1 }),
            "limit",
            "an integer of 0 or more",
        ),
        (
            "write_file",
            json!({ "path": "a.txt", "content": 7 }),
            "content",
            "a string",
        ),
    ] {
        let bad = c.err(tool, args.clone());
        assert_eq!(bad["kind"], "invalid_argument", "{bad}");
        let message = bad["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{field}`")) && message.contains(wanted),
            "{tool} {args}: {message}"
        );
    }
    // None of them changed anything.
    assert_eq!(
        c.ok("read_file", json!({ "path": "a.txt" }))["content"],
        "mine\n"
    );
    c.finish();
}

#[test]
fn json_flag_still_speaks_mcp_and_unknown_tools_are_protocol_errors() {
    let home = tempfile::tempdir().unwrap();
    let mut c = Client::start(home.path(), &["--json", "mcp"]);
    let init = c.initialize();
    assert_eq!(init["serverInfo"]["name"], "avfs", "{init}");

    // No vault anywhere: a typed error, not a crash.
    let none = c.err("list_files", json!({}));
    assert_eq!(none["kind"], "no_vault_selected", "{none}");

    let unknown = c.request(
        "tools/call",
        json!({ "name": "no_such_tool", "arguments": {} }),
    );
    assert!(unknown["error"]["code"].is_i64(), "{unknown}");
    // Arguments that do not fit a tool's schema are a tool error the agent can read and
    // fix, typed like every other bad input, not a protocol error with only text.
    for (tool, args) in [
        ("read_file", json!({ "path": 7 })),
        ("read_file", json!({})),
        ("exec", json!({ "argv": "ls", "timeout": 5 })),
        ("checkpoint", json!({ "action": "sideways" })),
    ] {
        let bad = c.err(tool, args.clone());
        assert_eq!(bad["kind"], "invalid_argument", "{tool} {args}: {bad}");
        assert!(
            bad["message"].as_str().unwrap().contains("schema"),
            "{tool} {args}: {bad}"
        );
    }
    c.finish();
}

#[test]
fn the_server_policy_decides_every_exec() {
    let home = tempfile::tempdir().unwrap();
    avfs(home.path(), &["vault", "create", "proj"]);
    let policy = home.path().join("strict.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"no-echo\"\nprogram = \"echo\"\naction = \"deny\"\n",
    )
    .unwrap();
    let args = [
        "mcp",
        "--workspace",
        "proj",
        "--policy",
        policy.to_str().unwrap(),
    ];
    let mut c = Client::start(home.path(), &args);
    c.initialize();
    let env = c.ok("exec", json!({ "argv": ["echo", "hi"] }));
    assert_eq!(env["ran"], false, "{env}");
    assert_eq!(env["decision"]["rule"], "no-echo", "{env}");
    c.finish();

    // A policy that does not load stops the server before it speaks.
    let out = Command::new(env!("CARGO_BIN_EXE_avfs"))
        .args(["mcp", "--policy", "/nonexistent/policy.toml"])
        .env("AVFS_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The MCP tools give an agent no secret's content: read_file of `.env`, of a file under
/// `.aws/`, or of a `*.pem` holding a private key fails with `secret_refused`; list_files
/// shows their names (as the mount does); diff patches withhold their content. The CLI
/// shows a secret in a patch only with --show-secrets.
#[test]
fn secrets_do_not_reach_the_agent_through_mcp() {
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvg\n-----END PRIVATE KEY-----\n";
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIID\n-----END CERTIFICATE-----\n";
    let home = tempfile::tempdir().unwrap();
    avfs(home.path(), &["vault", "create", "s"]);
    avfs(home.path(), &["write", ".env", "API_KEY=hunter2"]);
    avfs(
        home.path(),
        &["write", "-p", "config/.aws/credentials", "aws_secret=x1"],
    );
    avfs(home.path(), &["write", "-p", "keys/server.pem", "--", KEY]);
    avfs(home.path(), &["write", "-p", "certs/ca.pem", "--", CERT]);
    avfs(home.path(), &["checkpoint", "save", "c1"]);
    avfs(home.path(), &["write", ".env", "API_KEY=hunter3"]);
    avfs(home.path(), &["ln", "-s", ".env", "notes.txt"]);
    avfs(
        home.path(),
        &["ln", "-s", "../keys/server.pem", "certs/mine.pem"],
    );
    // A hard link made by a person: its other name is the secret's content too.
    avfs(home.path(), &["ln", ".env", "innocent.txt"]);
    let mut c = Client::start(home.path(), &["mcp", "--workspace", "s"]);
    c.initialize();
    for path in [
        ".env",
        "config/.aws/credentials",
        "keys/server.pem",
        "/keys/../.env",
        "notes.txt",
        "certs/mine.pem",
        "innocent.txt",
    ] {
        let e = c.err("read_file", json!({ "path": path }));
        assert_eq!(e["kind"], "secret_refused", "{path}: {e}");
        let text = e.to_string();
        assert!(
            !text.contains("hunter") && !text.contains("MIIEvg"),
            "{text}"
        );
    }
    let e = c.err("read_file", json!({ "path": ".env", "at": "c1" }));
    assert_eq!(e["kind"], "secret_refused");
    // Nor overwritten, directly or through a link.
    for path in [".env", "notes.txt"] {
        let e = c.err("write_file", json!({ "path": path, "content": "x" }));
        assert_eq!(e["kind"], "secret_refused", "{path}: {e}");
    }
    assert_eq!(
        c.ok("read_file", json!({ "path": "certs/ca.pem" }))["content"],
        CERT
    );
    let listed = c.ok("list_files", json!({ "all": true }));
    assert!(listed.to_string().contains("\".env\""), "{listed}");
    let diff = c.ok("diff", json!({ "patch": true }));
    let text = diff.to_string();
    assert!(text.contains(".env"), "{text}");
    assert!(!text.contains("hunter"), "{text}");
    c.finish();
    // A person asks explicitly to see it.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_avfs"))
            .args(args)
            .env("AVFS_HOME", home.path())
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(!cli(&["diff", "--patch"]).contains("hunter"));
    assert!(cli(&["diff", "--patch", "--show-secrets"]).contains("+API_KEY=hunter3"));
}
