//! The CLI side of the tests: a throwaway `$AVFS_HOME` (`TestEnv`), a runner for the real
//! `avfs` binary, and JSON-contract checking of every `--json` output against the committed
//! schema.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use assert_cmd::Command;
use assert_cmd::assert::Assert;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The real binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_avfs");

/// The committed JSON contract.
pub fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/avfs.schema.json")
}

/// Compiled validators for the envelope and every command's `data`.
pub struct Contract {
    pub doc: Value,
    envelope: jsonschema::Validator,
    /// A command whose schema does not compile maps to the error; its outputs are then
    /// checked against the envelope only, and `every_command_schema_compiles` (in
    /// cli_json_contract.rs) reports the broken schema once instead of every test failing.
    commands: BTreeMap<String, Result<jsonschema::Validator, String>>,
}

impl Contract {
    /// Command names listed in the schema's `commands`.
    pub fn command_names(&self) -> BTreeSet<String> {
        self.commands.keys().cloned().collect()
    }

    /// Commands whose data schema does not compile, with the reason.
    pub fn broken_schemas(&self) -> BTreeMap<String, String> {
        self.commands
            .iter()
            .filter_map(|(k, v)| v.as_ref().err().map(|e| (k.clone(), e.clone())))
            .collect()
    }
}

pub fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        let text = fs::read_to_string(schema_path()).expect("read schema/avfs.schema.json");
        let doc: Value = serde_json::from_str(&text).expect("schema is JSON");
        let envelope =
            jsonschema::validator_for(&doc["envelope"]).expect("envelope schema compiles");
        let commands = doc["commands"]
            .as_object()
            .expect("schema has a `commands` object")
            .iter()
            .map(|(name, schema)| {
                let v = jsonschema::validator_for(schema).map_err(|e| e.to_string());
                (name.clone(), v)
            })
            .collect();
        Contract {
            doc,
            envelope,
            commands,
        }
    })
}

/// Check `data` against the schema of `command` (as named in the envelope); panics with
/// every violation.
pub fn check_data(command: &str, data: &Value) {
    let v = contract()
        .commands
        .get(command)
        .unwrap_or_else(|| panic!("command `{command}` is not in the schema"));
    let v = v
        .as_ref()
        .unwrap_or_else(|e| panic!("the schema of `{command}` does not compile: {e}"));
    let errs = validation_errors(v, data);
    assert!(
        errs.is_empty(),
        "data of `{command}` does not match the schema: {errs:?}\n{data:#}"
    );
}

/// The exit code README.md documents for an error kind.
pub fn exit_code_for(kind: &str) -> i32 {
    match kind {
        "storage_error"
        | "mount_failed"
        | "fuse_unavailable"
        | "confinement_unavailable"
        | "session_failed" => 1,
        "usage" => 2,
        "vault_not_found"
        | "no_vault_selected"
        | "fork_not_found"
        | "path_not_found"
        | "checkpoint_not_found"
        | "checkpoint_gone"
        | "operation_not_found"
        | "session_not_found" => 3,
        "already_exists"
        | "host_path_exists"
        | "merge_conflict"
        | "apply_conflict"
        | "revert_conflict"
        | "nothing_to_undo"
        | "nothing_to_redo"
        | "nothing_to_roll_back"
        | "branch_moved"
        | "vault_replaced"
        | "workspace_busy"
        | "head_moved" => 4,
        "invalid_path"
        | "hard_link_not_allowed"
        | "invalid_name"
        | "invalid_argument"
        | "secret_refused"
        | "not_a_directory"
        | "is_a_directory"
        | "directory_not_empty" => 5,
        "quota_exceeded" | "file_too_large" => 6,
        "not_a_vault" | "unsupported_format" | "unsupported_engine" | "corrupt_vault" => 7,
        "io_error" | "store_unavailable" => 8,
        "disk_full" => 9,
        "spawn_failed" => 127,
        other => panic!("error kind `{other}` is not documented in README.md"),
    }
}

