//! The `/dev/fuse` transport: `fuser`'s `Filesystem` over any `Backend`, each kernel request
//! one backend call, its errno or attributes converted into `fuser`'s reply types.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::{Backend, XattrFit, fopen_bits, lookup_entry, ring, uring_wanted, wire, xattr_fit};
use crate::service::mount::{Attr, AttrKind, SetAttr, SetTime, Writer};

pub(super) struct Fs {
    pub(super) session: Arc<dyn Backend>,
    /// Set by INIT when the kernel agreed to FUSE over io_uring: the ring workers must
    /// then register before any request is answered.
    pub(super) uring: Arc<AtomicBool>,
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: TimeOrNow) -> i64 {
    let t = match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// UTIME_NOW stays "now" for the session to give the change's own time.
fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::SpecificTime(_) => SetTime::At(ns(t)),
        TimeOrNow::Now => SetTime::Now,
    }
}

fn file_type(k: AttrKind) -> FileType {
    match k {
        AttrKind::File => FileType::RegularFile,
        AttrKind::Dir => FileType::Directory,
        AttrKind::Symlink => FileType::Symlink,
        AttrKind::Fifo => FileType::NamedPipe,
        AttrKind::CharDevice => FileType::CharDevice,
        AttrKind::BlockDevice => FileType::BlockDevice,
        AttrKind::Socket => FileType::Socket,
    }
}

fn attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: file_type(a.kind),
        perm: a.perm as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: wire::dev_to_wire(a.rdev),
        blksize: 4096,
        flags: 0,
    }
}

fn e(code: i32) -> Errno {
    Errno::from_i32(code)
}

fn name(n: &OsStr) -> Result<&str, Errno> {
    n.to_str().ok_or(Errno::EINVAL)
}

