//! Checkpoints through the real binary: save/list/info/restore/delete, generated names,
//! exact restores of rich trees, fork isolation, reading at a checkpoint, and errors.

mod common;

use std::collections::BTreeSet;

use common::{TestEnv, assert_same_tree, make_host_tree};
use predicates::prelude::*;
use serde_json::json;

#[test]
fn save_list_info_restore_delete() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"one");
    env.write(None, "dir/b.txt", b"bee");
    let cp = env.data(&["checkpoint", "save", "first", "-m", "initial state"]);
    assert_eq!(cp["name"], "first");
    assert_eq!(cp["message"], "initial state");
    assert_eq!(cp["files"], 2);
    assert_eq!(cp["bytes"], 6);
    assert_eq!(cp["root"].as_str().unwrap().len(), 64);

    env.write(None, "a.txt", b"two!");
    env.data(&["rm", "-r", "dir"]);
    env.write(None, "c.txt", b"new");
    env.data(&["checkpoint", "save", "second", "--message", "changed"]);

    let list = env.data(&["checkpoint", "list"]);
    assert_eq!(env.checkpoint_names(None), vec!["first", "second"]);
    assert!(list[0]["created_at"].as_i64() <= list[1]["created_at"].as_i64());
    assert_eq!(list[1]["files"], 2);
    assert_eq!(list[1]["bytes"], 7);
    env.avfs(&["checkpoint", "list"])
        .success()
        .stdout(predicate::str::contains("initial state").and(predicate::str::contains("second")));

    let info = env.data(&["checkpoint", "info", "first"]);
    assert_eq!(info, cp);

    // Restore brings the whole tree back, including removed directories.
    let r = env.data(&["checkpoint", "restore", "first"]);
    assert_eq!(r["name"], "first");
    assert_eq!(env.cat(None, "a.txt"), b"one");
    assert_eq!(env.cat(None, "dir/b.txt"), b"bee");
    env.err(&["cat", "c.txt"], "path_not_found");
    let info = env.data(&["vault", "info"]);
    assert_eq!(info["workspace"]["files"], 2);
    assert_eq!(info["workspace"]["bytes"], 6);
    // Uncheckpointed changes are dropped by a restore.
    env.write(None, "scratch", b"tmp");
    env.data(&["checkpoint", "restore", "second"]);
    assert_eq!(env.cat(None, "a.txt"), b"two!");
    env.err(&["cat", "scratch"], "path_not_found");
    env.err(&["ls", "dir"], "path_not_found");

    let d = env.data(&["checkpoint", "delete", "first"]);
    assert_eq!(d["name"], "first");
    assert_eq!(env.checkpoint_names(None), vec!["second"]);
    env.err(&["checkpoint", "info", "first"], "checkpoint_not_found");
    env.err(&["checkpoint", "restore", "first"], "checkpoint_not_found");
    env.err(&["checkpoint", "delete", "first"], "checkpoint_not_found");
    // Deleting a checkpoint leaves the live state alone.
    assert_eq!(env.cat(None, "a.txt"), b"two!");
}

/// `vault info` reports `pending_changes`: "paths changed since the last checkpoint".
#[test]
fn info_reports_pending_changes_since_last_checkpoint() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"one");
    env.data(&["checkpoint", "save", "first"]);
    assert_eq!(env.data(&["vault", "info"])["pending_changes"], 0);
    env.write(None, "a.txt", b"two");
    env.write(None, "b.txt", b"new");
    // a.txt rewritten and b.txt added: two paths.
    assert_eq!(env.data(&["vault", "info"])["pending_changes"], 2);
    env.data(&["checkpoint", "save", "second"]);
    assert_eq!(env.data(&["vault", "info"])["pending_changes"], 0);
}

