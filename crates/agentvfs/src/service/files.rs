//! How nodes are reported to adapters: one serializable shape for `ls`, `stat` and `tree`.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Serialize;

use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;

/// A node as adapters show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NodeInfo {
    pub path: String,
    pub name: String,
    /// `file`, `dir`, `symlink`, `fifo`, `chardev`, `blockdev` or `socket`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    /// Permission bits, e.g. 493 for 0o755.
    pub mode: u32,
    /// Number of names of the node: more than 1 for a hard-linked file.
    pub nlink: u64,
    /// `ls -l` style, e.g. `-rwxr-xr-x`.
    pub mode_string: String,
    pub uid: u32,
    pub gid: u32,
    /// Nanoseconds since the Unix epoch.
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub content_id: Option<String>,
    /// Symlink target.
    pub target: Option<String>,
    /// A device node's number; `None` for anything else.
    pub device: Option<DeviceNumber>,
    pub tags: Vec<String>,
    pub meta: BTreeMap<String, String>,
    /// Extended attribute names and base64 values.
    pub xattrs: BTreeMap<String, String>,
}

/// A device node's major and minor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

impl NodeInfo {
    pub fn new(path: &VPath, node: &Node) -> Self {
        NodeInfo {
            path: path.display(),
            name: if path.is_root() {
                "/".into()
            } else {
                path.name().to_string()
            },
            kind: node.type_name().into(),
            size: node.size(),
            mode: node.attrs.mode,
            nlink: node.nlink(),
            mode_string: mode_string(node),
            uid: node.attrs.uid,
            gid: node.attrs.gid,
            atime: node.attrs.atime,
            mtime: node.attrs.mtime,
            ctime: node.attrs.ctime,
            content_id: node.content_id().map(|i| i.to_hex()),
            target: match &node.kind {
                NodeKind::Symlink { target } => Some(target.clone()),
                _ => None,
            },
            device: matches!(
                node.kind,
                NodeKind::CharDevice { .. } | NodeKind::BlockDevice { .. }
            )
            .then(|| DeviceNumber {
                major: rustix::fs::major(node.rdev()),
                minor: rustix::fs::minor(node.rdev()),
            }),
            tags: node.tags.iter().cloned().collect(),
            meta: node.meta.clone(),
            xattrs: node
                .xattrs
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD.encode(v),
                    )
                })
                .collect(),
        }
    }
}

/// `drwxr-xr-x` style mode string, with setuid/setgid/sticky letters.
pub fn mode_string(node: &Node) -> String {
    let ty = node.kind.type_letter();
    let m = node.attrs.mode;
    let mut s = String::with_capacity(10);
    s.push(ty);
    for (shift, special, lower, upper) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        let x = bits & 1 != 0;
        s.push(match (m & special != 0, x) {
            (true, true) => lower,
            (true, false) => upper,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}
