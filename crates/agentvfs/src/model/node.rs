//! The immutable objects of a vault and the node metadata they carry: file content (one chunk
//! or a list of fixed-size chunks, with holes for sparse files), directory trees and roots.
//! Hard links are stored kinds (`Link`, and `Inode` or `Shared`) that a `View` resolves; see
//! `inode.rs` and `workspace/links.rs`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::id::ObjectId;
use crate::error::{Error, Result};

/// Files up to this size are one chunk; larger ones are split so a random write rewrites one.
pub const CHUNK_SIZE: usize = 256 * 1024;

/// Object kinds as stored in the `objects` table. Part of the on-disk format.
pub mod kind {
    pub const CHUNK: u8 = 1;
    pub const CHUNK_LIST: u8 = 2;
    pub const TREE: u8 = 3;
    pub const ROOT: u8 = 4;
}

/// Id of an object: the kind byte is hashed in, so objects of different kinds never collide.
pub fn object_id(kind: u8, data: &[u8]) -> ObjectId {
    let mut h = blake3::Hasher::new();
    h.update(&[kind]);
    h.update(data);
    ObjectId(*h.finalize().as_bytes())
}

/// An encoded object ready to store.
#[derive(Debug, Clone)]
pub struct EncodedObject {
    pub id: ObjectId,
    pub kind: u8,
    pub data: Vec<u8>,
}

impl EncodedObject {
    pub fn new(kind: u8, data: Vec<u8>) -> Self {
        EncodedObject {
            id: object_id(kind, &data),
            kind,
            data,
        }
    }

    pub fn encode<T: Serialize>(kind: u8, value: &T) -> Result<Self> {
        let data = postcard::to_stdvec(value).map_err(|e| Error::Storage(e.to_string()))?;
        Ok(Self::new(kind, data))
    }
}

/// POSIX-ish attributes. Times are nanoseconds since the Unix epoch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Attrs {
    /// Permission bits including setuid/setgid/sticky (the low 12 bits of st_mode).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
}

impl Attrs {
    pub fn new(mode: u32, now: i64) -> Self {
        Attrs {
            mode: mode & 0o7777,
            uid: current_uid(),
            gid: current_gid(),
            atime: now,
            mtime: now,
            ctime: now,
        }
    }
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn current_gid() -> u32 {
    rustix::process::getgid().as_raw()
}

/// What a node is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// `content` is `None` for an empty file; otherwise a CHUNK or CHUNK_LIST object.
    File {
        size: u64,
        content: Option<ObjectId>,
    },
    /// `tree` is the directory's immutable contents (`None`: empty). `files`/`bytes` total the
    /// regular files below `tree`, so quotas never need to walk an unchanged subtree.
    Dir {
        tree: Option<ObjectId>,
        files: u64,
        bytes: u64,
    },
    Symlink {
        target: String,
    },
    Fifo,
    /// A hard-linked name. Stored only: the file it names is the `Inode` `inode` in the
    /// reserved directory, and a `View` hands out that file instead, so nothing reading
    /// through a view ever sees this kind.
    Link {
        inode: u64,
    },
    /// A regular file with `nlink` names (each a `Link`). Stored only, in the reserved
    /// directory; views show it as a `File` through its names.
    Inode {
        nlink: u64,
        size: u64,
        content: Option<ObjectId>,
    },
    /// A character device node. Metadata only: mounts are `nodev`, so it never opens there.
    /// `rdev` is the device number as Linux `dev_t` encodes it (`makedev`).
    CharDevice {
        rdev: u64,
    },
    /// A block device node; as `CharDevice`.
    BlockDevice {
        rdev: u64,
    },
    /// A Unix-domain socket's name. Only the name is kept: a socket bound in a mount works
    /// while the mount lives, like one on a native file system while its process lives.
    Socket,
    /// Anything but a regular file or a directory (a symlink, FIFO, device or socket) with
    /// `nlink` names: `Inode` for the other kinds. `kind` is never `Dir`, `File`, `Link`,
    /// `Inode` or `Shared`. Stored only, in the reserved directory.
    Shared {
        nlink: u64,
        kind: Box<NodeKind>,
    },
}

