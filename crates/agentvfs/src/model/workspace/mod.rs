//! A workspace (the vault's main line or a fork) and every change to it. All changes go
//! through `Edit`, inside one store transaction that also checks quotas and appends the
//! audit record, so the CLI, the mount and the proxy share one set of rules.
//!
//! Here: the workspace and its reads, audit and log. `edit` holds the transaction,
//! `edit_tree` the tree changes it makes, `links` its hard links, `unlogged` the changes
//! a batch writer has yet to log, `checkpoints` named states, `fork` opening and forking
//! workspaces of a vault, `actor` who acts.

mod actor;
mod checkpoints;
mod edit;
mod edit_tree;
mod fork;
mod lease;
mod links;
mod origin;
mod unlogged;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

pub use actor::Actor;
pub(crate) use edit::{AuditSummary, Logging};
pub use edit::{Edit, WriteOptions};
pub use lease::{Holder, Lease, MAX_TTL as MAX_LEASE, Renewal, host_id};
use serde::Serialize;
pub use unlogged::BatchEnd;
pub(crate) use unlogged::marker_problem;

use super::id::ObjectId;
use super::node::{Node, NodeKind};
use super::now_ns;
use super::path::VPath;
use super::quota::Quota;
use super::vault::Vault;
use super::view::View;
use crate::error::{Error, Result};
use crate::store::{AuditRecord, OpRecord, ReadAhead, StoreRead, StoreWrite, WorkspaceRecord};

/// An open workspace of a vault.
#[derive(Clone)]
pub struct Workspace {
    pub(crate) vault: Arc<Vault>,
    name: String,
    actor: Actor,
    /// Audit the edits of this handle as steps of a larger operation (a proxied command's
    /// checkpoint and ingest, its mount's file operations), which records its own summary.
    steps: bool,
    /// The workspace row and quota as this handle's (or a clone's) last edit left them,
    /// with the batch tag of that write (see `Store::batch_tag`): a busy mount's next edit,
    /// or a read in between, takes them from here instead of querying them again.
    batch_state: Arc<Mutex<Option<BatchState>>>,
    /// The write lease this handle (or a clone) took, if any (`lease`).
    lease: Arc<lease::Hold>,
    /// The workspace's id as last read (0: not yet), so an edit can name the records it
    /// will read ahead (`Store::write_ahead`). Only a hint: an id gone stale costs a read.
    known_id: Arc<AtomicI64>,
    /// The newest operation this handle's changes are conditional on (`expect_head`).
    expected_head: Arc<Mutex<Option<i64>>>,
}

/// Records an edit will read beyond its workspace's own, named ahead of it.
pub(crate) enum Ahead<'a> {
    /// A workspace by name (a fork about to be made).
    Workspace(&'a str),
    /// A checkpoint of this workspace by name.
    Checkpoint(&'a str),
}

struct BatchState {
    tag: (u64, u64),
    ws: WorkspaceRecord,
    quota: Quota,
}

/// One version of a path across checkpoints (`avfs log`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PathVersion {
    /// The checkpoint where this version first appears, or `null` for the live state.
    pub checkpoint: Option<String>,
    /// Checkpoint time (ns since the epoch), or now for the live state.
    pub at: i64,
    /// `file`, `dir`, `symlink`, `fifo`, or `deleted`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub mtime: i64,
    pub content_id: Option<String>,
}

pub(crate) fn validate_name(name: &str, what: &str) -> Result<()> {
    let bad = |reason: &str| Error::InvalidName {
        name: name.to_string(),
        reason: format!("{what} names {reason}"),
    };
    if name.is_empty() || name.len() > 100 {
        return Err(bad("must be 1 to 100 characters"));
    }
    if name.starts_with(['-', '.']) {
        return Err(bad("must not start with `-` or `.`"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad("may contain only letters, digits, `-`, `_` and `.`"));
    }
    Ok(())
}

/// An edit's closure that runs once.
type Once<'f, R> = Box<dyn FnOnce(&mut Edit<'_>) -> Result<R> + 'f>;

/// An edit's closure: one that runs once, or one that may run again (`edit_ahead`).
pub(crate) enum Run<'f, R> {
    Once(Option<Once<'f, R>>),
    Repeatable(&'f mut dyn FnMut(&mut Edit<'_>) -> Result<R>),
}

