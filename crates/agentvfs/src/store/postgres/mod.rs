//! The PostgreSQL engine (cargo feature `postgres`): a vault whose records live in a database
//! server, so every host that reaches the server shares it. The tables and their encodings
//! are the key-value layout in `store::kv`, kept in one table `kv (t, k, v)` of a schema of
//! the vault's own; `avfs_vaults` in the database's default schema maps vault names to their
//! schemas, so another host can attach a vault by name.
//!
//! On this host the vault is a small file (the registry's vault path) that says where the
//! records are: the vault's name and schema, and the server's URL or the environment
//! variable that holds it. Writers of every host take turns on one advisory lock per vault,
//! taken as the first statement of each write transaction, so a write's reads and its commit
//! see every write before it and no acknowledged write is lost; reads run in `REPEATABLE
//! READ` snapshots and never wait for writers. The schema is versioned (`migrations`) and
//! checked at every open.
//!
//! Round trips are the cost on a network: the vault's connections are `tokio-postgres`
//! clients, whose requests are pipelined. A write's `BEGIN`, lock and retired check go out
//! together with the rows its caller named ahead (`Store::write_ahead`); new objects are
//! looked for all at once before the commit (`KvWrite::defers_object_checks`); its changes
//! and its `COMMIT` go out together. A read's `BEGIN` goes with its first query and its end
//! with the connection's next statement.

mod admin;
mod conn;
mod known;
mod locator;
mod memo;
mod objects;
mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use self::conn::{Conn, block, connect, connect_async, put_idle, quoted, take_idle, within};
use self::known::Known;
use self::locator::Locator;
use self::objects::Objects;
use self::view::{Placement, View};
use super::kv::KV_FORMAT_VERSION as FORMAT_VERSION;
use super::kv::{
    ENGINE_KEY, FORMAT_KEY, Reader, Table, WRITE_COUNTERS, Writer, check_format, read_ahead_keys,
};
use super::{Engine, FileIdentity, ReadAhead, Store, StoreRead, StoreWrite, is_migrating_copy};
use crate::error::{Error, Result};

use super::{POSTGRES_MARK as MARK, SERVER_URL_ENV as URL_ENV};

/// `meta` keys: where large objects go (none: their rows), and from what size.
const OBJECTS_KEY: &[u8] = b"objects.url";
const INLINE_KEY: &[u8] = b"objects.inline_max";
/// Set while `vault migrate` is still moving the vault onto the server: no other host may
/// attach it yet (a write there would be lost were the move to fail).
const PENDING_KEY: &[u8] = b"pending";
/// Objects up to this size stay in their rows in the object-store setup: trees and
/// attributes are read with the row, and only file content makes a trip to the store.
const INLINE_MAX: usize = 4096;

/// The schema changes, in order; `migrations` records how many a vault has had. An open
/// applies the missing ones and refuses a vault with more than this build knows.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE {s}.kv (t smallint NOT NULL, k bytea NOT NULL, v bytea NOT NULL, \
     PRIMARY KEY (t, k))",
];

/// Object reads of this process so far: (served by the host cache, fetched from the
/// object store). Objects kept in their rows are neither.
pub fn object_cache_counts() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (
        objects::SERVED.load(Relaxed),
        objects::FETCHED.load(Relaxed),
    )
}

/// Writes this process tried in one exchange on what its vault handle knew (see `known`).
/// All but `applied` then ran the usual way, which has the last word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Speculation {
    /// Applied as tried.
    pub applied: u64,
    /// Refused by the guard: the vault had changed since the handle's last write.
    pub refused: u64,
    /// Needed to read more than the handle knew.
    pub missed: u64,
    /// Failed on what the handle knew (an error such as `already_exists`), which may be
    /// out of date.
    pub failed: u64,
}

static SPECULATION: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// This process's `Speculation` so far.
pub fn speculation_counts() -> Speculation {
    let [a, r, m, f] = &SPECULATION;
    Speculation {
        applied: a.load(Ordering::Relaxed),
        refused: r.load(Ordering::Relaxed),
        missed: m.load(Ordering::Relaxed),
        failed: f.load(Ordering::Relaxed),
    }
}

/// `invalid_argument` unless `url` is an object store URL (`s3://bucket[/prefix]`).
pub(crate) fn check_objects_url(url: &str) -> Result<()> {
    objects::parse_url(url).map(|_| ())
}

