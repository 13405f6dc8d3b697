//! `MountSession`: a workspace served as a POSIX file system. It owns the inode table (stable
//! for the life of the mount and independent of content ids), open handles, and per-inode
//! write buffers that are committed in one transaction on close, fsync or a size threshold,
//! never one per `write()`. The FUSE adapter only translates calls; every rule is here.
//! Errors are errno values.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Error;
use crate::model::buffer::{Changes, ContentBuffer};
use crate::model::id::ObjectId;
use crate::model::node::{Attrs, CHUNK_SIZE, Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{BatchEnd, Quota, View, Workspace, now_ns};
use crate::service::secrets::{self, KEY_SNIFF_BYTES, SecretPaths};

pub type Errno = i32;
pub type MResult<T> = std::result::Result<T, Errno>;

/// Commit a write buffer once the chunks changed since its last commit hold this many
/// bytes. A commit lets them leave memory, so a long write holds about this much (twice,
/// while a commit copies its chunks out) in the daemon, not the whole file.
const DIRTY_LIMIT: usize = 16 * 1024 * 1024;

pub const ROOT_INO: u64 = 1;

/// Map a model error to the errno a POSIX caller expects.
pub fn errno(e: &Error) -> Errno {
    use rustix::io::Errno as E;
    let e = match e {
        Error::PathNotFound { .. } => E::NOENT,
        Error::NotADirectory { .. } => E::NOTDIR,
        Error::IsADirectory { .. } => E::ISDIR,
        Error::DirectoryNotEmpty { .. } => E::NOTEMPTY,
        Error::AlreadyExists { .. } => E::EXIST,
        Error::HardLinkNotAllowed { .. } => E::PERM,
        Error::QuotaExceeded { .. } => E::DQUOT,
        Error::FileTooLarge { .. } => E::FBIG,
        Error::DiskFull { .. } => E::NOSPC,
        Error::InvalidPath { .. } | Error::InvalidName { .. } | Error::InvalidArgument { .. } => {
            E::INVAL
        }
        _ => E::IO,
    };
    e.raw_os_error()
}

fn err(e: rustix::io::Errno) -> Errno {
    e.raw_os_error()
}

/// What a node looks like to the kernel.
#[derive(Debug, Clone)]
pub struct Attr {
    pub ino: u64,
    pub kind: AttrKind,
    pub size: u64,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub nlink: u32,
    /// A device node's number (Linux `dev_t`); 0 for anything else.
    pub rdev: u64,
}

impl Attr {
    /// The attributes of an absent name (inode 0), for a negative lookup reply.
    pub fn negative() -> Attr {
        Attr {
            ino: 0,
            kind: AttrKind::File,
            size: 0,
            perm: 0,
            uid: 0,
            gid: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            nlink: 0,
            rdev: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

/// Attributes to set; `None` leaves one alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// The kernel's own clock reading for this change, when it keeps the file's change
    /// time itself (regular files under the writeback cache): the change happens then.
    pub ctime: Option<i64>,
    /// The caller may keep set-ID bits across a size change (CAP_FSETID).
    pub keep_setid: bool,
}

/// The process behind a write, as the kernel names it in the request.
#[derive(Debug, Clone, Copy)]
pub struct Writer {
    pub gid: u32,
    /// 0 when the process is outside the daemon's pid namespace.
    pub pid: u32,
}

impl Writer {
    /// Whether the writer is in group `gid`: its own group, or one of its supplementary
    /// groups (from /proc). `None` when they cannot be read (the process is gone or not
    /// visible from here).
    fn in_group(&self, gid: u32) -> Option<bool> {
        if self.gid == gid {
            return Some(true);
        }
        if self.pid == 0 {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
        Some(groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
    }
}

/// A time to set: a given instant, or the moment of the change itself (UTIME_NOW), which
/// is also the change time, so `utimensat(UTIME_NOW, UTIME_NOW)` leaves atime, mtime and
/// ctime equal as on a native file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    At(i64),
    Now,
}

/// An open file handle and how the kernel should treat it.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    /// The kernel may keep the file's page cache: a read-only open of a file with no
    /// buffered writes (nothing else changes it).
    pub keep_cache: bool,
    /// close() must reach the session (to commit buffered writes). A read-only handle has
    /// nothing to commit, so its close costs no round trip.
    pub flush: bool,
}

/// Space figures for statfs, from the quota when one is set.
#[derive(Debug, Clone, Copy)]
pub struct FsStats {
    pub blocks: u64,
    pub bfree: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
}

#[derive(Default)]
struct Inodes {
    /// `None` once the path was unlinked (open handles may still use the inode). For a
    /// hard-linked file: any one of its names.
    by_ino: HashMap<u64, Option<VPath>>,
    /// Sorted, so a subtree is one range scan (unlink, rmdir and rename of a directory).
    by_path: BTreeMap<VPath, u64>,
    /// Hard-linked files: the model's inode number to ours, so every name of one file has
    /// one inode here too.
    by_link: HashMap<u64, u64>,
    /// Hard-linked files: the names seen so far, so unlinking one leaves `by_ino` on another.
    names: HashMap<u64, BTreeSet<VPath>>,
    next: u64,
}

#[derive(Default)]
struct Handles {
    by_fh: HashMap<u64, Handle>,
    /// How many handles each inode has open.
    per_ino: HashMap<u64, usize>,
}

impl Handles {
    fn insert(&mut self, fh: u64, h: Handle) {
        *self.per_ino.entry(h.ino).or_default() += 1;
        self.by_fh.insert(fh, h);
    }

    fn remove(&mut self, fh: u64) -> Option<Handle> {
        let h = self.by_fh.remove(&fh)?;
        if let Some(n) = self.per_ino.get_mut(&h.ino) {
            *n -= 1;
            if *n == 0 {
                self.per_ino.remove(&h.ino);
            }
        }
        Some(h)
    }

    fn get(&self, fh: u64) -> Option<&Handle> {
        self.by_fh.get(&fh)
    }

    fn any_open(&self, ino: u64) -> bool {
        self.per_ino.contains_key(&ino)
    }

    /// The handles open on `ino` (a scan: for the rare unlinked-but-open cases).
    fn on_inode(&mut self, ino: u64) -> impl Iterator<Item = &mut Handle> {
        // Nothing to scan (the usual case: a file's last handle closing) costs nothing.
        let scan = if self.any_open(ino) {
            self.by_fh.len()
        } else {
            0
        };
        self.by_fh
            .values_mut()
            .take(scan)
            .filter(move |h| h.ino == ino)
    }
}

struct Handle {
    ino: u64,
    append: bool,
    /// Writable handles hold a reference on the inode's write buffer.
    writable: bool,
    /// The node when opened, so an unlinked file stays readable until closed.
    snapshot: Option<Node>,
}

struct Dirty {
    /// The content: chunks written since open in memory, the rest read from `base`.
    buf: ContentBuffer,
    /// A node whose content is the buffer's base: the file as opened, then as each commit
    /// stored it (so also what the last commit stored, and how long it was).
    base: Node,
    node: Node,
    /// Held by a commit of this inode from its snapshot until it is stored, so commits of
    /// one inode happen one after another and each patches the content the last stored.
    committing: Arc<Mutex<()>>,
    /// Handles open on this inode; the buffer goes when the last one closes.
    opens: usize,
    /// Bumped by every change to the buffer; commit records the version it saved, so
    /// "anything new since?" is a comparison of two numbers, not of two buffers.
    version: u64,
    committed_version: u64,
}

/// A content patch did not apply; the commit stores the whole buffer instead.
struct Retry;

/// A directory entry as listed at opendir: (inode, kind, name).
type DirEntry = (u64, AttrKind, String);

pub struct MountSession {
    ws: Workspace,
    /// Serve this checkpoint, read-only.
    at: Option<String>,
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

fn kind_of(kind: &NodeKind) -> AttrKind {
    match kind {
        NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => AttrKind::File,
        NodeKind::Dir { .. } => AttrKind::Dir,
        NodeKind::Symlink { .. } => AttrKind::Symlink,
        NodeKind::Fifo => AttrKind::Fifo,
        NodeKind::CharDevice { .. } => AttrKind::CharDevice,
        NodeKind::BlockDevice { .. } => AttrKind::BlockDevice,
        NodeKind::Socket => AttrKind::Socket,
        // Views resolve hard-linked bodies; a name never shows one, but it has a type.
        NodeKind::Shared { kind, .. } => kind_of(kind),
    }
}

fn attr_of(ino: u64, n: &Node) -> Attr {
    Attr {
        ino,
        kind: kind_of(&n.kind),
        size: n.size(),
        perm: n.attrs.mode & 0o7777,
        uid: n.attrs.uid,
        gid: n.attrs.gid,
        atime: n.attrs.atime,
        mtime: n.attrs.mtime,
        ctime: n.attrs.ctime,
        // A directory's count of subdirectories is not kept: 1 says "unknown", as btrfs
        // does, so no tool takes 2 to mean "no subdirectories".
        nlink: if n.is_dir() { 1 } else { n.nlink() as u32 },
        rdev: n.rdev(),
    }
}

fn name_ok(name: &str) -> MResult<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(err(rustix::io::Errno::INVAL));
    }
    if name.len() > 255 {
        return Err(err(rustix::io::Errno::NAMETOOLONG));
    }
    Ok(())
}

impl MountSession {
    /// Serve `ws` (or its checkpoint `at`, read-only).
    pub fn new(ws: Workspace, at: Option<String>, readonly: bool) -> crate::Result<MountSession> {
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
        Ok(MountSession {
            ws,
            readonly: readonly || at.is_some(),
            writes_paused: AtomicBool::new(false),
            writeback: AtomicBool::new(false),
            at,
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
            private_keys: Mutex::new(HashMap::new()),
            linked_secrets: Mutex::new(HashMap::new()),
        })
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

    /// Whether `path` is hidden: by its name or a directory's above it, or because it is a
    /// file the policy hides when it holds a private key and it does. `node` is the entry's
    /// node when the caller has it; a path that does not exist is hidden only by name.
    fn is_hidden(&self, path: &VPath, node: Option<&Node>) -> bool {
        if self.hidden.is_empty() {
            return false;
        }
        if self.hidden.hides_by_name(path) {
            return true;
        }
        let fetched;
        let node = match node {
            Some(n) => n,
            None => match self.get_node(path) {
                Ok(n) => {
                    fetched = n;
                    &fetched
                }
                Err(_) => return false,
            },
        };
        // A hard-linked file is a secret under every name if it is one under any.
        if let Some(link) = node.link.filter(|l| l.nlink > 1) {
            return self.linked_secret(link.inode, path, node);
        }
        self.hidden.checks_content(path) && self.holds_private_key(node)
    }

    /// Whether a hard-linked file is a secret under any of its names: a walk of the tree,
    /// done once per file until a name comes or goes. An error hides it: that is safe.
    fn linked_secret(&self, inode: u64, path: &VPath, node: &Node) -> bool {
        if let Some(known) = lock(&self.linked_secrets).get(&inode) {
            return *known;
        }
        let secret = self
            .read(|v| self.hidden.refuses(v, path, Some(node)))
            .unwrap_or(true);
        lock(&self.linked_secrets).insert(inode, secret);
        secret
    }

    /// Names came or went: what is known of hard-linked secrets may be stale.
    fn forget_linked_secrets(&self) {
        if !self.hidden.is_empty() {
            lock(&self.linked_secrets).clear();
        }
    }

    /// Whether the regular file `node` starts with a private key (its first
    /// `KEY_SNIFF_BYTES`). A file that cannot be read counts as one: hiding it is safe.
    fn holds_private_key(&self, node: &Node) -> bool {
        let NodeKind::File {
            content: Some(id), ..
        } = &node.kind
        else {
            return false;
        };
        if let Some(known) = lock(&self.private_keys).get(id) {
            return *known;
        }
        let mut prefix = vec![0u8; KEY_SNIFF_BYTES];
        let found = match self.ws.read_content(node, 0, &mut prefix) {
            Ok(n) => secrets::holds_private_key(&prefix[..n]),
            Err(_) => return true,
        };
        let mut known = lock(&self.private_keys);
        if known.len() >= NODE_CACHE_LIMIT {
            known.clear();
        }
        known.insert(*id, found);
        found
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

    fn refuses_writes(&self) -> bool {
        self.readonly || self.writes_paused.load(Ordering::SeqCst)
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
        self.ws
            .read_at(self.at.as_deref(), f)
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

    /// The node at `path`, from the cache when it is current.
    fn get_node(&self, path: &VPath) -> MResult<Node> {
        if let Some(n) = lock(&self.nodes).get(path) {
            return Ok(n.clone());
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let node = self.read(|v| v.get(path))?;
        let mut nodes = lock(&self.nodes);
        // A hard-linked file also changes through its other names, which a change to this
        // path would not drop: never cached.
        if node.link.is_none() && self.generation.load(Ordering::SeqCst) == generation {
            if nodes.len() >= NODE_CACHE_LIMIT {
                nodes.clear();
            }
            nodes.insert(path.clone(), node.clone());
        }
        Ok(node)
    }

    fn path_of(&self, ino: u64) -> MResult<VPath> {
        match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => Ok(p.clone()),
            _ => Err(err(rustix::io::Errno::NOENT)),
        }
    }

    fn ino_for(&self, path: &VPath) -> u64 {
        let mut inodes = lock(&self.inodes);
        if let Some(i) = inodes.by_path.get(path) {
            return *i;
        }
        let ino = inodes.next;
        inodes.next += 1;
        inodes.by_ino.insert(ino, Some(path.clone()));
        inodes.by_path.insert(path.clone(), ino);
        ino
    }

    /// The inode of a name of hard-linked file `link` (the model's inode number): the one
    /// its other names have.
    fn ino_for_linked(&self, path: &VPath, link: u64) -> u64 {
        let mut inodes = lock(&self.inodes);
        let ino = match inodes.by_link.get(&link) {
            Some(i) => *i,
            None => {
                let ino = match inodes.by_path.get(path) {
                    Some(i) => *i,
                    None => {
                        inodes.next += 1;
                        inodes.next - 1
                    }
                };
                inodes.by_link.insert(link, ino);
                ino
            }
        };
        inodes.by_path.insert(path.clone(), ino);
        inodes.names.entry(ino).or_default().insert(path.clone());
        let current = inodes.by_ino.entry(ino).or_insert(None);
        if current.is_none() {
            *current = Some(path.clone());
        }
        ino
    }

    /// The inode of `path`, whose node is `node`.
    fn ino_of(&self, path: &VPath, node: &Node) -> u64 {
        match node.link {
            Some(l) => self.ino_for_linked(path, l.inode),
            None => self.ino_for(path),
        }
    }

    /// `path` and everything below it that has an inode.
    fn subtree(inodes: &Inodes, path: &VPath) -> Vec<(VPath, u64)> {
        let mut out: Vec<(VPath, u64)> = inodes
            .by_path
            .get(path)
            .map(|i| (path.clone(), *i))
            .into_iter()
            .collect();
        match path.below_bounds() {
            Some((lo, hi)) => {
                out.extend(inodes.by_path.range(lo..hi).map(|(p, i)| (p.clone(), *i)))
            }
            None => out.extend(
                inodes
                    .by_path
                    .iter()
                    .filter(|(p, _)| !p.is_root())
                    .map(|(p, i)| (p.clone(), *i)),
            ),
        }
        out
    }

    fn forget_path(&self, path: &VPath) {
        let mut inodes = lock(&self.inodes);
        for (p, ino) in Self::subtree(&inodes, path) {
            inodes.by_path.remove(&p);
            // A hard-linked file lives on under another name.
            let other = inodes.names.get_mut(&ino).and_then(|names| {
                names.remove(&p);
                names.first().cloned()
            });
            inodes.by_ino.insert(ino, other);
        }
    }

    fn move_paths(&self, from: &VPath, to: &VPath) {
        let mut inodes = lock(&self.inodes);
        let moved = Self::subtree(&inodes, from);
        for (p, _) in &moved {
            inodes.by_path.remove(p);
        }
        for (p, ino) in moved {
            let np = p.rebase(from, to);
            if let Some(names) = inodes.names.get_mut(&ino) {
                names.remove(&p);
                names.insert(np.clone());
            }
            inodes.by_ino.insert(ino, Some(np.clone()));
            inodes.by_path.insert(np, ino);
        }
    }

    /// The path of `name` in `parent`, for a change: a secret cannot be created, replaced,
    /// renamed or removed (EACCES).
    fn child(&self, parent: u64, name: &str) -> MResult<VPath> {
        let path = self.visible_child(parent, name)?;
        if self.is_hidden(&path, None) {
            return Err(err(rustix::io::Errno::ACCESS));
        }
        Ok(path)
    }

    /// The path of `name` in `parent`, for a lookup. A secret is there to be seen (its name,
    /// size and times, mode 000), so tools such as git see a tracked secret as present, not
    /// deleted; nothing below a secret directory can be looked up (EACCES).
    fn visible_child(&self, parent: u64, name: &str) -> MResult<VPath> {
        name_ok(name)?;
        let dir = self.path_of(parent)?;
        if self.is_hidden(&dir, None) {
            return Err(err(rustix::io::Errno::ACCESS));
        }
        Ok(dir.join(name))
    }

    /// EACCES when inode `ino` is a secret: its content, link target, attributes and
    /// extended attributes are refused to every process using the mount.
    fn refuse_secret(&self, ino: u64) -> MResult<()> {
        if self.hidden.is_empty() || ino == ROOT_INO {
            return Ok(());
        }
        match self.path_of(ino) {
            Ok(path) if self.is_hidden(&path, None) => Err(err(rustix::io::Errno::ACCESS)),
            _ => Ok(()),
        }
    }

    /// What the kernel sees of `node` at `ino`: a secret shows mode 000.
    fn shown_attr(&self, ino: u64, node: &Node) -> Attr {
        let mut attr = attr_of(ino, node);
        if !self.hidden.is_empty() && self.refuse_secret(ino).is_err() {
            attr.perm = 0;
        }
        attr
    }

    /// `shown_attr` when the caller has the path (a lookup): no inode-table search.
    fn shown_attr_at(&self, ino: u64, path: &VPath, node: &Node) -> Attr {
        let mut attr = attr_of(ino, node);
        if !self.hidden.is_empty() && self.is_hidden(path, Some(node)) {
            attr.perm = 0;
        }
        attr
    }

    /// The current node of an inode, with buffered writes applied.
    fn node(&self, ino: u64) -> MResult<Node> {
        if let Some(d) = lock(&self.dirty).get(&ino) {
            return Ok(d.node.clone());
        }
        let path = match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => p.clone(),
            Some(None) => {
                // Unlinked but open: serve the node it had when opened.
                return lock(&self.handles)
                    .on_inode(ino)
                    .find_map(|h| h.snapshot.clone())
                    .ok_or(err(rustix::io::Errno::NOENT));
            }
            None => return Err(err(rustix::io::Errno::NOENT)),
        };
        self.get_node(&path)
    }

    pub fn getattr(&self, ino: u64) -> MResult<Attr> {
        Ok(self.shown_attr(ino, &self.node(ino)?))
    }

    pub fn lookup(&self, parent: u64, name: &str) -> MResult<Attr> {
        let path = self.visible_child(parent, name)?;
        let node = self.get_node(&path)?;
        let ino = self.ino_of(&path, &node);
        // Buffered writes not yet committed still count.
        let node = self.node(ino).unwrap_or(node);
        Ok(self.shown_attr_at(ino, &path, &node))
    }

    pub fn readlink(&self, ino: u64) -> MResult<Vec<u8>> {
        self.refuse_secret(ino)?;
        match self.node(ino)?.kind {
            NodeKind::Symlink { target } => Ok(target.into_bytes()),
            _ => Err(err(rustix::io::Errno::INVAL)),
        }
    }

    fn new_node(&self, kind: NodeKind, mode: u32, uid: u32, gid: u32) -> Node {
        let mut attrs = Attrs::new(mode, now_ns());
        attrs.uid = uid;
        attrs.gid = gid;
        Node::new(kind, attrs)
    }

    fn create_node(
        &self,
        op: &str,
        parent: u64,
        name: &str,
        node: Node,
        exclusive: bool,
    ) -> MResult<Attr> {
        let path = self.child(parent, name)?;
        self.edit(op, &[&path], |e| {
            if let Some((existing, _)) = e.view().lookup(&path)? {
                if exclusive || existing.is_dir() || !node.is_file() {
                    return Err(Error::AlreadyExists {
                        name: path.display(),
                    });
                }
                return Ok(());
            }
            let mut node = node;
            if let Some((dir, _)) = e.view().lookup(&path.parent().unwrap_or_default())? {
                inherit_setgid(&mut node, &dir);
            }
            e.put_node(&path, node)
        })?;
        self.lookup(parent, name)
    }

    pub fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> MResult<Attr> {
        let dir = self.new_node(
            NodeKind::Dir {
                tree: None,
                files: 0,
                bytes: 0,
            },
            mode,
            uid,
            gid,
        );
        self.create_node("mount.mkdir", parent, name, dir, true)
    }

    /// mknod(2): a regular file, FIFO, character or block device (`rdev`, a Linux `dev_t`)
    /// or socket. A device node is metadata only: the mount is `nodev`, so it never opens.
    /// (Who may make a device node, CAP_MKNOD, the kernel checks before asking.)
    pub fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let kind = Node::special_kind(mode, rdev).ok_or(err(rustix::io::Errno::INVAL))?;
        self.create_node(
            "mount.mknod",
            parent,
            name,
            self.new_node(kind, mode, uid, gid),
            true,
        )
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &str,
        target: &str,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let node = self.new_node(
            NodeKind::Symlink {
                target: target.to_string(),
            },
            0o777,
            uid,
            gid,
        );
        self.create_node("mount.symlink", parent, name, node, true)
    }

    /// Create (and open) a regular file.
    pub fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> MResult<(Attr, u64)> {
        let exclusive = flags & libc_flags::O_EXCL != 0;
        let file = self.new_node(
            NodeKind::File {
                size: 0,
                content: None,
            },
            mode,
            uid,
            gid,
        );
        let attr = self.create_node("mount.create", parent, name, file, exclusive)?;
        if flags & libc_flags::O_TRUNC != 0 && attr.size > 0 {
            self.setattr(
                attr.ino,
                SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )?;
        }
        let fh = self.open(attr.ino, flags)?.fh;
        Ok((self.getattr(attr.ino)?, fh))
    }

    pub fn unlink(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove_entry("mount.unlink", parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove_entry("mount.rmdir", parent, name, true)
    }

    /// unlink(2) (`dir` false: EISDIR on a directory) or rmdir(2) (`dir` true: ENOTDIR on
    /// anything else, ENOTEMPTY unless empty).
    fn remove_entry(&self, op: &str, parent: u64, name: &str, dir: bool) -> MResult<()> {
        let path = self.child(parent, name)?;
        // A hard-linked file down to one other name: that name becomes a plain file again.
        let survivor = {
            let inodes = lock(&self.inodes);
            inodes
                .by_path
                .get(&path)
                .and_then(|ino| inodes.names.get(ino))
                .filter(|names| names.len() == 2)
                .and_then(|names| names.iter().find(|n| **n != path).cloned())
        };
        // The survivor is not among the edit's paths: nothing anyone sees changes there,
        // and a linked name is never in the node cache.
        self.edit(op, &[&path], |e| {
            let (n, _) = e.view().lookup(&path)?.ok_or_else(|| Error::PathNotFound {
                path: path.display(),
            })?;
            match (n.is_dir(), dir) {
                (true, false) => Err(Error::IsADirectory {
                    path: path.display(),
                }),
                (false, true) => Err(Error::NotADirectory {
                    path: path.display(),
                }),
                _ => {
                    e.remove(&path, false)?;
                    match &survivor {
                        Some(s) => e.unshare_single(s),
                        None => Ok(()),
                    }
                }
            }
        })?;
        self.forget_linked_secrets();
        let ino = lock(&self.inodes).by_path.get(&path).copied();
        self.forget_path(&path);
        if let Some(ino) = ino {
            self.refresh_link_count(ino)?;
        }
        Ok(())
    }

    /// link(2): another name for the regular file `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &str) -> MResult<Attr> {
        // Another name for a secret would be a readable one.
        self.refuse_secret(ino)?;
        let target = self.path_of(ino)?;
        let name = self.child(newparent, newname)?;
        // Buffered content must land in the file before it gets a second name.
        self.commit(ino)?;
        let node = self.edit("mount.link", &[&target, &name], |e| e.link(&target, &name))?;
        self.forget_linked_secrets();
        if let Some(l) = node.link {
            let mut inodes = lock(&self.inodes);
            inodes.by_link.insert(l.inode, ino);
            let names = inodes.names.entry(ino).or_default();
            names.insert(target);
            names.insert(name.clone());
            inodes.by_path.insert(name, ino);
        }
        self.refresh_link_count(ino)?;
        self.lookup(newparent, newname)
    }

    /// After a name of `ino` came or went: its buffered node shows the new link count.
    fn refresh_link_count(&self, ino: u64) -> MResult<()> {
        if !lock(&self.dirty).contains_key(&ino) {
            return Ok(());
        }
        let Ok(path) = self.path_of(ino) else {
            return Ok(());
        };
        let node = self.read(|v| v.get(&path))?;
        if let Some(d) = lock(&self.dirty).get_mut(&ino) {
            d.node.link = node.link;
        }
        Ok(())
    }

    /// rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE.
    pub fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
        exchange: bool,
    ) -> MResult<()> {
        let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
        // Buffered content must land under the old name before the name moves.
        let from_ino = lock(&self.inodes).by_path.get(&from).copied();
        if let Some(ino) = from_ino {
            self.commit(ino)?;
        }
        self.edit("mount.rename", &[&from, &to], |e| {
            if exchange {
                return e.exchange(&from, &to);
            }
            if noreplace && e.view().lookup(&to)?.is_some() {
                return Err(Error::AlreadyExists { name: to.display() });
            }
            e.rename(&from, &to)
        })?;
        self.forget_linked_secrets();
        if exchange {
            let tmp = VPath::parse("\u{1}avfs-exchange").unwrap_or_default();
            self.move_paths(&to, &tmp);
            self.move_paths(&from, &to);
            self.move_paths(&tmp, &from);
        } else {
            let replaced = lock(&self.inodes).by_path.get(&to).copied();
            self.forget_path(&to);
            self.move_paths(&from, &to);
            // A hard-linked file replaced under one name has one name less.
            if let Some(ino) = replaced {
                self.refresh_link_count(ino)?;
            }
        }
        Ok(())
    }

    pub fn setattr(&self, ino: u64, s: SetAttr) -> MResult<Attr> {
        self.refuse_secret(ino)?;
        self.set_attrs(ino, s, false)
    }

    /// setattr; with `grow_only` a size only ever extends the file (fallocate), decided in
    /// the same step as the change so a write growing the file meanwhile is not cut back.
    fn set_attrs(&self, ino: u64, mut s: SetAttr, grow_only: bool) -> MResult<Attr> {
        if self.refuses_writes() {
            return Err(err(rustix::io::Errno::ROFS));
        }
        let now = s.ctime.unwrap_or_else(now_ns);
        {
            let mut dirty = lock(&self.dirty);
            if let Some(d) = dirty.get_mut(&ino) {
                if grow_only && s.size.is_some_and(|size| size <= d.buf.len() as u64) {
                    s.size = None;
                }
                // An inode with buffered writes changes in the buffer; committed on close.
                if let Some(size) = s.size {
                    self.check_size(size)?;
                    d.buf.resize(size as usize);
                    set_size(&mut d.node, size);
                }
                apply_setattr(&mut d.node, &s, now);
                // A chmod alone is a change too: the next commit must carry it.
                d.version += 1;
                return Ok(attr_of(ino, &d.node));
            }
        }
        if let Some(size) = s.size {
            self.check_size(size)?;
        }
        let path = match self.path_of(ino) {
            Ok(path) => path,
            // Unlinked but open: the kernel still sets its times (and a holder may chmod
            // or truncate it through its descriptor). It lives only in its handles now.
            Err(e) => return self.set_attrs_unlinked(ino, &s, now).ok_or(e),
        };
        let node = self.edit("mount.setattr", &[&path], |e| {
            // One instant for the whole change (ctime, and any time set to "now"): the
            // kernel's when it sent one, else the edit's own.
            if let Some(t) = s.ctime {
                e.set_now(t);
            }
            let now = e.now();
            if let Some(size) = s.size {
                let (n, _) = e.view().lookup(&path)?.ok_or_else(|| Error::PathNotFound {
                    path: path.display(),
                })?;
                if grow_only && n.size() >= size {
                    return e.view().get(&path);
                }
                if n.is_dir() {
                    return Err(Error::IsADirectory {
                        path: path.display(),
                    });
                }
                let content = e.resize_content(&n, size)?;
                let mut n = n;
                n.kind = NodeKind::File { size, content };
                n.attrs.mtime = now;
                e.put_node(&path, n)?;
            }
            e.update(&path, |n| {
                apply_setattr(n, &s, now);
                Ok(())
            })
        })?;
        Ok(attr_of(ino, &node))
    }

    /// setattr of an unlinked file open through handles with no write buffer: the change
    /// is made to the node they serve. `None` when no handle has it open.
    fn set_attrs_unlinked(&self, ino: u64, s: &SetAttr, now: i64) -> Option<Attr> {
        let mut handles = lock(&self.handles);
        let mut attr = None;
        for n in handles.on_inode(ino).filter_map(|h| h.snapshot.as_mut()) {
            if let Some(size) = s.size {
                set_size(n, size);
            }
            apply_setattr(n, s, now);
            attr = Some(attr_of(ino, n));
        }
        attr
    }

    fn check_size(&self, size: u64) -> MResult<()> {
        self.quota.check_file_size(size).map_err(|e| errno(&e))
    }

    /// Open an inode.
    pub fn open(&self, ino: u64, flags: i32) -> MResult<Opened> {
        self.refuse_secret(ino)?;
        let node = self.node(ino)?;
        let acc = flags & libc_flags::O_ACCMODE;
        let writable = acc == libc_flags::O_WRONLY || acc == libc_flags::O_RDWR;
        if writable && self.refuses_writes() {
            return Err(err(rustix::io::Errno::ROFS));
        }
        if node.is_dir() && writable {
            return Err(err(rustix::io::Errno::ISDIR));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if writable && node.is_file() {
            let mut dirty = lock(&self.dirty);
            match dirty.get_mut(&ino) {
                Some(d) => d.opens += 1,
                // Nothing is read now: the buffer reads the stored content where a
                // read or a partial write needs it, so opening a large file is O(1).
                None => {
                    dirty.insert(
                        ino,
                        Dirty {
                            buf: ContentBuffer::new(node.size() as usize),
                            base: node.clone(),
                            committing: Arc::default(),
                            node: node.clone(),
                            opens: 1,
                            version: 0,
                            committed_version: 0,
                        },
                    );
                }
            }
        }
        lock(&self.handles).insert(
            fh,
            Handle {
                ino,
                append: flags & libc_flags::O_APPEND != 0,
                writable: writable && node.is_file(),
                snapshot: Some(node),
            },
        );
        Ok(Opened {
            fh,
            keep_cache: !writable && !lock(&self.dirty).contains_key(&ino),
            flush: writable,
        })
    }

    /// Read into `buf` from `offset`; returns how many bytes (short only at end of file).
    pub fn read_data_into(&self, ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> MResult<usize> {
        let buffered = lock(&self.dirty).get(&ino).map(|d| {
            let (n, from_base) = d.buf.read(offset as usize, buf);
            let base = (!from_base.is_empty()).then(|| d.base.clone());
            (n, from_base, base)
        });
        if let Some((n, from_base, base)) = buffered {
            // Unchanged ranges come from the stored content, read with no lock held. It
            // is immutable, so a write landing meanwhile only makes this read the older
            // bytes, as a read racing a write may.
            if let Some(base) = base {
                for r in from_base {
                    self.ws
                        .read_content(&base, r.from, &mut buf[r.at..r.at + r.len])
                        .map_err(|e| errno(&e))?;
                }
            }
            return Ok(n);
        }
        let node = match lock(&self.handles).get(fh) {
            Some(h)
                if lock(&self.inodes)
                    .by_ino
                    .get(&ino)
                    .is_some_and(Option::is_none) =>
            {
                h.snapshot.clone()
            }
            _ => None,
        };
        let node = match node {
            Some(n) => n,
            None => self.node(ino)?,
        };
        if node.is_dir() {
            return Err(err(rustix::io::Errno::ISDIR));
        }
        self.ws
            .read_content(&node, offset, buf)
            .map_err(|e| errno(&e))
    }

    /// Run `f` on `ino`'s write buffer. `f` returns `Err` with the chunks it needs from the
    /// buffer's base first: they are read with no lock held (each is a store read) and `f`
    /// runs again, so the check and the change it guards happen in one locked step.
    fn with_buffer<R>(
        &self,
        ino: u64,
        mut f: impl FnMut(&mut Dirty) -> Result<MResult<R>, Vec<usize>>,
    ) -> MResult<R> {
        loop {
            let (base, shape, spans) = {
                let mut dirty = lock(&self.dirty);
                let d = dirty.get_mut(&ino).ok_or(err(rustix::io::Errno::BADF))?;
                match f(d) {
                    Ok(done) => return done,
                    Err(need) => {
                        let spans: Vec<_> =
                            need.into_iter().map(|i| (i, d.buf.base_span(i))).collect();
                        (d.base.clone(), d.buf.shape(), spans)
                    }
                }
            };
            let mut loaded = Vec::with_capacity(spans.len());
            for (i, (from, len)) in spans {
                let mut bytes = vec![0; len];
                self.ws
                    .read_content(&base, from, &mut bytes)
                    .map_err(|e| errno(&e))?;
                loaded.push((i, bytes));
            }
            if let Some(d) = lock(&self.dirty).get_mut(&ino) {
                for (i, bytes) in loaded {
                    d.buf.insert_base(i, shape, bytes);
                }
            }
        }
    }

    /// Write at `offset` (at the end for an O_APPEND handle). `kill_setid`: the writer
    /// may not keep set-ID bits (the kernel says so per write), and who it is.
    pub fn write_data(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_setid: Option<Writer>,
    ) -> MResult<u32> {
        let append = !self.writeback.load(Ordering::Relaxed)
            && lock(&self.handles).get(fh).is_some_and(|h| h.append);
        let over_limit = self.with_buffer(ino, |d| {
            let start = if append { d.buf.len() } else { offset as usize };
            let need = d.buf.missing_for_write(start, data.len());
            if !need.is_empty() {
                return Err(need);
            }
            Ok(self.write_buffered(d, start, data, kill_setid))
        })?;
        if over_limit {
            self.commit(ino)?;
        }
        Ok(data.len() as u32)
    }

    /// The write itself, with every chunk it needs in memory. Returns whether the buffer
    /// holds enough uncommitted chunks to commit now.
    fn write_buffered(
        &self,
        d: &mut Dirty,
        start: usize,
        data: &[u8],
        kill_setid: Option<Writer>,
    ) -> MResult<bool> {
        let end = start + data.len();
        let len = d.buf.len();
        if end > len {
            self.check_size(end as u64)?;
            let grow = (end - len) as u64;
            if let Some(limit) = self.quota.max_size_mb {
                let total = self.ws.totals().map(|(_, bytes)| bytes).unwrap_or(0);
                let pending = (len as u64).saturating_sub(d.base.size());
                if total.saturating_add(pending).saturating_add(grow)
                    > limit.saturating_mul(1024 * 1024)
                {
                    return Err(err(rustix::io::Errno::DQUOT));
                }
            }
        }
        d.buf.write(start, data);
        kill_privs_on_write(&mut d.node, kill_setid);
        let now = now_ns();
        set_size(&mut d.node, d.buf.len() as u64);
        d.node.attrs.mtime = now;
        d.node.attrs.ctime = now;
        d.version += 1;
        Ok(d.buf.touched_count() * CHUNK_SIZE > DIRTY_LIMIT)
    }

    /// Write an inode's buffered content in one transaction.
    pub fn commit(&self, ino: u64) -> MResult<()> {
        loop {
            let Some(gate) = lock(&self.dirty).get(&ino).map(|d| d.committing.clone()) else {
                return Ok(());
            };
            let _one_at_a_time = lock(&gate);
            // The buffer this gate belongs to may have been closed and another opened
            // meanwhile: a commit must hold the gate of the buffer it stores. Once held,
            // that buffer stays, as `release` drops one only after a commit of its own.
            if !lock(&self.dirty)
                .get(&ino)
                .is_some_and(|d| Arc::ptr_eq(&d.committing, &gate))
            {
                continue;
            }
            return match self.commit_once(ino, true) {
                Ok(done) => done,
                // The patch did not apply, e.g. the stored content was shorter than the
                // file (a size set past its stored bytes): store the whole buffer instead.
                Err(Retry) => self
                    .commit_once(ino, false)
                    .unwrap_or(Err(err(rustix::io::Errno::IO))),
            };
        }
    }

    /// One commit attempt, patching the stored content when `patch` allows.
    fn commit_once(&self, ino: u64, patch: bool) -> Result<MResult<()>, Retry> {
        let prepared = self.with_buffer(ino, |d| {
            if d.version == d.committed_version {
                return Ok(Ok(None));
            }
            // Stored in chunks: only the chunks changed since are copied out and stored,
            // so a small write into a large file (a database page) costs that chunk.
            let base = d
                .base
                .content_id()
                .filter(|_| patch && d.base.size() > CHUNK_SIZE as u64);
            let changes = d.buf.changes(base)?;
            let touched = d.buf.take_touched();
            Ok(Ok(Some((changes, touched, d.node.clone(), d.version))))
        });
        let (changes, touched, node, version) = match prepared {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(Ok(())),
            // Closed meanwhile: nothing left to commit.
            Err(e) if e == err(rustix::io::Errno::BADF) => return Ok(Ok(())),
            Err(e) => return Ok(Err(e)),
        };
        let result = self.store_snapshot(ino, &changes, &node);
        let len = node.size();
        if cfg!(debug_assertions)
            && len <= crate::model::limits::MAX_TEXT_BYTES
            && let Ok(Some(content)) = &result
        {
            // Debug builds check every stored content id against encoding it whole.
            let stored = node_with_content(&node, *content, len);
            let whole = crate::model::node::content_id_by_chunks(len, |at, out| {
                self.ws.read_content(&stored, at, out).map(|_| ())
            });
            debug_assert_eq!(Some(*content), whole.ok(), "content patch differs");
        }
        let mut dirty = lock(&self.dirty);
        let Some(d) = dirty.get_mut(&ino) else {
            return Ok(result.map(|_| ()));
        };
        match result {
            Ok(Some(stored)) => {
                d.committed_version = version;
                if d.version == version {
                    d.node = node_with_content(&d.node, stored, len);
                }
                // What was stored becomes the base: the chunks not written since leave
                // memory, so a long write holds at most about DIRTY_LIMIT of it.
                d.base = node_with_content(&node, stored, len);
                d.buf.rebase(len as usize);
                // New content under every name: it may now hold a private key.
                if node.link.is_some() {
                    self.forget_linked_secrets();
                }
                Ok(Ok(()))
            }
            other => {
                // Not stored (or the file has no path any more): a later commit stores
                // these chunks too.
                d.buf.retouch(touched);
                // A patch that did not apply (`patch_content` refuses it as invalid) is
                // retried whole; any other error (a quota, the store) would only repeat.
                match (other, &changes) {
                    (Err(e), Changes::Chunks { base: Some(_), .. })
                        if e == err(rustix::io::Errno::INVAL) =>
                    {
                        Err(Retry)
                    }
                    (other, _) => Ok(other.map(|_| ())),
                }
            }
        }
    }

    /// Store a buffered file's content and attributes at its path. Returns the stored
    /// content, or None when the file has no path any more (its content goes nowhere).
    fn store_snapshot(
        &self,
        ino: u64,
        changes: &Changes,
        node: &Node,
    ) -> MResult<Option<Option<ObjectId>>> {
        let path = match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => p.clone(),
            // Unlinked while open: its content goes nowhere.
            _ => return Ok(None),
        };
        self.edit("mount.write", &[&path], |e| {
            let content = e.store_changes(changes)?;
            let size = node.size();
            // Not a file at this path any more (unlinked, or in the middle of a rename):
            // not stored; a later commit tries again at the path the inode has then.
            let mut n = match e.view().lookup(&path)? {
                Some((cur, _)) if cur.is_file() => cur,
                _ => return Ok(None),
            };
            n.kind = NodeKind::File { size, content };
            n.attrs = node.attrs.clone();
            n.xattrs = node.xattrs.clone();
            e.put_node(&path, n)?;
            Ok(Some(content))
        })
    }

    /// close(2) of a handle. Under the writeback cache the commit waits for the release
    /// instead, which the kernel sends without making close wait: until then every read
    /// of the inode is served from its buffer, and anything that needs the content in the
    /// store (rename, link, fsync, a recorded command) commits it first. Without the
    /// writeback cache a size quota may be set, and its error belongs to close.
    pub fn flush(&self, ino: u64) -> MResult<()> {
        if !self.needs_flush() {
            return Ok(());
        }
        self.commit(ino)
    }

    /// Whether close(2) has anything to do here (see `flush`). Once the writeback cache is
    /// on, for the rest of the session it has not, and the FUSE adapter tells the kernel
    /// to stop asking: a round trip saved on every close.
    pub fn needs_flush(&self) -> bool {
        !self.writeback.load(Ordering::Relaxed)
    }

    /// Commit and make durable.
    pub fn fsync(&self, ino: u64) -> MResult<()> {
        self.commit(ino)?;
        self.ws.vault().sync().map_err(|e| errno(&e))
    }

    pub fn release(&self, ino: u64, fh: u64) -> MResult<()> {
        let writable = lock(&self.handles).remove(fh).is_some_and(|h| h.writable);
        let mut counted = !writable;
        let mut attempts = 0;
        loop {
            let result = self.commit(ino);
            attempts += 1;
            let linked = matches!(lock(&self.inodes).by_ino.get(&ino), Some(Some(_)));
            let readers = !linked && lock(&self.handles).any_open(ino);
            let mut dirty = lock(&self.dirty);
            let Some(d) = dirty.get_mut(&ino) else {
                return result;
            };
            if !counted {
                d.opens = d.opens.saturating_sub(1);
                counted = true;
            }
            if d.opens > 0 {
                return result;
            }
            // The last writer is gone. A change after that commit (a truncate or chmod by
            // path) would go with the buffer: commit it too. (A path that is briefly not
            // the file's, in the middle of a rename, passes after a retry.)
            if linked && result.is_ok() && d.version != d.committed_version && attempts < 4 {
                continue;
            }
            // Unlinked, with readers still open: its content is nowhere else, so they keep
            // reading the buffer until the last of them closes.
            if !linked && readers {
                return result;
            }
            let node = d.node.clone();
            dirty.remove(&ino);
            drop(dirty);
            // Handles still open keep the file as last stored, should it be unlinked.
            for h in lock(&self.handles).on_inode(ino) {
                h.snapshot = Some(node.clone());
            }
            return result;
        }
    }

    pub fn opendir(&self, ino: u64) -> MResult<u64> {
        self.refuse_secret(ino)?;
        let path = self.path_of(ino)?;
        let children = self.read(|v| v.list(&path))?;
        let parent = path.parent().map(|p| self.ino_for(&p)).unwrap_or(ROOT_INO);
        let mut entries = vec![
            (ino, AttrKind::Dir, ".".to_string()),
            (parent, AttrKind::Dir, "..".to_string()),
        ];
        for c in children {
            let child_ino = self.ino_of(&path.join(&c.name), &c.node);
            entries.push((child_ino, kind_of(&c.node.kind), c.name));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.dirs).insert(fh, entries);
        Ok(fh)
    }

    /// Entries from `offset` on: a snapshot taken at opendir, so offsets stay stable while
    /// the directory changes.
    pub fn readdir(&self, fh: u64, offset: u64) -> MResult<Vec<(u64, u64, AttrKind, String)>> {
        let dirs = lock(&self.dirs);
        let entries = dirs.get(&fh).ok_or(err(rustix::io::Errno::BADF))?;
        Ok(entries
            .iter()
            .enumerate()
            .skip(offset as usize)
            .map(|(i, (ino, k, n))| (*ino, i as u64 + 1, *k, n.clone()))
            .collect())
    }

    pub fn releasedir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
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

    pub fn getxattr(&self, ino: u64, name: &str) -> MResult<Vec<u8>> {
        // A secret shows no extended attributes (`ls -l` asks every entry for its ACL).
        if self.refuse_secret(ino).is_err() {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.node(ino)?
            .xattrs
            .get(name)
            .cloned()
            .ok_or(err(rustix::io::Errno::NODATA))
    }

    pub fn listxattr(&self, ino: u64) -> MResult<Vec<u8>> {
        if self.refuse_secret(ino).is_err() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for k in self.node(ino)?.xattrs.keys() {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// `flags`: XATTR_CREATE (1) fails if present, XATTR_REPLACE (2) fails if absent.
    pub fn setxattr(&self, ino: u64, name: &str, value: &[u8], flags: i32) -> MResult<()> {
        self.refuse_secret(ino)?;
        // The mount has no POSIX ACLs: stored as a plain xattr, an ACL would say one thing
        // and the mode bits another (`sed -i` copies the original's ACL onto its 0600 temp
        // file, and the edited file stayed 0600). Refused, tools fall back to chmod.
        if name.starts_with("system.posix_acl_") {
            return Err(err(rustix::io::Errno::OPNOTSUPP));
        }
        let exists = self.node(ino)?.xattrs.contains_key(name);
        if flags & 1 != 0 && exists {
            return Err(err(rustix::io::Errno::EXIST));
        }
        if flags & 2 != 0 && !exists {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.commit(ino)?;
        let path = self.path_of(ino)?;
        self.edit("mount.setxattr", &[&path], |e| {
            e.update(&path, |n| {
                n.xattrs.insert(name.to_string(), value.to_vec());
                Ok(())
            })
        })?;
        self.refresh_dirty_meta(ino)
    }

    pub fn removexattr(&self, ino: u64, name: &str) -> MResult<()> {
        self.refuse_secret(ino)?;
        if !self.node(ino)?.xattrs.contains_key(name) {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.commit(ino)?;
        let path = self.path_of(ino)?;
        self.edit("mount.removexattr", &[&path], |e| {
            e.update(&path, |n| {
                n.xattrs.remove(name);
                Ok(())
            })
        })?;
        self.refresh_dirty_meta(ino)
    }

    fn refresh_dirty_meta(&self, ino: u64) -> MResult<()> {
        let has_dirty = lock(&self.dirty).contains_key(&ino);
        if has_dirty {
            let path = self.path_of(ino)?;
            let node = self.read(|v| v.get(&path))?;
            if let Some(d) = lock(&self.dirty).get_mut(&ino) {
                d.node.xattrs = node.xattrs;
                d.node.attrs.ctime = node.attrs.ctime;
            }
        }
        Ok(())
    }

    /// fallocate mode 0: make sure the file is at least `offset + len` long.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: i32) -> MResult<()> {
        if mode != 0 {
            return Err(err(rustix::io::Errno::OPNOTSUPP));
        }
        let grow = SetAttr {
            size: Some(offset + len),
            keep_setid: true,
            ..Default::default()
        };
        self.set_attrs(ino, grow, true).map(|_| ())
    }

    /// Commit everything and record the whole mount session as one operation in the op log.
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

/// `node` with the given content of `size` bytes.
fn node_with_content(node: &Node, content: Option<ObjectId>, size: u64) -> Node {
    let mut n = node.clone();
    n.kind = NodeKind::File { size, content };
    n
}

fn set_size(n: &mut Node, size: u64) {
    if let NodeKind::File { size: s, .. } = &mut n.kind {
        *s = size;
    }
}

/// A node made in a set-group-ID directory belongs to the directory's group, not the
/// creator's, and a directory made there is set-group-ID too (the BSD rule Linux applies
/// to such directories; the kernel leaves it to a FUSE file system).
fn inherit_setgid(node: &mut Node, dir: &Node) {
    if dir.attrs.mode & 0o2000 == 0 {
        return;
    }
    node.attrs.gid = dir.attrs.gid;
    if node.is_dir() {
        node.attrs.mode |= 0o2000;
    }
}

/// What a write, truncate or chown does to privileges, as the kernel does on a native file
/// system (a FUSE file system's duty under FUSE_HANDLE_KILLPRIV_V2): file capabilities go,
/// and unless `keep_setid` the set-user-ID bit goes, with the set-group-ID bit when the file
/// is group-executable.
fn kill_privs(n: &mut Node, keep_setid: bool) {
    if !n.is_file() {
        return;
    }
    if !n.xattrs.is_empty() {
        n.xattrs.remove("security.capability");
    }
    if !keep_setid {
        let group_exec = n.attrs.mode & 0o010 != 0;
        n.attrs.mode &= !0o4000;
        if group_exec {
            n.attrs.mode &= !0o2000;
        }
    }
}

/// A write by `writer` without CAP_FSETID (`None`: one that may keep set-ID bits). Beyond
/// `kill_privs`, set-group-ID goes when the writer is not in the file's group, as the
/// kernel's `setattr_should_drop_sgid` decides for a native file system.
fn kill_privs_on_write(n: &mut Node, writer: Option<Writer>) {
    let Some(w) = writer else {
        return kill_privs(n, true);
    };
    let had_setuid = n.attrs.mode & 0o4000 != 0;
    kill_privs(n, false);
    if !n.is_file() || n.attrs.mode & 0o2000 == 0 {
        return;
    }
    // The kernel flags a write only when some bit must go: with no set-user-ID bit, that
    // was this one, whatever the writer's groups.
    let member = w.in_group(n.attrs.gid).unwrap_or(had_setuid);
    if !member {
        n.attrs.mode &= !0o2000;
    }
}

fn apply_setattr(n: &mut Node, s: &SetAttr, now: i64) {
    if s.size.is_some() {
        kill_privs(n, s.keep_setid);
    }
    if s.uid.is_some() || s.gid.is_some() {
        // chown clears set-ID bits even for root (Linux since 2.2.13).
        kill_privs(n, false);
    }
    if let Some(m) = s.mode {
        n.attrs.mode = m & 0o7777;
    }
    if let Some(u) = s.uid {
        n.attrs.uid = u;
    }
    if let Some(g) = s.gid {
        n.attrs.gid = g;
    }
    let at = |t: SetTime| match t {
        SetTime::At(t) => t,
        SetTime::Now => now,
    };
    if let Some(a) = s.atime {
        n.attrs.atime = at(a);
    }
    if let Some(m) = s.mtime {
        n.attrs.mtime = at(m);
    }
    n.attrs.ctime = now;
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
