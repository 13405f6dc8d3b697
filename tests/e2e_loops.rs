//! Whole development loops through the real `avfs` binary, fully offline: a host project
//! with a git repository is imported, forked, worked on by real toolchains in the proxy's
//! sandbox (python3 -m venv + pip + unittest/pytest + git; npm; cargo), broken, rolled back,
//! merged and applied back to the host, checking after every step what the host's
//! `git status` says, what each envelope lists and what it only counts as ignored.
//!
//! Offline by construction: every proxied command runs with `--offline` (a network
//! namespace with only loopback), pip gets `PIP_NO_INDEX=1` and a wheel written by hand,
//! npm a tarball made by `npm pack`, cargo a crate vendored as `cargo vendor` lays it out.
//! Every avfs and host tool run gets a cleared environment (PATH, HOME, the rustup/cargo
//! homes and what the step sets), so the developer's PIP_*/npm_config_*/PYTHON* settings
//! do not change the outcome.
//!
//! NOTE (findings while writing these loops, not asserted here; see the report):
//! - Policy: `--no-index` makes any `pip install` non-networked, even when it names a URL:
//!   `avfs proxy check --shell 'pip install --no-index https://example.com/x.whl'` (or
//!   `--no-index --find-links https://…`, or `git+https://…`) is `checkpoint_then_run`
//!   (mutating) instead of `ask` (networked). The loop below therefore leaves `--no-index`
//!   out of the command (PIP_NO_INDEX=1 in the environment keeps pip offline) so that the
//!   approval path is the one exercised.
//! - A *tracked* secret breaks git in the sandbox: with `.env` committed, `git status`
//!   reports ` M .env`, and `git diff`, `git add -A`, `git commit -a` and `git stash` fail
//!   with `open(".env"): Permission denied`. The project here ignores `.env`, as real
//!   projects do, so `git add -A` works.

mod common;

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::skip::{require_root, require_sandbox, require_tool};
use serde_json::{Value, json};
use tempfile::TempDir;

