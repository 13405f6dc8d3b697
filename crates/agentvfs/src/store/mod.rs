//! The storage layer: a narrow trait over what a vault persists (objects by id, workspaces,
//! overlay entries, checkpoints, the op log, audit records, settings). It knows nothing about
//! paths or processes; other engines implement the same trait without touching the layers above.

#[cfg(test)]
mod conformance;
pub mod id;
#[cfg(any(feature = "lmdb", feature = "sled", feature = "postgres"))]
mod kv;
#[cfg(feature = "lmdb")]
mod lmdb;
mod lock;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sled")]
mod sled;
mod sqlite;
mod wal;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use id::ObjectId;
#[cfg(feature = "postgres")]
pub use postgres::{Speculation, object_cache_counts, speculation_counts};
pub use sqlite::{FORMAT_VERSION, SqliteStore};

/// The key-value engines' format (LMDB, sled, PostgreSQL): their layout is their own, so a
/// change to SQLite's tables (format 5: `id_floor`) does not make hosts of an older build
/// refuse a shared vault whose layout did not change.
const KV_FORMAT_VERSION: u32 = 4;

/// The newest format this build writes for vaults in `engine` (SQLite: `FORMAT_VERSION`).
pub fn format_version(engine: Engine) -> u32 {
    match engine {
        Engine::Sqlite => FORMAT_VERSION,
        _ => KV_FORMAT_VERSION,
    }
}

use crate::error::{Error, Result};

/// A storage engine a vault file can be kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// SQLite in WAL mode: the default, and the production engine.
    #[default]
    Sqlite,
    /// LMDB through `heed` (cargo feature `lmdb`).
    Lmdb,
    /// sled (cargo feature `sled`); a vault is a directory.
    Sled,
    /// A PostgreSQL server (cargo feature `postgres`), shared by every host that reaches it;
    /// the vault file on each host says where.
    Postgres,
}

impl Engine {
    /// Every engine, as `--engine` spells them.
    pub const NAMES: [&'static str; 4] = ["sqlite", "lmdb", "sled", "postgres"];
    pub const ALL: [Engine; 4] = [Engine::Sqlite, Engine::Lmdb, Engine::Sled, Engine::Postgres];

    /// The engines this build has.
    pub fn built_in() -> Vec<Engine> {
        Engine::ALL.into_iter().filter(|e| e.built()).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Lmdb => "lmdb",
            Engine::Sled => "sled",
            Engine::Postgres => "postgres",
        }
    }

    /// Whether the vault's records live on a database server (which needs its URL).
    pub fn is_server(self) -> bool {
        self == Engine::Postgres
    }

    /// The cargo feature that builds this engine in (`None`: always built).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Engine::Sqlite => None,
            Engine::Lmdb => Some("lmdb"),
            Engine::Sled => Some("sled"),
            Engine::Postgres => Some("postgres"),
        }
    }

    /// Whether this build has the engine.
    pub fn built(self) -> bool {
        match self {
            Engine::Sqlite => true,
            Engine::Lmdb => cfg!(feature = "lmdb"),
            Engine::Sled => cfg!(feature = "sled"),
            Engine::Postgres => cfg!(feature = "postgres"),
        }
    }

    pub(crate) fn unsupported(self, path: &Path) -> Error {
        Error::UnsupportedEngine {
            path: path.to_path_buf(),
            engine: self.name().into(),
            feature: self.feature().unwrap_or_default().into(),
        }
    }
}

impl std::str::FromStr for Engine {
    type Err = Error;

    fn from_str(s: &str) -> Result<Engine> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "engine is one of {}, not `{s}`",
                    Engine::NAMES.join(", ")
                ))
            })
    }
}

/// The environment variable a database server's URL may come from.
pub const SERVER_URL_ENV: &str = "AVFS_POSTGRES_URL";

