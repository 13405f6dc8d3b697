//! Reads inside one view of a key-value engine: the `StoreRead` implementation.

use super::rows::*;
use super::{KvRead, Table, Val, Visit};
use crate::error::Result;
use crate::store::id::ObjectId;
use crate::store::{
    AuditRecord, CheckpointRecord, OpRecord, StoreRead, StoredObject, WorkspaceRecord,
};

/// Reads inside one view (a read snapshot, or the write transaction).
pub(in crate::store) struct Reader<'a, K: KvRead + ?Sized> {
    kv: &'a K,
}

impl<'a, K: KvRead + ?Sized> Reader<'a, K> {
    pub(in crate::store) fn new(kv: &'a K) -> Self {
        Reader { kv }
    }

    pub(super) fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'a>>> {
        if key.is_empty() {
            return Ok(None); // no record has an empty key (LMDB refuses one)
        }
        self.kv.get(t, key)
    }

    /// Every (key, value) whose key starts with `prefix`, in key order, copied out.
    pub(super) fn scan(&self, t: Table, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.kv.scan(t, prefix, false, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visit the keys starting with `prefix`, newest (highest) first, until `visit` says stop.
    fn scan_rev(&self, t: Table, prefix: &[u8], visit: &mut Visit<'_>) -> Result<()> {
        self.kv.scan(t, prefix, true, visit)
    }

    pub(in crate::store) fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get(Table::Meta, key)?.map(|v| v.to_vec()))
    }

    pub(super) fn counter(&self, key: &[u8]) -> Result<u64> {
        Ok(self
            .get(Table::Meta, key)?
            .and_then(|b| <[u8; 8]>::try_from(&*b).ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0))
    }

    pub(super) fn overlay_rows(&self, ws: i64, prefix: &str) -> Result<OverlayRows> {
        let key = cat(&[&id8(ws), text_prefix(prefix.as_bytes())]);
        let mut rows = Vec::new();
        self.kv.scan(Table::Overlay, &key, false, &mut |_, v| {
            if decode_overlay(v)?.path.starts_with(prefix.as_bytes()) {
                rows.push(overlay_row(v)?);
            }
            Ok(true)
        })?;
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(rows)
    }

    pub(super) fn workspace_by_id(&self, ws: i64) -> Result<Option<WorkspaceRecord>> {
        match self.get(Table::WorkspaceIds, &id8(ws))? {
            Some(name) => self.workspace(&utf8(&name, "workspace")?),
            None => Ok(None),
        }
    }

    pub(super) fn checkpoint_at(&self, key: &[u8]) -> Result<Option<CheckpointRecord>> {
        self.get(Table::Checkpoints, key)?
            .map(|v| decode::<CpRow>(&v, "checkpoint").map(Into::into))
            .transpose()
    }

    /// What the engine cannot check itself: the running totals against the records.
    pub(in crate::store) fn integrity_problems(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let (count, bytes, chunks) = self.object_stats()?;
        let (mut n, mut b, mut c) = (0u64, 0u64, 0u64);
        self.kv.scan(Table::Objects, b"", false, &mut |_, v| {
            let (kind, size) = self.kv.object_head(v).unwrap_or((0, 0));
            n += 1;
            b += size;
            if kind == CHUNK_KIND {
                c += size;
            }
            Ok(true)
        })?;
        if (n, b, c) != (count, bytes, chunks) {
            problems.push(format!(
                "object totals say {count} objects, {bytes} bytes ({chunks} in chunks); the records hold {n}, {b} ({c})"
            ));
        }
        // The id index names each workspace once, and each under its own id.
        let workspaces = self.workspaces()?;
        let by_id = self.scan(Table::WorkspaceIds, b"")?;
        let indexed: Vec<(Vec<u8>, Vec<u8>)> = workspaces
            .iter()
            .map(|ws| (id8(ws.id).to_vec(), ws.name.as_bytes().to_vec()))
            .collect();
        if by_id != indexed {
            problems.push(format!(
                "the workspace id index holds {} entries that do not match the {} workspace records",
                by_id.len(),
                workspaces.len()
            ));
        }
        for ws in workspaces {
            let len = self.overlay_len(ws.id)?;
            let mut real = 0u64;
            self.kv
                .scan(Table::Overlay, &id8(ws.id), false, &mut |_, _| {
                    real += 1;
                    Ok(true)
                })?;
            if len != real {
                problems.push(format!(
                    "workspace {}: overlay total says {len} entries, the records hold {real}",
                    ws.name
                ));
            }
        }
        Ok(problems)
    }
}

