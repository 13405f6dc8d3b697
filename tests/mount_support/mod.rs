//! Shared by the mount tests: a vault mounted through the real `avfs` binary in a temp dir.
//! FUSE tests never skip silently: without /dev/fuse they fail unless
//! AVFS_CI_ALLOW_NO_FUSE=1 is set on purpose.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn require_fuse() -> bool {
    if Path::new("/dev/fuse").exists() {
        return true;
    }
    if std::env::var("AVFS_CI_ALLOW_NO_FUSE").as_deref() == Ok("1") {
        eprintln!("skipping: /dev/fuse missing and AVFS_CI_ALLOW_NO_FUSE=1");
        return false;
    }
    panic!(
        "/dev/fuse is missing: FUSE tests cannot run (set AVFS_CI_ALLOW_NO_FUSE=1 to skip on purpose)"
    );
}

pub struct Mounted {
    pub home: tempfile::TempDir,
    pub dir: PathBuf,
    pub vault: String,
}

pub fn avfs_in(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_avfs"))
        .args(args)
        .env("AVFS_HOME", home)
        .env("AVFS_ACTOR", "test")
        .env_remove("AVFS_VAULT")
        .output()
        .expect("run avfs")
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
    /// A fresh vault `name` mounted at `<home>/mnt`.
    pub fn new(name: &str) -> Mounted {
        assert!(require_fuse() || std::env::var("AVFS_CI_ALLOW_NO_FUSE").is_ok());
        let home = tempfile::tempdir().unwrap();
        ok(avfs_in(home.path(), &["vault", "create", name]));
        Self::mount_existing(home, name)
    }

    pub fn mount_existing(home: tempfile::TempDir, vault: &str) -> Mounted {
        let dir = home.path().join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        ok(avfs_in(
            home.path(),
            &["mount", vault, dir.to_str().unwrap()],
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

    /// Run a shell command with cwd in the mount.
    pub fn sh(&self, script: &str) -> String {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&self.dir)
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
