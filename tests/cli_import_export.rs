//! Host trees in and out through the real binary: exact round trips (content, modes,
//! symlinks, nanosecond mtimes), .gitignore handling, and export/import refusals.

mod common;

use std::fs;

use common::{TestEnv, assert_same_tree, big_file, make_host_tree};
use predicates::prelude::*;
use serde_json::json;

#[test]
fn import_export_round_trip_is_exact() {
    let env = TestEnv::with_vault("v");
    let src = env.host("src-tree");
    make_host_tree(&src);
    let r = env.data(&["import", src.to_str().unwrap()]);
    assert_eq!(r["files"], 10);
    assert_eq!(r["symlinks"], 4);
    assert_eq!(r["dirs"], 9);
    assert_eq!(r["skipped"], json!([]));
    let expected_bytes: u64 = common::host_tree(&src, false)
        .values()
        .map(|e| match e {
            common::HostEntry::File { data, .. } => data.len() as u64,
            _ => 0,
        })
        .sum();
    assert_eq!(r["bytes"], expected_bytes);

    // What the vault reports matches the host.
    assert_eq!(env.cat(None, "data/big.bin"), big_file());
    assert_eq!(env.data(&["stat", "bin/run.sh"])["mode"], 0o755);
    assert_eq!(env.data(&["stat", "link-rel"])["target"], "bin/run.sh");
    assert_eq!(env.data(&["stat", "src/deep/er/empty.txt"])["size"], 0);
    assert_eq!(env.stats(None)["live_files"], 10);

    let out = env.host("out");
    let e = env.data(&["export", "/", out.to_str().unwrap()]);
    assert_eq!(e["files"], r["files"]);
    assert_eq!(e["symlinks"], r["symlinks"]);
    assert_eq!(e["bytes"], r["bytes"]);
    assert_same_tree(&src, &out, true);

    // Into a subdirectory and back out of it.
    let first = env.stats(None);
    env.data(&["import", src.to_str().unwrap(), "/nested/copy"]);
    let out2 = env.host("out2");
    env.data(&["export", "/nested/copy", out2.to_str().unwrap()]);
    assert_same_tree(&src, &out2, true);
    // Importing the same tree again stores no new content.
    let second = env.stats(None);
    assert_eq!(second["live_files"], 20);
    assert_eq!(
        second["logical_bytes"].as_u64().unwrap(),
        2 * first["logical_bytes"].as_u64().unwrap()
    );
    assert_eq!(second["content_bytes"], first["content_bytes"]);
    // The all-zero stretch of the big file is not stored.
    assert!(
        first["content_bytes"].as_u64().unwrap() + 256 * 1024
            <= first["logical_bytes"].as_u64().unwrap(),
        "{first}"
    );
}

#[test]
fn export_of_a_single_file() {
    let env = TestEnv::with_vault("v");
    env.data(&["write", "--mode", "750", "-p", "dir/tool", "#!/bin/sh\n"]);
    let out = env.host("tool-out");
    let r = env.data(&["export", "dir/tool", out.to_str().unwrap()]);
    assert_eq!(r["files"], 1);
    assert_eq!(fs::read(&out).unwrap(), b"#!/bin/sh\n");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    // An existing host file is not overwritten without --force.
    fs::write(&out, b"mine").unwrap();
    env.err(
        &["export", "dir/tool", out.to_str().unwrap()],
        "host_path_exists",
    );
    assert_eq!(fs::read(&out).unwrap(), b"mine");
    env.data(&["export", "dir/tool", out.to_str().unwrap(), "--force"]);
    assert_eq!(fs::read(&out).unwrap(), b"#!/bin/sh\n");
}

