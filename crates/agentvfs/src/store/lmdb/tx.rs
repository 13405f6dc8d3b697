//! LMDB transactions: the `StoreRead` and `StoreWrite` implementations over the databases of
//! `mod.rs`, and the key and value encodings.
//!
//! Keys: ids are 8 bytes big-endian, so key order is id order. A text key (a path, a setting)
//! is its bytes when at most `KEY_KEEP` long, else its first `KEY_KEEP` bytes and 16 bytes of
//! its hash (LMDB keys are at most 511 bytes), so a prefix of a key is still a prefix of its
//! encoding; values carry the full text, and range reads check it and sort by it.

use std::borrow::Cow;

use heed::{RoTxn, RwTxn};
use serde::{Deserialize, Serialize};

use super::{Db, Dbs, heed_error};
use crate::error::{Error, Result};
use crate::store::id::ObjectId;
use crate::store::{
    AuditRecord, CheckpointRecord, OpRecord, StoreRead, StoreWrite, StoredObject, WorkspaceRecord,
};

/// How much of a text key is kept as is.
const KEY_KEEP: usize = 400;
/// The kind of content chunks (counted apart in `object_stats`).
const CHUNK_KIND: u8 = 1;

fn text_key(text: &[u8]) -> Cow<'_, [u8]> {
    if text.len() <= KEY_KEEP {
        return Cow::Borrowed(text);
    }
    let mut k = text[..KEY_KEEP].to_vec();
    k.extend_from_slice(&blake3::hash(text).as_bytes()[..16]);
    Cow::Owned(k)
}

/// The part of a text prefix that is a prefix of every matching key's encoding.
fn text_prefix(prefix: &[u8]) -> &[u8] {
    &prefix[..prefix.len().min(KEY_KEEP)]
}

fn id8(id: i64) -> [u8; 8] {
    (id as u64).to_be_bytes()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn hash16(text: &[u8]) -> [u8; 16] {
    blake3::hash(text).as_bytes()[..16]
        .try_into()
        .expect("16 bytes")
}

/// `len u32 LE` + bytes, for texts inside values.
fn put_text(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
}

fn damaged(what: &str) -> Error {
    Error::CorruptVault {
        reason: format!("an LMDB {what} record is malformed"),
    }
}

fn take_text<'v>(v: &mut &'v [u8], what: &str) -> Result<&'v [u8]> {
    if v.len() < 4 {
        return Err(damaged(what));
    }
    let n = u32::from_le_bytes(v[..4].try_into().expect("4 bytes")) as usize;
    let rest = &v[4..];
    if rest.len() < n {
        return Err(damaged(what));
    }
    let (text, tail) = rest.split_at(n);
    *v = tail;
    Ok(text)
}

fn utf8(b: &[u8], what: &str) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| damaged(what))
}

/// An overlay value: path, parent, then `0` (whiteout) or `1` + the encoded node.
struct OverlayValue<'v> {
    path: &'v [u8],
    parent: &'v [u8],
    node: Option<&'v [u8]>,
}

fn encode_overlay(path: &str, parent: &str, node: Option<&[u8]>) -> Vec<u8> {
    let mut v = Vec::with_capacity(path.len() + parent.len() + 9 + node.map_or(0, <[u8]>::len));
    put_text(&mut v, path.as_bytes());
    put_text(&mut v, parent.as_bytes());
    match node {
        Some(n) => {
            v.push(1);
            v.extend_from_slice(n);
        }
        None => v.push(0),
    }
    v
}

fn decode_overlay(mut v: &[u8]) -> Result<OverlayValue<'_>> {
    let path = take_text(&mut v, "overlay")?;
    let parent = take_text(&mut v, "overlay")?;
    let node = match v.split_first() {
        Some((0, _)) => None,
        Some((1, rest)) => Some(rest),
        _ => return Err(damaged("overlay")),
    };
    Ok(OverlayValue { path, parent, node })
}

type OverlayRows = Vec<(String, Option<Vec<u8>>)>;

fn overlay_row(v: &[u8]) -> Result<(String, Option<Vec<u8>>)> {
    let o = decode_overlay(v)?;
    Ok((utf8(o.path, "overlay")?, o.node.map(<[u8]>::to_vec)))
}

#[derive(Serialize, Deserialize)]
struct WsRow {
    id: i64,
    name: String,
    base: [u8; 32],
    parent: Option<String>,
    base_root: Option<[u8; 32]>,
    fork_checkpoint: Option<String>,
    created_at: i64,
    files: u64,
    bytes: u64,
}

