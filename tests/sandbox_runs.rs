//! Runs in the execution sandbox, through the real binary: quotas fail at the write that
//! crosses them, concurrent commands in one fork each report and roll back exactly their
//! own changes, and the modes that cannot be had are typed errors.

mod common;

use common::mount::{ProxyEnv, avfs_command, ok};
use serde_json::Value;

fn env() -> Option<ProxyEnv> {
    if !common::skip::require_sandbox() {
        return None;
    }
    ProxyEnv::new()
}

fn exec(e: &ProxyEnv, args: &[&str]) -> (Value, i32) {
    let mut full = vec!["--json", "proxy", "exec"];
    full.extend_from_slice(args);
    let out = avfs_command(e.home.path()).args(&full).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{full:?}: not JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out.status.code().unwrap_or(-1))
}

#[test]
fn an_overlay_write_past_the_quota_fails_at_that_write() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["quota", "set", "--max-size-mb", "2", "--max-files", "20"]));
    ok(e.avfs(&["write", "seed.txt", "hello"]));
    // The script stops at the first write that fails, and says which.
    ok(e.avfs(&[
        "write",
        "fill.sh",
        "head -c 1500000 /dev/zero > a.bin || echo a-failed\n\
         head -c 1000000 /dev/zero > b.bin 2>/dev/null || echo b-failed\n\
         i=0; while [ $i -lt 40 ]; do i=$((i+1)); touch f$i 2>/dev/null || { echo files-stop; break; }; done\n",
    ]));
    let (v, code) = exec(&e, &["--mode", "overlay", "--", "sh", "fill.sh"]);
    assert_eq!(code, 0, "{v}");
    let d = &v["data"];
    assert_eq!(d["stdout"]["text"], "b-failed\nfiles-stop\n", "{v}");
    // What was written up to the limit is in the fork, and the fork is within its quota.
    let stats = ok(e.avfs(&["--json", "stats"]));
    let stats: Value = serde_json::from_str(&stats).unwrap();
    let files = stats["data"]["live_files"].as_u64().unwrap();
    let bytes = stats["data"]["logical_bytes"].as_u64().unwrap();
    assert!(files <= 20, "{stats}");
    assert!(bytes <= 2 << 20, "{stats}");
    assert_eq!(ok(e.avfs(&["cat", "seed.txt"])), "hello");
    assert!(ok(e.avfs(&["ls", "/"])).contains("a.bin"));
}

#[test]
fn a_quota_with_one_limit_leaves_the_other_unbounded() {
    // Regression: "no limit" was passed to tmpfs as a number past what it takes, so any
    // quota with only one of its limits set made every overlay run `sandbox_failed`.
    let Some(e) = env() else { return };
    for (flag, value, script, want) in [
        (
            "--max-size-mb",
            "1",
            "head -c 2000000 /dev/zero > big || echo size-stop; touch a b c",
            "size-stop\n",
        ),
        (
            "--max-files",
            "3",
            "head -c 3000000 /dev/zero > big && touch f1 f2 f3 f4 2>/dev/null || echo files-stop",
            "files-stop\n",
        ),
    ] {
        ok(e.avfs(&[
            "quota",
            "set",
            "--max-size-mb",
            "none",
            "--max-files",
            "none",
        ]));
        ok(e.avfs(&["quota", "set", flag, value]));
        let (v, code) = exec(&e, &["--mode", "overlay", "--shell", script]);
        assert_eq!(code, 0, "{flag}: {v}");
        assert_eq!(v["data"]["stdout"]["text"], want, "{flag}: {v}");
        ok(e.avfs(&["rm", "-r", "/big"]));
        for f in ["a", "b", "c"] {
            let _ = e.avfs(&["rm", f]);
        }
    }
}

#[test]
fn a_full_quota_still_runs_the_command_and_fails_its_first_new_file() {
    // Regression: with no inode left for the overlay's own work files, its mount failed
    // (ENOSPC) and the run was `sandbox_failed` instead of the command's write failing.
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "a.txt", "kept"]));
    ok(e.avfs(&["quota", "set", "--max-files", "1"]));
    let (v, code) = exec(
        &e,
        &[
            "--mode",
            "overlay",
            "--shell",
            "cat a.txt; touch new 2>/dev/null || echo full",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "keptfull\n", "{v}");
    assert_eq!(v["data"]["changes"], serde_json::json!([]), "{v}");
}