impl NodeKind {
    /// The link count of a stored hard-linked body (`Inode` or `Shared`), to read or set.
    pub(crate) fn nlink_mut(&mut self) -> Option<&mut u64> {
        match self {
            NodeKind::Inode { nlink, .. } | NodeKind::Shared { nlink, .. } => Some(nlink),
            _ => None,
        }
    }

    /// A stored hard-linked body.
    pub(crate) fn is_shared_body(&self) -> bool {
        matches!(self, NodeKind::Inode { .. } | NodeKind::Shared { .. })
    }

    /// Bytes of a regular file, the target length of a symlink, 0 otherwise.
    pub fn size(&self) -> u64 {
        match self {
            NodeKind::File { size, .. } | NodeKind::Inode { size, .. } => *size,
            NodeKind::Symlink { target } => target.len() as u64,
            NodeKind::Shared { kind, .. } => kind.size(),
            _ => 0,
        }
    }

    /// Short type name used in listings and JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => "file",
            NodeKind::Dir { .. } => "dir",
            NodeKind::Symlink { .. } => "symlink",
            NodeKind::Fifo => "fifo",
            NodeKind::CharDevice { .. } => "chardev",
            NodeKind::BlockDevice { .. } => "blockdev",
            NodeKind::Socket => "socket",
            NodeKind::Shared { kind, .. } => kind.type_name(),
        }
    }

    /// The type letter `ls -l` shows: `-`, `d`, `l`, `p`, `c`, `b` or `s`.
    pub fn type_letter(&self) -> char {
        match self {
            NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => '-',
            NodeKind::Dir { .. } => 'd',
            NodeKind::Symlink { .. } => 'l',
            NodeKind::Fifo => 'p',
            NodeKind::CharDevice { .. } => 'c',
            NodeKind::BlockDevice { .. } => 'b',
            NodeKind::Socket => 's',
            NodeKind::Shared { kind, .. } => kind.type_letter(),
        }
    }

    /// A character or block device node.
    pub fn is_device(&self) -> bool {
        matches!(
            self,
            NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. }
        )
    }

    /// Whether mknod(2) makes this kind on a host: a FIFO, device or socket.
    pub fn is_special(&self) -> bool {
        matches!(
            self,
            NodeKind::Fifo
                | NodeKind::CharDevice { .. }
                | NodeKind::BlockDevice { .. }
                | NodeKind::Socket
        )
    }

    /// The device number of a device node (Linux `dev_t`), 0 for anything else.
    pub fn rdev(&self) -> u64 {
        match self {
            NodeKind::CharDevice { rdev } | NodeKind::BlockDevice { rdev } => *rdev,
            NodeKind::Shared { kind, .. } => kind.rdev(),
            _ => 0,
        }
    }
}

/// Where a node resolved through a hard-linked name came from. Never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// Identifies the shared file within its workspace state (stable across checkpoints
    /// and forks), like `st_ino` on a host file system.
    pub inode: u64,
    pub nlink: u64,
}

/// One file-system node: kind plus metadata. Tags and key/value metadata travel with the node,
/// so they fork, checkpoint and restore with it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: NodeKind,
    pub attrs: Attrs,
    pub xattrs: BTreeMap<String, Vec<u8>>,
    pub tags: BTreeSet<String>,
    pub meta: BTreeMap<String, String>,
    /// Set when this file was reached through a hard-linked name. Not part of the stored
    /// encoding (skipped), so writing a resolved node anywhere stores a plain file.
    #[serde(skip)]
    pub link: Option<LinkInfo>,
}

impl Node {
    pub fn new(kind: NodeKind, attrs: Attrs) -> Self {
        Node {
            kind,
            attrs,
            xattrs: BTreeMap::new(),
            tags: BTreeSet::new(),
            meta: BTreeMap::new(),
            link: None,
        }
    }

