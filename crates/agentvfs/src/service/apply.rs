//! Writing a workspace's changes into a real directory: the diff from a base state to the
//! live state, applied file by file, refusing host files that no longer match the base
//! (someone changed them since the import) unless forced. Everything is checked before
//! anything is written.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::View;
use crate::model::Workspace;
use crate::model::diff::{Change, ChangeStatus, StateRef, diff_views};
use crate::model::ignore::{self, IgnoredCounts};
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;
use crate::service::history::state_ref;
use crate::service::history::{describe, node_at};
use crate::service::transfer::{DEVICE_SKIPPED, make_special};

pub use crate::error::HostConflict;

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ApplyReport {
    pub host: String,
    /// The state the host was expected to hold: the recorded origin (the import, or the
    /// last apply, to this directory) by default.
    pub from: String,
    pub dry_run: bool,
    /// Files, symlinks and directories created or rewritten.
    pub written: Vec<String>,
    pub deleted: Vec<String>,
    /// Paths whose permission bits changed.
    pub mode_changed: Vec<String>,
    /// Paths already in the wanted state on the host.
    pub unchanged: Vec<String>,
    /// Conflicts overridden by --force (empty otherwise: conflicts are an error).
    pub forced: Vec<HostConflict>,
    /// Paths not written, with the reason: device nodes, unless asked for.
    pub skipped: Vec<String>,
    /// Changes the workspace's ignore rules leave out, counted per top-level name (empty
    /// with --include-ignored).
    pub ignored: IgnoredCounts,
    /// Why nothing was (or would be) written, when nothing was.
    pub note: Option<String>,
}

/// How `apply` treats the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Overwrite host paths that changed since the base.
    pub force: bool,
    /// Report what would be written, writing nothing.
    pub dry_run: bool,
    /// Make device nodes on the host. Off by default: a device node in a workspace is
    /// metadata (the mount is `nodev`), and one an agent made must not become a live
    /// device on the host unless a person asks.
    pub devices: bool,
    /// Also write the changes the workspace's ignore rules leave out.
    pub include_ignored: bool,
}

