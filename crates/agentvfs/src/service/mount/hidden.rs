//! Hidden paths: secrets kept from every process using the mount, by path, by hard link and
//! by content (private keys).

use super::errno::err;
use super::{MResult, MountFs, NODE_CACHE_LIMIT, ROOT_INO, lock};
use crate::model::node::{Node, NodeKind};
use crate::model::path::VPath;
use crate::service::secrets::{self, KEY_SNIFF_BYTES};

impl MountFs {
    /// Whether `path` is hidden: by its name or a directory's above it, or because it is a
    /// file the policy hides when it holds a private key and it does. `node` is the entry's
    /// node when the caller has it; a path that does not exist is hidden only by name.
    pub(super) fn is_hidden(&self, path: &VPath, node: Option<&Node>) -> bool {
        if self.hidden.is_empty() {
            return false;
        }
        if self.hidden.hides_by_name(path) {
            return true;
        }
        let fetched;
        let node = match node {
            Some(n) => n,
            None => match self.get_node(path) {
                Ok(n) => {
                    fetched = n;
                    &fetched
                }
                Err(_) => return false,
            },
        };
        // A hard-linked file is a secret under every name if it is one under any.
        if let Some(link) = node.link.filter(|l| l.nlink > 1) {
            return self.linked_secret(link.inode, path, node);
        }
        self.hidden.checks_content(path) && self.holds_private_key(node)
    }

    /// Whether a hard-linked file is a secret under any of its names: a walk of the tree,
    /// done once per file until a name comes or goes. An error hides it: that is safe.
    fn linked_secret(&self, inode: u64, path: &VPath, node: &Node) -> bool {
        if let Some(known) = lock(&self.linked_secrets).get(&inode) {
            return *known;
        }
        let secret = self
            .read(|v| self.hidden.refuses(v, path, Some(node)))
            .unwrap_or(true);
        lock(&self.linked_secrets).insert(inode, secret);
        secret
    }

    /// Names came or went: what is known of hard-linked secrets may be stale.
    pub(super) fn forget_linked_secrets(&self) {
        if !self.hidden.is_empty() {
            lock(&self.linked_secrets).clear();
        }
    }

    /// Whether the regular file `node` starts with a private key (its first
    /// `KEY_SNIFF_BYTES`). A file that cannot be read counts as one: hiding it is safe.
    fn holds_private_key(&self, node: &Node) -> bool {
        let NodeKind::File {
            content: Some(id), ..
        } = &node.kind
        else {
            return false;
        };
        if let Some(known) = lock(&self.private_keys).get(id) {
            return *known;
        }
        let mut prefix = vec![0u8; KEY_SNIFF_BYTES];
        let found = match self.ws.read_content(node, 0, &mut prefix) {
            Ok(n) => secrets::holds_private_key(&prefix[..n]),
            Err(_) => return true,
        };
        let mut known = lock(&self.private_keys);
        if known.len() >= NODE_CACHE_LIMIT {
            known.clear();
        }
        known.insert(*id, found);
        found
    }

    /// EACCES when inode `ino` is a secret: its content, link target, attributes and
    /// extended attributes are refused to every process using the mount.
    pub(super) fn refuse_secret(&self, ino: u64) -> MResult<()> {
        if self.hidden.is_empty() || ino == ROOT_INO {
            return Ok(());
        }
        match self.path_of(ino) {
            Ok(path) if self.is_hidden(&path, None) => Err(err(rustix::io::Errno::ACCESS)),
            _ => Ok(()),
        }
    }
}
