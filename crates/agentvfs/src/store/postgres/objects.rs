//! The object half of a PostgreSQL vault, in an S3-compatible store (`--objects
//! s3://bucket/prefix`). Objects are immutable and named by their BLAKE3 id, so a PUT is
//! idempotent (several S3-compatible servers ignore conditional writes; none is needed) and
//! a cached copy never goes stale. The database keeps the object index: a row per object
//! with its kind and size and, for an object in S3, a reference instead of its bytes. Small
//! objects (trees, attributes) stay in their rows: one round trip to the database instead of
//! one to S3. Refs never live in S3.
//!
//! A write uploads its new objects in parallel before its transaction commits. A crash in
//! between leaves objects nothing references; `sweep` (run by `avfs gc`) deletes those
//! older than a grace period, which also covers a read that began before an object's last
//! reference went.
//!
//! The endpoint and credentials come from the standard AWS variables (`AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`), so the
//! same vault works with AWS S3, R2, MinIO or SeaweedFS; they are never stored.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as Key;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::error::{Error, Result};
use crate::store::lock::lock;

/// Uploads and downloads in flight at once.
const PARALLEL: usize = 16;
/// Object reads this process served from a host cache, and those it fetched from the store.
pub(super) static SERVED: AtomicU64 = AtomicU64::new(0);
pub(super) static FETCHED: AtomicU64 = AtomicU64::new(0);
/// The host cache's default bound (`AVFS_OBJECT_CACHE_MB` sets another).
const CACHE_MB: u64 = 1024;
/// Unreferenced objects younger than this are kept by a sweep (`AVFS_OBJECT_GRACE_SECS`).
const GRACE: Duration = Duration::from_secs(3600);

fn s3_error(what: &str, e: object_store::Error) -> Error {
    Error::StoreUnavailable {
        reason: format!("the vault's object store ({what}): {e}"),
        maybe_applied: false,
        writes_kept: 0,
    }
}

/// Objects an uncommitted write uploaded: (id, bytes).
pub(super) struct Uploaded(Vec<(Vec<u8>, Bytes)>);

/// For a batch of object ids, whether the vault's index refers to each.
pub(super) type Referenced<'a> = dyn FnMut(&[Vec<u8>]) -> Result<Vec<bool>> + 'a;

pub(super) struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
    cache: Cache,
}