/// A vault kept on a database server: how to reach it and the vault's name there.
#[derive(Debug, Clone)]
pub struct Server {
    pub url: String,
    /// The URL came from `AVFS_POSTGRES_URL`: the vault file then names the variable
    /// instead of holding the URL (and any password in it).
    pub from_env: bool,
    /// The vault's name on the server, by which other hosts attach it.
    pub name: String,
    /// Where large objects go: `s3://bucket[/prefix]` in any S3-compatible store (its
    /// endpoint and credentials from the standard AWS variables); `None`: in the database.
    pub objects: Option<String>,
    /// Objects up to this many bytes stay in the database even with an object store
    /// (`None`: 4 KiB).
    pub inline_max: Option<usize>,
    /// Made by `vault migrate`: other hosts may attach it only once it is opened in the
    /// vault's place.
    pub pending: bool,
}

impl Server {
    /// The server a new vault in `engine` goes to: for a server engine, `url` (or
    /// `$AVFS_POSTGRES_URL`) and `objects`; a file engine takes neither
    /// (`invalid_argument`).
    pub fn for_engine(
        engine: Engine,
        url: Option<&str>,
        objects: Option<&str>,
        name: &str,
    ) -> Result<Option<Server>> {
        if !engine.is_server() {
            if let Some(flag) = [(url, "--url"), (objects, "--objects")]
                .iter()
                .find_map(|(v, f)| v.is_some().then_some(*f))
            {
                return Err(Error::invalid(format!(
                    "{flag} is for a vault kept on a server (postgres), not in {}",
                    engine.name()
                )));
            }
            return Ok(None);
        }
        let mut server = Server::new(url, name)?;
        if let Some(o) = objects {
            #[cfg(feature = "postgres")]
            postgres::check_objects_url(o)?;
            server.objects = Some(o.to_string());
        }
        Ok(Some(server))
    }

    /// `url`, or else `$AVFS_POSTGRES_URL`; `invalid_argument` when neither is given.
    pub fn new(url: Option<&str>, name: &str) -> Result<Server> {
        let (url, from_env) = match url {
            Some(u) => (u.to_string(), false),
            None => match std::env::var(SERVER_URL_ENV) {
                Ok(u) if !u.is_empty() => (u, true),
                _ => {
                    return Err(Error::invalid(format!(
                        "a PostgreSQL vault needs the server's URL: --url postgres://… or ${SERVER_URL_ENV}"
                    )));
                }
            },
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(Error::invalid(format!(
                "the server URL must start with postgres:// or postgresql://, not `{}`",
                url.split(':').next().unwrap_or_default()
            )));
        }
        Ok(Server {
            url,
            from_env,
            name: name.to_string(),
            objects: None,
            inline_max: None,
            pending: false,
        })
    }
}

/// Seconds from environment variable `var` (fractions allowed), from 1 to `max`; `default`
/// when it is unset or blank. Anything else is `invalid_input`, naming the variable.
pub fn seconds_from_env(
    var: &str,
    default: std::time::Duration,
    max: std::time::Duration,
) -> Result<std::time::Duration> {
    let raw = match std::env::var(var) {
        Ok(raw) => raw,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(raw)) => raw.to_string_lossy().into_owned(),
    };
    if raw.trim().is_empty() {
        return Ok(default);
    }
    let bad = || {
        Error::invalid(format!(
            "{var}={raw:?}: expected seconds from 1 to {}",
            max.as_secs()
        ))
    };
    let secs: f64 = raw.trim().parse().map_err(|_| bad())?;
    if !secs.is_finite() || !(1.0..=max.as_secs_f64()).contains(&secs) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// Create a new, empty vault file at `path` in `engine` (a server engine: on `server`).
pub fn create_store(
    path: &Path,
    engine: Engine,
    server: Option<&Server>,
) -> Result<Arc<dyn Store>> {
    if engine.built() && engine.is_server() != server.is_some() {
        return Err(Error::invalid(match server {
            None => format!(
                "engine {} keeps the vault on a server: give its URL (--url or ${SERVER_URL_ENV})",
                engine.name()
            ),
            Some(_) => format!("engine {} takes no server URL", engine.name()),
        }));
    }
    match engine {
        Engine::Sqlite => Ok(SqliteStore::create(path)?),
        #[cfg(feature = "lmdb")]
        Engine::Lmdb => Ok(lmdb::LmdbStore::create(path)?),
        #[cfg(feature = "sled")]
        Engine::Sled => Ok(sled::SledStore::create(path)?),
        #[cfg(feature = "postgres")]
        Engine::Postgres => Ok(postgres::PgStore::create(
            path,
            server.expect("checked above"),
        )?),
        #[allow(unreachable_patterns)]
        other => Err(other.unsupported(path)),
    }
}

