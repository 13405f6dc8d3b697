//! A vault: one store file holding any number of workspaces (the main line and its forks),
//! their checkpoints, the op log and the audit log. Forks are O(1): a new workspace whose
//! base is an existing root. Opening and forking workspaces (`Vault::workspace`,
//! `Vault::fork`) is in `workspace::fork`, above this module.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use serde::Serialize;

use super::diff::{Change, StateRef, diff_views};
use super::id::ObjectId;
use super::node::{EncodedObject, Node, kind, references};
use super::now_ns;
use super::quota::Quota;
use super::view::{ObjectCache, View};
use crate::error::{Error, Result};
use crate::store::{
    AuditRecord, Engine, Server, Store, StoreRead, WorkspaceRecord, create_store, open_store,
};

/// The name of every vault's main workspace.
pub const MAIN: &str = "main";

/// An open vault file.
/// The settings key of `key` scoped to fork `fork`. Settings that belong to one fork (its
/// hand-back records, standing approvals, pending approval tokens) live under such keys and
/// are deleted with the fork, so a fork made later under the same name inherits none of
/// them. (Fork names hold no `/`.)
pub fn fork_key(fork: &str, key: &str) -> String {
    format!("fork:{fork}/{key}")
}

pub struct Vault {
    pub(crate) store: Arc<dyn Store>,
    path: PathBuf,
    pub(crate) cache: ObjectCache,
}

fn open_vaults() -> &'static Mutex<HashMap<PathBuf, Weak<Vault>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<Vault>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A fork as reported by `vault info` and `vault fork`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ForkInfo {
    pub name: String,
    pub parent: Option<String>,
    /// The checkpoint of the parent the fork was taken at, if any.
    pub forked_at_checkpoint: Option<String>,
    /// Root id the fork started from (its merge base).
    pub base_root: Option<String>,
    pub created_at: i64,
    pub files: u64,
    pub bytes: u64,
}

/// One checkpoint as reported by the CLI.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CheckpointInfo {
    pub name: String,
    pub message: Option<String>,
    pub created_at: i64,
    pub root: String,
    pub files: u64,
    pub bytes: u64,
    /// Taken by the proxy before a command; retention keeps the newest `keep_auto` of these.
    pub auto: bool,
}

impl From<crate::store::CheckpointRecord> for CheckpointInfo {
    fn from(c: crate::store::CheckpointRecord) -> Self {
        CheckpointInfo {
            name: c.name,
            message: c.message,
            created_at: c.created_at,
            root: c.root.to_hex(),
            files: c.files,
            bytes: c.bytes,
            auto: c.auto,
        }
    }
}

/// `vault info`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VaultInfo {
    pub path: String,
    /// The storage engine the vault is kept in.
    pub engine: Engine,
    pub format_version: u32,
    pub disk_bytes: u64,
    pub workspace: ForkInfo,
    pub checkpoints: usize,
    /// Paths changed since the last checkpoint (or since the fork began, if none).
    pub pending_changes: u64,
    /// Forks whose parent is this workspace.
    pub forks: Vec<String>,
    pub quota: Quota,
    /// The host directory the workspace (or the one it was forked from) was imported from
    /// or last applied to, and the state it then held; `apply` starts there.
    pub origin: Option<super::origin::Origin>,
}

/// `stats`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StatsReport {
    /// The storage engine the vault is kept in.
    pub engine: Engine,
    pub disk_bytes: u64,
    pub objects: u64,
    pub stored_bytes: u64,
    /// Stored bytes of file content (chunks), after dedup.
    pub content_bytes: u64,
    pub workspaces: usize,
    pub checkpoints: usize,
    /// Bytes of regular files across all workspaces' live trees.
    pub logical_bytes: u64,
    pub live_files: u64,
    /// logical_bytes / content_bytes: how much dedup and sharing save.
    pub dedup_ratio: f64,
}

/// `gc`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GcReport {
    pub objects_before: u64,
    pub objects_removed: u64,
    pub bytes_removed: u64,
    pub dry_run: bool,
}

