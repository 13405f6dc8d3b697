//! Checkpoints: saving, restoring, deleting and listing a workspace's named states.

use crate::error::{Error, Result};
use crate::model::id::ObjectId;
use crate::model::node::NodeKind;
use crate::model::workspace::validate_name;
use crate::model::{Edit, Workspace};
use crate::store::CheckpointRecord;

impl Workspace {
    /// Save a checkpoint of the live state: fold the overlay into immutable objects (cost in
    /// proportion to the changes since the last checkpoint) and start an empty overlay.
    pub fn checkpoint_save(
        &self,
        name: Option<&str>,
        message: Option<&str>,
    ) -> Result<CheckpointRecord> {
        if let Some(n) = name {
            validate_name(n, "checkpoint")?;
        }
        self.edit("checkpoint.save", &[], |e| {
            let name = match name {
                Some(n) => {
                    if e.w.checkpoint(e.ws.id, n)?.is_some() {
                        return Err(Error::AlreadyExists {
                            name: n.to_string(),
                        });
                    }
                    n.to_string()
                }
                None => e.next_checkpoint_name()?,
            };
            let root = e.fold()?;
            let mut rec = CheckpointRecord {
                id: 0,
                workspace: e.ws.id,
                name,
                root,
                message: message.map(str::to_string),
                created_at: e.now,
                files: e.ws.files,
                bytes: e.ws.bytes,
            };
            rec.id = e.w.insert_checkpoint(&rec)?;
            e.describe(format!("save {}", rec.name));
            Ok(rec)
        })
    }

    /// Point the workspace at a checkpoint and drop the overlay, atomically.
    pub fn checkpoint_restore(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit("checkpoint.restore", &[], |e| {
            let cp =
                e.w.checkpoint(e.ws.id, name)?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        name: name.to_string(),
                    })?;
            e.reset_to(cp.root, cp.files, cp.bytes)?;
            e.describe(format!("restore {}", cp.name));
            Ok(cp)
        })
    }

    pub fn checkpoint_delete(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit("checkpoint.delete", &[], |e| {
            let cp =
                e.w.checkpoint(e.ws.id, name)?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        name: name.to_string(),
                    })?;
            e.w.delete_checkpoint(cp.id)?;
            Ok(cp)
        })
    }

    pub fn checkpoints(&self) -> Result<Vec<CheckpointRecord>> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            r.checkpoints(ws.id)
        })
    }

    pub fn checkpoint(&self, name: &str) -> Result<CheckpointRecord> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            r.checkpoint(ws.id, name)?
                .ok_or_else(|| Error::CheckpointNotFound {
                    name: name.to_string(),
                })
        })
    }
}

impl<'a> Edit<'a> {
    /// Make the live state exactly `root` (with its totals), dropping pending changes.
    pub(crate) fn reset_to(&mut self, root: ObjectId, files: u64, bytes: u64) -> Result<()> {
        self.w.overlay_clear(self.ws.id)?;
        self.ws.base = root;
        self.ws.files = files;
        self.ws.bytes = bytes;
        Ok(())
    }

    fn next_checkpoint_name(&self) -> Result<String> {
        let n = self.w.checkpoints(self.ws.id)?.len() + 1;
        (n..)
            .map(|i| format!("cp-{i}"))
            .find_map(|name| match self.w.checkpoint(self.ws.id, &name) {
                Ok(None) => Some(Ok(name)),
                Ok(Some(_)) => None,
                Err(e) => Some(Err(e)),
            })
            .unwrap_or_else(|| Err(Error::Storage("no free checkpoint name".into())))
    }

    /// Make the live state exactly `root`, dropping pending changes.
    pub(crate) fn reset_to_root(&mut self, root: ObjectId) -> Result<()> {
        let (files, bytes) = match self.cache.root(&*self.w, &root)?.kind {
            NodeKind::Dir { files, bytes, .. } => (files, bytes),
            _ => (0, 0),
        };
        self.reset_to(root, files, bytes)
    }
}
