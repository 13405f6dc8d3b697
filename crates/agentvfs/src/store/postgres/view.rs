//! One view of a PostgreSQL vault: a read inside a `REPEATABLE READ` transaction (one
//! snapshot of the server), or a write inside a transaction that holds the vault's write
//! lock. A write buffers its changes and sends them at commit, with the `COMMIT`, in one
//! round trip however many there are; its own reads see the buffer. A read's `BEGIN` goes
//! out with its first query and its end with the connection's next statement, so a read of
//! one row costs one round trip. A row read twice in one view is fetched once (the view
//! sees one state of the vault). Scans fetch the table in pages, so a visitor that stops
//! early costs one small query, and a long scan holds one page at a time.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::ops::Bound;
use std::pin::Pin;

use futures::FutureExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::conn::{Statements, block, within};
use super::known::{Check, FIRST_PAGE, FirstPages, GUARD_FAILED, Known, PageKey, Rows, Seen};
use super::objects::Objects;
use super::pg_error;
use crate::error::{Error, Result};
use crate::store::kv::{
    Buffer, KvRead, KvWrite, RETIRED_KEY, Table, Val, Visit, merge, prefix_end,
};

/// Rows per page of a scan after the first (`FIRST_PAGE`, small: most scans stop early).
const PAGE: i64 = 2048;
/// Bytes of keys and values sent in one statement at commit.
const BATCH_BYTES: usize = 8 << 20;
/// How a read begins.
const READ_BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

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
    /// The vault's key in this process's memory of object rows (`memo`), or none: every
    /// object is read from the server and the object store, past the host cache too
    /// (`vault check`, and the copy `vault migrate` verifies).
    pub(super) memo: Option<i64>,
}

/// An `objects` row that refers to the object store: (kind, size, hash).
fn reference(v: &[u8]) -> Option<(u8, u64, [u8; 32])> {
    if v.len() != REF_LEN || v[0] != ELSEWHERE {
        return None;
    }
    let size = u64::from_le_bytes(v[2..10].try_into().ok()?);
    Some((v[1], size, v[10..].try_into().ok()?))
}

/// The first key after every key that starts with `prefix`, if there is one: a scan's
/// upper bound.
fn upper_bound(prefix: &[u8]) -> Option<Vec<u8>> {
    match prefix_end(prefix) {
        Bound::Excluded(e) => Some(e),
        _ => None,
    }
}

/// Send `sql` and do not wait for its answer: it goes out before anything sent after it on
/// this connection, whose next answer reports a connection that failed meanwhile.
fn send_only(client: &Client, sql: &str) {
    let _ = client.batch_execute(sql).now_or_never();
}

type Sent<'a> = Pin<Box<dyn Future<Output = std::result::Result<(), tokio_postgres::Error>> + 'a>>;

pub(super) struct View<'c, 's> {
    client: &'c Client,
    st: &'s Statements,
    place: Placement<'s>,
    buf: [Buffer; Table::COUNT],
    /// Rows read so far, objects aside (they can be large, and are read once).
    memo: RefCell<Rows>,
    /// First pages of scans so far (objects aside), by (table, from, to, descending).
    pages: RefCell<FirstPages>,
    /// A read whose `BEGIN` is still to go out (with its first query).
    unbegun: Cell<bool>,
    /// A transaction is open on the server, to be ended when the view is.
    open: Cell<bool>,
    /// A speculative write: its reads are answered from what the handle knows.
    spec: Option<Spec<'s>>,
}

/// A speculative write's reads (see `known`): what it may read, and what it did.
struct Spec<'s> {
    known: &'s Known,
    seen: RefCell<Seen>,
    /// It needed something the handle does not know: what it made of that is worthless.
    missed: Cell<bool>,
}

/// What a speculative write's read outside the handle's knowledge gets (and its caller,
/// which falls back to a write the usual way, never shows).
fn miss() -> Error {
    Error::Storage("a speculative write read what its vault handle does not know".into())
}

