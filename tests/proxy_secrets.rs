//! Secrets during `avfs proxy exec`: which environment variables the command does not get,
//! with the default policy. Real binary, real vault, real FUSE mount.

mod mount_support;

use std::collections::BTreeMap;

use mount_support::{avfs_env, avfs_in, ok, require_fuse};
use serde_json::Value;

struct Env {
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        assert!(require_fuse() || std::env::var("AVFS_CI_ALLOW_NO_FUSE").is_ok());
        let home = tempfile::tempdir().unwrap();
        ok(avfs_in(home.path(), &["vault", "create", "w"]));
        Env { home }
    }

    /// `avfs --json proxy exec ARGS` with these environment variables added: the envelope's
    /// data and the exit code.
    fn exec_env(&self, args: &[&str], env: &[(&str, &str)]) -> (Value, i32) {
        let mut full = vec!["--json", "proxy", "exec"];
        full.extend_from_slice(args);
        let out = avfs_env(self.home.path(), &full, env);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not one JSON document ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v["data"].clone(), out.status.code().unwrap_or(-1))
    }
}

/// The environment the proxied command got, as `env` prints it.
fn child_env(v: &Value) -> BTreeMap<String, String> {
    v["stdout"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn secret_looking_environment_is_withheld_and_the_rest_passes() {
    let e = Env::new();
    let secret = [
        ("my_token", "t0k3n"),
        ("DATABASE_URL", "postgres://u:pass@db.example/app"),
        (
            "PIP_INDEX_URL",
            "https://__token__:pypi-abc@pypi.example/simple",
        ),
        ("GH_PAT", "ghp_abc"),
        ("NPM_AUTH", "npm_abc"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.1"),
        ("githubToken", "ghp_def"),
        ("Db_Password", "hunter2"),
        ("OPENAI_API_KEY", "sk-abc"),
        ("client_secret", "s3cr3t"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json"),
    ];
    let ordinary = [
        ("HOME", "/home/agent"),
        ("LANG", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("PYTHONPATH", "/opt/py"),
        ("MANPATH", "/usr/share/man"),
        ("KEYBOARD", "us"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("GIT_AUTHOR_NAME", "agent"),
        ("REGISTRY_URL", "https://registry.example/simple"),
        ("NOTES", "mail me at a@b.example"),
    ];
    let all: Vec<(&str, &str)> = secret.iter().chain(&ordinary).copied().collect();
    let (v, code) = e.exec_env(&["--", "env"], &all);
    assert_eq!(code, 0, "{v}");
    let got = child_env(&v);
    for (k, _) in secret {
        assert!(!got.contains_key(k), "{k} reached the command: {got:?}");
    }
    for (k, val) in ordinary {
        assert_eq!(got.get(k).map(String::as_str), Some(val), "{k}: {got:?}");
    }
    assert_eq!(
        got.get("PATH").map(String::as_str),
        std::env::var("PATH").ok().as_deref()
    );

    // --allow-env passes one by its exact name, whichever rule withheld it.
    let (v, _) = e.exec_env(
        &[
            "--allow-env",
            "DATABASE_URL",
            "--allow-env",
            "my_token",
            "--",
            "env",
        ],
        &all,
    );
    let got = child_env(&v);
    assert_eq!(got["DATABASE_URL"], "postgres://u:pass@db.example/app");
    assert_eq!(got["my_token"], "t0k3n");
    assert!(!got.contains_key("GH_PAT"), "{got:?}");

    // So does the policy's env_allow.
    let policy = e.home.path().join("allow.toml");
    std::fs::write(
        &policy,
        "version = 1\n[secrets]\nenv_allow = [\"GH_PAT\", \"SSH_AUTH_SOCK\"]\n",
    )
    .unwrap();
    let (v, _) = e.exec_env(&["--policy", policy.to_str().unwrap(), "--", "env"], &all);
    let got = child_env(&v);
    assert_eq!(got["GH_PAT"], "ghp_abc");
    assert_eq!(got["SSH_AUTH_SOCK"], "/tmp/ssh-XXXX/agent.1");
    assert!(!got.contains_key("NPM_AUTH"), "{got:?}");
}
