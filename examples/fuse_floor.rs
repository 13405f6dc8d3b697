//! The FUSE floor: a file system that keeps everything in memory and does no other work,
//! served through avfs's own FUSE adapter (`agentvfs::fuse::serve_backend`): the same mount
//! options, caching (entry and attribute TTLs, negative entries, writeback cache,
//! KILLPRIV_V2) and transport (FUSE over io_uring where the kernel offers it, else
//! `/dev/fuse`; `AVFS_FUSE_URING=0` forces `/dev/fuse`) as `avfs mount`. Whatever a workload
//! costs here is the price of going through FUSE at all on this machine (kernel round trips
//! and context switches), which no storage engine behind it can win back.
//! `scripts/bench_mount.sh` runs its workloads here too and prints the ratio.
//!
//! Usage: `cargo run --release --example fuse_floor -- <dir>` (foreground; says on stderr
//! which transport it got once mounted; unmount with `umount <dir>`). Regular files, directories,
//! symlinks, FIFOs, hard links and xattrs; no quotas, no durability.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agentvfs::fuse::{Backend, serve_backend};
use agentvfs::service::mount::{
    Attr, AttrKind, FsStats, MResult, Opened, SetAttr, SetTime, Writer,
};

const ROOT: u64 = 1;

struct Inode {
    attr: Attr,
    data: Vec<u8>,
    entries: BTreeMap<String, u64>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// Directory listings by handle, as listed at opendir: (inode, next offset, kind, name).
type Listings = HashMap<u64, Vec<(u64, u64, AttrKind, String)>>;

#[derive(Default)]
struct Floor {
    inodes: Mutex<HashMap<u64, Inode>>,
    next_ino: AtomicU64,
    next_fh: AtomicU64,
    dirs: Mutex<Listings>,
    writeback: AtomicBool,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn new_inode(ino: u64, kind: AttrKind, mode: u32, uid: u32, gid: u32) -> Inode {
    let t = now();
    Inode {
        attr: Attr {
            ino,
            kind,
            size: 0,
            perm: mode & 0o7777,
            uid,
            gid,
            atime: t,
            mtime: t,
            ctime: t,
            nlink: if kind == AttrKind::Dir { 2 } else { 1 },
            rdev: 0,
        },
        data: Vec::new(),
        entries: BTreeMap::new(),
        xattrs: BTreeMap::new(),
    }
}

type Inodes<'a> = MutexGuard<'a, HashMap<u64, Inode>>;

fn attr(inodes: &Inodes, ino: u64) -> MResult<Attr> {
    inodes.get(&ino).map(|n| n.attr.clone()).ok_or(libc::ENOENT)
}

fn node<'a>(inodes: &'a mut Inodes, ino: u64) -> MResult<&'a mut Inode> {
    inodes.get_mut(&ino).ok_or(libc::ENOENT)
}

fn child(inodes: &Inodes, parent: u64, name: &str) -> MResult<u64> {
    inodes
        .get(&parent)
        .and_then(|d| d.entries.get(name))
        .copied()
        .ok_or(libc::ENOENT)
}

fn touch_dir(inodes: &mut Inodes, dir: u64) {
    if let Some(d) = inodes.get_mut(&dir) {
        let t = now();
        d.attr.mtime = t;
        d.attr.ctime = t;
    }
}

/// One name of `ino` is gone: drop it with its last name.
fn drop_link(inodes: &mut Inodes, ino: u64) {
    if let Some(n) = inodes.get_mut(&ino) {
        n.attr.nlink = n.attr.nlink.saturating_sub(1);
        n.attr.ctime = now();
        if n.attr.nlink == 0 || n.attr.kind == AttrKind::Dir {
            inodes.remove(&ino);
        }
    }
}

