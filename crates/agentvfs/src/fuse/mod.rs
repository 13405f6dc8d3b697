//! The FUSE adapter: translates kernel requests (via `fuser`, or FUSE over io_uring) into
//! calls on a `Backend`, which `MountFs` is, and replies. No rules live here:
//! validation, buffering and errno choice are the session's.

mod filesystem;
mod mount;
mod ring;
mod wire;

use std::time::Duration;

use fuser::FopenFlags;

use crate::service::mount::{Attr, AttrKind, FsStats, MResult, MountFs, Opened, SetAttr, Writer};

pub use self::mount::{FuseMounter, Mounted, Transport, serve, serve_backend, spawn, spawn_shared};

/// The daemon is the only writer of its workspace and every change reaches it through the
/// kernel, which drops what a change makes stale (the entry, the parent's attributes, the
/// inode's attributes after a write or a link count change). So entries, absent names and
/// attributes may be cached for long: each expiry costs a LOOKUP or GETATTR round trip
/// per file (git re-stats every file it just wrote).
const TTL: Duration = Duration::from_secs(30);

/// What a view of one immutable root may be cached for: what is under a root id never
/// changes, so as long as the mount lives (a year stands for "no expiry").
const IMMUTABLE_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// What the adapter serves: the file system operations of both transports, errors as errno
/// values. `MountFs` is the one `avfs mount` serves. `examples/fuse_floor.rs` serves an
/// in-memory one that does no other work, through this same adapter, to measure what FUSE
/// itself costs with the same options, caching and transport.
pub trait Backend: Send + Sync + 'static {
    fn readonly(&self) -> bool;
    /// How long the kernel may keep entries, absent names and attributes.
    fn cache_ttl(&self) -> Duration {
        TTL
    }
    /// Whether the kernel may cache writes (see `MountFs::writeback_safe`).
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

/// `Backend` methods that are `MountFs` methods of the same signature.
macro_rules! session_calls {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> $ret {
            MountFs::$name(self, $($arg),*)
        })*
    };
}

impl Backend for MountFs {
    fn cache_ttl(&self) -> Duration {
        if self.immutable() { IMMUTABLE_TTL } else { TTL }
    }

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

/// io_uring unless AVFS_FUSE_URING=0 asks for `/dev/fuse`.
fn uring_wanted() -> bool {
    std::env::var_os("AVFS_FUSE_URING").is_none_or(|v| v != "0")
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
