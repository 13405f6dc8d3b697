//! Directory entries: looking names up, and creating, linking, renaming and removing them.

use super::attr::inherit_setgid;
use super::errno::err;
use super::{Attr, MResult, MountFs, SetAttr, libc_flags, lock};
use crate::error::Error;
use crate::model::node::{Attrs, Node, NodeKind};
use crate::model::now_ns;
use crate::model::path::VPath;

pub(super) fn name_ok(name: &str) -> MResult<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(err(rustix::io::Errno::INVAL));
    }
    if name.len() > 255 {
        return Err(err(rustix::io::Errno::NAMETOOLONG));
    }
    Ok(())
}

impl MountFs {
    pub fn lookup(&self, parent: u64, name: &str) -> MResult<Attr> {
        let path = self.visible_child(parent, name)?;
        let node = self.get_node(&path)?;
        let ino = self.ino_of(&path, &node);
        // Buffered writes not yet committed still count.
        let node = self.node(ino).unwrap_or(node);
        Ok(self.shown_attr_at(ino, &path, &node))
    }

    pub fn readlink(&self, ino: u64) -> MResult<Vec<u8>> {
        self.refuse_secret(ino)?;
        match self.node(ino)?.kind {
            NodeKind::Symlink { target } => Ok(target.into_bytes()),
            _ => Err(err(rustix::io::Errno::INVAL)),
        }
    }

    fn new_node(&self, kind: NodeKind, mode: u32, uid: u32, gid: u32) -> Node {
        let mut attrs = Attrs::new(mode, now_ns());
        attrs.uid = uid;
        attrs.gid = gid;
        Node::new(kind, attrs)
    }

    fn create_node(
        &self,
        op: &str,
        parent: u64,
        name: &str,
        node: Node,
        exclusive: bool,
    ) -> MResult<Attr> {
        let path = self.child(parent, name)?;
        self.edit(op, &[&path], |e| {
            if let Some((existing, _)) = e.view().lookup(&path)? {
                if exclusive || existing.is_dir() || !node.is_file() {
                    return Err(Error::AlreadyExists {
                        name: path.display(),
                    });
                }
                return Ok(());
            }
            let mut node = node;
            if let Some((dir, _)) = e.view().lookup(&path.parent().unwrap_or_default())? {
                inherit_setgid(&mut node, &dir);
            }
            e.put_node(&path, node)
        })?;
        self.lookup(parent, name)
    }

    pub fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> MResult<Attr> {
        let dir = self.new_node(
            NodeKind::Dir {
                tree: None,
                files: 0,
                bytes: 0,
            },
            mode,
            uid,
            gid,
        );
        self.create_node("mount.mkdir", parent, name, dir, true)
    }

