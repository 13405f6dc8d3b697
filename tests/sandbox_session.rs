//! An overlay session keeps one sandbox namespace for all its commands, each on the layers
//! the commands before it left. These tests try to make those layers lie: writes from
//! elsewhere during and between commands, rollbacks, whiteouts and opaque directories
//! over kept layers, hard links across layers, refused secrets, quotas, read-only commands,
//! and more commands than layers are kept. Whatever happens, a command sees exactly what
//! the fork holds when it starts, and its envelope lists exactly its own changes. Real
//! binary, real overlay and FUSE mounts, real `sh`.

mod common;

use std::collections::BTreeMap;

use common::mount::{ProxyEnv, avfs_json, ok};
use serde_json::Value;

fn env() -> Option<ProxyEnv> {
    if !common::skip::require_sandbox() {
        return None;
    }
    let e = ProxyEnv::new()?;
    let (v, code) = avfs_json(
        e.home.path(),
        &["session", "start", "w", "--name", "s", "--mode", "overlay"],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["mode"], "overlay");
    assert_eq!(v["data"]["dir"], Value::Null, "no host mount: {v}");
    Some(e)
}

/// `proxy exec --session s ARGS`: the envelope's data, which must say it ran in the
/// session's namespace.
fn run(e: &ProxyEnv, args: &[&str]) -> Value {
    let mut full = vec!["proxy", "exec", "--session", "s", "--checkpoint", "never"];
    full.extend_from_slice(args);
    let (v, _) = avfs_json(e.home.path(), &full);
    assert_eq!(v["ok"], true, "{full:?}: {v}");
    let d = v["data"].clone();
    assert_eq!(d["request"]["session"], "s", "{d}");
    assert_eq!(d["mode"], "overlay", "{d}");
    assert_eq!(d["sandbox"]["kind"], "namespace", "{d}");
    d
}

fn sh(e: &ProxyEnv, script: &str) -> Value {
    let d = run(e, &["--shell", script]);
    assert_eq!(d["exit_code"], 0, "{script}: {d}");
    d
}

fn changes(d: &Value) -> Vec<String> {
    d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["status"].as_str().unwrap(),
                c["path"].as_str().unwrap()
            )
        })
        .collect()
}

fn stdout(d: &Value) -> String {
    d["stdout"]["text"].as_str().unwrap().to_string()
}

/// Every path in the fork with its kind and content (what `avfs` itself reads).
fn fork_state(e: &ProxyEnv) -> BTreeMap<String, String> {
    let (v, code) = avfs_json(e.home.path(), &["find", "*", "/"]);
    assert_eq!(code, 0, "{v}");
    let mut out = BTreeMap::new();
    for p in v["data"].as_array().unwrap() {
        let path = p.as_str().unwrap_or_else(|| p["path"].as_str().unwrap());
        let (c, code) = avfs_json(e.home.path(), &["cat", path]);
        let content = if code == 0 {
            c["data"].to_string()
        } else {
            "-".into()
        };
        out.insert(path.to_string(), content);
    }
    out
}

/// What the session's next command sees: every path under the workspace with its content.
fn seen(e: &ProxyEnv) -> String {
    stdout(&sh(
        e,
        "find . -mindepth 1 | sort | while read -r p; do \
         if [ -f \"$p\" ]; then echo \"$p=$(cat \"$p\")\"; else echo \"$p/\"; fi; done",
    ))
}

#[test]
fn more_commands_than_kept_layers_each_report_only_their_own_change() {
    let Some(e) = env() else { return };
    // Past MAX_LAYERS (24) the namespace is made afresh; nothing may be lost or doubled.
    for i in 0..40 {
        let rm = if i == 0 {
            String::new()
        } else {
            format!("; rm f{}.txt", i - 1)
        };
        let d = sh(&e, &format!("echo {i} >> log.txt; echo {i} > f{i}.txt{rm}"));
        let mut want = vec![format!("added /f{i}.txt")];
        if i == 0 {
            want.push("added /log.txt".into());
        } else {
            want.push(format!("deleted /f{}.txt", i - 1));
            want.push("modified /log.txt".into());
        }
        want.sort();
        let mut got = changes(&d);
        got.sort();
        assert_eq!(got, want, "command {i}: {d}");
    }
    let log = ok(e.avfs(&["cat", "/log.txt"]));
    let want: String = (0..40).map(|i| format!("{i}\n")).collect();
    assert_eq!(log, want);
    assert_eq!(seen(&e), seen_expected(&want));
}

fn seen_expected(log: &str) -> String {
    format!("./f39.txt=39\n./log.txt={}\n", log.trim_end())
}

#[test]
fn writes_from_elsewhere_between_and_during_commands_are_seen_and_not_claimed() {
    let Some(e) = env() else { return };
    sh(&e, "echo one > one.txt");
    // Between commands: a write from the CLI, then a rollback of the session's command.
    ok(e.avfs(&["write", "/cli.txt", "from the cli\n"]));
    let d = sh(&e, "cat cli.txt one.txt");
    assert_eq!(stdout(&d), "from the cli\none\n");
    assert!(changes(&d).is_empty(), "{d}");
    let two = sh(&e, "echo two > two.txt");
    let id = two["exec_id"].as_i64().unwrap().to_string();
    ok(e.avfs(&["rollback", &id]));
    assert_eq!(stdout(&sh(&e, "ls")), "cli.txt\none.txt\n");
    // During a command: the CLI writes while the command sleeps; the command's envelope
    // lists only its own file, and the next command sees both.
    let home = e.home.path().to_path_buf();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        ok(common::mount::avfs_in(
            &home,
            &["write", "/during.txt", "meanwhile\n"],
        ));
    });
    let d = sh(&e, "sleep 1; echo mine > mine.txt");
    writer.join().unwrap();
    assert_eq!(changes(&d), vec!["added /mine.txt"], "{d}");
    assert_eq!(
        stdout(&sh(&e, "ls")),
        "cli.txt\nduring.txt\nmine.txt\none.txt\n"
    );
    let d = sh(&e, "cat during.txt mine.txt");
    assert_eq!(stdout(&d), "meanwhile\nmine\n");
}