/// Write a vault file at `path` for a vault that exists on `server` (another host made it).
/// Where `vault migrate` builds the copy of the vault at `path`, beside it, until the copy
/// takes the vault's place.
pub fn migrating_copy(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(MIGRATING);
    PathBuf::from(p)
}

/// Whether `path` is such a copy (an engine treats one as not yet in place).
pub fn is_migrating_copy(path: &Path) -> bool {
    path.as_os_str()
        .as_encoded_bytes()
        .ends_with(MIGRATING.as_bytes())
}

const MIGRATING: &str = ".migrating";

pub fn attach_store(path: &Path, server: &Server) -> Result<Arc<dyn Store>> {
    #[cfg(feature = "postgres")]
    {
        Ok(postgres::PgStore::attach(path, server)?)
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = server;
        Err(Engine::Postgres.unsupported(path))
    }
}

/// The engine a vault file was written by, from its first bytes (SQLite when unsure: its
/// open reports what is wrong with the file). A directory is a sled vault (sled's open
/// reports a directory that is not one).
pub fn engine_of(path: &Path) -> Engine {
    use std::io::Read;
    if path.is_dir() {
        return Engine::Sled;
    }
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = &head[..n];
    if head.starts_with(POSTGRES_MARK.as_bytes()) {
        return Engine::Postgres;
    }
    // LMDB's first meta page: its magic number 0xBEEFC0DE after the 16-byte page header.
    if head.len() >= 20 && head[16..20] == 0xBEEF_C0DEu32.to_le_bytes() {
        return Engine::Lmdb;
    }
    Engine::Sqlite
}

/// The first line of a vault file pointing at a PostgreSQL vault. Here, not in the
/// postgres module, so a build without it still names the engine a vault needs.
pub(crate) const POSTGRES_MARK: &str = "# agentvfs vault kept in PostgreSQL";

/// Our files in a sled vault's directory: the holder's lock, the waiters' file, the mark.
/// Here, not in the sled module, so a build without sled still knows a sled vault from a
/// directory of something else.
pub(crate) const SLED_LOCK: &str = "avfs.lock";
pub(crate) const SLED_WANT: &str = "avfs.want";
pub(crate) const SLED_MARK: &str = "avfs.sled";
/// Every file of a sled vault's directory besides its `snap.*` snapshots.
const SLED_FILES: [&str; 6] = ["conf", "db", "blobs", SLED_LOCK, SLED_WANT, SLED_MARK];

/// Remove the vault file at `path` (a sled vault's whole directory) and its side files,
/// those that are there.
pub fn remove_vault_files(path: &Path) -> Result<()> {
    // A PostgreSQL vault's records are on its server: delete them there first.
    #[cfg(feature = "postgres")]
    if engine_of(path) == Engine::Postgres {
        return postgres::PgStore::destroy(path);
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        // Only what a sled vault holds: a directory of anything else is not ours to delete.
        let entries = std::fs::read_dir(path).map_err(|e| Error::io("reading", path, e))?;
        for e in entries {
            let name = e.map_err(|e| Error::io("reading", path, e))?.file_name();
            let name = name.to_string_lossy();
            let ours = SLED_FILES.contains(&&*name) || name.starts_with("snap.");
            if !ours {
                return Err(Error::invalid(format!(
                    "{} is a directory holding `{name}`, not a sled vault: not deleting it",
                    path.display()
                )));
            }
        }
        std::fs::remove_dir_all(path).map_err(|e| Error::io("deleting", path, e))?;
    }
    for p in std::iter::once(path.to_path_buf()).chain(companion_files(path)) {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("deleting", p, e)),
        }
    }
    Ok(())
}

/// Which file a store opened (device and inode). A writer checks it after taking the write
/// lock: `vault migrate` renames a new file over the vault while holding that lock, and a
/// process that was waiting for it must not commit into the replaced file, where its write
/// would be lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity(u64, u64);

