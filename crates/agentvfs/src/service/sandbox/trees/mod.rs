//! The materialized tree cache: a fork's state at an immutable root written out as a
//! native directory, the other source of an overlay's lower layer (besides a read-only
//! FUSE view of the root). Reads in the command then cost what they cost on the host disk.
//!
//! Trees are keyed by root id and the secret patterns left out of them, and live under a
//! 0700 directory in `$AVFS_HOME`. A tree is made incrementally: the fork's previous tree,
//! when no command is using it, is renamed into place and changed by the difference
//! between the two roots, which costs what the command wrote, not the size of the fork.
//! Right after an ingest this is done with the command's upper layer at hand
//! (`TreeCache::advance`): the files it wrote are renamed into the tree rather than
//! written again from the vault. Otherwise the root is written out whole. A command holds a shared `flock` on its
//! tree's lock file while it runs; taking a tree over or evicting it needs the exclusive
//! lock, so a tree in use is never changed or removed. The cache keeps at most
//! [`MAX_TREES`] trees and a byte budget, evicting the least recently leased first.
//!
//! A tree's files are never shared with another tree: a tree is changed only by the one
//! process that took it over, and it replaces entries rather than writing into them.
//! Hard-linked files that came or went whole are an update; a change to one that stayed
//! (its body, or its number of names) is written whole, as is one that changes a
//! directory's extended attributes.
//!
//! Secrets never reach the tree: each has an empty placeholder of mode 000 there
//! (`TreeLease::refused`), which the sandbox covers with a FUSE view of just the secrets
//! (`MountFs::showing_only`), so they are listed and unreadable as on a FUSE lower.

mod update;

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use self::update::{LinkChanges, Update, place};
use super::super::secrets::SecretPaths;
use super::super::transfer;
use crate::error::{Error, Result};
use crate::model::View;
use crate::model::Workspace;
use crate::model::diff::StateRef;
use crate::model::id::ObjectId;
use crate::model::node::Node;
use crate::model::path::VPath;

/// The most trees kept at once, whatever their size.
pub const MAX_TREES: usize = 8;

/// The default byte budget of the cache (`[sandbox] tree_cache_mb`).
pub const DEFAULT_BUDGET_MB: u64 = 4096;

/// The cache directory and its budget.
pub struct TreeCache {
    dir: PathBuf,
    budget: u64,
}

/// A tree in use: its directory stays as it is until the lease is dropped.
pub struct TreeLease {
    path: PathBuf,
    /// How the tree was had: `cached`, `updated` (from the fork's previous tree) or
    /// `written` (whole).
    pub how: &'static str,
    /// Workspace-relative paths of the placeholders that stand for secrets: empty files
    /// and directories of mode 000 that hold nothing of the secret, for the sandbox to
    /// cover with the fork's own unreadable entries.
    pub refused: Vec<String>,
    _lock: File,
}

/// What is known of a tree, in `KEY.json` beside it: written whole (a new file renamed
/// into place) before the tree gets its name, never changed after.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct TreeInfo {
    /// What the tree's files take on disk (for the budget).
    bytes: u64,
    /// Its secrets' placeholders (see `TreeLease::refused`).
    refused: Vec<String>,
}

impl TreeInfo {
    fn read(path: &Path) -> TreeInfo {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
}

impl TreeLease {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TreeCache {
    /// The cache at `dir` (made 0700 if missing), keeping at most `budget_mb` MiB.
    pub fn open(dir: PathBuf, budget_mb: u64) -> Result<TreeCache> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::io("creating", &dir, e))?;
        let cache = TreeCache {
            dir,
            budget: budget_mb.saturating_mul(1 << 20),
        };
        cache.remove_stale();
        Ok(cache)
    }

    fn key(root: ObjectId, secrets: &SecretPaths) -> String {
        format!("{}-{}", root.to_hex(), secrets.fingerprint())
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }

    fn info_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// A fresh name for a scratch entry of this process (`.build-PID-N...`), which
    /// `remove_stale` removes once the process is gone.
    fn scratch(&self, what: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic).tv_nsec;
        self.dir
            .join(format!(".build-{}-{n}-{t}{what}", std::process::id()))
    }

    /// Open `key`'s lock file (made if `create`) and hold it shared: once held, the tree
    /// cannot be taken over or evicted. `None` when there is no lock file.
    fn hold(&self, key: &str, create: bool) -> Result<Option<File>> {
        let path = self.lock_path(key);
        loop {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(create)
                .create(create)
                .truncate(false)
                .open(&path);
            let lock = match opened {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
                Err(e) => return Err(Error::io("opening", &path, e)),
            };
            rustix::fs::flock(&lock, FlockOperation::LockShared)
                .map_err(|e| Error::io("locking", &path, e.into()))?;
            // Taken or evicted between the open and the lock: its lock file was unlinked.
            if same_file(&lock, &path) {
                return Ok(Some(lock));
            }
            if !create {
                return Ok(None);
            }
        }
    }

    /// Where the key of the fork's newest tree is kept.
    fn last_file(&self, ws: &Workspace) -> PathBuf {
        let mut h = blake3::Hasher::new();
        h.update(ws.vault().path().as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update(ws.name().as_bytes());
        self.dir
            .join(format!(".last-{}", &h.finalize().to_hex()[..16]))
    }

    /// The tree of `root` with `secrets` left out, made now if it is not cached.
    pub fn lease(
        &self,
        ws: &Workspace,
        root: ObjectId,
        secrets: &SecretPaths,
    ) -> Result<TreeLease> {
        let key = Self::key(root, secrets);
        if let Some(lease) = self.existing(&key, "cached")? {
            return Ok(lease);
        }
        self.make(ws, root, secrets, &key, None)
            .map(|made| made.expect("a tree is written whole when it cannot be updated"))
    }

    /// Bring the fork's previous tree to `root` right after a command's `upper` layer was
    /// ingested as the change that made `root`: the files the command wrote are moved
    /// from the layer into the tree instead of being written again from the vault. Does
    /// nothing (the next lease writes the tree) where the previous tree is in use, or
    /// the change needs a whole write. Returns how the tree was had, if it was.
    pub fn advance(
        &self,
        ws: &Workspace,
        root: ObjectId,
        secrets: &SecretPaths,
        upper: &Path,
    ) -> Result<Option<&'static str>> {
        let key = Self::key(root, secrets);
        if self.dir.join(&key).is_dir() {
            return Ok(None);
        }
        // Only real directories of the layer lead to a donated file, checked once each:
        // a symlink in the layer never sends a rename elsewhere.
        let real_dirs: std::cell::RefCell<std::collections::HashSet<PathBuf>> = Default::default();
        let real_dir = |dir: &Path| -> bool {
            if dir == upper || real_dirs.borrow().contains(dir) {
                return true;
            }
            let ok = dir.parent().is_some_and(|p| p.starts_with(upper))
                && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
            if ok {
                real_dirs.borrow_mut().insert(dir.to_path_buf());
            }
            ok
        };
        let donor = |path: &VPath, node: &Node| -> Option<PathBuf> {
            use std::os::unix::fs::MetadataExt;
            let from = upper.join(path.as_str().trim_start_matches('/'));
            let ancestors: Vec<&Path> = from
                .ancestors()
                .skip(1)
                .take_while(|a| a.starts_with(upper))
                .collect();
            if !ancestors.iter().rev().all(|a| real_dir(a)) {
                return None;
            }
            let meta = std::fs::symlink_metadata(&from).ok()?;
            let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
            // One name, the size and time the vault took, and the whole content in the
            // file (never an overlay metadata-only copy).
            let whole = transfer::xattrs::get(&from, "trusted.overlay.metacopy").is_none()
                && transfer::xattrs::get(&from, "user.overlay.metacopy").is_none();
            let fits = meta.is_file()
                && meta.nlink() == 1
                && meta.len() == node.size()
                && mtime == node.attrs.mtime
                && whole;
            // No inode flags the vault does not keep (`chattr +A`, no-COW, verity, ...): a
            // file written from the vault has none.
            const PLAIN: u32 = 0x0008_0000 | 0x0004_0000 | 0x1000_0000; // extents, huge, inline
            let plain = || {
                std::fs::File::open(&from).is_ok_and(|f| {
                    rustix::fs::ioctl_getflags(&f).is_ok_and(|fl| fl.bits() & !PLAIN == 0)
                })
            };
            (fits && plain()).then_some(from)
        };
        Ok(self
            .make(ws, root, secrets, &key, Some(&donor))?
            .map(|lease| lease.how))
    }

    /// Make the tree of `root` as `key`: from the fork's previous tree when it can be
    /// taken over and updated (moving in what `donor` has), else written whole, except
    /// with a `donor` (an advance), which then makes nothing.
    fn make(
        &self,
        ws: &Workspace,
        root: ObjectId,
        secrets: &SecretPaths,
        key: &str,
        donor: Option<&transfer::Donor<'_>>,
    ) -> Result<Option<TreeLease>> {
        let key = key.to_string();
        let build = self.scratch("");
        let refuses = |view: &View<'_>, path: &VPath, node: &Node| {
            node.kind.is_device() || secrets.refuses(view, path, Some(node)).unwrap_or(true)
        };
        // Secrets met while writing the new state: each gets a placeholder afterwards.
        let met: std::cell::RefCell<Vec<(VPath, Node)>> = Default::default();
        let skip = |view: &View<'_>, path: &VPath, node: &Node| {
            let refused = refuses(view, path, node);
            if refused && !node.kind.is_device() {
                met.borrow_mut().push((path.clone(), node.clone()));
            }
            refused
        };
        let mut how = "written";
        let mut info = TreeInfo::default();
        // A change of hard links an update cannot make leaves the previous tree as it is.
        let fits = |prev: ObjectId| {
            ws.vault()
                .with_views(&StateRef::Root(prev), &StateRef::Root(root), |a, b| {
                    LinkChanges::between(a, b)
                })
                .ok()
                .flatten()
        };
        let linked = std::cell::RefCell::new(std::collections::HashMap::new());
        if let Some((prev, old, links)) = self.take_previous(ws, &key, &build, fits) {
            let updated =
                ws.vault()
                    .with_views(&StateRef::Root(prev), &StateRef::Root(root), |a, b| {
                        let mut u = Update {
                            va: a,
                            vb: b,
                            refuses: &refuses,
                            skip: &skip,
                            donor,
                            changed: Vec::new(),
                            added: 0,
                            removed: 0,
                            links,
                            linked: &linked,
                        };
                        if !u.tree(&build)? {
                            return Ok(None);
                        }
                        let changed = u.changed;
                        let kept = old.refused.into_iter().filter(|p| {
                            !changed
                                .iter()
                                .any(|c: &VPath| VPath::parse(p).is_ok_and(|p| p.starts_with(c)))
                        });
                        let placed = place(b, &build, &met.borrow())?;
                        Ok(Some(TreeInfo {
                            bytes: (old.bytes + u.added).saturating_sub(u.removed),
                            refused: kept.chain(placed).collect(),
                        }))
                    });
            match updated {
                Ok(Some(i)) => {
                    how = "updated";
                    info = i;
                }
                // Hard links, or the tree could not be changed: write it whole.
                Ok(None) | Err(_) => remove_tree(&build),
            }
        }
        if how == "written" && donor.is_some() {
            return Ok(None);
        }
        if how == "written" {
            let _ = std::fs::remove_dir_all(&build);
            met.borrow_mut().clear();
            let made = ws.read_root(root, |view| {
                transfer::materialize_entry(
                    view,
                    &VPath::root(),
                    &build,
                    &skip,
                    None,
                    &mut Default::default(),
                )?;
                place(view, &build, &met.borrow())
            });
            match made {
                Ok(refused) => {
                    info = TreeInfo {
                        bytes: tree_bytes(&build),
                        refused,
                    }
                }
                Err(e) => {
                    remove_tree(&build);
                    return Err(e);
                }
            }
        }
        info.refused.sort();
        // What is known of it, then its lock file, held shared: nobody can take the tree
        // over or evict it once it has a name.
        let tmp = self.scratch(".json");
        std::fs::write(&tmp, serde_json::to_vec(&info).unwrap_or_default())
            .and_then(|()| std::fs::rename(&tmp, self.info_path(&key)))
            .map_err(|e| {
                remove_tree(&build);
                Error::io("writing", &tmp, e)
            })?;
        let lock = self.hold(&key, true)?.expect("made");
        let path = self.dir.join(&key);
        if std::fs::rename(&build, &path).is_err() {
            // Made meanwhile by another command: use that one.
            remove_tree(&build);
            if !path.is_dir() {
                return Err(Error::Storage(format!(
                    "the tree cache lost {}",
                    path.display()
                )));
            }
        }
        let tmp = self.scratch("-last");
        if std::fs::write(&tmp, &key).is_ok() {
            let _ = std::fs::rename(&tmp, self.last_file(ws));
        }
        self.evict(&key);
        Ok(Some(TreeLease {
            path,
            how,
            refused: info.refused,
            _lock: lock,
        }))
    }

    /// The cached tree `key`, leased, if there is one.
    fn existing(&self, key: &str, how: &'static str) -> Result<Option<TreeLease>> {
        let Some(lock) = self.hold(key, false)? else {
            return Ok(None);
        };
        let path = self.dir.join(key);
        if !path.is_dir() {
            return Ok(None);
        }
        // Touched, for the eviction order.
        let _ = lock.set_modified(std::time::SystemTime::now());
        Ok(Some(TreeLease {
            path,
            how,
            refused: TreeInfo::read(&self.info_path(key)).refused,
            _lock: lock,
        }))
    }

    /// Take the fork's previous tree for `build`, if it is not in use and `fits` says
    /// something of its root: its root id, what its lock file said, and what `fits` said.
    fn take_previous<T>(
        &self,
        ws: &Workspace,
        key: &str,
        build: &Path,
        fits: impl Fn(ObjectId) -> Option<T>,
    ) -> Option<(ObjectId, TreeInfo, T)> {
        let prev = std::fs::read_to_string(self.last_file(ws)).ok()?;
        if prev == key || prev.contains('/') || prev.starts_with('.') {
            return None;
        }
        let (root, fp) = prev.split_once('-')?;
        if fp != key.split_once('-')?.1 {
            return None;
        }
        let root = ObjectId::from_hex(root)?;
        let fit = fits(root)?;
        self.take(&prev, build).map(|info| (root, info, fit))
    }

    /// Move tree `key` to `to` if nobody uses it, and forget it: what was known of it.
    /// A lock file whose tree is gone is forgotten too.
    fn take(&self, key: &str, to: &Path) -> Option<TreeInfo> {
        let lock_path = self.lock_path(key);
        let lock = File::open(&lock_path).ok()?;
        if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err()
            || !same_file(&lock, &lock_path)
        {
            return None;
        }
        let info = TreeInfo::read(&self.info_path(key));
        let moved = std::fs::rename(self.dir.join(key), to);
        if let Err(e) = &moved
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return None;
        }
        let _ = std::fs::remove_file(self.info_path(key));
        let _ = std::fs::remove_file(&lock_path);
        moved.ok().map(|()| info)
    }

    /// Remove the least recently leased trees not in use until the cache fits.
    fn evict(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut trees: Vec<(std::time::SystemTime, u64, String)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let key = name.strip_suffix(".lock")?.to_string();
                let meta = e.metadata().ok()?;
                let bytes = TreeInfo::read(&self.info_path(&key)).bytes;
                Some((meta.modified().ok()?, bytes, key))
            })
            .collect();
        trees.sort();
        let mut total: u64 = trees.iter().map(|t| t.1).sum();
        let mut count = trees.len();
        for (_, bytes, key) in trees {
            if count <= MAX_TREES && total <= self.budget {
                break;
            }
            if key == keep {
                continue;
            }
            let gone = self.scratch("-gone");
            if self.take(&key, &gone).is_some() {
                remove_tree(&gone);
                total = total.saturating_sub(bytes);
                count -= 1;
            } else if !self.dir.join(&key).exists() {
                // A lock file left without its tree (now forgotten, or in use): not a tree.
                count -= 1;
            }
        }
    }

    /// Remove what killed processes left: their scratch entries (`.build-PID-*`: trees
    /// being built or evicted, files being written). A process of another pid namespace
    /// sharing this `$AVFS_HOME` is not told apart from a dead one.
    pub fn remove_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(".build-") else {
                continue;
            };
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(crate::service::mounts::pid_alive) {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            } else {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether the open `lock` is still the file at `path` (not one unlinked by an eviction).
fn same_file(lock: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (lock.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Remove a tree, even one whose directories were made read-only.
pub(super) fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    let mut dirs = vec![path.to_path_buf()];
    while let Some(d) = dirs.pop() {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(path);
}

/// The bytes a tree's files take on disk (for the budget). Directories are read with
/// O_NOATIME, so the walk leaves the tree's times as the fork has them.
pub(super) fn tree_bytes(path: &Path) -> u64 {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::NOATIME;
    let mut total = 0;
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(d) = rustix::fs::open(&dir, flags | OFlags::CLOEXEC, Mode::empty()) else {
            continue;
        };
        let Ok(mut entries) = rustix::fs::Dir::read_from(&d) else {
            continue;
        };
        while let Some(Ok(e)) = entries.read() {
            let name = e.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            total += st.st_blocks as u64 * 512;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
                use std::os::unix::ffi::OsStrExt;
                dirs.push(dir.join(std::ffi::OsStr::from_bytes(name.to_bytes())));
            }
        }
    }
    total
}