impl<'f, R> Run<'f, R> {
    fn once(f: impl FnOnce(&mut Edit<'_>) -> Result<R> + 'f) -> Self {
        Run::Once(Some(Box::new(f)))
    }

    fn run(&mut self, e: &mut Edit<'_>) -> Result<R> {
        match self {
            Run::Once(f) => (f.take().ok_or_else(|| {
                Error::Storage("an edit that runs once was asked to run again".into())
            })?)(e),
            Run::Repeatable(f) => f(e),
        }
    }
}

impl Workspace {
    pub(crate) fn new(vault: Arc<Vault>, name: String, actor: Actor) -> Self {
        Workspace {
            vault,
            name,
            actor,
            steps: false,
            batch_state: Arc::default(),
            lease: Arc::default(),
            known_id: Arc::default(),
            expected_head: Arc::default(),
        }
    }

    /// Make this handle's changes (and its clones') conditional, as a compare-and-swap on
    /// the workspace's history: each applies only while the workspace's newest operation
    /// is `head` (0: it has none yet; `avfs op log --limit 1` shows it), else it fails with
    /// `head_moved` and changes nothing. Each change applied moves the expectation on to
    /// its own operation, so a command's later changes hold only if nothing else changed
    /// the workspace in between. The check and the change are one transaction.
    pub fn expect_head(&self, head: i64) {
        *self.expected_head.lock().unwrap_or_else(|p| p.into_inner()) = Some(head);
    }

