//! File commands through the real binary: ls, cat, write, mkdir, rm, cp, mv, ln, chmod, tree,
//! stat, find, grep, log, tags and metadata, and the errors users hit most, each checked to
//! leave the vault unchanged.

mod common;

use std::os::unix::fs::PermissionsExt;

use base64::Engine;
use common::{TestEnv, random_bytes};
use predicates::prelude::*;
use serde_json::{Value, json};

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

fn paths(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn stat(env: &TestEnv, path: &str) -> Value {
    env.data(&["stat", path])
}

#[test]
fn ls_plain_long_and_all() {
    let env = TestEnv::with_vault("v");
    env.write(None, ".hidden", b"h");
    env.write(None, "visible.txt", b"hello");
    env.data(&["mkdir", "dir"]);
    env.data(&["ln", "-s", "visible.txt", "link"]);

    assert_eq!(
        env.stdout(&["ls"]),
        "dir/\nlink -> visible.txt\nvisible.txt\n"
    );
    assert_eq!(
        env.stdout(&["ls", "-a"]),
        ".hidden\ndir/\nlink -> visible.txt\nvisible.txt\n"
    );
    let long = env.stdout(&["ls", "-l"]);
    let line = long.lines().find(|l| l.ends_with("  visible.txt")).unwrap();
    assert!(line.starts_with("-rw-r--r--"), "{line}");
    assert!(line.contains("  5  "), "size missing: {line}");
    let dline = long.lines().find(|l| l.ends_with("dir/")).unwrap();
    assert!(dline.starts_with("drwxr-xr-x"), "{dline}");
    assert!(!long.contains(".hidden"));
    assert!(env.stdout(&["ls", "-l", "-a"]).contains(".hidden"));

    let j = env.data(&["ls", "-a"]);
    assert_eq!(names(&j), vec![".hidden", "dir", "link", "visible.txt"]);
    let types: Vec<&str> = j
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["file", "dir", "symlink", "file"]);
    assert_eq!(j[3]["size"], 5);
    assert_eq!(j[3]["mode"], 0o644);
    assert_eq!(j[2]["target"], "visible.txt");

    // ls of a file lists the file; ls of a subdirectory lists its entries.
    assert_eq!(
        paths(&env.data(&["ls", "visible.txt"])),
        vec!["/visible.txt"]
    );
    env.write(None, "dir/inner", b"");
    assert_eq!(paths(&env.data(&["ls", "/dir"])), vec!["/dir/inner"]);
    env.err(&["ls", "nope"], "path_not_found");
}

