//! A workspace (the vault's main line or a fork) and every change to it. All changes go
//! through `Edit`, inside one store transaction that also checks quotas and appends the
//! audit record, so the CLI, the mount and the proxy share one set of rules.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::buffer::{Changes, ContentBuffer};
use super::fold::fold_overlay;
use super::id::ObjectId;
use super::links;
use super::node::{CHUNK_SIZE, Node, NodeKind, encode_content, patch_content};
use super::now_ns;
use super::path::VPath;
use super::quota::Quota;
use super::vault::Vault;
use super::view::{ObjectCache, View};
use crate::error::{Error, Result};
use crate::store::{
    AuditRecord, CheckpointRecord, OpRecord, StoreRead, StoreWrite, WorkspaceRecord,
};

/// Who is acting, for the audit log.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The user or agent (default: `$AVFS_ACTOR`, else `$USER`).
    pub actor: String,
    /// The adapter: `cli`, `mount`, `proxy`, `sdk`.
    pub source: String,
}

impl Actor {
    pub fn from_env(source: &str) -> Actor {
        let actor = std::env::var("AVFS_ACTOR")
            .or_else(|_| std::env::var("USER"))
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| format!("uid:{}", rustix::process::getuid().as_raw()));
        Actor {
            actor,
            source: source.to_string(),
        }
    }
}

