//! `WorkspaceService`: turns what a user names (`--workspace NAME|PATH`, `AVFS_WORKSPACE`,
//! the current one) into an open workspace, and manages the registry of vaults and forks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::registry::{Registry, RegistryEntry, close_names};
use crate::error::{Error, Result};
use crate::model::merge::{MergeOptions, MergeReport};
use crate::model::{Actor, CheckReport, ForkInfo, Problem, Vault, VaultInfo, Workspace};
use crate::store::{Engine, Server, attach_store};

use crate::model::MAIN;

/// What a selector resolved to.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Target {
    /// The registered name, or the path as given.
    pub name: String,
    pub path: PathBuf,
    pub workspace: String,
}

/// One row of `vault list`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct VaultListEntry {
    pub name: String,
    pub path: PathBuf,
    pub workspace: String,
    pub current: bool,
    /// False if the vault file has gone missing.
    pub exists: bool,
}

/// What `vault delete` removed.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DeleteReport {
    pub name: String,
    /// True if the whole vault file was deleted; false if only a fork.
    pub file_deleted: bool,
    /// Registered names that went with it.
    pub unregistered: Vec<String>,
}

// `vault info` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct InfoOutput {
    pub name: String,
    #[serde(flatten)]
    pub info: VaultInfo,
}

// `checkpoint retention` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RetentionOutput {
    /// Automatic checkpoints each workspace of the vault keeps (the newest ones).
    pub keep_auto: u64,
    /// What `keep_auto` is when the vault does not set it.
    pub default_keep_auto: u64,
}

// `vault fork` data.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ForkOutput {
    pub target: Target,
    pub fork: ForkInfo,
}

#[derive(Clone)]
pub struct WorkspaceService {
    registry: Registry,
    actor: Actor,
    /// Make the changes of the workspaces `open` opens conditional (`Workspace::expect_head`).
    expected_head: Option<i64>,
}

pub(super) fn validate_vault_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['-', '.'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            name: name.to_string(),
            reason: "vault names are 1-100 letters, digits, `-`, `_` or `.`, not starting with `-` or `.`"
                .into(),
        })
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.ends_with(".avfs") || Path::new(s).is_file()
}

impl WorkspaceService {
    pub fn new(registry: Registry, actor: Actor) -> Self {
        WorkspaceService {
            registry,
            actor,
            expected_head: None,
        }
    }

