//! The SQLite engine: one file per vault, WAL mode, `BEGIN IMMEDIATE` writes with a busy
//! timeout, cached prepared statements, one writer and one reader connection per process,
//! and one shared handle per vault file within a process. WAL checkpoints run off the commit
//! path (see `wal.rs`).

mod format;
mod tx;

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

pub use self::format::FORMAT_VERSION;
pub(super) use self::format::create_private_file;
use self::format::{
    APPLICATION_ID, check_format, configure, configure_checked, migrate, open_conn,
};
use self::tx::{Tx, id_col};
use super::lock::lock;
use super::wal::{WalCheckpointer, passive_checkpoint};
use super::{Store, StoreRead, StoreWrite};
use crate::error::{Error, Result};

/// A vault file opened for reading and writing.
pub struct SqliteStore {
    path: PathBuf,
    /// The file opened, checked after each write lock is taken (see `FileIdentity`).
    file: super::FileIdentity,
    writer: Mutex<Writer>,
    reader: Mutex<Connection>,
    wal: Arc<WalCheckpointer>,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.wal.stop();
        let w = self.writer.get_mut().unwrap_or_else(|p| p.into_inner());
        // Keep an open batch's acknowledged writes, then copy a large log back so a run of
        // short-lived processes (each too brief to start the thread) cannot grow it forever.
        let _ = w.commit_open();
        if self.wal.log_is_large() {
            let _ = passive_checkpoint(&w.conn);
        }
    }
}

thread_local! {
    /// Set while this thread runs a closure inside an open batch (see `Store::batch_tag`).
    static BATCH_TAG: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// Run `f` with `BATCH_TAG` set to `tag` (cleared after, even if `f` panics).
fn tagged<R>(tag: (u64, u64), f: impl FnOnce() -> R) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            BATCH_TAG.with(|t| t.set(None));
        }
    }
    BATCH_TAG.with(|t| t.set(Some(tag)));
    let _clear = Clear;
    f()
}

/// The writer connection and, in batching mode, the transaction it holds open.
struct Writer {
    conn: Connection,
    /// Group commit: writes share one transaction, committed after `BATCH_WINDOW`, on
    /// `flush_batch`, or on `sync`. Each write is a savepoint, so a failing one rolls back
    /// alone.
    batching: bool,
    open_since: Option<Instant>,
    /// Batches begun so far, and writes in the open one (see `Store::batch_tag`).
    batches: u64,
    writes: u64,
}

impl Writer {
    fn commit_open(&mut self) -> Result<()> {
        if self.open_since.take().is_some()
            && let Err(e) = self.conn.execute_batch("COMMIT")
        {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e.into());
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A batch still open at shutdown holds acknowledged writes: keep them.
        let _ = self.commit_open();
    }
}

/// How long a batched transaction may stay open.
const BATCH_WINDOW: Duration = Duration::from_millis(50);

fn open_handles() -> &'static Mutex<HashMap<PathBuf, Weak<SqliteStore>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<SqliteStore>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

