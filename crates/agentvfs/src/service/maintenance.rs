//! Keeping a vault small: `prune` drops old checkpoints and operations and then reclaims
//! what they held (gc, then compact), so one call leaves the file as small as it can be.

use std::time::Duration;

use serde::Serialize;

use crate::error::Result;
use crate::model::{GcReport, PruneReport, Vault, Workspace, limits, now_ns};

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PruneOutput {
    pub pruned: PruneReport,
    pub gc: GcReport,
    pub disk_bytes_before: u64,
    pub disk_bytes_after: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CompactOutput {
    pub bytes_reclaimed: u64,
}

/// Keep only the newest `keep_last` checkpoints and operations and drop those older than
/// `older_than`; then delete the objects nothing references and give the space back.
pub fn prune(
    ws: &Workspace,
    keep_last: Option<usize>,
    older_than: Option<Duration>,
) -> Result<PruneOutput> {
    let cutoff = older_than.map(|d| limits::before_now(now_ns(), d));
    let vault = ws.vault().clone();
    let before = vault.stats()?.disk_bytes;
    let pruned = ws.prune(keep_last, cutoff)?;
    let gc = vault.gc(false)?;
    vault.compact()?;
    let after = vault.stats()?.disk_bytes;
    Ok(PruneOutput {
        pruned,
        gc,
        disk_bytes_before: before,
        disk_bytes_after: after,
    })
}

/// Reclaim free space in the vault file.
pub fn compact(vault: &Vault) -> Result<CompactOutput> {
    Ok(CompactOutput {
        bytes_reclaimed: vault.compact()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WriteOptions;
    use crate::service::{files, testing};

    #[test]
    fn prune_drops_old_checkpoints_and_reclaims_their_objects() {
        let h = testing::home();
        let opts = || WriteOptions {
            mode: None,
            parents: false,
            append: false,
        };
        for i in 0..3 {
            let big = vec![b'a' + i as u8; 256 * 1024];
            files::write(&h.ws, "/big", &big, opts()).unwrap();
            h.ws.checkpoint_save(Some(&format!("cp{i}")), None).unwrap();
        }
        let out = prune(&h.ws, Some(1), None).unwrap();
        assert_eq!(out.pruned.checkpoints_removed.len(), 2);
        assert!(
            out.gc.objects_removed > 0,
            "the dropped versions are collected"
        );
        assert!(out.disk_bytes_after <= out.disk_bytes_before);
        let left: Vec<String> =
            h.ws.checkpoints()
                .unwrap()
                .into_iter()
                .map(|c| c.name)
                .collect();
        assert_eq!(left, vec!["cp2".to_string()]);
    }
}
