//! `avfs merge` through the real binary: clean, text-merged, conflicting and binary
//! merges, the ours/theirs strategies, dry runs, and undo of a merge.
//! Every command runs with its own `$AVFS_HOME` and without `$AVFS_WORKSPACE` or
//! `$AVFS_VAULT`; every `--json` document is checked against the committed schema.

mod common;

use std::collections::BTreeSet;

use common::history::{Env, TEN_LINES, binary, changes_by_path};
use serde_json::json;

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

/// Merging a fork into a sibling leaves the fork's base alone, so its changes still reach its
/// parent; undoing a merge moves back only the fork that was merged, never a new fork that
/// got a deleted one's id.
#[test]
fn a_merge_elsewhere_and_an_undo_after_a_fork_was_remade_touch_only_their_own_fork() {
    let env = Env::new();
    env.create("p");
    env.write("p", "a.txt", b"a\n");
    env.fork("p", "t");
    env.fork("p", "s");
    env.write("t", "b.txt", b"b\n");
    env.data("p", &["merge", "t", "--into", "s"]);
    assert_eq!(env.cat("s", "b.txt"), b"b\n");
    let m = env.data("p", &["merge", "t"]);
    assert_eq!(common::history::changed_paths(&m), ["/b.txt"], "{m}");
    assert_eq!(env.cat("p", "b.txt"), b"b\n");

    env.ok("p", &["vault", "delete", "t", "--yes"]);
    env.ok("p", &["vault", "delete", "s", "--yes"]);
    env.fork("p", "t2");
    env.write("t2", "c.txt", b"c\n");
    let before = env.data("t2", &["diff", "@base", "--name-status"]);
    env.ok("p", &["undo"]);
    let after = env.data("t2", &["diff", "@base", "--name-status"]);
    assert_eq!(
        after["changes"], before["changes"],
        "undo left t2's base alone"
    );
    assert_eq!(
        common::history::changed_paths(&after),
        ["/c.txt"],
        "{after}"
    );
}