impl Spec<'_> {
    /// Row `key` of `t` as known: a row not known and not in a whole page is taken to be
    /// absent (the guard checks). Objects are never known.
    fn row(&self, t: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if t == Table::Objects {
            self.missed.set(true);
            return Err(miss());
        }
        let at = (t, key.to_vec());
        if let Some(v) = self.known.rows.get(&at) {
            self.saw(at, v.clone());
            return Ok(v.clone());
        }
        let page = self.known.pages.iter().find(|((pt, lo, hi, _), _)| {
            *pt == t && key >= lo.as_slice() && hi.as_deref().is_none_or(|hi| key < hi)
        });
        if let Some((pk, rows)) = page {
            self.saw_page(pk, rows);
            return Ok(rows.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()));
        }
        self.saw(at, None);
        Ok(None)
    }

    /// Remember that row `at` was read as `v`. What the handle knows may hold a row twice
    /// (by key, and in a page learned at another write) with different values; a run that
    /// saw both is worthless, as the guard can check only one.
    fn saw(&self, at: (Table, Vec<u8>), v: Option<Vec<u8>>) {
        let mut seen = self.seen.borrow_mut();
        if seen.rows.get(&at).is_some_and(|before| *before != v) {
            self.missed.set(true);
        }
        seen.rows.insert(at, v);
    }

    /// The first page asked as `key`, if known whole.
    fn page(&self, key: &PageKey, limit: i64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        match self.known.pages.get(key) {
            Some(rows) if limit == FIRST_PAGE && key.0 != Table::Objects => {
                self.saw_page(key, rows);
                Ok(rows.clone())
            }
            _ => {
                self.missed.set(true);
                Err(miss())
            }
        }
    }

    fn saw_page(&self, key: &PageKey, rows: &[(Vec<u8>, Vec<u8>)]) {
        let new = {
            let mut seen = self.seen.borrow_mut();
            let new = !seen.pages.iter().any(|(k, _)| k == key);
            if new {
                seen.pages.push((key.clone(), rows.len()));
            }
            new
        };
        if new {
            for (k, v) in rows {
                self.saw((key.0, k.clone()), Some(v.clone()));
            }
        }
    }
}

impl<'c, 's> View<'c, 's> {
    /// A read: its snapshot is taken at its first query.
    pub(super) fn read(client: &'c Client, st: &'s Statements, place: Placement<'s>) -> Self {
        Self::new(client, st, place, false)
    }

    /// A write, in the transaction `client` has begun (and holds the vault's lock in).
    pub(super) fn write(client: &'c Client, st: &'s Statements, place: Placement<'s>) -> Self {
        Self::new(client, st, place, true)
    }

    /// A speculative write on what the handle knows (`known`): nothing is sent until
    /// `commit_speculated`.
    pub(super) fn speculate(
        client: &'c Client,
        st: &'s Statements,
        place: Placement<'s>,
        known: &'s Known,
    ) -> Self {
        let mut view = Self::new(client, st, place, false);
        view.unbegun.set(false);
        view.spec = Some(Spec {
            known,
            seen: RefCell::default(),
            missed: Cell::new(false),
        });
        view
    }

