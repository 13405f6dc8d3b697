//! The tree changes an `Edit` makes: writing files, making directories and symlinks,
//! removing, renaming, exchanging, copying and updating entries.

use crate::error::{Error, Result};
use crate::model::inode;
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{Edit, WriteOptions};

impl<'a> Edit<'a> {
    fn mkdirs(&mut self, dir: &VPath) -> Result<()> {
        let mut cur = VPath::root();
        for comp in dir.components() {
            cur = cur.join(comp);
            match self.view().lookup(&cur)? {
                Some((n, _)) if n.is_dir() => {}
                Some(_) => {
                    return Err(Error::NotADirectory {
                        path: cur.display(),
                    });
                }
                None => {
                    let node = Node::empty_dir(0o755, self.now);
                    self.put_node(&cur, node)?;
                }
            }
        }
        Ok(())
    }

    /// Write a whole file, creating or replacing it. Existing files keep their mode, owner,
    /// xattrs, tags and metadata.
    pub fn write_file(&mut self, path: &VPath, bytes: &[u8], opts: WriteOptions) -> Result<()> {
        if opts.parents {
            self.mkdirs(&Self::parent_of(path)?)?;
        }
        let existing = self.view().lookup(path)?;
        let mut node = match existing {
            Some((n, _)) if n.is_dir() => {
                return Err(Error::IsADirectory {
                    path: path.display(),
                });
            }
            Some((n, _)) if n.is_file() => n,
            Some(_) => {
                return Err(Error::AlreadyExists {
                    name: path.display(),
                });
            }
            None => Node::new(
                NodeKind::File {
                    size: 0,
                    content: None,
                },
                crate::model::node::Attrs::new(opts.mode.unwrap_or(0o644), self.now),
            ),
        };
        let appended;
        let bytes = if opts.append && node.size() > 0 {
            appended = [self.view().read_node(&node)?, bytes.to_vec()].concat();
            appended.as_slice()
        } else {
            bytes
        };
        let content = self.store_content(bytes)?;
        node.kind = NodeKind::File {
            size: bytes.len() as u64,
            content,
        };
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        self.put_node(path, node)
    }

    /// Create a directory (and, with `parents`, missing ancestors; then an existing
    /// directory is not an error).
    pub fn mkdir(&mut self, path: &VPath, parents: bool, mode: u32) -> Result<()> {
        if parents {
            return self.mkdirs(path);
        }
        if path.is_root() || self.view().lookup(path)?.is_some() {
            return Err(Error::AlreadyExists {
                name: path.display(),
            });
        }
        self.put_node(path, Node::empty_dir(mode, self.now))
    }

    /// Create a symlink at `path` pointing to `target` (stored verbatim).
    pub fn symlink(&mut self, path: &VPath, target: &str) -> Result<()> {
        if self.view().lookup(path)?.is_some() {
            return Err(Error::AlreadyExists {
                name: path.display(),
            });
        }
        let node = Node::new(
            NodeKind::Symlink {
                target: target.to_string(),
            },
            crate::model::node::Attrs::new(0o777, self.now),
        );
        self.put_node(path, node)
    }

    /// Remove a file, symlink or (with `recursive`, or when empty) a directory.
    /// A hard-linked name is one name less for its file, which goes with its last name.
    pub fn remove(&mut self, path: &VPath, recursive: bool) -> Result<()> {
        let parent = Self::parent_of(path)?;
        let (node, overlaid) = self.stored(path)?.ok_or_else(|| Error::PathNotFound {
            path: path.display(),
        })?;
        if node.is_dir() && !recursive && !self.view().children(path, &node, overlaid)?.is_empty() {
            return Err(Error::DirectoryNotEmpty {
                path: path.display(),
            });
        }
        let (f, b) = self.view().totals(path, &node, overlaid)?;
        self.account(-(f as i64), -(b as i64))?;
        match node.kind {
            NodeKind::Link { inode } => self.release(inode)?,
            NodeKind::Dir { .. } => self.release_links_below(path)?,
            _ => {}
        }
        self.unlink_entry(&parent, path)?;
        self.touch_dir(&parent)
    }

