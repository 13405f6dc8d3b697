//! The operation log of a workspace: every state change records the root before and after,
//! so `undo`, `redo` and `op restore` are themselves new operations that move the workspace
//! to an earlier state. Nothing is ever rewritten, so no undo loses work.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::id::ObjectId;
use super::merge::{MergeStrategy, merge_roots};
use super::side_effect::{is_merged_fork, side_effect};
use super::workspace::Workspace;
use crate::error::{Error, Result};
use crate::store::OpRecord;

pub const UNDO: &str = "undo";
pub const REDO: &str = "redo";

/// One op-log entry as reported.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct OpInfo {
    pub id: i64,
    /// Nanoseconds since the Unix epoch.
    pub at: i64,
    /// The operation: `write`, `rm`, `checkpoint.save`, `checkpoint.restore`, `import`,
    /// `merge`, `undo`, `redo`, `op.restore`, …
    pub kind: String,
    pub description: String,
    pub root_before: Option<String>,
    pub root_after: Option<String>,
    /// For undo/redo: the entry acted on.
    pub target: Option<i64>,
    /// True if a later undo reverted this entry (and no redo re-applied it).
    pub undone: bool,
}

fn info(op: &OpRecord, undone: &HashSet<i64>) -> OpInfo {
    OpInfo {
        id: op.id,
        at: op.at,
        kind: op.kind.clone(),
        description: op.description.clone(),
        root_before: op.root_before.map(|r| r.to_hex()),
        root_after: op.root_after.map(|r| r.to_hex()),
        target: op.target,
        undone: undone.contains(&op.id),
    }
}

/// Which entries are currently undone, given the log oldest first.
fn undone_set(ops: &[OpRecord]) -> HashSet<i64> {
    let by_id: HashMap<i64, &OpRecord> = ops.iter().map(|o| (o.id, o)).collect();
    let mut undone = HashSet::new();
    for op in ops {
        match (op.kind.as_str(), op.target) {
            (UNDO, Some(t)) => {
                undone.insert(t);
            }
            (REDO, Some(u)) => {
                undone.insert(u);
                if let Some(t) = by_id.get(&u).and_then(|o| o.target) {
                    undone.remove(&t);
                }
            }
            _ => {}
        }
    }
    undone
}

fn changed(op: &OpRecord) -> bool {
    op.root_before != op.root_after
}

