//! `avfs session start|stop|list`: a daemon keeping one fork mounted for proxied commands.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use agentvfs::service::session::{self, SessionRecord};
use agentvfs::{Error, Result};

use super::{Ctx, Daemon, start_daemon};
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
    if !cfg!(feature = "fuse") {
        return Err(Error::FuseUnavailable);
    }
    let reg = ctx.service.registry();
    let name = a.name.clone().unwrap_or_else(|| a.fork.clone());
    session::check_name(&name)?;
    // Resolve now so a bad fork or policy fails here, not in the daemon.
    let policy = super::policy::load(a.policy.as_ref())?;
    let policy_path = match &a.policy {
        Some(p) => Some(p.canonicalize().map_err(|e| Error::io("resolving", p, e))?),
        None => None,
    };
    let (target, ws) = ctx.service.open(Some(&a.fork))?;
    if let Some(rec) = session::load(reg, &name)
        && agentvfs::service::mounts::pid_alive(rec.pid)
    {
        return Err(Error::AlreadyExists {
            name: format!("session {name} (pid {})", rec.pid),
        });
    }
    let rec = session::new_record(
        reg,
        &name,
        &a.fork,
        &target.path,
        &target.workspace,
        policy_path.clone(),
    )?;
    if a.foreground {
        session::serve(reg, ws, policy, rec)?;
        return Ok(Reply::new(&(), ""));
    }
    drop(ws);
    let mut args: Vec<OsString> = vec![
        "session".into(),
        "start".into(),
        a.fork.clone().into(),
        "--name".into(),
        name.clone().into(),
        "--foreground".into(),
    ];
    if let Some(p) = &policy_path {
        args.push("--policy".into());
        args.push(p.into());
    }
    let failed = |reason: String| Error::SessionFailed {
        name: name.clone(),
        reason,
    };
    // Ready once the daemon recorded itself and answers on its socket.
    let started = start_daemon(&args, &session::log_path(reg, &name)?, |pid| {
        session::load(reg, &name)
            .filter(|r| r.pid == pid && session::call(r, &session::Request::Ping).is_ok())
    })?;
    let mut rec = match started {
        Daemon::Ready(rec) => rec,
        Daemon::Exited(why) => return Err(failed(format!("the daemon exited: {why}"))),
        Daemon::TimedOut => return Err(failed("the daemon did not start within 20 s".into())),
    };
    rec.alive = true;
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
