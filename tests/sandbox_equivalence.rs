//! Equivalence is the contract: a corpus of commands and command sequences gives the same
//! envelopes (exit codes, output, change lists) and the same final vault in every mode
//! (overlay, fuse, copy, and an overlay session, where each step runs on the layers the
//! steps before it left in the kept namespace). Real binary, real git, python3, pip, tar and cargo, on a seeded
//! project imported with its `.git`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::mount::{ProxyEnv, avfs_command, ok};
use serde_json::{Value, json};

/// Each entry: a name and its steps; each step is one proxied command (shell text).
/// Every step must run (the policy allows each), so the comparison is never vacuous.
const CORPUS: &[(&str, &[&str])] = &[
    ("write a file", &["echo hello > a.txt"]),
    (
        "big file",
        &["head -c 3000000 /dev/urandom > /dev/null; yes abc | head -c 3000000 > big.txt"],
    ),
    (
        "nested dirs",
        &["mkdir -p d1/d2/d3 && echo deep > d1/d2/d3/f"],
    ),
    ("rename a file", &["echo r > r1.txt", "mv r1.txt r2.txt"]),
    (
        "rename over a file",
        &["echo one > o1.txt; echo two > o2.txt", "mv o1.txt o2.txt"],
    ),
    (
        "rename a directory",
        &["mkdir -p mv/in && echo x > mv/in/f", "mv mv moved"],
    ),
    ("rename an imported directory", &["mv lib lib2"]),
    ("copy a tree", &["cp -a src src-copy"]),
    (
        "delete a copied tree",
        &["cp -a src tmpcopy", "rm -rf tmpcopy"],
    ),
    ("delete an imported file", &["rm README.md"]),
    ("delete an imported directory", &["rm -r docs"]),
    (
        "replace a directory",
        &["rm -r data && mkdir data && echo new > data/only.txt"],
    ),
    (
        "directory becomes a file",
        &["rm -rf lib2 && echo f > lib2"],
    ),
    (
        "file becomes a directory",
        &["rm notes.txt && mkdir notes.txt && echo in > notes.txt/x"],
    ),
    (
        "hard link",
        &["echo shared > h1 && ln h1 h2", "echo more >> h2"],
    ),
    (
        "hard link to an imported file",
        &["ln existing.txt existing-link.txt"],
    ),
    (
        "symlinks",
        &["ln -s a.txt soft; ln -s no/such/target dangling; ln -s d1 dirlink"],
    ),
    ("remove a symlink", &["rm dirlink"]),
    ("chmod", &["chmod 700 script.sh; chmod 640 existing.txt"]),
    ("chmod a directory", &["chmod 750 src"]),
    (
        "xattrs",
        &["python3 -c \"import os; os.setxattr('a.txt', 'user.tag', b'blue')\""],
    ),
    (
        "xattr removed",
        &["python3 -c \"import os; os.removexattr('a.txt', 'user.tag')\""],
    ),
    ("sparse file", &["truncate -s 1G sparse.img"]),
    (
        "sparse with data",
        &["dd if=/dev/zero of=sparse2 bs=1 count=1 seek=10000000 2>/dev/null"],
    ),
    (
        "explicit times",
        &["touch -d '2001-02-03 04:05:06' dated.txt"],
    ),
    (
        "append to an imported file",
        &["echo appended >> existing.txt"],
    ),
    (
        "sed -i keeps the mode",
        &["sed -i s/old/new/ config.ini && stat -c %a config.ini"],
    ),
    ("fifo", &["mkfifo pipe"]),
    (
        "spaces and unicode",
        &["echo s > 'name with spaces.txt'; echo u > 'ünïcödé.txt'"],
    ),
    ("hidden file", &["echo h > .hidden"]),
    (
        "empty dir made and removed",
        &["mkdir empty", "rmdir empty"],
    ),
    ("truncate to zero", &[": > a.txt"]),
    ("move into a directory", &["mv big.txt d1/"]),
    ("move a subdirectory out", &["mv d1/d2 top-d2"]),
    ("failing command", &["false"]),
    (
        "partial work then exit 3",
        &["echo partial > p.txt; exit 3"],
    ),
    ("missing file", &["cat no-such-file"]),
    (
        "read only",
        &["ls -1 src | head -3; cat existing.txt | wc -l"],
    ),
    ("find", &["find src -type f | sort"]),
    (
        "tar round trip",
        &[
            "tar --sort=name -cf archive.tar src",
            "mkdir -p unpacked && tar xf archive.tar -C unpacked",
        ],
    ),
    ("gzip", &["gzip -kn existing.txt"]),
    ("git status", &["git status --porcelain | sort"]),
    (
        "git add and commit",
        &["git add -A && git commit -qm work && git log --oneline | wc -l"],
    ),
    ("git branch", &["git checkout -qb feature"]),
    (
        "git commit on a branch",
        &["echo change >> tracked.txt && git commit -q -a -m change"],
    ),
    (
        "git mv",
        &["git mv tracked.txt moved.txt && git commit -qm mv"],
    ),
    ("git rm", &["git rm -q moved.txt && git commit -qm rm"]),
    (
        "git back to main",
        &["git checkout -q main && git log --oneline | wc -l"],
    ),
    ("git merge", &["git merge -q --no-edit feature && ls"]),
    ("git diff", &["echo d >> existing.txt && git diff --stat"]),
    ("git stash", &["git stash -q && git stash list | wc -l"]),
    ("git tag", &["git tag v1 && git tag"]),
    (
        "python writes files",
        &[
            "python3 -c \"import pathlib; [pathlib.Path(f'py{i}.txt').write_text(str(i)) for i in range(20)]\"",
        ],
    ),
    (
        "python deletes files",
        &["python3 -c \"import os; [os.remove(f'py{i}.txt') for i in range(0, 20, 2)]\""],
    ),
    (
        "pip install a local wheel",
        &[
            "python3 -m pip install -q --no-index --no-compile --target vendor ./demo-1.0-py3-none-any.whl && ls vendor",
        ],
    ),
    (
        "cargo build",
        &["cd crate && cargo build -q --offline && ./target/debug/crate"],
    ),
    (
        "many files",
        &["mkdir many && cd many && for i in $(seq 1 300); do echo $i > f$i; done"],
    ),
    ("many deletes", &["rm many/f1*"]),
    ("overwrite in place", &["printf 'abc' > existing-link.txt"]),
    (
        "rename over a directory",
        &["mkdir -p ra/x rb && mv ra rb/"],
    ),
    ("deep tree removed", &["rm -rf top-d2 d1"]),
    (
        "exec bit kept",
        &["printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh && ./run.sh"],
    ),
    ("true", &["true"]),
];

