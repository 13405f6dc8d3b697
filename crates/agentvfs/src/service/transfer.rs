//! Moving trees between the host and a workspace: `import` (recursive, modes, symlinks,
//! hard links and times preserved, optional .gitignore rules, one transaction per batch)
//! and `export`.

use std::collections::HashMap;
use std::fs::{self, File, FileTimes};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::node::{Attrs, Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{BatchEnd, Edit, View, Workspace};

/// Entries per import transaction, and the byte budget that also closes a batch.
const BATCH_ENTRIES: usize = 4096;
const BATCH_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct TransferReport {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, device nodes and sockets.
    pub special: u64,
    /// Extra names of nodes already counted above (hard links), kept as hard links.
    pub hard_links: u64,
    pub bytes: u64,
    /// Host entries that were not transferred (a file type avfs does not keep), with the
    /// reason.
    pub skipped: Vec<String>,
}

/// Progress callback: (entries so far, bytes so far).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// What `export` and `apply` say of a device node they do not make.
pub(crate) const DEVICE_SKIPPED: &str = "a device node, not made on the host (see --devices)";

/// How `export` writes the host tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Write into a non-empty directory, overwriting what is there.
    pub force: bool,
    /// Make device nodes (see `ApplyOptions::devices`); otherwise they are listed in
    /// `skipped`.
    pub devices: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Skip what `.gitignore` / `.ignore` files exclude (and `.git/` itself).
    pub gitignore: bool,
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// A host entry's mode, owner and times as the vault keeps them.
pub(crate) fn host_attrs(meta: &fs::Metadata) -> Attrs {
    Attrs {
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        atime: ns(meta.atime(), meta.atime_nsec()),
        mtime: ns(meta.mtime(), meta.mtime_nsec()),
        ctime: ns(meta.ctime(), meta.ctime_nsec()),
    }
}

/// A host entry read and ready to write.
enum Staged {
    Dir(VPath, Attrs),
    File(VPath, Attrs, Vec<u8>),
    Symlink(VPath, Attrs, String),
    /// A FIFO, device node or socket.
    Special(VPath, Attrs, NodeKind),
    /// Another name of the file imported at the second path.
    HardLink(VPath, VPath),
}

/// Import the contents of host directory `host` into `dest` (created if missing).
pub fn import(
    ws: &Workspace,
    host: &Path,
    dest: &VPath,
    opts: ImportOptions,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let meta = fs::metadata(host).map_err(|e| Error::io("reading", host, e))?;
    if !meta.is_dir() {
        return Err(Error::invalid(format!(
            "{} is not a directory",
            host.display()
        )));
    }
    let mut walker = ignore::WalkBuilder::new(host);
    walker
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if opts.gitignore {
        walker
            .git_ignore(true)
            .git_exclude(true)
            .ignore(true)
            .require_git(false)
            .filter_entry(|e| e.file_name() != ".git");
    }
    // The batches below are one operation: a batch the vault records when it ends, or,
    // if this process dies part-way, at the next change anyone logs.
    let label = dest.display();
    let start = ws.last_op_id()?.unwrap_or(0);
    ws.begin_batch("import", &label)?;
    let walked = import_entries(ws, host, dest, walker, progress);
    match walked {
        Ok(report) => {
            ws.record_batch("import", &label, BatchEnd::Always)?;
            Ok(report)
        }
        Err(e) => {
            // Nothing half-imported stays: record what got in, then revert exactly the
            // import's own entries (other writers' changes meanwhile stay). A change
            // made to an imported file meanwhile keeps that part (revert_conflict).
            ws.record_batch("import", &label, BatchEnd::IfChanged)?;
            let mine: Vec<i64> = ws
                .op_log(usize::MAX >> 1)?
                .into_iter()
                .take_while(|o| o.id > start)
                .filter(|o| o.kind == "import" && o.description == label)
                .map(|o| o.id)
                .collect();
            for id in mine {
                if ws.rollback("import", Some(id)).is_err() {
                    break;
                }
            }
            Err(e)
        }
    }
}

fn import_entries(
    ws: &Workspace,
    host: &Path,
    dest: &VPath,
    walker: ignore::WalkBuilder,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let mut report = TransferReport::default();
    let mut batch: Vec<Staged> = Vec::new();
    let mut batch_bytes = 0u64;
    let mut dirs: Vec<(VPath, Attrs)> = Vec::new();
    // Host files with several names, by (device, inode): the first name imported.
    let mut linked: HashMap<(u64, u64), VPath> = HashMap::new();
    ws.edit_batch("import", &[dest], |e| e.mkdir(dest, true, 0o755))?;
    for entry in walker.build() {
        let entry =
            entry.map_err(|e| Error::invalid(format!("walking {}: {e}", host.display())))?;
        let rel = entry.path().strip_prefix(host).unwrap_or(entry.path());
        if rel.as_os_str().is_empty() {
            continue;
        }
        let rel_str = rel.to_str().ok_or_else(|| Error::InvalidPath {
            path: rel.display().to_string(),
            reason: "host file name is not UTF-8".into(),
        })?;
        let path = VPath::parse(&format!("{}/{rel_str}", dest.as_str()))?;
        let meta = entry
            .path()
            .symlink_metadata()
            .map_err(|e| Error::io("reading", entry.path(), e))?;
        let attrs = host_attrs(&meta);
        let ft = meta.file_type();
        let staged = if ft.is_dir() {
            report.dirs += 1;
            dirs.push((path.clone(), attrs.clone()));
            Staged::Dir(path, attrs)
        } else if meta.nlink() > 1
            && let Some(first) = linked.get(&(meta.dev(), meta.ino()))
        {
            report.hard_links += 1;
            Staged::HardLink(path, first.clone())
        } else if ft.is_file() {
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            let data = fs::read(entry.path()).map_err(|e| Error::io("reading", entry.path(), e))?;
            report.files += 1;
            report.bytes += data.len() as u64;
            batch_bytes += data.len() as u64;
            Staged::File(path, attrs, data)
        } else if ft.is_symlink() {
            let target = fs::read_link(entry.path())
                .map_err(|e| Error::io("reading link", entry.path(), e))?;
            report.symlinks += 1;
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            Staged::Symlink(path, attrs, target.to_string_lossy().into_owned())
        } else {
            let Some(kind) = Node::special_kind(meta.mode(), meta.rdev()) else {
                report
                    .skipped
                    .push(format!("{rel_str}: a file type avfs does not keep"));
                continue;
            };
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            report.special += 1;
            Staged::Special(path, attrs, kind)
        };
        batch.push(staged);
        if batch.len() >= BATCH_ENTRIES || batch_bytes >= BATCH_BYTES {
            write_batch(ws, dest, std::mem::take(&mut batch))?;
            batch_bytes = 0;
            progress(report.files + report.dirs + report.symlinks, report.bytes);
        }
    }
    write_batch(ws, dest, batch)?;
    // Adding children moved the directories' times; put the host's back.
    ws.edit_batch("import", &[dest], |e| {
        for (path, attrs) in &dirs {
            e.update(path, |n| {
                n.attrs = attrs.clone();
                Ok(())
            })?;
        }
        Ok(())
    })?;
    progress(report.files + report.dirs + report.symlinks, report.bytes);
    Ok(report)
}

fn write_batch(ws: &Workspace, dest: &VPath, batch: Vec<Staged>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    ws.edit_batch("import", &[dest], |e| {
        for staged in batch {
            write_staged(e, staged)?;
        }
        Ok(())
    })
}

fn write_staged(e: &mut Edit<'_>, staged: Staged) -> Result<()> {
    match staged {
        Staged::Dir(path, attrs) => match e.view().lookup(&path)? {
            Some((n, _)) if n.is_dir() => {
                e.update(&path, |n| {
                    n.attrs = attrs;
                    Ok(())
                })?;
            }
            _ => {
                let mut node = Node::empty_dir(attrs.mode, e.now());
                node.attrs = attrs;
                e.put_node(&path, node)?;
            }
        },
        Staged::File(path, attrs, data) => {
            let content = e.store_content(&data)?;
            let kind = NodeKind::File {
                size: data.len() as u64,
                content,
            };
            e.put_node(&path, Node::new(kind, attrs))?;
        }
        Staged::Symlink(path, attrs, target) => {
            e.put_node(&path, Node::new(NodeKind::Symlink { target }, attrs))?;
        }
        Staged::Special(path, attrs, kind) => e.put_node(&path, Node::new(kind, attrs))?,
        Staged::HardLink(path, first) => {
            // Importing over an earlier import: the name is made anew.
            if e.view().lookup(&path)?.is_some() {
                e.remove(&path, false)?;
            }
            e.link(&first, &path)?;
        }
    }
    Ok(())
}

fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// Export `src` (a directory or a single file) to `host`. Refuses to write into an existing
/// non-empty directory or over an existing file unless `force`. All or nothing: the tree
/// is written into a private staging directory beside `host` and moved into place only
/// when every entry was written, so a failure (a path the host cannot hold, a full disk)
/// leaves the host as it was and names the path that failed.
pub fn export(
    ws: &Workspace,
    src: &VPath,
    at: Option<&str>,
    host: &Path,
    opts: ExportOptions,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let ExportOptions { force, devices } = opts;
    if !force {
        match fs::symlink_metadata(host) {
            Ok(m) if m.is_dir() => {
                let mut it = fs::read_dir(host).map_err(|e| Error::io("reading", host, e))?;
                if it.next().is_some() {
                    return Err(Error::HostPathExists {
                        path: host.to_path_buf(),
                    });
                }
            }
            Ok(_) => {
                return Err(Error::HostPathExists {
                    path: host.to_path_buf(),
                });
            }
            Err(_) => {}
        }
    }
    if host
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(Error::invalid(format!(
            "export destination `{}` has a `..`: name the directory itself",
            host.display()
        )));
    }
    let host = std::path::absolute(host).map_err(|e| Error::io("resolving", host, e))?;
    // Stage in the nearest existing ancestor, so the final moves are renames within one
    // file system; missing parents are staged too.
    let anchor = host
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .ok_or_else(|| Error::invalid(format!("no existing parent of {}", host.display())))?
        .to_path_buf();
    let below = host.strip_prefix(&anchor).unwrap_or(&host).to_path_buf();
    let stage = Staging::new(&anchor)?;
    // Errors name the host path the entry was going to, not its staging place.
    let unstaged = |path: PathBuf| {
        path.strip_prefix(&stage.dir)
            .map(|rest| anchor.join(rest))
            .unwrap_or(path)
    };
    let report = write_tree(ws, src, at, &stage.dir.join(&below), devices, progress).map_err(
        |e| match e {
            Error::Io {
                context,
                path,
                source,
            } => Error::Io {
                context,
                path: unstaged(path),
                source,
            },
            Error::DiskFull {
                path: Some(path),
                reason,
            } => Error::DiskFull {
                path: Some(unstaged(path)),
                reason,
            },
            e => e,
        },
    )?;
    check_move(&stage.dir, &anchor, force)?;
    move_into(&stage.dir, &anchor)?;
    Ok(report)
}

