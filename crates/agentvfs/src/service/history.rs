//! History services for adapters: naming states (`@`, `@base`, a checkpoint, a fork,
//! `fork:checkpoint`), and rendering diffs as unified patches or `--stat` lines.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::diff::{Change, ChangeStatus, StateRef};
use crate::model::ignore::{self, IgnoredCounts};
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
    // Neither: not found, or a checkpoint that retention pruned (the error says which).
    Err(ws
        .checkpoint(spec)
        .err()
        .unwrap_or(Error::CheckpointNotFound {
            name: spec.to_string(),
        }))
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
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, schemars::JsonSchema)]
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
    if n.is_some_and(|n| n.size() > crate::model::limits::MAX_TEXT_BYTES) {
        return Ok(None);
    }
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

/// The node at a workspace path given as text, `None` if absent.
pub(crate) fn node_at(v: &View<'_>, path: &str) -> Result<Option<Node>> {
    v.find(&VPath::parse(path)?)
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

/// The unified patch of every change in `changes` from `a` to `b`. With `secrets`, a change
/// to a secret path (on either side) shows only its header and that its content is
/// withheld: agent-facing surfaces always pass the policy's secrets; a person's CLI passes
/// none only when asked (`diff --show-secrets`).
pub fn patches(
    a: &View<'_>,
    b: &View<'_>,
    changes: &[Change],
    secrets: Option<&crate::service::secrets::SecretPaths>,
) -> Result<String> {
    let mut out = String::new();
    for c in changes {
        let old_path = VPath::parse(c.old_path.as_deref().unwrap_or(&c.path))?;
        let new_path = VPath::parse(&c.path)?;
        let secret = match secrets {
            Some(s) => s.refuses(a, &old_path, None)? || s.refuses(b, &new_path, None)?,
            None => false,
        };
        if secret {
            let (ap, bp) = (old_path.as_str().to_string(), new_path.as_str().to_string());
            out.push_str(&format!(
                "diff --git a/{ap} b/{bp}\nSecret file {bp}: content withheld\n"
            ));
            continue;
        }
        out.push_str(&patch(a, b, c)?);
    }
    Ok(out)
}

/// A git-style unified patch for one change (`git apply` accepts it).
pub fn patch(a: &View<'_>, b: &View<'_>, c: &Change) -> Result<String> {
    let old_path = c.old_path.as_deref().unwrap_or(&c.path);
    let old = node_at(a, old_path)?;
    let new = node_at(b, &c.path)?;
    let (ap, bp) = (
        old_path.trim_start_matches('/'),
        c.path.trim_start_matches('/'),
    );
    // Directories have no patch text; git tracks only what is inside them.
    let old = old.filter(|n| !n.is_dir());
    let new = new.filter(|n| !n.is_dir());
    if c.status == ChangeStatus::TypeChanged {
        // As git does: the old entry is deleted and the new one added.
        let mut out = String::new();
        if let Some(o) = &old {
            out.push_str(&file_patch(a, b, ap, ap, Some(o), None)?);
        }
        if let Some(n) = &new {
            out.push_str(&file_patch(a, b, bp, bp, None, Some(n))?);
        }
        return Ok(out);
    }
    if old.is_none() && new.is_none() {
        return Ok(String::new());
    }
    file_patch(a, b, ap, bp, old.as_ref(), new.as_ref())
}

fn file_patch(
    a: &View<'_>,
    b: &View<'_>,
    ap: &str,
    bp: &str,
    old: Option<&Node>,
    new: Option<&Node>,
) -> Result<String> {
    let mut out = format!("diff --git a/{ap} b/{bp}\n");
    match (old, new) {
        (None, Some(n)) => out.push_str(&format!("new file mode {:06o}\n", n.st_mode())),
        (Some(o), None) => out.push_str(&format!("deleted file mode {:06o}\n", o.st_mode())),
        (Some(o), Some(n)) => {
            if o.st_mode() != n.st_mode() {
                out.push_str(&format!(
                    "old mode {:06o}\nnew mode {:06o}\n",
                    o.st_mode(),
                    n.st_mode()
                ));
            }
            if ap != bp {
                out.push_str(&format!("rename from {ap}\nrename to {bp}\n"));
            }
            if o.kind_eq(n) {
                return Ok(out);
            }
        }
        (None, None) => return Ok(String::new()),
    }
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
    match (text_of(a, old)?, text_of(b, new)?) {
        (Some(o), Some(n)) => {
            if o.is_empty() && n.is_empty() {
                return Ok(out);
            }
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

// `diff` data (a doc comment here would change the committed schema).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DiffOutput {
    pub from: String,
    pub to: String,
    pub summary: DiffSummary,
    pub changes: Vec<Change>,
    /// The unified patch, with --patch.
    pub patch: Option<String>,
    /// Changes the workspace's ignore rules leave out (`.gitignore`, `.avfsignore`,
    /// `.git/info/exclude`, `.git/`), counted per top-level name; empty with
    /// --include-ignored.
    pub ignored: IgnoredCounts,
}

/// What a `diff` compares and how much detail it computes.
#[derive(Debug, Clone, Default)]
pub struct DiffRequest {
    /// A state name (see [`state_ref`]); default: [`default_from`].
    pub from: Option<String>,
    /// A state name; default: the live state.
    pub to: Option<String>,
    /// Compute the unified patch.
    pub patch: bool,
    /// Show the content of secret files (the built-in policy's `[secrets]`) in the patch.
    pub show_secrets: bool,
    /// Count inserted and deleted lines per change.
    pub line_stats: bool,
    /// List the changes the ignore rules leave out too.
    pub include_ignored: bool,
}

/// A diff and, when asked, its line counts: one entry per change, `None` for binary
/// content.
#[derive(Debug, Clone)]
pub struct Diff {
    pub output: DiffOutput,
    pub line_stats: Vec<Option<(u64, u64)>>,
}

/// How a state is named in a diff's output.
pub fn describe(s: &StateRef) -> String {
    match s {
        StateRef::Live(w) => format!("{w}@live"),
        StateRef::Checkpoint { workspace, name } => format!("{workspace}:{name}"),
        StateRef::ForkBase(w) => format!("{w}@base"),
        StateRef::Root(id) => id.short(),
    }
}

/// What changed between two states of `ws` (default: the last checkpoint, else `@base`, to
/// the live state). A patch withholds secret files' content unless `show_secrets`.
pub fn diff(ws: &Workspace, req: &DiffRequest) -> Result<Diff> {
    let from = match &req.from {
        Some(s) => state_ref(ws, s)?,
        None => default_from(ws)?,
    };
    let to = match &req.to {
        Some(s) => state_ref(ws, s)?,
        None => StateRef::Live(ws.name().to_string()),
    };
    let (changes, ignored, patch, line_stats) = ws.vault().with_views(&from, &to, |va, vb| {
        let changes = crate::model::diff::diff_views(va, vb)?;
        let (changes, ignored) = ignore::listed(changes, va, vb, req.include_ignored)?;
        let patch = if req.patch {
            let policy = crate::service::policy::PolicyEngine::builtin();
            let secrets = (!req.show_secrets).then(|| policy.secret_paths());
            Some(patches(va, vb, &changes, secrets)?)
        } else {
            None
        };
        let line_stats = if req.line_stats {
            changes
                .iter()
                .map(|c| line_stat(va, vb, c))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok((changes, ignored, patch, line_stats))
    })?;
    Ok(Diff {
        output: DiffOutput {
            from: describe(&from),
            to: describe(&to),
            summary: summarize(&changes),
            changes,
            patch,
            ignored,
        },
        line_stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WriteOptions;
    use crate::service::{files, testing};

    fn put(ws: &Workspace, path: &str, text: &str) {
        let opts = WriteOptions {
            mode: None,
            parents: false,
            append: false,
        };
        files::write(ws, path, text.as_bytes(), opts).unwrap();
    }

    #[test]
    fn diff_defaults_to_the_last_checkpoint_and_withholds_secrets() {
        let h = testing::home();
        put(&h.ws, "/a.txt", "one\n");
        let first = diff(&h.ws, &DiffRequest::default()).unwrap();
        assert_eq!(first.output.from, "main@base", "no checkpoint yet");
        assert_eq!(first.output.to, "main@live");
        h.ws.checkpoint_save(Some("cp"), None).unwrap();
        put(&h.ws, "/a.txt", "two\n");
        put(&h.ws, "/.env", "TOKEN=hunter2\n");
        let req = DiffRequest {
            patch: true,
            line_stats: true,
            ..DiffRequest::default()
        };
        let d = diff(&h.ws, &req).unwrap();
        assert_eq!(d.output.from, "main:cp");
        assert_eq!((d.output.summary.added, d.output.summary.modified), (1, 1));
        let patch = d.output.patch.unwrap();
        assert!(patch.contains("+two"), "{patch}");
        assert!(
            !patch.contains("hunter2"),
            "a secret's content is withheld: {patch}"
        );
        assert_eq!(d.line_stats.len(), 2);
        let shown = diff(
            &h.ws,
            &DiffRequest {
                show_secrets: true,
                ..req
            },
        )
        .unwrap();
        assert!(shown.output.patch.unwrap().contains("hunter2"));
    }
}
