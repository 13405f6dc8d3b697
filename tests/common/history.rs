//! Helpers for the history tests (`history_*.rs`): a throwaway `$AVFS_HOME` with scratch
//! space for host directories (`Env`), the binary run without `$AVFS_WORKSPACE` or
//! `$AVFS_VAULT`, every `--json` document checked against the committed schema, and host
//! trees without `.git`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::HostEntry as Entry;

/// A throwaway `$AVFS_HOME` plus scratch space for host directories.
pub struct Env {
    home: TempDir,
    scratch: TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env {
            home: tempfile::tempdir().unwrap(),
            scratch: tempfile::tempdir().unwrap(),
        }
    }

    /// The `$AVFS_HOME` every command of this environment runs with.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// A fresh, not yet existing path under the scratch directory.
    pub fn host(&self, name: &str) -> PathBuf {
        let p = self.scratch.path().join(name);
        assert!(!p.exists(), "{} already used", p.display());
        p
    }

    pub fn run(&self, vault: Option<&str>, args: &[&str], stdin: Option<&[u8]>) -> Output {
        self.run_with(vault, args, stdin, &[])
    }

    /// `run` with extra environment variables.
    pub fn run_with_env(
        &self,
        vault: Option<&str>,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> Output {
        self.run_with(vault, args, None, vars)
    }

    fn run_with(
        &self,
        vault: Option<&str>,
        args: &[&str],
        stdin: Option<&[u8]>,
        vars: &[(&str, &str)],
    ) -> Output {
        let mut cmd = Command::new(super::BIN);
        cmd.envs(vars.iter().copied());
        cmd.env("AVFS_HOME", self.home.path())
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT")
            .env("AVFS_ACTOR", "history-test");
        if let Some(url) = super::skip::postgres_db_for(self.home.path()) {
            cmd.env("AVFS_POSTGRES_URL", url);
        }
        if let Some(v) = vault {
            cmd.args(["--workspace", v]);
        }
        cmd.args(args);
        if let Some(input) = stdin {
            cmd.write_stdin(input.to_vec());
        }
        cmd.output().unwrap()
    }

    /// Run a command that must succeed; its stdout.
    pub fn ok(&self, vault: &str, args: &[&str]) -> String {
        let out = self.run(Some(vault), args, None);
        assert!(
            out.status.success(),
            "avfs --workspace {vault} {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The whole `--json` document (validated against the schema, the exit code against
    /// the documented one) and the exit code.
    pub fn json(&self, vault: Option<&str>, args: &[&str]) -> (Value, i32) {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = self.run(vault, &full, None);
        let doc = super::check_json_output(&full, &out);
        (doc, out.status.code().unwrap())
    }

    /// `data` of a `--json` command that must succeed.
    pub fn data(&self, vault: &str, args: &[&str]) -> Value {
        let (doc, code) = self.json(Some(vault), args);
        assert_eq!(code, 0, "avfs --workspace {vault} {args:?}: {doc}");
        assert_eq!(doc["ok"], json!(true));
        doc["data"].clone()
    }

    /// `error` of a `--json` command that must fail with `code` and `kind`.
    pub fn fail(&self, vault: Option<&str>, args: &[&str], code: i32, kind: &str) -> Value {
        let (doc, got) = self.json(vault, args);
        assert_eq!(doc["ok"], json!(false), "{args:?} should fail: {doc}");
        assert_eq!(doc["error"]["kind"], json!(kind), "{args:?}: {doc}");
        assert_eq!(got, code, "{args:?}: exit code for {kind}: {doc}");
        doc["error"].clone()
    }

    pub fn create(&self, name: &str) {
        let out = self.run(None, &["vault", "create", name], None);
        assert!(out.status.success(), "{:?}", out);
    }

    pub fn fork(&self, source: &str, name: &str) {
        self.ok(source, &["vault", "fork", source, name]);
    }

    /// Write a file (binary-safe, through stdin), creating parents.
    pub fn write(&self, vault: &str, path: &str, content: &[u8]) {
        let out = self.run(Some(vault), &["write", "-p", path], Some(content));
        assert!(
            out.status.success(),
            "write {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn cat(&self, vault: &str, path: &str) -> Vec<u8> {
        let out = self.run(Some(vault), &["cat", path], None);
        assert!(out.status.success(), "cat {path}: {:?}", out);
        out.stdout
    }

    pub fn exists(&self, vault: &str, path: &str) -> bool {
        self.run(Some(vault), &["stat", path], None)
            .status
            .success()
    }

    /// The whole observable tree (exported to the host): relative path -> entry.
    pub fn snapshot(&self, vault: &str) -> BTreeMap<String, Entry> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.host(&format!("snapshot-{n}"));
        self.ok(vault, &["export", "/", dir.to_str().unwrap()]);
        host_tree(&dir)
    }

    pub fn op_count(&self, vault: &str) -> usize {
        self.data(vault, &["op", "log", "--limit", "100000"])
            .as_array()
            .unwrap()
            .len()
    }
}

/// A host directory tree, `.git` excluded, without times.
pub fn host_tree(root: &Path) -> BTreeMap<String, Entry> {
    super::host_tree(root, false)
        .into_iter()
        .filter(|(rel, _)| rel != ".git" && !rel.starts_with(".git/"))
        .collect()
}

pub fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

/// The changed paths an envelope, diff or merge lists, in its order.
pub fn changed_paths(data: &Value) -> Vec<String> {
    data["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

/// Run real git in `dir` with a fixed identity and no user or system configuration;
/// its stdout. Fails the test when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
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

/// Turn the vault file at `path` back into format 3, as a vault written before format 4:
/// without `checkpoints.auto` and `audit.step`.
pub fn downgrade_to_format_3(path: &str, then: &str) {
    let db = rusqlite::Connection::open(path).unwrap();
    db.execute_batch(&format!(
        "ALTER TABLE checkpoints DROP COLUMN auto;
         DROP TABLE id_floor;
         DROP INDEX audit_by_step;
         ALTER TABLE audit DROP COLUMN step;
         {then}
         PRAGMA user_version = 3;"
    ))
    .unwrap();
}

pub fn changes_by_path(data: &Value) -> BTreeMap<String, Value> {
    data["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c.clone()))
        .collect()
}

/// Binary content: NUL bytes in every "line", so any line-based merge would be wrong.
pub fn binary(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.extend_from_slice(b"\0\x01\x02\n");
    }
    out
}

pub const TEN_LINES: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n";
