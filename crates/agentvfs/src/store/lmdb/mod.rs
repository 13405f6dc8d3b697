//! The LMDB engine (cargo feature `lmdb`, through the `heed` crate): one data file per vault
//! (`NO_SUB_DIR`) plus LMDB's `-lock` file beside it. Readers see a snapshot and never block
//! the writer; one writer at a time across processes (LMDB's robust lock, so a writer killed
//! with -9 leaves nothing held); a commit is atomic and crash-safe, flushed once per commit
//! (`NO_META_SYNC`: after a power loss the last commit may be undone, never half-applied),
//! and `sync` flushes everything.
//!
//! The tables and their encodings are the key-value layout in `store::kv`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn, WithoutTls};

use super::kv::KV_FORMAT_VERSION as FORMAT_VERSION;
use super::kv::{
    ENGINE_KEY, FORMAT_KEY, KvRead, KvWrite, Reader, Table, Val, Visit, Writer, canonical,
    check_format,
};
use super::{Engine, Store, StoreRead, StoreWrite};
use crate::error::{Error, Result};

/// The address space one environment maps: data may grow to this size. Only address space
/// is reserved; the file grows as data is written.
const MAP_SIZE: usize = 1 << 40;
type Db = Database<'static, Bytes, Bytes>;

/// The named databases of one environment, one per `Table`.
type Dbs = [Db; Table::COUNT];

/// A vault file in the LMDB format. One handle per file per process (heed refuses to open
/// an environment twice), shared through `handles`.
pub struct LmdbStore {
    path: PathBuf,
    /// The file opened, checked after each write lock is taken (see `FileIdentity`).
    file: super::FileIdentity,
    env: Env<WithoutTls>,
    dbs: Dbs,
}

pub(super) fn heed_error(e: heed::Error) -> Error {
    use heed::MdbError;
    match e {
        heed::Error::Mdb(MdbError::MapFull) => Error::DiskFull {
            path: None,
            reason: "the vault reached LMDB's map size (1 TiB)".into(),
            maybe_applied: false,
        },
        heed::Error::Mdb(
            MdbError::Corrupted | MdbError::PageNotFound | MdbError::Invalid | MdbError::Panic,
        ) => Error::CorruptVault {
            reason: e.to_string(),
        },
        heed::Error::Io(io) if io.raw_os_error() == Some(libc::ENOSPC) => Error::DiskFull {
            path: None,
            reason: io.to_string(),
            maybe_applied: false,
        },
        other => Error::Storage(other.to_string()),
    }
}

fn handles() -> &'static Mutex<HashMap<PathBuf, Weak<LmdbStore>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<LmdbStore>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Refuse a file shorter than its newest meta page says it is: LMDB maps the file, and a
/// page past its end would be a SIGBUS, not an error. (The meta pages: page 0 and page 1,
/// each a 16-byte page header then the meta: the page size in the first database record at
/// +40, the last page number at +136 and the transaction id at +144, little-endian.)
fn check_length(path: &Path) -> Result<()> {
    use std::io::Read;
    let damaged = |reason: &str| Error::CorruptVault {
        reason: reason.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::io("opening", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("reading", path, e))?
        .len();
    if len == 0 {
        // A vault being created: LMDB writes its meta pages now.
        return Ok(());
    }
    let mut head = vec![0u8; 152];
    file.read_exact(&mut head)
        .map_err(|_| damaged("the LMDB vault file is cut short (no meta page)"))?;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let page = u64::from(u32_at(&head, 40));
    if !(512..=65536).contains(&page) || !page.is_power_of_two() {
        return Err(damaged("the LMDB vault file's meta page is damaged"));
    }
    let mut second = vec![0u8; 152];
    let metas = [
        Some(head),
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(page))
            .ok()
            .and_then(|_| file.read_exact(&mut second).ok())
            .map(|_| second),
    ];
    let newest = metas
        .iter()
        .flatten()
        .filter(|m| u32_at(m, 16) == 0xBEEF_C0DE)
        .max_by_key(|m| u64_at(m, 144))
        .ok_or_else(|| damaged("the LMDB vault file has no valid meta page"))?;
    let needed = u64_at(newest, 136).saturating_add(1).saturating_mul(page);
    // The length after the metas: a writer in another process extends the file before it
    // writes the meta naming the new pages, so a length taken first could be too short.
    let len = file
        .metadata()
        .map_err(|e| Error::io("reading", path, e))?
        .len()
        .max(len);
    if len < needed {
        return Err(damaged(&format!(
            "the LMDB vault file is cut short: {len} bytes, its pages need {needed}"
        )));
    }
    Ok(())
}