    /// Number of names: more than 1 for a hard-linked file, 1 for anything else.
    pub fn nlink(&self) -> u64 {
        self.link.map_or(1, |l| l.nlink)
    }

    pub fn empty_dir(mode: u32, now: i64) -> Self {
        Node::new(
            NodeKind::Dir {
                tree: None,
                files: 0,
                bytes: 0,
            },
            Attrs::new(mode, now),
        )
    }

    pub fn is_dir(&self) -> bool {
        matches!(self.kind, NodeKind::Dir { .. })
    }

    pub fn is_file(&self) -> bool {
        matches!(self.kind, NodeKind::File { .. })
    }

    /// Bytes of a regular file, the target length of a symlink, 0 otherwise.
    pub fn size(&self) -> u64 {
        self.kind.size()
    }

    /// Short type name used in listings and JSON.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name()
    }

    /// The id that identifies this node's content (file content or directory tree).
    pub fn content_id(&self) -> Option<ObjectId> {
        match &self.kind {
            NodeKind::File { content, .. } | NodeKind::Inode { content, .. } => *content,
            NodeKind::Dir { tree, .. } => *tree,
            _ => None,
        }
    }

    /// Same type and content (times, metadata and cached totals aside).
    pub fn kind_eq(&self, other: &Node) -> bool {
        match (&self.kind, &other.kind) {
            (
                NodeKind::File {
                    size: a,
                    content: ca,
                },
                NodeKind::File {
                    size: b,
                    content: cb,
                },
            ) => a == b && ca == cb,
            (NodeKind::Dir { tree: a, .. }, NodeKind::Dir { tree: b, .. }) => a == b,
            (NodeKind::Symlink { target: a }, NodeKind::Symlink { target: b }) => a == b,
            (NodeKind::Fifo, NodeKind::Fifo) | (NodeKind::Socket, NodeKind::Socket) => true,
            (NodeKind::CharDevice { rdev: a }, NodeKind::CharDevice { rdev: b })
            | (NodeKind::BlockDevice { rdev: a }, NodeKind::BlockDevice { rdev: b }) => a == b,
            (a @ NodeKind::Shared { .. }, b @ NodeKind::Shared { .. }) => a == b,
            (NodeKind::Link { inode: a }, NodeKind::Link { inode: b }) => a == b,
            (a @ NodeKind::Inode { .. }, b @ NodeKind::Inode { .. }) => a == b,
            _ => false,
        }
    }

    /// The full st_mode including the file-type bits.
    pub fn st_mode(&self) -> u32 {
        kind_type_bits(&self.kind) | (self.attrs.mode & 0o7777)
    }

    /// The device number of a device node (Linux `dev_t`), 0 for anything else.
    pub fn rdev(&self) -> u64 {
        self.kind.rdev()
    }

    /// The node a type-and-mode word from mknod(2) asks for (`S_IFREG`/0, `S_IFIFO`,
    /// `S_IFCHR`, `S_IFBLK`, `S_IFSOCK`), or `None` for a type mknod cannot make.
    pub fn special_kind(st_mode: u32, rdev: u64) -> Option<NodeKind> {
        Some(match st_mode & 0o170000 {
            0 | 0o100000 => NodeKind::File {
                size: 0,
                content: None,
            },
            0o010000 => NodeKind::Fifo,
            0o020000 => NodeKind::CharDevice { rdev },
            0o060000 => NodeKind::BlockDevice { rdev },
            0o140000 => NodeKind::Socket,
            _ => return None,
        })
    }
}

/// The file-type bits of st_mode for a kind.
fn kind_type_bits(kind: &NodeKind) -> u32 {
    match kind {
        NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => 0o100000,
        NodeKind::Dir { .. } => 0o040000,
        NodeKind::Symlink { .. } => 0o120000,
        NodeKind::Fifo => 0o010000,
        NodeKind::CharDevice { .. } => 0o020000,
        NodeKind::BlockDevice { .. } => 0o060000,
        NodeKind::Socket => 0o140000,
        NodeKind::Shared { kind, .. } => kind_type_bits(kind),
    }
}

