//! Where hard-linked files are stored: the reserved directory of inodes at the root of a
//! tree, the path of each inode in it, and the conversion between a stored inode body and
//! the file its names show. The view, the fold, diff and merge build on these.

use super::node::{LinkInfo, Node, NodeKind};
use super::path::VPath;
use crate::error::{Error, Result};

/// The reserved root entry holding the inodes. The leading U+0001 keeps it clear of any
/// name a host tree or a tool plausibly uses; the model refuses it as a user path anyway.
pub(crate) const INODES_DIR: &str = "\u{1}inodes";

pub(crate) fn inodes_dir() -> VPath {
    VPath::root().join(INODES_DIR)
}

pub(crate) fn inode_path(inode: u64) -> VPath {
    inodes_dir().join(&format!("{inode:016x}"))
}

/// True for the reserved directory and anything below it.
pub(crate) fn is_reserved(path: &VPath) -> bool {
    path.components().next() == Some(INODES_DIR)
}

pub(crate) fn refuse_reserved(path: &VPath) -> Result<()> {
    if is_reserved(path) {
        return Err(Error::InvalidPath {
            path: path.display(),
            reason: "this name is reserved for hard links".into(),
        });
    }
    Ok(())
}

/// A stored body (`Inode` or `Shared`) as the node its names show, carrying `LinkInfo`.
pub(crate) fn as_file(mut body: Node, inode: u64) -> Result<Node> {
    let (nlink, kind) = match body.kind {
        NodeKind::Inode {
            nlink,
            size,
            content,
        } => (nlink, NodeKind::File { size, content }),
        NodeKind::Shared { nlink, kind } => (nlink, *kind),
        _ => {
            return Err(Error::CorruptVault {
                reason: format!("hard-linked inode {inode:x} is not an inode"),
            });
        }
    };
    body.kind = kind;
    body.link = Some(LinkInfo { inode, nlink });
    Ok(body)
}

/// A node as the body stored for it with `nlink` names: `Inode` for a regular file,
/// `Shared` for any other kind but a directory.
pub(crate) fn as_inode(mut file: Node, nlink: u64) -> Result<Node> {
    file.kind = match file.kind {
        NodeKind::File { size, content } => NodeKind::Inode {
            nlink,
            size,
            content,
        },
        NodeKind::Dir { .. } => return Err(Error::invalid("directories cannot be hard-linked")),
        NodeKind::Link { .. } | NodeKind::Inode { .. } | NodeKind::Shared { .. } => {
            return Err(Error::invalid("a stored hard link is not a node to link"));
        }
        kind => NodeKind::Shared {
            nlink,
            kind: Box::new(kind),
        },
    };
    file.link = None;
    Ok(file)
}
