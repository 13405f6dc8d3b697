//! `avfs proxy exec` end to end: real binary, real vault, real FUSE mount, real `sh`.

mod common;

use std::process::Command;

use common::mount::{ProxyEnv, avfs_json, ok};
use serde_json::Value;

type Env = ProxyEnv;

impl ProxyEnv {
    /// `avfs --json proxy exec …` (checked against the schema): the envelope and the exit
    /// code.
    fn exec(&self, args: &[&str]) -> (Value, i32) {
        let mut full = vec!["proxy", "exec"];
        full.extend_from_slice(args);
        avfs_json(self.home.path(), &full)
    }
}

fn changes(v: &Value) -> Vec<(String, String)> {
    v["data"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn changed_files_are_exactly_right() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "keep.txt", "same"]));
    ok(e.avfs(&["write", "mod.txt", "old"]));
    ok(e.avfs(&["write", "del.txt", "bye"]));
    ok(e.avfs(&["write", "exe.sh", "echo"]));
    ok(e.avfs(&["write", "old-name.txt", "moved content"]));
    let (v, code) = e.exec(&[
        "--shell",
        "echo new > add.txt && echo changed > mod.txt && rm del.txt && chmod +x exe.sh && mv old-name.txt new-name.txt",
    ]);
    assert_eq!(code, 0, "{v}");
    let got = changes(&v);
    assert_eq!(
        got,
        vec![
            ("added".into(), "/add.txt".into()),
            ("deleted".into(), "/del.txt".into()),
            ("modified".into(), "/exe.sh".into()),
            ("modified".into(), "/mod.txt".into()),
            ("renamed".into(), "/new-name.txt".into()),
        ],
        "{v}"
    );
    let exe = v["data"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "/exe.sh")
        .unwrap();
    assert_eq!(exe["mode_changed"], true);
    assert_eq!(exe["old_mode"], 0o644);
    assert_eq!(exe["new_mode"], 0o755);
    assert!(
        v["data"]["checkpoint"].is_string(),
        "a mutating command is checkpointed first"
    );
    assert!(v["data"]["audit_id"].as_i64().unwrap() > 0);
}

#[test]
fn timeout_kills_everything_keeps_partial_output_and_exits_124() {
    let Some(e) = Env::new() else { return };
    // Descendants that leave the group (setsid), leave their parent (a double fork) or
    // wait: each sleeps a time no other process on this machine sleeps, so the host can
    // find them (the pids they see are their own namespace's).
    for mode in ["overlay", "fuse", "copy"] {
        let marker = format!("1000.{}{}", std::process::id(), mode.len());
        let script = format!(
            "echo partial; setsid sleep {marker} & (sleep {marker} &); sh -c 'sleep {marker} & sleep {marker}'"
        );
        let (v, code) = e.exec(&["--mode", mode, "--timeout", "1s", "--shell", &script]);
        assert_eq!(code, 124, "{mode}: {v}");
        assert_eq!(v["data"]["timed_out"], true);
        assert_eq!(v["data"]["stdout"]["text"], "partial\n");
        // The kill is asynchronous: each descendant must go (the deadline bounds only a
        // hang, and a descendant that survives the timeout for good fails here).
        common::wait::until_true(&format!("{mode}: every `sleep {marker}` to die"), || {
            common::wait::processes_running(&marker).is_empty()
        });
    }
}

#[test]
fn output_flood_is_truncated_without_hanging() {
    let Some(e) = Env::new() else { return };
    let (v, code) = e.exec(&[
        "--checkpoint",
        "never",
        "--",
        "sh",
        "-c",
        "head -c 100000000 /dev/zero | tr '\\0' x",
    ]);
    assert_eq!(code, 0);
    assert_eq!(v["data"]["stdout"]["bytes"], 100_000_000);
    assert_eq!(v["data"]["stdout"]["truncated"], true);
    assert_eq!(
        v["data"]["stdout"]["text"].as_str().unwrap().len(),
        1024 * 1024
    );
}