impl Objects {
    /// The store at `url` (`s3://bucket[/prefix]`), with the vault's objects under
    /// `prefix/vault/` (its schema: no two vaults share a folder, so one vault's sweep can
    /// never take another's objects) and its host cache in `cache_dir` (`None`: none).
    pub(super) fn open(url: &str, vault: &str, cache_dir: Option<PathBuf>) -> Result<Objects> {
        let (bucket, prefix) = parse_url(url)?;
        let prefix = format!("{prefix}{vault}/");
        // Each request, and its retries, within the server wait (unless the environment
        // sets the client's own timeout, AWS_TIMEOUT): a store that stops answering is an
        // error, and a write waiting on it holds the vault's lock no longer than that.
        let wait = super::conn::server_wait()?;
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if std::env::var_os("AWS_TIMEOUT").is_none() {
            let timeout = AmazonS3ConfigKey::Client(ClientConfigKey::Timeout);
            builder = builder.with_config(timeout, format!("{}ms", wait.as_millis()));
        }
        let store = builder
            .with_retry(RetryConfig {
                retry_timeout: wait,
                ..RetryConfig::default()
            })
            .build()
            .map_err(|e| Error::invalid(format!("the object store {url}: {e}")))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Storage(format!("starting the object store's runtime: {e}")))?;
        Ok(Objects {
            store: Arc::new(store),
            prefix,
            rt,
            cache: Cache::new(cache_dir),
        })
    }

    fn key(&self, id: &[u8]) -> Key {
        Key::from(format!("{}{}", self.prefix, hex::encode(id)))
    }

    /// Check the store answers (at create and attach): a listing of at most one key.
    pub(super) fn probe(&self) -> Result<()> {
        let prefix = Key::from(self.prefix.trim_end_matches('/'));
        self.rt
            .block_on(async {
                self.store
                    .list(Some(&prefix))
                    .take(1)
                    .try_collect::<Vec<_>>()
                    .await
            })
            .map(|_| ())
            .map_err(|e| s3_error("listing", e))
    }

    /// Upload every (id, bytes), in parallel; all of them are stored when this returns Ok.
    /// Returns them, for `keep` once the write that refers to them committed.
    pub(super) fn put_all(&self, items: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Uploaded> {
        if items.is_empty() {
            return Ok(Uploaded(Vec::new()));
        }
        let store = &self.store;
        let items: Vec<(Vec<u8>, Bytes)> = items
            .into_iter()
            .map(|(id, bytes)| (id, Bytes::from(bytes)))
            .collect();
        let uploads = items.iter().map(|(id, bytes)| {
            let key = self.key(id);
            let payload = PutPayload::from(bytes.clone());
            async move {
                store
                    .put(&key, payload)
                    .await
                    .map_err(|e| s3_error("uploading", e))
            }
        });
        self.rt.block_on(async {
            futures::stream::iter(uploads)
                .buffer_unordered(PARALLEL)
                .try_collect::<Vec<_>>()
                .await
        })?;
        Ok(Uploaded(items))
    }

    /// Keep what a committed write uploaded in the host cache: the host that wrote an
    /// object is the one most likely to read it next (an agent edits, then builds), and an
    /// object never changes, so the copy needs no invalidation. Called after the commit,
    /// so the local disk writes never hold the vault's lock.
    pub(super) fn keep(&self, uploaded: Uploaded) {
        for (id, bytes) in &uploaded.0 {
            self.cache.put(&hex::encode(id), bytes);
        }
    }

    /// The bytes of object `id` (`hash`: their BLAKE3, from its index row), from the host
    /// cache or else the store (then cached). A copy whose bytes do not hash to `hash` is
    /// never returned: a damaged cached copy is dropped and fetched again; a damaged stored
    /// one is `corrupt_vault`. Not `cached`: from the store whatever the cache holds (a
    /// check of what the store holds).
    pub(super) fn get(&self, id: &[u8], hash: &[u8; 32], cached: bool) -> Result<Vec<u8>> {
        let name = hex::encode(id);
        if let Some(bytes) = self.cache.get(&name, hash).filter(|_| cached) {
            SERVED.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
        FETCHED.fetch_add(1, Ordering::Relaxed);
        let key = self.key(id);
        let bytes = self
            .rt
            .block_on(async { self.store.get(&key).await?.bytes().await })
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => Error::CorruptVault {
                    reason: format!("object {name} is indexed but missing from the object store"),
                },
                other => s3_error("downloading", other),
            })?
            .to_vec();
        if blake3::hash(&bytes).as_bytes() != hash {
            return Err(Error::CorruptVault {
                reason: format!("object {name} in the object store does not match its index"),
            });
        }
        // The cache is an optimisation: a failure to keep a copy is not an error.
        self.cache.put(&name, &bytes);
        Ok(bytes)
    }

    /// Delete the stored objects `keep` does not name that are older than the grace period.
    /// Returns how many went.
    pub(super) fn sweep(&self, keep: &mut Referenced<'_>) -> Result<u64> {
        let grace = std::env::var("AVFS_OBJECT_GRACE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(GRACE);
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs() as i64;
        let prefix = Key::from(self.prefix.trim_end_matches('/'));
        let listed = self
            .rt
            .block_on(async { self.store.list(Some(&prefix)).try_collect::<Vec<_>>().await })
            .map_err(|e| s3_error("listing", e))?;
        // Only keys this vault writes: directly in its folder, named by a 32-byte id in hex.
        // Anything else there (a sub-folder, another name) is not ours to delete.
        let old: Vec<(Key, Vec<u8>)> = listed
            .into_iter()
            .filter(|m| m.last_modified.timestamp() <= cutoff)
            .filter_map(|m| {
                let rest = m.location.as_ref().strip_prefix(self.prefix.as_str())?;
                if rest.len() != 64 || rest.contains('/') {
                    return None;
                }
                let id = hex::decode(rest).ok()?;
                Some((m.location, id))
            })
            .collect();
        let mut removed = 0;
        for batch in old.chunks(1000) {
            let ids: Vec<Vec<u8>> = batch.iter().map(|(_, id)| id.clone()).collect();
            let kept = keep(&ids)?;
            let doomed: Vec<&Key> = batch
                .iter()
                .zip(kept)
                .filter(|(_, k)| !k)
                .map(|((key, _), _)| key)
                .collect();
            let store = &self.store;
            self.rt
                .block_on(async {
                    futures::stream::iter(doomed.iter().map(|k| store.delete(k)))
                        .buffer_unordered(PARALLEL)
                        .try_collect::<Vec<_>>()
                        .await
                })
                .map_err(|e| s3_error("deleting", e))?;
            removed += doomed.len() as u64;
        }
        Ok(removed)
    }
}

