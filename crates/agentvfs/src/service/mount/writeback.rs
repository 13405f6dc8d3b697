//! Write-back: per-inode write buffers, read through while open and committed in one
//! transaction on close, fsync or a size threshold, never one per `write()`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::attr::{kill_privs_on_write, set_size};
use super::errno::err;
use super::{MResult, MountFs, SetAttr, Writer, errno, lock};
use crate::model::buffer::{Changes, ContentBuffer};
use crate::model::id::ObjectId;
use crate::model::node::{CHUNK_SIZE, Node, NodeKind};
use crate::model::now_ns;

/// Commit a write buffer once the chunks changed since its last commit hold this many
/// bytes. A commit lets them leave memory, so a long write holds about this much (twice,
/// while a commit copies its chunks out) in the daemon, not the whole file.
const DIRTY_LIMIT: usize = 16 * 1024 * 1024;

pub(super) struct Dirty {
    /// The content: chunks written since open in memory, the rest read from `base`.
    pub(super) buf: ContentBuffer,
    /// A node whose content is the buffer's base: the file as opened, then as each commit
    /// stored it (so also what the last commit stored, and how long it was).
    pub(super) base: Node,
    pub(super) node: Node,
    /// Held by a commit of this inode from its snapshot until it is stored, so commits of
    /// one inode happen one after another and each patches the content the last stored.
    pub(super) committing: Arc<Mutex<()>>,
    /// Handles open on this inode; the buffer goes when the last one closes.
    pub(super) opens: usize,
    /// Bumped by every change to the buffer; commit records the version it saved, so
    /// "anything new since?" is a comparison of two numbers, not of two buffers.
    pub(super) version: u64,
    pub(super) committed_version: u64,
}

/// A content patch did not apply; the commit stores the whole buffer instead.
pub(super) struct Retry;

/// `node` with the given content of `size` bytes.
fn node_with_content(node: &Node, content: Option<ObjectId>, size: u64) -> Node {
    let mut n = node.clone();
    n.kind = NodeKind::File { size, content };
    n
}