#[test]
fn generated_names_in_a_tight_loop_are_distinct() {
    let env = TestEnv::with_vault("v");
    env.write(None, "counter", b"start");
    // Back to back, no changes in between, well within one second.
    let mut names = Vec::new();
    for _ in 0..10 {
        let cp = env.data(&["checkpoint", "save"]);
        names.push(cp["name"].as_str().unwrap().to_string());
    }
    let distinct: BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), 10, "{names:?}");
    assert_eq!(env.checkpoint_names(None), names);
    // Each generated checkpoint holds its own state.
    let mut with_state = Vec::new();
    for i in 0..3 {
        env.data(&["write", "counter", &i.to_string()]);
        let n = env.data(&["checkpoint", "save"])["name"]
            .as_str()
            .unwrap()
            .to_string();
        with_state.push(n);
    }
    for (i, n) in with_state.iter().enumerate() {
        assert_eq!(env.cat_at(None, "counter", n), i.to_string().as_bytes());
    }
    assert_eq!(env.cat_at(None, "counter", &names[9]), b"start");
    names.extend(with_state);
    // After deleting one, new generated names still never collide.
    env.data(&["checkpoint", "delete", &names[3]]);
    env.data(&["checkpoint", "delete", &names[12]]);
    let mut more = BTreeSet::new();
    for _ in 0..3 {
        let n = env.data(&["checkpoint", "save"])["name"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!more.contains(&n));
        more.insert(n);
    }
    let all = env.checkpoint_names(None);
    assert_eq!(all.len(), 14);
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 14, "{all:?}");
    // A generated name cannot be taken by an explicit save either.
    env.err(&["checkpoint", "save", &names[0]], "already_exists");
}

#[test]
fn restore_rebuilds_a_rich_tree_exactly() {
    let env = TestEnv::with_vault("v");
    let original = env.host("original");
    make_host_tree(&original);
    env.data(&["import", original.to_str().unwrap()]);
    env.data(&["checkpoint", "save", "pristine"]);

    // Wreck it: delete, overwrite, chmod, retarget links, add new things.
    env.data(&["rm", "-r", "src/deep"]);
    env.data(&["write", "README.md", "overwritten"]);
    env.data(&["chmod", "644", "bin/run.sh"]);
    env.data(&["chmod", "777", "private"]);
    env.data(&["rm", "link-rel"]);
    env.data(&["ln", "-s", "elsewhere", "link-rel"]);
    env.data(&["mv", "data", "moved-data"]);
    env.data(&["write", "-p", "brand/new.txt", "new"]);
    env.data(&["mkdir", "extra"]);
    env.data(&["checkpoint", "save", "wrecked"]);
    env.data(&["write", "uncommitted", "x"]);

    env.data(&["checkpoint", "restore", "pristine"]);
    let out = env.host("restored");
    env.data(&["export", "/", out.to_str().unwrap()]);
    assert_same_tree(&original, &out, true);

    // And the wrecked checkpoint is still intact.
    let wrecked = env.host("wrecked");
    env.data(&["export", "/", wrecked.to_str().unwrap(), "--at", "wrecked"]);
    assert_eq!(
        std::fs::read(wrecked.join("README.md")).unwrap(),
        b"overwritten"
    );
    assert!(!wrecked.join("src/deep").exists());
    assert!(wrecked.join("moved-data/big.bin").is_file());
    assert!(!wrecked.join("uncommitted").exists());
}

#[test]
fn forks_are_isolated_in_both_directions() {
    let env = TestEnv::with_vault("main-v");
    env.write(None, "shared.txt", b"shared v1");
    env.write(None, "dir/keep.txt", b"keep");
    env.data(&["checkpoint", "save", "base"]);
    env.data(&["vault", "fork", "main-v", "fork"]);
    let m = Some("main-v");
    let f = Some("fork");

    // Writes in the fork are invisible in the parent and vice versa.
    env.write(f, "shared.txt", b"fork edit");
    env.write(f, "fork-only.txt", b"f");
    env.write(m, "main-only.txt", b"m");
    env.data(&["--workspace", "main-v", "rm", "-r", "dir"]);
    assert_eq!(env.cat(m, "shared.txt"), b"shared v1");
    assert_eq!(env.cat(f, "shared.txt"), b"fork edit");
    env.err(
        &["--workspace", "main-v", "cat", "fork-only.txt"],
        "path_not_found",
    );
    env.err(
        &["--workspace", "fork", "cat", "main-only.txt"],
        "path_not_found",
    );
    assert_eq!(env.cat(f, "dir/keep.txt"), b"keep");

    // Checkpoints are per workspace and stay isolated too.
    env.data(&["--workspace", "fork", "checkpoint", "save", "fork-cp"]);
    env.data(&["--workspace", "main-v", "checkpoint", "save", "main-cp"]);
    assert_eq!(env.checkpoint_names(f), vec!["fork-cp"]);
    assert_eq!(env.checkpoint_names(m), vec!["base", "main-cp"]);
    env.err(
        &["--workspace", "fork", "checkpoint", "restore", "main-cp"],
        "checkpoint_not_found",
    );
    env.err(
        &[
            "--workspace",
            "main-v",
            "cat",
            "shared.txt",
            "--at",
            "fork-cp",
        ],
        "checkpoint_not_found",
    );
    env.write(f, "shared.txt", b"fork edit 2");
    env.write(m, "shared.txt", b"main edit 2");
    env.data(&["--workspace", "fork", "checkpoint", "save", "fork-cp2"]);
    env.data(&["--workspace", "main-v", "checkpoint", "save", "main-cp2"]);
    assert_eq!(env.cat(m, "shared.txt"), b"main edit 2");
    assert_eq!(env.cat(f, "shared.txt"), b"fork edit 2");

    // Restoring one side does not move the other.
    env.data(&["--workspace", "fork", "checkpoint", "restore", "fork-cp"]);
    assert_eq!(env.cat(f, "shared.txt"), b"fork edit");
    assert_eq!(env.cat(m, "shared.txt"), b"main edit 2");
    env.data(&["--workspace", "main-v", "checkpoint", "restore", "base"]);
    assert_eq!(env.cat(m, "shared.txt"), b"shared v1");
    assert_eq!(env.cat(m, "dir/keep.txt"), b"keep");
    assert_eq!(env.cat(f, "shared.txt"), b"fork edit");
    env.err(
        &["--workspace", "main-v", "cat", "fork-only.txt"],
        "path_not_found",
    );
    assert_eq!(env.cat(f, "fork-only.txt"), b"f");
    env.err(
        &["--workspace", "fork", "cat", "main-only.txt"],
        "path_not_found",
    );

    // Totals are per workspace as well.
    let fi = env.data(&["vault", "info", "fork"]);
    let mi = env.data(&["vault", "info", "main-v"]);
    assert_eq!(mi["workspace"]["files"], 2);
    assert_eq!(fi["workspace"]["files"], 3);
}