impl From<&WorkspaceRecord> for WsRow {
    fn from(r: &WorkspaceRecord) -> Self {
        WsRow {
            id: r.id,
            name: r.name.clone(),
            base: r.base.0,
            parent: r.parent.clone(),
            base_root: r.base_root.map(|i| i.0),
            fork_checkpoint: r.fork_checkpoint.clone(),
            created_at: r.created_at,
            files: r.files,
            bytes: r.bytes,
        }
    }
}

impl From<WsRow> for WorkspaceRecord {
    fn from(r: WsRow) -> Self {
        WorkspaceRecord {
            id: r.id,
            name: r.name,
            base: ObjectId(r.base),
            parent: r.parent,
            base_root: r.base_root.map(ObjectId),
            fork_checkpoint: r.fork_checkpoint,
            created_at: r.created_at,
            files: r.files,
            bytes: r.bytes,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct CpRow {
    id: i64,
    ws: i64,
    name: String,
    root: [u8; 32],
    message: Option<String>,
    created_at: i64,
    files: u64,
    bytes: u64,
    auto: bool,
}

impl From<&CheckpointRecord> for CpRow {
    fn from(r: &CheckpointRecord) -> Self {
        CpRow {
            id: r.id,
            ws: r.workspace,
            name: r.name.clone(),
            root: r.root.0,
            message: r.message.clone(),
            created_at: r.created_at,
            files: r.files,
            bytes: r.bytes,
            auto: r.auto,
        }
    }
}

impl From<CpRow> for CheckpointRecord {
    fn from(r: CpRow) -> Self {
        CheckpointRecord {
            id: r.id,
            workspace: r.ws,
            name: r.name,
            root: ObjectId(r.root),
            message: r.message,
            created_at: r.created_at,
            files: r.files,
            bytes: r.bytes,
            auto: r.auto,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct OpRow {
    id: i64,
    ws: i64,
    at: i64,
    kind: String,
    description: String,
    root_before: Option<[u8; 32]>,
    root_after: Option<[u8; 32]>,
    target: Option<i64>,
    extra: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct AuditRow {
    id: i64,
    at: i64,
    actor: String,
    source: String,
    workspace: String,
    operation: String,
    paths: Vec<String>,
    result: String,
    detail: Option<String>,
    step: bool,
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|e| Error::Storage(format!("encoding a record: {e}")))
}

fn decode<'a, T: Deserialize<'a>>(b: &'a [u8], what: &str) -> Result<T> {
    postcard::from_bytes(b).map_err(|_| damaged(what))
}

/// Reads inside one LMDB transaction (a read snapshot, or the write transaction).
pub(super) struct Reader<'t> {
    txn: &'t RoTxn<'t>,
    d: &'t Dbs,
}

impl<'t> Reader<'t> {
    pub(super) fn new(txn: &'t RoTxn<'t>, d: &'t Dbs) -> Self {
        Reader { txn, d }
    }

    fn get(&self, db: &Db, key: &[u8]) -> Result<Option<&'t [u8]>> {
        db.get(self.txn, key).map_err(heed_error)
    }

    /// Every (key, value) whose key starts with `prefix`, in key order.
    fn scan(&self, db: &Db, prefix: &[u8]) -> Result<Vec<(&'t [u8], &'t [u8])>> {
        db.prefix_iter(self.txn, prefix)
            .map_err(heed_error)?
            .map(|kv| kv.map_err(heed_error))
            .collect()
    }

    pub(super) fn meta_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get(&self.d.meta, key)?.map(<[u8]>::to_vec))
    }

    fn counter(&self, key: &[u8]) -> Result<u64> {
        Ok(self
            .get(&self.d.meta, key)?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0))
    }

    fn overlay_rows(&self, ws: i64, prefix: &str) -> Result<OverlayRows> {
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

    fn workspace_by_id(&self, ws: i64) -> Result<Option<WorkspaceRecord>> {
        match self.get(&self.d.workspace_ids, &id8(ws))? {
            Some(name) => self.workspace(&utf8(name, "workspace")?),
            None => Ok(None),
        }
    }

    fn checkpoint_at(&self, key: &[u8]) -> Result<Option<CheckpointRecord>> {
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
            let r: OpRow = decode(v, "op")?;
            out.push(OpRecord {
                id: r.id,
                workspace: r.ws,
                at: r.at,
                kind: r.kind,
                description: r.description,
                root_before: r.root_before.map(ObjectId),
                root_after: r.root_after.map(ObjectId),
                target: r.target,
                extra: r.extra,
            });
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
            out.push(AuditRecord {
                id: r.id,
                at: r.at,
                actor: r.actor,
                source: r.source,
                workspace: r.workspace,
                operation: r.operation,
                paths: r.paths,
                result: r.result,
                detail: r.detail,
                step: r.step,
            });
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

/// Writes inside one LMDB write transaction; reads see them.
pub(super) struct Writer<'a, 'e> {
    txn: &'a mut RwTxn<'e>,
    d: &'a Dbs,
}

macro_rules! read_through {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl StoreRead for Writer<'_, '_> {
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
    object_ids() -> Vec<(ObjectId, u8)>;
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
}

impl<'a, 'e> Writer<'a, 'e> {
    pub(super) fn new(txn: &'a mut RwTxn<'e>, d: &'a Dbs) -> Self {
        Writer { txn, d }
    }

    fn reader(&self) -> Reader<'_> {
        Reader {
            txn: self.txn,
            d: self.d,
        }
    }

    fn put(&mut self, db: &Db, key: &[u8], value: &[u8]) -> Result<()> {
        db.put(self.txn, key, value).map_err(heed_error)
    }

    fn del(&mut self, db: &Db, key: &[u8]) -> Result<bool> {
        db.delete(self.txn, key).map_err(heed_error)
    }

    pub(super) fn meta_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let meta = self.d.meta;
        self.put(&meta, key, value)
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
        let (workspaces, ids) = (self.d.workspaces, self.d.workspace_ids);
        self.put(&workspaces, row.name.as_bytes(), &encode(row)?)?;
        self.put(&ids, &id8(row.id), row.name.as_bytes())
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
        let Some(v) = self.reader().get(&self.d.overlay, key)? else {
            return Ok(());
        };
        let o = decode_overlay(v)?;
        let child = cat(&[&id8(ws), &hash16(o.parent), &key[8..]]);
        let (overlay, children) = (self.d.overlay, self.d.overlay_children);
        self.del(&children, &child)?;
        self.del(&overlay, key)?;
        self.add(&cat(&[b"overlay.len.", &id8(ws)]), -1)
    }

    /// Delete every overlay entry of `ws` whose path starts with `prefix`.
    fn overlay_remove_prefix(&mut self, ws: i64, prefix: &str) -> Result<()> {
        let key = cat(&[&id8(ws), text_prefix(prefix.as_bytes())]);
        let mut doomed = Vec::new();
        for (k, v) in self.reader().scan(&self.d.overlay, &key)? {
            if decode_overlay(v)?.path.starts_with(prefix.as_bytes()) {
                doomed.push(k.to_vec());
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
            .get(&self.d.checkpoint_ids, &id8(id))?
            .map(<[u8]>::to_vec)
        else {
            return Ok(None);
        };
        let rec = self.reader().checkpoint_at(&key)?;
        let (cps, ids, by_ws) = (
            self.d.checkpoints,
            self.d.checkpoint_ids,
            self.d.checkpoints_by_ws,
        );
        self.del(&cps, &key)?;
        self.del(&ids, &id8(id))?;
        self.del(&by_ws, &cat(&[&key[..8], &id8(id)]))?;
        Ok(rec)
    }

    fn checkpoint_put(&mut self, rec: &CheckpointRecord) -> Result<()> {
        let key = cat(&[&id8(rec.workspace), rec.name.as_bytes()]);
        let (cps, ids, by_ws) = (
            self.d.checkpoints,
            self.d.checkpoint_ids,
            self.d.checkpoints_by_ws,
        );
        self.put(&cps, &key, &encode(&CpRow::from(rec))?)?;
        self.put(&ids, &id8(rec.id), &key)?;
        self.put(
            &by_ws,
            &cat(&[&id8(rec.workspace), &id8(rec.id)]),
            rec.name.as_bytes(),
        )
    }
}

fn unique(what: &str, name: &str) -> Error {
    Error::Storage(format!("UNIQUE constraint failed: {what} `{name}` exists"))
}

impl StoreWrite for Writer<'_, '_> {
    fn put_object(&mut self, id: &ObjectId, kind: u8, data: &[u8]) -> Result<()> {
        if self.reader().has_object(id)? {
            return Ok(());
        }
        let objects = self.d.objects;
        let mut v = Vec::with_capacity(data.len() + 1);
        v.push(kind);
        v.extend_from_slice(data);
        self.put(&objects, &id.0, &v)?;
        let size = data.len() as i64;
        self.add(b"objects.count", 1)?;
        self.add(b"objects.bytes", size)?;
        if kind == CHUNK_KIND {
            self.add(b"objects.chunk_bytes", size)?;
        }
        Ok(())
    }

    fn delete_object(&mut self, id: &ObjectId) -> Result<()> {
        let Some((kind, size)) = self
            .reader()
            .get(&self.d.objects, &id.0)?
            .and_then(|v| v.split_first().map(|(k, d)| (*k, d.len() as i64)))
        else {
            return Ok(());
        };
        let objects = self.d.objects;
        self.del(&objects, &id.0)?;
        self.add(b"objects.count", -1)?;
        self.add(b"objects.bytes", -size)?;
        if kind == CHUNK_KIND {
            self.add(b"objects.chunk_bytes", -size)?;
        }
        Ok(())
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
            .scan(&self.d.ops_by_ws, &id8(ws))?
            .into_iter()
            .map(|(k, _)| k.to_vec())
            .collect();
        let (ops, ops_by_ws) = (self.d.ops, self.d.ops_by_ws);
        for k in op_keys {
            self.del(&ops, &k[8..])?;
            self.del(&ops_by_ws, &k)?;
        }
        if let Some(rec) = self.reader().workspace_by_id(ws)? {
            let (workspaces, ids) = (self.d.workspaces, self.d.workspace_ids);
            self.del(&workspaces, rec.name.as_bytes())?;
            self.del(&ids, &id8(ws))?;
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
        let fresh = self.reader().get(&self.d.overlay, &key)?.is_none();
        let (overlay, children) = (self.d.overlay, self.d.overlay_children);
        self.put(&overlay, &key, &encode_overlay(path, parent, node))?;
        if fresh {
            let child = cat(&[&id8(ws), &hash16(parent.as_bytes()), &key[8..]]);
            self.put(&children, &child, &[])?;
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

    fn set_setting(&mut self, key: &str, value: Option<&str>) -> Result<()> {
        let k = text_key(key.as_bytes()).into_owned();
        let settings = self.d.settings;
        match value {
            Some(v) => {
                let mut val = Vec::with_capacity(key.len() + v.len() + 4);
                put_text(&mut val, key.as_bytes());
                val.extend_from_slice(v.as_bytes());
                self.put(&settings, &k, &val)
            }
            None => self.del(&settings, &k).map(drop),
        }
    }

    fn append_op(&mut self, rec: &OpRecord) -> Result<i64> {
        let id = self.next_id("op")?;
        let row = OpRow {
            id,
            ws: rec.workspace,
            at: rec.at,
            kind: rec.kind.clone(),
            description: rec.description.clone(),
            root_before: rec.root_before.map(|i| i.0),
            root_after: rec.root_after.map(|i| i.0),
            target: rec.target,
            extra: rec.extra.clone(),
        };
        let (ops, by_ws) = (self.d.ops, self.d.ops_by_ws);
        self.put(&ops, &id8(id), &encode(&row)?)?;
        self.put(&by_ws, &cat(&[&id8(rec.workspace), &id8(id)]), &[])?;
        Ok(id)
    }

    fn delete_op(&mut self, id: i64) -> Result<()> {
        let Some(v) = self.reader().get(&self.d.ops, &id8(id))? else {
            return Ok(());
        };
        let ws = decode::<OpRow>(v, "op")?.ws;
        let (ops, by_ws) = (self.d.ops, self.d.ops_by_ws);
        self.del(&ops, &id8(id))?;
        self.del(&by_ws, &cat(&[&id8(ws), &id8(id)]))?;
        Ok(())
    }

    fn append_audit(&mut self, rec: &AuditRecord) -> Result<i64> {
        let id = self.next_id("audit")?;
        let row = AuditRow {
            id,
            at: rec.at,
            actor: rec.actor.clone(),
            source: rec.source.clone(),
            workspace: rec.workspace.clone(),
            operation: rec.operation.clone(),
            paths: rec.paths.clone(),
            result: rec.result.clone(),
            detail: rec.detail.clone(),
            step: rec.step,
        };
        let (audit, main) = (self.d.audit, self.d.audit_main);
        self.put(&audit, &id8(id), &encode(&row)?)?;
        if !rec.step {
            self.put(&main, &id8(id), &[])?;
        }
        Ok(id)
    }
}
