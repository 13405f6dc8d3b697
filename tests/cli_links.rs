//! Hard links through the real binary: `avfs ln` shares one file between names (content,
//! mode, tags, link count), unlink keeps the other names, links survive checkpoints, restore,
//! undo, forks and merges, quotas count a linked file once, diff names the links, and
//! host hard links round-trip through import and export.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;

use common::TestEnv;
use serde_json::{Value, json};

fn nlink(env: &TestEnv, vault: Option<&str>, path: &str) -> Value {
    env.data(&common::sel(vault, &["stat", path]))["nlink"].clone()
}

fn paths(changes: &Value) -> Vec<String> {
    changes
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn ln_gives_a_file_a_second_name() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"first");
    let linked = env.data(&["ln", "a.txt", "b.txt"]);
    assert_eq!(linked["path"], "/b.txt");
    assert_eq!(linked["type"], "file");
    assert_eq!(linked["nlink"], 2);
    assert_eq!(nlink(&env, None, "a.txt"), 2);

    // A write or chmod or tag through one name shows through the other.
    env.write(None, "b.txt", b"written via b");
    assert_eq!(env.cat(None, "a.txt"), b"written via b");
    env.data(&["chmod", "600", "a.txt"]);
    assert_eq!(env.data(&["stat", "b.txt"])["mode"], 0o600);
    env.data(&["tag", "b.txt", "shared"]);
    assert_eq!(env.data(&["stat", "a.txt"])["tags"], json!(["shared"]));
    env.data(&["write", "--append", "a.txt", "!"]);
    assert_eq!(env.cat(None, "b.txt"), b"written via b!");

    // `ls -l` shows the link count; listings, find and grep show each name once and
    // nothing else.
    let long = env.stdout(&["ls", "-l"]);
    assert!(
        long.lines()
            .any(|l| l.contains(" 2 ") && l.ends_with("a.txt")),
        "{long}"
    );
    let listed: Vec<Value> = env.data(&["ls", "-a", "/"]).as_array().unwrap().clone();
    let names: Vec<&str> = listed.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
    assert_eq!(listed[0]["nlink"], 2);
    let found = env.data(&["find", "*"]);
    assert_eq!(found.as_array().unwrap().len(), 2, "{found}");
    let grep = env.data(&["grep", "via"]);
    assert_eq!(grep.as_array().unwrap().len(), 2, "{grep}");

    // A third name, then unlinking: the others stay, with their content.
    env.data(&["mkdir", "d"]);
    env.data(&["ln", "b.txt", "d/c.txt"]);
    assert_eq!(nlink(&env, None, "a.txt"), 3);
    env.data(&["rm", "a.txt"]);
    assert_eq!(nlink(&env, None, "b.txt"), 2);
    env.data(&["rm", "-r", "d"]);
    assert_eq!(nlink(&env, None, "b.txt"), 1);
    assert_eq!(env.cat(None, "b.txt"), b"written via b!");
    env.err(&["cat", "a.txt"], "path_not_found");

    // mv moves only the name; cp makes an independent file.
    env.data(&["ln", "b.txt", "a.txt"]);
    env.data(&["mv", "a.txt", "moved.txt"]);
    assert_eq!(nlink(&env, None, "moved.txt"), 2);
    env.data(&["cp", "moved.txt", "copy.txt"]);
    assert_eq!(nlink(&env, None, "copy.txt"), 1);
    // Copying onto one of the names writes the shared file, as cp(1) does.
    env.write(None, "other.txt", b"copied over");
    env.data(&["cp", "other.txt", "moved.txt"]);
    assert_eq!(nlink(&env, None, "moved.txt"), 2);
    assert_eq!(env.cat(None, "b.txt"), b"copied over");
    env.data(&["cp", "copy.txt", "moved.txt"]);
    env.data(&["rm", "other.txt"]);
    env.write(None, "copy.txt", b"independent");
    assert_eq!(env.cat(None, "b.txt"), b"written via b!");
    env.data(&["mkdir", "tree"]);
    env.data(&["ln", "b.txt", "tree/inner"]);
    env.data(&["cp", "-r", "tree", "tree2"]);
    assert_eq!(nlink(&env, None, "tree2/inner"), 1);
    assert_eq!(nlink(&env, None, "b.txt"), 3);
    assert_eq!(
        env.stats(None)["live_files"],
        3,
        "b.txt, copy.txt, tree2/inner"
    );

    let check = env.data(&["vault", "check"]);
    assert_eq!(check["ok"], true, "{check}");
}

