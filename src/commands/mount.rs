//! `avfs mount`, `avfs unmount`, `avfs mounts`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use agentvfs::service::mounts::{self, MountRecord};
use agentvfs::{Error, Result};

use super::{Ctx, Daemon, start_daemon};
use crate::output::{Reply, table, time};

#[derive(Args)]
pub struct MountArgs {
    /// The vault or fork to mount; `NAME@CHECKPOINT` mounts a checkpoint read-only.
    pub vault: String,
    /// An existing empty directory to mount on.
    pub dir: PathBuf,
    /// Refuse every change.
    #[arg(long)]
    pub readonly: bool,
    /// Serve in this process until unmounted (default: a background daemon).
    #[arg(long)]
    pub foreground: bool,
}

#[derive(Args)]
pub struct UnmountArgs {
    pub dir: PathBuf,
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct UnmountOutput {
    pub dir: PathBuf,
    /// False if nothing was mounted there (unmounting twice is not an error).
    pub was_mounted: bool,
    /// True if a mount left by a dead daemon was cleaned up.
    pub stale: bool,
}

fn canonical_dir(dir: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(dir);
    match meta {
        Ok(m) if m.is_dir() => dir
            .canonicalize()
            .map_err(|e| Error::io("resolving", dir, e)),
        Ok(_) => Err(Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: "not a directory".into(),
        }),
        // ENOTCONN: a mount whose daemon died; its path is still usable for cleanup.
        Err(e) if e.raw_os_error() == Some(107) => {
            Ok(std::path::absolute(dir).unwrap_or(dir.to_path_buf()))
        }
        Err(e) => Err(Error::io("opening", dir, e)),
    }
}

/// Clean up a mount whose daemon is gone; refuse one that is alive.
fn clear_stale(ctx: &Ctx, dir: &Path) -> Result<bool> {
    let reg = ctx.service.registry();
    let rec = mounts::load(reg, dir);
    if mounts::kernel_has(dir) {
        if let Some(r) = &rec
            && mounts::pid_alive(r.pid)
        {
            return Err(Error::MountFailed {
                dir: dir.to_path_buf(),
                reason: format!(
                    "already mounted by avfs (pid {}); run `avfs unmount` first",
                    r.pid
                ),
            });
        }
        mounts::detach(dir)?;
        mounts::remove(reg, dir);
        return Ok(true);
    }
    if rec.is_some() {
        mounts::remove(reg, dir);
    }
    Ok(false)
}

pub fn cmd_mount(ctx: &Ctx, a: MountArgs) -> Result<Reply> {
    if !cfg!(feature = "fuse") {
        return Err(Error::FuseUnavailable);
    }
    let dir = canonical_dir(&a.dir)?;
    let (spec, at) = match a.vault.split_once('@') {
        Some((v, cp)) => (v.to_string(), Some(cp.to_string())),
        None => (a.vault.clone(), None),
    };
    // Resolve now so a bad name fails here, not in the daemon.
    let (target, ws) = ctx.service.open(Some(&spec))?;
    if let Some(cp) = &at {
        ws.checkpoint(cp)?;
    }
    clear_stale(ctx, &dir)?;
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
        vault: a.vault.clone(),
        path: target.path.clone(),
        workspace: target.workspace.clone(),
        checkpoint: at.clone(),
        readonly: a.readonly || at.is_some(),
        pid: std::process::id(),
        since: agentvfs::model::now_ns(),
        transport: String::new(),
        alive: true,
    };
    if a.foreground {
        drop(ws);
        serve(ctx, &spec, at, rec)?;
        return Ok(Reply::new(&(), ""));
    }
    let rec = spawn_daemon(ctx, &a, &dir)?;
    let human = format!(
        "mounted {} at {} (pid {})",
        rec.vault,
        rec.dir.display(),
        rec.pid
    );
    Ok(Reply::new(&rec, human))
}