/// A private directory (0700, a fresh name made with O_EXCL semantics), removed on drop.
struct Staging {
    dir: PathBuf,
}

impl Staging {
    fn new(parent: &Path) -> Result<Staging> {
        use std::os::unix::fs::DirBuilderExt;
        remove_stale_staging(parent);
        for attempt in 0u32.. {
            let name = format!(
                ".avfs-export-{}-{}",
                std::process::id(),
                blake3::hash(
                    &[
                        &crate::model::now_ns().to_le_bytes()[..],
                        &attempt.to_le_bytes()
                    ]
                    .concat()
                )
                .to_hex()
                .get(..12)
                .unwrap_or("0")
            );
            let dir = parent.join(name);
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Staging { dir }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => continue,
                Err(e) => return Err(Error::io("creating a staging directory in", parent, e)),
            }
        }
        unreachable!("the loop returns")
    }
}

/// Staging directories an export killed before it could clean up left in `parent`: each
/// names its process, so one whose process is gone is removed.
fn remove_stale_staging(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".avfs-export-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Move everything in `from` into `to`: an entry whose name is free (or an empty
/// directory) is renamed in whole; a directory onto an existing directory is merged, then
/// given the staged directory's mode and times; with `force`, anything else in the way is
/// replaced.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    for entry in fs::read_dir(from).map_err(|e| Error::io("reading", from, e))? {
        let entry = entry.map_err(|e| Error::io("reading", from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let staged = fs::symlink_metadata(&src).map_err(|e| Error::io("reading", &src, e))?;
        let existing = fs::symlink_metadata(&dst).ok();
        match existing {
            None => rename(&src, &dst)?,
            Some(e) if e.is_dir() && staged.is_dir() => {
                if fs::rename(&src, &dst).is_err() {
                    move_into(&src, &dst)?;
                    fs::set_permissions(&dst, staged.permissions())
                        .map_err(|e| Error::io("setting mode of", &dst, e))?;
                    set_times_from(&dst, &staged)?;
                }
            }
            // `check_move` refused anything else before a first move.
            Some(_) => {
                fs::remove_file(&dst).map_err(|e| Error::io("replacing", &dst, e))?;
                rename(&src, &dst)?;
            }
        }
    }
    Ok(())
}

/// Refuse, before anything moves, what `move_into` could not do whole: a name the host
/// already uses (unless `force`), and a host directory in the way of a file or link, which
/// even `force` does not delete. Changes nothing.
fn check_move(from: &Path, to: &Path, force: bool) -> Result<()> {
    for entry in fs::read_dir(from).map_err(|e| Error::io("reading", from, e))? {
        let entry = entry.map_err(|e| Error::io("reading", from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let staged = fs::symlink_metadata(&src).map_err(|e| Error::io("reading", &src, e))?;
        match fs::symlink_metadata(&dst).ok() {
            None => {}
            Some(e) if e.is_dir() && staged.is_dir() => check_move(&src, &dst, force)?,
            Some(e) if e.is_dir() => {
                return Err(Error::IsADirectory {
                    path: dst.display().to_string(),
                });
            }
            Some(_) if !force => return Err(Error::HostPathExists { path: dst }),
            Some(_) => {}
        }
    }
    Ok(())
}

fn rename(src: &Path, dst: &Path) -> Result<()> {
    fs::rename(src, dst).map_err(|e| Error::io("moving into place", dst, e))
}

fn set_times_from(path: &Path, meta: &fs::Metadata) -> Result<()> {
    set_times_ns(
        path,
        meta.atime() * 1_000_000_000 + meta.atime_nsec(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
    )
}

/// Write `src` as of `at` to `host`, which does not exist yet (it is in a staging tree).
fn write_tree(
    ws: &Workspace,
    src: &VPath,
    at: Option<&str>,
    host: &Path,
    devices: bool,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    if let Some(parent) = host.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
    }
    ws.read_at(at, |view| {
        let how = Writing {
            devices,
            skip: &|_, _, _| false,
            donor: None,
            linked: &mut HashMap::new(),
        };
        write_view(view, src, host, how, progress)
    })
}

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
struct Writing<'a, 's, 'd> {
    devices: bool,
    skip: &'a Skip<'s>,
    donor: Option<&'a Donor<'d>>,
    linked: &'a mut HashMap<u64, PathBuf>,
}

fn write_view(
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
    view.copy_node_to(node, &f)
        .map_err(|e| Error::io("writing", out, e))?;
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
/// but the host's security label (the node's are set after). False, with `out` not made, where it cannot be moved (on
/// another file system).
fn adopt_host_file(from: &Path, out: &Path, node: &Node) -> bool {
    if fs::rename(from, out).is_err() {
        return false;
    }
    let mut names = vec![0u8; 4096];
    let listed = loop {
        match rustix::fs::llistxattr(out, &mut names) {
            Ok(n) => break Ok(n),
            Err(rustix::io::Errno::RANGE) if names.len() < (1 << 20) => {
                names.resize(names.len() * 4, 0)
            }
            Err(e) => break Err(e),
        }
    };
    // Gone: the overlay's bookkeeping, a file capability, and whatever the node lacks
    // (its own are set after), but not the host's security label.
    let stale = |name: &[u8]| {
        name.starts_with(b"trusted.overlay.")
            || name.starts_with(b"user.overlay.")
            || name == b"security.capability"
            || !(name.starts_with(b"security.") || node.xattrs.keys().any(|k| k.as_bytes() == name))
    };
    let cleared = listed.is_ok_and(|n| {
        names[..n]
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty() && stale(s))
            .all(|name| rustix::fs::lremovexattr(out, name).is_ok())
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
