//! `avfs vault …`: create, list, use, info, delete, fork, check.

use std::path::PathBuf;

use agentvfs::model::ForkInfo;
use agentvfs::service::workspace::{ForkOutput, InfoOutput};
use agentvfs::store::Engine;
use agentvfs::{Error, Result};
use clap::{Args, Subcommand};

use super::Ctx;
use crate::output::{Reply, size, table, time};

#[derive(Subcommand)]
pub enum VaultCmd {
    /// Create a vault (stored under $AVFS_HOME/vaults unless --path is given).
    Create(CreateArgs),
    /// List registered vaults and forks; `*` marks the current one.
    List,
    /// Make a vault or fork the current one.
    Use { name: String },
    /// Show a vault's or fork's details: lineage, size, checkpoints, quota.
    Info { name: Option<String> },
    /// Delete a vault file (with all its forks) or a single fork.
    Delete(DeleteArgs),
    /// Fork a vault or fork in O(1): no content is copied.
    Fork(ForkArgs),
    /// Verify every object hashes to its id and every reference resolves.
    Check,
    /// Move a vault (with all its forks) into another storage engine.
    ///
    /// Everything is copied into a new file beside the vault (objects, workspaces, overlays,
    /// checkpoints, the op log with its ids, the audit log, settings and quotas) while the
    /// vault is held still, the copy is checked (every object re-hashed, every record
    /// compared), and only then renamed over the vault file in one atomic step. On any
    /// failure the vault is untouched. Refused while a mount or session uses the vault.
    Migrate(MigrateArgs),
    /// Register a vault another host created on a PostgreSQL server, by its name there.
    ///
    /// This host gets a small vault file pointing at the server; the records stay on the
    /// server, shared by every host that attached the vault.
    Attach(AttachArgs),
}

#[derive(Args)]
pub struct AttachArgs {
    /// The vault's name on the server (as given to `vault create` on the host that made it);
    /// it is registered here under the same name.
    pub name: String,
    /// The server: postgres://user@host:port/database. Without it, $AVFS_POSTGRES_URL,
    /// which keeps the URL (and any password) out of shell history and the vault file.
    /// Each request to it waits at most $AVFS_SERVER_TIMEOUT_SECS (default 90).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Where to put the vault file that points at the server.
    #[arg(long)]
    pub path: Option<PathBuf>,
}

#[derive(Args)]
pub struct MigrateArgs {
    /// The vault's registered name.
    pub name: String,
    /// The engine to move it to: sqlite, or lmdb, sled or postgres in a build with that
    /// cargo feature.
    #[arg(long, value_name = "ENGINE")]
    pub to: String,
    /// With --to postgres: the server (else $AVFS_POSTGRES_URL).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// With --to postgres: an S3-compatible store for objects larger than 4 KiB, as for
    /// `vault create --objects`.
    #[arg(long, value_name = "S3_URL")]
    pub objects: Option<String>,
}

#[derive(Args)]
pub struct CreateArgs {
    pub name: String,
    /// Where to put the vault file (a sled vault is a directory).
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// The storage engine: sqlite (the default), or lmdb, sled or postgres in a build with
    /// that cargo feature. A postgres vault lives on a server every host can attach.
    /// A vault is opened in whichever engine it was made with.
    #[arg(
        long,
        value_name = "ENGINE",
        env = "AVFS_ENGINE",
        default_value = "sqlite"
    )]
    pub engine: String,
    /// With --engine postgres: the server, postgres://user@host:port/database. Without it,
    /// $AVFS_POSTGRES_URL, which keeps the URL (and any password) out of shell history and
    /// out of the vault file.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// With --engine postgres: keep objects larger than 4 KiB in an S3-compatible store,
    /// s3://bucket[/prefix], instead of in the database. The endpoint and credentials come
    /// from the standard AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP) on every host.
    #[arg(long, value_name = "S3_URL")]
    pub objects: Option<String>,
}

