//! File contents on a real FUSE mount: stored content reads back at any offset on both
//! transports, large files changed in place keep every byte and hold only what changed in
//! the daemon, and an unlinked file still reads what was written before the unlink.

mod common;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;

use common::mount::Mounted;

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
    let Some(m) = Mounted::new("unlinked") else {
        return;
    };
    let path = m.dir.join("f");
    let sizes = [(5usize, "small"), (700_000, "chunked")];
    for (round, (size, label)) in sizes.iter().cycle().take(40).enumerate() {
        let (size, label) = (*size, format!("{label} (round {round})"));
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
        let (w, r) = write_then_open_direct(&path, &data);
        drop(w);
        fs::remove_file(&path).unwrap();
        let got = read_to_end_at(&r, size + 10);
        assert_eq!(got.len(), size, "{label}: length read back");
        assert!(got == data, "{label}: content read back differs");
    }
}

/// A file removed by another process (the CLI, on the same vault) while the mount has it
/// open for writing and for reading: the writer's close finds no path to store at, and
/// the reader still reads every byte written, not the size with no content behind it.
#[test]
fn a_file_removed_behind_the_mount_reads_what_was_written() {
    let Some(m) = Mounted::new("removed-behind") else {
        return;
    };
    let path = m.dir.join("f");
    let data: Vec<u8> = (0..700_000).map(|i| (i % 251) as u8 + 1).collect();
    let (w, r) = write_then_open_direct(&path, &data);
    common::mount::ok(m.avfs(&["rm", "f"]));
    drop(w);
    let got = read_to_end_at(&r, data.len() + 10);
    assert_eq!(got.len(), data.len(), "length read back");
    assert!(got == data, "content read back differs");
}

/// Create (or truncate) `path` and write `data` into it, leaving the writer open, then open
/// a reader that bypasses the page cache (O_DIRECT, so reads reach the daemon): (writer,
/// reader).
fn write_then_open_direct(path: &std::path::Path, data: &[u8]) -> (File, File) {
    use std::os::unix::fs::FileExt;
    let w = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    w.write_all_at(data, 0).unwrap();
    let r = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap();
    (w, r)
}

/// Read `f` from offset 0 until end of file or `limit` bytes, whichever comes first.
fn read_to_end_at(f: &File, limit: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut got = vec![0u8; limit];
    let mut n = 0;
    while n < got.len() {
        let k = f.read_at(&mut got[n..], n as u64).unwrap();
        if k == 0 {
            break;
        }
        n += k;
    }
    got.truncate(n);
    got
}
