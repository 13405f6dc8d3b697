//! Ignore rules across history, through the real binary: `diff`, `merge`, `apply`,
//! `export --changes` and the proxy's envelope leave out what `.gitignore` (any directory,
//! with `!` rules), `.avfsignore`, `.git/info/exclude` and `.git/` itself ignore, count it
//! per top-level name, and list it with `--include-ignored`. The ignored files stay in the
//! fork and rollback covers them. Also where `apply` starts from: the import's state.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use common::history::{Env, changed_paths};
use common::skip::require_sandbox;
use serde_json::{Value, json};

fn paths(data: &Value) -> BTreeSet<String> {
    changed_paths(data).into_iter().collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A host project with ignore rules of every kind, imported into vault `p` and forked as
/// `task`; the host directory.
fn project(env: &Env) -> std::path::PathBuf {
    let host = env.host("proj");
    for (p, c) in [
        (".gitignore", ".venv/\n*.pyc\nbuild/\n"),
        ("src/.gitignore", "gen_*.py\n!gen_keep.py\n"),
        (".avfsignore", "scratch/\n"),
        (".git/info/exclude", "*.local\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        ("src/app.py", "print(1)\n"),
        (".env", "TOKEN=keep-me\n"),
    ] {
        let path = host.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, c).unwrap();
    }
    env.create("p");
    env.data("p", &["import", host.to_str().unwrap()]);
    env.fork("p", "task");
    host
}

/// In fork `task`: one change to list and one of each ignored kind.
fn change_everything(env: &Env) {
    for (path, text) in [
        ("src/app.py", "print(2)\n"),
        (".venv/lib/site.py", "x\n"),
        (".venv/bin/python", "y\n"),
        ("src/mod.pyc", "bytecode\n"),
        ("src/gen_a.py", "generated\n"),
        ("src/gen_keep.py", "kept on purpose\n"),
        ("scratch/notes", "n\n"),
        ("config.local", "l\n"),
        (".git/index", "index\n"),
    ] {
        env.write("task", path, text.as_bytes());
    }
}

const LISTED: &[&str] = &["/src/app.py", "/src/gen_keep.py"];

fn expected_ignored() -> Value {
    json!({
        ".git": 1,
        ".venv": 5,
        "config.local": 1,
        "scratch": 2,
        "src": 2,
    })
}

#[test]
fn diff_merge_and_apply_leave_ignored_changes_out_and_count_them() {
    let env = Env::new();
    let host = project(&env);
    change_everything(&env);

    let d = env.data("task", &["diff", "@base"]);
    assert_eq!(paths(&d), set(LISTED), "{d}");
    assert_eq!(d["ignored"], expected_ignored(), "{d}");
    assert_eq!(d["summary"]["added"], 1);
    let all = env.data("task", &["diff", "@base", "--include-ignored"]);
    assert!(paths(&all).contains("/.venv/lib/site.py"), "{all}");
    assert!(paths(&all).contains("/.git/index"), "{all}");
    assert_eq!(all["ignored"], json!({}));
    // The patch is of the listed files only.
    let patch = env.ok("task", &["diff", "@base", "--patch"]);
    assert!(patch.contains("+print(2)"), "{patch}");
    assert!(!patch.contains("site.py"), "{patch}");

    // apply: the listed changes only; `.env` and the host's own files stay as they were.
    let dry = env.data("task", &["apply", "--dry-run"]);
    assert_eq!(dry["written"], json!(LISTED), "{dry}");
    assert_eq!(dry["ignored"], expected_ignored());
    assert_eq!(dry["host"], json!(fs::canonicalize(&host).unwrap()));
    let applied = env.data("task", &["apply"]);
    assert_eq!(applied["written"], json!(LISTED), "{applied}");
    assert_eq!(
        fs::read_to_string(host.join("src/app.py")).unwrap(),
        "print(2)\n"
    );
    assert!(!host.join(".venv").exists());
    assert!(!host.join(".git/index").exists());
    assert_eq!(
        fs::read_to_string(host.join(".env")).unwrap(),
        "TOKEN=keep-me\n"
    );

    // export --changes is apply below a path (before the merge moves the fork's base).
    let out = env.host("out");
    fs::create_dir_all(&out).unwrap();
    for name in ["app.py", ".gitignore"] {
        fs::copy(host.join("src").join(name), out.join(name)).unwrap();
    }
    fs::write(out.join("app.py"), "print(1)\n").unwrap();
    let e = env.data(
        "task",
        &[
            "export",
            "--changes",
            "--from",
            "@base",
            "/src",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(
        e["written"],
        json!(["/src/app.py", "/src/gen_keep.py"]),
        "{e}"
    );
    assert_eq!(e["ignored"], json!({"src": 2}));

    // merge: main gets the listed changes; the ignored ones stay in the fork.
    let m = env.data("p", &["merge", "task"]);
    assert_eq!(paths(&m), set(LISTED), "{m}");
    assert_eq!(m["ignored"], expected_ignored());
    env.fail(
        Some("p"),
        &["cat", ".venv/lib/site.py"],
        3,
        "path_not_found",
    );
    assert_eq!(env.ok("task", &["cat", ".venv/lib/site.py"]), "x\n");
    assert_eq!(
        env.ok("p", &["cat", "src/gen_keep.py"]),
        "kept on purpose\n"
    );

    // What was left out is still the fork's own change: a second merge brings nothing
    // listed, and one with --include-ignored brings exactly what was left.
    let d = env.data("task", &["diff", "@base"]);
    assert_eq!(paths(&d), set(&[]), "{d}");
    assert_eq!(d["ignored"], expected_ignored(), "{d}");
    let again = env.data("p", &["merge", "task"]);
    assert_eq!(paths(&again), set(&[]), "{again}");
    let rest = env.data("p", &["merge", "task", "--include-ignored"]);
    let left: BTreeSet<String> = paths(&rest);
    assert!(left.contains("/.venv/lib/site.py"), "{rest}");
    assert!(left.contains("/scratch/notes"), "{rest}");
    assert!(!left.contains("/src/app.py"), "{rest}");
    assert_eq!(env.ok("p", &["cat", ".venv/lib/site.py"]), "x\n");
    let d = env.data("task", &["diff", "@base", "--include-ignored"]);
    assert_eq!(paths(&d), set(&[]), "{d}");
}

#[test]
fn merge_with_include_ignored_carries_everything_and_a_rule_change_is_itself_listed() {
    let env = Env::new();
    project(&env);
    change_everything(&env);
    let m = env.data("p", &["merge", "task", "--include-ignored"]);
    assert_eq!(m["ignored"], json!({}));
    assert_eq!(env.ok("p", &["cat", ".venv/lib/site.py"]), "x\n");

    // Un-ignoring by editing the rules lists the files again, and the edit itself.
    env.write("task", ".gitignore", b"*.pyc\nbuild/\n");
    env.write("task", ".venv/lib/more.py", b"z\n");
    let d = env.data("task", &["diff", "@base"]);
    assert!(paths(&d).contains("/.gitignore"), "{d}");
    assert!(paths(&d).contains("/.venv/lib/more.py"), "{d}");
    // A deletion is judged by the rules of the state the file was in.
    env.ok("task", &["rm", "src/mod.pyc"]);
    let d = env.data("task", &["diff", "@base"]);
    assert!(!paths(&d).contains("/src/mod.pyc"), "{d}");
}

#[test]
fn anchored_and_directory_only_rules_match_as_in_git() {
    let env = Env::new();
    project(&env);
    env.write("task", ".gitignore", b"/top.txt\nlogs/\ndeep/**/tmp\n");
    for path in [
        "top.txt",
        "sub/top.txt",
        "logs/a",
        "sub/logs",
        "deep/x/y/tmp",
        "deep/x/y/tmp.keep",
    ] {
        env.write("task", path, b"1\n");
    }
    let d = env.data("task", &["diff", "@base"]);
    let listed = paths(&d);
    for shown in [
        "/.gitignore",
        "/sub/top.txt",
        "/sub/logs",
        "/deep/x/y/tmp.keep",
    ] {
        assert!(listed.contains(shown), "{shown} should be listed: {d}");
    }
    for hidden in ["/top.txt", "/logs/a", "/deep/x/y/tmp"] {
        assert!(!listed.contains(hidden), "{hidden} should be ignored: {d}");
    }
    // The directories made on the way to a listed file are listed too.
    assert!(listed.contains("/deep/x/y"), "{d}");
}

#[test]
fn apply_starts_from_the_import_and_explains_when_there_is_nothing_to_do() {
    let env = Env::new();
    let host = project(&env);
    // Straight after the import: nothing to do, and it says why.
    for ws in ["p", "task"] {
        let r = env.data(ws, &["apply", "--dry-run"]);
        assert_eq!(r["written"], json!([]), "{r}");
        assert!(
            r["note"]
                .as_str()
                .unwrap()
                .starts_with("nothing changed since import of"),
            "{r}"
        );
    }
    // Only ignored changes: the note says so and how to apply them.
    env.write("task", ".venv/x", b"v\n");
    let r = env.data("task", &["apply", "--dry-run"]);
    let note = r["note"].as_str().unwrap();
    assert!(
        note.contains("ignored") && note.contains("--include-ignored"),
        "{r}"
    );
    let r = env.data("task", &["apply", "--dry-run", "--include-ignored"]);
    assert_eq!(r["written"], json!(["/.venv", "/.venv/x"]), "{r}");

    // A merged main applies without false conflicts (its @base is the empty tree).
    env.write("task", "src/app.py", b"print(3)\n");
    env.data("p", &["merge", "task"]);
    let r = env.data("p", &["apply"]);
    assert_eq!(r["written"], json!(["/src/app.py"]), "{r}");
    assert_eq!(r["forced"], json!([]));
    // The apply is recorded: the next one starts from what the host now holds.
    env.write("p", "src/app.py", b"print(4)\n");
    let r = env.data("p", &["apply"]);
    assert_eq!(r["written"], json!(["/src/app.py"]), "{r}");
    assert!(r["from"].as_str().unwrap().starts_with("apply of"), "{r}");
    let r = env.data("p", &["apply", "--dry-run"]);
    assert_eq!(
        r["note"],
        json!(format!(
            "nothing changed since {}",
            r["from"].as_str().unwrap()
        ))
    );
    assert_eq!(
        fs::read_to_string(host.join("src/app.py")).unwrap(),
        "print(4)\n"
    );
    // A host edit since is still a conflict, and changes nothing.
    fs::write(host.join("src/app.py"), "print('host')\n").unwrap();
    env.write("p", "src/app.py", b"print(5)\n");
    env.fail(Some("p"), &["apply"], 4, "apply_conflict");
    assert_eq!(
        fs::read_to_string(host.join("src/app.py")).unwrap(),
        "print('host')\n"
    );
}

#[test]
fn apply_without_an_origin_or_a_directory_is_a_typed_error_and_gc_keeps_the_origin() {
    let env = Env::new();
    env.create("bare");
    env.write("bare", "a.txt", b"a\n");
    let e = env.fail(Some("bare"), &["apply"], 5, "invalid_argument");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("name the directory"),
        "{e}"
    );

    // The import's state survives pruning every checkpoint and operation, and gc, when
    // nothing else refers to it any more.
    let host = env.host("solo");
    fs::create_dir_all(host.join("src")).unwrap();
    fs::write(host.join("src/app.py"), "print(1)\n").unwrap();
    fs::write(host.join("README"), "r\n").unwrap();
    env.create("solo");
    env.data("solo", &["import", host.to_str().unwrap()]);
    env.write("solo", "src/app.py", b"print(2)\n");
    env.ok("solo", &["rm", "README"]);
    env.data("solo", &["checkpoint", "save"]);
    // (prune collects garbage itself)
    env.data("solo", &["prune", "--keep-last", "0"]);
    env.data("solo", &["vault", "check"]);
    let r = env.data("solo", &["apply", "--dry-run"]);
    assert_eq!(r["written"], json!(["/src/app.py"]), "{r}");
    assert_eq!(r["deleted"], json!(["/README"]), "{r}");
    assert_eq!(r["forced"], json!([]));
    assert!(Path::new(&host).join("README").exists());
}

#[test]
fn the_envelope_counts_ignored_changes_and_rollback_covers_them() {
    if !require_sandbox() {
        return;
    }
    let env = Env::new();
    project(&env);
    let script = "mkdir -p .venv/lib && for i in 1 2 3; do echo $i > .venv/lib/f$i; done; \
                  echo x > src/a.pyc; echo 'print(2)' > src/app.py";
    let v = env.data("task", &["proxy", "exec", "--shell", script]);
    assert_eq!(paths(&v), set(&["/src/app.py"]), "{v}");
    assert_eq!(v["ignored"], json!({".venv": 5, "src": 1}), "{v}");
    assert_eq!(v["summary"]["modified"], 1);
    // Rollback takes its ignored files too.
    env.data("task", &["rollback", &v["exec_id"].to_string()]);
    env.fail(Some("task"), &["cat", ".venv/lib/f2"], 3, "path_not_found");
    env.fail(Some("task"), &["cat", "src/a.pyc"], 3, "path_not_found");
    let all = env.data(
        "task",
        &[
            "proxy",
            "exec",
            "--include-ignored",
            "--shell",
            "echo y > build.pyc",
        ],
    );
    assert_eq!(paths(&all), set(&["/build.pyc"]), "{all}");
    assert_eq!(all["ignored"], json!({}));
    assert_eq!(env.ok("task", &["cat", "src/app.py"]), "print(1)\n");
}

#[test]
fn git_status_is_classified_by_what_it_writes_and_its_index_refresh_is_not_listed() {
    if !require_sandbox() || !common::skip::require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = env.host("repo");
    fs::create_dir_all(&repo).unwrap();
    fs::write(repo.join("a.txt"), "a\n").unwrap();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&repo)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "one"]);
    env.create("g");
    env.data("g", &["import", repo.to_str().unwrap()]);
    let v = env.data(
        "g",
        &["proxy", "exec", "--", "git", "status", "--porcelain"],
    );
    assert_eq!(v["decision"]["action"], "checkpoint_then_run", "{v}");
    assert_eq!(v["decision"]["categories"], json!(["mutating"]), "{v}");
    assert!(v["checkpoint"].is_string(), "{v}");
    assert_eq!(v["stdout"]["text"], "", "git works in the fork: {v}");
    assert_eq!(v["changes"], json!([]), "{v}");
    let ro = env.data(
        "g",
        &[
            "proxy",
            "exec",
            "--",
            "git",
            "--no-optional-locks",
            "status",
        ],
    );
    assert_eq!(ro["decision"]["action"], "allow", "{ro}");
}

