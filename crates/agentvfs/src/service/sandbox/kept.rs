//! A session's sandbox, kept across its commands (the supervisor's side; the init's is
//! `join`).
//!
//! One namespace, held by a process made for it, serves every command of the session. Its
//! workspace is covered, for each command, by an overlay whose lowest layer is the fork's
//! state when the namespace was made (over FUSE, with its caches warm from one command to
//! the next) and whose other lower layers are the upper layers of the session's earlier
//! commands, each already taken into the fork. So a command starts at once on what the
//! fork holds, and its own upper layer, ingested when it ends, is again only what it
//! wrote.
//!
//! A kept layer is a copy, on a tmpfs of the session's (at most [`STORE_BYTES`]), of the
//! command's upper layer, which is made on the host's disk. The copy is what lets the
//! overlay keep hard links whole: it follows a hard link of a lower layer through a
//! copy-up (its index) only if no two lower file systems share a UUID, and the FUSE layer
//! and many a host's disk both have none; a tmpfs has one. A command that wrote more than
//! the store holds is not kept: the next command gets a namespace made afresh.
//!
//! The layers stand for the fork only while nothing else changes it. The namespace is
//! made afresh, over the fork's state as it then is, before a command when the fork is
//! not where the last command left it (a rollback, a restore, a write from elsewhere, a
//! command whose writes were not all taken in), when the command's policy hides other
//! secrets or asks for another root, when the holder is gone, or past [`MAX_LAYERS`].

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Holder, Join, Launch, Layer, RunDir, SandboxReport, Served, join, runner};
use crate::error::{Error, Result};
use crate::model::LoggedOp;
use crate::model::id::ObjectId;
use crate::service::mount::MountFs;
use crate::service::mounter::Mounter;
use crate::service::secrets::SecretPaths;

/// Past this many kept layers the next command gets a namespace made afresh.
pub const MAX_LAYERS: usize = 24;

/// The most the kept layers of a session hold, in bytes and in inodes.
pub const STORE_BYTES: u64 = 256 << 20;
const STORE_INODES: u64 = 200_000;

/// A session's kept namespace, made when its first command runs.
pub struct Kept {
    runtime: PathBuf,
    held: Option<Held>,
    pending: Option<Pending>,
}

struct Held {
    holder: Holder,
    /// The kept layers' file system (the holder has it at `STAGE/l`).
    store: Layer,
    /// The fork's state that the workspace shows with every kept layer.
    shows: ObjectId,
    hidden: SecretPaths,
    /// The root the namespace was assembled for (bound paths, home, workspace path).
    layout: String,
    /// The kept layers, bottom first, as paths in the namespace.
    layers: Vec<PathBuf>,
    next: u64,
    /// The session's private directory: the commands' upper layers (`h/N`) and the
    /// holder's root. Removed after the holder has ended.
    dir: RunDir,
}

/// The upper layer of the command that just ran, until it is taken in.
struct Pending {
    /// Its number: the kept copy's name.
    n: String,
    /// As this process reaches it.
    upper: PathBuf,
    /// Its directory on the host's disk, removed once it is taken in.
    host: Option<PathBuf>,
    /// The run's quota-sized file system it lives on, if any.
    _layer: Option<Layer>,
    /// The fork's state the command started from.
    before: ObjectId,
}

impl Kept {
    /// A kept sandbox whose private directories go under `runtime` (`$AVFS_HOME/run`).
    pub fn new(runtime: PathBuf) -> Kept {
        Kept {
            runtime,
            held: None,
            pending: None,
        }
    }