impl SqliteStore {
    /// Create a new, empty vault file. Fails if the file exists.
    pub fn create(path: &Path) -> Result<Arc<SqliteStore>> {
        if path.exists() {
            return Err(Error::AlreadyExists {
                name: path.display().to_string(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        create_private_file(path)?;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&conn)?;
        conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        migrate(&conn, path)?;
        drop(conn);
        Self::open(path)
    }

    /// Open an existing vault, sharing the handle if this process already has it open.
    pub fn open(path: &Path) -> Result<Arc<SqliteStore>> {
        let canonical = path.canonicalize().map_err(|_| Error::VaultNotFound {
            name: path.display().to_string(),
            suggestions: Vec::new(),
        })?;
        let mut handles = lock(open_handles());
        if let Some(store) = handles.get(&canonical).and_then(Weak::upgrade) {
            return Ok(store);
        }
        // The file's identity before and after the connections open: a rename over the path
        // in between (`vault migrate`) is retried, so `file` is the file they have open.
        let before = super::FileIdentity::of(&canonical)?;
        let mut writer = open_conn(&canonical)?;
        check_format(&writer, &canonical)?;
        configure_checked(&writer, &canonical)?;
        migrate(&writer, &canonical)?;
        // No inline checkpoints: a commit that crossed SQLite's threshold used to copy the
        // log back and fsync inside the commit (10-20 ms). The hook hands that to a thread
        // and only copies the rest itself when the thread cannot catch up (see `wal.rs`).
        // The pragma goes first: it installs a hook of its own, which `wal_hook` replaces.
        writer.pragma_update(None, "wal_autocheckpoint", 0)?;
        let wal = WalCheckpointer::new(&canonical);
        let hook = Arc::clone(&wal);
        writer.wal_hook(Some(move |w: &mut rusqlite::hooks::Wal, frames| {
            if hook.committed(i64::from(frames)) {
                // FULL waits for a pass the thread is running, then copies the rest, so
                // the log restarts at the next commit. Errors stay here: the commit itself
                // succeeded.
                if let Ok((log, done)) = w.checkpoint_v2(rusqlite::wal::CheckpointMode::FULL)
                    && log == done
                {
                    hook.caught_up(i64::from(log));
                }
            }
            Ok(())
        }))?;
        let reader = open_conn(&canonical)?;
        configure_checked(&reader, &canonical)?;
        if super::FileIdentity::of(&canonical)? != before {
            drop((handles, writer, reader));
            return Self::open(path);
        }
        let store = Arc::new(SqliteStore {
            file: before,
            path: canonical.clone(),
            writer: Mutex::new(Writer {
                conn: writer,
                batching: false,
                batches: 0,
                writes: 0,
                open_since: None,
            }),
            reader: Mutex::new(reader),
            wal,
        });
        handles.retain(|_, w| w.strong_count() > 0);
        handles.insert(canonical, Arc::downgrade(&store));
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Store for SqliteStore {
    fn path(&self) -> &Path {
        &self.path
    }

    fn engine(&self) -> super::Engine {
        super::Engine::Sqlite
    }

    fn read_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        {
            // While a batch is open, reads go through the writer so they see it; otherwise
            // the reader connection sees everything committed and leaves the writer free.
            let w = lock(&self.writer);
            if w.batching && w.open_since.is_some() {
                return tagged((w.batches, w.writes), || f(&Tx(&w.conn)));
            }
        }
        let conn = lock(&self.reader);
        exec_cached(&conn, "BEGIN")?;
        let result = f(&Tx(&conn));
        let _ = exec_cached(&conn, "COMMIT");
        result
    }

    fn write_with(&self, f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>) -> Result<()> {
        let mut w = lock(&self.writer);
        if w.batching {
            if w.open_since.is_none() {
                w.conn.execute_batch("BEGIN IMMEDIATE")?;
                if let Err(e) = self.file.still(&self.path) {
                    let _ = w.conn.execute_batch("ROLLBACK");
                    return Err(e);
                }
                w.open_since = Some(Instant::now());
                w.batches += 1;
                w.writes = 0;
            }
            w.writes += 1;
            exec_cached(&w.conn, "SAVEPOINT avfs_write")?;
            let tag = (w.batches, w.writes);
            let result = tagged(tag, || f(&mut Tx(&w.conn)));
            if result.is_err() {
                exec_cached(&w.conn, "ROLLBACK TO avfs_write")?;
            }
            exec_cached(&w.conn, "RELEASE avfs_write")?;
            if w.open_since.is_some_and(|t| t.elapsed() >= BATCH_WINDOW) {
                w.commit_open()?;
            }
            return result;
        }
        w.conn.execute_batch("BEGIN IMMEDIATE")?;
        if let Err(e) = self.file.still(&self.path) {
            let _ = w.conn.execute_batch("ROLLBACK");
            return Err(e);
        }
        match f(&mut Tx(&w.conn)) {
            Ok(()) => {
                if let Err(e) = w.conn.execute_batch("COMMIT") {
                    let _ = w.conn.execute_batch("ROLLBACK");
                    return Err(e.into());
                }
                Ok(())
            }
            Err(e) => {
                let _ = w.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn set_batching(&self, on: bool) -> Result<()> {
        let mut w = lock(&self.writer);
        w.commit_open()?;
        w.batching = on;
        Ok(())
    }

    fn flush_batch(&self) -> Result<()> {
        lock(&self.writer).commit_open()
    }

    fn batch_tag(&self) -> Option<(u64, u64)> {
        BATCH_TAG.with(Cell::get)
    }

    fn compact(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        w.commit_open()?;
        w.conn.execute_batch("VACUUM")?;
        w.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        // Committed transactions live in the WAL; with synchronous=NORMAL it is synced only
        // at checkpoints, so sync it now. Hold the writer lock so no commit is half-written.
        let mut w = lock(&self.writer);
        w.commit_open()?;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        match std::fs::File::open(&wal) {
            Ok(f) => f
                .sync_data()
                .map_err(|e| Error::io("syncing", PathBuf::from(wal), e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("syncing", PathBuf::from(wal), e)),
        }
    }

    fn integrity_problems(&self) -> Result<Vec<String>> {
        let conn = lock(&self.reader);
        let mut stmt = conn.prepare("PRAGMA quick_check")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut problems = Vec::new();
        for row in rows {
            let line = row?;
            if line != "ok" {
                problems.push(line);
            }
        }
        // Reads trust `size` (a read past it returns nothing), so a row whose size is not
        // its data's length would read short or long: name each.
        let mut stmt = conn.prepare(
            "SELECT id, size, length(data) FROM objects WHERE size != length(data) LIMIT 100",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((id_col(r, 0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })?;
        for row in rows {
            let (id, size, len) = row?;
            problems.push(format!(
                "object {} records size {size} but holds {len} bytes",
                id.to_hex()
            ));
        }
        Ok(problems)
    }

    fn disk_size(&self) -> u64 {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        size(&self.path) + size(Path::new(&wal))
    }
}

/// Run a statement without parameters through the statement cache: parsing the
/// transaction statements on every request was a visible part of a mount's per-request
/// cost.
fn exec_cached(conn: &Connection, sql: &str) -> Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}