#[test]
fn gitignore_skips_ignored_files_but_keeps_dot_git_unless_asked() {
    let env = TestEnv::with_vault("v");
    let src = env.host("repo");
    for (p, c) in [
        (".gitignore", "target/\n*.log\n!keep.log\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        (".git/objects/ab/cdef", "object"),
        ("src/main.rs", "fn main() {}\n"),
        ("src/debug.log", "noise"),
        ("src/.gitignore", "generated.rs\n"),
        ("src/generated.rs", "// generated"),
        ("keep.log", "kept"),
        ("target/debug/app", "binary"),
        ("docs/target.md", "not the target dir"),
        (".ignore", "scratch/\n"),
        ("scratch/tmp", "tmp"),
    ] {
        let path = src.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, c).unwrap();
    }
    // A git project's own repository comes with it: `git status` in the fork must work.
    let r = env.data(&["import", src.to_str().unwrap(), "--gitignore"]);
    let files: Vec<String> = env.files(None).keys().cloned().collect();
    assert_eq!(
        files,
        vec![
            "/.git/HEAD",
            "/.git/objects/ab/cdef",
            "/.gitignore",
            "/.ignore",
            "/docs/target.md",
            "/keep.log",
            "/src/.gitignore",
            "/src/main.rs",
        ]
    );
    assert_eq!(r["files"], 8);
    env.err(&["ls", "target"], "path_not_found");

    // --no-git-dir leaves it out, with or without --gitignore.
    for extra in [&["--gitignore", "--no-git-dir"][..], &["--no-git-dir"][..]] {
        let mut args = vec!["import", src.to_str().unwrap(), "/bare"];
        args.extend_from_slice(extra);
        env.data(&args);
        env.err(&["ls", "bare/.git"], "path_not_found");
        assert_eq!(env.cat(None, "bare/src/main.rs"), b"fn main() {}\n");
        env.data(&["rm", "-r", "bare"]);
    }

    // Without --gitignore everything comes in, .git included.
    env.data(&["import", src.to_str().unwrap(), "/all"]);
    assert_eq!(env.cat(None, "all/.git/HEAD"), b"ref: refs/heads/main\n");
    assert_eq!(env.cat(None, "all/target/debug/app"), b"binary");
    assert_eq!(env.cat(None, "all/src/debug.log"), b"noise");
}

#[test]
fn export_refuses_non_empty_directory_unless_forced() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"from vault");
    env.write(None, "sub/b.txt", b"bee");
    let dest = env.host("dest");
    fs::create_dir_all(&dest).unwrap();
    fs::write(dest.join("a.txt"), b"host original").unwrap();
    fs::write(dest.join("unrelated"), b"stay").unwrap();

    let e = env.err(&["export", "/", dest.to_str().unwrap()], "host_path_exists");
    assert_eq!(e["details"]["path"], json!(dest));
    env.avfs(&["export", "/", dest.to_str().unwrap()])
        .code(4)
        .stderr(predicate::str::contains("--force"));
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"host original");
    assert!(!dest.join("sub").exists(), "a refused export wrote files");

    env.data(&["export", "/", dest.to_str().unwrap(), "--force"]);
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"from vault");
    assert_eq!(fs::read(dest.join("sub/b.txt")).unwrap(), b"bee");
    assert_eq!(fs::read(dest.join("unrelated")).unwrap(), b"stay");

    // An existing empty directory is fine without --force.
    let empty = env.host("empty-dest");
    fs::create_dir_all(&empty).unwrap();
    env.data(&["export", "/", empty.to_str().unwrap()]);
    assert_eq!(fs::read(empty.join("sub/b.txt")).unwrap(), b"bee");

    env.err(
        &["export", "/nope", env.host("x").to_str().unwrap()],
        "path_not_found",
    );
    env.err(
        &[
            "export",
            "/",
            env.host("y").to_str().unwrap(),
            "--at",
            "nope",
        ],
        "checkpoint_not_found",
    );
}

#[test]
fn import_of_missing_host_dir_is_io_error() {
    let env = TestEnv::with_vault("v");
    env.write(None, "keep", b"k");
    let before = env.state(None);
    let missing = env.host("does/not/exist");
    let e = env.err(&["import", missing.to_str().unwrap()], "io_error");
    assert_eq!(e["details"]["path"], json!(missing));
    assert_eq!(e["details"]["os_error"], 2);
    env.avfs(&["import", missing.to_str().unwrap()])
        .code(8)
        .stderr(predicate::str::contains("No such file or directory"));
    assert_eq!(env.state(None), before);
    env.err(&["import", missing.to_str().unwrap(), "/sub"], "io_error");
    env.err(&["ls", "sub"], "path_not_found");
}