    /// Drop `path` (and anything overlaid below it) from the workspace.
    pub(in crate::model) fn unlink_entry(&mut self, parent: &VPath, path: &VPath) -> Result<()> {
        let parent_node = self.ensure_dir(parent)?;
        self.w.overlay_delete_below(self.ws.id, path.as_str())?;
        let in_base = match &parent_node.kind {
            NodeKind::Dir { tree: Some(t), .. } => self.view().tree(t)?.get(path.name()).is_some(),
            _ => false,
        };
        if in_base {
            self.put_raw(path, None)
        } else {
            self.w.overlay_delete(self.ws.id, path.as_str())
        }
    }

    /// Move `src` to `dst`, replacing a file or an empty directory at `dst` like rename(2).
    pub fn rename(&mut self, src: &VPath, dst: &VPath) -> Result<()> {
        let (src_parent, dst_parent) = (Self::parent_of(src)?, Self::parent_of(dst)?);
        inode::refuse_reserved(dst)?;
        let (mut node, overlaid) = self.stored(src)?.ok_or_else(|| Error::PathNotFound {
            path: src.display(),
        })?;
        if src == dst {
            return Ok(());
        }
        if dst.starts_with(src) {
            return Err(Error::InvalidPath {
                path: dst.display(),
                reason: format!("cannot move {} into itself", src.display()),
            });
        }
        self.ensure_dir(&dst_parent)?;
        let replaced = self.view().lookup_raw(dst)?;
        if let (
            NodeKind::Link { inode: a },
            Some((
                Node {
                    kind: NodeKind::Link { inode: b },
                    ..
                },
                _,
            )),
        ) = (&node.kind, &replaced)
            && a == b
        {
            // Two names of one file: rename(2) does nothing.
            return Ok(());
        }
        if let Some((d, d_overlaid)) = replaced {
            if d.is_dir() {
                if !node.is_dir() {
                    return Err(Error::IsADirectory {
                        path: dst.display(),
                    });
                }
                if !self.view().children(dst, &d, d_overlaid)?.is_empty() {
                    return Err(Error::DirectoryNotEmpty {
                        path: dst.display(),
                    });
                }
            } else if node.is_dir() {
                return Err(Error::NotADirectory {
                    path: dst.display(),
                });
            }
            let (f, b) = self.view().totals(dst, &d, d_overlaid)?;
            self.account(-(f as i64), -(b as i64))?;
            if let NodeKind::Link { inode } = d.kind {
                self.release(inode)?;
            }
        }
        let below = if overlaid && node.is_dir() {
            self.w.overlay_below(self.ws.id, src.as_str())?
        } else {
            Vec::new()
        };
        self.unlink_entry(&src_parent, src)?;
        self.w.overlay_delete_below(self.ws.id, dst.as_str())?;
        if !matches!(node.kind, NodeKind::Link { .. }) {
            node.attrs.ctime = self.now;
        }
        self.ensure_dir(&dst_parent)?;
        self.put_raw(dst, Some(&node))?;
        self.move_rows(below, src, dst)?;
        self.touch_dir(&src_parent)?;
        self.touch_dir(&dst_parent)
    }

    /// Swap two existing paths atomically (rename(2) with RENAME_EXCHANGE).
    pub fn exchange(&mut self, a: &VPath, b: &VPath) -> Result<()> {
        let (pa, pb) = (Self::parent_of(a)?, Self::parent_of(b)?);
        let missing = |p: &VPath| Error::PathNotFound { path: p.display() };
        let (na, oa) = self.stored(a)?.ok_or_else(|| missing(a))?;
        let (nb, ob) = self.stored(b)?.ok_or_else(|| missing(b))?;
        if a == b {
            return Ok(());
        }
        if a.starts_with(b) || b.starts_with(a) {
            return Err(Error::InvalidPath {
                path: b.display(),
                reason: "cannot exchange a directory with its own descendant".into(),
            });
        }
        let rows = |e: &Self, p: &VPath, n: &Node, o: bool| {
            if o && n.is_dir() {
                e.w.overlay_below(e.ws.id, p.as_str())
            } else {
                Ok(Vec::new())
            }
        };
        let (ra, rb) = (rows(self, a, &na, oa)?, rows(self, b, &nb, ob)?);
        self.ensure_dir(&pa)?;
        self.ensure_dir(&pb)?;
        self.w.overlay_delete_below(self.ws.id, a.as_str())?;
        self.w.overlay_delete_below(self.ws.id, b.as_str())?;
        self.put_raw(a, Some(&nb))?;
        self.put_raw(b, Some(&na))?;
        self.move_rows(rb, b, a)?;
        self.move_rows(ra, a, b)?;
        self.touch_dir(&pa)?;
        self.touch_dir(&pb)
    }

