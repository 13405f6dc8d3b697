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
use crate::model::id::ObjectId;
use crate::model::node::Attrs;
use crate::model::path::VPath;
use crate::model::{LoggedOp, Workspace};
use crate::service::mount::MountFs;
use crate::service::mounter::Mounter;
use crate::service::secrets::SecretPaths;
use crate::service::transfer::xattrs;

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
        // A quota-sized layer goes at the same place in every command's own namespace.
        let layer_at = stage.join("q");
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
    /// shows with it: nothing else changed the fork meanwhile, and every entry of the
    /// layer is in the fork as the layer has it, none of them hidden by `secrets`.
    pub fn took(&mut self, ws: &Workspace, op: Option<&LoggedOp>, secrets: &SecretPaths) {
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
                    match ws.read_root(op.after, |view| copy_layer(&p.upper, &copy, view, secrets))
                    {
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
            _ => Err(not_kept("not taken in whole")),
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

/// Copy the upper layer `from` to `to` as the overlay reads it (directories with their
/// opaque marks, whiteouts, files with their holes and their hard links within the layer,
/// symlinks, extended attributes, the overlay's own included), with each entry's mode,
/// owner and times as the fork (`view`, its state once the layer was taken in) has them.
///
/// Refused, so the layer is not kept: an entry the fork does not have as the layer shows
/// it; an entry the policy's secrets hide (`secrets`: by name, or by content, as a
/// private key), which the lower layer would not show; and a file that has more links
/// than names in the layer. That is a hard link of a lower layer the command wrote
/// through: the overlay's index (in its work directory, which a kept layer does not have)
/// shows the file's other names, in the layers below, with the new content; as a lower
/// layer, this one would not.
fn copy_layer(
    from: &Path,
    to: &Path,
    view: &crate::model::View<'_>,
    secrets: &SecretPaths,
) -> Result<()> {
    let mut c = Copy {
        view,
        secrets,
        links: Default::default(),
        names: Default::default(),
        dirs: Vec::new(),
    };
    c.entry(from, to, &VPath::root())?;
    // Children moved their directories' times: put the fork's back, deepest first.
    for (dir, attrs) in c.dirs.drain(..).rev() {
        set_times(&dir, &attrs)?;
    }
    match c.names.values().find(|(nlink, names)| nlink > names) {
        Some(_) => Err(not_kept("a hard link of a lower layer was written through")),
        None => Ok(()),
    }
}

fn not_kept(why: &str) -> Error {
    Error::SandboxFailed {
        reason: format!("the layer is not kept: {why}"),
    }
}

struct Copy<'v, 'w> {
    view: &'v crate::model::View<'w>,
    secrets: &'v SecretPaths,
    /// Files with several links: by inode, the first copy made.
    links: std::collections::HashMap<u64, PathBuf>,
    /// And their link count against the names met.
    names: std::collections::HashMap<u64, (u64, u64)>,
    dirs: Vec<(PathBuf, Attrs)>,
}

impl Copy<'_, '_> {
    fn entry(&mut self, from: &Path, to: &Path, at: &VPath) -> Result<()> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let io = |e: std::io::Error| Error::io("keeping the layer", to, e);
        let meta = std::fs::symlink_metadata(from).map_err(io)?;
        let ft = meta.file_type();
        let whiteout = ft.is_char_device() && meta.rdev() == 0;
        let node = if at.is_root() || whiteout {
            None
        } else {
            let Some((node, _)) = self.view.lookup(at)? else {
                return Err(not_kept(&format!("{} is not in the fork", at.display())));
            };
            if self.secrets.refuses(self.view, at, Some(&node))? {
                return Err(not_kept(&format!("{} is hidden", at.display())));
            }
            Some(node)
        };
        if ft.is_dir() {
            std::fs::create_dir(to).map_err(io)?;
            let mut entries: Vec<_> = std::fs::read_dir(from)
                .map_err(io)?
                .collect::<std::io::Result<_>>()
                .map_err(io)?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let name = e.file_name();
                let Some(name) = name.to_str() else {
                    return Err(not_kept("a name that is not UTF-8"));
                };
                self.entry(&e.path(), &to.join(name), &at.join(name))?;
            }
        } else if ft.is_file() {
            if meta.nlink() > 1 {
                self.names.entry(meta.ino()).or_insert((meta.nlink(), 0)).1 += 1;
                if let Some(first) = self.links.get(&meta.ino()) {
                    return std::fs::hard_link(first, to).map_err(io);
                }
            }
            copy_sparse(from, to, meta.len()).map_err(io)?;
            if meta.nlink() > 1 {
                self.links.insert(meta.ino(), to.to_path_buf());
            }
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(from).map_err(io)?, to).map_err(io)?;
        } else {
            // Whiteouts (0/0 character devices), and the fifos and devices a command made.
            let kind = if ft.is_char_device() {
                rustix::fs::FileType::CharacterDevice
            } else if ft.is_block_device() {
                rustix::fs::FileType::BlockDevice
            } else if ft.is_fifo() {
                rustix::fs::FileType::Fifo
            } else {
                return Err(not_kept(&format!("{} is a socket", at.display())));
            };
            rustix::fs::mknodat(
                rustix::fs::CWD,
                to,
                kind,
                rustix::fs::Mode::from_raw_mode(meta.mode() & 0o7777),
                meta.rdev(),
            )
            .map_err(|e| io(e.into()))?;
        }
        for name in xattrs::names(from).unwrap_or_default() {
            if let Some(value) = xattrs::get(from, &name) {
                rustix::fs::lsetxattr(to, name.as_slice(), &value, rustix::fs::XattrFlags::empty())
                    .map_err(|e| io(e.into()))?;
            }
        }
        let attrs = match &node {
            Some(n) => n.attrs.clone(),
            None => crate::service::transfer::host_attrs(&meta),
        };
        rustix::fs::chownat(
            rustix::fs::CWD,
            to,
            Some(rustix::process::Uid::from_raw(attrs.uid)),
            Some(rustix::process::Gid::from_raw(attrs.gid)),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io(e.into()))?;
        if !ft.is_symlink() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(attrs.mode & 0o7777))
                .map_err(io)?;
        }
        if ft.is_dir() {
            self.dirs.push((to.to_path_buf(), attrs));
            Ok(())
        } else {
            set_times(to, &attrs)
        }
    }
}

/// Copy the data of the regular file `from` (`len` bytes) to the new file `to`, leaving
/// its holes as holes.
fn copy_sparse(from: &Path, to: &Path, len: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let src = std::fs::File::open(from)?;
    let dst = std::fs::File::create_new(to)?;
    dst.set_len(len)?;
    let mut buf = vec![0u8; 1 << 16];
    for (start, end) in super::ingest::data_ranges(&src, len)? {
        let mut at = start;
        while at < end {
            let want = buf.len().min((end - at) as usize);
            let n = src.read_at(&mut buf[..want], at)?;
            if n == 0 {
                break;
            }
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
    }
    Ok(())
}

fn set_times(path: &Path, attrs: &Attrs) -> Result<()> {
    crate::service::transfer::set_times_ns(path, attrs.atime, attrs.mtime)
}
