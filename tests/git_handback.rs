//! Git-native hand-back and import through the real binary and real git: the branch's
//! tree equals the fork's files byte for byte (ignore rules applied, `.git/` left out,
//! modes and symlinks as git keeps them); the host's worktree, index and HEAD are not
//! touched; a branch that moved is refused and left alone; `import --git REPO[@REV]` takes
//! exactly a commit's tracked files.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::history::{Env, git};
use common::skip::require_tool;
use serde_json::json;

/// Every file of a commit: path -> (mode, content), read with git itself.
fn commit_files(repo: &Path, rev: &str) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for line in git(repo, &["ls-tree", "-r", "-z", rev]).split('\0') {
        let Some((meta, path)) = line.split_once('\t') else {
            continue;
        };
        let mut parts = meta.split(' ');
        let (mode, _, oid) = (parts.next().unwrap(), parts.next(), parts.next().unwrap());
        let data = std::process::Command::new("git")
            .args(["cat-file", "blob", oid])
            .current_dir(repo)
            .output()
            .unwrap()
            .stdout;
        out.insert(path.to_string(), (mode.to_string(), data));
    }
    out
}

/// A committed repository with a file, an executable, a symlink, a nested file, an ignore
/// rule and an untracked file.
fn repo(env: &Env) -> std::path::PathBuf {
    let repo = env.host("repo");
    fs::create_dir_all(repo.join("src/deep")).unwrap();
    fs::write(repo.join(".gitignore"), "*.log\nbuild/\n").unwrap();
    fs::write(repo.join("README.md"), "# r\n").unwrap();
    fs::write(repo.join("src/deep/lib.rs"), "pub fn f() {}\n").unwrap();
    fs::write(repo.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    fs::set_permissions(repo.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("README.md", repo.join("readme-link")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "base"]);
    fs::write(repo.join("untracked.txt"), "noise\n").unwrap();
    repo
}

/// What of the host repository a hand-back must leave alone.
fn host_state(repo: &Path) -> (Vec<u8>, String, String) {
    (
        fs::read(repo.join(".git/index")).unwrap(),
        fs::read_to_string(repo.join(".git/HEAD")).unwrap(),
        git(repo, &["status", "--porcelain"]),
    )
}

#[test]
fn a_handback_commits_the_forks_files_and_leaves_the_host_alone() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    env.create("v");
    // A plain import keeps .git/: the hand-back leaves it out and starts from its HEAD.
    env.data("v", &["import", repo.to_str().unwrap()]);
    env.fork("v", "t");
    env.write("t", "README.md", b"# changed\n");
    env.write("t", "src/new.rs", b"// new\n");
    env.write("t", "debug.log", b"ignored\n");
    env.write("t", "build/out", b"ignored too\n");
    env.ok("t", &["rm", "src/deep/lib.rs"]);
    env.ok("t", &["chmod", "644", "run.sh"]);
    let before = host_state(&repo);

    let r = env.data(
        "t",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/t",
            "-m",
            "agent work",
        ],
    );
    assert_eq!(r["created"], true, "{r}");
    assert_eq!(r["parent"], base.as_str());
    assert_eq!(r["branch"], "refs/heads/agent/t");
    assert_eq!(
        host_state(&repo),
        before,
        "worktree, index and HEAD untouched"
    );

    // The branch's tree is the fork's files, byte for byte, as git keeps them.
    let files = commit_files(&repo, "agent/t");
    let want: BTreeMap<String, (String, Vec<u8>)> = [
        (".gitignore", "100644", &b"*.log\nbuild/\n"[..]),
        ("README.md", "100644", b"# changed\n"),
        ("readme-link", "120000", b"README.md"),
        ("run.sh", "100644", b"#!/bin/sh\necho run\n"),
        ("src/new.rs", "100644", b"// new\n"),
        ("untracked.txt", "100644", b"noise\n"),
    ]
    .into_iter()
    .map(|(p, m, d)| (p.to_string(), (m.to_string(), d.to_vec())))
    .collect();
    assert_eq!(files, want);
    assert_eq!(
        git(&repo, &["log", "--format=%s %P", "-1", "agent/t"]).trim(),
        format!("agent work {base}")
    );
    git(&repo, &["fsck", "--strict"]);

    // The next hand-back moves the branch on from there.
    env.write("t", "more.txt", b"more\n");
    let r2 = env.data(
        "t",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/t",
        ],
    );
    assert_eq!(r2["created"], false);
    assert_eq!(r2["parent"], r["commit"]);
    assert_eq!(commit_files(&repo, "agent/t")["more.txt"].1, b"more\n");
    // Nothing new: nothing committed, and it says so.
    let r3 = env.data(
        "t",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/t",
        ],
    );
    assert_eq!(r3["commit"], json!(null));
    assert!(
        r3["note"].as_str().unwrap().contains("nothing to commit"),
        "{r3}"
    );

    // Someone moved the branch: refused, and the branch stays where they put it.
    git(&repo, &["branch", "-f", "agent/t", "main"]);
    env.write("t", "again.txt", b"again\n");
    let e = env.fail(
        Some("t"),
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/t",
        ],
        4,
        "branch_moved",
    );
    assert_eq!(e["details"]["found"], base.as_str(), "{e}");
    assert_eq!(e["details"]["expected"], r2["commit"]);
    assert_eq!(git(&repo, &["rev-parse", "agent/t"]).trim(), base);
    // A branch this fork did not make is refused too, and the checked-out one always.
    git(&repo, &["branch", "other", "main"]);
    env.fail(
        Some("t"),
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "other",
        ],
        4,
        "branch_moved",
    );
    env.fail(
        Some("t"),
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "main",
        ],
        5,
        "invalid_argument",
    );
    git(&repo, &["branch", "-D", "other"]);
    assert_eq!(git(&repo, &["rev-parse", "main"]).trim(), base);
    assert_eq!(host_state(&repo), before);

    // Bad input is a typed error that writes nothing.
    let not_repo = env.host("plain");
    fs::create_dir_all(&not_repo).unwrap();
    for (args, kind) in [
        (
            vec![
                "handback",
                "--git",
                not_repo.to_str().unwrap(),
                "--branch",
                "x",
            ],
            "invalid_argument",
        ),
        (
            vec![
                "handback",
                "--git",
                repo.to_str().unwrap(),
                "--branch",
                "bad..name",
            ],
            "invalid_argument",
        ),
        (
            vec!["handback", "--git", repo.to_str().unwrap(), "--branch", ""],
            "invalid_argument",
        ),
    ] {
        env.fail(Some("t"), &args, 5, kind);
    }
    // Branches only: never HEAD, a tag or another ref.
    for bad in [
        "HEAD",
        "refs/tags/v1",
        "ORIG_HEAD",
        "refs/remotes/origin/x",
        "@",
    ] {
        let args = ["handback", "--git", repo.to_str().unwrap(), "--branch", bad];
        env.fail(Some("t"), &args, 5, "invalid_argument");
    }
    assert_eq!(
        git(&repo, &["for-each-ref", "--format=%(refname)"]).trim(),
        "refs/heads/agent/t\nrefs/heads/main"
    );
}