    fn move_rows(
        &mut self,
        rows: Vec<(String, Option<Vec<u8>>)>,
        from: &VPath,
        to: &VPath,
    ) -> Result<()> {
        for (p, value) in rows {
            let new = VPath::parse(&p)?.rebase(from, to);
            let parent = new.parent().unwrap_or_default();
            self.w
                .overlay_put(self.ws.id, new.as_str(), parent.as_str(), value.as_deref())?;
        }
        Ok(())
    }

    /// Copy `src` to `dst`. If `dst` is a directory the copy goes inside it. Content is
    /// shared, not duplicated: copying a tree costs in proportion to its changed entries.
    pub fn copy(&mut self, src: &VPath, dst: &VPath, recursive: bool) -> Result<VPath> {
        let (mut node, overlaid) = self
            .view()
            .lookup(src)?
            .ok_or_else(|| Error::PathNotFound {
                path: src.display(),
            })?;
        if node.is_dir() && !recursive {
            return Err(Error::IsADirectory {
                path: src.display(),
            });
        }
        let target = match self.view().lookup(dst)? {
            Some((d, _)) if d.is_dir() && !src.is_root() => dst.join(src.name()),
            _ => dst.clone(),
        };
        if target.starts_with(src) {
            return Err(Error::InvalidPath {
                path: dst.display(),
                reason: format!("cannot copy {} into itself", src.display()),
            });
        }
        if let Some((existing, _)) = self.view().lookup(&target)?
            && (existing.is_dir() || node.is_dir())
        {
            return Err(Error::AlreadyExists {
                name: target.display(),
            });
        }
        let below = if overlaid && node.is_dir() {
            self.w.overlay_below(self.ws.id, src.as_str())?
        } else {
            Vec::new()
        };
        let (f, b) = self.view().totals(src, &node, overlaid)?;
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        if node.is_dir() {
            // The copied node's own totals describe its base tree; the overlaid rows below
            // it are accounted here, as a whole.
            let (tf, tb) = match node.kind {
                NodeKind::Dir { files, bytes, .. } => (files, bytes),
                _ => (0, 0),
            };
            self.account(f as i64 - tf as i64, b as i64 - tb as i64)?;
        }
        let is_dir = node.is_dir();
        self.put_node(&target, node)?;
        self.move_rows(below, src, &target)?;
        if is_dir {
            // Like cp -r: hard-linked names in the copied tree become files of their own.
            // (A file copied onto a name of a linked file writes that file, as cp does.)
            self.unshare_links_below(&target)?;
        }
        Ok(target)
    }

    /// Change a node's metadata (mode, times, owner, xattrs, tags, metadata).
    pub fn update(
        &mut self,
        path: &VPath,
        f: impl FnOnce(&mut Node) -> Result<()>,
    ) -> Result<Node> {
        let (mut node, _) = self
            .view()
            .lookup(path)?
            .ok_or_else(|| Error::PathNotFound {
                path: path.display(),
            })?;
        f(&mut node)?;
        node.attrs.ctime = self.now;
        if let Some(l) = node.link {
            self.write_inode(l.inode, node.clone())?;
            return Ok(node);
        }
        if path.is_root() {
            self.ensure_dir(path)?;
            self.put_raw(path, Some(&node))?;
        } else {
            let parent = Self::parent_of(path)?;
            self.ensure_dir(&parent)?;
            self.put_raw(path, Some(&node))?;
        }
        Ok(node)
    }
}
