//! `avfs apply` and `export --changes` through the real binary, round trips through a real
//! git checkout: renames, symlinks, type changes, dry runs, host changes since import.
//! Every command runs with its own `$AVFS_HOME` and without `$AVFS_WORKSPACE` or
//! `$AVFS_VAULT`; every `--json` document is checked against the committed schema.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::history::{Env, git, host_tree};
use common::skip::require_tool;
use serde_json::json;

fn porcelain(dir: &Path) -> BTreeSet<String> {
    git(dir, &["status", "--porcelain"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// Regular files below a host directory.
fn files_below(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                files_below(&e.path())
            } else {
                u64::from(t.is_file())
            }
        })
        .sum()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A committed git repo at `repo`, imported into vault `g`, with fork `task` changed: modify
/// `src/lib.rs`, add `src/new.rs`, delete `src/old.rs`, chmod +x `tool.sh`.
fn apply_fixture(env: &Env) -> PathBuf {
    let repo = env.host("repo");
    fs::create_dir_all(repo.join("src")).unwrap();
    fs::create_dir_all(repo.join("scripts")).unwrap();
    fs::write(repo.join("README.md"), "# project\n").unwrap();
    fs::write(repo.join("src/lib.rs"), "pub fn lib() {}\n").unwrap();
    fs::write(repo.join("src/old.rs"), "// old\n").unwrap();
    fs::write(repo.join("tool.sh"), "#!/bin/sh\necho tool\n").unwrap();
    fs::write(repo.join("scripts/run.sh"), "#!/bin/sh\necho run\n").unwrap();
    for (p, mode) in [
        ("src", 0o755),
        ("scripts", 0o755),
        ("README.md", 0o644),
        ("src/lib.rs", 0o644),
        ("src/old.rs", 0o644),
        ("tool.sh", 0o644),
        ("scripts/run.sh", 0o755),
    ] {
        fs::set_permissions(repo.join(p), fs::Permissions::from_mode(mode)).unwrap();
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "initial"]);
    assert!(porcelain(&repo).is_empty());

    env.create("g");
    let imported = env.data("g", &["import", repo.to_str().unwrap(), "--gitignore"]);
    // The five tracked files, and the repository itself: apply leaves `.git/` alone.
    assert_eq!(
        imported["files"],
        5 + files_below(&repo.join(".git")),
        "{imported}"
    );
    env.fork("g", "task");
    env.write("task", "src/lib.rs", b"pub fn lib() { changed() }\n");
    env.write("task", "src/new.rs", b"pub fn new() {}\n");
    env.ok("task", &["rm", "src/old.rs"]);
    env.ok("task", &["chmod", "755", "tool.sh"]);
    repo
}

const APPLIED: &[&str] = &[
    " M src/lib.rs",
    " D src/old.rs",
    " M tool.sh",
    "?? src/new.rs",
];

#[test]
fn apply_round_trip_with_git() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = apply_fixture(&env);
    let r = env.data("task", &["apply", repo.to_str().unwrap()]);
    assert_eq!(r["dry_run"], false);
    assert_eq!(r["written"], json!(["/src/lib.rs", "/src/new.rs"]));
    assert_eq!(r["deleted"], json!(["/src/old.rs"]));
    assert_eq!(r["mode_changed"], json!(["/tool.sh"]));
    assert_eq!(r["forced"], json!([]));

    assert_eq!(porcelain(&repo), set(APPLIED));
    let summary = git(&repo, &["diff", "--summary"]);
    assert!(
        summary.contains("mode change 100644 => 100755 tool.sh"),
        "{summary}"
    );
    assert!(
        summary.contains("delete mode 100644 src/old.rs"),
        "{summary}"
    );
    assert_eq!(
        git(&repo, &["diff", "--numstat", "--", "tool.sh"]),
        "0\t0\ttool.sh\n"
    );
    assert_eq!(
        fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn lib() { changed() }\n"
    );
    assert_eq!(
        fs::read_to_string(repo.join("src/new.rs")).unwrap(),
        "pub fn new() {}\n"
    );
    // The executable stays executable, untouched files stay as committed.
    assert_eq!(
        fs::metadata(repo.join("scripts/run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    // The host now matches the fork exactly.
    assert_eq!(host_tree(&repo), env.snapshot("task"));
    // Applying again is a no-op: everything is already in place.
    let again = env.data("task", &["apply", repo.to_str().unwrap()]);
    assert_eq!(again["written"], json!([]));
    assert_eq!(again["deleted"], json!([]));
    assert_eq!(again["mode_changed"], json!([]));
    assert_eq!(porcelain(&repo), set(APPLIED));
}

#[test]
fn apply_dry_run_writes_nothing() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = apply_fixture(&env);
    let before = host_tree(&repo);
    let r = env.data("task", &["apply", repo.to_str().unwrap(), "--dry-run"]);
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["written"], json!(["/src/lib.rs", "/src/new.rs"]));
    assert_eq!(r["deleted"], json!(["/src/old.rs"]));
    assert_eq!(r["mode_changed"], json!(["/tool.sh"]));
    assert!(porcelain(&repo).is_empty());
    assert_eq!(host_tree(&repo), before);
    let human = env.ok("task", &["apply", repo.to_str().unwrap(), "--dry-run"]);
    assert!(
        human.starts_with("would write 2, delete 1, chmod 1"),
        "{human}"
    );
    assert!(porcelain(&repo).is_empty());
}