impl Workspace {
    fn ops_oldest_first(&self) -> Result<Vec<OpRecord>> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            let mut ops = r.ops(Some(ws.id), usize::MAX >> 1)?;
            ops.reverse();
            Ok(ops)
        })
    }

    /// The op log, newest first.
    pub fn op_log(&self, limit: usize) -> Result<Vec<OpInfo>> {
        let ops = self.ops_oldest_first()?;
        let undone = undone_set(&ops);
        Ok(ops
            .iter()
            .rev()
            .take(limit)
            .map(|o| info(o, &undone))
            .collect())
    }

    /// Undo the most recent state change that is not already undone. The choice and the
    /// move are one transaction, so a change landing meanwhile is never undone in its
    /// place, and if the target is no longer the newest change only its own change is
    /// reverted (or a typed `revert_conflict` refuses).
    pub fn undo(&self) -> Result<OpInfo> {
        self.move_to(UNDO, |ops| {
            let undone = undone_set(ops);
            let target = ops
                .iter()
                .rev()
                .find(|o| o.kind != UNDO && o.kind != REDO && changed(o) && !undone.contains(&o.id))
                .ok_or(Error::NothingToUndo)?;
            Ok(Plan {
                goal: revert_of(target).ok_or(Error::NothingToUndo)?,
                target: Some(target.id),
                base_root: side_effect(target, "fork_root_before"),
                merge_op: Some(target.clone()),
                description: format!("undo #{} {}", target.id, target.kind),
            })
        })
    }

    /// Redo the most recent undo, if nothing else changed the workspace since.
    pub fn redo(&self) -> Result<OpInfo> {
        self.move_to(REDO, |ops| {
            let undone = undone_set(ops);
            let mut found = None;
            for op in ops.iter().rev() {
                match op.kind.as_str() {
                    UNDO if !undone.contains(&op.id) => {
                        found = Some(op);
                        break;
                    }
                    UNDO | REDO => continue,
                    _ if changed(op) => break,
                    _ => continue,
                }
            }
            let undo = found.ok_or(Error::NothingToRedo)?;
            let merge_op = undo
                .target
                .and_then(|t| ops.iter().find(|o| o.id == t))
                .cloned();
            let base_root = merge_op
                .as_ref()
                .and_then(|o| side_effect(o, "fork_root_after"));
            Ok(Plan {
                goal: revert_of(undo).ok_or(Error::NothingToRedo)?,
                target: Some(undo.id),
                base_root,
                merge_op,
                description: format!("redo #{} (undo #{})", undo.target.unwrap_or(0), undo.id),
            })
        })
    }

    /// Revert operation `id` (default: the latest operation of kind `kind` that changed
    /// something and is not already undone or rolled back), as a new `rollback`
    /// operation that can itself be undone. Changes made after it stay: when the
    /// operation is not the newest, only its own change is reverted, three-way, and a
    /// path changed again since is a typed `revert_conflict` with nothing applied. An
    /// operation that changed nothing, or whose change is already taken back, is a typed
    /// `nothing_to_roll_back`: a rollback never silently undoes nothing.
    pub fn rollback(&self, kind: &str, id: Option<i64>) -> Result<OpInfo> {
        self.move_to("rollback", |ops| {
            let undone = undone_set(ops);
            // Operations taken back by a rollback that is itself still in force.
            let rolled_back: HashMap<i64, i64> = ops
                .iter()
                .filter(|o| o.kind == "rollback" && !undone.contains(&o.id))
                .filter_map(|o| o.target.map(|t| (t, o.id)))
                .collect();
            let nothing = |reason: String| Error::NothingToRollBack { id, reason };
            let op = match id {
                Some(id) => {
                    let op = ops
                        .iter()
                        .find(|o| o.id == id && o.kind == kind)
                        .ok_or(Error::OperationNotFound { id })?;
                    if !changed(op) {
                        return Err(nothing(format!(
                            "#{id} changed nothing in the fork (see `avfs op log`)"
                        )));
                    }
                    if let Some(by) = rolled_back.get(&id) {
                        return Err(nothing(format!(
                            "#{id} was already rolled back by #{by} (`avfs undo` takes that back)"
                        )));
                    }
                    if undone.contains(&id) {
                        return Err(nothing(format!(
                            "#{id} is already undone (`avfs redo` brings it back)"
                        )));
                    }
                    op
                }
                None => ops
                    .iter()
                    .rev()
                    .find(|o| {
                        o.kind == kind
                            && changed(o)
                            && !undone.contains(&o.id)
                            && !rolled_back.contains_key(&o.id)
                    })
                    .ok_or_else(|| {
                        nothing(
                            "no proxied command in this fork's operation log changed anything \
                             that is not already rolled back or undone"
                                .into(),
                        )
                    })?,
            };
            Ok(Plan {
                goal: revert_of(op).ok_or(Error::OperationNotFound { id: op.id })?,
                target: Some(op.id),
                base_root: None,
                merge_op: None,
                description: format!("rollback #{} {}", op.id, op.description),
            })
        })
    }

    /// The id of the newest op-log entry.
    pub fn last_op_id(&self) -> Result<Option<i64>> {
        self.vault.store.read(|r| {
            let ws = self.record(r)?;
            Ok(r.ops(Some(ws.id), 1)?.first().map(|o| o.id))
        })
    }

    /// Return the workspace to the state right after entry `id`.
    pub fn op_restore(&self, id: i64) -> Result<OpInfo> {
        self.move_to("op.restore", |ops| {
            let op = ops
                .iter()
                .find(|o| o.id == id)
                .ok_or(Error::OperationNotFound { id })?;
            Ok(Plan {
                goal: Goal::State(op.root_after.ok_or(Error::OperationNotFound { id })?),
                target: None,
                base_root: None,
                merge_op: None,
                description: format!("restore to after #{id}"),
            })
        })
    }

    /// Choose the move from the op log and make it, in one transaction.
    fn move_to(
        &self,
        kind: &str,
        plan: impl FnOnce(&[OpRecord]) -> Result<Plan>,
    ) -> Result<OpInfo> {
        let (ops, target, description) = self.edit(kind, &[], |e| {
            let mut ops = e.w.ops(Some(e.ws.id), usize::MAX >> 1)?;
            ops.reverse();
            let plan = plan(&ops)?;
            let (target, description) = (plan.target, plan.description.clone());
            // A logged edit starts on the folded live state: the base is the live root.
            let current = e.ws.base;
            let root = match plan.goal {
                Goal::State(root) => root,
                Goal::Revert { from, to } if from == current => to,
                Goal::Revert { from, to } => {
                    let merged =
                        merge_roots(e.w, e.cache, [from, current, to], MergeStrategy::Fail, &[])?;
                    if !merged.conflicts.is_empty() {
                        return Err(Error::RevertConflict {
                            id: plan.target.unwrap_or(0),
                            conflicts: merged.conflicts,
                        });
                    }
                    merged.root
                }
            };
            e.reset_to_root(root)?;
            if let (Some((fork, base)), Some(op)) = (plan.base_root, &plan.merge_op) {
                // Only the fork that was merged: one deleted since is left alone, and so is
                // a new fork that got its id.
                let same =
                    e.w.workspaces()?
                        .iter()
                        .any(|w| w.id == fork && is_merged_fork(op, w));
                if same {
                    e.w.set_base_root(fork, &base)?;
                }
            }
            e.undo_target = plan.target;
            e.describe(plan.description);
            Ok((ops, target, description))
        })?;
        // The new entry: the newest one like it (another writer's may have come after it);
        // the entries read above tell which are undone.
        let mut ops = ops;
        let mine = self.vault.store.read(|r| {
            let ws = self.record(r)?;
            Ok(r.ops(Some(ws.id), 256)?
                .into_iter()
                .find(|o| o.kind == kind && o.target == target && o.description == description))
        })?;
        let mine = mine.ok_or_else(|| Error::Storage("op log entry missing after write".into()))?;
        ops.push(mine.clone());
        let undone = undone_set(&ops);
        Ok(info(&mine, &undone))
    }
}

