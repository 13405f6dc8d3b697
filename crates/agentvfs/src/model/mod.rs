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
pub mod migrate;
pub mod node;
mod oplog;
pub mod origin;
pub mod path;
mod quota;
pub(crate) mod retention;
mod side_effect;
mod vault;
mod view;
mod workspace;

pub use check::{CheckReport, Problem};
pub use oplog::{OpInfo, PruneReport};
pub use origin::Origin;
pub use quota::Quota;
pub use retention::DEFAULT_KEEP_AUTO;
pub use vault::{
    CheckpointInfo, ForkInfo, GcReport, MAIN, StatsReport, Vault, VaultInfo, fork_key,
};
pub use view::{Child, View};
pub use workspace::{
    Actor, BatchEnd, Edit, Holder, Lease, LoggedOp, MAX_LEASE, PathVersion, Renewal, Workspace,
    WriteOptions, host_id,
};

/// An RFC 3339 UTC time with nanoseconds, from nanoseconds since the Unix epoch. Every i64
/// is a time between 1677 and 2262, before the epoch included (a file's mtime can be).
pub fn iso_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (proleptic Gregorian; Howard Hinnant's method).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