#[test]
fn concurrent_commands_in_one_fork_report_and_roll_back_only_their_own() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "keep.txt", "keep"]));
    for w in 0..4 {
        let script: String = (0..20)
            .map(|i| format!("echo {w}-{i} > w{w}-{i}.txt; sleep 0.01\n"))
            .collect();
        ok(e.avfs(&["write", &format!("job{w}.sh"), &script]));
    }
    // All four start before any is waited for, and each runs long enough (20 sleeps) to
    // overlap the others.
    let children: Vec<_> = (0..4)
        .map(|w| {
            avfs_command(e.home.path())
                .args(["--json", "proxy", "exec", "--mode", "overlay", "--"])
                .args(["sh", &format!("job{w}.sh")])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = Vec::new();
    for (w, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let d = &v["data"];
        assert_eq!(d["exit_code"], 0, "{v}");
        let mut paths: Vec<String> = d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap().to_string())
            .collect();
        paths.sort();
        let mut want: Vec<String> = (0..20).map(|i| format!("/w{w}-{i}.txt")).collect();
        want.sort();
        assert_eq!(paths, want, "job {w} reported other changes than its own");
        ids.push(d["exec_id"].as_i64().unwrap());
    }
    // Rolling back one removes its 20 files and nothing else.
    ok(e.avfs(&["rollback", &ids[1].to_string()]));
    let ls = ok(e.avfs(&["ls", "/"]));
    for w in 0..4 {
        for i in 0..20 {
            let name = format!("w{w}-{i}.txt");
            assert_eq!(
                ls.contains(&name),
                w != 1,
                "{name} after rolling back job 1:\n{ls}"
            );
        }
    }
    assert!(ls.contains("keep.txt"));
}