fn open_env(path: &Path) -> Result<(Env<WithoutTls>, Dbs)> {
    check_length(path)?;
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(MAP_SIZE).max_dbs(Table::COUNT as u32 + 2);
    // SAFETY: NO_SUB_DIR makes `path` the data file; NO_META_SYNC keeps every commit
    // atomic and consistent (one flush per commit, the meta page unflushed); NO_READ_AHEAD
    // suits random reads of a large file. The file is only ever changed through LMDB.
    unsafe {
        options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_META_SYNC | EnvFlags::NO_READ_AHEAD);
    }
    // A handle of this file that is being dropped on another thread may not have closed
    // its environment yet: wait for it briefly.
    let mut tries = 0;
    let env = loop {
        // SAFETY: as above; the file is only ever changed through LMDB.
        match unsafe { options.open(path) } {
            Err(heed::Error::EnvAlreadyOpened) if tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => break other,
        }
    }
    .map_err(|e| match e {
        heed::Error::Mdb(heed::MdbError::Invalid) => Error::CorruptVault {
            reason: "file is not an LMDB vault".into(),
        },
        other => heed_error(other),
    })?;
    // Reader slots of processes that died (kill -9) are freed before anyone waits on them.
    let _ = env.clear_stale_readers();
    let wtxn = env.write_txn().map_err(heed_error)?;
    let created = env
        .create_databases_and_commit(wtxn, |opener, w| {
            let mut dbs = Vec::with_capacity(Table::COUNT);
            for name in Table::NAMES {
                dbs.push(opener.create_database::<Bytes, Bytes>(w, Some(name))?);
            }
            let dbs: [_; Table::COUNT] = dbs.try_into().unwrap_or_else(|_| unreachable!());
            Ok::<_, heed::Error>(heed::CommitOrAbort::<_, ()>::Commit(dbs))
        })
        .map_err(heed_error)?
        .unwrap_commit();
    let dbs: Dbs = created.map(|db| db);
    Ok((env, dbs))
}

