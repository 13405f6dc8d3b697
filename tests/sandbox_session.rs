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

#[test]
fn the_stage_cannot_be_the_workspace_path() {
    // Regression: `--workspace-path /.avfs` covered the stage with the overlay, then the
    // stage's detach took the overlay away and left the layers (and the host directory
    // of upper layers) writable in the command's view.
    let Some(e) = env() else { return };
    for path in ["/.avfs", "/.avfs/h"] {
        let (v, code) = avfs_json(
            e.home.path(),
            &[
                "proxy",
                "exec",
                "--session",
                "s",
                "--workspace-path",
                path,
                "--",
                "ls",
                "/.avfs",
            ],
        );
        assert_ne!(code, 0, "{path}: {v}");
        assert_eq!(v["error"]["kind"], "invalid_argument", "{path}: {v}");
    }
    // Nor does a command see it (a script, so the policy does not refuse the paths).
    ok(e.avfs(&[
        "write",
        "/look.sh",
        "ls -A /.avfs; ls -A /proc/1/root/.avfs\n",
    ]));
    let d = run(&e, &["--", "sh", "look.sh"]);
    assert_eq!(stdout(&d), "", "{d}");
}

#[test]
fn a_private_key_written_by_one_command_is_hidden_from_the_next() {
    // Regression: the lower layer hides files holding a private key, but a kept layer
    // showed the key a command had written to the commands after it.
    let Some(e) = env() else { return };
    sh(
        &e,
        "printf -- '-----BEGIN RSA PRIVATE KEY-----\\nMIIB\\n-----END RSA PRIVATE KEY-----\\n' > server.pem",
    );
    let d = run(&e, &["--shell", "cat server.pem"]);
    assert_ne!(d["exit_code"], 0, "{d}");
    assert!(!d.to_string().contains("MIIB"), "{d}");
    // As a command run on its own sees it.
    let (alone, _) = avfs_json(
        e.home.path(),
        &[
            "proxy",
            "exec",
            "--mode",
            "overlay",
            "--",
            "cat",
            "server.pem",
        ],
    );
    assert_ne!(alone["data"]["exit_code"], 0, "{alone}");
}

#[test]
fn scratch_space_and_ipc_start_empty_for_every_command() {
    let Some(e) = env() else { return };
    // Scripts, so the policy does not refuse the absolute paths.
    ok(e.avfs(&[
        "write",
        "/put.sh",
        "echo x > /tmp/left; echo y > /run/left; echo z > /dev/shm/left; echo h > ~/cache\n\
         ipcmk -M 4096 >/dev/null\n",
    ]));
    ok(e.avfs(&[
        "write",
        "/look.sh",
        "for f in /tmp/left /run/left /dev/shm/left; do test -e $f && echo kept $f; done\n\
         ipcs -m | grep -c 4096\ncat ~/cache\n",
    ]));
    let d = run(&e, &["--", "sh", "put.sh"]);
    assert_eq!(d["exit_code"], 0, "{d}");
    let d = run(&e, &["--", "sh", "look.sh"]);
    // No shared memory segment left; the home is the session's (a cache for as long as
    // its namespace lasts).
    assert_eq!(stdout(&d), "0\nh\n", "{d}");
}

#[test]
fn a_kept_layer_shows_the_times_the_fork_has() {
    // Regression: directories the command only added to, and atimes, showed the upper
    // layer's times in later commands, not the fork's.
    let Some(e) = env() else { return };
    sh(&e, "mkdir -p deep && echo a > deep/a && echo b > xa");
    sh(
        &e,
        "sleep 0.05; echo z > deep/newfile; touch -a -d 2010-01-01 xa",
    );
    let probe = "stat -c '%n %y %x' deep deep/newfile xa";
    let kept = stdout(&sh(&e, probe));
    let (alone, _) = avfs_json(
        e.home.path(),
        &["proxy", "exec", "--mode", "overlay", "--shell", probe],
    );
    assert_eq!(kept, alone["data"]["stdout"]["text"].as_str().unwrap());
}

