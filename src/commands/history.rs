//! History commands: diff, merge, op log / op restore, undo, redo, prune, apply.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use agentvfs::model::diff::{Change, StateRef};
use agentvfs::model::merge::{MergeReport, MergeStrategy};
use agentvfs::model::{GcReport, OpInfo, PruneReport, limits, now_ns};
use agentvfs::service::apply::{self, ApplyReport};
use agentvfs::service::history::{self, DiffSummary};
use agentvfs::{Error, Result};

use super::{Ctx, path};
use crate::output::{Reply, size, table, time};

#[derive(Args)]
pub struct DiffArgs {
    /// From: a checkpoint, a fork, FORK:CHECKPOINT, `@base` (where this fork started) or
    /// `@` (live). Default: the last checkpoint, else `@base`.
    pub from: Option<String>,
    /// To: same forms. Default: `@` (the live state).
    pub to: Option<String>,
    /// One line per path: status letter (A, M, D, R, T) and path.
    #[arg(long, conflicts_with_all = ["stat", "patch"])]
    pub name_status: bool,
    /// Per-file line counts.
    #[arg(long, conflicts_with = "patch")]
    pub stat: bool,
    /// A unified patch (the default when stdout is a terminal).
    #[arg(long, short)]
    pub patch: bool,
    /// Show the content of secret files (`.env`, private keys; the built-in policy's
    /// `[secrets]`) in the patch. Without it their content is withheld.
    #[arg(long)]
    pub show_secrets: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Strategy {
    Ours,
    Theirs,
}

#[derive(Args)]
pub struct MergeArgs {
    /// The fork whose changes to merge.
    pub fork: String,
    /// The vault or fork to merge into (default: the fork's parent).
    #[arg(long)]
    pub into: Option<String>,
    /// Resolve every conflict with one side instead of failing.
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,
    /// Show what would happen without changing anything.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Subcommand)]
pub enum OpCmd {
    /// List operations, newest first.
    Log {
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Return the workspace to the state right after operation ID.
    Restore { id: i64 },
}

#[derive(Args)]
pub struct PruneArgs {
    /// Keep only the newest N checkpoints and N operations.
    #[arg(long)]
    pub keep_last: Option<usize>,
    /// Drop checkpoints and operations older than this (e.g. 7d, 12h).
    #[arg(long)]
    pub older_than: Option<String>,
}

#[derive(Args)]
pub struct ApplyArgs {
    /// The host directory to update (typically the one the vault was imported from).
    pub host_dir: PathBuf,
    /// The state the host is expected to match (default: `@base`, where this fork started).
    #[arg(long)]
    pub from: Option<String>,
    /// Overwrite host paths that changed since the base.
    #[arg(long)]
    pub force: bool,
    /// Show what would be written without writing.
    #[arg(long)]
    pub dry_run: bool,
    /// Make device nodes on the host (needs CAP_MKNOD). Without it they are skipped and
    /// listed: a device an agent made in its fork never becomes a live host device unasked.
    #[arg(long)]
    pub devices: bool,
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct DiffOutput {
    pub from: String,
    pub to: String,
    pub summary: DiffSummary,
    pub changes: Vec<Change>,
    /// The unified patch, with --patch.
    pub patch: Option<String>,
}

fn describe(s: &StateRef) -> String {
    match s {
        StateRef::Live(w) => format!("{w}@live"),
        StateRef::Checkpoint { workspace, name } => format!("{workspace}:{name}"),
        StateRef::ForkBase(w) => format!("{w}@base"),
        StateRef::Root(id) => id.short(),
    }
}

pub fn cmd_diff(ctx: &Ctx, a: DiffArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let from = match &a.from {
        Some(s) => history::state_ref(&ws, s)?,
        None => history::default_from(&ws)?,
    };
    let to = match &a.to {
        Some(s) => history::state_ref(&ws, s)?,
        None => StateRef::Live(ws.name().to_string()),
    };
    let want_patch =
        a.patch || (!a.name_status && !a.stat && !ctx.json && std::io::stdout().is_terminal());
    let (changes, human, patch) = ws.vault().with_views(&from, &to, |va, vb| {
        let changes = agentvfs::model::diff::diff_views(va, vb)?;
        let mut human = String::new();
        let mut patch = None;
        if want_patch {
            let policy = agentvfs::service::policy::PolicyEngine::builtin();
            let secrets = (!a.show_secrets).then(|| policy.secret_paths());
            let p = history::patches(va, vb, &changes, secrets)?;
            human = p.clone();
            patch = Some(p);
        } else if a.stat {
            let mut rows = Vec::new();
            let (mut ti, mut td) = (0, 0);
            for c in &changes {
                let label = match &c.old_path {
                    Some(o) => format!("{o} => {}", c.path),
                    None => c.path.clone(),
                };
                let detail = match history::line_stat(va, vb, c)? {
                    Some((i, d)) => {
                        ti += i;
                        td += d;
                        format!(
                            "{} {}{}",
                            i + d,
                            "+".repeat(i.min(40) as usize),
                            "-".repeat(d.min(40) as usize)
                        )
                    }
                    None => format!(
                        "Bin {} -> {}",
                        size(c.old_size.unwrap_or(0)),
                        size(c.new_size.unwrap_or(0))
                    ),
                };
                rows.push(vec![label, "|".into(), detail]);
            }
            human = table(&rows);
            human.push_str(&format!(
                "{} paths changed, {ti} insertions(+), {td} deletions(-)",
                changes.len()
            ));
        } else {
            for c in &changes {
                match &c.old_path {
                    Some(o) => human.push_str(&format!("{}\t{o}\t{}\n", c.status.letter(), c.path)),
                    None => human.push_str(&format!("{}\t{}\n", c.status.letter(), c.path)),
                }
            }
        }
        Ok((changes, human, patch))
    })?;
    let out = DiffOutput {
        from: describe(&from),
        to: describe(&to),
        summary: history::summarize(&changes),
        changes,
        patch,
    };
    Ok(Reply::new(&out, human))
}

pub fn cmd_merge(ctx: &Ctx, a: MergeArgs) -> Result<Reply> {
    let (src, fork_ws) = ctx.service.open(Some(&a.fork))?;
    let into = match &a.into {
        Some(i) => i.clone(),
        None => fork_ws
            .vault()
            .forks()?
            .into_iter()
            .find(|f| f.name == src.workspace)
            .and_then(|f| f.parent)
            .ok_or_else(|| Error::invalid(format!("`{}` has no parent: pass --into", a.fork)))?,
    };
    // `--into` names a registered vault/fork, or a workspace in the fork's own vault.
    let target = match ctx.service.open(Some(&into)) {
        Ok((t, w)) if t.path == src.path => w,
        Ok(_) => {
            return Err(Error::invalid(
                "a fork can only be merged within its own vault",
            ));
        }
        Err(_) => fork_ws
            .vault()
            .workspace(&into, ctx.service.actor().clone())?,
    };
    let strategy = match a.strategy {
        None => MergeStrategy::Fail,
        Some(Strategy::Ours) => MergeStrategy::Ours,
        Some(Strategy::Theirs) => MergeStrategy::Theirs,
    };
    let report: MergeReport =
        fork_ws
            .vault()
            .merge(&src.workspace, &target, strategy, a.dry_run)?;
    let mut human = format!(
        "{} {} into {}: {} paths changed",
        if report.applied {
            "merged"
        } else {
            "would merge"
        },
        report.fork,
        report.into,
        report.changes.len()
    );
    for c in &report.changes {
        human.push_str(&format!("\n  {} {}", c.status.letter(), c.path));
    }
    for p in &report.text_merged {
        human.push_str(&format!("\n  text-merged {p}"));
    }
    for c in &report.conflicts {
        human.push_str(&format!(
            "\n  conflict {} (ours {}, theirs {})",
            c.path, c.ours, c.theirs
        ));
    }
    Ok(Reply::new(&report, human))
}

fn render_op(o: &OpInfo) -> Vec<String> {
    vec![
        o.id.to_string(),
        time(o.at),
        o.kind.clone(),
        if o.undone {
            "undone".into()
        } else {
            String::new()
        },
        o.description.clone(),
    ]
}

pub fn run_op(ctx: &Ctx, cmd: OpCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        OpCmd::Log { limit } => ("op log", op_log(ctx, limit)),
        OpCmd::Restore { id } => (
            "op restore",
            ctx.open().and_then(|(_, ws)| ws.op_restore(id)).map(|o| {
                let human = format!("restored to after operation {id} (new operation {})", o.id);
                Reply::new(&o, human)
            }),
        ),
    }
}

fn op_log(ctx: &Ctx, limit: usize) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let ops = ws.op_log(limit)?;
    let mut rows = vec![vec![
        "ID".into(),
        "WHEN".into(),
        "OPERATION".into(),
        "".into(),
        "DESCRIPTION".into(),
    ]];
    rows.extend(ops.iter().map(render_op));
    Ok(Reply::new(&ops, table(&rows)))
}

pub fn cmd_undo(ctx: &Ctx, redo: bool) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let op = if redo { ws.redo()? } else { ws.undo()? };
    let human = op.description.clone();
    Ok(Reply::new(&op, human))
}

#[derive(Serialize, schemars::JsonSchema)]
pub struct PruneOutput {
    pub pruned: PruneReport,
    pub gc: GcReport,
    pub disk_bytes_before: u64,
    pub disk_bytes_after: u64,
}

pub fn cmd_prune(ctx: &Ctx, a: PruneArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let cutoff = a
        .older_than
        .as_deref()
        .map(|d| limits::parse_duration("--older-than", d).map(|d| limits::before_now(now_ns(), d)))
        .transpose()?;
    let vault = ws.vault().clone();
    let before = vault.stats()?.disk_bytes;
    let pruned = ws.prune(a.keep_last, cutoff)?;
    let gc = vault.gc(false)?;
    vault.compact()?;
    let after = vault.stats()?.disk_bytes;
    let human = format!(
        "pruned {} checkpoints and {} operations; gc removed {} objects ({}); vault {} -> {}",
        pruned.checkpoints_removed.len(),
        pruned.operations_removed,
        gc.objects_removed,
        size(gc.bytes_removed),
        size(before),
        size(after)
    );
    let out = PruneOutput {
        pruned,
        gc,
        disk_bytes_before: before,
        disk_bytes_after: after,
    };
    Ok(Reply::new(&out, human))
}

pub fn render_apply(r: &ApplyReport) -> String {
    let verb = if r.dry_run { "would " } else { "" };
    let mut s = format!(
        "{verb}write {}, delete {}, chmod {} under {} ({} already up to date)",
        r.written.len(),
        r.deleted.len(),
        r.mode_changed.len(),
        r.host,
        r.unchanged.len()
    );
    for p in &r.written {
        s.push_str(&format!("\n  write  {p}"));
    }
    for p in &r.deleted {
        s.push_str(&format!("\n  delete {p}"));
    }
    for p in &r.mode_changed {
        s.push_str(&format!("\n  chmod  {p}"));
    }
    for c in &r.forced {
        s.push_str(&format!("\n  forced {} ({})", c.path, c.reason));
    }
    for p in &r.skipped {
        s.push_str(&format!("\n  skipped {p}"));
    }
    s
}

/// Shared by `apply` and `export --changes`.
pub fn apply_changes(
    ctx: &Ctx,
    from: Option<&str>,
    prefix: &str,
    host: &std::path::Path,
    opts: apply::ApplyOptions,
) -> Result<ApplyReport> {
    let (_, ws) = ctx.open()?;
    let from = match from {
        Some(s) => history::state_ref(&ws, s)?,
        None => StateRef::ForkBase(ws.name().to_string()),
    };
    apply::apply(&ws, &from, &path(prefix)?, host, opts)
}

pub fn cmd_apply(ctx: &Ctx, a: ApplyArgs) -> Result<Reply> {
    let opts = apply::ApplyOptions {
        force: a.force,
        dry_run: a.dry_run,
        devices: a.devices,
    };
    let report = apply_changes(ctx, a.from.as_deref(), "/", &a.host_dir, opts)?;
    let human = render_apply(&report);
    Ok(Reply::new(&report, human))
}
