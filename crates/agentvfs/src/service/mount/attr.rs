//! Attributes: what a node looks like to the kernel, and the POSIX rules of `setattr`
//! (ownership, modes, times, sizes, and the privileges a change or a write clears).

use super::errno::err;
use super::{MResult, MountFs, errno, lock};
use crate::error::Error;
use crate::model::node::{Node, NodeKind};
use crate::model::now_ns;
use crate::model::path::VPath;

/// What a node looks like to the kernel.
#[derive(Debug, Clone)]
pub struct Attr {
    pub ino: u64,
    pub kind: AttrKind,
    pub size: u64,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub nlink: u32,
    /// A device node's number (Linux `dev_t`); 0 for anything else.
    pub rdev: u64,
}

impl Attr {
    /// The attributes of an absent name (inode 0), for a negative lookup reply.
    pub fn negative() -> Attr {
        Attr {
            ino: 0,
            kind: AttrKind::File,
            size: 0,
            perm: 0,
            uid: 0,
            gid: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            nlink: 0,
            rdev: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
}

/// Attributes to set; `None` leaves one alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// The kernel's own clock reading for this change, when it keeps the file's change
    /// time itself (regular files under the writeback cache): the change happens then.
    pub ctime: Option<i64>,
    /// The caller may keep set-ID bits across a size change (CAP_FSETID).
    pub keep_setid: bool,
}

/// The process behind a write, as the kernel names it in the request.
#[derive(Debug, Clone, Copy)]
pub struct Writer {
    pub gid: u32,
    /// 0 when the process is outside the daemon's pid namespace.
    pub pid: u32,
}

impl Writer {
    /// Whether the writer is in group `gid`: its own group, or one of its supplementary
    /// groups (from /proc). `None` when they cannot be read (the process is gone or not
    /// visible from here).
    fn in_group(&self, gid: u32) -> Option<bool> {
        if self.gid == gid {
            return Some(true);
        }
        if self.pid == 0 {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
        Some(groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
    }
}

/// A time to set: a given instant, or the moment of the change itself (UTIME_NOW), which
/// is also the change time, so `utimensat(UTIME_NOW, UTIME_NOW)` leaves atime, mtime and
/// ctime equal as on a native file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    At(i64),
    Now,
}

/// Space figures for statfs, from the quota when one is set.
#[derive(Debug, Clone, Copy)]
pub struct FsStats {
    pub blocks: u64,
    pub bfree: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
}

pub(super) fn kind_of(kind: &NodeKind) -> AttrKind {
    match kind {
        NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => AttrKind::File,
        NodeKind::Dir { .. } => AttrKind::Dir,
        NodeKind::Symlink { .. } => AttrKind::Symlink,
        NodeKind::Fifo => AttrKind::Fifo,
        NodeKind::CharDevice { .. } => AttrKind::CharDevice,
        NodeKind::BlockDevice { .. } => AttrKind::BlockDevice,
        NodeKind::Socket => AttrKind::Socket,
        // Views resolve hard-linked bodies; a name never shows one, but it has a type.
        NodeKind::Shared { kind, .. } => kind_of(kind),
    }
}

fn attr_of(ino: u64, n: &Node) -> Attr {
    Attr {
        ino,
        kind: kind_of(&n.kind),
        size: n.size(),
        perm: n.attrs.mode & 0o7777,
        uid: n.attrs.uid,
        gid: n.attrs.gid,
        atime: n.attrs.atime,
        mtime: n.attrs.mtime,
        ctime: n.attrs.ctime,
        // A directory's count of subdirectories is not kept: 1 says "unknown", as btrfs
        // does, so no tool takes 2 to mean "no subdirectories".
        nlink: if n.is_dir() { 1 } else { n.nlink() as u32 },
        rdev: n.rdev(),
    }
}

pub(super) fn set_size(n: &mut Node, size: u64) {
    if let NodeKind::File { size: s, .. } = &mut n.kind {
        *s = size;
    }
}

/// A node made in a set-group-ID directory belongs to the directory's group, not the
/// creator's, and a directory made there is set-group-ID too (the BSD rule Linux applies
/// to such directories; the kernel leaves it to a FUSE file system).
pub(super) fn inherit_setgid(node: &mut Node, dir: &Node) {
    if dir.attrs.mode & 0o2000 == 0 {
        return;
    }
    node.attrs.gid = dir.attrs.gid;
    if node.is_dir() {
        node.attrs.mode |= 0o2000;
    }
}

/// What a write, truncate or chown does to privileges, as the kernel does on a native file
/// system (a FUSE file system's duty under FUSE_HANDLE_KILLPRIV_V2): file capabilities go,
/// and unless `keep_setid` the set-user-ID bit goes, with the set-group-ID bit when the file
/// is group-executable.
fn kill_privs(n: &mut Node, keep_setid: bool) {
    if !n.is_file() {
        return;
    }
    if !n.xattrs.is_empty() {
        n.xattrs.remove("security.capability");
    }
    if !keep_setid {
        let group_exec = n.attrs.mode & 0o010 != 0;
        n.attrs.mode &= !0o4000;
        if group_exec {
            n.attrs.mode &= !0o2000;
        }
    }
}

/// A write by `writer` without CAP_FSETID (`None`: one that may keep set-ID bits). Beyond
/// `kill_privs`, set-group-ID goes when the writer is not in the file's group, as the
/// kernel's `setattr_should_drop_sgid` decides for a native file system.
pub(super) fn kill_privs_on_write(n: &mut Node, writer: Option<Writer>) {
    let Some(w) = writer else {
        return kill_privs(n, true);
    };
    let had_setuid = n.attrs.mode & 0o4000 != 0;
    kill_privs(n, false);
    if !n.is_file() || n.attrs.mode & 0o2000 == 0 {
        return;
    }
    // The kernel flags a write only when some bit must go: with no set-user-ID bit, that
    // was this one, whatever the writer's groups.
    let member = w.in_group(n.attrs.gid).unwrap_or(had_setuid);
    if !member {
        n.attrs.mode &= !0o2000;
    }
}

fn apply_setattr(n: &mut Node, s: &SetAttr, now: i64) {
    if s.size.is_some() {
        kill_privs(n, s.keep_setid);
    }
    if s.uid.is_some() || s.gid.is_some() {
        // chown clears set-ID bits even for root (Linux since 2.2.13).
        kill_privs(n, false);
    }
    if let Some(m) = s.mode {
        n.attrs.mode = m & 0o7777;
    }
    if let Some(u) = s.uid {
        n.attrs.uid = u;
    }
    if let Some(g) = s.gid {
        n.attrs.gid = g;
    }
    let at = |t: SetTime| match t {
        SetTime::At(t) => t,
        SetTime::Now => now,
    };
    if let Some(a) = s.atime {
        n.attrs.atime = at(a);
    }
    if let Some(m) = s.mtime {
        n.attrs.mtime = at(m);
    }
    n.attrs.ctime = now;
}

impl MountFs {
    /// What the kernel sees of `node` at `ino`: a secret shows mode 000.
    fn shown_attr(&self, ino: u64, node: &Node) -> Attr {
        if self.hidden.is_empty() || ino == super::ROOT_INO {
            return attr_of(ino, node);
        }
        // The node is at hand: the secret check must not look it up again.
        match self.path_of(ino) {
            Ok(path) => self.shown_attr_at(ino, &path, node),
            Err(_) => attr_of(ino, node),
        }
    }