#[test]
fn apply_refuses_host_changes_since_import_unless_forced() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = apply_fixture(&env);
    // Someone edits a file on the host that the fork also changed, and creates a file the
    // fork also adds; an unrelated host edit is no conflict.
    fs::write(repo.join("src/lib.rs"), "host edit\n").unwrap();
    fs::write(repo.join("src/new.rs"), "host version\n").unwrap();
    fs::write(repo.join("README.md"), "# edited on the host\n").unwrap();
    let before = host_tree(&repo);

    let e = env.fail(
        Some("task"),
        &["apply", repo.to_str().unwrap()],
        4,
        "apply_conflict",
    );
    let paths: BTreeSet<&str> = e["details"]["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, BTreeSet::from(["/src/lib.rs", "/src/new.rs"]), "{e}");
    assert_eq!(
        host_tree(&repo),
        before,
        "nothing may be written on conflict"
    );
    // A dry run reports the same conflict and writes nothing either.
    env.fail(
        Some("task"),
        &["apply", repo.to_str().unwrap(), "--dry-run"],
        4,
        "apply_conflict",
    );
    assert_eq!(host_tree(&repo), before);

    // --force overwrites the conflicting paths, keeps the unrelated host edit.
    let r = env.data("task", &["apply", repo.to_str().unwrap(), "--force"]);
    let forced: BTreeSet<&str> = r["forced"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(forced, BTreeSet::from(["/src/lib.rs", "/src/new.rs"]));
    assert_eq!(
        fs::read_to_string(repo.join("src/lib.rs")).unwrap(),
        "pub fn lib() { changed() }\n"
    );
    assert_eq!(
        fs::read_to_string(repo.join("src/new.rs")).unwrap(),
        "pub fn new() {}\n"
    );
    assert_eq!(
        fs::read_to_string(repo.join("README.md")).unwrap(),
        "# edited on the host\n"
    );
    let mut want = set(APPLIED);
    want.insert(" M README.md".into());
    assert_eq!(porcelain(&repo), want);
}

#[test]
fn export_changes_writes_only_the_changes_below_a_path() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = apply_fixture(&env);
    let src = repo.join("src");
    let r = env.data(
        "task",
        &["export", "--changes", "/src", src.to_str().unwrap()],
    );
    assert_eq!(r["written"], json!(["/src/lib.rs", "/src/new.rs"]));
    assert_eq!(r["deleted"], json!(["/src/old.rs"]));
    assert_eq!(r["mode_changed"], json!([]));
    // tool.sh (outside /src) is left alone.
    assert_eq!(
        porcelain(&repo),
        set(&[" M src/lib.rs", " D src/old.rs", "?? src/new.rs"])
    );
    // The whole tree with an explicit base state.
    let r = env.data(
        "task",
        &[
            "export",
            "--changes",
            "--from",
            "@base",
            "/",
            repo.to_str().unwrap(),
        ],
    );
    assert_eq!(r["mode_changed"], json!(["/tool.sh"]));
    assert_eq!(porcelain(&repo), set(APPLIED));
}

/// A host tree imported into vault `h` and forked as `hf`.
fn host_fixture(env: &Env) -> PathBuf {
    let host = env.host("host");
    fs::create_dir_all(host.join("dir")).unwrap();
    fs::create_dir_all(host.join("old/sub")).unwrap();
    fs::write(host.join("thing"), "a file\n").unwrap();
    fs::write(host.join("mv.txt"), "move me please\n").unwrap();
    fs::write(host.join("dir/x"), "x\n").unwrap();
    fs::write(host.join("old/sub/o"), "o\n").unwrap();
    std::os::unix::fs::symlink("thing", host.join("link")).unwrap();
    env.create("h");
    env.data("h", &["import", host.to_str().unwrap()]);
    env.fork("h", "hf");
    host
}

#[test]
fn apply_handles_renames_symlinks_and_new_directories() {
    let env = Env::new();
    let host = host_fixture(&env);
    env.ok("hf", &["mv", "mv.txt", "dir/moved.txt"]);
    env.ok("hf", &["mv", "old", "renamed"]);
    env.ok("hf", &["rm", "link"]);
    env.ok("hf", &["ln", "-s", "dir/x", "link"]);
    env.ok("hf", &["rm", "dir/x"]);
    env.ok("hf", &["mkdir", "empty"]);
    env.write("hf", "deep/er/file", b"deep\n");
    env.ok("hf", &["chmod", "700", "dir"]);
    let r = env.data("hf", &["apply", host.to_str().unwrap()]);
    assert_eq!(r["mode_changed"], json!(["/dir"]), "{r}");
    assert_eq!(host_tree(&host), env.snapshot("hf"));
    assert_eq!(
        fs::read_link(host.join("link")).unwrap(),
        Path::new("dir/x")
    );
}

/// A path that changed type (file -> directory, directory -> file) is applied like any
/// other change.
#[test]
fn apply_handles_type_changes() {
    let env = Env::new();
    let host = host_fixture(&env);
    env.ok("hf", &["rm", "thing"]);
    env.write("hf", "thing/inner.txt", b"now a directory\n");
    env.ok("hf", &["rm", "-r", "dir"]);
    env.write("hf", "dir", b"now a file\n");
    let out = env.run(Some("hf"), &["apply", host.to_str().unwrap()], None);
    assert!(
        out.status.success(),
        "apply failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(host_tree(&host), env.snapshot("hf"));
}
