//! The FUSE floor: a file system that keeps everything in memory and does no other work,
//! mounted with the same kernel options and caching as `avfs mount`. Whatever a workload
//! costs here is the price of going through FUSE at all on this machine (a kernel round
//! trip and two context switches per request), which no storage engine behind it can win
//! back. `scripts/bench_mount.sh` runs its workloads here too and prints the ratio.
//!
//! Usage: `cargo run --release --example fuse_floor -- <dir>` (foreground; unmount with
//! `umount <dir>`). Regular files, directories, symlinks and hard links; no xattrs.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

const TTL: Duration = Duration::from_secs(30);

struct Inode {
    attr: FileAttr,
    data: Vec<u8>,
    entries: BTreeMap<String, u64>,
    target: Vec<u8>,
}

struct Floor {
    inodes: Mutex<BTreeMap<u64, Inode>>,
    next: Mutex<u64>,
}

fn new_attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Floor {
    fn add(&self, parent: u64, name: &OsStr, mut inode: Inode) -> Result<FileAttr, Errno> {
        let name = name.to_string_lossy().into_owned();
        let mut inodes = self.inodes.lock().unwrap();
        let dir = inodes.get_mut(&parent).ok_or(Errno::ENOENT)?;
        if dir.entries.contains_key(&name) {
            return Err(Errno::EEXIST);
        }
        let ino = {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            *next
        };
        dir.entries.insert(name, ino);
        inode.attr.ino = INodeNo(ino);
        let attr = inode.attr;
        inodes.insert(ino, inode);
        Ok(attr)
    }

    fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let name = name.to_string_lossy();
        let mut inodes = self.inodes.lock().unwrap();
        let ino = *inodes
            .get(&parent)
            .and_then(|d| d.entries.get(name.as_ref()))
            .ok_or(Errno::ENOENT)?;
        let node = inodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if dir && !node.entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        node.attr.nlink -= 1;
        if node.attr.nlink == 0 || dir {
            inodes.remove(&ino);
        }
        inodes
            .get_mut(&parent)
            .unwrap()
            .entries
            .remove(name.as_ref());
        Ok(())
    }

    fn empty(kind: FileType, perm: u16, req: &Request) -> Inode {
        Inode {
            attr: new_attr(0, kind, perm, req),
            data: Vec::new(),
            entries: BTreeMap::new(),
            target: Vec::new(),
        }
    }
}

fn entry(reply: ReplyEntry, r: Result<FileAttr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let inodes = self.inodes.lock().unwrap();
        let found = inodes
            .get(&parent.0)
            .and_then(|d| d.entries.get(name.to_string_lossy().as_ref()))
            .and_then(|i| inodes.get(i));
        match found {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            None => {
                let mut a = new_attr(0, FileType::RegularFile, 0, req);
                a.ino = INodeNo(0);
                reply.entry(&TTL, &a, Generation(0))
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.inodes.lock().unwrap().get(&ino.0) {
            Some(n) => reply.attr(&TTL, &n.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut inodes = self.inodes.lock().unwrap();
        let Some(n) = inodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(m) = mode {
            n.attr.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.attr.uid = u;
        }
        if let Some(g) = gid {
            n.attr.gid = g;
        }
        if let Some(s) = size {
            n.data.resize(s as usize, 0);
            n.attr.size = s;
        }
        if let Some(t) = atime {
            n.attr.atime = time(t);
        }
        if let Some(t) = mtime {
            n.attr.mtime = time(t);
        }
        reply.attr(&TTL, &n.attr)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inodes.lock().unwrap().get(&ino.0) {
            Some(n) => reply.data(&n.target),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        entry(
            reply,
            self.add(parent.0, name, Self::empty(FileType::Directory, perm, req)),
        )
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut n = Self::empty(FileType::Symlink, 0o777, req);
        n.target = target.as_os_str().as_encoded_bytes().to_vec();
        n.attr.size = n.target.len() as u64;
        entry(reply, self.add(parent.0, link_name, n))
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = (name.to_string_lossy(), newname.to_string_lossy());
        let mut inodes = self.inodes.lock().unwrap();
        let Some(ino) = inodes
            .get_mut(&parent.0)
            .and_then(|d| d.entries.remove(name.as_ref()))
        else {
            return reply.error(Errno::ENOENT);
        };
        let replaced = inodes
            .get_mut(&newparent.0)
            .and_then(|d| d.entries.insert(newname.into_owned(), ino));
        if let Some(old) = replaced {
            inodes.remove(&old);
        }
        reply.ok()
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut inodes = self.inodes.lock().unwrap();
        let Some(n) = inodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        n.attr.nlink += 1;
        let attr = n.attr;
        let Some(dir) = inodes.get_mut(&newparent.0) else {
            return reply.error(Errno::ENOENT);
        };
        dir.entries
            .insert(newname.to_string_lossy().into_owned(), ino.0);
        reply.entry(&TTL, &attr, Generation(0))
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let inodes = self.inodes.lock().unwrap();
        let Some(n) = inodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let start = (offset as usize).min(n.data.len());
        let end = (start + size as usize).min(n.data.len());
        reply.data(&n.data[start..end])
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut inodes = self.inodes.lock().unwrap();
        let Some(n) = inodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let end = offset as usize + data.len();
        if end > n.data.len() {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.attr.size = n.data.len() as u64;
        reply.written(data.len() as u32)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let inodes = self.inodes.lock().unwrap();
        let Some(d) = inodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let mut all = vec![
            (ino.0, FileType::Directory, ".".to_string()),
            (ino.0, FileType::Directory, "..".to_string()),
        ];
        for (name, i) in &d.entries {
            if let Some(n) = inodes.get(i) {
                all.push((*i, n.attr.kind, name.clone()));
            }
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _n: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENODATA)
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok()
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        match self.add(
            parent.0,
            name,
            Self::empty(FileType::RegularFile, perm, req),
        ) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: fuse_floor <mount dir>");
    let req_root = FileAttr {
        ino: INodeNo(1),
        size: 0,
        blocks: 0,
        atime: SystemTime::now(),
        mtime: SystemTime::now(),
        ctime: SystemTime::now(),
        crtime: SystemTime::now(),
        kind: FileType::Directory,
        perm: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    };
    let mut inodes = BTreeMap::new();
    inodes.insert(
        1,
        Inode {
            attr: req_root,
            data: Vec::new(),
            entries: BTreeMap::new(),
            target: Vec::new(),
        },
    );
    let fs = Floor {
        inodes: Mutex::new(inodes),
        next: Mutex::new(1),
    };
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName("fuse-floor".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    c.acl = fuser::SessionACL::All;
    c.n_threads = Some(2);
    fuser::mount(fs, Path::new(&dir), &c)
}
