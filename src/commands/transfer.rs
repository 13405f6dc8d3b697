//! `avfs import` and `avfs export`: host directories in and out.

use std::path::PathBuf;

use clap::Args;

use agentvfs::Result;
use agentvfs::service::apply;
use agentvfs::service::apply::ExportOutput;
use agentvfs::service::git;
use agentvfs::service::transfer::{self, ImportOptions, ImportOutput, TransferReport};

use super::Ctx;
use crate::output::{Reply, size};

#[derive(Args)]
pub struct ImportArgs {
    /// The host directory whose contents are imported (with --git: the workspace path,
    /// as `avfs import --git REPO[@REV] [VAULT_PATH]`).
    #[arg(required_unless_present = "git")]
    pub host_dir: Option<PathBuf>,
    /// Where in the workspace (default: the root); created if missing.
    pub vault_path: Option<String>,
    /// Take exactly the tracked files of a commit of a git repository, REPO[@REV]
    /// (default HEAD): git's modes and symlinks, no untracked or ignored files, no .git/,
    /// submodules listed as skipped. Read through git's objects; the repository's
    /// worktree is not looked at.
    #[arg(long, value_name = "REPO[@REV]", conflicts_with_all = ["gitignore", "no_git_dir"])]
    pub git: Option<String>,
    /// Skip what .gitignore, .ignore and .git/info/exclude exclude (a virtualenv,
    /// node_modules, build output). .git/ itself is still taken.
    #[arg(long)]
    pub gitignore: bool,
    /// Leave .git/ directories out.
    #[arg(long)]
    pub no_git_dir: bool,
}

#[derive(Args)]
pub struct HandbackArgs {
    /// The host git repository (a worktree or a bare repository).
    #[arg(long = "git", value_name = "HOST_REPO")]
    pub repo: PathBuf,
    /// The branch to write, e.g. agent/task-7: made from the commit the workspace was
    /// imported from (else HEAD), or moved on if this fork handed back to it before and
    /// nobody moved it since; refused (branch_moved) otherwise.
    #[arg(long)]
    pub branch: String,
    /// The commit message (default: "avfs: hand back FORK").
    #[arg(short, long)]
    pub message: Option<String>,
}

pub fn cmd_handback(ctx: &Ctx, a: HandbackArgs) -> Result<Reply> {
    let (_, ws) = ctx.open()?;
    let r = git::handback(&ws, &a.repo, &a.branch, a.message.as_deref())?;
    let mut human = match (&r.commit, &r.note) {
        (Some(c), _) => format!(
            "{} {} at {} ({} files, parent {})",
            if r.created { "made" } else { "moved" },
            r.branch,
            &c[..12],
            r.files,
            r.parent.as_deref().map(|p| &p[..12]).unwrap_or("none")
        ),
        (None, Some(note)) => note.clone(),
        (None, None) => String::new(),
    };
    for s in &r.skipped {
        human.push_str(&format!("\nskipped {s}"));
    }
    Ok(Reply::new(&r, human))
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
    if let Some(spec) = &a.git {
        // With --git the one positional is the workspace path.
        if a.vault_path.is_some() {
            return Err(agentvfs::Error::invalid(
                "with --git, give only the workspace path: avfs import --git REPO[@REV] [VAULT_PATH]",
            ));
        }
        let at = a
            .host_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into());
        let dest = ws.resolve_path(&at)?;
        let (repo, rev) = git::split_spec(spec);
        let r = git::import_commit(&ws, &repo, &rev, &dest)?;
        let mut human = format!(
            "imported {} files, {} symlinks, {} directories ({}) from {} at {}",
            r.files,
            r.symlinks,
            r.dirs,
            size(r.bytes),
            r.repo,
            &r.commit[..12]
        );
        for s in &r.skipped {
            human.push_str(&format!("\nskipped {s}"));
        }
        return Ok(Reply::new(&ImportOutput::Git(r), human));
    }
    let host_dir = a.host_dir.clone().expect("required without --git");
    let dest = ws.resolve_path(a.vault_path.as_deref().unwrap_or("/"))?;
    let bar = ctx.progress("importing");
    let mut progress = |n: u64, b: u64| {
        if let Some(bar) = &bar {
            bar.set_message(format!("importing: {n} entries, {}", size(b)));
            bar.tick();
        }
    };
    let report = transfer::import(
        &ws,
        &host_dir,
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
    Ok(Reply::new(&ImportOutput::Tree(report), human))
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