#[test]
fn cat_is_binary_safe() {
    let env = TestEnv::with_vault("v");
    let mut data = random_bytes(42, 70_000);
    data.extend_from_slice(b"\0\0\r\n\xff\xfe");
    data.insert(0, 0);
    env.data_in(&["write", "blob.bin"], &data);
    assert_eq!(env.cat(None, "blob.bin"), data);

    let j = env.data(&["cat", "blob.bin"]);
    assert_eq!(j["encoding"], "base64");
    assert_eq!(j["size"], data.len());
    assert_eq!(j["path"], "/blob.bin");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(j["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, data);

    // Text comes back as utf8, byte for byte (trailing newline included).
    let text = "héllo wörld\nzweite Zeile\n";
    env.data(&["write", "t.txt", text]);
    let j = env.data(&["cat", "t.txt"]);
    assert_eq!(j["encoding"], "utf8");
    assert_eq!(j["content"], text);
    assert_eq!(env.cat(None, "t.txt"), text.as_bytes());

    // Multi-chunk content with an all-zero stretch (a hole) round-trips.
    let big = common::big_file();
    env.data_in(&["write", "big.bin"], &big);
    assert_eq!(env.cat(None, "big.bin"), big);
    assert_eq!(stat(&env, "big.bin")["size"], big.len());

    // Empty stdin writes an empty file.
    env.data_in(&["write", "empty"], b"");
    assert_eq!(env.cat(None, "empty"), b"");
    assert_eq!(stat(&env, "empty")["size"], 0);
}

#[test]
fn write_arg_stdin_append_mode_parents() {
    let env = TestEnv::with_vault("v");
    let w = env.data(&["write", "a.txt", "from arg"]);
    assert_eq!(w["path"], "/a.txt");
    assert_eq!(w["size"], 8);
    assert_eq!(env.cat(None, "a.txt"), b"from arg");

    env.data_in(&["write", "a.txt"], b"from stdin");
    assert_eq!(env.cat(None, "a.txt"), b"from stdin");

    env.data(&["write", "--append", "a.txt", " +more"]);
    env.data_in(&["write", "-a", "a.txt"], b" +stdin");
    assert_eq!(env.cat(None, "a.txt"), b"from stdin +more +stdin");
    // Appending to a missing file creates it.
    env.data(&["write", "-a", "new.txt", "first"]);
    assert_eq!(env.cat(None, "new.txt"), b"first");

    // --mode for a new file; an existing file keeps its mode when rewritten.
    env.data(&["write", "--mode", "755", "run.sh", "#!/bin/sh\n"]);
    assert_eq!(stat(&env, "run.sh")["mode"], 0o755);
    assert_eq!(stat(&env, "run.sh")["mode_string"], "-rwxr-xr-x");
    env.data(&["write", "run.sh", "#!/bin/sh\necho hi\n"]);
    assert_eq!(stat(&env, "run.sh")["mode"], 0o755);
    assert_eq!(stat(&env, "a.txt")["mode"], 0o644);

    // Parents: refused without -p (nothing created), made with -p.
    env.err(&["write", "x/y/z.txt", "deep"], "path_not_found");
    env.err(&["ls", "x"], "path_not_found");
    env.data(&["write", "-p", "x/y/z.txt", "deep"]);
    assert_eq!(env.cat(None, "x/y/z.txt"), b"deep");
    assert_eq!(stat(&env, "x/y")["type"], "dir");

    // Writing over a directory is refused.
    env.err(&["write", "x", "nope"], "is_a_directory");
    assert_eq!(stat(&env, "x")["type"], "dir");
}

#[test]
fn mkdir_and_parents() {
    let env = TestEnv::with_vault("v");
    let m = env.data(&["mkdir", "a", "b"]);
    assert_eq!(m["paths"], json!(["/a", "/b"]));
    env.err(&["mkdir", "a"], "already_exists");
    env.err(&["mkdir", "x/y"], "path_not_found");
    env.err(&["ls", "x"], "path_not_found");
    env.data(&["mkdir", "-p", "x/y/z"]);
    env.data(&["mkdir", "-p", "x/y/z"]); // idempotent with -p
    env.data(&["mkdir", "--mode", "700", "priv"]);
    assert_eq!(stat(&env, "priv")["mode"], 0o700);
    assert_eq!(stat(&env, "x/y/z")["type"], "dir");
    env.write(None, "f", b"file");
    env.err(&["mkdir", "f"], "already_exists");
    env.err(&["mkdir", "-p", "f/sub"], "not_a_directory");
    // A failing path in a multi-path mkdir creates none of them.
    env.err(&["mkdir", "ok1", "missing/child"], "path_not_found");
    env.err(&["ls", "ok1"], "path_not_found");
}

#[test]
fn rm_variants() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"1");
    env.write(None, "d/sub/g", b"2");
    env.data(&["mkdir", "emptydir"]);

    let r = env.data(&["rm", "f"]);
    assert_eq!(r["paths"], json!(["/f"]));
    env.err(&["cat", "f"], "path_not_found");

    // A non-empty directory needs -r; the refusal removes nothing.
    let e = env.err(&["rm", "d"], "directory_not_empty");
    assert_eq!(e["details"]["path"], "/d");
    assert_eq!(env.cat(None, "d/sub/g"), b"2");
    // An empty directory goes without -r.
    env.data(&["rm", "emptydir"]);
    env.err(&["ls", "emptydir"], "path_not_found");
    env.data(&["rm", "-r", "d"]);
    env.err(&["ls", "d"], "path_not_found");
    assert_eq!(env.data(&["ls"]), json!([]));

    env.err(&["rm", "gone"], "path_not_found");
    let r = env.data(&["rm", "-f", "gone"]);
    assert_eq!(r["paths"], json!([]));
    // The root is never removed.
    env.write(None, "keep", b"k");
    env.err(&["rm", "-r", "/"], "invalid_path");
    assert_eq!(env.cat(None, "keep"), b"k");
    assert_eq!(env.stats(None)["live_files"], 1);
}

