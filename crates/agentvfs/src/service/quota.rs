//! Quota changes as adapters ask for them: each limit given as text (`none` removes it),
//! every one checked before any is applied.

use crate::error::Result;
use crate::model::{Quota, Vault, limits};

/// The limits to change; `None` leaves one as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotaChange<'a> {
    /// Total bytes of regular files per workspace, in MiB.
    pub max_size_mb: Option<&'a str>,
    /// Number of regular files per workspace.
    pub max_files: Option<&'a str>,
    /// Size of any one file, in MiB.
    pub max_file_size_mb: Option<&'a str>,
}

/// Apply `change` to the vault's quotas and return them. A bad or out-of-range value is a
/// typed `invalid_argument` naming its option, and then nothing changes.
pub fn set(vault: &Vault, change: &QuotaChange<'_>) -> Result<Quota> {
    let parse = |option: &str, text: Option<&str>, max: u64| {
        text.map(|t| limits::parse_limit(option, t, max))
            .transpose()
    };
    let size = parse("--max-size-mb", change.max_size_mb, limits::MAX_QUOTA_MIB)?;
    let files = parse("--max-files", change.max_files, limits::MAX_QUOTA_COUNT)?;
    let file_size = parse(
        "--max-file-size-mb",
        change.max_file_size_mb,
        limits::MAX_QUOTA_MIB,
    )?;
    let mut q = vault.quota()?;
    if let Some(v) = size {
        q.max_size_mb = v;
    }
    if let Some(v) = files {
        q.max_files = v;
    }
    if let Some(v) = file_size {
        q.max_file_size_mb = v;
    }
    vault.set_quota(&q)?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::testing;

    #[test]
    fn a_bad_limit_changes_none_of_them() {
        let h = testing::home();
        let vault = h.ws.vault().clone();
        let set_size = QuotaChange {
            max_size_mb: Some("10"),
            ..Default::default()
        };
        assert_eq!(set(&vault, &set_size).unwrap().max_size_mb, Some(10));
        let half_bad = QuotaChange {
            max_size_mb: Some("none"),
            max_files: Some("-1"),
            ..Default::default()
        };
        let err = set(&vault, &half_bad).unwrap_err();
        assert_eq!(err.kind(), "invalid_argument");
        assert!(err.to_string().contains("--max-files"), "{err}");
        assert_eq!(vault.quota().unwrap().max_size_mb, Some(10));
        let remove = QuotaChange {
            max_size_mb: Some("none"),
            max_files: Some("3"),
            ..Default::default()
        };
        let q = set(&vault, &remove).unwrap();
        assert_eq!((q.max_size_mb, q.max_files), (None, Some(3)));
    }
}