/// Paths whose content differs from run to run whatever the mode: git's index (stat
/// data) and build output. No step of the corpus prints times or inode numbers.
fn volatile(path: &str) -> bool {
    stat_cache(path) || path.starts_with("/crate/target/") || path.ends_with(".pyc")
}

/// Git's index caches each file's inode number and device: whether a command rewrites it
/// depends on whether those stayed the same since the last command. They do in a session
/// (one namespace, as on a disk) and not across separate runs (a new mount each), so
/// whether it changed at all is not compared.
fn stat_cache(path: &str) -> bool {
    path == "/.git/index"
}

fn env_vars() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@example.com"),
        ("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@example.com"),
        ("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("CARGO_INCREMENTAL", "0"),
        ("LC_ALL", "C"),
        ("TZ", "UTC"),
    ]
}

/// The project every mode starts from: sources, docs, data, a script, a git repository
/// with history, a wheel and a small crate.
fn seed(dir: &Path) {
    let w = |p: &str, c: &str| {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    };
    w("README.md", "# demo\n");
    w("existing.txt", "one\ntwo\n");
    w("config.ini", "mode = old\n");
    w("notes.txt", "notes\n");
    w("tracked.txt", "tracked\n");
    w("script.sh", "#!/bin/sh\necho hi\n");
    w("docs/index.md", "docs\n");
    w("data/a.csv", "1,2\n");
    w("lib/util.py", "X = 1\n");
    for i in 0..10 {
        w(&format!("src/m{i}.rs"), &format!("fn f{i}() {{}}\n"));
    }
    w(
        "crate/Cargo.toml",
        "[package]\nname = \"crate\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    w("crate/src/main.rs", "fn main() { println!(\"built\"); }\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.join("script.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(
        dir.join("config.ini"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let wheel = dir.join("demo-1.0-py3-none-any.whl");
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile, hashlib, base64\n\
             files = {'demo/__init__.py': b'VALUE = 1\\n',\n\
               'demo-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: demo\\nVersion: 1.0\\n',\n\
               'demo-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}\n\
             rec = ''\n\
             for n, d in files.items():\n\
             \x20   h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()\n\
             \x20   rec += f'{n},sha256={h},{len(d)}\\n'\n\
             rec += 'demo-1.0.dist-info/RECORD,,\\n'\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   for n, d in files.items(): z.writestr(zipfile.ZipInfo(n, (2020,1,1,0,0,0)), d)\n\
             \x20   z.writestr(zipfile.ZipInfo('demo-1.0.dist-info/RECORD', (2020,1,1,0,0,0)), rec)\n",
        )
        .arg(&wheel)
        .status()
        .expect("python3 (required)");
    assert!(made.success());
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .envs(env_vars())
            .status()
            .expect("git (required)");
        assert!(st.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "README.md", "tracked.txt", "existing.txt", "src"]);
    git(&["commit", "-qm", "seed"]);
}

/// One step's envelope, as compared across modes.
fn record(v: &Value) -> Value {
    let changes: Vec<Value> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !stat_cache(c["path"].as_str().unwrap()))
        .map(|c| {
            let path = c["path"].as_str().unwrap();
            // A directory's id covers its entries' times, which differ run to run.
            if volatile(path) || c["type"] == "dir" {
                json!([path, c["status"], c["type"]])
            } else {
                json!([
                    path,
                    c["status"],
                    c["type"],
                    c["old_path"],
                    c["new_mode"],
                    c["new_size"],
                    c["new_content_id"]
                ])
            }
        })
        .collect();
    json!({
        "ran": v["ran"],
        "exit_code": v["exit_code"],
        "stdout": v["stdout"]["text"],
        "changes": changes,
    })
}

/// The final vault, exported: type, mode, size, content (or target) of every entry.
fn manifest(e: &ProxyEnv) -> BTreeMap<String, String> {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("x");
    ok(e.avfs(&["export", "/", dest.to_str().unwrap()]));
    let mut m = BTreeMap::new();
    let mut stack = vec![dest.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            let rel = format!("/{}", p.strip_prefix(&dest).unwrap().display());
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let ft = meta.file_type();
            let what = if ft.is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", meta.mode() & 0o7777)
            } else if ft.is_file() && volatile(&rel) {
                format!("file {:o}", meta.mode() & 0o7777)
            } else if ft.is_file() {
                let data = std::fs::read(&p).unwrap();
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                data.hash(&mut h);
                format!(
                    "file {:o} {} {:016x} nlink {}",
                    meta.mode() & 0o7777,
                    data.len(),
                    h.finish(),
                    meta.nlink()
                )
            } else {
                format!("special {:o}", meta.mode())
            };
            m.insert(rel, what);
        }
    }
    m
}

/// Run the whole corpus in `mode` on a fresh vault seeded from `seed_dir`.
/// Stops a session when dropped, so a failing run leaves no daemon behind.
struct Session<'e>(&'e ProxyEnv);

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self.0.avfs(&["session", "stop", "eq"]);
    }
}