#[test]
fn ln_refusals_are_typed_and_change_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"x");
    env.data(&["mkdir", "dir"]);
    env.data(&["ln", "-s", "f", "sym"]);
    let before = env.state(None);
    let e = env.err(&["ln", "dir", "dir2"], "hard_link_not_allowed");
    assert_eq!(e["details"]["path"], "/dir");
    env.err(&["ln", "missing", "m2"], "path_not_found");
    env.err(&["ln", "f", "dir"], "already_exists");
    env.err(&["ln", "f", "nodir/x"], "path_not_found");
    env.err(&["ln", "f", "\u{1}inodes"], "invalid_path");
    assert_eq!(env.state(None), before);
    // A symlink is linked itself, as link(2) and GNU `ln` do: two names, one symlink.
    let linked = env.data(&["ln", "sym", "sym2"]);
    assert_eq!(
        (linked["type"].as_str(), linked["nlink"].as_u64()),
        (Some("symlink"), Some(2))
    );
    assert_eq!(linked["target"], "f");
    // -s still makes a symlink, stored verbatim.
    assert_eq!(
        env.data(&["ln", "-s", "nowhere", "dangling"])["type"],
        "symlink"
    );
}

#[test]
fn links_survive_checkpoints_restore_undo_and_forks() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"base");
    env.data(&["ln", "a", "b"]);
    env.data(&["checkpoint", "save", "linked"]);

    env.write(None, "b", b"changed");
    env.data(&["rm", "a"]);
    assert_eq!(nlink(&env, None, "b"), 1);
    // Reading the checkpoint sees the link as it was.
    assert_eq!(env.cat_at(None, "a", "linked"), b"base");

    env.data(&["checkpoint", "restore", "linked"]);
    assert_eq!(env.cat(None, "a"), b"base");
    assert_eq!(nlink(&env, None, "a"), 2);
    env.write(None, "a", b"after restore");
    assert_eq!(env.cat(None, "b"), b"after restore");

    // Undo puts the restored content back, still shared.
    env.data(&["undo"]);
    assert_eq!(env.cat(None, "b"), b"base");
    assert_eq!(nlink(&env, None, "b"), 2);

    // A fork shares nothing mutable with its parent: its writes stay in the fork.
    env.data(&["vault", "fork", "v", "task"]);
    env.write(Some("task"), "a", b"fork edit");
    assert_eq!(env.cat(Some("task"), "b"), b"fork edit");
    assert_eq!(env.cat(None, "b"), b"base");
    env.data(&common::sel(Some("task"), &["ln", "a", "c"]));
    assert_eq!(nlink(&env, Some("task"), "b"), 3);
    assert_eq!(nlink(&env, None, "b"), 2);
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

#[test]
fn merge_combines_link_changes_from_both_sides() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"line 1\nline 2\n");
    env.data(&["ln", "a", "b"]);
    env.data(&["vault", "fork", "v", "task"]);
    // The fork gives the file a third name; the parent changes its content and drops
    // a name.
    env.data(&common::sel(Some("task"), &["ln", "a", "c"]));
    env.write(None, "b", b"line 1 (parent)\nline 2\n");
    env.data(&["rm", "a"]);
    let m = env.data(&["merge", "task"]);
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(m["conflicts"], json!([]));
    assert!(paths(&m["changes"]).iter().all(|p| !p.contains('\u{1}')));
    assert_eq!(env.cat(None, "c"), b"line 1 (parent)\nline 2\n");
    assert_eq!(nlink(&env, None, "b"), 2);
    assert_eq!(nlink(&env, None, "c"), 2);
    env.err(&["stat", "a"], "path_not_found");
    env.write(None, "c", b"one file");
    assert_eq!(env.cat(None, "b"), b"one file");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

/// A hard-linked symlink (linked itself, like link(2)) lives through forks, merges, undo
/// and redo like a linked file: one node, every name, the right link count.
#[test]
fn a_linked_symlink_forks_merges_and_undoes_like_a_linked_file() {
    let env = TestEnv::with_vault("v");
    env.data(&["ln", "-s", "t1", "s"]);
    env.data(&["ln", "s", "s2"]);
    env.data(&["vault", "fork", "v", "task"]);
    // The fork gives it a third name; the parent drops one.
    env.data(&common::sel(Some("task"), &["ln", "s2", "s3"]));
    env.data(&["rm", "s"]);
    let m = env.data(&["merge", "task"]);
    assert_eq!(
        (m["applied"].clone(), m["conflicts"].clone()),
        (json!(true), json!([]))
    );
    for p in ["s2", "s3"] {
        let st = env.data(&["stat", p]);
        assert_eq!(
            (st["type"].as_str(), st["target"].as_str()),
            (Some("symlink"), Some("t1"))
        );
        assert_eq!(st["nlink"], 2, "{p}");
    }
    env.err(&["stat", "s"], "path_not_found");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
    env.data(&["undo"]);
    assert_eq!(nlink(&env, None, "s2"), 1);
    env.err(&["stat", "s3"], "path_not_found");
    env.data(&["redo"]);
    assert_eq!(nlink(&env, None, "s3"), 2);
    // Both forks change the shared symlink's mode: a conflict named by its names.
    env.data(&["vault", "fork", "v", "task2"]);
    env.data(&common::sel(Some("task2"), &["chmod", "700", "s3"]));
    env.data(&["chmod", "750", "s2"]);
    let e = env.err(&["merge", "task2"], "merge_conflict");
    assert_eq!(paths(&e["details"]["conflicts"]), ["/s2", "/s3"], "{e}");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

#[test]
fn merge_conflicts_on_a_linked_file_name_its_links() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"base\n");
    env.data(&["ln", "a", "b"]);
    env.data(&["vault", "fork", "v", "task"]);
    env.write(Some("task"), "b", b"fork\n");
    env.write(None, "a", b"parent\n");
    let before = env.state(None);
    let e = env.err(&["merge", "task"], "merge_conflict");
    let conflicts = &e["details"]["conflicts"];
    assert_eq!(paths(conflicts), ["/a", "/b"], "{e}");
    assert_eq!(conflicts[0]["ours"], "modified");
    assert_eq!(conflicts[0]["theirs"], "modified");
    assert_eq!(env.state(None), before);
    // Resolved with the fork's side, both names show it.
    env.data(&["merge", "task", "--strategy", "theirs"]);
    assert_eq!(env.cat(None, "a"), b"fork\n");
    assert_eq!(nlink(&env, None, "a"), 2);
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