    /// mknod(2): a regular file, FIFO, character or block device (`rdev`, a Linux `dev_t`)
    /// or socket. A device node is metadata only: the mount is `nodev`, so it never opens.
    /// (Who may make a device node, CAP_MKNOD, the kernel checks before asking.)
    pub fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let kind = Node::special_kind(mode, rdev).ok_or(err(rustix::io::Errno::INVAL))?;
        self.create_node(
            "mount.mknod",
            parent,
            name,
            self.new_node(kind, mode, uid, gid),
            true,
        )
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &str,
        target: &str,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let node = self.new_node(
            NodeKind::Symlink {
                target: target.to_string(),
            },
            0o777,
            uid,
            gid,
        );
        self.create_node("mount.symlink", parent, name, node, true)
    }

    /// Create (and open) a regular file.
    pub fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> MResult<(Attr, u64)> {
        let exclusive = flags & libc_flags::O_EXCL != 0;
        let file = self.new_node(
            NodeKind::File {
                size: 0,
                content: None,
            },
            mode,
            uid,
            gid,
        );
        let attr = self.create_node("mount.create", parent, name, file, exclusive)?;
        if flags & libc_flags::O_TRUNC != 0 && attr.size > 0 {
            self.setattr(
                attr.ino,
                SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )?;
        }
        let fh = self.open(attr.ino, flags)?.fh;
        Ok((self.getattr(attr.ino)?, fh))
    }

    pub fn unlink(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove_entry("mount.unlink", parent, name, false)
    }

    pub fn rmdir(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove_entry("mount.rmdir", parent, name, true)
    }

    /// unlink(2) (`dir` false: EISDIR on a directory) or rmdir(2) (`dir` true: ENOTDIR on
    /// anything else, ENOTEMPTY unless empty).
    fn remove_entry(&self, op: &str, parent: u64, name: &str, dir: bool) -> MResult<()> {
        let path = self.child(parent, name)?;
        // A hard-linked file down to one other name: that name becomes a plain file again.
        let survivor = {
            let inodes = lock(&self.inodes);
            inodes
                .by_path
                .get(&path)
                .and_then(|ino| inodes.names.get(ino))
                .filter(|names| names.len() == 2)
                .and_then(|names| names.iter().find(|n| **n != path).cloned())
        };
        // The survivor is not among the edit's paths: nothing anyone sees changes there,
        // and a linked name is never in the node cache.
        self.edit(op, &[&path], |e| {
            let (n, _) = e.view().lookup(&path)?.ok_or_else(|| Error::PathNotFound {
                path: path.display(),
            })?;
            match (n.is_dir(), dir) {
                (true, false) => Err(Error::IsADirectory {
                    path: path.display(),
                }),
                (false, true) => Err(Error::NotADirectory {
                    path: path.display(),
                }),
                _ => {
                    e.remove(&path, false)?;
                    match &survivor {
                        Some(s) => e.unshare_single(s),
                        None => Ok(()),
                    }
                }
            }
        })?;
        self.forget_linked_secrets();
        let ino = lock(&self.inodes).by_path.get(&path).copied();
        self.forget_path(&path);
        if let Some(ino) = ino {
            self.refresh_link_count(ino)?;
        }
        Ok(())
    }

    /// link(2): another name for the regular file `ino`.
    pub fn link(&self, ino: u64, newparent: u64, newname: &str) -> MResult<Attr> {
        // Another name for a secret would be a readable one.
        self.refuse_secret(ino)?;
        let target = self.path_of(ino)?;
        let name = self.child(newparent, newname)?;
        // Buffered content must land in the file before it gets a second name.
        self.commit(ino)?;
        let node = self.edit("mount.link", &[&target, &name], |e| e.link(&target, &name))?;
        self.forget_linked_secrets();
        if let Some(l) = node.link {
            let mut inodes = lock(&self.inodes);
            inodes.by_link.insert(l.inode, ino);
            let names = inodes.names.entry(ino).or_default();
            names.insert(target);
            names.insert(name.clone());
            inodes.by_path.insert(name, ino);
        }
        self.refresh_link_count(ino)?;
        self.lookup(newparent, newname)
    }

    /// After a name of `ino` came or went: its buffered node shows the new link count.
    fn refresh_link_count(&self, ino: u64) -> MResult<()> {
        if !lock(&self.dirty).contains_key(&ino) {
            return Ok(());
        }
        let Ok(path) = self.path_of(ino) else {
            return Ok(());
        };
        let node = self.read(|v| v.get(&path))?;
        if let Some(d) = lock(&self.dirty).get_mut(&ino) {
            d.node.link = node.link;
        }
        Ok(())
    }

    /// rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE.
    pub fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
        exchange: bool,
    ) -> MResult<()> {
        let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
        // Buffered content must land under the old name before the name moves.
        let from_ino = lock(&self.inodes).by_path.get(&from).copied();
        if let Some(ino) = from_ino {
            self.commit(ino)?;
        }
        self.edit("mount.rename", &[&from, &to], |e| {
            if exchange {
                return e.exchange(&from, &to);
            }
            if noreplace && e.view().lookup(&to)?.is_some() {
                return Err(Error::AlreadyExists { name: to.display() });
            }
            e.rename(&from, &to)
        })?;
        self.forget_linked_secrets();
        if exchange {
            let tmp = VPath::parse("\u{1}avfs-exchange").unwrap_or_default();
            self.move_paths(&to, &tmp);
            self.move_paths(&from, &to);
            self.move_paths(&tmp, &from);
        } else {
            let replaced = lock(&self.inodes).by_path.get(&to).copied();
            self.forget_path(&to);
            self.move_paths(&from, &to);
            // A hard-linked file replaced under one name has one name less.
            if let Some(ino) = replaced {
                self.refresh_link_count(ino)?;
            }
        }
        Ok(())
    }
}
