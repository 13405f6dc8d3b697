//! Sessions (`avfs session start|stop|list`, `proxy exec --session`) and confinement
//! (`--confine` Landlock, `--offline` network namespace), end to end: the real binary, a
//! real vault, a real FUSE mount kept by a real daemon, real `sh`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::mount::{avfs_command, avfs_json, ok, require_fuse};
use common::skip::require_root;
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
    sessions: std::cell::RefCell<Vec<String>>,
}

impl Drop for Env {
    /// Stop every session the test started, so a failing test leaves no daemon or mount.
    fn drop(&mut self) {
        for s in self.sessions.borrow().iter() {
            let _ = self.avfs(&["session", "stop", s]);
        }
    }
}

impl Env {
    fn new() -> Option<Env> {
        if !require_fuse() {
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        let e = Env {
            home,
            sessions: Default::default(),
        };
        ok(e.avfs(&["vault", "create", "w"]));
        ok(e.avfs(&["write", "a.txt", "alpha\n"]));
        ok(e.avfs(&["vault", "fork", "w", "task"]));
        Some(e)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = avfs_command(self.home.path());
        c.args(args);
        c
    }

    fn avfs(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// `avfs --json ARGS`, checked against the schema: the document and the exit code.
    fn json(&self, args: &[&str]) -> (Value, i32) {
        avfs_json(self.home.path(), args)
    }

    fn start(&self, fork: &str, name: &str, extra: &[&str]) -> Value {
        let mut args = vec!["session", "start", fork, "--name", name];
        args.extend_from_slice(extra);
        let (v, code) = self.json(&args);
        assert_eq!(code, 0, "{v}");
        self.sessions.borrow_mut().push(name.to_string());
        v["data"].clone()
    }

    /// `proxy exec --session NAME …`: the envelope and the exit code.
    fn run(&self, session: &str, args: &[&str]) -> (Value, i32) {
        let mut full = vec!["proxy", "exec", "--session", session];
        full.extend_from_slice(args);
        let (v, code) = self.json(&full);
        (v["data"].clone(), code)
    }

    fn ls(&self, fork: &str) -> Vec<String> {
        let (v, code) = self.json(&["--workspace", fork, "ls", "/"]);
        assert_eq!(code, 0, "{v}");
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    }
}

fn changes(e: &Value) -> Vec<(String, String)> {
    e["changes"]
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
fn commands_in_a_session_report_changes_and_roll_back_one_by_one() {
    // The default (as root): the session keeps one sandbox namespace, no host mount.
    one_by_one(&[], "overlay");
    one_by_one(&["--mode", "fuse"], "fuse");
    one_by_one(&["--mode", "copy"], "copy");
}

fn one_by_one(flags: &[&str], mode: &str) {
    let Some(e) = Env::new() else { return };
    let rec = e.start("task", "s", flags);
    assert_eq!(rec["name"], "s");
    assert_eq!(rec["mode"], mode, "{rec}");
    assert!(rec["alive"].as_bool().unwrap());
    let mount = rec["dir"].as_str().map(str::to_string);
    match &mount {
        Some(dir) => assert!(Path::new(dir).join("a.txt").exists(), "{rec}"),
        None => assert_ne!(mode, "fuse", "{rec}"),
    }

    let (one, code) = e.run("s", &["--shell", "echo one > one.txt"]);
    assert_eq!(code, 0, "{one}");
    assert_eq!(one["request"]["session"], "s");
    assert_eq!(one["mode"], mode, "{one}");
    let kind = if mode == "fuse" { "none" } else { "namespace" };
    assert_eq!(one["sandbox"]["kind"], kind, "{one}");
    assert_eq!(changes(&one), vec![("added".into(), "/one.txt".into())]);
    let (two, code) = e.run("s", &["--shell", "echo two > two.txt && rm a.txt"]);
    assert_eq!(code, 0, "{two}");
    assert_eq!(
        changes(&two),
        vec![
            ("deleted".into(), "/a.txt".into()),
            ("added".into(), "/two.txt".into())
        ]
    );
    // Each command is its own op-log entry: roll back only the second.
    let id = two["exec_id"].as_i64().unwrap().to_string();
    assert_ne!(one["exec_id"], two["exec_id"]);
    let (v, code) = e.json(&["--workspace", "task", "rollback", &id]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(e.ls("task"), vec!["a.txt", "one.txt"]);
    // The session sees the rolled-back state, not a stale cache of its own.
    let (ls, code) = e.run("s", &["--", "ls"]);
    assert_eq!(code, 0, "{ls}");
    assert_eq!(ls["stdout"]["text"], "a.txt\none.txt\n");
    // A write from the CLI between commands is seen too, and not attributed to the session.
    ok(e.avfs(&["--workspace", "task", "write", "cli.txt", "from the cli\n"]));
    let (cat, _) = e.run("s", &["--", "cat", "cli.txt"]);
    assert_eq!(cat["stdout"]["text"], "from the cli\n");
    assert!(changes(&cat).is_empty(), "{cat}");
    // The parent vault never sees the fork's session.
    assert_eq!(e.ls("w"), vec!["a.txt"]);

    let (list, _) = e.json(&["session", "list"]);
    assert_eq!(list["data"][0]["name"], "s");
    assert_eq!(list["data"][0]["alive"], true);
    // `avfs mounts` lists the session too: its host mount, or its socket.
    let (mounts, _) = e.json(&["mounts"]);
    let entry = &mounts["data"][0];
    assert_eq!(entry["session"], "s", "{mounts}");
    assert_eq!(entry["workspace"], "task", "{mounts}");
    assert_eq!(entry["alive"], true, "{mounts}");
    let mode = list["data"][0]["mode"].as_str().unwrap();
    assert_eq!(entry["transport"], format!("session-{mode}"), "{mounts}");
    let where_ = mount
        .clone()
        .unwrap_or_else(|| list["data"][0]["socket"].as_str().unwrap().into());
    assert_eq!(entry["dir"], where_.as_str(), "{mounts}");
    let (stop, code) = e.json(&["session", "stop", "s"]);
    assert_eq!(code, 0, "{stop}");
    assert_eq!(stop["data"]["stopped"], true);
    if let Some(mount) = &mount {
        assert!(!is_mounted(mount), "the session's mount is gone");
    }
    assert_eq!(leftover_mounts(&e), Vec::<String>::new());
    let (list, _) = e.json(&["session", "list"]);
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
    let (mounts, _) = e.json(&["mounts"]);
    assert_eq!(mounts["data"], serde_json::json!([]), "{mounts}");
}

/// Mounts anywhere on the host under this test's avfs home (a session's kept namespace
/// must leave none).
fn leftover_mounts(e: &Env) -> Vec<String> {
    let home = e.home.path().to_str().unwrap().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|d| d.starts_with(&home))
        .map(str::to_string)
        .collect()
}

fn is_mounted(dir: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir))
}

#[test]
fn session_errors_are_typed_and_change_nothing() {
    let Some(e) = Env::new() else { return };
    let (v, code) = e.json(&["proxy", "exec", "--session", "nope", "--", "true"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["kind"], "session_not_found");
    let (v, code) = e.json(&["session", "stop", "nope"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["kind"], "session_not_found");
    let (v, code) = e.json(&["session", "start", "no-such-fork"]);
    assert_eq!(v["error"]["kind"], "vault_not_found", "{v}");
    assert_eq!(code, 3);
    let (v, _) = e.json(&["session", "start", "task", "--name", "bad/name"]);
    assert_eq!(v["error"]["kind"], "invalid_name", "{v}");

    e.start("task", "s", &[]);
    let (v, code) = e.json(&["session", "start", "task", "--name", "s"]);
    assert_eq!(v["error"]["kind"], "already_exists", "{v}");
    assert_eq!(code, 4);
    // Errors inside the daemon come back with their own kind.
    let (v, code) = e.json(&[
        "proxy",
        "exec",
        "--session",
        "s",
        "--cwd",
        "/missing",
        "--",
        "true",
    ]);
    assert_eq!(v["error"]["kind"], "path_not_found", "{v}");
    assert_eq!(code, 3);
    // A denied command is an envelope, as without a session.
    let (d, code) = e.run("s", &["--shell", "rm -rf /"]);
    assert_eq!(code, 126, "{d}");
    assert_eq!(d["ran"], false);
    // Read-only runs in a session refuse writes and change nothing.
    let (r, code) = e.run("s", &["--readonly", "--shell", "echo x > x.txt"]);
    assert_ne!(code, 0, "{r}");
    assert!(
        r["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{r}"
    );
    assert!(changes(&r).is_empty());
    // …and the next read-write command can write again.
    let (w, code) = e.run("s", &["--shell", "echo y > y.txt"]);
    assert_eq!(code, 0, "{w}");
    assert_eq!(e.ls("task"), vec!["a.txt", "y.txt"]);
}

#[test]
fn a_killed_daemon_is_cleaned_up_by_stop() {
    killed_daemon(&["--mode", "fuse"]);
    killed_daemon(&["--mode", "overlay"]);
}

fn killed_daemon(flags: &[&str]) {
    let Some(e) = Env::new() else { return };
    let rec = e.start("task", "k", flags);
    let pid = rec["pid"].as_i64().unwrap().to_string();
    let dir = rec["dir"].as_str().map(str::to_string);
    // A command first, so an overlay session has its namespace and layers.
    let (v, code) = e.run("k", &["--shell", "echo x > x.txt && sleep 0.1"]);
    assert_eq!(code, 0, "{v}");
    let holders = children_of(&pid);
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    common::wait::until_true(&format!("session daemon {pid} to die"), || {
        common::wait::process_gone(&pid)
    });
    let (v, code) = e.json(&["proxy", "exec", "--session", "k", "--", "true"]);
    assert_eq!(v["error"]["kind"], "session_not_found", "{v}");
    assert_eq!(code, 3);
    let (list, _) = e.json(&["session", "list"]);
    assert_eq!(list["data"][0]["alive"], false, "{list}");
    let (stop, code) = e.json(&["session", "stop", "k"]);
    assert_eq!(code, 0, "{stop}");
    assert_eq!(stop["data"]["stale"], true);
    if let Some(dir) = &dir {
        assert!(!is_mounted(dir), "the dead daemon's mount is detached");
    }
    // The namespace's holder died with the daemon, and its mounts with it.
    for h in holders {
        common::wait::until_true(&format!("holder {h} to die"), || {
            common::wait::process_gone(&h)
        });
    }
    assert_eq!(leftover_mounts(&e), Vec::<String>::new());
    // Stopping it removed what the dead daemon left in the runtime directory.
    let run = e.home.path().join("run");
    let left: Vec<_> = std::fs::read_dir(&run)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {}: {left:?}", run.display());
    // The name is free again.
    e.start("task", "k", &[]);
}

#[test]
fn a_session_outlives_a_timed_out_command_and_takes_the_client_env() {
    let Some(e) = Env::new() else { return };
    e.start("task", "t", &[]);
    let (v, code) = e.run(
        "t",
        &[
            "--timeout",
            "300ms",
            "--shell",
            "echo started; setsid sleep 100 & sleep 100",
        ],
    );
    assert_eq!(code, 124, "{v}");
    assert_eq!(v["timed_out"], true);
    assert_eq!(v["stdout"]["text"], "started\n");
    // The client's environment reaches the command, minus secrets.
    let out = e
        .cmd(&[
            "--json",
            "proxy",
            "exec",
            "--session",
            "t",
            "--shell",
            "echo \"$GREETING/${API_TOKEN:-withheld}\"",
        ])
        .env("GREETING", "hello")
        .env("API_TOKEN", "s3cret")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data"]["stdout"]["text"], "hello/withheld\n", "{v}");
    assert_eq!(out.status.code(), Some(0));
}

/// The pids of `pid`'s children.
fn children_of(pid: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// A script the policy cannot see into, trying to write outside the workspace.
fn escape_script(e: &Env, fork: &str, outside: &Path) {
    let script = format!(
        "echo inside > inside.txt\n\
         echo escaped > {} 2>/dev/null && echo WROTE-OUTSIDE || echo blocked\n\
         echo t > \"$TMPDIR/t\" && echo tmp-ok\n\
         echo quiet > /dev/null && echo devnull-ok\n",
        outside.display()
    );
    let mut w = e
        .cmd(&["--workspace", fork, "write", "escape.sh"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    w.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(w.wait().unwrap().success());
}

#[test]
fn landlock_keeps_writes_inside_the_workspace() {
    let Some(e) = Env::new() else { return };
    let outside = e.home.path().join("outside.txt");
    escape_script(&e, "task", &outside);
    // A command run on its own gets a sandbox, where the host path does not exist.
    let (v, code) = e.json(&[
        "--workspace",
        "task",
        "proxy",
        "exec",
        "--",
        "sh",
        "escape.sh",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["sandbox"]["kind"], "namespace", "{v}");
    assert_eq!(
        v["data"]["stdout"]["text"], "blocked\ntmp-ok\ndevnull-ok\n",
        "{v}"
    );
    assert!(!outside.exists());
    // Inside it, Landlock still narrows what is writable: /run is the sandbox's own, and
    // only an unconfined command writes there.
    let probe = "echo r > /run/probe 2>/dev/null && echo run-ok || echo run-blocked\n";
    let (v, code) = e.json(&["--workspace", "task", "write", "probe.sh", probe]);
    assert_eq!(code, 0, "{v}");
    for (flag, want) in [(None, "run-ok\n"), (Some("--confine"), "run-blocked\n")] {
        let mut args = vec!["--workspace", "task", "proxy", "exec"];
        args.extend(flag);
        args.extend(["--", "sh", "probe.sh"]);
        let (v, code) = e.json(&args);
        assert_eq!(
            (code, v["data"]["stdout"]["text"].as_str()),
            (0, Some(want)),
            "{v}"
        );
    }
    // A sandboxed session's commands cannot reach the host path either.
    e.start("task", "boxed", &[]);
    let (v, code) = e.run("boxed", &["--", "sh", "escape.sh"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["sandbox"]["kind"], "namespace", "{v}");
    assert_eq!(v["stdout"]["text"], "blocked\ntmp-ok\ndevnull-ok\n", "{v}");
    assert!(!outside.exists());
    // A fuse session's commands run in its mount on the host, with no namespace:
    // unconfined, the script can write to the host; that is what confinement is for.
    e.start("task", "open", &["--mode", "fuse"]);
    let (v, code) = e.run("open", &["--", "sh", "escape.sh"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["sandbox"]["kind"], "none", "{v}");
    assert!(
        v["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("WROTE-OUTSIDE"),
        "{v}"
    );
    std::fs::remove_file(&outside).unwrap();

    // Per call and in a session alike, --confine stops it.
    let (v, code) = e.json(&[
        "--workspace",
        "task",
        "proxy",
        "exec",
        "--confine",
        "--",
        "sh",
        "escape.sh",
    ]);
    let per_call = v["data"].clone();
    e.start("task", "c", &["--mode", "fuse"]);
    let (in_session, code2) = e.run("c", &["--confine", "--", "sh", "escape.sh"]);
    for (env, code) in [(per_call, code), (in_session, code2)] {
        assert_eq!(code, 0, "{env}");
        assert_eq!(env["confinement"]["landlock"], true);
        assert_eq!(
            env["stdout"]["text"], "blocked\ntmp-ok\ndevnull-ok\n",
            "{env}"
        );
        assert!(!outside.exists(), "Landlock let the command write outside");
    }
    assert!(e.ls("task").contains(&"inside.txt".to_string()));
}

#[test]
fn a_policy_can_confine_every_command() {
    let Some(e) = Env::new() else { return };
    let outside = e.home.path().join("outside.txt");
    escape_script(&e, "task", &outside);
    let policy = e.home.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[confinement]\nlandlock = true\noffline = \"unless_networked\"\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let (v, code) = e.json(&[
        "--workspace",
        "task",
        "proxy",
        "exec",
        "--policy",
        p,
        "--",
        "sh",
        "escape.sh",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["confinement"]["landlock"], true);
    assert_eq!(v["data"]["confinement"]["offline"], true);
    assert!(!outside.exists());
    // A session started with the policy applies it to its commands.
    e.start("task", "p", &["--policy", p]);
    let (v, code) = e.run("p", &["--", "sh", "escape.sh"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["confinement"]["landlock"], true, "{v}");
    assert!(!outside.exists());
    // A call's own --policy overrides the session's for that command: secrets it does not
    // list are readable, env it allows is passed, and the next call is back to the default
    // (a secret is listed but refused).
    ok(e.avfs(&["--workspace", "task", "write", ".env", "KEY=1\n"]));
    e.start("task", "d", &[]);
    let (v, _) = e.run("d", &["--shell", "cat .env 2>&1; ls -A"]);
    assert_eq!(
        v["stdout"]["text"], "cat: .env: Permission denied\n.env\na.txt\nescape.sh\ninside.txt\n",
        "{v}"
    );
    let open = e.home.path().join("open.toml");
    std::fs::write(
        &open,
        "version = 1\n[secrets]\npaths = []\nenv_allow = [\"API_TOKEN\"]\n",
    )
    .unwrap();
    let out = e
        .cmd(&[
            "--json",
            "proxy",
            "exec",
            "--session",
            "d",
            "--policy",
            open.to_str().unwrap(),
            "--shell",
            "cat .env; ls -A; echo \"$API_TOKEN\"",
        ])
        .env("API_TOKEN", "t0ken")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["data"]["stdout"]["text"], "KEY=1\n.env\na.txt\nescape.sh\ninside.txt\nt0ken\n",
        "{v}"
    );
    let (v, _) = e.run("d", &["--shell", "cat .env 2>&1; true"]);
    assert_eq!(v["stdout"]["text"], "cat: .env: Permission denied\n", "{v}");
    let (v, code) = e.json(&[
        "proxy",
        "exec",
        "--session",
        "d",
        "--policy",
        "/no/such.toml",
        "--",
        "true",
    ]);
    assert_eq!(v["error"]["kind"], "io_error", "{v}");
    assert_eq!(code, 8);
}

#[test]
fn offline_commands_see_only_loopback() {
    let Some(e) = Env::new() else { return };
    if !rustix::process::geteuid().is_root() {
        // Without root there is no network namespace, and --offline says so.
        let (v, _) = e.json(&[
            "--workspace",
            "task",
            "proxy",
            "exec",
            "--offline",
            "--",
            "true",
        ]);
        assert_eq!(v["error"]["kind"], "confinement_unavailable", "{v}");
    }
    if !require_root() {
        return;
    }
    // Interfaces, read the way `ip link` would, by a script the policy cannot see into.
    ok(e.avfs(&[
        "--workspace",
        "task",
        "write",
        "ifaces.sh",
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '\n",
    ]));
    let (v, code) = e.json(&[
        "--workspace",
        "task",
        "proxy",
        "exec",
        "--offline",
        "--",
        "sh",
        "ifaces.sh",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["confinement"]["offline"], true);
    assert_eq!(v["data"]["stdout"]["text"], "lo\n", "{v}");
    // Loopback is up: a local server and client still talk.
    ok(e.avfs(&[
        "--workspace",
        "task",
        "write",
        "lo.py",
        "import socket\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n\
         c = socket.create_connection(s.getsockname()); a, _ = s.accept()\n\
         c.sendall(b'ping'); print(a.recv(4).decode())\n",
    ]));
    e.start("task", "o", &[]);
    let (v, code) = e.run("o", &["--offline", "--", "python3", "lo.py"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["stdout"]["text"], "ping\n", "{v}");
    // Without --offline the host's interfaces are there.
    let (v, _) = e.run("o", &["--", "sh", "ifaces.sh"]);
    assert_eq!(v["confinement"]["offline"], false);
    assert_ne!(v["stdout"]["text"], "lo\n", "{v}");
}
