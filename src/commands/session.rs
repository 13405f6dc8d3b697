//! `avfs session start|stop|list`: a daemon keeping one fork mounted for proxied commands.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::service::session::{self, SessionRecord};

use super::{Ctx, SelfLauncher};
use crate::output::{Reply, table, time};

#[derive(Subcommand)]
pub enum SessionCmd {
    /// Mount a fork in a background daemon; run commands in it with
    /// `avfs proxy exec --session NAME -- CMD`.
    #[command(after_help = "Example:\n  avfs session start task-1\n  \
        avfs proxy exec --session task-1 -- cargo test\n  avfs session stop task-1")]
    Start(StartArgs),
    /// Stop a session: its daemon unmounts and exits (also cleans up after a killed one).
    Stop(StopArgs),
    /// List sessions with their fork, daemon pid and state.
    List,
}

#[derive(Args)]
pub struct StartArgs {
    /// The vault or fork to keep mounted.
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
    };
    let Some(rec) = session::start(&ctx.service, &SelfLauncher, super::mounter(), &req)? else {
        return Ok(Reply::new(&(), ""));
    };
    let human = format!(
        "session {} serves {} at {} (pid {}); run commands with `avfs proxy exec --session {} -- CMD`",
        rec.name,
        rec.vault,
        rec.dir.display(),
        rec.pid,
        rec.name
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
        "PID".into(),
        "SINCE".into(),
        "STATE".into(),
    ]];
    for s in &list {
        rows.push(vec![
            s.name.clone(),
            s.vault.clone(),
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