#[test]
fn whiteouts_opaque_directories_renames_and_links_over_kept_layers() {
    let Some(e) = env() else { return };
    sh(
        &e,
        "mkdir -p d/sub && echo x > d/x && echo y > d/sub/y && echo f > f.txt",
    );
    let d = sh(&e, "rm f.txt && rm -rf d && mkdir d && echo z > d/z");
    let mut got = changes(&d);
    got.sort();
    assert!(got.contains(&"deleted /f.txt".to_string()), "{d}");
    assert!(got.contains(&"added /d/z".to_string()), "{d}");
    assert_eq!(seen(&e), "./d/\n./d/z=z\n");
    // Hard links made in one command, written through in the next, read in a third.
    sh(&e, "echo shared > h1 && ln h1 h2");
    sh(&e, "echo more >> h2");
    assert_eq!(
        stdout(&sh(&e, "cat h1; stat -c %h h1")),
        "shared\nmore\n2\n"
    );
    assert_eq!(ok(e.avfs(&["cat", "/h1"])), "shared\nmore\n");
    // A rename over a file, and a directory renamed, over earlier layers.
    sh(
        &e,
        "echo a > ra && echo b > rb && mkdir -p rd/in && echo i > rd/in/i",
    );
    let d = sh(&e, "mv ra rb && mv rd rd2");
    let mut got = changes(&d);
    got.sort();
    assert!(got.iter().any(|c| c.contains("/rb")), "{d}");
    assert_eq!(
        stdout(&sh(
            &e,
            "cat rb rd2/in/i; ls rd 2>&1 | head -c 0; test -e ra || echo gone"
        )),
        "a\ni\ngone\n"
    );
    // Symlinks and modes survive the layers.
    sh(&e, "ln -s d/z lz && chmod 700 d/z");
    assert_eq!(stdout(&sh(&e, "readlink lz; stat -c %a d/z")), "d/z\n700\n");
    // The fork holds what the session saw.
    let state = fork_state(&e);
    assert!(!state.contains_key("/f.txt"), "{state:?}");
    assert!(!state.contains_key("/ra"), "{state:?}");
    assert!(state.contains_key("/rd2/in/i"), "{state:?}");
}

#[test]
fn a_read_only_command_and_a_refused_secret_leave_no_layer_behind() {
    let Some(e) = env() else { return };
    sh(&e, "echo base > base.txt");
    let d = run(
        &e,
        &["--readonly", "--shell", "cat base.txt; echo no > no.txt"],
    );
    assert_ne!(d["exit_code"], 0, "{d}");
    assert_eq!(stdout(&d), "base\n");
    assert!(
        d["stderr"]["text"].as_str().unwrap().contains("Read-only"),
        "{d}"
    );
    assert!(changes(&d).is_empty(), "{d}");
    assert_eq!(stdout(&sh(&e, "ls")), "base.txt\n");
    // A secret's name written by a command is refused; the next command must not see it.
    let d = sh(&e, "echo leaked > .env && echo kept > kept.txt");
    let refused: Vec<&str> = d["sandbox"]["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(refused, vec!["/.env"], "{d}");
    assert_eq!(stdout(&sh(&e, "ls -A")), "base.txt\nkept.txt\n");
}

#[test]
fn a_quota_fails_the_crossing_write_in_a_session_and_later_commands_go_on() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["quota", "set", "--max-size-mb", "2"]));
    let d = run(
        &e,
        &["--shell", "head -c 1500000 /dev/zero > a.bin && echo ok"],
    );
    assert_eq!(d["exit_code"], 0, "{d}");
    let d = run(&e, &["--shell", "head -c 1500000 /dev/zero > b.bin"]);
    assert_ne!(d["exit_code"], 0, "{d}");
    let err = d["stderr"]["text"].as_str().unwrap();
    assert!(err.contains("No space left"), "{d}");
    // The next command still sees the first file, and can write small ones.
    let d = sh(&e, "ls; echo small > s.txt");
    assert!(stdout(&d).contains("a.bin"), "{d}");
    assert_eq!(changes(&d), vec!["added /s.txt"], "{d}");
}

#[test]
fn stopping_the_session_leaves_no_mount_no_process_and_no_directory() {
    let Some(e) = env() else { return };
    sh(&e, "echo x > x.txt");
    sh(&e, "echo y > y.txt");
    let (list, _) = avfs_json(e.home.path(), &["session", "list"]);
    let pid = list["data"][0]["pid"].as_i64().unwrap().to_string();
    let holders: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(holders.len(), 1, "one process keeps the namespace");
    ok(e.avfs(&["session", "stop", "s"]));
    for h in &holders {
        common::wait::until_true(&format!("holder {h} to end"), || {
            common::wait::process_gone(h)
        });
    }
    let home = e.home.path().to_str().unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(home), "{mounts}");
    let left = std::fs::read_dir(e.home.path().join("run"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "the session's directories stayed");
    assert_eq!(ok(e.avfs(&["cat", "/y.txt"])), "y\n");
}