/// A directory's contents: entries sorted by name (byte order).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub entries: Vec<(String, Node)>,
}

impl Tree {
    pub fn get(&self, name: &str) -> Option<&Node> {
        self.entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i].1)
    }
}

/// One piece of a chunked file. `id: Some` is one chunk of data (`CHUNK_SIZE` bytes, less
/// only for the file's last chunk). `id: None` is a hole: `len` bytes of zeros, nothing
/// stored, spanning any number of chunks, so a sparse file of any size is a short list and
/// a size change costs the same whatever the size. Consecutive holes are one entry.
/// (`len` was a `u32` of one chunk; postcard writes both as the same varint, so lists from
/// before still decode and read the same.)
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    pub id: Option<ObjectId>,
    pub len: u64,
}

/// New bytes for a chunked file's chunks, by chunk index: a chunk's bytes, or a run of
/// chunks (up to the index given, exclusive) that are all zeros. Runs do not overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkEdit {
    Data(Vec<u8>),
    Zeros { until: usize },
}

pub type ChunkEdits = BTreeMap<usize, ChunkEdit>;

/// Builds a chunk list in its one canonical form: consecutive holes merged.
#[derive(Default)]
struct ListBuilder {
    list: Vec<ChunkRef>,
}

impl ListBuilder {
    fn push(&mut self, c: ChunkRef) {
        match (&c.id, self.list.last_mut()) {
            (_, _) if c.len == 0 => {}
            (None, Some(last)) if last.id.is_none() => last.len += c.len,
            _ => self.list.push(c),
        }
    }

    fn hole(&mut self, len: u64) {
        self.push(ChunkRef { id: None, len });
    }

    fn finish(self, objects: &mut Vec<EncodedObject>) -> Result<Option<ObjectId>> {
        let head = EncodedObject::encode(kind::CHUNK_LIST, &self.list)?;
        let id = head.id;
        objects.push(head);
        Ok(Some(id))
    }
}

/// Split file content into objects. Returns the content id (or `None` for an empty file)
/// and the objects to store. All-zero chunks of large files become holes.
pub fn encode_content(bytes: &[u8]) -> Result<(Option<ObjectId>, Vec<EncodedObject>)> {
    if bytes.is_empty() {
        return Ok((None, Vec::new()));
    }
    if bytes.len() <= CHUNK_SIZE {
        let obj = EncodedObject::new(kind::CHUNK, bytes.to_vec());
        return Ok((Some(obj.id), vec![obj]));
    }
    let mut objects = Vec::new();
    let mut list = ListBuilder::default();
    for chunk in bytes.chunks(CHUNK_SIZE) {
        list.push(encode_chunk(chunk, &mut objects));
    }
    let id = list.finish(&mut objects)?;
    Ok((id, objects))
}

/// The content id `encode_content` gives `len` bytes that `read(offset, buf)` fills, taken
/// a chunk at a time so the whole content is never in memory at once.
pub fn content_id_by_chunks(
    len: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<()>,
) -> Result<Option<ObjectId>> {
    if len <= CHUNK_SIZE as u64 {
        let mut bytes = vec![0; len as usize];
        read(0, &mut bytes)?;
        return Ok(encode_content(&bytes)?.0);
    }
    let mut buf = vec![0; CHUNK_SIZE];
    let mut list = ListBuilder::default();
    let mut objects = Vec::new();
    for start in (0..len).step_by(CHUNK_SIZE) {
        let n = (len - start).min(CHUNK_SIZE as u64) as usize;
        read(start, &mut buf[..n])?;
        list.push(encode_chunk(&buf[..n], &mut objects));
        objects.clear();
    }
    list.finish(&mut objects)
}

