//! `Edit`: one change transaction on a workspace, with its clock, quota accounting and the
//! plumbing that stores nodes and contents and keeps parent directories in step.

use crate::error::{Error, Result};
use crate::model::buffer::{Changes, ContentBuffer};
use crate::model::fold::fold_overlay;
use crate::model::id::ObjectId;
use crate::model::inode;
use crate::model::node::{CHUNK_SIZE, Node, NodeKind, encode_content, patch_content};
use crate::model::path::VPath;
use crate::model::quota::Quota;
use crate::model::view::{ObjectCache, View};
use crate::store::{StoreWrite, WorkspaceRecord};

/// How a change is recorded.
pub(crate) enum Logging {
    /// An op-log entry from the state at the start (after settling a pending batch).
    Op,
    /// Audit record only (a batch of a larger operation).
    AuditOnly,
    /// Nothing (internal bookkeeping such as taking a snapshot root).
    None,
}

/// Options for writing a whole file.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Permission bits for a new file (default 0644). Existing files keep theirs.
    pub mode: Option<u32>,
    /// Create missing parent directories.
    pub parents: bool,
    /// Add to the end of an existing file instead of replacing its content.
    pub append: bool,
}

/// A change in progress, inside one write transaction.
pub struct Edit<'a> {
    pub(crate) w: &'a mut dyn StoreWrite,
    pub(crate) cache: &'a ObjectCache,
    pub(crate) ws: WorkspaceRecord,
    pub(crate) quota: Quota,
    pub(crate) now: i64,
    /// Overrides the op-log description (default: the paths).
    pub(crate) description: Option<String>,
    /// For undo/redo entries: the op they act on.
    pub(crate) undo_target: Option<i64>,
    /// Side effects to record with the op (see `OpRecord::extra`).
    pub(crate) op_extra: Option<String>,
    /// Audit records summing up operations this edit recorded for others (a batch's
    /// commit), written with the edit's own record.
    pub(crate) summaries: Vec<AuditSummary>,
    /// The newest op-log entry this edit appended, of any kind (a batch's included).
    pub(crate) newest_op: Option<i64>,
}

/// One operation's audit record: what it is, the paths it changed (at most
/// [`AuditSummary::MAX_PATHS`]) and a JSON detail.
pub(crate) struct AuditSummary {
    pub operation: String,
    pub paths: Vec<String>,
    pub detail: String,
}

impl AuditSummary {
    /// Paths listed in one record; the detail counts them all.
    pub const MAX_PATHS: usize = 1000;
}

