//! Three-way merge of a fork back into a workspace: the fork's changes since its base land
//! on the target's live state. Unchanged subtrees are taken whole by id; text files changed
//! on both sides in different places merge line by line; anything else changed on both
//! sides is a conflict. The result is applied in one transaction, or not at all. Hard links
//! are reconciled afterwards: link counts follow the names in the merged tree, and a
//! conflict on an inode is reported under its names.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::diff::{Change, diff_views};
use super::fold::{fold_overlay, store_dir, store_root};
use super::id::ObjectId;
use super::ignore::{self, IgnoredCounts};
use super::inode::{self, INODES_DIR, inodes_dir};
use super::node::{Node, NodeKind, encode_content};
use super::path::VPath;
use super::vault::Vault;
use super::view::{ObjectCache, View};
use super::workspace::{Logging, Workspace};
use crate::error::{Error, Result};
use crate::store::{StoreRead, StoreWrite};

/// What to do with a path changed on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeStrategy {
    /// Report every conflict and apply nothing.
    Fail,
    /// Keep the target's version.
    Ours,
    /// Take the fork's version.
    Theirs,
}

pub use crate::error::Conflict;

/// How [`Vault::merge`] goes about it.
#[derive(Debug, Clone, Copy)]
pub struct MergeOptions {
    pub strategy: MergeStrategy,
    /// Report what would happen, changing nothing.
    pub dry_run: bool,
    /// Also carry the changes the workspace's ignore rules leave out.
    pub include_ignored: bool,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions {
            strategy: MergeStrategy::Fail,
            dry_run: false,
            include_ignored: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MergeReport {
    pub fork: String,
    pub into: String,
    pub strategy: String,
    pub dry_run: bool,
    /// True if the target now holds the merge result.
    pub applied: bool,
    /// How the target changes (or would change): its live state before vs. the result.
    pub changes: Vec<Change>,
    /// Conflicts found; resolved by the strategy when it is `ours` or `theirs`.
    pub conflicts: Vec<Conflict>,
    /// Text files whose edits on both sides were combined line by line.
    pub text_merged: Vec<String>,
    /// The fork's changes the workspace's ignore rules left out (they stay in the fork),
    /// counted per top-level name; empty with `include_ignored`.
    pub ignored: IgnoredCounts,
}

fn change_kind(base: Option<&Node>, side: Option<&Node>) -> String {
    match (base, side) {
        (None, Some(_)) => "added",
        (Some(_), None) => "deleted",
        (Some(b), Some(s))
            if std::mem::discriminant(&b.kind) != std::mem::discriminant(&s.kind) =>
        {
            "type_changed"
        }
        _ => "modified",
    }
    .to_string()
}

fn same(a: Option<&Node>, b: Option<&Node>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.kind_eq(b) && a.attrs.mode == b.attrs.mode,
        _ => false,
    }
}

struct Merger<'a, 'w> {
    w: &'a mut (dyn StoreWrite + 'w),
    cache: &'a ObjectCache,
    strategy: MergeStrategy,
    conflicts: Vec<Conflict>,
    text_merged: Vec<String>,
}

impl Merger<'_, '_> {
    fn entries(&self, n: Option<&Node>) -> Result<BTreeMap<String, Node>> {
        match n.map(|n| &n.kind) {
            Some(NodeKind::Dir { tree: Some(t), .. }) => Ok(self
                .cache
                .tree(&*self.w, t)?
                .entries
                .iter()
                .cloned()
                .collect()),
            _ => Ok(BTreeMap::new()),
        }
    }

    fn conflict(
        &mut self,
        path: &VPath,
        base: Option<&Node>,
        ours: Option<Node>,
        theirs: Option<Node>,
    ) -> Option<Node> {
        self.conflicts.push(Conflict {
            path: path.display(),
            ours: change_kind(base, ours.as_ref()),
            theirs: change_kind(base, theirs.as_ref()),
        });
        match self.strategy {
            MergeStrategy::Theirs => theirs,
            MergeStrategy::Ours | MergeStrategy::Fail => ours,
        }
    }

