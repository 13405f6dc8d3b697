//! Where a workspace's contents came from on the host: the directory an import read (or an
//! apply last wrote) and the workspace state that directory then matched. Here the record
//! and its reads (gc and `vault info` need them); recording is `Workspace::set_origin`. `apply` takes
//! that state as its base by default, so the host is compared with what it really holds,
//! not with the empty tree a vault starts from. Forks inherit their parent's origin until
//! they record their own. The recorded states are kept by gc.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::id::ObjectId;
use crate::store::StoreRead;

/// The settings key prefix of origins, one per workspace name.
pub(crate) const ORIGIN_PREFIX: &str = "origin:";

/// A host directory and the workspace state it matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Origin {
    /// The host directory (absolute).
    pub host: String,
    /// The workspace path it maps to (`/` for the whole workspace).
    pub prefix: String,
    /// The root id of the state the host directory matched.
    pub root: String,
    /// `import` or `apply`: what recorded it.
    pub recorded_by: String,
    /// When (ns since the epoch).
    pub at: i64,
    /// The workspace that recorded it (a fork inherits its parent's).
    pub workspace: String,
    /// The git commit the host directory's repository was at (`HEAD` at the import, or the
    /// commit `import --git` took): a hand-back's parent.
    #[serde(default)]
    pub git_commit: Option<String>,
}

impl Origin {
    /// The recorded state's root.
    pub fn root_id(&self) -> Result<ObjectId> {
        ObjectId::from_hex(&self.root).ok_or_else(|| Error::CorruptVault {
            reason: format!("origin of `{}` has a bad root id", self.workspace),
        })
    }
}

/// Every recorded origin's root, for gc.
pub(crate) fn origin_roots(r: &dyn StoreRead) -> Result<Vec<ObjectId>> {
    let mut out = Vec::new();
    for (_, value) in r.settings_with_prefix(ORIGIN_PREFIX)? {
        if let Ok(o) = serde_json::from_str::<Origin>(&value) {
            out.extend(o.root_id().ok());
        }
    }
    Ok(out)
}

/// Workspace `name`'s origin, else the nearest ancestor's.
pub(crate) fn origin_of(r: &dyn StoreRead, name: &str) -> Result<Option<Origin>> {
    let mut name = Some(name.to_string());
    let mut hops = 0;
    while let Some(n) = name {
        if let Some(v) = r.setting(&format!("{ORIGIN_PREFIX}{n}"))? {
            let o: Origin = serde_json::from_str(&v).map_err(|e| Error::CorruptVault {
                reason: format!("origin of `{n}`: {e}"),
            })?;
            return Ok(Some(o));
        }
        hops += 1;
        // A parent chain is a tree; a cycle would be damage, not a long chain.
        if hops > 10_000 {
            break;
        }
        name = r.workspace(&n)?.and_then(|w| w.parent);
    }
    Ok(None)
}
