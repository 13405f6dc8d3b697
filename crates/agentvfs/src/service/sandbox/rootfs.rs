//! Assembling a command's root inside its new mount namespace: the workspace (FUSE, an
//! overlay on a tree or a FUSE view, or a bind), read-only system directories, a minimal
//! /dev, a fresh /proc, private /tmp and home, the policy's binds; and the mount
//! primitives the init and a session's holder share.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::spec::{Spec, Status, WorkspaceFs};
use super::step::{Reporter, Step, cstr, os};

pub(super) fn mount(
    source: &str,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Step<()> {
    let src = CString::new(source).map_err(|_| "NUL in a mount source".to_string())?;
    let tgt = cstr(target.as_os_str())?;
    let fs = fstype.map(|f| CString::new(f).expect("static file system name"));
    let data = data
        .map(|d| CString::new(d).map_err(|_| "NUL in mount options".to_string()))
        .transpose()?;
    // SAFETY: NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            data.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>()),
        )
    };
    if r != 0 {
        return Err(os(&format!("mounting {source} ({fstype:?}) on"), target));
    }
    Ok(())
}

/// Bind `src` at `dst`, read-only unless `writable`, recursively; nosuid and nodev.
pub(super) fn bind(src: &Path, dst: &Path, writable: bool) -> Step<()> {
    let s = src.to_string_lossy();
    mount(&s, dst, None, libc::MS_BIND | libc::MS_REC, None)?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if !writable {
        flags |= libc::MS_RDONLY;
    }
    // A remount keeps the flags the kernel locked (in a user namespace): try with the
    // source's own ones kept, which is what `statvfs` reports.
    if mount(&s, dst, None, flags, None).is_err() {
        let mut keep = 0;
        // SAFETY: statvfs into a zeroed struct.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = cstr(dst.as_os_str())?;
        // SAFETY: as above.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0 {
            for (f, m) in [
                (libc::ST_NOEXEC, libc::MS_NOEXEC),
                (libc::ST_NOATIME, libc::MS_NOATIME),
                (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
                (libc::ST_RELATIME, libc::MS_RELATIME),
            ] {
                if st.f_flag & f != 0 {
                    keep |= m;
                }
            }
        }
        mount(&s, dst, None, flags | keep, None)?;
    }
    // Mounts below the bind (a read-only bind does not recurse): make them read-only too.
    if !writable {
        set_tree_readonly(dst);
    }
    Ok(())
}

/// Make every mount below `dst` read-only (mount_setattr with AT_RECURSIVE).
fn set_tree_readonly(dst: &Path) {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const AT_RECURSIVE: libc::c_uint = 0x8000;
    let Ok(c) = cstr(dst.as_os_str()) else { return };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a documented syscall with a struct of the documented layout.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
}

/// `inside` under the new root.
fn under(root: &Path, inside: &Path) -> PathBuf {
    root.join(inside.strip_prefix("/").unwrap_or(inside))
}

/// Make `path` (under the new root) for a mount of `src`'s kind: a directory, or an empty
/// file for a file. Host symlinks (`/bin -> usr/bin`) are recreated as symlinks.
fn mount_point(src: &Path, dst: &Path) -> Step<bool> {
    let meta = std::fs::symlink_metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| format!("{}: {e}", src.display()))?;
        if std::fs::symlink_metadata(dst).is_err() {
            std::os::unix::fs::symlink(&target, dst)
                .map_err(|e| format!("{}: {e}", dst.display()))?;
        }
        return Ok(false);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    } else if std::fs::symlink_metadata(dst).is_err() {
        std::fs::File::create(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    }
    Ok(true)
}

pub(super) fn make_dir(path: &Path, mode: u32) -> Step<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Files of the host's /etc no command needs and no agent should read.
const ETC_MASKED: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
];

