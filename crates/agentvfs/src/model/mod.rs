//! The workspace model: paths, nodes, trees and the overlay that makes forks and checkpoints
//! cost O(changes); quotas and audit records. It uses the store and nothing above it.

pub mod buffer;
mod check;
pub mod diff;
mod fold;
pub mod ignore;
/// Content ids live with the store, which keys objects by them; the model names them here
/// too.
pub mod id {
    pub use crate::store::id::*;
}
mod inode;
pub mod limits;
pub mod merge;
pub mod node;
mod oplog;
pub mod path;
mod quota;
mod vault;
mod view;
mod workspace;

pub use check::{CheckReport, Problem};
pub use oplog::{OpInfo, PruneReport};
pub use quota::Quota;
pub use vault::{CheckpointInfo, ForkInfo, GcReport, StatsReport, Vault, VaultInfo};
pub use view::{Child, View};
pub use workspace::{
    Actor, BatchEnd, DEFAULT_KEEP_AUTO, Edit, LoggedOp, Origin, PathVersion, Workspace,
    WriteOptions,
};

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
