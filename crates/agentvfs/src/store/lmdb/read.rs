//! Reads inside one LMDB transaction: the `StoreRead` implementation.

use heed::RoTxn;

use super::rows::*;
use super::{Db, Dbs, heed_error};
use crate::error::Result;
use crate::store::id::ObjectId;
use crate::store::{
    AuditRecord, CheckpointRecord, OpRecord, StoreRead, StoredObject, WorkspaceRecord,
};

/// Reads inside one LMDB transaction (a read snapshot, or the write transaction).
pub(super) struct Reader<'t> {
    pub(super) txn: &'t RoTxn<'t>,
    pub(super) d: &'t Dbs,
}

impl<'t> Reader<'t> {
    pub(super) fn new(txn: &'t RoTxn<'t>, d: &'t Dbs) -> Self {
        Reader { txn, d }
    }

    pub(super) fn get(&self, db: &Db, key: &[u8]) -> Result<Option<&'t [u8]>> {
        if key.is_empty() {
            return Ok(None); // no record has an empty key (LMDB refuses one)
        }
        db.get(self.txn, key).map_err(heed_error)
    }

    /// Every (key, value) whose key starts with `prefix`, in key order.
    pub(super) fn scan(&self, db: &Db, prefix: &[u8]) -> Result<Vec<(&'t [u8], &'t [u8])>> {
        // LMDB takes no empty key, not even as a cursor position: the whole table instead.
        if prefix.is_empty() {
            return db
                .iter(self.txn)
                .map_err(heed_error)?
                .map(|kv| kv.map_err(heed_error))
                .collect();
        }
        db.prefix_iter(self.txn, prefix)
            .map_err(heed_error)?
            .map(|kv| kv.map_err(heed_error))
            .collect()
    }

    pub(super) fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get(&self.d.meta, key)?.map(<[u8]>::to_vec))
    }

    pub(super) fn counter(&self, key: &[u8]) -> Result<u64> {
        Ok(self
            .get(&self.d.meta, key)?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0))
    }

    pub(super) fn overlay_rows(&self, ws: i64, prefix: &str) -> Result<OverlayRows> {
        let key = cat(&[&id8(ws), text_prefix(prefix.as_bytes())]);
        let mut rows = Vec::new();
        for (_, v) in self.scan(&self.d.overlay, &key)? {
            let o = decode_overlay(v)?;
            if o.path.starts_with(prefix.as_bytes()) {
                rows.push(overlay_row(v)?);
            }
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(rows)
    }

    pub(super) fn workspace_by_id(&self, ws: i64) -> Result<Option<WorkspaceRecord>> {
        match self.get(&self.d.workspace_ids, &id8(ws))? {
            Some(name) => self.workspace(&utf8(name, "workspace")?),
            None => Ok(None),
        }
    }

    pub(super) fn checkpoint_at(&self, key: &[u8]) -> Result<Option<CheckpointRecord>> {
        self.get(&self.d.checkpoints, key)?
            .map(|v| decode::<CpRow>(v, "checkpoint").map(Into::into))
            .transpose()
    }

    /// What LMDB cannot check itself: the running totals against the records.
    pub(super) fn integrity_problems(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let (count, bytes, chunks) = self.object_stats()?;
        let (mut n, mut b, mut c) = (0u64, 0u64, 0u64);
        for kv in self.d.objects.iter(self.txn).map_err(heed_error)? {
            let (_, v) = kv.map_err(heed_error)?;
            let size = v.len().saturating_sub(1) as u64;
            n += 1;
            b += size;
            if v.first() == Some(&CHUNK_KIND) {
                c += size;
            }
        }
        if (n, b, c) != (count, bytes, chunks) {
            problems.push(format!(
                "object totals say {count} objects, {bytes} bytes ({chunks} in chunks); the records hold {n}, {b} ({c})"
            ));
        }
        for ws in self.workspaces()? {
            let len = self.overlay_len(ws.id)?;
            let real = self.scan(&self.d.overlay, &id8(ws.id))?.len() as u64;
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

impl StoreRead for Reader<'_> {
    fn object(&self, id: &ObjectId) -> Result<Option<StoredObject>> {
        Ok(self.get(&self.d.objects, &id.0)?.and_then(|v| {
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
        let Some((kind, data)) = self
            .get(&self.d.objects, &id.0)?
            .and_then(<[u8]>::split_first)
        else {
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
        Ok(self.get(&self.d.objects, &id.0)?.is_some())
    }

    fn object_ids(&self) -> Result<Vec<(ObjectId, u8)>> {
        let mut out = Vec::new();
        for kv in self.d.objects.iter(self.txn).map_err(heed_error)? {
            let (k, v) = kv.map_err(heed_error)?;
            let id = ObjectId::from_slice(k).ok_or_else(|| damaged("object"))?;
            out.push((id, *v.first().ok_or_else(|| damaged("object"))?));
        }
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
        self.get(&self.d.workspaces, name.as_bytes())?
            .map(|v| decode::<WsRow>(v, "workspace").map(Into::into))
            .transpose()
    }

    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>> {
        let mut out = Vec::new();
        for kv in self.d.workspace_ids.iter(self.txn).map_err(heed_error)? {
            let (_, name) = kv.map_err(heed_error)?;
            if let Some(ws) = self.workspace(&utf8(name, "workspace")?)? {
                out.push(ws);
            }
        }
        Ok(out)
    }

    fn overlay_get(&self, ws: i64, path: &str) -> Result<Option<Option<Vec<u8>>>> {
        let key = cat(&[&id8(ws), &text_key(path.as_bytes())]);
        match self.get(&self.d.overlay, &key)? {
            Some(v) => {
                let o = decode_overlay(v)?;
                Ok((o.path == path.as_bytes()).then(|| o.node.map(<[u8]>::to_vec)))
            }
            None => Ok(None),
        }
    }

    fn overlay_children(&self, ws: i64, parent: &str) -> Result<OverlayRows> {
        let prefix = cat(&[&id8(ws), &hash16(parent.as_bytes())]);
        let mut rows = Vec::new();
        for (k, _) in self.scan(&self.d.overlay_children, &prefix)? {
            let key = cat(&[&id8(ws), &k[prefix.len()..]]);
            if let Some(v) = self.get(&self.d.overlay, &key)? {
                let o = decode_overlay(v)?;
                if o.parent == parent.as_bytes() && !o.path.is_empty() {
                    rows.push(overlay_row(v)?);
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
        for (_, name) in self.scan(&self.d.checkpoints_by_ws, &id8(ws))? {
            if let Some(c) = self.checkpoint_at(&cat(&[&id8(ws), name]))? {
                out.push(c);
            }
        }
        Ok(out)
    }

    fn all_checkpoint_roots(&self) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for kv in self.d.checkpoints.iter(self.txn).map_err(heed_error)? {
            let (_, v) = kv.map_err(heed_error)?;
            out.push(ObjectId(decode::<CpRow>(v, "checkpoint")?.root));
        }
        Ok(out)
    }

    fn setting(&self, key: &str) -> Result<Option<String>> {
        match self.get(&self.d.settings, &text_key(key.as_bytes()))? {
            Some(mut v) => {
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
        for (_, mut v) in self.scan(&self.d.settings, text_prefix(prefix.as_bytes()))? {
            let k = take_text(&mut v, "setting")?;
            if k.starts_with(prefix.as_bytes()) {
                out.push((utf8(k, "setting")?, utf8(v, "setting")?));
            }
        }
        out.sort();
        Ok(out)
    }

    fn ops(&self, ws: Option<i64>, limit: usize) -> Result<Vec<OpRecord>> {
        let mut out = Vec::new();
        let mut push = |v: &[u8]| -> Result<bool> {
            out.push(decode::<OpRow>(v, "op")?.into());
            Ok(out.len() < limit)
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        match ws {
            None => {
                for kv in self.d.ops.rev_iter(self.txn).map_err(heed_error)? {
                    let (_, v) = kv.map_err(heed_error)?;
                    if !push(v)? {
                        break;
                    }
                }
            }
            Some(ws) => {
                let iter = self
                    .d
                    .ops_by_ws
                    .rev_prefix_iter(self.txn, &id8(ws))
                    .map_err(heed_error)?;
                for kv in iter {
                    let (k, _) = kv.map_err(heed_error)?;
                    let Some(v) = self.get(&self.d.ops, &k[8..])? else {
                        continue;
                    };
                    if !push(v)? {
                        break;
                    }
                }
            }
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
            &self.d.audit
        } else {
            &self.d.audit_main
        };
        for kv in index.rev_iter(self.txn).map_err(heed_error)? {
            let (k, _) = kv.map_err(heed_error)?;
            let Some(v) = self.get(&self.d.audit, k)? else {
                continue;
            };
            let r: AuditRow = decode(v, "audit")?;
            if since.is_some_and(|s| r.at < s) {
                break;
            }
            out.push(r.into());
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}
