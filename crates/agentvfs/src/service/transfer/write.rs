//! Writing a workspace state out to a host directory: export's staging tree, a sandbox's
//! copy of a fork, and the materialized trees of the tree cache (which may move a file in
//! from a donor instead of writing it).

use std::collections::HashMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::system_time;
use super::{DEVICE_SKIPPED, Progress, TransferReport};
use crate::error::{Error, Result};
use crate::model::node::{Attrs, Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{View, Workspace};

/// Which entries an export leaves out (and with a directory, everything in it).
pub(crate) type Skip<'s> = dyn Fn(&View<'_>, &VPath, &Node) -> bool + 's;

/// Write the fork's tree at `root` into the empty host directory `host` (a sandbox's copy
/// of the fork), leaving out device nodes and what `skip` says (secrets). Returns what
/// was left out, so an ingest does not take their absence for a deletion.
pub(crate) fn materialize(
    ws: &Workspace,
    root: crate::model::id::ObjectId,
    host: &Path,
    skip: &Skip<'_>,
) -> Result<Vec<VPath>> {
    let report = ws.read_root(root, |view| {
        let how = Writing {
            devices: false,
            skip,
            donor: None,
            linked: &mut HashMap::new(),
        };
        write_view(view, &VPath::root(), host, how, &mut |_, _| {})
    })?;
    report
        .skipped
        .iter()
        .map(|s| VPath::parse(s.split(": ").next().unwrap_or(s)))
        .collect()
}

/// Where a file's content already is on the host: for a file node at a path, a host file
/// known to hold exactly that content, with one link, on the same file system, which may
/// be moved into place instead of being written (an overlay's upper layer just ingested).
pub(crate) type Donor<'d> = dyn Fn(&VPath, &Node) -> Option<PathBuf> + 'd;

/// Write the entry at `src` in `view` (and everything below it) at the host path `host`,
/// which must not exist, as `materialize` does; returns what was left out. A file that
/// `donor` has is moved in from there, not written. `linked` has the host path of each
/// hard-linked file written so far (by inode): another name of one becomes a host link.
pub(crate) fn materialize_entry(
    view: &View<'_>,
    src: &VPath,
    host: &Path,
    skip: &Skip<'_>,
    donor: Option<&Donor<'_>>,
    linked: &mut HashMap<u64, PathBuf>,
) -> Result<Vec<VPath>> {
    let how = Writing {
        devices: false,
        skip,
        donor,
        linked,
    };
    let report = write_view(view, src, host, how, &mut |_, _| {})?;
    Ok(report
        .skipped
        .iter()
        .filter_map(|s| VPath::parse(s.split(": ").next().unwrap_or(s)).ok())
        .collect())
}

/// Give the host directory `dir` a node's mode, owner (as root) and times.
pub(crate) fn set_dir_attrs(dir: &Path, attrs: &Attrs) -> Result<()> {
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::lchown(dir, Some(attrs.uid), Some(attrs.gid))
            .map_err(|e| Error::io("setting owner of", dir, e))?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(attrs.mode))
        .map_err(|e| Error::io("setting mode of", dir, e))?;
    set_link_times(dir, attrs)
}

/// How `write_view` writes: device nodes or not, what it leaves out, where a file's
/// content may be moved from, and the host path of each hard-linked file written so far.
pub(super) struct Writing<'a, 's, 'd> {
    pub(super) devices: bool,
    pub(super) skip: &'a Skip<'s>,
    pub(super) donor: Option<&'a Donor<'d>>,
    pub(super) linked: &'a mut HashMap<u64, PathBuf>,
}

pub(super) fn write_view(
    view: &View<'_>,
    src: &VPath,
    host: &Path,
    how: Writing<'_, '_, '_>,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let Writing {
        devices,
        skip,
        donor,
        linked,
    } = how;
    let is_root = rustix::process::geteuid().is_root();
    {
        let mut report = TransferReport::default();
        let mut dirs: Vec<(PathBuf, Attrs)> = Vec::new();
        view.walk(src, &mut |path, node| {
            let rel = path.as_str()[src.as_str().len()..].trim_start_matches('/');
            let out = if rel.is_empty() {
                host.to_path_buf()
            } else {
                host.join(rel)
            };
            if node.kind.is_device() && !devices {
                report
                    .skipped
                    .push(format!("{}: {}", path.display(), DEVICE_SKIPPED));
                return Ok(());
            }
            if !path.is_root() && skip(view, path, node) {
                report.skipped.push(format!("{}: hidden", path.display()));
                return Ok(());
            }
            // Another name of a hard-linked node already written: a host hard link.
            if let Some(first) = node.link.and_then(|l| linked.get(&l.inode)) {
                fs::hard_link(first, &out).map_err(|e| Error::io("creating hard link", &out, e))?;
                report.hard_links += 1;
                progress(report.files + report.dirs + report.symlinks, report.bytes);
                return Ok(());
            }
            if let Some(l) = node.link {
                linked.insert(l.inode, out.clone());
            }
            match &node.kind {
                NodeKind::Dir { .. } => {
                    fs::create_dir_all(&out).map_err(|e| Error::io("creating", &out, e))?;
                    dirs.push((out.clone(), node.attrs.clone()));
                    report.dirs += 1;
                }
                NodeKind::File { .. } | NodeKind::Link { .. } | NodeKind::Inode { .. } => {
                    let given = donor.and_then(|d| d(path, node));
                    if !given.is_some_and(|from| adopt_host_file(&from, &out, node)) {
                        write_host_file(view, &out, node)?;
                    }
                    report.files += 1;
                    report.bytes += node.size();
                }
                NodeKind::Symlink { target } => {
                    std::os::unix::fs::symlink(target, &out)
                        .map_err(|e| Error::io("creating symlink", &out, e))?;
                    set_link_times(&out, &node.attrs)?;
                    report.symlinks += 1;
                }
                kind if kind.is_special() => {
                    make_special(&out, node)?;
                    set_link_times(&out, &node.attrs)?;
                    report.special += 1;
                }
                kind => {
                    return Err(Error::CorruptVault {
                        reason: format!("a view showed a stored {} node", kind.type_name()),
                    });
                }
            }
            if is_root {
                let _ = std::os::unix::fs::lchown(&out, Some(node.attrs.uid), Some(node.attrs.gid));
                // chown(2) clears set-user-ID and set-group-ID on a file, even for root:
                // give them back.
                if !node.is_dir()
                    && !matches!(node.kind, NodeKind::Symlink { .. })
                    && node.attrs.mode & 0o6000 != 0
                {
                    fs::set_permissions(&out, fs::Permissions::from_mode(node.attrs.mode))
                        .map_err(|e| Error::io("setting mode of", &out, e))?;
                }
            }
            // Extended attributes go with the file where the host takes them (`user.*`
            // everywhere; others as the host's rules allow), except `security.*`: a file
            // capability or label made in a workspace must not take effect on the host.
            if !matches!(node.kind, NodeKind::Symlink { .. }) {
                for (name, value) in node
                    .xattrs
                    .iter()
                    .filter(|(n, _)| !n.starts_with("security."))
                {
                    let _ = rustix::fs::lsetxattr(
                        &out,
                        name.as_str(),
                        value,
                        rustix::fs::XattrFlags::empty(),
                    );
                }
            }
            progress(report.files + report.dirs + report.symlinks, report.bytes);
            Ok(())
        })?;
        // Children change a directory's times; set them last, deepest first.
        for (dir, attrs) in dirs.iter().rev() {
            fs::set_permissions(dir, fs::Permissions::from_mode(attrs.mode))
                .map_err(|e| Error::io("setting mode of", dir, e))?;
            set_link_times(dir, attrs)?;
        }
        Ok(report)
    }
}