fn validation_errors(v: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Stdout as exactly one JSON document (stdout and stderr in the panic otherwise).
pub fn one_document(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(
        docs.len(),
        1,
        "expected exactly one JSON document on stdout, got {}:\n{stdout}",
        docs.len()
    );
    docs.into_iter().next().unwrap()
}

/// Parse stdout as exactly one JSON document and check it against the contract: the
/// envelope always, `data` against `commands[command]` on success, and the exit code
/// against the documented one for the error kind on failure.
pub fn check_json_output(args: &[&str], out: &Output) -> Value {
    let doc = one_document(out);
    let c = contract();
    let errs = validation_errors(&c.envelope, &doc);
    assert!(
        errs.is_empty(),
        "avfs {args:?}: envelope does not match the schema: {errs:?}\n{doc:#}"
    );
    let code = out.status.code().expect("avfs exited by signal");
    if doc["ok"] == json!(true) {
        let command = doc["command"].as_str().unwrap();
        // `proxy exec` exits with the command's own code (README, "Exit codes"); its tests
        // assert that code.
        if command != "proxy exec" {
            assert_eq!(code, 0, "avfs {args:?}: ok:true but exit code {code}");
        }
        let v = c
            .commands
            .get(command)
            .unwrap_or_else(|| panic!("avfs {args:?}: command `{command}` is not in the schema"));
        if let Ok(v) = v {
            let errs = validation_errors(v, &doc["data"]);
            assert!(
                errs.is_empty(),
                "avfs {args:?}: data of `{command}` does not match the schema: {errs:?}\n{doc:#}"
            );
        }
    } else {
        let kind = doc["error"]["kind"].as_str().unwrap();
        assert_eq!(
            code,
            exit_code_for(kind),
            "avfs {args:?}: error kind `{kind}` exited with {code}, README documents {}\n{doc:#}",
            exit_code_for(kind)
        );
    }
    doc
}

/// A throwaway `$AVFS_HOME` plus a scratch directory (the working directory of every run).
pub struct TestEnv {
    pub dir: TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub actor: String,
    seen: RefCell<BTreeSet<String>>,
}

/// Prefix `args` with `--workspace NAME` when one is given.
pub fn sel<'a>(vault: Option<&'a str>, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = Vec::new();
    if let Some(name) = vault {
        v.push("--workspace");
        v.push(name);
    }
    v.extend_from_slice(args);
    v
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("avfs-test-")
            .tempdir()
            .expect("tempdir");
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        fs::create_dir_all(&work).unwrap();
        TestEnv {
            dir,
            home,
            work,
            actor: "test-agent".into(),
            seen: RefCell::new(BTreeSet::new()),
        }
    }

    /// A fresh environment with one vault, which is current.
    pub fn with_vault(name: &str) -> Self {
        let env = Self::new();
        env.create_vault(name);
        env
    }

    /// `avfs` with AVFS_HOME/AVFS_ACTOR set and AVFS_WORKSPACE and AVFS_VAULT removed.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("AVFS_HOME", &self.home)
            .env("AVFS_ACTOR", &self.actor)
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT")
            .current_dir(&self.work);
        if let Some(url) = super::skip::postgres_db_for(&self.home) {
            c.env("AVFS_POSTGRES_URL", url);
        }
        c
    }

    /// A std `Command` with the same environment (for spawning processes in parallel).
    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(BIN);
        c.env("AVFS_HOME", &self.home)
            .env("AVFS_ACTOR", &self.actor)
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT")
            .current_dir(&self.work);
        if let Some(url) = super::skip::postgres_db_for(&self.home) {
            c.env("AVFS_POSTGRES_URL", url);
        }
        c
    }

    pub fn avfs(&self, args: &[&str]) -> Assert {
        self.cmd().args(args).assert()
    }

    pub fn avfs_in(&self, args: &[&str], stdin: &[u8]) -> Assert {
        self.cmd().args(args).write_stdin(stdin.to_vec()).assert()
    }

    /// Run in text mode, require success, return stdout.
    pub fn stdout(&self, args: &[&str]) -> String {
        let out = self.avfs(args).success().get_output().clone();
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Run in text mode, require success, return raw stdout bytes.
    pub fn bytes(&self, args: &[&str]) -> Vec<u8> {
        self.avfs(args).success().get_output().stdout.clone()
    }

    fn json_raw(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let mut c = self.cmd();
        c.args(&full);
        for (k, v) in env {
            c.env(k, v);
        }
        c.write_stdin(stdin.unwrap_or_default().to_vec());
        let out = c.output().expect("run avfs");
        let doc = check_json_output(&full, &out);
        if doc["ok"] == json!(true) {
            self.seen
                .borrow_mut()
                .insert(doc["command"].as_str().unwrap().to_string());
        }
        doc
    }

    /// Run with `--json`; returns the whole envelope after checking it against the schema.
    pub fn json(&self, args: &[&str]) -> Value {
        self.json_raw(args, None, &[])
    }

    pub fn json_in(&self, args: &[&str], stdin: &[u8]) -> Value {
        self.json_raw(args, Some(stdin), &[])
    }

    pub fn json_env(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        self.json_raw(args, None, env)
    }

    fn expect_ok(args: &[&str], doc: Value) -> Value {
        assert_eq!(doc["ok"], json!(true), "avfs {args:?} failed:\n{doc:#}");
        doc["data"].clone()
    }

    /// Run with `--json`, require success, return `data`.
    pub fn data(&self, args: &[&str]) -> Value {
        Self::expect_ok(args, self.json(args))
    }

    pub fn data_in(&self, args: &[&str], stdin: &[u8]) -> Value {
        Self::expect_ok(args, self.json_in(args, stdin))
    }

    pub fn data_env(&self, args: &[&str], env: &[(&str, &str)]) -> Value {
        Self::expect_ok(args, self.json_env(args, env))
    }

    fn expect_err(args: &[&str], doc: Value, kind: &str) -> Value {
        assert_eq!(
            doc["ok"],
            json!(false),
            "avfs {args:?} succeeded, expected {kind}:\n{doc:#}"
        );
        assert_eq!(
            doc["error"]["kind"],
            json!(kind),
            "avfs {args:?}: wrong error kind:\n{doc:#}"
        );
        doc["error"].clone()
    }

    /// Run with `--json`, require failure of `kind` (with its documented exit code);
    /// returns the `error` object.
    pub fn err(&self, args: &[&str], kind: &str) -> Value {
        Self::expect_err(args, self.json(args), kind)
    }

    pub fn err_in(&self, args: &[&str], stdin: &[u8], kind: &str) -> Value {
        Self::expect_err(args, self.json_in(args, stdin), kind)
    }

    pub fn err_env(&self, args: &[&str], env: &[(&str, &str)], kind: &str) -> Value {
        Self::expect_err(args, self.json_env(args, env), kind)
    }

    /// Commands that succeeded under `--json` in this environment.
    pub fn seen_commands(&self) -> BTreeSet<String> {
        self.seen.borrow().clone()
    }

    pub fn create_vault(&self, name: &str) -> Value {
        self.data(&["vault", "create", name])
    }

    /// Where `vault create NAME` puts the file.
    pub fn vault_file(&self, name: &str) -> PathBuf {
        self.home.join("vaults").join(format!("{name}.avfs"))
    }

    /// A path in the scratch directory.
    pub fn host(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    pub fn write(&self, vault: Option<&str>, path: &str, content: &[u8]) -> Value {
        self.data_in(&sel(vault, &["write", "-p", path]), content)
    }

    pub fn cat(&self, vault: Option<&str>, path: &str) -> Vec<u8> {
        self.bytes(&sel(vault, &["cat", path]))
    }

    pub fn cat_at(&self, vault: Option<&str>, path: &str, at: &str) -> Vec<u8> {
        self.bytes(&sel(vault, &["cat", path, "--at", at]))
    }

    pub fn stats(&self, vault: Option<&str>) -> Value {
        self.data(&sel(vault, &["stats"]))
    }

    pub fn checkpoint_names(&self, vault: Option<&str>) -> Vec<String> {
        self.data(&sel(vault, &["checkpoint", "list"]))
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Every path of the live tree with its full `stat` record, plus the checkpoint list:
    /// enough to tell that a failed command changed nothing.
    pub fn state(&self, vault: Option<&str>) -> Value {
        let found = self.data(&sel(vault, &["find", "*"]));
        let mut tree = BTreeMap::new();
        for e in found.as_array().unwrap() {
            let path = e["path"].as_str().unwrap().to_string();
            let stat = self.data(&sel(vault, &["stat", &path]));
            tree.insert(path, stat);
        }
        json!({
            "tree": tree,
            "checkpoints": self.data(&sel(vault, &["checkpoint", "list"])),
        })
    }

    /// Regular files of the live tree (path -> content), read with `cat`.
    pub fn files(&self, vault: Option<&str>) -> BTreeMap<String, Vec<u8>> {
        let found = self.data(&sel(vault, &["find", "*", "--type", "f"]));
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let p = e["path"].as_str().unwrap().to_string();
                let data = self.cat(vault, &p);
                (p, data)
            })
            .collect()
    }

    /// Audit records, newest first.
    pub fn audit(&self, vault: Option<&str>, limit: usize) -> Vec<Value> {
        self.data(&sel(vault, &["audit", "--limit", &limit.to_string()]))
            .as_array()
            .unwrap()
            .clone()
    }
}

/// Unmounts on drop, so a failing test leaves no mount (or daemon) behind.
pub struct Unmount<'a>(pub &'a TestEnv, pub PathBuf);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .cmd()
            .args(["unmount", self.1.to_str().unwrap()])
            .output();
    }
}
