//! The sled engine (cargo feature `sled`): a vault is a directory holding sled's files and
//! two lock files of ours. The tables and their encodings are the key-value layout in
//! `store::kv`; a commit is one sled transaction over the trees it touches, flushed (and
//! fsynced) before it returns, so a process killed with -9 loses nothing it was told was
//! written, and the id counters committed with their records are never reused.
//!
//! sled lets one process at a time open a database. Processes take turns: the one that has
//! the vault open holds `avfs.lock`; a process that wants it takes a shared lock on
//! `avfs.want` and waits for `avfs.lock`. The holder watches `avfs.want` and closes the
//! vault as soon as no call of its own is using it, so a waiting process gets it within one
//! operation and one open of sled. Within a process writers take turns, and a read sees the
//! state committed when it began (see `view.rs`); a commit waits only for the lookups and
//! scans running at that moment, never for a whole read.

mod view;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

use self::view::{Snapshot, Versions, View};
use super::kv::KV_FORMAT_VERSION as FORMAT_VERSION;
use super::kv::{ENGINE_KEY, FORMAT_KEY, Reader, Table, Writer, canonical, check_format};
use super::lock::lock;
use super::{Engine, FileIdentity, Store, StoreRead, StoreWrite};
use crate::error::{Error, Result};

/// How long a process waits for another to hand the vault over (SQLite's busy timeout).
const WAIT: Duration = Duration::from_secs(60);
/// How often the holder looks for a process waiting for the vault.
const WATCH: Duration = Duration::from_millis(2);
/// A holder lets a waiting process in once it has been idle this long (so the few
/// transactions of one command do not each change hands)...
const IDLE: Duration = Duration::from_millis(3);
/// ...or, busy, at its first idle moment after holding the vault this long.
const TURN: Duration = Duration::from_millis(50);
const LOCK_FILE: &str = super::SLED_LOCK;
const WANT_FILE: &str = super::SLED_WANT;
/// Our mark on a sled vault's directory, written when it is created: a directory without it
/// is not opened (sled would write its files into it).
pub(super) const MARK: &str = super::SLED_MARK;
/// Free space a commit needs besides twice its own size: sled grows its file a segment
/// (512 KiB) at a time, and as it cleans segments it writes the large values they hold
/// anew before it drops the old copies (measured: up to 6 MB more than a 1 MB commit's
/// own size). (An open that finds no room for its snapshot fails cleanly.)
const RESERVE: u64 = 16 << 20;
/// A flush that makes no headway this long (the free space on the vault's disk does not
/// move) with less than `RESERVE` free is stuck: sled can wait for ever for a write that
/// failed on a full disk. (With room to spare, a slow disk's fsync is waited for.)
const STUCK: Duration = Duration::from_secs(20);

pub(super) fn sled_error(e: sled::Error) -> Error {
    match e {
        // (sled copies some I/O errors by kind, without the OS error code.)
        sled::Error::Io(io)
            if io.raw_os_error() == Some(libc::ENOSPC)
                || io.kind() == std::io::ErrorKind::StorageFull =>
        {
            Error::DiskFull {
                path: None,
                reason: io.to_string(),
                maybe_applied: false,
            }
        }
        sled::Error::Corruption { .. } => Error::CorruptVault {
            reason: "sled found damaged data in the vault's files".into(),
        },
        other => Error::Storage(format!("sled: {other}")),
    }
}