fn populate_tree(env: &TestEnv, root: &str, n: usize) {
    for i in 0..n {
        let path = format!("{root}/d{}/sub{}/file{i}.txt", i % 3, i % 2);
        env.write(None, &path, format!("content of file {i}\n").as_bytes());
    }
}

#[test]
fn cp_recursive_shares_content() {
    let env = TestEnv::with_vault("v");
    populate_tree(&env, "src", 12);
    env.data(&["checkpoint", "save", "base"]);
    let before = env.stats(None);
    let c = env.data(&["cp", "-r", "src", "dst"]);
    assert_eq!(c["from"], "/src");
    assert_eq!(c["to"], "/dst");
    let after = env.stats(None);
    assert_eq!(after["live_files"], 24);
    assert_eq!(
        after["logical_bytes"].as_u64().unwrap(),
        2 * before["logical_bytes"].as_u64().unwrap()
    );
    assert_eq!(after["content_bytes"], before["content_bytes"]);
    // Copying a 12-file, 10-directory tree stores no content and at most a new root node and
    // root tree: the copied subtree's objects are shared, not rewritten.
    let grown = |s: &Value| s["objects"].as_u64().unwrap() - before["objects"].as_u64().unwrap();
    assert!(
        grown(&after) <= 2,
        "cp -r stored {} new objects",
        grown(&after)
    );
    // Checkpointing the copy does not store the tree again either.
    env.data(&["checkpoint", "save", "copied"]);
    let saved = env.stats(None);
    assert_eq!(saved["content_bytes"], before["content_bytes"]);
    assert!(grown(&saved) <= 2, "{before} -> {saved}");

    // Same content, and the copy is independent of the original.
    let files = env.files(None);
    for (p, data) in &files {
        if let Some(rest) = p.strip_prefix("/src/") {
            assert_eq!(&files[&format!("/dst/{rest}")], data);
        }
    }
    env.write(None, "dst/d0/sub0/file0.txt", b"changed in copy");
    assert_eq!(
        env.cat(None, "src/d0/sub0/file0.txt"),
        b"content of file 0\n"
    );

    // Without -r a directory is refused; a file copied onto a directory goes inside it.
    env.err(&["cp", "src", "other"], "is_a_directory");
    env.err(&["ls", "other"], "path_not_found");
    env.write(None, "one.txt", b"1");
    let c = env.data(&["cp", "one.txt", "dst"]);
    assert_eq!(c["to"], "/dst/one.txt");
    assert_eq!(env.cat(None, "dst/one.txt"), b"1");
    env.err(&["cp", "-r", "src", "src/d0/inside"], "invalid_path");
    env.err(&["cp", "nope", "x"], "path_not_found");
}

#[test]
fn mv_file_over_file_replaces_it() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"one");
    env.write(None, "b", b"two");
    let m = env.data(&["mv", "a", "b"]);
    assert_eq!(m["to"], "/b");
    assert_eq!(env.cat(None, "b"), b"one");
    env.err(&["cat", "a"], "path_not_found");
    assert_eq!(env.stats(None)["live_files"], 1);
    assert_eq!(env.stats(None)["logical_bytes"], 3);
    // Rename into another directory.
    env.data(&["mkdir", "d"]);
    env.data(&["mv", "b", "d/c"]);
    assert_eq!(env.cat(None, "d/c"), b"one");
}

#[test]
fn mv_dir_over_empty_dir_replaces_it() {
    let env = TestEnv::with_vault("v");
    env.write(None, "src/x", b"x");
    env.write(None, "src/deep/y", b"y");
    env.data(&["mkdir", "dst"]);
    let m = env.data(&["mv", "src", "dst"]);
    assert_eq!(m["to"], "/dst");
    assert_eq!(env.cat(None, "dst/x"), b"x");
    assert_eq!(env.cat(None, "dst/deep/y"), b"y");
    env.err(&["ls", "src"], "path_not_found");
    env.err(&["ls", "dst/src"], "path_not_found");
    assert_eq!(env.stats(None)["live_files"], 2);
}