#[test]
fn export_at_a_checkpoint() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"v1");
    env.data(&["checkpoint", "save", "c1"]);
    env.write(None, "f", b"v2");
    env.write(None, "g", b"later");
    let out = env.host("at-c1");
    env.data(&["export", "/", out.to_str().unwrap(), "--at", "c1"]);
    assert_eq!(fs::read(out.join("f")).unwrap(), b"v1");
    assert!(!out.join("g").exists());
}

/// A path the host cannot hold (4.6 kB, each name within limits) was accepted at write.
/// Export of the tree fails naming it, and writes nothing: not the other files, not the
/// destination, no staging leftovers; with --force over an existing tree, that tree stays.
#[test]
fn export_that_fails_part_way_writes_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/a.txt", b"first in order");
    let deep = vec!["d".repeat(200); 23].join("/");
    env.data(&["write", "-p", &format!("/zzz/{deep}/f.txt"), "deep"]);
    let parent = env.host("exports");
    fs::create_dir(&parent).unwrap();
    let dest = parent.join("out");
    let e = env.err(&["export", "/", dest.to_str().unwrap()], "io_error");
    let failed = e["details"]["path"].as_str().unwrap();
    assert!(failed.starts_with(dest.to_str().unwrap()), "{e}");
    assert!(failed.contains("/zzz/"), "{e}");
    assert_eq!(fs::read_dir(&parent).unwrap().count(), 0, "nothing written");
    // Over an existing tree with --force: the tree is left as it was.
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("a.txt"), b"host version").unwrap();
    env.err(
        &["export", "--force", "/", dest.to_str().unwrap()],
        "io_error",
    );
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"host version");
    assert_eq!(fs::read_dir(&parent).unwrap().count(), 1, "no staging left");
    assert_eq!(fs::read_dir(&dest).unwrap().count(), 1);
    // Without the deep path the same export goes through.
    env.data(&["rm", "-r", "/zzz"]);
    env.data(&["export", "--force", "/", dest.to_str().unwrap()]);
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"first in order");
}

/// --force replaces what is in the way, all or nothing: a host file where the vault has a
/// directory is replaced; a host directory where the vault has a file is refused before
/// anything is written (is_a_directory), even with --force; a destination with `..` is
/// refused.
#[test]
fn export_force_replaces_files_but_never_deletes_a_directory() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/top.txt", b"vault top");
    env.data(&["write", "-p", "/d/inner.txt", "vault inner"]);
    env.write(None, "/zz.txt", b"vault zz");
    let dest = env.host("dest");
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("top.txt"), b"host top").unwrap();
    fs::write(dest.join("d"), b"host file d").unwrap();
    env.data(&["export", "--force", "/", dest.to_str().unwrap()]);
    assert_eq!(fs::read(dest.join("d/inner.txt")).unwrap(), b"vault inner");
    assert_eq!(fs::read(dest.join("top.txt")).unwrap(), b"vault top");
    // A host directory in the way of a vault file: refused, nothing written.
    let victim = env.host("victim");
    fs::create_dir_all(victim.join("sub")).unwrap();
    fs::write(victim.join("sub/p"), b"precious").unwrap();
    env.err(
        &["export", "--force", "/top.txt", victim.to_str().unwrap()],
        "is_a_directory",
    );
    assert_eq!(fs::read(victim.join("sub/p")).unwrap(), b"precious");
    let dest2 = env.host("dest2");
    fs::create_dir_all(dest2.join("d")).unwrap();
    fs::write(dest2.join("top.txt"), b"host top").unwrap();
    fs::create_dir(dest2.join("zz.txt")).unwrap();
    env.err(
        &["export", "--force", "/", dest2.to_str().unwrap()],
        "is_a_directory",
    );
    assert_eq!(fs::read(dest2.join("top.txt")).unwrap(), b"host top");
    let dotdot = format!("{}/d/..", dest.display());
    env.err(&["export", "--force", "/", &dotdot], "invalid_argument");
}
