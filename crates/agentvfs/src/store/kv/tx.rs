//! Writes inside one commit of a key-value engine: the `StoreWrite` implementation (reads go
//! through `Reader` on the same view, so they see the writes).

use std::collections::BTreeMap;

use super::read::Reader;
use super::rows::*;
use super::{KvWrite, Table};
use crate::error::{Error, Result};
use crate::store::id::ObjectId;
use crate::store::{
    AuditRecord, CheckpointRecord, OpRecord, StoreRead, StoreWrite, StoredObject, WorkspaceRecord,
};

/// Writes inside one commit; reads see them.
pub(in crate::store) struct Writer<'a, K: KvWrite + ?Sized> {
    kv: &'a mut K,
    /// Objects put without looking whether the vault held them already (an engine where
    /// each look is a round trip: `KvWrite::defers_object_checks`), by id: their kind and
    /// size, for the totals `settle` brings up to date.
    unsettled: BTreeMap<[u8; 32], (u8, u64)>,
}

macro_rules! read_through {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl<K: KvWrite + ?Sized> StoreRead for Writer<'_, K> {
            $(fn $name(&self, $($arg: $ty),*) -> Result<$ret> {
                self.reader().$name($($arg),*)
            })*
        }
    };
}

read_through! {
    object(id: &ObjectId) -> Option<StoredObject>;
    object_read_at(id: &ObjectId, offset: u64, buf: &mut [u8]) -> Option<(u8, usize)>;
    has_object(id: &ObjectId) -> bool;
    object_ids() -> Vec<(ObjectId, u8, u64)>;
    object_stats() -> (u64, u64, u64);
    workspace(name: &str) -> Option<WorkspaceRecord>;
    workspaces() -> Vec<WorkspaceRecord>;
    overlay_get(ws: i64, path: &str) -> Option<Option<Vec<u8>>>;
    overlay_children(ws: i64, parent: &str) -> OverlayRows;
    overlay_all(ws: i64) -> OverlayRows;
    overlay_below(ws: i64, prefix: &str) -> OverlayRows;
    overlay_len(ws: i64) -> u64;
    checkpoint(ws: i64, name: &str) -> Option<CheckpointRecord>;
    checkpoints(ws: i64) -> Vec<CheckpointRecord>;
    all_checkpoint_roots() -> Vec<ObjectId>;
    setting(key: &str) -> Option<String>;
    settings_with_prefix(prefix: &str) -> Vec<(String, String)>;
    ops(ws: Option<i64>, limit: usize) -> Vec<OpRecord>;
    audit(limit: usize, since: Option<i64>, steps: bool) -> Vec<AuditRecord>;
    highest_id(kind: crate::store::IdKind) -> i64;
}

impl<'a, K: KvWrite + ?Sized> Writer<'a, K> {
    /// A writer on `kv`. An engine that defers object checks calls `settle` before it
    /// commits.
    pub(in crate::store) fn new(kv: &'a mut K) -> Self {
        Writer {
            kv,
            unsettled: BTreeMap::new(),
        }
    }

    /// Look, all at once, whether the objects put without a look were stored before this
    /// transaction: those that were keep their stored row (and are not sent again), the
    /// others count in the object totals. A no-op unless the engine defers object checks.
    pub(in crate::store) fn settle(&mut self) -> Result<()> {
        if self.unsettled.is_empty() {
            return Ok(());
        }
        let unsettled = std::mem::take(&mut self.unsettled);
        let ids: Vec<&[u8]> = unsettled.keys().map(<[u8; 32]>::as_slice).collect();
        let stored = self.kv.stored_keys(Table::Objects, &ids)?;
        for (id, (kind, size)) in &unsettled {
            if stored.contains(id.as_slice()) {
                self.kv.forget(Table::Objects, id);
            } else {
                self.count_object(*kind, *size, 1)?;
            }
        }
        Ok(())
    }

    /// Count an object of `kind` and `size` stored bytes in the totals (`sign` 1), or out
    /// of them (-1).
    fn count_object(&mut self, kind: u8, size: u64, sign: i64) -> Result<()> {
        let size = size as i64 * sign;
        self.add(b"objects.count", sign)?;
        self.add(b"objects.bytes", size)?;
        if kind == CHUNK_KIND {
            self.add(b"objects.chunk_bytes", size)?;
        }
        Ok(())
    }