pub(super) fn fork_info(ws: &WorkspaceRecord) -> ForkInfo {
    ForkInfo {
        name: ws.name.clone(),
        parent: ws.parent.clone(),
        forked_at_checkpoint: ws.fork_checkpoint.clone(),
        base_root: ws.base_root.map(|r| r.to_hex()),
        created_at: ws.created_at,
        files: ws.files,
        bytes: ws.bytes,
    }
}

impl Vault {
    /// Create a new vault file with an empty main workspace, in the default engine.
    pub fn create(path: &Path) -> Result<Arc<Vault>> {
        Self::create_in(path, Engine::default())
    }

    /// Create a new vault file with an empty main workspace, kept in `engine`.
    pub fn create_in(path: &Path, engine: Engine) -> Result<Arc<Vault>> {
        Self::create_on(path, engine, None)
    }

    /// Create a new vault with an empty main workspace, kept in `engine`; a server engine
    /// keeps it on `server` and writes at `path` the file that points there.
    pub fn create_on(path: &Path, engine: Engine, server: Option<&Server>) -> Result<Arc<Vault>> {
        let store = create_store(path, engine, server)?;
        let vault = Self::wrap(store);
        let now = now_ns();
        let root = EncodedObject::encode(kind::ROOT, &Node::empty_dir(0o755, now))?;
        let made = vault.store.write(|w| {
            w.put_object(&root.id, root.kind, &root.data)?;
            w.set_setting("vault.created_at", Some(&now.to_string()))?;
            w.insert_workspace(&WorkspaceRecord {
                id: 0,
                name: MAIN.into(),
                base: root.id,
                parent: None,
                // The empty tree main starts from: the default "from" side of a diff.
                base_root: Some(root.id),
                fork_checkpoint: None,
                created_at: now,
                files: 0,
                bytes: 0,
            })?;
            Ok(())
        });
        if let Err(e) = made {
            // A vault without its main workspace is of no use: remove it (on a server that
            // failed this write, the removal may fail too; `vault check` names the rest).
            drop(vault);
            let _ = crate::store::remove_vault_files(path);
            return Err(e);
        }
        Ok(vault)
    }

    /// Open an existing vault; one handle per file per process.
    pub fn open(path: &Path) -> Result<Arc<Vault>> {
        if !path.exists() {
            return Err(Error::VaultNotFound {
                name: path.display().to_string(),
                suggestions: Vec::new(),
            });
        }
        Ok(Self::wrap(open_store(path)?))
    }

    fn wrap(store: Arc<dyn Store>) -> Arc<Vault> {
        let path = store.path().to_path_buf();
        let mut open = open_vaults().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = open.get(&path).and_then(Weak::upgrade) {
            return v;
        }
        let vault = Arc::new(Vault {
            store,
            path: path.clone(),
            cache: ObjectCache::default(),
        });
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(path, Arc::downgrade(&vault));
        vault
    }

    /// Bytes the vault occupies on disk (its file and side files, or its directory).
    pub fn disk_size(&self) -> u64 {
        self.store.disk_size()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next value of the counter in setting `key` (1 first), taken in one write
    /// transaction, so two processes never get the same one.
    pub fn next_counter(&self, key: &str) -> Result<u64> {
        self.store.write(|w| {
            let n: u64 = w.setting(key)?.and_then(|v| v.parse().ok()).unwrap_or(1);
            w.set_setting(key, Some(&n.saturating_add(1).to_string()))?;
            Ok(n)
        })
    }

    /// Every setting whose key starts with `prefix`, in key order.
    pub fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        self.store.read(|r| r.settings_with_prefix(prefix))
    }

    /// A vault-wide setting (the settings table holds quotas, approval tokens, …).
    pub fn setting(&self, key: &str) -> Result<Option<String>> {
        self.store.read(|r| r.setting(key))
    }

    pub fn set_setting(&self, key: &str, value: Option<&str>) -> Result<()> {
        self.store.write(|w| w.set_setting(key, value))
    }

    /// Turn group commit on or off (see `Store::set_batching`).
    pub fn set_batching(&self, on: bool) -> Result<()> {
        self.store.set_batching(on)
    }

