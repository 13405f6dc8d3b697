//! History services for adapters: naming states (`@`, `@base`, a checkpoint, a fork,
//! `fork:checkpoint`), and rendering diffs as unified patches or `--stat` lines.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::diff::{Change, ChangeStatus, StateRef};
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{View, Workspace};

/// Resolve a state name relative to workspace `ws`:
/// `@` (live), `@base` (where the fork started), `FORK:CHECKPOINT`, a checkpoint of `ws`,
/// or the live state of another fork in the same vault.
pub fn state_ref(ws: &Workspace, spec: &str) -> Result<StateRef> {
    let me = ws.name().to_string();
    match spec {
        "@" | "live" => return Ok(StateRef::Live(me)),
        "@base" => return Ok(StateRef::ForkBase(me)),
        _ => {}
    }
    if let Some((fork, cp)) = spec.split_once(':') {
        return Ok(StateRef::Checkpoint {
            workspace: fork.to_string(),
            name: cp.to_string(),
        });
    }
    if ws.checkpoints()?.iter().any(|c| c.name == spec) {
        return Ok(StateRef::Checkpoint {
            workspace: me,
            name: spec.to_string(),
        });
    }
    if ws.vault().forks()?.iter().any(|f| f.name == spec) {
        return Ok(StateRef::Live(spec.to_string()));
    }
    Err(Error::CheckpointNotFound {
        name: spec.to_string(),
    })
}

/// The default "from" side: the last checkpoint, else where the workspace started.
pub fn default_from(ws: &Workspace) -> Result<StateRef> {
    Ok(match ws.checkpoints()?.last() {
        Some(cp) => StateRef::Checkpoint {
            workspace: ws.name().to_string(),
            name: cp.name.clone(),
        },
        None => StateRef::ForkBase(ws.name().to_string()),
    })
}

/// Counts per status, for summaries.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct DiffSummary {
    pub added: u64,
    pub modified: u64,
    pub deleted: u64,
    pub renamed: u64,
    pub type_changed: u64,
}

pub fn summarize(changes: &[Change]) -> DiffSummary {
    let mut s = DiffSummary::default();
    for c in changes {
        match c.status {
            ChangeStatus::Added => s.added += 1,
            ChangeStatus::Modified => s.modified += 1,
            ChangeStatus::Deleted => s.deleted += 1,
            ChangeStatus::Renamed => s.renamed += 1,
            ChangeStatus::TypeChanged => s.type_changed += 1,
        }
    }
    s
}

/// Content as text for a patch, or `None` if binary.
fn text_of(v: &View<'_>, n: Option<&Node>) -> Result<Option<String>> {
    let bytes = match n.map(|n| &n.kind) {
        None => Vec::new(),
        Some(NodeKind::File { .. }) => v.read_node(n.expect("matched Some"))?,
        Some(NodeKind::Symlink { target }) => target.clone().into_bytes(),
        Some(_) => Vec::new(),
    };
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Ok(None);
    }
    Ok(String::from_utf8(bytes).ok())
}

fn node_at(v: &View<'_>, path: &str) -> Result<Option<Node>> {
    match v.lookup(&VPath::parse(path)?) {
        Ok(n) => Ok(n.map(|(n, _)| n)),
        Err(Error::NotADirectory { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Line counts for `--stat`: (insertions, deletions), or `None` for binary content.
pub fn line_stat(a: &View<'_>, b: &View<'_>, c: &Change) -> Result<Option<(u64, u64)>> {
    if c.kind == "dir" {
        return Ok(Some((0, 0)));
    }
    let old = node_at(a, c.old_path.as_deref().unwrap_or(&c.path))?;
    let new = node_at(b, &c.path)?;
    let (Some(o), Some(n)) = (text_of(a, old.as_ref())?, text_of(b, new.as_ref())?) else {
        return Ok(None);
    };
    let diff = similar::TextDiff::from_lines(&o, &n);
    let (mut ins, mut del) = (0, 0);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            match change.tag() {
                similar::ChangeTag::Insert => ins += 1,
                similar::ChangeTag::Delete => del += 1,
                similar::ChangeTag::Equal => {}
            }
        }
    }
    Ok(Some((ins, del)))
}

/// A git-style unified patch for one change.
pub fn patch(a: &View<'_>, b: &View<'_>, c: &Change) -> Result<String> {
    if c.kind == "dir" && !c.mode_changed {
        return Ok(String::new());
    }
    let old_path = c.old_path.as_deref().unwrap_or(&c.path);
    let (ap, bp) = (
        old_path.trim_start_matches('/'),
        c.path.trim_start_matches('/'),
    );
    let mut out = format!("diff --git a/{ap} b/{bp}\n");
    match c.status {
        ChangeStatus::Added => {
            out.push_str(&format!("new file mode {:o}\n", c.new_mode.unwrap_or(0)))
        }
        ChangeStatus::Deleted => out.push_str(&format!(
            "deleted file mode {:o}\n",
            c.old_mode.unwrap_or(0)
        )),
        _ => {
            if c.mode_changed {
                out.push_str(&format!(
                    "old mode {:o}\nnew mode {:o}\n",
                    c.old_mode.unwrap_or(0),
                    c.new_mode.unwrap_or(0)
                ));
            }
            if c.status == ChangeStatus::Renamed {
                out.push_str(&format!("rename from {ap}\nrename to {bp}\n"));
            }
        }
    }
    if c.kind == "dir" || c.old_content_id == c.new_content_id {
        return Ok(out);
    }
    let old = node_at(a, old_path)?;
    let new = node_at(b, &c.path)?;
    let (from, to) = (
        if old.is_some() {
            format!("a/{ap}")
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            format!("b/{bp}")
        } else {
            "/dev/null".into()
        },
    );
    match (text_of(a, old.as_ref())?, text_of(b, new.as_ref())?) {
        (Some(o), Some(n)) => {
            let diff = similar::TextDiff::from_lines(&o, &n);
            out.push_str(
                &diff
                    .unified_diff()
                    .context_radius(3)
                    .header(&from, &to)
                    .to_string(),
            );
        }
        _ => out.push_str(&format!("Binary files {from} and {to} differ\n")),
    }
    Ok(out)
}