#[test]
fn mv_dir_over_non_empty_dir_is_refused() {
    let env = TestEnv::with_vault("v");
    env.write(None, "src/x", b"x");
    env.write(None, "dst/y", b"y");
    let before = env.state(None);
    let e = env.err(&["mv", "src", "dst"], "directory_not_empty");
    assert_eq!(e["details"]["path"], "/dst");
    assert_eq!(env.state(None), before);
    // A directory cannot go over a file, nor into itself.
    env.write(None, "file", b"f");
    env.err(&["mv", "src", "file"], "not_a_directory");
    env.err(&["mv", "src", "src/inner"], "invalid_path");
    env.err(&["mv", "nope", "x"], "path_not_found");
    assert_eq!(env.cat(None, "src/x"), b"x");
    assert_eq!(env.cat(None, "file"), b"f");
}

/// rename(2) semantics, as the brief and `mv --help` ("replaces a file or an empty directory
/// at the destination") describe: a file cannot replace a directory.
#[test]
fn mv_file_over_dir_is_a_directory() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"file");
    env.data(&["mkdir", "d"]);
    let before = env.state(None);
    let e = env.err(&["mv", "f", "d"], "is_a_directory");
    assert_eq!(e["details"]["path"], "/d");
    assert_eq!(env.state(None), before, "a refused mv changed the vault");
}

#[test]
fn ln_symlink() {
    let env = TestEnv::with_vault("v");
    env.write(None, "dir/target.txt", b"pointed at");
    let l = env.data(&["ln", "-s", "dir/target.txt", "link"]);
    assert_eq!(l["type"], "symlink");
    assert_eq!(l["target"], "dir/target.txt");
    assert_eq!(l["path"], "/link");
    // Targets are stored verbatim, dangling or absolute alike.
    env.data(&["ln", "-s", "../../../nowhere", "dir/dangling"]);
    env.data(&["ln", "-s", "/etc/passwd", "abs"]);
    assert_eq!(stat(&env, "dir/dangling")["target"], "../../../nowhere");
    assert_eq!(stat(&env, "abs")["target"], "/etc/passwd");
    assert_eq!(stat(&env, "link")["size"], "dir/target.txt".len());
    env.avfs(&["ls", "-l"])
        .success()
        .stdout(predicate::str::contains("link -> dir/target.txt"));
    env.err(&["ln", "-s", "x", "link"], "already_exists");
    env.err(&["ln", "-s", "x", "dir/target.txt"], "already_exists");
    assert_eq!(env.cat(None, "dir/target.txt"), b"pointed at");
    // Links survive export as links.
    let out = env.host("out");
    env.data(&["export", "/", out.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        std::path::Path::new("dir/target.txt")
    );
    assert_eq!(std::fs::read(out.join("link")).unwrap(), b"pointed at");
}

/// `cat` of a symlink prints what it points to, like cat(1), not the link's target string.
#[test]
fn cat_follows_symlinks() {
    let env = TestEnv::with_vault("v");
    env.write(None, "dir/target.txt", b"pointed at");
    env.data(&["ln", "-s", "dir/target.txt", "link"]);
    env.data(&["ln", "-s", "target.txt", "dir/sibling"]);
    assert_eq!(env.cat(None, "link"), b"pointed at");
    assert_eq!(env.cat(None, "dir/sibling"), b"pointed at");
}

#[test]
fn chmod_exec_bit_survives_checkpoint_restore_export() {
    let env = TestEnv::with_vault("v");
    env.write(None, "bin/tool.sh", b"#!/bin/sh\necho tool\n");
    env.write(None, "bin/data", b"d");
    let c = env.data(&["chmod", "755", "bin/tool.sh"]);
    assert_eq!(c["paths"], json!(["/bin/tool.sh"]));
    env.data(&["chmod", "0700", "bin"]);
    assert_eq!(stat(&env, "bin/tool.sh")["mode"], 0o755);
    assert_eq!(stat(&env, "bin")["mode"], 0o700);
    env.data(&["checkpoint", "save", "exec"]);

    env.data(&["chmod", "644", "bin/tool.sh", "bin/data"]);
    env.data(&["chmod", "755", "bin"]);
    assert_eq!(stat(&env, "bin/tool.sh")["mode"], 0o644);
    assert_eq!(
        env.data(&["stat", "bin/tool.sh", "--at", "exec"])["mode"],
        0o755
    );

    env.data(&["checkpoint", "restore", "exec"]);
    assert_eq!(stat(&env, "bin/tool.sh")["mode"], 0o755);
    assert_eq!(stat(&env, "bin/data")["mode"], 0o644);
    assert_eq!(stat(&env, "bin")["mode"], 0o700);

    let out = env.host("out");
    env.data(&["export", "/", out.to_str().unwrap()]);
    let mode = |p: &str| std::fs::metadata(out.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("bin/tool.sh"), 0o755);
    assert_eq!(mode("bin/data"), 0o644);
    assert_eq!(mode("bin"), 0o700);
    let run = std::process::Command::new(out.join("bin/tool.sh"))
        .output()
        .unwrap();
    assert_eq!(run.stdout, b"tool\n");

    env.err(&["chmod", "755", "nope"], "path_not_found");
    env.avfs(&["chmod", "9z9", "bin"]).code(2);
}

#[test]
fn tree_text_json_and_depth() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a/b/c.txt", b"abc");
    env.write(None, "a/d.txt", b"d");
    env.write(None, "z.txt", b"zz");
    let text = env.stdout(&["tree"]);
    assert_eq!(
        text,
        "/\n├── a/\n│   ├── b/\n│   │   └── c.txt\n│   └── d.txt\n└── z.txt\n\n2 directories, 3 files\n"
    );
    let t = env.data(&["tree"]);
    assert_eq!(t["name"], "/");
    assert_eq!(t["type"], "dir");
    assert_eq!(names(&t["children"]), vec!["a", "z.txt"]);
    assert_eq!(t["children"][1]["size"], 2);
    assert_eq!(names(&t["children"][0]["children"]), vec!["b", "d.txt"]);
    let shallow = env.data(&["tree", "-L", "1"]);
    assert_eq!(names(&shallow["children"]), vec!["a", "z.txt"]);
    assert!(shallow["children"][0].get("children").is_none());
    let sub = env.data(&["tree", "a/b"]);
    assert_eq!(sub["name"], "b");
    assert_eq!(names(&sub["children"]), vec!["c.txt"]);
    env.err(&["tree", "nope"], "path_not_found");
}

