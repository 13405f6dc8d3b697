//! The handle table: open files and directories, each with the inode it serves and, for an
//! unlinked file, the node it still reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::attr::kind_of;
use super::errno::err;
use super::writeback::Dirty;
use super::{AttrKind, MResult, MountFs, ROOT_INO, libc_flags, lock};
use crate::model::buffer::ContentBuffer;
use crate::model::node::Node;

/// An open file handle and how the kernel should treat it.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub fh: u64,
    /// The kernel may keep the file's page cache: a read-only open of a file with no
    /// buffered writes (nothing else changes it).
    pub keep_cache: bool,
    /// close() must reach the session (to commit buffered writes). A read-only handle has
    /// nothing to commit, so its close costs no round trip.
    pub flush: bool,
}

#[derive(Default)]
pub(super) struct Handles {
    pub(super) by_fh: HashMap<u64, Handle>,
    /// How many handles each inode has open.
    pub(super) per_ino: HashMap<u64, usize>,
}

impl Handles {
    fn insert(&mut self, fh: u64, h: Handle) {
        *self.per_ino.entry(h.ino).or_default() += 1;
        self.by_fh.insert(fh, h);
    }

    fn remove(&mut self, fh: u64) -> Option<Handle> {
        let h = self.by_fh.remove(&fh)?;
        if let Some(n) = self.per_ino.get_mut(&h.ino) {
            *n -= 1;
            if *n == 0 {
                self.per_ino.remove(&h.ino);
            }
        }
        Some(h)
    }

    pub(super) fn get(&self, fh: u64) -> Option<&Handle> {
        self.by_fh.get(&fh)
    }

    fn any_open(&self, ino: u64) -> bool {
        self.per_ino.contains_key(&ino)
    }

    /// The handles open on `ino` (a scan: for the rare unlinked-but-open cases).
    pub(super) fn on_inode(&mut self, ino: u64) -> impl Iterator<Item = &mut Handle> {
        // Nothing to scan (the usual case: a file's last handle closing) costs nothing.
        let scan = if self.any_open(ino) {
            self.by_fh.len()
        } else {
            0
        };
        self.by_fh
            .values_mut()
            .take(scan)
            .filter(move |h| h.ino == ino)
    }
}

pub(super) struct Handle {
    pub(super) ino: u64,
    pub(super) append: bool,
    /// Writable handles hold a reference on the inode's write buffer.
    pub(super) writable: bool,
    /// The node when opened, so an unlinked file stays readable until closed.
    pub(super) snapshot: Option<Node>,
}

/// A directory entry as listed at opendir: (inode, kind, name).
pub(super) type DirEntry = (u64, AttrKind, String);

impl MountFs {
    /// Open an inode.
    pub fn open(&self, ino: u64, flags: i32) -> MResult<Opened> {
        self.refuse_secret(ino)?;
        let node = self.node(ino)?;
        let acc = flags & libc_flags::O_ACCMODE;
        let writable = acc == libc_flags::O_WRONLY || acc == libc_flags::O_RDWR;
        if writable && self.refuses_writes() {
            return Err(err(rustix::io::Errno::ROFS));
        }
        if node.is_dir() && writable {
            return Err(err(rustix::io::Errno::ISDIR));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if writable && node.is_file() {
            let mut dirty = lock(&self.dirty);
            match dirty.get_mut(&ino) {
                Some(d) => d.opens += 1,
                // Nothing is read now: the buffer reads the stored content where a
                // read or a partial write needs it, so opening a large file is O(1).
                None => {
                    dirty.insert(
                        ino,
                        Dirty {
                            buf: ContentBuffer::new(node.size() as usize),
                            base: node.clone(),
                            committing: Arc::default(),
                            node: node.clone(),
                            opens: 1,
                            version: 0,
                            committed_version: 0,
                        },
                    );
                }
            }
        }
        lock(&self.handles).insert(
            fh,
            Handle {
                ino,
                append: flags & libc_flags::O_APPEND != 0,
                writable: writable && node.is_file(),
                snapshot: Some(node),
            },
        );
        Ok(Opened {
            fh,
            keep_cache: !writable && !lock(&self.dirty).contains_key(&ino),
            flush: writable,
        })
    }

    pub fn release(&self, ino: u64, fh: u64) -> MResult<()> {
        let writable = lock(&self.handles).remove(fh).is_some_and(|h| h.writable);
        let mut counted = !writable;
        let mut attempts = 0;
        loop {
            let result = self.commit(ino);
            attempts += 1;
            let linked = matches!(lock(&self.inodes).by_ino.get(&ino), Some(Some(_)));
            let readers = lock(&self.handles).any_open(ino);
            let mut dirty = lock(&self.dirty);
            let Some(d) = dirty.get_mut(&ino) else {
                return result;
            };
            if !counted {
                d.opens = d.opens.saturating_sub(1);
                counted = true;
            }
            if d.opens > 0 {
                return result;
            }
            // The last writer is gone. A change after that commit (a truncate or chmod by
            // path) would go with the buffer: commit it too. (A path that is briefly not
            // the file's, in the middle of a rename, passes after a retry.)
            if linked && result.is_ok() && d.version != d.committed_version && attempts < 4 {
                continue;
            }
            // Readers still open, and the content is nowhere else: the file is unlinked,
            // or its last commit found no file to store at (removed behind the mount, or
            // by an unlink whose inode table update is still to come). They keep reading
            // the buffer until the last of them closes.
            let stored = d.version == d.committed_version;
            if readers && (!linked || !stored) {
                return result;
            }
            let node = d.node.clone();
            dirty.remove(&ino);
            drop(dirty);
            // Handles still open keep the file as last stored, should it be unlinked.
            for h in lock(&self.handles).on_inode(ino) {
                h.snapshot = Some(node.clone());
            }
            return result;
        }
    }

    pub fn opendir(&self, ino: u64) -> MResult<u64> {
        self.refuse_secret(ino)?;
        let path = self.path_of(ino)?;
        let children = self.read(|v| v.list(&path))?;
        let parent = path.parent().map(|p| self.ino_for(&p)).unwrap_or(ROOT_INO);
        let mut entries = vec![
            (ino, AttrKind::Dir, ".".to_string()),
            (parent, AttrKind::Dir, "..".to_string()),
        ];
        for c in children {
            if !self.shown(&path.join(&c.name)) {
                continue;
            }
            let child_ino = self.ino_of(&path.join(&c.name), &c.node);
            entries.push((child_ino, kind_of(&c.node.kind), c.name));
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        lock(&self.dirs).insert(fh, entries);
        Ok(fh)
    }

    /// Entries from `offset` on: a snapshot taken at opendir, so offsets stay stable while
    /// the directory changes.
    pub fn readdir(&self, fh: u64, offset: u64) -> MResult<Vec<(u64, u64, AttrKind, String)>> {
        let dirs = lock(&self.dirs);
        let entries = dirs.get(&fh).ok_or(err(rustix::io::Errno::BADF))?;
        Ok(entries
            .iter()
            .enumerate()
            .skip(offset as usize)
            .map(|(i, (ino, k, n))| (*ino, i as u64 + 1, *k, n.clone()))
            .collect())
    }

    pub fn releasedir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
    }
}