impl Floor {
    fn lock(&self) -> Inodes<'_> {
        self.inodes.lock().unwrap()
    }

    fn add(
        &self,
        parent: u64,
        name: &str,
        kind: AttrKind,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let mut inodes = self.lock();
        let dir = node(&mut inodes, parent)?;
        if dir.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        dir.entries.insert(name.to_string(), ino);
        if kind == AttrKind::Dir {
            dir.attr.nlink += 1;
        }
        touch_dir(&mut inodes, parent);
        let n = new_inode(ino, kind, mode, uid, gid);
        let attr = n.attr.clone();
        inodes.insert(ino, n);
        Ok(attr)
    }

    fn remove(&self, parent: u64, name: &str, dir: bool) -> MResult<()> {
        let mut inodes = self.lock();
        let ino = child(&inodes, parent, name)?;
        let n = inodes.get(&ino).ok_or(libc::ENOENT)?;
        match (dir, n.attr.kind == AttrKind::Dir) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            (true, true) if !n.entries.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        let d = node(&mut inodes, parent)?;
        d.entries.remove(name);
        if dir {
            d.attr.nlink -= 1;
        }
        touch_dir(&mut inodes, parent);
        drop_link(&mut inodes, ino);
        Ok(())
    }
}

impl Backend for Floor {
    fn readonly(&self) -> bool {
        false
    }

    fn writeback_safe(&self) -> bool {
        true
    }

    fn set_writeback(&self) {
        self.writeback.store(true, Ordering::Relaxed);
    }

    fn finish(&self) -> agentvfs::Result<()> {
        Ok(())
    }

    fn lookup(&self, parent: u64, name: &str) -> MResult<Attr> {
        let inodes = self.lock();
        attr(&inodes, child(&inodes, parent, name)?)
    }

    fn getattr(&self, ino: u64) -> MResult<Attr> {
        attr(&self.lock(), ino)
    }

    fn setattr(&self, ino: u64, s: SetAttr) -> MResult<Attr> {
        let mut inodes = self.lock();
        let n = node(&mut inodes, ino)?;
        if let Some(m) = s.mode {
            n.attr.perm = m & 0o7777;
        }
        if let Some(u) = s.uid {
            n.attr.uid = u;
        }
        if let Some(g) = s.gid {
            n.attr.gid = g;
        }
        if let Some(size) = s.size {
            n.data.resize(size as usize, 0);
            n.attr.size = size;
            n.attr.mtime = now();
        }
        let now = s.ctime.unwrap_or_else(now);
        let at = |t| match t {
            SetTime::At(t) => t,
            SetTime::Now => now,
        };
        if let Some(t) = s.atime {
            n.attr.atime = at(t);
        }
        if let Some(t) = s.mtime {
            n.attr.mtime = at(t);
        }
        n.attr.ctime = now;
        Ok(n.attr.clone())
    }

    fn readlink(&self, ino: u64) -> MResult<Vec<u8>> {
        let inodes = self.lock();
        let n = inodes.get(&ino).ok_or(libc::ENOENT)?;
        match n.attr.kind {
            AttrKind::Symlink => Ok(n.data.clone()),
            _ => Err(libc::EINVAL),
        }
    }