#[test]
fn a_client_gone_before_its_command_started_gets_it_cancelled() {
    // Regression: a client killed while its request waited behind another one's command
    // still had its command run to the end.
    let Some(e) = env() else { return };
    let mut first = common::mount::avfs_command(e.home.path())
        .args(["proxy", "exec", "--session", "s", "--shell", "sleep 2"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut second = common::mount::avfs_command(e.home.path())
        .args([
            "proxy",
            "exec",
            "--session",
            "s",
            "--shell",
            "sleep 1; echo late > late.txt",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    second.kill().unwrap();
    second.wait().unwrap();
    first.wait().unwrap();
    // The second command was never let run to its end.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(stdout(&sh(&e, "ls")), "");
}

#[test]
fn killing_the_daemon_mid_command_leaves_the_fork_as_it_was() {
    let Some(e) = env() else { return };
    sh(&e, "echo base > base.txt");
    let before = fork_state(&e);
    let (list, _) = avfs_json(e.home.path(), &["session", "list"]);
    let pid = list["data"][0]["pid"].as_i64().unwrap().to_string();
    let marker = format!("7{}", std::process::id());
    let mut client = common::mount::avfs_command(e.home.path())
        .args(["proxy", "exec", "--session", "s", "--shell"])
        .arg(format!(
            "for i in 1 2 3 4 5; do echo $i > part$i.txt; done; echo changed > base.txt; sleep {marker}"
        ))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    common::wait::until_true("the command to be writing", || {
        !common::wait::processes_running(&marker).is_empty()
    });
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    client.wait().unwrap();
    common::wait::until_true("the command to end with the daemon", || {
        common::wait::processes_running(&marker).is_empty()
    });
    // Nothing of the command reached the fork: it is taken in whole or not at all.
    assert_eq!(fork_state(&e), before);
    ok(e.avfs(&["session", "stop", "s"]));
}

/// The session's socket, for clients that speak to it by hand.
fn socket(e: &ProxyEnv) -> std::path::PathBuf {
    let (list, _) = avfs_json(e.home.path(), &["session", "list"]);
    list["data"][0]["socket"].as_str().unwrap().into()
}

/// One exec request line, as `avfs proxy exec --session` sends it.
fn request(shell: &str) -> Vec<u8> {
    use agentvfs::service::proxy::{CheckpointMode, ExecOptions};
    let options = ExecOptions {
        checkpoint: CheckpointMode::Never,
        ..ExecOptions::default()
    };
    let req = agentvfs::service::session::Request::Exec {
        argv: None,
        shell: Some(shell.into()),
        options: Box::new(options),
        policy: None,
        stream: false,
    };
    let mut line = serde_json::to_vec(&req).unwrap();
    line.push(b'\n');
    line
}

#[test]
fn a_client_that_shuts_down_its_writing_side_still_gets_its_command_run() {
    // Regression: the daemon took a half-closed connection for a client gone, and killed
    // its command.
    use std::io::{BufRead, Write};
    let Some(e) = env() else { return };
    let mut s = std::os::unix::net::UnixStream::connect(socket(&e)).unwrap();
    s.write_all(&request("sleep 0.2; echo done > half.txt; echo ran"))
        .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(&s).read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    let d = &v["envelope"];
    assert_eq!(d["exit_code"], 0, "{v}");
    assert_eq!(stdout(d), "ran\n", "{v}");
    assert_eq!(changes(d), ["added /half.txt"], "{v}");
}

#[test]
fn a_stalled_client_does_not_hold_the_session() {
    // Regression: a client that never finished its request line blocked every other
    // client of the session, and `session stop`, for good.
    use std::io::Write;
    let Some(e) = env() else { return };
    let mut stalled = std::os::unix::net::UnixStream::connect(socket(&e)).unwrap();
    stalled.write_all(b"{\"op\":\"exec\"").unwrap();
    let home = e.home.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(avfs_json(
            &home,
            &["proxy", "exec", "--session", "s", "--shell", "echo served"],
        ));
    });
    // A guard against hanging the test run, not a measure of speed.
    let (v, code) = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the session served nobody else while one client stalled");
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "served\n", "{v}");
    drop(stalled);
    ok(e.avfs(&["session", "stop", "s"]));
}

#[test]
fn dev_starts_fresh_for_every_command() {
    // Regression: /dev was the session's, writable, and shared by its commands: one could
    // leave files there or point /dev/stdout elsewhere for the next.
    let Some(e) = env() else { return };
    ok(e.avfs(&[
        "write",
        "/spoil.sh",
        "echo x > /dev/left\nrm /dev/stdout && ln -s null /dev/stdout\n",
    ]));
    ok(e.avfs(&[
        "write",
        "/look.sh",
        "test -e /dev/left && echo kept\nreadlink /dev/stdout\necho via >/dev/stdout\n",
    ]));
    let d = run(&e, &["--", "sh", "spoil.sh"]);
    assert_eq!(d["exit_code"], 0, "{d}");
    let d = run(&e, &["--", "sh", "look.sh"]);
    assert_eq!(stdout(&d), "/proc/self/fd/1\nvia\n", "{d}");
}