/// `s3://bucket[/prefix]` → (bucket, prefix ending in `/` or empty).
pub(super) fn parse_url(url: &str) -> Result<(String, String)> {
    let rest = url.strip_prefix("s3://").ok_or_else(|| {
        Error::invalid(format!(
            "--objects takes s3://bucket[/prefix] (any S3-compatible store), not `{url}`"
        ))
    })?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid_bucket = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid_bucket {
        return Err(Error::invalid(format!(
            "`{bucket}` is not an S3 bucket name (3 to 63 of a-z, 0-9, '-', '.')"
        )));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|p| p == "." || p == "..") || prefix.contains("//") {
        return Err(Error::invalid(format!(
            "`{prefix}` is not an object key prefix"
        )));
    }
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    Ok((bucket.to_string(), prefix))
}

/// Mark a cached copy as just used (eviction takes the least recently used first).
/// Whether there was one.
fn touch(path: &Path) -> bool {
    std::fs::File::options()
        .write(true)
        .open(path)
        .map(|f| {
            let _ = f.set_modified(SystemTime::now());
        })
        .is_ok()
}

/// The host cache: one file per object, named by its id, kept under a size bound by
/// evicting the least recently used (a hit refreshes the file's time).
struct Cache {
    dir: PathBuf,
    /// 0: no cache (`AVFS_OBJECT_CACHE_MB=0`, or a store that must read from the store).
    limit: u64,
    /// Bytes held, counted on first use.
    held: Mutex<Option<u64>>,
}

impl Cache {
    fn new(dir: Option<PathBuf>) -> Cache {
        let mb = std::env::var("AVFS_OBJECT_CACHE_MB")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(CACHE_MB);
        Cache {
            limit: if dir.is_some() {
                mb.saturating_mul(1 << 20)
            } else {
                0
            },
            dir: dir.unwrap_or_default(),
            held: Mutex::new(None),
        }
    }

    fn get(&self, name: &str, hash: &[u8; 32]) -> Option<Vec<u8>> {
        if self.limit == 0 {
            return None;
        }
        let path = self.dir.join(name);
        let bytes = std::fs::read(&path).ok()?;
        // A damaged copy is noticed and dropped, never served.
        if blake3::hash(&bytes).as_bytes() != hash {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        touch(&path);
        Some(bytes)
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        if self.limit == 0 || bytes.len() as u64 > self.limit {
            return;
        }
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // Private, as the vault file is: the cache holds the vault's content.
        if std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .is_err()
        {
            return;
        }
        // Already held (the same object written twice): the copy is the same bytes.
        let path = self.dir.join(name);
        if touch(&path) {
            return;
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{name}.{}.{n}", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes));
        if written.is_err() || std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
        let mut held = lock(&self.held);
        let total = held.get_or_insert_with(|| dir_bytes(&self.dir));
        *total += bytes.len() as u64;
        if *total > self.limit {
            *total = evict(&self.dir, self.limit - self.limit / 10);
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Remove the least recently used files of `dir` until it holds at most `target` bytes;
/// returns what it holds then.
fn evict(dir: &Path, target: u64) -> u64 {
    let mut files: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    for (_, len, path) in files {
        if total <= target {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
    total
}
