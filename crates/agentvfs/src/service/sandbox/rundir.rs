//! A run's own places on the host: its private directory under the runtime directory,
//! and the quota-sized file system its writes may land on.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A run's private directory: made fresh (never an existing path) under the 0700 runtime
/// directory, removed when dropped. Directories left by a supervisor that died are
/// removed by the next run.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn create(runtime: &Path) -> Result<RunDir> {
        // The runtime directory itself must be ours alone and a real directory: a symlink
        // planted in its place would move every run (and its mounts) elsewhere.
        use std::os::unix::fs::MetadataExt;
        let meta =
            std::fs::symlink_metadata(runtime).map_err(|e| Error::io("reading", runtime, e))?;
        let euid = rustix::process::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return Err(Error::SandboxFailed {
                reason: format!(
                    "{} must be a directory owned by uid {euid} with mode 0700 (it is {}, owned by uid {}, mode {:o})",
                    runtime.display(),
                    if meta.file_type().is_symlink() {
                        "a symlink"
                    } else if meta.is_dir() {
                        "a directory"
                    } else {
                        "a file"
                    },
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            });
        }
        remove_stale(runtime);
        let mut seed = [0u8; 8];
        let _ = rustix::rand::getrandom(&mut seed, rustix::rand::GetRandomFlags::empty());
        let name = format!(
            "{}-{:016x}",
            std::process::id(),
            u64::from_le_bytes(seed) ^ crate::model::now_ns() as u64
        );
        let path = runtime.join(name);
        // create_dir fails on anything already there, a planted symlink included.
        std::fs::create_dir(&path).map_err(|e| Error::io("creating", &path, e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("restricting", &path, e))?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Remove run directories whose supervisor is gone.
pub(crate) fn remove_stale(runtime: &Path) {
    let Ok(entries) = std::fs::read_dir(runtime) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // A zombie is gone too (a killed daemon nobody reaped yet).
        if !super::super::mounts::pid_alive(pid as u32) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A file system of the run's own, limited to what the workspace's quota has left: the
/// overlay's upper layer or the copy live on it, so the write that crosses the quota
/// fails there and then (ENOSPC), not afterwards. A detached mount (new mount API): it
/// exists only through this descriptor, and in the sandbox it is attached to.
pub struct Layer {
    pub(super) fd: OwnedFd,
    /// The inodes a command may make on it, once the overlay made its own.
    pub(super) inodes: Option<u64>,
}

impl Layer {
    /// A tmpfs of at most `bytes` bytes (at least a page) on which a command may make
    /// `inodes` inodes; `None`: no limit. It starts with room to spare for the overlay's
    /// own (its work directories, and the files it makes to probe what the file system
    /// can do), and the sandbox narrows it to `inodes` more than those once the overlay is
    /// mounted.
    pub fn sized(bytes: Option<u64>, inodes: Option<u64>) -> Result<Layer> {
        const SPARE: u64 = 64;
        use rustix::mount::{
            FsMountFlags, FsOpenFlags, MountAttrFlags, fsconfig_create, fsconfig_set_string,
            fsmount, fsopen,
        };
        let failed = |what: &str, e: rustix::io::Errno| Error::SandboxFailed {
            reason: format!("making the run's quota-sized file system ({what}): {e}"),
        };
        let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| failed("fsopen", e))?;
        // Zero is how tmpfs spells "no limit"; a number past what it holds is refused.
        for (key, value) in [
            ("size", bytes.map_or(0, |b| b.max(4096)).to_string()),
            (
                "nr_inodes",
                inodes.map_or(0, |i| i.saturating_add(SPARE)).to_string(),
            ),
            ("mode", "0700".to_string()),
        ] {
            fsconfig_set_string(&fs, key, value.as_str()).map_err(|e| failed(key, e))?;
        }
        fsconfig_create(&fs).map_err(|e| failed("create", e))?;
        let fd = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())
            .map_err(|e| failed("fsmount", e))?;
        Ok(Layer { fd, inodes })
    }

    /// `rel` inside the layer, as this process reaches it.
    pub fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{rel}", self.fd.as_raw_fd()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_directory_is_fresh_private_and_removed_and_stale_ones_go() {
        let runtime = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        // A runtime directory others may enter, or a symlink in its place, is refused.
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = RunDir::create(runtime.path()).err().expect("0755 refused");
        assert_eq!(err.kind(), "sandbox_failed");
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let link = elsewhere.path().join("run");
        std::os::unix::fs::symlink(runtime.path(), &link).unwrap();
        let err = RunDir::create(&link).err().expect("a symlink refused");
        assert!(err.to_string().contains("a symlink"), "{err}");
        // A directory of a supervisor that is gone (pid far above pid_max).
        let stale = runtime.path().join("999999999-0000");
        std::fs::create_dir(&stale).unwrap();
        let dir = RunDir::create(runtime.path()).unwrap();
        assert!(!stale.exists(), "a dead supervisor's directory is removed");
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
