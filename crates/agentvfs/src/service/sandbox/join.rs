//! A session's namespace, kept across its commands (the init side; the supervisor's side is
//! `kept`).
//!
//! The holder is an init that assembles the root as for one command, but with the
//! workspace path left empty and a stage at [`STAGE`]: the fork's state over FUSE
//! (`STAGE/lower`), the kept layers (`STAGE/l/N`, on a tmpfs), and the host directory
//! where commands' upper layers are made (`STAGE/h/N`). It then waits to be killed. Each command's init joins the holder's mount, UTS and IPC namespaces, enters
//! new mount and pid namespaces of its own, covers the workspace path with an overlay of
//! the stage's layers, detaches the stage and mounts a /proc of its pid namespace; the
//! rest is as for any command. The command never sees the stage, so it cannot write to a
//! layer below its own.

use std::path::Path;

use super::rootfs::{assemble, bind, close, escape, mount, proc_at};
use super::spec::{Join, Spec, Status};
use super::step::{Reporter, SETUP_FAILED, Step, die_with_parent, enter_namespaces};

pub use super::spec::STAGE;

/// Run as the holder: assemble the root, say it is ready, and wait to be killed (by the
/// supervisor, or with it: `PR_SET_PDEATHSIG`).
pub(super) fn hold(spec: &Spec, mut report: Reporter) -> i32 {
    die_with_parent();
    let built = enter_namespaces(spec, libc::CLONE_NEWUTS | libc::CLONE_NEWIPC)
        .and_then(|()| assemble(spec, &mut report));
    if let Err(reason) = built {
        report.send(&Status::SetupFailed { reason });
        return SETUP_FAILED;
    }
    report.send(&Status::Ready);
    // The supervisor reads statuses until the pipe closes.
    drop(report);
    loop {
        // SAFETY: waits for a signal; nothing else runs here.
        unsafe { libc::pause() };
    }
}

/// In a command's init: join the holder's namespaces, then enter new mount and pid
/// namespaces (and a network namespace when offline) of the command's own.
pub(super) fn enter(spec: &Spec, join: &Join) -> Step<()> {
    let flags = libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC;
    // SAFETY: setns on a pidfd handed to us open; this process is single-threaded.
    if unsafe { libc::setns(join.holder, flags) } != 0 {
        return Err(format!(
            "joining the session's namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    close(join.holder);
    // IPC objects are the command's own, as its /tmp, /run and /dev/shm are (`workspace`).
    enter_namespaces(spec, libc::CLONE_NEWPID | libc::CLONE_NEWIPC)?;
    // The run's quota-sized file system, in the command's own mount namespace.
    if let Some((fd, at)) = &spec.layer {
        super::rootfs::make_dir(at, 0o700)?;
        super::rootfs::attach(*fd, at)?;
    }
    Ok(())
}

/// In the command's pid 1: the workspace as an overlay of the stage's layers, the stage
/// out of sight, and a /proc of this pid namespace.
pub(super) fn workspace(spec: &Spec, join: &Join) -> Step<()> {
    let ws = &spec.workspace_path;
    let lowers: Vec<String> = join.lowers.iter().map(|p| escape(p)).collect();
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    match (&join.upper, lowers.len()) {
        (Some((upper, work)), _) => {
            let opts = format!(
                "lowerdir={},upperdir={},workdir={},index=on,redirect_dir=off,metacopy=off",
                lowers.join(":"),
                escape(upper),
                escape(work)
            );
            mount("avfs", ws, Some("overlay"), flags, Some(&opts))?;
            if let Some((_, at)) = &spec.layer {
                super::rootfs::narrow_layer(at, spec.layer_inodes)?;
            }
        }
        // An overlay without an upper layer needs two lower ones; one is bound read-only.
        (None, 1) => bind(&join.lowers[0], ws, false)?,
        (None, _) => {
            let opts = format!(
                "lowerdir={},redirect_dir=off,metacopy=off",
                lowers.join(":")
            );
            mount(
                "avfs",
                ws,
                Some("overlay"),
                flags | libc::MS_RDONLY,
                Some(&opts),
            )?;
        }
    }
    let stage = Path::new(STAGE);
    let proc_dir = Path::new("/proc");
    for gone in [stage, proc_dir] {
        let c = std::ffi::CString::new(gone.as_os_str().as_encoded_bytes())
            .map_err(|e| e.to_string())?;
        // SAFETY: detaching a mount of this namespace by a path we own.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(super::step::os("detaching", gone));
        }
    }
    proc_at(proc_dir)?;
    // Scratch space starts empty for every command, as for a command run on its own (the
    // home is the session's: a cache that lasts as long as its namespace).
    for (dir, opts) in [("/tmp", "mode=1777"), ("/run", "mode=0755")] {
        super::rootfs::scratch(Path::new(dir), opts)?;
    }
    // So does /dev (with its /dev/shm): a command cannot leave files or replaced links
    // there for the next one.
    super::rootfs::dev_at(Path::new("/dev"))
}
