//! One view of a PostgreSQL vault: a read inside a `REPEATABLE READ` transaction (one
//! snapshot of the server), or a write inside a transaction that holds the vault's write
//! lock. A write buffers its changes and sends them at commit in a few statements, however
//! many there are; its own reads see the buffer. Scans fetch the table in pages, so a
//! visitor that stops early costs one small query, and a long scan holds one page at a time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Bound;

use postgres::Transaction;

use super::objects::Objects;
use super::{Statements, pg_error};
use crate::error::Result;
use crate::store::kv::{Buffer, KvRead, KvWrite, Table, Val, Visit, merge, prefix_end};

/// Rows per page of a scan: small first (most scans stop early), then larger.
const FIRST_PAGE: i64 = 64;
const PAGE: i64 = 2048;
/// Bytes of keys and values sent in one statement at commit.
const BATCH_BYTES: usize = 8 << 20;

/// The first byte of an `objects` row whose bytes are in the object store: then the
/// object's kind, its size (u64, little-endian) and the BLAKE3 of its stored bytes. No
/// object kind is this byte.
const ELSEWHERE: u8 = 0xff;
const REF_LEN: usize = 2 + 8 + 32;

/// Where a vault's objects go: their rows, or the object store for those larger than
/// `inline_max` bytes.
#[derive(Clone, Copy)]
pub(super) struct Placement<'s> {
    pub(super) store: Option<&'s Objects>,
    pub(super) inline_max: usize,
}

/// An `objects` row that refers to the object store: (kind, size, hash).
fn reference(v: &[u8]) -> Option<(u8, u64, [u8; 32])> {
    if v.len() != REF_LEN || v[0] != ELSEWHERE {
        return None;
    }
    let size = u64::from_le_bytes(v[2..10].try_into().ok()?);
    Some((v[1], size, v[10..].try_into().ok()?))
}

pub(super) struct View<'c, 's> {
    txn: RefCell<Transaction<'c>>,
    st: &'s Statements,
    place: Placement<'s>,
    buf: [Buffer; Table::COUNT],
}

impl<'c, 's> View<'c, 's> {
    pub(super) fn new(txn: Transaction<'c>, st: &'s Statements, place: Placement<'s>) -> Self {
        View {
            txn: RefCell::new(txn),
            st,
            place,
            buf: Default::default(),
        }
    }

    /// Send the buffered writes and commit: all of them land or none does. New objects
    /// bound for the object store are uploaded first, in parallel; their rows refer to them.
    pub(super) fn commit(mut self) -> Result<()> {
        if let Some(store) = self.place.store {
            let mut uploads = Vec::new();
            for (k, v) in self.buf[Table::Objects as usize].iter_mut() {
                let Some(bytes) = v.as_mut().filter(|b| b.len() > self.place.inline_max) else {
                    continue;
                };
                let mut row = Vec::with_capacity(REF_LEN);
                row.extend_from_slice(&[ELSEWHERE, bytes[0]]);
                row.extend_from_slice(&((bytes.len() - 1) as u64).to_le_bytes());
                row.extend_from_slice(blake3::hash(bytes).as_bytes());
                uploads.push((k.clone(), std::mem::replace(bytes, row)));
            }
            store.put_all(uploads)?;
        }
        // Every table's puts in one statement and its deletions in another (split only past
        // BATCH_BYTES): a commit costs a few round trips, however many tables it touches.
        let mut txn = self.txn.into_inner();
        let (mut puts, mut dels) = (Batch::default(), Batch::default());
        for (i, buf) in self.buf.into_iter().enumerate() {
            for (k, v) in buf {
                let (batch, st) = match v {
                    Some(_) => (&mut puts, &self.st.upsert),
                    None => (&mut dels, &self.st.delete),
                };
                batch.push(i as i16, k, v);
                if batch.bytes >= BATCH_BYTES {
                    batch.send(&mut txn, st)?;
                }
            }
        }
        puts.send(&mut txn, &self.st.upsert)?;
        dels.send(&mut txn, &self.st.delete)?;
        txn.commit().map_err(pg_error)
    }

