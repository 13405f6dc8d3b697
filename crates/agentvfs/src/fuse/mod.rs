//! The FUSE adapter: translates kernel requests (via `fuser`, or FUSE over io_uring) into
//! calls on a `Backend`, which `MountSession` is, and replies. No rules live here:
//! validation, buffering and errno choice are the session's.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, Session, TimeOrNow, WriteFlags,
};

use crate::service::mount::{
    Attr, AttrKind, FsStats, MResult, MountSession, Opened, SetAttr, SetTime, Writer,
};
use crate::service::mounter::{Mounter, ServedMount};

/// The daemon is the only writer of its workspace and every change reaches it through the
/// kernel, which drops what a change makes stale (the entry, the parent's attributes, the
/// inode's attributes after a write or a link count change). So entries, absent names and
/// attributes may be cached for long: each expiry costs a LOOKUP or GETATTR round trip
/// per file (git re-stats every file it just wrote).
const TTL: Duration = Duration::from_secs(30);

mod ring;
mod wire;

/// What the adapter serves: the file system operations of both transports, errors as errno
/// values. `MountSession` is the one `avfs mount` serves. `examples/fuse_floor.rs` serves an
/// in-memory one that does no other work, through this same adapter, to measure what FUSE
/// itself costs with the same options, caching and transport.
pub trait Backend: Send + Sync + 'static {
    fn readonly(&self) -> bool;
    /// Whether the kernel may cache writes (see `MountSession::writeback_safe`).
    fn writeback_safe(&self) -> bool;
    /// The kernel agreed to cache writes.
    fn set_writeback(&self);
    /// The file system is unmounted: save what is pending.
    fn finish(&self) -> crate::Result<()>;
    fn lookup(&self, parent: u64, name: &str) -> MResult<Attr>;
    fn getattr(&self, ino: u64) -> MResult<Attr>;
    fn setattr(&self, ino: u64, s: SetAttr) -> MResult<Attr>;
    fn readlink(&self, ino: u64) -> MResult<Vec<u8>>;
    /// `rdev` is a Linux `dev_t` (decoded from the wire).
    fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u64,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr>;
    fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> MResult<Attr>;
    fn symlink(&self, parent: u64, name: &str, target: &str, uid: u32, gid: u32) -> MResult<Attr>;
    /// Create and open a file: its attributes and the open handle.
    fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> MResult<(Attr, u64)>;
    fn unlink(&self, parent: u64, name: &str) -> MResult<()>;
    fn rmdir(&self, parent: u64, name: &str) -> MResult<()>;
    fn link(&self, ino: u64, newparent: u64, newname: &str) -> MResult<Attr>;
    fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
        exchange: bool,
    ) -> MResult<()>;
    fn open(&self, ino: u64, flags: i32) -> MResult<Opened>;
    /// Read into `buf` from `offset`; how many bytes (short only at the end of the file).
    fn read_data_into(&self, ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> MResult<usize>;
    fn write_data(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_setid: Option<Writer>,
    ) -> MResult<u32>;
    /// Whether close(2) has anything to do; once not, FLUSH is answered ENOSYS.
    fn needs_flush(&self) -> bool;
    fn flush(&self, ino: u64) -> MResult<()>;
    fn fsync(&self, ino: u64) -> MResult<()>;
    fn release(&self, ino: u64, fh: u64) -> MResult<()>;
    fn opendir(&self, ino: u64) -> MResult<u64>;
    /// Entries from `offset`: (inode, next offset, kind, name).
    fn readdir(&self, fh: u64, offset: u64) -> MResult<Vec<(u64, u64, AttrKind, String)>>;
    fn releasedir(&self, fh: u64);
    /// fsync of a directory: make everything durable.
    fn sync_all(&self) -> MResult<()>;
    fn statfs(&self) -> FsStats;
    fn getxattr(&self, ino: u64, name: &str) -> MResult<Vec<u8>>;
    fn listxattr(&self, ino: u64) -> MResult<Vec<u8>>;
    fn setxattr(&self, ino: u64, name: &str, value: &[u8], flags: i32) -> MResult<()>;
    fn removexattr(&self, ino: u64, name: &str) -> MResult<()>;
    fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: i32) -> MResult<()>;
}

/// `Backend` methods that are `MountSession` methods of the same signature.
macro_rules! session_calls {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> $ret {
            MountSession::$name(self, $($arg),*)
        })*
    };
}