#[test]
fn stat_reports_metadata() {
    let env = TestEnv::with_vault("v");
    env.data(&["write", "--mode", "640", "f.txt", "12345"]);
    let s = stat(&env, "f.txt");
    assert_eq!(s["path"], "/f.txt");
    assert_eq!(s["name"], "f.txt");
    assert_eq!(s["type"], "file");
    assert_eq!(s["size"], 5);
    assert_eq!(s["mode"], 0o640);
    assert_eq!(s["mode_string"], "-rw-r-----");
    assert_eq!(s["content_id"].as_str().unwrap().len(), 64);
    assert!(s["mtime"].as_i64().unwrap() > 0);
    // Same content, same content id.
    env.data(&["write", "g.txt", "12345"]);
    assert_eq!(stat(&env, "g.txt")["content_id"], s["content_id"]);
    let root = stat(&env, "/");
    assert_eq!(root["type"], "dir");
    assert_eq!(root["name"], "/");
    env.avfs(&["stat", "f.txt"])
        .success()
        .stdout(predicate::str::contains("0640 -rw-r-----"));
    env.err(&["stat", "nope"], "path_not_found");
}

#[test]
fn find_by_glob_type_and_size() {
    let env = TestEnv::with_vault("v");
    env.write(None, "src/main.rs", b"fn main() {}\n");
    env.write(None, "src/util/mod.rs", b"pub mod x;\n");
    env.write(None, "README.md", b"readme");
    env.data_in(&["write", "-p", "data/big.bin"], &vec![7u8; 5000]);
    env.data(&["ln", "-s", "src/main.rs", "main-link.rs"]);

    let rs = env.data(&["find", "*.rs"]);
    assert_eq!(
        paths(&rs),
        vec!["/main-link.rs", "/src/main.rs", "/src/util/mod.rs"]
    );
    let rs_files = env.data(&["find", "*.rs", "--type", "f"]);
    assert_eq!(paths(&rs_files), vec!["/src/main.rs", "/src/util/mod.rs"]);
    assert_eq!(rs_files[0]["type"], "file");
    assert_eq!(rs_files[0]["size"], 13);
    let links = env.data(&["find", "*", "-t", "l"]);
    assert_eq!(paths(&links), vec!["/main-link.rs"]);
    let dirs = env.data(&["find", "*", "-t", "d", "/src"]);
    assert_eq!(paths(&dirs), vec!["/src", "/src/util"]);
    let big = env.data(&["find", "*", "--size", "+1k"]);
    assert_eq!(paths(&big), vec!["/data/big.bin"]);
    let small = env.data(&["find", "*", "-t", "f", "--size", "-12"]);
    assert_eq!(paths(&small), vec!["/README.md", "/src/util/mod.rs"]);
    let exact = env.data(&["find", "*", "--size", "6"]);
    assert_eq!(paths(&exact), vec!["/README.md"]);
    let under = env.data(&["find", "mod.rs", "src/util"]);
    assert_eq!(paths(&under), vec!["/src/util/mod.rs"]);
    assert_eq!(
        env.stdout(&["find", "*.md"]).trim(),
        "/README.md",
        "text output is one path per line"
    );
    env.err(&["find", "*", "--type", "x"], "invalid_argument");
    env.err(&["find", "*", "--size", "lots"], "invalid_argument");
    env.err(&["find", "*", "nope"], "path_not_found");
}

