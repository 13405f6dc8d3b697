//! Reading a workspace state: the overlay of a workspace (if any) over an immutable root.
//! Lookups fall through the overlay to the base trees. Invariant kept by `Edit`: every
//! overlaid path has all its ancestors overlaid, so once a lookup leaves the overlay it never
//! needs to consult it again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::id::ObjectId;
use super::inode;
use super::node::{ChunkRef, Node, NodeKind, Tree, kind};
use super::path::VPath;
use crate::error::{Error, Result};
use crate::store::StoreRead;

/// Decoded immutable objects, shared by every view of a vault. Safe to cache forever
/// because an id always names the same bytes.
#[derive(Default)]
pub(crate) struct ObjectCache {
    trees: Mutex<Cached<Arc<Tree>>>,
    roots: Mutex<Cached<Node>>,
    chunk_lists: Mutex<Cached<Arc<ChunkIndex>>>,
}

/// One kind of decoded object, with their total weight (entries held).
struct Cached<T> {
    map: HashMap<ObjectId, T>,
    weight: usize,
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached {
            map: HashMap::new(),
            weight: 0,
        }
    }
}

/// A large file's chunk list, with where each chunk starts: a read finds its first chunk by
/// binary search instead of decoding the list again.
pub(crate) struct ChunkIndex {
    starts: Vec<u64>,
    pub(crate) chunks: Vec<ChunkRef>,
}

/// Objects cached at once, of each kind.
const CACHE_LIMIT: usize = 8192;

/// The most tree entries (or chunk-list entries) cached at once, across all cached trees
/// (lists): what bounds the memory. Every change to a large directory is a new tree, and a
/// long-lived mount or session daemon sees thousands of them; counting objects alone let a
/// daemon grow without bound while agents kept writing into one directory.
const WEIGHT_LIMIT: usize = 1 << 18;

/// The value cached under `id`, or `load`'s, kept (a cache past its limits starts over).
fn cached<T: Clone>(
    cache: &Mutex<Cached<T>>,
    id: &ObjectId,
    weight: impl Fn(&T) -> usize,
    load: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).map.get(id) {
        return Ok(v.clone());
    }
    let v = load()?;
    let w = weight(&v) + 1;
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    if c.map.len() >= CACHE_LIMIT || c.weight + w > WEIGHT_LIMIT {
        c.map.clear();
        c.weight = 0;
    }
    if c.map.insert(*id, v.clone()).is_none() {
        c.weight += w;
    }
    Ok(v)
}

impl ObjectCache {
    pub(crate) fn tree(&self, r: &dyn StoreRead, id: &ObjectId) -> Result<Arc<Tree>> {
        cached(
            &self.trees,
            id,
            |t| t.entries.len(),
            || Ok(Arc::new(decode(load(r, id, kind::TREE)?.as_slice())?)),
        )
    }

    pub(crate) fn chunk_index(&self, r: &dyn StoreRead, id: &ObjectId) -> Result<Arc<ChunkIndex>> {
        cached(
            &self.chunk_lists,
            id,
            |l| l.chunks.len(),
            || {
                let chunks: Vec<ChunkRef> = decode(&load(r, id, kind::CHUNK_LIST)?)?;
                let starts = chunks
                    .iter()
                    .scan(0u64, |pos, c| {
                        let start = *pos;
                        *pos += c.len;
                        Some(start)
                    })
                    .collect();
                Ok(Arc::new(ChunkIndex { starts, chunks }))
            },
        )
    }

    /// The chunk index of `id` if it is cached (no store access).
    fn cached_chunk_index(&self, id: &ObjectId) -> Option<Arc<ChunkIndex>> {
        let lists = self.chunk_lists.lock().unwrap_or_else(|p| p.into_inner());
        lists.map.get(id).cloned()
    }

    pub(crate) fn root(&self, r: &dyn StoreRead, id: &ObjectId) -> Result<Node> {
        cached(
            &self.roots,
            id,
            |_| 0,
            || decode(load(r, id, kind::ROOT)?.as_slice()),
        )
    }
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    Ok(postcard::from_bytes(bytes)?)
}

