//! What the services need from a file-system adapter: serve a `MountFs` at a
//! directory. The FUSE adapter (`crate::fuse::FuseMounter`) implements it; the services take
//! it by injection, so none of them imports an adapter.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use super::mount::MountFs;
use crate::error::{Error, Result};

/// Serves mounted file systems (`MountFs`) as real directories.
pub trait Mounter: Send + Sync {
    /// Serve `session` at `dir` (answering requests on background threads) until the
    /// returned mount is unmounted, from here or from outside.
    fn mount(&self, session: Arc<MountFs>, dir: &Path) -> Result<Box<dyn ServedMount>>;

    /// Whether mounts can be made at all; a clear error where they cannot, before any
    /// work is done.
    fn available(&self) -> Result<()> {
        Ok(())
    }

    /// Open a file-system device (`/dev/fuse`) for a mount someone else makes with it
    /// (a sandbox, inside its own mount namespace).
    fn open_device(&self) -> Result<OwnedFd> {
        Err(Error::FuseUnavailable)
    }

    /// Answer the file system mounted with `dev` (from `open_device`), on background
    /// threads, until that mount goes away. Call it once the mount exists: it reads the
    /// kernel's first request before it returns.
    fn serve_device(&self, _session: Arc<MountFs>, _dev: OwnedFd) -> Result<Box<dyn ServedMount>> {
        Err(Error::FuseUnavailable)
    }
}

/// A session being served at a directory.
pub trait ServedMount: Send {
    /// How the kernel hands requests over (`io_uring`, `dev-fuse`).
    fn transport(&self) -> &str;
    /// The file system went away: unmounted from outside, or its server stopped.
    fn is_finished(&self) -> bool;
    /// Unmount (if still mounted) and wait until the session has ended.
    fn unmount(self: Box<Self>) -> std::io::Result<()>;
    /// Wait for a mount that already went away to end its session.
    fn join(self: Box<Self>) -> std::io::Result<()>;
}

/// A build without a file-system adapter: every mount is `fuse_unavailable`.
pub struct NoMounter;

impl Mounter for NoMounter {
    fn mount(&self, _session: Arc<MountFs>, _dir: &Path) -> Result<Box<dyn ServedMount>> {
        Err(Error::FuseUnavailable)
    }

    fn available(&self) -> Result<()> {
        Err(Error::FuseUnavailable)
    }
}
