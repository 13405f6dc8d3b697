//! A vault on a full disk, through the real binary: the vault lives on a small tmpfs. Every
//! command that needs space fails with a typed `disk_full` (exit 9) and changes nothing,
//! the vault stays intact (`vault check`), and work resumes once space is freed.
//! Needs root to mount the tmpfs; without it the test fails unless
//! AVFS_CI_ALLOW_NO_DISK_FULL=1 is set on purpose.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A tmpfs of `size` mounted at a fresh directory, unmounted on drop.
struct SmallDisk {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl SmallDisk {
    fn new(size: &str) -> Option<SmallDisk> {
        if !common::skip::require(
            "the disk-full test mounts a tmpfs and needs root",
            rustix::process::geteuid().is_root(),
            "AVFS_CI_ALLOW_NO_DISK_FULL",
        ) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("disk");
        fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs failed");
        Some(SmallDisk { _dir: dir, mnt })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

fn avfs(home: &Path, args: &[&str], stdin: Option<&Path>) -> Output {
    let mut c = Command::new(common::BIN);
    c.args(args)
        .env("AVFS_HOME", home)
        .env_remove("AVFS_WORKSPACE")
        .env_remove("AVFS_VAULT")
        .current_dir(home.parent().unwrap_or(home));
    // A command that hangs on the full disk (sled's flush once did) fails the test instead
    // of holding up the suite.
    let mut c = assert_cmd::Command::from_std(c);
    if let Some(f) = stdin {
        c.pipe_stdin(f).unwrap();
    }
    let out = c
        .timeout(std::time::Duration::from_secs(LIMIT))
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_ne!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "`avfs {}` did not finish within {LIMIT} s",
        args.join(" ")
    );
    out
}

/// How long one command may take on the full disk.
const LIMIT: u64 = 120;

fn json(out: &Output) -> Value {
    common::one_document(out)
}

#[test]
fn a_full_disk_is_disk_full_changes_nothing_and_work_resumes() {
    // sled needs more room around its writes (it cannot report a full disk itself, so avfs
    // keeps 16 MiB spare for it): a bigger disk and more to free.
    let sled = common::skip::engine() == "sled";
    let Some(disk) = SmallDisk::new(if sled { "40m" } else { "6m" }) else {
        return;
    };
    let home = disk.mnt.join("home");
    assert!(
        avfs(&home, &["vault", "create", "v"], None)
            .status
            .success()
    );
    // Room to free later, taken before the vault fills the rest.
    let spare = disk.mnt.join("spare");
    fs::write(&spare, vec![1u8; if sled { 10 << 20 } else { 2 << 20 }]).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut acked = Vec::new();
    let mut full = None;
    for i in 0..64 {
        let data = scratch.path().join(format!("d{i}"));
        fs::write(&data, common::random_bytes(i, 512 * 1024)).unwrap();
        let name = format!("/f{i}");
        let out = avfs(&home, &["--json", "write", &name], Some(&data));
        let doc = json(&out);
        if doc["ok"] == true {
            acked.push((name, data));
            continue;
        }
        assert_eq!(doc["error"]["kind"], "disk_full", "{doc}");
        assert_eq!(out.status.code(), Some(9), "{doc}");
        full = Some((name, data));
        break;
    }
    let (failed_name, failed_data) = full.expect("the disk filled up");
    // Nothing of the failed write is there, and every command that needs space says why.
    let ls = json(&avfs(&home, &["--json", "ls", "/"], None));
    let names: Vec<&str> = ls["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), acked.len(), "{names:?}");
    let src = env!("CARGO_MANIFEST_DIR").to_string() + "/src";
    for args in [
        vec!["--json", "checkpoint", "save", "cp"],
        vec!["--json", "import", src.as_str(), "/imported"],
        vec!["--json", "cp", "/f0", "/copy"],
    ] {
        let out = avfs(&home, &args, None);
        let doc = json(&out);
        if doc["ok"] == false {
            assert_eq!(doc["error"]["kind"], "disk_full", "{args:?}: {doc}");
        }
    }
    let check = json(&avfs(&home, &["--json", "vault", "check"], None));
    assert_eq!(check["data"]["ok"], true, "{check}");
    // Not one byte left (SQLite cannot even map its shared memory): still disk_full, not
    // a damaged vault.
    let last = disk.mnt.join("last-byte");
    {
        use std::io::Write;
        let mut f = fs::File::create(&last).unwrap();
        while f.write_all(&[0u8; 4096]).is_ok() {}
        while f.write_all(&[0u8; 1]).is_ok() {}
    }
    for args in [vec!["--json", "ls", "/"], vec!["--json", "vault", "check"]] {
        let out = avfs(&home, &args, None);
        let doc = json(&out);
        if doc["ok"] == false {
            assert_eq!(doc["error"]["kind"], "disk_full", "{args:?}: {doc}");
        }
    }
    fs::remove_file(&last).unwrap();
    for (name, data) in &acked {
        let out = avfs(&home, &["cat", name], None);
        assert!(out.stdout == fs::read(data).unwrap(), "{name} damaged");
    }
    // Space freed: the same write goes through, and the vault is whole.
    fs::remove_file(&spare).unwrap();
    let out = avfs(
        &home,
        &["--json", "write", &failed_name],
        Some(&failed_data),
    );
    assert_eq!(json(&out)["ok"], true, "{:?}", json(&out));
    let out = avfs(&home, &["cat", &failed_name], None);
    assert!(out.stdout == fs::read(&failed_data).unwrap());
    let check = json(&avfs(&home, &["--json", "vault", "check"], None));
    assert_eq!(check["data"]["ok"], true, "{check}");
    let undo = avfs(&home, &["--json", "undo"], None);
    assert!(undo.status.success(), "{}", json(&undo));
}