    /// Make the changes of every workspace `open` opens conditional on its newest
    /// operation being `head` (`Workspace::expect_head`): a command's `--if-head`.
    pub fn with_expected_head(mut self, head: Option<i64>) -> Self {
        self.expected_head = head;
        self
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn actor(&self) -> &Actor {
        &self.actor
    }

    /// Resolve a selector (or the current vault when `None`).
    pub fn resolve(&self, selector: Option<&str>) -> Result<Target> {
        let data = self.registry.load()?;
        let name = match selector.filter(|s| !s.is_empty()) {
            Some(s) => s.to_string(),
            None => data.current.clone().ok_or(Error::NoVaultSelected)?,
        };
        if let Some(entry) = data.vaults.get(&name) {
            return Ok(Target {
                name,
                path: entry.path.clone(),
                workspace: entry.workspace.clone(),
            });
        }
        if looks_like_path(&name) {
            let path = PathBuf::from(&name);
            if !path.exists() {
                return Err(Error::VaultNotFound {
                    name,
                    suggestions: Vec::new(),
                });
            }
            return Ok(Target {
                name,
                path,
                workspace: MAIN.into(),
            });
        }
        // A fork another host made in a shared (PostgreSQL) vault is in the vault, not in
        // this host's registry: find it there.
        for entry in data.vaults.values() {
            if entry.workspace != MAIN || crate::store::engine_of(&entry.path) != Engine::Postgres {
                continue;
            }
            let Ok(vault) = Vault::open(&entry.path) else {
                continue;
            };
            if vault
                .forks()
                .is_ok_and(|f| f.iter().any(|f| f.name == name))
            {
                return Ok(Target {
                    workspace: name.clone(),
                    name,
                    path: entry.path.clone(),
                });
            }
        }
        Err(Error::VaultNotFound {
            suggestions: close_names(&name, data.vaults.keys()),
            name,
        })
    }

    /// Open the workspace a selector names.
    pub fn open(&self, selector: Option<&str>) -> Result<(Target, Workspace)> {
        let target = self.resolve(selector)?;
        let vault = self.open_vault(&target)?;
        let ws = vault.workspace(&target.workspace, self.actor.clone())?;
        if let Some(head) = self.expected_head {
            ws.expect_head(head);
        }
        Ok((target, ws))
    }

    /// Open the vault file of `target`. A registered vault whose file no longer reads as
    /// one is damaged (`corrupt_vault`), not a stranger's file (`not_a_vault`).
    pub(super) fn open_vault(&self, target: &Target) -> Result<Arc<Vault>> {
        Vault::open(&target.path).map_err(|e| match e {
            Error::VaultNotFound { .. } => Error::VaultNotFound {
                name: target.name.clone(),
                suggestions: Vec::new(),
            },
            Error::NotAVault { path, reason }
                if self
                    .registry
                    .load()
                    .is_ok_and(|d| d.vaults.contains_key(&target.name)) =>
            {
                Error::CorruptVault {
                    reason: format!(
                        "registered vault `{}` at {} does not read as a vault any more: {reason}",
                        target.name,
                        path.display()
                    ),
                }
            }
            other => other,
        })
    }

    /// Check a vault's integrity: SQLite's own check, every object against its id and
    /// references, every root. A vault that cannot even be opened is a report with that
    /// problem, not an error, so `vault check` always says what is damaged.
    /// `check`, with damage as the typed `corrupt_vault` error listing every problem
    /// (what `avfs vault check` answers); the report when the vault is sound.
    pub fn verify(&self, selector: Option<&str>) -> Result<CheckReport> {
        let report = self.check(selector)?;
        if !report.ok {
            let problems = report
                .problems
                .iter()
                .map(|p| format!("{}: {}", p.object.as_deref().unwrap_or("-"), p.problem))
                .collect();
            return Err(Error::VaultDamaged { problems });
        }
        Ok(report)
    }

    /// The audit log of the selected vault, newest first: at most `limit` records, since
    /// `since` (a duration ago like `10m`, or an RFC 3339 time; typed `invalid_argument`
    /// otherwise). One record per operation (a proxied command, a mount's commit), with
    /// its paths; `detail` adds every step (each file operation of a mount).
    pub fn audit(
        &self,
        selector: Option<&str>,
        limit: usize,
        since: Option<&str>,
        detail: bool,
    ) -> Result<Vec<crate::store::AuditRecord>> {
        let since = since
            .map(|s| crate::model::limits::parse_time_or_age("--since", s, crate::model::now_ns()))
            .transpose()?;
        let (_, ws) = self.open(selector)?;
        ws.vault().audit(limit, since, detail)
    }

    pub fn check(&self, selector: Option<&str>) -> Result<CheckReport> {
        let target = self.resolve(selector)?;
        let damaged = |reason: String| CheckReport {
            ok: false,
            objects_checked: 0,
            problems: vec![Problem {
                object: None,
                problem: reason,
            }],
        };
        let vault = match self.open_vault(&target) {
            Ok(v) => v,
            Err(Error::CorruptVault { reason }) | Err(Error::Storage(reason)) => {
                return Ok(damaged(reason));
            }
            Err(e) => return Err(e),
        };
        match vault.check() {
            Ok(report) => Ok(report),
            Err(Error::CorruptVault { reason }) | Err(Error::Storage(reason)) => {
                Ok(damaged(reason))
            }
            Err(e) => Err(e),
        }
    }

    /// Create and register a vault, kept in `engine`. The first vault created becomes the
    /// current one. A server engine (postgres) needs the server's URL: `url`, or else
    /// `$AVFS_POSTGRES_URL`; the file engines take none.
    pub fn create_vault(
        &self,
        name: &str,
        path: Option<&Path>,
        engine: Engine,
        url: Option<&str>,
        objects: Option<&str>,
    ) -> Result<Target> {
        validate_vault_name(name)?;
        let server = Server::for_engine(engine, url, objects, name)?;
        self.register_new(name, path, |path| {
            Vault::create_on(path, engine, server.as_ref()).map(|_| ())
        })
    }

    /// Register vault `name`, which another host created on the server at `url` (or
    /// `$AVFS_POSTGRES_URL`): this host gets a vault file pointing at it.
    pub fn attach_vault(
        &self,
        name: &str,
        path: Option<&Path>,
        url: Option<&str>,
    ) -> Result<Target> {
        validate_vault_name(name)?;
        let server = Server::new(url, name)?;
        self.register_new(name, path, |path| attach_store(path, &server).map(|_| ()))
    }

    /// Make the vault file (`make`) at `path` or the registry's place for `name`, and
    /// register it under `name`.
    fn register_new(
        &self,
        name: &str,
        path: Option<&Path>,
        make: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<Target> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => {
                self.registry.private_dir("vaults")?;
                self.registry.vault_file(name)
            }
        };
        self.registry.update(|data| {
            if data.vaults.contains_key(name) {
                return Err(Error::AlreadyExists {
                    name: name.to_string(),
                });
            }
            make(&path)?;
            let path = path
                .canonicalize()
                .map_err(|e| Error::io("resolving", &path, e))?;
            data.vaults.insert(
                name.to_string(),
                RegistryEntry {
                    path: path.clone(),
                    workspace: MAIN.into(),
                },
            );
            if data.current.is_none() {
                data.current = Some(name.to_string());
            }
            Ok(Target {
                name: name.to_string(),
                path,
                workspace: MAIN.into(),
            })
        })
    }

