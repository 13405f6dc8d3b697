//! POSIX semantics on a real FUSE mount, compared with the native file system in the same
//! test: each scenario runs in a native temp dir and in the mount, and the observed
//! outcomes (data, metadata, errno) must be identical.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use common::mount::Mounted;

type Log = Vec<String>;

fn errno_of(r: std::io::Result<impl std::fmt::Debug>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(-1)),
    }
}

fn scenario(root: &Path) -> Log {
    let mut log = Log::new();
    let p = |n: &str| root.join(n);
    let mut note = |s: String| log.push(s);

    // create, write, read back; O_EXCL; O_APPEND; O_TRUNC
    fs::write(p("f"), b"hello").unwrap();
    note(format!("read {:?}", fs::read(p("f")).unwrap()));
    note(format!(
        "excl {}",
        errno_of(OpenOptions::new().write(true).create_new(true).open(p("f")))
    ));
    {
        let mut f = OpenOptions::new().append(true).open(p("f")).unwrap();
        f.write_all(b" world").unwrap();
    }
    note(format!(
        "append {:?}",
        String::from_utf8(fs::read(p("f")).unwrap())
    ));
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p("f"))
        .unwrap();
    note(format!("trunc len {}", fs::metadata(p("f")).unwrap().len()));

    // random-access writes and sparse extension
    {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(p("f"))
            .unwrap();
        f.seek(SeekFrom::Start(10)).unwrap();
        f.write_all(b"xy").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).unwrap();
        note(format!("sparse {buf:?}"));
        f.set_len(4).unwrap();
        f.set_len(6).unwrap();
    }
    note(format!("set_len {:?}", fs::read(p("f")).unwrap()));

    // directories and their errors
    fs::create_dir(p("d")).unwrap();
    note(format!("mkdir exists {}", errno_of(fs::create_dir(p("d")))));
    fs::write(p("d/inner"), b"1").unwrap();
    note(format!(
        "rmdir nonempty {}",
        errno_of(fs::remove_dir(p("d")))
    ));
    note(format!("rmdir file {}", errno_of(fs::remove_dir(p("f")))));
    note(format!("unlink dir {}", errno_of(fs::remove_file(p("d")))));
    note(format!(
        "open missing {}",
        errno_of(File::open(p("missing")))
    ));
    note(format!("through file {}", errno_of(File::open(p("f/x")))));

    // rename semantics
    fs::write(p("a"), b"A").unwrap();
    fs::write(p("b"), b"B").unwrap();
    note(format!(
        "rename over file {}",
        errno_of(fs::rename(p("a"), p("b")))
    ));
    note(format!(
        "after rename {:?} {}",
        fs::read(p("b")).unwrap(),
        p("a").exists()
    ));
    fs::create_dir(p("e1")).unwrap();
    fs::create_dir(p("e2")).unwrap();
    note(format!(
        "rename dir over empty dir {}",
        errno_of(fs::rename(p("e1"), p("e2")))
    ));
    note(format!(
        "rename dir over nonempty {}",
        errno_of(fs::rename(p("e2"), p("d")))
    ));
    note(format!(
        "rename file over dir {}",
        errno_of(fs::rename(p("b"), p("e2")))
    ));
    note(format!(
        "rename dir over file {}",
        errno_of(fs::rename(p("e2"), p("b")))
    ));
    fs::write(p("x1"), b"one").unwrap();
    fs::write(p("x2"), b"two").unwrap();
    let cwd_x1 = CString::new(p("x1").as_os_str().as_encoded_bytes()).unwrap();
    let cwd_x2 = CString::new(p("x2").as_os_str().as_encoded_bytes()).unwrap();
    let noreplace = rustix::fs::renameat_with(
        rustix::fs::CWD,
        cwd_x1.as_c_str(),
        rustix::fs::CWD,
        cwd_x2.as_c_str(),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    note(format!(
        "noreplace {:?}",
        noreplace.map_err(|e| e.raw_os_error())
    ));
    let exchange = rustix::fs::renameat_with(
        rustix::fs::CWD,
        cwd_x1.as_c_str(),
        rustix::fs::CWD,
        cwd_x2.as_c_str(),
        rustix::fs::RenameFlags::EXCHANGE,
    );
    note(format!(
        "exchange {:?}",
        exchange.map_err(|e| e.raw_os_error())
    ));
    note(format!(
        "exchanged {:?} {:?}",
        fs::read(p("x1")).unwrap(),
        fs::read(p("x2")).unwrap()
    ));

    // symlinks
    std::os::unix::fs::symlink("b", p("link")).unwrap();
    note(format!("readlink {:?}", fs::read_link(p("link")).unwrap()));
    note(format!(
        "lstat is symlink {} stat is file {}",
        fs::symlink_metadata(p("link"))
            .unwrap()
            .file_type()
            .is_symlink(),
        fs::metadata(p("link")).unwrap().is_file()
    ));
    note(format!("read via link {:?}", fs::read(p("link")).unwrap()));

    // modes and nanosecond times
    fs::set_permissions(p("b"), fs::Permissions::from_mode(0o751)).unwrap();
    note(format!(
        "mode {:o}",
        fs::metadata(p("b")).unwrap().mode() & 0o7777
    ));
    let ts = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 1_600_000_000,
            tv_nsec: 123_456_789,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 1_700_000_000,
            tv_nsec: 987_654_321,
        },
    };
    rustix::fs::utimensat(rustix::fs::CWD, p("b"), &ts, rustix::fs::AtFlags::empty()).unwrap();
    let m = fs::metadata(p("b")).unwrap();
    note(format!(
        "times {} {} {} {}",
        m.atime(),
        m.atime_nsec(),
        m.mtime(),
        m.mtime_nsec()
    ));

    // an unlinked file stays readable through an open descriptor
    fs::write(p("gone"), b"still here").unwrap();
    let mut f = File::open(p("gone")).unwrap();
    fs::remove_file(p("gone")).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    note(format!("open unlinked {s:?} exists {}", p("gone").exists()));

    // write through one descriptor, read through another before close
    let mut w = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p("shared"))
        .unwrap();
    w.write_all(b"abc").unwrap();
    note(format!(
        "read while open {:?}",
        fs::read(p("shared")).unwrap()
    ));
    w.sync_all().unwrap();
    drop(w);
    note(format!(
        "created mode {:o}",
        fs::metadata(p("shared")).unwrap().mode() & 0o7777
    ));

    // xattrs
    let xa = p("b");
    note(format!(
        "setxattr {:?}",
        rustix::fs::setxattr(&xa, "user.k", b"v1", rustix::fs::XattrFlags::empty())
            .map_err(|e| e.raw_os_error())
    ));
    let mut buf = [0u8; 16];
    let n = rustix::fs::getxattr(&xa, "user.k", &mut buf).unwrap();
    note(format!("getxattr {:?}", &buf[..n]));
    note(format!(
        "getxattr missing {:?}",
        rustix::fs::getxattr(&xa, "user.none", &mut buf).map_err(|e| e.raw_os_error())
    ));
    note(format!(
        "create existing {:?}",
        rustix::fs::setxattr(&xa, "user.k", b"v2", rustix::fs::XattrFlags::CREATE)
            .map_err(|e| e.raw_os_error())
    ));
    let mut names = [0u8; 64];
    let n = rustix::fs::listxattr(&xa, &mut names).unwrap();
    let listed: Vec<&[u8]> = names[..n]
        .split(|b| *b == 0)
        .filter(|s| s.starts_with(b"user."))
        .collect();
    note(format!("listxattr {listed:?}"));
    rustix::fs::removexattr(&xa, "user.k").unwrap();
    note(format!(
        "after remove {:?}",
        rustix::fs::getxattr(&xa, "user.k", &mut buf).map_err(|e| e.raw_os_error())
    ));

    // fifo
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    note(format!("fifo {}", {
        use std::os::unix::fs::FileTypeExt;
        fs::symlink_metadata(p("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    }));

    // hard links: two names, one inode
    fs::write(p("h1"), b"first").unwrap();
    note(format!(
        "link {}",
        errno_of(fs::hard_link(p("h1"), p("h2")))
    ));
    fs::write(p("h2"), b"written via h2").unwrap();
    note(format!("read via h1 {:?}", fs::read(p("h1")).unwrap()));
    let (m1, m2) = (
        fs::metadata(p("h1")).unwrap(),
        fs::metadata(p("h2")).unwrap(),
    );
    note(format!(
        "nlink {} {} same ino {}",
        m1.nlink(),
        m2.nlink(),
        m1.ino() == m2.ino()
    ));
    fs::set_permissions(p("h1"), fs::Permissions::from_mode(0o640)).unwrap();
    note(format!(
        "chmod via h1, mode of h2 {:o}",
        fs::metadata(p("h2")).unwrap().mode() & 0o7777
    ));
    note(format!(
        "link over existing {}",
        errno_of(fs::hard_link(p("h1"), p("h2")))
    ));
    note(format!(
        "link a directory {}",
        errno_of(fs::hard_link(p("d"), p("dlink")))
    ));
    fs::hard_link(p("h2"), p("d/h3")).unwrap();
    note(format!(
        "third name nlink {}",
        fs::metadata(p("h1")).unwrap().nlink()
    ));
    fs::remove_file(p("h1")).unwrap();
    fs::remove_file(p("d/h3")).unwrap();
    let m2 = fs::metadata(p("h2")).unwrap();
    note(format!(
        "after unlinking the others {:?} nlink {} exists {}",
        fs::read(p("h2")).unwrap(),
        m2.nlink(),
        p("h1").exists()
    ));

    // chmod of an open file nothing was written to yet (tar does this for empty files)
    {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(p("chmod-open"))
            .unwrap();
        f.set_permissions(fs::Permissions::from_mode(0o644))
            .unwrap();
    }
    note(format!(
        "chmod while open {:o}",
        fs::metadata(p("chmod-open")).unwrap().mode() & 0o7777
    ));

    // set-ID bits: a write by root keeps them, chown clears them (even for root)
    fs::write(p("setid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(p("setid"), fs::Permissions::from_mode(0o6755)).unwrap();
    OpenOptions::new()
        .append(true)
        .open(p("setid"))
        .unwrap()
        .write_all(b"true\n")
        .unwrap();
    note(format!(
        "setid after write {:o}",
        fs::metadata(p("setid")).unwrap().mode() & 0o7777
    ));
    std::os::unix::fs::chown(p("setid"), Some(0), Some(0)).unwrap();
    note(format!(
        "setid after chown {:o}",
        fs::metadata(p("setid")).unwrap().mode() & 0o7777
    ));

    // directory listing, sorted
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    note(format!("listing {names:?}"));
    note(format!("statfs ok {}", rustix::fs::statfs(root).is_ok()));
    log
}

fn matches_native(m: &Mounted) {
    let native = tempfile::tempdir().unwrap();
    let expected = scenario(native.path());
    let actual = scenario(&m.dir);
    for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
        assert_eq!(e, a, "step {i} differs (native vs mount)");
    }
    assert_eq!(expected.len(), actual.len());
}

/// Through the default transport: FUSE over io_uring wherever the kernel allows it.
#[test]
fn posix_semantics_match_native() {
    let Some(m) = Mounted::new("posix") else {
        return;
    };
    let want = common::mount::expected_transport();
    assert_eq!(m.transport(), want);
    let before = m.ring_waits();
    matches_native(&m);
    if want == "io_uring" {
        let served = m.ring_waits() - before;
        assert!(
            served >= 100,
            "the rings answered too few requests: {served}"
        );
    }
}

/// Through `/dev/fuse`, the transport used where io_uring is not available.
#[test]
fn posix_semantics_match_native_over_dev_fuse() {
    let Some(m) = Mounted::dev_fuse("posix") else {
        return;
    };
    assert_eq!(m.transport(), "dev-fuse");
    matches_native(&m);
    assert_eq!(m.ring_waits(), 0, "no io_uring workers over /dev/fuse");
}

#[test]
fn readdir_offsets_stay_stable_while_entries_change() {
    let Some(m) = Mounted::new("readdir") else {
        return;
    };
    for i in 0..200 {
        fs::write(m.dir.join(format!("f{i:03}")), b"x").unwrap();
    }
    // Delete every entry while iterating, as `rm -rf` does: none may be skipped or repeated.
    let mut seen = Vec::new();
    for e in fs::read_dir(&m.dir).unwrap() {
        let e = e.unwrap();
        seen.push(e.file_name());
        fs::remove_file(e.path()).unwrap();
    }
    assert_eq!(seen.len(), 200);
    assert_eq!(fs::read_dir(&m.dir).unwrap().count(), 0);
}