#[cfg(feature = "fuse")]
fn serve(ctx: &Ctx, spec: &str, at: Option<String>, mut rec: MountRecord) -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use agentvfs::service::mount::MountSession;

    let (_, ws) = ctx.service.open(Some(spec))?;
    let session = MountSession::new(ws, at, rec.readonly)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| Error::io("installing signal handler", "", e))?;
    }
    let mounted = agentvfs::fuse::spawn(session, &rec.dir).map_err(|e| Error::MountFailed {
        dir: rec.dir.clone(),
        reason: e.to_string(),
    })?;
    rec.transport = mounted.transport.as_str().into();
    let bg = mounted.background;
    let reg = ctx.service.registry();
    mounts::save(reg, &rec)?;
    while !bg.guard.is_finished() && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = if bg.guard.is_finished() {
        bg.join()
    } else {
        bg.umount_and_join()
    };
    mounts::remove(reg, &rec.dir);
    result.map_err(|e| Error::MountFailed {
        dir: rec.dir.clone(),
        reason: e.to_string(),
    })
}

#[cfg(not(feature = "fuse"))]
fn serve(_ctx: &Ctx, _spec: &str, _at: Option<String>, _rec: MountRecord) -> Result<()> {
    Err(Error::FuseUnavailable)
}

fn spawn_daemon(ctx: &Ctx, a: &MountArgs, dir: &Path) -> Result<MountRecord> {
    let reg = ctx.service.registry();
    let mut args: Vec<OsString> = vec![
        "mount".into(),
        a.vault.clone().into(),
        dir.into(),
        "--foreground".into(),
    ];
    if a.readonly {
        args.push("--readonly".into());
    }
    let failed = |reason: String| Error::MountFailed {
        dir: dir.to_path_buf(),
        reason,
    };
    // Ready only once the kernel has the mount and the daemon recorded it.
    let started = start_daemon(&args, &mounts::log_path(reg, dir)?, |pid| {
        mounts::load(reg, dir).filter(|rec| rec.pid == pid && mounts::kernel_has(dir))
    })?;
    match started {
        Daemon::Ready(rec) => Ok(rec),
        Daemon::Exited(why) => Err(failed(format!("the mount daemon exited: {why}"))),
        Daemon::TimedOut => Err(failed("the mount did not become ready within 20 s".into())),
    }
}

pub fn cmd_unmount(ctx: &Ctx, a: UnmountArgs) -> Result<Reply> {
    let dir = canonical_dir(&a.dir)?;
    let reg = ctx.service.registry();
    let rec = mounts::load(reg, &dir);
    if !mounts::kernel_has(&dir) {
        mounts::remove(reg, &dir);
        let out = UnmountOutput {
            dir: dir.clone(),
            was_mounted: false,
            stale: false,
        };
        return Ok(Reply::new(
            &out,
            format!("{} is not mounted", dir.display()),
        ));
    }
    let stale = rec.as_ref().is_none_or(|r| !mounts::pid_alive(r.pid));
    mounts::detach(&dir)?;
    // The daemon saves the session (op log entry, durable commit) as it exits: wait for it.
    if let Some(r) = &rec {
        let deadline = Instant::now() + Duration::from_secs(30);
        while mounts::pid_alive(r.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    mounts::remove(reg, &dir);
    let out = UnmountOutput {
        dir: dir.clone(),
        was_mounted: true,
        stale,
    };
    let human = if stale {
        format!("cleaned up a stale mount at {}", dir.display())
    } else {
        format!("unmounted {}", dir.display())
    };
    Ok(Reply::new(&out, human))
}

pub fn cmd_mounts(ctx: &Ctx) -> Result<Reply> {
    let list = mounts::list(ctx.service.registry())?;
    let mut rows = vec![vec![
        "DIR".into(),
        "VAULT".into(),
        "PID".into(),
        "SINCE".into(),
        "TRANSPORT".into(),
        "STATE".into(),
    ]];
    for m in &list {
        rows.push(vec![
            m.dir.display().to_string(),
            m.vault.clone(),
            m.pid.to_string(),
            time(m.since),
            m.transport.clone(),
            if m.alive {
                "mounted".into()
            } else {
                "stale".into()
            },
        ]);
    }
    let human = if list.is_empty() {
        "no mounts".to_string()
    } else {
        table(&rows)
    };
    Ok(Reply::new(&list, human))
}