#[test]
fn read_at_a_checkpoint() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f.txt", b"old");
    env.write(None, "gone/x", b"x");
    env.data(&["checkpoint", "save", "c1"]);
    env.write(None, "f.txt", b"new");
    env.data(&["rm", "-r", "gone"]);
    env.write(None, "later.txt", b"l");

    assert_eq!(env.cat_at(None, "f.txt", "c1"), b"old");
    assert_eq!(env.cat(None, "f.txt"), b"new");
    let j = env.data(&["cat", "f.txt", "--at", "c1"]);
    assert_eq!(j["content"], "old");
    assert_eq!(env.cat_at(None, "gone/x", "c1"), b"x");
    let ls: Vec<String> = env
        .data(&["ls", "--at", "c1"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ls, vec!["f.txt", "gone"]);
    assert_eq!(env.data(&["stat", "f.txt", "--at", "c1"])["size"], 3);
    assert_eq!(
        env.data(&["tree", "--at", "c1"])["children"][1]["name"],
        "gone"
    );
    env.err(&["cat", "later.txt", "--at", "c1"], "path_not_found");
    env.err(&["cat", "f.txt", "--at", "nope"], "checkpoint_not_found");
    let e = env.err(&["ls", "--at", "nope"], "checkpoint_not_found");
    assert_eq!(e["details"]["name"], "nope");
    // Reading at a checkpoint changes nothing.
    assert_eq!(env.cat(None, "f.txt"), b"new");
}

#[test]
fn checkpoint_errors_change_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"1");
    env.data(&["checkpoint", "save", "dup", "-m", "original"]);
    env.write(None, "f", b"2");
    let before = env.state(None);

    let e = env.err(&["checkpoint", "save", "dup"], "already_exists");
    assert_eq!(e["details"]["name"], "dup");
    assert_eq!(
        env.data(&["checkpoint", "info", "dup"])["message"],
        "original"
    );
    assert_eq!(env.cat_at(None, "f", "dup"), b"1");

    for bad in [
        "has space",
        ".hidden",
        "a/b",
        "semi;colon",
        "ünïcode",
        &"x".repeat(101),
    ] {
        let e = env.err(&["checkpoint", "save", bad], "invalid_name");
        assert_eq!(e["details"]["name"], json!(bad));
    }
    env.err(&["checkpoint", "save", ""], "invalid_name");

    let e = env.err(
        &["checkpoint", "restore", "missing"],
        "checkpoint_not_found",
    );
    assert_eq!(e["details"]["name"], "missing");
    env.avfs(&["checkpoint", "restore", "missing"])
        .code(3)
        .stderr(predicate::str::contains("checkpoint `missing` not found"));
    env.err(&["checkpoint", "delete", "missing"], "checkpoint_not_found");
    env.err(&["checkpoint", "info", "missing"], "checkpoint_not_found");

    assert_eq!(env.state(None), before);
    assert_eq!(env.cat(None, "f"), b"2");
}
