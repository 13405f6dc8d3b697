//! `avfs checkpoint …`: save, list, info, restore, delete.

use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::model::{CheckpointInfo, DEFAULT_KEEP_AUTO};
use agentvfs::service::workspace::RetentionOutput;

use super::Ctx;
use crate::output::{Reply, one_line, size, table, time};

#[derive(Subcommand)]
pub enum CheckpointCmd {
    /// Save the live state. Costs in proportion to changes since the last checkpoint.
    Save(SaveArgs),
    /// List checkpoints, oldest first.
    List,
    /// Show one checkpoint.
    Info { name: String },
    /// Return the workspace to a checkpoint, atomically.
    Restore { name: String },
    /// Delete a checkpoint (its objects stay until `avfs gc`).
    Delete { name: String },
    /// Show or set how many automatic checkpoints (the ones `proxy exec` takes before a
    /// command) each workspace of the vault keeps; older ones are pruned at the next
    /// command. Named checkpoints, and one a fork was made at, are never pruned; undo and
    /// rollback keep working, as the op log holds the states.
    Retention(RetentionArgs),
}

#[derive(Args)]
pub struct RetentionArgs {
    /// Keep the newest N automatic checkpoints per workspace (at least 1; default 20).
    #[arg(long, value_name = "N")]
    pub keep_auto: Option<u64>,
}

#[derive(Args)]
pub struct SaveArgs {
    /// A name (letters, digits, `-`, `_`, `.`); generated as cp-N when absent.
    pub name: Option<String>,
    /// A message describing the checkpoint.
    #[arg(short, long)]
    pub message: Option<String>,
}

pub fn run(ctx: &Ctx, cmd: CheckpointCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        CheckpointCmd::Save(a) => ("checkpoint save", cmd_save(ctx, a)),
        CheckpointCmd::List => ("checkpoint list", cmd_list(ctx)),
        CheckpointCmd::Info { name } => ("checkpoint info", cmd_info(ctx, &name)),
        CheckpointCmd::Restore { name } => ("checkpoint restore", cmd_restore(ctx, &name)),
        CheckpointCmd::Delete { name } => ("checkpoint delete", cmd_delete(ctx, &name)),
        CheckpointCmd::Retention(a) => ("checkpoint retention", cmd_retention(ctx, a)),
    }
}

fn cmd_retention(ctx: &Ctx, a: RetentionArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    if let Some(n) = a.keep_auto {
        ws.set_keep_auto(n)?;
    }
    let out = RetentionOutput {
        keep_auto: ws.keep_auto()?,
        default_keep_auto: DEFAULT_KEEP_AUTO,
    };
    let human = format!(
        "each workspace keeps its newest {} automatic checkpoints (default {})",
        out.keep_auto, out.default_keep_auto
    );
    Ok(Reply::new(&out, human))
}

fn cmd_save(ctx: &Ctx, a: SaveArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let cp: CheckpointInfo = ws
        .checkpoint_save(a.name.as_deref(), a.message.as_deref())?
        .into();
    let human = format!(
        "saved checkpoint {} ({} files, {})",
        cp.name,
        cp.files,
        size(cp.bytes)
    );
    Ok(Reply::new(&cp, human))
}

fn cmd_list(ctx: &Ctx) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let list: Vec<CheckpointInfo> = ws.checkpoints()?.into_iter().map(Into::into).collect();
    let header = || {
        vec![vec![
            "NAME".into(),
            "CREATED".into(),
            "FILES".into(),
            "SIZE".into(),
            "MESSAGE".into(),
        ]]
    };
    let row = |c: &CheckpointInfo| {
        vec![
            c.name.clone(),
            time(c.created_at),
            c.files.to_string(),
            size(c.bytes),
            one_line(c.message.as_deref().unwrap_or_default(), 80),
        ]
    };
    // Named checkpoints first, then the automatic ones as a group of their own.
    let (auto, named): (Vec<&CheckpointInfo>, Vec<&CheckpointInfo>) =
        list.iter().partition(|c| c.auto);
    let mut human = String::new();
    if !named.is_empty() {
        let mut rows = header();
        rows.extend(named.iter().map(|c| row(c)));
        human.push_str(&table(&rows));
    }
    if !auto.is_empty() {
        if !human.is_empty() {
            human.push('\n');
        }
        human.push_str(&format!(
            "automatic, taken before proxied commands ({} of at most {} kept; `avfs checkpoint retention`):\n",
            auto.len(),
            ws.keep_auto()?
        ));
        let mut rows = header();
        rows.extend(auto.iter().map(|c| row(c)));
        human.push_str(&table(&rows));
    }
    if list.is_empty() {
        human = "no checkpoints".to_string();
    }
    Ok(Reply::new(&list, human))
}

fn render(c: &CheckpointInfo) -> String {
    table(&[
        vec!["name".into(), c.name.clone()],
        vec!["created".into(), time(c.created_at)],
        vec!["files".into(), format!("{} ({})", c.files, size(c.bytes))],
        vec!["root".into(), c.root.clone()],
        vec![
            "message".into(),
            c.message.clone().unwrap_or_else(|| "-".into()),
        ],
    ])
}

fn cmd_info(ctx: &Ctx, name: &str) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let cp: CheckpointInfo = ws.checkpoint(name)?.into();
    let human = render(&cp);
    Ok(Reply::new(&cp, human))
}

fn cmd_restore(ctx: &Ctx, name: &str) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let cp: CheckpointInfo = ws.checkpoint_restore(name)?.into();
    let human = format!("restored {} ({} files)", cp.name, cp.files);
    Ok(Reply::new(&cp, human))
}

fn cmd_delete(ctx: &Ctx, name: &str) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let cp: CheckpointInfo = ws.checkpoint_delete(name)?.into();
    let human = format!("deleted checkpoint {}", cp.name);
    Ok(Reply::new(&cp, human))
}
