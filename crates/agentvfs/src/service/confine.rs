//! Optional confinement of a proxied command, on top of the command boundary:
//! - Landlock: the child may read and execute anything but write only inside the mounted
//!   workspace, a private temp dir and a few device files (`/dev/null`, ttys, …);
//! - offline: the child gets a fresh network namespace with only loopback.
//!
//! Everything that allocates or may fail in an interesting way happens in the parent
//! (`prepare`); the child, between fork and exec, only makes raw system calls.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What confinement a run gets (and, in the envelope, got).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Confinement {
    /// Writes only inside the workspace mount and a private temp dir (Landlock).
    pub landlock: bool,
    /// No network: a fresh network namespace with only loopback.
    pub offline: bool,
}

/// Device files a confined child may still write: output sinks, ttys, randomness.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Confinement ready to apply in a child process.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<OwnedFd>,
    offline: bool,
}

impl Confinement {
    pub fn any(&self) -> bool {
        self.landlock || self.offline
    }

    /// Fail with `confinement_unavailable` if this machine cannot give what is asked.
    pub fn check_available(&self) -> Result<()> {
        if self.landlock {
            // SAFETY: the documented ABI-version query; no pointers are dereferenced.
            let abi = unsafe {
                libc::syscall(
                    libc::SYS_landlock_create_ruleset,
                    std::ptr::null::<u8>(),
                    0usize,
                    1u32, // LANDLOCK_CREATE_RULESET_VERSION
                )
            };
            if abi < 1 {
                return Err(Error::ConfinementUnavailable {
                    reason: "this kernel does not support Landlock (or it is disabled)".into(),
                });
            }
        }
        if self.offline && !rustix::process::geteuid().is_root() {
            return Err(Error::ConfinementUnavailable {
                reason: "offline runs need root (a new network namespace needs CAP_SYS_ADMIN)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Build the Landlock ruleset allowing writes under `writable` (and the usual devices).
    pub fn prepare(&self, writable: &[&Path]) -> Result<Prepared> {
        let ruleset = if self.landlock {
            Some(landlock_ruleset(writable)?)
        } else {
            None
        };
        self.check_available()?;
        Ok(Prepared {
            ruleset,
            offline: self.offline,
        })
    }
}

fn landlock_ruleset(writable: &[&Path]) -> Result<OwnedFd> {
    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, path_beneath_rules,
    };
    let abi = ABI::V5;
    let unavailable = |e: &dyn std::fmt::Display| Error::ConfinementUnavailable {
        reason: format!("Landlock: {e}"),
    };
    let mut paths: Vec<PathBuf> = writable.iter().map(|p| p.to_path_buf()).collect();
    paths.extend(WRITABLE_DEVICES.iter().map(PathBuf::from));
    let created = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| unavailable(&e))?
        .create()
        .map_err(|e| unavailable(&e))?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(|e| unavailable(&e))?
        .add_rules(path_beneath_rules(&paths, AccessFs::from_all(abi)))
        .map_err(|e| unavailable(&e))?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| Error::ConfinementUnavailable {
        reason: "this kernel does not support Landlock".into(),
    })
}

impl Prepared {
    /// Apply in the child, between fork and exec.
    ///
    /// # Safety
    /// Only async-signal-safe system calls are made here; call it from `pre_exec`.
    pub unsafe fn apply_in_child(&self) -> std::io::Result<()> {
        if self.offline {
            // SAFETY: plain system calls on values prepared by the parent.
            unsafe {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                loopback_up()?;
            }
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: plain system calls; the ruleset fd stays open until after exec.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let r = libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32);
                if r != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// Bring `lo` up in a fresh network namespace, so local servers and test suites still work.
pub(crate) unsafe fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl/close on a stack-allocated `ifreq`; no allocation.
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut result = Ok(());
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) != 0 {
            result = Err(std::io::Error::last_os_error());
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) != 0 {
                result = Err(std::io::Error::last_os_error());
            }
        }
        libc::close(sock);
        result
    }
}