#[test]
fn diff_names_the_links_not_the_shared_inode() {
    let env = TestEnv::with_vault("v");
    for i in 0..20 {
        env.write(None, &format!("src/m{i}/f.txt"), b"unchanged");
    }
    env.write(None, "src/m3/shared", b"v1");
    env.data(&["ln", "src/m3/shared", "src/m17/alias"]);
    env.data(&["checkpoint", "save", "c1"]);
    env.write(None, "src/m17/alias", b"v2");
    let d = env.data(&["diff"]);
    assert_eq!(
        paths(&d["changes"]),
        ["/src/m17/alias", "/src/m3/shared"],
        "{d}"
    );
    assert_eq!(d["changes"][0]["status"], "modified");
    // Adding a name is one added path.
    env.data(&["checkpoint", "save", "c2"]);
    env.data(&["ln", "src/m3/shared", "third"]);
    assert_eq!(paths(&env.data(&["diff"])["changes"]), ["/third"]);
}

#[test]
fn a_hard_link_does_not_count_twice_against_quotas() {
    let env = TestEnv::with_vault("v");
    let mb = vec![7u8; 1024 * 1024];
    env.data_in(&["write", "big"], &mb);
    env.data(&["quota", "set", "--max-size-mb", "1", "--max-files", "1"]);
    // A second name adds no file and no bytes.
    env.data(&["ln", "big", "big2"]);
    let stats = env.stats(None);
    assert_eq!(stats["live_files"], 1);
    assert_eq!(stats["logical_bytes"], 1024 * 1024);
    // Growing the file through either name still hits the limit.
    env.err_in(&["write", "--append", "big2"], b"more", "quota_exceeded");
    env.data(&["rm", "big"]);
    assert_eq!(env.stats(None)["live_files"], 1);
    env.data(&["rm", "big2"]);
    assert_eq!(env.stats(None)["live_files"], 0);
}

#[test]
fn host_hard_links_round_trip_through_import_and_export() {
    let env = TestEnv::with_vault("v");
    let src = env.host("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("one"), b"shared content").unwrap();
    fs::hard_link(src.join("one"), src.join("sub/two")).unwrap();
    fs::write(src.join("alone"), b"alone").unwrap();
    let r = env.data(&["import", src.to_str().unwrap()]);
    assert_eq!(r["files"], 2);
    assert_eq!(r["hard_links"], 1);
    assert_eq!(nlink(&env, None, "one"), 2);
    assert_eq!(nlink(&env, None, "alone"), 1);
    env.write(None, "sub/two", b"changed in the vault");
    assert_eq!(env.cat(None, "one"), b"changed in the vault");

    // Importing the same tree again keeps one linked file.
    env.data(&["import", src.to_str().unwrap()]);
    assert_eq!(nlink(&env, None, "sub/two"), 2);
    assert_eq!(env.cat(None, "sub/two"), b"shared content");

    let out = env.host("out");
    let e = env.data(&["export", "/", out.to_str().unwrap()]);
    assert_eq!(e["files"], 2);
    assert_eq!(e["hard_links"], 1);
    let (one, two, alone) = (
        fs::metadata(out.join("one")).unwrap(),
        fs::metadata(out.join("sub/two")).unwrap(),
        fs::metadata(out.join("alone")).unwrap(),
    );
    assert_eq!(one.ino(), two.ino());
    assert_eq!(one.nlink(), 2);
    assert_eq!(alone.nlink(), 1);
    assert_eq!(fs::read(out.join("sub/two")).unwrap(), b"shared content");
    // Nothing of the reserved directory reaches the host.
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["alone", "one", "sub"]);
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}
