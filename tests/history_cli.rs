//! History features through the real `avfs` binary: `diff` (name-status, stat, patch, JSON),
//! `merge` (clean, text-merged, conflicting, binary, strategies, dry run), `undo` / `redo` /
//! `op restore`, `prune`, `apply` and `export --changes` (round trips through a real git
//! checkout). Every command runs with its own `$AVFS_HOME` and without `$AVFS_VAULT`; every
//! `--json` document is checked against the committed schema.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use common::HostEntry as Entry;
use common::skip::require_tool;
use serde_json::{Value, json};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------
// Helpers

/// A throwaway `$AVFS_HOME` plus scratch space for host directories.
struct Env {
    home: TempDir,
    scratch: TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            scratch: tempfile::tempdir().unwrap(),
        }
    }

    /// A fresh, not yet existing path under the scratch directory.
    fn host(&self, name: &str) -> PathBuf {
        let p = self.scratch.path().join(name);
        assert!(!p.exists(), "{} already used", p.display());
        p
    }

    fn run(&self, vault: Option<&str>, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = Command::new(common::BIN);
        cmd.env("AVFS_HOME", self.home.path())
            .env_remove("AVFS_VAULT")
            .env("AVFS_ACTOR", "history-test");
        if let Some(v) = vault {
            cmd.args(["--vault", v]);
        }
        cmd.args(args);
        if let Some(input) = stdin {
            cmd.write_stdin(input.to_vec());
        }
        cmd.output().unwrap()
    }

    /// Run a command that must succeed; its stdout.
    fn ok(&self, vault: &str, args: &[&str]) -> String {
        let out = self.run(Some(vault), args, None);
        assert!(
            out.status.success(),
            "avfs --vault {vault} {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The whole `--json` document (validated against the schema, the exit code against
    /// the documented one) and the exit code.
    fn json(&self, vault: Option<&str>, args: &[&str]) -> (Value, i32) {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.run(vault, &full, None);
        let doc = common::check_json_output(&full, &out);
        (doc, out.status.code().unwrap())
    }

    /// `data` of a `--json` command that must succeed.
    fn data(&self, vault: &str, args: &[&str]) -> Value {
        let (doc, code) = self.json(Some(vault), args);
        assert_eq!(code, 0, "avfs --vault {vault} {args:?}: {doc}");
        assert_eq!(doc["ok"], json!(true));
        doc["data"].clone()
    }

    /// `error` of a `--json` command that must fail with `code` and `kind`.
    fn fail(&self, vault: Option<&str>, args: &[&str], code: i32, kind: &str) -> Value {
        let (doc, got) = self.json(vault, args);
        assert_eq!(doc["ok"], json!(false), "{args:?} should fail: {doc}");
        assert_eq!(doc["error"]["kind"], json!(kind), "{args:?}: {doc}");
        assert_eq!(got, code, "{args:?}: exit code for {kind}: {doc}");
        doc["error"].clone()
    }

    fn create(&self, name: &str) {
        let out = self.run(None, &["vault", "create", name], None);
        assert!(out.status.success(), "{:?}", out);
    }

    fn fork(&self, source: &str, name: &str) {
        self.ok(source, &["vault", "fork", source, name]);
    }

    /// Write a file (binary-safe, through stdin), creating parents.
    fn write(&self, vault: &str, path: &str, content: &[u8]) {
        let out = self.run(Some(vault), &["write", "-p", path], Some(content));
        assert!(
            out.status.success(),
            "write {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn cat(&self, vault: &str, path: &str) -> Vec<u8> {
        let out = self.run(Some(vault), &["cat", path], None);
        assert!(out.status.success(), "cat {path}: {:?}", out);
        out.stdout
    }

    fn exists(&self, vault: &str, path: &str) -> bool {
        self.run(Some(vault), &["stat", path], None)
            .status
            .success()
    }

    /// The whole observable tree (exported to the host): relative path -> entry.
    fn snapshot(&self, vault: &str) -> BTreeMap<String, Entry> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.host(&format!("snapshot-{n}"));
        self.ok(vault, &["export", "/", dir.to_str().unwrap()]);
        host_tree(&dir)
    }

    fn op_count(&self, vault: &str) -> usize {
        self.data(vault, &["op", "log", "--limit", "100000"])
            .as_array()
            .unwrap()
            .len()
    }
}

/// A host directory tree, `.git` excluded, without times.
fn host_tree(root: &Path) -> BTreeMap<String, Entry> {
    common::host_tree(root, false)
        .into_iter()
        .filter(|(rel, _)| rel != ".git" && !rel.starts_with(".git/"))
        .collect()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

fn changes_by_path(data: &Value) -> BTreeMap<String, Value> {
    data["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c.clone()))
        .collect()
}

/// Binary content: NUL bytes in every "line", so any line-based merge would be wrong.
fn binary(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.extend_from_slice(b"\0\x01\x02\n");
    }
    out
}

const TEN_LINES: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";

/// The committed JSON contract has a compilable schema for every history command.
#[test]
fn history_schemas_compile() {
    let broken: Vec<String> = [
        "diff",
        "merge",
        "op log",
        "op restore",
        "undo",
        "redo",
        "prune",
        "apply",
        "export",
    ]
    .iter()
    .filter_map(|c| {
        let contract = common::contract();
        if !contract.command_names().contains(*c) {
            return Some(format!("{c}: missing"));
        }
        contract
            .broken_schemas()
            .get(*c)
            .map(|e| format!("{c}: {e}"))
    })
    .collect();
    assert!(broken.is_empty(), "schema/avfs.schema.json: {broken:?}");
}

// ---------------------------------------------------------------------------------------
// diff

/// A vault `d` with checkpoint `c1`, then one change of every kind but a type change.
fn diff_fixture(env: &Env) {
    env.create("d");
    env.write("d", "a.txt", b"hello\n");
    env.write("d", "b.txt", b"bye\n");
    env.write("d", "r.txt", b"rename me\nplease\n");
    env.write("d", "run.sh", b"#!/bin/sh\necho hi\n");
    env.write("d", "bin.dat", &binary(&["x"]));
    env.write("d", "d/keep.txt", b"keep\n");
    env.ok("d", &["checkpoint", "save", "c1"]);

    env.write("d", "a.txt", b"hello world\n");
    env.ok("d", &["rm", "b.txt"]);
    env.ok("d", &["mv", "r.txt", "d/r2.txt"]);
    env.ok("d", &["chmod", "755", "run.sh"]);
    env.write("d", "new.txt", b"new\nfile\n");
    env.write("d", "bin.dat", &binary(&["x", "y"]));
    env.ok("d", &["mkdir", "e"]);
}

#[test]
fn diff_name_status_lists_every_kind_of_change() {
    let env = Env::new();
    diff_fixture(&env);
    let out = env.ok("d", &["diff", "--name-status"]);
    assert_eq!(
        lines(&out),
        vec![
            "M\t/a.txt",
            "D\t/b.txt",
            "M\t/bin.dat",
            "R\t/r.txt\t/d/r2.txt",
            "A\t/e",
            "A\t/new.txt",
            "M\t/run.sh",
        ]
    );
    // The default "from" is the last checkpoint, the default "to" the live state.
    assert_eq!(out, env.ok("d", &["diff", "--name-status", "c1", "@"]));
}

#[test]
fn diff_json_describes_each_change() {
    let env = Env::new();
    diff_fixture(&env);
    let data = env.data("d", &["diff", "c1"]);
    assert_eq!(data["from"], "main:c1");
    assert_eq!(data["to"], "main@live");
    assert_eq!(
        data["summary"],
        json!({"added": 2, "modified": 3, "deleted": 1, "renamed": 1, "type_changed": 0})
    );
    assert_eq!(data["patch"], Value::Null);
    let c = changes_by_path(&data);
    assert_eq!(c.len(), 7);

    let a = &c["/a.txt"];
    assert_eq!(a["status"], "modified");
    assert_eq!(a["type"], "file");
    assert_eq!(
        (a["old_size"].clone(), a["new_size"].clone()),
        (json!(6), json!(12))
    );
    assert_eq!(a["mode_changed"], false);
    assert_ne!(a["old_content_id"], a["new_content_id"]);

    let b = &c["/b.txt"];
    assert_eq!(b["status"], "deleted");
    assert_eq!(b["new_size"], Value::Null);
    assert_eq!(b["new_content_id"], Value::Null);
    assert_eq!(b["old_mode"], 0o644);

    let r = &c["/d/r2.txt"];
    assert_eq!(r["status"], "renamed");
    assert_eq!(r["old_path"], "/r.txt");
    assert_eq!(r["old_content_id"], r["new_content_id"]);
    assert_eq!(r["mode_changed"], false);

    let run = &c["/run.sh"];
    assert_eq!(run["status"], "modified");
    assert_eq!(run["mode_changed"], true);
    assert_eq!(run["old_mode"], 0o644);
    assert_eq!(run["new_mode"], 0o755);
    assert_eq!(run["old_content_id"], run["new_content_id"]);

    assert_eq!(c["/e"]["status"], "added");
    assert_eq!(c["/e"]["type"], "dir");
    assert_eq!(c["/new.txt"]["status"], "added");
    assert_eq!(c["/new.txt"]["old_size"], Value::Null);
    assert_eq!(c["/bin.dat"]["status"], "modified");
}

#[test]
fn diff_stat_counts_lines_and_summarizes_binary_files() {
    let env = Env::new();
    diff_fixture(&env);
    let out = env.ok("d", &["diff", "--stat"]);
    let rows: BTreeMap<String, String> = out
        .lines()
        .filter(|l| l.contains('|'))
        .map(|l| {
            let (k, v) = l.split_once('|').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    assert_eq!(rows["/a.txt"], "2 +-");
    assert_eq!(rows["/b.txt"], "1 -");
    assert_eq!(rows["/new.txt"], "2 ++");
    assert_eq!(rows["/r.txt => /d/r2.txt"], "0");
    assert_eq!(rows["/run.sh"], "0");
    assert_eq!(rows["/e"], "0");
    assert!(
        rows["/bin.dat"].starts_with("Bin ") && rows["/bin.dat"].contains("->"),
        "binary files are summarized, not counted: {out}"
    );
    assert_eq!(rows.len(), 7, "{out}");
    assert_eq!(
        out.lines().last().unwrap(),
        "7 paths changed, 3 insertions(+), 2 deletions(-)"
    );
}

#[test]
fn diff_patch_shows_hunks_renames_modes_and_binary_summaries() {
    let env = Env::new();
    diff_fixture(&env);
    env.write("d", "added.bin", &binary(&["fresh"]));
    let patch = env.ok("d", &["diff", "--patch"]);
    for want in [
        "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hello\n+hello world\n",
        "diff --git a/b.txt b/b.txt\ndeleted file mode",
        "--- a/b.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
        "diff --git a/r.txt b/d/r2.txt\n",
        "rename from r.txt\nrename to d/r2.txt\n",
        "diff --git a/new.txt b/new.txt\nnew file mode",
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+new\n+file\n",
        "diff --git a/run.sh b/run.sh\nold mode",
        "diff --git a/bin.dat b/bin.dat\nBinary files a/bin.dat and b/bin.dat differ\n",
        "Binary files /dev/null and b/added.bin differ\n",
    ] {
        assert!(patch.contains(want), "patch lacks {want:?}:\n{patch}");
    }
    // A pure rename or mode change carries no hunk.
    assert!(!patch.contains("-rename me"), "{patch}");
    assert!(!patch.contains("+echo hi"), "{patch}");
    // No binary bytes leak into the patch.
    assert!(!patch.contains('\0'));
    // --json --patch carries the same text.
    let data = env.data("d", &["diff", "--patch"]);
    assert_eq!(data["patch"].as_str().unwrap().trim_end(), patch.trim_end());
}

/// The patch is "git-style": `git apply` turns the checkpoint's tree into the live tree.
#[test]
fn diff_patch_applies_with_git_apply() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    env.create("p");
    env.write("p", "a.txt", b"hello\nthere\n");
    env.write("p", "b.txt", b"bye\n");
    env.write("p", "r.txt", b"rename me\nplease\n");
    env.write("p", "run.sh", b"#!/bin/sh\necho hi\n");
    env.write("p", "src/lib.rs", b"fn a() {}\n");
    env.ok("p", &["checkpoint", "save", "c1"]);
    env.write("p", "a.txt", b"hello\nworld\n");
    env.ok("p", &["rm", "b.txt"]);
    env.ok("p", &["mv", "r.txt", "src/r2.txt"]);
    env.ok("p", &["chmod", "755", "run.sh"]);
    env.write("p", "src/new.rs", b"fn new() {}\n");

    let host = env.host("tree");
    env.ok("p", &["export", "--at", "c1", "/", host.to_str().unwrap()]);
    let patch_file = env.host("change.patch");
    fs::write(&patch_file, env.ok("p", &["diff", "--patch", "c1"])).unwrap();
    let out = std::process::Command::new("git")
        .arg("apply")
        .arg(&patch_file)
        .current_dir(&host)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git apply rejected `avfs diff --patch`: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        fs::read_to_string(&patch_file).unwrap()
    );
    let live = env.snapshot("p");
    assert_eq!(host_tree(&host), live);
}

/// A path whose type changed (file -> directory) is one `T` entry, not a delete and an add.
#[test]
fn diff_reports_file_to_directory_as_type_changed() {
    let env = Env::new();
    env.create("t");
    env.write("t", "thing", b"a file\n");
    env.write("t", "other", b"x\n");
    env.ok("t", &["checkpoint", "save", "c1"]);
    env.ok("t", &["rm", "thing"]);
    env.write("t", "thing/inner.txt", b"inside\n");

    let out = env.ok("t", &["diff", "--name-status"]);
    assert_eq!(
        lines(&out),
        vec!["T\t/thing", "A\t/thing/inner.txt"],
        "{out}"
    );
    let data = env.data("t", &["diff"]);
    assert_eq!(data["summary"]["type_changed"], 1, "{data}");
    let c = changes_by_path(&data);
    assert_eq!(c["/thing"]["status"], "type_changed");
    assert_eq!(c["/thing"]["type"], "dir");
    assert_eq!(c["/thing/inner.txt"]["status"], "added");
}

#[test]
fn diff_between_checkpoints_live_and_forks() {
    let env = Env::new();
    env.create("h");
    env.write("h", "f.txt", b"v1\n");
    env.ok("h", &["checkpoint", "save", "c1"]);
    env.write("h", "f.txt", b"v2\n");
    env.write("h", "g.txt", b"g\n");
    env.ok("h", &["checkpoint", "save", "c2"]);
    env.ok("h", &["rm", "g.txt"]);
    env.write("h", "live.txt", b"live\n");

    // Two checkpoints.
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "c1", "c2"])),
        vec!["M\t/f.txt", "A\t/g.txt"]
    );
    // Reversed.
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "c2", "c1"])),
        vec!["M\t/f.txt", "D\t/g.txt"]
    );
    // Checkpoint to live (explicit and default "to"); default "from" is the last checkpoint.
    let want = vec!["D\t/g.txt", "A\t/live.txt"];
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "c2", "@"])),
        want
    );
    assert_eq!(lines(&env.ok("h", &["diff", "--name-status", "c2"])), want);
    assert_eq!(lines(&env.ok("h", &["diff", "--name-status"])), want);
    // @base of main is the empty tree it was created with.
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "@base"])),
        vec!["A\t/f.txt", "A\t/live.txt"]
    );
    // Same state: nothing.
    assert_eq!(env.ok("h", &["diff", "--name-status", "c1", "c1"]), "");

    // Two forks of the live state, changed differently.
    env.fork("h", "fa");
    env.fork("h", "fb");
    env.write("fa", "f.txt", b"from a\n");
    env.write("fa", "only-a.txt", b"a\n");
    env.write("fb", "only-b.txt", b"b\n");
    env.ok("fa", &["checkpoint", "save", "a1"]);
    env.ok("fa", &["rm", "only-a.txt"]);
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "fa", "fb"])),
        vec!["M\t/f.txt", "A\t/only-b.txt"]
    );
    let data = env.data("h", &["diff", "fa", "fb"]);
    assert_eq!(
        (data["from"].clone(), data["to"].clone()),
        (json!("fa@live"), json!("fb@live"))
    );
    // FORK:CHECKPOINT names a checkpoint of another fork.
    assert_eq!(
        lines(&env.ok("h", &["diff", "--name-status", "fa:a1", "fb"])),
        vec!["M\t/f.txt", "D\t/only-a.txt", "A\t/only-b.txt"]
    );
    // Inside a fork, @base is where it started.
    assert_eq!(
        lines(&env.ok("fa", &["diff", "--name-status", "@base"])),
        vec!["M\t/f.txt"]
    );
    // A fork compared with main's checkpoint.
    assert_eq!(
        lines(&env.ok("fb", &["diff", "--name-status", "main:c2"])),
        vec!["D\t/g.txt", "A\t/live.txt", "A\t/only-b.txt"]
    );

    // Unknown state names.
    let e = env.fail(Some("h"), &["diff", "nope"], 3, "checkpoint_not_found");
    assert_eq!(e["details"]["name"], "nope");
    env.fail(Some("h"), &["diff", "ghost:c1"], 3, "fork_not_found");
}