    fn merge(
        &mut self,
        path: &VPath,
        base: Option<&Node>,
        ours: Option<Node>,
        theirs: Option<Node>,
    ) -> Result<Option<Node>> {
        if let (Some(b), Some(o), Some(t)) = (base, &ours, &theirs)
            && b.kind.is_shared_body()
            && o.kind.is_shared_body()
            && t.kind.is_shared_body()
        {
            // A hard-linked file merges like the node its names show; `reconcile_merge`
            // sets its link count.
            let file = |n: &Node| inode::as_file(n.clone(), 0);
            let merged = self.merge(path, Some(&file(b)?), Some(file(o)?), Some(file(t)?))?;
            return merged.map(|f| inode::as_inode(f, 1)).transpose();
        }
        if same(ours.as_ref(), theirs.as_ref()) || same(base, theirs.as_ref()) {
            return Ok(ours);
        }
        if same(base, ours.as_ref()) {
            return Ok(theirs);
        }
        match (ours, theirs) {
            (Some(o), Some(t)) if o.is_dir() && t.is_dir() => {
                let (be, oe, te) = (
                    self.entries(base)?,
                    self.entries(Some(&o))?,
                    self.entries(Some(&t))?,
                );
                let names: BTreeSet<&String> =
                    be.keys().chain(oe.keys()).chain(te.keys()).collect();
                let mut merged = BTreeMap::new();
                for name in names {
                    let child = self.merge(
                        &path.join(name),
                        be.get(name),
                        oe.get(name).cloned(),
                        te.get(name).cloned(),
                    )?;
                    if let Some(c) = child {
                        merged.insert(name.clone(), c);
                    }
                }
                let mut node = o.clone();
                match pick(base.map(|b| b.attrs.mode), o.attrs.mode, t.attrs.mode) {
                    Some(m) => node.attrs.mode = m,
                    None => return Ok(self.conflict(path, base, Some(o), Some(t))),
                }
                Ok(Some(store_dir(self.w, node, merged)?))
            }
            (Some(o), Some(t)) if o.is_file() && t.is_file() && base.is_some_and(Node::is_file) => {
                let b = base.expect("checked above");
                let Some(mode) = pick(Some(b.attrs.mode), o.attrs.mode, t.attrs.mode) else {
                    return Ok(self.conflict(path, base, Some(o), Some(t)));
                };
                let mut node = o.clone();
                node.attrs.mode = mode;
                if t.kind_eq(b) || o.kind_eq(&t) {
                    return Ok(Some(node));
                }
                if o.kind_eq(b) {
                    node.kind = t.kind.clone();
                    return Ok(Some(node));
                }
                match self.text_merge(b, &o, &t)? {
                    Some(bytes) => {
                        let (content, objects) = encode_content(&bytes)?;
                        for obj in objects {
                            self.w.put_object(&obj.id, obj.kind, &obj.data)?;
                        }
                        node.kind = NodeKind::File {
                            size: bytes.len() as u64,
                            content,
                        };
                        self.text_merged.push(path.display());
                        Ok(Some(node))
                    }
                    None => Ok(self.conflict(path, base, Some(o), Some(t))),
                }
            }
            (o, t) => Ok(self.conflict(path, base, o, t)),
        }
    }

    /// A line-based three-way merge, or `None` if a side is binary or edits overlap.
    fn text_merge(&self, base: &Node, ours: &Node, theirs: &Node) -> Result<Option<Vec<u8>>> {
        let view = View {
            r: &*self.w,
            cache: self.cache,
            overlay: None,
            base: crate::model::id::ObjectId([0; 32]),
        };
        let text = |n: &Node| -> Result<Option<String>> {
            if n.size() > super::limits::MAX_TEXT_BYTES {
                return Ok(None);
            }
            let bytes = view.read_node(n)?;
            if bytes.contains(&0) {
                return Ok(None);
            }
            Ok(String::from_utf8(bytes).ok())
        };
        let (Some(b), Some(o), Some(t)) = (text(base)?, text(ours)?, text(theirs)?) else {
            return Ok(None);
        };
        Ok(diffy::merge(&b, &o, &t).ok().map(String::into_bytes))
    }
}

