//! The vault's administration on the server: creating a vault (its schema, its name in
//! `avfs_vaults` and its vault file), attaching one another host made, and deleting one.
//! These run on a blocking client, each bounded by the server wait (`conn::bounded`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use postgres::Client;

use super::conn::{bounded, connect, idle, quoted};
use super::objects::Objects;
use super::{
    ENGINE_KEY, FORMAT_KEY, FORMAT_VERSION, INLINE_KEY, INLINE_MAX, Locator, OBJECTS_KEY,
    PENDING_KEY, PgStore, Table, apply_migrations, cache_dir, lock_key, pg_error,
};
use crate::error::{Error, Result};
use crate::store::Server;
use crate::store::lock::lock;

/// The lock that orders changes to `avfs_vaults` and schema creation.
const CATALOG_LOCK: i64 = 0x6176_6673_7661_756c;

fn catalog(client: &mut Client) -> Result<postgres::Transaction<'_>> {
    let mut txn = client.transaction().map_err(pg_error)?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&CATALOG_LOCK])
        .map_err(pg_error)?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS avfs_vaults (name text PRIMARY KEY, schema text NOT NULL \
         UNIQUE, created_at timestamptz NOT NULL DEFAULT now())",
    )
    .map_err(pg_error)?;
    Ok(txn)
}

impl PgStore {
    /// Create vault `server.name` on the server and the vault file at `path` pointing at it.
    pub fn create(path: &Path, server: &Server) -> Result<Arc<PgStore>> {
        if let Some(url) = server.objects.as_ref().filter(|_| !path.exists()) {
            // An object store that does not answer is refused now, not at the first write.
            Objects::open(url, "probe", None)?.probe()?;
        }
        let (path, server) = (path.to_path_buf(), server.clone());
        bounded("creating the vault", move |gave_up| {
            Self::create_inner(&path, &server, gave_up)
        })
    }

