//! What the sandbox's init, its reaper and a session's holder share: a setup step that
//! fails with a reason, the reporter of their status to the supervisor, entering the
//! namespaces, and dying with the parent.

use std::ffi::{CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::spec::{Spec, Status};

/// Exit code of an init whose root could not be assembled.
pub const SETUP_FAILED: i32 = 125;

pub(super) type Step<T> = std::result::Result<T, String>;

pub(super) fn os(what: &str, path: &Path) -> String {
    format!(
        "{what} {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    )
}

pub(super) fn cstr(p: &OsStr) -> Step<CString> {
    CString::new(p.as_bytes()).map_err(|_| format!("{} holds a NUL byte", p.to_string_lossy()))
}

pub(super) struct Reporter(pub(super) std::fs::File);

impl Reporter {
    pub(super) fn send(&mut self, status: &Status) {
        if let Ok(mut line) = serde_json::to_vec(status) {
            line.push(b'\n');
            let _ = self.0.write_all(&line);
        }
    }
}

/// Exit when the parent does (the supervisor, for the init; the init, for the reaper).
pub(super) fn die_with_parent() {
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
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
