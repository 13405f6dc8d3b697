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
    let want = if common::mount::uring_expected() {
        "io_uring"
    } else {
        "dev-fuse"
    };
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

/// `ln` in the mount makes a real hard link in the vault: after unmounting, the CLI shows
/// two names of one file, and a new mount gives both names one inode again.
#[test]
fn hard_links_made_in_the_mount_are_kept_in_the_vault() {
    let Some(m) = Mounted::new("hardlinks") else {
        return;
    };
    m.sh("printf 'one\\n' > a && ln a b && printf 'two\\n' >> b && mkdir sub && ln b sub/c");
    m.unmount();
    let stat = |p: &str| -> serde_json::Value {
        let out = common::mount::ok(m.avfs(&["--vault", "hardlinks", "--json", "stat", p]));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["data"].clone()
    };
    for p in ["a", "b", "sub/c"] {
        assert_eq!(stat(p)["nlink"], 3, "{p}");
    }
    let cat = common::mount::ok(m.avfs(&["--vault", "hardlinks", "cat", "sub/c"]));
    assert_eq!(cat, "one\ntwo\n");

    // Mounted again: one inode number for every name.
    common::mount::ok(m.avfs(&["mount", "hardlinks", m.dir.to_str().unwrap()]));
    let (ma, mc) = (
        fs::metadata(m.dir.join("a")).unwrap(),
        fs::metadata(m.dir.join("sub/c")).unwrap(),
    );
    assert_eq!(ma.ino(), mc.ino());
    assert_eq!(ma.nlink(), 3);
    fs::remove_file(m.dir.join("b")).unwrap();
    assert_eq!(fs::metadata(m.dir.join("a")).unwrap().nlink(), 2);
    assert_eq!(fs::read(m.dir.join("a")).unwrap(), b"one\ntwo\n");
    m.unmount();
    assert_eq!(stat("a")["nlink"], 2);
    assert_eq!(stat("sub/c")["nlink"], 2);
}

/// Device nodes, sockets, and hard links to every kind but a directory: made in the mount,
/// they keep their type, device number and link count in the vault, after a remount, and
/// through export and import. A device node never opens: the mount is `nodev`.
#[test]
fn special_files_and_links_to_every_kind_are_kept() {
    let Some(m) = Mounted::new("special") else {
        return;
    };
    m.sh(
        "umask 022 && mknod c1 c 1 3 && mknod b1 b 7 5 && mkfifo p1 && ln -s target sl \
          && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' \
          && for n in c1 b1 p1 sl sock; do ln $n $n.2; done",
    );
    let shown = "stat -c '%n %F %t:%T %h %a' c1 c1.2 b1 b1.2 p1.2 sl.2 sock.2";
    let want = "c1 character special file 1:3 2 644\n\
                c1.2 character special file 1:3 2 644\n\
                b1 block special file 7:5 2 644\n\
                b1.2 block special file 7:5 2 644\n\
                p1.2 fifo 0:0 2 644\n\
                sl.2 symbolic link 0:0 2 777\n\
                sock.2 socket 0:0 2 755\n";
    // (A socket takes 0777 less the umask: sh's 022 here.)
    assert_eq!(m.sh(shown), want);
    assert_eq!(m.sh("readlink sl.2"), "target\n");
    // nodev: opening a device node through the mount is refused, for root too.
    let open = fs::File::open(m.dir.join("c1")).map_err(|e| e.raw_os_error());
    assert_eq!(open.err(), Some(Some(libc_eacces())));
    let same_ino = |a: &str, b: &str| {
        let (x, y) = (
            fs::symlink_metadata(m.dir.join(a)).unwrap(),
            fs::symlink_metadata(m.dir.join(b)).unwrap(),
        );
        x.ino() == y.ino() && x.nlink() == 2
    };
    for n in ["c1", "b1", "p1", "sl", "sock"] {
        assert!(same_ino(n, &format!("{n}.2")), "{n}");
    }
    m.unmount();

    // In the vault, and mounted again.
    let stat = |vault: &str, p: &str| -> serde_json::Value {
        let out = common::mount::ok(m.avfs(&["--vault", vault, "--json", "stat", p]));
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["data"].clone()
    };
    let b = stat("special", "b1.2");
    assert_eq!(
        (b["type"].as_str(), b["nlink"].as_u64()),
        (Some("blockdev"), Some(2))
    );
    assert_eq!(b["device"], serde_json::json!({"major": 7, "minor": 5}));
    assert_eq!(stat("special", "sock")["type"], "socket");
    assert_eq!(stat("special", "sl")["target"], "target");
    common::mount::ok(m.avfs(&["--vault", "special", "vault", "check"]));
    common::mount::ok(m.avfs(&["mount", "special", m.dir.to_str().unwrap()]));
    assert_eq!(m.sh(shown), want);
    for n in ["c1", "b1", "p1", "sl", "sock"] {
        assert!(same_ino(n, &format!("{n}.2")), "{n} after a remount");
    }
    // The last other name goes: the node stands alone again, and the vault stays sound.
    m.sh("rm c1.2 sl");
    assert_eq!(m.sh("stat -c '%n %h' c1 sl.2"), "c1 1\nsl.2 1\n");
    m.unmount();
    common::mount::ok(m.avfs(&["--vault", "special", "vault", "check"]));

    // Export with --devices makes them on the host, hard links included; import brings
    // them back.
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("x");
    common::mount::ok(m.avfs(&[
        "--vault",
        "special",
        "export",
        "--devices",
        "/",
        out.to_str().unwrap(),
    ]));
    let host_stat = std::process::Command::new("stat")
        .args(["-c", "%n %F %t:%T %h"])
        .args(["b1", "b1.2", "c1", "p1", "sock", "sl.2"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&host_stat.stdout),
        "b1 block special file 7:5 2\n\
         b1.2 block special file 7:5 2\n\
         c1 character special file 1:3 1\n\
         p1 fifo 0:0 2\n\
         sock socket 0:0 2\n\
         sl.2 symbolic link 0:0 1\n"
    );
    common::mount::ok(m.avfs(&["vault", "create", "back"]));
    common::mount::ok(m.avfs(&["--vault", "back", "import", out.to_str().unwrap(), "/"]));
    let p = stat("back", "p1.2");
    assert_eq!(
        (p["type"].as_str(), p["nlink"].as_u64()),
        (Some("fifo"), Some(2))
    );
    assert_eq!(
        stat("back", "c1")["device"],
        serde_json::json!({"major": 1, "minor": 3})
    );
    common::mount::ok(m.avfs(&["--vault", "back", "vault", "check"]));
}

