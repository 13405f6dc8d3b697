//! The inode table: inode numbers stable for the life of the mount, independent of content
//! ids, and the path of each; hard-linked files share one inode under every name.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use super::entries::name_ok;
use super::errno::err;
use super::{MResult, MountFs, NODE_CACHE_LIMIT, lock};
use crate::model::node::Node;
use crate::model::path::VPath;

#[derive(Default)]
pub(super) struct Inodes {
    /// `None` once the path was unlinked (open handles may still use the inode). For a
    /// hard-linked file: any one of its names.
    pub(super) by_ino: HashMap<u64, Option<VPath>>,
    /// Sorted, so a subtree is one range scan (unlink, rmdir and rename of a directory).
    pub(super) by_path: BTreeMap<VPath, u64>,
    /// Hard-linked files: the model's inode number to ours, so every name of one file has
    /// one inode here too.
    pub(super) by_link: HashMap<u64, u64>,
    /// Hard-linked files: the names seen so far, so unlinking one leaves `by_ino` on another.
    pub(super) names: HashMap<u64, BTreeSet<VPath>>,
    pub(super) next: u64,
}

impl MountFs {
    /// The node at `path`, from the cache when it is current.
    pub(super) fn get_node(&self, path: &VPath) -> MResult<Node> {
        if let Some(n) = lock(&self.nodes).get(path) {
            return Ok(n.clone());
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let node = self.read(|v| v.get(path))?;
        let mut nodes = lock(&self.nodes);
        // A hard-linked file also changes through its other names, which a change to this
        // path would not drop: never cached.
        if node.link.is_none() && self.generation.load(Ordering::SeqCst) == generation {
            if nodes.len() >= NODE_CACHE_LIMIT {
                nodes.clear();
            }
            nodes.insert(path.clone(), node.clone());
        }
        Ok(node)
    }

    pub(super) fn path_of(&self, ino: u64) -> MResult<VPath> {
        match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => Ok(p.clone()),
            _ => Err(err(rustix::io::Errno::NOENT)),
        }
    }

    pub(super) fn ino_for(&self, path: &VPath) -> u64 {
        let mut inodes = lock(&self.inodes);
        if let Some(i) = inodes.by_path.get(path) {
            return *i;
        }
        let ino = inodes.next;
        inodes.next += 1;
        inodes.by_ino.insert(ino, Some(path.clone()));
        inodes.by_path.insert(path.clone(), ino);
        ino
    }

    /// The inode of a name of hard-linked file `link` (the model's inode number): the one
    /// its other names have.
    fn ino_for_linked(&self, path: &VPath, link: u64) -> u64 {
        let mut inodes = lock(&self.inodes);
        let ino = match inodes.by_link.get(&link) {
            Some(i) => *i,
            None => {
                let ino = match inodes.by_path.get(path) {
                    Some(i) => *i,
                    None => {
                        inodes.next += 1;
                        inodes.next - 1
                    }
                };
                inodes.by_link.insert(link, ino);
                ino
            }
        };
        inodes.by_path.insert(path.clone(), ino);
        inodes.names.entry(ino).or_default().insert(path.clone());
        let current = inodes.by_ino.entry(ino).or_insert(None);
        if current.is_none() {
            *current = Some(path.clone());
        }
        ino
    }

    /// The inode of `path`, whose node is `node`.
    pub(super) fn ino_of(&self, path: &VPath, node: &Node) -> u64 {
        match node.link {
            Some(l) => self.ino_for_linked(path, l.inode),
            None => self.ino_for(path),
        }
    }

    /// `path` and everything below it that has an inode.
    fn subtree(inodes: &Inodes, path: &VPath) -> Vec<(VPath, u64)> {
        let mut out: Vec<(VPath, u64)> = inodes
            .by_path
            .get(path)
            .map(|i| (path.clone(), *i))
            .into_iter()
            .collect();
        match path.below_bounds() {
            Some((lo, hi)) => {
                out.extend(inodes.by_path.range(lo..hi).map(|(p, i)| (p.clone(), *i)))
            }
            None => out.extend(
                inodes
                    .by_path
                    .iter()
                    .filter(|(p, _)| !p.is_root())
                    .map(|(p, i)| (p.clone(), *i)),
            ),
        }
        out
    }

    pub(super) fn forget_path(&self, path: &VPath) {
        let mut inodes = lock(&self.inodes);
        for (p, ino) in Self::subtree(&inodes, path) {
            inodes.by_path.remove(&p);
            // A hard-linked file lives on under another name.
            let other = inodes.names.get_mut(&ino).and_then(|names| {
                names.remove(&p);
                names.first().cloned()
            });
            inodes.by_ino.insert(ino, other);
        }
    }

    pub(super) fn move_paths(&self, from: &VPath, to: &VPath) {
        let mut inodes = lock(&self.inodes);
        let moved = Self::subtree(&inodes, from);
        for (p, _) in &moved {
            inodes.by_path.remove(p);
        }
        for (p, ino) in moved {
            let np = p.rebase(from, to);
            if let Some(names) = inodes.names.get_mut(&ino) {
                names.remove(&p);
                names.insert(np.clone());
            }
            inodes.by_ino.insert(ino, Some(np.clone()));
            inodes.by_path.insert(np, ino);
        }
    }

    /// The path of `name` in `parent`, for a change: a secret cannot be created, replaced,
    /// renamed or removed (EACCES).
    pub(super) fn child(&self, parent: u64, name: &str) -> MResult<VPath> {
        let path = self.visible_child(parent, name)?;
        if self.is_hidden(&path, None) {
            return Err(err(rustix::io::Errno::ACCESS));
        }
        Ok(path)
    }

    /// The path of `name` in `parent`, for a lookup. A secret is there to be seen (its name,
    /// size and times, mode 000), so tools such as git see a tracked secret as present, not
    /// deleted; nothing below a secret directory can be looked up (EACCES).
    pub(super) fn visible_child(&self, parent: u64, name: &str) -> MResult<VPath> {
        name_ok(name)?;
        let dir = self.path_of(parent)?;
        if self.is_hidden(&dir, None) {
            return Err(err(rustix::io::Errno::ACCESS));
        }
        let path = dir.join(name);
        if !self.shown(&path) {
            return Err(err(rustix::io::Errno::NOENT));
        }
        Ok(path)
    }

    /// The current node of an inode, with buffered writes applied.
    pub(super) fn node(&self, ino: u64) -> MResult<Node> {
        if let Some(d) = lock(&self.dirty).get(&ino) {
            return Ok(d.node.clone());
        }
        let path = match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => p.clone(),
            Some(None) => {
                // Unlinked but open: serve the node it had when opened.
                return lock(&self.handles)
                    .on_inode(ino)
                    .find_map(|h| h.snapshot.clone())
                    .ok_or(err(rustix::io::Errno::NOENT));
            }
            None => return Err(err(rustix::io::Errno::NOENT)),
        };
        self.get_node(&path)
    }
}
