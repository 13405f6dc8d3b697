//! The mount table and the mount lifecycle: which directories avfs serves, from which
//! vault, by which daemon; mounting (stale cleanup, the empty-directory rule, the daemon or
//! the foreground serve loop) and unmounting (detach, wait for the daemon to save).
//! Records live in `$AVFS_HOME/mounts/` so `avfs mounts` and `avfs unmount` work from any
//! process, and a mount left by a killed daemon is detected (and cleaned up) by its dir.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::WorkspaceService;
use super::daemon::{self, Daemon, DaemonJob, Launcher};
use super::mounter::Mounter;
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
    /// 6.14+ with the fuse module's `enable_uring` on) or `dev-fuse`; for a session, its
    /// mode: `session-overlay`, `session-copy` or `session-fuse`.
    #[serde(default)]
    pub transport: String,
    /// Filled in by `list`: the daemon runs and the kernel still has the mount.
    #[serde(default)]
    pub alive: bool,
    /// The session this mount serves (`avfs session start`), listed by `avfs mounts` too.
    /// A `fuse` session's `dir` is its mount on the host; the others mount the fork inside
    /// their own namespace, so `dir` is their socket.
    #[serde(default)]
    pub session: Option<String>,
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

// `unmount` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct UnmountOutput {
    pub dir: PathBuf,
    /// False if nothing was mounted there (unmounting twice is not an error).
    pub was_mounted: bool,
    /// True if a mount left by a dead daemon was cleaned up.
    pub stale: bool,
}

/// What to mount where.
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// The vault or fork; `NAME@CHECKPOINT` mounts a checkpoint read-only.
    pub vault: String,
    /// An existing empty directory.
    pub dir: PathBuf,
    pub readonly: bool,
    /// Serve in this process until unmounted or signalled, instead of in a daemon.
    pub foreground: bool,
}

/// How long `unmount` waits for the daemon to save its session and exit.
const UNMOUNT_WAIT: Duration = Duration::from_secs(30);

/// The absolute path of a mount point: an existing directory, or a mount whose daemon
/// died (the kernel answers ENOTCONN, but the path is still usable for cleanup).
pub fn canonical_dir(dir: &Path) -> Result<PathBuf> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => dir
            .canonicalize()
            .map_err(|e| Error::io("resolving", dir, e)),
        Ok(_) => Err(Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: "not a directory".into(),
        }),
        // A FUSE connection whose daemon died answers ENOTCONN, or ECONNABORTED or
        // ECANCELED while the kernel is still tearing down its io_uring queues (the
        // errors the ring's own workers take for a gone mount; ECANCELED seen twice in
        // `killed_daemon_is_cleaned_up_and_double_unmount_is_a_noop`).
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
            ) =>
        {
            Ok(std::path::absolute(dir).unwrap_or(dir.to_path_buf()))
        }
        Err(e) => Err(Error::io("opening", dir, e)),
    }
}

/// Clean up a mount at `dir` whose daemon is gone (true if there was one); refuse one
/// that is alive. A record without a kernel mount is dropped.
pub fn clear_stale(reg: &Registry, dir: &Path) -> Result<bool> {
    let rec = load(reg, dir);
    if kernel_has(dir) {
        if let Some(r) = &rec
            && pid_alive(r.pid)
        {
            return Err(Error::MountFailed {
                dir: dir.to_path_buf(),
                reason: format!(
                    "already mounted by avfs (pid {}); run `avfs unmount` first",
                    r.pid
                ),
            });
        }
        detach(dir)?;
        remove(reg, dir);
        return Ok(true);
    }
    if rec.is_some() {
        remove(reg, dir);
    }
    Ok(false)
}

