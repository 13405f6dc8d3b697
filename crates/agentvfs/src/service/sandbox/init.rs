//! The sandbox's init process: a fresh start of the host program (single-threaded, so it
//! may allocate and fail like any program) that enters new mount and pid namespaces (and a
//! user namespace when not root), assembles the command's root, and runs the command as
//! the second process of the pid namespace. Its first process reaps orphans and reports how
//! the command ended; when it exits the kernel kills whatever is left, and every mount of
//! the namespace goes with it.
//!
//! Process tree: supervisor → init (host pid namespace; waits) → reaper (pid 1 of the new
//! namespace; builds the root) → command (pid 2). Each dies with its parent
//! (`PR_SET_PDEATHSIG`), so `kill -9` of the supervisor ends the command and leaves no mount.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::spec::{Spec, Status, WorkspaceFs};

/// The first argument that makes the host program run as a sandbox init.
pub const INIT_ARG: &str = "__avfs-sandbox-init";

/// Exit code of an init whose root could not be assembled.
pub const SETUP_FAILED: i32 = 125;
/// Exit code when the command could not be started (as a shell says).
pub const NOT_STARTED: i32 = 127;

/// Signals the init and reaper leave to the command: the supervisor's timeout signals the
/// whole process group, and only the command should act on them.
const PASSED_ON: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

pub(super) type Step<T> = std::result::Result<T, String>;

pub(super) fn os(what: &str, path: &Path) -> String {
    format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    )
}

fn cstr(p: &OsStr) -> Step<CString> {
    CString::new(p.as_bytes()).map_err(|_| format!("{} holds a NUL byte", p.to_string_lossy()))
}

pub(super) struct Reporter(std::fs::File);

impl Reporter {
    pub(super) fn send(&mut self, status: &Status) {
        if let Ok(mut line) = serde_json::to_vec(status) {
            line.push(b'\n');
            let _ = self.0.write_all(&line);
        }
    }
}

/// Run as the sandbox's init with the spec in `spec_path`; returns the exit code.
pub fn main(spec_path: &Path) -> i32 {
    let spec: Spec = match std::fs::read(spec_path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("avfs sandbox: reading {}: {e}", spec_path.display());
            return SETUP_FAILED;
        }
    };
    // SAFETY: the descriptor was handed to us open by the supervisor, for us alone.
    let status = unsafe { std::fs::File::from_raw_fd(spec.status_fd) };
    let mut report = Reporter(status);
    for sig in PASSED_ON {
        // SAFETY: setting a disposition; no handler code runs.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    if matches!(spec.workspace, WorkspaceFs::Staged { .. }) {
        return super::join::hold(&spec, report);
    }
    let entered = match &spec.workspace {
        WorkspaceFs::Joined(join) => super::join::enter(&spec, join),
        _ => enter_namespaces(&spec, libc::CLONE_NEWPID),
    };
    match entered {
        Ok(()) => {}
        Err(reason) => {
            report.send(&Status::SetupFailed { reason });
            return SETUP_FAILED;
        }
    }
    // SAFETY: this process is single-threaded (a fresh exec), so the child may do anything.
    let reaper = unsafe { libc::fork() };
    if reaper < 0 {
        report.send(&Status::SetupFailed {
            reason: format!("fork: {}", std::io::Error::last_os_error()),
        });
        return SETUP_FAILED;
    }
    if reaper == 0 {
        die_with_parent();
        let code = reaper_main(&spec, &mut report);
        // SAFETY: ending the process without running the parent's exit handlers twice.
        unsafe { libc::_exit(code) };
    }
    drop(report);
    wait_exit_code(reaper)
}

/// Exit when the parent does (the supervisor, for the init; the init, for the reaper).
pub(super) fn die_with_parent() {
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
}

/// Wait for `pid` and turn its end into our exit code (a signal as 128 + signal).
fn wait_exit_code(pid: libc::pid_t) -> i32 {
    loop {
        let mut st = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            if libc::WIFEXITED(st) {
                return libc::WEXITSTATUS(st);
            }
            if libc::WIFSIGNALED(st) {
                return 128 + libc::WTERMSIG(st);
            }
        } else if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return SETUP_FAILED;
        }
    }
}

/// Enter a new mount namespace and those in `more`, with a user namespace when not root
/// and a network namespace (loopback only) when offline.
pub(super) fn enter_namespaces(spec: &Spec, more: libc::c_int) -> Step<()> {
    let mut flags = libc::CLONE_NEWNS | more;
    if spec.userns.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    if spec.offline {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare on this single-threaded process.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!(
            "creating namespaces: {}",
            std::io::Error::last_os_error()
        ));
    }
    if let Some((uid, gid)) = spec.userns {
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/self/{file}"), text)
                .map_err(|e| format!("writing /proc/self/{file}: {e}"))
        };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{uid} {uid} 1"))?;
        write("gid_map", format!("{gid} {gid} 1"))?;
    }
    if spec.offline {
        // SAFETY: socket/ioctl calls on a stack value.
        unsafe { crate::service::confine::loopback_up() }
            .map_err(|e| format!("bringing up loopback: {e}"))?;
    }
    Ok(())
}