/// Where a move back in history takes the workspace.
enum Goal {
    /// Take back the change from `from` to `to`'s reverse: the state `to` when nothing
    /// changed since `from`, else a three-way revert onto the live state.
    Revert { from: ObjectId, to: ObjectId },
    /// Exactly this state.
    State(ObjectId),
}

struct Plan {
    goal: Goal,
    target: Option<i64>,
    base_root: Option<(i64, ObjectId)>,
    /// The merge entry `base_root` comes from.
    merge_op: Option<OpRecord>,
    description: String,
}

/// The move that takes back `op`'s change.
fn revert_of(op: &OpRecord) -> Option<Goal> {
    Some(Goal::Revert {
        from: op.root_after?,
        to: op.root_before?,
    })
}

/// What `prune` removed.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct PruneReport {
    pub checkpoints_removed: Vec<String>,
    pub operations_removed: u64,
}

impl Workspace {
    /// Drop old checkpoints and op-log entries: all but the newest `keep_last`, and/or those
    /// older than `older_than` (ns since the epoch). The newest entry always stays: it is
    /// the workspace's head, which `--if-head` compares against, and an id the log still
    /// holds is never given out again (SQLite reuses the highest id once it is deleted).
    /// The live state is untouched; run `gc` afterwards to reclaim the objects only they
    /// referenced.
    pub fn prune(&self, keep_last: Option<usize>, older_than: Option<i64>) -> Result<PruneReport> {
        if keep_last.is_none() && older_than.is_none() {
            return Err(Error::invalid(
                "prune needs --keep-last N and/or --older-than DURATION",
            ));
        }
        self.edit_inner("prune", &[], super::workspace::Logging::AuditOnly, |e| {
            let doomed = |index_from_newest: usize, at: i64| {
                keep_last.is_some_and(|k| index_from_newest >= k)
                    || older_than.is_some_and(|t| at < t)
            };
            let mut report = PruneReport::default();
            let cps = e.w.checkpoints(e.ws.id)?;
            for (i, cp) in cps.iter().rev().enumerate() {
                if doomed(i, cp.created_at) {
                    e.w.delete_checkpoint(cp.id)?;
                    report.checkpoints_removed.push(cp.name.clone());
                }
            }
            let ops = e.w.ops(Some(e.ws.id), usize::MAX >> 1)?;
            for (i, op) in ops.iter().enumerate().skip(1) {
                if doomed(i, op.at) {
                    e.w.delete_op(op.id)?;
                    report.operations_removed += 1;
                }
            }
            Ok(report)
        })
    }
}