    /// `shown_attr` when the caller has the path (a lookup): no inode-table search.
    pub(super) fn shown_attr_at(&self, ino: u64, path: &VPath, node: &Node) -> Attr {
        let mut attr = attr_of(ino, node);
        if !self.hidden.is_empty() && self.is_hidden(path, Some(node)) {
            attr.perm = 0;
        }
        attr
    }

    pub fn getattr(&self, ino: u64) -> MResult<Attr> {
        Ok(self.shown_attr(ino, &self.node(ino)?))
    }

    pub fn setattr(&self, ino: u64, s: SetAttr) -> MResult<Attr> {
        self.refuse_secret(ino)?;
        self.set_attrs(ino, s, false)
    }

    /// setattr; with `grow_only` a size only ever extends the file (fallocate), decided in
    /// the same step as the change so a write growing the file meanwhile is not cut back.
    pub(super) fn set_attrs(&self, ino: u64, mut s: SetAttr, grow_only: bool) -> MResult<Attr> {
        if self.refuses_writes() {
            return Err(err(rustix::io::Errno::ROFS));
        }
        let now = s.ctime.unwrap_or_else(now_ns);
        {
            let mut dirty = lock(&self.dirty);
            if let Some(d) = dirty.get_mut(&ino) {
                if grow_only && s.size.is_some_and(|size| size <= d.buf.len() as u64) {
                    s.size = None;
                }
                // An inode with buffered writes changes in the buffer; committed on close.
                if let Some(size) = s.size {
                    self.check_size(size)?;
                    d.buf.resize(size as usize);
                    set_size(&mut d.node, size);
                }
                apply_setattr(&mut d.node, &s, now);
                // A chmod alone is a change too: the next commit must carry it.
                d.version += 1;
                return Ok(attr_of(ino, &d.node));
            }
        }
        if let Some(size) = s.size {
            self.check_size(size)?;
        }
        let path = match self.path_of(ino) {
            Ok(path) => path,
            // Unlinked but open: the kernel still sets its times (and a holder may chmod
            // or truncate it through its descriptor). It lives only in its handles now.
            Err(e) => return self.set_attrs_unlinked(ino, &s, now).ok_or(e),
        };
        let node = self.edit("mount.setattr", &[&path], |e| {
            // One instant for the whole change (ctime, and any time set to "now"): the
            // kernel's when it sent one, else the edit's own.
            if let Some(t) = s.ctime {
                e.set_now(t);
            }
            let now = e.now();
            if let Some(size) = s.size {
                let (n, _) = e.view().lookup(&path)?.ok_or_else(|| Error::PathNotFound {
                    path: path.display(),
                })?;
                if grow_only && n.size() >= size {
                    return e.view().get(&path);
                }
                if n.is_dir() {
                    return Err(Error::IsADirectory {
                        path: path.display(),
                    });
                }
                let content = e.resize_content(&n, size)?;
                let mut n = n;
                n.kind = NodeKind::File { size, content };
                n.attrs.mtime = now;
                e.put_node(&path, n)?;
            }
            e.update(&path, |n| {
                apply_setattr(n, &s, now);
                Ok(())
            })
        })?;
        Ok(attr_of(ino, &node))
    }

    /// setattr of an unlinked file open through handles with no write buffer: the change
    /// is made to the node they serve. `None` when no handle has it open.
    fn set_attrs_unlinked(&self, ino: u64, s: &SetAttr, now: i64) -> Option<Attr> {
        let mut handles = lock(&self.handles);
        let mut attr = None;
        for n in handles.on_inode(ino).filter_map(|h| h.snapshot.as_mut()) {
            if let Some(size) = s.size {
                set_size(n, size);
            }
            apply_setattr(n, s, now);
            attr = Some(attr_of(ino, n));
        }
        attr
    }

    pub(super) fn check_size(&self, size: u64) -> MResult<()> {
        self.quota.check_file_size(size).map_err(|e| errno(&e))
    }
}