#[test]
fn apply_writes_nothing_through_a_host_symlink_and_never_the_git_directory() {
    let env = Env::new();
    let host = env.host("proj");
    let victim = env.host("victim");
    fs::create_dir_all(&host).unwrap();
    fs::create_dir_all(&victim).unwrap();
    fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    fs::write(host.join("a"), "x\n").unwrap();
    fs::create_dir_all(host.join(".git")).unwrap();
    fs::write(host.join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(&victim, host.join("shared")).unwrap();
    env.create("v");
    env.data("v", &["import", host.to_str().unwrap()]);
    env.fork("v", "f");
    // In the fork the symlink becomes a directory with a file in it.
    env.ok("f", &["rm", "shared"]);
    env.write("f", "shared/planted", b"planted\n");
    env.write(
        "f",
        ".git/config",
        b"[core]\n\tfsmonitor = touch /tmp/owned\n",
    );
    env.write("f", ".GIT/config", b"[core]\n");
    let e = env.fail(Some("f"), &["apply"], 4, "apply_conflict");
    assert!(
        e["details"]["conflicts"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("symlink"),
        "{e}"
    );
    env.fail(
        Some("f"),
        &["apply", "--force", "--include-ignored"],
        4,
        "apply_conflict",
    );
    assert!(!victim.join("planted").exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Without the symlinked directory, the rest applies, and .git/ never does.
    env.ok("f", &["rm", "-r", "shared"]);
    env.write("f", "a", b"y\n");
    let r = env.data("f", &["apply", "--include-ignored"]);
    assert!(
        r["written"].as_array().unwrap().iter().all(|p| !p
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains(".git")),
        "{r}"
    );
    assert_eq!(
        fs::read_to_string(host.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!host.join(".GIT").exists());
    assert_eq!(fs::read_to_string(host.join("a")).unwrap(), "y\n");
}

#[test]
fn editing_the_rules_cannot_hide_a_change_to_a_file_that_was_not_ignored() {
    let env = Env::new();
    project(&env);
    env.write("task", "src/app.py", b"backdoor()\n");
    env.write("task", ".avfsignore", b"*\n");
    env.write("task", "src/.gitignore", b"*\n");
    let d = env.data("task", &["diff", "@base"]);
    let listed = paths(&d);
    for shown in ["/src/app.py", "/.avfsignore", "/src/.gitignore"] {
        assert!(listed.contains(shown), "{shown} must be listed: {d}");
    }
    // A new file under the new rules is still left out.
    env.write("task", "src/new.py", b"x\n");
    assert!(!paths(&env.data("task", &["diff", "@base"])).contains("/src/new.py"));
}
