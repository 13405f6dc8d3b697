//! Transactions on a vault connection: the `StoreRead` and `StoreWrite` implementations,
//! one SQL statement per trait method, and the decoding of rows into records.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Error, Result};
use crate::store::id::ObjectId;
use crate::store::{
    AuditRecord, CheckpointRecord, IdKind, OpRecord, StoreRead, StoreWrite, StoredObject,
    WorkspaceRecord,
};

/// A connection inside a transaction.
pub(super) struct Tx<'c>(pub(super) &'c Connection);

pub(super) fn id_col(row: &Row<'_>, i: usize) -> rusqlite::Result<ObjectId> {
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
        base_root: opt_id_col(row, 4)?,
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
        auto: row.get(8)?,
    })
}

macro_rules! ws_cols {
    () => {
        "id, name, base, parent, fork_root, fork_checkpoint, created_at, files, bytes"
    };
}
const WS_COLS: &str = ws_cols!();
const CP_COLS: &str = "id, ws, name, root, message, created_at, files, bytes, auto";

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

    fn object_ids(&self) -> Result<Vec<(ObjectId, u8, u64)>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT id, kind, size FROM objects")?;
        let rows = stmt
            .query_map([], |r| Ok((id_col(r, 0)?, r.get(1)?, r.get(2)?)))?
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

    fn highest_id(&self, kind: IdKind) -> Result<i64> {
        let t = id_table(kind);
        let sql = format!(
            "SELECT max((SELECT coalesce(max(id), 0) FROM {t}), \
             (SELECT coalesce(max(id), 0) FROM id_floor WHERE tbl = '{t}'))"
        );
        Ok(self.0.prepare_cached(&sql)?.query_row([], |r| r.get(0))?)
    }

    fn setting(&self, key: &str) -> Result<Option<String>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT value FROM settings WHERE key = ?1")?;
        Ok(stmt.query_row([key], |r| r.get(0)).optional()?)
    }

    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        // Keys are text: the prefix's range is [prefix, prefix + U+10FFFF).
        let end = format!("{prefix}\u{10FFFF}");
        let mut stmt = self.0.prepare_cached(
            "SELECT key, value FROM settings WHERE key >= ?1 AND key < ?2 ORDER BY key",
        )?;
        let rows = stmt
            .query_map([prefix, end.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
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

    fn audit(&self, limit: usize, since: Option<i64>, steps: bool) -> Result<Vec<AuditRecord>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT id, at, actor, source, workspace, operation, paths, result, detail, step
             FROM audit WHERE at >= ?1 AND (?3 OR step = 0) ORDER BY id DESC LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![since.unwrap_or(i64::MIN), limit, steps], |r| {
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
                    step: r.get(9)?,
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
        self.put_workspace(None, rec)
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

    fn set_base_root(&mut self, ws: i64, root: &ObjectId) -> Result<()> {
        self.0.execute(
            "UPDATE workspaces SET fork_root = ?2 WHERE id = ?1",
            params![ws, &root.0[..]],
        )?;
        Ok(())
    }

    fn delete_workspace(&mut self, ws: i64) -> Result<()> {
        for kind in IdKind::ALL {
            self.floor_at_highest(kind)?;
        }
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
        self.put_checkpoint(None, rec)
    }

    fn rename_checkpoint(&mut self, id: i64, name: &str) -> Result<()> {
        self.0.execute(
            "UPDATE checkpoints SET name = ?2 WHERE id = ?1",
            params![id, name],
        )?;
        Ok(())
    }

    fn delete_checkpoint(&mut self, id: i64) -> Result<()> {
        self.floor_at_highest(IdKind::Checkpoint)?;
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
        self.put_op(None, rec)
    }

    fn delete_op(&mut self, id: i64) -> Result<()> {
        self.floor_at_highest(IdKind::Op)?;
        self.0.execute("DELETE FROM ops WHERE id = ?1", [id])?;
        Ok(())
    }

    fn copy_workspace(&mut self, rec: &WorkspaceRecord) -> Result<()> {
        self.put_workspace(Some(rec.id), rec).map(drop)
    }

    fn copy_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<()> {
        self.put_checkpoint(Some(rec.id), rec).map(drop)
    }

    fn copy_op(&mut self, rec: &OpRecord) -> Result<()> {
        self.put_op(Some(rec.id), rec).map(drop)
    }

    fn copy_audit(&mut self, rec: &AuditRecord) -> Result<()> {
        self.put_audit(Some(rec.id), rec).map(drop)
    }

    fn keep_ids_past(&mut self, kind: IdKind, id: i64) -> Result<()> {
        self.raise_floor(kind, id)
    }

    fn append_audit(&mut self, rec: &AuditRecord) -> Result<i64> {
        self.put_audit(None, rec)
    }
}

/// The id a new row of table `$t` gets: past every id the table holds and every id it held
/// (`id_floor`, which deletions bring up to date), so no id is handed out twice.
macro_rules! next_id {
    ($t:literal) => {
        concat!(
            "max((SELECT coalesce(max(id), 0) FROM ",
            $t,
            "), (SELECT coalesce(max(id), 0) FROM id_floor WHERE tbl = '",
            $t,
            "')) + 1"
        )
    };
}

/// The table of `kind`, as `id_floor` names it.
fn id_table(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Workspace => "workspaces",
        IdKind::Checkpoint => "checkpoints",
        IdKind::Op => "ops",
    }
}

/// One INSERT per record kind: with `id` `None` the record gets the next id (an append),
/// with `Some` it keeps the id it has (a copy, `vault migrate`).
impl Tx<'_> {
    /// Before rows of `kind` are deleted: new ids start past the highest its table holds.
    fn floor_at_highest(&mut self, kind: IdKind) -> Result<()> {
        let id = self.highest_id(kind)?;
        self.raise_floor(kind, id)
    }

    /// New ids of `kind` start past `id`.
    fn raise_floor(&mut self, kind: IdKind, id: i64) -> Result<()> {
        if id > 0 {
            self.0
                .prepare_cached(
                    "INSERT INTO id_floor(tbl, id) VALUES (?1, ?2) \
                     ON CONFLICT(tbl) DO UPDATE SET id = max(id, excluded.id)",
                )?
                .execute(params![id_table(kind), id])?;
        }
        Ok(())
    }

    fn put_workspace(&mut self, id: Option<i64>, rec: &WorkspaceRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            concat!(
                "INSERT INTO workspaces(id, name, base, parent, fork_root, fork_checkpoint, created_at, files, bytes)
             VALUES (coalesce(?1, ",
                next_id!("workspaces"),
                "), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ),
        )?;
        stmt.execute(params![
            id,
            rec.name,
            &rec.base.0[..],
            rec.parent,
            rec.base_root.as_ref().map(|i| i.0.to_vec()),
            rec.fork_checkpoint,
            rec.created_at,
            rec.files,
            rec.bytes
        ])?;
        Ok(self.0.last_insert_rowid())
    }

    fn put_checkpoint(&mut self, id: Option<i64>, rec: &CheckpointRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(concat!(
            "INSERT INTO checkpoints(id, ws, name, root, message, created_at, files, bytes, auto)
             VALUES (coalesce(?1, ",
            next_id!("checkpoints"),
            "), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ))?;
        stmt.execute(params![
            id,
            rec.workspace,
            rec.name,
            &rec.root.0[..],
            rec.message,
            rec.created_at,
            rec.files,
            rec.bytes,
            rec.auto
        ])?;
        Ok(self.0.last_insert_rowid())
    }

    fn put_op(&mut self, id: Option<i64>, rec: &OpRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(concat!(
            "INSERT INTO ops(id, ws, at, kind, description, root_before, root_after, target, extra)
             VALUES (coalesce(?1, ",
            next_id!("ops"),
            "), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
        ))?;
        stmt.execute(params![
            id,
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

    fn put_audit(&mut self, id: Option<i64>, rec: &AuditRecord) -> Result<i64> {
        let mut stmt = self.0.prepare_cached(
            "INSERT INTO audit(id, at, actor, source, workspace, operation, paths, result, detail, step)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        let paths = serde_json::to_string(&rec.paths).map_err(|e| Error::Storage(e.to_string()))?;
        stmt.execute(params![
            id,
            rec.at,
            rec.actor,
            rec.source,
            rec.workspace,
            rec.operation,
            paths,
            rec.result,
            rec.detail,
            rec.step
        ])?;
        Ok(self.0.last_insert_rowid())
    }
}