#[test]
fn grep_regex_and_ignore_case() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.rs", b"fn main() {}\n// TODO fix this\n");
    env.write(
        None,
        "sub/b.rs",
        b"// todo: later\nlet x = 1;\n// ToDo mixed\n",
    );
    env.data_in(&["write", "bin.dat"], b"TODO\0binary");

    let m = env.data(&["grep", "TODO"]);
    assert_eq!(
        m,
        json!([{"path": "/a.rs", "line": 2, "text": "// TODO fix this"}])
    );
    let mi = env.data(&["grep", "-i", "todo"]);
    let hits: Vec<(String, u64)> = mi
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["path"].as_str().unwrap().to_string(),
                h["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        hits,
        vec![
            ("/a.rs".to_string(), 2),
            ("/sub/b.rs".to_string(), 1),
            ("/sub/b.rs".to_string(), 3)
        ],
        "binary files are skipped"
    );
    let sub = env.data(&["grep", "-i", "^// todo", "sub"]);
    assert_eq!(sub.as_array().unwrap().len(), 2);
    let re = env.data(&["grep", r"let \w+ = \d"]);
    assert_eq!(re[0]["path"], "/sub/b.rs");
    assert_eq!(re[0]["line"], 2);
    assert_eq!(env.data(&["grep", "absent"]), json!([]));
    assert_eq!(
        env.stdout(&["grep", "TODO"]).trim(),
        "/a.rs:2:// TODO fix this"
    );
    env.err(&["grep", "("], "invalid_argument");
}

#[test]
fn log_across_checkpoints() {
    let env = TestEnv::with_vault("v");
    env.data(&["write", "f", "v1"]);
    env.data(&["checkpoint", "save", "c1"]);
    env.data(&["checkpoint", "save", "c2"]); // unchanged: collapses into c1
    env.data(&["write", "f", "v22"]);
    env.data(&["checkpoint", "save", "c3"]);
    env.data(&["chmod", "600", "f"]);
    env.data(&["checkpoint", "save", "c4"]);
    env.data(&["rm", "f"]);
    let log = env.data(&["log", "f"]);
    let rows: Vec<(Value, String, u64)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["checkpoint"].clone(),
                v["type"].as_str().unwrap().to_string(),
                v["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (json!("c1"), "file".to_string(), 2),
            (json!("c3"), "file".to_string(), 3),
            (json!("c4"), "file".to_string(), 3),
            (json!(null), "deleted".to_string(), 0),
        ]
    );
    assert_eq!(log[2]["mode"], 0o600);
    assert_ne!(log[0]["content_id"], log[1]["content_id"]);
    assert_eq!(log[1]["content_id"], log[2]["content_id"]);
    // A path created after the checkpoints has only a live version.
    env.data(&["write", "new", "n"]);
    let log = env.data(&["log", "new"]);
    assert_eq!(log.as_array().unwrap().len(), 1);
    assert_eq!(log[0]["checkpoint"], json!(null));
    env.err(&["log", "never"], "path_not_found");
}

