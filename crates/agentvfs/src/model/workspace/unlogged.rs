//! Changes a batch writer (a mount, an import) commits outside the op log, until it records
//! them as one operation. A marker in the vault says since which root and under which label;
//! every logged change settles the pending batch first, as an operation of its own. So an
//! undo never folds someone else's batch into its target, and a batch whose writer was
//! killed still lands in history the next time anything is logged.

use serde::{Deserialize, Serialize};

use super::{AuditSummary, Edit, Logging, Workspace};
use crate::error::{Error, Result};
use crate::model::diff::diff_views;
use crate::model::id::ObjectId;
use crate::store::OpRecord;

/// What is pending for one workspace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Unlogged {
    /// The root the pending changes started from (hex).
    since: String,
    kind: String,
    description: String,
}

pub(super) fn key(ws: i64) -> String {
    format!("unlogged.{ws}")
}

/// What is wrong with workspace `ws`'s marker, if anything (for `vault check`).
pub(crate) fn marker_problem(r: &dyn crate::store::StoreRead, ws: i64) -> Result<Option<String>> {
    let Some(text) = r.setting(&key(ws))? else {
        return Ok(None);
    };
    Ok(match serde_json::from_str::<Unlogged>(&text) {
        Err(e) => Some(format!("pending-changes marker is unreadable: {e}")),
        Ok(m) => match ObjectId::from_hex(&m.since) {
            None => Some("pending-changes marker names no root".into()),
            Some(root) if !r.has_object(&root)? => Some(format!(
                "pending-changes marker names missing root {}",
                root.short()
            )),
            Some(_) => None,
        },
    })
}

impl Edit<'_> {
    fn unlogged(&self) -> Result<Option<(Unlogged, ObjectId)>> {
        let Some(text) = self.w.setting(&key(self.ws.id))? else {
            return Ok(None);
        };
        let m: Unlogged = serde_json::from_str(&text).map_err(|e| Error::CorruptVault {
            reason: format!("pending-changes marker of workspace {}: {e}", self.ws.id),
        })?;
        let since = ObjectId::from_hex(&m.since).ok_or_else(|| Error::CorruptVault {
            reason: format!(
                "pending-changes marker of workspace {} names no root",
                self.ws.id
            ),
        })?;
        Ok(Some((m, since)))
    }

    fn save_unlogged(&mut self, m: Option<&Unlogged>) -> Result<()> {
        let text = m
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| Error::Storage(e.to_string()))?;
        self.w.set_setting(&key(self.ws.id), text.as_deref())
    }

    fn append_batch_op(
        &mut self,
        kind: &str,
        description: &str,
        from: ObjectId,
        to: ObjectId,
    ) -> Result<i64> {
        let changes = diff_views(&self.view_at(from), &self.view_at(to))?;
        let id = self.w.append_op(&OpRecord {
            id: 0,
            workspace: self.ws.id,
            at: self.now,
            kind: kind.to_string(),
            description: description.to_string(),
            root_before: Some(from),
            root_after: Some(to),
            target: None,
            extra: None,
        })?;
        self.newest_op = Some(id);
        // The batch's one audit record, with the paths it changed: its steps (each file
        // operation of a mount) are only in `avfs audit --detail`.
        self.summaries.push(AuditSummary {
            operation: kind.to_string(),
            paths: changes
                .iter()
                .take(AuditSummary::MAX_PATHS)
                .map(|c| c.path.clone())
                .collect(),
            detail: serde_json::json!({
                "operation": id,
                "description": description,
                "changes": changes.len(),
            })
            .to_string(),
        });
        Ok(id)
    }

    /// Before a logged change at live root `root`: record the pending batch (if it changed
    /// anything) as its own operation. Returns whether a batch is open, so the caller moves
    /// its start past the change it is about to log (`advance_unlogged`).
    pub(crate) fn settle_unlogged(&mut self, root: ObjectId) -> Result<bool> {
        let Some((m, since)) = self.unlogged()? else {
            return Ok(false);
        };
        if since != root {
            self.append_batch_op(&m.kind, &m.description, since, root)?;
            self.save_unlogged(Some(&Unlogged {
                since: root.to_hex(),
                ..m
            }))?;
        }
        Ok(true)
    }

    /// After a logged change that ended at `root`: the open batch continues from there.
    pub(crate) fn advance_unlogged(&mut self, root: ObjectId) -> Result<()> {
        if let Some((m, since)) = self.unlogged()?
            && since != root
        {
            self.save_unlogged(Some(&Unlogged {
                since: root.to_hex(),
                ..m
            }))?;
        }
        Ok(())
    }

    /// Fold the overlay into the base and return the live root.
    fn rebase(&mut self) -> Result<ObjectId> {
        let root = self.fold()?;
        if root != self.ws.base {
            self.w.overlay_clear(self.ws.id)?;
            self.ws.base = root;
        }
        Ok(root)
    }
}

/// Whether `Workspace::record_batch` records an entry when the batch changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEnd {
    /// Always (a session's command, a mount's end: each has its own entry).
    Always,
    /// Only if something changed, under the batch's own label (a session that ends).
    IfChanged,
}