/// Whether host file `host` holds exactly file `node`'s bytes (sizes already equal),
/// compared a piece at a time.
fn same_content(v: &View<'_>, node: &Node, host: &Path) -> Result<bool> {
    use std::io::Read;
    const PIECE: usize = 1 << 20;
    let mut f = fs::File::open(host).map_err(|e| Error::io("reading", host, e))?;
    let (mut ours, mut theirs) = (vec![0u8; PIECE], vec![0u8; PIECE]);
    let mut pos = 0u64;
    while pos < node.size() {
        let n = (node.size() - pos).min(PIECE as u64) as usize;
        v.read_content(node, pos, &mut ours[..n])?;
        f.read_exact(&mut theirs[..n])
            .map_err(|e| Error::io("reading", host, e))?;
        if ours[..n] != theirs[..n] {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// What the host holds at a path, compared with a node.
fn host_matches(v: &View<'_>, host: &Path, node: Option<&Node>) -> Result<bool> {
    let meta = fs::symlink_metadata(host).ok();
    Ok(match (node, meta) {
        (None, None) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(n), Some(m)) => match &n.kind {
            // Views hand out hard-linked names as files; the stored kinds never get here.
            NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => {
                m.is_file()
                    && m.permissions().mode() & 0o7777 == n.attrs.mode
                    && m.len() == n.size()
                    && same_content(v, n, host)?
            }
            NodeKind::Symlink { target } => {
                m.file_type().is_symlink()
                    && fs::read_link(host).ok().as_deref() == Some(Path::new(target))
            }
            NodeKind::Dir { .. } => m.is_dir() && m.permissions().mode() & 0o7777 == n.attrs.mode,
            // A FIFO, device or socket: the same st_mode (type and permission bits) and
            // device number.
            _ => {
                use std::os::unix::fs::MetadataExt;
                m.mode() & 0o177777 == n.st_mode() && m.rdev() == n.rdev()
            }
        },
    })
}

/// [`apply`] the live state from a state named as `diff` names one, for the workspace
/// subtree `prefix`, into `host`. Defaults come from the workspace's origin (see
/// [`Workspace::origin`]): `host` and `prefix` are the directory it was imported from (or
/// last applied to) and where that went in the workspace, and `from` the state that
/// directory was recorded to hold (else `@base`, where this fork started). A real apply of
/// the whole workspace records the host directory as holding the applied state.
pub fn apply_named(
    ws: &Workspace,
    from: Option<&str>,
    prefix: Option<&str>,
    host: Option<&Path>,
    opts: ApplyOptions,
) -> Result<ApplyReport> {
    let origin = ws.origin()?;
    let (host, prefix) = match (host, &origin) {
        (Some(h), _) => (h.to_path_buf(), prefix.unwrap_or("/").to_string()),
        (None, Some(o)) => (
            PathBuf::from(&o.host),
            prefix.unwrap_or(&o.prefix).to_string(),
        ),
        (None, None) => {
            return Err(Error::invalid(
                "no host directory is recorded for this workspace (it was neither imported from one nor applied to one): name the directory to apply to",
            ));
        }
    };
    if !host.is_dir() {
        return Err(Error::invalid(format!(
            "{} is not a directory",
            host.display()
        )));
    }
    let canonical = fs::canonicalize(&host).map_err(|e| Error::io("resolving", &host, e))?;
    let prefix = VPath::parse(&prefix)?;
    let recorded = origin.filter(|o| {
        Path::new(&o.host) == canonical && VPath::parse(&o.prefix).ok().as_ref() == Some(&prefix)
    });
    let from = match (from, &recorded) {
        (Some(s), _) => state_ref(ws, s)?,
        (None, Some(o)) => StateRef::Root(o.root_id()?),
        (None, None) => StateRef::ForkBase(ws.name().to_string()),
    };
    let label = match (&from, &recorded) {
        (StateRef::Root(_), Some(o)) => {
            format!("{} of {} by {}", o.recorded_by, o.host, o.workspace)
        }
        _ => describe(&from),
    };
    let now = ws.snapshot_root()?;
    let report = apply(
        ws,
        (&from, &label),
        &StateRef::Root(now),
        &prefix,
        &host,
        opts,
    )?;
    if !opts.dry_run && (prefix.is_root() || recorded.is_some()) {
        ws.set_origin(
            &canonical.to_string_lossy(),
            &prefix.display(),
            now,
            "apply",
        )?;
    }
    Ok(report)
}

/// Apply the changes from `from` (a state and how to name it) to `to`, under workspace path
/// `prefix`, into host directory `host` (workspace `prefix` maps to `host`).
fn apply(
    ws: &Workspace,
    (from, from_label): (&StateRef, &str),
    to: &StateRef,
    prefix: &VPath,
    host: &Path,
    opts: ApplyOptions,
) -> Result<ApplyReport> {
    let ApplyOptions {
        force,
        dry_run,
        devices,
        include_ignored,
    } = opts;
    ws.vault().with_views(from, to, |base, now| {
        let changes: Vec<Change> = diff_views(base, now)?
            .into_iter()
            .filter(|c| VPath::parse(&c.path).is_ok_and(|p| p.starts_with(prefix)))
            .collect();
        let (changes, ignored) = ignore::listed(changes, base, now, include_ignored)?;
        // A repository's own directory never goes to the host, ignored or not: its config
        // runs commands (core.fsmonitor, hooks) in the host's next git command.
        let changes: Vec<Change> = changes
            .into_iter()
            .filter(|c| !in_git_dir(&c.path) && !c.old_path.as_deref().is_some_and(in_git_dir))
            .collect();
        let note = nothing_note(&changes, &ignored, from_label);
        let host_path = |p: &str| -> Result<PathBuf> {
            let vp = VPath::parse(p)?;
            let rel = vp.as_str()[prefix.as_str().len()..].trim_start_matches('/');
            Ok(if rel.is_empty() {
                host.to_path_buf()
            } else {
                host.join(rel)
            })
        };
        let mut report = ApplyReport {
            host: host.display().to_string(),
            from: from_label.to_string(),
            dry_run,
            ignored,
            ..Default::default()
        };
        // Plan: (path, old node, new node) per affected workspace path.
        let mut plan: Vec<(String, Option<Node>, Option<Node>)> = Vec::new();
        for c in &changes {
            if c.status == ChangeStatus::Renamed {
                let old = c.old_path.clone().unwrap_or_default();
                plan.push((old.clone(), node_at(base, &old)?, None));
            }
            plan.push((
                c.path.clone(),
                node_at(base, &c.path)?,
                node_at(now, &c.path)?,
            ));
        }
        let mut conflicts = Vec::new();
        for (path, old, new) in &plan {
            let hp = host_path(path)?;
            // A directory's children are checked on their own; only its existence matters.
            // A real directory: a symlink to one is not the directory the workspace has.
            let real_dir = fs::symlink_metadata(&hp).is_ok_and(|m| m.is_dir());
            let dir_ok = |n: &Option<Node>| n.as_ref().is_some_and(Node::is_dir) && real_dir;
            if host_matches(now, &hp, new.as_ref())? || (dir_ok(old) && dir_ok(new)) {
                continue;
            }
            let ok = host_matches(base, &hp, old.as_ref())?
                || (dir_ok(old) && new.as_ref().is_some_and(Node::is_dir));
            if !ok {
                conflicts.push(HostConflict {
                    path: path.clone(),
                    reason: if old.is_none() {
                        "exists on the host but not in the base".into()
                    } else {
                        "differs on the host from the base version".into()
                    },
                });
            }
        }
        // Nothing is written through a symlink on the host: a path whose directories on
        // the host include one is refused, forced or not.
        let mut through = Vec::new();
        for (path, _, _) in &plan {
            if let Some(link) = host_symlink_above(host, &host_path(path)?) {
                through.push(HostConflict {
                    path: path.clone(),
                    reason: format!(
                        "{} is a symlink on the host; avfs writes nothing through it",
                        link.display()
                    ),
                });
            }
        }
        if !through.is_empty() {
            return Err(Error::ApplyConflict { conflicts: through });
        }
        if !conflicts.is_empty() && !force {
            return Err(Error::ApplyConflict { conflicts });
        }
        report.forced = conflicts;
        // Deletions deepest first, then creations and updates shallowest first.
        let mut deletions: Vec<&(String, Option<Node>, Option<Node>)> =
            plan.iter().filter(|(_, _, n)| n.is_none()).collect();
        deletions.sort_by(|a, b| b.0.cmp(&a.0));
        for (path, _, _) in deletions {
            let hp = host_path(path)?;
            if fs::symlink_metadata(&hp).is_err() {
                report.unchanged.push(path.clone());
                continue;
            }
            if !dry_run {
                let r = if hp.is_dir() && !hp.is_symlink() {
                    fs::remove_dir_all(&hp)
                } else {
                    fs::remove_file(&hp)
                };
                r.map_err(|e| Error::io("deleting", &hp, e))?;
            }
            report.deleted.push(path.clone());
        }
        let mut writes: Vec<&(String, Option<Node>, Option<Node>)> =
            plan.iter().filter(|(_, _, n)| n.is_some()).collect();
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, old, new) in writes {
            let Some(new) = new else { continue };
            let hp = host_path(path)?;
            if new.kind.is_device() && !devices {
                report.skipped.push(format!("{path}: {DEVICE_SKIPPED}"));
                continue;
            }
            if host_matches(now, &hp, Some(new))? {
                report.unchanged.push(path.clone());
                continue;
            }
            let content_same =
                old.as_ref().is_some_and(|o| o.kind_eq(new)) && fs::symlink_metadata(&hp).is_ok();
            if content_same || (new.is_dir() && fs::symlink_metadata(&hp).is_ok_and(|m| m.is_dir()))
            {
                // A symlink has no mode of its own; chmod would change its target.
                if hp.is_symlink() {
                    report.unchanged.push(path.clone());
                    continue;
                }
                if !dry_run {
                    fs::set_permissions(&hp, fs::Permissions::from_mode(new.attrs.mode))
                        .map_err(|e| Error::io("setting mode of", &hp, e))?;
                }
                report.mode_changed.push(path.clone());
                continue;
            }
            // A rewrite that also changes the permission bits says so too.
            let host_mode = fs::symlink_metadata(&hp)
                .ok()
                .filter(|m| !m.file_type().is_symlink())
                .map(|m| m.permissions().mode() & 0o7777);
            let is_symlink = matches!(new.kind, NodeKind::Symlink { .. });
            if !is_symlink && host_mode.is_some_and(|m| m != new.attrs.mode) {
                report.mode_changed.push(path.clone());
            }
            if !dry_run {
                write_node(now, &hp, new)?;
            }
            report.written.push(path.clone());
        }
        if report.written.is_empty() && report.deleted.is_empty() && report.mode_changed.is_empty()
        {
            report.note = Some(note.unwrap_or_else(|| {
                format!(
                    "the host already holds all {} changed paths",
                    report.unchanged.len() + report.skipped.len()
                )
            }));
        }
        Ok(report)
    })
}

/// Why an apply has nothing to write, when the changes say so before the host is looked at.
fn nothing_note(changes: &[Change], ignored: &IgnoredCounts, from: &str) -> Option<String> {
    if !changes.is_empty() {
        return None;
    }
    let n: u64 = ignored.values().sum();
    Some(if n == 0 {
        format!("nothing changed since {from}")
    } else {
        let names: Vec<String> = ignored.iter().map(|(k, v)| format!("{k} ({v})")).collect();
        format!(
            "all {n} changes since {from} are ignored by the workspace's ignore rules: {}; --include-ignored applies them",
            names.join(", ")
        )
    })
}

/// Whether a workspace path is in (or is) a `.git` directory, in any letter case (a host
/// file system may not tell `.GIT` from `.git`).
fn in_git_dir(path: &str) -> bool {
    path.split('/').any(|c| c.eq_ignore_ascii_case(".git"))
}

/// The first directory between `host` (excluded) and `hp` (excluded) that is a symlink on
/// the host, if any.
fn host_symlink_above(host: &Path, hp: &Path) -> Option<PathBuf> {
    let rel = hp.strip_prefix(host).ok()?;
    let mut at = host.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        if fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

fn write_node(v: &View<'_>, hp: &Path, node: &Node) -> Result<()> {
    if let Ok(m) = fs::symlink_metadata(hp)
        && (!m.is_dir() || !node.is_dir())
    {
        let r = if m.is_dir() {
            fs::remove_dir_all(hp)
        } else {
            fs::remove_file(hp)
        };
        r.map_err(|e| Error::io("replacing", hp, e))?;
    }
    match &node.kind {
        NodeKind::Dir { .. } => fs::create_dir_all(hp).map_err(|e| Error::io("creating", hp, e))?,
        NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => {
            let f = fs::File::create(hp).map_err(|e| Error::io("writing", hp, e))?;
            v.copy_node_to(node, &f, hp)?;
        }
        NodeKind::Symlink { target } => {
            std::os::unix::fs::symlink(target, hp)
                .map_err(|e| Error::io("creating symlink", hp, e))?;
            return Ok(());
        }
        // `make_special` sets the mode itself.
        _ => return make_special(hp, node),
    }
    fs::set_permissions(hp, fs::Permissions::from_mode(node.attrs.mode))
        .map_err(|e| Error::io("setting mode of", hp, e))
}

/// `export` prints a transfer report, or with `--changes` an apply report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ExportOutput {
    Tree(crate::service::transfer::TransferReport),
    Changes(ApplyReport),
}