// ---------------------------------------------------------------------------------------
// merge

/// Vault `m` (main) with a few files and fork `task` of its live state.
fn merge_fixture(env: &Env) {
    env.create("m");
    env.write("m", "notes.txt", TEN_LINES.as_bytes());
    env.write("m", "shared.txt", b"base\n");
    env.write("m", "gone.txt", b"delete me\n");
    env.write(
        "m",
        "img.bin",
        &binary(&["a", "b", "c", "d", "e", "f", "g"]),
    );
    env.write("m", "src/main.rs", b"fn main() {}\n");
    env.write("m", "tool.sh", b"#!/bin/sh\n");
    env.ok("m", &["checkpoint", "save", "base"]);
    env.fork("m", "task");
}

#[test]
fn merge_lands_non_overlapping_changes() {
    let env = Env::new();
    merge_fixture(&env);
    // The fork: add, modify, delete, chmod, new directory.
    env.write("task", "src/lib.rs", b"pub fn lib() {}\n");
    env.write("task", "shared.txt", b"changed in the fork\n");
    env.ok("task", &["rm", "gone.txt"]);
    env.ok("task", &["chmod", "755", "tool.sh"]);
    env.write("task", "docs/guide.md", b"# guide\n");
    // The parent, elsewhere.
    env.write("m", "src/main.rs", b"fn main() { run() }\n");
    env.write("m", "parent.txt", b"parent\n");
    let fork_before = env.snapshot("task");

    let report = env.data("m", &["merge", "task"]);
    assert_eq!(report["fork"], "task");
    assert_eq!(report["into"], "main");
    assert_eq!(report["strategy"], "fail");
    assert_eq!(report["applied"], true);
    assert_eq!(report["dry_run"], false);
    assert_eq!(report["conflicts"], json!([]));
    let c = changes_by_path(&report);
    assert_eq!(
        c.keys().map(String::as_str).collect::<Vec<_>>(),
        vec![
            "/docs",
            "/docs/guide.md",
            "/gone.txt",
            "/shared.txt",
            "/src/lib.rs",
            "/tool.sh"
        ]
    );
    assert_eq!(c["/gone.txt"]["status"], "deleted");
    assert_eq!(c["/tool.sh"]["mode_changed"], true);

    // Both sides' changes are in the target.
    assert_eq!(env.cat("m", "src/lib.rs"), b"pub fn lib() {}\n");
    assert_eq!(env.cat("m", "shared.txt"), b"changed in the fork\n");
    assert_eq!(env.cat("m", "docs/guide.md"), b"# guide\n");
    assert!(!env.exists("m", "gone.txt"));
    assert_eq!(env.cat("m", "src/main.rs"), b"fn main() { run() }\n");
    assert_eq!(env.cat("m", "parent.txt"), b"parent\n");
    let st = env.data("m", &["stat", "tool.sh"]);
    assert_eq!(st["mode"].as_u64().map(|m| m & 0o7777), Some(0o755), "{st}");
    // The fork is untouched.
    assert_eq!(env.snapshot("task"), fork_before);
    // Merged changes are not merged twice.
    let again = env.data("m", &["merge", "task"]);
    assert_eq!(again["changes"], json!([]), "{again}");
    // `--into` names the target explicitly.
    env.write("task", "later.txt", b"later\n");
    let r = env.data("task", &["merge", "task", "--into", "m"]);
    assert_eq!(r["applied"], true);
    assert_eq!(env.cat("m", "later.txt"), b"later\n");
}

