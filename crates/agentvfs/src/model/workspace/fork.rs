//! Opening a vault's workspaces and forking one: the `Vault` methods that make a
//! `Workspace`, kept here above both so the vault never names the workspace that holds it.

use std::sync::Arc;

use super::{Actor, Ahead, Edit, Workspace, validate_name};
use crate::error::{Error, Result};
use crate::model::vault::{ForkInfo, MAIN, Vault, fork_info, fork_key};
use crate::store::WorkspaceRecord;

impl Vault {
    /// Open a workspace by name (`main` or a fork).
    pub fn workspace(self: &Arc<Self>, name: &str, actor: Actor) -> Result<Workspace> {
        let rec = self.store.read(|r| {
            r.workspace(name)?.ok_or_else(|| Error::ForkNotFound {
                name: name.to_string(),
            })
        })?;
        let ws = Workspace::new(self.clone(), name.to_string(), actor);
        ws.note_id(rec.id);
        Ok(ws)
    }

    /// Create fork `name` of workspace `source`, at its live state or at checkpoint `at`.
    /// No content or per-file rows are copied: the fork's base is a root id.
    pub fn fork(
        self: &Arc<Self>,
        source: &Workspace,
        name: &str,
        at: Option<&str>,
    ) -> Result<ForkInfo> {
        validate_name(name, "fork")?;
        let ahead = [Ahead::Workspace(name)];
        source.edit_ahead("vault.fork", &[], &ahead, |e: &mut Edit<'_>| {
            if e.w.workspace(name)?.is_some() {
                return Err(Error::AlreadyExists {
                    name: name.to_string(),
                });
            }
            let (root, files, bytes) = match at {
                Some(cp) => {
                    let cp =
                        e.w.checkpoint(e.ws.id, cp)?
                            .ok_or_else(|| Error::CheckpointNotFound {
                                name: cp.to_string(),
                            })?;
                    (cp.root, cp.files, cp.bytes)
                }
                None => (e.fold()?, e.ws.files, e.ws.bytes),
            };
            let rec = WorkspaceRecord {
                id: 0,
                name: name.to_string(),
                base: root,
                parent: Some(e.ws.name.clone()),
                base_root: Some(root),
                fork_checkpoint: at.map(str::to_string),
                created_at: e.now,
                files,
                bytes,
            };
            let id = e.w.insert_workspace(&rec)?;
            e.describe(format!("fork {} as {name}", e.ws.name));
            Ok(fork_info(&WorkspaceRecord { id, ..rec }))
        })
    }

    /// Delete a fork (never `main`: delete the vault for that). Its objects stay until gc.
    pub fn delete_fork(&self, name: &str) -> Result<()> {
        if name == MAIN {
            return Err(Error::invalid(
                "the main workspace is deleted with its vault",
            ));
        }
        self.store.write(|w| {
            let ws = w.workspace(name)?.ok_or_else(|| Error::ForkNotFound {
                name: name.to_string(),
            })?;
            // Not under another host's long-lived writer.
            super::lease::check_delete(w, name)?;
            w.set_setting(
                &format!("{}{name}", crate::model::origin::ORIGIN_PREFIX),
                None,
            )?;
            for (key, _) in w.settings_with_prefix(&fork_key(name, ""))? {
                w.set_setting(&key, None)?;
            }
            w.delete_workspace(ws.id)
        })
    }
}