#[test]
fn rollback_restores_the_state_before_the_exec_and_can_be_undone() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "a.txt", "original"]));
    let (v, _) = e.exec(&["--shell", "echo clobbered > a.txt; touch b.txt"]);
    let id = v["data"]["exec_id"].as_i64().unwrap().to_string();
    assert_eq!(ok(e.avfs(&["cat", "a.txt"])), "clobbered\n");
    ok(e.avfs(&["rollback", &id]));
    assert_eq!(ok(e.avfs(&["cat", "a.txt"])), "original");
    assert!(!e.avfs(&["stat", "b.txt"]).status.success());
    ok(e.avfs(&["undo"]));
    assert_eq!(ok(e.avfs(&["cat", "a.txt"])), "clobbered\n");
}

#[test]
fn rollback_without_an_id_undoes_the_last_command_that_changed_something() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "README.md", "read me"]));
    ok(e.avfs(&["write", "keep.md", "keep"]));
    let (v, code) = e.exec(&["--", "rm", "README.md"]);
    assert_eq!(code, 0, "{v}");
    let rm = v["data"]["exec_id"].as_i64().unwrap();
    // Read-only commands after it, and one allowed to write that wrote nothing.
    let (v, _) = e.exec(&["--", "ls"]);
    let ls = v["data"]["exec_id"].as_i64().unwrap();
    e.exec(&["--", "cat", "keep.md"]);
    let (v, _) = e.exec(&["--shell", "test -e nothing.md || true"]);
    assert_eq!(v["data"]["changes"], serde_json::json!([]), "{v}");
    let (v, code) = avfs_json(e.home.path(), &["rollback"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["target"], rm, "{v}");
    assert_eq!(ok(e.avfs(&["cat", "README.md"])), "read me");
    // Nothing left to roll back: a typed refusal, and nothing changes.
    let before = ok(e.avfs(&["op", "log", "--json"]));
    for (args, id, why) in [
        (vec!["rollback"], Value::Null, "no proxied command"),
        (
            vec!["rollback", &*ls.to_string()],
            ls.into(),
            "changed nothing",
        ),
        (
            vec!["rollback", &*rm.to_string()],
            rm.into(),
            "already rolled back",
        ),
    ] {
        let (v, code) = avfs_json(e.home.path(), &args);
        assert_eq!(code, 4, "{args:?}: {v}");
        assert_eq!(v["error"]["kind"], "nothing_to_roll_back", "{v}");
        assert_eq!(v["error"]["details"]["id"], id, "{v}");
        let reason = v["error"]["details"]["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{args:?}: {reason}");
    }
    assert_eq!(ok(e.avfs(&["op", "log", "--json"])), before);
    // Undoing the rollback makes the command the one to roll back again.
    ok(e.avfs(&["undo"]));
    assert!(!e.avfs(&["stat", "README.md"]).status.success());
    let (v, code) = avfs_json(e.home.path(), &["rollback"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["target"], rm, "{v}");
    assert_eq!(ok(e.avfs(&["cat", "README.md"])), "read me");
}

#[test]
fn denied_commands_do_not_run_and_still_return_an_envelope() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "a.txt", "x"]));
    for cmd in [
        "rm -rf /",
        "rm -rf ~",
        "cat ~/.ssh/id_rsa",
        "bash -c 'rm -rf /'",
    ] {
        let (v, code) = e.exec(&["--shell", cmd]);
        assert_eq!(code, 126, "{cmd}: {v}");
        assert_eq!(v["ok"], true);
        assert_eq!(v["data"]["ran"], false, "{cmd}");
        assert_eq!(v["data"]["decision"]["action"], "deny", "{cmd}");
        assert!(v["data"]["audit_id"].as_i64().unwrap() > 0);
    }
    assert_eq!(ok(e.avfs(&["cat", "a.txt"])), "x");
    let audit = ok(e.avfs(&["--json", "audit", "--limit", "10"]));
    assert!(audit.contains("\"result\":\"denied\""), "{audit}");
}

