//! What a merge does outside the workspace it changes: it moves the merged fork's base. The
//! op-log entry keeps the fork's id and its base before and after (as JSON in `extra`), so
//! undo and redo can put it back and gc keeps both states.

use crate::store::{ObjectId, OpRecord, WorkspaceRecord};

/// The fork and the base state named `key` (`fork_root_before`, `fork_root_after`) of a
/// merge's op-log entry.
pub(super) fn side_effect(op: &OpRecord, key: &str) -> Option<(i64, ObjectId)> {
    let extra: serde_json::Value = serde_json::from_str(op.extra.as_deref()?).ok()?;
    let fork = extra.get("fork")?.as_i64()?;
    let bytes = hex::decode(extra.get(key)?.as_str()?).ok()?;
    ObjectId::from_slice(&bytes).map(|id| (fork, id))
}

/// Whether workspace `ws` is the fork a merge's op-log entry moved: the same id, and (in
/// entries that record them) the same name and creation time, since a fork deleted and made
/// again may get the old one's id back.
pub(super) fn is_merged_fork(op: &OpRecord, ws: &WorkspaceRecord) -> bool {
    let Some(extra) = op
        .extra
        .as_deref()
        .and_then(|e| serde_json::from_str::<serde_json::Value>(e).ok())
    else {
        return false;
    };
    extra.get("fork").and_then(|v| v.as_i64()) == Some(ws.id)
        && extra
            .get("fork_name")
            .and_then(|v| v.as_str())
            .is_none_or(|n| n == ws.name)
        && extra
            .get("fork_created_at")
            .and_then(|v| v.as_i64())
            .is_none_or(|c| c == ws.created_at)
}

/// The fork states a merge op's undo and redo put back (kept by gc while the op is).
pub(super) fn side_effect_roots(op: &OpRecord) -> impl Iterator<Item = ObjectId> + '_ {
    ["fork_root_before", "fork_root_after"]
        .into_iter()
        .filter_map(|k| side_effect(op, k).map(|(_, id)| id))
}