#[derive(Args)]
pub struct DeleteArgs {
    pub name: String,
    /// Confirm the deletion.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args)]
pub struct ForkArgs {
    /// The vault or fork to fork from.
    pub source: String,
    /// The new fork's name.
    pub name: String,
    /// Fork at this checkpoint of the source instead of its live state.
    #[arg(long)]
    pub at: Option<String>,
    /// Make the new fork the current vault.
    #[arg(long = "use")]
    pub make_current: bool,
}

pub fn run(ctx: &Ctx, cmd: VaultCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        VaultCmd::Create(a) => ("vault create", cmd_create(ctx, a)),
        VaultCmd::List => ("vault list", cmd_list(ctx)),
        VaultCmd::Use { name } => ("vault use", cmd_use(ctx, &name)),
        VaultCmd::Info { name } => ("vault info", cmd_info(ctx, name)),
        VaultCmd::Delete(a) => ("vault delete", cmd_delete(ctx, a)),
        VaultCmd::Fork(a) => ("vault fork", cmd_fork(ctx, a)),
        VaultCmd::Check => ("vault check", cmd_check(ctx)),
        VaultCmd::Migrate(a) => ("vault migrate", cmd_migrate(ctx, a)),
        VaultCmd::Attach(a) => ("vault attach", cmd_attach(ctx, a)),
    }
}

fn cmd_create(ctx: &Ctx, a: CreateArgs) -> Result<Reply> {
    let engine: Engine = a.engine.parse()?;
    let t = ctx.service.create_vault(
        &a.name,
        a.path.as_deref(),
        engine,
        a.url.as_deref(),
        a.objects.as_deref(),
    )?;
    let human = format!(
        "created vault {} at {} ({})",
        t.name,
        t.path.display(),
        engine.name()
    );
    Ok(Reply::new(&t, human))
}

fn cmd_attach(ctx: &Ctx, a: AttachArgs) -> Result<Reply> {
    let t = ctx
        .service
        .attach_vault(&a.name, a.path.as_deref(), a.url.as_deref())?;
    let human = format!(
        "attached vault {} (kept in PostgreSQL); its file here is {}",
        t.name,
        t.path.display()
    );
    Ok(Reply::new(&t, human))
}

fn cmd_migrate(ctx: &Ctx, a: MigrateArgs) -> Result<Reply> {
    let to: Engine = a.to.parse()?;
    let bar = ctx.progress("migrating");
    let mut progress = |phase: &str, done: u64, total: u64| {
        if let Some(bar) = &bar {
            bar.set_message(format!("{phase}: {done} of {total}"));
            bar.tick();
        }
    };
    let r = ctx.service.migrate(
        &a.name,
        to,
        a.url.as_deref(),
        a.objects.as_deref(),
        &mut progress,
    )?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let c = &r.copied;
    let human = format!(
        "migrated vault {} from {} to {}: {} objects ({}), {} workspaces, {} checkpoints, {} ops, {} audit records, {} settings, all verified; {} on disk (was {})",
        r.name,
        r.from.name(),
        r.to.name(),
        c.objects,
        size(c.bytes),
        c.workspaces,
        c.checkpoints,
        c.ops,
        c.audit_records,
        c.settings,
        size(r.disk_bytes_after),
        size(r.disk_bytes_before)
    );
    Ok(Reply::new(&r, human))
}

fn cmd_list(ctx: &Ctx) -> Result<Reply> {
    let list = ctx.service.list()?;
    let mut rows = vec![vec!["".into(), "NAME".into(), "FORK".into(), "PATH".into()]];
    for v in &list {
        rows.push(vec![
            if v.current { "*".into() } else { "".into() },
            v.name.clone(),
            v.workspace.clone(),
            format!(
                "{}{}",
                v.path.display(),
                if v.exists { "" } else { " (missing)" }
            ),
        ]);
    }
    let human = if list.is_empty() {
        "no vaults yet: create one with `avfs vault create NAME`".to_string()
    } else {
        table(&rows)
    };
    Ok(Reply::new(&list, human))
}

fn cmd_use(ctx: &Ctx, name: &str) -> Result<Reply> {
    let t = ctx.service.use_vault(name)?;
    let human = format!("now using {}", t.name);
    Ok(Reply::new(&t, human))
}

