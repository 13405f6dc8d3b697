//! Extended attributes: get, list, set and remove, kept on the node.

use super::errno::err;
use super::{MResult, MountFs};

impl MountFs {
    pub fn getxattr(&self, ino: u64, name: &str) -> MResult<Vec<u8>> {
        // A secret shows no extended attributes (`ls -l` asks every entry for its ACL).
        if self.refuse_secret(ino).is_err() {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.node(ino)?
            .xattrs
            .get(name)
            .cloned()
            .ok_or(err(rustix::io::Errno::NODATA))
    }

    pub fn listxattr(&self, ino: u64) -> MResult<Vec<u8>> {
        if self.refuse_secret(ino).is_err() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for k in self.node(ino)?.xattrs.keys() {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// `flags`: XATTR_CREATE (1) fails if present, XATTR_REPLACE (2) fails if absent.
    pub fn setxattr(&self, ino: u64, name: &str, value: &[u8], flags: i32) -> MResult<()> {
        self.refuse_secret(ino)?;
        // The mount has no POSIX ACLs: stored as a plain xattr, an ACL would say one thing
        // and the mode bits another (`sed -i` copies the original's ACL onto its 0600 temp
        // file, and the edited file stayed 0600). Refused, tools fall back to chmod.
        if name.starts_with("system.posix_acl_") {
            return Err(err(rustix::io::Errno::OPNOTSUPP));
        }
        let exists = self.node(ino)?.xattrs.contains_key(name);
        if flags & 1 != 0 && exists {
            return Err(err(rustix::io::Errno::EXIST));
        }
        if flags & 2 != 0 && !exists {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.commit(ino)?;
        let path = self.path_of(ino)?;
        self.edit("mount.setxattr", &[&path], |e| {
            e.update(&path, |n| {
                n.xattrs.insert(name.to_string(), value.to_vec());
                Ok(())
            })
        })?;
        self.refresh_dirty_meta(ino)
    }

    pub fn removexattr(&self, ino: u64, name: &str) -> MResult<()> {
        self.refuse_secret(ino)?;
        if !self.node(ino)?.xattrs.contains_key(name) {
            return Err(err(rustix::io::Errno::NODATA));
        }
        self.commit(ino)?;
        let path = self.path_of(ino)?;
        self.edit("mount.removexattr", &[&path], |e| {
            e.update(&path, |n| {
                n.xattrs.remove(name);
                Ok(())
            })
        })?;
        self.refresh_dirty_meta(ino)
    }
}
