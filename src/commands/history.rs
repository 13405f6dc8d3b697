//! History commands: diff, merge, op log / op restore, undo, redo, prune, apply.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use agentvfs::Result;
use agentvfs::model::diff::Change;
use agentvfs::model::ignore::IgnoredCounts;
use agentvfs::model::merge::{MergeOptions, MergeReport, MergeStrategy};
use agentvfs::model::{OpInfo, limits};
use agentvfs::service::apply::{self, ApplyReport};
use agentvfs::service::history::{self, Diff, DiffRequest};
use agentvfs::service::maintenance;

use super::Ctx;
use crate::output::{Reply, one_line, size, table, time};

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
    /// List the changes the workspace's ignore rules leave out too (.gitignore and
    /// .avfsignore in any directory, .git/info/exclude, .git/); by default they are only
    /// counted, per top-level name.
    #[arg(long)]
    pub include_ignored: bool,
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
    /// Also carry the fork's changes the ignore rules leave out (a virtualenv,
    /// node_modules, .git/); by default they stay in the fork and are counted.
    #[arg(long)]
    pub include_ignored: bool,
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
    /// Keep only the newest N checkpoints and N operations (the newest operation, the
    /// workspace's head, always stays).
    #[arg(long)]
    pub keep_last: Option<usize>,
    /// Drop checkpoints and operations older than this (e.g. 7d, 12h).
    #[arg(long)]
    pub older_than: Option<String>,
}

#[derive(Args)]
pub struct ApplyArgs {
    /// The host directory to update (default: the one the workspace, or the vault it was
    /// forked from, was imported from).
    pub host_dir: Option<PathBuf>,
    /// The state the host is expected to match (default: the state recorded for that
    /// directory by the import, or by the last apply to it; else `@base`, where this fork
    /// started).
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
    /// Also write the changes the workspace's ignore rules leave out (.gitignore,
    /// .avfsignore, .git/info/exclude, .git/).
    #[arg(long)]
    pub include_ignored: bool,
}

pub fn cmd_diff(ctx: &Ctx, a: DiffArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    // Whether to show a patch by default is a matter of the terminal, so it is decided here.
    let want_patch =
        a.patch || (!a.name_status && !a.stat && !ctx.json && std::io::stdout().is_terminal());
    let req = DiffRequest {
        from: a.from,
        to: a.to,
        patch: want_patch,
        show_secrets: a.show_secrets,
        line_stats: a.stat && !want_patch,
        include_ignored: a.include_ignored,
    };
    let Diff { output, line_stats } = history::diff(&ws, &req)?;
    let human = if let Some(p) = &output.patch {
        p.clone()
    } else if a.stat {
        render_stat(&output.changes, &line_stats)
    } else {
        let mut human = String::new();
        for c in &output.changes {
            match &c.old_path {
                Some(o) => human.push_str(&format!("{}\t{o}\t{}\n", c.status.letter(), c.path)),
                None => human.push_str(&format!("{}\t{}\n", c.status.letter(), c.path)),
            }
        }
        human
    };
    if let Some(line) = ignored_line(&output.ignored) {
        // On stderr, so a patch on stdout stays a patch.
        eprintln!("{line}");
    }
    Ok(Reply::new(&output, human))
}

/// One line saying what the ignore rules left out, if anything.
pub fn ignored_line(ignored: &IgnoredCounts) -> Option<String> {
    if ignored.is_empty() {
        return None;
    }
    let n: u64 = ignored.values().sum();
    let names: Vec<String> = ignored.iter().map(|(k, v)| format!("{k} ({v})")).collect();
    Some(format!(
        "{n} ignored changes not listed: {} (--include-ignored lists them)",
        names.join(", ")
    ))
}

fn render_stat(changes: &[Change], line_stats: &[Option<(u64, u64)>]) -> String {
    let mut rows = Vec::new();
    let (mut ti, mut td) = (0, 0);
    for (c, stat) in changes.iter().zip(line_stats) {
        let label = match &c.old_path {
            Some(o) => format!("{o} => {}", c.path),
            None => c.path.clone(),
        };
        let detail = match stat {
            Some((i, d)) => {
                ti += i;
                td += d;
                format!(
                    "{} {}{}",
                    i + d,
                    "+".repeat((*i).min(40) as usize),
                    "-".repeat((*d).min(40) as usize)
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
    let mut human = table(&rows);
    human.push_str(&format!(
        "{} paths changed, {ti} insertions(+), {td} deletions(-)",
        changes.len()
    ));
    human
}

pub fn cmd_merge(ctx: &Ctx, a: MergeArgs) -> Result<Reply> {
    let strategy = match a.strategy {
        None => MergeStrategy::Fail,
        Some(Strategy::Ours) => MergeStrategy::Ours,
        Some(Strategy::Theirs) => MergeStrategy::Theirs,
    };
    let opts = MergeOptions {
        strategy,
        dry_run: a.dry_run,
        include_ignored: a.include_ignored,
    };
    let report: MergeReport = ctx.service.merge(&a.fork, a.into.as_deref(), opts)?;
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
    if let Some(line) = ignored_line(&report.ignored) {
        human.push_str(&format!("\n{line}; they stay in the fork"));
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
        one_line(&o.description, 100),
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

pub fn cmd_prune(ctx: &Ctx, a: PruneArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let older_than = a
        .older_than
        .as_deref()
        .map(|d| limits::parse_duration("--older-than", d))
        .transpose()?;
    let out = maintenance::prune(&ws, a.keep_last, older_than)?;
    let (pruned, gc) = (&out.pruned, &out.gc);
    let (before, after) = (out.disk_bytes_before, out.disk_bytes_after);
    let human = format!(
        "pruned {} checkpoints and {} operations; gc removed {} objects ({}); vault {} -> {}",
        pruned.checkpoints_removed.len(),
        pruned.operations_removed,
        gc.objects_removed,
        size(gc.bytes_removed),
        size(before),
        size(after)
    );
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
    s.push_str(&format!("\nbase: {}", r.from));
    if let Some(line) = ignored_line(&r.ignored) {
        s.push_str(&format!("\n{line}"));
    }
    if let Some(note) = &r.note {
        s.push_str(&format!("\n{note}"));
    }
    s
}

pub fn cmd_apply(ctx: &Ctx, a: ApplyArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let opts = apply::ApplyOptions {
        force: a.force,
        dry_run: a.dry_run,
        devices: a.devices,
        include_ignored: a.include_ignored,
    };
    let report = apply::apply_named(&ws, a.from.as_deref(), None, a.host_dir.as_deref(), opts)?;
    let human = render_apply(&report);
    Ok(Reply::new(&report, human))
}
