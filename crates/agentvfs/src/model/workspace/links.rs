//! Hard links as changes: `Edit` giving a file another name, sending a change through a
//! name to the shared inode, and dropping or unsharing names. Each hard-linked file is an
//! inode in the reserved directory (see `model::inode`); each name a `Link` node naming it.

use crate::error::{Error, Result};
use crate::model::Edit;
use crate::model::inode::{as_inode, inode_path, inodes_dir, is_reserved, refuse_reserved};
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;

/// What a node adds to the regular-file totals: (1, size) for a regular file.
fn counted(node: &Node) -> (i64, i64) {
    match node.kind {
        NodeKind::File { size, .. } => (1, size as i64),
        _ => (0, 0),
    }
}

fn link_node(inode: u64) -> Node {
    let attrs = crate::model::node::Attrs {
        mode: 0,
        uid: 0,
        gid: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
    };
    Node::new(NodeKind::Link { inode }, attrs)
}

impl Edit<'_> {
    /// What is stored at a user path (hard-linked names unresolved); the reserved
    /// directory is not there as far as users are concerned.
    pub(crate) fn stored(&self, path: &VPath) -> Result<Option<(Node, bool)>> {
        if is_reserved(path) {
            return Ok(None);
        }
        self.view().lookup_raw(path)
    }

    /// Give the node at `target` (anything but a directory) another name, `name` (link(2)).
    /// Both names then show one file: same content and attributes, and a change through
    /// either is seen through both. Returns the file as `name` shows it.
    pub fn link(&mut self, target: &VPath, name: &VPath) -> Result<Node> {
        let (node, _) = self.stored(target)?.ok_or_else(|| Error::PathNotFound {
            path: target.display(),
        })?;
        let refuse = |reason: &str| Error::HardLinkNotAllowed {
            path: target.display(),
            reason: reason.to_string(),
        };
        if node.is_dir() {
            return Err(refuse("it is a directory"));
        }
        refuse_reserved(name)?;
        if self.view().lookup_raw(name)?.is_some() {
            return Err(Error::AlreadyExists {
                name: name.display(),
            });
        }
        let name_parent = Self::parent_of(name)?;
        let parent_node = self.ensure_dir(&name_parent)?;
        let inode = match node.kind {
            NodeKind::Link { inode } => {
                let mut file = self.view().resolve(node)?;
                file.attrs.ctime = self.now;
                let nlink = file.link.map_or(1, |l| l.nlink) + 1;
                self.put_inode(inode, as_inode(file, nlink)?)?;
                inode
            }
            _ => {
                // The first link: the file moves into an inode and `target` becomes a name.
                let inode = self.new_inode(target, name)?;
                let mut file = node;
                file.attrs.ctime = self.now;
                self.put_inode(inode, as_inode(file, 2)?)?;
                self.ensure_dir(&Self::parent_of(target)?)?;
                self.put_raw(target, Some(&link_node(inode)))?;
                inode
            }
        };
        self.put_raw(name, Some(&link_node(inode)))?;
        self.stamp_dir(&name_parent, parent_node)?;
        self.view().resolve_inode(inode)
    }

    /// Write `file` (a resolved node after a change, of the same kind) as the new state of
    /// `inode`, keeping its link count.
    pub(crate) fn write_inode(&mut self, inode: u64, file: Node) -> Result<()> {
        let old = self.view().resolve_inode(inode)?;
        let nlink = old.link.map_or(1, |l| l.nlink);
        if file.is_file() {
            self.quota.check_file_size(file.size())?;
        }
        let ((of, ob), (nf, nb)) = (counted(&old), counted(&file));
        self.account(nf - of, nb - ob)?;
        self.put_inode(inode, as_inode(file, nlink)?)
    }

    /// One name of `inode` is gone: count it down, and drop the file with its last name.
    pub(crate) fn release(&mut self, inode: u64) -> Result<()> {
        let mut file = self.view().resolve_inode(inode)?;
        let nlink = file.link.map_or(1, |l| l.nlink);
        if nlink > 1 {
            file.attrs.ctime = self.now;
            return self.put_inode(inode, as_inode(file, nlink - 1)?);
        }
        let (f, b) = counted(&file);
        self.account(-f, -b)?;
        self.drop_inode(inode)
    }

    /// Remove `inode`'s entry. The reserved directory may be left empty: listing it here
    /// would make every release cost the number of inodes; the fold drops it instead.
    fn drop_inode(&mut self, inode: u64) -> Result<()> {
        let dir = inodes_dir();
        self.ensure_dir(&dir)?;
        self.unlink_entry(&dir, &inode_path(inode))
    }

    /// If `path` is a hard-linked name whose file has no other name left, store it as a
    /// plain file again. A link-then-unlink (how git stores every object) then leaves no
    /// shared inode behind. Nothing observable changes: same content, attributes and
    /// totals.
    pub fn unshare_single(&mut self, path: &VPath) -> Result<()> {
        let Some((node, _)) = self.stored(path)? else {
            return Ok(());
        };
        let NodeKind::Link { inode } = node.kind else {
            return Ok(());
        };
        let mut file = self.view().resolve_inode(inode)?;
        if file.link.is_some_and(|l| l.nlink > 1) {
            return Ok(());
        }
        file.link = None;
        self.drop_inode(inode)?;
        self.ensure_dir(&Self::parent_of(path)?)?;
        self.put_raw(path, Some(&file))
    }

    /// Release every hard-linked name below `path` (which is about to go). Free when the
    /// state has no hard links; otherwise it walks the subtree.
    pub(crate) fn release_links_below(&mut self, path: &VPath) -> Result<()> {
        for (_, inode) in self.links_below(path)? {
            self.release(inode)?;
        }
        Ok(())
    }

    /// Turn every hard-linked name below `path` into a file of its own (a copy's names
    /// must not share the original's inode).
    pub(crate) fn unshare_links_below(&mut self, path: &VPath) -> Result<()> {
        for (p, inode) in self.links_below(path)? {
            let mut file = self.view().resolve_inode(inode)?;
            file.link = None;
            let (f, b) = counted(&file);
            self.account(f, b)?;
            self.ensure_dir(&Self::parent_of(&p)?)?;
            self.put_raw(&p, Some(&file))?;
        }
        Ok(())
    }

    fn links_below(&self, path: &VPath) -> Result<Vec<(VPath, u64)>> {
        let mut out = Vec::new();
        if self.view().lookup_raw(&inodes_dir())?.is_none() {
            return Ok(out);
        }
        self.view().walk_raw(path, &mut |p, n| {
            if let NodeKind::Link { inode } = n.kind {
                out.push((p.clone(), inode));
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn put_inode(&mut self, inode: u64, body: Node) -> Result<()> {
        let dir = inodes_dir();
        if self.view().lookup_raw(&dir)?.is_none() {
            // Not `put_node`: the root keeps its times, as the reserved directory is not a
            // change anyone sees.
            self.ensure_dir(&VPath::root())?;
            self.put_raw(&dir, Some(&Node::empty_dir(0o700, self.now)))?;
        }
        self.ensure_dir(&dir)?;
        self.put_raw(&inode_path(inode), Some(&body))
    }

    /// A fresh inode number. Random-looking and unused here, so inodes created in two forks
    /// do not collide when one is merged into the other.
    fn new_inode(&self, target: &VPath, name: &VPath) -> Result<u64> {
        let mut h = blake3::Hasher::new();
        h.update(&self.now.to_le_bytes());
        h.update(&self.ws.id.to_le_bytes());
        h.update(&std::process::id().to_le_bytes());
        h.update(target.as_str().as_bytes());
        h.update(&[0]);
        h.update(name.as_str().as_bytes());
        let mut xof = h.finalize_xof();
        for _ in 0..16 {
            let mut b = [0u8; 8];
            xof.fill(&mut b);
            let inode = u64::from_le_bytes(b);
            if inode != 0 && self.view().lookup_raw(&inode_path(inode))?.is_none() {
                return Ok(inode);
            }
        }
        Err(Error::Storage("no free inode number".into()))
    }
}
