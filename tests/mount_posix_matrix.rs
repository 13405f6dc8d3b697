//! Ownership, set-ID bits, sticky directories and utimensat on a real FUSE mount, for every
//! file type and every operation, compared with the native file system in the same run:
//! `scripts/posix_matrix.py` prints one line per outcome, as root and as other users, in a
//! native directory and in the mount, and the two outputs must be equal line by line. The
//! native output is also checked against the rules of the man pages, so a matrix that
//! stopped exercising a rule fails instead of passing on both sides.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::mount::Mounted;

/// Every file type: AVFS_MATRIX_TYPES narrows the list for a run.
const TYPES: &str = "file,dir,symlink,fifo,chardev,blockdev,socket";
/// Types hard-linked (a directory is always tried too, EPERM everywhere);
/// AVFS_MATRIX_LINK_TYPES narrows the list for a run.
const LINK_TYPES: &str = "file,symlink,fifo,chardev,blockdev,socket";

/// Who runs the matrix: setpriv arguments for a non-root caller.
struct Caller {
    name: &'static str,
    uid: u32,
    gid: u32,
    setpriv: &'static [&'static str],
}

const CALLERS: [Caller; 3] = [
    Caller {
        name: "root",
        uid: 0,
        gid: 0,
        setpriv: &[],
    },
    Caller {
        name: "user",
        uid: 1000,
        gid: 1000,
        setpriv: &["--reuid=1000", "--regid=1000", "--clear-groups"],
    },
    // With a supplementary group: chgrp to it is allowed, and only to it.
    Caller {
        name: "user-with-group",
        uid: 1000,
        gid: 1000,
        setpriv: &["--reuid=1000", "--regid=1000", "--groups=4242"],
    },
];