/// An open workspace of a vault.
#[derive(Clone)]
pub struct Workspace {
    pub(crate) vault: Arc<Vault>,
    name: String,
    actor: Actor,
    /// The workspace row and quota as this handle's (or a clone's) last edit left them,
    /// with the batch tag of that write (see `Store::batch_tag`): a busy mount's next edit,
    /// or a read in between, takes them from here instead of querying them again.
    batch_state: Arc<Mutex<Option<BatchState>>>,
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

impl Workspace {
    pub(crate) fn new(vault: Arc<Vault>, name: String, actor: Actor) -> Self {
        Workspace {
            vault,
            name,
            actor,
            batch_state: Arc::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn vault(&self) -> &Arc<Vault> {
        &self.vault
    }

    pub(crate) fn record(&self, r: &dyn StoreRead) -> Result<WorkspaceRecord> {
        if let Some((ws, _)) = self.batch_state_at(self.vault.store.batch_tag()) {
            return Ok(ws);
        }
        r.workspace(&self.name)?.ok_or_else(|| Error::ForkNotFound {
            name: self.name.clone(),
        })
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
            let cp = r
                .checkpoint(ws.id, name)?
                .ok_or_else(|| Error::CheckpointNotFound {
                    name: name.to_string(),
                })?;
            f(&View {
                r,
                cache,
                overlay: None,
                base: cp.root,
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

    pub(crate) fn edit_inner<R>(
        &self,
        operation: &str,
        paths: &[&VPath],
        logging: Logging,
        f: impl FnOnce(&mut Edit<'_>) -> Result<R>,
    ) -> Result<R> {
        let paths: Vec<String> = paths.iter().map(|p| p.display()).collect();
        let cache = &self.vault.cache;
        let result = self.vault.store.write(|w| {
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
            let out = f(&mut edit)?;
            if let Some(before) = before {
                let after = edit.fold()?;
                edit.w.overlay_clear(edit.ws.id)?;
                edit.ws.base = after;
                let description = edit.description.take().unwrap_or_else(|| paths.join(" "));
                edit.w.append_op(&OpRecord {
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
                if batch_open {
                    edit.advance_unlogged(after)?;
                }
            }
            edit.flush_totals()?;
            let Edit { w, ws, quota, .. } = edit;
            if !matches!(logging, Logging::None) {
                self.audit(w, operation, &paths, "ok", None)?;
            }
            self.save_batch_state(tag.map(|tag| BatchState { tag, ws, quota }));
            Ok(out)
        });
        if result.is_err() {
            self.save_batch_state(None);
        }
        if let Err(e) = &result {
            // Best effort: the failure itself is worth recording, but must not mask `e`.
            let _ = self.vault.store.write(|w| {
                self.audit(w, operation, &paths, e.kind(), Some(e.to_string()))
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

    /// Append an audit record outside any change (e.g. a denied command) and return its id.
    pub fn record_audit(
        &self,
        operation: &str,
        paths: &[String],
        result: &str,
        detail: Option<String>,
    ) -> Result<i64> {
        self.vault
            .store
            .write(|w| self.audit(w, operation, paths, result, detail.clone()))
    }

    fn audit(
        &self,
        w: &mut dyn StoreWrite,
        operation: &str,
        paths: &[String],
        result: &str,
        detail: Option<String>,
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
        })
    }

    /// Save a checkpoint of the live state: fold the overlay into immutable objects (cost in
    /// proportion to the changes since the last checkpoint) and start an empty overlay.
    pub fn checkpoint_save(
        &self,
        name: Option<&str>,
        message: Option<&str>,
    ) -> Result<CheckpointRecord> {
        if let Some(n) = name {
            validate_name(n, "checkpoint")?;
        }
        self.edit("checkpoint.save", &[], |e| {
            let name = match name {
                Some(n) => {
                    if e.w.checkpoint(e.ws.id, n)?.is_some() {
                        return Err(Error::AlreadyExists {
                            name: n.to_string(),
                        });
                    }
                    n.to_string()
                }
                None => e.next_checkpoint_name()?,
            };
            let root = e.fold()?;
            let mut rec = CheckpointRecord {
                id: 0,
                workspace: e.ws.id,
                name,
                root,
                message: message.map(str::to_string),
                created_at: e.now,
                files: e.ws.files,
                bytes: e.ws.bytes,
            };
            rec.id = e.w.insert_checkpoint(&rec)?;
            e.describe(format!("save {}", rec.name));
            Ok(rec)
        })
    }

    /// Point the workspace at a checkpoint and drop the overlay, atomically.
    pub fn checkpoint_restore(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit("checkpoint.restore", &[], |e| {
            let cp =
                e.w.checkpoint(e.ws.id, name)?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        name: name.to_string(),
                    })?;
            e.reset_to(cp.root, cp.files, cp.bytes)?;
            e.describe(format!("restore {}", cp.name));
            Ok(cp)
        })
    }

    pub fn checkpoint_delete(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit("checkpoint.delete", &[], |e| {
            let cp =
                e.w.checkpoint(e.ws.id, name)?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        name: name.to_string(),
                    })?;
            e.w.delete_checkpoint(cp.id)?;
            Ok(cp)
        })
    }

    pub fn checkpoints(&self) -> Result<Vec<CheckpointRecord>> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            r.checkpoints(ws.id)
        })
    }

    pub fn checkpoint(&self, name: &str) -> Result<CheckpointRecord> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            r.checkpoint(ws.id, name)?
                .ok_or_else(|| Error::CheckpointNotFound {
                    name: name.to_string(),
                })
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

/// How a change is recorded.
pub(crate) enum Logging {
    /// An op-log entry from the state at the start (after settling a pending batch).
    Op,
    /// Audit record only (a batch of a larger operation).
    AuditOnly,
    /// Nothing (internal bookkeeping such as taking a snapshot root).
    None,
}

/// Options for writing a whole file.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Permission bits for a new file (default 0644). Existing files keep theirs.
    pub mode: Option<u32>,
    /// Create missing parent directories.
    pub parents: bool,
    /// Add to the end of an existing file instead of replacing its content.
    pub append: bool,
}

/// A change in progress, inside one write transaction.
pub struct Edit<'a> {
    pub(crate) w: &'a mut dyn StoreWrite,
    pub(crate) cache: &'a ObjectCache,
    pub(crate) ws: WorkspaceRecord,
    pub(crate) quota: Quota,
    pub(crate) now: i64,
    /// Overrides the op-log description (default: the paths).
    pub(crate) description: Option<String>,
    /// For undo/redo entries: the op they act on.
    pub(crate) undo_target: Option<i64>,
    /// Side effects to record with the op (see `OpRecord::extra`).
    pub(crate) op_extra: Option<String>,
}

impl<'a> Edit<'a> {
    /// A view of the state as changed so far in this transaction.
    pub fn view(&self) -> View<'_> {
        View {
            r: &*self.w,
            cache: self.cache,
            overlay: Some(self.ws.id),
            base: self.ws.base,
        }
    }

    pub fn now(&self) -> i64 {
        self.now
    }

    /// Make the change at `now` instead: a caller that was handed the moment of the change
    /// (a mount, by the kernel) stamps every time it sets with it.
    pub fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    fn flush_totals(&mut self) -> Result<()> {
        self.w
            .update_workspace_state(self.ws.id, &self.ws.base, self.ws.files, self.ws.bytes)
    }

    /// Describe this change in the op log (default: the paths it names).
    pub fn describe(&mut self, description: String) {
        self.description = Some(description);
    }

    /// Make the live state exactly `root` (with its totals), dropping pending changes.
    pub(crate) fn reset_to(&mut self, root: ObjectId, files: u64, bytes: u64) -> Result<()> {
        self.w.overlay_clear(self.ws.id)?;
        self.ws.base = root;
        self.ws.files = files;
        self.ws.bytes = bytes;
        Ok(())
    }

    fn next_checkpoint_name(&self) -> Result<String> {
        let n = self.w.checkpoints(self.ws.id)?.len() + 1;
        (n..)
            .map(|i| format!("cp-{i}"))
            .find_map(|name| match self.w.checkpoint(self.ws.id, &name) {
                Ok(None) => Some(Ok(name)),
                Ok(Some(_)) => None,
                Err(e) => Some(Err(e)),
            })
            .unwrap_or_else(|| Err(Error::Storage("no free checkpoint name".into())))
    }

    /// Apply a change of the workspace totals, checking quotas before anything is written.
    pub(super) fn account(&mut self, files: i64, bytes: i64) -> Result<()> {
        let nf = (self.ws.files as i64 + files).max(0) as u64;
        let nb = (self.ws.bytes as i64 + bytes).max(0) as u64;
        if files > 0 || bytes > 0 {
            self.quota.check_totals(
                if files > 0 { nf } else { 0 },
                if bytes > 0 { nb } else { 0 },
            )?;
        }
        self.ws.files = nf;
        self.ws.bytes = nb;
        Ok(())
    }

    pub(super) fn put_raw(&mut self, path: &VPath, node: Option<&Node>) -> Result<()> {
        let parent = path.parent().unwrap_or_default();
        let bytes = match node {
            Some(n) => Some(postcard::to_stdvec(n).map_err(|e| Error::Storage(e.to_string()))?),
            None => None,
        };
        self.w
            .overlay_put(self.ws.id, path.as_str(), parent.as_str(), bytes.as_deref())
    }

    /// Make `dir` and its ancestors overlay entries (copied from the base where needed)
    /// and return the directory's node.
    pub(super) fn ensure_dir(&mut self, dir: &VPath) -> Result<Node> {
        // Already overlaid: so are its ancestors (rows are only written below overlaid
        // directories), and there is nothing to copy.
        if let Some(Some(node)) = self.view().overlay_node(dir)?
            && node.is_dir()
        {
            debug_assert!(
                dir.ancestors().iter().all(
                    |a| matches!(self.view().overlay_node(a), Ok(Some(Some(n))) if n.is_dir())
                ),
                "an overlaid directory below a non-overlaid one: {dir:?}"
            );
            return Ok(node);
        }
        let mut chain = dir.ancestors();
        chain.push(dir.clone());
        let mut parent: Option<Node> = None;
        let mut in_overlay = true;
        for p in chain {
            let node = if in_overlay {
                match self.view().overlay_node(&p)? {
                    Some(Some(n)) => Some(n),
                    Some(None) => None,
                    None => {
                        in_overlay = false;
                        self.derive(&p, parent.as_ref())?
                    }
                }
            } else {
                self.derive(&p, parent.as_ref())?
            };
            let node = node.ok_or_else(|| Error::PathNotFound { path: p.display() })?;
            if !node.is_dir() {
                return Err(Error::NotADirectory { path: p.display() });
            }
            if !in_overlay {
                self.put_raw(&p, Some(&node))?;
            }
            parent = Some(node);
        }
        parent.ok_or_else(|| Error::Storage("empty ancestor chain".into()))
    }

    /// The base node of `p` given its parent's node.
    fn derive(&self, p: &VPath, parent: Option<&Node>) -> Result<Option<Node>> {
        let Some(parent) = parent else {
            return Ok(Some(self.view().root()?.0));
        };
        match &parent.kind {
            NodeKind::Dir { tree: Some(t), .. } => Ok(self.view().tree(t)?.get(p.name()).cloned()),
            _ => Ok(None),
        }
    }

    /// Mark a directory's contents as changed now.
    pub(super) fn touch_dir(&mut self, dir: &VPath) -> Result<()> {
        let node = self.ensure_dir(dir)?;
        self.stamp_dir(dir, node)
    }

    /// Store an already-overlaid directory node with its times set to now.
    pub(super) fn stamp_dir(&mut self, dir: &VPath, mut node: Node) -> Result<()> {
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        self.put_raw(dir, Some(&node))
    }

    pub(super) fn parent_of(path: &VPath) -> Result<VPath> {
        path.parent().ok_or_else(|| Error::InvalidPath {
            path: "/".into(),
            reason: "the workspace root cannot be changed this way".into(),
        })
    }

    /// Store file content and return its id.
    pub fn store_content(&mut self, bytes: &[u8]) -> Result<Option<ObjectId>> {
        self.quota.check_file_size(bytes.len() as u64)?;
        let (id, objects) = encode_content(bytes)?;
        for o in objects {
            self.w.put_object(&o.id, o.kind, &o.data)?;
        }
        Ok(id)
    }

    /// Store a buffer's changed content (see `ContentBuffer::changes`): against a chunked
    /// base, only the chunks it names are hashed and stored, so a small write into a large
    /// file costs the chunks it touched, not the whole file.
    pub fn store_changes(&mut self, changes: &Changes) -> Result<Option<ObjectId>> {
        let (len, base, chunks) = match changes {
            Changes::Small(bytes) => return self.store_content(bytes),
            Changes::Chunks { base, len, chunks } => (*len, base, chunks),
        };
        self.quota.check_file_size(len)?;
        let old = match base {
            Some(base) => Some(self.cache.chunk_index(&*self.w, base)?),
            None => None,
        };
        let old = old.as_ref().map_or(&[][..], |o| &o.chunks[..]);
        let (id, objects) = patch_content(old, len, chunks)?;
        for o in objects {
            self.w.put_object(&o.id, o.kind, &o.data)?;
        }
        Ok(id)
    }

    /// Store the content of file `node` cut, or zero-extended, to `size` bytes. Only the
    /// chunk holding the new end is read, so truncating a large file costs one chunk.
    pub fn resize_content(&mut self, node: &Node, size: u64) -> Result<Option<ObjectId>> {
        self.quota.check_file_size(size)?;
        let mut buf = ContentBuffer::new(node.size() as usize);
        buf.resize(size as usize);
        let base = node
            .content_id()
            .filter(|_| node.size() > CHUNK_SIZE as u64);
        loop {
            match buf.changes(base) {
                Ok(changes) => return self.store_changes(&changes),
                Err(need) => {
                    let shape = buf.shape();
                    for i in need {
                        let (from, len) = buf.base_span(i);
                        let bytes = self.view().read_node_range(node, from, len as u64)?;
                        buf.insert_base(i, shape, bytes);
                    }
                }
            }
        }
    }

    /// Put `node` at `path`, replacing what is there. Parents must exist. Quotas are checked
    /// against the totals the change produces before anything is written.
    /// A regular file put over a hard-linked name changes the shared file (as writing
    /// through that name does); anything else replaces the name, which the file loses.
    pub fn put_node(&mut self, path: &VPath, node: Node) -> Result<()> {
        links::refuse_reserved(path)?;
        let parent = Self::parent_of(path)?;
        let parent_node = self.ensure_dir(&parent)?;
        let old = self.view().lookup_raw(path)?;
        if let Some((
            Node {
                kind: NodeKind::Link { inode },
                ..
            },
            _,
        )) = &old
        {
            if node.is_file() {
                return self.write_inode(*inode, node);
            }
            self.release(*inode)?;
        }
        if let Some((n, _)) = &old
            && n.is_dir()
        {
            self.release_links_below(path)?;
        }
        let (of, ob) = match &old {
            Some((n, o)) => self.view().totals(path, n, *o)?,
            None => (0, 0),
        };
        let (nf, nb) = match &node.kind {
            NodeKind::File { size, .. } => {
                self.quota.check_file_size(*size)?;
                (1, *size)
            }
            NodeKind::Dir { files, bytes, .. } => (*files, *bytes),
            _ => (0, 0),
        };
        self.account(nf as i64 - of as i64, nb as i64 - ob as i64)?;
        if old.as_ref().is_some_and(|(n, o)| *o && n.is_dir()) {
            self.w.overlay_delete_below(self.ws.id, path.as_str())?;
        }
        self.put_raw(path, Some(&node))?;
        if old.is_none() {
            // Writing the child leaves the parent's overlay row as ensure_dir returned it.
            self.stamp_dir(&parent, parent_node)?;
        }
        Ok(())
    }

    fn mkdirs(&mut self, dir: &VPath) -> Result<()> {
        let mut cur = VPath::root();
        for comp in dir.components() {
            cur = cur.join(comp);
            match self.view().lookup(&cur)? {
                Some((n, _)) if n.is_dir() => {}
                Some(_) => {
                    return Err(Error::NotADirectory {
                        path: cur.display(),
                    });
                }
                None => {
                    let node = Node::empty_dir(0o755, self.now);
                    self.put_node(&cur, node)?;
                }
            }
        }
        Ok(())
    }

    /// Write a whole file, creating or replacing it. Existing files keep their mode, owner,
    /// xattrs, tags and metadata.
    pub fn write_file(&mut self, path: &VPath, bytes: &[u8], opts: WriteOptions) -> Result<()> {
        if opts.parents {
            self.mkdirs(&Self::parent_of(path)?)?;
        }
        let existing = self.view().lookup(path)?;
        let mut node = match existing {
            Some((n, _)) if n.is_dir() => {
                return Err(Error::IsADirectory {
                    path: path.display(),
                });
            }
            Some((n, _)) if n.is_file() => n,
            Some(_) => {
                return Err(Error::AlreadyExists {
                    name: path.display(),
                });
            }
            None => Node::new(
                NodeKind::File {
                    size: 0,
                    content: None,
                },
                super::node::Attrs::new(opts.mode.unwrap_or(0o644), self.now),
            ),
        };
        let appended;
        let bytes = if opts.append && node.size() > 0 {
            appended = [self.view().read_node(&node)?, bytes.to_vec()].concat();
            appended.as_slice()
        } else {
            bytes
        };
        let content = self.store_content(bytes)?;
        node.kind = NodeKind::File {
            size: bytes.len() as u64,
            content,
        };
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        self.put_node(path, node)
    }

    /// Create a directory (and, with `parents`, missing ancestors; then an existing
    /// directory is not an error).
    pub fn mkdir(&mut self, path: &VPath, parents: bool, mode: u32) -> Result<()> {
        if parents {
            return self.mkdirs(path);
        }
        if path.is_root() || self.view().lookup(path)?.is_some() {
            return Err(Error::AlreadyExists {
                name: path.display(),
            });
        }
        self.put_node(path, Node::empty_dir(mode, self.now))
    }

    /// Create a symlink at `path` pointing to `target` (stored verbatim).
    pub fn symlink(&mut self, path: &VPath, target: &str) -> Result<()> {
        if self.view().lookup(path)?.is_some() {
            return Err(Error::AlreadyExists {
                name: path.display(),
            });
        }
        let node = Node::new(
            NodeKind::Symlink {
                target: target.to_string(),
            },
            super::node::Attrs::new(0o777, self.now),
        );
        self.put_node(path, node)
    }

    /// Remove a file, symlink or (with `recursive`, or when empty) a directory.
    /// A hard-linked name is one name less for its file, which goes with its last name.
    pub fn remove(&mut self, path: &VPath, recursive: bool) -> Result<()> {
        let parent = Self::parent_of(path)?;
        let (node, overlaid) = self.stored(path)?.ok_or_else(|| Error::PathNotFound {
            path: path.display(),
        })?;
        if node.is_dir() && !recursive && !self.view().children(path, &node, overlaid)?.is_empty() {
            return Err(Error::DirectoryNotEmpty {
                path: path.display(),
            });
        }
        let (f, b) = self.view().totals(path, &node, overlaid)?;
        self.account(-(f as i64), -(b as i64))?;
        match node.kind {
            NodeKind::Link { inode } => self.release(inode)?,
            NodeKind::Dir { .. } => self.release_links_below(path)?,
            _ => {}
        }
        self.unlink_entry(&parent, path)?;
        self.touch_dir(&parent)
    }

    /// Drop `path` (and anything overlaid below it) from the workspace.
    pub(super) fn unlink_entry(&mut self, parent: &VPath, path: &VPath) -> Result<()> {
        let parent_node = self.ensure_dir(parent)?;
        self.w.overlay_delete_below(self.ws.id, path.as_str())?;
        let in_base = match &parent_node.kind {
            NodeKind::Dir { tree: Some(t), .. } => self.view().tree(t)?.get(path.name()).is_some(),
            _ => false,
        };
        if in_base {
            self.put_raw(path, None)
        } else {
            self.w.overlay_delete(self.ws.id, path.as_str())
        }
    }

    /// Move `src` to `dst`, replacing a file or an empty directory at `dst` like rename(2).
    pub fn rename(&mut self, src: &VPath, dst: &VPath) -> Result<()> {
        let (src_parent, dst_parent) = (Self::parent_of(src)?, Self::parent_of(dst)?);
        links::refuse_reserved(dst)?;
        let (mut node, overlaid) = self.stored(src)?.ok_or_else(|| Error::PathNotFound {
            path: src.display(),
        })?;
        if src == dst {
            return Ok(());
        }
        if dst.starts_with(src) {
            return Err(Error::InvalidPath {
                path: dst.display(),
                reason: format!("cannot move {} into itself", src.display()),
            });
        }
        self.ensure_dir(&dst_parent)?;
        let replaced = self.view().lookup_raw(dst)?;
        if let (
            NodeKind::Link { inode: a },
            Some((
                Node {
                    kind: NodeKind::Link { inode: b },
                    ..
                },
                _,
            )),
        ) = (&node.kind, &replaced)
            && a == b
        {
            // Two names of one file: rename(2) does nothing.
            return Ok(());
        }
        if let Some((d, d_overlaid)) = replaced {
            if d.is_dir() {
                if !node.is_dir() {
                    return Err(Error::IsADirectory {
                        path: dst.display(),
                    });
                }
                if !self.view().children(dst, &d, d_overlaid)?.is_empty() {
                    return Err(Error::DirectoryNotEmpty {
                        path: dst.display(),
                    });
                }
            } else if node.is_dir() {
                return Err(Error::NotADirectory {
                    path: dst.display(),
                });
            }
            let (f, b) = self.view().totals(dst, &d, d_overlaid)?;
            self.account(-(f as i64), -(b as i64))?;
            if let NodeKind::Link { inode } = d.kind {
                self.release(inode)?;
            }
        }
        let below = if overlaid && node.is_dir() {
            self.w.overlay_below(self.ws.id, src.as_str())?
        } else {
            Vec::new()
        };
        self.unlink_entry(&src_parent, src)?;
        self.w.overlay_delete_below(self.ws.id, dst.as_str())?;
        if !matches!(node.kind, NodeKind::Link { .. }) {
            node.attrs.ctime = self.now;
        }
        self.ensure_dir(&dst_parent)?;
        self.put_raw(dst, Some(&node))?;
        self.move_rows(below, src, dst)?;
        self.touch_dir(&src_parent)?;
        self.touch_dir(&dst_parent)
    }

    /// Swap two existing paths atomically (rename(2) with RENAME_EXCHANGE).
    pub fn exchange(&mut self, a: &VPath, b: &VPath) -> Result<()> {
        let (pa, pb) = (Self::parent_of(a)?, Self::parent_of(b)?);
        let missing = |p: &VPath| Error::PathNotFound { path: p.display() };
        let (na, oa) = self.stored(a)?.ok_or_else(|| missing(a))?;
        let (nb, ob) = self.stored(b)?.ok_or_else(|| missing(b))?;
        if a == b {
            return Ok(());
        }
        if a.starts_with(b) || b.starts_with(a) {
            return Err(Error::InvalidPath {
                path: b.display(),
                reason: "cannot exchange a directory with its own descendant".into(),
            });
        }
        let rows = |e: &Self, p: &VPath, n: &Node, o: bool| {
            if o && n.is_dir() {
                e.w.overlay_below(e.ws.id, p.as_str())
            } else {
                Ok(Vec::new())
            }
        };
        let (ra, rb) = (rows(self, a, &na, oa)?, rows(self, b, &nb, ob)?);
        self.ensure_dir(&pa)?;
        self.ensure_dir(&pb)?;
        self.w.overlay_delete_below(self.ws.id, a.as_str())?;
        self.w.overlay_delete_below(self.ws.id, b.as_str())?;
        self.put_raw(a, Some(&nb))?;
        self.put_raw(b, Some(&na))?;
        self.move_rows(rb, b, a)?;
        self.move_rows(ra, a, b)?;
        self.touch_dir(&pa)?;
        self.touch_dir(&pb)
    }

    fn move_rows(
        &mut self,
        rows: Vec<(String, Option<Vec<u8>>)>,
        from: &VPath,
        to: &VPath,
    ) -> Result<()> {
        for (p, value) in rows {
            let new = VPath::parse(&p)?.rebase(from, to);
            let parent = new.parent().unwrap_or_default();
            self.w
                .overlay_put(self.ws.id, new.as_str(), parent.as_str(), value.as_deref())?;
        }
        Ok(())
    }

    /// Copy `src` to `dst`. If `dst` is a directory the copy goes inside it. Content is
    /// shared, not duplicated: copying a tree costs in proportion to its changed entries.
    pub fn copy(&mut self, src: &VPath, dst: &VPath, recursive: bool) -> Result<VPath> {
        let (mut node, overlaid) = self
            .view()
            .lookup(src)?
            .ok_or_else(|| Error::PathNotFound {
                path: src.display(),
            })?;
        if node.is_dir() && !recursive {
            return Err(Error::IsADirectory {
                path: src.display(),
            });
        }
        let target = match self.view().lookup(dst)? {
            Some((d, _)) if d.is_dir() && !src.is_root() => dst.join(src.name()),
            _ => dst.clone(),
        };
        if target.starts_with(src) {
            return Err(Error::InvalidPath {
                path: dst.display(),
                reason: format!("cannot copy {} into itself", src.display()),
            });
        }
        if let Some((existing, _)) = self.view().lookup(&target)?
            && (existing.is_dir() || node.is_dir())
        {
            return Err(Error::AlreadyExists {
                name: target.display(),
            });
        }
        let below = if overlaid && node.is_dir() {
            self.w.overlay_below(self.ws.id, src.as_str())?
        } else {
            Vec::new()
        };
        let (f, b) = self.view().totals(src, &node, overlaid)?;
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        if node.is_dir() {
            // The copied node's own totals describe its base tree; the overlaid rows below
            // it are accounted here, as a whole.
            let (tf, tb) = match node.kind {
                NodeKind::Dir { files, bytes, .. } => (files, bytes),
                _ => (0, 0),
            };
            self.account(f as i64 - tf as i64, b as i64 - tb as i64)?;
        }
        let is_dir = node.is_dir();
        self.put_node(&target, node)?;
        self.move_rows(below, src, &target)?;
        if is_dir {
            // Like cp -r: hard-linked names in the copied tree become files of their own.
            // (A file copied onto a name of a linked file writes that file, as cp does.)
            self.unshare_links_below(&target)?;
        }
        Ok(target)
    }

    /// Change a node's metadata (mode, times, owner, xattrs, tags, metadata).
    pub fn update(
        &mut self,
        path: &VPath,
        f: impl FnOnce(&mut Node) -> Result<()>,
    ) -> Result<Node> {
        let (mut node, _) = self
            .view()
            .lookup(path)?
            .ok_or_else(|| Error::PathNotFound {
                path: path.display(),
            })?;
        f(&mut node)?;
        node.attrs.ctime = self.now;
        if let Some(l) = node.link {
            self.write_inode(l.inode, node.clone())?;
            return Ok(node);
        }
        if path.is_root() {
            self.ensure_dir(path)?;
            self.put_raw(path, Some(&node))?;
        } else {
            let parent = Self::parent_of(path)?;
            self.ensure_dir(&parent)?;
            self.put_raw(path, Some(&node))?;
        }
        Ok(node)
    }

    /// Fold the overlay into immutable objects and return the new root id. The overlay is
    /// left in place; callers decide whether to clear it. Cost: O(overlay entries).
    pub(crate) fn fold(&mut self) -> Result<ObjectId> {
        fold_overlay(self.w, self.cache, self.ws.id, self.ws.base)
    }

    /// Make the live state exactly `root`, dropping pending changes.
    pub(crate) fn reset_to_root(&mut self, root: ObjectId) -> Result<()> {
        let (files, bytes) = match self.cache.root(&*self.w, &root)?.kind {
            NodeKind::Dir { files, bytes, .. } => (files, bytes),
            _ => (0, 0),
        };
        self.reset_to(root, files, bytes)
    }
}
