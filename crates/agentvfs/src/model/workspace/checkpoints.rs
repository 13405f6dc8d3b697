//! Checkpoints: saving, restoring, deleting and listing a workspace's named states, and
//! the retention of the automatic ones the proxy takes before each command: the newest
//! `keep` stay (a vault setting, [`DEFAULT_KEEP_AUTO`] unless set), named ones always, and
//! any a fork was made at. Undo and rollback do not need them (the op log keeps the
//! states); asking for a pruned one says so and names the operation that still has it.

use crate::error::{Error, Result};
use crate::model::id::ObjectId;
use crate::model::node::NodeKind;
use crate::model::retention::{KEEP_AUTO_KEY, keep_auto, missing};
use crate::model::workspace::{Ahead, validate_name};
use crate::model::{Edit, Workspace};
use crate::store::CheckpointRecord;

/// The settings key prefix of each workspace's next `cp-N` number (names are never reused,
/// so a pruned one is never confused with a newer one).
const NEXT_CP_PREFIX: &str = "checkpoints.next:";

impl Workspace {
    /// Save a checkpoint of the live state: fold the overlay into immutable objects (cost in
    /// proportion to the changes since the last checkpoint) and start an empty overlay.
    pub fn checkpoint_save(
        &self,
        name: Option<&str>,
        message: Option<&str>,
    ) -> Result<CheckpointRecord> {
        self.save_checkpoint(name, message, false)
            .map(|(rec, _)| rec)
    }

    /// Save an automatic checkpoint (the proxy's, before a command), then prune this
    /// workspace's automatic checkpoints down to the vault's `keep_auto`, in the same
    /// transaction. Returns it and the names pruned.
    pub fn checkpoint_save_auto(&self, message: &str) -> Result<(CheckpointRecord, Vec<String>)> {
        self.save_checkpoint(None, Some(message), true)
    }

    /// How many automatic checkpoints each workspace of the vault keeps.
    pub fn keep_auto(&self) -> Result<u64> {
        self.vault.store.read(keep_auto)
    }

    /// Set how many automatic checkpoints each workspace of the vault keeps (at least 1:
    /// the one taken before the command running now). Each workspace is brought down to
    /// it at its next automatic checkpoint.
    pub fn set_keep_auto(&self, keep: u64) -> Result<()> {
        if keep == 0 {
            return Err(Error::OutOfRange {
                option: "--keep-auto".into(),
                value: "0".into(),
                limit: "at least 1: the checkpoint taken before the running command".into(),
            });
        }
        self.vault
            .set_setting(KEEP_AUTO_KEY, Some(&keep.to_string()))
    }

    fn save_checkpoint(
        &self,
        name: Option<&str>,
        message: Option<&str>,
        auto: bool,
    ) -> Result<(CheckpointRecord, Vec<String>)> {
        if let Some(n) = name {
            validate_name(n, "checkpoint")?;
        }
        let ahead: Vec<Ahead<'_>> = name.map(Ahead::Checkpoint).into_iter().collect();
        self.edit_ahead("checkpoint.save", &[], &ahead, |e| {
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
                auto,
            };
            rec.id = e.w.insert_checkpoint(&rec)?;
            e.describe(format!("save {}", rec.name));
            let pruned = if auto { e.prune_auto()? } else { Vec::new() };
            if !pruned.is_empty() {
                e.op_extra = Some(serde_json::json!({ "pruned": pruned }).to_string());
            }
            Ok((rec, pruned))
        })
    }

    /// Point the workspace at a checkpoint and drop the overlay, atomically.
    pub fn checkpoint_restore(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit_ahead("checkpoint.restore", &[], &[Ahead::Checkpoint(name)], |e| {
            let cp = match e.w.checkpoint(e.ws.id, name)? {
                Some(cp) => cp,
                None => return Err(missing(&*e.w, e.ws.id, name)),
            };
            e.reset_to(cp.root, cp.files, cp.bytes)?;
            e.describe(format!("restore {}", cp.name));
            Ok(cp)
        })
    }

    pub fn checkpoint_delete(&self, name: &str) -> Result<CheckpointRecord> {
        self.edit("checkpoint.delete", &[], |e| {
            let cp = match e.w.checkpoint(e.ws.id, name)? {
                Some(cp) => cp,
                None => return Err(missing(&*e.w, e.ws.id, name)),
            };
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
            match r.checkpoint(ws.id, name)? {
                Some(cp) => Ok(cp),
                None => Err(missing(r, ws.id, name)),
            }
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

    /// The next `cp-N`: above every `cp-N` there is and every one handed out before.
    fn next_checkpoint_name(&mut self) -> Result<String> {
        let key = format!("{NEXT_CP_PREFIX}{}", self.ws.name);
        let counted: u64 = self
            .w
            .setting(&key)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let existing = self
            .w
            .checkpoints(self.ws.id)?
            .iter()
            .filter_map(|c| c.name.strip_prefix("cp-")?.parse::<u64>().ok())
            .max()
            .map_or(1, |n| n.saturating_add(1));
        let n = counted.max(existing);
        self.w
            .set_setting(&key, Some(&n.saturating_add(1).to_string()))?;
        Ok(format!("cp-{n}"))
    }

    /// Delete this workspace's automatic checkpoints beyond the newest `keep_auto`, except
    /// one a fork was made at. Returns the names deleted.
    fn prune_auto(&mut self) -> Result<Vec<String>> {
        let keep = keep_auto(&*self.w)?;
        let autos: Vec<CheckpointRecord> = self
            .w
            .checkpoints(self.ws.id)?
            .into_iter()
            .filter(|c| c.auto)
            .collect();
        let excess = (autos.len() as u64).saturating_sub(keep) as usize;
        if excess == 0 {
            return Ok(Vec::new());
        }
        let forked_at: std::collections::HashSet<String> = self
            .w
            .workspaces()?
            .into_iter()
            .filter(|w| w.parent.as_deref() == Some(self.ws.name.as_str()))
            .filter_map(|w| w.fork_checkpoint)
            .collect();
        let mut pruned = Vec::new();
        for cp in autos.into_iter().take(excess) {
            if forked_at.contains(&cp.name) {
                continue;
            }
            self.w.delete_checkpoint(cp.id)?;
            pruned.push(cp.name);
        }
        Ok(pruned)
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