impl<'a> Edit<'a> {
    /// A view of the state as changed so far in this transaction.
    pub fn view(&self) -> View<'_> {
        View {
            r: &*self.w,
            cache: self.cache,
            overlay: Some(self.ws.id),
            base: self.ws.base,
        }
    }

    /// A view of tree `root` of this vault (an immutable state, such as the one a command
    /// started from), read in this transaction.
    pub fn view_at(&self, root: ObjectId) -> View<'_> {
        View {
            r: &*self.w,
            cache: self.cache,
            overlay: None,
            base: root,
        }
    }

    pub fn now(&self) -> i64 {
        self.now
    }

    /// Make the change at `now` instead: a caller that was handed the moment of the change
    /// (a mount, by the kernel) stamps every time it sets with it.
    pub fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    pub(super) fn flush_totals(&mut self) -> Result<()> {
        self.w
            .update_workspace_state(self.ws.id, &self.ws.base, self.ws.files, self.ws.bytes)
    }

    /// Describe this change in the op log (default: the paths it names).
    pub fn describe(&mut self, description: String) {
        self.description = Some(description);
    }

    /// Apply a change of the workspace totals, checking quotas before anything is written.
    pub(in crate::model) fn account(&mut self, files: i64, bytes: i64) -> Result<()> {
        let nf = (self.ws.files as i64 + files).max(0) as u64;
        let nb = (self.ws.bytes as i64 + bytes).max(0) as u64;
        if files > 0 || bytes > 0 {
            self.quota.check_totals(
                if files > 0 { nf } else { 0 },
                if bytes > 0 { nb } else { 0 },
            )?;
        }
        self.ws.files = nf;
        self.ws.bytes = nb;
        Ok(())
    }

    pub(in crate::model) fn put_raw(&mut self, path: &VPath, node: Option<&Node>) -> Result<()> {
        let parent = path.parent().unwrap_or_default();
        let bytes = match node {
            Some(n) => Some(postcard::to_stdvec(n).map_err(|e| Error::Storage(e.to_string()))?),
            None => None,
        };
        self.w
            .overlay_put(self.ws.id, path.as_str(), parent.as_str(), bytes.as_deref())
    }

    /// Make `dir` and its ancestors overlay entries (copied from the base where needed)
    /// and return the directory's node.
    pub(in crate::model) fn ensure_dir(&mut self, dir: &VPath) -> Result<Node> {
        // Already overlaid: so are its ancestors (rows are only written below overlaid
        // directories), and there is nothing to copy.
        if let Some(Some(node)) = self.view().overlay_node(dir)?
            && node.is_dir()
        {
            debug_assert!(
                dir.ancestors().iter().all(
                    |a| matches!(self.view().overlay_node(a), Ok(Some(Some(n))) if n.is_dir())
                ),
                "an overlaid directory below a non-overlaid one: {dir:?}"
            );
            return Ok(node);
        }
        let mut chain = dir.ancestors();
        chain.push(dir.clone());
        let mut parent: Option<Node> = None;
        let mut in_overlay = true;
        for p in chain {
            let node = if in_overlay {
                match self.view().overlay_node(&p)? {
                    Some(Some(n)) => Some(n),
                    Some(None) => None,
                    None => {
                        in_overlay = false;
                        self.derive(&p, parent.as_ref())?
                    }
                }
            } else {
                self.derive(&p, parent.as_ref())?
            };
            let node = node.ok_or_else(|| Error::PathNotFound { path: p.display() })?;
            if !node.is_dir() {
                return Err(Error::NotADirectory { path: p.display() });
            }
            if !in_overlay {
                self.put_raw(&p, Some(&node))?;
            }
            parent = Some(node);
        }
        parent.ok_or_else(|| Error::Storage("empty ancestor chain".into()))
    }

    /// The base node of `p` given its parent's node.
    fn derive(&self, p: &VPath, parent: Option<&Node>) -> Result<Option<Node>> {
        let Some(parent) = parent else {
            return Ok(Some(self.view().root()?.0));
        };
        match &parent.kind {
            NodeKind::Dir { tree: Some(t), .. } => Ok(self.view().tree(t)?.get(p.name()).cloned()),
            _ => Ok(None),
        }
    }

    /// Mark a directory's contents as changed now.
    pub(in crate::model) fn touch_dir(&mut self, dir: &VPath) -> Result<()> {
        let node = self.ensure_dir(dir)?;
        self.stamp_dir(dir, node)
    }

    /// Store an already-overlaid directory node with its times set to now.
    pub(in crate::model) fn stamp_dir(&mut self, dir: &VPath, mut node: Node) -> Result<()> {
        node.attrs.mtime = self.now;
        node.attrs.ctime = self.now;
        self.put_raw(dir, Some(&node))
    }

    pub(in crate::model) fn parent_of(path: &VPath) -> Result<VPath> {
        path.parent().ok_or_else(|| Error::InvalidPath {
            path: "/".into(),
            reason: "the workspace root cannot be changed this way".into(),
        })
    }

    /// Store file content and return its id.
    pub fn store_content(&mut self, bytes: &[u8]) -> Result<Option<ObjectId>> {
        self.quota.check_file_size(bytes.len() as u64)?;
        let (id, objects) = encode_content(bytes)?;
        for o in objects {
            self.w.put_object(&o.id, o.kind, &o.data)?;
        }
        Ok(id)
    }

    /// Store a buffer's changed content (see `ContentBuffer::changes`): against a chunked
    /// base, only the chunks it names are hashed and stored, so a small write into a large
    /// file costs the chunks it touched, not the whole file.
    pub fn store_changes(&mut self, changes: &Changes) -> Result<Option<ObjectId>> {
        let (len, base, chunks) = match changes {
            Changes::Small(bytes) => return self.store_content(bytes),
            Changes::Chunks { base, len, chunks } => (*len, base, chunks),
        };
        self.quota.check_file_size(len)?;
        let old = match base {
            Some(base) => Some(self.cache.chunk_index(&*self.w, base)?),
            None => None,
        };
        let old = old.as_ref().map_or(&[][..], |o| &o.chunks[..]);
        let (id, objects) = patch_content(old, len, chunks)?;
        for o in objects {
            self.w.put_object(&o.id, o.kind, &o.data)?;
        }
        Ok(id)
    }

    /// Store the content of file `node` cut, or zero-extended, to `size` bytes. Only the
    /// chunk holding the new end is read, so truncating a large file costs one chunk.
    pub fn resize_content(&mut self, node: &Node, size: u64) -> Result<Option<ObjectId>> {
        self.quota.check_file_size(size)?;
        let mut buf = ContentBuffer::new(node.size() as usize);
        buf.resize(size as usize);
        let base = node
            .content_id()
            .filter(|_| node.size() > CHUNK_SIZE as u64);
        loop {
            match buf.changes(base) {
                Ok(changes) => return self.store_changes(&changes),
                Err(need) => {
                    let shape = buf.shape();
                    for i in need {
                        let (from, len) = buf.base_span(i);
                        let bytes = self.view().read_node_range(node, from, len as u64)?;
                        buf.insert_base(i, shape, bytes);
                    }
                }
            }
        }
    }

    /// Put `node` at `path`, replacing what is there. Parents must exist. Quotas are checked
    /// against the totals the change produces before anything is written.
    /// A regular file put over a hard-linked name changes the shared file (as writing
    /// through that name does); anything else replaces the name, which the file loses.
    pub fn put_node(&mut self, path: &VPath, node: Node) -> Result<()> {
        inode::refuse_reserved(path)?;
        let parent = Self::parent_of(path)?;
        let parent_node = self.ensure_dir(&parent)?;
        let old = self.view().lookup_raw(path)?;
        if let Some((
            Node {
                kind: NodeKind::Link { inode },
                ..
            },
            _,
        )) = &old
        {
            if node.is_file() {
                return self.write_inode(*inode, node);
            }
            self.release(*inode)?;
        }
        if let Some((n, _)) = &old
            && n.is_dir()
        {
            self.release_links_below(path)?;
        }
        let (of, ob) = match &old {
            Some((n, o)) => self.view().totals(path, n, *o)?,
            None => (0, 0),
        };
        let (nf, nb) = match &node.kind {
            NodeKind::File { size, .. } => {
                self.quota.check_file_size(*size)?;
                (1, *size)
            }
            NodeKind::Dir { files, bytes, .. } => (*files, *bytes),
            _ => (0, 0),
        };
        self.account(nf as i64 - of as i64, nb as i64 - ob as i64)?;
        if old.as_ref().is_some_and(|(n, o)| *o && n.is_dir()) {
            self.w.overlay_delete_below(self.ws.id, path.as_str())?;
        }
        self.put_raw(path, Some(&node))?;
        if old.is_none() {
            // Writing the child leaves the parent's overlay row as ensure_dir returned it.
            self.stamp_dir(&parent, parent_node)?;
        }
        Ok(())
    }

    /// Fold the overlay into immutable objects and return the new root id. The overlay is
    /// left in place; callers decide whether to clear it. Cost: O(overlay entries).
    pub(crate) fn fold(&mut self) -> Result<ObjectId> {
        fold_overlay(self.w, self.cache, self.ws.id, self.ws.base)
    }
}
