//! Differences between two workspace states. Equal subtrees are pruned by id, so the cost
//! follows what differs, not the size of the trees. Hard-linked files are reported under
//! their names; when one changed, pruning is off, as an unchanged subtree may hold a name
//! of it (the cost then follows the size of the trees).

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::id::ObjectId;
use super::inode;
use super::node::{Node, NodeKind};
use super::path::VPath;
use super::view::{Child, View};
use crate::error::Result;

/// A workspace state to compare, read or merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRef {
    /// The live state of a workspace (by name).
    Live(String),
    /// A checkpoint of a workspace.
    Checkpoint { workspace: String, name: String },
    /// The root a fork started from (for `main`, the empty tree it was created with).
    ForkBase(String),
    /// A root id.
    Root(ObjectId),
}

/// How a path differs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    Added,
    Modified,
    Deleted,
    Renamed,
    TypeChanged,
}

impl ChangeStatus {
    /// The `--name-status` letter.
    pub fn letter(self) -> char {
        match self {
            ChangeStatus::Added => 'A',
            ChangeStatus::Modified => 'M',
            ChangeStatus::Deleted => 'D',
            ChangeStatus::Renamed => 'R',
            ChangeStatus::TypeChanged => 'T',
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Change {
    pub path: String,
    pub status: ChangeStatus,
    /// For renames: where it came from.
    pub old_path: Option<String>,
    /// `file`, `dir`, `symlink` or `fifo` (the new type; the old one for deletions).
    #[serde(rename = "type")]
    pub kind: String,
    pub old_size: Option<u64>,
    pub new_size: Option<u64>,
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    pub old_content_id: Option<String>,
    pub new_content_id: Option<String>,
    /// True if the permission bits differ.
    pub mode_changed: bool,
}

fn change(path: &VPath, status: ChangeStatus, old: Option<&Node>, new: Option<&Node>) -> Change {
    Change {
        path: path.display(),
        status,
        old_path: None,
        kind: new
            .or(old)
            .map(|n| n.type_name().to_string())
            .unwrap_or_default(),
        old_size: old.map(Node::size),
        new_size: new.map(Node::size),
        old_mode: old.map(|n| n.attrs.mode),
        new_mode: new.map(|n| n.attrs.mode),
        old_content_id: old.and_then(content_key),
        new_content_id: new.and_then(content_key),
        mode_changed: match (old, new) {
            (Some(a), Some(b)) => a.attrs.mode != b.attrs.mode,
            _ => false,
        },
    }
}

fn content_key(n: &Node) -> Option<String> {
    match &n.kind {
        NodeKind::Symlink { target } => Some(format!("symlink:{target}")),
        _ => n.content_id().map(|i| i.to_hex()),
    }
}

fn same_type(a: &Node, b: &Node) -> bool {
    std::mem::discriminant(&a.kind) == std::mem::discriminant(&b.kind)
}

/// Differences between two views, sorted by path.
pub fn diff_views(a: &View<'_>, b: &View<'_>) -> Result<Vec<Change>> {
    let (ra, oa) = a.root()?;
    let (rb, ob) = b.root()?;
    let mut out = Vec::new();
    let root = VPath::root();
    let prune = !inodes_differ(a, b)?;
    diff_node(
        a,
        b,
        prune,
        &root,
        Some(&Child {
            name: String::new(),
            node: ra,
            overlaid: oa,
        }),
        Some(&Child {
            name: String::new(),
            node: rb,
            overlaid: ob,
        }),
        &mut out,
    )?;
    Ok(detect_renames(out))
}

/// Whether any hard-linked file differs between the two states (its names aside).
fn inodes_differ(a: &View<'_>, b: &View<'_>) -> Result<bool> {
    let dir = inode::inodes_dir();
    let (da, db) = (a.lookup_raw(&dir)?, b.lookup_raw(&dir)?);
    let files = |v: &View<'_>, d: Option<(Node, bool)>| -> Result<BTreeMap<String, Node>> {
        let Some((node, overlaid)) = d else {
            return Ok(BTreeMap::new());
        };
        Ok(v.children_raw(&dir, &node, overlaid)?
            .into_iter()
            .map(|c| (c.name, c.node))
            .collect())
    };
    if let (Some((x, false)), Some((y, false))) = (&da, &db)
        && x.kind_eq(y)
    {
        return Ok(false);
    }
    let (fa, fb) = (files(a, da)?, files(b, db)?);
    Ok(fa.iter().any(|(name, x)| {
        fb.get(name).is_some_and(|y| {
            let body_differs = match (&x.kind, &y.kind) {
                (NodeKind::Inode { content: ca, .. }, NodeKind::Inode { content: cb, .. }) => {
                    ca != cb
                }
                (NodeKind::Shared { kind: ka, .. }, NodeKind::Shared { kind: kb, .. }) => ka != kb,
                _ => true,
            };
            body_differs || x.attrs.mode != y.attrs.mode
        })
    }))
}

fn diff_node(
    va: &View<'_>,
    vb: &View<'_>,
    prune: bool,
    path: &VPath,
    a: Option<&Child>,
    b: Option<&Child>,
    out: &mut Vec<Change>,
) -> Result<()> {
    match (a, b) {
        (None, None) => Ok(()),
        (None, Some(b)) => whole(vb, path, b, ChangeStatus::Added, out),
        (Some(a), None) => whole(va, path, a, ChangeStatus::Deleted, out),
        (Some(a), Some(b)) => {
            if !same_type(&a.node, &b.node) {
                // One entry for the path itself; what was or is below it is listed too.
                out.push(change(
                    path,
                    ChangeStatus::TypeChanged,
                    Some(&a.node),
                    Some(&b.node),
                ));
                for (v, c, status) in [(va, a, ChangeStatus::Deleted), (vb, b, ChangeStatus::Added)]
                {
                    if c.node.is_dir() {
                        for child in v.children(path, &c.node, c.overlaid)? {
                            whole(v, &path.join(&child.name), &child, status, out)?;
                        }
                    }
                }
                return Ok(());
            }
            let mode_changed = a.node.attrs.mode != b.node.attrs.mode;
            if a.node.is_dir() {
                if mode_changed && !path.is_root() {
                    out.push(change(
                        path,
                        ChangeStatus::Modified,
                        Some(&a.node),
                        Some(&b.node),
                    ));
                }
                // Identical trees with no overlay on either side: nothing below differs.
                if prune && !a.overlaid && !b.overlaid && a.node.kind_eq(&b.node) {
                    return Ok(());
                }
                let mut names: BTreeMap<String, (Option<Child>, Option<Child>)> = BTreeMap::new();
                for c in va.children(path, &a.node, a.overlaid)? {
                    let name = c.name.clone();
                    names.entry(name).or_default().0 = Some(c);
                }
                for c in vb.children(path, &b.node, b.overlaid)? {
                    let name = c.name.clone();
                    names.entry(name).or_default().1 = Some(c);
                }
                for (name, (ca, cb)) in names {
                    diff_node(
                        va,
                        vb,
                        prune,
                        &path.join(&name),
                        ca.as_ref(),
                        cb.as_ref(),
                        out,
                    )?;
                }
                Ok(())
            } else {
                if !a.node.kind_eq(&b.node) || mode_changed {
                    out.push(change(
                        path,
                        ChangeStatus::Modified,
                        Some(&a.node),
                        Some(&b.node),
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Report `c` and everything below it as added or deleted.
fn whole(
    v: &View<'_>,
    path: &VPath,
    c: &Child,
    status: ChangeStatus,
    out: &mut Vec<Change>,
) -> Result<()> {
    let (old, new) = match status {
        ChangeStatus::Deleted => (Some(&c.node), None),
        _ => (None, Some(&c.node)),
    };
    out.push(change(path, status, old, new));
    if c.node.is_dir() {
        for child in v.children(path, &c.node, c.overlaid)? {
            whole(v, &path.join(&child.name), &child, status, out)?;
        }
    }
    Ok(())
}

/// Pair a deleted file with an added file of identical, non-empty content as a rename.
fn detect_renames(changes: Vec<Change>) -> Vec<Change> {
    let mut deleted: HashMap<String, Vec<usize>> = HashMap::new();
    let mut added: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if c.kind == "dir" {
            continue;
        }
        let (map, key) = match c.status {
            ChangeStatus::Deleted => (&mut deleted, &c.old_content_id),
            ChangeStatus::Added => (&mut added, &c.new_content_id),
            _ => continue,
        };
        if let Some(k) = key {
            map.entry(k.clone()).or_default().push(i);
        }
    }
    let mut drop = vec![false; changes.len()];
    let mut out = changes.clone();
    for (key, adds) in &added {
        if let (Some(dels), [add]) = (deleted.get(key), adds.as_slice())
            && let [del] = dels.as_slice()
        {
            let d = &changes[*del];
            let c = &mut out[*add];
            c.status = ChangeStatus::Renamed;
            c.old_path = Some(d.path.clone());
            c.old_size = d.old_size;
            c.old_mode = d.old_mode;
            c.old_content_id = d.old_content_id.clone();
            c.mode_changed = d.old_mode != c.new_mode;
            drop[*del] = true;
        }
    }
    let mut out: Vec<Change> = out
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(c, _)| c)
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
