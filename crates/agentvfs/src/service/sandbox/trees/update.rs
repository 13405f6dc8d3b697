//! Changing a fork's previous tree into the tree of a new root: by the difference of the
//! two roots (pruned by id), moving a command's files in from its layer where a donor has
//! them, with the rules for hard-linked files and the placeholders for secrets.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::super::super::transfer::{self, Skip};
use super::{remove_tree, tree_bytes};
use crate::error::{Error, Result};
use crate::model::View;
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;

/// Changing the tree of state `va` into the tree of state `vb`: `refuses` says what a
/// tree leaves out; `skip` says the same for the new state and notes the secrets it
/// meets. `changed` gets each path written or removed, `added` and `removed` the bytes.
pub(super) struct Update<'u, 'v> {
    pub(super) va: &'u View<'v>,
    pub(super) vb: &'u View<'v>,
    pub(super) refuses: &'u Skip<'u>,
    pub(super) skip: &'u Skip<'u>,
    /// Where the new state's files may be moved from instead of written.
    pub(super) donor: Option<&'u transfer::Donor<'u>>,
    pub(super) changed: Vec<VPath>,
    pub(super) added: u64,
    pub(super) removed: u64,
    /// How the hard-linked files differ between the states.
    pub(super) links: LinkChanges,
    /// The host path written for each new hard-linked file's first name.
    pub(super) linked: &'u std::cell::RefCell<std::collections::HashMap<u64, PathBuf>>,
}

/// Hard-linked files of two states, as an update may take them: whole files that came
/// (every name of theirs is new) or went (every name is gone). A file that stayed with
/// another body, or another number of names, is none of these: its names elsewhere would
/// not change with it.
#[derive(Default)]
pub(super) struct LinkChanges {
    /// Either state has hard-linked files.
    any: bool,
    came: std::collections::HashSet<u64>,
    went: std::collections::HashSet<u64>,
}

impl LinkChanges {
    /// `None` where a hard-linked file stayed but changed.
    pub(super) fn between(va: &View<'_>, vb: &View<'_>) -> Result<Option<LinkChanges>> {
        let (ba, bb) = (va.inode_bodies()?, vb.inode_bodies()?);
        let mut c = LinkChanges {
            any: !ba.is_empty() || !bb.is_empty(),
            ..Default::default()
        };
        for (inode, body) in &ba {
            match bb.get(inode) {
                Some(other) if other != body => return Ok(None),
                Some(_) => {}
                None => {
                    c.went.insert(*inode);
                }
            }
        }
        c.came
            .extend(bb.keys().filter(|i| !ba.contains_key(i)).copied());
        Ok(Some(c))
    }
}

impl Update<'_, '_> {
    /// Change the tree at `host`, its hard-linked files already found fit (`links`: a
    /// file that stayed but changed needs a whole write, as its body lives apart from its
    /// names, so the directories holding them do not change). Returns false (leaving it
    /// half changed) where the change needs a whole write after all: a name of a file
    /// that stayed came, went or moved (which can make its other names secret, and a
    /// name written alone would not be linked to the others); or a directory's extended
    /// attributes changed. Hard-linked files that came whole are written once, their
    /// other names linked.
    pub(super) fn tree(&mut self, host: &Path) -> Result<bool> {
        let (ra, _) = self.va.root()?;
        let (rb, _) = self.vb.root()?;
        self.dir(&VPath::root(), &ra, &rb, host)
    }