/// A server error as a typed error: lost or refused connections are `store_unavailable`.
pub(super) fn pg_error(e: postgres::Error) -> Error {
    use postgres::error::SqlState;
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY {
            return Error::DiskFull {
                path: None,
                reason: format!("the PostgreSQL server: {}", db.message()),
                maybe_applied: false,
            };
        }
        if code.code().starts_with("57") || code.code().starts_with("08") {
            return Error::StoreUnavailable {
                reason: format!("PostgreSQL: {}", db.message()),
                maybe_applied: false,
                writes_kept: 0,
            };
        }
        if *code == SqlState::LOCK_NOT_AVAILABLE {
            return Error::StoreUnavailable {
                reason: format!(
                    "{LOCK_WAIT_OVER} ({} s; two thirds of AVFS_SERVER_TIMEOUT_SECS)",
                    conn::lock_wait().as_secs_f64()
                ),
                maybe_applied: false,
                writes_kept: 0,
            };
        }
        if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::INVALID_SCHEMA_NAME {
            return Error::VaultNotFound {
                name: "(its schema is gone from the PostgreSQL server: deleted, or moved off it by `vault migrate`)".into(),
                suggestions: Vec::new(),
            };
        }
        // Who may log in to what: a fix to the URL or the server, not a retry.
        if code.code().starts_with("28") || *code == SqlState::INVALID_CATALOG_NAME {
            return Error::invalid(format!("the PostgreSQL server refused: {}", db.message()));
        }
        return Error::Storage(format!("PostgreSQL: {} ({})", db.message(), code.code()));
    }
    if connection_lost(&e) {
        return Error::StoreUnavailable {
            reason: format!("PostgreSQL: {e}"),
            maybe_applied: false,
            writes_kept: 0,
        };
    }
    Error::Storage(format!("PostgreSQL: {e}"))
}

/// How `pg_error` begins a wait for the vault's lock that ran out.
const LOCK_WAIT_OVER: &str = "another writer has held the vault for longer than the lock wait";

/// Whether `e` is a wait for the vault's lock that ran out (nothing was applied).
fn lock_wait_over(e: &Error) -> bool {
    matches!(e, Error::StoreUnavailable { reason, .. } if reason.starts_with(LOCK_WAIT_OVER))
}

/// Whether `e` says the connection itself is gone (closed, or its socket failed), as
/// opposed to an answer from the server.
fn connection_lost(e: &postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// The advisory lock every writer of a vault takes: derived from its schema.
fn lock_key(schema: &str) -> i64 {
    let h = blake3::hash(schema.as_bytes());
    i64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Check that vault `name` on the server is `schema`, and bring the schema up to this
/// build's migrations; refuse one from a newer build. Takes the vault's lock only when a
/// migration is due, so opening a vault never waits for its writers. The check goes out
/// with the statements `prepare` makes, whose answer is used when the check passes.
fn check_schema<T>(
    client: &tokio_postgres::Client,
    url: &str,
    (name, schema, path): (&str, &str, &Path),
    prepare: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let s = quoted(schema);
    let gone = || Error::VaultNotFound {
        name: format!(
            "{} (vault `{name}` is not on the PostgreSQL server as {schema}: deleted, or moved off it by `vault migrate`)",
            path.display()
        ),
        suggestions: Vec::new(),
    };
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM avfs_vaults WHERE name = $1 AND schema = $2), \
         (SELECT count(*) FROM {s}.migrations)"
    );
    let (row, prepared) = within(futures::future::join(
        client.query_one(&sql, &[&name, &schema]),
        prepare,
    ))?;
    let row = row.map_err(|e| match pg_error(e) {
        Error::VaultNotFound { .. } => gone(),
        other => other,
    })?;
    let (listed, done): (bool, i64) = (row.get(0), row.get(1));
    if !listed {
        return Err(gone());
    }
    if done as usize > MIGRATIONS.len() {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: done as u32,
            supported: MIGRATIONS.len() as u32,
        });
    }
    if done as usize == MIGRATIONS.len() {
        return prepared;
    }
    let count = format!("SELECT count(*) FROM {s}.migrations");
    let mut client = connect(url)?;
    let mut txn = client.transaction().map_err(pg_error)?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&lock_key(schema)])
        .map_err(pg_error)?;
    let done: i64 = txn.query_one(&count, &[]).map_err(pg_error)?.get(0);
    apply_migrations(&mut txn, &s, done as usize)?;
    txn.commit().map_err(pg_error)?;
    // Statements prepared before the migration may name what it changed.
    Err(Error::Storage(MIGRATED.into()))
}