/// Mount `req.vault` at `req.dir`. The name and checkpoint are resolved here so a bad one
/// fails at once, not in the daemon; the directory must be empty. In the foreground this
/// serves until unmounted and returns `None`; otherwise it starts a daemon through
/// `launcher` and returns its record once the kernel has the mount.
pub fn mount(
    service: &WorkspaceService,
    launcher: &dyn Launcher,
    mounter: &dyn Mounter,
    req: &MountRequest,
) -> Result<Option<MountRecord>> {
    mounter.available()?;
    let dir = canonical_dir(&req.dir)?;
    let (spec, at) = match req.vault.split_once('@') {
        Some((v, cp)) => (v.to_string(), Some(cp.to_string())),
        None => (req.vault.clone(), None),
    };
    let (target, ws) = service.open(Some(&spec))?;
    if let Some(cp) = &at {
        ws.checkpoint(cp)?;
    }
    // A read-write mount holds the fork's write lease: refused now, not in the daemon,
    // while another host holds it.
    if !(req.readonly || at.is_some()) {
        super::lease::lease_length()?;
        ws.check_lease_free("a read-write mount")?;
    }
    drop(ws);
    let reg = service.registry();
    clear_stale(reg, &dir)?;
    if std::fs::read_dir(&dir)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
    {
        return Err(Error::MountFailed {
            dir,
            reason: "directory is not empty".into(),
        });
    }
    let rec = MountRecord {
        dir: dir.clone(),
        vault: req.vault.clone(),
        path: target.path.clone(),
        workspace: target.workspace.clone(),
        checkpoint: at.clone(),
        readonly: req.readonly || at.is_some(),
        pid: std::process::id(),
        since: crate::model::now_ns(),
        transport: String::new(),
        alive: true,
        session: None,
    };
    if req.foreground {
        serve(service, mounter, &spec, at, rec)?;
        return Ok(None);
    }
    let failed = |reason: String| Error::MountFailed {
        dir: dir.clone(),
        reason,
    };
    let job = DaemonJob::Mount {
        vault: &req.vault,
        dir: &dir,
        readonly: req.readonly,
    };
    // Ready only once the kernel has the mount and the daemon recorded it.
    let started = daemon::start(launcher, &job, &log_path(reg, &dir)?, |pid| {
        load(reg, &dir).filter(|rec| rec.pid == pid && kernel_has(&dir))
    })?;
    match started {
        Daemon::Ready(rec) => Ok(Some(rec)),
        Daemon::Exited(why) => {
            // Another host took the fork between the check above and the daemon's take.
            if !req.readonly
                && let Err(busy @ Error::WorkspaceBusy { .. }) = service
                    .open(Some(&spec))
                    .and_then(|(_, ws)| ws.check_lease_free("a read-write mount"))
            {
                return Err(busy);
            }
            Err(failed(format!("the mount daemon exited: {why}")))
        }
        Daemon::TimedOut => Err(failed("the mount did not become ready within 20 s".into())),
    }
}

/// Serve a mount in this process until it is unmounted or SIGTERM/SIGINT/SIGHUP arrives;
/// the record is saved while it serves and removed after.
fn serve(
    service: &WorkspaceService,
    mounter: &dyn Mounter,
    spec: &str,
    at: Option<String>,
    mut rec: MountRecord,
) -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::mount::MountFs;

    let (_, ws) = service.open(Some(spec))?;
    // Held until the mount ends (given up after the unmount, below).
    let _lease = match rec.readonly {
        true => None,
        false => Some(super::lease::LeaseKeeper::take(
            &ws,
            format!("mount {}", rec.dir.display()),
        )?),
    };
    let session = MountFs::new(ws, at, rec.readonly)?;
    let stop = daemon::stop_on_signals()?;
    let bg = mounter.mount(Arc::new(session), &rec.dir)?;
    rec.transport = bg.transport().into();
    let reg = service.registry();
    save(reg, &rec)?;
    while !bg.is_finished() && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = if bg.is_finished() {
        bg.join()
    } else {
        bg.unmount()
    };
    remove(reg, &rec.dir);
    result.map_err(|e| Error::MountFailed {
        dir: rec.dir.clone(),
        reason: e.to_string(),
    })
}