#[test]
fn import_git_takes_exactly_a_commits_tracked_files() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    let first = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    fs::write(repo.join("README.md"), "# second\n").unwrap();
    git(&repo, &["commit", "-qam", "second"]);
    env.create("g");
    let r = env.data("g", &["import", "--git", repo.to_str().unwrap()]);
    assert_eq!(
        (r["files"].as_u64(), r["symlinks"].as_u64()),
        (Some(4), Some(1)),
        "{r}"
    );
    let listed: Vec<String> = env
        .data("g", &["find", "*"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !listed
            .iter()
            .any(|p| p.contains("untracked") || p.contains(".git/")),
        "{listed:?}"
    );
    assert_eq!(env.ok("g", &["cat", "README.md"]), "# second\n");
    assert_eq!(env.data("g", &["stat", "run.sh"])["mode"], 0o755);
    assert_eq!(
        env.data("g", &["stat", "readme-link"])["target"],
        "README.md"
    );
    // An older commit, by REPO@REV, into a subdirectory.
    let spec = format!("{}@{}", repo.display(), &first[..10]);
    let r = env.data("g", &["import", "--git", &spec, "/old"]);
    assert_eq!(r["commit"], first.as_str());
    assert_eq!(env.ok("g", &["cat", "old/README.md"]), "# r\n");
    // Bad revisions and repositories are typed errors that import nothing.
    let bad = format!("{}@no-such-rev", repo.display());
    env.fail(
        Some("g"),
        &["import", "--git", &bad, "/bad"],
        5,
        "invalid_argument",
    );
    env.fail(Some("g"), &["ls", "bad"], 3, "path_not_found");
    env.fail(
        Some("g"),
        &["import", "--git", "/nonexistent/repo"],
        5,
        "invalid_argument",
    );
    // A hand-back from a workspace imported this way starts from the commit imported.
    env.create("h");
    env.data("h", &["import", "--git", repo.to_str().unwrap()]);
    env.fork("h", "f");
    env.write("f", "x.txt", b"x\n");
    let h = env.data(
        "f",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "from-import",
        ],
    );
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(h["parent"], head.as_str(), "{h}");
}