/// What `check_schema` answers when it migrated the vault: prepare again.
const MIGRATED: &str = "the vault's schema was migrated; prepare again";

/// Apply the migrations after the first `done` to the schema `s` (quoted).
fn apply_migrations(txn: &mut postgres::Transaction<'_>, s: &str, done: usize) -> Result<()> {
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(done) {
        txn.batch_execute(&sql.replace("{s}", s))
            .map_err(pg_error)?;
        txn.execute(
            &format!("INSERT INTO {s}.migrations (version) VALUES ($1)"),
            &[&(i as i32 + 1)],
        )
        .map_err(pg_error)?;
    }
    Ok(())
}

pub struct PgStore {
    /// The vault file on this host (canonical).
    path: PathBuf,
    file: FileIdentity,
    url: String,
    schema: String,
    /// The connections writes go through (`WRITERS`, each made when first needed), each
    /// with what its last write knew of the vault. A write takes a free one; when all are
    /// busy it waits for one in turn (threads queue on each in the order they came), so
    /// the threads of one process, agents each in a fork, overlap their round trips and
    /// none of them starves. The vault's lock still orders their commits.
    writers: [parking_lot::FairMutex<WriteSlot>; WRITERS],
    /// Turns handed out when every writer was busy: which one to wait for.
    turns: AtomicU64,
    /// Writes of this handle holding the vault's lock now, and those that held it and
    /// ended: a write whose wait for the lock ran out while one of its own handle held it
    /// waits again, as it would have for one connection (see `write_locked`).
    holding: AtomicU64,
    ended: AtomicU64,
    /// Where its idle connections wait in `IDLE`: the server URL and the schema.
    pool: (String, String),
    /// The object store large objects go to, if the vault has one.
    objects: Option<Objects>,
    inline_max: usize,
    /// Writes committed through this handle: a command that fails after some says so.
    commits: AtomicU64,
}

/// Connections one vault handle writes through at most: writes of different threads go out
/// side by side, so a write's round trips do not wait for another's (only its time under
/// the vault's lock does).
const WRITERS: usize = 8;

/// A connection a vault handle writes through, and what its last write knew.
#[derive(Default)]
struct WriteSlot {
    conn: Option<Conn>,
    known: Known,
}

/// The host's cache of a vault's objects: beside its vault file. None for the copy `vault
/// migrate` makes (`*.migrating`): its objects are read back from the store to verify it.
fn cache_dir(path: &Path) -> Option<PathBuf> {
    if is_migrating_copy(path) {
        return None;
    }
    let mut p = path.as_os_str().to_owned();
    p.push(".objects");
    Some(PathBuf::from(p))
}

impl PgStore {
    pub fn open(path: &Path) -> Result<Arc<PgStore>> {
        let mut store = Self::open_inner(path)?;
        let keys = [FORMAT_KEY, OBJECTS_KEY, INLINE_KEY, PENDING_KEY];
        let (found, objects, inline, pending) = store.kv_read_keys(&keys, |r| {
            Ok((
                r.meta_get(FORMAT_KEY)?,
                r.meta_get(OBJECTS_KEY)?,
                r.meta_get(INLINE_KEY)?,
                r.meta_get(PENDING_KEY)?,
            ))
        })?;
        check_format("PostgreSQL", &store.path, found)?;
        // A vault `vault migrate` moved here, opened through the vault file in the vault's
        // place (not the copy's, `*.migrating`): the move is done (or was cut short after
        // the exchange), so other hosts may attach it now.
        let in_place = !is_migrating_copy(&store.path);
        if pending.is_some() && in_place {
            store.kv_write(&ReadAhead::default(), |w| w.meta_delete(PENDING_KEY))?;
        }
        if let Some(url) = objects {
            let url = String::from_utf8(url).map_err(|_| Error::CorruptVault {
                reason: "the vault's object store URL is not text".into(),
            })?;
            let s = Arc::get_mut(&mut store).expect("not shared yet");
            s.objects = Some(Objects::open(&url, &s.schema, cache_dir(&s.path))?);
            s.inline_max = inline
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map_or(INLINE_MAX, |b| u64::from_le_bytes(b) as usize);
        }
        Ok(store)
    }

