//! The FUSE kernel ABI pieces the io_uring transport reads and writes itself (the
//! `/dev/fuse` path leaves this to `fuser`): request fields at their offsets and reply
//! structs as bytes. Layouts are the kernel's `include/uapi/linux/fuse.h` (ABI 7.40+,
//! little-endian, 64-bit).

use crate::service::mount::{Attr, AttrKind, FsStats};

/// Request opcodes this transport handles (the rest are answered ENOSYS).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const FALLOCATE: u32 = 43;
    pub const RENAME2: u32 = 45;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

/// `fuse_write_in.write_flags`: the writer lacks CAP_FSETID, so set-ID bits go.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
pub const RENAME_NOREPLACE: u32 = 1 << 0;
pub const RENAME_EXCHANGE: u32 = 1 << 1;

pub const IN_HEADER_LEN: usize = 40;
pub const OUT_HEADER_LEN: usize = 16;

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap()))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap()))
}

/// `fuse_in_header`.
#[derive(Debug, Clone, Copy)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    pub fn parse(b: &[u8]) -> InHeader {
        InHeader {
            opcode: u32_at(b, 4),
            unique: u64_at(b, 8),
            nodeid: u64_at(b, 16),
            uid: u32_at(b, 24),
            gid: u32_at(b, 28),
            pid: u32_at(b, 32),
        }
    }
}

/// The fixed per-opcode struct (`op_in`), read field by field at its ABI offset.
#[derive(Clone, Copy)]
pub struct OpIn<'a>(pub &'a [u8]);

impl OpIn<'_> {
    pub fn u32(&self, at: usize) -> u32 {
        u32_at(self.0, at)
    }
    pub fn u64(&self, at: usize) -> u64 {
        u64_at(self.0, at)
    }
}

/// The variable part of a request: NUL-terminated names, then data.
pub struct Payload<'a>(pub &'a [u8]);

impl<'a> Payload<'a> {
    /// The first NUL-terminated string and what follows it.
    pub fn name(&self) -> Option<(&'a [u8], Payload<'a>)> {
        let end = self.0.iter().position(|&c| c == 0)?;
        Some((&self.0[..end], Payload(&self.0[end + 1..])))
    }
}

/// Writes a reply into the ring entry's payload buffer.
pub struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Out<'a> {
    pub fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// Count `n` bytes already written at the current position (e.g. read data).
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.room(), "reply longer than its buffer");
        self.len += n;
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn zeros(&mut self, n: usize) {
        self.buf[self.len..self.len + n].fill(0);
        self.len += n;
    }

    /// `fuse_attr` (88 bytes).
    pub fn attr(&mut self, a: &Attr) {
        let (asec, ansec) = split_ns(a.atime);
        let (msec, mnsec) = split_ns(a.mtime);
        let (csec, cnsec) = split_ns(a.ctime);
        self.u64(a.ino);
        self.u64(a.size);
        self.u64(a.size.div_ceil(512));
        self.u64(asec as u64);
        self.u64(msec as u64);
        self.u64(csec as u64);
        self.u32(ansec);
        self.u32(mnsec);
        self.u32(cnsec);
        self.u32(mode(a));
        self.u32(a.nlink);
        self.u32(a.uid);
        self.u32(a.gid);
        self.u32(dev_to_wire(a.rdev));
        self.u32(4096); // blksize
        self.u32(0); // flags
    }

    /// `fuse_entry_out` (128 bytes): inode, generation 0, validity, attributes.
    pub fn entry(&mut self, a: &Attr, ttl_secs: u64) {
        self.u64(a.ino);
        self.u64(0);
        self.u64(ttl_secs);
        self.u64(ttl_secs);
        self.zeros(8);
        self.attr(a);
    }

    /// `fuse_attr_out` (104 bytes).
    pub fn attr_out(&mut self, a: &Attr, ttl_secs: u64) {
        self.u64(ttl_secs);
        self.zeros(8);
        self.attr(a);
    }

    /// `fuse_open_out` (16 bytes).
    pub fn open(&mut self, fh: u64, flags: u32) {
        self.u64(fh);
        self.u32(flags);
        self.u32(0);
    }

    /// `fuse_kstatfs` (80 bytes).
    pub fn statfs(&mut self, s: &FsStats) {
        for v in [s.blocks, s.bfree, s.bfree, s.files, s.ffree] {
            self.u64(v);
        }
        self.u32(s.bsize);
        self.u32(255);
        self.u32(s.bsize);
        self.zeros(28);
    }

    /// One `fuse_dirent`, padded to 8 bytes; false (and nothing written) if it does not
    /// fit in `limit` bytes of reply.
    pub fn dirent(
        &mut self,
        limit: usize,
        ino: u64,
        next: u64,
        kind: AttrKind,
        name: &[u8],
    ) -> bool {
        let size = (24 + name.len()).next_multiple_of(8);
        if self.len + size > limit.min(self.buf.len()) {
            return false;
        }
        self.u64(ino);
        self.u64(next);
        self.u32(name.len() as u32);
        self.u32(mode_type(kind) >> 12);
        self.bytes(name);
        self.zeros(size - 24 - name.len());
        true
    }
}