/// Hide `path` (under the new root) behind an empty read-only file system or /dev/null.
fn mask(path: &Path) -> Step<()> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => mount(
            "tmpfs",
            path,
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=4k,nr_inodes=1,mode=0555"),
        ),
        Ok(m) if m.file_type().is_symlink() => Ok(()),
        Ok(_) => mount(
            "/dev/null",
            path,
            None,
            libc::MS_BIND | libc::MS_RDONLY,
            None,
        ),
    }
}

pub(super) fn assemble(spec: &Spec, report: &mut Reporter) -> Step<()> {
    let root = &spec.root;
    // Nothing mounted here propagates back to the host.
    mount(
        "none",
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    mount(
        "avfs-root",
        root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755,size=1m"),
    )?;
    let staged = matches!(spec.workspace, WorkspaceFs::Staged { .. });
    if let Some((fd, at)) = spec.layer.as_ref().filter(|_| !staged) {
        make_dir(at, 0o700)?;
        attach(*fd, at)?;
    }
    let (uid, gid) = spec.userns.unwrap_or((0, 0));
    // A private, empty home first: the workspace may be inside it (the supervisor refuses
    // a workspace at the home itself).
    let home = under(root, &spec.home);
    make_dir(&home, 0o700)?;
    scratch(&home, &format!("mode=0700,uid={uid},gid={gid}"))?;
    // Then the workspace: the FUSE server starts answering once told it is mounted.
    let ws = under(root, &spec.workspace_path);
    make_dir(&ws, 0o755)?;
    let fuse_opts = |fd: i32| {
        format!(
            "fd={fd},rootmode=40000,user_id={uid},group_id={gid},allow_other,default_permissions"
        )
    };
    let fuse_flags = libc::MS_NOSUID | libc::MS_NODEV;
    match &spec.workspace {
        WorkspaceFs::Fuse { fd, readonly } => {
            let ro = if *readonly { libc::MS_RDONLY } else { 0 };
            mount(
                "avfs",
                &ws,
                Some("fuse.avfs"),
                fuse_flags | ro,
                Some(&fuse_opts(*fd)),
            )?;
            close(*fd);
            report.send(&Status::Mounted);
        }
        WorkspaceFs::Overlay {
            fd,
            tree,
            lower,
            upper,
            work,
        } => {
            match (fd, tree) {
                (Some(fd), _) => read_only_fuse(lower, &fuse_opts(*fd), *fd, report)?,
                // Read-only also keeps reads from changing the cached tree's atimes.
                (None, Some(tree)) => bind(tree, lower, false)?,
                (None, None) => return Err("an overlay without a lower layer".into()),
            }
            let lowers = refusing(spec, lower, &fuse_opts, report)?;
            let mut opts = format!(
                "lowerdir={lowers},upperdir={},workdir={},index=on,redirect_dir=off,metacopy=off",
                escape(upper),
                escape(work)
            );
            if spec.userns.is_some() {
                opts.push_str(",userxattr");
            }
            mount("avfs", &ws, Some("overlay"), fuse_flags, Some(&opts))?;
            if let Some((_, at)) = &spec.layer {
                narrow_layer(at, spec.layer_inodes)?;
            }
        }
        WorkspaceFs::Bind { dir, readonly } => match &spec.refuse {
            None => bind(dir, &ws, !readonly)?,
            // A read-only tree whose secrets are covered: an overlay without an upper.
            Some(r) => {
                bind(dir, &r.tree_at, false)?;
                let lowers = refusing(spec, &r.tree_at, &fuse_opts, report)?;
                let opts = format!("lowerdir={lowers},redirect_dir=off,metacopy=off");
                mount(
                    "avfs",
                    &ws,
                    Some("overlay"),
                    fuse_flags | libc::MS_RDONLY,
                    Some(&opts),
                )?;
            }
        },
        WorkspaceFs::Staged { fd, uppers } => {
            let stage = under(root, Path::new(super::spec::STAGE));
            make_dir(&stage, 0o700)?;
            scratch(&stage, "mode=0700,size=1m")?;
            let lower = stage.join("lower");
            make_dir(&lower, 0o755)?;
            read_only_fuse(&lower, &fuse_opts(*fd), *fd, report)?;
            let h = stage.join("h");
            make_dir(&h, 0o700)?;
            bind(uppers, &h, true)?;
            make_dir(&stage.join("q"), 0o700)?;
            let l = stage.join("l");
            make_dir(&l, 0o755)?;
            if let Some((fd, _)) = &spec.layer {
                attach(*fd, &l)?;
            }
        }
        WorkspaceFs::Joined(_) => return Err("a joined command has no root to assemble".into()),
    }
    // The private home is made below, and what is bound inside it after it.
    let outside_home = |p: &&PathBuf| !p.starts_with(&spec.home);
    binds(root, spec.ro.iter().filter(outside_home), false)?;
    binds(root, spec.rw.iter().filter(outside_home), true)?;
    for m in ETC_MASKED {
        mask(&under(root, Path::new(m)))?;
    }
    devices(root)?;
    let proc_dir = root.join("proc");
    make_dir(&proc_dir, 0o555)?;
    proc_at(&proc_dir)?;
    for (dir, mode) in [("tmp", "1777"), ("run", "0755")] {
        let d = root.join(dir);
        make_dir(&d, 0o755)?;
        scratch(&d, &format!("mode={mode}"))?;
    }
    // Toolchains under the home go on top of the fresh home.
    let inside_home = |p: &&PathBuf| p.starts_with(&spec.home);
    binds(root, spec.ro.iter().filter(inside_home), false)?;
    binds(root, spec.rw.iter().filter(inside_home), true)?;
    for hidden in &spec.hide {
        mask(&under(root, hidden))?;
    }
    // Enter the new root; the host's is detached and gone from this namespace.
    std::env::set_current_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let dot = c".";
    // SAFETY: pivot_root(".", ".") then detaching the old root stacked on top.
    unsafe {
        if libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) != 0 {
            return Err(os("pivot_root to", root));
        }
        if libc::umount2(dot.as_ptr(), libc::MNT_DETACH) != 0 {
            return Err(os("detaching the old root from", root));
        }
    }
    std::env::set_current_dir("/").map_err(|e| format!("/: {e}"))?;
    // The root itself holds only mount points: read-only, so nothing is written there and
    // lost.
    mount(
        "none",
        Path::new("/"),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )?;
    Ok(())
}