impl Backend for MountSession {
    session_calls! {
        readonly() -> bool;
        writeback_safe() -> bool;
        set_writeback() -> ();
        finish() -> crate::Result<()>;
        lookup(parent: u64, name: &str) -> MResult<Attr>;
        getattr(ino: u64) -> MResult<Attr>;
        setattr(ino: u64, s: SetAttr) -> MResult<Attr>;
        readlink(ino: u64) -> MResult<Vec<u8>>;
        mknod(parent: u64, name: &str, mode: u32, rdev: u64, uid: u32, gid: u32) -> MResult<Attr>;
        mkdir(parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> MResult<Attr>;
        symlink(parent: u64, name: &str, target: &str, uid: u32, gid: u32) -> MResult<Attr>;
        create(parent: u64, name: &str, mode: u32, flags: i32, uid: u32, gid: u32)
            -> MResult<(Attr, u64)>;
        unlink(parent: u64, name: &str) -> MResult<()>;
        rmdir(parent: u64, name: &str) -> MResult<()>;
        link(ino: u64, newparent: u64, newname: &str) -> MResult<Attr>;
        rename(parent: u64, name: &str, newparent: u64, newname: &str, noreplace: bool,
            exchange: bool) -> MResult<()>;
        open(ino: u64, flags: i32) -> MResult<Opened>;
        read_data_into(ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> MResult<usize>;
        write_data(ino: u64, fh: u64, offset: u64, data: &[u8], kill_setid: Option<Writer>)
            -> MResult<u32>;
        needs_flush() -> bool;
        flush(ino: u64) -> MResult<()>;
        fsync(ino: u64) -> MResult<()>;
        release(ino: u64, fh: u64) -> MResult<()>;
        opendir(ino: u64) -> MResult<u64>;
        readdir(fh: u64, offset: u64) -> MResult<Vec<(u64, u64, AttrKind, String)>>;
        releasedir(fh: u64) -> ();
        statfs() -> FsStats;
        getxattr(ino: u64, name: &str) -> MResult<Vec<u8>>;
        listxattr(ino: u64) -> MResult<Vec<u8>>;
        setxattr(ino: u64, name: &str, value: &[u8], flags: i32) -> MResult<()>;
        removexattr(ino: u64, name: &str) -> MResult<()>;
        fallocate(ino: u64, offset: u64, len: u64, mode: i32) -> MResult<()>;
    }

    fn sync_all(&self) -> MResult<()> {
        self.workspace().vault().sync().map_err(|_| libc::EIO)
    }
}

struct Fs {
    session: Arc<dyn Backend>,
    /// Set by INIT when the kernel agreed to FUSE over io_uring: the ring workers must
    /// then register before any request is answered.
    uring: Arc<AtomicBool>,
}

/// A lookup: a miss is an entry with inode 0, which the kernel caches as a negative
/// dentry for the TTL, so the next stat/access/open of a missing name (git probes many)
/// costs no round trip. Every change reaches the session through the kernel, which drops
/// such an entry when the name is created.
fn lookup_entry(s: &dyn Backend, parent: u64, name: &str) -> Result<Attr, i32> {
    match s.lookup(parent, name) {
        Err(libc::ENOENT) => Ok(Attr::negative()),
        r => r,
    }
}

/// io_uring unless AVFS_FUSE_URING=0 asks for `/dev/fuse`.
fn uring_wanted() -> bool {
    std::env::var_os("AVFS_FUSE_URING").is_none_or(|v| v != "0")
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
        // (see `MountSession::write_data` and `SetAttr`), so the kernel need not ask for
        // `security.capability` before every write: that GETXATTR round trip was a fifth
        // of all requests in an untar. Kernels without it keep asking.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Writes land in the page cache and reach the session in large batches, when the
        // session says that is safe (see `MountSession::writeback_safe`).
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
        entry_reply(reply, r)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.session.getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &attr(&a)),
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
            Ok(a) => reply.attr(&TTL, &attr(&a)),
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
        entry_reply(reply, r)
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
        entry_reply(reply, r)
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
        entry_reply(reply, r)
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
        entry_reply(reply, r)
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
                &TTL,
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

fn entry_reply(reply: ReplyEntry, r: Result<Attr, Errno>) {
    match r {
        Ok(a) => reply.entry(&TTL, &attr(&a), Generation(0)),
        Err(err) => reply.error(err),
    }
}

fn empty_reply(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(err) => reply.error(err),
    }
}

/// What a getxattr/listxattr asking for `size` bytes gets for a value of `len` bytes.
enum XattrFit {
    /// `size` 0 asks for the value's size.
    Size(u32),
    Value,
}

fn xattr_fit(len: usize, size: u32) -> Result<XattrFit, i32> {
    if size == 0 {
        Ok(XattrFit::Size(len as u32))
    } else if (size as usize) < len {
        Err(libc::ERANGE)
    } else {
        Ok(XattrFit::Value)
    }
}

/// `fuse_open_out.open_flags` for an open file (see `Opened`).
fn fopen_bits(o: &Opened) -> u32 {
    let mut f = FopenFlags::empty();
    f.set(FopenFlags::FOPEN_KEEP_CACHE, o.keep_cache);
    f.set(FopenFlags::FOPEN_NOFLUSH, !o.flush);
    f.bits()
}

fn xattr_reply(reply: ReplyXattr, value: &[u8], size: u32) {
    match xattr_fit(value.len(), size) {
        Ok(XattrFit::Size(n)) => reply.size(n),
        Ok(XattrFit::Value) => reply.data(value),
        Err(err) => reply.error(e(err)),
    }
}

fn config(name: &str, readonly: bool) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(name.into()),
        MountOption::Subtype(name.into()),
        MountOption::DefaultPermissions,
        // Device nodes are kept as metadata; none may open a host device through the
        // mount, nor a set-ID program made in it run with another's privileges.
        MountOption::NoDev,
        MountOption::NoSuid,
        if readonly {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    c.acl = fuser::SessionACL::All;
    // Two workers: a slow read does not block other callers.
    c.n_threads = Some(2);
    c
}

/// How the kernel hands requests to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Per-CPU io_uring queues (Linux 6.14+ with the fuse module's `enable_uring` on).
    IoUring,
    /// Reads and writes on `/dev/fuse`.
    DevFuse,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::IoUring => "io_uring",
            Transport::DevFuse => "dev-fuse",
        }
    }
}