/// sled writes its snapshot as `snap.N.generating` and renames it when done; one left by a
/// write that failed (a full disk) or was killed is empty or cut short, and sled would take
/// it for the newest snapshot and refuse to open. Called with the vault's lock held.
fn drop_unfinished_snapshots(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn handles() -> &'static Mutex<HashMap<PathBuf, Weak<SledStore>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<SledStore>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The open database, with the lock that lets this process hold it.
struct Held {
    since: Instant,
    trees: Vec<sled::Tree>,
    db: sled::Db,
    /// A flush failed or got stuck: sled may wait for ever on its next one, and its handles
    /// flush as they close, so they are left open (see `Drop`).
    broken: AtomicBool,
    _lock: File,
}

impl Held {
    /// An error once a flush failed or got stuck: nothing more is applied through this
    /// handle (a commit applied in sled's memory would be seen by this process only).
    fn usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Storage(
                "sled failed to write this vault earlier in this process, which cannot write it again: start it again"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Flush sled's log to disk, giving up when it is stuck (`STUCK`) or failed before.
    fn flush(&self, dir: &Path) -> Result<()> {
        self.usable()?;
        let (tx, rx) = channel();
        let db = self.db.clone();
        std::thread::spawn(move || {
            let _ = tx.send(db.flush());
        });
        let mut free = free_space(dir).ok();
        let mut moved = Instant::now();
        let out = loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(done) => break done.map(drop).map_err(sled_error),
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(Error::Storage(
                        "sled's flush ended without an answer".into(),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = free_space(dir).ok();
                    if now != free {
                        free = now;
                        moved = Instant::now();
                    } else if moved.elapsed() >= STUCK && now.is_none_or(|f| f < RESERVE) {
                        break Err(Error::DiskFull {
                            path: None,
                            reason: format!(
                                "sled stopped writing the vault for {} s with {} bytes free",
                                STUCK.as_secs(),
                                now.unwrap_or(0)
                            ),
                            maybe_applied: true,
                        });
                    }
                }
            }
        };
        if out.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
        out
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.broken.load(Ordering::Relaxed) {
            // Closing sled flushes, and would wait for ever: keep its handles open until the
            // process ends (sled's log holds every commit it acknowledged).
            std::mem::forget(self.db.clone());
            for tree in &self.trees {
                std::mem::forget(tree.clone());
            }
        }
    }
}

/// Bytes free for us on the disk holding `dir`.
fn free_space(dir: &Path) -> Result<u64> {
    let st = rustix::fs::statvfs(dir).map_err(|e| Error::io("reading", dir, e.into()))?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Lookups running now, and whether a commit is being applied: a reader-preferring gate, so a
/// lookup nested in another (a scan's visitor reading on) never waits for a commit that waits
/// for the outer one.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    fn read<R>(&self, f: impl FnOnce() -> R) -> R {
        {
            let mut s = lock(&self.state);
            while s.1 {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.0 += 1;
        }
        struct Done<'g>(&'g Gate);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                let mut s = lock(&self.0.state);
                s.0 -= 1;
                if s.0 == 0 {
                    self.0.changed.notify_all();
                }
            }
        }
        let _done = Done(self);
        f()
    }

    fn commit<R>(&self, f: impl FnOnce() -> R) -> R {
        {
            let mut s = lock(&self.state);
            while s.0 > 0 || s.1 {
                s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.1 = true;
        }
        struct Done<'g>(&'g Gate);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                lock(&self.0.state).1 = false;
                self.0.changed.notify_all();
            }
        }
        let _done = Done(self);
        f()
    }
}

/// A vault directory in the sled format. One handle per vault per process, shared through
/// `handles`.
pub struct SledStore {
    path: PathBuf,
    /// The directory opened, checked before each open of sled (see `FileIdentity`).
    file: FileIdentity,
    me: Weak<SledStore>,
    /// The database while this process holds it; a call clones the `Arc`, so the watcher
    /// closes it only when no call is using it.
    slot: Mutex<Option<Arc<Held>>>,
    /// Writers of this process take turns.
    writer: Mutex<()>,
    gate: Gate,
    versions: Mutex<Versions>,
    /// When a call last finished using the database.
    last_use: Mutex<Instant>,
}

/// Make the files sled made private (0600, directories 0700) whatever the umask was: the
/// vault directory is 0700 already, this keeps them so if it is loosened or moved. Only
/// the directory's own entries (sled's blobs sit in `blobs/`, itself made 0700), never
/// through a symlink.
fn restrict(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let mode = match e.file_type() {
            Ok(t) if t.is_dir() => 0o700,
            Ok(t) if t.is_file() => 0o600,
            _ => continue,
        };
        let _ = std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode));
    }
}

fn open_file(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("opening", path, e))
}