#[test]
fn tags_and_metadata() {
    let env = TestEnv::with_vault("v");
    env.write(None, "doc.md", b"doc");
    let t = env.data(&["tag", "doc.md", "draft", "review", "urgent"]);
    assert_eq!(t["tags"], json!(["draft", "review", "urgent"]));
    let t = env.data(&["untag", "doc.md", "urgent", "not-there"]);
    assert_eq!(t["tags"], json!(["draft", "review"]));
    assert_eq!(stat(&env, "doc.md")["tags"], json!(["draft", "review"]));

    let m = env.data(&["meta", "set", "doc.md", "owner", "ann"]);
    assert_eq!(m, json!({"path": "/doc.md", "meta": {"owner": "ann"}}));
    env.data(&["meta", "set", "doc.md", "status", "wip"]);
    assert_eq!(
        env.data(&["meta", "get", "doc.md"])["meta"],
        json!({"owner": "ann", "status": "wip"})
    );
    assert_eq!(
        env.data(&["meta", "get", "doc.md", "owner"])["meta"],
        json!({"owner": "ann"})
    );
    assert_eq!(
        env.stdout(&["meta", "get", "doc.md", "owner"]).trim(),
        "ann"
    );
    env.err(&["meta", "get", "doc.md", "nokey"], "invalid_argument");

    // Tags and metadata are checkpointed and restored with the node, and survive rewrites.
    env.data(&["checkpoint", "save", "tagged"]);
    env.data(&["write", "doc.md", "doc v2"]);
    assert_eq!(stat(&env, "doc.md")["meta"]["owner"], "ann");
    let u = env.data(&["meta", "unset", "doc.md", "owner"]);
    assert_eq!(u["meta"], json!({"status": "wip"}));
    env.err(&["meta", "unset", "doc.md", "owner"], "invalid_argument");
    env.data(&["untag", "doc.md", "draft", "review"]);
    assert_eq!(stat(&env, "doc.md")["tags"], json!([]));
    env.data(&["checkpoint", "restore", "tagged"]);
    let s = stat(&env, "doc.md");
    assert_eq!(s["tags"], json!(["draft", "review"]));
    assert_eq!(s["meta"], json!({"owner": "ann", "status": "wip"}));

    env.err(&["tag", "doc.md", "has space"], "invalid_name");
    env.err(&["tag", "nope", "x"], "path_not_found");
    env.err(&["meta", "set", "nope", "k", "v"], "path_not_found");
    assert_eq!(stat(&env, "doc.md")["tags"], json!(["draft", "review"]));
}

#[test]
fn path_not_found_changes_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "keep/a.txt", b"a");
    env.data(&["checkpoint", "save", "base"]);
    let before = env.state(None);
    for args in [
        &["cat", "missing"][..],
        &["rm", "missing"],
        &["mv", "missing", "elsewhere"],
        &["cp", "missing", "elsewhere"],
        &["chmod", "600", "missing"],
        &["stat", "keep/missing"],
        &["write", "missing-dir/f", "x"],
        &["ls", "missing"],
    ] {
        let e = env.err(args, "path_not_found");
        assert!(e["details"]["path"].as_str().unwrap().starts_with('/'));
    }
    env.avfs(&["cat", "missing"])
        .code(3)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("no such file or directory"));
    assert_eq!(env.state(None), before);
    let audit = env.audit(None, 20);
    let rm = audit
        .iter()
        .find(|r| r["operation"] == "rm")
        .expect("failed rm is audited");
    assert_eq!(rm["result"], "path_not_found");
    assert_eq!(rm["paths"], json!(["/missing"]));
    assert_eq!(rm["actor"], "test-agent");
}

#[test]
fn not_a_directory_changes_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"i am a file");
    let before = env.state(None);
    let e = env.err(&["write", "a/b", "x"], "not_a_directory");
    assert_eq!(e["details"]["path"], "/a");
    env.err(&["write", "-p", "a/b/c", "x"], "not_a_directory");
    env.err(&["mkdir", "a/sub"], "not_a_directory");
    env.err(&["ls", "a/b"], "not_a_directory");
    env.avfs(&["write", "a/b", "x"])
        .code(5)
        .stderr(predicate::str::contains("not a directory"));
    assert_eq!(env.state(None), before);
    assert_eq!(env.cat(None, "a"), b"i am a file");
    let audit = env.audit(None, 10);
    let failed: Vec<&Value> = audit
        .iter()
        .filter(|r| r["result"] == "not_a_directory")
        .collect();
    assert!(
        failed
            .iter()
            .any(|r| r["operation"] == "write" && r["paths"] == json!(["/a/b"])),
        "{audit:#?}"
    );
    assert!(failed.iter().all(|r| r["detail"].as_str().is_some()));
}

