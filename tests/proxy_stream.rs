//! `proxy exec --stream` and `--interleave` through the real binary: output arrives while
//! the command still runs; with --json as NDJSON events (started, stdout/stderr chunks,
//! then the usual document marked finished) whose texts add up to the envelope's; a
//! character split between two writes stays whole; interleaved output keeps the order of
//! the writes; a session streams too; a denied command streams nothing but the end.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::history::Env;
use common::skip::require_sandbox;
use serde_json::Value;

fn ndjson(out: &[u8]) -> Vec<Value> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn texts(events: &[Value], stream: &str) -> String {
    events
        .iter()
        .filter(|e| e["event"] == stream)
        .map(|e| e["text"].as_str().unwrap())
        .collect()
}

#[test]
fn json_stream_events_add_up_to_the_envelope() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("s");
    // `é` is \303\251: its two bytes are written separately, a moment apart.
    let script =
        "echo one; echo two >&2; printf 'h\\303'; sleep 0.2; printf '\\251\\n'; echo three";
    let out = env.run(
        Some("s"),
        &["--json", "proxy", "exec", "--stream", "--shell", script],
        None,
    );
    assert!(out.status.success(), "{out:?}");
    let events = ndjson(&out.stdout);
    assert_eq!(events[0]["event"], "started", "{events:#?}");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "finished");
    assert_eq!(last["ok"], true);
    assert_eq!(last["command"], "proxy exec");
    let envelope = &last["data"];
    assert_eq!(
        texts(&events, "stdout"),
        envelope["stdout"]["text"].as_str().unwrap()
    );
    assert_eq!(texts(&events, "stdout"), "one\nhé\nthree\n");
    assert_eq!(texts(&events, "stderr"), "two\n");
    // Every event in between is a chunk.
    for e in &events[1..events.len() - 1] {
        assert!(e["event"] == "stdout" || e["event"] == "stderr", "{e}");
    }
    // The closing document is the envelope the schema describes.
    let mut doc = last.clone();
    doc.as_object_mut().unwrap().remove("event");
    common::check_data("proxy exec", &doc["data"]);

    // A denied command starts nothing: only the end.
    let out = env.run(
        Some("s"),
        &["--json", "proxy", "exec", "--stream", "--shell", "rm -rf /"],
        None,
    );
    assert_eq!(out.status.code(), Some(126));
    let events = ndjson(&out.stdout);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["event"], "finished");
    assert_eq!(events[0]["data"]["ran"], false);
}

#[test]
fn output_arrives_while_the_command_still_runs() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("s");
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.env("AVFS_HOME", env.home())
        .env_remove("AVFS_WORKSPACE")
        .args([
            "--workspace",
            "s",
            "proxy",
            "exec",
            "--stream",
            "--timeout",
            "5s",
        ])
        .args(["--shell", "echo ready; sleep 600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // The line came while the command (5 s before its timeout) was still running.
    assert!(
        child.try_wait().unwrap().is_none(),
        "avfs had already ended"
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(124), "timed out as asked");
}

#[test]
fn interleaved_output_keeps_the_order_of_the_writes_in_a_session_too() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    env.create("s");
    let script = "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; done";
    let v = env.data("s", &["proxy", "exec", "--interleave", "--shell", script]);
    let want: String = (1..=5).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(v["stdout"]["text"], want.as_str(), "{v}");
    assert_eq!(v["stderr"]["text"], "");
    assert_eq!(v["interleaved"], true);
    let plain = env.data("s", &["proxy", "exec", "--shell", script]);
    assert_eq!(plain["interleaved"], false);
    assert_eq!(plain["stderr"]["text"], "err1\nerr2\nerr3\nerr4\nerr5\n");

    env.ok("s", &["session", "start", "s", "--name", "live"]);
    let v = env.data(
        "s",
        &[
            "proxy",
            "exec",
            "--session",
            "live",
            "--interleave",
            "--shell",
            script,
        ],
    );
    assert_eq!(v["stdout"]["text"], want.as_str(), "{v}");
    let out = env.run(
        None,
        &[
            "--json",
            "proxy",
            "exec",
            "--session",
            "live",
            "--stream",
            "--shell",
            script,
        ],
        None,
    );
    let events = ndjson(&out.stdout);
    assert_eq!(events[0]["event"], "started", "{events:#?}");
    let envelope = &events.last().unwrap()["data"];
    assert_eq!(envelope["request"]["session"], "live");
    assert_eq!(
        texts(&events, "stdout"),
        envelope["stdout"]["text"].as_str().unwrap()
    );
    assert_eq!(
        texts(&events, "stderr"),
        envelope["stderr"]["text"].as_str().unwrap()
    );
    env.ok("s", &["session", "stop", "live"]);
}