/// A session served on background threads; dropping `background` unmounts.
pub struct Mounted {
    pub background: fuser::BackgroundSession,
    pub transport: Transport,
}

/// The FUSE adapter as the services' `Mounter`.
pub struct FuseMounter;

impl Mounter for FuseMounter {
    fn mount(&self, session: Arc<MountSession>, dir: &Path) -> crate::Result<Box<dyn ServedMount>> {
        let mounted = spawn_shared(session, dir).map_err(|e| crate::Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Box::new(mounted))
    }
}

impl ServedMount for Mounted {
    fn transport(&self) -> &str {
        self.transport.as_str()
    }

    fn is_finished(&self) -> bool {
        self.background.guard.is_finished()
    }

    fn unmount(self: Box<Self>) -> std::io::Result<()> {
        self.background.umount_and_join()
    }

    fn join(self: Box<Self>) -> std::io::Result<()> {
        self.background.join()
    }
}

/// Mount `backend` at `dir` as file system `name`: INIT is answered before this returns, and
/// when it agreed to io_uring the ring workers are started (they exit when the file system
/// is unmounted).
fn mount(
    backend: Arc<dyn Backend>,
    name: &str,
    dir: &Path,
) -> std::io::Result<(Session<Fs>, Transport)> {
    let uring = Arc::new(AtomicBool::new(false));
    let fs = Fs {
        session: backend.clone(),
        uring: uring.clone(),
    };
    if uring_wanted() {
        ring::enable();
    }
    let mounted = Session::new(fs, dir, &config(name, backend.readonly()))?;
    if !uring.load(Ordering::SeqCst) {
        return Ok((mounted, Transport::DevFuse));
    }
    let dev = mounted.as_fd().try_clone_to_owned()?;
    ring::start(dev, backend)?;
    Ok((mounted, Transport::IoUring))
}

/// Serve `session` at `dir` until it is unmounted. Blocks.
pub fn serve(session: MountSession, dir: &Path) -> std::io::Result<()> {
    serve_backend(Arc::new(session), "avfs", dir, |_| {})
}

/// Serve any backend as file system `name` at `dir`, exactly as `avfs mount` serves a
/// session (options, caching, transport), until it is unmounted. Blocks; `mounted` is
/// told the transport once the mount answers.
pub fn serve_backend(
    backend: Arc<dyn Backend>,
    name: &str,
    dir: &Path,
    mounted: impl FnOnce(Transport),
) -> std::io::Result<()> {
    let (session, transport) = mount(backend, name, dir)?;
    mounted(transport);
    session.run()
}

/// Serve `session` at `dir` on background threads.
pub fn spawn(session: MountSession, dir: &Path) -> std::io::Result<Mounted> {
    spawn_shared(Arc::new(session), dir)
}

/// Mount a session the caller keeps a handle to (to record its changes between commands).
pub fn spawn_shared(session: Arc<MountSession>, dir: &Path) -> std::io::Result<Mounted> {
    let (mounted, transport) = mount(session, "avfs", dir)?;
    Ok(Mounted {
        background: mounted.spawn()?,
        transport,
    })
}