    pub fn list(&self) -> Result<Vec<VaultListEntry>> {
        let data = self.registry.load()?;
        Ok(data
            .vaults
            .iter()
            .map(|(name, e)| VaultListEntry {
                name: name.clone(),
                path: e.path.clone(),
                workspace: e.workspace.clone(),
                current: data.current.as_deref() == Some(name),
                exists: e.path.exists(),
            })
            .collect())
    }

    /// Make `name` the current vault.
    pub fn use_vault(&self, name: &str) -> Result<Target> {
        let target = self.resolve(Some(name))?;
        if !self.registry.load()?.vaults.contains_key(name) {
            return Err(Error::invalid(format!(
                "`{name}` is a path, not a registered name; register it with `avfs vault create`"
            )));
        }
        self.registry.update(|data| {
            data.current = Some(name.to_string());
            Ok(())
        })?;
        Ok(target)
    }

    pub fn info(&self, selector: Option<&str>) -> Result<(Target, VaultInfo)> {
        let (target, ws) = self.open(selector)?;
        let info = ws.vault().info(&target.workspace)?;
        Ok((target, info))
    }

    /// Delete a registered vault (its file and every name on it) or a fork.
    pub fn delete(&self, name: &str) -> Result<DeleteReport> {
        let target = self.resolve(Some(name))?;
        self.registry.update(|data| {
            let unregister = |data: &mut super::registry::RegistryData,
                              pred: &dyn Fn(&RegistryEntry) -> bool| {
                let names: Vec<String> = data
                    .vaults
                    .iter()
                    .filter(|(_, e)| pred(e))
                    .map(|(n, _)| n.clone())
                    .collect();
                for n in &names {
                    data.vaults.remove(n);
                    if data.current.as_deref() == Some(n) {
                        data.current = None;
                    }
                }
                names
            };
            if target.workspace == MAIN {
                // Not from under another host's long-lived writer: only a vault on a
                // server is shared by hosts (opening a local one here would race its own
                // removal: a sled vault's flusher writes into the directory going away).
                // A server that does not answer now refuses the delete (it could answer the
                // drop a moment later, unchecked); a vault already gone from it is held by
                // no one.
                if crate::store::engine_of(&target.path).is_server() {
                    match Vault::open(&target.path) {
                        Ok(vault) => vault.check_unleased("deleting the vault")?,
                        Err(e @ Error::StoreUnavailable { .. }) => return Err(e),
                        Err(_) => {}
                    }
                }
                crate::store::remove_vault_files(&target.path)?;
                let path = target.path.clone();
                let names = unregister(data, &|e| e.path == path);
                Ok(DeleteReport {
                    name: name.to_string(),
                    file_deleted: true,
                    unregistered: names,
                })
            } else {
                Vault::open(&target.path)?.delete_fork(&target.workspace)?;
                let (path, ws) = (target.path.clone(), target.workspace.clone());
                let names = unregister(data, &|e| e.path == path && e.workspace == ws);
                Ok(DeleteReport {
                    name: name.to_string(),
                    file_deleted: false,
                    unregistered: names,
                })
            }
        })
    }

    /// Fork `source` as `name` (at its live state or at checkpoint `at`) and register it.
    pub fn fork(
        &self,
        source: &str,
        name: &str,
        at: Option<&str>,
        make_current: bool,
    ) -> Result<(Target, ForkInfo)> {
        validate_vault_name(name)?;
        let (src, ws) = self.open(Some(source))?;
        self.registry.update(|data| {
            if data.vaults.contains_key(name) {
                return Err(Error::AlreadyExists {
                    name: name.to_string(),
                });
            }
            let info = ws.vault().fork(&ws, name, at)?;
            let path = src
                .path
                .canonicalize()
                .map_err(|e| Error::io("resolving", &src.path, e))?;
            data.vaults.insert(
                name.to_string(),
                RegistryEntry {
                    path: path.clone(),
                    workspace: name.to_string(),
                },
            );
            if make_current {
                data.current = Some(name.to_string());
            }
            Ok((
                Target {
                    name: name.to_string(),
                    path,
                    workspace: name.to_string(),
                },
                info,
            ))
        })
    }

