//! Host trees: builders with every kind of entry, and comparers for import/export and
//! apply round trips.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Deterministic pseudo-random bytes (xorshift), including NULs and high bytes.
pub fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Set a path's atime/mtime (nanoseconds since the epoch) without following symlinks.
pub fn set_mtime(path: &Path, ns: i64) {
    let ts = rustix::fs::Timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as _,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &rustix::fs::Timestamps {
            last_access: ts,
            last_modification: ts,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap_or_else(|e| panic!("set times of {}: {e}", path.display()));
}

/// Build a host tree with nested directories, exec bits, a setgid-free variety of modes,
/// symlinks (relative, absolute, dangling, to a directory), empty files, a file over 1 MiB
/// with an all-zero stretch, and distinct nanosecond mtimes on everything.
pub fn make_host_tree(root: &Path) {
    fs::create_dir_all(root).unwrap();
    let files: &[(&str, Vec<u8>, u32)] = &[
        ("README.md", b"# project\n".to_vec(), 0o644),
        ("empty", Vec::new(), 0o644),
        ("bin/run.sh", b"#!/bin/sh\necho run\n".to_vec(), 0o755),
        ("bin/tool", random_bytes(1, 3000), 0o700),
        ("src/lib.rs", b"pub fn lib() {}\n".to_vec(), 0o644),
        ("src/deep/er/est/leaf.txt", b"leaf\n".to_vec(), 0o600),
        ("src/deep/er/empty.txt", Vec::new(), 0o444),
        ("data/big.bin", big_file(), 0o640),
        ("data/nul.bin", vec![0, 1, 0, 2, 0, 0, 255], 0o664),
        (".hidden/config", b"k=v\n".to_vec(), 0o600),
    ];
    for (rel, data, _) in files {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
    }
    fs::create_dir_all(root.join("emptydir")).unwrap();
    fs::create_dir_all(root.join("private")).unwrap();
    std::os::unix::fs::symlink("bin/run.sh", root.join("link-rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("link-abs")).unwrap();
    std::os::unix::fs::symlink("../nowhere/at/all", root.join("src/dangling")).unwrap();
    std::os::unix::fs::symlink("deep", root.join("src/link-dir")).unwrap();
    for (rel, _, mode) in files {
        fs::set_permissions(root.join(rel), fs::Permissions::from_mode(*mode)).unwrap();
    }
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(root.join("bin"), fs::Permissions::from_mode(0o750)).unwrap();
    // Distinct nanosecond times, deepest entries first so parents keep theirs.
    let mut all = Vec::new();
    walk(root, root, &mut all);
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, rel) in all.iter().enumerate() {
        let ns = 1_600_000_000_123_456_789 + (i as i64) * 1_000_000_007;
        set_mtime(&root.join(rel), ns);
    }
}

/// 1.5 MiB with an all-zero 300 KiB stretch in the middle (a hole in the vault).
pub fn big_file() -> Vec<u8> {
    let mut v = random_bytes(7, 1024 * 1024);
    v.extend(std::iter::repeat_n(0u8, 300 * 1024));
    v.extend(random_bytes(8, 200 * 1024 + 17));
    v
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        out.push(p.strip_prefix(root).unwrap().to_path_buf());
        if e.file_type().unwrap().is_dir() {
            walk(root, &p, out);
        }
    }
}

/// One host entry as compared: type, permission bits, content or target, mtime (ns).
#[derive(Debug, PartialEq, Eq)]
pub enum HostEntry {
    File {
        mode: u32,
        data: Vec<u8>,
        mtime: Option<i64>,
    },
    Dir {
        mode: u32,
        mtime: Option<i64>,
    },
    Symlink {
        target: PathBuf,
        mtime: Option<i64>,
    },
}

/// Everything below `root` (not `root` itself), keyed by relative path.
pub fn host_tree(root: &Path, with_mtimes: bool) -> BTreeMap<String, HostEntry> {
    let mut rels = Vec::new();
    walk(root, root, &mut rels);
    rels.into_iter()
        .map(|rel| {
            let p = root.join(&rel);
            let m = fs::symlink_metadata(&p).unwrap();
            let mtime = with_mtimes.then(|| m.mtime() * 1_000_000_000 + m.mtime_nsec());
            let mode = m.mode() & 0o7777;
            let entry = if m.file_type().is_symlink() {
                HostEntry::Symlink {
                    target: fs::read_link(&p).unwrap(),
                    mtime,
                }
            } else if m.is_dir() {
                HostEntry::Dir { mode, mtime }
            } else {
                HostEntry::File {
                    mode,
                    data: fs::read(&p).unwrap(),
                    mtime,
                }
            };
            (rel.to_string_lossy().into_owned(), entry)
        })
        .collect()
}

/// Assert two host trees are identical entry by entry, naming the first difference.
pub fn assert_same_tree(expected: &Path, actual: &Path, with_mtimes: bool) {
    let a = host_tree(expected, with_mtimes);
    let b = host_tree(actual, with_mtimes);
    let ka: Vec<&String> = a.keys().collect();
    let kb: Vec<&String> = b.keys().collect();
    assert_eq!(ka, kb, "different sets of paths");
    for (k, va) in &a {
        let vb = &b[k];
        if va != vb {
            let brief = |e: &HostEntry| match e {
                HostEntry::File { mode, data, mtime } => {
                    format!("file mode {mode:o} len {} mtime {mtime:?}", data.len())
                }
                other => format!("{other:?}"),
            };
            panic!(
                "`{k}` differs:\n expected {}\n   actual {}",
                brief(va),
                brief(vb)
            );
        }
    }
}
