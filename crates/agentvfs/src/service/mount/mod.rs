//! `MountFs`: a workspace served as a POSIX file system. It owns the inode table (stable
//! for the life of the mount and independent of content ids), open handles, and per-inode
//! write buffers that are committed in one transaction on close, fsync or a size threshold,
//! never one per `write()`. The FUSE adapter only translates calls; every rule is here.
//! Errors are errno values.
//!
//! The seams: `errno` (error mapping), `inodes` (the inode table), `handles` (open handles),
//! `writeback` (buffers and commits), `attr` (attributes and setattr), `xattr`, `entries`
//! (names) and `hidden` (secrets). Each adds its own `impl MountFs` block.

mod attr;
mod entries;
mod errno;
mod handles;
mod hidden;
mod inodes;
mod writeback;
mod xattr;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use attr::{Attr, AttrKind, FsStats, SetAttr, SetTime, Writer};
use errno::err;
pub use errno::errno;
pub use handles::Opened;
use handles::{DirEntry, Handles};
use inodes::Inodes;
use writeback::Dirty;

use crate::model::id::ObjectId;
use crate::model::node::Node;
use crate::model::path::VPath;
use crate::model::{BatchEnd, Quota, View, Workspace};
use crate::service::secrets::SecretPaths;

pub type Errno = i32;

pub type MResult<T> = std::result::Result<T, Errno>;

pub const ROOT_INO: u64 = 1;

/// A workspace served as a file system for the kernel (one per mount).
pub struct MountFs {
    ws: Workspace,
    /// Serve this checkpoint, read-only.
    at: Option<String>,
    /// Serve this root, read-only (a sandbox's lower layer).
    root: Option<ObjectId>,
    readonly: bool,
    /// Refuse changes for now (a read-only command in a long-lived session).
    writes_paused: AtomicBool,
    /// The kernel caches writes (FUSE writeback cache): it sends them later, at the right
    /// offsets, and keeps O_APPEND itself.
    writeback: AtomicBool,
    quota: Quota,
    inodes: Mutex<Inodes>,
    handles: Mutex<Handles>,
    dirty: Mutex<HashMap<u64, Dirty>>,
    dirs: Mutex<HashMap<u64, Vec<DirEntry>>>,
    next_fh: AtomicU64,
    /// Record an op-log entry when the session ends (off for a long-lived session, which
    /// records each command's changes itself with `record`).
    record_at_finish: AtomicBool,
    /// The entry `finish` recorded.
    finished_as: Arc<Mutex<Option<i64>>>,
    /// Nodes by path. The session is the only writer of the workspace while mounted, so an
    /// entry stays valid until a change through the session touches it: a change to `p`
    /// drops `p`, its parent (whose times change) and everything below `p`. `generation`
    /// guards against caching a node read before a change that completed meanwhile.
    nodes: Mutex<BTreeMap<VPath, Node>>,
    generation: AtomicU64,
    /// Stops the group-commit flusher thread.
    stop_flusher: Arc<AtomicBool>,
    /// Changes since the flusher last folded the overlay.
    changes: Arc<AtomicU64>,
    /// The op-log entry the session records when it ends: (kind, description).
    label: (String, String),
    /// Paths hidden from every process using the mount (secrets during a proxied run).
    hidden: SecretPaths,
    /// When set, the only paths that exist (a view of just the secrets and the directories
    /// above them; see `showing_only`).
    only: Option<std::collections::HashSet<VPath>>,
    /// Whether a file content holds a private key, by content id (ids are immutable, so an
    /// answer never goes stale).
    private_keys: Mutex<HashMap<ObjectId, bool>>,
    /// Hard-linked files (by the model's inode) known to be secrets, or not, under any of
    /// their names; forgotten whenever a name comes or goes.
    linked_secrets: Mutex<HashMap<u64, bool>>,
}

const NODE_CACHE_LIMIT: usize = 200_000;

/// Fold the session's overlay into trees after this many changes.
const FOLD_EVERY: u64 = 2_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// open(2) flag values (Linux).
pub mod libc_flags {
    pub const O_ACCMODE: i32 = 0o3;
    pub const O_WRONLY: i32 = 0o1;
    pub const O_RDWR: i32 = 0o2;
    pub const O_EXCL: i32 = 0o200;
    pub const O_TRUNC: i32 = 0o1000;
    pub const O_APPEND: i32 = 0o2000;
}

