//! The vault layout shared by the ordered key-value engines (LMDB, sled): the tables, their
//! key encodings and the `StoreRead`/`StoreWrite` implementations, written once against two
//! small traits an engine implements (`KvRead`: point reads and prefix scans; `KvWrite`:
//! puts and deletes inside one atomic commit).
//!
//! The layout, with its cost bounds (see `tx.rs` for the key encodings):
//! - `objects`: id → kind byte + bytes. Lookups O(log N); a partial read copies only the
//!   asked range.
//! - `workspaces` by name and `workspace_ids` by id; `overlay` by (workspace, path) and
//!   `overlay_children` by (workspace, parent hash, path), so a directory's entries and a
//!   subtree are each one range, O(log N + result).
//! - `checkpoints` by (workspace, name), `checkpoint_ids` and `checkpoints_by_ws` (ordered by
//!   id); `ops` by id and `ops_by_ws`; `audit` by id and `audit_main` (the non-step ids), so
//!   `avfs audit` reads only what it shows.
//! - `settings` by key, `meta` for the format, the id counters (committed with the writes
//!   that use them, so kill -9 never reuses an id) and running totals (object count and
//!   bytes, overlay sizes), so no question about the whole vault scans it.

mod read;
mod rows;
mod tx;

use std::collections::BTreeMap;
use std::ops::{Bound, Deref};
use std::path::{Path, PathBuf};

pub(super) use self::read::Reader;
pub(super) use self::tx::Writer;
use super::ReadAhead;
use crate::error::{Error, Result};

/// `meta` keys.
pub(super) const FORMAT_KEY: &[u8] = b"format";
pub(super) const ENGINE_KEY: &[u8] = b"engine";
/// Set by `vault migrate` in the transaction that copied the vault away.
pub(super) const RETIRED_KEY: &[u8] = b"retired";
/// The counters most writes read: the ids (`next.<kind>`) and the object totals. A server
/// engine fetches them with its lock.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) const WRITE_COUNTERS: [&[u8]; 7] = [
    b"next.op",
    b"next.audit",
    b"next.workspace",
    b"next.checkpoint",
    b"objects.count",
    b"objects.bytes",
    b"objects.chunk_bytes",
];

/// Keys of tables: rows by (table, key), or scans by (table, prefix).
pub(super) type TableKeys = Vec<(Table, Vec<u8>)>;

/// What a `ReadAhead` names, in this layout: rows by key, and scans by prefix whose first
/// page is wanted.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) fn read_ahead_keys(a: &ReadAhead) -> (TableKeys, TableKeys) {
    use self::rows::{cat, id8, text_key, text_prefix};
    let mut rows = Vec::new();
    let mut scans = Vec::new();
    for name in &a.workspaces {
        rows.push((Table::Workspaces, name.as_bytes().to_vec()));
    }
    for id in &a.workspace_ids {
        rows.push((Table::WorkspaceIds, id8(*id).to_vec()));
    }
    for key in &a.settings {
        rows.push((Table::Settings, text_key(key.as_bytes()).into_owned()));
    }
    for prefix in &a.setting_prefixes {
        scans.push((Table::Settings, text_prefix(prefix.as_bytes()).to_vec()));
    }
    for ws in &a.overlays {
        scans.push((Table::Overlay, id8(*ws).to_vec()));
        rows.push((Table::Meta, cat(&[b"overlay.len.", &id8(*ws)])));
    }
    for (ws, name) in &a.checkpoints {
        rows.push((Table::Checkpoints, cat(&[&id8(*ws), name.as_bytes()])));
    }
    (rows, scans)
}

/// The tables of a vault, in `Table::NAMES` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Table {
    Meta,
    Objects,
    Workspaces,
    WorkspaceIds,
    Overlay,
    OverlayChildren,
    Checkpoints,
    CheckpointIds,
    CheckpointsByWs,
    Ops,
    OpsByWs,
    Audit,
    AuditMain,
    Settings,
}

impl Table {
    pub(super) const COUNT: usize = 14;
    /// Every table, in `Table::NAMES` order.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(super) const ALL: [Table; Table::COUNT] = [
        Table::Meta,
        Table::Objects,
        Table::Workspaces,
        Table::WorkspaceIds,
        Table::Overlay,
        Table::OverlayChildren,
        Table::Checkpoints,
        Table::CheckpointIds,
        Table::CheckpointsByWs,
        Table::Ops,
        Table::OpsByWs,
        Table::Audit,
        Table::AuditMain,
        Table::Settings,
    ];
    /// Each table's name in the engine's files (an index into it is `table as usize`).
    #[cfg_attr(not(any(feature = "lmdb", feature = "sled")), allow(dead_code))]
    pub(super) const NAMES: [&'static str; Table::COUNT] = [
        "meta",
        "objects",
        "workspaces",
        "workspace_ids",
        "overlay",
        "overlay_children",
        "checkpoints",
        "checkpoint_ids",
        "checkpoints_by_ws",
        "ops",
        "ops_by_ws",
        "audit",
        "audit_main",
        "settings",
    ];
}