/// Make a FIFO, device node or socket name on the host (mknod(2)). A device node needs
/// CAP_MKNOD: without it the host's EPERM comes back, naming the path.
pub(crate) fn make_special(out: &Path, node: &Node) -> Result<()> {
    use rustix::fs::FileType;
    let (ty, what) = match node.kind {
        NodeKind::Fifo => (FileType::Fifo, "creating fifo"),
        NodeKind::CharDevice { .. } => (FileType::CharacterDevice, "creating device node"),
        NodeKind::BlockDevice { .. } => (FileType::BlockDevice, "creating device node"),
        NodeKind::Socket => (FileType::Socket, "creating socket"),
        _ => {
            return Err(Error::invalid(format!(
                "{} is not a special file",
                out.display()
            )));
        }
    };
    rustix::fs::mknodat(
        rustix::fs::CWD,
        out,
        ty,
        rustix::fs::Mode::from_raw_mode(node.attrs.mode),
        node.rdev(),
    )
    .map_err(|e| Error::io(what, out, e.into()))?;
    // mknod(2) applied the umask.
    fs::set_permissions(out, fs::Permissions::from_mode(node.attrs.mode))
        .map_err(|e| Error::io("setting mode of", out, e))
}

fn write_host_file(view: &View<'_>, out: &Path, node: &Node) -> Result<()> {
    let f = File::create_new(out).map_err(|e| Error::io("creating", out, e))?;
    view.copy_node_to(node, &f, out)?;
    f.set_permissions(fs::Permissions::from_mode(node.attrs.mode))
        .map_err(|e| Error::io("setting mode of", out, e))?;
    f.set_times(
        FileTimes::new()
            .set_accessed(system_time(node.attrs.atime))
            .set_modified(system_time(node.attrs.mtime)),
    )
    .map_err(|e| Error::io("setting times of", out, e))?;
    Ok(())
}

/// Move the host file `from`, which holds `node`'s content, to `out` (which does not
/// exist) and give it the node's mode and times, with none of its own extended attributes
/// but the host's security label (the node's are set after). False, with `out` not made,
/// where it cannot be moved (on another file system).
fn adopt_host_file(from: &Path, out: &Path, node: &Node) -> bool {
    if fs::rename(from, out).is_err() {
        return false;
    }
    // Gone: the overlay's bookkeeping, a file capability, and whatever the node lacks
    // (its own are set after), but not the host's security label.
    let stale = |name: &[u8]| {
        name.starts_with(b"trusted.overlay.")
            || name.starts_with(b"user.overlay.")
            || name == b"security.capability"
            || !(name.starts_with(b"security.") || node.xattrs.keys().any(|k| k.as_bytes() == name))
    };
    let cleared = super::xattrs::names(out).is_ok_and(|names| {
        names
            .iter()
            .filter(|n| stale(n))
            .all(|name| rustix::fs::lremovexattr(out, name.as_slice()).is_ok())
    });
    let done = cleared
        && fs::set_permissions(out, fs::Permissions::from_mode(node.attrs.mode)).is_ok()
        && set_link_times(out, &node.attrs).is_ok();
    if !done {
        // Written from the vault after all.
        let _ = fs::remove_file(out);
        return false;
    }
    true
}

fn set_link_times(path: &Path, attrs: &Attrs) -> Result<()> {
    set_times_ns(path, attrs.atime, attrs.mtime)
}

/// Set a path's access and modification times (ns since the epoch), not following a
/// symlink.
pub(crate) fn set_times_ns(path: &Path, atime: i64, mtime: i64) -> Result<()> {
    let ts = |ns: i64| rustix::fs::Timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| Error::io("setting times of", path, e.into()))
}
