//! The SQLite engine: one file per vault, WAL mode, `BEGIN IMMEDIATE` writes with a busy
//! timeout, cached prepared statements, one writer and one reader connection per process,
//! and one shared handle per vault file within a process. WAL checkpoints run off the commit
//! path (see `wal.rs`).

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};

use super::id::ObjectId;
use super::wal::{WalCheckpointer, passive_checkpoint};
use super::{
    AuditRecord, CheckpointRecord, OpRecord, Store, StoreRead, StoreWrite, StoredObject,
    WorkspaceRecord,
};
use crate::error::{Error, Result};

/// The newest on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 3;

const APPLICATION_ID: i32 = 0x6176_6673; // "avfs"
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// Forward migrations: entry `i` upgrades a vault from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE objects(
    id BLOB NOT NULL UNIQUE,
    kind INTEGER NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE workspaces(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    base BLOB NOT NULL,
    parent TEXT,
    fork_root BLOB,
    fork_checkpoint TEXT,
    created_at INTEGER NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TABLE overlay(
    ws INTEGER NOT NULL,
    path TEXT NOT NULL,
    parent TEXT NOT NULL,
    node BLOB,
    PRIMARY KEY(ws, path)
) WITHOUT ROWID;
CREATE INDEX overlay_by_parent ON overlay(ws, parent);
CREATE TABLE checkpoints(
    id INTEGER PRIMARY KEY,
    ws INTEGER NOT NULL,
    name TEXT NOT NULL,
    root BLOB NOT NULL,
    message TEXT,
    created_at INTEGER NOT NULL,
    files INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    UNIQUE(ws, name)
);
CREATE TABLE ops(
    id INTEGER PRIMARY KEY,
    ws INTEGER NOT NULL,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    description TEXT NOT NULL,
    root_before BLOB,
    root_after BLOB,
    target INTEGER,
    extra TEXT
);
CREATE INDEX ops_by_ws ON ops(ws, id);
CREATE TABLE audit(
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    source TEXT NOT NULL,
    workspace TEXT NOT NULL,
    operation TEXT NOT NULL,
    paths TEXT NOT NULL,
    result TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX audit_by_time ON audit(at);
CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
"#,
    // v2: trees may hold hard links (link nodes and the hidden inode directory). No table
    // changes; the bump makes builds that cannot read links refuse such a vault as
    // `unsupported_format` instead of misreading it.
    "",
    // v3: trees may hold device nodes, sockets and hard links to any non-directory (the
    // `CharDevice`, `BlockDevice`, `Socket` and `Shared` kinds). No table changes, as v2.
    "",
];

/// A vault file opened for reading and writing.
pub struct SqliteStore {
    path: PathBuf,
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

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the connection usable: SQLite rolls back any
    // transaction the panicking code left open when the next BEGIN fails or on close.
    m.lock().unwrap_or_else(|p| p.into_inner())
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
        let store = Arc::new(SqliteStore {
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

/// Create the empty vault file readable and writable by its owner alone (0600, whatever the
/// umask). SQLite then initialises it, and gives the `-wal` and `-shm` files it creates
/// beside it the same mode.
fn create_private_file(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Error::AlreadyExists {
                name: path.display().to_string(),
            },
            _ => Error::io("creating", path, e),
        })?;
    // The umask may have taken bits away from 0600.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("restricting", path, e))
}

/// Open a connection to an existing file. Nothing is written to it here: a foreign
/// SQLite file must be left byte-identical when it turns out not to be a vault.
fn open_conn(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| not_a_vault(path, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Switch a checked connection to the vault's settings (WAL and friends).
/// Called once the file has shown the vault's application id: a failure from here on is
/// damage to a vault, not a foreign file.
fn configure_checked(conn: &Connection, path: &Path) -> Result<()> {
    configure(conn).map_err(|e| damaged(path, e))
}

fn damaged(path: &Path, e: Error) -> Error {
    match e {
        // SQLite cannot even set up its shared memory on a full disk: that is no damage.
        Error::CorruptVault { reason } | Error::Storage(reason) if no_space_left(path) => {
            Error::DiskFull { path: None, reason }
        }
        Error::CorruptVault { reason } | Error::Storage(reason) => Error::CorruptVault {
            reason: format!("{}: {reason}", path.display()),
        },
        other => other,
    }
}

/// Whether the file system holding `path` has no space left for it.
fn no_space_left(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|s| s.f_bavail == 0 || s.f_favail == 0)
}

fn not_a_vault(path: &Path, e: rusqlite::Error) -> Error {
    if no_space_left(path) {
        return Error::DiskFull {
            path: None,
            reason: e.to_string(),
        };
    }
    Error::NotAVault {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // NORMAL in WAL mode is durable across application crashes; `fsync` paths call
    // `checkpoint_durable` when a caller needs power-loss durability.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

fn check_format(conn: &Connection, path: &Path) -> Result<()> {
    let app_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(|e| not_a_vault(path, e))?;
    if app_id != APPLICATION_ID {
        return Err(Error::NotAVault {
            path: path.to_path_buf(),
            reason: "SQLite file without the agentvfs application id".into(),
        });
    }
    let version = user_version(conn)?;
    if version > FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

fn user_version(conn: &Connection) -> Result<u32> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get::<_, u32>(0))?)
}

/// Apply forward migrations under an immediate transaction, so two processes opening a new
/// vault at once never both migrate.
fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    if user_version(conn)? as usize >= MIGRATIONS.len() {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let mut version = user_version(conn)?;
        while (version as usize) < MIGRATIONS.len() {
            conn.execute_batch(MIGRATIONS[version as usize])?;
            version += 1;
            conn.pragma_update(None, "user_version", version)?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => {
            conn.execute_batch("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(damaged(path, e))
        }
    }
}

impl Store for SqliteStore {
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

/// A connection inside a transaction.
struct Tx<'c>(&'c Connection);

fn id_col(row: &Row<'_>, i: usize) -> rusqlite::Result<ObjectId> {
    let v: Vec<u8> = row.get(i)?;
    ObjectId::from_slice(&v).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            i,
            rusqlite::types::Type::Blob,
            "bad object id".into(),
        )
    })
}

fn opt_id_col(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<ObjectId>> {
    let v: Option<Vec<u8>> = row.get(i)?;
    Ok(v.and_then(|v| ObjectId::from_slice(&v)))
}

fn workspace_row(row: &Row<'_>) -> rusqlite::Result<WorkspaceRecord> {
    Ok(WorkspaceRecord {
        id: row.get(0)?,
        name: row.get(1)?,
        base: id_col(row, 2)?,
        parent: row.get(3)?,
        fork_root: opt_id_col(row, 4)?,
        fork_checkpoint: row.get(5)?,
        created_at: row.get(6)?,
        files: row.get(7)?,
        bytes: row.get(8)?,
    })
}

fn checkpoint_row(row: &Row<'_>) -> rusqlite::Result<CheckpointRecord> {
    Ok(CheckpointRecord {
        id: row.get(0)?,
        workspace: row.get(1)?,
        name: row.get(2)?,
        root: id_col(row, 3)?,
        message: row.get(4)?,
        created_at: row.get(5)?,
        files: row.get(6)?,
        bytes: row.get(7)?,
    })
}

macro_rules! ws_cols {
    () => {
        "id, name, base, parent, fork_root, fork_checkpoint, created_at, files, bytes"
    };
}
const WS_COLS: &str = ws_cols!();
const CP_COLS: &str = "id, ws, name, root, message, created_at, files, bytes";

type OverlayRows = Vec<(String, Option<Vec<u8>>)>;

impl Tx<'_> {
    fn overlay_query(&self, sql: &str, p: impl rusqlite::Params) -> Result<OverlayRows> {
        let mut stmt = self.0.prepare_cached(sql)?;
        let rows = stmt
            .query_map(p, |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

/// Upper bound of the paths strictly below `prefix`: '/' + 1 == '0'.
fn below_range(prefix: &str) -> (String, String) {
    (format!("{prefix}/"), format!("{prefix}0"))
}

impl StoreRead for Tx<'_> {
    fn object(&self, id: &ObjectId) -> Result<Option<StoredObject>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT kind, data FROM objects WHERE id = ?1")?;
        Ok(stmt
            .query_row([&id.0[..]], |r| {
                Ok(StoredObject {
                    kind: r.get(0)?,
                    data: r.get(1)?,
                })
            })
            .optional()?)
    }

    fn object_read_at(
        &self,
        id: &ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<Option<(u8, usize)>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT rowid, kind, size FROM objects WHERE id = ?1")?;
        let Some((rowid, kind, size)) = stmt
            .query_row([&id.0[..]], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, u8>(1)?, r.get::<_, u64>(2)?))
            })
            .optional()?
        else {
            return Ok(None);
        };
        if offset >= size || buf.is_empty() {
            return Ok(Some((kind, 0)));
        }
        // Incremental blob I/O copies straight from the database pages into `buf`.
        let blob = self
            .0
            .blob_open(rusqlite::MAIN_DB, "objects", "data", rowid, true)?;
        let n = blob.read_at(buf, offset as usize)?;
        Ok(Some((kind, n)))
    }

    fn has_object(&self, id: &ObjectId) -> Result<bool> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT 1 FROM objects WHERE id = ?1")?;
        Ok(stmt.exists([&id.0[..]])?)
    }

    fn object_ids(&self) -> Result<Vec<(ObjectId, u8)>> {
        let mut stmt = self.0.prepare_cached("SELECT id, kind FROM objects")?;
        let rows = stmt
            .query_map([], |r| Ok((id_col(r, 0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn object_stats(&self) -> Result<(u64, u64, u64)> {
        Ok(self.0.query_row(
            "SELECT count(*), coalesce(sum(size), 0), coalesce(sum(CASE WHEN kind = 1 THEN size END), 0) FROM objects",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?)
    }

    fn workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>> {
        let mut stmt = self
            .0
            // A literal: this runs in every read and write, and a formatted string would be
            // built and hashed each time to find the cached statement.
            .prepare_cached(concat!(
                "SELECT ",
                ws_cols!(),
                " FROM workspaces WHERE name = ?1"
            ))?;
        Ok(stmt.query_row([name], workspace_row).optional()?)
    }

    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>> {
        let mut stmt = self
            .0
            .prepare_cached(&format!("SELECT {WS_COLS} FROM workspaces ORDER BY id"))?;
        let rows = stmt
            .query_map([], workspace_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn overlay_get(&self, ws: i64, path: &str) -> Result<Option<Option<Vec<u8>>>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT node FROM overlay WHERE ws = ?1 AND path = ?2")?;
        Ok(stmt.query_row(params![ws, path], |r| r.get(0)).optional()?)
    }

    fn overlay_children(&self, ws: i64, parent: &str) -> Result<OverlayRows> {
        self.overlay_query(
            "SELECT path, node FROM overlay WHERE ws = ?1 AND parent = ?2 AND path <> ''",
            params![ws, parent],
        )
    }

    fn overlay_all(&self, ws: i64) -> Result<OverlayRows> {
        self.overlay_query(
            "SELECT path, node FROM overlay WHERE ws = ?1 ORDER BY path",
            params![ws],
        )
    }

    fn overlay_below(&self, ws: i64, prefix: &str) -> Result<OverlayRows> {
        let (lo, hi) = below_range(prefix);
        self.overlay_query(
            "SELECT path, node FROM overlay WHERE ws = ?1 AND path >= ?2 AND path < ?3 ORDER BY path",
            params![ws, lo, hi],
        )
    }

    fn overlay_len(&self, ws: i64) -> Result<u64> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT count(*) FROM overlay WHERE ws = ?1")?;
        Ok(stmt.query_row([ws], |r| r.get(0))?)
    }

    fn checkpoint(&self, ws: i64, name: &str) -> Result<Option<CheckpointRecord>> {
        let mut stmt = self.0.prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoints WHERE ws = ?1 AND name = ?2"
        ))?;
        Ok(stmt
            .query_row(params![ws, name], checkpoint_row)
            .optional()?)
    }

    fn checkpoints(&self, ws: i64) -> Result<Vec<CheckpointRecord>> {
        let mut stmt = self.0.prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoints WHERE ws = ?1 ORDER BY id"
        ))?;
        let rows = stmt
            .query_map([ws], checkpoint_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn all_checkpoint_roots(&self) -> Result<Vec<ObjectId>> {
        let mut stmt = self.0.prepare_cached("SELECT root FROM checkpoints")?;
        let rows = stmt
            .query_map([], |r| id_col(r, 0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn setting(&self, key: &str) -> Result<Option<String>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT value FROM settings WHERE key = ?1")?;
        Ok(stmt.query_row([key], |r| r.get(0)).optional()?)
    }

    fn ops(&self, ws: Option<i64>, limit: usize) -> Result<Vec<OpRecord>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT id, ws, at, kind, description, root_before, root_after, target, extra FROM ops
             WHERE ?1 IS NULL OR ws = ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![ws, limit as i64], |r| {
                Ok(OpRecord {
                    id: r.get(0)?,
                    workspace: r.get(1)?,
                    at: r.get(2)?,
                    kind: r.get(3)?,
                    description: r.get(4)?,
                    root_before: opt_id_col(r, 5)?,
                    root_after: opt_id_col(r, 6)?,
                    target: r.get(7)?,
                    extra: r.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    fn audit(&self, limit: usize, since: Option<i64>) -> Result<Vec<AuditRecord>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT id, at, actor, source, workspace, operation, paths, result, detail FROM audit
             WHERE at >= ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt
            .query_map(params![since.unwrap_or(i64::MIN), limit as i64], |r| {
                let paths: String = r.get(6)?;
                Ok(AuditRecord {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    actor: r.get(2)?,
                    source: r.get(3)?,
                    workspace: r.get(4)?,
                    operation: r.get(5)?,
                    paths: serde_json::from_str(&paths).unwrap_or_default(),
                    result: r.get(7)?,
                    detail: r.get(8)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

impl StoreWrite for Tx<'_> {
    fn put_object(&mut self, id: &ObjectId, kind: u8, data: &[u8]) -> Result<()> {
        let mut stmt = self.0.prepare_cached(
            "INSERT OR IGNORE INTO objects(id, kind, size, data) VALUES (?1, ?2, ?3, ?4)",
        )?;
        stmt.execute(params![&id.0[..], kind, data.len() as i64, data])?;
        Ok(())
    }

    fn delete_object(&mut self, id: &ObjectId) -> Result<()> {
        let mut stmt = self.0.prepare_cached("DELETE FROM objects WHERE id = ?1")?;
        stmt.execute([&id.0[..]])?;
        Ok(())
    }

    fn insert_workspace(&mut self, rec: &WorkspaceRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO workspaces(name, base, parent, fork_root, fork_checkpoint, created_at, files, bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        stmt.execute(params![
            rec.name,
            &rec.base.0[..],
            rec.parent,
            rec.fork_root.as_ref().map(|i| i.0.to_vec()),
            rec.fork_checkpoint,
            rec.created_at,
            rec.files,
            rec.bytes
        ])?;
        Ok(self.0.last_insert_rowid())
    }

    fn update_workspace_state(
        &mut self,
        ws: i64,
        base: &ObjectId,
        files: u64,
        bytes: u64,
    ) -> Result<()> {
        let mut stmt = self.0.prepare_cached(
            "UPDATE workspaces SET base = ?2, files = ?3, bytes = ?4 WHERE id = ?1",
        )?;
        stmt.execute(params![ws, &base.0[..], files, bytes])?;
        Ok(())
    }

    fn set_fork_root(&mut self, ws: i64, root: &ObjectId) -> Result<()> {
        self.0.execute(
            "UPDATE workspaces SET fork_root = ?2 WHERE id = ?1",
            params![ws, &root.0[..]],
        )?;
        Ok(())
    }

    fn delete_workspace(&mut self, ws: i64) -> Result<()> {
        self.0.execute("DELETE FROM overlay WHERE ws = ?1", [ws])?;
        self.0
            .execute("DELETE FROM checkpoints WHERE ws = ?1", [ws])?;
        self.0.execute("DELETE FROM ops WHERE ws = ?1", [ws])?;
        self.0
            .execute("DELETE FROM workspaces WHERE id = ?1", [ws])?;
        Ok(())
    }

    fn overlay_put(
        &mut self,
        ws: i64,
        path: &str,
        parent: &str,
        node: Option<&[u8]>,
    ) -> Result<()> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO overlay(ws, path, parent, node) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(ws, path) DO UPDATE SET node = excluded.node",
        )?;
        stmt.execute(params![ws, path, parent, node])?;
        Ok(())
    }

    fn overlay_delete(&mut self, ws: i64, path: &str) -> Result<()> {
        let mut stmt = self
            .0
            .prepare_cached("DELETE FROM overlay WHERE ws = ?1 AND path = ?2")?;
        stmt.execute(params![ws, path])?;
        Ok(())
    }

    fn overlay_delete_below(&mut self, ws: i64, prefix: &str) -> Result<()> {
        let (lo, hi) = below_range(prefix);
        let mut stmt = self
            .0
            .prepare_cached("DELETE FROM overlay WHERE ws = ?1 AND path >= ?2 AND path < ?3")?;
        stmt.execute(params![ws, lo, hi])?;
        Ok(())
    }

    fn overlay_clear(&mut self, ws: i64) -> Result<()> {
        let mut stmt = self.0.prepare_cached("DELETE FROM overlay WHERE ws = ?1")?;
        stmt.execute([ws])?;
        Ok(())
    }

    fn insert_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO checkpoints(ws, name, root, message, created_at, files, bytes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        stmt.execute(params![
            rec.workspace,
            rec.name,
            &rec.root.0[..],
            rec.message,
            rec.created_at,
            rec.files,
            rec.bytes
        ])?;
        Ok(self.0.last_insert_rowid())
    }

    fn rename_checkpoint(&mut self, id: i64, name: &str) -> Result<()> {
        self.0.execute(
            "UPDATE checkpoints SET name = ?2 WHERE id = ?1",
            params![id, name],
        )?;
        Ok(())
    }

    fn delete_checkpoint(&mut self, id: i64) -> Result<()> {
        self.0
            .execute("DELETE FROM checkpoints WHERE id = ?1", [id])?;
        Ok(())
    }

    fn set_setting(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        match value {
            Some(v) => self.0.execute(
                "INSERT INTO settings(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, v],
            )?,
            None => self
                .0
                .execute("DELETE FROM settings WHERE key = ?1", [key])?,
        };
        Ok(())
    }

    fn append_op(&mut self, rec: &OpRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO ops(ws, at, kind, description, root_before, root_after, target, extra)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        stmt.execute(params![
            rec.workspace,
            rec.at,
            rec.kind,
            rec.description,
            rec.root_before.as_ref().map(|i| i.0.to_vec()),
            rec.root_after.as_ref().map(|i| i.0.to_vec()),
            rec.target,
            rec.extra
        ])?;
        Ok(self.0.last_insert_rowid())
    }

    fn delete_op(&mut self, id: i64) -> Result<()> {
        self.0.execute("DELETE FROM ops WHERE id = ?1", [id])?;
        Ok(())
    }

    fn append_audit(&mut self, rec: &AuditRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO audit(at, actor, source, workspace, operation, paths, result, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        let paths = serde_json::to_string(&rec.paths).map_err(|e| Error::Storage(e.to_string()))?;
        stmt.execute(params![
            rec.at,
            rec.actor,
            rec.source,
            rec.workspace,
            rec.operation,
            paths,
            rec.result,
            rec.detail
        ])?;
        Ok(self.0.last_insert_rowid())
    }
}
