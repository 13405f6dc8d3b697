//! `avfs checkpoint …`: save, list, info, restore, delete.

use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::model::CheckpointInfo;

use super::Ctx;
use crate::output::{Reply, size, table, time};

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
    }
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
    let mut rows = vec![vec![
        "NAME".into(),
        "CREATED".into(),
        "FILES".into(),
        "SIZE".into(),
        "MESSAGE".into(),
    ]];
    for c in &list {
        rows.push(vec![
            c.name.clone(),
            time(c.created_at),
            c.files.to_string(),
            size(c.bytes),
            c.message.clone().unwrap_or_default(),
        ]);
    }
    let human = if list.is_empty() {
        "no checkpoints".to_string()
    } else {
        table(&rows)
    };
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
