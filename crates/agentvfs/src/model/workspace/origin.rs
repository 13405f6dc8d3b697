//! Recording where a workspace came from (see [`crate::model::origin`]).

use super::Workspace;
use crate::error::{Error, Result};
use crate::model::id::ObjectId;
use crate::model::now_ns;
use crate::model::origin::{ORIGIN_PREFIX, Origin, origin_of};

impl Workspace {
    /// Record that host directory `host` (absolute), mapped to workspace path `prefix`,
    /// now matches state `root` of this workspace.
    /// The git commit stays the one recorded before for the same directory.
    pub fn set_origin(
        &self,
        host: &str,
        prefix: &str,
        root: ObjectId,
        recorded_by: &str,
    ) -> Result<Origin> {
        let git_commit = self
            .origin()?
            .filter(|o| o.host == host)
            .and_then(|o| o.git_commit);
        self.set_origin_git(host, prefix, root, recorded_by, git_commit)
    }

    /// [`Workspace::set_origin`], with the git commit the directory's repository is at.
    pub fn set_origin_git(
        &self,
        host: &str,
        prefix: &str,
        root: ObjectId,
        recorded_by: &str,
        git_commit: Option<String>,
    ) -> Result<Origin> {
        let origin = Origin {
            host: host.to_string(),
            prefix: prefix.to_string(),
            root: root.to_hex(),
            recorded_by: recorded_by.to_string(),
            at: now_ns(),
            workspace: self.name.clone(),
            git_commit,
        };
        let json = serde_json::to_string(&origin).map_err(|e| Error::Storage(e.to_string()))?;
        self.vault
            .set_setting(&format!("{ORIGIN_PREFIX}{}", self.name), Some(&json))?;
        Ok(origin)
    }

    /// This workspace's origin, else the nearest ancestor's.
    pub fn origin(&self) -> Result<Option<Origin>> {
        self.vault.store.read(|r| origin_of(r, &self.name))
    }
}