    fn reader(&self) -> Reader<'_, K> {
        Reader::new(&*self.kv)
    }

    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.kv.put(t, key, value)
    }

    fn del(&mut self, t: Table, key: &[u8]) -> Result<()> {
        self.kv.del(t, key)
    }

    pub(in crate::store) fn meta_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(Table::Meta, key, value)
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(in crate::store) fn meta_delete(&mut self, key: &[u8]) -> Result<()> {
        self.del(Table::Meta, key)
    }

    fn add(&mut self, key: &[u8], delta: i64) -> Result<()> {
        let n = self.reader().counter(key)?;
        let n = n.saturating_add_signed(delta);
        self.meta_put(key, &n.to_le_bytes())
    }

    /// The next id of a kind (1 first), never handed out twice: the counter is committed
    /// with the record that uses it.
    fn next_id(&mut self, kind: &str) -> Result<i64> {
        let key = format!("next.{kind}");
        let n = self.reader().counter(key.as_bytes())?.max(1);
        self.meta_put(key.as_bytes(), &(n + 1).to_le_bytes())?;
        i64::try_from(n).map_err(|_| Error::Storage(format!("{kind} ids ran out")))
    }

    fn put_workspace(&mut self, row: &WsRow) -> Result<()> {
        self.put(Table::Workspaces, row.name.as_bytes(), &encode(row)?)?;
        self.put(Table::WorkspaceIds, &id8(row.id), row.name.as_bytes())
    }

    fn update_workspace(&mut self, ws: i64, f: impl FnOnce(&mut WsRow)) -> Result<()> {
        let Some(rec) = self.reader().workspace_by_id(ws)? else {
            return Ok(());
        };
        let mut row = WsRow::from(&rec);
        f(&mut row);
        self.put_workspace(&row)
    }

    fn overlay_remove(&mut self, ws: i64, key: &[u8]) -> Result<()> {
        let parent = match self.reader().get(Table::Overlay, key)? {
            Some(v) => hash16(decode_overlay(&v)?.parent),
            None => return Ok(()),
        };
        let child = cat(&[&id8(ws), &parent, &key[8..]]);
        self.del(Table::OverlayChildren, &child)?;
        self.del(Table::Overlay, key)?;
        self.add(&cat(&[b"overlay.len.", &id8(ws)]), -1)
    }

    /// Delete every overlay entry of `ws` whose path starts with `prefix`.
    fn overlay_remove_prefix(&mut self, ws: i64, prefix: &str) -> Result<()> {
        let key = cat(&[&id8(ws), text_prefix(prefix.as_bytes())]);
        let mut doomed = Vec::new();
        for (k, v) in self.reader().scan(Table::Overlay, &key)? {
            if decode_overlay(&v)?.path.starts_with(prefix.as_bytes()) {
                doomed.push(k);
            }
        }
        for k in doomed {
            self.overlay_remove(ws, &k)?;
        }
        Ok(())
    }

    fn checkpoint_remove(&mut self, id: i64) -> Result<Option<CheckpointRecord>> {
        let Some(key) = self
            .reader()
            .get(Table::CheckpointIds, &id8(id))?
            .map(|k| k.to_vec())
        else {
            return Ok(None);
        };
        let rec = self.reader().checkpoint_at(&key)?;
        self.del(Table::Checkpoints, &key)?;
        self.del(Table::CheckpointIds, &id8(id))?;
        self.del(Table::CheckpointsByWs, &cat(&[&key[..8], &id8(id)]))?;
        Ok(rec)
    }

    fn checkpoint_put(&mut self, rec: &CheckpointRecord) -> Result<()> {
        let key = cat(&[&id8(rec.workspace), rec.name.as_bytes()]);
        self.put(Table::Checkpoints, &key, &encode(&CpRow::from(rec))?)?;
        self.put(Table::CheckpointIds, &id8(rec.id), &key)?;
        self.put(
            Table::CheckpointsByWs,
            &cat(&[&id8(rec.workspace), &id8(rec.id)]),
            rec.name.as_bytes(),
        )
    }
}

fn unique(what: &str, name: &str) -> Error {
    Error::Storage(format!("UNIQUE constraint failed: {what} `{name}` exists"))
}

