//! Retention of the automatic checkpoints the proxy takes: how many a workspace keeps, and
//! why one asked for is missing (pruned, with the operation that still has its state).
//! Pruning itself is `Workspace::checkpoint_save_auto`.

use crate::error::Error;
use crate::error::Result;
use crate::store::StoreRead;

/// Automatic checkpoints kept per workspace unless the vault says otherwise.
pub const DEFAULT_KEEP_AUTO: u64 = 20;
/// The vault setting holding the number of automatic checkpoints kept per workspace.
pub(crate) const KEEP_AUTO_KEY: &str = "checkpoints.keep_auto";

/// The vault's `keep_auto`.
pub(crate) fn keep_auto(r: &dyn StoreRead) -> Result<u64> {
    Ok(r.setting(KEEP_AUTO_KEY)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KEEP_AUTO))
}

/// Why checkpoint `name` of workspace `ws` is not there: pruned by retention, with the
/// operation whose state it was if the op log still has it; else (never there, or deleted
/// by someone) not found.
pub(crate) fn missing(r: &dyn StoreRead, ws: i64, name: &str) -> Error {
    let Ok(ops) = r.ops(Some(ws), usize::MAX >> 1) else {
        return Error::CheckpointNotFound {
            name: name.to_string(),
        };
    };
    let saved = ops
        .iter()
        .find(|o| o.kind == "checkpoint.save" && o.description == format!("save {name}"));
    let pruned = ops.iter().any(|o| {
        o.extra
            .as_deref()
            .and_then(|x| serde_json::from_str::<serde_json::Value>(x).ok())
            .is_some_and(|x| {
                x["pruned"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|n| n == name))
            })
    });
    if !pruned {
        return Error::CheckpointNotFound {
            name: name.to_string(),
        };
    }
    Error::CheckpointGone {
        name: name.to_string(),
        keep: keep_auto(r).unwrap_or(DEFAULT_KEEP_AUTO),
        operation: saved.map(|o| o.id),
    }
}