    /// Commit any open batch so other processes see it.
    pub fn flush_batch(&self) -> Result<()> {
        self.store.flush_batch()
    }

    /// Make every committed change durable on disk.
    pub fn sync(&self) -> Result<()> {
        self.store.sync()
    }

    pub fn forks(&self) -> Result<Vec<ForkInfo>> {
        Ok(self
            .store
            .read(|r| r.workspaces())?
            .iter()
            .map(fork_info)
            .collect())
    }

    pub fn info(&self, workspace: &str) -> Result<VaultInfo> {
        let disk_bytes = self.store.disk_size();
        self.store.read(|r| {
            let ws = r.workspace(workspace)?.ok_or_else(|| Error::ForkNotFound {
                name: workspace.to_string(),
            })?;
            let forks = r
                .workspaces()?
                .into_iter()
                .filter(|w| w.parent.as_deref() == Some(workspace))
                .map(|w| w.name)
                .collect();
            let checkpoints = r.checkpoints(ws.id)?;
            // Changed paths since the last checkpoint (or since the fork began): a diff that
            // prunes equal subtrees, so O(changes).
            let since = checkpoints
                .last()
                .map(|c| c.root)
                .or(ws.base_root)
                .unwrap_or(ws.base);
            let bare = View {
                r,
                cache: &self.cache,
                overlay: None,
                base: since,
            };
            let live = View {
                r,
                cache: &self.cache,
                overlay: Some(ws.id),
                base: ws.base,
            };
            let pending_changes = diff_views(&bare, &live)?.len() as u64;
            Ok(VaultInfo {
                path: self.path.display().to_string(),
                engine: self.store.engine(),
                format_version: crate::store::format_version(self.store.engine()),
                disk_bytes,
                workspace: fork_info(&ws),
                checkpoints: checkpoints.len(),
                pending_changes,
                forks,
                quota: Quota::load(r)?,
                origin: super::origin::origin_of(r, workspace)?,
            })
        })
    }

    pub fn quota(&self) -> Result<Quota> {
        self.store.read(|r| Quota::load(r))
    }

    pub fn set_quota(&self, quota: &Quota) -> Result<()> {
        quota.validate()?;
        self.store.write(|w| quota.save(w))
    }

    /// The newest `limit` audit records since `since`; the steps of larger operations too
    /// with `steps` (see [`AuditRecord::step`]).
    pub fn audit(&self, limit: usize, since: Option<i64>, steps: bool) -> Result<Vec<AuditRecord>> {
        self.store.read(|r| r.audit(limit, since, steps))
    }

    pub fn stats(&self) -> Result<StatsReport> {
        let disk_bytes = self.store.disk_size();
        self.store.read(|r| {
            let (objects, stored_bytes, content_bytes) = r.object_stats()?;
            let workspaces = r.workspaces()?;
            let mut checkpoints = 0;
            for w in &workspaces {
                checkpoints += r.checkpoints(w.id)?.len();
            }
            let logical_bytes = workspaces.iter().map(|w| w.bytes).sum();
            Ok(StatsReport {
                engine: self.store.engine(),
                disk_bytes,
                objects,
                stored_bytes,
                workspaces: workspaces.len(),
                checkpoints,
                logical_bytes,
                live_files: workspaces.iter().map(|w| w.files).sum(),
                content_bytes,
                dedup_ratio: if content_bytes == 0 {
                    1.0
                } else {
                    logical_bytes as f64 / content_bytes as f64
                },
            })
        })
    }

    /// Drop objects nothing references: not a workspace, fork base, checkpoint, op-log
    /// entry or overlay entry. Runs in one write transaction, so no writer races it.
    pub fn gc(&self, dry_run: bool) -> Result<GcReport> {
        self.store.write(|w| {
            let live = reachable(w)?;
            let all = w.object_ids()?;
            let mut removed = 0;
            let mut bytes = 0;
            for (id, _, size) in &all {
                if !live.contains(id) {
                    // From the index: an object kept elsewhere (S3) is not downloaded.
                    bytes += size;
                    removed += 1;
                    if !dry_run {
                        w.delete_object(id)?;
                    }
                }
            }
            Ok(GcReport {
                objects_before: all.len() as u64,
                objects_removed: removed,
                bytes_removed: bytes,
                dry_run,
            })
        })
    }