/// Leave the run's file system at `at` room for `inodes` more inodes than it holds now (the
/// overlay's own are made).
pub(super) fn narrow_layer(at: &Path, inodes: Option<u64>) -> Step<()> {
    let Some(room) = inodes else { return Ok(()) };
    let c = cstr(at.as_os_str())?;
    // SAFETY: statvfs into a zeroed struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(os("reading", at));
    }
    let used = st.f_files.saturating_sub(st.f_ffree);
    mount(
        "none",
        at,
        None,
        libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("nr_inodes={}", used.saturating_add(room).max(1))),
    )
}

/// The fork's state over FUSE on `fd` at `dst`, read-only (an overlay's lower layer); the
/// supervisor is told it may start answering.
fn read_only_fuse(dst: &Path, opts: &str, fd: i32, report: &mut Reporter) -> Step<()> {
    mount(
        "avfs",
        dst,
        Some("fuse.avfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_RDONLY,
        Some(opts),
    )?;
    close(fd);
    report.send(&Status::Mounted);
    Ok(())
}

/// The overlay's `lowerdir` for `lower`: with secrets to cover (`spec.refuse`), the
/// fork's FUSE view that shows only them (and the directories above them) goes on top,
/// so a secret is listed and cannot be opened, and every other name falls through to
/// `lower`.
fn refusing(
    spec: &Spec,
    lower: &Path,
    fuse_opts: &dyn Fn(i32) -> String,
    report: &mut Reporter,
) -> Step<String> {
    match &spec.refuse {
        None => Ok(escape(lower)),
        Some(r) => {
            read_only_fuse(&r.at, &fuse_opts(r.fd), r.fd, report)?;
            Ok(format!("{}:{}", escape(&r.at), escape(lower)))
        }
    }
}

/// A fresh tmpfs at `dst` (no setuid, no devices) with tmpfs options `opts`.
pub(super) fn scratch(dst: &Path, opts: &str) -> Step<()> {
    mount(
        "tmpfs",
        dst,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(opts),
    )
}

/// Attach the detached mount handed to us on `fd` at `at`.
pub(super) fn attach(fd: i32, at: &Path) -> Step<()> {
    // SAFETY: the descriptor was handed to us open, for this mount alone.
    let layer = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::mount::move_mount(
        &layer,
        "",
        rustix::fs::CWD,
        at,
        rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| format!("attaching the run's file system at {}: {e}", at.display()))
}

/// A /proc of this pid namespace at `dir`, with the kernel's knobs (the host's) read-only.
pub(super) fn proc_at(dir: &Path) -> Step<()> {
    mount(
        "proc",
        dir,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for knob in ["sys", "sysrq-trigger", "irq", "bus", "fs"] {
        let p = dir.join(knob);
        if std::fs::symlink_metadata(&p).is_ok() {
            bind(&p, &p, false)?;
        }
    }
    Ok(())
}

/// Bind each of `paths` at the same path under `root`.
fn binds<'p>(root: &Path, paths: impl Iterator<Item = &'p PathBuf>, writable: bool) -> Step<()> {
    for src in paths {
        let dst = under(root, src);
        if mount_point(src, &dst)? {
            bind(src, &dst, writable)?;
        }
    }
    Ok(())
}

/// A minimal /dev: the harmless character devices, a private devpts, shm and the fd links.
fn devices(root: &Path) -> Step<()> {
    let dev = root.join("dev");
    make_dir(&dev, 0o755)?;
    dev_at(&dev)
}

/// A fresh, private /dev at `dev`: a small tmpfs with the harmless device nodes, a devpts
/// of its own, an empty /dev/shm and the fd links. The nodes are bind mounts of those
/// under the /dev seen now: the host's, or in a session's command the holder's, which the
/// new tmpfs then covers, so nothing one command leaves in /dev reaches the next.
pub(super) fn dev_at(dev: &Path) -> Step<()> {
    use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};
    // Take each node before the tmpfs covers it.
    let mut nodes = Vec::new();
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let src = Path::new("/dev").join(name);
        if std::fs::symlink_metadata(&src).is_err() {
            continue;
        }
        let node = open_tree(
            rustix::fs::CWD,
            &src,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )
        .map_err(|e| format!("{}: {e}", src.display()))?;
        nodes.push((name, node));
    }
    mount(
        "tmpfs",
        dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755,size=64k"),
    )?;
    for (name, node) in nodes {
        let dst = dev.join(name);
        std::fs::File::create(&dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        move_mount(
            &node,
            "",
            rustix::fs::CWD,
            &dst,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| format!("{}: {e}", dst.display()))?;
    }
    let pts = dev.join("pts");
    make_dir(&pts, 0o755)?;
    // A private devpts for ptys; where it cannot be made, no ptys.
    if mount(
        "devpts",
        &pts,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .is_ok()
    {
        let _ = std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx"));
    }
    let shm = dev.join("shm");
    make_dir(&shm, 0o1777)?;
    scratch(&shm, "mode=1777")?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(|e| format!("/dev/{name}: {e}"))?;
    }
    Ok(())
}

/// Overlay options separate with `,` and `:`; escape them in paths.
pub(super) fn escape(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) fn close(fd: i32) {
    // SAFETY: the descriptor was passed to us to mount and is used for nothing else.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}
