//! `avfs diff` through the real binary: name-status, stat, patch (applied with `git apply`)
//! and JSON, between checkpoints, live states and forks; and the history commands' schemas.
//! Every command runs with its own `$AVFS_HOME` and without `$AVFS_WORKSPACE` or
//! `$AVFS_VAULT`; every `--json` document is checked against the committed schema.

mod common;

use std::collections::BTreeMap;
use std::fs;

use common::history::{Env, binary, changes_by_path, host_tree, lines};
use common::skip::require_tool;
use serde_json::{Value, json};

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