impl MountFs {
    /// Serve `ws` (or its checkpoint `at`, read-only).
    pub fn new(ws: Workspace, at: Option<String>, readonly: bool) -> crate::Result<MountFs> {
        let quota = ws.vault().quota()?;
        let (kind, description) = ("mount", "changes made through the mount");
        if readonly || at.is_some() {
            if let Some(cp) = &at {
                ws.checkpoint(cp)?;
            }
        } else {
            ws.begin_batch(kind, description)?;
        }
        let mut inodes = Inodes {
            next: ROOT_INO + 1,
            ..Default::default()
        };
        let stop_flusher = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(AtomicU64::new(0));
        if !(readonly || at.is_some()) {
            // Group commit: the mount's many small changes share transactions, committed
            // by this thread every 20 ms when idle (and at once on fsync).
            ws.vault().set_batching(true)?;
            let (vault, stop, changes) =
                (ws.vault().clone(), stop_flusher.clone(), changes.clone());
            let folder = ws.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                    // Many changes since the last fold: move them from overlay rows into
                    // trees, so lookups stay cheap for the rest of the session.
                    if changes.load(Ordering::Relaxed) >= FOLD_EVERY {
                        changes.store(0, Ordering::Relaxed);
                        let _ = folder.fold_pending();
                    }
                    let _ = vault.flush_batch();
                }
            });
        }
        inodes.by_ino.insert(ROOT_INO, Some(VPath::root()));
        inodes.by_path.insert(VPath::root(), ROOT_INO);
        Ok(MountFs {
            ws,
            readonly: readonly || at.is_some(),
            writes_paused: AtomicBool::new(false),
            writeback: AtomicBool::new(false),
            at,
            root: None,
            quota,
            inodes: Mutex::new(inodes),
            handles: Mutex::default(),
            dirty: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            record_at_finish: AtomicBool::new(true),
            finished_as: Arc::default(),
            nodes: Mutex::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            stop_flusher,
            changes,
            label: (kind.into(), description.into()),
            hidden: SecretPaths::default(),
            only: None,
            private_keys: Mutex::new(HashMap::new()),
            linked_secrets: Mutex::new(HashMap::new()),
        })
    }

    /// Serve the immutable tree `root` of `ws`, read-only: nothing under it ever changes,
    /// so the kernel may cache what it reads for as long as it likes.
    pub fn at_root(ws: Workspace, root: ObjectId) -> crate::Result<MountFs> {
        let mut fs = MountFs::new(ws, None, true)?;
        fs.root = Some(root);
        Ok(fs)
    }

    /// A read-only view of one immutable root (`at_root`): what it shows never changes.
    pub fn immutable(&self) -> bool {
        self.root.is_some()
    }

    /// Record the session as an op-log entry of this kind and description.
    pub fn with_label(mut self, kind: &str, description: &str) -> crate::Result<Self> {
        self.label = (kind.to_string(), description.to_string());
        if !self.readonly {
            // Relabel the open batch (it has changed nothing yet).
            self.ws.begin_batch(kind, description)?;
        }
        Ok(self)
    }

    /// Refuse these secrets: they are listed and can be looked up (mode 000), but their
    /// content, attributes and names cannot be read or changed (EACCES).
    pub fn with_hidden(mut self, secrets: SecretPaths) -> Self {
        self.hidden = secrets;
        self
    }

    /// Show only `paths` and the directories above them; every other name does not exist
    /// (ENOENT, left out of listings). With `with_hidden`, a view of just the secrets, to
    /// lay over a tree that leaves them out.
    pub fn showing_only(mut self, paths: &[VPath]) -> Self {
        let mut only = std::collections::HashSet::new();
        for p in paths {
            only.extend(p.ancestors());
            only.insert(p.clone());
        }
        only.insert(VPath::root());
        self.only = Some(only);
        self
    }

    /// Whether `path` is in the view (see `showing_only`).
    fn shown(&self, path: &VPath) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(path))
    }

    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Whether the kernel may cache writes. Not under a size quota: a cached write()
    /// succeeds at once and the quota error would only come at close or fsync, while
    /// callers must see it at the write that crosses the limit.
    pub fn writeback_safe(&self) -> bool {
        !self.readonly && self.quota.max_size_mb.is_none() && self.quota.max_file_size_mb.is_none()
    }

    /// The kernel caches writes from now on (see `writeback_safe`).
    pub fn set_writeback(&self) {
        self.writeback.store(true, Ordering::SeqCst);
    }

    /// Read-only, paused, or the fork's write lease was lost (another host may have
    /// written since: this mount's view is stale and must not be written back).
    fn refuses_writes(&self) -> bool {
        self.readonly || self.writes_paused.load(Ordering::SeqCst) || self.ws.lease_lost()
    }

    /// Refuse (EROFS) or accept changes from now on, e.g. around a read-only command run
    /// in a long-lived session.
    pub fn pause_writes(&self, paused: bool) {
        self.writes_paused.store(paused, Ordering::SeqCst);
    }

    /// Whether `finish` records the session as an op-log entry (default true).
    pub fn record_at_finish(&self, yes: bool) {
        self.record_at_finish.store(yes, Ordering::SeqCst);
    }

    fn commit_all(&self) {
        let inos: Vec<u64> = lock(&self.dirty).keys().copied().collect();
        for ino in inos {
            let _ = self.commit(ino);
        }
    }

    /// Commit what the session holds and record everything changed since the last record
    /// (or the start) as one op-log entry; the next record starts from here. Returns the
    /// entry's id. Used by a long-lived session after each command.
    pub fn record(&self, kind: &str, description: &str) -> crate::Result<Option<i64>> {
        if self.readonly {
            return Ok(None);
        }
        self.commit_all();
        let id = self.ws.record_batch(kind, description, BatchEnd::Always)?;
        self.ws.vault().flush_batch()?;
        Ok(id)
    }

    fn read<R>(&self, f: impl FnOnce(&View<'_>) -> crate::Result<R>) -> MResult<R> {
        match self.root {
            Some(root) => self.ws.read_root(root, f),
            None => self.ws.read_at(self.at.as_deref(), f),
        }
        .map_err(|e| errno(&e))
    }

    fn edit<R>(
        &self,
        op: &str,
        paths: &[&VPath],
        f: impl FnOnce(&mut crate::model::Edit<'_>) -> crate::Result<R>,
    ) -> MResult<R> {
        if self.refuses_writes() {
            return Err(err(rustix::io::Errno::ROFS));
        }
        let result = self.ws.edit_batch(op, paths, f).map_err(|e| errno(&e));
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut nodes = lock(&self.nodes);
        for p in paths {
            nodes.remove(*p);
            if let Some(parent) = p.parent() {
                nodes.remove(&parent);
            }
            match p.below_bounds() {
                Some((lo, hi)) => {
                    let below: Vec<VPath> = nodes.range(lo..hi).map(|(k, _)| k.clone()).collect();
                    for k in below {
                        nodes.remove(&k);
                    }
                }
                None => nodes.clear(),
            }
        }
        result
    }

    pub fn statfs(&self) -> FsStats {
        const BSIZE: u64 = 4096;
        let (used_bytes, used_files) = self
            .ws
            .totals()
            .map(|(files, bytes)| (bytes, files))
            .unwrap_or((0, 0));
        let total_bytes = self
            .quota
            .max_size_mb
            .map(|m| m.saturating_mul(1024 * 1024))
            .unwrap_or(1 << 44);
        let total_files = self.quota.max_files.unwrap_or(1 << 32);
        FsStats {
            blocks: total_bytes / BSIZE,
            bfree: total_bytes.saturating_sub(used_bytes) / BSIZE,
            files: total_files,
            ffree: total_files.saturating_sub(used_files),
            bsize: BSIZE as u32,
        }
    }

    /// Commit everything and record the whole mount as one operation in the op log.
    pub fn finish(&self) -> crate::Result<()> {
        self.commit_all();
        if self.readonly {
            return Ok(());
        }
        self.stop_flusher.store(true, Ordering::Relaxed);
        self.ws.vault().set_batching(false)?;
        // Without a record of its own, the end still records changes nobody recorded yet
        // (under the batch's label): nothing acknowledged stays out of history.
        let end = if self.record_at_finish.load(Ordering::SeqCst) {
            BatchEnd::Always
        } else {
            BatchEnd::IfChanged
        };
        let (kind, description) = &self.label;
        let id = self.ws.record_batch(kind, description, end)?;
        *lock(&self.finished_as) = id;
        self.ws.vault().sync()
    }

    /// Where `finish` puts the id of the op-log entry it recorded: a caller that hands the
    /// session to a mount keeps this to learn the id after the unmount (reading the newest
    /// entry instead could name another writer's).
    pub fn finished_as(&self) -> Arc<Mutex<Option<i64>>> {
        self.finished_as.clone()
    }
}