/// One chunk of a chunked file as `encode_content` stores it: a hole when all zeros.
fn encode_chunk(chunk: &[u8], objects: &mut Vec<EncodedObject>) -> ChunkRef {
    let len = chunk.len() as u64;
    if chunk.iter().all(|b| *b == 0) {
        return ChunkRef { id: None, len };
    }
    let obj = EncodedObject::new(kind::CHUNK, chunk.to_vec());
    let id = Some(obj.id);
    objects.push(obj);
    ChunkRef { id, len }
}

/// Content of `len` bytes (more than one chunk) that equals the chunked content `old`
/// except in the chunks `edits` gives, by index. The other chunks keep their objects, so
/// the result is what `encode_content` makes of the whole content while only the changed
/// chunks are hashed and stored, and a run of zeroed chunks costs one entry whatever its
/// length. Every chunk whose bytes or length differ from `old` must be in `edits` (a hole
/// cut short stays a hole); with `old` empty, that is every chunk. Cost: O(entries of
/// `old` and `edits`), never O(len).
pub fn patch_content(
    old: &[ChunkRef],
    len: u64,
    edits: &ChunkEdits,
) -> Result<(Option<ObjectId>, Vec<EncodedObject>)> {
    debug_assert!(len > CHUNK_SIZE as u64, "a patch is for chunked content");
    let cs = CHUNK_SIZE as u64;
    let count = len.div_ceil(cs) as usize;
    let byte = |chunk: usize| (chunk as u64).saturating_mul(cs).min(len);
    let mut objects = Vec::new();
    let mut out = ListBuilder::default();
    let mut old_pieces = OldPieces::new(old);
    let mut next = 0usize;
    for (&i, edit) in edits.range(..count) {
        old_pieces.copy(&mut out, byte(next), byte(i), len)?;
        match edit {
            ChunkEdit::Data(bytes) => {
                let want = byte(i + 1) - byte(i);
                if bytes.len() as u64 != want {
                    return Err(Error::invalid(format!(
                        "content patch: chunk {i} has {} bytes where {want} belong",
                        bytes.len()
                    )));
                }
                out.push(encode_chunk(bytes, &mut objects));
                next = i + 1;
            }
            ChunkEdit::Zeros { until } => {
                let until = (*until).clamp(i + 1, count);
                out.hole(byte(until) - byte(i));
                next = until;
            }
        }
        old_pieces.skip_to(byte(next));
    }
    old_pieces.copy(&mut out, byte(next), len, len)?;
    let id = out.finish(&mut objects)?;
    Ok((id, objects))
}

/// The entries of an old chunk list, walked once in order by byte offset.
struct OldPieces<'a> {
    list: &'a [ChunkRef],
    /// The entry at `at`, and where it starts.
    i: usize,
    start: u64,
}

impl<'a> OldPieces<'a> {
    fn new(list: &'a [ChunkRef]) -> Self {
        OldPieces {
            list,
            i: 0,
            start: 0,
        }
    }

    /// Move past entries that end at or before `pos`.
    fn skip_to(&mut self, pos: u64) {
        while let Some(c) = self.list.get(self.i)
            && self.start + c.len <= pos
        {
            self.start += c.len;
            self.i += 1;
        }
    }

    /// Copy the old content of bytes `from..to` (chunk-aligned, or ending at `len`) into
    /// `out`, refusing a data chunk whose length is not what the new file has there and
    /// bytes the old content does not cover.
    fn copy(&mut self, out: &mut ListBuilder, from: u64, to: u64, len: u64) -> Result<()> {
        let cs = CHUNK_SIZE as u64;
        self.skip_to(from);
        let mut pos = from;
        while pos < to {
            let Some(c) = self.list.get(self.i) else {
                return Err(Error::invalid(format!(
                    "content patch: chunk {} changed but its bytes were not given",
                    pos / cs
                )));
            };
            let end = self.start + c.len;
            match c.id {
                Some(_) => {
                    let want_end = (pos - pos % cs + cs).min(len);
                    if self.start != pos || end != want_end {
                        return Err(Error::invalid(format!(
                            "content patch: chunk {} changed but its bytes were not given",
                            pos / cs
                        )));
                    }
                    out.push(c.clone());
                }
                None => {
                    // A hole ending inside a chunk that the new file fills further (the
                    // old file ended there) changed; the loop refuses it next round.
                    let stop = end.min(to);
                    if stop < to && !stop.is_multiple_of(cs) {
                        return Err(Error::invalid(format!(
                            "content patch: chunk {} changed but its bytes were not given",
                            stop / cs
                        )));
                    }
                    out.hole(stop - pos);
                }
            }
            pos = end.min(to);
            if end <= to {
                self.start = end;
                self.i += 1;
            }
        }
        Ok(())
    }
}

