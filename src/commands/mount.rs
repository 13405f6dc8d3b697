//! `avfs mount`, `avfs unmount`, `avfs mounts`.

use std::path::PathBuf;

use clap::Args;

use agentvfs::Result;
use agentvfs::service::mounts::{self, MountRequest};
use agentvfs::service::session;

use super::{Ctx, SelfLauncher};
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

pub fn cmd_mount(ctx: &Ctx, a: MountArgs) -> Result<Reply> {
    let req = MountRequest {
        vault: a.vault,
        dir: a.dir,
        readonly: a.readonly,
        foreground: a.foreground,
    };
    let Some(rec) = mounts::mount(&ctx.service, &SelfLauncher, super::mounter(), &req)? else {
        return Ok(Reply::new(&(), ""));
    };
    let human = format!(
        "mounted {} at {} (pid {})",
        rec.vault,
        rec.dir.display(),
        rec.pid
    );
    Ok(Reply::new(&rec, human))
}

pub fn cmd_unmount(ctx: &Ctx, a: UnmountArgs) -> Result<Reply> {
    let out = mounts::unmount(ctx.service.registry(), &a.dir)?;
    let human = if !out.was_mounted {
        format!("{} is not mounted", out.dir.display())
    } else if out.stale {
        format!("cleaned up a stale mount at {}", out.dir.display())
    } else {
        format!("unmounted {}", out.dir.display())
    };
    Ok(Reply::new(&out, human))
}

pub fn cmd_mounts(ctx: &Ctx) -> Result<Reply> {
    let list = session::all_mounts(ctx.service.registry())?;
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
            match &m.session {
                Some(name) => format!("session {name}: {}", m.dir.display()),
                None => m.dir.display().to_string(),
            },
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
