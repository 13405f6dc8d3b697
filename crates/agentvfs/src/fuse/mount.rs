//! Mounting: the mount options, the choice between io_uring and `/dev/fuse`, and the
//! entry points that serve a backend in the foreground or on background threads.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fuser::{Config, MountOption, Session};

use super::filesystem::Fs;
use super::ring;
use super::{Backend, uring_wanted};
use crate::service::mount::MountFs;
use crate::service::mounter::{Mounter, ServedMount};

fn config(name: &str, readonly: bool) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName(name.into()),
        MountOption::Subtype(name.into()),
        MountOption::DefaultPermissions,
        // Device nodes are kept as metadata; none may open a host device through the
        // mount, nor a set-ID program made in it run with another's privileges.
        MountOption::NoDev,
        MountOption::NoSuid,
        if readonly {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    c.acl = fuser::SessionACL::All;
    // Two workers: a slow read does not block other callers.
    c.n_threads = Some(2);
    c
}

/// How the kernel hands requests to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Per-CPU io_uring queues (Linux 6.14+ with the fuse module's `enable_uring` on).
    IoUring,
    /// Reads and writes on `/dev/fuse`.
    DevFuse,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::IoUring => "io_uring",
            Transport::DevFuse => "dev-fuse",
        }
    }
}

/// A session served on background threads; dropping `background` unmounts.
pub struct Mounted {
    pub background: fuser::BackgroundSession,
    pub transport: Transport,
}

/// The FUSE adapter as the services' `Mounter`.
pub struct FuseMounter;

impl Mounter for FuseMounter {
    fn mount(&self, session: Arc<MountFs>, dir: &Path) -> crate::Result<Box<dyn ServedMount>> {
        let mounted = spawn_shared(session, dir).map_err(|e| crate::Error::MountFailed {
            dir: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Box::new(mounted))
    }

    fn open_device(&self) -> crate::Result<std::os::fd::OwnedFd> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| crate::Error::MountFailed {
                dir: "/dev/fuse".into(),
                reason: format!("opening the FUSE device: {e}"),
            })?;
        Ok(dev.into())
    }

    fn serve_device(
        &self,
        session: Arc<MountFs>,
        dev: std::os::fd::OwnedFd,
    ) -> crate::Result<Box<dyn ServedMount>> {
        let failed = |e: std::io::Error| crate::Error::MountFailed {
            dir: "/dev/fuse".into(),
            reason: e.to_string(),
        };
        let (session, transport) = from_device(session, dev).map_err(failed)?;
        Ok(Box::new(Mounted {
            background: session.spawn().map_err(failed)?,
            transport,
        }))
    }
}

impl ServedMount for Mounted {
    fn transport(&self) -> &str {
        self.transport.as_str()
    }

    fn is_finished(&self) -> bool {
        self.background.guard.is_finished()
    }

    fn unmount(self: Box<Self>) -> std::io::Result<()> {
        self.background.umount_and_join()
    }

    fn join(self: Box<Self>) -> std::io::Result<()> {
        self.background.join()
    }
}

/// Mount `backend` at `dir` as file system `name`: INIT is answered before this returns, and
/// when it agreed to io_uring the ring workers are started (they exit when the file system
/// is unmounted).
fn mount(
    backend: Arc<dyn Backend>,
    name: &str,
    dir: &Path,
) -> std::io::Result<(Session<Fs>, Transport)> {
    answer(backend, |fs, backend| {
        Session::new(fs, dir, &config(name, backend.readonly()))
    })
}

/// Answer a file system that someone else mounted with descriptor `dev` (a sandbox mounts
/// it inside its own namespace): INIT is read and answered before this returns.
fn from_device(
    backend: Arc<dyn Backend>,
    dev: std::os::fd::OwnedFd,
) -> std::io::Result<(Session<Fs>, Transport)> {
    answer(backend, |fs, backend| {
        let c = config("avfs", backend.readonly());
        Session::from_fd(fs, dev, c.acl, c)
    })
}

/// Make the session with `open` (which answers INIT), then start the io_uring workers if
/// INIT agreed to them.
fn answer(
    backend: Arc<dyn Backend>,
    open: impl FnOnce(Fs, &Arc<dyn Backend>) -> std::io::Result<Session<Fs>>,
) -> std::io::Result<(Session<Fs>, Transport)> {
    let uring = Arc::new(AtomicBool::new(false));
    let fs = Fs {
        session: backend.clone(),
        uring: uring.clone(),
    };
    if uring_wanted() {
        ring::enable();
    }
    let session = open(fs, &backend)?;
    if !uring.load(Ordering::SeqCst) {
        return Ok((session, Transport::DevFuse));
    }
    let dev = session.as_fd().try_clone_to_owned()?;
    ring::start(dev, backend)?;
    Ok((session, Transport::IoUring))
}

/// Serve `session` at `dir` until it is unmounted. Blocks.
pub fn serve(session: MountFs, dir: &Path) -> std::io::Result<()> {
    serve_backend(Arc::new(session), "avfs", dir, |_| {})
}

/// Serve any backend as file system `name` at `dir`, exactly as `avfs mount` serves a
/// session (options, caching, transport), until it is unmounted. Blocks; `mounted` is
/// told the transport once the mount answers.
pub fn serve_backend(
    backend: Arc<dyn Backend>,
    name: &str,
    dir: &Path,
    mounted: impl FnOnce(Transport),
) -> std::io::Result<()> {
    let (session, transport) = mount(backend, name, dir)?;
    mounted(transport);
    session.run()
}

/// Serve `session` at `dir` on background threads.
pub fn spawn(session: MountFs, dir: &Path) -> std::io::Result<Mounted> {
    spawn_shared(Arc::new(session), dir)
}

/// Mount a session the caller keeps a handle to (to record its changes between commands).
pub fn spawn_shared(session: Arc<MountFs>, dir: &Path) -> std::io::Result<Mounted> {
    let (mounted, transport) = mount(session, "avfs", dir)?;
    Ok(Mounted {
        background: mounted.spawn()?,
        transport,
    })
}
