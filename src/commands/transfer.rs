//! `avfs import` and `avfs export`: host directories in and out.

use std::path::PathBuf;

use clap::Args;

use agentvfs::Result;
use agentvfs::service::apply;
use agentvfs::service::apply::ExportOutput;
use agentvfs::service::transfer::{self, ImportOptions, TransferReport};

use super::Ctx;
use crate::output::{Reply, size};

#[derive(Args)]
pub struct ImportArgs {
    /// The host directory whose contents are imported.
    pub host_dir: PathBuf,
    /// Where in the workspace (default: the root); created if missing.
    #[arg(default_value = "/")]
    pub vault_path: String,
    /// Skip what .gitignore, .ignore and .git/info/exclude exclude (a virtualenv,
    /// node_modules, build output). .git/ itself is still taken.
    #[arg(long)]
    pub gitignore: bool,
    /// Leave .git/ directories out.
    #[arg(long)]
    pub no_git_dir: bool,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The workspace path to export (a directory or a file).
    pub vault_path: String,
    /// The host destination.
    pub host_dir: PathBuf,
    /// Write into a non-empty directory, overwriting what is there.
    #[arg(long)]
    pub force: bool,
    /// Export as of this checkpoint.
    #[arg(long, conflicts_with = "changes")]
    pub at: Option<String>,
    /// Write only the changes since a base state (like `avfs apply`), refusing host files
    /// that changed since that base unless --force.
    #[arg(long)]
    pub changes: bool,
    /// With --changes: the base state (default `@base`).
    #[arg(long, requires = "changes")]
    pub from: Option<String>,
    /// Make device nodes on the host (needs CAP_MKNOD). Without it they are skipped and
    /// listed: a device an agent made in its fork never becomes a live host device unasked.
    #[arg(long)]
    pub devices: bool,
    /// With --changes: also write the changes the ignore rules leave out.
    #[arg(long, requires = "changes")]
    pub include_ignored: bool,
}

fn summary(verb: &str, r: &TransferReport) -> String {
    let mut s = format!(
        "{verb} {} files, {} directories, {} symlinks ({})",
        r.files,
        r.dirs,
        r.symlinks,
        size(r.bytes)
    );
    if r.special > 0 {
        s.push_str(&format!(", {} FIFOs, devices or sockets", r.special));
    }
    if r.hard_links > 0 {
        s.push_str(&format!(", {} more names kept as hard links", r.hard_links));
    }
    for skipped in &r.skipped {
        s.push_str(&format!("\nskipped {skipped}"));
    }
    s
}

pub fn cmd_import(ctx: &Ctx, a: ImportArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let dest = ws.resolve_path(&a.vault_path)?;
    let bar = ctx.progress("importing");
    let mut progress = |n: u64, b: u64| {
        if let Some(bar) = &bar {
            bar.set_message(format!("importing: {n} entries, {}", size(b)));
            bar.tick();
        }
    };
    let report = transfer::import(
        &ws,
        &a.host_dir,
        &dest,
        ImportOptions {
            gitignore: a.gitignore,
            skip_git_dir: a.no_git_dir,
        },
        &mut progress,
    )?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let human = summary("imported", &report);
    Ok(Reply::new(&report, human))
}

pub fn cmd_export(ctx: &Ctx, a: ExportArgs) -> Result<Reply> {
    if a.changes {
        let (_, ws) = ctx.open()?;
        let report = apply::apply_named(
            &ws,
            a.from.as_deref(),
            Some(&a.vault_path),
            Some(&a.host_dir),
            agentvfs::service::apply::ApplyOptions {
                force: a.force,
                dry_run: false,
                devices: a.devices,
                include_ignored: a.include_ignored,
            },
        )?;
        let human = super::history::render_apply(&report);
        return Ok(Reply::new(&ExportOutput::Changes(report), human));
    }
    let (_, ws) = ctx.open()?;
    let src = ws.resolve_path(&a.vault_path)?;
    let bar = ctx.progress("exporting");
    let mut progress = |n: u64, _b: u64| {
        if let Some(bar) = &bar
            && n.is_multiple_of(256)
        {
            bar.set_message(format!("exporting: {n} entries"));
            bar.tick();
        }
    };
    let report = transfer::export(
        &ws,
        &src,
        a.at.as_deref(),
        &a.host_dir,
        transfer::ExportOptions {
            force: a.force,
            devices: a.devices,
        },
        &mut progress,
    )?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let human = summary("exported", &report);
    Ok(Reply::new(&ExportOutput::Tree(report), human))
}