    fn mknod(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        _rdev: u64,
        uid: u32,
        gid: u32,
    ) -> MResult<Attr> {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => AttrKind::Fifo,
            0 | libc::S_IFREG => AttrKind::File,
            _ => return Err(libc::EPERM),
        };
        self.add(parent, name, kind, mode, uid, gid)
    }

    fn mkdir(&self, parent: u64, name: &str, mode: u32, uid: u32, gid: u32) -> MResult<Attr> {
        self.add(parent, name, AttrKind::Dir, mode, uid, gid)
    }

    fn symlink(&self, parent: u64, name: &str, target: &str, uid: u32, gid: u32) -> MResult<Attr> {
        let attr = self.add(parent, name, AttrKind::Symlink, 0o777, uid, gid)?;
        let mut inodes = self.lock();
        let n = node(&mut inodes, attr.ino)?;
        n.data = target.as_bytes().to_vec();
        n.attr.size = n.data.len() as u64;
        Ok(n.attr.clone())
    }

    fn create(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> MResult<(Attr, u64)> {
        let attr = match self.add(parent, name, AttrKind::File, mode, uid, gid) {
            Err(libc::EEXIST) if flags & libc::O_EXCL == 0 => {
                let ino = child(&self.lock(), parent, name)?;
                self.open(ino, flags)?;
                self.getattr(ino)?
            }
            r => r?,
        };
        Ok((attr, self.next_fh.fetch_add(1, Ordering::Relaxed)))
    }

    fn unlink(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove(parent, name, false)
    }

    fn rmdir(&self, parent: u64, name: &str) -> MResult<()> {
        self.remove(parent, name, true)
    }

    fn link(&self, ino: u64, newparent: u64, newname: &str) -> MResult<Attr> {
        let mut inodes = self.lock();
        let dir = node(&mut inodes, newparent)?;
        if dir.entries.contains_key(newname) {
            return Err(libc::EEXIST);
        }
        dir.entries.insert(newname.to_string(), ino);
        touch_dir(&mut inodes, newparent);
        let n = node(&mut inodes, ino)?;
        n.attr.nlink += 1;
        n.attr.ctime = now();
        Ok(n.attr.clone())
    }

    fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        noreplace: bool,
        exchange: bool,
    ) -> MResult<()> {
        let mut inodes = self.lock();
        let ino = child(&inodes, parent, name)?;
        let target = child(&inodes, newparent, newname).ok();
        if exchange {
            let other = target.ok_or(libc::ENOENT)?;
            node(&mut inodes, parent)?
                .entries
                .insert(name.to_string(), other);
            node(&mut inodes, newparent)?
                .entries
                .insert(newname.to_string(), ino);
            return Ok(());
        }
        if let Some(old) = target {
            if noreplace {
                return Err(libc::EEXIST);
            }
            let old_node = inodes.get(&old).ok_or(libc::ENOENT)?;
            if old_node.attr.kind == AttrKind::Dir && !old_node.entries.is_empty() {
                return Err(libc::ENOTEMPTY);
            }
        }
        node(&mut inodes, parent)?.entries.remove(name);
        node(&mut inodes, newparent)?
            .entries
            .insert(newname.to_string(), ino);
        touch_dir(&mut inodes, parent);
        touch_dir(&mut inodes, newparent);
        if let Some(old) = target.filter(|&old| old != ino) {
            drop_link(&mut inodes, old);
        }
        Ok(())
    }

    fn open(&self, ino: u64, flags: i32) -> MResult<Opened> {
        if flags & libc::O_TRUNC != 0 {
            let mut inodes = self.lock();
            let n = node(&mut inodes, ino)?;
            n.data.clear();
            n.attr.size = 0;
        }
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        Ok(Opened {
            fh: self.next_fh.fetch_add(1, Ordering::Relaxed),
            keep_cache: !writable,
            flush: writable,
        })
    }

    fn read_data_into(&self, ino: u64, _fh: u64, offset: u64, buf: &mut [u8]) -> MResult<usize> {
        let inodes = self.lock();
        let n = inodes.get(&ino).ok_or(libc::ENOENT)?;
        let start = (offset as usize).min(n.data.len());
        let end = (start + buf.len()).min(n.data.len());
        buf[..end - start].copy_from_slice(&n.data[start..end]);
        Ok(end - start)
    }

    fn write_data(
        &self,
        ino: u64,
        _fh: u64,
        offset: u64,
        data: &[u8],
        _kill_setid: Option<Writer>,
    ) -> MResult<u32> {
        let mut inodes = self.lock();
        let n = node(&mut inodes, ino)?;
        let end = offset as usize + data.len();
        if end > n.data.len() {
            n.data.resize(end, 0);
        }
        n.data[offset as usize..end].copy_from_slice(data);
        n.attr.size = n.data.len() as u64;
        let t = now();
        n.attr.mtime = t;
        n.attr.ctime = t;
        Ok(data.len() as u32)
    }

    fn needs_flush(&self) -> bool {
        !self.writeback.load(Ordering::Relaxed)
    }

    fn flush(&self, _ino: u64) -> MResult<()> {
        Ok(())
    }

    fn fsync(&self, _ino: u64) -> MResult<()> {
        Ok(())
    }

    fn release(&self, _ino: u64, _fh: u64) -> MResult<()> {
        Ok(())
    }

    fn opendir(&self, ino: u64) -> MResult<u64> {
        let inodes = self.lock();
        let d = inodes.get(&ino).ok_or(libc::ENOENT)?;
        if d.attr.kind != AttrKind::Dir {
            return Err(libc::ENOTDIR);
        }
        let mut all = vec![
            (ino, AttrKind::Dir, ".".to_string()),
            (ino, AttrKind::Dir, "..".to_string()),
        ];
        for (name, i) in &d.entries {
            if let Some(n) = inodes.get(i) {
                all.push((*i, n.attr.kind, name.clone()));
            }
        }
        let listed = all
            .into_iter()
            .enumerate()
            .map(|(i, (ino, kind, name))| (ino, i as u64 + 1, kind, name))
            .collect();
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().unwrap().insert(fh, listed);
        Ok(fh)
    }

    fn readdir(&self, fh: u64, offset: u64) -> MResult<Vec<(u64, u64, AttrKind, String)>> {
        let dirs = self.dirs.lock().unwrap();
        let listed = dirs.get(&fh).ok_or(libc::EBADF)?;
        Ok(listed.iter().skip(offset as usize).cloned().collect())
    }

    fn releasedir(&self, fh: u64) {
        self.dirs.lock().unwrap().remove(&fh);
    }

    fn sync_all(&self) -> MResult<()> {
        Ok(())
    }

    fn statfs(&self) -> FsStats {
        FsStats {
            blocks: 1 << 30,
            bfree: 1 << 29,
            files: 1 << 24,
            ffree: 1 << 23,
            bsize: 4096,
        }
    }

    fn getxattr(&self, ino: u64, name: &str) -> MResult<Vec<u8>> {
        let inodes = self.lock();
        let n = inodes.get(&ino).ok_or(libc::ENOENT)?;
        n.xattrs.get(name).cloned().ok_or(libc::ENODATA)
    }

    fn listxattr(&self, ino: u64) -> MResult<Vec<u8>> {
        let inodes = self.lock();
        let n = inodes.get(&ino).ok_or(libc::ENOENT)?;
        Ok(n.xattrs.keys().flat_map(|k| k.bytes().chain([0])).collect())
    }

    fn setxattr(&self, ino: u64, name: &str, value: &[u8], _flags: i32) -> MResult<()> {
        let mut inodes = self.lock();
        node(&mut inodes, ino)?
            .xattrs
            .insert(name.to_string(), value.to_vec());
        Ok(())
    }

    fn removexattr(&self, ino: u64, name: &str) -> MResult<()> {
        let mut inodes = self.lock();
        let n = node(&mut inodes, ino)?;
        n.xattrs.remove(name).map(|_| ()).ok_or(libc::ENODATA)
    }

    fn fallocate(&self, ino: u64, offset: u64, len: u64, _mode: i32) -> MResult<()> {
        let mut inodes = self.lock();
        let n = node(&mut inodes, ino)?;
        let end = (offset + len) as usize;
        if end > n.data.len() {
            n.data.resize(end, 0);
            n.attr.size = end as u64;
        }
        Ok(())
    }
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: fuse_floor <mount dir>");
    let floor = Floor {
        next_ino: AtomicU64::new(ROOT + 1),
        next_fh: AtomicU64::new(1),
        ..Default::default()
    };
    let root = new_inode(ROOT, AttrKind::Dir, 0o755, 0, 0);
    floor.lock().insert(ROOT, root);
    serve_backend(
        Arc::new(floor),
        "fuse-floor",
        Path::new(&dir),
        |transport| eprintln!("fuse_floor: mounted at {dir} over {}", transport.as_str()),
    )
}
