//! Vault administration: quota, audit, stats, gc, compact, schema.

use clap::{Args, Subcommand};

use agentvfs::Result;
use agentvfs::model::{GcReport, Quota, StatsReport, Vault};
use agentvfs::service::{maintenance, quota};
use agentvfs::store::AuditRecord;

use super::Ctx;
use crate::output::{Reply, one_line, size, table, time};

#[derive(Subcommand)]
pub enum QuotaCmd {
    /// Show the vault's quotas.
    Show,
    /// Set quotas; pass `none` to remove a limit.
    Set(QuotaSetArgs),
}

#[derive(Args)]
pub struct QuotaSetArgs {
    /// Total bytes of regular files per workspace, in MiB.
    #[arg(long)]
    pub max_size_mb: Option<String>,
    /// Number of regular files per workspace.
    #[arg(long)]
    pub max_files: Option<String>,
    /// Size of any one file, in MiB.
    #[arg(long)]
    pub max_file_size_mb: Option<String>,
}

#[derive(Args)]
pub struct AuditArgs {
    /// Show at most this many records.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Only records since a time: a duration ago (`10m`, `2h`) or an RFC 3339 timestamp.
    #[arg(long)]
    pub since: Option<String>,
    /// Every step too: each file operation of a mount or session, and a proxied command's
    /// checkpoint and ingest. Without it, one record per operation (a proxied command, a
    /// mount's or import's commit) with the paths it changed.
    #[arg(long)]
    pub detail: bool,
}

#[derive(Args)]
pub struct GcArgs {
    /// Report what would be removed without removing it.
    #[arg(long)]
    pub dry_run: bool,
}

fn vault(ctx: &Ctx) -> Result<std::sync::Arc<Vault>> {
    let (_, ws) = ctx.open()?;
    Ok(ws.vault().clone())
}

fn render_quota(q: &Quota) -> String {
    let v = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "none".into());
    table(&[
        vec!["max_size_mb".into(), v(q.max_size_mb)],
        vec!["max_files".into(), v(q.max_files)],
        vec!["max_file_size_mb".into(), v(q.max_file_size_mb)],
    ])
}

pub fn run_quota(ctx: &Ctx, cmd: QuotaCmd) -> (&'static str, Result<Reply>) {
    match cmd {
        QuotaCmd::Show => (
            "quota show",
            vault(ctx)
                .and_then(|v| v.quota())
                .map(|q| Reply::new(&q, render_quota(&q))),
        ),
        QuotaCmd::Set(a) => ("quota set", quota_set(ctx, a)),
    }
}

fn quota_set(ctx: &Ctx, a: QuotaSetArgs) -> Result<Reply> {
    let change = quota::QuotaChange {
        max_size_mb: a.max_size_mb.as_deref(),
        max_files: a.max_files.as_deref(),
        max_file_size_mb: a.max_file_size_mb.as_deref(),
    };
    let vault = vault(ctx)?;
    let q = quota::set(&vault, &change)?;
    Ok(Reply::new(&q, render_quota(&q)))
}

pub fn cmd_audit(ctx: &Ctx, a: AuditArgs) -> Result<Reply> {
    let records: Vec<AuditRecord> = ctx.service.audit(
        ctx.workspace.as_deref(),
        a.limit,
        a.since.as_deref(),
        a.detail,
    )?;
    let mut rows = vec![vec![
        "ID".into(),
        "WHEN".into(),
        "ACTOR".into(),
        "FORK".into(),
        "OPERATION".into(),
        "RESULT".into(),
        "PATHS".into(),
    ]];
    for r in &records {
        rows.push(vec![
            r.id.to_string(),
            time(r.at),
            format!("{}/{}", r.actor, r.source),
            r.workspace.clone(),
            r.operation.clone(),
            r.result.clone(),
            one_line(&r.paths.join(" "), 100),
        ]);
    }
    Ok(Reply::new(&records, table(&rows)))
}

pub fn cmd_stats(ctx: &Ctx) -> Result<Reply> {
    let s: StatsReport = vault(ctx)?.stats()?;
    let human = table(&[
        vec!["engine".into(), s.engine.name().into()],
        vec!["disk".into(), size(s.disk_bytes)],
        vec![
            "objects".into(),
            format!("{} ({})", s.objects, size(s.stored_bytes)),
        ],
        vec!["forks".into(), s.workspaces.to_string()],
        vec!["checkpoints".into(), s.checkpoints.to_string()],
        vec![
            "live files".into(),
            format!("{} ({})", s.live_files, size(s.logical_bytes)),
        ],
        vec!["dedup ratio".into(), format!("{:.2}", s.dedup_ratio)],
    ]);
    Ok(Reply::new(&s, human))
}

pub fn cmd_gc(ctx: &Ctx, a: GcArgs) -> Result<Reply> {
    let r: GcReport = vault(ctx)?.gc(a.dry_run)?;
    let human = format!(
        "{} {} of {} objects ({})",
        if a.dry_run { "would remove" } else { "removed" },
        r.objects_removed,
        r.objects_before,
        size(r.bytes_removed)
    );
    Ok(Reply::new(&r, human))
}

pub fn cmd_compact(ctx: &Ctx) -> Result<Reply> {
    let out = maintenance::compact(vault(ctx)?.as_ref())?;
    let human = format!("reclaimed {}", size(out.bytes_reclaimed));
    Ok(Reply::new(&out, human))
}

pub fn cmd_schema() -> Reply {
    let schema = agentvfs::schema::document();
    let human = serde_json::to_string_pretty(&schema).unwrap_or_default();
    Reply::new(&schema, human)
}