impl SledStore {
    /// Create a new, empty vault directory (mode 0700). Fails if the path exists.
    pub fn create(path: &Path) -> Result<Arc<SledStore>> {
        use std::os::unix::fs::DirBuilderExt;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::AlreadyExists {
                    name: path.display().to_string(),
                },
                _ => Error::io("creating", path, e),
            })?;
        let made = (|| {
            std::fs::write(path.join(MARK), "an agentvfs vault in the sled engine\n")
                .map_err(|e| Error::io("creating", path, e))?;
            Self::make(path)
        })();
        if made.is_err() {
            // Nothing of a vault that was never made stays behind.
            let _ = std::fs::remove_dir_all(path);
        }
        made
    }

    fn make(path: &Path) -> Result<Arc<SledStore>> {
        let store = Self::open_inner(path)?;
        store.with_held(|h| {
            let mut view = View::write(&h.trees);
            let mut w = Writer::new(&mut view);
            w.meta_put(FORMAT_KEY, &FORMAT_VERSION.to_le_bytes())?;
            w.meta_put(ENGINE_KEY, b"sled")?;
            view.commit(&store.versions)?;
            h.flush(&store.path)
        })?;
        Ok(store)
    }

    /// Open an existing vault directory.
    pub fn open(path: &Path) -> Result<Arc<SledStore>> {
        let store = Self::open_inner(path)?;
        let found = store.snapshot_read(|r| r.meta_get(FORMAT_KEY))?;
        check_format("sled", &store.path, found)?;
        Ok(store)
    }

    fn open_inner(path: &Path) -> Result<Arc<SledStore>> {
        let canonical = canonical(path)?;
        if !std::fs::symlink_metadata(canonical.join(MARK)).is_ok_and(|m| m.is_file()) {
            return Err(Error::invalid(format!(
                "{} is a directory, not an agentvfs vault (it has no `{MARK}`)",
                canonical.display()
            )));
        }
        let file = FileIdentity::of(&canonical)?;
        let mut open = lock(handles());
        if let Some(store) = open.get(&canonical).and_then(Weak::upgrade)
            && store.file == file
        {
            return Ok(store);
        }
        let store = Arc::new_cyclic(|me| SledStore {
            path: canonical.clone(),
            file,
            me: me.clone(),
            slot: Mutex::new(None),
            writer: Mutex::new(()),
            gate: Gate::default(),
            versions: Mutex::new(Versions::default()),
            last_use: Mutex::new(Instant::now()),
        });
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(canonical, Arc::downgrade(&store));
        Ok(store)
    }

    /// Run `f` with the database open in this process, opening it (and waiting for another
    /// process to hand it over) if need be.
    fn with_held<R>(&self, f: impl FnOnce(&Held) -> Result<R>) -> Result<R> {
        let held = {
            let mut slot = lock(&self.slot);
            match &*slot {
                Some(h) => h.clone(),
                None => {
                    let h = Arc::new(self.take_over()?);
                    *slot = Some(h.clone());
                    self.watch();
                    h
                }
            }
        };
        let out = f(&held);
        drop(held);
        *lock(&self.last_use) = Instant::now();
        out
    }

    /// Run `f` on the state committed now, which later commits do not change for it.
    fn snapshot_read<R>(&self, f: impl FnOnce(&Reader<'_, View<'_>>) -> Result<R>) -> Result<R> {
        self.with_held(|h| {
            let at = lock(&self.versions).begin();
            struct End<'s>(&'s SledStore, u64);
            impl Drop for End<'_> {
                fn drop(&mut self) {
                    lock(&self.0.versions).end(self.1);
                }
            }
            let _end = End(self, at);
            let snapshot = Snapshot {
                versions: &self.versions,
                at,
                gate: &self.gate,
            };
            f(&Reader::new(&View::read(&h.trees, snapshot)))
        })
    }

    /// Wait for the vault's lock, then open sled.
    fn take_over(&self) -> Result<Held> {
        let want_path = self.path.join(WANT_FILE);
        let want = open_file(&want_path)?;
        flock(&want, FlockOperation::LockShared)
            .map_err(|e| Error::io("locking", &want_path, e.into()))?;
        let lock_path = self.path.join(LOCK_FILE);
        let held = open_file(&lock_path)?;
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        while flock(&held, FlockOperation::NonBlockingLockExclusive).is_err() {
            if start.elapsed() > WAIT {
                return Err(Error::Storage(format!(
                    "another process has held sled vault {} for over {} s",
                    self.path.display(),
                    WAIT.as_secs()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        drop(want);
        // `vault migrate` may have put another vault in this one's place meanwhile.
        self.file.still(&self.path)?;
        drop_unfinished_snapshots(&self.path);
        // sled's own lock on its files is let go a moment after the last process closed.
        let db = loop {
            match sled::Config::new()
                .path(&self.path)
                .flush_every_ms(None)
                .open()
            {
                Err(sled::Error::Io(e))
                    if e.kind() == std::io::ErrorKind::Other
                        && e.to_string().contains("could not acquire lock")
                        && start.elapsed() < WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => break other.map_err(sled_error)?,
            }
        };
        restrict(&self.path);
        let trees = Table::NAMES
            .iter()
            .map(|name| db.open_tree(name).map_err(sled_error))
            .collect::<Result<Vec<_>>>()?;
        Ok(Held {
            since: Instant::now(),
            trees,
            db,
            broken: AtomicBool::new(false),
            _lock: held,
        })
    }

    /// sled does not fail on a full disk: its flush can wait for ever for a write that
    /// failed. So a commit goes ahead only with room for twice its size and a reserve; else
    /// it is `disk_full` before anything is written. This is a guard, not a guarantee:
    /// another process can fill the disk after the look, and then `Held::flush` gives up.
    fn room_for(&self, size: u64) -> Result<()> {
        let free = free_space(&self.path)?;
        let needed = size.saturating_mul(2).saturating_add(RESERVE);
        if free < needed {
            return Err(Error::DiskFull {
                path: None,
                reason: format!(
                    "{free} bytes free; a sled commit of {size} bytes needs {needed} (sled cannot report a full disk itself)"
                ),
                maybe_applied: false,
            });
        }
        Ok(())
    }

    /// While this process holds the vault, close it whenever another process waits for it
    /// and no call of ours is using it.
    fn watch(&self) {
        let me = self.me.clone();
        let want_path = self.path.join(WANT_FILE);
        std::thread::spawn(move || {
            let Ok(want) = open_file(&want_path) else {
                return;
            };
            loop {
                std::thread::sleep(WATCH);
                let Some(store) = me.upgrade() else {
                    return;
                };
                let mut slot = lock(&store.slot);
                let Some(held) = &*slot else {
                    return;
                };
                let idle = lock(&store.last_use).elapsed();
                if Arc::strong_count(held) > 1 || (idle < IDLE && held.since.elapsed() < TURN) {
                    continue; // in use: look again
                }
                // Nobody waits when the exclusive lock is free.
                if flock(&want, FlockOperation::NonBlockingLockExclusive).is_ok() {
                    let _ = flock(&want, FlockOperation::Unlock);
                    continue;
                }
                let _ = held.flush(&store.path);
                *slot = None; // closes sled, then lets go of the lock
                return;
            }
        });
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        if let Some(held) = lock(&self.slot).take() {
            let _ = held.flush(&self.path);
        }
    }
}

impl Store for SledStore {
    fn path(&self) -> &Path {
        &self.path
    }

    fn engine(&self) -> Engine {
        Engine::Sled
    }

    fn read_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        self.snapshot_read(|r| f(r))
    }

    fn write_with(&self, f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>) -> Result<()> {
        let _turn = lock(&self.writer);
        self.with_held(|h| {
            h.usable()?;
            self.file.still(&self.path)?;
            let mut view = View::write(&h.trees);
            f(&mut Writer::new(&mut view))?;
            if view.is_clean() {
                return Ok(());
            }
            self.room_for(view.size())?;
            self.gate.commit(|| view.commit(&self.versions))?;
            // Applied in sled's memory already: a flush that fails leaves the commit in
            // the vault only if its record reached the disk.
            h.flush(&self.path).map_err(|e| match e {
                Error::DiskFull { path, reason, .. } => Error::DiskFull {
                    path,
                    reason,
                    maybe_applied: true,
                },
                e => e,
            })
        })
    }

    fn set_batching(&self, _on: bool) -> Result<()> {
        Ok(())
    }

    fn flush_batch(&self) -> Result<()> {
        Ok(())
    }

    fn compact(&self) -> Result<()> {
        // sled rewrites its segments as it goes; there is nothing to ask of it.
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        // Every commit was flushed before it returned, and a vault handed over was flushed
        // as it closed: only a database this process holds can have anything to flush (no
        // open of sled just to find nothing).
        let held = lock(&self.slot).clone();
        match held {
            Some(h) => h.flush(&self.path),
            None => Ok(()),
        }
    }

    fn integrity_problems(&self) -> Result<Vec<String>> {
        self.snapshot_read(|r| r.integrity_problems())
    }

    fn disk_size(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&e.path()),
                    Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
                    Err(_) => 0,
                })
                .sum()
        }
        walk(&self.path)
    }
}