#[test]
fn invalid_path_changes_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a", b"a");
    let before = env.state(None);
    for args in [
        &["write", "../x", "escape"][..],
        &["write", "-p", "a/../../x", "escape"],
        &["cat", "../../etc/passwd"],
        &["mkdir", "-p", "../up"],
        &["rm", "-r", ".."],
        &["cp", "a", "../a"],
        &["mv", "a", "../../a"],
        &["ln", "-s", "a", "../l"],
    ] {
        let e = env.err(args, "invalid_path");
        assert!(
            e["details"]["reason"].as_str().unwrap().contains(".."),
            "{e:#}"
        );
    }
    env.avfs(&["write", "../x", "escape"])
        .code(5)
        .stderr(predicate::str::contains("invalid path"));
    assert_eq!(env.state(None), before);
    // Nothing escaped to the host either.
    assert!(!env.dir.path().join("x").exists());
    assert!(!env.work.join("x").exists());
    assert!(!env.dir.path().join("up").exists());
}

/// A refused escape attempt (`../x`) is exactly what an audit log is for: like every other
/// failed change, it leaves a failure record naming the operation and the result.
#[test]
fn invalid_path_attempts_are_audited() {
    let env = TestEnv::with_vault("v");
    env.err(&["write", "../escape", "x"], "invalid_path");
    let audit = env.audit(None, 10);
    assert!(
        audit
            .iter()
            .any(|r| r["operation"] == "write" && r["result"] == "invalid_path"),
        "no audit record of the refused write: {audit:#?}"
    );
}

/// A name with a newline or tab cannot break a listing: ls, tree and find quote it as GNU
/// ls does (`$'a\nb'`); JSON keeps the raw name.
#[test]
fn names_with_control_characters_are_quoted_in_listings() {
    let env = TestEnv::with_vault("v");
    env.data(&["mkdir", "/d"]);
    env.data(&["write", "/d/new\nline\ttab", "x"]);
    env.data(&["write", "/d/plain", "y"]);
    let ls = env.stdout(&["ls", "/d"]);
    assert_eq!(
        ls.lines().collect::<Vec<_>>(),
        ["$'new\\nline\\ttab'", "plain"]
    );
    let long = env.stdout(&["ls", "-l", "/d"]);
    assert_eq!(long.lines().count(), 2, "{long}");
    assert!(env.stdout(&["tree", "/d"]).contains("$'new\\nline\\ttab'"));
    let found = env.stdout(&["find", "*", "/d"]);
    assert!(
        found.lines().any(|l| l == "$'/d/new\\nline\\ttab'"),
        "{found}"
    );
    let json = env.data(&["ls", "/d"]);
    assert_eq!(json[0]["name"], "new\nline\ttab");
}

/// `..` after a regular file, or a trailing `/` on one, fails as on a host (ENOTDIR):
/// lexical parsing must not let `f/..` name the directory it is in.
#[test]
fn dot_dot_or_a_trailing_slash_after_a_file_is_not_a_directory() {
    let env = TestEnv::with_vault("v");
    env.data(&["mkdir", "-p", "/a/b/c"]);
    env.data(&["write", "/a/b/c/f", "x"]);
    for bad in ["/a/b/c/f/..", "/a/b/c/f/../f", "/a/b/c/f/"] {
        let e = env.err(&["ls", bad], "not_a_directory");
        assert_eq!(e["details"]["path"], "/a/b/c/f", "{bad}");
    }
    env.err(&["cat", "/a/b/c/f/"], "not_a_directory");
    env.err(&["write", "/a/b/c/f/../g", "y"], "not_a_directory");
    env.err(&["ls", "/a/nope/.."], "path_not_found");
    // Through directories `..` is fine.
    assert_eq!(env.data(&["ls", "/a/b/c/.."])[0]["name"], "c");
    assert_eq!(env.cat(None, "/a/b/../b/c/f"), b"x");
}