/// Three-way pick of a scalar: the side that changed it, or `None` if both did differently.
fn pick(base: Option<u32>, ours: u32, theirs: u32) -> Option<u32> {
    if ours == theirs || Some(theirs) == base {
        Some(ours)
    } else if Some(ours) == base {
        Some(theirs)
    } else {
        None
    }
}

/// `theirs` at `path` with every path in `keep` (and what is below it) back as in `base`.
/// Only the directories on the way to a kept path are rebuilt.
fn reset_to_base(
    w: &mut dyn StoreWrite,
    cache: &ObjectCache,
    path: &VPath,
    base: Option<&Node>,
    theirs: Option<Node>,
    keep: &BTreeSet<VPath>,
) -> Result<Option<Node>> {
    if keep.contains(path) {
        return Ok(base.cloned());
    }
    let Some(t) = theirs else { return Ok(None) };
    let below: BTreeSet<String> = match path.below_bounds() {
        Some((lo, hi)) => keep.range(lo..hi).collect::<Vec<_>>(),
        None => keep.iter().collect(),
    }
    .into_iter()
    .filter_map(|k| {
        k.rebase(path, &VPath::root())
            .components()
            .next()
            .map(String::from)
    })
    .collect();
    let entries = |n: Option<&Node>| -> Result<BTreeMap<String, Node>> {
        Ok(match n.map(|n| &n.kind) {
            Some(NodeKind::Dir { tree: Some(id), .. }) => {
                cache.tree(&*w, id)?.entries.iter().cloned().collect()
            }
            _ => BTreeMap::new(),
        })
    };
    if below.is_empty() || !t.is_dir() {
        return Ok(Some(t));
    }
    let base = base.filter(|b| b.is_dir());
    let (be, mut te) = (entries(base)?, entries(Some(&t))?);
    for name in below {
        let child = path.join(&name);
        match reset_to_base(w, cache, &child, be.get(&name), te.remove(&name), keep)? {
            Some(n) => te.insert(name, n),
            None => None,
        };
    }
    Ok(Some(store_dir(w, t, te)?))
}

/// The result of a three-way merge of roots.
pub(crate) struct Merged {
    pub root: ObjectId,
    /// The change's end state as taken: `theirs_root` with the `keep_base` paths as in the
    /// base (equal to `theirs_root` when none are kept).
    pub taken: ObjectId,
    pub conflicts: Vec<Conflict>,
    pub text_merged: Vec<String>,
}

/// Merge the change from `base_root` to `theirs_root` onto `ours_root`, storing the result.
/// Conflicts are resolved by `strategy` (`Fail` keeps ours and reports them). At the paths
/// in `keep_base` (sorted) the change is not taken.
pub(crate) fn merge_roots(
    w: &mut dyn StoreWrite,
    cache: &ObjectCache,
    [base_root, ours_root, theirs_root]: [ObjectId; 3],
    strategy: MergeStrategy,
    keep_base: &[VPath],
) -> Result<Merged> {
    let (base, ours, mut theirs) = (
        cache.root(&*w, &base_root)?,
        cache.root(&*w, &ours_root)?,
        cache.root(&*w, &theirs_root)?,
    );
    let mut taken = theirs_root;
    if !keep_base.is_empty() {
        let keep: BTreeSet<VPath> = keep_base.iter().cloned().collect();
        theirs = reset_to_base(w, cache, &VPath::root(), Some(&base), Some(theirs), &keep)?
            .ok_or_else(|| Error::Storage("ignoring changes removed the root".into()))?;
        taken = store_root(w, &theirs)?;
    }
    let mut m = Merger {
        w: &mut *w,
        cache,
        strategy,
        conflicts: Vec::new(),
        text_merged: Vec::new(),
    };
    let merged = m
        .merge(
            &VPath::root(),
            Some(&base),
            Some(ours.clone()),
            Some(theirs.clone()),
        )?
        .ok_or_else(|| Error::Storage("merge removed the root".into()))?;
    let (conflicts, text_merged) = (m.conflicts, m.text_merged);
    let conflicts = name_conflicts(&*w, cache, [ours_root, theirs_root], conflicts)?;
    let merged = reconcile_merge(w, cache, merged, &base, &ours, &theirs)?;
    Ok(Merged {
        root: store_root(w, &merged)?,
        taken,
        conflicts,
        text_merged,
    })
}