    /// Whether this speculative write read something the handle does not know.
    pub(super) fn missed(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| s.missed.get())
    }

    /// What this write read under the lock (rows, and first pages), for the handle to know.
    pub(super) fn learned(&mut self) -> (Rows, FirstPages) {
        (self.memo.take(), self.pages.take())
    }

    /// This write's changes to every table but objects, for the handle to know.
    pub(super) fn changes(&self) -> Vec<(Table, Buffer)> {
        Table::ALL
            .iter()
            .filter(|t| **t != Table::Objects && !self.buf[**t as usize].is_empty())
            .map(|t| (*t, self.buf[*t as usize].clone()))
            .collect()
    }

    fn new(client: &'c Client, st: &'s Statements, place: Placement<'s>, begun: bool) -> Self {
        View {
            client,
            st,
            place,
            buf: Default::default(),
            memo: RefCell::default(),
            pages: RefCell::default(),
            unbegun: Cell::new(!begun),
            open: Cell::new(begun),
            spec: None,
        }
    }

    /// Send the buffered writes and commit: all of them land or none does. New objects
    /// bound for the object store are uploaded first, in parallel; their rows refer to them.
    /// The statements and the `COMMIT` go out together, and the answer to the `COMMIT` is
    /// waited for: an acknowledged write is on the server.
    pub(super) fn commit(self) -> Result<()> {
        self.send_commit(None).map(drop)
    }

    /// Commit a speculative write in one exchange: `BEGIN`, the vault's lock (`lock_key`),
    /// the guard on what it read (and that the vault is not retired), its changes and the
    /// `COMMIT` go out together. Returns whether it was applied: `false` when the guard
    /// found the vault changed, and nothing was.
    pub(super) fn commit_speculated(self, lock_key: i64) -> Result<bool> {
        let guard = match &self.spec {
            Some(spec) if !spec.missed.get() => {
                spec.seen.borrow().guard(&[(Table::Meta, RETIRED_KEY)])
            }
            _ => return Ok(false),
        };
        self.send_commit(Some((lock_key, guard)))
    }

    /// `commit`, after `BEGIN`, the lock and the guard when `guarded`; whether it was
    /// applied (a guard that failed is not an error).
    fn send_commit(mut self, guarded: Option<(i64, Vec<Check>)>) -> Result<bool> {
        let mut uploaded = None;
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
            uploaded = Some((store, store.put_all(uploads)?));
        }
        // Object rows sent (`None`: deleted), to keep or forget once the commit is
        // acknowledged.
        let sent_objects: Vec<(Vec<u8>, Option<Vec<u8>>)> = match self.place.memo {
            // Rows too large to keep are not copied (an import sends many).
            Some(_) => self.buf[Table::Objects as usize]
                .iter()
                .filter(|(_, v)| v.as_ref().is_none_or(|v| super::memo::keeps(v.len())))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => Vec::new(),
        };
        // Every table's puts in one statement and its deletions in another (split only past
        // BATCH_BYTES).
        let (mut puts, mut dels) = (vec![Batch::default()], vec![Batch::default()]);
        for (i, buf) in std::mem::take(&mut self.buf).into_iter().enumerate() {
            for (k, v) in buf {
                let batches = if v.is_some() { &mut puts } else { &mut dels };
                if batches.last().is_some_and(|b| b.bytes >= BATCH_BYTES) {
                    batches.push(Batch::default());
                }
                batches.last_mut().expect("one batch").push(i as i16, k, v);
            }
        }
        let client = self.client;
        let begin: String;
        let mut sent: Vec<Sent<'_>> = Vec::new();
        if let Some((key, checks)) = &guarded {
            let st = self.st;
            begin = format!("BEGIN; SELECT pg_advisory_xact_lock({key})");
            sent.push(Box::pin(client.batch_execute(&begin)));
            for check in checks {
                sent.push(Box::pin(async move {
                    match check {
                        Check::Rows { t, keys, expected } => {
                            client.execute(&st.guard_rows, &[t, keys, expected]).await
                        }
                        Check::Count {
                            t,
                            lo,
                            hi: Some(hi),
                            n,
                        } => client.execute(&st.guard_range, &[t, lo, hi, n]).await,
                        Check::Count { t, lo, hi: None, n } => {
                            client.execute(&st.guard_from, &[t, lo, n]).await
                        }
                    }
                    .map(drop)
                }));
            }
        }
        for b in puts.iter().filter(|b| !b.keys.is_empty()) {
            let params: [&(dyn ToSql + Sync); 3] = [&b.tables, &b.keys, &b.values];
            let st = &self.st.upsert;
            sent.push(Box::pin(async move {
                client.execute(st, &params).await.map(drop)
            }));
        }
        for b in dels.iter().filter(|b| !b.keys.is_empty()) {
            let params: [&(dyn ToSql + Sync); 2] = [&b.tables, &b.keys];
            let st = &self.st.delete;
            sent.push(Box::pin(async move {
                client.execute(st, &params).await.map(drop)
            }));
        }
        sent.push(Box::pin(client.batch_execute("COMMIT")));
        // A failed statement aborts the transaction, whose `COMMIT` then rolls it back: the
        // first error is the answer, and the connection is ready for the next transaction.
        self.open.set(false);
        // An answer from the server (an error included) settles the write. Silence, or a
        // connection lost, once the `COMMIT` went out leaves it unknown.
        let unsure = |mut e: Error| {
            if let Error::StoreUnavailable { maybe_applied, .. } = &mut e {
                *maybe_applied = true;
            }
            e
        };
        // Every answer is waited for, not only up to the first error: each request is sent
        // when first polled, and one left unpolled (the `COMMIT` after a failed guard)
        // would leave the connection inside the failed transaction.
        let answers = within(futures::future::join_all(sent)).map_err(unsure)?;
        match answers
            .into_iter()
            .find_map(|a| a.err())
            .map_or(Ok(()), Err)
        {
            Ok(()) => {
                if let Some((store, up)) = uploaded {
                    store.keep(up);
                }
                if let Some(vault) = self.place.memo {
                    for (k, v) in &sent_objects {
                        match v {
                            Some(row) => super::memo::put(vault, k, row),
                            None => super::memo::forget(vault, k),
                        }
                    }
                }
                Ok(true)
            }
            Err(e) if guarded.is_some() && e.code().map(SqlState::code) == Some(GUARD_FAILED) => {
                Ok(false)
            }
            Err(e) => {
                let answered = e.as_db_error().is_some();
                let e = pg_error(e);
                Err(if answered { e } else { unsure(e) })
            }
        }
    }

    /// Begin this write: `BEGIN`, the vault's lock (`lock_key`), whether `vault migrate`
    /// retired the vault while this waited for it, and the `rows` and the first pages of
    /// the `scans` named ahead, for the reads that follow. All go out together and run in
    /// turn: each later statement's snapshot is taken once the lock is held. Returns
    /// whether the vault was retired.
    pub(super) fn begin_write(
        &self,
        lock_key: i64,
        rows: &[(Table, Vec<u8>)],
        scans: &[(Table, Vec<u8>)],
    ) -> Result<bool> {
        let mut tables: Vec<(Table, i16, Vec<Vec<u8>>)> = Vec::new();
        for (t, k) in rows {
            match tables.iter_mut().find(|(u, _, _)| u == t) {
                Some((_, _, keys)) => keys.push(k.clone()),
                None => tables.push((*t, *t as i16, vec![k.clone()])),
            }
        }
        // Each scan's bounds, as `page` asks them.
        let ranges: Vec<_> = scans
            .iter()
            .map(|(t, prefix)| (*t as i16, prefix.as_slice(), upper_bound(prefix)))
            .collect();
        let (c, st) = (self.client, self.st);
        let gets = tables.iter().map(|(_, t, keys)| async move {
            let params: [&(dyn ToSql + Sync); 2] = [t, keys];
            c.query(&st.get_many, &params).await
        });
        let pages = ranges.iter().map(|(t, lo, hi)| async move {
            match hi {
                Some(hi) => {
                    let params: [&(dyn ToSql + Sync); 4] = [t, lo, hi, &FIRST_PAGE];
                    c.query(&st.range, &params).await
                }
                None => {
                    let params: [&(dyn ToSql + Sync); 3] = [t, lo, &FIRST_PAGE];
                    c.query(&st.from, &params).await
                }
            }
        });
        let (meta, retired_key) = (Table::Meta as i16, RETIRED_KEY);
        let (_, _, retired, got, paged) = block(async {
            futures::future::try_join5(
                c.batch_execute("BEGIN"),
                c.execute(&st.lock, &[&lock_key]),
                c.query_one(&st.retired, &[&meta, &retired_key]),
                futures::future::try_join_all(gets),
                futures::future::try_join_all(pages),
            )
            .await
        })?;
        for ((t, _, keys), found) in tables.iter().zip(got) {
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.remember(*t, &keys, found);
        }
        for (((t, _), (_, lo, hi)), found) in scans.iter().zip(&ranges).zip(paged) {
            let found = found.into_iter().map(|r| (r.get(0), r.get(1))).collect();
            let key = (*t, lo.to_vec(), hi.clone(), false);
            self.pages.borrow_mut().insert(key, found);
        }
        Ok(retired.get::<_, bool>(0))
    }

    /// Read `keys` of table `t` in one query, for the reads that follow.
    pub(super) fn prefetch(&self, t: Table, keys: &[&[u8]]) -> Result<()> {
        let rows = self.query(&self.st.get_many, &[&(t as i16), &keys])?;
        self.remember(t, keys, rows);
        Ok(())
    }

    /// Keep the answer to a `get_many` of `keys` (rows of `k, v`) for the reads that follow.
    pub(super) fn remember(&self, t: Table, keys: &[&[u8]], rows: Vec<Row>) {
        let mut memo = self.memo.borrow_mut();
        for k in keys {
            memo.insert((t, k.to_vec()), None);
        }
        for r in rows {
            memo.insert((t, r.get(0)), Some(r.get(1)));
        }
    }

    /// Run `st` in this view's transaction (a read's first query takes its `BEGIN` along).
    fn query(&self, st: &Statement, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        if let Some(spec) = &self.spec {
            spec.missed.set(true);
            return Err(miss());
        }
        let c = self.client;
        if self.unbegun.replace(false) {
            self.open.set(true);
            block(async {
                let (_, rows) =
                    futures::future::try_join(c.batch_execute(READ_BEGIN), c.query(st, params))
                        .await?;
                Ok(rows)
            })
        } else {
            block(c.query(st, params))
        }
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
        // A scan's first page, asked again in the same view (a fold before and after an
        // edit), is the same page: the server's state does not change under a view.
        let memo = (limit == FIRST_PAGE && t != Table::Objects)
            .then(|| (t, lo.to_vec(), hi.map(<[u8]>::to_vec), rev));
        if let Some(spec) = &self.spec {
            return spec.page(&(t, lo.to_vec(), hi.map(<[u8]>::to_vec), rev), limit);
        }
        if let Some(rows) = memo
            .as_ref()
            .and_then(|m| self.pages.borrow().get(m).cloned())
        {
            return Ok(rows);
        }
        let t = t as i16;
        let rows = match (hi, rev) {
            (Some(hi), false) => self.query(&self.st.range, &[&t, &lo, &hi, &limit]),
            (None, false) => self.query(&self.st.from, &[&t, &lo, &limit]),
            (Some(hi), true) => self.query(&self.st.range_rev, &[&t, &lo, &hi, &limit]),
            (None, true) => self.query(&self.st.from_rev, &[&t, &lo, &limit]),
        }?;
        let rows: Vec<(Vec<u8>, Vec<u8>)> =
            rows.into_iter().map(|r| (r.get(0), r.get(1))).collect();
        if let Some(m) = memo {
            self.pages.borrow_mut().insert(m, rows.clone());
        }
        Ok(rows)
    }
}

