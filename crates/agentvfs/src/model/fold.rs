//! Folding a workspace's overlay into immutable objects: the only place new trees and roots
//! are built, so checkpoint, fork, merge and the op log all produce identical ids for
//! identical states. Cost: O(overlay entries + width of the changed directories).

use std::collections::{BTreeMap, HashMap};

use super::id::ObjectId;
use super::inode::INODES_DIR;
use super::node::{EncodedObject, Node, NodeKind, Tree, kind};
use super::path::VPath;
use super::view::{ObjectCache, decode};
use crate::error::{Error, Result};
use crate::store::StoreWrite;

/// Fold workspace `ws`'s overlay over `base` and return the resulting root id. The overlay
/// is left in place.
pub(crate) fn fold_overlay(
    w: &mut dyn StoreWrite,
    cache: &ObjectCache,
    ws: i64,
    base: ObjectId,
) -> Result<ObjectId> {
    let rows = w.overlay_all(ws)?;
    if rows.is_empty() {
        return Ok(base);
    }
    let mut nodes: HashMap<String, Option<Node>> = HashMap::new();
    let mut children: HashMap<String, Vec<String>> = HashMap::new();
    for (p, value) in rows {
        let node = match value {
            Some(b) => Some(decode::<Node>(&b)?),
            None => None,
        };
        if !p.is_empty() {
            let parent = VPath::parse(&p)?.parent().unwrap_or_default();
            children
                .entry(parent.as_str().to_string())
                .or_default()
                .push(p.clone());
        }
        nodes.insert(p, node);
    }
    let Some(Some(root)) = nodes.get("").cloned() else {
        return Err(Error::CorruptVault {
            reason: "overlay has entries but no root".into(),
        });
    };
    let mut folder = Folder {
        w,
        cache,
        nodes: &nodes,
        children: &children,
    };
    let root = folder.dir("", root)?;
    store_root(w, &root)
}

struct Folder<'a, 'w> {
    w: &'a mut (dyn StoreWrite + 'w),
    cache: &'a ObjectCache,
    nodes: &'a HashMap<String, Option<Node>>,
    children: &'a HashMap<String, Vec<String>>,
}

impl Folder<'_, '_> {
    fn dir(&mut self, path: &str, node: Node) -> Result<Node> {
        let NodeKind::Dir { tree, .. } = &node.kind else {
            return Ok(node);
        };
        let mut entries: BTreeMap<String, Node> = match tree {
            Some(t) => self
                .cache
                .tree(&*self.w, t)?
                .entries
                .iter()
                .cloned()
                .collect(),
            None => BTreeMap::new(),
        };
        let children = self.children;
        for child in children.get(path).map(Vec::as_slice).unwrap_or_default() {
            let name = child.rsplit('/').next().unwrap_or(child).to_string();
            match self.nodes.get(child).cloned().flatten() {
                None => {
                    entries.remove(&name);
                }
                Some(n) => {
                    let n = if n.is_dir() && children.contains_key(child) {
                        self.dir(child, n)?
                    } else {
                        n
                    };
                    entries.insert(name, n);
                }
            }
        }
        if path.is_empty()
            && let Some(Node {
                kind: NodeKind::Dir { tree: None, .. },
                ..
            }) = entries.get(INODES_DIR)
        {
            // The last hard link went: states without links have no reserved directory.
            entries.remove(INODES_DIR);
        }
        store_dir(self.w, node, entries)
    }
}

/// Store `entries` as `node`'s tree and return the node with its tree id and totals set.
pub(crate) fn store_dir(
    w: &mut dyn StoreWrite,
    mut node: Node,
    entries: BTreeMap<String, Node>,
) -> Result<Node> {
    let (mut files, mut bytes) = (0u64, 0u64);
    for n in entries.values() {
        match &n.kind {
            // A hard-linked file counts once, as its inode; its names count nothing.
            NodeKind::File { size, .. } | NodeKind::Inode { size, .. } => {
                files += 1;
                bytes += size;
            }
            NodeKind::Dir {
                files: f, bytes: b, ..
            } => {
                files += f;
                bytes += b;
            }
            _ => {}
        }
    }
    let tree = if entries.is_empty() {
        None
    } else {
        let tree = Tree {
            entries: entries.into_iter().collect(),
        };
        let obj = EncodedObject::encode(kind::TREE, &tree)?;
        w.put_object(&obj.id, obj.kind, &obj.data)?;
        Some(obj.id)
    };
    node.kind = NodeKind::Dir { tree, files, bytes };
    Ok(node)
}

/// Store a root directory node and return its id.
pub(crate) fn store_root(w: &mut dyn StoreWrite, root: &Node) -> Result<ObjectId> {
    let obj = EncodedObject::encode(kind::ROOT, root)?;
    w.put_object(&obj.id, obj.kind, &obj.data)?;
    Ok(obj.id)
}