    /// Open without looking at the vault format (`create` writes it next).
    fn open_inner(path: &Path) -> Result<Arc<PgStore>> {
        let canonical = super::kv::canonical(path)?;
        let locator = Locator::read(&canonical)?;
        if locator.engine != "postgres" {
            return Err(Error::NotAVault {
                path: canonical,
                reason: format!("its vault file names engine `{}`", locator.engine),
            });
        }
        let url = locator.url()?;
        let pool = (url.clone(), locator.schema.clone());
        // A connection this process already checked the vault on (it was opened before,
        // and closed) needs no second check: a vault deleted or moved since shows at its
        // next statement.
        if let Some(conn) = take_idle(&pool) {
            put_idle(&pool, conn);
        } else {
            let client = connect_async(&url)?;
            let names = (
                locator.name.as_str(),
                locator.schema.as_str(),
                canonical.as_path(),
            );
            let statements = async { Conn::statements(&client, &locator.schema).await };
            let first = match check_schema(&client, &url, names, statements) {
                Err(Error::Storage(m)) if m == MIGRATED => Conn::prepared(client, &locator.schema)?,
                st => Conn::new(client, st?),
            };
            put_idle(&pool, first);
        }
        Ok(Arc::new(PgStore {
            file: FileIdentity::of(&canonical)?,
            path: canonical,
            url,
            schema: locator.schema,
            writers: Default::default(),
            turns: AtomicU64::new(0),
            holding: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            pool,
            objects: None,
            inline_max: INLINE_MAX,
            commits: AtomicU64::new(0),
        }))
    }

    /// `e`, saying how many writes this handle had committed when the server failed.
    fn with_kept(&self, mut e: Error) -> Error {
        if let Error::StoreUnavailable { writes_kept, .. } = &mut e {
            *writes_kept = self.commits.load(Ordering::Relaxed);
        }
        e
    }