/// The parent's tracked files stay tracked: a file a rule ignores but the repository tracks
/// (`git add -f`) is handed back with the fork's content, and a submodule stays at the commit
/// the parent records, as `git add -A` would leave them. What the rules ignore and git does
/// not track stays out.
#[test]
fn a_handback_keeps_tracked_ignored_files_and_submodules() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = env.host("repo");
    fs::create_dir_all(repo.join("dist")).unwrap();
    fs::write(repo.join(".gitignore"), "dist/\n*.min.js\n").unwrap();
    fs::write(repo.join("dist/app.js"), "v1\n").unwrap();
    fs::write(repo.join("lib.min.js"), "min v1\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", ".gitignore"]);
    git(&repo, &["add", "-f", "dist/app.js", "lib.min.js"]);
    git(&repo, &["commit", "-qm", "base"]);
    let sub = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let info = format!("160000,{sub},vendor/sub");
    git(&repo, &["update-index", "--add", "--cacheinfo", &info]);
    git(&repo, &["commit", "-qm", "with a submodule"]);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();

    env.create("v");
    let spec = format!("{}@main", repo.display());
    let imported = env.data("v", &["import", "--git", &spec]);
    assert_eq!(imported["skipped"], json!(["/vendor/sub: a submodule"]));
    env.fork("v", "t");
    env.write("t", "dist/app.js", b"v2\n");
    env.write("t", "lib.min.js", b"min v2\n");
    env.write("t", "dist/extra.js", b"untracked and ignored\n");
    env.write("t", "other.min.js", b"untracked and ignored\n");
    env.write("t", "src/new.py", b"print(1)\n");

    let r = env.data(
        "t",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/t",
        ],
    );
    assert_eq!(r["parent"], base.as_str(), "{r}");
    assert_eq!(r["submodules"], json!(["/vendor/sub"]), "{r}");
    let files = commit_files(&repo, "agent/t");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            ".gitignore",
            "dist/app.js",
            "lib.min.js",
            "src/new.py",
            "vendor/sub"
        ]
    );
    assert_eq!(files["vendor/sub"].0, "160000");
    assert_eq!(files["dist/app.js"].1, b"v2\n");
    assert_eq!(files["lib.min.js"].1, b"min v2\n");
    // `ls-tree -r` lists the gitlink as a commit entry, not a file.
    let tree = git(&repo, &["ls-tree", "-r", "agent/t", "vendor"]);
    assert_eq!(tree.trim(), format!("160000 commit {sub}\tvendor/sub"));
    // Against the parent, only what the fork changed differs.
    let changed = git(&repo, &["diff", "--name-status", &base, "agent/t"]);
    assert_eq!(
        changed.lines().collect::<Vec<_>>(),
        ["M\tdist/app.js", "M\tlib.min.js", "A\tsrc/new.py"]
    );
}

