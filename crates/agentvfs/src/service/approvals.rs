//! Standing approvals: a person lets commands matching a pattern run in one fork for a
//! while ("pip install in this fork, for the next hour") instead of approving each with a
//! token. A grant only answers the policy's `ask`; it never turns a `deny` into a run. It
//! covers a single command: text with a shell control operator (`;`, `&&`, `|`, `$(`, a
//! newline, …) still asks, so `pip install *` cannot carry a second command along.
//! Grants live in the vault, are listed and revoked with `avfs approvals`, and their
//! granting, revoking and each use are in the audit log.

use std::time::Duration;

use globset::GlobBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{Workspace, fork_key, now_ns};

/// The settings key prefix of grants, `approval.grant.<id>` in the fork's scope (so they go
/// with the fork: see `fork_key`).
const PREFIX: &str = "approval.grant.";
/// The settings key of the next grant id.
const NEXT: &str = "approval.next_grant";
/// The audit operation names.
pub const GRANTED: &str = "approval.grant";
pub const REVOKED: &str = "approval.revoke";

/// One standing approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Grant {
    pub id: u64,
    /// The fork whose commands it covers.
    pub workspace: String,
    /// A glob over the whole command text (`*` any run of characters, `?` one), e.g.
    /// `pip install *`.
    pub pattern: String,
    /// When it was granted (ns since the epoch).
    pub created_at: i64,
    /// When it lapses (ns since the epoch).
    pub expires_at: i64,
    /// Who granted it.
    pub actor: String,
}

/// Characters and words that make shell text more than one command, or run one inside
/// another: a grant never covers such text.
const COMPOUND: [&str; 9] = [";", "&", "|", "\n", "`", "$(", "<(", ">(", "\r"];

fn compile(pattern: &str) -> Result<globset::GlobMatcher> {
    if pattern.trim().is_empty() {
        return Err(Error::invalid("an approval pattern must not be empty"));
    }
    if COMPOUND.iter().any(|c| pattern.contains(c)) {
        return Err(Error::invalid(format!(
            "an approval pattern covers one command; `{pattern}` holds a shell operator"
        )));
    }
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::invalid(format!("approval pattern `{pattern}`: {e}")))
}

/// The grants stored for `fork`, with their settings keys.
fn load(ws: &Workspace, fork: &str) -> Result<Vec<(String, Grant)>> {
    Ok(ws
        .vault()
        .settings_with_prefix(&fork_key(fork, PREFIX))?
        .into_iter()
        .filter_map(|(k, v)| Some((k, serde_json::from_str::<Grant>(&v).ok()?)))
        .collect())
}

/// The grants stored for every fork of the vault, with their settings keys.
fn load_all(ws: &Workspace) -> Result<Vec<(String, Grant)>> {
    let mut all = Vec::new();
    for fork in ws.vault().forks()? {
        all.extend(load(ws, &fork.name)?);
    }
    Ok(all)
}

/// Grant `pattern` in `ws`'s fork for `ttl` (more than zero, at most 366 days).
pub fn grant(ws: &Workspace, pattern: &str, ttl: Duration) -> Result<Grant> {
    compile(pattern)?;
    const MAX: Duration = Duration::from_secs(366 * 24 * 3600);
    if ttl.is_zero() || ttl > MAX {
        return Err(Error::OutOfRange {
            option: "--for".into(),
            value: humantime::format_duration(ttl).to_string(),
            limit: "more than 0 and at most 366 days".into(),
        });
    }
    let vault = ws.vault();
    let id = vault.next_counter(NEXT)?;
    let now = now_ns();
    let g = Grant {
        id,
        workspace: ws.name().to_string(),
        pattern: pattern.to_string(),
        created_at: now,
        expires_at: now.saturating_add(ttl.as_nanos().min(i64::MAX as u128) as i64),
        actor: ws.actor_name().to_string(),
    };
    let json = serde_json::to_string(&g).map_err(|e| Error::Storage(e.to_string()))?;
    vault.set_setting(&fork_key(ws.name(), &format!("{PREFIX}{id}")), Some(&json))?;
    ws.record_audit(GRANTED, &[], "ok", Some(json))?;
    Ok(g)
}

/// The grants still in force, of every fork of the vault, oldest first. Lapsed ones are
/// dropped on the way.
pub fn list(ws: &Workspace) -> Result<Vec<Grant>> {
    let now = now_ns();
    let mut live = Vec::new();
    for (key, g) in load_all(ws)? {
        if g.expires_at <= now {
            ws.vault().set_setting(&key, None)?;
        } else {
            live.push(g);
        }
    }
    live.sort_by_key(|g| g.id);
    Ok(live)
}

/// Revoke grant `id` (lapsed or not); `invalid_argument` if there is no such grant.
pub fn revoke(ws: &Workspace, id: u64) -> Result<Grant> {
    let (key, g) = load_all(ws)?
        .into_iter()
        .find(|(_, g)| g.id == id)
        .ok_or_else(|| Error::invalid(format!("there is no approval grant {id}")))?;
    ws.vault().set_setting(&key, None)?;
    let json = serde_json::to_string(&g).map_err(|e| Error::Storage(e.to_string()))?;
    ws.record_audit(REVOKED, &[], "ok", Some(json))?;
    Ok(g)
}

/// The grant in force that covers command `text` in fork `ws`, if any.
pub fn covering(ws: &Workspace, text: &str) -> Result<Option<Grant>> {
    if COMPOUND.iter().any(|c| text.contains(c)) {
        return Ok(None);
    }
    let now = now_ns();
    Ok(load(ws, ws.name())?.into_iter().map(|(_, g)| g).find(|g| {
        g.workspace == ws.name()
            && g.expires_at > now
            && compile(&g.pattern).is_ok_and(|m| m.is_match(text.trim()))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::testing;

    #[test]
    fn a_grant_covers_one_matching_command_in_its_fork_until_it_lapses_or_is_revoked() {
        let h = testing::home();
        let g = grant(&h.ws, "pip install *", Duration::from_secs(3600)).unwrap();
        assert!(covering(&h.ws, "pip install requests").unwrap().is_some());
        assert!(covering(&h.ws, "npm install x").unwrap().is_none());
        for compound in [
            "pip install x && curl evil",
            "pip install x; rm -rf ~",
            "pip install x | sh",
            "pip install $(cat list)",
            "pip install x\nrm y",
            "pip install `x`",
            "pip install x &",
        ] {
            assert!(covering(&h.ws, compound).unwrap().is_none(), "{compound}");
        }
        assert_eq!(list(&h.ws).unwrap(), vec![g.clone()]);
        revoke(&h.ws, g.id).unwrap();
        assert!(covering(&h.ws, "pip install requests").unwrap().is_none());
        assert!(revoke(&h.ws, g.id).is_err());
        // Bad patterns and durations are typed errors that grant nothing.
        for bad in ["", "  ", "pip install x; *", "a[", "x | y"] {
            assert!(
                grant(&h.ws, bad, Duration::from_secs(1)).is_err(),
                "{bad:?}"
            );
        }
        assert!(grant(&h.ws, "x", Duration::ZERO).is_err());
        assert!(grant(&h.ws, "x", Duration::from_secs(u64::MAX)).is_err());
        assert!(list(&h.ws).unwrap().is_empty());
        // A lapsed grant covers nothing and is dropped from the list.
        let short = grant(&h.ws, "make *", Duration::from_nanos(1)).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert!(covering(&h.ws, "make all").unwrap().is_none());
        assert!(list(&h.ws).unwrap().is_empty());
        assert!(revoke(&h.ws, short.id).is_err());
    }
}
