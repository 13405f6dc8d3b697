//! Per-vault quotas, enforced in the workspace model so every caller hits the same error
//! before anything is written.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::{StoreRead, StoreWrite};

const MB: u64 = 1024 * 1024;

/// Limits that apply to each workspace's live tree. `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quota {
    /// Total bytes of regular files, in MiB.
    pub max_size_mb: Option<u64>,
    /// Number of regular files.
    pub max_files: Option<u64>,
    /// Size of any one file, in MiB.
    pub max_file_size_mb: Option<u64>,
}

/// The settings the quota is kept in start with this.
pub(crate) const PREFIX: &str = "quota.";
const KEYS: [&str; 3] = ["max_size_mb", "max_files", "max_file_size_mb"];

impl Quota {
    /// The vault's limits: one prefix read (a single round trip on a server engine).
    pub fn load(r: &dyn StoreRead) -> Result<Quota> {
        let set = r.settings_with_prefix(PREFIX)?;
        let get = |k: &str| -> Option<u64> {
            set.iter()
                .find(|(key, _)| key.strip_prefix(PREFIX) == Some(k))
                .and_then(|(_, v)| v.parse().ok())
        };
        Ok(Quota {
            max_size_mb: get(KEYS[0]),
            max_files: get(KEYS[1]),
            max_file_size_mb: get(KEYS[2]),
        })
    }

    pub fn save(&self, w: &mut dyn StoreWrite) -> Result<()> {
        let values = [self.max_size_mb, self.max_files, self.max_file_size_mb];
        for (k, v) in KEYS.iter().zip(values) {
            w.set_setting(&format!("quota.{k}"), v.map(|v| v.to_string()).as_deref())?;
        }
        Ok(())
    }

    /// Refuse limits whose byte value would not fit (see `limits::MAX_QUOTA_MIB`).
    pub fn validate(&self) -> Result<()> {
        use super::limits::{MAX_QUOTA_COUNT, MAX_QUOTA_MIB, out_of_range};
        let checks = [
            ("max_size_mb", self.max_size_mb, MAX_QUOTA_MIB),
            ("max_files", self.max_files, MAX_QUOTA_COUNT),
            ("max_file_size_mb", self.max_file_size_mb, MAX_QUOTA_MIB),
        ];
        for (name, value, max) in checks {
            if let Some(v) = value.filter(|v| *v > max) {
                return Err(out_of_range(name, &v.to_string(), format!("0 to {max}")));
            }
        }
        Ok(())
    }

    /// Check one file's size: the quota, and the largest file avfs holds.
    pub fn check_file_size(&self, size: u64) -> Result<()> {
        if size > super::limits::MAX_FILE_SIZE {
            return Err(Error::FileTooLarge {
                size,
                limit: super::limits::MAX_FILE_SIZE,
            });
        }
        check(
            "max_file_size_mb",
            self.max_file_size_mb.map(|m| m.saturating_mul(MB)),
            size,
        )
    }

    /// Check the workspace totals a change would produce.
    pub fn check_totals(&self, files: u64, bytes: u64) -> Result<()> {
        check("max_files", self.max_files, files)?;
        check(
            "max_size_mb",
            self.max_size_mb.map(|m| m.saturating_mul(MB)),
            bytes,
        )
    }
}

fn check(quota: &str, limit: Option<u64>, attempted: u64) -> Result<()> {
    match limit {
        Some(limit) if attempted > limit => Err(Error::QuotaExceeded {
            quota: quota.to_string(),
            limit,
            attempted,
        }),
        _ => Ok(()),
    }
}