    /// Run `launch` over the fork's state `before` in the kept namespace (made first if
    /// it must be, with `lower` as its lowest layer), in `dir` (the command's private
    /// directory). A writable run's upper layer lives on `quota` when given; take it in
    /// from [`Kept::upper`], then say how that went with [`Kept::took`].
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        dir: &RunDir,
        launch: &Launch<'_>,
        before: ObjectId,
        readonly: bool,
        lower: impl FnOnce() -> Result<MountFs>,
        secrets: &SecretPaths,
        quota: Option<Layer>,
        mounter: &dyn Mounter,
    ) -> Result<(runner::RunResult, SandboxReport)> {
        self.pending = None;
        let layout = launch.fingerprint()?;
        let stale = match &mut self.held {
            Some(h) => {
                h.shows != before
                    || h.hidden != *secrets
                    || h.layout != layout
                    || h.layers.len() >= MAX_LAYERS
                    || !h.holder.alive()
            }
            None => true,
        };
        if stale {
            self.end()?;
            let kept_dir = RunDir::create(&self.runtime)?;
            let uppers = kept_dir.path().join("h");
            std::fs::create_dir(&uppers).map_err(|e| Error::io("creating", &uppers, e))?;
            let store = Layer::sized(Some(STORE_BYTES), Some(STORE_INODES))?;
            let lower = Arc::new(lower()?);
            let holder = super::hold(&kept_dir, launch, lower, &uppers, &store, mounter)?;
            self.held = Some(Held {
                holder,
                store,
                shows: before,
                hidden: secrets.clone(),
                layout,
                layers: Vec::new(),
                next: 0,
                dir: kept_dir,
            });
        }
        let h = self.held.as_mut().expect("made above");
        let stage = Path::new(join::STAGE);
        let mut lowers: Vec<PathBuf> = h.layers.iter().rev().cloned().collect();
        lowers.push(stage.join("lower"));
        let n = h.next.to_string();
        h.next += 1;
        let layer_at = stage.join("q").join(&n);
        let mut upper = None;
        let mut quota = if readonly { None } else { quota };
        if !readonly {
            let (inside, reached, host) = match &quota {
                Some(layer) => (layer_at.clone(), layer.path(""), None),
                None => {
                    let host = h.dir.path().join("h").join(&n);
                    std::fs::create_dir(&host).map_err(|e| Error::io("creating", &host, e))?;
                    (stage.join("h").join(&n), host.clone(), Some(host))
                }
            };
            for (d, mode) in [("u", 0o755), ("w", 0o700)] {
                let p = reached.join(d);
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(mode)
                    .create(&p)
                    .map_err(|e| Error::io("creating", &p, e))?;
            }
            upper = Some((inside.join("u"), inside.join("w")));
            self.pending = Some(Pending {
                n: n.clone(),
                upper: reached.join("u"),
                host,
                _layer: None,
                before,
            });
        }
        let join = Join {
            holder: h.holder.pidfd.as_raw_fd(),
            lowers,
            upper,
        };
        let ran = super::run(
            dir,
            launch,
            Served::Joined { join, layer_at },
            quota.as_ref(),
            mounter,
        );
        if let Some(p) = &mut self.pending {
            p._layer = quota.take();
        }
        ran
    }

    /// Where the upper layer of the command that just ran is, to take it in (none for a
    /// read-only run).
    pub fn upper(&self) -> Option<PathBuf> {
        self.pending.as_ref().map(|p| p.upper.clone())
    }

    /// The command that just ran was taken into the fork as `op`, all of it; `None`: it
    /// was not, or not all of it (a refused path, an ingest that failed). Its layer is
    /// kept below the next commands only if the fork is now exactly what the workspace
    /// shows with it: nothing else changed the fork meanwhile.
    pub fn took(&mut self, op: Option<&LoggedOp>) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let keep = match (op, &mut self.held) {
            (Some(op), Some(h)) if op.before == p.before && h.shows == p.before => {
                if op.after == op.before {
                    // Nothing changed: the workspace shows the fork without this layer.
                    Ok(())
                } else {
                    let copy = h.store.path(&p.n);
                    match copy_layer(&p.upper, &copy) {
                        Ok(()) => {
                            h.layers.push(Path::new(join::STAGE).join("l").join(&p.n));
                            h.shows = op.after;
                            Ok(())
                        }
                        Err(e) => {
                            let _ = std::fs::remove_dir_all(&copy);
                            Err(e)
                        }
                    }
                }
            }
            _ => Err(std::io::Error::other("not taken in whole")),
        };
        if let Some(host) = &p.host {
            let _ = std::fs::remove_dir_all(host);
        }
        if keep.is_err() {
            let _ = self.end();
        }
    }

    /// End the kept namespace (the next command makes a new one).
    pub fn end(&mut self) -> Result<()> {
        self.pending = None;
        match self.held.take() {
            Some(h) => {
                let ended = h.holder.end();
                drop(h.dir);
                ended
            }
            None => Ok(()),
        }
    }

    /// How many layers the next command would find below its own (for tests and
    /// diagnostics).
    pub fn depth(&self) -> Option<usize> {
        self.held.as_ref().map(|h| h.layers.len())
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// Copy the upper layer `from` to `to` as the overlay reads it: directories with their
/// opaque marks, whiteouts, files with their hard links within the layer, symlinks,
/// modes, owners, times and extended attributes (the overlay's own included).
///
/// Refused: a layer with a file that has more links than names in it. That is a hard
/// link of a lower layer the command wrote through: the overlay's index (in its work
/// directory, which a kept layer does not have) shows the file's other names, in the
/// layers below, with the new content; as a lower layer, this one would not.
fn copy_layer(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut links = Links::default();
    copy_entry(from, to, &mut links)?;
    match links.names.iter().find(|(_, (nlink, names))| nlink > names) {
        Some(_) => Err(std::io::Error::other(
            "a hard link of a lower layer was written through",
        )),
        None => Ok(()),
    }
}

/// The files with several links met in a layer: by inode, the first copy made, and the
/// link count against the names seen.
#[derive(Default)]
struct Links {
    first: std::collections::HashMap<u64, PathBuf>,
    names: std::collections::HashMap<u64, (u64, u64)>,
}

fn copy_entry(from: &Path, to: &Path, links: &mut Links) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(from)?;
    let ft = meta.file_type();
    if ft.is_dir() {
        std::fs::create_dir(to)?;
        let mut entries: Vec<_> = std::fs::read_dir(from)?.collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            copy_entry(&e.path(), &to.join(e.file_name()), links)?;
        }
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            links.names.entry(meta.ino()).or_insert((meta.nlink(), 0)).1 += 1;
            if let Some(first) = links.first.get(&meta.ino()) {
                return std::fs::hard_link(first, to);
            }
        }
        std::fs::copy(from, to)?;
        if meta.nlink() > 1 {
            links.first.insert(meta.ino(), to.to_path_buf());
        }
    } else if ft.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
    } else {
        // Whiteouts (0/0 character devices), and the fifos and devices a command made.
        let kind = if ft.is_char_device() {
            rustix::fs::FileType::CharacterDevice
        } else if ft.is_block_device() {
            rustix::fs::FileType::BlockDevice
        } else if ft.is_fifo() {
            rustix::fs::FileType::Fifo
        } else {
            return Err(std::io::Error::other(format!(
                "{}: a file type a layer does not keep",
                from.display()
            )));
        };
        rustix::fs::mknodat(
            rustix::fs::CWD,
            to,
            kind,
            rustix::fs::Mode::from_raw_mode(meta.mode() & 0o7777),
            meta.rdev(),
        )?;
    }
    for name in super::ingest::xattr_names(from) {
        if let Some(value) = super::ingest::get_xattr(from, &name) {
            rustix::fs::lsetxattr(to, name.as_str(), &value, rustix::fs::XattrFlags::empty())?;
        }
    }
    rustix::fs::chownat(
        rustix::fs::CWD,
        to,
        Some(rustix::process::Uid::from_raw(meta.uid())),
        Some(rustix::process::Gid::from_raw(meta.gid())),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    if !ft.is_symlink() {
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
    }
    let ts = |s: i64, ns: i64| rustix::fs::Timespec {
        tv_sec: s,
        tv_nsec: ns as _,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        to,
        &rustix::fs::Timestamps {
            last_access: ts(meta.atime(), meta.atime_nsec()),
            last_modification: ts(meta.mtime(), meta.mtime_nsec()),
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    Ok(())
}