fn libc_eacces() -> i32 {
    rustix::io::Errno::ACCESS.raw_os_error()
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

/// Stored content read back at any offset and length: across chunk boundaries, inside an
/// all-zero chunk (stored as a hole), past the stored bytes of a file truncated up, and
/// past the end. Reads bypass the page cache (O_DIRECT) so each one reaches the daemon
/// with its own offset, after a remount so they come from the vault and not from write
/// buffers. Over both transports, and through the CLI.
fn stored_content_reads_back(m: &Mounted) {
    const CHUNK: usize = 256 * 1024;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let mut big = noise(CHUNK);
    big.extend(vec![0u8; CHUNK]);
    big.extend(noise(CHUNK + 100_000));
    let small = noise(10_000);
    let mut grown = noise(300_000);
    fs::write(m.dir.join("big"), &big).unwrap();
    fs::write(m.dir.join("small"), &small).unwrap();
    fs::write(m.dir.join("grown"), &grown).unwrap();
    File::options()
        .write(true)
        .open(m.dir.join("grown"))
        .unwrap()
        .set_len(900_000)
        .unwrap();
    grown.resize(900_000, 0);
    m.unmount();
    common::mount::ok(m.avfs(&["mount", &m.vault, m.dir.to_str().unwrap()]));

    use std::os::unix::fs::FileExt;
    for (name, want) in [("big", &big), ("small", &small), ("grown", &grown)] {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(m.dir.join(name))
            .unwrap();
        let len = want.len();
        let offsets = [
            0,
            1,
            4095,
            CHUNK - 1,
            CHUNK,
            CHUNK + 12_345,
            2 * CHUNK - 7,
            2 * CHUNK,
            300_000 - 3,
            len.saturating_sub(10),
            len,
            len + 100,
        ];
        for off in offsets {
            for size in [1, 4096, 100_000, 700_000] {
                let mut buf = vec![0xaa; size];
                let mut got = 0;
                while got < size {
                    let n = f.read_at(&mut buf[got..], (off + got) as u64).unwrap();
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                let end = (off + size).min(len).max(off.min(len));
                assert_eq!(
                    &buf[..got],
                    &want[off.min(len)..end],
                    "{name}: {size} bytes at {off}"
                );
            }
        }
        let cat = m.avfs(&["cat", name]);
        assert!(cat.status.success());
        assert!(cat.stdout == *want, "{name}: `avfs cat` differs");
    }
}

#[test]
fn stored_content_reads_back_at_any_offset() {
    let Some(m) = Mounted::new("reads") else {
        return;
    };
    stored_content_reads_back(&m);
}

#[test]
fn stored_content_reads_back_at_any_offset_over_dev_fuse() {
    let Some(m) = Mounted::dev_fuse("reads") else {
        return;
    };
    stored_content_reads_back(&m);
}

/// A large file changed in place, as a database does: writes into the middle, growth past
/// the end, a truncate into a chunk, from several threads with fsync after each write. A
/// commit stores only the chunks that changed since the last one; the content must come
/// out exact, in the mount, after a remount, and through the CLI (debug builds also check
/// every such commit against storing the whole file).
#[test]
fn a_large_file_changed_in_place_keeps_every_byte() {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 256 * 1024;
    let Some(m) = Mounted::new("inplace") else {
        return;
    };
    let path = m.dir.join("db");
    let mut want: Vec<u8> = (0..10 * CHUNK + 1000)
        .map(|i| (i % 251) as u8 + 1)
        .collect();
    fs::write(&path, &want).unwrap();

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for (off, byte) in [(5, 2u8), (3 * CHUNK - 100, 3), (7 * CHUNK + 4096, 4)] {
        let page = vec![byte; 4096];
        f.write_at(&page, off as u64).unwrap();
        f.sync_all().unwrap();
        want[off..off + 4096].copy_from_slice(&page);
    }
    // Growth past the end, then a truncate into the middle of a chunk.
    let tail = vec![9u8; 2 * CHUNK];
    f.write_at(&tail, want.len() as u64 + 500).unwrap();
    f.sync_all().unwrap();
    want.resize(want.len() + 500, 0);
    want.extend_from_slice(&tail);
    f.set_len((11 * CHUNK + 77) as u64).unwrap();
    f.sync_all().unwrap();
    want.truncate(11 * CHUNK + 77);

    // Four writers, each with its own descriptor and region, fsync after every page.
    std::thread::scope(|s| {
        for t in 0..4usize {
            let path = &path;
            s.spawn(move || {
                let f = OpenOptions::new().write(true).open(path).unwrap();
                for k in 0..8usize {
                    let off = t * 2 * CHUNK + k * 9000;
                    f.write_at(&vec![(10 + t) as u8; 3000], off as u64).unwrap();
                    f.sync_all().unwrap();
                }
            });
        }
    });
    for t in 0..4usize {
        for k in 0..8usize {
            let off = t * 2 * CHUNK + k * 9000;
            want[off..off + 3000].fill((10 + t) as u8);
        }
    }
    drop(f);
    assert_kept(&m, "db", &want);
    common::mount::ok(m.avfs(&["vault", "check"]));
    common::mount::ok(m.avfs(&["mount", &m.vault, m.dir.to_str().unwrap()]));
    assert!(
        fs::read(&path).unwrap() == want,
        "content after a remount differs"
    );
}

/// Anonymous memory of the daemon serving `m`, in KiB.
fn daemon_anon_kib(m: &Mounted) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", m.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .expect("RssAnon in /proc/<pid>/status")
}

/// `name` holds `want` in the mount, and after unmounting, in the vault (`avfs cat`).
fn assert_kept(m: &Mounted, name: &str, want: &[u8]) {
    assert!(
        fs::read(m.dir.join(name)).unwrap() == want,
        "content in the mount differs"
    );
    m.unmount();
    let cat = m.avfs(&["cat", name]);
    assert!(cat.status.success());
    assert!(cat.stdout == want, "content in the vault differs");
}

/// A large stored file opened for writing is not read into the daemon: it holds only the
/// chunks a write changed in part, while reads of the rest (O_DIRECT, so each reaches the
/// daemon while the writer is open) come from the vault. Writes straddling chunks, a cut
/// into a chunk and growth past it read back exact, in the mount and after a remount.
#[test]
fn a_large_file_open_for_writing_holds_only_what_changed() {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 256 * 1024;
    const LEN: usize = 48 << 20;
    let Some(m) = Mounted::new("lazy") else {
        return;
    };
    let path = m.dir.join("db");
    let mut want: Vec<u8> = (0..LEN as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 13) as u8 | 1)
        .collect();
    fs::write(&path, &want).unwrap();
    m.unmount();
    common::mount::ok(m.avfs(&["mount", &m.vault, m.dir.to_str().unwrap()]));
    let before = daemon_anon_kib(&m);

    let w = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for (off, byte) in [(5, 2u8), (CHUNK - 100, 3), (20 * CHUNK + 4096, 4)] {
        let page = vec![byte; 4096];
        w.write_at(&page, off as u64).unwrap();
        want[off..off + 4096].copy_from_slice(&page);
    }
    w.sync_all().unwrap();
    // Cut into the last chunk but one, then grow past the old end: the gap reads as zeros.
    let cut = LEN - CHUNK - 1000;
    w.set_len(cut as u64).unwrap();
    w.write_at(b"tail", (LEN + 10) as u64).unwrap();
    want.truncate(cut);
    want.resize(LEN + 10, 0);
    want.extend_from_slice(b"tail");

    let r = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let len = want.len();
    for off in [
        0,
        CHUNK - 200,
        20 * CHUNK,
        30 * CHUNK + 7,
        cut - 50,
        LEN - 3,
    ] {
        let mut buf = vec![0xaa; 300_000];
        let mut got = 0;
        while got < buf.len() {
            let n = r.read_at(&mut buf[got..], (off + got) as u64).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        let end = (off + buf.len()).min(len);
        assert!(
            buf[..got] == want[off..end],
            "{} bytes at {off} differ",
            end - off
        );
    }
    let grown = daemon_anon_kib(&m).saturating_sub(before);
    assert!(
        grown < (LEN / 4 / 1024) as u64,
        "the daemon grew by {grown} KiB for a {} MiB file open for writing",
        LEN >> 20
    );
    drop((w, r));
    assert_kept(&m, "db", &want);
}

/// A size change costs the same whatever the size: a file truncated up to terabytes in
/// the mount stays sparse (the daemon's memory stays flat, the stored list stays short),
/// reads back zeros with the bytes written far out, and past the largest file avfs holds
/// (8 TiB) a size change fails with EFBIG and changes nothing.
#[test]
fn a_size_change_of_any_size_costs_the_same() {
    use std::os::unix::fs::FileExt;
    const TIB: u64 = 1 << 40;
    let Some(m) = Mounted::new("sparse") else {
        return;
    };
    let path = m.dir.join("huge");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.sync_all().unwrap();
    let before = daemon_anon_kib(&m);
    for too_big in [999_999_999_999_999u64, 8 * TIB + 1, u64::MAX >> 1] {
        let e = f.set_len(too_big).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "set_len({too_big})");
    }
    assert_eq!(
        f.metadata().unwrap().len(),
        4,
        "a refused size changes nothing"
    );
    f.set_len(8 * TIB).unwrap();
    f.write_all_at(b"far", 5 * TIB).unwrap();
    f.sync_all().unwrap();
    f.set_len(7 * TIB).unwrap();
    f.set_len(8 * TIB).unwrap();
    f.sync_all().unwrap();
    let mut buf = [0xaau8; 8];
    f.read_exact_at(&mut buf, 5 * TIB - 2).unwrap();
    assert_eq!(&buf, b"\0\0far\0\0\0");
    f.read_exact_at(&mut buf, 8 * TIB - 8).unwrap();
    assert_eq!(buf, [0; 8]);
    let grown = daemon_anon_kib(&m).saturating_sub(before);
    assert!(
        grown < 32 * 1024,
        "the daemon grew by {grown} KiB for size changes"
    );
    drop(f);
    m.unmount();
    let stat = common::mount::ok(m.avfs(&["--json", "stat", "huge"]));
    let stat: serde_json::Value = serde_json::from_str(&stat).unwrap();
    assert_eq!(stat["data"]["size"], 8 * TIB);
    // The stored content is a short list, so the whole vault stays small.
    let stats = common::mount::ok(m.avfs(&["--json", "stats"]));
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(
        stats["data"]["disk_bytes"].as_u64().unwrap() < 64 << 20,
        "{stats}"
    );
    common::mount::ok(m.avfs(&["vault", "check"]));
}

