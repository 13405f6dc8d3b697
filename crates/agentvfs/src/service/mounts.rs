//! The mount table: which directories avfs serves, from which vault, by which daemon.
//! Records live in `$AVFS_HOME/mounts/` so `avfs mounts` and `avfs unmount` work from any
//! process, and a mount left by a killed daemon is detected (and cleaned up) by its dir.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::registry::Registry;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MountRecord {
    pub dir: PathBuf,
    /// The vault as named on the command line (with `@checkpoint` if any).
    pub vault: String,
    pub path: PathBuf,
    pub workspace: String,
    pub checkpoint: Option<String>,
    pub readonly: bool,
    pub pid: u32,
    /// Nanoseconds since the Unix epoch.
    pub since: i64,
    /// How the kernel hands requests to the daemon: `io_uring` (per-CPU queues, Linux
    /// 6.14+ with the fuse module's `enable_uring` on) or `dev-fuse`.
    #[serde(default)]
    pub transport: String,
    /// Filled in by `list`: the daemon runs and the kernel still has the mount.
    #[serde(default)]
    pub alive: bool,
}

fn key(dir: &Path) -> String {
    blake3::hash(dir.as_os_str().as_encoded_bytes()).to_hex()[..16].to_string()
}

/// The directory of mount records and daemon logs, under `$AVFS_HOME`.
const DIR: &str = "mounts";

fn dir_of(reg: &Registry) -> PathBuf {
    reg.home().join(DIR)
}

pub fn record_path(reg: &Registry, dir: &Path) -> PathBuf {
    dir_of(reg).join(format!("{}.json", key(dir)))
}

/// Where the daemon serving `dir` writes its log; its directory is created if missing.
pub fn log_path(reg: &Registry, dir: &Path) -> Result<PathBuf> {
    Ok(reg.private_dir(DIR)?.join(format!("{}.log", key(dir))))
}

pub fn save(reg: &Registry, rec: &MountRecord) -> Result<()> {
    reg.private_dir(DIR)?;
    let p = record_path(reg, &rec.dir);
    let json = serde_json::to_vec_pretty(rec).map_err(|e| Error::Storage(e.to_string()))?;
    std::fs::write(&p, json).map_err(|e| Error::io("writing", &p, e))
}

pub fn remove(reg: &Registry, dir: &Path) {
    let _ = std::fs::remove_file(record_path(reg, dir));
}

pub fn load(reg: &Registry, dir: &Path) -> Option<MountRecord> {
    let bytes = std::fs::read(record_path(reg, dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// True if the kernel lists `dir` as an avfs FUSE mount.
pub fn kernel_has(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let mount_point = fields.get(4).copied().unwrap_or("");
        let fstype = l
            .split(" - ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or("");
        unescape(mount_point) == want && fstype.starts_with("fuse")
    })
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Every recorded mount, with `alive` filled in.
pub fn list(reg: &Registry) -> Result<Vec<MountRecord>> {
    let d = dir_of(reg);
    let Ok(entries) = std::fs::read_dir(&d) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        if e.path().extension().is_some_and(|x| x == "json")
            && let Ok(bytes) = std::fs::read(e.path())
            && let Ok(mut rec) = serde_json::from_slice::<MountRecord>(&bytes)
        {
            rec.alive = pid_alive(rec.pid) && kernel_has(&rec.dir);
            out.push(rec);
        }
    }
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(out)
}

/// Detach whatever the kernel has mounted at `dir` (lazily if it is busy or dead).
pub fn detach(dir: &Path) -> Result<()> {
    use rustix::mount::{UnmountFlags, unmount};
    match unmount(dir, UnmountFlags::empty()) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => Err(Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: "the mount is busy (a process has files open or its cwd inside)".into(),
        }),
        Err(_) => unmount(dir, UnmountFlags::DETACH).map_err(|e| Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: format!("unmount failed: {e}"),
        }),
    }
}