impl Workspace {
    /// After a conditional change failed with `head_moved`: record what a long-lived
    /// writer (a mount, a session) wrote and has not recorded, in a transaction of its own,
    /// so the head the error names is one `op_log` shows and stays recorded. The entry is
    /// that writer's change, not this handle's: the expectation does not move to it. A
    /// failure to record leaves `failed` as it was.
    pub(crate) fn record_unrecorded_after<T>(&self, failed: Result<T>) -> Result<T> {
        let recorded = self.edit_inner("batch.settle", &[], Logging::None, |e| {
            let root = e.rebase()?;
            e.settle_unlogged(root)?;
            e.newest_op = None;
            Ok(())
        });
        match (failed, recorded) {
            (
                Err(Error::HeadMoved {
                    workspace,
                    expected,
                    ..
                }),
                Ok(()),
            ) => {
                let head = self.op_log(1)?.first().map_or(0, |o| o.id);
                Err(Error::HeadMoved {
                    workspace,
                    expected,
                    head,
                })
            }
            (failed, _) => failed,
        }
    }

    /// Start collecting batch changes under this label. Changes pending from an earlier
    /// batch (a writer that was killed) are recorded first, under their own label.
    pub fn begin_batch(&self, kind: &str, description: &str) -> Result<()> {
        self.edit_inner(kind, &[], Logging::None, |e| {
            let root = e.rebase()?;
            e.settle_unlogged(root)?;
            e.save_unlogged(Some(&Unlogged {
                since: root.to_hex(),
                kind: kind.to_string(),
                description: description.to_string(),
            }))
        })
    }

    /// Record what the batch changed since it began (or since its last record) as one
    /// op-log entry of this kind, and return the entry's id (`None` when nothing was
    /// recorded). Without an open batch, the entry starts from the live state.
    pub fn record_batch(
        &self,
        kind: &str,
        description: &str,
        end: BatchEnd,
    ) -> Result<Option<i64>> {
        self.edit_inner(kind, &[], Logging::AuditOnly, |e| {
            let root = e.rebase()?;
            let open = e.unlogged()?;
            let since = open.as_ref().map_or(root, |(_, since)| *since);
            let id = match (end, &open) {
                (BatchEnd::IfChanged, _) if since == root => None,
                (BatchEnd::IfChanged, Some((m, _))) => {
                    Some(e.append_batch_op(&m.kind.clone(), &m.description.clone(), since, root)?)
                }
                _ => Some(e.append_batch_op(kind, description, since, root)?),
            };
            // The marker stays, starting here: another writer of the same kind (a second
            // mount of this fork) may still be writing, and its changes must not fall out
            // of history. With nobody writing, it records nothing.
            let (kind, description) = open
                .map(|(m, _)| (m.kind, m.description))
                .unwrap_or_else(|| (kind.to_string(), description.to_string()));
            e.save_unlogged(Some(&Unlogged {
                since: root.to_hex(),
                kind,
                description,
            }))?;
            Ok(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::model::path::VPath;
    use crate::model::{Actor, Vault, WriteOptions};

    fn actor() -> Actor {
        Actor {
            actor: "test".into(),
            source: "sdk".into(),
        }
    }

    /// Changes a mount made and has not recorded are recorded before a conditional change
    /// compares the head: the head it reports is the newest entry of `op_log`, and a
    /// change conditional on that head applies.
    #[test]
    fn a_conditional_change_compares_a_head_the_op_log_shows() {
        let dir = tempfile::tempdir().unwrap();
        let vault = Vault::create(&dir.path().join("v.avfs")).unwrap();
        let write = |ws: &crate::model::Workspace, name: &str| {
            let p = VPath::parse(name).unwrap();
            ws.edit("test.write", &[&p], |e| {
                e.write_file(&p, b"x", WriteOptions::default())
            })
        };
        let main = vault.workspace("main", actor()).unwrap();
        write(&main, "a.txt").unwrap();
        let read = main.op_log(1).unwrap()[0].id;
        // A mount's buffered write: no op-log entry yet.
        let mount = vault.workspace("main", actor()).unwrap();
        mount.begin_batch("mount", "a mount").unwrap();
        let b = VPath::parse("b.txt").unwrap();
        mount
            .edit_batch("mount.write", &[&b], |e| {
                e.write_file(&b, b"m", WriteOptions::default())
            })
            .unwrap();
        assert_eq!(main.op_log(1).unwrap()[0].id, read);

        let agent = vault.workspace("main", actor()).unwrap();
        agent.expect_head(read);
        let head = match write(&agent, "c.txt") {
            Err(Error::HeadMoved { expected, head, .. }) => {
                assert_eq!(expected, read);
                head
            }
            other => panic!("expected head_moved, got {other:?}"),
        };
        let newest = &main.op_log(1).unwrap()[0];
        assert_eq!((newest.id, newest.kind.as_str()), (head, "mount"));
        let c = VPath::parse("c.txt").unwrap();
        assert!(main.read(|v| v.lookup(&c)).unwrap().is_none());
        // Its expectation did not move to the mount's entry: still stale.
        assert!(matches!(
            write(&agent, "c.txt"),
            Err(Error::HeadMoved { .. })
        ));
        // On the head it was told, it applies.
        let agent = vault.workspace("main", actor()).unwrap();
        agent.expect_head(head);
        write(&agent, "c.txt").unwrap();
    }
}
