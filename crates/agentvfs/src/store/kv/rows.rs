//! Key and value encodings of the key-value engines.
//!
//! Keys: ids are 8 bytes big-endian, so key order is id order. A text key (a path, a setting)
//! is its bytes when at most `KEY_KEEP` long, else its first `KEY_KEEP` bytes and 16 bytes of
//! its hash (LMDB keys are at most 511 bytes; every engine shares the encoding), so a prefix
//! of a key is still a prefix of its encoding; values carry the full text, and range reads
//! check it and sort by it.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::id::ObjectId;
use crate::store::{AuditRecord, CheckpointRecord, OpRecord, WorkspaceRecord};

/// How much of a text key is kept as is.
pub(super) const KEY_KEEP: usize = 400;
/// The kind of content chunks (counted apart in `object_stats`).
pub(super) const CHUNK_KIND: u8 = 1;

pub(super) fn text_key(text: &[u8]) -> Cow<'_, [u8]> {
    if text.len() <= KEY_KEEP {
        return Cow::Borrowed(text);
    }
    let mut k = text[..KEY_KEEP].to_vec();
    k.extend_from_slice(&blake3::hash(text).as_bytes()[..16]);
    Cow::Owned(k)
}

/// The part of a text prefix that is a prefix of every matching key's encoding.
pub(super) fn text_prefix(prefix: &[u8]) -> &[u8] {
    &prefix[..prefix.len().min(KEY_KEEP)]
}

pub(super) fn id8(id: i64) -> [u8; 8] {
    (id as u64).to_be_bytes()
}

pub(super) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

pub(super) fn hash16(text: &[u8]) -> [u8; 16] {
    blake3::hash(text).as_bytes()[..16]
        .try_into()
        .expect("16 bytes")
}

/// `len u32 LE` + bytes, for texts inside values.
pub(super) fn put_text(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text);
}

pub(super) fn damaged(what: &str) -> Error {
    Error::CorruptVault {
        reason: format!("a {what} record is malformed"),
    }
}

pub(super) fn take_text<'v>(v: &mut &'v [u8], what: &str) -> Result<&'v [u8]> {
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

pub(super) fn utf8(b: &[u8], what: &str) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| damaged(what))
}

/// An overlay value: path, parent, then `0` (whiteout) or `1` + the encoded node.
pub(super) struct OverlayValue<'v> {
    pub(super) path: &'v [u8],
    pub(super) parent: &'v [u8],
    pub(super) node: Option<&'v [u8]>,
}

pub(super) fn encode_overlay(path: &str, parent: &str, node: Option<&[u8]>) -> Vec<u8> {
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

pub(super) fn decode_overlay(mut v: &[u8]) -> Result<OverlayValue<'_>> {
    let path = take_text(&mut v, "overlay")?;
    let parent = take_text(&mut v, "overlay")?;
    let node = match v.split_first() {
        Some((0, _)) => None,
        Some((1, rest)) => Some(rest),
        _ => return Err(damaged("overlay")),
    };
    Ok(OverlayValue { path, parent, node })
}

pub(super) type OverlayRows = Vec<(String, Option<Vec<u8>>)>;

pub(super) fn overlay_row(v: &[u8]) -> Result<(String, Option<Vec<u8>>)> {
    let o = decode_overlay(v)?;
    Ok((utf8(o.path, "overlay")?, o.node.map(<[u8]>::to_vec)))
}

#[derive(Serialize, Deserialize)]
pub(super) struct WsRow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) base: [u8; 32],
    pub(super) parent: Option<String>,
    pub(super) base_root: Option<[u8; 32]>,
    pub(super) fork_checkpoint: Option<String>,
    pub(super) created_at: i64,
    pub(super) files: u64,
    pub(super) bytes: u64,
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
pub(super) struct CpRow {
    pub(super) id: i64,
    pub(super) ws: i64,
    pub(super) name: String,
    pub(super) root: [u8; 32],
    pub(super) message: Option<String>,
    pub(super) created_at: i64,
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) auto: bool,
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
pub(super) struct OpRow {
    pub(super) id: i64,
    pub(super) ws: i64,
    pub(super) at: i64,
    pub(super) kind: String,
    pub(super) description: String,
    pub(super) root_before: Option<[u8; 32]>,
    pub(super) root_after: Option<[u8; 32]>,
    pub(super) target: Option<i64>,
    pub(super) extra: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct AuditRow {
    pub(super) id: i64,
    pub(super) at: i64,
    pub(super) actor: String,
    pub(super) source: String,
    pub(super) workspace: String,
    pub(super) operation: String,
    pub(super) paths: Vec<String>,
    pub(super) result: String,
    pub(super) detail: Option<String>,
    pub(super) step: bool,
}

pub(super) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|e| Error::Storage(format!("encoding a record: {e}")))
}

pub(super) fn decode<'a, T: Deserialize<'a>>(b: &'a [u8], what: &str) -> Result<T> {
    postcard::from_bytes(b).map_err(|_| damaged(what))
}

impl OpRow {
    pub(super) fn new(id: i64, r: &OpRecord) -> Self {
        OpRow {
            id,
            ws: r.workspace,
            at: r.at,
            kind: r.kind.clone(),
            description: r.description.clone(),
            root_before: r.root_before.map(|i| i.0),
            root_after: r.root_after.map(|i| i.0),
            target: r.target,
            extra: r.extra.clone(),
        }
    }
}

impl From<OpRow> for OpRecord {
    fn from(r: OpRow) -> Self {
        OpRecord {
            id: r.id,
            workspace: r.ws,
            at: r.at,
            kind: r.kind,
            description: r.description,
            root_before: r.root_before.map(ObjectId),
            root_after: r.root_after.map(ObjectId),
            target: r.target,
            extra: r.extra,
        }
    }
}

impl AuditRow {
    pub(super) fn new(id: i64, r: &AuditRecord) -> Self {
        AuditRow {
            id,
            at: r.at,
            actor: r.actor.clone(),
            source: r.source.clone(),
            workspace: r.workspace.clone(),
            operation: r.operation.clone(),
            paths: r.paths.clone(),
            result: r.result.clone(),
            detail: r.detail.clone(),
            step: r.step,
        }
    }
}

impl From<AuditRow> for AuditRecord {
    fn from(r: AuditRow) -> Self {
        AuditRecord {
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
        }
    }
}