impl Vault {
    /// Merge fork `fork` into workspace `into` (three-way, against the fork's base).
    /// With `MergeStrategy::Fail`, any conflict is an error and nothing is applied. The
    /// fork's ignored changes (see [`super::ignore`]) are left out unless `include_ignored`.
    pub fn merge(
        self: &Arc<Self>,
        fork: &str,
        into: &Workspace,
        opts: MergeOptions,
    ) -> Result<MergeReport> {
        let MergeOptions {
            strategy,
            dry_run,
            include_ignored,
        } = opts;
        let logging = if dry_run { Logging::None } else { Logging::Op };
        let paths = [&VPath::root()];
        into.edit_inner("merge", &paths, logging, |e| {
            let f = e.w.workspace(fork)?.ok_or_else(|| Error::ForkNotFound {
                name: fork.to_string(),
            })?;
            if f.id == e.ws.id {
                return Err(Error::invalid("cannot merge a workspace into itself"));
            }
            let base_root = f.base_root.unwrap_or(f.base);
            let theirs_root = fold_overlay(e.w, e.cache, f.id, f.base)?;
            let ours_root = e.fold()?;
            let cache = e.cache;
            let (keep_base, ignored) = if include_ignored {
                (Vec::new(), IgnoredCounts::new())
            } else {
                let bare = |root| View {
                    r: &*e.w,
                    cache,
                    overlay: None,
                    base: root,
                };
                let (vb, vt) = (bare(base_root), bare(theirs_root));
                let (_, ignored) = ignore::partition(diff_views(&vb, &vt)?, &vb, &vt)?;
                (ignore::top_paths(&ignored)?, ignore::counts(&ignored))
            };
            let Merged {
                root: merged_root,
                taken,
                conflicts,
                text_merged,
            } = merge_roots(
                e.w,
                cache,
                [base_root, ours_root, theirs_root],
                strategy,
                &keep_base,
            )?;
            if !conflicts.is_empty() && strategy == MergeStrategy::Fail && !dry_run {
                return Err(Error::MergeConflict { conflicts });
            }
            let changes = {
                let bare = |root| View {
                    r: &*e.w,
                    cache,
                    overlay: None,
                    base: root,
                };
                diff_views(&bare(ours_root), &bare(merged_root))?
            };
            let applied = !dry_run;
            if applied {
                e.reset_to_root(merged_root)?;
                // Merged into its parent, the fork's base becomes what was taken, so changes
                // left out (ignored ones) stay pending in the fork for a later
                // `merge --include-ignored`. Merged elsewhere (a sibling), the fork's base is
                // left alone: its changes have not reached its parent.
                if f.parent.as_deref() == Some(e.ws.name.as_str()) {
                    e.w.set_base_root(f.id, &taken)?;
                    e.op_extra = Some(
                        serde_json::json!({
                            "fork": f.id,
                            "fork_name": f.name,
                            "fork_created_at": f.created_at,
                            "fork_root_before": base_root.to_hex(),
                            "fork_root_after": taken.to_hex(),
                        })
                        .to_string(),
                    );
                }
                e.describe(format!("merge {fork} into {}", e.ws.name));
            }
            Ok(MergeReport {
                fork: fork.to_string(),
                into: e.ws.name.clone(),
                strategy: match strategy {
                    MergeStrategy::Fail => "fail",
                    MergeStrategy::Ours => "ours",
                    MergeStrategy::Theirs => "theirs",
                }
                .into(),
                dry_run,
                applied,
                changes,
                conflicts,
                text_merged,
                ignored,
            })
        })
    }
}

