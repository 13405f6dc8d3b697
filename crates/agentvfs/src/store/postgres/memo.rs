//! Object rows this process read or wrote, kept in memory. An object's key is the hash of
//! its content, so its row never changes: a row seen once answers every later read of it
//! without a round trip, with no invalidation. That matters most under the vault's lock,
//! where an edit or a checkpoint reads the trees on a path one after another (a round trip
//! each, before this). Bounded in bytes, least recently used out first.
//!
//! Only content is answered here. Whether the server holds an object (`has_object`, a
//! write's check before it counts one as new, a deletion) is always asked of the server,
//! and `vault check` reads every object from the server. This process's deletions drop
//! their rows once committed; a row another host deleted may still be read here, which is
//! its right content.

use std::sync::{Arc, Mutex};

use hashlink::LruCache;

use crate::store::lock::lock;

/// Bytes kept, at most: rows and what each entry costs besides (`ENTRY`).
const MAX_BYTES: usize = 64 << 20;
/// An entry's cost besides its row: its key, the row's allocation and the list links.
const ENTRY: usize = 128;
/// Rows larger than this are not kept (file content read once, as a build reads sources,
/// would only push the trees out).
const MAX_ROW: usize = 64 << 10;

/// A vault (its lock key: one per schema) and an object's id.
type Key = (i64, [u8; 32]);

struct Rows {
    rows: LruCache<Key, Arc<[u8]>>,
    bytes: usize,
}

fn rows() -> &'static Mutex<Rows> {
    static ROWS: std::sync::OnceLock<Mutex<Rows>> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        Mutex::new(Rows {
            rows: LruCache::new_unbounded(),
            bytes: 0,
        })
    })
}

fn key(vault: i64, id: &[u8]) -> Option<Key> {
    Some((vault, id.try_into().ok()?))
}

/// Object `id`'s row in `vault`, if this process kept it.
pub(super) fn get(vault: i64, id: &[u8]) -> Option<Vec<u8>> {
    let key = key(vault, id)?;
    lock(rows()).rows.get(&key).map(|v| v.to_vec())
}

/// Whether a row of `len` bytes is kept at all.
pub(super) fn keeps(len: usize) -> bool {
    len <= MAX_ROW
}

/// Keep object `id`'s row in `vault` (as the server holds it, or is about to once the
/// write that sends it commits).
pub(super) fn put(vault: i64, id: &[u8], row: &[u8]) {
    if !keeps(row.len()) {
        return;
    }
    let Some(key) = key(vault, id) else { return };
    let mut held = lock(rows());
    if held.rows.contains_key(&key) {
        return;
    }
    held.bytes += row.len() + ENTRY;
    held.rows.insert(key, row.into());
    while held.bytes > MAX_BYTES {
        match held.rows.remove_lru() {
            Some((_, gone)) => held.bytes -= gone.len() + ENTRY,
            None => break,
        }
    }
}

/// Drop object `id`'s row in `vault` (this process deleted it).
pub(super) fn forget(vault: i64, id: &[u8]) {
    let Some(key) = key(vault, id) else { return };
    let mut held = lock(rows());
    if let Some(gone) = held.rows.remove(&key) {
        held.bytes -= gone.len() + ENTRY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_kept_per_vault_and_the_oldest_go_first_past_the_bound() {
        let id = |n: u32| {
            let mut id = [0u8; 32];
            id[..4].copy_from_slice(&n.to_le_bytes());
            id
        };
        // Vaults no other test uses.
        let (a, b) = (i64::MIN + 11, i64::MIN + 12);
        put(a, &id(1), b"tree");
        assert_eq!(get(a, &id(1)).as_deref(), Some(&b"tree"[..]));
        assert_eq!(get(b, &id(1)), None, "another vault's row");
        assert_eq!(get(a, b"short"), None, "not an object id");
        forget(a, &id(1));
        assert_eq!(get(a, &id(1)), None, "deleted");
        // Too large to keep.
        put(a, &id(2), &vec![0; MAX_ROW + 1]);
        assert_eq!(get(a, &id(2)), None);
        // Fill past the bound: the first row goes, a row read since stays.
        let row = vec![7u8; MAX_ROW];
        put(b, &id(0), &row);
        for n in 1..(MAX_BYTES / (MAX_ROW + ENTRY)) as u32 + 4 {
            put(b, &id(n), &row);
            let _ = get(b, &id(n / 2));
        }
        assert!(lock(rows()).bytes <= MAX_BYTES);
        assert_eq!(get(b, &id(0)), None, "least recently used, so evicted");
    }
}