    /// Reclaim free space in the file.
    pub fn compact(&self) -> Result<u64> {
        let before = self.store.disk_size();
        self.store.compact()?;
        Ok(before.saturating_sub(self.store.disk_size()))
    }
}

fn view_for<'a>(r: &'a dyn StoreRead, vault: &'a Vault, state: &StateRef) -> Result<View<'a>> {
    let ws = |name: &str| {
        r.workspace(name)?.ok_or_else(|| Error::ForkNotFound {
            name: name.to_string(),
        })
    };
    let bare = |base| View {
        r,
        cache: &vault.cache,
        overlay: None,
        base,
    };
    Ok(match state {
        StateRef::Live(name) => {
            let w = ws(name)?;
            View {
                r,
                cache: &vault.cache,
                overlay: Some(w.id),
                base: w.base,
            }
        }
        StateRef::Checkpoint { workspace, name } => {
            let w = ws(workspace)?;
            let cp = match r.checkpoint(w.id, name)? {
                Some(cp) => cp,
                None => return Err(super::retention::missing(r, w.id, name)),
            };
            bare(cp.root)
        }
        StateRef::ForkBase(name) => {
            let w = ws(name)?;
            bare(w.base_root.unwrap_or(w.base))
        }
        StateRef::Root(id) => bare(*id),
    })
}

impl Vault {
    /// Run `f` with read views of two states, in one consistent snapshot.
    pub fn with_views<R>(
        &self,
        a: &StateRef,
        b: &StateRef,
        f: impl FnOnce(&View<'_>, &View<'_>) -> Result<R>,
    ) -> Result<R> {
        self.store.read(|r| {
            let va = view_for(r, self, a)?;
            let vb = view_for(r, self, b)?;
            f(&va, &vb)
        })
    }

    /// What changed from state `a` to state `b`, sorted by path, with renames detected.
    pub fn diff(&self, a: &StateRef, b: &StateRef) -> Result<Vec<Change>> {
        self.with_views(a, b, diff_views)
    }

    /// Like [`Vault::diff`], with the changes the ignore rules leave out counted instead
    /// of listed, unless `include_ignored` (see [`super::ignore`]).
    pub fn diff_listed(
        &self,
        a: &StateRef,
        b: &StateRef,
        include_ignored: bool,
    ) -> Result<(Vec<Change>, super::ignore::IgnoredCounts)> {
        self.with_views(a, b, |va, vb| {
            super::ignore::listed(diff_views(va, vb)?, va, vb, include_ignored)
        })
    }
}

/// Ids every live state starts from.
pub(super) fn roots(r: &dyn StoreRead) -> Result<Vec<ObjectId>> {
    let mut out = r.all_checkpoint_roots()?;
    for ws in r.workspaces()? {
        out.push(ws.base);
        out.extend(ws.base_root);
        for (_, node) in r.overlay_all(ws.id)? {
            if let Some(bytes) = node {
                let node: Node = super::view::decode(&bytes)?;
                out.extend(node.content_id());
            }
        }
    }
    for op in r.ops(None, usize::MAX >> 1)? {
        out.extend(op.root_before);
        out.extend(op.root_after);
        out.extend(super::side_effect::side_effect_roots(&op));
    }
    out.extend(super::origin::origin_roots(r)?);
    Ok(out)
}

/// Every object reachable from the roots. Shared subtrees are walked once.
fn reachable(r: &dyn StoreRead) -> Result<HashSet<ObjectId>> {
    let mut seen = HashSet::new();
    let mut stack = roots(r)?;
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if let Some(o) = r.object(&id)?
            && o.kind != kind::CHUNK
        {
            stack.extend(references(o.kind, &o.data)?);
        }
    }
    Ok(seen)
}