/// A file written, closed, then unlinked while a reader still has it open: the reader
/// reads what the writer wrote (O_DIRECT, so from the daemon, not the page cache). The
/// reader opened while the writer's buffer was live. The kernel sends the writer's
/// RELEASE after close returns, so it races the unlink and the kernel's own SETATTR of
/// the file's times: each size runs many times to meet both orders.
#[test]
fn an_unlinked_file_reads_what_was_written_before_the_unlink() {
    use std::os::unix::fs::FileExt;
    let Some(m) = Mounted::new("unlinked") else {
        return;
    };
    let path = m.dir.join("f");
    let sizes = [(5usize, "small"), (700_000, "chunked")];
    for (round, (size, label)) in sizes.iter().cycle().take(40).enumerate() {
        let (size, label) = (*size, format!("{label} (round {round})"));
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
        let w = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        w.write_all_at(&data, 0).unwrap();
        let r = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        drop(w);
        fs::remove_file(&path).unwrap();
        let mut got = vec![0u8; size + 10];
        let mut n = 0;
        while n < got.len() {
            let k = r.read_at(&mut got[n..], n as u64).unwrap();
            if k == 0 {
                break;
            }
            n += k;
        }
        assert_eq!(n, size, "{label}: length read back");
        assert!(got[..n] == data[..], "{label}: content read back differs");
    }
}