impl FileIdentity {
    pub(crate) fn of(path: &Path) -> Result<FileIdentity> {
        let m = std::fs::metadata(path).map_err(|e| Error::io("reading", path, e))?;
        Ok(Self::of_metadata(&m))
    }

    pub(crate) fn of_metadata(m: &std::fs::Metadata) -> FileIdentity {
        use std::os::unix::fs::MetadataExt;
        FileIdentity(m.dev(), m.ino())
    }

    /// `vault_replaced` if `path` is no longer the file this identity was taken from.
    pub(crate) fn still(self, path: &Path) -> Result<()> {
        match FileIdentity::of(path) {
            Ok(now) if now == self => Ok(()),
            _ => Err(Error::VaultReplaced {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Open the vault file at `path` in whichever engine wrote it.
pub fn open_store(path: &Path) -> Result<Arc<dyn Store>> {
    let mut tries = 0;
    loop {
        let engine = engine_of(path);
        let opened: Result<Arc<dyn Store>> = match engine {
            Engine::Sqlite => SqliteStore::open(path).map(|s| s as Arc<dyn Store>),
            #[cfg(feature = "lmdb")]
            Engine::Lmdb => lmdb::LmdbStore::open(path).map(|s| s as Arc<dyn Store>),
            #[cfg(feature = "sled")]
            Engine::Sled => sled::SledStore::open(path).map(|s| s as Arc<dyn Store>),
            #[cfg(feature = "postgres")]
            Engine::Postgres => postgres::PgStore::open(path).map(|s| s as Arc<dyn Store>),
            #[allow(unreachable_patterns)]
            other => Err(other.unsupported(path)),
        };
        // `vault migrate` may have renamed a file of the other engine over the path between
        // the look at its first bytes and the open: look again.
        match opened {
            Err(_) if tries < 3 && engine_of(path) != engine => tries += 1,
            other => return other,
        }
    }
}

/// The files that make up a vault besides the vault file itself (an engine's log or lock
/// files), for deleting and moving it whole.
pub fn companion_files(path: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm", "-lock"]
        .iter()
        .map(|suffix| {
            let mut p = path.as_os_str().to_owned();
            p.push(suffix);
            PathBuf::from(p)
        })
        .collect()
}

/// A stored object: its kind byte and encoded bytes.
#[derive(Debug, Clone)]
pub struct StoredObject {
    pub kind: u8,
    pub data: Vec<u8>,
}

/// A workspace (the vault's main line or a fork) as stored.
#[derive(Debug, Clone)]
pub struct WorkspaceRecord {
    pub id: i64,
    pub name: String,
    /// Root object the overlay sits on.
    pub base: ObjectId,
    pub parent: Option<String>,
    /// Root the fork was created from (its merge base later): `base_root` in JSON too. The
    /// vault file keeps its column name, `fork_root`, and so do op-log records.
    pub base_root: Option<ObjectId>,
    pub fork_checkpoint: Option<String>,
    pub created_at: i64,
    /// Live totals of regular files and their bytes, kept in step with every change.
    pub files: u64,
    pub bytes: u64,
}

/// A named checkpoint of one workspace.
#[derive(Debug, Clone)]
pub struct CheckpointRecord {
    pub id: i64,
    pub workspace: i64,
    pub name: String,
    pub root: ObjectId,
    pub message: Option<String>,
    pub created_at: i64,
    pub files: u64,
    pub bytes: u64,
    /// Taken by the proxy before a command (pruned by retention), not saved by someone.
    pub auto: bool,
}

/// One operation-log entry: a state change of a workspace.
#[derive(Debug, Clone)]
pub struct OpRecord {
    pub id: i64,
    pub workspace: i64,
    pub at: i64,
    pub kind: String,
    pub description: String,
    pub root_before: Option<ObjectId>,
    pub root_after: Option<ObjectId>,
    /// For undo and redo entries: the entry they act on.
    pub target: Option<i64>,
    /// Side effects outside the workspace's own state, as JSON (a merge moves the fork's
    /// merge base), so undo and redo can revert and re-apply them.
    pub extra: Option<String>,
}

/// One audit record.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AuditRecord {
    pub id: i64,
    /// Nanoseconds since the Unix epoch.
    pub at: i64,
    pub actor: String,
    pub source: String,
    pub workspace: String,
    pub operation: String,
    pub paths: Vec<String>,
    /// `ok` or the error kind.
    pub result: String,
    pub detail: Option<String>,
    /// One step of a larger operation (a mount's file operation; a proxied command's
    /// checkpoint and ingest), summed up by that operation's own record; `avfs audit`
    /// lists steps only with --detail.
    pub step: bool,
}

/// Read access, inside a consistent snapshot.
pub trait StoreRead {
    fn object(&self, id: &ObjectId) -> Result<Option<StoredObject>>;
    /// Copy the bytes of object `id` from `offset` into `buf`, without loading the rest of
    /// the object: `Some((kind, n))` with `n` short only at the object's end, `None` when
    /// the object is missing.
    fn object_read_at(
        &self,
        id: &ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<Option<(u8, usize)>>;
    fn has_object(&self, id: &ObjectId) -> Result<bool>;
    /// Every object id with its kind and stored size (as `object_stats` counts it), for gc
    /// and integrity checks; the sizes come from the index, no object's bytes are read.
    fn object_ids(&self) -> Result<Vec<(ObjectId, u8, u64)>>;
    /// (object count, stored bytes of all objects, stored bytes of content chunks).
    fn object_stats(&self) -> Result<(u64, u64, u64)>;

    fn workspace(&self, name: &str) -> Result<Option<WorkspaceRecord>>;
    fn workspaces(&self) -> Result<Vec<WorkspaceRecord>>;

    fn overlay_get(&self, ws: i64, path: &str) -> Result<Option<Option<Vec<u8>>>>;
    /// Direct children of `parent` in the overlay: (path, encoded node or `None` = whiteout).
    fn overlay_children(&self, ws: i64, parent: &str) -> Result<Vec<(String, Option<Vec<u8>>)>>;
    fn overlay_all(&self, ws: i64) -> Result<Vec<(String, Option<Vec<u8>>)>>;
    /// Every entry strictly below `prefix` (which is non-empty).
    fn overlay_below(&self, ws: i64, prefix: &str) -> Result<Vec<(String, Option<Vec<u8>>)>>;
    fn overlay_len(&self, ws: i64) -> Result<u64>;

    fn checkpoint(&self, ws: i64, name: &str) -> Result<Option<CheckpointRecord>>;
    fn checkpoints(&self, ws: i64) -> Result<Vec<CheckpointRecord>>;
    fn all_checkpoint_roots(&self) -> Result<Vec<ObjectId>>;

    fn setting(&self, key: &str) -> Result<Option<String>>;
    /// Every setting whose key starts with `prefix`, in key order.
    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, String)>>;

    fn ops(&self, ws: Option<i64>, limit: usize) -> Result<Vec<OpRecord>>;
    /// The newest `limit` records since `since`, steps included only if `steps`.
    fn audit(&self, limit: usize, since: Option<i64>, steps: bool) -> Result<Vec<AuditRecord>>;
    /// The highest id of `kind` ever handed out, its record deleted or not (0: none).
    fn highest_id(&self, kind: IdKind) -> Result<i64>;
}

/// Records whose ids can be deleted with them, and must still never come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Workspace,
    Checkpoint,
    Op,
}

impl IdKind {
    pub const ALL: [IdKind; 3] = [IdKind::Workspace, IdKind::Checkpoint, IdKind::Op];

    /// The name of its id counter (key-value engines) and table (SQLite).
    pub fn name(self) -> &'static str {
        match self {
            IdKind::Workspace => "workspace",
            IdKind::Checkpoint => "checkpoint",
            IdKind::Op => "op",
        }
    }
}

/// Write access, inside one `BEGIN IMMEDIATE` transaction. Reads see the transaction's writes.
pub trait StoreWrite: StoreRead {
    /// Store an object unless one with this id exists (content addressing makes that safe).
    fn put_object(&mut self, id: &ObjectId, kind: u8, data: &[u8]) -> Result<()>;
    fn delete_object(&mut self, id: &ObjectId) -> Result<()>;

    fn insert_workspace(&mut self, rec: &WorkspaceRecord) -> Result<i64>;
    fn update_workspace_state(
        &mut self,
        ws: i64,
        base: &ObjectId,
        files: u64,
        bytes: u64,
    ) -> Result<()>;
    fn delete_workspace(&mut self, ws: i64) -> Result<()>;
    /// Move a fork's merge base (after it was merged).
    fn set_base_root(&mut self, ws: i64, root: &ObjectId) -> Result<()>;

    fn overlay_put(&mut self, ws: i64, path: &str, parent: &str, node: Option<&[u8]>)
    -> Result<()>;
    fn overlay_delete(&mut self, ws: i64, path: &str) -> Result<()>;
    fn overlay_delete_below(&mut self, ws: i64, prefix: &str) -> Result<()>;
    fn overlay_clear(&mut self, ws: i64) -> Result<()>;

    fn insert_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<i64>;
    fn rename_checkpoint(&mut self, id: i64, name: &str) -> Result<()>;
    fn delete_checkpoint(&mut self, id: i64) -> Result<()>;

    fn set_setting(&mut self, key: &str, value: Option<&str>) -> Result<()>;

    fn append_op(&mut self, rec: &OpRecord) -> Result<i64>;
    fn delete_op(&mut self, id: i64) -> Result<()>;
    fn append_audit(&mut self, rec: &AuditRecord) -> Result<i64>;

    /// Copying a vault into another engine (`vault migrate`): store each record under the
    /// id it has, so op ids (exec ids), workspace ids and checkpoint ids survive, and move
    /// the engine's id counters past it.
    fn copy_workspace(&mut self, rec: &WorkspaceRecord) -> Result<()>;
    fn copy_checkpoint(&mut self, rec: &CheckpointRecord) -> Result<()>;
    fn copy_op(&mut self, rec: &OpRecord) -> Result<()>;
    fn copy_audit(&mut self, rec: &AuditRecord) -> Result<()>;
    /// Hand out no id of `kind` up to `id` from now on (`vault migrate`: ids the source
    /// handed out to records it deleted since).
    fn keep_ids_past(&mut self, kind: IdKind, id: i64) -> Result<()>;

    /// Mark the vault as moved away (`vault migrate`), in this transaction: a writer of a
    /// vault shared across hosts that takes its turn afterwards writes nothing and gets
    /// `vault_replaced`. A file engine needs no mark (its file is exchanged under the lock).
    fn retire(&mut self) -> Result<()> {
        Ok(())
    }
}

/// A vault's storage engine. Closures run inside one read snapshot or one write transaction;
/// an error from the closure rolls the transaction back.
pub trait Store: Send + Sync {
    /// The vault file (canonical).
    fn path(&self) -> &Path;
    fn engine(&self) -> Engine;
    fn read_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()>;
    /// `read_with`, reading every record from the store itself: nothing from a copy this
    /// process keeps (`vault check` verifies what the store holds).
    fn read_verified_with(&self, f: &mut dyn FnMut(&dyn StoreRead) -> Result<()>) -> Result<()> {
        self.read_with(f)
    }
    fn write_with(&self, f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>) -> Result<()>;
    /// Group commit for a single busy writer (a mount daemon): writes share one transaction
    /// committed at least every few tens of milliseconds, on `flush_batch` and on `sync`.
    /// Other processes see changes once committed.
    fn set_batching(&self, on: bool) -> Result<()>;
    /// Commit the open batch, if any.
    fn flush_batch(&self) -> Result<()>;
    /// Called inside a `read_with`/`write_with` closure: while group commit holds a batch
    /// open, (the batch, how many writes it has had) — no other process can write until it
    /// commits, so state this process read or wrote at one tag is still current at the
    /// same tag (for a read) or at the next write. `None` outside a batch.
    fn batch_tag(&self) -> Option<(u64, u64)> {
        None
    }
    /// Reclaim free pages and truncate the write-ahead log.
    fn compact(&self) -> Result<()>;
    /// Make every committed transaction durable (survives power loss), for `fsync`.
    fn sync(&self) -> Result<()>;
    /// The storage engine's own consistency check (pages, indexes): one line per problem.
    fn integrity_problems(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    /// Bytes the vault occupies on disk (database plus write-ahead log).
    fn disk_size(&self) -> u64;
    /// `write_with`, told ahead which records `f` will read. An engine on a network fetches
    /// them with the transaction's first exchange instead of a round trip each; a local one
    /// ignores the hint. A record named and not read costs nothing more than its fetch.
    fn write_ahead(
        &self,
        _ahead: &ReadAhead,
        f: &mut dyn FnMut(&mut dyn StoreWrite) -> Result<()>,
    ) -> Result<()> {
        self.write_with(f)
    }
}

/// Records a write expects to read, named before it starts (see `Store::write_ahead`).
#[derive(Debug, Clone, Default)]
pub struct ReadAhead {
    /// Workspaces by name.
    pub workspaces: Vec<String>,
    /// Workspaces by id: the id's index entry (its name record when that is also named).
    pub workspace_ids: Vec<i64>,
    /// Settings by key.
    pub settings: Vec<String>,
    /// The settings under each prefix (the first page of the scan).
    pub setting_prefixes: Vec<String>,
    /// Each workspace's overlay (the first page of its scan) and its length counter.
    pub overlays: Vec<i64>,
    /// Checkpoints by (workspace id, name).
    pub checkpoints: Vec<(i64, String)>,
    /// The write may run more than once: an engine on a network may first try it in one
    /// exchange on what it knew after its last write, and run it again the usual way when
    /// that was out of date (nothing of the first run is applied then).
    pub repeatable: bool,
}

impl dyn Store {
    /// Run `f` in a read snapshot and return its value.
    pub fn read<R>(&self, f: impl FnOnce(&dyn StoreRead) -> Result<R>) -> Result<R> {
        self.read_by(false, f)
    }

    /// `read`, with every record read from the store itself (`Store::read_verified_with`).
    pub fn read_verified<R>(&self, f: impl FnOnce(&dyn StoreRead) -> Result<R>) -> Result<R> {
        self.read_by(true, f)
    }

    fn read_by<R>(&self, verified: bool, f: impl FnOnce(&dyn StoreRead) -> Result<R>) -> Result<R> {
        let mut f = Some(f);
        let mut out = None;
        let mut once = |r: &dyn StoreRead| {
            if let Some(f) = f.take() {
                out = Some(f(r)?);
            }
            Ok(())
        };
        if verified {
            self.read_verified_with(&mut once)?;
        } else {
            self.read_with(&mut once)?;
        }
        out.ok_or_else(|| crate::Error::Storage("read closure did not run".into()))
    }

    /// Run `f` in one write transaction and return its value; an error rolls back.
    pub fn write<R>(&self, f: impl FnOnce(&mut dyn StoreWrite) -> Result<R>) -> Result<R> {
        self.write_reading(&ReadAhead::default(), f)
    }

    /// `write`, with the records `f` will read named ahead (`Store::write_ahead`).
    pub fn write_reading<R>(
        &self,
        ahead: &ReadAhead,
        f: impl FnOnce(&mut dyn StoreWrite) -> Result<R>,
    ) -> Result<R> {
        let mut f = Some(f);
        let mut out = None;
        let ahead = ReadAhead {
            repeatable: false,
            ..ahead.clone()
        };
        self.write_ahead(&ahead, &mut |w| {
            if let Some(f) = f.take() {
                out = Some(f(w)?);
            }
            Ok(())
        })?;
        out.ok_or_else(|| crate::Error::Storage("write closure did not run".into()))
    }

    /// `write_reading` for an `f` that can run more than once: when `ahead.repeatable`
    /// says so, it may, against different states of the vault, and only its last run is
    /// applied.
    pub fn write_mut<R>(
        &self,
        ahead: &ReadAhead,
        mut f: impl FnMut(&mut dyn StoreWrite) -> Result<R>,
    ) -> Result<R> {
        let mut out = None;
        self.write_ahead(ahead, &mut |w| {
            out = Some(f(w)?);
            Ok(())
        })?;
        out.ok_or_else(|| crate::Error::Storage("write closure did not run".into()))
    }
}