/// Workspaces racing to make the same new branch take turns: exactly one makes it, the others
/// are refused with `branch_moved`, and the branch holds the winner's commit. (Separate vaults,
/// so nothing but the repository lock orders them; without it two won in about one round of
/// six.)
#[test]
fn concurrent_handbacks_to_one_new_branch_make_it_once() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    let forks: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    for (i, f) in forks.iter().enumerate() {
        env.create(f);
        env.data(f, &["import", repo.to_str().unwrap()]);
        env.write(f, "who.txt", format!("fork {i}\n").as_bytes());
    }
    for round in 0..12 {
        let branch = format!("agent/race-{round}");
        let results: Vec<(serde_json::Value, i32)> = std::thread::scope(|s| {
            let handles: Vec<_> = forks
                .iter()
                .map(|f| {
                    let (env, repo, branch) = (&env, &repo, &branch);
                    s.spawn(move || {
                        env.json(
                            Some(f),
                            &[
                                "handback",
                                "--git",
                                repo.to_str().unwrap(),
                                "--branch",
                                branch,
                            ],
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<&serde_json::Value> = results
            .iter()
            .filter(|(_, code)| *code == 0)
            .map(|(v, _)| v)
            .collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        for (v, code) in &results {
            if *code != 0 {
                assert_eq!(
                    (*code, v["error"]["kind"].as_str()),
                    (4, Some("branch_moved"))
                );
            }
        }
        let tip = git(&repo, &["rev-parse", &branch]).trim().to_string();
        assert_eq!(won[0]["data"]["commit"], tip.as_str());
    }
}

/// A fork's record of where it left a branch is per branch, and goes with the fork: handing
/// back to a second branch does not make the first one look moved, and a fork made again
/// under a deleted one's name cannot move the deleted fork's branch.
#[test]
fn handback_records_are_per_branch_and_die_with_the_fork() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    env.create("v");
    env.data("v", &["import", repo.to_str().unwrap()]);
    env.fork("v", "t");
    let hand = |fork: &str, branch: &str| {
        env.json(
            Some(fork),
            &[
                "handback",
                "--git",
                repo.to_str().unwrap(),
                "--branch",
                branch,
            ],
        )
    };
    env.write("t", "a.txt", b"1\n");
    assert_eq!(hand("t", "agent/a").1, 0);
    assert_eq!(hand("t", "agent/b").1, 0);
    env.write("t", "a.txt", b"2\n");
    let (again, code) = hand("t", "agent/a");
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["data"]["created"], false);

    env.ok("v", &["vault", "delete", "t", "--yes"]);
    env.fork("v", "t");
    env.write("t", "a.txt", b"someone else\n");
    let (moved, code) = hand("t", "agent/a");
    assert_eq!(code, 4, "{moved}");
    assert_eq!(moved["error"]["kind"], "branch_moved");
}

/// A workspace imported below a path hands back from there; names git refuses are left out
/// (listed); a branch that would clash with an existing one (`pk` beside `pk/deep`, even
/// packed) or that a worktree has checked out is refused, and so is an empty message.
#[test]
fn handback_follows_the_import_path_and_refuses_what_git_refuses() {
    if !require_tool("git") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    env.create("v");
    let spec = format!("{}@main", repo.display());
    env.data("v", &["import", "--git", &spec, "/src"]);
    env.fork("v", "t");
    env.write("t", "src/README.md", b"# edited\n");
    env.write("t", "outside.txt", b"not the repository's\n");
    for bad in [".GIT/config", "d/.Git/config", "d/.git. /x", "GIT~1/x"] {
        env.write("t", &format!("src/{bad}"), b"x");
    }
    let r = env.data(
        "t",
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/p",
        ],
    );
    let skipped: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 4, "{r}");
    let changed = git(&repo, &["diff", "--name-status", &base, "agent/p"]);
    assert_eq!(
        changed.trim(),
        "M\tREADME.md",
        "only the edit, at the repository's paths"
    );
    git(&repo, &["fsck", "--strict"]);

    // Clashing names: refused before anything is written, packed refs included.
    git(&repo, &["branch", "pk/deep", "main"]);
    git(&repo, &["pack-refs", "--all"]);
    for clash in ["pk", "agent/p/sub"] {
        let e = env.fail(
            Some("t"),
            &[
                "handback",
                "--git",
                repo.to_str().unwrap(),
                "--branch",
                clash,
            ],
            5,
            "invalid_argument",
        );
        assert!(e["message"].as_str().unwrap().contains("clashes"), "{e}");
    }
    env.fail(
        Some("t"),
        &[
            "handback",
            "--git",
            repo.to_str().unwrap(),
            "--branch",
            "agent/q",
            "-m",
            "  ",
        ],
        5,
        "invalid_argument",
    );
    let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(
        refs.lines().collect::<Vec<_>>(),
        [
            "refs/heads/agent/p",
            "refs/heads/main",
            "refs/heads/pk/deep"
        ]
    );
    git(&repo, &["fsck", "--strict"]);
}