/// The environment every process gets (after `env_clear`): what finds the tools, and
/// nothing that configures them.
fn base_env(cmd: &mut Command) -> &mut Command {
    cmd.env_clear();
    for var in [
        "PATH",
        "HOME",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    cmd.env("LC_ALL", "C")
        .env("TZ", "UTC")
        // Read by pip only: never look at an index, only at --find-links.
        .env("PIP_NO_INDEX", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("npm_config_update_notifier", "false")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
        .env("CARGO_TERM_COLOR", "never")
}

/// A throwaway `$AVFS_HOME`, scratch space for host directories, and every path any
/// envelope, diff, merge or apply listed (so a test can say what was never listed).
struct Lab {
    home: TempDir,
    scratch: TempDir,
    listed: RefCell<Vec<String>>,
    started: Instant,
}

impl Lab {
    fn new() -> Lab {
        Lab {
            home: tempfile::tempdir().unwrap(),
            scratch: tempfile::tempdir().unwrap(),
            listed: RefCell::new(Vec::new()),
            started: Instant::now(),
        }
    }

    /// A fresh path under the scratch directory.
    fn host(&self, name: &str) -> PathBuf {
        let p = self.scratch.path().join(name);
        assert!(!p.exists(), "{} already used", p.display());
        p
    }

    fn avfs(&self) -> Command {
        let mut cmd = Command::new(common::BIN);
        base_env(&mut cmd)
            .env("AVFS_HOME", self.home.path())
            .env("AVFS_ACTOR", "e2e-loops");
        cmd
    }

    /// `avfs --json --workspace WS ARGS`: the whole document (checked against the schema,
    /// an error's exit code against the documented one) and the exit code. Whatever it
    /// lists is remembered.
    fn json(&self, ws: &str, args: &[&str]) -> (Value, i32) {
        let mut full = vec!["--json", "--workspace", ws];
        full.extend_from_slice(args);
        let out = self.avfs().args(&full).output().unwrap();
        let doc = common::check_json_output(&full, &out);
        let data = &doc["data"];
        let mut listed = self.listed.borrow_mut();
        if let Some(changes) = data["changes"].as_array() {
            listed.extend(
                changes
                    .iter()
                    .map(|c| c["path"].as_str().unwrap().to_string()),
            );
        }
        for key in ["written", "deleted", "mode_changed"] {
            if let Some(paths) = data[key].as_array() {
                listed.extend(paths.iter().map(|p| p.as_str().unwrap().to_string()));
            }
        }
        (doc, out.status.code().unwrap())
    }

    /// `data` of a command that must succeed.
    fn data(&self, ws: &str, args: &[&str]) -> Value {
        let (doc, code) = self.json(ws, args);
        assert_eq!(code, 0, "avfs -w {ws} {args:?}: {doc:#}");
        assert_eq!(doc["ok"], json!(true), "avfs -w {ws} {args:?}: {doc:#}");
        doc["data"].clone()
    }

    fn exists(&self, ws: &str, path: &str) -> bool {
        let (doc, _) = self.json(ws, &["stat", path]);
        if doc["ok"] == json!(true) {
            return true;
        }
        assert_eq!(doc["error"]["kind"], json!("path_not_found"), "{doc:#}");
        false
    }

    fn cat(&self, ws: &str, path: &str) -> String {
        let out = self
            .avfs()
            .args(["--workspace", ws, "cat", path])
            .output()
            .unwrap();
        assert!(out.status.success(), "cat {path}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn proxy(&self, ws: &str, script: &str, approve: Option<&str>) -> (Value, i32) {
        let mut args = vec!["proxy", "exec", "--offline", "--timeout", "300s"];
        if let Some(token) = approve {
            args.extend(["--approve", token]);
        }
        args.extend(["--shell", script]);
        let (doc, code) = self.json(ws, &args);
        assert_eq!(doc["ok"], json!(true), "proxy exec {script:?}: {doc:#}");
        (doc["data"].clone(), code)
    }

    /// A proxied command the policy lets run (no approval): its envelope, which must say it
    /// ran offline, and whose exit code is the process's.
    fn exec(&self, ws: &str, script: &str) -> Value {
        let (v, code) = self.proxy(ws, script, None);
        assert_eq!(v["ran"], json!(true), "{script:?} did not run: {v:#}");
        assert_eq!(v["confinement"]["offline"], json!(true), "{v:#}");
        assert_eq!(v["exit_code"], json!(code), "{v:#}");
        v
    }

    /// `exec` that must exit 0.
    fn exec_ok(&self, ws: &str, script: &str) -> Value {
        let v = self.exec(ws, script);
        assert_eq!(
            v["exit_code"],
            json!(0),
            "{script:?} failed:\nstdout: {}\nstderr: {}",
            v["stdout"]["text"],
            v["stderr"]["text"]
        );
        v
    }

    /// A command the policy classifies as networked: the first call asks (exit 125, an
    /// approval token, nothing run, no checkpoint), the re-run with `--approve` runs it.
    fn exec_approved(&self, ws: &str, script: &str) -> Value {
        let (ask, code) = self.proxy(ws, script, None);
        assert_eq!(code, 125, "{script:?} should ask: {ask:#}");
        assert_eq!(ask["outcome"], json!("approval_required"), "{ask:#}");
        assert_eq!(ask["ran"], json!(false), "{ask:#}");
        assert_eq!(ask["decision"]["action"], json!("ask"), "{ask:#}");
        let categories = ask["decision"]["categories"].as_array().unwrap();
        assert!(categories.contains(&json!("networked")), "{ask:#}");
        assert_eq!(ask["changes"], json!([]), "{ask:#}");
        assert_eq!(ask["checkpoint"], Value::Null, "{ask:#}");
        let token = ask["approval_token"].as_str().expect("approval token");
        let (v, code) = self.proxy(ws, script, Some(token));
        assert_eq!(v["ran"], json!(true), "{v:#}");
        assert_eq!(v["exit_code"], json!(code), "{v:#}");
        assert_eq!(v["confinement"]["offline"], json!(true), "{v:#}");
        assert_eq!(
            code, 0,
            "{script:?} (approved) failed:\nstdout: {}\nstderr: {}",
            v["stdout"]["text"], v["stderr"]["text"]
        );
        v
    }

    /// Nothing any command listed was `path` or under it.
    fn never_listed(&self, path: &str) {
        let below = format!("{path}/");
        let listed = self.listed.borrow();
        let hits: Vec<&String> = listed
            .iter()
            .filter(|p| *p == path || p.starts_with(&below))
            .collect();
        assert!(hits.is_empty(), "{path} was listed: {hits:?}");
    }

    fn done(&self, test: &str) {
        eprintln!("{test}: {:.1?}", self.started.elapsed());
    }
}

/// A host tool run in `dir` with the cleared environment; its stdout (stderr too in the
/// panic when it fails).
fn host_run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(program);
    base_env(&mut cmd)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .envs(env.iter().copied())
        .args(args)
        .current_dir(dir);
    let out = cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {:?}\nstdout: {}\nstderr: {}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let mut full = vec!["-c", "user.name=t", "-c", "user.email=t@example.com"];
    full.extend_from_slice(args);
    host_run(dir, "git", &full, &[])
}

/// A new git repository holding `files` (path, content, mode), all committed.
fn repo(dir: &Path, files: &[(&str, &str, u32)]) {
    for (path, content, mode) in files {
        let p = dir.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, content).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "init"]);
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
}