impl LmdbStore {
    /// Create a new, empty vault file (mode 0600). Fails if the file exists.
    pub fn create(path: &Path) -> Result<Arc<LmdbStore>> {
        if path.exists() {
            return Err(Error::AlreadyExists {
                name: path.display().to_string(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        super::sqlite::create_private_file(path)?;
        let store = Self::open_inner(path)?;
        store.env_write(|w| {
            w.meta_put(FORMAT_KEY, &FORMAT_VERSION.to_le_bytes())?;
            w.meta_put(ENGINE_KEY, b"lmdb")
        })?;
        store.sync()?;
        Ok(store)
    }

    /// Open an existing vault file.
    pub fn open(path: &Path) -> Result<Arc<LmdbStore>> {
        let store = Self::open_inner(path)?;
        let found = store.env_read(|r| r.meta_get(FORMAT_KEY))?;
        check_format("LMDB", &store.path, found)?;
        Ok(store)
    }

    fn open_inner(path: &Path) -> Result<Arc<LmdbStore>> {
        let canonical = canonical(path)?;
        let mut open = super::lock::lock(handles());
        if let Some(store) = open.get(&canonical).and_then(Weak::upgrade) {
            return Ok(store);
        }
        let (env, dbs) = open_env(&canonical)?;
        // The file LMDB has open, from its own descriptor: a rename over the path after the
        // open must not pass for this file.
        let file = env
            .try_clone_inner_file()
            .map_err(heed_error)?
            .metadata()
            .map(|m| super::FileIdentity::of_metadata(&m))
            .map_err(|e| Error::io("reading", &canonical, e))?;
        let store = Arc::new(LmdbStore {
            file,
            path: canonical.clone(),
            env,
            dbs,
        });
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(canonical, Arc::downgrade(&store));
        Ok(store)
    }

    fn env_read<R>(&self, f: impl FnOnce(&Reader<'_, View<'_>>) -> Result<R>) -> Result<R> {
        let txn = self.env.read_txn().map_err(heed_error)?;
        let view = View {
            txn: &txn,
            dbs: &self.dbs,
        };
        f(&Reader::new(&view))
    }

    fn env_write<R>(
        &self,
        f: impl FnOnce(&mut Writer<'_, Write<'_, '_>>) -> Result<R>,
    ) -> Result<R> {
        let mut txn = self.env.write_txn().map_err(heed_error)?;
        self.file.still(&self.path)?;
        let mut write = Write {
            txn: &mut txn,
            dbs: &self.dbs,
        };
        let out = f(&mut Writer::new(&mut write))?;
        txn.commit().map_err(|e| self.commit_error(e))?;
        Ok(out)
    }

    /// LMDB reports a short write of its pages as EIO, which is how a full disk shows (a
    /// write that fit only in part): EIO with little space left is `disk_full`.
    fn commit_error(&self, e: heed::Error) -> Error {
        const LOW: u64 = 16 << 20;
        match e {
            heed::Error::Io(ref io) if io.raw_os_error() == Some(libc::EIO) => {
                match rustix::fs::statvfs(&self.path) {
                    Ok(st) if st.f_bavail.saturating_mul(st.f_frsize) < LOW => Error::DiskFull {
                        path: None,
                        reason: format!(
                            "no space left for the commit ({io}; {} bytes free)",
                            st.f_bavail.saturating_mul(st.f_frsize)
                        ),
                        maybe_applied: false,
                    },
                    _ => heed_error(e),
                }
            }
            other => heed_error(other),
        }
    }
}

impl Store for LmdbStore {
    fn path(&self) -> &Path {
        &self.path
    }

    fn engine(&self) -> Engine {
        Engine::Lmdb
    }

    fn read_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        self.env_read(|r| f(r))
    }

    fn write_with(&self, f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>) -> Result<()> {
        // An error drops the transaction uncommitted: LMDB aborts it.
        self.env_write(|w| f(w))
    }

    fn set_batching(&self, _on: bool) -> Result<()> {
        // Every write is its own commit: LMDB's commits are one flush each.
        Ok(())
    }

    fn flush_batch(&self) -> Result<()> {
        Ok(())
    }

    fn compact(&self) -> Result<()> {
        // LMDB reuses freed pages in place; the file does not shrink while other processes
        // may map it. Nothing to do.
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.env.force_sync().map_err(heed_error)
    }

    fn integrity_problems(&self) -> Result<Vec<String>> {
        self.env_read(|r| r.integrity_problems())
    }

    fn disk_size(&self) -> u64 {
        std::iter::once(self.path.clone())
            .chain(super::companion_files(&self.path))
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// A read transaction's view of the tables.
struct View<'t> {
    txn: &'t RoTxn<'t>,
    dbs: &'t Dbs,
}

/// A write transaction's view: reads see its writes.
struct Write<'a, 'e> {
    txn: &'a mut RwTxn<'e>,
    dbs: &'a Dbs,
}

fn get<'t>(dbs: &Dbs, txn: &'t RoTxn<'_>, t: Table, key: &[u8]) -> Result<Option<Val<'t>>> {
    Ok(dbs[t as usize]
        .get(txn, key)
        .map_err(heed_error)?
        .map(Val::Ref))
}

fn scan(
    dbs: &Dbs,
    txn: &RoTxn<'_>,
    t: Table,
    prefix: &[u8],
    rev: bool,
    visit: &mut Visit<'_>,
) -> Result<()> {
    fn walk<'t>(
        rows: impl Iterator<Item = heed::Result<(&'t [u8], &'t [u8])>>,
        visit: &mut Visit<'_>,
    ) -> Result<()> {
        for kv in rows {
            let (k, v) = kv.map_err(heed_error)?;
            if !visit(k, v)? {
                break;
            }
        }
        Ok(())
    }
    let db = &dbs[t as usize];
    // LMDB takes no empty key, not even as a cursor position: the whole table instead.
    match (prefix.is_empty(), rev) {
        (true, false) => walk(db.iter(txn).map_err(heed_error)?, visit),
        (true, true) => walk(db.rev_iter(txn).map_err(heed_error)?, visit),
        (false, false) => walk(db.prefix_iter(txn, prefix).map_err(heed_error)?, visit),
        (false, true) => walk(db.rev_prefix_iter(txn, prefix).map_err(heed_error)?, visit),
    }
}

impl KvRead for View<'_> {
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>> {
        get(self.dbs, self.txn, t, key)
    }

    fn scan(&self, t: Table, prefix: &[u8], rev: bool, visit: &mut Visit<'_>) -> Result<()> {
        scan(self.dbs, self.txn, t, prefix, rev, visit)
    }
}

impl KvRead for Write<'_, '_> {
    fn get(&self, t: Table, key: &[u8]) -> Result<Option<Val<'_>>> {
        get(self.dbs, self.txn, t, key)
    }

    fn scan(&self, t: Table, prefix: &[u8], rev: bool, visit: &mut Visit<'_>) -> Result<()> {
        scan(self.dbs, self.txn, t, prefix, rev, visit)
    }
}

impl KvWrite for Write<'_, '_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.dbs[t as usize]
            .put(self.txn, key, value)
            .map_err(heed_error)
    }

    fn del(&mut self, t: Table, key: &[u8]) -> Result<()> {
        self.dbs[t as usize]
            .delete(self.txn, key)
            .map(drop)
            .map_err(heed_error)
    }
}