    fn create_inner(path: &Path, server: &Server, gave_up: &AtomicBool) -> Result<Arc<PgStore>> {
        if path.exists() {
            return Err(Error::AlreadyExists {
                name: path.display().to_string(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        let mut client = connect(&server.url)?;
        // The name, the schema, its tables and the vault's format: one transaction, so a
        // create that dies half-way leaves nothing on the server (and holds no name).
        let schema = {
            let mut txn = catalog(&mut client)?;
            let taken = txn
                .query_opt("SELECT 1 FROM avfs_vaults WHERE name = $1", &[&server.name])
                .map_err(pg_error)?;
            if taken.is_some() {
                return Err(Error::AlreadyExists {
                    name: format!("{} (on the PostgreSQL server)", server.name),
                });
            }
            let schema = new_schema_name(&server.name);
            let s = quoted(&schema);
            txn.batch_execute(&format!(
                "CREATE SCHEMA {s}; CREATE TABLE {s}.migrations (version int PRIMARY KEY, \
                 applied_at timestamptz NOT NULL DEFAULT now())"
            ))
            .map_err(pg_error)?;
            apply_migrations(&mut txn, &s, 0)?;
            let mut meta: Vec<(&[u8], Vec<u8>)> = vec![
                (FORMAT_KEY, FORMAT_VERSION.to_le_bytes().to_vec()),
                (ENGINE_KEY, b"postgres".to_vec()),
            ];
            if let Some(url) = &server.objects {
                let inline = server.inline_max.unwrap_or(INLINE_MAX) as u64;
                meta.push((OBJECTS_KEY, url.as_bytes().to_vec()));
                meta.push((INLINE_KEY, inline.to_le_bytes().to_vec()));
            }
            if server.pending {
                meta.push((PENDING_KEY, b"migrating".to_vec()));
            }
            let insert = format!("INSERT INTO {s}.kv (t, k, v) VALUES ($1, $2, $3)");
            for (k, v) in meta {
                txn.execute(&insert, &[&(Table::Meta as i16), &k, &v])
                    .map_err(pg_error)?;
            }
            txn.execute(
                "INSERT INTO avfs_vaults (name, schema) VALUES ($1, $2)",
                &[&server.name, &schema],
            )
            .map_err(pg_error)?;
            txn.commit().map_err(pg_error)?;
            schema
        };
        let locator = Locator::new(server, schema);
        if gave_up.load(Ordering::SeqCst) {
            // The caller reported a failure: leave nothing behind that it did not report.
            let _ = drop_vault(&mut client, &locator);
            return Err(Error::Storage("the vault's creation was given up".into()));
        }
        let made = locator.write(path).and_then(|_| Self::open(path));
        if made.is_err() {
            let _ = drop_vault(&mut client, &locator);
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// Write a vault file at `path` for vault `server.name`, which exists on the server.
    pub fn attach(path: &Path, server: &Server) -> Result<Arc<PgStore>> {
        let (path, server) = (path.to_path_buf(), server.clone());
        bounded("attaching the vault", move |gave_up| {
            Self::attach_inner(&path, &server, gave_up)
        })
    }

    fn attach_inner(path: &Path, server: &Server, gave_up: &AtomicBool) -> Result<Arc<PgStore>> {
        if path.exists() {
            return Err(Error::AlreadyExists {
                name: path.display().to_string(),
            });
        }
        let mut client = connect(&server.url)?;
        let mut txn = catalog(&mut client)?;
        let found = txn
            .query_opt(
                "SELECT schema FROM avfs_vaults WHERE name = $1",
                &[&server.name],
            )
            .map_err(pg_error)?;
        let Some(row) = found else {
            // A few names like it (a shared server may hold thousands).
            let stem: String = server.name.chars().take(3).collect();
            let names = txn
                .query(
                    "SELECT name FROM avfs_vaults WHERE name LIKE $1 || '%' ORDER BY name LIMIT 5",
                    &[&stem.replace(['%', '_', '\\'], "")],
                )
                .map_err(pg_error)?;
            return Err(Error::VaultNotFound {
                name: format!("{} (on the PostgreSQL server)", server.name),
                suggestions: names.iter().map(|r| r.get(0)).collect(),
            });
        };
        let schema: String = row.get(0);
        let pending = txn
            .query_one(
                &format!(
                    "SELECT EXISTS (SELECT 1 FROM {}.kv WHERE t = $1 AND k = $2)",
                    quoted(&schema)
                ),
                &[&(Table::Meta as i16), &PENDING_KEY],
            )
            .map_err(pg_error)?
            .get::<_, bool>(0);
        if pending {
            return Err(Error::VaultNotFound {
                name: format!(
                    "{} (still being moved onto the PostgreSQL server by `vault migrate`: attach it once that is done)",
                    server.name
                ),
                suggestions: Vec::new(),
            });
        }
        txn.commit().map_err(pg_error)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("creating directory", dir, e))?;
        }
        let locator = Locator::new(server, schema);
        if gave_up.load(Ordering::SeqCst) {
            return Err(Error::Storage("the vault's attach was given up".into()));
        }
        locator.write(path)?;
        Self::open(path).inspect_err(|_| {
            let _ = std::fs::remove_file(path);
        })
    }

    /// Delete the vault at `path` from the server (its schema and its name), then the file.
    pub fn destroy(path: &Path) -> Result<()> {
        let locator = Locator::read(path)?;
        let url = locator.url()?;
        lock(idle()).remove(&(url.clone(), locator.schema.clone()));
        let dropping = locator.clone();
        bounded("deleting the vault", move |_| {
            drop_vault(&mut connect(&url)?, &dropping)
        })?;
        // The objects in an object store stay: other vaults may share the prefix, and a
        // bucket's lifecycle rules are its owner's. This host's cache goes.
        if let Some(dir) = cache_dir(path) {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::fs::remove_file(path).map_err(|e| Error::io("deleting", path, e))
    }
}

/// A schema name for a new vault: readable, and unique on the server.
fn new_schema_name(name: &str) -> String {
    let readable: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let salt = blake3::hash(
        format!("{name}\0{}\0{}", crate::model::now_ns(), std::process::id()).as_bytes(),
    );
    format!("avfs_{readable}_{}", &salt.to_hex()[..12])
}

/// Whether `avfs_vaults` lists vault `name` as kept in `schema`: the server's word on a
/// vault file, which is trusted for nothing else.
fn listed(
    c: &mut impl postgres::GenericClient,
    name: &str,
    schema: &str,
) -> std::result::Result<bool, postgres::Error> {
    let sql = "SELECT 1 FROM avfs_vaults WHERE name = $1 AND schema = $2";
    Ok(c.query_opt(sql, &[&name, &schema])?.is_some())
}

/// Drop vault `locator.name` from the server: only the schema `avfs_vaults` lists under
/// that name (a vault file naming any other schema drops nothing).
fn drop_vault(client: &mut Client, locator: &Locator) -> Result<()> {
    let mut txn = catalog(client)?;
    if !listed(&mut txn, &locator.name, &locator.schema).map_err(pg_error)? {
        // Not there (already deleted, or a vault file naming a schema that is not this
        // vault's): nothing on the server is dropped.
        return Ok(());
    }
    txn.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&lock_key(&locator.schema)],
    )
    .map_err(pg_error)?;
    txn.batch_execute(&format!(
        "DROP SCHEMA IF EXISTS {} CASCADE",
        quoted(&locator.schema)
    ))
    .map_err(pg_error)?;
    txn.execute(
        "DELETE FROM avfs_vaults WHERE name = $1 AND schema = $2",
        &[&locator.name, &locator.schema],
    )
    .map_err(pg_error)?;
    txn.commit().map_err(pg_error)
}