impl MountFs {
    /// Read into `buf` from `offset`; returns how many bytes (short only at end of file).
    pub fn read_data_into(&self, ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> MResult<usize> {
        let buffered = lock(&self.dirty).get(&ino).map(|d| {
            let (n, from_base) = d.buf.read(offset as usize, buf);
            let base = (!from_base.is_empty()).then(|| d.base.clone());
            (n, from_base, base)
        });
        if let Some((n, from_base, base)) = buffered {
            // Unchanged ranges come from the stored content, read with no lock held. It
            // is immutable, so a write landing meanwhile only makes this read the older
            // bytes, as a read racing a write may.
            if let Some(base) = base {
                for r in from_base {
                    self.ws
                        .read_content(&base, r.from, &mut buf[r.at..r.at + r.len])
                        .map_err(|e| errno(&e))?;
                }
            }
            return Ok(n);
        }
        let unlinked = lock(&self.inodes)
            .by_ino
            .get(&ino)
            .is_some_and(Option::is_none);
        let snapshot = || lock(&self.handles).get(fh).and_then(|h| h.snapshot.clone());
        // An open file reads on after its last name is gone: unlinked here, or removed
        // behind the mount (its path no longer finds it).
        let node = match unlinked.then(snapshot).flatten() {
            Some(n) => n,
            None => match self.node(ino) {
                Ok(n) => n,
                Err(e) if e == err(rustix::io::Errno::NOENT) => snapshot().ok_or(e)?,
                Err(e) => return Err(e),
            },
        };
        if node.is_dir() {
            return Err(err(rustix::io::Errno::ISDIR));
        }
        self.ws
            .read_content(&node, offset, buf)
            .map_err(|e| errno(&e))
    }

    /// Run `f` on `ino`'s write buffer. `f` returns `Err` with the chunks it needs from the
    /// buffer's base first: they are read with no lock held (each is a store read) and `f`
    /// runs again, so the check and the change it guards happen in one locked step.
    fn with_buffer<R>(
        &self,
        ino: u64,
        mut f: impl FnMut(&mut Dirty) -> Result<MResult<R>, Vec<usize>>,
    ) -> MResult<R> {
        loop {
            let (base, shape, spans) = {
                let mut dirty = lock(&self.dirty);
                let d = dirty.get_mut(&ino).ok_or(err(rustix::io::Errno::BADF))?;
                match f(d) {
                    Ok(done) => return done,
                    Err(need) => {
                        let spans: Vec<_> =
                            need.into_iter().map(|i| (i, d.buf.base_span(i))).collect();
                        (d.base.clone(), d.buf.shape(), spans)
                    }
                }
            };
            let mut loaded = Vec::with_capacity(spans.len());
            for (i, (from, len)) in spans {
                let mut bytes = vec![0; len];
                self.ws
                    .read_content(&base, from, &mut bytes)
                    .map_err(|e| errno(&e))?;
                loaded.push((i, bytes));
            }
            if let Some(d) = lock(&self.dirty).get_mut(&ino) {
                for (i, bytes) in loaded {
                    d.buf.insert_base(i, shape, bytes);
                }
            }
        }
    }

    /// Write at `offset` (at the end for an O_APPEND handle). `kill_setid`: the writer
    /// may not keep set-ID bits (the kernel says so per write), and who it is.
    pub fn write_data(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_setid: Option<Writer>,
    ) -> MResult<u32> {
        let append = !self.writeback.load(Ordering::Relaxed)
            && lock(&self.handles).get(fh).is_some_and(|h| h.append);
        let over_limit = self.with_buffer(ino, |d| {
            let start = if append { d.buf.len() } else { offset as usize };
            let need = d.buf.missing_for_write(start, data.len());
            if !need.is_empty() {
                return Err(need);
            }
            Ok(self.write_buffered(d, start, data, kill_setid))
        })?;
        if over_limit {
            self.commit(ino)?;
        }
        Ok(data.len() as u32)
    }

    /// The write itself, with every chunk it needs in memory. Returns whether the buffer
    /// holds enough uncommitted chunks to commit now.
    fn write_buffered(
        &self,
        d: &mut Dirty,
        start: usize,
        data: &[u8],
        kill_setid: Option<Writer>,
    ) -> MResult<bool> {
        let end = start + data.len();
        let len = d.buf.len();
        if end > len {
            self.check_size(end as u64)?;
            let grow = (end - len) as u64;
            if let Some(limit) = self.quota.max_size_mb {
                let total = self.ws.totals().map(|(_, bytes)| bytes).unwrap_or(0);
                let pending = (len as u64).saturating_sub(d.base.size());
                if total.saturating_add(pending).saturating_add(grow)
                    > limit.saturating_mul(1024 * 1024)
                {
                    return Err(err(rustix::io::Errno::DQUOT));
                }
            }
        }
        d.buf.write(start, data);
        kill_privs_on_write(&mut d.node, kill_setid);
        let now = now_ns();
        set_size(&mut d.node, d.buf.len() as u64);
        d.node.attrs.mtime = now;
        d.node.attrs.ctime = now;
        d.version += 1;
        Ok(d.buf.touched_count() * CHUNK_SIZE > DIRTY_LIMIT)
    }

    /// Write an inode's buffered content in one transaction.
    pub fn commit(&self, ino: u64) -> MResult<()> {
        loop {
            let Some(gate) = lock(&self.dirty).get(&ino).map(|d| d.committing.clone()) else {
                return Ok(());
            };
            let _one_at_a_time = lock(&gate);
            // The buffer this gate belongs to may have been closed and another opened
            // meanwhile: a commit must hold the gate of the buffer it stores. Once held,
            // that buffer stays, as `release` drops one only after a commit of its own.
            if !lock(&self.dirty)
                .get(&ino)
                .is_some_and(|d| Arc::ptr_eq(&d.committing, &gate))
            {
                continue;
            }
            return match self.commit_once(ino, true) {
                Ok(done) => done,
                // The patch did not apply, e.g. the stored content was shorter than the
                // file (a size set past its stored bytes): store the whole buffer instead.
                Err(Retry) => self
                    .commit_once(ino, false)
                    .unwrap_or(Err(err(rustix::io::Errno::IO))),
            };
        }
    }

    /// One commit attempt, patching the stored content when `patch` allows.
    fn commit_once(&self, ino: u64, patch: bool) -> Result<MResult<()>, Retry> {
        let prepared = self.with_buffer(ino, |d| {
            if d.version == d.committed_version {
                return Ok(Ok(None));
            }
            // Stored in chunks: only the chunks changed since are copied out and stored,
            // so a small write into a large file (a database page) costs that chunk.
            let base = d
                .base
                .content_id()
                .filter(|_| patch && d.base.size() > CHUNK_SIZE as u64);
            let changes = d.buf.changes(base)?;
            let touched = d.buf.take_touched();
            Ok(Ok(Some((changes, touched, d.node.clone(), d.version))))
        });
        let (changes, touched, node, version) = match prepared {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(Ok(())),
            // Closed meanwhile: nothing left to commit.
            Err(e) if e == err(rustix::io::Errno::BADF) => return Ok(Ok(())),
            Err(e) => return Ok(Err(e)),
        };
        let result = self.store_snapshot(ino, &changes, &node);
        let len = node.size();
        if cfg!(debug_assertions)
            && len <= crate::model::limits::MAX_TEXT_BYTES
            && let Ok(Some(content)) = &result
        {
            // Debug builds check every stored content id against encoding it whole.
            let stored = node_with_content(&node, *content, len);
            let whole = crate::model::node::content_id_by_chunks(len, |at, out| {
                self.ws.read_content(&stored, at, out).map(|_| ())
            });
            debug_assert_eq!(Some(*content), whole.ok(), "content patch differs");
        }
        let mut dirty = lock(&self.dirty);
        let Some(d) = dirty.get_mut(&ino) else {
            return Ok(result.map(|_| ()));
        };
        match result {
            Ok(Some(stored)) => {
                d.committed_version = version;
                if d.version == version {
                    d.node = node_with_content(&d.node, stored, len);
                }
                // What was stored becomes the base: the chunks not written since leave
                // memory, so a long write holds at most about DIRTY_LIMIT of it.
                d.base = node_with_content(&node, stored, len);
                d.buf.rebase(len as usize);
                // New content under every name: it may now hold a private key.
                if node.link.is_some() {
                    self.forget_linked_secrets();
                }
                Ok(Ok(()))
            }
            other => {
                // Not stored (or the file has no path any more): a later commit stores
                // these chunks too.
                d.buf.retouch(touched);
                // A patch that did not apply (`patch_content` refuses it as invalid) is
                // retried whole; any other error (a quota, the store) would only repeat.
                match (other, &changes) {
                    (Err(e), Changes::Chunks { base: Some(_), .. })
                        if e == err(rustix::io::Errno::INVAL) =>
                    {
                        Err(Retry)
                    }
                    (other, _) => Ok(other.map(|_| ())),
                }
            }
        }
    }

    /// Store a buffered file's content and attributes at its path. Returns the stored
    /// content, or None when the file has no path any more (its content goes nowhere).
    fn store_snapshot(
        &self,
        ino: u64,
        changes: &Changes,
        node: &Node,
    ) -> MResult<Option<Option<ObjectId>>> {
        let path = match lock(&self.inodes).by_ino.get(&ino) {
            Some(Some(p)) => p.clone(),
            // Unlinked while open: its content goes nowhere.
            _ => return Ok(None),
        };
        self.edit("mount.write", &[&path], |e| {
            let content = e.store_changes(changes)?;
            let size = node.size();
            // Not a file at this path any more (unlinked, or in the middle of a rename):
            // not stored; a later commit tries again at the path the inode has then.
            let mut n = match e.view().lookup(&path)? {
                Some((cur, _)) if cur.is_file() => cur,
                _ => return Ok(None),
            };
            n.kind = NodeKind::File { size, content };
            n.attrs = node.attrs.clone();
            n.xattrs = node.xattrs.clone();
            e.put_node(&path, n)?;
            Ok(Some(content))
        })
    }

    /// close(2) of a handle. Under the writeback cache the commit waits for the release
    /// instead, which the kernel sends without making close wait: until then every read
    /// of the inode is served from its buffer, and anything that needs the content in the
    /// store (rename, link, fsync, a recorded command) commits it first. Without the
    /// writeback cache a size quota may be set, and its error belongs to close.
    pub fn flush(&self, ino: u64) -> MResult<()> {
        if !self.needs_flush() {
            return Ok(());
        }
        self.commit(ino)
    }

    /// Whether close(2) has anything to do here (see `flush`). Once the writeback cache is
    /// on, for the rest of the session it has not, and the FUSE adapter tells the kernel
    /// to stop asking: a round trip saved on every close.
    pub fn needs_flush(&self) -> bool {
        !self.writeback.load(Ordering::Relaxed)
    }

    /// Commit and make durable.
    pub fn fsync(&self, ino: u64) -> MResult<()> {
        self.commit(ino)?;
        self.ws.vault().sync().map_err(|e| errno(&e))
    }

    pub(super) fn refresh_dirty_meta(&self, ino: u64) -> MResult<()> {
        let has_dirty = lock(&self.dirty).contains_key(&ino);
        if has_dirty {
            let path = self.path_of(ino)?;
            let node = self.read(|v| v.get(&path))?;
            if let Some(d) = lock(&self.dirty).get_mut(&ino) {
                d.node.xattrs = node.xattrs;
                d.node.attrs.ctime = node.attrs.ctime;
            }
        }
        Ok(())
    }

    /// fallocate mode 0: make sure the file is at least `offset + len` long.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: i32) -> MResult<()> {
        if mode != 0 {
            return Err(err(rustix::io::Errno::OPNOTSUPP));
        }
        let grow = SetAttr {
            size: Some(offset + len),
            keep_setid: true,
            ..Default::default()
        };
        self.set_attrs(ino, grow, true).map(|_| ())
    }
}