    fn dir(&mut self, path: &VPath, a: &Node, b: &Node, host: &Path) -> Result<bool> {
        if a.xattrs != b.xattrs {
            return Ok(false);
        }
        if !a.kind_eq(b) {
            let mut names: std::collections::BTreeMap<String, (Option<Node>, Option<Node>)> =
                Default::default();
            for c in self.va.children(path, a, false)? {
                names.entry(c.name).or_default().0 = Some(c.node);
            }
            for c in self.vb.children(path, b, false)? {
                names.entry(c.name).or_default().1 = Some(c.node);
            }
            for (name, (ca, cb)) in names {
                if ca == cb {
                    continue;
                }
                let p = path.join(&name);
                let out = host.join(&name);
                let (was, is) = (ca.clone(), cb.clone());
                let old = ca.filter(|n| !(self.refuses)(self.va, &p, n));
                let new = cb.filter(|n| !(self.skip)(self.vb, &p, n));
                match (old, new) {
                    (Some(x), Some(y)) if x.is_dir() && y.is_dir() => {
                        if !self.dir(&p, &x, &y, &out)? {
                            return Ok(false);
                        }
                    }
                    (_, new) => {
                        if self.links.any
                            && !(links_only(self.va, &p, was.as_ref(), &self.links.went)?
                                && links_only(self.vb, &p, is.as_ref(), &self.links.came)?)
                        {
                            return Ok(false);
                        }
                        self.changed.push(p.clone());
                        if std::fs::symlink_metadata(&out).is_ok() {
                            self.removed += entry_bytes(&out);
                            remove_entry(&out)?;
                        }
                        if new.is_some() {
                            transfer::materialize_entry(
                                self.vb,
                                &p,
                                &out,
                                self.skip,
                                self.donor,
                                &mut self.linked.borrow_mut(),
                            )?;
                            self.added += entry_bytes(&out);
                        }
                    }
                }
            }
        }
        transfer::set_dir_attrs(host, &b.attrs)?;
        Ok(true)
    }
}

/// Whether every hard-linked file that `node` at `path` in `view` is, or holds, a name
/// of is one of `inodes`.
pub(super) fn links_only(
    view: &View<'_>,
    path: &VPath,
    node: Option<&Node>,
    inodes: &std::collections::HashSet<u64>,
) -> Result<bool> {
    let ours = |n: &Node| n.link.is_none_or(|l| inodes.contains(&l.inode));
    match node {
        None => Ok(true),
        Some(n) if !n.is_dir() => Ok(ours(n)),
        Some(_) => {
            let mut all = true;
            view.walk(path, &mut |_, n| {
                all &= ours(n);
                Ok(())
            })?;
            Ok(all)
        }
    }
}

/// The bytes the entry at `path` (and all below it) takes on disk.
pub(super) fn entry_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => m.blocks() * 512 + tree_bytes(path),
        Ok(m) => m.blocks() * 512,
        Err(_) => 0,
    }
}

/// Make a placeholder in the tree at `host` for each secret in `met` (the topmost ones: a
/// secret directory stands for what is in it), restore the times of the directories that
/// got one, and return their workspace-relative paths. Only files and directories get
/// one; other secrets are left out.
pub(super) fn place(view: &View<'_>, host: &Path, met: &[(VPath, Node)]) -> Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt;
    let paths: std::collections::BTreeSet<&VPath> = met.iter().map(|(p, _)| p).collect();
    let mut parents = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (path, node) in met {
        let covered = path.ancestors().iter().any(|a| paths.contains(a));
        let file = matches!(node.kind, NodeKind::File { .. } | NodeKind::Inode { .. });
        if covered || !(node.is_dir() || file) {
            continue;
        }
        let rel = path.as_str().trim_start_matches('/');
        let at = host.join(rel);
        if node.is_dir() {
            std::fs::create_dir(&at).map_err(|e| Error::io("creating", &at, e))?;
        } else {
            File::create_new(&at).map_err(|e| Error::io("creating", &at, e))?;
        }
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o000))
            .map_err(|e| Error::io("setting mode of", &at, e))?;
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::lchown(&at, Some(node.attrs.uid), Some(node.attrs.gid))
                .map_err(|e| Error::io("setting owner of", &at, e))?;
        }
        transfer::set_times_ns(&at, node.attrs.atime, node.attrs.mtime)?;
        parents.extend(path.parent());
        out.push(rel.to_string());
    }
    for parent in parents {
        if let Some(node) = view.find(&parent)? {
            let rel = parent.as_str().trim_start_matches('/');
            let at = if rel.is_empty() {
                host.to_path_buf()
            } else {
                host.join(rel)
            };
            transfer::set_dir_attrs(&at, &node.attrs)?;
        }
    }
    Ok(out)
}

pub(super) fn remove_entry(out: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(out).map_err(|e| Error::io("reading", out, e))?;
    if meta.is_dir() {
        remove_tree(out);
        if out.exists() {
            return Err(Error::io(
                "removing",
                out,
                std::io::Error::other("the directory stayed"),
            ));
        }
        Ok(())
    } else {
        std::fs::remove_file(out).map_err(|e| Error::io("removing", out, e))
    }
}