/// A value read from an engine: borrowed from its map (LMDB) or held by its own handle
/// (sled's shared buffers), never copied whole just to read part of it.
pub(super) enum Val<'s> {
    Ref(&'s [u8]),
    Held(Box<dyn AsRef<[u8]> + 's>),
}

impl Deref for Val<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Val::Ref(b) => b,
            Val::Held(b) => (**b).as_ref(),
        }
    }
}

/// A visitor of (key, value) pairs; it returns false to stop the scan.
pub(super) type Visit<'f> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'f;

/// Reads inside one consistent view of an engine.
pub(super) trait KvRead {
    /// The value at `key` (no record has an empty key).
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>>;
    /// Every (key, value) whose key starts with `prefix` (empty: the whole table), in key
    /// order or, with `rev`, in reverse, until `visit` returns false.
    fn scan(&self, t: Table, prefix: &[u8], rev: bool, visit: &mut Visit<'_>) -> Result<()>;

    /// The kind and size of the object whose `objects` row holds `v`, as a scan sees the
    /// row (an engine that keeps large objects elsewhere stores a reference there).
    fn object_head(&self, v: &[u8]) -> Option<(u8, u64)> {
        v.split_first().map(|(k, d)| (*k, d.len() as u64))
    }

    /// The kind and size of object `key`, without fetching its bytes from elsewhere.
    fn object_head_at(&self, key: &[u8]) -> Result<Option<(u8, u64)>> {
        Ok(self
            .get(Table::Objects, key)?
            .and_then(|v| self.object_head(&v)))
    }
}

/// Writes inside one atomic commit; reads see them.
pub(super) trait KvWrite: KvRead {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> Result<()>;
    fn del(&mut self, t: Table, key: &[u8]) -> Result<()>;

    /// Whether a new object is put without first looking whether it is stored, all the
    /// looks made at once before commit (`Writer::settle`): for an engine where each look
    /// is a round trip. Such an engine implements the three below.
    fn defers_object_checks(&self) -> bool {
        false
    }
    /// Whether this transaction put or deleted `key`.
    fn is_buffered(&self, _t: Table, _key: &[u8]) -> bool {
        false
    }
    /// Drop what this transaction put or deleted at `key`: reads see the stored row again.
    fn forget(&mut self, _t: Table, _key: &[u8]) {}
    /// Which of `keys` the table held before this transaction, in one look.
    fn stored_keys(&self, t: Table, keys: &[&[u8]]) -> Result<std::collections::HashSet<Vec<u8>>> {
        let _ = (t, keys);
        Err(Error::Storage(
            "this engine looks for each object as it is put".into(),
        ))
    }
}

/// The vault file's canonical path, or `vault_not_found`.
pub(super) fn canonical(path: &Path) -> Result<PathBuf> {
    path.canonicalize().map_err(|_| Error::VaultNotFound {
        name: path.display().to_string(),
        suggestions: Vec::new(),
    })
}

/// Check the format number an engine's `meta` holds (`found`): one this build reads, or a
/// typed error saying what is wrong.
pub(super) use super::KV_FORMAT_VERSION;

pub(super) fn check_format(engine: &str, path: &Path, found: Option<Vec<u8>>) -> Result<()> {
    let found = match found {
        Some(b) if b.len() == 4 => u32::from_le_bytes(b.try_into().expect("4 bytes")),
        _ => {
            return Err(Error::CorruptVault {
                reason: format!("the {engine} vault holds no vault format number"),
            });
        }
    };
    if found > KV_FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found,
            supported: KV_FORMAT_VERSION,
        });
    }
    Ok(())
}

/// A write's changes not yet committed, by key: a value, or `None` for a deletion.
pub(super) type Buffer = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// The keys after every key that starts with `prefix` (`Unbounded`: no end).
pub(super) fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

/// Walk a stored range with a layer over it, in key order (or reversed, both inputs
/// reversed too): on a tie the layer's entry wins, and a layer's `None` hides the key.
pub(super) fn merge<'l, K: AsRef<[u8]>, V: AsRef<[u8]>>(
    mut stored: impl Iterator<Item = Result<(K, V)>>,
    mut layer: impl Iterator<Item = (&'l Vec<u8>, &'l Option<Vec<u8>>)>,
    rev: bool,
    visit: &mut Visit<'_>,
) -> Result<()> {
    let mut next_stored = stored.next().transpose()?;
    let mut next_layer = layer.next();
    loop {
        let take_layer = match (&next_stored, &next_layer) {
            (None, None) => return Ok(()),
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((sk, _)), Some((lk, _))) => {
                let order = lk.as_slice().cmp(sk.as_ref());
                if order.is_eq() {
                    next_stored = stored.next().transpose()?;
                }
                order.is_eq() || (order.is_lt() != rev)
            }
        };
        let go_on = if take_layer {
            let (k, v) = next_layer.take().expect("a layer entry");
            next_layer = layer.next();
            match v {
                Some(v) => visit(k, v)?,
                None => true,
            }
        } else {
            let (k, v) = next_stored.take().expect("a stored entry");
            next_stored = stored.next().transpose()?;
            visit(k.as_ref(), v.as_ref())?
        };
        if !go_on {
            return Ok(());
        }
    }
}
