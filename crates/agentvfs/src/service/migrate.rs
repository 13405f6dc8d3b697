//! `vault migrate`: move a vault into another storage engine. The whole store is copied into
//! a new file beside the vault while a write transaction holds the vault still, the copy is
//! checked (every object re-hashed, every record compared), and only then is it exchanged
//! with the vault file, one atomic step (an exchange, since a sled vault is a directory and
//! cannot be renamed over a file, nor a file over it). Until then the vault file is never
//! written; on any failure the new file is removed and the vault is as it was.

use std::path::Path;

use serde::Serialize;

use super::session;
use super::workspace::WorkspaceService;
use crate::error::{Error, Result};
use crate::model::MAIN;
use crate::model::migrate::{CopyCounts, Progress, copy_store, verify_copy};
use crate::store::{Engine, Server, companion_files, create_store, remove_vault_files};

/// What `vault migrate` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MigrateReport {
    /// The vault's registered name.
    pub name: String,
    pub path: String,
    pub from: Engine,
    pub to: Engine,
    pub copied: CopyCounts,
    /// Always true in a report: a copy that does not verify is an error and is not swapped in.
    pub verified: bool,
    pub disk_bytes_before: u64,
    pub disk_bytes_after: u64,
}

impl WorkspaceService {
    /// Move vault `name` (with all its forks) into engine `to`; into a server engine, on the
    /// server at `url` (or `$AVFS_POSTGRES_URL`).
    pub fn migrate(
        &self,
        name: &str,
        to: Engine,
        url: Option<&str>,
        objects: Option<&str>,
        progress: Progress<'_>,
    ) -> Result<MigrateReport> {
        let target = self.resolve(Some(name))?;
        if target.workspace != MAIN {
            return Err(Error::invalid(format!(
                "`{name}` is a fork; migrate the vault it belongs to (its file holds every fork)"
            )));
        }
        let path = target
            .path
            .canonicalize()
            .map_err(|e| Error::io("resolving", &target.path, e))?;
        if !to.built() {
            return Err(to.unsupported(&path));
        }
        if to.is_server() {
            // The name other hosts attach it by: a registered vault name, not a path.
            super::workspace::validate_vault_name(name)?;
        }
        let mut server = Server::for_engine(to, url, objects, name)?;
        if let Some(s) = server.as_mut() {
            s.pending = true;
        }
        let busy: Vec<String> = session::all_mounts(self.registry())?
            .into_iter()
            .filter(|m| m.alive && m.path.canonicalize().is_ok_and(|p| p == path))
            .map(|m| match m.session {
                Some(s) => format!("session {s}"),
                None => format!("mount {}", m.dir.display()),
            })
            .collect();
        if !busy.is_empty() {
            return Err(Error::invalid(format!(
                "vault `{name}` is in use ({}): stop it first, so no write lands in the file being replaced",
                busy.join(", ")
            )));
        }
        let vault = self.open_vault(&target)?;
        // Nor while another host's mount or session holds one of its forks.
        vault.check_unleased("moving the vault")?;
        let from = vault.store.engine();
        if from == to {
            return Err(Error::invalid(format!(
                "vault `{name}` is already kept in {}",
                to.name()
            )));
        }
        let dest = crate::store::migrating_copy(&path);
        remove_vault_files(&dest)?;
        let disk_bytes_before = vault.store.disk_size();
        // The write transaction keeps every other writer out while the copy is made,
        // checked and renamed over the vault; nothing is written to the vault itself. A
        // writer that waited for the lock then finds the file replaced and writes nothing
        // (`vault_replaced`) instead of committing into the unlinked file.
        //
        // A vault on a server is shared with other hosts, which never see this host's file:
        // the transaction marks it moved away instead (`retire`), so a writer of any host
        // that takes its turn after the commit writes nothing (`vault_replaced`), and the
        // exchange follows the commit. Were the commit lost, nothing was exchanged.
        let shared = from.is_server();
        let mut swapped = false;
        let copied = vault.store.write(|w| {
            let dst = create_store(&dest, to, server.as_ref())?;
            let copied = copy_store(&*w, &*dst, &mut *progress)?;
            dst.read(|r| verify_copy(&*w, r, &mut *progress))?;
            dst.sync()?;
            drop(dst);
            if shared {
                w.retire()?;
            } else {
                swap(&dest, &path)?;
                swapped = true;
            }
            Ok(copied)
        });
        drop(vault);
        let copied = match copied {
            Ok(c) if shared => match swap(&dest, &path) {
                Ok(()) => {
                    swapped = true;
                    Ok(c)
                }
                // The server's copy is retired and this is the vault now: keep it.
                Err(e) => {
                    return Err(Error::Storage(format!(
                        "the vault was copied to {} and moved off the server, but putting the copy in place failed ({e}): rename it over {} by hand",
                        dest.display(),
                        path.display()
                    )));
                }
            },
            other => other,
        };
        let copied = match copied {
            Ok(c) => c,
            // Before the exchange `dest` is the copy; after it, the old vault (kept).
            Err(e) if !swapped => {
                let _ = remove_vault_files(&dest);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // The old vault, now at `dest`, and its engine's side files (its log, its lock),
        // which are still named after the vault's path.
        remove_vault_files(&dest)?;
        let old_side: &[&str] = match from {
            Engine::Sqlite => &["-wal", "-shm"],
            Engine::Lmdb => &["-lock"],
            Engine::Sled | Engine::Postgres => &[],
        };
        for suffix in old_side {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let (_, ws) = self.open(Some(name))?;
        let report = MigrateReport {
            name: target.name,
            path: path.display().to_string(),
            from,
            to,
            copied,
            verified: true,
            disk_bytes_before,
            disk_bytes_after: ws.vault().store.disk_size(),
        };
        let detail = serde_json::to_string(&report).map_err(|e| Error::Storage(e.to_string()))?;
        ws.record_audit("vault.migrate", &[], "ok", Some(detail))?;
        Ok(report)
    }
}

/// Put the checked copy at `dest` in the vault's place, and the vault at `dest`: one atomic
/// exchange. The copy's own side files (an engine recreates them) are removed first.
fn swap(dest: &Path, path: &Path) -> Result<()> {
    // A SQLite copy folds its log into the file when its last connection closes (it closed
    // above); a log still there would be lost by the rename.
    let mut wal = dest.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Err(Error::Storage(
            "the copy's write-ahead log was not folded into it; the vault is unchanged".into(),
        ));
    }
    for p in companion_files(dest) {
        let _ = std::fs::remove_file(&p);
    }
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        dest,
        rustix::fs::CWD,
        path,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .map_err(|e| Error::io("replacing", path, e.into()))
}