#[test]
fn secrets_are_hidden_and_secret_env_is_withheld() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", ".env", "API_KEY=hunter2"]));
    ok(e.avfs(&["write", "visible.txt", "ok"]));
    let out = Command::new(env!("CARGO_BIN_EXE_avfs"))
        .args([
            "--json",
            "proxy",
            "exec",
            "--shell",
            "ls -a; cat .env; echo TOKEN=${GITHUB_TOKEN:-unset}",
        ])
        .env("AVFS_HOME", e.home.path())
        .env_remove("AVFS_WORKSPACE")
        .env_remove("AVFS_VAULT")
        .env("GITHUB_TOKEN", "ghp_secret")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stdout = v["data"]["stdout"]["text"].as_str().unwrap();
    assert!(stdout.contains("visible.txt"), "{stdout}");
    // The secret is listed (so git does not see it deleted) but cannot be read.
    assert!(stdout.contains(".env"), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
    let stderr = v["data"]["stderr"]["text"].as_str().unwrap();
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert!(stdout.contains("TOKEN=unset"), "{stdout}");
    // The file itself is untouched.
    assert_eq!(ok(e.avfs(&["cat", ".env"])), "API_KEY=hunter2");
}

#[test]
fn forks_are_created_on_first_use() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "base.txt", "b"]));
    let (v, code) = e.exec(&[
        "--fork-from",
        "w",
        "--fork",
        "t1",
        "--shell",
        "echo work > out.txt",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["request"]["workspace"], "t1");
    assert_eq!(
        ok(e.avfs(&["--workspace", "t1", "cat", "out.txt"])),
        "work\n"
    );
    assert!(
        !e.avfs(&["--workspace", "w", "cat", "out.txt"])
            .status
            .success(),
        "parent untouched"
    );
    // The second run reuses the fork: it sees the first run's file.
    let (v, code) = e.exec(&["--fork-from", "w", "--fork", "t1", "--", "cat", "out.txt"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "work\n");
}

#[test]
fn the_old_task_option_names_the_fork_too() {
    // `--task` was the spelling of `--fork` before it; scripts that use it keep working.
    let Some(e) = Env::new() else { return };
    let (v, code) = e.exec(&[
        "--fork-from",
        "w",
        "--task",
        "t2",
        "--shell",
        "echo old > out.txt",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["request"]["workspace"], "t2");
    assert_eq!(
        ok(e.avfs(&["--workspace", "t2", "cat", "out.txt"])),
        "old\n"
    );
    let help = ok(e.avfs(&["proxy", "exec", "--help"]));
    assert!(help.contains("--fork <NAME>"), "{help}");
    assert!(!help.contains("--task"), "{help}");
}

#[test]
fn readonly_runs_cannot_write() {
    let Some(e) = Env::new() else { return };
    let (v, code) = e.exec(&["--readonly", "--shell", "echo x > f.txt"]);
    assert_ne!(code, 0);
    assert_eq!(v["data"]["request"]["access"], "readonly");
    assert!(
        v["data"]["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("Read-only"),
        "{v}"
    );
    assert!(changes(&v).is_empty());
}

#[test]
fn exit_code_mirrors_the_child() {
    let Some(e) = Env::new() else { return };
    let (v, code) = e.exec(&["--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(code, 7);
    assert_eq!(v["data"]["exit_code"], 7);
    assert_eq!(v["data"]["stderr"]["text"], "err\n");
}

/// A command that cannot start (a missing `#!` interpreter, a missing program) still
/// returns its envelope: `outcome: spawn_failed` with the reason, exit 127, an exec id;
/// and an approval token it used stays valid for a run that can start.
#[test]
fn a_command_that_cannot_start_returns_an_envelope_and_keeps_its_approval() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&[
        "write",
        "--mode",
        "755",
        "run.sh",
        "#!/nonexistent/interp\necho hi\n",
    ]));
    let (v, code) = e.exec(&["--", "./run.sh"]);
    assert_eq!(code, 127, "{v}");
    let d = &v["data"];
    assert_eq!(d["outcome"], "spawn_failed", "{v}");
    assert_eq!(d["ran"], false);
    assert!(
        d["spawn_error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/interp"),
        "{v}"
    );
    assert!(d["exec_id"].is_i64(), "{v}");
    let (v, code) = e.exec(&["--", "no-such-program-anywhere"]);
    assert_eq!(
        (code, v["data"]["outcome"].as_str()),
        (127, Some("spawn_failed"))
    );

    // Under a policy that asks, the token survives a run that never started.
    let policy = e.home.path().join("ask.toml");
    std::fs::write(&policy, "version = 1\n[actions]\nunknown = \"ask\"\n").unwrap();
    let p = policy.to_str().unwrap();
    let (asked, code) = e.exec(&["--policy", p, "--", "./run.sh"]);
    assert_eq!(code, 125, "{asked}");
    let token = asked["data"]["approval_token"]
        .as_str()
        .unwrap()
        .to_string();
    let (v, code) = e.exec(&["--policy", p, "--approve", &token, "--", "./run.sh"]);
    assert_eq!(
        (code, v["data"]["outcome"].as_str()),
        (127, Some("spawn_failed"))
    );
    ok(e.avfs(&["write", "--mode", "755", "run.sh", "#!/bin/sh\necho hi\n"]));
    let (v, code) = e.exec(&["--policy", p, "--approve", &token, "--", "./run.sh"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["outcome"], "completed");
    assert_eq!(v["data"]["stdout"]["text"], "hi\n");
    // Used by a run that started: gone now.
    let (v, _) = e.exec(&["--policy", p, "--approve", &token, "--", "./run.sh"]);
    assert_eq!(v["ok"], false, "{v}");
}

/// The builtin policy asks before a delete whose targets are known only at run time: the
/// command does not run and exits 125 with a token; the token runs exactly that command,
/// once, and no other.
#[test]
fn an_asked_command_runs_only_once_approved() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "x.o", "obj"]));
    let cmd = "find . -name '*.o' | xargs rm";
    let (asked, code) = e.exec(&["--shell", cmd]);
    assert_eq!(code, 125, "{asked}");
    let d = &asked["data"];
    assert_eq!(d["outcome"], "approval_required", "{asked}");
    assert_eq!(d["ran"], false);
    assert_eq!(d["decision"]["action"], "ask");
    assert_eq!(d["exit_code"], Value::Null);
    let token = d["approval_token"].as_str().unwrap().to_string();
    assert_eq!(
        ok(e.avfs(&["cat", "x.o"])),
        "obj",
        "nothing ran before approval"
    );

    // The token is for that command only.
    let (other, code) = e.exec(&[
        "--approve",
        &token,
        "--shell",
        "find . -name '*.x' | xargs rm",
    ]);
    assert_eq!((other["ok"].as_bool(), code), (Some(false), 5), "{other}");
    assert_eq!(other["error"]["kind"], "invalid_argument");
    assert_eq!(ok(e.avfs(&["cat", "x.o"])), "obj");

    let (ran, code) = e.exec(&["--approve", &token, "--shell", cmd]);
    assert_eq!(code, 0, "{ran}");
    assert_eq!(ran["data"]["outcome"], "completed");
    assert_eq!(ran["data"]["ran"], true);
    assert_eq!(changes(&ran), [("deleted".to_string(), "/x.o".to_string())]);

    // Used once: the same token is refused and nothing runs again.
    let (again, code) = e.exec(&["--approve", &token, "--shell", cmd]);
    assert_eq!((again["ok"].as_bool(), code), (Some(false), 5), "{again}");
}

#[test]
fn op_log_rows_stay_on_one_line_for_multi_line_commands() {
    let Some(e) = Env::new() else { return };
    let script = format!(
        "echo one > a.txt\necho two\tthree > b.txt\n# {}",
        "x".repeat(300)
    );
    let (v, code) = e.exec(&["--shell", &script]);
    assert_eq!(code, 0, "{v}");
    let log = ok(e.avfs(&["op", "log"]));
    let rows: Vec<&str> = log.lines().collect();
    let (json, _) = avfs_json(e.home.path(), &["op", "log"]);
    let entries = json["data"].as_array().unwrap();
    assert_eq!(rows.len(), entries.len() + 1, "{log}");
    let row = rows
        .iter()
        .find(|r| r.contains("echo one"))
        .expect("the exec's row");
    assert!(
        row.contains(r"a.txt\necho two\tthree") && row.ends_with('…'),
        "{row}"
    );
    // JSON keeps the description whole.
    assert!(
        entries.iter().any(|o| o["description"] == script.as_str()),
        "{json}"
    );
}