/// Where a fork started: its parent, at a checkpoint or the live state, and the root.
fn forked_from(f: &ForkInfo) -> String {
    let Some(parent) = &f.parent else {
        return "-".into();
    };
    let at = match &f.forked_at_checkpoint {
        Some(cp) => format!("checkpoint {cp}"),
        None => "its live state".into(),
    };
    let root = f
        .base_root
        .as_deref()
        .map(|r| format!(", base root {}", &r[..r.len().min(12)]))
        .unwrap_or_default();
    format!("{parent} at {at}{root}")
}

fn cmd_info(ctx: &Ctx, name: Option<String>) -> Result<Reply> {
    let selector = name.or_else(|| ctx.workspace.clone());
    let (t, info) = ctx.service.info(selector.as_deref())?;
    let q = &info.quota;
    let limit = |v: Option<u64>, unit: &str| {
        v.map(|v| format!("{v}{unit}"))
            .unwrap_or_else(|| "none".into())
    };
    let rows = vec![
        vec!["name".into(), t.name.clone()],
        vec!["path".into(), info.path.clone()],
        vec!["fork".into(), info.workspace.name.clone()],
        vec![
            "parent".into(),
            info.workspace.parent.clone().unwrap_or_else(|| "-".into()),
        ],
        vec!["forked from".into(), forked_from(&info.workspace)],
        vec![
            "origin".into(),
            match &info.origin {
                Some(o) => format!(
                    "{} -> {} ({} by {}, {})",
                    o.host,
                    o.prefix,
                    o.recorded_by,
                    o.workspace,
                    time(o.at)
                ),
                None => "-".into(),
            },
        ],
        vec!["created".into(), time(info.workspace.created_at)],
        vec![
            "files".into(),
            format!("{} ({})", info.workspace.files, size(info.workspace.bytes)),
        ],
        vec!["checkpoints".into(), info.checkpoints.to_string()],
        vec!["pending changes".into(), info.pending_changes.to_string()],
        vec![
            "forks".into(),
            if info.forks.is_empty() {
                "-".into()
            } else {
                info.forks.join(", ")
            },
        ],
        vec!["disk".into(), size(info.disk_bytes)],
        vec![
            "quota".into(),
            format!(
                "size {}, files {}, file size {}",
                limit(q.max_size_mb, " MiB"),
                limit(q.max_files, ""),
                limit(q.max_file_size_mb, " MiB")
            ),
        ],
        vec!["format".into(), info.format_version.to_string()],
        vec!["engine".into(), info.engine.name().into()],
    ];
    let out = InfoOutput { name: t.name, info };
    Ok(Reply::new(&out, table(&rows)))
}

fn cmd_delete(ctx: &Ctx, a: DeleteArgs) -> Result<Reply> {
    if !a.yes {
        return Err(Error::invalid(format!(
            "deleting `{}` cannot be undone; pass --yes to confirm",
            a.name
        )));
    }
    let report = ctx.service.delete(&a.name)?;
    let human = if report.file_deleted {
        format!(
            "deleted vault {} ({})",
            a.name,
            report.unregistered.join(", ")
        )
    } else {
        format!("deleted fork {}", a.name)
    };
    Ok(Reply::new(&report, human))
}

fn cmd_fork(ctx: &Ctx, a: ForkArgs) -> Result<Reply> {
    let (target, fork) = ctx
        .service
        .fork(&a.source, &a.name, a.at.as_deref(), a.make_current)?;
    let human = format!(
        "forked {} as {}{}{}",
        a.source,
        a.name,
        a.at.as_ref()
            .map(|c| format!(" at {c}"))
            .unwrap_or_default(),
        if a.make_current { " (now current)" } else { "" }
    );
    Ok(Reply::new(&ForkOutput { target, fork }, human))
}

fn cmd_check(ctx: &Ctx) -> Result<Reply> {
    let report = ctx.service.verify(ctx.workspace.as_deref())?;
    let human = format!("ok: {} objects verified", report.objects_checked);
    Ok(Reply::new(&report, human))
}
