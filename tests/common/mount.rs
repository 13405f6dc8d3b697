//! The mount side of the tests: a vault mounted through the real `avfs` binary in a temp
//! dir, a proxy environment, and the plain `avfs` runner they use. Mounting needs FUSE: the
//! constructors return None only where `skip::require_fuse` allowed a visible skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub use super::skip::require_fuse;

/// Whether mounts must use FUSE over io_uring: the kernel allows it (the fuse module's
/// `enable_uring` is on, or avfs turns it on as root), or AVFS_REQUIRE_URING=1 says the
/// run must test it.
pub fn uring_expected() -> bool {
    let root = rustix::process::geteuid().is_root();
    std::env::var("AVFS_REQUIRE_URING").as_deref() == Ok("1")
        || std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
            .is_ok_and(|v| v.trim() == "Y" || root)
}

/// The transport a mount made now must report (`avfs mounts`): `io_uring` where
/// `uring_expected`, else `dev-fuse`.
pub fn expected_transport() -> &'static str {
    if uring_expected() {
        "io_uring"
    } else {
        "dev-fuse"
    }
}

/// A fresh vault `w` in a temporary `$AVFS_HOME`, for tests of proxied commands (each test
/// file adds the helpers it needs in its own `impl ProxyEnv`).
pub struct ProxyEnv {
    pub home: tempfile::TempDir,
}

impl ProxyEnv {
    /// None only when FUSE is missing and its absence may skip the test.
    pub fn new() -> Option<ProxyEnv> {
        if !require_fuse() {
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        ok(avfs_in(home.path(), &["vault", "create", "w"]));
        Some(ProxyEnv { home })
    }

    pub fn avfs(&self, args: &[&str]) -> Output {
        avfs_in(self.home.path(), args)
    }
}

impl Drop for ProxyEnv {
    /// Stop every session started in this home, so no daemon outlives the test.
    fn drop(&mut self) {
        let out = avfs_in(self.home.path(), &["--json", "session", "list"]);
        let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) else {
            return;
        };
        for s in v["data"].as_array().into_iter().flatten() {
            if let Some(name) = s["name"].as_str() {
                let _ = avfs_in(self.home.path(), &["session", "stop", name]);
            }
        }
    }
}

/// Run one of the project's scripts with the binary under test (`AVFS_BIN`), FUSE
/// required; returns its stdout after checking it succeeded (None: skipped without FUSE).
pub fn run_script(interpreter: &str, script: &str, args: &[&str]) -> Option<String> {
    if !require_fuse() {
        return None;
    }
    let out = Command::new(interpreter)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scripts")
                .join(script),
        )
        .args(args)
        .env("AVFS_BIN", env!("CARGO_BIN_EXE_avfs"))
        .output()
        .expect("run the script");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{script}: {stdout}\n{stderr}");
    println!("{stdout}");
    Some(stdout)
}

pub struct Mounted {
    pub home: tempfile::TempDir,
    pub dir: PathBuf,
    pub vault: String,
}

pub fn avfs_in(home: &Path, args: &[&str]) -> Output {
    avfs_env(home, args, &[])
}

/// `avfs` with `$AVFS_HOME` set, actor `test`, and no `$AVFS_WORKSPACE` or `$AVFS_VAULT`.
pub fn avfs_command(home: &Path) -> Command {
    let mut c = Command::new(super::BIN);
    c.env("AVFS_HOME", home)
        .env("AVFS_ACTOR", "test")
        .env_remove("AVFS_WORKSPACE")
        .env_remove("AVFS_VAULT");
    if let Some(url) = super::skip::postgres_db_for(home) {
        c.env("AVFS_POSTGRES_URL", url);
    }
    c
}

pub fn avfs_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    avfs_command(home)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run avfs")
}

/// `avfs --json ARGS`: the document, checked against the committed schema (and the exit
/// code against the documented one for an error), and the exit code.
pub fn avfs_json(home: &Path, args: &[&str]) -> (Value, i32) {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let out = avfs_in(home, &full);
    let doc = super::check_json_output(&full, &out);
    (doc, out.status.code().unwrap_or(-1))
}

pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "avfs failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Mounted {
    /// A fresh vault `name` mounted at `<home>/mnt`. None only when FUSE is missing and
    /// its absence may skip the test (`skip::require_fuse`).
    pub fn new(name: &str) -> Option<Mounted> {
        if !require_fuse() {
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        ok(avfs_in(home.path(), &["vault", "create", name]));
        Some(Self::mount_with(home, name, &[]))
    }

    /// A fresh vault served through `/dev/fuse` even where io_uring is available (the
    /// fallback transport gets the same tests).
    pub fn dev_fuse(name: &str) -> Option<Mounted> {
        if !require_fuse() {
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        ok(avfs_in(home.path(), &["vault", "create", name]));
        Some(Self::mount_with(home, name, &[("AVFS_FUSE_URING", "0")]))
    }

    /// Mount an existing vault of `home`; FUSE must be there (the test has already
    /// required it, or this fails).
    pub fn mount_existing(home: tempfile::TempDir, vault: &str) -> Mounted {
        Self::mount_with(home, vault, &[])
    }

    fn mount_with(home: tempfile::TempDir, vault: &str, env: &[(&str, &str)]) -> Mounted {
        let dir = home.path().join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        ok(avfs_env(
            home.path(),
            &["mount", vault, dir.to_str().unwrap()],
            env,
        ));
        Mounted {
            home,
            dir,
            vault: vault.to_string(),
        }
    }

    pub fn avfs(&self, args: &[&str]) -> Output {
        avfs_in(self.home.path(), args)
    }

    fn record(&self) -> serde_json::Value {
        let out = ok(self.avfs(&["mounts", "--json"]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["dir"] == self.dir.to_str().unwrap())
            .expect("the mount is listed")
            .clone()
    }

    /// The transport `avfs mounts` reports for this mount (`io_uring` or `dev-fuse`).
    pub fn transport(&self) -> String {
        self.record()["transport"].as_str().unwrap().to_string()
    }

    /// The mount daemon's process id.
    pub fn pid(&self) -> u64 {
        self.record()["pid"].as_u64().unwrap()
    }

    /// How many times the daemon's io_uring workers went to sleep waiting for a request:
    /// at least once per request they answered, so it shows requests really came through
    /// the rings (and not only that io_uring was negotiated).
    pub fn ring_waits(&self) -> u64 {
        let pid = self.pid();
        let mut waits = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if !comm.starts_with("avfs-ring") {
                continue;
            }
            let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
            waits += status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .map_or(0, |n| n.trim().parse::<u64>().unwrap());
        }
        waits
    }

    /// Run a shell command with cwd in the mount.
    pub fn sh(&self, script: &str) -> String {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&self.dir)
            // A build in the mount writes its own target dir, whatever the test run uses.
            .env_remove("CARGO_TARGET_DIR")
            .env("HOME", self.home.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .expect("run sh");
        assert!(
            out.status.success(),
            "`{script}` failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn unmount(&self) {
        ok(self.avfs(&["unmount", self.dir.to_str().unwrap()]));
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.avfs(&["unmount", self.dir.to_str().unwrap()]);
    }
}

/// Counts the FUSE requests of one opcode that the kernel sends to one mount, through the
/// kernel's `fuse:fuse_request_send` tracepoint (Linux 6.15+) in a trace instance of its
/// own, so tests running at once do not see each other's requests. Root only.
pub struct RequestTrace {
    instance: PathBuf,
}

impl RequestTrace {
    /// Start counting `opcode` requests (see `include/uapi/linux/fuse.h`) sent to the
    /// mount at `dir`. None when the kernel has no FUSE tracepoints or tracefs is not
    /// mounted; callers decide whether that may skip.
    pub fn start(dir: &Path, opcode: u32) -> Option<RequestTrace> {
        use std::os::unix::fs::MetadataExt;
        let tracing = Path::new("/sys/kernel/tracing");
        if !tracing.join("events/fuse/fuse_request_send").exists() {
            return None;
        }
        // The tracepoint's `connection` is the mount's device number (kernel encoding).
        let dev = std::fs::metadata(dir).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let connection = (major << 20) | minor;
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let instance = tracing.join(format!("instances/avfs-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&instance).unwrap();
        let event = instance.join("events/fuse/fuse_request_send");
        std::fs::write(
            event.join("filter"),
            format!("connection == {connection} && opcode == {opcode}"),
        )
        .unwrap();
        std::fs::write(event.join("enable"), "1").unwrap();
        Some(RequestTrace { instance })
    }

    /// Requests counted so far.
    pub fn count(&self) -> usize {
        std::fs::read_to_string(self.instance.join("trace"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("fuse_request_send:"))
            .count()
    }
}

impl Drop for RequestTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.instance.join("events/fuse/fuse_request_send/enable"),
            "0",
        );
        let _ = std::fs::remove_dir(&self.instance);
    }
}