fn paths(v: &Value) -> BTreeSet<String> {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The change listed for `path` in an envelope or diff.
fn change<'a>(v: &'a Value, path: &str) -> &'a Value {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == json!(path))
        .unwrap_or_else(|| panic!("{path} not listed: {v:#}"))
}

/// `ignored[name]` as a number (0 when absent).
fn ignored(v: &Value, name: &str) -> u64 {
    v["ignored"][name].as_u64().unwrap_or(0)
}

fn ignored_names(v: &Value) -> BTreeSet<String> {
    v["ignored"].as_object().unwrap().keys().cloned().collect()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Write a pure-Python wheel by hand (a zip with NAME-VER.dist-info/{METADATA,WHEEL,
/// RECORD}), so pip has something to install without setuptools, `wheel` or a network.
fn write_wheel(path: &Path) {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    'helper/__init__.py': b'def double(x):\n    return 2 * x\n',
    'helper-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\nName: helper\nVersion: 1.0\n',
    'helper-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = ''
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
    record += f'{name},sha256={digest},{len(data)}\n'
record += 'helper-1.0.dist-info/RECORD,,\n'
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for name, data in files.items():
        z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    z.writestr(zipfile.ZipInfo('helper-1.0.dist-info/RECORD', (2020, 1, 1, 0, 0, 0)), record)
"#;
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    host_run(
        path.parent().unwrap(),
        "python3",
        &["-c", script, path.to_str().unwrap()],
        &[],
    );
}

const PY_INIT: &str =
    "from helper import double\n\n\ndef add_twice(a, b):\n    return double(a + b)\n";

const PY_INIT_EDITED: &str = "from helper import double\n\n\ndef add_twice(a, b):\n    return double(a + b)\n\n\ndef sub(a, b):\n    return a - b\n";

const PY_TEST: &str = r#"import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import pkg  # noqa: E402


class PkgTest(unittest.TestCase):
    def test_add_twice(self):
        self.assertEqual(pkg.add_twice(1, 2), 6)


if __name__ == "__main__":
    unittest.main()
"#;

/// The project's test runner: pytest when the venv can import it (a system python3 with
/// pytest, seen through --system-site-packages), else unittest. Either prints a marker
/// the test looks for.
const PY_CHECK: &str = r#"#!/bin/sh
set -e
if .venv/bin/python -c 'import pytest' 2>/dev/null; then
    .venv/bin/python -m pytest -q tests
    echo RUNNER=pytest
else
    .venv/bin/python -m unittest discover -s tests -v
    echo RUNNER=unittest
fi
"#;

const PY_CHECK_EDITED: &str = r#"#!/bin/sh
set -e
if .venv/bin/python -c 'import pytest' 2>/dev/null; then
    .venv/bin/python -m pytest -q tests
    echo RUNNER=pytest
else
    .venv/bin/python -m unittest discover -s tests -v
    echo RUNNER=unittest
fi
.venv/bin/python -c 'import sys; sys.path.insert(0, "src"); import pkg; print("sum", pkg.add_twice(2, 3), "sub", pkg.sub(9, 4))'
"#;

const PY_SECRET: &str = "API_TOKEN=tok-e2e-python-1234\n";

/// The test run passed, by the runner's own words.
fn tests_passed(v: &Value) -> bool {
    let out = v["stdout"]["text"].as_str().unwrap();
    let err = v["stderr"]["text"].as_str().unwrap();
    v["exit_code"] == json!(0)
        && ((out.contains("RUNNER=unittest") && err.contains("Ran 1 test") && err.contains("OK"))
            || (out.contains("RUNNER=pytest") && out.contains("1 passed")))
}

#[test]
fn python_project_with_a_venv_pip_git_rollback_merge_and_apply() {
    if !require_sandbox() || !require_root() || !require_tool("git") || !require_tool("python3") {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("pyproj");
    repo(
        &host,
        &[
            (
                "pyproject.toml",
                "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
                 [project]\nname = \"pkg\"\nversion = \"0.1.0\"\ndependencies = [\"helper\"]\n\n\
                 [tool.setuptools.packages.find]\nwhere = [\"src\"]\n",
                0o644,
            ),
            ("src/pkg/__init__.py", PY_INIT, 0o644),
            ("tests/test_pkg.py", PY_TEST, 0o644),
            ("scripts/check.sh", PY_CHECK, 0o755),
            (
                ".gitignore",
                ".venv/\n__pycache__/\n*.pyc\n.pytest_cache/\n.env\nwheels/\n",
                0o644,
            ),
        ],
    );
    // Not committed (ignored): the secret and the wheel pip installs from.
    fs::write(host.join(".env"), PY_SECRET).unwrap();
    fs::set_permissions(host.join(".env"), fs::Permissions::from_mode(0o600)).unwrap();
    write_wheel(&host.join("wheels/helper-1.0-py3-none-any.whl"));
    let host_clean = |step: &str| {
        assert_eq!(
            git(&host, &["status", "--porcelain"]),
            "",
            "the host changed before apply ({step})"
        );
    };
    host_clean("setup");

    lab.data("p", &["vault", "create", "p"]);
    let imported = lab.data("p", &["import", host.to_str().unwrap()]);
    assert!(imported["files"].as_u64().unwrap() > 10, "{imported:#}");
    lab.data("p", &["vault", "fork", "p", "task"]);
    assert!(lab.exists("task", ".git/HEAD"), ".git/ comes along");
    assert!(lab.exists("task", "wheels/helper-1.0-py3-none-any.whl"));

    // The secret is listed but refused to the command, and git in the fork sees a clean
    // tree (read-only status: no index refresh).
    let v = lab.exec(
        "task",
        "ls -a; cat .env; git --no-optional-locks status --porcelain; git log --oneline",
    );
    let out = v["stdout"]["text"].as_str().unwrap();
    assert!(out.lines().any(|l| l == ".env"), "{v:#}");
    assert!(!out.contains("tok-e2e"), "the secret was read: {v:#}");
    assert!(
        v["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{v:#}"
    );
    assert!(
        out.ends_with(" init\n"),
        "git status clean, one commit: {v:#}"
    );
    assert_eq!(v["changes"], json!([]), "{v:#}");

    // A virtualenv: a thousand-odd files, none listed.
    let v = lab.exec_ok("task", "python3 -m venv --system-site-packages .venv");
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert_eq!(ignored_names(&v), set(&[".venv"]), "{v:#}");
    assert!(ignored(&v, ".venv") > 500, "{}", v["ignored"]);
    assert!(v["checkpoint"].is_string(), "{v:#}");
    host_clean("venv");

    // Without the dependency the tests cannot even import the package; the bytecode
    // caches python wrote on the way are counted, not listed.
    let v = lab.exec("task", "./scripts/check.sh");
    assert_ne!(v["exit_code"], json!(0), "{v:#}");
    assert!(
        v["stderr"]["text"].as_str().unwrap().contains("helper"),
        "{v:#}"
    );
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert!(
        ignored(&v, "src") >= 1 && ignored(&v, "tests") >= 1,
        "{v:#}"
    );

    // pip install is networked: asked, approved, and installs from the wheel alone.
    let v = lab.exec_approved("task", ".venv/bin/pip install --find-links wheels/ helper");
    assert!(
        v["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("Successfully installed helper-1.0"),
        "{v:#}"
    );
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert_eq!(ignored_names(&v), set(&[".venv"]), "{v:#}");
    assert!(ignored(&v, ".venv") >= 8, "{}", v["ignored"]);
    host_clean("pip install");

    // The tests pass, and change nothing that is listed.
    let v = lab.exec("task", "./scripts/check.sh");
    assert!(tests_passed(&v), "{v:#}");
    assert_eq!(v["changes"], json!([]), "{v:#}");
    host_clean("tests");

    // An edit of the package and of the (executable) runner.
    let edit = format!(
        "cat > src/pkg/__init__.py <<'EOF'\n{PY_INIT_EDITED}EOF\ncat > scripts/check.sh <<'EOF'\n{PY_CHECK_EDITED}EOF\n"
    );
    let v = lab.exec_ok("task", &edit);
    assert_eq!(
        paths(&v),
        set(&["/scripts/check.sh", "/src/pkg/__init__.py"]),
        "{v:#}"
    );
    assert_eq!(change(&v, "/src/pkg/__init__.py")["status"], "modified");
    assert_eq!(change(&v, "/scripts/check.sh")["status"], "modified");
    assert_eq!(change(&v, "/scripts/check.sh")["new_mode"], json!(0o755));
    let v = lab.exec("task", "./scripts/check.sh");
    assert!(tests_passed(&v), "{v:#}");
    assert!(
        v["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("sum 10 sub 5"),
        "{v:#}"
    );

    // Committed in the fork: the commit is all under .git/, so nothing is listed.
    let v = lab.exec_ok(
        "task",
        "git add -A && git -c user.name=t -c user.email=t@e commit -qm 'add sub'",
    );
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert!(ignored(&v, ".git") > 0, "{v:#}");
    let v = lab.exec_ok(
        "task",
        "git log --oneline && git --no-optional-locks status --porcelain",
    );
    assert_eq!(v["decision"]["action"], "allow", "{v:#}");
    let log: Vec<&str> = v["stdout"]["text"].as_str().unwrap().lines().collect();
    assert_eq!(log.len(), 2, "two commits, a clean tree: {log:?}");
    assert!(
        log[0].ends_with(" add sub") && log[1].ends_with(" init"),
        "{log:?}"
    );
    host_clean("commit");

    // Break something; rollback (of the last command) brings it back.
    let v = lab.exec("task", "rm src/pkg/__init__.py && ./scripts/check.sh");
    assert_ne!(v["exit_code"], json!(0), "{v:#}");
    assert_eq!(
        change(&v, "/src/pkg/__init__.py")["status"],
        "deleted",
        "{v:#}"
    );
    let broke = v["exec_id"].as_u64().unwrap();
    assert!(!lab.exists("task", "src/pkg/__init__.py"));
    let r = lab.data("task", &["rollback"]);
    assert_eq!(r["target"], json!(broke), "{r:#}");
    assert_eq!(lab.cat("task", "src/pkg/__init__.py"), PY_INIT_EDITED);
    let v = lab.exec("task", "./scripts/check.sh");
    assert!(tests_passed(&v), "after rollback: {v:#}");
    host_clean("rollback");

    // What the fork did since its base: the two edits; the venv, the caches and the
    // commit only counted.
    let d = lab.data("task", &["diff", "@base"]);
    assert_eq!(
        paths(&d),
        set(&["/scripts/check.sh", "/src/pkg/__init__.py"]),
        "{d:#}"
    );
    for name in [".venv", ".git", "src", "tests"] {
        assert!(ignored(&d, name) > 0, "{name} not counted: {d:#}");
    }
    assert!(ignored(&d, ".venv") > 500, "{d:#}");

    // Merged into p: the edits land, the venv stays in the fork.
    let m = lab.data("p", &["merge", "task"]);
    assert_eq!(m["conflicts"], json!([]), "{m:#}");
    assert_eq!(
        paths(&m),
        set(&["/scripts/check.sh", "/src/pkg/__init__.py"]),
        "{m:#}"
    );
    assert!(ignored(&m, ".venv") > 500, "{m:#}");
    assert!(!lab.exists("p", ".venv"));
    assert!(!lab.exists("p", "src/pkg/__pycache__"));
    assert!(lab.exists("task", ".venv/bin/pip"));
    assert_eq!(lab.cat("p", "src/pkg/__init__.py"), PY_INIT_EDITED);
    assert_eq!(
        lab.data("p", &["stat", "scripts/check.sh"])["mode"],
        json!(0o755)
    );
    host_clean("merge");

    // Applied to the host it came from: exactly the two edited files.
    let dry = lab.data("p", &["apply", "--dry-run"]);
    assert_eq!(
        dry["written"],
        json!(["/scripts/check.sh", "/src/pkg/__init__.py"]),
        "{dry:#}"
    );
    assert_eq!(dry["deleted"], json!([]), "{dry:#}");
    host_clean("apply --dry-run");
    let a = lab.data("p", &["apply"]);
    assert_eq!(a["written"], dry["written"], "{a:#}");
    assert_eq!(a["deleted"], json!([]), "{a:#}");
    assert_eq!(a["forced"], json!([]), "{a:#}");
    assert_eq!(a["host"], json!(fs::canonicalize(&host).unwrap()), "{a:#}");
    assert_eq!(
        git(&host, &["status", "--porcelain"]),
        " M scripts/check.sh\n M src/pkg/__init__.py\n"
    );
    assert_eq!(
        fs::read_to_string(host.join("src/pkg/__init__.py")).unwrap(),
        PY_INIT_EDITED
    );
    assert_eq!(
        fs::read_to_string(host.join("scripts/check.sh")).unwrap(),
        PY_CHECK_EDITED
    );
    assert_eq!(mode(&host.join("scripts/check.sh")), 0o755);
    // The fork's commit stays in the fork (.git/ is ignored), as do the venv and caches.
    assert_eq!(git(&host, &["log", "--oneline"]).lines().count(), 1);
    assert!(!host.join(".venv").exists());
    assert!(!host.join("src/pkg/__pycache__").exists());
    // The secret: untouched, never listed; nothing under .venv or .git listed either.
    assert_eq!(fs::read(host.join(".env")).unwrap(), PY_SECRET.as_bytes());
    assert_eq!(mode(&host.join(".env")), 0o600);
    lab.never_listed("/.env");
    lab.never_listed("/.venv");
    lab.never_listed("/.git");
    lab.done("python loop");
}

const NODE_TEST: &str = r#"const dep = require("dep");
if (dep.greet("x") !== "hello x") {
  console.error("wrong greeting");
  process.exit(1);
}
console.log("ok", dep.greet("avfs"));
"#;

#[test]
fn node_project_with_a_packed_local_dependency_installs_offline_merges_and_applies() {
    if !require_sandbox() || !require_root() || !require_tool("git") || !require_tool("npm") {
        return;
    }
    let lab = Lab::new();
    let npm_cache = lab.host("npm-cache");
    let npm_cache = npm_cache.to_str().unwrap();
    let npm_env = [
        ("npm_config_cache", npm_cache),
        ("npm_config_offline", "true"),
    ];

    // The dependency, packed to a tarball inside the project (npm pack needs no network).
    let dep = lab.host("dep");
    fs::create_dir_all(&dep).unwrap();
    fs::write(
        dep.join("package.json"),
        "{\"name\": \"dep\", \"version\": \"1.0.0\", \"main\": \"index.js\"}\n",
    )
    .unwrap();
    fs::write(
        dep.join("index.js"),
        "module.exports = { greet: (n) => \"hello \" + n };\n",
    )
    .unwrap();
    let host = lab.host("app");
    fs::create_dir_all(&host).unwrap();
    let packed = host_run(
        &dep,
        "npm",
        &["pack", "--pack-destination", host.to_str().unwrap()],
        &npm_env,
    );
    assert_eq!(packed.trim(), "dep-1.0.0.tgz");
    repo(
        &host,
        &[
            (
                "package.json",
                "{\n  \"name\": \"app\",\n  \"version\": \"1.0.0\",\n  \"private\": true,\n  \
                 \"scripts\": { \"test\": \"node test.js\" },\n  \
                 \"dependencies\": { \"dep\": \"file:dep-1.0.0.tgz\" }\n}\n",
                0o644,
            ),
            ("test.js", NODE_TEST, 0o644),
            (".gitignore", "node_modules/\n", 0o644),
        ],
    );
    assert!(
        git(&host, &["ls-files"]).contains("dep-1.0.0.tgz"),
        "the tarball is committed"
    );
    let host_clean = |step: &str| {
        assert_eq!(
            git(&host, &["status", "--porcelain"]),
            "",
            "the host changed before apply ({step})"
        );
    };

    lab.data("n", &["vault", "create", "n"]);
    lab.data("n", &["import", host.to_str().unwrap()]);
    lab.data("n", &["vault", "fork", "n", "task"]);

    // npm install is networked: asked, approved, then installs from the tarball alone.
    let v = lab.exec_approved("task", "npm install --offline --no-audit --no-fund");
    assert_eq!(paths(&v), set(&["/package-lock.json"]), "{v:#}");
    assert_eq!(change(&v, "/package-lock.json")["status"], "added");
    assert_eq!(ignored_names(&v), set(&["node_modules"]), "{v:#}");
    // node_modules/, its .package-lock.json, dep/ and dep's two files.
    assert!(ignored(&v, "node_modules") >= 4, "{v:#}");
    assert!(lab.exists("task", "node_modules/dep/index.js"));
    host_clean("npm install");

    // The installed dependency works, through npm's scripts and plain node.
    let v = lab.exec_ok(
        "task",
        "npm test && node -e 'console.log(require(\"dep\").greet(\"node\"))'",
    );
    let out = v["stdout"]["text"].as_str().unwrap();
    assert!(out.contains("ok hello avfs"), "{v:#}");
    assert!(out.ends_with("hello node\n"), "{v:#}");
    assert_eq!(v["changes"], json!([]), "{v:#}");

    // Breaking the install and rolling it back.
    let v = lab.exec("task", "rm -rf node_modules/dep && npm test");
    assert_ne!(v["exit_code"], json!(0), "{v:#}");
    assert_eq!(v["changes"], json!([]), "only ignored files went: {v:#}");
    assert!(ignored(&v, "node_modules") >= 3, "{v:#}");
    lab.data("task", &["rollback"]);
    let v = lab.exec_ok("task", "npm test");
    assert!(
        v["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("ok hello avfs"),
        "{v:#}"
    );

    let d = lab.data("task", &["diff", "@base"]);
    assert_eq!(paths(&d), set(&["/package-lock.json"]), "{d:#}");
    assert_eq!(ignored_names(&d), set(&["node_modules"]), "{d:#}");
    let lock = lab.cat("task", "package-lock.json");
    let lock_json: Value = serde_json::from_str(&lock).unwrap();
    assert_eq!(
        lock_json["packages"]["node_modules/dep"]["resolved"],
        json!("file:dep-1.0.0.tgz"),
        "{lock}"
    );

    let m = lab.data("n", &["merge", "task"]);
    assert_eq!(paths(&m), set(&["/package-lock.json"]), "{m:#}");
    assert!(ignored(&m, "node_modules") >= 4, "{m:#}");
    assert!(!lab.exists("n", "node_modules"));
    host_clean("merge");

    let a = lab.data("n", &["apply"]);
    assert_eq!(a["written"], json!(["/package-lock.json"]), "{a:#}");
    assert_eq!(a["deleted"], json!([]), "{a:#}");
    assert_eq!(
        git(&host, &["status", "--porcelain"]),
        "?? package-lock.json\n"
    );
    assert_eq!(
        fs::read_to_string(host.join("package-lock.json")).unwrap(),
        lock
    );
    assert!(!host.join("node_modules").exists());
    lab.never_listed("/node_modules");

    // The applied lock file is one the host can install from, offline.
    host_run(&host, "npm", &["ci", "--no-audit", "--no-fund"], &npm_env);
    let out = host_run(&host, "npm", &["test"], &npm_env);
    assert!(out.contains("ok hello avfs"), "{out}");
    lab.done("node loop");
}

const RS_MAIN: &str = "fn main() {\n    println!(\"{}\", dep::greet(\"avfs\"));\n}\n";

const RS_MAIN_EDITED: &str =
    "fn main() {\n    println!(\"{} (edited in the fork)\", dep::greet(\"avfs\"));\n}\n";

#[test]
fn rust_crate_with_a_vendored_dependency_builds_offline_in_the_fork_and_on_the_host() {
    if !require_sandbox() || !require_root() || !require_tool("git") || !require_tool("cargo") {
        return;
    }
    let lab = Lab::new();
    let host = lab.host("crate");
    // `dep` comes from crates.io as far as Cargo.toml says; .cargo/config.toml replaces
    // crates.io with the vendor/ directory, laid out as `cargo vendor` writes it (a
    // .cargo-checksum.json per crate, no file hashes to check).
    let checksum = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";
    let files: Vec<(&str, String, u32)> = vec![
        (
            "Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ndep = \"0.1\"\n"
                .into(),
            0o644,
        ),
        ("src/main.rs", RS_MAIN.into(), 0o644),
        (
            ".cargo/config.toml",
            "[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n\
             [source.vendored-sources]\ndirectory = \"vendor\"\n"
                .into(),
            0o644,
        ),
        (
            "vendor/dep/Cargo.toml",
            "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n".into(),
            0o644,
        ),
        (
            "vendor/dep/src/lib.rs",
            "pub fn greet(n: &str) -> String {\n    format!(\"hello {n}\")\n}\n".into(),
            0o644,
        ),
        (
            "vendor/dep/.cargo-checksum.json",
            format!("{{\"files\":{{}},\"package\":\"{checksum}\"}}"),
            0o644,
        ),
        (".gitignore", "/target/\n".into(), 0o644),
    ];
    let files: Vec<(&str, &str, u32)> =
        files.iter().map(|(p, c, m)| (*p, c.as_str(), *m)).collect();
    repo(&host, &files);
    // Built on the host first; Cargo.lock is committed, target/ is not.
    let cargo = |args: &[&str]| {
        let mut full = vec!["build", "--offline"];
        full.extend_from_slice(args);
        let mut cmd = Command::new("cargo");
        base_env(&mut cmd).args(&full).current_dir(&host);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "host cargo {full:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    };
    cargo(&[]);
    let host_bin = host.join("target/debug/app");
    let run_host_bin = || host_run(&host, host_bin.to_str().unwrap(), &[], &[]);
    assert_eq!(run_host_bin(), "hello avfs\n");
    let lock = fs::read_to_string(host.join("Cargo.lock")).unwrap();
    assert!(lock.contains(checksum), "{lock}");
    git(&host, &["add", "Cargo.lock"]);
    git(&host, &["commit", "-qm", "lock"]);
    assert!(
        !cargo(&[]).contains("Compiling"),
        "a second host build is fresh"
    );
    let host_clean = |step: &str| {
        assert_eq!(
            git(&host, &["status", "--porcelain"]),
            "",
            "the host changed before apply ({step})"
        );
    };

    // Imported without what .gitignore ignores: the host's target/ stays out.
    lab.data("r", &["vault", "create", "r"]);
    lab.data("r", &["import", "--gitignore", host.to_str().unwrap()]);
    assert!(!lab.exists("r", "target"));
    assert!(lab.exists("r", ".cargo/config.toml"));
    lab.data("r", &["vault", "fork", "r", "task"]);

    // Built in the sandbox from the vendored source; target/ is counted, not listed, and
    // Cargo.lock (already right) is not touched.
    let v = lab.exec_ok(
        "task",
        "cargo build --offline 2>&1 && ./target/debug/app && ls -l target/debug/app",
    );
    let out = v["stdout"]["text"].as_str().unwrap();
    assert!(out.contains("Compiling dep v0.1.0"), "{v:#}");
    assert!(out.contains("hello avfs\n"), "{v:#}");
    assert!(out.contains("-rwx"), "the binary is executable: {v:#}");
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert_eq!(ignored_names(&v), set(&["target"]), "{v:#}");
    assert!(ignored(&v, "target") > 10, "{v:#}");
    assert_eq!(lab.cat("task", "Cargo.lock"), lock);
    host_clean("cargo build");

    // An edit, rebuilt: only the source is listed.
    let edit = format!("cat > src/main.rs <<'EOF'\n{RS_MAIN_EDITED}EOF\n");
    let v = lab.exec_ok("task", &edit);
    assert_eq!(paths(&v), set(&["/src/main.rs"]), "{v:#}");
    let v = lab.exec_ok("task", "cargo build --offline 2>&1 && ./target/debug/app");
    let out = v["stdout"]["text"].as_str().unwrap();
    assert!(out.contains("Compiling app v0.1.0"), "{v:#}");
    assert!(
        !out.contains("Compiling dep"),
        "dep was already built: {v:#}"
    );
    assert!(out.ends_with("hello avfs (edited in the fork)\n"), "{v:#}");
    assert_eq!(v["changes"], json!([]), "{v:#}");
    assert!(ignored(&v, "target") > 0, "{v:#}");

    let d = lab.data("task", &["diff", "@base"]);
    assert_eq!(paths(&d), set(&["/src/main.rs"]), "{d:#}");
    assert_eq!(ignored_names(&d), set(&["target"]), "{d:#}");
    assert!(ignored(&d, "target") > 10, "{d:#}");

    let m = lab.data("r", &["merge", "task"]);
    assert_eq!(paths(&m), set(&["/src/main.rs"]), "{m:#}");
    assert!(!lab.exists("r", "target"));
    host_clean("merge");

    let a = lab.data("r", &["apply"]);
    assert_eq!(a["written"], json!(["/src/main.rs"]), "{a:#}");
    assert_eq!(a["deleted"], json!([]), "{a:#}");
    assert_eq!(git(&host, &["status", "--porcelain"]), " M src/main.rs\n");
    assert_eq!(
        fs::read_to_string(host.join("src/main.rs")).unwrap(),
        RS_MAIN_EDITED
    );
    lab.never_listed("/target");

    // The host's own target/ was left alone (still the old binary), and the host's next
    // build sees the applied source: it rebuilds the app, not the untouched dependency.
    assert_eq!(run_host_bin(), "hello avfs\n");
    let built = cargo(&[]);
    assert!(built.contains("Compiling app v0.1.0"), "{built}");
    assert!(!built.contains("Compiling dep"), "{built}");
    assert_eq!(run_host_bin(), "hello avfs (edited in the fork)\n");
    assert_eq!(fs::read_to_string(host.join("Cargo.lock")).unwrap(), lock);
    lab.done("rust loop");
}