/// Review finding: `apply` compares a FIFO, device node or socket with the host by type and
/// device number only, so a mode change made in the fork (say a device locked down to 0600)
/// is reported `unchanged` and never reaches the host, while the same chmod of a regular
/// file is carried over.
#[test]
fn apply_carries_a_mode_change_of_a_socket_or_device() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| common::mount::ok(common::mount::avfs_in(home.path(), args));
    let host = home.path().join("proj");
    fs::create_dir(&host).unwrap();
    fs::write(host.join("f"), b"x").unwrap();
    fs::set_permissions(host.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let sock = std::os::unix::net::UnixListener::bind(host.join("sock")).unwrap();
    drop(sock);
    fs::set_permissions(host.join("sock"), fs::Permissions::from_mode(0o644)).unwrap();
    let names = ["f", "sock", "dev"];
    // A device node needs CAP_MKNOD on the host: the suite runs as root.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        host.join("dev"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o644),
        rustix::fs::makedev(1, 3),
    )
    .expect("mknod on the host (the suite runs as root)");
    fs::set_permissions(host.join("dev"), fs::Permissions::from_mode(0o644)).unwrap();
    run(&["vault", "create", "v"]);
    run(&["--vault", "v", "import", host.to_str().unwrap(), "/"]);
    run(&["vault", "fork", "v", "task"]);
    for n in &names {
        run(&["--vault", "task", "chmod", "600", &format!("/{n}")]);
    }
    let mode = |n: &str| fs::symlink_metadata(host.join(n)).unwrap().mode() & 0o7777;
    // Without --devices the device is left alone and listed as skipped.
    let out = run(&[
        "--vault",
        "task",
        "--json",
        "apply",
        "--dry-run",
        host.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["data"]["skipped"],
        serde_json::json!(["/dev: a device node, not made on the host (see --devices)"])
    );
    assert_eq!(
        report["data"]["mode_changed"],
        serde_json::json!(["/f", "/sock"])
    );
    let out = run(&[
        "--vault",
        "task",
        "--json",
        "apply",
        "--devices",
        host.to_str().unwrap(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(String, u32)> = names.iter().map(|n| (n.to_string(), mode(n))).collect();
    let want: Vec<(String, u32)> = names.iter().map(|n| (n.to_string(), 0o600)).collect();
    assert_eq!(got, want, "apply report: {report}");
}

/// Review finding (security): a device node an agent makes in the `nodev` mount is "metadata
/// only" there, but `export` (and `apply`) run by root make it a live host device on a file
/// system that is not `nodev`, with the mode the agent chose. Here `c 1 11` (/dev/kmsg, 0644
/// root on the host) made 0666 in the mount comes out as a node any user may write to the
/// kernel log through. A device should not reach the host unless the caller asks for it.
#[test]
fn export_does_not_turn_an_agent_made_device_into_an_open_host_device() {
    let Some(m) = Mounted::new("devexport") else {
        return;
    };
    m.sh("mknod kmsg c 1 11 && chmod 666 kmsg");
    // In the mount it never opens (nodev).
    assert!(
        fs::OpenOptions::new()
            .write(true)
            .open(m.dir.join("kmsg"))
            .is_err()
    );
    m.unmount();
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("x");
    let report = common::mount::ok(m.avfs(&[
        "--vault",
        "devexport",
        "--json",
        "export",
        "/",
        out.to_str().unwrap(),
    ]));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["data"]["skipped"],
        serde_json::json!(["/kmsg: a device node, not made on the host (see --devices)"])
    );
    let made = fs::symlink_metadata(out.join("kmsg"));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        !made
            .as_ref()
            .is_ok_and(|md| md.file_type().is_char_device()),
        "export made a live character device 1,11 mode {:o} on the host",
        made.map(|md| md.mode()).unwrap_or(0)
    );
}