/// A state's reserved directory entries by name (empty when it has no hard links).
fn inode_entries(
    w: &dyn StoreRead,
    cache: &ObjectCache,
    root: &Node,
) -> Result<BTreeMap<String, Node>> {
    let NodeKind::Dir { tree: Some(t), .. } = &root.kind else {
        return Ok(BTreeMap::new());
    };
    let Some(dir) = cache.tree(w, t)?.get(INODES_DIR).cloned() else {
        return Ok(BTreeMap::new());
    };
    Ok(match &dir.kind {
        NodeKind::Dir { tree: Some(t), .. } => cache.tree(w, t)?.entries.iter().cloned().collect(),
        _ => BTreeMap::new(),
    })
}

/// After a three-way merge of roots: every inode's link count becomes the number of its
/// names in the merged tree, an inode left without names goes, and an inode one side
/// dropped while the other gave it a name comes back. Walks the merged tree, so only when
/// either side changed hard links.
pub(crate) fn reconcile_merge(
    w: &mut dyn StoreWrite,
    cache: &ObjectCache,
    merged: Node,
    base: &Node,
    ours: &Node,
    theirs: &Node,
) -> Result<Node> {
    let base_inodes = inode_entries(&*w, cache, base)?;
    let ours_inodes = inode_entries(&*w, cache, ours)?;
    let theirs_inodes = inode_entries(&*w, cache, theirs)?;
    if ours_inodes == base_inodes && theirs_inodes == base_inodes {
        return Ok(merged);
    }
    let root_id = store_root(w, &merged)?;
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    View {
        r: &*w,
        cache,
        overlay: None,
        base: root_id,
    }
    .walk_raw(&VPath::root(), &mut |_, n| {
        if let NodeKind::Link { inode } = n.kind {
            *counts.entry(inode).or_default() += 1;
        }
        Ok(())
    })?;
    let merged_inodes = inode_entries(&*w, cache, &merged)?;
    let mut inodes = BTreeMap::new();
    for (inode, count) in counts {
        let name = format!("{inode:016x}");
        let Some(mut body) = merged_inodes
            .get(&name)
            .or_else(|| theirs_inodes.get(&name))
            .or_else(|| ours_inodes.get(&name))
            .cloned()
        else {
            return Err(Error::CorruptVault {
                reason: format!("merge left names of hard-linked inode {inode:x} without it"),
            });
        };
        if let Some(nlink) = body.kind.nlink_mut() {
            *nlink = count;
        }
        inodes.insert(name, body);
    }
    let NodeKind::Dir { tree, .. } = &merged.kind else {
        return Ok(merged);
    };
    let mut entries: BTreeMap<String, Node> = match tree {
        Some(t) => cache.tree(&*w, t)?.entries.iter().cloned().collect(),
        None => BTreeMap::new(),
    };
    let dir = entries.remove(INODES_DIR);
    if !inodes.is_empty() {
        let dir = dir.unwrap_or_else(|| Node::empty_dir(0o700, super::now_ns()));
        entries.insert(INODES_DIR.to_string(), store_dir(w, dir, inodes)?);
    }
    store_dir(w, merged, entries)
}

/// Merge conflicts on a hard-linked file are found at its inode; report them under its
/// names in either state instead (a walk, only when there is such a conflict).
pub(crate) fn name_conflicts(
    r: &dyn StoreRead,
    cache: &ObjectCache,
    roots: [ObjectId; 2],
    conflicts: Vec<Conflict>,
) -> Result<Vec<Conflict>> {
    let prefix = format!("{}/", inodes_dir().display());
    if !conflicts.iter().any(|c| c.path.starts_with(&prefix)) {
        return Ok(conflicts);
    }
    let mut names: BTreeMap<u64, std::collections::BTreeSet<String>> = BTreeMap::new();
    for root in roots {
        View {
            r,
            cache,
            overlay: None,
            base: root,
        }
        .walk_raw(&VPath::root(), &mut |p, n| {
            if let NodeKind::Link { inode } = n.kind {
                names.entry(inode).or_default().insert(p.display());
            }
            Ok(())
        })?;
    }
    let mut out = Vec::new();
    for c in conflicts {
        let inode = c
            .path
            .strip_prefix(&prefix)
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        match inode.and_then(|i| names.get(&i)) {
            Some(paths) => out.extend(paths.iter().map(|p| Conflict {
                path: p.clone(),
                ..c.clone()
            })),
            None => out.push(c),
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