impl Drop for View<'_, '_> {
    /// A view that was not committed ends its transaction (a read's snapshot, or a write
    /// that failed) with the connection's next statement.
    fn drop(&mut self) {
        if self.open.get() {
            send_only(self.client, "ROLLBACK");
        }
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
        let memo = self.place.memo.filter(|_| t == Table::Objects);
        if let Some(spec) = &self.spec {
            return spec.row(t, key);
        }
        if t != Table::Objects
            && let Some(v) = self.memo.borrow().get(&(t, key.to_vec()))
        {
            return Ok(v.clone());
        }
        if t != Table::Objects
            && let Some(v) = self.in_whole_page(t, key)
        {
            return Ok(v);
        }
        let v = self
            .query(&self.st.get, &[&(t as i16), &key])?
            .into_iter()
            .next()
            .map(|r| r.get::<_, Vec<u8>>(0));
        match (&v, memo) {
            (Some(row), Some(vault)) => super::memo::put(vault, key, row),
            _ if t != Table::Objects => {
                self.memo.borrow_mut().insert((t, key.to_vec()), v.clone());
            }
            _ => {}
        }
        Ok(v)
    }
}

impl View<'_, '_> {
    /// Row `key` of `t`, when a first page already read covers it and was the whole of its
    /// range (shorter than a page): then the page says whether the row exists.
    fn in_whole_page(&self, t: Table, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let pages = self.pages.borrow();
        pages.iter().find_map(|((pt, lo, hi, _), rows)| {
            let covers = *pt == t
                && (rows.len() as i64) < FIRST_PAGE
                && key >= lo.as_slice()
                && hi.as_deref().is_none_or(|hi| key < hi);
            covers.then(|| rows.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
        })
    }
}

impl KvRead for View<'_, '_> {
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>> {
        if let Some(v) = self.buf[t as usize].get(key) {
            return Ok(v.as_deref().map(Val::Ref));
        }
        // An object's content never changes, so a row this process saw needs neither a
        // round trip nor a guard (a speculative write may read it too). Whether the server
        // still holds it (`object_head_at`: `has_object`, a deletion) is asked of the server.
        let memo = self.place.memo.filter(|_| t == Table::Objects);
        let v = match memo.and_then(|vault| super::memo::get(vault, key)) {
            Some(v) => Some(v),
            None => self.row(t, key)?,
        };
        let Some(v) = v else {
            return Ok(None);
        };
        let v = match (t, reference(&v), self.place.store) {
            // A read that verifies the vault (no memory of rows) reads the store itself.
            (Table::Objects, Some((_, _, hash)), Some(store)) => {
                store.get(key, &hash, self.place.memo.is_some())?
            }
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
        let hi = upper_bound(prefix);
        let end = hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let bounds = (Bound::Included(prefix), end);
        let layered = self.buf[t as usize].range::<[u8], _>(bounds);
        let stored = Pages {
            view: self,
            t,
            lo: prefix.to_vec(),
            hi,
            rev,
            rows: VecDeque::new(),
            limit: FIRST_PAGE,
            done: false,
        };
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

    /// A look is a round trip here: new objects are looked for all at once, before commit.
    fn defers_object_checks(&self) -> bool {
        true
    }

    fn is_buffered(&self, t: Table, key: &[u8]) -> bool {
        self.buf[t as usize].contains_key(key)
    }

    fn forget(&mut self, t: Table, key: &[u8]) {
        self.buf[t as usize].remove(key);
    }

    fn stored_keys(&self, t: Table, keys: &[&[u8]]) -> Result<HashSet<Vec<u8>>> {
        let rows = self.query(&self.st.keys, &[&(t as i16), &keys])?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
