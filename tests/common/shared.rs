//! Hosts sharing vaults on the test PostgreSQL server and S3 gateway: each host its own
//! `$AVFS_HOME`, the server URL in its environment.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

use super::check_json_output;

/// A host: its own `$AVFS_HOME`, and the server URL in its environment (never on the
/// command line, as a user keeps it out of shell history).
pub struct Host {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub url: String,
}

impl Host {
    pub fn new(url: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        Host {
            home: dir.path().join("home"),
            dir,
            url: url.to_string(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    /// `avfs --json ARGS` with `env` on top of the host's (a `None` value unsets it).
    pub fn run_with(&self, args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
        self.command(args, env).output().expect("run avfs")
    }

    /// The command `run_with` runs.
    pub fn command(&self, args: &[&str], env: &[(&str, Option<&str>)]) -> std::process::Command {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let mut cmd = std::process::Command::new(super::BIN);
        cmd.args(&full)
            .env("AVFS_HOME", &self.home)
            .env("AVFS_ACTOR", "test")
            .env("AVFS_POSTGRES_URL", &self.url)
            .env_remove("AVFS_ENGINE")
            .env_remove("AVFS_WORKSPACE")
            .env_remove("AVFS_VAULT");
        for (k, v) in env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// Import `n` small files (`d<i % 30>/f<i>.txt` holding `i`), so a copy of the vault
    /// takes a while.
    pub fn import_files(&self, n: usize) {
        let src = self.dir.path().join("tree");
        for i in 0..n {
            let d = src.join(format!("d{}", i % 30));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
        }
        self.data(&["import", src.to_str().unwrap()]);
    }

    /// The schema of vault `name` on the server, from this host's vault file.
    pub fn schema(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.home.join(format!("vaults/{name}.avfs"))).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("schema = "))
            .expect("a schema line")
            .trim_matches('"')
            .to_string()
    }

    /// Create vault `name` on the server with its large objects under `s3://avfs-test/name`.
    pub fn create_with_objects(&self, name: &str) {
        let objects = format!("s3://avfs-test/{name}");
        self.data(&[
            "vault",
            "create",
            name,
            "--engine",
            "postgres",
            "--objects",
            &objects,
        ]);
    }

    /// The command's data; it must succeed.
    pub fn data(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        let doc = check_json_output(args, &out);
        assert!(out.status.success(), "avfs {args:?}: {doc}");
        doc["data"].clone()
    }

    /// The command's error document; it must fail with `kind`.
    pub fn err(&self, args: &[&str], kind: &str) -> Value {
        let out = self.run(args);
        let doc = check_json_output(args, &out);
        assert_eq!(doc["error"]["kind"], kind, "avfs {args:?}: {doc}");
        doc["error"].clone()
    }

    pub fn cat(&self, path: &str) -> String {
        self.cat_in("", path)
    }

    /// `cat PATH` in workspace `ws` (empty: the current one).
    pub fn cat_in(&self, ws: &str, path: &str) -> String {
        let args: Vec<&str> = if ws.is_empty() {
            vec!["cat", path]
        } else {
            vec!["--workspace", ws, "cat", path]
        };
        let out = self.run(&args);
        assert!(out.status.success(), "cat {path}: {out:?}");
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["data"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// A PostgreSQL vault `name` made on a first host, and `n` more hosts that attached it.
pub fn vault_on_hosts(url: &str, name: &str, n: usize) -> (Host, Vec<Host>) {
    let first = Host::new(url);
    first.data(&["vault", "create", name, "--engine", "postgres"]);
    let hosts: Vec<Host> = (0..n).map(|_| Host::new(url)).collect();
    for h in &hosts {
        h.data(&["vault", "attach", name]);
    }
    (first, hosts)
}

/// A vault name no other test (or earlier run on the same server) uses.
pub fn unique(what: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

pub fn server() -> Option<String> {
    super::skip::postgres_url()
}

/// The test S3 gateway (`AVFS_TEST_S3_ENDPOINT`, with the AWS variables set for it; the
/// scripts that start the servers set both), or a SKIP under `AVFS_TEST_NO_S3=1`.
pub fn s3() -> Option<String> {
    server()?;
    let endpoint = std::env::var("AVFS_TEST_S3_ENDPOINT").unwrap_or_default();
    super::skip::require(
        "AVFS_TEST_S3_ENDPOINT is not set (scripts/s3.sh start DIR prints one)",
        !endpoint.is_empty(),
        "AVFS_TEST_NO_S3",
    )
    .then_some(endpoint)
}

/// The keys under `prefix` in the test bucket, listed through the gateway itself.
pub fn s3_keys(endpoint: &str, prefix: &str) -> Vec<String> {
    let out = std::process::Command::new("curl")
        .args([
            "-sf",
            &format!("{endpoint}/avfs-test?list-type=2&max-keys=1000&prefix={prefix}/"),
        ])
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "listing the bucket: {out:?}");
    let xml = String::from_utf8_lossy(&out.stdout).to_string();
    xml.split("<Key>")
        .skip(1)
        .filter_map(|k| k.split("</Key>").next())
        .map(str::to_string)
        .collect()
}