    /// Open fork `fork`, making it from `fork_from` first if it does not exist yet (so the
    /// first command that names it makes the fork, and later ones reuse it).
    pub fn open_fork(&self, fork: &str, fork_from: Option<&str>) -> Result<(Target, Workspace)> {
        if let Some(from) = fork_from
            && self.resolve(Some(fork)).is_err()
        {
            self.fork(from, fork, None, false)?;
        }
        self.open(Some(fork))
    }

    /// Merge fork `fork` three-way into `into`, or into its parent when `into` is `None`.
    /// `into` names a registered vault or fork, or a workspace in the fork's own vault; a
    /// fork never merges into another vault file.
    pub fn merge(&self, fork: &str, into: Option<&str>, opts: MergeOptions) -> Result<MergeReport> {
        let (src, fork_ws) = self.open(Some(fork))?;
        let into = match into {
            Some(i) => i.to_string(),
            None => fork_ws
                .vault()
                .forks()?
                .into_iter()
                .find(|f| f.name == src.workspace)
                .and_then(|f| f.parent)
                .ok_or_else(|| Error::invalid(format!("`{fork}` has no parent: pass --into")))?,
        };
        let target = match self.open(Some(&into)) {
            Ok((t, w)) if t.path == src.path => w,
            Ok(_) => {
                return Err(Error::invalid(
                    "a fork can only be merged within its own vault",
                ));
            }
            Err(_) => fork_ws.vault().workspace(&into, self.actor.clone())?,
        };
        fork_ws.vault().merge(&src.workspace, &target, opts)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::WriteOptions;
    use crate::model::merge::MergeOptions;
    use crate::service::{files, testing};

    #[test]
    fn verify_reports_damage_as_an_error_and_audit_reads_any_since() {
        let h = testing::home();
        let opts = WriteOptions::default();
        files::write(&h.ws, "/a", b"1", opts).unwrap();
        assert!(h.service.verify(Some("demo")).unwrap().ok);
        let all = h.service.audit(Some("demo"), 50, None, true).unwrap();
        assert!(!all.is_empty());
        let before_1970 = h
            .service
            .audit(Some("demo"), 50, Some("1969-12-31T23:59:59Z"), true);
        assert_eq!(before_1970.unwrap().len(), all.len());
        let bad = h
            .service
            .audit(Some("demo"), 50, Some("soon"), true)
            .unwrap_err();
        assert_eq!(bad.kind(), "invalid_argument");
        // A chunk whose bytes no longer match its id: a typed error naming it.
        let file = h.dir.path().join("home/vaults/demo.avfs");
        drop(h.ws);
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute(
            "UPDATE objects SET data = CAST('x' AS BLOB), size = 1 WHERE kind = 1",
            [],
        )
        .unwrap();
        drop(conn);
        let err = h.service.verify(Some("demo")).unwrap_err();
        assert_eq!(err.kind(), "corrupt_vault", "{err}");
        assert!(!h.service.check(Some("demo")).unwrap().ok);
    }

    #[test]
    fn a_fork_is_made_on_first_use_and_reused_after() {
        let h = testing::home();
        let opts = WriteOptions::default();
        files::write(&h.ws, "/a", b"1", opts).unwrap();
        assert_eq!(
            h.service.open_fork("t1", None).err().map(|e| e.kind()),
            Some("vault_not_found")
        );
        let (t, ws) = h.service.open_fork("t1", Some("demo")).unwrap();
        assert_eq!(t.workspace, "t1");
        files::write(&ws, "/b", b"2", opts).unwrap();
        // The second call must not fork again (that would fail: the name exists).
        let (_, again) = h.service.open_fork("t1", Some("demo")).unwrap();
        assert!(files::stat(&again, "/b", None).is_ok());
    }

    #[test]
    fn merge_defaults_to_the_parent_and_refuses_a_fork_without_one() {
        let h = testing::home();
        let opts = WriteOptions::default();
        h.service.fork("demo", "f1", None, false).unwrap();
        let (_, f1) = h.service.open(Some("f1")).unwrap();
        files::write(&f1, "/new.txt", b"hi", opts).unwrap();
        let dry = h
            .service
            .merge(
                "f1",
                None,
                MergeOptions {
                    dry_run: true,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(!dry.applied);
        assert!(
            files::stat(&h.ws, "/new.txt", None).is_err(),
            "a dry run changes nothing"
        );
        let report = h
            .service
            .merge("f1", None, MergeOptions::default())
            .unwrap();
        assert_eq!(report.into, "main");
        assert!(files::stat(&h.ws, "/new.txt", None).is_ok());
        let err = h
            .service
            .merge("demo", None, MergeOptions::default())
            .unwrap_err();
        assert_eq!(err.kind(), "invalid_argument");
    }
}