impl Filesystem for Fs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The session clears set-ID bits and file capabilities on write, truncate and chown
        // (see `MountFs::write_data` and `SetAttr`), so the kernel need not ask for
        // `security.capability` before every write: that GETXATTR round trip was a fifth
        // of all requests in an untar. Kernels without it keep asking.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Writes land in the page cache and reach the session in large batches, when the
        // session says that is safe (see `MountFs::writeback_safe`).
        if self.session.writeback_safe()
            && config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .is_ok()
        {
            self.session.set_writeback();
        }
        // Requests on per-CPU io_uring queues when the kernel offers it (see `ring`). A
        // ring entry's payload buffer holds any one request, so writes and readahead
        // (which sets the largest read) are capped to its size.
        if config
            .capabilities()
            .contains(InitFlags::FUSE_OVER_IO_URING)
            && uring_wanted()
            && ring::available()
            && config.set_max_write(ring::PAYLOAD_LEN as u32).is_ok()
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok()
        {
            // Fails only when the kernel's own limit is lower, which then applies.
            let _ = config.set_max_readahead(ring::PAYLOAD_LEN as u32);
            self.uring.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(err) = self.session.finish() {
            eprintln!("avfs mount: saving the session failed: {err}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let r = name(n).and_then(|n| lookup_entry(&*self.session, parent.0, n).map_err(e));
        entry_reply(reply, r, self.session.cache_ttl())
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.session.getattr(ino.0) {
            Ok(a) => reply.attr(&self.session.cache_ttl(), &attr(&a)),
            Err(err) => reply.error(e(err)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(|t| ns(TimeOrNow::SpecificTime(t))),
            // CAP_FSETID, approximated: the kernel does not pass it on for a truncate.
            keep_setid: req.uid() == 0,
        };
        match self.session.setattr(ino.0, s) {
            Ok(a) => reply.attr(&self.session.cache_ttl(), &attr(&a)),
            Err(err) => reply.error(e(err)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.session.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(err) => reply.error(e(err)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = name(n).and_then(|n| {
            let rdev = wire::dev_from_wire(rdev);
            self.session
                .mknod(parent.0, n, mode & !umask, rdev, req.uid(), req.gid())
                .map_err(e)
        });
        entry_reply(reply, r, self.session.cache_ttl())
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = name(n).and_then(|n| {
            self.session
                .mkdir(parent.0, n, mode & !umask, req.uid(), req.gid())
                .map_err(e)
        });
        entry_reply(reply, r, self.session.cache_ttl())
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        empty_reply(
            reply,
            name(n).and_then(|n| self.session.unlink(parent.0, n).map_err(e)),
        )
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = name(newname).and_then(|n| self.session.link(ino.0, newparent.0, n).map_err(e));
        entry_reply(reply, r, self.session.cache_ttl())
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        empty_reply(
            reply,
            name(n).and_then(|n| self.session.rmdir(parent.0, n).map_err(e)),
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = name(link).and_then(|n| {
            let t = target.to_str().ok_or(Errno::EINVAL)?;
            self.session
                .symlink(parent.0, n, t, req.uid(), req.gid())
                .map_err(e)
        });
        entry_reply(reply, r, self.session.cache_ttl())
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = name(n).and_then(|n| {
            let nn = name(newname)?;
            self.session
                .rename(
                    parent.0,
                    n,
                    newparent.0,
                    nn,
                    flags.contains(RenameFlags::RENAME_NOREPLACE),
                    flags.contains(RenameFlags::RENAME_EXCHANGE),
                )
                .map_err(e)
        });
        empty_reply(reply, r)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.session.open(ino.0, flags.0) {
            Ok(o) => reply.opened(
                FileHandle(o.fh),
                FopenFlags::from_bits_retain(fopen_bits(&o)),
            ),
            Err(err) => reply.error(e(err)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0; size as usize];
        match self.session.read_data_into(ino.0, fh.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(err) => reply.error(e(err)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags
            .contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            .then(|| Writer {
                gid: req.gid(),
                pid: req.pid(),
            });
        match self.session.write_data(ino.0, fh.0, offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(err) => reply.error(e(err)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // ENOSYS: the kernel sends no more FLUSH requests on this connection; close(2)
        // still returns write-back errors, which the kernel checks before it would ask.
        if !self.session.needs_flush() {
            return reply.error(Errno::ENOSYS);
        }
        match self.session.flush(ino.0) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(e(err)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        match self.session.release(ino.0, fh.0) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(e(err)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.session.fsync(ino.0) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(e(err)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.session.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(err) => reply.error(e(err)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.session.readdir(fh.0, offset) {
            Ok(entries) => {
                for (ino, next, kind, n) in entries {
                    if reply.add(INodeNo(ino), next, file_type(kind), n) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(err) => reply.error(e(err)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.session.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty_reply(reply, self.session.sync_all().map_err(e))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.session.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bfree, s.files, s.ffree, s.bsize, 255, s.bsize,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        n: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match name(n).and_then(|n| self.session.setxattr(ino.0, n, value, flags).map_err(e)) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, size: u32, reply: ReplyXattr) {
        match name(n).and_then(|n| self.session.getxattr(ino.0, n).map_err(e)) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(err) => reply.error(err),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.session.listxattr(ino.0) {
            Ok(v) => xattr_reply(reply, &v, size),
            Err(err) => reply.error(e(err)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        match name(n).and_then(|n| self.session.removexattr(ino.0, n).map_err(e)) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission bits are checked by the kernel (default_permissions); this only
        // confirms the inode exists.
        match self.session.getattr(ino.0) {
            Ok(_) => reply.ok(),
            Err(err) => reply.error(e(err)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = name(n).and_then(|n| {
            self.session
                .create(parent.0, n, mode & !umask, flags, req.uid(), req.gid())
                .map_err(e)
        });
        match r {
            Ok((a, fh)) => reply.created(
                &self.session.cache_ttl(),
                &attr(&a),
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(err) => reply.error(err),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.session.fallocate(ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(e(err)),
        }
    }
}

fn entry_reply(reply: ReplyEntry, r: Result<Attr, Errno>, ttl: std::time::Duration) {
    match r {
        Ok(a) => reply.entry(&ttl, &attr(&a), Generation(0)),
        Err(err) => reply.error(err),
    }
}

fn empty_reply(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(err) => reply.error(err),
    }
}

fn xattr_reply(reply: ReplyXattr, value: &[u8], size: u32) {
    match xattr_fit(value.len(), size) {
        Ok(XattrFit::Size(n)) => reply.size(n),
        Ok(XattrFit::Value) => reply.data(value),
        Err(err) => reply.error(e(err)),
    }
}
