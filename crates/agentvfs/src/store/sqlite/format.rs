//! The vault file's on-disk format: the application id that marks a SQLite file as a vault,
//! the forward migrations, the connection settings, and telling a foreign or damaged file
//! from a vault.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};

/// The newest on-disk format this build reads and writes.
pub const FORMAT_VERSION: u32 = 5;

pub(super) const APPLICATION_ID: i32 = 0x6176_6673; // "avfs"
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
    // v4: checkpoints say whether the proxy took them (`auto`), so retention can prune
    // those and never a named one. The proxy's earlier ones are `cp-N` saved with
    // "before: COMMAND" that a `proxy.exec` audit record of their workspace names (so a
    // hand-saved look-alike stays a kept one). Audit records say whether they are one step of a larger
    // operation (`step`: a mount's file operations), which `avfs audit` shows only with
    // --detail; the append-only trigger is lifted for this one marking.
    r#"
ALTER TABLE checkpoints ADD COLUMN auto INTEGER NOT NULL DEFAULT 0;
UPDATE checkpoints SET auto = 1
WHERE name GLOB 'cp-[0-9]*' AND message LIKE 'before: %'
  AND EXISTS (
    SELECT 1 FROM audit a JOIN workspaces w ON w.name = a.workspace
    WHERE w.id = checkpoints.ws AND a.operation = 'proxy.exec'
      AND CASE WHEN json_valid(a.detail)
               THEN json_extract(a.detail, '$.checkpoint') END = checkpoints.name);
ALTER TABLE audit ADD COLUMN step INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER audit_append_only_update;
UPDATE audit SET step = 1 WHERE operation GLOB 'mount.*';
CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE INDEX audit_by_step ON audit(step, id);
"#,
    // v5: ids are never handed out twice. SQLite gives a new row the highest id plus one,
    // so deleting the newest rows (a fork's ops and checkpoints, with the fork) would let
    // their ids come back, and a compare on a fork's newest op (`--if-head`) could match a
    // fork made again under the same name. Deletions record here the highest id the table
    // held, and new ids start past it.
    r#"
CREATE TABLE id_floor(tbl TEXT PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;
"#,
];

/// Create the empty vault file readable and writable by its owner alone (0600, whatever the
/// umask). SQLite then initialises it, and gives the `-wal` and `-shm` files it creates
/// beside it the same mode.
pub(in crate::store) fn create_private_file(path: &Path) -> Result<()> {
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
pub(super) fn open_conn(path: &Path) -> Result<Connection> {
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
pub(super) fn configure_checked(conn: &Connection, path: &Path) -> Result<()> {
    configure(conn).map_err(|e| damaged(path, e))
}

fn damaged(path: &Path, e: Error) -> Error {
    match e {
        // SQLite cannot even set up its shared memory on a full disk: that is no damage.
        Error::CorruptVault { reason } | Error::Storage(reason) if no_space_left(path) => {
            Error::DiskFull {
                path: None,
                reason,
                maybe_applied: false,
            }
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
            maybe_applied: false,
        };
    }
    Error::NotAVault {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

pub(super) fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // NORMAL in WAL mode is durable across application crashes; `fsync` paths call
    // `checkpoint_durable` when a caller needs power-loss durability.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(())
}

pub(super) fn check_format(conn: &Connection, path: &Path) -> Result<()> {
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
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    if user_version(conn)? as usize >= MIGRATIONS.len() {
        return Ok(());
    }
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let found = user_version(conn)?;
        return match e.sqlite_error_code() {
            // Format 5 changes only how ids are handed out: a vault that cannot be written
            // (read-only media, no permission) reads as it is.
            Some(rusqlite::ErrorCode::ReadOnly) if found == FORMAT_VERSION - 1 => Ok(()),
            Some(rusqlite::ErrorCode::ReadOnly) => Err(Error::invalid(format!(
                "{} is vault format {found} and is read through format {FORMAT_VERSION}, \
                 to which it is upgraded when first opened, but it cannot be written",
                path.display()
            ))),
            Some(rusqlite::ErrorCode::DatabaseBusy) => Err(Error::WorkspaceBusy {
                workspace: path.display().to_string(),
                reason: format!(
                    "it is vault format {found}, upgraded to {FORMAT_VERSION} when first opened, \
                     and another process (an older avfs?) kept writing to it; try again"
                ),
            }),
            _ => Err(damaged(path, e.into())),
        };
    }
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