fn split_ns(ns: i64) -> (i64, u32) {
    (
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

fn mode_type(k: AttrKind) -> u32 {
    match k {
        AttrKind::File => libc::S_IFREG,
        AttrKind::Dir => libc::S_IFDIR,
        AttrKind::Symlink => libc::S_IFLNK,
        AttrKind::Fifo => libc::S_IFIFO,
        AttrKind::CharDevice => libc::S_IFCHR,
        AttrKind::BlockDevice => libc::S_IFBLK,
        AttrKind::Socket => libc::S_IFSOCK,
    }
}

/// A device number as the FUSE protocol carries it (the kernel's 32-bit `new_encode_dev`:
/// 12 bits of major, 20 of minor) from a Linux `dev_t`.
pub fn dev_to_wire(dev: u64) -> u32 {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A Linux `dev_t` from the FUSE protocol's 32-bit device number.
pub fn dev_from_wire(dev: u32) -> u64 {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    rustix::fs::makedev(major, minor)
}

fn mode(a: &Attr) -> u32 {
    if a.ino == 0 {
        return 0;
    }
    mode_type(a.kind) | (a.perm & 0o7777)
}

/// Seconds and nanoseconds to one nanosecond count.
pub fn ns(sec: u64, nsec: u32) -> i64 {
    (sec as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr() -> Attr {
        Attr {
            ino: 7,
            kind: AttrKind::Dir,
            size: 1000,
            perm: 0o4755,
            uid: 1,
            gid: 2,
            atime: -1,
            mtime: 1_500_000_000,
            ctime: 3,
            nlink: 2,
            rdev: rustix::fs::makedev(259, 0x12345),
        }
    }

    #[test]
    fn device_numbers_cross_the_wire_both_ways() {
        for (major, minor) in [(0, 0), (1, 3), (8, 17), (259, 0x12345), (0xfff, 0xfffff)] {
            let dev = rustix::fs::makedev(major, minor);
            let back = dev_from_wire(dev_to_wire(dev));
            assert_eq!(
                (rustix::fs::major(back), rustix::fs::minor(back)),
                (major, minor)
            );
        }
    }

    #[test]
    fn reply_structs_have_the_abi_sizes_and_fields() {
        let mut buf = vec![0xffu8; 256];
        let mut o = Out::new(&mut buf);
        o.entry(&attr(), 30);
        assert_eq!(o.len(), 128);
        assert_eq!(u64_at(&buf, 0), 7);
        assert_eq!(u64_at(&buf, 16), 30);
        assert_eq!(
            u64_at(&buf, 32),
            0,
            "validity nanoseconds and padding are zero"
        );
        // fuse_attr at 40: size, blocks, times (a time before the epoch borrows a second).
        assert_eq!(u64_at(&buf, 48), 1000);
        assert_eq!(u64_at(&buf, 56), 2);
        assert_eq!(u64_at(&buf, 64) as i64, -1);
        assert_eq!(u32_at(&buf, 88), 999_999_999);
        assert_eq!(u64_at(&buf, 72), 1);
        assert_eq!(u32_at(&buf, 92), 500_000_000);
        assert_eq!(u32_at(&buf, 100), libc::S_IFDIR | 0o4755);
        assert_eq!(u32_at(&buf, 104), 2);
        // rdev as the kernel's new_encode_dev: minor's low byte, major, minor's rest.
        assert_eq!(u32_at(&buf, 116), 0x45 | (259 << 8) | (0x12300 << 12));
        assert_eq!(u32_at(&buf, 120), 4096);

        let mut buf = vec![0u8; 64];
        let mut o = Out::new(&mut buf);
        assert!(o.dirent(64, 9, 1, AttrKind::Symlink, b"abc"));
        assert_eq!(o.len(), 32);
        assert!(
            !o.dirent(40, 9, 2, AttrKind::File, b"x"),
            "a full reply stops"
        );
        assert_eq!(o.len(), 32);
        assert_eq!(u32_at(&buf, 16), 3);
        assert_eq!(u32_at(&buf, 20), libc::S_IFLNK >> 12);
    }

    #[test]
    fn names_split_at_nul() {
        let p = Payload(b"old\0new\0");
        let (a, rest) = p.name().unwrap();
        let (b, rest) = rest.name().unwrap();
        assert_eq!((a, b, rest.0), (&b"old"[..], &b"new"[..], &b""[..]));
        assert!(Payload(b"no-nul").name().is_none());
    }
}