    fn expected_head(&self) -> Option<i64> {
        *self.expected_head.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember the workspace's id, as just read.
    pub(crate) fn note_id(&self, id: i64) {
        self.known_id.store(id, Ordering::Relaxed);
    }

    /// What an edit of this workspace reads before it knows what it changes: its record
    /// (by name and by id), its overlay, the quota, its pending-changes marker and its
    /// lease; and `extra`.
    fn read_ahead(&self, extra: &[Ahead<'_>]) -> ReadAhead {
        let id = self.known_id.load(Ordering::Relaxed);
        let mut ahead = ReadAhead {
            workspaces: vec![self.name.clone()],
            settings: vec![lease::key(&self.name)],
            setting_prefixes: vec![crate::model::quota::PREFIX.to_string()],
            ..ReadAhead::default()
        };
        if id > 0 {
            ahead.workspace_ids.push(id);
            ahead.overlays.push(id);
            ahead.settings.push(unlogged::key(id));
        }
        for e in extra {
            match e {
                Ahead::Workspace(name) => ahead.workspaces.push(name.to_string()),
                Ahead::Checkpoint(name) if id > 0 => ahead.checkpoints.push((id, name.to_string())),
                Ahead::Checkpoint(_) => {}
            }
        }
        ahead
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn vault(&self) -> &Arc<Vault> {
        &self.vault
    }

    /// Who acts through this handle, as the audit log names them.
    pub fn actor_name(&self) -> &str {
        &self.actor.actor
    }

    /// This workspace, with the audit records of its edits marked as steps of one larger
    /// operation that records its own summary ([`Workspace::record_audit`]).
    pub fn as_steps(&self) -> Workspace {
        Workspace {
            steps: true,
            ..self.clone()
        }
    }

    pub(crate) fn record(&self, r: &dyn StoreRead) -> Result<WorkspaceRecord> {
        if let Some((ws, _)) = self.batch_state_at(self.vault.store.batch_tag()) {
            return Ok(ws);
        }
        let rec = r
            .workspace(&self.name)?
            .ok_or_else(|| Error::ForkNotFound {
                name: self.name.clone(),
            })?;
        self.note_id(rec.id);
        Ok(rec)
    }

    /// The row and quota saved by the write tagged `tag`, if that was this handle's last
    /// edit; `None` outside a batch.
    fn batch_state_at(&self, tag: Option<(u64, u64)>) -> Option<(WorkspaceRecord, Quota)> {
        let tag = tag?;
        let state = self.batch_state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .as_ref()
            .filter(|s| s.tag == tag)
            .map(|s| (s.ws.clone(), s.quota.clone()))
    }

    fn save_batch_state(&self, state: Option<BatchState>) {
        *self.batch_state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Read the live state in one consistent snapshot.
    pub fn read<R>(&self, f: impl FnOnce(&View<'_>) -> Result<R>) -> Result<R> {
        let cache = &self.vault.cache;
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            f(&View {
                r,
                cache,
                overlay: Some(ws.id),
                base: ws.base,
            })
        })
    }

    /// Copy the content of file `node` from `offset` into `buf`; returns how many bytes
    /// (short only at the end of the file). Content is addressed by id, so this reads no
    /// workspace state: the same for the live state and for any checkpoint.
    pub fn read_content(&self, node: &Node, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let cache = &self.vault.cache;
        self.vault
            .store
            .read(|r| super::view::read_content(r, cache, node, offset, buf))
    }

    /// Read the state at a checkpoint (or the live state when `at` is `None`).
    pub fn read_at<R>(
        &self,
        at: Option<&str>,
        f: impl FnOnce(&View<'_>) -> Result<R>,
    ) -> Result<R> {
        let Some(name) = at else {
            return self.read(f);
        };
        let cache = &self.vault.cache;
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            let Some(cp) = r.checkpoint(ws.id, name)? else {
                // Not found, or pruned by retention (the error says which).
                return Err(crate::model::retention::missing(r, ws.id, name));
            };
            f(&View {
                r,
                cache,
                overlay: None,
                base: cp.root,
            })
        })
    }

    /// Read the state at tree `root` (an immutable root of this vault, such as the one a
    /// command started from).
    pub fn read_root<R>(
        &self,
        root: ObjectId,
        f: impl FnOnce(&View<'_>) -> Result<R>,
    ) -> Result<R> {
        let cache = &self.vault.cache;
        self.vault.store.read(|r| {
            f(&View {
                r,
                cache,
                overlay: None,
                base: root,
            })
        })
    }

    /// Apply a change in one transaction: check quotas, record an operation in the op log
    /// (state before and after, so it can be undone) and an audit record. Afterwards the
    /// workspace's base is the new state and its overlay is empty, so the next change pays
    /// only for itself. On failure nothing is written except an audit record of the failure.
    pub fn edit<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        f: impl FnOnce(&mut Edit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.edit_inner(operation, paths, Logging::Op, f)
    }

    /// `edit`, naming records `f` will read beyond the workspace's own, so an engine on a
    /// network fetches them with the rest before `f` runs. `f` may run more than once, each
    /// time against the vault as it then is, and only its last run is applied: an engine on
    /// a network first tries the edit in one exchange on what it knew
    /// (`ReadAhead::repeatable`).
    pub(crate) fn edit_ahead<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        extra: &[Ahead<'_>],
        mut f: impl FnMut(&mut Edit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.edit_recording(
            operation,
            paths,
            Logging::Op,
            extra,
            Run::Repeatable(&mut f),
        )
        .map(|(out, _)| out)
    }

    /// Apply a change without an op-log entry and without folding the overlay: for batches
    /// that belong to a larger operation (import batches, a mount's buffered writes), which
    /// record one entry when they finish.
    pub fn edit_batch<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        f: impl FnOnce(&mut Edit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.edit_inner(operation, paths, Logging::AuditOnly, f)
    }

    /// The root of the live state, folding pending overlay entries into objects (the
    /// overlay itself is left alone). Cost: O(pending changes).
    pub fn snapshot_root(&self) -> Result<ObjectId> {
        self.edit_inner("snapshot", &[], Logging::None, |e| e.fold())
    }

    /// Fold pending overlay entries into the base without recording anything: the
    /// observable state is unchanged, but later lookups read immutable (cached) trees
    /// instead of overlay rows. For long sessions with many unlogged changes (a mount).
    pub fn fold_pending(&self) -> Result<()> {
        self.edit_inner("fold", &[], Logging::None, |e| {
            let root = e.fold()?;
            if root != e.ws.base {
                e.w.overlay_clear(e.ws.id)?;
                e.ws.base = root;
            }
            Ok(())
        })
    }

    /// Like `edit`, and also return the op-log entry the change recorded: its id and the
    /// roots before and after it, which name exactly this change even when others land
    /// around it.
    pub fn edit_logged<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        f: impl FnOnce(&mut Edit<'_>) -> Result<R>,
    ) -> Result<(R, LoggedOp)> {
        let (out, op) = self.edit_recording(operation, paths, Logging::Op, &[], Run::once(f))?;
        Ok((out, op.expect("a logged edit appends an op-log entry")))
    }

    pub(crate) fn edit_inner<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        logging: Logging,
        f: impl FnOnce(&mut Edit<'_>) -> Result<R>,
    ) -> Result<R> {
        self.edit_recording(operation, paths, logging, &[], Run::once(f))
            .map(|(out, _)| out)
    }

    fn edit_recording<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        logging: Logging,
        extra: &[Ahead<'_>],
        mut f: Run<'_, R>,
    ) -> Result<(R, Option<LoggedOp>)> {
        let paths: Vec<String> = paths.iter().map(|p| p.display()).collect();
        let cache = &self.vault.cache;
        let mut ahead = self.read_ahead(extra);
        ahead.repeatable = matches!(f, Run::Repeatable(_));
        let mut lease_lost = false;
        // The newest op-log entry the applied run appended (only the last run counts).
        let mut newest_op = None;
        let result = self.vault.store.write_mut(&ahead, |w| {
            // In a batch, the previous write's state is current if that write was this
            // handle's edit (no other write came between).
            let tag = self.vault.store.batch_tag();
            let before = tag.map(|(batch, n)| (batch, n - 1));
            let (ws, quota) = match self.batch_state_at(before) {
                Some(state) => state,
                None => (self.record(w)?, Quota::load(w)?),
            };
            let now = now_ns();
            let mut edit = Edit {
                w,
                cache,
                ws,
                quota,
                now,
                description: None,
                undo_target: None,
                op_extra: None,
                summaries: Vec::new(),
                newest_op: None,
            };
            let (before, batch_open) = match logging {
                Logging::Op => {
                    // Rebase on the folded state at once (nothing observable changes), so
                    // folds inside `f` and after it pay only for what `f` changes.
                    let root = edit.fold()?;
                    if root != edit.ws.base {
                        edit.w.overlay_clear(edit.ws.id)?;
                        edit.ws.base = root;
                    }
                    // A batch writer's pending changes are history of their own, before
                    // this change and before anything `f` reads from the op log.
                    (Some(root), edit.settle_unlogged(root)?)
                }
                _ => (None, false),
            };
            // A conditional change: the history must be where the caller saw it, with
            // any pending batch of changes settled into it above (a change all the same).
            if let Some(expected) = self.expected_head()
                && !matches!(logging, Logging::None)
            {
                let head = edit.w.ops(Some(edit.ws.id), 1)?.first().map_or(0, |o| o.id);
                if head != expected {
                    return Err(Error::HeadMoved {
                        workspace: self.name.clone(),
                        expected,
                        head,
                    });
                }
            }
            let out = f.run(&mut edit)?;
            // While another host's long-lived writer holds the fork, a change to its files
            // from here is refused (and rolled back with this transaction). Reads, forks
            // and checkpoints are not changes to its files.
            // Whether this run found the handle's lease lost: only the last run counts.
            lease_lost = false;
            let mut check_lease = |w: &mut dyn StoreWrite| {
                lease::check_write(
                    w,
                    &self.name,
                    &lease::host_id(),
                    &self.lease,
                    &mut lease_lost,
                )
            };
            if matches!(logging, Logging::AuditOnly) {
                check_lease(&mut *edit.w)?;
            }
            let mut op_id = None;
            if let Some(before) = before {
                let after = edit.fold()?;
                if after != before {
                    check_lease(&mut *edit.w)?;
                }
                edit.w.overlay_clear(edit.ws.id)?;
                edit.ws.base = after;
                let description = edit.description.take().unwrap_or_else(|| paths.join(" "));
                let id = edit.w.append_op(&OpRecord {
                    id: 0,
                    workspace: edit.ws.id,
                    at: edit.now,
                    kind: operation.to_string(),
                    description,
                    root_before: Some(before),
                    root_after: Some(after),
                    target: edit.undo_target,
                    extra: edit.op_extra.take(),
                })?;
                op_id = Some(LoggedOp { id, before, after });
                edit.newest_op = Some(id);
                if batch_open {
                    edit.advance_unlogged(after)?;
                }
            }
            edit.flush_totals()?;
            let Edit {
                w,
                ws,
                quota,
                summaries,
                newest_op: newest,
                ..
            } = edit;
            newest_op = newest;
            for s in summaries {
                self.audit_as(w, &s.operation, &s.paths, "ok", Some(s.detail), self.steps)?;
            }
            if !matches!(logging, Logging::None) {
                let step = self.steps || matches!(logging, Logging::AuditOnly);
                self.audit_as(w, operation, &paths, "ok", None, step)?;
            }
            self.save_batch_state(tag.map(|tag| BatchState { tag, ws, quota }));
            Ok((out, op_id))
        });
        // The history may have moved by what a long-lived writer (a mount) wrote and had
        // not recorded: the transaction recorded it, and was rolled back with it.
        let result =
            if matches!(logging, Logging::Op) && matches!(result, Err(Error::HeadMoved { .. })) {
                self.record_unrecorded_after(result)
            } else {
                result
            };
        if result.is_err() {
            self.save_batch_state(None);
            if lease_lost {
                self.lease.mark_lost();
            }
        }
        // A conditional handle's own changes are not someone else's: its expectation moves
        // on to the newest entry it appended (a batch's too).
        if result.is_ok()
            && let Some(id) = newest_op
            && let Some(expected) = self
                .expected_head
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
        {
            *expected = id;
        }
        // Best effort: the failure itself is worth recording, but must not mask `e`, nor
        // wait on a server that just did not answer (that would double the wait).
        if let Err(e) = &result
            && !matches!(e, Error::StoreUnavailable { .. })
        {
            let _ = self.vault.store.write(|w| {
                let step = self.steps || matches!(logging, Logging::AuditOnly);
                self.audit_as(w, operation, &paths, e.kind(), Some(e.to_string()), step)
                    .map(|_| ())
            });
        }
        result
    }

    /// Parse a path for a change, recording a refused attempt (e.g. `../escape`) in the
    /// audit log like any other failed change.
    pub fn parse_path(&self, operation: &str, raw: &str) -> Result<VPath> {
        self.resolve_path(raw).inspect_err(|e| {
            let _ = self.record_audit(operation, &[raw.to_string()], e.kind(), Some(e.to_string()));
        })
    }

    /// Parse a path as the kernel resolves one: what a `..` steps out of, or a trailing
    /// `/` follows, must be a directory (or a symlink, followed at use), else
    /// `not_a_directory` (`ls f/..` on a file fails as it does on a host).
    pub fn resolve_path(&self, raw: &str) -> Result<VPath> {
        let (path, dirs) = VPath::parse_with_dirs(raw)?;
        if !dirs.is_empty() {
            self.read(|v| {
                for d in &dirs {
                    let node = v.get(d)?;
                    if !node.is_dir() && !matches!(node.kind, NodeKind::Symlink { .. }) {
                        return Err(Error::NotADirectory { path: d.display() });
                    }
                }
                Ok(())
            })?;
        }
        Ok(path)
    }

    /// Append an audit record outside any change (a proxied command's summary, a denied
    /// command) and return its id. It is never a step.
    pub fn record_audit(
        &self,
        operation: &str,
        paths: &[String],
        result: &str,
        detail: Option<String>,
    ) -> Result<i64> {
        self.vault
            .store
            .write(|w| self.audit_as(w, operation, paths, result, detail.clone(), false))
    }

    fn audit_as(
        &self,
        w: &mut dyn StoreWrite,
        operation: &str,
        paths: &[String],
        result: &str,
        detail: Option<String>,
        step: bool,
    ) -> Result<i64> {
        w.append_audit(&AuditRecord {
            id: 0,
            at: now_ns(),
            actor: self.actor.actor.clone(),
            source: self.actor.source.clone(),
            workspace: self.name.clone(),
            operation: operation.to_string(),
            paths: paths.to_vec(),
            result: result.to_string(),
            detail,
            step,
        })
    }

    /// (regular files, bytes) of the live tree, kept in step with every change: O(1).
    pub fn totals(&self) -> Result<(u64, u64)> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            Ok((ws.files, ws.bytes))
        })
    }

    /// The versions of `path` across this workspace's checkpoints and the live state.
    /// Consecutive identical versions collapse into one.
    pub fn log(&self, path: &VPath) -> Result<Vec<PathVersion>> {
        let cache = &self.vault.cache;
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            let mut states: Vec<(Option<String>, i64, View<'_>)> = r
                .checkpoints(ws.id)?
                .into_iter()
                .map(|cp| {
                    let view = View {
                        r,
                        cache,
                        overlay: None,
                        base: cp.root,
                    };
                    (Some(cp.name), cp.created_at, view)
                })
                .collect();
            states.push((
                None,
                now_ns(),
                View {
                    r,
                    cache,
                    overlay: Some(ws.id),
                    base: ws.base,
                },
            ));
            let mut out: Vec<PathVersion> = Vec::new();
            let mut seen_any = false;
            for (checkpoint, at, view) in states {
                let node = view.find(path)?;
                let v = match &node {
                    Some(n) => PathVersion {
                        checkpoint,
                        at,
                        kind: n.type_name().to_string(),
                        size: n.size(),
                        mode: n.attrs.mode,
                        mtime: n.attrs.mtime,
                        content_id: n.content_id().map(|i| i.to_hex()),
                    },
                    None => PathVersion {
                        checkpoint,
                        at,
                        kind: "deleted".into(),
                        size: 0,
                        mode: 0,
                        mtime: 0,
                        content_id: None,
                    },
                };
                seen_any |= node.is_some();
                let same = out.last().is_some_and(|p| {
                    p.kind == v.kind
                        && p.content_id == v.content_id
                        && p.mode == v.mode
                        && p.size == v.size
                });
                if !same && (seen_any) {
                    out.push(v);
                }
            }
            if !seen_any {
                return Err(Error::PathNotFound {
                    path: path.display(),
                });
            }
            Ok(out)
        })
    }
}

/// The op-log entry a logged edit recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedOp {
    pub id: i64,
    pub before: ObjectId,
    pub after: ObjectId,
}