impl<K: KvWrite + ?Sized> StoreWrite for Writer<'_, K> {
    fn put_object(&mut self, id: &ObjectId, kind: u8, data: &[u8]) -> Result<()> {
        if self.unsettled.contains_key(&id.0) {
            return Ok(());
        }
        let row = || {
            let mut v = Vec::with_capacity(data.len() + 1);
            v.push(kind);
            v.extend_from_slice(data);
            v
        };
        // Not touched by this transaction yet: put now, look at `settle`.
        if self.kv.defers_object_checks() && !self.kv.is_buffered(Table::Objects, &id.0) {
            self.put(Table::Objects, &id.0, &row())?;
            self.unsettled.insert(id.0, (kind, data.len() as u64));
            return Ok(());
        }
        if self.reader().has_object(id)? {
            return Ok(());
        }
        self.put(Table::Objects, &id.0, &row())?;
        self.count_object(kind, data.len() as u64, 1)
    }

    fn delete_object(&mut self, id: &ObjectId) -> Result<()> {
        // An unsettled put is dropped: what the vault held before decides.
        if self.unsettled.remove(&id.0).is_some() {
            self.kv.forget(Table::Objects, &id.0);
        }
        let Some((kind, size)) = self.kv.object_head_at(&id.0)? else {
            return Ok(());
        };
        self.del(Table::Objects, &id.0)?;
        self.count_object(kind, size, -1)
    }

    fn insert_workspace(&mut self, rec: &WorkspaceRecord) -> Result<i64> {
        if self.reader().workspace(&rec.name)?.is_some() {
            return Err(unique("workspace", &rec.name));
        }
        let id = self.next_id("workspace")?;
        let mut row = WsRow::from(rec);
        row.id = id;
        self.put_workspace(&row)?;
        Ok(id)
    }

    fn update_workspace_state(
        &mut self,
        ws: i64,
        base: &ObjectId,
        files: u64,
        bytes: u64,
    ) -> Result<()> {
        self.update_workspace(ws, |r| {
            r.base = base.0;
            r.files = files;
            r.bytes = bytes;
        })
    }

    fn delete_workspace(&mut self, ws: i64) -> Result<()> {
        self.overlay_clear(ws)?;
        for c in self.reader().checkpoints(ws)? {
            self.checkpoint_remove(c.id)?;
        }
        let op_keys: Vec<Vec<u8>> = self
            .reader()
            .scan(Table::OpsByWs, &id8(ws))?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for k in op_keys {
            self.del(Table::Ops, &k[8..])?;
            self.del(Table::OpsByWs, &k)?;
        }
        if let Some(rec) = self.reader().workspace_by_id(ws)? {
            self.del(Table::Workspaces, rec.name.as_bytes())?;
            self.del(Table::WorkspaceIds, &id8(ws))?;
        }
        self.meta_put(&cat(&[b"overlay.len.", &id8(ws)]), &0u64.to_le_bytes())
    }

    fn set_base_root(&mut self, ws: i64, root: &ObjectId) -> Result<()> {
        self.update_workspace(ws, |r| r.base_root = Some(root.0))
    }

    fn overlay_put(
        &mut self,
        ws: i64,
        path: &str,
        parent: &str,
        node: Option<&[u8]>,
    ) -> Result<()> {
        let key = cat(&[&id8(ws), &text_key(path.as_bytes())]);
        let fresh = self.reader().get(Table::Overlay, &key)?.is_none();
        self.put(Table::Overlay, &key, &encode_overlay(path, parent, node))?;
        if fresh {
            let child = cat(&[&id8(ws), &hash16(parent.as_bytes()), &key[8..]]);
            self.put(Table::OverlayChildren, &child, &[])?;
            self.add(&cat(&[b"overlay.len.", &id8(ws)]), 1)?;
        }
        Ok(())
    }

    fn overlay_delete(&mut self, ws: i64, path: &str) -> Result<()> {
        let key = cat(&[&id8(ws), &text_key(path.as_bytes())]);
        self.overlay_remove(ws, &key)
    }

    fn overlay_delete_below(&mut self, ws: i64, prefix: &str) -> Result<()> {
        self.overlay_remove_prefix(ws, &format!("{prefix}/"))
    }

    fn overlay_clear(&mut self, ws: i64) -> Result<()> {
        self.overlay_remove_prefix(ws, "")
    }

    fn insert_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<i64> {
        if self
            .reader()
            .checkpoint(rec.workspace, &rec.name)?
            .is_some()
        {
            return Err(unique("checkpoint", &rec.name));
        }
        let id = self.next_id("checkpoint")?;
        let mut rec = rec.clone();
        rec.id = id;
        self.checkpoint_put(&rec)?;
        Ok(id)
    }

    fn rename_checkpoint(&mut self, id: i64, name: &str) -> Result<()> {
        let Some(mut rec) = self.checkpoint_remove(id)? else {
            return Ok(());
        };
        if self.reader().checkpoint(rec.workspace, name)?.is_some() {
            return Err(unique("checkpoint", name));
        }
        rec.name = name.to_string();
        self.checkpoint_put(&rec)
    }

    fn delete_checkpoint(&mut self, id: i64) -> Result<()> {
        self.checkpoint_remove(id).map(drop)
    }

    fn retire(&mut self) -> Result<()> {
        self.meta_put(super::RETIRED_KEY, b"migrated")
    }

    fn set_setting(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        let k = text_key(key.as_bytes()).into_owned();
        match value {
            Some(v) => {
                let mut val = Vec::with_capacity(key.len() + v.len() + 4);
                put_text(&mut val, key.as_bytes());
                val.extend_from_slice(v.as_bytes());
                self.put(Table::Settings, &k, &val)
            }
            None => self.del(Table::Settings, &k).map(drop),
        }
    }

    fn append_op(&mut self, rec: &OpRecord) -> Result<i64> {
        let id = self.next_id("op")?;
        self.put_op(id, rec)?;
        Ok(id)
    }

    fn delete_op(&mut self, id: i64) -> Result<()> {
        let ws = match self.reader().get(Table::Ops, &id8(id))? {
            Some(v) => decode::<OpRow>(&v, "op")?.ws,
            None => return Ok(()),
        };
        self.del(Table::Ops, &id8(id))?;
        self.del(Table::OpsByWs, &cat(&[&id8(ws), &id8(id)]))?;
        Ok(())
    }

    fn append_audit(&mut self, rec: &AuditRecord) -> Result<i64> {
        let id = self.next_id("audit")?;
        self.put_audit(id, rec)?;
        Ok(id)
    }

    fn copy_workspace(&mut self, rec: &WorkspaceRecord) -> Result<()> {
        self.put_workspace(&WsRow::from(rec))?;
        self.bump("workspace", rec.id)
    }

    fn copy_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<()> {
        self.checkpoint_put(rec)?;
        self.bump("checkpoint", rec.id)
    }

    fn copy_op(&mut self, rec: &OpRecord) -> Result<()> {
        self.put_op(rec.id, rec)?;
        self.bump("op", rec.id)
    }

    fn copy_audit(&mut self, rec: &AuditRecord) -> Result<()> {
        self.put_audit(rec.id, rec)?;
        self.bump("audit", rec.id)
    }

    fn keep_ids_past(&mut self, kind: crate::store::IdKind, id: i64) -> Result<()> {
        self.bump(kind.name(), id)
    }
}

impl<K: KvWrite + ?Sized> Writer<'_, K> {
    /// Move the counter of `kind` past `id`.
    fn bump(&mut self, kind: &str, id: i64) -> Result<()> {
        let key = format!("next.{kind}");
        let next = u64::try_from(id).unwrap_or(0).saturating_add(1);
        if self.reader().counter(key.as_bytes())? < next {
            self.meta_put(key.as_bytes(), &next.to_le_bytes())?;
        }
        Ok(())
    }

    fn put_op(&mut self, id: i64, rec: &OpRecord) -> Result<()> {
        let row = OpRow::new(id, rec);
        self.put(Table::Ops, &id8(id), &encode(&row)?)?;
        self.put(Table::OpsByWs, &cat(&[&id8(rec.workspace), &id8(id)]), &[])
    }

    fn put_audit(&mut self, id: i64, rec: &AuditRecord) -> Result<()> {
        let row = AuditRow::new(id, rec);
        self.put(Table::Audit, &id8(id), &encode(&row)?)?;
        if !rec.step {
            self.put(Table::AuditMain, &id8(id), &[])?;
        }
        Ok(())
    }
}
