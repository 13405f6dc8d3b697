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

use std::ffi::CString;
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};

use super::rootfs::assemble;
use super::spec::{Spec, Status, WorkspaceFs};
pub use super::step::SETUP_FAILED;
use super::step::{Reporter, Step, cstr, die_with_parent, enter_namespaces};

/// The first argument that makes the host program run as a sandbox init.
pub const INIT_ARG: &str = "__avfs-sandbox-init";

/// Exit code when the command could not be started (as a shell says).
pub const NOT_STARTED: i32 = 127;

/// Signals the init and reaper leave to the command: the supervisor's timeout signals the
/// whole process group, and only the command should act on them.
const PASSED_ON: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

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