/// One interpreter for every caller: a per-user shim (pyenv under /root) is not reachable
/// by uid 1000.
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn setting(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// Run the script's `phase` in `dir`, through setpriv when `setpriv` is not empty; its
/// stdout after checking it succeeded.
fn script(setpriv: &[&str], phase: &str, dir: &Path, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/posix_matrix.py");
    let mut cmd = if setpriv.is_empty() {
        Command::new(python())
    } else {
        let mut c = Command::new("setpriv");
        c.args(setpriv).arg(python());
        c
    };
    let out = cmd
        .arg(&script)
        .arg(phase)
        .arg(dir)
        .args(args)
        .output()
        .expect("run scripts/posix_matrix.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "posix_matrix.py {phase} {}: {stdout}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The matrix of every caller in `base` (which every caller must reach): each caller gets
/// a directory of its own, with fixtures made by root.
fn matrix(base: &Path) -> Vec<String> {
    let types = setting("AVFS_MATRIX_TYPES", TYPES);
    let link_types = setting("AVFS_MATRIX_LINK_TYPES", LINK_TYPES);
    let mut lines = Vec::new();
    for c in &CALLERS {
        let dir = base.join(c.name);
        let (uid, gid) = (c.uid.to_string(), c.gid.to_string());
        let setup = script(
            &[],
            "setup",
            &dir,
            &["--uid", &uid, "--gid", &gid, "--types", &types],
        );
        let run = script(
            c.setpriv,
            "run",
            &dir,
            &["--types", &types, "--link-types", &link_types],
        );
        for l in setup.lines().chain(run.lines()) {
            lines.push(format!("{}: {l}", c.name));
        }
    }
    lines
}

/// Every line of the man pages' rules this matrix exists to check, as native Linux
/// prints it: if the script stopped covering one, the comparison alone would not notice.
fn check_rules(native: &[String]) {
    let expect = [
        // chmod(2): EPERM, the caller is not the owner and not privileged.
        "user: [file of another user] chmod: EPERM",
        "root: [file of another user] chmod: ok",
        // fchmodat(2): AT_SYMLINK_NOFOLLOW on a symlink is not supported.
        "user: [symlink] chmod 0640: ENOTSUP",
        // chown(2): only a privileged process may change the owner; the owner may change
        // the group to any group it is a member of.
        "user: [file] chown other: EPERM",
        "root: [file] chown other: ok",
        "user-with-group: [file] chgrp member: ok file mode=0755 uid=1000 gid=4242",
        "user: [file] chgrp foreign: EPERM",
        // chown(2): set-user-ID goes, set-group-ID too when group-executable, for root too.
        "root: [setid] chown own.suid: ok file mode=0755",
        "root: [setid] chown own.sgid-x: ok file mode=0755",
        "root: [setid] chown own.sgid: ok file mode=2745",
        // write(2)/truncate(2) by an unprivileged process clears the set-ID bits.
        "user: [setid] write theirs.suid: ok file mode=0666",
        "user: [setid] write theirs.sgid-x: ok file mode=0676",
        "user: [setid] truncate theirs.trunc: ok file mode=0666",
        "root: [setid] write theirs.suid: ok file mode=4666",
        // ... set-group-ID without group-execute only for a writer outside the file's
        // group (its own or a supplementary one).
        "user: [setid] write theirs.both-nx: ok file mode=0666",
        "user: [setid] write theirs.both-nx-own-group: ok file mode=2666",
        "user: [setid] write theirs.both-nx-supplementary: ok file mode=0666",
        "user-with-group: [setid] write theirs.both-nx-supplementary: ok file mode=2666",
        // mkdir(2)/open(2): in a set-group-ID directory a new entry takes the directory's
        // group, and a new directory its set-group-ID bit.
        "user: [setid] create in sgid-dir file: ok file mode=0644 uid=1000 gid=4343",
        "user: [setid] create in sgid-dir dir: ok dir mode=2755 uid=1000 gid=4343",
        // chmod(2): set-group-ID is dropped, without error, for an owner not in the group.
        "user: [setid] chmod g+s own.foreign: ok file mode=0775",
        "user: [setid] chmod g+s own.member: ok file mode=2775",
        // utimensat(2): UTIME_NOW for both needs write permission (EACCES), anything else
        // needs ownership (EPERM); both UTIME_OMIT changes nothing.
        "user: [file of another user] utime now now (writable): ok",
        "user: [file of another user] utime now now (not writable): EACCES",
        "user: [file of another user] utime explicit: EPERM",
        "user: [file of another user] utime omit now (writable): EPERM",
        "root: [file] utime now now: ok atime=now mtime=now a=m c=m ctime changed",
        "user: [dir] utime now now: ok atime=now mtime=now a=m c=m ctime changed",
        "root: [file] utime omit omit: ok atime=1000000000.000000005 mtime=1100000000.000000007 a!=m c!=m ctime unchanged",
        // unlink(2), rename(2), rmdir(2): EPERM in a sticky directory for an entry neither
        // the caller nor the directory belongs to.
        "user: [sticky-other file] remove another's entry: EPERM",
        "user: [sticky-other file] rename another's entry away: EPERM",
        "user: [sticky-other file] rename over another's entry: EPERM",
        "user: [sticky-other dir] remove another's entry: EPERM",
        "user: [sticky-own file] remove another's entry: ok",
        "root: [sticky-other file] remove another's entry: ok",
        // link(2): EPERM for a directory; any other type gets a second name, and the
        // link count (and ctime) of the node it names changes.
        "root: [dir] link: EPERM",
        "root: [symlink] link: ok symlink mode=0777 uid=0 gid=0 nlink=2",
        "root: [fifo] link: ok fifo",
        "root: [socket] link: ok socket",
        // mknod(2): device nodes keep their numbers.
        "root: [chardev] create: ok chardev mode=0644 uid=0 gid=0 nlink=1 rdev=1,3",
        "root: [chardev] link: ok chardev mode=0644 uid=0 gid=0 nlink=2 rdev=1,3 ctime changed",
        "root: [blockdev] lstat: blockdev mode=0644 uid=0 gid=0 nlink=1 rdev=7,0",
    ];
    let missing: Vec<&str> = expect
        .iter()
        .copied()
        .filter(|want| !native.iter().any(|l| l.starts_with(want)))
        .collect();
    assert!(
        missing.is_empty(),
        "the native matrix no longer shows these rules:\n  {}",
        missing.join("\n  ")
    );
}

/// Native and mount outputs equal line by line; on failure, every differing line.
fn assert_same(native: &[String], mount: &[String]) {
    let mut diff = Vec::new();
    for i in 0..native.len().max(mount.len()) {
        let (n, m) = (native.get(i), mount.get(i));
        if n != m {
            diff.push(format!(
                "line {i}\n  native: {}\n  mount:  {}",
                n.map_or("(none)", |s| s),
                m.map_or("(none)", |s| s)
            ));
        }
    }
    assert!(
        diff.is_empty(),
        "the mount differs from native on {} of {} lines:\n{}",
        diff.len(),
        native.len(),
        diff.join("\n")
    );
}

fn matches_native(m: &Mounted) {
    // Temp dirs are 0700: every caller must reach the directories below them.
    let native = tempfile::tempdir().unwrap();
    std::fs::set_permissions(native.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(m.home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&m.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let expected = matrix(native.path());
    check_rules(&expected);
    let actual = matrix(&m.dir);
    assert_same(&expected, &actual);
}

/// Through the default transport: FUSE over io_uring wherever the kernel allows it.
#[test]
fn ownership_and_times_match_native() {
    let Some(m) = Mounted::new("matrix") else {
        return;
    };
    let want = common::mount::expected_transport();
    assert_eq!(m.transport(), want);
    matches_native(&m);
}

/// Through `/dev/fuse`, the transport used where io_uring is not available.
#[test]
fn ownership_and_times_match_native_over_dev_fuse() {
    let Some(m) = Mounted::dev_fuse("matrix") else {
        return;
    };
    assert_eq!(m.transport(), "dev-fuse");
    matches_native(&m);
}