    fn placement(&self) -> Placement<'_> {
        Placement {
            store: self.objects.as_ref(),
            inline_max: self.inline_max,
            // The copy `vault migrate` makes reads its objects back from the server to
            // verify them.
            memo: (!is_migrating_copy(&self.path)).then(|| lock_key(&self.schema)),
        }
    }

    /// `placement`, with every object read from the server.
    fn verified(&self) -> Placement<'_> {
        Placement {
            memo: None,
            ..self.placement()
        }
    }

    fn conn(&self) -> Result<Conn> {
        Conn::open(&self.url, &self.schema)
    }

    /// Run `f` on an idle connection (a new one if none is idle), and keep it for the
    /// next read unless it was lost.
    fn with_reader<R>(&self, f: impl FnOnce(&Conn) -> Result<R>) -> Result<R> {
        let conn = match take_idle(&self.pool) {
            Some(c) => c,
            None => self.conn()?,
        };
        let out = f(&conn);
        put_idle(&self.pool, conn);
        out
    }

    /// Run `f` on one snapshot, on an idle connection (a new one if none is). A pooled
    /// connection the server dropped (it restarted) is seen closed by the runtime, which
    /// reads every connection's answers as they come, and is not used again.
    fn kv_read<R>(&self, f: impl FnOnce(&Reader<'_, View<'_, '_>>) -> Result<R>) -> Result<R> {
        self.kv_read_keys(&[], f)
    }

    /// `kv_read`, with the `meta` rows `keys` read first in one query.
    fn kv_read_keys<R>(
        &self,
        keys: &[&[u8]],
        f: impl FnOnce(&Reader<'_, View<'_, '_>>) -> Result<R>,
    ) -> Result<R> {
        self.kv_read_in(self.placement(), keys, f)
    }

    /// `kv_read_keys`, with objects placed as `place` says.
    fn kv_read_in<R>(
        &self,
        place: Placement<'_>,
        keys: &[&[u8]],
        f: impl FnOnce(&Reader<'_, View<'_, '_>>) -> Result<R>,
    ) -> Result<R> {
        let conn = match take_idle(&self.pool) {
            Some(c) => c,
            None => self.conn()?,
        };
        let out = {
            let view = View::read(&conn.client, &conn.st, place);
            if keys.is_empty() {
                f(&Reader::new(&view))
            } else {
                view.prefetch(Table::Meta, keys)
                    .and_then(|_| f(&Reader::new(&view)))
            }
        };
        put_idle(&self.pool, conn);
        out
    }

    /// One write transaction, with the records `ahead` names (and the counters most
    /// writes use) read in its first exchange. A write that may run twice
    /// (`ReadAhead::repeatable`) is first tried in one exchange on what the handle knows
    /// (see `known`).
    fn kv_write<R>(
        &self,
        ahead: &ReadAhead,
        mut f: impl FnMut(&mut Writer<'_, View<'_, '_>>) -> Result<R>,
    ) -> Result<R> {
        let mut slot = self.writer();
        let key = lock_key(&self.schema);
        let speculate = ahead.repeatable
            && slot.known.warm(&WRITE_COUNTERS)
            && slot.conn.as_ref().is_some_and(Conn::usable);
        if speculate {
            match self.speculate(&mut slot, key, &mut f) {
                Ok(Some(out)) => return Ok(out),
                Ok(None) => {}
                Err(e) => {
                    slot.known.clear();
                    return Err(e);
                }
            }
        }
        let out = self.write_locked(&mut slot, ahead, key, f);
        if out.is_err() {
            slot.known.clear();
        }
        out
    }

    /// A writer connection's slot: the first free one (the lowest, so a handle used by one
    /// thread at a time keeps one connection and what it knows), else the next in turn.
    fn writer(&self) -> parking_lot::FairMutexGuard<'_, WriteSlot> {
        if let Some(free) = self.writers.iter().find_map(|w| w.try_lock()) {
            return free;
        }
        let turn = self.turns.fetch_add(1, Ordering::Relaxed) as usize;
        self.writers[turn % WRITERS].lock()
    }

    /// Run `f` on what the handle knows and commit it in one exchange, guarded: `None` when
    /// it needed more than that, failed, or the guard found the vault changed. Nothing was
    /// applied then, and `f` is to run again the usual way.
    fn speculate<R>(
        &self,
        slot: &mut WriteSlot,
        key: i64,
        f: &mut impl FnMut(&mut Writer<'_, View<'_, '_>>) -> Result<R>,
    ) -> Result<Option<R>> {
        self.file.still(&self.path)?;
        let WriteSlot { conn, known } = slot;
        let Conn { client, st, .. } = conn.as_ref().expect("a usable connection");
        let mut view = View::speculate(client, st, self.placement(), known);
        let out = {
            let mut w = Writer::new(&mut view);
            f(&mut w).and_then(|out| w.settle().map(|_| out))
        };
        // A run that failed may have failed on what the handle knew, which may be out of
        // date: the usual way says.
        let out = match out {
            Ok(out) if !view.missed() => out,
            Err(_) if !view.missed() => {
                SPECULATION[3].fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            _ => {
                SPECULATION[2].fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        };
        let changes = view.changes();
        // A wait for the lock that ran out applied nothing: the usual way waits again when
        // that is due (`write_locked`).
        let applied = match view.commit_speculated(key) {
            Err(e) if lock_wait_over(&e) => false,
            other => other?,
        };
        if !applied {
            SPECULATION[1].fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        SPECULATION[0].fetch_add(1, Ordering::Relaxed);
        known.absorb(Default::default(), Default::default(), &changes);
        self.commits.fetch_add(1, Ordering::Relaxed);
        Ok(Some(out))
    }

    /// A write the usual way: its first exchange begins it, takes the lock and reads what
    /// `ahead` names; its changes and `COMMIT` are the second.
    fn write_locked<R>(
        &self,
        slot: &mut WriteSlot,
        ahead: &ReadAhead,
        key: i64,
        mut f: impl FnMut(&mut Writer<'_, View<'_, '_>>) -> Result<R>,
    ) -> Result<R> {
        let (mut rows, scans) = read_ahead_keys(ahead);
        rows.extend(WRITE_COUNTERS.map(|k| (Table::Meta, k.to_vec())));
        let mut ended = self.ended.load(Ordering::SeqCst);
        for attempt in 0.. {
            // The connection this process last used (its reads' idle ones included): a new
            // one costs a connect and a prepare.
            let mut fresh = false;
            if !slot.conn.as_ref().is_some_and(Conn::usable) {
                slot.known.clear();
                slot.conn = match take_idle(&self.pool) {
                    Some(c) => Some(c),
                    None => {
                        fresh = true;
                        Some(self.conn()?)
                    }
                };
            }
            let WriteSlot { conn, known } = &mut *slot;
            let Conn { client, st, .. } = conn.as_ref().expect("a connection");
            let view = View::write(client, st, self.placement());
            let begun = view.begin_write(key, &rows, &scans);
            // A pooled connection the server dropped (it restarted) is replaced once,
            // before anything was done on it. A lock wait that timed out is an answer, not
            // a lost connection.
            if begun.is_err() && client.is_closed() && !fresh && attempt == 0 {
                drop(view);
                slot.conn = None;
                continue;
            }
            // The lock wait ran out while a write of this handle held the lock (a long
            // import on another thread): with one connection this write would have waited
            // in the process for as long, so it waits again. One held by another host, the
            // whole wait through, is the error.
            if let Err(e) = &begun
                && lock_wait_over(e)
            {
                let now = self.ended.load(Ordering::SeqCst);
                if self.holding.load(Ordering::SeqCst) > 0 || now != ended {
                    ended = now;
                    continue;
                }
            }
            // `vault migrate` replaces the vault file while it holds the lock, and marks a
            // shared vault it moved away.
            if begun? {
                return Err(Error::VaultReplaced {
                    path: self.path.clone(),
                });
            }
            let _holding = Holding::new(self);
            self.file.still(&self.path)?;
            let mut view = view;
            let out = {
                let mut w = Writer::new(&mut view);
                let out = f(&mut w)?;
                w.settle()?;
                out
            };
            let changes = view.changes();
            let (read, pages) = view.learned();
            view.commit()?;
            known.absorb(read, pages, &changes);
            self.commits.fetch_add(1, Ordering::Relaxed);
            return Ok(out);
        }
        unreachable!("the loop returns")
    }
}

/// A write of the handle that holds the vault's lock, counted while it does.
struct Holding<'a>(&'a PgStore);

impl<'a> Holding<'a> {
    fn new(store: &'a PgStore) -> Self {
        store.holding.fetch_add(1, Ordering::SeqCst);
        Holding(store)
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
        self.0.holding.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for PgStore {
    /// Its write connection joins the idle ones, for the next open of the vault.
    fn drop(&mut self) {
        for writer in &self.writers {
            if let Some(conn) = writer.lock().conn.take() {
                put_idle(&self.pool, conn);
            }
        }
    }
}

impl Store for PgStore {
    fn path(&self) -> &Path {
        &self.path
    }

    fn engine(&self) -> Engine {
        Engine::Postgres
    }

    fn read_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        self.kv_read(|r| f(r)).map_err(|e| self.with_kept(e))
    }

    /// Objects from the server, not from this process's memory of object rows.
    fn read_verified_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        self.kv_read_in(self.verified(), &[], |r| f(r))
            .map_err(|e| self.with_kept(e))
    }

    fn write_with(&self, f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>) -> Result<()> {
        self.write_ahead(&ReadAhead::default(), f)
    }

    fn write_ahead(
        &self,
        ahead: &ReadAhead,
        f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>,
    ) -> Result<()> {
        self.kv_write(ahead, |w| f(w))
            .map_err(|e| self.with_kept(e))
    }

    fn set_batching(&self, _on: bool) -> Result<()> {
        Ok(())
    }

    fn flush_batch(&self) -> Result<()> {
        Ok(())
    }

    fn compact(&self) -> Result<()> {
        let vacuum = format!("VACUUM {}.kv", quoted(&self.schema));
        self.with_reader(|c| block(c.client.batch_execute(&vacuum)))?;
        // Objects in the store that no row refers to (a write that crashed between its
        // upload and its commit, or objects gc removed), past the grace period.
        if let Some(objects) = &self.objects {
            objects.sweep(&mut |ids| {
                self.with_reader(|c| {
                    let t = Table::Objects as i16;
                    let rows = block(c.client.query(&c.st.keys, &[&t, &ids]))?;
                    let found: std::collections::HashSet<Vec<u8>> =
                        rows.iter().map(|r| r.get(0)).collect();
                    Ok(ids.iter().map(|id| found.contains(id)).collect())
                })
            })?;
        }
        Ok(())
    }

    /// Every commit is durable once the server acknowledged it.
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// Every object is read from the server here, not from this process's memory of rows.
    fn integrity_problems(&self) -> Result<Vec<String>> {
        self.kv_read_in(self.verified(), &[], |r| r.integrity_problems())
    }

    fn disk_size(&self) -> u64 {
        let table = format!("{}.kv", quoted(&self.schema));
        let size = self.with_reader(|c| {
            block(c.client.query_one(
                "SELECT coalesce(pg_total_relation_size(to_regclass($1::text)), 0)",
                &[&table],
            ))
        });
        size.map(|r| r.get::<_, i64>(0).max(0) as u64).unwrap_or(0)
    }
}
