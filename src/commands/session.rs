//! `avfs session start|stop|list`: a daemon keeping one sandbox (or mount) of a fork for
//! proxied commands.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::service::sandbox::Mode;
use agentvfs::service::session::{self, SessionRecord};

use super::{Ctx, SelfLauncher};
use crate::output::{Reply, table, time};

#[derive(Subcommand)]
pub enum SessionCmd {
    /// Start a background daemon for a fork that keeps one sandbox namespace (or, with
    /// `--mode fuse`, a mount) for its commands; run them with
    /// `avfs proxy exec --session NAME -- CMD`. The session holds the fork's write lease
    /// while it runs: other hosts sharing the vault get `workspace_busy` when they change
    /// the fork's files (AVFS_LEASE_SECS, default 30; the host is AVFS_HOST_ID or the host
    /// name).
    #[command(after_help = "Example:\n  avfs session start task-1\n  \
        avfs proxy exec --session task-1 -- cargo test\n  avfs session stop task-1")]
    Start(StartArgs),
    /// Stop a session: its daemon ends its namespace or mount and exits (also cleans up after
    /// a killed one).
    Stop(StopArgs),
    /// List sessions with their fork, daemon pid and state.
    List,
}

#[derive(Args)]
pub struct StartArgs {
    /// The vault or fork whose commands the session runs.
    pub fork: String,
    /// The session's name (default: FORK).
    #[arg(long)]
    pub name: Option<String>,
    /// A TOML policy file for every command in the session (default: the built-in policy).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Serve in this process until stopped (default: a background daemon).
    #[arg(long)]
    pub foreground: bool,
    /// How the session's commands run: `overlay` keeps one sandbox namespace for the whole
    /// session and gives each command an overlay of the fork in it; `copy` runs each command
    /// in a namespace of its own on a copy of the fork; `fuse` runs them in the fork's mount
    /// on the host, without a namespace. `auto`: `overlay` where it can be made, else `copy`,
    /// else `fuse`, as for `avfs proxy exec`.
    #[arg(long, default_value = "auto", value_parser = super::proxy::mode())]
    pub mode: Mode,
}

#[derive(Args)]
pub struct StopArgs {
    pub name: String,
}

pub fn run(ctx: &Ctx, c: SessionCmd) -> (&'static str, Result<Reply>) {
    match c {
        SessionCmd::Start(a) => ("session start", cmd_start(ctx, a)),
        SessionCmd::Stop(a) => ("session stop", cmd_stop(ctx, a)),
        SessionCmd::List => ("session list", cmd_list(ctx)),
    }
}

fn cmd_start(ctx: &Ctx, a: StartArgs) -> Result<Reply> {
    let req = session::StartRequest {
        fork: a.fork,
        name: a.name,
        policy: a.policy,
        foreground: a.foreground,
        mode: a.mode,
    };
    let Some(rec) = session::start(&ctx.service, &SelfLauncher, super::mounter(), &req)? else {
        return Ok(Reply::new(&(), ""));
    };
    let place = match &rec.dir {
        Some(dir) => format!("at {}", dir.display()),
        None => format!("in {} mode", rec.mode.name()),
    };
    let human = format!(
        "session {} serves {} {place} (pid {}); run commands with `avfs proxy exec --session {} -- CMD`",
        rec.name, rec.vault, rec.pid, rec.name
    );
    Ok(Reply::new(&rec, human))
}

fn cmd_stop(ctx: &Ctx, a: StopArgs) -> Result<Reply> {
    let report = session::stop(ctx.service.registry(), &a.name)?;
    let human = if report.stale {
        format!(
            "session {} had no running daemon; cleaned up what it left",
            report.name
        )
    } else {
        format!("session {} stopped", report.name)
    };
    Ok(Reply::new(&report, human))
}

fn cmd_list(ctx: &Ctx) -> Result<Reply> {
    let list: Vec<SessionRecord> = session::list(ctx.service.registry())?;
    let mut rows = vec![vec![
        "NAME".into(),
        "VAULT".into(),
        "MODE".into(),
        "PID".into(),
        "SINCE".into(),
        "STATE".into(),
    ]];
    for s in &list {
        rows.push(vec![
            s.name.clone(),
            s.vault.clone(),
            s.mode.name().into(),
            s.pid.to_string(),
            time(s.since),
            if s.alive { "running" } else { "stale" }.into(),
        ]);
    }
    let human = if list.is_empty() {
        "no sessions".to_string()
    } else {
        table(&rows)
    };
    Ok(Reply::new(&list, human))
}