/// The object ids an object refers to directly, for gc and integrity checks.
pub fn references(kind: u8, data: &[u8]) -> Result<Vec<ObjectId>> {
    Ok(match kind {
        kind::CHUNK => Vec::new(),
        kind::CHUNK_LIST => {
            let list: Vec<ChunkRef> = postcard::from_bytes(data)?;
            list.into_iter().filter_map(|c| c.id).collect()
        }
        kind::TREE => {
            let tree: Tree = postcard::from_bytes(data)?;
            tree.entries
                .iter()
                .filter_map(|(_, n)| n.content_id())
                .collect()
        }
        kind::ROOT => {
            let node: Node = postcard::from_bytes(data)?;
            node.content_id().into_iter().collect()
        }
        other => {
            return Err(Error::CorruptVault {
                reason: format!("unknown object kind {other}"),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes with an all-zero chunk at index 1 (a hole).
    fn content(len: usize, seed: u8) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect();
        let hole = CHUNK_SIZE.min(len)..(2 * CHUNK_SIZE).min(len);
        v[hole].fill(0);
        v
    }

    fn list_of(bytes: &[u8]) -> Vec<ChunkRef> {
        if bytes.is_empty() {
            return Vec::new();
        }
        let (_, objects) = encode_content(bytes).unwrap();
        let head = objects.last().unwrap();
        postcard::from_bytes(&head.data).unwrap()
    }

    /// Patch `old` into `new`, giving the chunks `changed` names, and compare with encoding
    /// `new` whole.
    fn check(old: &[u8], new: &[u8], changed: impl IntoIterator<Item = usize>) {
        let given: ChunkEdits = changed
            .into_iter()
            .filter(|i| i * CHUNK_SIZE < new.len())
            .map(|i| {
                let bytes = &new[i * CHUNK_SIZE..new.len().min((i + 1) * CHUNK_SIZE)];
                let edit = if bytes.iter().any(|b| *b != 0) {
                    ChunkEdit::Data(bytes.to_vec())
                } else {
                    ChunkEdit::Zeros { until: i + 1 }
                };
                (i, edit)
            })
            .collect();
        let (id, objects) = patch_content(&list_of(old), new.len() as u64, &given).unwrap();
        let (want, _) = encode_content(new).unwrap();
        assert_eq!(id, want);
        // Only the given chunks (and the list) are stored again.
        assert!(objects.len() <= given.len() + 1);
    }

    #[test]
    fn a_patch_is_the_content_encoded_whole() {
        let old = content(5 * CHUNK_SIZE + 123, 1);
        // A page written in chunk 3.
        let mut new = old.clone();
        new[3 * CHUNK_SIZE + 10..3 * CHUNK_SIZE + 4106].fill(7);
        check(&old, &new, [3]);
        // The hole filled, and a chunk zeroed into a hole.
        let mut new = old.clone();
        new[CHUNK_SIZE + 5] = 9;
        new[4 * CHUNK_SIZE..5 * CHUNK_SIZE].fill(0);
        check(&old, &new, [1, 4]);
        // Grown across chunks: the partial last chunk and the new ones.
        let mut new = old.clone();
        new.resize(8 * CHUNK_SIZE + 1, 3);
        check(&old, &new, 5..9);
        // Shrunk to a chunk boundary, and into the middle of a chunk.
        check(&old, &old[..3 * CHUNK_SIZE], []);
        check(&old, &old[..2 * CHUNK_SIZE + 77], [2]);
        // Against no old content: every chunk given, zero chunks as holes.
        check(&[], &old, 0..6);
    }

    #[test]
    fn holes_of_any_size_are_one_entry_and_cost_nothing() {
        let cs = CHUNK_SIZE as u64;
        // Grow a 3-chunk file to a petabyte: one zero run, not billions of entries.
        let old = content(3 * CHUNK_SIZE, 4);
        let pb = 1u64 << 50;
        let mut edits = ChunkEdits::new();
        edits.insert(
            3,
            ChunkEdit::Zeros {
                until: pb.div_ceil(cs) as usize,
            },
        );
        let (id, objects) = patch_content(&list_of(&old), pb, &edits).unwrap();
        let list: Vec<ChunkRef> = postcard::from_bytes(&objects.last().unwrap().data).unwrap();
        // Chunk 1 of `content` is a hole too: data, hole, data, then the run to the end.
        assert_eq!(list.len(), 4, "{list:?}");
        assert_eq!(
            list[3],
            ChunkRef {
                id: None,
                len: pb - 3 * cs
            }
        );
        assert!(id.is_some());
        // Cut back to a size inside the run: still one entry, and a run cut mid-chunk
        // needs no bytes (zeros stay zeros).
        let (_, objects) = patch_content(&list, 7 * cs + 5, &ChunkEdits::new()).unwrap();
        let cut: Vec<ChunkRef> = postcard::from_bytes(&objects.last().unwrap().data).unwrap();
        assert_eq!(
            cut.last(),
            Some(&ChunkRef {
                id: None,
                len: 4 * cs + 5
            })
        );
        // A data chunk written far into the run splits it in two.
        let mut edits = ChunkEdits::new();
        edits.insert(1000, ChunkEdit::Data(vec![1; CHUNK_SIZE]));
        let (_, objects) = patch_content(&list, pb, &edits).unwrap();
        let split: Vec<ChunkRef> = postcard::from_bytes(&objects.last().unwrap().data).unwrap();
        assert_eq!(split.len(), 6, "{split:?}");
        assert_eq!(split[3].len, 997 * cs);
        assert_eq!(split[5].len, pb - 1001 * cs);
    }

    #[test]
    fn lists_written_before_hole_runs_still_decode() {
        // The earlier format: one entry per chunk, `len` a u32.
        #[derive(Serialize)]
        struct Old {
            id: Option<ObjectId>,
            len: u32,
        }
        let old = vec![
            Old {
                id: Some(ObjectId::of(b"x")),
                len: CHUNK_SIZE as u32,
            },
            Old {
                id: None,
                len: CHUNK_SIZE as u32,
            },
            Old { id: None, len: 7 },
        ];
        let bytes = postcard::to_stdvec(&old).unwrap();
        let list: Vec<ChunkRef> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[2], ChunkRef { id: None, len: 7 });
    }

    #[test]
    fn the_id_by_chunks_is_the_id_of_the_whole() {
        for len in [0, 10, CHUNK_SIZE, 3 * CHUNK_SIZE + 7] {
            let bytes = content(len, 3);
            let id = content_id_by_chunks(len as u64, |at, out| {
                out.copy_from_slice(&bytes[at as usize..at as usize + out.len()]);
                Ok(())
            })
            .unwrap();
            assert_eq!(id, encode_content(&bytes).unwrap().0, "{len} bytes");
        }
    }

    #[test]
    fn a_patch_missing_a_changed_chunk_is_refused() {
        let old = content(3 * CHUNK_SIZE + 10, 2);
        let mut new = old.clone();
        new.resize(4 * CHUNK_SIZE, 5);
        // Chunk 3 grew from 10 bytes to a whole chunk but is not given.
        let err = patch_content(&list_of(&old), new.len() as u64, &BTreeMap::new());
        assert!(err.is_err());
    }
}