/// Unmount `dir` (also a mount left by a dead daemon) and wait for its daemon to save the
/// session (op log entry, durable commit) and exit. Nothing mounted is not an error.
pub fn unmount(reg: &Registry, dir: &Path) -> Result<UnmountOutput> {
    let dir = canonical_dir(dir)?;
    let rec = load(reg, &dir);
    if !kernel_has(&dir) {
        remove(reg, &dir);
        return Ok(UnmountOutput {
            dir,
            was_mounted: false,
            stale: false,
        });
    }
    let stale = rec.as_ref().is_none_or(|r| !pid_alive(r.pid));
    detach(&dir)?;
    // A killed read-write mount's share of its fork's lease goes too, so other hosts are
    // not held off until it lapses. Best effort: the lease lapses by itself anyway.
    if stale && let Some(r) = rec.as_ref().filter(|r| !r.readonly) {
        let _ = crate::model::Vault::open(&r.path)
            .and_then(|v| v.workspace(&r.workspace, crate::model::Actor::from_env("cli")))
            .and_then(|ws| ws.release_lease_of(r.pid));
    }
    if let Some(r) = &rec {
        let deadline = Instant::now() + UNMOUNT_WAIT;
        while pid_alive(r.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    remove(reg, &dir);
    Ok(UnmountOutput {
        dir,
        was_mounted: true,
        stale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::daemon::tests::Script;
    use crate::service::testing;

    fn request(dir: &Path) -> MountRequest {
        MountRequest {
            vault: "demo".into(),
            dir: dir.to_path_buf(),
            readonly: false,
            foreground: false,
        }
    }

    #[test]
    fn a_non_empty_directory_is_refused_before_any_daemon_starts() {
        let h = testing::home();
        let dir = h.dir.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("keep"), "x").unwrap();
        let err = mount(
            &h.service,
            &Script("exit 9"),
            &testing::NeverMounts,
            &request(&dir),
        )
        .unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        let bad = MountRequest {
            vault: "demo@nope".into(),
            ..request(&dir)
        };
        let err = mount(&h.service, &Script("exit 9"), &testing::NeverMounts, &bad).unwrap_err();
        assert_eq!(
            err.kind(),
            "checkpoint_not_found",
            "a bad checkpoint fails first"
        );
    }

    #[test]
    fn a_daemon_that_dies_is_a_mount_failure_with_its_log() {
        let h = testing::home();
        let dir = h.dir.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let err = mount(
            &h.service,
            &Script("echo no-fuse-here; exit 1"),
            &testing::NeverMounts,
            &request(&dir),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no-fuse-here"), "{err}");
    }

    #[test]
    fn a_record_without_a_kernel_mount_is_stale_and_dropped() {
        let h = testing::home();
        let reg = h.service.registry();
        let dir = h.dir.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let dir = canonical_dir(&dir).unwrap();
        let rec = MountRecord {
            dir: dir.clone(),
            vault: "demo".into(),
            path: PathBuf::from("/x"),
            workspace: "main".into(),
            checkpoint: None,
            readonly: false,
            pid: u32::MAX,
            since: 0,
            transport: String::new(),
            alive: false,
            session: None,
        };
        save(reg, &rec).unwrap();
        assert!(
            !clear_stale(reg, &dir).unwrap(),
            "no kernel mount to detach"
        );
        assert!(load(reg, &dir).is_none());
        save(reg, &rec).unwrap();
        let out = unmount(reg, &dir).unwrap();
        assert!(!out.was_mounted && !out.stale);
        assert!(load(reg, &dir).is_none(), "unmount drops the record too");
        let file = dir.join("f");
        std::fs::write(&file, "").unwrap();
        assert_eq!(canonical_dir(&file).unwrap_err().kind(), "mount_failed");
    }
}