    /// One page of `t`'s keys in [lo, hi), ascending or (`rev`) descending.
    fn page(
        &self,
        t: Table,
        lo: &[u8],
        hi: Option<&[u8]>,
        rev: bool,
        limit: i64,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let t = t as i16;
        let mut txn = self.txn.borrow_mut();
        let rows = match (hi, rev) {
            (Some(hi), false) => txn.query(&self.st.range, &[&t, &lo, &hi, &limit]),
            (None, false) => txn.query(&self.st.from, &[&t, &lo, &limit]),
            (Some(hi), true) => txn.query(&self.st.range_rev, &[&t, &lo, &hi, &limit]),
            (None, true) => txn.query(&self.st.from_rev, &[&t, &lo, &limit]),
        }
        .map_err(pg_error)?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

/// Tables, keys and values for one statement at commit.
#[derive(Default)]
struct Batch {
    tables: Vec<i16>,
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    bytes: usize,
}

impl Batch {
    fn push(&mut self, t: i16, k: Vec<u8>, v: Option<Vec<u8>>) {
        self.bytes += k.len() + v.as_ref().map_or(0, Vec::len);
        self.tables.push(t);
        self.keys.push(k);
        if let Some(v) = v {
            self.values.push(v);
        }
    }

    fn send(&mut self, txn: &mut Transaction<'_>, st: &postgres::Statement) -> Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let b = std::mem::take(self);
        if st.params().len() == 3 {
            txn.execute(st, &[&b.tables, &b.keys, &b.values])
        } else {
            txn.execute(st, &[&b.tables, &b.keys])
        }
        .map_err(pg_error)?;
        Ok(())
    }
}

/// A scan's rows, fetched a page at a time.
struct Pages<'v, 'c, 's> {
    view: &'v View<'c, 's>,
    t: Table,
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    rev: bool,
    rows: VecDeque<(Vec<u8>, Vec<u8>)>,
    limit: i64,
    done: bool,
}

impl Iterator for Pages<'_, '_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rows.is_empty() && !self.done {
            let page =
                match self
                    .view
                    .page(self.t, &self.lo, self.hi.as_deref(), self.rev, self.limit)
                {
                    Ok(p) => p,
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                };
            self.done = (page.len() as i64) < self.limit;
            self.limit = PAGE;
            if let Some((last, _)) = page.last() {
                if self.rev {
                    self.hi = Some(last.clone());
                } else {
                    // The first key after `last`.
                    self.lo = last.iter().copied().chain([0]).collect();
                }
            }
            self.rows = page.into();
        }
        self.rows.pop_front().map(Ok)
    }
}

impl View<'_, '_> {
    /// A row as stored (an object in the object store: its reference).
    fn row(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let row = self
            .txn
            .borrow_mut()
            .query_opt(&self.st.get, &[&(t as i16), &key])
            .map_err(pg_error)?;
        Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
    }
}

impl KvRead for View<'_, '_> {
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>> {
        if let Some(v) = self.buf[t as usize].get(key) {
            return Ok(v.as_deref().map(Val::Ref));
        }
        let Some(v) = self.row(t, key)? else {
            return Ok(None);
        };
        let v = match (t, reference(&v), self.place.store) {
            (Table::Objects, Some((_, _, hash)), Some(store)) => store.get(key, &hash)?,
            (Table::Objects, Some(_), None) => {
                return Err(crate::error::Error::CorruptVault {
                    reason: "an object is in the object store, but the vault names none".into(),
                });
            }
            _ => v,
        };
        Ok(Some(Val::Held(Box::new(v))))
    }

    fn object_head(&self, v: &[u8]) -> Option<(u8, u64)> {
        match reference(v) {
            Some((kind, size, _)) => Some((kind, size)),
            None => v.split_first().map(|(k, d)| (*k, d.len() as u64)),
        }
    }

    fn object_head_at(&self, key: &[u8]) -> Result<Option<(u8, u64)>> {
        if let Some(v) = self.buf[Table::Objects as usize].get(key) {
            return Ok(v.as_deref().and_then(|v| self.object_head(v)));
        }
        Ok(self
            .row(Table::Objects, key)?
            .and_then(|v| self.object_head(&v)))
    }

    fn scan(&self, t: Table, prefix: &[u8], rev: bool, visit: &mut Visit<'_>) -> Result<()> {
        let end = prefix_end(prefix);
        let stored = Pages {
            view: self,
            t,
            lo: prefix.to_vec(),
            hi: match &end {
                Bound::Excluded(e) => Some(e.clone()),
                _ => None,
            },
            rev,
            rows: VecDeque::new(),
            limit: FIRST_PAGE,
            done: false,
        };
        let bounds = (Bound::Included(prefix), end.as_ref().map(Vec::as_slice));
        let layered = self.buf[t as usize].range::<[u8], _>(bounds);
        if rev {
            merge(stored, layered.rev(), true, visit)
        } else {
            merge(stored, layered, false, visit)
        }
    }
}

impl KvWrite for View<'_, '_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> Result<()> {
        if t == Table::Objects && value.first() == Some(&ELSEWHERE) {
            return Err(crate::error::Error::Storage(format!(
                "object kind {ELSEWHERE} is reserved by the PostgreSQL engine"
            )));
        }
        self.buf[t as usize].insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn del(&mut self, t: Table, key: &[u8]) -> Result<()> {
        self.buf[t as usize].insert(key.to_vec(), None);
        Ok(())
    }
}
