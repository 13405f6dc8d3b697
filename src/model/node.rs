//! The immutable objects of a vault and the node metadata they carry: file content (one chunk
//! or a list of fixed-size chunks, with holes for sparse files), directory trees and roots.
//! Hard links are two stored kinds (`Link`, `Inode`) that a `View` resolves; see `links.rs`.

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
        match &self.kind {
            NodeKind::File { size, .. } => *size,
            NodeKind::Symlink { target } => target.len() as u64,
            NodeKind::Inode { size, .. } => *size,
            _ => 0,
        }
    }

    /// Short type name used in listings and JSON.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => "file",
            NodeKind::Dir { .. } => "dir",
            NodeKind::Symlink { .. } => "symlink",
            NodeKind::Fifo => "fifo",
        }
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
            (NodeKind::Fifo, NodeKind::Fifo) => true,
            (NodeKind::Link { inode: a }, NodeKind::Link { inode: b }) => a == b,
            (a @ NodeKind::Inode { .. }, b @ NodeKind::Inode { .. }) => a == b,
            _ => false,
        }
    }

    /// The full st_mode including the file-type bits.
    pub fn st_mode(&self) -> u32 {
        let ty = match self.kind {
            NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => 0o100000,
            NodeKind::Dir { .. } => 0o040000,
            NodeKind::Symlink { .. } => 0o120000,
            NodeKind::Fifo => 0o010000,
        };
        ty | (self.attrs.mode & 0o7777)
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

/// One piece of a chunked file. `id: None` is a hole (all zeros, nothing stored).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    pub id: Option<ObjectId>,
    pub len: u32,
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
    let list: Vec<ChunkRef> = bytes
        .chunks(CHUNK_SIZE)
        .map(|chunk| encode_chunk(chunk, &mut objects))
        .collect();
    let head = EncodedObject::encode(kind::CHUNK_LIST, &list)?;
    let id = head.id;
    objects.push(head);
    Ok((Some(id), objects))
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
    let mut list = Vec::new();
    let mut objects = Vec::new();
    for start in (0..len).step_by(CHUNK_SIZE) {
        let n = (len - start).min(CHUNK_SIZE as u64) as usize;
        read(start, &mut buf[..n])?;
        list.push(encode_chunk(&buf[..n], &mut objects));
        objects.clear();
    }
    Ok(Some(EncodedObject::encode(kind::CHUNK_LIST, &list)?.id))
}

/// One chunk of a chunked file as `encode_content` stores it: a hole when all zeros.
fn encode_chunk(chunk: &[u8], objects: &mut Vec<EncodedObject>) -> ChunkRef {
    let len = chunk.len() as u32;
    if chunk.iter().all(|b| *b == 0) {
        return ChunkRef { id: None, len };
    }
    let obj = EncodedObject::new(kind::CHUNK, chunk.to_vec());
    let id = Some(obj.id);
    objects.push(obj);
    ChunkRef { id, len }
}

/// Content of `len` bytes (more than one chunk) that equals the chunked content `old`
/// except in the chunks `changed` gives, by index, with their new bytes (`None`: all
/// zeros). The other chunks keep their objects, so the result is what `encode_content`
/// makes of the whole content while only the changed chunks are hashed and stored. Every
/// chunk whose bytes or length differ from `old` must be in `changed`; with `old` empty,
/// that is every chunk.
pub fn patch_content(
    old: &[ChunkRef],
    len: u64,
    changed: &BTreeMap<usize, Option<Vec<u8>>>,
) -> Result<(Option<ObjectId>, Vec<EncodedObject>)> {
    debug_assert!(len > CHUNK_SIZE as u64, "a patch is for chunked content");
    let count = len.div_ceil(CHUNK_SIZE as u64) as usize;
    let mut objects = Vec::new();
    let mut list = Vec::with_capacity(count);
    for i in 0..count {
        let want = (len - (i * CHUNK_SIZE) as u64).min(CHUNK_SIZE as u64) as u32;
        let chunk = match (changed.get(&i), old.get(i)) {
            (Some(Some(bytes)), _) if bytes.len() == want as usize => {
                encode_chunk(bytes, &mut objects)
            }
            (Some(None), _) => ChunkRef {
                id: None,
                len: want,
            },
            (None, Some(c)) if c.len == want => c.clone(),
            _ => {
                return Err(Error::invalid(format!(
                    "content patch: chunk {i} changed but its {want} bytes were not given"
                )));
            }
        };
        list.push(chunk);
    }
    let head = EncodedObject::encode(kind::CHUNK_LIST, &list)?;
    let id = head.id;
    objects.push(head);
    Ok((Some(id), objects))
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
        let given: BTreeMap<usize, Option<Vec<u8>>> = changed
            .into_iter()
            .filter(|i| i * CHUNK_SIZE < new.len())
            .map(|i| {
                let bytes = &new[i * CHUNK_SIZE..new.len().min((i + 1) * CHUNK_SIZE)];
                (i, bytes.iter().any(|b| *b != 0).then(|| bytes.to_vec()))
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