#[test]
fn merge_combines_edits_in_different_hunks() {
    let env = Env::new();
    merge_fixture(&env);
    let fork_text = TEN_LINES.replace("two\n", "TWO (fork)\n");
    let parent_text = TEN_LINES.replace("nine\n", "NINE (parent)\n");
    env.write("task", "notes.txt", fork_text.as_bytes());
    env.write("m", "notes.txt", parent_text.as_bytes());
    let report = env.data("m", &["merge", "task"]);
    assert_eq!(report["text_merged"], json!(["/notes.txt"]));
    assert_eq!(report["conflicts"], json!([]));
    assert_eq!(
        String::from_utf8(env.cat("m", "notes.txt")).unwrap(),
        TEN_LINES
            .replace("two\n", "TWO (fork)\n")
            .replace("nine\n", "NINE (parent)\n")
    );
}

#[test]
fn merge_overlapping_edits_conflict_and_apply_nothing() {
    let env = Env::new();
    merge_fixture(&env);
    // Overlapping edits of one line, a modify/delete pair, and a clean change.
    env.write(
        "task",
        "notes.txt",
        TEN_LINES.replace("five", "FIVE-fork").as_bytes(),
    );
    env.write(
        "m",
        "notes.txt",
        TEN_LINES.replace("five", "FIVE-parent").as_bytes(),
    );
    env.ok("task", &["rm", "shared.txt"]);
    env.write("m", "shared.txt", b"parent edit\n");
    env.write("task", "clean.txt", b"would merge cleanly\n");
    let before = env.snapshot("m");
    let ops = env.op_count("m");

    let err = env.fail(Some("m"), &["merge", "task"], 4, "merge_conflict");
    assert_eq!(
        err["details"]["conflicts"],
        json!([
            {"path": "/notes.txt", "ours": "modified", "theirs": "modified"},
            {"path": "/shared.txt", "ours": "modified", "theirs": "deleted"},
        ])
    );
    assert!(err["message"].as_str().unwrap().contains("/notes.txt"));
    // Nothing applied, not even the clean change, and nothing logged.
    assert_eq!(env.snapshot("m"), before);
    assert_eq!(env.op_count("m"), ops);
    assert!(!env.exists("m", "clean.txt"));
    // Human mode: exit 4 as well.
    let out = env.run(Some("m"), &["merge", "task"], None);
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn merge_never_text_merges_binary_files() {
    let env = Env::new();
    merge_fixture(&env);
    // Edits in different "lines" that a line merge would combine.
    let fork = binary(&["A-fork", "b", "c", "d", "e", "f", "g"]);
    let parent = binary(&["a", "b", "c", "d", "e", "f", "G-parent"]);
    env.write("task", "img.bin", &fork);
    env.write("m", "img.bin", &parent);
    let err = env.fail(Some("m"), &["merge", "task"], 4, "merge_conflict");
    assert_eq!(
        err["details"]["conflicts"],
        json!([{"path": "/img.bin", "ours": "modified", "theirs": "modified"}])
    );
    assert_eq!(env.cat("m", "img.bin"), parent);
    // A dry run reports the conflict, never a text merge.
    let dry = env.data("m", &["merge", "task", "--dry-run"]);
    assert_eq!(dry["text_merged"], json!([]));
    assert_eq!(dry["conflicts"].as_array().unwrap().len(), 1);
    // Resolved by a strategy, the file is one side's bytes exactly.
    env.data("m", &["merge", "task", "--strategy", "theirs"]);
    assert_eq!(env.cat("m", "img.bin"), fork);
}

#[test]
fn merge_strategies_ours_and_theirs() {
    for (strategy, want_shared, want_notes) in [
        ("ours", &b"parent shared\n"[..], "FIVE-parent"),
        ("theirs", &b"fork shared\n"[..], "FIVE-fork"),
    ] {
        let env = Env::new();
        merge_fixture(&env);
        env.write("task", "shared.txt", b"fork shared\n");
        env.write("m", "shared.txt", b"parent shared\n");
        env.write(
            "task",
            "notes.txt",
            TEN_LINES.replace("five", "FIVE-fork").as_bytes(),
        );
        env.write(
            "m",
            "notes.txt",
            TEN_LINES.replace("five", "FIVE-parent").as_bytes(),
        );
        env.write("task", "fork-only.txt", b"fork only\n");
        env.write("m", "parent-only.txt", b"parent only\n");

        let r = env.data("m", &["merge", "task", "--strategy", strategy]);
        assert_eq!(r["strategy"], strategy);
        assert_eq!(r["applied"], true);
        let conflicts: BTreeSet<&str> = r["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap())
            .collect();
        assert_eq!(conflicts, BTreeSet::from(["/notes.txt", "/shared.txt"]));
        assert_eq!(env.cat("m", "shared.txt"), want_shared, "{strategy}");
        assert_eq!(
            String::from_utf8(env.cat("m", "notes.txt")).unwrap(),
            TEN_LINES.replace("five", want_notes),
            "{strategy}"
        );
        // Non-conflicting changes of both sides land either way.
        assert_eq!(env.cat("m", "fork-only.txt"), b"fork only\n");
        assert_eq!(env.cat("m", "parent-only.txt"), b"parent only\n");
    }
}

#[test]
fn merge_dry_run_changes_nothing() {
    let env = Env::new();
    merge_fixture(&env);
    env.write("task", "new.txt", b"new\n");
    env.write("task", "shared.txt", b"fork\n");
    env.write("m", "shared.txt", b"parent\n");
    let before = env.snapshot("m");
    let fork_before = env.snapshot("task");
    let ops = env.op_count("m");

    for extra in [&[][..], &["--strategy", "theirs"][..]] {
        let mut args = vec!["merge", "task", "--dry-run"];
        args.extend_from_slice(extra);
        let r = env.data("m", &args);
        assert_eq!(r["dry_run"], true);
        assert_eq!(r["applied"], false);
        let c = changes_by_path(&r);
        assert!(c.contains_key("/new.txt"), "{r}");
        assert_eq!(r["conflicts"].as_array().unwrap().len(), 1, "{r}");
        assert_eq!(env.snapshot("m"), before);
        assert_eq!(env.snapshot("task"), fork_before);
        assert_eq!(env.op_count("m"), ops);
    }
    let human = env.ok("m", &["merge", "task", "--dry-run"]);
    assert!(human.starts_with("would merge task into main"), "{human}");
    // The dry runs did not move the merge base: a real merge still brings everything.
    env.data("m", &["merge", "task", "--strategy", "theirs"]);
    assert_eq!(env.cat("m", "new.txt"), b"new\n");
    assert_eq!(env.cat("m", "shared.txt"), b"fork\n");
}

#[test]
fn merge_into_itself_or_unknown_fork_fails() {
    let env = Env::new();
    merge_fixture(&env);
    env.fail(Some("m"), &["merge", "nope"], 3, "vault_not_found");
    env.fail(
        Some("m"),
        &["merge", "task", "--into", "task"],
        5,
        "invalid_argument",
    );
}

/// Undoing a merge returns the target to its pre-merge state, and the fork can be merged
/// again (no work is lost by the undo).
#[test]
fn undo_of_merge_allows_merging_again() {
    let env = Env::new();
    merge_fixture(&env);
    env.write("task", "feature.txt", b"feature\n");
    env.data("m", &["merge", "task"]);
    assert!(env.exists("m", "feature.txt"));
    let undo = env.data("m", &["undo"]);
    assert_eq!(undo["kind"], "undo");
    assert!(!env.exists("m", "feature.txt"));
    let again = env.data("m", &["merge", "task"]);
    assert_eq!(
        changes_by_path(&again).keys().collect::<Vec<_>>(),
        vec!["/feature.txt"],
        "re-merging after an undo lands the fork's changes again: {again}"
    );
    assert_eq!(env.cat("m", "feature.txt"), b"feature\n");
}

// ---------------------------------------------------------------------------------------
// undo / redo / op restore

#[test]
fn undo_redo_walk_the_op_log() {
    let env = Env::new();
    env.create("u");
    env.write("u", "a.txt", b"1\n");
    env.write("u", "b.txt", b"b\n");
    env.write("u", "a.txt", b"2\n");
    let s3 = env.snapshot("u");

    // Undo once: back to a.txt = 1.
    let u1 = env.data("u", &["undo"]);
    assert_eq!(u1["kind"], "undo");
    assert!(u1["target"].is_i64());
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    assert!(env.exists("u", "b.txt"));
    // Undo twice: b.txt goes too.
    env.data("u", &["undo"]);
    assert!(!env.exists("u", "b.txt"));
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    let s1 = env.snapshot("u");

    // The log marks what is undone.
    let log = env.data("u", &["op", "log"]);
    let undone: Vec<(String, bool)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["undone"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        undone,
        vec![
            ("undo".to_string(), false),
            ("undo".to_string(), false),
            ("write".to_string(), true),
            ("write".to_string(), true),
            ("write".to_string(), false),
        ]
    );

    // Redo re-applies in reverse order of the undos.
    let r1 = env.data("u", &["redo"]);
    assert_eq!(r1["kind"], "redo");
    assert!(env.exists("u", "b.txt"));
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    env.data("u", &["redo"]);
    assert_eq!(env.snapshot("u"), s3);
    env.fail(Some("u"), &["redo"], 4, "nothing_to_redo");

    // Undo after redo walks back again.
    env.data("u", &["undo"]);
    env.data("u", &["undo"]);
    assert_eq!(env.snapshot("u"), s1);
    // Human output describes the undo.
    let out = env.ok("u", &["undo"]);
    assert!(out.starts_with("undo #1 write"), "{out}");
    assert!(!env.exists("u", "a.txt"));
    env.fail(Some("u"), &["undo"], 4, "nothing_to_undo");
}

#[test]
fn nothing_to_undo_or_redo_in_a_fresh_vault() {
    let env = Env::new();
    env.create("fresh");
    env.fail(Some("fresh"), &["undo"], 4, "nothing_to_undo");
    env.fail(Some("fresh"), &["redo"], 4, "nothing_to_redo");
    // A checkpoint changes no state: still nothing to undo.
    env.ok("fresh", &["checkpoint", "save", "c1"]);
    env.fail(Some("fresh"), &["undo"], 4, "nothing_to_undo");
    let out = env.run(Some("fresh"), &["undo"], None);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to undo"));
}

#[test]
fn redo_is_invalid_after_a_new_change() {
    let env = Env::new();
    env.create("r");
    env.write("r", "a.txt", b"a\n");
    env.write("r", "b.txt", b"b\n");
    env.data("r", &["undo"]);
    env.write("r", "c.txt", b"c\n");
    env.fail(Some("r"), &["redo"], 4, "nothing_to_redo");
    assert!(!env.exists("r", "b.txt"));
    // Undo now undoes the new change, and redo brings it back.
    env.data("r", &["undo"]);
    assert!(!env.exists("r", "c.txt"));
    env.data("r", &["redo"]);
    assert!(env.exists("r", "c.txt"));
    assert!(!env.exists("r", "b.txt"));
}

#[test]
fn undo_of_checkpoint_restore_brings_the_undone_state_back() {
    let env = Env::new();
    env.create("cr");
    env.write("cr", "a.txt", b"at checkpoint\n");
    env.ok("cr", &["checkpoint", "save", "c1"]);
    env.write("cr", "a.txt", b"work after the checkpoint\n");
    env.write("cr", "b/new.txt", b"new work\n");
    env.ok("cr", &["chmod", "700", "a.txt"]);
    let work = env.snapshot("cr");

    env.ok("cr", &["checkpoint", "restore", "c1"]);
    assert_eq!(env.cat("cr", "a.txt"), b"at checkpoint\n");
    assert!(!env.exists("cr", "b"));

    let u = env.data("cr", &["undo"]);
    assert!(
        u["description"]
            .as_str()
            .unwrap()
            .contains("checkpoint.restore"),
        "{u}"
    );
    assert_eq!(env.snapshot("cr"), work);
    // Redo restores the checkpoint again.
    env.data("cr", &["redo"]);
    assert_eq!(env.cat("cr", "a.txt"), b"at checkpoint\n");
    assert!(!env.exists("cr", "b"));
}

#[test]
fn op_restore_returns_to_the_state_after_an_operation() {
    let env = Env::new();
    env.create("o");
    env.write("o", "a.txt", b"1\n");
    env.write("o", "b.txt", b"b\n");
    let after_b = env.snapshot("o");
    env.write("o", "a.txt", b"2\n");
    env.ok("o", &["rm", "b.txt"]);
    env.ok("o", &["mkdir", "dir"]);

    let log = env.data("o", &["op", "log"]);
    let ops = log.as_array().unwrap();
    assert_eq!(ops.len(), 5);
    assert_eq!(ops[0]["kind"], "mkdir");
    assert_eq!(ops[4]["kind"], "write");
    let ids: Vec<i64> = ops.iter().map(|o| o["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for o in ops {
        assert_ne!(o["root_before"], o["root_after"], "{o}");
    }
    let b_id = ops[3]["id"].as_i64().unwrap();
    assert_eq!(ops[3]["description"], "/b.txt");

    let r = env.data("o", &["op", "restore", &b_id.to_string()]);
    assert_eq!(r["kind"], "op.restore");
    assert_eq!(r["root_after"], ops[3]["root_after"]);
    assert_eq!(env.snapshot("o"), after_b);
    // The restore is itself undoable.
    env.data("o", &["undo"]);
    assert!(env.exists("o", "dir"));
    assert!(!env.exists("o", "b.txt"));
    // `--limit` caps the log.
    assert_eq!(
        env.data("o", &["op", "log", "--limit", "2"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Unknown ids.
    let e = env.fail(
        Some("o"),
        &["op", "restore", "9999"],
        3,
        "operation_not_found",
    );
    assert_eq!(e["details"]["id"], 9999);
}

// ---------------------------------------------------------------------------------------
// prune

#[test]
fn prune_keep_last_reports_sizes_and_keeps_the_rest_readable() {
    let env = Env::new();
    env.create("pr");
    // Each checkpoint holds a big file of its own that later disappears from the live tree,
    // so pruning the old checkpoints (and ops) leaves garbage for gc.
    let big = |i: usize| -> Vec<u8> {
        (0..300_000u32)
            .map(|j| (j.wrapping_mul(2_654_435_761).wrapping_add(i as u32 * 97) >> 13) as u8)
            .collect()
    };
    for i in 0..6 {
        env.write("pr", "big.bin", &big(i));
        env.write(
            "pr",
            &format!("keep/{i}.txt"),
            format!("file {i}\n").as_bytes(),
        );
        env.ok("pr", &["checkpoint", "save", &format!("c{i}")]);
    }
    env.ok("pr", &["rm", "big.bin"]);
    let live = env.snapshot("pr");

    let r = env.data("pr", &["prune", "--keep-last", "2"]);
    let removed: BTreeSet<&str> = r["pruned"]["checkpoints_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(removed, BTreeSet::from(["c0", "c1", "c2", "c3"]));
    assert!(r["pruned"]["operations_removed"].as_u64().unwrap() > 0);
    let gc = &r["gc"];
    assert_eq!(gc["dry_run"], false);
    assert!(gc["objects_removed"].as_u64().unwrap() > 0, "{r}");
    assert!(gc["bytes_removed"].as_u64().unwrap() > 3 * 250_000, "{r}");
    let (before, after) = (
        r["disk_bytes_before"].as_u64().unwrap(),
        r["disk_bytes_after"].as_u64().unwrap(),
    );
    assert!(before > 0 && after <= before, "{r}");
    assert_eq!(
        env.data("pr", &["op", "log"]).as_array().unwrap().len(),
        2,
        "only the newest 2 operations are kept"
    );

    // Everything left is intact and readable.
    let check = env.data("pr", &["vault", "check"]);
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["problems"], json!([]));
    let cps: Vec<String> = env
        .data("pr", &["checkpoint", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(cps, vec!["c4", "c5"]);
    for i in [4usize, 5] {
        let cp = format!("c{i}");
        let out = env.run(Some("pr"), &["cat", "big.bin", "--at", &cp], None);
        assert!(out.status.success());
        assert_eq!(out.stdout, big(i), "big.bin at {cp}");
        for j in 0..=i {
            let out = env.run(
                Some("pr"),
                &["cat", &format!("keep/{j}.txt"), "--at", &cp],
                None,
            );
            assert_eq!(out.stdout, format!("file {j}\n").as_bytes());
        }
    }
    assert_eq!(env.snapshot("pr"), live);
    // A later gc finds nothing more; restoring a kept checkpoint works, and so does undo.
    assert_eq!(env.data("pr", &["gc"])["objects_removed"], 0);
    env.ok("pr", &["checkpoint", "restore", "c4"]);
    assert_eq!(env.cat("pr", "big.bin"), big(4));
    env.data("pr", &["undo"]);
    assert_eq!(env.snapshot("pr"), live);
    assert_eq!(env.data("pr", &["vault", "check"])["ok"], true);
}

#[test]
fn prune_older_than_and_bad_arguments() {
    let env = Env::new();
    env.create("po");
    env.write("po", "a.txt", b"a\n");
    env.ok("po", &["checkpoint", "save", "c1"]);
    // Nothing is older than an hour.
    let r = env.data("po", &["prune", "--older-than", "1h"]);
    assert_eq!(r["pruned"]["checkpoints_removed"], json!([]));
    assert_eq!(r["pruned"]["operations_removed"], 0);
    assert_eq!(
        env.data("po", &["checkpoint", "list"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    env.fail(Some("po"), &["prune"], 5, "invalid_argument");
    env.fail(
        Some("po"),
        &["prune", "--older-than", "soon"],
        5,
        "invalid_argument",
    );
    // Everything is older than 1ms once the clock has passed c1's time by 1ms: wait for
    // that, not for a guessed interval.
    let c1_ns = env.data("po", &["checkpoint", "list"])[0]["created_at"]
        .as_i64()
        .unwrap();
    common::wait::until_true("the clock to pass c1 by 1ms", || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        now > c1_ns + 1_000_000
    });
    let r = env.data("po", &["prune", "--older-than", "1ms"]);
    assert_eq!(r["pruned"]["checkpoints_removed"], json!(["c1"]));
    assert_eq!(env.cat("po", "a.txt"), b"a\n");
    assert_eq!(env.data("po", &["vault", "check"])["ok"], true);
}

// ---------------------------------------------------------------------------------------
// apply / export --changes (real git checkouts)

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args([
            "-c",
            "core.fileMode=true",
            "-c",
            "status.showUntrackedFiles=all",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn porcelain(dir: &Path) -> BTreeSet<String> {
    git(dir, &["status", "--porcelain"])
        .lines()
        .map(str::to_string)
        .collect()
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
    assert_eq!(imported["files"], 5, "{imported}");
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