/// Two commands in one fork that make the same new directory each keep their files in it:
/// overlayfs marks a directory made where there was none opaque, which replaced nothing
/// (the second to finish used to delete the first one's files there). A command that does
/// replace a directory deletes only what it started with, at every depth below it: what
/// others added since stays.
#[test]
fn commands_that_make_the_same_directory_in_one_fork_keep_each_others_files() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "-p", "old/x.txt", "x"]));
    ok(e.avfs(&["write", "old/y.txt", "y"]));
    ok(e.avfs(&["write", "-p", "deep/b/c/gone", "g"]));
    ok(e.avfs(&["write", "deep/b/old", "o"]));
    ok(e.avfs(&["write", "deep/top", "t"]));
    let marker = format!("6{}", std::process::id());
    let slow = avfs_command(e.home.path())
        .args(["--json", "proxy", "exec", "--mode", "overlay", "--shell"])
        .arg(format!(
            "sleep {marker}; mkdir -p nd && echo b > nd/b; rm -rf old && mkdir old && echo z > old/z; \
             rm -rf deep && mkdir -p deep/b && echo n > deep/b/new"
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The slow command has started (from a fork without `nd`) before the fast one runs.
    common::wait::until_true("the slow command to run", || !sleeping(&marker).is_empty());
    let (v, code) = exec(
        &e,
        &[
            "--mode",
            "overlay",
            "--shell",
            "mkdir -p nd && echo a > nd/a; echo n > old/new; echo f > deep/b/fast",
        ],
    );
    assert_eq!((code, &v["data"]["exit_code"]), (0, &Value::from(0)), "{v}");
    for p in sleeping(&marker) {
        let _ = std::process::Command::new("kill").arg(&p).status();
    }
    let out = slow.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data"]["exit_code"], 0, "{v}");
    let ls = |dir: &str| -> Vec<String> {
        let out = e.avfs(&["--json", "ls", dir]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut names: Vec<String> = v["data"]
            .as_array()
            .unwrap_or_else(|| panic!("ls {dir}: {v}"))
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(ls("/nd"), ["a", "b"]);
    assert_eq!(ls("/old"), ["new", "z"]);
    // Overlayfs marks only `deep` replaced; `deep/b` below it is the command's alone.
    assert_eq!(ls("/deep"), ["b"]);
    assert_eq!(ls("/deep/b"), ["fast", "new"]);
}

#[test]
fn modes_that_cannot_be_had_are_typed_errors_and_change_nothing() {
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "a.txt", "a"]));
    let before = ok(e.avfs(&["op", "log"]));
    // A bad mode, and a bad workspace path.
    for args in [
        vec!["--mode", "fastest", "--", "true"],
        vec!["--workspace-path", "relative", "--", "true"],
        vec!["--workspace-path", "/proc/x", "--", "true"],
        vec!["--workspace-path", "/a/../b", "--", "true"],
    ] {
        let (v, code) = exec(&e, &args);
        assert_ne!(code, 0, "{args:?}: {v}");
        assert_eq!(v["ok"], false, "{args:?}: {v}");
        assert!(
            ["invalid_argument", "usage"].contains(&v["error"]["kind"].as_str().unwrap()),
            "{args:?}: {v}"
        );
    }
    // An overlay session's commands run in its namespace: an explicit fuse run there is
    // refused (it needs the mount a fuse session keeps), and so is an overlay run in a
    // fuse session.
    for (session, asks) in [("overlay", "fuse"), ("fuse", "overlay")] {
        ok(e.avfs(&["session", "start", "w", "--name", "s", "--mode", session]));
        let (v, code) = exec(&e, &["--session", "s", "--mode", asks, "--", "touch", "x"]);
        ok(e.avfs(&["session", "stop", "s"]));
        assert_ne!(code, 0, "{session} session, --mode {asks}: {v}");
        let kind = v["error"]["kind"].as_str().unwrap();
        assert!(
            ["invalid_argument", "sandbox_unavailable"].contains(&kind),
            "{session} session, --mode {asks}: {v}"
        );
    }
    assert_eq!(
        ok(e.avfs(&["op", "log"])),
        before,
        "a refused run changed the fork"
    );
    // The workspace can sit at the project's own path.
    let (v, code) = exec(
        &e,
        &[
            "--workspace-path",
            "/home/dev/project",
            "--",
            "sh",
            "-c",
            "pwd; cat a.txt",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["data"]["stdout"]["text"], "/home/dev/project\na", "{v}");
    assert_eq!(v["data"]["sandbox"]["workspace_path"], "/home/dev/project");
}

/// A user who is not root gets the same sandbox through a user namespace. Without access to
/// /dev/fuse (0600 here), `auto` picks copy mode, and an explicit overlay says why not.
#[test]
fn a_user_who_is_not_root_gets_the_sandbox_through_a_user_namespace() {
    if !common::skip::require_root() || !common::skip::require_sandbox() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let avfs_home = home.path().join("avfs");
    std::fs::create_dir(&avfs_home).unwrap();
    for p in [home.path(), &avfs_home] {
        std::os::unix::fs::chown(p, Some(1000), Some(1000)).unwrap();
    }
    let canary = tempfile::tempdir().unwrap();
    std::fs::write(canary.path().join("secret.txt"), "CANARY").unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid", "1000", "--regid", "1000", "--clear-groups"])
            .arg(common::BIN)
            .args(args)
            .env("AVFS_HOME", &avfs_home)
            .env("HOME", home.path())
            .env("PROBE", canary.path().join("secret.txt"))
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT")
            .output()
            .expect("setpriv (util-linux) is required");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (text, out.status.code())
    };
    assert_eq!(run(&["vault", "create", "u"]).1, Some(0));
    let (out, code) = run(&[
        "--json",
        "proxy",
        "exec",
        "--",
        "python3",
        "-c",
        "import os\n\
         print(os.getuid())\n\
         try: print(open(os.environ['PROBE']).read())\n\
         except OSError as e: print('ERR', e.errno)\n\
         open('made.txt', 'w').write('x')",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, Some(0), "{v}");
    let d = &v["data"];
    assert_eq!(d["sandbox"]["kind"], "namespace", "{v}");
    let fuse_open = std::fs::metadata("/dev/fuse").is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o006 == 0o006
    });
    assert_eq!(d["mode"], if fuse_open { "overlay" } else { "copy" }, "{v}");
    assert_eq!(d["stdout"]["text"], "1000\nERR 2\n", "{v}");
    assert_eq!(d["changes"][0]["path"], "/made.txt", "{v}");
    if !fuse_open {
        let (out, code) = run(&["--json", "proxy", "exec", "--mode", "overlay", "--", "true"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(code, Some(1), "{v}");
        assert_eq!(v["error"]["kind"], "sandbox_unavailable", "{v}");
    }
}

#[test]
fn a_fuse_mode_command_runs_alone_and_others_get_workspace_busy() {
    // A fuse-mode command's change list is the fork's difference across its run, so a
    // command ingested meanwhile would be listed as its own (issue 16: 4 concurrent
    // execs each listed 57-80 changes). It runs alone: while it runs, another command
    // in the fork is refused with a typed error and changes nothing, and the other way
    // round.
    let Some(e) = env() else { return };
    if !common::skip::require_fuse() {
        return;
    }
    let marker = format!("5{}", std::process::id());
    for (first, second) in [("fuse", "overlay"), ("overlay", "fuse"), ("fuse", "fuse")] {
        let mut running = avfs_command(e.home.path())
            .args(["proxy", "exec", "--mode", first, "--checkpoint", "never"])
            .args([
                "--shell",
                &format!("echo mine > {first}.txt; sleep {marker}"),
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait::until_true("the first command to run", || !sleeping(&marker).is_empty());
        let (v, code) = exec(&e, &["--mode", second, "--shell", "echo late > late.txt"]);
        assert_eq!(code, 4, "{first} then {second}: {v}");
        assert_eq!(v["error"]["kind"], "workspace_busy", "{v}");
        assert_eq!(v["error"]["details"]["workspace"], "main", "{v}");
        for p in sleeping(&marker) {
            let _ = std::process::Command::new("kill").arg(&p).status();
        }
        running.wait().unwrap();
        let (v, _) = avfs_json_ls(&e);
        assert!(!v.contains("late.txt"), "{first} then {second}: {v}");
    }
    // Commands in other modes run side by side (each on its own layer).
    let (v, code) = exec(
        &e,
        &["--mode", "overlay", "--shell", "echo late > late.txt"],
    );
    assert_eq!(code, 0, "{v}");
}

/// The `sleep MARKER` processes (the proxied commands themselves, not the avfs
/// processes whose arguments name them).
fn sleeping(marker: &str) -> Vec<String> {
    common::wait::processes_running(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes())
        })
        .collect()
}

fn avfs_json_ls(e: &ProxyEnv) -> (String, i32) {
    let out = e.avfs(&["ls", "/"]);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}