/// Pid 1 of the new namespace: assemble the root, start the command, reap until it ends.
fn reaper_main(spec: &Spec, report: &mut Reporter) -> i32 {
    let ready = match &spec.workspace {
        WorkspaceFs::Joined(join) => super::join::workspace(spec, join),
        _ => assemble(spec, report),
    };
    if let Err(reason) = ready {
        report.send(&Status::SetupFailed { reason });
        return SETUP_FAILED;
    }
    // The status descriptor must not reach the command; a failed exec reports through it.
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(spec.status_fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let prepared = match command_parts(spec) {
        Ok(p) => p,
        Err(reason) => {
            report.send(&Status::SpawnFailed {
                reason,
                os_error: None,
            });
            return NOT_STARTED;
        }
    };
    // SAFETY: single-threaded; the child only sets up and execs.
    let child = unsafe { libc::fork() };
    if child < 0 {
        report.send(&Status::SetupFailed {
            reason: format!("fork: {}", std::io::Error::last_os_error()),
        });
        return SETUP_FAILED;
    }
    if child == 0 {
        die_with_parent();
        let err = exec_command(spec, &prepared);
        report.send(&err);
        // SAFETY: leave without unwinding into the reaper's code.
        unsafe { libc::_exit(NOT_STARTED) };
    }
    // Reap everything; the command's end is ours.
    loop {
        let mut st = 0;
        // SAFETY: waiting for any child of this process.
        let r = unsafe { libc::waitpid(-1, &mut st, 0) };
        if r == child {
            if libc::WIFEXITED(st) {
                return libc::WEXITSTATUS(st);
            }
            if libc::WIFSIGNALED(st) {
                let signal = libc::WTERMSIG(st);
                report.send(&Status::Signaled { signal });
                return 128 + signal;
            }
        } else if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return SETUP_FAILED;
        }
    }
}

struct Prepared {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

fn command_parts(spec: &Spec) -> Step<Prepared> {
    let program = CString::new(spec.program.as_bytes())
        .map_err(|_| "the program name holds a NUL byte".to_string())?;
    let mut argv = vec![program.clone()];
    for a in &spec.args {
        argv.push(CString::new(a.as_bytes()).map_err(|_| "an argument holds a NUL byte")?);
    }
    let envp = spec
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "an environment variable holds a NUL byte".to_string())?;
    Ok(Prepared {
        program,
        argv,
        envp,
        cwd: cstr(spec.cwd.as_os_str())?,
    })
}

/// In the command's process: restore signals, confine, enter the working directory, exec.
/// Returns only on failure.
fn exec_command(spec: &Spec, p: &Prepared) -> Status {
    for sig in PASSED_ON {
        // SAFETY: restoring the default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // Nothing this process inherited reaches the command but its stdio (the status pipe
    // closes at exec, or reports a failed one).
    // SAFETY: marks descriptors close-on-exec; no memory is touched.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    // SAFETY: chdir to a path we own.
    if unsafe { libc::chdir(p.cwd.as_ptr()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Status::SpawnFailed {
            reason: format!("entering {}: {e}", spec.cwd.display()),
            os_error: e.raw_os_error(),
        };
    }
    if spec.landlock {
        let mut writable: Vec<&Path> = vec![&spec.workspace_path, Path::new("/tmp"), &spec.home];
        writable.extend(spec.rw.iter().map(PathBuf::as_path));
        let confinement = crate::service::confine::Confinement {
            landlock: true,
            offline: false,
        };
        let applied = confinement
            .prepare(&writable)
            .map_err(|e| e.to_string())
            // SAFETY: this process is single-threaded and about to exec.
            .and_then(|c| unsafe { c.apply_in_child() }.map_err(|e| e.to_string()));
        if let Err(reason) = applied {
            return Status::SpawnFailed {
                reason: format!("confinement: {reason}"),
                os_error: None,
            };
        }
    }
    if let Err(reason) = drop_privileges() {
        return Status::SpawnFailed {
            reason,
            os_error: None,
        };
    }
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: NUL-terminated arrays of pointers into CStrings that outlive the call.
    unsafe { libc::execvpe(p.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    let e = std::io::Error::last_os_error();
    Status::SpawnFailed {
        reason: super::spawn_reason(&spec.program, &e),
        os_error: e.raw_os_error(),
    }
}

/// The capabilities a command keeps: those of a container runtime's default set that act
/// on files and processes the command can already see (Docker's defaults without
/// NET_RAW, SETPCAP and SETFCAP). Everything that could undo the sandbox (SYS_ADMIN:
/// mount, umount, remount; DAC_READ_SEARCH: open_by_handle_at; SYS_PTRACE; SYS_MODULE; …)
/// is gone from the bounding set, so not even a root command gets it back at exec.
const KEPT_CAPS: &[u32] = &[
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    10, // NET_BIND_SERVICE
    18, // SYS_CHROOT
    27, // MKNOD
    29, // AUDIT_WRITE
];

/// Drop every other capability from the bounding set, clear the ambient set, and set
/// no_new_privs: from exec on, the command has at most `KEPT_CAPS`.
fn drop_privileges() -> Step<()> {
    for cap in 0..64u32 {
        if KEPT_CAPS.contains(&cap) {
            continue;
        }
        // SAFETY: plain prctl; EINVAL past the kernel's last capability ends the loop.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(format!("dropping capability {cap}: {e}"));
        }
    }
    // SAFETY: plain prctls.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

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
            let stage = under(root, Path::new(super::join::STAGE));
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