impl<K: KvRead + ?Sized> StoreRead for Reader<'_, K> {
    fn object(&self, id: &ObjectId) -> Result<Option<StoredObject>> {
        Ok(self.get(Table::Objects, &id.0)?.and_then(|v| {
            v.split_first().map(|(kind, data)| StoredObject {
                kind: *kind,
                data: data.to_vec(),
            })
        }))
    }

    fn object_read_at(
        &self,
        id: &ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<Option<(u8, usize)>> {
        let Some(v) = self.get(Table::Objects, &id.0)? else {
            return Ok(None);
        };
        let Some((kind, data)) = v.split_first() else {
            return Ok(None);
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(Some((*kind, n)))
    }

    fn has_object(&self, id: &ObjectId) -> Result<bool> {
        Ok(self.kv.object_head_at(&id.0)?.is_some())
    }

    fn object_ids(&self) -> Result<Vec<(ObjectId, u8, u64)>> {
        let mut out = Vec::new();
        self.kv.scan(Table::Objects, b"", false, &mut |k, v| {
            let id = ObjectId::from_slice(k).ok_or_else(|| damaged("object"))?;
            let (kind, size) = self.kv.object_head(v).ok_or_else(|| damaged("object"))?;
            out.push((id, kind, size));
            Ok(true)
        })?;
        Ok(out)
    }

    fn object_stats(&self) -> Result<(u64, u64, u64)> {
        Ok((
            self.counter(b"objects.count")?,
            self.counter(b"objects.bytes")?,
            self.counter(b"objects.chunk_bytes")?,
        ))
    }

    fn workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>> {
        self.get(Table::Workspaces, name.as_bytes())?
            .map(|v| decode::<WsRow>(&v, "workspace").map(Into::into))
            .transpose()
    }

    /// In id order: one scan of the records (a server engine's round trip per fork would
    /// make this O(forks) trips), sorted by their ids.
    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>> {
        let mut out = Vec::new();
        for (_, v) in self.scan(Table::Workspaces, b"")? {
            out.push(WorkspaceRecord::from(decode::<WsRow>(&v, "workspace")?));
        }
        out.sort_by_key(|ws| ws.id);
        Ok(out)
    }

    fn overlay_get(&self, ws: i64, path: &str) -> Result<Option<Option<Vec<u8>>>> {
        let key = cat(&[&id8(ws), &text_key(path.as_bytes())]);
        match self.get(Table::Overlay, &key)? {
            Some(v) => {
                let o = decode_overlay(&v)?;
                Ok((o.path == path.as_bytes()).then(|| o.node.map(<[u8]>::to_vec)))
            }
            None => Ok(None),
        }
    }

    fn overlay_children(&self, ws: i64, parent: &str) -> Result<OverlayRows> {
        let prefix = cat(&[&id8(ws), &hash16(parent.as_bytes())]);
        let mut rows = Vec::new();
        for (k, _) in self.scan(Table::OverlayChildren, &prefix)? {
            let key = cat(&[&id8(ws), &k[prefix.len()..]]);
            if let Some(v) = self.get(Table::Overlay, &key)? {
                let o = decode_overlay(&v)?;
                if o.parent == parent.as_bytes() && !o.path.is_empty() {
                    rows.push(overlay_row(&v)?);
                }
            }
        }
        Ok(rows)
    }

    fn overlay_all(&self, ws: i64) -> Result<OverlayRows> {
        self.overlay_rows(ws, "")
    }

    fn overlay_below(&self, ws: i64, prefix: &str) -> Result<OverlayRows> {
        self.overlay_rows(ws, &format!("{prefix}/"))
    }

    fn overlay_len(&self, ws: i64) -> Result<u64> {
        self.counter(&cat(&[b"overlay.len.", &id8(ws)]))
    }

    fn checkpoint(&self, ws: i64, name: &str) -> Result<Option<CheckpointRecord>> {
        self.checkpoint_at(&cat(&[&id8(ws), name.as_bytes()]))
    }

    fn checkpoints(&self, ws: i64) -> Result<Vec<CheckpointRecord>> {
        let mut out = Vec::new();
        for (_, name) in self.scan(Table::CheckpointsByWs, &id8(ws))? {
            if let Some(c) = self.checkpoint_at(&cat(&[&id8(ws), &name]))? {
                out.push(c);
            }
        }
        Ok(out)
    }

    fn all_checkpoint_roots(&self) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        self.kv.scan(Table::Checkpoints, b"", false, &mut |_, v| {
            out.push(ObjectId(decode::<CpRow>(v, "checkpoint")?.root));
            Ok(true)
        })?;
        Ok(out)
    }

    fn highest_id(&self, kind: crate::store::IdKind) -> Result<i64> {
        let next = self.counter(format!("next.{}", kind.name()).as_bytes())?;
        Ok(i64::try_from(next.saturating_sub(1)).unwrap_or(i64::MAX))
    }

    fn setting(&self, key: &str) -> Result<Option<String>> {
        match self.get(Table::Settings, &text_key(key.as_bytes()))? {
            Some(v) => {
                let mut v: &[u8] = &v;
                let k = take_text(&mut v, "setting")?;
                if k != key.as_bytes() {
                    return Ok(None);
                }
                Ok(Some(utf8(v, "setting")?))
            }
            None => Ok(None),
        }
    }

    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let key = text_prefix(prefix.as_bytes());
        self.kv.scan(Table::Settings, key, false, &mut |_, mut v| {
            let k = take_text(&mut v, "setting")?;
            if k.starts_with(prefix.as_bytes()) {
                out.push((utf8(k, "setting")?, utf8(v, "setting")?));
            }
            Ok(true)
        })?;
        out.sort();
        Ok(out)
    }

    fn ops(&self, ws: Option<i64>, limit: usize) -> Result<Vec<OpRecord>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        match ws {
            None => self.scan_rev(Table::Ops, b"", &mut |_, v| {
                out.push(decode::<OpRow>(v, "op")?.into());
                Ok(out.len() < limit)
            })?,
            Some(ws) => self.scan_rev(Table::OpsByWs, &id8(ws), &mut |k, _| {
                if let Some(v) = self.get(Table::Ops, &k[8..])? {
                    out.push(decode::<OpRow>(&v, "op")?.into());
                }
                Ok(out.len() < limit)
            })?,
        }
        Ok(out)
    }

    fn audit(&self, limit: usize, since: Option<i64>, steps: bool) -> Result<Vec<AuditRecord>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        // Newest first; ids grow with time, so the walk ends at the first record older
        // than `since`.
        let index = if steps {
            Table::Audit
        } else {
            Table::AuditMain
        };
        self.scan_rev(index, b"", &mut |k, _| {
            let Some(v) = self.get(Table::Audit, k)? else {
                return Ok(true);
            };
            let r: AuditRow = decode(&v, "audit")?;
            if since.is_some_and(|s| r.at < s) {
                return Ok(false);
            }
            out.push(r.into());
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }
}