/// Load an object and check it has the expected kind.
pub(crate) fn load(r: &dyn StoreRead, id: &ObjectId, want: u8) -> Result<Vec<u8>> {
    match r.object(id)? {
        Some(o) if o.kind == want => Ok(o.data),
        Some(o) => Err(Error::CorruptVault {
            reason: format!(
                "object {} has kind {} where {} was expected",
                id.short(),
                o.kind,
                want
            ),
        }),
        None => Err(Error::CorruptVault {
            reason: format!("object {} is missing", id.short()),
        }),
    }
}

fn missing(id: &ObjectId) -> Error {
    Error::CorruptVault {
        reason: format!("content {} is missing", id.short()),
    }
}

/// Copy the content of file `node` from `offset` into `buf`, as much as fits before the end
/// of the file; returns how many bytes. Content is addressed by id, so this needs no
/// workspace state, and it reads only the chunks, and the parts of them, that the range
/// covers, straight into `buf`. Holes, and bytes past the stored content (a file truncated
/// up), read as zeros.
pub(crate) fn read_content(
    r: &dyn StoreRead,
    cache: &ObjectCache,
    node: &Node,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    let NodeKind::File { size, content } = &node.kind else {
        return Err(Error::invalid("not a regular file"));
    };
    let end = (*size).min(offset.saturating_add(buf.len() as u64));
    if offset >= end {
        return Ok(0);
    }
    let out = &mut buf[..(end - offset) as usize];
    let filled = match content {
        None => 0,
        Some(id) => match cache.cached_chunk_index(id) {
            Some(index) => read_chunks(r, &index, offset, out)?,
            // One query either way: a single chunk's bytes land in `out`; a chunk list's
            // bytes landed there too, and `read_chunks` then overwrites all of it.
            None => match r
                .object_read_at(id, offset, out)?
                .ok_or_else(|| missing(id))?
            {
                (kind::CHUNK, n) => n,
                (kind::CHUNK_LIST, _) => {
                    let index = cache.chunk_index(r, id)?;
                    read_chunks(r, &index, offset, out)?
                }
                (k, _) => {
                    return Err(Error::CorruptVault {
                        reason: format!("file content {} has kind {k}", id.short()),
                    });
                }
            },
        },
    };
    out[filled..].fill(0);
    Ok(out.len())
}

/// Fill `out` from the chunks of `index`, starting at file offset `offset`; returns how many
/// bytes the chunks cover (less than `out` only past the last one).
fn read_chunks(
    r: &dyn StoreRead,
    index: &ChunkIndex,
    offset: u64,
    out: &mut [u8],
) -> Result<usize> {
    let mut i = index
        .starts
        .partition_point(|&s| s <= offset)
        .saturating_sub(1);
    let (mut pos, mut done) = (offset, 0);
    while done < out.len() && i < index.chunks.len() {
        let (start, chunk) = (index.starts[i], &index.chunks[i]);
        i += 1;
        let end = start + chunk.len;
        if end <= pos {
            continue;
        }
        let take = ((end - pos) as usize).min(out.len() - done);
        let dst = &mut out[done..done + take];
        match &chunk.id {
            None => dst.fill(0),
            Some(cid) => match r.object_read_at(cid, pos - start, dst)? {
                Some((kind::CHUNK, n)) => dst[n..].fill(0),
                Some((k, _)) => {
                    return Err(Error::CorruptVault {
                        reason: format!("chunk {} has kind {k}", cid.short()),
                    });
                }
                None => return Err(missing(cid)),
            },
        }
        done += take;
        pos += take as u64;
    }
    Ok(done)
}

/// A directory entry as listed.
#[derive(Debug, Clone)]
pub struct Child {
    pub name: String,
    pub node: Node,
    /// True if the entry lives in the overlay (changed since the base).
    pub overlaid: bool,
}