/// Run the corpus in `mode`; `session`: every step in one overlay session, so each runs on
/// the layers the earlier steps left in its kept namespace; `overlay` has the default
/// lower layer (a materialized tree), `overlay-fuse` a FUSE view of the root.
fn run_corpus(mode: &str, seed_dir: &Path) -> (Vec<(String, Value)>, BTreeMap<String, String>) {
    let e = ProxyEnv::new().expect("FUSE (required)");
    ok(e.avfs(&["import", seed_dir.to_str().unwrap()]));
    let in_session = mode == "session";
    let _session = in_session.then(|| {
        ok(e.avfs(&["session", "start", "w", "--name", "eq", "--mode", "overlay"]));
        Session(&e)
    });
    let (runs_as, lower) = match mode {
        "session" => ("overlay", "fuse"),
        "overlay-fuse" => ("overlay", "fuse"),
        "overlay" => ("overlay", "tree"),
        m => (m, ""),
    };
    let mut steps = Vec::new();
    for (name, commands) in CORPUS {
        for (i, script) in commands.iter().enumerate() {
            let exec = |approve: Option<&str>| {
                let mut c = avfs_command(e.home.path());
                c.args(["--json", "proxy", "exec", "--timeout", "600s"]);
                if in_session {
                    c.args(["--session", "eq"]);
                } else {
                    c.args(["--mode", runs_as]);
                    if !lower.is_empty() {
                        c.args(["--lower", lower]);
                    }
                }
                if let Some(token) = approve {
                    c.args(["--approve", token]);
                }
                let out = c
                    .args(["--shell", script])
                    .envs(env_vars())
                    .output()
                    .unwrap();
                let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
                    panic!(
                        "{mode} {name}: not JSON ({err}): {}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                });
                doc
            };
            let mut doc = exec(None);
            // A command the policy asks about runs once approved, as an agent's would.
            let token = doc["data"]["approval_token"].as_str().map(str::to_owned);
            if let Some(token) = token {
                doc = exec(Some(&token));
            }
            let v = &doc["data"];
            assert_eq!(
                v["ran"], true,
                "{mode} `{name}` step {i} did not run: {doc}"
            );
            assert_eq!(v["mode"], runs_as, "{doc}");
            if lower == "tree" {
                let had = v["sandbox"]["lower"].as_str().unwrap_or_default();
                assert!(had.starts_with("tree"), "{doc}");
            }
            steps.push((format!("{name} #{i}: {script}"), record(v)));
        }
    }
    (steps, manifest(&e))
}

#[test]
fn every_mode_gives_the_same_envelopes_and_the_same_vault() {
    if !common::skip::require_sandbox() || !common::skip::require_fuse() {
        return;
    }
    let steps: usize = CORPUS.iter().map(|(_, s)| s.len()).sum();
    assert!(steps >= 60, "the corpus has {steps} commands");
    let seed_dir = tempfile::tempdir().unwrap();
    seed(seed_dir.path());
    // The modes run at once, each on its own vault: the comparison waits for all of them.
    let seed_dir = seed_dir.path();
    let mut runs = std::thread::scope(|s| {
        let runs: Vec<_> = ["fuse", "overlay", "overlay-fuse", "copy", "session"]
            .into_iter()
            .map(|mode| (mode, s.spawn(move || run_corpus(mode, seed_dir))))
            .collect();
        runs.into_iter()
            .map(|(mode, run)| {
                (
                    mode,
                    run.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                )
            })
            .collect::<Vec<_>>()
    });
    let (_, (fuse_steps, fuse_state)) = runs.remove(0);
    for (mode, (steps, state)) in runs {
        for ((name, want), (_, got)) in fuse_steps.iter().zip(&steps) {
            assert_eq!(got, want, "{mode} differs from fuse at `{name}`");
        }
        let only = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
            a.iter()
                .filter(|(k, v)| b.get(*k) != Some(v))
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
        };
        assert!(
            state == fuse_state,
            "{mode}'s final vault differs from fuse's:\n only in {mode}: {:#?}\n only in fuse: {:#?}",
            only(&state, &fuse_state),
            only(&fuse_state, &state)
        );
    }
}