/// A consistent read view of one workspace state.
pub struct View<'a> {
    pub(crate) r: &'a dyn StoreRead,
    pub(crate) cache: &'a ObjectCache,
    /// The workspace whose overlay applies, or `None` for a bare root (a checkpoint).
    pub(crate) overlay: Option<i64>,
    pub(crate) base: ObjectId,
}

/// A node's bytes, to compare nodes in debug assertions.
fn postcard_of(n: &Node) -> Vec<u8> {
    postcard::to_stdvec(n).unwrap_or_default()
}

impl<'a> View<'a> {
    pub(crate) fn tree(&self, id: &ObjectId) -> Result<Arc<Tree>> {
        self.cache.tree(self.r, id)
    }

    pub(crate) fn overlay_node(&self, path: &VPath) -> Result<Option<Option<Node>>> {
        let Some(ws) = self.overlay else {
            return Ok(None);
        };
        match self.r.overlay_get(ws, path.as_str())? {
            None => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some(bytes)) => Ok(Some(Some(decode(&bytes)?))),
        }
    }

    /// The root directory's node and whether it is overlaid.
    pub(crate) fn root(&self) -> Result<(Node, bool)> {
        match self.overlay_node(&VPath::root())? {
            Some(Some(n)) => Ok((n, true)),
            _ => Ok((self.cache.root(self.r, &self.base)?, false)),
        }
    }

    /// Resolve `path` (symlinks are not followed; a hard-linked name gives its file, with
    /// `Node::link` set). `Ok(None)` if nothing is there; `NotADirectory` if a non-final
    /// component is not a directory.
    pub fn lookup(&self, path: &VPath) -> Result<Option<(Node, bool)>> {
        if inode::is_reserved(path) {
            return Ok(None);
        }
        match self.lookup_raw(path)? {
            Some((node, overlaid)) => Ok(Some((self.resolve(node)?, overlaid))),
            None => Ok(None),
        }
    }

    /// A stored node as readers see it: a hard-linked name becomes its file.
    pub(crate) fn resolve(&self, node: Node) -> Result<Node> {
        match node.kind {
            NodeKind::Link { inode } => self.resolve_inode(inode),
            _ => Ok(node),
        }
    }

    /// The file a name of `inode` shows: a `File` node carrying `LinkInfo`.
    pub(crate) fn resolve_inode(&self, inode: u64) -> Result<Node> {
        let body = self
            .lookup_raw(&inode::inode_path(inode))?
            .ok_or_else(|| Error::CorruptVault {
                reason: format!("hard-linked inode {inode:x} is missing"),
            })?
            .0;
        inode::as_file(body, inode)
    }

    /// What is stored at `path`: hard-linked names are not resolved and the reserved
    /// directory is not hidden. For the model's own bookkeeping.
    pub(crate) fn lookup_raw(&self, path: &VPath) -> Result<Option<(Node, bool)>> {
        let found = self.lookup_overlaid(path)?;
        if let Some(found) = found {
            debug_assert_eq!(
                found.as_ref().map(|(n, o)| (postcard_of(n), *o)),
                self.lookup_walk(path)?
                    .as_ref()
                    .map(|(n, o)| (postcard_of(n), *o)),
                "overlay shortcut for {path:?}"
            );
            return Ok(found);
        }
        self.lookup_walk(path)
    }

    /// `lookup_raw` without walking, when the overlay has the answer. Overlay rows are
    /// only written below overlaid directories (`Edit::ensure_dir`) and go with their
    /// directory, so a row for the path itself is the answer, and a row for its parent
    /// alone means the path is in the parent's base tree if anywhere. Two or three point
    /// queries instead of one per path component. `None`: walk.
    fn lookup_overlaid(&self, path: &VPath) -> Result<Option<Option<(Node, bool)>>> {
        let Some(parent) = path.parent() else {
            return Ok(None);
        };
        match self.overlay_node(path)? {
            Some(Some(n)) => return Ok(Some(Some((n, true)))),
            Some(None) => return Ok(Some(None)),
            None => {}
        }
        match self.overlay_node(&parent)? {
            Some(Some(Node {
                kind: NodeKind::Dir {
                    tree: Some(tree), ..
                },
                ..
            })) => Ok(Some(
                self.tree(&tree)?
                    .get(path.name())
                    .map(|n| (n.clone(), false)),
            )),
            Some(Some(Node {
                kind: NodeKind::Dir { tree: None, .. },
                ..
            })) => Ok(Some(None)),
            _ => Ok(None),
        }
    }

    fn lookup_walk(&self, path: &VPath) -> Result<Option<(Node, bool)>> {
        let (mut node, mut overlaid) = self.root()?;
        let mut cur = VPath::root();
        for comp in path.components() {
            if !node.is_dir() {
                return Err(Error::NotADirectory {
                    path: cur.display(),
                });
            }
            cur = cur.join(comp);
            if overlaid {
                match self.overlay_node(&cur)? {
                    Some(None) => return Ok(None),
                    Some(Some(n)) => {
                        node = n;
                        continue;
                    }
                    None => overlaid = false,
                }
            }
            let NodeKind::Dir {
                tree: Some(tree), ..
            } = &node.kind
            else {
                return Ok(None);
            };
            match self.tree(tree)?.get(comp) {
                Some(n) => node = n.clone(),
                None => return Ok(None),
            }
        }
        Ok(Some((node, overlaid)))
    }

    /// The node at `path`, or `None` if nothing is there, including when a parent is not
    /// a directory (as when comparing two states where a path's type changed).
    pub fn find(&self, path: &VPath) -> Result<Option<Node>> {
        match self.lookup(path) {
            Ok(n) => Ok(n.map(|(n, _)| n)),
            Err(Error::NotADirectory { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Like `lookup`, but a missing path is a `PathNotFound` error.
    pub fn get(&self, path: &VPath) -> Result<Node> {
        self.lookup(path)?
            .map(|(n, _)| n)
            .ok_or_else(|| Error::PathNotFound {
                path: path.display(),
            })
    }

    /// The stored bodies of the state's hard-linked files, by inode.
    pub(crate) fn inode_bodies(&self) -> Result<std::collections::BTreeMap<u64, Node>> {
        let dir = inode::inodes_dir();
        let Some((node, overlaid)) = self.lookup_raw(&dir)? else {
            return Ok(Default::default());
        };
        let mut out = std::collections::BTreeMap::new();
        for c in self.children_raw(&dir, &node, overlaid)? {
            let inode = u64::from_str_radix(&c.name, 16).map_err(|_| Error::CorruptVault {
                reason: format!("a hard-linked inode is named {:?}", c.name),
            })?;
            out.insert(inode, c.node);
        }
        Ok(out)
    }

    /// Entries of the directory at `path`, sorted by name.
    pub fn list(&self, path: &VPath) -> Result<Vec<Child>> {
        let (node, overlaid) = self.lookup(path)?.ok_or_else(|| Error::PathNotFound {
            path: path.display(),
        })?;
        self.children(path, &node, overlaid)
    }

    /// Entries of an already-resolved directory node, as readers see them: hard-linked
    /// names resolved, the reserved directory left out.
    pub fn children(&self, path: &VPath, node: &Node, overlaid: bool) -> Result<Vec<Child>> {
        let mut out = self.children_raw(path, node, overlaid)?;
        if path.is_root() {
            out.retain(|c| c.name != inode::INODES_DIR);
        }
        for c in &mut out {
            if matches!(c.node.kind, NodeKind::Link { .. }) {
                c.node = self.resolve(c.node.clone())?;
            }
        }
        Ok(out)
    }

    /// Entries of a directory node as stored (see `lookup_raw`).
    pub(crate) fn children_raw(
        &self,
        path: &VPath,
        node: &Node,
        overlaid: bool,
    ) -> Result<Vec<Child>> {
        let NodeKind::Dir { tree, .. } = &node.kind else {
            return Err(Error::NotADirectory {
                path: path.display(),
            });
        };
        let mut out: BTreeMap<String, Child> = BTreeMap::new();
        if let Some(tree) = tree {
            for (name, n) in &self.tree(tree)?.entries {
                out.insert(
                    name.clone(),
                    Child {
                        name: name.clone(),
                        node: n.clone(),
                        overlaid: false,
                    },
                );
            }
        }
        if let (true, Some(ws)) = (overlaid, self.overlay) {
            for (p, value) in self.r.overlay_children(ws, path.as_str())? {
                let name = VPath::parse(&p)?.name().to_string();
                match value {
                    None => {
                        out.remove(&name);
                    }
                    Some(bytes) => {
                        out.insert(
                            name.clone(),
                            Child {
                                name,
                                node: decode(&bytes)?,
                                overlaid: true,
                            },
                        );
                    }
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// The byte ranges of file `node` that hold stored data, in order; the rest of its
    /// `size` reads as zeros (holes, and bytes past the stored content). Cost: the chunk
    /// list's entries, never the file's size.
    pub fn data_ranges(&self, node: &Node) -> Result<Vec<(u64, u64)>> {
        let NodeKind::File { size, content } = &node.kind else {
            return Err(Error::invalid("not a regular file"));
        };
        let Some(id) = content else {
            return Ok(Vec::new());
        };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        match self.r.object(id)?.ok_or_else(|| missing(id))? {
            o if o.kind == kind::CHUNK => ranges.push((0, (o.data.len() as u64).min(*size))),
            o if o.kind == kind::CHUNK_LIST => {
                let index = self.cache.chunk_index(self.r, id)?;
                for (start, c) in index.starts.iter().zip(&index.chunks) {
                    let end = (start + c.len).min(*size);
                    if c.id.is_none() || *start >= end {
                        continue;
                    }
                    match ranges.last_mut() {
                        Some(last) if last.1 == *start => last.1 = end,
                        _ => ranges.push((*start, end)),
                    }
                }
            }
            o => {
                return Err(Error::CorruptVault {
                    reason: format!("file content {} has kind {}", id.short(), o.kind),
                });
            }
        }
        Ok(ranges)
    }

    /// Write file `node` to the host file `out` (empty, just created, at `path`), a piece
    /// at a time, leaving its holes as holes: memory stays bounded and a sparse file stays
    /// sparse. A failure to read the vault is that error, not one of writing `path`.
    pub fn copy_node_to(
        &self,
        node: &Node,
        out: &std::fs::File,
        path: &std::path::Path,
    ) -> Result<()> {
        use std::os::unix::fs::FileExt;
        const PIECE: u64 = 1 << 20;
        let written = |e| Error::io("writing", path, e);
        let mut buf = vec![0u8; PIECE as usize];
        for (from, to) in self.data_ranges(node)? {
            let mut pos = from;
            while pos < to {
                let n = (to - pos).min(PIECE) as usize;
                let got = read_content(self.r, self.cache, node, pos, &mut buf[..n])?;
                out.write_all_at(&buf[..got], pos).map_err(written)?;
                pos += n as u64;
            }
        }
        out.set_len(node.size()).map_err(written)
    }

    /// Copy file `node`'s bytes from `offset` into `buf`; returns how many (short only at
    /// the end of the file).
    pub fn read_content(&self, node: &Node, offset: u64, buf: &mut [u8]) -> Result<usize> {
        read_content(self.r, self.cache, node, offset, buf)
    }

    /// The whole content of a file node.
    pub fn read_node(&self, node: &Node) -> Result<Vec<u8>> {
        let size = node.size();
        self.read_node_range(node, 0, size)
    }

    /// Up to `len` bytes of a file node starting at `offset`.
    pub fn read_node_range(&self, node: &Node, offset: u64, len: u64) -> Result<Vec<u8>> {
        let NodeKind::File { size, .. } = &node.kind else {
            return Err(Error::invalid("not a regular file"));
        };
        let end = (*size).min(offset.saturating_add(len));
        let span = end.saturating_sub(offset);
        if span > super::limits::MAX_READ_BYTES {
            return Err(Error::invalid(format!(
                "the file is {span} bytes; reading more than {} bytes into memory at once is refused: `avfs export` copies it out (streamed, holes kept)",
                super::limits::MAX_READ_BYTES
            )));
        }
        let mut out = vec![0; span as usize];
        let n = read_content(self.r, self.cache, node, offset, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Read the file at `path`.
    /// Read the file at `path`, following symlinks (within the workspace: an absolute
    /// target means the workspace root, as it would inside the mount).
    pub fn read(&self, path: &VPath) -> Result<Vec<u8>> {
        let (resolved, node) = self.follow(path)?;
        if node.is_dir() {
            return Err(Error::IsADirectory {
                path: resolved.display(),
            });
        }
        match &node.kind {
            NodeKind::File { .. } => self.read_node(&node),
            _ => Err(Error::invalid(format!(
                "{} is not a regular file",
                resolved.display()
            ))),
        }
    }

    /// Resolve symlinks at `path` (up to 40, like the kernel's limit).
    pub fn follow(&self, path: &VPath) -> Result<(VPath, Node)> {
        let mut cur = path.clone();
        for _ in 0..40 {
            let node = self.get(&cur)?;
            let NodeKind::Symlink { target } = &node.kind else {
                return Ok((cur, node));
            };
            let base = if target.starts_with('/') {
                String::new()
            } else {
                cur.parent().unwrap_or_default().as_str().to_string()
            };
            cur = VPath::parse(&format!("{base}/{target}")).map_err(|_| Error::InvalidPath {
                path: path.display(),
                reason: format!("symlink target `{target}` leaves the workspace"),
            })?;
        }
        Err(Error::InvalidPath {
            path: path.display(),
            reason: "too many levels of symbolic links".into(),
        })
    }

    /// Visit every node below `path` (depth first, sorted), including `path` itself.
    pub fn walk(&self, path: &VPath, f: &mut dyn FnMut(&VPath, &Node) -> Result<()>) -> Result<()> {
        let (node, overlaid) = self.lookup(path)?.ok_or_else(|| Error::PathNotFound {
            path: path.display(),
        })?;
        self.walk_node(path, &node, overlaid, false, f)
    }

    /// Visit `node` at `path` and everything below it; `raw` lists stored entries as
    /// `children_raw` does (hard-link names unresolved, the inode directory included).
    fn walk_node(
        &self,
        path: &VPath,
        node: &Node,
        overlaid: bool,
        raw: bool,
        f: &mut dyn FnMut(&VPath, &Node) -> Result<()>,
    ) -> Result<()> {
        f(path, node)?;
        if node.is_dir() {
            let children = if raw {
                self.children_raw(path, node, overlaid)?
            } else {
                self.children(path, node, overlaid)?
            };
            for c in children {
                self.walk_node(&path.join(&c.name), &c.node, c.overlaid, raw, f)?;
            }
        }
        Ok(())
    }

    /// Visit every stored node below `path`, including `path`, as `lookup_raw` sees them.
    pub(crate) fn walk_raw(
        &self,
        path: &VPath,
        f: &mut dyn FnMut(&VPath, &Node) -> Result<()>,
    ) -> Result<()> {
        match self.lookup_raw(path)? {
            Some((node, overlaid)) => self.walk_node(path, &node, overlaid, true, f),
            None => Ok(()),
        }
    }

    /// Regular-file count and bytes of the subtree at a resolved node.
    /// A hard-linked file counts once, as its `Inode`: its names (`Link`) count nothing.
    pub(crate) fn totals(&self, path: &VPath, node: &Node, overlaid: bool) -> Result<(u64, u64)> {
        match &node.kind {
            NodeKind::File { size, .. } | NodeKind::Inode { size, .. } => Ok((1, *size)),
            NodeKind::Dir { files, bytes, .. } if !overlaid => Ok((*files, *bytes)),
            NodeKind::Dir { .. } => {
                let mut t = (0, 0);
                for c in self.children_raw(path, node, overlaid)? {
                    let (f, b) = self.totals(&path.join(&c.name), &c.node, c.overlaid)?;
                    t = (t.0 + f, t.1 + b);
                }
                Ok(t)
            }
            _ => Ok((0, 0)),
        }
    }
}
